//! Channel spaces and pruning on small graphs built here, on the built-in ResNet-50 and
//! MobileNetV2, and the defining property of structured pruning: removing channels that carry
//! nothing (zero filters) leaves the model's outputs unchanged.

use std::collections::HashMap;

use super::*;
use crate::analysis::graph::{Attributes, Node};
use crate::analysis::infer::Bindings;
use crate::analysis::tensor::DType;
use crate::builtin::{self, WeightFill};
use crate::exec::{self, RtTensor};

struct Net {
    g: Graph,
    seed: u64,
}

impl Net {
    fn new() -> Net {
        Net {
            g: Graph {
                name: "prune".into(),
                opset: 17,
                ir_version: 8,
                ..Graph::default()
            },
            seed: 7,
        }
    }

    fn random(&mut self, count: usize) -> Vec<f32> {
        (0..count)
            .map(|_| {
                self.seed = self
                    .seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn konst(&mut self, name: &str, shape: &[u64]) -> ValueId {
        let values = self.random(shape.iter().product::<u64>() as usize);
        self.g.add_value(
            name,
            TensorFact::constant(Tensor::from_f32(shape.to_vec(), values)),
        )
    }

    fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[ValueId],
        attrs: &[(&str, Attr)],
    ) -> ValueId {
        let out = self
            .g
            .add_value(format!("{name}_y"), TensorFact::unknown(DType::F32));
        let mut map = Attributes::default();
        for (k, v) in attrs {
            map.0.insert(k.to_string(), v.clone());
        }
        self.g.add_node(Node {
            name: name.into(),
            op_type: op.into(),
            domain: String::new(),
            attrs: map,
            inputs: inputs.iter().map(|&v| Some(v)).collect(),
            outputs: vec![out],
        });
        out
    }

    fn conv(
        &mut self,
        name: &str,
        x: ValueId,
        (c_in, c_out): (u64, u64),
        kernel: u64,
        group: u64,
        bias: bool,
    ) -> ValueId {
        let w = self.konst(&format!("{name}_w"), &[c_out, c_in / group, kernel, kernel]);
        let mut inputs = vec![x, w];
        if bias {
            inputs.push(self.konst(&format!("{name}_b"), &[c_out]));
        }
        let pad = (kernel / 2) as i64;
        self.node(
            name,
            "Conv",
            &inputs,
            &[
                ("kernel_shape", Attr::Ints(vec![kernel as i64; 2])),
                ("pads", Attr::Ints(vec![pad; 4])),
                ("group", Attr::Int(group as i64)),
            ],
        )
    }
}

/// conv1 (3→8, bias) → Relu → depthwise 3×3 (no bias) → Relu → conv3 1×1 (8→8, bias) → Add
/// with the first Relu (residual) → Relu → Mul by a per-channel constant → GlobalAveragePool →
/// Flatten → Gemm (8→10).
fn residual_net() -> Graph {
    let mut n = Net::new();
    let x =
        n.g.add_value("x", TensorFact::known(DType::F32, &[1, 3, 12, 12]));
    n.g.inputs.push(x);
    let a = n.conv("conv1", x, (3, 8), 3, 1, true);
    let a = n.node("relu1", "Relu", &[a], &[]);
    let d = n.conv("dw", a, (8, 8), 3, 8, false);
    let d = n.node("relu2", "Relu", &[d], &[]);
    let c = n.conv("conv3", d, (8, 8), 1, 1, true);
    let s = n.node("add", "Add", &[c, a], &[]);
    let s = n.node("relu3", "Relu", &[s], &[]);
    let scale = n.konst("scale", &[8, 1, 1]);
    let s = n.node("mul", "Mul", &[s, scale], &[]);
    let p = n.node("gap", "GlobalAveragePool", &[s], &[]);
    let f = n.node("flat", "Flatten", &[p], &[("axis", Attr::Int(1))]);
    let w = n.konst("fc_w", &[10, 8]);
    let b = n.konst("fc_b", &[10]);
    let y = n.node("fc", "Gemm", &[f, w, b], &[("transB", Attr::Int(1))]);
    n.g.outputs.push(y);
    let mut g = n.g;
    crate::analysis::prepare_graph(&mut g, &Bindings::default()).expect("test net infers");
    g
}

fn run(graph: &Graph, inputs: &HashMap<String, RtTensor>) -> Vec<f32> {
    let mut graph = graph.clone();
    let (order, states, _) =
        crate::analysis::prepare_graph(&mut graph, &Bindings::default()).expect("infers");
    let plan =
        exec::build_plan(&graph, &order, &states, &exec::PlanOptions::default()).expect("plans");
    let mut ws = plan.workspace();
    plan.run(&mut ws, inputs, None).expect("runs")[0].1.to_f32()
}

/// Sets filter `channel` of the named nodes' weight (input 1, axis 0) and bias to zero.
fn zero_filter(graph: &mut Graph, nodes: &[&str], channel: usize) {
    let mut ed = Editor::new(graph);
    for name in nodes {
        let index = ed.nodes().iter().position(|n| n.name == *name).unwrap();
        for slot in [1, 2] {
            let Some(value) = ed.node(index).inputs.get(slot).copied().flatten() else {
                continue;
            };
            let tensor = ed.fact(value).konst.clone().unwrap();
            let mut values = tensor.to_f32_vec().unwrap();
            let per = values.len() / tensor.shape[0] as usize;
            values[channel * per..(channel + 1) * per]
                .iter_mut()
                .for_each(|v| *v = 0.0);
            let id = ed.add_const(format!("{name}_zeroed{slot}"), tensor.shape.clone(), values);
            ed.set_input(index, slot, Some(id));
        }
    }
    ed.finish();
    crate::analysis::prepare_graph(graph, &Bindings::default()).unwrap();
}

#[test]
fn residual_and_depthwise_merge_into_one_space() {
    let mut g = residual_net();
    let spaces = channel_spaces(&mut g);
    let prunable: Vec<&ChannelSpace> = spaces.iter().filter(|s| s.frozen.is_none()).collect();
    assert_eq!(prunable.len(), 1, "{spaces:#?}");
    let space = prunable[0];
    assert_eq!(space.key, "conv1");
    assert_eq!(space.channels, 8);
    let mut sources = space.sources.clone();
    sources.sort();
    assert_eq!(sources, ["conv1", "conv3"]);
    // The Gemm's output space reaches the graph output.
    let fc = spaces.iter().find(|s| s.key == "fc").unwrap();
    assert!(
        fc.frozen.as_deref().unwrap().contains("graph output"),
        "{:?}",
        fc.frozen
    );
    assert_eq!(space.importance.len(), 8);
}

#[test]
fn pruning_channels_that_carry_nothing_keeps_the_outputs() {
    let mut g = residual_net();
    zero_filter(&mut g, &["conv1", "conv3"], 2);
    zero_filter(&mut g, &["conv1", "conv3"], 5);
    let inputs: HashMap<String, RtTensor> = exec::random_inputs(
        &exec::build_plan(
            &g,
            &g.topo_order().unwrap(),
            &crate::analysis::prepare_graph(&mut g.clone(), &Bindings::default())
                .unwrap()
                .1,
            &exec::PlanOptions::default(),
        )
        .unwrap(),
        3,
    );
    let before = run(&g, &inputs);
    let spaces = channel_spaces(&mut g);
    let space = spaces.iter().find(|s| s.frozen.is_none()).unwrap();
    // The zeroed channels are the least important.
    let keep = keep_most_important(space, 6);
    assert_eq!(keep, vec![0, 1, 3, 4, 6, 7]);
    let mut pruned = g.clone();
    prune(
        &mut pruned,
        &[SpaceCut {
            space: space.key.clone(),
            keep,
        }],
    )
    .unwrap();
    crate::advisor::check_structure("prune", &pruned).unwrap();
    let after = run(&pruned, &inputs);
    assert_eq!(before.len(), after.len());
    for (a, b) in before.iter().zip(&after) {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "{before:?} vs {after:?}"
        );
    }
    // Weights shrank where the channels live: conv1 filters, dw group, conv3 both axes, the
    // per-channel scale, and the Gemm's input features.
    let ed = Editor::new(&mut pruned);
    let find = |ed: &Editor, name: &str| ed.nodes().iter().position(|n| n.name == name).unwrap();
    let shape = |ed: &Editor, node: usize, slot: usize| {
        ed.fact(ed.node(node).inputs[slot].unwrap())
            .konst
            .as_ref()
            .unwrap()
            .shape
            .clone()
    };
    let (c1, dw, c3, mul, fc) = (
        find(&ed, "conv1"),
        find(&ed, "dw"),
        find(&ed, "conv3"),
        find(&ed, "mul"),
        find(&ed, "fc"),
    );
    assert_eq!(shape(&ed, c1, 1), [6, 3, 3, 3]);
    assert_eq!(shape(&ed, c1, 2), [6]);
    assert_eq!(shape(&ed, dw, 1), [6, 1, 3, 3]);
    assert_eq!(ed.node(dw).attrs.int("group"), Some(6));
    assert_eq!(shape(&ed, c3, 1), [6, 6, 1, 1]);
    assert_eq!(shape(&ed, mul, 1), [6, 1, 1]);
    assert_eq!(shape(&ed, fc, 1), [10, 6]);
}

#[test]
fn plans_that_cannot_apply_are_errors() {
    let mut g = residual_net();
    let err = prune(
        &mut g,
        &[SpaceCut {
            space: "fc".into(),
            keep: vec![0, 1],
        }],
    )
    .unwrap_err();
    assert!(matches!(err, PruneError::Frozen { .. }), "{err}");
    let err = prune(
        &mut g,
        &[SpaceCut {
            space: "nope".into(),
            keep: vec![0],
        }],
    )
    .unwrap_err();
    assert!(matches!(err, PruneError::UnknownSpace(_)), "{err}");
    let err = prune(
        &mut g,
        &[SpaceCut {
            space: "conv1".into(),
            keep: vec![3, 1],
        }],
    )
    .unwrap_err();
    assert!(matches!(err, PruneError::BadKeep { .. }), "{err}");
    let err = prune(
        &mut g,
        &[SpaceCut {
            space: "conv1".into(),
            keep: vec![0, 8],
        }],
    )
    .unwrap_err();
    assert!(matches!(err, PruneError::BadKeep { .. }), "{err}");
}

fn builtin_graph(name: &str) -> Graph {
    let model = builtin::MODELS.iter().find(|m| m.name == name).unwrap();
    let mut g = model.graph(WeightFill::Random(1)).unwrap();
    crate::analysis::prepare_graph(&mut g, &(model.default_bindings)()).unwrap();
    g
}

#[test]
fn resnet50_spaces() {
    let mut g = builtin_graph("resnet50");
    let spaces = channel_spaces(&mut g);
    let prunable: Vec<&ChannelSpace> = spaces.iter().filter(|s| s.frozen.is_none()).collect();
    // The stem, two inside each of the 16 bottlenecks, one residual stream per stage.
    assert_eq!(
        prunable.len(),
        1 + 32 + 4,
        "{:#?}",
        spaces
            .iter()
            .map(|s| (&s.key, s.channels, &s.frozen))
            .collect::<Vec<_>>()
    );
    let residual: Vec<usize> = prunable
        .iter()
        .filter(|s| s.sources.len() > 2)
        .map(|s| s.channels)
        .collect();
    let mut residual_sorted = residual.clone();
    residual_sorted.sort();
    assert_eq!(residual_sorted, [256, 512, 1024, 2048]);
    // Prune one space in every stage and check that the graph still infers and plans.
    let plan: Vec<SpaceCut> = prunable
        .iter()
        .filter(|s| s.sources.len() > 2)
        .map(|s| SpaceCut {
            space: s.key.clone(),
            keep: keep_most_important(s, s.channels * 3 / 4),
        })
        .collect();
    prune(&mut g, &plan).unwrap();
    crate::advisor::check_structure("prune", &g).unwrap();
    let (order, states, _) = crate::analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
    exec::build_plan(&g, &order, &states, &exec::PlanOptions::default()).unwrap();
}

#[test]
fn mobilenetv2_expansions_are_prunable() {
    let mut g = builtin_graph("mobilenetv2");
    let spaces = channel_spaces(&mut g);
    // Every inverted residual's expanded (depthwise) space is prunable.
    let with_dw = spaces
        .iter()
        .filter(|s| s.frozen.is_none() && s.touched.iter().any(|t| t == "Conv (depthwise)"))
        .count();
    assert!(with_dw >= 16, "{with_dw}");
}

/// conv1 (3→8, bias) → Relu → conv2 1×1 (8→4, bias): the graph output.
fn two_convs() -> Graph {
    let mut n = Net::new();
    let x =
        n.g.add_value("x", TensorFact::known(DType::F32, &[2, 3, 6, 6]));
    n.g.inputs.push(x);
    let a = n.conv("conv1", x, (3, 8), 3, 1, true);
    let a = n.node("relu1", "Relu", &[a], &[]);
    let y = n.conv("conv2", a, (8, 4), 1, 1, true);
    n.g.outputs.push(y);
    let mut g = n.g;
    crate::analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
    g
}

/// Runs `graph` with the consumers' inputs as extra outputs and collects their moments.
fn stats_of(graph: &Graph, inputs: &HashMap<String, RtTensor>) -> ActivationStats {
    let mut probe = graph.clone();
    let spaces = channel_spaces(&mut probe.clone());
    for v in observed_values(&spaces) {
        probe.outputs.push(v);
    }
    let (order, states, _) =
        crate::analysis::prepare_graph(&mut probe, &Bindings::default()).unwrap();
    let plan = exec::build_plan(&probe, &order, &states, &exec::PlanOptions::default()).unwrap();
    let mut stats = ActivationStats::default();
    for (name, t) in plan.run(&mut plan.workspace(), inputs, None).unwrap() {
        stats.observe(&name, &t.shape, t.as_f32().unwrap());
    }
    stats
}

#[test]
fn a_constant_channel_prunes_exactly_once_its_mean_is_folded() {
    let mut g = two_convs();
    // Channel 5 of conv1: zero filter, bias 0.7 → Relu gives 0.7 everywhere.
    {
        let mut ed = Editor::new(&mut g);
        let index = ed.nodes().iter().position(|n| n.name == "conv1").unwrap();
        let w = ed.const_f32(ed.node(index).inputs[1]).unwrap();
        let mut b = ed.const_f32(ed.node(index).inputs[2]).unwrap();
        let mut w = w;
        w[5 * 27..6 * 27].iter_mut().for_each(|v| *v = 0.0);
        b[5] = 0.7;
        let w_id = ed.add_const("w_const_channel".into(), vec![8, 3, 3, 3], w);
        let b_id = ed.add_const("b_const_channel".into(), vec![8], b);
        ed.set_input(index, 1, Some(w_id));
        ed.set_input(index, 2, Some(b_id));
        ed.finish();
    }
    crate::analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
    let x = exec::random_input(&[2, 3, 6, 6], false, 5, 10);
    let inputs = HashMap::from([("x".to_string(), x)]);
    let before = run(&g, &inputs);
    let stats = stats_of(&g, &inputs);
    // Measured importance: a constant channel loses nothing once its mean is folded.
    let spaces = channel_spaces_with(&mut g, Some(&stats));
    let space = spaces.iter().find(|s| s.key == "conv1").unwrap();
    assert!(space.importance[5] < 1e-6, "{:?}", space.importance);
    assert_eq!(keep_most_important(space, 7), vec![0, 1, 2, 3, 4, 6, 7]);
    let cut = [SpaceCut {
        space: "conv1".into(),
        keep: vec![0, 1, 2, 3, 4, 6, 7],
    }];
    let mut folded = g.clone();
    prune_with(&mut folded, &cut, Some(&stats)).unwrap();
    let after = run(&folded, &inputs);
    for (a, b) in before.iter().zip(&after) {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "{before:?} vs {after:?}"
        );
    }
    // Without the fold, the channel's 0.7 times conv2's weights goes missing.
    let mut plain = g.clone();
    prune(&mut plain, &cut).unwrap();
    let lost = run(&plain, &inputs);
    let worst = before
        .iter()
        .zip(&lost)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst > 1e-2, "{worst}");
}

/// Ops whose channel meaning is not "channel c stays channel c" freeze the space: instance
/// norm (per-channel scale and bias the pruner does not cut) and LRN (mixes neighbours).
#[test]
fn instance_norm_and_lrn_freeze_their_space() {
    for op in ["InstanceNormalization", "LRN"] {
        let mut n = Net::new();
        let x =
            n.g.add_value("x", TensorFact::known(DType::F32, &[1, 3, 6, 6]));
        n.g.inputs.push(x);
        let a = n.conv("conv1", x, (3, 8), 3, 1, true);
        let b = if op == "LRN" {
            n.node("norm", op, &[a], &[("size", Attr::Int(3))])
        } else {
            let scale = n.konst("scale", &[8]);
            let bias = n.konst("bias", &[8]);
            n.node("norm", op, &[a, scale, bias], &[])
        };
        let y = n.conv("conv2", b, (8, 4), 1, 1, true);
        n.g.outputs.push(y);
        let mut g = n.g;
        crate::analysis::prepare_graph(&mut g, &Bindings::default()).unwrap();
        let spaces = channel_spaces(&mut g);
        let space = spaces.iter().find(|s| s.key == "conv1").unwrap();
        let reason = space.frozen.as_deref().unwrap_or_default();
        assert!(reason.contains(op), "{op}: {reason}");
    }
}
