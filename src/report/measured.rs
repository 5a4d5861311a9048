//! The pieces of every analysis format that show a joined runtime profile
//! (`analyze --measured`): the summary lines of the table, the chart series of measured rates,
//! and the HTML card and cells. Formatting only: the figures are the analysis's
//! (`NodeAnalysis::measured_s`, `measured_efficiency`, `Analysis::measured`); the one derived
//! value is the chart's rate, FLOPs ÷ measured time, as bench's overlay draws it.

use std::fmt::Write as _;

use super::chart::{ChartSeries, Rgb, SeriesMarker, SeriesPoint};
use super::markup::{escape, percent, terminal_safe as safe};
use super::units::fmt_seconds;
use crate::analysis::model::MeasuredInfo;
use crate::analysis::{Analysis, NodeAnalysis};

/// "onnxruntime 1.32.0 (CPUExecutionProvider)".
fn runtime_text(info: &MeasuredInfo) -> String {
    let mut text = info.runtime.clone();
    if let Some(version) = &info.runtime_version {
        let _ = write!(text, " {version}");
    }
    if !info.providers.is_empty() {
        let _ = write!(text, " ({})", info.providers.join(", "));
    }
    text
}

fn names_text(names: &[String], total: usize) -> String {
    let mut text = names.join(", ");
    if total > names.len() {
        let _ = write!(text, ", … {} more", total - names.len());
    }
    text
}

/// The summary lines of the terminal table (escaped by the caller's net and here).
pub fn summary_lines(analysis: &Analysis) -> String {
    let mut out = String::new();
    let (Some(info), Some(total)) = (&analysis.measured, analysis.summary.measured_total_s) else {
        return out;
    };
    let _ = writeln!(
        out,
        "  measured         {} over {} of {} profile nodes{} ({}, median of {} run(s); {}); \
         reached = bound ÷ measured",
        fmt_seconds(total),
        info.matched_nodes,
        info.profile_nodes,
        info.run_median_s
            .map(|run| format!(", {} per run end to end", fmt_seconds(run)))
            .unwrap_or_default(),
        safe(&runtime_text(info)),
        info.runs,
        safe(&info.source)
    );
    if info.unmatched_profile_nodes > 0 {
        let _ = writeln!(
            out,
            "                   {} profile node(s) not in the model ({}): {}",
            info.unmatched_profile_nodes,
            fmt_seconds(info.unmatched_profile_s),
            safe(&names_text(
                &info.unmatched_profile_names,
                info.unmatched_profile_nodes
            ))
        );
    }
    if info.unmeasured_model_nodes > 0 {
        let _ = writeln!(
            out,
            "                   {} model node(s) without a time (fused or removed by the \
             runtime): {}",
            info.unmeasured_model_nodes,
            safe(&names_text(
                &info.unmeasured_model_names,
                info.unmeasured_model_nodes
            ))
        );
    }
    out
}

/// The measured rate of every joined op that does arithmetic, for the roofline chart.
pub fn measured_series(analysis: &Analysis) -> Option<ChartSeries> {
    let info = analysis.measured.as_ref()?;
    let points = analysis
        .nodes
        .iter()
        .filter_map(|node| {
            let measured = node.measured_s.filter(|&m| m > 0.0)?;
            let intensity = node.intensity.filter(|&i| i > 0.0)?;
            (node.flops > 0).then(|| SeriesPoint {
                op_index: Some(node.index),
                intensity,
                flops_per_s: node.flops as f64 / measured,
                label: Some(format!(
                    "{} measured {}{}",
                    node.name,
                    fmt_seconds(measured),
                    node.measured_efficiency
                        .map(|e| format!(" ({:.0}% of its roof)", e * 100.0))
                        .unwrap_or_default()
                )),
            })
        })
        .collect();
    Some(ChartSeries {
        name: format!("measured ({})", info.runtime),
        colour: Rgb(20, 20, 20),
        marker: SeriesMarker::Diamond,
        points,
        connect_to_predicted: true,
    })
}

/// The HTML summary card: (label, value, detail), detail already escaped.
pub fn html_card(analysis: &Analysis) -> Option<(String, String, String)> {
    let info = analysis.measured.as_ref()?;
    let total = analysis.summary.measured_total_s?;
    let mut detail = format!(
        "{} of {} profile nodes matched{} · median of {} run(s) · {}",
        info.matched_nodes,
        info.profile_nodes,
        info.run_median_s
            .map(|run| format!(" · {} per run end to end", fmt_seconds(run)))
            .unwrap_or_default(),
        info.runs,
        escape(&info.source)
    );
    if info.unmatched_profile_nodes > 0 {
        let _ = write!(
            detail,
            " · {} not in the model ({}): {}",
            info.unmatched_profile_nodes,
            fmt_seconds(info.unmatched_profile_s),
            escape(&names_text(
                &info.unmatched_profile_names,
                info.unmatched_profile_nodes
            ))
        );
    }
    if info.unmeasured_model_nodes > 0 {
        let _ = write!(
            detail,
            " · {} model node(s) without a time (fused or removed by the runtime)",
            info.unmeasured_model_nodes
        );
    }
    Some((
        format!("Measured · {}", escape(&runtime_text(info))),
        fmt_seconds(total),
        detail,
    ))
}

/// The two op-table cells (measured time, share of the roof reached) of one node.
pub fn html_cells(out: &mut String, node: &NodeAnalysis) {
    let cell = |out: &mut String, value: Option<f64>, text: &dyn Fn(f64) -> String| match value {
        Some(v) => {
            let _ = write!(
                out,
                "<td class=\"num\" data-v=\"{v}\" title=\"{v}\">{}</td>",
                text(v)
            );
        }
        None => out.push_str("<td class=\"num\" data-v=\"-1\">-</td>"),
    };
    cell(out, node.measured_s, &fmt_seconds);
    cell(out, node.measured_efficiency, &percent);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::measured::{join, parse_ort_profile};

    fn plain() -> Analysis {
        crate::builtin::analyze_on_catalog(
            "builtin:tinycnn",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        )
    }

    fn joined() -> Analysis {
        let mut analysis = plain();
        let text = r#"[{"cat": "Node", "name": "Conv_0_kernel_time", "dur": 40},
                       {"cat": "Node", "name": "Relu_1_kernel_time", "dur": 3},
                       {"cat": "Node", "name": "fused\u001b[31m_kernel_time", "dur": 3}]"#;
        join(&mut analysis, &parse_ort_profile(text).unwrap(), "p.json");
        analysis
    }

    #[test]
    fn the_series_has_the_measured_rate_of_ops_that_compute() {
        let analysis = joined();
        let series = measured_series(&analysis).unwrap();
        let conv = &analysis.nodes[0];
        let point = series
            .points
            .iter()
            .find(|p| p.op_index == Some(conv.index))
            .unwrap();
        assert!((point.flops_per_s - conv.flops as f64 / 40e-6).abs() < 1.0);
        assert_eq!(point.intensity, conv.intensity.unwrap());
        assert!(measured_series(&plain()).is_none());
    }

    #[test]
    fn summary_lines_escape_profile_names() {
        let text = summary_lines(&joined());
        assert!(text.contains("2 of 3 profile nodes"), "{text}");
        assert!(text.contains("fused\\u{1b}[31m"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }
}
