//! The binary end to end: formats, exit codes, export.

use super::common::{roofline, stderr, stdout, venv_python};

#[test]
fn analyze_table_has_rows_and_summary() {
    let out = roofline(&["analyze", "builtin:mobilenetv2", "--device", "rtx2080ti"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Conv"));
    assert!(text.contains("predicted"));
    assert!(text.contains("hot spots"));
}

#[test]
fn analyze_json_follows_the_schema() {
    let out = roofline(&["analyze", "builtin:tinycnn", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["schema"], "roofline-analysis");
    assert_eq!(json["schema_version"], 1);
    for key in [
        "name",
        "op_type",
        "output_shapes",
        "flops",
        "macs",
        "bytes_read",
        "bytes_written",
        "weights_bytes",
        "intensity",
        "bound",
        "attainable_flops",
        "predicted_s",
    ] {
        assert!(
            json["nodes"][0].get(key).is_some(),
            "missing per-op key {key}"
        );
    }
    assert!(json["summary"]["predicted_latency_s"].as_f64().unwrap() > 0.0);
    assert_eq!(json["device"]["id"], "rtx2080ti");
}

#[test]
fn analyze_csv_and_several_devices() {
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--format",
        "csv",
        "--device",
        "t4",
        "--device",
        "h100",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("device,precision,index,name,op_type"));
    assert!(lines.iter().any(|l| l.starts_with("t4,")));
    assert!(lines.iter().any(|l| l.starts_with("h100-sxm,")));
}

#[test]
fn devices_lists_the_catalogue() {
    let out = roofline(&["devices"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for id in [
        "rtx2080ti",
        "a100-sxm4-80gb",
        "h100-sxm",
        "jetson-agx-orin-64gb",
        "l40s",
    ] {
        assert!(text.contains(id), "{id} missing");
    }
}

#[test]
fn profile_file_round_trips_through_device_flag() {
    let dir = tempdir();
    let path = dir.join("dev.json");
    let out = roofline(&["devices", "--json"]);
    let profiles: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let t4 = profiles.iter().find(|p| p["id"] == "t4").unwrap();
    std::fs::write(&path, serde_json::to_string(t4).unwrap()).unwrap();
    let by_name = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--device",
        "t4",
        "--format",
        "json",
    ]);
    let by_file = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--device",
        path.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let a: serde_json::Value = serde_json::from_str(&stdout(&by_name)).unwrap();
    let b: serde_json::Value = serde_json::from_str(&stdout(&by_file)).unwrap();
    assert_eq!(a["summary"], b["summary"]);
}

#[test]
fn missing_precision_on_device_is_a_clear_error() {
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--device",
        "rtx2080ti",
        "--precision",
        "bf16",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no bf16 compute ceiling"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn exported_builtins_run_in_onnxruntime() {
    let Some(python) = venv_python() else { return };
    let dir = tempdir();
    for model in ["tinycnn", "mobilenetv2", "resnet50", "bert-base"] {
        let path = dir.join(format!("{model}.onnx"));
        let out = roofline(&[
            "export",
            &format!("builtin:{model}"),
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let check = std::process::Command::new(&python)
            .arg(super::common::repo_root().join("scripts/ort_check.py"))
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{model}: onnxruntime rejected the export:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    // Kept on failure for a look; the four exports are about 550 MB.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A test's own directory, removed when the test is done with it. A failing test keeps its
/// files for a look (the directory is left when the guard drops during a panic); the next test
/// process sweeps what dead processes left behind. Without the removal a single run of the suite
/// holds every test's exports at once: a BERT export alone is 435 MB, and CI machines have run
/// out of disk on it.
pub struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh directory for one test. The first call also removes the directories earlier test
/// processes left behind.
pub fn tempdir() -> TempDir {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("roofline-test-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            if let Some(pid) = pid {
                let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
                if pid != std::process::id() && !alive {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    });
    let dir = std::env::temp_dir().join(format!(
        "roofline-test-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

#[test]
fn subgraph_ops_are_analysed_and_run_through_their_branches() {
    use prost::Message;
    let dir = tempdir();
    // Branches the tool knows: the If is inferred, costed and run through its branch, which
    // reads `logits` from the enclosing graph.
    let path = dir.join("if_known.onnx");
    std::fs::write(
        &path,
        super::common::tinycnn_with_if("Identity").encode_to_vec(),
    )
    .unwrap();
    let run = roofline(&[
        "analyze",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "--format",
        "json",
        "--strict",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let json: serde_json::Value = serde_json::from_str(&stdout(&run)).unwrap();
    assert_eq!(json["summary"]["not_costed"], 0);
    let out_dir = dir.join("if_outputs");
    let run = roofline(&[
        "run",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let mut files: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort_by_key(|p| p.ends_with("branched.npy"));
    assert_eq!(files.len(), 2, "{files:?}");
    let logits = roofline::exec::npy::read_npy(&files[0]).unwrap();
    let branched = roofline::exec::npy::read_npy(&files[1]).unwrap();
    assert_eq!(logits, branched, "the branch returns the logits");
    // A branch with an op no one knows: the If is loaded, reported not costed, a warning.
    let model = super::common::tinycnn_with_if("Evil");
    let path = dir.join("if.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let run = roofline(&[
        "analyze",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "--format",
        "json",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let json: serde_json::Value = serde_json::from_str(&stdout(&run)).unwrap();
    assert_eq!(json["summary"]["not_costed"], 1);
    assert_eq!(json["summary"]["not_costed_ops"][0][0], "If");
    // The rest of the model is costed as usual.
    assert!(json["summary"]["macs"].as_u64().unwrap() > 400_000);
    let strict = roofline(&[
        "analyze",
        path.to_str().unwrap(),
        "--batch",
        "1",
        "--strict",
    ]);
    assert_eq!(
        strict.status.code(),
        Some(1),
        "--strict turns the warning into status 1"
    );
}

#[test]
fn bench_lists_missing_kernels_before_running() {
    use prost::Message;
    // RoiAlign is analysed (and costed) but the executor has no kernel for it.
    use roofline::builtin::{GraphBuilder, SigDim, WeightFill};
    let mut b = GraphBuilder::new(WeightFill::Random(2));
    let x = b.input(
        "x",
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(4),
            SigDim::Fixed(16),
            SigDim::Fixed(16),
        ],
    );
    let rois = b.input("rois", 1, &[SigDim::Fixed(3), SigDim::Fixed(4)]);
    let batch = b.input("batch_indices", 7, &[SigDim::Fixed(3)]);
    let y = b.node("RoiAlign", &[&x, &rois, &batch], vec![]);
    b.output(
        &y,
        1,
        &[
            SigDim::Fixed(3),
            SigDim::Fixed(4),
            SigDim::Fixed(1),
            SigDim::Fixed(1),
        ],
    );
    let dir = tempdir();
    let path = dir.join("roialign.onnx");
    std::fs::write(&path, b.finish("roialign").encode_to_vec()).unwrap();
    let analyzed = roofline(&["analyze", path.to_str().unwrap(), "--format", "json"]);
    assert!(analyzed.status.success(), "{}", stderr(&analyzed));
    let out = roofline(&[
        "bench",
        path.to_str().unwrap(),
        "--device",
        "rtx2080ti",
        "--runs",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no kernel") && err.contains("RoiAlign"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

/// An onnxruntime profile of two runs of tinycnn's first nodes, with a node onnxruntime
/// created (not in the model) and the fences older versions write.
fn tinycnn_profile() -> String {
    let mut events = vec![
        r#"{"cat": "Session", "ph": "M", "name": "metadata", "args": {"runtime": "onnxruntime", "runtime_version": "1.32.0"}}"#.to_string(),
    ];
    for (run, start) in [(0u32, 1000u32), (1, 2000)] {
        events.push(format!(
            r#"{{"cat": "Session", "name": "model_run", "ph": "X", "ts": {start}, "dur": 500}}"#
        ));
        for (i, (name, us)) in [
            ("Conv_0", 40 + run * 10),
            ("Relu_1", 3),
            ("Conv_3", 60),
            ("fused_reorder", 5),
        ]
        .into_iter()
        .enumerate()
        {
            let ts = start + 1 + 50 * i as u32;
            events.push(format!(
                r#"{{"cat": "Node", "name": "{name}_fence_before", "ph": "X", "ts": {ts}, "dur": 0}}"#
            ));
            events.push(format!(
                r#"{{"cat": "Node", "name": "{name}_kernel_time", "ph": "X", "ts": {ts}, "dur": {us}, "args": {{"op_name": "Conv", "provider": "CPUExecutionProvider"}}}}"#
            ));
        }
    }
    format!("[{}]", events.join(",\n"))
}

#[test]
fn analyze_measured_joins_an_onnxruntime_profile() {
    let dir = tempdir();
    let profile = dir.join("ort.json");
    std::fs::write(&profile, tinycnn_profile()).unwrap();
    let profile = profile.to_str().unwrap();
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile,
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let node = |name: &str| {
        json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()
            .clone()
    };
    // Median of 40 and 50 µs.
    assert!((node("Conv_0")["measured_s"].as_f64().unwrap() - 45e-6).abs() < 1e-12);
    assert!((node("Conv_3")["measured_s"].as_f64().unwrap() - 60e-6).abs() < 1e-12);
    assert!(node("Conv_0")["measured_efficiency"].as_f64().unwrap() > 0.0);
    assert!(node("MaxPool_2").get("measured_s").is_none());
    let info = &json["measured"];
    assert_eq!(info["runtime"], "onnxruntime");
    assert_eq!(info["runtime_version"], "1.32.0");
    assert_eq!(info["runs"], 2);
    assert_eq!(info["matched_nodes"], 3);
    assert_eq!(info["unmatched_profile_names"][0], "fused_reorder");
    let total = json["summary"]["measured_total_s"].as_f64().unwrap();
    assert!((total - 108e-6).abs() < 1e-12, "{total}");

    // Every format shows it: a column in the table and the CSV, points over the HTML roof.
    let table = stdout(&roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile,
    ]));
    assert!(
        table.contains("measured") && table.contains("45.00 µs"),
        "{table}"
    );
    let csv = stdout(&roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile,
        "--format",
        "csv",
    ]));
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .ends_with("measured_s,measured_efficiency,reason"));
    let html = stdout(&roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile,
        "--format",
        "html",
    ]));
    assert!(
        html.contains("measured (onnxruntime)"),
        "the chart overlay's legend"
    );
    assert!(html.contains("JSON field: measured_s"));
    let plain = stdout(&roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--format",
        "html",
    ]));
    assert!(!plain.contains("measured_s"));
}

#[test]
fn analyze_measured_refuses_a_bad_profile_in_one_line() {
    let dir = tempdir();
    let profile = dir.join("bad.json");
    std::fs::write(&profile, "Conv_0 took 40 us").unwrap();
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json") && err.contains("not JSON"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
    // The profile is an input: -o never replaces it.
    std::fs::write(&profile, tinycnn_profile()).unwrap();
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--measured",
        profile.to_str().unwrap(),
        "-o",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read_to_string(&profile).unwrap(),
        tinycnn_profile()
    );
}

#[test]
fn calibrate_from_profile_predicts_the_runtime() {
    let dir = tempdir();
    let profile = dir.join("ort.json");
    std::fs::write(&profile, tinycnn_profile()).unwrap();
    let calibrated = dir.join("ort-profile.json");
    let spec = format!("builtin:tinycnn={}", profile.display());
    let out = roofline(&[
        "calibrate",
        "--device",
        "rtx2080ti",
        "--from-profile",
        &spec,
        "-o",
        calibrated.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&calibrated).unwrap()).unwrap();
    assert_eq!(saved["calibration"]["mode"], "onnxruntime");
    assert!(saved["calibration"]["method"]
        .as_str()
        .unwrap()
        .contains("ort.json"));
    // The model it was fitted on is predicted at its measured times, op for op.
    let out = roofline(&[
        "analyze",
        "builtin:tinycnn",
        "--device",
        calibrated.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let conv = &json["nodes"][0];
    assert_eq!(conv["name"], "Conv_0");
    assert!((conv["expected_s"].as_f64().unwrap() - 45e-6).abs() < 1e-9);
    // Without -o the device would be rewritten: refused.
    let out = roofline(&[
        "calibrate",
        "--device",
        "rtx2080ti",
        "--from-profile",
        &spec,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("-o FILE"), "{}", stderr(&out));
}
