//! Tests of the control-flow runner: plan caching across calls, enclosing values, loops.

use std::sync::Arc;

use super::*;
use crate::builtin::{GraphBuilder, SigDim, WeightFill};
use crate::exec::reference::lend;
use crate::exec::reference::test_node;

/// Loop body: (i, cond, v [3]) → (cond, v + 1, v).
fn counter() -> Attr {
    let mut b = GraphBuilder::new(WeightFill::Zeros);
    b.input("i", 7, &[]);
    let cond = b.input("cond", 9, &[]);
    let v = b.input("v", 1, &[SigDim::Fixed(3)]);
    let one = b.scalar_const("one", 1.0);
    let next = b.add(&v, &one);
    let keep = b.node("Identity", &[&cond], vec![]);
    let seen = b.node("Identity", &[&v], vec![]);
    b.output(&keep, 9, &[]);
    b.output(&next, 1, &[SigDim::Fixed(3)]);
    b.output(&seen, 1, &[SigDim::Fixed(3)]);
    Attr::Graph(Arc::new(b.finish("body").graph.unwrap_or_default()))
}

fn loop_inputs(trips: i64) -> Vec<Option<RtTensor>> {
    vec![
        Some(scalar(trips)),
        Some(scalar(1)),
        Some(RtTensor {
            shape: vec![3],
            data: RtData::F32(vec![0.0, 10.0, 20.0]),
        }),
    ]
}

/// A node of a hand-built body: `op` reading `inputs`, writing `output`.
fn onnx_node(op: &str, inputs: &[&str], output: &str) -> crate::analysis::onnx_proto::NodeProto {
    crate::analysis::onnx_proto::NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        op_type: op.into(),
        ..Default::default()
    }
}

/// A body attribute of `nodes` whose one output is `output`.
fn body(name: &str, nodes: Vec<crate::analysis::onnx_proto::NodeProto>, output: &str) -> Attr {
    Attr::Graph(Arc::new(GraphProto {
        name: name.into(),
        node: nodes,
        output: vec![crate::analysis::onnx_proto::ValueInfoProto {
            name: output.into(),
            ..Default::default()
        }],
        ..Default::default()
    }))
}

/// A one-node branch: `op` over `inputs`, its output `{name}_y`.
fn branch(name: &str, op: &str, inputs: &[&str]) -> Attr {
    let output = format!("{name}_y");
    body(name, vec![onnx_node(op, inputs, &output)], &output)
}

/// If branches `y = x + w` and `y = x`, reading `x` (an activation, fed at run time) and
/// `w` (marked a constant of the enclosing graph, so baked into the plan) from outside.
/// The plan is cached across calls: a second call with another `x` must see that `x`, and
/// one with another `w` of the same shape (a rewritten weight) must not reuse the plan.
#[test]
fn a_cached_branch_reads_this_calls_enclosing_values() {
    let node = test_node(
        "If",
        &[
            ("then_branch", branch("then", "Add", &["x", "w"])),
            ("else_branch", branch("else", "Identity", &["x"])),
            // Inputs: cond, then the free names in order: w (1), x (2).
            (CONSTANT_INPUTS_ATTR, Attr::Ints(vec![1])),
        ],
    );
    let vector = |values: [f32; 3]| {
        Some(RtTensor {
            shape: vec![3],
            data: RtData::F32(values.to_vec()),
        })
    };
    let types = [Some(DType::Bool), Some(DType::F32), Some(DType::F32)];
    let call = |cond: i64, w: [f32; 3], x: [f32; 3]| {
        run(
            &node,
            13,
            &lend(&[Some(scalar(cond)), vector(w), vector(x)]),
            &types,
        )
        .unwrap()[0]
            .to_f32()
    };
    assert_eq!(
        call(1, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0]),
        [11.0, 22.0, 33.0]
    );
    assert_eq!(call(1, [1.0, 2.0, 3.0], [5.0, 6.0, 7.0]), [6.0, 8.0, 10.0]);
    assert_eq!(call(1, [0.5, 0.5, 0.5], [5.0, 6.0, 7.0]), [5.5, 6.5, 7.5]);
    assert_eq!(call(0, [0.5, 0.5, 0.5], [5.0, 6.0, 7.0]), [5.0, 6.0, 7.0]);
    // Two plans of the then-branch (one per weight), none per activation.
    let Some(Attr::Graph(then)) = node.attrs.get("then_branch") else {
        unreachable!()
    };
    let address = Arc::as_ptr(then) as usize;
    let cache = plan_cache().lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(cache.keys().filter(|key| key.0 == address).count(), 2);
}

/// The plan's copy of a control-flow node carries its bodies' free names, and a run reads
/// them from there; a node run outside a plan works them out from its bodies. Two If nodes
/// reading different enclosing values.
#[test]
fn a_planned_node_carries_its_bodies_free_names() {
    let first = test_node(
        "If",
        &[
            ("then_branch", branch("a_then", "Add", &["x", "w"])),
            ("else_branch", branch("a_else", "Identity", &["x"])),
        ],
    );
    let second = test_node(
        "If",
        &[
            ("then_branch", branch("b_then", "Neg", &["z"])),
            ("else_branch", branch("b_else", "Identity", &["z"])),
        ],
    );
    let graph = crate::analysis::Graph::default();
    for (node, names) in [(&first, &["w", "x"][..]), (&second, &["z"][..])] {
        let planned = crate::exec::eval::generic_node(&graph, &[], node);
        assert!(matches!(
            planned.attrs.get(IMPLICIT_NAMES_ATTR),
            Some(Attr::Strings(carried)) if carried == names
        ));
        assert!(matches!(implicit_names(&planned), Cow::Borrowed(n) if n == names));
        assert!(matches!(implicit_names(node), Cow::Owned(n) if n == names));
    }
}

/// A Scan over several steps runs one plan in one workspace: a running sum of a sequence,
/// each step's state and output what the steps before left.
#[test]
fn scan_steps_carry_their_state() {
    let mut b = GraphBuilder::new(WeightFill::Zeros);
    let state = b.input("s", 1, &[SigDim::Fixed(2)]);
    let item = b.input("x", 1, &[SigDim::Fixed(2)]);
    let sum = b.add(&state, &item);
    let out = b.node("Identity", &[&sum], vec![]);
    b.output(&sum, 1, &[SigDim::Fixed(2)]);
    b.output(&out, 1, &[SigDim::Fixed(2)]);
    let body = Attr::Graph(Arc::new(b.finish("cumsum").graph.unwrap_or_default()));
    let node = test_node("Scan", &[("body", body), ("num_scan_inputs", Attr::Int(1))]);
    let tensor = |shape: Vec<usize>, values: Vec<f32>| RtTensor {
        shape,
        data: RtData::F32(values),
    };
    let inputs = [
        Some(tensor(vec![2], vec![0.0, 10.0])),
        Some(tensor(
            vec![4, 2],
            vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0],
        )),
    ];
    let types = [Some(DType::F32), Some(DType::F32)];
    let out = run(&node, 11, &lend(&inputs), &types).unwrap();
    assert_eq!(out[0].to_f32(), [10.0, 20.0]);
    assert_eq!(out[1].shape, [4, 2]);
    assert_eq!(
        out[1].to_f32(),
        [1.0, 11.0, 3.0, 13.0, 6.0, 16.0, 10.0, 20.0]
    );
}

/// A branch whose output shape depends on an enclosing float's values (`Reshape(x,
/// Cast(s))`): planning with `s` fed fails, so the call plans with it as a constant, and a
/// second call with other values of `s` gets its own shape, not the first call's plan.
#[test]
fn a_branch_shaped_by_an_enclosing_float_is_planned_per_call() {
    use crate::analysis::onnx_proto::AttributeProto;
    let node_of = onnx_node;
    let mut cast = node_of("Cast", &["s"], "dims");
    cast.attribute.push(AttributeProto {
        name: "to".into(),
        r#type: 2,
        i: 7,
        ..Default::default()
    });
    let graph = body;
    let node = test_node(
        "If",
        &[
            (
                "then_branch",
                graph(
                    "then",
                    vec![cast, node_of("Reshape", &["x", "dims"], "y")],
                    "y",
                ),
            ),
            (
                "else_branch",
                graph("else", vec![node_of("Identity", &["x"], "z")], "z"),
            ),
        ],
    );
    let floats = |values: &[f32]| {
        Some(RtTensor {
            shape: vec![values.len()],
            data: RtData::F32(values.to_vec()),
        })
    };
    let types = [Some(DType::Bool), Some(DType::F32), Some(DType::F32)];
    // Inputs: cond, then the free names in order: s, x.
    let x = floats(&[1.0, 2.0, 3.0]);
    let tall = run(
        &node,
        13,
        &lend(&[Some(scalar(1)), floats(&[3.0, 1.0]), x.clone()]),
        &types,
    );
    assert_eq!(tall.unwrap()[0].shape, [3, 1]);
    let wide = run(
        &node,
        13,
        &lend(&[Some(scalar(1)), floats(&[1.0, 3.0]), x]),
        &types,
    );
    let wide = wide.unwrap();
    assert_eq!(wide[0].shape, [1, 3]);
    assert_eq!(wide[0].to_f32(), [1.0, 2.0, 3.0]);
}

/// A loop whose carried value grows every iteration (`v ← Concat(v, [i])`): each
/// iteration has new shapes, so the body runs a new plan in a new workspace each time
/// rather than the last iteration's.
#[test]
fn a_loop_whose_carried_shape_grows_plans_each_iteration_anew() {
    use crate::builtin::builder::attr_int;
    let mut b = GraphBuilder::new(WeightFill::Zeros);
    let i = b.input("i", 7, &[]);
    let cond = b.input("cond", 9, &[]);
    let v = b.input("v", 1, &[SigDim::Named("n")]);
    let one = b.int64_const("one", &[1]);
    let float = b.node("Cast", &[&i], vec![attr_int("to", 1)]);
    let piece = b.node("Reshape", &[&float, &one], vec![]);
    let next = b.node("Concat", &[&v, &piece], vec![attr_int("axis", 0)]);
    let keep = b.node("Identity", &[&cond], vec![]);
    b.output(&keep, 9, &[]);
    b.output(&next, 1, &[SigDim::Named("m")]);
    let body = Attr::Graph(Arc::new(b.finish("grow").graph.unwrap_or_default()));
    let node = test_node("Loop", &[("body", body)]);
    let types = [Some(DType::I64), Some(DType::Bool), Some(DType::F32)];
    let start = RtTensor {
        shape: vec![1],
        data: RtData::F32(vec![5.0]),
    };
    let inputs = [Some(scalar(4)), Some(scalar(1)), Some(start)];
    let out = run(&node, 13, &lend(&inputs), &types).unwrap();
    assert_eq!(out[0].to_f32(), [5.0, 0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn loop_carries_and_stacks() {
    let node = test_node("Loop", &[("body", counter())]);
    let types = [Some(DType::I64), Some(DType::Bool), Some(DType::F32)];
    let out = run(&node, 13, &lend(&loop_inputs(3)), &types).unwrap();
    assert_eq!(out[0].to_f32(), [3.0, 13.0, 23.0]);
    assert_eq!(out[1].shape, [3, 3]);
    assert_eq!(out[1].to_f32()[3..6], [1.0, 11.0, 21.0]);
    // No iteration: the initial value, and a scan output with no rows.
    let out = run(&node, 13, &lend(&loop_inputs(0)), &types).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].to_f32(), [0.0, 10.0, 20.0]);
    assert_eq!(out[1].shape, [0, 3]);
}
