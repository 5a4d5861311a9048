//! The K×K stride-1 pooling kernel (AVX-512) for planes wider than the narrow kernel's:
//! GoogLeNet's and Inception's 28×28 3×3 pools beside their convolutions, the 5×5, 9×9 and
//! 13×13 maxima of YOLO's spatial-pyramid poolings.

use super::Pool2d;
use crate::kernels::simd::{isa_level, lanes_inside, IsaLevel};

/// The window sizes the wide kernel is instantiated for: 3×3 (GoogLeNet, Inception, YOLO
/// heads) and the 5, 9 and 13 of the spatial-pyramid poolings (YOLOv3-v8 SPP and SPPF).
pub(super) const WIDE_WINDOWS: [usize; 4] = [3, 5, 9, 13];

/// Whether [`wide_avx512`] takes this pool on `level`: AVX-512 (capped by the CPU), a square
/// K×K window of [`WIDE_WINDOWS`] at stride 1 without dilation, at most K − 1 columns and rows
/// of leading padding, and output rows wider than one vector (narrower ones go to the
/// narrow-plane kernel).
pub(super) fn wide_applies(level: IsaLevel, p: &Pool2d) -> bool {
    level.min(isa_level()) == IsaLevel::Avx512
        && p.kernel_h == p.kernel_w
        && WIDE_WINDOWS.contains(&p.kernel_w)
        && (p.stride_h, p.stride_w) == (1, 1)
        && (p.dilation_h, p.dilation_w) == (1, 1)
        && p.pad_left < p.kernel_w
        && p.pad_top < p.kernel_h
        && p.out_w > 16
        && p.out_h > 0
}

/// [`wide_avx512`] at the pool's window size.
///
/// # Safety
/// As [`wide_avx512`]; the geometry passes [`wide_applies`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn wide_pool_avx512<const MAX: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: Option<&[f32]>,
) {
    match p.kernel_w {
        3 => wide_avx512::<MAX, 3>(p, input, output, inverse),
        5 => wide_avx512::<MAX, 5>(p, input, output, inverse),
        9 => wide_avx512::<MAX, 9>(p, input, output, inverse),
        13 => wide_avx512::<MAX, 13>(p, input, output, inverse),
        other => unreachable!("wide pool of {other}x{other}: not in WIDE_WINDOWS"),
    }
}

/// K×K stride-1 max (`MAX`) or sum pooling straight from the NCHW plane, sixteen outputs per
/// step: the window's input rows are combined vertically once per 16 input columns (masked
/// loads: the padding and the columns past the row are the masked-off lanes, filled with the
/// identity), and the K horizontal taps are that vertical vector and its 1 … K − 1 lane shifts
/// into the next one (`valignd`). K loads and 2(K − 1) combines per vector of outputs, against
/// K² loads and K² − 1 combines for the window taps over a padded copy of the plane (max 3×3
/// on 256×28², Zen 4, one thread: 154 µs on that grid path, 77 µs here, onnxruntime 89).
///
/// `inverse` (average only) holds each output's reciprocal tap count, `out_h × out_w`.
///
/// # Safety
/// AVX-512F must be available; `input` holds `planes × in_h × in_w` floats and `output`
/// `planes × out_h × out_w`; the geometry passes [`wide_applies`] with `kernel_w == K`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn wide_avx512<const MAX: bool, const K: usize>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    debug_assert!(input.len() >= p.planes * ih * iw && output.len() >= p.planes * oh * ow);
    debug_assert!(p.kernel_w == K && K <= 16);
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
            let mut rows = [image; K];
            let mut count = 0;
            for ky in 0..K {
                let iy = (y + ky) as isize - p.pad_top as isize;
                if iy >= 0 && (iy as usize) < ih {
                    rows[count] = image.add(iy as usize * iw);
                    count += 1;
                }
            }
            // No closures: they would not inherit this function's target features.
            let (first, mask) = *column_masks.get_unchecked(0);
            let mut current = vertical::<MAX, K>(&rows, count, first, mask, identity);
            for (b, &mask) in out_masks.iter().enumerate() {
                let (first, load_mask) = *column_masks.get_unchecked(b + 1);
                let next = vertical::<MAX, K>(&rows, count, first, load_mask, identity);
                let mut acc = current;
                for shift in 1..K {
                    acc = combine::<MAX>(acc, shifted(current, next, shift));
                }
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

/// Max or sum of two vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn combine<const MAX: bool>(
    a: std::arch::x86_64::__m512,
    b: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    if MAX {
        _mm512_max_ps(a, b)
    } else {
        _mm512_add_ps(a, b)
    }
}

/// Lanes `shift ..` of `current` followed by the first `shift` lanes of `next` (`valignd`, whose
/// shift is an immediate: with K a constant the loop over shifts unrolls and this match folds).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn shifted(
    current: std::arch::x86_64::__m512,
    next: std::arch::x86_64::__m512,
    shift: usize,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let (cur, nxt) = (_mm512_castps_si512(current), _mm512_castps_si512(next));
    let lanes = match shift {
        1 => _mm512_alignr_epi32::<1>(nxt, cur),
        2 => _mm512_alignr_epi32::<2>(nxt, cur),
        3 => _mm512_alignr_epi32::<3>(nxt, cur),
        4 => _mm512_alignr_epi32::<4>(nxt, cur),
        5 => _mm512_alignr_epi32::<5>(nxt, cur),
        6 => _mm512_alignr_epi32::<6>(nxt, cur),
        7 => _mm512_alignr_epi32::<7>(nxt, cur),
        8 => _mm512_alignr_epi32::<8>(nxt, cur),
        9 => _mm512_alignr_epi32::<9>(nxt, cur),
        10 => _mm512_alignr_epi32::<10>(nxt, cur),
        11 => _mm512_alignr_epi32::<11>(nxt, cur),
        12 => _mm512_alignr_epi32::<12>(nxt, cur),
        13 => _mm512_alignr_epi32::<13>(nxt, cur),
        14 => _mm512_alignr_epi32::<14>(nxt, cur),
        _ => _mm512_alignr_epi32::<15>(nxt, cur),
    };
    _mm512_castsi512_ps(lanes)
}

/// The first `count` of the window rows `rows` combined at the 16 input columns from `first`
/// (lanes outside `mask` hold the identity). A full window is a loop over the constant K,
/// unrolled: as a loop over a run-time count it compiled to a counted loop per vector (a third
/// of the 3×3 kernel's cycles on bookkeeping); only the border rows take that loop.
///
/// # Safety
/// AVX-512F must be available; the lanes in `mask` lie inside every row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn vertical<const MAX: bool, const K: usize>(
    rows: &[*const f32; K],
    count: usize,
    first: isize,
    mask: u16,
    identity: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let load = |row: *const f32| _mm512_mask_loadu_ps(identity, mask, row.wrapping_offset(first));
    if count == K {
        let mut acc = load(rows[0]);
        for &row in &rows[1..] {
            acc = combine::<MAX>(acc, load(row));
        }
        return acc;
    }
    let mut acc = identity;
    for &row in &rows[..count] {
        acc = combine::<MAX>(acc, load(row));
    }
    acc
}
