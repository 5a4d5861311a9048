//! Structural validation of an imported graph, before inference: what onnxruntime's checker
//! refuses and the shape rules cannot see. Each standard op's input and output counts against
//! its schema (the widest range over the opsets the tool handles) and attribute ranges (groups,
//! strides, kernel sizes, dilations, pads, split sizes). Tensor element counts, unique producers
//! and undefined inputs are checked while importing (`import.rs`); checks that need shapes
//! (split sizes against the axis, TopK's k, a conv bias's length) are the ops' own `infer`,
//! which report them through `ops::invalid` so they end the run instead of becoming warnings.
//!
//! The point of failing here is that the kernels can then trust what they are handed: a model
//! the checker would reject never reaches the planner.

use super::error::AnalysisError;
use super::graph::{Graph, Node};

/// Unbounded count of a variadic input or output.
const MANY: usize = usize::MAX;

/// `(min inputs, max inputs, min outputs, max outputs)` of a standard (`ai.onnx`) op, over every
/// opset from 1 to 23; `None` for ops whose schema the tool does not carry.
/// Source: the ONNX operator specification (onnx/docs/Operators.md), per op's "Inputs" and
/// "Outputs" sections, optional inputs counted in the maximum.
pub fn arity(op_type: &str) -> Option<(usize, usize, usize, usize)> {
    Some(match op_type {
        "Relu" | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "ThresholdedRelu" | "Sigmoid"
        | "HardSigmoid" | "HardSwish" | "Tanh" | "Gelu" | "Erf" | "Softplus" | "Softsign"
        | "Mish" | "Sqrt" | "Exp" | "Log" | "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan"
        | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh" | "Neg" | "Abs" | "Reciprocal"
        | "Floor" | "Ceil" | "Round" | "Sign" | "Not" | "IsNaN" | "IsInf" | "Shrink"
        | "BitwiseNot" | "Softmax" | "LogSoftmax" | "Hardmax" | "Identity" | "Transpose"
        | "Flatten" | "Shape" | "Size" | "NonZero" | "DepthToSpace" | "SpaceToDepth"
        | "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" | "LpNormalization" | "LRN"
        | "Cast" | "ArgMax" | "ArgMin" | "EyeLike" | "AveragePool" | "LpPool"
        | "ConstantOfShape" => (1, 1, 1, 1),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "PRelu" | "BitShift" | "Equal" | "Less"
        | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor" | "BitwiseAnd"
        | "BitwiseOr" | "BitwiseXor" | "MatMul" | "CastLike" | "Gather" | "GatherElements"
        | "GatherND" | "Expand" | "CumSum" => (2, 2, 1, 1),
        "Sum" | "Max" | "Min" | "Mean" | "Concat" => (1, MANY, 1, 1),
        "Clip" => (1, 3, 1, 1),
        "Where"
        | "Range"
        | "OneHot"
        | "ScatterND"
        | "ScatterElements"
        | "Scatter"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "RoiAlign" => (3, 3, 1, 1),
        "Conv" | "ConvTranspose" | "Gemm" => (2, 3, 1, 1),
        "MatMulInteger" | "ConvInteger" => (2, 4, 1, 1),
        "QLinearConv" => (8, 9, 1, 1),
        "QLinearMatMul" => (8, 8, 1, 1),
        "QuantizeLinear" | "DequantizeLinear" => (2, 3, 1, 1),
        "DynamicQuantizeLinear" => (1, 1, 3, 3),
        "BatchNormalization" => (5, 5, 1, 5),
        "LayerNormalization" => (2, 3, 1, 3),
        "MaxPool" => (1, 1, 1, 2),
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => (1, 2, 1, 1),
        "TopK" => (1, 2, 2, 2),
        "Dropout" => (1, 3, 1, 2),
        "Reshape" | "Squeeze" | "Unsqueeze" | "Upsample" | "Trilu" => (1, 2, 1, 1),
        "Split" => (1, 2, 1, MANY),
        "Slice" => (1, 5, 1, 1),
        "Pad" | "Resize" => (1, 4, 1, 1),
        "Tile" => (2, 3, 1, 1),
        "Constant" => (0, 0, 1, 1),
        "LSTM" => (3, 8, 0, 3),
        "GRU" | "RNN" => (3, 6, 0, 2),
        "If" => (1, 1, 1, MANY),
        "Loop" => (2, MANY, 1, MANY),
        "Scan" => (1, MANY, 1, MANY),
        "NonMaxSuppression" => (2, 5, 1, 1),
        "Einsum" => (1, MANY, 1, 1),
        _ => return None,
    })
}

fn node_error(node: &Node, reason: String) -> AnalysisError {
    AnalysisError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        reason,
    }
}

fn count_range(min: usize, max: usize) -> String {
    match (min, max) {
        (a, b) if a == b => format!("{a}"),
        (a, MANY) => format!("at least {a}"),
        (a, b) => format!("{a} to {b}"),
    }
}

/// Checks every node's arity and attribute ranges. The first problem found is the error.
pub fn validate_graph(graph: &Graph) -> Result<(), AnalysisError> {
    for id in graph.dag.node_indices() {
        let node = &graph.dag[id];
        let standard = node.domain.is_empty() || node.domain == "ai.onnx";
        if standard {
            if let Some((min_in, max_in, min_out, max_out)) = arity(&node.op_type) {
                // Trailing optional inputs may be left out or given as empty names.
                let given_in = node
                    .inputs
                    .iter()
                    .rposition(Option::is_some)
                    .map_or(0, |i| i + 1);
                if node.inputs.len() < min_in || given_in > max_in || node.inputs.len() > max_in {
                    return Err(node_error(
                        node,
                        format!(
                            "has {} input(s); the ONNX schema allows {}",
                            node.inputs.len(),
                            count_range(min_in, max_in)
                        ),
                    ));
                }
                // Loop lists its trip count and condition, but either may be left empty.
                let required = if node.op_type == "Loop" { 0 } else { min_in };
                if let Some(missing) = (0..required).find(|&i| node.inputs[i].is_none()) {
                    return Err(node_error(
                        node,
                        format!("required input #{missing} is left empty"),
                    ));
                }
                if node.outputs.len() < min_out || node.outputs.len() > max_out {
                    return Err(node_error(
                        node,
                        format!(
                            "has {} output(s); the ONNX schema allows {}",
                            node.outputs.len(),
                            count_range(min_out, max_out)
                        ),
                    ));
                }
            }
        }
        check_attributes(node)?;
    }
    Ok(())
}

fn ints<'a>(node: &'a Node, name: &str) -> Option<&'a [i64]> {
    node.attrs.ints(name)
}

fn check_attributes(node: &Node) -> Result<(), AnalysisError> {
    let op = node.op_type.as_str();
    let convolution = matches!(
        op,
        "Conv" | "ConvTranspose" | "QLinearConv" | "ConvInteger" | "FusedConv"
    );
    let pooling = matches!(op, "MaxPool" | "AveragePool" | "LpPool");
    if convolution {
        if let Some(group) = node.attrs.int("group") {
            if group < 1 {
                return Err(node_error(node, format!("group = {group}; it must be ≥ 1")));
            }
        }
    }
    if convolution || pooling {
        for (name, least) in [("strides", 1), ("dilations", 1), ("kernel_shape", 1)] {
            if let Some(values) = ints(node, name) {
                if let Some(bad) = values.iter().find(|&&v| v < least) {
                    return Err(node_error(
                        node,
                        format!("{name} {values:?} holds {bad}; each must be ≥ {least}"),
                    ));
                }
            }
        }
        if let Some(pads) = ints(node, "pads") {
            if pads.iter().any(|&p| p < 0) {
                return Err(node_error(
                    node,
                    format!("pads {pads:?} are negative; they must be ≥ 0"),
                ));
            }
            if let Some(kernel) = ints(node, "kernel_shape") {
                if pads.len() != 2 * kernel.len() {
                    return Err(node_error(
                        node,
                        format!(
                            "pads {pads:?} must hold a begin and an end for each of the {} spatial axes",
                            kernel.len()
                        ),
                    ));
                }
            }
        }
    }
    if op == "Split" {
        if let Some(split) = ints(node, "split") {
            if split.iter().any(|&s| s < 0) {
                return Err(node_error(
                    node,
                    format!("split sizes {split:?} are negative"),
                ));
            }
            if split.len() != node.outputs.len() {
                return Err(node_error(
                    node,
                    format!(
                        "{} split sizes for {} outputs",
                        split.len(),
                        node.outputs.len()
                    ),
                ));
            }
        }
    }
    if op == "TopK" {
        if let Some(k) = node.attrs.int("k") {
            if k < 0 {
                return Err(node_error(node, format!("k = {k}; it must be ≥ 0")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::{Attr, Attributes};
    use crate::analysis::tensor::{DType, TensorFact};

    fn graph_with(op_type: &str, inputs: usize, outputs: usize, attrs: Attributes) -> Graph {
        let mut graph = Graph::default();
        let ins = (0..inputs)
            .map(|i| Some(graph.add_value(format!("in{i}"), TensorFact::unknown(DType::F32))))
            .collect();
        let outs = (0..outputs)
            .map(|i| graph.add_value(format!("out{i}"), TensorFact::unknown(DType::F32)))
            .collect();
        graph.add_node(Node {
            name: "n".into(),
            op_type: op_type.into(),
            domain: String::new(),
            attrs,
            inputs: ins,
            outputs: outs,
        });
        graph
    }

    fn message(graph: &Graph) -> String {
        validate_graph(graph).unwrap_err().to_string()
    }

    #[test]
    fn arity_against_the_schema() {
        assert!(validate_graph(&graph_with("Relu", 1, 1, Attributes::default())).is_ok());
        assert!(message(&graph_with("Relu", 2, 1, Attributes::default())).contains("allows 1"));
        assert!(message(&graph_with("Add", 1, 1, Attributes::default())).contains("allows 2"));
        assert!(message(&graph_with("Conv", 1, 1, Attributes::default())).contains("2 to 3"));
        assert!(validate_graph(&graph_with("Conv", 3, 1, Attributes::default())).is_ok());
        assert!(validate_graph(&graph_with("Concat", 7, 1, Attributes::default())).is_ok());
        assert!(message(&graph_with("TopK", 2, 1, Attributes::default())).contains("output"));
        // Unknown ops and other domains are not judged here.
        assert!(validate_graph(&graph_with("FancyOp", 9, 9, Attributes::default())).is_ok());
    }

    #[test]
    fn empty_required_input_is_refused() {
        let mut graph = graph_with("Conv", 3, 1, Attributes::default());
        let id = graph.dag.node_indices().next().unwrap();
        graph.dag[id].inputs[1] = None;
        assert!(message(&graph).contains("required input #1"));
        // An empty optional bias is fine.
        let mut graph = graph_with("Conv", 3, 1, Attributes::default());
        graph.dag[id].inputs[2] = None;
        assert!(validate_graph(&graph).is_ok());
    }

    #[test]
    fn attribute_ranges() {
        let attrs = |pairs: Vec<(&str, Attr)>| {
            let mut a = Attributes::default();
            for (k, v) in pairs {
                a.0.insert(k.to_string(), v);
            }
            a
        };
        let conv = |a| graph_with("Conv", 2, 1, a);
        assert!(message(&conv(attrs(vec![("group", Attr::Int(0))]))).contains("group = 0"));
        assert!(
            message(&conv(attrs(vec![("strides", Attr::Ints(vec![1, 0]))]))).contains("strides")
        );
        assert!(
            message(&conv(attrs(vec![("pads", Attr::Ints(vec![0, -1, 0, 0]))]))).contains("pads")
        );
        assert!(validate_graph(&conv(attrs(vec![("group", Attr::Int(4))]))).is_ok());
        let split = graph_with(
            "Split",
            1,
            2,
            attrs(vec![("split", Attr::Ints(vec![1, 2, 3]))]),
        );
        assert!(message(&split).contains("3 split sizes for 2 outputs"));
        let topk = graph_with("TopK", 1, 2, attrs(vec![("k", Attr::Int(-1))]));
        assert!(message(&topk).contains("k = -1"));
    }
}
