//! The rows kernel for 3×3 depthwise convolutions (stride 1 or 2): sixteen outputs of a row
//! per vector read straight from the NCHW rows, no copy of the plane. The dispatcher sends it
//! the stride-2 layers on planes past the small-plane path, where it measured fastest.

use std::ops::Range;

use super::SmallPlaneTaps;
use crate::kernels::conv::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::act::activate;
use crate::kernels::parallel::SendPtr;

/// Whether [`rows_3x3_kernel_fits`] and the rows kernel is the faster one: stride 2 on planes
/// past the small-plane path's. Measured on Zen 4, one thread, against the phase planes:
/// 96×112² 315-356 against 392-395 µs, 144×56² 87-124 against 171-195 µs; on Zen 5 with the
/// row-by-row loop (`cargo bench --bench depthwise`), 96×112² 167 µs and 144×56² 53 µs. At
/// stride 1 the phase planes' row-blocked 3×3 loop stays ahead (Zen 5: 32×112² 120 against
/// 181 µs, 144×56² 141 against 231 µs) and on small planes the sixteen-channel path does.
pub(super) fn rows_3x3_applies(g: &Conv2d) -> bool {
    rows_3x3_kernel_fits(g) && g.stride_w == 2 && !SmallPlaneTaps::applies(g)
}

/// What [`rows_3x3_avx512`] computes: 3×3, dilation 1, stride 1 or 2 in both directions,
/// one column of left padding (the "same" padding of exported 3×3 layers; any top padding up
/// to 2).
pub(super) fn rows_3x3_kernel_fits(g: &Conv2d) -> bool {
    g.is_dense_3x3()
        && g.stride_h == g.stride_w
        && (g.stride_w == 1 || g.stride_w == 2)
        && g.pad_left == 1
        && g.pad_top <= 2
}

/// Lanes of a 16-float load from input column `first` inside a row of `width` columns.
pub(super) use crate::kernels::simd::lanes_inside as column_mask;

/// 3×3 depthwise straight from the NCHW rows, sixteen outputs of a row per vector, no copy of
/// the plane: each output block reads its three input rows with masked loads (the padding is
/// the masked-off lanes and the skipped rows); stride 2 splits each 32-column span into even
/// and odd columns with two permutes, the left tap being the odd vector shifted by one lane
/// with column 2·x0 − 1 loaded into lane 15. Row by row, block by block along the row; the
/// epilogue is applied before the one store. (Blocks grouped four at a time across rows, with
/// each block's row pointers worked out per tap row, ran 57 cycles per block on Zen 5, about
/// four times the vector work: the bookkeeping was the kernel.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_3x3_avx512(
    g: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
) {
    use std::arch::x86_64::*;
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    let stride = g.stride_w;
    let even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd_index = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let row_blocks = g.out_w.div_ceil(16);
    // Per block column: the first input column of each load and its lane mask. Stride 1:
    // the three taps' columns; stride 2: the even/odd span's two halves and the one column
    // left of it (loaded into lane 15).
    let mut columns = vec![[(0isize, 0u16); 3]; row_blocks];
    for (b, cols) in columns.iter_mut().enumerate() {
        let x0 = (16 * b) as isize;
        let firsts = if stride == 1 {
            [x0 - 1, x0, x0 + 1]
        } else {
            [2 * x0, 2 * x0 + 16, 2 * x0 - 16]
        };
        for (slot, first) in cols.iter_mut().zip(firsts) {
            *slot = (first, column_mask(first, g.in_w));
        }
        if stride == 2 {
            cols[2].1 &= 0x8000;
        }
    }
    let out_masks: Vec<__mmask16> = (0..row_blocks)
        .map(|b| ((1u32 << (g.out_w - 16 * b).min(16)) - 1) as __mmask16)
        .collect();
    // Loads reach 16 columns left of a row and 32 right of its last block's start.
    const ZERO_SLACK: usize = 32;
    let zeros = vec![0.0f32; g.in_w.max(2 * 16 * row_blocks) + 2 * ZERO_SLACK];
    // Input rows are prefetched this many output rows ahead. Inside a model the input was
    // written by the op before (MobileNetV2's 96×112² expansion: 4.8 MB) and its early planes
    // have left the caches by the time they are read: on Zen 5, one thread, that layer took
    // 270-380 µs in the model against 165 µs alone, and 160-170 µs in the model with this
    // prefetch (alone, input hot in L3: no change). Addresses run on past the plane's last
    // row into the next plane, the next one read (a prefetch past the buffer cannot fault).
    const PREFETCH_ROWS: usize = 6;
    for plane in planes {
        let channel = plane % g.in_channels;
        // No closures here: they would not inherit this function's target features.
        let mut kernel = [_mm512_setzero_ps(); 9];
        for (t, k) in kernel.iter_mut().enumerate() {
            *k = _mm512_set1_ps(*weights.get_unchecked(channel * 9 + t));
        }
        let bias = _mm512_set1_ps(epilogue.bias.map_or(0.0, |b| b[channel]));
        let image = input.as_ptr().add(plane * in_plane);
        let out = output.get().add(plane * out_plane);
        let residual = epilogue.residual.map(|r| r.as_ptr().add(plane * out_plane));
        for y in 0..g.out_h {
            // The output row's three input rows, found once (rows in the padding read a zero
            // row); the blocks along the row then only add their column offsets. Each block's
            // nine FMAs form one chain, independent of the next block's, so the out-of-order
            // core overlaps consecutive blocks.
            let mut rows = [zeros.as_ptr().add(ZERO_SLACK); 3];
            for (ky, row) in rows.iter_mut().enumerate() {
                let iy = (y * stride + ky) as isize - g.pad_top as isize;
                if iy >= 0 && iy < g.in_h as isize {
                    *row = image.add(iy as usize * g.in_w);
                }
            }
            let out_row = out.add(y * g.out_w);
            let residual_row = residual.map(|r| r.add(y * g.out_w));
            // The `stride` rows that output row y + PREFETCH_ROWS reads first.
            let ahead = ((y + PREFETCH_ROWS) * stride + 3 - stride) as isize - g.pad_top as isize;
            let ahead_row = image.wrapping_offset(ahead * g.in_w as isize);
            for (bb, cols) in columns.iter().enumerate() {
                // One line per 16 input columns of each new row this block spans.
                for r in 0..stride {
                    for half in 0..stride {
                        let column = (bb * 16 + half * 8) * stride;
                        _mm_prefetch::<_MM_HINT_T0>(
                            ahead_row.wrapping_add(r * g.in_w + column) as *const i8
                        );
                    }
                }
                // One partial sum per kernel row: three chains of three FMAs instead of one
                // of nine (4-cycle FMA latency: the single chain was the kernel's bound).
                let mut partial = [bias, _mm512_setzero_ps(), _mm512_setzero_ps()];
                for (ky, &row) in rows.iter().enumerate() {
                    let taps = if stride == 1 {
                        let mut taps = [_mm512_setzero_ps(); 3];
                        for (tap, &(column, mask)) in taps.iter_mut().zip(cols) {
                            *tap = _mm512_maskz_loadu_ps(mask, row.wrapping_offset(column));
                        }
                        taps
                    } else {
                        let (low, high, left) = (cols[0], cols[1], cols[2]);
                        let low = _mm512_maskz_loadu_ps(low.1, row.wrapping_offset(low.0));
                        let high = _mm512_maskz_loadu_ps(high.1, row.wrapping_offset(high.0));
                        let even = _mm512_permutex2var_ps(low, even_index, high);
                        let odd = _mm512_permutex2var_ps(low, odd_index, high);
                        let before = _mm512_maskz_loadu_ps(left.1, row.wrapping_offset(left.0));
                        let left = _mm512_castsi512_ps(_mm512_alignr_epi32::<15>(
                            _mm512_castps_si512(odd),
                            _mm512_castps_si512(before),
                        ));
                        [left, even, odd]
                    };
                    for (kx, tap) in taps.iter().enumerate() {
                        partial[ky] = _mm512_fmadd_ps(kernel[ky * 3 + kx], *tap, partial[ky]);
                    }
                }
                let mut acc = _mm512_add_ps(_mm512_add_ps(partial[0], partial[1]), partial[2]);
                let mask = *out_masks.get_unchecked(bb);
                let pixel = 16 * bb;
                if let Some(r) = residual_row {
                    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, r.add(pixel)));
                }
                _mm512_mask_storeu_ps(
                    out_row.add(pixel),
                    mask,
                    activate(&epilogue.activation, acc),
                );
            }
        }
    }
}
