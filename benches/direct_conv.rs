//! The direct convolution kernel against the im2col + GEMM path on the same shapes, measured
//! in the same run (first convolutions, SqueezeNet's expands, ResNet's and YOLOv8's 3×3 and
//! strided 1×1 convolutions, MobileNetV2's and ResNet's stride-1 1×1 convolutions, batch 1). Prints, per shape, the im2col column length K, both
//! times, `direct ÷ GEMM` and the direct kernel's GFLOP/s; the rule in
//! `kernels::conv::direct::applies` is read off this table.
//!
//! `cargo bench --bench direct_conv [-- THREADS]` (default 1). Every shape runs a warm-up and
//! the median of at least 30 calls is reported; the two paths alternate per shape.
//! `ROOFLINE_BENCH_ONLY=TEXT` keeps the shapes whose name contains TEXT.

mod common;

/// The binary's allocator (huge pages for mid-size buffers), so scratch and packed weights
/// are mapped as they are when a model runs.
#[global_allocator]
static HEAP: roofline::heap::HugePageHeap = roofline::heap::HugePageHeap;

use std::hint::black_box;

use common::median_seconds;

use roofline::kernels::conv::{conv2d_prepacked, Conv2d, ConvEpilogue, PackedConvWeights};
use roofline::kernels::gemm::{Activation, GemmConfig};

/// (name, in channels, out channels, input side, kernel, stride, pad).
const SHAPES: &[(&str, usize, usize, usize, usize, usize, usize)] = &[
    ("squeezenet conv1 3>64 3x3/2", 3, 64, 224, 3, 2, 0),
    ("resnet conv1 3>64 7x7/2", 3, 64, 224, 7, 2, 3),
    ("mobilenet conv1 3>32 3x3/2", 3, 32, 224, 3, 2, 1),
    ("yolo 3>16 3x3/2 640", 3, 16, 640, 3, 2, 1),
    ("fire2 e3 16>64 55", 16, 64, 55, 3, 1, 1),
    ("fire4 e3 32>128 27", 32, 128, 27, 3, 1, 1),
    ("fire6 e3 48>192 13", 48, 192, 13, 3, 1, 1),
    ("fire8 e3 64>256 13", 64, 256, 13, 3, 1, 1),
    ("yolo 16>32 3x3/2 320", 16, 32, 320, 3, 2, 1),
    ("yolo 32>64 3x3/2 160", 32, 64, 160, 3, 2, 1),
    ("yolo 64>128 3x3/2 80", 64, 128, 80, 3, 2, 1),
    ("resnet 64>64 3x3 56", 64, 64, 56, 3, 1, 1),
    ("inception 16>32 5x5 28", 16, 32, 28, 5, 1, 2),
    ("inception 24>64 5x5 14", 24, 64, 14, 5, 1, 2),
    ("resnet 256>512 1x1/2 56", 256, 512, 56, 1, 2, 0),
    ("resnet 512>1024 1x1/2 28", 512, 1024, 28, 1, 2, 0),
    ("yolo 128>256 3x3/2 40", 128, 256, 40, 3, 2, 1),
    ("resnet 128>128 3x3 28", 128, 128, 28, 3, 1, 1),
    ("resnet 1024>2048 1x1/2 14", 1024, 2048, 14, 1, 2, 0),
    ("resnet 256>256 3x3 14", 256, 256, 14, 3, 1, 1),
    ("resnet v1.5 128>128 3x3/2 56", 128, 128, 56, 3, 2, 1),
    ("resnet v1.5 256>256 3x3/2 28", 256, 256, 28, 3, 2, 1),
    ("resnet 512>512 3x3 7", 512, 512, 7, 3, 1, 1),
    ("alexnet 96>256 5x5 27", 96, 256, 27, 5, 1, 2),
    ("alexnet 3>64 11x11/4 224", 3, 64, 224, 11, 4, 2),
    ("mobilenetv2 32>16 1x1 112", 32, 16, 112, 1, 1, 0),
    ("mobilenetv2 16>96 1x1 112", 16, 96, 112, 1, 1, 0),
    ("mobilenetv2 96>24 1x1 56", 96, 24, 56, 1, 1, 0),
    ("mobilenetv2 24>144 1x1 56", 24, 144, 56, 1, 1, 0),
    ("mobilenetv2 144>24 1x1 56", 144, 24, 56, 1, 1, 0),
    ("mobilenetv2 144>32 1x1 28", 144, 32, 28, 1, 1, 0),
    ("mobilenetv2 32>192 1x1 28", 32, 192, 28, 1, 1, 0),
    ("mobilenetv2 192>32 1x1 28", 192, 32, 28, 1, 1, 0),
    ("resnet 64>64 1x1 56", 64, 64, 56, 1, 1, 0),
    ("resnet 64>256 1x1 56", 64, 256, 56, 1, 1, 0),
    ("resnet 256>64 1x1 56", 256, 64, 56, 1, 1, 0),
    ("resnet 128>512 1x1 28", 128, 512, 28, 1, 1, 0),
    ("resnet 512>128 1x1 28", 512, 128, 28, 1, 1, 0),
    ("yolo 32>32 1x1 160", 32, 32, 160, 1, 1, 0),
    ("squeezenet 96>16 1x1 55", 96, 16, 55, 1, 1, 0),
    ("squeezenet 128>32 1x1 27", 128, 32, 27, 1, 1, 0),
    ("squeezenet 256>32 1x1 27", 256, 32, 27, 1, 1, 0),
    ("inception 192>16 1x1 27", 192, 16, 27, 1, 1, 0),
    ("inception 480>16 1x1 13", 480, 16, 13, 1, 1, 0),
    ("inception 528>32 1x1 13", 528, 32, 13, 1, 1, 0),
];

/// 1-D convolutions (`[1, C, L]` as a 1-row plane), kernel 3, 'same' padding, by dilation: an
/// EEG spindle detector's 128-channel layers over 7500 samples.
/// (name, in channels, out channels, length, dilation).
const SHAPES_1D: &[(&str, usize, usize, usize, usize)] = &[
    ("1-D 128>128 k3 7500 dil 1", 128, 128, 7500, 1),
    ("1-D 128>128 k3 7500 dil 64", 128, 128, 7500, 64),
    ("1-D 128>128 k3 7500 dil 2048", 128, 128, 7500, 2048),
    ("1-D 64>64 k3 2000 dil 16", 64, 64, 2000, 16),
];

/// The geometries of both tables, in order.
fn geometries() -> Vec<(&'static str, Conv2d)> {
    let square = SHAPES
        .iter()
        .map(|&(name, cin, cout, side, kernel, stride, pad)| {
            let out = (side + 2 * pad - kernel) / stride + 1;
            let geom = Conv2d {
                batch: 1,
                in_channels: cin,
                in_h: side,
                in_w: side,
                out_channels: cout,
                kernel_h: kernel,
                kernel_w: kernel,
                stride_h: stride,
                stride_w: stride,
                dilation_h: 1,
                dilation_w: 1,
                pad_top: pad,
                pad_left: pad,
                out_h: out,
                out_w: out,
                group: 1,
            };
            (name, geom)
        });
    let rows = SHAPES_1D
        .iter()
        .map(|&(name, cin, cout, length, dilation)| {
            let geom = Conv2d {
                batch: 1,
                in_channels: cin,
                in_h: 1,
                in_w: length,
                out_channels: cout,
                kernel_h: 1,
                kernel_w: 3,
                stride_h: 1,
                stride_w: 1,
                dilation_h: 1,
                dilation_w: dilation,
                pad_top: 0,
                pad_left: dilation,
                out_h: 1,
                out_w: length,
                group: 1,
            };
            (name, geom)
        });
    square.chain(rows).collect()
}

fn main() {
    let threads: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1);
    let config = GemmConfig::default();
    println!("{} thread(s), GEMM variant {}", threads, config.isa.name());
    println!(
        "{:<28} {:>6} {:>10} {:>10} {:>8} {:>9}",
        "shape", "K", "GEMM µs", "direct µs", "÷ GEMM", "GFLOP/s"
    );
    let only = std::env::var("ROOFLINE_BENCH_ONLY").unwrap_or_default();
    for (name, geom) in geometries() {
        if !name.contains(only.as_str()) {
            continue;
        }
        let (cin, cout) = (geom.in_channels, geom.out_channels);
        let input: Vec<f32> = (0..cin * geom.in_h * geom.in_w)
            .map(|i| (i % 17) as f32 * 0.1 - 0.8)
            .collect();
        let weights: Vec<f32> = (0..cout * cin * geom.kernel_h * geom.kernel_w)
            .map(|i| (i % 5) as f32 * 0.02 - 0.04)
            .collect();
        let bias = vec![0.1f32; cout];
        let mut output = vec![0.0f32; cout * geom.out_h * geom.out_w];
        let epilogue = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::Relu,
        };
        let chosen = PackedConvWeights::new(&config, &geom, &weights);
        let gemm = PackedConvWeights::for_gemm(&config, &geom, &weights);
        let mut scratch = vec![0.0f32; geom.scratch_len()];
        let mut time = |packed: &Option<PackedConvWeights>| {
            median_seconds(|| {
                conv2d_prepacked(
                    &config,
                    &geom,
                    black_box(&input),
                    &weights,
                    packed.as_ref(),
                    &epilogue,
                    &mut output,
                    &mut scratch,
                    threads,
                );
                black_box(&output);
            })
        };
        let direct_applies = chosen.as_ref().is_some_and(PackedConvWeights::is_direct);
        let (mut gemm_s, mut direct_s) = (f64::MAX, f64::MAX);
        // Two alternations, the better of each: a slow spell of the host lands on both.
        for _ in 0..2 {
            gemm_s = gemm_s.min(time(&gemm));
            if direct_applies {
                direct_s = direct_s.min(time(&chosen));
            }
        }
        let k = cin * geom.kernel_h * geom.kernel_w;
        if direct_applies {
            println!(
                "{:<28} {:>6} {:>10.1} {:>10.1} {:>8.2} {:>9.1}",
                name,
                k,
                gemm_s * 1e6,
                direct_s * 1e6,
                direct_s / gemm_s,
                geom.flops() as f64 / direct_s / 1e9
            );
        } else {
            println!(
                "{:<28} {:>6} {:>10.1} {:>10} {:>8} {:>9.1}  (rule: GEMM)",
                name,
                k,
                gemm_s * 1e6,
                "-",
                "-",
                geom.flops() as f64 / gemm_s / 1e9
            );
        }
    }
}
