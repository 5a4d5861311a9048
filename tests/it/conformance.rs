//! ONNX's own operator conformance cases (`scripts/conformance.py`): every node case the
//! installed `onnx` package generates goes through `roofline analyze` (inferred output shapes)
//! and `roofline run` (outputs within the case's tolerance). No case may panic either command,
//! and the pass rates may not fall below their floors. The floors sit one point under the rates
//! reached when they were last raised (shapes 95.8% of all judged cases and 99.9% of those
//! onnxruntime passes, run 99.1%), so that another CPU's rounding on a case at the edge of its
//! tolerance does not fail the suite while a real loss of cases does; a change that gains
//! cases raises them (the script prints the rates).

use std::process::Command;

use super::common::{repo_root, venv_python};

/// Share of the judged cases whose every output shape and element type `analyze` infers.
const SHAPES_FLOOR: f64 = 0.948;
/// The same share over the cases onnxruntime passes (the acceptance figure).
const SHAPES_OF_ORT_FLOOR: f64 = 0.989;
/// Share of the cases onnxruntime passes whose outputs `run` reproduces.
const RUN_FLOOR: f64 = 0.981;

#[test]
fn onnx_node_cases_hold_their_pass_rates_without_a_panic() {
    let Some(python) = venv_python() else { return };
    let root = repo_root();
    let report = super::cli::tempdir().join("conformance.json");
    let output = Command::new(&python)
        .arg(root.join("scripts/conformance.py"))
        .arg("--roofline")
        .arg(env!("CARGO_BIN_EXE_roofline"))
        .arg("--work")
        .arg(root.join(".cache/conformance"))
        .arg("--json")
        .arg(&report)
        .output()
        .expect("python runs");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the conformance script failed: {}{}",
        printed,
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{}", printed.lines().last().unwrap_or_default());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the script writes its report"))
            .expect("the report is JSON");
    let summary = &results["summary"];
    let panics = results["panics"].as_array().expect("a panic list");
    assert!(
        panics.is_empty(),
        "cases that panic: {}",
        serde_json::to_string_pretty(panics).unwrap_or_default()
    );
    // The generators must have produced the bulk of ONNX's cases (about 1,900 in onnx 1.23),
    // or the rates below say nothing.
    let judged = summary["judged"].as_u64().unwrap_or(0);
    assert!(judged > 1500, "only {judged} cases judged");
    let shapes_rate = summary["shapes_rate"].as_f64().unwrap_or(0.0);
    let shapes_of_ort_rate = summary["shapes_rate_of_ort"].as_f64().unwrap_or(0.0);
    let run_rate = summary["run_rate"].as_f64().unwrap_or(0.0);
    assert!(
        shapes_of_ort_rate >= SHAPES_OF_ORT_FLOOR,
        "analyze infers the output shapes of {:.1}% of the cases onnxruntime passes, below the floor of {:.1}%",
        100.0 * shapes_of_ort_rate,
        100.0 * SHAPES_OF_ORT_FLOOR
    );
    assert!(
        shapes_rate >= SHAPES_FLOOR,
        "analyze infers the output shapes of {:.1}% of the cases, below the floor of {:.1}%",
        100.0 * shapes_rate,
        100.0 * SHAPES_FLOOR
    );
    assert!(
        run_rate >= RUN_FLOOR,
        "run reproduces {:.1}% of the cases onnxruntime passes, below the floor of {:.1}%",
        100.0 * run_rate,
        100.0 * RUN_FLOOR
    );
    let _ = std::fs::remove_file(&report);
}
