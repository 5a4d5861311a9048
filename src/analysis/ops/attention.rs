//! Attention (opset 23+): scaled dot-product attention with grouped KV heads, an optional mask
//! (bool or additive), causal masking, a KV cache (`past_key`/`past_value` in, `present_*`
//! out) and the optional QK output; inputs as 4-D [batch, heads, sequence, head size] or 3-D
//! [batch, sequence, heads · head size] with `q_num_heads`/`kv_num_heads`.
//!
//! Cost, with Hq query heads, Sq queries, T = past + new keys, D the QK head size and Dv the
//! value head size: MACs = batch · Hq · Sq · T · (D + Dv) (the QKᵀ and PV products), FLOPs =
//! 2·MACs + 5 per score (scale, mask add, max, subtract, normalise) and 1 exp per score.
//! Bytes: every input read once, every output written once (the cache concatenation is the
//! present outputs' write).
//!
//! RotaryEmbedding (opset 23+): each rotated pair of a head (the first `rotary_embedding_dim`
//! elements, all when 0) becomes (x₁·cos − x₂·sin, x₁·sin + x₂·cos): 3 FLOPs per rotated element;
//! the output has the input's shape. Bytes: input, caches and positions read, output written.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct Attention;
struct Rotary;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "Attention" => Some(&Attention),
        "RotaryEmbedding" => Some(&Rotary),
        _ => None,
    }
}

impl OpDef for Rotary {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if !(shape.len() == 3 || shape.len() == 4) {
            return Err(invalid("RotaryEmbedding: the input must be 3-D or 4-D"));
        }
        if shape.len() == 3 && ctx.attrs().int_or("num_heads", 0) <= 0 {
            return Err(invalid(
                "RotaryEmbedding on a 3-D input needs a positive `num_heads`",
            ));
        }
        Ok(vec![TensorFact::new(x.dtype, shape.to_vec())])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        let head = if x.len() == 4 {
            x[3]
        } else {
            x[2] / ctx.attrs().int_or("num_heads", 1).max(1) as u64
        };
        let rotary = match ctx.attrs().int_or("rotary_embedding_dim", 0) {
            d if d > 0 => (d as u64).min(head),
            _ => head,
        };
        Ok(OpCost {
            flops: 3 * elements / head.max(1) * rotary,
            transcendental: 0,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// The attention geometry read off the inputs and attributes.
struct Geometry {
    batch: Dim,
    q_heads: Dim,
    kv_heads: Dim,
    q_len: Dim,
    /// Keys attended: past plus new.
    total: Dim,
    head: Dim,
    value_head: Dim,
    three_d: bool,
}

fn sum(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => Dim::Known(x + y),
        (Dim::Known(0), other) | (other, Dim::Known(0)) => other.clone(),
        _ => Dim::Sym(format!("{a}+{b}")),
    }
}

fn div(a: &Dim, by: u64, what: &str) -> OpResult<Dim> {
    match a {
        Dim::Known(x) if by > 0 && x % by == 0 => Ok(Dim::Known(x / by)),
        Dim::Known(x) => Err(invalid(format!(
            "Attention: a {what} of {x} does not split into {by} heads"
        ))),
        Dim::Sym(s) => Ok(Dim::Sym(format!("{s}/{by}"))),
    }
}

fn geometry(ctx: &InferCtx) -> OpResult<Geometry> {
    let (q, k, v) = (
        ctx.input_shape(0)?,
        ctx.input_shape(1)?,
        ctx.input_shape(2)?,
    );
    if q.len() != k.len() || q.len() != v.len() || !(q.len() == 3 || q.len() == 4) {
        return Err(invalid("Attention: Q, K and V must all be 3-D or all 4-D"));
    }
    let past = match ctx.opt_input(4).and_then(|f| f.shape.as_deref()) {
        Some(p) if p.len() == 4 => p[2].clone(),
        Some(_) => return Err(invalid("Attention: past_key must be 4-D")),
        None => Dim::Known(0),
    };
    if q.len() == 4 {
        return Ok(Geometry {
            batch: q[0].clone(),
            q_heads: q[1].clone(),
            kv_heads: k[1].clone(),
            q_len: q[2].clone(),
            total: sum(&past, &k[2]),
            head: q[3].clone(),
            value_head: v[3].clone(),
            three_d: false,
        });
    }
    let heads = |name: &str| -> OpResult<u64> {
        ctx.attrs()
            .int(name)
            .filter(|&h| h > 0)
            .map(|h| h as u64)
            .ok_or_else(|| invalid(format!("Attention on 3-D inputs needs a positive `{name}`")))
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    Ok(Geometry {
        batch: q[0].clone(),
        q_heads: Dim::Known(q_heads),
        kv_heads: Dim::Known(kv_heads),
        q_len: q[1].clone(),
        total: sum(&past, &k[1]),
        head: div(&q[2], q_heads, "query width")?,
        value_head: div(&v[2], kv_heads, "value width")?,
        three_d: true,
    })
}

impl OpDef for Attention {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let dtype = ctx.input(0)?.dtype;
        let g = geometry(ctx)?;
        if let (Dim::Known(q), Dim::Known(kv)) = (&g.q_heads, &g.kv_heads) {
            if *kv == 0 || q % kv != 0 {
                return Err(invalid(format!(
                    "Attention: {q} query heads do not group over {kv} KV heads"
                )));
            }
        }
        let y = if g.three_d {
            let width = match (&g.q_heads, &g.value_head) {
                (Dim::Known(h), Dim::Known(d)) => Dim::Known(h * d),
                (h, d) => Dim::Sym(format!("{h}*{d}")),
            };
            vec![g.batch.clone(), g.q_len.clone(), width]
        } else {
            vec![
                g.batch.clone(),
                g.q_heads.clone(),
                g.q_len.clone(),
                g.value_head.clone(),
            ]
        };
        let mut outputs = vec![TensorFact::new(dtype, y)];
        let cache = |head: &Dim| {
            TensorFact::new(
                dtype,
                vec![
                    g.batch.clone(),
                    g.kv_heads.clone(),
                    g.total.clone(),
                    head.clone(),
                ],
            )
        };
        if ctx.output_count > 1 {
            outputs.push(cache(&g.head));
        }
        if ctx.output_count > 2 {
            outputs.push(cache(&g.value_head));
        }
        if ctx.output_count > 3 {
            outputs.push(TensorFact::new(
                dtype,
                vec![
                    g.batch.clone(),
                    g.q_heads.clone(),
                    g.q_len.clone(),
                    g.total.clone(),
                ],
            ));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let q = ctx.input_dims(0)?;
        let k = ctx.input_dims(1)?;
        let v = ctx.input_dims(2)?;
        let past = match ctx.inputs.get(4).copied().flatten() {
            Some(p) => p
                .concrete_shape()
                .and_then(|s| s.get(2).copied())
                .unwrap_or(0),
            None => 0,
        };
        let (batch, q_heads, q_len, head, value_head, new_keys) = if q.len() == 4 {
            (q[0], q[1], q[2], q[3], v[3], k[2])
        } else {
            let q_heads = ctx.attrs().int_or("q_num_heads", 1).max(1) as u64;
            let kv_heads = ctx.attrs().int_or("kv_num_heads", 1).max(1) as u64;
            (q[0], q_heads, q[1], q[2] / q_heads, v[2] / kv_heads, k[1])
        };
        let total = past + new_keys;
        let scores = batch * q_heads * q_len * total;
        let macs = scores * (head + value_head);
        Ok(OpCost {
            flops: 2 * macs + 5 * scores,
            macs,
            transcendental: scores,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::{f32s, Op};

    #[test]
    fn four_d_with_grouped_heads_and_a_cache() {
        // Q [2, 8, 4, 16], K/V [2, 2, 4, 16/32], past [2, 2, 6, 16/32]: 10 keys per query.
        let (q, k, v) = (
            f32s(&[2, 8, 4, 16]),
            f32s(&[2, 2, 4, 16]),
            f32s(&[2, 2, 4, 32]),
        );
        let (pk, pv) = (f32s(&[2, 2, 6, 16]), f32s(&[2, 2, 6, 32]));
        let (out, cost) = Op::new("Attention").opset(23).outputs(3).run_opt(&[
            Some(&q),
            Some(&k),
            Some(&v),
            None,
            Some(&pk),
            Some(&pv),
        ]);
        assert_eq!(out[0].concrete_shape().unwrap(), vec![2, 8, 4, 32]);
        assert_eq!(out[1].concrete_shape().unwrap(), vec![2, 2, 10, 16]);
        assert_eq!(out[2].concrete_shape().unwrap(), vec![2, 2, 10, 32]);
        let scores = 2 * 8 * 4 * 10;
        assert_eq!(cost.macs, scores * (16 + 32));
        assert_eq!(cost.flops, 2 * cost.macs + 5 * scores);
        assert_eq!(cost.transcendental, scores);
    }

    #[test]
    fn three_d_needs_head_counts_that_divide() {
        let (q, k, v) = (f32s(&[1, 5, 64]), f32s(&[1, 7, 32]), f32s(&[1, 7, 32]));
        let out = Op::new("Attention")
            .opset(23)
            .int("q_num_heads", 4)
            .int("kv_num_heads", 2)
            .infer(&[&q, &k, &v]);
        assert_eq!(out[0].concrete_shape().unwrap(), vec![1, 5, 64]);
        Op::new("Attention")
            .opset(23)
            .int("q_num_heads", 3)
            .int("kv_num_heads", 3)
            .invalid(&[&q, &k, &v]);
    }
}
