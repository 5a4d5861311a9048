//! `roofline analyze`: load, bind, analyse against each device, render.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use roofline::analysis::{self, import, AnalyzeOptions, Bindings, Severity};
use roofline::builtin::{self, WeightFill};
use roofline::device::Precision;
use roofline::report::{self, TableOptions};

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
    /// ONNX file, or builtin:NAME (see `roofline models`).
    pub model: String,
    /// Catalogue name, `local`, or a device profile JSON; repeat to compare devices.
    #[arg(short, long, default_value = "rtx2080ti")]
    pub device: Vec<String>,
    /// Precision of compute and of float tensors.
    #[arg(short, long, default_value = "fp32")]
    pub precision: Precision,
    /// Bind an input: NAME=1x3x224x224 (repeatable; the name may be omitted for a one-input model).
    #[arg(short, long = "input")]
    pub inputs: Vec<String>,
    /// Bind the leading symbolic dim of every input (1 or more).
    #[arg(short, long, value_parser = super::batch_parser())]
    pub batch: Option<u64>,
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
    let mut protected = super::Inputs::model(&args.model);
    for spec in &args.device {
        protected.add_device(spec);
    }
    if let Some(path) = &args.output {
        protected.check(path)?;
    }
    let mut bindings = Bindings {
        inputs: args
            .inputs
            .iter()
            .map(|spec| analysis::infer::Bindings::parse_input(spec))
            .collect::<Result<_, _>>()?,
        batch: args.batch,
    };
    let is_builtin = args.model.starts_with("builtin:");
    if is_builtin && bindings.inputs.is_empty() && bindings.batch.is_none() {
        bindings = (builtin::find(&args.model)?.default_bindings)();
    }
    let options = AnalyzeOptions {
        bindings,
        precision: args.precision,
    };
    let devices = args
        .device
        .iter()
        .map(|spec| super::resolve_device(spec).with_context(|| format!("--device {spec}")))
        .collect::<Result<Vec<_>>>()?;
    let mut analyses = Vec::with_capacity(devices.len());
    for device in &devices {
        let graph = if is_builtin {
            let model = builtin::find(&args.model)?.build(WeightFill::Zeros);
            import::import_model(
                &model,
                std::path::Path::new("."),
                std::path::Path::new(&args.model),
            )?
        } else {
            import::load_graph(std::path::Path::new(&args.model))?
        };
        analyses.push(analysis::analyze_graph(
            graph,
            &args.model,
            device,
            &options,
        )?);
    }
    let text = match args.format {
        OutputFormat::Json => report::render_json(&analyses)?,
        OutputFormat::Csv => report::render_csv(&analyses),
        OutputFormat::Html => report::html::render_html(&analyses)?,
        OutputFormat::Svg => {
            report::svg::render_roofline_svg(&analyses[0], &report::svg::SvgOptions::default())?
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
    match &args.output {
        Some(path) => protected
            .write(path, text.as_bytes())
            .context("writing the report")?,
        None => super::print_text(&text)?,
    }
    // Unknown ops are bad input: the report above lists them, and the exit status says so.
    if let Some(first) = analyses
        .first()
        .and_then(|a| a.diagnostics.iter().find(|d| d.severity == Severity::Error))
    {
        let count = analyses[0]
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        note!(
            "error: {}: node `{}`: {} ({count} node(s) with unknown ops; they are NOT in the totals)",
            super::safe(&args.model),
            super::safe(first.node.as_deref().unwrap_or("?")),
            super::safe(&first.message)
        );
        return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
    }
    let warnings = analyses
        .iter()
        .flat_map(|a| &a.diagnostics)
        .filter(|d| d.severity == Severity::Warning)
        .count();
    if args.strict && warnings > 0 {
        note!(
            "{warnings} warning(s) and --strict: exit status {}",
            super::EXIT_WARNINGS
        );
        return Ok(ExitCode::from(super::EXIT_WARNINGS));
    }
    Ok(ExitCode::SUCCESS)
}
