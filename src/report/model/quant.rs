//! The quantization section of the advice report: every Conv/Gemm/MatMul an `int8`, `bf16` or
//! `fp16` pass considered, with its predicted times and the reason for the decision, and the
//! accuracy proxy of the rewritten graph. Produced by `advisor::quantize`.

use serde::{Deserialize, Serialize};

use crate::analysis::Bound;

/// One Conv/Gemm/MatMul a quantization pass considered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantDecision {
    pub node: String,
    pub op_type: String,
    /// The pass (`int8`, `bf16`, `fp16`).
    pub pass: String,
    /// What the op became: the pass's precision, or `fp32` when left alone.
    pub decision: String,
    pub predicted_fp32_s: f64,
    /// Predicted time at the pass's precision, quantize/dequantize included.
    pub predicted_lowp_s: f64,
    /// The part of `predicted_lowp_s` due to the float boundaries (f32 activations read and
    /// written instead of 1- or 2-byte ones, quantize/dequantize arithmetic).
    pub predicted_qdq_s: f64,
    /// int8 with per-inference (dynamic) activation quantization, for comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_dynamic_s: Option<f64>,
    pub predicted_gain: f64,
    pub bound_fp32: Bound,
    pub bound_lowp: Bound,
    pub reason: String,
}

/// Outputs of the rewritten graph against the fp32 original on the calibration inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccuracyProxy {
    pub samples: usize,
    pub cosine_min: f64,
    pub cosine_mean: f64,
    pub max_abs_error: f64,
    /// Max |output| of the original, to read the error against.
    pub max_abs_reference: f64,
    /// Fraction of rows whose arg-max agrees (outputs whose last axis has ≥ 2 entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top1_agreement: Option<f64>,
}

/// The quantization section of the advice report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuantizationReport {
    /// How the activation ranges were obtained (empty when no pass calibrated).
    pub calibration: String,
    pub decisions: Vec<QuantDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<AccuracyProxy>,
    pub notes: Vec<String>,
}
