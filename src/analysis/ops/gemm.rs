//! Gemm (opsets 1-13) and MatMul / MatMulInteger (opsets 1-13, numpy-style batched and
//! broadcasting).
//!
//! Gemm: Y[M,N] = α·op(A)[M,K]·op(B)[K,N] + β·C. MACs = M·K·N; FLOPs = 2·MACs, plus M·N for
//! adding C when present, plus M·N for α ≠ 1 (β ≠ 1 scales the smaller C and is ignored).
//! MatMul: A[..., M, K] · B[..., K, N]: MACs = batch · M · K · N with batch the product of the
//! broadcast leading dims; 1-D operands are promoted as numpy does. FLOPs = 2·MACs.
//! Bytes: A, B (and C) read once, Y written once.

use super::{broadcast_shapes, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::graph::Attributes;
use crate::analysis::tensor::{DType, Dim, TensorFact};

/// Gemm's attributes with the spec defaults, read once for the cost model, the executor's
/// lowering and the advisor (BN folding into a Gemm).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmConfig {
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f32,
    pub beta: f32,
}

impl GemmConfig {
    pub fn from_attrs(attrs: &Attributes) -> GemmConfig {
        GemmConfig {
            trans_a: attrs.int_or("transA", 0) != 0,
            trans_b: attrs.int_or("transB", 0) != 0,
            alpha: attrs.float_or("alpha", 1.0),
            beta: attrs.float_or("beta", 1.0),
        }
    }
}

struct Gemm;
struct MatMul;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "Gemm" => Some(&Gemm),
        "MatMul" | "MatMulInteger" => Some(&MatMul),
        _ => None,
    }
}

fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x == y,
        _ => true,
    }
}

impl OpDef for Gemm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let a = ctx.input_shape(0)?;
        let b = ctx.input_shape(1)?;
        if a.len() != 2 || b.len() != 2 {
            return Err(super::invalid(format!(
                "Gemm needs 2-D inputs, got ranks {} and {}",
                a.len(),
                b.len()
            )));
        }
        let GemmConfig {
            trans_a, trans_b, ..
        } = GemmConfig::from_attrs(ctx.attrs());
        let (m, ka) = if trans_a {
            (&a[1], &a[0])
        } else {
            (&a[0], &a[1])
        };
        let (kb, n) = if trans_b {
            (&b[1], &b[0])
        } else {
            (&b[0], &b[1])
        };
        if !same_dim(ka, kb) {
            return Err(super::invalid(format!("inner dims differ: {ka} vs {kb}")));
        }
        Ok(vec![TensorFact::new(
            ctx.input(0)?.dtype,
            vec![m.clone(), n.clone()],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let a = ctx.input_dims(0)?;
        let config = GemmConfig::from_attrs(ctx.attrs());
        let k = if config.trans_a { a[0] } else { a[1] };
        let outputs = ctx.output_elements(0)?;
        let macs = outputs.saturating_mul(k);
        let has_c = ctx.inputs.get(2).copied().flatten().is_some();
        let alpha_scaling = config.alpha != 1.0;
        Ok(OpCost {
            flops: 2 * macs + outputs * (u64::from(has_c) + u64::from(alpha_scaling)),
            macs,
            transcendental: 0,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

/// Output shape of a numpy matmul, and (batch, M, K, N) when known.
pub(super) fn matmul_shape(a: &[Dim], b: &[Dim]) -> OpResult<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul operands must have rank >= 1".into());
    }
    let a2: Vec<Dim> = if a.len() == 1 {
        vec![Dim::Known(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Vec<Dim> = if b.len() == 1 {
        vec![b[0].clone(), Dim::Known(1)]
    } else {
        b.to_vec()
    };
    let (ka, kb) = (&a2[a2.len() - 1], &b2[b2.len() - 2]);
    if !same_dim(ka, kb) {
        return Err(super::invalid(format!("inner dims differ: {ka} vs {kb}")));
    }
    let batch = broadcast_shapes(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    let mut out = batch;
    if a.len() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    Ok(out)
}

impl OpDef for MatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let a = ctx.input_shape(0)?;
        let b = ctx.input_shape(1)?;
        let dtype = if ctx.node.op_type == "MatMulInteger" {
            DType::I32
        } else {
            ctx.input(0)?.dtype
        };
        Ok(vec![TensorFact::new(dtype, matmul_shape(a, b)?)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let a = ctx.input_dims(0)?;
        let k = *a.last().unwrap_or(&1);
        let outputs = ctx.output_elements(0)?;
        let macs = outputs.saturating_mul(k);
        Ok(OpCost {
            flops: 2 * macs,
            macs,
            transcendental: 0,
            bytes: ctx.default_traffic()?,
            is_view: false,
            // MatMulInteger multiplies 8-bit integers: its roof is the int8 peak, whatever
            // precision the model is analysed at (at the fp32 peak an i16 `vpmaddwd` kernel,
            // two products per lane, ran faster than its "bound").
            compute_precision: (ctx.node.op_type == "MatMulInteger")
                .then_some(crate::device::Precision::Int8),
            vector_flops: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(dims: &[u64]) -> Vec<Dim> {
        dims.iter().map(|&d| Dim::Known(d)).collect()
    }

    #[test]
    fn gemm_config_applies_the_spec_defaults() {
        let defaults = GemmConfig::from_attrs(&Attributes::default());
        assert_eq!(
            defaults,
            GemmConfig {
                trans_a: false,
                trans_b: false,
                alpha: 1.0,
                beta: 1.0
            }
        );
        let mut attrs = Attributes::default();
        attrs
            .0
            .insert("transB".into(), crate::analysis::graph::Attr::Int(1));
        assert!(GemmConfig::from_attrs(&attrs).trans_b);
    }

    #[test]
    fn batched_matmul_broadcasts() {
        let out = matmul_shape(&k(&[2, 1, 4, 8]), &k(&[3, 8, 5])).unwrap();
        assert_eq!(out, k(&[2, 3, 4, 5]));
        assert_eq!(matmul_shape(&k(&[8]), &k(&[8, 5])).unwrap(), k(&[5]));
        assert!(matmul_shape(&k(&[4, 8]), &k(&[7, 5])).is_err());
    }
}

#[cfg(test)]
mod cost_tests {
    //! Hand-computed Gemm / MatMul cases (bytes at 4 per f32 element unless stated).

    use super::super::tests::kit::{act, dims, f32_dims, f32s, sym, traffic, w32, weight, Op};
    use crate::analysis::tensor::{DType, Dim};
    use crate::device::Precision;

    #[test]
    fn gemm_with_c() {
        let (a, b, c) = (f32s(&[4, 8]), w32(&[8, 16]), w32(&[16]));
        let (out, cost) = Op::new("Gemm").run(&[&a, &b, &c]);
        assert_eq!(dims(&out[0]), [4, 16]);
        // MACs = M·K·N = 4·8·16 = 512; FLOPs = 2·512 + M·N (adding C) = 1,024 + 64.
        assert_eq!(cost.macs, 512);
        assert_eq!(cost.flops, 1_088);
        // A 32·4 = 128 (activation); B 128·4 + C 16·4 = 576 (weights); Y 64·4 = 256.
        assert_eq!(cost.bytes, traffic(576, 128, 256));
    }

    #[test]
    fn gemm_transposes_alpha_and_beta() {
        // op(A) = Aᵀ of [8, 4], op(B) = Bᵀ of [16, 8]: still M = 4, K = 8, N = 16.
        let (a, b, c) = (f32s(&[8, 4]), w32(&[16, 8]), w32(&[16]));
        let op = Op::new("Gemm").int("transA", 1).int("transB", 1);
        let (out, cost) = op.run(&[&a, &b]);
        assert_eq!(dims(&out[0]), [4, 16]);
        assert_eq!(cost.macs, 512);
        assert_eq!(cost.flops, 1_024);
        // α ≠ 1 scales every output once more: + 64; with C as well: + 64 + 64.
        let scaled = Op::new("Gemm")
            .int("transA", 1)
            .int("transB", 1)
            .float("alpha", 0.5);
        assert_eq!(scaled.run(&[&a, &b]).1.flops, 1_088);
        assert_eq!(scaled.run(&[&a, &b, &c]).1.flops, 1_152);
        // β ≠ 1 scales the smaller C and is not counted.
        let beta = Op::new("Gemm")
            .int("transA", 1)
            .int("transB", 1)
            .float("beta", 2.0);
        assert_eq!(beta.run(&[&a, &b, &c]).1.flops, 1_088);
    }

    #[test]
    fn gemm_symbolic_rows_and_errors() {
        let a = f32_dims(vec![sym("N"), Dim::Known(8)]);
        let out = Op::new("Gemm").infer(&[&a, &w32(&[8, 16])]);
        assert_eq!(out[0].shape.as_deref().unwrap(), [sym("N"), Dim::Known(16)]);
        // K = 8 against 7, and rank-3 operands, fail.
        let err = Op::new("Gemm").fails(&[&f32s(&[4, 8]), &w32(&[7, 16])]);
        assert!(err.contains("inner dims"), "{err}");
        Op::new("Gemm").fails(&[&f32s(&[2, 4, 8]), &w32(&[8, 16])]);
    }

    #[test]
    fn batched_matmul_broadcasts_the_leading_dims() {
        let (a, b) = (f32s(&[2, 1, 4, 8]), f32s(&[3, 8, 5]));
        let (out, cost) = Op::new("MatMul").run(&[&a, &b]);
        // batch = broadcast([2, 1], [3]) = [2, 3].
        assert_eq!(dims(&out[0]), [2, 3, 4, 5]);
        // MACs = 2·3 · 4·8·5 = 960; FLOPs = 2·MACs.
        assert_eq!(cost.macs, 960);
        assert_eq!(cost.flops, 1_920);
        // A 64·4 + B 120·4 = 736 read (both activations); Y 120·4 = 480.
        assert_eq!(cost.bytes, traffic(0, 736, 480));
        // At bf16, 2 bytes an element.
        let (_, half) = Op::new("MatMul").precision(Precision::Bf16).run(&[&a, &b]);
        assert_eq!(half.bytes, traffic(0, 368, 240));
    }

    #[test]
    fn one_dimensional_operands_are_promoted() {
        let op = Op::new("MatMul");
        // [8]·[8, 5] → [5]: MACs = 5·8.
        let (out, cost) = op.run(&[&f32s(&[8]), &w32(&[8, 5])]);
        assert_eq!(dims(&out[0]), [5]);
        assert_eq!(cost.macs, 40);
        // [4, 8]·[8] → [4]: MACs = 4·8.
        let (out, cost) = op.run(&[&f32s(&[4, 8]), &w32(&[8])]);
        assert_eq!(dims(&out[0]), [4]);
        assert_eq!(cost.macs, 32);
        // [8]·[8] → scalar: one dot product of 8.
        let (out, cost) = op.run(&[&f32s(&[8]), &w32(&[8])]);
        assert_eq!(dims(&out[0]), Vec::<u64>::new());
        assert_eq!(cost.macs, 8);
    }

    #[test]
    fn matmul_integer_counts_integer_widths() {
        let (a, b) = (act(DType::U8, &[4, 8]), weight(DType::I8, &[8, 16]));
        let (out, cost) = Op::new("MatMulInteger").run(&[&a, &b]);
        assert_eq!(out[0].dtype, DType::I32);
        assert_eq!(dims(&out[0]), [4, 16]);
        assert_eq!(cost.macs, 512);
        // u8 A 32·1, i8 B 128·1, i32 Y 64·4: integer widths whatever the precision.
        assert_eq!(cost.bytes, traffic(128, 32, 256));
        assert_eq!(cost.compute_precision, Some(Precision::Int8));
        let (_, fp16) = Op::new("MatMulInteger")
            .precision(Precision::Fp16)
            .run(&[&a, &b]);
        assert_eq!(fp16.bytes, traffic(128, 32, 256));
    }

    #[test]
    fn matmul_mismatches() {
        // Leading dims 2 and 3 do not broadcast: the model is inconsistent.
        let reason = Op::new("MatMul").invalid(&[&f32s(&[2, 4, 8]), &f32s(&[3, 8, 5])]);
        assert!(reason.contains("broadcast"), "{reason}");
        // K = 8 against 7, and a scalar operand, fail.
        Op::new("MatMul").fails(&[&f32s(&[4, 8]), &f32s(&[7, 5])]);
        Op::new("MatMul").fails(&[&f32s(&[]), &f32s(&[7, 5])]);
    }
}
