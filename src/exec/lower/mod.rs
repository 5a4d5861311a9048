//! Lowering: one analysed node → a backend-neutral kernel description (`Kernel`), its FLOPs and
//! its scratch. One file per op family, mirroring `analysis/ops/`; each holds the family's
//! lowerings and its CPU arm (`run`, and `prepare` where the CPU packs or tunes at plan time).
//! `lookup` asks the families in turn whether they have a kernel for an op: their answers are
//! the only list of supported ops, and the ops none claims are the plan's missing kernels.

pub(crate) mod conv;
pub(super) mod elementwise;
pub(super) mod gemm;
pub(super) mod movement;
pub(super) mod norm;
pub(super) mod pool;
pub mod quant;
pub(super) mod reduce;
pub(super) mod shape;

use std::collections::HashMap;
use std::sync::Arc;

use super::plan::Slot;
use super::{dims, node_error, ExecError, RtData, RtTensor};
use crate::analysis::graph::{Attributes, Graph, Node, NodeId, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::ops::fused;
use crate::analysis::tensor::TensorFact;
use crate::analysis::OperandView;
use crate::kernels::gemm::Activation;

/// What a step computes: the kernel and everything it needs from the graph (geometry, layout,
/// constants), decided without regard to the machine that runs it.
#[derive(Clone, Debug)]
pub(crate) enum Kernel {
    Conv(conv::ConvKernel),
    /// Batched matrix products (MatMul, Gemm and their fused forms).
    MatMul(gemm::MatMulSpec),
    Elementwise(elementwise::ElementwiseKernel),
    Norm(norm::NormKernel),
    Pool(pool::PoolKernel),
    Movement(movement::MovementKernel),
    Reduce(reduce::ReduceKernel),
    /// f32 ↔ integer conversion, or a copy.
    Cast {
        to_float: bool,
    },
    /// Quantized / half-precision ops and (De)QuantizeLinear.
    Quant(Arc<quant::QuantStep>),
    /// Output aliases the input buffer (Reshape, Flatten, Squeeze, Unsqueeze, Identity...).
    View,
    /// Integer/bool ops evaluated through the analysis op's constant evaluator.
    Generic,
    /// Nothing to run: a Concat whose inputs the buffer planner placed in their slices of its
    /// output, where their producers wrote them (`plan::concat_placements`).
    InPlace,
    /// Nothing to run: a Split or Slice whose outputs the buffer planner placed in their runs
    /// of its input (`plan::slice_placements`).
    SliceView,
}

/// A lowering's answer for one node.
pub(crate) struct Lowered {
    pub kernel: Kernel,
    /// FLOPs of the kernel call, for GFLOP/s reports.
    pub flops: u64,
    /// Scratch floats the kernel needs.
    pub scratch: usize,
}

impl Lowered {
    fn new(kernel: Kernel) -> Lowered {
        Lowered {
            kernel,
            flops: 0,
            scratch: 0,
        }
    }

    fn with_flops(self, flops: u64) -> Lowered {
        Lowered { flops, ..self }
    }

    fn generic() -> Lowered {
        Lowered::new(Kernel::Generic)
    }
}

/// The domain of an op the executor knows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Domain {
    /// The standard ONNX domain (`""` or `ai.onnx`).
    Onnx,
    /// The tool's own domain (`roofline`): fused and quantized ops.
    Tool,
}

/// A family's lowering of one op.
type LowerFn = fn(&Cx) -> Result<Lowered, ExecError>;

/// How a family lowers an op.
#[derive(Clone, Copy)]
pub(crate) struct Lowering {
    lower: LowerFn,
    /// Whether the lowering handles integer/bool tensors itself; otherwise a node with any of
    /// them goes to the generic evaluator.
    integers: bool,
}

impl Lowering {
    /// A lowering for f32 tensors (integer indices of Gather and the Where condition allowed).
    fn floats(lower: LowerFn) -> Option<Lowering> {
        Some(Lowering {
            lower,
            integers: false,
        })
    }

    /// A lowering that decides itself what to do with integer tensors.
    fn integers(lower: LowerFn) -> Option<Lowering> {
        Some(Lowering {
            lower,
            integers: true,
        })
    }
}

/// The family lowering `op` of `domain`; `None` when the executor has no kernel for it.
pub(crate) fn lookup(domain: &str, op: &str) -> Option<Lowering> {
    let reference = Lowering {
        lower: |_| Ok(Lowered::generic()),
        integers: true,
    };
    let domain = if domain == fused::DOMAIN {
        Domain::Tool
    } else if domain.is_empty() || domain == "ai.onnx" {
        Domain::Onnx
    } else {
        // Other domains (onnxruntime's contrib ops) run on reference kernels where they have one.
        return super::reference::covers(domain, op).then_some(reference);
    };
    quant::lookup(domain, op)
        .or_else(|| conv::lookup(domain, op))
        .or_else(|| gemm::lookup(domain, op))
        .or_else(|| elementwise::lookup(domain, op))
        .or_else(|| norm::lookup(domain, op))
        .or_else(|| pool::lookup(domain, op))
        .or_else(|| reduce::lookup(domain, op))
        .or_else(|| movement::lookup(domain, op))
        .or_else(|| shape::lookup(domain, op))
        .or_else(|| {
            (domain == Domain::Onnx && super::reference::covers("", op)).then_some(reference)
        })
}

/// The op types in `order` that no family can lower (folded nodes need no kernel), sorted.
pub(super) fn missing_kernels(
    graph: &Graph,
    order: &[NodeId],
    states: &HashMap<NodeId, NodeState>,
) -> Vec<String> {
    let mut names: Vec<String> = order
        .iter()
        .filter(|id| !matches!(states.get(id), Some(NodeState::Folded)))
        .map(|&id| &graph.dag[id])
        .filter(|n| lookup(&n.domain, &n.op_type).is_none())
        .map(|n| n.op_type.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Lowers one node.
pub(super) fn lower(cx: &Cx) -> Result<Lowered, ExecError> {
    let Some(lowering) = lookup(&cx.node.domain, cx.op()) else {
        return Err(ExecError::MissingKernels(vec![cx.op().to_string()]));
    };
    if !lowering.integers && !cx.all_float_io() {
        return Ok(Lowered::generic());
    }
    (lowering.lower)(cx)
}

/// What a lowering sees of its node: the graph, the node, its input facts and the constants
/// materialised so far.
pub(crate) struct Cx<'a> {
    pub graph: &'a Graph,
    pub node: &'a Node,
    pub facts: &'a [Option<&'a TensorFact>],
    pub slots: &'a [Slot],
    /// Per input, the view through which it is read when the plan folded a Transpose or a
    /// scalar multiplication into this node (`facts[i]` is then what the view reads); see
    /// `analysis::matmul_operand_views`.
    pub views: &'a [Option<&'a OperandView>],
}

impl<'a> Cx<'a> {
    pub fn op(&self) -> &'a str {
        &self.node.op_type
    }

    pub fn attrs(&self) -> &'a Attributes {
        &self.node.attrs
    }

    pub fn opset(&self) -> i64 {
        self.graph.opset
    }

    /// Whether any output after the first is used: read by a node or a graph output (exporters
    /// list optional outputs they leave unused, LayerNormalization's statistics for one).
    pub fn extra_outputs_used(&self) -> bool {
        self.node
            .outputs
            .iter()
            .skip(1)
            .any(|&v| self.graph.outputs.contains(&v) || !self.graph.consumers(v).is_empty())
    }

    pub fn error(&self, reason: impl Into<String>) -> ExecError {
        node_error(self.node, reason)
    }

    /// The node's epilogue activation (see `activation_attr`).
    pub fn activation(&self) -> Result<Activation, ExecError> {
        activation_attr(self.attrs()).map_err(|e| self.error(e))
    }

    /// The permutation input `i` is read through, when a Transpose was folded into the read.
    pub fn view(&self, i: usize) -> Option<&'a [usize]> {
        self.views.get(i).copied().flatten()?.perm.as_deref()
    }

    /// The factor input `i` is scaled by, when a scalar multiplication was folded into the read
    /// (1 otherwise).
    pub fn scale(&self, i: usize) -> f32 {
        self.views
            .get(i)
            .copied()
            .flatten()
            .map_or(1.0, |view| view.scale)
    }

    /// The value at input `i`, when given.
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.node.inputs.get(i).copied().flatten()
    }

    pub fn shape_of(&self, i: usize) -> Result<Vec<usize>, ExecError> {
        self.facts
            .get(i)
            .copied()
            .flatten()
            .and_then(dims)
            .ok_or_else(|| self.error(format!("input #{i} shape unknown")))
    }

    pub fn out_shape(&self, i: usize) -> Result<Vec<usize>, ExecError> {
        self.node
            .outputs
            .get(i)
            .and_then(|&v| dims(&self.graph.values[v].fact))
            .ok_or_else(|| self.error("output shape unknown"))
    }

    pub fn is_float(&self, i: usize) -> bool {
        self.facts
            .get(i)
            .copied()
            .flatten()
            .is_some_and(|f| f.dtype.is_float())
    }

    /// Every input and output is a float, but Gather's indices, Where's condition, and the
    /// constant integer parameters of the movement ops that take them as inputs since opset
    /// 10-13 (Slice's starts/ends/axes/steps, Split's sizes, Expand's shape, Tile's repeats,
    /// Pad's pads, Resize's sizes): those lowerings read them as constants. Without this every
    /// such op of a modern export ran on the generic evaluator, 10-50× slower than its kernel;
    /// run-time parameters still go there.
    fn all_float_io(&self) -> bool {
        let node = self.node;
        let constant_parameter = |i: usize| {
            i >= 1
                && matches!(
                    node.op_type.as_str(),
                    "Slice" | "Split" | "Expand" | "Tile" | "Pad" | "Resize" | "Upsample"
                )
                && matches!(self.input(i).map(|v| &self.slots[v]), Some(Slot::Const(_)))
        };
        node.inputs.iter().enumerate().all(|(i, s)| {
            s.is_none()
                || self.is_float(i)
                || node.op_type == "Gather" && i == 1
                || matches!(node.op_type.as_str(), "Where") && i == 0
                || constant_parameter(i)
        }) && node
            .outputs
            .iter()
            .all(|&v| self.graph.values[v].fact.dtype.is_float())
    }

    /// Input `i` as f32 when it is a materialised constant.
    pub fn const_f32(&self, i: usize) -> Option<Arc<Vec<f32>>> {
        match self.input(i).map(|v| &self.slots[v]) {
            Some(Slot::Const(t)) => match &t.data {
                RtData::F32(d) => Some(Arc::new(d.clone())),
                RtData::I64(d) => Some(Arc::new(d.iter().map(|&x| x as f32).collect())),
            },
            _ => None,
        }
    }

    /// Constant input `i` itself when it holds floats: shared with the plan's slot, no copy.
    pub fn const_f32_tensor(&self, i: usize) -> Option<Arc<RtTensor>> {
        match self.input(i).map(|v| &self.slots[v]) {
            Some(Slot::Const(t)) if matches!(t.data, RtData::F32(_)) => Some(Arc::clone(t)),
            _ => None,
        }
    }

    /// The first element of constant input `i`.
    pub fn const_scalar(&self, i: usize) -> Option<f32> {
        self.const_f32(i).and_then(|d| d.first().copied())
    }

    /// Input `i` as integers when the analysis knows it as a constant (axes, pads, starts).
    pub fn const_i64(&self, i: usize) -> Option<Vec<i64>> {
        self.input(i)
            .and_then(|v| self.graph.values[v].fact.konst.as_ref()?.to_i64_vec())
    }
}

/// The epilogue activation of a fused or quantized node (`activation`, `act_alpha`, `act_beta`,
/// read by the analysis vocabulary), as the kernels' epilogue runs it; an unknown one is an error.
pub(crate) fn activation_attr(attrs: &Attributes) -> Result<Activation, String> {
    Ok(kernel_activation(fused::Activation::from_attrs(attrs)?))
}

/// The kernels' form of a vocabulary activation: the one place they meet.
pub(crate) fn kernel_activation(activation: fused::Activation) -> Activation {
    use fused::Activation as A;
    match activation {
        A::None => Activation::None,
        A::Relu => Activation::Relu,
        A::Clip { min, max } => Activation::Clip { min, max },
        A::LeakyRelu { alpha } => Activation::LeakyRelu { alpha },
        A::HardSigmoid { alpha, beta } => Activation::HardSigmoid { alpha, beta },
        A::HardSwish => Activation::HardSwish,
        A::Sigmoid => Activation::Sigmoid,
        A::Silu => Activation::Silu,
        A::Gelu => Activation::Gelu,
        A::Tanh => Activation::Tanh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_answer_for_their_domain_only() {
        for op in [
            "Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Sum", "Equal", "Softmax",
        ] {
            assert!(lookup("", op).is_some(), "{op}");
            assert!(lookup("ai.onnx", op).is_some(), "{op}");
            assert!(
                lookup(fused::DOMAIN, op).is_none(),
                "{op} in the tool's domain"
            );
            assert!(
                lookup("com.microsoft", op).is_none(),
                "{op} in another domain"
            );
        }
        for op in [
            "FusedConv",
            "FusedGemm",
            "FusedMatMul",
            "ElementwiseChain",
            "QConv",
        ] {
            assert!(lookup(fused::DOMAIN, op).is_some(), "{op}");
            assert!(lookup("", op).is_none(), "{op} in the ONNX domain");
        }
        for op in [
            "QuantizeLinear",
            "DequantizeLinear",
            "Shape",
            "Reshape",
            "ArgMax",
            "Tile",
        ] {
            assert!(lookup("", op).is_some(), "{op}");
        }
        for op in ["DFT", "STFT", "TreeEnsemble"] {
            assert!(lookup("", op).is_none(), "{op} has no kernel");
        }
        // Ops only the reference kernels cover are answered in the standard domain only.
        for op in [
            "LSTM",
            "Einsum",
            "TopK",
            "Attention",
            "Col2Im",
            "LinearAttention",
            "Loop",
            "DeformConv",
        ] {
            assert!(lookup("", op).is_some(), "{op}");
            assert!(lookup("com.microsoft", op).is_none(), "{op}");
        }
    }

    #[test]
    fn epilogue_activations_come_from_the_vocabulary() {
        use crate::analysis::graph::Attr;
        let mut attrs = Attributes::default();
        assert!(matches!(activation_attr(&attrs), Ok(Activation::None)));
        fused::Activation::LeakyRelu { alpha: 0.2 }.write_attrs(&mut attrs);
        assert!(matches!(
            activation_attr(&attrs),
            Ok(Activation::LeakyRelu { alpha }) if alpha == 0.2
        ));
        // An unknown name is an error, not a missing epilogue.
        attrs
            .0
            .insert("activation".into(), Attr::String("swish".into()));
        let err = activation_attr(&attrs).unwrap_err();
        assert!(err.contains("unknown activation `swish`"), "{err}");
    }
}
