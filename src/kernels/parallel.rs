//! The one worker pool every threaded kernel runs on, and the helpers that split an output
//! between its workers: `parallel_for` (tasks on a cached pool of exactly `threads` workers,
//! the caller being one; idle workers spin for a millisecond before they sleep, see `SPIN`),
//! `SendPtr` (an output pointer handed to tasks that write disjoint parts of it), the
//! element-wise splitters `par_pieces` / `par_planes`, and the rules that decide how many threads
//! an op takes (`compute_threads`, `elementwise_pieces`, `reduction_pieces`, `batches_shared`),
//! which the cost model reads too (`analysis::classify::splits_across_threads`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::pool::Pool2d;

/// A raw output pointer handed to tasks that write disjoint parts of it (every threaded kernel
/// uses this one). Read it through `get()` so closures capture the wrapper (which is `Sync`),
/// not the bare pointer field.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
// SAFETY: used only to hand disjoint output regions to tasks; the pointee outlives them.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    pub fn get(self) -> *mut T {
        self.0
    }
}

/// How long an idle worker spins for the next job before it sleeps. Waking a sleeping thread
/// costs 20-50 µs on a virtual machine (measured on a 2-vCPU KVM guest: a two-task fork-join
/// took 11 µs back to back, 23 µs after a 20 µs pause and 54 µs after 200 µs with sleeping
/// workers), which at two threads cost more than it saved on every op under ~100 µs. Between
/// the ops of a plan the pause is a few microseconds, so spinning through it keeps the workers
/// ready; after a millisecond without work they sleep, as onnxruntime's spinning pool does.
const SPIN: std::time::Duration = std::time::Duration::from_millis(1);

/// One `parallel_for` call as the workers see it. The closure lives on the caller's stack: it
/// is only called for a claimed task index below `tasks`, and the caller does not return before
/// every such task is done, so the pointer is never used after the closure is gone. Workers
/// that arrive late find no task left and touch only this (reference-counted) state.
///
/// The tasks are dealt out in one contiguous block per participant (the caller is participant
/// 0, worker `i` participant `i`), claimed from the block's front; a participant that finishes
/// its own block takes what is left of the others'. So when every thread is on time, task
/// ranges map to threads the same way in every op: the first half of a GEMM's output and the
/// first half of the element-wise op that reads it are on the same core, in its caches. With
/// one shared counter the mapping changed from op to op, and on a 2-vCPU guest whose vCPUs sit
/// on different dies, a BatchNormalization after a 1×1 Conv took 4-12× the one after another
/// BatchNormalization (`scripts/cross_core_locality.py`).
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
    /// Per participant: the next unclaimed task of its block, and the block's end.
    blocks: Vec<(AtomicUsize, usize)>,
    done: AtomicUsize,
    /// The first panic of a task, re-raised in the caller after the join.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

// SAFETY: `f` points to a `Sync` closure that outlives every call through it (see `Job`).
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

impl Job {
    fn new(f: *const (dyn Fn(usize) + Sync), tasks: usize, participants: usize) -> Job {
        let participants = participants.max(1);
        let blocks = (0..participants)
            .map(|p| {
                let (start, end) = (p * tasks / participants, (p + 1) * tasks / participants);
                (AtomicUsize::new(start), end)
            })
            .collect();
        Job {
            f,
            tasks,
            blocks,
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
        }
    }

    /// Claims and runs tasks until none is left: participant `me`'s own block first, then the
    /// others' in turn.
    fn work(&self, me: usize) {
        let count = self.blocks.len();
        for block in (0..count).map(|i| (me + i) % count) {
            let (next, end) = &self.blocks[block];
            loop {
                let task = next.fetch_add(1, Ordering::Relaxed);
                if task >= *end {
                    break;
                }
                debug_assert!(task < self.tasks);
                // SAFETY: a task of a block was claimed, so the caller is still waiting for it
                // and the closure is alive.
                let f = unsafe { &*self.f };
                if let Err(payload) =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(task)))
                {
                    let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert(payload);
                }
                self.done.fetch_add(1, Ordering::Release);
            }
        }
    }
}

/// A pool of `threads - 1` workers plus the calling thread.
struct Pool {
    shared: Arc<Shared>,
    /// Participants: the workers and the caller.
    threads: usize,
    /// Held by the caller of a job: one job at a time (another caller runs inline).
    busy: Mutex<()>,
}

struct Shared {
    /// Bumped once per job; a worker runs each epoch's job once.
    epoch: AtomicU64,
    job: Mutex<Option<Arc<Job>>>,
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

thread_local! {
    /// Set on pool workers and on a caller while it runs a job: a nested `parallel_for` then
    /// runs inline instead of waiting on the pool it is part of.
    static IN_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Shared {
    fn worker_loop(&self, me: usize) {
        IN_POOL.with(|flag| flag.set(true));
        let mut seen = self.epoch.load(Ordering::SeqCst);
        loop {
            let mut idle_since = Instant::now();
            let mut spins = 0u32;
            loop {
                let epoch = self.epoch.load(Ordering::SeqCst);
                if epoch != seen {
                    seen = epoch;
                    break;
                }
                std::hint::spin_loop();
                spins += 1;
                if spins.is_multiple_of(256) && idle_since.elapsed() > SPIN {
                    let guard = self.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                    self.sleepers.fetch_add(1, Ordering::SeqCst);
                    // The caller bumps the epoch before it reads `sleepers`: re-checking here,
                    // after announcing the sleep, cannot miss its notification.
                    if self.epoch.load(Ordering::SeqCst) == seen {
                        let _guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                    }
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                    idle_since = Instant::now();
                }
            }
            let job = self.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(job) = job {
                job.work(me);
            }
        }
    }
}

impl Pool {
    fn new(threads: usize) -> Option<Pool> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        for i in 1..threads {
            let worker = shared.clone();
            std::thread::Builder::new()
                .name(format!("kernels{threads}-{i}"))
                .spawn(move || worker.worker_loop(i))
                .ok()?;
        }
        Some(Pool {
            shared,
            threads,
            busy: Mutex::new(()),
        })
    }

    /// Runs `f(0..tasks)` on the workers and the caller; `false` when the pool is busy with
    /// another caller's job (the caller then runs the tasks itself).
    fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
        let Ok(_busy) = self.busy.try_lock() else {
            return false;
        };
        // SAFETY: only the lifetime is erased; see `Job` for why the pointer never outlives it.
        let f: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        let job = Arc::new(Job::new(f, tasks, self.threads));
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job.clone());
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if self.shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        IN_POOL.with(|flag| flag.set(true));
        job.work(0);
        IN_POOL.with(|flag| flag.set(false));
        while job.done.load(Ordering::Acquire) < tasks {
            std::hint::spin_loop();
        }
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let payload = job.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(payload) = payload {
            std::panic::resume_unwind(payload);
        }
        true
    }
}

fn pool(threads: usize) -> Option<&'static Pool> {
    static POOLS: Mutex<Vec<(usize, &'static Pool)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(t, _)| *t == threads) {
        return Some(p);
    }
    // Pools live for the process (their workers sleep when idle).
    let p: &'static Pool = Box::leak(Box::new(Pool::new(threads)?));
    pools.push((threads, p));
    Some(p)
}

/// Runs `f(0..tasks)` on `threads` workers (the caller is one of them; inline when
/// `threads <= 1`, one task, or when called from inside another `parallel_for`).
pub(crate) fn parallel_for(threads: usize, tasks: usize, f: impl Fn(usize) + Sync + Send) {
    if threads > 1 && tasks > 1 && !IN_POOL.with(|flag| flag.get()) {
        if let Some(p) = pool(threads) {
            if p.run(tasks, &f) {
                return;
            }
        }
    }
    (0..tasks).for_each(f);
}

/// Least work per thread before another thread is worth waking (10 µs of FMAs at a core's
/// fp32 peak, 15-20 µs as small GEMMs run; the pool's workers spin between ops, so a fork-join
/// costs 0.5-2 µs): a compute-bound kernel (the GEMM driver, the direct convolution) runs on at
/// most `flops / MIN_FLOPS_PER_THREAD` of its threads. At 3 MFLOP MobileNetV2's 192→64
/// pointwise convolution on 14² (4.8 MFLOP, 55-60 µs on one thread) stayed on one thread of
/// two; split, it runs in 34-47 µs. At 1.5 MFLOP the PP-OCR classifier's 1×1 convolutions on
/// 2×96 and 3×96 planes (1-2.5 MFLOP, K = 16-32, 12-28 µs on one thread: small K runs far
/// below peak) stayed on one thread; at 0.5 MFLOP the classifier took 0.458 ms instead of
/// 0.522 at 2 threads and tinycnn 34 µs instead of 42; at 0.2 MFLOP tinycnn lost again (44 µs;
/// medians of 3 alternated rounds, Zen 4 guest, runs with the cores placed apart left out).
const MIN_FLOPS_PER_THREAD: f64 = 0.5e6;

/// The threads, of `threads`, that the compute-bound kernels (the GEMM driver, the direct
/// convolution) split `flops` of work over (at least one). The cost model reads the same rule
/// (`analysis`): an op that stays on one thread of several is predicted from the one-thread
/// calibration, not from multi-thread points that all split.
pub fn compute_threads(threads: usize, flops: f64) -> usize {
    threads.min((flops / MIN_FLOPS_PER_THREAD) as usize).max(1)
}

/// [`compute_threads`] as the kernels apply it: the unit tests thread even tiny problems, so
/// the threaded paths are covered cheaply.
pub(crate) fn threads_for_flops(threads: usize, flops: f64) -> usize {
    if cfg!(test) {
        threads.min(flops as usize).max(1)
    } else {
        compute_threads(threads, flops)
    }
}

/// Elements per thread below which an element-wise op stays on one thread (16 Ki floats
/// stream in 2-5 µs; a fork-join of the spinning pool costs 0.5-2 µs). Smaller pieces than
/// they look: an op whose producer was split across the cores finds half its input in the
/// other core's caches, and one thread then fetches that half alone. At 64 Ki, DenseNet-121's
/// BatchNorm+ReLU chains over its concatenations (63-125 Ki floats on 14² and 7²) ran twice
/// as long at 2 threads as at 1; split, n476 took 37 µs instead of 89 (alternated runs).
const MIN_ELEMENTWISE_PER_THREAD: usize = 1 << 14;
/// The pieces, of `threads`, that an element-wise kernel splits `elements` outputs of
/// `work_per_element` over (at least one; fewer where whole units run short, see
/// [`par_pieces`]). The cost model reads the same rule to tell which ops split
/// (`analysis::classify::splits_across_threads`).
pub fn elementwise_pieces(elements: usize, work_per_element: usize, threads: usize) -> usize {
    threads
        .min(elements.saturating_mul(work_per_element.max(1)) / MIN_ELEMENTWISE_PER_THREAD)
        .max(1)
}

/// Input elements a thread must have before a reduction is split (the same order as the
/// element-wise ops' threshold: below it the hand-off costs more than the work).
const MIN_REDUCED_PER_THREAD: usize = 1 << 16;

/// The pieces, of `threads`, that a reduction over `input_elements` splits into (at most one
/// per output row: `exec::lower::reduce`, which also keeps reductions over other than the
/// trailing axes on one thread).
pub fn reduction_pieces(input_elements: usize, threads: usize) -> usize {
    threads.min(input_elements / MIN_REDUCED_PER_THREAD).max(1)
}

/// Whether a batched product shares its `batch` products across `threads`, one product per
/// task (`exec::lower::gemm`), rather than splitting each one: when they divide evenly or are
/// many. Attention's per-head products (12 of 128×64×128 in BERT) are too small for one GEMM
/// to split.
pub fn batches_shared(batch: usize, threads: usize) -> bool {
    threads > 1 && batch >= 2 && (batch.is_multiple_of(threads) || batch >= 4 * threads)
}

/// Piece boundaries of flat element-wise ops fall on whole vectors (64 bytes).
pub(crate) const VECTOR_ALIGN: usize = 16;

/// Runs `f(first_element, piece)` over `out` split into up to `threads` contiguous pieces of
/// whole `unit`s (a plane, a vector), in parallel when each piece is large enough. The
/// element-wise ops use it so an unfused graph gets the same threads as the fused one.
pub(crate) fn par_pieces(
    out: &mut [f32],
    unit: usize,
    threads: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    par_pieces_weighted(out, unit, 1, threads, f)
}

/// [`par_pieces`] for kernels that do `work_per_element` times an element-wise op's work per
/// output (a 5×5 pooling window, LRN's channel window): the split threshold is on the work, so
/// a 50k-output 5×5 max pool splits where a 50k-element Relu would not.
pub(crate) fn par_pieces_weighted(
    out: &mut [f32],
    unit: usize,
    work_per_element: usize,
    threads: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let units = out.len().div_ceil(unit.max(1));
    let pieces = elementwise_pieces(out.len(), work_per_element, threads)
        .min(units)
        .max(1);
    if pieces == 1 {
        f(0, out);
        return;
    }
    let per_piece = units.div_ceil(pieces) * unit;
    let len = out.len();
    let base = SendPtr(out.as_mut_ptr());
    parallel_for(threads, len.div_ceil(per_piece), |piece| {
        let start = piece * per_piece;
        let end = (start + per_piece).min(len);
        // SAFETY: pieces are disjoint ranges of `out`, which outlives the parallel loop.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(start, chunk);
    });
}

/// A pooling over `geom.planes` planes split into whole planes across the plan's threads
/// ([`par_pieces_weighted`], the window's taps as the work per output): `pool(sub, input planes, output planes)` with `sub.planes` the piece's count.
pub(crate) fn par_planes(
    geom: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    threads: usize,
    pool: impl Fn(&Pool2d, &[f32], &mut [f32]) + Sync + Send,
) {
    let (in_plane, out_plane) = (geom.in_h * geom.in_w, (geom.out_h * geom.out_w).max(1));
    let taps = geom.kernel_h * geom.kernel_w;
    par_pieces_weighted(output, out_plane, taps, threads, |off, y| {
        let (first, planes) = (off / out_plane, y.len() / out_plane);
        let sub = Pool2d { planes, ..*geom };
        pool(
            &sub,
            &input[first * in_plane..(first + planes) * in_plane],
            y,
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::{self, Binary};
    use crate::kernels::norm;

    /// An empty output (a reduction over an empty axis) runs once on nothing, on any count.
    #[test]
    fn an_empty_output_is_one_empty_piece() {
        for threads in [1, 2, 8] {
            let calls = AtomicUsize::new(0);
            par_pieces(&mut [], 16, threads, |start, piece| {
                assert_eq!((start, piece.len()), (0, 0));
                calls.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(calls.into_inner(), 1);
        }
        assert_eq!(elementwise_pieces(0, 1, 4), 1);
    }

    #[test]
    fn element_wise_pieces_cover_the_tensor_once_and_keep_channels() {
        // 3 channels of 50 000-element planes: big enough that 2 threads split it, with piece
        // boundaries inside a channel's run of planes.
        let (channels, plane, images) = (3, 50_000, 2);
        let len = channels * plane * images;
        let x: Vec<f32> = (0..len).map(|i| (i % 97) as f32 - 40.0).collect();
        let scale = [0.5, -2.0, 3.0];
        let shift = [1.0, 0.25, -7.0];
        let mut whole = vec![0.0; len];
        norm::scale_shift(&x, 0, channels, plane, &scale, &shift, &mut whole);
        let steps = vec![
            elementwise::ChainStep::WithConstant {
                op: Binary::Mul,
                values: scale.to_vec(),
                swapped: false,
            },
            elementwise::ChainStep::WithConstant {
                op: Binary::Add,
                values: shift.to_vec(),
                swapped: false,
            },
        ];
        for threads in [1, 2, 3] {
            let mut pieces = vec![f32::NAN; len];
            let starts = std::sync::Mutex::new(Vec::new());
            par_pieces(&mut pieces, plane, threads, |off, y| {
                starts.lock().unwrap().push(off);
                norm::scale_shift(
                    &x[off..off + y.len()],
                    off / plane,
                    channels,
                    plane,
                    &scale,
                    &shift,
                    y,
                )
            });
            assert_eq!(pieces, whole, "scale_shift in pieces, {threads} threads");
            let starts = starts.into_inner().unwrap();
            assert_eq!(starts.len(), threads, "one piece per thread");
            assert!(
                starts.iter().all(|s| s % plane == 0),
                "pieces start on planes"
            );
            let mut chained = vec![f32::NAN; len];
            par_pieces(&mut chained, plane, threads, |off, y| {
                let xs = &x[off..off + y.len()];
                elementwise::chain(&steps, xs, y, off / plane, channels, plane)
            });
            assert_eq!(chained, whole, "chain in pieces, {threads} threads");
        }
        // Small tensors stay on one thread.
        let mut small = vec![0.0f32; 1000];
        let calls = std::sync::atomic::AtomicUsize::new(0);
        par_pieces(&mut small, 16, 2, |_, _| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(calls.into_inner(), 1);
    }
}

#[cfg(test)]
mod pool_tests {
    use super::parallel_for;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counts(threads: usize, tasks: usize) -> Vec<usize> {
        let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        parallel_for(threads, tasks, |t| {
            hits[t].fetch_add(1, Ordering::Relaxed);
        });
        hits.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in [1, 2, 3, 4] {
            for tasks in [0, 1, 2, 3, 7, 64, 1000] {
                assert!(
                    counts(threads, tasks).iter().all(|&c| c == 1),
                    "{threads}/{tasks}"
                );
            }
        }
    }

    #[test]
    fn a_panicking_task_panics_the_caller_and_the_pool_keeps_working() {
        let result = std::panic::catch_unwind(|| {
            parallel_for(2, 8, |t| {
                if t == 5 {
                    panic!("task 5");
                }
            })
        });
        let payload = result.expect_err("the panic reaches the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"task 5"));
        assert!(counts(2, 100).iter().all(|&c| c == 1));
    }

    #[test]
    fn nested_and_concurrent_calls_complete() {
        // Tasks that call parallel_for themselves, from several caller threads at once (one
        // gets the pool, the others and the nested calls run inline).
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        let total = AtomicUsize::new(0);
                        parallel_for(2, 6, |_| {
                            parallel_for(2, 5, |_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            });
                        });
                        assert_eq!(total.into_inner(), 30);
                    }
                });
            }
        });
    }

    /// A measurement, not a check: the fork-join latency of a two-task job after idle gaps
    /// (`cargo test --release --lib fork_join_latency -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn fork_join_latency() {
        use std::time::Instant;
        for gap_us in [0u64, 20, 200] {
            let mut times = Vec::new();
            for _ in 0..2000 {
                let spin = Instant::now();
                while spin.elapsed().as_micros() < gap_us as u128 {}
                let t = Instant::now();
                parallel_for(2, 2, |_| {
                    std::hint::black_box(0);
                });
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(f64::total_cmp);
            println!(
                "gap {gap_us} us: median {:.1} us p90 {:.1} us",
                times[1000], times[1800]
            );
        }
    }
}
