//! Opset-6-and-earlier broadcasting made explicit on import. Before opset 7 a binary op with
//! `broadcast = 1` and an `axis` aligns B with A from that axis (Caffe2-era exports add a
//! `[C]` bias to `[N, C, H, W]` with `axis = 1`), where numpy, and everything in this tool,
//! aligns trailing dims; and PRelu before opset 7 applies a 1-D slope per channel (axis 1).
//! Each such operand is given its trailing unit dims once, here: a constant by a reshaped copy,
//! a computed value through an Unsqueeze, and the attributes are dropped, so shape inference,
//! the rewrites and the kernels all see the numpy form.

use super::graph::{Attr, Attributes, Graph, Node, ValueId};
use super::tensor::{Tensor, TensorFact};

/// The binary ops that carried `broadcast`/`axis` before opset 7.
const LEGACY_BINARY: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less",
];

/// Rewrites every legacy-broadcast operand of `graph` (see the module doc); returns how many.
/// Ranks come from an inference of a copy of the graph: an operand whose rank it cannot tell is
/// left as it was (inference then reports the mismatch on that node).
pub fn explicit_broadcasting(graph: &mut Graph) -> usize {
    if graph.opset >= 7 {
        return 0;
    }
    let is_legacy = |node: &Node| {
        let standard = node.domain.is_empty() || node.domain == "ai.onnx";
        standard
            && (node.op_type == "PRelu"
                || (LEGACY_BINARY.contains(&node.op_type.as_str())
                    && node.attrs.int_or("broadcast", 0) == 1))
    };
    if !graph.dag.node_indices().any(|id| is_legacy(&graph.dag[id])) {
        return 0;
    }
    let mut probe = graph.clone();
    // Failures leave ranks unknown, which skips those nodes.
    let _ = super::infer::infer_graph(&mut probe);
    let rank = |v: ValueId| probe.values.get(v).and_then(|value| value.fact.rank());
    let mut rewritten = 0;
    let mut nodes = Vec::new();
    for mut node in graph.nodes_in_order() {
        if !is_legacy(&node) {
            nodes.push(node);
            continue;
        }
        let (Some(Some(a)), Some(Some(b))) = (node.inputs.first(), node.inputs.get(1)) else {
            nodes.push(node);
            continue;
        };
        let (a, b) = (*a, *b);
        let (Some(rank_a), Some(rank_b)) = (rank(a), rank(b)) else {
            nodes.push(node);
            continue;
        };
        // Where B's first dim sits in A: `axis` for the binary ops (suffix alignment, numpy's,
        // without one), the channel axis for PRelu's 1-D slope.
        let start = if node.op_type == "PRelu" {
            (rank_b == 1 && rank_a >= 3).then_some(1)
        } else {
            node.attrs
                .int("axis")
                .map(|axis| if axis < 0 { axis + rank_a as i64 } else { axis })
        };
        let trailing = start
            .map(|start| rank_a as i64 - start - rank_b as i64)
            .filter(|&t| t > 0 && t <= rank_a as i64);
        if let Some(trailing) = trailing {
            let ones = trailing as usize;
            let name = format!("{}_legacy_broadcast", graph.values[b].name);
            let reshaped = match graph.values[b].fact.konst.as_deref() {
                Some(tensor) => {
                    let mut shape = tensor.shape.clone();
                    shape.extend(std::iter::repeat_n(1, ones));
                    let copy = Tensor {
                        shape,
                        ..tensor.clone()
                    };
                    graph.add_value(name, TensorFact::constant(copy))
                }
                None => {
                    let out =
                        graph.add_value(name, TensorFact::unknown(graph.values[b].fact.dtype));
                    let mut attrs = Attributes::default();
                    attrs.0.insert(
                        "axes".into(),
                        Attr::Ints((rank_b..rank_b + ones).map(|a| a as i64).collect()),
                    );
                    nodes.push(Node {
                        name: format!("{}_legacy_broadcast", node.name),
                        op_type: "Unsqueeze".into(),
                        domain: String::new(),
                        attrs,
                        inputs: vec![Some(b)],
                        outputs: vec![out],
                    });
                    out
                }
            };
            node.inputs[1] = Some(reshaped);
            rewritten += 1;
        }
        node.attrs.0.remove("broadcast");
        node.attrs.0.remove("axis");
        nodes.push(node);
    }
    graph.rebuild(nodes);
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::infer::infer_graph;
    use crate::analysis::tensor::DType;

    fn legacy_graph(opset: i64, op: &str, b_shape: &[u64], constant: bool) -> (Graph, ValueId) {
        let mut graph = Graph {
            name: "legacy".into(),
            opset,
            ir_version: 3,
            ..Graph::default()
        };
        let x = graph.add_value("x", TensorFact::known(DType::F32, &[2, 3, 4, 5]));
        graph.inputs.push(x);
        let b = if constant {
            let count: u64 = b_shape.iter().product();
            let values: Vec<f32> = (0..count).map(|i| i as f32).collect();
            graph.add_value(
                "b",
                TensorFact::constant(Tensor::from_f32(b_shape.to_vec(), values)),
            )
        } else {
            let b = graph.add_value("b", TensorFact::known(DType::F32, b_shape));
            graph.inputs.push(b);
            b
        };
        let y = graph.add_value("y", TensorFact::unknown(DType::F32));
        let mut attrs = Attributes::default();
        if op != "PRelu" {
            attrs.0.insert("broadcast".into(), Attr::Int(1));
            attrs.0.insert("axis".into(), Attr::Int(1));
        }
        graph.add_node(Node {
            name: "op".into(),
            op_type: op.into(),
            domain: String::new(),
            attrs,
            inputs: vec![Some(x), Some(b)],
            outputs: vec![y],
        });
        graph.outputs.push(y);
        (graph, y)
    }

    #[test]
    fn a_channel_bias_gets_its_trailing_unit_dims() {
        // Add(x [2, 3, 4, 5], b [3], broadcast=1, axis=1): b is [3, 1, 1] in numpy's terms.
        let (mut graph, y) = legacy_graph(6, "Add", &[3], true);
        // As the model says it, numpy's rule cannot broadcast [3] against [.., 4, 5].
        let mut untouched = graph.clone();
        let _ = infer_graph(&mut untouched);
        assert_eq!(untouched.values[y].fact.concrete_shape(), None);
        assert_eq!(explicit_broadcasting(&mut graph), 1);
        infer_graph(&mut graph).unwrap();
        assert_eq!(
            graph.values[y].fact.concrete_shape(),
            Some(vec![2, 3, 4, 5])
        );
        let node = graph.nodes_in_order().pop().unwrap();
        let b = node.inputs[1].unwrap();
        assert_eq!(
            graph.values[b].fact.konst.as_ref().unwrap().shape,
            [3, 1, 1]
        );
        assert!(node.attrs.get("axis").is_none() && node.attrs.get("broadcast").is_none());
    }

    #[test]
    fn a_computed_operand_goes_through_an_unsqueeze() {
        // B [3, 4] from axis 1 of a rank-4 A: one trailing dim, added by Unsqueeze(axes=[2]).
        let (mut graph, y) = legacy_graph(5, "Mul", &[3, 4], false);
        assert_eq!(explicit_broadcasting(&mut graph), 1);
        infer_graph(&mut graph).unwrap();
        assert_eq!(
            graph.values[y].fact.concrete_shape(),
            Some(vec![2, 3, 4, 5])
        );
        let ops: Vec<String> = graph
            .nodes_in_order()
            .into_iter()
            .map(|n| n.op_type)
            .collect();
        assert_eq!(ops, ["Unsqueeze", "Mul"]);
    }

    #[test]
    fn prelu_before_opset_7_has_a_slope_per_channel() {
        let (mut graph, y) = legacy_graph(6, "PRelu", &[3], true);
        assert_eq!(explicit_broadcasting(&mut graph), 1);
        infer_graph(&mut graph).unwrap();
        assert_eq!(
            graph.values[y].fact.concrete_shape(),
            Some(vec![2, 3, 4, 5])
        );
        // From opset 7 the numpy rule is the op's own: nothing changes.
        let (mut modern, _) = legacy_graph(7, "PRelu", &[5], true);
        assert_eq!(explicit_broadcasting(&mut modern), 0);
    }
}
