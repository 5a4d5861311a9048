//! Normalisations: BatchNormalization (opsets 1-15, inference form), LayerNormalization (17+),
//! InstanceNormalization, GroupNormalization, MeanVarianceNormalization (statistics over `axes`,
//! costed as InstanceNormalization), LpNormalization and LRN (opset 1+).
//!
//! BatchNormalization: y = (x − mean)/√(var + ε)·γ + β, which every runtime evaluates as one
//! per-channel scale and shift: 2 FLOPs per element, plus 4 FLOPs and 1 sqrt per channel to form
//! them. Layer/Instance/GroupNormalization: per element 8 FLOPs (mean: 1 add; variance: sub,
//! square, add; normalise: sub, mul; affine: mul, add), per normalised group 2 divisions and
//! 1 reciprocal sqrt. LpNormalization: 3 FLOPs per element and 1 sqrt per row.
//! RMSNormalization (23+): y = x / √(mean(x²) + ε) · γ over the dims from `axis` on: 5 FLOPs
//! per element (square, add, mul, scale), per row 1 division and 1 reciprocal sqrt.
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
struct RmsNorm;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "BatchNormalization" => Some(&BatchNorm),
        "LayerNormalization" => Some(&LayerNorm),
        "InstanceNormalization" | "GroupNormalization" | "MeanVarianceNormalization" => {
            Some(&InstanceNorm)
        }
        "LpNormalization" => Some(&LpNorm),
        // onnxruntime's SimplifiedLayerNormalization (its exporters' RMSNorm) is the same op.
        "RMSNormalization" | "SimplifiedLayerNormalization" => Some(&RmsNorm),
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

impl OpDef for RmsNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let y = same_as_input(ctx)?;
        let shape = ctx.input_shape(0)?;
        normalize_axis(ctx.attrs().int_or("axis", -1), shape.len())?;
        Ok(vec![y])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), x.len())?;
        let elements: u64 = x.iter().product();
        let rows: u64 = x[..axis].iter().product();
        Ok(OpCost {
            flops: 5 * elements + rows,
            transcendental: rows,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
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

#[cfg(test)]
mod tests {
    //! Hand-computed normalisation cases (f32, 4 bytes an element).

    use super::super::tests::kit::{dims, f32s, traffic, w32, Op};
    use crate::analysis::tensor::DType;

    #[test]
    fn batch_norm_is_a_scale_and_shift() {
        let x = f32s(&[1, 64, 56, 56]);
        let p = w32(&[64]);
        let (out, cost) = Op::new("BatchNormalization").run(&[&x, &p, &p, &p, &p]);
        assert_eq!(dims(&out[0]), [1, 64, 56, 56]);
        // 2 FLOPs per element (200,704 elements) + 4 per channel to form the scale and shift.
        assert_eq!(cost.flops, 2 * 200_704 + 4 * 64);
        // One sqrt per channel.
        assert_eq!(cost.transcendental, 64);
        // X and Y 802,816 bytes; four [64] parameters 4·256 = 1,024 bytes of weights.
        assert_eq!(cost.bytes, traffic(1_024, 802_816, 802_816));
    }

    #[test]
    fn batch_norm_training_outputs_are_per_channel() {
        let (x, p) = (f32s(&[2, 8, 4, 4]), w32(&[8]));
        let out = Op::new("BatchNormalization")
            .outputs(3)
            .infer(&[&x, &p, &p, &p, &p]);
        assert_eq!(out.len(), 3);
        assert_eq!(dims(&out[1]), [8]);
        assert_eq!(dims(&out[2]), [8]);
    }

    #[test]
    fn batch_norm_parameter_mismatch_is_invalid() {
        let x = f32s(&[1, 64, 8, 8]);
        let (good, bad) = (w32(&[64]), w32(&[32]));
        for slot in 1..5 {
            let mut inputs = vec![&x, &good, &good, &good, &good];
            inputs[slot] = &bad;
            let reason = Op::new("BatchNormalization").invalid(&inputs);
            assert!(reason.contains("32 element(s)"), "{reason}");
        }
        // No channel axis.
        Op::new("BatchNormalization").invalid(&[&f32s(&[64]), &good, &good, &good, &good]);
    }

    #[test]
    fn layer_norm_over_the_last_axis() {
        let (x, p) = (f32s(&[2, 128, 768]), w32(&[768]));
        let (out, cost) = Op::new("LayerNormalization")
            .int("axis", -1)
            .outputs(3)
            .run(&[&x, &p, &p]);
        assert_eq!(dims(&out[0]), [2, 128, 768]);
        // Mean and inverse std-dev outputs keep the rows: [2, 128, 1], f32.
        assert_eq!(dims(&out[1]), [2, 128, 1]);
        assert_eq!(out[2].dtype, DType::F32);
        // elements = 196,608, rows = 256: 8·196,608 + 2·256 FLOPs, one rsqrt per row.
        assert_eq!(cost.flops, 1_573_376);
        assert_eq!(cost.transcendental, 256);
    }

    #[test]
    fn layer_norm_over_several_axes() {
        // axis 1 of [2, 128, 768]: rows of 128·768 = 98,304, 2 rows.
        let x = f32s(&[2, 128, 768]);
        let p = w32(&[128, 768]);
        let (_, cost) = Op::new("LayerNormalization")
            .int("axis", 1)
            .run(&[&x, &p, &p]);
        assert_eq!(cost.flops, 8 * 196_608 + 2 * 2);
        assert_eq!(cost.transcendental, 2);
        // A scale of one row of the last axis only does not match the normalised row.
        let reason = Op::new("LayerNormalization")
            .int("axis", 1)
            .invalid(&[&x, &w32(&[768]), &p]);
        assert!(reason.contains("98304"), "{reason}");
        // Axis out of range fails.
        Op::new("LayerNormalization")
            .int("axis", 3)
            .fails(&[&x, &w32(&[768])]);
    }

    #[test]
    fn instance_and_group_norm() {
        let x = f32s(&[2, 16, 8, 8]);
        // Instance: one group per (n, c) = 32 groups; 2,048 elements.
        let (_, cost) = Op::new("InstanceNormalization").run(&[&x, &w32(&[16]), &w32(&[16])]);
        assert_eq!(cost.flops, 8 * 2_048 + 2 * 32);
        assert_eq!(cost.transcendental, 32);
        Op::new("InstanceNormalization").invalid(&[&x, &w32(&[8]), &w32(&[16])]);
        // Group: N·num_groups = 2·4 = 8 groups.
        let (out, cost) =
            Op::new("GroupNormalization")
                .int("num_groups", 4)
                .run(&[&x, &w32(&[16]), &w32(&[16])]);
        assert_eq!(dims(&out[0]), [2, 16, 8, 8]);
        assert_eq!(cost.flops, 8 * 2_048 + 2 * 8);
        assert_eq!(cost.transcendental, 8);
    }

    #[test]
    fn lp_norm_and_lrn() {
        // LpNormalization over the last axis of [4, 10]: 3 FLOPs per element, 1 sqrt per row.
        let (_, cost) = Op::new("LpNormalization").run(&[&f32s(&[4, 10])]);
        assert_eq!((cost.flops, cost.transcendental), (120, 4));
        // LRN size 5 on 128 elements: (2·5 + 3) FLOPs and 1 pow per element.
        let x = f32s(&[1, 8, 4, 4]);
        let (_, cost) = Op::new("LRN").int("size", 5).run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (128 * 13, 128));
        assert_eq!(cost.bytes, traffic(0, 512, 512));
        // LRN without its required `size`: inference passes, costing fails.
        let op = Op::new("LRN");
        let out = op.infer(&[&x]);
        assert!(op.try_cost_opt(&[Some(&x)], &out).is_err());
    }
}
