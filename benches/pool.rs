//! Pooling (Inception, GoogLeNet, ResNet and SqueezeNet shapes, batch 1, one thread) against a
//! reference measured in the same run: the same bytes moved by a plain copy (input read +
//! output write, the memory floor of an op that reads and writes them once). Prints, per shape,
//! the time, the copy's time and `time / copy time`.
//!
//! `cargo bench --bench pool` (`POOL_ONLY=TEXT` keeps the shapes whose name contains TEXT). Inputs are written before timing, every shape runs a warm-up,
//! and the median of at least 30 calls is reported.

mod common;

use std::hint::black_box;

use common::median_seconds;

use roofline::kernels::pool::{avg_pool, max_pool, pool_separable_at, Pool2d};
use roofline::kernels::simd::{isa_level, IsaLevel};

/// (name, max?, channels, input side, kernel, stride, pad).
const SHAPES: &[(&str, bool, usize, usize, usize, usize, usize)] = &[
    ("avg 3x3/1 192x28²", false, 192, 28, 3, 1, 1),
    ("avg 3x3/1 576x14²", false, 576, 14, 3, 1, 1),
    ("max 3x3/1 256x28²", true, 256, 28, 3, 1, 1),
    ("max 3x3/2 64x112²", true, 64, 112, 3, 2, 1),
    ("max 3x3/2 192x56²", true, 192, 56, 3, 2, 1),
    ("max 3x3/2 96x109²", true, 96, 109, 3, 2, 0),
    ("max 3x3/2 128x55²", true, 128, 55, 3, 2, 0),
    ("max 3x3/2 256x27²", true, 256, 27, 3, 2, 0),
    ("max 2x2/2 128x56²", true, 128, 56, 2, 2, 0),
    ("avg 3x3/1 192x28²", false, 192, 28, 3, 1, 1),
    ("max 3x3/2 576x14²", true, 576, 14, 3, 2, 1),
    ("max 3x3/1 1024x7²", true, 1024, 7, 3, 1, 1),
    ("avg 3x3/1 1024x7²", false, 1024, 7, 3, 1, 1),
    // Inception-v1 (the ONNX zoo export) at 224²: its last stages run on 13² and 6² planes.
    ("max 3x3/1 512x13²", true, 512, 13, 3, 1, 1),
    ("max 3x3/1 832x6²", true, 832, 6, 3, 1, 1),
    // YOLOv5/v8 SPPF at 640² (5×5 stride 1 three times in a row) and YOLOv3's SPP 9 and 13.
    ("max 5x5/1 256x20²", true, 256, 20, 5, 1, 2),
    ("max 9x9/1 512x19²", true, 512, 19, 9, 1, 4),
    ("max 13x13/1 512x19²", true, 512, 19, 13, 1, 6),
];

fn main() {
    println!(
        "{:<20} {:>10} {:>10} {:>8} {:>14}",
        "shape", "pool µs", "copy µs", "÷ copy", "separable µs"
    );
    let only = std::env::var("POOL_ONLY").unwrap_or_default();
    for &(name, is_max, channels, side, kernel, stride, pad) in SHAPES {
        if !name.contains(only.as_str()) {
            continue;
        }
        let out_side = (side + 2 * pad - kernel) / stride + 1;
        let geom = Pool2d {
            planes: channels,
            in_h: side,
            in_w: side,
            kernel_h: kernel,
            kernel_w: kernel,
            stride_h: stride,
            stride_w: stride,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: pad,
            pad_left: pad,
            out_h: out_side,
            out_w: out_side,
        };
        let input: Vec<f32> = (0..channels * side * side)
            .map(|i| (i % 251) as f32 * 0.01)
            .collect();
        let mut output = vec![0.0f32; channels * out_side * out_side];
        let pool_s = median_seconds(|| {
            if is_max {
                max_pool(&geom, black_box(&input), &mut output);
            } else {
                avg_pool(&geom, false, pad, pad, black_box(&input), &mut output);
            }
            black_box(&output);
        });
        // Narrow planes and wide K×K stride-1 windows (K = 3, 5, 9, 13) run their own kernels
        // on AVX-512: the separable path (the padded grid at stride 1) is their reference.
        let narrow = side <= 32 && out_side <= 16;
        let wide = [3, 5, 9, 13].contains(&kernel) && stride == 1 && out_side > 16;
        let own_kernel = (narrow || wide) && isa_level() == IsaLevel::Avx512;
        let separable_s = own_kernel.then(|| {
            median_seconds(|| {
                pool_separable_at(
                    IsaLevel::Avx512,
                    is_max,
                    &geom,
                    black_box(&input),
                    &mut output,
                );
                black_box(&output);
            })
        });
        // The copy floor: read the input, write an output-sized buffer.
        let mut copy_out = vec![0.0f32; input.len()];
        let copy_s = median_seconds(|| {
            copy_out.copy_from_slice(black_box(&input));
            black_box(&copy_out);
        }) * (input.len() + output.len()) as f64
            / (2 * input.len()) as f64;
        println!(
            "{:<20} {:>10.1} {:>10.1} {:>8.2} {:>14}",
            name,
            pool_s * 1e6,
            copy_s * 1e6,
            pool_s / copy_s,
            separable_s.map_or(String::new(), |s| format!("{:.1}", s * 1e6))
        );
    }
}
