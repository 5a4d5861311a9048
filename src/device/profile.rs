//! `DeviceProfile`: the ceilings of one device. Catalogue entries, probed profiles and
//! user-supplied JSON files all use this one format (schema documented in README.md).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Precision;

/// Bumped when a field changes meaning or disappears; additions keep the version.
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Gpu,
    Cpu,
    Soc,
}

/// Where a profile's numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileSource {
    /// Datasheet figures from the built-in catalogue.
    Catalog,
    /// Measured on this machine by `roofline probe`.
    Probed,
    /// Written by hand or by another tool.
    File,
}

/// A compute roof at one precision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeCeiling {
    pub precision: Precision,
    /// Peak rate in FLOP/s (OP/s for integer precisions) used by the roofline.
    pub flops_per_s: f64,
    /// Threads the figure was measured with; `None` for a whole-device datasheet figure.
    #[serde(default)]
    pub threads: Option<u32>,
    /// Theoretical peak, when the figure is a measurement.
    #[serde(default)]
    pub theoretical_flops_per_s: Option<f64>,
    /// Datasheet, derivation or measurement method.
    #[serde(default)]
    pub source: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryLevel {
    L1,
    L2,
    L3,
    /// Main memory: DRAM, GDDR or HBM.
    Dram,
}

impl MemoryLevel {
    pub fn name(self) -> &'static str {
        match self {
            MemoryLevel::L1 => "L1",
            MemoryLevel::L2 => "L2",
            MemoryLevel::L3 => "L3",
            MemoryLevel::Dram => "DRAM",
        }
    }
}

/// A memory roof. Reads and writes may have their own rates: a probed CPU profile measures
/// both (ordinary loads and ordinary stores), a datasheet states one figure for both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryCeiling {
    pub level: MemoryLevel,
    /// Read bandwidth: the rate bytes read are charged at (and written bytes too, when
    /// `write_bytes_per_s` is absent).
    pub bytes_per_s: f64,
    /// Write bandwidth, when measured apart from reads: bytes stored per second with ordinary
    /// stores (read-for-ownership and write-back included in the time, not in the bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_s: Option<f64>,
    /// Capacity in bytes (total for DRAM, per device for L2, per core for L1 on CPUs).
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    #[serde(default)]
    pub threads: Option<u32>,
    #[serde(default)]
    pub source: String,
}

/// The ceilings of one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    #[serde(default = "default_schema")]
    pub schema_version: u32,
    /// Short identifier (`rtx2080ti`, `local`).
    pub id: String,
    /// Marketing name.
    pub name: String,
    pub kind: DeviceKind,
    pub source: ProfileSource,
    pub compute: Vec<ComputeCeiling>,
    pub memory: Vec<MemoryCeiling>,
    /// Fixed cost charged to every executed op (kernel launch on GPUs, dispatch on CPUs), in s.
    #[serde(default)]
    pub launch_overhead_s: f64,
    /// Last-level on-chip cache capacity (L2 on GPUs), when known; informs which ops could run
    /// from cache rather than DRAM.
    #[serde(default)]
    pub l2_bytes: Option<u64>,
    #[serde(default)]
    pub launch_overhead_source: String,
    /// Sources of the figures and caveats, free text.
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub notes: String,
    /// Everything a probe measured (CPU description, clocks, sweeps); absent for catalogue entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<super::probe_record::ProbeRecord>,
    /// Measured efficiency of the tool's kernels per class (`roofline calibrate`); absent until
    /// calibrated, and for catalogue entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<super::calibration::Calibration>,
    /// The one-thread view of a probed profile, kept by [`DeviceProfile::for_threads`] for a run
    /// on several threads: an op that a runtime keeps on one thread (an element-wise op too
    /// small to split) pays neither the fork-join nor the split, so its bound is the lower of
    /// the two views' times (see `analysis::analyze_prepared`). Not serialised.
    #[serde(skip)]
    pub single_thread: Option<Box<DeviceProfile>>,
}

/// Where `roofline probe` saves this machine's profile and `--device local` reads it:
/// `$XDG_CACHE_HOME/roofline/local.json` (or the platform's cache folder).
pub fn default_profile_path() -> Option<std::path::PathBuf> {
    dirs::cache_dir().map(|dir| dir.join("roofline").join("local.json"))
}

/// The name `roofline probe` gives the profile of a CPU measured on `threads` threads.
pub fn probed_name(model_name: &str, threads: u32) -> String {
    if threads == 1 {
        format!("{model_name} (1 thread)")
    } else {
        format!("{model_name} ({threads} threads)")
    }
}

/// Largest compute ceiling a profile may state: 10^17 FLOP/s (100 PFLOP/s), about five times the
/// fastest single accelerator's sparse low-precision peak (NVIDIA B200, FP4 with sparsity,
/// 20 PFLOP/s per its datasheet). A figure above it is a corrupt or hand-edited profile.
pub const MAX_PLAUSIBLE_FLOPS: f64 = 1e17;

/// Largest bandwidth a profile may state: 10^15 B/s (1 PB/s), above the aggregate register-file
/// and L1 bandwidth of any single device, let alone a memory level behind it.
pub const MAX_PLAUSIBLE_BYTES_PER_S: f64 = 1e15;

fn default_schema() -> u32 {
    PROFILE_SCHEMA_VERSION
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    // Causes are part of the messages, not `source`s: `{:#}` would print them twice.
    #[error("{}: {cause}", path.display())]
    Io {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: not a device profile: {cause}", path.display())]
    Parse {
        path: std::path::PathBuf,
        cause: serde_json::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid {
        path: std::path::PathBuf,
        reason: String,
    },
}

impl DeviceProfile {
    /// A probed CPU profile with these ceilings and probe record and nothing else, for tests.
    #[cfg(test)]
    pub(crate) fn probed_for_tests(
        memory: Vec<MemoryCeiling>,
        probe: Option<super::probe_record::ProbeRecord>,
    ) -> DeviceProfile {
        DeviceProfile {
            schema_version: 1,
            id: "t".into(),
            name: "t".into(),
            kind: DeviceKind::Cpu,
            source: ProfileSource::Probed,
            compute: vec![],
            memory,
            launch_overhead_s: 0.0,
            l2_bytes: None,
            launch_overhead_source: String::new(),
            sources: vec![],
            notes: String::new(),
            probe,
            calibration: None,
            single_thread: None,
        }
    }

    /// Peak compute at `precision`. Where several thread counts were measured, the largest one
    /// is the device's roof.
    pub fn peak_flops(&self, precision: Precision) -> Option<f64> {
        self.ceiling(precision).map(|c| c.flops_per_s)
    }

    pub fn ceiling(&self, precision: Precision) -> Option<&ComputeCeiling> {
        self.compute
            .iter()
            .filter(|c| c.precision == precision && c.flops_per_s > 0.0)
            .max_by_key(|c| c.threads.unwrap_or(u32::MAX))
    }

    /// The profile as seen by a run on `threads` threads: where ceilings were measured per
    /// thread count (probed profiles), keep for each precision and level the entry with the
    /// most threads not above `threads`; whole-device figures (no thread count) are kept.
    pub fn for_threads(&self, threads: u32) -> DeviceProfile {
        let mut out = self.clone();
        let best = |t: Option<u32>, others: &mut dyn Iterator<Item = Option<u32>>| -> bool {
            match t {
                None => true,
                Some(t) if t > threads => false,
                Some(t) => others.flatten().filter(|&o| o <= threads).all(|o| o <= t),
            }
        };
        out.compute = self
            .compute
            .iter()
            .filter(|c| {
                let mut peers = self
                    .compute
                    .iter()
                    .filter(|o| o.precision == c.precision)
                    .map(|o| o.threads);
                best(c.threads, &mut peers)
            })
            .cloned()
            .collect();
        out.memory = self
            .memory
            .iter()
            .filter(|m| {
                let mut peers = self
                    .memory
                    .iter()
                    .filter(|o| o.level == m.level)
                    .map(|o| o.threads);
                best(m.threads, &mut peers)
            })
            .cloned()
            .collect();
        // A precision or level measured only with more threads keeps its figure.
        for c in &self.compute {
            if !out.compute.iter().any(|o| o.precision == c.precision) {
                out.compute.push(c.clone());
            }
        }
        for m in &self.memory {
            if !out.memory.iter().any(|o| o.level == m.level) {
                out.memory.push(m.clone());
            }
        }
        // One thread runs its ops back to back with no fork-join: the fixed cost per op is the
        // probe's call figure, not the pool's fork-join (a 256-float Add ran in 0.12-0.2 µs
        // against a 0.38 µs 2-thread fork-join charged as its bound).
        if let Some(record) = &self.probe {
            let call_s = record.dispatch.call_s;
            if threads <= 1 && record.dispatch.threads > 1 && call_s > 0.0 && call_s.is_finite() {
                out.launch_overhead_s = call_s;
                out.launch_overhead_source = format!(
                    "one indirect call to an empty op on one thread ({:.1} ns): a one-thread run \
                     has no fork-join between ops",
                    call_s * 1e9
                );
            }
        }
        // A probed profile is named after the threads its roofs were measured on: once the
        // one-thread roofs are chosen, "(2 threads)" would misname them. Only the name the
        // probe gave is rewritten; a name edited by hand is the user's.
        if let Some(record) = &self.probe {
            let probed_as = record.cores.threads_used as u32;
            let used = out
                .memory_ceiling(MemoryLevel::Dram)
                .and_then(|m| m.threads)
                .or_else(|| out.compute.iter().filter_map(|c| c.threads).max());
            if let Some(used) = used {
                if self.name == probed_name(&record.cpu.model_name, probed_as) {
                    out.name = probed_name(&record.cpu.model_name, used);
                }
            }
        }
        // A profile already resolved for several threads (`compress` resolves it, then each
        // `advise` it runs resolves it again) has lost its one-thread ceilings: it hands on the
        // view it kept. The view's calibration is never read (the analysis takes the tables
        // of the profile it is given), so it is not copied.
        out.single_thread = None;
        if threads > 1 {
            out.single_thread = self.single_thread.clone().or_else(|| {
                self.compute.iter().any(|c| c.threads == Some(1)).then(|| {
                    let mut alone = self.for_threads(1);
                    alone.calibration = None;
                    Box::new(alone)
                })
            });
        }
        out
    }

    /// Bandwidth of a memory level, at the largest measured thread count.
    pub fn memory_ceiling(&self, level: MemoryLevel) -> Option<&MemoryCeiling> {
        self.memory
            .iter()
            .filter(|m| m.level == level && m.bytes_per_s > 0.0)
            .max_by_key(|m| m.threads.unwrap_or(u32::MAX))
    }

    /// Capacity of the largest cache level the profile states (the L3 of a probed CPU).
    pub fn largest_cache_bytes(&self) -> Option<u64> {
        self.memory
            .iter()
            .filter(|level| level.level != MemoryLevel::Dram)
            .filter_map(|level| level.capacity_bytes)
            .max()
    }

    /// Main-memory read bandwidth: the roof the analysis uses, since each op is modelled as
    /// streaming its tensors from the outermost level.
    pub fn dram_bandwidth(&self) -> Option<f64> {
        self.memory_ceiling(MemoryLevel::Dram)
            .map(|m| m.bytes_per_s)
    }

    /// Main-memory write bandwidth, where the profile states one apart from the read figure.
    pub fn dram_write_bandwidth(&self) -> Option<f64> {
        self.memory_ceiling(MemoryLevel::Dram)
            .and_then(|m| m.write_bytes_per_s)
    }

    /// Checks that the profile can drive a roofline: a DRAM roof and at least one compute roof,
    /// every figure finite and positive.
    pub fn validate(&self) -> Result<(), String> {
        if self.dram_bandwidth().is_none() {
            return Err("no DRAM bandwidth (memory entry with level \"dram\")".into());
        }
        if self.compute.is_empty() {
            return Err("no compute ceiling".into());
        }
        for c in &self.compute {
            for (what, value) in [
                ("", Some(c.flops_per_s)),
                (" (theoretical)", c.theoretical_flops_per_s),
            ] {
                let Some(value) = value else { continue };
                if !value.is_finite() || value <= 0.0 || value > MAX_PLAUSIBLE_FLOPS {
                    return Err(format!(
                        "compute ceiling {}{what} is {value:e} FLOP/s; a ceiling must be above 0 and at most {MAX_PLAUSIBLE_FLOPS:e} (no hardware is faster)",
                        c.precision
                    ));
                }
            }
        }
        for m in &self.memory {
            for (what, value) in [
                ("", Some(m.bytes_per_s)),
                (" (writes)", m.write_bytes_per_s),
            ] {
                let Some(value) = value else { continue };
                if !value.is_finite() || value <= 0.0 || value > MAX_PLAUSIBLE_BYTES_PER_S {
                    return Err(format!(
                        "memory ceiling {}{what} is {value:e} B/s; a ceiling must be above 0 and at most {MAX_PLAUSIBLE_BYTES_PER_S:e}",
                        m.level.name(),
                    ));
                }
            }
        }
        if !self.launch_overhead_s.is_finite()
            || self.launch_overhead_s < 0.0
            || self.launch_overhead_s > 1.0
        {
            return Err(format!(
                "launch_overhead_s is {}; it must be between 0 and 1 s",
                self.launch_overhead_s
            ));
        }
        Ok(())
    }

    pub fn load(path: &Path) -> Result<DeviceProfile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ProfileError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        let mut profile: DeviceProfile =
            serde_json::from_str(&text).map_err(|cause| ProfileError::Parse {
                path: path.to_path_buf(),
                cause,
            })?;
        if let Some(calibration) = profile.calibration.as_mut() {
            calibration.upgrade();
        }
        profile.validate().map_err(|reason| ProfileError::Invalid {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(profile)
    }

    /// Writes the profile atomically (temporary file and rename), so a concurrent reader such as
    /// `analyze --device local` never sees a half-written file.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let text = serde_json::to_string_pretty(self).map_err(|cause| ProfileError::Parse {
            path: path.to_path_buf(),
            cause,
        })?;
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent).map_err(|cause| ProfileError::Io {
                    path: parent.to_path_buf(),
                    cause,
                })?;
            }
        }
        crate::fsio::write_atomic(path, text.as_bytes()).map_err(|err| ProfileError::Invalid {
            path: path.to_path_buf(),
            reason: err.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_device_is_a_valid_profile() {
        for entry in crate::device::catalog() {
            let profile = entry.to_profile();
            assert_eq!(profile.validate(), Ok(()), "{}", entry.id);
        }
    }

    #[test]
    fn implausible_and_zero_ceilings_are_refused() {
        let good = crate::device::catalog()[0].to_profile();
        let mut fast = good.clone();
        fast.compute[0].flops_per_s = 1e30;
        assert!(fast
            .validate()
            .unwrap_err()
            .contains("no hardware is faster"));
        let mut zero = good.clone();
        zero.compute[0].flops_per_s = 0.0;
        assert!(zero.validate().unwrap_err().contains("above 0"));
        let mut wide = good.clone();
        wide.memory[0].bytes_per_s = 1e20;
        assert!(wide.validate().is_err());
        let mut slow_launch = good;
        slow_launch.launch_overhead_s = 5.0;
        assert!(slow_launch.validate().is_err());
    }

    #[test]
    fn the_largest_cache_is_the_largest_level_short_of_dram() {
        let mut profile = crate::device::catalog()[0].to_profile();
        let level = |level, capacity_bytes| MemoryCeiling {
            level,
            bytes_per_s: 1e11,
            write_bytes_per_s: None,
            capacity_bytes,
            threads: Some(1),
            source: String::new(),
        };
        profile.memory = vec![level(MemoryLevel::Dram, Some(16 << 30))];
        assert_eq!(profile.largest_cache_bytes(), None);
        profile.memory.push(level(MemoryLevel::L2, Some(1 << 20)));
        profile.memory.push(level(MemoryLevel::L3, Some(32 << 20)));
        profile.memory.push(level(MemoryLevel::L1, None));
        assert_eq!(profile.largest_cache_bytes(), Some(32 << 20));
    }

    fn ceiling(precision: Precision, threads: Option<u32>, flops: f64) -> ComputeCeiling {
        ComputeCeiling {
            precision,
            flops_per_s: flops,
            threads,
            theoretical_flops_per_s: None,
            source: String::new(),
        }
    }

    #[test]
    fn for_threads_picks_the_matching_measurement() {
        let profile = DeviceProfile {
            schema_version: PROFILE_SCHEMA_VERSION,
            id: "t".into(),
            name: "t".into(),
            kind: DeviceKind::Cpu,
            source: ProfileSource::Probed,
            compute: vec![
                ceiling(Precision::Fp32, Some(1), 100.0),
                ceiling(Precision::Fp32, Some(2), 190.0),
                ceiling(Precision::Int8, Some(2), 800.0),
            ],
            memory: vec![MemoryCeiling {
                level: MemoryLevel::Dram,
                bytes_per_s: 30.0,
                write_bytes_per_s: Some(20.0),
                capacity_bytes: None,
                threads: Some(1),
                source: String::new(),
            }],
            launch_overhead_s: 0.0,
            launch_overhead_source: String::new(),
            l2_bytes: None,
            sources: vec![],
            notes: String::new(),
            probe: None,
            calibration: None,
            single_thread: None,
        };
        assert_eq!(profile.peak_flops(Precision::Fp32), Some(190.0));
        let one = profile.for_threads(1);
        assert_eq!(one.peak_flops(Precision::Fp32), Some(100.0));
        // Measured only with 2 threads: kept rather than dropped.
        assert_eq!(one.peak_flops(Precision::Int8), Some(800.0));
        assert_eq!(
            profile.for_threads(4).peak_flops(Precision::Fp32),
            Some(190.0)
        );
        assert_eq!(one.dram_bandwidth(), Some(30.0));
        assert_eq!(one.dram_write_bandwidth(), Some(20.0));
    }

    fn dram(threads: u32, read: f64) -> MemoryCeiling {
        MemoryCeiling {
            level: MemoryLevel::Dram,
            bytes_per_s: read,
            write_bytes_per_s: None,
            capacity_bytes: None,
            threads: Some(threads),
            source: String::new(),
        }
    }

    #[test]
    fn a_probed_name_follows_the_threads_of_the_roofs_used() {
        let mut record = crate::device::probe_record::ProbeRecord::default();
        record.cpu.model_name = "AMD EPYC".into();
        record.cores.threads_used = 2;
        let profile = DeviceProfile {
            schema_version: PROFILE_SCHEMA_VERSION,
            id: "local".into(),
            name: probed_name("AMD EPYC", 2),
            kind: DeviceKind::Cpu,
            source: ProfileSource::Probed,
            compute: vec![
                ceiling(Precision::Fp32, Some(1), 100.0),
                ceiling(Precision::Fp32, Some(2), 190.0),
            ],
            memory: vec![dram(1, 30.0), dram(2, 35.0)],
            launch_overhead_s: 0.0,
            launch_overhead_source: String::new(),
            l2_bytes: None,
            sources: vec![],
            notes: String::new(),
            probe: Some(record),
            calibration: None,
            single_thread: None,
        };
        assert_eq!(profile.name, "AMD EPYC (2 threads)");
        assert_eq!(profile.for_threads(1).name, "AMD EPYC (1 thread)");
        assert_eq!(profile.for_threads(2).name, "AMD EPYC (2 threads)");
        assert_eq!(profile.for_threads(8).name, "AMD EPYC (2 threads)");
        // A name the user chose stays.
        let renamed = DeviceProfile {
            name: "build box".into(),
            ..profile
        };
        assert_eq!(renamed.for_threads(1).name, "build box");
        // One thread pays a call per op, more threads the pool's fork-join.
        let mut forked = renamed.clone();
        forked.launch_overhead_s = 4e-7;
        if let Some(record) = forked.probe.as_mut() {
            record.dispatch.threads = 2;
            record.dispatch.call_s = 2e-9;
        }
        assert_eq!(forked.for_threads(1).launch_overhead_s, 2e-9);
        assert_eq!(forked.for_threads(2).launch_overhead_s, 4e-7);
    }

    #[test]
    fn a_write_rate_is_checked_like_a_read_rate() {
        let mut profile = crate::device::catalog()[0].to_profile();
        assert_eq!(profile.dram_write_bandwidth(), None);
        profile.memory[0].write_bytes_per_s = Some(0.0);
        assert!(profile.validate().unwrap_err().contains("(writes)"));
        profile.memory[0].write_bytes_per_s = Some(100e9);
        assert_eq!(profile.validate(), Ok(()));
    }
}
