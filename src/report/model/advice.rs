//! The `roofline advise` report (schema `roofline-advice`): every pass with its changes,
//! predicted and (on this CPU) measured gains, the fused groups with their intensity before and
//! after, the ops left alone and why, both analyses, and the quantization section. Produced by
//! `advisor`.

use serde::{Deserialize, Serialize};

use super::quant::QuantizationReport;
use crate::analysis::Analysis;

pub const ADVICE_SCHEMA: &str = "roofline-advice";
pub const ADVICE_SCHEMA_VERSION: u32 = 1;

/// One rewrite a pass made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The original nodes the change replaced or removed.
    pub nodes: Vec<String>,
    pub op_types: Vec<String>,
    pub what: String,
}

/// A fused group, with its arithmetic intensity before fusing (fusion-aware intensity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusionGroup {
    pub nodes: Vec<String>,
    pub op_types: Vec<String>,
    pub flops: u64,
    /// Bytes the ops move separately, and as one kernel.
    pub bytes_unfused: u64,
    pub bytes_fused: u64,
    /// FLOP/byte of the members taken separately (total FLOPs / total bytes), and fused.
    pub intensity_unfused: f64,
    pub intensity_fused: f64,
    pub predicted_time_unfused_s: f64,
    pub predicted_time_fused_s: f64,
    pub predicted_time_saved_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassOutcome {
    pub name: String,
    pub description: String,
    pub changes: Vec<Change>,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub predicted_latency_before_s: f64,
    pub predicted_latency_after_s: f64,
    pub predicted_speedup: f64,
    pub bytes_saved: i64,
    /// Fused groups ranked by predicted time saved.
    pub fusion_groups: Vec<FusionGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_latency_before_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_latency_after_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_speedup: Option<f64>,
    /// (predicted − measured) / measured speed-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction_error: Option<f64>,
    /// The calibrated figures (device with `roofline calibrate` tables): expected latency
    /// before and after the pass, its expected speed-up, and (expected − measured) / measured.
    #[serde(default, flatten)]
    pub expected: ExpectedGain,
}

/// A rewrite's gain from the calibrated expected times (`NodeAnalysis::expected_s`), next to
/// the bound's: the bound sums roofs, the expected time what the kernels reach under them, so
/// a rewrite that moves work to a kernel further from its roof (int8 convolutions) gains less
/// than its bounds say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpectedGain {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_latency_before_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_latency_after_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_speedup: Option<f64>,
    /// (expected − measured) / measured speed-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_error: Option<f64>,
}

impl ExpectedGain {
    /// From the expected latencies of the analyses before and after (`None` without a
    /// calibration).
    pub fn between(before_s: Option<f64>, after_s: Option<f64>) -> ExpectedGain {
        match (before_s, after_s) {
            (Some(before), Some(after)) => ExpectedGain {
                expected_latency_before_s: Some(before),
                expected_latency_after_s: Some(after),
                expected_speedup: Some(before / after.max(1e-15)),
                expected_error: None,
            },
            _ => ExpectedGain::default(),
        }
    }

    /// Sets the error against the measured speed-up.
    pub fn judge(&mut self, measured_speedup: f64) {
        self.expected_error = self
            .expected_speedup
            .map(|expected| (expected - measured_speedup) / measured_speedup);
    }

    /// The gain judged against `measured_speedup` where there is one.
    pub fn judged(mut self, measured_speedup: Option<f64>) -> ExpectedGain {
        if let Some(measured) = measured_speedup {
            self.judge(measured);
        }
        self
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overall {
    pub predicted_latency_before_s: f64,
    pub predicted_latency_after_s: f64,
    pub predicted_speedup: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_latency_before_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_latency_after_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction_error: Option<f64>,
    #[serde(default, flatten)]
    pub expected: ExpectedGain,
    /// Max |rewritten − original| relative to max |original| over all outputs (verification).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_relative_output_error: Option<f64>,
}

/// An op the advisor could not improve, and why (from its roofline position).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeftAlone {
    pub node: String,
    pub op_type: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdviceReport {
    pub schema: String,
    pub schema_version: u32,
    /// `true` when the gains were measured (device `local`); `false`: predictions only.
    pub verified: bool,
    pub verification_note: String,
    pub passes: Vec<PassOutcome>,
    pub overall: Overall,
    pub left_alone: Vec<LeftAlone>,
    pub before: Analysis,
    pub after: Analysis,
    /// Quantization decisions and the accuracy proxy (when an int8/bf16/fp16 pass ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<QuantizationReport>,
}
