//! Concats and Splits that the executor runs without copying, which the analysis therefore
//! costs as views: a Concat whose inputs their producers write straight into their slices of
//! its output, and a Split along an outer axis whose outputs are slices of its input's buffer.
//! The analysis and the executor's plan both call these functions, so what the cost model
//! counts as free is what runs free.

use std::collections::{HashMap, HashSet};

use super::graph::{self, Graph};
use super::infer::NodeState;
use super::{tensor, VIEW_OPS};

/// Concats whose inputs their producers write straight into their slices of the output (the
/// executor's zero-copy Concat, as TensorRT's concat elimination): float, along an axis with
/// only size-1 dims before it (each input is then one contiguous slice), and every input a
/// value produced by a single-output node of the graph that is not a view op, not a graph
/// output, read once by this Concat and by no other such Concat; a Concat whose input's
/// producer reads a value that would share the buffer (through these Concats or views) is
/// left out, as a producer cannot read the buffer it writes. The analysis costs them as views;
/// the executor places them (`exec::plan`), adding only its own kernels' constraints. Empty
/// in graphs with subgraphs.
pub fn in_place_concats(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> HashSet<graph::NodeId> {
    if order.iter().any(|&id| graph.dag[id].attrs.has_subgraph()) {
        return HashSet::new();
    }
    let live = |id: &graph::NodeId| !matches!(states.get(id), Some(NodeState::Folded));
    let mut producer: HashMap<graph::ValueId, graph::NodeId> = HashMap::new();
    for &id in order.iter().filter(|id| live(id)) {
        for &v in &graph.dag[id].outputs {
            producer.insert(v, id);
        }
    }
    let mut candidates: Vec<(graph::NodeId, Vec<graph::ValueId>)> = Vec::new();
    let mut placed: HashSet<graph::ValueId> = HashSet::new();
    for &id in order.iter().filter(|id| live(id)) {
        let node = &graph.dag[id];
        if node.op_type != "Concat" || (!node.domain.is_empty() && node.domain != "ai.onnx") {
            continue;
        }
        let Some(&whole) = node.outputs.first() else {
            continue;
        };
        let fact = &graph.values[whole].fact;
        let Some(shape) = fact.concrete_shape() else {
            continue;
        };
        let rank = shape.len() as i64;
        let axis = node.attrs.int_or("axis", 0);
        let axis = if axis < 0 { axis + rank } else { axis };
        if fact.dtype != tensor::DType::F32 || !(0..rank).contains(&axis) {
            continue;
        }
        if shape[..axis as usize].iter().product::<u64>() != 1 {
            continue;
        }
        let mut parts = Vec::new();
        let ok = node.inputs.iter().all(|input| {
            let Some(v) = *input else { return false };
            let Some(&writer) = producer.get(&v) else {
                return false;
            };
            let writer = &graph.dag[writer];
            let fits = writer.outputs.len() == 1
                && !VIEW_OPS.contains(&writer.op_type.as_str())
                && graph.values[v].fact.konst.is_none()
                && !graph.outputs.contains(&v)
                && node.inputs.iter().filter(|&&i| i == Some(v)).count() == 1
                && !placed.contains(&v);
            if fits {
                parts.push(v);
            }
            fits
        });
        if ok && !parts.is_empty() {
            placed.extend(parts.iter().copied());
            candidates.push((id, parts));
        }
    }
    // A Split that copies nothing puts its outputs in its input's buffer: a part's writer
    // reading one of them reads that buffer too.
    let splits = split_views(graph, order, states);
    let mut views: HashMap<graph::ValueId, graph::ValueId> = order
        .iter()
        .filter(|id| live(id))
        .map(|&id| &graph.dag[id])
        .filter(|node| VIEW_OPS.contains(&node.op_type.as_str()))
        .filter_map(|node| Some((*node.outputs.first()?, (*node.inputs.first()?)?)))
        .collect();
    for id in &splits {
        let node = &graph.dag[*id];
        if let Some(Some(source)) = node.inputs.first() {
            views.extend(node.outputs.iter().map(|&out| (out, *source)));
        }
    }
    drop_self_reading_concats(
        &mut candidates,
        &views,
        |part| {
            graph.dag[producer[&part]]
                .inputs
                .iter()
                .flatten()
                .copied()
                .collect()
        },
        |id| graph.dag[id].outputs[0],
    );
    candidates.into_iter().map(|(id, _)| id).collect()
}

/// Drops, until none is left, the candidate in-place Concats (`(key, parts)`) one of whose
/// parts is written by a step that reads a value of the same buffer: a producer cannot read
/// the buffer it writes. A part written by another candidate Concat is exempt (that Concat
/// runs nothing, so reads nothing). `views` maps a view's output to its input, `writer_reads`
/// gives the values a part's writer reads, `whole` a candidate's output. Shared by the cost model's rule
/// (`in_place_concats`) and the executor's placement (`exec::plan`), which starts from fewer
/// candidates.
pub fn drop_self_reading_concats<K: Copy>(
    candidates: &mut Vec<(K, Vec<graph::ValueId>)>,
    views: &HashMap<graph::ValueId, graph::ValueId>,
    writer_reads: impl Fn(graph::ValueId) -> Vec<graph::ValueId>,
    whole: impl Fn(K) -> graph::ValueId,
) {
    loop {
        let mut parent = views.clone();
        let mut placed_wholes: HashSet<graph::ValueId> = HashSet::new();
        for (key, parts) in candidates.iter() {
            let whole = whole(*key);
            placed_wholes.insert(whole);
            for &part in parts {
                parent.insert(part, whole);
            }
        }
        let root = |mut v: graph::ValueId| {
            while let Some(&up) = parent.get(&v) {
                v = up;
            }
            v
        };
        let conflict = candidates.iter().position(|(_, parts)| {
            parts.iter().any(|&part| {
                // Parts have one writer with one output: a placed Concat's part is its whole.
                !placed_wholes.contains(&part)
                    && writer_reads(part)
                        .into_iter()
                        .any(|read| root(read) == root(part))
            })
        });
        match conflict {
            Some(at) => {
                candidates.remove(at);
            }
            None => break,
        }
    }
}

/// Splits that copy nothing: each output is a slice of the input's buffer (the executor's
/// zero-copy Split, as YOLOv8's C2f blocks need; `exec::plan` places them). A float Split of a
/// computed value (not a constant), along an axis with only size-1 dims before it (so each
/// output is one contiguous run of the input), into at least two outputs of known shapes,
/// none of them a graph output. No reader writes into a buffer it reads (the executor has no
/// in-place kernels), so the outputs stay as the input left them for as long as any of them
/// is read. Empty in graphs with subgraphs (they read values by name, past this scan).
pub fn split_views(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> HashSet<graph::NodeId> {
    if order.iter().any(|&id| graph.dag[id].attrs.has_subgraph()) {
        return HashSet::new();
    }
    order
        .iter()
        .copied()
        .filter(|id| !matches!(states.get(id), Some(NodeState::Folded)))
        .filter(|&id| {
            let node = &graph.dag[id];
            if node.op_type != "Split"
                || (!node.domain.is_empty() && node.domain != "ai.onnx")
                || node.outputs.len() < 2
            {
                return false;
            }
            let Some(Some(source)) = node.inputs.first() else {
                return false;
            };
            let fact = &graph.values[*source].fact;
            let Some(shape) = fact.concrete_shape() else {
                return false;
            };
            let rank = shape.len() as i64;
            let axis = node.attrs.int_or("axis", 0);
            let axis = if axis < 0 { axis + rank } else { axis };
            fact.dtype == tensor::DType::F32
                && fact.konst.is_none()
                && (0..rank).contains(&axis)
                && shape[..axis as usize].iter().product::<u64>() == 1
                && node.outputs.iter().all(|out| {
                    let out_fact = &graph.values[*out].fact;
                    out_fact.dtype == tensor::DType::F32
                        && out_fact.concrete_shape().is_some()
                        && !graph.outputs.contains(out)
                })
        })
        .collect()
}
