//! onnxruntime's fused element-wise and matrix contrib ops (domain `com.microsoft`) that its
//! graph optimizer and transformer optimizer write into saved models.
//!
//! - Gelu (x·Φ(x), erf form): 4 FLOPs and 1 erf per element. BiasGelu adds its bias first (+1).
//! - FastGelu (tanh approximation, optional bias): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))):
//!   7 FLOPs (+1 with bias) and 1 tanh per element.
//! - QuickGelu x·σ(αx): 3 FLOPs and 1 exp per element.
//! - BiasAdd (x + bias + skip): 2 FLOPs per element.
//! - FusedMatMul: α·op(A)·op(B) with optional transposes of the last two dims: MACs = M·K·N per
//!   broadcast batch, FLOPs = 2·MACs (+ M·N for α ≠ 1).
//!
//! - RotaryEmbedding (the contrib form: input, position_ids, cos_cache, sin_cache): the input's
//!   shape out; 3 FLOPs per rotated element (2 · the caches' width per head).
//!
//! Bytes: every input read once at its own size, the output written once.

use super::{broadcast_shapes, invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct Activation {
    flops: u64,
    transcendental: u64,
}

struct FusedMatMul;
struct ContribRotary;

static GELU: Activation = Activation {
    flops: 4,
    transcendental: 1,
};
static BIAS_GELU: Activation = Activation {
    flops: 5,
    transcendental: 1,
};
static FAST_GELU: Activation = Activation {
    flops: 7,
    transcendental: 1,
};
static QUICK_GELU: Activation = Activation {
    flops: 3,
    transcendental: 1,
};
static BIAS_ADD: Activation = Activation {
    flops: 2,
    transcendental: 0,
};

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "Gelu" => &GELU,
        "BiasGelu" => &BIAS_GELU,
        "FastGelu" => &FAST_GELU,
        "QuickGelu" => &QUICK_GELU,
        "BiasAdd" => &BIAS_ADD,
        "FusedMatMul" => &FusedMatMul,
        "RotaryEmbedding" => &ContribRotary,
        _ => return None,
    })
}

impl OpDef for Activation {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shapes: Vec<&[Dim]> = ctx
            .inputs
            .iter()
            .flatten()
            .filter_map(|f| f.shape.as_deref())
            .collect();
        let shape = broadcast_shapes(&shapes).map_err(invalid)?;
        Ok(vec![TensorFact::new(x.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements = ctx.output_elements(0)?;
        let with_bias =
            ctx.node.op_type == "FastGelu" && ctx.inputs.get(1).copied().flatten().is_some();
        Ok(OpCost {
            flops: (self.flops + u64::from(with_bias)) * elements,
            transcendental: self.transcendental * elements,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for ContribRotary {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if !(shape.len() == 3 || shape.len() == 4) {
            return Err(invalid("RotaryEmbedding: the input must be 3-D or 4-D"));
        }
        Ok(vec![TensorFact::new(x.dtype, shape.to_vec())])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        let width = *x.last().unwrap_or(&1);
        let rotated = ctx
            .input_dims(2)
            .ok()
            .and_then(|c| c.last().copied())
            .map_or(width, |half| (2 * half).min(width));
        let heads_width = if x.len() == 4 { width } else { rotated.max(1) };
        Ok(OpCost {
            flops: 3 * elements / heads_width.max(1) * rotated.min(heads_width),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// The shapes FusedMatMul multiplies: op(A) [.., M, K] and op(B) [.., K, N].
fn operands(
    ctx_a: &[Dim],
    ctx_b: &[Dim],
    trans_a: bool,
    trans_b: bool,
) -> OpResult<(Vec<Dim>, Vec<Dim>)> {
    let transpose = |s: &[Dim], t: bool| -> Vec<Dim> {
        let mut s = s.to_vec();
        if s.len() == 1 {
            // A vector is a row of A or a column of B, as MatMul treats it.
            return s;
        }
        if t {
            let n = s.len();
            s.swap(n - 1, n - 2);
        }
        s
    };
    if ctx_a.is_empty() || ctx_b.is_empty() {
        return Err(invalid("FusedMatMul needs operands of rank 1 or more"));
    }
    Ok((transpose(ctx_a, trans_a), transpose(ctx_b, trans_b)))
}

impl OpDef for FusedMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let attrs = ctx.attrs();
        if attrs.int_or("transBatchA", 0) != 0 || attrs.int_or("transBatchB", 0) != 0 {
            return Err("FusedMatMul with transBatchA/B is not modelled".into());
        }
        let (a, b) = operands(
            ctx.input_shape(0)?,
            ctx.input_shape(1)?,
            attrs.int_or("transA", 0) != 0,
            attrs.int_or("transB", 0) != 0,
        )?;
        let (a_rows, b_cols) = (a.len() >= 2, b.len() >= 2);
        let k_a = a.last().cloned();
        let k_b = if b_cols {
            b.get(b.len() - 2).cloned()
        } else {
            b.first().cloned()
        };
        if let (Some(Dim::Known(x)), Some(Dim::Known(y))) = (&k_a, &k_b) {
            if x != y {
                return Err(invalid(format!(
                    "FusedMatMul: inner dims {x} and {y} differ"
                )));
            }
        }
        let batch_a = if a_rows { &a[..a.len() - 2] } else { &[][..] };
        let batch_b = if b_cols { &b[..b.len() - 2] } else { &[][..] };
        let mut shape = broadcast_shapes(&[batch_a, batch_b]).map_err(invalid)?;
        if a_rows {
            shape.push(a[a.len() - 2].clone());
        }
        if b_cols {
            shape.push(b[b.len() - 1].clone());
        }
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let a = ctx.input_dims(0)?;
        let k = if ctx.attrs().int_or("transA", 0) != 0 && a.len() >= 2 {
            a[a.len() - 2]
        } else {
            *a.last().unwrap_or(&1)
        };
        let outputs = ctx.output_elements(0)?;
        let macs = outputs * k;
        let scaled = (ctx.attrs().float_or("alpha", 1.0) - 1.0).abs() > f32::EPSILON;
        Ok(OpCost {
            flops: 2 * macs + if scaled { outputs } else { 0 },
            macs,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::{f32s, Op};

    #[test]
    fn fused_matmul_transposes_and_broadcasts() {
        let (a, b) = (f32s(&[2, 1, 8, 4]), f32s(&[3, 5, 8]));
        let (out, cost) = Op::contrib("FusedMatMul")
            .int("transA", 1)
            .int("transB", 1)
            .float("alpha", 0.5)
            .run(&[&a, &b]);
        // op(A) [2, 1, 4, 8] · op(B) [3, 8, 5] -> [2, 3, 4, 5], K = 8.
        assert_eq!(out[0].concrete_shape().unwrap(), vec![2, 3, 4, 5]);
        assert_eq!(cost.macs, 2 * 3 * 4 * 5 * 8);
        assert_eq!(cost.flops, 2 * cost.macs + 2 * 3 * 4 * 5);
    }

    #[test]
    fn gelu_family_costs_per_element() {
        let x = f32s(&[4, 16]);
        let bias = f32s(&[16]);
        let (out, cost) = Op::contrib("FastGelu").run(&[&x, &bias]);
        assert_eq!(out[0].concrete_shape().unwrap(), vec![4, 16]);
        assert_eq!((cost.flops, cost.transcendental), (8 * 64, 64));
        let (_, cost) = Op::contrib("QuickGelu").run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (3 * 64, 64));
    }
}
