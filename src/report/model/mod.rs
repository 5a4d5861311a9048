//! The serde report models besides `Analysis` (which lives with the analysis, in
//! `analysis::model`): what `bench`, `advise` and the quantization passes produce and the
//! renderers of this module format. Plain data: the producers fill them in, nothing here
//! computes. Field names and order are the JSON schema (`roofline-bench`, `roofline-advice`).

pub mod advice;
pub mod bench;
pub mod compress;
pub mod quant;

pub use advice::{
    AdviceReport, Change, ExpectedGain, FusionGroup, LeftAlone, Overall, PassOutcome,
    ADVICE_SCHEMA, ADVICE_SCHEMA_VERSION,
};
pub use bench::{
    BenchReport, ErrorSummary, Latency, OpMeasurement, BENCH_SCHEMA, BENCH_SCHEMA_VERSION,
};
pub use quant::{AccuracyProxy, QuantDecision, QuantizationReport};
