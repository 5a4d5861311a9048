//! Unit tests for `advisor::export`: ONNX model reconstruction from the edited graph.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::analysis::edit::collect_outer_reads;
use crate::analysis::import;

fn info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}

fn weight(name: &str, value: f32) -> TensorProto {
    TensorProto {
        dims: vec![1, 4],
        data_type: 1,
        name: name.into(),
        float_data: vec![value; 4],
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: format!("{op}_{output}"),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

fn branch(name: &str, nodes: Vec<NodeProto>, output: &str) -> GraphProto {
    GraphProto {
        name: name.into(),
        node: nodes,
        output: vec![info(output, 1, &[1, 4])],
        ..Default::default()
    }
}

fn if_node(cond: &str, then: GraphProto, otherwise: GraphProto, output: &str) -> NodeProto {
    let graph_attr = |name: &str, g: GraphProto| AttributeProto {
        name: name.into(),
        r#type: attribute_type::GRAPH,
        g: Some(g),
        ..Default::default()
    };
    node(
        "If",
        &[cond],
        output,
        vec![
            graph_attr("then_branch", then),
            graph_attr("else_branch", otherwise),
        ],
    )
}

/// `h = x + w` (also an output); `y = If(cond) { h + a } else { If(cond) { h * c } else
/// { h - c } * b }`: `a`, `b` and `c` are top-level initializers only the branches read.
/// `if_first` lists the If before the node producing `h` (which it reads only by name).
fn if_model(if_first: bool, extra_read: Option<&str>) -> ModelProto {
    let inner = if_node(
        "cond",
        branch(
            "inner_then",
            vec![node("Mul", &["h", "c"], "it", vec![])],
            "it",
        ),
        branch(
            "inner_else",
            vec![node("Sub", &["h", "c"], "ie", vec![])],
            "ie",
        ),
        "inner",
    );
    let mut then_nodes = vec![node("Add", &["h", "a"], "t", vec![])];
    if let Some(name) = extra_read {
        then_nodes.push(node("Add", &["t", name], "t2", vec![]));
    }
    let then_out = if extra_read.is_some() { "t2" } else { "t" };
    let choose = if_node(
        "cond",
        branch("then", then_nodes, then_out),
        branch(
            "else",
            vec![inner, node("Mul", &["inner", "b"], "e", vec![])],
            "e",
        ),
        "y",
    );
    let add = node("Add", &["x", "w"], "h", vec![]);
    let nodes = if if_first {
        vec![choose, add]
    } else {
        vec![add, choose]
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            name: "if_model".into(),
            node: nodes,
            initializer: vec![
                weight("w", 1.0),
                weight("a", 2.0),
                weight("b", 3.0),
                weight("c", 4.0),
            ],
            input: vec![info("x", 1, &[1, 4]), info("cond", 9, &[])],
            output: vec![info("y", 1, &[1, 4]), info("h", 1, &[1, 4])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn graph_of(model: &ModelProto) -> Graph {
    import::import_model(model, Path::new("."), Path::new("if_model.onnx")).unwrap()
}

fn initializer_names(model: &ModelProto) -> BTreeSet<String> {
    model
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

#[test]
fn initializers_read_only_by_subgraphs_are_written() {
    let model = to_model(&graph_of(&if_model(false, None))).unwrap();
    let names = initializer_names(&model);
    for name in ["a", "b", "c", "w"] {
        assert!(names.contains(name), "`{name}` dropped: {names:?}");
    }
    let graph = model.graph.as_ref().unwrap();
    let a = graph.initializer.iter().find(|t| t.name == "a").unwrap();
    assert_eq!(a.dims, vec![1, 4]);
    assert_eq!(&a.raw_data[..], &2.0f32.to_le_bytes().repeat(4)[..]);
    // The branches themselves are written unchanged.
    let choose = graph.node.iter().find(|n| n.op_type == "If").unwrap();
    assert_eq!(choose.attribute.len(), 2);
}

#[test]
fn export_without_rewrites_keeps_the_initializer_names() {
    let source = if_model(false, None);
    let exported = to_model(&graph_of(&source)).unwrap();
    assert_eq!(initializer_names(&exported), initializer_names(&source));
    // And a second round trip through the exported file changes nothing.
    let again = to_model(&graph_of(&exported)).unwrap();
    assert_eq!(initializer_names(&again), initializer_names(&source));
}

#[test]
fn advise_keeps_the_initializers_subgraphs_read() {
    let source = if_model(false, None);
    let device = crate::device::find_device("rtx2080ti")
        .unwrap()
        .to_profile();
    let (_, rewritten) = crate::advisor::advise(
        graph_of(&source),
        "if_model",
        &device,
        &Default::default(),
        &Default::default(),
    )
    .unwrap();
    let exported = to_model(&rewritten).unwrap();
    assert_eq!(initializer_names(&exported), initializer_names(&source));
}

#[test]
fn advise_keeps_the_producers_of_values_only_subgraphs_read() {
    // `h` is no graph output here: only the branches read it, by name.
    let mut source = if_model(false, None);
    source.graph.as_mut().unwrap().output.truncate(1);
    let device = crate::device::find_device("rtx2080ti")
        .unwrap()
        .to_profile();
    let (_, rewritten) = crate::advisor::advise(
        graph_of(&source),
        "if_model",
        &device,
        &Default::default(),
        &Default::default(),
    )
    .unwrap();
    let exported = to_model(&rewritten).unwrap();
    let g = exported.graph.as_ref().unwrap();
    assert!(g.node.iter().any(|n| n.output == ["h"]), "{:?}", g.node);
    assert_eq!(initializer_names(&exported), initializer_names(&source));
}

#[test]
fn outer_values_are_produced_before_the_node_whose_subgraph_reads_them() {
    // The file lists the If first; its branches read `h`, which the Add produces.
    let model = to_model(&graph_of(&if_model(true, None))).unwrap();
    let ops: Vec<&str> = model
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert_eq!(ops, ["Add", "If"]);
}

#[test]
fn subgraph_read_of_an_unknown_value_is_an_error() {
    let err = to_model(&graph_of(&if_model(false, Some("ghost")))).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ghost") && text.contains("outer scope"),
        "{text}"
    );
    // A graph input read only by a branch is fine and is not made an initializer.
    let model = to_model(&graph_of(&if_model(false, Some("x")))).unwrap();
    assert!(!initializer_names(&model).contains("x"));
}

#[test]
fn large_splat_constants_become_constant_of_shape() {
    let mut graph = graph_of(&if_model(false, None));
    let set = |graph: &mut Graph, name: &str, shape: Vec<u64>| {
        let id = graph.value_by_name(name).unwrap();
        graph.values[id].fact.konst = Some(Arc::new(Tensor {
            dtype: DType::F32,
            shape,
            data: TensorData::Splat(0.5),
        }));
    };
    // Past what `to_f64_vec` materialises (a folded ConstantOfShape of VGG's FC weight).
    set(&mut graph, "a", vec![5000, 1000]);
    set(&mut graph, "b", vec![2, 2]);
    let model = to_model(&graph).unwrap();
    let g = model.graph.as_ref().unwrap();
    let names: BTreeSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    assert!(!names.contains("a") && names.contains("b"), "{names:?}");
    let gen = &g.node[0];
    assert_eq!(
        (gen.op_type.as_str(), gen.output[0].as_str()),
        ("ConstantOfShape", "a")
    );
    let shape = g
        .initializer
        .iter()
        .find(|t| t.name == gen.input[0])
        .unwrap();
    assert_eq!(
        &shape.raw_data[..],
        &[5000i64.to_le_bytes(), 1000i64.to_le_bytes()].concat()[..]
    );
    let value = gen.attribute[0].t.as_ref().unwrap();
    assert_eq!(
        (value.dims.as_slice(), &value.raw_data[..]),
        (&[1i64][..], &0.5f32.to_le_bytes()[..])
    );
    let b = g.initializer.iter().find(|t| t.name == "b").unwrap();
    assert_eq!(&b.raw_data[..], &0.5f32.to_le_bytes().repeat(4)[..]);
}

#[test]
fn outer_reads_respect_the_subgraph_own_names() {
    let mut reads = BTreeSet::new();
    let g = branch(
        "g",
        vec![
            node("Add", &["local_in", "outer1"], "mid", vec![]),
            node("Mul", &["mid", "own_init"], "out", vec![]),
        ],
        "out",
    );
    let g = GraphProto {
        input: vec![info("local_in", 1, &[1])],
        initializer: vec![weight("own_init", 0.0)],
        ..g
    };
    collect_outer_reads(&g, &mut reads);
    assert_eq!(reads.into_iter().collect::<Vec<_>>(), ["outer1"]);
}

/// `x · w` (w a [1, 4] initializer) whose Mul node is rewritten into the tool's op `op_type`
/// with `attrs`.
fn fused_graph(op_type: &str, attrs: &[(&str, Attr)]) -> Graph {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            name: "fused".into(),
            node: vec![node("Mul", &["x", "w"], "y", vec![])],
            initializer: vec![weight("w", 2.0)],
            input: vec![info("x", 1, &[1, 4])],
            output: vec![info("y", 1, &[1, 4])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut graph = graph_of(&model);
    for node in graph.dag.node_weights_mut() {
        node.op_type = op_type.into();
        node.domain = DOMAIN.into();
        for (k, v) in attrs {
            node.attrs.0.insert(k.to_string(), v.clone());
        }
    }
    graph
}

fn op_types(model: &ModelProto) -> Vec<String> {
    let graph = model.graph.as_ref().unwrap();
    graph.node.iter().map(|n| n.op_type.clone()).collect()
}

#[test]
fn fused_ops_expand_through_the_vocabulary() {
    let steps = |s: &[&str]| Attr::Strings(s.iter().map(|s| s.to_string()).collect());
    let chain = fused_graph(
        "ElementwiseChain",
        &[(
            "steps",
            steps(&["const:mul:1:1", "unary:gelu:0:0", "input:add:0"]),
        )],
    );
    let model = to_model(&chain).unwrap();
    assert_eq!(
        op_types(&model),
        ["Mul", "Div", "Erf", "Add", "Mul", "Mul", "Add"]
    );
    // The swapped constant comes first.
    let first = &model.graph.as_ref().unwrap().node[0];
    assert_eq!(first.input, ["w", "x"]);
    let gemm = fused_graph(
        "FusedMatMul",
        &[
            ("activation", Attr::String("hard_swish".into())),
            ("act_alpha", Attr::Float(0.0)),
        ],
    );
    // Opset 13 has no HardSwish.
    assert_eq!(
        op_types(&to_model(&gemm).unwrap()),
        ["MatMul", "HardSigmoid", "Mul"]
    );
}

#[test]
fn unknown_activations_and_chain_steps_are_export_errors() {
    let err = |graph: &Graph| match to_model(graph) {
        Err(ExportError::Node { reason, .. }) => reason,
        other => panic!("expected a node error, got {other:?}"),
    };
    let conv = fused_graph(
        "FusedMatMul",
        &[("activation", Attr::String("swish".into()))],
    );
    assert!(err(&conv).contains("unknown activation `swish`"));
    for step in ["unary:swish:0:0", "const:mod:1:0", "const:mul:3:0"] {
        let chain = fused_graph(
            "ElementwiseChain",
            &[("steps", Attr::Strings(vec![step.into()]))],
        );
        assert!(err(&chain).contains(step), "{step}");
    }
}
