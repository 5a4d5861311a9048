//! The marks layer: one dot per op (area by time share, colour by bound or op type), the name
//! labels of the most expensive ops, and the overlay series (measured or before/after points)
//! with their links to the predicted dots.

use std::fmt::Write as _;

use super::frame::{Frame, Layout};
use super::model::{op_placement, ChartScale, OpPlacement};
use super::style::{bound_colour, Rgb, LABEL_PX, OP_TYPE_PALETTE, OTHER_OP, TEXT};
use super::svg::{fmt_px, marker_path};
use super::{ColorBy, SvgOptions};
use crate::analysis::{Analysis, NodeAnalysis, NodeStatus};
use crate::report::label_layout::{candidates_around, LabelPlacer};
use crate::report::markup::{escape, shorten_middle, si3, si_unit, text_width};
use crate::report::units::fmt_seconds;

/// One op's dot, resolved to pixels.
#[derive(Clone, Debug)]
pub(super) struct Dot<'a> {
    pub node: &'a NodeAnalysis,
    pub cx: f64,
    pub cy: f64,
    pub r: f64,
    pub fill: Rgb,
    pub intensity: f64,
    pub flops_per_s: f64,
}

fn op_colour(node: &NodeAnalysis, color_by: ColorBy, op_type_order: &[String]) -> Rgb {
    match color_by {
        ColorBy::Bound => bound_colour(node.bound),
        ColorBy::OpType => op_type_order
            .iter()
            .position(|t| *t == node.op_type)
            .and_then(|i| OP_TYPE_PALETTE.get(i).copied())
            .unwrap_or(OTHER_OP),
    }
}

/// The dots of every plotted op, big ones first so small ones stay visible on top.
pub(super) fn resolve_dots<'a>(
    analysis: &'a Analysis,
    options: &SvgOptions,
    scale: &ChartScale,
    layout: &Layout,
    frame: &Frame,
) -> Vec<Dot<'a>> {
    let mut dots: Vec<Dot<'a>> = analysis
        .nodes
        .iter()
        .filter_map(|node| match op_placement(node, options.point_height) {
            OpPlacement::Plotted {
                intensity,
                flops_per_s,
            } => Some(Dot {
                node,
                cx: frame.x(intensity).clamp(frame.left, frame.right),
                cy: frame.y(flops_per_s).clamp(frame.top, frame.bottom),
                r: layout.radius(node.time_share, scale.largest_share),
                fill: op_colour(node, options.color_by, &scale.op_type_order),
                intensity,
                flops_per_s,
            }),
            _ => None,
        })
        .collect();
    dots.sort_by(|a, b| b.r.total_cmp(&a.r).then(a.node.index.cmp(&b.node.index)));
    dots
}

/// The tooltip of an op's mark: name, position, time and bound (or why it is not costed).
pub(super) fn op_tooltip(
    node: &NodeAnalysis,
    intensity: Option<f64>,
    flops_per_s: Option<f64>,
) -> String {
    let mut text = format!("#{} {} ({})", node.index, node.name, node.op_type);
    if let Some(i) = intensity {
        let _ = write!(text, "\n{} FLOP/B", si3(i));
    }
    if let Some(rate) = flops_per_s {
        let _ = write!(text, " · {}", si_unit(rate, "FLOP/s"));
    }
    match node.status {
        NodeStatus::NotCosted => {
            let _ = write!(
                text,
                "\nnot costed: {}",
                node.reason.as_deref().unwrap_or("no reason given")
            );
        }
        _ => {
            let _ = write!(
                text,
                "\n{} ({:.1}% of time) · {}-bound",
                fmt_seconds(node.predicted_s),
                node.time_share * 100.0,
                node.bound.name()
            );
        }
    }
    text
}

pub(super) fn draw_dots(out: &mut String, dots: &[Dot<'_>], analysis: &Analysis) {
    let _ = writeln!(
        out,
        r#"<g class="op-dots" data-device="{}">"#,
        escape(&analysis.device.id)
    );
    for dot in dots {
        let _ = writeln!(
            out,
            r#"<circle class="op-dot" data-op="{}" data-bound="{}" data-op-type="{}" cx="{}" cy="{}" r="{}" fill="{}" fill-opacity="0.72" stroke="{}" stroke-width="1.2"><title>{}</title></circle>"#,
            dot.node.index,
            dot.node.bound.name(),
            escape(&dot.node.op_type),
            fmt_px(dot.cx),
            fmt_px(dot.cy),
            fmt_px(dot.r),
            dot.fill.hex(),
            dot.fill.darker().hex(),
            escape(&op_tooltip(
                dot.node,
                Some(dot.intensity),
                Some(dot.flops_per_s)
            )),
        );
    }
    let _ = writeln!(out, "</g>");
}

/// Name labels of the hot spots, with a leader line when a label sits away from its dot.
pub(super) fn draw_op_labels(
    out: &mut String,
    placer: &mut LabelPlacer,
    analysis: &Analysis,
    options: &SvgOptions,
    dots: &[Dot<'_>],
) {
    let _ = writeln!(out, r#"<g class="op-labels" font-size="{LABEL_PX}">"#);
    let mut labelled = 0;
    for &index in &analysis.summary.hot_spots {
        if labelled >= options.labelled_ops {
            break;
        }
        let Some(dot) = dots.iter().find(|d| d.node.index == index) else {
            continue;
        };
        labelled += 1;
        let text = format!(
            "{} {:.1}%",
            shorten_middle(&dot.node.name, 28),
            dot.node.time_share * 100.0
        );
        let width = text_width(&text, LABEL_PX, false);
        let candidates = candidates_around(dot.cx, dot.cy, dot.r, width, LABEL_PX);
        let Some(label) = placer.place(&candidates, Some((dot.cx, dot.cy)), 0.5) else {
            continue;
        };
        // A leader line when the label sits away from its dot.
        let nearest_x = dot.cx.clamp(label.rect.x0, label.rect.x1);
        let nearest_y = dot.cy.clamp(label.rect.y0, label.rect.y1);
        let distance = ((nearest_x - dot.cx).powi(2) + (nearest_y - dot.cy).powi(2)).sqrt();
        if distance > dot.r + 10.0 {
            let (ux, uy) = (
                (nearest_x - dot.cx) / distance,
                (nearest_y - dot.cy) / distance,
            );
            let _ = writeln!(
                out,
                r##"<line class="leader" data-op="{}" x1="{}" y1="{}" x2="{}" y2="{}" stroke="#666" stroke-width="1"/>"##,
                dot.node.index,
                fmt_px(dot.cx + ux * dot.r),
                fmt_px(dot.cy + uy * dot.r),
                fmt_px(nearest_x - ux * 2.0),
                fmt_px(nearest_y - uy * 2.0),
            );
        }
        let _ = writeln!(
            out,
            r#"<text class="op-label" data-op="{}" x="{}" y="{}" text-anchor="{}" fill="{}" stroke="white" stroke-width="4" paint-order="stroke">{}</text>"#,
            dot.node.index,
            fmt_px(label.x),
            fmt_px(label.baseline),
            label.anchor.svg(),
            TEXT.hex(),
            escape(&text),
        );
    }
    let _ = writeln!(out, "</g>");
}

/// The overlay series: a marker per point, linked to its op's predicted dot when asked.
pub(super) fn draw_overlays(
    out: &mut String,
    options: &SvgOptions,
    dots: &[Dot<'_>],
    frame: &Frame,
    clip_id: &str,
) {
    for (series_index, series) in options.overlays.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<g class="series" data-series="{series_index}" data-name="{}" clip-path="url(#{clip_id})">"#,
            escape(&series.name)
        );
        for point in &series.points {
            if !(point.intensity.is_finite()
                && point.intensity > 0.0
                && point.flops_per_s.is_finite()
                && point.flops_per_s > 0.0)
            {
                continue;
            }
            let (px, py) = (frame.x(point.intensity), frame.y(point.flops_per_s));
            let op_attr = point
                .op_index
                .map(|i| format!(r#" data-op="{i}""#))
                .unwrap_or_default();
            if series.connect_to_predicted {
                if let Some(dot) = point
                    .op_index
                    .and_then(|i| dots.iter().find(|d| d.node.index == i))
                {
                    let _ = writeln!(
                        out,
                        r#"<line class="series-link"{op_attr} x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.2" stroke-dasharray="3 3"/>"#,
                        fmt_px(dot.cx),
                        fmt_px(dot.cy),
                        fmt_px(px),
                        fmt_px(py),
                        series.colour.hex()
                    );
                }
            }
            let title = point
                .label
                .as_ref()
                .map(|t| format!("<title>{}</title>", escape(t)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                r#"<path class="series-point"{op_attr} d="{}" fill="{}" stroke="{}" stroke-width="1.2">{title}</path>"#,
                marker_path(series.marker, px, py, 6.5),
                series.colour.hex(),
                series.colour.darker().hex(),
            );
        }
        let _ = writeln!(out, "</g>");
    }
}
