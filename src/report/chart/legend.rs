//! The legend column right of the plot: what the colours mean (with each bound's or op type's
//! share of time), the dot sizes, the line styles, the ops that have no position on the chart
//! (not costed, zero work, views and folded ops), and the overlay series.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::frame::{Frame, Layout};
use super::marks::op_tooltip;
use super::model::{op_placement, Ceilings, ChartScale, OpPlacement};
use super::style::{
    bound_colour, Rgb, LEGEND_HEAD_PX, LEGEND_PX, MUTED, NOT_COSTED, OP_TYPE_PALETTE, OTHER_OP,
    ROOF, TEXT,
};
use super::svg::{cross_path, fmt_px, marker_path};
use super::{ColorBy, SvgOptions};
use crate::analysis::{Analysis, Bound, NodeAnalysis, NodeStatus};
use crate::device::MemoryLevel;
use crate::report::markup::{escape, fit_width, percent, text_width};

/// Legend writer: a column of rows on the right of the plot.
struct Legend<'a> {
    out: &'a mut String,
    x: f64,
    y: f64,
    width: f64,
}

impl Legend<'_> {
    fn heading(&mut self, text: &str) {
        self.y += 10.0;
        let _ = writeln!(
            self.out,
            r#"<text class="legend-heading" x="{}" y="{}" font-size="{LEGEND_HEAD_PX}" font-weight="bold" fill="{}">{}</text>"#,
            fmt_px(self.x),
            fmt_px(self.y + LEGEND_HEAD_PX),
            TEXT.hex(),
            escape(text)
        );
        self.y += LEGEND_HEAD_PX + 8.0;
    }

    /// A row: a swatch drawn by `swatch(x_centre, y_centre)` and a text.
    fn row(&mut self, swatch: &str, text: &str, muted: bool) {
        let centre_y = self.y + LEGEND_PX * 0.6;
        let _ = writeln!(self.out, "{}", swatch.replace("{cy}", &fmt_px(centre_y)));
        let _ = writeln!(
            self.out,
            r#"<text x="{}" y="{}" font-size="{LEGEND_PX}" fill="{}">{}</text>"#,
            fmt_px(self.x + 26.0),
            fmt_px(self.y + LEGEND_PX * 0.95),
            if muted { MUTED.hex() } else { TEXT.hex() },
            escape(&fit_width(text, LEGEND_PX, false, self.width - 26.0))
        );
        self.y += LEGEND_PX + 8.0;
    }

    /// A row of text without a swatch, starting at the legend's left edge.
    fn row_text(&mut self, text: &str, colour: Rgb) {
        let _ = writeln!(
            self.out,
            r#"<text x="{}" y="{}" font-size="{LEGEND_PX}" fill="{}">{}</text>"#,
            fmt_px(self.x),
            fmt_px(self.y + LEGEND_PX * 0.95),
            colour.hex(),
            escape(&fit_width(text, LEGEND_PX, false, self.width))
        );
        self.y += LEGEND_PX + 8.0;
    }

    fn swatch_x(&self) -> f64 {
        self.x + 9.0
    }
}

/// The legend column: colours, dot sizes, line styles, the ops not on the chart, the overlays.
pub(super) fn draw_legend(
    out: &mut String,
    analysis: &Analysis,
    options: &SvgOptions,
    scale: &ChartScale,
    ceilings: &Ceilings,
    layout: &Layout,
    frame: &Frame,
) {
    let x0 = layout.width - layout.legend_width;
    let _ = writeln!(out, r#"<g class="legend">"#);
    let mut legend = Legend {
        out,
        x: x0,
        y: frame.top - 14.0,
        width: layout.legend_width - 10.0,
    };
    let sx = legend.swatch_x();
    let costed_with_position: Vec<&NodeAnalysis> = analysis
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                op_placement(n, options.point_height),
                OpPlacement::Plotted { .. }
            )
        })
        .collect();
    match options.color_by {
        ColorBy::Bound => {
            legend.heading("Colour: bound (share of time)");
            let summary = &analysis.summary;
            for (bound, share) in [
                (Bound::Memory, summary.memory_bound_share),
                (Bound::Compute, summary.compute_bound_share),
                (Bound::Overhead, summary.overhead_bound_share),
            ] {
                let count = costed_with_position
                    .iter()
                    .filter(|n| n.bound == bound)
                    .count();
                let colour = bound_colour(bound);
                let swatch = format!(
                    r#"<circle class="legend-swatch" data-bound="{}" cx="{}" cy="{{cy}}" r="6.5" fill="{}" fill-opacity="0.72" stroke="{}" stroke-width="1.2"/>"#,
                    bound.name(),
                    fmt_px(sx),
                    colour.hex(),
                    colour.darker().hex()
                );
                legend.row(
                    &swatch,
                    &format!("{} · {count} ops · {}", bound.name(), percent(share)),
                    false,
                );
            }
        }
        ColorBy::OpType => {
            legend.heading("Colour: op type (share of time)");
            let shown = scale.op_type_order.len().min(OP_TYPE_PALETTE.len());
            for (op_type, colour) in scale.op_type_order.iter().zip(OP_TYPE_PALETTE).take(shown) {
                let share = analysis
                    .summary
                    .by_op_type
                    .iter()
                    .find(|s| s.op_type == *op_type)
                    .map(|s| s.time_share)
                    .unwrap_or(0.0);
                let swatch = format!(
                    r#"<circle class="legend-swatch" cx="{}" cy="{{cy}}" r="6.5" fill="{}" fill-opacity="0.72" stroke="{}" stroke-width="1.2"/>"#,
                    fmt_px(sx),
                    colour.hex(),
                    colour.darker().hex()
                );
                legend.row(&swatch, &format!("{op_type} · {}", percent(share)), false);
            }
            if scale.op_type_order.len() > shown {
                let swatch = format!(
                    r#"<circle class="legend-swatch" cx="{}" cy="{{cy}}" r="6.5" fill="{}" fill-opacity="0.72"/>"#,
                    fmt_px(sx),
                    OTHER_OP.hex()
                );
                legend.row(&swatch, "other op types", true);
            }
        }
    }

    // Dot sizes: a few round shares at or below the largest, drawn with the chart's own scale.
    legend.heading("Dot area: share of predicted time");
    let mut shares: Vec<f64> = Vec::new();
    let largest = scale.largest_share;
    let mut candidate = 10f64.powf(largest.log10().floor());
    for factor in [5.0, 2.0, 1.0] {
        if candidate * factor <= largest * 1.0001 {
            candidate *= factor;
            break;
        }
    }
    while shares.len() < 3 && candidate > 1e-6 {
        shares.push(candidate);
        candidate /= 4.0;
    }
    let mut cursor_x = legend.x + 4.0;
    let row_y = legend.y + layout.max_radius;
    for share in &shares {
        let r = layout.radius(*share, largest);
        let text = percent(*share);
        let _ = writeln!(
            legend.out,
            r##"<circle class="legend-size" cx="{}" cy="{}" r="{}" fill="#bdbdbd" fill-opacity="0.6" stroke="#616161" stroke-width="1.2"/>"##,
            fmt_px(cursor_x + r),
            fmt_px(row_y),
            fmt_px(r)
        );
        let _ = writeln!(
            legend.out,
            r#"<text x="{}" y="{}" font-size="{LEGEND_PX}" fill="{}">{}</text>"#,
            fmt_px(cursor_x + 2.0 * r + 5.0),
            fmt_px(row_y + LEGEND_PX * 0.35),
            TEXT.hex(),
            escape(&text)
        );
        cursor_x += 2.0 * r + 12.0 + text_width(&text, LEGEND_PX, false);
    }
    legend.y = row_y + layout.max_radius + 6.0;
    let _ = writeln!(
        legend.out,
        r#"<text x="{}" y="{}" font-size="{}" fill="{}">smallest dots drawn at {} px radius</text>"#,
        fmt_px(legend.x),
        fmt_px(legend.y + LEGEND_PX * 0.9),
        LEGEND_PX - 1.0,
        MUTED.hex(),
        fmt_px(layout.min_radius)
    );
    legend.y += LEGEND_PX + 8.0;

    legend.heading("Lines");
    let legend_x = legend.x;
    let line_swatch = |dash: &str, width: f64| {
        format!(
            r#"<line x1="{}" y1="{{cy}}" x2="{}" y2="{{cy}}" stroke="{}" stroke-width="{width}"{dash}/>"#,
            fmt_px(legend_x),
            fmt_px(legend_x + 20.0),
            ROOF.hex()
        )
    };
    let roof_text = format!("roof used: {} · DRAM", analysis.precision);
    let swatch = line_swatch("", 3.2);
    legend.row(&swatch, &roof_text, false);
    if ceilings.compute.len() > 1 {
        let swatch = line_swatch(r#" stroke-dasharray="7 5""#, 1.6);
        legend.row(&swatch, "other precisions", false);
    }
    if ceilings.memory.iter().any(|m| m.level != MemoryLevel::Dram) {
        let swatch = line_swatch(r#" stroke-dasharray="2 4""#, 1.6);
        legend.row(&swatch, "cache bandwidths", false);
    }

    draw_unplotted(&mut legend, analysis, options);
    for series in &options.overlays {
        let swatch = format!(
            r#"<path d="{}" fill="{}" stroke="{}" stroke-width="1.2"/>"#,
            marker_path(series.marker, sx, 0.0, 6.5),
            series.colour.hex(),
            series.colour.darker().hex()
        );
        // The marker path is built at y = 0; shift it onto the row with a transform.
        let swatch = format!(r#"<g transform="translate(0 {{cy}})">{swatch}</g>"#);
        legend.row(&swatch, &series.name, false);
    }
    let _ = writeln!(out, "</g>");
}

/// The strip of ops without a position: not-costed ops (crosses) and zero-work ops (hollow
/// dots). Each mark carries `data-op` like the dots do.
fn draw_unplotted(legend: &mut Legend<'_>, analysis: &Analysis, options: &SvgOptions) {
    let mut not_costed: Vec<&NodeAnalysis> = Vec::new();
    let mut off_scale: Vec<&NodeAnalysis> = Vec::new();
    let mut hidden: BTreeMap<&'static str, usize> = BTreeMap::new();
    for node in &analysis.nodes {
        match op_placement(node, options.point_height) {
            OpPlacement::NotCosted => not_costed.push(node),
            OpPlacement::OffScale => off_scale.push(node),
            OpPlacement::Hidden => {
                let kind = match node.status {
                    NodeStatus::View => "view",
                    NodeStatus::Folded => "folded",
                    _ => "moving no bytes",
                };
                *hidden.entry(kind).or_default() += 1;
            }
            OpPlacement::Plotted { .. } => {}
        }
    }
    legend.heading("Not on the chart");
    let strip = |legend: &mut Legend<'_>, nodes: &[&NodeAnalysis], cross: bool| {
        if nodes.is_empty() {
            return;
        }
        // Shrink the cells when there are many marks so the strip keeps to five rows.
        let usable = legend.width - 8.0;
        let mut cell = 17.0;
        while cell > 6.0 && (nodes.len() as f64 / (usable / cell).floor()).ceil() > 5.0 {
            cell -= 1.0;
        }
        let per_row = (usable / cell).floor().max(1.0) as usize;
        for (i, node) in nodes.iter().enumerate() {
            let cx = legend.x + 6.0 + (i % per_row) as f64 * cell;
            let cy = legend.y + 6.0 + (i / per_row) as f64 * cell;
            let title = escape(&op_tooltip(node, node.intensity, None));
            if cross {
                let _ = writeln!(
                    legend.out,
                    r#"<path class="op-mark op-not-costed" data-op="{}" d="{}" stroke="{}" stroke-width="2.4" fill="none"><title>{title}</title></path>"#,
                    node.index,
                    cross_path(cx, cy, cell * 0.3),
                    NOT_COSTED.hex()
                );
            } else {
                let colour = bound_colour(node.bound);
                let _ = writeln!(
                    legend.out,
                    r#"<circle class="op-dot op-offscale" data-op="{}" data-bound="{}" cx="{}" cy="{}" r="{}" fill="white" stroke="{}" stroke-width="2"><title>{title}</title></circle>"#,
                    node.index,
                    node.bound.name(),
                    fmt_px(cx),
                    fmt_px(cy),
                    fmt_px(cell * 0.32),
                    colour.hex()
                );
            }
        }
        let rows = nodes.len().div_ceil(per_row);
        legend.y += rows as f64 * cell + 4.0;
    };
    if !not_costed.is_empty() {
        let mut kinds: Vec<String> = analysis
            .summary
            .not_costed_ops
            .iter()
            .map(|(op, n)| format!("{op}×{n}"))
            .collect();
        kinds.truncate(3);
        let text = if kinds.is_empty() {
            format!("✕ {} not costed", not_costed.len())
        } else {
            format!("✕ {} not costed: {}", not_costed.len(), kinds.join(", "))
        };
        legend.row_text(&text, NOT_COSTED);
        legend.row_text("their time is not in the total", MUTED);
        strip(legend, &not_costed, true);
    }
    if !off_scale.is_empty() {
        let swatch = format!(
            r#"<circle cx="{}" cy="{{cy}}" r="5" fill="white" stroke="{}" stroke-width="2"/>"#,
            fmt_px(legend.swatch_x()),
            MUTED.hex()
        );
        legend.row(
            &swatch,
            &format!("{} with 0 FLOPs (copies)", off_scale.len()),
            false,
        );
        strip(legend, &off_scale, false);
    }
    let hidden_text: Vec<String> = hidden
        .iter()
        .map(|(kind, n)| {
            let plural = if *n != 1 && *kind == "view" { "s" } else { "" };
            format!("{n} {kind}{plural}")
        })
        .collect();
    if !hidden_text.is_empty() {
        legend.row_text(
            &format!("{} (no kernel runs)", hidden_text.join(", ")),
            MUTED,
        );
    }
    if not_costed.is_empty() && off_scale.is_empty() && hidden_text.is_empty() {
        legend.row_text("every op is plotted", MUTED);
    }
}
