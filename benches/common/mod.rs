//! Timing shared by the kernel benchmarks (included with `mod common;`).

use std::time::Instant;

/// Median wall time of `f` after one warm-up call, over at least 30 calls and 0.2 s.
pub fn median_seconds(mut f: impl FnMut()) -> f64 {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 30 || start.elapsed().as_secs_f64() < 0.2 {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
