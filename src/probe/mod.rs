//! Hardware probe: measures this machine's compute and bandwidth ceilings with microbenchmark
//! kernels and describes them as a `DeviceProfile`. Knows nothing about ONNX or graphs.
//!
//! Steps, in order: identify the CPU and the cores this process may use (`cpu`), measure the
//! sustained clock (`clock`), derive theoretical peaks from the per-microarchitecture table
//! (`microarch`), run the compute kernels (`compute`) and the bandwidth sweep (`bandwidth`,
//! with `plateau` naming the memory levels), time per-op dispatch (`dispatch`), look for
//! NVIDIA GPUs (`gpu`) and confirm kernel counts with hardware counters where the kernel
//! allows (`counters`). Every measurement goes through `team`: pinned threads, calibrated
//! samples, best of N with the spread. The library never touches the terminal: progress is
//! reported through a callback.

mod bandwidth;
mod buffer;
mod clock;
mod compute;
mod counters;
mod cpu;
mod dispatch;
mod exchange;
mod gpu;
mod microarch;
pub mod plateau;
use crate::device::probe_record as record;
mod assemble;
mod measure;
mod team;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::device::profile::ProfileError;
use crate::device::{
    ComputeCeiling, DeviceKind, DeviceProfile, MemoryCeiling, MemoryLevel, Precision,
    ProfileSource, PROFILE_SCHEMA_VERSION,
};
use crate::report::units::fmt_bytes_binary;

pub use crate::device::profile::default_profile_path;
pub use clock::chain_clock_now;
pub use microarch::{CoreModel, PerWidth};
pub use record::*;

use assemble::*;
use bandwidth::{BandwidthKernels, ThreadBuffers};
use compute::ComputeKernel;
use measure::*;
use plateau::{CacheGuide, PlateauSettings};
use team::{run_team, SamplePlan, TeamTiming};

/// What to measure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Fewer samples and a coarser sweep: under 5 s on a 2-core machine instead of under 30 s.
    pub quick: bool,
    /// Threads for the all-threads figures; `None` = every usable core.
    pub threads: Option<usize>,
}

/// Progress of a probe run, for a progress bar.
#[derive(Clone, Debug, PartialEq)]
pub enum ProgressEvent {
    /// One measurement finished. `total_steps` may grow while the run learns what it must
    /// measure (plateau positions).
    Step {
        completed: u64,
        total_steps: u64,
        label: String,
    },
    /// Something to tell the user once (counters unavailable, noisy machine, ...).
    Note(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no usable CPU in this process's affinity mask")]
    NoUsableCpu,
    #[error("--threads must be at least 1")]
    ZeroThreads,
    #[error("could not allocate {bytes} bytes for a measurement buffer")]
    Alloc { bytes: usize },
    #[error("measuring thread failed: {0}")]
    Thread(String),
    #[error("the probed profile is not usable: {0}")]
    InvalidProfile(String),
    #[error("no cache directory for this user (set XDG_CACHE_HOME or HOME)")]
    NoCacheDir,
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("{0}; run `roofline probe` to measure this machine again (it replaces the file)")]
    UnusableSavedProfile(ProfileError),
}

/// Sampling effort of one mode.
#[derive(Clone, Copy, Debug)]
struct Settings {
    compute: SamplePlan,
    bandwidth: SamplePlan,
    clock_samples: usize,
    clock_sample_s: f64,
    /// Rounds of kernel block + short chain per compute measurement (the clock under load).
    vector_clock_samples: usize,
    /// Sweep points per doubling of the working set: read kernel, other kernels.
    points_per_octave: f64,
    other_points_per_octave: f64,
    /// Largest planned working set, as a multiple of the last-level cache the threads reach.
    dram_factor: u64,
    /// All threads' bytes the sweep may reach, planned or grown past the plan looking for the
    /// DRAM plateau, whatever caches the CPU reports (the flushed measurement finds main
    /// memory when the sweep cannot); and until when it may grow. Peak memory is this plus
    /// the process's own (about 20 MB), inside the mode's budget (quick 512 MB, full 1 GB).
    sweep_cap_total: u64,
    extend_until: Instant,
    /// Sweep every kernel (full) or only the read kernel, measuring the others at the
    /// plateaus it found (quick).
    sweep_every_kernel: bool,
    dispatch_rounds: u64,
}

impl Settings {
    /// `started` anchors the time budget (quick: 5 s, full: 30 s): re-measuring noisy figures
    /// stops after 40% of it and growing the sweep after 50%, so a busy machine cannot push
    /// the probe past its budget.
    fn for_mode(quick: bool, started: Instant) -> Settings {
        let budget = Duration::from_secs(if quick { 5 } else { 30 });
        let rerun_until = Some(started + budget.mul_f64(0.4));
        let extend_until = started + budget.mul_f64(0.5);
        // Samples are short (1-2 ms) and many: on a shared machine a sample shorter than a
        // scheduler time slice often runs undisturbed, and the best of many finds one. A noisy
        // round (best more than 3-5% above the median) is measured again.
        if quick {
            Settings {
                compute: SamplePlan {
                    samples: 7,
                    target_s: 0.001,
                    noise_threshold: 0.03,
                    max_reruns: 1,
                    rerun_until,
                },
                bandwidth: SamplePlan {
                    samples: 3,
                    target_s: 0.001,
                    noise_threshold: 0.05,
                    max_reruns: 1,
                    rerun_until,
                },
                clock_samples: 9,
                clock_sample_s: 0.001,
                vector_clock_samples: 9,
                points_per_octave: 2.0,
                other_points_per_octave: 2.0,
                dram_factor: 6,
                sweep_cap_total: 384 << 20,
                extend_until,
                sweep_every_kernel: false,
                dispatch_rounds: 2_000,
            }
        } else {
            Settings {
                compute: SamplePlan {
                    samples: 15,
                    target_s: 0.002,
                    noise_threshold: 0.03,
                    max_reruns: 2,
                    rerun_until,
                },
                bandwidth: SamplePlan {
                    samples: 5,
                    target_s: 0.002,
                    noise_threshold: 0.05,
                    max_reruns: 2,
                    rerun_until,
                },
                clock_samples: 15,
                clock_sample_s: 0.002,
                vector_clock_samples: 15,
                points_per_octave: 3.0,
                other_points_per_octave: 2.0,
                dram_factor: 8,
                sweep_cap_total: 768 << 20,
                extend_until,
                sweep_every_kernel: true,
                dispatch_rounds: 20_000,
            }
        }
    }
}

/// A figure above its theoretical peak by more than this is flagged as a bug: the clock is
/// timed right after the kernel's blocks, not during them, and on a shared host the core's
/// clock moves between the two (a CI run of `probe --quick` on a busy KVM guest saw a kernel
/// between 3% and 10% above the theory of the clock sampled after it). The bugs the flag is
/// for (a miscounted instruction, a wrong unit count or width) put a figure 1.5-2× above.
const ABOVE_THEORY_TOLERANCE: f64 = 1.10;

/// How far a kernel may run above the theory of its paced clock before that clock is judged
/// not to be the kernel's (timing noise between the two measurements is a percent or two).
const PACED_THEORY_TOLERANCE: f64 = 1.03;

/// Extra rounds for a compute team whose threads did not run together (see the loop).
const MAX_TEAM_RETRIES: u64 = 4;

struct Tracker<'a> {
    callback: &'a mut dyn FnMut(ProgressEvent),
    completed: u64,
    total: u64,
}

impl Tracker<'_> {
    fn step(&mut self, label: String) {
        self.completed += 1;
        self.total = self.total.max(self.completed);
        (self.callback)(ProgressEvent::Step {
            completed: self.completed,
            total_steps: self.total,
            label,
        });
    }

    fn note(&mut self, text: String) {
        (self.callback)(ProgressEvent::Note(text));
    }
}

/// This CPU's identification (CPUID, sysfs, stated defaults): nothing is measured.
pub fn identify_cpu() -> CpuDescription {
    cpu::identify().description
}

/// Loop iterations of [`fma_gflops_now`]'s block: 0.07-0.1 ms of the probe's fp32 FMA kernel
/// (12 ymm chains on AVX2, 16 zmm on AVX-512) at one vector FMA per cycle and 3 GHz.
const FMA_NOW_ITERATIONS: u64 = 1 << 14;

/// The fp32 FMA rate one short block of the probe's FMA kernel reaches now on this thread,
/// GFLOP/s (`None` without a vector FMA kernel). Unlike a dependent-add chain (the clock), it
/// also sees what a busy SMT sibling on the host takes from the vector pipes: the throughput a
/// compute-bound kernel gets. Called after a timed run, it reads the state the run left.
pub fn fma_gflops_now() -> Option<f64> {
    let kernel = check_kernels().1.as_ref()?;
    let start = std::time::Instant::now();
    kernel.run(FMA_NOW_ITERATIONS);
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Some(kernel.flops_per_iteration * FMA_NOW_ITERATIONS as f64 / seconds / 1e9)
}

/// The kernels of the quick checks `bench` and `calibrate` run around their timings (the
/// exchange's bandwidth kernels, the fp32 FMA kernel of the shared-core check and of
/// [`fma_gflops_now`]). Identifying the CPU reads CPUID and sysfs; `calibrate` checks twice a
/// second, so they are chosen once per process.
fn check_kernels() -> &'static (BandwidthKernels, Option<compute::ComputeKernel>) {
    static KERNELS: std::sync::OnceLock<(BandwidthKernels, Option<compute::ComputeKernel>)> =
        std::sync::OnceLock::new();
    KERNELS.get_or_init(|| {
        let cpu = cpu::identify();
        (
            BandwidthKernels::select(&cpu.isa),
            compute::shared_core_kernel(&compute::select_kernels(&cpu.isa, &cpu.core_model))
                .cloned(),
        )
    })
}

/// Measures the data exchange between the first `threads` CPUs this process may use, as the
/// probe does but in about 3 ms: what `bench` and `calibrate` check around their multi-thread
/// runs. `None` with fewer than two usable CPUs or when a vCPU was taken away meanwhile.
pub fn exchange_now(threads: usize) -> Option<ExchangeRecord> {
    let cores = cpu::usable_cores();
    let cpus: Vec<usize> = cores.affinity_cpus.iter().take(threads).copied().collect();
    if cpus.len() < 2 {
        return None;
    }
    let (kernels, fma) = check_kernels();
    exchange::measure(
        kernels,
        fma.as_ref(),
        &cpus,
        exchange::ExchangeEffort::CHECK,
    )
    .ok()
    .flatten()
}

/// Measures this machine and returns its profile (id `local`, kind CPU, source Probed).
pub fn run_probe(
    options: &ProbeOptions,
    progress: &mut dyn FnMut(ProgressEvent),
) -> Result<DeviceProfile, ProbeError> {
    let started = Instant::now();
    let settings = Settings::for_mode(options.quick, started);
    let mut phases = Vec::new();
    let mut phase_start = Instant::now();
    let mut end_phase = |name: &str| {
        phases.push(PhaseTime {
            phase: name.to_string(),
            seconds: phase_start.elapsed().as_secs_f64(),
        });
        phase_start = Instant::now();
    };
    let cpu = cpu::identify();
    let mut cores = cpu::usable_cores();
    let mut warnings = Vec::new();
    let threads = match options.threads {
        Some(0) => return Err(ProbeError::ZeroThreads),
        Some(requested) if requested > cores.usable => {
            warnings.push(format!(
                "--threads {requested} exceeds the {} usable cores; using {}",
                cores.usable, cores.usable
            ));
            cores.usable
        }
        Some(requested) => requested,
        None => cores.usable,
    };
    let cpus: Vec<usize> = cores.affinity_cpus.iter().take(threads).copied().collect();
    if cpus.is_empty() {
        return Err(ProbeError::NoUsableCpu);
    }
    cores.threads_used = cpus.len();
    cores.pinned_cpus = cpus.clone();
    // Every measurement pins its threads the same way; check once that the OS lets us.
    let (_, pinned) = run_team(&cpus, |_| ())?;
    cores.pinned = pinned;
    if !pinned {
        warnings.push("could not pin the measuring threads to CPUs; figures may wander".into());
    }
    let thread_counts: Vec<usize> = if cpus.len() > 1 {
        vec![1, cpus.len()]
    } else {
        vec![1]
    };

    let compute_kernels = compute::select_kernels(&cpu.isa, &cpu.core_model);
    let bandwidth_kernels = BandwidthKernels::select(&cpu.isa);
    // Per thread count: the read kernel's grid and the other kernels' (coarser) grid.
    let grids: Vec<(Vec<usize>, Vec<usize>)> = thread_counts
        .iter()
        .map(|&n| {
            (
                sweep_sizes(
                    &cpu.description,
                    n,
                    settings.dram_factor,
                    settings.points_per_octave,
                    settings.sweep_cap_total,
                ),
                sweep_sizes(
                    &cpu.description,
                    n,
                    settings.dram_factor,
                    settings.other_points_per_octave,
                    settings.sweep_cap_total,
                ),
            )
        })
        .collect();
    let planned = 3
        + (compute_kernels.len() * thread_counts.len()) as u64
        + grids
            .iter()
            .map(|(read, other)| {
                let others = if settings.sweep_every_kernel {
                    other.len() * 3 + 3 * 6
                } else {
                    16
                };
                (read.len() + others) as u64
            })
            .sum::<u64>();
    let mut tracker = Tracker {
        callback: progress,
        completed: 0,
        total: planned,
    };

    // Counters: checked once, on this thread, before anything is timed.
    let counters_usable = counters::availability();
    let mut counter_report = CounterReport {
        available: counters_usable.is_ok(),
        unavailable_reason: counters_usable.as_ref().err().cloned(),
        checks: Vec::new(),
    };
    if let Err(reason) = &counters_usable {
        tracker.note(format!(
            "hardware counters unavailable ({reason}); FLOP counts are not cross-checked"
        ));
    }

    let mut clock = clock::measure_clock(&cpus, settings.clock_samples, settings.clock_sample_s)?;
    tracker.step("sustained clock".into());
    end_phase("identification and clock");
    if clock.single_thread.is_none() {
        warnings.push(
            "no sustained clock on this architecture: theoretical peaks are not computed".into(),
        );
    }
    clock.base_clock_hz = cpu.description.base_clock_hz;
    let mut description = cpu.description.clone();
    if description.tsc_hz.is_none() {
        description.tsc_hz = clock::measure_tsc_hz();
    }
    clock.tsc_hz = description.tsc_hz;

    // Compute kernels.
    let mut compute_results: Vec<ComputeMeasurement> = Vec::new();
    // Physical cores under each team, read from sysfs once rather than per measurement.
    let cores_per_count: Vec<(usize, usize)> = thread_counts
        .iter()
        .map(|&threads| (threads, cpu::distinct_cores(&cpus[..threads])))
        .collect();
    let team_cores = |threads: usize| {
        cores_per_count
            .iter()
            .find(|&&(count, _)| count == threads)
            .map_or(threads, |&(_, cores)| cores)
    };
    for kernel in &compute_kernels {
        let mut queue: std::collections::VecDeque<usize> = thread_counts.iter().copied().collect();
        let mut retried_single = false;
        let mut team_retries = 0;
        while let Some(threads) = queue.pop_front() {
            let count = threads == 1 && counters_usable.is_ok() && !retried_single;
            let ComputeOutcome {
                timing,
                after_clocks,
                paced_clocks,
                check,
            } = measure_compute(
                kernel,
                &cpus[..threads],
                &settings,
                count.then(|| (description.vendor.clone(), description.family.unwrap_or(0))),
            )?;
            if let Some(check) = check {
                match check {
                    Ok(check) => counter_report.checks.push(check),
                    Err(reason) => warnings.push(format!("counters on {}: {reason}", kernel.id)),
                }
            }
            // Theory at the clock the kernel's own instructions ran at (its paced twin's, or a
            // chain's right after blocks of it; each thread's fastest round).
            // The kernel's own mix, at its own width: an FMA+ADD loop on a core whose adds share
            // the FMA pipes' issue cannot reach the FMA-only peak, and is not judged against it.
            // A portable fallback kernel (one lane as far as its spec says) is judged against
            // the precision's vector peak, what the core could do.
            let per_cycle = if kernel.fallback {
                let widths = cpu.isa.widths_for(kernel.precision);
                cpu.core_model
                    .flops_per_cycle(kernel.precision, kernel.mix, &widths)
                    .map(|(per_cycle, _)| per_cycle)
            } else {
                cpu.core_model.body_flops_per_cycle(
                    kernel.precision,
                    kernel.body,
                    kernel.vector_bits,
                )
            };
            let theory_at = |clocks: &[f64]| {
                per_cycle
                    .filter(|_| clocks.len() == threads && clocks.iter().all(|&hz| hz > 0.0))
                    .map(|per_cycle| microarch::theoretical_flops(per_cycle, clocks))
            };
            // The paced clock is the clock under the kernel's own instructions; it is used
            // unless the kernel beat the theory it gives (the chain did not bound its loop:
            // the core model's rate is wrong for this core), it reads above the clock after
            // blocks (a paced round the host disturbed less than every other), or far below it:
            // 512-bit FMAs lowered the clock by 7-8% on Emerald Rapids, while vector pipes
            // shared with another thread (SMT siblings) would leave the twin vector-bound,
            // reading about 9/16 of the clock and hiding the sharing the probe must report.
            let paced_theory = theory_at(&paced_clocks);
            let after_theory = theory_at(&after_clocks);
            let paced_credible = match (paced_theory, after_theory) {
                (Some(paced), Some(after)) => {
                    timing.stats.best <= paced * PACED_THEORY_TOLERANCE
                        && (0.85..=1.02).contains(&(paced / after))
                }
                (Some(paced), None) => timing.stats.best <= paced * PACED_THEORY_TOLERANCE,
                _ => false,
            };
            let (clocks, theory, clock_method) = if paced_credible {
                let paced = kernel.paced.expect("paced clocks come from a paced twin");
                (
                    paced_clocks,
                    paced_theory,
                    format!(
                        "dependent-add chain interleaved with the kernel's instructions \
                         ({} adds per {} of them, the adds bounding the loop)",
                        paced.adds_per_iteration, paced.vector_per_iteration
                    ),
                )
            } else {
                (
                    after_clocks,
                    after_theory,
                    "dependent-add chain right after blocks of the kernel".to_string(),
                )
            };
            let mut flags = Vec::new();
            if timing.noisy {
                flags.push(MeasurementFlag::Noisy);
            }
            if kernel.fallback {
                flags.push(MeasurementFlag::Fallback);
            }
            if timing.contended {
                flags.push(MeasurementFlag::Contended);
            }
            if let Some(theory) = theory {
                if timing.stats.best > theory * ABOVE_THEORY_TOLERANCE {
                    flags.push(MeasurementFlag::AboveTheoretical);
                    warnings.push(format!(
                        "BUG: {} on {threads} thread(s) measured {:.1} G/s, above its \
                         theoretical {:.1} G/s: the kernel's count or the {} model is wrong",
                        kernel.id,
                        timing.stats.best / 1e9,
                        theory / 1e9,
                        cpu.core_model.name
                    ));
                }
            }
            let measurement = ComputeMeasurement {
                precision: kernel.precision,
                mix: kernel.mix,
                threads: threads as u32,
                kernel: format!("{}: {}", kernel.id, kernel.description),
                isa: kernel.isa.to_string(),
                vector_bits: kernel.vector_bits,
                independent_chains: kernel.chains,
                flops_per_s: timing.stats.best,
                stats: timing.stats.clone(),
                per_thread_flops_per_s: timing.per_thread_best.clone(),
                clock_hz_per_thread: clocks,
                clock_method,
                theoretical_flops_per_s: theory,
                fraction_of_theoretical: theory.map(|t| timing.stats.best / t),
                flags,
            };
            let same = |m: &ComputeMeasurement| {
                m.precision == kernel.precision
                    && m.mix == kernel.mix
                    && m.threads == threads as u32
            };
            match compute_results.iter_mut().find(|m| same(m)) {
                // A repeat keeps the better of the two measurements.
                Some(earlier) => {
                    let rounds = earlier.stats.reruns + 1;
                    if measurement.flops_per_s > earlier.flops_per_s {
                        *earlier = measurement;
                    }
                    earlier.stats.reruns = rounds;
                }
                None => compute_results.push(measurement),
            }
            tracker.step(format!("{} on {threads} thread(s)", kernel.id));
            // One thread alone must reach what each thread reached inside the team; if it did
            // not, its samples were disturbed (another process on its core): measure it again.
            let rerun_allowed = settings
                .compute
                .rerun_until
                .is_none_or(|deadline| Instant::now() < deadline);
            if threads > 1 && !retried_single {
                let best_in_team = timing.per_thread_best.iter().copied().fold(0.0, f64::max);
                let single = compute_results.iter().find(|m| {
                    m.precision == kernel.precision && m.mix == kernel.mix && m.threads == 1
                });
                if single.is_some_and(|m| m.flops_per_s < 0.97 * best_in_team) && rerun_allowed {
                    queue.push_back(1);
                    retried_single = true;
                }
            }
            // A team whose threads seldom ran together (a vCPU taken by the host for the whole
            // round) measured the host, not the cores: a compute kernel shares nothing between
            // cores, so the team's figure should be close to the sum of its threads' own. Try
            // again after a pause long enough for the host to give the vCPU back.
            let team_best = compute_results
                .iter()
                .find(|m| same(m))
                .map_or(0.0, |m| m.flops_per_s);
            let separately: f64 = timing.per_thread_best.iter().sum();
            // Two vCPUs the host ran on one core's SMT siblings for the whole round look
            // balanced (each thread half as fast), so the team is also judged against one
            // thread's figure times the distinct cores it spans.
            let single_best = compute_results
                .iter()
                .find(|m| m.precision == kernel.precision && m.mix == kernel.mix && m.threads == 1)
                .map_or(0.0, |m| m.flops_per_s);
            let core_scaled = single_best * team_cores(threads) as f64;
            if threads > 1
                && (team_best < 0.9 * separately || team_best < 0.8 * core_scaled)
                && team_retries < MAX_TEAM_RETRIES
                && rerun_allowed
            {
                team_retries += 1;
                std::thread::sleep(Duration::from_millis(20 * team_retries));
                queue.push_back(threads);
            }
        }
    }

    end_phase("compute kernels");

    // Theoretical peaks for every precision the CPU has, FMA-only and FMA+ADD, each at the
    // clock measured under the kernel that issues its instructions; precisions without a
    // kernel use the scalar sustained clock, and say so.
    let scalar_clocks_for = |threads: usize| -> Vec<f64> {
        if threads == 1 {
            clock.single_thread.iter().map(|c| c.max_hz).collect()
        } else {
            clock.all_threads.iter().map(|c| c.max_hz).collect()
        }
    };
    let mut theoretical = Vec::new();
    for &threads in &thread_counts {
        for precision in Precision::ALL {
            for mix in [ComputeMix::Fma, ComputeMix::FmaAdd] {
                // Where adds have no pipes of their own (they share the FMAs' issue) an FMA+ADD
                // peak is the FMA one, and no FMA+ADD kernel runs to give it a clock.
                if mix == ComputeMix::FmaAdd
                    && (!cpu.core_model.has_separate_adders()
                        || !matches!(precision, Precision::Fp64 | Precision::Fp32))
                {
                    continue;
                }
                let widths = cpu.isa.widths_for(precision);
                let Some((per_cycle, bits)) =
                    cpu.core_model.flops_per_cycle(precision, mix, &widths)
                else {
                    continue;
                };
                let measured = compute_results.iter().find(|m| {
                    m.precision == precision
                        && m.mix == mix
                        && m.threads == threads as u32
                        && m.clock_hz_per_thread.len() == threads
                });
                let (clocks, clock_name) = match measured {
                    Some(m) => (
                        m.clock_hz_per_thread.clone(),
                        format!(
                            "clock of {}: {}",
                            m.kernel.split(':').next().unwrap_or("its kernel"),
                            if m.clock_method.is_empty() {
                                "measured right after blocks of it"
                            } else {
                                &m.clock_method
                            }
                        ),
                    ),
                    None => (
                        scalar_clocks_for(threads),
                        "scalar sustained clock (no kernel for this precision)".to_string(),
                    ),
                };
                if clocks.len() != threads {
                    continue;
                }
                let clock_sum: f64 = clocks.iter().sum();
                theoretical.push(TheoreticalPeak {
                    precision,
                    mix,
                    threads: threads as u32,
                    vector_bits: bits,
                    flops_per_cycle: per_cycle,
                    clock_hz_sum: clock_sum,
                    flops_per_s: microarch::theoretical_flops(per_cycle, &clocks),
                    derivation: format!(
                        "{per_cycle} {unit}/cycle/core at {bits} bits ({model}) × {threads} \
                         thread(s) × {clock_name} ({ghz:.2} GHz average)",
                        unit = if precision == Precision::Int8 {
                            "OP"
                        } else {
                            "FLOP"
                        },
                        model = cpu.core_model.name,
                        ghz = clock_sum / clocks.len() as f64 / 1e9,
                    ),
                });
            }
        }
    }
    end_phase("theoretical peaks");

    // Bandwidth.
    let mut sweeps = Vec::new();
    let mut memory_levels = Vec::new();
    let mut dram = Vec::new();
    for (index, &threads) in thread_counts.iter().enumerate() {
        let (mut new_sweeps, mut new_levels, check, mut new_warnings) = measure_bandwidth(
            &bandwidth_kernels,
            &description,
            &cpus[..threads],
            &grids[index],
            &settings,
            &mut tracker,
        )?;
        sweeps.append(&mut new_sweeps);
        memory_levels.append(&mut new_levels);
        dram.push(check);
        warnings.append(&mut new_warnings);
        end_phase(&format!("bandwidth, {threads} thread(s)"));
    }

    let dispatch = dispatch::measure(
        &cpus,
        settings.dispatch_rounds,
        &bandwidth_kernels,
        compute::shared_core_kernel(&compute_kernels),
    )?;
    tracker.step("dispatch overhead".into());
    end_phase("dispatch");
    let gpus = gpu::discover();
    tracker.step("GPUs".into());
    end_phase("GPU discovery");

    let noisy = compute_results
        .iter()
        .filter(|c| c.flags.contains(&MeasurementFlag::Noisy))
        .count()
        + memory_levels
            .iter()
            .filter(|l| l.flags.contains(&MeasurementFlag::Noisy))
            .count();
    if noisy > 0 {
        warnings.push(format!(
            "{noisy} figure(s) stayed noisy after re-measuring (best more than 3-5% above the \
             median): other work shares these cores; the best sample is reported"
        ));
    }
    let contended: Vec<String> = compute_results
        .iter()
        .filter(|c| c.flags.contains(&MeasurementFlag::Contended))
        .map(|c| format!("{} {}", c.precision.name(), c.mix.name()))
        .chain(
            memory_levels
                .iter()
                .filter(|l| l.flags.contains(&MeasurementFlag::Contended))
                .map(|l| format!("{} {}", l.level.name(), l.kernel.name())),
        )
        .collect();
    if !contended.is_empty() {
        warnings.push(format!(
            "{} on {} threads: each thread reached its full rate alone but not all at once \
             (other work shares these cores); see the per-thread figures",
            contended.join(", "),
            cpus.len()
        ));
    }
    for level in [
        MemoryLevel::L1,
        MemoryLevel::L2,
        MemoryLevel::L3,
        MemoryLevel::Dram,
    ] {
        for &threads in &thread_counts {
            let mut figures = memory_levels
                .iter()
                .filter(|l| l.level == level && l.threads == threads as u32)
                .peekable();
            let undetected = figures.peek().is_some()
                && figures.all(|l| l.flags.contains(&MeasurementFlag::NotDetected));
            if undetected {
                warnings.push(format!(
                    "{} on {threads} thread(s): no plateau found; the figure is read at the \
                     cache-size guide instead",
                    level.name()
                ));
            }
        }
    }
    for warning in &warnings {
        tracker.note(warning.clone());
    }

    let record = ProbeRecord {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        measured_at: rfc3339_utc(SystemTime::now()),
        mode: if options.quick { "quick" } else { "full" }.to_string(),
        wall_time_s: started.elapsed().as_secs_f64(),
        phases,
        cpu: description,
        cores,
        clock,
        core_model: cpu.core_model.record(),
        theoretical,
        compute: compute_results,
        sweeps,
        memory_levels,
        dram,
        dispatch,
        counters: counter_report,
        gpus,
        warnings,
    };
    let profile = build_profile(record);
    profile.validate().map_err(ProbeError::InvalidProfile)?;
    Ok(profile)
}

/// One compute kernel's measurement on a team ([`measure::measure_compute`]).
struct ComputeOutcome {
    timing: TeamTiming,
    /// Each thread's clock from a chain right after blocks of the kernel.
    after_clocks: Vec<f64>,
    /// Each thread's clock from the kernel's paced twin (empty without a twin).
    paced_clocks: Vec<f64>,
    check: Option<Result<CounterCheck, String>>,
}

/// The saved local profile, or a quick probe saved for next time when there is none (or the
/// saved one no longer loads).
pub fn load_or_probe_local() -> Result<DeviceProfile, ProbeError> {
    let path = default_profile_path().ok_or(ProbeError::NoCacheDir)?;
    // Only a missing profile is probed anew: a corrupt or implausible one is reported, since a
    // silent re-probe costs seconds and gigabytes and hides whatever damaged the file.
    match DeviceProfile::load(&path) {
        Ok(profile) => return Ok(profile),
        Err(ProfileError::Io { cause, .. }) if cause.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(ProbeError::UnusableSavedProfile(err)),
    }
    let profile = run_probe(
        &ProbeOptions {
            quick: true,
            threads: None,
        },
        &mut |_| {},
    )?;
    profile.save(&path)?;
    Ok(profile)
}

/// RFC 3339 timestamp in UTC, from the civil-calendar conversion of days since 1970.
pub(crate) fn rfc3339_utc(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    // Shift the epoch to 0000-03-01 so leap days fall at the end of the (March-based) year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (leap day) 12:34:56.
        let leap = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(rfc3339_utc(leap), "2000-02-29T12:34:56Z");
        let later = UNIX_EPOCH + Duration::from_secs(1_798_761_600);
        assert_eq!(rfc3339_utc(later), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(fmt_bytes_binary(48 * 1024), "48 KiB");
        assert_eq!(fmt_bytes_binary(1536 * 1024), "1.5 MiB");
        assert_eq!(fmt_bytes_binary(512), "512 B");
    }

    #[test]
    fn sweep_reaches_past_the_last_cache() {
        let description = CpuDescription {
            caches: vec![CacheInfo {
                level: 3,
                kind: "unified".into(),
                size_bytes: 32 << 20,
                shared_by_cpus: 2,
                line_bytes: 64,
                source: "test".into(),
            }],
            ..CpuDescription::default()
        };
        let settings = Settings::for_mode(true, Instant::now());
        let sizes = sweep_sizes(
            &description,
            2,
            settings.dram_factor,
            settings.points_per_octave,
            settings.sweep_cap_total,
        );
        assert_eq!(sizes.first(), Some(&4096));
        let largest_total = sizes.last().copied().unwrap_or(0) * 2;
        assert!(largest_total as u64 >= 4 * (32 << 20));
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
    }

    /// A guest that reports its socket's 260 MiB L3 (or a 1 GiB one) as shared by every vCPU
    /// must not make the sweep, or the buffers behind it, grow with it.
    #[test]
    fn sweep_memory_is_capped_whatever_the_reported_cache() {
        const MIB: u64 = 1 << 20;
        for l3 in [260 * MIB, 1024 * MIB] {
            let description = CpuDescription {
                caches: vec![
                    CacheInfo {
                        level: 2,
                        kind: "unified".into(),
                        size_bytes: 2 * MIB,
                        shared_by_cpus: 1,
                        line_bytes: 64,
                        source: "test".into(),
                    },
                    CacheInfo {
                        level: 3,
                        kind: "unified".into(),
                        size_bytes: l3,
                        shared_by_cpus: 16,
                        line_bytes: 64,
                        source: "test".into(),
                    },
                ],
                memory_bytes: Some(512 << 30),
                ..CpuDescription::default()
            };
            for (quick, budget) in [(true, 384 * MIB), (false, 768 * MIB)] {
                let settings = Settings::for_mode(quick, Instant::now());
                assert!(settings.sweep_cap_total <= budget);
                for threads in [1usize, 2, 16] {
                    let mut largest = 0;
                    for per_octave in [settings.points_per_octave, settings.other_points_per_octave]
                    {
                        let sizes = sweep_sizes(
                            &description,
                            threads,
                            settings.dram_factor,
                            per_octave,
                            settings.sweep_cap_total,
                        );
                        largest = largest.max(sizes.last().copied().unwrap_or(0));
                    }
                    let planned = (largest * threads) as u64;
                    assert!(
                        planned <= budget,
                        "L3 {l3}, quick {quick}, {threads} thread(s): plans {planned} bytes"
                    );
                    // The buffers are sized for the largest working set the sweep may grow to:
                    // the cap, plus the gaps between arrays.
                    let per_thread = sweep_cap_per_thread(
                        &description,
                        threads,
                        settings.sweep_cap_total,
                        largest,
                    );
                    let buffers = (buffer_bytes_for(per_thread) * threads) as u64;
                    assert!(
                        buffers <= budget + (threads as u64) * MIB,
                        "L3 {l3}, quick {quick}, {threads} thread(s): {buffers} buffer bytes"
                    );
                }
            }
        }
        // A small machine: a quarter of its memory at most.
        let small = CpuDescription {
            memory_bytes: Some(1 << 30),
            ..CpuDescription::default()
        };
        let settings = Settings::for_mode(false, Instant::now());
        let sizes = sweep_sizes(&small, 1, 8, 3.0, settings.sweep_cap_total);
        assert!(sizes.last().copied().unwrap_or(0) as u64 <= 256 * MIB);
    }
}
