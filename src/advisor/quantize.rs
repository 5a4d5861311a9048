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

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{AdvisorError, Change, Pass, PassContext};
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Attr, Graph, Node, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::ops::fused::DOMAIN;
use crate::analysis::ops::{self, CostCtx, OpCost, OpNode};
use crate::analysis::roofline::{estimate, Bound, Estimate, Roof};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::analysis::{self, AnalyzeOptions};
use crate::device::{DeviceProfile, Precision};
use crate::exec::{self, PlanOptions, RtData, RtTensor};

pub use crate::report::model::quant::{AccuracyProxy, QuantDecision, QuantizationReport};

/// Minimum predicted speed-up of an op for a pass to convert it.
pub const MIN_GAIN: f64 = 1.1;
/// Calibration samples when the user gives no directory.
pub const DEFAULT_SAMPLES: usize = 8;
/// Values kept per observed tensor and sample for the percentile method.
const SAMPLE_CAP: usize = 1 << 16;
/// The percentile method's range: [0.01 %, 99.99 %].
const PERCENTILE: f64 = 0.9999;

/// How activation ranges are derived from the calibration runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CalibrationMethod {
    #[default]
    MinMax,
    Percentile,
}

impl std::str::FromStr for CalibrationMethod {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "minmax" | "min-max" => Ok(CalibrationMethod::MinMax),
            "percentile" => Ok(CalibrationMethod::Percentile),
            _ => Err(format!(
                "unknown calibration method `{text}` (minmax or percentile)"
            )),
        }
    }
}

impl CalibrationMethod {
    pub fn name(self) -> &'static str {
        match self {
            CalibrationMethod::MinMax => "min-max",
            CalibrationMethod::Percentile => "percentile 99.99%",
        }
    }
}

/// State the quantization passes share with the driver during one `advise` call.
#[derive(Default)]
pub struct QuantState {
    pub report: QuantizationReport,
    /// The calibration inputs (loaded or generated once, reused for the accuracy proxy).
    pub inputs: Option<Vec<HashMap<String, RtTensor>>>,
}

pub type SharedQuantState = RefCell<QuantState>;

fn qerr(e: impl std::fmt::Display) -> AdvisorError {
    AdvisorError::Quantization(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Candidates and their costs

/// A Conv/Gemm/MatMul a pass may convert.
struct Candidate {
    index: usize,
    /// `Conv` or `MatMul` (Gemm is written as a MatMul with [K, N] weights).
    base: &'static str,
    /// Weights in the low-precision op's layout: Conv `[M, C/g, kh, kw]`, MatMul `[K, N]`.
    weights: Vec<f32>,
    w_shape: Vec<u64>,
    /// Multiplier folded from Gemm's alpha.
    alpha: f32,
    /// Bias per output channel (Gemm's beta·C, FusedMatMul's bias, Conv's B).
    bias: Option<Vec<f32>>,
    channels: usize,
}

fn is_heavy(node: &Node) -> Option<&'static str> {
    let base = match (node.domain.as_str(), node.op_type.as_str()) {
        ("" | "ai.onnx", "Conv") | (DOMAIN, "FusedConv") => "Conv",
        ("" | "ai.onnx", "Gemm") | (DOMAIN, "FusedGemm") => "Gemm",
        ("" | "ai.onnx", "MatMul") | (DOMAIN, "FusedMatMul") => "MatMul",
        _ => return None,
    };
    Some(base)
}

/// Why an op cannot be converted, or its candidate form.
fn candidate(ed: &Editor, index: usize) -> Result<Candidate, String> {
    let node = &ed.nodes[index];
    let kind = is_heavy(node).ok_or("not a Conv/Gemm/MatMul")?;
    let x = node.inputs.first().copied().flatten().ok_or("no input")?;
    let w = node.inputs.get(1).copied().flatten().ok_or("no weights")?;
    if !ed.is_float(x) || !ed.is_float(node.outputs[0]) {
        return Err("not an fp32 op".into());
    }
    let w_fact = ed.fact(w);
    if w_fact.konst.is_none() {
        return Err("weights computed at run time (both operands are activations): nothing to store in low precision".into());
    }
    let w_shape = w_fact.concrete_shape().ok_or("weight shape unknown")?;
    ed.fact(x).concrete_shape().ok_or("input shape unknown")?;
    let weights = ed
        .const_f32(Some(w))
        .ok_or("weights are not materialisable constants")?;
    let bias_in = node.inputs.get(2).copied().flatten();
    match kind {
        "Conv" => {
            if w_shape.len() != 4 && w_shape.len() != 3 {
                return Err("only 1-D and 2-D convolutions".into());
            }
            let group = node.attrs.int_or("group", 1);
            if group > 1 && w_shape[1] == 1 {
                return Err("depthwise: a reduction depth of kh·kw per output (9 for 3×3) is too short for the dot-product instructions; stays float".into());
            }
            let channels = w_shape[0] as usize;
            let bias = match bias_in {
                Some(b) => Some(
                    ed.const_f32(Some(b))
                        .filter(|v| v.len() == channels)
                        .ok_or("bias is not a per-channel constant")?,
                ),
                None => None,
            };
            Ok(Candidate {
                index,
                base: "Conv",
                weights,
                w_shape,
                alpha: 1.0,
                bias,
                channels,
            })
        }
        "Gemm" => {
            if node.attrs.int_or("transA", 0) != 0 || w_shape.len() != 2 {
                return Err("Gemm with a transposed A: no int8 form".into());
            }
            let trans_b = node.attrs.int_or("transB", 0) != 0;
            let (k, n) = if trans_b {
                (w_shape[1] as usize, w_shape[0] as usize)
            } else {
                (w_shape[0] as usize, w_shape[1] as usize)
            };
            let weights = if trans_b {
                let mut t = vec![0.0; k * n];
                for r in 0..n {
                    for c in 0..k {
                        t[c * n + r] = weights[r * k + c];
                    }
                }
                t
            } else {
                weights
            };
            let beta = node.attrs.float_or("beta", 1.0);
            let bias = match bias_in {
                Some(b) => {
                    let v = ed.const_f32(Some(b)).ok_or("C is not a constant")?;
                    let shape = ed.fact(b).concrete_shape().unwrap_or_default();
                    let per_col = v.len() == n && shape.last() == Some(&(n as u64));
                    if per_col {
                        Some(v.iter().map(|&c| c * beta).collect())
                    } else if v.len() == 1 {
                        Some(vec![v[0] * beta; n])
                    } else {
                        return Err("C is not a per-column bias".into());
                    }
                }
                None => None,
            };
            Ok(Candidate {
                index,
                base: "MatMul",
                weights,
                w_shape: vec![k as u64, n as u64],
                alpha: node.attrs.float_or("alpha", 1.0),
                bias,
                channels: n,
            })
        }
        _ => {
            if w_shape.len() != 2 {
                return Err("batched weights: no int8 form".into());
            }
            let n = w_shape[1] as usize;
            let bias = match bias_in {
                Some(b) => Some(
                    ed.const_f32(Some(b))
                        .filter(|v| v.len() == n)
                        .ok_or("bias is not a per-column constant")?,
                ),
                None => None,
            };
            Ok(Candidate {
                index,
                base: "MatMul",
                weights,
                w_shape,
                alpha: 1.0,
                bias,
                channels: n,
            })
        }
    }
}

fn splat(dtype: DType, shape: &[u64]) -> TensorFact {
    TensorFact::constant(Tensor {
        dtype,
        shape: shape.to_vec(),
        data: TensorData::Splat(0.0),
    })
}

fn cost_of(
    ed: &Editor,
    node: &Node,
    domain: &str,
    op_type: &str,
    inputs: &[Option<&TensorFact>],
    precision: Precision,
) -> Result<OpCost, String> {
    let op = ops::lookup(domain, op_type).ok_or("no cost model")?;
    let outputs: Vec<&TensorFact> = node.outputs.iter().map(|&v| ed.fact(v)).collect();
    let ctx = CostCtx {
        node: OpNode {
            name: &node.name,
            op_type,
            attrs: &node.attrs,
            opset: ed.graph.opset,
        },
        inputs: inputs.to_vec(),
        outputs,
        precision,
    };
    op.cost(&ctx)
}

/// Roofs of the analysis precision and of `p` (falling back to the analysis roof).
fn roofs(
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    p: Precision,
) -> Result<(Roof, Roof, bool), AdvisorError> {
    let base = Roof::of(device, analyze.precision).map_err(qerr)?;
    match Roof::of(device, p) {
        Ok(r) => Ok((base, r, true)),
        Err(_) => Ok((base, base, false)),
    }
}

/// The facts the low-precision op would read: X, W (at `w_dtype`), B, R, then the
/// quantization parameters for int8.
fn lowp_inputs(
    ed: &Editor,
    node: &Node,
    c: &Candidate,
    w_dtype: DType,
    int8: bool,
) -> Vec<Option<TensorFact>> {
    let fact = |i: usize| {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .map(|v| ed.fact(v).clone())
    };
    let residual = if c.base == "Conv" { fact(3) } else { None };
    let mut v = vec![
        fact(0),
        Some(splat(w_dtype, &c.w_shape)),
        c.bias
            .as_ref()
            .map(|b| splat(DType::F32, &[b.len() as u64])),
        residual,
    ];
    if int8 {
        v.push(Some(splat(DType::F32, &[c.channels as u64])));
        v.push(Some(splat(DType::F32, &[])));
        v.push(Some(splat(DType::U8, &[])));
    }
    v
}

/// Op type and attributes of the low-precision node.
fn lowp_node(node: &Node, op_type: &str) -> Node {
    let mut attrs = node.attrs.clone();
    for key in ["transA", "transB", "alpha", "beta"] {
        attrs.0.remove(key);
    }
    Node {
        name: node.name.clone(),
        op_type: op_type.into(),
        domain: DOMAIN.into(),
        attrs,
        inputs: node.inputs.clone(),
        outputs: node.outputs.clone(),
    }
}

struct Costed {
    fp32: Estimate,
    lowp: Estimate,
    /// Without the float boundaries (1- or 2-byte activations, no q/dq arithmetic).
    ideal: Estimate,
    dynamic: Option<f64>,
    weights_bytes_fp32: u64,
    act_bytes: u64,
}

fn estimate_candidate(
    ed: &Editor,
    c: &Candidate,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    precision: Precision,
) -> Result<Costed, String> {
    let node = &ed.nodes[c.index];
    let facts: Vec<Option<&TensorFact>> =
        node.inputs.iter().map(|s| s.map(|v| ed.fact(v))).collect();
    let fp32_cost = cost_of(
        ed,
        node,
        &node.domain,
        &node.op_type,
        &facts,
        analyze.precision,
    )?;
    let (base, lowp_roof, _) = roofs(device, analyze, precision).map_err(|e| e.to_string())?;
    let int8 = precision == Precision::Int8;
    let (op_type, w_dtype) = match (int8, c.base, precision) {
        (true, "Conv", _) => ("QConv", DType::I8),
        (true, _, _) => ("QMatMul", DType::I8),
        (false, "Conv", Precision::Bf16) => ("HalfConv", DType::Bf16),
        (false, "Conv", _) => ("HalfConv", DType::F16),
        (false, _, Precision::Bf16) => ("HalfMatMul", DType::Bf16),
        (false, _, _) => ("HalfMatMul", DType::F16),
    };
    let mut lnode = lowp_node(node, op_type);
    if !int8 {
        let dtype = if precision == Precision::Bf16 {
            "bf16"
        } else {
            "fp16"
        };
        lnode
            .attrs
            .0
            .insert("dtype".into(), Attr::String(dtype.into()));
    }
    let owned = lowp_inputs(ed, node, c, w_dtype, int8);
    let refs: Vec<Option<&TensorFact>> = owned.iter().map(|f| f.as_ref()).collect();
    let lowp_cost = cost_of(ed, &lnode, DOMAIN, op_type, &refs, analyze.precision)?;
    // The same op with low-precision activations and no quantize/dequantize work.
    let width = if int8 { 1 } else { 2 };
    let mut ideal_cost = lowp_cost;
    let x_elems = facts[0].and_then(|f| f.element_count()).unwrap_or(0);
    let y_elems: u64 = node
        .outputs
        .iter()
        .filter_map(|&v| ed.fact(v).element_count())
        .sum();
    ideal_cost.bytes.act_read = lowp_cost.bytes.act_read * width / 4;
    ideal_cost.bytes.act_written = lowp_cost.bytes.act_written * width / 4;
    ideal_cost.flops = fp32_cost.flops;
    // No float boundaries: nothing left that runs at the fp32 vector rate.
    ideal_cost.vector_flops = 0;
    let fp32 = estimate(&fp32_cost, &base);
    let lowp = estimate(&lowp_cost, &lowp_roof);
    let ideal = estimate(&ideal_cost, &lowp_roof);
    // Dynamic int8: DynamicQuantizeLinear (read f32, write u8, 5 FLOPs/element) →
    // ConvInteger (u8 in, i32 out) → Cast (i32 → f32) → Mul (scales) → Add (bias).
    let dynamic = int8.then(|| {
        let ew = |flops: u64, read: u64, write: u64| {
            let cost = OpCost {
                flops,
                bytes: ops::Traffic {
                    weights_read: 0,
                    act_read: read,
                    act_written: write,
                },
                ..OpCost::default()
            };
            estimate(&cost, &base).predicted_s
        };
        let mut integer = ideal_cost;
        integer.bytes.act_written = 4 * y_elems;
        let quantize = ew(5 * x_elems, 4 * x_elems, x_elems);
        let conv = estimate(&integer, &lowp_roof).predicted_s;
        let cast = ew(y_elems, 4 * y_elems, 4 * y_elems);
        let mul = ew(y_elems, 4 * y_elems, 4 * y_elems);
        let add = if c.bias.is_some() {
            ew(y_elems, 4 * y_elems, 4 * y_elems)
        } else {
            0.0
        };
        quantize + conv + cast + mul + add
    });
    Ok(Costed {
        fp32,
        lowp,
        ideal,
        dynamic,
        weights_bytes_fp32: fp32_cost.bytes.weights_read,
        act_bytes: fp32_cost.bytes.act_read + fp32_cost.bytes.act_written,
    })
}

fn fmt_s(s: f64) -> String {
    crate::report::units::fmt_seconds(s)
}

fn fmt_b(b: u64) -> String {
    crate::report::units::fmt_bytes(b as f64)
}

/// The decision and its reason.
fn decide(c: &Costed, pass: &str, has_peak: bool, overhead: f64) -> (bool, String) {
    let gain = c.fp32.predicted_s / c.lowp.predicted_s.max(1e-15);
    let saved = c.fp32.predicted_s - c.lowp.predicted_s;
    let convert = gain >= MIN_GAIN;
    let reason = if convert {
        let what = match c.fp32.bound {
            Bound::Compute => "compute-bound",
            Bound::Memory => "memory-bound on its weights",
            _ => "small",
        };
        format!(
            "{what} in fp32 ({}); {pass} {} including {} of quantize/dequantize at the float boundaries: {gain:.2}x",
            fmt_s(c.fp32.predicted_s),
            fmt_s(c.lowp.predicted_s),
            fmt_s(c.lowp.predicted_s - c.ideal.predicted_s)
        )
    } else if c.fp32.bound == Bound::Overhead || c.fp32.predicted_s < 2.0 * overhead {
        format!(
            "tiny: the fixed per-op cost ({}) dominates its {}; {pass} would save {} ({gain:.2}x)",
            fmt_s(overhead),
            fmt_s(c.fp32.predicted_s),
            fmt_s(saved.max(0.0))
        )
    } else if c.lowp.bound == Bound::Memory && c.act_bytes > c.weights_bytes_fp32 {
        format!(
            "memory-bound on activations ({} of f32 in and out vs {} of fp32 weights): {pass} shrinks only the weights and the arithmetic, the f32 tensors still cross memory at the quantize/dequantize boundaries: {} -> {} ({gain:.2}x < {MIN_GAIN}x)",
            fmt_b(c.act_bytes),
            fmt_b(c.weights_bytes_fp32),
            fmt_s(c.fp32.predicted_s),
            fmt_s(c.lowp.predicted_s)
        )
    } else if !has_peak {
        format!("the device has no {pass} compute ceiling: only storage would shrink ({gain:.2}x)")
    } else {
        format!(
            "predicted {} -> {} ({gain:.2}x < {MIN_GAIN}x): not worth the rounding error",
            fmt_s(c.fp32.predicted_s),
            fmt_s(c.lowp.predicted_s)
        )
    };
    (convert, reason)
}

// ---------------------------------------------------------------------------------------------
// Calibration

/// Per-tensor statistics over the calibration runs.
#[derive(Clone, Debug, Default)]
struct Stats {
    min: f32,
    max: f32,
    seen: bool,
    samples: Vec<f32>,
}

impl Stats {
    fn observe(&mut self, data: &[f32], keep: bool) {
        for &v in data {
            if v.is_finite() {
                if !self.seen {
                    self.min = v;
                    self.max = v;
                    self.seen = true;
                }
                self.min = self.min.min(v);
                self.max = self.max.max(v);
            }
        }
        if keep {
            let step = data.len().div_ceil(SAMPLE_CAP).max(1);
            self.samples
                .extend(data.iter().step_by(step).copied().filter(|v| v.is_finite()));
        }
    }

    /// (lo, hi) containing 0.
    fn range(&mut self, method: CalibrationMethod) -> (f32, f32) {
        let (mut lo, mut hi) = (self.min, self.max);
        if method == CalibrationMethod::Percentile && self.samples.len() > 100 {
            let n = self.samples.len();
            let at = |s: &mut Vec<f32>, q: f64| -> f32 {
                let i = ((n - 1) as f64 * q).round() as usize;
                *s.select_nth_unstable_by(i, f32::total_cmp).1
            };
            lo = at(&mut self.samples, 1.0 - PERCENTILE);
            hi = at(&mut self.samples, PERCENTILE);
        }
        (lo.min(0.0), hi.max(0.0))
    }
}

/// Affine u8 parameters of a range containing 0: (scale, zero point).
pub fn affine_params(lo: f32, hi: f32) -> (f32, i32) {
    let span = (hi - lo).max(1e-8);
    let scale = span / 255.0;
    let zp = (-lo / scale).round().clamp(0.0, 255.0) as i32;
    (scale, zp)
}

/// Loads the calibration samples of `dir` for a plan's inputs.
fn load_dir(
    dir: &Path,
    inputs: &[(String, Vec<usize>, bool)],
) -> Result<Vec<HashMap<String, RtTensor>>, AdvisorError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| qerr(format!("--calibration {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let check = |name: &str, t: RtTensor, shape: &[usize], integer: bool, path: &Path| {
        if t.shape != shape {
            return Err(qerr(format!(
                "{}: shape {:?} given, input `{name}` has {:?}",
                path.display(),
                t.shape,
                shape
            )));
        }
        Ok(match (integer, t.data) {
            (false, RtData::I64(v)) => RtTensor {
                shape: t.shape,
                data: RtData::F32(v.iter().map(|&x| x as f32).collect()),
            },
            (true, RtData::F32(v)) => RtTensor {
                shape: t.shape,
                data: RtData::I64(v.iter().map(|&x| x as i64).collect()),
            },
            (_, data) => RtTensor {
                shape: t.shape,
                data,
            },
        })
    };
    let mut samples = Vec::new();
    if inputs.len() == 1 {
        let (name, shape, integer) = &inputs[0];
        for path in entries
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        {
            let t = exec::npy::read_npy(path).map_err(qerr)?;
            let t = check(name, t, shape, *integer, path)?;
            samples.push(HashMap::from([(name.clone(), t)]));
        }
    } else {
        for sub in entries.iter().filter(|p| p.is_dir()) {
            let mut sample = HashMap::new();
            for (name, shape, integer) in inputs {
                let safe: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "._-".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let path = sub.join(format!("{safe}.npy"));
                let t = exec::npy::read_npy(&path).map_err(qerr)?;
                sample.insert(name.clone(), check(name, t, shape, *integer, &path)?);
            }
            samples.push(sample);
        }
    }
    if samples.is_empty() {
        return Err(qerr(format!(
            "--calibration {}: no samples (expected .npy files, or one directory per sample with <input>.npy)",
            dir.display()
        )));
    }
    Ok(samples)
}

/// The calibration inputs of this advise call (loaded or generated once).
pub fn calibration_inputs(
    ctx: &PassContext,
    plan: &exec::Plan,
) -> Result<Vec<HashMap<String, RtTensor>>, AdvisorError> {
    if let Some(inputs) = &ctx.quant.borrow().inputs {
        return Ok(inputs.clone());
    }
    let inputs = match &ctx.options.calibration_dir {
        Some(dir) => load_dir(dir, &plan.inputs())?,
        None => (0..ctx.options.calibration_samples.max(1))
            .map(|s| crate::bench::random_inputs(plan, 1000 + s as u64))
            .collect(),
    };
    let mut q = ctx.quant.borrow_mut();
    q.report.calibration = match &ctx.options.calibration_dir {
        Some(d) => format!("{} input(s) from {}", inputs.len(), d.display()),
        None => format!("{} random input(s)", inputs.len()),
    };
    // The activation ranges only matter to int8; the inputs also serve the accuracy proxy.
    if ctx.options.apply.iter().any(|p| p == "int8") {
        q.report.calibration += &format!(", {}", ctx.options.calibration_method.name());
    }
    q.inputs = Some(inputs.clone());
    Ok(inputs)
}

fn plan_of(
    graph: &Graph,
    analyze: &AnalyzeOptions,
    threads: usize,
) -> Result<exec::Plan, AdvisorError> {
    let mut graph = graph.clone();
    let (order, states, _) = analysis::prepare_graph(&mut graph, &analyze.bindings)?;
    Ok(exec::build_plan(
        &graph,
        &order,
        &states,
        &PlanOptions {
            threads: threads.max(1),
            ..PlanOptions::default()
        },
    )?)
}

/// Runs `graph` with `values` as extra outputs on the calibration inputs; statistics per value.
fn calibrate(
    graph: &Graph,
    values: &[ValueId],
    ctx: &PassContext,
) -> Result<HashMap<ValueId, Stats>, AdvisorError> {
    let mut g = graph.clone();
    for &v in values {
        if !g.outputs.contains(&v) {
            g.outputs.push(v);
        }
    }
    let plan = plan_of(&g, ctx.analyze, ctx.options.threads)?;
    let inputs = calibration_inputs(ctx, &plan)?;
    let keep = ctx.options.calibration_method == CalibrationMethod::Percentile;
    let names: HashMap<String, ValueId> = values
        .iter()
        .map(|&v| (g.values[v].name.clone(), v))
        .collect();
    let mut stats: HashMap<ValueId, Stats> = HashMap::new();
    let mut ws = plan.workspace();
    for sample in &inputs {
        for (name, tensor) in plan.run(&mut ws, sample, None)? {
            if let (Some(&v), Some(data)) = (names.get(&name), tensor.as_f32()) {
                stats.entry(v).or_default().observe(data, keep);
            }
        }
    }
    Ok(stats)
}

// ---------------------------------------------------------------------------------------------
// Rewriting

/// Per-channel symmetric int8: values and one scale per channel. `channel_of(i)` maps a flat
/// index to its channel.
fn quantize_weights(
    w: &[f32],
    channels: usize,
    channel_of: impl Fn(usize) -> usize,
) -> (Vec<i64>, Vec<f32>) {
    let mut max = vec![0f32; channels];
    for (i, &v) in w.iter().enumerate() {
        let c = channel_of(i);
        max[c] = max[c].max(v.abs());
    }
    let scales: Vec<f32> = max
        .iter()
        .map(|&m| if m > 0.0 { m / 127.0 } else { 1.0 })
        .collect();
    let q = w
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            (v / scales[channel_of(i)])
                .round_ties_even()
                .clamp(-127.0, 127.0) as i64
        })
        .collect();
    (q, scales)
}

fn int_const(
    ed: &mut Editor,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    values: Vec<i64>,
) -> ValueId {
    let tensor = Tensor {
        dtype,
        shape,
        data: TensorData::I64(values),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn half_const(
    ed: &mut Editor,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    values: Vec<f32>,
) -> ValueId {
    let tensor = Tensor {
        dtype,
        shape,
        data: TensorData::F32(values),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn live_candidates(ed: &Editor, states: &[NodeState]) -> Vec<usize> {
    (0..ed.nodes.len())
        .filter(|i| !ed.removed.contains(i))
        .filter(|&i| !matches!(states.get(i), Some(NodeState::Folded)))
        .filter(|&i| is_heavy(&ed.nodes[i]).is_some())
        .collect()
}

fn record(ctx: &PassContext, d: QuantDecision) {
    ctx.quant.borrow_mut().report.decisions.push(d);
}

fn decision(
    node: &Node,
    pass: &str,
    converted: bool,
    costed: Option<&Costed>,
    reason: String,
) -> QuantDecision {
    let (fp32, lowp, ideal) = match costed {
        Some(c) => (c.fp32, c.lowp, c.ideal),
        None => (Estimate::NONE, Estimate::NONE, Estimate::NONE),
    };
    QuantDecision {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        pass: pass.into(),
        decision: if converted {
            pass.into()
        } else {
            "fp32".into()
        },
        predicted_fp32_s: fp32.predicted_s,
        predicted_lowp_s: lowp.predicted_s,
        predicted_qdq_s: (lowp.predicted_s - ideal.predicted_s).max(0.0),
        predicted_dynamic_s: costed.and_then(|c| c.dynamic),
        predicted_gain: if lowp.predicted_s > 0.0 {
            fp32.predicted_s / lowp.predicted_s
        } else {
            1.0
        },
        bound_fp32: fp32.bound,
        bound_lowp: lowp.bound,
        reason,
    }
}

/// `int8`: static INT8 with calibrated activations.
pub struct Int8;

impl Pass for Int8 {
    fn name(&self) -> &'static str {
        "int8"
    }

    fn description(&self) -> &'static str {
        "static INT8 Conv/Gemm/MatMul: per-channel symmetric weights, calibrated per-tensor u8 activations, VNNI kernels; ops the roofline predicts no gain for stay fp32"
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn run(&self, _ed: &mut Editor, _states: &[NodeState]) -> Result<Vec<Change>, AdvisorError> {
        Err(qerr("the int8 pass needs the advise driver's context"))
    }

    fn run_with(
        &self,
        ed: &mut Editor,
        states: &[NodeState],
        ctx: &PassContext,
    ) -> Result<Vec<Change>, AdvisorError> {
        let overhead = ctx.device.launch_overhead_s;
        let (_, _, has_peak) = roofs(ctx.device, ctx.analyze, Precision::Int8)?;
        let mut chosen: Vec<(Candidate, Costed)> = Vec::new();
        for i in live_candidates(ed, states) {
            let node = ed.nodes[i].clone();
            match candidate(ed, i) {
                Err(reason) => record(ctx, decision(&node, "int8", false, None, reason)),
                Ok(c) => match estimate_candidate(ed, &c, ctx.device, ctx.analyze, Precision::Int8)
                {
                    Err(reason) => record(ctx, decision(&node, "int8", false, None, reason)),
                    Ok(costed) => {
                        let (convert, reason) = decide(&costed, "int8", has_peak, overhead);
                        record(ctx, decision(&node, "int8", convert, Some(&costed), reason));
                        if convert {
                            chosen.push((c, costed));
                        }
                    }
                },
            }
        }
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        let observed: Vec<ValueId> = chosen
            .iter()
            .filter_map(|(c, _)| ed.nodes[c.index].inputs[0])
            .collect();
        let mut stats = calibrate(ed.graph, &observed, ctx)?;
        let method = ctx.options.calibration_method;
        let mut changes = Vec::new();
        for (c, costed) in chosen {
            let node = ed.nodes[c.index].clone();
            let Some(x) = node.inputs[0] else { continue };
            let (lo, hi) = stats.get_mut(&x).map_or((-1.0, 1.0), |s| s.range(method));
            let (x_scale, x_zp) = affine_params(lo, hi);
            let per_channel = if c.base == "Conv" {
                c.weights.len() / c.channels.max(1)
            } else {
                1
            };
            let channels = c.channels;
            let (wq, mut w_scale) = if c.base == "Conv" {
                quantize_weights(&c.weights, channels, |i| i / per_channel)
            } else {
                quantize_weights(&c.weights, channels, |i| i % channels)
            };
            if c.alpha != 1.0 {
                w_scale.iter_mut().for_each(|s| *s *= c.alpha);
            }
            let name = node.name.clone();
            let w_id = int_const(
                ed,
                format!("{name}_int8_w"),
                DType::I8,
                c.w_shape.clone(),
                wq,
            );
            let ws_id = ed.add_const(
                format!("{name}_int8_wscale"),
                vec![channels as u64],
                w_scale,
            );
            let xs_id = ed.add_const(format!("{name}_int8_xscale"), vec![], vec![x_scale]);
            let xz_id = int_const(
                ed,
                format!("{name}_int8_xzp"),
                DType::U8,
                vec![],
                vec![x_zp as i64],
            );
            let b_id = c
                .bias
                .clone()
                .map(|b| ed.add_const(format!("{name}_int8_bias"), vec![b.len() as u64], b));
            let residual = if c.base == "Conv" {
                node.inputs.get(3).copied().flatten()
            } else {
                None
            };
            let op_type = if c.base == "Conv" { "QConv" } else { "QMatMul" };
            let mut q = lowp_node(&node, op_type);
            q.inputs = vec![
                Some(x),
                Some(w_id),
                b_id,
                residual,
                Some(ws_id),
                Some(xs_id),
                Some(xz_id),
            ];
            ed.nodes[c.index] = q;
            changes.push(Change::new(
                &[&node],
                &format!(
                    "int8 ({} channels, x scale {x_scale:.3e} zero point {x_zp}): predicted {} -> {} ({:.2}x)",
                    channels,
                    fmt_s(costed.fp32.predicted_s),
                    fmt_s(costed.lowp.predicted_s),
                    costed.fp32.predicted_s / costed.lowp.predicted_s.max(1e-15)
                ),
            ));
        }
        Ok(changes)
    }
}

/// `bf16` / `fp16`: weights stored at half width, products at the half-precision peak.
pub struct Half {
    precision: Precision,
}

impl Half {
    pub fn bf16() -> Half {
        Half {
            precision: Precision::Bf16,
        }
    }

    pub fn fp16() -> Half {
        Half {
            precision: Precision::Fp16,
        }
    }

    fn tag(&self) -> &'static str {
        if self.precision == Precision::Bf16 {
            "bf16"
        } else {
            "fp16"
        }
    }
}

/// Whether this build runs fp16 products natively (it has no fp16 kernel: fp16 ops execute as
/// fp32 on fp16-rounded operands, so their speed is predicted, not measured).
pub const FP16_KERNEL: bool = false;

impl Pass for Half {
    fn name(&self) -> &'static str {
        self.tag()
    }

    fn description(&self) -> &'static str {
        if self.precision == Precision::Bf16 {
            "BF16 Conv/Gemm/MatMul: weights stored as bf16, products on vdpbf16ps with f32 accumulation"
        } else {
            "FP16 Conv/Gemm/MatMul: weights stored as fp16 (predicted only: no fp16 kernel here, executed as fp32 on fp16-rounded values)"
        }
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn measured(&self) -> bool {
        self.precision == Precision::Bf16 || FP16_KERNEL
    }

    fn run(&self, _ed: &mut Editor, _states: &[NodeState]) -> Result<Vec<Change>, AdvisorError> {
        Err(qerr(
            "the half-precision passes need the advise driver's context",
        ))
    }

    fn run_with(
        &self,
        ed: &mut Editor,
        states: &[NodeState],
        ctx: &PassContext,
    ) -> Result<Vec<Change>, AdvisorError> {
        let tag = self.tag();
        let overhead = ctx.device.launch_overhead_s;
        let (_, _, has_peak) = roofs(ctx.device, ctx.analyze, self.precision)?;
        if self.precision == Precision::Fp16 {
            ctx.quant.borrow_mut().report.notes.push(
                "fp16: no fp16 kernel in this tool (the CPU has no AVX-512 FP16); its gain is predicted only and the graph runs as fp32 on fp16-rounded values".into(),
            );
        }
        if !has_peak {
            ctx.quant.borrow_mut().report.notes.push(format!(
                "{tag}: device `{}` has no {tag} compute ceiling; predictions use its {} peak (storage shrinks, arithmetic does not speed up)",
                ctx.device.id, ctx.analyze.precision
            ));
        }
        let dtype = if self.precision == Precision::Bf16 {
            DType::Bf16
        } else {
            DType::F16
        };
        let mut changes = Vec::new();
        for i in live_candidates(ed, states) {
            let node = ed.nodes[i].clone();
            let c = match candidate(ed, i) {
                Ok(c) => c,
                Err(reason) => {
                    record(ctx, decision(&node, tag, false, None, reason));
                    continue;
                }
            };
            let costed = match estimate_candidate(ed, &c, ctx.device, ctx.analyze, self.precision) {
                Ok(x) => x,
                Err(reason) => {
                    record(ctx, decision(&node, tag, false, None, reason));
                    continue;
                }
            };
            let (convert, reason) = decide(&costed, tag, has_peak, overhead);
            record(ctx, decision(&node, tag, convert, Some(&costed), reason));
            if !convert {
                continue;
            }
            let round: fn(f32) -> f32 = if self.precision == Precision::Bf16 {
                exec::quant::round_bf16
            } else {
                exec::quant::round_f16
            };
            let values: Vec<f32> = c.weights.iter().map(|&v| round(v * c.alpha)).collect();
            let name = node.name.clone();
            let w_id = half_const(
                ed,
                format!("{name}_{tag}_w"),
                dtype,
                c.w_shape.clone(),
                values,
            );
            let b_id = c
                .bias
                .clone()
                .map(|b| ed.add_const(format!("{name}_{tag}_bias"), vec![b.len() as u64], b));
            let residual = if c.base == "Conv" {
                node.inputs.get(3).copied().flatten()
            } else {
                None
            };
            let op_type = if c.base == "Conv" {
                "HalfConv"
            } else {
                "HalfMatMul"
            };
            let mut h = lowp_node(&node, op_type);
            h.attrs.0.insert("dtype".into(), Attr::String(tag.into()));
            h.inputs = vec![node.inputs[0], Some(w_id), b_id, residual];
            ed.nodes[i] = h;
            changes.push(Change::new(
                &[&node],
                &format!(
                    "{tag}: predicted {} -> {} ({:.2}x)",
                    fmt_s(costed.fp32.predicted_s),
                    fmt_s(costed.lowp.predicted_s),
                    costed.fp32.predicted_s / costed.lowp.predicted_s.max(1e-15)
                ),
            ));
        }
        Ok(changes)
    }
}

// ---------------------------------------------------------------------------------------------
// Accuracy proxy

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 && bb == 0.0 {
        1.0
    } else {
        ab / (aa.sqrt() * bb.sqrt()).max(1e-300)
    }
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

/// Runs the fp32 `reference` and the `rewritten` graph on the calibration inputs and compares
/// their outputs.
pub fn accuracy(
    reference: &Graph,
    rewritten: &Graph,
    ctx: &PassContext,
) -> Result<AccuracyProxy, AdvisorError> {
    let ref_plan = plan_of(reference, ctx.analyze, ctx.options.threads)?;
    let new_plan = plan_of(rewritten, ctx.analyze, ctx.options.threads)?;
    let inputs = calibration_inputs(ctx, &ref_plan)?;
    let (mut ws_a, mut ws_b) = (ref_plan.workspace(), new_plan.workspace());
    let (mut cos_min, mut cos_sum, mut cos_n) = (1.0f64, 0.0f64, 0usize);
    let (mut max_err, mut max_ref) = (0.0f64, 0.0f64);
    let (mut agree, mut rows) = (0usize, 0usize);
    for sample in &inputs {
        let a = ref_plan.run(&mut ws_a, sample, None)?;
        let b = new_plan.run(&mut ws_b, sample, None)?;
        for ((name, ta), (_, tb)) in a.iter().zip(&b) {
            let (x, y) = (ta.to_f32(), tb.to_f32());
            if x.len() != y.len() {
                return Err(qerr(format!("output `{name}` changed size")));
            }
            let c = cosine(&x, &y);
            cos_min = cos_min.min(c);
            cos_sum += c;
            cos_n += 1;
            for (&p, &q) in x.iter().zip(&y) {
                max_err = max_err.max((p - q).abs() as f64);
                max_ref = max_ref.max(p.abs() as f64);
            }
            let classes = ta.shape.last().copied().unwrap_or(1);
            if classes >= 2 && x.len() % classes == 0 {
                for (ra, rb) in x.chunks(classes).zip(y.chunks(classes)) {
                    rows += 1;
                    agree += usize::from(argmax(ra) == argmax(rb));
                }
            }
        }
    }
    Ok(AccuracyProxy {
        samples: inputs.len(),
        cosine_min: cos_min,
        cosine_mean: cos_sum / cos_n.max(1) as f64,
        max_abs_error: max_err,
        max_abs_reference: max_ref,
        top1_agreement: (rows > 0).then(|| agree as f64 / rows as f64),
    })
}

/// The closing notes of the quantization section (dynamic quantization, what was left float).
pub fn summary_notes(report: &QuantizationReport) -> Vec<String> {
    let mut notes = Vec::new();
    let int8: Vec<&QuantDecision> = report
        .decisions
        .iter()
        .filter(|d| d.pass == "int8")
        .collect();
    if !int8.is_empty() {
        let converted: Vec<&&QuantDecision> =
            int8.iter().filter(|d| d.decision == "int8").collect();
        let fp32: f64 = int8.iter().map(|d| d.predicted_fp32_s).sum();
        let static_s: f64 = int8
            .iter()
            .map(|d| {
                if d.decision == "int8" {
                    d.predicted_lowp_s
                } else {
                    d.predicted_fp32_s
                }
            })
            .sum();
        let dynamic: f64 = int8
            .iter()
            .map(|d| d.predicted_dynamic_s.unwrap_or(d.predicted_fp32_s))
            .sum();
        notes.push(format!(
            "int8: {} of {} Conv/Gemm/MatMul converted; these ops predicted {} fp32 -> {} static int8 ({:.2}x); dynamic (per-inference) int8 would be {} ({:.2}x of fp32): a min/max pass over every f32 input, i32 outputs written and re-read by Cast/Mul/Add, and four extra ops per conv (onnxruntime's ConvInteger is also far from the int8 peak: 7-13x slower than fp32 measured on this machine)",
            converted.len(),
            int8.len(),
            fmt_s(fp32),
            fmt_s(static_s),
            fp32 / static_s.max(1e-15),
            fmt_s(dynamic),
            dynamic / fp32.max(1e-15)
        ));
        let qdq: f64 = converted.iter().map(|d| d.predicted_qdq_s).sum();
        if !converted.is_empty() {
            notes.push(format!(
                "int8: the f32 boundaries (quantize while packing, dequantize in the epilogue) cost {} of the converted ops' {}",
                fmt_s(qdq),
                fmt_s(converted.iter().map(|d| d.predicted_lowp_s).sum())
            ));
        }
    }
    notes
}
