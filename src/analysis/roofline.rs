//! The roofline estimate: a pure function from an op's cost and a device to its attainable rate,
//! its bound and its predicted time.
//!
//! work      = FLOPs + transcendental evaluations (see the counting conventions in `ops`)
//! intensity = work / bytes moved
//! attainable = min(peak(precision), intensity × DRAM bandwidth)
//! time      = max(work / peak, bytes / bandwidth) + launch overhead
//! bound     = the larger of the two terms, or `overhead` when the fixed per-op cost exceeds both.

use serde::{Deserialize, Serialize};

use super::ops::OpCost;
use crate::device::{DeviceProfile, Precision};

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
}

impl Roof {
    /// Resolves the roof of `device` at `precision`.
    pub fn of(device: &DeviceProfile, precision: Precision) -> Result<Roof, String> {
        let peak_flops = device.peak_flops(precision).ok_or_else(|| {
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
        })?;
        let bandwidth_bytes_per_s = device
            .dram_bandwidth()
            .ok_or_else(|| format!("device `{}` has no DRAM bandwidth", device.id))?;
        Ok(Roof {
            peak_flops,
            bandwidth_bytes_per_s,
            launch_overhead_s: device.launch_overhead_s,
            vector_peak_flops: device.peak_flops(Precision::Fp32).unwrap_or(peak_flops),
        })
    }

    /// Intensity at which the memory and compute roofs meet (FLOP/byte).
    pub fn ridge_point(&self) -> f64 {
        self.peak_flops / self.bandwidth_bytes_per_s
    }
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
    let attainable_flops = match intensity {
        Some(i) => op_peak.min(i * roof.bandwidth_bytes_per_s),
        None => op_peak,
    };
    let memory_s = bytes / roof.bandwidth_bytes_per_s;
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
    use crate::analysis::ops::Traffic;

    fn roof() -> Roof {
        // A round device: 10 TFLOP/s, 500 GB/s, ridge at 20 FLOP/byte, 2 us launch.
        Roof {
            peak_flops: 10e12,
            bandwidth_bytes_per_s: 500e9,
            launch_overhead_s: 2e-6,
            vector_peak_flops: 10e12,
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
}
