//! Unit tests for `kernels::conv::depthwise`: every ISA variant of the direct depthwise kernel
//! (row-blocked 3×3, the flat loop, sixteen- and eight-channel small planes, the AVX-512
//! stride-2 and AVX2 rows kernels) against the reference convolution, with epilogues and
//! threads.

use super::*;

#[allow(clippy::too_many_arguments)]
fn geom(
    channels: usize,
    h: usize,
    w: usize,
    k: (usize, usize),
    stride: (usize, usize),
    pad: (usize, usize, usize, usize),
    dil: usize,
) -> Conv2d {
    let (top, left, bottom, right) = pad;
    Conv2d {
        batch: 2,
        in_channels: channels,
        in_h: h,
        in_w: w,
        out_channels: channels,
        kernel_h: k.0,
        kernel_w: k.1,
        stride_h: stride.0,
        stride_w: stride.1,
        dilation_h: dil,
        dilation_w: dil,
        pad_top: top,
        pad_left: left,
        out_h: (h + top + bottom - dil * (k.0 - 1) - 1) / stride.0 + 1,
        out_w: (w + left + right - dil * (k.1 - 1) - 1) / stride.1 + 1,
        group: channels,
    }
}

/// Inputs, weights, bias and residual of a test convolution: fixed, varied values.
struct Fixture {
    input: Vec<f32>,
    weights: Vec<f32>,
    bias: Vec<f32>,
    residual: Vec<f32>,
}

fn fixture(g: &Conv2d) -> Fixture {
    let out_len = g.batch * g.out_channels * g.out_h * g.out_w;
    Fixture {
        input: (0..g.batch * g.in_channels * g.in_h * g.in_w)
            .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
            .collect(),
        weights: (0..g.in_channels * g.kernel_h * g.kernel_w)
            .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
            .collect(),
        bias: (0..g.in_channels).map(|i| i as f32 * 0.1 - 0.3).collect(),
        residual: (0..out_len).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect(),
    }
}

/// Every output within 1e-4 relative (plus 1e-4 absolute) of the reference; `context` names
/// the case in the failure message.
fn assert_close(got: &[f32], want: &[f32], context: impl Fn() -> String) {
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{} at {i}: {a} vs {b}",
            context()
        );
    }
}

fn check(g: Conv2d, activation: Activation, with_residual: bool) {
    let Fixture {
        input,
        weights,
        bias,
        residual,
    } = fixture(&g);
    let out_len = residual.len();
    let epi = ConvEpilogue {
        bias: Some(&bias),
        residual: with_residual.then_some(&residual[..]),
        activation,
    };
    let want = crate::kernels::conv::reference::reference_conv(&g, &input, &weights, &epi);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2] {
            // NaN-filled, so any output left unwritten fails.
            let mut got = vec![f32::NAN; out_len];
            depthwise_conv2d_with(isa, &g, &input, &weights, &epi, &mut got, threads);
            assert_close(&got, &want, || format!("{isa:?} threads {threads} {g:?}"));
        }
    }
}

#[test]
fn matches_the_direct_loop_for_every_stride_padding_and_isa() {
    // Fewer channels than a vector with a batch that runs on: a block of planes wraps past C
    // more than once (3 channels × 3 images in one 8- or 16-lane block).
    check(
        Conv2d {
            batch: 3,
            ..geom(3, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 1)
        },
        Activation::Relu,
        true,
    );
    let relu6 = Activation::Clip { min: 0.0, max: 6.0 };
    // MobileNet shapes: 3×3 stride 1 and 2 on wide, narrow and 7×7 planes.
    check(
        geom(5, 40, 37, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        relu6,
        false,
    );
    check(
        geom(4, 40, 41, (3, 3), (2, 2), (1, 1, 1, 1), 1),
        relu6,
        false,
    );
    check(
        geom(6, 14, 14, (3, 3), (2, 2), (0, 0, 1, 1), 1),
        Activation::None,
        false,
    );
    check(
        geom(7, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        Activation::Relu,
        true,
    );
    // Small planes with more than sixteen planes (AVX-512 runs them sixteen channels per
    // vector): blocks that wrap from one image's channels to the next image's, a partial
    // last block, stride 2, dilation, asymmetric padding, residual.
    check(geom(20, 9, 9, (3, 3), (1, 1), (1, 1, 1, 1), 1), relu6, true);
    check(
        geom(18, 14, 14, (3, 3), (2, 2), (0, 0, 1, 1), 1),
        Activation::HardSwish,
        false,
    );
    check(
        geom(17, 11, 13, (5, 5), (1, 1), (3, 1, 4, 2), 2),
        Activation::None,
        true,
    );
    // Narrow stride-1 rows: 5×5 with asymmetric padding over two AVX2 vectors, dilated
    // 3×3, and a row one lane wide.
    check(
        geom(3, 12, 13, (5, 5), (1, 1), (2, 1, 2, 3), 1),
        Activation::HardSwish,
        true,
    );
    check(
        geom(2, 11, 12, (3, 3), (1, 1), (2, 2, 2, 2), 2),
        relu6,
        true,
    );
    check(
        geom(2, 5, 1, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        Activation::None,
        false,
    );
    // 5×5 (EfficientNet, MnasNet), dilated, stride 3, asymmetric and no padding, 1×k.
    check(
        geom(3, 19, 23, (5, 5), (2, 2), (2, 2, 2, 2), 1),
        Activation::HardSwish,
        false,
    );
    check(
        geom(3, 21, 20, (3, 3), (1, 1), (2, 2, 2, 2), 2),
        Activation::None,
        true,
    );
    check(
        geom(3, 17, 18, (3, 3), (3, 3), (0, 1, 2, 0), 1),
        Activation::None,
        false,
    );
    check(
        geom(2, 9, 50, (1, 7), (1, 2), (0, 3, 0, 3), 1),
        Activation::None,
        false,
    );
    check(
        geom(2, 6, 5, (3, 3), (1, 1), (0, 0, 0, 0), 1),
        Activation::None,
        false,
    );
    check(
        geom(2, 4, 4, (1, 1), (2, 2), (0, 0, 0, 0), 1),
        Activation::None,
        false,
    );
    // An empty batch is a no-op, not a division by zero.
    let empty = Conv2d {
        batch: 0,
        ..geom(2, 4, 4, (3, 3), (1, 1), (1, 1, 1, 1), 1)
    };
    let epi = ConvEpilogue {
        bias: None,
        residual: None,
        activation: Activation::None,
    };
    depthwise_conv2d(&empty, &[], &[0.0; 18], &epi, &mut [], 2);
}

/// The straight-from-rows 3×3 kernel, run directly (the dispatcher sends it only stride-2
/// planes past the small-plane size): widths either side of one and two vectors (stride 2 reads
/// 32 columns per block), odd and even, every top padding it takes, right and bottom padding
/// present or not, with a residual and a clipped activation.
#[test]
fn rows_kernel_matches_the_reference_at_every_width() {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx512.is_available() {
        for w in [1, 2, 5, 7, 14, 15, 16, 17, 31, 32, 33, 34, 56, 65] {
            for stride in [1, 2] {
                for pad in [(1, 1, 1, 1), (0, 1, 1, 0), (2, 1, 0, 1), (1, 1, 0, 2)] {
                    if w + pad.1 + pad.3 < 3 {
                        continue; // no output column
                    }
                    let g = geom(3, (w % 9) + 3, w, (3, 3), (stride, stride), pad, 1);
                    assert!(rows_3x3_kernel_fits(&g));
                    check_rows_kernel(g);
                }
            }
        }
    }
    // Through the dispatcher, on the shapes it sends there.
    let relu6 = Activation::Clip { min: 0.0, max: 6.0 };
    let large = geom(3, 40, 37, (3, 3), (2, 2), (1, 1, 1, 1), 1);
    assert!(rows_3x3_applies(&large));
    check(large, relu6, true);
}

/// The AVX2 rows kernel, run directly: strides 1 and 2, input widths from one vector (8, the
/// least it takes) to either side of two and seven vectors (its interior loop and both edges,
/// and rows that are edges at both ends), odd and even input widths, paddings
/// from none to two on each side, heights that leave every band remainder, all planes in one
/// call and one per call, with a residual and Clip, Relu, no activation and HardSwish.
#[test]
fn avx2_rows_kernel_matches_the_reference_at_every_width() {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2Fma.is_available() {
        let mut covered = 0;
        for w in [
            8, 9, 10, 15, 16, 17, 18, 19, 31, 32, 33, 34, 35, 47, 48, 112, 113,
        ] {
            for pad in [
                (1, 1, 1, 1),
                (0, 0, 1, 1),
                (0, 0, 0, 0),
                (2, 2, 2, 2),
                (1, 2, 0, 1),
            ] {
                for stride in [1, 2] {
                    let g = geom(3, (w % 7) + 5, w, (3, 3), (stride, stride), pad, 1);
                    if !rows_avx2::rows_3x3_avx2_fits(&g) {
                        continue;
                    }
                    covered += 1;
                    check_rows_avx2(g);
                }
            }
        }
        assert!(
            covered >= 120,
            "only {covered} geometries reached the kernel"
        );
    }
    // Through the dispatcher on planes past the small-plane size (AVX2 sends them here).
    for stride in [1, 2] {
        let large = geom(3, 70, 67, (3, 3), (stride, stride), (1, 1, 1, 1), 1);
        check(large, Activation::Clip { min: 0.0, max: 6.0 }, true);
        check(large, Activation::None, false);
    }
}

#[cfg(target_arch = "x86_64")]
fn check_rows_avx2(g: Conv2d) {
    let planes = g.batch * g.in_channels;
    let Fixture {
        input,
        weights,
        bias,
        residual,
    } = fixture(&g);
    let out_len = residual.len();
    for (activation, residual) in [
        (Activation::Clip { min: 0.0, max: 6.0 }, Some(&residual[..])),
        (Activation::Relu, None),
        (Activation::None, Some(&residual[..])),
        (Activation::HardSwish, None),
    ] {
        let epi = ConvEpilogue {
            bias: Some(&bias),
            residual,
            activation,
        };
        let want = crate::kernels::conv::reference::reference_conv(&g, &input, &weights, &epi);
        // One call over all planes and one per plane (the planes a worker gets).
        for per_call in [planes, 1] {
            let mut got = vec![f32::NAN; out_len];
            for start in (0..planes).step_by(per_call) {
                // SAFETY: AVX2 and FMA are available; the slices hold the geometry's sizes.
                unsafe {
                    rows_avx2::rows_3x3_avx2(
                        &g,
                        &input,
                        &weights,
                        &epi,
                        SendPtr(got.as_mut_ptr()),
                        start..start + per_call,
                    );
                }
            }
            assert_close(&got, &want, || format!("{g:?} {activation:?}"));
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn check_rows_kernel(g: Conv2d) {
    let planes = g.batch * g.in_channels;
    let Fixture {
        input,
        weights,
        bias,
        residual,
    } = fixture(&g);
    let out_len = residual.len();
    for (activation, residual) in [
        (Activation::Clip { min: 0.0, max: 6.0 }, Some(&residual[..])),
        (Activation::None, None),
    ] {
        let epi = ConvEpilogue {
            bias: Some(&bias),
            residual,
            activation,
        };
        let want = crate::kernels::conv::reference::reference_conv(&g, &input, &weights, &epi);
        let mut got = vec![f32::NAN; out_len];
        // SAFETY: AVX-512F is available; the slices hold the geometry's sizes.
        unsafe {
            rows_3x3_avx512(
                &g,
                &input,
                &weights,
                &epi,
                SendPtr(got.as_mut_ptr()),
                0..planes,
            );
        }
        assert_close(&got, &want, || format!("{g:?}"));
    }
}

#[test]
fn column_masks_keep_the_lanes_inside_the_row() {
    assert_eq!(column_mask(0, 16), 0xFFFF);
    assert_eq!(column_mask(-1, 16), 0xFFFE);
    assert_eq!(column_mask(1, 16), 0x7FFF);
    assert_eq!(column_mask(-1, 14), 0x7FFE);
    assert_eq!(column_mask(16, 14), 0);
    assert_eq!(column_mask(-20, 14), 0);
    assert_eq!(column_mask(2, 5), 0b111);
}

/// The NHWC-input kernel against the reference convolution of the same values held NCHW:
/// channel counts that leave a partial block of sixteen, strides 1 and 2, 7² and 14² planes,
/// an asymmetric padding, residual and activation, one and two threads. Where the CPU has
/// neither AVX-512 nor AVX2 the kernel does not apply and says so.
#[test]
fn nhwc_input_kernel_matches_the_reference() {
    let cases = [
        geom(40, 14, 14, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        geom(24, 14, 14, (3, 3), (2, 2), (0, 0, 1, 1), 1),
        geom(33, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        geom(16, 10, 13, (5, 5), (1, 2), (2, 2, 2, 2), 1),
    ];
    for g in cases {
        let g = Conv2d { batch: 1, ..g };
        if !nhwc_input_applies(&g) {
            assert!(
                Isa::detect() == Isa::Scalar,
                "{g:?} should apply on AVX-512 and AVX2"
            );
            continue;
        }
        let (channels, plane) = (g.in_channels, g.in_h * g.in_w);
        let nchw: Vec<f32> = (0..channels * plane)
            .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let mut nhwc = vec![0.0; nchw.len()];
        for c in 0..channels {
            for q in 0..plane {
                nhwc[q * channels + c] = nchw[c * plane + q];
            }
        }
        let weights: Vec<f32> = (0..channels * g.kernel_h * g.kernel_w)
            .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
            .collect();
        let bias: Vec<f32> = (0..channels).map(|i| i as f32 * 0.1 - 0.3).collect();
        let out_len = channels * g.out_h * g.out_w;
        let residual: Vec<f32> = (0..out_len).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
        for with_residual in [false, true] {
            let epi = ConvEpilogue {
                bias: Some(&bias),
                residual: with_residual.then_some(&residual[..]),
                activation: Activation::Relu,
            };
            let want = crate::kernels::conv::reference::reference_conv(&g, &nchw, &weights, &epi);
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; out_len];
                depthwise_conv2d_nhwc_input(&g, &nhwc, &weights, &epi, &mut got, threads);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                        "{g:?} {i}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
