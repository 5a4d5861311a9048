//! Measured per-node times from another runtime, joined onto an [`Analysis`]: what
//! `roofline analyze --measured` shows next to the bound and what `roofline calibrate
//! --from-profile` fits the efficiency tables to. Pure: the caller reads the file and hands
//! its text over, so the analysis still reads nothing but the model.
//!
//! The format is onnxruntime's profile (`SessionOptions.enable_profiling`): a JSON array of
//! Chrome-trace events. A node's execution is an event with `"cat": "Node"`, `"name":
//! "<node>_kernel_time"`, `"dur"` in microseconds and `"args": {"op_name", "provider"}`; the
//! `_fence_before`/`_fence_after` events some versions add around it are not the kernel and
//! are skipped. Every `model_run` session event spans one run. A node's time in a run is the
//! sum of its events inside that span (a node in a `Loop` body runs several times per run), and
//! its measured time is the median over the runs it ran in, so a warm-up run or a slow spell of
//! a shared machine does not move it. A profile without `model_run` events counts each event of
//! a node as one run. onnxruntime states neither its name nor its version in the file; a
//! metadata event (`"ph": "M"` or `"name": "metadata"`, args `runtime`, `runtime_version`,
//! as `scripts/ort_profile.py` adds) supplies them when present.
//!
//! The join is by node name. A runtime runs a rewritten graph (onnxruntime folds
//! BatchNormalization into the Conv before it, fuses activations into convolutions, and names
//! the nodes it creates, e.g. `<name>_nchwc`), so profile nodes the model does not have and
//! model nodes without a measurement are counted and listed in [`MeasuredInfo`], never errors.
//! Profiling the graph the runtime saved (`SessionOptions.optimized_model_filepath`) and
//! analysing that graph joins one for one.

use std::collections::HashMap;

use serde_json::Value;

use super::model::{Analysis, MeasuredInfo, NodeStatus, MEASURED_NAMES_LISTED};

/// Longest plausible duration of one event: an hour, in microseconds. A profile stating more
/// is corrupt or not a profile of one inference.
const MAX_EVENT_US: f64 = 3_600.0 * 1e6;

/// Suffix of onnxruntime's kernel events; the node name is what precedes it.
const KERNEL_SUFFIX: &str = "_kernel_time";

/// A profile that cannot be read, in one line (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub enum MeasuredError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not an onnxruntime profile: expected a JSON array of trace events, found {0}")]
    NotAnArray(&'static str),
    #[error(
        "no node events (\"cat\": \"Node\" named `<node>_kernel_time`): not an onnxruntime \
         profile, or profiling recorded no run"
    )]
    NoNodeEvents,
    #[error("event {index} (`{name}`): {reason}")]
    BadEvent {
        index: usize,
        name: String,
        reason: String,
    },
}

/// One node of a profile: its median time over the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredNode {
    pub name: String,
    /// `args.op_name` of its events.
    pub op_type: Option<String>,
    /// `args.provider` of its events (`CPUExecutionProvider`).
    pub provider: Option<String>,
    /// Median over runs of the node's summed event durations in a run, in seconds.
    pub median_s: f64,
    /// Runs the node ran in.
    pub runs: u32,
}

/// A parsed runtime profile: per node, the median time over its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeProfile {
    pub runtime: String,
    pub runtime_version: Option<String>,
    /// Timed runs: `model_run` events, or the most events of one node without them.
    pub runs: u32,
    /// Median duration of the `model_run` spans in seconds: the runtime's end-to-end time per
    /// run, its time between nodes (and the profiler's own) included.
    pub run_median_s: Option<f64>,
    /// In order of first appearance.
    pub nodes: Vec<MeasuredNode>,
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A duration in microseconds that is a finite, non-negative number under an hour.
fn duration_us(event: &Value, index: usize, name: &str) -> Result<f64, MeasuredError> {
    let bad = |reason: String| MeasuredError::BadEvent {
        index,
        name: name.to_string(),
        reason,
    };
    let dur = event
        .get("dur")
        .ok_or_else(|| bad("no `dur` field".into()))?;
    let us = dur
        .as_f64()
        .ok_or_else(|| bad(format!("`dur` is {}, not a number", kind_of(dur))))?;
    if !us.is_finite() || us < 0.0 {
        return Err(bad(format!("duration {us} µs is negative")));
    }
    if us > MAX_EVENT_US {
        return Err(bad(format!(
            "duration {us} µs (over an hour for one node) is absurd"
        )));
    }
    Ok(us)
}

fn arg_text(event: &Value, key: &str) -> Option<String> {
    event
        .get("args")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The spans of the `model_run` events, sorted by start.
fn run_spans(events: &[Value]) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e.get("name").and_then(Value::as_str) == Some("model_run"))
        .filter_map(|e| {
            let ts = e.get("ts")?.as_f64()?;
            let dur = e.get("dur")?.as_f64()?;
            (ts.is_finite() && dur.is_finite() && dur >= 0.0).then_some((ts, ts + dur))
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    spans
}

/// The run whose span holds `ts` (timestamps are whole microseconds: a node may end a tick
/// after its run is stamped to end).
fn run_of(spans: &[(f64, f64)], ts: f64) -> Option<usize> {
    let after = spans.partition_point(|&(start, _)| start <= ts);
    let index = after.checked_sub(1)?;
    (ts <= spans[index].1 + 1.0).then_some(index)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

struct NodeRuns {
    op_type: Option<String>,
    provider: Option<String>,
    /// Summed microseconds per run key.
    per_run: Vec<(usize, f64)>,
}

/// Parses an onnxruntime profile (see the module doc).
pub fn parse_ort_profile(text: &str) -> Result<RuntimeProfile, MeasuredError> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| MeasuredError::NotJson(e.to_string()))?;
    let Value::Array(events) = root else {
        return Err(MeasuredError::NotAnArray(kind_of(&root)));
    };
    let spans = run_spans(&events);
    let mut runtime = None;
    let mut runtime_version = None;
    let mut order: Vec<String> = Vec::new();
    let mut nodes: HashMap<String, NodeRuns> = HashMap::new();
    for (index, event) in events.iter().enumerate() {
        let Some(object) = event.as_object() else {
            return Err(MeasuredError::BadEvent {
                index,
                name: String::new(),
                reason: format!("{}, not an event object", kind_of(event)),
            });
        };
        let name = object.get("name").and_then(Value::as_str).unwrap_or("");
        if object.get("ph").and_then(Value::as_str) == Some("M") || name == "metadata" {
            runtime = runtime.or_else(|| arg_text(event, "runtime"));
            runtime_version = runtime_version
                .or_else(|| arg_text(event, "runtime_version"))
                .or_else(|| arg_text(event, "onnxruntime_version"));
            continue;
        }
        if object.get("cat").and_then(Value::as_str) != Some("Node") {
            continue;
        }
        // Fence events and anything else that is not the kernel itself.
        let Some(node) = name.strip_suffix(KERNEL_SUFFIX) else {
            continue;
        };
        let us = duration_us(event, index, name)?;
        let ts = object.get("ts").and_then(Value::as_f64);
        let entry = nodes.entry(node.to_string()).or_insert_with(|| {
            order.push(node.to_string());
            NodeRuns {
                op_type: None,
                provider: None,
                per_run: Vec::new(),
            }
        });
        entry.op_type = entry.op_type.take().or_else(|| arg_text(event, "op_name"));
        entry.provider = entry
            .provider
            .take()
            .or_else(|| arg_text(event, "provider"));
        // Without run spans (or outside them), each event is a run of its own: keys past
        // every span index, numbered by the node's own count.
        let key = match ts.and_then(|ts| run_of(&spans, ts)) {
            Some(run) => run,
            None => spans.len() + entry.per_run.len(),
        };
        match entry.per_run.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total += us,
            None => entry.per_run.push((key, us)),
        }
    }
    if order.is_empty() {
        return Err(MeasuredError::NoNodeEvents);
    }
    let most = nodes.values().map(|n| n.per_run.len()).max().unwrap_or(0);
    let runs = if spans.is_empty() { most } else { spans.len() };
    let mut run_us: Vec<f64> = spans.iter().map(|(start, end)| end - start).collect();
    let run_median_s = (!run_us.is_empty()).then(|| median(&mut run_us) / 1e6);
    let nodes = order
        .into_iter()
        .filter_map(|name| {
            let runs = nodes.remove(&name)?;
            let mut times: Vec<f64> = runs.per_run.iter().map(|&(_, us)| us).collect();
            Some(MeasuredNode {
                median_s: median(&mut times) / 1e6,
                runs: times.len() as u32,
                op_type: runs.op_type,
                provider: runs.provider,
                name,
            })
        })
        .collect();
    Ok(RuntimeProfile {
        runtime: runtime.unwrap_or_else(|| "onnxruntime".to_string()),
        runtime_version,
        runs: runs as u32,
        run_median_s,
        nodes,
    })
}

/// Whether a node runs a kernel in the tool's view (what a runtime should have a time for).
fn runs_a_kernel(status: NodeStatus) -> bool {
    matches!(status, NodeStatus::Costed | NodeStatus::NotCosted)
}

/// Joins `profile` onto `analysis` by node name: fills each matched node's `measured_s` and
/// `measured_efficiency`, the summary's `measured_total_s` and `analysis.measured` (`source`:
/// the profile as the user named it).
pub fn join(analysis: &mut Analysis, profile: &RuntimeProfile, source: &str) {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (position, node) in analysis.nodes.iter().enumerate() {
        if !node.name.is_empty() {
            by_name.entry(node.name.as_str()).or_insert(position);
        }
    }
    let mut matches: Vec<(usize, f64)> = Vec::new();
    let mut unmatched_names = Vec::new();
    let mut unmatched = 0;
    let mut unmatched_s = 0.0;
    for measured in &profile.nodes {
        match by_name.get(measured.name.as_str()) {
            Some(&position) => matches.push((position, measured.median_s)),
            None => {
                unmatched += 1;
                unmatched_s += measured.median_s;
                if unmatched_names.len() < MEASURED_NAMES_LISTED {
                    unmatched_names.push(measured.name.clone());
                }
            }
        }
    }
    let mut total = 0.0;
    for &(position, seconds) in &matches {
        let node = &mut analysis.nodes[position];
        node.measured_s = Some(seconds);
        node.measured_efficiency =
            (seconds > 0.0 && node.predicted_s > 0.0).then(|| node.predicted_s / seconds);
        total += seconds;
    }
    let unmeasured: Vec<&str> = analysis
        .nodes
        .iter()
        .filter(|n| runs_a_kernel(n.status) && n.measured_s.is_none())
        .map(|n| n.name.as_str())
        .collect();
    let mut providers: Vec<String> = profile
        .nodes
        .iter()
        .filter_map(|n| n.provider.clone())
        .collect();
    providers.sort();
    providers.dedup();
    analysis.summary.measured_total_s = Some(total);
    analysis.measured = Some(MeasuredInfo {
        source: source.to_string(),
        runtime: profile.runtime.clone(),
        runtime_version: profile.runtime_version.clone(),
        providers,
        runs: profile.runs,
        run_median_s: profile.run_median_s,
        profile_nodes: profile.nodes.len(),
        matched_nodes: matches.len(),
        unmatched_profile_nodes: unmatched,
        unmatched_profile_names: unmatched_names,
        unmatched_profile_s: unmatched_s,
        unmeasured_model_nodes: unmeasured.len(),
        unmeasured_model_names: unmeasured
            .iter()
            .take(MEASURED_NAMES_LISTED)
            .map(|s| s.to_string())
            .collect(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs of three nodes, fences, a metadata event, session events; `Conv_0` is 100 then
    /// 120 µs, `Relu_1` 10 then 30, `extra_fused` (not in tinycnn) 5 then 7.
    const PROFILE: &str = r#"[
      {"cat": "Session", "ph": "M", "name": "metadata", "pid": 1, "tid": 1,
       "args": {"runtime": "onnxruntime", "runtime_version": "1.32.0"}},
      {"cat": "Session", "name": "session_initialization", "ph": "X", "ts": 0, "dur": 50, "args": {}},
      {"cat": "Session", "name": "model_run", "ph": "X", "ts": 1000, "dur": 300, "args": {}},
      {"cat": "Node", "name": "Conv_0_fence_before", "ph": "X", "ts": 1001, "dur": 0, "args": {"op_name": "Conv"}},
      {"cat": "Node", "name": "Conv_0_kernel_time", "ph": "X", "ts": 1002, "dur": 100,
       "args": {"op_name": "Conv", "provider": "CPUExecutionProvider"}},
      {"cat": "Node", "name": "Conv_0_fence_after", "ph": "X", "ts": 1102, "dur": 0, "args": {"op_name": "Conv"}},
      {"cat": "Node", "name": "Relu_1_kernel_time", "ph": "X", "ts": 1110, "dur": 10,
       "args": {"op_name": "Relu", "provider": "CPUExecutionProvider"}},
      {"cat": "Node", "name": "extra_fused_kernel_time", "ph": "X", "ts": 1130, "dur": 5,
       "args": {"op_name": "Reorder", "provider": "CPUExecutionProvider"}},
      {"cat": "Session", "name": "model_run", "ph": "X", "ts": 2000, "dur": 300, "args": {}},
      {"cat": "Node", "name": "Conv_0_kernel_time", "ph": "X", "ts": 2002, "dur": 120,
       "args": {"op_name": "Conv", "provider": "CPUExecutionProvider"}},
      {"cat": "Node", "name": "Relu_1_kernel_time", "ph": "X", "ts": 2130, "dur": 30,
       "args": {"op_name": "Relu", "provider": "CPUExecutionProvider"}},
      {"cat": "Node", "name": "extra_fused_kernel_time", "ph": "X", "ts": 2170, "dur": 7,
       "args": {"op_name": "Reorder", "provider": "CPUExecutionProvider"}}
    ]"#;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
    }

    #[test]
    fn medians_per_node_over_runs_and_the_runtime_from_metadata() {
        let profile = parse_ort_profile(PROFILE).unwrap();
        assert_eq!(profile.runtime, "onnxruntime");
        assert_eq!(profile.runtime_version.as_deref(), Some("1.32.0"));
        assert_eq!(profile.runs, 2);
        assert_eq!(profile.run_median_s, Some(300e-6));
        let names: Vec<&str> = profile.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["Conv_0", "Relu_1", "extra_fused"], "fences skipped");
        assert!(close(profile.nodes[0].median_s, 110e-6));
        assert!(close(profile.nodes[1].median_s, 20e-6));
        assert_eq!(profile.nodes[0].op_type.as_deref(), Some("Conv"));
        assert_eq!(
            profile.nodes[0].provider.as_deref(),
            Some("CPUExecutionProvider")
        );
        assert_eq!(profile.nodes[0].runs, 2);
    }

    #[test]
    fn a_node_run_twice_in_one_run_counts_once_with_both_times() {
        let text = r#"[
          {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
          {"cat": "Node", "name": "body_kernel_time", "ts": 1, "dur": 10},
          {"cat": "Node", "name": "body_kernel_time", "ts": 20, "dur": 10},
          {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
          {"cat": "Node", "name": "body_kernel_time", "ts": 201, "dur": 12},
          {"cat": "Node", "name": "body_kernel_time", "ts": 220, "dur": 12},
          {"cat": "Session", "name": "model_run", "ts": 400, "dur": 100},
          {"cat": "Node", "name": "body_kernel_time", "ts": 401, "dur": 30},
          {"cat": "Node", "name": "body_kernel_time", "ts": 420, "dur": 30}
        ]"#;
        let profile = parse_ort_profile(text).unwrap();
        assert_eq!(profile.runs, 3);
        assert_eq!(profile.nodes[0].runs, 3);
        assert!(close(profile.nodes[0].median_s, 24e-6));
        // No run spans and no metadata: every event is a run, the runtime is onnxruntime's.
        let bare = r#"[{"cat": "Node", "name": "a_kernel_time", "dur": 4},
                       {"cat": "Node", "name": "a_kernel_time", "dur": 6},
                       {"cat": "Node", "name": "a_kernel_time", "dur": 100}]"#;
        let profile = parse_ort_profile(bare).unwrap();
        assert_eq!((profile.runs, profile.runtime_version.clone()), (3, None));
        assert!(close(profile.nodes[0].median_s, 6e-6));
    }

    #[test]
    fn malformed_profiles_are_one_line_errors() {
        let cases = [
            ("this is not json", "not JSON"),
            ("{\"traceEvents\": []}", "found an object"),
            ("[]", "no node events"),
            (
                r#"[{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1}]"#,
                "no node events",
            ),
            ("[3]", "not an event object"),
            (
                r#"[{"cat": "Node", "name": "a_kernel_time"}]"#,
                "no `dur` field",
            ),
            (
                r#"[{"cat": "Node", "name": "a_kernel_time", "dur": "12"}]"#,
                "a string, not a number",
            ),
            (
                r#"[{"cat": "Node", "name": "a_kernel_time", "dur": -5}]"#,
                "negative",
            ),
            (
                r#"[{"cat": "Node", "name": "a_kernel_time", "dur": 1e300}]"#,
                "absurd",
            ),
        ];
        for (text, expected) in cases {
            let error = parse_ort_profile(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }

    fn tinycnn() -> Analysis {
        crate::builtin::analyze_on_catalog(
            "builtin:tinycnn",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        )
    }

    #[test]
    fn the_join_fills_matched_nodes_and_lists_the_rest() {
        let mut analysis = tinycnn();
        let running = analysis
            .nodes
            .iter()
            .filter(|n| runs_a_kernel(n.status))
            .count();
        let profile = parse_ort_profile(PROFILE).unwrap();
        join(&mut analysis, &profile, "p.json");
        let info = analysis.measured.clone().unwrap();
        assert_eq!(info.source, "p.json");
        assert_eq!(info.providers, ["CPUExecutionProvider"]);
        assert_eq!((info.profile_nodes, info.matched_nodes), (3, 2));
        assert_eq!(info.unmatched_profile_nodes, 1);
        assert_eq!(info.unmatched_profile_names, ["extra_fused"]);
        assert!(close(info.unmatched_profile_s, 6e-6));
        assert_eq!(info.unmeasured_model_nodes, running - 2);
        assert!(!info.unmeasured_model_names.contains(&"Conv_0".to_string()));
        let conv = analysis.nodes.iter().find(|n| n.name == "Conv_0").unwrap();
        assert!(close(conv.measured_s.unwrap(), 110e-6));
        assert!(close(
            conv.measured_efficiency.unwrap(),
            conv.predicted_s / 110e-6
        ));
        assert!(close(analysis.summary.measured_total_s.unwrap(), 130e-6));
        let others = analysis
            .nodes
            .iter()
            .filter(|n| n.name != "Conv_0" && n.name != "Relu_1");
        assert!(others.clone().all(|n| n.measured_s.is_none()));
    }
}
