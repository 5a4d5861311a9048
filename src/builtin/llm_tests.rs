//! LLM analysis against formulas derived by hand (Llama-2-7B, fp16, batch 1): MACs exact,
//! FLOPs, weight and KV bytes within 1%; the decode step on the catalogue's A100 and H100 is
//! memory-bound and made of (weights + KV) ÷ DRAM bandwidth plus the stated launch overheads.

use crate::analysis::infer::Bindings;
use crate::analysis::llm::*;
use crate::analysis::roofline::Bound;
use crate::analysis::{analyze_graph, Analysis, AnalyzeOptions};
use crate::builtin::{self, decoder, WeightFill};
use crate::device::Precision;

fn analyze(name: &str, device: &str, llm: LlmOptions, dims: &[(&str, u64)]) -> Analysis {
    let model = builtin::find(name).expect("preset");
    let graph = model.graph(WeightFill::Symbolic).expect("imports");
    let user = Bindings {
        dims: dims.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        ..Bindings::default()
    };
    let bindings = match llm.phase {
        Some(phase) => phase_bindings(&graph, phase, &user, DEFAULT_CONTEXT),
        None => user,
    };
    let device = crate::device::find_device(device)
        .expect("catalogue device")
        .to_profile();
    let options = AnalyzeOptions {
        bindings,
        precision: Precision::Fp16,
        llm,
        ..AnalyzeOptions::default()
    };
    analyze_graph(graph, name, &device, &options).expect("analyses")
}

fn decode() -> LlmOptions {
    LlmOptions {
        phase: Some(Phase::Decode),
        ..LlmOptions::default()
    }
}

fn near(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= tolerance * want.abs()
}

fn matmul_macs(analysis: &Analysis) -> u64 {
    analysis
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMul")
        .map(|n| n.macs)
        .sum()
}

// Llama-2-7B.
const L: u64 = 32;
const H: u64 = 4096;
const F: u64 = 11008;
const V: u64 = 32000;
const HEAD_DIM: u64 = 128;
const HEADS: u64 = 32;

#[test]
fn published_parameter_counts() {
    // The counts the model cards state, from the configuration alone.
    assert_eq!(decoder::LLAMA2_7B.parameter_count(), 6_738_415_616);
    assert_eq!(decoder::LLAMA2_13B.parameter_count(), 13_015_864_320);
    assert_eq!(decoder::LLAMA2_70B.parameter_count(), 68_976_648_192);
    assert_eq!(decoder::LLAMA3_8B.parameter_count(), 8_030_261_248);
    assert_eq!(decoder::MISTRAL_7B.parameter_count(), 7_241_732_096);
    assert_eq!(decoder::QWEN25_7B.parameter_count(), 7_615_616_512);
    assert_eq!(decoder::GPT2_SMALL.parameter_count(), 124_439_808);
    // The graph holds exactly these parameters (and a handful of scalars: eps, 2, the scale).
    let analysis = analyze("llama-2-7b", "a100", decode(), &[]);
    let params = analysis.summary.params as f64;
    assert!(near(params, 6_738_415_616.0, 1e-6), "{params}");
}

#[test]
fn llama2_7b_decode_matches_hand_formulas() {
    let analysis = analyze("llama-2-7b", "a100", decode(), &[]);
    let llm = analysis.llm.as_ref().expect("LLM summary");
    let total = 2048 + 1;
    assert_eq!(
        (llm.batch, llm.new_tokens, llm.context_tokens),
        (1, 1, total)
    );
    // Per layer: Q, K, V, O (h·h each), gate, up, down (h·f each), then q·Kᵀ and p·V over
    // the whole cache (heads · total · head_dim each); and the LM head.
    let per_layer = 4 * H * H + 3 * H * F + 2 * HEADS * total * HEAD_DIM;
    assert_eq!(matmul_macs(&analysis), L * per_layer + H * V);
    let flops = analysis.summary.flops as f64;
    assert!(
        near(flops, 2.0 * (L * per_layer + H * V) as f64, 0.01),
        "{flops}"
    );
    // Weights at 2 bytes: the projections, the LM head, one embedding row, the norm scales.
    let weights = (L * (4 * H * H + 3 * H * F) + H * V + H + (2 * L + 1) * H) * 2;
    assert!(near(llm.weight_bytes_read as f64, weights as f64, 0.01));
    // The cache: K and V of every layer read once over the whole context; one entry written.
    let kv_read = L * 2 * total * H * 2;
    assert!(
        near(llm.kv_bytes_read as f64, kv_read as f64, 0.01),
        "{}",
        llm.kv_bytes_read
    );
    assert_eq!(llm.kv_bytes_written, L * 2 * H * 2);
    // Memory: all the weights (the whole embedding table) and the cache after the step.
    assert!(near(
        llm.memory.weights_bytes as f64,
        decoder::LLAMA2_7B.parameter_count() as f64 * 2.0,
        0.001
    ));
    assert_eq!(llm.memory.kv_cache_bytes, L * 2 * total * H * 2);
    assert_eq!(llm.memory.fits, Some(true));
}

#[test]
fn decode_is_weights_and_cache_over_bandwidth_plus_launches() {
    for device in ["a100", "h100"] {
        let analysis = analyze("llama-2-7b", device, decode(), &[]);
        let llm = analysis.llm.as_ref().unwrap();
        assert_eq!(llm.set_by, Bound::Memory, "{device}");
        assert!(analysis
            .nodes
            .iter()
            .filter(|n| n.op_type == "MatMul")
            .all(|n| n.bound == Bound::Memory || n.bound == Bound::Overhead));
        let bandwidth = match device {
            "a100" => 2039e9,
            _ => 3350e9,
        };
        let floor =
            (llm.weight_bytes_read + llm.kv_bytes_read + llm.kv_bytes_written) as f64 / bandwidth;
        assert!(near(llm.stream_floor_s, floor, 1e-9));
        // The bound is the streaming floor plus one launch per running op; the rest
        // (activations, norms) stays under 5% of the step.
        let stated = llm.stream_floor_s + llm.launch_overhead_s;
        assert!(
            near(stated, llm.latency_s, 0.05),
            "{device}: {stated} vs {}",
            llm.latency_s
        );
        assert!(llm.other_s >= 0.0 && llm.other_s < 0.05 * llm.latency_s);
        let time_per_token = llm.time_per_output_token_s.unwrap();
        assert!(near(llm.tokens_per_s, 1.0 / time_per_token, 1e-9));
    }
}

#[test]
fn llama2_7b_prefill_matches_hand_formulas() {
    let prefill = LlmOptions {
        phase: Some(Phase::Prefill),
        ..LlmOptions::default()
    };
    let analysis = analyze("llama-2-7b", "a100", prefill, &[]);
    let llm = analysis.llm.as_ref().unwrap();
    let s = 2048;
    assert_eq!((llm.new_tokens, llm.context_tokens), (s, s));
    // Every projection over the prompt; attention over the causal square (computed whole,
    // masked, as an export does); logits for every position.
    let per_layer = s * (4 * H * H + 3 * H * F) + 2 * HEADS * s * s * HEAD_DIM;
    assert_eq!(matmul_macs(&analysis), L * per_layer + s * H * V);
    assert!(near(
        analysis.summary.flops as f64,
        2.0 * (L * per_layer + s * H * V) as f64,
        0.01
    ));
    assert_eq!(llm.set_by, Bound::Compute);
    assert!(llm.time_to_first_token_s.is_some() && llm.time_per_output_token_s.is_none());
    // The cache the prompt leaves: K and V of every layer for 2048 positions, written once.
    assert_eq!(llm.kv_bytes_written, L * 2 * s * H * 2);
}

#[test]
fn storage_per_tensor_class() {
    let base = analyze("llama-2-7b", "a100", decode(), &[]);
    let narrow = analyze(
        "llama-2-7b",
        "a100",
        LlmOptions {
            weights: Some(Storage::Int4),
            kv: Some(Storage::Int8),
            ..decode()
        },
        &[],
    );
    let (b, n) = (base.llm.unwrap(), narrow.llm.unwrap());
    // int4 weights: a quarter of fp16; int8 cache: half.
    let ratio = n.weight_bytes_read as f64 / b.weight_bytes_read as f64;
    assert!(near(ratio, 0.25, 1e-3), "{ratio}");
    let ratio = n.kv_bytes_read as f64 / b.kv_bytes_read as f64;
    assert!(near(ratio, 0.5, 1e-3), "{ratio}");
    assert!(near(
        n.memory.weights_bytes as f64,
        b.memory.weights_bytes as f64 / 4.0,
        1e-3
    ));
    assert!(n.latency_s < b.latency_s);
    // Activations keep the analysis width.
    assert_eq!(n.activations, Storage::Fp16);
}

#[test]
fn memory_fit_and_largest_batch() {
    // 70B at fp16 is 138 GB of weights: not on an 80 GB A100.
    let analysis = analyze("llama-2-70b", "a100", decode(), &[]);
    let memory = &analysis.llm.as_ref().unwrap().memory;
    assert_eq!(memory.fits, Some(false));
    assert_eq!(memory.max_batch, Some(0));
    // At int4 it fits, with room for a batch: 80 GB − 34.5 GB of weights over the cache of one
    // sequence (80 layers · 2 · 2049 · 8 KV heads · 128 · 2 bytes = 671 MB) and its activations.
    let int4 = analyze(
        "llama-2-70b",
        "a100",
        LlmOptions {
            weights: Some(Storage::Int4),
            ..decode()
        },
        &[],
    );
    let memory = &int4.llm.as_ref().unwrap().memory;
    assert_eq!(memory.fits, Some(true));
    assert_eq!(memory.kv_cache_bytes, 80 * 2 * 2049 * 8 * 128 * 2);
    let room = 80e9 - memory.weights_bytes as f64;
    let per_sequence = (memory.kv_cache_bytes + memory.activation_peak_bytes) as f64;
    assert_eq!(memory.max_batch, Some((room / per_sequence) as u64));
    // A batch of 8 at the same context needs 8 caches.
    let batch8 = analyze(
        "llama-2-70b",
        "a100",
        LlmOptions {
            weights: Some(Storage::Int4),
            ..decode()
        },
        &[("batch", 8)],
    );
    let llm = batch8.llm.as_ref().unwrap();
    assert_eq!(llm.batch, 8);
    assert_eq!(llm.memory.kv_cache_bytes, 8 * memory.kv_cache_bytes);
}

#[test]
fn phase_binds_the_usual_export_dims() {
    let mut b = builtin::GraphBuilder::new(WeightFill::Zeros);
    let ids = b.input(
        "input_ids",
        7,
        &[
            builtin::SigDim::Named("batch_size"),
            builtin::SigDim::Named("sequence_length"),
        ],
    );
    let mask = b.input(
        "attention_mask",
        7,
        &[
            builtin::SigDim::Named("batch_size"),
            builtin::SigDim::Named("total_sequence_length"),
        ],
    );
    let past = b.input(
        "past_key_values.0.key",
        1,
        &[
            builtin::SigDim::Named("batch_size"),
            builtin::SigDim::Fixed(2),
            builtin::SigDim::Named("past_sequence_length"),
            builtin::SigDim::Fixed(4),
        ],
    );
    for value in [&ids, &mask, &past] {
        let out = b.node("Identity", &[value], vec![]);
        b.output(&out, if value == &past { 1 } else { 7 }, &[]);
    }
    let proto = b.finish("exportlike");
    let graph = crate::analysis::import::import_model(
        &proto,
        std::path::Path::new("."),
        std::path::Path::new("exportlike.onnx"),
    )
    .unwrap();
    let dims = |bindings: Bindings| {
        let mut dims = bindings.dims;
        dims.sort();
        dims
    };
    let decode = dims(phase_bindings(
        &graph,
        Phase::Decode,
        &Bindings::default(),
        DEFAULT_CONTEXT,
    ));
    assert_eq!(
        decode,
        vec![
            ("batch_size".to_string(), 1),
            ("past_sequence_length".to_string(), 2048),
            ("sequence_length".to_string(), 1),
            ("total_sequence_length".to_string(), 2049),
        ]
    );
    let user = Bindings {
        dims: vec![("sequence_length".to_string(), 512)],
        ..Bindings::default()
    };
    let prefill = dims(phase_bindings(
        &graph,
        Phase::Prefill,
        &user,
        DEFAULT_CONTEXT,
    ));
    // An `--input` shape gives its dims too: nothing contradicts it.
    let by_input = Bindings {
        inputs: vec![("input_ids".to_string(), vec![2, 128])],
        ..Bindings::default()
    };
    let from_input = dims(phase_bindings(&graph, Phase::Prefill, &by_input, 512));
    assert_eq!(
        from_input,
        vec![
            ("past_sequence_length".to_string(), 0),
            ("total_sequence_length".to_string(), 128),
        ]
    );
    assert_eq!(
        prefill,
        vec![
            ("batch_size".to_string(), 1),
            ("past_sequence_length".to_string(), 0),
            ("sequence_length".to_string(), 512),
            ("total_sequence_length".to_string(), 512),
        ]
    );
}

#[test]
fn fp64_keeps_its_width_and_masks_are_not_weights() {
    // fp64 analysis: storages default to the analysis width (nothing rescaled), and the cache
    // append still writes only the new entries (8 bytes each).
    let model = builtin::find("llama-tiny").unwrap();
    let graph = model.graph(WeightFill::Symbolic).unwrap();
    let bindings = phase_bindings(&graph, Phase::Decode, &Bindings::default(), 512);
    let device = crate::device::find_device("a100").unwrap().to_profile();
    let options = AnalyzeOptions {
        bindings,
        precision: Precision::Fp64,
        llm: decode(),
        ..AnalyzeOptions::default()
    };
    let analysis = analyze_graph(graph, "llama-tiny", &device, &options).unwrap();
    let llm = analysis.llm.unwrap();
    assert_eq!(llm.weights, Storage::Fp64);
    // 2 layers · K and V · 2 KV heads · 64 · 8 bytes.
    assert_eq!(llm.kv_bytes_written, 2 * 2 * 2 * 64 * 8);
    // Prefill: the causal mask (boolean, folded) is read by no op.
    let prefill = analyze(
        "llama-2-7b",
        "a100",
        LlmOptions {
            phase: Some(Phase::Prefill),
            ..LlmOptions::default()
        },
        &[],
    );
    let where_weights: u64 = prefill
        .nodes
        .iter()
        .filter(|n| n.op_type == "Where")
        .map(|n| n.weights_bytes)
        .sum();
    // Only the masked-value scalar (2 bytes) per layer remains.
    assert_eq!(where_weights, L * 2);
}
