//! Pooling: `MaxPool` and `AveragePool` (1-D and 2-D windows, ceil mode, padding counted or
//! not) and `GlobalAveragePool` / `GlobalMaxPool`. Windowed pools are split into whole planes
//! over the plan's threads.

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops::spatial;
use crate::exec::cpu::Io;
use crate::exec::ExecError;
use crate::kernels::parallel::par_planes;
use crate::kernels::pool::{self, Pool2d};

#[derive(Clone, Debug)]
pub(crate) enum PoolKernel {
    Max(Pool2d),
    Average {
        geom: Pool2d,
        include_pad: bool,
        pad_bottom: usize,
        pad_right: usize,
    },
    Global {
        plane: usize,
        max: bool,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Onnx, "MaxPool" | "AveragePool") => Lowering::floats(lower_window),
        (Domain::Onnx, "GlobalAveragePool" | "GlobalMaxPool") => Lowering::floats(lower_global),
        _ => None,
    }
}

fn lower_window(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let y = cx.out_shape(0)?;
    if x.len() != 4 && x.len() != 3 {
        return Err(cx.error("only 1-D and 2-D pooling have kernels"));
    }
    if cx.node.outputs.len() > 1 {
        return Err(cx.error("MaxPool with an Indices output has no kernel"));
    }
    let attrs = cx.attrs();
    let kernel: Vec<u64> = attrs
        .ints("kernel_shape")
        .unwrap_or(&[])
        .iter()
        .map(|&k| k as u64)
        .collect();
    let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let ceil = attrs.int_or("ceil_mode", 0) != 0;
    let w = spatial::forward_window(attrs, &spatial_in, &kernel, ceil).map_err(|e| cx.error(e))?;
    let two_d = x.len() == 4;
    let n = spatial_in.len();
    let geom = Pool2d {
        planes: x[0] * x[1],
        in_h: if two_d { x[2] } else { 1 },
        in_w: *x.last().unwrap_or(&1),
        kernel_h: if two_d { kernel[0] as usize } else { 1 },
        kernel_w: *kernel.last().unwrap_or(&1) as usize,
        stride_h: if two_d { w.strides[0] as usize } else { 1 },
        stride_w: *w.strides.last().unwrap_or(&1) as usize,
        dilation_h: if two_d { w.dilations[0] as usize } else { 1 },
        dilation_w: *w.dilations.last().unwrap_or(&1) as usize,
        pad_top: if two_d { w.pads[0] as usize } else { 0 },
        pad_left: w.pads[n - 1] as usize,
        out_h: if two_d { y[2] } else { 1 },
        out_w: *y.last().unwrap_or(&1),
    };
    let kernel = if cx.op() == "MaxPool" {
        PoolKernel::Max(geom)
    } else {
        PoolKernel::Average {
            geom,
            include_pad: attrs.int_or("count_include_pad", 0) != 0,
            pad_bottom: if two_d { w.pads[n] as usize } else { 0 },
            pad_right: w.pads[2 * n - 1] as usize,
        }
    };
    Ok(Lowered::new(Kernel::Pool(kernel)))
}

fn lower_global(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    Ok(Lowered::new(Kernel::Pool(PoolKernel::Global {
        plane: x[2..].iter().product(),
        max: cx.op() == "GlobalMaxPool",
    })))
}

pub(crate) fn run(kernel: &PoolKernel, io: &mut Io) -> Result<(), String> {
    match kernel {
        PoolKernel::Max(geom) => {
            let x = io.x(0)?;
            par_planes(geom, x, io.outs[0], io.threads, |sub, xs, y| {
                pool::max_pool(sub, xs, y)
            });
        }
        PoolKernel::Average {
            geom,
            include_pad,
            pad_bottom,
            pad_right,
        } => {
            let x = io.x(0)?;
            par_planes(geom, x, io.outs[0], io.threads, |sub, xs, y| {
                pool::avg_pool(sub, *include_pad, *pad_bottom, *pad_right, xs, y)
            });
        }
        PoolKernel::Global { plane, max } => pool::global_pool(io.x(0)?, *plane, *max, io.outs[0]),
    }
    Ok(())
}
