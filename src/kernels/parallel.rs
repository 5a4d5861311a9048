//! The one worker pool every threaded kernel runs on, and the helpers that split an output
//! between its workers: `parallel_for` (tasks on a cached pool of exactly `threads` workers),
//! `SendPtr` (an output pointer handed to tasks that write disjoint parts of it), and the
//! element-wise splitters `par_pieces` / `par_planes`.

use std::sync::{Arc, Mutex};

use rayon::prelude::*;

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

fn pool(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(t, _)| *t == threads) {
        return Some(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("kernels{threads}-{i}"))
        .build()
        .ok()?;
    let p = Arc::new(p);
    pools.push((threads, p.clone()));
    Some(p)
}

/// Runs `f(0..tasks)` on `threads` workers (inline when `threads <= 1` or one task).
pub(crate) fn parallel_for(threads: usize, tasks: usize, f: impl Fn(usize) + Sync + Send) {
    if threads > 1 && tasks > 1 {
        if let Some(p) = pool(threads) {
            p.install(|| (0..tasks).into_par_iter().for_each(&f));
            return;
        }
    }
    (0..tasks).for_each(f);
}

/// Elements per thread below which an element-wise op stays on one thread: waking a worker
/// costs microseconds, and 64 Ki floats stream in about 10 µs.
const MIN_ELEMENTWISE_PER_THREAD: usize = 1 << 16;
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
    let units = out.len().div_ceil(unit.max(1));
    let pieces = threads
        .min(out.len() / MIN_ELEMENTWISE_PER_THREAD)
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
/// ([`par_pieces`]): `pool(sub, input planes, output planes)` with `sub.planes` the piece's count.
pub(crate) fn par_planes(
    geom: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    threads: usize,
    pool: impl Fn(&Pool2d, &[f32], &mut [f32]) + Sync + Send,
) {
    let (in_plane, out_plane) = (geom.in_h * geom.in_w, (geom.out_h * geom.out_w).max(1));
    par_pieces(output, out_plane, threads, |off, y| {
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
