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
mod gpu;
mod microarch;
pub mod plateau;
mod record;
mod summary;
mod team;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::device::profile::ProfileError;
use crate::device::{
    ComputeCeiling, DeviceKind, DeviceProfile, MemoryCeiling, MemoryLevel, Precision,
    ProfileSource, PROFILE_SCHEMA_VERSION,
};

pub use microarch::{CoreModel, PerWidth};
pub use record::*;
pub use summary::render_summary;

use bandwidth::{BandwidthKernels, ThreadBuffers};
use compute::ComputeKernel;
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
    /// Sweep points per doubling of the working set: read kernel, other kernels.
    points_per_octave: f64,
    other_points_per_octave: f64,
    /// Largest planned working set, as a multiple of the last-level cache the threads reach.
    dram_factor: u64,
    /// How far the sweep may grow past the plan looking for the DRAM plateau (all threads'
    /// bytes), and until when.
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
                points_per_octave: 2.0,
                other_points_per_octave: 2.0,
                dram_factor: 6,
                sweep_cap_total: 512 << 20,
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
                points_per_octave: 3.0,
                other_points_per_octave: 2.0,
                dram_factor: 8,
                sweep_cap_total: 1 << 30,
                extend_until,
                sweep_every_kernel: true,
                dispatch_rounds: 20_000,
            }
        }
    }
}

/// A figure above its theoretical peak by more than this is flagged: the clock is measured
/// seconds apart from the kernels, so a few percent of drift is not a bug.
const ABOVE_THEORY_TOLERANCE: f64 = 1.03;

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
                ),
                sweep_sizes(
                    &cpu.description,
                    n,
                    settings.dram_factor,
                    settings.other_points_per_octave,
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
    let phase_clock_of = |cpu: usize| -> f64 {
        clock
            .all_threads
            .iter()
            .chain(clock.single_thread.iter())
            .filter(|c| c.cpu == cpu)
            .map(|c| c.max_hz)
            .fold(0.0, f64::max)
    };
    let clocks_for = |threads: usize| -> Vec<f64> {
        if threads == 1 {
            clock.single_thread.iter().map(|c| c.max_hz).collect()
        } else {
            clock.all_threads.iter().map(|c| c.max_hz).collect()
        }
    };

    // Theoretical peaks for every precision the CPU has, FMA-only and FMA+ADD.
    let mut theoretical = Vec::new();
    for &threads in &thread_counts {
        let clocks = clocks_for(threads);
        if clocks.len() != threads {
            continue;
        }
        for precision in Precision::ALL {
            for mix in [ComputeMix::Fma, ComputeMix::FmaAdd] {
                if mix == ComputeMix::FmaAdd
                    && !matches!(precision, Precision::Fp64 | Precision::Fp32)
                {
                    continue;
                }
                let widths = cpu.isa.widths_for(precision);
                let Some((per_cycle, bits)) =
                    cpu.core_model.flops_per_cycle(precision, mix, &widths)
                else {
                    continue;
                };
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
                         thread(s) × measured sustained clock ({ghz:.2} GHz average)",
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

    // Compute kernels.
    let mut compute_results: Vec<ComputeMeasurement> = Vec::new();
    for kernel in &compute_kernels {
        let mut queue: std::collections::VecDeque<usize> = thread_counts.iter().copied().collect();
        let mut retried_single = false;
        while let Some(threads) = queue.pop_front() {
            let count = threads == 1 && counters_usable.is_ok() && !retried_single;
            let (timing, clocks, check) = measure_compute(
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
            // Theory at the clock the threads ran at around this very measurement, or the
            // clock phase's fastest sample of that CPU if higher: the peak must stay an upper
            // bound even when the samples next to the kernel were slowed by other work.
            let clocks: Vec<f64> = clocks
                .iter()
                .zip(&cpus[..threads])
                .map(|(&near, cpu)| near.max(phase_clock_of(*cpu)))
                .collect();
            let widths = cpu.isa.widths_for(kernel.precision);
            let theory = cpu
                .core_model
                .flops_per_cycle(kernel.precision, kernel.mix, &widths)
                .filter(|_| clocks.len() == threads && clocks.iter().all(|&hz| hz > 0.0))
                .map(|(per_cycle, _)| microarch::theoretical_flops(per_cycle, &clocks));
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
            if threads > 1 && !retried_single {
                let best_in_team = timing.per_thread_best.iter().copied().fold(0.0, f64::max);
                let single = compute_results.iter().find(|m| {
                    m.precision == kernel.precision && m.mix == kernel.mix && m.threads == 1
                });
                let rerun_allowed = settings
                    .compute
                    .rerun_until
                    .is_none_or(|deadline| Instant::now() < deadline);
                if single.is_some_and(|m| m.flops_per_s < 0.97 * best_in_team) && rerun_allowed {
                    queue.push_back(1);
                    retried_single = true;
                }
            }
        }
    }

    end_phase("compute kernels");

    // Bandwidth.
    let mut sweeps = Vec::new();
    let mut memory_levels = Vec::new();
    for (index, &threads) in thread_counts.iter().enumerate() {
        let (mut new_sweeps, mut new_levels, mut new_warnings) = measure_bandwidth(
            &bandwidth_kernels,
            &description,
            &cpus[..threads],
            &grids[index],
            &settings,
            &mut tracker,
        )?;
        sweeps.append(&mut new_sweeps);
        memory_levels.append(&mut new_levels);
        warnings.append(&mut new_warnings);
        end_phase(&format!("bandwidth, {threads} thread(s)"));
    }

    let dispatch = dispatch::measure(&cpus, settings.dispatch_rounds)?;
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
        dispatch,
        counters: counter_report,
        gpus,
        warnings,
    };
    let profile = build_profile(record);
    profile.validate().map_err(ProbeError::InvalidProfile)?;
    Ok(profile)
}

type ComputeOutcome = (TeamTiming, Vec<f64>, Option<Result<CounterCheck, String>>);

/// Times one compute kernel on `cpus`, with each thread's clock sampled right before and
/// right after, so its theoretical peak uses the clock it really ran at.
fn measure_compute(
    kernel: &ComputeKernel,
    cpus: &[usize],
    settings: &Settings,
    count_as: Option<(String, u32)>,
) -> Result<ComputeOutcome, ProbeError> {
    let (results, _) = run_team(cpus, |worker| {
        let clock_samples = (settings.clock_samples / 3).max(3);
        let before = clock::sample_clock(worker, clock_samples, settings.clock_sample_s);
        let timing = worker.time(
            &settings.compute,
            kernel.flops_per_iteration,
            |iterations| kernel.run(iterations),
        );
        let after = clock::sample_clock(worker, clock_samples, settings.clock_sample_s);
        let clock = before
            .iter()
            .chain(after.iter())
            .map(|c| c.max_hz)
            .reduce(f64::max);
        // Counted on the measuring thread itself, after the timed samples.
        let check = match (&count_as, worker.index) {
            (Some((vendor, family)), 0) => Some(counters::check_kernel(
                kernel,
                timing.passes,
                vendor,
                *family,
            )),
            _ => None,
        };
        (timing, clock, check)
    })?;
    let clocks: Vec<f64> = results.iter().filter_map(|(_, clock, _)| *clock).collect();
    let Some((timing, _, check)) = results.into_iter().next() else {
        return Err(ProbeError::NoUsableCpu);
    };
    Ok((timing, clocks, check))
}

/// The last-level cache `threads` threads may reach together: the shared total the CPU
/// reports, or one instance per thread if that is more. Virtual machines report one shared L3
/// for vCPUs that run on different dies (seen on the development machine).
fn reachable_last_cache(description: &CpuDescription, threads: usize) -> u64 {
    let shared_total = cpu::cache_guide(description, threads)
        .capacities
        .last()
        .map(|&(_, bytes)| bytes)
        .unwrap_or(32 << 20);
    let one_per_thread = description
        .caches
        .iter()
        .max_by_key(|c| c.level)
        .map(|c| c.size_bytes * threads as u64)
        .unwrap_or(0);
    shared_total.max(one_per_thread)
}

/// Per-thread working sets of the sweep: from 4 KiB in `points_per_octave` steps per doubling
/// to `dram_factor` × the last-level cache the threads may reach (at least 64 MiB in all), so
/// the DRAM plateau lies wholly past the cache. "May reach" assumes each thread could sit on a
/// die with its own last-level cache: virtual machines report one shared L3 for vCPUs that run
/// on different dies (seen on the development machine), and a sweep sized for one L3 then
/// ends inside the second one.
fn sweep_sizes(
    description: &CpuDescription,
    threads: usize,
    dram_factor: u64,
    points_per_octave: f64,
) -> Vec<usize> {
    let largest_total = (reachable_last_cache(description, threads) * dram_factor).max(64 << 20);
    let largest_per_thread = largest_total as f64 / threads as f64;
    let mut sizes = Vec::new();
    let mut step = 0.0;
    loop {
        let bytes = 4096.0 * 2f64.powf(step / points_per_octave);
        if bytes > largest_per_thread * 1.0001 {
            break;
        }
        let rounded =
            (bytes as usize).div_ceil(bandwidth::ARRAY_GRANULE) * bandwidth::ARRAY_GRANULE;
        if sizes.last() != Some(&rounded) {
            sizes.push(rounded);
        }
        step += 1.0;
    }
    sizes
}

/// One bandwidth point: `kernel` over `working_set_per_thread` bytes on every thread.
fn measure_point(
    kernels: &BandwidthKernels,
    buffers: &ThreadBuffers,
    cpus: &[usize],
    kernel: BandwidthKernel,
    working_set_per_thread: usize,
    plan: &SamplePlan,
) -> Result<Option<(u64, TeamTiming)>, ProbeError> {
    let per_array = bandwidth::bytes_per_array(kernel, working_set_per_thread);
    let per_thread = per_array * kernel.arrays();
    let (mut results, _) = run_team(cpus, |worker| {
        let slot = buffers.buffers.get(worker.index)?;
        let mut buffer = slot.lock().unwrap_or_else(|p| p.into_inner());
        let mut ran = true;
        let timing = worker.time(plan, per_thread as f64, |passes| {
            ran &= kernels.run(kernel, &mut buffer, per_array, passes);
        });
        ran.then_some(timing)
    })?;
    // Every thread must have run for the team figure to mean anything.
    if results.iter().any(Option::is_none) || results.is_empty() {
        return Ok(None);
    }
    let timing = results.swap_remove(0);
    Ok(timing.map(|t| ((per_thread * cpus.len()) as u64, t)))
}

/// Sweeps, level figures and warnings of one thread count.
type BandwidthOutcome = (Vec<BandwidthSweep>, Vec<LevelBandwidth>, Vec<String>);

/// Sweeps and plateaus for one thread count.
fn measure_bandwidth(
    kernels: &BandwidthKernels,
    description: &CpuDescription,
    cpus: &[usize],
    (read_sizes, other_sizes): &(Vec<usize>, Vec<usize>),
    settings: &Settings,
    tracker: &mut Tracker,
) -> Result<BandwidthOutcome, ProbeError> {
    let threads = cpus.len();
    let mut warnings = Vec::new();
    let guide = cpu::cache_guide(description, threads);
    let last_cache = guide.capacities.last().map(|&(_, b)| b).unwrap_or(0);
    let planned_largest = read_sizes
        .iter()
        .chain(other_sizes)
        .copied()
        .max()
        .unwrap_or(4096);
    // The sweep may grow past the plan until it finds the DRAM plateau (a virtual machine can
    // reach more cache than it reports): up to the mode's cap, at most a quarter of memory.
    let memory_cap = description.memory_bytes.unwrap_or(4 << 30) / 4;
    let cap_per_thread =
        ((settings.sweep_cap_total.min(memory_cap) / threads as u64) as usize).max(planned_largest);
    let buffer_for = |per_thread: usize| {
        BandwidthKernel::ALL
            .iter()
            .map(|&k| bandwidth::buffer_bytes_needed(k, bandwidth::bytes_per_array(k, per_thread)))
            .max()
            .unwrap_or(per_thread)
    };
    // Allocated for the cap but only pre-faulted as far as the sweep goes, by the thread that
    // uses each buffer (first touch places its pages near it).
    let buffers = ThreadBuffers::new(threads, buffer_for(cap_per_thread))?;
    let fault_to = |per_thread: usize| {
        run_team(cpus, |worker| {
            if let Some(slot) = buffers.buffers.get(worker.index) {
                slot.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .prefault_prefix(buffer_for(per_thread));
            }
        })
        .map(|_| ())
    };
    fault_to(planned_largest)?;
    // Non-temporal stores only make sense once the arrays no longer fit the caches.
    let nt_from = |total: u64| total > 2 * last_cache;

    let swept: Vec<BandwidthKernel> = if settings.sweep_every_kernel {
        BandwidthKernel::ALL
            .iter()
            .copied()
            .filter(|&k| kernels.has(k))
            .collect()
    } else {
        vec![BandwidthKernel::Read]
    };
    let mut sweeps = Vec::new();
    let mut extension: Vec<usize> = Vec::new();
    for &kernel in &swept {
        let mut sweep = BandwidthSweep {
            kernel,
            threads: threads as u32,
            isa: kernels.isa.to_string(),
            points: Vec::new(),
            plateaus: Vec::new(),
        };
        let sizes: Vec<usize> = if kernel == BandwidthKernel::Read {
            read_sizes.clone()
        } else {
            // The other kernels follow the read sweep wherever it had to extend.
            let mut sizes = other_sizes.clone();
            sizes.extend(extension.iter().copied());
            sizes
        };
        for &size in &sizes {
            if kernel.non_temporal() && !nt_from((size * threads) as u64) {
                continue;
            }
            if let Some((total, timing)) =
                measure_point(kernels, &buffers, cpus, kernel, size, &settings.bandwidth)?
            {
                sweep.points.push(SweepPoint {
                    working_set_bytes: total,
                    bytes_per_s: timing.stats.best,
                    spread: timing.stats.spread,
                    noisy: timing.noisy,
                    contended: timing.contended,
                });
            }
            tracker.step(format!(
                "{} {} on {threads} thread(s)",
                kernel.name(),
                format_bytes(size as u64 * threads as u64)
            ));
        }
        if kernel == BandwidthKernel::Read {
            // Extend past the plan, half an octave at a time, until the curve ends on a
            // plateau wholly beyond the last-level cache.
            let mut size = sizes.last().copied().unwrap_or(4096);
            while !has_dram_plateau(&sweep.points, &guide) {
                size = (size as f64 * 2f64.sqrt()) as usize / bandwidth::ARRAY_GRANULE
                    * bandwidth::ARRAY_GRANULE;
                if size > cap_per_thread || Instant::now() >= settings.extend_until {
                    break;
                }
                fault_to(size)?;
                if let Some((total, timing)) =
                    measure_point(kernels, &buffers, cpus, kernel, size, &settings.bandwidth)?
                {
                    sweep.points.push(SweepPoint {
                        working_set_bytes: total,
                        bytes_per_s: timing.stats.best,
                        spread: timing.stats.spread,
                        noisy: timing.noisy,
                        contended: timing.contended,
                    });
                }
                extension.push(size);
                tracker.step(format!(
                    "{} {} on {threads} thread(s) (past the plan: no DRAM plateau yet)",
                    kernel.name(),
                    format_bytes(size as u64 * threads as u64)
                ));
            }
        }
        sweep.plateaus = find_plateaus(&sweep.points, &guide);
        if kernel == BandwidthKernel::Read {
            for hidden in plateau::unreported_cache_plateaus(&sweep.plateaus, &guide) {
                warnings.push(format!(
                    "{threads} thread(s): a {:.0} GB/s plateau at {}-{} lies past the reported \
                     last-level cache and before DRAM: the threads reach cache the CPU does not \
                     report (vCPUs on different dies?)",
                    hidden.bytes_per_s / 1e9,
                    format_bytes(hidden.working_set_lo_bytes),
                    format_bytes(hidden.working_set_hi_bytes)
                ));
            }
        }
        sweeps.push(sweep);
    }

    let mut levels = Vec::new();
    for sweep in &sweeps {
        levels.extend(level_figures(
            sweep,
            &guide,
            reachable_last_cache(description, threads),
            kernel_is_dram_only(sweep.kernel),
        ));
    }

    if !settings.sweep_every_kernel {
        // Quick mode: the other kernels at the middle of each cache plateau the read sweep
        // found, and at the largest working set of its DRAM plateau (the least cache help).
        let read_levels: Vec<(MemoryLevel, u64)> = levels
            .iter()
            .filter(|l| l.kernel == BandwidthKernel::Read)
            .map(|l| {
                let centre =
                    ((l.working_set_lo_bytes as f64) * (l.working_set_hi_bytes as f64)).sqrt();
                match l.level {
                    MemoryLevel::Dram => (l.level, l.working_set_hi_bytes),
                    _ => (l.level, centre as u64),
                }
            })
            .collect();
        for (level, centre_total) in read_levels {
            for kernel in BandwidthKernel::ALL.into_iter().skip(1) {
                if !kernels.has(kernel) || (kernel.non_temporal() != (level == MemoryLevel::Dram)) {
                    continue;
                }
                let per_thread = (centre_total as usize / threads).max(4096);
                if let Some((total, timing)) = measure_point(
                    kernels,
                    &buffers,
                    cpus,
                    kernel,
                    per_thread,
                    &settings.bandwidth,
                )? {
                    let mut flags = Vec::new();
                    if timing.noisy {
                        flags.push(MeasurementFlag::Noisy);
                    }
                    if timing.contended {
                        flags.push(MeasurementFlag::Contended);
                    }
                    levels.push(LevelBandwidth {
                        level,
                        kernel,
                        threads: threads as u32,
                        bytes_per_s: timing.stats.best,
                        working_set_lo_bytes: total,
                        working_set_hi_bytes: total,
                        spread: timing.stats.spread,
                        flags,
                    });
                }
                tracker.step(format!(
                    "{} at {} on {threads} thread(s)",
                    kernel.name(),
                    level.name()
                ));
            }
        }
    }
    Ok((sweeps, levels, warnings))
}

fn kernel_is_dram_only(kernel: BandwidthKernel) -> bool {
    kernel.non_temporal()
}

fn has_dram_plateau(points: &[SweepPoint], guide: &CacheGuide) -> bool {
    plateau::ends_on_dram_plateau(&find_plateaus(points, guide), points.len())
}

fn find_plateaus(points: &[SweepPoint], guide: &CacheGuide) -> Vec<Plateau> {
    let curve: Vec<plateau::CurvePoint> = points
        .iter()
        .map(|p| plateau::CurvePoint {
            working_set_bytes: p.working_set_bytes,
            bytes_per_s: p.bytes_per_s,
        })
        .collect();
    let mut plateaus = plateau::detect_plateaus(&curve, &PlateauSettings::default());
    plateau::label_plateaus(&mut plateaus, guide);
    plateaus
}

/// The figure of each memory level in one sweep: the median of its labelled plateau. A cache
/// level whose bandwidth equals its neighbour's has no plateau of its own (one plateau spans
/// both, e.g. stores on Zen 4 run at the same rate into L1 and L2): it takes the points of the
/// spanning plateau inside its cache-size window. A level with neither gets the median of the
/// points in its window, flagged as not detected, so the profile still has every level.
fn level_figures(
    sweep: &BandwidthSweep,
    guide: &CacheGuide,
    reachable_cache: u64,
    dram_only: bool,
) -> Vec<LevelBandwidth> {
    let mut figures = Vec::new();
    let levels = [
        MemoryLevel::L1,
        MemoryLevel::L2,
        MemoryLevel::L3,
        MemoryLevel::Dram,
    ];
    let last_cache = guide.capacities.last().map(|&(_, b)| b).unwrap_or(0);
    let in_range = |first: usize, last: usize| -> Vec<&SweepPoint> {
        sweep
            .points
            .iter()
            .skip(first)
            .take(last + 1 - first)
            .collect()
    };
    for level in levels {
        if dram_only && level != MemoryLevel::Dram {
            continue;
        }
        // Window from the cache sizes: past the previous level, inside this one.
        let index = guide.capacities.iter().position(|&(l, _)| l == level);
        let lower = match index {
            Some(0) => 0,
            Some(i) => guide.capacities[i - 1].1 * 2,
            None => last_cache * 4,
        };
        let upper = match index {
            Some(i) => guide.capacities[i].1 / 2,
            None => u64::MAX,
        };
        fn within(points: Vec<&SweepPoint>, lower: u64, upper: u64) -> Vec<&SweepPoint> {
            points
                .into_iter()
                .filter(|p| p.working_set_bytes >= lower && p.working_set_bytes <= upper)
                .collect()
        }
        let window = |points| within(points, lower, upper);
        let labelled = sweep.plateaus.iter().find(|p| p.level == Some(level));
        let spanning = sweep.plateaus.iter().find(|p| {
            level != MemoryLevel::Dram
                && index.is_some()
                && !window(in_range(p.first_point, p.last_point)).is_empty()
        });
        let (points, mut flags): (Vec<&SweepPoint>, Vec<MeasurementFlag>) =
            match (labelled, spanning) {
                (Some(plateau), _) if level == MemoryLevel::Dram => {
                    // The first points past the cache may still hit it partly: keep those from
                    // four times the cache the threads may reach on, where there are enough.
                    let all = in_range(plateau.first_point, plateau.last_point);
                    let clear: Vec<&SweepPoint> = all
                        .iter()
                        .copied()
                        .filter(|p| p.working_set_bytes >= 4 * reachable_cache)
                        .collect();
                    (if clear.len() >= 2 { clear } else { all }, vec![])
                }
                (Some(plateau), _) => (in_range(plateau.first_point, plateau.last_point), vec![]),
                (None, Some(plateau)) => (
                    window(in_range(plateau.first_point, plateau.last_point)),
                    vec![],
                ),
                (None, None) => {
                    let mut inside = window(sweep.points.iter().collect());
                    let mut flags = vec![MeasurementFlag::NotDetected];
                    if inside.is_empty() && level == MemoryLevel::Dram {
                        // The sweep never left the caches far enough: take its largest point.
                        inside.extend(sweep.points.last());
                        flags.push(MeasurementFlag::SweepTooShort);
                    }
                    (inside, flags)
                }
            };
        if points.is_empty() {
            continue;
        }
        let mut values: Vec<f64> = points.iter().map(|p| p.bytes_per_s).collect();
        values.sort_by(f64::total_cmp);
        if points.iter().filter(|p| p.noisy).count() * 2 > points.len() {
            flags.push(MeasurementFlag::Noisy);
        }
        if points.iter().filter(|p| p.contended).count() * 2 > points.len() {
            flags.push(MeasurementFlag::Contended);
        }
        figures.push(LevelBandwidth {
            level,
            kernel: sweep.kernel,
            threads: sweep.threads,
            bytes_per_s: plateau::median_sorted(&values),
            working_set_lo_bytes: points.first().map(|p| p.working_set_bytes).unwrap_or(0),
            working_set_hi_bytes: points.last().map(|p| p.working_set_bytes).unwrap_or(0),
            spread: points.iter().map(|p| p.spread).fold(0.0, f64::max),
            flags,
        });
    }
    figures
}

/// Assembles the profile from the record: compute ceilings are the FMA-only figures (what
/// GEMM-like ops can use); memory ceilings take the best kernel per level and thread count.
fn build_profile(record: ProbeRecord) -> DeviceProfile {
    let mut compute = Vec::new();
    for measurement in record.compute.iter().filter(|m| m.mix == ComputeMix::Fma) {
        compute.push(ComputeCeiling {
            precision: measurement.precision,
            flops_per_s: measurement.flops_per_s,
            threads: Some(measurement.threads),
            theoretical_flops_per_s: measurement.theoretical_flops_per_s,
            source: format!(
                "measured by roofline probe: {} ({}), best of {} samples, {} pinned thread(s)",
                measurement.kernel, measurement.isa, measurement.stats.samples, measurement.threads
            ),
        });
    }
    let cache_size = |level: u8| {
        record
            .cpu
            .caches
            .iter()
            .find(|c| c.level == level)
            .map(|c| c.size_bytes)
    };
    let mut memory = Vec::new();
    let mut thread_counts: Vec<u32> = record.memory_levels.iter().map(|l| l.threads).collect();
    thread_counts.sort_unstable();
    thread_counts.dedup();
    for level in [
        MemoryLevel::L1,
        MemoryLevel::L2,
        MemoryLevel::L3,
        MemoryLevel::Dram,
    ] {
        for &threads in &thread_counts {
            let best = record
                .memory_levels
                .iter()
                .filter(|l| l.level == level && l.threads == threads && l.bytes_per_s > 0.0)
                .max_by(|a, b| a.bytes_per_s.total_cmp(&b.bytes_per_s));
            let Some(best) = best else { continue };
            let capacity_bytes = match level {
                MemoryLevel::L1 => cache_size(1),
                MemoryLevel::L2 => cache_size(2),
                MemoryLevel::L3 => cache_size(3),
                MemoryLevel::Dram => record.cpu.memory_bytes,
            };
            memory.push(MemoryCeiling {
                level,
                bytes_per_s: best.bytes_per_s,
                capacity_bytes,
                threads: Some(threads),
                source: format!(
                    "measured by roofline probe: {} kernel, working sets {}-{}, {} pinned \
                     thread(s){}",
                    best.kernel.name(),
                    format_bytes(best.working_set_lo_bytes),
                    format_bytes(best.working_set_hi_bytes),
                    threads,
                    if best.flags.contains(&MeasurementFlag::NotDetected) {
                        " (no plateau detected; read at the cache-size guide)"
                    } else {
                        ""
                    }
                ),
            });
        }
    }
    // A roof for N threads is at least one thread's: N threads can leave all but one idle.
    // When other work on the cores pushed the all-thread figure below that, one thread's
    // figure stands in for it, and the source says so.
    let floor_note = |measured: f64| {
        format!(
            "; the all-thread figure ({:.1} G/s) was below one thread's (other work on the \
             cores): one thread's figure is used",
            measured / 1e9
        )
    };
    let single_compute: Vec<(Precision, f64)> = compute
        .iter()
        .filter(|c| c.threads == Some(1))
        .map(|c| (c.precision, c.flops_per_s))
        .collect();
    for ceiling in compute.iter_mut().filter(|c| c.threads > Some(1)) {
        if let Some(&(_, single)) = single_compute.iter().find(|(p, _)| *p == ceiling.precision) {
            if ceiling.flops_per_s < single {
                ceiling.source.push_str(&floor_note(ceiling.flops_per_s));
                ceiling.flops_per_s = single;
            }
        }
    }
    let single_memory: Vec<(MemoryLevel, f64)> = memory
        .iter()
        .filter(|m| m.threads == Some(1))
        .map(|m| (m.level, m.bytes_per_s))
        .collect();
    for ceiling in memory.iter_mut().filter(|m| m.threads > Some(1)) {
        if let Some(&(_, single)) = single_memory.iter().find(|(l, _)| *l == ceiling.level) {
            if ceiling.bytes_per_s < single {
                ceiling.source.push_str(&floor_note(ceiling.bytes_per_s));
                ceiling.bytes_per_s = single;
            }
        }
    }
    let threads_used = record.cores.threads_used;
    let mut sources = vec![format!(
        "roofline probe {} ({} mode, {}): microbenchmarks on this machine",
        record.tool_version, record.mode, record.measured_at
    )];
    sources.push(format!(
        "theoretical peaks: {} — {}",
        record.core_model.name, record.core_model.source
    ));
    let notes = format!(
        "Compute ceilings are FMA-only (dot-product for bf16/int8) figures; FMA+ADD figures \
         and every sample are in probe.compute. Capacities: L1 and L2 per core, L3 per \
         instance, DRAM total. Sustained clock {:.2} GHz on one thread (TSC {}).",
        record
            .clock
            .single_thread
            .as_ref()
            .map(|c| c.max_hz / 1e9)
            .unwrap_or(0.0),
        record
            .cpu
            .tsc_hz
            .map(|hz| format!("{:.2} GHz", hz / 1e9))
            .unwrap_or_else(|| "unknown".into())
    );
    DeviceProfile {
        schema_version: PROFILE_SCHEMA_VERSION,
        id: "local".into(),
        name: format!("{} ({threads_used} threads)", record.cpu.model_name),
        kind: DeviceKind::Cpu,
        source: ProfileSource::Probed,
        compute,
        memory,
        launch_overhead_s: record.dispatch.launch_overhead_s(),
        l2_bytes: cache_size(3).or(cache_size(2)),
        launch_overhead_source: record.dispatch.chosen.clone(),
        sources,
        notes,
        probe: Some(record),
    }
}

/// `<user cache dir>/roofline/local.json`.
pub fn default_profile_path() -> Option<PathBuf> {
    dirs::cache_dir().map(|dir| dir.join("roofline").join("local.json"))
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

/// Bytes in binary units, e.g. `48 KiB`, `1.5 MiB`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", units[unit])
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// RFC 3339 timestamp in UTC, from the civil-calendar conversion of days since 1970.
fn rfc3339_utc(time: SystemTime) -> String {
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
        assert_eq!(format_bytes(48 * 1024), "48 KiB");
        assert_eq!(format_bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(format_bytes(512), "512 B");
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
        );
        assert_eq!(sizes.first(), Some(&4096));
        let largest_total = sizes.last().copied().unwrap_or(0) * 2;
        assert!(largest_total as u64 >= 4 * (32 << 20));
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
    }
}
