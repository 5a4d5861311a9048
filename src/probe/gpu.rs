//! NVIDIA GPUs through NVML, loaded at run time by nvml-wrapper (dlopen), so the binary builds
//! and runs where there is no CUDA or driver: then one line says no driver was found.

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::Nvml;

use crate::device::catalog;

use super::record::{CatalogPeak, GpuInfo, GpuReport};

/// Library names tried in order: the unversioned development link is often missing on
/// machines that only have the driver.
const NVML_LIBRARIES: [&str; 2] = ["libnvidia-ml.so", "libnvidia-ml.so.1"];

fn init() -> Result<Nvml, String> {
    let mut last_error = String::new();
    for library in NVML_LIBRARIES {
        match Nvml::builder()
            .lib_path(std::ffi::OsStr::new(library))
            .init()
        {
            Ok(nvml) => return Ok(nvml),
            Err(error) => last_error = error.to_string(),
        }
    }
    Err(last_error)
}

/// Lists the GPUs, or says why none could be listed.
pub fn discover() -> GpuReport {
    let nvml = match init() {
        Ok(nvml) => nvml,
        Err(reason) => {
            return GpuReport {
                driver_found: false,
                message: format!("no NVIDIA driver found ({reason})"),
                devices: Vec::new(),
            }
        }
    };
    let driver = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "unknown version".into());
    let count = nvml.device_count().unwrap_or(0);
    let mut devices = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let name = device.name().unwrap_or_else(|_| format!("GPU {index}"));
        let memory_clock_mhz = device.max_clock_info(Clock::Memory).ok();
        let memory_bus_width_bits = device.memory_bus_width().ok();
        let mut info = GpuInfo {
            index,
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            max_sm_clock_mhz: device.max_clock_info(Clock::SM).ok(),
            memory_clock_mhz,
            memory_bus_width_bits,
            memory_bytes: device.memory_info().ok().map(|m| m.total),
            theoretical_bandwidth_bytes_per_s: match (memory_clock_mhz, memory_bus_width_bits) {
                (Some(mhz), Some(bits)) => Some(theoretical_bandwidth(mhz, bits)),
                _ => None,
            },
            catalog_id: None,
            catalog_peaks: Vec::new(),
            name,
        };
        if let Some(entry) = match_catalog(&info.name) {
            info.catalog_id = Some(entry.id.to_string());
            info.catalog_peaks = entry
                .peak_tflops
                .iter()
                .map(|&(precision, tflops)| CatalogPeak {
                    precision,
                    flops_per_s: tflops * 1e12,
                })
                .collect();
        }
        devices.push(info);
    }
    GpuReport {
        driver_found: true,
        message: format!("NVIDIA driver {driver}, {count} GPU(s)"),
        devices,
    }
}

/// NVML reports the memory clock such that data moves twice per clock on every bus line
/// (GDDR and HBM alike): bytes/s = 2 × clock × bus width / 8.
pub fn theoretical_bandwidth(memory_clock_mhz: u32, bus_width_bits: u32) -> f64 {
    2.0 * f64::from(memory_clock_mhz) * 1e6 * f64::from(bus_width_bits) / 8.0
}

fn normalise(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Finds the catalogue entry for an NVML device name: an exact name match first, else the
/// longest catalogue id or alias contained in the name (so "A100-SXM4-80GB" finds "a100"
/// rather than "a10").
pub fn match_catalog(name: &str) -> Option<&'static catalog::CatalogEntry> {
    let wanted = normalise(name);
    let stripped = wanted
        .trim_start_matches("nvidia")
        .trim_start_matches("geforce")
        .trim_start_matches("tesla")
        .to_string();
    let entries = catalog::catalog();
    if let Some(entry) = entries.iter().find(|e| normalise(e.name) == wanted) {
        return Some(entry);
    }
    entries
        .iter()
        .flat_map(|entry| {
            std::iter::once(entry.id)
                .chain(entry.aliases.iter().copied())
                .map(move |key| (entry, normalise(key)))
        })
        .filter(|(_, key)| !key.is_empty() && stripped.starts_with(key.as_str()))
        .max_by_key(|(_, key)| key.len())
        .map(|(entry, _)| entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hbm_and_gddr_bandwidth() {
        // H100 SXM: 2619 MHz × 5120 bits → 3.35 TB/s.
        assert!((theoretical_bandwidth(2619, 5120) / 1e12 - 3.352).abs() < 0.01);
        // RTX 3090: 9751 MHz × 384 bits → 936 GB/s.
        assert!((theoretical_bandwidth(9751, 384) / 1e9 - 936.1).abs() < 0.5);
    }

    #[test]
    fn catalogue_matching_by_nvml_name() {
        let entry = match_catalog("NVIDIA GeForce RTX 2080 Ti");
        assert_eq!(entry.map(|e| e.id), Some("rtx2080ti"));
        assert!(match_catalog("Some Other Accelerator").is_none());
    }

    #[test]
    fn discovery_never_fails() {
        let report = discover();
        assert!(!report.message.is_empty());
        if !report.driver_found {
            assert!(report.message.starts_with("no NVIDIA driver found"));
        }
    }
}
