//! The cross-core handoff rate: how fast one thread reads an activation that the plan's other
//! threads have just written, measured on the tool's own kernels in the form models meet it.
//!
//! Each grid point is timed alone, so its inputs sit where its own threads left them on the
//! previous run. In a model, an op kept on one thread (an SE block's channel scale, a ReLU of
//! 20 k floats) often follows one that split across the cores (a depthwise convolution): the
//! other cores' share of its input is then in their caches, and one thread fetches it from
//! there. On a 2-vCPU Zen 4 guest that took 11-13 GB/s, a fifth of what the probe's buffer
//! handoff reads (`probe::exchange`, 70 GB/s: a whole buffer streamed by one core), so a
//! 25 k-float ReLU after a split depthwise convolution ran 6.8 µs against 1.9 alone. The
//! PP-OCR orientation classifier has a dozen such ops and was expected 15% fast at 2 threads.
//!
//! A pair is a depthwise 5×5 convolution (which splits by channels at every thread count)
//! feeding a ReLU too small to split; the ReLU's time at `threads` less its time at one
//! thread is what reading the other cores' share added.

use crate::analysis::handoff::other_cores_share;
use crate::analysis::AnalyzeOptions;
use crate::bench::{bench_graph, BenchOptions};
use crate::builtin::builder::{attr_int, attr_ints, GraphBuilder, SigDim, WeightFill};
use crate::device::calibration::HandoffRate;
use crate::device::DeviceProfile;

use super::CalibrateError;

const FLOAT: i32 = 1;

/// (channels, height, width) of the pairs: 15-31 k floats, under the 32 k at which an
/// element-wise op splits across two threads (`kernels::parallel::elementwise_pieces`), on
/// planes of a text-line classifier, a MobileNet stage and a small square map.
const PAIRS: [(i64, i64, i64); 3] = [(48, 4, 80), (88, 3, 96), (120, 16, 16)];

/// A depthwise 5×5 convolution (split by channels) and the ReLU of its output (one thread).
fn pair_model(channels: i64, height: i64, width: i64) -> crate::analysis::onnx_proto::ModelProto {
    let dims: Vec<SigDim> = [1, channels, height, width]
        .iter()
        .map(|&d| SigDim::Fixed(d))
        .collect();
    let mut b = GraphBuilder::new(WeightFill::Random(11));
    let x = b.input("x", FLOAT, &dims);
    let w = b.weight("w", &[channels, 1, 5, 5], 25);
    let y = b.node(
        "Conv",
        &[&x, &w],
        vec![
            attr_ints("kernel_shape", &[5, 5]),
            attr_ints("pads", &[2, 2, 2, 2]),
            attr_int("group", channels),
        ],
    );
    let z = b.relu(&y);
    b.output(&z, FLOAT, &dims);
    b.finish("handoff")
}

/// The consumer's (the ReLU's) median time in the pair at `threads`.
fn consumer_s(
    channels: i64,
    height: i64,
    width: i64,
    device: &DeviceProfile,
    threads: usize,
    runs: usize,
) -> Result<Option<f64>, CalibrateError> {
    let shape = format!("handoff {channels}x{height}x{width}");
    let model = pair_model(channels, height, width);
    let graph = crate::analysis::import::import_model(
        &model,
        std::path::Path::new("."),
        std::path::Path::new("handoff.onnx"),
    )
    .map_err(|e| CalibrateError::Import {
        shape: shape.clone(),
        reason: e.to_string(),
    })?;
    let options = BenchOptions {
        warmup: 3,
        ..super::point_bench_options(threads, runs)
    };
    let report = bench_graph(graph, &shape, device, &AnalyzeOptions::default(), &options)
        .map_err(|source| CalibrateError::Model { shape, source })?;
    Ok(report
        .ops
        .iter()
        .find(|op| report.analysis.nodes[op.node_index].op_type == "Relu")
        .map(|op| op.measured_s))
}

/// The handoff rate at each multi-thread count of `thread_counts` (none where no pair read
/// slower than alone: cores that share their caches).
pub fn measure(
    device: &DeviceProfile,
    thread_counts: &[usize],
    runs: usize,
) -> Result<Vec<HandoffRate>, CalibrateError> {
    let counts: Vec<usize> = thread_counts.iter().copied().filter(|&t| t > 1).collect();
    if counts.is_empty() {
        return Ok(Vec::new());
    }
    // Each consumer alone, once for every thread count.
    let alone: Vec<Option<f64>> = PAIRS
        .iter()
        .map(|&(channels, height, width)| consumer_s(channels, height, width, device, 1, runs))
        .collect::<Result<_, _>>()?;
    let mut rates = Vec::new();
    for threads in counts {
        let mut pair_gbs = Vec::new();
        for (&(channels, height, width), alone) in PAIRS.iter().zip(&alone) {
            let handed = consumer_s(channels, height, width, device, threads, runs)?;
            let (Some(alone), Some(handed)) = (*alone, handed) else {
                continue;
            };
            let bytes = (channels * height * width) as u64 * 4;
            if let Some(gbs) = rate_gbs(other_cores_share(bytes, threads), handed - alone) {
                pair_gbs.push(gbs);
            }
        }
        if pair_gbs.is_empty() {
            continue;
        }
        pair_gbs.sort_by(f64::total_cmp);
        rates.push(HandoffRate {
            threads: threads as u32,
            read_gbs: pair_gbs[pair_gbs.len() / 2],
            pairs: pair_gbs.len() as u32,
        });
    }
    Ok(rates)
}

/// GB/s of `remote_bytes` read in `added_s` more than alone; none when reading them added
/// nothing measurable (under 50 ns: the timer's resolution and the runs' spread).
fn rate_gbs(remote_bytes: u64, added_s: f64) -> Option<f64> {
    (added_s > 50e-9 && remote_bytes > 0).then(|| remote_bytes as f64 / added_s / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_keep_their_consumer_on_one_thread() {
        use crate::analysis::classify::splits_across_threads;
        use crate::device::calibration::KernelClass;
        for &(channels, height, width) in &PAIRS {
            let shape = [1, channels as u64, height as u64, width as u64];
            let elements = shape.iter().product::<u64>();
            for threads in [2, 4, 8] {
                assert!(
                    !splits_across_threads(
                        KernelClass::Elementwise,
                        "Relu",
                        threads,
                        elements,
                        &shape
                    ),
                    "{channels}x{height}x{width} at {threads} threads"
                );
            }
        }
    }

    #[test]
    fn the_rate_is_the_other_cores_share_over_the_added_time() {
        assert_eq!(other_cores_share(100_000, 2), 50_000);
        assert_eq!(other_cores_share(100_000, 4), 75_000);
        assert_eq!(other_cores_share(100_000, 1), 0);
        let gbs = rate_gbs(50_000, 4e-6).unwrap();
        assert!((gbs - 12.5).abs() < 1e-9, "{gbs}");
        // Nothing added: cores that share their caches, or noise.
        assert_eq!(rate_gbs(50_000, 0.0), None);
        assert_eq!(rate_gbs(50_000, -1e-6), None);
        assert_eq!(rate_gbs(0, 1e-6), None);
    }

    #[test]
    fn a_pair_runs_and_times_its_relu() {
        let device = crate::device::catalog()[0].to_profile();
        let time = consumer_s(8, 4, 8, &device, 2, 2).unwrap();
        assert!(time.is_some_and(|t| t > 0.0));
    }
}
