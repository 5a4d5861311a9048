//! Winograd F(2×2,3×3) and F(4×4,3×3) against direct convolution (the direct kernel or
//! im2col + GEMM, whichever `kernels::conv` picks) on the same shapes, measured in the same run
//! by the function that fills the latency table of rule 5 (`exec::conv_timing::measure`: the
//! three variants called in turn, medians): the 3×3 stride-1 convolutions of ResNet-50, VGG,
//! SqueezeNet and Inception-v2, batch 1. Prints per shape the direct time, each Winograd
//! variant's time and its speed-up over direct, and the effective GFLOP/s (direct FLOPs ÷ time).
//!
//! `cargo bench --bench winograd` (`ROOFLINE_BENCH_THREADS=2` for two workers,
//! `ROOFLINE_BENCH_COLD=1` for rule 5's conditions: 64 MiB written before every call so the
//! weights are cold, the input read so it is warm; `ROOFLINE_BENCH_SHAPE=64x56` or
//! `64x192x56` (in, out, side) for one shape, timed even when the table lacks it; under
//! `cargo test` it times one shape only).

/// The binary's allocator (huge pages for mid-size buffers), so the scratch of each variant is
/// mapped as it is when a model runs: Winograd's `V` and `M` planes span many 4 KiB pages.
#[global_allocator]
static HEAP: roofline::heap::HugePageHeap = roofline::heap::HugePageHeap;

use roofline::analysis::algorithm::ConvShape;
use roofline::exec::conv_timing;
use roofline::kernels::gemm;

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

fn main() {
    let threads: usize = std::env::var("ROOFLINE_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let config = gemm::GemmConfig::default();
    println!("{threads} thread(s), {}", config.isa.name());
    let cold = std::env::var("ROOFLINE_BENCH_COLD").is_ok_and(|v| v == "1");
    let mut evict = vec![0u8; if cold { 64 << 20 } else { 0 }];
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
    // A shape the table lacks (`96x24x160`) is timed on its own.
    let extra: Vec<(usize, usize, usize)> = only
        .as_deref()
        .and_then(|o| {
            let dims: Vec<usize> = o.split('x').filter_map(|d| d.parse().ok()).collect();
            (dims.len() == 3).then(|| (dims[0], dims[1], dims[2]))
        })
        .filter(|&(i, o, s)| !shapes.contains(&(i, o, s)))
        .into_iter()
        .collect();
    for &(channels, out_channels, side) in shapes.iter().chain(&extra) {
        if only.as_ref().is_some_and(|o| {
            *o != format!("{channels}x{side}") && *o != format!("{channels}x{out_channels}x{side}")
        }) {
            continue;
        }
        let shape = ConvShape::three_by_three(1, channels, out_channels, side, side);
        let Some(measured) = conv_timing::measure(&shape, threads, &mut evict) else {
            continue;
        };
        let direct_s = measured.direct_s;
        let times = [measured.winograd_f2_s, measured.winograd_f4_s];
        let flops = 2.0 * shape.direct_macs() as f64;
        let best = times.iter().copied().fold(direct_s, f64::min);
        println!(
            "{:<14} {:>8.0}µs {:>8.0}µs {:>7.2}× {:>8.0}µs {:>7.2}× {:>9.1}",
            format!("{channels}>{out_channels}×{side}²"),
            direct_s * 1e6,
            times[0] * 1e6,
            direct_s / times[0],
            times[1] * 1e6,
            direct_s / times[1],
            flops / best / 1e9
        );
    }
}
