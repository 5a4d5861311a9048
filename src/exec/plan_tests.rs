//! Unit tests for `exec::plan`: zero-copy Concats, operand views folded into MatMuls,
//! whole-plane pools, and pointwise → depthwise NHWC pairs, each against the plan without the
//! rewrite (zero-copy Splits and Slices: `plan_slice_tests.rs`).

use super::*;
use crate::analysis::{Bindings, Prepared};
use crate::builtin::builder::{ConvSpec, GraphBuilder, SigDim};
use crate::builtin::WeightFill;

/// A DenseNet-like block: `x → conv a`, `x → conv b`, `c = concat(a, b)` (channels),
/// `d = concat(c, conv(relu(c)))`, `y = relu(d)`: both Concats are placed (the inner one
/// inside the outer), so they run nothing, the block lives in one buffer, and the output
/// is what copying gives, bit for bit. (A producer reading its own group, `conv(c)` here
/// without the relu, would keep its Concat copying: the runtime lends a step's output
/// buffer mutably.)
#[test]
fn nested_concats_are_written_in_place() {
    check_block(true);
}

/// The same block with `conv(c)` reading the inner Concat directly: the outer Concat
/// copies (its producer would read the buffer it writes), the inner one is still placed,
/// and the output is unchanged.
#[test]
fn a_producer_reading_its_own_buffer_keeps_the_concat_copying() {
    check_block(false);
}

/// The inputs of a one-input graph.
pub(super) fn one_input(name: &str, shape: &[usize], data: Vec<f32>) -> HashMap<String, RtTensor> {
    let tensor = RtTensor {
        shape: shape.to_vec(),
        data: super::super::RtData::F32(data),
    };
    [(name.to_string(), tensor)].into_iter().collect()
}

/// The first output of `plan` on `inputs`, from the second of two runs on one workspace (a
/// stale slice of the first must not survive into the second).
pub(super) fn second_run(plan: &Plan, inputs: &HashMap<String, RtTensor>) -> Vec<f32> {
    let mut ws = plan.workspace();
    plan.run(&mut ws, inputs, None).unwrap();
    plan.run(&mut ws, inputs, None).unwrap()[0].1.to_f32()
}

/// The built graph, imported and prepared, and its plan with the default options.
pub(super) fn default_plan(builder: GraphBuilder, name: &str) -> (Prepared, Plan) {
    let proto = builder.finish(name);
    let graph = crate::analysis::import::import_model(
        &proto,
        std::path::Path::new("."),
        std::path::Path::new(&format!("{name}.onnx")),
    )
    .unwrap();
    let prepared = Prepared::new(graph, &Bindings::default()).unwrap();
    let plan = plan_with(&prepared, PlanOptions::default());
    (prepared, plan)
}

/// The analysis of a prepared graph on a catalogue device, default options.
pub(super) fn analysis_of(prepared: &Prepared, name: &str) -> crate::analysis::Analysis {
    let device = crate::device::find_device("rtx2080ti")
        .expect("catalogue entry")
        .to_profile();
    crate::analysis::analyze_prepared(
        prepared,
        name,
        &device,
        &crate::analysis::AnalyzeOptions::default(),
    )
    .unwrap()
}

/// The plan of a prepared graph under `options`.
pub(super) fn plan_with(prepared: &Prepared, options: PlanOptions) -> Plan {
    build_plan(&prepared.graph, &prepared.order, &prepared.states, &options).unwrap()
}

fn check_block(relu_between: bool) {
    let mut b = GraphBuilder::new(WeightFill::Random(3));
    let x = b.input(
        "x",
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(4),
            SigDim::Fixed(6),
            SigDim::Fixed(6),
        ],
    );
    let a = b.conv(&x, 4, ConvSpec::new(3, 3, 1));
    let bb = b.conv(&x, 4, ConvSpec::new(5, 1, 1));
    let c = b.node(
        "Concat",
        &[&a, &bb],
        vec![crate::builtin::builder::attr_int("axis", 1)],
    );
    let r = if relu_between { b.relu(&c) } else { c.clone() };
    let e = b.conv(&r, 8, ConvSpec::new(2, 3, 1));
    let d = b.node(
        "Concat",
        &[&c, &e],
        vec![crate::builtin::builder::attr_int("axis", 1)],
    );
    let y = b.relu(&d);
    b.output(
        &y,
        1,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(10),
            SigDim::Fixed(6),
            SigDim::Fixed(6),
        ],
    );
    let (prepared, plan) = default_plan(b, "concats");
    let concats: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| s.info.op_type == "Concat")
        .collect();
    assert_eq!(concats.len(), 2);
    let in_place: Vec<bool> = concats
        .iter()
        .map(|s| matches!(s.kernel, Kernel::InPlace))
        .collect();
    assert_eq!(in_place, [true, relu_between]);
    let slot = |v: ValueId| match &plan.slots[v] {
        Slot::Buffer { buffer, offset, .. } => (*buffer, *offset),
        other => panic!("{other:?}"),
    };
    let value = |name: &str| prepared.graph.value_by_name(name).unwrap();
    // a and b at their offsets of the inner Concat's buffer (0 and 3 planes of 36); with
    // the outer one placed too, that buffer is d's and e sits 8 planes in.
    let (inner, inner_offset) = slot(value(&c));
    assert_eq!(slot(value(&a)), (inner, inner_offset));
    assert_eq!(slot(value(&bb)), (inner, inner_offset + 3 * 36));
    if relu_between {
        let (whole, _) = slot(value(&d));
        assert_eq!((inner, inner_offset), (whole, 0));
        assert_eq!(slot(value(&e)), (whole, 8 * 36));
    } else {
        assert_ne!(slot(value(&c)).0, slot(value(&d)).0);
    }
    // The same values, bit for bit, as the plan whose Concats copy; and less memory.
    let copying = plan_with(
        &prepared,
        PlanOptions {
            concat_in_place: false,
            ..PlanOptions::default()
        },
    );
    assert!(copying
        .steps
        .iter()
        .all(|s| !matches!(s.kernel, Kernel::InPlace)));
    assert!(
        plan.peak_activation_bytes < copying.peak_activation_bytes || !relu_between,
        "{} vs {}",
        plan.peak_activation_bytes,
        copying.peak_activation_bytes
    );
    let input: Vec<f32> = (0..4 * 36)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let inputs = one_input("x", &[1, 4, 6, 6], input);
    let run = |plan: &Plan| {
        let mut ws = plan.workspace();
        // Twice on one workspace: a stale slice must not survive into the second run.
        plan.run(&mut ws, &inputs, None).unwrap();
        plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32()
    };
    let got = run(&plan);
    assert_eq!(got, run(&copying));
    assert_eq!(got.len(), 10 * 36);
}

/// A MobileNet-style pair, 1×1 convolution (8 → 96 channels) then a 3×3 depthwise one
/// (stride 1 and 2, 14² planes), both with bias: on AVX-512 and AVX2 the activation between
/// them is held NHWC (the pointwise side writes it, the depthwise side reads it) and the
/// output is the all-NCHW plan's; when the pointwise output is also a graph output, or the
/// CPU has neither, no pair is made. With 40 channels the pair depends on the tiles: on
/// AVX-512 (12×32, 16-wide edge tiles) the pixel-major GEMM would compute 196 × 48 outputs
/// against 40 × 208 channel-major, so no pair; on AVX2 (6×16, 8-wide edge tiles) 196 × 40
/// against 40 × 200, a pair.
#[test]
fn pointwise_depthwise_pairs_hold_their_activation_nhwc() {
    for (stride, pointwise_is_output, channels) in [
        (1, false, 96),
        (2, false, 96),
        (1, true, 96),
        (1, false, 40),
    ] {
        let mut b = GraphBuilder::new(WeightFill::Random(11));
        let x = b.input("x", 1, &SigDim::fixed_all(&[1, 8, 14, 14]));
        let pw = b.conv(
            &x,
            8,
            ConvSpec {
                bias: true,
                ..ConvSpec::new(channels, 1, 1)
            },
        );
        let dw = b.conv(
            &pw,
            channels,
            ConvSpec {
                bias: true,
                group: channels,
                ..ConvSpec::new(channels, 3, stride)
            },
        );
        let side = 14 / stride;
        b.output(&dw, 1, &SigDim::fixed_all(&[1, channels, side, side]));
        if pointwise_is_output {
            b.output(&pw, 1, &SigDim::fixed_all(&[1, channels, 14, 14]));
        }
        let (prepared, plan) = default_plan(b, "pair");
        let layouts: Vec<PairLayout> = plan
            .steps
            .iter()
            .map(|s| match &s.kernel {
                Kernel::Conv(ConvKernel::Forward { layout, .. }) => *layout,
                other => panic!("{other:?}"),
            })
            .collect();
        let isa = gemm::Isa::detect();
        let paired = !pointwise_is_output
            && match isa {
                gemm::Isa::Avx512 => channels == 96,
                gemm::Isa::Avx2Fma => true,
                gemm::Isa::Scalar => false,
            };
        if paired {
            assert_eq!(layouts, [PairLayout::NhwcOutput, PairLayout::NhwcInput]);
        } else {
            assert_eq!(layouts, [PairLayout::Nchw, PairLayout::Nchw]);
        }
        let nchw = plan_with(
            &prepared,
            PlanOptions {
                nhwc_pairs: false,
                ..PlanOptions::default()
            },
        );
        let input: Vec<f32> = (0..8 * 196)
            .map(|i| ((i * 29 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let inputs = one_input("x", &[1, 8, 14, 14], input);
        let run = |plan: &Plan| {
            let mut ws = plan.workspace();
            plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32()
        };
        let (got, want) = (run(&plan), run(&nchw));
        assert_eq!(got.len() as i64, channels * side * side);
        for (at, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{at}: {g} vs {w}");
        }
    }
}

/// Scaled attention as exporters write it, `MatMul(s·Q, Transpose(K)·t)`: the Transpose
/// and both scalar Muls fold into the MatMul's read (strides and alpha), so only the MatMul
/// runs, and its output is the definition's. A second reader that is not a MatMul keeps
/// the K branch's steps.
#[test]
fn scaled_transposed_operands_fold_into_the_matmul() {
    for other_reader in [false, true] {
        let mut b = GraphBuilder::new(WeightFill::Random(5));
        let q = b.input("q", 1, &SigDim::fixed_all(&[1, 2, 3, 4]));
        let k = b.input("k", 1, &SigDim::fixed_all(&[1, 2, 5, 4]));
        let q_scale = b.scalar_const("q_scale", 0.25);
        let k_scale = b.scalar_const("k_scale", 0.5);
        let qs = b.node("Mul", &[&q_scale, &q], vec![]);
        let kt = b.transpose(&k, &[0, 1, 3, 2]);
        let kts = b.node("Mul", &[&kt, &k_scale], vec![]);
        let scores = b.node("MatMul", &[&qs, &kts], vec![]);
        b.output(&scores, 1, &SigDim::fixed_all(&[1, 2, 3, 5]));
        if other_reader {
            let relu = b.relu(&kts);
            b.output(&relu, 1, &SigDim::fixed_all(&[1, 2, 4, 5]));
        }
        let (_, plan) = default_plan(b, "attention");
        let ops: Vec<&str> = plan.steps.iter().map(|s| s.info.op_type.as_str()).collect();
        if other_reader {
            assert_eq!(ops, ["Transpose", "Mul", "MatMul", "Relu"]);
        } else {
            assert_eq!(ops, ["MatMul"]);
        }
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7 + seed) % 11) as f32 / 4.0 - 1.2)
                .collect()
        };
        let (q_data, k_data) = (values(24, 1), values(40, 3));
        let inputs: HashMap<String, RtTensor> = [
            ("q", vec![1, 2, 3, 4], q_data.clone()),
            ("k", vec![1, 2, 5, 4], k_data.clone()),
        ]
        .into_iter()
        .map(|(name, shape, data)| {
            let data = super::super::RtData::F32(data);
            (name.to_string(), RtTensor { shape, data })
        })
        .collect();
        let mut ws = plan.workspace();
        let got = plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32();
        for head in 0..2 {
            for row in 0..3 {
                for col in 0..5 {
                    let dot: f32 = (0..4)
                        .map(|d| q_data[head * 12 + row * 4 + d] * k_data[head * 20 + col * 4 + d])
                        .sum();
                    let at = head * 15 + row * 5 + col;
                    assert!(
                        (got[at] - 0.125 * dot).abs() < 1e-5,
                        "{at}: {} vs {}",
                        got[at],
                        0.125 * dot
                    );
                }
            }
        }
    }
}

/// A window covering the whole unpadded plane (`AveragePool` 5×4 over 5×4 planes, as older
/// exports end ResNets with a 7×7 one) runs as a global pool, with the window's values.
#[test]
fn a_whole_plane_window_runs_as_a_global_pool() {
    let mut b = GraphBuilder::new(WeightFill::Random(7));
    let dims = [1, 3, 5, 4].map(SigDim::Fixed);
    let x = b.input("x", 1, &dims);
    let window = || vec![crate::builtin::builder::attr_ints("kernel_shape", &[5, 4])];
    let avg = b.node("AveragePool", &[&x], window());
    let max = b.node("MaxPool", &[&x], window());
    let out = [1, 3, 1, 1].map(SigDim::Fixed);
    b.output(&avg, 1, &out);
    b.output(&max, 1, &out);
    let (_, plan) = default_plan(b, "whole_plane");
    let globals = plan
        .steps
        .iter()
        .filter(|s| {
            matches!(
                s.kernel,
                Kernel::Pool(super::super::lower::pool::PoolKernel::Global { plane: 20, .. })
            )
        })
        .count();
    assert_eq!(globals, 2);
    let input: Vec<f32> = (0..60).map(|i| ((i * 7 % 11) as f32) - 5.0).collect();
    let inputs: HashMap<String, RtTensor> = [(
        "x".to_string(),
        RtTensor {
            shape: vec![1, 3, 5, 4],
            data: super::super::RtData::F32(input.clone()),
        },
    )]
    .into_iter()
    .collect();
    let mut ws = plan.workspace();
    let outputs = plan.run(&mut ws, &inputs, None).unwrap();
    let planes: Vec<&[f32]> = input.chunks(20).collect();
    let mean: Vec<f32> = planes
        .iter()
        .map(|p| p.iter().sum::<f32>() / 20.0)
        .collect();
    let most: Vec<f32> = planes
        .iter()
        .map(|p| p.iter().copied().fold(f32::MIN, f32::max))
        .collect();
    let got_mean = outputs[0].1.to_f32();
    for (g, w) in got_mean.iter().zip(&mean) {
        assert!((g - w).abs() < 1e-5, "{got_mean:?} vs {mean:?}");
    }
    assert_eq!(outputs[1].1.to_f32(), most);
}

/// The kernels that split an op's output across threads by planes, rows or a transpose's
/// outermost axis (LRN over ranges of planes whose channel window crosses the pieces,
/// InstanceNormalization's channel index per piece, a one-plane NCHW → NHWC transpose split
/// inside the plane, LayerNormalization by rows, a stride-1 5×5 max pool): sized so every one
/// of them splits at 2 threads, and the 2-thread plan's output is the 1-thread plan's, bit for
/// bit (no op changes its arithmetic with the split).
#[test]
fn split_norms_pools_and_transposes_match_one_thread() {
    let (channels, side) = (32i64, 72i64);
    let mut b = GraphBuilder::new(WeightFill::Random(5));
    let x = b.input("x", 1, &[1, channels, side, side].map(SigDim::Fixed));
    let attr = crate::builtin::builder::attr_int;
    let lrn = b.node("LRN", &[&x], vec![attr("size", 5)]);
    let scale = b.jitter("in_scale", &[channels], 1.0, 0.2);
    let bias = b.jitter("in_bias", &[channels], 0.0, 0.2);
    let inorm = b.node("InstanceNormalization", &[&lrn, &scale, &bias], vec![]);
    let pooled = b.max_pool(&inorm, 5, 1, 2);
    let nhwc = b.transpose(&pooled, &[0, 2, 3, 1]);
    let y = b.layer_norm(&nhwc, channels);
    b.output(&y, 1, &[1, side, side, channels].map(SigDim::Fixed));
    let (prepared, one) = default_plan(b, "split");
    let two = plan_with(
        &prepared,
        PlanOptions {
            threads: 2,
            ..PlanOptions::default()
        },
    );
    let len = (channels * side * side) as usize;
    let input: Vec<f32> = (0..len)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 9.0)
        .collect();
    let inputs = one_input(
        "x",
        &[1, channels as usize, side as usize, side as usize],
        input,
    );
    let run = |plan: &Plan| {
        let mut ws = plan.workspace();
        plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32()
    };
    let (got, want) = (run(&two), run(&one));
    assert_eq!(got.len(), len);
    assert!(got.iter().all(|v| v.is_finite()));
    assert!(got == want, "2-thread output differs from 1-thread");
}

/// A product with a constant B and more rows than the streaming paths take packs B once at
/// plan time (`Prepared::Gemm::packed_b`), for Gemm's transposed weights and MatMul's plain
/// ones alike; with 3 rows it does not. Outputs are the definition's either way.
#[test]
fn constant_b_is_packed_once_for_products_of_many_rows() {
    use crate::builtin::builder::attr_int;
    let (k, n) = (64usize, 48usize);
    let weights: Vec<f32> = (0..k * n)
        .map(|i| ((i * 13 % 29) as f32 - 14.0) / 20.0)
        .collect();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 / 10.0).collect();
    for rows in [8usize, 3] {
        let mut b = GraphBuilder::new(WeightFill::Random(1));
        let x = b.input("x", 1, &[rows as i64, k as i64].map(SigDim::Fixed));
        // Gemm reads W as [n, k] with transB; MatMul the same values as [k, n].
        let w_nk = b.float_const("w_nk", &[n as i64, k as i64], &weights);
        let w_kn = b.float_const("w_kn", &[k as i64, n as i64], &weights);
        let c = b.float_const("c", &[n as i64], &bias);
        let gemm = b.node("Gemm", &[&x, &w_nk, &c], vec![attr_int("transB", 1)]);
        let matmul = b.node("MatMul", &[&x, &w_kn], vec![]);
        let out = [rows as i64, n as i64].map(SigDim::Fixed);
        b.output(&gemm, 1, &out);
        b.output(&matmul, 1, &out);
        let (_, plan) = default_plan(b, "constant_b");
        let packed = plan
            .steps
            .iter()
            .filter(|s| {
                matches!(
                    &s.cpu,
                    super::super::cpu::Prepared::Gemm {
                        packed_b: Some(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(packed, if rows > 4 { 2 } else { 0 }, "{rows} rows");
        let input: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7 % 19) as f32 - 9.0) / 8.0)
            .collect();
        let inputs = one_input("x", &[rows, k], input.clone());
        let mut ws = plan.workspace();
        let outputs = plan.run(&mut ws, &inputs, None).unwrap();
        let (got_gemm, got_matmul) = (outputs[0].1.to_f32(), outputs[1].1.to_f32());
        for r in 0..rows {
            for j in 0..n {
                let dot_nk: f64 = (0..k)
                    .map(|kk| f64::from(input[r * k + kk]) * f64::from(weights[j * k + kk]))
                    .sum();
                let dot_kn: f64 = (0..k)
                    .map(|kk| f64::from(input[r * k + kk]) * f64::from(weights[kk * n + j]))
                    .sum();
                let want_gemm = dot_nk + f64::from(bias[j]);
                let (g, m) = (
                    f64::from(got_gemm[r * n + j]),
                    f64::from(got_matmul[r * n + j]),
                );
                assert!(
                    (g - want_gemm).abs() < 1e-4,
                    "gemm {r},{j}: {g} vs {want_gemm}"
                );
                assert!((m - dot_kn).abs() < 1e-4, "matmul {r},{j}: {m} vs {dot_kn}");
            }
        }
    }
}

/// Weights whose set outgrows the last-level cache (64 KiB under test) stream from memory at
/// every run, so every GEMM of the plan is configured for it; a model whose weights fit is not.
#[test]
fn a_weight_set_larger_than_the_last_level_cache_streams() {
    let prepared_of = |features: i64| {
        let mut b = GraphBuilder::new(WeightFill::Random(5));
        let x = b.input("x", 1, &[SigDim::Fixed(1), SigDim::Fixed(features)]);
        let y = b.linear(&x, features, features);
        b.output(&y, 1, &[SigDim::Fixed(1), SigDim::Fixed(features)]);
        let graph = crate::analysis::import::import_model(
            &b.finish("gemv"),
            std::path::Path::new("."),
            std::path::Path::new("gemv.onnx"),
        )
        .unwrap();
        Prepared::new(graph, &Bindings::default()).unwrap()
    };
    let outgrows = |features: i64| {
        let prepared = prepared_of(features);
        weights_outgrow_cache(&prepared.graph, &prepared.order, &prepared.states)
    };
    // 64 × 64 floats: 16 KiB; 256 × 256: 256 KiB.
    assert!(!outgrows(64));
    assert!(outgrows(256));
}

/// An int64 Transpose past the analysis's constant-evaluation size (an LSTM's token ids moved
/// to time-major: `[1, 33, 128]` was 4 elements too many) runs on the movement kernel, with the
/// values the definition gives; so does a bool one (ONNX type 9, held as 0/1 integers).
#[test]
fn integer_and_bool_transposes_of_any_size_run() {
    for elem_type in [7, 9] {
        let (rows, cols) = (33usize, 128usize);
        let mut b = GraphBuilder::new(WeightFill::Random(1));
        let x = b.input(
            "x",
            elem_type,
            &[1, rows as i64, cols as i64].map(SigDim::Fixed),
        );
        let y = b.transpose(&x, &[2, 0, 1]);
        b.output(
            &y,
            elem_type,
            &[cols as i64, 1, rows as i64].map(SigDim::Fixed),
        );
        let (_, plan) = default_plan(b, "int_transpose");
        let values: Vec<i64> = (0..rows * cols)
            .map(|i| {
                if elem_type == 9 {
                    (i % 3 == 0) as i64
                } else {
                    i as i64 * 7 - 9000
                }
            })
            .collect();
        let tensor = RtTensor {
            shape: vec![1, rows, cols],
            data: super::super::RtData::I64(values.clone()),
        };
        let inputs = [("x".to_string(), tensor)].into_iter().collect();
        let mut ws = plan.workspace();
        let out = plan.run(&mut ws, &inputs, None).unwrap();
        let super::super::RtData::I64(got) = &out[0].1.data else {
            panic!("the transpose of integers gave floats");
        };
        assert_eq!(out[0].1.shape, [cols, 1, rows]);
        for c in 0..cols {
            for r in 0..rows {
                assert_eq!(
                    got[c * rows + r],
                    values[r * cols + c],
                    "type {elem_type} at {c},{r}"
                );
            }
        }
    }
}

/// Random ids for an input that indexes a 4-row table (through a Cast and an Unsqueeze) stay
/// below 4, so the planned model runs; an input that indexes nothing keeps the default range.
#[test]
fn random_indices_stay_inside_the_table_they_index() {
    let mut b = GraphBuilder::new(WeightFill::Random(2));
    let ids = b.input("ids", 7, &[1, 64].map(SigDim::Fixed));
    let other = b.input("other", 7, &[1, 64].map(SigDim::Fixed));
    let table = b.weight("roles", &[4, 8], 8);
    let as_int32 = b.node(
        "Cast",
        &[&ids],
        vec![crate::builtin::builder::attr_int("to", 6)],
    );
    let axes = b.int64_const("axes", &[0]);
    let lifted = b.node("Unsqueeze", &[&as_int32, &axes], vec![]);
    let rows = b.node("Gather", &[&table, &lifted], vec![]);
    b.output(&rows, 1, &[1, 1, 64, 8].map(SigDim::Fixed));
    b.output(&other, 7, &[1, 64].map(SigDim::Fixed));
    let (prepared, plan) = default_plan(b, "embedding");
    let ids_value = prepared.graph.value_by_name("ids").unwrap();
    let other_value = prepared.graph.value_by_name("other").unwrap();
    assert_eq!(super::super::index_range(&prepared.graph, ids_value), 4);
    assert_eq!(
        super::super::index_range(&prepared.graph, other_value),
        super::super::RANDOM_INTEGER_RANGE
    );
    for seed in 0..4 {
        let inputs = super::super::random_inputs(&plan, seed);
        let super::super::RtData::I64(ids) = &inputs["ids"].data else {
            panic!("integer input drawn as floats");
        };
        assert!(ids.iter().all(|&i| (0..4).contains(&i)));
        assert!(ids.contains(&3), "the whole table's range is drawn");
        let mut ws = plan.workspace();
        plan.run(&mut ws, &inputs, None).unwrap();
    }
}

/// A weight read by two products, once directly and once through an Identity (a layer applied
/// twice with the same weights), is one constant in the plan, packed once, and counted once in
/// the analysis's parameters; a second weight with the same values is a second copy.
#[test]
fn a_weight_shared_through_an_identity_is_held_and_packed_once() {
    let (rows, width) = (64usize, 48usize);
    let build = |shared: bool| {
        let mut b = GraphBuilder::new(WeightFill::Random(4));
        let x = b.input("x", 1, &[rows as i64, width as i64].map(SigDim::Fixed));
        let w = b.weight("w", &[width as i64, width as i64], width as i64);
        let second = if shared {
            b.node("Identity", &[&w], vec![])
        } else {
            b.weight("w_copy", &[width as i64, width as i64], width as i64)
        };
        let h = b.node("MatMul", &[&x, &w], vec![]);
        let y = b.node("MatMul", &[&h, &second], vec![]);
        b.output(&y, 1, &[rows as i64, width as i64].map(SigDim::Fixed));
        default_plan(b, "shared")
    };
    let (shared_prepared, shared) = build(true);
    let (_, copied) = build(false);
    let weight_bytes = (width * width * 4) as u64;
    assert!(
        shared.weights_bytes + weight_bytes <= copied.weights_bytes,
        "shared {} vs copied {}",
        shared.weights_bytes,
        copied.weights_bytes
    );
    // Both products read one packed copy of the weight.
    let packed: Vec<&Arc<crate::kernels::gemm::PackedB>> = shared
        .steps
        .iter()
        .filter_map(|step| match &step.cpu {
            super::super::cpu::Prepared::Gemm {
                packed_b: Some(packed),
                ..
            } => Some(packed),
            _ => None,
        })
        .collect();
    assert_eq!(packed.len(), 2, "both products pack their constant B");
    assert!(Arc::ptr_eq(packed[0], packed[1]));
    let analysis = analysis_of(&shared_prepared, "shared");
    assert_eq!(analysis.summary.params, (width * width) as u64);
    let input: Vec<f32> = (0..rows * width)
        .map(|i| (i % 17) as f32 / 8.0 - 1.0)
        .collect();
    let inputs = one_input("x", &[rows, width], input);
    let mut ws = shared.workspace();
    let out = shared.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32();
    assert!(out.iter().all(|v| v.is_finite()));
}

/// A comparison that only a Cast to float reads runs in the Cast's step and writes 0.0 / 1.0
/// there (a one-hot `Equal` of integer ids against a range; a `Less` of floats against a
/// scalar); one whose booleans something else also reads keeps its own step. Same values
/// either way, and the analysis costs the comparison as a view exactly when it has no step.
#[test]
fn a_comparison_cast_to_float_runs_as_one_step() {
    use crate::builtin::builder::attr_int;
    for (integers, other_reader) in [(true, false), (true, true), (false, false)] {
        let mut b = GraphBuilder::new(WeightFill::Random(4));
        let (shape, elem_type): (Vec<usize>, i32) = if integers {
            (vec![2, 5, 1], 7)
        } else {
            (vec![3, 7], 1)
        };
        let dims: Vec<SigDim> = shape.iter().map(|&d| SigDim::Fixed(d as i64)).collect();
        let x = b.input("x", elem_type, &dims);
        let (mask, out_shape) = if integers {
            let range = b.int64_const("range", &[0, 1, 2, 3]);
            (b.node("Equal", &[&x, &range], vec![]), vec![2, 5, 4])
        } else {
            let threshold = b.scalar_const("threshold", 0.5);
            (b.node("Less", &[&x, &threshold], vec![]), vec![3, 7])
        };
        let floats = b.node("Cast", &[&mask], vec![attr_int("to", 1)]);
        let out_dims: Vec<SigDim> = out_shape.iter().map(|&d| SigDim::Fixed(d as i64)).collect();
        b.output(&floats, 1, &out_dims);
        if other_reader {
            b.output(&mask, 9, &out_dims);
        }
        let (prepared, plan) = default_plan(b, "compare_cast");
        let ops: Vec<&str> = plan.steps.iter().map(|s| s.info.op_type.as_str()).collect();
        if other_reader {
            assert_eq!(ops, ["Equal", "Cast"]);
        } else {
            assert_eq!(ops, ["Cast"]);
        }
        let analysis = analysis_of(&prepared, "compare_cast");
        let (compare, cast) = (&analysis.nodes[0], &analysis.nodes[1]);
        assert_eq!(
            compare.status == crate::analysis::NodeStatus::View,
            !other_reader,
            "{}: {:?}",
            compare.op_type,
            compare.status
        );
        // The fused Cast reads what the comparison reads (inputs and constants) and no
        // booleans; the unfused one reads one byte per boolean.
        let out_len: usize = out_shape.iter().product();
        let compared_bytes = if integers { (10 + 4) * 8 } else { 21 * 4 + 4 };
        let cast_reads = cast.activation_bytes_read + cast.weights_bytes;
        if other_reader {
            assert_eq!(cast_reads, out_len as u64);
        } else {
            assert_eq!(cast_reads, compared_bytes);
            assert!(matches!(
                &plan.steps[0].kernel,
                Kernel::Elementwise(
                    super::super::lower::elementwise::ElementwiseKernel::Compare {
                        to_float: true,
                        ..
                    }
                )
            ));
        }
        let len: usize = shape.iter().product();
        let (data, want): (super::super::RtData, Vec<f32>) = if integers {
            let ids: Vec<i64> = (0..len as i64).map(|i| (i * 3) % 6 - 1).collect();
            let want = ids
                .iter()
                .flat_map(|&id| (0..4).map(move |j| f32::from(u8::from(id == j))))
                .collect();
            (super::super::RtData::I64(ids), want)
        } else {
            let xs: Vec<f32> = (0..len).map(|i| (i % 5) as f32 * 0.25).collect();
            let want = xs.iter().map(|&v| f32::from(u8::from(v < 0.5))).collect();
            (super::super::RtData::F32(xs), want)
        };
        let inputs = [("x".to_string(), RtTensor { shape, data })]
            .into_iter()
            .collect();
        let mut ws = plan.workspace();
        let out = plan.run(&mut ws, &inputs, None).unwrap();
        assert_eq!(out[0].1.shape, out_shape);
        assert_eq!(
            out[0].1.to_f32(),
            want,
            "integers {integers}, other reader {other_reader}"
        );
        if other_reader {
            let super::super::RtData::I64(bools) = &out[1].1.data else {
                panic!("the comparison's own output is not booleans");
            };
            let as_floats: Vec<f32> = bools.iter().map(|&v| v as f32).collect();
            assert_eq!(as_floats, want);
        }
    }
}
