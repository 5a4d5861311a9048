//! The AVX2 rows kernel for 3×3 depthwise convolutions, stride 1 or 2: eight outputs of a row
//! per vector read straight from the NCHW rows (no phase-plane copy), several output rows at
//! a time so each input vector loaded feeds every output row that needs it.
//!
//! Why a kernel of its own on AVX2: the phase-plane path (copy or deinterleave the plane, then
//! the row-blocked FMA loop) ran 2.7-7× its FMA floor on Zen 1 (`cargo bench --bench
//! depthwise`): a 112² plane's phases (52 KB) miss L1, and nine weights, four accumulators and
//! the row pointers did not fit sixteen registers next to an activation matched per vector.
//! Here the activation is chosen once per call (a type parameter), only the edge vectors take
//! the shifted loads that stand for the padding, and the interior loop holds the accumulators,
//! the nine weights and one input vector. Same bench, one thread, old and new in one sitting:
//! 32×112² 448 → 321 µs, 144×56² 557 → 417, stride 2 96×112² 758 → 550 (144×56² stride 2,
//! half of whose vectors are edges, unchanged at 250).
//!
//! Stride 2 splits each sixteen-column span into even and odd columns with one in-lane
//! `shufps` per tap instead of a lane-crossing permute: the sums come out in the lane order
//! 0, 1, 4, 5, 2, 3, 6, 7 for every tap alike, and one 64-bit permute per output vector puts
//! them back in order.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::kernels::conv::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::act::{with_loop_activation, LoopActivation};
use crate::kernels::parallel::SendPtr;

/// Output rows computed together at stride 1: six input rows, each loaded at three column
/// offsets, feed four rows of nine FMAs (18 loads for 36 FMAs). Two rows with a partial sum
/// per kernel row (shorter FMA chains) measured slower: 6 loads per 9 FMAs.
const ROWS_S1: usize = 4;
/// At stride 2: five input rows for two output rows (a third row measured no better).
const ROWS_S2: usize = 2;
/// How many bands ahead the input rows are prefetched.
const PREFETCH_BANDS: usize = 2;

/// The most input rows one band reads: `S·(R − 1) + 3` for both strides' band heights.
const BAND_INPUT_ROWS: usize = 6;
const _: () = assert!(ROWS_S1 + 2 <= BAND_INPUT_ROWS && 2 * ROWS_S2 < BAND_INPUT_ROWS);

/// Whether [`rows_3x3_avx2`] computes `g`: 3×3, dilation 1, the same stride 1 or 2 in both
/// directions (any padding), input and output rows at least one vector wide. `in_w ≥ 8` is a
/// precondition of the edge loads (they load eight columns inside the row), not a tuning
/// choice; the dispatcher also keeps the small planes on the channel-per-lane kernel.
pub(super) fn rows_3x3_avx2_fits(g: &Conv2d) -> bool {
    g.is_dense_3x3()
        && g.stride_h == g.stride_w
        && (g.stride_w == 1 || g.stride_w == 2)
        && g.out_w >= 8
        && g.in_w >= 8
}

/// What every band of one call shares.
struct Plane<'a> {
    geom: &'a Conv2d,
    /// The output vectors whose loads lie inside the row and whose eight outputs are all
    /// stored (no masks); the others are the edges.
    interior: Range<usize>,
    /// A zero row (`in_w` floats) standing for the padding rows.
    zero_row: *const f32,
    weights: [__m256; 9],
    bias: __m256,
    /// The channel's input plane, output plane and residual plane, if any.
    image: *const f32,
    out: *mut f32,
    residual: Option<*const f32>,
}

/// 3×3 depthwise convolution of the planes `planes` (indices over batch × channels) on AVX2.
///
/// # Safety
/// AVX2 and FMA must be available, [`rows_3x3_avx2_fits`] must hold for `g`, the slices must
/// be as long as `g` says, and no other thread may write the output planes of `planes`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_3x3_avx2(
    g: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
) {
    with_loop_activation!(&epilogue.activation, __m256, act => {
        by_stride(g, input, weights, epilogue, output, planes, act)
    })
}

#[inline(always)]
unsafe fn by_stride<A: LoopActivation<__m256>>(
    g: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
    act: A,
) {
    if g.stride_w == 1 {
        all_planes::<1, ROWS_S1, A>(g, input, weights, epilogue, output, planes, act)
    } else {
        all_planes::<2, ROWS_S2, A>(g, input, weights, epilogue, output, planes, act)
    }
}

/// Columns a stride-`S` output vector starting at output column `x0` loads, first and last.
fn loaded_columns<const S: usize>(g: &Conv2d, x0: usize) -> (isize, isize) {
    let first = (S * x0) as isize - g.pad_left as isize;
    // Stride 1: three loads of eight from `first`, `first + 1`, `first + 2`. Stride 2: two
    // pairs of eight from `first` and `first + 2`.
    let last = first + if S == 1 { 9 } else { 17 };
    (first, last)
}

/// The output vectors whose loads stay inside the row and whose eight outputs are all stored:
/// one run in the middle of the row (the conditions are monotone along it).
fn interior_vectors<const S: usize>(g: &Conv2d) -> Range<usize> {
    let vectors = g.out_w.div_ceil(8);
    let inside = |v: usize| {
        let x0 = 8 * v;
        let (first, last) = loaded_columns::<S>(g, x0);
        x0 + 8 <= g.out_w && first >= 0 && last < g.in_w as isize
    };
    let start = (0..vectors).find(|&v| inside(v)).unwrap_or(vectors);
    let end = (start..vectors).find(|&v| !inside(v)).unwrap_or(vectors);
    start..end
}

#[inline(always)]
unsafe fn all_planes<const S: usize, const R: usize, A: LoopActivation<__m256>>(
    g: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
    act: A,
) {
    let interior = interior_vectors::<S>(g);
    // Every load lies inside `0..in_w` of its row (the edge loads are moved inside), so a
    // zero row of that width stands for the padding rows.
    let zeros = vec![0.0f32; g.in_w];
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    for plane in planes {
        let channel = plane % g.in_channels;
        let taps = &weights[channel * 9..channel * 9 + 9];
        let mut kernel = [_mm256_setzero_ps(); 9];
        for (k, &w) in kernel.iter_mut().zip(taps) {
            *k = _mm256_set1_ps(w);
        }
        let p = Plane {
            geom: g,
            interior: interior.clone(),
            zero_row: zeros.as_ptr(),
            weights: kernel,
            bias: _mm256_set1_ps(epilogue.bias.map_or(0.0, |b| b[channel])),
            image: input.as_ptr().add(plane * in_plane),
            out: output.get().add(plane * out_plane),
            residual: epilogue.residual.map(|r| r.as_ptr().add(plane * out_plane)),
        };
        let mut y = 0;
        while y + R <= g.out_h {
            band::<S, R, A>(&p, y, act);
            y += R;
        }
        while y < g.out_h {
            band::<S, 1, A>(&p, y, act);
            y += 1;
        }
    }
}

/// Output rows `y..y + R` of one plane.
#[inline(always)]
unsafe fn band<const S: usize, const R: usize, A: LoopActivation<__m256>>(
    p: &Plane,
    y: usize,
    act: A,
) {
    let g = p.geom;
    // Input rows S·y − pad_top + i for i < S·(R − 1) + 3; the padding reads the zero row.
    let mut rows = [p.zero_row; BAND_INPUT_ROWS];
    for (i, row) in rows.iter_mut().enumerate().take(S * (R - 1) + 3) {
        let iy = (S * y + i) as isize - g.pad_top as isize;
        if iy >= 0 && iy < g.in_h as isize {
            *row = p.image.add(iy as usize * g.in_w);
        }
    }
    // Bring in the rows that the band PREFETCH_BANDS ahead reads first (S·R rows past what
    // the band before it read). Inside a model the input was written by the op before and has
    // mostly left L1 and L2. Near a plane's edges the addresses leave it (into the next plane,
    // usually the next one read, or past or before the input): a prefetch cannot fault.
    let ahead =
        S as isize * (y + PREFETCH_BANDS * R) as isize - g.pad_top as isize + 3 - S as isize;
    let from = p.image.wrapping_offset(ahead * g.in_w as isize);
    let mut at = 0;
    while at < S * R * g.in_w {
        _mm_prefetch::<_MM_HINT_T0>(from.wrapping_add(at) as *const i8);
        at += 16;
    }
    let vectors = g.out_w.div_ceil(8);
    // Edges and interior in separate loops: the interior loop then holds its weights and
    // accumulators in registers instead of sharing them with the edge code.
    for v in (0..p.interior.start).chain(p.interior.end..vectors) {
        vector::<S, R, true, A>(p, &rows, y, 8 * v, act);
    }
    for v in p.interior.clone() {
        vector::<S, R, false, A>(p, &rows, y, 8 * v, act);
    }
}

/// Eight input columns from `column` of `row`; with `MASKED`, the lanes outside the row read
/// zero (the padding). The masked form loads the eight columns of the row nearest to them and
/// moves them into place with one permute: `vmaskmovps` costs several times a plain load
/// on Zen 1 (an all-masked variant of this kernel ran three times slower). Rows are at least
/// eight wide ([`rows_3x3_avx2_fits`]).
#[inline(always)]
unsafe fn load<const MASKED: bool>(row: *const f32, column: isize, width: usize) -> __m256 {
    if MASKED {
        let start = column.clamp(0, width as isize - 8);
        let loaded = _mm256_loadu_ps(row.offset(start));
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        // Lane k takes loaded lane k + column − start (the permute keeps the low three bits;
        // lanes whose source is outside the load are outside the row and cleared below).
        let moved = _mm256_permutevar8x32_ps(
            loaded,
            _mm256_add_epi32(lane, _mm256_set1_epi32((column - start) as i32)),
        );
        let index = _mm256_add_epi32(lane, _mm256_set1_epi32(column as i32));
        let inside = _mm256_andnot_si256(
            _mm256_cmpgt_epi32(_mm256_setzero_si256(), index),
            _mm256_cmpgt_epi32(_mm256_set1_epi32(width as i32), index),
        );
        _mm256_and_ps(moved, _mm256_castsi256_ps(inside))
    } else {
        _mm256_loadu_ps(row.wrapping_offset(column))
    }
}

/// Output columns `x0..x0 + 8` of rows `y..y + R`: all taps summed in registers, then the
/// residual and activation, one store per row.
#[inline(always)]
unsafe fn vector<const S: usize, const R: usize, const MASKED: bool, A: LoopActivation<__m256>>(
    p: &Plane,
    rows: &[*const f32; BAND_INPUT_ROWS],
    y: usize,
    x0: usize,
    act: A,
) {
    let g = p.geom;
    let w = &p.weights;
    let (first, _) = loaded_columns::<S>(g, x0);
    let mut acc = [p.bias; R];
    if S == 1 {
        for (i, &row) in rows.iter().enumerate().take(R + 2) {
            for kx in 0..3 {
                let input = load::<MASKED>(row, first + kx as isize, g.in_w);
                for (j, a) in acc.iter_mut().enumerate() {
                    if i >= j && i - j < 3 {
                        *a = _mm256_fmadd_ps(input, w[(i - j) * 3 + kx], *a);
                    }
                }
            }
        }
    } else {
        for (i, &row) in rows.iter().enumerate().take(2 * R + 1) {
            // Columns first + {0, 2, 8, 10 | 4, 6, 12, 14} (+1 for the odd taps, +2 for the
            // right taps): outputs 0, 1, 4, 5, 2, 3, 6, 7.
            let low = load::<MASKED>(row, first, g.in_w);
            let high = load::<MASKED>(row, first + 8, g.in_w);
            let left = _mm256_shuffle_ps::<0x88>(low, high);
            let middle = _mm256_shuffle_ps::<0xdd>(low, high);
            let right = _mm256_shuffle_ps::<0x88>(
                load::<MASKED>(row, first + 2, g.in_w),
                load::<MASKED>(row, first + 10, g.in_w),
            );
            for (j, a) in acc.iter_mut().enumerate() {
                if i >= 2 * j && i - 2 * j < 3 {
                    let ky = i - 2 * j;
                    *a = _mm256_fmadd_ps(left, w[ky * 3], *a);
                    *a = _mm256_fmadd_ps(middle, w[ky * 3 + 1], *a);
                    *a = _mm256_fmadd_ps(right, w[ky * 3 + 2], *a);
                }
            }
        }
        for a in acc.iter_mut() {
            *a = _mm256_castpd_ps(_mm256_permute4x64_pd::<0xd8>(_mm256_castps_pd(*a)));
        }
    }
    let lanes = (g.out_w - x0).min(8);
    let store_mask = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(lanes as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    // Masked stores cost far more than plain ones on Zen 1: only a partial vector takes them.
    let partial = MASKED && lanes < 8;
    for (j, a) in acc.iter().enumerate() {
        let at = (y + j) * g.out_w + x0;
        let mut value = *a;
        if let Some(residual) = p.residual {
            let residual = residual.add(at);
            value = _mm256_add_ps(
                value,
                if partial {
                    _mm256_maskload_ps(residual, store_mask)
                } else {
                    _mm256_loadu_ps(residual)
                },
            );
        }
        let value = act.apply(value);
        if partial {
            _mm256_maskstore_ps(p.out.add(at), store_mask, value);
        } else {
            _mm256_storeu_ps(p.out.add(at), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(side: usize, stride: usize, pad: usize) -> Conv2d {
        let out = (side + 2 * pad - 3) / stride + 1;
        Conv2d {
            batch: 1,
            in_channels: 4,
            in_h: side,
            in_w: side,
            out_channels: 4,
            kernel_h: 3,
            kernel_w: 3,
            stride_h: stride,
            stride_w: stride,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: pad,
            pad_left: pad,
            out_h: out,
            out_w: out,
            group: 4,
        }
    }

    #[test]
    fn edge_vectors_are_the_ones_whose_loads_leave_the_row() {
        // 112 → 56 at stride 2, padding 1: the first vector reads column −1, the last one up
        // to column 2·48 − 1 + 17 = 112; the five between stay inside.
        let g = geometry(112, 2, 1);
        assert_eq!(loaded_columns::<2>(&g, 0), (-1, 16));
        assert_eq!(loaded_columns::<2>(&g, 8), (15, 32));
        assert_eq!(loaded_columns::<2>(&g, 48), (95, 112));
        // Stride 1 on 112: columns x0 − 1 .. x0 + 8.
        let g = geometry(112, 1, 1);
        assert_eq!(loaded_columns::<1>(&g, 8), (7, 16));
        assert_eq!(loaded_columns::<1>(&g, 104), (103, 112));
        assert!(rows_3x3_avx2_fits(&g));
        // Rows narrower than a vector go elsewhere; so do other kernels and strides.
        assert!(!rows_3x3_avx2_fits(&geometry(7, 1, 1)));
        assert!(!rows_3x3_avx2_fits(&geometry(14, 2, 1)));
        assert!(!rows_3x3_avx2_fits(&geometry(40, 3, 1)));
    }

    #[test]
    fn the_interior_is_the_run_of_vectors_with_no_edge() {
        // 112² with padding 1: stride 1 has 14 vectors, the first reading column −1 and the
        // last column 112; stride 2 has 7, the same two at the edges.
        assert_eq!(interior_vectors::<1>(&geometry(112, 1, 1)), 1..13);
        assert_eq!(interior_vectors::<2>(&geometry(112, 2, 1)), 1..6);
        // No padding: the first vector is inside too; 56 outputs at stride 2 from 113 columns
        // read up to column 2·48 + 17 = 113, past the row, so the last is an edge.
        assert_eq!(interior_vectors::<1>(&geometry(112, 1, 0)), 0..13);
        assert_eq!(interior_vectors::<2>(&geometry(113, 2, 0)), 0..6);
        // A partial last vector is an edge; a row of eight with padding has no interior.
        assert_eq!(interior_vectors::<1>(&geometry(20, 1, 1)), 1..2);
        assert_eq!(interior_vectors::<1>(&geometry(8, 1, 1)).len(), 0);
    }
}
