//! Structural validation of an imported graph, before inference: what onnxruntime's checker
//! refuses and the shape rules cannot see. Each standard-domain node is checked against the
//! signature its model's opset selects (`schema`, generated from the ONNX specification): the op
//! exists at that opset, input and output counts, required inputs present, every attribute known
//! with the right type and every required attribute given; then attribute ranges the schema does
//! not encode (groups, strides, kernel sizes, dilations, pads, split sizes, TopK's k). Tensor
//! element counts, unique producers and undefined inputs are checked while importing
//! (`import.rs`); checks that need shapes (split sizes against the axis, TopK's k, a conv bias's
//! length) are the ops' own `infer`, which reports them through `ops::invalid` so they end the
//! run instead of becoming warnings.
//!
//! The point of failing here is that the kernels can then trust what they are handed: a model
//! the checker would reject never reaches the planner.

use super::error::AnalysisError;
use super::graph::{Attr, Graph, Node};
use super::schema::{self, AttrKind};
use super::tensor::DType;

/// `(min inputs, max inputs, min outputs, max outputs)` of the newest signature of a standard
/// op (`usize::MAX` for variadic); `None` for ops the specification does not define.
pub fn arity(op_type: &str) -> Option<(usize, usize, usize, usize)> {
    let s = schema::latest(op_type)?;
    let wide = |n: u32| {
        if n == u32::MAX {
            usize::MAX
        } else {
            n as usize
        }
    };
    Some((
        wide(s.inputs.0),
        wide(s.inputs.1),
        wide(s.outputs.0),
        wide(s.outputs.1),
    ))
}

fn node_error(node: &Node, reason: String) -> AnalysisError {
    AnalysisError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        reason,
    }
}

/// Checks every node against its schema and the attribute ranges. The first problem found is
/// the error.
pub fn validate_graph(graph: &Graph) -> Result<(), AnalysisError> {
    for id in graph.dag.node_indices() {
        let node = &graph.dag[id];
        if node.domain.is_empty() || node.domain == "ai.onnx" {
            check_signature(node, graph.opset)?;
        }
        check_attributes(node, graph.opset)?;
    }
    Ok(())
}

fn count_range(min: u32, max: u32) -> String {
    match (min, max) {
        (a, b) if a == b => format!("{a}"),
        (a, u32::MAX) => format!("at least {a}"),
        (a, b) => format!("{a} to {b}"),
    }
}

fn kind_of(attr: &Attr) -> AttrKind {
    match attr {
        Attr::Float(_) => AttrKind::Float,
        Attr::Int(_) => AttrKind::Int,
        Attr::String(_) => AttrKind::String,
        Attr::Tensor(_) => AttrKind::Tensor,
        Attr::Graph(_) => AttrKind::Graph,
        Attr::Floats(_) => AttrKind::Floats,
        Attr::Ints(_) => AttrKind::Ints,
        Attr::Strings(_) => AttrKind::Strings,
        Attr::Tensors(_) => AttrKind::Tensors,
        Attr::Graphs(_) => AttrKind::Graphs,
    }
}

/// Whether a stored attribute has the declared type. Attributes whose type the file leaves
/// unset were decoded as their schema says (`import.rs`), so the comparison can be exact, as
/// the ONNX checker's is.
fn compatible(given: &Attr, expected: AttrKind) -> bool {
    kind_of(given) == expected
}

fn check_signature(node: &Node, opset: i64) -> Result<(), AnalysisError> {
    let Some(schema) = schema::lookup(&node.op_type, opset) else {
        return match schema::first_version(&node.op_type) {
            // An op newer than the model's opset: onnxruntime refuses it.
            Some(first) => Err(node_error(
                node,
                format!(
                    "{} exists from opset {} on, but the model imports opset {opset}",
                    node.op_type, first.since
                ),
            )),
            // Not a standard op at all: inference reports it as not costed.
            None => Ok(()),
        };
    };
    let (inputs, outputs) = (node.inputs.len() as u64, node.outputs.len() as u64);
    let within = |n: u64, (min, max): (u32, u32)| n >= u64::from(min) && n <= u64::from(max);
    if !within(inputs, schema.inputs) {
        return Err(node_error(
            node,
            format!(
                "has {inputs} input(s); the ONNX schema (opset {}) allows {}",
                schema.since,
                count_range(schema.inputs.0, schema.inputs.1)
            ),
        ));
    }
    if let Some(&missing) = schema
        .required_inputs
        .iter()
        .find(|&&i| node.inputs.get(i as usize).is_some_and(Option::is_none))
    {
        return Err(node_error(
            node,
            format!("required input #{missing} is left empty"),
        ));
    }
    if !within(outputs, schema.outputs) {
        return Err(node_error(
            node,
            format!(
                "has {outputs} output(s); the ONNX schema (opset {}) allows {}",
                schema.since,
                count_range(schema.outputs.0, schema.outputs.1)
            ),
        ));
    }
    for (name, value) in &node.attrs.0 {
        match schema.attribute(name) {
            None => {
                return Err(node_error(
                    node,
                    format!(
                        "has attribute `{name}`, which {} (opset {}) does not define",
                        node.op_type, schema.since
                    ),
                ))
            }
            Some((expected, _)) if !compatible(value, expected) => {
                return Err(node_error(
                    node,
                    format!(
                        "attribute `{name}` is {:?} but the ONNX schema wants {expected:?}",
                        kind_of(value)
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    // Sparse-tensor and type-proto attributes are not imported, so they cannot be asked for.
    if let Some((name, _, _)) = schema.attributes.iter().find(|(name, kind, required)| {
        *required
            && !node.attrs.0.contains_key(*name)
            && !matches!(kind, AttrKind::SparseTensor | AttrKind::TypeProto)
    }) {
        return Err(node_error(
            node,
            format!("the required attribute `{name}` is missing"),
        ));
    }
    Ok(())
}

/// Checks the element types of a node's inputs against its schema's type constraints: each
/// input's type must be one the constraint allows, and inputs sharing a type variable must agree.
/// `dtypes` holds, per input slot, the type when it is trustworthy (read from the file or
/// inferred by an op that succeeded); `None` slots are not judged. Errors are plain reasons.
pub fn check_input_types(node: &Node, opset: i64, dtypes: &[Option<DType>]) -> Result<(), String> {
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return Ok(());
    }
    let Some(schema) = schema::lookup(&node.op_type, opset) else {
        return Ok(());
    };
    let mut bound: Vec<(&str, DType, usize)> = Vec::new();
    for (slot, dtype) in dtypes.iter().enumerate() {
        let (Some(dtype), Some((var, allowed))) = (dtype, schema.input_type(slot)) else {
            continue;
        };
        if !allowed.is_empty() && !type_allowed(*dtype, allowed) {
            return Err(format!(
                "input #{slot} is {dtype}, which {} does not accept there",
                node.op_type
            ));
        }
        if var.is_empty() || matches!(dtype, DType::Other | DType::F8) {
            continue;
        }
        match bound.iter().find(|(v, _, _)| *v == var) {
            Some((_, first, first_slot)) if first != dtype => {
                return Err(format!(
                    "inputs #{first_slot} ({first}) and #{slot} ({dtype}) must have the same type ({var})"
                ))
            }
            Some(_) => {}
            None => bound.push((var, *dtype, slot)),
        }
    }
    Ok(())
}

/// Whether the tool's `dtype` is one of the allowed codes. The tool folds several ONNX types
/// into one (`F8`: the four 8-bit floats; `Other`: complex, 4-bit and newer types): those pass
/// when any of their members is allowed.
fn type_allowed(dtype: DType, allowed: &[i32]) -> bool {
    match dtype {
        DType::F8 => allowed.iter().any(|c| (17..=20).contains(c) || *c == 24),
        DType::Other => allowed
            .iter()
            .any(|c| matches!(c, 0 | 14 | 15 | 21..=23 | 25 | 26)),
        other => allowed.contains(&other.onnx_code()),
    }
}

/// Int attributes that are booleans in every op that has them.
const FLAG_ATTRIBUTES: &[&str] = &[
    "keepdims",
    "transA",
    "transB",
    "ceil_mode",
    "count_include_pad",
    "noop_with_empty_axes",
    "select_last_index",
    "exclusive",
    "reverse",
    "largest",
    "sorted",
    "allowzero",
    "detect_negative",
    "detect_positive",
    "center_point_box",
    "upper",
];

/// Largest window attribute (kernel size, stride, dilation, pad) accepted: far above any real
/// network, low enough that window arithmetic on 64 bits cannot overflow.
const MAX_WINDOW: i64 = 1 << 24;

fn ints<'a>(node: &'a Node, name: &str) -> Option<&'a [i64]> {
    node.attrs.ints(name)
}

fn check_attributes(node: &Node, opset: i64) -> Result<(), AnalysisError> {
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
        for (name, least) in [
            ("strides", 1),
            ("dilations", 1),
            ("kernel_shape", 1),
            ("pads", 0),
        ] {
            if let Some(values) = ints(node, name) {
                if let Some(bad) = values.iter().find(|&&v| v < least || v > MAX_WINDOW) {
                    return Err(node_error(
                        node,
                        format!(
                            "{name} {values:?} holds {bad}; each must be between {least} and {MAX_WINDOW}"
                        ),
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
    // Flags stored as ints: implementations disagree on what 2 or -1 means (`!= 0` or `== 1`),
    // so only 0 and 1 are accepted.
    for flag in FLAG_ATTRIBUTES {
        if let Some(value) = node.attrs.int(flag).filter(|v| !matches!(v, 0 | 1)) {
            if matches!(node.attrs.get(flag), Some(Attr::Int(_))) {
                return Err(node_error(
                    node,
                    format!("{flag} = {value}; it must be 0 or 1"),
                ));
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
    if op == "BatchNormalization" && opset >= 14 && node.outputs.len() == 2 {
        // From opset 14 the optional outputs come as a pair (running mean and variance).
        return Err(node_error(
            node,
            "has 2 outputs; it returns 1, or 3 in training mode".into(),
        ));
    }
    if op == "BatchNormalization" {
        // Training mode computes the batch statistics and must return them (outputs 2 and 3).
        match node.attrs.int("training_mode") {
            None | Some(0) => {}
            Some(1) if node.outputs.len() == 3 => {}
            Some(1) => {
                return Err(node_error(
                    node,
                    format!(
                        "training_mode = 1 needs 3 outputs, the node has {}",
                        node.outputs.len()
                    ),
                ))
            }
            Some(other) => {
                return Err(node_error(
                    node,
                    format!("training_mode = {other}; it must be 0 or 1"),
                ))
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
        let mut graph = Graph {
            opset: 17,
            ..Graph::default()
        };
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
        let concat = |n| {
            let mut attrs = Attributes::default();
            attrs.0.insert("axis".into(), Attr::Int(0));
            graph_with("Concat", n, 1, attrs)
        };
        assert!(validate_graph(&concat(7)).is_ok());
        assert!(message(&graph_with("Concat", 2, 1, Attributes::default()))
            .contains("`axis` is missing"));
        assert!(message(&graph_with("TopK", 2, 1, Attributes::default())).contains("output"));
        // Unknown ops are not judged here: inference reports them as not costed.
        assert!(validate_graph(&graph_with("FancyOp", 9, 9, Attributes::default())).is_ok());
        // An op newer than the model's opset.
        assert!(message(&graph_with("Gelu", 1, 1, Attributes::default())).contains("from opset 20"));
    }

    #[test]
    fn attributes_against_the_schema() {
        let with = |name: &str, value: Attr| {
            let mut attrs = Attributes::default();
            attrs.0.insert(name.into(), value);
            graph_with("Relu", 1, 1, attrs)
        };
        assert!(message(&with("alpha", Attr::Float(0.1))).contains("does not define"));
        let mut attrs = Attributes::default();
        attrs.0.insert("strides".into(), Attr::Int(2));
        assert!(message(&graph_with("Conv", 2, 1, attrs)).contains("wants Ints"));
        let mut attrs = Attributes::default();
        attrs.0.insert("alpha".into(), Attr::Int(0));
        assert!(message(&graph_with("LeakyRelu", 1, 1, attrs)).contains("wants Float"));
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
        // `split` is an attribute up to opset 12, TopK's `k` up to opset 9.
        let mut split = graph_with(
            "Split",
            1,
            2,
            attrs(vec![("split", Attr::Ints(vec![1, 2, 3]))]),
        );
        split.opset = 11;
        assert!(message(&split).contains("3 split sizes for 2 outputs"));
        let mut topk = graph_with("TopK", 1, 2, attrs(vec![("k", Attr::Int(-1))]));
        topk.opset = 1;
        assert!(message(&topk).contains("k = -1"));
    }
}
