//! Exact integer products for MatMulInteger: 8-bit operands less their zero points fit i16,
//! so `vpmaddwd` (AVX-512BW or AVX2) sums two products per i32 lane exactly, with the i32
//! accumulation wrapping as the spec's output type does. B is handed over in strips of
//! [`STRIP`] columns, K in pairs (`strip[(kp · STRIP + column) · 2 + s]` = B[2kp + s][column]),
//! which the caller packs from whatever storage it has (once per call, or once per plan for a
//! constant B); A's rows are i16 with K padded to even. Each output tile is summed in registers over the whole
//! of K: the earlier row-update form loaded and stored every output element once per four
//! values of K and ran at a quarter of this speed.

use super::simd::{isa_level, IsaLevel};

/// Columns of B per packed strip.
pub const STRIP: usize = 32;

/// `out[r · out_stride + c] = Σ_k a[r · k_even + k] · B[k][c]` for `r < rows`, `c < width`,
/// B given as one packed strip (`k_even / 2` pairs of `STRIP` columns, columns past `width`
/// zero). `k_even` is even; the output's other columns are untouched.
pub fn strip_product(
    a: &[i16],
    rows: usize,
    k_even: usize,
    strip: &[i16],
    width: usize,
    out: &mut [i32],
    out_stride: usize,
) {
    assert!(
        k_even.is_multiple_of(2) && width <= STRIP,
        "bad strip geometry"
    );
    assert!(
        a.len() >= rows * k_even && strip.len() >= k_even * STRIP,
        "short operands"
    );
    assert!(
        rows == 0 || out.len() >= (rows - 1) * out_stride + width,
        "short output"
    );
    match isa_level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level says AVX-512F/BW are present; the lengths were checked above.
        IsaLevel::Avx512 => unsafe {
            x86::strip_product_avx512(a, rows, k_even, strip, width, out, out_stride)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX2.
        IsaLevel::Avx2 => unsafe {
            x86::strip_product_avx2(a, rows, k_even, strip, width, out, out_stride)
        },
        _ => strip_product_scalar(a, 0..rows, k_even, strip, width, out, out_stride),
    }
}

/// The scalar form over `rows` (the vector forms' leftover rows).
fn strip_product_scalar(
    a: &[i16],
    rows: std::ops::Range<usize>,
    k_even: usize,
    strip: &[i16],
    width: usize,
    out: &mut [i32],
    out_stride: usize,
) {
    for r in rows {
        let a_row = &a[r * k_even..][..k_even];
        let mut sums = [0i32; STRIP];
        for (kp, pair) in a_row.chunks_exact(2).enumerate() {
            let (a0, a1) = (i32::from(pair[0]), i32::from(pair[1]));
            let b = &strip[kp * STRIP * 2..][..STRIP * 2];
            for (c, sum) in sums.iter_mut().enumerate() {
                let products = a0 * i32::from(b[2 * c]) + a1 * i32::from(b[2 * c + 1]);
                *sum = sum.wrapping_add(products);
            }
        }
        out[r * out_stride..][..width].copy_from_slice(&sums[..width]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{strip_product_scalar, STRIP};
    use std::arch::x86_64::*;

    /// Rows per register tile (AVX-512: 4 rows × 2 vectors of 16 columns = 8 accumulators).
    const ROWS_512: usize = 4;

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn strip_product_avx512(
        a: &[i16],
        rows: usize,
        k_even: usize,
        strip: &[i16],
        width: usize,
        out: &mut [i32],
        out_stride: usize,
    ) {
        let pairs = k_even / 2;
        let b = strip.as_ptr();
        let mut r = 0;
        while r + ROWS_512 <= rows {
            // A's rows read as i32 words: one word is the pair (a[2kp], a[2kp + 1]).
            let a_rows: [*const i32; ROWS_512] =
                std::array::from_fn(|i| a.as_ptr().add((r + i) * k_even).cast::<i32>());
            let mut acc = [[_mm512_setzero_si512(); 2]; ROWS_512];
            for kp in 0..pairs {
                let b0 = _mm512_loadu_si512(b.add(kp * STRIP * 2).cast());
                let b1 = _mm512_loadu_si512(b.add(kp * STRIP * 2 + 32).cast());
                for i in 0..ROWS_512 {
                    let a_pair = _mm512_set1_epi32(a_rows[i].add(kp).read_unaligned());
                    acc[i][0] = _mm512_add_epi32(acc[i][0], _mm512_madd_epi16(b0, a_pair));
                    acc[i][1] = _mm512_add_epi32(acc[i][1], _mm512_madd_epi16(b1, a_pair));
                }
            }
            for (i, tile) in acc.iter().enumerate() {
                store_row(out.as_mut_ptr().add((r + i) * out_stride), tile, width);
            }
            r += ROWS_512;
        }
        strip_product_scalar(a, r..rows, k_even, strip, width, out, out_stride);
    }

    /// The first `width` of the 32 sums in `tile` stored at `target`.
    #[target_feature(enable = "avx512f")]
    unsafe fn store_row(target: *mut i32, tile: &[__m512i; 2], width: usize) {
        if width == STRIP {
            _mm512_storeu_si512(target.cast(), tile[0]);
            _mm512_storeu_si512(target.add(16).cast(), tile[1]);
        } else {
            let mut sums = [0i32; STRIP];
            _mm512_storeu_si512(sums.as_mut_ptr().cast(), tile[0]);
            _mm512_storeu_si512(sums.as_mut_ptr().add(16).cast(), tile[1]);
            std::ptr::copy_nonoverlapping(sums.as_ptr(), target, width);
        }
    }

    /// Rows per register tile (AVX2: 2 rows × 4 vectors of 8 columns = 8 accumulators).
    const ROWS_256: usize = 2;

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn strip_product_avx2(
        a: &[i16],
        rows: usize,
        k_even: usize,
        strip: &[i16],
        width: usize,
        out: &mut [i32],
        out_stride: usize,
    ) {
        let pairs = k_even / 2;
        let b = strip.as_ptr();
        let mut r = 0;
        while r + ROWS_256 <= rows {
            let a_rows: [*const i32; ROWS_256] =
                std::array::from_fn(|i| a.as_ptr().add((r + i) * k_even).cast::<i32>());
            let mut acc = [[_mm256_setzero_si256(); 4]; ROWS_256];
            for kp in 0..pairs {
                let columns: [__m256i; 4] = std::array::from_fn(|v| {
                    _mm256_loadu_si256(b.add(kp * STRIP * 2 + 16 * v).cast())
                });
                for i in 0..ROWS_256 {
                    let a_pair = _mm256_set1_epi32(a_rows[i].add(kp).read_unaligned());
                    for v in 0..4 {
                        acc[i][v] =
                            _mm256_add_epi32(acc[i][v], _mm256_madd_epi16(columns[v], a_pair));
                    }
                }
            }
            for (i, tile) in acc.iter().enumerate() {
                let mut sums = [0i32; STRIP];
                for (v, vector) in tile.iter().enumerate() {
                    _mm256_storeu_si256(sums.as_mut_ptr().add(8 * v).cast(), *vector);
                }
                out[(r + i) * out_stride..][..width].copy_from_slice(&sums[..width]);
            }
            r += ROWS_256;
        }
        strip_product_scalar(a, r..rows, k_even, strip, width, out, out_stride);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ISA's form against the formula, over row counts with and without leftover rows,
    /// full and partial strips, and values at the ends of the centred 8-bit range (±255).
    #[test]
    fn strip_products_match_the_formula() {
        for (rows, k_even, width) in [(1, 2, 1), (4, 6, 32), (7, 10, 17), (9, 64, 32), (3, 2, 5)] {
            let mut a: Vec<i16> = (0..rows * k_even)
                .map(|i| ((i * 53 % 511) as i16) - 255)
                .collect();
            // Both ends of the range at once: a pair of (−255)·(−255) products per lane.
            a[0] = -255;
            a[rows * k_even - 1] = 255;
            let mut b: Vec<Vec<i16>> = (0..k_even)
                .map(|k| {
                    (0..width)
                        .map(|c| (((k * 31 + c * 97) % 511) as i16) - 255)
                        .collect()
                })
                .collect();
            b[0][0] = -255;
            b[k_even - 1][width - 1] = 255;
            let mut strip = vec![0i16; k_even * STRIP];
            for k in 0..k_even {
                for c in 0..width {
                    strip[((k / 2) * STRIP + c) * 2 + k % 2] = b[k][c];
                }
            }
            let stride = width + 3;
            let expected: Vec<i32> = (0..rows * stride)
                .map(|at| {
                    let (r, c) = (at / stride, at % stride);
                    if c >= width {
                        return -1;
                    }
                    (0..k_even)
                        .map(|k| i32::from(a[r * k_even + k]) * i32::from(b[k][c]))
                        .sum()
                })
                .collect();
            let run = |form: &dyn Fn(&mut [i32])| {
                let mut out = vec![-1i32; rows * stride];
                form(&mut out);
                out
            };
            let scalar =
                run(&|out| strip_product_scalar(&a, 0..rows, k_even, &strip, width, out, stride));
            assert_eq!(scalar, expected, "scalar {rows}x{k_even}x{width}");
            let dispatched =
                run(&|out| strip_product(&a, rows, k_even, &strip, width, out, stride));
            assert_eq!(
                dispatched,
                expected,
                "{:?} {rows}x{k_even}x{width}",
                isa_level()
            );
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected; the operands are as long as the call asks.
                let avx2 = run(&|out| unsafe {
                    x86::strip_product_avx2(&a, rows, k_even, &strip, width, out, stride)
                });
                assert_eq!(avx2, expected, "avx2 {rows}x{k_even}x{width}");
            }
        }
    }
}
