//! Winograd F(2×2,3×3) and F(4×4,3×3) against the im2col/GEMM convolution on the same shapes,
//! measured in the same run: the 3×3 stride-1 convolutions of ResNet-50 and VGG, batch 1.
//! Prints per shape the direct time, each Winograd variant's time and its speed-up over
//! direct, and the effective GFLOP/s (direct FLOPs ÷ time).
//!
//! `cargo bench --bench winograd` (`ROOFLINE_BENCH_THREADS=2` for two workers,
//! `ROOFLINE_BENCH_COLD=1` to flush the caches before every call, `ROOFLINE_BENCH_SHAPE=64x56` or
//! `64x192x56` (in, out, side) for one shape; under `cargo test` it times one shape only). Every shape runs
//! a warm-up, then the three variants are called in turn (at least 30 rounds) and each one's
//! median is reported.

/// The binary's allocator (huge pages for mid-size buffers), so the scratch of each variant is
/// mapped as it is when a model runs: Winograd's `V` and `M` planes span many 4 KiB pages.
#[global_allocator]
static HEAP: roofline::heap::HugePageHeap = roofline::heap::HugePageHeap;

use std::hint::black_box;
use std::time::Instant;

use roofline::kernels::conv::winograd::{self, WinogradTile, WinogradWeights};
use roofline::kernels::conv::{conv2d_prepacked, Conv2d, ConvEpilogue, PackedConvWeights};
use roofline::kernels::gemm::{self, Activation};

/// (channels in, channels out, side): ResNet-50's stride-1 3×3 layers, VGG's, then
/// SqueezeNet's expands (few input channels: the transforms weigh more against the products),
/// Inception-v2's 56², 28² and 14² layers (as many or more output channels than input ones).
const SHAPES: &[(usize, usize, usize)] = &[
    (64, 64, 56),
    (128, 128, 28),
    (256, 256, 14),
    (512, 512, 7),
    (64, 64, 224),
    (128, 128, 112),
    (256, 256, 56),
    (512, 512, 28),
    (512, 512, 14),
    (16, 64, 55),
    (32, 128, 27),
    (48, 192, 13),
    (64, 256, 13),
    (64, 192, 56),
    (64, 64, 28),
    (64, 96, 28),
    (96, 96, 28),
    (128, 160, 14),
    (192, 192, 14),
    (192, 256, 14),
];

/// Median seconds of each variant, timed interleaved call by call (variant 0, 1, 2, 0, 1, ...)
/// so that a noisy spell of a shared host slows every variant alike rather than whichever ran
/// during it.
fn interleaved_medians(variants: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for f in variants.iter_mut() {
        f();
    }
    let mut times = vec![Vec::new(); variants.len()];
    let start = Instant::now();
    let cold = std::env::var("ROOFLINE_BENCH_COLD").is_ok_and(|v| v == "1");
    let mut evict = if cold {
        vec![0u8; 64 << 20]
    } else {
        Vec::new()
    };
    while times[0].len() < 30 || start.elapsed().as_secs_f64() < 0.2 * variants.len() as f64 {
        for (f, samples) in variants.iter_mut().zip(times.iter_mut()) {
            if cold {
                // Caches cold, as inside a model: every other op's data passed through them.
                for b in evict.iter_mut().step_by(64) {
                    *b = b.wrapping_add(1);
                }
                black_box(&evict);
            }
            let t = Instant::now();
            f();
            samples.push(t.elapsed().as_secs_f64());
        }
    }
    times
        .into_iter()
        .map(|mut samples| {
            samples.sort_by(f64::total_cmp);
            samples[samples.len() / 2]
        })
        .collect()
}

fn main() {
    let threads: usize = std::env::var("ROOFLINE_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let config = gemm::GemmConfig::default();
    println!("{threads} thread(s), {}", config.isa.name());
    println!(
        "{:<14} {:>10} {:>10} {:>8} {:>10} {:>8} {:>9}",
        "shape", "direct", "F(2×2)", "gain", "F(4×4)", "gain", "GFLOP/s"
    );
    let only = std::env::var("ROOFLINE_BENCH_SHAPE").ok();
    // `cargo test --all-targets` runs this binary without `--bench`: one small shape as a smoke
    // run, not the whole table.
    let shapes = if std::env::args().any(|a| a == "--bench") {
        SHAPES
    } else {
        &SHAPES[2..3]
    };
    for &(channels, out_channels, side) in shapes {
        if only.as_ref().is_some_and(|o| {
            *o != format!("{channels}x{side}") && *o != format!("{channels}x{out_channels}x{side}")
        }) {
            continue;
        }
        let geom = Conv2d {
            batch: 1,
            in_channels: channels,
            in_h: side,
            in_w: side,
            out_channels,
            kernel_h: 3,
            kernel_w: 3,
            stride_h: 1,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            pad_top: 1,
            pad_left: 1,
            out_h: side,
            out_w: side,
            group: 1,
        };
        let input: Vec<f32> = (0..channels * side * side)
            .map(|i| (i % 17) as f32 * 0.1 - 0.8)
            .collect();
        let weights: Vec<f32> = (0..out_channels * channels * 9)
            .map(|i| (i % 5) as f32 * 0.02 - 0.04)
            .collect();
        let bias = vec![0.1f32; out_channels];
        let mut output = vec![0.0f32; out_channels * side * side];
        let epilogue = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::Relu,
        };
        let packed = PackedConvWeights::new(&config, &geom, &weights);
        let mut scratch = vec![0.0f32; geom.scratch_len()];
        let mut direct_output = output.clone();
        let mut direct = || {
            conv2d_prepacked(
                &config,
                &geom,
                &input,
                &weights,
                packed.as_ref(),
                &epilogue,
                &mut direct_output,
                &mut scratch,
                threads,
            );
            black_box(&direct_output);
        };
        let [f2, f4] = WinogradTile::ALL.map(|tile| {
            (
                WinogradWeights::new(&config, &geom, tile, &weights),
                vec![0.0f32; winograd::scratch_len(&geom, tile)],
            )
        });
        let run_winograd = |(packed, scratch): &mut (WinogradWeights, Vec<f32>),
                            output: &mut [f32]| {
            winograd::conv2d_winograd(&geom, &input, packed, &epilogue, output, scratch, threads);
            black_box(&*output);
        };
        let (mut f2, mut f4) = (f2, f4);
        let mut f4_output = output.clone();
        let mut winograd_f2 = || run_winograd(&mut f2, &mut output);
        let mut winograd_f4 = || run_winograd(&mut f4, &mut f4_output);
        let medians = interleaved_medians(&mut [&mut direct, &mut winograd_f2, &mut winograd_f4]);
        let (direct_s, times) = (medians[0], &medians[1..]);
        let best = times.iter().copied().fold(direct_s, f64::min);
        println!(
            "{:<14} {:>8.0}µs {:>8.0}µs {:>7.2}× {:>8.0}µs {:>7.2}× {:>9.1}",
            format!("{channels}>{out_channels}×{side}²"),
            direct_s * 1e6,
            times[0] * 1e6,
            direct_s / times[0],
            times[1] * 1e6,
            direct_s / times[1],
            geom.flops() as f64 / best / 1e9
        );
    }
}
