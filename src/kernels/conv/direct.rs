//! Dense direct convolution (NCHW) without im2col, for convolutions whose im2col matrix is short
//! (few input channels times taps: a network's first convolution, SqueezeNet's 3×3 expands on
//! 16-64 channels, ResNet's 64-256-channel 3×3 layers).
//!
//! The input planes are copied once into the zero-padded phase planes of the depthwise kernel
//! (`depthwise::PhaseLayout`): there, output `(y, x)` reads tap `(ky, kx)` of channel `c` at the
//! flattened grid index `y · phase_cols + x` plus a constant offset, whatever the stride,
//! dilation or padding, so a run of consecutive grid indices is one unaligned vector load per
//! tap. A register tile holds `CO` output channels × `NV` vectors of grid indices; each (channel,
//! tap) step loads `NV` input vectors, broadcasts `CO` weights and issues `CO × NV` FMAs (24 of
//! them for 11 loads on AVX-512), with no packing of the input at all: the im2col + GEMM path
//! packs every im2col element once per convolution, which on a K of 27-576 costs about as much
//! as a third of the multiply-adds, and its microkernel's 12-row tiles waste a tenth of a
//! 64-channel output. The grid's columns past `out_w` (the kernel's reach less the padding
//! that neighbouring rows share, `PhaseLayout::compact`: 1 of 56 for a 3×3 on a 55-wide plane)
//! are computed and dropped when a tile is written out with its bias, residual and activation.
//!
//! Work is split over super-tiles of grid indices (outer) and channel blocks (inner): a
//! super-tile's input stays in L2 while every channel block reads it, and each block writes
//! its output planes in long runs.

use super::depthwise::{fill_phases, write_row, PhaseLayout};
use super::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::simd::Vf32;
use crate::kernels::gemm::Isa;
use crate::kernels::parallel::{parallel_for, threads_for_flops, SendPtr};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// Register tile of the AVX-512 kernel: output channels × vectors of 16 grid indices.
const AVX512_TILE: (usize, usize) = (8, 3);
/// Register tile of the AVX2 kernel (16 registers: 12 accumulators, 2 inputs, 1 weight, one
/// spare). The 4×3 tile used all sixteen and spilled: 1.2-1.8× the 6×2 tile's time on Zen 1.
const AVX2_TILE: (usize, usize) = (6, 2);
/// Floats of one tile's results staged before write-out: the larger tile of the two ISAs.
const STAGED_FLOATS: usize = AVX512_TILE.0 * AVX512_TILE.1 * 16;

/// `(channels, vectors, lanes)` of the register tile on `isa`, if it has a direct kernel.
fn tile_of(isa: Isa) -> Option<(usize, usize, usize)> {
    match isa {
        Isa::Avx512 => Some((AVX512_TILE.0, AVX512_TILE.1, 16)),
        Isa::Avx2Fma => Some((AVX2_TILE.0, AVX2_TILE.1, 8)),
        Isa::Scalar => None,
    }
}

/// Whether the direct kernel runs this convolution on `isa`: dense (not depthwise), a plane of
/// at least [`MIN_PIXELS`] outputs, and either a kernel wider than 1×1 with an im2col column of
/// at most [`MAX_TAPS`] or a narrow stride-1 1×1 read in place ([`narrow_pointwise`]).
///
/// Read off `cargo bench --bench direct_conv` (direct ÷ im2col + GEMM, same run, Zen 5, 1 and 2
/// threads): the direct kernel led on every 3×3, 5×5, 7×7 and 11×11 shape up to K = 1152 by
/// 0.58-0.92× (first convolutions 0.58-0.82, SqueezeNet's 55² and 27² expands 0.84-0.91, ResNet's
/// 64-channel 3×3 0.77-0.82), tied on 13² planes (1.00-1.04: a fifth of the grid is the
/// kernel's reach and the partial last tile) and from K ≈ 2300 on (0.84-1.07); it lost on
/// strided 1×1 convolutions (1.13-1.33: their phase planes copy four times what the one tap
/// reads) and on 7² planes with K = 4608 (1.05-1.07).
///
/// On AVX2 (measured on Zen 1, whose 256-bit operations run as two 128-bit halves, 1 thread)
/// the 6×2 tile led on every stride-1 3×3 and 5×5 shape (0.74-0.99×) and on the image stems
/// (3 input channels, strides 2 and 4: 0.70-0.95×), but lost on strided 3×3 layers with 16-256
/// input channels (1.10-1.33×) and on the narrow 1×1 layers (1.01-1.24×): those stay on the
/// GEMM there ([`avx2_takes`]). Once the GEMM's microkernel finished whole tiles in registers
/// (session 41, same machine) the 3×3 stride-2 stems turned too: direct ÷ GEMM 1.17 (3→32 on
/// 224², MobileNetV2), 1.23 (3→64, SqueezeNet), 1.00 (3→16 on 640², YOLOv8n), while the 7×7
/// and 11×11 stems stayed direct (0.96, 0.73): with 9 taps per channel the phase-plane copy and
/// the write-out weigh more than the im2col packing the direct kernel saves.
pub fn applies(isa: Isa, geom: &Conv2d) -> bool {
    tile_of(isa).is_some() && applies_to_geometry(geom) && (isa != Isa::Avx2Fma || avx2_takes(geom))
}

/// The AVX2 part of [`applies`]: stride 1, or a strided stem whose window has more than 9 taps
/// (`kernel_h · kernel_w > 9`) on at most [`AVX2_MAX_STRIDED_IN`] input channels per group; no
/// in-place 1×1 and no 1-D window of 2 or 3 taps.
///
/// A 1-D window of 3 (`cargo bench --bench direct_conv`, Zen 1, 1 thread: 128→128 over 7500
/// samples, 64→64 over 2000) lost to the GEMM at every dilation, 1.07-1.19× undilated, 1.28×
/// at dilation 64 and 1.85× at 2048: three taps per channel give the tile too few FMAs per
/// row of loads, and taps farther apart than the tile is wide read three separate line runs
/// per channel, 48 KB per tile for 128 channels, past the L1.
fn avx2_takes(geom: &Conv2d) -> bool {
    let strided = geom.stride_h > 1 || geom.stride_w > 1;
    let taps = geom.kernel_h * geom.kernel_w;
    let stem = geom.in_channels / geom.group.max(1) <= AVX2_MAX_STRIDED_IN && taps > 9;
    let short_row_window = geom.in_h == 1 && geom.kernel_h == 1 && (2..=3).contains(&taps);
    !narrow_pointwise(geom) && !short_row_window && (!strided || stem)
}

/// Most input channels per group of a strided convolution the AVX2 direct kernel takes.
const AVX2_MAX_STRIDED_IN: usize = 4;

/// The ISA-independent part of [`applies`].
pub(super) fn applies_to_geometry(geom: &Conv2d) -> bool {
    let taps = geom.in_channels / geom.group.max(1) * geom.kernel_h * geom.kernel_w;
    let wide_kernel = geom.kernel_h * geom.kernel_w > 1 && taps <= MAX_TAPS;
    !geom.is_depthwise()
        && (wide_kernel || narrow_pointwise(geom))
        && geom.out_h * geom.out_w >= MIN_PIXELS
}

/// A 1×1 convolution the direct kernel runs in place ([`reads_input_in_place`]): at most
/// [`MAX_POINTWISE_OUT`] output channels per group from at least [`MIN_POINTWISE_IN`] input
/// channels. There the GEMM packs every input element to multiply it by 16-32 weights, and
/// the direct kernel, which packs nothing, led in three alternated runs (`cargo bench --bench
/// direct_conv`, Zen 5, 1 and 2 threads) on MobileNetV2's projections: 96→24 and 144→24 on
/// 56², 144→32 and 192→32 on 28² at 0.77-0.97× the GEMM's time. With more output channels
/// the packing pays for itself and the direct kernel tied or lost (ResNet's 64→256 and
/// 128→512 0.91-1.24×, 256→64 1.04-1.21×), and with 16-32 input channels it was mixed
/// (MobileNetV2's 32→16 on 112² 0.83-1.07×; its expansions 16→96, 24→144 and 32→192 lost,
/// 1.01-1.34×).
fn narrow_pointwise(geom: &Conv2d) -> bool {
    let group = geom.group.max(1);
    reads_input_in_place(geom)
        && geom.out_channels / group <= MAX_POINTWISE_OUT
        && geom.in_channels / group >= MIN_POINTWISE_IN
}

/// Most output channels per group of a 1×1 convolution the direct kernel takes.
const MAX_POINTWISE_OUT: usize = 32;
/// Fewest input channels per group of a 1×1 convolution the direct kernel takes.
const MIN_POINTWISE_IN: usize = 64;

/// Whether the kernel reads the input planes where they are, without phase planes: a
/// pointwise convolution ([`Conv2d::is_pointwise`]: 1×1, stride 1, no padding), whose one
/// phase plane would be the input plane itself. On planes that are not whole vectors the last
/// tile reads a copy of its columns instead ([`needs_tail_copy`]).
fn reads_input_in_place(geom: &Conv2d) -> bool {
    geom.is_pointwise()
}

/// Whether an in-place convolution's last tile reads a copy of its input columns: its last
/// vector would reach past the plane, and past the input's end on the last channel.
fn needs_tail_copy(geom: &Conv2d) -> bool {
    geom.is_pointwise() && !(geom.in_h * geom.in_w).is_multiple_of(WIDEST_LANES)
}

/// Floats in the widest vector of either ISA.
const WIDEST_LANES: usize = 16;

/// Longest im2col column (input channels × taps) the direct kernel takes (see [`applies`]).
const MAX_TAPS: usize = 2400;
/// Fewest output pixels per plane the direct kernel takes (see [`applies`]).
const MIN_PIXELS: usize = 64;

/// Floats of scratch one call needs: the phase planes of one image's group of input channels,
/// plus the slack the last grid tile reads past them (its dropped lanes); in place, the copy of
/// the last tile's columns when it needs one.
pub(super) fn scratch_len(geom: &Conv2d) -> usize {
    if !applies_to_geometry(geom) {
        return 0;
    }
    phases_scratch_len(geom)
}

/// [`scratch_len`] whether or not the rule picks the direct kernel.
fn phases_scratch_len(geom: &Conv2d) -> usize {
    let group_in = geom.in_channels / geom.group;
    if reads_input_in_place(geom) {
        return if needs_tail_copy(geom) {
            group_in * slack()
        } else {
            0
        };
    }
    // The executor asks for the scratch size on every call: arithmetic only, no tap lists.
    let (_, _, phase_len) = PhaseLayout::compact_extent(geom);
    group_in * geom.stride_h * geom.stride_w * phase_len + slack()
}

/// Floats past the last channel's phase planes that a tile may read: the farthest read is below
/// `channels × phases_len + tile width` (each channel's planes end with the kernel's reach past
/// the last grid row), so the widest tile of any ISA is enough.
fn slack() -> usize {
    (AVX512_TILE.1 * 16).max(AVX2_TILE.1 * 8)
}

/// Weights reordered for the register tile: per group and block of `co_block` output channels,
/// per input channel and tap, the block's `co_block` weights side by side (zero past the last
/// channel), so each step broadcasts consecutive floats.
#[derive(Clone)]
pub struct DirectWeights {
    isa: Isa,
    co_block: usize,
    blocks_per_group: usize,
    /// Input channels of a group × kernel taps.
    steps: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for DirectWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DirectWeights({}, {} channels per block, {} floats)",
            self.isa.name(),
            self.co_block,
            self.data.len()
        )
    }
}

impl DirectWeights {
    /// `None` when `isa` has no direct kernel or the geometry does not take it.
    pub fn new(isa: Isa, geom: &Conv2d, weights: &[f32]) -> Option<DirectWeights> {
        if !applies(isa, geom) {
            return None;
        }
        Self::pack(isa, geom, weights)
    }

    /// The reordering alone, whether or not the rule picks the direct kernel (`None` only
    /// when `isa` has none): the kernel runs any dense geometry.
    fn pack(isa: Isa, geom: &Conv2d, weights: &[f32]) -> Option<DirectWeights> {
        let (co_block, _, _) = tile_of(isa)?;
        let group_out = geom.out_channels / geom.group;
        let steps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
        let blocks_per_group = group_out.div_ceil(co_block);
        let mut data = vec![0.0; geom.group * blocks_per_group * steps * co_block];
        for g in 0..geom.group {
            for o in 0..group_out {
                let (block, lane) = (o / co_block, o % co_block);
                let filter = &weights[(g * group_out + o) * steps..(g * group_out + o + 1) * steps];
                let base = (g * blocks_per_group + block) * steps * co_block;
                for (step, &w) in filter.iter().enumerate() {
                    data[base + step * co_block + lane] = w;
                }
            }
        }
        Some(DirectWeights {
            isa,
            co_block,
            blocks_per_group,
            steps,
            data,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// Everything the workers of one (image, group) share.
struct Job<'a> {
    geom: &'a Conv2d,
    layout: &'a PhaseLayout,
    /// The group's phase planes, `phases_len` floats per input channel.
    phases: *const f32,
    phases_len: usize,
    /// In place on a plane of partial vectors: the last tile's first grid index and its
    /// columns copied per input channel (`tile_width` floats each, zeros past the plane).
    tail: Option<(usize, *const f32)>,
    weights: &'a [f32],
    /// Output channels of this group that exist (the last block may be partial).
    group_out: usize,
    blocks: usize,
    steps: usize,
    bias: Option<&'a [f32]>,
    /// The group's first output plane, and its residual.
    output: SendPtr<f32>,
    residual: Option<*const f32>,
    activation: &'a crate::kernels::gemm::Activation,
    /// Grid indices per tile (the register tile's vectors × lanes).
    tile_width: usize,
    /// Tiles per super-tile (see [`Job::super_tiles`]).
    tiles_per_super: usize,
    /// Offsets (from a tile's first grid index in a channel's phase planes) of the line runs
    /// the tile reads: one per run of taps within a cache line of each other (a 3×3 stride-1
    /// layer: one per kernel row), each covering the tile's width plus a line.
    prefetch_runs: &'a [usize],
}

/// Tiles ahead that [`tile`] prefetches its input. The phase planes are written whole before
/// the kernel runs; when they and the layer's input pass the last-level cache's share (96
/// channels × 160² on Zen 5: 20 MB), the first channel block of each super-tile met its rows
/// in DRAM, 96 streams at once that the hardware prefetcher did not follow: PP-OCRv4 det's
/// 96→24 layers ran at 130-150 GFLOP/s against 190-200 on planes of 80-120².
const PREFETCH_TILES: usize = 2;
/// Fewest bytes of a group's phase planes that [`tile`] prefetches: on planes that fit an L2
/// the prefetches only take load slots (ResNet's 256×14² and 128×56² stride-2 layers measured
/// 5-10% slower with them, one thread).
const PREFETCH_MIN_BYTES: usize = 2 << 20;
/// Floats per 64-byte cache line.
const LINE_FLOATS: usize = 16;

/// The distinct line runs of `tap_offsets` (see [`Job::prefetch_runs`]).
fn prefetch_runs(tap_offsets: &[usize]) -> Vec<usize> {
    let mut offsets = tap_offsets.to_vec();
    offsets.sort_unstable();
    let mut runs: Vec<usize> = Vec::new();
    for offset in offsets {
        if runs.last().is_none_or(|&last| offset >= last + LINE_FLOATS) {
            runs.push(offset);
        }
    }
    runs
}

/// Bytes of phase planes a super-tile's input may span: an L2's share, so every channel
/// block of the super-tile finds its input there.
const SUPER_TILE_INPUT_BYTES: usize = 192 << 10;

impl Job<'_> {
    /// Splits the grid's `tiles` into super-tiles and returns how many; each unit of work is
    /// one super-tile for one channel block, its tiles in order. Within a unit a block's
    /// weights stay in L1 and each of its output planes is written as one long run; the
    /// tile-by-tile order of every block (64 output planes written 48 floats at a time)
    /// measured 1.5× slower inside a model than alone on a 64-channel first convolution, its
    /// partial lines fetched back from memory. The input a super-tile reads is bounded so
    /// the blocks re-read it from L2, with at least four units per thread.
    fn super_tiles(&mut self, tiles: usize, threads: usize) -> usize {
        let width = self.tile_width;
        let per_index = 4 * self.steps / self.layout.tap_offsets.len().max(1)
            * self.geom.stride_h
            * self.geom.stride_w;
        let mut per_super = (SUPER_TILE_INPUT_BYTES / per_index.max(1) / width).clamp(1, tiles);
        if threads > 1 {
            while per_super > 1 && tiles.div_ceil(per_super) * self.blocks < 4 * threads {
                per_super = per_super.div_ceil(2);
            }
        }
        self.tiles_per_super = per_super;
        tiles.div_ceil(per_super)
    }
}

// SAFETY: the raw pointers are read-only (phases, residual) or written at disjoint planes and
// grid runs per task (output); the job lives for the `parallel_for` that shares it.
unsafe impl Sync for Job<'_> {}

/// Runs the convolution with the direct kernel. `weights` come from [`DirectWeights::new`] for
/// this geometry; `scratch` holds at least [`scratch_len`] floats.
///
/// # Panics
/// When a slice is shorter than the geometry says, or the weights were packed for an ISA this
/// CPU lacks (caller bugs).
pub fn direct_conv2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &DirectWeights,
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    assert!(
        weights.isa.is_available(),
        "direct weights for a missing ISA"
    );
    let (co_block, nv, lanes) = tile_of(weights.isa).expect("direct weights imply a tile");
    let layout = PhaseLayout::compact(geom);
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let in_plane = geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    let phases_len = layout.phases_len(geom);
    let in_place = reads_input_in_place(geom);
    let tail_copy = needs_tail_copy(geom);
    debug_assert!(!in_place || phases_len == in_plane);
    let needed = phases_scratch_len(geom);
    assert!(
        scratch.len() >= needed,
        "direct convolution scratch too short"
    );
    assert!(input.len() >= geom.batch * geom.in_channels * in_plane);
    assert!(output.len() >= geom.batch * geom.out_channels * out_plane);
    assert!(epilogue
        .residual
        .is_none_or(|r| r.len() >= geom.batch * geom.out_channels * out_plane));
    assert!(epilogue.bias.is_none_or(|b| b.len() >= geom.out_channels));
    assert_eq!(weights.steps, group_in * geom.kernel_h * geom.kernel_w);
    let scratch = &mut scratch[..needed];
    if !in_place {
        // The slack past the last plane is read by dropped lanes only; zero it so they read
        // numbers.
        scratch[group_in * phases_len..].fill(0.0);
    }
    let grid = geom.out_h * layout.phase_cols;
    let tile_width = nv * lanes;
    let tiles = grid.div_ceil(tile_width);
    let last_q0 = (tiles - 1) * tile_width;
    let blocks = weights.blocks_per_group;
    let prefetch = if group_in * phases_len * 4 >= PREFETCH_MIN_BYTES {
        prefetch_runs(&layout.tap_offsets)
    } else {
        Vec::new()
    };
    let out_base = SendPtr(output.as_mut_ptr());
    // One (image, group): its phase planes in `scratch`, its tiles over `threads`.
    let run_group = |n: usize, g: usize, scratch: &mut [f32], threads: usize| {
        // Another thread pays for waking only past ~15 µs of FMAs each (the GEMM driver's
        // rule): a 16→32 3×3 layer on 16² (2.4 MFLOP) took 17 µs on two threads against 15 µs
        // on one.
        let compute_threads = threads_for_flops(
            threads,
            2.0 * (group_out * out_plane * weights.steps) as f64,
        );
        let first_in = (n * geom.in_channels + g * group_in) * in_plane;
        let image = &input[first_in..first_in + group_in * in_plane];
        let phases = if in_place {
            if tail_copy {
                copy_tail(image, in_plane, last_q0, tile_width, scratch);
            }
            image.as_ptr()
        } else {
            fill_group(geom, &layout, image, scratch, threads);
            scratch.as_ptr()
        };
        let first_out = (n * geom.out_channels + g * group_out) * out_plane;
        let mut job = Job {
            geom,
            layout: &layout,
            phases,
            phases_len,
            tail: tail_copy.then_some((last_q0, scratch.as_ptr())),
            weights: &weights.data[g * blocks * weights.steps * co_block
                ..(g + 1) * blocks * weights.steps * co_block],
            group_out,
            blocks,
            steps: weights.steps,
            bias: epilogue
                .bias
                .map(|b| &b[g * group_out..(g + 1) * group_out]),
            // SAFETY (of the writes through it): (image, group) pairs write disjoint output
            // planes, inside `output` (asserted above).
            output: SendPtr(out_base.get().wrapping_add(first_out)),
            residual: epilogue.residual.map(|r| r[first_out..].as_ptr()),
            activation: &epilogue.activation,
            tile_width,
            tiles_per_super: 1,
            prefetch_runs: &prefetch,
        };
        // Units of (super-tile, channel block), in contiguous runs per task; several tasks
        // per thread so a slow core does not hold the others up.
        let work = job.super_tiles(tiles, compute_threads) * blocks;
        let tasks = if compute_threads <= 1 {
            1
        } else {
            (compute_threads * 4).min(work)
        };
        let per_task = work.div_ceil(tasks);
        let isa = weights.isa;
        parallel_for(compute_threads, work.div_ceil(per_task), |task| {
            let range = task * per_task..((task + 1) * per_task).min(work);
            // SAFETY: `isa` is available (asserted); the scratch, weights and output were
            // checked against the geometry; each task writes its own tiles' outputs.
            unsafe {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => run_avx512(&job, range),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2Fma => run_avx2(&job, range),
                    _ => unreachable!("no direct kernel for {isa:?}"),
                }
            }
        });
    };
    // Groups side by side, one thread each, when they share the threads evenly or are many:
    // a ResNeXt 32-group 3×3 layer's groups are 0.9 MFLOP each, under the split threshold, so
    // run one after another with their tiles split they stayed on one thread (the calibration
    // grid's 32-group points took as long on two threads as on one). Each takes its phase
    // planes from a scratch of its own thread.
    let pairs = geom.batch * geom.group;
    if geom.group > 1 && threads > 1 && (pairs.is_multiple_of(threads) || pairs >= 4 * threads) {
        parallel_for(threads, pairs, |pair| {
            let mut own = GROUP_SCRATCH.with(|cell| cell.take());
            if own.len() < needed {
                own.resize(needed, 0.0);
            }
            let own_scratch = &mut own[..needed];
            if !in_place {
                own_scratch[group_in * phases_len..].fill(0.0);
            }
            run_group(pair / geom.group, pair % geom.group, own_scratch, 1);
            GROUP_SCRATCH.with(|cell| cell.replace(own));
        });
        return;
    }
    for n in 0..geom.batch {
        for g in 0..geom.group {
            run_group(n, g, scratch, threads);
        }
    }
}

thread_local! {
    /// Phase planes of a group run as one task of many (reused across calls).
    static GROUP_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copies the columns `first..` of each channel plane of `image` into `width`-float rows of
/// `tail`, zeros after them: what the last tile of an in-place convolution reads.
fn copy_tail(image: &[f32], in_plane: usize, first: usize, width: usize, tail: &mut [f32]) {
    for (plane, row) in image
        .chunks_exact(in_plane)
        .zip(tail.chunks_exact_mut(width))
    {
        let columns = &plane[first..];
        row[..columns.len()].copy_from_slice(columns);
        row[columns.len()..].fill(0.0);
    }
}

/// Copies a group's input planes into their phase planes, channels split across the threads.
fn fill_group(
    geom: &Conv2d,
    layout: &PhaseLayout,
    image: &[f32],
    scratch: &mut [f32],
    threads: usize,
) {
    let channels = geom.in_channels / geom.group;
    let in_plane = geom.in_h * geom.in_w;
    let phases_len = layout.phases_len(geom);
    // Splitting pays only when the copy is long enough to outweigh waking a worker.
    let threads = if channels * in_plane < 1 << 15 {
        1
    } else {
        threads
    };
    let tasks = threads.min(channels).max(1);
    let per_task = channels.div_ceil(tasks);
    let dst = SendPtr(scratch.as_mut_ptr());
    parallel_for(threads, tasks, |task| {
        let (c0, c1) = (task * per_task, ((task + 1) * per_task).min(channels));
        if c0 >= c1 {
            return;
        }
        // SAFETY: task `task` writes only the phase planes of channels c0..c1, inside the
        // scratch (`channels × phases_len` floats checked by the caller).
        let phases = unsafe {
            std::slice::from_raw_parts_mut(dst.get().add(c0 * phases_len), (c1 - c0) * phases_len)
        };
        // Padding and slack must read as zeros; the fill then writes only the interior.
        phases.fill(0.0);
        for (c, planes) in (c0..c1).zip(phases.chunks_exact_mut(phases_len)) {
            let plane = &image[c * in_plane..(c + 1) * in_plane];
            // SAFETY: `planes` holds one channel's phase planes for `layout`.
            unsafe { fill_phases_best(geom, layout, plane, planes) };
        }
    });
}

/// [`fill_phases`] with the widest vectors this CPU has.
unsafe fn fill_phases_best(geom: &Conv2d, layout: &PhaseLayout, plane: &[f32], phases: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if Isa::Avx512.is_available() {
            return fill_avx512(geom, layout, plane, phases);
        }
        if Isa::Avx2Fma.is_available() {
            return fill_avx2(geom, layout, plane, phases);
        }
    }
    fill_phases::<f32>(geom, layout, plane, phases)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_avx512(geom: &Conv2d, layout: &PhaseLayout, plane: &[f32], phases: &mut [f32]) {
    fill_phases::<__m512>(geom, layout, plane, phases)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill_avx2(geom: &Conv2d, layout: &PhaseLayout, plane: &[f32], phases: &mut [f32]) {
    fill_phases::<__m256>(geom, layout, plane, phases)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(job: &Job, work: std::ops::Range<usize>) {
    run::<__m512, { AVX512_TILE.0 }, { AVX512_TILE.1 }>(job, work)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(job: &Job, work: std::ops::Range<usize>) {
    run::<__m256, { AVX2_TILE.0 }, { AVX2_TILE.1 }>(job, work)
}

/// Computes the (super-tile, channel block) units `work`, each tile of the super-tile in order,
/// and writes them out.
#[inline(always)]
unsafe fn run<V: Vf32, const CO: usize, const NV: usize>(job: &Job, work: std::ops::Range<usize>) {
    let geom = job.geom;
    let layout = job.layout;
    let cols = layout.phase_cols;
    let grid = geom.out_h * cols;
    let width = NV * V::LANES;
    let out_plane = geom.out_h * geom.out_w;
    // One tile's results before they are written out: CO rows of `width` grid indices.
    let mut staged = [0.0f32; STAGED_FLOATS];
    debug_assert!(CO * width <= staged.len());
    // Runs of the current tile inside one output row: (grid offset in the tile, output
    // offset in the plane, length).
    let mut runs: Vec<(usize, usize, usize)> = Vec::with_capacity(width / geom.out_w.max(1) + 2);
    let tiles = grid.div_ceil(width);
    for item in work {
        let (super_tile, block) = (item / job.blocks, item % job.blocks);
        let first_tile = super_tile * job.tiles_per_super;
        for tile_index in first_tile..(first_tile + job.tiles_per_super).min(tiles) {
            let q0 = tile_index * width;
            runs.clear();
            let end = (q0 + width).min(grid);
            let mut q = q0;
            while q < end {
                let (y, x) = (q / cols, q % cols);
                if x >= geom.out_w {
                    q = (y + 1) * cols;
                    continue;
                }
                let len = (geom.out_w - x).min(end - q);
                runs.push((q - q0, y * geom.out_w + x, len));
                q += len;
            }
            let first_channel = block * CO;
            let live = CO.min(job.group_out - first_channel);
            // The last tile computes only the vectors that reach into the grid (a 13×13 plane's
            // grid of 195 indices is four full tiles and one vector, not five tiles).
            let vectors = (grid - q0).div_ceil(V::LANES).min(NV);
            let staged_at = staged.as_mut_ptr();
            match vectors {
                1 => tile::<V, CO, 1>(job, block, q0, live, staged_at, width),
                2 => tile::<V, CO, 2>(job, block, q0, live, staged_at, width),
                _ => tile::<V, CO, NV>(job, block, q0, live, staged_at, width),
            }
            for o in 0..live {
                let plane = (first_channel + o) * out_plane;
                for &(at, out_at, len) in &runs {
                    write_row::<V>(
                        staged.as_ptr().add(o * width + at),
                        job.output.get().add(plane + out_at),
                        len,
                        job.residual.map(|r| r.add(plane + out_at)),
                        job.activation,
                    );
                }
            }
        }
    }
}

/// Channel block `block` × `N` vectors of grid indices from `q0`: the sums over every input
/// channel and tap, plus the bias, stored to `staged` (row `o` at `o · width`) for the `live`
/// channels that exist.
#[inline(always)]
unsafe fn tile<V: Vf32, const CO: usize, const N: usize>(
    job: &Job,
    block: usize,
    q0: usize,
    live: usize,
    staged: *mut f32,
    width: usize,
) {
    let taps = &job.layout.tap_offsets;
    // The last tile of an in-place convolution on partial vectors reads its copied columns.
    let (phases, phases_len, q0) = match job.tail {
        Some((last_q0, tail)) if q0 == last_q0 => (tail, job.tile_width, 0),
        _ => (job.phases, job.phases_len, q0),
    };
    let channels = job.steps / taps.len();
    let mut acc = [[V::zero(); N]; CO];
    let mut w = job.weights.as_ptr().add(block * job.steps * CO);
    for c in 0..channels {
        let base = phases.add(c * phases_len + q0);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // Addresses past the scratch are possible near the grid's end; a prefetch never
            // faults.
            let ahead = base.wrapping_add(PREFETCH_TILES * width);
            for &run in job.prefetch_runs {
                let mut line = 0;
                while line <= N * V::LANES {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(run + line) as *const i8);
                    line += LINE_FLOATS;
                }
            }
        }
        for &offset in taps {
            let src = base.add(offset);
            let mut x = [V::zero(); N];
            for (v, xv) in x.iter_mut().enumerate() {
                *xv = V::load(src.add(v * V::LANES));
            }
            for row in acc.iter_mut() {
                let wv = V::splat(*w);
                w = w.add(1);
                for (a, &xv) in row.iter_mut().zip(&x) {
                    *a = V::fma(xv, wv, *a);
                }
            }
        }
    }
    let first_channel = block * CO;
    for (o, row) in acc.iter().enumerate().take(live) {
        let bias = V::splat(job.bias.map_or(0.0, |b| b[first_channel + o]));
        for (v, &a) in row.iter().enumerate() {
            V::store(staged.add(o * width + v * V::LANES), V::add(a, bias));
        }
    }
}

#[cfg(test)]
mod tests;
