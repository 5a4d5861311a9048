//! Fused ops written by the advisor, in the tool's own domain `roofline` (they never appear in
//! exported files: export expands them back to standard ONNX operators).
//!
//! - `FusedConv`: Conv (inputs X, W, B?) + optional residual R (input 3) + activation, one kernel.
//! - `FusedGemm`: Gemm + activation. `FusedMatMul`: MatMul + per-column bias (input 2) +
//!   activation.
//! - `ElementwiseChain`: a chain of element-wise steps on X (input 0) with constant operands
//!   (inputs 1..), encoded in the `steps` attribute.
//!
//! Cost: the base op's FLOPs plus the epilogue's per-output FLOPs (residual add 1, activation
//! from the element-wise table), and the traffic of one kernel: inputs read once, the output
//! written once. The intermediate tensors the unfused graph wrote and re-read are gone, which is
//! exactly the predicted gain of a fusion.

use super::{CostCtx, InferCtx, OpCost, OpDef, OpNode, OpResult};
use crate::analysis::tensor::TensorFact;

pub const DOMAIN: &str = "roofline";

/// Quantized and half-precision ops (`QConv`, `QMatMul`, `HalfConv`, `HalfMatMul`, `FakeQuant`).
pub mod quant;

struct FusedConv;
struct FusedGemm;
struct FusedMatMul;
struct ElementwiseChain;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "FusedConv" => &FusedConv,
        "FusedGemm" => &FusedGemm,
        "FusedMatMul" => &FusedMatMul,
        "ElementwiseChain" => &ElementwiseChain,
        _ => return quant::lookup(op_type),
    })
}

/// (FLOPs, transcendental) per element of an activation, by its `activation` attribute name.
pub fn activation_cost(name: &str) -> (u64, u64) {
    match name {
        "" | "none" => (0, 0),
        "relu" => (1, 0),
        "clip" => (2, 0),
        "leaky_relu" => (2, 0),
        "hard_sigmoid" => (4, 0),
        "hard_swish" => (5, 0),
        "sigmoid" => (2, 1),
        "silu" => (3, 1),
        "gelu" => (4, 1),
        "tanh" => (0, 1),
        _ => (1, 0),
    }
}

/// (FLOPs, transcendental) per element of one chain step (`unary:NAME[:a:b]`, `const:OP:INDEX`,
/// `input:OP`).
pub fn step_cost(step: &str) -> (u64, u64) {
    let mut parts = step.split(':');
    match (parts.next(), parts.next()) {
        (Some("unary"), Some(name)) => match name {
            "add_scalar" | "mul_scalar" | "neg" | "abs" | "relu" | "reciprocal" => (1, 0),
            "exp" | "log" | "tanh" | "erf" | "sqrt" => (0, 1),
            other => activation_cost(other),
        },
        (Some("const"), Some("pow")) | (Some("input"), Some("pow")) => (0, 1),
        _ => (1, 0),
    }
}

fn inner_ctx<'a>(ctx: &'a InferCtx<'a>, op_type: &'a str, inputs: usize) -> InferCtx<'a> {
    InferCtx {
        node: OpNode {
            name: ctx.node.name,
            op_type,
            attrs: ctx.node.attrs,
            opset: ctx.node.opset,
        },
        inputs: ctx.inputs.iter().take(inputs).copied().collect(),
        output_count: 1,
    }
}

/// Cost of the standard op a fused op is built on, from its first `inputs` inputs.
fn base_cost(ctx: &CostCtx, op_type: &str, inputs: usize) -> OpResult<OpCost> {
    let inner = CostCtx {
        node: OpNode {
            name: ctx.node.name,
            op_type,
            attrs: ctx.node.attrs,
            opset: ctx.node.opset,
        },
        inputs: ctx.inputs.iter().take(inputs).copied().collect(),
        outputs: ctx.outputs.clone(),
        precision: ctx.precision,
    };
    let op = super::lookup("", op_type).ok_or("internal: base op missing")?;
    op.cost(&inner)
}

fn epilogue(ctx: &CostCtx, mut cost: OpCost, residual: bool) -> OpResult<OpCost> {
    let outputs = ctx.output_elements(0)?;
    let (flops, transcendental) = activation_cost(ctx.attrs().string("activation").unwrap_or(""));
    cost.flops += outputs * (flops + u64::from(residual));
    cost.transcendental += outputs * transcendental;
    cost.bytes = ctx.default_traffic()?;
    Ok(cost)
}

impl OpDef for FusedConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let op = super::lookup("", "Conv").ok_or("internal: Conv missing")?;
        op.infer(&inner_ctx(ctx, "Conv", 3))
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let base = base_cost(ctx, "Conv", 3)?;
        let residual = ctx.inputs.get(3).copied().flatten().is_some();
        epilogue(ctx, base, residual)
    }
}

impl OpDef for FusedGemm {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let op = super::lookup("", "Gemm").ok_or("internal: Gemm missing")?;
        op.infer(&inner_ctx(ctx, "Gemm", 3))
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let base = base_cost(ctx, "Gemm", 3)?;
        epilogue(ctx, base, false)
    }
}

impl OpDef for FusedMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let op = super::lookup("", "MatMul").ok_or("internal: MatMul missing")?;
        op.infer(&inner_ctx(ctx, "MatMul", 2))
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut base = base_cost(ctx, "MatMul", 2)?;
        if ctx.inputs.get(2).copied().flatten().is_some() {
            base.flops += ctx.output_elements(0)?;
        }
        epilogue(ctx, base, false)
    }
}

impl OpDef for ElementwiseChain {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorFact {
            dtype: x.dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements = ctx.output_elements(0)?;
        let steps = match ctx.attrs().get("steps") {
            Some(crate::analysis::graph::Attr::Strings(steps)) => steps.clone(),
            _ => return Err("missing `steps`".into()),
        };
        let (flops, transcendental) = steps
            .iter()
            .map(|s| step_cost(s))
            .fold((0, 0), |acc, c| (acc.0 + c.0, acc.1 + c.1));
        Ok(OpCost {
            flops: elements * flops,
            macs: 0,
            transcendental: elements * transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}
