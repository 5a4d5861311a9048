//! Pinned measuring threads and the timing method every kernel shares.
//!
//! A measurement runs one thread per CPU, each pinned to its CPU. All threads calibrate the
//! number of kernel passes so one sample lasts at least the target time, agree on the largest
//! count, and then time the same number of samples, starting each sample together at a
//! barrier. The team's rate for a sample is the total work over the span from the first start
//! to the last finish (nothing is assumed about scaling), and each thread's own rate is kept
//! too, so the spread between threads shows. The best sample is the figure; the spread is
//! (best − median) / best, and a noisy set is measured again before it is flagged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::plateau::median_sorted;
use super::record::SampleStats;
use super::ProbeError;

/// How samples are taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplePlan {
    /// Samples per round.
    pub samples: usize,
    /// Shortest duration of one sample, in seconds.
    pub target_s: f64,
    /// Spread above which a round counts as noisy.
    pub noise_threshold: f64,
    /// Extra rounds taken while noisy.
    pub max_reruns: u32,
    /// No extra rounds once a round ends after this instant, so a noisy machine cannot
    /// stretch the probe past its time budget.
    pub rerun_until: Option<Instant>,
}

/// Result of one timed measurement, identical on every thread of the team.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamTiming {
    /// Kernel passes per sample and thread.
    pub passes: u64,
    /// Work units per second of the whole team, per sample.
    pub team_rates: Vec<f64>,
    pub stats: SampleStats,
    /// Each thread's best own rate.
    pub per_thread_best: Vec<f64>,
    pub noisy: bool,
    /// The threads together stayed below `CONTENDED_FRACTION` of the sum of their separate
    /// best rates: they seldom ran at full speed at the same time.
    pub contended: bool,
}

/// See `TeamTiming::contended`.
pub const CONTENDED_FRACTION: f64 = 0.75;

/// A barrier whose waiters spin. The OS barrier puts early threads to sleep, and waking a
/// halted vCPU costs tens to hundreds of microseconds in a VM: enough to skew the start of a
/// 1 ms sample and make the team look slow at random. Waiters yield after a while, so an
/// oversubscribed machine still makes progress.
struct SpinBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    const SPIN_BEFORE_YIELD: Duration = Duration::from_millis(2);

    fn new(parties: usize) -> SpinBarrier {
        SpinBarrier {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Release);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let started = Instant::now();
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && started.elapsed() > Self::SPIN_BEFORE_YIELD {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Span {
    start: Instant,
    end: Instant,
}

/// What one thread of a team sees.
pub struct Worker<'a> {
    pub index: usize,
    pub cpu: usize,
    barrier: &'a SpinBarrier,
    passes_slots: &'a Mutex<Vec<u64>>,
    spans: &'a Mutex<Vec<Vec<Span>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another worker panicked; the data is still plain numbers.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Worker<'_> {
    /// Waits for every thread of the team.
    pub fn sync(&self) {
        self.barrier.wait();
    }

    /// Times `run(passes)` on every thread at once. `units_per_pass` is the work one pass does
    /// on one thread (bytes or FLOPs). Every thread must call this in the same order.
    pub fn time(&self, plan: &SamplePlan, units_per_pass: f64, run: impl FnMut(u64)) -> TeamTiming {
        self.time_then(plan, units_per_pass, run, || {})
    }

    /// As [`Worker::time`], with `after` run right after each timed sample, outside its time
    /// (the compute phase times a short clock chain there, so the clock is sampled all through
    /// the window the kernel's samples come from).
    pub fn time_then(
        &self,
        plan: &SamplePlan,
        units_per_pass: f64,
        mut run: impl FnMut(u64),
        mut after: impl FnMut(),
    ) -> TeamTiming {
        let passes = self.agree_on_passes(calibrate(plan.target_s, &mut run));
        self.sample(plan, passes, units_per_pass, || {
            self.barrier.wait();
            let start = Instant::now();
            run(passes);
            let span = Span {
                start,
                end: Instant::now(),
            };
            after();
            span
        })
    }

    /// Times one pass of `run` per sample, each after `prepare` (not timed) on every thread:
    /// `prepare` puts the data back where the pass must find it (flushed from the caches), so
    /// a pass cannot be repeated the way `time` repeats one. `state` is what both work on.
    pub fn time_cold<S>(
        &self,
        plan: &SamplePlan,
        units_per_pass: f64,
        state: &mut S,
        mut prepare: impl FnMut(&mut S),
        mut run: impl FnMut(&mut S),
    ) -> TeamTiming {
        // One untimed round first, as `time`'s calibration is: page tables and clock warm.
        prepare(state);
        run(state);
        self.sample(plan, 1, units_per_pass, || {
            prepare(state);
            self.barrier.wait();
            let start = Instant::now();
            run(state);
            Span {
                start,
                end: Instant::now(),
            }
        })
    }

    /// Takes the samples of `time` and `time_cold`: rounds of `plan.samples` spans, again
    /// while noisy or contended and the plan allows.
    fn sample(
        &self,
        plan: &SamplePlan,
        passes: u64,
        units_per_pass: f64,
        mut one: impl FnMut() -> Span,
    ) -> TeamTiming {
        let mut mine: Vec<Span> = Vec::new();
        let mut reruns = 0;
        loop {
            for _ in 0..plan.samples.max(1) {
                mine.push(one());
            }
            let (timing, last_end) = self.summarise(&mine, passes, units_per_pass, reruns);
            // Decided from data every thread shares, so all threads take the same branch.
            let out_of_time = match (plan.rerun_until, last_end) {
                (Some(deadline), Some(end)) => end >= deadline,
                _ => false,
            };
            let noisy = timing.stats.spread > plan.noise_threshold;
            if (!noisy && !timing.contended) || reruns >= plan.max_reruns || out_of_time {
                return TeamTiming { noisy, ..timing };
            }
            reruns += 1;
        }
    }

    fn agree_on_passes(&self, mine: u64) -> u64 {
        lock(self.passes_slots)[self.index] = mine;
        self.barrier.wait();
        let agreed = lock(self.passes_slots)
            .iter()
            .copied()
            .max()
            .unwrap_or(mine);
        self.barrier.wait();
        agreed
    }

    fn summarise(
        &self,
        mine: &[Span],
        passes: u64,
        units_per_pass: f64,
        reruns: u32,
    ) -> (TeamTiming, Option<Instant>) {
        lock(self.spans)[self.index] = mine.to_vec();
        self.barrier.wait();
        let all = lock(self.spans).clone();
        self.barrier.wait();
        let work_per_thread = passes as f64 * units_per_pass;
        let samples = all.iter().map(Vec::len).min().unwrap_or(0);
        let team_rates: Vec<f64> = (0..samples)
            .map(|s| {
                let first = all.iter().map(|t| t[s].start).min();
                let last = all.iter().map(|t| t[s].end).max();
                match (first, last) {
                    (Some(first), Some(last)) => {
                        let seconds = last.duration_since(first).as_secs_f64().max(1e-9);
                        work_per_thread * all.len() as f64 / seconds
                    }
                    _ => 0.0,
                }
            })
            .collect();
        let per_thread_best: Vec<f64> = all
            .iter()
            .map(|spans| {
                spans
                    .iter()
                    .map(|s| {
                        work_per_thread / s.end.duration_since(s.start).as_secs_f64().max(1e-9)
                    })
                    .fold(0.0, f64::max)
            })
            .collect();
        let last_end = all.iter().flatten().map(|span| span.end).max();
        let stats = sample_stats(&team_rates, reruns);
        let separately: f64 = per_thread_best.iter().sum();
        let timing = TeamTiming {
            passes,
            contended: all.len() > 1 && stats.best < CONTENDED_FRACTION * separately,
            stats,
            team_rates,
            per_thread_best,
            noisy: false,
        };
        (timing, last_end)
    }
}

/// Finds a pass count whose run lasts about `target_s`; the calibration runs double as
/// warm-up (caches filled, clock ramped up).
fn calibrate(target_s: f64, run: &mut impl FnMut(u64)) -> u64 {
    let mut passes: u64 = 1;
    loop {
        let start = Instant::now();
        run(passes);
        let seconds = start.elapsed().as_secs_f64();
        if seconds >= target_s / 8.0 || passes >= 1 << 40 {
            let scaled = (passes as f64 * target_s / seconds.max(1e-9)).ceil();
            return (scaled as u64).max(passes).max(1);
        }
        passes = passes.saturating_mul(if seconds < target_s / 256.0 { 16 } else { 4 });
    }
}

/// Best, median, worst and spread of rates (higher is better).
pub fn sample_stats(rates: &[f64], reruns: u32) -> SampleStats {
    let mut sorted: Vec<f64> = rates.iter().copied().filter(|r| r.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let best = sorted.last().copied().unwrap_or(0.0);
    let median = median_sorted(&sorted);
    SampleStats {
        best,
        median,
        worst: sorted.first().copied().unwrap_or(0.0),
        spread: if best > 0.0 {
            (best - median) / best
        } else {
            0.0
        },
        samples: sorted.len() as u32,
        reruns,
    }
}

/// Runs `work` on one pinned thread per CPU of `cpus` and returns each thread's result in
/// order, with whether every thread could be pinned.
pub fn run_team<R: Send>(
    cpus: &[usize],
    work: impl Fn(&Worker) -> R + Sync,
) -> Result<(Vec<R>, bool), ProbeError> {
    if cpus.is_empty() {
        return Err(ProbeError::NoUsableCpu);
    }
    let count = cpus.len();
    let barrier = SpinBarrier::new(count);
    let passes_slots = Mutex::new(vec![0u64; count]);
    let spans = Mutex::new(vec![Vec::new(); count]);
    // Threads wait at this gate until all of them exist, so a failed spawn cannot leave the
    // others blocked on the barrier forever.
    let gate: (Mutex<Option<bool>>, Condvar) = (Mutex::new(None), Condvar::new());
    let work = &work;
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(count);
        let mut spawn_error = None;
        for (index, &cpu) in cpus.iter().enumerate() {
            let (barrier, passes_slots, spans, gate) = (&barrier, &passes_slots, &spans, &gate);
            let spawned = std::thread::Builder::new()
                .name(format!("probe-{index}"))
                .spawn_scoped(scope, move || {
                    let go = {
                        let mut state = lock(&gate.0);
                        while state.is_none() {
                            state = gate.1.wait(state).unwrap_or_else(|p| p.into_inner());
                        }
                        *state == Some(true)
                    };
                    if !go {
                        return None;
                    }
                    let pinned = super::cpu::pin_current_thread(cpu);
                    let worker = Worker {
                        index,
                        cpu,
                        barrier,
                        passes_slots,
                        spans,
                    };
                    Some((work(&worker), pinned))
                });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(error) => {
                    spawn_error = Some(error);
                    break;
                }
            }
        }
        *lock(&gate.0) = Some(spawn_error.is_none());
        gate.1.notify_all();
        let mut results = Vec::with_capacity(count);
        let mut all_pinned = true;
        let mut panicked = false;
        for handle in handles {
            match handle.join() {
                Ok(Some((result, pinned))) => {
                    all_pinned &= pinned;
                    results.push(result);
                }
                Ok(None) => {}
                Err(_) => panicked = true,
            }
        }
        if let Some(error) = spawn_error {
            return Err(ProbeError::Thread(error.to_string()));
        }
        if panicked || results.len() != count {
            return Err(ProbeError::Thread("a measuring thread panicked".into()));
        }
        Ok((results, all_pinned))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_rates() {
        let stats = sample_stats(&[10.0, 8.0, 9.0, f64::NAN], 1);
        assert_eq!(stats.best, 10.0);
        assert_eq!(stats.median, 9.0);
        assert_eq!(stats.worst, 8.0);
        assert!((stats.spread - 0.1).abs() < 1e-12);
        assert_eq!(stats.samples, 3);
        assert_eq!(stats.reruns, 1);
    }

    #[test]
    fn a_team_times_together_and_agrees() {
        let plan = SamplePlan {
            samples: 3,
            target_s: 1e-4,
            noise_threshold: 1.0,
            max_reruns: 0,
            rerun_until: None,
        };
        let (timings, _) = run_team(&[0, 0], |worker| {
            worker.time(&plan, 1.0, |passes| {
                std::hint::black_box((0..passes).sum::<u64>());
            })
        })
        .expect("team runs");
        assert_eq!(timings.len(), 2);
        assert_eq!(timings[0].passes, timings[1].passes);
        assert_eq!(timings[0].team_rates, timings[1].team_rates);
        assert!(timings[0].stats.best > 0.0);
    }

    #[test]
    fn a_cold_sample_prepares_before_every_pass() {
        let plan = SamplePlan {
            samples: 4,
            target_s: 1e-4,
            noise_threshold: 1.0,
            max_reruns: 0,
            rerun_until: None,
        };
        let (results, _) = run_team(&[0, 0], |worker| {
            // (prepared, ran): every run must find the data freshly prepared.
            let mut state = (0u32, 0u32);
            let timing = worker.time_cold(
                &plan,
                1.0,
                &mut state,
                |s| s.0 += 1,
                |s| {
                    assert_eq!(s.0, s.1 + 1, "a pass ran without its preparation");
                    s.1 += 1;
                },
            );
            (timing, state)
        })
        .expect("team runs");
        for (timing, (prepared, ran)) in results {
            assert_eq!(timing.passes, 1);
            assert_eq!(timing.stats.samples, 4);
            // One warm-up round plus the samples.
            assert_eq!((prepared, ran), (5, 5));
        }
    }
}
