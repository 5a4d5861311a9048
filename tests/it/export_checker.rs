//! `roofline advise MODEL -o OUT.onnx` writes files the onnx checker accepts
//! (`onnx.checker.check_model(path, full_check=True)` in the project venv): every built-in model,
//! every corpus model, and a model whose `If`/`Loop` subgraphs read top-level initializers by
//! name (those initializers must survive the export, issue 18).
//!
//! Advise runs without `--verify` (predictions only, on a catalogue device), so each model takes
//! well under a second or two; one python process checks all the written files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use roofline::analysis::import;

use super::cli::tempdir;
use super::common::{corpus_dir, repo_root, roofline, stderr, venv_python};

/// Checks every file with the onnx checker (full check); paths prefixed `ort:` are also loaded
/// into an onnxruntime session. Prints one `FAIL<TAB>path<TAB>reason` line per rejected file.
const CHECKER: &str = r#"
import sys
import onnx
failed = 0
for arg in sys.argv[1:]:
    ort = arg.startswith("ort:")
    path = arg[4:] if ort else arg
    try:
        onnx.checker.check_model(path, full_check=True)
        if ort:
            import onnxruntime
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as e:
        failed += 1
        reason = " ".join(str(e).split())
        print(f"FAIL\t{path}\t{type(e).__name__}: {reason}")
print(f"checked {len(sys.argv) - 1} file(s), {failed} rejected")
"#;

/// Runs the checker on `files`; returns one line per rejected file (empty when all pass).
pub(super) fn rejected(python: &Path, files: &[String]) -> Vec<String> {
    let out = Command::new(python)
        .arg("-c")
        .arg(CHECKER)
        .args(files)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains("checked "),
        "the checker script failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("FAIL\t"))
        .map(|l| l.replacen('\t', ": ", 1))
        .collect()
}

/// `roofline advise MODEL --device rtx2080ti -o OUT [bindings]`; `Err` with the stderr on failure.
fn advise(model: &str, out: &Path, bindings: &[&str]) -> Result<(), String> {
    let mut args = vec![
        "advise",
        model,
        "--device",
        "rtx2080ti",
        "--format",
        "json",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(bindings);
    let run = roofline(&args);
    if run.status.success() && out.exists() {
        Ok(())
    } else {
        Err(format!("advise {model} failed: {}", stderr(&run)))
    }
}

fn initializer_names(path: &Path) -> BTreeSet<String> {
    let model = import::read_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    model
        .graph
        .unwrap()
        .initializer
        .into_iter()
        .map(|t| t.name)
        .collect()
}

#[test]
fn advised_builtin_models_pass_the_onnx_checker() {
    let Some(python) = venv_python() else { return };
    let dir = tempdir();
    let mut files = Vec::new();
    let mut failures = Vec::new();
    // The decoder presets with billions of parameters are analysed only (their export is
    // refused); the runnable one stands for them.
    let models = roofline::builtin::MODELS
        .iter()
        .filter(|m| m.decoder.is_none() || m.name == "llama-tiny");
    for model in models {
        let source = dir.join(format!("{}.onnx", model.name));
        let out = roofline(&[
            "export",
            &format!("builtin:{}", model.name),
            "-o",
            source.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}: {}", model.name, stderr(&out));
        // The file has no default bindings: pass the built-in's own (`--batch 1`, or BERT's
        // `--input input_ids=1x128`).
        let defaults = (model.default_bindings)();
        let mut bindings: Vec<String> = defaults
            .inputs
            .iter()
            .map(|(name, dims)| {
                let dims: Vec<String> = dims.iter().map(u64::to_string).collect();
                format!("--input={name}={}", dims.join("x"))
            })
            .collect();
        if let Some(batch) = defaults.batch {
            bindings.push(format!("--batch={batch}"));
        }
        bindings.extend(
            defaults
                .dims
                .iter()
                .map(|(name, value)| format!("--dim={name}={value}")),
        );
        let bindings: Vec<&str> = bindings.iter().map(String::as_str).collect();
        let written = dir.join(format!("{}-advised.onnx", model.name));
        match advise(source.to_str().unwrap(), &written, &bindings) {
            Ok(()) => files.push(written.to_string_lossy().into_owned()),
            Err(e) => failures.push(e),
        }
    }
    failures.extend(rejected(&python, &files));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Kept on failure for a look; the advised light models alone are about 150 MB.
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bindings the other corpus tests use (`tests/reference/onnx_tool.json`, exec_vs_ort).
fn corpus_bindings(file: &str) -> &'static [&'static str] {
    match file {
        "ch_PP-OCRv4_det_infer.onnx" => &["--input", "x=1x3x640x640"],
        "ch_PP-OCRv4_rec_infer.onnx" => &["--input", "x=1x3x48x320"],
        "ch_ppocr_mobile_v2.0_cls_infer.onnx" => &["--input", "x=1x3x48x192"],
        "magika_standard_v3_3.onnx" => &["--input", "bytes=1x2048"],
        // The light models declare fixed 1x3x224x224 inputs.
        _ => &[],
    }
}

#[test]
fn advised_corpus_models_pass_the_onnx_checker() {
    let Some(python) = venv_python() else { return };
    let Some(corpus) = corpus_dir() else { return };
    let dir = tempdir();
    let mut models: Vec<PathBuf> = Vec::new();
    // `light-random/` is left out: the same nine architectures with materialised weights
    // (1.3 GB together), whose export would only copy those weights at a large cost in time.
    for sub in ["light", "ppocr", "extra"] {
        for entry in std::fs::read_dir(corpus.join(sub)).expect("corpus directory") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "onnx") {
                models.push(path);
            }
        }
    }
    models.sort();
    assert!(models.len() >= 13, "corpus incomplete: {models:?}");
    let mut files = Vec::new();
    let mut failures = Vec::new();
    for model in &models {
        let file = model.file_name().unwrap().to_string_lossy().into_owned();
        let written = dir.join(format!("advised-{file}"));
        match advise(model.to_str().unwrap(), &written, corpus_bindings(&file)) {
            Ok(()) => files.push(written.to_string_lossy().into_owned()),
            Err(e) => failures.push(format!("{file}: {e}")),
        }
    }
    failures.extend(rejected(&python, &files));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Kept on failure for a look; the advised light models alone are about 150 MB.
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes a model whose subgraphs read top-level initializers by name: `h = x + w`;
/// `y = If(cond) { h + a } else { If(cond) { h * c } else { h - c } * b }`;
/// `z = Loop(trip) { v + d }` over `x`. `a`, `b`, `c`, `d` are read only inside the subgraphs.
const IF_MODEL: &str = r#"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

def vi(name, elem=TensorProto.FLOAT, shape=(1, 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))

def const(name, value):
    return numpy_helper.from_array(np.full((1, 4), value, dtype=np.float32), name)

def branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [vi(out)])

inner = helper.make_node(
    "If", ["cond"], ["inner"],
    then_branch=branch("inner_then", [helper.make_node("Mul", ["h", "c"], ["it"])], "it"),
    else_branch=branch("inner_else", [helper.make_node("Sub", ["h", "c"], ["ie"])], "ie"))
choose = helper.make_node(
    "If", ["cond"], ["y"],
    then_branch=branch("then", [helper.make_node("Add", ["h", "a"], ["t"])], "t"),
    else_branch=branch("else", [inner, helper.make_node("Mul", ["inner", "b"], ["e"])], "e"))
body = helper.make_graph(
    [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
     helper.make_node("Add", ["v", "d"], ["v_out"])],
    "body",
    [vi("iter", TensorProto.INT64, ()), vi("cond_in", TensorProto.BOOL, ()), vi("v")],
    [vi("cond_out", TensorProto.BOOL, ()), vi("v_out")])
# `cond` is optional in ONNX, but roofline's validator requires Loop input #1 (reported).
loop = helper.make_node("Loop", ["trip", "cond", "x"], ["z"], body=body)
graph = helper.make_graph(
    [helper.make_node("Add", ["x", "w"], ["h"]), choose, loop],
    "subgraph_initializers",
    [vi("x"), vi("cond", TensorProto.BOOL, ())],
    [vi("y"), vi("h"), vi("z")],
    [const("w", 1.0), const("a", 2.0), const("b", 3.0), const("c", 4.0), const("d", 5.0),
     numpy_helper.from_array(np.array(3, dtype=np.int64), "trip")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, sys.argv[1])
"#;

#[test]
fn advise_keeps_initializers_that_subgraphs_read() {
    let Some(python) = venv_python() else { return };
    let dir = tempdir();
    let source = dir.join("subgraph_initializers.onnx");
    let made = Command::new(&python)
        .arg("-c")
        .arg(IF_MODEL)
        .arg(&source)
        .current_dir(repo_root())
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "building the model failed: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let written = dir.join("subgraph_initializers-advised.onnx");
    advise(source.to_str().unwrap(), &written, &[]).unwrap();
    let before = initializer_names(&source);
    let after = initializer_names(&written);
    assert_eq!(before.len(), 6, "{before:?}");
    let lost: Vec<&String> = before.difference(&after).collect();
    assert!(
        lost.is_empty(),
        "initializers dropped by the export: {lost:?}"
    );
    let failures = rejected(&python, &[format!("ort:{}", written.to_string_lossy())]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Kept on failure for a look; the advised light models alone are about 150 MB.
    let _ = std::fs::remove_dir_all(&dir);
}
