//! The search's machinery: the deployable graph of a candidate, its prediction, its accuracy
//! on the calibration inputs, `--eval`, the channel statistics, the interleaved timer, the
//! aligned cut of one space, and the hardware-blind baselines.

use std::collections::HashMap;

use super::{CompressOptions, FLOAT_PASSES, MIN_STEP_GAIN};
use crate::advisor::prune::{self, ActivationStats, ChannelSpace, SpaceCut};
use crate::advisor::quantize::{plan_of, OutputComparison};
use crate::advisor::{apply_pass, median, timed_run, AdvisorError, Pass, PassContext};
use crate::analysis::graph::Graph;
use crate::analysis::{self, Analysis, Bound, Prepared};
use crate::device::DeviceProfile;
use crate::exec::{self, RtTensor};
use crate::report::model::compress::{Baseline, Point, PrecisionChoice};
use crate::report::model::quant::AccuracyProxy;

/// The proxy's reference: the original deployable graph's outputs on the calibration inputs.
pub(super) struct Proxy {
    pub(super) inputs: Vec<HashMap<String, RtTensor>>,
    pub(super) reference: Vec<Vec<(String, RtTensor)>>,
}

/// Interleaved timing against the original (kept planned for the whole search).
pub(super) struct Timer {
    pub(super) plan: exec::Plan,
    pub(super) workspace: exec::Workspace,
    pub(super) inputs: HashMap<String, RtTensor>,
    pub(super) runs: usize,
}

pub(super) struct Measured {
    pub(super) original_ms: f64,
    pub(super) candidate_ms: f64,
    pub(super) speedup: f64,
}

impl Timer {
    pub(super) fn measure(
        &mut self,
        graph: &Graph,
        ctx: &PassContext,
        rounds: usize,
    ) -> Result<Measured, AdvisorError> {
        Ok(self.measure_beside(graph, None, ctx, rounds)?.0)
    }

    /// [`Timer::measure`] of `graph`, with `beside` (planned once, the compressed model)
    /// run in the same rounds: returns also the median over rounds of `graph`'s time ÷
    /// `beside`'s. Each round runs every plan once, in an order that rotates, so a slow spell
    /// of a shared host falls on all of them alike.
    pub(super) fn measure_beside(
        &mut self,
        graph: &Graph,
        beside: Option<&exec::Plan>,
        ctx: &PassContext,
        rounds: usize,
    ) -> Result<(Measured, Option<f64>), AdvisorError> {
        let plan = plan_of(graph, ctx.analyze, ctx.options.threads)?;
        self.measure_plan_beside(&plan, beside, rounds)
    }

    /// [`Timer::measure`], and then the time of each of `graph`'s ops in the same plan: the
    /// fastest of the timer's runs (at least 3) per op, by node index (the position in the
    /// topological order, as in `graph`'s analysis).
    pub(super) fn measure_profiled(
        &mut self,
        graph: &Graph,
        ctx: &PassContext,
        rounds: usize,
    ) -> Result<(Measured, NodeTimes), AdvisorError> {
        let plan = plan_of(graph, ctx.analyze, ctx.options.threads)?;
        let measured = self.measure_plan_beside(&plan, None, rounds)?.0;
        let mut workspace = plan.workspace();
        let steps = plan.steps();
        let mut fastest = vec![f64::INFINITY; steps.len()];
        let mut timings = exec::RunTimings::default();
        // The untimed run first, as in `timed_run`.
        plan.execute(&mut workspace, &self.inputs, None)?;
        for _ in 0..self.runs.max(1) {
            plan.execute(&mut workspace, &self.inputs, Some(&mut timings))?;
            for (best, &seconds) in fastest.iter_mut().zip(&timings.step_seconds) {
                *best = best.min(seconds);
            }
        }
        let mut node_times = NodeTimes::new();
        for (step, seconds) in steps.into_iter().zip(fastest) {
            // A node split over several steps counts all of them.
            *node_times.entry(step.node_index).or_insert(0.0) += seconds;
        }
        Ok((measured, node_times))
    }

    fn measure_plan_beside(
        &mut self,
        plan: &exec::Plan,
        beside: Option<&exec::Plan>,
        rounds: usize,
    ) -> Result<(Measured, Option<f64>), AdvisorError> {
        let mut workspace = plan.workspace();
        let mut beside_run = beside.map(|p| (p, p.workspace()));
        let versions = if beside_run.is_some() { 3 } else { 2 };
        let (mut original, mut candidate, mut ratios, mut lead_ratios) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            let (mut original_ms, mut candidate_ms, mut beside_ms) = (0.0, 0.0, 0.0);
            for turn in 0..versions {
                match (round + turn) % versions {
                    0 => original_ms = timed_run(&self.plan, &mut self.workspace, &self.inputs)?,
                    1 => candidate_ms = timed_run(plan, &mut workspace, &self.inputs)?,
                    _ => {
                        if let Some((beside_plan, beside_workspace)) = beside_run.as_mut() {
                            beside_ms = timed_run(beside_plan, beside_workspace, &self.inputs)?;
                        }
                    }
                }
            }
            original.push(original_ms);
            candidate.push(candidate_ms);
            ratios.push(original_ms / candidate_ms.max(1e-12));
            if beside_run.is_some() {
                lead_ratios.push(candidate_ms / beside_ms.max(1e-12));
            }
        }
        let measured = Measured {
            original_ms: median(original),
            candidate_ms: median(candidate),
            speedup: median(ratios),
        };
        Ok((measured, beside_run.map(|_| median(lead_ratios))))
    }
}

/// Seconds per op of a profiled run, by (node name, op type).
pub(super) type OpTimes = HashMap<(String, String), f64>;

/// Seconds per op of a profiled run, by node index.
pub(super) type NodeTimes = HashMap<usize, f64>;

pub(super) struct Search<'a> {
    /// Each op's measured ÷ expected time in the last profiled model that had it, relative to
    /// that model's whole ([`op_factors`], [`merge_factors`]; an op that model had but gave
    /// no factor, under the share one needs, has none): the in-context spread of this
    /// machine's per-op times that the calibration grid, timed one op at a time, does not see.
    /// Empty off the local device and with `--no-op-feedback`. Keyed by op type too, so a
    /// float op's factor is not applied to its int8 or bf16 replacement (another kernel) nor
    /// the reverse.
    pub(super) op_factors: HashMap<(String, String), f64>,
    pub(super) source: &'a str,
    pub(super) device: &'a DeviceProfile,
    pub(super) ctx: PassContext<'a>,
    pub(super) options: &'a CompressOptions,
    pub(super) passes: Vec<Box<dyn Pass>>,
    pub(super) proxy: Proxy,
}

/// A candidate action with its predicted effect.
pub(super) struct Candidate {
    pub(super) kind: Action,
    /// The pruned graph (before the float passes) after the action.
    pub(super) pruned: Graph,
    pub(super) precision: Option<String>,
    pub(super) predicted_ms: f64,
    /// Share of the space's importance the cut removes (0 for precision actions).
    pub(super) importance_removed: f64,
    /// MACs of the candidate's deployable graph.
    pub(super) macs: u64,
}

/// What a cut aims at: the predicted latency to reach, and the factor that carries a float
/// prediction to the chosen precision's.
#[derive(Clone, Copy)]
pub(super) struct CutGoal {
    pub(super) wanted_ms: f64,
    pub(super) precision_ratio: f64,
}

#[derive(Clone, Debug)]
pub(super) enum Action {
    Prune {
        space: String,
        from: usize,
        keep: Vec<usize>,
    },
    Precision(String),
}

impl Search<'_> {
    pub(super) fn pass(&self, name: &str) -> &dyn Pass {
        self.passes
            .iter()
            .find(|p| p.name() == name)
            .map(|p| p.as_ref())
            .expect("pass exists")
    }

    /// The graph as it would be deployed: float passes, then the precision pass.
    pub(super) fn deployable(
        &self,
        pruned: &Graph,
        precision: Option<&str>,
    ) -> Result<(Graph, Vec<PrecisionChoice>), AdvisorError> {
        let (prepared, choices) = self.deployable_prepared(pruned, precision)?;
        Ok((prepared.graph, choices))
    }

    /// `deployable`, inferred: the search predicts each candidate from this without
    /// re-inferring it.
    fn deployable_prepared(
        &self,
        pruned: &Graph,
        precision: Option<&str>,
    ) -> Result<(Prepared, Vec<PrecisionChoice>), AdvisorError> {
        let mut prepared = Prepared::new(pruned.clone(), &self.ctx.analyze.bindings)?;
        for name in FLOAT_PASSES {
            prepared = apply_pass(&prepared, self.pass(name), &self.ctx)?.0;
        }
        let mut choices = Vec::new();
        if let Some(precision) = precision {
            let output;
            (prepared, output) = apply_pass(&prepared, self.pass(precision), &self.ctx)?;
            choices = output
                .decisions
                .into_iter()
                .filter(|d| d.decision != "fp32")
                .map(|d| PrecisionChoice {
                    node: d.node,
                    precision: d.decision,
                    reason: d.reason,
                })
                .collect();
        }
        Ok((prepared, choices))
    }

    pub(super) fn analyse(&self, deployable: &Graph) -> Result<Analysis, AdvisorError> {
        Ok(analysis::analyze_graph(
            deployable.clone(),
            self.source,
            self.device,
            self.ctx.analyze,
        )?)
    }

    pub(super) fn predict_ms(
        &self,
        pruned: &Graph,
        precision: Option<&str>,
    ) -> Result<f64, AdvisorError> {
        Ok(self.predict(pruned, precision)?.0)
    }

    /// Predicted latency (ms) and MACs of `pruned` as deployed.
    pub(super) fn predict(
        &self,
        pruned: &Graph,
        precision: Option<&str>,
    ) -> Result<(f64, u64), AdvisorError> {
        let (prepared, _) = self.deployable_prepared(pruned, precision)?;
        let analysis =
            analysis::analyze_prepared(&prepared, self.source, self.device, self.ctx.analyze)?;
        Ok((self.in_context_ms(&analysis), analysis.summary.macs))
    }

    /// The search's prediction of an analysed candidate: [`latency_ms`] with each op's expected
    /// time scaled by its factor from the profiles (`op_factors`; ops without one as
    /// predicted). Equal to `latency_ms` for the model profiled, up to the factors' clamp.
    pub(super) fn in_context_ms(&self, analysis: &Analysis) -> f64 {
        in_context_ms(analysis, &self.op_factors)
    }

    /// Measures `deployable` (whose analysis is `analysis`) beside the original and, with
    /// `op_feedback` on, profiles it op by op and takes its per-op factors from then on.
    pub(super) fn measure_and_learn(
        &mut self,
        timer: &mut Timer,
        deployable: &Graph,
        analysis: &Analysis,
    ) -> Result<Measured, AdvisorError> {
        if !self.options.op_feedback {
            return timer.measure(deployable, &self.ctx, timer.runs);
        }
        let (measured, node_times) = timer.measure_profiled(deployable, &self.ctx, timer.runs)?;
        let fresh = profile_factors(analysis, &node_times);
        merge_factors(&mut self.op_factors, analysis, fresh);
        Ok(measured)
    }

    pub(super) fn score(&self, deployable: &Graph) -> Result<AccuracyProxy, AdvisorError> {
        let plan = plan_of(deployable, self.ctx.analyze, self.ctx.options.threads)?;
        let mut workspace = plan.workspace();
        let mut comparison = OutputComparison::default();
        for (sample, reference) in self.proxy.inputs.iter().zip(&self.proxy.reference) {
            let outputs = plan.run(&mut workspace, sample, None)?;
            comparison.add(reference, &outputs)?;
        }
        Ok(comparison.finish())
    }

    /// Per-channel moments of the activations the prunable spaces' consumers read, over the
    /// calibration inputs.
    pub(super) fn activation_stats(&self, pruned: &Graph) -> Result<ActivationStats, AdvisorError> {
        let mut probe = pruned.clone();
        let spaces = prune::channel_structure(&mut probe.clone());
        for value in prune::observed_values(&spaces) {
            if !probe.outputs.contains(&value) {
                probe.outputs.push(value);
            }
        }
        let plan = plan_of(&probe, self.ctx.analyze, self.ctx.options.threads)?;
        let mut workspace = plan.workspace();
        let mut stats = ActivationStats::default();
        for sample in &self.proxy.inputs {
            for (name, tensor) in plan.run(&mut workspace, sample, None)? {
                if let Some(data) = tensor.as_f32() {
                    stats.observe(&name, &tensor.shape, data);
                }
            }
        }
        Ok(stats)
    }

    pub(super) fn eval(&self, deployable: &Graph) -> Result<Option<f64>, AdvisorError> {
        let Some(command) = &self.options.eval else {
            return Ok(None);
        };
        run_eval(command, deployable).map(Some)
    }
}

/// The figure the search predicts with: calibrated expected time where the analysis has one.
pub(super) fn latency_ms(analysis: &Analysis) -> f64 {
    analysis
        .summary
        .expected_latency_s
        .unwrap_or(analysis.summary.predicted_latency_s)
        * 1e3
}

/// [`latency_ms`] with each op's expected time scaled by its factor in `factors` (ops without
/// one as predicted).
pub(super) fn in_context_ms(analysis: &Analysis, factors: &HashMap<(String, String), f64>) -> f64 {
    let shift_s: f64 = analysis
        .nodes
        .iter()
        .filter_map(|node| {
            let key = (node.name.clone(), node.op_type.clone());
            Some(node.expected_s? * (factors.get(&key)? - 1.0))
        })
        .sum();
    latency_ms(analysis) + shift_s * 1e3
}

/// Takes a new profile's factors (`fresh`, of `analysis`'s model) into `factors`: every op
/// the profiled model has takes its new factor or, without one, loses its old one; the
/// factors of ops it lacks stay. Those are mostly the float kernels of layers the model now
/// runs in int8 (a key is a name and an op type): the search predicts its cuts on the float
/// graph once a precision is chosen, and with the float factors gone after the first int8
/// profile those layers went back to their calibrated times.
pub(super) fn merge_factors(
    factors: &mut HashMap<(String, String), f64>,
    analysis: &Analysis,
    fresh: HashMap<(String, String), f64>,
) {
    let profiled: std::collections::HashSet<(&str, &str)> = analysis
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.op_type.as_str()))
        .collect();
    factors.retain(|(name, op_type), _| !profiled.contains(&(name.as_str(), op_type.as_str())));
    factors.extend(fresh);
}

/// The per-op factors of a profile (`node_times`, by node index) of `analysis`'s model, by
/// (node name, op type); a key that more than one node carries keeps none.
pub(super) fn profile_factors(
    analysis: &Analysis,
    node_times: &NodeTimes,
) -> HashMap<(String, String), f64> {
    let key = |n: &crate::analysis::NodeAnalysis| (n.name.clone(), n.op_type.clone());
    let mut carriers: HashMap<(String, String), usize> = HashMap::new();
    for node in &analysis.nodes {
        *carriers.entry(key(node)).or_insert(0) += 1;
    }
    let unique = |n: &crate::analysis::NodeAnalysis| carriers.get(&key(n)) == Some(&1);
    let expected: Vec<((String, String), f64)> = analysis
        .nodes
        .iter()
        .filter(|n| unique(n))
        .filter_map(|n| Some((key(n), n.expected_s?)))
        .collect();
    let measured: OpTimes = analysis
        .nodes
        .iter()
        .filter(|n| unique(n))
        .filter_map(|n| Some((key(n), *node_times.get(&n.index)?)))
        .collect();
    op_factors(&expected, &measured)
}

/// Ops under this share of the profiled model's expected time keep no factor: the per-step
/// clock and a moment of the host's noise are a large part of a short op's measured time.
pub(super) const MIN_FACTOR_SHARE: f64 = 0.002;

/// Range of a per-op factor: a profile taken while one op met a slow moment of the host
/// should not make that op look free or prohibitive to every later step.
pub(super) const OP_FACTOR_RANGE: (f64, f64) = (0.5, 2.0);

/// Each op's measured ÷ expected time over the whole model's measured ÷ expected (both over
/// the ops counted): 1 for an op that takes its predicted share of the model. Summed over the
/// profiled model, expected × factor gives back the expected total (before the clamp), so the
/// factors move time between ops and the measured correction keeps the model's level.
pub(super) fn op_factors(
    expected: &[((String, String), f64)],
    measured: &OpTimes,
) -> HashMap<(String, String), f64> {
    let total_expected: f64 = expected.iter().map(|(_, e)| e).sum();
    let counted: Vec<(&(String, String), f64, f64)> = expected
        .iter()
        .filter(|(_, e)| *e >= MIN_FACTOR_SHARE * total_expected && *e > 0.0)
        .filter_map(|(key, e)| {
            let m = *measured.get(key)?;
            (m.is_finite() && m > 0.0).then_some((key, *e, m))
        })
        .collect();
    let expected_sum: f64 = counted.iter().map(|(_, e, _)| e).sum();
    let measured_sum: f64 = counted.iter().map(|(_, _, m)| m).sum();
    if counted.is_empty() || expected_sum <= 0.0 || measured_sum <= 0.0 {
        return HashMap::new();
    }
    let level = measured_sum / expected_sum;
    counted
        .into_iter()
        .map(|(key, e, m)| {
            let factor = (m / e / level).clamp(OP_FACTOR_RANGE.0, OP_FACTOR_RANGE.1);
            (key.clone(), factor)
        })
        .collect()
}

/// Most a cut's MACs may count in its favour: a cut that removes a quarter of the MACs an
/// average one would for its gain is worth four times as much, and one that removes fewer is
/// worth no more (a near-zero MAC share would otherwise outweigh any accuracy lost).
pub(super) const MAX_MAC_ADVANTAGE: f64 = 4.0;

/// A checked action's worth: its gain (share of the current latency) per accuracy lost (1 −
/// mean cosine) and per MAC removed (share of the current MACs; `None` for a precision
/// action, which removes none and counts as removing them in proportion to its gain, so that
/// between precisions and cuts whose time follows their MACs the rule is gain per accuracy
/// lost). The gain counts twice so that the value stays a gain per cost on each axis.
pub(super) fn action_value(gain_share: f64, accuracy_loss: f64, macs_removed: Option<f64>) -> f64 {
    let gain_share = gain_share.max(0.0);
    let mac_cost = match macs_removed {
        Some(removed) => removed.max(gain_share / MAX_MAC_ADVANTAGE),
        None => gain_share,
    };
    gain_share * gain_share / ((accuracy_loss.max(0.0) + 1e-4) * (mac_cost + 1e-9))
}

/// A candidate's measured time carried to the spell of the original's first measurement
/// (`first_original_ms`): divided by the speed-up measured beside the original in the same
/// rounds. Without a first measurement, the candidate's own rounds are the reference.
pub(super) fn in_first_spell(first_original_ms: Option<f64>, measured: &Measured) -> f64 {
    first_original_ms.unwrap_or(measured.original_ms) / measured.speedup.max(1e-12)
}

/// The accuracy drop the budget counts: of the classifier agreement where outputs look like
/// classes, else of the mean cosine.
pub(super) fn drop_of(accuracy: &AccuracyProxy) -> f64 {
    1.0 - accuracy.top1_agreement.unwrap_or(accuracy.cosine_mean)
}

/// Runs the user's accuracy command on a candidate written to a temporary ONNX file (removed
/// afterwards).
pub(super) fn run_eval(command: &str, deployable: &Graph) -> Result<f64, AdvisorError> {
    let fail = |reason: String| AdvisorError::Quantization(format!("--eval: {reason}"));
    let proto = crate::advisor::export::to_model(deployable).map_err(|e| fail(e.to_string()))?;
    let dir = std::env::temp_dir().join(format!("roofline-compress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    let path = dir.join("candidate.onnx");
    let result = std::fs::write(&path, prost::Message::encode_to_vec(&proto))
        .map_err(|e| fail(format!("{}: {e}", path.display())))
        .and_then(|()| {
            // The path single-quoted for `sh` (a quote inside closes, escapes and reopens).
            let quoted = format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"));
            let line = command.replace("{model}", &quoted);
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(&line)
                .output()
                .map_err(|e| fail(format!("cannot run `{line}`: {e}")))?;
            if !output.status.success() {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let last = stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                return Err(fail(format!(
                    "`{line}` exited with {}: {last}",
                    output.status
                )));
            }
            let text = String::from_utf8_lossy(&output.stdout);
            text.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == ':')
                .rev()
                .find_map(|word| word.trim_end_matches('%').parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| fail(format!("`{line}` printed no number")))
        });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

pub(super) fn point(
    analysis: &Analysis,
    measured_ms: Option<f64>,
    accuracy: Option<AccuracyProxy>,
    eval: Option<f64>,
) -> Point {
    Point {
        predicted_latency_ms: latency_ms(analysis),
        measured_latency_ms: measured_ms,
        macs: analysis.summary.macs,
        params: analysis.summary.params,
        accuracy,
        eval,
    }
}

pub(super) fn bound_name(bound: Bound) -> &'static str {
    match bound {
        Bound::Compute => "compute",
        Bound::Memory => "memory",
        Bound::Overhead => "overhead",
        Bound::None => "no",
    }
}

impl Search<'_> {
    /// The smallest aligned cut of `space` whose predicted latency reaches `wanted_ms` (or the
    /// deepest cut when none does), by binary search over `counts` (descending).
    pub(super) fn best_cut(
        &self,
        space: &ChannelSpace,
        stats: &ActivationStats,
        current: &Graph,
        counts: &[usize],
        goal: CutGoal,
        costed: &mut usize,
    ) -> Result<Option<Candidate>, AdvisorError> {
        let CutGoal {
            wanted_ms,
            precision_ratio,
        } = goal;
        let total: f64 = space.importance.iter().sum::<f64>().max(1e-12);
        let evaluate = |count: usize, costed: &mut usize| -> Result<Candidate, AdvisorError> {
            let keep = prune::keep_most_important(space, count);
            let mut pruned = current.clone();
            prune::prune_with(
                &mut pruned,
                &[SpaceCut {
                    space: space.key.clone(),
                    keep: keep.clone(),
                }],
                Some(stats),
            )
            .map_err(|e| AdvisorError::Quantization(e.to_string()))?;
            *costed += 1;
            let (float_ms, macs) = self.predict(&pruned, None)?;
            let predicted_ms = float_ms * precision_ratio;
            let kept_importance: f64 = keep.iter().map(|&k| space.importance[k]).sum();
            Ok(Candidate {
                kind: Action::Prune {
                    space: space.key.clone(),
                    from: space.channels,
                    keep,
                },
                pruned,
                precision: None,
                predicted_ms,
                importance_removed: 1.0 - kept_importance / total,
                macs,
            })
        };
        // counts[0] is the shallowest cut, counts[last] the deepest.
        let deepest = evaluate(*counts.last().expect("non-empty"), costed)?;
        if deepest.predicted_ms > wanted_ms || counts.len() == 1 {
            return Ok(Some(deepest));
        }
        let (mut lo, mut hi) = (0usize, counts.len() - 1);
        let mut best = deepest;
        // Invariant: counts[hi] reaches the wanted latency.
        while lo < hi {
            let mid = (lo + hi) / 2;
            let candidate = evaluate(counts[mid], costed)?;
            if candidate.predicted_ms <= wanted_ms {
                best = candidate;
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(Some(best))
    }

    /// Why no cut of `space` buys time: the bound of the ops that read or write its channels.
    pub(super) fn why_no_gain(space: &ChannelSpace, analysis: &Analysis) -> String {
        let mut bounds: Vec<&str> = analysis
            .nodes
            .iter()
            .filter(|n| space.sources.contains(&n.name))
            .map(|n| bound_name(n.bound))
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        format!(
            "no aligned cut predicted to gain {:.1}% or more: its producing ops are {}-bound here ({} of them)",
            MIN_STEP_GAIN * 100.0,
            if bounds.is_empty() { "of unknown".to_string() } else { bounds.join("/") },
            space.sources.len()
        )
    }

    /// Hardware-blind baselines: uniform magnitude pruning of every prunable space at the same
    /// MAC reduction (channel counts unaligned), and every heavy op in each allowed precision.
    /// Each is returned with its deployable graph. Measured (with a timer), each runs in the
    /// same rounds as the original and `compressed` (the search's result), so the compressed
    /// model's lead over it is a ratio of runs side by side, not of two speed-ups measured
    /// minutes apart on a host whose speed moves.
    pub(super) fn baselines(
        &self,
        original: &Graph,
        original_analysis: &Analysis,
        pruned_macs: u64,
        precisions: &[String],
        compressed: &Graph,
        timer: Option<&mut Timer>,
    ) -> Result<Vec<(Baseline, Graph)>, AdvisorError> {
        let mut out = Vec::new();
        // The compressed model, planned once, runs in every baseline's rounds.
        let mut measure = match timer {
            Some(timer) => Some((
                timer,
                plan_of(compressed, self.ctx.analyze, self.ctx.options.threads)?,
            )),
            None => None,
        };
        let original_pred = latency_ms(original_analysis);
        if self.options.prune && pruned_macs < original_analysis.summary.macs {
            // Fraction of channels kept in every space so that MACs match (bisection).
            let uniform = |fraction: f64| -> Result<(Graph, u64), AdvisorError> {
                let mut graph = original.clone();
                let spaces = prune::channel_spaces(&mut graph.clone());
                let plan: Vec<SpaceCut> = spaces
                    .iter()
                    .filter(|s| s.frozen.is_none())
                    .map(|s| SpaceCut {
                        space: s.key.clone(),
                        keep: prune::keep_most_important(
                            s,
                            ((s.channels as f64 * fraction).round() as usize).max(1),
                        ),
                    })
                    .collect();
                prune::prune(&mut graph, &plan)
                    .map_err(|e| AdvisorError::Quantization(e.to_string()))?;
                let (dep, _) = self.deployable(&graph, None)?;
                let macs = self.analyse(&dep)?.summary.macs;
                Ok((dep, macs))
            };
            let (mut lo, mut hi) = (0.05f64, 1.0f64);
            for _ in 0..14 {
                let mid = 0.5 * (lo + hi);
                if uniform(mid)?.1 > pruned_macs {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            let (dep, _) = uniform(0.5 * (lo + hi))?;
            out.push(self.baseline(
                super::UNIFORM_BASELINE.into(),
                format!("every prunable space keeps {:.1}% of its channels (smallest filter norms removed, counts unaligned), at the compressed model's MAC count", 50.0 * (lo + hi)),
                dep,
                original_pred,
                measure.as_mut().map(|(timer, plan)| (&mut **timer, &*plan)),
            )?);
        }
        for precision in precisions {
            let mut blind = self.options.advise.clone();
            blind.convert_all = true;
            let ctx = PassContext {
                device: self.ctx.device,
                analyze: self.ctx.analyze,
                options: &blind,
                calibration: Default::default(),
            };
            let float = self.deployable_prepared(original, None)?.0;
            let dep = apply_pass(&float, self.pass(precision), &ctx)?.0.graph;
            out.push(self.baseline(
                super::precision_baseline(precision),
                format!("every Conv/Gemm/MatMul in {precision}, no pruning, whatever the roofline predicts"),
                dep,
                original_pred,
                measure.as_mut().map(|(timer, plan)| (&mut **timer, &*plan)),
            )?);
        }
        Ok(out)
    }

    /// One baseline, measured (with the timer and the compressed model's plan) in rounds
    /// that also run the original and the compressed model.
    pub(super) fn baseline(
        &self,
        name: String,
        description: String,
        deployable: Graph,
        original_pred: f64,
        measure: Option<(&mut Timer, &exec::Plan)>,
    ) -> Result<(Baseline, Graph), AdvisorError> {
        let analysis = self.analyse(&deployable)?;
        let accuracy = self.score(&deployable)?;
        let eval = self.eval(&deployable)?;
        let (measured, lead) = match measure {
            Some((timer, compressed)) => {
                // As many rounds as the compressed model's final measurement (this ratio is
                // the comparison the baseline exists for), rounded up so that each of the
                // three versions runs first equally often.
                let rounds = (2 * timer.runs).div_ceil(3) * 3;
                let (m, lead) =
                    timer.measure_beside(&deployable, Some(compressed), &self.ctx, rounds)?;
                (Some(m), lead)
            }
            None => (None, None),
        };
        let baseline = Baseline {
            name,
            description,
            predicted_speedup: original_pred / latency_ms(&analysis).max(1e-12),
            measured_speedup: measured.as_ref().map(|m| m.speedup),
            compressed_lead: lead,
            point: point(
                &analysis,
                measured.map(|m| m.candidate_ms),
                Some(accuracy),
                eval,
            ),
        };
        Ok((baseline, deployable))
    }
}
