//! Quantization: the int8 / bf16 / fp16 passes keep the outputs within the accuracy proxy,
//! their decisions follow the roofline, the QDQ export runs in onnxruntime, and QDQ models (our
//! export, onnxruntime's static quantizer) are lowered back onto the int8 kernels.

use std::collections::HashMap;
use std::path::Path;

use roofline::advisor::quantize::CalibrationMethod;
use roofline::advisor::{self, export, AdviceReport, AdviseOptions};
use roofline::analysis::{self, import, AnalyzeOptions, Graph};
use roofline::builtin::{self, WeightFill};
use roofline::device::{find_device, DeviceProfile, Precision};
use roofline::exec::{self, PlanOptions, RtTensor};

use super::common::{repo_root, venv_python};

/// A CPU-like profile (fp32 100 GFLOP/s, int8 4x, bf16 2x, 40 GB/s, 0.2 µs per op): compute
/// roofs where int8 pays for most convolutions. A file profile: predictions only, no timing.
fn cpu_device() -> DeviceProfile {
    serde_json::from_str(
        r#"{
        "id": "test-cpu", "name": "test CPU", "kind": "cpu", "source": "file",
        "compute": [
            {"precision": "fp32", "flops_per_s": 1.0e11},
            {"precision": "bf16", "flops_per_s": 2.0e11},
            {"precision": "int8", "flops_per_s": 4.0e11}
        ],
        "memory": [{"level": "dram", "bytes_per_s": 4.0e10}],
        "launch_overhead_s": 2.0e-7
    }"#,
    )
    .unwrap()
}

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

fn run(graph: &Graph, options: &AnalyzeOptions, seed: u64) -> Vec<(String, RtTensor)> {
    let mut graph = graph.clone();
    let (order, states, _) = analysis::prepare_graph(&mut graph, &options.bindings).unwrap();
    let plan = exec::build_plan(&graph, &order, &states, &PlanOptions::default()).unwrap();
    let inputs: HashMap<String, RtTensor> = roofline::exec::random_inputs(&plan, seed);
    let mut ws = plan.workspace();
    plan.run(&mut ws, &inputs, None).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-300)
}

fn advise(
    name: &str,
    passes: &str,
    device: &DeviceProfile,
) -> (AdviceReport, Graph, Graph, AnalyzeOptions) {
    let (graph, options) = builtin_graph(name);
    let advise_options = AdviseOptions {
        apply: passes.split(',').map(String::from).collect(),
        calibration_samples: 4,
        ..AdviseOptions::default()
    };
    let (report, rewritten) =
        advisor::advise(graph.clone(), name, device, &options, &advise_options).unwrap();
    (report, graph, rewritten, options)
}

fn count_ops(graph: &Graph, op: &str) -> usize {
    graph.dag.node_weights().filter(|n| n.op_type == op).count()
}

#[test]
fn int8_keeps_tinycnn_and_resnet50_within_the_accuracy_proxy() {
    for (name, min_converted) in [("tinycnn", 3), ("resnet50", 54)] {
        let (report, original, rewritten, options) =
            advise(name, "fold,bn-fold,fuse,int8", &cpu_device());
        let q = report
            .quantization
            .as_ref()
            .expect("a quantization section");
        let converted = q.decisions.iter().filter(|d| d.decision == "int8").count();
        assert!(
            converted >= min_converted,
            "{name}: {converted} converted: {:#?}",
            q.decisions
        );
        assert_eq!(
            count_ops(&rewritten, "QConv") + count_ops(&rewritten, "QMatMul"),
            converted
        );
        assert!(q.calibration.contains("4 random"), "{}", q.calibration);
        let acc = q.accuracy.as_ref().expect("an accuracy proxy");
        assert_eq!(acc.samples, 4);
        assert!(acc.cosine_min >= 0.99, "{name}: {acc:?}");
        assert!(
            acc.max_abs_error < 0.1 * acc.max_abs_reference,
            "{name}: {acc:?}"
        );
        // Independently, on an input the calibration never saw.
        let (a, b) = (run(&original, &options, 77), run(&rewritten, &options, 77));
        let c = cosine(&a[0].1.to_f32(), &b[0].1.to_f32());
        assert!(c >= 0.99, "{name}: cosine {c} on a fresh input");
        let pass = report.passes.iter().find(|p| p.name == "int8").unwrap();
        assert!(
            pass.predicted_speedup > 1.5,
            "{name}: {}",
            pass.predicted_speedup
        );
        for d in q.decisions.iter().filter(|d| d.decision == "int8") {
            assert!(d.predicted_gain >= advisor::quantize::MIN_GAIN, "{d:?}");
            // Dynamic quantization never beats static quantization of the same op.
            assert!(d.predicted_dynamic_s.unwrap() > d.predicted_lowp_s, "{d:?}");
        }
    }
}

#[test]
fn quantization_passes_are_opt_in() {
    let (report, _, rewritten, _) = advise("tinycnn", "fold,bn-fold,fuse", &cpu_device());
    assert!(report.quantization.is_none());
    assert_eq!(count_ops(&rewritten, "QConv"), 0);
    let (graph, options) = builtin_graph("tinycnn");
    let (report, _) = advisor::advise(
        graph,
        "tinycnn",
        &cpu_device(),
        &options,
        &AdviseOptions::default(),
    )
    .unwrap();
    assert!(report
        .passes
        .iter()
        .all(|p| !matches!(p.name.as_str(), "int8" | "bf16" | "fp16")));
}

#[test]
fn decisions_explain_what_stays_float() {
    // On a T4 most MobileNetV2 convolutions are memory-bound on their activations or tiny:
    // int8 leaves them in fp32, and depthwise convolutions never convert.
    let device = find_device("t4").unwrap().to_profile();
    let (report, _, rewritten, _) = advise("mobilenetv2", "fold,bn-fold,fuse,int8", &device);
    let q = report.quantization.unwrap();
    let kept: Vec<_> = q
        .decisions
        .iter()
        .filter(|d| d.decision == "fp32")
        .collect();
    let depthwise = kept
        .iter()
        .filter(|d| d.reason.starts_with("depthwise"))
        .count();
    assert_eq!(depthwise, 17, "{kept:#?}");
    assert!(
        kept.iter()
            .any(|d| d.reason.starts_with("memory-bound on activations")),
        "{kept:#?}"
    );
    for d in kept.iter().filter(|d| d.predicted_fp32_s > 0.0) {
        assert!(d.predicted_gain < advisor::quantize::MIN_GAIN, "{d:?}");
    }
    let converted = q.decisions.len() - kept.len();
    assert_eq!(
        count_ops(&rewritten, "QConv") + count_ops(&rewritten, "QMatMul"),
        converted
    );
    assert!(q
        .notes
        .iter()
        .any(|n| n.contains("dynamic (per-inference) int8")));
}

#[test]
fn percentile_calibration_from_a_directory() {
    let dir = super::cli::tempdir();
    for s in 0..3 {
        let t = exec::random_input(&[1, 3, 32, 32], false, 500 + s, 10);
        exec::npy::write_npy(&dir.join(format!("sample{s}.npy")), &t).unwrap();
    }
    let (graph, options) = builtin_graph("tinycnn");
    let advise_options = AdviseOptions {
        apply: vec![
            "fold".into(),
            "bn-fold".into(),
            "fuse".into(),
            "int8".into(),
        ],
        calibration_dir: Some(dir.to_path_buf()),
        calibration_method: CalibrationMethod::Percentile,
        ..AdviseOptions::default()
    };
    let (report, _) = advisor::advise(
        graph.clone(),
        "tinycnn",
        &cpu_device(),
        &options,
        &advise_options,
    )
    .unwrap();
    let q = report.quantization.unwrap();
    assert!(
        q.calibration.starts_with("3 input(s) from"),
        "{}",
        q.calibration
    );
    assert!(q.calibration.contains("percentile"), "{}", q.calibration);
    let acc = q.accuracy.unwrap();
    assert_eq!(acc.samples, 3);
    assert!(acc.cosine_min >= 0.99, "{acc:?}");
    // A file of the wrong shape is an error naming it.
    let t = exec::random_input(&[1, 3, 8, 8], false, 1, 10);
    exec::npy::write_npy(&dir.join("sample9.npy"), &t).unwrap();
    let err = advisor::advise(graph, "tinycnn", &cpu_device(), &options, &advise_options)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("sample9.npy"), "{err}");
}

#[test]
fn bf16_and_fp16_passes_store_half_width_weights() {
    let (report, original, rewritten, options) =
        advise("mobilenetv2", "fold,bn-fold,fuse,bf16", &cpu_device());
    let q = report.quantization.unwrap();
    let converted = q.decisions.iter().filter(|d| d.decision == "bf16").count();
    assert!(converted >= 30, "{:#?}", q.decisions);
    assert_eq!(
        count_ops(&rewritten, "HalfConv") + count_ops(&rewritten, "HalfMatMul"),
        converted
    );
    assert!(q.accuracy.unwrap().cosine_min > 0.999);
    let (a, b) = (run(&original, &options, 5), run(&rewritten, &options, 5));
    assert!(cosine(&a[0].1.to_f32(), &b[0].1.to_f32()) > 0.999);
    // The bf16 weights are counted at 2 bytes.
    let bf = report.passes.iter().find(|p| p.name == "bf16").unwrap();
    assert!(bf.bytes_saved > 0 && bf.predicted_speedup > 1.2, "{bf:?}");

    // This device has no fp16 ceiling: storage only, which rarely pays; the pass says so and
    // is never measured.
    let (report, _, _, _) = advise("tinycnn", "fold,fuse,fp16", &cpu_device());
    let q = report.quantization.unwrap();
    assert!(
        q.notes.iter().any(|n| n.contains("no fp16 kernel")),
        "{:?}",
        q.notes
    );
    let fp16 = report.passes.iter().find(|p| p.name == "fp16").unwrap();
    assert!(fp16.measured_speedup.is_none());
    // On a GPU with fp16 tensor cores it converts.
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let (report, _, rewritten, _) = advise("resnet50", "fold,bn-fold,fuse,fp16", &device);
    assert!(
        count_ops(&rewritten, "HalfConv") > 30,
        "{:?}",
        report.quantization
    );
}

/// Advises `name` with `passes`, exports the original and the rewrite, runs both in
/// onnxruntime on the same seeded input; returns the cosine of the outputs.
fn onnxruntime_cosine(python: &Path, name: &str, passes: &str, shape: &str) -> f64 {
    let dir = super::cli::tempdir();
    let model = builtin::find(name).unwrap();
    let proto = model.build(WeightFill::Random(3));
    let original = dir.join(format!("{name}.onnx"));
    std::fs::write(&original, prost::Message::encode_to_vec(&proto)).unwrap();
    let (_, _, rewritten, _) = advise(name, passes, &cpu_device());
    let optimized = dir.join(format!("{name}-q.onnx"));
    std::fs::write(
        &optimized,
        prost::Message::encode_to_vec(&export::to_model(&rewritten).unwrap()),
    )
    .unwrap();
    let mut outputs = Vec::new();
    for (tag, path) in [("orig", &original), ("q", &optimized)] {
        let out_dir = dir.join(format!("{name}-{tag}"));
        let status = std::process::Command::new(python)
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
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join("manifest.json")).unwrap())
                .unwrap();
        let file = manifest["outputs"][0]["file"].as_str().unwrap().to_string();
        outputs.push(exec::npy::read_npy(&out_dir.join(file)).unwrap().to_f32());
    }
    // The exports (a ResNet-50 is 100 MB a copy) are not needed past this point.
    let _ = std::fs::remove_dir_all(&dir);
    cosine(&outputs[0], &outputs[1])
}

#[test]
fn exported_qdq_runs_in_onnxruntime_within_the_accuracy_proxy() {
    let Some(python) = venv_python() else { return };
    for name in ["resnet50", "mobilenetv2"] {
        let c = onnxruntime_cosine(&python, name, "fold,bn-fold,fuse,int8", "input=1x3x224x224");
        assert!(c >= 0.99, "{name}: onnxruntime int8 vs fp32 cosine {c}");
    }
    let c = onnxruntime_cosine(
        &python,
        "tinycnn",
        "fold,bn-fold,fuse,bf16",
        "input=1x3x32x32",
    );
    assert!(c >= 0.999, "tinycnn bf16 export: cosine {c}");
}

#[test]
fn exported_qdq_lowers_back_onto_the_int8_kernels() {
    for name in ["tinycnn", "mobilenetv2"] {
        let (_, _, rewritten, options) = advise(name, "fold,bn-fold,fuse,int8", &cpu_device());
        let proto = export::to_model(&rewritten).unwrap();
        let mut reloaded = import::import_model(&proto, Path::new("."), Path::new(name)).unwrap();
        assert_eq!(count_ops(&reloaded, "QConv"), 0);
        let lowered = advisor::qdq::lower_checked(&mut reloaded).unwrap();
        assert_eq!(
            lowered.qconv,
            count_ops(&rewritten, "QConv"),
            "{name}: {lowered:?}"
        );
        assert_eq!(
            lowered.qmatmul,
            count_ops(&rewritten, "QMatMul"),
            "{name}: {lowered:?}"
        );
        assert_eq!(
            count_ops(&reloaded, "QuantizeLinear"),
            0,
            "{name}: {lowered:?}"
        );
        assert_eq!(
            count_ops(&reloaded, "DequantizeLinear"),
            0,
            "{name}: {lowered:?}"
        );
        // Same kernels, same epilogues: the same numbers.
        let (a, b) = (run(&rewritten, &options, 9), run(&reloaded, &options, 9));
        let (x, y) = (a[0].1.to_f32(), b[0].1.to_f32());
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = x
            .iter()
            .zip(&y)
            .fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(err <= 1e-5 * scale, "{name}: max error {err} of {scale}");
    }
}

#[test]
fn onnxruntime_static_quantizer_output_runs_on_the_int8_kernels() {
    let Some(python) = venv_python() else { return };
    let dir = super::cli::tempdir();
    let model = builtin::find("tinycnn").unwrap();
    let fp32 = dir.join("tinycnn.onnx");
    std::fs::write(
        &fp32,
        prost::Message::encode_to_vec(&model.build(WeightFill::Random(4))),
    )
    .unwrap();
    let qdq = dir.join("tinycnn-qdq.onnx");
    let script = r#"
import sys, numpy as np
from onnxruntime.quantization import quantize_static, QuantFormat, QuantType, CalibrationDataReader
class Reader(CalibrationDataReader):
    def __init__(self):
        self.data = iter([{"input": np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype(np.float32)} for i in range(4)])
    def get_next(self):
        return next(self.data, None)
quantize_static(sys.argv[1], sys.argv[2], Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE)
"#;
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(super::common::with_reduce_range(script))
        .arg(&fp32)
        .arg(&qdq)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ort_dir = dir.join("ort");
    let out = std::process::Command::new(&python)
        .arg(repo_root().join("scripts/ort_run.py"))
        .arg(&qdq)
        .arg(&ort_dir)
        .args(["--input", "input=1x3x32x32"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ort_dir.join("manifest.json")).unwrap())
            .unwrap();
    let input = exec::npy::read_npy(&ort_dir.join(manifest["inputs"][0]["file"].as_str().unwrap()))
        .unwrap();
    let want = exec::npy::read_npy(&ort_dir.join(manifest["outputs"][0]["file"].as_str().unwrap()))
        .unwrap();

    let mut graph = import::load_graph(&qdq).unwrap();
    let lowered = advisor::qdq::lower_checked(&mut graph).unwrap();
    assert_eq!(lowered.qconv, 2, "{lowered:?}");
    assert_eq!(lowered.qmatmul, 1, "{lowered:?}");
    let bindings = (model.default_bindings)();
    let (order, states, _) = analysis::prepare_graph(&mut graph, &bindings).unwrap();
    let plan = exec::build_plan(&graph, &order, &states, &PlanOptions::default()).unwrap();
    let inputs = HashMap::from([("input".to_string(), input)]);
    let got = plan.run(&mut plan.workspace(), &inputs, None).unwrap();
    let c = cosine(&want.to_f32(), &got[0].1.to_f32());
    assert!(
        c >= 0.999,
        "lowered onnxruntime QDQ model vs onnxruntime: cosine {c}"
    );
}

#[test]
fn standalone_quantize_and_dequantize_have_kernels() {
    use roofline::analysis::onnx_proto::TensorProto;
    use roofline::builtin::{GraphBuilder, SigDim};
    let mut b = GraphBuilder::new(WeightFill::Random(1));
    let dims = [SigDim::Fixed(2), SigDim::Fixed(5)];
    let x = b.input("x", 1, &dims);
    let scale = b.scalar_const("scale", 0.1);
    let q = b.node("QuantizeLinear", &[&x, &scale, "zp"], vec![]);
    let d = b.node("DequantizeLinear", &[&q, &scale, "zp"], vec![]);
    b.output(&q, 2, &dims);
    b.output(&d, 1, &dims);
    let mut proto = b.finish("qdq");
    if let Some(g) = proto.graph.as_mut() {
        g.initializer.push(TensorProto {
            dims: vec![],
            data_type: 2,
            name: "zp".into(),
            raw_data: bytes::Bytes::from(vec![100u8]),
            ..Default::default()
        });
    }
    let graph = import::import_model(&proto, Path::new("."), Path::new("qdq")).unwrap();
    // As imported, both run with their own kernels; lowered, the pair feeding the second
    // output becomes one FakeQuant (the u8 output keeps its QuantizeLinear).
    let mut lowered = graph.clone();
    let report = advisor::qdq::lower_checked(&mut lowered).unwrap();
    assert_eq!(report.fake_quant, 1, "{report:?}");
    assert_eq!(count_ops(&lowered, "QuantizeLinear"), 1);
    for mut graph in [graph, lowered] {
        check_standalone(&mut graph);
    }
}

fn check_standalone(graph: &mut Graph) {
    let (order, states, _) = analysis::prepare_graph(graph, &Default::default()).unwrap();
    let plan = exec::build_plan(graph, &order, &states, &PlanOptions::default()).unwrap();
    let x = RtTensor {
        shape: vec![2, 5],
        data: exec::RtData::F32(vec![
            0.0, 0.05, 0.25, -3.0, 30.0, -20.0, 1.26, 2.0, -0.04, 15.49,
        ]),
    };
    let out = plan
        .run(
            &mut plan.workspace(),
            &HashMap::from([("x".to_string(), x)]),
            None,
        )
        .unwrap();
    assert_eq!(
        out[0].1.to_f32(),
        vec![100.0, 100.0, 102.0, 70.0, 255.0, 0.0, 113.0, 120.0, 100.0, 255.0]
    );
    let d = out[1].1.to_f32();
    let want = [0.0, 0.0, 0.2, -3.0, 15.5, -10.0, 1.3, 2.0, 0.0, 15.5];
    for (g, w) in d.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{d:?}");
    }
}

/// A model in onnxruntime's QOperator form (QLinearConv, QLinearAdd, QGemm between
/// QuantizeLinear and DequantizeLinear), written by its static quantizer from MobileNetV2: the
/// loader expands it to QDQ and lowers that onto the int8 kernels; `roofline run` must then
/// agree with onnxruntime running the QOperator file.
#[test]
fn onnxruntime_qoperator_model_runs_and_matches_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let dir = super::cli::tempdir();
    let fp32 = dir.join("mobilenetv2.onnx");
    let out = super::common::roofline(&[
        "export",
        "builtin:mobilenetv2",
        "-o",
        fp32.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let qop = dir.join("mobilenetv2-qoperator.onnx");
    let script = r#"
import sys, collections, numpy as np, onnx
from onnxruntime.quantization import quantize_static, QuantFormat, QuantType, CalibrationDataReader
class Reader(CalibrationDataReader):
    def __init__(self):
        self.data = iter([{"input": np.random.default_rng(i).random((1, 3, 224, 224)).astype(np.float32)} for i in range(4)])
    def get_next(self):
        return next(self.data, None)
quantize_static(sys.argv[1], sys.argv[2], Reader(), quant_format=QuantFormat.QOperator, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE)
ops = collections.Counter(n.op_type for n in onnx.load(sys.argv[2]).graph.node)
assert ops["QLinearConv"] > 0 and ops["QLinearAdd"] > 0, ops
"#;
    let made = std::process::Command::new(&python)
        .arg("-c")
        .arg(super::common::with_reduce_range(script))
        .arg(&fp32)
        .arg(&qop)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let ort_dir = dir.join("ort");
    let ran = std::process::Command::new(&python)
        .arg(repo_root().join("scripts/ort_run.py"))
        .arg(&qop)
        .arg(&ort_dir)
        .args(["--input", "input=1x3x224x224"])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ort_dir.join("manifest.json")).unwrap())
            .unwrap();
    let input_file = ort_dir.join(manifest["inputs"][0]["file"].as_str().unwrap());
    let want = exec::npy::read_npy(&ort_dir.join(manifest["outputs"][0]["file"].as_str().unwrap()))
        .unwrap();
    let ours = dir.join("ours");
    let out = super::common::roofline(&[
        "run",
        qop.to_str().unwrap(),
        "-i",
        &format!("input={}", input_file.display()),
        "-o",
        ours.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("QOperator form expanded"), "{err}");
    assert!(
        err.contains("QConv"),
        "the convolutions run on the int8 kernels: {err}"
    );
    let got_file = std::fs::read_dir(&ours)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let got = exec::npy::read_npy(&got_file).unwrap();
    let c = cosine(&want.to_f32(), &got.to_f32());
    assert!(
        c >= 0.999,
        "QOperator MobileNetV2 vs onnxruntime: cosine {c}"
    );
}
