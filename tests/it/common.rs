//! Shared helpers: running the binary, locating the fetched model corpus.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roofline::analysis::{self, import, Analysis, AnalyzeOptions, Bindings};
use roofline::builtin::{self, WeightFill};
use roofline::device::{find_device, Precision};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn roofline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roofline"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("the roofline binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The fetched corpus (`scripts/fetch-models.sh`). Returns `None` with a message when it is
/// missing; on CI (env `CI` set) a missing corpus is a failure, never a skip.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = repo_root().join(".cache/models");
    if dir.join("light/light_resnet50.onnx").exists() {
        return Some(dir);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "model corpus missing under {}: CI must run scripts/fetch-models.sh",
            dir.display()
        );
    }
    eprintln!(
        "SKIP: model corpus not found under {} (offline?). Run scripts/fetch-models.sh.",
        dir.display()
    );
    None
}

/// The project's Python venv with onnxruntime (`scripts/setup-python.sh`), same skip rules.
pub fn venv_python() -> Option<PathBuf> {
    let python = repo_root().join(".venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} missing: CI must run scripts/setup-python.sh",
            python.display()
        );
    }
    eprintln!(
        "SKIP: {} not found; run scripts/setup-python.sh",
        python.display()
    );
    None
}

/// Python that sets `REDUCE_RANGE` for onnxruntime's quantizers: True where onnxruntime's own
/// u8 × s8 kernels saturate. Without VNNI (AVX2, AVX-512 before Cascade Lake) they multiply
/// through `vpmaddubsw`, which clamps each pair of products to int16: a row of 255 × 127 over
/// k = 256 came out 4 194 176 (32 767 × 128) instead of 8 290 560 on an AVX2-only Zen 1, and a
/// dynamically quantized BERT's LayerNorm output was off by 1.9. The int8 kernels here are
/// exact, so on such a CPU the reference is quantized with 7-bit weights (`reduce_range`, the
/// remedy onnxruntime documents for these machines), whose pairs cannot reach the clamp.
pub const ORT_REDUCE_RANGE: &str = r#"
import numpy as _np, onnx as _onnx, onnxruntime as _ort
from onnx import helper as _helper, TensorProto as _TP
def _u8s8_saturates():
    graph = _helper.make_graph([_helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "probe",
        [_helper.make_tensor_value_info("A", _TP.UINT8, [4, 256])],
        [_helper.make_tensor_value_info("Y", _TP.INT32, [4, 16])],
        [_onnx.numpy_helper.from_array(_np.full((256, 16), 127, _np.int8), "B")])
    model = _helper.make_model(graph, opset_imports=[_helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = _ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"A": _np.full((4, 256), 255, _np.uint8)})[0]
    return int(got[0, 0]) != 255 * 127 * 256
REDUCE_RANGE = _u8s8_saturates()
"#;

/// `script` with [`ORT_REDUCE_RANGE`] run first.
pub fn with_reduce_range(script: &str) -> String {
    format!("{ORT_REDUCE_RANGE}{script}")
}

pub fn analyze_builtin(name: &str, device: &str, precision: Precision) -> Analysis {
    let model = builtin::find(name).unwrap();
    let proto = model.build(WeightFill::Zeros);
    let graph = import::import_model(&proto, Path::new("."), Path::new(name)).unwrap();
    let options = AnalyzeOptions {
        bindings: (model.default_bindings)(),
        precision,
        ..Default::default()
    };
    let device = find_device(device).unwrap().to_profile();
    analysis::analyze_graph(graph, name, &device, &options).unwrap()
}

pub fn analyze_file(path: &Path, bindings: Bindings) -> Analysis {
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let options = AnalyzeOptions {
        bindings,
        precision: Precision::Fp32,
        ..Default::default()
    };
    analysis::analyze_file(path, &device, &options)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// tinycnn followed by `If(cond) { OP(logits) } else { OP(logits) }` on a constant condition,
/// its output a second graph output; the branches read `logits` from the enclosing graph. With
/// `Identity` the If is analysed, costed and run through its branch; with an op no one knows the
/// branch cannot be inferred and the If is not costed (a warning).
pub fn tinycnn_with_if(branch_op: &str) -> roofline::analysis::onnx_proto::ModelProto {
    use roofline::analysis::onnx_proto::{
        AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto,
    };
    let mut model = builtin::find("tinycnn")
        .unwrap()
        .build(WeightFill::Random(1));
    let graph = model.graph.as_mut().unwrap();
    let logits = graph.output[0].name.clone();
    let branch = |name: &str| GraphProto {
        name: name.into(),
        node: vec![NodeProto {
            input: vec![logits.clone()],
            output: vec![format!("{name}_out")],
            op_type: branch_op.into(),
            ..Default::default()
        }],
        output: vec![ValueInfoProto {
            name: format!("{name}_out"),
            ..Default::default()
        }],
        ..Default::default()
    };
    graph.initializer.push(TensorProto {
        dims: vec![],
        data_type: 9,
        name: "cond".into(),
        int32_data: vec![1],
        ..Default::default()
    });
    let subgraph = |name: &str, g: GraphProto| AttributeProto {
        name: name.into(),
        r#type: 5,
        g: Some(g),
        ..Default::default()
    };
    graph.node.push(NodeProto {
        input: vec!["cond".into()],
        output: vec!["branched".into()],
        name: "choose".into(),
        op_type: "If".into(),
        attribute: vec![
            subgraph("then_branch", branch("then")),
            subgraph("else_branch", branch("else")),
        ],
        ..Default::default()
    });
    let mut out = graph.output[0].clone();
    out.name = "branched".into();
    graph.output.push(out);
    model
}
