//! Reference attention: ONNX Attention (opset 23-25) and RotaryEmbedding.

use super::*;

/// A [batch, heads, sequence, head] view of a 3-D [batch, sequence, heads · head] tensor.
pub(super) fn split_heads(t: &RtTensor, heads: usize) -> Result<(Vec<f32>, [usize; 4])> {
    let [b, s, width] = t.shape[..] else {
        return Err("expected a 3-D tensor".into());
    };
    if heads == 0 || width % heads != 0 {
        return Err(format!(
            "a width of {width} does not split into {heads} heads"
        ));
    }
    let d = width / heads;
    let values = floats(t);
    let mut out = vec![0.0f32; values.len()];
    for bi in 0..b {
        for si in 0..s {
            for h in 0..heads {
                for di in 0..d {
                    out[((bi * heads + h) * s + si) * d + di] =
                        values[(bi * s + si) * width + h * d + di];
                }
            }
        }
    }
    Ok((out, [b, heads, s, d]))
}

pub(super) fn as_4d(t: &RtTensor) -> Result<(Vec<f32>, [usize; 4])> {
    match t.shape[..] {
        [b, h, s, d] => Ok((floats(t), [b, h, s, d])),
        _ => Err("expected a 4-D tensor".into()),
    }
}

/// Concatenates two [b, h, s, d] tensors along s.
pub(super) fn concat_seq(
    past: &(Vec<f32>, [usize; 4]),
    new: &(Vec<f32>, [usize; 4]),
) -> Result<(Vec<f32>, [usize; 4])> {
    let ([b, h, p, d], [b2, h2, n, d2]) = (past.1, new.1);
    if (b, h, d) != (b2, h2, d2) {
        return Err("the cache and the new keys or values disagree in shape".into());
    }
    let mut out = Vec::with_capacity(b * h * (p + n) * d);
    for row in 0..b * h {
        out.extend_from_slice(&past.0[row * p * d..(row + 1) * p * d]);
        out.extend_from_slice(&new.0[row * n * d..(row + 1) * n * d]);
    }
    Ok((out, [b, h, p + n, d]))
}

/// ONNX Attention (opset 23+): softmax(Q·Kᵀ·scale (softcapped) + bias)·V, the bias made of the
/// mask (bool: false = masked; float: added; padded with masked positions when shorter than the
/// keys), the causal mask aligned to the bottom right (a query attends keys up to its own
/// position after the cache), the sliding window of opset 25 and the non-pad KV lengths; rows
/// with every key masked give 0.
pub(super) fn attention(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let attrs = &node.attrs;
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let (q_in, k_in, v_in) = (
        get(0).ok_or("Attention: no Q")?,
        get(1).ok_or("Attention: no K")?,
        get(2).ok_or("Attention: no V")?,
    );
    let three_d = q_in.shape.len() == 3;
    let (q, k, v) = if three_d {
        let q_heads = attrs
            .int("q_num_heads")
            .ok_or("Attention: no q_num_heads")? as usize;
        let kv_heads = attrs
            .int("kv_num_heads")
            .ok_or("Attention: no kv_num_heads")? as usize;
        (
            split_heads(q_in, q_heads)?,
            split_heads(k_in, kv_heads)?,
            split_heads(v_in, kv_heads)?,
        )
    } else {
        (as_4d(q_in)?, as_4d(k_in)?, as_4d(v_in)?)
    };
    let past_len = get(4).map_or(0, |p| p.shape.get(2).copied().unwrap_or(0));
    let k = match get(4) {
        Some(p) => concat_seq(&as_4d(p)?, &k)?,
        None => k,
    };
    let v = match get(5) {
        Some(p) => concat_seq(&as_4d(p)?, &v)?,
        None => v,
    };
    let [batch, q_heads, q_len, head] = q.1;
    let [_, kv_heads, total, key_head] = k.1;
    let value_head = v.1[3];
    if key_head != head || kv_heads == 0 || q_heads % kv_heads != 0 || v.1[2] != total {
        return Err("Attention: Q, K and V do not fit together".into());
    }
    let group = q_heads / kv_heads;
    let scale = attrs
        .float("scale")
        .map_or(1.0 / (head as f64).sqrt(), f64::from);
    let softcap = f64::from(attrs.float_or("softcap", 0.0));
    let causal = attrs.int_or("is_causal", 0) != 0;
    let mode = attrs.int_or("qk_matmul_output_mode", 0);
    let (left, right) = (
        attrs.int_or("left_window_size", -1),
        attrs.int_or("right_window_size", -1),
    );
    let nonpad: Option<Vec<i64>> = get(6).map(ints);
    // The mask, broadcast to [batch, q_heads, q_len, total] (right-aligned), padded at the end.
    let mask = get(3);
    let mask_bias = |b: usize, h: usize, i: usize, j: usize| -> f64 {
        let Some(m) = mask else { return 0.0 };
        let rank = m.shape.len();
        let last = m.shape.last().copied().unwrap_or(1);
        if j >= last && last != 1 {
            return f64::NEG_INFINITY;
        }
        let coords = [b, h, i, j];
        let mut index = 0;
        let mut stride = 1;
        for d in 0..rank {
            let axis = rank - 1 - d;
            let dim = m.shape[axis];
            let coord = if dim == 1 { 0 } else { coords[3 - d] };
            index += coord * stride;
            stride *= dim;
        }
        match &m.data {
            RtData::I64(values) => {
                if values[index] != 0 {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            }
            RtData::F32(values) => f64::from(values[index]),
        }
    };
    let mut y = vec![0.0f32; batch * q_heads * q_len * value_head];
    let mut qk_out = vec![0.0f32; batch * q_heads * q_len * total];
    let mut scores = vec![0.0f64; total];
    let mut raw = vec![0.0f64; total];
    for b in 0..batch {
        let offset = match &nonpad {
            Some(lengths) if past_len == 0 => {
                lengths.get(b).copied().unwrap_or(total as i64) - q_len as i64
            }
            _ => past_len as i64,
        };
        for h in 0..q_heads {
            let kv_h = h / group;
            for i in 0..q_len {
                let q_row = &q.0[((b * q_heads + h) * q_len + i) * head..][..head];
                let mut bias_max = f64::NEG_INFINITY;
                for j in 0..total {
                    let k_row = &k.0[((b * kv_heads + kv_h) * total + j) * head..][..head];
                    let dot: f64 = q_row
                        .iter()
                        .zip(k_row)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum();
                    let mut s = dot * scale;
                    if softcap > 0.0 {
                        s = softcap * (s / softcap).tanh();
                    }
                    raw[j] = s;
                    let mut bias = mask_bias(b, h, i, j);
                    let position = i as i64 + offset;
                    if causal && j as i64 > position {
                        bias = f64::NEG_INFINITY;
                    }
                    // Sliding window (opset 25): keys within `left` before and `right` after.
                    if (left >= 0 && position - j as i64 > left)
                        || (right >= 0 && j as i64 - position > right)
                    {
                        bias = f64::NEG_INFINITY;
                    }
                    if let Some(lengths) = &nonpad {
                        if j as i64 >= lengths.get(b).copied().unwrap_or(total as i64) {
                            bias = f64::NEG_INFINITY;
                        }
                    }
                    bias_max = bias_max.max(bias);
                    scores[j] = s + bias;
                }
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let all_masked = bias_max == f64::NEG_INFINITY;
                let shift = if max == f64::NEG_INFINITY { 0.0 } else { max };
                let exps: Vec<f64> = scores.iter().map(|&s| (s - shift).exp()).collect();
                let total_exp: f64 = exps.iter().sum();
                let denominator = if total_exp == 0.0 { 1.0 } else { total_exp };
                let row = ((b * q_heads + h) * q_len + i) * total;
                for j in 0..total {
                    let p = if all_masked {
                        0.0
                    } else {
                        exps[j] / denominator
                    };
                    qk_out[row + j] = match mode {
                        2 => scores[j],
                        3 => p,
                        _ => raw[j],
                    } as f32;
                    exps_weight(
                        &mut y,
                        &v.0,
                        p,
                        ((b * q_heads + h) * q_len + i) * value_head,
                        ((b * kv_heads + kv_h) * total + j) * value_head,
                        value_head,
                    );
                }
            }
        }
    }
    let y = if three_d {
        let mut out = vec![0.0f32; y.len()];
        for b in 0..batch {
            for h in 0..q_heads {
                for i in 0..q_len {
                    for d in 0..value_head {
                        out[((b * q_len + i) * q_heads + h) * value_head + d] =
                            y[((b * q_heads + h) * q_len + i) * value_head + d];
                    }
                }
            }
        }
        RtTensor {
            shape: vec![batch, q_len, q_heads * value_head],
            data: RtData::F32(out),
        }
    } else {
        RtTensor {
            shape: vec![batch, q_heads, q_len, value_head],
            data: RtData::F32(y),
        }
    };
    Ok(vec![
        y,
        RtTensor {
            shape: k.1.to_vec(),
            data: RtData::F32(k.0),
        },
        RtTensor {
            shape: v.1.to_vec(),
            data: RtData::F32(v.0),
        },
        RtTensor {
            shape: vec![batch, q_heads, q_len, total],
            data: RtData::F32(qk_out),
        },
    ])
}

/// RotaryEmbedding (opset 23+): rotates the first `rotary_embedding_dim` elements of every head
/// by the angle cached for its position (`position_ids` into the caches, or caches given per
/// batch and position), pairs taken as halves or, `interleaved`, as neighbours.
pub(super) fn rotary_embedding(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = get(0).ok_or("RotaryEmbedding: no input")?;
    let (cos, sin) = (
        floats(get(1).ok_or("no cos_cache")?),
        floats(get(2).ok_or("no sin_cache")?),
    );
    let cache_shape = &get(1).ok_or("no cos_cache")?.shape;
    let positions = get(3).map(ints);
    let interleaved = node.attrs.int_or("interleaved", 0) != 0;
    // [batch, heads, seq, head] strides of the input, whichever layout it has.
    let (batch, heads, seq, head, strides4) = match x.shape[..] {
        [b, h, s, d] => (b, h, s, d, [h * s * d, s * d, d]),
        [b, s, width] => {
            let h = node.attrs.int_or("num_heads", 0).max(0) as usize;
            if h == 0 || width % h != 0 {
                return Err("RotaryEmbedding: num_heads does not divide the width".into());
            }
            let d = width / h;
            (b, h, s, d, [s * width, d, width])
        }
        _ => return Err("RotaryEmbedding: the input must be 3-D or 4-D".into()),
    };
    let rotary = match node.attrs.int_or("rotary_embedding_dim", 0) {
        r if r > 0 => (r as usize).min(head),
        _ => head,
    };
    let half = rotary / 2;
    let cache_width = *cache_shape.last().unwrap_or(&0);
    if cache_width < half {
        return Err("RotaryEmbedding: the caches are narrower than half the rotated dims".into());
    }
    let mut out = floats(x);
    let source = out.clone();
    for b in 0..batch {
        for s in 0..seq {
            let row = match &positions {
                Some(p) => p.get(b * seq + s).copied().unwrap_or(0).max(0) as usize,
                None if cache_shape.len() == 3 => b * seq + s,
                None => s,
            };
            if (row + 1) * cache_width > cos.len() || (row + 1) * cache_width > sin.len() {
                return Err(format!(
                    "RotaryEmbedding: position {row} is past the caches"
                ));
            }
            for h in 0..heads {
                let base = b * strides4[0] + h * strides4[1] + s * strides4[2];
                for k in 0..half {
                    let (first, second) = if interleaved {
                        (base + 2 * k, base + 2 * k + 1)
                    } else {
                        (base + k, base + half + k)
                    };
                    let (c, sn) = (cos[row * cache_width + k], sin[row * cache_width + k]);
                    let (x1, x2) = (source[first], source[second]);
                    out[first] = x1 * c - x2 * sn;
                    out[second] = x1 * sn + x2 * c;
                }
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(out),
    })
}

/// `y[at..at + len] += p · v[from..from + len]`.
pub(super) fn exps_weight(y: &mut [f32], v: &[f32], p: f64, at: usize, from: usize, len: usize) {
    for d in 0..len {
        y[at + d] += (p * f64::from(v[from + d])) as f32;
    }
}

/// onnxruntime's GroupQueryAttention (`com.microsoft`, version 1): causal attention of
/// `num_heads` query heads over `kv_num_heads` KV heads. Per batch, the keys are the first
/// `seqlens_k[b] + 1 − S` cached ones and the S new ones; the present cache holds them at their
/// positions (in the past buffer's length when it is the longer, else `total_sequence_length`).
/// Q and K are rotated first with `do_rotary`; `local_window_size`, `softcap`, `smooth_softmax`
/// and an additive `attention_bias` apply to the scores.
pub(super) fn group_query_attention(
    node: &Node,
    inputs: &[Option<&RtTensor>],
) -> Result<Vec<RtTensor>> {
    let attrs = &node.attrs;
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let q_heads = attrs.int("num_heads").ok_or("no num_heads")?.max(1) as usize;
    let kv_heads = attrs.int("kv_num_heads").ok_or("no kv_num_heads")?.max(1) as usize;
    if !q_heads.is_multiple_of(kv_heads) {
        return Err("num_heads is not a multiple of kv_num_heads".into());
    }
    let query = get(0).ok_or("no query")?;
    let [batch, seq, width] = query.shape[..] else {
        return Err("query must be [batch, sequence, hidden]".into());
    };
    let packed = get(1).is_none();
    let head = if packed {
        width / (q_heads + 2 * kv_heads)
    } else {
        width / q_heads
    };
    // Q [B, Hq, S, D], K and V [B, Hkv, S, D].
    let split = |t: &RtTensor, heads: usize, offset: usize, stride: usize| -> Vec<f32> {
        let v = floats(t);
        let mut out = vec![0.0f32; batch * heads * seq * head];
        for b in 0..batch {
            for s in 0..seq {
                for h in 0..heads {
                    for d in 0..head {
                        out[((b * heads + h) * seq + s) * head + d] =
                            v[(b * seq + s) * stride + offset + h * head + d];
                    }
                }
            }
        }
        out
    };
    let (mut q, mut k, v) = if packed {
        (
            split(query, q_heads, 0, width),
            split(query, kv_heads, q_heads * head, width),
            split(query, kv_heads, (q_heads + kv_heads) * head, width),
        )
    } else {
        let (key, value) = (get(1).ok_or("no key")?, get(2).ok_or("no value")?);
        (
            split(query, q_heads, 0, width),
            split(key, kv_heads, 0, kv_heads * head),
            split(value, kv_heads, 0, kv_heads * head),
        )
    };
    let seqlens: Vec<i64> = get(5).map(ints).ok_or("no seqlens_k")?;
    let total_sequence = get(6)
        .and_then(|t| ints(t).first().copied())
        .ok_or("no total_sequence_length")?;
    let past_len_of = |b: usize| -> Result<usize> {
        let total = seqlens.get(b).copied().ok_or("seqlens_k too short")? + 1;
        usize::try_from(total - seq as i64)
            .map_err(|_| "seqlens_k shorter than the new tokens".to_string())
    };
    // Rotary embedding of the new Q and K at their absolute positions.
    if attrs.int_or("do_rotary", 0) != 0 {
        let (cos, sin) = (
            floats(get(7).ok_or("no cos_cache")?),
            floats(get(8).ok_or("no sin_cache")?),
        );
        let cache_width = *get(7).ok_or("no cos_cache")?.shape.last().unwrap_or(&0);
        let interleaved = attrs.int_or("rotary_interleaved", 0) != 0;
        let positions = get(9).map(ints);
        for (t, heads) in [(&mut q, q_heads), (&mut k, kv_heads)] {
            for b in 0..batch {
                let past = past_len_of(b)?;
                for h in 0..heads {
                    for s in 0..seq {
                        let position = match &positions {
                            Some(p) => p.get(b * seq + s).copied().unwrap_or(0).max(0) as usize,
                            None => past + s,
                        };
                        if (position + 1) * cache_width > cos.len() {
                            return Err(format!("position {position} is past the rotary caches"));
                        }
                        let row = &mut t[((b * heads + h) * seq + s) * head..][..head];
                        let source = row.to_vec();
                        for i in 0..cache_width.min(head / 2) {
                            let (first, second) = if interleaved {
                                (2 * i, 2 * i + 1)
                            } else {
                                (i, cache_width + i)
                            };
                            let (c, sn) = (
                                cos[position * cache_width + i],
                                sin[position * cache_width + i],
                            );
                            row[first] = source[first] * c - source[second] * sn;
                            row[second] = source[first] * sn + source[second] * c;
                        }
                    }
                }
            }
        }
    }
    let past_buffer = get(3).map_or(0, |p| p.shape.get(2).copied().unwrap_or(0));
    let present_len = past_buffer.max(total_sequence.max(0) as usize);
    let (past_k, past_v) = (get(3).map(floats), get(4).map(floats));
    let mut present_k = vec![0.0f32; batch * kv_heads * present_len * head];
    let mut present_v = present_k.clone();
    for b in 0..batch {
        let past = past_len_of(b)?;
        if past + seq > present_len {
            return Err("the keys do not fit the present cache".into());
        }
        for h in 0..kv_heads {
            let row = (b * kv_heads + h) * present_len;
            if let (Some(pk), Some(pv)) = (&past_k, &past_v) {
                let from = (b * kv_heads + h) * past_buffer;
                present_k[row * head..(row + past) * head]
                    .copy_from_slice(&pk[from * head..(from + past) * head]);
                present_v[row * head..(row + past) * head]
                    .copy_from_slice(&pv[from * head..(from + past) * head]);
            }
            let new = (b * kv_heads + h) * seq;
            present_k[(row + past) * head..(row + past + seq) * head]
                .copy_from_slice(&k[new * head..(new + seq) * head]);
            present_v[(row + past) * head..(row + past + seq) * head]
                .copy_from_slice(&v[new * head..(new + seq) * head]);
        }
    }
    let scale = attrs
        .float("scale")
        .filter(|&s| s != 0.0)
        .map_or(1.0 / (head as f64).sqrt(), f64::from);
    let softcap = f64::from(attrs.float_or("softcap", 0.0));
    let window = attrs.int_or("local_window_size", -1);
    let smooth = attrs.int_or("smooth_softmax", 0) != 0;
    let bias = get(10);
    let bias_values = bias.map(floats);
    let group = q_heads / kv_heads;
    let mut out = vec![0.0f32; batch * seq * q_heads * head];
    for b in 0..batch {
        let past = past_len_of(b)?;
        let total = past + seq;
        for h in 0..q_heads {
            let kv = h / group;
            for i in 0..seq {
                let position = past + i;
                let q_row = &q[((b * q_heads + h) * seq + i) * head..][..head];
                let mut scores = vec![f64::NEG_INFINITY; total];
                for (j, score) in scores.iter_mut().enumerate() {
                    if j > position || (window >= 0 && (position - j) as i64 >= window) {
                        continue;
                    }
                    let k_row =
                        &present_k[((b * kv_heads + kv) * present_len + j) * head..][..head];
                    let mut s: f64 = q_row
                        .iter()
                        .zip(k_row)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum::<f64>()
                        * scale;
                    if softcap > 0.0 {
                        s = softcap * (s / softcap).tanh();
                    }
                    if let (Some(t), Some(values)) = (bias, &bias_values) {
                        // attention_bias [B or 1, Hq or 1, S, total].
                        let (bb, bh) = (t.shape[0], t.shape[1]);
                        let last = t.shape[3];
                        let at = (((b % bb) * bh + h % bh) * seq + i) * last + j;
                        s += f64::from(values.get(at).copied().unwrap_or(0.0));
                    }
                    *score = s;
                }
                let max = scores
                    .iter()
                    .copied()
                    .fold(if smooth { 0.0 } else { f64::NEG_INFINITY }, f64::max);
                let exps: Vec<f64> = scores.iter().map(|&s| (s - max).exp()).collect();
                let denominator =
                    exps.iter().sum::<f64>() + if smooth { (-max).exp() } else { 0.0 };
                let target = &mut out[((b * seq + i) * q_heads + h) * head..][..head];
                for (j, &e) in exps.iter().enumerate() {
                    if e == 0.0 {
                        continue;
                    }
                    let p = e / denominator;
                    let v_row =
                        &present_v[((b * kv_heads + kv) * present_len + j) * head..][..head];
                    for (o, &x) in target.iter_mut().zip(v_row) {
                        *o += (p * f64::from(x)) as f32;
                    }
                }
            }
        }
    }
    let cache_shape = vec![batch, kv_heads, present_len, head];
    Ok(vec![
        RtTensor {
            shape: vec![batch, seq, q_heads * head],
            data: RtData::F32(out),
        },
        RtTensor {
            shape: cache_shape.clone(),
            data: RtData::F32(present_k),
        },
        RtTensor {
            shape: cache_shape,
            data: RtData::F32(present_v),
        },
    ])
}
