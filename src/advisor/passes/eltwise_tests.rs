//! Tests of the `eltwise` pass: chains, composed batch norms and affine runs, cancelling
//! Transpose/Reshape pairs (helpers from the passes' tests).

use super::super::tests::*;
use crate::analysis::graph::Attr;
use crate::analysis::ops::fused::DOMAIN;

#[test]
fn eltwise_chain_with_constant_operands() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 4]);
    let k = n.scalar("k", 2.0);
    let per_channel = n.konst("c", &[1, 2, 1, 1], &[0.5, -0.5]);
    let a = n.node("mul", "Mul", &[x, k], &[]);
    let b = n.node("add", "Add", &[a, per_channel], &[]);
    let c = n.node("relu", "Relu", &[b], &[]);
    let d = n.node("exp", "Exp", &[c], &[]);
    n.output(d);
    let (report, g) = run_pass(n, "eltwise");
    assert_eq!(
        changes(&report),
        [(
            vec!["mul".into(), "add".into(), "relu".into(), "exp".into()],
            "4 element-wise ops in one pass".to_string()
        )]
    );
    assert_eq!(nodes(&g), [("ElementwiseChain".into(), "mul_chain".into())]);
    let chain = find(&g, "mul_chain");
    assert_eq!(chain.domain, DOMAIN);
    assert_eq!(chain.inputs, [Some(x), Some(k), Some(per_channel)]);
    assert_eq!(chain.outputs, [d]);
    let Some(Attr::Strings(steps)) = chain.attrs.get("steps") else {
        panic!("no steps");
    };
    assert_eq!(
        steps,
        &[
            "const:mul:1:0",
            "const:add:2:0",
            "unary:relu:0:0",
            "unary:exp:0:0"
        ]
    );
    // One pass over memory instead of four: 3 intermediates of 128 bytes written and re-read.
    assert_eq!(report.passes[0].bytes_saved, 3 * 2 * 128);
}

#[test]
fn eltwise_composes_a_batch_norm_and_its_scale_layer_into_one_affine_step() {
    // BatchNormalization → per-channel Mul → per-channel Add → Relu (a Caffe export's BN and
    // Scale before a ReLU, as DenseNet's pre-activations are written).
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 8]);
    let y = batch_norm(&mut n, x);
    let gain = n.konst("gain", &[2, 1, 1], &[2.0, -1.0]);
    let bias = n.konst("bias", &[1, 2, 1, 1], &[0.5, 0.25]);
    let m = n.node("scale", "Mul", &[y, gain], &[]);
    let a = n.node("shift", "Add", &[m, bias], &[]);
    let r = n.node("relu", "Relu", &[a], &[]);
    n.output(r);
    let (report, g) = run_pass(n, "eltwise");
    assert_eq!(
        changes(&report),
        [(
            vec!["bn".into(), "scale".into(), "shift".into(), "relu".into()],
            "4 element-wise ops in one pass".to_string()
        )]
    );
    assert_eq!(nodes(&g), [("ElementwiseChain".into(), "bn_chain".into())]);
    let chain = find(&g, "bn_chain");
    let Some(Attr::Strings(steps)) = chain.attrs.get("steps") else {
        panic!("no steps");
    };
    assert_eq!(steps, &["const:mul:1:0", "const:add:2:0", "unary:relu:0:0"]);
    assert_eq!(chain.outputs, [r]);
    // BN: scale [1.5, 0.5], shift β − μ·scale = [−1.4, 1.2]; × [2, −1]: scale [3, −0.5], shift
    // [−2.8, −1.2]; + [0.5, 0.25]: shift [−2.3, −0.95]. One value per channel, on axis 1.
    assert_close(&const_values(&g, chain.inputs[1]), &[3.0, -0.5]);
    assert_close(&const_values(&g, chain.inputs[2]), &[-2.3, -0.95]);
    for input in &chain.inputs[1..] {
        assert_eq!(
            g.values[input.unwrap()].fact.concrete_shape(),
            Some(vec![2, 1, 1])
        );
    }
}

#[test]
fn eltwise_makes_a_batch_norm_and_its_relu_one_chain() {
    // The pre-activation form PyTorch exports (BN → ReLU, no scale layer); the constants get
    // fresh names where the model has them already.
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 8]);
    let taken = n.input("bn_scale", &[1]);
    let y = batch_norm(&mut n, x);
    let r = n.node("relu", "Relu", &[y], &[]);
    n.output(r);
    n.output(taken);
    let (_, g) = run_pass(n, "eltwise");
    let chain = find(&g, "bn_chain");
    let Some(Attr::Strings(steps)) = chain.attrs.get("steps") else {
        panic!("no steps");
    };
    assert_eq!(steps, &["const:mul:1:0", "const:add:2:0", "unary:relu:0:0"]);
    assert_eq!(g.values[chain.inputs[1].unwrap()].name, "bn_scale_1");
    assert_eq!(g.values[chain.inputs[2].unwrap()].name, "bn_shift");
    assert_close(&const_values(&g, chain.inputs[1]), &[1.5, 0.5]);
    assert_close(&const_values(&g, chain.inputs[2]), &[-1.4, 1.2]);
}

#[test]
fn eltwise_composes_a_run_of_scalar_ops_into_scalar_constants() {
    // (x / 255 − 0.5) / 0.25: three ops, one multiply and one add, each a single value.
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 3, 8, 8]);
    let k255 = n.scalar("k255", 255.0);
    let half = n.scalar("half", 0.5);
    let quarter = n.scalar("quarter", 0.25);
    let a = n.node("div", "Div", &[x, k255], &[]);
    let b = n.node("sub", "Sub", &[a, half], &[]);
    let c = n.node("div2", "Div", &[b, quarter], &[]);
    n.output(c);
    let (_, g) = run_pass(n, "eltwise");
    let chain = find(&g, "div_chain");
    assert_eq!(chain.inputs.len(), 3);
    for input in &chain.inputs[1..] {
        assert_eq!(g.values[input.unwrap()].fact.concrete_shape(), Some(vec![]));
    }
    assert_close(&const_values(&g, chain.inputs[1]), &[4.0 / 255.0]);
    assert_close(&const_values(&g, chain.inputs[2]), &[-2.0]);
}

#[test]
fn eltwise_keeps_batch_norms_on_rows_or_with_other_readers() {
    // On [N, C] (no plane to stream per channel) and where its output has a second reader,
    // the batch norm stays; the ops after it chain as before.
    let mut n = Net::new(17);
    let rows = n.input("rows", &[4, 2]);
    let y1 = batch_norm(&mut n, rows);
    let r1 = n.node("relu1", "Relu", &[y1], &[]);
    let x = n.input("x", &[1, 2, 4, 8]);
    let gamma = n.konst("g2", &[2], &[1.0, 1.0]);
    let beta = n.konst("b2", &[2], &[0.0, 0.0]);
    let y2 = n.node(
        "bn2",
        "BatchNormalization",
        &[x, gamma, beta, beta, gamma],
        &[],
    );
    let r2 = n.node("relu2", "Relu", &[y2], &[]);
    let e2 = n.node("exp2", "Exp", &[r2], &[]);
    for v in [r1, y2, e2] {
        n.output(v);
    }
    let (_, g) = run_pass(n, "eltwise");
    assert_eq!(
        nodes(&g),
        [
            ("BatchNormalization".into(), "bn".into()),
            ("Relu".into(), "relu1".into()),
            ("BatchNormalization".into(), "bn2".into()),
            ("ElementwiseChain".into(), "relu2_chain".into()),
        ]
    );
}

#[test]
fn eltwise_leaves_a_lone_batch_norm_and_a_lone_scale_as_they_are() {
    // A batch norm read by a convolution joins no chain; a lone Mul before a Relu is the
    // ordinary two-step chain.
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 8]);
    let y = batch_norm(&mut n, x);
    let w = n.konst("w", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    let c = n.node("conv", "Conv", &[y, w], &[("kernel_shape", ints(&[1, 1]))]);
    let gain = n.konst("gain", &[2, 1, 1], &[2.0, -1.0]);
    let m = n.node("scale", "Mul", &[c, gain], &[]);
    let r = n.node("relu", "Relu", &[m], &[]);
    n.output(r);
    let (_, g) = run_pass(n, "eltwise");
    assert_eq!(
        nodes(&g),
        [
            ("BatchNormalization".into(), "bn".into()),
            ("Conv".into(), "conv".into()),
            ("ElementwiseChain".into(), "scale_chain".into())
        ]
    );
    let chain = find(&g, "scale_chain");
    let Some(Attr::Strings(steps)) = chain.attrs.get("steps") else {
        panic!("no steps");
    };
    assert_eq!(steps, &["const:mul:1:0", "unary:relu:0:0"]);
}

#[test]
fn eltwise_chain_rereading_its_input() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 4]);
    // x · sigmoid(x), then (6 − ·) clipped to [0, 6].
    let s = n.node("sigmoid", "Sigmoid", &[x], &[]);
    let m = n.node("mul", "Mul", &[s, x], &[]);
    let six = n.scalar("six", 6.0);
    let zero = n.scalar("zero", 0.0);
    let r = n.node("rsub", "Sub", &[six, m], &[]);
    let c = n.node("clip", "Clip", &[r, zero, six], &[]);
    n.output(c);
    let (_, g) = run_pass(n, "eltwise");
    let chain = find(&g, "sigmoid_chain");
    let Some(Attr::Strings(steps)) = chain.attrs.get("steps") else {
        panic!("no steps");
    };
    // The re-read input is `input:`, the swapped constant operand of Sub has flag 1, the Clip
    // bounds are the unary step's parameters.
    assert_eq!(
        steps,
        &[
            "unary:sigmoid:0:0",
            "input:mul:0",
            "const:sub:1:1",
            "unary:clip:0:6"
        ]
    );
    assert_eq!(chain.inputs, [Some(x), Some(six)]);
}

#[test]
fn eltwise_removes_cancelling_transposes_and_reshapes() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 4]);
    // [0, 2, 3, 1] then [0, 3, 1, 2]: composed, the identity.
    let t1 = n.node("t1", "Transpose", &[x], &[("perm", ints(&[0, 2, 3, 1]))]);
    let t2 = n.node("t2", "Transpose", &[t1], &[("perm", ints(&[0, 3, 1, 2]))]);
    let r = n.node("relu", "Relu", &[t2], &[]);
    // [1, 2, 3, 4] → [1, 24] → [1, 2, 3, 4]: back where it started.
    let y = n.input("y", &[1, 2, 3, 4]);
    let (flat, back) = (n.ints("flat", &[1, 24]), n.ints("back", &[1, 2, 3, 4]));
    let f = n.node("flatten", "Reshape", &[y, flat], &[]);
    let u = n.node("unflatten", "Reshape", &[f, back], &[]);
    let s = n.node("sigmoid", "Sigmoid", &[u], &[]);
    n.output(r);
    n.output(s);
    let (report, g) = run_pass(n, "eltwise");
    assert_eq!(
        changes(&report),
        [
            (
                vec!["t1".to_string(), "t2".to_string()],
                "transposes cancel: both removed".to_string()
            ),
            (
                vec!["flatten".into(), "unflatten".into()],
                "reshapes cancel: both removed".into()
            ),
        ]
    );
    assert_eq!(op_types(&g), ["Relu", "Sigmoid"]);
    assert_eq!(find(&g, "relu").inputs, [Some(x)]);
    assert_eq!(find(&g, "sigmoid").inputs, [Some(y)]);
}

#[test]
fn eltwise_leaves_alone_what_it_must() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 4]);
    // Transposes that do not cancel: [0, 2, 3, 1] twice.
    let t1 = n.node("t1", "Transpose", &[x], &[("perm", ints(&[0, 2, 3, 1]))]);
    let t2 = n.node("t2", "Transpose", &[t1], &[("perm", ints(&[0, 2, 3, 1]))]);
    // Reshapes to a different shape: [1, 24] then [2, 12].
    let (flat, other) = (n.ints("flat", &[1, 24]), n.ints("other", &[2, 12]));
    let f = n.node("flatten", "Reshape", &[x, flat], &[]);
    let o = n.node("reshape_other", "Reshape", &[f, other], &[]);
    // A cancelling reshape pair whose result is a graph output.
    let back = n.ints("back", &[1, 2, 3, 4]);
    let f2 = n.node("flatten2", "Reshape", &[x, flat], &[]);
    let u2 = n.node("unflatten2", "Reshape", &[f2, back], &[]);
    // A lone element-wise op; a Mul whose output feeds two ops; a full-size constant operand
    // (neither a scalar nor one value per channel).
    let lone = n.node("lone", "Relu", &[x], &[]);
    let k = n.scalar("k", 2.0);
    let m = n.node("mul", "Mul", &[x, k], &[]);
    let m1 = n.node("branch1", "Relu", &[m], &[]);
    let m2 = n.node("branch2", "Sigmoid", &[m], &[]);
    let full = n.konst("full", &[1, 2, 3, 4], &[1.0; 24]);
    let a = n.node("add_full", "Add", &[x, full], &[]);
    let e = n.node("exp_after", "Exp", &[a], &[]);
    for v in [t2, o, u2, lone, m1, m2, e] {
        n.output(v);
    }
    let before = op_types(&n.g);
    let (report, g) = run_pass(n, "eltwise");
    // Add(full) → Exp would be a chain if the constant were a scalar or per channel.
    assert!(
        report.passes[0].changes.is_empty(),
        "{:?}",
        changes(&report)
    );
    assert_eq!(op_types(&g), before);
}
