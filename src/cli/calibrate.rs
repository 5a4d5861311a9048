//! `roofline calibrate`: measures the tool's own kernels on the calibration grid against the
//! probed profile's roofs, prints each class's measured efficiency and fit error, and saves the
//! calibration into the profile so `analyze`, `bench` and `advise` show expected times. With
//! `--from-profile` it fits the same tables to another runtime's profiles of models instead
//! (`roofline::calibrate::from_profile`), timing nothing.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use roofline::analysis::{measured, AnalyzeOptions};
use roofline::calibrate::{self, CalibrateOptions};
use roofline::device::{DeviceKind, Precision};

/// Measure the tool's kernels per class and save their efficiency into a device profile.
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// The probed profile to calibrate: `local` (this machine's saved probe) or a profile JSON
    /// probed on this machine. With --from-profile any device (the machine the profiles were
    /// recorded on): its roofs bound the runtime's ops.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// A third of the grid and fewer timed runs (under 10 s instead of under 60 s).
    #[arg(long)]
    pub quick: bool,
    /// Thread count of the multi-threaded tables (default: every thread the profile was
    /// probed with); one thread is always calibrated. With --from-profile: the runtime's
    /// intra-op thread count in the profiles (default 1).
    #[arg(short, long, value_name = "N", value_parser = super::threads_parser())]
    pub threads: Option<usize>,
    /// Fit the tables to another runtime's measured node times instead of timing this tool's
    /// kernels: a model (file or builtin:NAME) and an onnxruntime profile of it, that model's
    /// input bindings after commas (repeatable). Writes a new profile (-o): the device's
    /// ceilings at --threads with the runtime's calibration.
    #[arg(
        long = "from-profile",
        value_name = "MODEL=PROFILE[,NAME=SHAPE..]",
        conflicts_with = "quick"
    )]
    pub from_profile: Vec<String>,
    /// With --from-profile: bind an input of every model that names no bindings of its own
    /// (NAME=1x3x224x224, repeatable).
    #[arg(
        short,
        long = "input",
        value_name = "NAME=SHAPE",
        requires = "from_profile"
    )]
    pub inputs: Vec<String>,
    /// Save the calibrated profile to FILE instead of back where it was read.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the calibration as JSON on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CalibrateArgs) -> Result<ExitCode> {
    if !args.from_profile.is_empty() {
        return run_from_profiles(args);
    }
    let mut profile = super::resolve_device(&args.device)?;
    if profile.kind != DeviceKind::Cpu || profile.probe.is_none() {
        bail!(
            "device `{}` is not a profile probed on this machine: calibration times this CPU's \
             kernels against its own measured roofs (run `roofline probe` first, or pass \
             `--device local`)",
            args.device
        );
    }
    let probed_threads = profile
        .compute
        .iter()
        .filter_map(|c| c.threads)
        .max()
        .unwrap_or(1) as usize;
    let mut thread_counts = vec![1];
    let many = args.threads.unwrap_or(probed_threads);
    if many > 1 {
        thread_counts.push(many);
    }
    let interactive = std::io::stderr().is_terminal();
    let calibration = calibrate::calibrate(
        &profile,
        &CalibrateOptions {
            quick: args.quick,
            thread_counts,
        },
        |progress| {
            if interactive {
                eprint!(
                    "\r\x1b[Kcalibrating {}/{} ({} thread(s)): {}",
                    progress.completed, progress.total, progress.threads, progress.shape
                );
            }
        },
    )
    .context("calibration failed")?;
    if interactive {
        eprint!("\r\x1b[K");
    }
    calibration
        .validate()
        .map_err(|reason| anyhow::anyhow!("calibration is unusable: {reason}"))?;
    for warning in &calibration.warnings {
        eprintln!("warning: {warning}");
    }
    let summary = roofline::report::calibration::render_calibration(&calibration);
    profile.calibration = Some(calibration);

    let path = match (&args.output, args.device.as_str()) {
        (Some(path), _) => path.clone(),
        (None, "local") => roofline::probe::default_profile_path()
            .context("no cache directory for this user; pass -o FILE")?,
        (None, file) => PathBuf::from(file),
    };
    save_and_print(args, &profile, &super::Inputs::default(), &path, &summary)
}

/// Saves the calibrated profile to `path` (never over one of `protected`) and prints the
/// summary, or the calibration as JSON with `--json`.
fn save_and_print(
    args: &CalibrateArgs,
    profile: &roofline::device::DeviceProfile,
    protected: &super::Inputs,
    path: &std::path::Path,
    summary: &str,
) -> Result<ExitCode> {
    let text = serde_json::to_string_pretty(profile).context("serialising the profile")?;
    protected
        .write(path, text.as_bytes())
        .context("saving the calibrated profile")?;
    let mut stdout = std::io::stdout().lock();
    let printed = if args.json {
        let calibration = serde_json::to_string_pretty(&profile.calibration)
            .context("serialising the calibration")?;
        writeln!(stdout, "{calibration}")
    } else {
        write!(stdout, "{summary}").and_then(|()| {
            writeln!(
                stdout,
                "calibration saved in {}",
                super::safe(&path.display().to_string())
            )
        })
    };
    printed
        .and_then(|()| stdout.flush())
        .map_err(super::StdoutError)?;
    Ok(ExitCode::SUCCESS)
}

/// One `--from-profile` argument: `MODEL=PROFILE[,NAME=SHAPE...]`.
struct ProfileSpec {
    model: String,
    profile: PathBuf,
    shapes: Vec<String>,
}

fn parse_profile_spec(text: &str) -> Result<ProfileSpec> {
    let mut parts = text.split(',');
    let pair = parts.next().unwrap_or_default();
    let Some((model, profile)) = pair
        .split_once('=')
        .filter(|(m, p)| !m.is_empty() && !p.is_empty())
    else {
        bail!(
            "--from-profile {}: expected MODEL=PROFILE[,NAME=SHAPE...]",
            super::safe(text)
        );
    };
    Ok(ProfileSpec {
        model: model.to_string(),
        profile: PathBuf::from(profile),
        shapes: parts.map(str::to_owned).collect(),
    })
}

/// `calibrate --from-profile`: every model analysed on the device as a run on `--threads`
/// threads sees it, its profile joined by node name, the tables fitted to the joined ops
/// (`roofline::calibrate::from_profile`) and saved with those ceilings in a new profile. The
/// profile is the device at that thread count so that `analyze` with it bounds every op as the
/// fit did: a table of one-thread ratios applied to all-thread bounds would predict too fast.
fn run_from_profiles(args: &CalibrateArgs) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let Some(output) = &args.output else {
        bail!(
            "--from-profile writes a new profile (the device's ceilings at --threads, default 1, \
             with the runtime's calibration): pass -o FILE"
        );
    };
    let specs = args
        .from_profile
        .iter()
        .map(|text| parse_profile_spec(text))
        .collect::<Result<Vec<_>>>()?;
    let mut protected = super::Inputs::default();
    protected.add_device(&args.device);
    for spec in &specs {
        protected.add(&spec.profile, "a runtime profile");
        if !spec.model.starts_with("builtin:") {
            protected.add(std::path::Path::new(&spec.model), "a model");
        }
    }
    protected.check(output)?;
    let threads = args.threads.unwrap_or(1) as u32;
    let device = super::resolve_device(&args.device)
        .with_context(|| format!("--device {}", args.device))?
        .for_threads(threads);
    let mut analyses = Vec::with_capacity(specs.len());
    for spec in &specs {
        let context = || format!("--from-profile {}", super::safe(&spec.model));
        let profile = super::read_runtime_profile(&spec.profile).with_context(context)?;
        let shapes = if spec.shapes.is_empty() {
            &args.inputs
        } else {
            &spec.shapes
        };
        let model = super::model::load(
            &spec.model,
            roofline::analysis::Bindings {
                inputs: super::model::parse_shapes(shapes).with_context(context)?,
                ..Default::default()
            },
            super::model::Purpose::Analyze,
        )
        .with_context(context)?;
        protected.add_model_files(&model.graph);
        let options = AnalyzeOptions {
            bindings: model.bindings,
            precision: Precision::Fp32,
            ..Default::default()
        };
        let mut analysis =
            roofline::analysis::analyze_graph(model.graph, &model.source, &device, &options)
                .with_context(context)?;
        measured::join(&mut analysis, &profile, &spec.profile.display().to_string());
        analyses.push(analysis);
    }
    let profiled: Vec<calibrate::from_profile::ProfiledModel<'_>> = specs
        .iter()
        .zip(&analyses)
        .map(|(spec, analysis)| calibrate::from_profile::ProfiledModel {
            model: &spec.model,
            analysis,
        })
        .collect();
    let calibration =
        calibrate::from_profile::fit(&profiled, threads, started.elapsed().as_secs_f64())?;
    calibration
        .validate()
        .map_err(|reason| anyhow::anyhow!("calibration is unusable: {reason}"))?;
    let mut summary = String::new();
    for (spec, analysis) in specs.iter().zip(&analyses) {
        if let Some(info) = &analysis.measured {
            summary.push_str(&format!(
                "{}: {} of {} profile nodes matched, {} model node(s) that run without a time\n",
                super::safe(&spec.model),
                info.matched_nodes,
                info.profile_nodes,
                info.unmeasured_model_nodes
            ));
        }
    }
    summary.push_str(&roofline::report::calibration::render_calibration(
        &calibration,
    ));
    let uncovered = calibrate::uncovered(&calibration);
    if !uncovered.is_empty() {
        let names: Vec<&str> = uncovered.iter().map(|c| c.name()).collect();
        summary.push_str(&format!(
            "no profiled op of class {}: those ops are predicted at their bound\n",
            names.join(", ")
        ));
    }
    let mut profile = device;
    profile.calibration = Some(calibration);
    save_and_print(args, &profile, &protected, output, &summary)
}
