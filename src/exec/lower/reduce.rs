//! Reductions: `ReduceMean`, `ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceProd`,
//! `ReduceSumSquare`, `ReduceL1`, `ReduceL2`, `ReduceLogSumExp` (axes from the attribute or,
//! since opset 13/18, a constant input) and `ArgMax` / `ArgMin` over f32 data (integer results).

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops;
use crate::exec::cpu::Io;
use crate::exec::{ExecError, RtData, RtTensor};
use crate::kernels::movement::{self, Reduction};

#[derive(Clone, Debug)]
pub(crate) enum ReduceKernel {
    Reduce {
        shape: Vec<usize>,
        axes: Vec<usize>,
        kind: Reduction,
    },
    ArgMax {
        shape: Vec<usize>,
        axis: usize,
        min: bool,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Onnx, "ArgMax" | "ArgMin") => Lowering::integers(lower_arg),
        (Domain::Onnx, _) if reduction(op).is_some() => Lowering::floats(lower_reduce),
        _ => None,
    }
}

fn reduction(op: &str) -> Option<Reduction> {
    Some(match op {
        "ReduceMean" => Reduction::Mean,
        "ReduceSum" => Reduction::Sum,
        "ReduceMax" => Reduction::Max,
        "ReduceMin" => Reduction::Min,
        "ReduceProd" => Reduction::Prod,
        "ReduceSumSquare" => Reduction::SumSquare,
        "ReduceL1" => Reduction::L1,
        "ReduceL2" => Reduction::L2,
        "ReduceLogSumExp" => Reduction::LogSumExp,
        _ => return None,
    })
}

fn lower_reduce(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let raw = cx
        .const_i64(1)
        .or_else(|| cx.attrs().ints("axes").map(<[i64]>::to_vec))
        .unwrap_or_default();
    let mut axes: Vec<usize> = if raw.is_empty() {
        if cx.attrs().int_or("noop_with_empty_axes", 0) != 0 {
            vec![]
        } else {
            (0..x.len()).collect()
        }
    } else {
        raw.iter()
            .map(|&a| ops::normalize_axis(a, x.len()).unwrap_or(0))
            .collect()
    };
    axes.sort_unstable();
    axes.dedup();
    let kind = reduction(cx.op()).ok_or_else(|| cx.error("not a reduction"))?;
    Ok(Lowered::new(Kernel::Reduce(ReduceKernel::Reduce {
        shape: x,
        axes,
        kind,
    })))
}

/// ArgMax/ArgMin of f32 data; of integer data, through the generic evaluator.
fn lower_arg(cx: &Cx) -> Result<Lowered, ExecError> {
    if !cx.is_float(0) {
        return Ok(Lowered::generic());
    }
    let x = cx.shape_of(0)?;
    let axis =
        ops::normalize_axis(cx.attrs().int_or("axis", 0), x.len()).map_err(|e| cx.error(e))?;
    Ok(Lowered::new(Kernel::Reduce(ReduceKernel::ArgMax {
        shape: x,
        axis,
        min: cx.op() == "ArgMin",
    })))
}

pub(crate) fn run(kernel: &ReduceKernel, io: &mut Io) -> Result<(), String> {
    match kernel {
        ReduceKernel::Reduce { shape, axes, kind } => {
            movement::reduce(io.x(0)?, shape, axes, *kind, io.outs[0])
        }
        ReduceKernel::ArgMax { shape, axis, min } => {
            let data = io.x(0)?;
            let outer: usize = shape[..*axis].iter().product();
            let inner: usize = shape[*axis + 1..].iter().product();
            let len = shape[*axis];
            let mut result = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                for i in 0..inner {
                    let mut best = 0;
                    for a in 1..len {
                        let v = data[(o * len + a) * inner + i];
                        let b = data[(o * len + best) * inner + i];
                        if (!min && v > b) || (*min && v < b) {
                            best = a;
                        }
                    }
                    result.push(best as i64);
                }
            }
            let mut out_shape = shape.clone();
            out_shape[*axis] = 1;
            io.dynamic_out.push(RtTensor {
                shape: out_shape,
                data: RtData::I64(result),
            });
        }
    }
    Ok(())
}
