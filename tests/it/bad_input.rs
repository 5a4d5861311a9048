//! Bad input: one clear error line naming the file, node or input, exit status 2, no panic.

use prost::Message;
use roofline::analysis::onnx_proto::{ModelProto, TensorProto};
use roofline::builtin::{self, WeightFill};

use super::cli::tempdir;
use super::common::{roofline, stderr};

fn tinycnn() -> ModelProto {
    builtin::find("tinycnn")
        .unwrap()
        .build(WeightFill::Random(1))
}

fn assert_bad_input(args: &[&str], must_mention: &str) {
    let out = roofline(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "args {args:?}: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.contains(must_mention), "`{must_mention}` not in: {err}");
    assert!(err.lines().any(|l| l.starts_with("error:")), "{err}");
}

#[test]
fn truncated_file() {
    let dir = tempdir();
    let bytes = tinycnn().encode_to_vec();
    let path = dir.join("truncated.onnx");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_bad_input(
        &["analyze", path.to_str().unwrap(), "--batch", "1"],
        "truncated.onnx",
    );
}

#[test]
fn not_an_onnx_file() {
    let dir = tempdir();
    let path = dir.join("notes.onnx");
    std::fs::write(&path, "this is a text file, not a model\n").unwrap();
    assert_bad_input(
        &["analyze", path.to_str().unwrap()],
        "not a valid ONNX model",
    );
    let empty = dir.join("empty.onnx");
    std::fs::write(&empty, "").unwrap();
    assert_bad_input(&["analyze", empty.to_str().unwrap()], "empty");
    assert_bad_input(
        &["analyze", "/nonexistent/model.onnx"],
        "/nonexistent/model.onnx",
    );
}

#[test]
fn unknown_op_is_reported_not_costed_as_zero() {
    let dir = tempdir();
    let mut model = tinycnn();
    let graph = model.graph.as_mut().unwrap();
    let relu = graph.node.iter_mut().find(|n| n.op_type == "Relu").unwrap();
    relu.op_type = "FancyActivation".into();
    let name = relu.name.clone();
    let path = dir.join("unknown.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    // A warning (the model is well formed; a runtime may know the op): exit 0, 1 with --strict.
    let out = roofline(&["analyze", path.to_str().unwrap(), "--batch", "1"]);
    assert_eq!(out.status.code(), Some(0));
    let strict = roofline(&[
        "analyze",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "--strict",
    ]);
    assert_eq!(strict.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&name) && err.contains("FancyActivation"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NOT COSTED"),
        "the report still lists it: {text}"
    );
}

#[test]
fn unbound_symbolic_dim() {
    let dir = tempdir();
    let path = dir.join("symbolic.onnx");
    std::fs::write(&path, tinycnn().encode_to_vec()).unwrap();
    assert_bad_input(
        &["analyze", path.to_str().unwrap()],
        "unbound symbolic dim `batch`",
    );
    assert_bad_input(
        &[
            "analyze",
            path.to_str().unwrap(),
            "--input",
            "nosuch=1x3x32x32",
        ],
        "no input named `nosuch`",
    );
    // Named dims: an unknown name lists the model's symbolic dims; contradictions and
    // malformed specs are one line each.
    let p = path.to_str().unwrap();
    assert_bad_input(&["analyze", p, "--dim", "seq=3"], "symbolic dims: batch");
    assert_bad_input(&["analyze", p, "--dim", "batch=0"], "empty tensor");
    assert_bad_input(&["analyze", p, "--dim", "batch"], "NAME=VALUE");
    assert_bad_input(&["analyze", p, "--dim", "batch=x"], "positive integer");
    assert_bad_input(
        &["analyze", p, "--dim", "batch=2", "--dim", "batch=3"],
        "also given as 2",
    );
    assert_bad_input(
        &[
            "analyze",
            p,
            "--dim",
            "batch=2",
            "--input",
            "input=3x3x32x32",
        ],
        "--dim gives 2",
    );
    assert_bad_input(
        &["analyze", path.to_str().unwrap(), "--input", "input=1x3x32"],
        "rank 4",
    );
}

#[test]
fn absurd_dims() {
    let dir = tempdir();
    let path = dir.join("absurd.onnx");
    std::fs::write(&path, tinycnn().encode_to_vec()).unwrap();
    // 2^40 x 3 x 32 x 32 elements overflows the 2^48 sanity limit (`--batch` itself is bounded
    // by the argument parser, so the dims come through `--input`).
    assert_bad_input(
        &[
            "analyze",
            path.to_str().unwrap(),
            "--input",
            "1099511627776x3x32x32",
        ],
        "absurd shape",
    );
    let mut model = tinycnn();
    model.graph.as_mut().unwrap().initializer[0].dims = vec![i64::MAX, i64::MAX];
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    assert_bad_input(
        &["analyze", path.to_str().unwrap(), "--batch", "1"],
        "absurd shape",
    );
}

#[test]
fn missing_external_data_file() {
    let dir = tempdir();
    let mut model = tinycnn();
    let init: &mut TensorProto = &mut model.graph.as_mut().unwrap().initializer[0];
    init.raw_data = Default::default();
    init.data_location = 1;
    init.external_data = vec![roofline::analysis::onnx_proto::StringStringEntryProto {
        key: "location".into(),
        value: "weights.bin".into(),
    }];
    let path = dir.join("external.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    assert_bad_input(
        &["analyze", path.to_str().unwrap(), "--batch", "1"],
        "weights.bin",
    );
}

#[test]
fn external_data_is_loaded_when_present() {
    let dir = tempdir();
    let mut model = tinycnn();
    let init: &mut TensorProto = &mut model.graph.as_mut().unwrap().initializer[0];
    let payload = std::mem::take(&mut init.raw_data);
    let mut file = vec![0u8; 16];
    file.extend_from_slice(&payload);
    std::fs::write(dir.join("weights.bin"), &file).unwrap();
    init.data_location = 1;
    init.external_data = [
        ("location", "weights.bin".to_string()),
        ("offset", "16".into()),
        ("length", payload.len().to_string()),
    ]
    .into_iter()
    .map(
        |(k, v)| roofline::analysis::onnx_proto::StringStringEntryProto {
            key: k.into(),
            value: v,
        },
    )
    .collect();
    let path = dir.join("external.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out = roofline(&[
        "analyze",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn unknown_device_and_builtin() {
    assert_bad_input(
        &["analyze", "builtin:tinycnn", "--device", "rtx9999"],
        "unknown device `rtx9999`",
    );
    assert_bad_input(&["analyze", "builtin:nosuchnet"], "unknown built-in model");
}
