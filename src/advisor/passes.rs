//! The rewrite passes. Each is a pass over the IR that edits nodes as plain data through
//! `Editor`; the driver re-infers and validates the graph after each one and measures its gain.

use crate::analysis::graph::{Node, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::ops::fused::{self, Activation, DOMAIN};
use crate::analysis::ops::GemmConfig;

use super::{AdvisorError, Change, Pass, PassContext, PassOutput};
use crate::analysis::edit::Editor;

/// Every pass, in the order the driver applies them.
pub fn all_passes() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(Fold),
        Box::new(BnFold),
        Box::new(Fuse),
        Box::new(Eltwise),
        Box::new(super::quantize::Int8),
        Box::new(super::quantize::Half::bf16()),
        Box::new(super::quantize::Half::fp16()),
    ]
}

// ---------------------------------------------------------------------------------------------
// fold: constant folding and dead-node elimination

/// Removes nodes evaluated ahead of time from constants (their outputs become initializers),
/// inference-time no-ops (Identity, Dropout), and nodes whose outputs nobody reads.
pub struct Fold;

impl Pass for Fold {
    fn name(&self) -> &'static str {
        "fold"
    }

    fn description(&self) -> &'static str {
        "constant folding (weights generators, shape arithmetic) and dead-node elimination"
    }

    fn run(
        &self,
        ed: &mut Editor,
        states: &[NodeState],
        _ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let mut changes = Vec::new();
        for i in 0..ed.len() {
            let node = ed.node(i);
            let folded = matches!(states.get(i), Some(NodeState::Folded));
            let materialisable = node.outputs.iter().all(|&v| {
                ed.fact(v)
                    .konst
                    .as_ref()
                    .is_some_and(|t| !matches!(t.data, crate::analysis::tensor::TensorData::Opaque))
            });
            if folded && materialisable {
                changes.push(Change::new(
                    &[node],
                    "evaluated ahead of time; output kept as a constant",
                ));
                ed.remove(i);
            }
        }
        for i in 0..ed.len() {
            if ed.is_removed(i) {
                continue;
            }
            let node = ed.node(i).clone();
            let noop = node.op_type == "Identity"
                || (node.op_type == "Dropout" && node.outputs.len() == 1
                    || node.op_type == "Dropout"
                        && ed.consumers(node.outputs[1]).is_empty()
                        && !ed.is_graph_output(node.outputs[1]));
            if noop && node.domain.is_empty() {
                if let (Some(Some(input)), Some(&output)) =
                    (node.inputs.first(), node.outputs.first())
                {
                    if !ed.is_graph_output(output) {
                        ed.rewire(output, *input);
                        ed.remove(i);
                        changes.push(Change::new(&[&node], "no-op at inference: removed"));
                    }
                }
            }
        }
        loop {
            let dead: Vec<usize> = (0..ed.len())
                .filter(|&i| !ed.is_removed(i))
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
                changes.push(Change::new(&[ed.node(i)], "output never used: removed"));
                ed.remove(i);
            }
        }
        Ok(changes.into())
    }
}

// ---------------------------------------------------------------------------------------------
// bn-fold: BatchNormalization and per-channel affine Mul/Add/Sub/Div folded into the preceding
// Conv or Gemm

pub struct BnFold;

fn bn_scale_shift(ed: &Editor, bn: &Node) -> Option<(Vec<f32>, Vec<f32>)> {
    let gamma = ed.const_f32(bn.inputs.get(1).copied().flatten())?;
    let beta = ed.const_f32(bn.inputs.get(2).copied().flatten())?;
    let mean = ed.const_f32(bn.inputs.get(3).copied().flatten())?;
    let var = ed.const_f32(bn.inputs.get(4).copied().flatten())?;
    let eps = bn.attrs.float_or("epsilon", 1e-5);
    let scale: Vec<f32> = gamma
        .iter()
        .zip(&var)
        .map(|(&g, &v)| g / (v + eps).sqrt())
        .collect();
    let shift = beta
        .iter()
        .zip(&mean)
        .zip(&scale)
        .map(|((&b, &m), &s)| b - m * s)
        .collect();
    Some((scale, shift))
}

/// A constant operand as one value per output channel, when it broadcasts along the channel
/// axis only (axis 1 of a Conv's output, the last axis of a Gemm's) and so cannot change the
/// output's shape: `[C,1,1]`, `[1,C,1,1]`, `[C]` after a Gemm, a scalar.
fn per_channel_const(
    ed: &Editor,
    value: ValueId,
    output_rank: usize,
    channel_axis: usize,
    channels: usize,
) -> Option<Vec<f32>> {
    let shape = ed.fact(value).concrete_shape()?;
    let values = ed.const_f32(Some(value))?;
    if shape.len() > output_rank {
        return None;
    }
    let lead = output_rank - shape.len();
    for (axis, &extent) in shape.iter().enumerate() {
        let is_channel = axis + lead == channel_axis;
        if extent != 1 && !(is_channel && extent as usize == channels) {
            return None;
        }
    }
    match values.len() {
        1 => Some(vec![values[0]; channels]),
        n if n == channels => Some(values),
        _ => None,
    }
}

/// The affine map `y·scale + shift` per output channel that `node` applies to `input`, when it
/// is a BatchNormalization in inference mode or an element-wise op with a per-channel constant.
fn channel_affine(
    ed: &Editor,
    node: &Node,
    input: ValueId,
    output_rank: usize,
    channel_axis: usize,
    channels: usize,
) -> Option<(Vec<f32>, Vec<f32>, &'static str)> {
    if !node.domain.is_empty() || node.outputs.len() != 1 {
        return None;
    }
    let operand = |slot: usize| -> Option<Vec<f32>> {
        let value = node.inputs.get(slot).copied().flatten()?;
        per_channel_const(ed, value, output_rank, channel_axis, channels)
    };
    let first = node.inputs.first().copied().flatten() == Some(input);
    let second = node.inputs.get(1).copied().flatten() == Some(input);
    let ones = vec![1.0; channels];
    let zeros = vec![0.0; channels];
    match node.op_type.as_str() {
        "BatchNormalization" if first && node.attrs.int_or("training_mode", 0) == 0 => {
            let (scale, shift) = bn_scale_shift(ed, node)?;
            (scale.len() == channels).then_some((
                scale,
                shift,
                "BN scale and shift folded into the weights and bias",
            ))
        }
        "Mul" if first || second => Some((
            operand(if first { 1 } else { 0 })?,
            zeros,
            "per-channel Mul folded into the weights and bias",
        )),
        "Add" if first || second => Some((
            ones,
            operand(if first { 1 } else { 0 })?,
            "per-channel Add folded into the bias",
        )),
        "Sub" if first => {
            let shift = operand(1)?.iter().map(|&c| -c).collect();
            Some((ones, shift, "per-channel Sub folded into the bias"))
        }
        "Div" if first => {
            let divisors = operand(1)?;
            if divisors.iter().any(|&d| d == 0.0 || !d.is_finite()) {
                return None;
            }
            let scale = divisors.iter().map(|&d| 1.0 / d).collect();
            Some((
                scale,
                zeros,
                "per-channel Div folded into the weights and bias",
            ))
        }
        _ => None,
    }
}

impl Pass for BnFold {
    fn name(&self) -> &'static str {
        "bn-fold"
    }

    fn description(&self) -> &'static str {
        "BatchNormalization and per-channel Mul/Add/Sub/Div folded into the preceding Conv/Gemm \
         weights and bias"
    }

    fn run(
        &self,
        ed: &mut Editor,
        _states: &[NodeState],
        _ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let mut changes = Vec::new();
        for i in 0..ed.len() {
            if ed.is_removed(i) {
                continue;
            }
            let producer = ed.node(i).clone();
            let is_conv = producer.op_type == "Conv" && producer.domain.is_empty();
            let is_gemm = producer.op_type == "Gemm" && producer.domain.is_empty();
            if !is_conv && !is_gemm {
                continue;
            }
            let Some(weights) = ed.const_f32(producer.inputs.get(1).copied().flatten()) else {
                continue;
            };
            let w_fact = ed.fact(producer.inputs[1].unwrap_or_default()).clone();
            let Some(w_shape) = w_fact.concrete_shape() else {
                continue;
            };
            let out = producer.outputs[0];
            if !ed.is_float(out) {
                continue;
            }
            let Some(output_rank) = ed.fact(out).concrete_shape().map(|s| s.len()) else {
                continue;
            };
            let config = GemmConfig::from_attrs(&producer.attrs);
            let (channels, channel_axis) = if is_conv {
                (w_shape[0] as usize, 1)
            } else {
                if config.alpha != 1.0 || config.beta != 1.0 || w_shape.len() != 2 {
                    continue;
                }
                let n = if config.trans_b {
                    w_shape[0]
                } else {
                    w_shape[1]
                };
                (n as usize, output_rank.saturating_sub(1))
            };
            if channels == 0 || output_rank <= channel_axis {
                continue;
            }
            let bias_in = producer.inputs.get(2).copied().flatten();
            let mut bias = match bias_in {
                Some(b) => match ed.const_f32(Some(b)) {
                    Some(v) if v.len() == channels => v,
                    Some(v) if v.len() == 1 => vec![v[0]; channels],
                    _ => continue,
                },
                None => vec![0.0; channels],
            };
            // Absorb consumers one after another: conv → BN → Mul → Add is one affine map.
            let mut scale = vec![1.0f32; channels];
            let mut output = out;
            let mut absorbed = Vec::new();
            while let Some(j) = ed.sole_consumer(output) {
                let next = ed.node(j).clone();
                let Some((s, t, what)) =
                    channel_affine(ed, &next, output, output_rank, channel_axis, channels)
                else {
                    break;
                };
                for c in 0..channels {
                    scale[c] *= s[c];
                    bias[c] = bias[c] * s[c] + t[c];
                }
                output = next.outputs[0];
                changes.push(Change::new(&[&producer, &next], what));
                absorbed.push(j);
            }
            if absorbed.is_empty() {
                continue;
            }
            // Scale the weights along the output-channel axis.
            let mut new_w = weights;
            if is_conv {
                let per = new_w.len() / channels;
                for (c, chunk) in new_w.chunks_mut(per).enumerate() {
                    chunk.iter_mut().for_each(|w| *w *= scale[c]);
                }
            } else {
                let k = new_w.len() / channels;
                for kk in 0..k {
                    for (c, &s) in scale.iter().enumerate() {
                        let index = if config.trans_b {
                            c * k + kk
                        } else {
                            kk * channels + c
                        };
                        new_w[index] *= s;
                    }
                }
            }
            let w_name = format!("{}_bnfolded_w", producer.name);
            let b_name = format!("{}_bnfolded_b", producer.name);
            let w_id = ed.add_const(w_name, w_shape, new_w);
            let b_id = ed.add_const(b_name, vec![channels as u64], bias);
            ed.update(i, |node| {
                node.inputs[1] = Some(w_id);
                if node.inputs.len() < 3 {
                    node.inputs.resize(3, None);
                }
                node.inputs[2] = Some(b_id);
                node.outputs[0] = output;
            });
            for j in absorbed {
                ed.remove(j);
            }
        }
        Ok(changes.into())
    }
}

// ---------------------------------------------------------------------------------------------
// fuse: bias, residual and activation epilogues

pub struct Fuse;

/// The epilogue activation a single-input element-wise node applies, with its parameters.
fn activation_of(ed: &Editor, node: &Node) -> Option<Activation> {
    if !node.domain.is_empty() {
        return None;
    }
    // Clip's bounds: attributes (before opset 11) or constant inputs, ±∞ when absent.
    let clip_bounds = || {
        let lo = node
            .attrs
            .float("min")
            .or_else(|| ed.const_scalar(node.inputs.get(1).copied().flatten()))
            .unwrap_or(f32::NEG_INFINITY);
        let hi = node
            .attrs
            .float("max")
            .or_else(|| ed.const_scalar(node.inputs.get(2).copied().flatten()))
            .unwrap_or(f32::INFINITY);
        let constant = node
            .inputs
            .iter()
            .skip(1)
            .flatten()
            .all(|&v| ed.fact(v).konst.is_some());
        constant.then_some((lo, hi))
    };
    Activation::of_onnx(&node.op_type, &node.attrs, clip_bounds)
}

/// Converts a Conv/Gemm/MatMul into its fused form (idempotent).
fn to_fused(node: &mut Node) -> bool {
    if node.domain == DOMAIN {
        return true;
    }
    if !node.domain.is_empty() {
        return false;
    }
    let Some(fused) = fused::fused_of(&node.op_type) else {
        return false;
    };
    node.op_type = fused.to_string();
    node.domain = DOMAIN.to_string();
    true
}

fn is_fusable_producer(ed: &Editor, node: &Node) -> bool {
    let kind = (node.domain.is_empty() && fused::fused_of(&node.op_type).is_some())
        || (node.domain == DOMAIN && fused::base_of(&node.op_type).is_some());
    kind && (node.op_type != "Conv" || conv_on_kernels(ed, node))
}

/// Whether the executor's convolution kernels run this Conv (`exec::kernels_take_conv`): the
/// others run on the reference kernel, which has no fused form, so fusing one made a Conv3d +
/// Relu model fail under `bench --optimize` and `advise --verify`.
fn conv_on_kernels(ed: &Editor, node: &Node) -> bool {
    let operand = |i: usize| node.inputs.get(i).copied().flatten();
    let constant_operands = operand(1).is_some_and(|w| ed.fact(w).konst.is_some())
        && operand(2).is_none_or(|b| ed.fact(b).konst.is_some());
    crate::exec::kernels_take_conv(
        operand(0).and_then(|x| ed.fact(x).rank()),
        constant_operands,
    )
}

/// The other input of a binary node, given one of them.
fn other_input(node: &Node, value: ValueId) -> Option<ValueId> {
    match (
        node.inputs.first().copied().flatten(),
        node.inputs.get(1).copied().flatten(),
    ) {
        (Some(a), Some(b)) if a == value => Some(b),
        (Some(a), Some(b)) if b == value => Some(a),
        _ => None,
    }
}

impl Fuse {
    /// MatMul → Add(constant vector over the last axis) becomes FusedMatMul with a bias.
    fn bias(&self, ed: &mut Editor, i: usize) -> Option<Change> {
        let node = ed.node(i).clone();
        if !(node.domain.is_empty() && node.op_type == "MatMul") {
            return None;
        }
        let out = node.outputs[0];
        let j = ed.sole_consumer(out)?;
        let add = ed.node(j).clone();
        // A two-input Sum (older exports' residuals: the ONNX zoo's ResNets) is an Add.
        let is_add = add.op_type == "Add" || (add.op_type == "Sum" && add.inputs.len() == 2);
        if !(add.domain.is_empty() && is_add) {
            return None;
        }
        let bias = other_input(&add, out)?;
        let n = *ed.fact(out).concrete_shape()?.last()?;
        let bias_shape = ed.fact(bias).concrete_shape()?;
        if ed.fact(bias).konst.is_none()
            || bias_shape.iter().product::<u64>() != n
            || bias_shape.last() != Some(&n)
        {
            return None;
        }
        ed.update(i, |node_mut| {
            to_fused(node_mut);
            node_mut.inputs.resize(3, None);
            node_mut.inputs[2] = Some(bias);
            node_mut.outputs[0] = add.outputs[0];
        });
        ed.remove(j);
        Some(Change::new(
            &[&node, &add],
            "bias add fused into the GEMM epilogue",
        ))
    }

    /// Conv → Add(tensor of the same shape) becomes a residual input of FusedConv.
    fn residual(&self, ed: &mut Editor, i: usize) -> Option<Change> {
        let node = ed.node(i).clone();
        let conv = (node.domain.is_empty() && node.op_type == "Conv")
            || (node.domain == DOMAIN && node.op_type == "FusedConv");
        if !conv
            || (node.op_type == "Conv" && !conv_on_kernels(ed, &node))
            || Activation::present(&node.attrs)
            || node.inputs.get(3).copied().flatten().is_some()
        {
            return None;
        }
        let out = node.outputs[0];
        let j = ed.sole_consumer(out)?;
        let add = ed.node(j).clone();
        // A two-input Sum (older exports' residuals: the ONNX zoo's ResNets) is an Add.
        let is_add = add.op_type == "Add" || (add.op_type == "Sum" && add.inputs.len() == 2);
        if !(add.domain.is_empty() && is_add) {
            return None;
        }
        let other = other_input(&add, out)?;
        if other == out
            || ed.fact(other).concrete_shape()? != ed.fact(out).concrete_shape()?
            || !ed.is_float(other)
        {
            return None;
        }
        // The residual must be available before the conv runs: it is, unless it is produced after
        // the conv in the order, which would create a cycle through the conv.
        if let Some(p) = ed.producer_of(other) {
            if p > i {
                return None;
            }
        }
        ed.update(i, |node_mut| {
            to_fused(node_mut);
            node_mut.inputs.resize(4, None);
            node_mut.inputs[3] = Some(other);
            node_mut.outputs[0] = add.outputs[0];
        });
        ed.remove(j);
        Some(Change::new(
            &[&node, &add],
            "residual add fused into the convolution epilogue",
        ))
    }

    /// Producer → activation becomes the producer's epilogue activation.
    fn activation(&self, ed: &mut Editor, i: usize) -> Option<Change> {
        let node = ed.node(i).clone();
        if !is_fusable_producer(ed, &node) || Activation::present(&node.attrs) {
            return None;
        }
        let out = node.outputs[0];
        let j = ed.sole_consumer(out)?;
        let act = ed.node(j).clone();
        if act.inputs.first().copied().flatten() != Some(out) {
            return None;
        }
        let activation = activation_of(ed, &act)?;
        ed.update(i, |node_mut| {
            to_fused(node_mut);
            activation.write_attrs(&mut node_mut.attrs);
            node_mut.outputs[0] = act.outputs[0];
        });
        ed.remove(j);
        Some(Change::new(
            &[&node, &act],
            &format!("{activation} fused into the epilogue"),
        ))
    }

    /// Multi-node activation patterns on a producer's output: SiLU `x·σ(x)`, hard-swish
    /// `x·clip(x+3, 0, 6)/6`, erf-GELU `0.5·x·(1 + erf(x/√2))` (either order of the last two muls).
    fn pattern(&self, ed: &mut Editor, i: usize) -> Option<Change> {
        let node = ed.node(i).clone();
        if !is_fusable_producer(ed, &node)
            || Activation::present(&node.attrs)
            || ed.is_graph_output(node.outputs[0])
        {
            return None;
        }
        let x = node.outputs[0];
        let users = ed.consumers(x);
        if users.len() != 2 {
            return None;
        }
        let op = |k: usize| -> &str {
            if ed.node(k).domain.is_empty() {
                ed.node(k).op_type.as_str()
            } else {
                ""
            }
        };
        let scalar_operand =
            |k: usize, v: ValueId| -> Option<f32> { ed.const_scalar(other_input(ed.node(k), v)) };
        let approx = |a: f32, b: f32| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
        let (first, second) = (users[0], users[1]);
        let mut matched: Option<(Activation, Vec<usize>, ValueId)> = None;
        for (gate, mul) in [(first, second), (second, first)] {
            // SiLU: Sigmoid(x) → Mul(x, s).
            if op(gate) == "Sigmoid"
                && op(mul) == "Mul"
                && other_input(ed.node(mul), x) == Some(ed.node(gate).outputs[0])
                && ed.sole_consumer(ed.node(gate).outputs[0]) == Some(mul)
            {
                matched = Some((Activation::Silu, vec![gate, mul], ed.node(mul).outputs[0]));
                break;
            }
            // Hard-swish: Add(x, 3) → Clip(0, 6) → Mul(x, c) → Div(6) | Mul(1/6).
            if op(gate) == "Add"
                && approx(scalar_operand(gate, x).unwrap_or(0.0), 3.0)
                && op(mul) == "Mul"
            {
                let add_out = ed.node(gate).outputs[0];
                let Some(clip) = ed.sole_consumer(add_out) else {
                    continue;
                };
                if op(clip) != "Clip" {
                    continue;
                }
                let Some(Activation::Clip { min: lo, max: hi }) = activation_of(ed, ed.node(clip))
                else {
                    continue;
                };
                if !(approx(lo, 0.0) && approx(hi, 6.0))
                    || ed.sole_consumer(ed.node(clip).outputs[0]) != Some(mul)
                {
                    continue;
                }
                if other_input(ed.node(mul), x) != Some(ed.node(clip).outputs[0]) {
                    continue;
                }
                let Some(scale) = ed.sole_consumer(ed.node(mul).outputs[0]) else {
                    continue;
                };
                let mul_out = ed.node(mul).outputs[0];
                let ok = (op(scale) == "Div"
                    && ed.node(scale).inputs.first().copied().flatten() == Some(mul_out)
                    && approx(scalar_operand(scale, mul_out).unwrap_or(0.0), 6.0))
                    || (op(scale) == "Mul"
                        && approx(scalar_operand(scale, mul_out).unwrap_or(0.0), 1.0 / 6.0));
                if ok {
                    matched = Some((
                        Activation::HardSwish,
                        vec![gate, clip, mul, scale],
                        ed.node(scale).outputs[0],
                    ));
                    break;
                }
            }
            // GELU: Div(x, √2) | Mul(x, 1/√2) → Erf → Add(1) → Mul(x, ·) → Mul(0.5), or Mul(x, 0.5) first.
            if (op(gate) == "Div"
                && approx(
                    scalar_operand(gate, x).unwrap_or(0.0),
                    std::f32::consts::SQRT_2,
                ))
                || (op(gate) == "Mul"
                    && approx(
                        scalar_operand(gate, x).unwrap_or(0.0),
                        std::f32::consts::FRAC_1_SQRT_2,
                    ))
            {
                let Some(erf) = ed.sole_consumer(ed.node(gate).outputs[0]) else {
                    continue;
                };
                if op(erf) != "Erf" {
                    continue;
                }
                let Some(add) = ed.sole_consumer(ed.node(erf).outputs[0]) else {
                    continue;
                };
                if op(add) != "Add"
                    || !approx(
                        scalar_operand(add, ed.node(erf).outputs[0]).unwrap_or(0.0),
                        1.0,
                    )
                {
                    continue;
                }
                let add_out = ed.node(add).outputs[0];
                let Some(m1) = ed.sole_consumer(add_out) else {
                    continue;
                };
                if op(m1) != "Mul" {
                    continue;
                }
                let m1_other = other_input(ed.node(m1), add_out);
                if m1_other == Some(x) && mul == m1 {
                    // x·(1+erf) then ·0.5
                    let Some(half) = ed.sole_consumer(ed.node(m1).outputs[0]) else {
                        continue;
                    };
                    if op(half) == "Mul"
                        && approx(
                            scalar_operand(half, ed.node(m1).outputs[0]).unwrap_or(0.0),
                            0.5,
                        )
                    {
                        matched = Some((
                            Activation::Gelu,
                            vec![gate, erf, add, m1, half],
                            ed.node(half).outputs[0],
                        ));
                        break;
                    }
                } else if op(mul) == "Mul"
                    && approx(scalar_operand(mul, x).unwrap_or(0.0), 0.5)
                    && m1_other == Some(ed.node(mul).outputs[0])
                {
                    // (0.5·x)·(1+erf)
                    matched = Some((
                        Activation::Gelu,
                        vec![gate, erf, add, mul, m1],
                        ed.node(m1).outputs[0],
                    ));
                    break;
                }
            }
        }
        let (activation, members, final_out) = matched?;
        let mut replaced = vec![node.clone()];
        replaced.extend(members.iter().map(|&k| ed.node(k).clone()));
        ed.update(i, |node_mut| {
            to_fused(node_mut);
            activation.write_attrs(&mut node_mut.attrs);
            node_mut.outputs[0] = final_out;
        });
        for k in members {
            ed.remove(k);
        }
        let refs: Vec<&Node> = replaced.iter().collect();
        Some(Change::new(
            &refs,
            &format!("{activation} pattern fused into the epilogue"),
        ))
    }
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        "fuse"
    }

    fn description(&self) -> &'static str {
        "Conv/Gemm/MatMul with bias, residual add and activation (ReLU, Clip, LeakyReLU, HardSigmoid, HardSwish, Sigmoid, SiLU, GELU) in one kernel"
    }

    fn run(
        &self,
        ed: &mut Editor,
        _states: &[NodeState],
        _ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let mut changes = Vec::new();
        loop {
            let before = changes.len();
            for i in 0..ed.len() {
                if ed.is_removed(i) {
                    continue;
                }
                for step in [Fuse::bias, Fuse::residual, Fuse::activation, Fuse::pattern] {
                    if ed.is_removed(i) {
                        break;
                    }
                    if let Some(change) = step(self, ed, i) {
                        changes.push(change);
                    }
                }
            }
            if changes.len() == before {
                break;
            }
        }
        Ok(changes.into())
    }
}

mod eltwise;
pub use eltwise::Eltwise;

#[cfg(test)]
#[path = "passes_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "passes_quant_tests.rs"]
mod quant_tests;
