//! Normalisations and row-wise ops: batch norm (inference), layer norm, instance/group norm, LRN,
//! softmax and log-softmax.

use super::math;
use super::simd::multiversion;

multiversion! {
    /// y = x·scale[c] + shift[c] over planes of `plane` elements (BN folded to scale and shift).
    /// `x` starts at plane number `first_plane` of the tensor (a thread's share of it).
    pub fn scale_shift(x: &[f32], first_plane: usize, channels: usize, plane: usize, scale: &[f32], shift: &[f32], y: &mut [f32]) {
        for (i, (xs, ys)) in x.chunks(plane.max(1)).zip(y.chunks_mut(plane.max(1))).enumerate() {
            let c = (first_plane + i) % channels.max(1);
            let (a, b) = (scale[c], shift[c]);
            for (o, &v) in ys.iter_mut().zip(xs) {
                *o = v.mul_add(a, b);
            }
        }
    }
}

/// Per-channel (scale, shift) of an inference batch norm.
pub fn batch_norm_coefficients(
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let scale: Vec<f32> = gamma
        .iter()
        .zip(var)
        .map(|(&g, &v)| g / (v + eps).sqrt())
        .collect();
    let shift = beta
        .iter()
        .zip(mean)
        .zip(&scale)
        .map(|((&b, &m), &s)| b - m * s)
        .collect();
    (scale, shift)
}

/// Lanes of the independent partial sums: a float sum in one accumulator is a chain of
/// dependent adds that cannot vectorise (addition is not associative); 16 lanes become one or
/// two vector registers.
const LANES: usize = 16;

/// Σ f(x) with `LANES` partial sums.
#[inline(always)]
fn lane_sum(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| f(v)).sum::<f32>()
}

/// max(x) with `LANES` partial maxima (NaN-ignoring like `f32::max`).
#[inline(always)]
fn lane_max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = a.max(v);
        }
    }
    acc.iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

multiversion! {
    /// Normalises each row of `row_len` elements; `gamma`/`beta` have `row_len` (or are absent).
    pub fn layer_norm(x: &[f32], row_len: usize, gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f32, y: &mut [f32]) {
        // Rows of no elements (a model may declare a 0 dim): nothing to normalise.
        if row_len == 0 {
            return;
        }
        for (xs, ys) in x.chunks(row_len).zip(y.chunks_mut(row_len)) {
            let mean = lane_sum(xs, |v| v) / row_len as f32;
            let var = lane_sum(xs, |v| (v - mean) * (v - mean)) / row_len as f32;
            let inv = 1.0 / (var + eps).sqrt();
            // One loop per parameter combination: no branch inside.
            match (gamma, beta) {
                (Some(g), Some(b)) => {
                    for (((o, &v), &g), &b) in ys.iter_mut().zip(xs).zip(g).zip(b) {
                        *o = ((v - mean) * inv).mul_add(g, b);
                    }
                }
                (Some(g), None) => {
                    for ((o, &v), &g) in ys.iter_mut().zip(xs).zip(g) {
                        *o = (v - mean) * inv * g;
                    }
                }
                (None, Some(b)) => {
                    for ((o, &v), &b) in ys.iter_mut().zip(xs).zip(b) {
                        *o = (v - mean) * inv + b;
                    }
                }
                (None, None) => {
                    for (o, &v) in ys.iter_mut().zip(xs) {
                        *o = (v - mean) * inv;
                    }
                }
            }
        }
    }
}

multiversion! {
    /// Instance normalisation: each (n, c) plane normalised, then scale[c]/bias[c].
    /// `x` and `y` hold the planes `first_plane..` (plane index n·channels + c).
    #[allow(clippy::too_many_arguments)]
    pub fn instance_norm(x: &[f32], channels: usize, plane: usize, first_plane: usize, scale: &[f32], bias: &[f32], eps: f32, y: &mut [f32]) {
        if plane == 0 || channels == 0 {
            return;
        }
        for (i, (xs, ys)) in x.chunks(plane).zip(y.chunks_mut(plane)).enumerate() {
            let c = (first_plane + i) % channels;
            // Lane-parallel sums: a sequential f32 sum does not vectorise (5x onnxruntime).
            let mean = lane_sum(xs, |v| v) / plane as f32;
            let var = lane_sum(xs, |v| (v - mean) * (v - mean)) / plane as f32;
            let gain = scale[c] / (var + eps).sqrt();
            for (o, &v) in ys.iter_mut().zip(xs) {
                *o = (v - mean).mul_add(gain, bias[c]);
            }
        }
    }
}

multiversion! {
    /// Local response normalisation across channels (NCHW). The common β = 0.75 (AlexNet,
    /// GoogLeNet, ZFNet) takes b^0.75 as √b·√√b, two vector square roots, instead of a scalar
    /// `powf` per element that held the kernel 45-70× under its roofline bound.
    #[allow(clippy::too_many_arguments)]
    pub fn lrn(
        x: &[f32],
        channels: usize,
        plane: usize,
        first_plane: usize,
        size: usize,
        alpha: f32,
        beta: f32,
        bias: f32,
        y: &mut [f32],
    ) {
        // `y` holds the output planes `first_plane..` (plane index n·channels + c), so threads
        // can take ranges of planes; the channel window reads `x` across their edges.
        let half_lo = (size - 1) / 2;
        let half_hi = size - 1 - half_lo;
        let scale = alpha / size as f32;
        let mut squares = vec![0.0f32; plane];
        for (k, out) in y.chunks_exact_mut(plane.max(1)).enumerate() {
            let (n, c) = ((first_plane + k) / channels, (first_plane + k) % channels);
            let image = &x[n * channels * plane..(n + 1) * channels * plane];
            squares.fill(0.0);
            let lo = c.saturating_sub(half_lo);
            let hi = (c + half_hi).min(channels - 1);
            for cc in lo..=hi {
                for (s, &v) in squares.iter_mut().zip(&image[cc * plane..(cc + 1) * plane]) {
                    *s += v * v;
                }
            }
            let rows = out.iter_mut().zip(&image[c * plane..(c + 1) * plane]).zip(&squares);
            if beta == 0.75 {
                for ((o, &v), &s) in rows {
                    let root = (bias + scale * s).sqrt();
                    *o = v / (root * root.sqrt());
                }
            } else {
                for ((o, &v), &s) in rows {
                    *o = v / (bias + scale * s).powf(beta);
                }
            }
        }
    }
}

multiversion! {
    /// Softmax (or log-softmax) along an axis of length `axis_len` with `inner` elements per step
    /// (row-major: index = (outer·axis_len + a)·inner + i).
    pub fn softmax(x: &[f32], outer: usize, axis_len: usize, inner: usize, log: bool, y: &mut [f32]) {
        let block = axis_len * inner;
        if block == 0 {
            return;
        }
        if inner == 1 && axis_len < SHORT_AXIS {
            // Inlined with the common lengths as constants, so the per-row loops unroll.
            return match axis_len {
                2 => softmax_short_rows(x, outer, 2, log, y),
                3 => softmax_short_rows(x, outer, 3, log, y),
                4 => softmax_short_rows(x, outer, 4, log, y),
                _ => softmax_short_rows(x, outer, axis_len, log, y),
            };
        }
        if inner == 1 {
            // Contiguous rows: lane-parallel max and sum, the exponentials vectorised.
            for (xs, ys) in x.chunks(block).zip(y.chunks_mut(block)).take(outer) {
                let max = lane_max(xs);
                for (o, &v) in ys.iter_mut().zip(xs) {
                    *o = math::exp(v - max);
                }
                let sum = lane_sum(ys, |v| v);
                if log {
                    let shift = max + math::ln(sum);
                    for (o, &v) in ys.iter_mut().zip(xs) {
                        *o = v - shift;
                    }
                } else {
                    let inv = 1.0 / sum;
                    for o in ys.iter_mut() {
                        *o *= inv;
                    }
                }
            }
            return;
        }
        // Strided axis: vectorise across the `inner` positions, one row of the axis at a time.
        let mut max = vec![f32::NEG_INFINITY; inner];
        let mut sum = vec![0f32; inner];
        for (xs, ys) in x.chunks(block).zip(y.chunks_mut(block)).take(outer) {
            max.iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
            sum.iter_mut().for_each(|s| *s = 0.0);
            for row in xs.chunks(inner) {
                for (m, &v) in max.iter_mut().zip(row) {
                    *m = m.max(v);
                }
            }
            for (row_x, row_y) in xs.chunks(inner).zip(ys.chunks_mut(inner)) {
                for (((o, &v), &m), s) in row_y.iter_mut().zip(row_x).zip(&max).zip(sum.iter_mut()) {
                    let e = math::exp(v - m);
                    *o = e;
                    *s += e;
                }
            }
            if log {
                for (m, s) in max.iter_mut().zip(&sum) {
                    *m += math::ln(*s);
                }
                for (row_x, row_y) in xs.chunks(inner).zip(ys.chunks_mut(inner)) {
                    for ((o, &v), &shift) in row_y.iter_mut().zip(row_x).zip(&max) {
                        *o = v - shift;
                    }
                }
            } else {
                for s in sum.iter_mut() {
                    *s = 1.0 / *s;
                }
                for row_y in ys.chunks_mut(inner) {
                    for (o, &inv) in row_y.iter_mut().zip(&sum) {
                        *o *= inv;
                    }
                }
            }
        }
    }
}

/// Rows shorter than this go through `softmax_short_rows`: a per-row lane reduction costs more
/// than a handful of elements' work.
const SHORT_AXIS: usize = 16;

/// Softmax over many short contiguous rows (a 2-class score per anchor or pixel): the rows are
/// taken a chunk at a time, each row's shift (its max, then its max plus log-sum or its inverse
/// sum) is spread over its elements, and the exponential and the scaling run as flat vector
/// loops over the chunk. Per row, one exp call and two lane reductions took 6.7 ns per element
/// on 2-element rows (an MTCNN score map, 30x its memory roof).
#[inline(always)]
fn softmax_short_rows(x: &[f32], outer: usize, axis_len: usize, log: bool, y: &mut [f32]) {
    const CHUNK_ROWS: usize = 512;
    let total = outer * axis_len;
    let mut shift = vec![0f32; CHUNK_ROWS.min(outer) * axis_len];
    for (xs, ys) in x[..total]
        .chunks(CHUNK_ROWS * axis_len)
        .zip(y[..total].chunks_mut(CHUNK_ROWS * axis_len))
    {
        let shift = &mut shift[..xs.len()];
        for (row_x, row_shift) in xs
            .chunks_exact(axis_len)
            .zip(shift.chunks_exact_mut(axis_len))
        {
            let max = row_x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            row_shift.fill(max);
        }
        for ((o, &v), &max) in ys.iter_mut().zip(xs.iter()).zip(shift.iter()) {
            *o = math::exp(v - max);
        }
        for (row_y, row_shift) in ys
            .chunks_exact(axis_len)
            .zip(shift.chunks_exact_mut(axis_len))
        {
            let sum: f32 = row_y.iter().sum();
            let value = if log {
                row_shift[0] + math::ln(sum)
            } else {
                1.0 / sum
            };
            row_shift.fill(value);
        }
        if log {
            for ((o, &v), &shift) in ys.iter_mut().zip(xs.iter()).zip(shift.iter()) {
                *o = v - shift;
            }
        } else {
            for (o, &inv) in ys.iter_mut().zip(shift.iter()) {
                *o *= inv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LRN against its definition in f64, for the β = 0.75 square-root path and a general β,
    /// on every ISA variant; channel windows clipped at both ends (size 5 over 7 channels), two
    /// images, computed whole and as two ranges of planes split inside the first image (as the
    /// threads take them).
    #[test]
    fn lrn_matches_the_definition() {
        let (images, channels, plane, size) = (2usize, 7usize, 13usize, 5usize);
        let x: Vec<f32> = (0..images * channels * plane)
            .map(|i| ((i * 29 % 31) as f32 - 15.0) / 4.0)
            .collect();
        for (alpha, beta, bias) in [
            (1e-4f32, 0.75f32, 1.0f32),
            (0.5, 0.75, 2.0),
            (0.3, 0.6, 1.5),
        ] {
            for level in crate::kernels::simd::available_levels() {
                let mut whole = vec![0.0f32; x.len()];
                lrn::at(
                    level, &x, channels, plane, 0, size, alpha, beta, bias, &mut whole,
                );
                let mut pieces = vec![0.0f32; x.len()];
                let (front, back) = pieces.split_at_mut(5 * plane);
                lrn::at(
                    level, &x, channels, plane, 0, size, alpha, beta, bias, front,
                );
                lrn::at(level, &x, channels, plane, 5, size, alpha, beta, bias, back);
                assert_eq!(whole, pieces, "{level:?}: planes split across pieces");
                for n in 0..images {
                    for c in 0..channels {
                        let image = &x[n * channels * plane..];
                        for p in 0..plane {
                            let sum: f64 = (c.saturating_sub(2)..=(c + 2).min(channels - 1))
                                .map(|cc| f64::from(image[cc * plane + p]).powi(2))
                                .sum();
                            let base = f64::from(bias) + f64::from(alpha) / size as f64 * sum;
                            let want = f64::from(image[c * plane + p]) / base.powf(f64::from(beta));
                            let got = f64::from(whole[(n * channels + c) * plane + p]);
                            assert!(
                                (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                                "{level:?} beta {beta}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// LayerNormalization over empty rows and InstanceNormalization over empty planes (a model
    /// may declare a 0 dim) write nothing and do not panic.
    #[test]
    fn norms_of_empty_extents_are_no_ops() {
        let mut y: Vec<f32> = Vec::new();
        layer_norm(&[], 0, None, None, 1e-5, &mut y);
        instance_norm(&[], 4, 0, 0, &[1.0; 4], &[0.0; 4], 1e-5, &mut y);
        assert!(y.is_empty());
    }

    /// A zero-length axis or an empty inner extent (a model may declare a 0 dim) is a no-op,
    /// not a `chunks(0)` panic.
    #[test]
    fn softmax_of_an_empty_axis_is_a_no_op() {
        let mut y: Vec<f32> = Vec::new();
        softmax(&[], 3, 0, 1, false, &mut y);
        softmax(&[], 3, 4, 0, true, &mut y);
    }

    /// Both paths (contiguous rows, strided axis) against the definition.
    #[test]
    fn softmax_matches_the_definition() {
        // A long axis, and short ones (the short-row path) over more rows than one chunk holds.
        for (outer, axis, inner) in [(3, 37, 5), (1100, 2, 3), (700, 5, 2), (3, 15, 1)] {
            softmax_case(outer, axis, inner);
        }
    }

    fn softmax_case(outer: usize, axis: usize, inner: usize) {
        let x: Vec<f32> = (0..outer * axis * inner)
            .map(|i| ((i * 31) % 17) as f32 * 0.3 - 2.0)
            .collect();
        for (inner, log) in [(1, false), (1, true), (inner, false), (inner, true)] {
            let n = outer * axis * inner;
            let mut y = vec![0f32; n];
            softmax(&x[..n], outer, axis, inner, log, &mut y);
            for o in 0..outer {
                for i in 0..inner {
                    let at = |a: usize| (o * axis + a) * inner + i;
                    let max = (0..axis)
                        .map(|a| x[at(a)])
                        .fold(f32::NEG_INFINITY, f32::max);
                    let sum: f64 = (0..axis).map(|a| ((x[at(a)] - max) as f64).exp()).sum();
                    for a in 0..axis {
                        let p = ((x[at(a)] - max) as f64).exp() / sum;
                        let want = if log { p.ln() } else { p };
                        assert!(
                            (y[at(a)] as f64 - want).abs() < 1e-5,
                            "{outer}x{axis}x{inner} {log} {o} {a}"
                        );
                    }
                }
            }
        }
    }
}
