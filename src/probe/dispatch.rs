//! Per-op dispatch cost on the CPU, the `launch_overhead_s` of a probed profile.
//!
//! A CPU runtime pays per op at least a call, and when an op is split over threads, a
//! fork-join: waking the workers and waiting for the last one. Both are measured with the
//! probe's pinned threads: with spinning workers (how tuned runtimes keep their pools between
//! ops) and with workers sleeping on the OS (futex wake-ups, far slower, kept for the record).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::bandwidth::BandwidthKernels;
use super::compute::ComputeKernel;
use super::exchange::{self, ExchangeEffort};
use super::plateau::median_sorted;
use super::record::DispatchRecord;
use super::team::run_team;
use super::ProbeError;

/// A spin that lasts this long means the other vCPU was taken away; the measurement stops.
const SPIN_GIVE_UP: Duration = Duration::from_millis(200);
const STOP: u64 = u64::MAX;

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(median_sorted(&values))
}

/// Round trips of an empty job through spinning workers, seconds each (median).
fn spin_fork_join(cpus: &[usize], rounds: u64) -> Result<Option<f64>, ProbeError> {
    let generation = AtomicU64::new(0);
    let finished = AtomicU64::new(0);
    let helpers = cpus.len() as u64 - 1;
    let (results, _) = run_team(cpus, |worker| {
        worker.sync();
        if worker.index == 0 {
            let mut times = Vec::with_capacity(rounds as usize);
            for round in 1..=rounds {
                let start = Instant::now();
                generation.store(round, Ordering::Release);
                while finished.load(Ordering::Acquire) < round * helpers {
                    if start.elapsed() > SPIN_GIVE_UP {
                        generation.store(STOP, Ordering::Release);
                        return None;
                    }
                    std::hint::spin_loop();
                }
                times.push(start.elapsed().as_secs_f64());
            }
            generation.store(STOP, Ordering::Release);
            median(times)
        } else {
            let mut seen = 0;
            let mut waiting_since = Instant::now();
            loop {
                let current = generation.load(Ordering::Acquire);
                if current == STOP {
                    return None;
                }
                if current != seen {
                    seen = current;
                    finished.fetch_add(1, Ordering::AcqRel);
                    waiting_since = Instant::now();
                } else if waiting_since.elapsed() > SPIN_GIVE_UP {
                    return None;
                }
                std::hint::spin_loop();
            }
        }
    })?;
    Ok(results.into_iter().next().flatten())
}

/// Round trips through a sleeping barrier (fork and join), seconds each (median).
fn parked_fork_join(cpus: &[usize], rounds: u64) -> Result<Option<f64>, ProbeError> {
    let barrier = Barrier::new(cpus.len());
    let (results, _) = run_team(cpus, |worker| {
        let mut times = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let start = Instant::now();
            barrier.wait();
            barrier.wait();
            if worker.index == 0 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        median(times)
    })?;
    Ok(results.into_iter().next().flatten())
}

/// One indirect call of an empty op, seconds.
fn call_cost() -> f64 {
    let calls = 1_000_000u32;
    let op: &dyn Fn(u32) -> u32 = &|x| x;
    let op = std::hint::black_box(op);
    let start = Instant::now();
    let mut acc = 0u32;
    for i in 0..calls {
        acc = acc.wrapping_add(std::hint::black_box(op)(i));
    }
    std::hint::black_box(acc);
    start.elapsed().as_secs_f64() / f64::from(calls)
}

pub fn measure(
    cpus: &[usize],
    rounds: u64,
    kernels: &BandwidthKernels,
    fma: Option<&ComputeKernel>,
) -> Result<DispatchRecord, ProbeError> {
    let call_s = call_cost();
    let threads = cpus.len() as u32;
    if cpus.len() < 2 {
        return Ok(DispatchRecord {
            spin_fork_join_s: None,
            parked_fork_join_s: None,
            call_s,
            threads,
            chosen: "one thread: an op is dispatched by a function call".into(),
            exchange: None,
        });
    }
    let spin = spin_fork_join(cpus, rounds)?;
    let parked = parked_fork_join(cpus, rounds / 4 + 1)?;
    let chosen = match spin {
        Some(_) => format!(
            "fork-join of an empty op over {threads} pinned spinning threads (median of \
             {rounds}), as a runtime with a spinning thread pool pays between ops"
        ),
        None => "spinning fork-join could not be measured (a vCPU was descheduled); the \
                 parked (futex) fork-join is used"
            .into(),
    };
    Ok(DispatchRecord {
        spin_fork_join_s: spin,
        parked_fork_join_s: parked,
        call_s,
        threads,
        chosen,
        exchange: exchange::measure(kernels, fma, cpus, ExchangeEffort::PROBE)?,
    })
}

impl DispatchRecord {
    /// The figure used as the profile's `launch_overhead_s`.
    pub fn launch_overhead_s(&self) -> f64 {
        self.spin_fork_join_s
            .or(self.parked_fork_join_s)
            .unwrap_or(self.call_s)
    }
}
