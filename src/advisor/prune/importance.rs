//! Channel importance and the statistics it is measured from, and the mean fold that makes
//! a removed channel's average contribution survive (see the module doc of `prune`).

use std::collections::{HashMap, HashSet};

use super::spaces::f32_const;
use super::ChannelSpace;
use crate::analysis::edit::Editor;
use crate::analysis::graph::ValueId;
use crate::analysis::tensor::Tensor;

/// Per-feature moments along axis 1 of the activations the spaces' consumers read, from
/// calibration runs, by value name (names survive pruning; value ids need not).
#[derive(Clone, Debug, Default)]
pub struct ActivationStats {
    moments: HashMap<String, Moments>,
}

#[derive(Clone, Debug, Default)]
struct Moments {
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
    count: f64,
}

impl ActivationStats {
    /// Adds one tensor of `value` (shape `[N, C, ...]` or `[N, F]`).
    pub fn observe(&mut self, value: &str, shape: &[usize], data: &[f32]) {
        if shape.len() < 2 {
            return;
        }
        let features = shape[1];
        let inner: usize = shape[2..].iter().product();
        let m = self.moments.entry(value.to_string()).or_default();
        if m.sum.len() != features {
            *m = Moments {
                sum: vec![0.0; features],
                sum_sq: vec![0.0; features],
                count: 0.0,
            };
        }
        for (i, chunk) in data.chunks(inner.max(1)).enumerate() {
            let f = i % features;
            for &x in chunk {
                m.sum[f] += x as f64;
                m.sum_sq[f] += (x as f64) * (x as f64);
            }
        }
        m.count += (data.len() / features.max(1)) as f64;
    }

    /// Per-feature mean and variance of `value`.
    fn mean_var(&self, value: &str) -> Option<(Vec<f64>, Vec<f64>)> {
        let m = self.moments.get(value).filter(|m| m.count > 0.0)?;
        let mean: Vec<f64> = m.sum.iter().map(|s| s / m.count).collect();
        let var = m
            .sum_sq
            .iter()
            .zip(&mean)
            .map(|(sq, mu)| (sq / m.count - mu * mu).max(0.0))
            .collect();
        Some((mean, var))
    }
}

/// The activations the consumers of the prunable spaces read: what [`ActivationStats`]
/// should observe.
pub fn observed_values(spaces: &[ChannelSpace]) -> Vec<ValueId> {
    let mut values: Vec<ValueId> = spaces
        .iter()
        .filter(|s| s.frozen.is_none())
        .flat_map(|s| s.consumers.iter().map(|c| c.reads))
        .collect();
    values.sort_unstable();
    values.dedup();
    values
}

/// Per-channel L2 norms of a constant along `axis` (`block` entries per channel).
fn channel_norms(tensor: &Tensor, axis: usize, block: usize) -> Option<Vec<f64>> {
    let values = tensor.to_f32_vec()?;
    let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
    let dim = *shape.get(axis)?;
    let inner: usize = shape[axis + 1..].iter().product();
    let channels = dim / block.max(1);
    let mut norms = vec![0f64; channels];
    for (i, &v) in values.iter().enumerate() {
        let along = (i / inner) % dim;
        norms[along / block.max(1)] += (v as f64) * (v as f64);
    }
    Some(norms.into_iter().map(f64::sqrt).collect())
}

fn normalised(values: Vec<f64>) -> Vec<f64> {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    values
        .into_iter()
        .map(|v| if mean > 0.0 { v / mean } else { 1.0 })
        .collect()
}

pub(super) fn importance(ed: &Editor, space: &ChannelSpace) -> Vec<f64> {
    let mut total = vec![0f64; space.channels];
    for (cut, bn) in &space.source_cuts {
        let node = ed.node(cut.node);
        let Some(w) = f32_const(ed, node.inputs[cut.slot]) else {
            continue;
        };
        let Some(mut norms) = channel_norms(w, cut.axis, cut.block).map(normalised) else {
            continue;
        };
        if let Some(bn) = bn.map(|b| ed.node(b)) {
            let gamma = ed.const_f32(bn.inputs.get(1).copied().flatten());
            let var = ed.const_f32(bn.inputs.get(4).copied().flatten());
            if let (Some(gamma), Some(var)) = (gamma, var) {
                let eps = bn.attrs.float_or("epsilon", 1e-5) as f64;
                let scale = normalised(
                    gamma
                        .iter()
                        .zip(&var)
                        .map(|(&g, &v)| (g as f64).abs() / (v as f64 + eps).sqrt())
                        .collect(),
                );
                norms.iter_mut().zip(&scale).for_each(|(n, s)| *n *= s);
            }
        }
        if norms.len() == total.len() {
            total.iter_mut().zip(&norms).for_each(|(t, n)| *t += n);
        }
    }
    total
}

/// Index along `in_axis` and along the output axis of every element of a consumer weight.
fn weight_axes(shape: &[u64], in_axis: usize) -> (usize, usize, usize, usize) {
    let out_axis = if shape.len() == 2 { 1 - in_axis } else { 0 };
    let stride = |axis: usize| shape[axis + 1..].iter().product::<u64>() as usize;
    (
        stride(in_axis),
        shape[in_axis] as usize,
        stride(out_axis),
        shape[out_axis] as usize,
    )
}

/// Importance from what the consumers would lose: per channel, √(Σ_f ‖W[:, f]‖² · var(x_f))
/// over the channel's features, normalised per consumer and summed. The mean of a removed
/// channel is folded into the consumer's bias (`prune_with`), so only its variation is lost;
/// a consumer without a bias (MatMul) loses the second moment, var + mean².
pub(super) fn measured_importance(
    ed: &Editor,
    space: &ChannelSpace,
    stats: &ActivationStats,
) -> Option<Vec<f64>> {
    let mut total = vec![0f64; space.channels];
    let mut used = 0;
    for consumer in &space.consumers {
        let name = &ed.graph.values[consumer.reads].name;
        let Some((mean, var)) = stats.mean_var(name) else {
            continue;
        };
        // With no bias to fold the mean into (MatMul), the whole second moment is lost.
        let lost: Vec<f64> = match consumer.bias_slot {
            Some(_) => var,
            None => var.iter().zip(&mean).map(|(v, m)| v + m * m).collect(),
        };
        let node = ed.node(consumer.cut.node);
        let Some(w) = f32_const(ed, node.inputs[consumer.cut.slot]) else {
            continue;
        };
        let Some(values) = w.to_f32_vec() else {
            continue;
        };
        let (in_stride, in_dim, _, _) = weight_axes(&w.shape, consumer.cut.axis);
        if in_dim != lost.len() || in_dim != space.channels * consumer.cut.block {
            continue;
        }
        let mut column_sq = vec![0f64; in_dim];
        for (i, &v) in values.iter().enumerate() {
            column_sq[(i / in_stride) % in_dim] += (v as f64) * (v as f64);
        }
        let per_channel: Vec<f64> = (0..space.channels)
            .map(|c| {
                let block = consumer.cut.block;
                (c * block..(c + 1) * block)
                    .map(|f| column_sq[f] * lost[f])
                    .sum::<f64>()
                    .sqrt()
            })
            .collect();
        total
            .iter_mut()
            .zip(normalised(per_channel))
            .for_each(|(t, n)| *t += n);
        used += 1;
    }
    (used > 0).then_some(total)
}

/// Folds the mean of the removed features into each consumer's bias: the consumer's output
/// keeps what those channels contributed on average (exact for a constant channel; at
/// zero-padded borders of a convolution the fold slightly over-compensates).
pub(super) fn compensate(
    ed: &mut Editor,
    space: &ChannelSpace,
    keep: &[usize],
    stats: &ActivationStats,
) {
    let kept: HashSet<usize> = keep.iter().copied().collect();
    for consumer in &space.consumers {
        let Some(bias_slot) = consumer.bias_slot else {
            continue;
        };
        let name = ed.graph.values[consumer.reads].name.clone();
        let Some((mean, _)) = stats.mean_var(&name) else {
            continue;
        };
        let node = consumer.cut.node;
        let Some(w) = f32_const(ed, ed.node(node).inputs[consumer.cut.slot]) else {
            continue;
        };
        let Some(values) = w.to_f32_vec() else {
            continue;
        };
        let (in_stride, in_dim, out_stride, out_dim) = weight_axes(&w.shape, consumer.cut.axis);
        if in_dim != mean.len() {
            continue;
        }
        let block = consumer.cut.block.max(1);
        let mut delta = vec![0f64; out_dim];
        for (i, &v) in values.iter().enumerate() {
            let f = (i / in_stride) % in_dim;
            if !kept.contains(&(f / block)) {
                delta[(i / out_stride) % out_dim] += v as f64 * mean[f];
            }
        }
        // Gemm: Y = α·A·B + β·C, so the lost α·delta enters C divided by β.
        let attrs = &ed.node(node).attrs;
        let (alpha, beta) = if ed.node(node).op_type == "Gemm" {
            (
                attrs.float_or("alpha", 1.0) as f64,
                attrs.float_or("beta", 1.0) as f64,
            )
        } else {
            (1.0, 1.0)
        };
        if beta == 0.0 {
            continue;
        }
        let bias_value = ed.node(node).inputs.get(bias_slot).copied().flatten();
        let mut bias: Vec<f32> = match bias_value {
            None => vec![0.0; out_dim],
            Some(b) => {
                // Per output feature ([F], [1, F]) or one value; a bias per row is left alone.
                let shape = ed.fact(b).concrete_shape().unwrap_or_default();
                let per_feature = shape.iter().product::<u64>() == 1
                    || (shape.last() == Some(&(out_dim as u64))
                        && shape.iter().rev().skip(1).all(|&d| d == 1));
                match ed.const_f32(Some(b)) {
                    Some(values) if per_feature && values.len() == out_dim => values,
                    Some(values) if per_feature && values.len() == 1 => vec![values[0]; out_dim],
                    _ => continue,
                }
            }
        };
        bias.iter_mut()
            .zip(&delta)
            .for_each(|(b, d)| *b += (alpha * d / beta) as f32);
        let base = format!("{}_bias_compensated", ed.node(node).name);
        let id = ed.add_const(base, vec![out_dim as u64], bias);
        ed.update(node, |node| {
            if node.inputs.len() <= bias_slot {
                node.inputs.resize(bias_slot + 1, None);
            }
            node.inputs[bias_slot] = Some(id);
        });
    }
}
