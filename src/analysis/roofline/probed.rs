//! The roofs a probed profile states beyond its level figures: the measured bandwidth curves
//! (`RateCurve`), the rate stores reach beside streaming loads (`streaming_write_rate`) and
//! the cache levels with their capacities (`cache_roofs`).

use super::CacheRoof;
use crate::device::probe_record::{BandwidthKernel, FigureMethod};
use crate::device::{DeviceProfile, MemoryCeiling, MemoryLevel};

/// A bandwidth curve measured by the probe: bytes/s by working set, interpolated log-linearly
/// between the sweep's points and held flat past its ends. Each point is the best rate measured
/// at its working set or any larger one, so the curve never rises with the working set.
///
/// Fixed capacity, so that [`super::Roof`] stays `Copy`: a sweep's 30-60 points fit, a longer one
/// keeps every other point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateCurve {
    /// (working set in bytes, bytes/s), working sets ascending; `len` of them used.
    points: [(u64, f64); RateCurve::CAPACITY],
    len: usize,
}

impl RateCurve {
    const CAPACITY: usize = 64;

    /// The curve of a sweep's points; `None` with fewer than two usable points.
    pub fn new(points: impl IntoIterator<Item = (u64, f64)>) -> Option<RateCurve> {
        let mut points: Vec<(u64, f64)> = points
            .into_iter()
            .filter(|&(bytes, rate)| bytes > 0 && rate.is_finite() && rate > 0.0)
            .collect();
        points.sort_by_key(|&(bytes, _)| bytes);
        points.dedup_by_key(|&mut (bytes, _)| bytes);
        // The envelope from the largest working set down, before any thinning.
        let mut best = 0.0f64;
        for point in points.iter_mut().rev() {
            best = best.max(point.1);
            point.1 = best;
        }
        while points.len() > Self::CAPACITY {
            let last = points[points.len() - 1];
            points = points.into_iter().step_by(2).collect();
            if points.last() != Some(&last) {
                points.push(last);
            }
        }
        if points.len() < 2 {
            return None;
        }
        let mut curve = RateCurve {
            points: [(0, 0.0); Self::CAPACITY],
            len: points.len(),
        };
        curve.points[..points.len()].copy_from_slice(&points);
        Some(curve)
    }

    /// The rate at a working set of `bytes`.
    pub fn at(&self, bytes: u64) -> f64 {
        let points = &self.points[..self.len];
        let (first, last) = (points[0], points[points.len() - 1]);
        if bytes <= first.0 {
            return first.1;
        }
        if bytes >= last.0 {
            return last.1;
        }
        let upper = points.partition_point(|&(b, _)| b < bytes);
        let ((b0, r0), (b1, r1)) = (points[upper - 1], points[upper]);
        let t = ((bytes as f64).ln() - (b0 as f64).ln()) / ((b1 as f64).ln() - (b0 as f64).ln());
        r0 + t * (r1 - r0)
    }
}

/// The probe's read and write sweeps of `device` at the thread count of its memory ceilings;
/// each write point at the rate stores reach beside streaming loads at its working set
/// ([`streaming_write_rate`], from the copy and triad sweeps where the profile has them).
pub(super) fn sweep_curves(device: &DeviceProfile) -> Option<(RateCurve, RateCurve)> {
    let threads = device.memory_ceiling(MemoryLevel::Dram)?.threads?;
    let probe = device.probe.as_ref()?;
    let sweep = |kernel: BandwidthKernel| {
        probe
            .sweeps
            .iter()
            .find(|s| s.kernel == kernel && s.threads == threads)
    };
    let curve = |kernel: BandwidthKernel| {
        RateCurve::new(
            sweep(kernel)?
                .points
                .iter()
                .map(|p| (p.working_set_bytes, p.bytes_per_s)),
        )
    };
    // Past the start of the DRAM figure's own range the read curve is that figure: a DRAM
    // sweep point scatters by ±15% on a shared host (this Zen 4 guest, 1 thread: 25.9-32.2
    // GB/s from 80 to 362 MiB), and the envelope carried one fast point to every smaller working
    // set, so a 205 MB working set was charged 32.2 GB/s and a 528 MB one the figure's 27.9.
    // The ceiling's figure, not the sweep's: past the curve's end the roof is the ceiling (which
    // the profile may have raised to the 1-thread figure where more threads read less). The
    // write curve keeps its sweep's envelope: stores past the caches are charged at the
    // ceiling's write rate wherever the curves do not reach (`ceiling_write_rate`), and no
    // model of the validation set writes activations of DRAM size.
    let dram_read = device.memory_ceiling(MemoryLevel::Dram)?.bytes_per_s;
    let dram_from = probe
        .memory_levels
        .iter()
        .find(|l| {
            l.level == MemoryLevel::Dram
                && l.kernel == BandwidthKernel::Read
                && l.threads == threads
                && l.method == FigureMethod::Sweep
        })
        .map(|l| l.working_set_lo_bytes);
    let read = RateCurve::new(sweep(BandwidthKernel::Read)?.points.iter().map(|p| {
        let bytes = p.working_set_bytes;
        match dram_from {
            Some(from) if bytes >= from => (bytes, dram_read),
            _ => (bytes, p.bytes_per_s),
        }
    }))?;
    let mixed: Vec<(f64, RateCurve)> = MIXED_KERNELS
        .iter()
        .filter_map(|&(kernel, loads)| Some((loads, curve(kernel)?)))
        .collect();
    let write = RateCurve::new(sweep(BandwidthKernel::Write)?.points.iter().map(|p| {
        let bytes = p.working_set_bytes;
        let beside: Vec<(f64, f64)> = mixed
            .iter()
            .map(|(loads, curve)| (*loads, curve.at(bytes)))
            .collect();
        (
            bytes,
            streaming_write_rate(read.at(bytes), p.bytes_per_s, &beside),
        )
    }))?;
    Some((read, write))
}

/// The probe's kernels that load and store, with the bytes each loads per byte it stores
/// (their figures count every byte loaded and stored).
const MIXED_KERNELS: [(BandwidthKernel, f64); 2] =
    [(BandwidthKernel::Copy, 1.0), (BandwidthKernel::Triad, 2.0)];

/// The rate bytes stored are charged at, where loads stream beside the stores at `read`:
/// the plain write kernel's `write`, or the rate a mixed kernel (`(loads per byte stored,
/// its rate over all bytes)`) implies once its loads are charged at `read`, whichever is
/// faster; an implied rate never raises the figure past `read` (a kernel whose stores look
/// free beside its loads says the two overlap, not that stores outrun loads).
pub fn streaming_write_rate(read: f64, write: f64, mixed: &[(f64, f64)]) -> f64 {
    let implied = mixed
        .iter()
        .filter(|&&(_, rate)| rate > 0.0 && rate.is_finite() && read > 0.0)
        .map(|&(loads, rate)| {
            let store_seconds = (loads + 1.0) / rate - loads / read;
            if store_seconds > 0.0 {
                (1.0 / store_seconds).min(read)
            } else {
                read
            }
        })
        .fold(0.0f64, f64::max);
    write.max(implied)
}

/// The copy and triad figures of the probe at `level` and `threads`, as
/// [`streaming_write_rate`] takes them.
fn mixed_figures(
    device: &DeviceProfile,
    level: MemoryLevel,
    threads: Option<u32>,
) -> Vec<(f64, f64)> {
    let Some(probe) = device.probe.as_ref() else {
        return Vec::new();
    };
    MIXED_KERNELS
        .iter()
        .filter_map(|&(kernel, loads)| {
            probe
                .memory_levels
                .iter()
                .filter(|l| l.level == level && l.kernel == kernel && Some(l.threads) == threads)
                .map(|l| l.bytes_per_s)
                .max_by(f64::total_cmp)
                .map(|rate| (loads, rate))
        })
        .collect()
}

/// The write rate a memory ceiling is charged at (see [`streaming_write_rate`]); `None`
/// where it states no write rate of its own.
pub(super) fn ceiling_write_rate(device: &DeviceProfile, ceiling: &MemoryCeiling) -> Option<f64> {
    let write = ceiling.write_bytes_per_s?;
    Some(streaming_write_rate(
        ceiling.bytes_per_s,
        write,
        &mixed_figures(device, ceiling.level, ceiling.threads),
    ))
}

/// The cache levels of `device` with a capacity and a measured read rate: per-core levels
/// (L1, L2) hold their capacity once per thread of the ceiling's thread count, L3 once.
pub(super) fn cache_roofs(device: &DeviceProfile) -> [Option<CacheRoof>; 3] {
    let mut caches = [None; 3];
    for (slot, level) in [MemoryLevel::L1, MemoryLevel::L2, MemoryLevel::L3]
        .into_iter()
        .enumerate()
    {
        let Some(ceiling) = device.memory_ceiling(level) else {
            continue;
        };
        let Some(capacity) = ceiling.capacity_bytes.filter(|&c| c > 0) else {
            continue;
        };
        let copies = match level {
            MemoryLevel::L3 => 1,
            _ => u64::from(ceiling.threads.unwrap_or(1).max(1)),
        };
        caches[slot] = Some(CacheRoof {
            level,
            capacity_bytes: capacity.saturating_mul(copies),
            read_bytes_per_s: ceiling.bytes_per_s,
            write_bytes_per_s: ceiling_write_rate(device, ceiling).unwrap_or(ceiling.bytes_per_s),
        });
    }
    caches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1e-9), "{a} vs {b}");
    }

    /// Hand-derived: an Emerald Rapids guest's L2 (read 101.5, write 35.3, copy 59.0, triad
    /// 71.4 GB/s): copy leaves 2/59 - 1/101.5 s per GB for the stores (41.6 GB/s), triad
    /// 3/71.4 - 2/101.5 (44.8 GB/s), the faster is charged. A Zen 4's DRAM (read 31.0, write
    /// 27.5, copy 31.4): copy implies 31.8 GB/s, held at the read rate. A copy slower than the
    /// sum of its parts leaves the write kernel's figure.
    #[test]
    fn stores_beside_loads_at_the_rate_copy_and_triad_imply() {
        let gb = 1e9;
        let l2 = streaming_write_rate(101.5 * gb, 35.3 * gb, &[(1.0, 59.0 * gb), (2.0, 71.4 * gb)]);
        assert!((l2 / gb - 44.8).abs() < 0.1, "{l2}");
        let dram = streaming_write_rate(31.0 * gb, 27.5 * gb, &[(1.0, 31.4 * gb)]);
        assert_eq!(dram, 31.0 * gb);
        assert_eq!(streaming_write_rate(100.0, 50.0, &[(1.0, 40.0)]), 50.0);
        assert_eq!(streaming_write_rate(100.0, 50.0, &[]), 50.0);
        // Stores that look free beside the loads: the read rate, not infinity.
        assert_eq!(streaming_write_rate(100.0, 50.0, &[(2.0, 160.0)]), 100.0);
    }

    /// The Zen 4 guest's 1-thread read sweep past its 32 MiB L3 (GB/s by MiB), with its DRAM
    /// figure 27.9 taken from 128 MiB up: past there the curve is the figure (the 32.2 point at
    /// 256 MiB no longer lifts 128-256 MiB), below it the sweep, L3's partial hits included.
    #[test]
    fn the_read_curve_is_the_dram_figure_from_where_that_figure_was_read() {
        use crate::device::probe_record::{
            BandwidthSweep, LevelBandwidth, ProbeRecord, SweepPoint,
        };
        use crate::device::MemoryCeiling;
        let mib = 1u64 << 20;
        let sweep = |kernel, points: &[(u64, f64)]| BandwidthSweep {
            kernel,
            threads: 1,
            points: points
                .iter()
                .map(|&(size, gbs)| SweepPoint {
                    working_set_bytes: size * mib,
                    bytes_per_s: gbs * 1e9,
                    ..SweepPoint::default()
                })
                .collect(),
            ..BandwidthSweep::default()
        };
        let read = [
            (16, 77.4),
            (64, 34.7),
            (128, 30.9),
            (203, 27.2),
            (256, 32.2),
            (362, 27.9),
        ];
        let record = ProbeRecord {
            sweeps: vec![
                sweep(BandwidthKernel::Read, &read),
                sweep(BandwidthKernel::Write, &[(16, 70.0), (362, 26.9)]),
            ],
            memory_levels: vec![LevelBandwidth {
                level: MemoryLevel::Dram,
                kernel: BandwidthKernel::Read,
                threads: 1,
                bytes_per_s: 27.9e9,
                working_set_lo_bytes: 128 * mib,
                working_set_hi_bytes: 362 * mib,
                spread: 0.07,
                flags: vec![],
                method: FigureMethod::Sweep,
            }],
            ..ProbeRecord::default()
        };
        let dram = MemoryCeiling {
            level: MemoryLevel::Dram,
            bytes_per_s: 27.9e9,
            write_bytes_per_s: Some(26.9e9),
            capacity_bytes: Some(16 << 30),
            threads: Some(1),
            source: String::new(),
        };
        let mut device = DeviceProfile::probed_for_tests(vec![dram], Some(record));
        let (curve, _) = sweep_curves(&device).expect("curves");
        for size in [128, 160, 203, 256, 362, 1024] {
            close(curve.at(size * mib), 27.9e9);
        }
        close(curve.at(64 * mib), 34.7e9);
        close(curve.at(16 * mib), 77.4e9);
        // A DRAM figure read off a flushed buffer is not the sweep's: the sweep stays.
        let record = device.probe.as_mut().unwrap();
        record.memory_levels[0].method = FigureMethod::Flushed;
        let (curve, _) = sweep_curves(&device).expect("curves");
        close(curve.at(160 * mib), 32.2e9);
    }

    #[test]
    fn a_rate_curve_interpolates_log_linearly_and_never_rises() {
        // 100 GB/s to 8 MB, a noisy dip at 16 MB below the 32 MB point, 30 GB/s at 128 MB.
        let curve = RateCurve::new([
            (8_000_000, 100e9),
            (16_000_000, 50e9),
            (32_000_000, 60e9),
            (128_000_000, 30e9),
        ])
        .unwrap();
        // Flat past the ends.
        close(curve.at(1_000), 100e9);
        close(curve.at(1_000_000_000), 30e9);
        // The dip is lifted to the best rate at a larger working set (60), so the roof stays
        // a bound; halfway in log between 8 and 16 MB: 80.
        close(curve.at(16_000_000), 60e9);
        assert!((curve.at(11_313_708) / 80e9 - 1.0).abs() < 1e-6);
        // Halfway in log between 32 and 128 MB (64 MB): 45.
        close(curve.at(64_000_000), 45e9);
        assert!(RateCurve::new([(8_000_000, 1e9)]).is_none());
        // A long sweep is thinned but keeps both ends.
        let long = RateCurve::new((1..200u64).map(|i| (i * 1000, 1e9 + (200 - i) as f64))).unwrap();
        close(long.at(1_000), 1e9 + 199.0);
        close(long.at(199_000), 1e9 + 1.0);
    }
}
