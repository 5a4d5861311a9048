//! Recurrent-state ops of linear-attention and state-space decoders (opsets 24-27): the ops an
//! exporter writes for Gated DeltaNet, Mamba-style and RWKV-style layers and for KV caches kept
//! in place.
//!
//! - LinearAttention (27): a recurrent state S of [dk × dv] per batch and KV head, updated per
//!   token by one of four rules (linear, gated, delta, gated_delta) and read by every query head
//!   of its group. Output [B, T, Hq·dv], present_state [B, Hkv, dk, dv].
//! - CausalConvWithState (27): depthwise causal 1-D convolution over [past_state ‖ input] with an
//!   optional bias and SiLU. Output the input's shape, present_state [B, C, k−1].
//! - TensorScatter (24): writes `update` into a copy of the cache at each batch row's write index
//!   along `axis` (linear or circular). Output the cache's shape.
//!
//! Cost, per batch row and token (H = KV heads, G = query heads per KV head, dk × dv the state):
//! - LinearAttention: `linear` adds k⊗v (dk·dv MACs); `gated` also scales S (dk·dv multiplies)
//!   and takes one exp per decay element; `delta` also reads Sᵀk (dk·dv MACs) and forms
//!   β·(v − Sᵀk) (2·dv FLOPs); the readout q·S is dk·dv MACs per query head and dv multiplies
//!   for the scale.
//! - CausalConvWithState: k MACs per output element, one add for the bias, and SiLU as one exp
//!   and 4 FLOPs (negate, add, divide for the sigmoid, then the product).
//! - TensorScatter: the functional form copies the whole cache: every input read once, the
//!   output written once (a runtime that updates in place moves only the update).
//!
//! Bytes follow the module conventions: inputs read once, outputs written once; the state is
//! read and written once per call, not per token (it stays in cache across tokens).

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct LinearAttention;
struct CausalConvWithState;
struct TensorScatter;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "LinearAttention" => &LinearAttention,
        "CausalConvWithState" => &CausalConvWithState,
        "TensorScatter" => &TensorScatter,
        _ => return None,
    })
}

/// The update rules LinearAttention knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateRule {
    Linear,
    Gated,
    Delta,
    GatedDelta,
}

impl UpdateRule {
    pub(crate) fn parse(name: Option<&str>) -> OpResult<UpdateRule> {
        Ok(match name.unwrap_or("gated_delta") {
            "linear" => UpdateRule::Linear,
            "gated" => UpdateRule::Gated,
            "delta" => UpdateRule::Delta,
            "gated_delta" => UpdateRule::GatedDelta,
            other => {
                return Err(invalid(format!(
                    "LinearAttention: unknown update_rule `{other}`"
                )))
            }
        })
    }

    pub(crate) fn gated(self) -> bool {
        matches!(self, UpdateRule::Gated | UpdateRule::GatedDelta)
    }

    pub(crate) fn delta(self) -> bool {
        matches!(self, UpdateRule::Delta | UpdateRule::GatedDelta)
    }
}

/// Head counts of a LinearAttention node: (query heads, KV heads), checked.
pub(crate) fn linear_attention_heads(
    attrs: &crate::analysis::graph::Attributes,
) -> OpResult<(u64, u64)> {
    let heads = |name: &str| -> OpResult<u64> {
        attrs
            .int(name)
            .filter(|&h| h > 0)
            .map(|h| h as u64)
            .ok_or_else(|| invalid(format!("LinearAttention needs a positive `{name}`")))
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if q_heads % kv_heads != 0 {
        return Err(invalid(format!(
            "LinearAttention: {q_heads} query heads do not group over {kv_heads} KV heads"
        )));
    }
    Ok((q_heads, kv_heads))
}

fn split(width: &Dim, heads: u64, what: &str) -> OpResult<Dim> {
    match width {
        Dim::Known(w) if w % heads == 0 => Ok(Dim::Known(w / heads)),
        Dim::Known(w) => Err(invalid(format!(
            "LinearAttention: a {what} width of {w} does not split into {heads} heads"
        ))),
        Dim::Sym(s) => Ok(Dim::Sym(format!("{s}/{heads}"))),
    }
}

impl OpDef for LinearAttention {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let (q, k, v) = (
            ctx.input_shape(0)?,
            ctx.input_shape(1)?,
            ctx.input_shape(2)?,
        );
        if q.len() != 3 || k.len() != 3 || v.len() != 3 {
            return Err(invalid(
                "LinearAttention: query, key and value are 3-D [B, T, heads·head size]",
            ));
        }
        UpdateRule::parse(ctx.attrs().string("update_rule"))?;
        let (q_heads, kv_heads) = linear_attention_heads(ctx.attrs())?;
        let key_head = split(&q[2], q_heads, "query")?;
        let value_head = split(&v[2], kv_heads, "value")?;
        let output = TensorFact::new(
            ctx.input(0)?.dtype,
            vec![
                q[0].clone(),
                q[1].clone(),
                match &value_head {
                    Dim::Known(d) => Dim::Known(d * q_heads),
                    Dim::Sym(s) => Dim::Sym(format!("{s}*{q_heads}")),
                },
            ],
        );
        let state_dtype = ctx.opt_input(3).map_or(ctx.input(0)?.dtype, |f| f.dtype);
        let state = TensorFact::new(
            state_dtype,
            vec![q[0].clone(), Dim::Known(kv_heads), key_head, value_head],
        );
        Ok(vec![output, state])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let rule = UpdateRule::parse(ctx.attrs().string("update_rule"))?;
        let (q_heads, kv_heads) = linear_attention_heads(ctx.attrs())?;
        let q = ctx.input_dims(0)?;
        let v = ctx.input_dims(2)?;
        let (batch, tokens) = (q[0], q[1]);
        let (dk, dv) = (q[2] / q_heads, v[2] / kv_heads);
        let state = dk * dv;
        let steps = batch * tokens * kv_heads;
        let mut macs = steps * state; // k ⊗ v
        let mut flops = 0;
        let mut transcendental = 0;
        if rule.gated() {
            flops += steps * state;
            let decay_per_step = match ctx.inputs.get(4).copied().flatten() {
                Some(decay) => decay
                    .concrete_shape()
                    .map_or(dk, |d| d.last().copied().unwrap_or(kv_heads) / kv_heads),
                None => dk,
            };
            transcendental += steps * decay_per_step.max(1);
        }
        if rule.delta() {
            macs += steps * state; // Sᵀk
            flops += steps * 2 * dv; // β·(v − Sᵀk)
        }
        let readout_macs = batch * tokens * q_heads * state;
        macs += readout_macs;
        flops += 2 * macs + batch * tokens * q_heads * dv;
        Ok(OpCost {
            flops,
            macs,
            transcendental,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for CausalConvWithState {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let weight = ctx.input_shape(1)?;
        if shape.len() != 3 || weight.len() != 3 {
            return Err(invalid(
                "CausalConvWithState: input [B, C, L] and weight [C, 1, k]",
            ));
        }
        if let (Some(c), Some(wc)) = (shape[1].known(), weight[0].known()) {
            if c != wc {
                return Err(invalid(format!(
                    "CausalConvWithState: {c} channels but a weight for {wc}"
                )));
            }
        }
        match ctx.attrs().string("activation").unwrap_or("none") {
            "none" | "silu" | "swish" => {}
            other => {
                return Err(invalid(format!(
                    "CausalConvWithState: unknown activation `{other}`"
                )))
            }
        }
        let carry = match &weight[2] {
            Dim::Known(0) => return Err(invalid("CausalConvWithState: a kernel of size 0")),
            Dim::Known(k) => Dim::Known(k - 1),
            Dim::Sym(s) => Dim::Sym(format!("{s}-1")),
        };
        Ok(vec![
            TensorFact::new(x.dtype, shape.to_vec()),
            TensorFact::new(x.dtype, vec![shape[0].clone(), shape[1].clone(), carry]),
        ])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let kernel = ctx.input_dims(1)?[2];
        let outputs = ctx.output_elements(0)?;
        let macs = outputs * kernel;
        let mut flops = 2 * macs;
        if ctx.inputs.get(2).copied().flatten().is_some() {
            flops += outputs;
        }
        let mut transcendental = 0;
        if matches!(ctx.attrs().string("activation"), Some("silu" | "swish")) {
            flops += 4 * outputs;
            transcendental = outputs;
        }
        Ok(OpCost {
            flops,
            macs,
            transcendental,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for TensorScatter {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let cache = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let update = ctx.input_shape(1)?;
        if shape.len() != update.len() || shape.len() < 2 {
            return Err(invalid(
                "TensorScatter: the cache and the update have the same rank (2 or more)",
            ));
        }
        let axis = super::normalize_axis(ctx.attrs().int_or("axis", -2), shape.len())?;
        if axis == 0 {
            return Err(invalid("TensorScatter: axis 0 is the batch"));
        }
        match ctx.attrs().string("mode").unwrap_or("linear") {
            "linear" | "circular" => {}
            other => return Err(invalid(format!("TensorScatter: unknown mode `{other}`"))),
        }
        Ok(vec![TensorFact::new(cache.dtype, shape.to_vec())])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::*;
    use crate::analysis::tensor::DType;

    #[test]
    fn linear_attention_shapes_and_work() {
        // B=2, T=3, 4 query heads over 2 KV heads, dk=8, dv=6.
        let q = f32s(&[2, 3, 32]);
        let k = f32s(&[2, 3, 16]);
        let v = f32s(&[2, 3, 12]);
        let op = Op::new("LinearAttention")
            .int("q_num_heads", 4)
            .int("kv_num_heads", 2)
            .string("update_rule", "linear")
            .outputs(2);
        let (out, cost) = op.run(&[&q, &k, &v]);
        assert_eq!(dims(&out[0]), [2, 3, 24]);
        assert_eq!(dims(&out[1]), [2, 2, 8, 6]);
        // k⊗v per (b, t, kv head) and q·S per (b, t, q head): 48 MACs each.
        let updates = 2 * 3 * 2 * 48;
        let readouts = 2 * 3 * 4 * 48;
        assert_eq!(cost.macs, updates + readouts);
        assert_eq!(cost.flops, 2 * (updates + readouts) + 2 * 3 * 4 * 6);
        assert_eq!(cost.transcendental, 0);

        // gated_delta adds the decay scale, Sᵀk and β·(v − Sᵀk); one exp per head decay.
        let decay = f32s(&[2, 3, 2]);
        let beta = f32s(&[2, 3, 2]);
        let op = Op::new("LinearAttention")
            .int("q_num_heads", 4)
            .int("kv_num_heads", 2)
            .outputs(2);
        let (_, cost) = op.run_opt(&[
            Some(&q),
            Some(&k),
            Some(&v),
            None,
            Some(&decay),
            Some(&beta),
        ]);
        assert_eq!(cost.macs, 2 * updates + readouts);
        assert_eq!(cost.transcendental, 2 * 3 * 2);
        assert_eq!(
            cost.flops,
            2 * (2 * updates + readouts) + updates + 2 * 3 * 2 * 2 * 6 + 2 * 3 * 4 * 6
        );
        // Heads that do not group, and widths that do not split, are bad models.
        Op::new("LinearAttention")
            .int("q_num_heads", 3)
            .int("kv_num_heads", 2)
            .outputs(2)
            .fails(&[&q, &k, &v]);
        Op::new("LinearAttention")
            .int("q_num_heads", 5)
            .int("kv_num_heads", 1)
            .outputs(2)
            .fails(&[&q, &k, &v]);
    }

    #[test]
    fn causal_conv_with_state_shapes_and_work() {
        let x = f32s(&[1, 4, 10]);
        let w = w32(&[4, 1, 3]);
        let b = w32(&[4]);
        let op = Op::new("CausalConvWithState")
            .string("activation", "silu")
            .outputs(2);
        let (out, cost) = op.run(&[&x, &w, &b]);
        assert_eq!(dims(&out[0]), [1, 4, 10]);
        assert_eq!(dims(&out[1]), [1, 4, 2]);
        assert_eq!(cost.macs, 40 * 3);
        assert_eq!(cost.flops, 2 * 120 + 40 + 4 * 40);
        assert_eq!(cost.transcendental, 40);
        // Channels that disagree with the weight are a bad model.
        Op::new("CausalConvWithState")
            .outputs(2)
            .fails(&[&x, &w32(&[3, 1, 3])]);
    }

    #[test]
    fn tensor_scatter_keeps_the_cache_shape() {
        let cache = act(DType::F16, &[2, 4, 16, 8]);
        let update = act(DType::F16, &[2, 4, 3, 8]);
        let (out, cost) = Op::new("TensorScatter").run(&[&cache, &update]);
        assert_eq!(out[0].dtype, DType::F16);
        assert_eq!(dims(&out[0]), [2, 4, 16, 8]);
        assert_eq!(cost.flops, 0);
        // Cache and update read, cache written, at the fp32 analysis width.
        assert_eq!(cost.bytes, traffic(0, (1024 + 192) * 4, 1024 * 4));
        Op::new("TensorScatter")
            .int("axis", 0)
            .fails(&[&cache, &update]);
    }
}
