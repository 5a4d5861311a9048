//! Unit tests for `exec::plan`'s zero-copy Splits and Slices (`slice_placements`), each against
//! the plan that copies, and their agreement with the analysis's `slice_views`.

use super::tests::{analysis_of, default_plan, one_input, plan_with, second_run};
use super::*;
use crate::builtin::builder::{ConvSpec, GraphBuilder, SigDim};
use crate::builtin::WeightFill;

/// The kernel of the plan's first step running an `op_type` node.
fn kernel_of<'a>(plan: &'a Plan, op_type: &str) -> &'a Kernel {
    &plan
        .steps
        .iter()
        .find(|s| s.info.op_type == op_type)
        .expect("a step of that op type")
        .kernel
}

/// How the analysis (catalogue device, default options) costs the first `op_type` node.
fn status_of(prepared: &crate::analysis::Prepared, op_type: &str) -> crate::analysis::NodeStatus {
    analysis_of(prepared, "slices")
        .nodes
        .iter()
        .find(|n| n.op_type == op_type)
        .expect("a node of that op type")
        .status
}

/// (buffer, offset) of the value named `name` in the plan.
fn slot_of(plan: &Plan, prepared: &crate::analysis::Prepared, name: &str) -> (usize, usize) {
    match &plan.slots[prepared.graph.value_by_name(name).unwrap()] {
        Slot::Buffer { buffer, offset, .. } => (*buffer, *offset),
        other => panic!("{other:?}"),
    }
}

/// The plan of the same graph with every Split and Slice copying.
fn copying_plan(prepared: &crate::analysis::Prepared) -> Plan {
    plan_with(
        prepared,
        PlanOptions {
            slice_views: false,
            ..PlanOptions::default()
        },
    )
}

/// `x → conv → c`, `Split(c)` along the channels into 3 + 5 channels, read by a ReLU and a
/// convolution that a Concat joins (or, with `reads_source`, `Concat(c, relu(second half))`).
/// With one image the Split runs nothing: its outputs are slices of `c`'s buffer, the analysis
/// costs it as a view, and the output is the copying plan's, bit for bit. Two images put a
/// dim of 2 before the axis (each output two runs of the input): the Split copies. A Concat
/// whose part's writer reads a Split output of that Concat's own part keeps copying: its
/// writer would read the buffer it writes. With a third output that nothing reads (3 + 4 + 1
/// channels) the two read ones are still placed at their offsets.
#[test]
fn outer_axis_splits_are_views_of_their_input() {
    use crate::builtin::builder::attr_int;
    for (batch, reads_source, unread_third) in [
        (1usize, false, false),
        (1, true, false),
        (2, false, false),
        (1, false, true),
    ] {
        let mut b = GraphBuilder::new(WeightFill::Random(6));
        let x = b.input("x", 1, &SigDim::fixed_all(&[batch as i64, 4, 6, 6]));
        let c = b.conv(&x, 4, ConvSpec::new(8, 1, 1));
        let (first, second) = ("first".to_string(), "second".to_string());
        let second_channels = if unread_third { 4 } else { 5 };
        if unread_third {
            let sizes = b.int64_const("sizes", &[3, 4, 1]);
            let outputs = [first.as_str(), second.as_str(), "third"];
            b.node_multi("Split", &[&c, &sizes], vec![attr_int("axis", 1)], &outputs);
        } else {
            let sizes = b.int64_const("sizes", &[3, 5]);
            let outputs = [first.as_str(), second.as_str()];
            b.node_multi("Split", &[&c, &sizes], vec![attr_int("axis", 1)], &outputs);
        }
        let (joined, channels) = if reads_source {
            let r = b.relu(&second);
            (
                b.node("Concat", &[&c, &r], vec![attr_int("axis", 1)]),
                8 + 5,
            )
        } else {
            let r = b.relu(&first);
            let f = b.conv(&second, second_channels, ConvSpec::new(2, 3, 1));
            (b.node("Concat", &[&r, &f], vec![attr_int("axis", 1)]), 5)
        };
        b.output(
            &joined,
            1,
            &SigDim::fixed_all(&[batch as i64, channels as i64, 6, 6]),
        );
        let (prepared, plan) = default_plan(b, "split_views");
        let viewed = batch == 1;
        assert_eq!(
            matches!(kernel_of(&plan, "Split"), Kernel::SliceView),
            viewed,
            "batch {batch}"
        );
        if reads_source {
            assert!(!matches!(kernel_of(&plan, "Concat"), Kernel::InPlace));
        }
        let status = status_of(&prepared, "Split");
        assert_eq!(
            status == crate::analysis::NodeStatus::View,
            viewed,
            "batch {batch}: {status:?}"
        );
        let slot = |name: &str| slot_of(&plan, &prepared, name);
        if viewed {
            let (buffer, offset) = slot(&c);
            assert_eq!(slot(&first), (buffer, offset));
            assert_eq!(slot(&second), (buffer, offset + 3 * 36));
        }
        let copying = copying_plan(&prepared);
        assert!(!copying
            .steps
            .iter()
            .any(|s| matches!(s.kernel, Kernel::SliceView)));
        let len = batch * 4 * 36;
        let input: Vec<f32> = (0..len)
            .map(|i| ((i * 7 % 19) as f32 - 9.0) / 9.0)
            .collect();
        let inputs = one_input("x", &[batch, 4, 6, 6], input);
        let got = second_run(&plan, &inputs);
        assert_eq!(got.len(), batch * channels * 36);
        assert_eq!(
            got,
            second_run(&copying, &inputs),
            "batch {batch}, reads source {reads_source}"
        );
    }
}

/// `x → conv → c` (8 channels of 6 × 6), `Slice(c)` then a ReLU. Channels 2..6 of one image
/// are one run of `c`: the Slice runs nothing, its output sits 2 planes into `c`'s buffer, the
/// analysis costs it as a view. Rows 1..5 of every plane, or every other channel, are many
/// runs: the Slice copies. Each output is the copying plan's, bit for bit.
#[test]
fn a_slice_that_is_one_run_of_its_input_is_a_view() {
    for (starts, ends, axis, step, out_dims, viewed) in [
        (2i64, 6i64, 1i64, 1i64, [1usize, 4, 6, 6], true),
        (1, 5, 2, 1, [1, 8, 4, 6], false),
        (0, 8, 1, 2, [1, 4, 6, 6], false),
    ] {
        let mut b = GraphBuilder::new(WeightFill::Random(8));
        let x = b.input("x", 1, &SigDim::fixed_all(&[1, 4, 6, 6]));
        let c = b.conv(&x, 4, ConvSpec::new(8, 1, 1));
        let bounds = [
            b.int64_const("starts", &[starts]),
            b.int64_const("ends", &[ends]),
            b.int64_const("axes", &[axis]),
            b.int64_const("steps", &[step]),
        ];
        let refs: Vec<&str> = std::iter::once(c.as_str())
            .chain(bounds.iter().map(String::as_str))
            .collect();
        let sliced = b.node("Slice", &refs, vec![]);
        let y = b.relu(&sliced);
        b.output(&y, 1, &SigDim::fixed_all(&out_dims.map(|n| n as i64)));
        let (prepared, plan) = default_plan(b, "slice_views");
        assert_eq!(
            matches!(kernel_of(&plan, "Slice"), Kernel::SliceView),
            viewed,
            "axis {axis}, step {step}"
        );
        assert_eq!(
            status_of(&prepared, "Slice") == crate::analysis::NodeStatus::View,
            viewed
        );
        if viewed {
            let slot = |name: &str| slot_of(&plan, &prepared, name);
            let (buffer, offset) = slot(&c);
            assert_eq!(slot(&sliced), (buffer, offset + 2 * 36));
        }
        let copying = copying_plan(&prepared);
        let input: Vec<f32> = (0..4 * 36)
            .map(|i| ((i * 5 % 23) as f32 - 11.0) / 11.0)
            .collect();
        let inputs = one_input("x", &[1, 4, 6, 6], input);
        let got = second_run(&plan, &inputs);
        assert_eq!(got.len(), out_dims.iter().product::<usize>());
        assert_eq!(
            got,
            second_run(&copying, &inputs),
            "axis {axis}, step {step}"
        );
    }
}

/// `Concat(Slice(conv(x)), conv(x))` along the channels: the Slice (channels 2..6 of one
/// image) is a view, so it writes nothing into the Concat's buffer and the Concat copies; the
/// analysis costs the Concat as the copy that runs, not as a view.
#[test]
fn a_concat_of_a_slice_view_copies() {
    let mut b = GraphBuilder::new(WeightFill::Random(9));
    let x = b.input("x", 1, &SigDim::fixed_all(&[1, 4, 6, 6]));
    let c = b.conv(&x, 4, ConvSpec::new(8, 1, 1));
    let bounds = [
        b.int64_const("starts", &[2]),
        b.int64_const("ends", &[6]),
        b.int64_const("axes", &[1]),
    ];
    let sliced = b.node("Slice", &[&c, &bounds[0], &bounds[1], &bounds[2]], vec![]);
    let other = b.conv(&x, 4, ConvSpec::new(3, 3, 1));
    let joined = b.node(
        "Concat",
        &[&sliced, &other],
        vec![crate::builtin::builder::attr_int("axis", 1)],
    );
    b.output(&joined, 1, &SigDim::fixed_all(&[1, 7, 6, 6]));
    let (prepared, plan) = default_plan(b, "slice_concat");
    assert!(matches!(kernel_of(&plan, "Slice"), Kernel::SliceView));
    assert!(!matches!(kernel_of(&plan, "Concat"), Kernel::InPlace));
    assert_eq!(
        status_of(&prepared, "Slice"),
        crate::analysis::NodeStatus::View
    );
    assert_eq!(
        status_of(&prepared, "Concat"),
        crate::analysis::NodeStatus::Costed
    );
    let copying = copying_plan(&prepared);
    let input: Vec<f32> = (0..4 * 36)
        .map(|i| ((i * 3 % 13) as f32 - 6.0) / 6.0)
        .collect();
    let inputs = one_input("x", &[1, 4, 6, 6], input);
    assert_eq!(second_run(&plan, &inputs), second_run(&copying, &inputs));
}
