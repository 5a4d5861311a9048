//! `roofline bench` (measure every op against its prediction) and `roofline run` (write every
//! graph output as .npy).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use roofline::analysis::{AnalyzeOptions, Bindings};
use roofline::bench::{self, BenchOptions};
use roofline::device::Precision;
use roofline::exec::{self, npy, PlanOptions};
use roofline::report::bench::{render_bench_html, render_bench_json, render_bench_table};

use super::model::{self, LoadedModel, ModelArgs, Purpose, ThreadArgs};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BenchFormat {
    Table,
    Json,
    Html,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub threads: ThreadArgs,
    /// Device profile for the predictions: `local` (the probed CPU), a catalogue name or a file.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// Fewest timed runs after warm-up (1 to 100000); --min-time may add more, up to 100000.
    #[arg(short, long, default_value_t = 10, value_parser = super::runs_parser())]
    pub runs: usize,
    /// Seconds the end-to-end series lasts at least: runs go on past --runs until then, and the
    /// per-op series takes as many (0 to 60; 0: exactly --runs runs). A shared host slows for
    /// tenths of a second at a time, so a short series measures one spell.
    #[arg(long, default_value_t = 0.5, value_parser = super::min_time_parser)]
    pub min_time: f64,
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
    /// Exit with status 1 when any warning (e.g. an op that was not costed) was raised.
    #[arg(long)]
    pub strict: bool,
    /// Run a decoder's generation loop: each timed run is one token whose logits (argmax) and
    /// `present` caches feed the next step's `input_ids` and `past` (the cache keeps its length:
    /// the oldest entry drops). At least `--runs` steps are timed (more to fill `--min-time`); bind
    /// the new tokens to 1.
    #[arg(long)]
    pub decode: bool,
    /// Keep every activation NCHW: no pointwise → depthwise pairs held NHWC between them, to
    /// measure what the pairs buy.
    #[arg(long)]
    pub no_nhwc_pairs: bool,
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
    #[command(flatten)]
    pub threads: ThreadArgs,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory for the .npy files (none of them may replace the model or an input).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Exit with status 1 when any warning (e.g. a shape taken from the model's value_info)
    /// was raised.
    #[arg(long)]
    pub strict: bool,
}

pub fn run_bench(args: &BenchArgs) -> Result<ExitCode> {
    let mut protected = super::Inputs::model(&args.model.model);
    for file in args.model.input_files() {
        protected.add(&file, "an input tensor");
    }
    protected.add_device(&args.device);
    if let Some(path) = &args.output {
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
    let options = BenchOptions {
        runs: args.runs,
        min_time_s: args.min_time,
        warmup: 2,
        threads: args.threads.threads.max(1),
        seed: 0,
        tune: args.tune,
        decode: args.decode,
        measure_algorithms: args.device == "local",
        evict_bytes: 0,
        per_op_only: false,
        nhwc_pairs: !args.no_nhwc_pairs,
        check_exchange: true,
        given_inputs: args.model.given_values()?,
    };
    let graph = if args.optimize {
        let (_, rewritten) = roofline::advisor::advise(
            model.graph,
            &model.source,
            &device,
            &analyze,
            &Default::default(),
        )?;
        rewritten
    } else {
        model.graph
    };
    let report = bench::bench_graph(graph, &model.source, &device, &analyze, &options)?;
    let text = match args.format {
        BenchFormat::Json => render_bench_json(&report)?,
        BenchFormat::Table => render_bench_table(&report, args.top),
        BenchFormat::Html => render_bench_html(&report)?,
    };
    protected.emit(args.output.as_deref(), &text)?;
    Ok(super::diagnostics_status(
        &model.source,
        &[&report.analysis.diagnostics],
        args.strict,
    ))
}

/// Whether a plan failed because a shape was not known before running (what running in stages
/// can fix).
fn shapes_unknown(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<exec::ExecError>(),
        Some(exec::ExecError::Node { reason, .. })
            if reason.contains("is not known") || reason.starts_with("shape inference failed")
    )
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
    // Shapes: those of the given tensors, then `--shape`.
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
    shapes.extend(model::parse_shapes(&args.shapes)?);
    let LoadedModel {
        source,
        graph: loaded,
        bindings,
    } = model::load(
        &args.model,
        Bindings {
            inputs: shapes,
            batch: args.batch,
            dims: Vec::new(),
        },
        Purpose::Execute,
    )?;
    protected.add_model_files(&loaded);
    let options = PlanOptions {
        threads: args.threads.threads.max(1),
        ..PlanOptions::default()
    };
    let build = |graph: &mut roofline::analysis::graph::Graph,
                 bindings: &Bindings|
     -> Result<(exec::Plan, Vec<roofline::analysis::Diagnostic>)> {
        let (order, states, diagnostics) = roofline::analysis::prepare_graph(graph, bindings)?;
        let plan = exec::build_plan(graph, &order, &states, &options)?;
        Ok((plan, diagnostics))
    };
    let mut graph = loaded.clone();
    let planned_run = match build(&mut graph, &bindings) {
        Ok(built) => Ok(built),
        // A model whose shapes or kernels depend on input values (a Reshape's shape, Reduce
        // axes, a Conv's filter given as an input) is planned again for the values given,
        // integers first: the plan is for this one run.
        Err(first) => {
            let mut specialised = None;
            for which in [exec::Specialise::Integers, exec::Specialise::All] {
                let Some((mut candidate, narrowed, bound)) =
                    exec::specialised(&loaded, &bindings, &given, which)
                else {
                    continue;
                };
                if let Ok(built) = build(&mut candidate, &narrowed) {
                    note!(
                        "planned for the given values of {} (the model's shapes or kernels depend on them)",
                        super::safe(&bound.join(", "))
                    );
                    graph = candidate;
                    specialised = Some(built);
                    break;
                }
            }
            specialised.ok_or(first)
        }
    };
    let (outputs, diagnostics) = match planned_run {
        Ok((plan, diagnostics)) => {
            let mut inputs = exec::random_inputs(&plan, args.seed);
            let fed: Vec<String> = plan.inputs().into_iter().map(|(name, ..)| name).collect();
            for (name, tensor) in given {
                if fed.contains(&name) {
                    inputs.insert(name, tensor);
                }
            }
            let mut workspace = plan.workspace();
            (plan.run(&mut workspace, &inputs, None)?, diagnostics)
        }
        // Output shapes that depend on the data (NonZero, NonMaxSuppression...): run in stages,
        // each data-dependent node evaluated once the values before it are known. Only for
        // that failure: a plan too large or a missing kernel is the answer as it stands.
        Err(first) if !shapes_unknown(&first) => return Err(first),
        Err(first) => match exec::run_staged(&loaded, &bindings, &given, &options, args.seed) {
            Ok(staged) => {
                note!("ran in stages: output shapes in the model depend on the data");
                staged
            }
            Err(staged) => {
                // The first failure is the one to report; a different one from the staged run
                // is worth a line too.
                let (first_text, staged_text) = (first.to_string(), staged.to_string());
                if !first_text.contains(&staged_text) && !staged_text.contains(&first_text) {
                    note!("(running in stages: {})", super::safe(&staged_text));
                }
                return Err(first);
            }
        },
    };
    // The element types of the outputs, from the model's inference (as far as it went).
    let output_types: HashMap<String, roofline::analysis::tensor::DType> = graph
        .outputs
        .iter()
        .map(|&v| (graph.values[v].name.clone(), graph.values[v].fact.dtype))
        .collect();
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
        planned.push((path, name, tensor));
    }
    // Each output in the model's element type for it.
    for (path, name, tensor) in planned {
        let encode = |t: &exec::RtTensor| match output_types.get(name) {
            Some(&dtype) => npy::encode_npy_as(t, dtype),
            None => npy::encode_npy(t),
        };
        protected
            .write(&path, &encode(tensor))
            .context("writing an output tensor")?;
        note!(
            "wrote {} {:?}",
            super::safe(&path.display().to_string()),
            tensor.shape
        );
    }
    Ok(super::diagnostics_status(
        &source,
        &[&diagnostics],
        args.strict,
    ))
}
