//! `roofline advise`: rewrite passes with predicted (and, on this CPU, measured) gains.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Args, ValueEnum};

use roofline::advisor::{self, export, AdviceReport, AdviseOptions};
use roofline::analysis::{AnalyzeOptions, Bindings};
use roofline::device::Precision;
use roofline::report::units::{fmt_bytes, fmt_seconds};

use super::safe;

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
    pub model: super::bench::ModelArgs,
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
}

pub fn run(args: &AdviseArgs) -> Result<ExitCode> {
    // Neither the rewritten model nor the report replaces a file this run reads (the model,
    // the device profile, calibration tensors), nor each other. Checked before the work, and
    // again when writing.
    let mut protected = super::Inputs::model(&args.model.model);
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
    let (graph, defaults) = super::bench::load_graph(&args.model.model)?;
    let device =
        super::resolve_device(&args.device).with_context(|| format!("--device {}", args.device))?;
    let inputs: Vec<(String, Vec<u64>)> = args
        .model
        .inputs
        .iter()
        .map(|s| Bindings::parse_input(s))
        .collect::<Result<_, _>>()?;
    let bindings = if inputs.is_empty() && args.model.batch.is_none() {
        defaults.unwrap_or_default()
    } else {
        Bindings {
            inputs,
            batch: args.model.batch,
        }
    };
    let analyze = AnalyzeOptions {
        bindings,
        precision: Precision::Fp32,
    };
    let options = AdviseOptions {
        apply: args.apply.clone(),
        skip: args.skip.clone(),
        verify: args.verify,
        runs: args.runs,
        threads: args.model.threads.max(1),
        tune: args.tune,
        calibration_dir: args.calibration.clone(),
        calibration_method: match args.calibration_method {
            CalibrationArg::Minmax => advisor::quantize::CalibrationMethod::MinMax,
            CalibrationArg::Percentile => advisor::quantize::CalibrationMethod::Percentile,
        },
        calibration_samples: args.calibration_samples.max(1),
        ..AdviseOptions::default()
    };
    let (report, rewritten) =
        advisor::advise(graph, &args.model.model, &device, &analyze, &options)?;
    if let Some(path) = &args.output_model {
        let model = export::to_model(&rewritten)?;
        protected
            .write(path, &prost::Message::encode_to_vec(&model))
            .context("writing the rewritten model")?;
        note!("wrote {}", super::safe(&path.display().to_string()));
    }
    let text = match args.format {
        AdviseFormat::Json => serde_json::to_string_pretty(&report)?,
        AdviseFormat::Table => render_table(&report),
        AdviseFormat::Html => super::advice_html(&report)?,
    };
    match &args.report {
        Some(path) => protected
            .write(path, text.as_bytes())
            .context("writing the report")?,
        None => super::print_text(&text)?,
    }
    Ok(ExitCode::SUCCESS)
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

fn speed(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into())
}

/// The advice table; model-provided text is escaped for the terminal (`super::safe`).
pub fn render_table(report: &AdviceReport) -> String {
    let mut out = String::new();
    let b = &report.before;
    let _ = writeln!(
        out,
        "model  {}   device {} ({:?})   {}",
        safe(&b.model.source),
        safe(&b.device.id),
        b.device.source,
        safe(&report.verification_note)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<9} {:>7} {:>12} {:>12} {:>10} {:>11} {:>10} {:>9}",
        "pass",
        "changes",
        "predicted",
        "saved bytes",
        "pred gain",
        "measured",
        "meas gain",
        "error"
    );
    for p in &report.passes {
        let measured = p
            .measured_latency_after_ms
            .map(|m| format!("{m:.2} ms"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<9} {:>7} {:>12} {:>12} {:>10} {:>11} {:>10} {:>9}",
            safe(&p.name),
            p.changes.len(),
            fmt_seconds(p.predicted_latency_after_s),
            fmt_bytes(p.bytes_saved as f64),
            format!("{:.2}x", p.predicted_speedup),
            measured,
            speed(p.measured_speedup),
            p.prediction_error
                .map(|e| format!("{:+.0}%", e * 100.0))
                .unwrap_or_else(|| "-".into())
        );
    }
    let o = &report.overall;
    let _ = writeln!(
        out,
        "overall   predicted {} -> {} ({:.2}x); measured {} ({}); prediction error {}",
        fmt_seconds(o.predicted_latency_before_s),
        fmt_seconds(o.predicted_latency_after_s),
        o.predicted_speedup,
        match (o.measured_latency_before_ms, o.measured_latency_after_ms) {
            (Some(a), Some(b)) => format!("{a:.2} ms -> {b:.2} ms"),
            _ => "-".into(),
        },
        speed(o.measured_speedup),
        o.prediction_error
            .map(|e| format!("{:+.0}%", e * 100.0))
            .unwrap_or_else(|| "-".into())
    );
    if let Some(err) = o.max_relative_output_error {
        let _ = writeln!(out, "          outputs of the rewritten graph vs the original: max relative error {err:.1e}");
    }
    let groups: Vec<_> = report
        .passes
        .iter()
        .flat_map(|p| p.fusion_groups.iter())
        .collect();
    if !groups.is_empty() {
        let _ = writeln!(
            out,
            "\ntop fusions by predicted time saved (intensity unfused -> fused, FLOP/B)"
        );
        let mut sorted = groups.clone();
        sorted.sort_by(|a, b| {
            b.predicted_time_saved_s
                .total_cmp(&a.predicted_time_saved_s)
        });
        for g in sorted.iter().take(10) {
            let _ = writeln!(
                out,
                "  {:>10}  {:>6.2} -> {:<6.2}  {}",
                fmt_seconds(g.predicted_time_saved_s),
                g.intensity_unfused,
                g.intensity_fused,
                safe(&g.op_types.join("+"))
            );
        }
    }
    if let Some(q) = &report.quantization {
        render_quantization(&mut out, q);
    }
    if !report.left_alone.is_empty() {
        let _ = writeln!(out, "\nleft alone (largest remaining ops)");
        for l in report.left_alone.iter().take(6) {
            let _ = writeln!(
                out,
                "  {} ({}): {}",
                safe(&l.node),
                safe(&l.op_type),
                safe(&l.reason)
            );
        }
    }
    // Every model-provided field above is escaped; this pass is the net under a missed one.
    roofline::report::markup::terminal_safe_lines(&out).into_owned()
}

fn render_quantization(out: &mut String, q: &advisor::quantize::QuantizationReport) {
    let _ = writeln!(
        out,
        "\nquantization ({})",
        if q.calibration.is_empty() {
            "no calibration".into()
        } else {
            safe(&q.calibration)
        }
    );
    if let Some(a) = &q.accuracy {
        let _ = writeln!(
            out,
            "  accuracy proxy vs fp32 on {} input(s): cosine min {:.5} mean {:.5}; max abs error {:.3e} (outputs up to {:.3e}){}",
            a.samples,
            a.cosine_min,
            a.cosine_mean,
            a.max_abs_error,
            a.max_abs_reference,
            a.top1_agreement
                .map(|t| format!("; top-1 agreement {:.1}%", t * 100.0))
                .unwrap_or_default()
        );
    }
    let mut kept: Vec<_> = q
        .decisions
        .iter()
        .filter(|d| d.decision == "fp32")
        .collect();
    let converted = q.decisions.len() - kept.len();
    let _ = writeln!(
        out,
        "  {} op(s) converted, {} left in fp32",
        converted,
        kept.len()
    );
    kept.sort_by(|a, b| b.predicted_fp32_s.total_cmp(&a.predicted_fp32_s));
    for d in kept.iter().take(8) {
        let _ = writeln!(
            out,
            "  kept fp32  {} ({}): {}",
            safe(&d.node),
            safe(&d.op_type),
            safe(&d.reason)
        );
    }
    let mut done: Vec<_> = q
        .decisions
        .iter()
        .filter(|d| d.decision != "fp32")
        .collect();
    done.sort_by(|a, b| b.predicted_fp32_s.total_cmp(&a.predicted_fp32_s));
    for d in done.iter().take(5) {
        let _ = writeln!(
            out,
            "  {:<9}  {} ({}): {} -> {} ({:.2}x; q/dq {}{})",
            safe(&d.decision),
            safe(&d.node),
            safe(&d.op_type),
            fmt_seconds(d.predicted_fp32_s),
            fmt_seconds(d.predicted_lowp_s),
            d.predicted_gain,
            fmt_seconds(d.predicted_qdq_s),
            d.predicted_dynamic_s
                .map(|s| format!("; dynamic int8 {}", fmt_seconds(s)))
                .unwrap_or_default()
        );
    }
    for n in &q.notes {
        let _ = writeln!(out, "  note: {}", safe(n));
    }
}
