//! `roofline compress`: structured pruning and per-op precision toward a latency target,
//! predicted by the cost model and, on this CPU, measured.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Args, ValueEnum};

use roofline::advisor::compress::{self, CompressOptions, Progress, Target};
use roofline::advisor::{self, export, AdviseOptions};
use roofline::analysis::AnalyzeOptions;
use roofline::device::Precision;
use roofline::report::compress::{
    render_compress_html, render_compress_json, render_compress_table,
};

use super::model::{ModelArgs, Purpose, ThreadArgs};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CompressFormat {
    Table,
    Json,
    Html,
}

#[derive(Args, Debug)]
pub struct CompressArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// Device to compress for: `local` (measured), a catalogue name (predicted only), a file.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// Target speed-up over the original model (e.g. 2).
    #[arg(long, conflicts_with = "latency", required_unless_present = "latency")]
    pub speedup: Option<f64>,
    /// Target latency, e.g. 20ms, 1.5ms, 800us.
    #[arg(long)]
    pub latency: Option<String>,
    /// Directory of .npy inputs for the accuracy proxy and int8 calibration (default: random).
    #[arg(long, value_name = "DIR")]
    pub calibration: Option<PathBuf>,
    /// Random inputs when no --calibration directory is given.
    #[arg(long, default_value_t = 8,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub calibration_samples: usize,
    /// Accuracy command: `{model}` is replaced by a candidate's path; the last number it
    /// prints is the accuracy (higher is better).
    #[arg(long, value_name = "CMD")]
    pub eval: Option<String>,
    /// Largest accuracy drop allowed (of --eval's number, or of the proxy: 1 − top-1
    /// agreement, or 1 − cosine for non-classifier outputs).
    #[arg(long)]
    pub max_drop: Option<f64>,
    /// Precisions the search may choose, comma-separated (fp32 always allowed).
    #[arg(long, value_delimiter = ',', default_value = "fp32,int8,bf16")]
    pub precisions: Vec<String>,
    /// Do not prune (precision only).
    #[arg(long)]
    pub no_prune: bool,
    /// Also measure hardware-blind baselines (uniform pruning at the same MACs, all-int8),
    /// each in the same rounds as the compressed model; with -o, each is written beside it
    /// (`<stem>.uniform-magnitude.onnx`, `<stem>.all-int8.onnx`, ...).
    #[arg(long)]
    pub compare_baselines: bool,
    /// Predict candidates from the calibration alone, corrected only in total: no per-op
    /// profile of the measured models (to measure what that feedback buys).
    #[arg(long)]
    pub no_op_feedback: bool,
    /// Timed runs per measurement.
    #[arg(short, long, default_value_t = 10, value_parser = super::runs_parser())]
    pub runs: usize,
    /// Most search steps.
    #[arg(long, default_value_t = 80)]
    pub max_steps: usize,
    /// Write the compressed model (standard ONNX); the pruning plan goes next to it
    /// (`<name>.plan.json`).
    #[arg(short, long = "output-model", alias = "out")]
    pub output_model: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: CompressFormat,
    /// Write the report to a file instead of stdout.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Parses `20ms`, `1.5 ms`, `800us`, `0.02s` into milliseconds.
fn parse_latency(text: &str) -> Result<f64> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e3)
    } else {
        bail!("--latency {text}: give a unit (ms, us or s), e.g. 20ms")
    };
    let value: f64 = number
        .trim()
        .parse()
        .with_context(|| format!("--latency {text}: not a number"))?;
    if !(value.is_finite() && value > 0.0) {
        bail!("--latency {text}: must be a positive duration");
    }
    Ok(value * scale)
}

/// `<stem>.<suffix>` beside the compressed model: its pruning plan and its baselines.
fn beside_model(model: &std::path::Path, suffix: &str) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.{suffix}"))
}

pub fn run(args: &CompressArgs) -> Result<ExitCode> {
    let target = match (args.speedup, &args.latency) {
        (Some(s), _) if !(s.is_finite() && s > 1.0) => {
            bail!("--speedup {s}: must be a number above 1")
        }
        (Some(s), _) => Target::Speedup(s),
        (None, Some(text)) => Target::LatencyMs(parse_latency(text)?),
        (None, None) => bail!("give a target: --speedup N or --latency DURATION"),
    };
    if let Some(drop) = args.max_drop {
        if !(drop.is_finite() && drop >= 0.0) {
            bail!("--max-drop {drop}: must be a non-negative number");
        }
    }
    let precisions: Vec<String> = args
        .precisions
        .iter()
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| p != "fp32")
        .collect();
    for p in &precisions {
        if !matches!(p.as_str(), "int8" | "bf16" | "fp16") {
            bail!("--precisions: unknown precision `{p}` (fp32, int8, bf16, fp16)");
        }
    }
    let mut protected = super::Inputs::model(&args.model.model);
    for file in args.model.input_files() {
        protected.add(&file, "an input tensor");
    }
    protected.add_device(&args.device);
    let plan_file = args
        .output_model
        .as_deref()
        .map(|model| beside_model(model, "plan.json"));
    // The baselines go next to the compressed model, to be measured again elsewhere.
    let baseline_files: Vec<(String, PathBuf)> = match &args.output_model {
        Some(model) if args.compare_baselines => compress::baseline_names(&precisions)
            .into_iter()
            .map(|name| {
                let path = beside_model(model, &format!("{name}.onnx"));
                (name, path)
            })
            .collect(),
        _ => Vec::new(),
    };
    for path in args
        .output_model
        .iter()
        .chain(&args.report)
        .chain(&plan_file)
        .chain(baseline_files.iter().map(|(_, path)| path))
    {
        protected.check(path)?;
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
    let options = CompressOptions {
        target,
        precisions,
        prune: !args.no_prune,
        max_drop: args.max_drop,
        eval: args.eval.clone(),
        max_steps: args.max_steps.max(1),
        compare_baselines: args.compare_baselines,
        op_feedback: !args.no_op_feedback,
        keep_baseline_graphs: !baseline_files.is_empty(),
        advise: AdviseOptions {
            runs: args.runs,
            threads: args.threads.threads.max(1),
            calibration_dir: args.calibration.clone(),
            calibration_samples: args.calibration_samples.max(1),
            ..AdviseOptions::default()
        },
        ..CompressOptions::default()
    };
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(bar)
    } else {
        None
    };
    let mut on_progress = |event: Progress| {
        if let Some(bar) = &bar {
            match event {
                Progress::Phase(what) => bar.set_message(what.to_string()),
                Progress::Step {
                    step,
                    latency_ms,
                    target_ms,
                    action,
                } => bar.set_message(format!(
                    "step {step}: {latency_ms:.2} ms (target {target_ms:.2} ms) after {action}"
                )),
            }
        }
    };
    let result = compress::compress(
        model.graph,
        &model.source,
        &device,
        &analyze,
        &options,
        &mut on_progress,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let compressed = result.map_err(|e: advisor::AdvisorError| anyhow::anyhow!(e))?;
    if let Some(path) = &args.output_model {
        let proto = export::to_model(&compressed.graph)?;
        protected
            .write(path, &prost::Message::encode_to_vec(&proto))
            .context("writing the compressed model")?;
        note!("wrote {}", super::safe(&path.display().to_string()));
        let plan_file = plan_file.expect("set with the model path");
        let plan = serde_json::to_string_pretty(&compressed.plan)? + "\n";
        protected
            .write(&plan_file, plan.as_bytes())
            .context("writing the pruning plan")?;
        note!("wrote {}", super::safe(&plan_file.display().to_string()));
        // A baseline that cannot be written is said and skipped: the compressed model and the
        // report are what the run is for.
        for (name, graph) in &compressed.baselines {
            let Some((_, path)) = baseline_files.iter().find(|(known, _)| known == name) else {
                note!(
                    "baseline {} not written: no file was set aside for it",
                    super::safe(name)
                );
                continue;
            };
            let written = export::to_model(graph)
                .map_err(anyhow::Error::from)
                .and_then(|proto| protected.write(path, &prost::Message::encode_to_vec(&proto)));
            match written {
                Ok(()) => note!("wrote {}", super::safe(&path.display().to_string())),
                Err(e) => note!("baseline {} not written: {e:#}", super::safe(name)),
            }
        }
    }
    let text = match args.format {
        CompressFormat::Json => render_compress_json(&compressed.report)?,
        CompressFormat::Table => render_compress_table(&compressed.report),
        CompressFormat::Html => render_compress_html(&compressed.report)?,
    };
    protected.emit(args.report.as_deref(), &text)?;
    Ok(if compressed.report.reached {
        ExitCode::SUCCESS
    } else {
        // The search ran, but the target was not met: say so in the status too.
        ExitCode::from(3)
    })
}

#[cfg(test)]
mod tests {
    use super::parse_latency;

    #[test]
    fn latency_units() {
        assert_eq!(parse_latency("20ms").unwrap(), 20.0);
        assert_eq!(parse_latency("1.5 ms").unwrap(), 1.5);
        assert!((parse_latency("800us").unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(parse_latency("0.02s").unwrap(), 20.0);
        assert!(parse_latency("20").is_err());
        assert!(parse_latency("-3ms").is_err());
        assert!(parse_latency("NaNms").is_err());
    }
}
