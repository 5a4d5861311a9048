//! The executor against onnxruntime: every built-in model and every corpus model (light models
//! with random weights, PP-OCR, magika, silero-vad, smart-turn's QDQ int8 transformer) runs on the same seeded inputs in both; outputs must agree
//! within max |ours − ort| ≤ 1e-4 + 2e-3 · max |ort| per output tensor.
//!
//! Models load as the commands load them (QOperator expanded, QDQ lowered onto the int8
//! kernels), and each plan runs twice on one workspace: both runs must give the same bits.
//!
//! References are produced by `scripts/ort_run.py` (onnxruntime, 1 thread) into
//! `target/ort-ref/<model>/` and reused while the model file is unchanged.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use roofline::analysis::{self, import, Bindings};
use roofline::exec::{self, npy, PlanOptions};

use super::common::{corpus_dir, repo_root, roofline, venv_python};

const ATOL: f32 = 1e-4;
const RTOL: f32 = 2e-3;

pub(super) fn reference(
    python: &Path,
    model: &Path,
    key: &str,
    shapes: &[&str],
    extra: &[&str],
) -> PathBuf {
    let dir = repo_root().join("target/ort-ref").join(key);
    let manifest = dir.join("manifest.json");
    let fresh = manifest.exists()
        && std::fs::metadata(&manifest).and_then(|m| m.modified()).ok()
            >= std::fs::metadata(model).and_then(|m| m.modified()).ok();
    if !fresh {
        let mut cmd = Command::new(python);
        cmd.arg(repo_root().join("scripts/ort_run.py"))
            .arg(model)
            .arg(&dir);
        for s in shapes {
            cmd.arg("--input").arg(s);
        }
        cmd.args(extra);
        let out = cmd.output().expect("python runs");
        assert!(
            out.status.success(),
            "ort_run failed for {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// Runs `model` with our executor on the reference inputs and compares every output.
pub(super) fn compare(model: &Path, reference_dir: &Path) -> Result<String, String> {
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(reference_dir.join("manifest.json")).unwrap(),
    )
    .unwrap();
    let mut inputs = HashMap::new();
    let mut bindings = Vec::new();
    for input in manifest["inputs"].as_array().unwrap() {
        let name = input["name"].as_str().unwrap().to_string();
        let tensor = npy::read_npy(&reference_dir.join(input["file"].as_str().unwrap()))
            .map_err(|e| e.to_string())?;
        bindings.push((
            name.clone(),
            tensor.shape.iter().map(|&d| d as u64).collect(),
        ));
        inputs.insert(name, tensor);
    }
    let mut graph = import::load_graph(model).map_err(|e| e.to_string())?;
    // Loaded as every command loads a file: QOperator ops expanded to QDQ, QDQ lowered onto the
    // int8 kernels. Left as float QuantizeLinear/DequantizeLinear pairs, a QDQ model is a
    // staircase of float roundings: onnxruntime itself moves smart-turn's logit by 3.2e-3
    // between its fused int8 run and its unoptimised float-emulated one, past this tolerance.
    roofline::advisor::qoperator::expand_qoperator(&mut graph);
    roofline::advisor::qdq::lower_checked(&mut graph).map_err(|e| e.to_string())?;
    let (order, states, _) = analysis::prepare_graph(
        &mut graph,
        &Bindings {
            inputs: bindings,
            batch: None,
            dims: Vec::new(),
        },
    )
    .map_err(|e| e.to_string())?;
    let mut report = Vec::new();
    // One thread, then two: the threaded paths (GEMM splits, element-wise pieces, depthwise
    // channels, int8 lowering) must give the same answers on real graphs.
    for threads in [1, 2] {
        let options = PlanOptions {
            threads,
            ..PlanOptions::default()
        };
        let plan =
            exec::build_plan(&graph, &order, &states, &options).map_err(|e| e.to_string())?;
        let mut ws = plan.workspace();
        // Run twice on the same workspace: buffers and scratch reused across runs must not
        // change the result (a shrinking scratch once broke the second run).
        let first: HashMap<String, exec::RtTensor> = plan
            .run(&mut ws, &inputs, None)
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        let outputs: HashMap<String, exec::RtTensor> = plan
            .run(&mut ws, &inputs, None)
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        for output in manifest["outputs"].as_array().unwrap() {
            let name = output["name"].as_str().unwrap();
            let want = npy::read_npy(&reference_dir.join(output["file"].as_str().unwrap()))
                .map_err(|e| e.to_string())?;
            let got = outputs
                .get(name)
                .ok_or_else(|| format!("output {name} missing"))?;
            if got.shape != want.shape {
                return Err(format!(
                    "{name}: shape {:?} vs onnxruntime {:?}",
                    got.shape, want.shape
                ));
            }
            let (g, w) = (got.to_f32(), want.to_f32());
            let first_run = first
                .get(name)
                .ok_or_else(|| format!("output {name} missing from the first run"))?
                .to_f32();
            if first_run.len() != g.len() {
                return Err(format!(
                    "{name}: the two runs gave different element counts"
                ));
            }
            if let Some(at) = (0..g.len()).find(|&i| first_run[i].to_bits() != g[i].to_bits()) {
                return Err(format!(
                    "{name}, {threads} thread(s): the second run on the same workspace gave \
                     {} at element {at}, the first {}",
                    g[at], first_run[at]
                ));
            }
            let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let max_err = g
                .iter()
                .zip(&w)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            if max_err.is_nan() || max_err > ATOL + RTOL * scale {
                return Err(format!(
                    "{name}, {threads} thread(s): max abs error {max_err:e} exceeds {ATOL:e} + {RTOL:e}·{scale:e}"
                ));
            }
            report.push(format!(
                "{name} ({threads}t): max err {max_err:.2e} (scale {scale:.2e})"
            ));
        }
    }
    Ok(report.join("; "))
}

fn export_builtin(name: &str) -> PathBuf {
    let dir = repo_root().join("target/ort-ref/models");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.onnx"));
    if !path.exists() {
        let out = roofline(&[
            "export",
            &format!("builtin:{name}"),
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success());
    }
    path
}

#[test]
fn builtin_models_match_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let mut failures = Vec::new();
    for (name, shapes) in [
        ("tinycnn", vec!["input=2x3x32x32"]),
        ("mobilenetv2", vec!["input=1x3x224x224"]),
        ("resnet50", vec!["input=1x3x224x224"]),
        ("vgg16", vec!["input=1x3x224x224"]),
        ("bert-base", vec!["input_ids=1x64"]),
        ("yolov8n", vec!["images=1x3x640x640"]),
    ] {
        let model = export_builtin(name);
        let reference_dir = reference(&python, &model, &format!("builtin-{name}"), &shapes, &[]);
        match compare(&model, &reference_dir) {
            Ok(summary) => eprintln!("{name}: {summary}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes the onnxruntime-optimised forms of the model given as argv[1] into argv[2]: the
/// session's extended-level graph (FusedMatMul, BiasGelu...), the transformer optimizer's
/// (SkipLayerNormalization, BiasGelu...) and the dynamic int8 quantizer's
/// (DynamicQuantizeLinear, MatMulInteger). Fails when either holds no `com.microsoft` op, so the
/// test below cannot silently compare plain graphs.
const ORT_OPTIMISED: &str = r#"
import sys, collections
import onnx, onnxruntime as ort
from onnxruntime.transformers import optimizer
source, folder = sys.argv[1], sys.argv[2]
options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
options.optimized_model_filepath = folder + "/bert_tiny_ort_extended.onnx"
ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
optimized = optimizer.optimize_model(source, model_type="bert", num_heads=2, hidden_size=128, opt_level=0)
optimized.save_model_to_file(folder + "/bert_tiny_transformers.onnx")
for name in ["bert_tiny_ort_extended", "bert_tiny_transformers"]:
    ops = collections.Counter(n.op_type for n in onnx.load(f"{folder}/{name}.onnx").graph.node if n.domain == "com.microsoft")
    if not ops:
        sys.exit(f"{name}: no com.microsoft op")
    print(name, dict(ops))
from onnxruntime.quantization import quantize_dynamic, QuantType
quantize_dynamic(source, folder + "/bert_tiny_dynamic_int8.onnx", weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE)
ops = collections.Counter(n.op_type for n in onnx.load(folder + "/bert_tiny_dynamic_int8.onnx").graph.node)
if not ops["MatMulInteger"] or not ops["DynamicQuantizeLinear"]:
    sys.exit(f"dynamic quantization wrote {dict(ops)}")
"#;

#[test]
fn onnxruntime_optimised_transformers_match_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let source = export_builtin("bert-tiny");
    let folder = repo_root().join("target/ort-ref/models/ort-optimised");
    std::fs::create_dir_all(&folder).unwrap();
    let made = Command::new(&python)
        .arg("-c")
        .arg(super::common::with_reduce_range(ORT_OPTIMISED))
        .arg(&source)
        .arg(&folder)
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "onnxruntime's optimizers failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&made.stdout));
    let mut failures = Vec::new();
    for name in [
        "bert_tiny_ort_extended",
        "bert_tiny_transformers",
        "bert_tiny_dynamic_int8",
    ] {
        let model = folder.join(format!("{name}.onnx"));
        let reference_dir = reference(&python, &model, name, &["input_ids=2x16"], &[]);
        match compare(&model, &reference_dir) {
            Ok(summary) => eprintln!("{name}: {summary}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A float Conv → LSTM → MatMul model (written here, seeded weights) and its form after
/// onnxruntime's `quantize_dynamic` over Conv, LSTM and MatMul: ConvInteger,
/// DynamicQuantizeLSTM (com.microsoft), MatMulInteger and DynamicQuantizeLinear, the ops of
/// dynamically quantized OCR recognisers (ddddocr's `common_old.onnx`). Fails when the
/// quantizer wrote none of them.
const DYNAMIC_CONV_LSTM: &str = r#"
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
from onnxruntime.quantization import quantize_dynamic, QuantType
out = sys.argv[1]
rng = np.random.default_rng(7)
C, H, W, K, HID = 3, 6, 20, 8, 16
def init(name, arr): return numpy_helper.from_array(arr.astype(np.float32), name)
conv_w = rng.normal(0, 0.3, (K, C, 3, 3)); conv_b = rng.normal(0, 0.1, K)
feat = K * (H // 2)
lstm_w = rng.normal(0, 0.2, (2, 4 * HID, feat)); lstm_r = rng.normal(0, 0.2, (2, 4 * HID, HID)); lstm_b = rng.normal(0, 0.1, (2, 8 * HID))
fc_w = rng.normal(0, 0.2, (2 * HID, 10))
nodes = [
    helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 1]),
    helper.make_node("Relu", ["c"], ["r"]),
    # [1, K, H/2, W] -> [W, 1, K*H/2]
    helper.make_node("Transpose", ["r"], ["t"], perm=[3, 0, 1, 2]),
    helper.make_node("Reshape", ["t", "shape"], ["seq"]),
    helper.make_node("LSTM", ["seq", "lstm_w", "lstm_r", "lstm_b"], ["y", "yh", "yc"], hidden_size=HID, direction="bidirectional"),
    helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["yt", "shape2"], ["flat"]),
    helper.make_node("MatMul", ["flat", "fc_w"], ["logits"]),
]
inits = [init("conv_w", conv_w), init("conv_b", conv_b), init("lstm_w", lstm_w), init("lstm_r", lstm_r),
         init("lstm_b", lstm_b), init("fc_w", fc_w),
         numpy_helper.from_array(np.array([W, 1, feat], np.int64), "shape"),
         numpy_helper.from_array(np.array([W, 2 * HID], np.int64), "shape2")]
g = helper.make_graph(nodes, "convlstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                      [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [W, 10])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, out + ".float.onnx")
quantize_dynamic(out + ".float.onnx", out, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "LSTM", "MatMul"],
                 reduce_range=REDUCE_RANGE)
import collections
print(dict(collections.Counter(n.op_type for n in onnx.load(out).graph.node)))
"#;

#[test]
fn dynamically_quantized_conv_and_lstm_match_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let folder = repo_root().join("target/ort-ref/models/dynamic-quant");
    std::fs::create_dir_all(&folder).unwrap();
    let model = folder.join("convlstm_dynamic_int8.onnx");
    let made = Command::new(&python)
        .arg("-c")
        .arg(super::common::with_reduce_range(DYNAMIC_CONV_LSTM))
        .arg(&model)
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "building the quantized model failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let written = String::from_utf8_lossy(&made.stdout);
    for op in ["ConvInteger", "DynamicQuantizeLSTM", "MatMulInteger"] {
        assert!(written.contains(op), "quantize_dynamic wrote {written}");
    }
    let reference_dir = reference(&python, &model, "convlstm_dynamic_int8", &[], &[]);
    match compare(&model, &reference_dir) {
        Ok(summary) => eprintln!("convlstm_dynamic_int8: {summary}"),
        Err(e) => panic!("convlstm_dynamic_int8: {e}"),
    }
}

#[test]
fn corpus_models_match_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let Some(dir) = corpus_dir() else { return };
    let mut cases: Vec<(PathBuf, Vec<&str>, Vec<&str>)> = Vec::new();
    for entry in std::fs::read_dir(dir.join("light-random"))
        .expect("light-random models (scripts/materialise_light.py)")
    {
        let path = entry.unwrap().path();
        cases.push((path, vec![], vec![]));
    }
    cases.push((
        dir.join("ppocr/ch_PP-OCRv4_det_infer.onnx"),
        vec!["x=1x3x320x320"],
        vec![],
    ));
    cases.push((
        dir.join("ppocr/ch_PP-OCRv4_rec_infer.onnx"),
        vec!["x=1x3x48x320"],
        vec![],
    ));
    cases.push((
        dir.join("ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        vec!["x=1x3x48x192"],
        vec![],
    ));
    cases.push((
        dir.join("extra/magika_standard_v3_3.onnx"),
        vec!["bytes=1x2048"],
        vec!["--int-range", "0,257"],
    ));
    cases.push((
        dir.join("audio/silero_vad_16k_op15.onnx"),
        vec!["input=1x512", "state=2x1x128"],
        vec![],
    ));
    cases.push((
        dir.join("audio/smart-turn-v3.2-cpu.onnx"),
        vec!["input_features=1x80x800"],
        vec![],
    ));
    cases.sort();
    let mut failures = Vec::new();
    for (model, shapes, extra) in cases {
        let key = model.file_stem().unwrap().to_string_lossy().to_string();
        let reference_dir = reference(&python, &model, &key, &shapes, &extra);
        match compare(&model, &reference_dir) {
            Ok(summary) => eprintln!("{key}: {summary}"),
            Err(e) => failures.push(format!("{key}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The runnable decoder presets against onnxruntime, with their `past_key_values` inputs, for a
/// prompt step after a short cache and for a decode step: `llama-tiny` (grouped-query
/// attention, rotary embedding, RMSNorm, SwiGLU) and `gpt2-tiny` (learned positions, LayerNorm,
/// GELU, QKV bias, tied embeddings).
#[test]
fn decoder_preset_matches_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let mut failures = Vec::new();
    // (preset, KV heads, head size, vocabulary)
    for (preset, kv_heads, head, vocab) in [("llama-tiny", 2, 64, 2048), ("gpt2-tiny", 4, 32, 1024)]
    {
        let model = export_builtin(preset);
        for (key, new_tokens, past) in [("prefill", 8, 16), ("decode", 1, 40)] {
            let mut shapes = vec![format!("input_ids=1x{new_tokens}")];
            for layer in 0..2 {
                for kind in ["key", "value"] {
                    shapes.push(format!(
                        "past_key_values.{layer}.{kind}=1x{kv_heads}x{past}x{head}"
                    ));
                }
            }
            let shapes: Vec<&str> = shapes.iter().map(String::as_str).collect();
            let range = format!("0,{vocab}");
            let reference_dir = reference(
                &python,
                &model,
                &format!("builtin-{preset}-{key}"),
                &shapes,
                &["--int-range", &range],
            );
            match compare(&model, &reference_dir) {
                Ok(summary) => eprintln!("{preset} {key}: {summary}"),
                Err(e) => failures.push(format!("{preset} {key}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes one ConvTranspose model per padding form: explicit pads, SAME_UPPER and SAME_LOWER
/// (odd total crop), an `output_shape` shorter and one longer than the scatter, with
/// `output_padding`, dilation and groups. Kernel and inference derive the crop from the same
/// `ConvTransposeConfig` window; before it the kernel ignored `auto_pad` and `output_shape`.
const CONV_TRANSPOSE_MODELS: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

cases = {
    "pads": dict(strides=[2, 2], pads=[1, 0, 1, 1]),
    "same_upper": dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    "output_shape_short": dict(strides=[2, 2], output_shape=[6, 5]),
    "output_shape_long": dict(strides=[3, 2], output_shape=[10, 8]),
    "output_padding_dilated": dict(strides=[2, 2], output_padding=[1, 1], dilations=[2, 1]),
    # Kernel = stride: every output gets one tap (the interleaving path), pairs and a general
    # width, grouped.
    "tiled_2x2": dict(strides=[2, 2], kernel=(2, 2)),
    "tiled_2x3_grouped": dict(strides=[2, 3], kernel=(2, 3)),
}
rng = np.random.default_rng(7)
for name, attrs in cases.items():
    group = 2 if name in ("same_lower", "tiled_2x3_grouped") else 1
    kh, kw = attrs.pop("kernel", (3, 3))
    # W is [C_in, C_out / group, kh, kw]: 3 output channels per group.
    w = numpy_helper.from_array(rng.standard_normal((4, 3, kh, kw)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3 * group).astype(np.float32), "b")
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, **attrs)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
        [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, f"{sys.argv[1]}/convtranspose_{name}.onnx")
"#;

/// Reductions large enough to split over two threads (trailing axes: rows per thread) and
/// ones that are not (a middle axis), one model per reduction kind.
const REDUCE_MODELS: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper

cases = [
    ("ReduceMean", [512, 768], [1]),
    ("ReduceSum", [64, 48, 96], [1, 2]),
    ("ReduceMax", [300, 1000], [1]),
    ("ReduceSumSquare", [8, 96, 200], [1]),
    ("ReduceLogSumExp", [256, 513], [1]),
    ("ReduceL2", [1, 200000], [1]),
]
for op, shape, axes in cases:
    axes_init = helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [1 if i in axes else d for i, d in enumerate(shape)])],
        [axes_init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, f"{sys.argv[1]}/reduce_{op}.onnx")
"#;

#[test]
fn large_reductions_match_onnxruntime_on_one_and_two_threads() {
    models_match_onnxruntime(REDUCE_MODELS, 6);
}

/// MatMulNBits (onnxruntime's 4-bit block-quantized weights): symmetric and with packed zero
/// points, a bias, and a K that leaves the last block partly filled; weights packed here from
/// the contrib op's documented layout (low nibble first, one scale per block).
const MATMUL_NBITS_MODELS: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
cases = {
    "symmetric": dict(k=64, n=24, zero_points=False, bias=False),
    "zero_points_bias": dict(k=64, n=24, zero_points=True, bias=True),
    "partial_block": dict(k=70, n=8, zero_points=True, bias=False),
}
for name, case in cases.items():
    k, n, block = case["k"], case["n"], 32
    blocks = -(-k // block)
    q = rng.integers(0, 16, size=(n, blocks * block)).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, blocks, block // 2)
    scales = rng.uniform(0.01, 0.1, size=n * blocks).astype(np.float32)
    inputs = ["A", "B", "scales"]
    inits = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales")]
    if case["zero_points"]:
        zp = rng.integers(0, 16, size=(n, blocks)).astype(np.uint8)
        if blocks % 2:
            zp = np.concatenate([zp, np.zeros((n, 1), np.uint8)], axis=1)
        packed_zp = (zp[:, 0::2] | (zp[:, 1::2] << 4)).reshape(-1)
        inits.append(numpy_helper.from_array(packed_zp, "zp"))
        inputs.append("zp")
    if case["bias"]:
        inputs += ["", "bias"] if case["zero_points"] else ["", "", "bias"]
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"))
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    graph = helper.make_graph([node], name,
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, n])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, f"{sys.argv[1]}/matmulnbits_{name}.onnx")
"#;

/// onnxruntime's GroupQueryAttention: a prompt without cache, a decode step with a separate and
/// with a shared (longer) cache buffer, rotary embedding on packed QKV, and a local window.
const GROUP_QUERY_ATTENTION_MODELS: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
out = sys.argv[1]
rng = np.random.default_rng(3)
H, KV = 4, 2
def model(name, batch, seq, past, buffer, total, rotary=False, packed=False, window=-1, D=8):
    inputs = [helper.make_tensor_value_info("query", TensorProto.FLOAT, [batch, seq, (H + 2 * KV) * D if packed else H * D])]
    inits = []
    names = ["query"]
    if packed:
        names += ["", ""]
    else:
        inputs += [helper.make_tensor_value_info("key", TensorProto.FLOAT, [batch, seq, KV * D]),
                   helper.make_tensor_value_info("value", TensorProto.FLOAT, [batch, seq, KV * D])]
        names += ["key", "value"]
    if buffer is not None:
        inputs += [helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [batch, KV, buffer, D]),
                   helper.make_tensor_value_info("past_value", TensorProto.FLOAT, [batch, KV, buffer, D])]
        names += ["past_key", "past_value"]
    else:
        names += ["", ""]
    inits.append(numpy_helper.from_array(np.full(batch, past + seq - 1, np.int32), "seqlens_k"))
    inits.append(numpy_helper.from_array(np.array(total, np.int32), "total_sequence_length"))
    names += ["seqlens_k", "total_sequence_length"]
    attrs = dict(num_heads=H, kv_num_heads=KV, local_window_size=window)
    if rotary:
        angles = np.outer(np.arange(32), 1.0 / 10000 ** (np.arange(D // 2) / (D // 2)))
        inits.append(numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"))
        inits.append(numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"))
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    node = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"], domain="com.microsoft", **attrs)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["out", "present_key", "present_value"]]
    graph = helper.make_graph([node], name, inputs, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, f"{out}/gqa_{name}.onnx")
model("prompt", 1, 4, 0, None, 4)
model("decode", 2, 1, 5, 5, 6)
model("shared_buffer", 1, 1, 5, 8, 6)
model("rotary_packed", 1, 3, 2, 2, 5, rotary=True, packed=True, D=16)
model("window", 1, 5, 0, None, 5, window=2)
"#;

/// onnxruntime's contrib RotaryEmbedding: 3-D with num_heads, 4-D interleaved, one position
/// offset for the whole sequence.
const CONTRIB_ROTARY_MODELS: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
out = sys.argv[1]
angles = np.outer(np.arange(64), 1.0 / 10000 ** (np.arange(8) / 8))
def model(name, shape, positions, interleaved=0, num_heads=0):
    inits = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
             numpy_helper.from_array(positions.astype(np.int64), "positions")]
    attrs = dict(interleaved=interleaved)
    if num_heads:
        attrs["num_heads"] = num_heads
    node = helper.make_node("RotaryEmbedding", ["x", "positions", "cos", "sin"], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, f"{out}/contrib_rotary_{name}.onnx")
model("three_d", [2, 3, 32], np.array([[0, 1, 2], [5, 6, 7]]), num_heads=2)
model("four_d_interleaved", [1, 2, 3, 16], np.array([[3, 4, 5]]), interleaved=1)
model("offset", [1, 3, 32], np.array([4]))
"#;

#[test]
fn contrib_rotary_embedding_matches_onnxruntime() {
    models_match_onnxruntime(CONTRIB_ROTARY_MODELS, 3);
}

#[test]
fn group_query_attention_matches_onnxruntime() {
    models_match_onnxruntime(GROUP_QUERY_ATTENTION_MODELS, 5);
}

#[test]
fn matmul_nbits_matches_onnxruntime() {
    models_match_onnxruntime(MATMUL_NBITS_MODELS, 3);
}

#[test]
fn conv_transpose_padding_forms_match_onnxruntime() {
    models_match_onnxruntime(CONV_TRANSPOSE_MODELS, 8);
}

/// Runs `script` (it writes `count` models into the folder given as its argument) and checks
/// each model against onnxruntime on one and two threads (`compare`).
fn models_match_onnxruntime(script: &str, count: usize) {
    let Some(python) = venv_python() else { return };
    let dir = super::cli::tempdir();
    let made = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&*dir)
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "building the models failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mut models: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    models.sort();
    assert_eq!(models.len(), count);
    let mut failures = Vec::new();
    for model in &models {
        let key = model.file_stem().unwrap().to_string_lossy().into_owned();
        let reference_dir = reference(&python, model, &key, &[], &[]);
        match compare(model, &reference_dir) {
            Ok(summary) => eprintln!("{key}: {summary}"),
            Err(e) => failures.push(format!("{key}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
