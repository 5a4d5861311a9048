//! ConvInteger on the int8 GEMM: `Σ (x − x_zero_point)(w − w_zero_point)` in exact integers,
//! as dynamically quantized models (onnxruntime's `quantize_dynamic`) run their convolutions.
//!
//! `vpdpbusd` multiplies `u8` by `s8`, but a ConvInteger weight less its zero point spans up to
//! 255 values anywhere in −255..=255 (asymmetric `u8` weights use the whole byte: ddddocr's
//! run −178..=77). Each output channel's centred weights are therefore stored as `s8` plus an
//! offset `c` of the channel (`w − w_zero_point = w_s8 + c`), and
//!
//! `Σ (x − zx)(w_s8 + c) = Σ x·w_s8 − zx·Σ w_s8 + c·Σ (x − zx)`:
//!
//! the GEMM's accumulator, its per-channel zero-point correction, and the offset times the
//! column's sum of centred activations (one sum per output pixel, shared by every channel:
//! [`super::OffsetTerm`]). Padding taps read `zx`, so they add nothing to any term. The sums
//! stay exact in `i32` while the reduction depth is at most [`MAX_TAPS`].

use super::pack::im2col_u8;
use super::{
    multiplies_bytes_natively, qgemm_wx_with, qgemm_xw, ActSrc, OffsetTerm, PackedQWeights,
    QEpilogue, QIsa, QOut,
};
use crate::kernels::conv::{im2col_channels_threaded, Conv2d};
use crate::kernels::gemm::Activation;
use crate::kernels::parallel::{parallel_for, SendPtr};

/// Deepest reduction whose exact sum fits `i32` whatever the values: `|x − zx|, |w − zw| ≤ 255`
/// and `33 025 · 255² < 2³¹`.
pub const MAX_TAPS: usize = 33_000;

/// The smallest shift `c` that brings centred 8-bit weights spanning `lo..=hi` into the s8
/// range (`w − c` in −128..=127); None when they span more than 256 integers (no such shift).
pub fn s8_offset(lo: i64, hi: i64) -> Option<i32> {
    if hi - lo > 255 {
        return None;
    }
    let offset = if hi > 127 {
        hi - 127
    } else if lo < -128 {
        lo + 128
    } else {
        0
    };
    i32::try_from(offset).ok()
}

/// Dense 8-bit weights `[k, n]` (MatMulInteger's B, DynamicQuantizeLSTM's W and R) less their
/// per-column zero points, packed once for `qgemm_xw` as s8 plus a per-column offset, whose
/// product is the offset times each activation row's centred sum ([`OffsetTerm`]).
#[derive(Clone)]
pub struct IntegerDenseWeights {
    packed: PackedQWeights,
    offsets: Vec<i32>,
}

impl std::fmt::Debug for IntegerDenseWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntegerDenseWeights")
            .field("k", &self.k())
            .field("columns", &self.columns())
            .field("isa", &self.packed.isa().name())
            .finish()
    }
}

impl IntegerDenseWeights {
    /// `centred`: `w − w_zero_point`, `k × n` row-major. None on a CPU without VNNI (the
    /// portable kernel is no quicker than the callers' other paths), for a reduction deeper
    /// than [`MAX_TAPS`], or when a column spans more than a byte.
    pub fn new(centred: &[i64], k: usize, n: usize) -> Option<Self> {
        let isa = QIsa::detect();
        if !multiplies_bytes_natively()
            || k == 0
            || n == 0
            || k > MAX_TAPS
            || centred.len() != k * n
        {
            return None;
        }
        let mut lows = vec![i64::MAX; n];
        let mut highs = vec![i64::MIN; n];
        for row in centred.chunks_exact(n) {
            for (c, &v) in row.iter().enumerate() {
                lows[c] = lows[c].min(v);
                highs[c] = highs[c].max(v);
            }
        }
        let offsets = lows
            .iter()
            .zip(&highs)
            .map(|(&lo, &hi)| s8_offset(lo, hi))
            .collect::<Option<Vec<i32>>>()?;
        let bytes: Vec<i8> = centred
            .iter()
            .enumerate()
            .map(|(i, &v)| (v - i64::from(offsets[i % n])) as i8)
            .collect();
        Some(IntegerDenseWeights {
            packed: PackedQWeights::for_dense(isa, &bytes, k, n),
            offsets,
        })
    }

    /// Reduction depth `k`.
    pub fn k(&self) -> usize {
        self.packed.k()
    }

    /// Columns `n`.
    pub fn columns(&self) -> usize {
        self.packed.channels()
    }

    /// The per-column offsets `c` (`w − w_zero_point = s8 + c`).
    pub fn offsets(&self) -> &[i32] {
        &self.offsets
    }

    /// Bytes the packed weights hold.
    pub fn bytes(&self) -> u64 {
        (self.packed.k().div_ceil(4) * 4 * self.packed.channels() + self.offsets.len() * 4) as u64
    }

    /// `rows` rows of `a` (bytes, `k` each, zero point `a_zero`) times the weights into `out`
    /// (`rows × n`, leading dimension `n`): exact for [`QOut::I32`], otherwise scaled by `mul`
    /// and shifted by `bias` per column.
    #[allow(clippy::too_many_arguments)]
    pub fn product(
        &self,
        a: &[u8],
        a_zero: u8,
        rows: usize,
        out: QOut,
        mul: &[f32],
        bias: &[f32],
        threads: usize,
    ) {
        let (k, n) = (self.k(), self.columns());
        let zero = i32::from(a_zero);
        let row_sums: Vec<i32> = a
            .chunks_exact(k)
            .take(rows)
            .map(|row| row.iter().map(|&v| i32::from(v)).sum::<i32>() - zero * k as i32)
            .collect();
        let corr: Vec<i32> = self.packed.sums().iter().map(|&s| zero * s).collect();
        let epilogue = QEpilogue {
            corr: &corr,
            mul,
            bias,
            residual: None,
            activation: Activation::None,
            offset_term: Some(OffsetTerm {
                factor: &self.offsets,
                sums: &row_sums,
            }),
        };
        qgemm_xw(
            &ActSrc::U8 { data: a, ld: k },
            rows,
            &self.packed,
            out,
            n,
            &epilogue,
            threads,
        );
    }
}

/// ConvInteger's weights, packed once per plan for the int8 GEMM.
#[derive(Clone)]
pub struct IntegerConvWeights {
    isa: QIsa,
    out_channels: usize,
    /// Reduction depth per group: `C/group · kh · kw`.
    taps: usize,
    group: usize,
    /// One packed panel set per group.
    packed: Vec<PackedQWeights>,
    /// `c` per output channel (see the module doc).
    offsets: Vec<i32>,
    any_offset: bool,
}

impl IntegerConvWeights {
    /// `centred`: `w − w_zero_point` for `[M, C/group, kh, kw]` weights, `M = out_channels`,
    /// `taps = C/group · kh · kw`. None when a channel's values span more than 256 integers
    /// (not 8-bit weights) or the reduction is deeper than [`MAX_TAPS`].
    pub fn new(centred: &[i32], out_channels: usize, taps: usize, group: usize) -> Option<Self> {
        Self::with_isa(QIsa::detect(), centred, out_channels, taps, group)
    }

    /// [`IntegerConvWeights::new`] on an explicit variant.
    pub fn with_isa(
        isa: QIsa,
        centred: &[i32],
        out_channels: usize,
        taps: usize,
        group: usize,
    ) -> Option<Self> {
        let group = group.max(1);
        if centred.len() != out_channels * taps
            || taps == 0
            || taps > MAX_TAPS
            || !out_channels.is_multiple_of(group)
        {
            return None;
        }
        let mut offsets = Vec::with_capacity(out_channels);
        let mut bytes = Vec::with_capacity(centred.len());
        for row in centred.chunks_exact(taps) {
            let (lo, hi) = row
                .iter()
                .fold((i32::MAX, i32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let offset = s8_offset(i64::from(lo), i64::from(hi))?;
            offsets.push(offset);
            bytes.extend(row.iter().map(|&v| (v - offset) as i8));
        }
        let per_group = out_channels / group;
        let packed = bytes
            .chunks_exact(per_group * taps)
            .map(|rows| PackedQWeights::for_conv(isa, rows, per_group, taps))
            .collect();
        let any_offset = offsets.iter().any(|&c| c != 0);
        Some(IntegerConvWeights {
            isa,
            out_channels,
            taps,
            group,
            packed,
            offsets,
            any_offset,
        })
    }

    pub fn isa(&self) -> QIsa {
        self.isa
    }

    /// Bytes the packed weights hold.
    pub fn bytes(&self) -> u64 {
        let packed: usize = self
            .packed
            .iter()
            .map(|p| p.k().div_ceil(4) * 4 * p.channels())
            .sum();
        (packed + self.offsets.len() * 4) as u64
    }

    /// Whether `geom` is a convolution these weights belong to.
    pub fn fits(&self, geom: &Conv2d) -> bool {
        let group = geom.group.max(1);
        group == self.group
            && geom.out_channels == self.out_channels
            && geom.in_channels.is_multiple_of(group)
            && geom.in_channels / group * geom.kernel_h * geom.kernel_w == self.taps
    }

    /// `out[n, m, p] = Σ (x − x_zero)(w − w_zero)` for the `[N, C, H, W]` image of `u8` values
    /// `image`, exact.
    ///
    /// # Panics
    /// When `geom` does not [`fit`](Self::fits) the weights or a slice is too short.
    pub fn run(&self, geom: &Conv2d, image: &[u8], x_zero: u8, out: &mut [i32], threads: usize) {
        assert!(self.fits(geom), "ConvInteger weights do not fit {geom:?}");
        let g = geom;
        let group = self.group;
        let (gin, gout) = (g.in_channels / group, g.out_channels / group);
        let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
        let (in_image, out_image) = (g.in_channels * in_plane, g.out_channels * out_plane);
        assert!(image.len() >= g.batch * in_image && out.len() >= g.batch * out_image);
        let pointwise = g.is_pointwise();
        let mut cols = if pointwise {
            Vec::new()
        } else {
            vec![0u8; self.taps * out_plane]
        };
        let mut sums = vec![0i32; if self.any_offset { out_plane } else { 0 }];
        let mut corr = vec![0i32; gout];
        let (mul, bias) = (vec![1.0f32; gout], vec![0.0f32; gout]);
        for n in 0..g.batch {
            for gi in 0..group {
                let x0 = n * in_image + gi * gin * in_plane;
                let group_image = &image[x0..x0 + gin * in_plane];
                let data: &[u8] = if pointwise {
                    group_image
                } else {
                    let sub = Conv2d {
                        in_channels: gin,
                        out_channels: gout,
                        group: 1,
                        batch: 1,
                        ..*g
                    };
                    im2col_channels_threaded(
                        &sub,
                        gin,
                        group_image,
                        &mut cols,
                        threads,
                        |sub, planes, rows| im2col_u8(sub, sub.in_channels, planes, rows, x_zero),
                    );
                    &cols
                };
                let packed = &self.packed[gi];
                for (c, s) in corr.iter_mut().zip(packed.sums()) {
                    *c = i32::from(x_zero) * s;
                }
                let offset_term = if self.any_offset {
                    centred_column_sums(data, self.taps, out_plane, x_zero, &mut sums, threads);
                    Some(OffsetTerm {
                        factor: &self.offsets[gi * gout..(gi + 1) * gout],
                        sums: &sums,
                    })
                } else {
                    None
                };
                let o0 = n * out_image + gi * gout * out_plane;
                let epilogue = QEpilogue {
                    corr: &corr,
                    mul: &mul,
                    bias: &bias,
                    residual: None,
                    activation: Activation::None,
                    offset_term,
                };
                qgemm_wx_with(
                    self.isa,
                    packed,
                    &ActSrc::U8 {
                        data,
                        ld: out_plane,
                    },
                    out_plane,
                    QOut::I32 {
                        data: &mut out[o0..o0 + gout * out_plane],
                    },
                    out_plane,
                    &epilogue,
                    threads,
                );
            }
        }
    }
}

/// Columns per task of [`centred_column_sums`] (a multiple of 64 bytes of `u8` rows).
const SUM_COLUMNS: usize = 1024;

/// `sums[j] = Σ_k (data[k · cols + j] − zero)` for `j < cols`: a row at a time into `i32`
/// lanes (vectorised widening adds), columns split across threads.
fn centred_column_sums(
    data: &[u8],
    rows: usize,
    cols: usize,
    zero: u8,
    sums: &mut [i32],
    threads: usize,
) {
    assert!(data.len() >= rows * cols && sums.len() >= cols);
    let tasks = cols.div_ceil(SUM_COLUMNS);
    let base = i32::from(zero) * rows as i32;
    let out = SendPtr(sums.as_mut_ptr());
    let threads = if rows * cols < 1 << 16 { 1 } else { threads };
    parallel_for(threads, tasks, |task| {
        let (j0, j1) = (task * SUM_COLUMNS, ((task + 1) * SUM_COLUMNS).min(cols));
        // SAFETY: task `task` writes only sums[j0..j1], disjoint from the others'.
        let sums = unsafe { std::slice::from_raw_parts_mut(out.get().add(j0), j1 - j0) };
        sums.fill(-base);
        for k in 0..rows {
            let row = &data[k * cols + j0..k * cols + j1];
            for (s, &v) in sums.iter_mut().zip(row) {
                *s += i32::from(v);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    //! The int8 ConvInteger against the definition (the reference convolution), on
    //! every variant this CPU has: strided, padded, dilated, grouped and pointwise shapes, with
    //! weights that need a per-channel offset and weights that do not.
    use super::*;

    /// The definition through the f64 reference convolution: centred activations (padding
    /// then reads 0, the zero point) and centred weights; every sum here is an integer far
    /// below 2^24, so the f32 result is exact.
    fn reference(geom: &Conv2d, image: &[u8], zx: u8, centred: &[i32]) -> Vec<i32> {
        let x: Vec<f32> = image
            .iter()
            .map(|&v| f32::from(v) - f32::from(zx))
            .collect();
        let w: Vec<f32> = centred.iter().map(|&v| v as f32).collect();
        let none = crate::kernels::conv::ConvEpilogue {
            bias: None,
            residual: None,
            activation: Activation::None,
        };
        crate::kernels::conv::reference_conv(geom, &x, &w, &none)
            .iter()
            .map(|&v| v as i32)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn geom(
        batch: usize,
        (cin, cout, group): (usize, usize, usize),
        (h, w): (usize, usize),
        (kh, kw): (usize, usize),
        stride: usize,
        dilation: usize,
        pad: usize,
    ) -> Conv2d {
        let out_h = (h + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
        let out_w = (w + 2 * pad - dilation * (kw - 1) - 1) / stride + 1;
        Conv2d {
            batch,
            in_channels: cin,
            in_h: h,
            in_w: w,
            out_channels: cout,
            kernel_h: kh,
            kernel_w: kw,
            stride_h: stride,
            stride_w: stride,
            dilation_h: dilation,
            dilation_w: dilation,
            pad_top: pad,
            pad_left: pad,
            out_h,
            out_w,
            group,
        }
    }

    /// Deterministic values in `lo..=hi`.
    fn values(len: usize, seed: u64, lo: i32, hi: i32) -> Vec<i32> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                lo + ((state >> 33) % (hi - lo + 1) as u64) as i32
            })
            .collect()
    }

    #[test]
    fn integer_convolutions_match_the_definition_on_every_variant() {
        let shapes = [
            geom(1, (3, 8, 1), (9, 11), (3, 3), 1, 1, 1),
            geom(2, (5, 7, 1), (12, 10), (3, 3), 2, 1, 1),
            geom(1, (6, 4, 2), (8, 8), (3, 3), 1, 2, 2),
            geom(1, (16, 33, 1), (7, 9), (1, 1), 1, 1, 0),
            geom(1, (4, 12, 1), (5, 40), (1, 5), 1, 1, 0),
        ];
        let variants = QIsa::ALL;
        for (s, g) in shapes.iter().enumerate() {
            let taps = g.in_channels / g.group * g.kernel_h * g.kernel_w;
            let image: Vec<u8> =
                values(g.batch * g.in_channels * g.in_h * g.in_w, s as u64, 0, 255)
                    .iter()
                    .map(|&v| v as u8)
                    .collect();
            // Asymmetric u8 weights (the whole byte less a zero point of 178), then weights
            // that fit s8 as they are.
            let wide = values(g.out_channels * taps, 100 + s as u64, -178, 77);
            let narrow = values(g.out_channels * taps, 200 + s as u64, -128, 127);
            for (centred, zx) in [(&wide, 37u8), (&narrow, 0u8), (&wide, 255u8)] {
                let expected = reference(g, &image, zx, centred);
                for &isa in variants.iter().filter(|v| v.is_available()) {
                    let weights =
                        IntegerConvWeights::with_isa(isa, centred, g.out_channels, taps, g.group)
                            .unwrap();
                    assert_eq!(weights.any_offset, std::ptr::eq(centred, &wide));
                    for threads in [1, 3] {
                        let mut out = vec![i32::MIN; expected.len()];
                        weights.run(g, &image, zx, &mut out, threads);
                        assert_eq!(
                            out,
                            expected,
                            "{g:?} {} zx {zx} threads {threads}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn weights_wider_than_a_byte_or_too_deep_are_refused() {
        assert!(IntegerConvWeights::new(&[-200, 100], 1, 2, 1).is_none());
        assert!(IntegerConvWeights::new(&[-255, 0], 1, 2, 1).is_some());
        assert!(IntegerConvWeights::new(&[0; 4], 2, 3, 1).is_none());
        assert!(IntegerConvWeights::new(&vec![1; MAX_TAPS + 1], 1, MAX_TAPS + 1, 1).is_none());
    }
}
