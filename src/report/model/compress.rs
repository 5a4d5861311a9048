//! The report of `roofline compress` (schema `roofline-compress`) and the pruning plan written
//! next to the compressed model (schema `roofline-prune-plan`).

use serde::{Deserialize, Serialize};

use super::quant::AccuracyProxy;
use crate::analysis::Analysis;

pub const COMPRESS_SCHEMA: &str = "roofline-compress";
pub const COMPRESS_SCHEMA_VERSION: u32 = 1;
pub const PRUNE_PLAN_SCHEMA: &str = "roofline-prune-plan";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompressReport {
    pub schema: String,
    pub schema_version: u32,
    pub model: String,
    pub device: String,
    /// "speed-up 2.00x" or "latency 20.0 ms", as asked.
    pub target: String,
    /// The latency the search aimed at, in the units it was checked in (measured on this CPU,
    /// predicted for another device).
    pub target_latency_ms: f64,
    pub measured: bool,
    pub threads: usize,
    /// Which figure the search predicted with (calibrated expected time or roofline bound).
    pub predictor: String,
    /// Channel counts kept aligned to this many (the kernel tile on this device) and why.
    pub channel_alignment: usize,
    pub alignment_reason: String,
    /// Where the accuracy figures come from (proxy on which inputs, or the user's command).
    pub accuracy_source: String,
    pub reached: bool,
    /// Why the search stopped.
    pub stop_reason: String,
    pub original: Point,
    pub compressed: Point,
    /// The original's latency (measured where measurable) ÷ the final model's prediction as
    /// the search made it before measuring it (with the per-op factors of the profiles,
    /// scaled by the last measured/predicted ratio).
    pub predicted_speedup: f64,
    /// The ratio of the two raw predictions (no measurement feedback).
    pub uncorrected_speedup: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_speedup: Option<f64>,
    /// (predicted − measured) ÷ measured speed-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction_error: Option<f64>,
    pub steps: Vec<Step>,
    /// Indices into `steps` of the latency/accuracy Pareto front.
    pub pareto: Vec<usize>,
    pub layers: Vec<LayerDecision>,
    /// Precision chosen per op (only ops that changed precision).
    pub precision: Vec<PrecisionChoice>,
    pub baselines: Vec<Baseline>,
    pub notes: Vec<String>,
    /// Search time in seconds.
    pub search_s: f64,
    /// The original and the compressed model as deployed (after fold, BN fold and fusion).
    pub before: Analysis,
    pub after: Analysis,
}

/// A model version's latency and accuracy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub predicted_latency_ms: f64,
    /// The original's first measurement; for the compressed model, its final measurement
    /// carried to that spell (the original's first time ÷ the measured speed-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_latency_ms: Option<f64>,
    pub macs: u64,
    pub params: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<AccuracyProxy>,
    /// `--eval` result, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<f64>,
}

/// One step of the search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step: usize,
    /// "prune layer1.0 256→232" or "int8 (31 ops)".
    pub action: String,
    /// The cost model's prediction alone (calibrated expected time, else the bound).
    pub predicted_latency_ms: f64,
    /// What the search predicted before this step was measured: the prediction with each
    /// op's factor from the last per-op profile, scaled by the last measured/predicted ratio
    /// of this model.
    pub corrected_latency_ms: f64,
    /// Measured beside the original, carried to the spell of the original's first measurement
    /// (the original's time then ÷ the speed-up measured in these rounds), the scale of the
    /// target and of `corrected_latency_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_latency_ms: Option<f64>,
    pub macs: u64,
    pub accuracy: AccuracyProxy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<f64>,
    /// Candidate actions costed and accuracy-checked at this step.
    pub candidates_costed: usize,
    pub candidates_checked: usize,
}

/// What the search did with one channel space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerDecision {
    pub space: String,
    pub sources: Vec<String>,
    pub channels: usize,
    pub kept: usize,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionChoice {
    pub node: String,
    pub precision: String,
    pub reason: String,
}

/// A hardware-blind baseline measured in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub name: String,
    pub description: String,
    pub point: Point,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_speedup: Option<f64>,
    pub predicted_speedup: f64,
    /// This baseline's time ÷ the compressed model's, the median over rounds that ran the
    /// original, the baseline and the compressed model side by side (above 1: the compressed
    /// model is faster). Measured runs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compressed_lead: Option<f64>,
}

/// The pruning plan: kept channel indices of every pruned space, in the original model's
/// numbering, so the same pruning can be applied in a training framework and fine-tuned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrunePlan {
    pub schema: String,
    pub model: String,
    pub spaces: Vec<PlannedSpace>,
    pub precision: Vec<PrecisionChoice>,
    pub note: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedSpace {
    pub space: String,
    /// Nodes whose output channels (filters) these are; every node reading them loses the same
    /// input channels.
    pub sources: Vec<String>,
    pub channels: usize,
    pub keep: Vec<usize>,
}
