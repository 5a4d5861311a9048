//! Stride-1 "same" pools on small planes, computed on the flattened plane: Inception's 3×3
//! max pools on 6×6 and 7×7 planes and the like, where a plane is a few vectors and the
//! row-at-a-time kernel spent its time on per-row work (one row of 6-7 floats per vector: 832
//! planes of 6×6 took 33 µs, 14× the time of copying their bytes; now 19 µs, and 1024×7²
//! 47 → 31 µs, `cargo bench --bench pool`).
//!
//! A plane of h×w floats is a run of h·w floats. A horizontal tap dx is the run shifted by dx,
//! with the lanes whose column + dx leaves the row masked off (masks per vector and tap, the
//! same for every plane); a vertical tap dy is the horizontal result shifted by dy·w, with
//! identity rows above and below the plane in a scratch run. Each output vector then costs
//! its kernel_w + kernel_h loads, whatever the row width.

use super::Pool2d;
use crate::kernels::simd::{isa_level, IsaLevel};

/// Planes of up to this many floats (8 vectors) take the flattened kernel. Past it the row
/// kernel is as fast (13×13: 39-42 µs either way for 512 planes) or faster (14×14 average:
/// 50 against 62 µs for 576 planes): one permute per vertical tap and vector costs what the
/// row kernel's per-row work does once rows hold a dozen floats.
const MAX_PLANE: usize = 128;

/// Whether the flattened kernel takes this pool on `level`: AVX-512 (capped by the CPU),
/// stride and dilation 1, the output plane the input's shape (windows centred by their
/// padding), planes of at most [`MAX_PLANE`] floats.
pub(super) fn flat_applies(level: IsaLevel, p: &Pool2d) -> bool {
    level.min(isa_level()) == IsaLevel::Avx512
        && (p.stride_h, p.stride_w) == (1, 1)
        && (p.dilation_h, p.dilation_w) == (1, 1)
        && (p.out_h, p.out_w) == (p.in_h, p.in_w)
        && p.in_h * p.in_w > 0
        && p.in_h * p.in_w <= MAX_PLANE
        && p.kernel_h > 0
        && p.kernel_w > 0
        && p.pad_top < p.kernel_h
        && p.pad_left < p.kernel_w
}

/// Max (`MAX`) or average (sum × `inverse`, each output's reciprocal tap count, `h × w`) of
/// every plane of `p`. Everything between the input and the output stays in registers (a
/// vector array on the stack, read back whole): a first version staged the plane and the
/// horizontal result in scratch runs and read them back at shifted offsets, which the store
/// buffer cannot forward, and was slower than the row kernel (42 against 33 µs on 832×6²).
///
/// # Safety
/// AVX-512F must be available; `p` passes [`flat_applies`]; `input` holds `planes × h × w`
/// floats and `output` as many, `inverse` (average only) `h × w`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn flat_pool_avx512<const MAX: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let (h, w) = (p.in_h, p.in_w);
    let (kh, kw, pad_top, pad_left) = (p.kernel_h, p.kernel_w, p.pad_top, p.pad_left);
    let plane = h * w;
    let vectors = plane.div_ceil(16);
    let identity = _mm512_set1_ps(if MAX { f32::NEG_INFINITY } else { 0.0 });
    let combine = |acc: __m512, mask: u16, taps: __m512| {
        if MAX {
            _mm512_mask_max_ps(acc, mask, acc, taps)
        } else {
            _mm512_mask_add_ps(acc, mask, acc, taps)
        }
    };
    // Per vector and horizontal tap: the lanes inside the plane whose column + (kx − pad_left)
    // stays inside the row.
    let mut row_masks = vec![0u16; vectors * kw];
    for (at, mask) in row_masks.iter_mut().enumerate() {
        let (vector, kx) = (at / kw, at % kw);
        for lane in 0..16 {
            let index = vector * 16 + lane;
            let column = (index % w) as isize + kx as isize - pad_left as isize;
            if index < plane && column >= 0 && column < w as isize {
                *mask |= 1 << lane;
            }
        }
    }
    // Per vector and vertical tap: the first of the two horizontal vectors the shifted lanes
    // come from (−1 and `vectors` stand for identity), the permutation picking them, and the
    // lanes whose row + (ky − pad_top) stays inside the plane.
    let mut column_taps = Vec::with_capacity(vectors * kh);
    for vector in 0..vectors {
        for ky in 0..kh {
            let shift = (vector * 16) as isize + (ky as isize - pad_top as isize) * w as isize;
            let first = shift.div_euclid(16);
            let offset = shift.rem_euclid(16) as i32;
            let mut lanes = [0i32; 16];
            let mut mask: u16 = 0;
            for (lane, index) in lanes.iter_mut().enumerate() {
                *index = lane as i32 + offset;
                let at = vector * 16 + lane;
                let row = (at / w) as isize + ky as isize - pad_top as isize;
                if at < plane && row >= 0 && row < h as isize {
                    mask |= 1 << lane;
                }
            }
            column_taps.push((first, _mm512_loadu_si512(lanes.as_ptr().cast()), mask));
        }
    }
    let scale: Option<Vec<f32>> = inverse.map(|inverse| {
        let mut padded = inverse[..plane].to_vec();
        padded.resize(vectors * 16, 0.0);
        padded
    });
    let total = p.planes * plane;
    let mut rows = [identity; MAX_PLANE / 16];
    for plane_index in 0..p.planes {
        let base = plane_index * plane;
        for (vector, combined) in rows.iter_mut().enumerate().take(vectors) {
            let mut acc = identity;
            for kx in 0..kw {
                let mask = *row_masks.get_unchecked(vector * kw + kx);
                let start = (base + vector * 16 + kx) as isize - pad_left as isize;
                // Lanes outside the plane are masked off; a plain load may read them from the
                // neighbouring planes, but not from before or past the whole input.
                let taps = if start >= 0 && start as usize + 16 <= input.len() {
                    _mm512_loadu_ps(input.as_ptr().offset(start))
                } else {
                    _mm512_maskz_loadu_ps(mask, input.as_ptr().wrapping_offset(start))
                };
                acc = combine(acc, mask, taps);
            }
            *combined = acc;
        }
        let target = output.as_mut_ptr().add(base);
        for vector in 0..vectors {
            let mut acc = identity;
            for &(first, lanes, mask) in column_taps.get_unchecked(vector * kh..(vector + 1) * kh) {
                let pick = |at: isize| {
                    if at >= 0 && (at as usize) < vectors {
                        *rows.get_unchecked(at as usize)
                    } else {
                        identity
                    }
                };
                let taps = _mm512_permutex2var_ps(pick(first), lanes, pick(first + 1));
                acc = combine(acc, mask, taps);
            }
            if let Some(scale) = &scale {
                acc = _mm512_mul_ps(acc, _mm512_loadu_ps(scale.as_ptr().add(vector * 16)));
            }
            // Planes are written in address order, so a full store's lanes past this plane
            // land on outputs written later in this call; only the call's last floats must
            // not be overrun (the next planes may belong to another thread).
            let at = base + vector * 16;
            if at + 16 <= total {
                _mm512_storeu_ps(target.add(vector * 16), acc);
            } else {
                let lanes = total - at;
                _mm512_mask_storeu_ps(target.add(vector * 16), ((1u32 << lanes) - 1) as u16, acc);
            }
        }
    }
}
