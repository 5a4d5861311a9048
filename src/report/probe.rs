//! The `roofline probe` summary: the readable view of a device profile. What the CPU is, the
//! clocks, the theoretical peaks with their assumptions, every compute and bandwidth figure with
//! its thread count, spread and flags, and the GPU and counter lines; a profile without a probe
//! record (catalogue, hand-written) lists its ceilings. Pure formatting over the profile; nothing
//! is recomputed except ratios.

use std::fmt::Write;

use super::units::fmt_bytes_binary as format_bytes;
use crate::device::probe_record::{ComputeMix, FigureMethod, MeasurementFlag, ProbeRecord};
use crate::device::{DeviceProfile, MemoryLevel, Precision};

fn rate(value: f64, precision: Precision) -> String {
    let unit = if precision == Precision::Int8 {
        "GOP/s"
    } else {
        "GFLOP/s"
    };
    format!("{:.1} {unit}", value / 1e9)
}

fn flags_text(flags: &[MeasurementFlag]) -> String {
    flags
        .iter()
        .map(|flag| match flag {
            MeasurementFlag::Noisy => "noisy",
            MeasurementFlag::AboveTheoretical => "ABOVE THEORY (bug)",
            MeasurementFlag::NotDetected => "no plateau",
            MeasurementFlag::SweepTooShort => "sweep too short",
            MeasurementFlag::Fallback => "portable fallback",
            MeasurementFlag::Contended => "contended",
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Renders `profile` as a table for the terminal.
pub fn render_probe_summary(profile: &DeviceProfile) -> String {
    let mut out = String::new();
    match &profile.probe {
        Some(record) => render_record(&mut out, profile, record),
        None => render_ceilings(&mut out, profile),
    }
    out
}

fn render_ceilings(out: &mut String, profile: &DeviceProfile) {
    let _ = writeln!(out, "{} ({})", profile.name, profile.id);
    for ceiling in &profile.compute {
        let threads = ceiling
            .threads
            .map(|t| format!("{t} thread(s)"))
            .unwrap_or_else(|| "device".into());
        let _ = writeln!(
            out,
            "  {:<5} {:>16}  {threads}",
            ceiling.precision.name(),
            rate(ceiling.flops_per_s, ceiling.precision)
        );
    }
    for ceiling in &profile.memory {
        let writes = ceiling
            .write_bytes_per_s
            .map(|w| format!(" read, {:.1} GB/s write", w / 1e9))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<5} {:>12.1} GB/s{writes}",
            ceiling.level.name(),
            ceiling.bytes_per_s / 1e9
        );
    }
}

fn render_record(out: &mut String, profile: &DeviceProfile, record: &ProbeRecord) {
    let cpu = &record.cpu;
    let _ = writeln!(
        out,
        "roofline probe {} — {} mode, {}, {:.1} s",
        record.tool_version, record.mode, record.measured_at, record.wall_time_s
    );
    let identity = match (cpu.family, cpu.model) {
        (Some(family), Some(model)) => {
            format!("{} family {family:#x} model {model:#x}", cpu.vendor)
        }
        _ => cpu.vendor.clone(),
    };
    let guest = cpu
        .hypervisor
        .as_ref()
        .map(|h| format!(", {h} guest"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "CPU       {} ({identity}, {}{guest})",
        cpu.model_name, cpu.microarchitecture
    );
    let _ = writeln!(out, "ISA       {}", cpu.isa.join(" "));
    let caches: Vec<String> = cpu
        .caches
        .iter()
        .map(|c| {
            let sharing = if c.shared_by_cpus > 1 {
                format!(" shared by {}", c.shared_by_cpus)
            } else {
                " per core".into()
            };
            format!(
                "L{}{} {}{sharing} [{}]",
                c.level,
                if c.kind == "data" { "d" } else { "" },
                format_bytes(c.size_bytes),
                c.source
            )
        })
        .collect();
    let _ = writeln!(out, "Caches    {}", caches.join(", "));
    let cores = &record.cores;
    let quota = cores
        .cgroup_quota_cpus
        .map(|q| format!("cgroup quota {q:.2} CPUs"))
        .unwrap_or_else(|| "no cgroup quota".into());
    let _ = writeln!(
        out,
        "Cores     {} usable ({} in affinity mask, {quota}); {} thread(s) {} to CPUs {:?}",
        cores.usable,
        cores.affinity_cpus.len(),
        cores.threads_used,
        if cores.pinned { "pinned" } else { "NOT pinned" },
        cores.pinned_cpus
    );
    let clock = &record.clock;
    let mut clock_line = String::new();
    if let Some(single) = &clock.single_thread {
        let _ = write!(
            clock_line,
            "1 thread {:.2} GHz (min/median/max of {} samples {:.2}/{:.2}/{:.2})",
            single.max_hz / 1e9,
            single.samples,
            single.min_hz / 1e9,
            single.median_hz / 1e9,
            single.max_hz / 1e9
        );
    }
    if clock.all_threads.len() > 1 {
        let each: Vec<String> = clock
            .all_threads
            .iter()
            .map(|c| format!("{:.2}", c.max_hz / 1e9))
            .collect();
        let _ = write!(
            clock_line,
            "; {} threads {} GHz",
            clock.all_threads.len(),
            each.join(" / ")
        );
    }
    let reference = |label: &str, hz: Option<f64>| {
        hz.map(|hz| format!("{label} {:.2} GHz", hz / 1e9))
            .unwrap_or_else(|| format!("{label} not exposed"))
    };
    let _ = writeln!(
        out,
        "Clock     {clock_line}; {}; {}",
        reference("base", clock.base_clock_hz),
        reference("TSC", clock.tsc_hz)
    );
    // The clock each kernel's instructions ran at (1 thread), against the scalar clock: Intel
    // cores run dense 512-bit code at a lower clock.
    let scalar_hz = clock.single_thread.as_ref().map(|c| c.max_hz);
    let vector_clocks: Vec<String> = record
        .compute
        .iter()
        .filter(|m| m.threads == 1)
        .filter_map(|m| {
            let hz = *m.clock_hz_per_thread.first()?;
            let kernel = m.kernel.split(':').next().unwrap_or("");
            let relative = scalar_hz
                .filter(|&s| s > 0.0)
                .map(|s| {
                    let percent = ((hz / s - 1.0) * 100.0).round();
                    if percent == 0.0 {
                        " (±0%)".to_string()
                    } else {
                        format!(" ({percent:+.0}%)")
                    }
                })
                .unwrap_or_default();
            Some(format!("{kernel} {:.2}{relative}", hz / 1e9))
        })
        .collect();
    if !vector_clocks.is_empty() {
        let _ = writeln!(
            out,
            "Under load {} GHz (1 thread, the clock each kernel's instructions ran at, against \
             the scalar clock: a dependent-add chain interleaved with them where the kernel has \
             a paced twin, else right after blocks of it)",
            vector_clocks.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "Model     {}: {}",
        record.core_model.name, record.core_model.assumption
    );
    let _ = writeln!(out, "          source: {}", record.core_model.source);
    if !record.core_model.licence_frequency.is_empty() {
        let _ = writeln!(
            out,
            "          frequency: {}",
            record.core_model.licence_frequency
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<14} {:>3} {:>17} {:>17} {:>7} {:>7}  kernel",
        "compute", "thr", "measured", "theoretical", "of peak", "spread"
    );
    for m in &record.compute {
        let kind = match m.precision {
            Precision::Bf16 | Precision::Int8 => "dot",
            _ => m.mix.name(),
        };
        let label = format!("{} {kind}", m.precision.name());
        let theory = m
            .theoretical_flops_per_s
            .map(|t| rate(t, m.precision))
            .unwrap_or_else(|| "-".into());
        let fraction = m
            .fraction_of_theoretical
            .map(|f| format!("{:.1}%", f * 100.0))
            .unwrap_or_else(|| "-".into());
        let per_thread = if m.per_thread_flops_per_s.len() > 1 {
            let each: Vec<String> = m
                .per_thread_flops_per_s
                .iter()
                .map(|r| format!("{:.1}", r / 1e9))
                .collect();
            format!(" [per thread {}]", each.join(" / "))
        } else {
            String::new()
        };
        let flags = flags_text(&m.flags);
        let _ = writeln!(
            out,
            "{label:<14} {:>3} {:>17} {theory:>17} {fraction:>7} {:>6.1}%  {}{per_thread}{}",
            m.threads,
            rate(m.flops_per_s, m.precision),
            m.stats.spread * 100.0,
            m.kernel.split(':').next().unwrap_or(""),
            if flags.is_empty() {
                String::new()
            } else {
                format!("  ({flags})")
            }
        );
    }
    let fma_only: Vec<&str> = record
        .theoretical
        .iter()
        .filter(|t| {
            t.mix == ComputeMix::Fma
                && !record
                    .compute
                    .iter()
                    .any(|m| m.precision == t.precision && m.threads == t.threads)
        })
        .map(|t| t.precision.name())
        .collect();
    if !fma_only.is_empty() {
        let _ = writeln!(out, "(theory only, no kernel: {})", fma_only.join(", "));
    }
    let mut thread_counts: Vec<u32> = record.theoretical.iter().map(|t| t.threads).collect();
    thread_counts.dedup();
    for threads in thread_counts {
        let peaks: Vec<&_> = record
            .theoretical
            .iter()
            .filter(|t| t.threads == threads)
            .collect();
        let rates: Vec<String> = peaks
            .iter()
            .map(|t| {
                let kind = match t.precision {
                    Precision::Bf16 | Precision::Int8 => "dot",
                    _ => t.mix.name(),
                };
                format!("{} {kind} {:.1}", t.precision.name(), t.flops_per_s / 1e9)
            })
            .collect();
        let per_cycle: Vec<String> = peaks
            .iter()
            .map(|t| t.flops_per_cycle.to_string())
            .collect();
        let ghz: Vec<f64> = peaks
            .iter()
            .map(|t| t.clock_hz_sum / f64::from(threads.max(1)) / 1e9)
            .collect();
        let lowest = ghz.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = ghz.iter().copied().fold(0.0, f64::max);
        // Each peak uses the clock measured under its own kernel; show the range when the
        // clocks differ visibly.
        let clock = if highest - lowest >= 0.005 {
            format!("{lowest:.2}-{highest:.2}")
        } else {
            format!("{highest:.2}")
        };
        let _ = writeln!(
            out,
            "theory, {threads} thread(s) at {clock} GHz: {} G/s ({} per cycle per core)",
            rates.join(", "),
            per_cycle.join(" / ")
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<6} {:>3} {:>12}  {:<9} {:>22} {:>7}",
        "memory", "thr", "bandwidth", "kernel", "working sets", "spread"
    );
    for level in [
        MemoryLevel::L1,
        MemoryLevel::L2,
        MemoryLevel::L3,
        MemoryLevel::Dram,
    ] {
        let mut rows: Vec<_> = record
            .memory_levels
            .iter()
            .filter(|l| l.level == level)
            .collect();
        rows.sort_by(|a, b| {
            a.threads
                .cmp(&b.threads)
                .then(b.bytes_per_s.total_cmp(&a.bytes_per_s))
        });
        for row in rows {
            let ceiling = profile
                .memory
                .iter()
                .find(|m| m.level == level && m.threads == Some(row.threads));
            // A ceiling's read rate is the read kernel's figure, its write rate the write
            // kernel's (the roofline charges each direction at its own rate).
            let roof = match ceiling {
                Some(m) if m.bytes_per_s == row.bytes_per_s => "  <- read roof",
                Some(m) if m.write_bytes_per_s == Some(row.bytes_per_s) => "  <- write roof",
                _ => "",
            };
            let flags = flags_text(&row.flags);
            let working_sets = match row.method {
                FigureMethod::Sweep => format!(
                    "{}-{}",
                    format_bytes(row.working_set_lo_bytes),
                    format_bytes(row.working_set_hi_bytes)
                ),
                FigureMethod::Flushed => {
                    format!("{} flushed", format_bytes(row.working_set_hi_bytes))
                }
            };
            let _ = writeln!(
                out,
                "{:<6} {:>3} {:>7.1} GB/s  {:<9} {:>22} {:>6.1}%{roof}{}",
                level.name(),
                row.threads,
                row.bytes_per_s / 1e9,
                row.kernel.name(),
                working_sets,
                row.spread * 100.0,
                if flags.is_empty() {
                    String::new()
                } else {
                    format!("  ({flags})")
                }
            );
        }
        // Roofs that no row shows: one thread's figure standing in for a contended one.
        for roof in profile.memory.iter().filter(|m| m.level == level) {
            let shown = |rate: f64| {
                record.memory_levels.iter().any(|l| {
                    l.level == level && Some(l.threads) == roof.threads && l.bytes_per_s == rate
                })
            };
            let rates = [
                ("read", Some(roof.bytes_per_s)),
                ("write", roof.write_bytes_per_s),
            ];
            for (direction, rate) in rates {
                let Some(rate) = rate.filter(|&r| !shown(r)) else {
                    continue;
                };
                let _ = writeln!(
                    out,
                    "{:<6} {:>3} {:>7.1} GB/s  <- {direction} roof: one thread's figure (the \
                     all-thread figures were lower: other work on the cores)",
                    level.name(),
                    roof.threads.unwrap_or(0),
                    rate / 1e9
                );
            }
        }
        if level == MemoryLevel::Dram {
            for check in &record.dram {
                let _ = writeln!(
                    out,
                    "DRAM   {:>3} by {}: {}",
                    check.threads,
                    check.method.name(),
                    check.verdict
                );
            }
        }
    }

    let _ = writeln!(out);
    let dispatch = &record.dispatch;
    let _ = writeln!(
        out,
        "Dispatch  {:.2} µs per op ({}); parked fork-join {}; call {:.1} ns",
        profile.launch_overhead_s * 1e6,
        dispatch.chosen,
        dispatch
            .parked_fork_join_s
            .map(|s| format!("{:.1} µs", s * 1e6))
            .unwrap_or_else(|| "-".into()),
        dispatch.call_s * 1e9
    );
    if let Some(exchange) = &dispatch.exchange {
        let _ = writeln!(
            out,
            "Exchange  cache-line round trip {:.0} ns, {} read just after another core wrote \
             it {:.1} GB/s (slowest of {} pair(s): CPUs {:?}){}; `bench` and `calibrate` check \
             it again around multi-thread runs",
            exchange.round_trip_s * 1e9,
            format_bytes(exchange.buffer_bytes),
            exchange.read_gbs,
            exchange.pairs,
            exchange.slowest_pair,
            match exchange.compute_share {
                Some(share) if exchange.shares_a_core() => format!(
                    "; an FMA block on both CPUs at once ran at {share:.2} of its rate alone: \
                     the two threads shared one physical core (SMT siblings), so the \
                     multi-thread compute figures above are one core's"
                ),
                Some(share) => format!(
                    "; an FMA block on both CPUs at once ran at {share:.2} of its rate alone \
                     (separate cores)"
                ),
                None => String::new(),
            }
        );
    }
    let counters = &record.counters;
    if counters.available {
        for check in &counters.checks {
            let fp = match (check.fp_ops, check.expected_fp_ops) {
                (Some(counted), Some(expected)) if expected > 0 => format!(
                    "; FP ops {:.3}× expected ({})",
                    counted as f64 / expected as f64,
                    check.fp_event
                ),
                _ => format!("; FP ops not checked ({})", check.fp_event),
            };
            let ratio = if check.expected_instructions > 0 {
                format!(
                    "{:.3}× expected",
                    check.instructions as f64 / check.expected_instructions as f64
                )
            } else {
                "compiler-generated loop".into()
            };
            let _ = writeln!(out, "Counters  {}: instructions {ratio}{fp}", check.kernel);
        }
    } else {
        let _ = writeln!(
            out,
            "Counters  unavailable: {}",
            counters
                .unavailable_reason
                .as_deref()
                .unwrap_or("unknown reason")
        );
    }
    if record.gpus.devices.is_empty() {
        let _ = writeln!(out, "GPU       {}", record.gpus.message);
    } else {
        let _ = writeln!(out, "GPU       {}", record.gpus.message);
        for gpu in &record.gpus.devices {
            let _ = writeln!(
                out,
                "  [{}] {}: SM {} MHz (max {}), memory {} MHz × {} bits = {} GB/s, {}{}",
                gpu.index,
                gpu.name,
                gpu.sm_clock_mhz
                    .map(|v| v.to_string())
                    .unwrap_or("?".into()),
                gpu.max_sm_clock_mhz
                    .map(|v| v.to_string())
                    .unwrap_or("?".into()),
                gpu.memory_clock_mhz
                    .map(|v| v.to_string())
                    .unwrap_or("?".into()),
                gpu.memory_bus_width_bits
                    .map(|v| v.to_string())
                    .unwrap_or("?".into()),
                gpu.theoretical_bandwidth_bytes_per_s
                    .map(|v| format!("{:.0}", v / 1e9))
                    .unwrap_or("?".into()),
                gpu.memory_bytes
                    .map(format_bytes)
                    .unwrap_or("? memory".into()),
                gpu.catalog_id
                    .as_ref()
                    .map(|id| format!("; catalogue `{id}`"))
                    .unwrap_or_default()
            );
            for peak in &gpu.catalog_peaks {
                let _ = writeln!(
                    out,
                    "        {} {:.1} T{}/s (datasheet)",
                    peak.precision.name(),
                    peak.flops_per_s / 1e12,
                    if peak.precision == Precision::Int8 {
                        "OP"
                    } else {
                        "FLOP"
                    }
                );
            }
        }
    }
    if !record.phases.is_empty() {
        let phases: Vec<String> = record
            .phases
            .iter()
            .map(|p| format!("{} {:.1} s", p.phase, p.seconds))
            .collect();
        let _ = writeln!(out, "Time      {}", phases.join(", "));
    }
    for warning in &record.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
}
