//! `roofline probe`: runs the hardware probe with a progress bar, prints the summary (or the
//! JSON profile) and saves the profile to the user's cache directory or to `-o FILE`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use roofline::probe::{self, MeasurementFlag, ProbeOptions, ProgressEvent};
use roofline::report::probe::render_probe_summary;

/// Measure this machine's compute and bandwidth ceilings and save them as the `local` device.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProbeArgs {
    /// Fewer samples and a coarser sweep (under 5 s instead of under 30 s).
    #[arg(long)]
    pub quick: bool,
    /// Threads for the all-threads figures (default: every core this process may use).
    #[arg(long, value_name = "N", value_parser = super::threads_parser())]
    pub threads: Option<usize>,
    /// Print the profile as JSON on stdout instead of the summary table.
    #[arg(long)]
    pub json: bool,
    /// Save the profile to FILE instead of the cache directory.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(args: &ProbeArgs) -> Result<ExitCode> {
    let options = ProbeOptions {
        quick: args.quick,
        threads: args.threads,
    };
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} probing [{bar:30}] {pos}/{len} {wide_msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut notes = Vec::new();
    let profile = probe::run_probe(&options, &mut |event| match event {
        ProgressEvent::Step {
            completed,
            total_steps,
            label,
        } => {
            bar.set_length(total_steps);
            bar.set_position(completed);
            bar.set_message(label);
        }
        ProgressEvent::Note(text) => notes.push(text),
    });
    bar.finish_and_clear();
    let profile = profile.context("probe failed")?;

    let path = match &args.output {
        Some(path) => path.clone(),
        None => probe::default_profile_path()
            .context("no cache directory for this user; pass -o FILE to save the profile")?,
    };
    // As `DeviceProfile::save`, through a temporary file and a rename (`fsio::write_atomic`).
    let text = serde_json::to_string_pretty(&profile).context("serialising the profile")?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("saving the profile: creating {}", parent.display()))?;
    }
    super::Inputs::default()
        .write(&path, text.as_bytes())
        .context("saving the profile")?;

    let mut stdout = std::io::stdout().lock();
    let printed = if args.json {
        writeln!(stdout, "{text}")
    } else {
        write!(stdout, "{}", render_probe_summary(&profile)).and_then(|()| {
            writeln!(
                stdout,
                "profile saved to {}",
                super::safe(&path.display().to_string())
            )
        })
    };
    printed
        .and_then(|()| stdout.flush())
        .map_err(super::StdoutError)?;
    // Warnings are part of the summary; with --json they go to stderr so stdout stays JSON.
    if args.json {
        for text in &notes {
            note!("note: {text}");
        }
    }

    let above_theory = profile.probe.as_ref().is_some_and(|record| {
        record
            .compute
            .iter()
            .any(|m| m.flags.contains(&MeasurementFlag::AboveTheoretical))
    });
    // A figure above its theoretical peak means the kernel's count or the microarchitecture
    // table is wrong: the profile is still written, but the run does not pass silently.
    Ok(if above_theory {
        ExitCode::from(super::EXIT_WARNINGS)
    } else {
        ExitCode::SUCCESS
    })
}
