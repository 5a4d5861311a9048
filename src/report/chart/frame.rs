//! The frame of the chart: the canvas layout, plotters' log-log axes with grid, ticks and axis
//! titles, the minor grid, the title lines, and [`Frame`], which maps data to pixels.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::model::{ChartScale, Window};
use super::style::{
    AXIS_TITLE_PX, FONT_FAMILY, MUTED, PLOTTERS_FONT_SCALE, SUBTITLE_PX, TEXT, TICK_PX, TITLE_PX,
};
use super::svg::{draw_error, fmt_px};
use super::{SvgOptions, DEFAULT_HEIGHT, DEFAULT_WIDTH};
use crate::analysis::Analysis;
use crate::report::error::ReportError;
use crate::report::label_layout::Rect;
use crate::report::markup::{escape, percent, shorten_middle, tick_label};
use crate::report::units::fmt_seconds;

/// Maps data to pixels (log10 on both axes), in the SVG's coordinate system.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
    pub log_x: (f64, f64),
    pub log_y: (f64, f64),
}

impl Frame {
    pub fn x(&self, intensity: f64) -> f64 {
        self.left
            + (intensity.log10() - self.log_x.0) / (self.log_x.1 - self.log_x.0)
                * (self.right - self.left)
    }

    pub fn y(&self, flops: f64) -> f64 {
        self.bottom
            - (flops.log10() - self.log_y.0) / (self.log_y.1 - self.log_y.0)
                * (self.bottom - self.top)
    }

    /// The intensity at pixel column `px`.
    pub fn x_value(&self, px: f64) -> f64 {
        10f64.powf(
            self.log_x.0
                + (px - self.left) / (self.right - self.left) * (self.log_x.1 - self.log_x.0),
        )
    }

    pub fn contains(&self, px: f64, py: f64) -> bool {
        px >= self.left - 0.5
            && px <= self.right + 0.5
            && py >= self.top - 0.5
            && py <= self.bottom + 0.5
    }

    pub fn bounds(&self) -> Rect {
        Rect {
            x0: self.left,
            y0: self.top,
            x1: self.right,
            y1: self.bottom,
        }
    }

    /// The data window the frame shows.
    pub fn window(&self) -> Window {
        Window {
            log_x: self.log_x,
            log_y: self.log_y,
        }
    }

    /// Angle of a memory roof on screen (slope 1 in log-log data space), in degrees.
    pub fn diagonal_angle(&self) -> f64 {
        let px_per_decade_x = (self.right - self.left) / (self.log_x.1 - self.log_x.0);
        let px_per_decade_y = (self.bottom - self.top) / (self.log_y.1 - self.log_y.0);
        -(px_per_decade_y / px_per_decade_x).atan().to_degrees()
    }
}

/// Layout of the canvas, derived from the size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub width: f64,
    pub height: f64,
    pub title_height: f64,
    pub legend_width: f64,
    pub max_radius: f64,
    pub min_radius: f64,
}

impl Layout {
    pub fn new(width: u32, height: u32) -> Layout {
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
    pub fn radius(&self, share: f64, largest_share: f64) -> f64 {
        let ratio = if largest_share > 0.0 {
            (share / largest_share).clamp(0.0, 1.0)
        } else {
            0.0
        };
        (self.max_radius * ratio.sqrt()).max(self.min_radius)
    }
}

/// plotters' part: background, log-log grid, ticks and axis titles. Returns the document and
/// the pixel frame of the plotting area.
pub(super) fn draw_frame(
    layout: &Layout,
    scale: &ChartScale,
) -> Result<(String, Frame), ReportError> {
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

/// The title and the subtitle (predicted latency, time by bound).
pub(super) fn draw_title(
    out: &mut String,
    analysis: &Analysis,
    options: &SvgOptions,
    layout: &Layout,
) {
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

/// The clip path of the plotting area (ceilings and overlays stay inside it).
pub(super) fn draw_clip_path(out: &mut String, clip_id: &str, frame: &Frame) {
    let _ = writeln!(
        out,
        r#"<clipPath id="{}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath>"#,
        escape(clip_id),
        fmt_px(frame.left),
        fmt_px(frame.top),
        fmt_px(frame.right - frame.left),
        fmt_px(frame.bottom - frame.top)
    );
}

/// Minor grid lines at 2..9 × each decade (plotters' own light lines are linear subdivisions).
pub(super) fn draw_minor_grid(out: &mut String, frame: &Frame) {
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
        assert!((frame.x_value(700.0) - 10.0).abs() < 1e-9);
    }
}
