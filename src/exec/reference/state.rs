//! Recurrent-state ops of linear-attention and state-space decoders: LinearAttention,
//! CausalConvWithState, TensorScatter (semantics and shapes in `analysis/ops/state.rs`).
//! Accumulation in f64, one token at a time, as the spec's recurrences are written.

use super::{floats, ints, Result};
use crate::analysis::graph::Node;
use crate::analysis::ops::state::{linear_attention_heads, UpdateRule};
use crate::exec::{RtData, RtTensor};

fn f32_tensor(shape: Vec<usize>, values: Vec<f32>) -> RtTensor {
    RtTensor {
        shape,
        data: RtData::F32(values),
    }
}

fn dims3(t: &RtTensor, what: &str) -> Result<(usize, usize, usize)> {
    match t.shape[..] {
        [a, b, c] => Ok((a, b, c)),
        _ => Err(format!("{what} must be 3-D, got {:?}", t.shape)),
    }
}

/// LinearAttention: per batch row and KV head a [dk × dv] state, updated token by token and read
/// by the query heads of its group after each update.
pub(super) fn linear_attention(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let input = |i: usize| inputs.get(i).and_then(|t| *t);
    let (query, key, value) = (
        input(0).ok_or("query is missing")?,
        input(1).ok_or("key is missing")?,
        input(2).ok_or("value is missing")?,
    );
    let rule = UpdateRule::parse(node.attrs.string("update_rule"))?;
    let (q_heads, kv_heads) = linear_attention_heads(&node.attrs)?;
    let (q_heads, kv_heads) = (q_heads as usize, kv_heads as usize);
    let (batch, tokens, q_width) = dims3(query, "query")?;
    let (_, _, k_width) = dims3(key, "key")?;
    let (_, _, v_width) = dims3(value, "value")?;
    if q_width % q_heads != 0 || v_width % kv_heads != 0 {
        return Err(format!(
            "query width {q_width} or value width {v_width} does not split into {q_heads}/{kv_heads} heads"
        ));
    }
    let dk = q_width / q_heads;
    let dv = v_width / kv_heads;
    if k_width != kv_heads * dk
        || key.shape[..2] != query.shape[..2]
        || value.shape[..2] != query.shape[..2]
    {
        return Err(format!(
            "key {:?} and value {:?} do not match query {:?} with {q_heads}/{kv_heads} heads",
            key.shape, value.shape, query.shape
        ));
    }
    let group = q_heads / kv_heads;
    let scale = match node.attrs.float("scale") {
        Some(s) if s != 0.0 => s as f64,
        _ => 1.0 / (dk as f64).sqrt(),
    };
    let (q, k, v) = (floats(query), floats(key), floats(value));
    let state_len = batch * kv_heads * dk * dv;
    let mut state: Vec<f64> = match input(3) {
        Some(past) if past.shape == [batch, kv_heads, dk, dv] => {
            floats(past).iter().map(|&x| x as f64).collect()
        }
        Some(past) => {
            return Err(format!(
                "past_state {:?}, expected [{batch}, {kv_heads}, {dk}, {dv}]",
                past.shape
            ))
        }
        None => vec![0.0; state_len],
    };
    // Decay: per key dim [B, T, Hkv·dk] or per head [B, T, Hkv]; beta: [B, T, Hkv] or [B, T, 1].
    // Decay and beta share the query's batch and token dims.
    let rows_match = |t: &RtTensor| t.shape.len() == 3 && t.shape[..2] == query.shape[..2];
    let decay = match input(4) {
        Some(d) => {
            let (_, _, width) = dims3(d, "decay")?;
            if !rows_match(d) {
                return Err(format!("decay {:?} for query {:?}", d.shape, query.shape));
            }
            let per_key = if width == kv_heads * dk {
                true
            } else if width == kv_heads {
                false
            } else {
                return Err(format!(
                    "decay width {width}: expected {} or {kv_heads}",
                    kv_heads * dk
                ));
            };
            Some((floats(d), width, per_key))
        }
        None if rule.gated() => return Err(format!("update rule {rule:?} needs a decay input")),
        None => None,
    };
    let beta = match input(5) {
        Some(b) => {
            let (_, _, width) = dims3(b, "beta")?;
            if !rows_match(b) {
                return Err(format!("beta {:?} for query {:?}", b.shape, query.shape));
            }
            if width != kv_heads && width != 1 {
                return Err(format!("beta width {width}: expected {kv_heads} or 1"));
            }
            Some((floats(b), width))
        }
        None if rule.delta() => return Err(format!("update rule {rule:?} needs a beta input")),
        None => None,
    };
    let mut output = vec![0f32; batch * tokens * q_heads * dv];
    let mut gate = vec![1.0f64; dk];
    let mut recalled = vec![0.0f64; dv];
    for b in 0..batch {
        for t in 0..tokens {
            let row = b * tokens + t;
            for h in 0..kv_heads {
                let s = &mut state[(b * kv_heads + h) * dk * dv..][..dk * dv];
                let k_row = &k[row * k_width + h * dk..][..dk];
                let v_row = &v[row * v_width + h * dv..][..dv];
                if let Some((d, width, per_key)) = &decay {
                    for (i, g) in gate.iter_mut().enumerate() {
                        let index = if *per_key { h * dk + i } else { h };
                        *g = (d[row * width + index] as f64).exp();
                    }
                    for (i, g) in gate.iter().enumerate() {
                        s[i * dv..(i + 1) * dv].iter_mut().for_each(|x| *x *= g);
                    }
                }
                if rule.delta() {
                    let (bv, width) = beta.as_ref().ok_or("beta is missing")?;
                    let rate = bv[row * width + if *width == 1 { 0 } else { h }] as f64;
                    recalled.iter_mut().for_each(|r| *r = 0.0);
                    for (i, &ki) in k_row.iter().enumerate() {
                        for (r, &x) in recalled.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                            *r += x * ki as f64;
                        }
                    }
                    for (i, &ki) in k_row.iter().enumerate() {
                        for ((x, &vj), &r) in
                            s[i * dv..(i + 1) * dv].iter_mut().zip(v_row).zip(&recalled)
                        {
                            *x += rate * ki as f64 * (vj as f64 - r);
                        }
                    }
                } else {
                    for (i, &ki) in k_row.iter().enumerate() {
                        for (x, &vj) in s[i * dv..(i + 1) * dv].iter_mut().zip(v_row) {
                            *x += ki as f64 * vj as f64;
                        }
                    }
                }
                for g in 0..group {
                    let qh = h * group + g;
                    let q_row = &q[row * q_width + qh * dk..][..dk];
                    let out = &mut output[(row * q_heads + qh) * dv..][..dv];
                    for (j, o) in out.iter_mut().enumerate() {
                        let dot: f64 = q_row
                            .iter()
                            .enumerate()
                            .map(|(i, &qi)| qi as f64 * s[i * dv + j])
                            .sum();
                        *o = (scale * dot) as f32;
                    }
                }
            }
        }
    }
    Ok(vec![
        f32_tensor(vec![batch, tokens, q_heads * dv], output),
        f32_tensor(
            vec![batch, kv_heads, dk, dv],
            state.iter().map(|&x| x as f32).collect(),
        ),
    ])
}

/// CausalConvWithState: y[t] = bias + Σ_j w[j]·[past ‖ x][t + j] per channel, then SiLU when
/// asked; the present state is the last k − 1 positions of [past ‖ x].
pub(super) fn causal_conv_with_state(
    node: &Node,
    inputs: &[Option<&RtTensor>],
) -> Result<Vec<RtTensor>> {
    let input = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = input(0).ok_or("input is missing")?;
    let w = input(1).ok_or("weight is missing")?;
    let (batch, channels, length) = dims3(x, "input")?;
    let (wc, _, kernel) = dims3(w, "weight")?;
    if wc != channels || w.shape[1] != 1 || kernel == 0 {
        return Err(format!("weight {:?} for {channels} channels", w.shape));
    }
    let carry = kernel - 1;
    let (xs, ws) = (floats(x), floats(w));
    let bias = match input(2) {
        Some(b) if b.len() == channels => floats(b),
        Some(b) => return Err(format!("bias {:?} for {channels} channels", b.shape)),
        None => vec![0.0; channels],
    };
    let past = match input(3) {
        Some(p) if p.shape == [batch, channels, carry] => floats(p),
        Some(p) => {
            return Err(format!(
                "past_state {:?}, expected [{batch}, {channels}, {carry}]",
                p.shape
            ))
        }
        None => vec![0.0; batch * channels * carry],
    };
    let silu = match node.attrs.string("activation").unwrap_or("none") {
        "none" => false,
        "silu" | "swish" => true,
        other => return Err(format!("unknown activation `{other}`")),
    };
    let mut out = vec![0f32; xs.len()];
    let mut present = vec![0f32; batch * channels * carry];
    let mut padded = vec![0f64; carry + length];
    for bc in 0..batch * channels {
        let c = bc % channels;
        for (p, &v) in padded.iter_mut().zip(&past[bc * carry..(bc + 1) * carry]) {
            *p = v as f64;
        }
        for (p, &v) in padded[carry..]
            .iter_mut()
            .zip(&xs[bc * length..(bc + 1) * length])
        {
            *p = v as f64;
        }
        let taps = &ws[c * kernel..(c + 1) * kernel];
        for t in 0..length {
            let mut acc = bias[c] as f64;
            for (j, &tap) in taps.iter().enumerate() {
                acc += tap as f64 * padded[t + j];
            }
            if silu {
                acc /= 1.0 + (-acc).exp();
            }
            out[bc * length + t] = acc as f32;
        }
        for (p, &v) in present[bc * carry..(bc + 1) * carry]
            .iter_mut()
            .zip(&padded[length..])
        {
            *p = v as f32;
        }
    }
    Ok(vec![
        f32_tensor(x.shape.clone(), out),
        f32_tensor(vec![batch, channels, carry], present),
    ])
}

/// TensorScatter: the cache with each batch row's update written at its write index along
/// `axis` (wrapping around in circular mode).
pub(super) fn tensor_scatter(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let input = |i: usize| inputs.get(i).and_then(|t| *t);
    let cache = input(0).ok_or("past_cache is missing")?;
    let update = input(1).ok_or("update is missing")?;
    let rank = cache.shape.len();
    let axis = super::axis_of(node.attrs.int_or("axis", -2), rank)?;
    if axis == 0 || update.shape.len() != rank {
        return Err(format!(
            "cache {:?} and update {:?} along axis {axis}",
            cache.shape, update.shape
        ));
    }
    for d in (0..rank).filter(|&d| d != axis) {
        if cache.shape[d] != update.shape[d] {
            return Err(format!(
                "cache {:?} and update {:?} differ off the sequence axis",
                cache.shape, update.shape
            ));
        }
    }
    let circular = match node.attrs.string("mode").unwrap_or("linear") {
        "linear" => false,
        "circular" => true,
        other => return Err(format!("unknown mode `{other}`")),
    };
    let batch = cache.shape[0];
    let writes = match input(2) {
        Some(w) if w.len() == batch => ints(w),
        Some(w) => {
            return Err(format!(
                "write_indices {:?} for a batch of {batch}",
                w.shape
            ))
        }
        None => vec![0; batch],
    };
    let (capacity, length) = (cache.shape[axis], update.shape[axis]);
    if capacity == 0 && length > 0 {
        return Err("an update into a cache of no entries".into());
    }
    let inner: usize = cache.shape[axis + 1..].iter().product();
    let prefixes: usize = cache.shape[..axis].iter().product();
    let per_batch = prefixes / batch.max(1);
    let mut targets = Vec::with_capacity(prefixes * length);
    for prefix in 0..prefixes {
        let start = writes[prefix / per_batch.max(1)];
        for s in 0..length {
            let mut position = start.saturating_add(s as i64);
            if circular {
                position = position.rem_euclid(capacity as i64);
            }
            if position < 0 || position as usize >= capacity {
                return Err(format!(
                    "write index {start} + {s} is outside a cache of {capacity}"
                ));
            }
            targets.push((prefix * capacity + position as usize) * inner);
        }
    }
    fn scatter<T: Copy>(dst: &mut [T], src: &[T], targets: &[usize], inner: usize) {
        for (block, &target) in targets.iter().enumerate() {
            dst[target..target + inner].copy_from_slice(&src[block * inner..(block + 1) * inner]);
        }
    }
    let data = match (&cache.data, &update.data) {
        (RtData::F32(c), RtData::F32(u)) => {
            let mut out = c.clone();
            scatter(&mut out, u, &targets, inner);
            RtData::F32(out)
        }
        (RtData::I64(c), RtData::I64(u)) => {
            let mut out = c.clone();
            scatter(&mut out, u, &targets, inner);
            RtData::I64(out)
        }
        _ => return Err("cache and update differ in element kind".into()),
    };
    Ok(RtTensor {
        shape: cache.shape.clone(),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;
    use crate::exec::reference::lend;
    use crate::exec::reference::test_node as node;

    fn f(shape: &[usize], values: Vec<f32>) -> Option<RtTensor> {
        Some(f32_tensor(shape.to_vec(), values))
    }

    #[test]
    fn linear_attention_linear_rule_is_a_running_sum() {
        // One head, dk = dv = 1, scale 1: S_t = Σ k·v, o_t = q_t·S_t.
        let n = node(
            "LinearAttention",
            &[
                ("q_num_heads", Attr::Int(1)),
                ("kv_num_heads", Attr::Int(1)),
                ("update_rule", Attr::String("linear".into())),
                ("scale", Attr::Float(1.0)),
            ],
        );
        let out = linear_attention(
            &n,
            &lend(&[
                f(&[1, 3, 1], vec![1.0, 2.0, 3.0]),
                f(&[1, 3, 1], vec![1.0, 1.0, 2.0]),
                f(&[1, 3, 1], vec![2.0, 3.0, 1.0]),
            ]),
        )
        .unwrap();
        // S = 2, 5, 7; o = 2, 10, 21.
        assert_eq!(out[0].to_f32(), [2.0, 10.0, 21.0]);
        assert_eq!(out[1].to_f32(), [7.0]);
    }

    #[test]
    fn gated_delta_rule_decays_then_corrects() {
        // dk = dv = 1: S' = e^g·S; S = S' + β·k·(v − S'·k).
        let n = node(
            "LinearAttention",
            &[
                ("q_num_heads", Attr::Int(1)),
                ("kv_num_heads", Attr::Int(1)),
                ("scale", Attr::Float(1.0)),
            ],
        );
        let g = (0.5f32).ln();
        let out = linear_attention(
            &n,
            &lend(&[
                f(&[1, 1, 1], vec![1.0]),
                f(&[1, 1, 1], vec![1.0]),
                f(&[1, 1, 1], vec![3.0]),
                f(&[1, 1, 1, 1], vec![4.0]),
                f(&[1, 1, 1], vec![g]),
                f(&[1, 1, 1], vec![0.5]),
            ]),
        )
        .unwrap();
        // S' = 2; S = 2 + 0.5·(3 − 2) = 2.5.
        assert!((out[1].to_f32()[0] - 2.5).abs() < 1e-6);
        assert!((out[0].to_f32()[0] - 2.5).abs() < 1e-6);
    }

    #[test]
    fn causal_conv_carries_its_state() {
        let n = node("CausalConvWithState", &[]);
        // One channel, kernel [1, 2, 3], past [10, 20], input [1, 2].
        let out = causal_conv_with_state(
            &n,
            &lend(&[
                f(&[1, 1, 2], vec![1.0, 2.0]),
                f(&[1, 1, 3], vec![1.0, 2.0, 3.0]),
                None,
                f(&[1, 1, 2], vec![10.0, 20.0]),
            ]),
        )
        .unwrap();
        // y0 = 10 + 40 + 3 = 53; y1 = 20 + 2 + 6 = 28; present = [1, 2].
        assert_eq!(out[0].to_f32(), [53.0, 28.0]);
        assert_eq!(out[1].to_f32(), [1.0, 2.0]);
    }

    #[test]
    fn tensor_scatter_writes_at_each_rows_index() {
        let n = node(
            "TensorScatter",
            &[
                ("axis", Attr::Int(1)),
                ("mode", Attr::String("circular".into())),
            ],
        );
        let cache = f(&[2, 3], vec![0.0; 6]);
        let update = f(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let writes = Some(RtTensor {
            shape: vec![2],
            data: RtData::I64(vec![0, 2]),
        });
        let out = tensor_scatter(&n, &lend(&[cache, update, writes])).unwrap();
        assert_eq!(out.to_f32(), [1.0, 2.0, 0.0, 4.0, 0.0, 3.0]);
    }
}
