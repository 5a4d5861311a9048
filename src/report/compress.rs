//! Renders the `roofline compress` report: table, JSON and a self-contained HTML page with the
//! search trajectory (predicted, corrected and measured latency per step, accuracy proxy).

use std::fmt::Write as _;

use super::advice::{original_ops_series, speed};
use super::error::ReportError;
use super::html::{render_html_with, HtmlOptions, HtmlSection};
use super::markup::{escape, terminal_safe as safe};
use crate::report::model::compress::{CompressReport, Point};

pub fn render_compress_json(report: &CompressReport) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(report)? + "\n")
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"))
}

/// A relative error as a signed percentage, `-` when there is none.
fn signed_percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |e| format!("{:+.1}%", e * 100.0))
}

fn accuracy_text(point: &Point) -> String {
    let mut parts = Vec::new();
    if let Some(a) = &point.accuracy {
        if let Some(top1) = a.top1_agreement {
            parts.push(format!("top-1 agreement {:.1}%", top1 * 100.0));
        }
        parts.push(format!("cosine {:.4}", a.cosine_mean));
    }
    if let Some(e) = point.eval {
        parts.push(format!("eval {e}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn gmacs(macs: u64) -> String {
    format!("{:.3} GMAC", macs as f64 / 1e9)
}

pub fn render_compress_table(report: &CompressReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model  {}   device {}   target {} ({:.2} ms{})   {} thread(s)",
        safe(&report.model),
        safe(&report.device),
        safe(&report.target),
        report.target_latency_ms,
        if report.measured {
            ", measured"
        } else {
            ", predicted"
        },
        report.threads
    );
    let _ = writeln!(out, "predictor  {}", safe(&report.predictor));
    let _ = writeln!(out, "channels   {}", safe(&report.alignment_reason));
    let _ = writeln!(out, "accuracy   {}", safe(&report.accuracy_source));
    let _ = writeln!(
        out,
        "result     {}{}, search {:.1} s",
        if report.reached {
            ""
        } else {
            "target NOT reached: "
        },
        safe(&report.stop_reason),
        report.search_s
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<12} {:>12} {:>12} {:>14} {:>12}  accuracy",
        "", "predicted", "measured", "MACs", "params"
    );
    for (name, p) in [
        ("original", &report.original),
        ("compressed", &report.compressed),
    ] {
        let _ = writeln!(
            out,
            "{:<12} {:>12} {:>12} {:>14} {:>12}  {}",
            name,
            format!("{:.2} ms", p.predicted_latency_ms),
            ms(p.measured_latency_ms),
            gmacs(p.macs),
            format!("{:.2} M", p.params as f64 / 1e6),
            accuracy_text(p)
        );
    }
    let _ = writeln!(
        out,
        "speed-up     predicted {:.2}x (uncorrected {:.2}x)   measured {}   prediction error {}",
        report.predicted_speedup,
        report.uncorrected_speedup,
        speed(report.measured_speedup),
        signed_percent(report.prediction_error)
    );
    if !report.baselines.is_empty() {
        let _ = writeln!(out, "\nbaselines (same run)");
        for b in &report.baselines {
            let _ = writeln!(
                out,
                "  {:<18} predicted {:.2}x  measured {:>7}  {}  {}",
                safe(&b.name),
                b.predicted_speedup,
                speed(b.measured_speedup),
                gmacs(b.point.macs),
                accuracy_text(&b.point)
            );
            let _ = writeln!(out, "  {:<18} {}", "", safe(&b.description));
            if let Some(lead) = b.compressed_lead {
                let _ = writeln!(
                    out,
                    "  {:<18} the compressed model ran {lead:.2}x as fast as this baseline (median of rounds running both and the original side by side)",
                    ""
                );
            }
        }
    }
    let _ = writeln!(out, "\nsteps");
    let _ = writeln!(
        out,
        "{:>4} {:>11} {:>11} {:>11} {:>8}  {:<44} accuracy",
        "step", "predicted", "corrected", "measured", "checked", "action"
    );
    for (index, s) in report.steps.iter().enumerate() {
        let pareto = if report.pareto.contains(&index) {
            "*"
        } else {
            " "
        };
        let _ = writeln!(
            out,
            "{:>3}{pareto} {:>11} {:>11} {:>11} {:>3}/{:<4}  {:<44} cos {:.4}{}",
            s.step,
            format!("{:.2} ms", s.predicted_latency_ms),
            format!("{:.2} ms", s.corrected_latency_ms),
            ms(s.measured_latency_ms),
            s.candidates_checked,
            s.candidates_costed,
            safe(&s.action),
            s.accuracy.cosine_mean,
            s.accuracy
                .top1_agreement
                .map_or_else(String::new, |t| format!(", top-1 {:.1}%", t * 100.0))
        );
    }
    let _ = writeln!(out, "(* on the latency/accuracy Pareto front)");
    let _ = writeln!(out, "\nlayers (channel spaces)");
    for l in &report.layers {
        let _ = writeln!(
            out,
            "  {:<28} {:>5} -> {:<5} {}",
            safe(&l.space),
            l.channels,
            l.kept,
            safe(&l.reason)
        );
    }
    if !report.precision.is_empty() {
        let _ = writeln!(out, "\nprecision");
        for p in &report.precision {
            let _ = writeln!(
                out,
                "  {:<28} {:<5} {}",
                safe(&p.node),
                safe(&p.precision),
                safe(&p.reason)
            );
        }
    }
    for note in &report.notes {
        let _ = writeln!(out, "\nnote: {}", safe(note));
    }
    out
}

/// The trajectory chart: latency per step (predicted, corrected, measured) on the left axis,
/// the accuracy proxy (mean cosine) on the right.
fn trajectory_svg(report: &CompressReport) -> String {
    let (width, height, left, right, top, bottom) = (760.0, 320.0, 60.0, 60.0, 20.0, 40.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let mut latencies: Vec<(f64, f64, f64, Option<f64>, f64)> = vec![(
        0.0,
        report.original.predicted_latency_ms,
        report
            .original
            .measured_latency_ms
            .unwrap_or(report.original.predicted_latency_ms),
        report.original.measured_latency_ms,
        1.0,
    )];
    for s in &report.steps {
        latencies.push((
            s.step as f64,
            s.predicted_latency_ms,
            s.corrected_latency_ms,
            s.measured_latency_ms,
            s.accuracy.cosine_mean,
        ));
    }
    let max_step = latencies.last().map_or(1.0, |l| l.0).max(1.0);
    let max_ms = latencies
        .iter()
        .flat_map(|l| [l.1, l.2, l.3.unwrap_or(0.0)])
        .fold(report.target_latency_ms, f64::max)
        * 1.05;
    let x = |step: f64| left + plot_w * step / max_step;
    let y = |ms: f64| top + plot_h * (1.0 - ms / max_ms);
    let min_cos = latencies.iter().map(|l| l.4).fold(1.0, f64::min).min(0.9);
    let y_acc = |c: f64| top + plot_h * (1.0 - (c - min_cos) / (1.0 - min_cos).max(1e-9));
    let line = |points: Vec<(f64, f64)>, colour: &str, dash: &str| -> String {
        let path: Vec<String> = points
            .iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect();
        format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"/>",
            path.join(" ")
        )
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = write!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#999\"/>"
    );
    let target_y = y(report.target_latency_ms);
    let _ = write!(
        svg,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{target_y:.1}\" y2=\"{target_y:.1}\" stroke=\"#c33\" stroke-dasharray=\"6 3\"/><text x=\"{}\" y=\"{:.1}\" fill=\"#c33\">target {:.2} ms</text>",
        left + plot_w,
        left + 4.0,
        target_y - 4.0,
        report.target_latency_ms
    );
    svg.push_str(&line(
        latencies.iter().map(|l| (x(l.0), y(l.1))).collect(),
        "#888",
        "4 3",
    ));
    svg.push_str(&line(
        latencies.iter().map(|l| (x(l.0), y(l.2))).collect(),
        "#1f77b4",
        "",
    ));
    svg.push_str(&line(
        latencies.iter().map(|l| (x(l.0), y_acc(l.4))).collect(),
        "#2ca02c",
        "2 2",
    ));
    for l in &latencies {
        if let Some(m) = l.3 {
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#ff7f0e\"><title>step {}: measured {m:.2} ms</title></circle>",
                x(l.0),
                y(m),
                l.0
            );
        }
    }
    for i in 0..=4 {
        let ms_tick = max_ms * i as f64 / 4.0;
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{ms_tick:.1}</text>",
            left - 4.0,
            y(ms_tick) + 4.0
        );
        let cos_tick = min_cos + (1.0 - min_cos) * i as f64 / 4.0;
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#2ca02c\">{cos_tick:.3}</text>",
            left + plot_w + 4.0,
            y_acc(cos_tick) + 4.0
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">step</text><text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">latency (ms)</text></svg>",
        left + plot_w / 2.0,
        height - 8.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    svg
}

/// The compressed model's report page with the original ops drawn over its roofline, and a
/// section with the search: results, trajectory, steps, layers, precision, notes.
pub fn render_compress_html(report: &CompressReport) -> Result<String, ReportError> {
    let mut body = String::new();
    let _ = write!(
        body,
        "<p>{}: device <b>{}</b>, target <b>{}</b> ({:.2} ms, {}), {} thread(s). {}: {}.</p>",
        escape(&report.model),
        escape(&report.device),
        escape(&report.target),
        report.target_latency_ms,
        if report.measured {
            "measured on this CPU"
        } else {
            "predicted only"
        },
        report.threads,
        if report.reached {
            "Target reached"
        } else {
            "Target not reached"
        },
        escape(&report.stop_reason)
    );
    let _ = write!(
        body,
        "<ul><li>predictor: {}</li><li>channels: {}</li><li>accuracy: {}</li></ul>",
        escape(&report.predictor),
        escape(&report.alignment_reason),
        escape(&report.accuracy_source)
    );
    body.push_str("<table><thead><tr><th></th><th>predicted</th><th>measured</th><th>MACs</th><th>params</th><th>accuracy</th></tr></thead><tbody>");
    let mut rows: Vec<(String, &Point)> = vec![
        ("original".into(), &report.original),
        ("compressed".into(), &report.compressed),
    ];
    for b in &report.baselines {
        rows.push((format!("baseline: {}", b.name), &b.point));
    }
    for (name, p) in rows {
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"num\">{:.2} ms</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2} M</td><td>{}</td></tr>",
            escape(&name),
            p.predicted_latency_ms,
            ms(p.measured_latency_ms),
            gmacs(p.macs),
            p.params as f64 / 1e6,
            escape(&accuracy_text(p))
        );
    }
    let _ = write!(
        body,
        "</tbody></table><p>speed-up: predicted {:.2}x, measured {}, prediction error {}.</p>",
        report.predicted_speedup,
        speed(report.measured_speedup),
        signed_percent(report.prediction_error)
    );
    for b in &report.baselines {
        if let Some(lead) = b.compressed_lead {
            let _ = write!(
                body,
                "<p>against baseline {}: the compressed model ran {lead:.2}x as fast (median of rounds running both and the original side by side).</p>",
                escape(&b.name)
            );
        }
    }
    let _ = write!(
        body,
        "<h2>Trajectory</h2><p>grey dashed: predicted by the cost model; blue: corrected by the last measurement (per op and in total); orange dots: measured; green dotted: mean cosine of the outputs against the original (right axis).</p>{}",
        trajectory_svg(report)
    );
    body.push_str("<h2>Steps</h2><table><thead><tr><th>step</th><th>action</th><th>predicted</th><th>corrected</th><th>measured</th><th>MACs</th><th>cosine</th><th>top-1</th><th>Pareto</th></tr></thead><tbody>");
    for (index, s) in report.steps.iter().enumerate() {
        let _ = write!(
            body,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{:.2} ms</td><td class=\"num\">{:.2} ms</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.4}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            s.step,
            escape(&s.action),
            s.predicted_latency_ms,
            s.corrected_latency_ms,
            ms(s.measured_latency_ms),
            gmacs(s.macs),
            s.accuracy.cosine_mean,
            s.accuracy.top1_agreement.map_or_else(|| "-".into(), |t| format!("{:.1}%", t * 100.0)),
            if report.pareto.contains(&index) { "yes" } else { "" }
        );
    }
    body.push_str("</tbody></table><h2>Layers</h2><table><thead><tr><th>channel space</th><th>sources</th><th>channels</th><th>kept</th><th>decision</th></tr></thead><tbody>");
    for l in &report.layers {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&l.space),
            escape(&l.sources.join(", ")),
            l.channels,
            l.kept,
            escape(&l.reason)
        );
    }
    body.push_str("</tbody></table>");
    if !report.precision.is_empty() {
        body.push_str("<h2>Precision</h2><table><thead><tr><th>op</th><th>precision</th><th>why</th></tr></thead><tbody>");
        for p in &report.precision {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&p.node),
                escape(&p.precision),
                escape(&p.reason)
            );
        }
        body.push_str("</tbody></table>");
    }
    for note in &report.notes {
        let _ = write!(body, "<p class=\"note\">{}</p>", escape(note));
    }
    let options = HtmlOptions {
        title: Some(format!(
            "{} compressed for {}",
            report.after.model.source, report.after.device.name
        )),
        overlays: vec![(
            0,
            original_ops_series(&report.before, "original model", "original"),
        )],
        extra_sections: vec![HtmlSection {
            id: "compression".into(),
            title: "Compression: the search, predicted and measured".into(),
            body_html: body,
        }],
        ..HtmlOptions::default()
    };
    render_html_with(std::slice::from_ref(&report.after), &options)
}
