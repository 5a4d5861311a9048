//! Sustained core clock: a chain of dependent register adds, timed against the monotonic clock.
//!
//! Each add needs the previous result, so the chain retires one add per cycle whatever the
//! core's width: adds per second = cycles per second. The adds take a register operand, not an
//! immediate, because some cores (Intel Golden Cove and later) fold chains of small-immediate
//! adds at rename and would run them faster than one per cycle. The TSC is not used: on the
//! development machine it ticks at 2.6 GHz while the cores run at about 4.1 GHz.

use std::time::Instant;

use super::record::{ClockRecord, ClockStats};
use super::team::{run_team, Worker};
use super::ProbeError;

/// Adds per loop iteration of the chain.
const ADDS_PER_ITERATION: u64 = 16;

/// Runs the dependent add chain for `iterations` × 16 adds. Returns false where no chain is
/// implemented for this architecture.
fn add_chain(iterations: u64) -> bool {
    let iterations = iterations.max(1);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: register-only arithmetic on the operands declared here; no memory access.
        unsafe {
            std::arch::asm!(
                "2:",
                "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
                "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
                "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
                "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
                "dec {n}",
                "jnz 2b",
                acc = inout(reg) 0u64 => _,
                one = in(reg) 1u64,
                n = inout(reg) iterations => _,
                options(nomem, nostack),
            );
        }
        true
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: register-only arithmetic on the operands declared here; no memory access.
        unsafe {
            std::arch::asm!(
                "2:",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "add {acc}, {acc}, {one}", "add {acc}, {acc}, {one}",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                acc = inout(reg) 0u64 => _,
                one = in(reg) 1u64,
                n = inout(reg) iterations => _,
                options(nomem, nostack),
            );
        }
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = iterations;
        false
    }
}

/// Clock samples of one thread, taken in step with the rest of the team.
pub fn sample_clock(worker: &Worker, samples: usize, sample_s: f64) -> Option<ClockStats> {
    let iterations = sized_iterations(1 << 14, 1 << 36, sample_s, add_chain)?;
    let mut rates = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        worker.sync();
        let start = Instant::now();
        add_chain(iterations);
        let seconds = start.elapsed().as_secs_f64().max(1e-9);
        rates.push((iterations * ADDS_PER_ITERATION) as f64 / seconds);
    }
    Some(clock_stats(worker.cpu, rates))
}

/// Iterations of `run` that take about `sample_s`: from `first`, ×4 until a run takes a
/// quarter of it (or `most` is reached), then scaled. `None` when `run` says it has no loop.
fn sized_iterations(
    first: u64,
    most: u64,
    sample_s: f64,
    mut run: impl FnMut(u64) -> bool,
) -> Option<u64> {
    let mut iterations = first;
    loop {
        let start = Instant::now();
        if !run(iterations) {
            return None;
        }
        let seconds = start.elapsed().as_secs_f64();
        if seconds >= sample_s / 4.0 || iterations >= most {
            return Some(((iterations as f64) * sample_s / seconds.max(1e-9)).ceil() as u64);
        }
        iterations *= 4;
    }
}

/// Min, median and max of one thread's clock rates.
fn clock_stats(cpu: usize, mut rates: Vec<f64>) -> ClockStats {
    rates.sort_by(f64::total_cmp);
    ClockStats {
        cpu,
        min_hz: rates.first().copied().unwrap_or(0.0),
        median_hz: super::plateau::median_sorted(&rates),
        max_hz: rates.last().copied().unwrap_or(0.0),
        samples: rates.len() as u32,
    }
}

/// Chain length timed right after each load block: 384k adds, about 0.1 ms at 3-4 GHz. Intel's
/// Optimization Reference Manual (248966, "Intel AVX-512 frequency") describes a lowered licence
/// frequency held for about 2 ms after the last heavy vector instruction, which a chain this
/// short would still see. An Emerald Rapids guest did not behave so: right after 512-bit FMA
/// blocks the chain read the scalar clock, while a chain interleaved with the FMAs read 7-8%
/// less (session 45), so this is the fallback for kernels without a paced twin
/// ([`clock_paced`]).
const CHAIN_AFTER_LOAD_ITERATIONS: u64 = 24_000;

/// One short dependent-add chain timed now, in Hz (`None` where no chain exists): called right
/// after a block of a kernel, it runs at the clock the kernel left the core at (which, on cores
/// that lower the clock only while dense vector code issues, is the scalar clock again).
pub fn chain_clock_now() -> Option<f64> {
    let start = Instant::now();
    if !add_chain(CHAIN_AFTER_LOAD_ITERATIONS) {
        return None;
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Some((CHAIN_AFTER_LOAD_ITERATIONS * ADDS_PER_ITERATION) as f64 / seconds)
}

/// The clock a vector kernel runs at: `samples` rounds of `load` (a block of the kernel, a
/// millisecond or more) each followed at once by a short dependent-add chain, timed. All
/// threads of the team load together, so the figure is the clock under the same package
/// power as the kernel's own measurement. Each thread keeps its fastest round (an interrupt
/// can only slow a round down).
pub fn clock_after_load(
    worker: &Worker,
    samples: usize,
    mut load: impl FnMut(),
) -> Option<ClockStats> {
    let mut rates = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        worker.sync();
        load();
        rates.push(chain_clock_now()?);
    }
    Some(clock_stats(worker.cpu, rates))
}

/// The clock while a kernel's instructions issue: `samples` rounds of a block of the kernel
/// (`warm`: the core reaches the state the kernel runs in) followed by its paced twin
/// (`paced(iterations)`, [`super::compute::PacedLoop`]), timed: `adds_per_iteration` chained
/// adds per iteration bound that loop, so adds per second is the clock. All threads of the
/// team run together, under the package power of the kernel's own measurement; each keeps
/// its fastest round. `None` when `paced` says there is no twin.
pub fn clock_paced(
    worker: &Worker,
    samples: usize,
    sample_s: f64,
    adds_per_iteration: u64,
    mut warm: impl FnMut(),
    mut paced: impl FnMut(u64) -> bool,
) -> Option<ClockStats> {
    let iterations = sized_iterations(1 << 10, 1 << 34, sample_s, &mut paced)?;
    let mut rates = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        worker.sync();
        warm();
        let start = Instant::now();
        paced(iterations);
        let seconds = start.elapsed().as_secs_f64().max(1e-9);
        rates.push((iterations * adds_per_iteration) as f64 / seconds);
    }
    Some(clock_stats(worker.cpu, rates))
}

/// Sustained clock of each CPU in `cpus`, all running the chain at once.
pub fn measure_team_clock(
    cpus: &[usize],
    samples: usize,
    sample_s: f64,
) -> Result<Vec<ClockStats>, ProbeError> {
    let (stats, _) = run_team(cpus, |worker| sample_clock(worker, samples, sample_s))?;
    Ok(stats.into_iter().flatten().collect())
}

/// Single-thread clock on `cpus[0]`, and all threads together when there are several.
pub fn measure_clock(
    cpus: &[usize],
    samples: usize,
    sample_s: f64,
) -> Result<ClockRecord, ProbeError> {
    let single = measure_team_clock(&cpus[..cpus.len().min(1)], samples, sample_s)?;
    let all = if cpus.len() > 1 {
        measure_team_clock(cpus, samples, sample_s)?
    } else {
        single.clone()
    };
    Ok(ClockRecord {
        method: format!(
            "chain of dependent register adds (1 per cycle), {samples} samples of {:.0} ms \
             per thread; figures use each thread's fastest sample",
            sample_s * 1e3
        ),
        single_thread: single.into_iter().next(),
        all_threads: all,
        base_clock_hz: None,
        tsc_hz: None,
    })
}

/// TSC ticks per second measured against the monotonic clock, for the record (it is not used
/// for any rate).
pub fn measure_tsc_hz() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let start = Instant::now();
        // SAFETY: rdtsc only reads the time-stamp counter.
        let first = unsafe { std::arch::x86_64::_rdtsc() };
        while start.elapsed().as_secs_f64() < 0.01 {
            std::hint::spin_loop();
        }
        // SAFETY: as above.
        let last = unsafe { std::arch::x86_64::_rdtsc() };
        let seconds = start.elapsed().as_secs_f64();
        Some(last.wrapping_sub(first) as f64 / seconds)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_under_load_runs_one_load_block_per_round_and_agrees_with_the_idle_clock() {
        let cpus = [0usize];
        let (results, _) = run_team(&cpus, |worker| {
            let mut blocks = 0;
            let loaded = clock_after_load(worker, 4, || blocks += 1);
            let idle = sample_clock(worker, 3, 0.001);
            (blocks, loaded, idle)
        })
        .expect("a team of one");
        let (blocks, loaded, idle) = &results[0];
        assert_eq!(*blocks, 4, "one load block before each timed chain");
        let (Some(loaded), Some(idle)) = (loaded, idle) else {
            // Architectures without a chain measure no clock at all.
            return;
        };
        assert_eq!(loaded.samples, 4);
        assert!(loaded.min_hz <= loaded.median_hz && loaded.median_hz <= loaded.max_hz);
        // Same chain, same core, an empty load: the two methods must describe the same clock
        // (a factor, not a timing threshold: a chain counted wrongly is off by 2× or more).
        let ratio = loaded.max_hz / idle.max_hz;
        assert!(
            (0.5..2.0).contains(&ratio),
            "loaded/idle clock ratio {ratio}"
        );
    }

    /// The paced measurement warms once per round and counts the adds it is told of: with the
    /// plain chain as the "paced" loop it reads the idle clock, and the fp32 kernel's real
    /// twin (where this CPU has one) reads a clock of the same order. This is a gross check:
    /// tests run beside each other on two cores, so paced and idle rounds are interleaved and
    /// each side keeps its best, yet a loaded CI host still moved the ratio to 0.66 where a
    /// quiet run reads 0.93; a twin bound by its vector work (about 9/16) is the probe's own
    /// run-time check (a paced clock under 0.85 of the after-block clock is not used), and the
    /// add counts are checked against the assembly in `compute.rs`.
    #[test]
    fn the_paced_clock_counts_its_chain_and_warms_once_per_round() {
        let info = super::super::cpu::identify();
        let kernels = super::super::compute::select_kernels(&info.isa, &info.core_model);
        let twin_kernel = kernels
            .iter()
            .find(|k| k.precision == crate::device::Precision::Fp32 && k.paced.is_some());
        let cpus = [0usize];
        // Timing under the other tests' load: an attempt whose rounds another test's threads
        // disturbed throughout is measured again (CI saw one such attempt in four suites).
        let mut last_ratios = (0.0, 0.0);
        for _attempt in 0..3 {
            let (results, _) = run_team(&cpus, |worker| {
                let mut warms = 0;
                let chain = clock_paced(
                    worker,
                    3,
                    0.001,
                    ADDS_PER_ITERATION,
                    || warms += 1,
                    add_chain,
                );
                let (mut best_twin, mut best_idle) = (0.0f64, 0.0f64);
                for _ in 0..5 {
                    if let Some(kernel) = twin_kernel {
                        let twin = kernel.paced.and_then(|paced| {
                            clock_paced(
                                worker,
                                1,
                                0.001,
                                paced.adds_per_iteration,
                                || kernel.run(1000),
                                |iterations| kernel.run_paced(iterations),
                            )
                        });
                        best_twin = best_twin.max(twin.map_or(0.0, |stats| stats.max_hz));
                    }
                    let idle = sample_clock(worker, 1, 0.001);
                    best_idle = best_idle.max(idle.map_or(0.0, |stats| stats.max_hz));
                }
                (warms, chain, best_twin, best_idle)
            })
            .expect("a team of one");
            let (warms, chain, twin_hz, idle_hz) = &results[0];
            let Some(chain) = chain else {
                assert_eq!(*warms, 0, "no chain, no rounds");
                return;
            };
            assert!(*idle_hz > 0.0, "a chain exists, so the idle clock does");
            assert_eq!(*warms, 3, "one warm block before each timed round");
            assert_eq!(chain.samples, 3);
            let chain_ratio = chain.max_hz / idle_hz;
            let twin_ratio = if twin_kernel.is_some() {
                twin_hz / idle_hz
            } else {
                1.0
            };
            last_ratios = (chain_ratio, twin_ratio);
            if (0.5..2.0).contains(&chain_ratio) && (0.45..2.0).contains(&twin_ratio) {
                return;
            }
        }
        let (chain_ratio, twin_ratio) = last_ratios;
        assert!(
            (0.5..2.0).contains(&chain_ratio),
            "chain/idle clock ratio {chain_ratio}"
        );
        assert!(
            (0.45..2.0).contains(&twin_ratio),
            "paced/idle clock ratio {twin_ratio}"
        );
    }
}
