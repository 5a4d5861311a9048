//! Fused ops written by the advisor, in the tool's own domain `roofline` (they never appear in
//! exported files: export expands them back to standard ONNX operators).
//!
//! - `FusedConv`: Conv (inputs X, W, B?) + optional residual R (input 3) + activation, one kernel.
//! - `FusedGemm`: Gemm + activation. `FusedMatMul`: MatMul + per-column bias (input 2) +
//!   activation.
//! - `ElementwiseChain`: a chain of element-wise steps on X (input 0) with constant operands
//!   (inputs 1..), encoded in the `steps` attribute.
//!
//! The epilogue activation (`activation`, `act_alpha`, `act_beta`) and the chain steps are one
//! typed vocabulary, `activation.rs` and `chain.rs`: an unknown name or a malformed step makes
//! inference fail with an invalid-input error.
//!
//! Cost: the base op's FLOPs plus the epilogue's per-output FLOPs (residual add 1, activation
//! from the vocabulary, equal to the element-wise op's), and the traffic of one kernel: inputs read once, the output
//! written once. The intermediate tensors the unfused graph wrote and re-read are gone, which is
//! exactly the predicted gain of a fusion.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpNode, OpResult};
use crate::analysis::tensor::TensorFact;

pub const DOMAIN: &str = "roofline";

/// The fused ops with a base op: (fused, base). `FusedConv`, `FusedGemm` and `FusedMatMul`
/// are their base op with the epilogue applied in registers (the same kernel), which the
/// advisor writes (`fuse`), export expands back, and the calibration lookup keys by.
const WITH_BASE: [(&str, &str); 3] = [
    ("FusedConv", "Conv"),
    ("FusedGemm", "Gemm"),
    ("FusedMatMul", "MatMul"),
];

/// The standard op a fused op (in [`DOMAIN`]) runs with its epilogue, or `None`.
pub fn base_of(fused_op: &str) -> Option<&'static str> {
    WITH_BASE
        .iter()
        .find(|(fused, _)| *fused == fused_op)
        .map(|&(_, base)| base)
}

/// The fused op that runs standard op `base_op` with an epilogue, or `None`.
pub fn fused_of(base_op: &str) -> Option<&'static str> {
    WITH_BASE
        .iter()
        .find(|(_, base)| *base == base_op)
        .map(|&(fused, _)| fused)
}

/// The epilogue activation vocabulary (attributes, cost, ONNX forms).
pub mod activation;
/// The `ElementwiseChain` step vocabulary.
pub mod chain;
/// Quantized and half-precision ops (`QConv`, `QMatMul`, `HalfConv`, `HalfMatMul`, `FakeQuant`).
pub mod quant;

pub use activation::Activation;
pub use chain::ChainStep;

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
        outer: None,
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
        input_values: ctx.input_values.iter().take(inputs).copied().collect(),
        outputs: ctx.outputs.clone(),
        precision: ctx.precision,
        outer: None,
    };
    let op = super::lookup("", op_type).ok_or("internal: base op missing")?;
    op.cost(&inner)
}

/// The node's epilogue activation; an unknown one is invalid input.
fn checked_activation(ctx: &InferCtx) -> OpResult<Activation> {
    Activation::from_attrs(ctx.attrs()).map_err(invalid)
}

fn epilogue(ctx: &CostCtx, mut cost: OpCost, residual: bool) -> OpResult<OpCost> {
    let outputs = ctx.output_elements(0)?;
    let (flops, transcendental) = Activation::from_attrs(ctx.attrs())?.cost();
    cost.flops += outputs * (flops + u64::from(residual));
    cost.transcendental += outputs * transcendental;
    cost.bytes = ctx.default_traffic()?;
    Ok(cost)
}

impl OpDef for FusedConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        checked_activation(ctx)?;
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
        checked_activation(ctx)?;
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
        checked_activation(ctx)?;
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
        ChainStep::from_attrs(ctx.attrs(), ctx.inputs.len()).map_err(invalid)?;
        let x = ctx.input(0)?;
        Ok(vec![TensorFact {
            dtype: x.dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements = ctx.output_elements(0)?;
        let (flops, transcendental) = ChainStep::from_attrs(ctx.attrs(), ctx.inputs.len())?
            .iter()
            .map(ChainStep::cost)
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

#[cfg(test)]
mod tests {
    //! Hand-computed fused ops: the base op's cost plus the epilogue, one kernel's traffic.

    use super::super::tests::kit::{dims, f32s, floats, traffic, w32, Op};
    use super::{Activation, ChainStep};

    fn activation_cost(name: &str) -> (u64, u64) {
        Activation::from_name(name, 0.0, 0.0).unwrap().cost()
    }

    fn step_cost(step: &str) -> (u64, u64) {
        ChainStep::parse(step).unwrap().cost()
    }

    fn fused_conv() -> Op {
        Op::fused("FusedConv").ints("pads", &[1, 1, 1, 1])
    }

    #[test]
    fn fused_conv_with_residual_and_relu() {
        let (x, w, b) = (f32s(&[1, 16, 32, 32]), w32(&[32, 16, 3, 3]), w32(&[32]));
        let r = f32s(&[1, 32, 32, 32]);
        let op = fused_conv().string("activation", "relu");
        let (out, cost) = op.run(&[&x, &w, &b, &r]);
        assert_eq!(dims(&out[0]), [1, 32, 32, 32]);
        // 32,768 outputs; MACs = 32,768 · 16·3·3 = 4,718,592.
        assert_eq!(cost.macs, 4_718_592);
        // 2·MACs + bias 32,768 + (residual 1 + relu 1)·32,768 = 9,535,488.
        assert_eq!(cost.flops, 9_535_488);
        // X 65,536 + R 131,072 read; W + B (4,608 + 32)·4 = 18,560; Y 131,072 written.
        assert_eq!(cost.bytes, traffic(18_560, 196_608, 131_072));
    }

    #[test]
    fn fusion_keeps_the_work_and_drops_the_intermediates() {
        let (x, w, b) = (f32s(&[1, 16, 32, 32]), w32(&[32, 16, 3, 3]), w32(&[32]));
        let r = f32s(&[1, 32, 32, 32]);
        let conv = Op::new("Conv").ints("pads", &[1, 1, 1, 1]);
        let (y, c1) = conv.run(&[&x, &w, &b]);
        let (s, c2) = Op::new("Add").run(&[&y[0], &r]);
        let (_, c3) = Op::new("Relu").run(&[&s[0]]);
        let (_, fused) = fused_conv()
            .string("activation", "relu")
            .run(&[&x, &w, &b, &r]);
        assert_eq!(fused.flops, c1.flops + c2.flops + c3.flops);
        assert_eq!(fused.macs, c1.macs);
        // Unfused: the conv output written, re-read by Add, Add's written, re-read by Relu:
        // 4 × 131,072 bytes more than the one kernel.
        let unfused = c1.bytes.total() + c2.bytes.total() + c3.bytes.total();
        assert_eq!(unfused - fused.bytes.total(), 4 * 131_072);
    }

    #[test]
    fn fused_conv_activation_only() {
        let (x, w) = (f32s(&[1, 16, 32, 32]), w32(&[32, 16, 3, 3]));
        let (_, cost) = fused_conv().string("activation", "gelu").run(&[&x, &w]);
        // No bias, no residual: 2·MACs + GELU's (4 FLOPs, 1 erf) per output.
        assert_eq!(cost.flops, 9_437_184 + 4 * 32_768);
        assert_eq!(cost.transcendental, 32_768);
        // An inconsistent bias is still an inconsistent conv.
        fused_conv().invalid(&[&x, &w, &w32(&[16])]);
    }

    #[test]
    fn fused_gemm_and_matmul() {
        let (a, b, c) = (f32s(&[4, 8]), w32(&[8, 16]), w32(&[16]));
        let (out, cost) = Op::fused("FusedGemm")
            .string("activation", "gelu")
            .run(&[&a, &b, &c]);
        assert_eq!(dims(&out[0]), [4, 16]);
        // Gemm 1,088 (see gemm.rs) + 4·64 for GELU; 64 erf.
        assert_eq!((cost.flops, cost.transcendental), (1_344, 64));
        let (a3, bias) = (f32s(&[2, 4, 8]), w32(&[16]));
        let op = Op::fused("FusedMatMul").string("activation", "hard_swish");
        let (out, cost) = op.run(&[&a3, &b, &bias]);
        assert_eq!(dims(&out[0]), [2, 4, 16]);
        // 128 outputs; MACs = 128·8 = 1,024; 2,048 + bias 128 + hard-swish 5·128.
        assert_eq!(cost.macs, 1_024);
        assert_eq!(cost.flops, 2_816);
        // A 256 bytes; B 512 + bias 64; Y 512.
        assert_eq!(cost.bytes, traffic(576, 256, 512));
        // No bias, no activation: the MatMul alone.
        assert_eq!(Op::fused("FusedMatMul").run(&[&a3, &b]).1.flops, 2_048);
    }

    #[test]
    fn elementwise_chain() {
        let x = f32s(&[1, 8, 4, 4]);
        let (k, per_channel) = (floats(&[], &[2.0]), w32(&[1, 8, 1, 1]));
        let op = Op::fused("ElementwiseChain").strings(
            "steps",
            &[
                "unary:relu:0:0",
                "const:mul:1:0",
                "unary:exp:0:0",
                "const:pow:2:0",
                "input:add:0",
            ],
        );
        let (out, cost) = op.run(&[&x, &k, &per_channel]);
        assert_eq!(dims(&out[0]), [1, 8, 4, 4]);
        // Per element: relu 1 + mul 1 + add 1 FLOPs, exp and pow 1 transcendental each.
        assert_eq!((cost.flops, cost.transcendental), (3 * 128, 2 * 128));
        // X 512 in, 512 out; the operands 4 + 32 bytes of weights.
        assert_eq!(cost.bytes, traffic(36, 512, 512));
        // No steps, an unknown step, an operand the node does not have: invalid input.
        assert!(Op::fused("ElementwiseChain")
            .invalid(&[&x])
            .contains("missing `steps`"));
        let unknown = Op::fused("ElementwiseChain").strings("steps", &["unary:swish:0:0"]);
        assert!(unknown
            .invalid(&[&x])
            .contains("unknown activation `swish`"));
        let missing = Op::fused("ElementwiseChain").strings("steps", &["const:mul:2:0"]);
        assert!(missing.invalid(&[&x, &k]).contains("reads input 2"));
    }

    #[test]
    fn unknown_activations_are_invalid() {
        let (x, w) = (f32s(&[1, 16, 32, 32]), w32(&[32, 16, 3, 3]));
        let reason = fused_conv()
            .string("activation", "swish")
            .invalid(&[&x, &w]);
        assert!(reason.contains("unknown activation `swish`"), "{reason}");
        let (a, b) = (f32s(&[4, 8]), w32(&[8, 16]));
        for op in ["FusedGemm", "FusedMatMul"] {
            Op::fused(op).string("activation", "").invalid(&[&a, &b]);
        }
        // A parameter of the wrong type is not read as 0.
        fused_conv()
            .string("activation", "clip")
            .string("act_alpha", "0")
            .invalid(&[&x, &w]);
    }

    #[test]
    fn epilogue_tables_match_the_element_wise_ops() {
        let x = f32s(&[1]);
        let per_element = |op: Op| {
            let cost = op.run(&[&x]).1;
            (cost.flops, cost.transcendental)
        };
        for (name, onnx) in [
            ("relu", "Relu"),
            ("clip", "Clip"),
            ("leaky_relu", "LeakyRelu"),
            ("hard_sigmoid", "HardSigmoid"),
            ("hard_swish", "HardSwish"),
            ("sigmoid", "Sigmoid"),
            ("gelu", "Gelu"),
            ("tanh", "Tanh"),
        ] {
            assert_eq!(activation_cost(name), per_element(Op::new(onnx)), "{name}");
            let step = format!("unary:{name}:0:0");
            assert_eq!(step_cost(&step), activation_cost(name), "{step}");
        }
        // SiLU = Sigmoid then Mul: (2 + 1, 1).
        assert_eq!(activation_cost("silu"), (3, 1));
        assert_eq!(activation_cost("none"), (0, 0));
        for (step, onnx) in [
            ("unary:exp:0:0", "Exp"),
            ("unary:sqrt:0:0", "Sqrt"),
            ("unary:neg:0:0", "Neg"),
            ("unary:reciprocal:0:0", "Reciprocal"),
        ] {
            assert_eq!(step_cost(step), per_element(Op::new(onnx)), "{step}");
        }
        let binary = |onnx: &str| {
            let cost = Op::new(onnx).run(&[&x, &x]).1;
            (cost.flops, cost.transcendental)
        };
        assert_eq!(step_cost("const:pow:1:0"), binary("Pow"));
        assert_eq!(step_cost("input:pow:0"), binary("Pow"));
        assert_eq!(step_cost("const:div:1:1"), binary("Div"));
        assert_eq!(step_cost("input:max:1"), binary("Max"));
    }
}
