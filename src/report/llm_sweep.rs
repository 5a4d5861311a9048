//! The tokens/s-by-batch chart of an LLM report: one line per analysis that carries a batch
//! sweep (a device, or a device and phase with `--phase both`), batch across on a log2 axis,
//! tokens/s up on a log10 axis, each point coloured by the bound that sets its step and drawn
//! hollow where the batch does not fit the device's memory. `SweepChart` is the chart in data
//! coordinates (no SVG in it, unit-tested on numbers); `render_svg` draws it.

use std::fmt::Write;

use super::chart::{bound_colour, OP_TYPE_PALETTE};
use super::markup::escape;
use super::units::fmt_seconds;
use crate::analysis::llm::BatchPoint;
use crate::analysis::Analysis;

/// One line: an analysis's sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSeries {
    /// The analysis's device id (it names the phase too when both phases are drawn).
    pub label: String,
    pub points: Vec<BatchPoint>,
}

/// The chart in data coordinates.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepChart {
    pub series: Vec<SweepSeries>,
    /// Smallest and largest batch drawn (the x axis spans them, log2).
    pub batches: (u64, u64),
    /// Tokens/s axis, whole decades around every point (log10).
    pub rates: (f64, f64),
}

impl SweepChart {
    /// The chart of every analysis with a sweep; None when none has one.
    pub fn of(analyses: &[Analysis]) -> Option<SweepChart> {
        let series: Vec<SweepSeries> = analyses
            .iter()
            .filter_map(|a| {
                let llm = a.llm.as_ref()?;
                let points: Vec<BatchPoint> = llm
                    .batch_sweep
                    .iter()
                    .filter(|p| p.batch > 0 && p.tokens_per_s.is_finite() && p.tokens_per_s > 0.0)
                    .cloned()
                    .collect();
                (!points.is_empty()).then(|| SweepSeries {
                    label: a.device.id.clone(),
                    points,
                })
            })
            .collect();
        let points = || series.iter().flat_map(|s| s.points.iter());
        let min_batch = points().map(|p| p.batch).min()?;
        let max_batch = points().map(|p| p.batch).max()?;
        let min_rate = points()
            .map(|p| p.tokens_per_s)
            .fold(f64::INFINITY, f64::min);
        let max_rate = points().map(|p| p.tokens_per_s).fold(0.0, f64::max);
        let low = 10f64.powf(min_rate.log10().floor());
        let mut high = 10f64.powf(max_rate.log10().ceil());
        if high <= low {
            high = low * 10.0;
        }
        Some(SweepChart {
            series,
            batches: (min_batch, max_batch.max(min_batch * 2)),
            rates: (low, high),
        })
    }

    /// Where `batch` sits across the plot, 0 (left) to 1 (right).
    pub fn x_fraction(&self, batch: u64) -> f64 {
        let (low, high) = (self.batches.0 as f64, self.batches.1 as f64);
        ((batch as f64).log2() - low.log2()) / (high.log2() - low.log2())
    }

    /// Where `tokens_per_s` sits up the plot, 0 (bottom) to 1 (top).
    pub fn y_fraction(&self, tokens_per_s: f64) -> f64 {
        let (low, high) = self.rates;
        (tokens_per_s.log10() - low.log10()) / (high.log10() - low.log10())
    }

    /// Batch ticks: the powers of two in range.
    pub fn batch_ticks(&self) -> Vec<u64> {
        std::iter::successors(Some(1u64), |b| b.checked_mul(2))
            .skip_while(|&b| b < self.batches.0)
            .take_while(|&b| b <= self.batches.1)
            .collect()
    }

    /// Rate ticks: every decade in range.
    pub fn rate_ticks(&self) -> Vec<f64> {
        let decades = (self.rates.1 / self.rates.0).log10().round() as i32;
        (0..=decades)
            .map(|d| self.rates.0 * 10f64.powi(d))
            .collect()
    }
}

fn rate_label(rate: f64) -> String {
    match rate {
        r if r >= 1e6 => format!("{}M", r / 1e6),
        r if r >= 1e3 => format!("{}k", r / 1e3),
        r if r >= 1.0 => format!("{r}"),
        r => format!("{r:.3}"),
    }
}

/// The chart as inline SVG. Labels come from device ids and are escaped.
pub fn render_svg(chart: &SweepChart) -> String {
    let (width, height) = (760.0, 340.0);
    let (left, right, top, bottom) = (64.0, 190.0, 16.0, 44.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let x = |batch: u64| left + plot_w * chart.x_fraction(batch);
    let y = |rate: f64| top + plot_h * (1.0 - chart.y_fraction(rate));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\" \
         role=\"img\" aria-label=\"tokens per second by batch\">"
    );
    let _ = write!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#999\"/>"
    );
    for batch in chart.batch_ticks() {
        let px = x(batch);
        let _ = write!(
            svg,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"#eee\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{batch}</text>",
            top + plot_h,
            top + plot_h + 14.0
        );
    }
    for rate in chart.rate_ticks() {
        let py = y(rate);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#eee\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + plot_w,
            left - 4.0,
            py + 4.0,
            rate_label(rate)
        );
    }
    for (index, series) in chart.series.iter().enumerate() {
        let colour = OP_TYPE_PALETTE[index % OP_TYPE_PALETTE.len()].hex();
        let path: Vec<String> = series
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.batch), y(p.tokens_per_s)))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        for point in &series.points {
            let bound = bound_colour(point.set_by).hex();
            let fits = point.fits != Some(false);
            let fill = if fits { bound.as_str() } else { "#fff" };
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{fill}\" stroke=\"{bound}\" stroke-width=\"1.5\">\
                 <title>{}: batch {}, {:.0} tokens/s, {} per step, {}-bound{}</title></circle>",
                x(point.batch),
                y(point.tokens_per_s),
                escape(&series.label),
                point.batch,
                point.tokens_per_s,
                fmt_seconds(point.step_s),
                point.set_by.name(),
                if fits { "" } else { ", does not fit in memory" }
            );
        }
        let legend_y = top + 14.0 + 16.0 * index as f64;
        let legend_x = left + plot_w + 12.0;
        let _ = write!(
            svg,
            "<line x1=\"{legend_x:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{legend_y:.1}\">{}</text>",
            legend_x + 18.0,
            legend_y - 4.0,
            legend_y - 4.0,
            legend_x + 24.0,
            escape(&series.label)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">batch (sequences per step)</text>\
         <text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">tokens/s</text></svg>",
        left + plot_w / 2.0,
        height - 8.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    svg
}

/// The HTML section body (None when no analysis has a sweep).
pub fn html_section(analyses: &[Analysis]) -> Option<String> {
    let chart = SweepChart::of(analyses)?;
    Some(format!(
        "<p class=\"lede\">Tokens per second as the batch grows: decode counts the tokens \
         generated per step over the batch, prefill the prompt tokens processed. A point's \
         colour is the bound that sets its step (memory-bound decode gains from batching until \
         compute or memory capacity stops it); hollow points do not fit the device's memory.</p>\
         <figure class=\"chart\">{}</figure>",
        render_svg(&chart)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Bound;

    fn point(batch: u64, tokens_per_s: f64, fits: bool) -> BatchPoint {
        BatchPoint {
            batch,
            step_s: batch as f64 / tokens_per_s,
            tokens_per_s,
            set_by: if batch < 64 {
                Bound::Memory
            } else {
                Bound::Compute
            },
            fits: Some(fits),
        }
    }

    fn chart(points: Vec<BatchPoint>) -> SweepChart {
        let (low, high) = (
            points.iter().map(|p| p.batch).min().unwrap(),
            points.iter().map(|p| p.batch).max().unwrap(),
        );
        let min = points
            .iter()
            .map(|p| p.tokens_per_s)
            .fold(f64::MAX, f64::min);
        let max = points.iter().map(|p| p.tokens_per_s).fold(0.0, f64::max);
        SweepChart {
            series: vec![SweepSeries {
                label: "a100".into(),
                points,
            }],
            batches: (low, high),
            rates: (
                10f64.powf(min.log10().floor()),
                10f64.powf(max.log10().ceil()),
            ),
        }
    }

    #[test]
    fn axes_are_log2_batch_and_log10_rate() {
        let c = chart(vec![
            point(1, 81.0, true),
            point(16, 1200.0, true),
            point(256, 9000.0, false),
        ]);
        assert_eq!(c.rates, (10.0, 10_000.0));
        assert_eq!(c.x_fraction(1), 0.0);
        assert_eq!(c.x_fraction(256), 1.0);
        assert!((c.x_fraction(16) - 0.5).abs() < 1e-12);
        assert!((c.y_fraction(100.0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(c.batch_ticks(), vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(c.rate_ticks(), vec![10.0, 100.0, 1000.0, 10_000.0]);
    }

    #[test]
    fn svg_draws_each_point_and_marks_those_that_do_not_fit() {
        let c = chart(vec![
            point(1, 81.0, true),
            point(2, 160.0, true),
            point(4, 300.0, false),
        ]);
        let svg = render_svg(&c);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("does not fit").count(), 1);
        assert_eq!(svg.matches("fill=\"#fff\"").count(), 1);
        assert!(svg.contains("memory-bound"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn labels_are_escaped() {
        let mut c = chart(vec![point(1, 81.0, true), point(2, 160.0, true)]);
        c.series[0].label = "<script>".into();
        let svg = render_svg(&c);
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
    }
}
