//! What one inference cycles through the caches: the weights, the graph's inputs and outputs,
//! and the activations live at once. The roofline places the weights at the level that holds
//! all of it (`Roof::place_weights`): between two reads of one weight, a run touches every
//! other weight and the activation buffers that the ops in between wrote.

use std::collections::{HashMap, HashSet};

use super::graph::{self, Graph};
use super::infer::NodeState;

/// Bytes one run cycles through: the weights, the graph's inputs and outputs and the peak of
/// the intermediate activations live at once.
pub(super) fn cycled_bytes(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> u64 {
    model_weight_bytes(graph, order, states)
        .saturating_add(graph_io_bytes(graph))
        .saturating_add(peak_live_activation_bytes(graph, order, states))
}

pub(crate) fn stored_bytes(graph: &Graph, value: usize) -> u64 {
    let fact = &graph.values[value].fact;
    fact.element_count()
        .map_or(0, |n| n.saturating_mul(fact.dtype.size_bytes()))
}

/// Bytes of the graph's inputs and outputs (at their stored widths).
fn graph_io_bytes(graph: &Graph) -> u64 {
    graph
        .inputs
        .iter()
        .chain(&graph.outputs)
        .map(|&v| stored_bytes(graph, v))
        .fold(0u64, u64::saturating_add)
}

/// Bytes of the float constants the model's running ops read.
pub(crate) fn model_weight_bytes(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> u64 {
    // By tensor: values holding the same weight (an Identity of it) are one set of bytes.
    let mut seen: HashSet<*const super::tensor::Tensor> = HashSet::new();
    let mut total: u64 = 0;
    for &id in order {
        if matches!(states.get(&id), Some(NodeState::Folded)) {
            continue;
        }
        for &value in graph.dag[id].inputs.iter().flatten() {
            let fact = &graph.values[value].fact;
            let Some(konst) = &fact.konst else {
                continue;
            };
            if fact.dtype.is_float() && seen.insert(std::sync::Arc::as_ptr(konst)) {
                total = total.saturating_add(stored_bytes(graph, value));
            }
        }
    }
    total
}

/// The most bytes of intermediate activations (neither constants nor graph inputs or
/// outputs, which [`graph_io_bytes`] counts) live at once when the ops run in `order`: an op's
/// outputs are live with its inputs, and a value dies after its last reader. Every runtime's
/// activation arena is at least this large (views may share memory, which this does not
/// discount).
fn peak_live_activation_bytes(
    graph: &Graph,
    order: &[graph::NodeId],
    states: &HashMap<graph::NodeId, NodeState>,
) -> u64 {
    let running: Vec<graph::NodeId> = order
        .iter()
        .copied()
        .filter(|id| !matches!(states.get(id), Some(NodeState::Folded)))
        .collect();
    let io: HashSet<usize> = graph.inputs.iter().chain(&graph.outputs).copied().collect();
    let counted = |value: usize| !io.contains(&value) && !graph.values[value].fact.is_constant();
    let mut last_read: HashMap<usize, usize> = HashMap::new();
    for (step, &id) in running.iter().enumerate() {
        for &value in graph.dag[id].inputs.iter().flatten() {
            last_read.insert(value, step);
        }
    }
    let (mut live, mut peak) = (0u64, 0u64);
    for (step, &id) in running.iter().enumerate() {
        let node = &graph.dag[id];
        for &value in node.outputs.iter().filter(|&&v| counted(v)) {
            live = live.saturating_add(stored_bytes(graph, value));
        }
        peak = peak.max(live);
        let mut freed: HashSet<usize> = HashSet::new();
        let dying = node
            .inputs
            .iter()
            .flatten()
            .chain(&node.outputs)
            .filter(|&&v| counted(v) && last_read.get(&v).is_none_or(|&last| last <= step));
        for &value in dying {
            if freed.insert(value) {
                live = live.saturating_sub(stored_bytes(graph, value));
            }
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::{Attributes, Node};
    use crate::analysis::tensor::{DType, Tensor, TensorFact};

    /// x → A → a → B → b; C(a, b) → y; D(b) → d read by nobody; A reads weight w.
    fn chain() -> (Graph, Vec<graph::NodeId>) {
        let mut graph = Graph::default();
        let floats = |n: u64| TensorFact::known(DType::F32, &[n]);
        let x = graph.add_value("x", floats(10));
        let w = graph.add_value(
            "w",
            TensorFact::constant(Tensor::from_f32(vec![8], vec![0.5; 8])),
        );
        let a = graph.add_value("a", floats(25));
        let b = graph.add_value("b", floats(50));
        let d = graph.add_value("d", floats(1000));
        let y = graph.add_value("y", floats(5));
        graph.inputs = vec![x];
        graph.outputs = vec![y];
        let mut node = |name: &str, inputs: Vec<usize>, output: usize| {
            graph.add_node(Node {
                name: name.into(),
                op_type: "Op".into(),
                domain: String::new(),
                attrs: Attributes::default(),
                inputs: inputs.into_iter().map(Some).collect(),
                outputs: vec![output],
            })
        };
        let order = vec![
            node("A", vec![x, w], a),
            node("B", vec![a], b),
            node("D", vec![b], d),
            node("C", vec![a, b], y),
        ];
        (graph, order)
    }

    #[test]
    fn peak_live_activations_follow_the_order_the_ops_run_in() {
        let (graph, order) = chain();
        let states = HashMap::new();
        // After D: a (100 B) and b (200 B) wait for C, d (4000 B) was just written.
        assert_eq!(peak_live_activation_bytes(&graph, &order, &states), 4300);
        // The weights (32 B) and the graph's input and output (40 + 20 B) come on top.
        assert_eq!(cycled_bytes(&graph, &order, &states), 4300 + 32 + 60);
        // A folded op runs nothing and holds nothing.
        let folded: HashMap<_, _> = [(order[2], NodeState::Folded)].into_iter().collect();
        assert_eq!(peak_live_activation_bytes(&graph, &order, &folded), 300);
    }
}
