//! The `roofline bench` report: the per-op table for the terminal, the JSON, and the HTML page
//! (the analysis report with the measured rates drawn next to the predicted ones and a
//! measured-against-predicted table). Formatting only: every figure comes from the
//! [`BenchReport`].

use std::fmt::Write as _;

use super::chart::{ChartSeries, Rgb, SeriesMarker, SeriesPoint};
use super::error::ReportError;
use super::html::{render_html_with, HtmlOptions, HtmlSection};
use super::markup::{escape, terminal_safe as safe, terminal_safe_lines};
use super::model::BenchReport;
use super::units::{fmt_bytes, fmt_seconds};

/// The report as JSON (schema `roofline-bench`).
pub fn render_bench_json(report: &BenchReport) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(report)
}

/// The per-op table, slowest first, `top` rows; model-provided text is escaped for the
/// terminal.
pub fn render_bench_table(report: &BenchReport, top: usize) -> String {
    let mut out = String::new();
    let a = &report.analysis;
    let _ = writeln!(
        out,
        "model  {}   device {} ({:?})   threads {}   runs {}   kernels: {}{}",
        safe(&a.model.source),
        safe(&a.device.id),
        a.device.source,
        report.threads,
        report.runs,
        safe(&report.kernel_isa),
        match report.nhwc_pairs {
            0 => String::new(),
            n => format!("; {n} pointwise → depthwise pair(s) NHWC"),
        }
    );
    let _ = writeln!(
        out,
        "latency  median {:.3} ms  (min {:.3}, max {:.3})   bound {:.3} ms   end-to-end {:+.0}%",
        report.latency_ms.median,
        report.latency_ms.min,
        report.latency_ms.max,
        report.predicted_latency_ms,
        report.errors.end_to_end_error * 100.0
    );
    if let Some(check) = &report.core_exchange {
        let describe = |record: &Option<crate::device::probe_record::ExchangeRecord>| match record {
            Some(r) => format!("{:.0} ns, {:.0} GB/s", r.round_trip_s * 1e9, r.read_gbs),
            None => "not measured (a vCPU was away)".to_string(),
        };
        let _ = writeln!(
            out,
            "cores    data exchange before {}, after {}{}",
            describe(&check.before),
            describe(&check.after),
            match (&check.reference, &check.reference_source) {
                (Some(_), Some(source)) => format!(
                    "   ({source}: {}; slowdown {:.1}x)",
                    describe(&check.reference),
                    check.slowdown.unwrap_or(1.0)
                ),
                _ => String::new(),
            }
        );
        if let Some(warning) = &check.warning {
            let _ = writeln!(out, "warning: {warning}");
        }
    }
    if let Some(decode) = &report.decode {
        let _ = writeln!(
            out,
            "decode   {} steps fed back (token = argmax, cache slid by one), cache {} x batch {}: {:.3} ms per token, {:.1} tokens/s",
            decode.steps,
            decode.cache_length,
            decode.batch,
            decode.time_per_token_ms,
            decode.tokens_per_s
        );
    }
    if let (Some(expected), Some(error)) = (
        report.expected_latency_ms,
        report.errors.expected_end_to_end_error,
    ) {
        let coverage = a.summary.expected_coverage.unwrap_or(0.0);
        let _ = writeln!(
            out,
            "expected {expected:.3} ms (calibrated; {:.0}% of the bound time covered)   end-to-end error {:+.0}%   per-op |error| median {:.0}%  p90 {:.0}%",
            coverage * 100.0,
            error * 100.0,
            report.errors.expected_median_abs_error.unwrap_or(0.0) * 100.0,
            report.errors.expected_p90_abs_error.unwrap_or(0.0) * 100.0
        );
    } else {
        let _ = writeln!(
            out,
            "predicted is the roofline bound; `roofline calibrate` adds an expected time per op"
        );
    }
    if let Some(clock) = &report.clock {
        let _ = writeln!(
            out,
            "clock    {:.2} GHz after the runs{}{}",
            clock.run_hz / 1e9,
            clock
                .calibration_hz
                .map(|hz| format!(" ({:.2} during calibration)", hz / 1e9))
                .unwrap_or_default(),
            clock
                .run_fma_gflops
                .map(|now| format!(
                    "; an FMA block {now:.1} GFLOP/s{}",
                    clock
                        .calibration_fma_gflops
                        .map(|then| format!(" ({then:.1} during calibration)"))
                        .unwrap_or_default()
                ))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "bound per-op |error|  median {:.0}%  p90 {:.0}%   activations {} planned ({} without reuse), weights {}",
        report.errors.median_abs_error * 100.0,
        report.errors.p90_abs_error * 100.0,
        fmt_bytes(report.peak_activation_bytes as f64),
        fmt_bytes(report.unplanned_activation_bytes as f64),
        fmt_bytes(report.weights_bytes as f64)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<28} {:<18} {:>10} {:>10} {:>10} {:>9} {:>8} {:>8} {:>8}",
        "op", "type", "measured", "bound", "expected", "GFLOP/s", "GB/s", "of roof", "error"
    );
    let mut ops: Vec<_> = report.ops.iter().collect();
    ops.sort_by(|x, y| y.measured_s.total_cmp(&x.measured_s));
    for op in ops.iter().take(top) {
        let name: String = safe(&op.name).chars().take(28).collect();
        let _ = writeln!(
            out,
            "{:<28} {:<18} {:>10} {:>10} {:>10} {:>9.1} {:>8.1} {:>7.0}% {:>+7.0}%",
            name,
            safe(&op_label(report, op)),
            fmt_seconds(op.measured_s),
            fmt_seconds(op.predicted_s),
            op.expected_s.map(fmt_seconds).unwrap_or_else(|| "-".into()),
            op.measured_gflops,
            op.measured_gbs,
            op.roofline_fraction * 100.0,
            // Against the expected time where there is one, else against the bound.
            op.expected_error.unwrap_or(op.prediction_error) * 100.0
        );
    }
    if ops.len() > top {
        let _ = writeln!(
            out,
            "... {} more ops (--top N, or --format json for all)",
            ops.len() - top
        );
    }
    terminal_safe_lines(&out).into_owned()
}

/// The report as HTML: the analysis report with measured rates drawn next to the predicted
/// ones, and a measured-vs-predicted table.
pub fn render_bench_html(report: &BenchReport) -> Result<String, ReportError> {
    let analysis = &report.analysis;
    let points = report
        .ops
        .iter()
        .filter_map(|op| {
            let node = &analysis.nodes[op.node_index];
            let intensity = node.intensity?;
            (op.flops > 0 && intensity > 0.0).then(|| SeriesPoint {
                op_index: Some(op.node_index),
                intensity,
                flops_per_s: op.flops as f64 / op.measured_s,
                label: Some(format!(
                    "{} measured {} ({:.0}% of its roof)",
                    op.name,
                    fmt_seconds(op.measured_s),
                    op.roofline_fraction * 100.0
                )),
            })
        })
        .collect();
    let series = ChartSeries {
        name: format!("measured ({} thread(s))", report.threads),
        colour: Rgb(20, 20, 20),
        marker: SeriesMarker::Diamond,
        points,
        connect_to_predicted: true,
    };
    let mut rows = String::new();
    let mut ops: Vec<_> = report.ops.iter().collect();
    ops.sort_by(|a, b| b.measured_s.total_cmp(&a.measured_s));
    for op in ops {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td><td class=\"num\">{:.0}%</td><td class=\"num\">{:+.0}%</td></tr>\n",
            escape(&op.name),
            escape(&op_label(report, op)),
            fmt_seconds(op.measured_s),
            fmt_seconds(op.predicted_s),
            op.expected_s.map(fmt_seconds).unwrap_or_else(|| "-".into()),
            op.measured_gflops,
            op.measured_gbs,
            op.roofline_fraction * 100.0,
            op.expected_error.unwrap_or(op.prediction_error) * 100.0
        ));
    }
    let body = format!(
        "<p>End-to-end latency over {} runs with {} thread(s): median {:.3} ms (min {:.3}, max {:.3}); roofline bound {:.3} ms ({:+.0}%){}. Per-op |error|: median {:.0}%, 90th percentile {:.0}%. Kernels: {}.</p>\n<table><thead><tr><th>op</th><th>type</th><th>measured</th><th>bound</th><th>expected</th><th>GFLOP/s</th><th>GB/s</th><th>of roof</th><th>error</th></tr></thead><tbody>\n{rows}</tbody></table>",
        report.runs, report.threads, report.latency_ms.median, report.latency_ms.min, report.latency_ms.max,
        report.predicted_latency_ms, report.errors.end_to_end_error * 100.0,
        match (report.expected_latency_ms, report.errors.expected_end_to_end_error) {
            (Some(expected), Some(error)) => format!("; expected (calibrated) {expected:.3} ms ({:+.0}%)", error * 100.0),
            _ => String::new(),
        },
        report.errors.median_abs_error * 100.0, report.errors.p90_abs_error * 100.0,
        escape(&report.kernel_isa)
    );
    let options = HtmlOptions {
        title: Some(format!(
            "{} measured on {}",
            analysis.model.source, analysis.device.name
        )),
        overlays: vec![(0, series)],
        extra_sections: vec![HtmlSection {
            id: "measured".into(),
            title: "Measured against predicted".into(),
            body_html: body,
        }],
        ..HtmlOptions::default()
    };
    render_html_with(std::slice::from_ref(analysis), &options)
}

/// The op's type as the analysis labels it (with its convolution algorithm when not direct).
fn op_label(report: &BenchReport, op: &super::model::OpMeasurement) -> String {
    report
        .analysis
        .nodes
        .get(op.node_index)
        .filter(|n| n.index == op.node_index)
        .map_or_else(|| op.op_type.clone(), |n| n.op_label())
}
