//! The narrow-plane pooling kernel (AVX-512): planes whose output rows fit one vector.

use super::Pool2d;
use crate::kernels::simd::{isa_level, IsaLevel};

/// Whether the narrow-plane kernel takes this pool on `level`: AVX-512 (capped by the CPU),
/// output rows of at most 16 and input rows of at most 32 columns.
pub(super) fn narrow_planes_apply(level: IsaLevel, p: &Pool2d) -> bool {
    level.min(isa_level()) == IsaLevel::Avx512
        && (1..=16).contains(&p.out_w)
        && p.in_w <= 32
        && p.out_h > 0
        && p.kernel_w > 0
}

/// Pools on planes narrow enough that an output row is one vector (Inception's 14×14 and 7×7
/// stages, SqueezeNet's 13×13), separably: each input row is loaded once as two masked
/// vectors and combined horizontally, each tap one two-source permute by a precomputed index
/// vector (`x·stride + kx·dilation − pad`) with the columns outside the row blended to the
/// identity; each output row then combines its window rows' vectors. The separable path spent its time on per-row bookkeeping and phase copies of
/// 7-14 floats: 13-31× the time of copying the bytes.
///
/// `inverse` (average only) holds each output's reciprocal tap count, `out_h × out_w`.
///
/// # Safety
/// AVX-512F must be available; `input` holds `planes × in_h × in_w` floats and `output`
/// `planes × out_h × out_w`; `1 ≤ out_w ≤ 16` and `in_w ≤ 32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn narrow_planes_avx512<const MAX: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let identity = _mm512_set1_ps(if MAX { f32::NEG_INFINITY } else { 0.0 });
    // Per horizontal tap: the source column of each output lane, and the lanes whose column
    // lies inside the row.
    let mut index = Vec::with_capacity(p.kernel_w);
    let mut valid = Vec::with_capacity(p.kernel_w);
    for kx in 0..p.kernel_w {
        let mut lanes = [0i32; 16];
        let mut inside: u16 = 0;
        for (x, lane) in lanes.iter_mut().enumerate().take(ow) {
            let column = (x * p.stride_w + kx * p.dilation_w) as isize - p.pad_left as isize;
            if column >= 0 && (column as usize) < iw {
                *lane = column as i32;
                inside |= 1 << x;
            }
        }
        index.push(_mm512_loadu_si512(lanes.as_ptr().cast()));
        valid.push(inside);
    }
    let low_mask: u16 = if iw >= 16 {
        0xFFFF
    } else {
        ((1u32 << iw) - 1) as u16
    };
    let high_mask: u16 = if iw <= 16 {
        0
    } else {
        ((1u32 << (iw - 16)) - 1) as u16
    };
    let out_mask: u16 = ((1u32 << ow) - 1) as u16;
    // Separable: each input row's horizontal combine once (one vector), then each output row
    // combines the vectors of its window rows. Every input row is read and permuted once
    // instead of once per window row it falls in.
    let mut rows = vec![identity; ih];
    let contiguous_rows = p.dilation_h == 1;
    for plane in 0..p.planes {
        let source = input.as_ptr().add(plane * ih * iw);
        let target = output.as_mut_ptr().add(plane * oh * ow);
        for (iy, combined) in rows.iter_mut().enumerate() {
            let row = source.add(iy * iw);
            // Full loads where 32 floats from the row start stay inside the input (the lanes
            // past the row are never picked); masked ones near its end. Masked loads and
            // stores of 7-14 lanes at unaligned addresses cost several times a plain one.
            let (low, high) = if (plane * ih + iy) * iw + 32 <= input.len() {
                (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)))
            } else {
                (
                    _mm512_maskz_loadu_ps(low_mask, row),
                    _mm512_maskz_loadu_ps(high_mask, row.wrapping_add(16)),
                )
            };
            let mut acc = identity;
            for (lanes, &inside) in index.iter().zip(&valid) {
                let taps = _mm512_permutex2var_ps(low, *lanes, high);
                let taps = _mm512_mask_blend_ps(inside, identity, taps);
                acc = if MAX {
                    _mm512_max_ps(acc, taps)
                } else {
                    _mm512_add_ps(acc, taps)
                };
            }
            *combined = acc;
        }
        for y in 0..oh {
            let mut acc = identity;
            if contiguous_rows {
                // The window's rows inside the plane are one run: no per-tap index arithmetic
                // or bounds test (those were a third of this kernel's cycles).
                let top = y * p.stride_h;
                let lo = top.saturating_sub(p.pad_top).min(ih);
                let hi = (top + p.kernel_h).saturating_sub(p.pad_top).min(ih);
                for &combined in rows.get_unchecked(lo..hi.max(lo)) {
                    acc = if MAX {
                        _mm512_max_ps(acc, combined)
                    } else {
                        _mm512_add_ps(acc, combined)
                    };
                }
            } else {
                for ky in 0..p.kernel_h {
                    let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                    if iy < 0 || iy >= ih as isize {
                        continue;
                    }
                    let combined = *rows.get_unchecked(iy as usize);
                    acc = if MAX {
                        _mm512_max_ps(acc, combined)
                    } else {
                        _mm512_add_ps(acc, combined)
                    };
                }
            }
            if let Some(inverse) = inverse {
                let scale = _mm512_maskz_loadu_ps(out_mask, inverse.as_ptr().add(y * ow));
                acc = _mm512_mul_ps(acc, scale);
            }
            // Rows are stored in address order, so a full store's lanes past this row land
            // on outputs written later in this call; only the call's last 15 floats must not
            // be overrun (the next planes may belong to another thread).
            let at = (plane * oh + y) * ow;
            if at + 16 <= p.planes * oh * ow {
                _mm512_storeu_ps(target.add(y * ow), acc);
            } else {
                _mm512_mask_storeu_ps(target.add(y * ow), out_mask, acc);
            }
        }
    }
}
