//! Gemm (opsets 1-13) and MatMul / MatMulInteger (opsets 1-13, numpy-style batched and
//! broadcasting).
//!
//! Gemm: Y[M,N] = α·op(A)[M,K]·op(B)[K,N] + β·C. MACs = M·K·N; FLOPs = 2·MACs, plus M·N for
//! adding C when present, plus M·N for α ≠ 1 (β ≠ 1 scales the smaller C and is ignored).
//! MatMul: A[..., M, K] · B[..., K, N]: MACs = batch · M · K · N with batch the product of the
//! broadcast leading dims; 1-D operands are promoted as numpy does. FLOPs = 2·MACs.
//! Bytes: A, B (and C) read once, Y written once.

use super::{broadcast_shapes, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

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
            return Err(format!(
                "Gemm needs 2-D inputs, got ranks {} and {}",
                a.len(),
                b.len()
            ));
        }
        let trans_a = ctx.attrs().int_or("transA", 0) != 0;
        let trans_b = ctx.attrs().int_or("transB", 0) != 0;
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
            return Err(format!("inner dims differ: {ka} vs {kb}"));
        }
        Ok(vec![TensorFact::new(
            ctx.input(0)?.dtype,
            vec![m.clone(), n.clone()],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let a = ctx.input_dims(0)?;
        let trans_a = ctx.attrs().int_or("transA", 0) != 0;
        let k = if trans_a { a[0] } else { a[1] };
        let outputs = ctx.output_elements(0)?;
        let macs = outputs.saturating_mul(k);
        let has_c = ctx.inputs.get(2).copied().flatten().is_some();
        let alpha_scaling = ctx.attrs().float_or("alpha", 1.0) != 1.0;
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
        return Err(format!("inner dims differ: {ka} vs {kb}"));
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
            compute_precision: None,
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
    fn batched_matmul_broadcasts() {
        let out = matmul_shape(&k(&[2, 1, 4, 8]), &k(&[3, 8, 5])).unwrap();
        assert_eq!(out, k(&[2, 3, 4, 5]));
        assert_eq!(matmul_shape(&k(&[8]), &k(&[8, 5])).unwrap(), k(&[5]));
        assert!(matmul_shape(&k(&[4, 8]), &k(&[7, 5])).is_err());
    }
}
