//! The roofline estimate: a pure function from an op's cost and a device to its attainable rate,
//! its bound and its predicted time.
//!
//! work      = FLOPs + transcendental evaluations (see the counting conventions in `ops`)
//! intensity = work / bytes moved
//! memory    = bytes read / read bandwidth + bytes written / write bandwidth
//! attainable = min(peak(precision), intensity × bytes moved / memory)
//! time      = max(work / peak, memory) + launch overhead
//! bound     = the larger of the two terms, or `overhead` when the fixed per-op cost exceeds both.
//!
//! # Memory traffic by direction
//! Bytes read (`weights_read + act_read`) are charged at the DRAM ceiling's read rate
//! (`bytes_per_s`), bytes written (`act_written`) at its write rate (`write_bytes_per_s`). A
//! probed CPU profile measures both with the kernels inference code runs: ordinary loads for
//! reads, ordinary stores for writes (never the non-temporal stores a compiler rarely emits
//! for an activation). The two terms add up rather than overlap: reads and writes share the
//! memory bus. The write rate charged is what stores reach while loads stream beside them
//! ([`streaming_write_rate`]): the write kernel's, or faster where the probe's copy and triad
//! kernels (one and two bytes loaded per byte stored) imply it after their loads at the read
//! rate, never above the read rate. On a Zen 4 the sum with the plain write kernel reproduced
//! a copy; on an Emerald Rapids guest a write-only kernel ran at 35 GB/s in L2 and 4.8 GB/s
//! from DRAM while its triad (8.9 GB/s) implied stores at the read rate, and element-wise ops
//! beat the sum by 12-20%. A ceiling without
//! a write rate (datasheet figures, hand-written and older profiles) charges writes at the
//! read rate, and the time is then `bytes / bandwidth` exactly as before the split.
//! The ridge point and the chart's memory roof use the read rate: an op whose writes are
//! slower sits below that line, at its own attainable rate.
//!
//! # Memory traffic by level (cache-aware roofline)
//! Where the device states cache levels with a capacity and measured rates (probed CPU
//! profiles), each tensor's traffic is charged at the level it can live in between the ops of
//! repeated inference:
//! - an op's activations (the tensors it reads that another op wrote, and those it writes) at
//!   the smallest level whose capacity holds all of them at once (`act_read + act_written`,
//!   less the graph inputs it reads); per-core levels (L1, L2) hold `capacity × threads`, the
//!   shared L3 its capacity;
//! - weights, and the graph inputs an op reads (`Traffic::input_read`: written before the run,
//!   like a decoder's KV cache by the step before), at the smallest level that holds what a
//!   run cycles through: the model's weights plus its inputs and outputs (every run streams
//!   all of them through the caches, so a level smaller than the set keeps none of it for the
//!   next run), else DRAM. A decoder's cache counts: at a 1023-entry cache llama-tiny's 8 MB
//!   of weights share the caches with 4 MB of past and present;
//! - activations larger than every level: the share the largest level holds (its capacity ÷
//!   their bytes: the most recently written part) at that level's rates, the rest at DRAM;
//!   weights larger than every level at DRAM (a run sweeps them cyclically, and a cyclic sweep
//!   over a set larger than an LRU cache finds none of it there).
//!
//! Each term uses that level's read and write rates. The placement is the most favourable one
//! the capacities allow, which keeps the figure a bound: a kernel cannot beat it by running from
//! a level faster than the one charged. Devices without cache levels (datasheet entries, older
//! profiles) charge everything at DRAM, bit for bit as before.
//!
//! # Past L2: the measured curve
//! A probed profile keeps the probe's working-set sweeps. Where it does, traffic that no
//! per-core level holds (activations past L2, the weights and inputs between runs) is charged at
//! the rate the sweep measured for a working set of that size ([`RateCurve`]), reads on the read
//! sweep and writes on the write sweep, rather than at a step from the L3 plateau to DRAM at the
//! nominal L3 capacity. On the 2-vCPU Zen 4 guest the read sweep holds its L3 plateau (99 GB/s)
//! only to 8-13 MB of the nominal 32 MiB (other tenants share the L3) and falls to 50 GB/s at
//! 32 MiB: PP-OCR det's 640×640 element-wise ops (10-20 MB each) ran 3-5× their L3-rate bound.
//! The curve is each size's best rate at that working set or a larger one (non-increasing), so
//! a noisy dip in the sweep never lowers the roof: the figure stays a bound. From the working
//! set where the DRAM figure was read on, the read curve is that figure (a fast DRAM point would
//! otherwise lift every smaller size: see `probed::sweep_curves`). The per-core levels
//! still hold their capacity's share of such activations (what the op before left there), which
//! is charged at their rates: the sweep reads a buffer that no producer just wrote, and at 2
//! threads element-wise ops whose halves stayed in each core's L2 ran up to 25% under a bound
//! charged wholly on the curves.

use serde::{Deserialize, Serialize};

use super::ops::{OpCost, Traffic};
use crate::device::{DeviceProfile, MemoryLevel, Precision};

mod probed;
use probed::{cache_roofs, ceiling_write_rate, sweep_curves};
pub use probed::{streaming_write_rate, RateCurve};

/// One cache level's roof at the thread count of the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheRoof {
    pub level: MemoryLevel,
    /// Bytes the threads together keep at this level.
    pub capacity_bytes: u64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
}

fn no_caches(caches: &[Option<CacheRoof>; 3]) -> bool {
    caches.iter().all(Option::is_none)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    Compute,
    Memory,
    /// The fixed per-op cost (kernel launch) dominates.
    Overhead,
    /// No kernel runs (a view such as Reshape).
    None,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Compute => "compute",
            Bound::Memory => "memory",
            Bound::Overhead => "overhead",
            Bound::None => "none",
        }
    }
}

/// The ceilings one analysis runs against, resolved once.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roof {
    pub peak_flops: f64,
    pub bandwidth_bytes_per_s: f64,
    pub launch_overhead_s: f64,
    /// The device's fp32 peak, the rate of an op's [`OpCost::vector_flops`] (0 in reports
    /// written before the field existed: treated as the op's own peak).
    #[serde(default)]
    pub vector_peak_flops: f64,
    /// DRAM write bandwidth; 0 = the read rate `bandwidth_bytes_per_s` (devices that state one
    /// figure, reports written before the field existed). Left out of reports when 0, so
    /// reports on such devices keep their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub write_bandwidth_bytes_per_s: f64,
    /// L1, L2 and L3 where the device states them (capacity and measured rates), smallest
    /// first; none on datasheet devices.
    #[serde(default, skip_serializing_if = "no_caches")]
    pub caches: [Option<CacheRoof>; 3],
    /// The level the model's weights stay in between runs (`None`: DRAM). Set per model by
    /// [`Roof::place_weights`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_level: Option<MemoryLevel>,
    /// The bytes a run cycles through the caches (the model's weights, its inputs and its
    /// outputs): the working set the weights' and the inputs' rate is read at on the curves.
    #[serde(skip)]
    pub cycled_bytes: u64,
    /// The probe's read and write sweeps at this roof's thread count (probed profiles only).
    #[serde(skip)]
    pub curves: Option<(RateCurve, RateCurve)>,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

impl Roof {
    /// Resolves the roof of `device` at `precision`.
    pub fn of(device: &DeviceProfile, precision: Precision) -> Result<Roof, String> {
        let peak_flops = peak_of(device, precision)?;
        let bandwidth_bytes_per_s = device
            .dram_bandwidth()
            .ok_or_else(|| format!("device `{}` has no DRAM bandwidth", device.id))?;
        Ok(Roof {
            peak_flops,
            bandwidth_bytes_per_s,
            launch_overhead_s: device.launch_overhead_s,
            vector_peak_flops: device.peak_flops(Precision::Fp32).unwrap_or(peak_flops),
            write_bandwidth_bytes_per_s: device
                .memory_ceiling(MemoryLevel::Dram)
                .and_then(|dram| ceiling_write_rate(device, dram))
                .unwrap_or(0.0),
            caches: cache_roofs(device),
            weights_level: None,
            cycled_bytes: 0,
            curves: sweep_curves(device),
        })
    }

    /// This roof at another compute precision of the same `device` (an int8 or bf16 op in an
    /// fp32 analysis): only the peaks change; memory levels, curves and the weights' placement
    /// are the same device's, so they are kept rather than derived again per op.
    pub fn at_precision(
        &self,
        device: &DeviceProfile,
        precision: Precision,
    ) -> Result<Roof, String> {
        let peak_flops = peak_of(device, precision)?;
        Ok(Roof {
            peak_flops,
            vector_peak_flops: device.peak_flops(Precision::Fp32).unwrap_or(peak_flops),
            ..*self
        })
    }

    /// Places the model's weights at the smallest cache level that holds what a run cycles
    /// through (`footprint_bytes`: the weights, the graph's inputs and outputs), or DRAM.
    pub fn place_weights(&mut self, footprint_bytes: u64) {
        self.weights_level = self.level_holding(footprint_bytes).map(|c| c.level);
        self.cycled_bytes = footprint_bytes;
    }

    /// True when `level` (`None`: DRAM) lies past the per-core levels, where the measured
    /// curves take over from the level's plateau figure.
    fn past_l2(level: Option<&CacheRoof>) -> bool {
        !matches!(
            level.map(|c| c.level),
            Some(MemoryLevel::L1 | MemoryLevel::L2)
        )
    }

    /// The cache levels an op's activations and weights are charged at (`None`: DRAM).
    fn placement(&self, traffic: &Traffic) -> (Option<&CacheRoof>, Option<&CacheRoof>) {
        let activations = self.level_holding(Self::activation_bytes(traffic));
        let weights = self
            .weights_level
            .and_then(|level| self.caches.iter().flatten().find(|c| c.level == level));
        (activations, weights)
    }

    /// Where an op's activations and weights are charged, as level numbers (1-3 for L1-L3,
    /// 4 for DRAM; weights 0 when the op reads none): the calibration lookup matches ops on
    /// them, since a measured/bound ratio means something else against a cache bound than
    /// against a DRAM one.
    pub fn level_numbers(&self, traffic: &Traffic) -> (u8, u8) {
        let number = |cache: Option<&CacheRoof>| match cache.map(|c| c.level) {
            Some(MemoryLevel::L1) => 1,
            Some(MemoryLevel::L2) => 2,
            Some(MemoryLevel::L3) => 3,
            _ => 4,
        };
        if no_caches(&self.caches) {
            return (4, if traffic.weights_read > 0 { 4 } else { 0 });
        }
        let (activations, weights) = self.placement(traffic);
        let weights = if traffic.weights_read > 0 {
            number(weights)
        } else {
            0
        };
        (number(activations), weights)
    }

    /// The bytes an op moves that the op before it left behind: its activations less the graph
    /// inputs it reads (charged with the weights).
    fn activation_bytes(traffic: &Traffic) -> u64 {
        traffic.act_read.saturating_sub(traffic.input_read) + traffic.act_written
    }

    /// The smallest cache level that holds `bytes`.
    fn level_holding(&self, bytes: u64) -> Option<&CacheRoof> {
        self.caches
            .iter()
            .flatten()
            .find(|cache| bytes <= cache.capacity_bytes)
    }

    /// Intensity at which the memory and compute roofs meet (FLOP/byte), at the read rate.
    pub fn ridge_point(&self) -> f64 {
        self.peak_flops / self.bandwidth_bytes_per_s
    }

    /// The rate written bytes are charged at.
    pub fn write_bandwidth(&self) -> f64 {
        if self.write_bandwidth_bytes_per_s > 0.0 {
            self.write_bandwidth_bytes_per_s
        } else {
            self.bandwidth_bytes_per_s
        }
    }

    /// Seconds to move `traffic`: reads at the read rate, writes at the write rate, one after
    /// the other; and the bandwidth that amounts to over all its bytes.
    pub fn memory_time(&self, traffic: &Traffic) -> (f64, f64) {
        if !no_caches(&self.caches) {
            return self.memory_time_by_level(traffic);
        }
        let read_bw = self.bandwidth_bytes_per_s;
        let write_bw = self.write_bandwidth();
        let bytes = traffic.total() as f64;
        if write_bw == read_bw {
            // One rate: the single division keeps every figure bit for bit what it was before
            // writes had their own rate (two divisions can round differently).
            return (bytes / read_bw, read_bw);
        }
        let read = (traffic.weights_read + traffic.act_read) as f64;
        let written = traffic.act_written as f64;
        let seconds = read / read_bw + written / write_bw;
        let effective = if seconds > 0.0 {
            bytes / seconds
        } else {
            read_bw
        };
        (seconds, effective)
    }

    /// [`Roof::memory_time`] with each tensor class at the level it can live in (see the
    /// module docs).
    fn memory_time_by_level(&self, traffic: &Traffic) -> (f64, f64) {
        let dram = (self.bandwidth_bytes_per_s, self.write_bandwidth());
        let rates = |cache: Option<&CacheRoof>| {
            cache.map_or(dram, |c| (c.read_bytes_per_s, c.write_bytes_per_s))
        };
        let (act_cache, weights_cache) = self.placement(traffic);
        let act_read = traffic.act_read.saturating_sub(traffic.input_read);
        let activation_time = |cache: Option<&CacheRoof>| {
            let (read_bw, write_bw) = rates(cache);
            act_read as f64 / read_bw + traffic.act_written as f64 / write_bw
        };
        let activations = Self::activation_bytes(traffic);
        let largest = self.caches.iter().flatten().last();
        let act_s = match (act_cache, largest, &self.curves) {
            (cache, _, Some((read, write))) if Self::past_l2(cache) && activations > 0 => {
                let past_l2 = act_read as f64 / read.at(activations)
                    + traffic.act_written as f64 / write.at(activations);
                // The per-core levels still hold their capacity's worth (the part the op
                // before left there): at their rates, the rest on the curves. Charging all of
                // it on the curves let element-wise ops at 2 threads beat their bound by up to
                // 25% (each core's half of the producer's output stays in its own L2).
                match self.caches[..2].iter().flatten().last() {
                    Some(per_core) => {
                        let held = (per_core.capacity_bytes as f64 / activations as f64).min(1.0);
                        held * activation_time(Some(per_core)) + (1.0 - held) * past_l2
                    }
                    None => past_l2,
                }
            }
            (Some(cache), _, _) => activation_time(Some(cache)),
            // Larger than every level: the part the largest one holds (the most recently
            // written) can still come from it, the rest from DRAM.
            (None, Some(largest), _) if activations > 0 => {
                let cached = largest.capacity_bytes as f64 / activations as f64;
                cached * activation_time(Some(largest)) + (1.0 - cached) * activation_time(None)
            }
            (None, _, _) => activation_time(None),
        };
        let weights_bw = match &self.curves {
            Some((read, _)) if Self::past_l2(weights_cache) && self.cycled_bytes > 0 => {
                read.at(self.cycled_bytes)
            }
            _ => rates(weights_cache).0,
        };
        let cycled = traffic.weights_read + traffic.input_read.min(traffic.act_read);
        let seconds = act_s + cycled as f64 / weights_bw;
        let (act_read_bw, _) = rates(act_cache);
        let bytes = traffic.total() as f64;
        let effective = if seconds > 0.0 {
            bytes / seconds
        } else {
            act_read_bw
        };
        (seconds, effective)
    }
}

/// The peak of `device` at `precision`, or an error naming the precisions it has.
fn peak_of(device: &DeviceProfile, precision: Precision) -> Result<f64, String> {
    device.peak_flops(precision).ok_or_else(|| {
        let available: Vec<String> = device
            .compute
            .iter()
            .map(|c| c.precision.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        format!(
            "device `{}` has no {precision} compute ceiling (available: {})",
            device.id,
            available.join(", ")
        )
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// FLOP per byte; `None` when the op moves no bytes.
    pub intensity: Option<f64>,
    pub attainable_flops: f64,
    pub bound: Bound,
    pub compute_s: f64,
    pub memory_s: f64,
    pub overhead_s: f64,
    pub predicted_s: f64,
}

impl Estimate {
    /// No kernel runs: no work, no time.
    pub const NONE: Estimate = Estimate {
        intensity: None,
        attainable_flops: 0.0,
        bound: Bound::None,
        compute_s: 0.0,
        memory_s: 0.0,
        overhead_s: 0.0,
        predicted_s: 0.0,
    };
}

/// Estimates one op against a roof.
pub fn estimate(cost: &OpCost, roof: &Roof) -> Estimate {
    if cost.is_view {
        return Estimate::NONE;
    }
    let work = (cost.flops + cost.transcendental) as f64;
    let bytes = cost.bytes.total() as f64;
    let intensity = (bytes > 0.0).then(|| work / bytes);
    let vector_work = (cost.vector_flops as f64).min(work);
    let vector_peak = if roof.vector_peak_flops > 0.0 {
        roof.vector_peak_flops
    } else {
        roof.peak_flops
    };
    let compute_s = (work - vector_work) / roof.peak_flops + vector_work / vector_peak;
    // The op's own compute roof: its work over its compute time (the device peak unless part
    // of the work runs at the vector rate).
    let op_peak = if compute_s > 0.0 {
        work / compute_s
    } else {
        roof.peak_flops
    };
    let (memory_s, bandwidth) = roof.memory_time(&cost.bytes);
    let attainable_flops = match intensity {
        Some(i) => op_peak.min(i * bandwidth),
        None => op_peak,
    };
    let overhead_s = roof.launch_overhead_s;
    let bound = if overhead_s > compute_s.max(memory_s) {
        Bound::Overhead
    } else if compute_s >= memory_s {
        Bound::Compute
    } else {
        Bound::Memory
    };
    Estimate {
        intensity,
        attainable_flops,
        bound,
        compute_s,
        memory_s,
        overhead_s,
        predicted_s: compute_s.max(memory_s) + overhead_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roof() -> Roof {
        // A round device: 10 TFLOP/s, 500 GB/s, ridge at 20 FLOP/byte, 2 us launch.
        Roof {
            peak_flops: 10e12,
            bandwidth_bytes_per_s: 500e9,
            launch_overhead_s: 2e-6,
            vector_peak_flops: 10e12,
            write_bandwidth_bytes_per_s: 0.0,
            caches: [None; 3],
            weights_level: None,
            cycled_bytes: 0,
            curves: None,
        }
    }

    fn cost(flops: u64, bytes: u64) -> OpCost {
        OpCost {
            flops,
            bytes: Traffic {
                act_read: bytes,
                ..Traffic::default()
            },
            ..OpCost::default()
        }
    }

    #[test]
    fn ridge_point_is_peak_over_bandwidth() {
        assert_eq!(roof().ridge_point(), 20.0);
    }

    #[test]
    fn compute_bound_above_the_ridge() {
        // 1 GFLOP over 10 MB: intensity 100 > 20.
        let e = estimate(&cost(1_000_000_000, 10_000_000), &roof());
        assert_eq!(e.bound, Bound::Compute);
        assert_eq!(e.intensity, Some(100.0));
        assert_eq!(e.attainable_flops, 10e12);
        assert!((e.predicted_s - (1e-4 + 2e-6)).abs() < 1e-12);
    }

    #[test]
    fn vector_work_runs_at_the_fp32_rate() {
        // An int8 op on a device with a 4x faster int8 peak: 1 GOP of dot products at 40 T/s
        // plus 0.5 GFLOP of dequantization at the 10 TFLOP/s fp32 rate.
        let int8_roof = Roof {
            peak_flops: 40e12,
            ..roof()
        };
        let mut c = cost(1_500_000_000, 10_000_000);
        c.vector_flops = 500_000_000;
        let e = estimate(&c, &int8_roof);
        assert!((e.compute_s - (1e9 / 40e12 + 0.5e9 / 10e12)).abs() < 1e-15);
        assert_eq!(e.bound, Bound::Compute);
        // Its own compute roof: 1.5 GOP over 75 us = 20 T/s, half the int8 peak.
        assert!((e.attainable_flops - 20e12).abs() < 1e3);
    }

    #[test]
    fn memory_bound_below_the_ridge() {
        // 10 MFLOP over 100 MB: intensity 0.1, attainable 0.1 x 500 GB/s = 50 GFLOP/s.
        let e = estimate(&cost(10_000_000, 100_000_000), &roof());
        assert_eq!(e.bound, Bound::Memory);
        assert!((e.attainable_flops - 50e9).abs() < 1.0);
        assert!((e.memory_s - 2e-4).abs() < 1e-12);
    }

    #[test]
    fn tiny_ops_are_overhead_bound() {
        let e = estimate(&cost(1000, 4000), &roof());
        assert_eq!(e.bound, Bound::Overhead);
    }

    #[test]
    fn views_cost_nothing() {
        let e = estimate(&OpCost::view(), &roof());
        assert_eq!(e.bound, Bound::None);
        assert_eq!(e.predicted_s, 0.0);
    }

    fn read_write(read: u64, written: u64) -> OpCost {
        OpCost {
            bytes: Traffic {
                act_read: read,
                act_written: written,
                ..Traffic::default()
            },
            ..OpCost::default()
        }
    }

    #[test]
    fn reads_and_writes_are_charged_at_their_own_rates() {
        // 1 MB read at 10 GB/s = 0.1 ms, 1 MB written at 5 GB/s = 0.2 ms: 0.3 ms in all.
        let split = Roof {
            bandwidth_bytes_per_s: 10e9,
            write_bandwidth_bytes_per_s: 5e9,
            launch_overhead_s: 0.0,
            ..roof()
        };
        let e = estimate(&read_write(1_000_000, 1_000_000), &split);
        assert!((e.memory_s - 3e-4).abs() < 1e-15, "{}", e.memory_s);
        assert_eq!(e.bound, Bound::Memory);
        // Weights count as reads too: 2 MB of weights alone take 0.2 ms.
        let weights = OpCost {
            bytes: Traffic {
                weights_read: 2_000_000,
                ..Traffic::default()
            },
            ..OpCost::default()
        };
        assert!((estimate(&weights, &split).memory_s - 2e-4).abs() < 1e-15);
        // 0.6 MFLOP over those 2 MB: intensity 0.3, moved at 2 MB / 0.3 ms = 6.67 GB/s, so
        // attainable = 0.3 × 6.67 GB/s = 2 GFLOP/s (work over memory time).
        let mut c = read_write(1_000_000, 1_000_000);
        c.flops = 600_000;
        let e = estimate(&c, &split);
        assert!(
            (e.attainable_flops - 2e9).abs() < 1.0,
            "{}",
            e.attainable_flops
        );
        // The ridge point stays at the read rate.
        assert_eq!(split.ridge_point(), 10e12 / 10e9);
    }

    #[test]
    fn one_rate_when_the_device_states_no_write_rate() {
        // 0 means "the read rate": the same time as the single-rate formula, bit for bit.
        let c = read_write(14_080, 65_536);
        let e = estimate(&c, &roof());
        assert_eq!(e.memory_s, (14_080.0 + 65_536.0) / 500e9);
        let same = Roof {
            write_bandwidth_bytes_per_s: 500e9,
            ..roof()
        };
        assert_eq!(estimate(&c, &same), e);
        // And a report without the field reads as one rate.
        let json = serde_json::to_string(&roof()).expect("serialises");
        assert!(!json.contains("write_bandwidth"), "{json}");
        let back: Roof = serde_json::from_str(&json).expect("parses");
        assert_eq!(back.write_bandwidth(), 500e9);
    }

    #[test]
    fn the_roof_of_a_device_takes_its_write_rate() {
        let mut device = crate::device::catalog()[0].to_profile();
        let read = device.memory[0].bytes_per_s;
        let roof = Roof::of(&device, Precision::Fp32).expect("catalogue roof");
        assert_eq!(roof.write_bandwidth_bytes_per_s, 0.0);
        device.memory[0].write_bytes_per_s = Some(read / 2.0);
        let roof = Roof::of(&device, Precision::Fp32).expect("roof");
        assert_eq!(roof.bandwidth_bytes_per_s, read);
        assert_eq!(roof.write_bandwidth(), read / 2.0);
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    /// DRAM 10/5 GB/s read/write; L2 of 1 MB per core at 100/50 GB/s on 2 threads (2 MB);
    /// L3 of 8 MB at 40/20 GB/s.
    fn cached_roof() -> Roof {
        Roof {
            peak_flops: 1e12,
            bandwidth_bytes_per_s: 10e9,
            launch_overhead_s: 0.0,
            vector_peak_flops: 1e12,
            write_bandwidth_bytes_per_s: 5e9,
            caches: [
                None,
                Some(CacheRoof {
                    level: MemoryLevel::L2,
                    capacity_bytes: 2_000_000,
                    read_bytes_per_s: 100e9,
                    write_bytes_per_s: 50e9,
                }),
                Some(CacheRoof {
                    level: MemoryLevel::L3,
                    capacity_bytes: 8_000_000,
                    read_bytes_per_s: 40e9,
                    write_bytes_per_s: 20e9,
                }),
            ],
            weights_level: None,
            cycled_bytes: 0,
            curves: None,
        }
    }

    fn traffic(act_read: u64, act_written: u64, weights_read: u64) -> Traffic {
        Traffic {
            act_read,
            act_written,
            weights_read,
            input_read: 0,
        }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1e-9), "{a} vs {b}");
    }

    #[test]
    fn activations_that_fit_l2_are_charged_at_l2() {
        // 1 MB read + 0.5 MB written = 1.5 MB ≤ 2 MB: 1e6/100e9 + 0.5e6/50e9 = 10 µs + 10 µs.
        let (seconds, _) = cached_roof().memory_time(&traffic(1_000_000, 500_000, 0));
        close(seconds, 20e-6);
    }

    #[test]
    fn activations_past_l2_go_to_l3_then_dram() {
        // 3 MB + 1 MB = 4 MB: L3, 3e6/40e9 + 1e6/20e9 = 75 + 50 µs.
        let (seconds, _) = cached_roof().memory_time(&traffic(3_000_000, 1_000_000, 0));
        close(seconds, 125e-6);
        // 8 MB + 2 MB = 10 MB > 8 MB: 80% from L3 (8e6/40e9 + 2e6/20e9 = 0.3 ms) and 20% from
        // DRAM (8e6/10e9 + 2e6/5e9 = 1.2 ms): 0.24 + 0.24 = 0.48 ms.
        let (seconds, _) = cached_roof().memory_time(&traffic(8_000_000, 2_000_000, 0));
        close(seconds, 0.48e-3);
    }

    #[test]
    fn traffic_past_l2_is_charged_on_the_measured_curves() {
        let mut roof = cached_roof();
        // Read curve 40 GB/s to 4 MB falling to 10 GB/s at 16 MB; writes at half.
        let read = RateCurve::new([(4_000_000, 40e9), (16_000_000, 10e9)]).unwrap();
        let write = RateCurve::new([(4_000_000, 20e9), (16_000_000, 5e9)]).unwrap();
        roof.curves = Some((read, write));
        // 1 MB fits L2: its plateau figures as before (0.5 MB read at 100 + 0.5 MB at 50).
        let (seconds, _) = roof.memory_time(&traffic(500_000, 500_000, 0));
        close(seconds, 0.5e6 / 100e9 + 0.5e6 / 50e9);
        // 8 MB past L2, inside the nominal L3: the quarter L2 holds (2 of 8 MB) at its 100/50
        // GB/s, the rest on the curves at 8 MB (halfway in log between 4 and 16 MB: 25 and
        // 12.5 GB/s), not at L3's 40/20.
        let (seconds, _) = roof.memory_time(&traffic(4_000_000, 4_000_000, 0));
        close(
            seconds,
            0.25 * (4e6 / 100e9 + 4e6 / 50e9) + 0.75 * (4e6 / 25e9 + 4e6 / 12.5e9),
        );
        // Weights placed in L3 (5 MB) stream at the curve's 5 MB rate.
        roof.place_weights(5_000_000);
        let rate = read.at(5_000_000);
        let (seconds, _) = roof.memory_time(&traffic(0, 0, 1_000_000));
        close(seconds, 1e6 / rate);
    }

    #[test]
    fn weights_stay_in_the_level_that_holds_the_whole_model() {
        let mut roof = cached_roof();
        // A 5 MB model: its weights stay in L3 between runs; 1 MB of them at 40 GB/s = 25 µs,
        // on top of 0.1 MB + 0.1 MB of activations in L2 (1 µs + 2 µs).
        roof.place_weights(5_000_000);
        assert_eq!(roof.weights_level, Some(MemoryLevel::L3));
        let (seconds, _) = roof.memory_time(&traffic(100_000, 100_000, 1_000_000));
        close(seconds, 28e-6);
        // A 100 MB model: every run streams its weights from DRAM (100 µs for the same 1 MB).
        roof.place_weights(100_000_000);
        assert_eq!(roof.weights_level, None);
        let (seconds, _) = roof.memory_time(&traffic(100_000, 100_000, 1_000_000));
        close(seconds, 103e-6);
    }

    /// Graph inputs an op reads (a decoder's past cache) are charged with the weights, at the
    /// level the run's footprint fits, not at the level of the op's own working set.
    #[test]
    fn graph_inputs_are_charged_with_the_weights() {
        let mut roof = cached_roof();
        // 0.1 MB read from the op before, 0.4 MB of graph input, 0.1 MB written: the op's own
        // activations (0.2 MB) stay in L2 (100/50 GB/s: 1 + 2 µs).
        let mut cache_read = traffic(500_000, 100_000, 0);
        cache_read.input_read = 400_000;
        // A 5 MB run: the input comes from L3 at 40 GB/s (10 µs).
        roof.place_weights(5_000_000);
        let (seconds, _) = roof.memory_time(&cache_read);
        close(seconds, 13e-6);
        // A 100 MB run: from DRAM at 10 GB/s (40 µs), as the weights would.
        roof.place_weights(100_000_000);
        let (seconds, _) = roof.memory_time(&cache_read);
        close(seconds, 43e-6);
        // Without the split all 0.6 MB sits in L2: 5 + 2 µs.
        cache_read.input_read = 0;
        let (seconds, _) = roof.memory_time(&cache_read);
        close(seconds, 7e-6);
    }

    #[test]
    fn level_numbers_follow_the_placement() {
        let mut roof = cached_roof();
        roof.place_weights(5_000_000);
        assert_eq!(roof.level_numbers(&traffic(100_000, 100_000, 0)), (2, 0));
        assert_eq!(roof.level_numbers(&traffic(3_000_000, 0, 1_000)), (3, 3));
        roof.place_weights(100_000_000);
        assert_eq!(roof.level_numbers(&traffic(9_000_000, 0, 1_000)), (4, 4));
        roof.caches = [None; 3];
        assert_eq!(roof.level_numbers(&traffic(1, 1, 1)), (4, 4));
    }

    #[test]
    fn per_core_levels_hold_a_copy_per_thread_and_l3_one() {
        use crate::device::MemoryCeiling;
        let ceiling = |level, capacity| MemoryCeiling {
            level,
            bytes_per_s: 50e9,
            write_bytes_per_s: None,
            capacity_bytes: Some(capacity),
            threads: Some(4),
            source: String::new(),
        };
        let profile = DeviceProfile::probed_for_tests(
            vec![
                ceiling(MemoryLevel::L2, 1 << 20),
                ceiling(MemoryLevel::L3, 32 << 20),
            ],
            None,
        );
        let caches = cache_roofs(&profile);
        assert!(caches[0].is_none());
        assert_eq!(caches[1].unwrap().capacity_bytes, 4 << 20);
        assert_eq!(caches[2].unwrap().capacity_bytes, 32 << 20);
        assert_eq!(caches[1].unwrap().write_bytes_per_s, 50e9);
    }
}
