//! Reports: renderers over the serde report models (terminal table, JSON, CSV, HTML, SVG).
//! Renderers never recompute analysis numbers; they only format them.
//!
//! The models: `Analysis` (from `analysis::model`) and, in [`model`], what `bench`, `advise`
//! and the quantization passes produce. This file renders an `Analysis` as a table, JSON or
//! CSV; `html` and `chart` draw it; `bench`, `advice`, `probe` and `devices` render the other
//! reports and listings.
//! Nothing here imports the producers (`advisor`, `bench`, `exec`): they depend on this module,
//! never the reverse.

pub mod advice;
pub mod bench;
pub mod calibration;
pub mod chart;
pub mod compress;
pub mod devices;
pub mod error;
pub mod html;
mod label_layout;
pub mod llm;
pub mod llm_sweep;
pub mod markup;
pub mod measured;
pub mod model;
pub mod probe;
pub mod units;

pub use error::ReportError;

use std::fmt::Write as _;

use crate::analysis::{Analysis, NodeStatus};
use markup::{terminal_safe as safe, terminal_safe_lines};
use units::{fmt_bytes, fmt_count, fmt_memory_rates, fmt_rate, fmt_seconds};

/// Output formats of `roofline analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
    /// Self-contained HTML report (`html::render_html`).
    Html,
    /// Roofline chart (`chart::render_roofline_svg`).
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

const CSV_HEADER: &str = "device,precision,index,name,op_type,status,output_shapes,flops,macs,transcendental,bytes_read,bytes_written,weights_bytes,intensity,bound,attainable_flops,predicted_s,time_share,kernel_class,algorithm,executed_flops,expected_s,efficiency,measured_s,measured_efficiency,reason";

/// A text cell of the CSV (names, op types, shapes, paths, messages), RFC 4180 style: quoted
/// when it holds a comma, a quote, a newline or a carriage return, quotes doubled. A cell that
/// a spreadsheet would evaluate as a formula (starting with `=`, `+`, `-`, `@`, a tab or a
/// carriage return) gets a leading apostrophe, as OWASP recommends against CSV injection.
/// Control characters other than tab, newline and carriage return (escape sequences, a bell)
/// are written as visible escapes (`\u{1b}`): the CSV goes to the terminal without `-o`.
/// Numeric cells do not go through here, so a negative number stays a number.
pub fn csv_text(text: &str) -> String {
    let mut cell = String::with_capacity(text.len() + 3);
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        cell.push('\'');
    }
    for c in text.chars() {
        if c.is_control() && !matches!(c, '\t' | '\n' | '\r') {
            let _ = write!(cell, "{}", c.escape_unicode());
        } else {
            cell.push(c);
        }
    }
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell
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
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_text(&analysis.device.id),
                analysis.precision,
                n.index,
                csv_text(&n.name),
                csv_text(&n.op_type),
                status,
                csv_text(&n.output_shapes.join(";")),
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
                n.kernel_class.map(|c| c.name()).unwrap_or(""),
                // Winograd's name carries a comma: "winograd F(4x4,3x3)".
                csv_text(
                    n.algorithm
                        .as_ref()
                        .map(|c| c.algorithm.name())
                        .unwrap_or("")
                ),
                n.executed_flops.map(|f| f.to_string()).unwrap_or_default(),
                n.expected_s.map(|e| e.to_string()).unwrap_or_default(),
                n.efficiency.map(|e| format!("{e:.4}")).unwrap_or_default(),
                n.measured_s.map(|m| m.to_string()).unwrap_or_default(),
                n.measured_efficiency
                    .map(|e| format!("{e:.4}"))
                    .unwrap_or_default(),
                csv_text(n.reason.as_deref().unwrap_or("")),
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

/// Aligned terminal table: per-op rows, then the summary and the hot spots. Text from the model
/// or the device profile (names, op types, shapes, paths) has its control characters escaped
/// (`markup::terminal_safe`): the table goes to a terminal.
pub fn render_table(analysis: &Analysis, options: TableOptions) -> String {
    let mut out = String::new();
    let d = &analysis.device;
    let _ = writeln!(
        out,
        "model  {}  (opset {}, {} nodes)",
        safe(&analysis.model.source),
        analysis.model.opset,
        analysis.model.node_count
    );
    let inputs: Vec<String> = analysis
        .model
        .inputs
        .iter()
        .map(|i| safe(&format!("{}={} {}", i.name, i.shape, i.dtype)).into_owned())
        .collect();
    let _ = writeln!(out, "inputs {}", inputs.join(", "));
    let _ = writeln!(
        out,
        "device {} ({}, {:?}) at {}: peak {}, DRAM {}, ridge {:.1} FLOP/B, per-op overhead {}",
        safe(&d.id),
        safe(&d.name),
        d.source,
        analysis.precision,
        fmt_rate(d.roof.peak_flops, "FLOP/s"),
        fmt_memory_rates(
            d.roof.bandwidth_bytes_per_s,
            d.roof.write_bandwidth_bytes_per_s
        ),
        d.ridge_point,
        fmt_seconds(d.roof.launch_overhead_s),
    );
    out.push('\n');
    let name_width = analysis
        .nodes
        .iter()
        .map(|n| safe(&n.name).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 32);
    let shape_width = 20;
    // The calibrated columns only where the device has a calibration.
    let calibrated = analysis.nodes.iter().any(|n| n.expected_s.is_some());
    let _ = write!(
        out,
        "{:>4}  {:<name_width$}  {:<18}  {:<shape_width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>7}  {:<8}  {:>10}  {:>6}",
        "#", "name", "op", "output", "FLOPs", "read", "written", "weights", "FLOP/B", "bound", "time", "share"
    );
    if calibrated {
        let _ = write!(out, "  {:>10}  {:>7}", "expected", "of roof");
    }
    // The measured columns only where a runtime profile was joined (`--measured`).
    let measured = analysis.measured.is_some();
    if measured {
        let _ = write!(out, "  {:>10}  {:>7}", "measured", "reached");
    }
    out.push('\n');
    for n in &analysis.nodes {
        if !options.all_ops && matches!(n.status, NodeStatus::Folded | NodeStatus::View) {
            continue;
        }
        let (bound, time) = match n.status {
            NodeStatus::NotCosted => ("NOT COSTED".to_string(), "-".to_string()),
            NodeStatus::Folded => ("folded".to_string(), "-".to_string()),
            _ => (n.bound.name().to_string(), fmt_seconds(n.predicted_s)),
        };
        let _ = write!(
            out,
            "{:>4}  {:<name_width$}  {:<18}  {:<shape_width$}  {:>9}  {:>9}  {:>9}  {:>9}  {:>7}  {:<8}  {:>10}  {:>5.1}%",
            n.index,
            truncate(&safe(&n.name), name_width),
            truncate(&safe(&n.op_label()), 18),
            truncate(&safe(&n.output_shapes.join(",")), shape_width),
            fmt_count(n.flops as f64),
            fmt_bytes(n.bytes_read as f64),
            fmt_bytes(n.bytes_written as f64),
            fmt_bytes(n.weights_bytes as f64),
            n.intensity.map(|i| format!("{i:.2}")).unwrap_or_else(|| "-".into()),
            bound,
            time,
            n.time_share * 100.0,
        );
        if calibrated {
            match (n.expected_s, n.efficiency) {
                (Some(expected), Some(efficiency)) => {
                    let _ = write!(
                        out,
                        "  {:>10}  {:>6.0}%",
                        fmt_seconds(expected),
                        efficiency * 100.0
                    );
                }
                _ => {
                    let _ = write!(out, "  {:>10}  {:>7}", "-", "-");
                }
            }
        }
        if measured {
            let time = n.measured_s.map(fmt_seconds).unwrap_or_else(|| "-".into());
            let reached = n
                .measured_efficiency
                .map(|e| format!("{:.0}%", e * 100.0))
                .unwrap_or_else(|| "-".into());
            let _ = write!(out, "  {time:>10}  {reached:>7}");
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&render_summary(analysis));
    // Every model-provided field above is escaped; this pass is the net under a missed one.
    terminal_safe_lines(&out).into_owned()
}

/// The reason cell: why the op was not costed, or how the roofline chose its algorithm.
pub(crate) fn node_note(node: &crate::analysis::NodeAnalysis) -> String {
    match (&node.reason, &node.algorithm) {
        (Some(reason), _) => reason.clone(),
        (None, Some(choice)) => format!(
            "{}: {} (direct bound {})",
            choice.algorithm.name(),
            choice.reason,
            fmt_seconds(choice.direct_s)
        ),
        (None, None) => String::new(),
    }
}

/// The summary line on convolution algorithms: how many run as Winograd and what the roofline
/// says that buys (empty when no convolution was a candidate).
fn algorithm_summary(analysis: &Analysis) -> String {
    let decided: Vec<_> = analysis
        .nodes
        .iter()
        .filter_map(|n| n.algorithm.as_ref().map(|c| (n, c)))
        .collect();
    let winograd: Vec<_> = decided
        .iter()
        .filter(|(n, _)| n.winograd().is_some())
        .collect();
    if decided.is_empty() {
        return String::new();
    }
    let direct_s: f64 = winograd.iter().map(|(_, c)| c.direct_s).sum();
    let chosen_s: f64 = winograd.iter().map(|(_, c)| c.chosen_s).sum();
    let mut line = format!(
        "  algorithms       {} of {} convolutions as Winograd",
        winograd.len(),
        decided.len()
    );
    if !winograd.is_empty() {
        let _ = write!(
            line,
            " (their bound {} direct → {})",
            fmt_seconds(direct_s),
            fmt_seconds(chosen_s)
        );
    }
    line.push('\n');
    line
}

/// The summary block (also printed alone with `--summary`), escaped for the terminal as the
/// table is.
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
    match (s.expected_latency_s, s.expected_coverage) {
        (Some(expected), Some(coverage)) => {
            let _ = writeln!(
                out,
                "  predicted        {} (roofline bound)   expected {} (calibrated on this \
                 device; ops covering {:.0}% of the bound time)",
                fmt_seconds(s.predicted_latency_s),
                fmt_seconds(expected),
                coverage * 100.0
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "  predicted        {} (roofline bound: the latency cannot be lower; a profile \
                 probed and calibrated on the machine adds an expected time)",
                fmt_seconds(s.predicted_latency_s)
            );
        }
    }
    out.push_str(&algorithm_summary(analysis));
    out.push_str(&measured::summary_lines(analysis));
    out.push_str(&llm::summary_lines(analysis));
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
            .map(|(op, n)| format!("{} x{n}", safe(op)))
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
                safe(&t.op_type),
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
                safe(&n.name),
                safe(&n.op_type)
            );
        }
    }
    for diag in &analysis.diagnostics {
        let location = match (&diag.node, &diag.op_type) {
            (Some(node), Some(op)) => format!("{} ({}): ", safe(node), safe(op)),
            (Some(node), None) => format!("{}: ", safe(node)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:?}: {location}{}",
            diag.severity,
            safe(&diag.message)
        );
    }
    terminal_safe_lines(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tinycnn() -> Analysis {
        crate::builtin::analyze_on_catalog(
            "builtin:tinycnn",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        )
    }

    #[test]
    fn csv_text_cells_are_quoted_per_rfc_4180() {
        assert_eq!(csv_text("conv1"), "conv1");
        assert_eq!(csv_text("a,b"), "\"a,b\"");
        assert_eq!(csv_text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_text("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_text("cr\rhere"), "\"cr\rhere\"");
        assert_eq!(csv_text(""), "");
    }

    #[test]
    fn csv_formula_cells_get_an_apostrophe() {
        assert_eq!(
            csv_text("=cmd|' /C calc'!A0"),
            "'=cmd|' /C calc'!A0",
            "no comma or quote: apostrophe, no quoting"
        );
        assert_eq!(csv_text("+1"), "'+1");
        assert_eq!(csv_text("-2+3"), "'-2+3");
        assert_eq!(csv_text("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_text("\t=1"), "'\t=1");
        assert_eq!(csv_text("\r=1"), "\"'\r=1\"");
        assert_eq!(
            csv_text("=HYPERLINK(\"http://x\",\"y\")"),
            "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""
        );
        // Not at the start: nothing to neutralise.
        assert_eq!(csv_text("a=b"), "a=b");
        // Escape sequences are shown, not sent.
        assert_eq!(csv_text("x\u{1b}[31m\u{7}"), "x\\u{1b}[31m\\u{7}");
    }

    #[test]
    fn csv_of_a_hostile_model_keeps_numbers_and_neutralises_text() {
        let mut analysis = tinycnn();
        analysis.nodes[0].name = "=cmd|' /C calc'!A0".into();
        analysis.nodes[1].name = "-, \"quoted\"".into();
        // An algorithm whose name carries a comma (it once shifted every later column).
        analysis.nodes[0].algorithm = Some(crate::analysis::algorithm::AlgorithmChoice {
            algorithm: crate::analysis::algorithm::ConvAlgorithm::WinogradF4,
            direct_s: 2e-6,
            chosen_s: 1e-6,
            reason: "fewer multiplies".into(),
        });
        let csv = render_csv(std::slice::from_ref(&analysis));
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), analysis.nodes.len() + 1);
        assert!(rows[1].contains(",'=cmd|' /C calc'!A0,"), "{}", rows[1]);
        assert!(rows[2].contains(",\"'-, \"\"quoted\"\"\","), "{}", rows[2]);
        assert!(rows[1].contains(",\"winograd F(4x4,3x3)\","), "{}", rows[1]);
        // Every row has the header's number of fields once quoted fields are accounted for.
        let columns = CSV_HEADER.split(',').count();
        for row in &rows {
            let mut fields = 1;
            let mut quoted = false;
            for c in row.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ',' if !quoted => fields += 1,
                    _ => {}
                }
            }
            assert_eq!(fields, columns, "{row}");
        }
    }

    #[test]
    fn csv_has_the_measured_columns_before_the_reason() {
        assert!(CSV_HEADER.ends_with(",efficiency,measured_s,measured_efficiency,reason"));
        let mut analysis = tinycnn();
        let profile = crate::analysis::measured::parse_ort_profile(
            r#"[{"cat": "Node", "name": "Conv_0_kernel_time", "dur": 40}]"#,
        )
        .unwrap();
        crate::analysis::measured::join(&mut analysis, &profile, "p.json");
        let csv = render_csv(std::slice::from_ref(&analysis));
        let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
        let column = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
        let conv = &rows[1];
        assert_eq!(conv[column("name")], "Conv_0");
        assert_eq!(conv[column("measured_s")], "0.00004");
        let efficiency: f64 = conv[column("measured_efficiency")].parse().unwrap();
        assert!((efficiency - analysis.nodes[0].predicted_s / 40e-6).abs() < 1e-4);
        // Nodes without a time leave both cells empty.
        assert_eq!(rows[2][column("measured_s")], "");
        assert_eq!(rows[2][column("measured_efficiency")], "");
    }

    #[test]
    fn table_shows_escapes_instead_of_control_characters() {
        let mut analysis = tinycnn();
        analysis.model.source = "evil\u{1b}]0;pwned\u{7}.onnx".into();
        analysis.nodes[0].name = "conv\u{1b}[31m\u{7}red".into();
        analysis.nodes[0].op_type = "Conv\u{9b}2J".into();
        analysis.nodes[1].name = "two\nlines".into();
        let table = render_table(&analysis, TableOptions { all_ops: true });
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert!(table.contains("conv\\u{1b}[31m\\u{7}red"), "{table}");
        assert!(table.contains("evil\\u{1b}]0;pwned\\u{7}.onnx"));
        assert!(table.contains("two\\nlines"));
        assert!(!table.lines().any(|l| l.starts_with("lines")));
    }
}
