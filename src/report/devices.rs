//! `roofline devices`: the built-in catalogue as a table (peaks per precision and DRAM
//! bandwidth) or as JSON device profiles.

use std::fmt::Write as _;

use crate::device::catalog::CatalogEntry;
use crate::device::{DeviceProfile, Precision};

/// The catalogue as JSON device profiles (with a source for every number).
pub fn render_devices_json(entries: &[CatalogEntry]) -> Result<String, serde_json::Error> {
    let profiles: Vec<DeviceProfile> = entries.iter().map(|e| e.to_profile()).collect();
    Ok(format!("{}\n", serde_json::to_string_pretty(&profiles)?))
}

/// The catalogue as a table: dense peaks in TFLOP/s (TOP/s for int8) and DRAM GB/s.
pub fn render_devices_table(entries: &[CatalogEntry]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "id", "name", "fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "DRAM GB/s"
    );
    for entry in entries {
        let profile = entry.to_profile();
        let peak = |p| {
            profile
                .peak_flops(p)
                .map(|f| format!("{:.1}", f / 1e12))
                .unwrap_or_else(|| "-".into())
        };
        use Precision::*;
        let id = if entry.aliases.is_empty() {
            entry.id.to_string()
        } else {
            format!("{} ({})", entry.id, entry.aliases.join(","))
        };
        let _ = writeln!(
            out,
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
    let _ = writeln!(
        out,
        "\npeaks in dense TFLOP/s (TOP/s for int8); sources: `roofline devices --json`"
    );
    out
}
