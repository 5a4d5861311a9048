//! Candidates and their costs: which Conv/Gemm/MatMul a quantization pass may convert (and
//! why not), the op it would become, its fp32, low-precision, ideal and dynamic-int8 roofline
//! estimates, and the decision with its reason (converted only at [`super::MIN_GAIN`] or more).

use super::report::{fmt_b, fmt_s};
use super::{qerr, MIN_GAIN};
use crate::advisor::AdvisorError;
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Attr, Node};
use crate::analysis::ops::fused::{self, DOMAIN};
use crate::analysis::ops::{self, CostCtx, OpCost, OpNode};
use crate::analysis::roofline::{estimate, Bound, Estimate, Roof};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::analysis::AnalyzeOptions;
use crate::device::{DeviceProfile, Precision};

/// A Conv/Gemm/MatMul a pass may convert.
pub(super) struct Candidate {
    pub(super) index: usize,
    /// `Conv` or `MatMul` (Gemm is written as a MatMul with [K, N] weights).
    pub(super) base: &'static str,
    /// Weights in the low-precision op's layout: Conv `[M, C/g, kh, kw]`, MatMul `[K, N]`.
    pub(super) weights: Vec<f32>,
    pub(super) w_shape: Vec<u64>,
    /// Multiplier folded from Gemm's alpha.
    pub(super) alpha: f32,
    /// Bias per output channel (Gemm's beta·C, FusedMatMul's bias, Conv's B).
    pub(super) bias: Option<Vec<f32>>,
    pub(super) channels: usize,
}

pub(super) fn is_heavy(node: &Node) -> Option<&'static str> {
    match node.domain.as_str() {
        // The standard op's own (static) name, through its fused form's pair.
        "" | "ai.onnx" => fused::fused_of(&node.op_type).and_then(fused::base_of),
        DOMAIN => fused::base_of(&node.op_type),
        _ => None,
    }
}

/// Why an op cannot be converted, or its candidate form.
pub(super) fn candidate(ed: &Editor, index: usize) -> Result<Candidate, String> {
    let node = ed.node(index);
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
        input_values: Vec::new(),
        outputs,
        precision,
        outer: None,
    };
    op.cost(&ctx)
}

/// Roofs of the analysis precision and of `p` (falling back to the analysis roof).
pub(super) fn roofs(
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    p: Precision,
) -> Result<(Roof, Roof, bool), AdvisorError> {
    let base = Roof::of(device, analyze.precision).map_err(qerr)?;
    match base.at_precision(device, p) {
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
pub(super) fn lowp_node(node: &Node, op_type: &str) -> Node {
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

pub(super) struct Costed {
    pub(super) fp32: Estimate,
    pub(super) lowp: Estimate,
    /// Without the float boundaries (1- or 2-byte activations, no q/dq arithmetic).
    pub(super) ideal: Estimate,
    pub(super) dynamic: Option<f64>,
    weights_bytes_fp32: u64,
    act_bytes: u64,
}

pub(super) fn estimate_candidate(
    ed: &Editor,
    c: &Candidate,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    precision: Precision,
) -> Result<Costed, String> {
    let node = ed.node(c.index);
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
                    input_read: 0,
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

/// The decision and its reason.
pub(super) fn decide(c: &Costed, pass: &str, has_peak: bool, overhead: f64) -> (bool, String) {
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
