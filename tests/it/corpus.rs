//! The real-model corpus against onnx-tool's figures (tests/reference/onnx_tool.json, made by
//! scripts/onnx_tool_reference.py): Conv/ConvTranspose/Gemm/MatMul MACs and parameter counts
//! within 1%, like with like.
//!
//! onnx-tool adds one MAC per output element for a bias (its `conv_gemm_matmul_bias_macs`, which
//! we subtract), costs ConvTranspose with the Conv formula (wrong; the script records the exact
//! figure, which we use), and in its default mode ignores weights held in Constant or
//! ConstantOfShape nodes, so params are compared with its constant-folding count.

use std::collections::BTreeMap;

use roofline::analysis::{Bindings, NodeStatus};
use serde_json::Value;

use super::common::{analyze_file, corpus_dir, repo_root};

fn reference() -> Value {
    let text = std::fs::read_to_string(repo_root().join("tests/reference/onnx_tool.json"))
        .expect("reference file is committed");
    serde_json::from_str(&text).expect("reference JSON parses")
}

fn bindings_for(entry: &Value) -> Bindings {
    let mut inputs = Vec::new();
    if let Some(map) = entry["inputs"].as_object() {
        for (name, spec) in map {
            let dims: Vec<u64> = spec["shape"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            inputs.push((name.clone(), dims));
        }
    }
    Bindings {
        inputs,
        batch: None,
        dims: Vec::new(),
    }
}

fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    if expected == 0.0 {
        return actual == 0.0;
    }
    ((actual - expected) / expected).abs() <= tolerance
}

#[test]
fn macs_and_params_match_onnx_tool_within_one_percent() {
    let Some(dir) = corpus_dir() else { return };
    let reference = reference();
    let models = reference["models"].as_object().expect("models map");
    assert!(models.len() >= 12, "reference covers the corpus");
    let mut failures = Vec::new();
    for (file, entry) in models {
        let path = dir.join(entry["path"].as_str().unwrap());
        let analysis = analyze_file(&path, bindings_for(entry));
        let matmul_like: u64 = analysis
            .nodes
            .iter()
            .filter(|n| matches!(n.op_type.as_str(), "Conv" | "Gemm" | "MatMul"))
            .map(|n| n.macs)
            .sum();
        // ConvTranspose is left out: onnx-tool applies the Conv formula to it (see above);
        // `conv_transpose_matches_the_hand_formula` checks ours.
        let expected = entry["conv_gemm_matmul_macs"].as_f64().unwrap()
            - entry["conv_gemm_matmul_bias_macs"].as_f64().unwrap_or(0.0)
            - entry["macs_by_op_type"]["ConvTranspose"]
                .as_f64()
                .unwrap_or(0.0);
        let params_expected = entry["params_constant_folding"].as_f64().unwrap();
        let not_costed = analysis
            .nodes
            .iter()
            .filter(|n| n.status == NodeStatus::NotCosted)
            .count();
        if !within(matmul_like as f64, expected, 0.01) {
            failures.push(format!(
                "{file}: MACs {matmul_like} vs onnx-tool {expected}"
            ));
        }
        if !within(analysis.summary.params as f64, params_expected, 0.01) {
            failures.push(format!(
                "{file}: params {} vs onnx-tool (folded) {params_expected}",
                analysis.summary.params
            ));
        }
        if not_costed != 0 {
            failures.push(format!("{file}: {not_costed} ops not costed"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn per_node_macs_match_onnx_tool_for_resnet50() {
    let Some(dir) = corpus_dir() else { return };
    let reference = reference();
    let entry = &reference["models"]["light_resnet50.onnx"];
    let analysis = analyze_file(
        &dir.join(entry["path"].as_str().unwrap()),
        bindings_for(entry),
    );
    let ours: BTreeMap<&str, u64> = analysis
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.macs))
        .collect();
    let per_node = entry["per_node_macs"].as_object().unwrap();
    let mut compared = 0;
    for (name, macs) in per_node {
        if let Some(&our) = ours.get(name.as_str()) {
            let theirs = macs.as_f64().unwrap();
            // onnx-tool's bias MAC per output element is at most 1/taps of the total.
            assert!(
                within(our as f64, theirs, 0.01),
                "{name}: {our} vs {theirs}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 50, "only {compared} nodes matched by name");
}

#[test]
fn literature_bound_classes_hold_at_fp32_on_rtx2080ti() {
    let Some(dir) = corpus_dir() else { return };
    let vgg = analyze_file(&dir.join("light/light_vgg19.onnx"), Bindings::default());
    // VGG spends most of its time in compute-bound convolutions.
    assert!(vgg.summary.compute_bound_share > 0.5, "{:?}", vgg.summary);
}

#[test]
fn ppocr_weights_in_constant_nodes_are_counted() {
    let Some(dir) = corpus_dir() else { return };
    let analysis = analyze_file(
        &dir.join("ppocr/ch_PP-OCRv4_det_infer.onnx"),
        Bindings {
            inputs: vec![("x".into(), vec![1, 3, 640, 640])],
            batch: None,
            dims: Vec::new(),
        },
    );
    assert!(analysis.summary.params > 1_000_000);
    assert!(analysis.summary.weights_bytes > 4_000_000);
}

#[test]
fn conv_transpose_matches_the_hand_formula() {
    let Some(dir) = corpus_dir() else { return };
    let analysis = analyze_file(
        &dir.join("ppocr/ch_PP-OCRv4_det_infer.onnx"),
        Bindings {
            inputs: vec![("x".into(), vec![1, 3, 640, 640])],
            batch: None,
            dims: Vec::new(),
        },
    );
    // N·Cin·Hi·Wi·(Cout/g)·kh·kw for the two 2×2 stride-2 upsamplers of the DB head:
    // 1·24·160·160·24·2·2 + 1·24·320·320·1·2·2 (shapes read from the model).
    let macs: Vec<u64> = analysis
        .nodes
        .iter()
        .filter(|n| n.op_type == "ConvTranspose")
        .map(|n| n.macs)
        .collect();
    assert_eq!(macs.iter().sum::<u64>(), 58_982_400 + 9_830_400, "{macs:?}");
}
