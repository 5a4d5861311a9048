//! Tests of the element-wise kernels.

use super::*;
use crate::kernels::simd::IsaLevel;

/// Every ISA variant equals the scalar `as f32` conversion, on blocks that fit i32 and on
/// blocks holding one value past it (exact i64 rounding there), with a ragged tail.
#[test]
fn i64_to_f32_matches_the_scalar_conversion_at_every_isa() {
    let mut values: Vec<i64> = (0..300).map(|i| (i * 7919) % 513 - 256).collect();
    values[70] = i64::from(i32::MAX) + 1;
    values[150] = -(1i64 << 40) - 3;
    values[299] = i64::MAX;
    let expected: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    for level in [
        crate::kernels::simd::IsaLevel::Scalar,
        crate::kernels::simd::IsaLevel::Avx2,
        crate::kernels::simd::IsaLevel::Avx512,
    ] {
        let mut out = vec![f32::NAN; values.len()];
        i64_to_f32::at(level, &values, &mut out);
        assert_eq!(out, expected, "{level:?}");
    }
}

/// The integer conversions around the int8 GEMMs equal their scalar definitions at every ISA,
/// on a ragged length, with the extremes of each range.
#[test]
fn integer_conversions_match_their_definitions_at_every_isa() {
    let values: Vec<i64> = (0..301).map(|i| (i * 7919) % 256 - 128).collect();
    let sums: Vec<i32> = (0..301)
        .map(|i| [i32::MIN, i32::MAX, -1, 0][i % 4] ^ (i as i32 * 31))
        .collect();
    let mut spread = values.clone();
    spread[17] = i64::MIN;
    spread[300] = i64::MAX;
    for level in [
        crate::kernels::simd::IsaLevel::Scalar,
        crate::kernels::simd::IsaLevel::Avx2,
        crate::kernels::simd::IsaLevel::Avx512,
    ] {
        assert_eq!(i64_range::at(level, &values), (-128, 127), "{level:?}");
        assert_eq!(
            i64_range::at(level, &spread),
            (i64::MIN, i64::MAX),
            "{level:?}"
        );
        assert_eq!(i64_range::at(level, &[]), (i64::MAX, i64::MIN), "{level:?}");
        let bytes: Vec<u8> = values.iter().map(|&v| (v + 128) as u8).collect();
        assert_eq!(
            i64_to_shifted_bytes::at(level, &values, 128),
            bytes,
            "{level:?}"
        );
        let wide: Vec<i64> = sums.iter().map(|&v| i64::from(v)).collect();
        assert_eq!(i32_to_i64::at(level, &sums), wide, "{level:?}");
    }
}

#[test]
fn broadcast_channel_add() {
    // [1,2,2,2] + [2,1,1]
    let a: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let b = [10.0, 20.0];
    let mut out = vec![0.0; 8];
    binary(
        Binary::Add,
        &a,
        &[1, 2, 2, 2],
        &b,
        &[2, 1, 1],
        &mut out,
        &[1, 2, 2, 2],
    );
    assert_eq!(out, vec![10.0, 11.0, 12.0, 13.0, 24.0, 25.0, 26.0, 27.0]);
}

#[test]
fn broadcast_both_sides() {
    // [3,1] * [1,4]
    let a = [1.0, 2.0, 3.0];
    let b = [1.0, 10.0, 100.0, 1000.0];
    let mut out = vec![0.0; 12];
    binary(Binary::Mul, &a, &[3, 1], &b, &[1, 4], &mut out, &[3, 4]);
    assert_eq!(out[4..8], [2.0, 20.0, 200.0, 2000.0]);
}

/// out[i] = op(a[i'], b[i'']) by the definition: each output index mapped into each
/// operand through its own shape.
fn naive_broadcast(
    op: Binary,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out_shape: &[usize],
) -> Vec<f32> {
    let count: usize = out_shape.iter().product();
    let source = |flat: usize, shape: &[usize]| {
        let offset = out_shape.len() - shape.len();
        let (mut rest, mut index, mut stride) = (flat, 0, 1);
        for axis in (0..out_shape.len()).rev() {
            let coordinate = rest % out_shape[axis];
            rest /= out_shape[axis];
            if axis >= offset {
                let size = shape[axis - offset];
                index += if size == 1 { 0 } else { coordinate * stride };
                stride *= size;
            }
        }
        index
    };
    (0..count)
        .map(|i| apply_binary(op, a[source(i, a_shape)], b[source(i, b_shape)]))
        .collect()
}

#[test]
fn broadcast_layouts_merge_axes_both_operands_walk_alike() {
    // Per-channel scale over NCHW: C rows of H·W, one scalar of b per row.
    let layout = BroadcastLayout::new(&[1, 64, 7, 7], &[64, 1, 1], &[1, 64, 7, 7]);
    assert_eq!(layout.outer, vec![64]);
    assert_eq!((layout.a_outer[0], layout.b_outer[0]), (49, 1));
    assert_eq!(layout.inner, 49);
    assert!(layout.a_inner_contiguous && !layout.b_inner_contiguous);
    // A bias row over [M, N]: M rows of N, both contiguous along the row.
    let layout = BroadcastLayout::new(&[8, 3, 16], &[16], &[8, 3, 16]);
    assert_eq!((layout.outer.clone(), layout.inner), (vec![24], 16));
    assert_eq!((layout.a_outer[0], layout.b_outer[0]), (16, 0));
    assert!(layout.a_inner_contiguous && layout.b_inner_contiguous);
}

#[test]
fn broadcast_rows_match_the_definition_from_any_first_row() {
    let cases: [(&[usize], &[usize], &[usize]); 7] = [
        (&[1, 5, 3, 3], &[5, 1, 1], &[1, 5, 3, 3]),
        (&[2, 5, 3, 4], &[1, 5, 1, 1], &[2, 5, 3, 4]),
        (&[4, 1, 6], &[1, 3, 1], &[4, 3, 6]),
        (&[3, 1], &[1, 4], &[3, 4]),
        (&[2, 3, 4], &[4], &[2, 3, 4]),
        (&[1, 3, 1, 5], &[2, 1, 4, 1], &[2, 3, 4, 5]),
        (&[7], &[2, 1, 7], &[2, 3, 7]),
    ];
    for (a_shape, b_shape, out_shape) in cases {
        let a: Vec<f32> = (0..a_shape.iter().product::<usize>())
            .map(|i| i as f32 * 0.5 - 3.0)
            .collect();
        let b: Vec<f32> = (0..b_shape.iter().product::<usize>())
            .map(|i| i as f32 + 1.0)
            .collect();
        for op in [Binary::Sub, Binary::Div, Binary::Max] {
            let expected = naive_broadcast(op, &a, a_shape, &b, b_shape, out_shape);
            let mut out = vec![0.0; expected.len()];
            binary(op, &a, a_shape, &b, b_shape, &mut out, out_shape);
            assert_eq!(out, expected, "{a_shape:?} {op:?} {b_shape:?}");
            // A thread's share: rows from the middle on.
            let layout = BroadcastLayout::new(a_shape, b_shape, out_shape);
            let rows = expected.len() / layout.row_len();
            let first = rows / 2;
            let mut tail = vec![0.0; (rows - first) * layout.row_len()];
            binary_rows(op, &a, &b, &mut tail, &layout, first);
            assert_eq!(
                tail,
                expected[first * layout.row_len()..],
                "{a_shape:?} tail"
            );
        }
    }
}

#[test]
fn sin_and_cos_blocks_patch_the_elements_past_the_reduced_range_at_every_isa() {
    // Mostly ordinary angles, with a few elements the reduction does not hold for scattered
    // over two blocks and the tail: each must come out as libm's, the rest as f64's within 2e-7.
    let mut x: Vec<f32> = (0..150).map(|i| (i as f32 - 75.0) * 0.731).collect();
    for (at, value) in [
        (3, 1.0e8f32),
        (64, -7.0e6),
        (100, f32::NAN),
        (149, f32::INFINITY),
    ] {
        x[at] = value;
    }
    x[10] = -0.0;
    for (op, exact) in [
        (Unary::Sin, f64::sin as fn(f64) -> f64),
        (Unary::Cos, f64::cos),
    ] {
        for level in crate::kernels::simd::available_levels() {
            let mut got = vec![0.0; x.len()];
            unary_at(level, op, &x, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = exact(f64::from(v));
                if want.is_nan() {
                    assert!(g.is_nan(), "{op:?}({v}) at {level:?}: {g}");
                } else {
                    assert!(
                        (f64::from(g) - want).abs() < 2e-7,
                        "{op:?}({v}) at {level:?}: {g} vs {want}"
                    );
                }
            }
            if op == Unary::Sin {
                assert_eq!(
                    got[10].to_bits(),
                    (-0.0f32).to_bits(),
                    "sin(-0) at {level:?}"
                );
            }
        }
    }
}

#[test]
fn every_isa_variant_matches_the_scalar_semantics() {
    let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 37.0).collect();
    let ops = [
        Unary::Relu,
        Unary::LeakyRelu(0.1),
        Unary::Clip(-1.0, 6.0),
        Unary::Sigmoid,
        Unary::HardSigmoid(0.2, 0.5),
        Unary::HardSwish,
        Unary::Tanh,
        Unary::Gelu,
        Unary::Erf,
        Unary::Softplus,
        Unary::Exp,
        Unary::Neg,
        Unary::Abs,
        Unary::Elu(1.0),
        Unary::Mish,
        Unary::Sin,
        Unary::Cos,
    ];
    for op in ops {
        let want: Vec<f32> = x.iter().map(|&v| apply_unary(op, v)).collect();
        for level in crate::kernels::simd::available_levels() {
            let mut got = vec![0.0; x.len()];
            unary_at(level, op, &x, &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                    "{op:?} at {level:?}: {g} vs {w}"
                );
            }
        }
    }
    let b: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 + 0.5).collect();
    for op in [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Max,
        Binary::PRelu,
    ] {
        let want: Vec<f32> = x
            .iter()
            .zip(&b)
            .map(|(&p, &q)| apply_binary(op, p, q))
            .collect();
        for level in crate::kernels::simd::available_levels() {
            let mut got = vec![0.0; x.len()];
            binary_same::at(level, op, &x, &b, &mut got);
            assert_eq!(got, want, "{op:?} at {level:?}");
        }
    }
}

/// Long chains are cut into L1 pieces: with scalar constants across the whole range, with
/// per-channel constants inside each channel block (blocks longer than a piece, and a
/// thread's share starting mid-tensor), equal to the steps applied one by one over the
/// whole tensor, at every ISA.
#[test]
fn long_chains_equal_their_steps_applied_one_by_one() {
    let (channels, channel_size) = (3usize, 5000usize);
    let x: Vec<f32> = (0..channels * channel_size)
        .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
        .collect();
    let scalar = vec![
        ChainStep::Unary(Unary::Tanh),
        ChainStep::WithConstant {
            op: Binary::Sub,
            values: vec![0.25],
            swapped: true,
        },
        ChainStep::WithInput {
            op: Binary::Mul,
            swapped: false,
        },
    ];
    let per_channel = vec![
        ChainStep::WithConstant {
            op: Binary::Add,
            values: vec![1.0, -2.0, 3.5],
            swapped: false,
        },
        ChainStep::Unary(Unary::Sigmoid),
    ];
    // An affine step with the activation after it (one pass), one in the middle of a chain
    // (in place) and one first without an activation (reading x), scalar and per channel.
    let affine = vec![
        ChainStep::Affine {
            scale: vec![0.5, -1.5, 2.0],
            shift: vec![0.25],
        },
        ChainStep::Unary(Unary::Relu),
        ChainStep::Affine {
            scale: vec![3.0],
            shift: vec![-1.0, 0.0, 1.0],
        },
        ChainStep::Unary(Unary::Tanh),
    ];
    let affine_first = vec![
        ChainStep::Affine {
            scale: vec![-2.0],
            shift: vec![0.5],
        },
        ChainStep::WithInput {
            op: Binary::Add,
            swapped: true,
        },
    ];
    let reference = |steps: &[ChainStep], first_block: usize| -> Vec<f32> {
        x.iter()
            .enumerate()
            .map(|(i, &orig)| {
                let channel = (first_block + i / channel_size) % channels;
                steps.iter().fold(orig, |v, step| match step {
                    ChainStep::Unary(op) => apply_unary(*op, v),
                    ChainStep::WithConstant {
                        op,
                        values,
                        swapped,
                    } => {
                        let c = values[if values.len() == 1 { 0 } else { channel }];
                        if *swapped {
                            apply_binary(*op, c, v)
                        } else {
                            apply_binary(*op, v, c)
                        }
                    }
                    ChainStep::WithInput { op, swapped } => {
                        if *swapped {
                            apply_binary(*op, orig, v)
                        } else {
                            apply_binary(*op, v, orig)
                        }
                    }
                    ChainStep::Affine { scale, shift } => {
                        let pick =
                            |values: &[f32]| values[if values.len() == 1 { 0 } else { channel }];
                        v * pick(scale) + pick(shift)
                    }
                })
            })
            .collect()
    };
    for level in [
        crate::kernels::simd::IsaLevel::Scalar,
        crate::kernels::simd::IsaLevel::Avx2,
        crate::kernels::simd::IsaLevel::Avx512,
    ] {
        for (steps, first_block) in [
            (&scalar, 0),
            (&per_channel, 0),
            (&per_channel, 1),
            (&affine, 0),
            (&affine, 2),
            (&affine_first, 1),
        ] {
            let mut y = vec![f32::NAN; x.len()];
            chain::at(
                level,
                steps,
                &x,
                &mut y,
                first_block,
                channels,
                channel_size,
            );
            let expected = reference(steps, first_block);
            for (i, (got, want)) in y.iter().zip(&expected).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-5,
                    "{level:?} element {i}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn hardswish_chain_matches_formula() {
    // x * clip(x + 3, 0, 6) / 6
    let steps = vec![
        ChainStep::Unary(Unary::AddScalar(3.0)),
        ChainStep::Unary(Unary::Clip(0.0, 6.0)),
        ChainStep::WithInput {
            op: Binary::Mul,
            swapped: false,
        },
        ChainStep::Unary(Unary::MulScalar(1.0 / 6.0)),
    ];
    let x = [-4.0, -1.0, 0.0, 2.0, 5.0];
    let mut y = [0.0; 5];
    chain(&steps, &x, &mut y, 0, 0, 5);
    for (v, &xi) in y.iter().zip(&x) {
        assert!((v - apply_unary(Unary::HardSwish, xi)).abs() < 1e-6);
    }
}

/// The unary power's multiply-only exponents (2, 3, 4, ½) and the general one agree with
/// `powf` within a few ulps at every ISA level, negative bases included (odd powers keep the
/// sign), and the binary power's broadcast exponent 3 takes the same path.
#[test]
fn scalar_powers_match_powf() {
    let x: Vec<f32> = (0..67)
        .map(|i| (i as f32 - 33.0) * 0.173)
        .chain([-0.0, f32::NEG_INFINITY, f32::INFINITY, f32::NAN])
        .collect();
    for exponent in [2.0f32, 3.0, 4.0, 0.5, 1.5, -1.0] {
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            let mut y = vec![f32::NAN; x.len()];
            unary_at(level, Unary::PowScalar(exponent), &x, &mut y);
            for (&v, &got) in x.iter().zip(&y) {
                let want = v.powf(exponent);
                let close = (got - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1e-30);
                let same_zero =
                    got == 0.0 && want == 0.0 && got.is_sign_negative() == want.is_sign_negative();
                // Zeros must agree in sign too (powf(-0, 3) is -0).
                let sign_ok = got != 0.0 || same_zero;
                assert!(
                    ((close || got == want) && sign_ok) || (got.is_nan() && want.is_nan()),
                    "{v}^{exponent} at {level:?}: {got} vs {want}"
                );
            }
        }
        let via_binary = apply_binary(Binary::Pow, -1.7, exponent);
        let direct = (-1.7f32).powf(exponent);
        assert!(
            (via_binary - direct).abs() <= 4.0 * f32::EPSILON * direct.abs()
                || (via_binary.is_nan() && direct.is_nan())
        );
    }
}
