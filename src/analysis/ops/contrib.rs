//! onnxruntime's contrib ops (domain `com.microsoft`) that LLM exports carry (onnxruntime-genai's
//! model builder, the transformers optimizer).
//!
//! MatMulNBits (version 1): Y[..., N] = A[..., K] · dequant(B)ᵀ (+ bias), B holding N rows of
//! `ceil(K / block_size)` blocks of `block_size` weights at `bits` bits each (uint8 blobs of
//! `block_size · bits / 8` bytes), one scale per block (and optional zero points).
//! - MACs = M·K·N with M the product of A's leading dims; FLOPs = 2·MACs, plus M·N for a bias.
//! - Dequantization, 2 FLOPs per weight (zero point subtracted, scale multiplied), once per
//!   call, counted in `vector_flops`: it runs on the vector units whatever the dot products use.
//! - Bytes: B and integer zero points at their packed width (the point of the format); float
//!   scales, A read and Y written at the analysis precision, as every float tensor is.

//!
//! GroupQueryAttention (version 1): causal attention of `num_heads` query heads over
//! `kv_num_heads` KV heads with a cache. Query [B, S, H·d] (or packed Q|K|V [B, S, (H + 2·Hkv)·d]
//! when key and value are left out), key and value [B, S, Hkv·d], past_key/past_value
//! [B, Hkv, P, d]; outputs [B, S, H·d] and present_key/present_value [B, Hkv, T, d].
//! - T, the keys every query is scored against, is P + S; when the past and present buffers are
//!   shared (the cache preallocated to its maximum length, `past_present_share_buffer`), the
//!   present keeps the past's length P and T is the constant `total_sequence_length` when the
//!   model gives one, else P.
//! - MACs = 2·B·H·S·T·d (scores and the weighted sum; the causal triangle is counted whole, as
//!   for an exported graph); FLOPs add 5 per score (scale, max, subtract, sum, divide) and, with
//!   `do_rotary`, 3 per rotated element of Q and K; one exp per score.
//! - Bytes: Q, K, V and the past caches read once; the output written; the present caches:
//!   with a shared buffer only the S new entries are written (the cache is appended in place),
//!   otherwise the whole present (past copied and appended).
//!
//! SkipLayerNormalization / SkipSimplifiedLayerNormalization (version 1): y = norm(x + skip
//! (+ bias)) with gamma (and beta); the simplified form is RMSNorm. FLOPs per element: 1 add (2
//! with bias), LayerNorm's 8 or RMSNorm's 5; one reciprocal square root per row. The optional
//! outputs (mean, inverse std, the sum) are written when present.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

/// The domain these ops live in.
pub const DOMAIN: &str = "com.microsoft";

struct MatMulNBits;
struct GroupQueryAttention;
struct SkipNorm;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "MatMulNBits" => Some(&MatMulNBits),
        "GroupQueryAttention" => Some(&GroupQueryAttention),
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => Some(&SkipNorm),
        "SimplifiedLayerNormalization" => super::norm::lookup("RMSNormalization"),
        "DynamicQuantizeLSTM" => Some(super::misc::recurrent()),
        _ => super::contrib_fused::lookup(op_type),
    }
}

/// GroupQueryAttention's geometry, from its attributes and inputs.
struct Gqa {
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    /// Keys per query (T) and the present caches' length.
    attended: Dim,
    present: Dim,
    /// The past and present share one preallocated buffer: only the new entries are written.
    shared: bool,
}

fn gqa(
    ctx_inputs: &[Option<&TensorFact>],
    attrs: &crate::analysis::graph::Attributes,
) -> OpResult<Gqa> {
    let heads = attrs
        .int("num_heads")
        .filter(|&h| h > 0)
        .ok_or_else(|| invalid("GroupQueryAttention needs a positive `num_heads`"))?
        as u64;
    let kv_heads = attrs
        .int("kv_num_heads")
        .filter(|&h| h > 0)
        .ok_or_else(|| invalid("GroupQueryAttention needs a positive `kv_num_heads`"))?
        as u64;
    if !heads.is_multiple_of(kv_heads) {
        return Err(invalid(format!(
            "GroupQueryAttention: {heads} query heads do not group over {kv_heads} KV heads"
        )));
    }
    let input = |i: usize| ctx_inputs.get(i).copied().flatten();
    let query = input(0).ok_or("missing input #0")?;
    let q_shape = query
        .shape
        .as_deref()
        .ok_or("rank of the query is unknown")?;
    if q_shape.len() != 3 {
        return Err(invalid(
            "GroupQueryAttention's query must be [batch, sequence, hidden]",
        ));
    }
    let packed = input(1).is_none() && input(2).is_none();
    let width_heads = if packed { heads + 2 * kv_heads } else { heads };
    let head_dim = match &q_shape[2] {
        Dim::Known(w) if w % width_heads == 0 => w / width_heads,
        Dim::Known(w) => {
            return Err(invalid(format!(
                "GroupQueryAttention: a query width of {w} is not {width_heads} heads"
            )))
        }
        Dim::Sym(_) => return Err("the query width is symbolic".into()),
    };
    for (index, name) in [(1, "key"), (2, "value")] {
        let width = input(index)
            .and_then(|f| f.shape.as_deref())
            .and_then(|s| s.last().and_then(Dim::known));
        if let Some(width) = width {
            if width != kv_heads * head_dim {
                return Err(invalid(format!(
                    "GroupQueryAttention: {name} width {width} is not {kv_heads} heads of {head_dim}"
                )));
            }
        }
    }
    let sequence = q_shape[1].clone();
    let past = input(3)
        .and_then(|p| p.shape.as_deref())
        .map(|s| s.to_vec());
    let past_len = match &past {
        Some(shape) if shape.len() == 4 => Some(shape[2].clone()),
        Some(_) => {
            return Err(invalid(
                "past_key must be [batch, kv_heads, length, head_dim]",
            ))
        }
        None => None,
    };
    // A constant total length marks a shared (preallocated) buffer when the past already holds
    // it; otherwise the present is past + new.
    let total = input(6)
        .and_then(|t| t.konst.as_ref())
        .and_then(|t| t.to_i64_vec())
        .and_then(|v| v.first().copied())
        .map(|t| t.max(0) as u64);
    let (attended, present, shared) = match (past_len, total) {
        (None, _) => (sequence.clone(), sequence.clone(), false),
        (Some(Dim::Known(p)), Some(t)) if p >= t && p > 0 => (Dim::Known(t), Dim::Known(p), true),
        (Some(Dim::Known(p)), _) => match &sequence {
            Dim::Known(s) => (Dim::Known(p + s), Dim::Known(p + s), false),
            Dim::Sym(_) => return Err("the new sequence length is symbolic".into()),
        },
        (Some(Dim::Sym(_)), _) => return Err("the past length is symbolic".into()),
    };
    Ok(Gqa {
        heads,
        kv_heads,
        head_dim,
        attended,
        present,
        shared,
    })
}

impl OpDef for GroupQueryAttention {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let g = gqa(&ctx.inputs, ctx.attrs())?;
        let query = ctx.input(0)?;
        let q_shape = ctx.input_shape(0)?;
        let output = TensorFact::new(
            query.dtype,
            vec![
                q_shape[0].clone(),
                q_shape[1].clone(),
                Dim::Known(g.heads * g.head_dim),
            ],
        );
        let cache = TensorFact::new(
            query.dtype,
            vec![
                q_shape[0].clone(),
                Dim::Known(g.kv_heads),
                g.present.clone(),
                Dim::Known(g.head_dim),
            ],
        );
        Ok(vec![output, cache.clone(), cache])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let g = gqa(&ctx.inputs, ctx.attrs())?;
        let q = ctx.input_dims(0)?;
        let (batch, sequence) = (q[0], q[1]);
        let attended = g
            .attended
            .known()
            .ok_or("the attended length is not known")?;
        let present = g.present.known().ok_or("the present length is not known")?;
        let scores = batch
            .saturating_mul(g.heads)
            .saturating_mul(sequence)
            .saturating_mul(attended);
        let macs = scores.saturating_mul(g.head_dim).saturating_mul(2);
        let rotated = if ctx.attrs().int_or("do_rotary", 0) != 0 {
            batch * sequence * (g.heads + g.kv_heads) * g.head_dim
        } else {
            0
        };
        let mut bytes = ctx.default_traffic()?;
        // The presents: a shared buffer gets the new entries only.
        if g.shared {
            let per_entry = batch * g.kv_heads * g.head_dim;
            let element = ctx.element_bytes(ctx.input(0)?.dtype);
            let whole = 2 * per_entry * present * element;
            let new = 2 * per_entry * sequence * element;
            bytes.act_written = bytes.act_written.saturating_sub(whole).saturating_add(new);
        }
        Ok(OpCost {
            flops: macs
                .saturating_mul(2)
                .saturating_add(scores.saturating_mul(5))
                .saturating_add(rotated.saturating_mul(3)),
            macs,
            transcendental: scores,
            bytes,
            ..OpCost::default()
        })
    }
}

impl OpDef for SkipNorm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.is_empty() {
            return Err(invalid("the input needs a hidden axis"));
        }
        if let (Some(Dim::Known(a)), Ok(skip)) = (shape.last(), ctx.input_shape(1)) {
            if let Some(Dim::Known(b)) = skip.last() {
                if a != b {
                    return Err(invalid(format!(
                        "input width {a} and skip width {b} differ"
                    )));
                }
            }
        }
        let mut stats = shape[..shape.len() - 1].to_vec();
        stats.push(Dim::Known(1));
        let mut outputs = vec![TensorFact::new(x.dtype, shape.to_vec())];
        for index in 1..ctx.output_count {
            // mean and inverse std per row, then the sum x + skip (+ bias).
            outputs.push(if index == 3 {
                TensorFact::new(x.dtype, shape.to_vec())
            } else {
                TensorFact::new(crate::analysis::tensor::DType::F32, stats.clone())
            });
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let elements: u64 = x.iter().product();
        let rows = elements / x.last().copied().unwrap_or(1).max(1);
        let simplified = ctx.node.op_type == "SkipSimplifiedLayerNormalization";
        let bias = ctx
            .inputs
            .get(if simplified { 3 } else { 4 })
            .copied()
            .flatten()
            .is_some();
        let per_element = 1 + u64::from(bias) + if simplified { 5 } else { 8 };
        Ok(OpCost {
            flops: per_element * elements + 2 * rows,
            transcendental: rows,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// The attributes MatMulNBits requires, checked.
struct NBits {
    k: u64,
    n: u64,
    bits: u64,
    block_size: u64,
}

impl NBits {
    fn of(ctx_attrs: &crate::analysis::graph::Attributes) -> OpResult<NBits> {
        let get = |name: &str| {
            ctx_attrs
                .int(name)
                .ok_or_else(|| invalid(format!("MatMulNBits needs the `{name}` attribute")))
        };
        let (k, n, block_size) = (get("K")?, get("N")?, get("block_size")?);
        let bits = ctx_attrs.int_or("bits", 4);
        if k <= 0 || n <= 0 {
            return Err(invalid(format!(
                "MatMulNBits K={k} and N={n} must be positive"
            )));
        }
        if !(2..=8).contains(&bits) {
            return Err(invalid(format!(
                "MatMulNBits bits={bits}: 2 to 8 are defined"
            )));
        }
        if block_size < 16 || (block_size as u64).count_ones() != 1 {
            return Err(invalid(format!(
                "MatMulNBits block_size={block_size}: a power of two of at least 16"
            )));
        }
        Ok(NBits {
            k: k as u64,
            n: n as u64,
            bits: bits as u64,
            block_size: block_size as u64,
        })
    }

    fn blocks(&self) -> u64 {
        self.k.div_ceil(self.block_size)
    }

    fn blob_bytes(&self) -> u64 {
        self.block_size * self.bits / 8
    }
}

impl OpDef for MatMulNBits {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let nbits = NBits::of(ctx.attrs())?;
        let a = ctx.input_shape(0)?;
        let Some(last) = a.last() else {
            return Err(invalid("MatMulNBits input A must have rank >= 1"));
        };
        if let Dim::Known(k) = last {
            if *k != nbits.k {
                return Err(invalid(format!(
                    "MatMulNBits A's last dim {k} differs from K={}",
                    nbits.k
                )));
            }
        }
        if let Ok(b) = ctx.input_shape(1) {
            let expected = [nbits.n, nbits.blocks(), nbits.blob_bytes()];
            let matches = b.len() == 3
                && b.iter().zip(expected).all(|(dim, want)| match dim {
                    Dim::Known(d) => *d == want,
                    Dim::Sym(_) => true,
                });
            if !matches {
                return Err(invalid(format!(
                    "MatMulNBits B has shape {b:?}; K={}, N={}, bits={}, block_size={} need {expected:?}",
                    nbits.k, nbits.n, nbits.bits, nbits.block_size
                )));
            }
        }
        let mut shape = a.to_vec();
        *shape.last_mut().expect("rank checked") = Dim::Known(nbits.n);
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let nbits = NBits::of(ctx.attrs())?;
        let outputs = ctx.output_elements(0)?;
        let rows = outputs / nbits.n;
        let macs = rows.saturating_mul(nbits.k).saturating_mul(nbits.n);
        let has_bias = ctx.inputs.get(5).copied().flatten().is_some();
        let dequant = nbits.k.saturating_mul(nbits.n).saturating_mul(2);
        Ok(OpCost {
            flops: macs
                .saturating_mul(2)
                .saturating_add(if has_bias { outputs } else { 0 })
                .saturating_add(dequant),
            macs,
            bytes: ctx.default_traffic()?,
            vector_flops: dequant,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed MatMulNBits cases.
    use super::super::tests::kit::{act, dims, f32s, traffic, w32, weight, Op};
    use crate::analysis::graph::Attr;
    use crate::analysis::tensor::DType;
    use crate::device::Precision;

    fn nbits(k: i64, n: i64, bits: i64, block: i64) -> Op {
        Op::contrib("MatMulNBits")
            .int("K", k)
            .int("N", n)
            .int("bits", bits)
            .int("block_size", block)
    }

    #[test]
    fn int4_gemv_reads_half_a_byte_per_weight() {
        // A [1, 1, 4096] · B 4096×4096 at 4 bits in blocks of 128: 32 blocks of 64 bytes per
        // row; one f16 scale per block.
        let a = f32s(&[1, 1, 4096]);
        let b = weight(DType::U8, &[4096, 32, 64]);
        let scales = weight(DType::F16, &[4096 * 32]);
        let op = nbits(4096, 4096, 4, 128).precision(Precision::Fp16);
        let (out, cost) = op.run(&[&a, &b, &scales]);
        assert_eq!(dims(&out[0]), vec![1, 1, 4096]);
        assert_eq!(cost.macs, 4096 * 4096);
        // 2 FLOPs per MAC, plus 2 per weight of dequantization.
        assert_eq!(cost.flops, 2 * 4096 * 4096 + 2 * 4096 * 4096);
        assert_eq!(cost.vector_flops, 2 * 4096 * 4096);
        // B: 4096·4096/2 bytes; scales 131072 at 2 bytes; A and Y at 2 bytes.
        assert_eq!(
            cost.bytes,
            traffic(4096 * 4096 / 2 + 131_072 * 2, 4096 * 2, 4096 * 2)
        );
    }

    #[test]
    fn bias_and_batch_rows() {
        let a = f32s(&[2, 8, 64]);
        let b = weight(DType::U8, &[32, 2, 16]);
        let scales = w32(&[64]);
        let bias = w32(&[32]);
        let (out, cost) = nbits(64, 32, 4, 32).run_opt(&[
            Some(&a),
            Some(&b),
            Some(&scales),
            None,
            None,
            Some(&bias),
        ]);
        assert_eq!(dims(&out[0]), vec![2, 8, 32]);
        assert_eq!(cost.macs, 16 * 64 * 32);
        assert_eq!(cost.flops, 2 * 16 * 64 * 32 + 16 * 32 + 2 * 64 * 32);
        assert_eq!(
            cost.bytes,
            traffic(32 * 2 * 16 + 64 * 4 + 32 * 4, 16 * 64 * 4, 16 * 32 * 4)
        );
    }

    #[test]
    fn inconsistent_attributes_are_invalid() {
        let a = f32s(&[1, 64]);
        let b = weight(DType::U8, &[32, 2, 16]);
        let scales = w32(&[64]);
        // K disagrees with A.
        nbits(128, 32, 4, 32).invalid(&[&a, &b, &scales]);
        // B's blob size is not block_size·bits/8.
        nbits(64, 32, 8, 32).invalid(&[&a, &b, &scales]);
        // Block size not a power of two, bits out of range, a missing attribute.
        nbits(64, 32, 4, 24).invalid(&[&a, &b, &scales]);
        nbits(64, 32, 9, 32).invalid(&[&a, &b, &scales]);
        Op::contrib("MatMulNBits")
            .int("K", 64)
            .attr("block_size", Attr::Int(32))
            .invalid(&[&act(DType::F32, &[1, 64]), &b, &scales]);
    }
}

#[cfg(test)]
mod attention_tests {
    //! Hand-computed GroupQueryAttention and skip-norm cases (f32, 4 bytes).
    use super::super::tests::kit::{dims, f32s, scalar, traffic, w32, Op};
    use crate::analysis::tensor::DType;

    fn gqa(heads: i64, kv_heads: i64) -> Op {
        Op::contrib("GroupQueryAttention")
            .int("num_heads", heads)
            .int("kv_num_heads", kv_heads)
            .outputs(3)
    }

    #[test]
    fn decode_step_over_a_growing_cache() {
        // Batch 1, one new token, 8 query heads over 2 KV heads of 16, a past of 100.
        let q = f32s(&[1, 1, 128]);
        let kv = f32s(&[1, 1, 32]);
        let past = f32s(&[1, 2, 100, 16]);
        let seqlens = f32s(&[1]);
        let (out, cost) = gqa(8, 2).run_opt(&[
            Some(&q),
            Some(&kv),
            Some(&kv),
            Some(&past),
            Some(&past),
            Some(&seqlens),
        ]);
        assert_eq!(dims(&out[0]), vec![1, 1, 128]);
        assert_eq!(dims(&out[1]), vec![1, 2, 101, 16]);
        // 8 heads · 1 query · 101 keys · 16, twice.
        let scores = 8 * 101;
        assert_eq!(cost.macs, 2 * scores * 16);
        assert_eq!(cost.flops, 4 * scores * 16 + 5 * scores);
        assert_eq!(cost.transcendental, scores);
        // Reads: q, k, v, both pasts, seqlens; writes: output and both whole presents.
        let read = (128 + 32 + 32 + 2 * 3200 + 1) * 4;
        let written = (128 + 2 * 2 * 101 * 16) * 4;
        assert_eq!(cost.bytes, traffic(0, read, written));
    }

    #[test]
    fn shared_buffer_writes_the_new_entries() {
        // A cache preallocated to 256 with a constant total length of 101.
        let q = f32s(&[1, 1, 128]);
        let kv = f32s(&[1, 1, 32]);
        let past = f32s(&[1, 2, 256, 16]);
        let seqlens = f32s(&[1]);
        let total = scalar(DType::I32, 101.0);
        let (out, cost) = gqa(8, 2).run_opt(&[
            Some(&q),
            Some(&kv),
            Some(&kv),
            Some(&past),
            Some(&past),
            Some(&seqlens),
            Some(&total),
        ]);
        assert_eq!(dims(&out[1]), vec![1, 2, 256, 16]);
        assert_eq!(cost.macs, 2 * 8 * 101 * 16);
        // Written: the output and one new entry per KV head in each cache.
        assert_eq!(cost.bytes.act_written, (128 + 2 * 2 * 16) * 4);
    }

    #[test]
    fn inconsistent_heads_are_invalid() {
        let q = f32s(&[1, 4, 96]);
        gqa(6, 4).invalid(&[&q, &f32s(&[1, 4, 64]), &f32s(&[1, 4, 64])]);
        gqa(8, 2).invalid(&[&q, &f32s(&[1, 4, 40]), &f32s(&[1, 4, 40])]);
        Op::contrib("GroupQueryAttention")
            .int("kv_num_heads", 2)
            .invalid(&[&q, &f32s(&[1, 4, 24]), &f32s(&[1, 4, 24])]);
    }

    #[test]
    fn skip_norms() {
        let x = f32s(&[2, 5, 64]);
        let gamma = w32(&[64]);
        let (out, cost) = Op::contrib("SkipSimplifiedLayerNormalization").run(&[&x, &x, &gamma]);
        assert_eq!(dims(&out[0]), vec![2, 5, 64]);
        // Per element: the skip add and RMSNorm's 5; per row 2 and one rsqrt.
        assert_eq!(cost.flops, 6 * 640 + 2 * 10);
        assert_eq!(cost.transcendental, 10);
        assert_eq!(cost.bytes, traffic(64 * 4, 2 * 640 * 4, 640 * 4));
        let beta = w32(&[64]);
        let bias = w32(&[64]);
        let (_, cost) = Op::contrib("SkipLayerNormalization").run(&[&x, &x, &gamma, &beta, &bias]);
        assert_eq!(cost.flops, 10 * 640 + 2 * 10);
        Op::contrib("SkipLayerNormalization").invalid(&[&x, &f32s(&[2, 5, 32]), &gamma]);
    }
}
