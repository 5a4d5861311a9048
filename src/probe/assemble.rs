//! The last phase of a probe run: the figure of each memory level from the sweeps' plateaus, and
//! the `DeviceProfile` (ceilings per precision, level and thread count, with their sources) built
//! from the whole `ProbeRecord`.

use super::*;

/// The figure of each memory level in one sweep: the median of its labelled plateau. A cache
/// level whose bandwidth equals its neighbour's has no plateau of its own (one plateau spans
/// both, e.g. stores on Zen 4 run at the same rate into L1 and L2): it takes the points of the
/// spanning plateau inside its cache-size window. A level with neither gets the median of the
/// points in its window, flagged as not detected, so the profile still has every level.
pub(super) fn level_figures(
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
            method: FigureMethod::Sweep,
        });
    }
    figures
}

/// Assembles the profile from the record: compute ceilings are the FMA-only figures (what
/// GEMM-like ops can use); memory ceilings are the rates of ordinary loads (`bytes_per_s`, the
/// read kernel) and ordinary stores (`write_bytes_per_s`, the write kernel) per level and
/// thread count, since inference kernels move their tensors with those. The non-temporal
/// kernels, often the fastest at DRAM, stay in the record: charging every byte at their rate
/// would price reads at a speed no load reaches.
pub(super) fn build_profile(record: ProbeRecord) -> DeviceProfile {
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
            let figures: Vec<&LevelBandwidth> = record
                .memory_levels
                .iter()
                .filter(|l| l.level == level && l.threads == threads && l.bytes_per_s > 0.0)
                .collect();
            let best = |kernel: Option<BandwidthKernel>| {
                figures
                    .iter()
                    .copied()
                    .filter(|l| kernel.is_none_or(|k| l.kernel == k))
                    .max_by(|a, b| a.bytes_per_s.total_cmp(&b.bytes_per_s))
            };
            // Without a read figure at this level (never seen), the best kernel stands in.
            let Some(read) = best(Some(BandwidthKernel::Read)).or_else(|| best(None)) else {
                continue;
            };
            let write = best(Some(BandwidthKernel::Write));
            let capacity_bytes = match level {
                MemoryLevel::L1 => cache_size(1),
                MemoryLevel::L2 => cache_size(2),
                MemoryLevel::L3 => cache_size(3),
                MemoryLevel::Dram => record.cpu.memory_bytes,
            };
            let mut source = format!(
                "measured by roofline probe on {threads} pinned thread(s): reads {}",
                figure_text(read)
            );
            if let Some(write) = write {
                source.push_str(&format!(
                    "; writes {} (ordinary stores: the bytes stored, with their \
                     read-for-ownership and write-back in the time)",
                    figure_text(write)
                ));
            }
            if level == MemoryLevel::Dram {
                source.push_str(&dram_note(&record, threads, read, write, best));
            }
            memory.push(MemoryCeiling {
                level,
                bytes_per_s: read.bytes_per_s,
                write_bytes_per_s: write.map(|w| w.bytes_per_s),
                capacity_bytes,
                threads: Some(threads),
                source,
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
    let single_memory: Vec<(MemoryLevel, f64, Option<f64>)> = memory
        .iter()
        .filter(|m| m.threads == Some(1))
        .map(|m| (m.level, m.bytes_per_s, m.write_bytes_per_s))
        .collect();
    for ceiling in memory.iter_mut().filter(|m| m.threads > Some(1)) {
        if let Some(&(_, single, single_write)) =
            single_memory.iter().find(|(l, _, _)| *l == ceiling.level)
        {
            if ceiling.bytes_per_s < single {
                ceiling.source.push_str(&floor_note(ceiling.bytes_per_s));
                ceiling.bytes_per_s = single;
            }
            if let (Some(write), Some(single_write)) = (ceiling.write_bytes_per_s, single_write) {
                if write < single_write {
                    ceiling.source.push_str(
                        &floor_note(write).replace("all-thread figure", "all-thread write figure"),
                    );
                    ceiling.write_bytes_per_s = Some(single_write);
                }
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
         and every sample are in probe.compute. Memory ceilings: bytes_per_s is the read rate \
         (read kernel, ordinary loads), write_bytes_per_s the ordinary-store rate (write \
         kernel); the analysis charges bytes read and bytes written each at its own rate. \
         Non-temporal kernels and every sweep are in probe.memory_levels and probe.sweeps; \
         how main memory was told from cache is in probe.dram. Capacities: L1 and L2 per \
         core, L3 per instance, DRAM total. Sustained clock {:.2} GHz on one thread (TSC {}).",
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
        name: crate::device::probed_name(&record.cpu.model_name, threads_used as u32),
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
        calibration: None,
        single_thread: None,
    }
}

/// How one figure was measured, for a ceiling's source.
fn figure_text(figure: &LevelBandwidth) -> String {
    let flags = if figure.flags.contains(&MeasurementFlag::NotDetected) {
        " (no plateau detected; read at the cache-size guide)"
    } else {
        ""
    };
    match figure.method {
        FigureMethod::Sweep => format!(
            "{} kernel, working sets {}-{}{flags}",
            figure.kernel.name(),
            fmt_bytes_binary(figure.working_set_lo_bytes),
            fmt_bytes_binary(figure.working_set_hi_bytes)
        ),
        FigureMethod::Flushed => format!(
            "{} kernel, one pass over {} flushed from every cache level before each sample{}",
            figure.kernel.name(),
            fmt_bytes_binary(figure.working_set_hi_bytes),
            if figure.kernel == BandwidthKernel::Write {
                // Lines still dirty in the caches when the pass ends are written back later.
                " (write-backs of lines the caches still hold after the pass are not timed: \
                 an upper bound when the caches hold more than the buffer)"
            } else {
                ""
            }
        ),
    }
}

/// The DRAM ceiling's provenance: which method found main memory, and how well the two rates
/// together predict the copy kernel (reads and writes at once, as most ops move data).
fn dram_note<'a>(
    record: &ProbeRecord,
    threads: u32,
    read: &LevelBandwidth,
    write: Option<&LevelBandwidth>,
    best: impl Fn(Option<BandwidthKernel>) -> Option<&'a LevelBandwidth>,
) -> String {
    let mut note = String::new();
    if let Some(check) = record.dram.iter().find(|c| c.threads == threads) {
        note.push_str(&format!(
            "; main memory by {}: {}",
            read.method.name(),
            check.verdict
        ));
    }
    let copy = best(Some(BandwidthKernel::Copy));
    if let (Some(write), Some(copy)) = (write, copy) {
        // A copy moves as many bytes in as out: 2 / (1/read + 1/write) bytes per second.
        let predicted = 2.0 / (1.0 / read.bytes_per_s + 1.0 / write.bytes_per_s);
        note.push_str(&format!(
            "; charged at these two rates, the copy kernel would run at {:.1} GB/s; it \
             measured {:.1} GB/s ({:+.0}%)",
            predicted / 1e9,
            copy.bytes_per_s / 1e9,
            (predicted / copy.bytes_per_s - 1.0) * 100.0
        ));
    }
    note
}
