//! Normalisations: `BatchNormalization` (inference: folded into a per-channel scale and shift),
//! `LayerNormalization`, `InstanceNormalization`, `LRN`, `Softmax` and `LogSoftmax` (with the
//! axis rule of their opset).

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops;
use crate::exec::cpu::{InRef, Io};
use crate::exec::ExecError;
use crate::kernels::norm;
use crate::kernels::parallel::{par_pieces, par_pieces_weighted};

#[derive(Clone, Debug)]
pub(crate) enum NormKernel {
    ScaleShift {
        channels: usize,
        plane: usize,
        scale: Vec<f32>,
        shift: Vec<f32>,
    },
    LayerNorm {
        row_len: usize,
        eps: f32,
    },
    InstanceNorm {
        channels: usize,
        plane: usize,
        eps: f32,
    },
    Lrn {
        batch: usize,
        channels: usize,
        plane: usize,
        size: usize,
        alpha: f32,
        beta: f32,
        bias: f32,
    },
    Softmax {
        outer: usize,
        axis_len: usize,
        inner: usize,
        log: bool,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    if domain != Domain::Onnx {
        return None;
    }
    match op {
        "BatchNormalization" => Lowering::floats(lower_batch_norm),
        "LayerNormalization" => Lowering::floats(lower_layer_norm),
        "InstanceNormalization" => Lowering::floats(lower_instance_norm),
        "LRN" => Lowering::floats(lower_lrn),
        "Softmax" | "LogSoftmax" => Lowering::floats(lower_softmax),
        _ => None,
    }
}

fn norm(kernel: NormKernel) -> Lowered {
    Lowered::new(Kernel::Norm(kernel))
}

fn lower_batch_norm(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let get = |i: usize| {
        cx.const_f32(i)
            .ok_or_else(|| cx.error("BN parameters must be constant"))
    };
    let (scale, shift) = norm::batch_norm_coefficients(
        &get(1)?,
        &get(2)?,
        &get(3)?,
        &get(4)?,
        cx.attrs().float_or("epsilon", 1e-5),
    );
    let channels = x.get(1).copied().unwrap_or(1);
    let plane = x.iter().skip(2).product();
    Ok(norm(NormKernel::ScaleShift {
        channels,
        plane,
        scale,
        shift,
    })
    .with_flops(2 * x.iter().product::<usize>() as u64))
}

fn lower_layer_norm(cx: &Cx) -> Result<Lowered, ExecError> {
    // The kernel writes Y only; a node whose Mean or InvStdDev is read runs the reference.
    if cx.extra_outputs_used() {
        return Ok(Lowered::generic());
    }
    let x = cx.shape_of(0)?;
    let axis =
        ops::normalize_axis(cx.attrs().int_or("axis", -1), x.len()).map_err(|e| cx.error(e))?;
    Ok(norm(NormKernel::LayerNorm {
        row_len: x[axis..].iter().product(),
        eps: cx.attrs().float_or("epsilon", 1e-5),
    }))
}

fn lower_instance_norm(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    Ok(norm(NormKernel::InstanceNorm {
        channels: x[1],
        plane: x[2..].iter().product(),
        eps: cx.attrs().float_or("epsilon", 1e-5),
    }))
}

fn lower_lrn(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let attrs = cx.attrs();
    Ok(norm(NormKernel::Lrn {
        batch: x[0],
        channels: x[1],
        plane: x[2..].iter().product(),
        size: attrs.int_or("size", 1).max(1) as usize,
        alpha: attrs.float_or("alpha", 1e-4),
        beta: attrs.float_or("beta", 0.75),
        bias: attrs.float_or("bias", 1.0),
    }))
}

fn lower_softmax(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    // Before opset 13 the op flattens everything from `axis` into one row.
    let default_axis = if cx.opset() >= 13 { -1 } else { 1 };
    let axis = ops::normalize_axis(cx.attrs().int_or("axis", default_axis), x.len())
        .map_err(|e| cx.error(e))?;
    let (outer, axis_len, inner) = if cx.opset() >= 13 {
        (
            x[..axis].iter().product(),
            x[axis],
            x[axis + 1..].iter().product(),
        )
    } else {
        (x[..axis].iter().product(), x[axis..].iter().product(), 1)
    };
    Ok(norm(NormKernel::Softmax {
        outer,
        axis_len,
        inner,
        log: cx.op() == "LogSoftmax",
    }))
}

pub(crate) fn run(kernel: &NormKernel, io: &mut Io) -> Result<(), String> {
    match kernel {
        NormKernel::ScaleShift {
            channels,
            plane,
            scale,
            shift,
        } => {
            let (x, unit) = (io.x(0)?, (*plane).max(1));
            par_pieces(io.outs[0], unit, io.threads, |off, y| {
                let xs = &x[off..off + y.len()];
                norm::scale_shift(xs, off / unit, *channels, *plane, scale, shift, y)
            });
        }
        NormKernel::LayerNorm { row_len, eps } => {
            let gamma = io
                .ins
                .get(1)
                .copied()
                .flatten()
                .map(InRef::f32)
                .transpose()?;
            let beta = io
                .ins
                .get(2)
                .copied()
                .flatten()
                .map(InRef::f32)
                .transpose()?;
            // Threads take whole rows (three passes over each).
            let (x, unit) = (io.x(0)?, (*row_len).max(1));
            par_pieces_weighted(io.outs[0], unit, 3, io.threads, |off, y| {
                norm::layer_norm(&x[off..off + y.len()], *row_len, gamma, beta, *eps, y)
            });
        }
        NormKernel::InstanceNorm {
            channels,
            plane,
            eps,
        } => {
            // Threads take whole planes (three passes over each).
            let (x, scale, bias, unit) = (io.x(0)?, io.x(1)?, io.x(2)?, (*plane).max(1));
            par_pieces_weighted(io.outs[0], unit, 3, io.threads, |off, y| {
                let xs = &x[off..off + y.len()];
                norm::instance_norm(xs, *channels, *plane, off / unit, scale, bias, *eps, y)
            });
        }
        NormKernel::Lrn {
            batch,
            channels,
            plane,
            size,
            alpha,
            beta,
            bias,
        } => {
            // Threads take ranges of output planes; each output reads `size` squares and
            // takes two roots and a division.
            let (x, unit) = (io.x(0)?, (*plane).max(1));
            let out = &mut io.outs[0][..batch * channels * plane];
            par_pieces_weighted(out, unit, size + 4, io.threads, |off, y| {
                norm::lrn(
                    x,
                    *channels,
                    *plane,
                    off / unit,
                    *size,
                    *alpha,
                    *beta,
                    *bias,
                    y,
                )
            });
        }
        NormKernel::Softmax {
            outer,
            axis_len,
            inner,
            log,
        } => {
            // Whole rows (of the axis and its inner positions) shared across the threads.
            let x = io.x(0)?;
            let block = axis_len * inner;
            let out = &mut io.outs[0][..outer * block];
            par_pieces(out, block.max(1), io.threads, |start, piece| {
                let rows = piece.len() / block.max(1);
                norm::softmax(
                    &x[start..start + piece.len()],
                    rows,
                    *axis_len,
                    *inner,
                    *log,
                    piece,
                )
            });
        }
    }
    Ok(())
}
