//! The `roofline advise` HTML view: the report of the rewritten graph, with the original ops
//! drawn over its roofline as a second series (both rooflines on one chart), the passes with
//! their predicted and measured gains, the quantization decisions with their reasons and the
//! accuracy proxy, and the ops left alone with the reason read from their roofline position.

use super::error::ReportError;
use super::html::{render_html_with, HtmlOptions, HtmlSection};
use super::markup::escape;
use super::svg::{ChartSeries, Rgb, SeriesMarker, SeriesPoint};
use super::units;
use crate::advisor::AdviceReport;
use crate::analysis::NodeStatus;

/// The advice report as HTML: the after-analysis report with both rooflines (the before ops as an
/// overlay) and a section of rewrites with predicted and measured gains.
pub fn render_advice_html(report: &AdviceReport) -> Result<String, ReportError> {
    let before_points = report
        .before
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.flops > 0 && n.predicted_s > 0.0)
        .filter_map(|n| {
            Some(SeriesPoint {
                op_index: None,
                intensity: n.intensity?,
                flops_per_s: (n.flops + n.transcendental) as f64 / n.predicted_s,
                label: Some(format!("before: {} ({})", n.name, n.op_type)),
            })
        })
        .collect();
    let series = ChartSeries {
        name: "before rewrites".into(),
        colour: Rgb(150, 150, 150),
        marker: SeriesMarker::Square,
        points: before_points,
        connect_to_predicted: false,
    };
    let mut body = format!("<p>{}</p><table><thead><tr><th>pass</th><th>changes</th><th>predicted gain</th><th>measured gain</th><th>prediction error</th><th>bytes saved</th></tr></thead><tbody>", escape(&report.verification_note));
    for p in &report.passes {
        body.push_str(&format!(
            "<tr data-pass=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}x</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&p.name),
            escape(&p.name), p.changes.len(), p.predicted_speedup,
            p.measured_speedup.map(|m| format!("{m:.2}x")).unwrap_or_else(|| "-".into()),
            p.prediction_error.map(|e| format!("{:+.0}%", e * 100.0)).unwrap_or_else(|| "-".into()),
            units::fmt_bytes(p.bytes_saved as f64)
        ));
    }
    let o = &report.overall;
    body.push_str(&format!(
        "<tr data-pass=\"overall\"><td><b>overall</b></td><td></td><td class=\"num\">{:.2}x</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td></td></tr></tbody></table>",
        o.predicted_speedup,
        o.measured_speedup.map(|m| format!("{m:.2}x")).unwrap_or_else(|| "-".into()),
        o.prediction_error.map(|e| format!("{:+.0}%", e * 100.0)).unwrap_or_else(|| "-".into())
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
