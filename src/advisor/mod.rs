//! Advisor: graph rewrites (folding, BN folding, epilogue fusion, element-wise chains, and the
//! opt-in int8 / bf16 / fp16 quantization of `quantize.rs`), each with
//! its gain predicted by the roofline and, on the local CPU, measured by running the original and
//! the rewritten graph with the tool's own kernels. Composes `analysis` (predictions) and `exec`
//! (measurements); `export` writes the rewritten model back as standard ONNX.

pub mod compress;
pub mod export;
pub mod passes;
pub mod prune;
pub mod qdq;
pub mod qoperator;
pub mod quantize;

use std::collections::HashMap;

use crate::analysis::edit;
use crate::analysis::graph::{Graph, Node};
use crate::analysis::infer::NodeState;
use crate::analysis::{self, Analysis, AnalysisError, AnalyzeOptions, Prepared};
use crate::device::DeviceProfile;
use crate::exec::{self, ExecError};

pub use crate::report::model::advice::{
    AdviceReport, Change, ExpectedGain, FusionGroup, LeftAlone, Overall, PassOutcome,
    ADVICE_SCHEMA, ADVICE_SCHEMA_VERSION,
};

#[derive(Debug, thiserror::Error)]
pub enum AdvisorError {
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("pass `{pass}` left an invalid graph: {reason}")]
    InvalidAfterPass { pass: String, reason: String },
    #[error("unknown pass `{0}` (available: fold, bn-fold, fuse, eltwise, int8, bf16, fp16)")]
    UnknownPass(String),
    #[error("{0}")]
    Quantization(String),
}

/// A named rewrite over the IR. It edits the node list; the driver re-infers, validates and
/// costs the result.
pub trait Pass {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// Rewrites `ed`. `states` are the inference states of `ed.nodes()` (same order); `ctx` is
    /// the driver's context (device, options, quantization state), which the float passes
    /// ignore and the quantization passes need for their roofline decisions and calibration.
    fn run(
        &self,
        ed: &mut edit::Editor,
        states: &[NodeState],
        ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError>;

    /// Applied when `--apply` names no pass (the quantization passes are opt-in).
    fn default_enabled(&self) -> bool {
        true
    }

    /// Whether `--verify` can measure the rewrite (false for a precision with no kernel).
    fn measured(&self) -> bool {
        true
    }
}

/// What a pass returns: its rewrites and, for the quantization passes, a decision per candidate
/// op and notes for the report's quantization section. The driver collects them; no pass keeps
/// report state in the shared context.
#[derive(Debug, Default)]
pub struct PassOutput {
    pub changes: Vec<Change>,
    pub decisions: Vec<quantize::QuantDecision>,
    pub notes: Vec<String>,
}

impl From<Vec<Change>> for PassOutput {
    fn from(changes: Vec<Change>) -> Self {
        PassOutput {
            changes,
            ..PassOutput::default()
        }
    }
}

/// What a pass may read besides the graph: the device, the options, and the state the
/// quantization passes share with the driver.
pub struct PassContext<'a> {
    pub device: &'a DeviceProfile,
    pub analyze: &'a AnalyzeOptions,
    pub options: &'a AdviseOptions,
    pub calibration: quantize::SharedCalibration,
}

/// A change names the original nodes it replaced (the report type lives in `report::model`).
impl Change {
    pub fn new(nodes: &[&Node], what: &str) -> Change {
        Change {
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
            op_types: nodes.iter().map(|n| n.op_type.clone()).collect(),
            what: what.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct AdviseOptions {
    /// Pass names to apply, in driver order; empty = all.
    pub apply: Vec<String>,
    pub skip: Vec<String>,
    /// Run both graphs and measure (only meaningful for the local CPU).
    pub verify: bool,
    pub runs: usize,
    pub threads: usize,
    /// Autotune the GEMM blockings of the measured graphs (cached per device profile).
    pub tune: bool,
    /// Directory of .npy calibration inputs for `int8` (default: random inputs).
    pub calibration_dir: Option<std::path::PathBuf>,
    pub calibration_method: quantize::CalibrationMethod,
    /// Random calibration inputs when no directory is given.
    pub calibration_samples: usize,
    /// Memory the plans kept alive for interleaved `--verify` timing may take together; a
    /// graph version past it is timed on its own and its plan dropped.
    pub live_plan_budget_bytes: u64,
    /// The quantization passes convert every candidate op, gain or not (the hardware-blind
    /// all-low-precision baseline of `compress`).
    pub convert_all: bool,
    /// Input values of the `--verify` runs by name (`--input NAME=FILE.npy`); inputs not
    /// given get seeded random values.
    pub given_inputs: std::collections::HashMap<String, crate::exec::RtTensor>,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions {
            apply: Vec::new(),
            skip: Vec::new(),
            verify: false,
            runs: 10,
            threads: 1,
            tune: false,
            calibration_dir: None,
            calibration_method: quantize::CalibrationMethod::MinMax,
            calibration_samples: quantize::DEFAULT_SAMPLES,
            live_plan_budget_bytes: DEFAULT_LIVE_PLAN_BUDGET_BYTES,
            convert_all: false,
            given_inputs: Default::default(),
        }
    }
}

/// The passes selected by `--apply`/`--skip`, in driver order.
pub fn select_passes(options: &AdviseOptions) -> Result<Vec<Box<dyn Pass>>, AdvisorError> {
    let all = passes::all_passes();
    for name in options.apply.iter().chain(&options.skip) {
        if !all.iter().any(|p| p.name() == name) {
            return Err(AdvisorError::UnknownPass(name.clone()));
        }
    }
    Ok(all
        .into_iter()
        .filter(|p| {
            if options.apply.is_empty() {
                p.default_enabled()
            } else {
                options.apply.iter().any(|n| n == p.name())
            }
        })
        .filter(|p| !options.skip.iter().any(|n| n == p.name()))
        .collect())
}

/// Graph versions prepared for timing. Versions are timed *interleaved* (each round runs every
/// version, warm, starting from a different one each round), so slow drift of a shared, noisy
/// machine (another tenant, frequency changes) hits all versions alike; a gain is the median of
/// the per-round ratios, not a ratio of two medians taken minutes apart.
///
/// Every live version holds its own plan (weights and their packed copies), so versions are
/// kept alive only within [`AdviseOptions::live_plan_budget_bytes`]; a version past the budget is timed on its
/// own as soon as it is planned and its plan dropped, and its gains are ratios of medians.
struct Measurements {
    versions: Vec<MeasuredVersion>,
    live_bytes: u64,
    /// The analysis' convolution policy, so `--no-winograd` measures direct convolutions too.
    conv_algorithms: analysis::algorithm::AlgorithmPolicy,
}

/// Default of [`AdviseOptions::live_plan_budget_bytes`].
pub const DEFAULT_LIVE_PLAN_BUDGET_BYTES: u64 = 4 << 30;

struct MeasuredVersion {
    /// `None` once timed on its own (over the live-plan budget).
    live: Option<(exec::Plan, exec::plan::Workspace)>,
    inputs: HashMap<String, exec::RtTensor>,
    outputs: Vec<(String, exec::RtTensor)>,
    /// Milliseconds per round.
    times_ms: Vec<f64>,
    interleaved: bool,
}

/// One warm-up run, then one timed run (ms).
pub(crate) fn timed_run(
    plan: &exec::Plan,
    workspace: &mut exec::plan::Workspace,
    inputs: &HashMap<String, exec::RtTensor>,
) -> Result<f64, AdvisorError> {
    // The untimed run first: the timed one then starts from this version's own cache state
    // (weights and activations resident as in steady-state inference), not another version's.
    plan.execute(workspace, inputs, None)?;
    // Inputs are staged before the clock starts, as in `bench`.
    plan.stage_inputs(workspace, inputs)?;
    let start = std::time::Instant::now();
    plan.run_staged(workspace, None)?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

impl Measurements {
    /// Plans a graph version and runs it twice (warm-up; the outputs are kept for the
    /// accuracy check). Returns its index.
    fn add(&mut self, prepared: &Prepared, options: &AdviseOptions) -> Result<usize, AdvisorError> {
        let mut plan_options =
            exec::tune::plan_options(options.threads.max(1), "local", options.tune);
        if self.conv_algorithms == analysis::algorithm::AlgorithmPolicy::DirectOnly {
            plan_options.conv_algorithms = exec::ConvAlgorithms::DirectOnly;
        }
        let plan = exec::build_plan(
            &prepared.graph,
            &prepared.order,
            &prepared.states,
            &plan_options,
        )?;
        if options.tune {
            exec::tune::save(&plan_options, "local");
        }
        let inputs =
            crate::bench::with_given(crate::bench::random_inputs(&plan, 0), &options.given_inputs);
        let mut workspace = plan.workspace();
        let mut outputs = plan.run(&mut workspace, &inputs, None)?;
        outputs = plan.run(&mut workspace, &inputs, None).unwrap_or(outputs);
        let plan_bytes = plan.weights_bytes + plan.peak_activation_bytes;
        let keep = self.versions.is_empty()
            || self.live_bytes + plan_bytes <= options.live_plan_budget_bytes;
        let mut times_ms = Vec::new();
        if keep {
            self.live_bytes += plan_bytes;
        } else {
            for _ in 0..options.runs.max(1) {
                times_ms.push(timed_run(&plan, &mut workspace, &inputs)?);
            }
        }
        self.versions.push(MeasuredVersion {
            live: keep.then_some((plan, workspace)),
            inputs,
            outputs,
            times_ms,
            interleaved: keep,
        });
        Ok(self.versions.len() - 1)
    }

    /// Versions timed on their own (over the live-plan budget).
    fn sequential_count(&self) -> usize {
        self.versions.iter().filter(|v| !v.interleaved).count()
    }

    /// `rounds` interleaved rounds over every live version.
    fn time(&mut self, rounds: usize) -> Result<(), AdvisorError> {
        let live: Vec<usize> = (0..self.versions.len())
            .filter(|&i| self.versions[i].live.is_some())
            .collect();
        for round in 0..rounds.max(1) {
            for k in 0..live.len() {
                let v = &mut self.versions[live[(round + k) % live.len()]];
                if let Some((plan, workspace)) = &mut v.live {
                    let ms = timed_run(plan, workspace, &v.inputs)?;
                    v.times_ms.push(ms);
                }
            }
        }
        Ok(())
    }

    fn median_ms(&self, version: usize) -> f64 {
        median(self.versions[version].times_ms.clone())
    }

    /// Speed-up of `after` over `before`: the median of the per-round ratios when both were
    /// timed interleaved, else the ratio of their medians.
    fn speedup(&self, before: usize, after: usize) -> f64 {
        let (b, a) = (&self.versions[before], &self.versions[after]);
        if b.interleaved && a.interleaved {
            median(
                b.times_ms
                    .iter()
                    .zip(&a.times_ms)
                    .map(|(b, a)| b / a.max(1e-12))
                    .collect(),
            )
        } else {
            self.median_ms(before) / self.median_ms(after).max(1e-12)
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => 0.5 * (values[n / 2 - 1] + values[n / 2]),
    }
}

fn fusion_groups(changes: &[Change], before: &Analysis, after: &Analysis) -> Vec<FusionGroup> {
    let by_name = |a: &Analysis| -> HashMap<String, usize> {
        a.nodes.iter().map(|n| (n.name.clone(), n.index)).collect()
    };
    let (before_index, after_index) = (by_name(before), by_name(after));
    let mut groups: Vec<FusionGroup> = changes
        .iter()
        .filter(|c| c.nodes.len() >= 2)
        .map(|c| {
            let members: Vec<&analysis::NodeAnalysis> = c
                .nodes
                .iter()
                .filter_map(|n| before_index.get(n).map(|&i| &before.nodes[i]))
                .collect();
            let fused = after_index
                .get(&c.nodes[0])
                .or_else(|| after_index.get(&format!("{}_chain", c.nodes[0])))
                .map(|&i| &after.nodes[i]);
            let flops: u64 = members.iter().map(|n| n.flops + n.transcendental).sum();
            let bytes_unfused: u64 = members.iter().map(|n| n.bytes_read + n.bytes_written).sum();
            let time_unfused: f64 = members.iter().map(|n| n.predicted_s).sum();
            let (bytes_fused, time_fused) = match fused {
                Some(f) => (f.bytes_read + f.bytes_written, f.predicted_s),
                // Ops removed outright (cancelling pairs): nothing remains.
                None => (0, 0.0),
            };
            let intensity = |b: u64| if b > 0 { flops as f64 / b as f64 } else { 0.0 };
            FusionGroup {
                nodes: c.nodes.clone(),
                op_types: c.op_types.clone(),
                flops,
                bytes_unfused,
                bytes_fused,
                intensity_unfused: intensity(bytes_unfused),
                intensity_fused: intensity(bytes_fused),
                predicted_time_unfused_s: time_unfused,
                predicted_time_fused_s: time_fused,
                predicted_time_saved_s: time_unfused - time_fused,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.predicted_time_saved_s
            .total_cmp(&a.predicted_time_saved_s)
    });
    groups
}

fn left_alone(after: &Analysis) -> Vec<LeftAlone> {
    let ridge = after.device.ridge_point;
    let mut nodes: Vec<&analysis::NodeAnalysis> = after
        .nodes
        .iter()
        .filter(|n| n.status == analysis::NodeStatus::Costed)
        .collect();
    nodes.sort_by(|a, b| b.predicted_s.total_cmp(&a.predicted_s));
    nodes
        .into_iter()
        .take(10)
        .map(|n| {
            let intensity = n.intensity.unwrap_or(0.0);
            // The op's own ridge, where its compute and memory times cross: the roofs of its
            // precision and kernel class and of the memory level its data lives in (a small
            // convolution whose data stays in L2 is compute-bound well left of DRAM's ridge).
            let ridge = if n.compute_s > 0.0 && n.memory_s > 0.0 && intensity > 0.0 {
                intensity * n.memory_s / n.compute_s
            } else {
                ridge
            };
            let heavy = matches!(n.op_type.as_str(), "Conv" | "FusedConv" | "Gemm" | "FusedGemm" | "MatMul" | "FusedMatMul" | "ConvTranspose" | "QConv" | "QMatMul" | "HalfConv" | "HalfMatMul");
            let reason = match n.bound {
                analysis::Bound::Compute => format!(
                    "compute-bound (intensity {intensity:.2} FLOP/B above its ridge at {ridge:.2}): removing memory traffic cannot speed it up; only a faster compute roof (int8/fp16 where the device has one) or fewer FLOPs (pruning) can"
                ),
                analysis::Bound::Memory if heavy => format!(
                    "memory-bound (intensity {intensity:.2} < its ridge {ridge:.2}): its weights or activations dominate; smaller storage (fp16/int8 weights) or a larger batch would raise its intensity"
                ),
                analysis::Bound::Memory => format!(
                    "memory-bound {} with no fusable producer (its input is read by several ops or comes from a graph input): it still streams {:.1} MB",
                    n.op_type,
                    (n.bytes_read + n.bytes_written) as f64 / 1e6
                ),
                analysis::Bound::Overhead => "overhead-bound: the per-op launch cost exceeds its work; only removing the op helps".to_string(),
                analysis::Bound::None => "moves no data".to_string(),
            };
            LeftAlone { node: n.name.clone(), op_type: n.op_type.clone(), reason }
        })
        .collect()
}

/// The structural checks run after every rewrite: no read of a value nothing produces, no
/// cycle, and every node within its op's schema (`analysis::validate`).
pub fn check_structure(pass: &str, graph: &Graph) -> Result<(), AdvisorError> {
    let invalid = |reason: String| AdvisorError::InvalidAfterPass {
        pass: pass.into(),
        reason,
    };
    graph.validate().map_err(invalid)?;
    analysis::validate::validate_graph(graph).map_err(|e| invalid(e.to_string()))
}

/// Runs one pass over a prepared graph: lets the pass edit a copy, then re-infers and
/// validates the result (every rewrite leaves a graph that re-infers and validates). The
/// returned graph is prepared with the same bindings, ready for the analysis, the planner or
/// the next pass: one inference per pass.
pub fn apply_pass(
    prepared: &Prepared,
    pass: &dyn Pass,
    ctx: &PassContext,
) -> Result<(Prepared, PassOutput), AdvisorError> {
    let mut graph = prepared.graph.clone();
    let output = {
        let mut ed = edit::Editor::new(&mut graph);
        let output = pass.run(&mut ed, &prepared.states_in_order(), ctx)?;
        ed.finish();
        output
    };
    let next = Prepared::new(graph, &ctx.analyze.bindings).map_err(|e| {
        AdvisorError::InvalidAfterPass {
            pass: pass.name().into(),
            reason: e.to_string(),
        }
    })?;
    check_structure(pass.name(), &next.graph)?;
    Ok((next, output))
}

/// Applies the selected passes to `graph`; returns the report and the rewritten graph.
pub fn advise(
    graph: Graph,
    source: &str,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    options: &AdviseOptions,
) -> Result<(AdviceReport, Graph), AdvisorError> {
    // Measurements run on `options.threads`: predict with the ceilings of that thread count.
    let device = &device.for_threads(options.threads.max(1) as u32);
    let selected = select_passes(options)?;
    let verify = options.verify && device.source == crate::device::ProfileSource::Probed;
    let mut current = Prepared::new(graph, &analyze.bindings)?;
    let original = current.graph.clone();
    let before = analysis::analyze_prepared(&current, source, device, analyze)?;
    let mut measurements = Measurements {
        versions: Vec::new(),
        live_bytes: 0,
        conv_algorithms: analyze.conv_algorithms,
    };
    // Index of the measured version the next pass starts from.
    let mut measured_prev = if verify {
        Some(measurements.add(&current, options)?)
    } else {
        None
    };
    let original_version = measured_prev;
    // Per outcome: the measured versions before and after it.
    let mut measured_pairs: Vec<Option<(usize, usize)>> = Vec::new();
    let ctx = PassContext {
        device,
        analyze,
        options,
        calibration: Default::default(),
    };
    let mut outcomes = Vec::new();
    let mut last_analysis = before.clone();
    // The quantization passes' decisions and notes, as they return them.
    let mut quantization = quantize::QuantizationReport::default();
    for pass in selected {
        let (next, output) = apply_pass(&current, pass.as_ref(), &ctx)?;
        quantization.decisions.extend(output.decisions);
        quantization.notes.extend(output.notes);
        let changes = output.changes;
        let after = analysis::analyze_prepared(&next, source, device, analyze)?;
        let measured = if verify && !changes.is_empty() && pass.measured() {
            Some(measurements.add(&next, options)?)
        } else {
            None
        };
        measured_pairs.push(match (measured_prev, measured) {
            _ if !pass.measured() => None,
            (Some(b), Some(a)) => Some((b, a)),
            (Some(b), None) if verify => Some((b, b)),
            _ => None,
        });
        let predicted_speedup = last_analysis.summary.predicted_latency_s
            / after.summary.predicted_latency_s.max(1e-15);
        outcomes.push(PassOutcome {
            name: pass.name().into(),
            description: pass.description().into(),
            fusion_groups: fusion_groups(&changes, &last_analysis, &after),
            changes,
            nodes_before: last_analysis.model.node_count,
            nodes_after: after.model.node_count,
            predicted_latency_before_s: last_analysis.summary.predicted_latency_s,
            predicted_latency_after_s: after.summary.predicted_latency_s,
            predicted_speedup,
            bytes_saved: (last_analysis.summary.bytes_read + last_analysis.summary.bytes_written)
                as i64
                - (after.summary.bytes_read + after.summary.bytes_written) as i64,
            // Filled in after the interleaved timing below.
            measured_latency_before_ms: None,
            measured_latency_after_ms: None,
            measured_speedup: None,
            prediction_error: None,
            expected: ExpectedGain::between(
                last_analysis.summary.expected_latency_s,
                after.summary.expected_latency_s,
            ),
        });
        if measured.is_some() {
            measured_prev = measured;
        }
        last_analysis = after;
        current = next;
    }
    let predicted_speedup =
        before.summary.predicted_latency_s / last_analysis.summary.predicted_latency_s.max(1e-15);
    measurements.time(options.runs)?;
    for (outcome, pair) in outcomes.iter_mut().zip(&measured_pairs) {
        if let Some((b, a)) = *pair {
            let speedup = if a == b {
                1.0
            } else {
                measurements.speedup(b, a)
            };
            outcome.measured_latency_before_ms = Some(measurements.median_ms(b));
            outcome.measured_latency_after_ms = Some(measurements.median_ms(a));
            outcome.measured_speedup = Some(speedup);
            outcome.prediction_error = Some((outcome.predicted_speedup - speedup) / speedup);
            outcome.expected.judge(speedup);
        }
    }
    let (first_measure, measured_after, measured_speedup, max_error) =
        match (original_version, measured_prev) {
            (Some(first), Some(last)) => (
                Some(measurements.median_ms(first)),
                Some(measurements.median_ms(last)),
                Some(if first == last {
                    1.0
                } else {
                    measurements.speedup(first, last)
                }),
                Some(output_error(
                    &measurements.versions[first].outputs,
                    &measurements.versions[last].outputs,
                )),
            ),
            _ => (None, None, None, None),
        };
    let report = AdviceReport {
        schema: ADVICE_SCHEMA.into(),
        schema_version: ADVICE_SCHEMA_VERSION,
        verified: verify,
        verification_note: if verify {
            let sequential = match measurements.sequential_count() {
                0 => String::new(),
                n => format!("; {n} graph version(s) timed on their own, their gains ratios of medians (keeping every version's plan alive would pass the {:.1} GiB budget)", options.live_plan_budget_bytes as f64 / (1u64 << 30) as f64),
            };
            format!(
                "measured on this CPU with the tool's kernels: {} interleaved rounds (median latency; gains are medians of per-round ratios), {} thread(s){sequential}",
                options.runs.max(1),
                options.threads.max(1)
            )
        } else if options.verify {
            format!("device `{}` is not this machine: gains are predicted only (use --device local to measure)", device.id)
        } else {
            "predicted only (add --verify with --device local to measure)".into()
        },
        overall: Overall {
            predicted_latency_before_s: before.summary.predicted_latency_s,
            predicted_latency_after_s: last_analysis.summary.predicted_latency_s,
            predicted_speedup,
            measured_latency_before_ms: first_measure,
            measured_latency_after_ms: measured_after,
            measured_speedup,
            prediction_error: measured_speedup.map(|m| (predicted_speedup - m) / m),
            expected: ExpectedGain::between(
                before.summary.expected_latency_s,
                last_analysis.summary.expected_latency_s,
            )
            .judged(measured_speedup),
            max_relative_output_error: max_error,
        },
        left_alone: left_alone(&last_analysis),
        quantization: quantization_report(quantization, &ctx, &original, &current.graph)?,
        passes: outcomes,
        before,
        after: last_analysis,
    };
    Ok((report, current.graph))
}

/// The quantization section: decisions the passes recorded and, when any op changed
/// precision, the accuracy proxy of the final graph against the fp32 original.
fn quantization_report(
    mut report: quantize::QuantizationReport,
    ctx: &PassContext,
    original: &Graph,
    rewritten: &Graph,
) -> Result<Option<quantize::QuantizationReport>, AdvisorError> {
    if report.decisions.is_empty() && report.notes.is_empty() {
        return Ok(None);
    }
    let converted = report.decisions.iter().any(|d| d.decision != "fp32");
    report.accuracy = if converted {
        Some(quantize::accuracy(original, rewritten, ctx)?)
    } else {
        None
    };
    report.calibration = ctx.calibration.borrow().description.clone();
    let notes = quantize::summary_notes(&report);
    report.notes.extend(notes);
    Ok(Some(report))
}

fn output_error(
    original: &[(String, exec::RtTensor)],
    rewritten: &[(String, exec::RtTensor)],
) -> f64 {
    let mut worst = 0.0f64;
    for (name, want) in original {
        let Some((_, got)) = rewritten.iter().find(|(n, _)| n == name) else {
            return f64::INFINITY;
        };
        let (w, g) = (want.to_f32(), got.to_f32());
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-30) as f64;
        let err = w
            .iter()
            .zip(&g)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) as f64;
        worst = worst.max(err / scale);
    }
    worst
}
