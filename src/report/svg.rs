//! The roofline chart as a standalone SVG document.
//!
//! plotters draws the frame: the log-log coordinate system, grid, tick labels and axis titles.
//! The marks that carry meaning (ceilings, ridge points, one dot per op, labels, legend) are
//! emitted here as plain SVG elements with classes and `data-op` attributes, so the HTML report
//! can link a dot to its table row and tests can find every mark without guessing at plotters'
//! output. Every number comes from the `Analysis`; the only derived values are display ones
//! (pixel positions, dot radii, and an op's height: work ÷ predicted time, see [`PointHeight`]).
//!
//! Extension points for the reports that come next: [`ChartSeries`] overlays draw extra points
//! tied to op indices (measured times from `bench`, the "after" of an advisor rewrite), and
//! [`ChartScale`] lets several charts share axes and dot sizes so they compare by eye.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;

use super::error::ReportError;
use super::label_layout::{
    candidates_around, candidates_at, Anchor, LabelPlacer, PlacedLabel, Rect, Segment,
};
use super::markup::{
    escape, fit_width, percent, shorten_middle, si3, si_unit, text_width, tick_label,
};
use super::units::{fmt_bytes, fmt_seconds};
use crate::analysis::model::DeviceInfo;
use crate::analysis::{Analysis, Bound, NodeAnalysis, NodeStatus};
use crate::device::{MemoryLevel, Precision};

pub const DEFAULT_WIDTH: u32 = 1200;
pub const DEFAULT_HEIGHT: u32 = 800;
pub const MIN_WIDTH: u32 = 640;
pub const MIN_HEIGHT: u32 = 420;

/// Font stack of every text in the chart: metric-compatible fonts first, so the layout's width
/// estimates (Arial metrics) hold on Windows, macOS and Linux (Liberation Sans).
pub const FONT_FAMILY: &str = "Arial, Helvetica, Liberation Sans, DejaVu Sans, sans-serif";

const TITLE_PX: f64 = 22.0;
const SUBTITLE_PX: f64 = 15.0;
const TICK_PX: f64 = 16.0;
const AXIS_TITLE_PX: f64 = 18.0;
const LABEL_PX: f64 = 14.0;
const LEGEND_PX: f64 = 14.0;
const LEGEND_HEAD_PX: f64 = 15.0;
/// plotters writes `font-size = size / 1.24` into the SVG; this undoes it so sizes here are px.
const PLOTTERS_FONT_SCALE: f64 = 1.24;

const TEXT: Rgb = Rgb(0x1a, 0x1a, 0x1a);
const MUTED: Rgb = Rgb(0x55, 0x55, 0x55);
const ROOF: Rgb = Rgb(0x1a, 0x1a, 0x1a);
const CEILING: Rgb = Rgb(0x5c, 0x5c, 0x5c);
const NOT_COSTED: Rgb = Rgb(0xc0, 0x00, 0x00);

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

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }

    /// A darker shade for outlines, so light fills keep a visible edge in print.
    fn darker(self) -> Rgb {
        let scale = |c: u8| (f64::from(c) * 0.6).round() as u8;
        Rgb(scale(self.0), scale(self.1), scale(self.2))
    }

    fn plotters(self) -> RGBColor {
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

/// Axis ranges and dot scale; share one between charts that should compare by eye.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartScale {
    /// Intensity axis range in FLOP/byte (decade-aligned).
    pub intensity: (f64, f64),
    /// Performance axis range in FLOP/s (decade-aligned).
    pub flops_per_s: (f64, f64),
    /// The time share drawn with the largest dot radius.
    pub largest_share: f64,
    /// Op types in colour order (for [`ColorBy::OpType`]).
    pub op_type_order: Vec<String>,
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

/// Where an op lands on the chart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpPlacement {
    /// Drawn at (intensity FLOP/B, rate FLOP/s).
    Plotted { intensity: f64, flops_per_s: f64 },
    /// Costed with an intensity, but zero work (pure data movement such as Transpose) or a zero
    /// time: no position on a log axis, so it is drawn in the legend's strip.
    OffScale,
    /// Not drawn as a dot: a view or folded op, or one that moved no bytes.
    Hidden,
    /// Not costed: marked in the legend's strip with a cross.
    NotCosted,
}

/// Where `node` goes on the chart.
pub fn op_placement(node: &NodeAnalysis, height: PointHeight) -> OpPlacement {
    match node.status {
        NodeStatus::NotCosted => return OpPlacement::NotCosted,
        NodeStatus::View | NodeStatus::Folded => return OpPlacement::Hidden,
        NodeStatus::Costed => {}
    }
    let Some(intensity) = node.intensity else {
        return OpPlacement::Hidden;
    };
    let flops_per_s = match height {
        PointHeight::PredictedRate if node.predicted_s > 0.0 => {
            (node.flops + node.transcendental) as f64 / node.predicted_s
        }
        PointHeight::PredictedRate => 0.0,
        PointHeight::Attainable => node.attainable_flops,
    };
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if positive(intensity) && positive(flops_per_s) {
        OpPlacement::Plotted {
            intensity,
            flops_per_s,
        }
    } else {
        OpPlacement::OffScale
    }
}

/// A compute ceiling as drawn: precisions with the same peak share one line.
#[derive(Clone, Debug)]
struct ComputeLine {
    precisions: Vec<Precision>,
    flops_per_s: f64,
    /// The precision the analysis ran at is on this line.
    active: bool,
}

impl ComputeLine {
    fn name(&self) -> String {
        let names: Vec<&str> = self.precisions.iter().map(|p| p.name()).collect();
        names.join("/")
    }

    fn unit(&self) -> &'static str {
        // Integer ceilings count operations, not floating-point ones.
        if self.precisions.iter().all(|p| *p == Precision::Int8) {
            "OP/s"
        } else {
            "FLOP/s"
        }
    }
}

#[derive(Clone, Debug)]
struct MemoryLine {
    level: MemoryLevel,
    bytes_per_s: f64,
}

fn compute_lines(device: &DeviceInfo) -> Vec<ComputeLine> {
    let mut lines: Vec<ComputeLine> = Vec::new();
    for ceiling in &device.compute_ceilings {
        if !(ceiling.flops_per_s.is_finite() && ceiling.flops_per_s > 0.0) {
            continue;
        }
        let active = ceiling.precision == device.precision;
        let same = lines.iter_mut().find(|line| {
            (line.flops_per_s - ceiling.flops_per_s).abs() <= 1e-9 * ceiling.flops_per_s
        });
        match same {
            Some(line) => {
                if !line.precisions.contains(&ceiling.precision) {
                    line.precisions.push(ceiling.precision);
                }
                line.active |= active;
            }
            None => lines.push(ComputeLine {
                precisions: vec![ceiling.precision],
                flops_per_s: ceiling.flops_per_s,
                active,
            }),
        }
    }
    lines.sort_by(|a, b| b.flops_per_s.total_cmp(&a.flops_per_s));
    lines
}

fn memory_lines(device: &DeviceInfo) -> Vec<MemoryLine> {
    let mut lines: Vec<MemoryLine> = device
        .memory_ceilings
        .iter()
        .filter(|m| m.bytes_per_s.is_finite() && m.bytes_per_s > 0.0)
        .map(|m| MemoryLine {
            level: m.level,
            bytes_per_s: m.bytes_per_s,
        })
        .collect();
    lines.sort_by_key(|m| m.level);
    lines.dedup_by_key(|m| m.level);
    lines
}

/// The ridge points worth marking: every compute line against DRAM, and the analysis' peak
/// against every cache level. Returns (intensity, FLOP/s, label).
fn ridge_points(device: &DeviceInfo) -> Vec<(f64, f64, String)> {
    let mut ridges = Vec::new();
    let dram = memory_lines(device)
        .into_iter()
        .find(|m| m.level == MemoryLevel::Dram);
    // The analysis' own ridge point, as it computed it (drawn even when the profile lists no
    // compute ceilings, as a hand-written one may).
    ridges.push((
        device.ridge_point,
        device.roof.peak_flops,
        format!("ridge {} FLOP/B", si3(device.ridge_point)),
    ));
    for line in compute_lines(device) {
        if line.active {
            continue;
        } else if let Some(dram) = &dram {
            // The other ceilings are named at their ridge: their lines are often too short
            // right of it for a second label.
            let x = line.flops_per_s / dram.bytes_per_s;
            ridges.push((
                x,
                line.flops_per_s,
                format!(
                    "{} {} · ridge {}",
                    line.name(),
                    si_unit(line.flops_per_s, line.unit()),
                    si3(x)
                ),
            ));
        }
    }
    for cache in memory_lines(device)
        .into_iter()
        .filter(|m| m.level != MemoryLevel::Dram)
    {
        let x = device.roof.peak_flops / cache.bytes_per_s;
        ridges.push((
            x,
            device.roof.peak_flops,
            format!("{} ridge {}", cache.level.name(), si3(x)),
        ));
    }
    ridges
        .into_iter()
        .filter(|(x, y, _)| x.is_finite() && *x > 0.0 && y.is_finite() && *y > 0.0)
        .collect()
}

fn decade_floor(value: f64) -> f64 {
    10f64.powf(value.log10().floor())
}

fn decade_ceil(value: f64) -> f64 {
    10f64.powf(value.log10().ceil())
}

/// Axis ranges and dot scale that fit every analysis (and the overlays of `options`).
pub fn chart_scale(analyses: &[Analysis], options: &SvgOptions) -> Option<ChartScale> {
    let mut xs: Vec<f64> = Vec::new();
    let mut ys: Vec<f64> = Vec::new();
    let mut ceiling_top: f64 = 0.0;
    let mut largest_share: f64 = 0.0;
    for analysis in analyses {
        for node in &analysis.nodes {
            if let OpPlacement::Plotted {
                intensity,
                flops_per_s,
            } = op_placement(node, options.point_height)
            {
                xs.push(intensity);
                ys.push(flops_per_s);
                largest_share = largest_share.max(node.time_share);
            }
        }
        for (x, y, _) in ridge_points(&analysis.device) {
            xs.push(x);
            ys.push(y);
        }
        for line in compute_lines(&analysis.device) {
            ceiling_top = ceiling_top.max(line.flops_per_s);
        }
        ceiling_top = ceiling_top.max(analysis.device.roof.peak_flops);
    }
    for series in &options.overlays {
        for p in &series.points {
            if p.intensity > 0.0 && p.flops_per_s > 0.0 && p.intensity.is_finite() {
                xs.push(p.intensity);
                ys.push(p.flops_per_s);
            }
        }
    }
    let finite_positive = |v: &&f64| v.is_finite() && **v > 0.0;
    let x_min = xs
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::min)?;
    let x_max = xs
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::max)?;
    if !(ceiling_top.is_finite() && ceiling_top > 0.0) {
        return None;
    }
    let y_min = ys
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::min)
        .unwrap_or(ceiling_top / 1e3);
    // Half a decade of room around the data; the top leaves space for the ceiling labels.
    let mut x_lo = decade_floor(x_min / 2.0);
    let mut x_hi = decade_ceil(x_max * 2.0);
    if x_hi / x_lo < 1e3 {
        x_lo = x_lo.min(decade_floor(x_hi / 1e3));
    }
    if x_hi <= x_lo {
        x_hi = x_lo * 10.0;
    }
    let y_hi = decade_ceil(ceiling_top * 1.6);
    let mut y_lo = decade_floor(y_min / 2.0);
    if y_hi / y_lo < 1e3 {
        y_lo = decade_floor(y_hi / 1e3);
    }
    let mut op_type_order: Vec<String> = Vec::new();
    for analysis in analyses {
        for share in &analysis.summary.by_op_type {
            if !op_type_order.contains(&share.op_type) {
                op_type_order.push(share.op_type.clone());
            }
        }
    }
    Some(ChartScale {
        intensity: (x_lo, x_hi),
        flops_per_s: (y_lo, y_hi),
        largest_share: if largest_share > 0.0 {
            largest_share
        } else {
            1.0
        },
        op_type_order,
    })
}

/// Maps data to pixels (log10 on both axes), in the SVG's coordinate system.
#[derive(Clone, Copy, Debug)]
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    log_x: (f64, f64),
    log_y: (f64, f64),
}

impl Frame {
    fn x(&self, intensity: f64) -> f64 {
        self.left
            + (intensity.log10() - self.log_x.0) / (self.log_x.1 - self.log_x.0)
                * (self.right - self.left)
    }

    fn y(&self, flops: f64) -> f64 {
        self.bottom
            - (flops.log10() - self.log_y.0) / (self.log_y.1 - self.log_y.0)
                * (self.bottom - self.top)
    }

    /// The intensity at pixel column `px`.
    fn x_value(&self, px: f64) -> f64 {
        10f64.powf(
            self.log_x.0
                + (px - self.left) / (self.right - self.left) * (self.log_x.1 - self.log_x.0),
        )
    }

    fn contains(&self, px: f64, py: f64) -> bool {
        px >= self.left - 0.5
            && px <= self.right + 0.5
            && py >= self.top - 0.5
            && py <= self.bottom + 0.5
    }

    fn bounds(&self) -> Rect {
        Rect {
            x0: self.left,
            y0: self.top,
            x1: self.right,
            y1: self.bottom,
        }
    }

    /// Angle of a memory roof on screen (slope 1 in log-log data space), in degrees.
    fn diagonal_angle(&self) -> f64 {
        let px_per_decade_x = (self.right - self.left) / (self.log_x.1 - self.log_x.0);
        let px_per_decade_y = (self.bottom - self.top) / (self.log_y.1 - self.log_y.0);
        -(px_per_decade_y / px_per_decade_x).atan().to_degrees()
    }
}

/// One op's dot, resolved to pixels.
#[derive(Clone, Debug)]
struct Dot<'a> {
    node: &'a NodeAnalysis,
    cx: f64,
    cy: f64,
    r: f64,
    fill: Rgb,
    intensity: f64,
    flops_per_s: f64,
}

/// Layout of the canvas, derived from the size.
#[derive(Clone, Copy, Debug)]
struct Layout {
    width: f64,
    height: f64,
    title_height: f64,
    legend_width: f64,
    max_radius: f64,
    min_radius: f64,
}

impl Layout {
    fn new(width: u32, height: u32) -> Layout {
        let w = f64::from(width);
        let h = f64::from(height);
        let scale = (w / f64::from(DEFAULT_WIDTH)).min(h / f64::from(DEFAULT_HEIGHT));
        Layout {
            width: w,
            height: h,
            title_height: 66.0,
            legend_width: (w * 0.22).clamp(230.0, 300.0),
            max_radius: (24.0 * scale).max(12.0),
            min_radius: 3.0,
        }
    }

    /// Dot radius: area proportional to the time share (with a floor so every op stays
    /// visible; the legend states the floor).
    fn radius(&self, share: f64, largest_share: f64) -> f64 {
        let ratio = if largest_share > 0.0 {
            (share / largest_share).clamp(0.0, 1.0)
        } else {
            0.0
        };
        (self.max_radius * ratio.sqrt()).max(self.min_radius)
    }
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

fn fmt_px(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded == rounded.trunc() {
        format!("{}", rounded as i64)
    } else {
        format!("{rounded:.1}")
    }
}

fn draw_error(error: impl std::fmt::Display) -> ReportError {
    ReportError::Drawing(error.to_string())
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
    let layout = Layout::new(options.width, options.height);
    let (mut svg, frame) = draw_frame(&layout, &scale)?;

    let clip_id = format!("{}-clip", options.dom_id);
    let dots = resolve_dots(analysis, options, &scale, &layout, &frame);
    let mut marks = String::new();
    draw_title(&mut marks, analysis, options, &layout);
    let _ = writeln!(
        marks,
        r#"<clipPath id="{}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath>"#,
        escape(&clip_id),
        fmt_px(frame.left),
        fmt_px(frame.top),
        fmt_px(frame.right - frame.left),
        fmt_px(frame.bottom - frame.top)
    );
    draw_minor_grid(&mut marks, &frame);
    let ceiling_segments = draw_ceilings(&mut marks, device, &frame, &escape(&clip_id));
    draw_overlays(&mut marks, options, &dots, &frame, &escape(&clip_id));
    draw_dots(&mut marks, &dots, analysis);
    // Labels go on top of everything, placed so that none overlaps another.
    let mut placer = LabelPlacer::new(frame.bounds().grow(-2.0));
    placer.dots = dots.iter().map(|d| (d.cx, d.cy, d.r)).collect();
    placer.lines = ceiling_segments;
    draw_ceiling_labels(&mut marks, &mut placer, device, &frame);
    draw_op_labels(&mut marks, &mut placer, analysis, options, &dots);
    draw_legend(&mut marks, analysis, options, &scale, &layout, &frame);

    let close = svg
        .rfind("</svg>")
        .ok_or_else(|| draw_error("plotters wrote no </svg>"))?;
    svg.insert_str(close, &marks);
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

/// plotters' part: background, log-log grid, ticks and axis titles. Returns the document and
/// the pixel frame of the plotting area.
fn draw_frame(layout: &Layout, scale: &ChartScale) -> Result<(String, Frame), ReportError> {
    // A hair wider than the decades, so plotters' key points (computed through ln) include the
    // end decades and label them.
    let pad = 1.0 + 1e-9;
    let (x_lo, x_hi) = (scale.intensity.0 / pad, scale.intensity.1 * pad);
    let (y_lo, y_hi) = (scale.flops_per_s.0 / pad, scale.flops_per_s.1 * pad);
    let mut buffer = String::new();
    let frame;
    {
        let size = (layout.width as u32, layout.height as u32);
        let root = SVGBackend::with_string(&mut buffer, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let area = root.margin(
            layout.title_height as i32,
            10,
            8,
            (layout.legend_width + 14.0) as i32,
        );
        let mut chart = ChartBuilder::on(&area)
            .x_label_area_size(64)
            .y_label_area_size(92)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(draw_error)?;
        let x_decades = (x_hi / x_lo).log10().round().max(1.0) as usize;
        let y_decades = (y_hi / y_lo).log10().round().max(1.0) as usize;
        let tick_style = (FONT_FAMILY, TICK_PX * PLOTTERS_FONT_SCALE)
            .into_font()
            .color(&TEXT.plotters());
        let axis_title_style = (FONT_FAMILY, AXIS_TITLE_PX * PLOTTERS_FONT_SCALE)
            .into_font()
            .color(&TEXT.plotters());
        let format_tick = |v: &f64| tick_label(*v);
        chart
            .configure_mesh()
            .x_labels(x_decades + 1)
            .y_labels(y_decades + 1)
            .x_label_formatter(&format_tick)
            .y_label_formatter(&format_tick)
            .label_style(tick_style)
            .axis_desc_style(axis_title_style)
            .x_desc("Arithmetic intensity (FLOP/byte)")
            .y_desc("Performance (FLOP/s)")
            .bold_line_style(RGBColor(0xd4, 0xd4, 0xd4).stroke_width(1))
            // Minor lines are drawn at 2..9 × each decade by `draw_minor_grid` instead.
            .light_line_style(TRANSPARENT)
            .axis_style(RGBColor(0x44, 0x44, 0x44).stroke_width(1))
            .draw()
            .map_err(draw_error)?;
        let (left, bottom) = chart.backend_coord(&(x_lo, y_lo));
        let (right, top) = chart.backend_coord(&(x_hi, y_hi));
        frame = Frame {
            left: f64::from(left),
            right: f64::from(right),
            top: f64::from(top),
            bottom: f64::from(bottom),
            log_x: (x_lo.log10(), x_hi.log10()),
            log_y: (y_lo.log10(), y_hi.log10()),
        };
        root.present().map_err(draw_error)?;
    }
    Ok((buffer, frame))
}

fn draw_title(out: &mut String, analysis: &Analysis, options: &SvgOptions, layout: &Layout) {
    let title = options.title.clone().unwrap_or_else(|| {
        format!(
            "{} on {} · {}",
            analysis.model.source, analysis.device.name, analysis.precision
        )
    });
    let summary = &analysis.summary;
    let subtitle = format!(
        "predicted {} · time {} memory-, {} compute-, {} overhead-bound · dots at FLOPs ÷ predicted time",
        fmt_seconds(summary.predicted_latency_s),
        percent(summary.memory_bound_share),
        percent(summary.compute_bound_share),
        percent(summary.overhead_bound_share),
    );
    let max_chars = ((layout.width - 40.0) / (TITLE_PX * 0.6)) as usize;
    let _ = writeln!(
        out,
        r#"<text class="chart-title" x="20" y="30" font-size="{TITLE_PX}" font-weight="bold" fill="{}">{}</text>"#,
        TEXT.hex(),
        escape(&shorten_middle(&title, max_chars))
    );
    let _ = writeln!(
        out,
        r#"<text class="chart-subtitle" x="20" y="53" font-size="{SUBTITLE_PX}" fill="{}">{}</text>"#,
        MUTED.hex(),
        escape(&subtitle)
    );
}

/// A line segment of a roof clipped to the plot, in data coordinates.
fn clip_memory_roof(
    bytes_per_s: f64,
    x_end: f64,
    frame: &Frame,
) -> Option<((f64, f64), (f64, f64))> {
    let x_lo = 10f64.powf(frame.log_x.0);
    let x_hi = 10f64.powf(frame.log_x.1);
    let y_lo = 10f64.powf(frame.log_y.0);
    let y_hi = 10f64.powf(frame.log_y.1);
    let start = x_lo.max(y_lo / bytes_per_s);
    let end = x_end.min(x_hi).min(y_hi / bytes_per_s);
    (start < end).then_some(((start, start * bytes_per_s), (end, end * bytes_per_s)))
}

/// The top compute ceiling and the top bandwidth of a device, for where lines start and end.
fn ceiling_extremes(device: &DeviceInfo) -> (f64, f64) {
    let top_compute = compute_lines(device)
        .iter()
        .map(|c| c.flops_per_s)
        .fold(device.roof.peak_flops, f64::max);
    let top_bandwidth = memory_lines(device)
        .iter()
        .map(|m| m.bytes_per_s)
        .fold(device.roof.bandwidth_bytes_per_s, f64::max);
    (top_compute, top_bandwidth)
}

/// Minor grid lines at 2..9 × each decade (plotters' own light lines are linear subdivisions).
fn draw_minor_grid(out: &mut String, frame: &Frame) {
    let _ = writeln!(
        out,
        r##"<g class="minor-grid" stroke="#eeeeee" stroke-width="1">"##
    );
    for decade in frame.log_x.0.floor() as i32..frame.log_x.1.ceil() as i32 {
        for m in 2..10 {
            let value = f64::from(m) * 10f64.powi(decade);
            let x = frame.x(value);
            if x > frame.left + 0.5 && x < frame.right - 0.5 {
                let _ = writeln!(
                    out,
                    r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                    fmt_px(frame.top),
                    fmt_px(frame.bottom),
                    x = fmt_px(x)
                );
            }
        }
    }
    for decade in frame.log_y.0.floor() as i32..frame.log_y.1.ceil() as i32 {
        for m in 2..10 {
            let value = f64::from(m) * 10f64.powi(decade);
            let y = frame.y(value);
            if y > frame.top + 0.5 && y < frame.bottom - 0.5 {
                let _ = writeln!(
                    out,
                    r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
                    fmt_px(frame.left),
                    fmt_px(frame.right),
                    y = fmt_px(y)
                );
            }
        }
    }
    let _ = writeln!(out, "</g>");
}

/// The ceiling lines and the ridge markers.
/// Draws the ceilings; returns their segments in pixels so that labels can keep off them.
fn draw_ceilings(
    out: &mut String,
    device: &DeviceInfo,
    frame: &Frame,
    clip_id: &str,
) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    let compute = compute_lines(device);
    let memory = memory_lines(device);
    let (top_compute, top_bandwidth) = ceiling_extremes(device);
    let x_hi = 10f64.powf(frame.log_x.1);
    let _ = writeln!(out, r#"<g class="ceilings" clip-path="url(#{clip_id})">"#);
    // Thin lines: every other ceiling, drawn where it could bind (from where it meets the
    // fastest memory level). The analysis' own ceiling gets a thin part too when a cache is
    // faster than DRAM: left of the DRAM ridge it binds only data that stays in cache.
    for line in &compute {
        let x0 = line.flops_per_s / top_bandwidth;
        let x1 = if line.active {
            device.ridge_point.min(x_hi)
        } else {
            x_hi
        };
        if x0 >= x1 * (1.0 - 1e-9) {
            continue;
        }
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
    for level in memory.iter().filter(|m| m.level != MemoryLevel::Dram) {
        if let Some(((xa, ya), (xb, yb))) =
            clip_memory_roof(level.bytes_per_s, top_compute / level.bytes_per_s, frame)
        {
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
    // The DRAM roof above the analysis' own peak (it binds only higher precisions' peaks).
    let dram_bw = device.roof.bandwidth_bytes_per_s;
    if top_compute > device.roof.peak_flops * (1.0 + 1e-9) {
        if let Some(((xa, _), (xb, yb))) = clip_memory_roof(dram_bw, top_compute / dram_bw, frame) {
            let xa = xa.max(device.ridge_point);
            if xa < xb {
                segments.push(Segment {
                    x0: frame.x(xa),
                    y0: frame.y(xa * dram_bw),
                    x1: frame.x(xb),
                    y1: frame.y(yb),
                });
                let _ = writeln!(
                    out,
                    r#"<line class="ceiling memory-extension" x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.6" stroke-dasharray="7 5"/>"#,
                    fmt_px(frame.x(xa)),
                    fmt_px(frame.y(xa * dram_bw)),
                    fmt_px(frame.x(xb)),
                    fmt_px(frame.y(yb)),
                    CEILING.hex(),
                );
            }
        }
    }
    // The roof the analysis used: min(peak, intensity × DRAM bandwidth), bold.
    if let Some(((xa, ya), _)) = clip_memory_roof(dram_bw, device.ridge_point, frame) {
        let ridge_x = device.ridge_point.min(x_hi);
        let bend = (
            frame.x(ridge_x),
            frame.y(device.roof.peak_flops.min(ridge_x * dram_bw)),
        );
        segments.push(Segment {
            x0: frame.x(xa),
            y0: frame.y(ya),
            x1: bend.0,
            y1: bend.1,
        });
        segments.push(Segment {
            x0: bend.0,
            y0: bend.1,
            x1: frame.x(x_hi),
            y1: frame.y(device.roof.peak_flops),
        });
        let _ = writeln!(
            out,
            r#"<polyline class="roof" data-peak="{}" data-bandwidth="{}" data-ridge="{}" points="{},{} {},{} {},{}" fill="none" stroke="{}" stroke-width="3.2" stroke-linejoin="round"/>"#,
            device.roof.peak_flops,
            dram_bw,
            device.ridge_point,
            fmt_px(frame.x(xa)),
            fmt_px(frame.y(ya)),
            fmt_px(frame.x(ridge_x)),
            fmt_px(frame.y(device.roof.peak_flops.min(ridge_x * dram_bw))),
            fmt_px(frame.x(x_hi)),
            fmt_px(frame.y(device.roof.peak_flops)),
            ROOF.hex(),
        );
    }
    for (x, y, _) in ridge_points(device) {
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
fn draw_ceiling_labels(
    out: &mut String,
    placer: &mut LabelPlacer,
    device: &DeviceInfo,
    frame: &Frame,
) {
    let compute = compute_lines(device);
    let memory = memory_lines(device);
    let (top_compute, top_bandwidth) = ceiling_extremes(device);
    let _ = writeln!(out, r#"<g class="ceiling-labels" font-size="{LABEL_PX}">"#);
    // Memory labels have one natural spot (low on their line), so they go first.
    let angle = frame.diagonal_angle();
    for level in &memory {
        let Some(((xa, _), (xb, _))) =
            clip_memory_roof(level.bytes_per_s, top_compute / level.bytes_per_s, frame)
        else {
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
    let ridges: Vec<(f64, f64, String)> = ridge_points(device)
        .into_iter()
        .filter(|(x, y, _)| frame.contains(frame.x(*x), frame.y(*y)))
        .collect();
    for (x, y, _) in &ridges {
        let (px, py) = (frame.x(*x), frame.y(*y));
        placer.reserve(Rect {
            x0: px - 6.0,
            y0: py - 6.0,
            x1: px + 6.0,
            y1: py + 6.0,
        });
    }
    for (x, y, text) in &ridges {
        let (px, py) = (frame.x(*x), frame.y(*y));
        // Above the roof and left of the ridge no op can be, so that is the first choice.
        let spots = [
            (px - 8.0, py - 9.0, Anchor::End, 0.0),
            (px - 8.0, py - 27.0, Anchor::End, 6.0),
            (px + 8.0, py - 9.0, Anchor::Start, 8.0),
            (px - 8.0, py - 45.0, Anchor::End, 10.0),
            (px + 8.0, py + 20.0, Anchor::Start, 14.0),
        ];
        let candidates = candidates_at(&spots, text, LABEL_PX, false);
        if let Some(label) = placer.place(&candidates, None, 2.0) {
            write_label(out, "ridge-label", &label, text, TEXT, false);
        }
    }
    let dram_bandwidth = device.roof.bandwidth_bytes_per_s;
    for line in &compute {
        let py = frame.y(line.flops_per_s);
        if py < frame.top || py > frame.bottom {
            continue;
        }
        let named_at_ridge = !line.active
            && frame.contains(frame.x(line.flops_per_s / dram_bandwidth), py)
            && ridges.iter().any(|(_, y, _)| *y == line.flops_per_s);
        if named_at_ridge {
            continue;
        }
        let text = format!("{} {}", line.name(), si_unit(line.flops_per_s, line.unit()));
        // Along the line from the right edge leftwards (never left of where the line starts),
        // just above it first, then below, then a little further away.
        let width = text_width(&text, LABEL_PX, line.active);
        let line_start = if line.active {
            frame.x(device.ridge_point)
        } else {
            frame.x(line.flops_per_s / top_bandwidth)
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

fn write_label(
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

fn resolve_dots<'a>(
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
    // Big dots first so small ones stay visible on top.
    dots.sort_by(|a, b| b.r.total_cmp(&a.r).then(a.node.index.cmp(&b.node.index)));
    dots
}

fn op_tooltip(node: &NodeAnalysis, intensity: Option<f64>, flops_per_s: Option<f64>) -> String {
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

fn draw_dots(out: &mut String, dots: &[Dot<'_>], analysis: &Analysis) {
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

fn draw_op_labels(
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

fn marker_path(marker: SeriesMarker, x: f64, y: f64, size: f64) -> String {
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

fn cross_path(x: f64, y: f64, half: f64) -> String {
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

fn draw_overlays(
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

fn draw_legend(
    out: &mut String,
    analysis: &Analysis,
    options: &SvgOptions,
    scale: &ChartScale,
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
    if compute_lines(&analysis.device).len() > 1 {
        let swatch = line_swatch(r#" stroke-dasharray="7 5""#, 1.6);
        legend.row(&swatch, "other precisions", false);
    }
    if memory_lines(&analysis.device)
        .iter()
        .any(|m| m.level != MemoryLevel::Dram)
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radius_area_is_proportional_to_share() {
        let layout = Layout::new(DEFAULT_WIDTH, DEFAULT_HEIGHT);
        let big = layout.radius(0.4, 0.4);
        let quarter = layout.radius(0.1, 0.4);
        assert!((big / quarter - 2.0).abs() < 1e-9);
        assert_eq!(layout.radius(0.0, 0.4), layout.min_radius);
    }

    #[test]
    fn frame_maps_decades_linearly() {
        let frame = Frame {
            left: 100.0,
            right: 1000.0,
            top: 50.0,
            bottom: 650.0,
            log_x: (-1.0, 2.0),
            log_y: (9.0, 15.0),
        };
        assert!((frame.x(0.1) - 100.0).abs() < 1e-9);
        assert!((frame.x(10.0) - 700.0).abs() < 1e-9);
        assert!((frame.y(1e12) - 350.0).abs() < 1e-9);
    }
}
