//! The `roofline bench` report (schema `roofline-bench`): end-to-end latency and every op's
//! measured time joined onto the analysis's prediction by node index. Produced by `bench`.

use serde::{Deserialize, Serialize};

use crate::analysis::Analysis;

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
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorSummary {
    pub median_abs_error: f64,
    pub p90_abs_error: f64,
    /// End-to-end: (predicted latency − measured median) / measured median.
    pub end_to_end_error: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub schema_version: u32,
    pub threads: usize,
    pub runs: usize,
    /// End-to-end latency in milliseconds over the timed runs (per-op timing off).
    pub latency_ms: Latency,
    pub predicted_latency_ms: f64,
    pub ops: Vec<OpMeasurement>,
    pub errors: ErrorSummary,
    pub peak_activation_bytes: u64,
    pub unplanned_activation_bytes: u64,
    pub weights_bytes: u64,
    pub kernel_isa: String,
    pub analysis: Analysis,
}
