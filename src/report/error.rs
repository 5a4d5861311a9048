//! Errors of the graphical renderers (SVG chart, HTML report).

/// Why a chart or report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("nothing to render: no analysis was given")]
    NoAnalysis,
    #[error("chart size {width}x{height} is too small (at least {min_width}x{min_height} pixels)")]
    ChartTooSmall {
        width: u32,
        height: u32,
        min_width: u32,
        min_height: u32,
    },
    #[error("device `{device}` has no positive compute or DRAM ceiling to draw")]
    NoCeilings { device: String },
    #[error("drawing the roofline chart: {0}")]
    Drawing(String),
}
