//! Criterion benchmarks of the hardware probe: the wall time of a quick probe and of plateau
//! detection. Before timing, one quick probe prints its figures as ratios to their theoretical
//! peaks (compute) and its bandwidth per memory level, the figures quoted in reviews.
//! Run with `cargo bench --bench probe`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use roofline::device::MemoryLevel;
use roofline::probe::plateau::{detect_plateaus, CurvePoint, PlateauSettings};
use roofline::probe::{run_probe, ProbeOptions};

fn quick() -> ProbeOptions {
    ProbeOptions {
        quick: true,
        threads: None,
    }
}

fn print_figures() {
    let profile = match run_probe(&quick(), &mut |_| {}) {
        Ok(profile) => profile,
        Err(error) => {
            eprintln!("probe failed: {error}");
            return;
        }
    };
    let Some(record) = profile.probe.as_ref() else {
        return;
    };
    for m in &record.compute {
        println!(
            "compute {:<5} {:<8} {} thread(s): {:8.1} G/s = {:5.1}% of theoretical",
            m.precision.name(),
            m.mix.name(),
            m.threads,
            m.flops_per_s / 1e9,
            m.fraction_of_theoretical.unwrap_or(0.0) * 100.0
        );
    }
    for level in [
        MemoryLevel::L1,
        MemoryLevel::L2,
        MemoryLevel::L3,
        MemoryLevel::Dram,
    ] {
        for ceiling in profile.memory.iter().filter(|m| m.level == level) {
            println!(
                "memory  {:<5} {} thread(s): {:7.1} GB/s ({})",
                level.name(),
                ceiling.threads.unwrap_or(0),
                ceiling.bytes_per_s / 1e9,
                ceiling.source
            );
        }
    }
}

fn probe(c: &mut Criterion) {
    // Only under `cargo bench` (criterion gets `--bench`), not when `cargo test` runs the
    // benches once as tests.
    if std::env::args().any(|arg| arg == "--bench") {
        print_figures();
    }
    let mut group = c.benchmark_group("probe");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("quick probe", |b| {
        b.iter(|| black_box(run_probe(&quick(), &mut |_| {}).is_ok()))
    });
    group.finish();
}

fn plateaus(c: &mut Criterion) {
    // A 60-point four-level staircase, as a full sweep produces.
    let curve: Vec<CurvePoint> = (0..60)
        .map(|i| {
            let bytes = (4096.0 * 2f64.powf(f64::from(i) / 3.0)) as u64;
            let level = match bytes {
                b if b <= 32 << 10 => 200e9,
                b if b <= 1 << 20 => 100e9,
                b if b <= 32 << 20 => 60e9,
                _ => 20e9,
            };
            CurvePoint {
                working_set_bytes: bytes,
                bytes_per_s: level * (1.0 + 0.01 * f64::from(i % 3)),
            }
        })
        .collect();
    let settings = PlateauSettings::default();
    c.bench_function("plateau detection, 60 points", |b| {
        b.iter(|| detect_plateaus(black_box(&curve), &settings))
    });
}

criterion_group!(benches, plateaus, probe);
criterion_main!(benches);
