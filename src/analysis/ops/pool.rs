//! Pooling: MaxPool (opsets 1-22, optional Indices output), AveragePool, LpPool,
//! GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
//!
//! Windowed pools: one FLOP (compare or add) per window tap per output element; AveragePool and
//! LpPool add one division per output element (LpPool also 1 pow per tap and 1 root per output).
//! Global pools: one FLOP per input element (+1 division per output for the average).
//! Bytes: input read once, output written once.

use super::spatial::forward_window;
use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

struct WindowPool;
struct GlobalPool;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "MaxPool" | "AveragePool" | "LpPool" => Some(&WindowPool),
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => Some(&GlobalPool),
        _ => None,
    }
}

impl OpDef for WindowPool {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        if x.len() < 3 {
            return Err(format!("pooling needs rank >= 3, got {}", x.len()));
        }
        let kernel: Vec<u64> = ctx
            .attrs()
            .ints("kernel_shape")
            .ok_or("missing `kernel_shape` attribute")?
            .iter()
            .map(|&k| k.max(1) as u64)
            .collect();
        let spatial: Vec<u64> = x[2..]
            .iter()
            .map(|d| {
                d.known()
                    .ok_or_else(|| format!("spatial dim `{d}` is not bound"))
            })
            .collect::<OpResult<_>>()?;
        let ceil_mode = ctx.attrs().int_or("ceil_mode", 0) != 0;
        let window = forward_window(ctx.attrs(), &spatial, &kernel, ceil_mode)?;
        let mut shape = x[..2].to_vec();
        shape.extend(window.output.iter().map(|&d| Dim::Known(d)));
        let mut outputs = vec![TensorFact::new(ctx.input(0)?.dtype, shape.clone())];
        if ctx.output_count > 1 {
            outputs.push(TensorFact::new(DType::I64, shape));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let kernel: u64 = ctx
            .attrs()
            .ints("kernel_shape")
            .unwrap_or(&[])
            .iter()
            .map(|&k| k.max(1) as u64)
            .product();
        let outputs = ctx.output_elements(0)?;
        let (extra, transcendental) = match ctx.node.op_type {
            "AveragePool" => (outputs, 0),
            "LpPool" => (outputs, outputs * (kernel + 1)),
            _ => (0, 0),
        };
        Ok(OpCost {
            flops: outputs * kernel + extra,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for GlobalPool {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        if x.len() < 3 {
            return Err(format!("global pooling needs rank >= 3, got {}", x.len()));
        }
        let mut shape = x[..2].to_vec();
        shape.extend(std::iter::repeat_n(Dim::Known(1), x.len() - 2));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let inputs: u64 = ctx.input_dims(0)?.iter().product();
        let outputs = ctx.output_elements(0)?;
        let division = if ctx.node.op_type == "GlobalMaxPool" {
            0
        } else {
            outputs
        };
        let transcendental = if ctx.node.op_type == "GlobalLpPool" {
            inputs + outputs
        } else {
            0
        };
        Ok(OpCost {
            flops: inputs + division,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}
