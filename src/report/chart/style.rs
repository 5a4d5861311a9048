//! Colours, fonts and text sizes of the chart, shared with the HTML report (bound colours).

use plotters::style::RGBColor;

use crate::analysis::Bound;

/// Font stack of every text in the chart: metric-compatible fonts first, so the layout's width
/// estimates (Arial metrics) hold on Windows, macOS and Linux (Liberation Sans).
pub const FONT_FAMILY: &str = "Arial, Helvetica, Liberation Sans, DejaVu Sans, sans-serif";

pub(super) const TITLE_PX: f64 = 22.0;
pub(super) const SUBTITLE_PX: f64 = 15.0;
pub(super) const TICK_PX: f64 = 16.0;
pub(super) const AXIS_TITLE_PX: f64 = 18.0;
pub(super) const LABEL_PX: f64 = 14.0;
pub(super) const LEGEND_PX: f64 = 14.0;
pub(super) const LEGEND_HEAD_PX: f64 = 15.0;
/// plotters writes `font-size = size / 1.24` into the SVG; this undoes it so sizes here are px.
pub(super) const PLOTTERS_FONT_SCALE: f64 = 1.24;

pub(super) const TEXT: Rgb = Rgb(0x1a, 0x1a, 0x1a);
pub(super) const MUTED: Rgb = Rgb(0x55, 0x55, 0x55);
pub(super) const ROOF: Rgb = Rgb(0x1a, 0x1a, 0x1a);
pub(super) const CEILING: Rgb = Rgb(0x5c, 0x5c, 0x5c);
pub(super) const NOT_COSTED: Rgb = Rgb(0xc0, 0x00, 0x00);

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }

    /// A darker shade for outlines, so light fills keep a visible edge in print.
    pub(super) fn darker(self) -> Rgb {
        let scale = |c: u8| (f64::from(c) * 0.6).round() as u8;
        Rgb(scale(self.0), scale(self.1), scale(self.2))
    }

    pub(super) fn plotters(self) -> RGBColor {
        RGBColor(self.0, self.1, self.2)
    }
}

/// Colour of a bound, shared by the chart and the HTML (colour-blind safe, Okabe-Ito based).
pub fn bound_colour(bound: Bound) -> Rgb {
    match bound {
        Bound::Memory => Rgb(0x00, 0x72, 0xb2),
        Bound::Compute => Rgb(0xd5, 0x5e, 0x00),
        Bound::Overhead => Rgb(0x88, 0x5e, 0xb8),
        Bound::None => Rgb(0x9e, 0x9e, 0x9e),
    }
}

/// Colours of the op types with the most time, in `by_op_type` order; the rest are [`OTHER_OP`].
pub const OP_TYPE_PALETTE: [Rgb; 8] = [
    Rgb(0x00, 0x72, 0xb2),
    Rgb(0xd5, 0x5e, 0x00),
    Rgb(0x00, 0x9e, 0x73),
    Rgb(0xcc, 0x79, 0xa7),
    Rgb(0xe6, 0x9f, 0x00),
    Rgb(0x56, 0xb4, 0xe9),
    Rgb(0x8c, 0x56, 0x4b),
    Rgb(0x6a, 0x3d, 0x9a),
];
pub const OTHER_OP: Rgb = Rgb(0x9e, 0x9e, 0x9e);
