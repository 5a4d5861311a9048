//! Values computed outside the planned kernels: constants materialised as run-time tensors,
//! opaque constants (too large for the analysis to fold) computed once at plan time with their
//! step's kernel, and the generic path that evaluates integer/bool shape-side ops through the
//! analysis ops' constant evaluator.

use super::cpu::{self, InRef, Io};
use super::lower::Kernel;
use super::plan::{Slot, Step};
use super::{dims, node_error, ExecError, RtData, RtTensor};
use crate::analysis::graph::{Graph, Node};
use crate::analysis::ops::{self, InferCtx, OpNode};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::kernels::hugepage;

/// Converts a constant to a run-time tensor (materialising raw or splat payloads).
pub(super) fn materialise(tensor: &Tensor) -> Option<RtTensor> {
    let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
    let count: usize = shape.iter().product();
    let data = if tensor.dtype.is_float() {
        match &tensor.data {
            TensorData::Splat(v) => RtData::F32(hugepage::filled(count, *v as f32)),
            TensorData::Opaque => return None,
            // Weights stream from DRAM on every run: on huge pages when large.
            _ => RtData::F32(hugepage::adopt(tensor.all_f32()?)),
        }
    } else {
        match &tensor.data {
            TensorData::Splat(v) => RtData::I64(vec![*v as i64; count]),
            TensorData::Opaque => return None,
            _ => RtData::I64(tensor.all_i64()?),
        }
    };
    Some(RtTensor { shape, data })
}

fn to_analysis_tensor(t: &RtTensor, dtype: DType) -> Tensor {
    let shape = t.shape.iter().map(|&d| d as u64).collect();
    match &t.data {
        RtData::F32(v) => Tensor {
            dtype,
            shape,
            data: TensorData::F64(v.iter().map(|&x| x as f64).collect()),
        },
        RtData::I64(v) => Tensor {
            dtype,
            shape,
            data: TensorData::I64(v.clone()),
        },
    }
}

/// Runs one step with constant inputs at plan time (for opaque constants).
pub(super) fn run_once(
    graph: &Graph,
    step: &Step,
    slots: &[Slot],
    threads: usize,
    opset: i64,
) -> Result<Vec<RtTensor>, ExecError> {
    let ins: Vec<Option<&RtTensor>> = step
        .inputs
        .iter()
        .map(|s| {
            s.and_then(|v| match &slots[v] {
                Slot::Const(t) => Some(&**t),
                _ => None,
            })
        })
        .collect();
    let out_shapes: Vec<Vec<usize>> = step
        .outputs
        .iter()
        .map(|&v| dims(&graph.values[v].fact).unwrap_or_default())
        .collect();
    let node = &graph.dag[step.node];
    let (in_types, out_types) = element_types(graph, &step.inputs, &node.outputs);
    execute_owned(
        step,
        node,
        opset,
        &ins,
        (&in_types, &out_types),
        &out_shapes,
        threads,
    )
}

/// Executes a step on owned tensors (plan-time folding and the generic path).
fn execute_owned(
    step: &Step,
    node: &Node,
    opset: i64,
    ins: &[Option<&RtTensor>],
    (in_types, out_types): (&[Option<DType>], &[DType]),
    out_shapes: &[Vec<usize>],
    threads: usize,
) -> Result<Vec<RtTensor>, ExecError> {
    if matches!(step.kernel, Kernel::Generic) {
        return generic_eval(node, opset, ins, in_types, out_types);
    }
    let mut outs: Vec<Vec<f32>> = out_shapes
        .iter()
        .map(|s| vec![0.0; s.iter().product()])
        .collect();
    let in_refs: Vec<Option<InRef>> = ins.iter().map(|t| t.map(InRef::from_tensor)).collect();
    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    let mut scratch = vec![0.0; step.scratch];
    let mut dynamic_out = Vec::new();
    cpu::run(
        step,
        &mut Io {
            ins: &in_refs,
            outs: &mut out_refs,
            dynamic_out: &mut dynamic_out,
            scratch: &mut scratch,
            spare_integers: &mut Vec::new(),
            threads,
        },
    )
    .map_err(|e| node_error(node, e))?;
    if !dynamic_out.is_empty() {
        // The planned shapes, as the run loop stores them (a kernel may write a scalar as [1]).
        return Ok(dynamic_out
            .into_iter()
            .zip(out_shapes)
            .map(|(t, shape)| RtTensor {
                shape: shape.clone(),
                ..t
            })
            .collect());
    }
    Ok(outs
        .into_iter()
        .zip(out_shapes)
        .zip(out_types)
        .map(|((v, s), t)| RtTensor {
            shape: s.clone(),
            data: if t.is_float() {
                RtData::F32(v)
            } else {
                RtData::I64(v.iter().map(|&x| x as i64).collect())
            },
        })
        .collect())
}

/// The element types of a step's inputs (`None` for an omitted one) and outputs: the run-time
/// tensors only say float or integer, and some kernels (BitCast, control flow) need more.
pub(super) fn element_types(
    graph: &Graph,
    inputs: &[Option<crate::analysis::graph::ValueId>],
    outputs: &[crate::analysis::graph::ValueId],
) -> (Vec<Option<DType>>, Vec<DType>) {
    (
        inputs
            .iter()
            .map(|slot| slot.map(|v| graph.values[v].fact.dtype))
            .collect(),
        outputs
            .iter()
            .map(|&v| graph.values[v].fact.dtype)
            .collect(),
    )
}

/// Attribute the plan adds to its copy of a control-flow node: the indices of the node's
/// inputs that are constants of the enclosing graph (weights a branch reads), which its bodies
/// take as constants (packed once, folded) rather than as run-time inputs. Not an ONNX
/// attribute: the copy lives in the plan only and is never exported.
pub(crate) const CONSTANT_INPUTS_ATTR: &str = "roofline.constant_inputs";

/// Attribute the plan adds to its copy of a control-flow node: the names its bodies read from
/// the enclosing graph (`control::free_names`), worked out once when the plan is built.
/// Walking the bodies on every run of the node took a third of a Silero VAD's run, whose
/// network sits in nested If branches. Not an ONNX attribute, like [`CONSTANT_INPUTS_ATTR`].
pub(crate) const IMPLICIT_NAMES_ATTR: &str = "roofline.implicit_names";

/// The plan's copy of a generic step's node (see [`CONSTANT_INPUTS_ATTR`] and
/// [`IMPLICIT_NAMES_ATTR`]).
pub(super) fn generic_node(
    graph: &Graph,
    inputs: &[Option<crate::analysis::graph::ValueId>],
    node: &Node,
) -> Node {
    let mut node = node.clone();
    if node.attrs.has_subgraph() {
        let constant: Vec<i64> = inputs
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_some_and(|v| graph.values[v].fact.konst.is_some()))
            .map(|(index, _)| index as i64)
            .collect();
        let names = crate::analysis::ops::control::free_names(&node.attrs);
        node.attrs.0.insert(
            CONSTANT_INPUTS_ATTR.to_string(),
            crate::analysis::graph::Attr::Ints(constant),
        );
        node.attrs.0.insert(
            IMPLICIT_NAMES_ATTR.to_string(),
            crate::analysis::graph::Attr::Strings(names),
        );
    }
    node
}

/// Evaluates an op on lent tensors: through its reference kernel when it has one
/// (`reference.rs`), else through the analysis layer's constant evaluator (small integer
/// tensors). `in_types` and `out_types` are the element types of the node's inputs and outputs.
pub(super) fn generic_eval(
    node: &Node,
    opset: i64,
    ins: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
    out_types: &[DType],
) -> Result<Vec<RtTensor>, ExecError> {
    if super::reference::covers(&node.domain, &node.op_type) {
        return super::reference::run(node, opset, ins, in_types, out_types)
            .map_err(|e| node_error(node, e));
    }
    let op =
        ops::lookup(&node.domain, &node.op_type).ok_or_else(|| node_error(node, "unknown op"))?;
    let facts: Vec<Option<TensorFact>> = ins
        .iter()
        .map(|t| {
            t.as_ref().map(|t| {
                let dtype = if matches!(t.data, RtData::F32(_)) {
                    DType::F32
                } else {
                    DType::I64
                };
                TensorFact::constant(to_analysis_tensor(t, dtype))
            })
        })
        .collect();
    let refs: Vec<Option<&TensorFact>> = facts.iter().map(Option::as_ref).collect();
    let ctx = InferCtx {
        node: OpNode {
            name: &node.name,
            op_type: &node.op_type,
            attrs: &node.attrs,
            opset,
        },
        inputs: refs,
        output_count: node.outputs.len(),
        outer: None,
    };
    let outputs = op.infer(&ctx).map_err(|e| node_error(node, e))?;
    outputs
        .into_iter()
        .take(node.outputs.len())
        .map(|fact| {
            let konst = fact
                .konst
                .ok_or_else(|| node_error(node, "this op has no kernel for run-time values"))?;
            materialise(&konst)
                .ok_or_else(|| node_error(node, "result too large to evaluate generically"))
        })
        .collect()
}
