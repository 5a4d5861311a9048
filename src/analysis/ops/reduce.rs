//! Reductions and row-wise ops: ReduceMean/Sum/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare
//! (axes as attribute before opset 18 — 13 for ReduceSum — and as input after), ArgMax/ArgMin,
//! TopK (k as attribute in opset 1, as input from 10), Softmax/LogSoftmax/Hardmax.
//!
//! Reduce: one FLOP per input element (+1 per output for Mean's division; SumSquare/L2 one more
//! multiply per input element; L2 one sqrt and LogSum(Exp) one log per output; LogSumExp one exp
//! per input). ArgMax/ArgMin: one compare per input element. TopK: log2(k)+1 compares per input
//! element (a heap of size k). Softmax: per element max, subtract, exp, sum, divide = 4 FLOPs and
//! 1 exp; LogSoftmax: 3 FLOPs + 1 exp per element and 1 log per row; Hardmax: 1 compare.

use super::fold::tensor_from_f64;
use super::{normalize_axis, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

struct Reduce;
struct ArgReduce;
struct TopK;
struct Softmax;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => Some(&Reduce),
        "ArgMax" | "ArgMin" => Some(&ArgReduce),
        "TopK" => Some(&TopK),
        "Softmax" | "LogSoftmax" | "Hardmax" => Some(&Softmax),
        _ => None,
    }
}

/// Axes to reduce, normalised and sorted. Empty means "all" unless `noop_with_empty_axes`.
fn reduce_axes(ctx: &InferCtx, rank: usize) -> OpResult<Option<Vec<usize>>> {
    let from_input = ctx.const_ints(1)?;
    let raw = from_input.or_else(|| ctx.attrs().ints("axes").map(<[i64]>::to_vec));
    let axes = match raw {
        Some(axes) if !axes.is_empty() => axes,
        _ => {
            if ctx.attrs().int_or("noop_with_empty_axes", 0) != 0 {
                return Ok(None);
            }
            (0..rank as i64).collect()
        }
    };
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<OpResult<_>>()?;
    axes.sort_unstable();
    axes.dedup();
    Ok(Some(axes))
}

fn reduced_shape(shape: &[Dim], axes: &[usize], keepdims: bool) -> Vec<Dim> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(axis, d)| {
            if axes.contains(&axis) {
                keepdims.then_some(Dim::Known(1))
            } else {
                Some(d.clone())
            }
        })
        .collect()
}

impl OpDef for Reduce {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let keepdims = ctx.attrs().int_or("keepdims", 1) != 0;
        let Some(axes) = reduce_axes(ctx, shape.len())? else {
            return Ok(vec![x.clone()]);
        };
        let out_shape = reduced_shape(shape, &axes, keepdims);
        // Fold small constant reductions (ReduceProd over a Shape slice is common).
        if let (Some(konst), Some(dims)) = (&x.konst, x.concrete_shape()) {
            if let Some(values) = konst.to_f64_vec() {
                let kind = ctx.node.op_type;
                let out_dims: Vec<u64> = out_shape.iter().filter_map(Dim::known).collect();
                let out_count: u64 = out_dims.iter().product();
                let strides = super::fold::strides(&dims);
                let mut acc: Vec<Vec<f64>> = vec![Vec::new(); out_count as usize];
                let kept: Vec<usize> = (0..dims.len()).filter(|a| !axes.contains(a)).collect();
                let kept_dims: Vec<u64> = kept.iter().map(|&a| dims[a]).collect();
                let kept_strides = super::fold::strides(&kept_dims);
                for (linear, &v) in values.iter().enumerate() {
                    let mut out_index = 0u64;
                    for (k, &axis) in kept.iter().enumerate() {
                        let coord = (linear as u64 / strides[axis]) % dims[axis];
                        out_index += coord * kept_strides[k];
                    }
                    acc[out_index as usize].push(v);
                }
                let reduce = |vals: &Vec<f64>| -> Option<f64> {
                    Some(match kind {
                        "ReduceSum" => vals.iter().sum(),
                        "ReduceProd" => vals.iter().product(),
                        "ReduceMax" => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        "ReduceMin" => vals.iter().copied().fold(f64::INFINITY, f64::min),
                        "ReduceMean" => vals.iter().sum::<f64>() / vals.len().max(1) as f64,
                        _ => return None,
                    })
                };
                if let Some(out) = acc.iter().map(reduce).collect::<Option<Vec<f64>>>() {
                    let out_dims_full: Vec<u64> =
                        out_shape.iter().map(|d| d.known().unwrap_or(1)).collect();
                    return Ok(vec![TensorFact::constant(tensor_from_f64(
                        x.dtype,
                        out_dims_full,
                        out,
                    ))]);
                }
            }
        }
        Ok(vec![TensorFact::new(x.dtype, out_shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let inputs: u64 = ctx.input_dims(0)?.iter().product();
        let outputs = ctx.output_elements(0)?;
        let (flops, transcendental) = match ctx.node.op_type {
            "ReduceMean" => (inputs + outputs, 0),
            "ReduceSumSquare" => (2 * inputs, 0),
            "ReduceL2" => (2 * inputs, outputs),
            "ReduceLogSum" => (inputs, outputs),
            "ReduceLogSumExp" => (inputs, inputs + outputs),
            _ => (inputs, 0),
        };
        Ok(OpCost {
            flops,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for ArgReduce {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let shape = ctx.input_shape(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", 0), shape.len())?;
        let keepdims = ctx.attrs().int_or("keepdims", 1) != 0;
        Ok(vec![TensorFact::new(
            DType::I64,
            reduced_shape(shape, &[axis], keepdims),
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let inputs: u64 = ctx.input_dims(0)?.iter().product();
        Ok(OpCost {
            flops: inputs,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for TopK {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), shape.len())?;
        let k = match ctx.const_ints(1) {
            Ok(Some(k)) => {
                if k.len() != 1 || k[0] < 0 {
                    return Err(super::invalid(format!(
                        "k must be one non-negative integer, got {k:?}"
                    )));
                }
                Some(Dim::Known(k[0] as u64))
            }
            Ok(None) => ctx.attrs().int("k").map(|k| Dim::Known(k.max(0) as u64)),
            Err(_) => Some(Dim::Sym(format!("{}_k", ctx.node.name))),
        }
        .ok_or("no `k` given")?;
        if let (Some(k), Some(len)) = (k.known(), shape[axis].known()) {
            if k > len {
                return Err(super::invalid(format!(
                    "k = {k} but axis {axis} has only {len} elements"
                )));
            }
        }
        let mut out = shape.to_vec();
        out[axis] = k;
        Ok(vec![
            TensorFact::new(x.dtype, out.clone()),
            TensorFact::new(DType::I64, out),
        ])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), x.len())?;
        let k = ctx.output_dims(0)?[axis].max(1);
        let inputs: u64 = x.iter().product();
        let compares_per_element = 64 - k.leading_zeros() as u64 + 1;
        Ok(OpCost {
            flops: inputs * compares_per_element,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for Softmax {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorFact {
            dtype: x.dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        // Opset < 13 flattens from `axis` (default 1); 13+ uses one axis (default -1).
        let default_axis = if ctx.node.opset >= 13 { -1 } else { 1 };
        let axis = normalize_axis(ctx.attrs().int_or("axis", default_axis), x.len())?;
        let rows = elements / x[axis..].iter().product::<u64>().max(1);
        let (flops, transcendental) = match ctx.node.op_type {
            "Softmax" => (4 * elements, elements),
            "LogSoftmax" => (3 * elements, elements + rows),
            _ => (elements, 0),
        };
        Ok(OpCost {
            flops,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}
