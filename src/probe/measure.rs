//! The measurement phases of a probe run: compute kernels per precision and thread count, and
//! the working-set sweep of every bandwidth kernel with the plateaus that name the memory
//! levels. `run_probe` (mod.rs) calls them in order; `assemble` turns their records into ceilings.
//!
//! The sweep's bytes are capped over all threads (`Settings::sweep_cap_total`), so time and
//! memory do not grow with the caches a CPU reports. Main memory is read once more over buffers
//! flushed from every cache level: that figure decides whether the sweep's last plateau is
//! main memory or cache, and stands in for it when the sweep never left the caches.

use super::*;

/// Times one compute kernel on `cpus`, then measures the clock its instructions run at, two
/// ways: blocks of the kernel each followed at once by a short dependent-add chain, and the
/// kernel's paced twin (its instructions interleaved with a chain that bounds the loop;
/// `PacedLoop`). Its theoretical peak uses such a clock, not the scalar one: Intel cores
/// run dense 512-bit code at a lower clock, and a peak at the scalar clock would blame the
/// kernel for the hardware.
pub(super) fn measure_compute(
    kernel: &ComputeKernel,
    cpus: &[usize],
    settings: &Settings,
    count_as: Option<(String, u32)>,
) -> Result<ComputeOutcome, ProbeError> {
    let (results, _) = run_team(cpus, |worker| {
        // A chain after every timed sample, so the clock is sampled across the same window
        // the kernel's best sample comes from (turbo can drift within it), then a few more
        // rounds of block + chain.
        let mut clock_samples: Vec<f64> = Vec::new();
        let timing = worker.time_then(
            &settings.compute,
            kernel.flops_per_iteration,
            |iterations| kernel.run(iterations),
            || clock_samples.extend(clock::chain_clock_now()),
        );
        // One load block is one timed sample's worth of the kernel (1-2 ms).
        let after_blocks = clock::clock_after_load(worker, settings.vector_clock_samples, || {
            kernel.run(timing.passes)
        })
        .map(|stats| stats.max_hz);
        let clock = clock_samples
            .into_iter()
            .chain(after_blocks)
            .reduce(f64::max);
        let paced = kernel.paced.and_then(|paced| {
            clock::clock_paced(
                worker,
                settings.vector_clock_samples,
                settings.compute.target_s,
                paced.adds_per_iteration,
                || kernel.run(timing.passes),
                |iterations| kernel.run_paced(iterations),
            )
        });
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
        (timing, clock, paced.map(|stats| stats.max_hz), check)
    })?;
    let after_clocks: Vec<f64> = results
        .iter()
        .filter_map(|(_, clock, _, _)| *clock)
        .collect();
    let paced_clocks: Vec<f64> = results
        .iter()
        .filter_map(|(_, _, paced, _)| *paced)
        .collect();
    let Some((timing, _, _, check)) = results.into_iter().next() else {
        return Err(ProbeError::NoUsableCpu);
    };
    Ok(ComputeOutcome {
        timing,
        after_clocks,
        paced_clocks,
        check,
    })
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

/// Bytes per thread of the flushed main-memory measurement: a pass lasts milliseconds (well
/// above the timer's resolution, the prefetchers in steady state) and the flush before it
/// costs little; bounded by the sweep's cap on machines with many threads.
const FLUSHED_BYTES_PER_THREAD: usize = 64 << 20;

/// All threads' bytes a sweep may use: the mode's cap, and at most a quarter of memory.
fn sweep_cap(description: &CpuDescription, cap_total: u64) -> u64 {
    cap_total.min(description.memory_bytes.unwrap_or(4 << 30) / 4)
}

/// Per-thread working sets of the sweep: from 4 KiB in `points_per_octave` steps per doubling
/// to `dram_factor` × the last-level cache the threads may reach (at least 64 MiB in all), so
/// the DRAM plateau lies wholly past the cache. "May reach" assumes each thread could sit on a
/// die with its own last-level cache: virtual machines report one shared L3 for vCPUs that run
/// on different dies (seen on the development machine), and a sweep sized for one L3 then
/// ends inside the second one. All threads together stay within `cap_total` (and a quarter of
/// memory) whatever the CPU reports: a guest can report its whole socket's L3 (260 MiB), and
/// time and memory must not grow with it. Main memory is then found by the flushed
/// measurement, not by going past the cache.
pub(super) fn sweep_sizes(
    description: &CpuDescription,
    threads: usize,
    dram_factor: u64,
    points_per_octave: f64,
    cap_total: u64,
) -> Vec<usize> {
    let wanted = reachable_last_cache(description, threads)
        .saturating_mul(dram_factor)
        .max(64 << 20);
    let largest_total = wanted.min(sweep_cap(description, cap_total));
    let largest_per_thread = largest_total as f64 / threads.max(1) as f64;
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

/// Largest working set per thread a sweep may reach: the cap shared out among the threads.
/// The sweep may grow past its plan until it finds the DRAM plateau (a virtual machine can
/// reach more cache than it reports), but not past this.
pub(super) fn sweep_cap_per_thread(
    description: &CpuDescription,
    threads: usize,
    cap_total: u64,
    planned_largest: usize,
) -> usize {
    ((sweep_cap(description, cap_total) / threads.max(1) as u64) as usize).max(planned_largest)
}

/// Buffer bytes one thread needs for every kernel at `per_thread` bytes of working set.
pub(super) fn buffer_bytes_for(per_thread: usize) -> usize {
    BandwidthKernel::ALL
        .iter()
        .map(|&k| bandwidth::buffer_bytes_needed(k, bandwidth::bytes_per_array(k, per_thread)))
        .max()
        .unwrap_or(per_thread)
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

/// Like `measure_point`, but each sample is one pass right after the arrays were flushed from
/// every cache level: the rate of main memory, however large the caches are. `None` where the
/// CPU has no flush instruction.
pub(super) fn measure_flushed(
    kernels: &BandwidthKernels,
    buffers: &ThreadBuffers,
    cpus: &[usize],
    kernel: BandwidthKernel,
    working_set_per_thread: usize,
    plan: &SamplePlan,
) -> Result<Option<(u64, TeamTiming)>, ProbeError> {
    if kernels.flush.is_none() {
        return Ok(None);
    }
    let per_array = bandwidth::bytes_per_array(kernel, working_set_per_thread);
    let per_thread = per_array * kernel.arrays();
    let (mut results, _) = run_team(cpus, |worker| {
        let slot = buffers.buffers.get(worker.index)?;
        let mut buffer = slot.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = (&mut *buffer, true);
        let timing = worker.time_cold(
            plan,
            per_thread as f64,
            &mut state,
            |(buffer, ok)| *ok &= kernels.flush_arrays(kernel, buffer, per_array),
            |(buffer, ok)| *ok &= kernels.run(kernel, buffer, per_array, 1),
        );
        state.1.then_some(timing)
    })?;
    if results.iter().any(Option::is_none) || results.is_empty() {
        return Ok(None);
    }
    let timing = results.swap_remove(0);
    Ok(timing.map(|t| ((per_thread * cpus.len()) as u64, t)))
}

/// Sweeps, level figures, the main-memory check and warnings of one thread count.
type BandwidthOutcome = (
    Vec<BandwidthSweep>,
    Vec<LevelBandwidth>,
    DramCheck,
    Vec<String>,
);

fn flags_of(timing: &TeamTiming) -> Vec<MeasurementFlag> {
    let mut flags = Vec::new();
    if timing.noisy {
        flags.push(MeasurementFlag::Noisy);
    }
    if timing.contended {
        flags.push(MeasurementFlag::Contended);
    }
    flags
}

/// Sweeps and plateaus for one thread count, and main memory's figures: the read sweep's last
/// plateau when reading a flushed buffer confirms it is memory, else the flushed buffer's.
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
    let cap_per_thread = sweep_cap_per_thread(
        description,
        threads,
        settings.sweep_cap_total,
        planned_largest,
    );
    // Allocated for the cap but only pre-faulted as far as the sweep goes, by the thread that
    // uses each buffer (first touch places its pages near it).
    let buffers = ThreadBuffers::new(threads, buffer_bytes_for(cap_per_thread))?;
    let fault_to = |per_thread: usize| {
        run_team(cpus, |worker| {
            if let Some(slot) = buffers.buffers.get(worker.index) {
                slot.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .prefault_prefix(buffer_bytes_for(per_thread));
            }
        })
        .map(|_| ())
    };
    let flushed_per_thread = FLUSHED_BYTES_PER_THREAD.min(cap_per_thread);
    fault_to(planned_largest.max(flushed_per_thread))?;

    // Main memory first, over flushed buffers: the reference the sweep's plateaus are judged by.
    // Twice the samples of a sweep point: one sample is one pass (a few ms with its flush),
    // and a best of more has better odds of a sample no other work disturbed.
    let flushed_plan = SamplePlan {
        samples: settings.bandwidth.samples * 2,
        ..settings.bandwidth
    };
    let mut flushed = |kernel: BandwidthKernel| -> Result<Option<LevelBandwidth>, ProbeError> {
        let measured = measure_flushed(
            kernels,
            &buffers,
            cpus,
            kernel,
            flushed_per_thread,
            &flushed_plan,
        )?;
        if kernels.flush.is_some() {
            tracker.step(format!(
                "{} over {} flushed from the caches on {threads} thread(s)",
                kernel.name(),
                fmt_bytes_binary((flushed_per_thread * threads) as u64)
            ));
        }
        Ok(measured.map(|(total, timing)| LevelBandwidth {
            level: MemoryLevel::Dram,
            kernel,
            threads: threads as u32,
            bytes_per_s: timing.stats.best,
            working_set_lo_bytes: total,
            working_set_hi_bytes: total,
            spread: timing.stats.spread,
            flags: flags_of(&timing),
            method: FigureMethod::Flushed,
        }))
    };
    let flushed_read = flushed(BandwidthKernel::Read)?;
    let flushed_write = flushed(BandwidthKernel::Write)?;
    // A team figure disturbed by other work (threads not running together) is too low to
    // judge the sweep by: it would call main memory "cache".
    let reference = flushed_read
        .as_ref()
        .filter(|l| !l.flags.contains(&MeasurementFlag::Contended))
        .map(|l| l.bytes_per_s);

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
    // The read sweep's plateaus, judged against flushed memory, name the other ordinary
    // kernels' plateaus; `None` (no flushed reference): those are named by the cache sizes.
    let mut read_plateaus: Option<Vec<Plateau>> = None;
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
                sweep.points.push(sweep_point(total, &timing));
            }
            tracker.step(format!(
                "{} {} on {threads} thread(s)",
                kernel.name(),
                fmt_bytes_binary(size as u64 * threads as u64)
            ));
        }
        if kernel == BandwidthKernel::Read {
            // Extend past the plan, half an octave at a time, until the curve ends on a
            // plateau wholly beyond the last-level cache.
            let mut size = sizes.last().copied().unwrap_or(4096);
            while !has_dram_plateau(&sweep.points, &guide, reference) {
                size = (size as f64 * 2f64.sqrt()) as usize / bandwidth::ARRAY_GRANULE
                    * bandwidth::ARRAY_GRANULE;
                if size > cap_per_thread || Instant::now() >= settings.extend_until {
                    break;
                }
                fault_to(size)?;
                if let Some((total, timing)) =
                    measure_point(kernels, &buffers, cpus, kernel, size, &settings.bandwidth)?
                {
                    sweep.points.push(sweep_point(total, &timing));
                }
                extension.push(size);
                tracker.step(format!(
                    "{} {} on {threads} thread(s) (past the plan: no DRAM plateau yet)",
                    kernel.name(),
                    fmt_bytes_binary(size as u64 * threads as u64)
                ));
            }
        }
        sweep.plateaus = if kernel == BandwidthKernel::Read {
            find_plateaus(&sweep.points, &guide, reference)
        } else {
            match &read_plateaus {
                Some(read) if !kernel.non_temporal() => find_plateaus_like(&sweep.points, read),
                // Non-temporal stores bypass the caches: past the last-level cache is memory.
                _ => find_plateaus(&sweep.points, &guide, None),
            }
        };
        if kernel == BandwidthKernel::Read {
            if reference.is_some() {
                read_plateaus = Some(sweep.plateaus.clone());
            }
            let has_dram = sweep
                .plateaus
                .iter()
                .any(|p| p.level == Some(MemoryLevel::Dram));
            // A plateau no faster than flushed memory (within the tolerance) may be memory
            // split in two by noise: not worth a warning.
            let faster_than_memory = |p: &&Plateau| {
                reference.is_none_or(|m| p.bytes_per_s > m * (1.0 + plateau::DRAM_TOLERANCE))
            };
            for hidden in plateau::unreported_cache_plateaus(&sweep.plateaus, &guide)
                .into_iter()
                .filter(faster_than_memory)
            {
                let against = match reference.filter(|_| !has_dram) {
                    Some(memory) => format!(
                        ", faster than reading a buffer flushed from the caches ({:.1} GB/s)",
                        memory / 1e9
                    ),
                    None => " and before DRAM".to_string(),
                };
                warnings.push(format!(
                    "{threads} thread(s): a {:.0} GB/s plateau at {}-{} lies past the reported \
                     last-level cache{against}: the threads reach cache the CPU does not \
                     report (vCPUs on different dies?)",
                    hidden.bytes_per_s / 1e9,
                    fmt_bytes_binary(hidden.working_set_lo_bytes),
                    fmt_bytes_binary(hidden.working_set_hi_bytes)
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
    let read_sweep = sweeps.iter().find(|s| s.kernel == BandwidthKernel::Read);
    let sweep_dram = read_sweep
        .and_then(|s| {
            s.plateaus
                .iter()
                .find(|p| p.level == Some(MemoryLevel::Dram))
        })
        .cloned();
    let check = dram_check(
        threads,
        kernels,
        read_sweep,
        sweep_dram.as_ref(),
        (flushed_read.as_ref(), flushed_write.as_ref()),
        reference,
    );
    if check.method == FigureMethod::Flushed {
        // The sweeps never left the caches: their main-memory figures (read at the size
        // guide) are cache figures. Non-temporal writes bypass the caches and keep theirs
        // (the non-temporal copy and triad read through them).
        levels.retain(|l| l.level != MemoryLevel::Dram || l.kernel == BandwidthKernel::WriteNt);
        levels.extend(flushed_read);
        levels.extend(flushed_write);
    }

    if !settings.sweep_every_kernel {
        // Quick mode: the other kernels at the middle of each cache plateau the read sweep
        // found, and at the largest working set of its DRAM plateau (the least cache help):
        // the ordinary stores and the non-temporal kernels there.
        let read_levels: Vec<(MemoryLevel, u64)> = levels
            .iter()
            .filter(|l| l.kernel == BandwidthKernel::Read && l.method == FigureMethod::Sweep)
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
                let wanted = if level == MemoryLevel::Dram {
                    kernel.non_temporal() || kernel == BandwidthKernel::Write
                } else {
                    !kernel.non_temporal()
                };
                if !kernels.has(kernel) || !wanted {
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
                    levels.push(LevelBandwidth {
                        level,
                        kernel,
                        threads: threads as u32,
                        bytes_per_s: timing.stats.best,
                        working_set_lo_bytes: total,
                        working_set_hi_bytes: total,
                        spread: timing.stats.spread,
                        flags: flags_of(&timing),
                        method: FigureMethod::Sweep,
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
    Ok((sweeps, levels, check, warnings))
}

/// Which method gives main memory's figures at one thread count, and why, in words.
/// `reference` is the flushed-read figure the read sweep's plateaus were judged by (`None`
/// when there is none, or when other work disturbed it).
fn dram_check(
    threads: usize,
    kernels: &BandwidthKernels,
    read_sweep: Option<&BandwidthSweep>,
    sweep_dram: Option<&Plateau>,
    (flushed_read, flushed_write): (Option<&LevelBandwidth>, Option<&LevelBandwidth>),
    reference: Option<f64>,
) -> DramCheck {
    let last = sweep_dram.or_else(|| read_sweep.and_then(|s| s.plateaus.last()));
    let sweep_largest = read_sweep
        .and_then(|s| s.points.iter().map(|p| p.working_set_bytes).max())
        .unwrap_or(0);
    let plateau_text = |p: &Plateau| {
        format!(
            "the read sweep's last plateau ({:.1} GB/s at {}-{})",
            p.bytes_per_s / 1e9,
            fmt_bytes_binary(p.working_set_lo_bytes),
            fmt_bytes_binary(p.working_set_hi_bytes)
        )
    };
    let tolerance = plateau::DRAM_TOLERANCE;
    let by_sizes = match flushed_read {
        Some(memory) => format!(
            "other work disturbed the read of a buffer flushed from the caches ({:.1} GB/s)",
            memory.bytes_per_s / 1e9
        ),
        None => "this CPU has no cache-flush instruction".to_string(),
    };
    let (method, verdict) = match (sweep_dram, reference, flushed_read, last) {
        (Some(p), Some(memory), _, _) => (
            FigureMethod::Sweep,
            format!(
                "{} is at most {:.0}% faster than reading a buffer flushed from the caches \
                 ({:.1} GB/s): main memory; the DRAM figures come from the sweeps",
                plateau_text(p),
                tolerance * 100.0,
                memory / 1e9
            ),
        ),
        (Some(p), None, _, _) => (
            FigureMethod::Sweep,
            format!(
                "{} lies past the reported last-level cache: main memory by the cache \
                 sizes, since {by_sizes}",
                plateau_text(p)
            ),
        ),
        (None, Some(memory), Some(_), Some(p)) => (
            FigureMethod::Flushed,
            format!(
                "{} is faster than reading a buffer flushed from the caches ({:.1} GB/s) by \
                 more than {:.0}%: cache; the DRAM figures come from the flushed buffer",
                plateau_text(p),
                memory / 1e9,
                tolerance * 100.0
            ),
        ),
        (None, None, Some(memory), _) => (
            FigureMethod::Flushed,
            format!(
                "no plateau past the reported last-level cache; the DRAM figures come from \
                 the flushed buffer ({:.1} GB/s), though other work disturbed it (see its \
                 flags)",
                memory.bytes_per_s / 1e9
            ),
        ),
        (None, _, Some(_), _) => (
            FigureMethod::Flushed,
            "the read sweep found no plateau: the DRAM figures come from the flushed buffer"
                .to_string(),
        ),
        (None, _, None, _) => (
            FigureMethod::Sweep,
            format!(
                "no plateau past the reported last-level cache, and {by_sizes}: the DRAM \
                 figures are read at the cache-size guide"
            ),
        ),
    };
    DramCheck {
        threads: threads as u32,
        flush: kernels
            .flush
            .map(|f| f.name().to_string())
            .unwrap_or_default(),
        flushed_bytes: flushed_read.map(|l| l.working_set_hi_bytes).unwrap_or(0),
        flushed_read_bytes_per_s: flushed_read.map(|l| l.bytes_per_s),
        flushed_write_bytes_per_s: flushed_write.map(|l| l.bytes_per_s),
        sweep_plateau_bytes_per_s: last.map(|p| p.bytes_per_s),
        sweep_plateau_lo_bytes: last.map(|p| p.working_set_lo_bytes),
        sweep_plateau_hi_bytes: last.map(|p| p.working_set_hi_bytes),
        sweep_largest_bytes: sweep_largest,
        tolerance,
        method,
        verdict,
    }
}

pub(super) fn kernel_is_dram_only(kernel: BandwidthKernel) -> bool {
    kernel.non_temporal()
}

pub(super) fn has_dram_plateau(
    points: &[SweepPoint],
    guide: &CacheGuide,
    flushed_read: Option<f64>,
) -> bool {
    plateau::ends_on_dram_plateau(&find_plateaus(points, guide, flushed_read), points.len())
}

fn curve(points: &[SweepPoint]) -> Vec<plateau::CurvePoint> {
    points
        .iter()
        .map(|p| plateau::CurvePoint {
            working_set_bytes: p.working_set_bytes,
            bytes_per_s: p.bytes_per_s,
        })
        .collect()
}

/// The plateaus of a sweep, named by the cache sizes, or with `flushed_read` (main memory's
/// read rate over flushed buffers) naming main memory.
pub(super) fn find_plateaus(
    points: &[SweepPoint],
    guide: &CacheGuide,
    flushed_read: Option<f64>,
) -> Vec<Plateau> {
    let mut plateaus = plateau::detect_plateaus(&curve(points), &PlateauSettings::default());
    match flushed_read {
        Some(memory) => {
            plateau::label_plateaus_flushed(&mut plateaus, guide, memory);
        }
        None => plateau::label_plateaus(&mut plateaus, guide),
    }
    plateaus
}

/// The plateaus of another kernel's sweep, named after the read sweep's (`read`).
fn find_plateaus_like(points: &[SweepPoint], read: &[Plateau]) -> Vec<Plateau> {
    let mut plateaus = plateau::detect_plateaus(&curve(points), &PlateauSettings::default());
    plateau::label_plateaus_like(&mut plateaus, read);
    plateaus
}

/// A sweep point from one timed working set (all threads' bytes).
fn sweep_point(total: u64, timing: &TeamTiming) -> SweepPoint {
    SweepPoint {
        working_set_bytes: total,
        bytes_per_s: timing.stats.best,
        spread: timing.stats.spread,
        noisy: timing.noisy,
        contended: timing.contended,
    }
}
