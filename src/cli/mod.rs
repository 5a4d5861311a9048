//! Subcommands of the binary. Library errors (thiserror) become `anyhow` errors here, with
//! context naming what the user passed.

mod analyze;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use roofline::builtin::{self, WeightFill};
use roofline::device::{self, DeviceProfile};

/// Exit status for warnings promoted by `--strict`.
pub const EXIT_WARNINGS: u8 = 1;
/// Exit status for bad input (unreadable model, unknown device, unbound dims...).
pub const EXIT_BAD_INPUT: u8 = 2;

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
        Command::Devices { json } => {
            devices(json)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Models => {
            for model in builtin::MODELS {
                println!("builtin:{:<12} {}", model.name, model.description);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            model,
            output,
            seed,
        } => {
            let builtin = builtin::find(&model)?;
            let proto = builtin.build(WeightFill::Random(seed));
            let bytes = prost::Message::encode_to_vec(&proto);
            std::fs::write(&output, &bytes)
                .with_context(|| format!("writing {}", output.display()))?;
            eprintln!(
                "wrote {} ({} bytes, opset {})",
                output.display(),
                bytes.len(),
                builtin::BUILTIN_OPSET
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn devices(json: bool) -> Result<()> {
    let profiles: Vec<DeviceProfile> = device::catalog().iter().map(|e| e.to_profile()).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&profiles)?);
        return Ok(());
    }
    println!(
        "{:<22} {:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "id", "name", "fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "DRAM GB/s"
    );
    for (entry, profile) in device::catalog().iter().zip(&profiles) {
        let peak = |p| {
            profile
                .peak_flops(p)
                .map(|f| format!("{:.1}", f / 1e12))
                .unwrap_or_else(|| "-".into())
        };
        use roofline::device::Precision::*;
        let id = if entry.aliases.is_empty() {
            entry.id.to_string()
        } else {
            format!("{} ({})", entry.id, entry.aliases.join(","))
        };
        println!(
            "{:<22} {:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9.0}",
            id,
            entry.name,
            peak(Fp64),
            peak(Fp32),
            peak(Tf32),
            peak(Fp16),
            peak(Bf16),
            peak(Fp8),
            peak(Int8),
            entry.bandwidth_gbs
        );
    }
    println!("\npeaks in dense TFLOP/s (TOP/s for int8); sources: `roofline devices --json`");
    Ok(())
}

/// Resolves `--device`: a catalogue name, `local` (the saved probe profile), or a JSON file.
pub fn resolve_device(spec: &str) -> Result<DeviceProfile> {
    if spec == "local" {
        bail!("`--device local` needs a probed profile: run `roofline probe` first");
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
