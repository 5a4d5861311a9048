//! `roofline bench` (measure every op against its prediction) and `roofline run` (write every
//! graph output as .npy).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use roofline::analysis::{import, AnalyzeOptions, Bindings, Graph};
use roofline::bench::{self, BenchOptions, BenchReport};
use roofline::builtin::{self, WeightFill};
use roofline::device::Precision;
use roofline::exec::{self, npy, PlanOptions};
use roofline::report::units::{fmt_bytes, fmt_seconds};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BenchFormat {
    Table,
    Json,
    Html,
}

/// Model selection shared by `bench` and `run`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// ONNX file, or builtin:NAME.
    pub model: String,
    /// Bind an input: NAME=1x3x224x224 (repeatable).
    #[arg(short, long = "input")]
    pub inputs: Vec<String>,
    /// Bind the leading symbolic dim of every input.
    #[arg(short, long)]
    pub batch: Option<u64>,
    /// Worker threads for the kernels.
    #[arg(short, long, default_value_t = 1)]
    pub threads: usize,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Device profile for the predictions: `local` (the probed CPU), a catalogue name or a file.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// Timed runs after warm-up.
    #[arg(short, long, default_value_t = 10)]
    pub runs: usize,
    #[arg(short, long, value_enum, default_value = "table")]
    pub format: BenchFormat,
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Rows of the per-op table (slowest first).
    #[arg(long, default_value_t = 25)]
    pub top: usize,
    /// Autotune GEMM blockings for this model's shapes first (cached per device profile).
    #[arg(long)]
    pub tune: bool,
    /// Apply the advisor's float rewrites (fold, bn-fold, fuse, eltwise) before running, as
    /// runtimes do with their graph optimisations on; the ops then are the rewritten ones.
    #[arg(long)]
    pub optimize: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// ONNX file, or builtin:NAME.
    pub model: String,
    /// Input values: NAME=FILE.npy (repeatable). Inputs not given get seeded random values.
    #[arg(short, long = "input")]
    pub inputs: Vec<String>,
    /// Bind the leading symbolic dim of every input.
    #[arg(short, long)]
    pub batch: Option<u64>,
    /// Bind symbolic dims: NAME=1x3x224x224 (when no .npy is given for that input).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    #[arg(short, long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory for the .npy files.
    #[arg(short, long)]
    pub output: PathBuf,
}

pub fn load_graph(model: &str) -> Result<(Graph, Option<Bindings>)> {
    if model.starts_with("builtin:") {
        let builtin = builtin::find(model)?;
        let proto = builtin.build(WeightFill::Random(0));
        let graph = import::import_model(
            &proto,
            std::path::Path::new("."),
            std::path::Path::new(model),
        )?;
        Ok((graph, Some((builtin.default_bindings)())))
    } else {
        let mut graph = import::load_graph(std::path::Path::new(model))?;
        // QDQ models (onnxruntime's static quantizer, `advise -o` with int8) run on the int8
        // kernels: the standard form is lowered to the tool's quantized ops before planning.
        let lowered = roofline::exec::quant::lower_qdq(&mut graph);
        if !lowered.is_empty() {
            eprintln!(
                "QDQ form lowered: {} QConv, {} QMatMul, {} FakeQuant, {} float fallback(s)",
                lowered.qconv, lowered.qmatmul, lowered.fake_quant, lowered.float_fallback
            );
        }
        Ok((graph, None))
    }
}

fn bindings(args: &ModelArgs, defaults: Option<Bindings>) -> Result<Bindings> {
    let inputs: Vec<(String, Vec<u64>)> = args
        .inputs
        .iter()
        .map(|s| Bindings::parse_input(s))
        .collect::<Result<_, _>>()?;
    if inputs.is_empty() && args.batch.is_none() {
        if let Some(d) = defaults {
            return Ok(d);
        }
    }
    Ok(Bindings {
        inputs,
        batch: args.batch,
    })
}

pub fn run_bench(args: &BenchArgs) -> Result<ExitCode> {
    let (graph, defaults) = load_graph(&args.model.model)?;
    let device =
        super::resolve_device(&args.device).with_context(|| format!("--device {}", args.device))?;
    let analyze = AnalyzeOptions {
        bindings: bindings(&args.model, defaults)?,
        precision: Precision::Fp32,
    };
    let options = BenchOptions {
        runs: args.runs,
        warmup: 2,
        threads: args.model.threads.max(1),
        seed: 0,
        tune: args.tune,
    };
    let graph = if args.optimize {
        let (_, rewritten) = roofline::advisor::advise(
            graph,
            &args.model.model,
            &device,
            &analyze,
            &Default::default(),
        )?;
        rewritten
    } else {
        graph
    };
    let report = bench::bench_graph(graph, &args.model.model, &device, &analyze, &options)?;
    let text = match args.format {
        BenchFormat::Json => serde_json::to_string_pretty(&report)?,
        BenchFormat::Table => render_table(&report, args.top),
        BenchFormat::Html => super::bench_html(&report)?,
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn render_table(report: &BenchReport, top: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let a = &report.analysis;
    let _ = writeln!(
        out,
        "model  {}   device {} ({:?})   threads {}   runs {}   kernels: {}",
        a.model.source,
        a.device.id,
        a.device.source,
        report.threads,
        report.runs,
        report.kernel_isa
    );
    let _ = writeln!(
        out,
        "latency  median {:.3} ms  (min {:.3}, max {:.3})   predicted {:.3} ms   end-to-end error {:+.0}%",
        report.latency_ms.median, report.latency_ms.min, report.latency_ms.max, report.predicted_latency_ms, report.errors.end_to_end_error * 100.0
    );
    let _ = writeln!(
        out,
        "per-op |error|  median {:.0}%  p90 {:.0}%   activations {} planned ({} without reuse), weights {}",
        report.errors.median_abs_error * 100.0,
        report.errors.p90_abs_error * 100.0,
        fmt_bytes(report.peak_activation_bytes as f64),
        fmt_bytes(report.unplanned_activation_bytes as f64),
        fmt_bytes(report.weights_bytes as f64)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<28} {:<18} {:>10} {:>10} {:>9} {:>8} {:>8} {:>8}",
        "op", "type", "measured", "predicted", "GFLOP/s", "GB/s", "of roof", "error"
    );
    let mut ops: Vec<_> = report.ops.iter().collect();
    ops.sort_by(|x, y| y.measured_s.total_cmp(&x.measured_s));
    for op in ops.iter().take(top) {
        let name: String = op.name.chars().take(28).collect();
        let _ = writeln!(
            out,
            "{:<28} {:<18} {:>10} {:>10} {:>9.1} {:>8.1} {:>7.0}% {:>+7.0}%",
            name,
            op.op_type,
            fmt_seconds(op.measured_s),
            fmt_seconds(op.predicted_s),
            op.measured_gflops,
            op.measured_gbs,
            op.roofline_fraction * 100.0,
            op.prediction_error * 100.0
        );
    }
    if ops.len() > top {
        let _ = writeln!(
            out,
            "... {} more ops (--top N, or --format json for all)",
            ops.len() - top
        );
    }
    out
}

pub fn run_model(args: &RunArgs) -> Result<ExitCode> {
    let (mut graph, defaults) = load_graph(&args.model)?;
    let mut given: HashMap<String, exec::RtTensor> = HashMap::new();
    let mut shapes: Vec<(String, Vec<u64>)> = Vec::new();
    for spec in &args.inputs {
        let Some((name, file)) = spec.split_once('=') else {
            bail!("--input {spec}: expected NAME=FILE.npy");
        };
        let tensor = npy::read_npy(std::path::Path::new(file))?;
        shapes.push((
            name.to_string(),
            tensor.shape.iter().map(|&d| d as u64).collect(),
        ));
        given.insert(name.to_string(), tensor);
    }
    for spec in &args.shapes {
        shapes.push(Bindings::parse_input(spec)?);
    }
    let bindings = if shapes.is_empty() && args.batch.is_none() {
        defaults.unwrap_or_default()
    } else {
        Bindings {
            inputs: shapes,
            batch: args.batch,
        }
    };
    let (order, states, _) = roofline::analysis::prepare_graph(&mut graph, &bindings)?;
    let plan = exec::build_plan(
        &graph,
        &order,
        &states,
        &PlanOptions {
            threads: args.threads.max(1),
            ..PlanOptions::default()
        },
    )?;
    let mut inputs = bench::random_inputs(&plan, args.seed);
    for (name, tensor) in given {
        inputs.insert(name, tensor);
    }
    let mut workspace = plan.workspace();
    let outputs = plan.run(&mut workspace, &inputs, None)?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    for (name, tensor) in &outputs {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = args.output.join(format!("{safe}.npy"));
        npy::write_npy(&path, tensor)?;
        eprintln!("wrote {} {:?}", path.display(), tensor.shape);
    }
    Ok(ExitCode::SUCCESS)
}
