//! The roofline chart as a standalone SVG document.
//!
//! Layers, each in its own file: [`model`] holds the chart in data coordinates (op placements,
//! ceilings, ridge points, axis ranges) with no SVG in it; `frame` lays out the canvas and has
//! plotters draw the log-log frame (grid, tick labels, axis titles); `ceilings`, `marks` and
//! `legend` draw the marks that carry meaning as plain SVG elements with classes and `data-op`
//! attributes, so the HTML report can link a dot to its table row and tests can find every mark
//! without guessing at plotters' output; `svg` and `style` hold the drawing primitives, colours
//! and fonts. Every number comes from the `Analysis`; the only derived values are display ones
//! (pixel positions, dot radii, and an op's height: work ÷ predicted time, see
//! [`PointHeight`]).
//!
//! Extension points: [`ChartSeries`] overlays draw extra points tied to op indices (measured
//! times from `bench`, the "before" of an advisor rewrite), and [`ChartScale`] lets several
//! charts share axes and dot sizes so they compare by eye.

mod ceilings;
mod frame;
mod legend;
mod marks;
pub mod model;
mod style;
mod svg;

use crate::analysis::Analysis;
use crate::report::error::ReportError;
use crate::report::label_layout::LabelPlacer;
use crate::report::markup::escape;

pub use model::{op_placement, ChartScale, OpPlacement};
pub use style::{bound_colour, Rgb, FONT_FAMILY, OP_TYPE_PALETTE, OTHER_OP};

use frame::{draw_clip_path, draw_frame, draw_minor_grid, draw_title, Layout};
use model::Ceilings;
use svg::draw_error;

pub const DEFAULT_WIDTH: u32 = 1200;
pub const DEFAULT_HEIGHT: u32 = 800;
pub const MIN_WIDTH: u32 = 640;
pub const MIN_HEIGHT: u32 = 420;

/// How dots are coloured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorBy {
    /// Memory, compute or overhead bound (the analysis' verdict).
    #[default]
    Bound,
    /// Op type; the types that take the most time get distinct colours, the rest share grey.
    OpType,
}

/// Where an op's dot sits vertically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PointHeight {
    /// The rate the prediction implies: (FLOPs + transcendental) ÷ predicted time. The predicted
    /// time includes the fixed per-op overhead, so overhead-bound ops sit visibly below the roof;
    /// measured points (`bench`) are placed the same way, so the two compare directly.
    #[default]
    PredictedRate,
    /// The attainable rate at the op's intensity: every op sits on the roof.
    Attainable,
}

/// Marker shape of an overlay series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesMarker {
    Diamond,
    Square,
    Triangle,
}

/// One point of an overlay series.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesPoint {
    /// The op this point belongs to (`NodeAnalysis::index`), when it belongs to one.
    pub op_index: Option<usize>,
    pub intensity: f64,
    pub flops_per_s: f64,
    /// Tooltip text.
    pub label: Option<String>,
}

/// Extra points drawn over the predicted ones: measured rates (`bench`), the ops of a rewritten
/// graph (advisor), a second precision.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartSeries {
    /// Legend text.
    pub name: String,
    pub colour: Rgb,
    pub marker: SeriesMarker,
    pub points: Vec<SeriesPoint>,
    /// Draw a thin line from each op's predicted dot to its point in this series.
    pub connect_to_predicted: bool,
}

/// Options of [`render_roofline_svg`].
#[derive(Clone, Debug, PartialEq)]
pub struct SvgOptions {
    pub width: u32,
    pub height: u32,
    pub color_by: ColorBy,
    pub point_height: PointHeight,
    /// How many of the most expensive ops get a name label.
    pub labelled_ops: usize,
    /// Title line; `None`: "MODEL on DEVICE · PRECISION".
    pub title: Option<String>,
    /// Shared axes and dot scale; `None`: fitted to this analysis.
    pub scale: Option<ChartScale>,
    pub overlays: Vec<ChartSeries>,
    /// Prefix of the element ids inside the SVG (the clip path); charts inlined in one HTML
    /// page need distinct ones.
    pub dom_id: String,
}

impl Default for SvgOptions {
    fn default() -> Self {
        SvgOptions {
            width: DEFAULT_WIDTH,
            height: DEFAULT_HEIGHT,
            color_by: ColorBy::Bound,
            point_height: PointHeight::PredictedRate,
            labelled_ops: 10,
            title: None,
            scale: None,
            overlays: Vec::new(),
            dom_id: "roofline".to_string(),
        }
    }
}

/// Axis ranges and dot scale that fit every analysis (and the overlays of `options`); see
/// [`model::fit_scale`].
pub fn chart_scale(analyses: &[Analysis], options: &SvgOptions) -> Option<ChartScale> {
    model::fit_scale(analyses, options.point_height, &options.overlays)
}

/// Renders the roofline chart of one analysis as a standalone SVG document.
pub fn render_roofline_svg(
    analysis: &Analysis,
    options: &SvgOptions,
) -> Result<String, ReportError> {
    if options.width < MIN_WIDTH || options.height < MIN_HEIGHT {
        return Err(ReportError::ChartTooSmall {
            width: options.width,
            height: options.height,
            min_width: MIN_WIDTH,
            min_height: MIN_HEIGHT,
        });
    }
    let device = &analysis.device;
    let roof = device.roof;
    if !(roof.peak_flops.is_finite()
        && roof.peak_flops > 0.0
        && roof.bandwidth_bytes_per_s.is_finite()
        && roof.bandwidth_bytes_per_s > 0.0)
    {
        return Err(ReportError::NoCeilings {
            device: device.id.clone(),
        });
    }
    let scale = match &options.scale {
        Some(scale) => scale.clone(),
        None => chart_scale(std::slice::from_ref(analysis), options).ok_or_else(|| {
            ReportError::NoCeilings {
                device: device.id.clone(),
            }
        })?,
    };
    let ceilings = Ceilings::of(device);
    let layout = Layout::new(options.width, options.height);
    let (mut svg, frame) = draw_frame(&layout, &scale)?;

    let clip_id = format!("{}-clip", options.dom_id);
    let dots = marks::resolve_dots(analysis, options, &scale, &layout, &frame);
    let mut out = String::new();
    draw_title(&mut out, analysis, options, &layout);
    draw_clip_path(&mut out, &clip_id, &frame);
    draw_minor_grid(&mut out, &frame);
    let ceiling_segments = ceilings::draw_ceilings(&mut out, &ceilings, &frame, &escape(&clip_id));
    marks::draw_overlays(&mut out, options, &dots, &frame, &escape(&clip_id));
    marks::draw_dots(&mut out, &dots, analysis);
    // Labels go on top of everything, placed so that none overlaps another.
    let mut placer = LabelPlacer::new(frame.bounds().grow(-2.0));
    placer.dots = dots.iter().map(|d| (d.cx, d.cy, d.r)).collect();
    placer.lines = ceiling_segments;
    ceilings::draw_ceiling_labels(&mut out, &mut placer, &ceilings, &frame);
    marks::draw_op_labels(&mut out, &mut placer, analysis, options, &dots);
    legend::draw_legend(
        &mut out, analysis, options, &scale, &ceilings, &layout, &frame,
    );

    let close = svg
        .rfind("</svg>")
        .ok_or_else(|| draw_error("plotters wrote no </svg>"))?;
    svg.insert_str(close, &out);
    let root_attrs = format!(
        r#"<svg class="roofline-chart" data-device="{}" font-family="{}" role="img" aria-label="{}" "#,
        escape(&device.id),
        escape(FONT_FAMILY),
        escape(&format!(
            "Roofline chart of {} on {}",
            analysis.model.source, device.name
        )),
    );
    Ok(svg.replacen("<svg ", &root_attrs, 1))
}
