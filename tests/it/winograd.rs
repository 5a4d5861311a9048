//! Winograd convolutions end to end: the analysis on a CPU device chooses them per layer and
//! costs the executed work while reporting the model's arithmetic; a plan that follows the
//! analysis runs them and agrees with the direct plan; `DirectOnly` turns them off. (Their
//! outputs against onnxruntime are covered by `exec_vs_ort`, whose plans choose by default.)

use std::collections::HashMap;
use std::path::Path;

use roofline::analysis::algorithm::{AlgorithmPolicy, ConvAlgorithm};
use roofline::analysis::{self, import, Analysis, AnalyzeOptions};
use roofline::builtin::{self, WeightFill};
use roofline::device::{find_device, DeviceKind, DeviceProfile, Precision};
use roofline::exec::{self, ConvAlgorithms, PlanOptions, RtTensor};

/// A CPU-like device: a catalogue profile relabelled as a CPU (the analysis decides algorithms
/// only for CPUs, which the executor runs on).
fn cpu_device() -> DeviceProfile {
    let mut device = find_device("rtx2080ti").unwrap().to_profile();
    device.kind = DeviceKind::Cpu;
    device
}

fn resnet50(policy: AlgorithmPolicy, device: &DeviceProfile) -> (analysis::Prepared, Analysis) {
    let model = builtin::find("resnet50").unwrap();
    let proto = model.build(WeightFill::Random(5));
    let graph = import::import_model(&proto, Path::new("."), Path::new("resnet50")).unwrap();
    let options = AnalyzeOptions {
        bindings: (model.default_bindings)(),
        precision: Precision::Fp32,
        conv_algorithms: policy,
        ..Default::default()
    };
    let prepared = analysis::Prepared::new(graph, &options.bindings).unwrap();
    let analysis = analysis::analyze_prepared(&prepared, "resnet50", device, &options).unwrap();
    (prepared, analysis)
}

#[test]
fn cpu_analysis_chooses_winograd_and_reports_the_model_arithmetic() {
    let cpu = cpu_device();
    let (_, chosen) = resnet50(AlgorithmPolicy::Auto, &cpu);
    let (_, direct) = resnet50(AlgorithmPolicy::DirectOnly, &cpu);
    let gpu = find_device("rtx2080ti").unwrap().to_profile();
    let (_, on_gpu) = resnet50(AlgorithmPolicy::Auto, &gpu);
    let winograd: Vec<_> = chosen
        .nodes
        .iter()
        .filter(|n| n.winograd().is_some())
        .collect();
    // On this roof (a GPU's ratio of compute to bandwidth) the 28² and 14² layers gain; the
    // 56² ones lose to the extra traffic of the transformed tiles, and the 7² ones have too few
    // tiles to be candidates.
    let names: Vec<&str> = winograd.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names.len(), 3 + 5, "{names:?}");
    for node in chosen
        .nodes
        .iter()
        .filter(|n| n.input_shapes[0] == "1x512x7x7")
    {
        if let Some(choice) = &node.algorithm {
            assert_eq!(choice.algorithm, ConvAlgorithm::Direct, "{}", node.name);
        }
    }
    for node in &winograd {
        let choice = node.algorithm.as_ref().unwrap();
        let same = &direct.nodes[node.index];
        assert_eq!(
            node.flops, same.flops,
            "{}: the model's arithmetic is reported",
            node.name
        );
        assert_eq!(node.macs, same.macs);
        assert!(
            node.executed_flops.unwrap() < node.flops / 2,
            "{}",
            node.name
        );
        assert!(node.predicted_s * 1.15 <= same.predicted_s, "{}", node.name);
        assert!((choice.direct_s - same.predicted_s).abs() <= 1e-12 + 1e-9 * same.predicted_s);
        assert!(node.op_label().contains("Winograd"));
    }
    // Totals count the model's FLOPs whatever runs; the bound drops.
    assert_eq!(chosen.summary.flops, direct.summary.flops);
    assert!(chosen.summary.predicted_latency_s < direct.summary.predicted_latency_s);
    assert!(direct.nodes.iter().all(|n| n.winograd().is_none()));
    // Not a CPU: nothing decided.
    assert!(on_gpu.nodes.iter().all(|n| n.algorithm.is_none()));
}

/// What each convolution ran as, by node index, and the outputs.
type Ran = (Vec<(usize, ConvAlgorithm)>, Vec<(String, RtTensor)>);

fn run(prepared: &analysis::Prepared, algorithms: ConvAlgorithms) -> Ran {
    let options = PlanOptions {
        conv_algorithms: algorithms,
        ..PlanOptions::default()
    };
    let plan =
        exec::build_plan(&prepared.graph, &prepared.order, &prepared.states, &options).unwrap();
    let inputs: HashMap<String, RtTensor> = exec::random_inputs(&plan, 11);
    let mut workspace = plan.workspace();
    let outputs = plan.run(&mut workspace, &inputs, None).unwrap();
    (plan.conv_algorithms(), outputs)
}

#[test]
fn plan_runs_what_the_analysis_chose_and_matches_direct() {
    let (prepared, analysis) = resnet50(AlgorithmPolicy::Auto, &cpu_device());
    let (ran, outputs) = run(&prepared, ConvAlgorithms::from_analysis(&analysis));
    let (ran_direct, reference) = run(&prepared, ConvAlgorithms::DirectOnly);
    let decided: HashMap<usize, ConvAlgorithm> = analysis
        .nodes
        .iter()
        .filter_map(|n| n.algorithm.as_ref().map(|c| (n.index, c.algorithm)))
        .collect();
    assert_eq!(ran.len(), 53);
    for (index, algorithm) in &ran {
        assert_eq!(
            decided.get(index).copied().unwrap_or(ConvAlgorithm::Direct),
            *algorithm
        );
    }
    assert_eq!(
        ran.iter()
            .filter(|(_, a)| *a != ConvAlgorithm::Direct)
            .count(),
        8
    );
    assert!(ran_direct.iter().all(|(_, a)| *a == ConvAlgorithm::Direct));
    for ((name, got), (_, want)) in outputs.iter().zip(&reference) {
        let (got, want) = (got.to_f32(), want.to_f32());
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-3 * scale, "{name}: max error {err} of {scale}");
    }
}

/// Rule 5: the shapes worth timing are ResNet-50's three 3×3 stride-1 plane sizes with a
/// Winograd candidate (not the 7×7 one), and a latency table of them decides over the roofline:
/// a shape measured faster direct runs direct, one measured faster as F(2×2) runs F(2×2), each
/// with the timings as its reason; a shape missing from the table keeps the roofline's rule.
#[test]
fn measured_times_choose_over_the_roofline() {
    use roofline::analysis::algorithm::{MeasuredAlgorithms, MeasuredVariants};
    let cpu = cpu_device();
    let (prepared, by_roofline) = resnet50(AlgorithmPolicy::Auto, &cpu);
    let shapes = analysis::winograd_candidates(&prepared);
    let sides: Vec<(usize, usize)> = shapes.iter().map(|s| (s.in_channels, s.out_h)).collect();
    assert_eq!(sides, [(64, 56), (128, 28), (256, 14)], "{shapes:?}");
    let mut table = MeasuredAlgorithms::default();
    let times = |direct_s: f64, winograd_f2_s: f64, winograd_f4_s: f64| MeasuredVariants {
        direct_s,
        winograd_f2_s,
        winograd_f4_s,
        rounds: 9,
    };
    // Threads: the catalogue profile's ceilings carry none, so the analysis reads 1-thread
    // entries.
    table.entries.insert(
        MeasuredAlgorithms::key(&shapes[0], 1),
        times(1.0e-3, 1.4e-3, 1.2e-3),
    );
    table.entries.insert(
        MeasuredAlgorithms::key(&shapes[2], 1),
        times(1.2e-3, 0.9e-3, 1.3e-3),
    );
    let model = builtin::find("resnet50").unwrap();
    let options = AnalyzeOptions {
        bindings: (model.default_bindings)(),
        precision: Precision::Fp32,
        measured_algorithms: Some(std::sync::Arc::new(table)),
        ..Default::default()
    };
    let measured = analysis::analyze_prepared(&prepared, "resnet50", &cpu, &options).unwrap();
    let choice_at = |analysis: &Analysis, input: &str| {
        let node = analysis
            .nodes
            .iter()
            .find(|n| {
                n.input_shapes.first().is_some_and(|x| x == input)
                    && n.input_shapes.get(1).is_some_and(|w| w.ends_with("x3x3"))
            })
            .unwrap();
        node.algorithm.clone().unwrap()
    };
    let at_56 = choice_at(&measured, "1x64x56x56");
    assert_eq!(at_56.algorithm, ConvAlgorithm::Direct, "{}", at_56.reason);
    assert!(
        at_56.reason.starts_with("measured here"),
        "{}",
        at_56.reason
    );
    let at_14 = choice_at(&measured, "1x256x14x14");
    assert_eq!(
        at_14.algorithm,
        ConvAlgorithm::WinogradF2,
        "{}",
        at_14.reason
    );
    assert!(at_14.reason.contains("F(2x2) 0.900 ms"), "{}", at_14.reason);
    assert_eq!(
        choice_at(&measured, "1x128x28x28"),
        choice_at(&by_roofline, "1x128x28x28")
    );
    let plan_choices = ConvAlgorithms::from_analysis(&measured);
    let ConvAlgorithms::FromAnalysis(decided) = plan_choices else {
        panic!("from_analysis gives the analysis's decisions");
    };
    let at_56: Vec<Option<&ConvAlgorithm>> = measured
        .nodes
        .iter()
        .filter(|n| n.input_shapes.get(1).is_some_and(|w| w == "64x64x3x3"))
        .map(|n| decided.get(&n.index))
        .collect();
    assert_eq!(at_56, [Some(&ConvAlgorithm::Direct); 3]);
}
