//! GEMM throughput as a fraction of this machine's fp32 FMA peak, measured in the same run.
//!
//! First a summary: the peak from a 24-accumulator `_mm512_fmadd_ps` loop (or 12 ymm
//! accumulators with AVX2+FMA), on one thread and on all threads at once; then each shape at
//! 1 thread and at all threads: best and median GFLOP/s over repeated calls, the spread
//! (min..max), and best/peak. A naive triple loop is timed and compared on 256³ as a sanity
//! check. Then the criterion groups (throughput in FLOP, so criterion prints GFLOP/s as
//! Gelem/s). `GEMM_BENCH_QUICK=1` skips criterion; `GEMM_BENCH_ISA=avx2|scalar` picks a
//! lower variant. The blocking is the executor's, sized for this machine's caches
//! (`ROOFLINE_GEMM_BLOCKING=tuned`: the ISA table's as tuned).
//!
//! Buffers are written before timing (pages faulted), results go through `black_box`, and
//! every figure above the measured peak is flagged.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use roofline::kernels::gemm::{
    self, sgemm_packed_a, sgemm_with, Epilogue, GemmConfig, Isa, MatRef, PackedA,
};

/// One short burst of the FMA loop on `threads` threads at once: (FLOPs, wall s, CPU s of
/// the first thread).
fn peak_burst(threads: usize, iters: u64) -> (f64, f64, f64) {
    let start = Instant::now();
    let (flops, cpu) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let c0 = thread_cpu_s();
                    let f = fma_loop(iters);
                    (f, thread_cpu_s() - c0)
                })
            })
            .collect();
        let rs: Vec<(f64, f64)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        (rs.iter().map(|r| r.0).sum::<f64>(), rs[0].1)
    });
    (flops, start.elapsed().as_secs_f64(), cpu)
}

/// CPU time of the calling thread (excludes time the thread was descheduled by other load).
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Runs the FMA loop; returns the FLOPs done (0 when no FMA ISA).
fn fma_loop(iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: checked above.
            let r = unsafe { fma_avx512(iters) };
            black_box(r);
            return iters as f64 * 24.0 * 16.0 * 2.0;
        }
        if is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx") {
            // SAFETY: checked above.
            let r = unsafe { fma_avx2(iters) };
            black_box(r);
            return iters as f64 * 12.0 * 8.0 * 2.0;
        }
    }
    let _ = iters;
    0.0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_ps(black_box(0.999_999));
    let b = _mm512_set1_ps(black_box(1e-7));
    let mut acc = [_mm512_set1_ps(black_box(1.0)); 24];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let mut s = _mm512_setzero_ps();
    for x in acc {
        s = _mm512_add_ps(s, x);
    }
    _mm512_reduce_add_ps(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(black_box(0.999_999));
    let b = _mm256_set1_ps(black_box(1e-7));
    let mut acc = [_mm256_set1_ps(black_box(1.0)); 12];
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut s = [0.0f32; 8];
    let mut t = _mm256_setzero_ps();
    for x in acc {
        t = _mm256_add_ps(t, x);
    }
    _mm256_storeu_ps(s.as_mut_ptr(), t);
    s.iter().sum()
}

fn config() -> GemmConfig {
    // The blocking the executor runs: sized for this machine's caches
    // (`ROOFLINE_GEMM_BLOCKING=tuned` keeps the ISA table's).
    roofline::exec::state_machine_caches();
    let isa = match std::env::var("GEMM_BENCH_ISA").as_deref() {
        Ok("scalar") => Isa::Scalar,
        Ok("avx2") => Isa::Avx2Fma,
        _ => Isa::detect(),
    };
    GemmConfig::for_isa(isa).expect("requested ISA not available")
}

/// Deterministic data in [-1, 1), written (so faulted in) before any timing.
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

struct Shape {
    name: String,
    m: usize,
    n: usize,
    k: usize,
    /// Pre-pack A (the conv-weights case).
    packed_a: bool,
}

const SHAPES: &[(&str, usize, usize, usize, bool)] = &[
    ("1024³", 1024, 1024, 1024, false),
    ("2048³", 2048, 2048, 2048, false),
    ("conv 64×3136×576", 64, 3136, 576, false),
    ("conv 64×3136×576 (packed A)", 64, 3136, 576, true),
    ("conv 256×784×1152", 256, 784, 1152, false),
    ("conv 256×784×1152 (packed A)", 256, 784, 1152, true),
    ("gemv 1000×1×2048", 1000, 1, 2048, false),
];

/// The built-in shapes, or those of `GEMM_BENCH_SHAPES` (`MxNxK` or `MxNxKp` for pre-packed
/// A, comma-separated) when set, so a model's own GEMM shapes can be checked in isolation.
fn shapes() -> Vec<Shape> {
    let shape = |name: String, m, n, k, packed_a| Shape {
        name,
        m,
        n,
        k,
        packed_a,
    };
    match std::env::var("GEMM_BENCH_SHAPES") {
        Ok(list) => list
            .split(',')
            .map(|spec| {
                let spec = spec.trim();
                let packed = spec.ends_with('p');
                let dims: Vec<usize> = spec
                    .trim_end_matches('p')
                    .split('x')
                    .map(|d| {
                        d.parse()
                            .expect("GEMM_BENCH_SHAPES: MxNxK[p], comma-separated")
                    })
                    .collect();
                assert_eq!(
                    dims.len(),
                    3,
                    "GEMM_BENCH_SHAPES: MxNxK[p], comma-separated"
                );
                let suffix = if packed { " (packed A)" } else { "" };
                let name = format!("{}×{}×{}{suffix}", dims[0], dims[1], dims[2]);
                shape(name, dims[0], dims[1], dims[2], packed)
            })
            .collect(),
        Err(_) => SHAPES
            .iter()
            .map(|&(name, m, n, k, packed)| shape(name.to_string(), m, n, k, packed))
            .collect(),
    }
}

struct Problem {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    packed: Option<PackedA>,
    m: usize,
    n: usize,
    k: usize,
}

impl Problem {
    fn new(s: &Shape, cfg: &GemmConfig) -> Problem {
        let a = data(s.m * s.k, 1);
        let b = data(s.k * s.n, 2);
        let packed = s
            .packed_a
            .then(|| PackedA::with_config(&MatRef::row_major(&a, s.m, s.k), cfg));
        Problem {
            a,
            b,
            c: vec![1.0; s.m * s.n],
            packed,
            m: s.m,
            n: s.n,
            k: s.k,
        }
    }

    fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    fn run(&mut self, cfg: &GemmConfig, threads: usize) {
        let b = MatRef::row_major(&self.b, self.k, self.n);
        match &self.packed {
            Some(pa) => sgemm_packed_a(pa, &b, &mut self.c, self.n, &Epilogue::NONE, threads),
            None => {
                let a = MatRef::row_major(&self.a, self.m, self.k);
                sgemm_with(cfg, &a, &b, &mut self.c, self.n, &Epilogue::NONE, threads)
            }
        }
        black_box(&mut self.c);
    }
}

/// Per-call times and the peak measured in the same window.
struct Stats {
    /// Wall seconds per call, sorted.
    wall: Vec<f64>,
    /// Least thread-CPU seconds of a call (meaningful for one thread).
    cpu_best: f64,
    /// Best FMA-loop FLOP/s (all threads together) in the window.
    peak: f64,
    /// Best FMA-loop FLOP/s of one thread counted on its CPU time.
    peak_cpu: f64,
}

/// Alternates short FMA-peak bursts with batches of calls for about `budget`, so the ratio
/// compares figures taken under the same background load.
fn measure(p: &mut Problem, cfg: &GemmConfig, threads: usize, budget: Duration) -> Stats {
    p.run(cfg, threads); // warm-up: pool, scratch, caches
    let rounds = 6;
    let mut st = Stats {
        wall: Vec::new(),
        cpu_best: f64::INFINITY,
        peak: 0.0,
        peak_cpu: 0.0,
    };
    for _ in 0..rounds {
        let (f, w, c) = peak_burst(threads, 3_000_000);
        st.peak = st.peak.max(f / w);
        st.peak_cpu = st.peak_cpu.max(f / threads as f64 / c);
        let end = Instant::now() + budget / rounds;
        loop {
            let c0 = thread_cpu_s();
            let t = Instant::now();
            p.run(cfg, threads);
            st.wall.push(t.elapsed().as_secs_f64());
            st.cpu_best = st.cpu_best.min(thread_cpu_s() - c0);
            if Instant::now() >= end {
                break;
            }
        }
    }
    st.wall.sort_by(|a, b| a.partial_cmp(b).unwrap());
    st
}

fn naive(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            c[i * n + j] = s;
        }
    }
}

fn summary(cfg: &GemmConfig) {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!();
    println!(
        "GEMM summary: kernel {} (tile {:?}, {:?}); detected best: {}",
        cfg.isa.name(),
        cfg.isa.tile(),
        cfg.blocking,
        gemm::isa_name()
    );
    println!(
        "peak: short 24-chain FMA bursts interleaved with the calls, on the same thread count;"
    );
    println!("best/pk: best call vs the best burst of the run; cpu%: the same on thread CPU time");
    println!(
        "(one thread: immune to preemption by other processes); GFLOP/s columns are wall-clock"
    );
    let quick = std::env::var_os("GEMM_BENCH_QUICK").is_some();
    let budget = Duration::from_millis(if quick { 900 } else { 2000 });
    let thread_counts = if all > 1 { vec![1, all] } else { vec![1] };
    // (shape, threads, flops, stats); ratios are printed once every burst has been seen, against
    // the best burst of the whole run for that thread count (a burst caught during a noisy
    // moment would otherwise make a ratio look above the roof).
    let mut rows = Vec::new();
    let mut best_peak = vec![0.0f64; all + 1];
    let mut best_peak_cpu = 0.0f64;
    let shapes = shapes();
    for s in &shapes {
        let mut p = Problem::new(s, cfg);
        for &threads in &thread_counts {
            let st = measure(&mut p, cfg, threads, budget);
            best_peak[threads] = best_peak[threads].max(st.peak);
            if threads == 1 {
                best_peak_cpu = best_peak_cpu.max(st.peak_cpu);
            }
            rows.push((s, threads, p.flops(), (p.m * p.k * 4) as f64, st));
        }
    }
    for &t in &thread_counts {
        println!(
            "best FMA burst on {t} thread(s): {:.1} GFLOP/s",
            best_peak[t] / 1e9
        );
    }
    println!(
        "{:<30} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "shape", "thr", "best", "median", "worst", "peak*", "best/pk", "cpu%"
    );
    for (s, threads, flops, a_bytes, st) in &rows {
        let g = |t: f64| flops / t / 1e9;
        let best = g(st.wall[0]);
        let ratio = best * 1e9 / best_peak[*threads];
        let cpu = if *threads == 1 {
            format!("{:.1}", 100.0 * flops / st.cpu_best / best_peak_cpu)
        } else {
            "-".into()
        };
        let flag = if ratio > 1.0 { "  ABOVE PEAK?" } else { "" };
        println!(
            "{:<30} {:>3} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7.1}% {:>6}{flag}",
            s.name,
            threads,
            best,
            g(st.wall[st.wall.len() / 2]),
            g(st.wall[st.wall.len() - 1]),
            st.peak / 1e9,
            ratio * 100.0,
            cpu
        );
        if s.n == 1 {
            println!(
                "{:<30} {:>3} {:>8.1} GB/s of A streamed (memory-bound)",
                "",
                threads,
                a_bytes / st.wall[0] / 1e9
            );
        }
    }
    // Sanity: a naive triple loop, timed and compared.
    let (m, n, k) = (256, 256, 256);
    let a = data(m * k, 3);
    let b = data(k * n, 4);
    let mut c_naive = vec![0.0; m * n];
    let t = Instant::now();
    naive(&a, &b, &mut c_naive, m, n, k);
    let naive_s = t.elapsed().as_secs_f64();
    black_box(&c_naive);
    let mut c = vec![0.0; m * n];
    let t = Instant::now();
    sgemm_with(
        cfg,
        &MatRef::row_major(&a, m, k),
        &MatRef::row_major(&b, k, n),
        &mut c,
        n,
        &Epilogue::NONE,
        1,
    );
    let fast_s = t.elapsed().as_secs_f64();
    let max_diff = c
        .iter()
        .zip(&c_naive)
        .fold(0.0f32, |d, (x, y)| d.max((x - y).abs()));
    let fl = 2.0 * (m * n * k) as f64;
    println!(
        "naive triple loop 256³: {:.2} GFLOP/s; sgemm (1 thread, one cold call) {:.1} GFLOP/s; max |diff| {max_diff:.2e}",
        fl / naive_s / 1e9,
        fl / fast_s / 1e9
    );
    assert!(max_diff < 1e-3, "sgemm disagrees with the naive loop");
    println!("(*peak: the best burst during this shape's window)");
    println!();
}

fn criterion_benches(c: &mut Criterion, cfg: &GemmConfig) {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut g = c.benchmark_group("sgemm");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let shapes = shapes();
    for s in &shapes {
        let mut p = Problem::new(s, cfg);
        g.throughput(Throughput::Elements(p.flops() as u64));
        for threads in if all > 1 { vec![1, all] } else { vec![1] } {
            g.bench_function(
                BenchmarkId::new(s.name.as_str(), format!("{threads}t")),
                |bch| bch.iter(|| p.run(cfg, threads)),
            );
        }
    }
    g.finish();
}

fn main() {
    let cfg = config();
    summary(&cfg);
    if std::env::var_os("GEMM_BENCH_QUICK").is_none() {
        let mut c = Criterion::default().configure_from_args();
        criterion_benches(&mut c, &cfg);
        c.final_summary();
    }
}
