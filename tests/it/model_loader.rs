//! The one model loader of the binary: `analyze`, `bench`, `advise` and `run` load a model the
//! same way (a QDQ file is lowered onto the int8 ops for all of them, so they predict the same
//! graph), and map its diagnostics to the exit status the same way (an unknown op: the report,
//! then status 2; a warning with `--strict`: status 1).

use std::path::{Path, PathBuf};

use prost::Message;

use super::cli::tempdir;
use super::common::{roofline, stderr, stdout};

/// A CPU-like profile where int8 pays for the convolutions (as in `quant.rs`); a file profile:
/// predictions only, nothing is measured against it.
const CPU_PROFILE: &str = r#"{
    "id": "test-cpu", "name": "test CPU", "kind": "cpu", "source": "file",
    "compute": [
        {"precision": "fp32", "flops_per_s": 1.0e11},
        {"precision": "bf16", "flops_per_s": 2.0e11},
        {"precision": "int8", "flops_per_s": 4.0e11}
    ],
    "memory": [{"level": "dram", "bytes_per_s": 4.0e10}],
    "launch_overhead_s": 2.0e-7
}"#;

fn json(args: &[&str]) -> serde_json::Value {
    let out = roofline(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// (name, op type) of every node of an analysis report.
fn ops(analysis: &serde_json::Value) -> Vec<(String, String)> {
    analysis["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["op_type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_qdq_file_is_the_same_int8_graph_for_analyze_bench_and_advise() {
    let dir = tempdir();
    let device = dir.join("cpu.json");
    std::fs::write(&device, CPU_PROFILE).unwrap();
    let device = device.to_str().unwrap();
    let qdq = dir.join("q.onnx");
    let q = qdq.to_str().unwrap();
    let advice = json(&[
        "advise",
        "builtin:tinycnn",
        "-d",
        device,
        "--apply",
        "fold,bn-fold,fuse,int8",
        "--calibration-samples",
        "2",
        "-o",
        q,
        "--format",
        "json",
    ]);
    let decisions = advice["quantization"]["decisions"].as_array().unwrap();
    assert!(
        decisions.iter().any(|d| d["decision"] == "int8"),
        "some op is converted: {decisions:?}"
    );

    let analyzed = roofline(&["analyze", q, "-d", device, "--format", "json"]);
    assert!(analyzed.status.success(), "{}", stderr(&analyzed));
    assert!(
        stderr(&analyzed).contains("QDQ form lowered"),
        "{}",
        stderr(&analyzed)
    );
    let analyzed: serde_json::Value = serde_json::from_slice(&analyzed.stdout).unwrap();
    let benched = json(&[
        "bench",
        q,
        "-d",
        device,
        "--runs",
        "1",
        "--min-time",
        "0",
        "--format",
        "json",
    ]);
    let advised = json(&[
        "advise", q, "-d", device, "--apply", "fold", "--format", "json",
    ]);

    let predicted = ops(&analyzed);
    let types: Vec<&str> = predicted.iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        types.contains(&"QConv"),
        "lowered onto the int8 ops: {types:?}"
    );
    assert!(
        !types.contains(&"DequantizeLinear") && !types.contains(&"QuantizeLinear"),
        "no QDQ pair left: {types:?}"
    );
    assert_eq!(predicted, ops(&benched["analysis"]), "analyze and bench");
    assert_eq!(predicted, ops(&advised["before"]), "analyze and advise");
    // The same graph, the same prediction.
    assert_eq!(
        analyzed["summary"]["predicted_latency_s"],
        advised["before"]["summary"]["predicted_latency_s"]
    );
}

/// tinycnn with its first node's op type replaced (an op no one knows).
fn with_unknown_op(dir: &Path) -> PathBuf {
    let mut model = roofline::builtin::find("tinycnn")
        .unwrap()
        .build(roofline::builtin::WeightFill::Random(1));
    model.graph.as_mut().unwrap().node[0].op_type = "Evil".into();
    let path = dir.join("unknown.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// tinycnn followed by an `If` whose branches hold an unknown op: analysed, but not costed (a
/// warning).
fn with_if(dir: &Path) -> PathBuf {
    let path = dir.join("if.onnx");
    std::fs::write(
        &path,
        super::common::tinycnn_with_if("Evil").encode_to_vec(),
    )
    .unwrap();
    path
}

#[test]
fn every_command_maps_diagnostics_to_the_exit_status_the_same_way() {
    let dir = tempdir();
    let unknown = with_unknown_op(&dir);
    let unknown = unknown.to_str().unwrap();
    // An op the tool does not know: the report lists it as not costed, a warning names it,
    // status 0 (1 with --strict).
    for args in [
        &["analyze", unknown, "--batch", "1"][..],
        &["advise", unknown, "--batch", "1", "-d", "rtx2080ti"][..],
    ] {
        let out = roofline(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).contains("model"), "{args:?}: the report first");
        assert!(
            stderr(&out).contains("does not know: Evil"),
            "{args:?}: {}",
            stderr(&out)
        );
        let strict: Vec<&str> = args.iter().copied().chain(["--strict"]).collect();
        let out = roofline(&strict);
        assert_eq!(out.status.code(), Some(1), "{strict:?}: {}", stderr(&out));
    }
    // `bench` cannot run it: refused before running, status 2 as well.
    let out = roofline(&[
        "bench",
        unknown,
        "--batch",
        "1",
        "-d",
        "rtx2080ti",
        "--runs",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // A warning (an op that is not costed): status 0, or 1 with --strict.
    let with_if = with_if(&dir);
    let with_if = with_if.to_str().unwrap();
    for args in [
        &["analyze", with_if, "--batch", "1"][..],
        &["advise", with_if, "--batch", "1", "-d", "rtx2080ti"][..],
    ] {
        let out = roofline(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let strict: Vec<&str> = args.iter().copied().chain(["--strict"]).collect();
        let out = roofline(&strict);
        assert_eq!(out.status.code(), Some(1), "{strict:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("1 warning(s) and --strict"),
            "{strict:?}: {}",
            stderr(&out)
        );
    }
}
