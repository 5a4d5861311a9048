//! The `roofline advise` report: the terminal table (passes with predicted and measured gains,
//! top fusions, quantization decisions, ops left alone), the JSON, and the HTML view: the report
//! of the rewritten graph, with the original ops drawn over its roofline as a second series
//! (both rooflines on one chart), the passes with their predicted and measured gains, the
//! quantization decisions with their reasons and the accuracy proxy, and the ops left alone with
//! the reason read from their roofline position.

use std::fmt::Write as _;

use super::chart::{ChartSeries, Rgb, SeriesMarker, SeriesPoint};
use super::error::ReportError;
use super::html::{render_html_with, HtmlOptions, HtmlSection};
use super::markup::{escape, terminal_safe as safe, terminal_safe_lines};
use super::model::{AdviceReport, QuantizationReport};
use super::units::{self, fmt_bytes, fmt_seconds};
use crate::analysis::{Analysis, NodeStatus};

/// The report as JSON (schema `roofline-advice`).
pub fn render_advice_json(report: &AdviceReport) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(report)
}

/// The advice report as HTML: the after-analysis report with both rooflines (the before ops as an
/// overlay) and a section of rewrites with predicted and measured gains.
pub fn render_advice_html(report: &AdviceReport) -> Result<String, ReportError> {
    let series = original_ops_series(&report.before, "before rewrites", "before");
    let mut body = format!("<p>{}</p><table><thead><tr><th>pass</th><th>changes</th><th>bound gain</th><th>expected gain</th><th>measured gain</th><th>error of the bound's gain</th><th>error of the expected gain</th><th>bytes saved</th></tr></thead><tbody>", escape(&report.verification_note));
    for p in &report.passes {
        body.push_str(&format!(
            "<tr data-pass=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}x</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&p.name),
            escape(&p.name), p.changes.len(), p.predicted_speedup,
            speed(p.expected.expected_speedup),
            speed(p.measured_speedup),
            percent(p.prediction_error),
            percent(p.expected.expected_error),
            units::fmt_bytes(p.bytes_saved as f64)
        ));
    }
    let o = &report.overall;
    body.push_str(&format!(
        "<tr data-pass=\"overall\"><td><b>overall</b></td><td></td><td class=\"num\">{:.2}x</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td></td></tr></tbody></table>",
        o.predicted_speedup,
        speed(o.expected.expected_speedup),
        speed(o.measured_speedup),
        percent(o.prediction_error),
        percent(o.expected.expected_error)
    ));
    if let Some(q) = &report.quantization {
        body.push_str(&format!(
            "<h3>Quantization</h3><p>{}</p>",
            escape(&q.calibration)
        ));
        if let Some(a) = &q.accuracy {
            body.push_str(&format!(
                "<p>Accuracy proxy on {} calibration input(s): cosine similarity min {:.5} (mean {:.5}), max abs error {:.3e} against outputs up to {:.3e}{}.</p>",
                a.samples,
                a.cosine_min,
                a.cosine_mean,
                a.max_abs_error,
                a.max_abs_reference,
                a.top1_agreement.map(|t| format!(", top-1 agreement {:.1}%", t * 100.0)).unwrap_or_default()
            ));
        }
        body.push_str("<table><thead><tr><th>op</th><th>type</th><th>pass</th><th>decision</th><th>fp32</th><th>low precision (q/dq)</th><th>dynamic int8</th><th>gain</th><th>reason</th></tr></thead><tbody>");
        for d in &q.decisions {
            body.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{} ({})</td><td class=\"num\">{}</td><td class=\"num\">{:.2}x</td><td>{}</td></tr>",
                escape(&d.node),
                escape(&d.op_type),
                escape(&d.pass),
                escape(&d.decision),
                units::fmt_seconds(d.predicted_fp32_s),
                units::fmt_seconds(d.predicted_lowp_s),
                units::fmt_seconds(d.predicted_qdq_s),
                d.predicted_dynamic_s.map(units::fmt_seconds).unwrap_or_else(|| "-".into()),
                d.predicted_gain,
                escape(&d.reason)
            ));
        }
        body.push_str("</tbody></table>");
        for note in &q.notes {
            body.push_str(&format!("<p>{}</p>", escape(note)));
        }
    }
    body.push_str("<h3>Ops left alone</h3><ul>");
    for l in &report.left_alone {
        body.push_str(&format!(
            "<li class=\"left-alone\"><b>{}</b> ({}): {}</li>",
            escape(&l.node),
            escape(&l.op_type),
            escape(&l.reason)
        ));
    }
    body.push_str("</ul>");
    let options = HtmlOptions {
        title: Some(format!(
            "{} after rewrites on {}",
            report.after.model.source, report.after.device.name
        )),
        overlays: vec![(0, series)],
        extra_sections: vec![HtmlSection {
            id: "rewrites".into(),
            title: "Rewrites: predicted and measured gains".into(),
            body_html: body,
        }],
        ..HtmlOptions::default()
    };
    render_html_with(std::slice::from_ref(&report.after), &options)
}

/// A relative error as `+12%`, `-` when there is none.
fn percent(error: Option<f64>) -> String {
    error
        .map(|e| format!("{:+.0}%", e * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// One line of the pass table: the first cell left-aligned, the others right-aligned, each to
/// its width, one space apart.
fn table_line(widths: &[usize], cells: &[String]) -> String {
    let mut line = String::new();
    for (index, (cell, &width)) in cells.iter().zip(widths).enumerate() {
        if index == 0 {
            let _ = write!(line, "{cell:<width$}");
        } else {
            let _ = write!(line, " {cell:>width$}");
        }
    }
    line
}

/// A speed-up as `1.23x`, `-` when there is none.
pub(super) fn speed(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into())
}

/// The advice table; model-provided text is escaped for the terminal.
pub fn render_advice_table(report: &AdviceReport) -> String {
    let mut out = String::new();
    let b = &report.before;
    let _ = writeln!(
        out,
        "model  {}   device {} ({:?})   {}",
        safe(&b.model.source),
        safe(&b.device.id),
        b.device.source,
        safe(&report.verification_note)
    );
    let _ = writeln!(out);
    // With a calibrated device, the expected latency and gain stand next to the bound's, and
    // the error column judges the expected gain (the one meant to match).
    let calibrated = report.overall.expected.expected_speedup.is_some();
    let (widths, headers): (&[usize], &[&str]) = if calibrated {
        (
            &[9, 7, 11, 11, 12, 10, 9, 11, 10, 9],
            &[
                "pass",
                "changes",
                "bound",
                "expected",
                "saved bytes",
                "bound gain",
                "exp gain",
                "measured",
                "meas gain",
                "exp error",
            ],
        )
    } else {
        (
            &[9, 7, 12, 12, 10, 11, 10, 9],
            &[
                "pass",
                "changes",
                "predicted",
                "saved bytes",
                "pred gain",
                "measured",
                "meas gain",
                "error",
            ],
        )
    };
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let _ = writeln!(out, "{}", table_line(widths, &headers));
    for p in &report.passes {
        let mut cells = vec![
            safe(&p.name).into_owned(),
            p.changes.len().to_string(),
            fmt_seconds(p.predicted_latency_after_s),
        ];
        if calibrated {
            cells.push(
                p.expected
                    .expected_latency_after_s
                    .map(fmt_seconds)
                    .unwrap_or_else(|| "-".into()),
            );
        }
        cells.push(fmt_bytes(p.bytes_saved as f64));
        cells.push(format!("{:.2}x", p.predicted_speedup));
        if calibrated {
            cells.push(speed(p.expected.expected_speedup));
        }
        cells.push(
            p.measured_latency_after_ms
                .map(|m| format!("{m:.2} ms"))
                .unwrap_or_else(|| "-".into()),
        );
        cells.push(speed(p.measured_speedup));
        cells.push(percent(if calibrated {
            p.expected.expected_error
        } else {
            p.prediction_error
        }));
        let _ = writeln!(out, "{}", table_line(widths, &cells));
    }
    let o = &report.overall;
    let measured = match (o.measured_latency_before_ms, o.measured_latency_after_ms) {
        (Some(a), Some(b)) => format!("{a:.2} ms -> {b:.2} ms"),
        _ => "-".into(),
    };
    match (
        o.expected.expected_latency_before_s,
        o.expected.expected_latency_after_s,
    ) {
        (Some(before), Some(after)) => {
            let _ = writeln!(
                out,
                "overall   bound {} -> {} ({:.2}x); expected {} -> {} ({}); measured {} ({}); \
                 error of the expected gain {} (of the bound's {})",
                fmt_seconds(o.predicted_latency_before_s),
                fmt_seconds(o.predicted_latency_after_s),
                o.predicted_speedup,
                fmt_seconds(before),
                fmt_seconds(after),
                speed(o.expected.expected_speedup),
                measured,
                speed(o.measured_speedup),
                percent(o.expected.expected_error),
                percent(o.prediction_error)
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "overall   predicted {} -> {} ({:.2}x); measured {} ({}); prediction error {}",
                fmt_seconds(o.predicted_latency_before_s),
                fmt_seconds(o.predicted_latency_after_s),
                o.predicted_speedup,
                measured,
                speed(o.measured_speedup),
                percent(o.prediction_error)
            );
        }
    }
    if let Some(err) = o.max_relative_output_error {
        let _ = writeln!(out, "          outputs of the rewritten graph vs the original: max relative error {err:.1e}");
    }
    let groups: Vec<_> = report
        .passes
        .iter()
        .flat_map(|p| p.fusion_groups.iter())
        .collect();
    if !groups.is_empty() {
        let _ = writeln!(
            out,
            "\ntop fusions by predicted time saved (intensity unfused -> fused, FLOP/B)"
        );
        let mut sorted = groups.clone();
        sorted.sort_by(|a, b| {
            b.predicted_time_saved_s
                .total_cmp(&a.predicted_time_saved_s)
        });
        for g in sorted.iter().take(10) {
            let _ = writeln!(
                out,
                "  {:>10}  {:>6.2} -> {:<6.2}  {}",
                fmt_seconds(g.predicted_time_saved_s),
                g.intensity_unfused,
                g.intensity_fused,
                safe(&g.op_types.join("+"))
            );
        }
    }
    if let Some(q) = &report.quantization {
        render_quantization(&mut out, q);
    }
    if !report.left_alone.is_empty() {
        let _ = writeln!(out, "\nleft alone (largest remaining ops)");
        for l in report.left_alone.iter().take(6) {
            let _ = writeln!(
                out,
                "  {} ({}): {}",
                safe(&l.node),
                safe(&l.op_type),
                safe(&l.reason)
            );
        }
    }
    // Every model-provided field above is escaped; this pass is the net under a missed one.
    terminal_safe_lines(&out).into_owned()
}

fn render_quantization(out: &mut String, q: &QuantizationReport) {
    let _ = writeln!(
        out,
        "\nquantization ({})",
        if q.calibration.is_empty() {
            "no calibration".into()
        } else {
            safe(&q.calibration)
        }
    );
    if let Some(a) = &q.accuracy {
        let _ = writeln!(
            out,
            "  accuracy proxy vs fp32 on {} input(s): cosine min {:.5} mean {:.5}; max abs error {:.3e} (outputs up to {:.3e}){}",
            a.samples,
            a.cosine_min,
            a.cosine_mean,
            a.max_abs_error,
            a.max_abs_reference,
            a.top1_agreement
                .map(|t| format!("; top-1 agreement {:.1}%", t * 100.0))
                .unwrap_or_default()
        );
    }
    let mut kept: Vec<_> = q
        .decisions
        .iter()
        .filter(|d| d.decision == "fp32")
        .collect();
    let converted = q.decisions.len() - kept.len();
    let _ = writeln!(
        out,
        "  {} op(s) converted, {} left in fp32",
        converted,
        kept.len()
    );
    kept.sort_by(|a, b| b.predicted_fp32_s.total_cmp(&a.predicted_fp32_s));
    for d in kept.iter().take(8) {
        let _ = writeln!(
            out,
            "  kept fp32  {} ({}): {}",
            safe(&d.node),
            safe(&d.op_type),
            safe(&d.reason)
        );
    }
    let mut done: Vec<_> = q
        .decisions
        .iter()
        .filter(|d| d.decision != "fp32")
        .collect();
    done.sort_by(|a, b| b.predicted_fp32_s.total_cmp(&a.predicted_fp32_s));
    for d in done.iter().take(5) {
        let _ = writeln!(
            out,
            "  {:<9}  {} ({}): {} -> {} ({:.2}x; q/dq {}{})",
            safe(&d.decision),
            safe(&d.node),
            safe(&d.op_type),
            fmt_seconds(d.predicted_fp32_s),
            fmt_seconds(d.predicted_lowp_s),
            d.predicted_gain,
            fmt_seconds(d.predicted_qdq_s),
            d.predicted_dynamic_s
                .map(|s| format!("; dynamic int8 {}", fmt_seconds(s)))
                .unwrap_or_default()
        );
    }
    for n in &q.notes {
        let _ = writeln!(out, "  note: {}", safe(n));
    }
}

/// The costed ops of `original` as a grey overlay series for the chart of a rewritten model
/// (advise and compress draw both rooflines on one chart this way).
pub(super) fn original_ops_series(original: &Analysis, name: &str, label: &str) -> ChartSeries {
    let points = original
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.flops > 0 && n.predicted_s > 0.0)
        .filter_map(|n| {
            Some(SeriesPoint {
                op_index: None,
                intensity: n.intensity?,
                flops_per_s: (n.flops + n.transcendental) as f64 / n.predicted_s,
                label: Some(format!("{label}: {} ({})", n.name, n.op_type)),
            })
        })
        .collect();
    ChartSeries {
        name: name.into(),
        colour: Rgb(150, 150, 150),
        marker: SeriesMarker::Square,
        points,
        connect_to_predicted: false,
    }
}
