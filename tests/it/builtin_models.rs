//! Built-in models against hand-derived figures.

use std::path::Path;

use roofline::analysis::{self, import, AnalyzeOptions, Bindings, Bound, NodeStatus};
use roofline::builtin::{self, WeightFill};
use roofline::device::find_device;
use roofline::device::Precision;

use super::common::analyze_builtin;

#[test]
fn resnet50_macs_and_params_are_the_published_figures() {
    let a = analyze_builtin("resnet50", "rtx2080ti", Precision::Fp32);
    // 4.09 GMACs for torchvision ResNet-50 (convolutions + the 2048x1000 classifier).
    assert_eq!(a.summary.macs, 4_089_184_256);
    // 25,557,032 trainable parameters + 53,120 BN running statistics (2 x 26,560 channels).
    assert_eq!(a.summary.params, 25_557_032 + 53_120);
    assert_eq!(a.summary.not_costed, 0);
}

#[test]
fn vgg16_params_and_macs() {
    let a = analyze_builtin("vgg16", "rtx2080ti", Precision::Fp32);
    assert_eq!(a.summary.params, 138_357_544);
    // 15.35 G conv MACs + 123.6 M classifier MACs.
    assert_eq!(a.summary.macs, 15_346_630_656 + 123_633_664);
}

#[test]
fn bert_base_encoder_macs_by_hand() {
    let a = analyze_builtin("bert-base", "a100", Precision::Fp16);
    // Per layer at sequence 128: Q, K, V, O projections 4·128·768·768, attention scores and
    // context 2·12·128·128·64, FFN 2·128·768·3072.
    let per_layer: u64 = 4 * 128 * 768 * 768 + 2 * 12 * 128 * 128 * 64 + 2 * 128 * 768 * 3072;
    assert_eq!(a.summary.macs, 12 * per_layer);
    // The position-embedding slice is a shape subgraph: it must fold, not fail.
    assert_eq!(a.summary.not_costed, 0, "{:?}", a.diagnostics);
    assert!(a.summary.folded_nodes >= 2);
}

#[test]
fn tinycnn_costs_by_hand() {
    let a = analyze_builtin("tinycnn", "rtx2080ti", Precision::Fp32);
    let conv1 = a.nodes.iter().find(|n| n.op_type == "Conv").unwrap();
    // 16 output channels x 32x32 positions x (3 channels x 3x3 taps).
    assert_eq!(conv1.macs, 16 * 32 * 32 * 27);
    assert_eq!(conv1.flops, 2 * conv1.macs + 16 * 32 * 32);
    // Input 3x32x32, output 16x32x32, weights 16x3x3x3 + bias 16, all fp32.
    assert_eq!(conv1.activation_bytes_read, 3 * 32 * 32 * 4);
    assert_eq!(conv1.weights_bytes, (16 * 27 + 16) * 4);
    assert_eq!(conv1.bytes_written, 16 * 32 * 32 * 4);
    let expected_intensity = conv1.flops as f64 / (conv1.bytes_read + conv1.bytes_written) as f64;
    assert!((conv1.intensity.unwrap() - expected_intensity).abs() < 1e-12);
}

#[test]
fn precision_changes_both_peak_and_bytes() {
    let fp32 = analyze_builtin("resnet50", "a100", Precision::Fp32);
    let fp16 = analyze_builtin("resnet50", "a100", Precision::Fp16);
    assert_eq!(fp16.summary.flops, fp32.summary.flops);
    assert_eq!(fp16.summary.bytes_read * 2, fp32.summary.bytes_read);
    assert!(fp16.device.roof.peak_flops > fp32.device.roof.peak_flops * 10.0);
    assert!(fp16.summary.predicted_latency_s < fp32.summary.predicted_latency_s);
}

#[test]
fn mobilenetv2_is_not_compute_bound_while_vgg16_is() {
    let mobilenet = analyze_builtin("mobilenetv2", "rtx2080ti", Precision::Fp32);
    let vgg = analyze_builtin("vgg16", "rtx2080ti", Precision::Fp32);
    assert!(vgg.summary.compute_bound_share > 0.6, "{:?}", vgg.summary);
    assert!(
        mobilenet.summary.compute_bound_share < 0.3,
        "{:?}",
        mobilenet.summary
    );
    // Depthwise convolutions have low intensity: memory (or launch) bound, never compute.
    let depthwise = mobilenet
        .nodes
        .iter()
        .filter(|n| n.op_type == "Conv" && n.intensity.is_some_and(|i| i < 10.0))
        .count();
    assert!(depthwise >= 17);
    assert!(mobilenet
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed)
        .all(|n| n.predicted_s > 0.0 && n.bound != Bound::None));
}

/// `--dim NAME=VALUE` binds a symbol wherever it appears: BERT's `batch` and `sequence` by name
/// give the same analysis as the input's shape given whole.
#[test]
fn named_dims_bind_like_input_shapes() {
    let model = builtin::find("bert-base").unwrap();
    let device = find_device("a100").unwrap().to_profile();
    let analyse = |bindings: Bindings| {
        let proto = model.build(WeightFill::Zeros);
        let graph = import::import_model(&proto, Path::new("."), Path::new("bert")).unwrap();
        let options = AnalyzeOptions {
            bindings,
            precision: Precision::Fp16,
            ..Default::default()
        };
        analysis::analyze_graph(graph, "bert", &device, &options).unwrap()
    };
    let by_name = analyse(Bindings {
        dims: vec![("batch".into(), 2), ("sequence".into(), 64)],
        ..Bindings::default()
    });
    let by_shape = analyse(Bindings {
        inputs: vec![("input_ids".into(), vec![2, 64])],
        ..Bindings::default()
    });
    assert_eq!(by_name.summary.flops, by_shape.summary.flops);
    assert_eq!(by_name.summary.bytes_read, by_shape.summary.bytes_read);
    assert!(by_name.summary.flops > 0);
}
