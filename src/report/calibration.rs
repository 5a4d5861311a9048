//! The `roofline calibrate` summary: per kernel class and thread count, the points measured,
//! the spread of measured/bound, and how well the table predicts its own points left out.

use std::fmt::Write;

use crate::device::calibration::Calibration;

pub fn render_calibration(calibration: &Calibration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "roofline calibrate {} — {} mode, {}, {:.1} s",
        calibration.tool_version,
        calibration.mode,
        calibration.measured_at,
        calibration.wall_time_s
    );
    if let Some(clock_hz) = calibration.clock_hz {
        let _ = writeln!(
            out,
            "core clock after each point's runs: {:.2} GHz{} (medians; `bench` reports its own runs' next to them)",
            clock_hz / 1e9,
            calibration
                .fma_gflops
                .map(|gflops| format!(", an FMA block after them {gflops:.1} GFLOP/s"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "{:<12} {:>3} {:>6} {:>22} {:>22}",
        "class", "thr", "points", "roof reached min/med/max", "fit error med / p90"
    );
    for table in &calibration.tables {
        let mut reached: Vec<f64> = table.points.iter().map(|p| 1.0 / p.ratio()).collect();
        reached.sort_by(f64::total_cmp);
        let median = reached.get(reached.len() / 2).copied().unwrap_or(0.0);
        let span = format!(
            "{:.0}% / {:.0}% / {:.0}%",
            reached.first().copied().unwrap_or(0.0) * 100.0,
            median * 100.0,
            reached.last().copied().unwrap_or(0.0) * 100.0
        );
        let fit = table
            .fit_error
            .as_ref()
            .map(|f| format!("{:.0}% / {:.0}%", f.median_abs * 100.0, f.p90_abs * 100.0))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<12} {:>3} {:>6} {:>22} {:>22}",
            table.class.name(),
            table.threads,
            table.points.len(),
            span,
            fit
        );
    }
    if let Some(fixed_s) = calibration
        .tables
        .iter()
        .map(|t| t.fixed_s)
        .find(|&f| f > 0.0)
    {
        let _ = writeln!(
            out,
            "fixed per-op cost {:.2} µs: added once to each op's expected time, the ratios are \
             of the time above it",
            fixed_s * 1e6
        );
    }
    for rate in &calibration.handoff {
        let _ = writeln!(
            out,
            "handoff at {} threads: one thread reads what the others just wrote at {:.1} GB/s \
             (median of {} pairs); charged to ops kept on one thread that write a like-sized \
             output from a split op's data",
            rate.threads, rate.read_gbs, rate.pairs
        );
    }
    let _ = writeln!(
        out,
        "roof reached = roofline bound ÷ measured time; fit error = |expected − measured| ÷ \
         measured with each point left out of its own table"
    );
    out
}
