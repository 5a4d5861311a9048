//! The latency table of convolution algorithms (rule 5 of `analysis::algorithm`): each 3×3
//! convolution shape a model has a Winograd candidate for is run on this machine's kernels as
//! direct, F(2×2,3×3) and F(4×4,3×3), the three called in turn so that a noisy spell of a shared
//! host slows all of them alike, and the medians are kept per device profile (a JSON file next
//! to the saved probe profile, as the GEMM tuning cache), so a shape is timed once.
//!
//! Each call runs as inside a model: 2× the largest cache is written first (the layer's
//! weights cold, as when every other layer's weights passed through the caches since) and the
//! input read (warm, as just written by its producer). Timed warm, the variants misjudge the
//! model: Winograd reads 16/9 or 36/9 times the weight bytes. On Zen 5, 1 thread, in-model per
//! layer (`scripts/winograd_gain.py`, 4 alternated rounds), every Winograd layer of ResNet-50 and
//! all of Inception-v2's but its 64→192 56² one ran slower than direct (0.62-0.96×; end to end
//! 0.92× and 0.87×); the warm table had picked F(4×4) or F(2×2) for most of them, the cold one
//! picks direct for all but that 56² layer (1.33×) and ResNet's 128→128 28² (F(2×2), 1.26×).
//!
//! Medians, not minima: on a shared host the Winograd variants' times spread far more than
//! direct's (their transformed planes live in the L3 that neighbours share).
//!
//! Cost: 5-40 calls of each variant per shape within a budget of 0.2 s per shape, each call
//! after writing 2× L3 (about 3 ms for 64 MiB): ResNet-50's 3 shapes about 0.6 s once,
//! Inception-v2's 16 about 3 s once.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::analysis::algorithm::{ConvShape, MeasuredAlgorithms, MeasuredVariants};
use crate::kernels::conv::winograd::{self, WinogradTile, WinogradWeights};
use crate::kernels::conv::{
    conv2d_prepacked, Conv2d, ConvEpilogue, PackedConvWeights, KERNELS_REVISION,
};
use crate::kernels::gemm::{Activation, GemmConfig};

/// Calls of each variant at least and at most, and the wall-time budget per shape past the
/// minimum.
const MIN_ROUNDS: usize = 5;
const MAX_ROUNDS: usize = 40;
const BUDGET_S: f64 = 0.2;
/// Shapes timed per call of [`fill`] at most: a model with many distinct 3×3 layers spreads
/// its first timings over several runs (about 5 s each) instead of one long one; the shapes
/// not yet timed keep the roofline's rule meanwhile.
const MAX_SHAPES_PER_FILL: usize = 24;
/// Largest activation or weight tensor timed, in floats (a larger layer's choice stays with
/// the calibrated rule rather than allocating gigabytes to time it).
const MAX_TENSOR_FLOATS: usize = 1 << 27;

/// Where the table of `device_id` lives (beside the probe profile).
pub fn path_for(device_id: &str) -> Option<PathBuf> {
    let dir = crate::probe::default_profile_path()?
        .parent()?
        .to_path_buf();
    Some(dir.join(format!("conv-algorithms-{device_id}.json")))
}

/// The kernels' ISA name, which a table must match.
fn isa_name() -> String {
    GemmConfig::default().isa.name().to_string()
}

/// The saved table of `device_id` for this ISA and kernels' revision, or an empty one.
pub fn load(path: &Path, device_id: &str) -> MeasuredAlgorithms {
    let isa = isa_name();
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<MeasuredAlgorithms>(&text).ok())
        .filter(|table| {
            table.device == device_id
                && table.isa == isa
                && table.kernels_revision == KERNELS_REVISION
        })
        .unwrap_or_else(|| empty(device_id))
}

/// A table of `device_id` for this ISA with no entries.
fn empty(device_id: &str) -> MeasuredAlgorithms {
    MeasuredAlgorithms {
        device: device_id.to_string(),
        isa: isa_name(),
        kernels_revision: KERNELS_REVISION,
        entries: Default::default(),
    }
}

/// Writes the table (a failed write only costs timing again next time).
pub fn save(path: &Path, table: &MeasuredAlgorithms) {
    if let (Ok(text), Some(dir)) = (serde_json::to_string_pretty(table), path.parent()) {
        let _ = std::fs::create_dir_all(dir);
        let _ = crate::fsio::write_atomic(path, text.as_bytes());
    }
}

/// Times the shapes of `shapes` missing from `table` at `threads` (the first
/// `MAX_SHAPES_PER_FILL` of them); returns how many were timed.
pub fn fill(
    table: &mut MeasuredAlgorithms,
    shapes: &[ConvShape],
    threads: usize,
    evict_bytes: usize,
) -> usize {
    let mut timed = 0;
    // Allocated (and its pages faulted) once for all the shapes.
    let mut evict = Vec::new();
    for shape in shapes {
        let key = MeasuredAlgorithms::key(shape, threads);
        if table.entries.contains_key(&key) {
            continue;
        }
        if timed == MAX_SHAPES_PER_FILL {
            break;
        }
        if evict.is_empty() {
            evict = vec![0u8; evict_bytes];
        }
        if let Some(times) = measure(shape, threads, &mut evict) {
            table.entries.insert(key, times);
            timed += 1;
        }
    }
    timed
}

/// Writes one byte per cache line of `buffer`, split over `threads` (the timed kernel's): with
/// [`evict_bytes`] of it, what the caches held before is gone, from every core's private
/// caches too. Written by the caller alone, the eviction (several milliseconds) outlasted the
/// worker pool's spin, so the timed call began by waking a sleeping worker, which the ops of a
/// model never pay (their workers spin between ops): on the 2-vCPU Zen 5 guest the calibration
/// grid's cold-weight 1×1 convolutions at 2 threads took 20-56 µs more than their warm twins
/// (0-15 µs at 1 thread), and the 2-thread expected latency of models whose weights live in
/// DRAM (ResNet-50, DenseNet-121) came out 16-19% above their measured time.
pub fn evict_caches(buffer: &mut [u8], threads: usize) {
    let threads = threads.max(1);
    let piece = buffer.len().div_ceil(threads).next_multiple_of(64).max(64);
    let base = crate::kernels::parallel::SendPtr(buffer.as_mut_ptr());
    let len = buffer.len();
    crate::kernels::parallel::parallel_for(threads, len.div_ceil(piece), |task| {
        let start = task * piece;
        let end = (start + piece).min(len);
        // SAFETY: tasks write disjoint byte ranges of `buffer`, which outlives the call.
        let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        for line in part.iter_mut().step_by(64) {
            *line = line.wrapping_add(1);
        }
    });
    std::hint::black_box(buffer);
}

/// Bytes written between calls to push a layer's weights out of caches of `largest_cache`
/// bytes: twice the cache, within 16-128 MiB (a VM may report a socket's L3 of hundreds of
/// MiB; writing that per call would cost more than the layers).
pub fn evict_bytes(largest_cache: Option<u64>) -> usize {
    let twice = largest_cache.unwrap_or(32 << 20).saturating_mul(2);
    usize::try_from(twice)
        .unwrap_or(usize::MAX)
        .clamp(16 << 20, 128 << 20)
}

/// The saved table of `device_id` with `shapes` timed at `threads` where missing (saved
/// again when any was).
pub fn ensure(
    device_id: &str,
    shapes: &[ConvShape],
    threads: usize,
    evict_bytes: usize,
) -> MeasuredAlgorithms {
    let path = path_for(device_id);
    let mut table = match &path {
        Some(path) => load(path, device_id),
        None => empty(device_id),
    };
    if let (true, Some(path)) = (fill(&mut table, shapes, threads, evict_bytes) > 0, &path) {
        save(path, &table);
    }
    table
}

/// One 3×3 stride-1 shape (padding 1, bias and ReLU: the common epilogue) timed as each
/// algorithm, with `evict` written before every call to push the weights out of the caches;
/// `None` for a shape that is not a Winograd candidate or too large to time.
pub fn measure(shape: &ConvShape, threads: usize, evict: &mut [u8]) -> Option<MeasuredVariants> {
    let (batch, channels, out_channels) = (shape.batch, shape.in_channels, shape.out_channels);
    let plane = shape.out_h.checked_mul(shape.out_w)?;
    let largest = batch
        .checked_mul(channels.max(out_channels))?
        .checked_mul(plane)?
        .max(out_channels.checked_mul(channels)?.checked_mul(36)?);
    if !shape.winograd_candidate() || channels == 0 || largest > MAX_TENSOR_FLOATS {
        return None;
    }
    let geom = Conv2d {
        batch,
        in_channels: channels,
        in_h: shape.out_h,
        in_w: shape.out_w,
        out_channels,
        kernel_h: 3,
        kernel_w: 3,
        stride_h: 1,
        stride_w: 1,
        dilation_h: 1,
        dilation_w: 1,
        pad_top: 1,
        pad_left: 1,
        out_h: shape.out_h,
        out_w: shape.out_w,
        group: 1,
    };
    // Values in the range of a normalised activation and a small filter; their values do not
    // change the time.
    let input: Vec<f32> = (0..batch * channels * plane)
        .map(|i| (i % 17) as f32 * 0.1 - 0.8)
        .collect();
    let weights: Vec<f32> = (0..out_channels * channels * 9)
        .map(|i| (i % 5) as f32 * 0.02 - 0.04)
        .collect();
    let bias = vec![0.1f32; out_channels];
    let epilogue = ConvEpilogue {
        bias: Some(&bias),
        residual: None,
        activation: Activation::Relu,
    };
    let config = GemmConfig::default();
    let mut output = vec![0.0f32; batch * out_channels * plane];
    let packed = PackedConvWeights::new(&config, &geom, &weights);
    let mut direct_scratch = vec![0.0f32; geom.scratch_len()];
    // F(2×2) then F(4×4), the order of `WinogradTile::ALL` and of the samples below.
    let mut winograd_variants = WinogradTile::ALL.map(|tile| {
        (
            WinogradWeights::new(&config, &geom, tile, &weights),
            vec![0.0f32; winograd::scratch_len_threads(&geom, tile, threads)],
        )
    });
    let mut samples: [Vec<f64>; 3] = Default::default();
    // Before every call, as inside a model: the weights cold (every other layer's weights
    // passed through the caches since), the input warm (its producer just wrote it).
    let mut settle = |input: &[f32]| {
        evict_caches(evict, threads);
        let warm: f32 = input.iter().step_by(16).sum();
        std::hint::black_box(warm);
    };
    let start = Instant::now();
    // Round 0 warms the caches, packs and pools, and is not kept.
    for round in 0..=MAX_ROUNDS {
        settle(&input);
        let t = Instant::now();
        conv2d_prepacked(
            &config,
            &geom,
            &input,
            &weights,
            packed.as_ref(),
            &epilogue,
            &mut output,
            &mut direct_scratch,
            threads,
        );
        let direct_s = t.elapsed().as_secs_f64();
        let mut winograd_s = [0.0; 2];
        for ((weights, scratch), seconds) in winograd_variants.iter_mut().zip(winograd_s.iter_mut())
        {
            settle(&input);
            let t = Instant::now();
            winograd::conv2d_winograd(
                &geom,
                &input,
                weights,
                &epilogue,
                &mut output,
                scratch,
                threads,
            );
            *seconds = t.elapsed().as_secs_f64();
        }
        std::hint::black_box(&output);
        if round == 0 {
            continue;
        }
        for (kept, seconds) in samples
            .iter_mut()
            .zip([direct_s, winograd_s[0], winograd_s[1]])
        {
            kept.push(seconds);
        }
        if round >= MIN_ROUNDS && start.elapsed().as_secs_f64() > BUDGET_S {
            break;
        }
    }
    let rounds = samples[0].len();
    let [direct_s, winograd_f2_s, winograd_f4_s] = samples.map(|mut kept| {
        kept.sort_by(f64::total_cmp);
        kept[kept.len() / 2]
    });
    debug_assert_eq!(WinogradTile::ALL, [WinogradTile::F2, WinogradTile::F4]);
    Some(MeasuredVariants {
        direct_s,
        winograd_f2_s,
        winograd_f4_s,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(channels: usize, out_channels: usize, side: usize) -> ConvShape {
        ConvShape::three_by_three(1, channels, out_channels, side, side)
    }

    /// A small shape gets three positive medians over at least `MIN_ROUNDS` calls each, a
    /// shape already in the table is not timed again, and a strided one is never timed.
    #[test]
    fn fills_missing_shapes_once() {
        let mut table = MeasuredAlgorithms::default();
        let small = shape(64, 32, 16);
        assert_eq!(fill(&mut table, &[small], 1, 1 << 20), 1);
        let times = *table.get(&small, 1).expect("timed");
        assert!(times.rounds >= MIN_ROUNDS);
        for seconds in [times.direct_s, times.winograd_f2_s, times.winograd_f4_s] {
            assert!(seconds > 0.0 && seconds < 1.0, "{times:?}");
        }
        assert_eq!(fill(&mut table, &[small], 1, 1 << 20), 0);
        assert_eq!(table.get(&small, 1), Some(&times));
        let mut strided = shape(64, 32, 16);
        strided.strides = (2, 2);
        let mut evict = vec![0u8; 1 << 20];
        assert!(measure(&strided, 1, &mut evict).is_none());
        let mut huge = shape(4096, 4096, 4096);
        huge.batch = 64;
        assert!(measure(&huge, 1, &mut evict).is_none());
        assert_eq!(evict_bytes(Some(32 << 20)), 64 << 20);
        assert_eq!(evict_bytes(Some(260 << 20)), 128 << 20);
        assert_eq!(evict_bytes(Some(1 << 20)), 16 << 20);
    }

    /// A table saved for one device and ISA loads back; for another device it is discarded.
    #[test]
    fn table_round_trips_for_its_device_only() {
        let dir = std::env::temp_dir().join(format!("roofline-conv-timing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("table.json");
        let mut table = load(&path, "local");
        assert!(table.entries.is_empty());
        table.entries.insert(
            MeasuredAlgorithms::key(&shape(64, 64, 56), 1),
            MeasuredVariants {
                direct_s: 1.3e-3,
                winograd_f2_s: 1.8e-3,
                winograd_f4_s: 1.5e-3,
                rounds: 7,
            },
        );
        save(&path, &table);
        assert_eq!(load(&path, "local"), table);
        assert!(load(&path, "other").entries.is_empty());
        // Times measured under other kernels are timed again.
        table.kernels_revision = KERNELS_REVISION - 1;
        save(&path, &table);
        assert!(load(&path, "local").entries.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
