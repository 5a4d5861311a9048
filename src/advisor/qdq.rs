//! The QDQ lowering pass: rewrites the standard QDQ form (as onnxruntime's static quantizer and
//! `roofline advise -o` write it) into the tool's quantized ops (`exec::quant` runs them), so that
//! any QDQ model runs on the int8 kernels. It is a graph rewrite like the advisor's others and is
//! run through the same driver checks: the result is re-inferred and validated.
//!
//! # What `lower_qdq` recognises
//! - `DequantizeLinear(x_q) → Conv | Gemm | MatMul` whose weights are
//!   `DequantizeLinear(constant int8, per-channel or per-tensor scale, zero point 0)` and whose
//!   bias (if any) is a float constant or `DequantizeLinear(constant int32)`: becomes `QConv` /
//!   `QMatMul`. When `x_q` comes from `QuantizeLinear(x)` with the same scale and zero point,
//!   the op reads `x` (f32) and quantizes it while packing; otherwise it reads the standalone
//!   DequantizeLinear's output and re-quantizes exactly. Int8 (s8) activations are shifted by
//!   128 onto the u8 grid, which represents the same values.
//! - An output `→ [Relu | Clip] → QuantizeLinear → DequantizeLinear` chain (every reader of the
//!   QuantizeLinear being a DequantizeLinear with the same parameters) is folded into the op:
//!   activation in the epilogue, output rounded to the grid (`y_scale`, `y_zero_point`).
//! - Depthwise convolutions and asymmetric (non-zero zero point) weights stay float: their
//!   weight DequantizeLinear is evaluated once into an f32 constant.
//! - Remaining `QuantizeLinear → DequantizeLinear` pairs with equal per-tensor parameters
//!   become `FakeQuant` (f32 → f32, the same numbers without an integer tensor in memory);
//!   remaining DequantizeLinear of constants are evaluated once. Any other QuantizeLinear /
//!   DequantizeLinear runs with its own kernel.

use super::AdvisorError;
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Graph, Node, ValueId};
use crate::analysis::ops::fused::quant::slot;
use crate::analysis::ops::fused::{Activation, DOMAIN};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};

/// What [`lower_qdq`] rewrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LowerReport {
    pub qconv: usize,
    pub qmatmul: usize,
    /// Ops whose inputs were quantized but that stay float (depthwise, asymmetric weights).
    pub float_fallback: usize,
    pub fake_quant: usize,
    pub folded_dequantize: usize,
}

impl LowerReport {
    pub fn is_empty(&self) -> bool {
        *self == LowerReport::default()
    }
}

/// Per-tensor parameters of a (De)QuantizeLinear: (scale, zero point, integer dtype).
fn per_tensor(ed: &Editor, node: &Node) -> Option<(f32, i64, DType)> {
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    if scale.len() != 1 {
        return None;
    }
    let (zp, dtype) = match node.inputs.get(2).copied().flatten() {
        Some(z) => {
            let v = ed.const_f32(Some(z))?;
            if v.len() != 1 {
                return None;
            }
            (v[0] as i64, ed.fact(z).dtype)
        }
        None => (0, DType::U8),
    };
    Some((scale[0], zp, dtype))
}

/// The zero point on the u8 grid (s8 data shifted by 128), if the dtype is 8-bit.
fn u8_zero_point(zp: i64, dtype: DType) -> Option<i32> {
    match dtype {
        DType::U8 => Some(zp as i32),
        DType::I8 => Some(zp as i32 + 128),
        _ => None,
    }
}

fn is_op(node: &Node, op: &str) -> bool {
    node.op_type == op && (node.domain.is_empty() || node.domain == "ai.onnx")
}

/// Evaluates DequantizeLinear of a constant (per tensor or per axis) into f32 values.
fn eval_dequantize(ed: &Editor, node: &Node) -> Option<(Vec<f32>, Vec<u64>)> {
    let x = node.inputs.first().copied().flatten()?;
    let fact = ed.fact(x);
    fact.konst.as_ref()?;
    let shape = fact.concrete_shape()?;
    let values = ed.const_f32(Some(x))?;
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    let zp = match node.inputs.get(2).copied().flatten() {
        Some(z) => ed.const_f32(Some(z))?,
        None => vec![0.0],
    };
    let rank = shape.len();
    let axis = node.attrs.int_or("axis", 1);
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    let (inner, axis_len) = if scale.len() > 1 {
        let a = usize::try_from(axis).ok().filter(|&a| a < rank)?;
        (
            shape[a + 1..].iter().product::<u64>() as usize,
            shape[a] as usize,
        )
    } else {
        (1, 1)
    };
    if scale.len() > 1 && scale.len() != axis_len {
        return None;
    }
    let out = values
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let c = if scale.len() == 1 {
                0
            } else {
                (i / inner) % axis_len
            };
            let z = zp[if zp.len() == 1 { 0 } else { c }];
            (q - z) * scale[c]
        })
        .collect();
    Some((out, shape))
}

/// Symmetric int8 weights of a weight DequantizeLinear: (values, scales, axis of the scales).
fn int8_weights(ed: &Editor, node: &Node) -> Option<(Vec<f32>, Vec<f32>, i64)> {
    let x = node.inputs.first().copied().flatten()?;
    let fact = ed.fact(x);
    if fact.dtype != DType::I8 || fact.konst.is_none() {
        return None;
    }
    let values = ed.const_f32(Some(x))?;
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    if let Some(z) = node.inputs.get(2).copied().flatten() {
        if ed.const_f32(Some(z))?.iter().any(|&v| v != 0.0) {
            return None;
        }
    }
    let rank = fact.rank()? as i64;
    let axis = node.attrs.int_or("axis", 1);
    Some((values, scale, if axis < 0 { axis + rank } else { axis }))
}

fn int8_const(ed: &mut Editor, name: String, shape: Vec<u64>, values: &[f32]) -> ValueId {
    let tensor = Tensor {
        dtype: DType::I8,
        shape,
        data: TensorData::I64(values.iter().map(|&v| v as i64).collect()),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn u8_scalar(ed: &mut Editor, name: String, value: i32) -> ValueId {
    let tensor = Tensor {
        dtype: DType::U8,
        shape: vec![],
        data: TensorData::I64(vec![value as i64]),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

/// The producer of `value` if it is a live node of type `op`.
fn producer_op(ed: &Editor, value: ValueId, op: &str) -> Option<usize> {
    ed.producer_of(value).filter(|&p| is_op(ed.node(p), op))
}

/// An output chain `value → [Relu | Clip] → Q → DQ…` foldable into an epilogue.
struct OutputChain {
    activation: Option<usize>,
    quantize: usize,
    dequantize: Vec<usize>,
    /// Output grid: (scale, zero point on the u8 grid).
    grid: (f32, i32),
}

fn output_chain(ed: &Editor, value: ValueId) -> Option<OutputChain> {
    let mut v = value;
    let mut act = None;
    if let Some(a) = ed.sole_consumer(v) {
        if activation_node(ed, ed.node(a)).is_some() {
            act = Some(a);
            v = ed.node(a).outputs[0];
        }
    }
    let q = ed
        .sole_consumer(v)
        .filter(|&q| is_op(ed.node(q), "QuantizeLinear"))?;
    let (scale, zp, dtype) = per_tensor(ed, ed.node(q))?;
    let zp = u8_zero_point(zp, dtype)?;
    let q_out = ed.node(q).outputs[0];
    if ed.is_graph_output(q_out) {
        return None;
    }
    let dqs = ed.consumers(q_out);
    if dqs.is_empty() {
        return None;
    }
    for &d in &dqs {
        let node = ed.node(d);
        if !is_op(node, "DequantizeLinear") || node.inputs.first().copied().flatten() != Some(q_out)
        {
            return None;
        }
        let (s2, z2, t2) = per_tensor(ed, node)?;
        if s2 != scale || u8_zero_point(z2, t2) != Some(zp) {
            return None;
        }
    }
    Some(OutputChain {
        activation: act,
        quantize: q,
        dequantize: dqs,
        grid: (scale, zp),
    })
}

/// `QConv → Add(r)` with `r` an f32 tensor of the output's shape computed earlier: `r` becomes
/// the QConv's residual input (added in its epilogue).
fn absorb_residual(ed: &mut Editor, i: usize) {
    absorb_bias(ed, i);
    let node = ed.node(i);
    if node.op_type != "QConv"
        || node.inputs.get(slot::RESIDUAL).copied().flatten().is_some()
        || Activation::present(&node.attrs)
        || node.inputs.get(slot::Y_SCALE).copied().flatten().is_some()
    {
        return;
    }
    let out = node.outputs[0];
    let Some(a) = ed.sole_consumer(out) else {
        return;
    };
    let add = ed.node(a).clone();
    if !is_op(&add, "Add") || add.inputs.len() != 2 {
        return;
    }
    let other = match (add.inputs[0], add.inputs[1]) {
        (Some(x), Some(y)) if x == out && y != out => y,
        (Some(x), Some(y)) if y == out && x != out => x,
        _ => return,
    };
    let same = ed.fact(other).concrete_shape().is_some()
        && ed.fact(other).concrete_shape() == ed.fact(out).concrete_shape();
    if !same || !ed.is_float(other) || ed.producer_of(other).is_some_and(|p| p > i) {
        return;
    }
    ed.update(i, |q| {
        q.inputs.resize(slot::X_ZERO_POINT + 1, None);
        q.inputs[slot::RESIDUAL] = Some(other);
        q.outputs = add.outputs.clone();
    });
    ed.remove(a);
}

/// `QMatMul → Add(constant [N])` (MatMul + bias, the standard form of a dense layer): the
/// constant becomes the QMatMul's bias.
fn absorb_bias(ed: &mut Editor, i: usize) {
    let node = ed.node(i);
    if node.op_type != "QMatMul" || node.inputs.get(slot::BIAS).copied().flatten().is_some() {
        return;
    }
    let out = node.outputs[0];
    let n = ed
        .fact(node.inputs[slot::W].unwrap_or_default())
        .concrete_shape()
        .and_then(|s| s.last().copied());
    let Some(a) = ed.sole_consumer(out) else {
        return;
    };
    let add = ed.node(a).clone();
    if !is_op(&add, "Add") || add.inputs.len() != 2 {
        return;
    }
    let other = match (add.inputs[0], add.inputs[1]) {
        (Some(x), Some(y)) if x == out => y,
        (Some(x), Some(y)) if y == out => x,
        _ => return,
    };
    let shape = ed.fact(other).concrete_shape();
    let per_col = ed.fact(other).konst.is_some()
        && ed.is_float(other)
        && n.is_some()
        && shape
            .as_ref()
            .is_some_and(|s| s.iter().product::<u64>() == n.unwrap_or(0) && s.last() == n.as_ref());
    if !per_col {
        return;
    }
    ed.update(i, |q| {
        q.inputs[slot::BIAS] = Some(other);
        q.outputs = add.outputs.clone();
    });
    ed.remove(a);
}

/// A Relu, or a Clip with constant bounds (attributes before opset 11, inputs after): the
/// epilogue activation it is.
fn activation_node(ed: &Editor, node: &Node) -> Option<Activation> {
    if !is_op(node, "Relu") && !is_op(node, "Clip") {
        return None;
    }
    let bound = |i: usize, attr: &str, default: f32| -> Option<f32> {
        match node.inputs.get(i).copied().flatten() {
            Some(v) => ed.const_scalar(Some(v)),
            None => Some(node.attrs.float_or(attr, default)),
        }
    };
    Activation::of_onnx(&node.op_type, &node.attrs, || {
        Some((
            bound(1, "min", f32::NEG_INFINITY)?,
            bound(2, "max", f32::INFINITY)?,
        ))
    })
}

/// Moves the Relu / Clip node `a` (sole reader of node `i`'s output) into `i`'s epilogue.
fn absorb_activation(ed: &mut Editor, i: usize, a: usize) {
    let an = ed.node(a).clone();
    if Activation::present(&ed.node(i).attrs) {
        return;
    }
    let Some(activation) = activation_node(ed, &an) else {
        return;
    };
    ed.update(i, |q| {
        activation.write_attrs(&mut q.attrs);
        q.outputs = an.outputs.clone();
    });
    ed.remove(a);
}

/// Rewrites the QDQ form into the int8 ops (see the module docs). Constants must be known
/// (initializers, or foldable); shapes need not be bound.
pub fn lower_qdq(graph: &mut Graph) -> LowerReport {
    let mut report = LowerReport::default();
    let has_qdq = graph
        .dag
        .node_weights()
        .any(|n| is_op(n, "DequantizeLinear"));
    if !has_qdq {
        return report;
    }
    // Constant facts for Constant nodes and folded values (best effort).
    let _ = crate::analysis::infer::infer_graph(graph);
    let mut ed = Editor::new(graph);
    let mut lowered = Vec::new();
    for i in 0..ed.len() {
        if ed.is_removed(i) {
            continue;
        }
        let node = ed.node(i).clone();
        let is_conv = is_op(&node, "Conv");
        let is_gemm = is_op(&node, "Gemm");
        let is_matmul = is_op(&node, "MatMul");
        if !(is_conv || is_gemm || is_matmul) {
            continue;
        }
        let (Some(x_in), Some(w_in)) = (
            node.inputs.first().copied().flatten(),
            node.inputs.get(1).copied().flatten(),
        ) else {
            continue;
        };
        let (Some(dx), Some(dw)) = (
            producer_op(&ed, x_in, "DequantizeLinear"),
            producer_op(&ed, w_in, "DequantizeLinear"),
        ) else {
            continue;
        };
        let Some((x_scale, x_zp, x_dtype)) = per_tensor(&ed, ed.node(dx)) else {
            continue;
        };
        let Some(x_zp) = u8_zero_point(x_zp, x_dtype) else {
            continue;
        };
        let Some((w_vals, w_scale, w_axis)) = int8_weights(&ed, ed.node(dw)) else {
            continue;
        };
        let Some(w_shape) = ed.fact(w_in).concrete_shape().or_else(|| {
            ed.node(dw)
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|v| ed.fact(v).concrete_shape())
        }) else {
            continue;
        };
        // Output-channel axis of the weights, and whether this op can run on the int8 kernels.
        let group = node.attrs.int_or("group", 1);
        let (channel_axis, supported) = if is_conv {
            let depthwise = group > 1 && w_shape.get(1) == Some(&1);
            (0, !depthwise)
        } else if is_gemm {
            let trans_b = node.attrs.int_or("transB", 0) != 0;
            let plain = node.attrs.int_or("transA", 0) == 0
                && node.attrs.float_or("alpha", 1.0) == 1.0
                && node.attrs.float_or("beta", 1.0) == 1.0;
            (if trans_b { 0 } else { 1 }, plain && w_shape.len() == 2)
        } else {
            (1, w_shape.len() == 2)
        };
        let per_channel_ok = w_scale.len() == 1
            || (w_axis == channel_axis && w_scale.len() as u64 == w_shape[channel_axis as usize]);
        // Bias: a float constant or DequantizeLinear of a constant.
        let bias_in = node.inputs.get(2).copied().flatten();
        let bias: Option<Vec<f32>> = match bias_in {
            None => None,
            Some(b) => match producer_op(&ed, b, "DequantizeLinear") {
                Some(db) => match eval_dequantize(&ed, ed.node(db)) {
                    Some((v, _)) => Some(v),
                    None => continue,
                },
                None if ed.fact(b).konst.is_some() => match ed.const_f32(Some(b)) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => continue,
            },
        };
        if !supported || !per_channel_ok {
            continue;
        }
        // Weights in the layout of the int8 op: Conv [M, ...]; MatMul/Gemm [K, N].
        let (w_q, w_q_shape, channels) = if is_conv {
            (w_vals, w_shape.clone(), w_shape[0] as usize)
        } else if is_gemm && channel_axis == 0 {
            let (n, k) = (w_shape[0] as usize, w_shape[1] as usize);
            let mut t = vec![0.0; n * k];
            for r in 0..n {
                for c in 0..k {
                    t[c * n + r] = w_vals[r * k + c];
                }
            }
            (t, vec![k as u64, n as u64], n)
        } else {
            (w_vals, w_shape.clone(), w_shape[1] as usize)
        };
        if let Some(b) = &bias {
            if b.len() != channels && b.len() != 1 {
                continue;
            }
        }
        // The activation source: Q's f32 input when DQ(Q(x)) with the same parameters.
        let dx_in = ed.node(dx).inputs[0];
        let x_source = match dx_in.and_then(|v| producer_op(&ed, v, "QuantizeLinear")) {
            Some(q) => match per_tensor(&ed, ed.node(q)) {
                Some((s, z, t)) if s == x_scale && u8_zero_point(z, t) == Some(x_zp) => {
                    ed.node(q).inputs[0].unwrap_or(x_in)
                }
                _ => x_in,
            },
            None => x_in,
        };
        let name = node.name.clone();
        let w_id = int8_const(&mut ed, format!("{name}_wq"), w_q_shape, &w_q);
        let ws_id = ed.add_const(
            format!("{name}_wscale"),
            vec![w_scale.len() as u64],
            w_scale,
        );
        let xs_id = ed.add_const(format!("{name}_xscale"), vec![], vec![x_scale]);
        let xz_id = u8_scalar(&mut ed, format!("{name}_xzp"), x_zp);
        let b_id = bias.map(|b| {
            let len = b.len() as u64;
            ed.add_const(format!("{name}_bias"), vec![len], b)
        });
        let mut q = Node {
            name: name.clone(),
            op_type: if is_conv { "QConv" } else { "QMatMul" }.into(),
            domain: DOMAIN.into(),
            attrs: node.attrs.clone(),
            inputs: vec![
                Some(x_source),
                Some(w_id),
                b_id,
                None,
                Some(ws_id),
                Some(xs_id),
                Some(xz_id),
            ],
            outputs: node.outputs.clone(),
        };
        for key in ["transA", "transB", "alpha", "beta"] {
            q.attrs.0.remove(key);
        }
        ed.replace(i, q);
        lowered.push(i);
        if is_conv {
            report.qconv += 1;
        } else {
            report.qmatmul += 1;
        }
    }
    // Output side, once every op reads its producer's f32 value directly: a following
    // Relu/Clip joins the epilogue, and a Q → DQ pair that only float ops read becomes the
    // op's output grid.
    for &i in &lowered {
        absorb_residual(&mut ed, i);
        let out = ed.node(i).outputs[0];
        if let Some(OutputChain {
            activation: act,
            quantize: qn,
            dequantize: dqs,
            grid: (ys, yz),
        }) = output_chain(&ed, out)
        {
            if let Some(a) = act {
                absorb_activation(&mut ed, i, a);
            }
            let name = ed.node(i).name.clone();
            let ys_id = ed.add_const(format!("{name}_yscale"), vec![], vec![ys]);
            let yz_id = u8_scalar(&mut ed, format!("{name}_yzp"), yz);
            let target = ed.node(dqs[0]).outputs[0];
            for &d in &dqs[1..] {
                let other = ed.node(d).outputs[0];
                ed.rewire(other, target);
            }
            ed.remove(qn);
            for &d in &dqs {
                ed.remove(d);
            }
            ed.update(i, |q| {
                q.inputs.push(Some(ys_id));
                q.inputs.push(Some(yz_id));
                q.outputs = vec![target];
            });
        } else if let Some(a) = ed.sole_consumer(out) {
            if activation_node(&ed, ed.node(a)).is_some() {
                absorb_activation(&mut ed, i, a);
            }
        }
    }
    // Remaining Q → DQ pairs with equal parameters: FakeQuant.
    for i in 0..ed.len() {
        if ed.is_removed(i) || !is_op(ed.node(i), "DequantizeLinear") {
            continue;
        }
        let dq = ed.node(i).clone();
        if ed.consumers(dq.outputs[0]).is_empty() && !ed.is_graph_output(dq.outputs[0]) {
            continue;
        }
        let Some(src) = dq.inputs.first().copied().flatten() else {
            continue;
        };
        let Some(qi) = producer_op(&ed, src, "QuantizeLinear") else {
            continue;
        };
        let (Some((s1, z1, t1)), Some((s2, z2, t2))) =
            (per_tensor(&ed, ed.node(qi)), per_tensor(&ed, &dq))
        else {
            continue;
        };
        let (Some(z1), Some(z2)) = (u8_zero_point(z1, t1), u8_zero_point(z2, t2)) else {
            continue;
        };
        if s1 != s2 || z1 != z2 {
            continue;
        }
        let Some(x) = ed.node(qi).inputs.first().copied().flatten() else {
            continue;
        };
        let s_id = ed.add_const(format!("{}_fq_scale", dq.name), vec![], vec![s1]);
        let z_id = u8_scalar(&mut ed, format!("{}_fq_zp", dq.name), z1);
        let lowered_node = Node {
            name: dq.name.clone(),
            op_type: "FakeQuant".into(),
            domain: DOMAIN.into(),
            attrs: Default::default(),
            inputs: vec![Some(x), Some(s_id), Some(z_id)],
            outputs: dq.outputs.clone(),
        };
        ed.replace(i, lowered_node);
        report.fake_quant += 1;
    }
    // DequantizeLinear of constants (float-fallback weights, biases): evaluated once.
    for i in 0..ed.len() {
        if ed.is_removed(i) || !is_op(ed.node(i), "DequantizeLinear") {
            continue;
        }
        let dq = ed.node(i).clone();
        let out = dq.outputs[0];
        if ed.is_graph_output(out) || ed.consumers(out).is_empty() {
            continue;
        }
        let Some((values, shape)) = eval_dequantize(&ed, &dq) else {
            continue;
        };
        let consumers_quantized = ed
            .consumers(out)
            .iter()
            .all(|&c| matches!(ed.node(c).op_type.as_str(), "Conv" | "Gemm" | "MatMul"));
        let id = ed.add_const(format!("{}_value", dq.name), shape, values);
        ed.rewire(out, id);
        ed.remove(i);
        report.folded_dequantize += 1;
        if consumers_quantized {
            report.float_fallback += 1;
        }
    }
    // Q / DQ nodes nobody reads any more.
    loop {
        let dead: Vec<usize> = (0..ed.len())
            .filter(|&i| !ed.is_removed(i))
            .filter(|&i| {
                is_op(ed.node(i), "QuantizeLinear") || is_op(ed.node(i), "DequantizeLinear")
            })
            .filter(|&i| {
                ed.node(i)
                    .outputs
                    .iter()
                    .all(|&v| ed.consumers(v).is_empty() && !ed.is_graph_output(v))
            })
            .collect();
        if dead.is_empty() {
            break;
        }
        for i in dead {
            ed.remove(i);
        }
    }
    ed.finish();
    report
}

/// [`lower_qdq`] as a checked rewrite: the graph it leaves goes through the structural checks
/// the advisor's driver runs after every pass (no dangling reads, no cycle, every node within its
/// schema), and a failure names the pass. Shapes are re-inferred by whoever prepares the graph
/// next, with its bindings, as after any pass.
pub fn lower_checked(graph: &mut Graph) -> Result<LowerReport, AdvisorError> {
    let report = lower_qdq(graph);
    if !report.is_empty() {
        super::check_structure("lower-qdq", graph)?;
    }
    Ok(report)
}
