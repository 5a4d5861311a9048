//! `analyze --phase` from the command line: the phase block in every format, memory that does
//! not fit said plainly, and bad LLM arguments refused in one line.

use super::common::{roofline, stderr, stdout};

/// `roofline analyze MODEL --device DEVICE ARGS...`, which must exit 0; its stdout.
fn analyze(model: &str, device: &str, args: &[&str]) -> String {
    let mut all = vec!["analyze", model, "--device", device];
    all.extend_from_slice(args);
    let out = roofline(&all);
    assert_eq!(out.status.code(), Some(0), "{all:?}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn decode_phase_in_json_and_table() {
    let decode = ["-p", "fp16", "--phase", "decode"];
    let text = analyze(
        "builtin:llama-2-70b",
        "a100",
        &[&decode[..], &["--format", "json"]].concat(),
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let llm = &json["llm"];
    assert_eq!(llm["phase"], "decode");
    assert_eq!(llm["context_tokens"], 2049);
    assert_eq!(llm["set_by"], "memory");
    assert_eq!(llm["memory"]["fits"], false);
    // The same at int4 fits, and says how large a batch would.
    let text = analyze(
        "builtin:llama-2-70b",
        "a100",
        &[&decode[..], &["--weights", "int4"]].concat(),
    );
    assert!(text.contains("per output token"), "{text}");
    assert!(text.contains("fits; the largest batch"), "{text}");
    assert!(
        text.contains("weights int4, activations fp16, KV fp16"),
        "{text}"
    );
    let out = roofline(
        &[
            &["analyze", "builtin:llama-2-70b", "--device", "a100"][..],
            &decode,
        ]
        .concat(),
    );
    assert!(stdout(&out).contains("DOES NOT FIT"));
}

#[test]
fn prefill_phase_binds_the_prompt() {
    let text = analyze(
        "builtin:gpt2",
        "h100",
        &[
            "-p",
            "fp16",
            "--phase",
            "prefill",
            "--dim",
            "sequence=512",
            "--format",
            "json",
        ],
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let llm = &json["llm"];
    assert_eq!(llm["new_tokens"], 512);
    assert_eq!(llm["context_tokens"], 512);
    assert!(llm["time_to_first_token_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn both_phases_side_by_side() {
    let text = analyze(
        "builtin:llama-tiny",
        "h100",
        &["--phase", "both", "--format", "json"],
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let phases: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["llm"]["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["prefill", "decode"]);
    // The tiny preset's positions end at 1024: the default context is clamped to them.
    assert_eq!(json[0]["llm"]["new_tokens"], 1023);
    assert_eq!(json[1]["llm"]["context_tokens"], 1024);
    assert!(!json[1]["llm"]["batch_sweep"].as_array().unwrap().is_empty());
}

/// The HTML report draws tokens/s by batch: one line per device and phase, one point per batch
/// of each sweep, the same figures as the JSON.
#[test]
fn html_draws_tokens_per_second_by_batch() {
    let args = ["--device", "h100", "--phase", "both"];
    let html = analyze(
        "builtin:llama-2-7b",
        "a100",
        &[&args[..], &["--format", "html"]].concat(),
    );
    let json = analyze(
        "builtin:llama-2-7b",
        "a100",
        &[&args[..], &["--format", "json"]].concat(),
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let analyses = json.as_array().unwrap();
    assert_eq!(analyses.len(), 4, "2 devices x 2 phases");
    let section = &html[html
        .find("<section id=\"llm-sweep\">")
        .expect("sweep section")..];
    let section = &section[..section.find("</section>").unwrap()];
    let mut points = 0;
    for analysis in analyses {
        let label = analysis["device"]["id"].as_str().unwrap();
        assert!(
            section.contains(&format!(">{label}</text>")),
            "legend names {label}"
        );
        for point in analysis["llm"]["batch_sweep"].as_array().unwrap() {
            points += 1;
            let title = format!(
                "{label}: batch {}, {:.0} tokens/s",
                point["batch"],
                point["tokens_per_s"].as_f64().unwrap()
            );
            assert!(section.contains(&title), "missing point {title}");
        }
    }
    assert!(points >= 8, "{points} points");
    assert_eq!(section.matches("<circle").count(), points);
    assert!(section.matches("<polyline").count() == analyses.len());
}

#[test]
fn bad_llm_arguments_are_one_line() {
    for args in [
        vec!["analyze", "builtin:gpt2", "--phase", "generate"],
        vec!["analyze", "builtin:gpt2", "--weights", "int3"],
        vec![
            "export",
            "builtin:llama-2-7b",
            "-o",
            "/tmp/never-written.onnx",
        ],
        vec!["bench", "builtin:llama-3-70b"],
    ] {
        let out = roofline(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = roofline(&[
        "export",
        "builtin:llama-2-7b",
        "-o",
        "/tmp/never-written.onnx",
    ]);
    assert!(
        stderr(&out).contains("more than the 4.3 GB"),
        "{}",
        stderr(&out)
    );
    assert!(!std::path::Path::new("/tmp/never-written.onnx").exists());
}
