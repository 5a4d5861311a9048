//! Reference kernels of the recurrent layers LSTM, GRU and RNN (ONNX opsets 7-22, both
//! layouts, forward/reverse/bidirectional, per-batch sequence lengths, initial states,
//! peepholes, clip, custom activations). One time step at a time, as the spec's equations are
//! written: gates = X_t·Wᵀ + H_{t-1}·Rᵀ + biases, then the cell update. The time goes into
//! the step matrix products; the rest is small.

use super::super::{RtData, RtTensor};
use super::float_values;
use crate::analysis::graph::Node;
use crate::kernels::elementwise::{unary_in_place, Unary};
use crate::kernels::gemm;

type Result<T> = std::result::Result<T, String>;

/// An activation of the recurrent ops' `activations` attribute.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f32, f32),
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
}

impl Act {
    fn apply(self, x: f32) -> f32 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => (1.0 + x.exp()).ln(),
        }
    }
}

/// The activations per direction: the attribute's names (consuming `activation_alpha` and
/// `activation_beta` in order for those that take parameters), or the op's defaults.
fn activations(node: &Node, defaults: &[&str], directions: usize) -> Result<Vec<Vec<Act>>> {
    let per_direction = defaults.len();
    let names: Vec<String> = match node.attrs.get("activations") {
        Some(crate::analysis::graph::Attr::Strings(names)) => names.clone(),
        _ => defaults
            .iter()
            .cycle()
            .take(per_direction * directions)
            .map(|s| s.to_string())
            .collect(),
    };
    if names.len() < per_direction * directions {
        return Err(format!(
            "{} activations given, {} needed",
            names.len(),
            per_direction * directions
        ));
    }
    let alphas = node
        .attrs
        .floats("activation_alpha")
        .unwrap_or(&[])
        .to_vec();
    let betas = node.attrs.floats("activation_beta").unwrap_or(&[]).to_vec();
    let (mut next_alpha, mut next_beta) = (0, 0);
    let mut alpha = |default: f32| {
        let value = alphas.get(next_alpha).copied().unwrap_or(default);
        next_alpha += 1;
        value
    };
    let mut beta = |default: f32| {
        let value = betas.get(next_beta).copied().unwrap_or(default);
        next_beta += 1;
        value
    };
    let mut parsed = Vec::new();
    for name in &names[..per_direction * directions] {
        parsed.push(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(alpha(1.0), beta(0.0)),
            "leakyrelu" => Act::LeakyRelu(alpha(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(alpha(1.0)),
            "scaledtanh" => Act::ScaledTanh(alpha(1.0), beta(1.0)),
            "hardsigmoid" => Act::HardSigmoid(alpha(0.2), beta(0.5)),
            "elu" => Act::Elu(alpha(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            other => return Err(format!("unknown activation `{other}`")),
        });
    }
    Ok(parsed.chunks(per_direction).map(<[Act]>::to_vec).collect())
}

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Lstm,
    Gru,
    Rnn,
}

fn floats_of(t: Option<&RtTensor>) -> Option<Vec<f32>> {
    t.map(RtTensor::to_f32)
}

/// `out[g] += Σ_k x[k] · w[g, k]` for a row-major `w` of `gates` rows and `x.len()` columns.
fn add_product(out: &mut [f32], x: &[f32], w: &[f32]) {
    let width = x.len();
    for (g, o) in out.iter_mut().enumerate() {
        *o += dot(&w[g * width..(g + 1) * width], x);
    }
}

crate::kernels::simd::multiversion! {
    /// `out[g] += Σ_k x[k] · w[k, g]` for a row-major `w` of `x.len()` rows and `out.len()`
    /// columns (the input-major layout of DynamicQuantizeLSTM's weights): one scaled row of
    /// `w` added per element of `x`, each row read once and contiguously.
    fn add_product_input_major(out: &mut [f32], x: &[f32], w: &[f32]) {
        let width = out.len();
        for (k, &scale) in x.iter().enumerate() {
            if scale == 0.0 {
                continue;
            }
            let row = &w[k * width..(k + 1) * width];
            for (o, &v) in out.iter_mut().zip(row) {
                *o += scale * v;
            }
        }
    }
}

/// How W `[D, ·, ·]` and R of a recurrent layer are laid out per direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WeightLayout {
    /// The standard ops': `[gates·hidden, input]` (and `[gates·hidden, hidden]`).
    GateMajor,
    /// onnxruntime's DynamicQuantizeLSTM: `[input, gates·hidden]` (and `[hidden,
    /// gates·hidden]`), used as stored rather than transposed on every run.
    InputMajor,
}

/// Lanes of independent partial sums in [`dot`].
const DOT_LANES: usize = 16;

crate::kernels::simd::multiversion! {
    /// A dot product over `DOT_LANES` partial sums, which the compiler keeps in vector
    /// registers (compiled per ISA): one running sum is a chain of dependent adds that it may
    /// not reorder, so it ran one multiply-add per add latency (Silero VAD's 512×256 LSTM step
    /// took 150 µs of its 0.23 ms).
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut lanes = [0.0f32; DOT_LANES];
        let (a_body, b_body) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
        let tail: f32 = a_body
            .remainder()
            .iter()
            .zip(b_body.remainder())
            .map(|(x, y)| x * y)
            .sum();
        for (a_chunk, b_chunk) in a_body.zip(b_body) {
            for lane in 0..DOT_LANES {
                lanes[lane] += a_chunk[lane] * b_chunk[lane];
            }
        }
        lanes.iter().sum::<f32>() + tail
    }
}

/// Rounds `values` through uint8 with a scale and zero point from their own range (min and max
/// widened to include 0, round half to even), as a dynamic quantizer does before an integer
/// product: `(round(v / scale) + zero point, saturated) − zero point) · scale`.
pub(crate) fn fake_quantize_u8(values: &mut [f32]) {
    let max = values.iter().copied().fold(0.0f32, f32::max);
    let min = values.iter().copied().fold(0.0f32, f32::min);
    let scale = (max - min) / 255.0;
    if scale == 0.0 || !scale.is_finite() {
        return;
    }
    let zero_point = (-min / scale).round_ties_even().clamp(0.0, 255.0);
    for v in values {
        let q = ((*v / scale).round_ties_even() + zero_point).clamp(0.0, 255.0);
        *v = (q - zero_point) * scale;
    }
}

/// W or R of one direction of a DynamicQuantizeLSTM kept in 8 bits (input-major, `[K, gate
/// columns]`): X and each step's hidden state are rounded through uint8 anyway, so `X·W` and
/// `H·R` run as onnxruntime runs them, exact integer products scaled once, on the int8 GEMM
/// (`qgemm_xw`). The 4 MB of a 512-wide layer's f32 R per direction were streamed every step;
/// as bytes they are a quarter.
///
/// The weights less their zero point span up to 255 values per gate column, stored as `s8`
/// plus a per-column offset `c` (as `kernels::qgemm::IntegerConvWeights` stores ConvInteger's
/// weights), whose product is `c` times each activation row's centred sum
/// (`qgemm::OffsetTerm`).
pub(crate) struct Int8Weights {
    dense: crate::kernels::qgemm::IntegerDenseWeights,
    /// The weights' scale per gate column.
    scales: Vec<f32>,
}

/// DynamicQuantizeLSTM's W and R in 8 bits, one [`Int8Weights`] per direction each.
#[derive(Debug)]
pub(crate) struct Int8Lstm {
    pub(crate) w: Vec<Int8Weights>,
    pub(crate) r: Vec<Int8Weights>,
}

impl Int8Lstm {
    pub(crate) fn bytes(&self) -> u64 {
        self.w.iter().chain(&self.r).map(Int8Weights::bytes).sum()
    }
}

/// Rounds `v / scale` half to even and adds `zero`, saturated to a byte: 1.5·2^23 added and
/// removed (exact in the clamped range; a libm `rint` per element otherwise).
fn quantize_byte(v: f32, scale: f32, zero: f32) -> u8 {
    const ROUND: f32 = 12_582_912.0;
    let scaled = (v / scale).clamp(-512.0, 512.0);
    (((scaled + ROUND) - ROUND) + zero).clamp(0.0, 255.0) as u8
}

impl Int8Weights {
    /// `values`: `[hidden, columns]` input-major (one direction), `zeros` and `scales` per
    /// column. None when a column is not 8-bit data.
    pub(crate) fn new(
        values: &[i64],
        hidden: usize,
        zeros: &[f32],
        scales: &[f32],
    ) -> Option<Self> {
        let columns = zeros.len();
        if values.len() != hidden * columns
            || scales.len() != columns
            || hidden == 0
            || hidden > crate::kernels::qgemm::MAX_TAPS
        {
            return None;
        }
        if zeros.iter().any(|z| z.fract() != 0.0) {
            return None;
        }
        let centred: Vec<i64> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| v - zeros[i % columns] as i64)
            .collect();
        Some(Int8Weights {
            dense: crate::kernels::qgemm::IntegerDenseWeights::new(&centred, hidden, columns)?,
            scales: scales.to_vec(),
        })
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.dense.bytes() + (self.scales.len() * 4) as u64
    }

    /// `out[r, j] = bias[j] + Σ_k x[r, k] · W[k, j]` for `rows` rows of `x`, with all of `x`
    /// rounded through uint8 on one range as [`fake_quantize_u8`] rounds it; false (nothing
    /// written) when that range gives no finite nonzero scale or `x` holds a NaN, for the
    /// caller's float product (which carries the NaN through, where a byte cannot).
    fn product(
        &self,
        x: &[f32],
        rows: usize,
        bias: &[f32],
        out: &mut [f32],
        scratch: &mut Int8Scratch,
    ) -> bool {
        let (k, columns) = (self.dense.k(), self.dense.columns());
        let max = x.iter().copied().fold(0.0f32, f32::max);
        let min = x.iter().copied().fold(0.0f32, f32::min);
        let scale = (max - min) / 255.0;
        if scale == 0.0
            || !scale.is_finite()
            || rows == 0
            || x.len() != rows * k
            || out.len() < rows * columns
            || x.iter().any(|v| v.is_nan())
        {
            return false;
        }
        let zero = (-min / scale).round_ties_even().clamp(0.0, 255.0);
        scratch.quantized.clear();
        scratch
            .quantized
            .extend(x.iter().map(|&v| quantize_byte(v, scale, zero)));
        scratch.mul.clear();
        scratch.mul.extend(self.scales.iter().map(|&s| s * scale));
        self.dense.product(
            &scratch.quantized,
            zero as u8,
            rows,
            crate::kernels::qgemm::QOut::F32 {
                data: &mut out[..rows * columns],
                requant: None,
            },
            &scratch.mul,
            &bias[..columns],
            1,
        );
        true
    }
}

impl std::fmt::Debug for Int8Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Int8Weights")
            .field("dense", &self.dense)
            .finish()
    }
}

/// Buffers of [`Int8Weights::product`], kept across steps.
#[derive(Default)]
struct Int8Scratch {
    quantized: Vec<u8>,
    mul: Vec<f32>,
}

/// Runs LSTM, GRU or RNN; returns Y, Y_h (and Y_c for LSTM).
pub(crate) fn run(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<Vec<RtTensor>> {
    run_with(node, inputs, false, WeightLayout::GateMajor, None)
}

/// [`run`], with `quantized_activations`: X (the whole sequence at once) and each step's
/// hidden state rounded through uint8 before their products with W and R, as onnxruntime's
/// DynamicQuantizeLSTM quantizes them for its integer GEMMs (the hidden state per batch row
/// here, per step over the batch there: the same for batch 1). W and R are laid out as
/// `layout` says; `int8` runs the quantized products in integers.
pub(crate) fn run_with(
    node: &Node,
    inputs: &[Option<&RtTensor>],
    quantized_activations: bool,
    layout: WeightLayout,
    int8: Option<&Int8Lstm>,
) -> Result<Vec<RtTensor>> {
    let cell = match node.op_type.as_str() {
        "LSTM" => Cell::Lstm,
        "GRU" => Cell::Gru,
        "RNN" => Cell::Rnn,
        other => return Err(format!("{other} is not a recurrent layer")),
    };
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let (x, w, r) = (
        get(0).ok_or("no X")?,
        get(1).ok_or("no W")?,
        get(2).ok_or("no R")?,
    );
    let gates = match cell {
        Cell::Lstm => 4,
        Cell::Gru => 3,
        Cell::Rnn => 1,
    };
    let batch_first = node.attrs.int_or("layout", 0) != 0;
    let [a, b, input] = x.shape[..] else {
        return Err("X must be 3-D".into());
    };
    let (seq, batch) = if batch_first { (b, a) } else { (a, b) };
    let [directions, gate_rows, w_input] = match (layout, &w.shape[..]) {
        (WeightLayout::GateMajor, &[d, g, i]) => [d, g, i],
        (WeightLayout::InputMajor, &[d, i, g]) if cell == Cell::Lstm => [d, g, i],
        _ => return Err("W must be 3-D (input-major weights: LSTM only)".into()),
    };
    let hidden = node
        .attrs
        .int("hidden_size")
        .map_or(gate_rows / gates, |h| h.max(0) as usize);
    if gate_rows != gates * hidden || w_input != input {
        return Err("W does not match hidden_size and X".into());
    }
    let r_expected = match layout {
        WeightLayout::GateMajor => [directions, gates * hidden, hidden],
        WeightLayout::InputMajor => [directions, hidden, gates * hidden],
    };
    if r.shape != r_expected {
        return Err("R does not match W".into());
    }
    let direction = node.attrs.string("direction").unwrap_or("forward");
    let reverse_only = direction == "reverse";
    if !matches!(direction, "forward" | "reverse" | "bidirectional")
        || (direction == "bidirectional") != (directions == 2)
    {
        return Err(format!(
            "direction `{direction}` with {directions} weight sets"
        ));
    }
    if node.attrs.int_or("input_forget", 0) != 0 {
        return Err("input_forget = 1 has no reference kernel".into());
    }
    let defaults: &[&str] = match cell {
        Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        Cell::Gru => &["Sigmoid", "Tanh"],
        Cell::Rnn => &["Tanh"],
    };
    let acts = activations(node, defaults, directions)?;
    let clip = node.attrs.float("clip");
    let linear_before_reset = node.attrs.int_or("linear_before_reset", 0) != 0;
    let raw_xs = x.to_f32();
    // X rounded through uint8 for the float products, made only if one runs.
    let mut rounded_xs: Option<Vec<f32>> = None;
    let int8 = int8.filter(|int8| {
        quantized_activations
            && layout == WeightLayout::InputMajor
            && int8.w.len() == directions
            && int8.r.len() == directions
    });
    // Borrowed where they are floats already: a copy of the weights per call cost as much as
    // a step's products.
    let (ws, rs) = (float_values(w), float_values(r));
    let bias = floats_of(get(3));
    let lengths: Vec<usize> = match get(4) {
        Some(t) => match &t.data {
            RtData::I64(v) => v.iter().map(|&l| (l.max(0) as usize).min(seq)).collect(),
            RtData::F32(v) => v.iter().map(|&l| (l.max(0.0) as usize).min(seq)).collect(),
        },
        None => vec![seq; batch],
    };
    let state_in = |t: Option<&RtTensor>| -> Vec<f32> {
        // Initial states are [directions, batch, hidden], or [batch, directions, hidden] in
        // layout 1: stored here as [directions][batch][hidden].
        match t {
            Some(t) if batch_first => {
                let v = t.to_f32();
                let mut out = vec![0.0; directions * batch * hidden];
                for bi in 0..batch {
                    for d in 0..directions {
                        out[(d * batch + bi) * hidden..][..hidden]
                            .copy_from_slice(&v[(bi * directions + d) * hidden..][..hidden]);
                    }
                }
                out
            }
            Some(t) => t.to_f32(),
            None => vec![0.0; directions * batch * hidden],
        }
    };
    let (h_index, c_index, p_index) = (5, 6, 7);
    let mut h_state = state_in(get(h_index));
    let mut c_state = state_in(if cell == Cell::Lstm {
        get(c_index)
    } else {
        None
    });
    let peepholes = if cell == Cell::Lstm {
        floats_of(get(p_index))
    } else {
        None
    };
    if h_state.len() != directions * batch * hidden || c_state.len() != directions * batch * hidden
    {
        return Err("an initial state does not match [directions, batch, hidden]".into());
    }
    // Y as [seq][directions][batch][hidden]; reordered for layout 1 at the end.
    let mut y = vec![0.0f32; seq * directions * batch * hidden];
    let mut pre = vec![0.0f32; gates * hidden];
    let mut recurrent = vec![0.0f32; gates * hidden];
    let mut scratch = Int8Scratch::default();
    for d in 0..directions {
        let backward = reverse_only || d == 1;
        let w_d = &ws[d * gates * hidden * input..][..gates * hidden * input];
        let r_d = &rs[d * gates * hidden * hidden..][..gates * hidden * hidden];
        let (wb, rb) = match &bias {
            Some(b) => (
                b[d * 2 * gates * hidden..][..gates * hidden].to_vec(),
                b[(d * 2 + 1) * gates * hidden..][..gates * hidden].to_vec(),
            ),
            None => (vec![0.0; gates * hidden], vec![0.0; gates * hidden]),
        };
        let act = &acts[d];
        // The default activations without peepholes or clip: the cell runs vectorised.
        let plain_lstm = cell == Cell::Lstm
            && peepholes.is_none()
            && clip.is_none()
            && matches!(act[..], [Act::Sigmoid, Act::Tanh, Act::Tanh]);
        let int8_r = int8.map(|int8| &int8.r[d]);
        // X·Wᵀ + Wb for every step at once, through the packed GEMM: per step it was a
        // product that streamed all of W (4 MB for a 512-wide LSTM, past the L2) for one row.
        let steps_rows = seq * batch;
        let mut projected = vec![0.0f32; steps_rows * gates * hidden];
        let int8_projected = int8.is_some_and(|int8| {
            int8.w[d].product(&raw_xs, steps_rows, &wb, &mut projected, &mut scratch)
        });
        if !int8_projected {
            let xs: &[f32] = match (quantized_activations, &mut rounded_xs) {
                (false, _) => &raw_xs,
                (true, Some(rounded)) => rounded,
                (true, slot) => {
                    let mut rounded = raw_xs.clone();
                    fake_quantize_u8(&mut rounded);
                    slot.insert(rounded)
                }
            };
            let w_transposed = match layout {
                WeightLayout::GateMajor => gemm::MatRef {
                    data: w_d,
                    rows: input,
                    cols: gates * hidden,
                    row_stride: 1,
                    col_stride: input,
                },
                WeightLayout::InputMajor => gemm::MatRef::row_major(w_d, input, gates * hidden),
            };
            gemm::sgemm(
                &gemm::MatRef::row_major(xs, steps_rows, input),
                &w_transposed,
                &mut projected,
                gates * hidden,
                &gemm::Epilogue {
                    bias: gemm::BiasKind::PerCol(&wb),
                    ..gemm::Epilogue::NONE
                },
                1,
            );
        }
        for bi in 0..batch {
            let len = lengths[bi];
            let h = &mut h_state[(d * batch + bi) * hidden..][..hidden];
            let c = &mut c_state[(d * batch + bi) * hidden..][..hidden];
            for step in 0..len {
                let t = if backward { len - 1 - step } else { step };
                // Row of X (and of its projection) for this step and batch row.
                let x_row = if batch_first {
                    bi * seq + t
                } else {
                    t * batch + bi
                };
                pre.copy_from_slice(&projected[x_row * gates * hidden..][..gates * hidden]);
                let int8_done = quantized_activations
                    && int8_r.is_some_and(|r| r.product(h, 1, &rb, &mut recurrent, &mut scratch));
                if !int8_done {
                    recurrent.copy_from_slice(&rb);
                    let rounded;
                    let h_used: &[f32] = if quantized_activations {
                        let mut values = h.to_vec();
                        fake_quantize_u8(&mut values);
                        rounded = values;
                        &rounded
                    } else {
                        h
                    };
                    match layout {
                        WeightLayout::GateMajor => add_product(&mut recurrent, h_used, r_d),
                        WeightLayout::InputMajor => {
                            add_product_input_major(&mut recurrent, h_used, r_d)
                        }
                    }
                }
                let clipped = |v: f32| clip.map_or(v, |c| v.clamp(-c, c));
                match cell {
                    Cell::Rnn => {
                        for k in 0..hidden {
                            h[k] = act[0].apply(clipped(pre[k] + recurrent[k]));
                        }
                    }
                    Cell::Lstm if plain_lstm => {
                        // The gates a block at a time through the vectorised activations
                        // (gate order i, o, f, c: the three sigmoid gates are contiguous); a
                        // libm `expf`/`tanhf` per element was two thirds of ddddocr's LSTM.
                        for (p, r) in pre.iter_mut().zip(&recurrent) {
                            *p += r;
                        }
                        let (sigmoid_gates, candidates) = pre.split_at_mut(3 * hidden);
                        unary_in_place(Unary::Sigmoid, sigmoid_gates);
                        unary_in_place(Unary::Tanh, candidates);
                        for k in 0..hidden {
                            let (i, f) = (sigmoid_gates[k], sigmoid_gates[2 * hidden + k]);
                            c[k] = f * c[k] + i * candidates[k];
                        }
                        let cell_tanh = &mut recurrent[..hidden];
                        cell_tanh.copy_from_slice(c);
                        unary_in_place(Unary::Tanh, cell_tanh);
                        for k in 0..hidden {
                            h[k] = sigmoid_gates[hidden + k] * cell_tanh[k];
                        }
                    }
                    Cell::Lstm => {
                        // Gate order i, o, f, c; peepholes i, o, f.
                        let peep = |g: usize, k: usize| {
                            peepholes
                                .as_ref()
                                .map_or(0.0, |p| p[d * 3 * hidden + g * hidden + k])
                        };
                        for k in 0..hidden {
                            let gate = |g: usize| pre[g * hidden + k] + recurrent[g * hidden + k];
                            let i = act[0].apply(clipped(gate(0) + peep(0, k) * c[k]));
                            let f = act[0].apply(clipped(gate(2) + peep(2, k) * c[k]));
                            let candidate = act[1].apply(clipped(gate(3)));
                            c[k] = f * c[k] + i * candidate;
                            let o = act[0].apply(clipped(gate(1) + peep(1, k) * c[k]));
                            h[k] = o * act[2].apply(c[k]);
                        }
                    }
                    Cell::Gru => {
                        // Gate order z, r, h.
                        let mut next = vec![0.0f32; hidden];
                        let r_gate: Vec<f32> = (0..hidden)
                            .map(|k| act[0].apply(clipped(pre[hidden + k] + recurrent[hidden + k])))
                            .collect();
                        let candidate_recurrent: Vec<f32> = if linear_before_reset {
                            (0..hidden)
                                .map(|k| r_gate[k] * recurrent[2 * hidden + k])
                                .collect()
                        } else {
                            let reset: Vec<f32> = (0..hidden).map(|k| r_gate[k] * h[k]).collect();
                            let mut out = rb[2 * hidden..3 * hidden].to_vec();
                            add_product(&mut out, &reset, &r_d[2 * hidden * hidden..]);
                            out
                        };
                        for k in 0..hidden {
                            let z = act[0].apply(clipped(pre[k] + recurrent[k]));
                            let candidate =
                                act[1].apply(clipped(pre[2 * hidden + k] + candidate_recurrent[k]));
                            next[k] = (1.0 - z) * candidate + z * h[k];
                        }
                        h.copy_from_slice(&next);
                    }
                }
                y[((t * directions + d) * batch + bi) * hidden..][..hidden].copy_from_slice(h);
            }
        }
    }
    let (y_shape, y) = if batch_first {
        let mut out = vec![0.0f32; y.len()];
        for t in 0..seq {
            for d in 0..directions {
                for bi in 0..batch {
                    out[((bi * seq + t) * directions + d) * hidden..][..hidden].copy_from_slice(
                        &y[((t * directions + d) * batch + bi) * hidden..][..hidden],
                    );
                }
            }
        }
        (vec![batch, seq, directions, hidden], out)
    } else {
        (vec![seq, directions, batch, hidden], y)
    };
    let state_out = |state: Vec<f32>| -> RtTensor {
        if batch_first {
            let mut out = vec![0.0f32; state.len()];
            for d in 0..directions {
                for bi in 0..batch {
                    out[(bi * directions + d) * hidden..][..hidden]
                        .copy_from_slice(&state[(d * batch + bi) * hidden..][..hidden]);
                }
            }
            RtTensor {
                shape: vec![batch, directions, hidden],
                data: RtData::F32(out),
            }
        } else {
            RtTensor {
                shape: vec![directions, batch, hidden],
                data: RtData::F32(state),
            }
        }
    };
    Ok(vec![
        RtTensor {
            shape: y_shape,
            data: RtData::F32(y),
        },
        state_out(h_state),
        state_out(c_state),
    ])
}

#[cfg(test)]
mod tests {
    //! The int8 recurrent product against the float one it replaces (the hidden state rounded
    //! through uint8, R dequantized), with asymmetric u8 weights that need per-column offsets.
    use super::*;

    /// A bidirectional LSTM (seq 5, batch 2, input 6, hidden 7) with seeded weights, its
    /// attributes `extra` added.
    fn lstm_outputs(extra: &[(&str, crate::analysis::graph::Attr)]) -> Vec<Vec<f32>> {
        use crate::analysis::graph::{Attr, Attributes};
        let (seq, batch, input, hidden) = (5, 2, 6, 7);
        let values = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.07)
                .collect()
        };
        let tensor = |shape: &[usize], seed: usize| RtTensor {
            shape: shape.to_vec(),
            data: RtData::F32(values(shape.iter().product(), seed)),
        };
        let x = tensor(&[seq, batch, input], 1);
        let w = tensor(&[2, 4 * hidden, input], 2);
        let r = tensor(&[2, 4 * hidden, hidden], 3);
        let b = tensor(&[2, 8 * hidden], 4);
        let mut attrs = Attributes::default();
        attrs
            .0
            .insert("hidden_size".into(), Attr::Int(hidden as i64));
        attrs
            .0
            .insert("direction".into(), Attr::String("bidirectional".into()));
        for (name, value) in extra {
            attrs.0.insert(name.to_string(), value.clone());
        }
        let node = Node {
            name: "lstm".into(),
            op_type: "LSTM".into(),
            domain: String::new(),
            attrs,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        run(&node, &[Some(&x), Some(&w), Some(&r), Some(&b)])
            .unwrap()
            .iter()
            .map(RtTensor::to_f32)
            .collect()
    }

    #[test]
    fn the_vectorised_lstm_cell_matches_the_general_one() {
        // A clip far above every gate value takes the general, element-by-element cell.
        let plain = lstm_outputs(&[]);
        let general = lstm_outputs(&[("clip", crate::analysis::graph::Attr::Float(1e30))]);
        assert_eq!(plain.len(), 3);
        for (p, g) in plain.iter().zip(&general) {
            assert_eq!(p.len(), g.len());
            for (a, b) in p.iter().zip(g) {
                assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
            }
        }
        assert!(plain[0].iter().any(|&v| v.abs() > 0.05));
    }

    #[test]
    fn int8_recurrent_product_matches_the_dequantized_float_product() {
        if !crate::kernels::qgemm::multiplies_bytes_natively() {
            return;
        }
        let (hidden, columns) = (37, 44);
        // u8 weights over the whole byte, zero points 100..=143 per column, scales per column.
        let values: Vec<i64> = (0..hidden * columns)
            .map(|i| ((i * 97 + i / 7) % 256) as i64)
            .collect();
        let zeros: Vec<f32> = (0..columns).map(|c| (100 + c) as f32).collect();
        let scales: Vec<f32> = (0..columns).map(|c| 0.01 + 0.001 * c as f32).collect();
        let int8 = Int8Weights::new(&values, hidden, &zeros, &scales).unwrap();
        assert!(int8.dense.offsets().iter().any(|&c| c != 0));
        let r: Vec<f32> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| (v as f32 - zeros[i % columns]) * scales[i % columns])
            .collect();
        let bias: Vec<f32> = (0..columns).map(|c| c as f32 * 0.05 - 1.0).collect();
        // One row (a step's hidden state), three and thirteen (a sequence's X, on one range:
        // the one-row and the tiled kernel).
        for rows in [1, 3, 13] {
            let x: Vec<f32> = (0..rows * hidden)
                .map(|k| ((k * 13) % 17) as f32 * 0.11 - 0.8 + (k / hidden) as f32 * 0.3)
                .collect();
            let mut rounded = x.clone();
            fake_quantize_u8(&mut rounded);
            let mut got = vec![f32::NAN; rows * columns];
            assert!(int8.product(&x, rows, &bias, &mut got, &mut Int8Scratch::default()));
            for row in 0..rows {
                let x_row = &rounded[row * hidden..][..hidden];
                let mut expected = bias.clone();
                add_product_input_major(&mut expected, x_row, &r);
                for (j, e) in expected.iter().enumerate() {
                    let g = got[row * columns + j];
                    // Sum of the terms' magnitudes bounds the float product's rounding.
                    let magnitude: f32 = bias[j].abs()
                        + (0..hidden)
                            .map(|k| (x_row[k] * r[k * columns + j]).abs())
                            .sum::<f32>();
                    assert!((g - e).abs() <= 1e-5 * magnitude, "{row}, {j}: {g} vs {e}");
                }
            }
        }
        let mut got = vec![f32::NAN; columns];
        // An all-zero state has no scale: the caller's float product runs instead.
        assert!(!int8.product(
            &vec![0.0; hidden],
            1,
            &bias,
            &mut got,
            &mut Int8Scratch::default()
        ));
    }
}
