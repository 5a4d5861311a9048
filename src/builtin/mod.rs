//! Built-in models: standard architectures built in code (shapes exact, weights random), so the
//! first README command needs no download and tests need no binary fixtures.
//!
//! - `mobilenetv2`: torchvision MobileNetV2 (width 1.0, 224², 1000 classes), BN unfused.
//! - `resnet50`: torchvision ResNet-50 v1.5 (stride on the 3×3 conv), BN unfused.
//! - `vgg16`: torchvision VGG-16 without BN.
//! - `bert-base`: BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, erf-GELU),
//!   word and position embeddings, no attention mask, symbolic batch and sequence length.
//! - `bert-tiny`: the same encoder at 2 layers, hidden 128, 2 heads, FFN 512, vocabulary 1000:
//!   small enough to export and run in tests (and to put through onnxruntime's optimizer).
//! - `yolov8n`: a YOLOv8n-class detector in its export form (folded BN, SiLU as x·σ(x), C2f
//!   Split/Concat blocks, SPPF, Resize, the box decoding in the graph), 640², output [1, 84,
//!   8400] (`yolo.rs`).
//! - `tinycnn`: a five-layer CNN for tests whose costs are easy to derive by hand.
//! - Decoder LLMs with a KV cache, from their published configurations (`decoder.rs`):
//!   `llama-2-7b`, `llama-2-13b`, `llama-2-70b`, `llama-3-8b`, `llama-3-70b`, `mistral-7b`,
//!   `qwen2.5-7b`, `gpt2`, and `gpt2-tiny` and `llama-tiny` (small enough to run). Weights are symbolic when
//!   analysed.

pub mod builder;
pub mod decoder;
#[cfg(test)]
mod llm_tests;
mod yolo;

pub use builder::{ConvSpec, GraphBuilder, SigDim, WeightFill, BUILTIN_OPSET};

use crate::analysis::infer::Bindings;
use crate::analysis::onnx_proto::ModelProto;
use crate::analysis::AnalysisError;

/// One built-in model.
pub struct BuiltinModel {
    pub name: &'static str,
    pub description: &'static str,
    build: fn(WeightFill) -> ModelProto,
    /// Dims bound when the user gives none.
    pub default_bindings: fn() -> Bindings,
    /// The configuration of a decoder LLM preset.
    pub decoder: Option<&'static decoder::DecoderConfig>,
}

/// Most bytes of weights a built-in model materialises for execution or export (a larger
/// preset is analysed with symbolic weights only).
pub const MAX_MATERIALISED_WEIGHT_BYTES: u64 = 4 << 30;

impl BuiltinModel {
    pub fn build(&self, fill: WeightFill) -> ModelProto {
        (self.build)(fill)
    }

    /// How weights are filled for analysis: symbolic for the decoder presets (billions of
    /// parameters), zero pages for the others (whose analysis never reads them either, but
    /// whose golden results predate symbolic weights).
    pub fn analysis_fill(&self) -> WeightFill {
        if self.decoder.is_some() {
            WeightFill::Symbolic
        } else {
            WeightFill::Zeros
        }
    }

    /// Refuses to materialise a preset whose fp32 weights exceed
    /// [`MAX_MATERIALISED_WEIGHT_BYTES`].
    pub fn check_materialisable(&self) -> Result<(), AnalysisError> {
        let Some(config) = self.decoder else {
            return Ok(());
        };
        let bytes = config.parameter_count().saturating_mul(4);
        if bytes > MAX_MATERIALISED_WEIGHT_BYTES {
            return Err(AnalysisError::TooLargeToMaterialise {
                name: self.name.to_string(),
                bytes,
                limit: MAX_MATERIALISED_WEIGHT_BYTES,
            });
        }
        Ok(())
    }

    /// The model as an analysis graph (source `builtin:NAME`).
    pub fn graph(&self, fill: WeightFill) -> Result<crate::analysis::Graph, AnalysisError> {
        if fill != WeightFill::Symbolic {
            self.check_materialisable()?;
        }
        let source = format!("builtin:{}", self.name);
        crate::analysis::import::import_model_with(
            &self.build(fill),
            std::path::Path::new("."),
            std::path::Path::new(&source),
            fill == WeightFill::Symbolic,
        )
    }
}

/// A built-in model analysed on a catalogue device with its default bindings: the fixture of
/// the unit tests that need a real analysis.
#[cfg(test)]
pub(crate) fn analyze_on_catalog(
    name: &str,
    device: &str,
    precision: crate::device::Precision,
) -> crate::analysis::Analysis {
    let model = find(name).expect("built-in model");
    let graph = model.graph(WeightFill::Zeros).expect("built-in imports");
    let options = crate::analysis::AnalyzeOptions {
        bindings: (model.default_bindings)(),
        precision,
        ..Default::default()
    };
    let device = crate::device::find_device(device)
        .expect("catalogue device")
        .to_profile();
    crate::analysis::analyze_graph(graph, name, &device, &options).expect("built-in analyses")
}

fn batch_one() -> Bindings {
    Bindings {
        inputs: Vec::new(),
        batch: Some(1),
        dims: Vec::new(),
    }
}

fn bert_defaults() -> Bindings {
    Bindings {
        inputs: vec![("input_ids".to_string(), vec![1, 128])],
        batch: None,
        dims: Vec::new(),
    }
}

/// A decoder preset: its build function and its default bindings (batch 1, one new token after
/// a cache of 2048 entries, or of the longest context the preset's positions allow).
macro_rules! decoder_preset {
    ($name:literal, $description:literal, $config:path) => {
        BuiltinModel {
            name: $name,
            description: $description,
            build: |fill| decoder::build($name, &$config, fill),
            default_bindings: || decoder_defaults(&$config),
            decoder: Some(&$config),
        }
    };
}

/// Default dims of a decoder: the decode phase at a 2048-token cache (less where the preset's
/// positions end sooner).
pub fn decoder_defaults(config: &decoder::DecoderConfig) -> Bindings {
    let past = 2048.min(config.max_positions as u64 - 1);
    Bindings {
        inputs: Vec::new(),
        batch: None,
        dims: vec![
            (decoder::BATCH.to_string(), 1),
            (decoder::SEQUENCE.to_string(), 1),
            (decoder::PAST_SEQUENCE.to_string(), past),
        ],
    }
}

pub const MODELS: &[BuiltinModel] = &[
    BuiltinModel {
        name: "mobilenetv2",
        description: "MobileNetV2 1.0, 224x224 (torchvision architecture)",
        build: mobilenetv2,
        default_bindings: batch_one,
        decoder: None,
    },
    BuiltinModel {
        name: "resnet50",
        description: "ResNet-50 v1.5, 224x224 (torchvision architecture)",
        build: resnet50,
        default_bindings: batch_one,
        decoder: None,
    },
    BuiltinModel {
        name: "vgg16",
        description: "VGG-16, 224x224 (torchvision architecture, no BN)",
        build: vgg16,
        default_bindings: batch_one,
        decoder: None,
    },
    BuiltinModel {
        name: "bert-base",
        description: "BERT-base encoder, 12 layers, hidden 768, sequence 128 by default",
        build: bert_base,
        default_bindings: bert_defaults,
        decoder: None,
    },
    BuiltinModel {
        name: "bert-tiny",
        description: "BERT-style encoder, 2 layers, hidden 128, 2 heads (small enough to run)",
        build: bert_tiny,
        default_bindings: bert_defaults,
        decoder: None,
    },
    decoder_preset!(
        "llama-2-7b",
        "Llama-2-7B decoder with KV cache (32 layers, hidden 4096, 32 heads)",
        decoder::LLAMA2_7B
    ),
    decoder_preset!(
        "llama-2-13b",
        "Llama-2-13B decoder with KV cache (40 layers, hidden 5120, 40 heads)",
        decoder::LLAMA2_13B
    ),
    decoder_preset!(
        "llama-2-70b",
        "Llama-2-70B decoder with KV cache (80 layers, hidden 8192, 64 heads, 8 KV heads)",
        decoder::LLAMA2_70B
    ),
    decoder_preset!(
        "llama-3-8b",
        "Llama-3-8B decoder with KV cache (32 layers, hidden 4096, 8 KV heads, vocab 128256)",
        decoder::LLAMA3_8B
    ),
    decoder_preset!(
        "llama-3-70b",
        "Llama-3-70B decoder with KV cache (80 layers, hidden 8192, 8 KV heads)",
        decoder::LLAMA3_70B
    ),
    decoder_preset!(
        "mistral-7b",
        "Mistral-7B-v0.1 decoder with KV cache (32 layers, 8 KV heads; no sliding window)",
        decoder::MISTRAL_7B
    ),
    decoder_preset!(
        "qwen2.5-7b",
        "Qwen2.5-7B decoder with KV cache (28 layers, hidden 3584, 4 KV heads, QKV bias)",
        decoder::QWEN25_7B
    ),
    decoder_preset!(
        "gpt2",
        "GPT-2 small decoder with KV cache (12 layers, hidden 768, tied embeddings)",
        decoder::GPT2_SMALL
    ),
    decoder_preset!(
        "gpt2-tiny",
        "GPT-2-style decoder small enough to run (2 layers, hidden 128, 4 heads)",
        decoder::GPT2_TINY
    ),
    decoder_preset!(
        "llama-tiny",
        "Llama-style decoder small enough to run (2 layers, hidden 256, 2 KV heads)",
        decoder::LLAMA_TINY
    ),
    BuiltinModel {
        name: "yolov8n",
        description: "YOLOv8n-class detector, 640x640, box decoding in the graph (export form)",
        build: yolo::yolov8n,
        default_bindings: Bindings::default,
        decoder: None,
    },
    BuiltinModel {
        name: "tinycnn",
        description: "Five-layer CNN on 1x3x32x32 for tests",
        build: tinycnn,
        default_bindings: batch_one,
        decoder: None,
    },
];

/// Finds a built-in by name (`builtin:` prefix optional, case-insensitive).
pub fn find(name: &str) -> Result<&'static BuiltinModel, AnalysisError> {
    let wanted = name
        .strip_prefix("builtin:")
        .unwrap_or(name)
        .to_ascii_lowercase();
    let wanted = wanted.replace('_', "-");
    MODELS
        .iter()
        .find(|m| m.name == wanted || m.name.replace('-', "") == wanted.replace('-', ""))
        .ok_or_else(|| AnalysisError::UnknownBuiltin {
            name: name.to_string(),
            available: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
        })
}

const FLOAT: i32 = 1;
const INT64: i32 = 7;

fn image_input(b: &mut GraphBuilder, size: i64) -> String {
    b.input(
        "input",
        FLOAT,
        &[
            SigDim::Named("batch"),
            SigDim::Fixed(3),
            SigDim::Fixed(size),
            SigDim::Fixed(size),
        ],
    )
}

fn classifier_output(b: &mut GraphBuilder, logits: &str) {
    b.output(
        logits,
        FLOAT,
        &[SigDim::Named("batch"), SigDim::Fixed(1000)],
    );
}

fn conv_bn(b: &mut GraphBuilder, x: &str, in_c: i64, spec: ConvSpec) -> String {
    let y = b.conv(x, in_c, spec);
    b.batch_norm(&y, spec.out_channels)
}

fn mobilenetv2(fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let x = image_input(&mut b, 224);
    let y = conv_bn(&mut b, &x, 3, ConvSpec::new(32, 3, 2));
    let mut y = b.relu6(&y);
    let mut channels = 32;
    // (expansion t, output channels c, repeats n, first stride s), from the MobileNetV2 paper.
    let settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    for (t, c, n, s) in settings {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let hidden = channels * t;
            let mut h = y.clone();
            if t != 1 {
                h = conv_bn(&mut b, &h, channels, ConvSpec::new(hidden, 1, 1));
                h = b.relu6(&h);
            }
            let dw = ConvSpec {
                group: hidden,
                ..ConvSpec::new(hidden, 3, stride)
            };
            h = conv_bn(&mut b, &h, hidden, dw);
            h = b.relu6(&h);
            h = conv_bn(&mut b, &h, hidden, ConvSpec::new(c, 1, 1));
            y = if stride == 1 && channels == c {
                b.add(&y, &h)
            } else {
                h
            };
            channels = c;
        }
    }
    let y = conv_bn(&mut b, &y, channels, ConvSpec::new(1280, 1, 1));
    let y = b.relu6(&y);
    let y = b.global_avg_pool(&y);
    let y = b.flatten(&y);
    let logits = b.gemm(&y, 1280, 1000);
    classifier_output(&mut b, &logits);
    b.finish("mobilenetv2")
}

fn resnet50(fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let x = image_input(&mut b, 224);
    let y = conv_bn(&mut b, &x, 3, ConvSpec::new(64, 7, 2));
    let y = b.relu(&y);
    let mut y = b.max_pool(&y, 3, 2, 1);
    let mut channels = 64;
    for (stage, (width, blocks)) in [(64, 3), (128, 4), (256, 6), (512, 3)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let stride = if block == 0 && stage > 0 { 2 } else { 1 };
            let out = width * 4;
            let h = conv_bn(&mut b, &y, channels, ConvSpec::new(width, 1, 1));
            let h = b.relu(&h);
            let h = conv_bn(&mut b, &h, width, ConvSpec::new(width, 3, stride));
            let h = b.relu(&h);
            let h = conv_bn(&mut b, &h, width, ConvSpec::new(out, 1, 1));
            let shortcut = if block == 0 {
                conv_bn(&mut b, &y, channels, ConvSpec::new(out, 1, stride))
            } else {
                y.clone()
            };
            let sum = b.add(&h, &shortcut);
            y = b.relu(&sum);
            channels = out;
        }
    }
    let y = b.global_avg_pool(&y);
    let y = b.flatten(&y);
    let logits = b.gemm(&y, 2048, 1000);
    classifier_output(&mut b, &logits);
    b.finish("resnet50")
}

fn vgg16(fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let x = image_input(&mut b, 224);
    let mut y = x;
    let mut channels = 3;
    let cfg: [i64; 18] = [
        64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
    ];
    for c in cfg {
        if c == 0 {
            y = b.max_pool(&y, 2, 2, 0);
        } else {
            let conv = b.conv(
                &y,
                channels,
                ConvSpec {
                    bias: true,
                    ..ConvSpec::new(c, 3, 1)
                },
            );
            y = b.relu(&conv);
            channels = c;
        }
    }
    let y = b.flatten(&y);
    let y = b.gemm(&y, 512 * 7 * 7, 4096);
    let y = b.relu(&y);
    let y = b.gemm(&y, 4096, 4096);
    let y = b.relu(&y);
    let logits = b.gemm(&y, 4096, 1000);
    classifier_output(&mut b, &logits);
    b.finish("vgg16")
}

/// An encoder's dimensions.
struct BertConfig {
    hidden: i64,
    heads: i64,
    ffn: i64,
    layers: usize,
    vocab: i64,
    max_positions: i64,
}

fn bert_base(fill: WeightFill) -> ModelProto {
    // BERT-base (Devlin et al. 2018, Table/§3: L=12, H=768, A=12; FFN 4H; WordPiece 30,522).
    bert(
        &BertConfig {
            hidden: 768,
            heads: 12,
            ffn: 3072,
            layers: 12,
            vocab: 30522,
            max_positions: 512,
        },
        fill,
        "bert_base",
    )
}

fn bert_tiny(fill: WeightFill) -> ModelProto {
    bert(
        &BertConfig {
            hidden: 128,
            heads: 2,
            ffn: 512,
            layers: 2,
            vocab: 1000,
            max_positions: 512,
        },
        fill,
        "bert_tiny",
    )
}

fn bert(config: &BertConfig, fill: WeightFill, name: &str) -> ModelProto {
    let hidden = config.hidden;
    let heads = config.heads;
    let head_dim = hidden / heads;
    let ffn = config.ffn;
    let layers = config.layers;
    let vocab = config.vocab;
    let max_positions = config.max_positions;
    let mut b = GraphBuilder::new(fill);
    let ids = b.input(
        "input_ids",
        INT64,
        &[SigDim::Named("batch"), SigDim::Named("sequence")],
    );
    let word_table = b.weight("word_embeddings", &[vocab, hidden], hidden);
    let words = b.node("Gather", &[&word_table, &ids], vec![]);
    // Position embeddings for the first `sequence` positions: a shape-computing subgraph
    // (Shape → Gather → Unsqueeze → Slice) that constant folding resolves once dims are bound.
    let position_table = b.weight("position_embeddings", &[max_positions, hidden], hidden);
    let shape = b.node("Shape", &[&ids], vec![]);
    let one = b.int64_const("one", &[1]);
    let zero = b.int64_const("zero", &[0]);
    let seq_len = b.node("Gather", &[&shape, &one], vec![]);
    let positions = b.node("Slice", &[&position_table, &zero, &seq_len, &zero], vec![]);
    let type_row = b.jitter("token_type_embedding", &[hidden], 0.0, 0.02);
    let x = b.add(&words, &positions);
    let x = b.add(&x, &type_row);
    let mut x = b.layer_norm(&x, hidden);
    let scale = b.scalar_const("attention_scale", 1.0 / (head_dim as f32).sqrt());
    let half = b.scalar_const("half", 0.5);
    let one_f = b.scalar_const("one_f", 1.0);
    let sqrt2 = b.scalar_const("sqrt2", std::f32::consts::SQRT_2);
    for _ in 0..layers {
        let heads = |b: &mut GraphBuilder, t: &str, perm: &[i64]| {
            let r = b.reshape(t, &[0, 0, heads, head_dim]);
            b.transpose(&r, perm)
        };
        let q = b.linear(&x, hidden, hidden);
        let k = b.linear(&x, hidden, hidden);
        let v = b.linear(&x, hidden, hidden);
        let q = heads(&mut b, &q, &[0, 2, 1, 3]);
        let k = heads(&mut b, &k, &[0, 2, 3, 1]);
        let v = heads(&mut b, &v, &[0, 2, 1, 3]);
        let scores = b.node("MatMul", &[&q, &k], vec![]);
        let scores = b.node("Mul", &[&scores, &scale], vec![]);
        let probs = b.softmax(&scores, -1);
        let context = b.node("MatMul", &[&probs, &v], vec![]);
        let context = b.transpose(&context, &[0, 2, 1, 3]);
        let context = b.reshape(&context, &[0, 0, hidden]);
        let attn = b.linear(&context, hidden, hidden);
        let sum = b.add(&attn, &x);
        let h = b.layer_norm(&sum, hidden);
        let up = b.linear(&h, hidden, ffn);
        // GELU, erf form: 0.5 · x · (1 + erf(x / √2)).
        let scaled = b.node("Div", &[&up, &sqrt2], vec![]);
        let erf = b.node("Erf", &[&scaled], vec![]);
        let shifted = b.add(&erf, &one_f);
        let gated = b.node("Mul", &[&up, &shifted], vec![]);
        let gelu = b.node("Mul", &[&gated, &half], vec![]);
        let down = b.linear(&gelu, ffn, hidden);
        let sum = b.add(&down, &h);
        x = b.layer_norm(&sum, hidden);
    }
    b.output(
        &x,
        FLOAT,
        &[
            SigDim::Named("batch"),
            SigDim::Named("sequence"),
            SigDim::Fixed(hidden),
        ],
    );
    b.finish(name)
}

fn tinycnn(fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let x = image_input(&mut b, 32);
    let y = b.conv(
        &x,
        3,
        ConvSpec {
            bias: true,
            ..ConvSpec::new(16, 3, 1)
        },
    );
    let y = b.relu(&y);
    let y = b.max_pool(&y, 2, 2, 0);
    let y = conv_bn(&mut b, &y, 16, ConvSpec::new(32, 3, 1));
    let y = b.relu(&y);
    let y = b.global_avg_pool(&y);
    let y = b.flatten(&y);
    let logits = b.gemm(&y, 32, 1000);
    classifier_output(&mut b, &logits);
    b.finish("tinycnn")
}
