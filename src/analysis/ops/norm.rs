//! Normalisations: BatchNormalization (opsets 1-15, inference form), LayerNormalization (17+),
//! InstanceNormalization, GroupNormalization, LpNormalization and LRN (opset 1+).
//!
//! BatchNormalization: y = (x − mean)/√(var + ε)·γ + β, which every runtime evaluates as one
//! per-channel scale and shift: 2 FLOPs per element, plus 4 FLOPs and 1 sqrt per channel to form
//! them. Layer/Instance/GroupNormalization: per element 8 FLOPs (mean: 1 add; variance: sub,
//! square, add; normalise: sub, mul; affine: mul, add), per normalised group 2 divisions and
//! 1 reciprocal sqrt. LpNormalization: 3 FLOPs per element and 1 sqrt per row.
//! LRN: y = x / (bias + α/size · Σ x²)^β over `size` neighbouring channels: 2·size + 3 FLOPs and
//! 1 pow per element.
//! Bytes: input and parameters read once, output(s) written once.

use super::{normalize_axis, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct BatchNorm;
struct LayerNorm;
/// Instance and Group normalisation: statistics over the spatial dims of (a group of) channels.
struct InstanceNorm;
struct LpNorm;
struct Lrn;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "BatchNormalization" => Some(&BatchNorm),
        "LayerNormalization" => Some(&LayerNorm),
        "InstanceNormalization" | "GroupNormalization" => Some(&InstanceNorm),
        "LpNormalization" => Some(&LpNorm),
        "LRN" => Some(&Lrn),
        _ => None,
    }
}

fn same_as_input(ctx: &InferCtx) -> OpResult<TensorFact> {
    let x = ctx.input(0)?;
    Ok(TensorFact {
        dtype: x.dtype,
        shape: x.shape.clone(),
        konst: None,
    })
}

/// Checks that each parameter input in `slots` holds exactly `expected` elements (when both are
/// known): the kernels index parameters by channel or by position in the normalised row.
fn check_parameters(
    ctx: &InferCtx,
    slots: &[(usize, &str)],
    expected: Option<u64>,
    what: &str,
) -> OpResult<()> {
    let Some(expected) = expected else {
        return Ok(());
    };
    for &(slot, name) in slots {
        let Some(shape) = ctx.opt_input(slot).and_then(|f| f.shape.as_deref()) else {
            continue;
        };
        let dims: Option<Vec<u64>> = shape.iter().map(Dim::known).collect();
        if let Some(count) = dims.and_then(|d| super::checked_volume(&d)) {
            if count != expected {
                return Err(super::invalid(format!(
                    "{name} has {count} element(s) but {what} is {expected}"
                )));
            }
        }
    }
    Ok(())
}

impl OpDef for BatchNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let y = same_as_input(ctx)?;
        if ctx.input_shape(0)?.len() < 2 {
            return Err(super::invalid("the input needs a channel axis (rank ≥ 2)"));
        }
        let channels = ctx.input_shape(0)?.get(1).cloned().unwrap_or(Dim::Known(1));
        check_parameters(
            ctx,
            &[(1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")],
            channels.known(),
            "the channel count",
        )?;
        let mut outputs = vec![y.clone()];
        // Training-mode outputs (running/saved mean and variance) are per channel.
        for _ in 1..ctx.output_count {
            outputs.push(TensorFact::new(y.dtype, vec![channels.clone()]));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        let channels = x.get(1).copied().unwrap_or(1);
        Ok(OpCost {
            flops: 2 * elements + 4 * channels,
            macs: 0,
            transcendental: channels,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for LayerNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let y = same_as_input(ctx)?;
        let shape = ctx.input_shape(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), shape.len())?;
        let row: Option<Vec<u64>> = shape[axis.min(shape.len())..]
            .iter()
            .map(Dim::known)
            .collect();
        check_parameters(
            ctx,
            &[(1, "scale"), (2, "bias")],
            row.and_then(|r| super::checked_volume(&r)),
            "the normalised row length",
        )?;
        let mut stats_shape = shape[..axis.min(shape.len())].to_vec();
        stats_shape.extend(std::iter::repeat_n(Dim::Known(1), shape.len() - axis));
        let mut outputs = vec![y];
        for _ in 1..ctx.output_count {
            outputs.push(TensorFact::new(
                crate::analysis::tensor::DType::F32,
                stats_shape.clone(),
            ));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), x.len())?;
        let elements: u64 = x.iter().product();
        let rows: u64 = x[..axis].iter().product();
        Ok(OpCost {
            flops: 8 * elements + 2 * rows,
            macs: 0,
            transcendental: rows,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for InstanceNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let shape = ctx.input_shape(0)?;
        if shape.len() < 2 {
            return Err(super::invalid("the input needs a channel axis (rank ≥ 2)"));
        }
        if ctx.node.op_type == "InstanceNormalization" {
            check_parameters(
                ctx,
                &[(1, "scale"), (2, "bias")],
                shape[1].known(),
                "the channel count",
            )?;
        }
        Ok(vec![same_as_input(ctx)?])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        let groups = if ctx.node.op_type == "GroupNormalization" {
            x[0] * ctx.attrs().int_or("num_groups", 1).max(1) as u64
        } else {
            x[..2.min(x.len())].iter().product()
        };
        Ok(OpCost {
            flops: 8 * elements + 2 * groups,
            macs: 0,
            transcendental: groups,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for LpNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        Ok(vec![same_as_input(ctx)?])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), x.len())?;
        let elements: u64 = x.iter().product();
        let rows = elements / x[axis].max(1);
        Ok(OpCost {
            flops: 3 * elements,
            macs: 0,
            transcendental: rows,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for Lrn {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        Ok(vec![same_as_input(ctx)?])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements: u64 = ctx.input_dims(0)?.iter().product();
        let size = ctx
            .attrs()
            .int("size")
            .ok_or("missing `size` attribute")?
            .max(1) as u64;
        Ok(OpCost {
            flops: elements * (2 * size + 3),
            macs: 0,
            transcendental: elements,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}
