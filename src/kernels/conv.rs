//! 2-D convolution (NCHW): 1×1 stride-1 convolutions are plain GEMMs on the input, depthwise
//! convolutions run the direct kernel of `depthwise.rs`, everything else goes through explicit im2col + GEMM per
//! group. The GEMM epilogue carries bias, residual and activation.

use super::depthwise;
use super::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use super::simd::multiversion;

/// Geometry of one 2-D convolution (1-D convolutions use `h = kh = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub group: usize,
}

impl Conv2d {
    pub fn is_depthwise(&self) -> bool {
        self.group == self.in_channels && self.group == self.out_channels && self.group > 1
    }

    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1
            && self.kernel_w == 1
            && self.stride_h == 1
            && self.stride_w == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.out_h == self.in_h
            && self.out_w == self.in_w
    }

    /// Scratch floats im2col needs (0 for the paths that need none).
    pub fn scratch_len(&self) -> usize {
        if self.is_depthwise() || self.is_pointwise() {
            0
        } else {
            (self.in_channels / self.group)
                * self.kernel_h
                * self.kernel_w
                * self.out_h
                * self.out_w
        }
    }

    pub fn flops(&self) -> u64 {
        2 * (self.batch
            * self.out_channels
            * self.out_h
            * self.out_w
            * (self.in_channels / self.group)
            * self.kernel_h
            * self.kernel_w) as u64
    }
}

/// Epilogue of a convolution in NCHW terms.
#[derive(Clone, Copy, Debug)]
pub struct ConvEpilogue<'a> {
    pub bias: Option<&'a [f32]>,
    /// Tensor added after the bias, same shape as the output.
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

multiversion! {
    fn im2col(geom: &Conv2d, input: &[f32], out: &mut [f32]) {
        let (oh, ow) = (geom.out_h, geom.out_w);
        let channels = geom.in_channels / geom.group;
        let mut row = 0;
        for c in 0..channels {
            let plane = &input[c * geom.in_h * geom.in_w..(c + 1) * geom.in_h * geom.in_w];
            for ky in 0..geom.kernel_h {
                for kx in 0..geom.kernel_w {
                    let dst = &mut out[row * oh * ow..(row + 1) * oh * ow];
                    for y in 0..oh {
                        let iy = (y * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                        let dst_row = &mut dst[y * ow..(y + 1) * ow];
                        if iy < 0 || iy >= geom.in_h as isize {
                            dst_row.fill(0.0);
                            continue;
                        }
                        let src = &plane[iy as usize * geom.in_w..(iy as usize + 1) * geom.in_w];
                        let x_offset = (kx * geom.dilation_w) as isize - geom.pad_left as isize;
                        if geom.stride_w == 1 {
                            // Contiguous copy of the valid span, zeros at the borders.
                            let first = (-x_offset).max(0) as usize;
                            let last = ((geom.in_w as isize - x_offset).min(ow as isize)).max(0) as usize;
                            dst_row[..first.min(ow)].fill(0.0);
                            if last > first {
                                let s = (first as isize + x_offset) as usize;
                                dst_row[first..last].copy_from_slice(&src[s..s + last - first]);
                            }
                            dst_row[last.max(first).min(ow)..].fill(0.0);
                        } else {
                            for (x, d) in dst_row.iter_mut().enumerate() {
                                let ix = (x * geom.stride_w) as isize + x_offset;
                                *d = if ix >= 0 && ix < geom.in_w as isize { src[ix as usize] } else { 0.0 };
                            }
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}

/// im2col of one group's `channels` input planes, split over channels across `threads`
/// workers (the GEMM after it is threaded; a serial im2col was 6% of a 2-thread ResNet-50).
fn im2col_threaded(
    geom: &Conv2d,
    channels: usize,
    image: &[f32],
    cols: &mut [f32],
    threads: usize,
) {
    let in_plane = geom.in_h * geom.in_w;
    let rows_per_channel = geom.kernel_h * geom.kernel_w * geom.out_h * geom.out_w;
    assert!(cols.len() >= channels * rows_per_channel && image.len() >= channels * in_plane);
    let tasks = threads.min(channels).max(1);
    let per_task = channels.div_ceil(tasks);
    let out = gemm::SendPtr(cols.as_mut_ptr());
    gemm::parallel_for(threads, tasks, |task| {
        let (c0, c1) = (task * per_task, ((task + 1) * per_task).min(channels));
        if c0 >= c1 {
            return;
        }
        let sub = Conv2d {
            in_channels: c1 - c0,
            group: 1,
            ..*geom
        };
        // SAFETY: task `task` writes only the rows of channels c0..c1, disjoint from every
        // other task's, inside `cols` (which holds `channels` channels' rows).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                out.get().add(c0 * rows_per_channel),
                (c1 - c0) * rows_per_channel,
            )
        };
        im2col(&sub, &image[c0 * in_plane..c1 * in_plane], dst);
    });
}

/// Runs the convolution with the default GEMM blocking. `weights` are
/// `[out_channels, in_channels/group, kh, kw]`; `scratch` must hold `geom.scratch_len()` floats.
pub fn conv2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    conv2d_with(
        &gemm::GemmConfig::default(),
        geom,
        input,
        weights,
        epilogue,
        output,
        scratch,
        threads,
    );
}

/// Convolution weights packed once for the GEMM path, one [`gemm::PackedA`] per group, so a run
/// does not repack them (at 7×7 planes each weight is used for only 49 columns: packing per run
/// cost about as much as the multiply).
pub struct PackedConvWeights {
    groups: Vec<gemm::PackedA>,
}

impl std::fmt::Debug for PackedConvWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedConvWeights({} groups, {} bytes)",
            self.groups.len(),
            self.bytes()
        )
    }
}

impl PackedConvWeights {
    /// `None` for geometries that do not take the GEMM path (depthwise).
    pub fn new(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
    ) -> Option<PackedConvWeights> {
        if geom.is_depthwise() {
            return None;
        }
        let group_out = geom.out_channels / geom.group;
        let taps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
        let groups = (0..geom.group)
            .map(|g| {
                let a = MatRef::row_major(
                    &weights[g * group_out * taps..(g + 1) * group_out * taps],
                    group_out,
                    taps,
                );
                gemm::PackedA::with_config(&a, config)
            })
            .collect();
        Some(PackedConvWeights { groups })
    }

    /// Bytes held by the packed panels.
    pub fn bytes(&self) -> usize {
        self.groups.iter().map(|p| p.bytes()).sum()
    }
}

/// Runs the convolution with a given GEMM configuration (an autotuned blocking). `weights` are `[out_channels, in_channels/group, kh, kw]`; `scratch`
/// must hold `geom.scratch_len()` floats. `threads` parallelises the GEMMs.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_with(
    config: &gemm::GemmConfig,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    conv2d_prepacked(
        config, geom, input, weights, None, epilogue, output, scratch, threads,
    );
}

/// [`conv2d_with`] with the weights also given pre-packed (from [`PackedConvWeights::new`] with
/// the same `config` and geometry); `weights` are still used by the depthwise path.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_prepacked(
    config: &gemm::GemmConfig,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    packed: Option<&PackedConvWeights>,
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    let in_image = geom.in_channels * geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    let out_image = geom.out_channels * out_plane;
    if geom.is_depthwise() {
        depthwise::depthwise_conv2d(geom, input, weights, epilogue, output, threads);
        return;
    }
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let taps = group_in * geom.kernel_h * geom.kernel_w;
    for n in 0..geom.batch {
        for g in 0..geom.group {
            let image = &input[n * in_image + g * group_in * geom.in_h * geom.in_w
                ..n * in_image + (g + 1) * group_in * geom.in_h * geom.in_w];
            let b_data: &[f32] = if geom.is_pointwise() {
                image
            } else {
                let cols = &mut scratch[..taps * out_plane];
                im2col_threaded(geom, group_in, image, cols, threads);
                cols
            };
            let a = MatRef {
                data: &weights[g * group_out * taps..(g + 1) * group_out * taps],
                rows: group_out,
                cols: taps,
                row_stride: taps,
                col_stride: 1,
            };
            let b = MatRef {
                data: b_data,
                rows: taps,
                cols: out_plane,
                row_stride: out_plane,
                col_stride: 1,
            };
            let start = n * out_image + g * group_out * out_plane;
            let end = start + group_out * out_plane;
            let bias = match epilogue.bias {
                Some(bias) => BiasKind::PerRow(&bias[g * group_out..(g + 1) * group_out]),
                None => BiasKind::None,
            };
            let ep = Epilogue {
                bias,
                residual: epilogue.residual.map(|r| &r[start..end]),
                activation: epilogue.activation,
            };
            match packed {
                Some(p) => gemm::sgemm_packed_a(
                    &p.groups[g],
                    &b,
                    &mut output[start..end],
                    out_plane,
                    &ep,
                    threads,
                ),
                None => gemm::sgemm_with(
                    config,
                    &a,
                    &b,
                    &mut output[start..end],
                    out_plane,
                    &ep,
                    threads,
                ),
            }
        }
    }
}

/// Transposed 2-D convolution (NCHW): per group, cols = Wᵀ·X ([M/g·kh·kw, H·W]) by GEMM, then a
/// col2im scatter-add into the output. `geom` describes the *forward* direction from the output
/// back to the input: `in_*` are the ConvTranspose input dims, `out_*` its output dims.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    output: &mut [f32],
    scratch: &mut Vec<f32>,
    threads: usize,
) {
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let taps = group_out * geom.kernel_h * geom.kernel_w;
    let in_plane = geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    if scratch.len() < taps * in_plane {
        scratch.resize(taps * in_plane, 0.0);
    }
    let scratch = &mut scratch[..taps * in_plane];
    for n in 0..geom.batch {
        for g in 0..geom.group {
            // Weights are [C_in, M/g, kh, kw]: the group's slice, viewed transposed.
            let w = &weights[g * group_in * taps..(g + 1) * group_in * taps];
            let a = MatRef {
                data: w,
                rows: taps,
                cols: group_in,
                row_stride: 1,
                col_stride: taps,
            };
            let x_start = (n * geom.in_channels + g * group_in) * in_plane;
            let b = MatRef {
                data: &input[x_start..x_start + group_in * in_plane],
                rows: group_in,
                cols: in_plane,
                row_stride: in_plane,
                col_stride: 1,
            };
            let ep = Epilogue {
                bias: BiasKind::None,
                residual: None,
                activation: Activation::None,
            };
            gemm::sgemm(&a, &b, scratch, in_plane, &ep, threads);
            let out_start = (n * geom.out_channels + g * group_out) * out_plane;
            let out = &mut output[out_start..out_start + group_out * out_plane];
            for (m, plane) in out.chunks_mut(out_plane).enumerate() {
                plane.fill(bias.map_or(0.0, |b| b[g * group_out + m]));
            }
            for m in 0..group_out {
                for ky in 0..geom.kernel_h {
                    for kx in 0..geom.kernel_w {
                        let row = (m * geom.kernel_h + ky) * geom.kernel_w + kx;
                        let cols = &scratch[row * in_plane..(row + 1) * in_plane];
                        for iy in 0..geom.in_h {
                            let oy = (iy * geom.stride_h + ky * geom.dilation_h) as isize
                                - geom.pad_top as isize;
                            if oy < 0 || oy >= geom.out_h as isize {
                                continue;
                            }
                            for ix in 0..geom.in_w {
                                let ox = (ix * geom.stride_w + kx * geom.dilation_w) as isize
                                    - geom.pad_left as isize;
                                if ox >= 0 && ox < geom.out_w as isize {
                                    out[m * out_plane + oy as usize * geom.out_w + ox as usize] +=
                                        cols[iy * geom.in_w + ix];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Direct loop over every output, tap and input channel in f64 (grouped, strided, dilated,
/// padded), then the epilogue: the reference the convolution kernels are tested against.
#[cfg(test)]
pub(crate) fn reference_conv(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
) -> Vec<f32> {
    let g = geom;
    let (gi, go) = (g.in_channels / g.group, g.out_channels / g.group);
    let mut out = vec![0.0; g.batch * g.out_channels * g.out_h * g.out_w];
    for n in 0..g.batch {
        for m in 0..g.out_channels {
            let group = m / go;
            for y in 0..g.out_h {
                for x in 0..g.out_w {
                    let mut acc = epilogue.bias.map_or(0.0, |b| b[m]) as f64;
                    for c in 0..gi {
                        for ky in 0..g.kernel_h {
                            for kx in 0..g.kernel_w {
                                let iy = (y * g.stride_h + ky * g.dilation_h) as isize
                                    - g.pad_top as isize;
                                let ix = (x * g.stride_w + kx * g.dilation_w) as isize
                                    - g.pad_left as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= g.in_h as isize
                                    || ix >= g.in_w as isize
                                {
                                    continue;
                                }
                                let iv = input[((n * g.in_channels + group * gi + c) * g.in_h
                                    + iy as usize)
                                    * g.in_w
                                    + ix as usize];
                                let wv =
                                    weights[((m * gi + c) * g.kernel_h + ky) * g.kernel_w + kx];
                                acc += iv as f64 * wv as f64;
                            }
                        }
                    }
                    let at = ((n * g.out_channels + m) * g.out_h + y) * g.out_w + x;
                    let mut v = acc as f32;
                    if let Some(r) = epilogue.residual {
                        v += r[at];
                    }
                    out[at] = gemm::activation_scalar(&epilogue.activation, v);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::simd::{available_levels, IsaLevel};

    fn check(geom: Conv2d) {
        let input: Vec<f32> = (0..geom.batch * geom.in_channels * geom.in_h * geom.in_w)
            .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let weights: Vec<f32> =
            (0..geom.out_channels * geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w)
                .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
                .collect();
        let bias: Vec<f32> = (0..geom.out_channels).map(|i| i as f32 * 0.1).collect();
        let ep = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::None,
        };
        let want = reference_conv(&geom, &input, &weights, &ep);
        let mut got = vec![0.0; want.len()];
        let mut scratch = vec![0.0; geom.scratch_len()];
        conv2d(&geom, &input, &weights, &ep, &mut got, &mut scratch, 1);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                "{geom:?} at {i}: {g} vs {w}"
            );
        }
        // The plan's path: weights packed once per GEMM variant, one and two threads.
        for isa in gemm::Isa::ALL {
            let Some(config) = gemm::GemmConfig::for_isa(isa) else {
                continue;
            };
            let packed = PackedConvWeights::new(&config, &geom, &weights);
            assert_eq!(packed.is_none(), geom.is_depthwise());
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; want.len()];
                let mut scratch = vec![f32::NAN; geom.scratch_len()];
                conv2d_prepacked(
                    &config,
                    &geom,
                    &input,
                    &weights,
                    packed.as_ref(),
                    &ep,
                    &mut got,
                    &mut scratch,
                    threads,
                );
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                        "{isa:?} prepacked, {threads} threads, {geom:?} at {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn geom(
        c: usize,
        m: usize,
        hw: usize,
        k: usize,
        stride: usize,
        pad: usize,
        group: usize,
        dil: usize,
    ) -> Conv2d {
        let out = (hw + 2 * pad - dil * (k - 1) - 1) / stride + 1;
        Conv2d {
            batch: 2,
            in_channels: c,
            in_h: hw,
            in_w: hw + 1,
            out_channels: m,
            kernel_h: k,
            kernel_w: k,
            stride_h: stride,
            stride_w: stride,
            dilation_h: dil,
            dilation_w: dil,
            pad_top: pad,
            pad_left: pad,
            out_h: out,
            out_w: (hw + 1 + 2 * pad - dil * (k - 1) - 1) / stride + 1,
            group,
        }
    }

    #[test]
    fn im2col_agrees_across_isa_variants() {
        // Every variant of the multiversioned loop produces the same bits as the scalar one.
        let input: Vec<f32> = (0..2 * 6 * 9 * 10).map(|i| (i % 13) as f32 - 6.0).collect();
        let image = &input[..6 * 9 * 10];
        let dense = geom(3, 4, 9, 3, 2, 1, 1, 1);
        let mut cols_ref = vec![0.0; dense.scratch_len()];
        im2col::at(IsaLevel::Scalar, &dense, image, &mut cols_ref);
        for level in available_levels() {
            let mut cols = vec![0.0; dense.scratch_len()];
            im2col::at(level, &dense, image, &mut cols);
            assert_eq!(cols, cols_ref, "im2col at {level:?}");
        }
    }

    #[test]
    fn conv_paths_match_the_direct_loop() {
        check(geom(3, 8, 9, 3, 1, 1, 1, 1)); // im2col
        check(geom(4, 6, 8, 3, 2, 1, 2, 1)); // grouped, strided
        check(geom(5, 7, 6, 1, 1, 0, 1, 1)); // pointwise
        check(geom(6, 6, 9, 3, 1, 1, 6, 1)); // depthwise
        check(geom(6, 6, 9, 5, 2, 2, 6, 1)); // depthwise 5x5 stride 2
        check(geom(3, 4, 11, 3, 1, 2, 1, 2)); // dilated
        check(geom(8, 8, 7, 3, 2, 0, 8, 1)); // depthwise, no padding
        check(geom(4, 4, 40, 3, 2, 1, 4, 1)); // depthwise rows, stride 2
        check(geom(4, 4, 40, 5, 1, 2, 4, 1)); // depthwise rows, 5x5
        check(geom(4, 4, 37, 3, 2, 1, 4, 2)); // depthwise rows, dilated, stride 2
        check(geom(3, 5, 12, 7, 2, 3, 1, 1)); // 7x7 stride 2 stem
        check(geom(8, 6, 9, 1, 2, 0, 1, 1)); // 1x1 stride 2 (im2col, not pointwise)
        check(geom(70, 13, 6, 3, 1, 1, 1, 1)); // K = 630 taps: several k-blocks
    }
}
