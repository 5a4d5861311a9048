//! The hardware-aware compression loop behind `roofline compress`: a NetAdapt-style greedy
//! search over structured channel pruning (`advisor::prune`) and per-op precision (the `int8` /
//! `bf16` passes), toward a latency target, predicted by the cost model and, on this CPU,
//! corrected and proven by measurement.
//!
//! # One step
//! 1. Every prunable channel space is offered a cut: the fewest channels to remove, at a count
//!    aligned to the device's kernel tile, for the predicted latency to drop by the step's
//!    share (a fraction of the original latency). The prediction is the analysis of the
//!    deployable graph (the candidate after folding, BN folding and fusion, and after the chosen
//!    precision pass): calibrated expected time when the profile has a calibration, the roofline
//!    bound otherwise. A space whose chosen cut gains under 0.5% is skipped and the
//!    reason kept (its ops overhead-bound, or their time not in its channels).
//! 2. While no low precision is chosen, each allowed precision pass is a candidate too (the
//!    pass converts the ops whose roofline gain is ≥ 1.1×: the per-layer choice).
//! 3. The candidates with the least importance removed per millisecond gained, and those with
//!    the fewest MACs removed per millisecond gained, are run on the calibration inputs
//!    (accuracy proxy: agreement of the outputs with the original model's); the one with the
//!    most gain per accuracy lost and per MAC removed is applied.
//!
//! Measured times are carried to the spell of the original's first measurement (divided by
//! the speed-up measured beside the original in the same rounds), so a slow or fast minute of
//! a shared host does not move the correction against a target set in another minute.
//!
//! # Feedback
//! On the local device, the deployable graph is measured every few steps (interleaved with the
//! original, as `advise --verify` does) and the predictor is scaled by measured ÷ predicted for
//! this model from then on; reaching the target is always confirmed by measurement. The
//! original and each model measured every few steps are also profiled op by op (unless
//! `op_feedback` is off), and the candidates that follow are predicted with each
//! op's expected time scaled by its measured ÷ expected share of the last profiled model that
//! ran it (`op_factors`, `search::merge_factors`):
//! the calibration grid times one op at a time, and in a model the same shapes take shares of
//! its time the grid does not predict (at 1 thread on an Emerald Rapids guest: ResNet-50's 14²
//! 1×1 layers 0.75-0.8 of their expected share and its stride-2 3×3 layers 1.3, MobileNetV2's
//! depthwise layers on 28²-112² planes 1.3-2.1), so the ranking of cuts follows the times this
//! model actually spends. For another device the search predicts only and says so.

use std::collections::HashMap;
use std::time::Instant;

mod search;

use search::{
    action_value, drop_of, in_first_spell, latency_ms, point, Action, Candidate, CutGoal, Measured,
    Proxy, Search, Timer,
};

use super::passes::all_passes;
use super::prune;
use super::quantize::{calibration_inputs, plan_of};
use super::{AdviseOptions, AdvisorError, PassContext};
use crate::analysis::graph::Graph;
use crate::analysis::{self, AnalyzeOptions};
use crate::device::{DeviceKind, DeviceProfile, ProfileSource};
use crate::exec;
use crate::report::model::compress::{
    CompressReport, LayerDecision, PlannedSpace, PrecisionChoice, PrunePlan, Step, COMPRESS_SCHEMA,
    COMPRESS_SCHEMA_VERSION, PRUNE_PLAN_SCHEMA,
};
use crate::report::model::quant::AccuracyProxy;

/// What the search aims at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    Speedup(f64),
    LatencyMs(f64),
}

#[derive(Clone, Debug)]
pub struct CompressOptions {
    pub target: Target,
    /// Low precisions the search may choose (`int8`, `bf16`, `fp16`); fp32 is always allowed.
    pub precisions: Vec<String>,
    pub prune: bool,
    /// Largest accuracy drop allowed: of `--eval`'s number when given, else of the proxy
    /// (1 − top-1 agreement for classifier-like outputs, 1 − mean cosine otherwise).
    pub max_drop: Option<f64>,
    /// `--eval CMD` with `{model}` replaced by a candidate's path; the last number it prints
    /// is the accuracy (higher is better).
    pub eval: Option<String>,
    /// Predicted latency removed per step, as a fraction of the original's.
    pub step_fraction: f64,
    /// Measure (local device) every this many steps.
    pub measure_every: usize,
    pub max_steps: usize,
    /// Smallest share of a space's original channels a cut may leave.
    pub min_keep: f64,
    /// Cuts run on the calibration inputs per step, of each cheap ranking (least importance
    /// and fewest MACs removed per millisecond: up to twice this many), besides the precisions.
    pub checked_per_step: usize,
    pub compare_baselines: bool,
    /// On the local device, profile each model measured op by op and predict the next
    /// candidates with its per-op times (`Search::op_factors`); off, the calibrated
    /// predictions stand and only their total is corrected.
    pub op_feedback: bool,
    /// Hand the baselines' graphs back in [`Compressed::baselines`] (a caller that writes them
    /// out); otherwise each is dropped once measured.
    pub keep_baseline_graphs: bool,
    /// Threads, timed runs and calibration inputs (shared with `advise`).
    pub advise: AdviseOptions,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            target: Target::Speedup(2.0),
            precisions: vec!["int8".into(), "bf16".into()],
            prune: true,
            max_drop: None,
            eval: None,
            step_fraction: 0.04,
            measure_every: 4,
            max_steps: 80,
            min_keep: 0.25,
            checked_per_step: 3,
            compare_baselines: false,
            op_feedback: true,
            keep_baseline_graphs: false,
            advise: AdviseOptions::default(),
        }
    }
}

/// Name of the uniform-pruning baseline (`--compare-baselines`).
pub const UNIFORM_BASELINE: &str = "uniform-magnitude";

/// Name of the baseline with every heavy op in `precision`.
pub fn precision_baseline(precision: &str) -> String {
    format!("all-{precision}")
}

/// Every baseline `--compare-baselines` may produce for these low precisions: what a caller
/// writing them out checks paths for before the search runs.
pub fn baseline_names(precisions: &[String]) -> Vec<String> {
    std::iter::once(UNIFORM_BASELINE.to_string())
        .chain(precisions.iter().map(|p| precision_baseline(p)))
        .collect()
}

/// The result: the report, the compressed graph and the pruning plan.
pub struct Compressed {
    pub report: CompressReport,
    pub graph: Graph,
    pub plan: PrunePlan,
    /// The baselines' deployable graphs by baseline name, with `--compare-baselines` and
    /// `keep_baseline_graphs`, so they can be written out and measured again elsewhere.
    pub baselines: Vec<(String, Graph)>,
}

/// Progress events for the CLI's progress bar.
pub enum Progress<'a> {
    Step {
        step: usize,
        latency_ms: f64,
        target_ms: f64,
        action: &'a str,
    },
    Phase(&'a str),
}

pub(crate) const FLOAT_PASSES: &[&str] = &["fold", "bn-fold", "fuse", "eltwise"];
/// Gains smaller than this share of the current latency are not worth an action.
pub(crate) const MIN_STEP_GAIN: f64 = 0.005;

/// Channel counts a cut may leave on this device, and why.
fn alignment(device: &DeviceProfile) -> (usize, String) {
    match device.kind {
        DeviceKind::Gpu => (
            8,
            "multiples of 8 channels: NVIDIA tensor cores run fp16/int8 GEMMs and convolutions on channel counts that are multiples of 8 (NVIDIA Deep Learning Performance Guide, 'Channels In and Out Requirements')".into(),
        ),
        _ if device.source != ProfileSource::Probed => (
            8,
            "multiples of 8 channels: no kernel tile is known for this device (its profile was not probed here), so a common vector width".into(),
        ),
        _ => {
            let isa = crate::kernels::gemm::Isa::detect();
            let (mr, _) = isa.tile();
            (
                mr,
                format!("multiples of {mr} channels: the {} GEMM microkernel computes {mr} output channels per tile, so a count between two multiples pays for the next one", isa.name()),
            )
        }
    }
}

/// A candidate run on the calibration inputs: its deployable graph, the ops its precision pass
/// converted, and its accuracy proxy.
struct Checked {
    candidate: Candidate,
    deployable: Graph,
    choices: Vec<PrecisionChoice>,
    accuracy: AccuracyProxy,
}

/// Searches for a compressed version of `graph` that meets `options.target` on `device`.
pub fn compress(
    mut graph: Graph,
    source: &str,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    options: &CompressOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Compressed, AdvisorError> {
    let started = Instant::now();
    let device = &device.for_threads(options.advise.threads.max(1) as u32);
    let local = device.source == ProfileSource::Probed;
    for precision in &options.precisions {
        if !matches!(precision.as_str(), "int8" | "bf16" | "fp16") {
            return Err(AdvisorError::Quantization(format!(
                "unknown precision `{precision}` (int8, bf16, fp16; fp32 is always allowed)"
            )));
        }
    }
    analysis::prepare_graph(&mut graph, &analyze.bindings)?;
    let mut search = Search {
        op_factors: HashMap::new(),
        source,
        device,
        ctx: PassContext {
            device,
            analyze,
            options: &options.advise,
            calibration: Default::default(),
        },
        options,
        passes: all_passes(),
        proxy: Proxy {
            inputs: Vec::new(),
            reference: Vec::new(),
        },
    };
    progress(Progress::Phase("planning the original model"));
    let (original_dep, _) = search.deployable(&graph, None)?;
    let original_analysis = search.analyse(&original_dep)?;
    let original_pred_ms = latency_ms(&original_analysis);
    let predictor = if original_analysis.summary.expected_latency_s.is_some() {
        "calibrated expected time (the profile's calibration)".to_string()
    } else {
        "roofline bound (no calibration in the profile: run `roofline calibrate`)".to_string()
    };
    // Calibration inputs and the reference outputs of the proxy.
    let original_plan = plan_of(&original_dep, analyze, options.advise.threads)?;
    search.proxy.inputs = calibration_inputs(&search.ctx, &original_plan)?;
    {
        let mut workspace = original_plan.workspace();
        for sample in &search.proxy.inputs {
            let outputs = original_plan.run(&mut workspace, sample, None)?;
            search.proxy.reference.push(outputs);
        }
    }
    let original_eval = search.eval(&original_dep)?;
    let mut timer = if local {
        let inputs = exec::random_inputs(&original_plan, 0);
        let workspace = original_plan.workspace();
        Some(Timer {
            plan: original_plan,
            workspace,
            inputs,
            runs: options.advise.runs.max(3),
        })
    } else {
        drop(original_plan);
        None
    };
    let mut original_meas_ms = None;
    let mut correction = 1.0;
    if let Some(timer) = &mut timer {
        progress(Progress::Phase("measuring the original model"));
        let m = search.measure_and_learn(timer, &original_dep, &original_analysis)?;
        original_meas_ms = Some(m.original_ms);
        correction = m.original_ms / search.in_context_ms(&original_analysis).max(1e-12);
    }
    // A candidate's measured time carried to the spell of the original's first measurement:
    // that time divided by the speed-up measured in the candidate's own rounds (the original
    // runs in them too). A shared host slows and speeds up by a third for minutes at a time;
    // taken raw, a slow spell's time had scaled every later prediction up and the search ran
    // on past the target (MobileNetV2 at 2.6x for a 2x target), and a fast spell stopped it
    // short, while the target itself stays the first measurement's.
    let spell_ms = |m: &Measured| in_first_spell(original_meas_ms, m);
    let target_ms = match options.target {
        Target::Speedup(s) => original_meas_ms.unwrap_or(original_pred_ms) / s.max(1e-9),
        Target::LatencyMs(ms) => ms,
    };
    let (align, alignment_reason) = alignment(device);

    let original_spaces = prune::channel_structure(&mut graph.clone());
    let original_channels: HashMap<String, usize> = original_spaces
        .iter()
        .map(|s| (s.key.clone(), s.channels))
        .collect();
    let mut kept: HashMap<String, Vec<usize>> = original_spaces
        .iter()
        .map(|s| (s.key.clone(), (0..s.channels).collect()))
        .collect();
    let mut skip_reasons: HashMap<String, String> = HashMap::new();
    let mut broken: std::collections::HashSet<String> = std::collections::HashSet::new();

    // A precision is offered only if its result can be written as standard ONNX (bf16 and
    // per-channel int8 need opset 13).
    let mut early_notes = Vec::new();
    let mut precisions = Vec::new();
    for p in &options.precisions {
        let (dep, _) = search.deployable(&graph, Some(p))?;
        match super::export::to_model(&dep) {
            Ok(_) => precisions.push(p.clone()),
            Err(e) => early_notes.push(format!(
                "{p} not offered: the result could not be written as standard ONNX ({e})"
            )),
        }
    }

    let mut current = graph.clone();
    let mut precision: Option<String> = None;
    let mut precision_choices: Vec<PrecisionChoice> = Vec::new();
    let mut current_pred_ms = search.in_context_ms(&original_analysis);
    let mut current_analysis = original_analysis.clone();
    // The deployable form of `current` (what is measured, exported and reported).
    let mut current_dep = original_dep.clone();
    // Prediction with the chosen precision ÷ without, refreshed every step.
    let mut precision_ratio = 1.0;
    let mut steps: Vec<Step> = Vec::new();
    // Predicted time each step removes; halved when no action of that size fits the budget.
    let mut step_ms = options.step_fraction * original_pred_ms;
    let mut stop_reason = String::new();
    let mut reached = false;

    let mut confirmed: Option<Measured> = None;
    let mut step = 0;
    while step < options.max_steps {
        if current_pred_ms * correction <= target_ms {
            match &mut timer {
                Some(timer) => {
                    progress(Progress::Phase("confirming the target by measurement"));
                    // Twice the usual rounds: this measurement decides, and is the final one.
                    let m = timer.measure(&current_dep, &search.ctx, 2 * timer.runs)?;
                    correction = spell_ms(&m) / current_pred_ms.max(1e-12);
                    if let Some(last) = steps.last_mut() {
                        last.measured_latency_ms = Some(spell_ms(&m));
                    }
                    // Judged as the loop's check above judges it: in the first spell.
                    let done = match options.target {
                        Target::Speedup(s) => m.speedup >= s,
                        Target::LatencyMs(ms) => spell_ms(&m) <= ms,
                    };
                    if done {
                        reached = true;
                        stop_reason = "target reached (measured)".into();
                        confirmed = Some(m);
                        break;
                    }
                }
                None => {
                    reached = true;
                    stop_reason = "target reached (predicted)".into();
                    break;
                }
            }
        }
        // Near the target, still ask for a gain worth an action.
        let wanted_ms = (current_pred_ms - step_ms)
            .max(target_ms / correction)
            .min(current_pred_ms * (1.0 - MIN_STEP_GAIN));
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut costed = 0usize;
        if options.prune {
            // Channel statistics of the current model on the calibration inputs: importance
            // from what the consumers would lose, and the means folded into their biases.
            let stats = search.activation_stats(&current)?;
            let spaces = prune::channel_spaces_with(&mut current.clone(), Some(&stats));
            let open: Vec<&prune::ChannelSpace> = spaces
                .iter()
                .filter(|s| s.frozen.is_none() && !broken.contains(&s.key))
                .collect();
            for space in open {
                let original = original_channels
                    .get(&space.key)
                    .copied()
                    .unwrap_or(space.channels);
                let floor = ((original as f64 * options.min_keep).ceil() as usize).max(1);
                let floor = floor.div_ceil(align) * align;
                let counts: Vec<usize> = (1..)
                    .map(|k| (space.channels - 1) / align * align - (k - 1) * align)
                    .take_while(|&c| c >= floor && c > 0)
                    .collect();
                let counts: Vec<usize> =
                    counts.into_iter().filter(|&c| c < space.channels).collect();
                if counts.is_empty() {
                    skip_reasons.entry(space.key.clone()).or_insert_with(|| {
                        format!("at its floor ({} of {original} channels, {}% kept at least, aligned to {align})", space.channels, (options.min_keep * 100.0).round())
                    });
                    continue;
                }
                let goal = CutGoal {
                    wanted_ms,
                    precision_ratio,
                };
                match search.best_cut(space, &stats, &current, &counts, goal, &mut costed) {
                    Ok(Some(candidate))
                        if candidate.predicted_ms < current_pred_ms * (1.0 - MIN_STEP_GAIN) =>
                    {
                        candidates.push(candidate);
                        continue;
                    }
                    Ok(_) => {}
                    // A cut this module cannot carry through (the pruned graph does not
                    // re-infer or a pass rejects it): never offered again, and said why.
                    Err(e) => {
                        broken.insert(space.key.clone());
                        skip_reasons
                            .insert(space.key.clone(), format!("not pruned: a cut fails ({e})"));
                        continue;
                    }
                }
                skip_reasons.insert(
                    space.key.clone(),
                    Search::why_no_gain(space, &current_analysis),
                );
            }
        }
        if precision.is_none() {
            for p in precisions.clone().iter() {
                let (predicted_ms, macs) = search.predict(&current, Some(p))?;
                costed += 1;
                if predicted_ms < current_pred_ms * (1.0 - MIN_STEP_GAIN) {
                    candidates.push(Candidate {
                        kind: Action::Precision(p.clone()),
                        pruned: current.clone(),
                        precision: Some(p.clone()),
                        predicted_ms,
                        importance_removed: 0.0,
                        macs,
                    });
                }
            }
        }
        if candidates.is_empty() {
            stop_reason = "no action left that the cost model predicts to gain".into();
            break;
        }
        // Cheap ranking first, twice: the cuts that remove the least importance per millisecond
        // gained and those that remove the fewest MACs per millisecond (the ops slow for their
        // MACs: memory-bound, off the kernels' tiles, or on planes the kernels run badly) are
        // run on the calibration inputs; precision actions always are.
        let gain = |c: &Candidate| (current_pred_ms - c.predicted_ms).max(1e-9);
        // Of the float graph, as the cuts' MACs are counted.
        let current_macs = search.predict(&current, None)?.1 as f64;
        let macs_removed = |c: &Candidate| ((current_macs - c.macs as f64) / current_macs).max(0.0);
        candidates.sort_by(|a, b| {
            (a.importance_removed / gain(a)).total_cmp(&(b.importance_removed / gain(b)))
        });
        let mut by_macs: Vec<(f64, usize)> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.kind, Action::Prune { .. }))
            .map(|(index, c)| (macs_removed(c) / gain(c), index))
            .collect();
        by_macs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let fewest_macs: std::collections::HashSet<usize> = by_macs
            .iter()
            .take(options.checked_per_step)
            .map(|&(_, index)| index)
            .collect();
        let mut checked: Vec<Checked> = Vec::new();
        let mut pruned_checked = 0;
        for (index, candidate) in candidates.into_iter().enumerate() {
            let is_prune = matches!(candidate.kind, Action::Prune { .. });
            if is_prune
                && pruned_checked >= options.checked_per_step
                && !fewest_macs.contains(&index)
            {
                continue;
            }
            pruned_checked += usize::from(is_prune);
            let (deployable, choices) = search.deployable(
                &candidate.pruned,
                candidate.precision.as_deref().or(precision.as_deref()),
            )?;
            let accuracy = search.score(&deployable)?;
            checked.push(Checked {
                candidate,
                deployable,
                choices,
                accuracy,
            });
        }
        let checked_count = checked.len();
        if let Some(max_drop) = options.max_drop.filter(|_| options.eval.is_none()) {
            checked.retain(|c| drop_of(&c.accuracy) <= max_drop);
        }
        // Most gain per accuracy lost and per MAC removed first. The loss is ranked on the
        // mean cosine, which moves with every cut where top-1 agreement on a few samples moves
        // in coarse steps. MACs removed are the capacity a fine-tuning has to do without, and
        // what a hardware-blind pruner pays time with: between two cuts that gain the same
        // and lose the same on the proxy, the one that removes half the MACs is worth twice as
        // much (at fp32 this ranking led the uniform pruner by 1.16-1.19 at 2x where gain per
        // accuracy alone led it by 1.09-1.13). A precision action, which removes none, is
        // ranked as if its MACs followed its time, and a cut's MAC advantage is capped
        // (`action_value`).
        let value = |c: &Checked| {
            action_value(
                gain(&c.candidate) / current_pred_ms,
                (1.0 - c.accuracy.cosine_mean).max(0.0),
                match c.candidate.kind {
                    Action::Prune { .. } => Some(macs_removed(&c.candidate)),
                    Action::Precision(_) => None,
                },
            )
        };
        checked.sort_by(|a, b| value(b).total_cmp(&value(a)));
        // With --eval, the best candidate that stays within the budget.
        let mut chosen = None;
        let mut eval_rejected = None;
        for option in checked {
            let eval = search.eval(&option.deployable)?;
            if let (Some(max_drop), Some(base), Some(now)) = (options.max_drop, original_eval, eval)
            {
                if base - now > max_drop {
                    eval_rejected = Some(now);
                    // A precision that breaks the budget now will not fit it later.
                    if let Action::Precision(p) = &option.candidate.kind {
                        precisions.retain(|q| q != p);
                    }
                    continue;
                }
            }
            chosen = Some((option, eval));
            break;
        }
        let Some((
            Checked {
                candidate: best,
                deployable: best_dep,
                choices,
                accuracy,
            },
            eval,
        )) = chosen
        else {
            // Smaller steps cut less of each space: try them before giving up.
            if step_ms / 2.0 >= MIN_STEP_GAIN * original_pred_ms {
                step_ms /= 2.0;
                continue;
            }
            let max_drop = options.max_drop.unwrap_or(0.0);
            stop_reason = match (eval_rejected, original_eval) {
                (Some(now), Some(base)) => format!(
                    "accuracy budget spent: the smallest next actions give --eval {now} against {base} (drop > {max_drop})"
                ),
                _ => format!(
                    "accuracy budget spent: every next action drops the proxy by more than {max_drop}"
                ),
            };
            break;
        };
        step += 1;
        let action = match &best.kind {
            Action::Prune { space, from, keep } => {
                let original_keep = kept
                    .get(space)
                    .cloned()
                    .unwrap_or_else(|| (0..*from).collect());
                kept.insert(
                    space.clone(),
                    keep.iter().map(|&k| original_keep[k]).collect(),
                );
                format!("prune {space}: {from} -> {} channels", keep.len())
            }
            Action::Precision(p) => {
                precision = Some(p.clone());
                format!("{p} on {} op(s) the roofline picks", choices.len())
            }
        };
        // The ops the chosen precision converted in the model as it now stands.
        if precision.is_some() {
            precision_choices = choices;
        }
        current = best.pruned;
        let analysis = search.analyse(&best_dep)?;
        current_pred_ms = search.in_context_ms(&analysis);
        let macs = analysis.summary.macs;
        current_analysis = analysis;
        // The prediction as the search believes it before this step is measured.
        let corrected_ms = current_pred_ms * correction;
        let mut measured_ms = None;
        if step % options.measure_every.max(1) == 0 {
            if let Some(timer) = &mut timer {
                let m = search.measure_and_learn(timer, &best_dep, &current_analysis)?;
                // This model's own per-op times from now on: its prediction is read again
                // with them before the correction is taken against it.
                current_pred_ms = search.in_context_ms(&current_analysis);
                correction = spell_ms(&m) / current_pred_ms.max(1e-12);
                measured_ms = Some(spell_ms(&m));
            }
        }
        if precision.is_some() {
            let float_ms = search.predict_ms(&current, None)?;
            precision_ratio = current_pred_ms / float_ms.max(1e-12);
        }
        progress(Progress::Step {
            step,
            latency_ms: current_pred_ms * correction,
            target_ms,
            action: &action,
        });
        current_dep = best_dep;
        steps.push(Step {
            step,
            action,
            predicted_latency_ms: latency_ms(&current_analysis),
            corrected_latency_ms: corrected_ms,
            measured_latency_ms: measured_ms,
            macs,
            accuracy,
            eval,
            candidates_costed: costed,
            candidates_checked: checked_count,
        });
    }
    if stop_reason.is_empty() {
        stop_reason = format!("step limit ({}) reached", options.max_steps);
    }

    // The final model is the last step's (or the original): its graph, analysis and accuracy.
    let final_dep = current_dep;
    let final_analysis = current_analysis;
    let final_accuracy = match steps.last() {
        Some(step) => step.accuracy.clone(),
        None => search.score(&final_dep)?,
    };
    // The last applied step evaluated this very model already (the original when none was).
    let final_eval = match steps.last() {
        Some(step) => step.eval,
        None => original_eval,
    };
    let final_measured = match (&mut timer, confirmed) {
        (_, Some(confirmed)) => Some(confirmed),
        (Some(timer), None) => {
            progress(Progress::Phase("measuring the compressed model"));
            let rounds = 2 * timer.runs;
            Some(timer.measure(&final_dep, &search.ctx, rounds)?)
        }
        (None, None) => None,
    };
    // What the search predicted for the final model before measuring it: its prediction scaled
    // by the measured/predicted ratio of the last model measured before it (both in the first
    // measurement's spell).
    let final_corrected_ms = match steps.last() {
        Some(last) => last.corrected_latency_ms,
        None => original_meas_ms.unwrap_or(original_pred_ms),
    };
    let predicted_speedup =
        original_meas_ms.unwrap_or(original_pred_ms) / final_corrected_ms.max(1e-12);
    let uncorrected_speedup = original_pred_ms / latency_ms(&final_analysis).max(1e-12);
    let measured_speedup = final_measured.as_ref().map(|m| m.speedup);
    // The step limit can fall on the step that meets the target: judge the final model itself.
    if !reached && stop_reason.starts_with("step limit") {
        reached = match (&final_measured, options.target) {
            (Some(m), Target::Speedup(s)) => m.speedup >= s,
            (Some(m), Target::LatencyMs(ms)) => spell_ms(m) <= ms,
            (None, _) => latency_ms(&final_analysis) <= target_ms,
        };
        if reached {
            stop_reason = format!("target reached at the step limit ({})", options.max_steps);
        }
    }

    let mut baselines = Vec::new();
    let mut baseline_graphs = Vec::new();
    if options.compare_baselines {
        progress(Progress::Phase("measuring the baselines"));
        let pruned_macs = search
            .analyse(&search.deployable(&current, None)?.0)?
            .summary
            .macs;
        for (baseline, deployable) in search.baselines(
            &graph,
            &original_analysis,
            pruned_macs,
            &precisions,
            &final_dep,
            timer.as_mut(),
        )? {
            if options.keep_baseline_graphs {
                baseline_graphs.push((baseline.name.clone(), deployable));
            }
            baselines.push(baseline);
        }
    }

    let layers = original_spaces
        .iter()
        .map(|space| {
            let kept_count = kept.get(&space.key).map_or(space.channels, Vec::len);
            let reason = match (&space.frozen, kept_count < space.channels) {
                (Some(frozen), _) => format!("not prunable: {frozen}"),
                (None, true) => format!(
                    "pruned to {kept_count} of {} channels ({:.0}% kept): the least important removed (importance measured on the calibration inputs where the consumers were observed, else filter norms; removed means folded into the consumers' biases where they have one)",
                    space.channels,
                    100.0 * kept_count as f64 / space.channels as f64
                ),
                (None, false) if !options.prune => "not pruned (--no-prune)".to_string(),
                (None, false) => skip_reasons.get(&space.key).cloned().unwrap_or_else(|| {
                    "kept: other layers bought more predicted time per accuracy lost and per MAC removed".into()
                }),
            };
            LayerDecision {
                space: space.key.clone(),
                sources: space.sources.clone(),
                channels: space.channels,
                kept: kept_count,
                reason,
            }
        })
        .collect();
    let pareto = pareto_front(&steps);
    let mut notes = early_notes;
    notes.extend([
        "fine-tuning is out of scope: the pruned model is exported as is; apply the pruning plan (kept channel indices per space) in your training framework and fine-tune to recover accuracy".to_string(),
    ]);
    if options.advise.calibration_dir.is_none() && options.eval.is_none() {
        notes.push("the accuracy proxy ran on random inputs: it measures agreement with the original model's outputs, which says little about a trained model's accuracy on real data (pass --calibration DIR or --eval CMD)".into());
    }
    if !local {
        notes.push(format!(
            "device `{}` is not this machine: latencies are predicted only, nothing was measured",
            device.id
        ));
    }
    let report = CompressReport {
        schema: COMPRESS_SCHEMA.into(),
        schema_version: COMPRESS_SCHEMA_VERSION,
        model: source.to_string(),
        device: device.id.clone(),
        target: match options.target {
            Target::Speedup(s) => format!("speed-up {s:.2}x"),
            Target::LatencyMs(ms) => format!("latency {ms:.3} ms"),
        },
        target_latency_ms: target_ms,
        measured: local,
        threads: options.advise.threads.max(1),
        predictor,
        channel_alignment: align,
        alignment_reason,
        accuracy_source: match (&options.eval, &options.advise.calibration_dir) {
            (Some(cmd), _) => {
                format!("--eval `{cmd}` (proxy on the calibration inputs for ranking)")
            }
            (None, Some(dir)) => format!(
                "agreement with the original's outputs on {} input(s) from {}",
                search.proxy.inputs.len(),
                dir.display()
            ),
            (None, None) => format!(
                "agreement with the original's outputs on {} random input(s)",
                search.proxy.inputs.len()
            ),
        },
        reached,
        stop_reason,
        original: point(&original_analysis, original_meas_ms, None, original_eval),
        compressed: point(
            &final_analysis,
            final_measured.as_ref().map(spell_ms),
            Some(final_accuracy),
            final_eval,
        ),
        predicted_speedup,
        uncorrected_speedup,
        measured_speedup,
        prediction_error: measured_speedup.map(|m| (predicted_speedup - m) / m),
        steps,
        pareto,
        layers,
        precision: precision_choices.clone(),
        baselines,
        notes,
        search_s: started.elapsed().as_secs_f64(),
        before: original_analysis,
        after: final_analysis,
    };
    let plan = PrunePlan {
        schema: PRUNE_PLAN_SCHEMA.into(),
        model: source.to_string(),
        spaces: original_spaces
            .iter()
            .filter_map(|s| {
                let keep = kept.get(&s.key)?;
                (keep.len() < s.channels).then(|| PlannedSpace {
                    space: s.key.clone(),
                    sources: s.sources.clone(),
                    channels: s.channels,
                    keep: keep.clone(),
                })
            })
            .collect(),
        precision: precision_choices,
        note: "keep: indices of the output channels kept in the original model; every node that reads these channels loses the same input channels. The exported model also folds each removed channel's mean activation (on the calibration inputs) into the biases of the convolutions and Gemms that read it".into(),
    };
    Ok(Compressed {
        report,
        graph: final_dep,
        plan,
        baselines: baseline_graphs,
    })
}

/// Steps no other step beats on both latency (corrected prediction) and accuracy proxy.
fn pareto_front(steps: &[Step]) -> Vec<usize> {
    let accuracy = |s: &Step| 1.0 - drop_of(&s.accuracy);
    (0..steps.len())
        .filter(|&i| {
            !steps.iter().enumerate().any(|(j, other)| {
                j != i
                    && other.corrected_latency_ms <= steps[i].corrected_latency_ms
                    && accuracy(other) >= accuracy(&steps[i])
                    && (other.corrected_latency_ms < steps[i].corrected_latency_ms
                        || accuracy(other) > accuracy(&steps[i]))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
