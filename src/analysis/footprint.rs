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

/// Parameters held inside the control-flow bodies of `graph`'s nodes (If branches, Loop and
/// Scan bodies, nested): their float and 8-bit initializers and Constant nodes. Silero VAD
/// keeps its whole network in If branches, and showed 0 parameters.
pub(crate) fn subgraph_params(graph: &Graph) -> u64 {
    use super::graph::Attr;
    graph
        .dag
        .node_weights()
        .flat_map(|node| node.attrs.0.values())
        .map(|attr| match attr {
            Attr::Graph(body) => body_params(body),
            Attr::Graphs(bodies) => bodies.iter().map(|body| body_params(body)).sum(),
            _ => 0,
        })
        .sum()
}

fn body_params(body: &super::onnx_proto::GraphProto) -> u64 {
    let counted = |tensor: &super::onnx_proto::TensorProto| -> u64 {
        let weight = super::tensor::DType::from_onnx(tensor.data_type).is_some_and(|dtype| {
            dtype.is_float() || matches!(dtype, super::tensor::DType::I8 | super::tensor::DType::U8)
        });
        if weight {
            tensor
                .dims
                .iter()
                .map(|&d| d.max(0) as u64)
                .fold(1u64, u64::saturating_mul)
        } else {
            0
        }
    };
    let initializers: u64 = body.initializer.iter().map(counted).sum();
    let nested: u64 = body
        .node
        .iter()
        .flat_map(|node| node.attribute.iter())
        .map(|attr| {
            let constant = attr.t.as_ref().map_or(0, counted);
            let inner = attr.g.as_ref().map_or(0, body_params);
            let listed: u64 = attr.graphs.iter().map(body_params).sum();
            constant + inner + listed
        })
        .sum();
    initializers.saturating_add(nested)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::{Attr, Attributes, Node};
    use crate::analysis::tensor::{DType, Tensor, TensorFact};
    use crate::builtin::builder::{GraphBuilder, SigDim};
    use crate::builtin::WeightFill;

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

    /// An If whose branches hold a 16×8 weight and a 4-element float constant (then), an
    /// 8-element float constant and a Loop body nested in it with a 3×5 weight (else): 128 +
    /// 4 + 8 + 15 parameters; the int64 shape constant beside them is not one.
    #[test]
    fn weights_inside_control_flow_bodies_are_parameters() {
        let body = |build: &dyn Fn(&mut GraphBuilder)| {
            let mut b = GraphBuilder::new(WeightFill::Zeros);
            build(&mut b);
            b.finish("body").graph.unwrap_or_default()
        };
        let then_branch = body(&|b| {
            let x = b.input("x", 1, &[1, 16].map(SigDim::Fixed));
            let w = b.weight("w", &[16, 8], 16);
            let bias = b.float_const("bias", &[4], &[0.0; 4]);
            let _shape = b.int64_const("shape", &[1, 8]);
            let y = b.node("MatMul", &[&x, &w], vec![]);
            b.output(&y, 1, &[1, 8].map(SigDim::Fixed));
            b.output(&bias, 1, &[4].map(SigDim::Fixed));
        });
        let loop_body = body(&|b| {
            let w = b.weight("inner", &[3, 5], 3);
            b.output(&w, 1, &[3, 5].map(SigDim::Fixed));
        });
        let mut else_branch = body(&|b| {
            let y = b.filled("zeros", &[1, 8], 0.0);
            b.output(&y, 1, &[1, 8].map(SigDim::Fixed));
        });
        else_branch
            .node
            .push(crate::analysis::onnx_proto::NodeProto {
                op_type: "Loop".into(),
                attribute: vec![crate::analysis::onnx_proto::AttributeProto {
                    name: "body".into(),
                    g: Some(loop_body),
                    ..Default::default()
                }],
                ..Default::default()
            });
        let mut graph = Graph::default();
        let mut attrs = Attributes::default();
        attrs.0.insert(
            "then_branch".into(),
            Attr::Graph(std::sync::Arc::new(then_branch)),
        );
        attrs.0.insert(
            "else_branch".into(),
            Attr::Graph(std::sync::Arc::new(else_branch)),
        );
        graph.add_node(Node {
            name: "if".into(),
            op_type: "If".into(),
            domain: String::new(),
            attrs,
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
        assert_eq!(subgraph_params(&graph), 16 * 8 + 4 + 8 + 3 * 5);
    }
}
