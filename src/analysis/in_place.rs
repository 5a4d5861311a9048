//! Concats, Splits and Slices that the executor runs without copying, which the analysis
//! therefore costs as views: a Concat whose inputs their producers write straight into their
//! slices of its output, and a Split or Slice whose outputs are contiguous runs of its input,
//! read where they lie.
//! The analysis and the executor's plan both call these functions, so what the cost model
//! counts as free is what runs free.

use std::collections::{HashMap, HashSet};

use super::graph::{self, Graph};
use super::infer::NodeState;
use super::{tensor, VIEW_OPS};

/// Concats whose inputs their producers write straight into their slices of the output (the
/// executor's zero-copy Concat, as TensorRT's concat elimination): float, along an axis with
/// only size-1 dims before it (each input is then one contiguous slice), and every input a
/// value produced by a single-output node of the graph that is not a view op (nor a Split
/// or Slice that copies nothing, `slice_views`: it writes nothing to place), not a graph
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
    if has_subgraphs(graph, order) {
        return HashSet::new();
    }
    let live = |id: &graph::NodeId| !matches!(states.get(id), Some(NodeState::Folded));
    let mut producer: HashMap<graph::ValueId, graph::NodeId> = HashMap::new();
    for &id in order.iter().filter(|id| live(id)) {
        for &v in &graph.dag[id].outputs {
            producer.insert(v, id);
        }
    }
    // A Split or Slice that copies nothing leaves its outputs in its input's buffer: it writes
    // no part, and a part's writer reading one of its outputs reads that buffer too.
    let slices = slice_views(graph, order, states);
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
            let Some(&writer_id) = producer.get(&v) else {
                return false;
            };
            let writer = &graph.dag[writer_id];
            let fits = writer.outputs.len() == 1
                && !slices.contains(&writer_id)
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
    let mut views: HashMap<graph::ValueId, graph::ValueId> = order
        .iter()
        .filter(|id| live(id))
        .map(|&id| &graph.dag[id])
        .filter(|node| VIEW_OPS.contains(&node.op_type.as_str()))
        .filter_map(|node| Some((*node.outputs.first()?, (*node.inputs.first()?)?)))
        .collect();
    for id in &slices {
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

/// Whether a node of `order` holds a subgraph: its body reads values by name, past these
/// rules' scans of the graph, so neither places anything there.
fn has_subgraphs(graph: &Graph, order: &[graph::NodeId]) -> bool {
    order.iter().any(|&id| graph.dag[id].attrs.has_subgraph())
}

/// Drops, until none is left, the candidate in-place Concats (`(key, parts)`) one of whose
/// parts is written by a step that reads a value of the same buffer: a producer cannot read
/// the buffer it writes. A part written by another candidate Concat is exempt (that Concat
/// runs nothing, so reads nothing). `views` maps a view's output to its input, `writer_reads`
/// gives the values a part's writer reads, `whole` a candidate's output. Shared by the cost
/// model's rule (`in_place_concats`) and the executor's placement (`exec::plan`), which starts
/// from fewer candidates.
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

/// Splits and Slices that copy nothing: each output is one contiguous run of the input, read
/// where it lies in the input's buffer (the executor's zero-copy Split and Slice, as YOLOv8's
/// C2f blocks and attention's packed QKV need; `exec::plan` places them). A float Split of a
/// computed value (not a constant) along an axis with only size-1 dims before it, into at least
/// two outputs; a float Slice of a computed value with constant bounds that `slice_offset`
/// finds contiguous. Every input after the data is a constant (split sizes, starts, ends,
/// axes, steps): the executor runs a Split or Slice with a computed one on its generic
/// evaluator, which copies. Outputs of known shapes, none a graph output. No reader writes
/// into a buffer it reads (the executor has no in-place kernels), so the outputs stay as the
/// input left them for as long as any of them is read. Empty in graphs with subgraphs (they
/// read values by name, past this scan).
pub fn slice_views(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> HashSet<graph::NodeId> {
    if has_subgraphs(graph, order) {
        return HashSet::new();
    }
    order
        .iter()
        .copied()
        .filter(|id| !matches!(states.get(id), Some(NodeState::Folded)))
        .filter(|&id| {
            let node = &graph.dag[id];
            if !node.domain.is_empty() && node.domain != "ai.onnx" {
                return false;
            }
            let Some(Some(source)) = node.inputs.first() else {
                return false;
            };
            let fact = &graph.values[*source].fact;
            let Some(shape) = fact.concrete_shape() else {
                return false;
            };
            let outputs_fit = node.outputs.iter().all(|out| {
                let out_fact = &graph.values[*out].fact;
                out_fact.dtype == tensor::DType::F32
                    && out_fact.concrete_shape().is_some()
                    && !graph.outputs.contains(out)
            });
            let parameters_constant = node.inputs[1..]
                .iter()
                .flatten()
                .all(|&v| graph.values[v].fact.konst.is_some());
            if fact.dtype != tensor::DType::F32
                || fact.konst.is_some()
                || !outputs_fit
                || !parameters_constant
            {
                return false;
            }
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            match node.op_type.as_str() {
                "Split" => {
                    let rank = shape.len() as i64;
                    let axis = node.attrs.int_or("axis", 0);
                    let axis = if axis < 0 { axis + rank } else { axis };
                    node.outputs.len() >= 2
                        && (0..rank).contains(&axis)
                        && shape[..axis as usize].iter().product::<usize>() == 1
                }
                "Slice" => {
                    let Some(out_shape) = graph.values[node.outputs[0]].fact.concrete_shape()
                    else {
                        return false;
                    };
                    let out_shape: Vec<usize> = out_shape.iter().map(|&d| d as usize).collect();
                    let konst = |i: usize| -> Option<Vec<i64>> {
                        graph.values[(*node.inputs.get(i)?)?]
                            .fact
                            .konst
                            .as_ref()?
                            .to_i64_vec()
                    };
                    let bounds = if graph.opset < 10 {
                        let attr = |name: &str| node.attrs.ints(name).map(<[i64]>::to_vec);
                        (attr("starts"), attr("axes"), None)
                    } else {
                        (konst(1), konst(3), konst(4))
                    };
                    let (Some(starts), axes, steps) = bounds else {
                        return false;
                    };
                    let (starts, steps) = slice_starts(&shape, &starts, axes.as_deref(), steps);
                    slice_offset(&shape, &starts, &steps, &out_shape).is_some()
                }
                _ => false,
            }
        })
        .collect()
}

/// A Slice's start and step on every axis of an input of `shape` (axes it does not name start
/// at 0 with step 1), from its `starts`, `axes` and `steps` as ONNX gives them: negative
/// starts count from the end, and starts are clamped into the axis (to `-1..dim` for negative
/// steps). The executor's Slice kernel and `slice_views` read a Slice the same way.
pub fn slice_starts(
    shape: &[usize],
    starts: &[i64],
    axes: Option<&[i64]>,
    steps: Option<Vec<i64>>,
) -> (Vec<isize>, Vec<isize>) {
    let rank = shape.len();
    let axes: Vec<usize> = match axes {
        Some(axes) => axes
            .iter()
            .map(|&a| {
                let a = if a < 0 { a + rank as i64 } else { a };
                a.clamp(0, rank.saturating_sub(1) as i64) as usize
            })
            .collect(),
        None => (0..starts.len().min(rank)).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    let mut first = vec![0isize; rank];
    let mut stride = vec![1isize; rank];
    for ((&axis, &start), &step) in axes.iter().zip(starts).zip(&steps) {
        let dim = shape[axis] as i64;
        let start = if start < 0 { start + dim } else { start };
        let start = if step > 0 {
            start.clamp(0, dim)
        } else {
            start.clamp(-1, dim - 1)
        };
        first[axis] = start as isize;
        stride[axis] = step as isize;
    }
    (first, stride)
}

/// Where a slice of an input of `shape` (per-axis `starts` and `steps`, giving `out_shape`)
/// begins, in elements, when it is one contiguous run of the input: every axis it narrows
/// after the first has its whole extent, the dims before the first narrowed axis are 1, and
/// no axis of more than one output element runs backwards or skips. `None` otherwise, and
/// for empty slices.
pub fn slice_offset(
    shape: &[usize],
    starts: &[isize],
    steps: &[isize],
    out_shape: &[usize],
) -> Option<usize> {
    let rank = shape.len();
    if out_shape.len() != rank || starts.len() != rank || steps.len() != rank {
        return None;
    }
    if out_shape.iter().product::<usize>() == 0 {
        return None;
    }
    if (0..rank).any(|axis| out_shape[axis] > 1 && steps[axis] != 1) {
        return None;
    }
    let Some(narrowed) = (0..rank).find(|&axis| out_shape[axis] != shape[axis]) else {
        // The whole input, in order.
        return Some(0);
    };
    let whole_after = (narrowed + 1..rank).all(|axis| out_shape[axis] == shape[axis]);
    let start = usize::try_from(starts[narrowed]).ok()?;
    (whole_after
        && shape[..narrowed].iter().product::<usize>() == 1
        && start + out_shape[narrowed] <= shape[narrowed])
        .then(|| start * shape[narrowed + 1..].iter().product::<usize>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_is_one_run_only_along_an_outer_axis() {
        let shape = [3, 1, 8, 40, 15];
        let ones = [1isize; 5];
        // The second of three heads of a packed QKV tensor: one run, 4800 elements in.
        let (starts, steps) = slice_starts(&shape, &[1], Some(&[0]), None);
        assert_eq!(starts, [1, 0, 0, 0, 0]);
        assert_eq!(
            slice_offset(&shape, &starts, &steps, &[1, 1, 8, 40, 15]),
            Some(8 * 40 * 15)
        );
        // A negative start counts from the end.
        let (starts, _) = slice_starts(&shape, &[-1], Some(&[0]), None);
        assert_eq!(
            slice_offset(&shape, &starts, &ones, &[1, 1, 8, 40, 15]),
            Some(2 * 4800)
        );
        // Rows 10..30 of every one of 8 planes: 8 runs, not one.
        let shape = [1, 8, 40, 15];
        let (starts, steps) = slice_starts(&shape, &[10], Some(&[2]), None);
        assert_eq!(slice_offset(&shape, &starts, &steps, &[1, 8, 20, 15]), None);
        // Channels 2..6 of one image: one run of four planes.
        let (starts, steps) = slice_starts(&shape, &[2], Some(&[1]), None);
        assert_eq!(
            slice_offset(&shape, &starts, &steps, &[1, 4, 40, 15]),
            Some(2 * 600)
        );
        // Every other channel, or the channels reversed: strided.
        let (starts, steps) = slice_starts(&shape, &[0], Some(&[1]), Some(vec![2]));
        assert_eq!(slice_offset(&shape, &starts, &steps, &[1, 4, 40, 15]), None);
        let (starts, steps) = slice_starts(&shape, &[-1], Some(&[1]), Some(vec![-1]));
        assert_eq!(starts[1], 7);
        assert_eq!(slice_offset(&shape, &starts, &steps, &[1, 8, 40, 15]), None);
        // One channel taken backwards is still one run; an empty slice is not placed.
        assert_eq!(
            slice_offset(&shape, &[0, 7, 0, 0], &[1, -1, 1, 1], &[1, 1, 40, 15]),
            Some(7 * 600)
        );
        assert_eq!(
            slice_offset(&shape, &[0, 8, 0, 0], &ones[..4], &[1, 0, 40, 15]),
            None
        );
        // Two images before the axis: two runs.
        let shape = [2, 8, 4];
        assert_eq!(
            slice_offset(&shape, &[0, 2, 0], &ones[..3], &[2, 4, 4]),
            None
        );
    }
}
