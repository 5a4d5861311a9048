//! Convolutions: ONNX `Conv` (1-D and 2-D), the tool's `FusedConv` (bias, residual and
//! activation in the epilogue) and 2-D `ConvTranspose`. Lowering reads the geometry and the
//! constant weights; on the CPU the blocking comes from the tuning cache and the weights are
//! packed for it once per plan, and `kernels::conv` picks depthwise, pointwise or im2col.

use std::sync::Arc;

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::algorithm::{self, AlgorithmPolicy, ConvAlgorithm, ConvShape};
use crate::analysis::graph::Attributes;
use crate::analysis::ops::spatial::{ConvConfig, ConvTransposeConfig, Window};
use crate::analysis::ops::{OpCost, Traffic};
use crate::exec::cpu::{GemmConfigFn, Io, Prepared};
use crate::exec::plan::ConvAlgorithms;
use crate::exec::ExecError;
use crate::kernels::conv::winograd::{self, WinogradTile, WinogradWeights};
use crate::kernels::conv::{self, Conv2d, ConvEpilogue};
use crate::kernels::gemm::{self, Activation};

/// Which side of a pointwise → depthwise pair whose activation between them is held NHWC a
/// convolution is (`exec::plan::nhwc_pairs`); `Nchw` for every other convolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum PairLayout {
    #[default]
    Nchw,
    /// The pointwise convolution: NCHW input, NHWC output.
    NhwcOutput,
    /// The depthwise convolution: NHWC input, NCHW output.
    NhwcInput,
}

#[derive(Clone, Debug)]
pub(crate) enum ConvKernel {
    Forward {
        geom: Conv2d,
        weights: Arc<Vec<f32>>,
        bias: Option<Arc<Vec<f32>>>,
        activation: Activation,
        /// Input 3 is added before the activation.
        residual: bool,
        /// NCHW, or one side of a pointwise → depthwise pair held NHWC between them.
        layout: PairLayout,
    },
    Transpose {
        geom: Conv2d,
        weights: Arc<Vec<f32>>,
        bias: Option<Arc<Vec<f32>>>,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Onnx, "Conv") | (Domain::Tool, "FusedConv") => Lowering::floats(lower_conv),
        (Domain::Onnx, "ConvTranspose") => Lowering::floats(lower_transpose),
        _ => None,
    }
}

/// Convolution geometry from a node's attributes and its input/output shapes.
pub(crate) fn conv_geometry(
    attrs: &Attributes,
    x: &[usize],
    w: &[usize],
    y: &[usize],
) -> Result<Conv2d, String> {
    if !(x.len() == 4 || x.len() == 3) || w.len() != x.len() || y.len() != x.len() {
        return Err("only 1-D and 2-D convolutions have kernels".into());
    }
    let config = ConvConfig::parse(attrs)?;
    let weight: Vec<u64> = w[2..].iter().map(|&d| d as u64).collect();
    let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let window = config.window(&spatial_in, &weight)?;
    Ok(conv2d(x, y, &window, config.group)?.with_column_as_row())
}

/// The kernels' 2-D geometry of a convolution (forward or transposed) whose window is resolved.
pub(crate) fn conv2d(
    x: &[usize],
    y: &[usize],
    window: &Window,
    group: u64,
) -> Result<Conv2d, String> {
    let w = window
        .to_2d()
        .ok_or("only 1-D and 2-D convolutions have kernels")?;
    let two_d = x.len() == 4;
    Ok(Conv2d {
        batch: x[0],
        in_channels: x[1],
        in_h: if two_d { x[2] } else { 1 },
        in_w: *x.last().unwrap_or(&1),
        out_channels: y[1],
        kernel_h: w.kernel[0],
        kernel_w: w.kernel[1],
        stride_h: w.strides[0],
        stride_w: w.strides[1],
        dilation_h: w.dilations[0],
        dilation_w: w.dilations[1],
        pad_top: w.pads_begin[0],
        pad_left: w.pads_begin[1],
        out_h: if two_d { y[2] } else { 1 },
        out_w: *y.last().unwrap_or(&1),
        group: group as usize,
    })
}

/// Whether the convolution kernels take a Conv whose input has `input_rank` dims: 1-D or 2-D,
/// with constant weights and bias. The others run on the reference
/// (`reference::geometry::conv_nd`), which has no fused form: the advisor's `fuse` asks this
/// before giving a convolution an epilogue.
pub(crate) fn kernels_take_conv(input_rank: Option<usize>, constant_operands: bool) -> bool {
    matches!(input_rank, Some(3 | 4)) && constant_operands
}

fn lower_conv(cx: &Cx) -> Result<Lowered, ExecError> {
    if cx.node.domain.is_empty() || cx.node.domain == "ai.onnx" {
        let constant_operands =
            cx.const_f32(1).is_some() && (cx.input(2).is_none() || cx.const_f32(2).is_some());
        if !kernels_take_conv(Some(cx.shape_of(0)?.len()), constant_operands) {
            return Ok(Lowered::generic());
        }
    }
    let geom = conv_geometry(
        cx.attrs(),
        &cx.shape_of(0)?,
        &cx.shape_of(1)?,
        &cx.out_shape(0)?,
    )
    .map_err(|e| cx.error(e))?;
    let weights = cx
        .const_f32(1)
        .ok_or_else(|| cx.error("convolution weights must be constant"))?;
    let bias = match cx.input(2) {
        Some(_) => Some(
            cx.const_f32(2)
                .ok_or_else(|| cx.error("bias must be constant"))?,
        ),
        None => None,
    };
    Ok(Lowered {
        flops: geom.flops(),
        scratch: geom.scratch_len(),
        kernel: Kernel::Conv(ConvKernel::Forward {
            geom,
            weights,
            bias,
            activation: cx.activation()?,
            residual: cx.input(3).is_some(),
            layout: PairLayout::Nchw,
        }),
    })
}

fn lower_transpose(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let w = cx.shape_of(1)?;
    let y = cx.out_shape(0)?;
    // 3-D and wider, or run-time weights: the reference (`geometry::conv_transpose_nd`).
    if (x.len() != 3 && x.len() != 4) || cx.const_f32(1).is_none() {
        return Ok(Lowered::generic());
    }
    // Pads as the spec derives them from `output_shape` or `auto_pad` (the same window
    // inference used for the output shape).
    let config = ConvTransposeConfig::parse(cx.attrs()).map_err(|e| cx.error(e))?;
    let kernel: Vec<u64> = w[2..].iter().map(|&d| d as u64).collect();
    let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let window = config
        .window(&spatial_in, &kernel)
        .map_err(|e| cx.error(e))?;
    let geom = conv2d(&x, &y, &window, config.group).map_err(|e| cx.error(e))?;
    let weights = cx
        .const_f32(1)
        .ok_or_else(|| cx.error("weights must be constant"))?;
    let bias = cx.const_f32(2);
    // A 1-D one (a vocoder's upsampling) runs as 2-D with a height of one.
    let (kernel_area, in_area) = (
        w[2..].iter().product::<usize>(),
        x[2..].iter().product::<usize>(),
    );
    Ok(Lowered {
        flops: 2 * (x.iter().product::<usize>() * w[1] * kernel_area) as u64,
        scratch: w[1] * kernel_area * in_area,
        kernel: Kernel::Conv(ConvKernel::Transpose {
            geom,
            weights,
            bias,
        }),
    })
}

/// The algorithm a forward convolution runs as under `policy` (`Direct` for every other kernel
/// and for geometries Winograd cannot run). `index` is the node's position in the order.
pub(crate) fn algorithm(kernel: &Kernel, index: usize, policy: &ConvAlgorithms) -> ConvAlgorithm {
    let Kernel::Conv(ConvKernel::Forward {
        geom,
        bias,
        residual,
        ..
    }) = kernel
    else {
        return ConvAlgorithm::Direct;
    };
    if !winograd::eligible(geom) {
        return ConvAlgorithm::Direct;
    }
    match policy {
        ConvAlgorithms::DirectOnly => ConvAlgorithm::Direct,
        ConvAlgorithms::FromAnalysis(decided) => decided
            .get(&index)
            .copied()
            .unwrap_or(ConvAlgorithm::Direct),
        ConvAlgorithms::Auto(roof) => {
            let shape = ConvShape {
                batch: geom.batch,
                in_channels: geom.in_channels,
                out_channels: geom.out_channels,
                out_h: geom.out_h,
                out_w: geom.out_w,
                kernel: (geom.kernel_h, geom.kernel_w),
                strides: (geom.stride_h, geom.stride_w),
                dilations: (geom.dilation_h, geom.dilation_w),
                group: geom.group,
            };
            let input = (geom.batch * geom.in_channels * geom.in_h * geom.in_w * 4) as u64;
            let output = (geom.batch * geom.out_channels * geom.out_h * geom.out_w * 4) as u64;
            let weight = (geom.out_channels * geom.in_channels / geom.group * 9 * 4) as u64;
            let bias_bytes = if bias.is_some() {
                geom.out_channels as u64 * 4
            } else {
                0
            };
            let macs = geom.flops() / 2;
            let direct = OpCost {
                flops: geom.flops(),
                macs,
                bytes: Traffic {
                    weights_read: weight + bias_bytes,
                    act_read: input + if *residual { output } else { 0 },
                    act_written: output,
                    input_read: 0,
                },
                ..OpCost::default()
            };
            algorithm::choose(&shape, &direct, roof.as_deref(), AlgorithmPolicy::Auto).algorithm
        }
    }
}

/// The CPU blocking of a forward convolution's GEMM, and its weights packed for it (or, run as
/// Winograd, its filter transformed and packed).
pub(crate) fn prepare(
    kernel: &ConvKernel,
    algorithm: ConvAlgorithm,
    gemm_config: &mut GemmConfigFn,
) -> Prepared {
    match kernel {
        ConvKernel::Forward { geom, weights, .. } if algorithm != ConvAlgorithm::Direct => {
            let tile = match algorithm {
                ConvAlgorithm::WinogradF2 => WinogradTile::F2,
                _ => WinogradTile::F4,
            };
            let tiles = geom.out_h.div_ceil(tile.output()) * geom.out_w.div_ceil(tile.output());
            let config = gemm_config(geom.out_channels, tiles, geom.in_channels);
            Prepared::Winograd {
                weights: Arc::new(WinogradWeights::new(&config, geom, tile, weights)),
                scratch: winograd::scratch_len(geom, tile),
            }
        }
        ConvKernel::Forward {
            geom,
            weights,
            layout: PairLayout::NhwcOutput,
            ..
        } => {
            let config = gemm_config(geom.out_h * geom.out_w, geom.out_channels, geom.in_channels);
            let packed = conv::PackedConvWeights::pixel_major(&config, geom, weights).map(Arc::new);
            Prepared::Conv { config, packed }
        }
        ConvKernel::Forward { geom, weights, .. } => {
            let (m, n, k) = geom.gemm_shape(gemm::GemmConfig::default().isa);
            let config = gemm_config(m, n, k);
            let packed = conv::PackedConvWeights::new(&config, geom, weights).map(Arc::new);
            Prepared::Conv { config, packed }
        }
        ConvKernel::Transpose { .. } => Prepared::None,
    }
}

pub(crate) fn run(kernel: &ConvKernel, cpu: &Prepared, io: &mut Io) -> Result<(), String> {
    match kernel {
        ConvKernel::Forward {
            geom,
            weights,
            bias,
            activation,
            residual,
            layout,
        } => {
            let residual = if *residual { Some(io.x(3)?) } else { None };
            let ep = ConvEpilogue {
                bias: bias.as_deref().map(|b| b.as_slice()),
                residual,
                activation: *activation,
            };
            if let Prepared::Winograd { weights, scratch } = cpu {
                // Workers splitting the tile rows each need their own blocks' scratch.
                let scratch = (*scratch).max(winograd::scratch_len_threads(
                    geom,
                    weights.tile(),
                    io.threads,
                ));
                if io.scratch.len() < scratch {
                    io.scratch.resize(scratch, 0.0);
                }
                winograd::conv2d_winograd(
                    geom,
                    io.x(0)?,
                    weights,
                    &ep,
                    io.outs[0],
                    &mut io.scratch[..scratch],
                    io.threads,
                );
                return Ok(());
            }
            if *layout == PairLayout::NhwcInput {
                conv::depthwise::depthwise_conv2d_nhwc_input(
                    geom,
                    io.x(0)?,
                    weights,
                    &ep,
                    io.outs[0],
                    io.threads,
                );
                return Ok(());
            }
            let Prepared::Conv { config, packed } = cpu else {
                return Err("internal: convolution not prepared".into());
            };
            if *layout == PairLayout::NhwcOutput {
                conv::pointwise_conv2d_to_nhwc(
                    config,
                    geom,
                    io.x(0)?,
                    weights,
                    packed.as_deref(),
                    &ep,
                    io.outs[0],
                    io.threads,
                );
                return Ok(());
            }
            // The workspace scratch only ever grows: kernels sharing it never shrink it.
            if io.scratch.len() < geom.scratch_len() {
                io.scratch.resize(geom.scratch_len(), 0.0);
            }
            conv::conv2d_prepacked(
                config,
                geom,
                io.x(0)?,
                weights,
                packed.as_deref(),
                &ep,
                io.outs[0],
                &mut io.scratch[..geom.scratch_len()],
                io.threads,
            );
        }
        ConvKernel::Transpose {
            geom,
            weights,
            bias,
        } => {
            conv::conv_transpose2d(
                geom,
                io.x(0)?,
                weights,
                bias.as_deref().map(|b| b.as_slice()),
                io.outs[0],
                io.scratch,
                io.threads,
            );
        }
    }
    Ok(())
}
