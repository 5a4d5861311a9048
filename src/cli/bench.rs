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
    /// Bind the leading symbolic dim of every input (1 or more).
    #[arg(short, long, value_parser = super::batch_parser())]
    pub batch: Option<u64>,
    /// Worker threads for the kernels (1 to 1024).
    #[arg(short, long, default_value_t = 1, value_parser = super::threads_parser())]
    pub threads: usize,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Device profile for the predictions: `local` (the probed CPU), a catalogue name or a file.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// Timed runs after warm-up (1 to 100000).
    #[arg(short, long, default_value_t = 10, value_parser = super::runs_parser())]
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
    /// Bind the leading symbolic dim of every input (1 or more).
    #[arg(short, long, value_parser = super::batch_parser())]
    pub batch: Option<u64>,
    /// Bind symbolic dims: NAME=1x3x224x224 (when no .npy is given for that input).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// Worker threads for the kernels (1 to 1024).
    #[arg(short, long, default_value_t = 1, value_parser = super::threads_parser())]
    pub threads: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory for the .npy files (none of them may replace the model or an input).
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
        let lowered = roofline::advisor::qdq::lower_checked(&mut graph)?;
        if !lowered.is_empty() {
            note!(
                "QDQ form lowered: {} QConv, {} QMatMul, {} FakeQuant, {} float fallback(s)",
                lowered.qconv,
                lowered.qmatmul,
                lowered.fake_quant,
                lowered.float_fallback
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
    let mut protected = super::Inputs::model(&args.model.model);
    protected.add_device(&args.device);
    if let Some(path) = &args.output {
        protected.check(path)?;
    }
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
        Some(path) => protected
            .write(path, text.as_bytes())
            .context("writing the report")?,
        None => super::print_text(&text)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The per-op table; model-provided text is escaped for the terminal (`super::safe`).
fn render_table(report: &BenchReport, top: usize) -> String {
    use super::safe;
    use std::fmt::Write as _;
    let mut out = String::new();
    let a = &report.analysis;
    let _ = writeln!(
        out,
        "model  {}   device {} ({:?})   threads {}   runs {}   kernels: {}",
        safe(&a.model.source),
        safe(&a.device.id),
        a.device.source,
        report.threads,
        report.runs,
        safe(&report.kernel_isa)
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
        let name: String = safe(&op.name).chars().take(28).collect();
        let _ = writeln!(
            out,
            "{:<28} {:<18} {:>10} {:>10} {:>9.1} {:>8.1} {:>7.0}% {:>+7.0}%",
            name,
            safe(&op.op_type),
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
    roofline::report::markup::terminal_safe_lines(&out).into_owned()
}

pub fn run_model(args: &RunArgs) -> Result<ExitCode> {
    // The .npy files written into the output folder never replace the model or an input.
    let mut protected = super::Inputs::model(&args.model);
    let mut files = Vec::new();
    for spec in &args.inputs {
        let Some((name, file)) = spec.split_once('=') else {
            bail!("--input {spec}: expected NAME=FILE.npy");
        };
        protected.add(std::path::Path::new(file), "an input tensor");
        files.push((name, file));
    }
    let (mut graph, defaults) = load_graph(&args.model)?;
    let mut given: HashMap<String, exec::RtTensor> = HashMap::new();
    let mut shapes: Vec<(String, Vec<u64>)> = Vec::new();
    for (name, file) in files {
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
    // The folder exists before the paths are checked (`new/..` resolves only then). Every path
    // is checked before the first file is written: a refused one leaves nothing half done. Two
    // outputs whose names map to the same file name get a numbered suffix.
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut used = std::collections::HashSet::new();
    let mut planned = Vec::with_capacity(outputs.len());
    for (name, tensor) in &outputs {
        let stem: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut file = format!("{stem}.npy");
        let mut n = 1;
        while !used.insert(file.clone()) {
            n += 1;
            file = format!("{stem}_{n}.npy");
        }
        let path = args.output.join(file);
        protected.check(&path)?;
        planned.push((path, tensor));
    }
    for (path, tensor) in planned {
        protected
            .write(&path, &npy_bytes(tensor))
            .context("writing an output tensor")?;
        note!(
            "wrote {} {:?}",
            super::safe(&path.display().to_string()),
            tensor.shape
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A tensor as a .npy file (format 1.0, little-endian, C order), the bytes `exec::npy::read_npy`
/// reads back. Built here rather than with `npy::write_npy`, which writes the file itself: the
/// binary writes every file through `fsio::write_atomic`.
fn npy_bytes(tensor: &exec::RtTensor) -> Vec<u8> {
    let (descr, payload): (&str, Vec<u8>) = match &tensor.data {
        exec::RtData::F32(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        exec::RtData::I64(v) => ("<i8", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    };
    let shape = match tensor.shape.as_slice() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Data starts on a 64-byte boundary; the header ends with a newline.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + payload.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&payload);
    out
}
