//! `roofline calibrate`: measures the tool's own kernels on the calibration grid against the
//! probed profile's roofs, prints each class's measured efficiency and fit error, and saves the
//! calibration into the profile so `analyze`, `bench` and `advise` show expected times.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use roofline::calibrate::{self, CalibrateOptions};
use roofline::device::DeviceKind;

/// Measure the tool's kernels per class and save their efficiency into a device profile.
#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// The probed profile to calibrate: `local` (this machine's saved probe) or a profile JSON
    /// probed on this machine.
    #[arg(short, long, default_value = "local")]
    pub device: String,
    /// A third of the grid and fewer timed runs (under 10 s instead of under 60 s).
    #[arg(long)]
    pub quick: bool,
    /// Thread count of the multi-threaded tables (default: every thread the profile was
    /// probed with); one thread is always calibrated.
    #[arg(short, long, value_name = "N", value_parser = super::threads_parser())]
    pub threads: Option<usize>,
    /// Save the calibrated profile to FILE instead of back where it was read.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the calibration as JSON on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CalibrateArgs) -> Result<ExitCode> {
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
    let summary = roofline::report::calibration::render_calibration(&calibration);
    profile.calibration = Some(calibration);

    let path = match (&args.output, args.device.as_str()) {
        (Some(path), _) => path.clone(),
        (None, "local") => roofline::probe::default_profile_path()
            .context("no cache directory for this user; pass -o FILE")?,
        (None, file) => PathBuf::from(file),
    };
    let text = serde_json::to_string_pretty(&profile).context("serialising the profile")?;
    super::Inputs::default()
        .write(&path, text.as_bytes())
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
