//! `roofline advise`: rewrite passes with predicted (and, on this CPU, measured) gains.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Args, ValueEnum};

use roofline::advisor::{self, export, AdviseOptions};
use roofline::analysis::AnalyzeOptions;
use roofline::device::Precision;
use roofline::report::advice::{render_advice_html, render_advice_json, render_advice_table};

use super::model::{ModelArgs, Purpose, ThreadArgs};

/// Most random calibration inputs (`--calibration-samples`).
const MAX_CALIBRATION_SAMPLES: u64 = 1000;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum AdviseFormat {
    Table,
    Json,
    Html,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CalibrationArg {
    /// Minimum and maximum observed.
    Minmax,
    /// The 0.01% and 99.99% percentiles (outliers clipped).
    Percentile,
}

#[derive(Args, Debug)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// Device for the predictions: `local` (measurable with --verify), a catalogue name, a file.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// Passes to apply, comma-separated (fold, bn-fold, fuse, eltwise, and the opt-in int8, bf16,
    /// fp16); default the first four.
    #[arg(long, value_delimiter = ',')]
    pub apply: Vec<String>,
    /// Passes to skip, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Run the original and every rewritten graph on this CPU and measure the gains.
    #[arg(long)]
    pub verify: bool,
    /// Autotune GEMM blockings for the measured graphs (cached per device profile).
    #[arg(long)]
    pub tune: bool,
    /// Timed runs per measurement (1 to 100000).
    #[arg(short, long, default_value_t = 10, value_parser = super::runs_parser())]
    pub runs: usize,
    /// int8 calibration inputs: a directory of .npy files (one per sample; for several model
    /// inputs, one sub-directory per sample with <input>.npy). Default: random inputs.
    #[arg(long, value_name = "DIR")]
    pub calibration: Option<PathBuf>,
    /// How int8 activation ranges are derived from the calibration runs.
    #[arg(long, value_enum, default_value = "minmax")]
    pub calibration_method: CalibrationArg,
    /// Random calibration inputs when no --calibration directory is given (1 to 1000; each one
    /// is a full set of model inputs kept in memory).
    #[arg(long, default_value_t = advisor::quantize::DEFAULT_SAMPLES,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_CALIBRATION_SAMPLES))]
    pub calibration_samples: usize,
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: AdviseFormat,
    /// Write the rewritten model as standard ONNX.
    #[arg(short, long = "output-model", alias = "out")]
    pub output_model: Option<PathBuf>,
    /// Write the report to a file instead of stdout.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Exit with status 1 when any warning (e.g. an op that was not costed) was raised.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: &AdviseArgs) -> Result<ExitCode> {
    // Neither the rewritten model nor the report replaces a file this run reads (the model,
    // the device profile, calibration tensors), nor each other. Checked before the work, and
    // again when writing.
    let mut protected = super::Inputs::model(&args.model.model);
    for file in args.model.input_files() {
        protected.add(&file, "an input tensor");
    }
    protected.add_device(&args.device);
    if let Some(dir) = &args.calibration {
        for file in npy_files(dir) {
            protected.add(&file, "a calibration tensor");
        }
    }
    for path in args.output_model.iter().chain(&args.report) {
        protected.check(path)?;
    }
    if let (Some(model), Some(report)) = (&args.output_model, &args.report) {
        if roofline::fsio::ensure_not_an_input(report, &[model], "").is_err() {
            bail!(
                "--report {} and --output-model {} are the same file",
                report.display(),
                model.display()
            );
        }
    }
    let model = args.model.load(Purpose::Execute)?;
    protected.add_model_files(&model.graph);
    let device =
        super::resolve_device(&args.device).with_context(|| format!("--device {}", args.device))?;
    let analyze = AnalyzeOptions {
        bindings: model.bindings,
        precision: Precision::Fp32,
        conv_algorithms: args.model.conv_algorithms(),
        ..Default::default()
    };
    let options = AdviseOptions {
        apply: args.apply.clone(),
        skip: args.skip.clone(),
        verify: args.verify,
        runs: args.runs,
        threads: args.threads.threads.max(1),
        tune: args.tune,
        calibration_dir: args.calibration.clone(),
        calibration_method: match args.calibration_method {
            CalibrationArg::Minmax => advisor::quantize::CalibrationMethod::MinMax,
            CalibrationArg::Percentile => advisor::quantize::CalibrationMethod::Percentile,
        },
        calibration_samples: args.calibration_samples.max(1),
        given_inputs: args.model.given_values()?,
        ..AdviseOptions::default()
    };
    let (report, rewritten) =
        advisor::advise(model.graph, &model.source, &device, &analyze, &options)?;
    if let Some(path) = &args.output_model {
        let proto = export::to_model(&rewritten)?;
        protected
            .write(path, &prost::Message::encode_to_vec(&proto))
            .context("writing the rewritten model")?;
        note!("wrote {}", super::safe(&path.display().to_string()));
    }
    let text = match args.format {
        AdviseFormat::Json => render_advice_json(&report)?,
        AdviseFormat::Table => render_advice_table(&report),
        AdviseFormat::Html => render_advice_html(&report)?,
    };
    protected.emit(args.report.as_deref(), &text)?;
    // The diagnostics of the model as given (the rewrites start from it), as `analyze` has them.
    Ok(super::diagnostics_status(
        &model.source,
        &[&report.before.diagnostics],
        args.strict,
    ))
}

/// The .npy files of a calibration folder: its own and those of its sub-folders (one per
/// sample), as `advisor::quantize` reads them.
fn npy_files(dir: &Path) -> Vec<PathBuf> {
    let entries = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|it| it.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut files = Vec::new();
    for path in entries(dir) {
        if path.is_dir() {
            files.extend(entries(&path).into_iter().filter(|p| p.is_file()));
        } else {
            files.push(path);
        }
    }
    files
}
