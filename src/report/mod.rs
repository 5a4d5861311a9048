//! Reports: renderers over the serde `Analysis` model (terminal table, JSON, CSV, HTML, SVG).
//! Renderers never recompute analysis numbers; they only format them.

pub mod advice;
pub mod error;
pub mod html;
mod label_layout;
pub mod markup;
pub mod svg;
pub mod units;

pub use error::ReportError;

use std::fmt::Write as _;

use crate::analysis::{Analysis, NodeStatus};
use units::{fmt_bytes, fmt_count, fmt_rate, fmt_seconds};

/// Output formats of `roofline analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
    /// Self-contained HTML report (`html::render_html`).
    Html,
    /// Roofline chart (`svg::render_roofline_svg`).
    Svg,
}

/// Options of the terminal table.
#[derive(Clone, Copy, Debug)]
pub struct TableOptions {
    /// Show every op (`false`: only ops that run, i.e. hide folded and view ops).
    pub all_ops: bool,
}

/// JSON: one analysis, or an array when several devices were analysed.
pub fn render_json(analyses: &[Analysis]) -> Result<String, serde_json::Error> {
    if let [single] = analyses {
        serde_json::to_string_pretty(single)
    } else {
        serde_json::to_string_pretty(analyses)
    }
}

const CSV_HEADER: &str = "device,precision,index,name,op_type,status,output_shapes,flops,macs,transcendental,bytes_read,bytes_written,weights_bytes,intensity,bound,attainable_flops,predicted_s,time_share,reason";

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// CSV: one row per op and device.
pub fn render_csv(analyses: &[Analysis]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for analysis in analyses {
        for n in &analysis.nodes {
            let status = serde_json::to_value(n.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(&analysis.device.id),
                analysis.precision,
                n.index,
                csv_field(&n.name),
                csv_field(&n.op_type),
                status,
                csv_field(&n.output_shapes.join(";")),
                n.flops,
                n.macs,
                n.transcendental,
                n.bytes_read,
                n.bytes_written,
                n.weights_bytes,
                n.intensity.map(|i| format!("{i:.4}")).unwrap_or_default(),
                n.bound.name(),
                n.attainable_flops,
                n.predicted_s,
                n.time_share,
                csv_field(n.reason.as_deref().unwrap_or("")),
            );
        }
    }
    out
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Aligned terminal table: per-op rows, then the summary and the hot spots.
pub fn render_table(analysis: &Analysis, options: TableOptions) -> String {
    let mut out = String::new();
    let d = &analysis.device;
    let _ = writeln!(
        out,
        "model  {}  (opset {}, {} nodes)",
        analysis.model.source, analysis.model.opset, analysis.model.node_count
    );
    let inputs: Vec<String> = analysis
        .model
        .inputs
        .iter()
        .map(|i| format!("{}={} {}", i.name, i.shape, i.dtype))
        .collect();
    let _ = writeln!(out, "inputs {}", inputs.join(", "));
    let _ = writeln!(
        out,
        "device {} ({}, {:?}) at {}: peak {}, DRAM {}/s, ridge {:.1} FLOP/B, per-op overhead {}",
        d.id,
        d.name,
        d.source,
        analysis.precision,
        fmt_rate(d.roof.peak_flops, "FLOP/s"),
        fmt_bytes(d.roof.bandwidth_bytes_per_s),
        d.ridge_point,
        fmt_seconds(d.roof.launch_overhead_s),
    );
    out.push('\n');
    let name_width = analysis
        .nodes
        .iter()
        .map(|n| n.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 32);
    let shape_width = 20;
    let _ = writeln!(
        out,
        "{:>4}  {:<name_width$}  {:<18}  {:<shape_width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>7}  {:<8}  {:>10}  {:>6}",
        "#", "name", "op", "output", "FLOPs", "read", "written", "weights", "FLOP/B", "bound", "time", "share"
    );
    for n in &analysis.nodes {
        if !options.all_ops && matches!(n.status, NodeStatus::Folded | NodeStatus::View) {
            continue;
        }
        let (bound, time) = match n.status {
            NodeStatus::NotCosted => ("NOT COSTED".to_string(), "-".to_string()),
            NodeStatus::Folded => ("folded".to_string(), "-".to_string()),
            _ => (n.bound.name().to_string(), fmt_seconds(n.predicted_s)),
        };
        let _ = writeln!(
            out,
            "{:>4}  {:<name_width$}  {:<18}  {:<shape_width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>7}  {:<8}  {:>10}  {:>5.1}%",
            n.index,
            truncate(&n.name, name_width),
            truncate(&n.op_type, 18),
            truncate(&n.output_shapes.join(","), shape_width),
            fmt_count(n.flops as f64),
            fmt_bytes(n.bytes_read as f64),
            fmt_bytes(n.bytes_written as f64),
            fmt_bytes(n.weights_bytes as f64),
            n.intensity.map(|i| format!("{i:.2}")).unwrap_or_else(|| "-".into()),
            bound,
            time,
            n.time_share * 100.0,
        );
    }
    out.push('\n');
    out.push_str(&render_summary(analysis));
    out
}

/// The summary block (also printed alone with `--summary`).
pub fn render_summary(analysis: &Analysis) -> String {
    let s = &analysis.summary;
    let mut out = String::new();
    let _ = writeln!(out, "summary");
    let _ = writeln!(
        out,
        "  FLOPs            {} ({} MACs, {} transcendental)",
        fmt_count(s.flops as f64),
        fmt_count(s.macs as f64),
        fmt_count(s.transcendental as f64)
    );
    let _ = writeln!(out, "  params           {}", fmt_count(s.params as f64));
    let _ = writeln!(
        out,
        "  bytes            {} read ({} weights) + {} written",
        fmt_bytes(s.bytes_read as f64),
        fmt_bytes(s.weights_bytes as f64),
        fmt_bytes(s.bytes_written as f64)
    );
    let _ = writeln!(
        out,
        "  intensity        {:.2} FLOP/B (ridge {:.1})",
        s.intensity, analysis.device.ridge_point
    );
    let _ = writeln!(
        out,
        "  predicted        {}",
        fmt_seconds(s.predicted_latency_s)
    );
    let _ = writeln!(
        out,
        "  time by bound    memory {:.1}%  compute {:.1}%  overhead {:.1}%",
        s.memory_bound_share * 100.0,
        s.compute_bound_share * 100.0,
        s.overhead_bound_share * 100.0
    );
    let _ = writeln!(
        out,
        "  ops              {} costed, {} views, {} folded, {} NOT COSTED",
        s.costed_nodes, s.view_nodes, s.folded_nodes, s.not_costed
    );
    if !s.not_costed_ops.is_empty() {
        let list: Vec<String> = s
            .not_costed_ops
            .iter()
            .map(|(op, n)| format!("{op} x{n}"))
            .collect();
        let _ = writeln!(
            out,
            "  not costed       {} (their time is NOT in the total)",
            list.join(", ")
        );
    }
    if !s.by_op_type.is_empty() {
        let _ = writeln!(out, "  time by op type");
        for t in s.by_op_type.iter().take(8) {
            let _ = writeln!(
                out,
                "    {:<20} {:>4} ops  {:>10}  {:>5.1}%",
                t.op_type,
                t.count,
                fmt_seconds(t.predicted_s),
                t.time_share * 100.0
            );
        }
    }
    if !s.hot_spots.is_empty() {
        let _ = writeln!(out, "  hot spots");
        for &i in &s.hot_spots {
            let n = &analysis.nodes[i];
            let _ = writeln!(
                out,
                "    {:>5.1}%  {:>10}  {:<8}  {} ({})",
                n.time_share * 100.0,
                fmt_seconds(n.predicted_s),
                n.bound.name(),
                n.name,
                n.op_type
            );
        }
    }
    for diag in &analysis.diagnostics {
        let location = match (&diag.node, &diag.op_type) {
            (Some(node), Some(op)) => format!("{node} ({op}): "),
            (Some(node), None) => format!("{node}: "),
            _ => String::new(),
        };
        let _ = writeln!(out, "{:?}: {location}{}", diag.severity, diag.message);
    }
    out
}
