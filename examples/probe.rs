//! Runs the hardware probe through the library API and prints the summary.
//! `cargo run --release --example probe -- [--quick] [--threads N] [--json]`

use roofline::probe::{render_summary, run_probe, ProbeOptions, ProgressEvent};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>())
        .transpose()?;
    let options = ProbeOptions {
        quick: args.iter().any(|a| a == "--quick"),
        threads,
    };
    let profile = run_probe(&options, &mut |event| {
        if let ProgressEvent::Note(text) = event {
            eprintln!("note: {text}");
        }
    })?;
    if args.iter().any(|a| a == "--json") {
        println!("{}", serde_json::to_string_pretty(&profile)?);
    } else {
        print!("{}", render_summary(&profile));
    }
    Ok(())
}
