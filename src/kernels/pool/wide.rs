//! The 3×3 stride-1 pooling kernel (AVX-512) for planes wider than the narrow kernel's:
//! GoogLeNet's and Inception's 28×28 pools beside their convolutions, YOLO-style 3×3 maxima.

use super::Pool2d;
use crate::kernels::simd::{isa_level, lanes_inside, IsaLevel};

/// Whether [`wide_3x3_avx512`] takes this pool on `level`: AVX-512 (capped by the CPU), a 3×3
/// window at stride 1 without dilation, at most two columns and rows of leading padding, and
/// output rows wider than one vector (narrower ones go to the narrow-plane kernel).
pub(super) fn wide_3x3_applies(level: IsaLevel, p: &Pool2d) -> bool {
    level.min(isa_level()) == IsaLevel::Avx512
        && (p.kernel_h, p.kernel_w) == (3, 3)
        && (p.stride_h, p.stride_w) == (1, 1)
        && (p.dilation_h, p.dilation_w) == (1, 1)
        && p.pad_left <= 2
        && p.pad_top <= 2
        && p.out_w > 16
        && p.out_h > 0
}

/// 3×3 stride-1 max (`MAX`) or sum pooling straight from the NCHW plane, sixteen outputs per
/// step: the window's input rows are combined vertically once per 16 input columns (masked
/// loads: the padding and the columns past the row are the masked-off lanes, filled with the
/// identity), and the three horizontal taps are that vertical vector and its one- and
/// two-lane shifts into the next one (`valignd`). Three loads and four combines per vector of
/// outputs, against nine loads and eight combines for the window taps over a padded copy of
/// the plane (max 3×3 on 256×28², Zen 4, one thread: 154 µs on that grid path, 77 µs here,
/// onnxruntime 89).
///
/// `inverse` (average only) holds each output's reciprocal tap count, `out_h × out_w`.
///
/// # Safety
/// AVX-512F must be available; `input` holds `planes × in_h × in_w` floats and `output`
/// `planes × out_h × out_w`; the geometry passes [`wide_3x3_applies`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn wide_3x3_avx512<const MAX: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    debug_assert!(input.len() >= p.planes * ih * iw && output.len() >= p.planes * oh * ow);
    let identity = _mm512_set1_ps(if MAX { f32::NEG_INFINITY } else { 0.0 });
    let blocks = ow.div_ceil(16);
    // Vertical vector j covers input columns 16·j − pad_left onwards; block b reads j = b and
    // b + 1.
    let column_masks: Vec<(isize, u16)> = (0..=blocks)
        .map(|j| {
            let first = (16 * j) as isize - p.pad_left as isize;
            (first, lanes_inside(first, iw))
        })
        .collect();
    let out_masks: Vec<u16> = (0..blocks)
        .map(|b| ((1u32 << (ow - 16 * b).min(16)) - 1) as u16)
        .collect();
    for plane in 0..p.planes {
        let image = input.as_ptr().add(plane * ih * iw);
        let out = output.as_mut_ptr().add(plane * oh * ow);
        for y in 0..oh {
            // The window's rows inside the plane (rows in the padding contribute nothing).
            let mut rows = [image; 3];
            let mut count = 0;
            for ky in 0..3 {
                let iy = (y + ky) as isize - p.pad_top as isize;
                if iy >= 0 && (iy as usize) < ih {
                    rows[count] = image.add(iy as usize * iw);
                    count += 1;
                }
            }
            // No closures: they would not inherit this function's target features.
            let (first, mask) = *column_masks.get_unchecked(0);
            let mut current = vertical::<MAX>(&rows[..count], first, mask, identity);
            for (b, &mask) in out_masks.iter().enumerate() {
                let (first, load_mask) = *column_masks.get_unchecked(b + 1);
                let next = vertical::<MAX>(&rows[..count], first, load_mask, identity);
                let (cur, nxt) = (_mm512_castps_si512(current), _mm512_castps_si512(next));
                let one = _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(nxt, cur));
                let two = _mm512_castsi512_ps(_mm512_alignr_epi32::<2>(nxt, cur));
                let mut acc = if MAX {
                    _mm512_max_ps(_mm512_max_ps(current, one), two)
                } else {
                    _mm512_add_ps(_mm512_add_ps(current, one), two)
                };
                let at = y * ow + 16 * b;
                if let Some(inverse) = inverse {
                    let scale = _mm512_maskz_loadu_ps(mask, inverse.as_ptr().add(at));
                    acc = _mm512_mul_ps(acc, scale);
                }
                _mm512_mask_storeu_ps(out.add(at), mask, acc);
                current = next;
            }
        }
    }
}

/// The window rows `rows` combined at the 16 input columns from `first` (lanes outside `mask`
/// hold the identity). The three-row case is written out: as a loop over a run-time count it
/// compiled to a counted loop per vector (a third of the kernel's cycles on bookkeeping).
///
/// # Safety
/// AVX-512F must be available; the lanes in `mask` lie inside every row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn vertical<const MAX: bool>(
    rows: &[*const f32],
    first: isize,
    mask: u16,
    identity: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let load = |row: *const f32| _mm512_mask_loadu_ps(identity, mask, row.wrapping_offset(first));
    let combine = |a, b| {
        if MAX {
            _mm512_max_ps(a, b)
        } else {
            _mm512_add_ps(a, b)
        }
    };
    match *rows {
        [a, b, c] => combine(combine(load(a), load(b)), load(c)),
        [a, b] => combine(load(a), load(b)),
        [a] => load(a),
        _ => identity,
    }
}
