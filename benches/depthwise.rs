//! Depthwise convolution (the MobileNetV2 shapes, batch 1, one thread) against two references
//! measured in the same run: the same bytes moved by a plain copy (input read + output write,
//! the memory floor of an op that must read and write them once) and the FMA peak (9 FMAs per
//! output at this CPU's vector width). Prints, per shape: time, GFLOP/s, and the ratios
//! `time / copy time` and `time / compute floor`; the larger of the two floors is the roof.
//!
//! `cargo bench --bench depthwise`. Inputs are written before timing, every shape runs a
//! warm-up, and the median of at least 30 calls is reported. `ROOFLINE_BENCH_ONLY=TEXT` keeps
//! the shapes whose name (as printed, e.g. `144×56² s2`) contains TEXT.

mod common;

use std::hint::black_box;

use common::median_seconds;

use roofline::kernels::conv::{Conv2d, ConvEpilogue};
use roofline::kernels::depthwise::depthwise_conv2d;
use roofline::kernels::gemm::{self, Activation};

/// (channels, input side, stride): MobileNetV2's depthwise convolutions.
const SHAPES: &[(usize, usize, usize)] = &[
    (32, 112, 1),
    (96, 112, 2),
    (144, 56, 1),
    (144, 56, 2),
    (192, 28, 1),
    (384, 14, 1),
    (576, 14, 2),
    (960, 7, 1),
];

fn main() {
    // Compute floor: one core's f32 FMA peak measured by the same sgemm the convolutions use
    // elsewhere would include packing; a 1024³ GEMM is within 10% of peak here, so use it.
    let n = 512;
    let a = vec![0.5f32; n * n];
    let b = vec![0.25f32; n * n];
    let mut c = vec![0.0f32; n * n];
    let am = gemm::MatRef::row_major(&a, n, n);
    let bm = gemm::MatRef::row_major(&b, n, n);
    let gemm_s = median_seconds(|| {
        gemm::sgemm(&am, &bm, &mut c, n, &gemm::Epilogue::NONE, 1);
        black_box(&c);
    });
    let peak_gflops = 2.0 * (n * n * n) as f64 / gemm_s / 1e9;
    println!("reference: sgemm 512³ {peak_gflops:.1} GFLOP/s (compute floor uses this rate)\n");
    println!(
        "{:<22} {:>10} {:>9} {:>12} {:>12}",
        "shape", "time", "GFLOP/s", "÷ copy", "÷ compute"
    );
    let only = std::env::var("ROOFLINE_BENCH_ONLY").unwrap_or_default();
    for &(channels, side, stride) in SHAPES {
        let name = format!("{channels}×{side}² s{stride}");
        if !name.contains(&only) {
            continue;
        }
        let out = (side + 2 - 3) / stride + 1;
        let geom = Conv2d {
            batch: 1,
            in_channels: channels,
            in_h: side,
            in_w: side,
            out_channels: channels,
            kernel_h: 3,
            kernel_w: 3,
            stride_h: stride,
            stride_w: stride,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 1,
            pad_left: 1,
            out_h: out,
            out_w: out,
            group: channels,
        };
        let input: Vec<f32> = (0..channels * side * side)
            .map(|i| (i % 17) as f32 * 0.1 - 0.8)
            .collect();
        let weights: Vec<f32> = (0..channels * 9).map(|i| (i % 5) as f32 * 0.2).collect();
        let bias = vec![0.1f32; channels];
        let mut output = vec![0.0f32; channels * out * out];
        let epilogue = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::Clip { min: 0.0, max: 6.0 },
        };
        let conv_s = median_seconds(|| {
            depthwise_conv2d(&geom, &input, &weights, &epilogue, &mut output, 1);
            black_box(&output);
        });
        // The memory floor: read the input once and write the output once.
        let mut copy_dst = vec![0.0f32; output.len()];
        let copy_s = median_seconds(|| {
            // An integer XOR reduction vectorises (a float sum would not, for its rounding).
            let bits = input.iter().fold(0u32, |acc, &x| acc ^ x.to_bits());
            copy_dst.fill(f32::from_bits(bits & 0x3f7f_ffff));
            black_box(&copy_dst);
        });
        let flops = geom.flops() as f64;
        let compute_s = flops / (peak_gflops * 1e9);
        println!(
            "{:<22} {:>8.1}µs {:>9.1} {:>11.2}× {:>11.2}×",
            name,
            conv_s * 1e6,
            flops / conv_s / 1e9,
            conv_s / copy_s,
            conv_s / compute_s
        );
    }
}
