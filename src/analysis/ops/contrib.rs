//! onnxruntime's contrib ops (domain `com.microsoft`) that LLM exports carry.
//!
//! MatMulNBits (version 1): Y[..., N] = A[..., K] · dequant(B)ᵀ (+ bias), B holding N rows of
//! `ceil(K / block_size)` blocks of `block_size` weights at `bits` bits each (uint8 blobs of
//! `block_size · bits / 8` bytes), one scale per block (and optional zero points).
//! - MACs = M·K·N with M the product of A's leading dims; FLOPs = 2·MACs, plus M·N for a bias.
//! - Dequantization, 2 FLOPs per weight (zero point subtracted, scale multiplied), once per
//!   call, counted in `vector_flops`: it runs on the vector units whatever the dot products use.
//! - Bytes: B and integer zero points at their packed width (the point of the format); float
//!   scales, A read and Y written at the analysis precision, as every float tensor is.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

/// The domain these ops live in.
pub const DOMAIN: &str = "com.microsoft";

struct MatMulNBits;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "MatMulNBits" => Some(&MatMulNBits),
        _ => None,
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
