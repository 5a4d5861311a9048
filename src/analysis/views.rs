//! Nodes the executor runs inside a reader's step, which the analysis therefore costs as
//! views: operands a MatMul reads through a view instead of a copy (Transposes as operand
//! strides, multiplications by a scalar constant as the GEMM's alpha), and comparisons that
//! only a Cast to float reads (run by the Cast's step). The analysis and the executor's plan
//! both call these functions.

use std::collections::HashMap;

use super::graph::{self, Graph};
use super::infer::NodeState;
use super::tensor;

/// How a MatMul reads one operand that the plan folded into the read: the value it reads, the
/// permutation it reads it through (a folded Transpose) and a scale (a folded multiplication by
/// a scalar constant, applied as the GEMM's alpha).
#[derive(Clone, Debug, PartialEq)]
pub struct OperandView {
    pub source: graph::ValueId,
    pub perm: Option<Vec<usize>>,
    pub scale: f32,
}

/// Transposes and scalings a MatMul reads through instead of a copy: a GEMM reads an operand in
/// any layout at the same cost and scales its product by alpha for free, as the executor and
/// onnxruntime's MatMul fusions (transpose and scale into `FusedMatMul`) do. Exporters write
/// scaled dot-product attention as `Transpose(K) → Mul(√scale) → MatMul`, which would otherwise
/// copy the whole KV cache twice per step.
///
/// A node folds when it is a float Transpose (rank ≥ 2) or a `Mul` of a float tensor by a
/// one-element float constant that does not broadcast it, not a graph output, and every reader
/// is a plain MatMul or another folding node; a chain holds at most one Transpose. Value (a
/// folded node's output) → what a reader of it reads. The analysis costs folded nodes as views
/// and the executor runs no step for them. None in graphs with subgraphs (they read values by
/// name, past this scan).
pub fn matmul_operand_views(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> HashMap<graph::ValueId, OperandView> {
    let mut views = HashMap::new();
    if order.iter().any(|&id| graph.dag[id].attrs.has_subgraph()) {
        return views;
    }
    let mut readers: HashMap<graph::ValueId, Vec<graph::NodeId>> = HashMap::new();
    for &id in order {
        for &value in graph.dag[id].inputs.iter().flatten() {
            readers.entry(value).or_default().push(id);
        }
    }
    // A candidate's data input and its own contribution: a permutation or a scale.
    enum Step {
        Permute(Vec<usize>),
        Scale(f32),
    }
    let candidate = |id: graph::NodeId| -> Option<(graph::ValueId, graph::ValueId, Step)> {
        let node = &graph.dag[id];
        let inferred = matches!(states.get(&id), None | Some(NodeState::Inferred));
        if !node.domain.is_empty() || !inferred {
            return None;
        }
        let [output] = node.outputs.as_slice() else {
            return None;
        };
        let fact = &graph.values[*output].fact;
        let rank = fact.shape.as_deref().map(<[_]>::len)?;
        if fact.dtype != tensor::DType::F32 || fact.is_constant() || graph.outputs.contains(output)
        {
            return None;
        }
        match node.op_type.as_str() {
            "Transpose" if rank >= 2 => {
                let source = (*node.inputs.first()?)?;
                let perm: Vec<usize> = match node.attrs.ints("perm") {
                    Some(perm) => perm.iter().map(|&p| p as usize).collect(),
                    None => (0..rank).rev().collect(),
                };
                (perm.len() == rank).then_some((*output, source, Step::Permute(perm)))
            }
            "Mul" if node.inputs.len() == 2 => {
                let (Some(left), Some(right)) = (node.inputs[0], node.inputs[1]) else {
                    return None;
                };
                let scalar = |v: graph::ValueId| {
                    let fact = &graph.values[v].fact;
                    let konst = fact.konst.as_deref()?;
                    let values = konst.to_f32_vec()?;
                    (fact.dtype.is_float() && values.len() == 1 && fact.rank()? <= rank)
                        .then(|| values[0])
                };
                let (data, scale) = match (scalar(left), scalar(right)) {
                    (None, Some(scale)) => (left, scale),
                    (Some(scale), None) => (right, scale),
                    _ => return None,
                };
                let data_fact = &graph.values[data].fact;
                (data_fact.shape == fact.shape && !data_fact.is_constant()).then_some((
                    *output,
                    data,
                    Step::Scale(scale),
                ))
            }
            _ => None,
        }
    };
    // Backwards, so that a node's readers are decided before it: folds[node] = whether the
    // chain below it holds a Transpose.
    let mut folds: HashMap<graph::NodeId, bool> = HashMap::new();
    let mut steps: HashMap<graph::ValueId, (graph::ValueId, Step)> = HashMap::new();
    for &id in order.iter().rev() {
        let Some((output, source, step)) = candidate(id) else {
            continue;
        };
        let Some(node_readers) = readers.get(&output).filter(|r| !r.is_empty()) else {
            continue;
        };
        let mut transpose_below = false;
        let all_fold = node_readers.iter().all(|&r| {
            let reader = &graph.dag[r];
            if reader.op_type == "MatMul" && reader.domain.is_empty() {
                return true;
            }
            match folds.get(&r) {
                Some(&below) => {
                    transpose_below |= below;
                    true
                }
                None => false,
            }
        });
        let is_transpose = matches!(step, Step::Permute(_));
        if all_fold && !(is_transpose && transpose_below) {
            folds.insert(id, is_transpose || transpose_below);
            steps.insert(output, (source, step));
        }
    }
    // Forwards, resolving each folded value down to what is stored.
    for &id in order {
        let Some(&output) = graph.dag[id].outputs.first() else {
            continue;
        };
        let Some((source, step)) = steps.get(&output) else {
            continue;
        };
        let mut view = views.get(source).cloned().unwrap_or(OperandView {
            source: *source,
            perm: None,
            scale: 1.0,
        });
        match step {
            Step::Permute(perm) => view.perm = Some(perm.clone()),
            Step::Scale(scale) => view.scale *= scale,
        }
        views.insert(output, view);
    }
    views
}

/// The comparisons whose booleans only a `Cast` to a float type reads, by that Cast: the
/// executor runs each pair as one step (the Cast's) that writes 0.0 / 1.0 straight into the
/// float output. It holds booleans as i64, so the pair otherwise wrote and read 8 bytes per
/// element (a one-hot's 2048 × 257 `Equal` → `Cast` in magika: 455 + 345 µs, where onnxruntime
/// writes and reads one byte per element in 119 + 230; as one step 180). The analysis costs
/// the comparison as a view and charges its work and reads to the Cast. None in graphs with
/// subgraphs.
pub fn compare_casts(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> HashMap<graph::NodeId, graph::NodeId> {
    const COMPARISONS: [&str; 5] = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"];
    let mut pairs = HashMap::new();
    if order.iter().any(|&id| graph.dag[id].attrs.has_subgraph()) {
        return pairs;
    }
    let runs = |id: graph::NodeId| matches!(states.get(&id), None | Some(NodeState::Inferred));
    let mut readers: HashMap<graph::ValueId, usize> = HashMap::new();
    for &id in order {
        for &value in graph.dag[id].inputs.iter().flatten() {
            *readers.entry(value).or_default() += 1;
        }
    }
    for &id in order {
        let cast = &graph.dag[id];
        if cast.op_type != "Cast" || !cast.domain.is_empty() || !runs(id) {
            continue;
        }
        let ([Some(mask)], [out]) = (cast.inputs.as_slice(), cast.outputs.as_slice()) else {
            continue;
        };
        let Some(compare_id) = graph.values[*mask].producer else {
            continue;
        };
        let compare = &graph.dag[compare_id];
        let operands_alike = |kind: fn(tensor::DType) -> bool| {
            compare.inputs.len() == 2
                && compare
                    .inputs
                    .iter()
                    .all(|v| v.is_some_and(|v| kind(graph.values[v].fact.dtype)))
        };
        let fuses = compare.domain.is_empty()
            && COMPARISONS.contains(&compare.op_type.as_str())
            && runs(compare_id)
            && !graph.values[*mask].fact.is_constant()
            && graph.values[*out].fact.dtype.is_float()
            && (operands_alike(tensor::DType::is_float)
                || operands_alike(|d| !d.is_float() && d != tensor::DType::String))
            && readers.get(mask) == Some(&1)
            && !graph.outputs.contains(mask);
        if fuses {
            pairs.insert(id, compare_id);
        }
    }
    pairs
}
