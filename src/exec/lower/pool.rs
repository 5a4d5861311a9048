//! Pooling: `MaxPool` and `AveragePool` (1-D and 2-D windows, ceil mode, padding counted or
//! not) and `GlobalAveragePool` / `GlobalMaxPool`. Windowed pools are split into whole planes
//! over the plan's threads.

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops::spatial::PoolConfig;
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
    // 3-D pooling and MaxPool's Indices output run on the reference kernel.
    if (x.len() != 4 && x.len() != 3) || cx.extra_outputs_used() {
        return Ok(Lowered::generic());
    }
    let config = PoolConfig::parse(cx.attrs()).map_err(|e| cx.error(e))?;
    let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let w = config
        .window(&spatial_in)
        .map_err(|e| cx.error(e))?
        .to_2d()
        .ok_or_else(|| cx.error("only 1-D and 2-D pooling have kernels"))?;
    let two_d = x.len() == 4;
    let geom = Pool2d {
        planes: x[0] * x[1],
        in_h: if two_d { x[2] } else { 1 },
        in_w: *x.last().unwrap_or(&1),
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
    };
    // One window covering the whole unpadded plane (the 7×7 AveragePool that older exports end
    // ResNets with) is a global pool: one vector reduction per plane instead of a 49-tap
    // window pass per output.
    let whole_plane = geom.out_h == 1
        && geom.out_w == 1
        && geom.kernel_h == geom.in_h
        && geom.kernel_w == geom.in_w
        && geom.dilation_h == 1
        && geom.dilation_w == 1
        && w.pads_begin.iter().chain(&w.pads_end).all(|&pad| pad == 0);
    if whole_plane {
        return Ok(Lowered::new(Kernel::Pool(PoolKernel::Global {
            plane: geom.in_h * geom.in_w,
            max: cx.op() == "MaxPool",
        })));
    }
    let kernel = if cx.op() == "MaxPool" {
        PoolKernel::Max(geom)
    } else {
        PoolKernel::Average {
            geom,
            include_pad: config.count_include_pad,
            pad_bottom: w.pads_end[0],
            pad_right: w.pads_end[1],
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
