//! Core-to-core data exchange: a cache line's round trip between two cores, and how fast one
//! core reads a buffer another core has just written.
//!
//! When a model runs on several threads, every op reads activations that the previous op's
//! other threads wrote, so this rate sits under every multi-thread op. It depends on where
//! the cores are: in one core complex (shared L3) a line moves in tens of nanoseconds; across
//! AMD CCDs, Intel sockets or sub-NUMA clusters it takes several times longer. A VM's vCPUs
//! can be moved between complexes by the host while the guest sees nothing (measured on a
//! 2-vCPU Zen 4 guest: a 60 ns round trip and 70 GB/s most of the time, then spells of
//! 350 ns and 25 GB/s in which MobileNetV2 on 2 threads ran 8.3 ms instead of 4.5, while a
//! GEMM moved by 3%). The probe records the figure; `bench` and `calibrate` measure it again
//! around their multi-thread runs and say when it has moved, because the calibrated
//! multi-thread times only hold for the placement they were measured in.
//!
//! A fast exchange is not always the good placement: a host can also put both vCPUs on one
//! physical core's SMT siblings, where the exchange is fastest of all (the same L1 and L2:
//! 26-28 ns and 114 GB/s on the Zen 4 guest, the rate of its own L2) while the two threads
//! share one core's vector units, so compute-bound work gets no faster with the second
//! thread. The check therefore also runs an FMA block on both CPUs at once and on each alone:
//! the per-thread rate together ÷ alone is about 1 on two cores and about 0.5 on one core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::bandwidth::BandwidthKernels;
use super::buffer::AlignedBuffer;
use super::compute::ComputeKernel;
use super::plateau::median_sorted;
use super::team::run_team;
use super::ProbeError;
use crate::device::probe_record::{BandwidthKernel, ExchangeRecord};

/// A wait this long means the other vCPU was taken away; the measurement stops.
const GIVE_UP: Duration = Duration::from_millis(200);
/// Larger than any L1d, smaller than any L2 the tool runs on: the reader's loads miss its own
/// caches and find the lines in the writer's.
const HANDOFF_BYTES: usize = 128 * 1024;
/// Round trips timed together (one sample).
const TRIPS_PER_SAMPLE: u64 = 64;

/// Effort of one measurement.
#[derive(Clone, Copy, Debug)]
pub struct ExchangeEffort {
    /// Samples of `TRIPS_PER_SAMPLE` round trips per pair.
    pub round_trip_samples: u64,
    /// Buffer handoffs per pair (each timed on its reader).
    pub handoffs: u64,
    /// Pairs at most (the first CPU with others spread over the list).
    pub max_pairs: usize,
    /// Samples of the shared-core check (each an FMA block on either CPU alone, then on both).
    pub core_share_samples: u64,
}

impl ExchangeEffort {
    /// The probe's measurement (about 10 ms a pair).
    pub const PROBE: ExchangeEffort = ExchangeEffort {
        round_trip_samples: 400,
        handoffs: 200,
        max_pairs: 8,
        core_share_samples: 40,
    };
    /// The check `bench` and `calibrate` run around their multi-thread runs (about 3 ms, the shared-core check included).
    pub const CHECK: ExchangeEffort = ExchangeEffort {
        round_trip_samples: 60,
        handoffs: 40,
        max_pairs: 4,
        core_share_samples: 12,
    };
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(median_sorted(&values))
}

/// Spins until `flag` holds `wanted`; false when the other side never came.
fn wait_for(flag: &AtomicU64, wanted: u64) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) != wanted {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && start.elapsed() > GIVE_UP {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Median round trip of one cache line between the two CPUs, seconds.
fn round_trip(pair: [usize; 2], samples: u64) -> Result<Option<f64>, ProbeError> {
    let flag = AtomicU64::new(0);
    let (results, _) = run_team(&pair, |worker| {
        worker.sync();
        let trips = samples * TRIPS_PER_SAMPLE;
        if worker.index == 0 {
            let mut times = Vec::with_capacity(samples as usize);
            let mut start = Instant::now();
            for trip in 1..=trips {
                flag.store(2 * trip - 1, Ordering::Release);
                if !wait_for(&flag, 2 * trip) {
                    flag.store(u64::MAX, Ordering::Release);
                    return None;
                }
                if trip % TRIPS_PER_SAMPLE == 0 {
                    times.push(start.elapsed().as_secs_f64() / TRIPS_PER_SAMPLE as f64);
                    start = Instant::now();
                }
            }
            median(times)
        } else {
            for trip in 1..=trips {
                if !wait_for(&flag, 2 * trip - 1) {
                    return None;
                }
                flag.store(2 * trip, Ordering::Release);
            }
            None
        }
    })?;
    Ok(results.into_iter().next().flatten())
}

/// Median rate at which one CPU reads a buffer the other has just written, GB/s.
fn handoff_read(
    kernels: &BandwidthKernels,
    pair: [usize; 2],
    handoffs: u64,
) -> Result<Option<f64>, ProbeError> {
    let mut buffer = AlignedBuffer::new(HANDOFF_BYTES + 4096)?;
    buffer.prefault_prefix(HANDOFF_BYTES + 4096);
    // The two threads take turns on the buffer (the turn counter orders every access), and
    // each makes its reference only for its turn.
    let shared = &mut buffer as *mut AlignedBuffer as usize;
    let turn = AtomicU64::new(0);
    let (results, _) = run_team(&pair, |worker| {
        let mut times = Vec::with_capacity(handoffs as usize);
        worker.sync();
        for round in 0..handoffs {
            // Even turns are worker 0's, odd turns worker 1's: read what the other wrote
            // (timed), then write it back for the other.
            let mine = 2 * round + worker.index as u64;
            if !wait_for(&turn, mine) {
                turn.store(u64::MAX, Ordering::Release);
                return None;
            }
            {
                // SAFETY: it is this thread's turn (acquired above, released below), so this is
                // the only reference to the buffer until the store; the buffer outlives the
                // team (scoped threads).
                let buffer = unsafe { &mut *(shared as *mut AlignedBuffer) };
                if mine > 0 {
                    let start = Instant::now();
                    kernels.run(BandwidthKernel::Read, buffer, HANDOFF_BYTES, 1);
                    times.push(start.elapsed().as_secs_f64());
                }
                kernels.run(BandwidthKernel::Write, buffer, HANDOFF_BYTES, 1);
            }
            turn.store(mine + 1, Ordering::Release);
        }
        median(times).map(|seconds| HANDOFF_BYTES as f64 / seconds / 1e9)
    })?;
    // Both directions' medians: the slower one is the pair's figure.
    Ok(results.into_iter().flatten().reduce(f64::min))
}

/// Loop iterations of one FMA block: about 16 µs with a 16-chain FMA kernel at one vector FMA
/// per cycle and 4 GHz, long against the barrier's skew, short against a host's placement
/// spells.
const CORE_SHARE_ITERATIONS: u64 = 4096;

/// Per-thread rate of an FMA block run on both CPUs at once ÷ run on each alone (the lower of
/// the two threads' medians): about 1 on two physical cores, about 0.5 on SMT siblings.
fn core_share(
    kernel: &ComputeKernel,
    pair: [usize; 2],
    samples: u64,
) -> Result<Option<f64>, ProbeError> {
    let (results, _) = run_team(&pair, |worker| {
        let mut alone = Vec::with_capacity(samples as usize);
        let mut together = Vec::with_capacity(samples as usize);
        let block = || {
            let start = Instant::now();
            kernel.run(CORE_SHARE_ITERATIONS);
            start.elapsed().as_secs_f64()
        };
        // Warm the vector units (their power-up on first use) before anything is timed.
        block();
        for _ in 0..samples {
            // Each worker alone while the other waits at the barrier (its spin-wait pauses,
            // which leaves a sibling's pipes free), then both together.
            for turn in 0..2 {
                worker.sync();
                if worker.index == turn {
                    alone.push(block());
                }
            }
            worker.sync();
            together.push(block());
        }
        worker.sync();
        Some(median(alone)? / median(together)?)
    })?;
    Ok(results.into_iter().flatten().reduce(f64::min))
}

/// Pairs measured: the first CPU with up to `max_pairs` others spread over the list (the
/// executor's threads exchange with every other, and the farthest pair sets the pace).
fn pairs(cpus: &[usize], max_pairs: usize) -> Vec<[usize; 2]> {
    let others = cpus.len().saturating_sub(1);
    if others == 0 || max_pairs == 0 {
        return Vec::new();
    }
    let count = others.min(max_pairs);
    let mut chosen: Vec<[usize; 2]> = (0..count)
        .map(|i| [cpus[0], cpus[1 + i * others / count]])
        .collect();
    chosen.dedup();
    chosen
}

/// Measures the exchange between `cpus[0]` and the others; `None` with one CPU or when a vCPU
/// was taken away during the measurement. With `fma` (an FMA kernel of this CPU) each pair's
/// shared-core check runs too.
pub fn measure(
    kernels: &BandwidthKernels,
    fma: Option<&ComputeKernel>,
    cpus: &[usize],
    effort: ExchangeEffort,
) -> Result<Option<ExchangeRecord>, ProbeError> {
    let mut worst: Option<ExchangeRecord> = None;
    for pair in pairs(cpus, effort.max_pairs) {
        let (Some(round_trip_s), Some(read_gbs)) = (
            round_trip(pair, effort.round_trip_samples)?,
            handoff_read(kernels, pair, effort.handoffs)?,
        ) else {
            return Ok(None);
        };
        let compute_share = match fma {
            Some(kernel) => core_share(kernel, pair, effort.core_share_samples)?,
            None => None,
        };
        let record = worst.get_or_insert_with(|| ExchangeRecord {
            round_trip_s,
            read_gbs,
            slowest_pair: pair.to_vec(),
            buffer_bytes: HANDOFF_BYTES as u64,
            pairs: 0,
            compute_share: None,
        });
        record.pairs += 1;
        if let Some(share) = compute_share {
            record.compute_share = Some(record.compute_share.map_or(share, |s| s.min(share)));
        }
        if round_trip_s > record.round_trip_s {
            record.round_trip_s = round_trip_s;
            record.slowest_pair = pair.to_vec();
        }
        record.read_gbs = record.read_gbs.min(read_gbs);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine with two usable CPUs the check measures both figures, inside physical
    /// limits: a round trip between 5 ns and 100 µs, a read rate between 0.1 and 2000 GB/s.
    #[test]
    fn the_check_measures_a_round_trip_and_a_read_rate() {
        let started = Instant::now();
        let measured = crate::probe::exchange_now(2);
        println!("exchange check: {:?}", started.elapsed());
        let Some(record) = measured else {
            assert!(
                super::super::cpu::usable_cores().affinity_cpus.len() < 2,
                "two CPUs are usable, so the exchange must be measured"
            );
            return;
        };
        assert!((5e-9..1e-4).contains(&record.round_trip_s), "{record:?}");
        assert!((0.1..2000.0).contains(&record.read_gbs), "{record:?}");
        // Two threads on one core at worst halve each other's FMA rate; a noisy host may slow
        // either side, never make the pair faster than alone by half.
        let share = record
            .compute_share
            .expect("an FMA kernel exists on every target");
        assert!((0.2..1.5).contains(&share), "{record:?}");
        assert_eq!(record.pairs, 1);
        assert_eq!(record.buffer_bytes, HANDOFF_BYTES as u64);
    }

    /// Hand-derived: the Zen 4 guest's two placements (60 ns and 70 GB/s; 350 ns and 25 GB/s)
    /// are √(5.83 × 2.8) = 4.04 apart, a quiet check that wandered (99 ns, 66 GB/s) √(1.65 ×
    /// 1.06) = 1.32.
    #[test]
    fn slowdown_is_the_geometric_mean_of_both_ratios() {
        let record = ExchangeRecord::with_figures;
        let near = record(60.0, 70.0);
        assert!((record(350.0, 25.0).slowdown_against(&near) - 4.041).abs() < 1e-3);
        assert!((record(99.0, 66.0).slowdown_against(&near) - 1.3229).abs() < 1e-3);
        assert!((near.slowdown_against(&near) - 1.0).abs() < 1e-12);
        assert!(near.slowdown_against(&record(350.0, 25.0)) < 0.25);
    }

    #[test]
    fn pairs_spread_over_the_cpu_list() {
        assert!(pairs(&[0], 8).is_empty());
        assert_eq!(pairs(&[3, 5], 8), vec![[3, 5]]);
        let spread = pairs(&(0..64).collect::<Vec<_>>(), 4);
        assert_eq!(spread, vec![[0, 1], [0, 16], [0, 32], [0, 48]]);
        assert_eq!(pairs(&[0, 1, 2], 8), vec![[0, 1], [0, 2]]);
    }
}
