//! No model that onnx's own checker rejects passes `analyze`: mutated versions of small valid
//! models (the structured fuzzer's mutations: dims, stored counts, attributes, input lists,
//! producers, op types, graph input shapes) are judged by `onnx.checker.check_model` with
//! `full_check` (schema, types and strict shape inference, what onnxruntime's session load
//! applies) and by the tool; every one the checker rejects must be refused by the tool too
//! (import error, analysis error, or an op reported as not costed). The other direction is not
//! asserted: the tool may refuse more (a shape it cannot derive is not an invalid model, but a
//! kernel it has not is a refusal). One rejection is not shared: a node list out of topological
//! order, which onnxruntime and the tool sort on load; those models are sorted and judged again.

use std::path::Path;

use prost::Message;
use roofline::analysis::{self, import, AnalyzeOptions, Bindings, Severity};
use roofline::device::find_device;

use super::cli::tempdir;
use super::common::venv_python;
use super::fuzz_exec::{attention_seed, cnn_seed, mutate, SplitMix};

/// Whether the tool accepts the model as `analyze --batch 1` would (exit status 0).
fn tool_accepts(bytes: &[u8]) -> Result<(), String> {
    let path = Path::new("case.onnx");
    let model = import::decode_model(bytes.to_vec().into(), path).map_err(|e| e.to_string())?;
    let graph = import::import_model(&model, Path::new("/nonexistent-case-dir"), path)
        .map_err(|e| e.to_string())?;
    let device = find_device("rtx2080ti").unwrap().to_profile();
    let options = AnalyzeOptions {
        bindings: Bindings {
            inputs: Vec::new(),
            batch: Some(1),
            dims: Vec::new(),
        },
        ..AnalyzeOptions::default()
    };
    let analysis =
        analysis::analyze_graph(graph, "case", &device, &options).map_err(|e| e.to_string())?;
    match analysis
        .diagnostics
        .iter()
        .find(|d| d.severity == Severity::Error)
    {
        Some(d) => Err(d.message.clone()),
        None => Ok(()),
    }
}

#[test]
fn every_model_the_onnx_checker_rejects_is_refused() {
    let Some(python) = venv_python() else {
        return;
    };
    let cases: usize = std::env::var("ROOFLINE_CHECKER_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let dir = tempdir();
    let seeds = [cnn_seed(), attention_seed()];
    let mut rng = SplitMix(0xc4ec);
    let mut files = Vec::with_capacity(cases);
    for case in 0..cases {
        let mut model = rng.pick(&seeds).clone();
        for _ in 0..1 + rng.below(2) {
            mutate(&mut model, &mut rng);
        }
        let path = dir.join(format!("case{case}.onnx"));
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        files.push(path);
    }
    // One interpreter judges every file; each verdict is one line: OK or the first error line.
    // A node list out of topological order is the one rejection onnxruntime does not share (it
    // sorts what it loads, and so does the tool): such a model is sorted and judged again, and
    // only what the checker rejects after sorting (or a cycle) must be refused.
    let script = r#"
import sys, heapq, onnx

def sorted_model(model):
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in model.graph.node]
    producer = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            if name:
                producer.setdefault(name, i)
    before = [sorted({producer[x] for x in n.input if x in producer and producer[x] != i})
              for i, n in enumerate(nodes)]
    waiting = [len(b) for b in before]
    readers = [[] for _ in nodes]
    for i, b in enumerate(before):
        for p in b:
            readers[p].append(i)
    ready = [i for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(order) != len(nodes):
        return None
    del model.graph.node[:]
    model.graph.node.extend(nodes[i] for i in order)
    return model

def verdict(model):
    try:
        onnx.checker.check_model(model, full_check=True)
        return "OK"
    except Exception as err:
        return "REJECT " + " ".join(str(err).split())[:200]

for path in sys.argv[1:]:
    model = onnx.load(path)
    first = verdict(model)
    if "topologically sorted" in first:
        resorted = sorted_model(model)
        if resorted is not None:
            again = verdict(resorted)
            first = "OK-SORTED" if again == "OK" else again
    print(first)
"#;
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(&files)
        .output()
        .expect("python runs");
    let verdicts = String::from_utf8_lossy(&output.stdout).into_owned();
    let verdicts: Vec<&str> = verdicts.lines().collect();
    assert_eq!(
        verdicts.len(),
        files.len(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut accepted_but_rejected = Vec::new();
    let mut rejected = 0;
    let unsorted = verdicts.iter().filter(|v| **v == "OK-SORTED").count();
    for (path, verdict) in files.iter().zip(&verdicts) {
        if let Some(reason) = verdict.strip_prefix("REJECT ") {
            rejected += 1;
            if tool_accepts(&std::fs::read(path).unwrap()).is_ok() {
                accepted_but_rejected.push(format!("{}: {reason}", path.display()));
            }
        }
    }
    eprintln!(
        "checker agreement: {cases} mutated models, {rejected} rejected by onnx.checker, {} of those accepted by the tool; {unsorted} only out of topological order",
        accepted_but_rejected.len()
    );
    assert!(
        accepted_but_rejected.is_empty(),
        "the onnx checker rejects these but `analyze` accepts them:\n{}",
        accepted_but_rejected.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
