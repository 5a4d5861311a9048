//! Shape-side ops: `Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`, `Identity`, `Dropout` (views:
//! the output shares the input's buffer), `Cast`, and the integer ops that only the generic
//! evaluator runs (`Shape`, `Size`, `Constant`, `ConstantOfShape`, `Range`).

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::exec::cpu::{InRef, Io};
use crate::exec::{ExecError, RtData, RtTensor};

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    if domain != Domain::Onnx {
        return None;
    }
    match op {
        // The ops the cost model counts as views (one list for both).
        _ if crate::analysis::VIEW_OPS.contains(&op) => Lowering::integers(lower_view),
        "Cast" => Lowering::integers(lower_cast),
        "Shape" | "Size" | "Constant" | "ConstantOfShape" | "Range" => {
            Lowering::floats(|_| Ok(Lowered::generic()))
        }
        _ => None,
    }
}

fn lower_view(cx: &Cx) -> Result<Lowered, ExecError> {
    Ok(Lowered::new(if cx.is_float(0) {
        Kernel::View
    } else {
        Kernel::Generic
    }))
}

fn lower_cast(cx: &Cx) -> Result<Lowered, ExecError> {
    let from_float = cx.is_float(0);
    let to_float = cx.graph.values[cx.node.outputs[0]].fact.dtype.is_float();
    Ok(Lowered::new(if !from_float && !to_float {
        Kernel::Generic
    } else {
        Kernel::Cast { to_float }
    }))
}

/// A view's data is already in place at run time; only plan-time evaluation of a constant
/// (which has its own output buffer) copies it.
pub(crate) fn run_view(io: &mut Io) -> Result<(), String> {
    if let Ok(data) = io.x(0) {
        if !io.outs.is_empty()
            && io.outs[0].len() == data.len()
            && io.outs[0].as_ptr() != data.as_ptr()
        {
            io.outs[0].copy_from_slice(data);
        }
    }
    Ok(())
}

pub(crate) fn run_cast(to_float: bool, io: &mut Io) -> Result<(), String> {
    match (io.input(0)?, to_float) {
        (InRef::F32(v), true) => io.outs[0].copy_from_slice(v),
        (InRef::I64(v), true) => crate::kernels::elementwise::i64_to_f32(v, io.outs[0]),
        (InRef::F32(v), false) => io.dynamic_out.push(RtTensor {
            shape: vec![v.len()],
            data: RtData::I64(v.iter().map(|&f| f as i64).collect()),
        }),
        (InRef::I64(v), false) => io.dynamic_out.push(RtTensor {
            shape: vec![v.len()],
            data: RtData::I64(v.to_vec()),
        }),
    }
    Ok(())
}
