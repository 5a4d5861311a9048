//! Unit tests of the quantization passes (`int8`, `bf16`, `fp16`) and their helpers, and of
//! the pass selection, on the tiny graphs and the round-number device of `passes_tests.rs`:
//! every decision below is predicted by hand from the cost formulas of
//! `analysis/ops/fused/quant.rs` and the roofline (`time = max(work/peak, bytes/bandwidth) +
//! 1 µs`).

use super::tests::{
    assert_close, const_values, find, ints, nodes, op_types, run_pass, str_attr, Net,
};
use super::{BnFold, Eltwise, Fold, Fuse};
use crate::advisor::quantize::{self, CalibrationMethod, QuantDecision, QuantizationReport};
use crate::advisor::{select_passes, AdviceReport, AdviseOptions, AdvisorError, Pass};
use crate::analysis::graph::Attr;
use crate::analysis::ops::fused::DOMAIN;
use crate::analysis::roofline::Bound;
use crate::analysis::tensor::{DType, TensorData};

// ---------------------------------------------------------------------------------------------
// int8, bf16, fp16

/// Weight of output channel c, tap k: (k mod 7 − 3)·(c + 1)/8. The largest magnitude of
/// channel c is 3(c + 1)/8, so its int8 scale is 3(c + 1)/(8·127) and the quantized values
/// depend on k alone: round((k mod 7 − 3)·127/3) = −127, −85, −42, 0, 42, 85, 127. Every value
/// is m·(c + 1)/8 with |m·(c + 1)| ≤ 96: exact in bf16.
fn pattern_weights(channels: usize, taps: usize) -> Vec<f32> {
    (0..channels * taps)
        .map(|i| ((i % taps % 7) as f32 - 3.0) * ((i / taps) + 1) as f32 / 8.0)
        .collect()
}

const PATTERN_Q: [i64; 7] = [-127, -85, -42, 0, 42, 85, 127];

/// Five candidates with hand-predictable decisions on `device()`:
/// - `big`: X [1,16,16,16] * W [32,16,3,3], pads 1 → [1,32,16,16]. fp32: 2,359,296 FLOPs
///   (2.359 µs at 1 TFLOP/s), 67,584 bytes (0.676 µs at 100 GB/s): 3.359 µs with the 1 µs op
///   cost. int8: 2,359,296 FLOPs at 4 TOP/s (0.590 µs) + 28,672 quantize/dequantize FLOPs at
///   the fp32 rate (0.029 µs), 53,893 bytes (0.539 µs): 1.618 µs, 2.08× ≥ 1.1: converted.
///   bf16: 1.180 µs compute, 58,368 bytes: 2.180 µs, 1.54×: converted.
/// - `depthwise`: W [16,1,3,3], group 16: refused before costing.
/// - `pointwise`: X [1,8,64,64] * W [8,8,1,1]: 262,400 bytes (2.624 µs) against 0.524 µs of
///   compute: memory-bound on activations, int8 3.622 µs (1.0004×): stays fp32.
/// - `tiny`: X [1,4,4,4] * W [4,4,1,1]: 512 FLOPs, 576 bytes: the 1 µs op cost dominates.
/// - `matmul`: both operands are graph inputs: no weights to store in low precision.
fn quantization_net() -> Net {
    let mut n = Net::new(17);
    let x1 = n.input("x1", &[1, 16, 16, 16]);
    let w1 = n.konst("big_w", &[32, 16, 3, 3], &pattern_weights(32, 144));
    let pads = ("pads", ints(&[1, 1, 1, 1]));
    let big = n.node("big", "Conv", &[x1, w1], std::slice::from_ref(&pads));
    let wd = n.konst("dw_w", &[16, 1, 3, 3], &pattern_weights(16, 9));
    let dw = n.node(
        "depthwise",
        "Conv",
        &[x1, wd],
        &[pads, ("group", Attr::Int(16))],
    );
    let x2 = n.input("x2", &[1, 8, 64, 64]);
    let w2 = n.konst("pw_w", &[8, 8, 1, 1], &pattern_weights(8, 8));
    let pw = n.node("pointwise", "Conv", &[x2, w2], &[]);
    let x3 = n.input("x3", &[1, 4, 4, 4]);
    let w3 = n.konst("tiny_w", &[4, 4, 1, 1], &pattern_weights(4, 4));
    let tiny = n.node("tiny", "Conv", &[x3, w3], &[]);
    let (a, b) = (n.input("a", &[4, 8]), n.input("b", &[8, 4]));
    let mm = n.node("matmul", "MatMul", &[a, b], &[]);
    for v in [big, dw, pw, tiny, mm] {
        n.output(v);
    }
    n
}

fn decisions(report: &AdviceReport) -> Vec<QuantDecision> {
    report
        .quantization
        .as_ref()
        .expect("a quantization section")
        .decisions
        .clone()
}

fn decision<'a>(all: &'a [QuantDecision], node: &str) -> &'a QuantDecision {
    all.iter()
        .find(|d| d.node == node)
        .unwrap_or_else(|| panic!("no decision for `{node}`"))
}

fn assert_rel(got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-9 * want.abs(), "{got} vs {want}");
}

#[test]
fn int8_converts_only_what_the_roofline_favours() {
    let (report, g) = run_pass(quantization_net(), "int8");
    let all = decisions(&report);
    assert_eq!(all.len(), 5);
    let big = decision(&all, "big");
    assert_eq!((big.pass.as_str(), big.decision.as_str()), ("int8", "int8"));
    assert_rel(big.predicted_fp32_s, 3.359_296e-6);
    assert_rel(big.predicted_lowp_s, 1.618_496e-6);
    assert_rel(big.predicted_gain, 3.359_296 / 1.618_496);
    assert_eq!(big.bound_fp32, Bound::Compute);
    assert!(
        big.reason.starts_with("compute-bound in fp32"),
        "{}",
        big.reason
    );
    // The int8 op is compute-bound, so of the float boundaries only the 28,672 quantize and
    // dequantize FLOPs at the fp32 rate show: 0.029 µs.
    assert_rel(big.predicted_qdq_s, 0.028_672e-6);
    for (node, why) in [
        ("depthwise", "depthwise"),
        ("pointwise", "memory-bound on activations"),
        ("tiny", "tiny"),
        ("matmul", "weights computed at run time"),
    ] {
        let d = decision(&all, node);
        assert_eq!(d.decision, "fp32", "{node}");
        assert!(d.reason.contains(why), "{node}: {}", d.reason);
    }
    assert_rel(decision(&all, "pointwise").predicted_fp32_s, 3.624e-6);
    assert_eq!(decision(&all, "tiny").bound_fp32, Bound::Overhead);
    // Only `big` changed.
    assert_eq!(report.passes[0].changes.len(), 1);
    assert!(report.passes[0].changes[0]
        .what
        .starts_with("int8 (32 channels"));
    assert_eq!(
        op_types(&g),
        ["QConv", "Conv", "Conv", "Conv", "MatMul"],
        "{:?}",
        nodes(&g)
    );
    let q = find(&g, "big");
    assert_eq!(q.domain, DOMAIN);
    assert_eq!(q.inputs.len(), 7);
    assert_eq!((q.inputs[2], q.inputs[3]), (None, None));
    // Per-channel symmetric weights, by hand (see `pattern_weights`).
    let w = &g.values[q.inputs[1].unwrap()].fact;
    assert_eq!(w.dtype, DType::I8);
    assert_eq!(w.concrete_shape(), Some(vec![32, 16, 3, 3]));
    let Some(TensorData::I64(wq)) = w.konst.as_ref().map(|t| &t.data) else {
        panic!("int8 weights are not stored as integers");
    };
    for (i, &v) in wq.iter().enumerate() {
        assert_eq!(v, PATTERN_Q[i % 144 % 7], "weight {i}");
    }
    let scales = const_values(&g, q.inputs[4]);
    let want: Vec<f32> = (0..32)
        .map(|c| 3.0 * (c + 1) as f32 / 8.0 / 127.0)
        .collect();
    assert_close(&scales, &want);
    // The activation grid covers the calibrated range, 0 included.
    let x_scale = const_values(&g, q.inputs[5])[0];
    let x_zp = const_values(&g, q.inputs[6])[0];
    assert!(
        x_scale > 0.0 && (0.0..=255.0).contains(&x_zp),
        "{x_scale} {x_zp}"
    );
    assert_eq!(g.values[q.outputs[0]].fact.dtype, DType::F32);
    // The accuracy proxy ran (something was converted) on one random input.
    let section = report.quantization.as_ref().unwrap();
    assert!(
        section.calibration.starts_with("1 random input(s)"),
        "{}",
        section.calibration
    );
    let accuracy = section.accuracy.as_ref().expect("accuracy proxy");
    assert_eq!(accuracy.samples, 1);
    assert!(accuracy.cosine_min > 0.99, "{accuracy:?}");
    assert!(report.passes[0].predicted_speedup > 1.0);
}

/// With a calibrated device the advice carries the expected gain next to the bound's: equal
/// when the int8 kernels reach the same share of their roof as the fp32 ones, smaller when
/// they reach less.
#[test]
fn int8_gain_is_also_expected_from_the_calibration() {
    use crate::device::calibration::{
        Calibration, CalibrationPoint, ClassTable, KernelClass, ShapeFeatures,
    };
    let calibrated = |int8_ratio: f64| {
        let point = |op_type: &str, ratio: f64| CalibrationPoint {
            shape: op_type.into(),
            features: ShapeFeatures::new(1 << 20, 1 << 16, 1 << 10, 1 << 12),
            bound_s: 1e-3,
            measured_s: ratio * 1e-3,
            op_type: op_type.into(),
        };
        let table = |class: KernelClass, op_type: &str| ClassTable {
            class,
            threads: 1,
            points: vec![
                point(op_type, 2.0),
                point(&format!("{op_type} int8"), int8_ratio),
            ],
            fit_error: None,
            fixed_s: 0.0,
        };
        let mut device = super::tests::device();
        device.calibration = Some(Calibration {
            tool_version: String::new(),
            measured_at: String::new(),
            mode: "full".into(),
            wall_time_s: 1.0,
            method: String::new(),
            tables: vec![
                table(KernelClass::Conv, "Conv"),
                table(KernelClass::Pointwise, "Conv"),
                table(KernelClass::Depthwise, "Conv"),
                table(KernelClass::Gemm, "MatMul"),
                table(KernelClass::Matmul, "MatMul"),
            ],
            exchange: None,
            warnings: Vec::new(),
            handoff: Vec::new(),
            clock_hz: None,
            fma_gflops: None,
        });
        let options = AdviseOptions {
            apply: vec!["int8".into()],
            calibration_samples: 1,
            ..AdviseOptions::default()
        };
        let (report, _) = crate::advisor::advise(
            quantization_net().g,
            "test",
            &device,
            &Default::default(),
            &options,
        )
        .expect("advises");
        report
    };
    let alike = calibrated(2.0);
    let pass = &alike.passes[0];
    assert!(!pass.changes.is_empty());
    let expected = pass.expected.expected_speedup.expect("calibrated");
    assert!(
        (expected - pass.predicted_speedup).abs() < 1e-9,
        "{expected} {}",
        pass.predicted_speedup
    );
    assert!(
        (pass.expected.expected_latency_before_s.unwrap() - 2.0 * pass.predicted_latency_before_s)
            .abs()
            < 1e-12
    );
    let slower = calibrated(4.0);
    let expected = slower
        .overall
        .expected
        .expected_speedup
        .expect("calibrated");
    assert!(
        expected < 0.9 * slower.overall.predicted_speedup,
        "{expected}"
    );
    // Nothing measured: no error to judge.
    assert_eq!(slower.overall.expected.expected_error, None);
    // The table shows both gains and judges the expected one; the page has its column.
    let table = crate::report::advice::render_advice_table(&slower);
    assert!(
        table.contains("exp gain") && table.contains("bound gain"),
        "{table}"
    );
    let expected_cell = format!("{expected:.2}x");
    assert!(table.contains(&expected_cell), "{table}");
    let html = crate::report::advice::render_advice_html(&slower).expect("renders");
    assert!(html.contains("<th>expected gain</th>"));
    assert!(html.contains(&format!("<td class=\"num\">{expected_cell}</td>")));
    // Without a calibration there is no expected figure, and the table keeps its columns.
    let (plain, _) = run_pass(quantization_net(), "int8");
    assert_eq!(plain.overall.expected, Default::default());
    let table = crate::report::advice::render_advice_table(&plain);
    assert!(
        table.contains("pred gain") && !table.contains("exp gain"),
        "{table}"
    );
}

#[test]
fn bf16_stores_the_weights_at_half_width() {
    let (report, g) = run_pass(quantization_net(), "bf16");
    let all = decisions(&report);
    let big = decision(&all, "big");
    assert_eq!(big.decision, "bf16");
    // 2,359,296 FLOPs at 2 TFLOP/s + 1 µs.
    assert_rel(big.predicted_lowp_s, 2.179_648e-6);
    assert_eq!(decision(&all, "pointwise").decision, "fp32");
    assert_eq!(decision(&all, "depthwise").decision, "fp32");
    assert_eq!(op_types(&g), ["HalfConv", "Conv", "Conv", "Conv", "MatMul"]);
    let h = find(&g, "big");
    assert_eq!(str_attr(&h, "dtype"), Some("bf16"));
    assert_eq!(h.inputs.len(), 4);
    let w = &g.values[h.inputs[1].unwrap()].fact;
    assert_eq!(w.dtype, DType::Bf16);
    // The pattern is exact in bf16: rounding changes nothing.
    assert_eq!(const_values(&g, h.inputs[1]), pattern_weights(32, 144));
}

#[test]
fn fp16_without_a_ceiling_converts_nothing() {
    let (report, g) = run_pass(quantization_net(), "fp16");
    let section = report.quantization.as_ref().unwrap();
    let big = decision(&section.decisions, "big");
    // No fp16 peak: the fp32 roof, and only the weights shrink (by 9,216 bytes): 1.0×.
    assert_eq!(big.decision, "fp32");
    assert!(
        big.reason.contains("has no fp16 compute ceiling"),
        "{}",
        big.reason
    );
    assert!(section.accuracy.is_none());
    assert!(section
        .notes
        .iter()
        .any(|n| n.contains("device `round` has no fp16 compute ceiling")));
    assert!(report.passes[0].changes.is_empty());
    assert_eq!(op_types(&g), ["Conv", "Conv", "Conv", "Conv", "MatMul"]);
}

#[test]
fn quantization_helpers() {
    // [−1, 3]: scale 4/255, zero point round(1/(4/255)) = round(63.75) = 64.
    let (scale, zp) = quantize::affine_params(-1.0, 3.0);
    assert!((scale - 4.0 / 255.0).abs() < 1e-9);
    assert_eq!(zp, 64);
    // All-positive and all-negative ranges put the zero point at the ends.
    assert_eq!(quantize::affine_params(0.0, 2.55).1, 0);
    assert_eq!(quantize::affine_params(-2.55, 0.0).1, 255);
    assert!(quantize::affine_params(0.0, 0.0).0 > 0.0);
    assert_eq!("Min-Max".parse(), Ok(CalibrationMethod::MinMax));
    assert_eq!("percentile".parse(), Ok(CalibrationMethod::Percentile));
    assert!("median".parse::<CalibrationMethod>().is_err());
}

#[test]
fn summary_notes_add_up_the_decisions() {
    let d = |node: &str, decision: &str, fp32: f64, lowp: f64, dynamic: f64| QuantDecision {
        node: node.into(),
        op_type: "Conv".into(),
        pass: "int8".into(),
        decision: decision.into(),
        predicted_fp32_s: fp32,
        predicted_lowp_s: lowp,
        predicted_qdq_s: 0.2e-6,
        predicted_dynamic_s: Some(dynamic),
        predicted_gain: fp32 / lowp,
        bound_fp32: Bound::Compute,
        bound_lowp: Bound::Compute,
        reason: String::new(),
    };
    let report = QuantizationReport {
        decisions: vec![
            d("a", "int8", 2e-6, 1e-6, 3e-6),
            d("b", "fp32", 1e-6, 1.5e-6, 1.2e-6),
        ],
        ..QuantizationReport::default()
    };
    let notes = quantize::summary_notes(&report);
    assert_eq!(notes.len(), 2, "{notes:?}");
    // fp32 2 + 1 = 3 µs; static int8 1 (a converted) + 1 (b stays fp32) = 2 µs: 1.50×;
    // dynamic 3 + 1.2 = 4.2 µs: 1.40× of fp32.
    assert!(
        notes[0].contains("1 of 2 Conv/Gemm/MatMul converted"),
        "{}",
        notes[0]
    );
    assert!(notes[0].contains("(1.50x)"), "{}", notes[0]);
    assert!(notes[0].contains("(1.40x of fp32)"), "{}", notes[0]);
    assert!(
        notes[1].contains("cost 200 ns of the converted ops' 1.00 µs"),
        "{}",
        notes[1]
    );
    // No int8 decision: no notes.
    assert!(quantize::summary_notes(&QuantizationReport::default()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// pass selection

#[test]
fn pass_selection() {
    let names = |options: &AdviseOptions| -> Vec<&'static str> {
        select_passes(options)
            .unwrap()
            .iter()
            .map(|p| p.name())
            .collect()
    };
    // By default the float rewrites only; quantization is opt-in.
    assert_eq!(
        names(&AdviseOptions::default()),
        ["fold", "bn-fold", "fuse", "eltwise"]
    );
    let options = AdviseOptions {
        apply: vec!["int8".into(), "fold".into()],
        ..AdviseOptions::default()
    };
    // Driver order, not the order given.
    assert_eq!(names(&options), ["fold", "int8"]);
    let options = AdviseOptions {
        skip: vec!["fuse".into()],
        ..AdviseOptions::default()
    };
    assert_eq!(names(&options), ["fold", "bn-fold", "eltwise"]);
    let options = AdviseOptions {
        apply: vec!["fusion".into()],
        ..AdviseOptions::default()
    };
    assert!(matches!(
        select_passes(&options),
        Err(AdvisorError::UnknownPass(name)) if name == "fusion"
    ));
    // The float passes have names and descriptions the report shows.
    for pass in [&Fold as &dyn Pass, &BnFold, &Fuse, &Eltwise] {
        assert!(!pass.description().is_empty(), "{}", pass.name());
        assert!(pass.default_enabled());
    }
}
