//! Decoder-only language models built from their published configurations: a Llama-style
//! decoder (RMSNorm, rotary position embedding, grouped-query attention, SwiGLU MLP) and a
//! GPT-2-style one (LayerNorm, learned positions, fused QKV projection, tanh-GELU MLP, tied
//! embeddings), each with a KV cache: `past_key_values.{i}.key/value` inputs of shape
//! `[batch, kv_heads, past_sequence, head_dim]` and `present.{i}.key/value` outputs holding
//! `past + new` entries, as Hugging Face's ONNX exports lay them out.
//!
//! The graphs use standard ONNX ops only (opset 17), in the pattern exporters emit, so the same
//! analysis costs them as it costs an export, and a small preset runs in the executor. Weights
//! are symbolic when analysed (declared by shape, never materialised): a 70B model analyses in
//! milliseconds.
//!
//! Choices stated once:
//! - Grouped-query attention multiplies each KV head against its group of query heads as one
//!   batched MatMul (queries reshaped to `[batch, kv_heads, group·sequence, head_dim]`), so
//!   the cache is read once per KV head, as fused attention kernels read it; no repeated copy
//!   of the cache is made.
//! - Logits are computed for every new position (what an export returns), not only the last.
//! - The causal mask is a boolean `Where` computed from positions; it folds to a constant once
//!   the dims are bound.

use super::builder::{attr_int, attr_ints, GraphBuilder, SigDim, WeightFill};
use crate::analysis::onnx_proto::ModelProto;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

/// The two decoder layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// RMSNorm, rotary embedding, grouped-query attention, SwiGLU (Llama, Mistral, Qwen2).
    Llama,
    /// LayerNorm, learned positions, fused QKV with biases, tanh-GELU MLP, tied embeddings.
    Gpt2,
}

/// A decoder's published configuration (the `config.json` numbers).
#[derive(Clone, Copy, Debug)]
pub struct DecoderConfig {
    pub family: Family,
    pub hidden: i64,
    pub layers: usize,
    pub heads: i64,
    pub kv_heads: i64,
    pub intermediate: i64,
    pub vocab: i64,
    pub max_positions: i64,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// Biases on the Q, K and V projections (Qwen2).
    pub qkv_bias: bool,
    /// Where the numbers come from.
    pub source: &'static str,
}

impl DecoderConfig {
    pub fn head_dim(&self) -> i64 {
        self.hidden / self.heads
    }

    /// Query heads per KV head.
    pub fn group(&self) -> i64 {
        self.heads / self.kv_heads
    }

    /// Parameters as the configuration defines them (embeddings, projections, norms, biases;
    /// the rotary tables are buffers, not parameters).
    pub fn parameter_count(&self) -> u64 {
        let h = self.hidden as u64;
        let kv = (self.kv_heads * self.head_dim()) as u64;
        let ffn = self.intermediate as u64;
        let vocab = self.vocab as u64;
        match self.family {
            Family::Llama => {
                let attention = h * h * 2 + h * kv * 2 + if self.qkv_bias { h + 2 * kv } else { 0 };
                let mlp = 3 * h * ffn;
                let per_layer = attention + mlp + 2 * h;
                2 * vocab * h + self.layers as u64 * per_layer + h
            }
            Family::Gpt2 => {
                let attention = h * 3 * h + 3 * h + h * h + h;
                let mlp = h * ffn + ffn + ffn * h + h;
                let per_layer = attention + mlp + 4 * h;
                vocab * h + self.max_positions as u64 * h + self.layers as u64 * per_layer + 2 * h
            }
        }
    }
}

/// meta-llama/Llama-2-7b-hf `config.json` (Touvron et al. 2023, "Llama 2", table 1).
pub const LLAMA2_7B: DecoderConfig = DecoderConfig {
    family: Family::Llama,
    hidden: 4096,
    layers: 32,
    heads: 32,
    kv_heads: 32,
    intermediate: 11008,
    vocab: 32000,
    max_positions: 4096,
    rope_theta: 10_000.0,
    norm_eps: 1e-5,
    qkv_bias: false,
    source: "huggingface.co/meta-llama/Llama-2-7b-hf config.json",
};

/// meta-llama/Llama-2-13b-hf `config.json`.
pub const LLAMA2_13B: DecoderConfig = DecoderConfig {
    hidden: 5120,
    layers: 40,
    heads: 40,
    kv_heads: 40,
    intermediate: 13824,
    source: "huggingface.co/meta-llama/Llama-2-13b-hf config.json",
    ..LLAMA2_7B
};

/// meta-llama/Llama-2-70b-hf `config.json` (grouped-query attention, 8 KV heads).
pub const LLAMA2_70B: DecoderConfig = DecoderConfig {
    hidden: 8192,
    layers: 80,
    heads: 64,
    kv_heads: 8,
    intermediate: 28672,
    source: "huggingface.co/meta-llama/Llama-2-70b-hf config.json",
    ..LLAMA2_7B
};

/// meta-llama/Meta-Llama-3-8B `config.json`.
pub const LLAMA3_8B: DecoderConfig = DecoderConfig {
    family: Family::Llama,
    hidden: 4096,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    intermediate: 14336,
    vocab: 128_256,
    max_positions: 8192,
    rope_theta: 500_000.0,
    norm_eps: 1e-5,
    qkv_bias: false,
    source: "huggingface.co/meta-llama/Meta-Llama-3-8B config.json",
};

/// meta-llama/Meta-Llama-3-70B `config.json`.
pub const LLAMA3_70B: DecoderConfig = DecoderConfig {
    hidden: 8192,
    layers: 80,
    heads: 64,
    kv_heads: 8,
    intermediate: 28672,
    source: "huggingface.co/meta-llama/Meta-Llama-3-70B config.json",
    ..LLAMA3_8B
};

/// mistralai/Mistral-7B-v0.1 `config.json` (its 4096-token sliding window is not modelled:
/// attention spans the whole cache, exact up to a KV length of 4096).
pub const MISTRAL_7B: DecoderConfig = DecoderConfig {
    family: Family::Llama,
    hidden: 4096,
    layers: 32,
    heads: 32,
    kv_heads: 8,
    intermediate: 14336,
    vocab: 32000,
    max_positions: 32768,
    rope_theta: 10_000.0,
    norm_eps: 1e-5,
    qkv_bias: false,
    source: "huggingface.co/mistralai/Mistral-7B-v0.1 config.json",
};

/// Qwen/Qwen2.5-7B `config.json` (biases on Q, K and V).
pub const QWEN25_7B: DecoderConfig = DecoderConfig {
    family: Family::Llama,
    hidden: 3584,
    layers: 28,
    heads: 28,
    kv_heads: 4,
    intermediate: 18944,
    vocab: 152_064,
    max_positions: 131_072,
    rope_theta: 1_000_000.0,
    norm_eps: 1e-6,
    qkv_bias: true,
    source: "huggingface.co/Qwen/Qwen2.5-7B config.json",
};

/// openai-community/gpt2 `config.json` (GPT-2 small, 124M).
pub const GPT2_SMALL: DecoderConfig = DecoderConfig {
    family: Family::Gpt2,
    hidden: 768,
    layers: 12,
    heads: 12,
    kv_heads: 12,
    intermediate: 3072,
    vocab: 50257,
    max_positions: 1024,
    rope_theta: 0.0,
    norm_eps: 1e-5,
    qkv_bias: true,
    source: "huggingface.co/openai-community/gpt2 config.json",
};

/// A Llama-style decoder small enough to run in the executor at once (2 layers, hidden 256,
/// grouped-query attention with 2 KV heads): the preset `bench` and the tests measure.
pub const LLAMA_TINY: DecoderConfig = DecoderConfig {
    family: Family::Llama,
    hidden: 256,
    layers: 2,
    heads: 4,
    kv_heads: 2,
    intermediate: 688,
    vocab: 2048,
    max_positions: 1024,
    rope_theta: 10_000.0,
    norm_eps: 1e-5,
    qkv_bias: false,
    source: "a test size chosen here, Llama-2 layout",
};

/// A GPT-2-style decoder small enough to run (2 layers, hidden 128, 4 heads, learned
/// positions, LayerNorm, GELU MLP, QKV bias, tied embeddings): the GPT-2-class export the tests
/// check against onnxruntime with its `past_key_values` inputs.
pub const GPT2_TINY: DecoderConfig = DecoderConfig {
    family: Family::Gpt2,
    hidden: 128,
    layers: 2,
    heads: 4,
    kv_heads: 4,
    intermediate: 512,
    vocab: 1024,
    max_positions: 256,
    rope_theta: 0.0,
    norm_eps: 1e-5,
    qkv_bias: true,
    source: "a test size chosen here, GPT-2 layout",
};

/// Names of the symbolic dims every decoder uses.
pub const BATCH: &str = "batch";
pub const SEQUENCE: &str = "sequence";
pub const PAST_SEQUENCE: &str = "past_sequence";
/// The cache outputs' length, past + new (never bound: it follows from the other two).
pub const TOTAL_SEQUENCE: &str = "total_sequence";

/// Builds the decoder as an ONNX model.
pub fn build(name: &str, config: &DecoderConfig, fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let ids = b.input(
        "input_ids",
        INT64,
        &[SigDim::Named(BATCH), SigDim::Named(SEQUENCE)],
    );
    let head_dim = config.head_dim();
    let kv_dims = [
        SigDim::Named(BATCH),
        SigDim::Fixed(config.kv_heads),
        SigDim::Named(PAST_SEQUENCE),
        SigDim::Fixed(head_dim),
    ];
    let past: Vec<(String, String)> = (0..config.layers)
        .map(|i| {
            (
                b.input(&format!("past_key_values.{i}.key"), FLOAT, &kv_dims),
                b.input(&format!("past_key_values.{i}.value"), FLOAT, &kv_dims),
            )
        })
        .collect();

    // Positions of the new tokens: past_sequence .. past_sequence + sequence. Shape arithmetic
    // on the inputs, so it folds once the dims are bound.
    let zero = b.int64_const("zero", &[0]);
    let one = b.int64_const("one", &[1]);
    let two = b.int64_const("two", &[2]);
    let ids_shape = b.node("Shape", &[&ids], vec![]);
    let seq_len = b.node("Gather", &[&ids_shape, &one], vec![attr_int("axis", 0)]);
    let past_shape = b.node("Shape", &[&past[0].0], vec![]);
    let past_len = b.node("Gather", &[&past_shape, &two], vec![attr_int("axis", 0)]);
    let total_len = b.node("Add", &[&past_len, &seq_len], vec![]);
    let past_scalar = b.node("Squeeze", &[&past_len, &zero], vec![]);
    let total_scalar = b.node("Squeeze", &[&total_len, &zero], vec![]);
    let one_scalar = b.int64_scalar("step", 1);
    let zero_scalar = b.int64_scalar("start", 0);
    let positions = b.node("Range", &[&past_scalar, &total_scalar, &one_scalar], vec![]);
    // Causal mask [sequence, past + sequence]: key j is hidden from query i when j > position i.
    let key_positions = b.node("Range", &[&zero_scalar, &total_scalar, &one_scalar], vec![]);
    let mut rows = b.node("Unsqueeze", &[&positions, &one], vec![]);
    if config.group() > 1 {
        // One mask row per (query head of the group, position), the order grouped queries
        // are laid out in: [group·sequence, past + sequence].
        let copies = vec![rows.as_str(); config.group() as usize];
        rows = b.node("Concat", &copies, vec![attr_int("axis", 0)]);
    }
    let cols = b.node("Unsqueeze", &[&key_positions, &zero], vec![]);
    let hidden_keys = b.node("Greater", &[&cols, &rows], vec![]);
    let masked = b.scalar_const("masked", f32::MIN);

    let (mut x, token_table) = match config.family {
        Family::Llama => {
            let table = b.weight(
                "embed_tokens",
                &[config.vocab, config.hidden],
                config.hidden,
            );
            let x = b.node("Gather", &[&table, &ids], vec![attr_int("axis", 0)]);
            (x, table)
        }
        Family::Gpt2 => {
            let table = b.weight("wte", &[config.vocab, config.hidden], config.hidden);
            let words = b.node("Gather", &[&table, &ids], vec![attr_int("axis", 0)]);
            let position_table =
                b.weight("wpe", &[config.max_positions, config.hidden], config.hidden);
            let pos = b.node(
                "Gather",
                &[&position_table, &positions],
                vec![attr_int("axis", 0)],
            );
            (b.add(&words, &pos), table)
        }
    };
    let rotary = (config.family == Family::Llama).then(|| {
        let half = head_dim / 2;
        let theta = config.rope_theta;
        let max_positions = config.max_positions;
        let angles = move |f: fn(f32) -> f32| {
            move || {
                let mut out = Vec::with_capacity((max_positions * half) as usize);
                for p in 0..max_positions {
                    for i in 0..half {
                        let inv_freq = theta.powf(-(2 * i) as f32 / head_dim as f32);
                        out.push(f(p as f32 * inv_freq));
                    }
                }
                out
            }
        };
        let cos_table = b.table("rope_cos", &[max_positions, half], angles(f32::cos));
        let sin_table = b.table("rope_sin", &[max_positions, half], angles(f32::sin));
        let cos = b.node(
            "Gather",
            &[&cos_table, &positions],
            vec![attr_int("axis", 0)],
        );
        let sin = b.node(
            "Gather",
            &[&sin_table, &positions],
            vec![attr_int("axis", 0)],
        );
        (cos, sin)
    });
    let scale = b.scalar_const("attention_scale", 1.0 / (head_dim as f32).sqrt());
    let layer_tensors = LayerTensors {
        rotary: rotary.clone(),
        hidden_keys: hidden_keys.clone(),
        masked: masked.clone(),
        scale,
        ids_shape: ids_shape.clone(),
    };
    for (layer, (past_key, past_value)) in past.iter().enumerate() {
        // Hugging Face's module names: `model.layers.N` (Llama), `transformer.h.N` (GPT-2).
        b.set_scope(&match config.family {
            Family::Llama => format!("layers.{layer}"),
            Family::Gpt2 => format!("h.{layer}"),
        });
        x = match config.family {
            Family::Llama => llama_layer(
                &mut b,
                config,
                &layer_tensors,
                &x,
                layer,
                past_key,
                past_value,
            ),
            Family::Gpt2 => gpt2_layer(
                &mut b,
                config,
                &layer_tensors,
                &x,
                layer,
                past_key,
                past_value,
            ),
        };
    }
    b.set_scope("");
    let logits = match config.family {
        Family::Llama => {
            let h = rms_norm(&mut b, &x, config);
            let head = b.weight("lm_head", &[config.hidden, config.vocab], config.hidden);
            b.node_multi("MatMul", &[&h, &head], vec![], &["logits"]);
            "logits".to_string()
        }
        Family::Gpt2 => {
            let h = b.layer_norm_eps(&x, config.hidden, config.norm_eps);
            // Tied embeddings: the token table read transposed, [batch·sequence, hidden] ·
            // wteᵀ, as one Gemm (the table is stored once).
            let flat = b.reshape(&h, &[-1, config.hidden]);
            let scores = b.node("Gemm", &[&flat, &token_table], vec![attr_int("transB", 1)]);
            let vocab = b.int64_const("vocab", &[config.vocab]);
            let shape = b.node("Concat", &[&ids_shape, &vocab], vec![attr_int("axis", 0)]);
            b.node_multi("Reshape", &[&scores, &shape], vec![], &["logits"]);
            "logits".to_string()
        }
    };
    b.output(
        &logits,
        FLOAT,
        &[
            SigDim::Named(BATCH),
            SigDim::Named(SEQUENCE),
            SigDim::Fixed(config.vocab),
        ],
    );
    b.finish(name)
}

/// Tensors shared by every layer.
struct LayerTensors {
    rotary: Option<(String, String)>,
    hidden_keys: String,
    masked: String,
    scale: String,
    /// [batch, sequence]: the leading dims a flattened projection's output is shaped back to.
    ids_shape: String,
}

fn rms_norm(b: &mut GraphBuilder, x: &str, config: &DecoderConfig) -> String {
    let two = b.scalar_const("two_f", 2.0);
    let squared = b.node("Pow", &[x, &two], vec![]);
    let mean = b.node(
        "ReduceMean",
        &[&squared],
        vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
    );
    let eps = b.scalar_const("rms_eps", config.norm_eps);
    let shifted = b.node("Add", &[&mean, &eps], vec![]);
    let root = b.node("Sqrt", &[&shifted], vec![]);
    let inverse = b.node("Reciprocal", &[&root], vec![]);
    let normed = b.node("Mul", &[x, &inverse], vec![]);
    let weight = b.jitter("rms_weight", &[config.hidden], 1.0, 0.05);
    b.node("Mul", &[&normed, &weight], vec![])
}

/// Rotary embedding on the last axis of `x` ([..., sequence, head_dim]), in the half-split
/// form: (x₁·cos − x₂·sin, x₂·cos + x₁·sin).
fn rope(b: &mut GraphBuilder, x: &str, rotary: &(String, String), head_dim: i64) -> String {
    let (cos, sin) = rotary;
    let half = head_dim / 2;
    let axis = b.int64_const("last_axis", &[-1]);
    let starts = b.int64_const("starts", &[0]);
    let middle = b.int64_const("middle", &[half]);
    let ends = b.int64_const("ends", &[head_dim]);
    let x1 = b.node("Slice", &[x, &starts, &middle, &axis], vec![]);
    let x2 = b.node("Slice", &[x, &middle, &ends, &axis], vec![]);
    let x1_cos = b.node("Mul", &[&x1, cos], vec![]);
    let x2_sin = b.node("Mul", &[&x2, sin], vec![]);
    let x2_cos = b.node("Mul", &[&x2, cos], vec![]);
    let x1_sin = b.node("Mul", &[&x1, sin], vec![]);
    let first = b.node("Sub", &[&x1_cos, &x2_sin], vec![]);
    let second = b.node("Add", &[&x2_cos, &x1_sin], vec![]);
    b.node("Concat", &[&first, &second], vec![attr_int("axis", -1)])
}

/// Attention over the cache: `q` is [batch, kv_heads, group, sequence, head_dim], `k` and `v`
/// the new entries [batch, kv_heads, sequence, head_dim]. Returns [batch, sequence, hidden].
#[allow(clippy::too_many_arguments)]
fn attention(
    b: &mut GraphBuilder,
    config: &DecoderConfig,
    shared: &LayerTensors,
    q: &str,
    k: &str,
    v: &str,
    layer: usize,
    past_key: &str,
    past_value: &str,
) -> String {
    let head_dim = config.head_dim();
    let group = config.group();
    let present_key = format!("present.{layer}.key");
    let present_value = format!("present.{layer}.value");
    b.node_multi(
        "Concat",
        &[past_key, k],
        vec![attr_int("axis", 2)],
        &[&present_key],
    );
    b.node_multi(
        "Concat",
        &[past_value, v],
        vec![attr_int("axis", 2)],
        &[&present_value],
    );
    let cache_dims = [
        SigDim::Named(BATCH),
        SigDim::Fixed(config.kv_heads),
        SigDim::Named(TOTAL_SEQUENCE),
        SigDim::Fixed(head_dim),
    ];
    b.output(&present_key, FLOAT, &cache_dims);
    b.output(&present_value, FLOAT, &cache_dims);
    // [batch, kv_heads, group·sequence, head_dim] · [batch, kv_heads, head_dim, total].
    // The 1/√d scale on the queries, as exporters write it: the GEMM takes it as alpha.
    let grouped_q = b.reshape(q, &[0, 0, -1, head_dim]);
    let grouped_q = b.node("Mul", &[&grouped_q, &shared.scale], vec![]);
    let keys_t = b.transpose(&present_key, &[0, 1, 3, 2]);
    let scores = b.node("MatMul", &[&grouped_q, &keys_t], vec![]);
    let masked = b.node(
        "Where",
        &[&shared.hidden_keys, &shared.masked, &scores],
        vec![],
    );
    let probs = b.softmax(&masked, -1);
    let context = b.node("MatMul", &[&probs, &present_value], vec![]);
    // [batch, kv_heads, group, sequence, head_dim] → [batch, sequence, kv_heads, group, head_dim].
    let context = b.reshape(&context, &[0, 0, group, -1, head_dim]);
    let context = b.transpose(&context, &[0, 3, 1, 2, 4]);
    b.reshape(&context, &[0, 0, config.hidden])
}

fn projection(b: &mut GraphBuilder, x: &str, inputs: i64, outputs: i64, bias: bool) -> String {
    if bias {
        b.linear(x, inputs, outputs)
    } else {
        let w = b.weight("proj_w", &[inputs, outputs], inputs);
        b.node("MatMul", &[x, &w], vec![])
    }
}

/// GPT-2's `Conv1D` as Hugging Face exports it: the activations flattened to rows, one Gemm with
/// the bias (`addmm`), the result shaped back to [batch, sequence, outputs].
fn conv1d(
    b: &mut GraphBuilder,
    shared: &LayerTensors,
    x: &str,
    inputs: i64,
    outputs: i64,
) -> String {
    let rows = b.reshape(x, &[-1, inputs]);
    let w = b.weight("conv1d_w", &[inputs, outputs], inputs);
    let bias = b.jitter("conv1d_b", &[outputs], 0.0, 0.02);
    let y = b.node("Gemm", &[&rows, &w, &bias], vec![]);
    let width = b.int64_const("conv1d_outputs", &[outputs]);
    let shape = b.node(
        "Concat",
        &[&shared.ids_shape, &width],
        vec![attr_int("axis", 0)],
    );
    b.node("Reshape", &[&y, &shape], vec![])
}

fn llama_layer(
    b: &mut GraphBuilder,
    config: &DecoderConfig,
    shared: &LayerTensors,
    x: &str,
    layer: usize,
    past_key: &str,
    past_value: &str,
) -> String {
    let head_dim = config.head_dim();
    let kv_width = config.kv_heads * head_dim;
    let rotary = shared
        .rotary
        .as_ref()
        .expect("Llama layers have rotary tables");
    let h = rms_norm(b, x, config);
    let q = projection(b, &h, config.hidden, config.hidden, config.qkv_bias);
    let k = projection(b, &h, config.hidden, kv_width, config.qkv_bias);
    let v = projection(b, &h, config.hidden, kv_width, config.qkv_bias);
    let q = b.reshape(&q, &[0, 0, config.kv_heads, config.group(), head_dim]);
    let q = b.transpose(&q, &[0, 2, 3, 1, 4]);
    let k = b.reshape(&k, &[0, 0, config.kv_heads, head_dim]);
    let k = b.transpose(&k, &[0, 2, 1, 3]);
    let v = b.reshape(&v, &[0, 0, config.kv_heads, head_dim]);
    let v = b.transpose(&v, &[0, 2, 1, 3]);
    let q = rope(b, &q, rotary, head_dim);
    let k = rope(b, &k, rotary, head_dim);
    let context = attention(b, config, shared, &q, &k, &v, layer, past_key, past_value);
    let out = projection(b, &context, config.hidden, config.hidden, false);
    let x = b.add(x, &out);
    let h = rms_norm(b, &x, config);
    let gate = projection(b, &h, config.hidden, config.intermediate, false);
    let up = projection(b, &h, config.hidden, config.intermediate, false);
    let sigmoid = b.node("Sigmoid", &[&gate], vec![]);
    let silu = b.node("Mul", &[&gate, &sigmoid], vec![]);
    let gated = b.node("Mul", &[&silu, &up], vec![]);
    let down = projection(b, &gated, config.intermediate, config.hidden, false);
    b.add(&x, &down)
}

fn gpt2_layer(
    b: &mut GraphBuilder,
    config: &DecoderConfig,
    shared: &LayerTensors,
    x: &str,
    layer: usize,
    past_key: &str,
    past_value: &str,
) -> String {
    let hidden = config.hidden;
    let head_dim = config.head_dim();
    let h = b.layer_norm_eps(x, hidden, config.norm_eps);
    let qkv = conv1d(b, shared, &h, hidden, 3 * hidden);
    let sizes = b.int64_const("qkv_split", &[hidden, hidden, hidden]);
    let names: Vec<String> = (0..3).map(|i| format!("qkv_{layer}_{i}")).collect();
    b.node_multi(
        "Split",
        &[&qkv, &sizes],
        vec![attr_int("axis", -1)],
        &[&names[0], &names[1], &names[2]],
    );
    let heads = |b: &mut GraphBuilder, t: &str| {
        let r = b.reshape(t, &[0, 0, config.heads, head_dim]);
        b.transpose(&r, &[0, 2, 1, 3])
    };
    let q = heads(b, &names[0]);
    let q = b.reshape(&q, &[0, 0, 1, -1, head_dim]);
    let k = heads(b, &names[1]);
    let v = heads(b, &names[2]);
    let context = attention(b, config, shared, &q, &k, &v, layer, past_key, past_value);
    let out = conv1d(b, shared, &context, hidden, hidden);
    let x = b.add(x, &out);
    let h = b.layer_norm_eps(&x, hidden, config.norm_eps);
    let up = conv1d(b, shared, &h, hidden, config.intermediate);
    // GELU, tanh form (GPT-2's gelu_new): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    let three = b.scalar_const("three", 3.0);
    let cube = b.node("Pow", &[&up, &three], vec![]);
    let coefficient = b.scalar_const("gelu_c", 0.044715);
    let cubic = b.node("Mul", &[&cube, &coefficient], vec![]);
    let inner = b.add(&up, &cubic);
    let sqrt_2_pi = b.scalar_const("sqrt_2_over_pi", (2.0 / std::f32::consts::PI).sqrt());
    let inner = b.node("Mul", &[&inner, &sqrt_2_pi], vec![]);
    let tanh = b.node("Tanh", &[&inner], vec![]);
    let one = b.scalar_const("one_f", 1.0);
    let shifted = b.add(&tanh, &one);
    let gated = b.node("Mul", &[&up, &shifted], vec![]);
    let half = b.scalar_const("half", 0.5);
    let gelu = b.node("Mul", &[&gated, &half], vec![]);
    let down = conv1d(b, shared, &gelu, config.intermediate, hidden);
    b.add(&x, &down)
}
