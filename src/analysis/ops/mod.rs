//! Operators: for each ONNX op, shape inference (with constant evaluation where the op computes
//! shapes) and the cost formula, together in one file per op or family.
//!
//! # Counting conventions (stated once, used everywhere)
//! - One multiply-add is one MAC and two FLOPs. `flops` counts adds, multiplies, divisions,
//!   comparisons and max/min at one FLOP each.
//! - Transcendental evaluations (exp, log, tanh, erf, sqrt, reciprocal sqrt, pow, sin, cos) are
//!   counted in `transcendental`, not in `flops`. The roofline charges each as one operation at
//!   the device's peak rate (an optimistic lower bound; GPUs run them on slower special-function
//!   units, CPUs with ~10-20 instruction polynomials).
//! - Bytes assume each input tensor is read once and each output written once from the memory
//!   level being modelled (DRAM): no cache reuse across ops, no re-reads inside an op.
//! - Float tensors are counted at the analysis precision (`--precision`); integer and boolean
//!   tensors at their own width. Inputs that are constants (initializers, `Constant` nodes and
//!   whatever folds from them) are `weights_read`; other inputs are `act_read`.
//! - View ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity, inference-mode Dropout) move no
//!   data: they cost nothing and say so (`OpCost::view`).

mod attention;
pub mod classic_ml;
pub mod contrib;
mod contrib_fused;
pub(crate) mod control;
mod conv;
mod einsum;
mod elementwise;
pub(crate) mod fold;
pub mod fused;
mod gemm;
pub(crate) mod geometry;
mod misc;
mod movement;
mod norm;
mod pool;
mod quant;
mod reduce;
mod shape;
pub(crate) mod signal;
pub(crate) mod spatial;
pub(crate) mod state;

use serde::{Deserialize, Serialize};

use super::graph::Attributes;
use super::tensor::{DType, Dim, TensorFact};
use crate::device::Precision;

pub use gemm::GemmConfig;

/// Memory traffic of one op, by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    pub weights_read: u64,
    pub act_read: u64,
    pub act_written: u64,
    /// Of `act_read`, the bytes of graph inputs: like weights, they come from before the run
    /// (the caller, or the previous decode step's cache), not from the op that ran just before,
    /// so the cost model charges them where the weights are (see `roofline`). Set by the
    /// analysis after an op is costed; 0 in the ops' own costs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_read: u64,
}

impl Traffic {
    pub fn total(&self) -> u64 {
        self.weights_read + self.act_read + self.act_written
    }

    pub fn add(&mut self, other: &Traffic) {
        self.weights_read += other.weights_read;
        self.act_read += other.act_read;
        self.act_written += other.act_written;
        self.input_read += other.input_read;
    }
}

/// Work and traffic of one op at one precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCost {
    pub flops: u64,
    pub macs: u64,
    pub transcendental: u64,
    pub bytes: Traffic,
    /// True for ops that only relabel a buffer (no kernel runs).
    #[serde(default)]
    pub is_view: bool,
    /// Precision the op computes in when it differs from the analysis precision (an int8 kernel
    /// inside an fp32 model): the roofline then uses the device's peak at this precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_precision: Option<Precision>,
    /// The part of the work (`flops + transcendental`) that runs at the fp32 vector rate
    /// whatever `compute_precision` says: the quantize, dequantize and epilogue arithmetic
    /// (activation functions included) around an int8 or bf16 dot product.
    /// An int8 unit does not speed it up, and on short reductions (a 1×1 conv over 16
    /// channels) it rivals the dot products themselves.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vector_flops: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl OpCost {
    pub fn view() -> OpCost {
        OpCost {
            is_view: true,
            ..OpCost::default()
        }
    }
}

/// The node being inferred or costed, as the op sees it.
pub struct OpNode<'a> {
    pub name: &'a str,
    pub op_type: &'a str,
    pub attrs: &'a Attributes,
    /// Version of the default opset the model imports.
    pub opset: i64,
}

/// Inputs to shape inference. `inputs[i]` is `None` for an omitted optional input.
pub struct InferCtx<'a> {
    pub node: OpNode<'a>,
    pub inputs: Vec<Option<&'a TensorFact>>,
    pub output_count: usize,
    /// The facts of the enclosing graph's values by name, for ops whose subgraphs read them
    /// (If, Loop, Scan); `None` where no graph is at hand (constant evaluation, tests).
    pub outer: Option<crate::analysis::import::OuterScope<'a>>,
}

/// Inputs to costing: the facts inference produced.
pub struct CostCtx<'a> {
    pub node: OpNode<'a>,
    pub inputs: Vec<Option<&'a TensorFact>>,
    /// The graph value behind each input, where known (empty when not): a value fed to
    /// several inputs is read once.
    pub input_values: Vec<Option<crate::analysis::graph::ValueId>>,
    pub outputs: Vec<&'a TensorFact>,
    pub precision: Precision,
    /// The enclosing graph's facts by name, as in `InferCtx::outer`.
    pub outer: Option<crate::analysis::import::OuterScope<'a>>,
}

/// Why an op could not be inferred or costed; wrapped with the node's name by the caller.
pub type OpResult<T> = Result<T, String>;

/// Shape inference and cost of one ONNX operator (or family).
pub trait OpDef: Sync {
    /// Output facts. Ops that compute shapes return constant facts when their inputs are
    /// constant, which is how shape subgraphs fold.
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>>;

    /// Work and traffic.
    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost>;
}

impl<'a> InferCtx<'a> {
    pub fn input(&self, index: usize) -> OpResult<&'a TensorFact> {
        self.inputs
            .get(index)
            .copied()
            .flatten()
            .ok_or_else(|| format!("missing input #{index}"))
    }

    pub fn opt_input(&self, index: usize) -> Option<&'a TensorFact> {
        self.inputs.get(index).copied().flatten()
    }

    pub fn input_shape(&self, index: usize) -> OpResult<&'a [Dim]> {
        self.input(index)?
            .shape
            .as_deref()
            .ok_or_else(|| format!("rank of input #{index} is unknown"))
    }

    /// A constant integer input (shape, axes, pads...).
    pub fn const_ints(&self, index: usize) -> OpResult<Option<Vec<i64>>> {
        match self.opt_input(index) {
            None => Ok(None),
            Some(fact) => match &fact.konst {
                Some(tensor) => tensor
                    .to_i64_vec()
                    .map(Some)
                    .ok_or_else(|| format!("input #{index} is constant but not readable")),
                None => Err(format!(
                    "input #{index} is computed at run time; its value is needed to infer the output shape"
                )),
            },
        }
    }

    pub fn attrs(&self) -> &'a Attributes {
        self.node.attrs
    }
}

impl CostCtx<'_> {
    /// Bytes of a tensor at the analysis precision.
    pub fn bytes_of(&self, fact: &TensorFact) -> OpResult<u64> {
        let count = fact
            .element_count()
            .ok_or_else(|| format!("shape {} is not fully known", fact.shape_string()))?;
        Ok(count.saturating_mul(self.element_bytes(fact.dtype)))
    }

    pub fn element_bytes(&self, dtype: DType) -> u64 {
        if dtype.is_float() {
            self.precision.bytes_per_element()
        } else {
            dtype.size_bytes()
        }
    }

    /// Every input read once (constants as weights), every output written once. A value fed to
    /// several inputs (`Mul(x, x)`) is read once: the kernel streams one buffer.
    pub fn default_traffic(&self) -> OpResult<Traffic> {
        let mut traffic = Traffic::default();
        for (index, fact) in self.inputs.iter().enumerate() {
            let Some(fact) = fact else { continue };
            if self.repeats_an_earlier_input(index) {
                continue;
            }
            let bytes = self.bytes_of(fact)?;
            if fact.is_constant() {
                traffic.weights_read += bytes;
            } else {
                traffic.act_read += bytes;
            }
        }
        for fact in &self.outputs {
            traffic.act_written += self.bytes_of(fact)?;
        }
        Ok(traffic)
    }

    /// Input `index` is the same graph value as an earlier input.
    pub fn repeats_an_earlier_input(&self, index: usize) -> bool {
        match self.input_values.get(index).copied().flatten() {
            Some(value) => self.input_values[..index].contains(&Some(value)),
            None => false,
        }
    }

    pub fn input(&self, index: usize) -> OpResult<&TensorFact> {
        self.inputs
            .get(index)
            .copied()
            .flatten()
            .ok_or_else(|| format!("missing input #{index}"))
    }

    pub fn input_dims(&self, index: usize) -> OpResult<Vec<u64>> {
        let fact = self.input(index)?;
        fact.concrete_shape().ok_or_else(|| {
            format!(
                "input #{index} shape {} is not fully known",
                fact.shape_string()
            )
        })
    }

    pub fn output_dims(&self, index: usize) -> OpResult<Vec<u64>> {
        let fact = self
            .outputs
            .get(index)
            .ok_or_else(|| format!("missing output #{index}"))?;
        fact.concrete_shape().ok_or_else(|| {
            format!(
                "output #{index} shape {} is not fully known",
                fact.shape_string()
            )
        })
    }

    pub fn output_elements(&self, index: usize) -> OpResult<u64> {
        Ok(self.output_dims(index)?.iter().product())
    }

    pub fn attrs(&self) -> &Attributes {
        self.node.attrs
    }
}

/// The op definition for an ONNX op type in the default domain, or `None` if unsupported.
pub fn lookup(domain: &str, op_type: &str) -> Option<&'static dyn OpDef> {
    if domain == fused::DOMAIN {
        return fused::lookup(op_type);
    }
    if domain == contrib::DOMAIN {
        return contrib::lookup(op_type);
    }
    if domain == classic_ml::DOMAIN {
        return classic_ml::lookup_ml(op_type);
    }
    if !(domain.is_empty() || domain == "ai.onnx") {
        return None;
    }
    elementwise::lookup(op_type)
        .or_else(|| conv::lookup(op_type))
        .or_else(|| gemm::lookup(op_type))
        .or_else(|| einsum::lookup(op_type))
        .or_else(|| attention::lookup(op_type))
        .or_else(|| norm::lookup(op_type))
        .or_else(|| pool::lookup(op_type))
        .or_else(|| reduce::lookup(op_type))
        .or_else(|| shape::lookup(op_type))
        .or_else(|| movement::lookup(op_type))
        .or_else(|| quant::lookup(op_type))
        .or_else(|| state::lookup(op_type))
        .or_else(|| signal::lookup(op_type))
        .or_else(|| geometry::lookup(op_type))
        .or_else(|| classic_ml::lookup(op_type))
        .or_else(|| control::lookup(op_type))
        .or_else(|| misc::lookup(op_type))
}

/// The cost of one node of `graph` from the facts inference left on its values: the op's
/// `cost`, with the graph's values by name as the outer scope of its subgraphs. `None` for an
/// op the tool does not know.
pub fn cost_node(
    graph: &super::graph::Graph,
    node: &super::graph::Node,
    precision: Precision,
) -> Option<OpResult<OpCost>> {
    let op = lookup(&node.domain, &node.op_type)?;
    let outer = |name: &str| {
        graph
            .value_by_name(name)
            .map(|v| graph.values[v].fact.clone())
    };
    Some(
        op.cost(&CostCtx {
            node: OpNode {
                name: &node.name,
                op_type: &node.op_type,
                attrs: &node.attrs,
                opset: graph.opset,
            },
            inputs: node
                .inputs
                .iter()
                .map(|slot| slot.map(|v| &graph.values[v].fact))
                .collect(),
            input_values: node.inputs.clone(),
            outputs: node
                .outputs
                .iter()
                .map(|&v| &graph.values[v].fact)
                .collect(),
            precision,
            outer: Some(&outer),
        }),
    )
}

/// Marks an `infer` error that means the model itself is inconsistent (a conv bias of the wrong
/// length, split sizes that do not add up), as opposed to a shape the tool cannot derive. The
/// driver turns such an error into bad input instead of a warning, so no kernel is ever handed
/// the inconsistency. NUL bytes keep the mark from occurring in any other message.
const INVALID_MARK: &str = "\u{0}invalid\u{0}";

/// An `infer` error for an inconsistent model (see `INVALID_MARK`).
pub fn invalid(reason: impl Into<String>) -> String {
    format!("{INVALID_MARK}{}", reason.into())
}

/// The reason of an error made by `invalid`, `None` for any other error.
pub fn as_invalid(reason: &str) -> Option<&str> {
    reason.strip_prefix(INVALID_MARK)
}

/// Ops whose outputs are random even with constant inputs: never folded.
pub fn is_nondeterministic(op_type: &str) -> bool {
    matches!(
        op_type,
        "RandomNormal"
            | "RandomUniform"
            | "RandomNormalLike"
            | "RandomUniformLike"
            | "Multinomial"
            | "Bernoulli"
    )
}

/// Normalises a possibly negative axis against a rank.
pub fn normalize_axis(axis: i64, rank: usize) -> OpResult<usize> {
    let rank_i = rank as i64;
    let adjusted = if axis < 0 { axis + rank_i } else { axis };
    if adjusted < 0 || adjusted >= rank_i.max(1) {
        return Err(invalid(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(adjusted as usize)
}

/// Numpy-style broadcast of several shapes.
pub fn broadcast_shapes(shapes: &[&[Dim]]) -> OpResult<Vec<Dim>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(rank);
    for axis in 0..rank {
        let mut result: Option<Dim> = None;
        for shape in shapes {
            let offset = rank - shape.len();
            if axis < offset {
                continue;
            }
            let dim = &shape[axis - offset];
            result = Some(match (result, dim) {
                (None, d) => d.clone(),
                (Some(Dim::Known(1)), d) => d.clone(),
                (Some(r), Dim::Known(1)) => r,
                (Some(Dim::Known(a)), Dim::Known(b)) if a == *b => Dim::Known(a),
                (Some(Dim::Known(a)), Dim::Known(b)) => {
                    return Err(invalid(format!("cannot broadcast dims {a} and {b}")))
                }
                // A symbol against a number > 1: the number must be what the symbol stands for.
                (Some(Dim::Known(a)), Dim::Sym(_)) => Dim::Known(a),
                (Some(Dim::Sym(_)), Dim::Known(b)) => Dim::Known(*b),
                (Some(Dim::Sym(a)), Dim::Sym(_)) => Dim::Sym(a),
            });
        }
        out.push(result.unwrap_or(Dim::Known(1)));
    }
    Ok(out)
}

/// Product of known dims, with overflow detection.
pub fn checked_volume(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Converts known dims to a fact shape.
pub fn known_dims(dims: &[u64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

#[cfg(test)]
mod tests;
