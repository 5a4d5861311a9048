//! The executor: turns an analysed `Graph` (all shapes known) into a `Plan` of kernel calls with
//! statically planned activation buffers, and runs it on the local CPU, optionally timing every
//! step. Bridges the IR (ONNX attributes) and the ONNX-agnostic kernels.
//!
//! A node goes through three stages, each in its own place:
//!
//! 1. **Lowering** (`lower/`, one file per op family, mirroring `analysis/ops/`): reads the
//!    node's attributes, facts and constants and decides *what* runs: a `lower::Kernel`
//!    description (which kernel, its geometry and layout, the constants it takes, its FLOPs and
//!    scratch). Lowering is backend-neutral: it never looks at the CPU, the tuning cache or
//!    packed layouts. `lower::lookup` asks each family whether it has a kernel for an op; the
//!    ops no family claims are the plan's missing kernels.
//! 2. **Backend** (`cpu.rs`): decides *how* a described kernel runs on this machine. At plan
//!    time `cpu::prepare` picks GEMM blockings (autotuned per shape) and packs convolution
//!    weights for them (`cpu::Prepared`, kept in the step next to the description); at run
//!    time `cpu::run` calls the `kernels` functions with the step's inputs, outputs, scratch
//!    and threads. The CPU arms (`prepare`, `run`) sit next to their lowering in each family
//!    file and see only the `Kernel` description, never the node. A second backend (a GPU)
//!    adds its own `prepare`/`run` over the same descriptions (e.g. `gpu.rs` with arms in
//!    `gpu/<family>.rs`) and its prepared state in place of `cpu::Prepared`; lowering, plan and
//!    buffer planner stay as they are. Two "what" decisions are still on the CPU side: the
//!    quantized lowerings (`lower/quant.rs`) pack int8/bf16 weights for the CPU's ISA, and
//!    `kernels::conv` itself picks depthwise, im2col or the pixel-major layout.
//! 3. **Plan and runtime**: `plan.rs` drives lowering and preparation over the topological
//!    order (`build_plan`), `memory.rs` assigns f32 activations to reusable buffers by lifetime
//!    (pure), `eval.rs` materialises constants and evaluates integer shape-side ops through the
//!    analysis ops' constant evaluator, and `run.rs` executes a plan in a `Workspace`.

pub mod conv_timing;
pub mod npy;
pub mod plan;
pub mod sysmem;
pub mod tune;

mod cpu;
mod eval;
mod lower;
mod memory;
mod reference;
mod run;
mod staged;

use std::collections::HashMap;
use std::path::PathBuf;

use crate::analysis::graph::Node;
use crate::analysis::tensor::TensorFact;

pub use cpu::state_machine_caches;
pub(crate) use lower::conv::kernels_take_conv;
/// The quantized ops (their f16/bf16 rounding helpers are used by the quantizer and export).
pub use lower::quant;
pub use plan::{build_plan, ConvAlgorithms, Plan, PlanOptions, StepInfo};
pub use run::{RunTimings, Workspace};
pub use staged::{observe_data_dependent_shapes, run_staged, ObservedShape};

/// A run-time tensor. Integer and boolean values are carried as i64.
#[derive(Clone, Debug, PartialEq)]
pub enum RtData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct RtTensor {
    pub shape: Vec<usize>,
    pub data: RtData,
}

impl RtTensor {
    pub fn len(&self) -> usize {
        match &self.data {
            RtData::F32(v) => v.len(),
            RtData::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            RtData::F32(v) => Some(v),
            RtData::I64(_) => None,
        }
    }

    /// Values as f32 whatever the storage (for comparisons and reports).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            RtData::F32(v) => v.clone(),
            RtData::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("the executor has no kernel for: {}", .0.join(", "))]
    MissingKernels(Vec<String>),
    #[error("node `{node}` ({op_type}): {reason}")]
    Node {
        node: String,
        op_type: String,
        reason: String,
    },
    #[error("the plan needs {} of activation and weight memory, more than the {} this machine can give ({limit_source})", sysmem::gib(*bytes), sysmem::gib(*limit))]
    TooLarge {
        bytes: u64,
        limit: u64,
        limit_source: String,
    },
    #[error("input `{name}`: {reason}")]
    Input { name: String, reason: String },
    #[error("{}: {reason}", path.display())]
    Npy { path: PathBuf, reason: String },
}

/// A deterministic pseudo-random input for a value of this shape (standard-normal-ish f32 by
/// default; small non-negative integers for integer inputs, below `int_range`).
pub fn random_input(shape: &[usize], integer: bool, seed: u64, int_range: i64) -> RtTensor {
    let mut state = seed ^ 0xD1B5_4A32_D192_ED03;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let count: usize = shape.iter().product();
    let data = if integer {
        RtData::I64(
            (0..count)
                .map(|_| (next() % int_range.max(1) as u64) as i64)
                .collect(),
        )
    } else {
        // Sum of 4 uniforms, rescaled: mean 0, variance 1.
        RtData::F32(
            (0..count)
                .map(|_| {
                    let s: f32 = (0..4)
                        .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32)
                        .sum();
                    (s - 2.0) * 1.732_050_8
                })
                .collect(),
        )
    };
    RtTensor {
        shape: shape.to_vec(),
        data,
    }
}

/// Random inputs (fixed seed) for every graph input of a plan; integer ones below
/// [`index_range`] of the graph they were planned from.
pub fn random_inputs(plan: &Plan, seed: u64) -> HashMap<String, RtTensor> {
    plan.inputs()
        .into_iter()
        .zip(plan.integer_ranges.iter())
        .enumerate()
        .map(|(i, ((name, shape, integer), &range))| {
            let tensor = random_input(&shape, integer, seed.wrapping_add(i as u64), range);
            (name, tensor)
        })
        .collect()
}

/// Random integer inputs are drawn below this, unless they index a smaller table.
pub const RANDOM_INTEGER_RANGE: i64 = 10;

/// The range random values of integer input `value` are drawn from: [`RANDOM_INTEGER_RANGE`],
/// or fewer where the value indexes a smaller axis (the rows of an embedding: a molecule
/// transformer's 4-row role table failed every `bench` on index 4), followed through casts and
/// reshapes. Indices into a table of unknown size keep the default.
pub fn index_range(
    graph: &crate::analysis::graph::Graph,
    value: crate::analysis::graph::ValueId,
) -> i64 {
    const PASS_THROUGH: [&str; 7] = [
        "Cast",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Flatten",
        "Identity",
        "Expand",
    ];
    let mut range = RANDOM_INTEGER_RANGE;
    let mut frontier = vec![value];
    let mut seen = std::collections::HashSet::new();
    while let Some(current) = frontier.pop() {
        if !seen.insert(current) {
            continue;
        }
        for id in graph.consumers(current) {
            let node = &graph.dag[id];
            let reads_at = |slot: usize| node.inputs.get(slot).copied().flatten() == Some(current);
            // (slot of the indices, slot of the table, axis indexed).
            let indexed = match (node.domain.as_str(), node.op_type.as_str()) {
                ("", "Gather" | "GatherElements") if reads_at(1) => {
                    Some((0, node.attrs.int_or("axis", 0)))
                }
                ("com.microsoft", "EmbedLayerNormalization") if reads_at(0) => Some((2, 0)),
                ("com.microsoft", "EmbedLayerNormalization") if reads_at(1) => Some((4, 0)),
                ("", op) if PASS_THROUGH.contains(&op) && reads_at(0) => {
                    frontier.extend(node.outputs.iter().copied());
                    None
                }
                _ => None,
            };
            let Some((table_slot, axis)) = indexed else {
                continue;
            };
            let Some(table) = node.inputs.get(table_slot).copied().flatten() else {
                continue;
            };
            let Some(dims) = dims(&graph.values[table].fact) else {
                continue;
            };
            let Ok(axis) = crate::analysis::ops::normalize_axis(axis, dims.len()) else {
                continue;
            };
            range = range.min(dims[axis].max(1) as i64);
        }
    }
    range
}

fn node_error(node: &Node, reason: impl Into<String>) -> ExecError {
    ExecError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        reason: reason.into(),
    }
}

/// The concrete shape of a fact as `usize`s (`None` while any dim is symbolic).
pub(crate) fn dims(fact: &TensorFact) -> Option<Vec<usize>> {
    fact.concrete_shape()
        .map(|d| d.iter().map(|&v| v as usize).collect())
}

/// Which given inputs [`specialise_on_values`] turns into constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specialise {
    /// Integer and bool inputs: the shape-like ones (Reshape's shape, Slice's starts, Reduce
    /// axes, Resize sizes, TopK's k...) and the indices whose values fix an output's shape.
    Integers,
    /// Every given input (float weights given at run time, e.g. a Conv's filter).
    All,
}

/// Specialises a graph on input values known before planning: each given input of the kind
/// `which` names stops being a graph input and becomes a constant holding its value, so
/// inference resolves the shapes that depend on it and the planner folds what only it feeds.
/// The plan built from the result is valid for these values only (`roofline run` builds it
/// for one run; a caller running it again with other values must specialise again). Returns
/// the names of the inputs it bound.
pub fn specialise_on_values(
    graph: &mut crate::analysis::graph::Graph,
    values: &HashMap<String, RtTensor>,
    which: Specialise,
) -> Vec<String> {
    use crate::analysis::tensor::{Tensor, TensorData, TensorFact};
    let mut bound = Vec::new();
    graph.inputs.retain(|&v| {
        let value = &mut graph.values[v];
        let Some(given) = values.get(&value.name) else {
            return true;
        };
        let integer = !value.fact.dtype.is_float();
        if which == Specialise::Integers && !integer {
            return true;
        }
        let shape: Vec<u64> = given.shape.iter().map(|&d| d as u64).collect();
        let data = match (&given.data, integer) {
            (RtData::I64(v), true) => TensorData::I64(v.clone()),
            (RtData::F32(v), true) => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
            (RtData::F32(v), false) => TensorData::F32(v.clone()),
            (RtData::I64(v), false) => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        };
        value.fact = TensorFact::constant(Tensor {
            dtype: value.fact.dtype,
            shape,
            data,
        });
        bound.push(value.name.clone());
        false
    });
    bound
}

/// [`specialise_on_values`] on a copy of `graph`, with `bindings` narrowed to the inputs that
/// remain: the graph, its bindings and the inputs bound, or `None` when no input was of the
/// kind `which` names.
pub fn specialised(
    graph: &crate::analysis::graph::Graph,
    bindings: &crate::analysis::Bindings,
    values: &HashMap<String, RtTensor>,
    which: Specialise,
) -> Option<(
    crate::analysis::graph::Graph,
    crate::analysis::Bindings,
    Vec<String>,
)> {
    let mut graph = graph.clone();
    let bound = specialise_on_values(&mut graph, values, which);
    if bound.is_empty() {
        return None;
    }
    let mut bindings = bindings.clone();
    bindings.inputs.retain(|(name, _)| !bound.contains(name));
    Some((graph, bindings, bound))
}
