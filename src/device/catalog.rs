//! The built-in catalogue of real hardware: dense datasheet peaks per precision, memory
//! bandwidth and L2 size, each entry with its sources (transcribed from
//! `data/devices.json`, committed with its sources and aliases, by `scripts/gen_catalog.py`).

use super::{
    ComputeCeiling, DeviceKind, DeviceProfile, MemoryCeiling, MemoryLevel, Precision,
    ProfileSource, PROFILE_SCHEMA_VERSION,
};

/// Per-kernel fixed cost charged on GPUs: the launch-to-start latency of a CUDA kernel is a few
/// microseconds on discrete NVIDIA GPUs (order of magnitude commonly measured with empty-kernel
/// benchmarks; not a datasheet figure). It makes tiny ops "overhead-bound" instead of free.
pub const GPU_LAUNCH_OVERHEAD_S: f64 = 3e-6;

/// One catalogue row, as transcribed.
#[derive(Debug)]
pub struct CatalogEntry {
    pub id: &'static str,
    pub aliases: &'static [&'static str],
    pub name: &'static str,
    pub kind: DeviceKind,
    /// Dense peaks in TFLOP/s (TOP/s for int8).
    pub peak_tflops: &'static [(Precision, f64)],
    pub bandwidth_gbs: f64,
    pub memory_gb: Option<f64>,
    pub l2_mb: Option<f64>,
    pub boost_mhz: Option<f64>,
    pub sources: &'static [&'static str],
    pub notes: &'static str,
}

impl CatalogEntry {
    pub fn to_profile(&self) -> DeviceProfile {
        let source = self
            .sources
            .first()
            .copied()
            .unwrap_or_default()
            .to_string();
        DeviceProfile {
            schema_version: PROFILE_SCHEMA_VERSION,
            id: self.id.to_string(),
            name: self.name.to_string(),
            kind: self.kind,
            source: ProfileSource::Catalog,
            compute: self
                .peak_tflops
                .iter()
                .map(|&(precision, tflops)| ComputeCeiling {
                    precision,
                    flops_per_s: tflops * 1e12,
                    threads: None,
                    theoretical_flops_per_s: None,
                    source: source.clone(),
                })
                .collect(),
            memory: vec![MemoryCeiling {
                level: MemoryLevel::Dram,
                bytes_per_s: self.bandwidth_gbs * 1e9,
                write_bytes_per_s: None,
                capacity_bytes: self.memory_gb.map(|gb| (gb * 1e9) as u64),
                threads: None,
                source,
            }],
            launch_overhead_s: GPU_LAUNCH_OVERHEAD_S,
            launch_overhead_source: "typical CUDA kernel launch latency (order of magnitude)"
                .to_string(),
            l2_bytes: self.l2_mb.map(|mb| (mb * 1024.0 * 1024.0) as u64),
            sources: self.sources.iter().map(|s| s.to_string()).collect(),
            notes: self.notes.to_string(),
            probe: None,
            calibration: None,
            single_thread: None,
        }
    }
}

/// Every catalogue entry.
pub fn catalog() -> &'static [CatalogEntry] {
    super::catalog_data::ENTRIES
}

/// Finds a device by id or alias, ignoring case and punctuation (`RTX-2080Ti` = `rtx2080ti`).
pub fn find_device(name: &str) -> Option<&'static CatalogEntry> {
    let wanted = normalise(name);
    catalog().iter().find(|entry| {
        normalise(entry.id) == wanted || entry.aliases.iter().any(|a| normalise(a) == wanted)
    })
}

fn normalise(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_devices_are_present() {
        for id in [
            "gtx1080ti",
            "rtx2080ti",
            "t4",
            "v100",
            "rtx3090",
            "a10",
            "a100",
            "a100-40gb",
            "rtx4090",
            "l4",
            "l40s",
            "h100",
            "h100-pcie",
            "h200",
            "jetson-orin",
        ] {
            assert!(find_device(id).is_some(), "{id} missing from the catalogue");
        }
    }

    #[test]
    fn rtx2080ti_figures_match_the_turing_whitepaper() {
        let profile = find_device("RTX-2080Ti").unwrap().to_profile();
        assert_eq!(profile.peak_flops(Precision::Fp32), Some(13.4e12));
        assert_eq!(profile.dram_bandwidth(), Some(616e9));
        // FP16 tensor with FP32 accumulate is half the FP16-accumulate rate on GeForce Turing.
        assert_eq!(profile.peak_flops(Precision::Fp16), Some(53.8e12));
        assert!(profile.validate().is_ok());
    }

    #[test]
    fn every_entry_has_sources_and_a_valid_profile() {
        for entry in catalog() {
            assert!(!entry.sources.is_empty(), "{} has no source", entry.id);
            entry.to_profile().validate().unwrap();
        }
    }
}
