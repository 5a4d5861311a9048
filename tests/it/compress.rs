//! `roofline compress` end to end on a catalogue device (predicted only, so the test does not
//! depend on this machine's speed): the pruned model the onnx checker accepts and onnxruntime
//! runs with the same outputs as our executor, the pruning plan written next to it, `--eval`
//! plumbing, and bad arguments refused with one line; and measured (a profile file marked as
//! probed), the baselines run beside the compressed model and written out.

use super::cli::tempdir;
use super::common::{roofline, stderr, stdout, venv_python};
use super::exec_vs_ort::{compare, reference};
use super::export_checker::rejected;

#[test]
fn compressed_model_runs_in_onnxruntime_like_ours() {
    let dir = tempdir();
    let model = dir.join("mobilenetv2-pruned.onnx");
    let out = roofline(&[
        "compress",
        "builtin:mobilenetv2",
        "--device",
        "rtx2080ti",
        "--speedup",
        "1.3",
        "--precisions",
        "fp32",
        "--calibration-samples",
        "2",
        "--eval",
        "echo accuracy: 0.75",
        "-o",
        model.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["schema"], "roofline-compress");
    assert_eq!(report["reached"], true);
    assert_eq!(report["measured"], false);
    assert!(report["predicted_speedup"].as_f64().unwrap() >= 1.3);
    // --eval's last number is the accuracy of every evaluated version.
    assert_eq!(report["original"]["eval"], 0.75);
    assert_eq!(report["compressed"]["eval"], 0.75);
    let steps = report["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    let macs_before = report["original"]["macs"].as_u64().unwrap();
    let macs_after = report["compressed"]["macs"].as_u64().unwrap();
    assert!(macs_after < macs_before);

    // The plan: kept indices per pruned space, in range and increasing, aligned to 8 on a GPU.
    let plan: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("mobilenetv2-pruned.plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["schema"], "roofline-prune-plan");
    let spaces = plan["spaces"].as_array().unwrap();
    assert!(!spaces.is_empty());
    for space in spaces {
        let channels = space["channels"].as_u64().unwrap();
        let keep: Vec<u64> = space["keep"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_u64().unwrap())
            .collect();
        assert!(keep.windows(2).all(|w| w[0] < w[1]), "{space}");
        assert!(*keep.last().unwrap() < channels, "{space}");
        assert_eq!(keep.len() % 8, 0, "{space}");
    }

    let Some(python) = venv_python() else { return };
    let failures = rejected(&python, &[format!("ort:{}", model.display())]);
    assert!(failures.is_empty(), "{failures:?}");
    let reference_dir = reference(
        &python,
        &model,
        "compress-mobilenetv2",
        &["input=1x3x224x224"],
        &[],
    );
    let summary = compare(&model, &reference_dir).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("pruned mobilenetv2: {summary}");
}

#[test]
fn bad_targets_are_one_line_errors() {
    for args in [
        vec!["--speedup", "0.5"],
        vec!["--speedup", "nan"],
        vec!["--latency", "20"],
        vec!["--latency=-1ms"],
        vec!["--speedup", "2", "--precisions", "int3"],
        vec!["--speedup", "2", "--max-drop=-1"],
        vec![],
    ] {
        let mut full = vec!["compress", "builtin:tinycnn", "--device", "rtx2080ti"];
        full.extend(&args);
        let out = roofline(&full);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // One line naming the problem (clap's own usage errors add the usage after it).
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(
            err.contains("--speedup")
                || err.contains("--latency")
                || err.contains("--precisions")
                || err.contains("--max-drop"),
            "{args:?}: {err}"
        );
    }
}

/// Measured on this machine with `--compare-baselines`: each baseline carries the compressed
/// model's lead over it from rounds that ran both side by side, and is written beside the
/// compressed model as a model that loads again. The figures depend on this machine, so only
/// their presence and sanity are checked.
#[test]
fn baselines_are_measured_beside_the_compressed_model_and_written_out() {
    let dir = tempdir();
    let model = dir.join("tiny.onnx");
    // A catalogue profile marked as probed: the search measures on this CPU without probing
    // it (or touching the user's saved profile); its predictions do not matter here.
    let mut device = roofline::device::find_device("rtx2080ti")
        .unwrap()
        .to_profile();
    device.source = roofline::device::ProfileSource::Probed;
    let profile = dir.join("probed.json");
    std::fs::write(&profile, serde_json::to_string(&device).unwrap()).unwrap();
    let out = roofline(&[
        "compress",
        "builtin:tinycnn",
        "--device",
        profile.to_str().unwrap(),
        "--speedup",
        "1.2",
        "--precisions",
        "int8",
        "--calibration-samples",
        "2",
        "--runs",
        "3",
        "--compare-baselines",
        "-o",
        model.to_str().unwrap(),
        "--format",
        "json",
    ]);
    // The target may be out of reach on a model this small (exit 3); the report is written
    // either way.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["measured"], true);
    let baselines = report["baselines"].as_array().unwrap();
    // all-int8 at least, whatever the search chose.
    assert!(!baselines.is_empty(), "{report}");
    let pruned = report["compressed"]["macs"].as_u64() < report["original"]["macs"].as_u64();
    for baseline in baselines {
        let lead = baseline["compressed_lead"].as_f64().unwrap();
        assert!(lead.is_finite() && lead > 0.0, "{baseline}");
        let name = baseline["name"].as_str().unwrap();
        let written = dir.join(format!("tiny.{name}.onnx"));
        let analyzed = roofline(&["analyze", written.to_str().unwrap(), "--format", "json"]);
        assert!(analyzed.status.success(), "{name}: {}", stderr(&analyzed));
    }
    // A pruned result is compared against uniform pruning at its MAC count, written as a
    // model the onnx checker accepts and onnxruntime runs.
    if pruned {
        assert!(baselines.iter().any(|b| b["name"] == "uniform-magnitude"));
        let Some(python) = venv_python() else { return };
        let uniform = dir.join("tiny.uniform-magnitude.onnx");
        let failures = rejected(&python, &[format!("ort:{}", uniform.display())]);
        assert!(failures.is_empty(), "{failures:?}");
    }
}
