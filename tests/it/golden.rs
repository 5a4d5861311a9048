//! Golden test of `roofline analyze --format json` over every built-in and every corpus model:
//! refactoring (issue 11) must leave the report byte for byte identical. Each model's golden file
//! under `tests/golden/analyze/` holds a 64-bit FNV-1a hash of the whole JSON output and, for
//! diagnosis, one line per node with its shapes, cost, bound and predicted time, so a failure
//! names the first op whose numbers moved. An intentional change of the cost model regenerates
//! the files with `ROOFLINE_BLESS=1 cargo test --test it golden` and commits them with the change.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::common::{corpus_dir, repo_root, roofline, stderr};

/// FNV-1a, 64 bits: enough to detect any change; the per-node lines say where.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The golden text of one analysis: the hash line, then a line per node and the totals.
fn digest(json: &[u8]) -> String {
    let report: serde_json::Value = serde_json::from_slice(json).expect("analyze prints JSON");
    let mut out = format!("fnv1a64 {:016x}\n", fnv1a(json));
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    for node in report["nodes"].as_array().expect("nodes") {
        let shapes = |key: &str| {
            node[key]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        };
        let _ = writeln!(
            out,
            "{} {} {} {} in={} out={} flops={} bytes={}+{} w={} bound={} t={}",
            text(&node["index"]),
            text(&node["op_type"]),
            text(&node["name"]),
            text(&node["status"]),
            shapes("input_shapes"),
            shapes("output_shapes"),
            text(&node["flops"]),
            text(&node["bytes_read"]),
            text(&node["bytes_written"]),
            text(&node["weights_bytes"]),
            text(&node["bound"]),
            text(&node["predicted_s"]),
        );
    }
    let summary = &report["summary"];
    let _ = writeln!(
        out,
        "total flops={} bytes={}+{} latency={} not_costed={}",
        text(&summary["flops"]),
        text(&summary["bytes_read"]),
        text(&summary["bytes_written"]),
        text(&summary["predicted_latency_s"]),
        text(&summary["not_costed"]),
    );
    out
}

/// (golden name, model argument, binding arguments)
fn cases() -> Vec<(String, String, Vec<String>)> {
    let mut cases: Vec<(String, String, Vec<String>)> = roofline::builtin::MODELS
        .iter()
        .map(|m| {
            (
                format!("builtin-{}", m.name),
                format!("builtin:{}", m.name),
                Vec::new(),
            )
        })
        .collect();
    if let Some(dir) = corpus_dir() {
        let mut files: Vec<PathBuf> = ["light", "extra", "ppocr"]
            .iter()
            .flat_map(|sub| std::fs::read_dir(dir.join(sub)).into_iter().flatten())
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
            .collect();
        files.sort();
        for path in files {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let bindings: Vec<String> = if stem.contains("det_infer") {
                vec!["--input".into(), "x=1x3x640x640".into()]
            } else if stem.starts_with("ch_") {
                vec!["--input".into(), "x=1x3x48x320".into()]
            } else {
                vec!["--batch".into(), "1".into()]
            };
            // Relative to the repository (the binary runs there): the report names its source,
            // and the golden files must not depend on where the clone lives.
            let relative = path.strip_prefix(repo_root()).unwrap_or(&path);
            cases.push((stem, relative.to_string_lossy().into_owned(), bindings));
        }
    }
    cases
}

#[test]
fn analyze_json_matches_the_committed_golden_files() {
    let bless = std::env::var_os("ROOFLINE_BLESS").is_some();
    let golden_dir = repo_root().join("tests/golden/analyze");
    let mut failures = Vec::new();
    for (name, model, bindings) in cases() {
        let mut args = vec!["analyze", model.as_str(), "--format", "json"];
        args.extend(bindings.iter().map(String::as_str));
        let output = roofline(&args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        let actual = digest(&output.stdout);
        let path = golden_dir.join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&golden_dir).unwrap();
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "{} missing: run ROOFLINE_BLESS=1 cargo test --test it golden",
                path.display()
            )
        });
        if expected != actual {
            let first_diff = expected
                .lines()
                .zip(actual.lines())
                .skip(1)
                .find(|(e, a)| e != a)
                .map(|(e, a)| format!("\n  expected {e}\n  actual   {a}"))
                .unwrap_or_else(|| " (only formatting or node count differs)".into());
            failures.push(format!("{name}: {}{first_diff}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "analyze output changed for {} model(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_digest_sees_every_byte() {
    let a = br#"{"nodes":[],"summary":{}}"#;
    let b = br#"{"nodes":[],"summary":{} }"#;
    assert_ne!(digest(a).lines().next(), digest(b).lines().next());
}
