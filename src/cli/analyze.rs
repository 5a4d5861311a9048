//! `roofline analyze`: load, bind, analyse against each device, render.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use roofline::analysis::{self, llm, measured, AnalyzeOptions};
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

/// `--phase`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PhaseArg {
    Prefill,
    Decode,
    Both,
}

/// Largest batch of the `--phase` batch sweep.
const MAX_SWEEP_BATCH: u64 = 256;

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
    /// Predict for a run on N threads: probed profiles then use the ceilings and calibration
    /// tables measured at the most threads not above N (default: all the profile measured).
    #[arg(short, long, value_name = "N", value_parser = super::threads_parser())]
    pub threads: Option<usize>,
    /// Join another runtime's measured per-node times: an onnxruntime profile JSON
    /// (`SessionOptions.enable_profiling`, e.g. scripts/ort_profile.py), matched by node name;
    /// one --device, the machine it ran on.
    #[arg(long, value_name = "PROFILE.json")]
    pub measured: Option<PathBuf>,
    /// LLM phase: prefill (the prompt in one step: time to first token) or decode (one token
    /// against the KV cache: time per output token). Binds the decoder's dims the user leaves
    /// free: batch 1; prefill 2048 new tokens on an empty cache; decode 1 after 2048.
    /// `both`: prefill and decode side by side for each device.
    #[arg(long, value_enum, value_name = "PHASE")]
    pub phase: Option<PhaseArg>,
    /// Storage of the weights (fp32, fp16, bf16, fp8, int8, int4); default: --precision.
    #[arg(long, value_name = "STORAGE")]
    pub weights: Option<llm::Storage>,
    /// Storage of the activations; default: --precision.
    #[arg(long, value_name = "STORAGE")]
    pub activations: Option<llm::Storage>,
    /// Storage of the KV cache; default: the activations'.
    #[arg(long, value_name = "STORAGE")]
    pub kv: Option<llm::Storage>,
}

pub fn run(args: &AnalyzeArgs) -> Result<ExitCode> {
    // The report never replaces what it was made from: checked before the work, and again
    // when writing.
    let mut protected = super::Inputs::model(&args.model.model);
    for file in args.model.input_files() {
        protected.add(&file, "an input tensor");
    }
    for spec in &args.device {
        protected.add_device(spec);
    }
    if let Some(profile) = &args.measured {
        protected.add(profile, "the measured profile");
        // A profile is one runtime on one machine: joined to a second device's bounds it would
        // compare that machine's times to another machine's roof.
        if args.device.len() > 1 {
            bail!(
                "--measured joins one runtime's times on one machine: give one --device (the \
                 machine the profile was recorded on), not {}",
                args.device.len()
            );
        }
    }
    if let Some(path) = &args.output {
        protected.check(path)?;
    }
    let profile = args
        .measured
        .as_deref()
        .map(|path| super::read_runtime_profile(path).context("--measured"))
        .transpose()?;
    let model = args.model.load(Purpose::Analyze)?;
    protected.add_model_files(&model.graph);
    let devices = args
        .device
        .iter()
        .map(|spec| super::resolve_device(spec).with_context(|| format!("--device {spec}")))
        .map(|device| match (device, args.threads) {
            (Ok(device), Some(threads)) => Ok(device.for_threads(threads as u32)),
            (device, _) => device,
        })
        .collect::<Result<Vec<_>>>()?;
    let phases: Vec<Option<llm::Phase>> = match args.phase {
        None => vec![None],
        Some(PhaseArg::Prefill) => vec![Some(llm::Phase::Prefill)],
        Some(PhaseArg::Decode) => vec![Some(llm::Phase::Decode)],
        Some(PhaseArg::Both) => vec![Some(llm::Phase::Prefill), Some(llm::Phase::Decode)],
    };
    // A built-in preset's positions may end before the default context (GPT-2: 1024).
    let context = args
        .model
        .model
        .starts_with("builtin:")
        .then(|| roofline::builtin::find(&args.model.model).ok())
        .flatten()
        .and_then(|model| model.decoder)
        .map_or(llm::DEFAULT_CONTEXT, |config| {
            llm::DEFAULT_CONTEXT.min(config.max_positions as u64 - 1)
        });
    let mut analyses = Vec::new();
    for (device, spec) in devices.iter().zip(&args.device) {
        // This machine's measured convolution algorithms (filled by `bench`), read only.
        let measured_algorithms = (spec == "local")
            .then(|| roofline::exec::conv_timing::path_for(&device.id))
            .flatten()
            .map(|path| std::sync::Arc::new(roofline::exec::conv_timing::load(&path, &device.id)))
            .filter(|table| !table.entries.is_empty());
        for &phase in &phases {
            let options = AnalyzeOptions {
                // The phase decides the decoder's dims the user left free (a built-in's
                // defaults are one phase's).
                bindings: match phase {
                    Some(phase) => {
                        llm::phase_bindings(&model.graph, phase, &args.model.requested()?, context)
                    }
                    None => model.bindings.clone(),
                },
                precision: args.precision,
                llm: llm::LlmOptions {
                    phase,
                    weights: args.weights,
                    activations: args.activations,
                    kv: args.kv,
                },
                conv_algorithms: args.model.conv_algorithms(),
                measured_algorithms: measured_algorithms.clone(),
                weights_in_dram: false,
            };
            let mut analysis = match phase {
                // A phase adds the batch sweep: what batching buys on each device.
                Some(_) => analysis::analyze_with_batch_sweep(
                    model.graph.clone(),
                    &model.source,
                    device,
                    &options,
                    MAX_SWEEP_BATCH,
                )?,
                None => {
                    analysis::analyze_graph(model.graph.clone(), &model.source, device, &options)?
                }
            };
            if let (Some(phase), true) = (phase, phases.len() > 1) {
                // Both phases side by side: each report column names its phase.
                analysis.device.name = format!("{} · {phase}", analysis.device.name);
                analysis.device.id = format!("{} ({phase})", analysis.device.id);
            }
            analyses.push(analysis);
        }
    }
    if let (Some(profile), Some(path)) = (&profile, &args.measured) {
        for analysis in &mut analyses {
            measured::join(analysis, profile, &path.display().to_string());
        }
    }
    let text = match args.format {
        OutputFormat::Json => report::render_json(&analyses)?,
        OutputFormat::Csv => report::render_csv(&analyses),
        OutputFormat::Html => report::html::render_html(&analyses)?,
        OutputFormat::Svg => {
            let options = chart::SvgOptions {
                overlays: report::measured::measured_series(&analyses[0])
                    .into_iter()
                    .collect(),
                ..chart::SvgOptions::default()
            };
            chart::render_roofline_svg(&analyses[0], &options)?
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
