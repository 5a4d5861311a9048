//! `roofline analyze`: load, bind, analyse against each device, render.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use roofline::analysis::{self, AnalyzeOptions};
use roofline::device::Precision;
use roofline::report::{self, chart, TableOptions};

use super::model::{ModelArgs, Purpose};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Csv,
    /// Self-contained HTML report (several devices: side by side).
    Html,
    /// The roofline chart alone (first device).
    Svg,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Catalogue name, `local`, or a device profile JSON; repeat to compare devices.
    #[arg(short, long, default_value = "rtx2080ti")]
    pub device: Vec<String>,
    /// Precision of compute and of float tensors.
    #[arg(short, long, default_value = "fp32")]
    pub precision: Precision,
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Write the report to a file instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Exit with status 1 when any warning (e.g. an op that was not costed) was raised.
    #[arg(long)]
    pub strict: bool,
    /// Show folded and view ops in the table too.
    #[arg(long)]
    pub all_ops: bool,
}

pub fn run(args: &AnalyzeArgs) -> Result<ExitCode> {
    // The report never replaces what it was made from: checked before the work, and again
    // when writing.
    let mut protected = super::Inputs::model(&args.model.model);
    for spec in &args.device {
        protected.add_device(spec);
    }
    if let Some(path) = &args.output {
        protected.check(path)?;
    }
    let model = args.model.load(Purpose::Analyze)?;
    protected.add_model_files(&model.graph);
    let options = AnalyzeOptions {
        bindings: model.bindings,
        precision: args.precision,
    };
    let devices = args
        .device
        .iter()
        .map(|spec| super::resolve_device(spec).with_context(|| format!("--device {spec}")))
        .collect::<Result<Vec<_>>>()?;
    let analyses = devices
        .iter()
        .map(|device| analysis::analyze_graph(model.graph.clone(), &model.source, device, &options))
        .collect::<Result<Vec<_>, _>>()?;
    let text = match args.format {
        OutputFormat::Json => report::render_json(&analyses)?,
        OutputFormat::Csv => report::render_csv(&analyses),
        OutputFormat::Html => report::html::render_html(&analyses)?,
        OutputFormat::Svg => {
            chart::render_roofline_svg(&analyses[0], &chart::SvgOptions::default())?
        }
        OutputFormat::Table => analyses
            .iter()
            .map(|a| {
                report::render_table(
                    a,
                    TableOptions {
                        all_ops: args.all_ops,
                    },
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    };
    protected.emit(args.output.as_deref(), &text)?;
    let diagnostics: Vec<_> = analyses.iter().map(|a| a.diagnostics.as_slice()).collect();
    Ok(super::diagnostics_status(
        &model.source,
        &diagnostics,
        args.strict,
    ))
}
