//! Unit tests for `kernels::conv::direct`: every ISA variant against the reference
//! convolution, and the rule that picks the kernel.

use super::*;
use crate::kernels::conv::reference_conv;
use crate::kernels::gemm::Activation;

fn geometry(
    channels: (usize, usize),
    plane: (usize, usize),
    kernel: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    group: usize,
) -> Conv2d {
    let (in_channels, out_channels) = channels;
    let (in_h, in_w) = plane;
    let reach = dilation * (kernel - 1) + 1;
    Conv2d {
        batch: 1,
        in_channels,
        in_h,
        in_w,
        out_channels,
        kernel_h: kernel,
        kernel_w: kernel,
        stride_h: stride,
        stride_w: stride,
        dilation_h: dilation,
        dilation_w: dilation,
        pad_top: pad,
        pad_left: pad,
        out_h: (in_h + 2 * pad - reach) / stride + 1,
        out_w: (in_w + 2 * pad - reach) / stride + 1,
        group,
    }
}

fn check(geom: Conv2d, activation: Activation, with_residual: bool) {
    let input: Vec<f32> = (0..geom.batch * geom.in_channels * geom.in_h * geom.in_w)
        .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
        .collect();
    let steps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
    let weights: Vec<f32> = (0..geom.out_channels * steps)
        .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
        .collect();
    let bias: Vec<f32> = (0..geom.out_channels)
        .map(|i| i as f32 * 0.1 - 0.5)
        .collect();
    let out_len = geom.batch * geom.out_channels * geom.out_h * geom.out_w;
    let residual: Vec<f32> = (0..out_len).map(|i| (i % 7) as f32 * 0.25 - 0.8).collect();
    let epilogue = ConvEpilogue {
        bias: Some(&bias),
        residual: with_residual.then_some(residual.as_slice()),
        activation,
    };
    let want = reference_conv(&geom, &input, &weights, &epilogue);
    for isa in [Isa::Avx2Fma, Isa::Avx512] {
        if !isa.is_available() {
            continue;
        }
        let packed = DirectWeights::pack(isa, &geom, &weights).expect("a direct kernel");
        for threads in [1, 3] {
            let mut got = vec![f32::NAN; out_len];
            let mut scratch = vec![f32::NAN; phases_scratch_len(&geom)];
            direct_conv2d(
                &geom,
                &input,
                &packed,
                &epilogue,
                &mut got,
                &mut scratch,
                threads,
            );
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                    "{isa:?}, {threads} threads, {geom:?} at {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn direct_matches_the_reference_over_geometries() {
    // First convolutions (3 channels, stride 2), SqueezeNet's expands, odd channel counts
    // that leave a partial channel block, planes narrower than a vector, a strided 1×1.
    check(
        geometry((3, 32), (33, 35), 3, 2, 1, 1, 1),
        Activation::Relu,
        false,
    );
    check(
        geometry((3, 16), (30, 30), 7, 2, 3, 1, 1),
        Activation::None,
        false,
    );
    check(
        geometry((16, 64), (21, 21), 3, 1, 1, 1, 1),
        Activation::Relu,
        true,
    );
    check(
        geometry((5, 13), (9, 7), 3, 1, 1, 1, 1),
        Activation::Silu,
        false,
    );
    check(
        geometry((8, 9), (6, 5), 3, 1, 0, 1, 1),
        Activation::None,
        true,
    );
    check(
        geometry((24, 20), (14, 14), 1, 2, 0, 1, 1),
        Activation::None,
        false,
    );
    check(
        geometry((6, 10), (19, 23), 3, 1, 2, 2, 1),
        Activation::Clip { min: 0.0, max: 6.0 },
        false,
    );
    check(
        geometry((8, 12), (17, 16), 3, 3, 1, 1, 2),
        Activation::Relu,
        true,
    );
    check(
        geometry((4, 8), (12, 40), 5, 1, 2, 1, 4),
        Activation::None,
        false,
    );
}

#[test]
fn phase_planes_past_the_prefetch_threshold() {
    // 40 channels of 130² padded planes (2.7 MB) and of four 62² phase planes (a strided
    // 5×5 on 120²: 2.5 MB) are past the threshold, so both take the prefetching path.
    let big = geometry((40, 12), (128, 128), 3, 1, 1, 1, 1);
    let layout = PhaseLayout::compact(&big);
    assert!(big.in_channels * layout.phases_len(&big) * 4 >= PREFETCH_MIN_BYTES);
    assert_eq!(prefetch_runs(&layout.tap_offsets).len(), 3);
    check(big, Activation::Relu, true);
    let strided = geometry((40, 9), (120, 120), 5, 2, 2, 1, 1);
    let layout = PhaseLayout::compact(&strided);
    assert!(strided.in_channels * layout.phases_len(&strided) * 4 >= PREFETCH_MIN_BYTES);
    check(strided, Activation::None, false);
}

#[test]
fn rows_sharing_uneven_padding() {
    // A 5×5 padded 1 on the left and top, 2 on the right and bottom: compact rows hold
    // 1 leading and 1 trailing zero, and the taps that reach two columns past a row's end
    // read the trailing zero and the next row's leading one.
    let even = geometry((7, 10), (17, 19), 5, 1, 1, 1, 1);
    let uneven = Conv2d {
        out_h: even.in_h - 1,
        out_w: even.in_w - 1,
        ..even
    };
    let (_, cols, _) = PhaseLayout::compact_extent(&uneven);
    assert_eq!(cols, uneven.in_w + 2);
    check(uneven, Activation::Relu, true);
    // Symmetric padding 1 on a 13-wide plane: 14 columns, not 15.
    let (_, cols, _) = PhaseLayout::compact_extent(&geometry((8, 8), (13, 13), 3, 1, 1, 1, 1));
    assert_eq!(cols, 14);
}

#[test]
fn narrow_pointwise_convolutions_read_their_input_in_place() {
    // A partial last channel block (20 = 8 + 8 + 4), a plane of whole vectors whose last
    // tile is one vector (16 × 17 = 272 = 5 × 48 + 2 × 16), a batch and two groups: each
    // image and group starts the kernel at its own input planes.
    let mut geom = geometry((96, 20), (16, 17), 1, 1, 0, 1, 1);
    assert!(reads_input_in_place(&geom) && applies_to_geometry(&geom));
    assert_eq!(scratch_len(&geom), 0);
    check(geom, Activation::Relu, true);
    geom.batch = 2;
    check(geom, Activation::None, false);
    let mut grouped = geometry((128, 48), (8, 8), 1, 1, 0, 1, 2);
    grouped.batch = 2;
    assert!(applies_to_geometry(&grouped));
    check(grouped, Activation::Relu, true);
    // Planes of partial vectors: the last tile reads a copy of its columns (13² = 169 =
    // 3 × 48 + 25: two vectors, the second partial), so the last channel's last vector
    // does not read past the input.
    let mut partial = geometry((80, 24), (13, 13), 1, 1, 0, 1, 1);
    assert!(needs_tail_copy(&partial) && applies_to_geometry(&partial));
    assert_eq!(scratch_len(&partial), 80 * slack());
    check(partial, Activation::Relu, true);
    partial.batch = 3;
    check(partial, Activation::None, false);
    let mut partial_groups = geometry((128, 40), (11, 11), 1, 1, 0, 1, 2);
    partial_groups.batch = 2;
    check(partial_groups, Activation::Relu, true);
    // A plane under one tile: the only tile is the last one.
    check(
        geometry((64, 16), (5, 7), 1, 1, 0, 1, 1),
        Activation::None,
        true,
    );
    // Padded or strided 1×1s, wide outputs and short inputs stay on the GEMM.
    for (channels, plane, stride, pad) in [
        ((144, 24), (16, 16), 1, 1),
        ((144, 24), (32, 32), 2, 0),
        ((144, 64), (16, 16), 1, 0),
        ((32, 16), (112, 112), 1, 0),
    ] {
        let geom = geometry(channels, plane, 1, stride, pad, 1, 1);
        assert!(!applies_to_geometry(&geom), "{geom:?}");
    }
}

#[test]
fn batches_and_one_row_planes() {
    let mut geom = geometry((6, 11), (13, 17), 3, 1, 1, 1, 1);
    geom.batch = 3;
    check(geom, Activation::Relu, true);
    // A 1-D convolution turned into one row.
    let row = Conv2d {
        in_h: 1,
        out_h: 1,
        kernel_h: 1,
        pad_top: 0,
        ..geometry((12, 16), (5, 200), 5, 1, 2, 1, 1)
    };
    check(row, Activation::None, false);
}

#[test]
fn the_rule_keeps_long_columns_and_plain_gemms_off_the_direct_kernel() {
    assert!(applies_to_geometry(&geometry(
        (16, 64),
        (55, 55),
        3,
        1,
        1,
        1,
        1
    )));
    assert!(applies_to_geometry(&geometry(
        (3, 64),
        (224, 224),
        7,
        2,
        3,
        1,
        1
    )));
    assert!(applies_to_geometry(&geometry(
        (256, 256),
        (14, 14),
        3,
        1,
        1,
        1,
        1
    )));
    assert!(!applies_to_geometry(&geometry(
        (512, 512),
        (14, 14),
        3,
        1,
        1,
        1,
        1
    )));
    assert!(!applies_to_geometry(&geometry(
        (64, 64),
        (7, 7),
        3,
        1,
        1,
        1,
        1
    )));
    assert!(!applies_to_geometry(&geometry(
        (64, 64),
        (56, 56),
        1,
        1,
        0,
        1,
        1
    )));
    assert!(!applies_to_geometry(&geometry(
        (64, 128),
        (56, 56),
        1,
        2,
        0,
        1,
        1
    )));
    assert!(!applies_to_geometry(&geometry(
        (32, 32),
        (56, 56),
        3,
        1,
        1,
        1,
        32
    )));
    assert!(!applies(
        Isa::Scalar,
        &geometry((16, 64), (55, 55), 3, 1, 1, 1, 1)
    ));
}

/// AVX2's own exclusions (`avx2_takes`): strided layers other than stems with more than 9 taps,
/// 3×3 stems included, and the in-place 1×1 stay on the GEMM there, and take the direct kernel
/// on AVX-512.
#[test]
fn avx2_keeps_strided_layers_and_narrow_pointwise_on_the_gemm() {
    let stem = geometry((3, 64), (224, 224), 7, 2, 3, 1, 1);
    let small_stem = geometry((3, 32), (224, 224), 3, 2, 1, 1, 1);
    let strided = geometry((64, 128), (56, 56), 3, 2, 1, 1, 1);
    let stride_one = geometry((64, 64), (56, 56), 3, 1, 1, 1, 1);
    let narrow = geometry((144, 24), (56, 56), 1, 1, 0, 1, 1);
    for (geom, on_avx2) in [
        (stem, true),
        (small_stem, false),
        (strided, false),
        (stride_one, true),
        (narrow, false),
    ] {
        assert_eq!(applies(Isa::Avx2Fma, &geom), on_avx2, "{geom:?}");
        assert!(applies(Isa::Avx512, &geom), "{geom:?}");
    }
}
