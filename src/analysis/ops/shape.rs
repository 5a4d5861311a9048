//! Shape-computing and view ops: Shape (opset 15 start/end), Size, Constant, ConstantOfShape,
//! Range, Reshape (allowzero), Flatten, Squeeze/Unsqueeze (axes as attribute before 13, input
//! from 13), Identity, Dropout (inference), Cast/CastLike, BitCast (26), and the ops whose
//! output size depends on the data: NonZero, Compress, Unique.
//!
//! These ops evaluate on constant inputs, which is how Shape → Gather → Concat → Reshape chains
//! fold into known shapes. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) cost
//! nothing: no data moves; BitCast, which reinterprets the same bytes, is a view too. Cast reads and writes every element (1 FLOP each for the convert);
//! Range and ConstantOfShape write their output; NonZero reads its input once (one compare per
//! element); Compress reads its input and condition and writes what it keeps; Unique reads its
//! input and writes its outputs, with n·⌈log2 n⌉ comparisons for the sort. Their data-dependent
//! dims are symbols unless the condition is a constant (Compress) or a run on given values
//! supplied the shapes (`analyze -i NAME=FILE.npy`).

use super::fold::{reshape, tensor_from_f64};
use super::{normalize_axis, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::graph::Attr;
use crate::analysis::tensor::{DType, Dim, Tensor, TensorData, TensorFact};

struct ShapeOp;
struct Size;
struct Constant;
struct ConstantOfShape;
struct Range;
struct Reshape;
struct Flatten;
struct Squeeze;
struct Unsqueeze;
struct Passthrough;
struct Cast;
struct BitCast;
struct NonZero;
struct Compress;
struct Unique;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "Shape" => &ShapeOp,
        "Size" => &Size,
        "Constant" => &Constant,
        "ConstantOfShape" => &ConstantOfShape,
        "Range" => &Range,
        "Reshape" => &Reshape,
        "Flatten" => &Flatten,
        "Squeeze" => &Squeeze,
        "Unsqueeze" => &Unsqueeze,
        "Identity" | "Dropout" => &Passthrough,
        "Cast" | "CastLike" => &Cast,
        "BitCast" => &BitCast,
        "NonZero" => &NonZero,
        "Compress" => &Compress,
        "Unique" => &Unique,
        _ => return None,
    })
}

/// Writes-only cost (the op produces its output from nothing but small parameters).
fn write_only(ctx: &CostCtx) -> OpResult<OpCost> {
    let mut cost = OpCost::default();
    for fact in &ctx.outputs {
        cost.bytes.act_written += ctx.bytes_of(fact)?;
    }
    Ok(cost)
}

impl OpDef for ShapeOp {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let shape = ctx.input_shape(0)?;
        let rank = shape.len() as i64;
        let clamp =
            |v: i64| -> usize { (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize };
        let start = clamp(ctx.attrs().int_or("start", 0));
        let end = clamp(ctx.attrs().int_or("end", rank));
        let dims = &shape[start..end.max(start)];
        let values: Option<Vec<i64>> = dims.iter().map(|d| d.known().map(|v| v as i64)).collect();
        Ok(vec![match values {
            Some(values) => TensorFact::constant(Tensor::from_i64(vec![dims.len() as u64], values)),
            None => TensorFact::known(DType::I64, &[dims.len() as u64]),
        }])
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Size {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        Ok(vec![match ctx.input(0)?.element_count() {
            Some(count) => TensorFact::constant(Tensor::scalar_i64(count as i64)),
            None => TensorFact::known(DType::I64, &[]),
        }])
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Constant {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let attrs = ctx.attrs();
        let tensor = if let Some(t) = attrs.tensor("value") {
            (**t).clone()
        } else if let Some(Attr::Float(v)) = attrs.get("value_float") {
            tensor_from_f64(DType::F32, vec![], vec![*v as f64])
        } else if let Some(v) = attrs.floats("value_floats") {
            tensor_from_f64(
                DType::F32,
                vec![v.len() as u64],
                v.iter().map(|&x| x as f64).collect(),
            )
        } else if let Some(Attr::Int(v)) = attrs.get("value_int") {
            Tensor::scalar_i64(*v)
        } else if let Some(v) = attrs.ints("value_ints") {
            Tensor::from_i64(vec![v.len() as u64], v.to_vec())
        } else if let Some(Attr::String(_)) = attrs.get("value_string") {
            Tensor {
                dtype: DType::String,
                shape: vec![],
                data: TensorData::Strings(1),
            }
        } else if let Some(Attr::Strings(v)) = attrs.get("value_strings") {
            Tensor {
                dtype: DType::String,
                shape: vec![v.len() as u64],
                data: TensorData::Strings(v.len()),
            }
        } else {
            return Err("Constant without a supported value attribute".into());
        };
        Ok(vec![TensorFact::constant(tensor)])
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for ConstantOfShape {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let (dtype, value) = match ctx.attrs().tensor("value") {
            Some(t) => (
                t.dtype,
                t.to_f64_vec()
                    .and_then(|v| v.first().copied())
                    .unwrap_or(0.0),
            ),
            None => (DType::F32, 0.0),
        };
        match ctx.const_ints(0) {
            Ok(Some(dims)) => {
                if dims.iter().any(|&d| d < 0) {
                    return Err(format!("negative dim in shape {dims:?}"));
                }
                let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
                Ok(vec![TensorFact::constant(Tensor {
                    dtype,
                    shape,
                    data: TensorData::Splat(value),
                })])
            }
            _ => {
                // Shape computed at run time: rank is the length of the shape vector.
                let rank = ctx
                    .input_shape(0)?
                    .first()
                    .and_then(Dim::known)
                    .ok_or("rank of the shape input is unknown")?;
                let shape = (0..rank)
                    .map(|i| Dim::Sym(format!("{}_d{i}", ctx.node.name)))
                    .collect();
                Ok(vec![TensorFact::new(dtype, shape)])
            }
        }
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        write_only(ctx)
    }
}

impl OpDef for Range {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let dtype = ctx.input(0)?.dtype;
        let scalar = |i: usize| -> Option<f64> {
            ctx.opt_input(i)?
                .konst
                .as_ref()?
                .to_f64_vec()?
                .first()
                .copied()
        };
        match (scalar(0), scalar(1), scalar(2)) {
            (Some(start), Some(limit), Some(delta)) => {
                if delta == 0.0 {
                    return Err("Range delta is zero".into());
                }
                let count = ((limit - start) / delta).ceil().max(0.0) as u64;
                if count > crate::analysis::tensor::MAX_MATERIALISED_ELEMENTS {
                    return Ok(vec![TensorFact::known(dtype, &[count])]);
                }
                let values = (0..count).map(|i| start + i as f64 * delta).collect();
                Ok(vec![TensorFact::constant(tensor_from_f64(
                    dtype,
                    vec![count],
                    values,
                ))])
            }
            _ => Ok(vec![TensorFact::new(
                dtype,
                vec![Dim::Sym(format!("{}_len", ctx.node.name))],
            )]),
        }
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = write_only(ctx)?;
        cost.flops = ctx.output_elements(0)?;
        Ok(cost)
    }
}

/// Applies a Reshape target to an input shape (0 = copy unless `allowzero`, -1 = infer).
pub fn reshape_target(input: &[Dim], target: &[i64], allow_zero: bool) -> OpResult<Vec<Dim>> {
    let mut out: Vec<Dim> = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (axis, &t) in target.iter().enumerate() {
        match t {
            -1 => {
                if infer_at.replace(axis).is_some() {
                    return Err(super::invalid(format!(
                        "more than one -1 in reshape target {target:?}"
                    )));
                }
                out.push(Dim::Known(1));
            }
            0 if !allow_zero => out.push(input.get(axis).cloned().ok_or_else(|| {
                format!("target {target:?} copies dim {axis} past the input rank")
            })?),
            t if t >= 0 => out.push(Dim::Known(t as u64)),
            t => return Err(super::invalid(format!("invalid dim {t} in reshape target"))),
        }
    }
    let input_known: Option<Vec<u64>> = input.iter().map(Dim::known).collect();
    if let Some(axis) = infer_at {
        let Some(input_known) = input_known else {
            // Symbolic input: the inferred dim is the one symbol left over, if exactly one.
            let syms: Vec<&Dim> = input.iter().filter(|d| d.known().is_none()).collect();
            out[axis] = match syms.as_slice() {
                [single] => (*single).clone(),
                _ => return Err("cannot infer -1 from a symbolic input shape".into()),
            };
            return Ok(out);
        };
        let total = super::checked_volume(&input_known).ok_or("input volume overflows")?;
        let rest_dims: Vec<u64> = out
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != axis)
            .map(|(_, d)| d.known().unwrap_or(1))
            .collect();
        let rest = super::checked_volume(&rest_dims).ok_or("reshape target volume overflows")?;
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(super::invalid(format!(
                "cannot reshape {} elements into {target:?}",
                total
            )));
        }
        out[axis] = Dim::Known(total / rest);
    } else if let Some(input_known) = input_known {
        let total = super::checked_volume(&input_known).ok_or("input volume overflows")?;
        let target_known: Option<Vec<u64>> = out.iter().map(Dim::known).collect();
        let target_total = match target_known {
            Some(dims) => {
                Some(super::checked_volume(&dims).ok_or("reshape target volume overflows")?)
            }
            None => None,
        };
        if target_total.is_some_and(|t| t != total) {
            return Err(super::invalid(format!(
                "cannot reshape {total} elements into {}",
                super::super::tensor::shape_to_string(&out)
            )));
        }
    }
    Ok(out)
}

fn view_of(ctx: &InferCtx, shape: Vec<Dim>) -> OpResult<Vec<TensorFact>> {
    let x = ctx.input(0)?;
    if let (Some(konst), Some(dims)) = (
        &x.konst,
        shape.iter().map(Dim::known).collect::<Option<Vec<u64>>>(),
    ) {
        return Ok(vec![TensorFact::constant(reshape(konst, dims))]);
    }
    Ok(vec![TensorFact::new(x.dtype, shape)])
}

impl OpDef for Reshape {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let input = ctx.input_shape(0)?;
        let target = match ctx.const_ints(1)? {
            Some(target) => target,
            None => ctx
                .attrs()
                .ints("shape")
                .map(<[i64]>::to_vec)
                .ok_or("no target shape")?,
        };
        let allow_zero = ctx.attrs().int_or("allowzero", 0) != 0;
        let shape = reshape_target(input, &target, allow_zero)?;
        view_of(ctx, shape)
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Flatten {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let input = ctx.input_shape(0)?;
        let rank = input.len();
        let axis = ctx.attrs().int_or("axis", 1);
        let axis = if axis < 0 { axis + rank as i64 } else { axis };
        if axis < 0 || axis > rank as i64 {
            return Err(super::invalid(format!(
                "axis {axis} out of range for rank {rank}"
            )));
        }
        let product = |dims: &[Dim]| -> Dim {
            dims.iter()
                .map(Dim::known)
                .product::<Option<u64>>()
                .map(Dim::Known)
                .unwrap_or_else(|| Dim::Sym(format!("{}_flat", ctx.node.name)))
        };
        let axis = axis as usize;
        view_of(ctx, vec![product(&input[..axis]), product(&input[axis..])])
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

fn axes_input_or_attr(ctx: &InferCtx) -> OpResult<Option<Vec<i64>>> {
    if ctx.node.opset >= 13 && ctx.opt_input(1).is_some() {
        return ctx.const_ints(1);
    }
    Ok(ctx.attrs().ints("axes").map(<[i64]>::to_vec))
}

impl OpDef for Squeeze {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let input = ctx.input_shape(0)?;
        let shape = match axes_input_or_attr(ctx)? {
            Some(axes) if !axes.is_empty() => {
                let axes: Vec<usize> = axes
                    .iter()
                    .map(|&a| normalize_axis(a, input.len()))
                    .collect::<OpResult<_>>()?;
                for &axis in &axes {
                    if let Dim::Known(d) = input[axis] {
                        if d != 1 {
                            return Err(format!("cannot squeeze axis {axis} of size {d}"));
                        }
                    }
                }
                input
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, d)| d.clone())
                    .collect()
            }
            _ => input
                .iter()
                .filter(|d| **d != Dim::Known(1))
                .cloned()
                .collect(),
        };
        view_of(ctx, shape)
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Unsqueeze {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let input = ctx.input_shape(0)?;
        let axes = axes_input_or_attr(ctx)?.ok_or("no axes")?;
        let rank = input.len() + axes.len();
        let mut axes: Vec<usize> = axes
            .iter()
            .map(|&a| normalize_axis(a, rank))
            .collect::<OpResult<_>>()?;
        axes.sort_unstable();
        let mut rest = input.iter();
        let shape = (0..rank)
            .map(|i| {
                if axes.contains(&i) {
                    Ok(Dim::Known(1))
                } else {
                    rest.next().cloned().ok_or("too many axes".to_string())
                }
            })
            .collect::<OpResult<Vec<_>>>()?;
        view_of(ctx, shape)
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Passthrough {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let mut outputs = vec![x.clone()];
        if ctx.output_count > 1 {
            // Dropout's mask.
            outputs.push(TensorFact {
                dtype: DType::Bool,
                shape: x.shape.clone(),
                konst: None,
            });
        }
        Ok(outputs)
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for BitCast {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let code = ctx.attrs().int("to").ok_or("missing `to`")?;
        let to = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx)
            .ok_or_else(|| super::invalid(format!("BitCast to unknown type {code}")))?;
        if matches!(x.dtype, DType::String | DType::Other)
            || matches!(to, DType::String | DType::Other)
        {
            return Err(format!(
                "BitCast from {:?} to {to:?} is not modelled",
                x.dtype
            ));
        }
        if x.dtype.size_bytes() != to.size_bytes() {
            return Err(super::invalid(format!(
                "BitCast from {:?} to {to:?} changes the element width",
                x.dtype
            )));
        }
        Ok(vec![TensorFact {
            dtype: to,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, _ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost::view())
    }
}

impl OpDef for Cast {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let to = if ctx.node.op_type == "CastLike" {
            ctx.input(1)?.dtype
        } else {
            let code = ctx.attrs().int("to").ok_or("missing `to` attribute")?;
            DType::from_onnx(code as i32).ok_or_else(|| format!("unknown target type {code}"))?
        };
        if let (Some(konst), Some(dims)) = (&x.konst, x.concrete_shape()) {
            if let Some(values) = konst.to_f64_vec() {
                let converted = values
                    .iter()
                    .map(|&v| if to.is_float() { v } else { v.trunc() })
                    .collect();
                return Ok(vec![TensorFact::constant(tensor_from_f64(
                    to, dims, converted,
                ))]);
            }
            if let crate::analysis::tensor::TensorData::Splat(v) = konst.data {
                // The same conversion as the materialised branch: integers truncate.
                let v = if to.is_float() { v } else { v.trunc() };
                return Ok(vec![TensorFact::constant(Tensor {
                    dtype: to,
                    shape: dims,
                    data: TensorData::Splat(v),
                })]);
            }
        }
        Ok(vec![TensorFact {
            dtype: to,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for NonZero {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let rank = ctx.input_shape(0)?.len() as u64;
        Ok(vec![TensorFact::new(
            DType::I64,
            vec![
                Dim::Known(rank),
                Dim::Sym(format!("{}_count", ctx.node.name)),
            ],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        // The output size depends on the data: only the read is costed, and the op says so
        // through its symbolic output (its consumers are reported as not costed).
        let mut cost = OpCost::default();
        cost.bytes.act_read = ctx.bytes_of(ctx.input(0)?)?;
        cost.flops = ctx.input(0)?.element_count().unwrap_or(0);
        Ok(cost)
    }
}

impl OpDef for Compress {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let condition = ctx.input(1)?;
        if condition.rank().is_some_and(|r| r != 1) {
            return Err(super::invalid("Compress: the condition is 1-D"));
        }
        let kept = match condition.konst.as_ref().and_then(|t| t.to_i64_vec()) {
            Some(flags) => Dim::Known(flags.iter().filter(|&&f| f != 0).count() as u64),
            None => Dim::Sym(format!("{}_kept", ctx.node.name)),
        };
        let out = match ctx.attrs().int("axis") {
            None => vec![kept],
            Some(axis) => {
                let axis = normalize_axis(axis, shape.len())?;
                let mut out = shape.to_vec();
                out[axis] = kept;
                out
            }
        };
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for Unique {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let unique = Dim::Sym(format!("{}_unique", ctx.node.name));
        let (values, scanned) = match ctx.attrs().int("axis") {
            None => {
                let total = match shape.iter().map(Dim::known).collect::<Option<Vec<u64>>>() {
                    Some(dims) => Dim::Known(dims.iter().product()),
                    None => Dim::Sym(format!("{}_size", ctx.node.name)),
                };
                (vec![unique.clone()], total)
            }
            Some(axis) => {
                let axis = normalize_axis(axis, shape.len())?;
                let mut out = shape.to_vec();
                out[axis] = unique.clone();
                (out, shape[axis].clone())
            }
        };
        Ok(vec![
            TensorFact::new(x.dtype, values),
            TensorFact::new(DType::I64, vec![unique.clone()]),
            TensorFact::new(DType::I64, vec![scanned]),
            TensorFact::new(DType::I64, vec![unique]),
        ])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let n = ctx.input(0)?.element_count().unwrap_or(0);
        Ok(OpCost {
            flops: n * (64 - n.max(1).leading_zeros() as u64),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::known_dims;
    use super::*;

    fn k(dims: &[u64]) -> Vec<Dim> {
        known_dims(dims)
    }

    #[test]
    fn reshape_handles_zero_and_minus_one() {
        assert_eq!(
            reshape_target(&k(&[2, 3, 4]), &[0, -1], false).unwrap(),
            k(&[2, 12])
        );
        assert!(reshape_target(&k(&[2, 3, 4]), &[5, -1], false).is_err());
        assert_eq!(
            reshape_target(&k(&[2, 3, 4]), &[0, 0, 2, 2], false).unwrap(),
            k(&[2, 3, 2, 2])
        );
    }
}

#[cfg(test)]
mod cost_tests {
    //! Shape-computing and view ops: constant evaluation, views that cost nothing, and the
    //! write-only or read-once cost of the others.

    use super::super::tests::kit::{
        act, dims, f32_dims, f32s, ints, ints_shaped, scalar, sym, traffic, values, Op,
    };
    use crate::analysis::ops::OpCost;
    use crate::analysis::tensor::{DType, Dim, Tensor, TensorData, TensorFact};
    use crate::device::Precision;

    #[test]
    fn shape_and_size_are_constants_when_known() {
        let x = f32s(&[1, 3, 224, 224]);
        let (out, cost) = Op::new("Shape").run(&[&x]);
        assert_eq!(values(&out[0]), [1.0, 3.0, 224.0, 224.0]);
        assert_eq!(cost, OpCost::view());
        // Opset 15 slice of the shape: [start, end) = [1, −1) → [3, 224].
        let op = Op::new("Shape").opset(15).int("start", 1).int("end", -1);
        assert_eq!(values(&op.infer(&[&x])[0]), [3.0, 224.0]);
        // A symbolic dim: a run-time vector of 2 values.
        let xs = f32_dims(vec![sym("N"), Dim::Known(3)]);
        let out = Op::new("Shape").infer(&[&xs]);
        assert!(out[0].konst.is_none());
        assert_eq!(dims(&out[0]), [2]);
        // Size = 3·224·224 = 150,528.
        let (out, cost) = Op::new("Size").run(&[&x]);
        assert_eq!(values(&out[0]), [150_528.0]);
        assert!(cost.is_view);
    }

    #[test]
    fn constant_attributes() {
        let (out, cost) = Op::new("Constant").ints("value_ints", &[2, -1]).run(&[]);
        assert_eq!(out[0].dtype, DType::I64);
        assert_eq!(values(&out[0]), [2.0, -1.0]);
        assert_eq!(cost, OpCost::view());
        let out = Op::new("Constant").float("value_float", 0.5).infer(&[]);
        assert_eq!((out[0].dtype, values(&out[0])), (DType::F32, vec![0.5]));
        let t = Tensor::from_f32(vec![2], vec![1.0, 2.0]);
        let out = Op::new("Constant").tensor("value", t).infer(&[]);
        assert_eq!(values(&out[0]), [1.0, 2.0]);
        Op::new("Constant").fails(&[]);
    }

    #[test]
    fn constant_of_shape_writes_its_output() {
        let value = Tensor::from_f32(vec![1], vec![1.5]);
        let op = Op::new("ConstantOfShape").tensor("value", value);
        let (out, cost) = op.run(&[&ints(&[2, 3])]);
        // A splat constant of 6 elements: never expanded.
        let konst = out[0].konst.as_ref().unwrap();
        assert!(matches!(konst.data, TensorData::Splat(v) if v == 1.5));
        assert_eq!(dims(&out[0]), [2, 3]);
        // Write-only: 6·4 bytes; the shape input is not counted.
        assert_eq!(cost.bytes, traffic(0, 0, 24));
        assert_eq!(cost.flops, 0);
        // Default value: f32 zeros.
        let out = Op::new("ConstantOfShape").infer(&[&ints(&[4])]);
        assert_eq!(out[0].dtype, DType::F32);
        Op::new("ConstantOfShape").fails(&[&ints(&[2, -3])]);
        // A run-time shape vector of 3 values: rank 3, symbolic dims.
        let out = Op::new("ConstantOfShape").infer(&[&act(DType::I64, &[3])]);
        assert_eq!(out[0].rank(), Some(3));
        assert!(out[0].concrete_shape().is_none());
    }

    #[test]
    fn range_counts_and_writes() {
        let (start, limit, delta) = (
            scalar(DType::I64, 0.0),
            scalar(DType::I64, 10.0),
            scalar(DType::I64, 3.0),
        );
        let (out, cost) = Op::new("Range").run(&[&start, &limit, &delta]);
        // ⌈(10 − 0) / 3⌉ = 4 values: 0, 3, 6, 9.
        assert_eq!(values(&out[0]), [0.0, 3.0, 6.0, 9.0]);
        // One FLOP per value; 4 i64 written.
        assert_eq!(cost.flops, 4);
        assert_eq!(cost.bytes, traffic(0, 0, 32));
        let zero = scalar(DType::I64, 0.0);
        Op::new("Range").fails(&[&start, &limit, &zero]);
        // Run-time bounds: a symbolic length.
        let out = Op::new("Range").infer(&[&start, &act(DType::I64, &[]), &delta]);
        assert!(out[0].concrete_shape().is_none());
    }

    #[test]
    fn reshape_is_a_view() {
        let x = f32s(&[2, 3, 4]);
        let (out, cost) = Op::new("Reshape").run(&[&x, &ints(&[0, -1])]);
        // 0 copies dim 0; −1 takes the rest: 24 / 2 = 12.
        assert_eq!(dims(&out[0]), [2, 12]);
        // A view: no FLOPs, no bytes, marked so.
        assert_eq!(cost, OpCost::view());
        assert_eq!(cost.bytes.total(), 0);
        // allowzero: 0 is a real zero-sized dim (and 24 elements do not fit in it).
        Op::new("Reshape")
            .int("allowzero", 1)
            .fails(&[&x, &ints(&[0, -1])]);
        Op::new("Reshape").fails(&[&x, &ints(&[5, -1])]);
        Op::new("Reshape").fails(&[&x, &ints(&[-1, -1])]);
        Op::new("Reshape").fails(&[&x, &ints(&[2, 3, 5])]);
        // A constant reshaped stays a constant with the same values.
        let c = ints_shaped(&[2, 2], &[1, 2, 3, 4]);
        let out = Op::new("Reshape").infer(&[&c, &ints(&[4])]);
        assert_eq!(values(&out[0]), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(dims(&out[0]), [4]);
    }

    #[test]
    fn flatten_squeeze_unsqueeze_are_views() {
        let x = f32s(&[2, 3, 4, 5]);
        let (out, cost) = Op::new("Flatten").int("axis", 2).run(&[&x]);
        assert_eq!(dims(&out[0]), [6, 20]);
        assert!(cost.is_view);
        let out = Op::new("Flatten").int("axis", 0).infer(&[&x]);
        assert_eq!(dims(&out[0]), [1, 120]);
        // Squeeze (opset 13: axes as an input).
        let y = f32s(&[2, 1, 3, 1]);
        let (out, cost) = Op::new("Squeeze").run(&[&y, &ints(&[1])]);
        assert_eq!(dims(&out[0]), [2, 3, 1]);
        assert_eq!(cost, OpCost::view());
        // No axes: every 1 goes.
        assert_eq!(dims(&Op::new("Squeeze").infer(&[&y])[0]), [2, 3]);
        // Opset 11: axes as an attribute.
        let op = Op::new("Squeeze").opset(11).ints("axes", &[-1]);
        assert_eq!(dims(&op.infer(&[&y])[0]), [2, 1, 3]);
        // Squeezing an axis of 3 is an error.
        let err = Op::new("Squeeze").fails(&[&y, &ints(&[2])]);
        assert!(err.contains("size 3"), "{err}");
        // Unsqueeze axes [0, 3] of [2, 3] → [1, 2, 3, 1].
        let (out, cost) = Op::new("Unsqueeze").run(&[&f32s(&[2, 3]), &ints(&[0, 3])]);
        assert_eq!(dims(&out[0]), [1, 2, 3, 1]);
        assert!(cost.is_view);
        Op::new("Unsqueeze").fails(&[&f32s(&[2, 3])]);
    }

    #[test]
    fn identity_and_dropout_pass_through() {
        let c = ints(&[7, 8]);
        let (out, cost) = Op::new("Identity").run(&[&c]);
        // A constant stays a constant.
        assert_eq!(values(&out[0]), [7.0, 8.0]);
        assert_eq!(cost, OpCost::view());
        // Dropout with its mask output: a boolean of the input's shape.
        let x = f32s(&[4, 5]);
        let (out, cost) = Op::new("Dropout").outputs(2).run(&[&x]);
        assert_eq!(dims(&out[0]), [4, 5]);
        assert_eq!((out[1].dtype, dims(&out[1])), (DType::Bool, vec![4, 5]));
        assert!(cost.is_view);
    }

    #[test]
    fn cast_reads_and_writes_every_element() {
        let x = f32s(&[2, 3]);
        let (out, cost) = Op::new("Cast").int("to", 7).run(&[&x]);
        assert_eq!(out[0].dtype, DType::I64);
        // 6 converts; 6 f32 read (24 bytes), 6 i64 written (48 bytes).
        assert_eq!(cost.flops, 6);
        assert_eq!(cost.bytes, traffic(0, 24, 48));
        // At bf16 the float side halves.
        let (_, half) = Op::new("Cast")
            .int("to", 7)
            .precision(Precision::Bf16)
            .run(&[&x]);
        assert_eq!(half.bytes, traffic(0, 12, 48));
        // Constants fold, float → int truncating toward zero.
        let c = super::super::tests::kit::floats(&[2], &[1.7, -1.7]);
        let out = Op::new("Cast").int("to", 7).infer(&[&c]);
        assert_eq!(values(&out[0]), [1.0, -1.0]);
        // CastLike takes the type of its second input.
        let out = Op::new("CastLike").infer(&[&x, &act(DType::F16, &[1])]);
        assert_eq!(out[0].dtype, DType::F16);
        Op::new("Cast").fails(&[&x]);
        Op::new("Cast").int("to", 99).fails(&[&x]);
    }

    #[test]
    fn cast_of_a_large_splat_truncates() {
        // 4096·4096·64 elements: past MAX_MATERIALISED_ELEMENTS, so the Splat branch runs.
        let big = TensorFact::constant(Tensor {
            dtype: DType::F32,
            shape: vec![4096, 4096, 64],
            data: TensorData::Splat(2.7),
        });
        let out = Op::new("Cast").int("to", 7).infer(&[&big]);
        let konst = out[0].konst.as_ref().unwrap();
        assert_eq!(konst.dtype, DType::I64);
        // Cast to int64 truncates toward zero: 2.
        assert!(
            matches!(konst.data, TensorData::Splat(v) if v == 2.0),
            "{:?}",
            konst.data
        );
    }

    #[test]
    fn non_zero_reads_its_input_once() {
        let x = f32s(&[2, 5]);
        // The output length depends on the data: only the read (and one test per element) is
        // costed, and the symbolic output tells the consumers they cannot be.
        let (out, cost) = Op::new("NonZero").run(&[&x]);
        assert_eq!(out[0].dtype, DType::I64);
        assert_eq!(out[0].shape.as_deref().unwrap()[0], Dim::Known(2));
        assert!(out[0].concrete_shape().is_none());
        assert_eq!(cost.bytes, traffic(0, 40, 0));
        assert_eq!(cost.flops, 10);
    }

    #[test]
    fn compress_counts_a_constant_condition() {
        let x = f32s(&[3, 2]);
        let keep = TensorFact::constant(Tensor {
            dtype: DType::Bool,
            shape: vec![3],
            data: TensorData::I64(vec![0, 1, 1]),
        });
        let (out, cost) = Op::new("Compress").int("axis", 0).run(&[&x, &keep]);
        assert_eq!(dims(&out[0]), [2, 2]);
        // Input read, condition read as a weight (3 bools), kept rows written.
        assert_eq!(cost.bytes, traffic(3, 24, 16));
        // Without an axis the input is flattened; a run-time condition gives a symbol.
        let out = Op::new("Compress").infer(&[&x, &act(DType::Bool, &[6])]);
        assert_eq!(out[0].rank(), Some(1));
        assert!(out[0].concrete_shape().is_none());
    }

    #[test]
    fn unique_has_four_outputs_sized_by_the_data() {
        let x = f32s(&[2, 3]);
        let out = Op::new("Unique").outputs(4).infer(&[&x]);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].rank(), Some(1));
        assert_eq!(out[1].dtype, DType::I64);
        // The inverse indices cover every scanned element: 6 without an axis, 2 along axis 0.
        assert_eq!(dims(&out[2]), [6]);
        let out = Op::new("Unique").int("axis", 0).outputs(4).infer(&[&x]);
        assert_eq!(out[0].shape.as_deref().unwrap()[1], Dim::Known(3));
        assert_eq!(dims(&out[2]), [2]);
    }
}
