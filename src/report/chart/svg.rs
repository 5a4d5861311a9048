//! SVG drawing primitives shared by the chart's layers: pixel numbers, labels, marker paths.

use std::fmt::Write as _;

use super::style::Rgb;
use super::SeriesMarker;
use crate::report::error::ReportError;
use crate::report::label_layout::PlacedLabel;
use crate::report::markup::escape;

/// A pixel coordinate as written into the SVG: one decimal, none when it is whole.
pub(super) fn fmt_px(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded == rounded.trunc() {
        format!("{}", rounded as i64)
    } else {
        format!("{rounded:.1}")
    }
}

pub(super) fn draw_error(error: impl std::fmt::Display) -> ReportError {
    ReportError::Drawing(error.to_string())
}

/// A placed label as a `<text>` with a white halo.
pub(super) fn write_label(
    out: &mut String,
    class: &str,
    label: &PlacedLabel,
    text: &str,
    colour: Rgb,
    bold: bool,
) {
    let _ = writeln!(
        out,
        r#"<text class="{class}" x="{}" y="{}" text-anchor="{}" fill="{}"{} stroke="white" stroke-width="4" paint-order="stroke">{}</text>"#,
        fmt_px(label.x),
        fmt_px(label.baseline),
        label.anchor.svg(),
        colour.hex(),
        if bold { r#" font-weight="bold""# } else { "" },
        escape(text),
    );
}

/// The path of an overlay marker centred on (x, y).
pub(super) fn marker_path(marker: SeriesMarker, x: f64, y: f64, size: f64) -> String {
    let s = size;
    match marker {
        SeriesMarker::Diamond => format!(
            "M{} {}L{} {}L{} {}L{} {}Z",
            fmt_px(x),
            fmt_px(y - s),
            fmt_px(x + s),
            fmt_px(y),
            fmt_px(x),
            fmt_px(y + s),
            fmt_px(x - s),
            fmt_px(y)
        ),
        SeriesMarker::Square => {
            let h = s * 0.8;
            format!(
                "M{} {}h{}v{}h{}Z",
                fmt_px(x - h),
                fmt_px(y - h),
                fmt_px(2.0 * h),
                fmt_px(2.0 * h),
                fmt_px(-2.0 * h)
            )
        }
        SeriesMarker::Triangle => format!(
            "M{} {}L{} {}L{} {}Z",
            fmt_px(x),
            fmt_px(y - s),
            fmt_px(x + s * 0.9),
            fmt_px(y + s * 0.6),
            fmt_px(x - s * 0.9),
            fmt_px(y + s * 0.6)
        ),
    }
}

/// An ✕ centred on (x, y).
pub(super) fn cross_path(x: f64, y: f64, half: f64) -> String {
    format!(
        "M{} {}L{} {}M{} {}L{} {}",
        fmt_px(x - half),
        fmt_px(y - half),
        fmt_px(x + half),
        fmt_px(y + half),
        fmt_px(x - half),
        fmt_px(y + half),
        fmt_px(x + half),
        fmt_px(y - half)
    )
}
