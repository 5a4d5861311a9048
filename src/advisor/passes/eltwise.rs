//! The `eltwise` pass: runs of element-wise ops (activations, math, binary ops with a scalar or
//! per-channel constant or the chain's own input, a batch norm's scale and shift) become one
//! `ElementwiseChain` node that the executor runs in one pass over memory; cancelling
//! Transpose/Reshape pairs are removed.

use super::{activation_of, channel_affine};
use crate::advisor::{AdvisorError, Change, Pass, PassContext, PassOutput};
use crate::analysis::edit::{set_attr, Editor};
use crate::analysis::graph::{Node, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::ops::fused::chain::{self, BinaryOp, MathOp, UnaryStep};
use crate::analysis::ops::fused::{ChainStep, DOMAIN};

pub struct Eltwise;

/// A run of per-channel affine ops from node `start` on: a BatchNormalization in inference
/// mode, or per-channel Mul/Add/Sub/Div by constants (a Caffe export's Scale layer after its
/// BN), each the sole reader of the one before.
struct AffineRun {
    members: Vec<usize>,
    scale: Vec<f32>,
    shift: Vec<f32>,
    /// The last member's output.
    output: ValueId,
}

/// The affine run starting at `start` on `input`, composed, when it holds a batch norm (which
/// the chain vocabulary has no step for) or more than two ops (that compose into one multiply
/// and one add); `None` otherwise: `chain_step` takes a Mul or an Add as it is, and the kernel
/// runs a constant Mul followed by an Add as one affine pass anyway.
fn affine_run(ed: &Editor, start: usize, input: ValueId, out_shape: &[u64]) -> Option<AffineRun> {
    // Per-channel constants need planes to stream: the chain kernel applies them one channel
    // block at a time, and on `[N, C]` (BatchNorm1d) a block is one element.
    let plane: u64 = out_shape.iter().skip(2).product();
    if out_shape.len() < 3 || plane < MIN_AFFINE_PLANE {
        return None;
    }
    let channels = usize::try_from(out_shape[1]).ok().filter(|&c| c > 0)?;
    let (rank, mut value, mut index) = (out_shape.len(), input, start);
    let (mut members, mut with_batch_norm) = (Vec::new(), false);
    let mut scale = vec![1.0f32; channels];
    let mut shift = vec![0.0f32; channels];
    loop {
        let node = ed.node(index);
        let same_shape = ed.fact(node.outputs[0]).concrete_shape().as_deref() == Some(out_shape);
        let Some((s, b, _)) = same_shape
            .then(|| channel_affine(ed, node, value, rank, 1, channels))
            .flatten()
        else {
            break;
        };
        for c in 0..channels {
            scale[c] *= s[c];
            shift[c] = shift[c] * s[c] + b[c];
        }
        with_batch_norm |= node.op_type == "BatchNormalization";
        members.push(index);
        value = node.outputs[0];
        match ed.sole_consumer(value) {
            Some(next) => index = next,
            None => break,
        }
    }
    (with_batch_norm || members.len() > 2).then_some(AffineRun {
        members,
        scale,
        shift,
        output: value,
    })
}

/// Fewest elements per channel for a batch norm to become chain steps (a channel block of the
/// chain kernel: below a vector or two its per-block overhead outweighs the pass it saves).
const MIN_AFFINE_PLANE: u64 = 32;

/// The composed scale or shift as the chain's constant: one value when every channel has the
/// same (a run of scalar ops, `(x / 255 − m) / s`), else one per channel on axis 1.
fn affine_constant(values: Vec<f32>, out_shape: &[u64]) -> (Vec<u64>, Vec<f32>) {
    if values.windows(2).all(|pair| pair[0] == pair[1]) {
        return (Vec::new(), values[..1].to_vec());
    }
    let shape = std::iter::once(out_shape[1])
        .chain(std::iter::repeat_n(1, out_shape.len() - 2))
        .collect();
    (shape, values)
}

/// Whether the node reading a lone batch norm's output would join its chain (else the batch
/// norm stays what it is: a chain of it alone saves nothing).
fn extends_chain(ed: &Editor, run: &AffineRun, chain_input: ValueId, out_shape: &[u64]) -> bool {
    ed.sole_consumer(run.output).is_some_and(|next| {
        let node = ed.node(next);
        ed.fact(node.outputs[0]).concrete_shape().as_deref() == Some(out_shape)
            && chain_step(
                ed,
                node,
                run.output,
                chain_input,
                &mut Vec::new(),
                out_shape,
            )
            .is_some()
    })
}

/// The chain step of one element-wise node continuing a chain on `value`.
fn chain_step(
    ed: &Editor,
    node: &Node,
    value: ValueId,
    chain_input: ValueId,
    operands: &mut Vec<ValueId>,
    out_shape: &[u64],
) -> Option<ChainStep> {
    if !node.domain.is_empty() || node.inputs.first().copied().flatten().is_none() {
        return None;
    }
    let unary = activation_of(ed, node)
        .map(UnaryStep::Activation)
        .or_else(|| MathOp::of_onnx(&node.op_type).map(UnaryStep::Math));
    if let Some(unary) = unary {
        return (node.inputs.first().copied().flatten() == Some(value))
            .then_some(ChainStep::Unary(unary));
    }
    let op = BinaryOp::of_onnx(&node.op_type)?;
    if node.inputs.len() != 2 {
        return None;
    }
    let (a, b) = (node.inputs[0]?, node.inputs[1]?);
    let (other, swapped) = if a == value {
        (b, false)
    } else if b == value {
        (a, true)
    } else {
        return None;
    };
    if other == chain_input {
        return Some(ChainStep::Input { op, swapped });
    }
    // A constant operand: a scalar, or one value per channel (axis 1 of an NCHW tensor).
    let fact = ed.fact(other);
    fact.konst.as_ref()?;
    let shape = fact.concrete_shape()?;
    let count: u64 = shape.iter().product();
    let rank = out_shape.len();
    let per_channel = rank >= 2 && shape.len() <= rank && {
        let padded: Vec<u64> = std::iter::repeat_n(1, rank - shape.len())
            .chain(shape.iter().copied())
            .collect();
        padded[1] == out_shape[1]
            && padded
                .iter()
                .enumerate()
                .all(|(axis, &d)| axis == 1 || d == 1)
    };
    if count != 1 && !per_channel {
        return None;
    }
    operands.push(other);
    Some(ChainStep::Const {
        op,
        index: operands.len(),
        swapped,
    })
}

impl Pass for Eltwise {
    fn name(&self) -> &'static str {
        "eltwise"
    }

    fn description(&self) -> &'static str {
        "chains of element-wise ops in one pass over memory; cancelling Transpose/Reshape pairs removed"
    }

    fn run(
        &self,
        ed: &mut Editor,
        _states: &[NodeState],
        _ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let mut changes = Vec::new();
        // Transpose pairs that cancel.
        for i in 0..ed.len() {
            if ed.is_removed(i)
                || ed.node(i).op_type != "Transpose"
                || !ed.node(i).domain.is_empty()
            {
                continue;
            }
            let first = ed.node(i).clone();
            let Some(j) = ed.sole_consumer(first.outputs[0]) else {
                continue;
            };
            let second = ed.node(j).clone();
            if second.op_type != "Transpose" || !second.domain.is_empty() {
                continue;
            }
            let (Some(p1), Some(p2)) = (first.attrs.ints("perm"), second.attrs.ints("perm")) else {
                continue;
            };
            let composed: Vec<i64> = p2.iter().map(|&k| p1[k as usize]).collect();
            if composed.iter().enumerate().all(|(k, &v)| v == k as i64)
                && !ed.is_graph_output(second.outputs[0])
            {
                let (Some(src), dst) = (first.inputs[0], second.outputs[0]) else {
                    continue;
                };
                ed.rewire(dst, src);
                ed.remove(i);
                ed.remove(j);
                changes.push(Change::new(
                    &[&first, &second],
                    "transposes cancel: both removed",
                ));
            }
        }
        // Reshape → Reshape back to the original shape.
        for i in 0..ed.len() {
            if ed.is_removed(i) || ed.node(i).op_type != "Reshape" {
                continue;
            }
            let first = ed.node(i).clone();
            let Some(j) = ed.sole_consumer(first.outputs[0]) else {
                continue;
            };
            let second = ed.node(j).clone();
            if second.op_type != "Reshape" || ed.is_graph_output(second.outputs[0]) {
                continue;
            }
            let Some(src) = first.inputs[0] else { continue };
            if ed.fact(src).concrete_shape() == ed.fact(second.outputs[0]).concrete_shape()
                && ed.fact(src).concrete_shape().is_some()
            {
                ed.rewire(second.outputs[0], src);
                ed.remove(i);
                ed.remove(j);
                changes.push(Change::new(
                    &[&first, &second],
                    "reshapes cancel: both removed",
                ));
            }
        }
        // Element-wise chains.
        for i in 0..ed.len() {
            if ed.is_removed(i) {
                continue;
            }
            let start = ed.node(i).clone();
            let Some(chain_input) = start.inputs.first().copied().flatten() else {
                continue;
            };
            if !ed.is_float(chain_input) {
                continue;
            }
            let Some(out_shape) = ed.fact(start.outputs[0]).concrete_shape() else {
                continue;
            };
            if ed.fact(chain_input).concrete_shape().as_ref() != Some(&out_shape) {
                continue;
            }
            let mut operands = Vec::new();
            let (mut steps, mut members, mut value) = if let Some(run) =
                affine_run(ed, i, chain_input, &out_shape).filter(|run| {
                    run.members.len() >= 2 || extends_chain(ed, run, chain_input, &out_shape)
                }) {
                // A batch norm and the per-channel scale/shift ops after it: one affine step
                // pair, x·scale + shift, with the scale and shift composed here.
                let (scale_shape, scale) = affine_constant(run.scale, &out_shape);
                let (shift_shape, shift) = affine_constant(run.shift, &out_shape);
                let scale = ed.add_const(format!("{}_scale", start.name), scale_shape, scale);
                let shift = ed.add_const(format!("{}_shift", start.name), shift_shape, shift);
                operands.extend([scale, shift]);
                let steps = vec![
                    ChainStep::Const {
                        op: BinaryOp::Mul,
                        index: 1,
                        swapped: false,
                    },
                    ChainStep::Const {
                        op: BinaryOp::Add,
                        index: 2,
                        swapped: false,
                    },
                ];
                (steps, run.members, run.output)
            } else {
                let Some(first_step) = chain_step(
                    ed,
                    &start,
                    chain_input,
                    usize::MAX,
                    &mut operands,
                    &out_shape,
                ) else {
                    continue;
                };
                (vec![first_step], vec![i], start.outputs[0])
            };
            // The chain input may be re-read by later steps (x · clip(x + 3)): allowed, since the
            // fused kernel reads it anyway.
            while let Some(next) = ed.sole_consumer(value) {
                let node = ed.node(next).clone();
                if ed.fact(node.outputs[0]).concrete_shape().as_ref() != Some(&out_shape) {
                    break;
                }
                let mut trial = operands.clone();
                let Some(step) = chain_step(ed, &node, value, chain_input, &mut trial, &out_shape)
                else {
                    break;
                };
                operands = trial;
                steps.push(step);
                members.push(next);
                value = node.outputs[0];
            }
            if members.len() < 2 {
                continue;
            }
            // Every reader of the chain input other than chain members must be outside: fine.
            let replaced: Vec<Node> = members.iter().map(|&k| ed.node(k).clone()).collect();
            let mut inputs = vec![Some(chain_input)];
            inputs.extend(operands.iter().map(|&v| Some(v)));
            let mut fused = Node {
                name: format!("{}_chain", start.name),
                op_type: "ElementwiseChain".into(),
                domain: DOMAIN.into(),
                attrs: Default::default(),
                inputs,
                outputs: vec![value],
            };
            set_attr(&mut fused, chain::ATTR, ChainStep::to_attr(&steps));
            for &k in &members[1..] {
                ed.remove(k);
            }
            ed.replace(members[0], fused);
            let refs: Vec<&Node> = replaced.iter().collect();
            changes.push(Change::new(
                &refs,
                &format!("{} element-wise ops in one pass", members.len()),
            ));
        }
        Ok(changes.into())
    }
}

#[cfg(test)]
#[path = "eltwise_tests.rs"]
mod tests;
