//! Unit tests of the rewrite passes on tiny graphs built in code: each pass runs through
//! `advisor::advise` (which re-infers and validates the result) and the test checks which nodes
//! went, which were created, the rewritten weights against values computed by hand, and the
//! cases a pass must leave alone. The helpers are shared with `passes_quant_tests.rs`, whose
//! quantization passes run on `device()`, a profile with round numbers (fp32 1 TFLOP/s, bf16
//! 2, int8 4 TOP/s, 100 GB/s, 1 µs per op) so that every decision can be predicted by hand.

use super::Fold;
use crate::advisor::{advise, AdviceReport, AdviseOptions, Pass, PassContext};
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Attr, Attributes, Graph, Node, ValueId};
use crate::analysis::infer::{Bindings, NodeState};
use crate::analysis::ops::fused::DOMAIN;
use crate::analysis::tensor::{DType, Tensor, TensorFact};
use crate::analysis::{self, AnalyzeOptions};
use crate::device::{find_device, ComputeCeiling, DeviceProfile, Precision};

/// A graph under construction: values and nodes added in topological order.
pub(super) struct Net {
    pub(super) g: Graph,
}

impl Net {
    pub(super) fn new(opset: i64) -> Net {
        let g = Graph {
            name: "test".into(),
            opset,
            ir_version: 8,
            ..Graph::default()
        };
        Net { g }
    }

    pub(super) fn input(&mut self, name: &str, shape: &[u64]) -> ValueId {
        let v = self.g.add_value(name, TensorFact::known(DType::F32, shape));
        self.g.inputs.push(v);
        v
    }

    pub(super) fn konst(&mut self, name: &str, shape: &[u64], values: &[f32]) -> ValueId {
        let tensor = Tensor::from_f32(shape.to_vec(), values.to_vec());
        self.g.add_value(name, TensorFact::constant(tensor))
    }

    pub(super) fn scalar(&mut self, name: &str, value: f32) -> ValueId {
        self.konst(name, &[], &[value])
    }

    pub(super) fn ints(&mut self, name: &str, values: &[i64]) -> ValueId {
        let tensor = Tensor::from_i64(vec![values.len() as u64], values.to_vec());
        self.g.add_value(name, TensorFact::constant(tensor))
    }

    /// A node with `outputs` outputs named `<name>_y<i>`, inputs possibly omitted.
    pub(super) fn node_multi(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[Option<ValueId>],
        attrs: &[(&str, Attr)],
        outputs: usize,
    ) -> Vec<ValueId> {
        let outs: Vec<ValueId> = (0..outputs)
            .map(|i| {
                self.g
                    .add_value(format!("{name}_y{i}"), TensorFact::unknown(DType::F32))
            })
            .collect();
        let mut map = Attributes::default();
        for (k, v) in attrs {
            map.0.insert(k.to_string(), v.clone());
        }
        self.g.add_node(Node {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            attrs: map,
            inputs: inputs.to_vec(),
            outputs: outs.clone(),
        });
        outs
    }

    pub(super) fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[ValueId],
        attrs: &[(&str, Attr)],
    ) -> ValueId {
        let inputs: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.node_multi(name, op, &inputs, attrs, 1)[0]
    }

    pub(super) fn output(&mut self, value: ValueId) {
        self.g.outputs.push(value);
    }
}

pub(super) fn ints(values: &[i64]) -> Attr {
    Attr::Ints(values.to_vec())
}

/// A device with round ceilings: fp32 1 TFLOP/s, bf16 2 TFLOP/s, int8 4 TOP/s (no fp16),
/// DRAM 100 GB/s, 1 µs fixed cost per op.
pub(crate) fn device() -> DeviceProfile {
    let mut d = find_device("rtx2080ti")
        .expect("catalogue entry")
        .to_profile();
    d.id = "round".into();
    let ceiling = |precision, flops_per_s| ComputeCeiling {
        precision,
        flops_per_s,
        threads: None,
        theoretical_flops_per_s: None,
        source: "test".into(),
    };
    d.compute = vec![
        ceiling(Precision::Fp32, 1e12),
        ceiling(Precision::Bf16, 2e12),
        ceiling(Precision::Int8, 4e12),
    ];
    d.memory.truncate(1);
    d.memory[0].bytes_per_s = 1e11;
    d.launch_overhead_s = 1e-6;
    d
}

pub(super) fn run_pass(net: Net, pass: &str) -> (AdviceReport, Graph) {
    let options = AdviseOptions {
        apply: vec![pass.into()],
        calibration_samples: 1,
        ..AdviseOptions::default()
    };
    let (report, graph) = advise(
        net.g,
        "test",
        &device(),
        &AnalyzeOptions::default(),
        &options,
    )
    .unwrap_or_else(|e| panic!("pass {pass}: {e}"));
    assert_eq!(report.passes.len(), 1);
    assert_eq!(report.passes[0].name, pass);
    // The rewritten graph re-infers on its own, every node inferred or folded.
    let mut again = graph.clone();
    let (_, states, _) = analysis::prepare_graph(&mut again, &Bindings::default())
        .unwrap_or_else(|e| panic!("rewritten graph does not re-infer: {e}"));
    for state in states.values() {
        assert!(!matches!(state, NodeState::Failed(_)), "{state:?}");
    }
    (report, graph)
}

/// `(op_type, name)` of every node, in topological order.
pub(super) fn nodes(g: &Graph) -> Vec<(String, String)> {
    g.nodes_in_order()
        .into_iter()
        .map(|n| (n.op_type, n.name))
        .collect()
}

pub(super) fn op_types(g: &Graph) -> Vec<String> {
    nodes(g).into_iter().map(|(op, _)| op).collect()
}

pub(super) fn find(g: &Graph, name: &str) -> Node {
    g.nodes_in_order()
        .into_iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node `{name}` in {:?}", nodes(g)))
}

pub(super) fn const_values(g: &Graph, value: Option<ValueId>) -> Vec<f32> {
    let v = value.expect("input slot is empty");
    g.values[v]
        .fact
        .konst
        .as_ref()
        .unwrap_or_else(|| panic!("`{}` is not a constant", g.values[v].name))
        .to_f32_vec()
        .expect("readable constant")
}

pub(super) fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

pub(super) fn changes(report: &AdviceReport) -> Vec<(Vec<String>, String)> {
    report.passes[0]
        .changes
        .iter()
        .map(|c| (c.nodes.clone(), c.what.clone()))
        .collect()
}

pub(super) fn str_attr<'a>(node: &'a Node, name: &str) -> Option<&'a str> {
    node.attrs.string(name)
}

// ---------------------------------------------------------------------------------------------
// fold

#[test]
fn fold_removes_folded_noop_and_dead_nodes() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 6]);
    let w = n.konst("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let wt = n.konst("wt", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Shape of a constant: evaluated ahead of time, kept as the constant [2, 3].
    let shape = n.node("shape", "Shape", &[w], &[]);
    let r = n.node("reshape", "Reshape", &[x, shape], &[]);
    let id = n.node("identity", "Identity", &[r], &[]);
    let d = n.node("dropout", "Dropout", &[id], &[]);
    let y = n.node("relu", "Relu", &[d], &[]);
    // A transposed weight folds to an opaque constant: nothing to materialise, kept.
    let t = n.node("transpose", "Transpose", &[wt], &[("perm", ints(&[1, 0]))]);
    let sum = n.node("add", "Add", &[y, t], &[]);
    // Output never read.
    n.node("unused", "Sigmoid", &[x], &[]);
    // An Identity producing a graph output and a Dropout whose mask is a graph output stay.
    let out = n.node("out_identity", "Identity", &[sum], &[]);
    let masked = n.node_multi("masked", "Dropout", &[Some(sum)], &[], 2);
    n.output(out);
    n.output(masked[1]);
    let (report, g) = run_pass(n, "fold");
    assert_eq!(
        changes(&report),
        [
            (
                vec!["shape".to_string()],
                "evaluated ahead of time; output kept as a constant".to_string()
            ),
            (
                vec!["identity".into()],
                "no-op at inference: removed".into()
            ),
            (vec!["dropout".into()], "no-op at inference: removed".into()),
            (vec!["unused".into()], "output never used: removed".into()),
        ]
    );
    assert_eq!(
        op_types(&g),
        ["Reshape", "Relu", "Transpose", "Add", "Identity", "Dropout"]
    );
    // The Reshape now reads the folded constant; the Relu reads the Reshape directly.
    let reshape = find(&g, "reshape");
    assert_eq!(const_values(&g, reshape.inputs[1]), [2.0, 3.0]);
    assert_eq!(g.values[shape].producer, None);
    assert_eq!(find(&g, "relu").inputs, [Some(r)]);
    assert_eq!(report.passes[0].nodes_before, 10);
    assert_eq!(report.passes[0].nodes_after, 6);
}

#[test]
fn fold_on_an_editor_directly() {
    // The pass's own `run`, with the states inference gives: a constant Add folds away.
    let mut n = Net::new(17);
    let x = n.input("x", &[2]);
    let (a, b) = (n.ints("a", &[1, 2]), n.ints("b", &[10, 20]));
    let c = n.node("const_add", "Add", &[a, b], &[]);
    let cast = n.node("cast", "Cast", &[c], &[("to", Attr::Int(1))]);
    let y = n.node("mul", "Mul", &[x, cast], &[]);
    n.output(y);
    let mut g = n.g;
    let (order, states, _) = analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
    let states: Vec<NodeState> = order.iter().map(|id| states[id].clone()).collect();
    assert!(matches!(states[0], NodeState::Folded));
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let (analyze, options) = (AnalyzeOptions::default(), AdviseOptions::default());
    let ctx = PassContext {
        device: &device,
        analyze: &analyze,
        options: &options,
        calibration: Default::default(),
    };
    let mut ed = Editor::new(&mut g);
    let changes = Fold.run(&mut ed, &states, &ctx).unwrap().changes;
    ed.finish();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(op_types(&g), ["Mul"]);
    assert_eq!(const_values(&g, Some(cast)), [11.0, 22.0]);
    analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// bn-fold

/// γ = [3, 0.5], β = [0.1, 0.2], μ = [1, −2], σ² = [3, 0], ε = 1: the per-channel scale is
/// γ/√(σ² + ε) = [3/2, 0.5/1] = [1.5, 0.5].
pub(super) fn batch_norm(n: &mut Net, x: ValueId) -> ValueId {
    let gamma = n.konst("gamma", &[2], &[3.0, 0.5]);
    let beta = n.konst("beta", &[2], &[0.1, 0.2]);
    let mean = n.konst("mean", &[2], &[1.0, -2.0]);
    let var = n.konst("var", &[2], &[3.0, 0.0]);
    n.node(
        "bn",
        "BatchNormalization",
        &[x, gamma, beta, mean, var],
        &[("epsilon", Attr::Float(1.0))],
    )
}

fn conv_bn(bias: bool) -> (Net, ValueId) {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 3]);
    // W [2 out, 2 in, 1, 1] = [[1, 2], [3, 4]], B = [0.5, −1].
    let w = n.konst("w", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    let mut inputs = vec![x, w];
    if bias {
        inputs.push(n.konst("b", &[2], &[0.5, -1.0]));
    }
    let y = n.node("conv", "Conv", &inputs, &[("kernel_shape", ints(&[1, 1]))]);
    let z = batch_norm(&mut n, y);
    n.output(z);
    (n, z)
}

/// `pass` reports no change and leaves the graph's ops as they were.
fn assert_pass_changes_nothing(n: Net, pass: &str) {
    let before = op_types(&n.g);
    let (report, g) = run_pass(n, pass);
    assert!(
        report.passes[0].changes.is_empty(),
        "{:?}",
        changes(&report)
    );
    assert_eq!(op_types(&g), before);
}

#[test]
fn bn_folds_into_a_conv() {
    let (n, z) = conv_bn(true);
    let (report, g) = run_pass(n, "bn-fold");
    assert_eq!(
        changes(&report),
        [(
            vec!["conv".to_string(), "bn".to_string()],
            "BN scale and shift folded into the weights and bias".to_string()
        )]
    );
    assert_eq!(nodes(&g), [("Conv".to_string(), "conv".to_string())]);
    let conv = find(&g, "conv");
    // The conv now writes the BN's output.
    assert_eq!(conv.outputs, [z]);
    assert_eq!(g.values[conv.inputs[1].unwrap()].name, "conv_bnfolded_w");
    // w' = w·s per output channel: [1, 2]·1.5, [3, 4]·0.5.
    assert_close(&const_values(&g, conv.inputs[1]), &[1.5, 3.0, 1.5, 2.0]);
    // b' = (b − μ)·s + β = [(0.5 − 1)·1.5 + 0.1, (−1 + 2)·0.5 + 0.2] = [−0.65, 0.7].
    assert_close(&const_values(&g, conv.inputs[2]), &[-0.65, 0.7]);
    assert_eq!(
        g.values[z].fact.concrete_shape(),
        Some(vec![1, 2, 3, 3]),
        "the output keeps its shape"
    );
}

#[test]
fn bn_folds_into_a_conv_without_bias() {
    let (n, _) = conv_bn(false);
    let (_, g) = run_pass(n, "bn-fold");
    let conv = find(&g, "conv");
    assert_eq!(conv.inputs.len(), 3);
    assert_close(&const_values(&g, conv.inputs[1]), &[1.5, 3.0, 1.5, 2.0]);
    // b' = (0 − μ)·s + β = [−1.5 + 0.1, 2·0.5 + 0.2] = [−1.4, 1.2].
    assert_close(&const_values(&g, conv.inputs[2]), &[-1.4, 1.2]);
}

#[test]
fn bn_folds_into_a_gemm_either_layout() {
    for trans_b in [0, 1] {
        let mut n = Net::new(17);
        let a = n.input("a", &[1, 3]);
        // B as [K=3, N=2] = [[1, 2], [3, 4], [5, 6]], or transposed [N=2, K=3] = [[1, 2, 3],
        // [4, 5, 6]].
        let shape = if trans_b == 1 { [2, 3] } else { [3, 2] };
        let b = n.konst("w", &shape, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let c = n.konst("c", &[2], &[0.5, -1.0]);
        let y = n.node(
            "gemm",
            "Gemm",
            &[a, b, c],
            &[("transB", Attr::Int(trans_b))],
        );
        let z = batch_norm(&mut n, y);
        n.output(z);
        let (report, g) = run_pass(n, "bn-fold");
        assert_eq!(report.passes[0].changes.len(), 1);
        assert_eq!(op_types(&g), ["Gemm"]);
        let gemm = find(&g, "gemm");
        // Column n scaled by s[n] = [1.5, 0.5].
        let want: &[f32] = if trans_b == 1 {
            &[1.5, 3.0, 4.5, 2.0, 2.5, 3.0]
        } else {
            &[1.5, 1.0, 4.5, 2.0, 7.5, 3.0]
        };
        assert_close(&const_values(&g, gemm.inputs[1]), want);
        assert_close(&const_values(&g, gemm.inputs[2]), &[-0.65, 0.7]);
    }
}

#[test]
fn bn_fold_leaves_alone_what_it_cannot_fold() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 3]);
    let w = n.konst("w", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    let p = n.konst("p", &[2], &[1.0, 1.0]);
    // (a) A running mean that is a graph input: not a constant.
    let live_mean = n.input("live_mean", &[2]);
    let y1 = n.node("conv1", "Conv", &[x, w], &[]);
    let z1 = n.node("bn1", "BatchNormalization", &[y1, p, p, live_mean, p], &[]);
    // (b) A conv output read by the BN and by a Relu.
    let y2 = n.node("conv2", "Conv", &[x, w], &[]);
    let z2 = n.node("bn2", "BatchNormalization", &[y2, p, p, p, p], &[]);
    let r2 = n.node("relu2", "Relu", &[y2], &[]);
    // (c) Training mode (with its running mean and variance outputs).
    let y3 = n.node("conv3", "Conv", &[x, w], &[]);
    let z3 = n.node_multi(
        "bn3",
        "BatchNormalization",
        &[Some(y3), Some(p), Some(p), Some(p), Some(p)],
        &[("training_mode", Attr::Int(1))],
        3,
    )[0];
    // (d) A Gemm with α ≠ 1.
    let a = n.input("a", &[1, 2]);
    let gw = n.konst("gw", &[2, 2], &[1.0, 0.0, 0.0, 1.0]);
    let y4 = n.node("gemm4", "Gemm", &[a, gw], &[("alpha", Attr::Float(2.0))]);
    let z4 = n.node("bn4", "BatchNormalization", &[y4, p, p, p, p], &[]);
    for v in [z1, z2, r2, z3, z4] {
        n.output(v);
    }
    assert_pass_changes_nothing(n, "bn-fold");
}

#[test]
fn per_channel_affine_ops_fold_after_the_bn() {
    // conv → BN → Mul by [2, −1] as [2,1,1] → Add [1, 3] as [1,2,1,1] → Div by 2 → Sub 0.25:
    // one affine map per channel on top of the BN's.
    let (mut n, z) = conv_bn(true);
    n.g.outputs.clear();
    let m = n.konst("m", &[2, 1, 1], &[2.0, -1.0]);
    let a = n.konst("a", &[1, 2, 1, 1], &[1.0, 3.0]);
    let d = n.konst("d", &[], &[2.0]);
    let s = n.konst("s", &[1], &[0.25]);
    let y = n.node("mul", "Mul", &[m, z], &[]);
    let y = n.node("add", "Add", &[y, a], &[]);
    let y = n.node("div", "Div", &[y, d], &[]);
    let y = n.node("sub", "Sub", &[y, s], &[]);
    let r = n.node("relu", "Relu", &[y], &[]);
    n.output(r);
    let (report, g) = run_pass(n, "bn-fold");
    assert_eq!(
        changes(&report)
            .iter()
            .map(|(_, what)| what.as_str())
            .collect::<Vec<_>>(),
        [
            "BN scale and shift folded into the weights and bias",
            "per-channel Mul folded into the weights and bias",
            "per-channel Add folded into the bias",
            "per-channel Div folded into the weights and bias",
            "per-channel Sub folded into the bias",
        ]
    );
    assert_eq!(op_types(&g), ["Conv", "Relu"]);
    let conv = find(&g, "conv");
    // Scale per channel: BN [1.5, 0.5] · Mul [2, −1] / 2 = [1.5, −0.25].
    assert_close(&const_values(&g, conv.inputs[1]), &[1.5, 3.0, -0.75, -1.0]);
    // Bias: ((BN bias [−0.65, 0.7]) · [2, −1] + [1, 3]) / 2 − 0.25 = [−0.4, 0.9].
    assert_close(&const_values(&g, conv.inputs[2]), &[-0.4, 0.9]);
}

#[test]
fn affine_fold_leaves_alone_what_is_not_per_channel() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 3]);
    let w = n.konst("w", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    // (a) A Mul by a constant that varies along a spatial axis.
    let spatial = n.konst("spatial", &[1, 1, 3, 1], &[1.0, 2.0, 3.0]);
    let y1 = n.node("conv1", "Conv", &[x, w], &[]);
    let z1 = n.node("mul1", "Mul", &[y1, spatial], &[]);
    // (b) A constant minus the conv (−y + c: not handled), and a division by zero.
    let c = n.konst("c", &[2, 1, 1], &[1.0, 2.0]);
    let zero = n.konst("zero", &[2, 1, 1], &[0.0, 1.0]);
    let y2 = n.node("conv2", "Conv", &[x, w], &[]);
    let z2 = n.node("sub2", "Sub", &[c, y2], &[]);
    let y3 = n.node("conv3", "Conv", &[x, w], &[]);
    let z3 = n.node("div3", "Div", &[y3, zero], &[]);
    // (c) A residual Add of two live tensors, and a Mul that broadcasts the batch axis.
    let y4 = n.node("conv4", "Conv", &[x, w], &[]);
    let z4 = n.node("add4", "Add", &[y4, x], &[]);
    let batch = n.konst("batch", &[2, 2, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    let y5 = n.node("conv5", "Conv", &[x, w], &[]);
    let z5 = n.node("mul5", "Mul", &[y5, batch], &[]);
    for v in [z1, z2, z3, z4, z5] {
        n.output(v);
    }
    assert_pass_changes_nothing(n, "bn-fold");
}

// ---------------------------------------------------------------------------------------------
// fuse

fn conv(n: &mut Net, name: &str, x: ValueId, channels: u64) -> ValueId {
    let weights: Vec<f32> = (0..4 * channels * 9)
        .map(|i| (i % 5) as f32 - 2.0)
        .collect();
    let w = n.konst(&format!("{name}_w"), &[4, channels, 3, 3], &weights);
    n.node(name, "Conv", &[x, w], &[("pads", ints(&[1, 1, 1, 1]))])
}

#[test]
fn fuse_conv_residual_and_relu() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 4]);
    let skip = n.input("skip", &[1, 4, 4, 4]);
    let y = conv(&mut n, "conv", x, 2);
    let s = n.node("add", "Add", &[y, skip], &[]);
    let r = n.node("relu", "Relu", &[s], &[]);
    n.output(r);
    let (report, g) = run_pass(n, "fuse");
    assert_eq!(
        changes(&report),
        [
            (
                vec!["conv".to_string(), "add".to_string()],
                "residual add fused into the convolution epilogue".to_string()
            ),
            (
                vec!["conv".into(), "relu".into()],
                "relu fused into the epilogue".into()
            ),
        ]
    );
    assert_eq!(op_types(&g), ["FusedConv"]);
    let fused = find(&g, "conv");
    assert_eq!(fused.domain, DOMAIN);
    // X, W, no bias, the residual; the Relu's output.
    assert_eq!(fused.inputs.len(), 4);
    assert_eq!((fused.inputs[2], fused.inputs[3]), (None, Some(skip)));
    assert_eq!(fused.outputs, [r]);
    assert_eq!(str_attr(&fused, "activation"), Some("relu"));
    // The fused group moves less: the conv output is no longer written and re-read twice.
    assert!(report.passes[0].bytes_saved > 0);
    assert_eq!(report.passes[0].fusion_groups.len(), 2);
}

#[test]
fn convolutions_the_kernels_do_not_run_stay_unfused() {
    // A 3-D convolution and one whose weights arrive at run time run on the reference kernel,
    // which has no fused form: their Relu and residual Add stay separate ops.
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 3, 4, 4]);
    let weights: Vec<f32> = (0..4 * 2 * 27).map(|i| (i % 5) as f32 - 2.0).collect();
    let w = n.konst("w3d", &[4, 2, 3, 3, 3], &weights);
    let y = n.node("conv3d", "Conv", &[x, w], &[("pads", ints(&[1; 6]))]);
    let r = n.node("relu", "Relu", &[y], &[]);
    n.output(r);
    let (_, g) = run_pass(n, "fuse");
    assert_eq!(op_types(&g), ["Conv", "Relu"]);
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 4]);
    let w = n.input("w", &[4, 2, 3, 3]);
    let skip = n.input("skip", &[1, 4, 4, 4]);
    let y = n.node("conv", "Conv", &[x, w], &[("pads", ints(&[1, 1, 1, 1]))]);
    let s = n.node("add", "Add", &[y, skip], &[]);
    n.output(s);
    let (_, g) = run_pass(n, "fuse");
    assert_eq!(op_types(&g), ["Conv", "Add"]);
}

#[test]
fn a_two_input_sum_fuses_as_a_residual_add() {
    for (op, inputs) in [("Sum", 2), ("Sum", 3)] {
        let mut n = Net::new(8);
        let x = n.input("x", &[1, 2, 4, 4]);
        let skip = n.input("skip", &[1, 4, 4, 4]);
        let y = conv(&mut n, "conv", x, 2);
        let operands = [y, skip, skip];
        let s = n.node("sum", op, &operands[..inputs], &[]);
        n.output(s);
        let (_, g) = run_pass(n, "fuse");
        if inputs == 2 {
            assert_eq!(op_types(&g), ["FusedConv"]);
            let fused = find(&g, "conv");
            assert_eq!(fused.inputs[3], Some(skip));
            assert_eq!(fused.outputs, [s]);
        } else {
            // Three operands are not one residual: left alone.
            assert_eq!(op_types(&g), ["Conv", "Sum"]);
        }
    }
}

#[test]
fn fuse_matmul_bias_and_sigmoid() {
    let mut n = Net::new(17);
    let x = n.input("x", &[2, 8]);
    let w = n.konst("w", &[8, 4], &[0.5; 32]);
    let b = n.konst("b", &[4], &[1.0, 2.0, 3.0, 4.0]);
    let y = n.node("matmul", "MatMul", &[x, w], &[]);
    let s = n.node("add", "Add", &[b, y], &[]);
    let z = n.node("sigmoid", "Sigmoid", &[s], &[]);
    n.output(z);
    let (report, g) = run_pass(n, "fuse");
    assert_eq!(report.passes[0].changes.len(), 2);
    assert_eq!(op_types(&g), ["FusedMatMul"]);
    let fused = find(&g, "matmul");
    assert_eq!(fused.inputs, [Some(x), Some(w), Some(b)]);
    assert_eq!(fused.outputs, [z]);
    assert_eq!(str_attr(&fused, "activation"), Some("sigmoid"));
}

#[test]
fn fuse_activation_parameters() {
    let mut n = Net::new(17);
    let a = n.input("a", &[2, 8]);
    let w = n.konst("w", &[8, 4], &[0.5; 32]);
    // Gemm → Clip(0, 6) with the bounds as constant inputs (opset 11+).
    let y = n.node("gemm", "Gemm", &[a, w], &[]);
    let (lo, hi) = (n.scalar("lo", 0.0), n.scalar("hi", 6.0));
    let c = n.node("clip", "Clip", &[y, lo, hi], &[]);
    // Conv → LeakyRelu(0.2).
    let x = n.input("x", &[1, 2, 4, 4]);
    let y2 = conv(&mut n, "conv", x, 2);
    let l = n.node("leaky", "LeakyRelu", &[y2], &[("alpha", Attr::Float(0.2))]);
    n.output(c);
    n.output(l);
    let (_, g) = run_pass(n, "fuse");
    assert_eq!(op_types(&g), ["FusedGemm", "FusedConv"]);
    let gemm = find(&g, "gemm");
    assert_eq!(str_attr(&gemm, "activation"), Some("clip"));
    assert_eq!(gemm.attrs.float("act_alpha"), Some(0.0));
    assert_eq!(gemm.attrs.float("act_beta"), Some(6.0));
    assert_eq!(gemm.outputs, [c]);
    let conv = find(&g, "conv");
    assert_eq!(str_attr(&conv, "activation"), Some("leaky_relu"));
    assert_eq!(conv.attrs.float("act_alpha"), Some(0.2));
}

#[test]
fn fuse_silu_pattern() {
    let mut n = Net::new(17);
    let x = n.input("x", &[1, 2, 4, 4]);
    let y = conv(&mut n, "conv", x, 2);
    let s = n.node("sigmoid", "Sigmoid", &[y], &[]);
    let m = n.node("mul", "Mul", &[y, s], &[]);
    n.output(m);
    let (report, g) = run_pass(n, "fuse");
    assert_eq!(
        changes(&report),
        [(
            vec!["conv".to_string(), "sigmoid".to_string(), "mul".to_string()],
            "silu pattern fused into the epilogue".to_string()
        )]
    );
    assert_eq!(op_types(&g), ["FusedConv"]);
    let fused = find(&g, "conv");
    assert_eq!(str_attr(&fused, "activation"), Some("silu"));
    assert_eq!(fused.outputs, [m]);
}

#[test]
fn fuse_erf_gelu_pattern() {
    // x·(1 + erf(x/√2))·0.5 after a MatMul.
    let mut n = Net::new(17);
    let a = n.input("a", &[2, 8]);
    let w = n.konst("w", &[8, 4], &[0.25; 32]);
    let x = n.node("matmul", "MatMul", &[a, w], &[]);
    let sqrt2 = n.scalar("sqrt2", std::f32::consts::SQRT_2);
    let (one, half) = (n.scalar("one", 1.0), n.scalar("half", 0.5));
    let d = n.node("div", "Div", &[x, sqrt2], &[]);
    let e = n.node("erf", "Erf", &[d], &[]);
    let p = n.node("plus1", "Add", &[e, one], &[]);
    let m = n.node("mul_x", "Mul", &[x, p], &[]);
    let h = n.node("mul_half", "Mul", &[m, half], &[]);
    n.output(h);
    let (report, g) = run_pass(n, "fuse");
    assert_eq!(report.passes[0].changes.len(), 1);
    assert_eq!(
        report.passes[0].changes[0].nodes,
        ["matmul", "div", "erf", "plus1", "mul_x", "mul_half"]
    );
    assert_eq!(op_types(&g), ["FusedMatMul"]);
    let fused = find(&g, "matmul");
    assert_eq!(str_attr(&fused, "activation"), Some("gelu"));
    assert_eq!(fused.outputs, [h]);
}

#[test]
fn fuse_leaves_alone_what_it_must() {
    let mut n = Net::new(20);
    let x = n.input("x", &[1, 2, 4, 4]);
    // (a) A conv output read by a Relu and a MaxPool.
    let y1 = conv(&mut n, "conv1", x, 2);
    let r1 = n.node("relu1", "Relu", &[y1], &[]);
    let p1 = n.node(
        "pool1",
        "MaxPool",
        &[y1],
        &[("kernel_shape", ints(&[2, 2]))],
    );
    // (b) A conv output that is also a graph output.
    let y2 = conv(&mut n, "conv2", x, 2);
    let r2 = n.node("relu2", "Relu", &[y2], &[]);
    // (c) A Clip whose lower bound is computed at run time.
    let lo = n.input("lo", &[]);
    let six = n.scalar("six", 6.0);
    let y3 = conv(&mut n, "conv3", x, 2);
    let c3 = n.node("clip3", "Clip", &[y3, lo, six], &[]);
    // (d) A tanh-approximated GELU (only the erf form has an epilogue).
    let y4 = conv(&mut n, "conv4", x, 2);
    let g4 = n.node(
        "gelu4",
        "Gelu",
        &[y4],
        &[("approximate", Attr::String("tanh".into()))],
    );
    // (e) MatMul + Add of a full [2, 4] constant (not a per-column bias) and of a run-time [4].
    let a = n.input("a", &[2, 8]);
    let w = n.konst("w", &[8, 4], &[0.5; 32]);
    let m5 = n.node("matmul5", "MatMul", &[a, w], &[]);
    let full = n.konst("full", &[2, 4], &[1.0; 8]);
    let s5 = n.node("add5", "Add", &[m5, full], &[]);
    let m6 = n.node("matmul6", "MatMul", &[a, w], &[]);
    let live = n.input("live_bias", &[4]);
    let s6 = n.node("add6", "Add", &[m6, live], &[]);
    for v in [r1, p1, y2, r2, c3, g4, s5, s6] {
        n.output(v);
    }
    let before = op_types(&n.g);
    let (report, g) = run_pass(n, "fuse");
    assert!(
        report.passes[0].changes.is_empty(),
        "{:?}",
        changes(&report)
    );
    assert_eq!(op_types(&g), before);
}
