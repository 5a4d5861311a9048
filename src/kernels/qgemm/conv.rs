//! Int8 and bf16 2-D convolutions (NCHW) on the low-precision GEMMs, prepared once per layer
//! (weights packed per group, epilogue coefficients precomputed) and run per inference.
//!
//! Int8: a pointwise (1×1, stride 1, no padding) convolution packs its f32 input straight into
//! u8 panels (quantized while packing); any other convolution quantizes the image once (u8,
//! padding taps read the zero point, i.e. exactly 0.0) and runs im2col on bytes. Depthwise
//! convolutions are not offered here: with one input channel per group a 3×3 window has a
//! reduction depth of 9, far too short for `vpdpbusd`; they stay in f32.
//! Bf16: the same with bf16 halves (u16) instead of bytes.

use std::cell::Cell;

use super::bf16::{self, BActSrc, BEpilogue, BIsa, PackedBWeights};
use super::pack::{im2col_u16, im2col_u8, quantize_u8, to_bf16};
use super::{qgemm_wx_with, ActSrc, ChannelCoeffs, PackedQWeights, QIsa, QOut, Requant};
use crate::kernels::conv::Conv2d;
use crate::kernels::gemm::Activation;
use crate::kernels::parallel::{parallel_for, SendPtr};

thread_local! {
    static IMAGE: Cell<Option<Vec<u8>>> = const { Cell::new(None) };
    static COLS: Cell<Option<Vec<u8>>> = const { Cell::new(None) };
}

/// Runs `f` with two byte scratch buffers of at least `a` and `b` bytes (kept per thread).
fn with_scratch<R>(a: usize, b: usize, f: impl FnOnce(&mut [u8], &mut [u8]) -> R) -> R {
    let mut x = IMAGE.with(|c| c.take()).unwrap_or_default();
    let mut y = COLS.with(|c| c.take()).unwrap_or_default();
    if x.len() < a {
        x.resize(a, 0);
    }
    if y.len() < b {
        y.resize(b, 0);
    }
    let r = f(&mut x[..a], &mut y[..b]);
    IMAGE.with(|c| c.set(Some(x)));
    COLS.with(|c| c.set(Some(y)));
    r
}

/// A prepared int8 convolution.
#[derive(Clone)]
pub struct QConv2d {
    pub geom: Conv2d,
    isa: QIsa,
    groups: Vec<PackedQWeights>,
    coeffs: Vec<ChannelCoeffs>,
    x_scale: f32,
    x_zero_point: i32,
}

impl QConv2d {
    /// `weights`: `[M, C/g, kh, kw]` symmetric int8; `w_scale` per output channel (or one);
    /// activations quantized with `x_scale` / `x_zero_point` (u8). Uses the detected variant.
    pub fn new(
        geom: Conv2d,
        weights: &[i8],
        w_scale: &[f32],
        bias: Option<&[f32]>,
        x_scale: f32,
        x_zero_point: i32,
    ) -> QConv2d {
        QConv2d::with_isa(
            QIsa::detect(),
            geom,
            weights,
            w_scale,
            bias,
            x_scale,
            x_zero_point,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub fn with_isa(
        isa: QIsa,
        geom: Conv2d,
        weights: &[i8],
        w_scale: &[f32],
        bias: Option<&[f32]>,
        x_scale: f32,
        x_zero_point: i32,
    ) -> QConv2d {
        let group = geom.group.max(1);
        let (gin, gout) = (geom.in_channels / group, geom.out_channels / group);
        let taps = gin * geom.kernel_h * geom.kernel_w;
        assert!(
            weights.len() >= geom.out_channels * taps,
            "QConv2d: weights too short"
        );
        let mut groups = Vec::with_capacity(group);
        let mut sums = Vec::with_capacity(geom.out_channels);
        for g in 0..group {
            let w = &weights[g * gout * taps..(g + 1) * gout * taps];
            let packed = PackedQWeights::for_conv(isa, w, gout, taps);
            sums.extend_from_slice(packed.sums());
            groups.push(packed);
        }
        let all = ChannelCoeffs::new(w_scale, &sums, x_scale, x_zero_point, bias);
        let coeffs = (0..group)
            .map(|g| all.slice(g * gout, (g + 1) * gout))
            .collect();
        QConv2d {
            geom,
            isa,
            groups,
            coeffs,
            x_scale,
            x_zero_point,
        }
    }

    pub fn isa(&self) -> QIsa {
        self.isa
    }

    /// `output = act(conv(input) + bias + residual)`, optionally rounded to `requant`'s grid.
    pub fn run(
        &self,
        input: &[f32],
        residual: Option<&[f32]>,
        activation: Activation,
        requant: Option<Requant>,
        output: &mut [f32],
        threads: usize,
    ) {
        let g = &self.geom;
        let group = g.group.max(1);
        let (gin, gout) = (g.in_channels / group, g.out_channels / group);
        let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
        let in_image = g.in_channels * in_plane;
        let out_image = g.out_channels * out_plane;
        assert!(input.len() >= g.batch * in_image && output.len() >= g.batch * out_image);
        let taps = gin * g.kernel_h * g.kernel_w;
        let pointwise = g.is_pointwise();
        let inv = 1.0 / self.x_scale;
        let (img_len, cols_len) = if pointwise {
            (0, 0)
        } else {
            (gin * in_plane, taps * out_plane)
        };
        with_scratch(img_len, cols_len, |qimg, cols| {
            for n in 0..g.batch {
                for gi in 0..group {
                    let x0 = n * in_image + gi * gin * in_plane;
                    let image = &input[x0..x0 + gin * in_plane];
                    let o0 = n * out_image + gi * gout * out_plane;
                    let out = &mut output[o0..o0 + gout * out_plane];
                    let res = residual.map(|r| &r[o0..o0 + gout * out_plane]);
                    let src = if pointwise {
                        ActSrc::F32 {
                            data: image,
                            ld: in_plane,
                            inv_scale: inv,
                            zero_point: self.x_zero_point,
                        }
                    } else {
                        let (scale, zp) = (self.x_scale, self.x_zero_point);
                        lower_threaded(
                            g,
                            gin,
                            image,
                            qimg,
                            cols,
                            threads,
                            |x, q| quantize_u8(x, q, scale, zp),
                            |sub, c, q, out| im2col_u8(sub, c, q, out, zp as u8),
                        );
                        ActSrc::U8 {
                            data: cols,
                            ld: out_plane,
                        }
                    };
                    qgemm_wx_with(
                        self.isa,
                        &self.groups[gi],
                        &src,
                        out_plane,
                        QOut::F32 { data: out, requant },
                        out_plane,
                        &self.coeffs[gi].epilogue(res, activation),
                        threads,
                    );
                }
            }
        });
    }
}

thread_local! {
    static HIMAGE: Cell<Option<Vec<u16>>> = const { Cell::new(None) };
    static HCOLS: Cell<Option<Vec<u16>>> = const { Cell::new(None) };
}

fn with_half_scratch<R>(a: usize, b: usize, f: impl FnOnce(&mut [u16], &mut [u16]) -> R) -> R {
    let mut x = HIMAGE.with(|c| c.take()).unwrap_or_default();
    let mut y = HCOLS.with(|c| c.take()).unwrap_or_default();
    if x.len() < a {
        x.resize(a, 0);
    }
    if y.len() < b {
        y.resize(b, 0);
    }
    let r = f(&mut x[..a], &mut y[..b]);
    HIMAGE.with(|c| c.set(Some(x)));
    HCOLS.with(|c| c.set(Some(y)));
    r
}

/// A prepared bf16 convolution (f32 in and out; weights and activations rounded to bf16).
#[derive(Clone)]
pub struct BConv2d {
    pub geom: Conv2d,
    isa: BIsa,
    groups: Vec<PackedBWeights>,
    bias: Option<Vec<f32>>,
}

impl BConv2d {
    /// `weights`: `[M, C/g, kh, kw]` as bf16 bits. Uses the detected variant.
    pub fn new(geom: Conv2d, weights: &[u16], bias: Option<&[f32]>) -> BConv2d {
        BConv2d::with_isa(BIsa::detect(), geom, weights, bias)
    }

    pub fn with_isa(isa: BIsa, geom: Conv2d, weights: &[u16], bias: Option<&[f32]>) -> BConv2d {
        let group = geom.group.max(1);
        let (gin, gout) = (geom.in_channels / group, geom.out_channels / group);
        let taps = gin * geom.kernel_h * geom.kernel_w;
        assert!(
            weights.len() >= geom.out_channels * taps,
            "BConv2d: weights too short"
        );
        let groups = (0..group)
            .map(|g| {
                PackedBWeights::for_conv(
                    isa,
                    &weights[g * gout * taps..(g + 1) * gout * taps],
                    gout,
                    taps,
                )
            })
            .collect();
        BConv2d {
            geom,
            isa,
            groups,
            bias: bias.map(|b| b.to_vec()),
        }
    }

    pub fn isa(&self) -> BIsa {
        self.isa
    }

    pub fn run(
        &self,
        input: &[f32],
        residual: Option<&[f32]>,
        activation: Activation,
        output: &mut [f32],
        threads: usize,
    ) {
        let g = &self.geom;
        let group = g.group.max(1);
        let (gin, gout) = (g.in_channels / group, g.out_channels / group);
        let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
        let in_image = g.in_channels * in_plane;
        let out_image = g.out_channels * out_plane;
        assert!(input.len() >= g.batch * in_image && output.len() >= g.batch * out_image);
        let taps = gin * g.kernel_h * g.kernel_w;
        let pointwise = g.is_pointwise();
        let (img_len, cols_len) = if pointwise {
            (0, 0)
        } else {
            (gin * in_plane, taps * out_plane)
        };
        with_half_scratch(img_len, cols_len, |himg, cols| {
            for n in 0..g.batch {
                for gi in 0..group {
                    let x0 = n * in_image + gi * gin * in_plane;
                    let image = &input[x0..x0 + gin * in_plane];
                    let o0 = n * out_image + gi * gout * out_plane;
                    let out = &mut output[o0..o0 + gout * out_plane];
                    let res = residual.map(|r| &r[o0..o0 + gout * out_plane]);
                    let src = if pointwise {
                        BActSrc::F32 {
                            data: image,
                            ld: in_plane,
                        }
                    } else {
                        lower_threaded(
                            g,
                            gin,
                            image,
                            himg,
                            cols,
                            threads,
                            to_bf16,
                            |sub, c, h, out| im2col_u16(sub, c, h, out, 0u16),
                        );
                        BActSrc::Bf16 {
                            data: cols,
                            ld: out_plane,
                        }
                    };
                    let epi = BEpilogue {
                        bias: self.bias.as_deref().map(|b| &b[gi * gout..(gi + 1) * gout]),
                        residual: res,
                        activation,
                    };
                    bf16::bgemm_wx_with(
                        self.isa,
                        &self.groups[gi],
                        &src,
                        out_plane,
                        out,
                        out_plane,
                        &epi,
                        threads,
                    );
                }
            }
        });
    }
}

/// Converts one group's `channels` f32 planes to `T` (`convert`: quantize, or round to bf16)
/// and writes their im2col rows (`im2col(geom, channels, converted, rows)`), split over
/// channel ranges across `threads` workers. Both steps are per channel; run serially before the
/// threaded GEMM they took as long as it at 14×14 on two threads.
#[allow(clippy::too_many_arguments)]
fn lower_threaded<T: Copy + Send + Sync>(
    geom: &Conv2d,
    channels: usize,
    image: &[f32],
    converted: &mut [T],
    cols: &mut [T],
    threads: usize,
    convert: impl Fn(&[f32], &mut [T]) + Sync + Send,
    im2col: impl Fn(&Conv2d, usize, &[T], &mut [T]) + Sync + Send,
) {
    let in_plane = geom.in_h * geom.in_w;
    let rows_per_channel = geom.kernel_h * geom.kernel_w * geom.out_h * geom.out_w;
    assert!(image.len() >= channels * in_plane && converted.len() >= channels * in_plane);
    assert!(cols.len() >= channels * rows_per_channel);
    let tasks = threads.min(channels).max(1);
    let per_task = channels.div_ceil(tasks);
    let (conv_out, cols_out) = (SendPtr(converted.as_mut_ptr()), SendPtr(cols.as_mut_ptr()));
    parallel_for(threads, tasks, |task| {
        let (c0, c1) = (task * per_task, ((task + 1) * per_task).min(channels));
        if c0 >= c1 {
            return;
        }
        // SAFETY: task `task` writes only the planes and rows of channels c0..c1, disjoint from
        // every other task's, inside the two buffers (checked above).
        let (planes, rows) = unsafe {
            (
                std::slice::from_raw_parts_mut(
                    conv_out.get().add(c0 * in_plane),
                    (c1 - c0) * in_plane,
                ),
                std::slice::from_raw_parts_mut(
                    cols_out.get().add(c0 * rows_per_channel),
                    (c1 - c0) * rows_per_channel,
                ),
            )
        };
        convert(&image[c0 * in_plane..c1 * in_plane], planes);
        let sub = Conv2d {
            in_channels: c1 - c0,
            group: 1,
            ..*geom
        };
        im2col(&sub, c1 - c0, planes, rows);
    });
}
