//! The ceilings layer: compute lines, memory roofs, the bold roof the analysis used, the ridge
//! markers, and their labels (placed so that none overlaps another or a dot).

use std::fmt::Write as _;

use super::frame::Frame;
use super::model::{Ceilings, Ridge};
use super::style::{CEILING, LABEL_PX, ROOF, TEXT};
use super::svg::{fmt_px, write_label};
use crate::device::MemoryLevel;
use crate::report::label_layout::{candidates_at, Anchor, LabelPlacer, Rect, Segment};
use crate::report::markup::{escape, si_unit, text_width};
use crate::report::units::fmt_bytes;

/// Draws the ceilings and the ridge markers; returns their segments in pixels so that labels
/// can keep off them.
pub(super) fn draw_ceilings(
    out: &mut String,
    ceilings: &Ceilings,
    frame: &Frame,
    clip_id: &str,
) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    let window = frame.window();
    let _ = writeln!(out, r#"<g class="ceilings" clip-path="url(#{clip_id})">"#);
    // Thin lines: every other ceiling, drawn where it could bind (from where it meets the
    // fastest memory level). The analysis' own ceiling gets a thin part too when a cache is
    // faster than DRAM: left of the DRAM ridge it binds only data that stays in cache.
    for line in &ceilings.compute {
        let Some((x0, x1)) = ceilings.compute_extent(line, &window) else {
            continue;
        };
        let y = frame.y(line.flops_per_s);
        let (px0, px1) = (frame.x(x0).max(frame.left), frame.x(x1));
        segments.push(Segment {
            x0: px0,
            y0: y,
            x1: px1,
            y1: y,
        });
        let _ = writeln!(
            out,
            r#"<line class="ceiling compute" data-precision="{}" data-flops="{}" x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="1.6" stroke-dasharray="7 5"/>"#,
            line.name(),
            line.flops_per_s,
            fmt_px(px0),
            fmt_px(px1),
            CEILING.hex(),
            y = fmt_px(y),
        );
    }
    for level in ceilings
        .memory
        .iter()
        .filter(|m| m.level != MemoryLevel::Dram)
    {
        if let Some(((xa, ya), (xb, yb))) = ceilings.memory_extent(level, &window) {
            segments.push(Segment {
                x0: frame.x(xa),
                y0: frame.y(ya),
                x1: frame.x(xb),
                y1: frame.y(yb),
            });
            let _ = writeln!(
                out,
                r#"<line class="ceiling memory" data-level="{}" data-bandwidth="{}" x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.6" stroke-dasharray="2 4"/>"#,
                level.level.name(),
                level.bytes_per_s,
                fmt_px(frame.x(xa)),
                fmt_px(frame.y(ya)),
                fmt_px(frame.x(xb)),
                fmt_px(frame.y(yb)),
                CEILING.hex(),
            );
        }
    }
    if let Some(((xa, ya), (xb, yb))) = ceilings.dram_extension(&window) {
        segments.push(Segment {
            x0: frame.x(xa),
            y0: frame.y(ya),
            x1: frame.x(xb),
            y1: frame.y(yb),
        });
        let _ = writeln!(
            out,
            r#"<line class="ceiling memory-extension" x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.6" stroke-dasharray="7 5"/>"#,
            fmt_px(frame.x(xa)),
            fmt_px(frame.y(ya)),
            fmt_px(frame.x(xb)),
            fmt_px(frame.y(yb)),
            CEILING.hex(),
        );
    }
    // The roof the analysis used: min(peak, intensity × DRAM bandwidth), bold.
    if let Some([start, bend, end]) = ceilings.roof_polyline(&window) {
        let start = (frame.x(start.0), frame.y(start.1));
        let bend = (frame.x(bend.0), frame.y(bend.1));
        let end = (frame.x(end.0), frame.y(end.1));
        segments.push(Segment {
            x0: start.0,
            y0: start.1,
            x1: bend.0,
            y1: bend.1,
        });
        segments.push(Segment {
            x0: bend.0,
            y0: bend.1,
            x1: end.0,
            y1: end.1,
        });
        let _ = writeln!(
            out,
            r#"<polyline class="roof" data-peak="{}" data-bandwidth="{}" data-ridge="{}" points="{},{} {},{} {},{}" fill="none" stroke="{}" stroke-width="3.2" stroke-linejoin="round"/>"#,
            ceilings.peak_flops,
            ceilings.dram_bandwidth,
            ceilings.ridge_point,
            fmt_px(start.0),
            fmt_px(start.1),
            fmt_px(bend.0),
            fmt_px(bend.1),
            fmt_px(end.0),
            fmt_px(end.1),
            ROOF.hex(),
        );
    }
    for ridge in &ceilings.ridges {
        let (x, y) = (ridge.intensity, ridge.flops_per_s);
        let (px, py) = (frame.x(x), frame.y(y));
        if frame.contains(px, py) {
            let _ = writeln!(
                out,
                r#"<circle class="ridge" data-intensity="{x}" data-flops="{y}" cx="{}" cy="{}" r="4.5" fill="white" stroke="{}" stroke-width="2"/>"#,
                fmt_px(px),
                fmt_px(py),
                ROOF.hex()
            );
        }
    }
    let _ = writeln!(out, "</g>");
    segments
}

/// Labels of the memory roofs (along the line), the ridge points and the compute ceilings.
pub(super) fn draw_ceiling_labels(
    out: &mut String,
    placer: &mut LabelPlacer,
    ceilings: &Ceilings,
    frame: &Frame,
) {
    let window = frame.window();
    let _ = writeln!(out, r#"<g class="ceiling-labels" font-size="{LABEL_PX}">"#);
    // Memory labels have one natural spot (low on their line), so they go first.
    let angle = frame.diagonal_angle();
    for level in &ceilings.memory {
        let Some(((xa, _), (xb, _))) = ceilings.memory_extent(level, &window) else {
            continue;
        };
        let text = format!("{} {}/s", level.level.name(), fmt_bytes(level.bytes_per_s));
        let active = level.level == MemoryLevel::Dram;
        let width = text_width(&text, LABEL_PX, active);
        let start_px = frame.x(xa) + 18.0;
        let end_px = frame.x(xb);
        if end_px - start_px < width * 0.8 {
            continue;
        }
        let x_data = frame.x_value(start_px);
        let (px, py) = (start_px, frame.y(x_data * level.bytes_per_s));
        let radians = angle.to_radians();
        // Offset perpendicular to the line, to its upper-left side.
        let (tx, ty) = (px + radians.sin() * 7.0, py - radians.cos() * 7.0);
        let (dx, dy) = (radians.cos() * width, radians.sin() * width);
        placer.reserve(Rect {
            x0: tx.min(tx + dx) - 2.0,
            y0: (ty + dy).min(ty) - LABEL_PX,
            x1: tx.max(tx + dx) + 2.0,
            y1: ty.max(ty + dy) + 4.0,
        });
        let _ = writeln!(
            out,
            r#"<text class="ceiling-label memory" x="{x}" y="{y}" transform="rotate({} {x} {y})" fill="{}"{} stroke="white" stroke-width="4" paint-order="stroke">{}</text>"#,
            fmt_px(angle),
            TEXT.hex(),
            if active { r#" font-weight="bold""# } else { "" },
            escape(&text),
            x = fmt_px(tx),
            y = fmt_px(ty),
        );
    }
    let ridges: Vec<&Ridge> = ceilings
        .ridges
        .iter()
        .filter(|r| frame.contains(frame.x(r.intensity), frame.y(r.flops_per_s)))
        .collect();
    for ridge in &ridges {
        let (px, py) = (frame.x(ridge.intensity), frame.y(ridge.flops_per_s));
        placer.reserve(Rect {
            x0: px - 6.0,
            y0: py - 6.0,
            x1: px + 6.0,
            y1: py + 6.0,
        });
    }
    for ridge in &ridges {
        let (px, py) = (frame.x(ridge.intensity), frame.y(ridge.flops_per_s));
        // Above the roof and left of the ridge no op can be, so that is the first choice.
        let spots = [
            (px - 8.0, py - 9.0, Anchor::End, 0.0),
            (px - 8.0, py - 27.0, Anchor::End, 6.0),
            (px + 8.0, py - 9.0, Anchor::Start, 8.0),
            (px - 8.0, py - 45.0, Anchor::End, 10.0),
            (px + 8.0, py + 20.0, Anchor::Start, 14.0),
        ];
        let candidates = candidates_at(&spots, &ridge.label, LABEL_PX, false);
        if let Some(label) = placer.place(&candidates, None, 2.0) {
            write_label(out, "ridge-label", &label, &ridge.label, TEXT, false);
        }
    }
    let dram_bandwidth = ceilings.dram_bandwidth;
    for line in &ceilings.compute {
        let py = frame.y(line.flops_per_s);
        if py < frame.top || py > frame.bottom {
            continue;
        }
        let named_at_ridge = !line.active
            && frame.contains(frame.x(line.flops_per_s / dram_bandwidth), py)
            && ridges.iter().any(|r| r.flops_per_s == line.flops_per_s);
        if named_at_ridge {
            continue;
        }
        let text = format!("{} {}", line.name(), si_unit(line.flops_per_s, line.unit()));
        // Along the line from the right edge leftwards (never left of where the line starts),
        // just above it first, then below, then a little further away.
        let width = text_width(&text, LABEL_PX, line.active);
        let line_start = if line.active {
            frame.x(ceilings.ridge_point)
        } else {
            frame.x(line.flops_per_s / ceilings.top_bandwidth)
        };
        let mut spots = Vec::new();
        for step in 0..10 {
            let x = frame.right - 8.0 - f64::from(step) * 50.0;
            if x - width < line_start.max(frame.left) + 4.0 && step > 0 {
                break;
            }
            let shift = f64::from(step) * 10.0;
            spots.push((x, py - 7.0, Anchor::End, shift));
            spots.push((x, py + 19.0, Anchor::End, shift + 6.0));
            spots.push((x, py - 28.0, Anchor::End, shift + 25.0));
            spots.push((x, py + 40.0, Anchor::End, shift + 30.0));
        }
        let candidates = candidates_at(&spots, &text, LABEL_PX, line.active);
        if let Some(label) = placer.place(&candidates, None, 3.0) {
            write_label(out, "ceiling-label", &label, &text, TEXT, line.active);
        }
    }
    let _ = writeln!(out, "</g>");
}
