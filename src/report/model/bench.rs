//! The `roofline bench` report (schema `roofline-bench`): end-to-end latency and every op's
//! measured time joined onto the analysis's prediction by node index. Produced by `bench`.

use serde::{Deserialize, Serialize};

use crate::analysis::Analysis;
use crate::device::probe_record::ExchangeRecord;

pub const BENCH_SCHEMA: &str = "roofline-bench";
pub const BENCH_SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpMeasurement {
    pub node_index: usize,
    pub name: String,
    pub op_type: String,
    /// Median over the timed runs.
    pub measured_s: f64,
    pub predicted_s: f64,
    pub flops: u64,
    pub bytes: u64,
    pub measured_gflops: f64,
    pub measured_gbs: f64,
    /// predicted / measured: the fraction of the roofline bound the kernel reaches.
    pub roofline_fraction: f64,
    /// (predicted − measured) / measured.
    pub prediction_error: f64,
    /// The calibrated expected time (see `NodeAnalysis::expected_s`), where the device has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_s: Option<f64>,
    /// (expected − measured) / measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_error: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorSummary {
    pub median_abs_error: f64,
    pub p90_abs_error: f64,
    /// End-to-end: (predicted latency − measured median) / measured median.
    pub end_to_end_error: f64,
    /// The same three for the calibrated expected times (per op over the ops that have one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_median_abs_error: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_p90_abs_error: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_end_to_end_error: Option<f64>,
}

/// The decode loop of `bench --decode`: one token per timed run, each step fed the last one's
/// outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeInfo {
    /// Generation steps run (warm-up and both timed series), each fed the last one's outputs.
    pub steps: usize,
    /// Cache entries per sequence every step attends over (past, before the new token).
    pub cache_length: usize,
    pub batch: usize,
    /// The median step: `latency_ms.median`.
    pub time_per_token_ms: f64,
    pub tokens_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub schema_version: u32,
    pub threads: usize,
    /// Runs each series took: `--runs`, or more where `--min-time` asked for them.
    pub runs: usize,
    /// End-to-end latency in milliseconds over the timed runs (per-op timing off).
    pub latency_ms: Latency,
    /// Sum of the ops' roofline bounds (a lower bound on the latency).
    pub predicted_latency_ms: f64,
    /// Sum of the ops' calibrated expected times, where the device has a calibration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_latency_ms: Option<f64>,
    /// The decode loop's figures (`bench --decode`), when the runs were one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeInfo>,
    pub ops: Vec<OpMeasurement>,
    pub errors: ErrorSummary,
    pub peak_activation_bytes: u64,
    pub unplanned_activation_bytes: u64,
    pub weights_bytes: u64,
    /// Pointwise → depthwise pairs that ran with the activation between them held NHWC.
    #[serde(default)]
    pub nhwc_pairs: usize,
    pub kernel_isa: String,
    /// How fast the threads' cores exchanged data around a multi-thread run, against the
    /// figure the predictions were made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_exchange: Option<ExchangeCheck>,
    /// The core clock the timed runs saw, against the calibration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<RunClock>,
    pub analysis: Analysis,
}

/// The core clock and vector throughput around the timed runs (a 0.1 ms dependent-add chain
/// after each end-to-end run, or once after per-op-only runs, and one 0.1 ms FMA block after
/// the last run, on the thread that times them), next to the calibration's: which state of a shared host the figures come from. On the Zen 1 guest of
/// session 41 the chain read 2.99 GHz after the runs and 2.79 during calibration while the FMA
/// block reached 47.3 GFLOP/s in both; scaling the compute-bound ops' expected times by the
/// FMA ratio made the end-to-end predictions worse (32 → 23 of 36 within ±10%) and by the
/// chain's ratio no better (20 → 21), so the figures are reported, not applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunClock {
    /// Median over the timed runs, Hz.
    pub run_hz: f64,
    pub calibration_hz: Option<f64>,
    /// The fp32 FMA rate of the block after the runs (GFLOP/s, `probe::fma_gflops_now`), and
    /// the calibration's (median over its points).
    pub run_fma_gflops: Option<f64>,
    pub calibration_fma_gflops: Option<f64>,
}

/// The cores' data exchange (`probe::exchange`) measured before and after the timed runs,
/// next to the one the device's multi-thread figures were measured in (the calibration's, else
/// the probe's). A host that moves vCPUs between core complexes changes multi-thread times
/// by up to 2× while single-thread ones stay put; this says which placement a run had.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExchangeCheck {
    pub before: Option<ExchangeRecord>,
    pub after: Option<ExchangeRecord>,
    /// The figure the predictions assume, and where it comes from (`calibration`, `probe`).
    pub reference: Option<ExchangeRecord>,
    pub reference_source: Option<String>,
    /// The larger slowdown of `before` and `after` against `reference` (1 = same placement).
    pub slowdown: Option<f64>,
    /// Set when the exchange moved by 1.8× or more against the reference, in words.
    pub warning: Option<String>,
}
