//! The advisor: rewrites keep the outputs (run with the tool's kernels and with onnxruntime on
//! the exported file), and the predicted gains come from the roofline before and after.

use std::collections::HashMap;
use std::path::Path;

use roofline::advisor::{self, export, AdviseOptions};
use roofline::analysis::{self, import, AnalyzeOptions, Graph};
use roofline::builtin::{self, WeightFill};
use roofline::device::{find_device, Precision};
use roofline::exec::{self, PlanOptions, RtTensor};

use super::common::{repo_root, venv_python};

fn builtin_graph(name: &str) -> (Graph, AnalyzeOptions) {
    let model = builtin::find(name).unwrap();
    let proto = model.build(WeightFill::Random(3));
    let graph = import::import_model(&proto, Path::new("."), Path::new(name)).unwrap();
    (
        graph,
        AnalyzeOptions {
            bindings: (model.default_bindings)(),
            precision: Precision::Fp32,
            ..Default::default()
        },
    )
}

fn run(graph: &Graph, options: &AnalyzeOptions) -> Vec<(String, RtTensor)> {
    let mut graph = graph.clone();
    let (order, states, _) = analysis::prepare_graph(&mut graph, &options.bindings).unwrap();
    let plan = exec::build_plan(&graph, &order, &states, &PlanOptions::default()).unwrap();
    let inputs: HashMap<String, RtTensor> = roofline::exec::random_inputs(&plan, 7);
    let mut ws = plan.workspace();
    plan.run(&mut ws, &inputs, None).unwrap()
}

fn max_relative_error(a: &[(String, RtTensor)], b: &[(String, RtTensor)]) -> f32 {
    let mut worst = 0.0f32;
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(ta.shape, tb.shape);
        let (x, y) = (ta.to_f32(), tb.to_f32());
        let scale = x.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-30);
        let err = x
            .iter()
            .zip(&y)
            .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
        worst = worst.max(err / scale);
    }
    worst
}

#[test]
fn resnet50_rewrites_fold_every_bn_and_fuse_every_epilogue() {
    let (graph, options) = builtin_graph("resnet50");
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let (report, rewritten) = advisor::advise(
        graph.clone(),
        "resnet50",
        &device,
        &options,
        &AdviseOptions::default(),
    )
    .unwrap();
    let count = |name: &str| {
        report
            .passes
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .changes
            .len()
    };
    assert_eq!(count("bn-fold"), 53);
    // 16 residual adds and 49 ReLUs end up in convolution epilogues.
    assert_eq!(count("fuse"), 16 + 49);
    assert!(!report.verified);
    assert!(
        report.overall.predicted_speedup > 1.3,
        "{:?}",
        report.overall
    );
    for pass in &report.passes {
        assert!(
            pass.predicted_speedup >= 0.999,
            "{} predicted {}",
            pass.name,
            pass.predicted_speedup
        );
    }
    // Same outputs with the tool's kernels (float rewrites: 1e-4 relative).
    let err = max_relative_error(&run(&graph, &options), &run(&rewritten, &options));
    assert!(err < 1e-4, "max relative error {err}");
}

#[test]
fn transformer_gelu_and_bias_fuse_into_matmuls() {
    let (graph, options) = builtin_graph("bert-base");
    let device = find_device("a100").unwrap().to_profile();
    let (report, rewritten) = advisor::advise(
        graph.clone(),
        "bert",
        &device,
        &options,
        &AdviseOptions::default(),
    )
    .unwrap();
    let fuse = report.passes.iter().find(|p| p.name == "fuse").unwrap();
    let gelu = fuse
        .changes
        .iter()
        .filter(|c| c.what.contains("gelu"))
        .count();
    assert_eq!(gelu, 12, "one erf-GELU per layer");
    let bias = fuse
        .changes
        .iter()
        .filter(|c| c.what.contains("bias"))
        .count();
    assert_eq!(bias, 12 * 6);
    let err = max_relative_error(&run(&graph, &options), &run(&rewritten, &options));
    assert!(err < 1e-4, "max relative error {err}");
}

#[test]
fn hard_swish_chain_becomes_an_epilogue() {
    // conv → x * clip(x + 3, 0, 6) / 6, the PP-OCR export of hard-swish.
    use roofline::builtin::{ConvSpec, GraphBuilder, SigDim};
    let mut b = GraphBuilder::new(WeightFill::Random(5));
    let x = b.input(
        "input",
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(8),
            SigDim::Fixed(16),
            SigDim::Fixed(16),
        ],
    );
    let y = b.conv(
        &x,
        8,
        ConvSpec {
            bias: true,
            ..ConvSpec::new(8, 3, 1)
        },
    );
    let three = b.scalar_const("three", 3.0);
    let zero = b.scalar_const("zero", 0.0);
    let six = b.scalar_const("six", 6.0);
    let shifted = b.node("Add", &[&y, &three], vec![]);
    let clipped = b.node("Clip", &[&shifted, &zero, &six], vec![]);
    let gated = b.node("Mul", &[&y, &clipped], vec![]);
    let out = b.node("Div", &[&gated, &six], vec![]);
    b.output(
        &out,
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(8),
            SigDim::Fixed(16),
            SigDim::Fixed(16),
        ],
    );
    let proto = b.finish("hswish");
    let graph = import::import_model(&proto, Path::new("."), Path::new("hswish")).unwrap();
    let options = AnalyzeOptions::default();
    let device = find_device("t4").unwrap().to_profile();
    let (report, rewritten) = advisor::advise(
        graph.clone(),
        "hswish",
        &device,
        &options,
        &AdviseOptions::default(),
    )
    .unwrap();
    assert_eq!(rewritten.node_count(), 1, "{:?}", report.passes);
    let err = max_relative_error(&run(&graph, &options), &run(&rewritten, &options));
    assert!(err < 1e-5, "max relative error {err}");
    // Fusion-aware intensity: the fused group moves fewer bytes for the same work.
    let group = &report
        .passes
        .iter()
        .find(|p| p.name == "fuse")
        .unwrap()
        .fusion_groups[0];
    assert!(group.intensity_fused > group.intensity_unfused);
    assert!(group.predicted_time_saved_s > 0.0);
}

#[test]
fn exported_rewrites_run_in_onnxruntime_with_the_same_outputs() {
    let Some(python) = venv_python() else { return };
    let dir = super::cli::tempdir();
    for name in ["mobilenetv2", "bert-base"] {
        let model = builtin::find(name).unwrap();
        let proto = model.build(WeightFill::Random(3));
        let original = dir.join(format!("{name}.onnx"));
        std::fs::write(&original, prost::Message::encode_to_vec(&proto)).unwrap();
        let graph = import::import_model(&proto, Path::new("."), Path::new(name)).unwrap();
        let options = AnalyzeOptions {
            bindings: (model.default_bindings)(),
            precision: Precision::Fp32,
            ..Default::default()
        };
        let device = find_device("rtx2080ti").unwrap().to_profile();
        let (_, rewritten) =
            advisor::advise(graph, name, &device, &options, &AdviseOptions::default()).unwrap();
        let optimized = dir.join(format!("{name}-opt.onnx"));
        std::fs::write(
            &optimized,
            prost::Message::encode_to_vec(&export::to_model(&rewritten).unwrap()),
        )
        .unwrap();
        let shape = if name == "bert-base" {
            "input_ids=1x128"
        } else {
            "input=1x3x224x224"
        };
        let mut outputs = Vec::new();
        for (tag, path) in [("orig", &original), ("opt", &optimized)] {
            let out_dir = dir.join(format!("{name}-{tag}"));
            let status = std::process::Command::new(&python)
                .arg(repo_root().join("scripts/ort_run.py"))
                .arg(path)
                .arg(&out_dir)
                .args(["--input", shape])
                .output()
                .unwrap();
            assert!(
                status.status.success(),
                "{tag} {name}: {}",
                String::from_utf8_lossy(&status.stderr)
            );
            let manifest: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out_dir.join("manifest.json")).unwrap(),
            )
            .unwrap();
            let file = manifest["outputs"][0]["file"].as_str().unwrap().to_string();
            outputs.push(vec![(
                String::from("out"),
                exec::npy::read_npy(&out_dir.join(file)).unwrap(),
            )]);
        }
        let err = max_relative_error(&outputs[0], &outputs[1]);
        assert!(
            err < 1e-4,
            "{name}: onnxruntime outputs differ by {err} (relative)"
        );
    }
    // Kept on failure for a look; the two BERT files alone are about 870 MB.
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verify_times_versions_interleaved_or_alone_past_the_memory_budget() {
    let (graph, options) = builtin_graph("tinycnn");
    let mut device = find_device("rtx2080ti").unwrap().to_profile();
    // Measurements only run for a probed profile; the figures themselves do not matter here.
    device.source = roofline::device::ProfileSource::Probed;
    for (budget, alone) in [(u64::MAX, false), (1, true)] {
        let advise_options = AdviseOptions {
            verify: true,
            runs: 3,
            live_plan_budget_bytes: budget,
            ..AdviseOptions::default()
        };
        let (report, _) =
            advisor::advise(graph.clone(), "tinycnn", &device, &options, &advise_options).unwrap();
        assert!(report.verified);
        assert_eq!(
            report.verification_note.contains("timed on their own"),
            alone,
            "{}",
            report.verification_note
        );
        let overall = report.overall.measured_speedup.expect("measured");
        assert!(overall.is_finite() && overall > 0.0);
        for pass in report.passes.iter().filter(|p| !p.changes.is_empty()) {
            let gain = pass.measured_speedup.expect("measured pass");
            assert!(gain.is_finite() && gain > 0.0, "{}: {gain}", pass.name);
            assert!(pass.measured_latency_after_ms.unwrap() > 0.0);
        }
        assert!(report.overall.max_relative_output_error.unwrap() < 1e-4);
    }
}
