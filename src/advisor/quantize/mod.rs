//! Quantization passes: `int8` (static: per-channel symmetric int8 weights, per-tensor affine u8
//! activations calibrated by running the fp32 graph), `bf16` and `fp16` (weights stored at half
//! width, products at the device's half-precision rate).
//!
//! # Decisions
//! Every Conv/Gemm/MatMul (fused or not) is costed twice with the roofline of the chosen device:
//! as it is (fp32) and as the low-precision op the pass would write (`QConv`/`QMatMul`,
//! `HalfConv`/`HalfMatMul`, see `analysis::ops::fused::quant`), whose cost counts what the
//! kernel really does: products at the low-precision peak, weights at 1 (int8) or 2 bytes, and
//! the quantize / dequantize work at the float boundaries (the f32 input is read and quantized
//! while packed, the f32 output written after dequantization). An op is converted only when
//! the predicted time drops by at least [`MIN_GAIN`]; the others stay in float with the reason:
//! - compute-bound ops gain up to the peak ratio (4× for VNNI int8 over fp32 FMA here);
//! - ops dominated by activation traffic gain nothing: the f32 tensors still cross memory on
//!   both sides (quantizing them would be a separate pass writing and re-reading a u8 copy,
//!   which costs more than it saves at the ridge);
//! - tiny ops are dominated by the fixed per-op cost;
//! - depthwise convolutions have a reduction depth of kh·kw (9): nothing for a 4-deep dot
//!   product instruction to chew on; they stay float.
//!
//! Each decision also reports the prediction for *dynamic* int8 (per-inference quantization,
//! onnxruntime's `quantize_dynamic` form: DynamicQuantizeLinear → ConvInteger (i32 out) → Cast
//! → Mul by the scales → Add bias): it adds a min/max pass over the f32 input, an i32 output
//! written and re-read, and three more ops' fixed costs, so the roofline already predicts it
//! slower than static int8 and usually slower than fp32 for convolutions. (onnxruntime's
//! ConvInteger kernel is also far from the int8 peak, which no roofline sees: measured 7-13×
//! slower than fp32 on this machine.)
//!
//! # Calibration
//! The graph as it stands before the pass (after folding and fusion) runs on the executor over
//! `calibration_samples` inputs: random (the same generator `bench` uses) or the .npy files of
//! `--calibration DIR` (one file per sample for a single-input model, else one sub-directory
//! per sample holding `<input name>.npy`). Every quantized op's input is observed; the range is
//! the min/max or the 0.01 / 99.99 percentiles (of up to 65 536 evenly strided values per
//! sample), always widened to contain 0 so that zero padding stays exact.
//!
//! # Accuracy proxy
//! After the passes the driver runs the fp32 original and the rewritten graph on the same
//! calibration inputs and reports the cosine similarity (per output and sample, min and mean),
//! the max absolute error, and the top-1 agreement of outputs whose last axis looks like
//! classes.

mod accuracy;
mod calibrate;
mod cost;
mod report;
mod rewrite;

use std::cell::RefCell;
use std::collections::HashMap;

use super::AdvisorError;
use crate::exec::RtTensor;

pub use crate::report::model::quant::{AccuracyProxy, QuantDecision, QuantizationReport};
pub use accuracy::{accuracy, OutputComparison};
pub use calibrate::{affine_params, calibration_inputs, plan_of, CalibrationMethod};
pub use report::summary_notes;
pub use rewrite::{Half, Int8, FP16_KERNEL};

/// Minimum predicted speed-up of an op for a pass to convert it.
pub const MIN_GAIN: f64 = 1.1;
/// Calibration samples when the user gives no directory.
pub const DEFAULT_SAMPLES: usize = 8;

/// The calibration inputs of one `advise` call, loaded or generated once and reused by every
/// quantization pass and by the accuracy proxy: a cache the driver owns, not report state.
#[derive(Default)]
pub struct Calibration {
    pub inputs: Option<Vec<HashMap<String, RtTensor>>>,
    /// Where the inputs came from, for the report ("8 random input(s), minmax").
    pub description: String,
}

pub type SharedCalibration = RefCell<Calibration>;

fn qerr(e: impl std::fmt::Display) -> AdvisorError {
    AdvisorError::Quantization(e.to_string())
}
