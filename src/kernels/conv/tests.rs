//! Unit tests for `kernels::conv`: every ISA variant of the im2col/GEMM convolution against the
//! reference convolution (groups, strides, dilations, padding, epilogues, threads) and the choice
//! of GEMM layout.

use super::*;
use crate::kernels::simd::{available_levels, IsaLevel};

fn check(geom: Conv2d) {
    let input: Vec<f32> = (0..geom.batch * geom.in_channels * geom.in_h * geom.in_w)
        .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
        .collect();
    let weights: Vec<f32> =
        (0..geom.out_channels * geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w)
            .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
            .collect();
    let bias: Vec<f32> = (0..geom.out_channels).map(|i| i as f32 * 0.1).collect();
    let out_len = geom.batch * geom.out_channels * geom.out_h * geom.out_w;
    let residual: Vec<f32> = (0..out_len).map(|i| (i % 7) as f32 * 0.25 - 0.8).collect();
    let plain = ConvEpilogue {
        bias: Some(&bias),
        residual: None,
        activation: Activation::None,
    };
    let fused = ConvEpilogue {
        bias: Some(&bias),
        residual: Some(&residual),
        activation: Activation::Relu,
    };
    check_with(geom, &input, &weights, &plain);
    check_with(geom, &input, &weights, &fused);
}

fn check_with(geom: Conv2d, input: &[f32], weights: &[f32], ep: &ConvEpilogue) {
    let (input, weights) = (input.to_vec(), weights.to_vec());
    let ep = *ep;
    let want = reference_conv(&geom, &input, &weights, &ep);
    let mut got = vec![0.0; want.len()];
    let mut scratch = vec![0.0; geom.scratch_len()];
    conv2d(&geom, &input, &weights, &ep, &mut got, &mut scratch, 1);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() < 1e-3 * (1.0 + w.abs()),
            "{geom:?} at {i}: {g} vs {w}"
        );
    }
    // The plan's path: weights packed once per GEMM variant, one and two threads.
    for isa in gemm::Isa::ALL {
        let Some(config) = gemm::GemmConfig::for_isa(isa) else {
            continue;
        };
        // The kernel the ISA picks (the direct kernel for short im2col columns) and the GEMM.
        let chosen = PackedConvWeights::new(&config, &geom, &weights);
        let gemm_packed = PackedConvWeights::for_gemm(&config, &geom, &weights);
        assert_eq!(chosen.is_none(), geom.is_depthwise());
        assert_eq!(
            chosen.as_ref().is_some_and(PackedConvWeights::is_direct),
            direct::applies(isa, &geom)
        );
        for (packed, threads) in [
            (&chosen, 1),
            (&chosen, 2),
            (&gemm_packed, 1),
            (&gemm_packed, 2),
        ] {
            let mut got = vec![f32::NAN; want.len()];
            let mut scratch = vec![f32::NAN; geom.scratch_len()];
            conv2d_prepacked(
                &config,
                &geom,
                &input,
                &weights,
                packed.as_ref(),
                &ep,
                &mut got,
                &mut scratch,
                threads,
            );
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                    "{isa:?} prepacked, {threads} threads, {geom:?} at {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn geom(
    c: usize,
    m: usize,
    hw: usize,
    k: usize,
    stride: usize,
    pad: usize,
    group: usize,
    dil: usize,
) -> Conv2d {
    let out = (hw + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    Conv2d {
        batch: 2,
        in_channels: c,
        in_h: hw,
        in_w: hw + 1,
        out_channels: m,
        kernel_h: k,
        kernel_w: k,
        stride_h: stride,
        stride_w: stride,
        dilation_h: dil,
        dilation_w: dil,
        pad_top: pad,
        pad_left: pad,
        out_h: out,
        out_w: (hw + 1 + 2 * pad - dil * (k - 1) - 1) / stride + 1,
        group,
    }
}

#[test]
fn im2col_agrees_across_isa_variants() {
    // Every variant of the multiversioned loop produces the same bits as the scalar one, on a
    // small output plane (gather tables) and a larger one (row by row).
    for dense in [geom(6, 4, 9, 3, 2, 1, 1, 1), geom(6, 4, 20, 3, 1, 1, 1, 1)] {
        let image: Vec<f32> = (0..6 * dense.in_h * dense.in_w)
            .map(|i| (i % 13) as f32 - 6.0)
            .collect();
        let len = 6 * 9 * dense.out_h * dense.out_w;
        let mut cols_ref = vec![0.0; len];
        im2col::at(IsaLevel::Scalar, &dense, &image, &mut cols_ref);
        for level in available_levels() {
            let mut cols = vec![0.0; len];
            im2col::at(level, &dense, &image, &mut cols);
            assert_eq!(cols, cols_ref, "im2col at {level:?} on {dense:?}");
        }
    }
}

#[test]
fn packed_im2col_blocks_match_the_explicit_matrix() {
    // Blocks of the self-packing operand equal the explicit im2col matrix laid out in
    // panels, for strides 1, 2 and 3, padding, dilation, and blocks that start mid-row and
    // end mid-panel; on small output planes (the explicit matrix through the gather tables)
    // and on planes past `SMALL_PLANE_PIXELS` (row by row).
    for g in [
        geom(3, 4, 9, 3, 1, 1, 1, 1),
        geom(2, 4, 11, 3, 2, 1, 1, 1),
        geom(2, 4, 12, 3, 3, 2, 1, 2),
        geom(3, 4, 12, 7, 2, 3, 1, 1),
        geom(2, 4, 20, 3, 1, 1, 1, 1),
        geom(2, 4, 37, 5, 2, 2, 1, 2),
    ] {
        assert_eq!(
            g.out_h * g.out_w > SMALL_PLANE_PIXELS,
            g.in_h >= 20,
            "{g:?} is not on the side of the threshold it was put here for"
        );
        let channels = g.in_channels;
        let image: Vec<f32> = (0..channels * g.in_h * g.in_w)
            .map(|i| i as f32 + 1.0)
            .collect();
        let (k, n) = (channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w);
        let mut cols = vec![0.0; k * n];
        im2col(&g, &image, &mut cols);
        for (k0, klen, j0, wlen, w) in [
            (0, k, 0, n, 16),
            (2, 5, 7, n - 7, 8),
            (1, 3, 13, (n - 13).min(30), 32),
        ] {
            let panels = wlen.div_ceil(w);
            for level in available_levels() {
                let mut packed = vec![f32::NAN; panels * klen * w];
                let block = PackBlock {
                    k0,
                    klen,
                    j0,
                    wlen,
                    w,
                };
                pack_im2col::at(level, &g, &image, block, &mut packed);
                for p in 0..panels {
                    for kk in 0..klen {
                        for lane in 0..w {
                            let j = p * w + lane;
                            let want = if j < wlen {
                                cols[(k0 + kk) * n + j0 + j]
                            } else {
                                0.0
                            };
                            let got = packed[p * klen * w + kk * w + lane];
                            assert_eq!(got, want, "{g:?} {level:?} block ({k0},{klen},{j0},{wlen},{w}) panel {p} row {kk} lane {lane}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn conv_paths_match_the_direct_loop() {
    check(geom(3, 8, 9, 3, 1, 1, 1, 1)); // im2col
    check(geom(4, 6, 8, 3, 2, 1, 2, 1)); // grouped, strided
    check(geom(5, 7, 6, 1, 1, 0, 1, 1)); // pointwise
    check(geom(6, 6, 9, 3, 1, 1, 6, 1)); // depthwise
    check(geom(6, 6, 9, 5, 2, 2, 6, 1)); // depthwise 5x5 stride 2
    check(geom(3, 4, 11, 3, 1, 2, 1, 2)); // dilated
    check(geom(8, 8, 7, 3, 2, 0, 8, 1)); // depthwise, no padding
    check(geom(4, 4, 40, 3, 2, 1, 4, 1)); // depthwise rows, stride 2
    check(geom(4, 4, 40, 5, 1, 2, 4, 1)); // depthwise rows, 5x5
    check(geom(4, 4, 37, 3, 2, 1, 4, 2)); // depthwise rows, dilated, stride 2
    check(geom(3, 5, 12, 7, 2, 3, 1, 1)); // 7x7 stride 2 stem
    check(geom(8, 6, 9, 1, 2, 0, 1, 1)); // 1x1 stride 2 (im2col, not pointwise)
    check(geom(70, 13, 6, 3, 1, 1, 1, 1)); // K = 630 taps: several k-blocks
                                           // Direct kernel, groups side by side on two threads (4 and 3 groups: even and uneven).
    check(geom(16, 16, 16, 3, 1, 1, 4, 1));
    check(geom(12, 24, 9, 3, 1, 1, 3, 1));
}

#[test]
fn small_planes_run_pixel_major_and_match() {
    // Few pixels, many channels: the GEMM computes Yᵀ and transposes it (with the residual
    // and activation) into the output.
    let cases = [
        geom(16, 64, 7, 3, 1, 1, 1, 1), // 7×8 pixels, 3×3
        geom(20, 64, 4, 1, 1, 0, 1, 1), // 4×5 pixels, pointwise
        geom(16, 64, 4, 3, 1, 1, 2, 1), // two groups of 32 channels
        // Groups run side by side on two threads, each with its own scratch.
        geom(128, 128, 4, 3, 1, 1, 4, 1), // four groups of 32 channels, 3×3
        geom(128, 128, 4, 1, 1, 0, 4, 1), // four pointwise groups
    ];
    // Chosen on the 12×32 AVX-512 tiles; `check` runs them on this CPU's ISA, where the layout
    // may differ: on AVX2's 6×16 tiles 64 channels × 56 pixels waste nothing either way
    // (3584 computed both ways) and stay channel-major.
    for g in cases {
        assert_eq!(
            gemm_layout(gemm::Isa::Avx512, &g),
            GemmLayout::PixelMajor,
            "{g:?} should take the pixel-major path"
        );
        check(g);
    }
    assert_eq!(
        gemm_layout(gemm::Isa::Avx2Fma, &cases[0]),
        GemmLayout::ChannelMajor
    );
    // 7×7 pixels against 64 channels is pixel-major on both tiles (AVX2: 50 × 64 = 3200
    // computed against 64 × 56 = 3584; AVX-512: 52 × 64 against 64 × 64), so the path also runs
    // on a CPU without AVX-512.
    let seven = Conv2d {
        in_h: 7,
        in_w: 7,
        out_h: 7,
        out_w: 7,
        ..geom(16, 64, 7, 3, 1, 1, 1, 1)
    };
    for isa in [gemm::Isa::Avx2Fma, gemm::Isa::Avx512] {
        assert_eq!(gemm_layout(isa, &seven), GemmLayout::PixelMajor, "{isa:?}");
    }
    check(seven);
    // The ResNet-50 stage-4 shape is pixel-major on the 12×32 AVX-512 tiles.
    let stage4 = Conv2d {
        batch: 1,
        in_h: 7,
        in_w: 7,
        out_h: 7,
        out_w: 7,
        ..geom(512, 512, 7, 3, 1, 1, 1, 1)
    };
    assert_eq!(
        gemm_layout(gemm::Isa::Avx512, &stage4),
        GemmLayout::PixelMajor
    );
    // The autotuner is asked for the shape that runs: pixels × channels × taps.
    assert_eq!(stage4.gemm_shape(gemm::Isa::Avx512), (49, 512, 4608));
    assert_eq!(
        gemm_layout(gemm::Isa::Avx512, &geom(64, 64, 56, 3, 1, 1, 1, 1)),
        GemmLayout::ChannelMajor
    );
}

#[test]
fn a_column_image_runs_as_the_same_row_image() {
    // (channels, filters, kernel, stride, pad, dilation, group): plain, strided and padded,
    // dilated depthwise, grouped.
    for (c, m, k, stride, pad, dil, group) in [
        (6, 8, 5, 1, 0, 1, 1),
        (6, 8, 5, 2, 2, 1, 1),
        (4, 4, 3, 1, 2, 2, 4),
        (6, 9, 3, 1, 1, 1, 3),
    ] {
        let h = 37;
        let column = Conv2d {
            batch: 2,
            in_channels: c,
            in_h: h,
            in_w: 1,
            out_channels: m,
            kernel_h: k,
            kernel_w: 1,
            stride_h: stride,
            stride_w: 1,
            dilation_h: dil,
            dilation_w: 1,
            pad_top: pad,
            pad_left: 0,
            out_h: (h + 2 * pad - dil * (k - 1) - 1) / stride + 1,
            out_w: 1,
            group,
        };
        let row = column.with_column_as_row();
        assert_eq!(
            (
                row.in_h,
                row.in_w,
                row.kernel_h,
                row.kernel_w,
                row.out_h,
                row.out_w
            ),
            (1, h, 1, k, 1, column.out_h)
        );
        let input: Vec<f32> = (0..2 * c * h)
            .map(|i| ((i * 31) % 19) as f32 - 9.0)
            .collect();
        let weights: Vec<f32> = (0..m * c / group * k)
            .map(|i| (i % 7) as f32 - 3.0)
            .collect();
        let ep = ConvEpilogue {
            bias: None,
            residual: None,
            activation: Activation::None,
        };
        // Integer-valued data: both orders of summation are exact.
        assert_eq!(
            reference_conv(&column, &input, &weights, &ep),
            reference_conv(&row, &input, &weights, &ep),
            "{column:?}"
        );
        check(row);
        // A column-side parameter that is not trivial keeps the geometry.
        let padded = Conv2d {
            pad_left: 1,
            out_w: 3,
            ..column
        };
        assert_eq!(padded.with_column_as_row(), padded);
    }
}
