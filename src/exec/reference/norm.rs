//! Reference normalisations and losses: LpNormalization, LayerNormalization with its statistics
//! outputs, RMSNormalization, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

use super::*;

pub(super) fn lp_normalization(x: &RtTensor, axis: i64, p: i64) -> Result<RtTensor> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    let mut values = floats(x);
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let norm: f32 = match p {
                1 => (0..len).map(|a| values[at(a)].abs()).sum(),
                2 => (0..len)
                    .map(|a| values[at(a)] * values[at(a)])
                    .sum::<f32>()
                    .sqrt(),
                _ => return Err(format!("LpNormalization: p = {p} (1 or 2)")),
            };
            if norm != 0.0 {
                for a in 0..len {
                    values[at(a)] /= norm;
                }
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(values),
    })
}

/// LayerNormalization or, with `rms`, RMSNormalization over the dims from `axis` on (outputs Y,
/// mean, inverse standard deviation); `scale` and `bias` broadcast against those dims.
pub(super) fn layer_norm(
    x: &RtTensor,
    scale: &RtTensor,
    bias: Option<&RtTensor>,
    axis: i64,
    epsilon: f32,
    rms: bool,
) -> Result<Vec<RtTensor>> {
    let rank = x.shape.len();
    let axis = axis_of(axis, rank)?;
    let row_shape = &x.shape[axis..];
    let row: usize = row_shape.iter().product();
    let rows: usize = x.shape[..axis].iter().product();
    let row_strides = strides(row_shape);
    let parameter = |p: &RtTensor| -> Result<Vec<f32>> {
        if p.shape.len() > row_shape.len() {
            return Err("a parameter has a higher rank than the normalised dims".into());
        }
        broadcast_shape(row_shape, &p.shape)
            .ok()
            .filter(|s| s == row_shape)
            .ok_or("a parameter does not broadcast to the normalised dims")?;
        let values = floats(p);
        Ok((0..row)
            .map(|n| values[broadcast_index(n, row_shape, &row_strides, &p.shape)])
            .collect())
    };
    let gamma = parameter(scale)?;
    let beta = bias.map(parameter).transpose()?;
    let values = floats(x);
    let mut y = vec![0.0f32; values.len()];
    let (mut means, mut inv_stds) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    for r in 0..rows {
        let xs = &values[r * row..(r + 1) * row];
        let mean = if rms {
            0.0
        } else {
            xs.iter().map(|&v| f64::from(v)).sum::<f64>() / row.max(1) as f64
        };
        let var = xs
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / row.max(1) as f64;
        let inv_std = 1.0 / (var + f64::from(epsilon)).sqrt();
        for (n, &v) in xs.iter().enumerate() {
            let normalised = ((f64::from(v) - mean) * inv_std) as f32 * gamma[n];
            y[r * row + n] = normalised + beta.as_ref().map_or(0.0, |b| b[n]);
        }
        means[r] = mean as f32;
        inv_stds[r] = inv_std as f32;
    }
    let mut stats_shape = x.shape[..axis].to_vec();
    stats_shape.extend(std::iter::repeat_n(1, rank - axis));
    let mut outputs = vec![RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(y),
    }];
    // The statistics outputs: mean (zero for RMSNorm) and inverse standard deviation (the
    // inverse RMS); a node that does not name them ignores them.
    outputs.push(RtTensor {
        shape: stats_shape.clone(),
        data: RtData::F32(means),
    });
    outputs.push(RtTensor {
        shape: stats_shape,
        data: RtData::F32(inv_stds),
    });
    Ok(outputs)
}

/// log-softmax over axis 1 (the class axis of the losses).
pub(super) fn log_softmax_axis1(x: &RtTensor) -> Result<RtTensor> {
    if x.shape.len() < 2 {
        return Err("the scores need a class axis (rank 2 or more)".into());
    }
    let (outer, len, inner) = around(&x.shape, 1);
    let mut values = floats(x);
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let max = (0..len)
                .map(|a| values[at(a)])
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = (0..len).map(|a| (values[at(a)] - max).exp()).sum();
            let log_sum = sum.ln() + max;
            for a in 0..len {
                values[at(a)] -= log_sum;
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(values),
    })
}

/// NegativeLogLikelihoodLoss: `input` [N, C, d...] (log-probabilities), `target` [N, d...].
pub(super) fn nll_loss(
    input: &RtTensor,
    target: &RtTensor,
    weight: Option<&RtTensor>,
    ignore_index: Option<i64>,
    reduction: &str,
) -> Result<RtTensor> {
    if input.shape.len() < 2 {
        return Err("the input needs a class axis".into());
    }
    let (n, classes, inner) = around(&input.shape, 1);
    let values = floats(input);
    let targets = ints(target);
    if targets.len() != n * inner {
        return Err("target shape does not match the input's".into());
    }
    let weights = weight.map(floats);
    let mut losses = vec![0.0f32; n * inner];
    let mut weight_sum = 0.0f32;
    for b in 0..n {
        for i in 0..inner {
            let class = targets[b * inner + i];
            if Some(class) == ignore_index {
                continue;
            }
            let c = index_in(class, classes)?;
            let w = weights.as_ref().map_or(1.0, |w| w[c]);
            losses[b * inner + i] = -values[(b * classes + c) * inner + i] * w;
            weight_sum += w;
        }
    }
    let mut shape = target.shape.clone();
    let data = match reduction {
        "none" => losses,
        "sum" => {
            shape.clear();
            vec![losses.iter().sum()]
        }
        "mean" => {
            shape.clear();
            let total: f32 = losses.iter().sum();
            vec![if weight_sum == 0.0 {
                0.0
            } else {
                total / weight_sum
            }]
        }
        other => return Err(format!("unknown reduction `{other}`")),
    };
    Ok(RtTensor {
        shape,
        data: RtData::F32(data),
    })
}

/// GroupNormalization: statistics over each group of channels and the spatial dims, then the
/// per-channel (opset 21) or per-group (opset 18) scale and bias.
pub(super) fn group_norm(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = get(0).ok_or("no input")?;
    let (scale, bias) = (
        floats(get(1).ok_or("no scale")?),
        floats(get(2).ok_or("no bias")?),
    );
    let groups = node.attrs.int_or("num_groups", 1).max(1) as usize;
    let epsilon = f64::from(node.attrs.float_or("epsilon", 1e-5));
    if x.shape.len() < 2 || x.shape[1] % groups != 0 {
        return Err("GroupNormalization: channels not divisible by num_groups".into());
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    let per_group = c / groups * plane;
    let values = floats(x);
    let mut out = vec![0.0f32; values.len()];
    for b in 0..n {
        for g in 0..groups {
            let start = (b * groups + g) * per_group;
            let slice = &values[start..start + per_group];
            // Sums in f64 over eight partial lanes (they vectorise; one running sum does not),
            // then each channel's plane in one pass (no division per element to find it).
            let lanes_sum = |f: &dyn Fn(f32) -> f64| {
                let mut lanes = [0f64; 8];
                let chunks = slice.chunks_exact(8);
                let tail: f64 = chunks.remainder().iter().map(|&v| f(v)).sum();
                for chunk in chunks {
                    for (lane, &v) in lanes.iter_mut().zip(chunk) {
                        *lane += f(v);
                    }
                }
                lanes.iter().sum::<f64>() + tail
            };
            let count = per_group.max(1) as f64;
            let mean = lanes_sum(&|v| f64::from(v)) / count;
            let var = lanes_sum(&|v| (f64::from(v) - mean).powi(2)) / count;
            let inv = 1.0 / (var + epsilon).sqrt();
            for (k, (xs, ys)) in slice
                .chunks(plane.max(1))
                .zip(out[start..start + per_group].chunks_mut(plane.max(1)))
                .enumerate()
            {
                // Opset 18 gives one scale and bias per group, 21 one per channel.
                let p = if opset < 21 && scale.len() == groups {
                    g
                } else {
                    g * (c / groups) + k
                };
                let (gain, shift) = (scale[p], bias[p]);
                for (o, &v) in ys.iter_mut().zip(xs) {
                    *o = ((f64::from(v) - mean) * inv) as f32 * gain + shift;
                }
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(out),
    })
}

/// MeanVarianceNormalization: (x − mean) / sqrt(variance) over `axes` (default 0, 2, 3).
pub(super) fn mean_variance(node: &Node, x: &RtTensor) -> Result<RtTensor> {
    let rank = x.shape.len();
    let axes: Vec<usize> = node
        .attrs
        .ints("axes")
        .map_or_else(|| vec![0, 2, 3], <[i64]>::to_vec)
        .iter()
        .map(|&a| axis_of(a, rank))
        .collect::<Result<_>>()?;
    let x_strides = strides(&x.shape);
    let key = |n: usize| -> usize {
        (0..rank)
            .filter(|d| !axes.contains(d))
            .fold(0, |k, d| k * x.shape[d] + n / x_strides[d] % x.shape[d])
    };
    let values = floats(x);
    let groups: usize = (0..rank)
        .filter(|d| !axes.contains(d))
        .map(|d| x.shape[d])
        .product();
    let (mut sum, mut square, mut count) = (
        vec![0.0f64; groups],
        vec![0.0f64; groups],
        vec![0usize; groups],
    );
    for (n, &v) in values.iter().enumerate() {
        let k = key(n);
        sum[k] += f64::from(v);
        square[k] += f64::from(v).powi(2);
        count[k] += 1;
    }
    let out = values
        .iter()
        .enumerate()
        .map(|(n, &v)| {
            let k = key(n);
            let mean = sum[k] / count[k].max(1) as f64;
            let var = square[k] / count[k].max(1) as f64 - mean * mean;
            ((f64::from(v) - mean) / (var.max(0.0).sqrt() + 1e-9)) as f32
        })
        .collect();
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(out),
    })
}
