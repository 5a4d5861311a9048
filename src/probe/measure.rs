//! The measurement phases of a probe run: compute kernels per precision and thread count, and
//! the working-set sweep of every bandwidth kernel with the plateaus that name the memory
//! levels. `run_probe` (mod.rs) calls them in order; `assemble` turns their records into ceilings.

use super::*;

/// Times one compute kernel on `cpus`, with each thread's clock sampled right before and
/// right after, so its theoretical peak uses the clock it really ran at.
pub(super) fn measure_compute(
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
pub(super) fn reachable_last_cache(description: &CpuDescription, threads: usize) -> u64 {
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
pub(super) fn sweep_sizes(
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
pub(super) fn measure_point(
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
pub(super) fn measure_bandwidth(
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

pub(super) fn kernel_is_dram_only(kernel: BandwidthKernel) -> bool {
    kernel.non_temporal()
}

pub(super) fn has_dram_plateau(points: &[SweepPoint], guide: &CacheGuide) -> bool {
    plateau::ends_on_dram_plateau(&find_plateaus(points, guide), points.len())
}

pub(super) fn find_plateaus(points: &[SweepPoint], guide: &CacheGuide) -> Vec<Plateau> {
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
