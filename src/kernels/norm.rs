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

multiversion! {
    /// Normalises each row of `row_len` elements; `gamma`/`beta` have `row_len` (or are absent).
    pub fn layer_norm(x: &[f32], row_len: usize, gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f32, y: &mut [f32]) {
        for (xs, ys) in x.chunks(row_len).zip(y.chunks_mut(row_len)) {
            let mean = xs.iter().sum::<f32>() / row_len as f32;
            let var = xs.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / row_len as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for (i, (o, &v)) in ys.iter_mut().zip(xs).enumerate() {
                let mut n = (v - mean) * inv;
                if let Some(g) = gamma {
                    n *= g[i];
                }
                if let Some(b) = beta {
                    n += b[i];
                }
                *o = n;
            }
        }
    }
}

multiversion! {
    /// Instance normalisation: each (n, c) plane normalised, then scale[c]/bias[c].
    pub fn instance_norm(x: &[f32], channels: usize, plane: usize, scale: &[f32], bias: &[f32], eps: f32, y: &mut [f32]) {
        for (i, (xs, ys)) in x.chunks(plane).zip(y.chunks_mut(plane)).enumerate() {
            let c = i % channels;
            let mean = xs.iter().sum::<f32>() / plane as f32;
            let var = xs.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / plane as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for (o, &v) in ys.iter_mut().zip(xs) {
                *o = (v - mean) * inv * scale[c] + bias[c];
            }
        }
    }
}

/// Local response normalisation across channels (NCHW).
#[allow(clippy::too_many_arguments)]
pub fn lrn(
    x: &[f32],
    batch: usize,
    channels: usize,
    plane: usize,
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
    y: &mut [f32],
) {
    let half_lo = (size - 1) / 2;
    let half_hi = size - 1 - half_lo;
    let mut squares = vec![0.0f32; plane];
    for n in 0..batch {
        let image = &x[n * channels * plane..(n + 1) * channels * plane];
        let out = &mut y[n * channels * plane..(n + 1) * channels * plane];
        for c in 0..channels {
            squares.fill(0.0);
            let lo = c.saturating_sub(half_lo);
            let hi = (c + half_hi).min(channels - 1);
            for cc in lo..=hi {
                for (s, &v) in squares.iter_mut().zip(&image[cc * plane..(cc + 1) * plane]) {
                    *s += v * v;
                }
            }
            for ((o, &v), &s) in out[c * plane..(c + 1) * plane]
                .iter_mut()
                .zip(&image[c * plane..(c + 1) * plane])
                .zip(&squares)
            {
                *o = v / (bias + alpha / size as f32 * s).powf(beta);
            }
        }
    }
}

multiversion! {
    /// Softmax (or log-softmax) along an axis of length `axis_len` with `inner` elements per step
    /// (row-major: index = (outer·axis_len + a)·inner + i).
    pub fn softmax(x: &[f32], outer: usize, axis_len: usize, inner: usize, log: bool, y: &mut [f32]) {
        for o in 0..outer {
            let base = o * axis_len * inner;
            for i in 0..inner {
                let at = |a: usize| base + a * inner + i;
                let mut max = f32::NEG_INFINITY;
                for a in 0..axis_len {
                    max = max.max(x[at(a)]);
                }
                let mut sum = 0.0;
                for a in 0..axis_len {
                    let e = math::exp(x[at(a)] - max);
                    y[at(a)] = e;
                    sum += e;
                }
                if log {
                    let log_sum = math::ln(sum);
                    for a in 0..axis_len {
                        y[at(a)] = x[at(a)] - max - log_sum;
                    }
                } else {
                    let inv = 1.0 / sum;
                    for a in 0..axis_len {
                        y[at(a)] *= inv;
                    }
                }
            }
        }
    }
}
