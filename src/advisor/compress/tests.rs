//! The search on graphs built here, predicted only (a catalogue-style device with round
//! ceilings): it reaches a reachable target with aligned channel counts and a plan that
//! re-applies, stops with the reason when nothing the cost model sees can gain, and keeps the
//! Pareto front honest.

use super::*;
use crate::advisor::passes::tests::device;
use crate::advisor::prune::SpaceCut;
use crate::analysis::graph::Graph;
use crate::analysis::graph::{Attr, Attributes, Node, ValueId};
use crate::analysis::infer::Bindings;
use crate::analysis::tensor::{DType, Tensor, TensorFact};
use crate::report::model::compress::Step;
use crate::report::model::quant::AccuracyProxy;

/// input 1×3×32×32 → conv 3→64 → Relu → conv 64→128 → Relu → conv 128→128 → Relu →
/// GlobalAveragePool → Flatten → Gemm 128→10: compute-bound convolutions on the round device.
fn cnn(channels: [u64; 3], size: u64) -> Graph {
    let mut g = Graph {
        name: "cnn".into(),
        opset: 17,
        ir_version: 8,
        ..Graph::default()
    };
    let mut seed = 11u64;
    let mut konst = |g: &mut Graph, name: &str, shape: &[u64]| {
        let values: Vec<f32> = (0..shape.iter().product::<u64>())
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        g.add_value(
            name,
            TensorFact::constant(Tensor::from_f32(shape.to_vec(), values)),
        )
    };
    let node =
        |g: &mut Graph, name: &str, op: &str, inputs: Vec<ValueId>, attrs: Vec<(&str, Attr)>| {
            let out = g.add_value(format!("{name}_y"), TensorFact::unknown(DType::F32));
            let mut map = Attributes::default();
            for (k, v) in attrs {
                map.0.insert(k.to_string(), v);
            }
            g.add_node(Node {
                name: name.into(),
                op_type: op.into(),
                domain: String::new(),
                attrs: map,
                inputs: inputs.into_iter().map(Some).collect(),
                outputs: vec![out],
            });
            out
        };
    let x = g.add_value("x", TensorFact::known(DType::F32, &[1, 3, size, size]));
    g.inputs.push(x);
    let mut y = x;
    let mut c_in = 3;
    for (i, &c) in channels.iter().enumerate() {
        let w = konst(&mut g, &format!("w{i}"), &[c, c_in, 3, 3]);
        let b = konst(&mut g, &format!("b{i}"), &[c]);
        let conv = node(
            &mut g,
            &format!("conv{i}"),
            "Conv",
            vec![y, w, b],
            vec![
                ("pads", Attr::Ints(vec![1; 4])),
                ("kernel_shape", Attr::Ints(vec![3, 3])),
            ],
        );
        y = node(&mut g, &format!("relu{i}"), "Relu", vec![conv], vec![]);
        c_in = c;
    }
    let p = node(&mut g, "gap", "GlobalAveragePool", vec![y], vec![]);
    let f = node(&mut g, "flat", "Flatten", vec![p], vec![]);
    let w = konst(&mut g, "fc_w", &[10, c_in]);
    let b = konst(&mut g, "fc_b", &[10]);
    let out = node(
        &mut g,
        "fc",
        "Gemm",
        vec![f, w, b],
        vec![("transB", Attr::Int(1))],
    );
    g.outputs.push(out);
    g
}

fn options(target: Target) -> CompressOptions {
    CompressOptions {
        target,
        precisions: Vec::new(),
        checked_per_step: 2,
        advise: AdviseOptions {
            calibration_samples: 2,
            ..AdviseOptions::default()
        },
        ..CompressOptions::default()
    }
}

#[test]
fn reaches_a_predicted_target_with_aligned_channels() {
    let graph = cnn([64, 128, 128], 32);
    let device = device();
    let result = compress(
        graph.clone(),
        "cnn",
        &device,
        &AnalyzeOptions::default(),
        &options(Target::Speedup(1.5)),
        &mut |_| {},
    )
    .unwrap();
    let report = &result.report;
    assert!(report.reached, "{}", report.stop_reason);
    assert!(!report.measured);
    assert!(
        report.predicted_speedup >= 1.5,
        "{}",
        report.predicted_speedup
    );
    assert!(report.measured_speedup.is_none());
    // The round device is a GPU profile: channel counts stay multiples of 8.
    assert_eq!(report.channel_alignment, 8);
    let pruned: Vec<_> = report
        .layers
        .iter()
        .filter(|l| l.kept < l.channels)
        .collect();
    assert!(!pruned.is_empty());
    for layer in &report.layers {
        if layer.kept < layer.channels {
            assert_eq!(layer.kept % 8, 0, "{layer:?}");
            assert!(
                layer.kept * 4 >= layer.channels,
                "below the floor: {layer:?}"
            );
        }
    }
    // The classifier's output space reaches the graph output and is never touched.
    let fc = report.layers.iter().find(|l| l.space == "fc").unwrap();
    assert_eq!(fc.kept, fc.channels);
    assert!(fc.reason.contains("graph output"), "{}", fc.reason);
    // The plan re-applied to the original gives the same MACs as the search's result.
    let mut replayed = graph.clone();
    crate::analysis::prepare_graph(&mut replayed, &Bindings::default()).unwrap();
    let cuts: Vec<SpaceCut> = result
        .plan
        .spaces
        .iter()
        .map(|s| SpaceCut {
            space: s.space.clone(),
            keep: s.keep.clone(),
        })
        .collect();
    prune::prune(&mut replayed, &cuts).unwrap();
    let a = crate::analysis::analyze_graph(replayed, "cnn", &device, &AnalyzeOptions::default())
        .unwrap();
    assert_eq!(a.summary.macs, report.compressed.macs);
    // The compressed graph exports, re-imports and runs.
    let proto = crate::advisor::export::to_model(&result.graph).unwrap();
    let mut back = crate::analysis::import::import_model(
        &proto,
        std::path::Path::new("."),
        std::path::Path::new("c.onnx"),
    )
    .unwrap();
    let (order, states, _) =
        crate::analysis::prepare_graph(&mut back, &Bindings::default()).unwrap();
    let plan = exec::build_plan(&back, &order, &states, &exec::PlanOptions::default()).unwrap();
    let inputs = exec::random_inputs(&plan, 1);
    let outputs = plan.run(&mut plan.workspace(), &inputs, None).unwrap();
    assert_eq!(outputs[0].1.shape, vec![1, 10]);
    // Every step lowers the prediction and is numbered.
    let mut last = report.original.predicted_latency_ms;
    for (i, step) in report.steps.iter().enumerate() {
        assert_eq!(step.step, i + 1);
        assert!(step.predicted_latency_ms < last, "{step:?}");
        last = step.predicted_latency_ms;
    }
}

#[test]
fn stops_with_a_reason_when_nothing_can_gain() {
    // Tiny convolutions on a device with a 1 ms fixed cost per op: all overhead.
    let graph = cnn([8, 16, 16], 4);
    let mut slow_launch = device();
    slow_launch.launch_overhead_s = 1e-3;
    let result = compress(
        graph,
        "tiny",
        &slow_launch,
        &AnalyzeOptions::default(),
        &options(Target::Speedup(2.0)),
        &mut |_| {},
    )
    .unwrap();
    let report = &result.report;
    assert!(!report.reached);
    assert!(report.steps.is_empty(), "{:?}", report.steps);
    assert!(
        report.stop_reason.contains("no action"),
        "{}",
        report.stop_reason
    );
    let reasons: Vec<&str> = report
        .layers
        .iter()
        .filter(|l| l.space != "fc")
        .map(|l| l.reason.as_str())
        .collect();
    assert!(
        reasons
            .iter()
            .all(|r| r.contains("at its floor") || r.contains("no aligned cut")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("overhead")),
        "{reasons:?}"
    );
}

#[test]
fn unknown_precisions_are_refused() {
    let mut opts = options(Target::Speedup(1.2));
    opts.precisions = vec!["int3".into()];
    let err = compress(
        cnn([8, 8, 8], 4),
        "x",
        &device(),
        &AnalyzeOptions::default(),
        &opts,
        &mut |_| {},
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("int3"), "{err}");
}

fn step(n: usize, ms: f64, cosine: f64) -> Step {
    Step {
        step: n,
        action: String::new(),
        predicted_latency_ms: ms,
        corrected_latency_ms: ms,
        measured_latency_ms: None,
        macs: 0,
        accuracy: AccuracyProxy {
            samples: 1,
            cosine_min: cosine,
            cosine_mean: cosine,
            max_abs_error: 0.0,
            max_abs_reference: 1.0,
            top1_agreement: None,
        },
        eval: None,
        candidates_costed: 0,
        candidates_checked: 0,
    }
}

#[test]
fn pareto_front_keeps_the_undominated_steps() {
    let steps = vec![
        step(1, 10.0, 0.99),
        step(2, 9.0, 0.995),
        step(3, 8.0, 0.9),
        step(4, 8.5, 0.8),
    ];
    // Step 1 is beaten by step 2 on both; step 4 by step 3.
    assert_eq!(pareto_front(&steps), vec![1, 2]);
}

#[test]
fn actions_are_worth_their_gain_per_accuracy_lost_and_per_mac_removed() {
    let base = action_value(0.04, 1e-3, Some(0.05));
    // Half the MACs removed for the same gain and loss: twice the worth.
    let fewer_macs = action_value(0.04, 1e-3, Some(0.025));
    assert!(
        (fewer_macs / base - 2.0).abs() < 1e-6,
        "{fewer_macs} {base}"
    );
    // More accuracy lost for the same gain and MACs: worth less, in proportion.
    let lossier = action_value(0.04, 2e-3, Some(0.05));
    assert!((base / lossier - 2.0).abs() < 0.1, "{base} {lossier}");
    // More gain for the same costs: worth more.
    assert!(action_value(0.05, 1e-3, Some(0.05)) > base);
    // A cut whose MACs follow its time and a precision action with the same gain and loss
    // are worth the same: between them the rule is gain per accuracy lost.
    let precision = action_value(0.04, 1e-3, None);
    let proportional_cut = action_value(0.04, 1e-3, Some(0.04));
    assert!((precision / proportional_cut - 1.0).abs() < 1e-6);
    // A cut's MAC advantage stops at MAX_MAC_ADVANTAGE: removing almost no MACs is worth no
    // more than removing a quarter of its gain's share.
    let capped = action_value(0.04, 1e-3, Some(0.04 / search::MAX_MAC_ADVANTAGE));
    assert!((action_value(0.04, 1e-3, Some(1e-6)) / capped - 1.0).abs() < 1e-6);
    assert!((capped / proportional_cut - search::MAX_MAC_ADVANTAGE).abs() < 1e-6);
    // One that loses nothing stays finite, and ranked by its gain.
    assert!(action_value(0.04, 0.0, None).is_finite());
    assert!(action_value(0.05, 0.0, None) > action_value(0.04, 0.0, None));
}

#[test]
fn measured_times_are_carried_to_the_first_spell_of_the_original() {
    // The original measured 10 ms first; later rounds ran in a slow spell (original 15 ms,
    // candidate 7.5 ms): the candidate counts as 5 ms, the spell the target was set in.
    let slow = search::Measured {
        original_ms: 15.0,
        candidate_ms: 7.5,
        speedup: 2.0,
    };
    assert!((in_first_spell(Some(10.0), &slow) - 5.0).abs() < 1e-12);
    // Without a first measurement, the rounds' own original is the reference.
    assert!((in_first_spell(None, &slow) - 7.5).abs() < 1e-12);
}

#[test]
fn per_op_factors_move_time_between_ops_and_keep_the_profiled_total() {
    let key = |name: &str| (name.to_string(), "Conv".to_string());
    // Expected 4 + 4 + 2 ms; measured 6, 3 and 3 ms (the model 1.2× its prediction).
    let expected = vec![(key("a"), 4e-3), (key("b"), 4e-3), (key("c"), 2e-3)];
    let measured: search::OpTimes = [(key("a"), 6e-3), (key("b"), 3e-3), (key("c"), 3e-3)]
        .into_iter()
        .collect();
    let factors = search::op_factors(&expected, &measured);
    // Each op's measured ÷ expected over the model's 1.2.
    assert!((factors[&key("a")] - 1.25).abs() < 1e-9);
    assert!((factors[&key("b")] - 0.625).abs() < 1e-9);
    assert!((factors[&key("c")] - 1.25).abs() < 1e-9);
    // Expected × factor sums back to the expected total: the measured level stays the
    // correction's business.
    let total: f64 = expected.iter().map(|(k, e)| e * factors[k]).sum();
    assert!((total - 10e-3).abs() < 1e-12, "{total}");

    // An op far off its prediction is clamped; a tiny op and one not measured keep none.
    let expected = vec![
        (key("a"), 4e-3),
        (key("b"), 4e-3),
        (key("c"), 4e-3),
        (key("tiny"), 1e-6),
        (key("unmeasured"), 2e-3),
    ];
    // The level is 48 ÷ 12 = 4: `a` at 10× its prediction is 2.5, `b` 0.25.
    let measured: search::OpTimes = [
        (key("a"), 40e-3),
        (key("b"), 4e-3),
        (key("c"), 4e-3),
        (key("tiny"), 1e-3),
    ]
    .into_iter()
    .collect();
    let factors = search::op_factors(&expected, &measured);
    assert_eq!(factors[&key("a")], search::OP_FACTOR_RANGE.1);
    assert_eq!(factors[&key("b")], search::OP_FACTOR_RANGE.0);
    assert!(!factors.contains_key(&key("tiny")));
    assert!(!factors.contains_key(&key("unmeasured")));
    // Nothing measured: no factors.
    assert!(search::op_factors(&expected, &search::OpTimes::new()).is_empty());
}

/// A small CNN, prepared as the search prepares its candidates, and its analysis on the test
/// device.
fn prepared_cnn() -> (Graph, crate::analysis::Analysis) {
    let mut graph = cnn([64, 128, 128], 32);
    let analyze = AnalyzeOptions::default();
    crate::analysis::prepare_graph(&mut graph, &analyze.bindings).unwrap();
    let analysis =
        crate::analysis::analyze_graph(graph.clone(), "cnn", &device(), &analyze).unwrap();
    (graph, analysis)
}

/// The per-op feedback joins a plan's profile to the analysis by node index: on a planned
/// graph, every step names the analysed node at its index, and a profile where
/// one convolution took twice its share moves predicted time onto it and leaves the profiled
/// model's total as it was.
#[test]
fn a_profile_joins_the_analysis_by_node_index_and_keeps_the_total() {
    let (graph, mut analysis) = prepared_cnn();
    let analyze = AnalyzeOptions::default();
    let plan = crate::advisor::quantize::plan_of(&graph, &analyze, 1).unwrap();
    let steps = plan.steps();
    assert!(steps.len() >= 3);
    for step in &steps {
        let node = &analysis.nodes[step.node_index];
        assert_eq!((&node.name, &node.op_type), (&step.name, &step.op_type));
    }
    // Expected times as a calibration would give them (the round device has none): each
    // step's bound; measured: the same, but the first convolution twice as slow.
    let mut node_times = search::NodeTimes::new();
    let slow = steps
        .iter()
        .find(|s| s.op_type == "Conv")
        .expect("a convolution step")
        .node_index;
    for step in &steps {
        let node = &mut analysis.nodes[step.node_index];
        node.expected_s = Some(node.predicted_s.max(1e-6));
        let factor = if step.node_index == slow { 2.0 } else { 1.0 };
        node_times.insert(step.node_index, node.predicted_s.max(1e-6) * factor);
    }
    analysis.summary.expected_latency_s = Some(
        analysis
            .nodes
            .iter()
            .filter_map(|n| n.expected_s)
            .sum::<f64>(),
    );
    let factors = search::profile_factors(&analysis, &node_times);
    let slow_key = (
        analysis.nodes[slow].name.clone(),
        analysis.nodes[slow].op_type.clone(),
    );
    let others: Vec<f64> = factors
        .iter()
        .filter(|(k, _)| **k != slow_key)
        .map(|(_, &f)| f)
        .collect();
    assert!(!others.is_empty());
    // The slow op's factor is twice every other's: what catches a wrong join (the total below
    // is kept by any pairing of expected and measured times).
    for other in &others {
        assert!(
            (factors[&slow_key] / other - 2.0).abs() < 1e-9,
            "{factors:?}"
        );
    }
    let plain = latency_ms(&analysis);
    let in_context = search::in_context_ms(&analysis, &factors);
    assert!(
        (in_context / plain - 1.0).abs() < 1e-9,
        "{in_context} {plain}"
    );

    // Two nodes under one (name, op type) cannot be told apart in a candidate: neither keeps
    // a factor.
    let twin = analysis
        .nodes
        .iter()
        .position(|n| n.op_type == "Conv" && n.index != slow)
        .expect("a second convolution");
    analysis.nodes[twin].name = analysis.nodes[slow].name.clone();
    let factors = search::profile_factors(&analysis, &node_times);
    assert!(!factors.contains_key(&slow_key), "{factors:?}");
    assert!(!factors.is_empty());
}

/// A new profile replaces the factors of the ops its model has (clearing those it gives none)
/// and keeps the others: an int8 profile leaves the float factors of the converted layers,
/// which the search's float predictions of cuts still read.
#[test]
fn a_profile_keeps_the_factors_of_kernels_its_model_no_longer_runs() {
    let (_, mut analysis) = prepared_cnn();
    let convs: Vec<usize> = (0..analysis.nodes.len())
        .filter(|&i| analysis.nodes[i].op_type == "Conv")
        .collect();
    assert!(convs.len() >= 2);
    let key = |n: &crate::analysis::NodeAnalysis| (n.name.clone(), n.op_type.clone());
    let (first, second) = (
        key(&analysis.nodes[convs[0]]),
        key(&analysis.nodes[convs[1]]),
    );
    // The float profile: both convolutions have factors.
    let mut factors = HashMap::from([(first.clone(), 1.5), (second.clone(), 0.8)]);
    // The next model runs the first convolution in int8 (another op type under its name) and
    // gives the second no factor (under the share a factor needs).
    analysis.nodes[convs[0]].op_type = "ConvInteger".into();
    let converted = key(&analysis.nodes[convs[0]]);
    let fresh = HashMap::from([(converted.clone(), 1.2)]);
    search::merge_factors(&mut factors, &analysis, fresh);
    assert_eq!(factors.get(&first), Some(&1.5), "{factors:?}");
    assert_eq!(factors.get(&converted), Some(&1.2), "{factors:?}");
    assert_eq!(factors.get(&second), None, "{factors:?}");
    assert_eq!(factors.len(), 2);
}
