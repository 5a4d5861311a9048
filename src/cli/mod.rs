//! Subcommands of the binary. Library errors (thiserror) become `anyhow` errors here, with
//! context naming what the user passed.

mod advise;
mod analyze;
mod bench;
mod calibrate;
mod compress;
mod model;
mod probe;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, Subcommand};

use roofline::analysis::{Diagnostic, Severity};
use roofline::builtin::{self, WeightFill};
use roofline::device::{self, DeviceProfile};
use roofline::fsio;
use roofline::report::devices::{render_devices_json, render_devices_table};

/// Exit status for warnings promoted by `--strict`.
pub const EXIT_WARNINGS: u8 = 1;
/// Exit status for bad input (unreadable model, unknown device, unbound dims...).
pub const EXIT_BAD_INPUT: u8 = 2;

/// Most timed runs of `bench` and `advise`: every run keeps one latency per op.
pub const MAX_RUNS: u64 = roofline::bench::MAX_RUNS as u64;
/// Most worker threads (each one a thread of the OS, with its own scratch buffers).
pub const MAX_THREADS: u64 = 1024;
/// Largest `--batch`: far past any real batch, small enough that sizes stay in range.
pub const MAX_BATCH: u64 = 1 << 20;

/// `--runs`: 1..=MAX_RUNS, checked by clap before anything is allocated.
pub fn runs_parser() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_RUNS)
}

/// `--min-time`: seconds, a number from 0 to 60.
pub fn min_time_parser(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(0.0..=60.0).contains(&seconds) {
        return Err(format!("{text} s is outside 0 to 60 s"));
    }
    Ok(seconds)
}

/// `--threads`: 1..=MAX_THREADS.
pub fn threads_parser() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_THREADS)
}

/// `--batch`: 1..=MAX_BATCH (a batch of 0 has no meaning).
pub fn batch_parser() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(1..=MAX_BATCH)
}

/// A failed write to stdout (a closed pipe, a full disk). `main` ends quietly on a broken pipe.
#[derive(Debug, thiserror::Error)]
#[error("writing to stdout")]
pub struct StdoutError(#[source] pub std::io::Error);

/// Writes `text` to stdout (locked) and flushes it, so a failure is seen here and not lost at
/// exit.
pub fn print_text(text: &str) -> Result<(), StdoutError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// Flushes stdout (whatever is left in its buffer before the process exits).
pub fn flush_stdout() -> Result<(), StdoutError> {
    std::io::stdout().lock().flush().map_err(StdoutError)
}

/// Whether the failure is a closed pipe (`roofline devices | head -1`) anywhere in its chain.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The files a command reads, which none of its outputs may replace: the model (a builtin has
/// no file), device profiles, input tensors. Every output goes through [`Inputs::write`].
#[derive(Debug, Default)]
pub struct Inputs {
    files: Vec<(PathBuf, &'static str)>,
}

impl Inputs {
    /// The model file of `spec` (nothing for `builtin:NAME`).
    pub fn model(spec: &str) -> Self {
        let mut inputs = Self::default();
        if !spec.starts_with("builtin:") {
            inputs.add(Path::new(spec), "the model");
        }
        inputs
    }

    pub fn add(&mut self, path: &Path, what: &'static str) {
        self.files.push((path.to_path_buf(), what));
    }

    /// The external-data files a loaded model read its weights from.
    pub fn add_model_files(&mut self, graph: &roofline::analysis::Graph) {
        for file in &graph.external_files {
            self.add(file, "the model's external data");
        }
    }

    /// The profile file a `--device` spec reads, when it reads one (see [`resolve_device`]).
    pub fn add_device(&mut self, spec: &str) {
        if spec == "local" {
            if let Some(path) = roofline::probe::default_profile_path() {
                self.add(&path, "the device profile");
            }
        } else if device::find_device(spec).is_none() {
            let path = Path::new(spec);
            if path.extension().is_some_and(|e| e == "json") || path.exists() {
                self.add(path, "the device profile");
            }
        }
    }

    /// Refuses `output` when it is one of the inputs (through symlinks and `..`).
    pub fn check(&self, output: &Path) -> Result<()> {
        for (input, what) in &self.files {
            fsio::ensure_not_an_input(output, &[input.as_path()], what)?;
        }
        Ok(())
    }

    /// Checks `output` again and writes `bytes` to it atomically.
    pub fn write(&self, output: &Path, bytes: &[u8]) -> Result<()> {
        self.check(output)?;
        fsio::write_atomic(output, bytes)?;
        Ok(())
    }

    /// Writes a report to `output` (see [`Inputs::write`]), or to stdout without one.
    pub fn emit(&self, output: Option<&Path>, text: &str) -> Result<()> {
        match output {
            Some(path) => self
                .write(path, text.as_bytes())
                .context("writing the report"),
            None => Ok(print_text(text)?),
        }
    }
}

/// The exit status that a command's diagnostics call for, the same for every command that
/// analyses a model. The first list decides errors (the analysis of the model as given; other
/// lists are the same model on other devices or after rewrites); warnings count in every list.
///
/// - An op the tool does not know is a warning: the report lists it as not costed, a line on
///   stderr names it, and the command exits 0 (a runtime may know the op; the file is fine).
/// - An op that could not be analysed for a reason marked as an error is bad input: exit 2,
///   after the report was written.
/// - With `--strict`, any warning (an op not costed, a shape taken from the model) exits 1.
pub fn diagnostics_status(source: &str, diagnostics: &[&[Diagnostic]], strict: bool) -> ExitCode {
    let errors: Vec<&Diagnostic> = diagnostics
        .first()
        .into_iter()
        .flat_map(|list| list.iter())
        .filter(|d| d.severity == Severity::Error)
        .collect();
    if let Some(first) = errors.first() {
        note!(
            "error: {}: node `{}`: {} ({} node(s) could not be analysed; they are NOT in the totals)",
            safe(source),
            safe(first.node.as_deref().unwrap_or("?")),
            safe(&first.message),
            errors.len()
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let unknown_nodes: Vec<&Diagnostic> = diagnostics
        .first()
        .into_iter()
        .flat_map(|list| list.iter())
        .filter(|d| d.is_unknown_op())
        .collect();
    if let Some(first) = unknown_nodes.first() {
        let mut ops: Vec<&str> = unknown_nodes
            .iter()
            .filter_map(|d| d.op_type.as_deref())
            .collect();
        ops.sort_unstable();
        ops.dedup();
        note!(
            "warning: {}: op(s) the tool does not know: {} ({} node(s), the first `{}`); NOT costed: the totals exclude them",
            safe(source),
            safe(&ops.join(", ")),
            unknown_nodes.len(),
            safe(first.node.as_deref().unwrap_or("?"))
        );
    }
    let warnings = diagnostics
        .iter()
        .flat_map(|list| list.iter())
        .filter(|d| d.severity == Severity::Warning)
        .count();
    if strict && warnings > 0 {
        note!("{warnings} warning(s) and --strict: exit status {EXIT_WARNINGS}");
        return ExitCode::from(EXIT_WARNINGS);
    }
    ExitCode::SUCCESS
}

#[derive(Parser, Debug)]
#[command(
    name = "roofline",
    version,
    about = "Why is this network slow on this hardware? Per-op roofline analysis of ONNX models."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Per-op roofline of a model (ONNX file or builtin:NAME) on one or more devices.
    Analyze(analyze::AnalyzeArgs),
    /// Measure this machine's compute and bandwidth ceilings and save them as a device profile.
    Probe(probe::ProbeArgs),
    /// Run a model with the tool's own CPU kernels; time every op against its prediction.
    Bench(bench::BenchArgs),
    /// Measure the tool's kernels per op class and save their efficiency into the profile.
    Calibrate(calibrate::CalibrateArgs),
    /// Rewrite the model (fold, BN fold, fusion) with predicted and measured gains.
    Advise(advise::AdviseArgs),
    /// Prune channels and lower precisions toward a latency target, predicted by the roofline
    /// and measured on this CPU.
    Compress(compress::CompressArgs),
    /// Run a model once and write every graph output as .npy.
    Run(bench::RunArgs),
    /// List the built-in device catalogue.
    Devices {
        /// Print the catalogue as JSON device profiles.
        #[arg(long)]
        json: bool,
    },
    /// List the built-in models.
    Models,
    /// Write a built-in model as an ONNX file (random weights, fixed seed).
    Export {
        /// builtin:NAME
        model: String,
        #[arg(short, long)]
        output: std::path::PathBuf,
        /// Seed of the random weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Analyze(args) => analyze::run(&args),
        Command::Probe(args) => probe::run(&args),
        Command::Bench(args) => bench::run_bench(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Run(args) => bench::run_model(&args),
        Command::Advise(args) => advise::run(&args),
        Command::Compress(args) => compress::run(&args),
        Command::Devices { json } => {
            let catalog = device::catalog();
            let text = if json {
                render_devices_json(catalog)?
            } else {
                render_devices_table(catalog)
            };
            print_text(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Models => {
            let mut out = std::io::stdout().lock();
            builtin::MODELS
                .iter()
                .try_for_each(|model| {
                    writeln!(out, "builtin:{:<12} {}", model.name, model.description)
                })
                .and_then(|()| out.flush())
                .map_err(StdoutError)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            model,
            output,
            seed,
        } => {
            let builtin = builtin::find(&model)?;
            builtin.check_materialisable()?;
            let proto = builtin.build(WeightFill::Random(seed));
            let bytes = prost::Message::encode_to_vec(&proto);
            // A builtin reads no file: there is no input to protect.
            Inputs::default()
                .write(&output, &bytes)
                .context("writing the model")?;
            note!(
                "wrote {} ({} bytes, opset {})",
                safe(&output.display().to_string()),
                bytes.len(),
                builtin::BUILTIN_OPSET
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Model-provided text for the terminal (see `roofline::report::markup::terminal_safe`).
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    roofline::report::markup::terminal_safe(text)
}

/// Largest runtime profile read (`--measured`, `--from-profile`): a profile of thousands of
/// runs of a large model stays far below it; a bigger file is not a profile of inference.
const MAX_RUNTIME_PROFILE_BYTES: u64 = 1 << 30;

/// Reads and parses an onnxruntime profile (`analyze --measured`, `calibrate --from-profile`).
/// Only a regular file is opened (a FIFO would block), and only up to the size limit.
pub fn read_runtime_profile(path: &Path) -> Result<roofline::analysis::measured::RuntimeProfile> {
    use std::io::Read;
    let shown = safe(&path.display().to_string()).into_owned();
    let metadata = std::fs::metadata(path).with_context(|| shown.clone())?;
    if !metadata.is_file() {
        bail!("{shown}: not a regular file");
    }
    if metadata.len() > MAX_RUNTIME_PROFILE_BYTES {
        bail!(
            "{shown}: {} bytes is larger than any runtime profile this reads (1 GiB)",
            metadata.len()
        );
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(MAX_RUNTIME_PROFILE_BYTES)
                .read_to_string(&mut text)
        })
        .with_context(|| shown.clone())?;
    roofline::analysis::measured::parse_ort_profile(&text).with_context(|| shown)
}

/// Resolves `--device`: a catalogue name, `local` (the saved probe profile), or a JSON file.
pub fn resolve_device(spec: &str) -> Result<DeviceProfile> {
    if spec == "local" {
        if let Some(path) = roofline::probe::default_profile_path() {
            if !path.exists() {
                note!("no saved profile of this machine: running a quick probe first (`roofline probe` for a full one)");
            }
        }
        return Ok(roofline::probe::load_or_probe_local()?);
    }
    if let Some(entry) = device::find_device(spec) {
        return Ok(entry.to_profile());
    }
    let path = std::path::Path::new(spec);
    if path.extension().is_some_and(|e| e == "json") || path.exists() {
        return Ok(DeviceProfile::load(path)?);
    }
    let known: Vec<&str> = device::catalog().iter().map(|e| e.id).collect();
    bail!(
        "unknown device `{spec}`: not in the catalogue ({}), not `local`, not a profile file",
        known.join(", ")
    )
}
