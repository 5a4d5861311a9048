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
        // A heap of k keeps log2(k) levels (rounded up) plus the compare with the root.
        let compares_per_element = u64::from(k.next_power_of_two().trailing_zeros()) + 1;
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
        if let Some(rank) = x.rank() {
            // Opsets before 13 default to axis 1; an axis outside the rank is a broken model.
            let default = if ctx.node.opset >= 13 { -1 } else { 1 };
            normalize_axis(ctx.attrs().int_or("axis", default), rank)?;
        }
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
        // Rows normalised independently: opset 13+ normalises one axis, older opsets the
        // flattened tail from `axis` on.
        let normalised: u64 = if ctx.node.opset >= 13 {
            x[axis]
        } else {
            x[axis..].iter().product()
        };
        let rows = elements / normalised.max(1);
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

#[cfg(test)]
mod tests {
    //! Hand-computed reductions, TopK and softmax (f32, 4 bytes an element).

    use super::super::tests::kit::{
        act, dims, f32s, floats, ints, ints_shaped, traffic, values, Op,
    };
    use crate::analysis::tensor::{DType, Dim};

    #[test]
    fn reduce_mean_with_and_without_keepdims() {
        let x = f32s(&[2, 3, 4]);
        // Opset 17: axes as an attribute.
        let (out, cost) = Op::new("ReduceMean").ints("axes", &[1]).run(&[&x]);
        assert_eq!(dims(&out[0]), [2, 1, 4]);
        // 24 adds + 8 divisions.
        assert_eq!(cost.flops, 24 + 8);
        assert_eq!(cost.bytes, traffic(0, 96, 32));
        let op = Op::new("ReduceMean").ints("axes", &[1]).int("keepdims", 0);
        assert_eq!(dims(&op.infer(&[&x])[0]), [2, 4]);
    }

    #[test]
    fn reduce_axes_from_an_input() {
        let x = f32s(&[2, 3, 4]);
        // ReduceSum takes its axes as an input from opset 13.
        let (out, cost) = Op::new("ReduceSum").run(&[&x, &ints(&[-1])]);
        assert_eq!(dims(&out[0]), [2, 3, 1]);
        assert_eq!(cost.flops, 24);
        // The axes vector is an 8-byte constant.
        assert_eq!(cost.bytes, traffic(8, 96, 24));
        // No axes: every axis; noop_with_empty_axes: the identity.
        assert_eq!(dims(&Op::new("ReduceSum").infer(&[&x])[0]), [1, 1, 1]);
        let noop = Op::new("ReduceSum").int("noop_with_empty_axes", 1);
        assert_eq!(dims(&noop.infer(&[&x])[0]), [2, 3, 4]);
        // Axes computed at run time: the output shape cannot be derived.
        let err = Op::new("ReduceSum").error(&[&x, &act(DType::I64, &[1])]);
        assert!(err.contains("run time"), "{err}");
        Op::new("ReduceMax").ints("axes", &[3]).fails(&[&x]);
    }

    #[test]
    fn reduce_variants() {
        let x = f32s(&[2, 3, 4]);
        // Over the last axis: 24 inputs, 6 outputs.
        for (op, flops, tr) in [
            ("ReduceSum", 24, 0),
            ("ReduceMax", 24, 0),
            ("ReduceProd", 24, 0),
            ("ReduceL1", 24, 0),
            ("ReduceSumSquare", 48, 0),
            ("ReduceL2", 48, 6),
            ("ReduceLogSum", 24, 6),
            ("ReduceLogSumExp", 24, 24 + 6),
        ] {
            let (out, cost) = Op::new(op).opset(13).ints("axes", &[2]).run(&[&x]);
            assert_eq!(dims(&out[0]), [2, 3, 1], "{op}");
            assert_eq!((cost.flops, cost.transcendental), (flops, tr), "{op}");
        }
    }

    #[test]
    fn constant_reductions_fold() {
        // The volume of a shape vector: ReduceProd([2, 3, 4]) = 24.
        let (out, _) = Op::new("ReduceProd")
            .int("keepdims", 0)
            .run(&[&ints(&[2, 3, 4])]);
        assert_eq!(dims(&out[0]), Vec::<u64>::new());
        assert_eq!(values(&out[0]), [24.0]);
        let m = ints_shaped(&[2, 2], &[1, 2, 3, 4]);
        // Column sums [4, 6]; row maxima [[2], [4]].
        let (out, _) = Op::new("ReduceSum")
            .int("keepdims", 0)
            .run(&[&m, &ints(&[0])]);
        assert_eq!(values(&out[0]), [4.0, 6.0]);
        let (out, _) = Op::new("ReduceMax").ints("axes", &[1]).run(&[&m]);
        assert_eq!(dims(&out[0]), [2, 1]);
        assert_eq!(values(&out[0]), [2.0, 4.0]);
        // Row means of a float matrix: [1.5, 3.5].
        let f = floats(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let (out, _) = Op::new("ReduceMean").ints("axes", &[1]).run(&[&f]);
        assert_eq!(values(&out[0]), [1.5, 3.5]);
        // No evaluator for ReduceL2: a plain fact.
        let (out, _) = Op::new("ReduceL2").ints("axes", &[1]).run(&[&f]);
        assert!(out[0].konst.is_none());
    }

    #[test]
    fn arg_reductions() {
        let x = f32s(&[2, 3, 4]);
        let (out, cost) = Op::new("ArgMax")
            .int("axis", 1)
            .int("keepdims", 0)
            .run(&[&x]);
        assert_eq!(out[0].dtype, DType::I64);
        assert_eq!(dims(&out[0]), [2, 4]);
        // One compare per input; 8 i64 indices of 8 bytes written.
        assert_eq!(cost.flops, 24);
        assert_eq!(cost.bytes, traffic(0, 96, 64));
        assert_eq!(
            dims(&Op::new("ArgMin").int("axis", 1).infer(&[&x])[0]),
            [2, 1, 4]
        );
    }

    #[test]
    fn top_k() {
        let x = f32s(&[2, 100]);
        let (out, cost) = Op::new("TopK").outputs(2).run(&[&x, &ints(&[5])]);
        assert_eq!(dims(&out[0]), [2, 5]);
        assert_eq!((out[0].dtype, out[1].dtype), (DType::F32, DType::I64));
        // ⌈log2 5⌉ + 1 = 4 compares per input element: 200·4 = 800.
        assert_eq!(cost.flops, 800);
        // X 800 bytes; k an 8-byte constant; values 10·4 + indices 10·8 written.
        assert_eq!(cost.bytes, traffic(8, 800, 120));
        // Opset 1: k as an attribute.
        let out = Op::new("TopK").opset(1).int("k", 3).outputs(2).infer(&[&x]);
        assert_eq!(dims(&out[0]), [2, 3]);
        // k computed at run time: a symbolic extent.
        let out = Op::new("TopK")
            .outputs(2)
            .infer(&[&x, &act(DType::I64, &[1])]);
        assert!(matches!(out[0].shape.as_deref().unwrap()[1], Dim::Sym(_)));
    }

    #[test]
    fn top_k_compares_for_powers_of_two() {
        let x = f32s(&[2, 100]);
        // k = 8: log2(8) + 1 = 4 compares per element; k = 1: 1.
        let (_, cost) = Op::new("TopK").outputs(2).run(&[&x, &ints(&[8])]);
        assert_eq!(cost.flops, 800);
        let (_, cost) = Op::new("TopK").outputs(2).run(&[&x, &ints(&[1])]);
        assert_eq!(cost.flops, 200);
    }

    #[test]
    fn top_k_inconsistent_k_is_invalid() {
        let x = f32s(&[2, 3]);
        let reason = Op::new("TopK").outputs(2).invalid(&[&x, &ints(&[5])]);
        assert!(reason.contains("only 3"), "{reason}");
        Op::new("TopK").outputs(2).invalid(&[&x, &ints(&[-1])]);
        Op::new("TopK").outputs(2).invalid(&[&x, &ints(&[1, 2])]);
    }

    #[test]
    fn softmax_family() {
        let x = f32s(&[2, 10]);
        // Softmax: 4 FLOPs + 1 exp per element.
        let (out, cost) = Op::new("Softmax").run(&[&x]);
        assert_eq!(dims(&out[0]), [2, 10]);
        assert_eq!((cost.flops, cost.transcendental), (80, 20));
        assert_eq!(cost.bytes, traffic(0, 80, 80));
        // LogSoftmax: 3 FLOPs + 1 exp per element, 1 log per row (2 rows).
        let (_, cost) = Op::new("LogSoftmax").run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (60, 22));
        let (_, cost) = Op::new("Hardmax").run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (20, 0));
        // Opset 11 flattens from axis 1 (default): [2, 3·4] has 2 rows.
        let (_, cost) = Op::new("LogSoftmax").opset(11).run(&[&f32s(&[2, 3, 4])]);
        assert_eq!(cost.transcendental, 24 + 2);
    }

    #[test]
    fn log_softmax_rows_on_an_inner_axis() {
        // axis 1 of [2, 3, 4]: 2·4 = 8 independent softmaxes, so 8 logs.
        let (_, cost) = Op::new("LogSoftmax")
            .int("axis", 1)
            .run(&[&f32s(&[2, 3, 4])]);
        assert_eq!(cost.transcendental, 24 + 8);
    }
}
