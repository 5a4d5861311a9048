//! Reference kernels of onnxruntime's contrib ops (`com.microsoft`) that its optimizers write into
//! saved models: Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd, FusedMatMul and the skip layer
//! norms (SkipLayerNormalization, SkipSimplifiedLayerNormalization, with their optional mean,
//! inverse-std and sum outputs), and DynamicQuantizeLSTM, which its `quantize_dynamic` writes.

use super::*;

/// The contrib ops with a reference kernel.
pub(super) fn covers(op: &str) -> bool {
    matches!(
        op,
        "Gelu"
            | "BiasGelu"
            | "FastGelu"
            | "QuickGelu"
            | "BiasAdd"
            | "FusedMatMul"
            | "SkipLayerNormalization"
            | "SkipSimplifiedLayerNormalization"
            | "SimplifiedLayerNormalization"
            | "MatMulNBits"
            | "GroupQueryAttention"
            | "RotaryEmbedding"
            | "DynamicQuantizeLSTM"
    )
}

fn erf_gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + super::math::erf(x / std::f64::consts::SQRT_2))
}

/// The broadcast element-wise sum of `tensors` (right-aligned broadcasting).
fn broadcast_sum(tensors: &[&RtTensor]) -> Result<RtTensor> {
    let mut shape: Vec<usize> = Vec::new();
    for t in tensors {
        shape = broadcast_shape(&shape, &t.shape)?;
    }
    let out_strides = strides(&shape);
    let count: usize = shape.iter().product();
    let values: Vec<Vec<f32>> = tensors.iter().map(|t| floats(t)).collect();
    let data = (0..count)
        .map(|n| {
            tensors
                .iter()
                .zip(&values)
                .map(|(t, v)| v[broadcast_index(n, &shape, &out_strides, &t.shape)])
                .sum()
        })
        .collect();
    Ok(RtTensor {
        shape,
        data: RtData::F32(data),
    })
}

fn map(t: RtTensor, f: impl Fn(f64) -> f64) -> RtTensor {
    let data = floats(&t).iter().map(|&x| f(f64::from(x)) as f32).collect();
    RtTensor {
        shape: t.shape,
        data: RtData::F32(data),
    }
}

pub(super) fn run(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let given: Vec<&RtTensor> = inputs.iter().flatten().copied().collect();
    let first = given.first().copied().ok_or("no input")?;
    let attrs = &node.attrs;
    Ok(match node.op_type.as_str() {
        "Gelu" => vec![map(first.clone(), erf_gelu)],
        "BiasGelu" => vec![map(broadcast_sum(&given)?, erf_gelu)],
        "FastGelu" => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            vec![map(broadcast_sum(&given)?, move |x| {
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            })]
        }
        "QuickGelu" => {
            let alpha = f64::from(attrs.float_or("alpha", 1.702));
            vec![map(first.clone(), move |x| x / (1.0 + (-alpha * x).exp()))]
        }
        "BiasAdd" => vec![broadcast_sum(&given)?],
        "FusedMatMul" => vec![fused_matmul(node, &given)?],
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => skip_norm(node, inputs)?,
        "SimplifiedLayerNormalization" => simplified_norm(node, inputs)?,
        "MatMulNBits" => vec![matmul_nbits(node, inputs)?],
        "GroupQueryAttention" => super::attention::group_query_attention(node, inputs)?,
        "RotaryEmbedding" => vec![contrib_rotary(node, inputs)?],
        "DynamicQuantizeLSTM" => dynamic_quantize_lstm(node, inputs)?,
        other => return Err(format!("no reference kernel for com.microsoft {other}")),
    })
}

/// `[.., rows, cols]` of a tensor, transposed in its last two dims when `transpose`.
fn matrix_view(t: &RtTensor, transpose: bool) -> (Vec<usize>, usize, usize, Vec<f32>) {
    let values = floats(t);
    let rank = t.shape.len();
    if rank < 2 {
        return (Vec::new(), 1, t.shape.first().copied().unwrap_or(1), values);
    }
    let (rows, cols) = (t.shape[rank - 2], t.shape[rank - 1]);
    let batch = t.shape[..rank - 2].to_vec();
    if !transpose {
        return (batch, rows, cols, values);
    }
    let mut out = vec![0.0f32; values.len()];
    for (m, chunk) in values.chunks(rows * cols).enumerate() {
        for r in 0..rows {
            for c in 0..cols {
                out[m * rows * cols + c * rows + r] = chunk[r * cols + c];
            }
        }
    }
    (batch, cols, rows, out)
}

fn fused_matmul(node: &Node, given: &[&RtTensor]) -> Result<RtTensor> {
    let attrs = &node.attrs;
    if attrs.int_or("transBatchA", 0) != 0 || attrs.int_or("transBatchB", 0) != 0 {
        return Err("FusedMatMul with transBatchA/B has no reference".into());
    }
    let (a, b) = match given {
        [a, b, ..] => (*a, *b),
        _ => return Err("FusedMatMul needs two operands".into()),
    };
    let alpha = attrs.float_or("alpha", 1.0);
    let (batch_a, m, k, av) = matrix_view(a, attrs.int_or("transA", 0) != 0 && a.shape.len() >= 2);
    let (batch_b, k2, n, bv) = if b.shape.len() == 1 {
        (Vec::new(), b.shape[0], 1, floats(b))
    } else {
        matrix_view(b, attrs.int_or("transB", 0) != 0)
    };
    if k != k2 {
        return Err(format!("FusedMatMul: inner dims {k} and {k2} differ"));
    }
    let batch = broadcast_shape(&batch_a, &batch_b)?;
    let batch_strides = strides(&batch);
    let batches: usize = batch.iter().product();
    let mut out = vec![0.0f32; batches * m * n];
    for p in 0..batches {
        let pa = broadcast_index(p, &batch, &batch_strides, &batch_a);
        let pb = broadcast_index(p, &batch, &batch_strides, &batch_b);
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|q| {
                        f64::from(av[(pa * m + i) * k + q]) * f64::from(bv[(pb * k + q) * n + j])
                    })
                    .sum();
                out[(p * m + i) * n + j] = (dot * f64::from(alpha)) as f32;
            }
        }
    }
    let mut shape = batch;
    if a.shape.len() >= 2 {
        shape.push(m);
    }
    if b.shape.len() >= 2 {
        shape.push(n);
    }
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

/// y = LayerNorm(x + skip (+ bias)) · γ (+ β), or RMSNorm for the simplified form, over the last
/// axis; outputs y, mean, inverse std and the sum, as many as the node names.
fn skip_norm(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let simplified = node.op_type == "SkipSimplifiedLayerNormalization";
    let (x, skip, gamma) = (
        get(0).ok_or("no input")?,
        get(1).ok_or("no skip")?,
        get(2).ok_or("no gamma")?,
    );
    let (beta, bias) = if simplified {
        (None, get(3))
    } else {
        (get(3), get(4))
    };
    let mut parts = vec![x, skip];
    parts.extend(bias);
    let sum = broadcast_sum(&parts)?;
    if sum.shape != x.shape {
        return Err("skip or bias does not broadcast to the input".into());
    }
    let epsilon = node.attrs.float_or("epsilon", 1e-12);
    let mut outputs = layer_norm(&sum, gamma, beta, -1, epsilon, simplified)?;
    outputs.push(sum);
    Ok(outputs)
}

/// SimplifiedLayerNormalization (RMSNorm as onnxruntime's exporters write it): Y and, when
/// named, the inverse RMS per row.
pub(super) fn simplified_norm(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let (x, scale) = (get(0).ok_or("no input")?, get(1).ok_or("no scale")?);
    let axis = node.attrs.int_or("axis", -1);
    let epsilon = node.attrs.float_or("epsilon", 1e-5);
    // Y and the inverse RMS (the zero mean is not an output of this op).
    let mut outputs = layer_norm(x, scale, None, axis, epsilon, true)?;
    outputs.remove(1);
    Ok(outputs)
}

/// MatMulNBits: Y = A · dequant(B)ᵀ (+ bias), B holding N rows of blocks of `block_size`
/// `bits`-bit weights packed low bits first, one scale per block, zero points packed the same
/// way (or as floats), 2^(bits−1) when absent.
pub(super) fn matmul_nbits(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let attrs = &node.attrs;
    let (k, n) = (
        attrs.int("K").ok_or("no K")? as usize,
        attrs.int("N").ok_or("no N")? as usize,
    );
    let bits = attrs.int_or("bits", 4) as usize;
    let block = attrs.int("block_size").ok_or("no block_size")? as usize;
    if !matches!(bits, 2 | 4 | 8) || block == 0 {
        return Err(format!(
            "{bits}-bit weights in blocks of {block} have no reference"
        ));
    }
    if get(4).is_some() {
        return Err("MatMulNBits with g_idx has no reference kernel".into());
    }
    let (a, packed, scales) = (
        get(0).ok_or("no A")?,
        ints(get(1).ok_or("no B")?),
        floats(get(2).ok_or("no scales")?),
    );
    let blocks = k.div_ceil(block);
    let blob = block * bits / 8;
    let per_byte = 8 / bits;
    let mask = (1i64 << bits) - 1;
    let zero_default = f32::from(1u8 << (bits - 1));
    let zero_at: Box<dyn Fn(usize, usize) -> f32> = match get(3) {
        None => Box::new(move |_, _| zero_default),
        Some(z) => match &z.data {
            RtData::F32(values) => {
                let values = values.clone();
                Box::new(move |row, j| values[row * blocks + j])
            }
            RtData::I64(values) => {
                let values = values.clone();
                let row_bytes = (blocks * bits).div_ceil(8);
                Box::new(move |row, j| {
                    let byte = values[row * row_bytes + j * bits / 8];
                    ((byte >> ((j * bits) % 8)) & mask) as f32
                })
            }
        },
    };
    // Dequantized weights, [N, K].
    let mut weights = vec![0.0f32; n * k];
    for row in 0..n {
        for j in 0..blocks {
            let scale = scales[row * blocks + j];
            let zero = zero_at(row, j);
            for i in 0..block.min(k - j * block) {
                let byte = packed[(row * blocks + j) * blob + i / per_byte];
                let q = (byte >> ((i % per_byte) * bits)) & mask;
                weights[row * k + j * block + i] = (q as f32 - zero) * scale;
            }
        }
    }
    let bias = get(5).map(floats);
    let a_values = floats(a);
    if a.shape.last() != Some(&k) {
        return Err("A's last dim is not K".into());
    }
    let rows = a_values.len() / k.max(1);
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        for col in 0..n {
            let dot: f64 = (0..k)
                .map(|q| f64::from(a_values[r * k + q]) * f64::from(weights[col * k + q]))
                .sum();
            out[r * n + col] = dot as f32 + bias.as_ref().map_or(0.0, |b| b[col]);
        }
    }
    let mut shape = a.shape.clone();
    *shape.last_mut().ok_or("scalar A")? = n;
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

/// onnxruntime's RotaryEmbedding (`com.microsoft`): inputs (input, position_ids, cos_cache,
/// sin_cache), position_ids [B, S] or one offset; the head size from the caches when
/// `num_heads` is not given. Runs as the standard op on the reordered inputs.
fn contrib_rotary(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = get(0).ok_or("no input")?;
    let positions = ints(get(1).ok_or("no position_ids")?);
    let cos = get(2).ok_or("no cos_cache")?;
    let cache_width = *cos.shape.last().ok_or("scalar cos_cache")?;
    let (batch, seq) = match x.shape[..] {
        [b, s, _] => (b, s),
        [b, _, s, _] => (b, s),
        _ => return Err("the input must be 3-D or 4-D".into()),
    };
    let expanded: Vec<i64> = if positions.len() == 1 {
        (0..batch * seq)
            .map(|n| positions[0] + (n % seq) as i64)
            .collect()
    } else {
        positions
    };
    let mut standard = node.clone();
    standard.domain = String::new();
    if x.shape.len() == 3 && node.attrs.int_or("num_heads", 0) <= 0 {
        // Without num_heads the rotated width is the head: 2 · the caches' width.
        let head = (2 * cache_width).max(1);
        standard.attrs.0.insert(
            "num_heads".into(),
            crate::analysis::graph::Attr::Int((x.shape[2] / head) as i64),
        );
    }
    let positions = RtTensor {
        shape: vec![batch, seq],
        data: RtData::I64(expanded),
    };
    let reordered = vec![Some(x), get(2), get(3), Some(&positions)];
    super::attention::rotary_embedding(&standard, &reordered)
}

/// DynamicQuantizeLSTM: an LSTM whose W `[directions, input, 4·hidden]` and R `[directions,
/// hidden, 4·hidden]` are int8 or uint8 with a scale and zero point per direction (`[D]`) or
/// per gate column (`[D, 4·hidden]`), inputs 8-11. The weights are dequantized in their own
/// input-major layout (a transpose per run cost half the op), and the LSTM runs on them with X and
/// each step's hidden state rounded through uint8 as onnxruntime quantizes them for its integer
/// products (`rnn::run_with`).
fn dynamic_quantize_lstm(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    let (w, r) = dequantized_lstm_weights(&|i: usize| inputs.get(i).and_then(|t| *t))?;
    dynamic_quantize_lstm_with(node, inputs, &w, &r, None)
}

/// DynamicQuantizeLSTM's 8-bit weights (input `w`, its scale `scale` and zero point `zero`)
/// with each direction's zero point and scale per gate column, looked up once: the values, the
/// `[D, rows, columns]` shape, and `(zeros, scales)` per direction.
#[allow(clippy::type_complexity)]
fn lstm_weight_columns<'a>(
    get: &dyn Fn(usize) -> Option<&'a RtTensor>,
    (w, scale, zero): (usize, usize, usize),
) -> Result<(&'a RtTensor, [usize; 3], Vec<(Vec<f32>, Vec<f32>)>)> {
    let weights = get(w).ok_or(format!("DynamicQuantizeLSTM: input #{w} is missing"))?;
    let scales = floats(get(scale).ok_or("DynamicQuantizeLSTM: a weight scale is missing")?);
    let zeros = get(zero).map(ints).unwrap_or_else(|| vec![0]);
    let [directions, rows, columns] = weights.shape[..] else {
        return Err("DynamicQuantizeLSTM: W and R must be 3-D".into());
    };
    // One scale (zero point) per direction, or per direction and gate column.
    let at = |table_len: usize, d: usize, column: usize| match table_len {
        1 => 0,
        n if n == directions => d,
        _ => d * columns + column,
    };
    for len in [scales.len(), zeros.len()] {
        if len != 1 && len != directions && len != directions * columns {
            return Err(format!(
                "DynamicQuantizeLSTM: {len} scales or zero points for weights {:?}",
                weights.shape
            ));
        }
    }
    if weights.len() != directions * rows * columns {
        return Err(format!("DynamicQuantizeLSTM: weights {:?}", weights.shape));
    }
    let per_direction = (0..directions)
        .map(|d| {
            let column_zeros = (0..columns)
                .map(|c| zeros[at(zeros.len(), d, c)] as f32)
                .collect();
            let column_scales = (0..columns)
                .map(|c| scales[at(scales.len(), d, c)])
                .collect();
            (column_zeros, column_scales)
        })
        .collect();
    Ok((weights, [directions, rows, columns], per_direction))
}

/// DynamicQuantizeLSTM's W and R (inputs 1 and 2, their scales 8 and 10, zero points 9 and
/// 11) dequantized in their input-major layout: per run, or once per plan when all of them are
/// constants (`reference::prepare`).
pub(super) fn dequantized_lstm_weights<'a>(
    get: &dyn Fn(usize) -> Option<&'a RtTensor>,
) -> Result<(RtTensor, RtTensor)> {
    let dequantized = |inputs: (usize, usize, usize)| -> Result<RtTensor> {
        let (weights, [_, rows, columns], per_direction) = lstm_weight_columns(get, inputs)?;
        let values = super::int_values(weights);
        let mut out = vec![0f32; values.len()];
        for (d, (column_zeros, column_scales)) in per_direction.iter().enumerate() {
            for (source, target) in values[d * rows * columns..][..rows * columns]
                .chunks_exact(columns)
                .zip(out[d * rows * columns..][..rows * columns].chunks_exact_mut(columns))
            {
                dequantize_row(target, source, column_zeros, column_scales);
            }
        }
        Ok(RtTensor {
            shape: weights.shape.clone(),
            data: RtData::F32(out),
        })
    };
    Ok((dequantized((1, 8, 9))?, dequantized((2, 10, 11))?))
}

/// DynamicQuantizeLSTM's W and R (inputs 1 and 2, scales 8 and 10, zero points 9 and 11) per
/// direction for the int8 products (`rnn::Int8Weights`), where the CPU multiplies bytes
/// natively; None where it does not or the weights are not 8-bit.
pub(super) fn int8_lstm_weights<'a>(
    get: &dyn Fn(usize) -> Option<&'a RtTensor>,
) -> Option<super::rnn::Int8Lstm> {
    if !crate::kernels::qgemm::multiplies_bytes_natively() {
        return None;
    }
    let per_direction = |inputs: (usize, usize, usize)| -> Option<Vec<super::rnn::Int8Weights>> {
        let (weights, [_, rows, columns], per_direction) = lstm_weight_columns(get, inputs).ok()?;
        let values = super::int_values(weights);
        per_direction
            .iter()
            .enumerate()
            .map(|(d, (zeros, scales))| {
                super::rnn::Int8Weights::new(
                    &values[d * rows * columns..][..rows * columns],
                    rows,
                    zeros,
                    scales,
                )
            })
            .collect()
    };
    Some(super::rnn::Int8Lstm {
        w: per_direction((1, 8, 9))?,
        r: per_direction((2, 10, 11))?,
    })
}

/// DynamicQuantizeLSTM on dequantized `w` and `r` (see [`dequantized_lstm_weights`]), and on
/// the 8-bit weights where `int8` has them (see [`int8_lstm_weights`]).
pub(super) fn dynamic_quantize_lstm_with(
    node: &Node,
    inputs: &[Option<&RtTensor>],
    w: &RtTensor,
    r: &RtTensor,
    int8: Option<&super::rnn::Int8Lstm>,
) -> Result<Vec<RtTensor>> {
    let mut lstm = node.clone();
    lstm.op_type = "LSTM".into();
    lstm.domain = String::new();
    let mut lstm_inputs: Vec<Option<&RtTensor>> = inputs.iter().take(8).copied().collect();
    lstm_inputs.resize(8, None);
    lstm_inputs[1] = Some(w);
    lstm_inputs[2] = Some(r);
    super::rnn::run_with(
        &lstm,
        &lstm_inputs,
        true,
        super::rnn::WeightLayout::InputMajor,
        int8,
    )
}

crate::kernels::simd::multiversion! {
    /// `target[c] = (source[c] − zeros[c]) · scales[c]`: one row of 8-bit weights dequantized
    /// (compiled per ISA, so the i64 → f32 conversion vectorizes).
    fn dequantize_row(target: &mut [f32], source: &[i64], zeros: &[f32], scales: &[f32]) {
        let width = target.len();
        let (source, zeros, scales) = (&source[..width], &zeros[..width], &scales[..width]);
        for c in 0..width {
            target[c] = (source[c] as f32 - zeros[c]) * scales[c];
        }
    }
}
