//! 2-D convolution (NCHW): 1×1 stride-1 convolutions are plain GEMMs on the input, depthwise
//! convolutions run the direct kernel of `depthwise.rs`, dense convolutions with a short im2col
//! column (up to 2400 input channels × taps, planes of 64+ outputs, kernels wider than 1×1) run
//! the direct kernel of `direct.rs` on AVX2 and AVX-512, and everything else goes through im2col
//! + GEMM per group. The GEMM epilogue carries bias, residual and activation.
//!
//! Children: `geometry` (the `Conv2d`/`ConvEpilogue` leaf both kernels build on, re-exported
//! here), `depthwise` (the direct depthwise kernel, which names only `geometry`), `direct` (the
//! dense direct kernel, built on the depthwise kernel's phase planes), `winograd`, `transpose`
//! (ConvTranspose) and, in test builds, `reference` (the f64 reference convolution).

pub mod depthwise;
pub mod direct;
mod geometry;
#[cfg(test)]
mod reference;
mod transpose;
pub mod winograd;

pub use geometry::{pixel_major_fits, Conv2d, ConvEpilogue};
pub use transpose::conv_transpose2d;

/// Revision of the convolution kernels' speed: saved timings of them (the algorithm latency
/// table of `exec::conv_timing`) measured under another revision are timed again. Bump it when
/// a change moves a kernel's time. 1: the direct kernel prefetches large phase planes (it had
/// run 1.2-1.8× slower on 96×160² inputs); 2: its stride-1 rows share their padding zeros
/// (0.89-0.91× on 13² planes); 3: the AVX2 direct kernel's 6×2 tile (the 4×3 one spilled:
/// 0.55-0.85× of its time on Zen 1) and AVX2's strided layers on the GEMM; 4: im2col of output
/// planes up to 256 pixels through gather tables, and the GEMM's split of tile counts that the
/// threads cannot share evenly (7² layers 0.8-0.9× their time).
pub const KERNELS_REVISION: u32 = 4;
#[cfg(test)]
pub(crate) use reference::reference_conv;

use super::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use super::parallel::{parallel_for, SendPtr};
use super::simd::multiversion;
use geometry::{gemm_layout, GemmLayout};

/// Writes `yt` (`pixels × channels`, row-major) transposed into `out` (`channels × pixels`),
/// adding `residual` (same layout as `out`) and applying `activation`, split over channel
/// blocks across `threads` workers.
fn transpose_epilogue(
    yt: &[f32],
    pixels: usize,
    channels: usize,
    out: &mut [f32],
    residual: Option<&[f32]>,
    activation: Activation,
    threads: usize,
) {
    const BLOCK: usize = 16;
    assert!(yt.len() >= pixels * channels && out.len() >= pixels * channels);
    let blocks = channels.div_ceil(BLOCK);
    let tasks = threads.min(blocks).max(1);
    let per_task = blocks.div_ceil(tasks);
    let dst = SendPtr(out.as_mut_ptr());
    parallel_for(threads, tasks, |task| {
        let c0 = (task * per_task * BLOCK).min(channels);
        let c1 = ((task + 1) * per_task * BLOCK).min(channels);
        if c0 >= c1 {
            return;
        }
        // SAFETY: task `task` writes only the rows of channels c0..c1 of `out`.
        let rows = unsafe {
            std::slice::from_raw_parts_mut(dst.get().add(c0 * pixels), (c1 - c0) * pixels)
        };
        let mut cb = c0;
        while cb < c1 {
            let ce = (cb + BLOCK).min(c1);
            // Pixel-outer so each yt row segment is read once; the block's output rows
            // (16 × pixels floats) stay in L1.
            for (p, src) in yt.chunks_exact(channels).take(pixels).enumerate() {
                for c in cb..ce {
                    rows[(c - c0) * pixels + p] = src[c];
                }
            }
            let block = &mut rows[(cb - c0) * pixels..(ce - c0) * pixels];
            if let Some(res) = residual {
                for (o, r) in block.iter_mut().zip(&res[cb * pixels..ce * pixels]) {
                    *o += r;
                }
            }
            if activation != Activation::None {
                gemm::apply_activation(&activation, block);
            }
            cb = ce;
        }
    });
}

/// Output columns `x_first..x_last` whose tap `kx` reads inside the input row (the others read
/// padding).
fn valid_columns(geom: &Conv2d, kx: usize) -> (usize, usize) {
    let sw = geom.stride_w as isize;
    let x_offset = (kx * geom.dilation_w) as isize - geom.pad_left as isize;
    let first = ((-x_offset).max(0) + sw - 1) / sw;
    let last = ((geom.in_w as isize - x_offset + sw - 1) / sw).clamp(0, geom.out_w as isize);
    (first.min(last) as usize, last as usize)
}

/// One kernel tap and the output columns it reads inside the input row ([`valid_columns`]).
#[derive(Clone, Copy)]
struct Tap {
    ky: usize,
    kx: usize,
    valid: (usize, usize),
}

impl Tap {
    fn new(geom: &Conv2d, ky: usize, kx: usize) -> Tap {
        Tap {
            ky,
            kx,
            valid: valid_columns(geom, kx),
        }
    }
}

/// Output pixels `x0..x0 + dst.len()` of output row `oy` for `tap` of one input plane: the
/// in-bounds span gathered (a copy for stride 1, a vectorised deinterleave for stride 2),
/// padding as zeros.
#[inline(always)]
fn gather_row(geom: &Conv2d, plane: &[f32], oy: usize, tap: Tap, x0: usize, dst: &mut [f32]) {
    let Tap { ky, kx, valid } = tap;
    let iy = (oy * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
    if iy < 0 || iy >= geom.in_h as isize {
        dst.fill(0.0);
        return;
    }
    let src = &plane[iy as usize * geom.in_w..(iy as usize + 1) * geom.in_w];
    let x1 = x0 + dst.len();
    let first = valid.0.clamp(x0, x1);
    let last = valid.1.clamp(first, x1);
    dst[..first - x0].fill(0.0);
    dst[last - x0..].fill(0.0);
    if first == last {
        return;
    }
    let dst = &mut dst[first - x0..last - x0];
    let s0 = first * geom.stride_w + kx * geom.dilation_w - geom.pad_left;
    copy_strided(dst, &src[s0..], geom.stride_w);
}

/// `dst[i] = src[i · stride]`: a copy for stride 1, a vectorised deinterleave for stride 2.
#[inline(always)]
fn copy_strided(dst: &mut [f32], src: &[f32], stride: usize) {
    match stride {
        1 => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = *s;
            }
        }
        2 => {
            // Pairs, so the loop vectorises as a deinterleave; the last output's pair may end
            // past the source.
            let n = dst.len();
            let paired = if 2 * n <= src.len() {
                n
            } else {
                n.saturating_sub(1)
            };
            for (d, pair) in dst[..paired]
                .iter_mut()
                .zip(src[..2 * paired].chunks_exact(2))
            {
                *d = pair[0];
            }
            for (x, d) in dst.iter_mut().enumerate().skip(paired) {
                *d = src[2 * x];
            }
        }
        stride => {
            for (d, s) in dst.iter_mut().zip(src.iter().step_by(stride)) {
                *d = *s;
            }
        }
    }
}

/// Output planes of at most this many pixels take [`small_plane_im2col`].
const SMALL_PLANE_PIXELS: usize = 256;

/// Index tables of [`small_plane_im2col`]: per kernel tap, the input-plane index each output
/// pixel reads, or the plane size (where the staged plane holds a zero) for padding.
fn tap_gather_tables(geom: &Conv2d) -> Vec<u32> {
    let pixels = geom.out_h * geom.out_w;
    let in_plane = geom.in_h * geom.in_w;
    let mut tables = Vec::with_capacity(geom.kernel_h * geom.kernel_w * pixels);
    for ky in 0..geom.kernel_h {
        for kx in 0..geom.kernel_w {
            for oy in 0..geom.out_h {
                let iy =
                    (oy * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                for ox in 0..geom.out_w {
                    let ix = (ox * geom.stride_w + kx * geom.dilation_w) as isize
                        - geom.pad_left as isize;
                    let inside = (0..geom.in_h as isize).contains(&iy)
                        && (0..geom.in_w as isize).contains(&ix);
                    tables.push(if inside {
                        (iy as usize * geom.in_w + ix as usize) as u32
                    } else {
                        in_plane as u32
                    });
                }
            }
        }
    }
    tables
}

/// im2col of one group's planes onto small output planes (7×7, 14×14: Inception's and
/// ResNet's last stages; at most [`SMALL_PLANE_PIXELS`] pixels) by a gather through per-tap
/// index tables built once per call: the row-by-row path spent its time on per-row work there
/// (a 224→224 3×3 layer on 7²: im2col and the transpose 126 µs of 446, the GEMM 320). Float
/// only: the byte im2col's AVX-512 row copies (`qgemm::pack::im2col_u8`) beat a
/// byte-at-a-time gather (an int8 256→256 3×3 layer on 14² took 571-579 µs with them, 753-763
/// with the tables).
#[inline(always)]
fn small_plane_im2col(geom: &Conv2d, input: &[f32], out: &mut [f32]) {
    let in_plane = geom.in_h * geom.in_w;
    let channels = geom.in_channels / geom.group;
    let tables = tap_gather_tables(geom);
    debug_assert!(input.len() >= channels * in_plane && out.len() >= channels * tables.len());
    // One plane with a zero after it, so padding reads the zero and the gather has no branch.
    let mut staged = vec![0.0f32; in_plane + 1];
    let rows = out.chunks_exact_mut(tables.len());
    for (plane, rows) in input.chunks_exact(in_plane).take(channels).zip(rows) {
        staged[..in_plane].copy_from_slice(plane);
        for (dst, &index) in rows.iter_mut().zip(&tables) {
            *dst = staged[index as usize];
        }
    }
}

multiversion! {
    fn im2col(geom: &Conv2d, input: &[f32], out: &mut [f32]) {
        let (oh, ow) = (geom.out_h, geom.out_w);
        // The tables index the plane in u32 and chunk by plane and by taps × pixels.
        let in_plane = geom.in_h * geom.in_w;
        if (1..=SMALL_PLANE_PIXELS).contains(&(oh * ow)) && (1..u32::MAX as usize).contains(&in_plane) {
            small_plane_im2col(geom, input, out);
            return;
        }
        let channels = geom.in_channels / geom.group;
        let mut row = 0;
        for c in 0..channels {
            let plane = &input[c * geom.in_h * geom.in_w..(c + 1) * geom.in_h * geom.in_w];
            for ky in 0..geom.kernel_h {
                for kx in 0..geom.kernel_w {
                    let tap = Tap::new(geom, ky, kx);
                    let dst = &mut out[row * oh * ow..(row + 1) * oh * ow];
                    for (y, dst_row) in dst.chunks_exact_mut(ow).enumerate() {
                        gather_row(geom, plane, y, tap, 0, dst_row);
                    }
                    row += 1;
                }
            }
        }
    }
}

multiversion! {
    /// A block of one group's im2col matrix written straight into the GEMM's packed panels
    /// (`gemm::PackSource::pack` layout).
    fn pack_im2col(geom: &Conv2d, image: &[f32], block: PackBlock, dst: &mut [f32]) {
        let PackBlock { k0, klen, j0, wlen, w } = block;
        let ow = geom.out_w;
        let taps = geom.kernel_h * geom.kernel_w;
        let in_plane = geom.in_h * geom.in_w;
        // Runs of pixels inside one output row and one panel, (row, column, length, offset of
        // their first lane at kk = 0): the same for every k row.
        let mut runs = Vec::with_capacity(wlen / ow.min(w).max(1) + wlen / w + 2);
        let mut t = 0;
        while t < wlen {
            let (oy, ox) = ((j0 + t) / ow, (j0 + t) % ow);
            let lane = t % w;
            let len = (ow - ox).min(w - lane).min(wlen - t);
            runs.push((oy, ox, len, t / w * klen * w + lane));
            t += len;
        }
        // Per kernel tap, the runs resolved into copies and zero fills: (offset of the first
        // lane at kk = 0, source offset in the input plane or None for padding, length). Worked
        // out once per block, so the k rows only copy.
        let mut segments: Vec<(usize, Option<usize>, usize)> = Vec::with_capacity(taps * runs.len() * 2);
        let mut tap_start = Vec::with_capacity(taps + 1);
        for t in 0..taps {
            tap_start.push(segments.len());
            let (ky, kx) = (t / geom.kernel_w, t % geom.kernel_w);
            let (valid_first, valid_last) = valid_columns(geom, kx);
            for &(oy, ox, len, offset) in &runs {
                let iy = (oy * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                if iy < 0 || iy >= geom.in_h as isize {
                    segments.push((offset, None, len));
                    continue;
                }
                let first = valid_first.clamp(ox, ox + len);
                let last = valid_last.clamp(first, ox + len);
                if first > ox {
                    segments.push((offset, None, first - ox));
                }
                if last > first {
                    let src = iy as usize * geom.in_w + first * geom.stride_w + kx * geom.dilation_w
                        - geom.pad_left;
                    segments.push((offset + first - ox, Some(src), last - first));
                }
                if ox + len > last {
                    segments.push((offset + last - ox, None, ox + len - last));
                }
            }
        }
        tap_start.push(segments.len());
        let panels = wlen.div_ceil(w);
        let tail = panels * w - wlen;
        let (mut c, mut t) = (k0 / taps, k0 % taps);
        for kk in 0..klen {
            let plane = &image[c * in_plane..(c + 1) * in_plane];
            for &(offset, src, len) in &segments[tap_start[t]..tap_start[t + 1]] {
                let at = offset + kk * w;
                let d = &mut dst[at..at + len];
                match src {
                    None => d.fill(0.0),
                    Some(s0) => copy_strided(d, &plane[s0..], geom.stride_w),
                }
            }
            if tail > 0 {
                let at = (panels - 1) * klen * w + kk * w + w - tail;
                dst[at..at + tail].fill(0.0);
            }
            t += 1;
            if t == taps {
                (c, t) = (c + 1, 0);
            }
        }
    }
}

/// Rows `k0..k0 + klen` and pixels `j0..j0 + wlen` of an im2col matrix, in `w`-wide panels.
#[derive(Clone, Copy, Debug)]
struct PackBlock {
    k0: usize,
    klen: usize,
    j0: usize,
    wlen: usize,
    w: usize,
}

/// The im2col matrix (`taps × pixels`) of one image and group as a GEMM operand that packs its
/// own blocks: never written out whole. At 56×56 it is 7 MB, which explicit im2col wrote to
/// L3 and the packing read back.
struct Im2colSource<'a> {
    geom: &'a Conv2d,
    image: &'a [f32],
}

impl gemm::PackSource for Im2colSource<'_> {
    fn cols(&self) -> usize {
        self.geom.out_h * self.geom.out_w
    }

    unsafe fn pack(&self, k0: usize, klen: usize, j0: usize, wlen: usize, w: usize, dst: *mut f32) {
        // SAFETY: the caller provides `wlen.div_ceil(w) · klen · w` floats at `dst`.
        let dst = std::slice::from_raw_parts_mut(dst, wlen.div_ceil(w) * klen * w);
        let block = PackBlock {
            k0,
            klen,
            j0,
            wlen,
            w,
        };
        pack_im2col(self.geom, self.image, block, dst);
    }
}

/// im2col of one group's `channels` input planes, split over channels across `threads`
/// workers (the GEMM after it is threaded; a serial im2col was 6% of a 2-thread ResNet-50).
fn im2col_threaded(
    geom: &Conv2d,
    channels: usize,
    image: &[f32],
    cols: &mut [f32],
    threads: usize,
) {
    im2col_channels_threaded(geom, channels, image, cols, threads, |sub, image, dst| {
        im2col(sub, image, dst)
    });
}

/// [`im2col`]-like `lower(sub, planes, rows)` over channel ranges of one group's `channels`
/// input planes across `threads` workers, each writing its channels' rows of `cols`; `sub` is
/// `geom` with the range's channel count and one group. Any element type (f32, quantized bytes).
pub(crate) fn im2col_channels_threaded<T: Copy + Send + Sync>(
    geom: &Conv2d,
    channels: usize,
    image: &[T],
    cols: &mut [T],
    threads: usize,
    lower: impl Fn(&Conv2d, &[T], &mut [T]) + Sync + Send,
) {
    let in_plane = geom.in_h * geom.in_w;
    let rows_per_channel = geom.kernel_h * geom.kernel_w * geom.out_h * geom.out_w;
    assert!(cols.len() >= channels * rows_per_channel && image.len() >= channels * in_plane);
    let tasks = threads.min(channels).max(1);
    let per_task = channels.div_ceil(tasks);
    let out = SendPtr(cols.as_mut_ptr());
    parallel_for(threads, tasks, |task| {
        let (c0, c1) = (task * per_task, ((task + 1) * per_task).min(channels));
        if c0 >= c1 {
            return;
        }
        let sub = Conv2d {
            in_channels: c1 - c0,
            group: 1,
            ..*geom
        };
        // SAFETY: task `task` writes only the rows of channels c0..c1, disjoint from every
        // other task's, inside `cols` (which holds `channels` channels' rows).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                out.get().add(c0 * rows_per_channel),
                (c1 - c0) * rows_per_channel,
            )
        };
        lower(&sub, &image[c0 * in_plane..c1 * in_plane], dst);
    });
}

/// Runs the convolution with the default GEMM blocking. `weights` are
/// `[out_channels, in_channels/group, kh, kw]`; `scratch` must hold `geom.scratch_len()` floats.
pub fn conv2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    conv2d_with(
        &gemm::GemmConfig::default(),
        geom,
        input,
        weights,
        epilogue,
        output,
        scratch,
        threads,
    );
}

/// Convolution weights packed once for the GEMM path, one [`gemm::PackedA`] per group, so a run
/// does not repack them (at 7×7 planes each weight is used for only 49 columns: packing per run
/// cost about as much as the multiply).
pub struct PackedConvWeights {
    groups: Vec<PackedGroup>,
    /// Set instead of `groups` when the convolution runs the direct kernel (`direct::applies`).
    direct: Option<direct::DirectWeights>,
}

/// One group's weights, packed for the layout the convolution runs in.
enum PackedGroup {
    /// `W` as the A operand.
    ChannelMajor(gemm::PackedA),
    /// `Wᵀ` as the B operand.
    PixelMajor(gemm::PackedB),
}

impl PackedGroup {
    fn bytes(&self) -> usize {
        match self {
            PackedGroup::ChannelMajor(p) => p.bytes(),
            PackedGroup::PixelMajor(p) => p.bytes(),
        }
    }
}

impl std::fmt::Debug for PackedConvWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedConvWeights({} groups, {} bytes)",
            self.groups.len(),
            self.bytes()
        )
    }
}

impl PackedConvWeights {
    /// The weights for the kernel this convolution runs on `config`'s ISA: reordered for the
    /// direct kernel where it applies, packed per group for the GEMM otherwise. `None` for
    /// depthwise geometries (their kernel reads the weights as they are).
    pub fn new(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
    ) -> Option<PackedConvWeights> {
        if let Some(direct) = direct::DirectWeights::new(config.isa, geom, weights) {
            return Some(PackedConvWeights {
                groups: Vec::new(),
                direct: Some(direct),
            });
        }
        Self::for_gemm(config, geom, weights)
    }

    /// The weights packed for the im2col + GEMM path even where the direct kernel applies (to
    /// compare the two). `None` for depthwise geometries.
    pub fn for_gemm(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
    ) -> Option<PackedConvWeights> {
        if geom.is_depthwise() {
            return None;
        }
        Some(Self::packed_groups(
            config,
            geom,
            weights,
            gemm_layout(config.isa, geom),
        ))
    }

    /// Every group's weights packed for the GEMM in `layout`.
    fn packed_groups(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
        layout: GemmLayout,
    ) -> PackedConvWeights {
        let group_out = geom.out_channels / geom.group;
        let taps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
        let groups = (0..geom.group)
            .map(|g| {
                let w = MatRef::row_major(
                    &weights[g * group_out * taps..(g + 1) * group_out * taps],
                    group_out,
                    taps,
                );
                match layout {
                    GemmLayout::ChannelMajor => {
                        PackedGroup::ChannelMajor(gemm::PackedA::with_config(&w, config))
                    }
                    GemmLayout::PixelMajor => {
                        PackedGroup::PixelMajor(gemm::PackedB::with_config(&w.t(), config))
                    }
                }
            })
            .collect();
        PackedConvWeights {
            groups,
            direct: None,
        }
    }

    /// The weights of a pointwise convolution packed for [`pointwise_conv2d_to_nhwc`] (`Wᵀ`
    /// as the GEMM's B operand, whatever [`PackedConvWeights::new`] would choose). `None`
    /// unless `geom` is a one-group pointwise convolution.
    pub fn pixel_major(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
    ) -> Option<PackedConvWeights> {
        if !geom.is_pointwise() || geom.group != 1 {
            return None;
        }
        Some(Self::packed_groups(
            config,
            geom,
            weights,
            GemmLayout::PixelMajor,
        ))
    }

    /// Bytes held by the packed panels or the reordered direct weights.
    pub fn bytes(&self) -> usize {
        self.groups.iter().map(PackedGroup::bytes).sum::<usize>()
            + self.direct.as_ref().map_or(0, direct::DirectWeights::bytes)
    }

    /// Whether the convolution runs the direct kernel with these weights.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }
}

/// Runs the convolution with a given GEMM configuration (an autotuned blocking). `weights` are `[out_channels, in_channels/group, kh, kw]`; `scratch`
/// must hold `geom.scratch_len()` floats. `threads` parallelises the GEMMs.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_with(
    config: &gemm::GemmConfig,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    conv2d_prepacked(
        config, geom, input, weights, None, epilogue, output, scratch, threads,
    );
}

/// [`conv2d_with`] with the weights also given pre-packed (from [`PackedConvWeights::new`] with
/// the same `config` and geometry); `weights` are still used by the depthwise path.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_prepacked(
    config: &gemm::GemmConfig,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    packed: Option<&PackedConvWeights>,
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    let in_image = geom.in_channels * geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    let out_image = geom.out_channels * out_plane;
    if geom.is_depthwise() {
        depthwise::depthwise_conv2d(geom, input, weights, epilogue, output, threads);
        return;
    }
    match packed {
        Some(PackedConvWeights {
            direct: Some(direct),
            ..
        }) => {
            direct::direct_conv2d(geom, input, direct, epilogue, output, scratch, threads);
            return;
        }
        None => {
            if let Some(direct) = direct::DirectWeights::new(config.isa, geom, weights) {
                direct::direct_conv2d(geom, input, &direct, epilogue, output, scratch, threads);
                return;
            }
        }
        Some(_) => {}
    }
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let layout = match packed.and_then(|p| p.groups.first()) {
        Some(PackedGroup::ChannelMajor(_)) => GemmLayout::ChannelMajor,
        Some(PackedGroup::PixelMajor(_)) => GemmLayout::PixelMajor,
        None => gemm_layout(config.isa, geom),
    };
    let group = GroupConv {
        config,
        geom,
        weights,
        packed,
        epilogue,
    };
    // Grouped channel-major convolutions run their (image, group) GEMMs side by side, one
    // thread each: split over threads, each group's GEMM is too small to pay for the split
    // (ShuffleNet's 4-group 1×1 convolutions on 7×7 planes ran slower on two threads than on
    // one). They use no scratch, so the groups share nothing but the input.
    if layout == GemmLayout::ChannelMajor && geom.group > 1 && threads > 1 {
        assert!(output.len() >= geom.batch * out_image);
        let out_ptr = SendPtr(output.as_mut_ptr());
        parallel_for(threads, geom.batch * geom.group, |ng| {
            let (n, g) = (ng / geom.group, ng % geom.group);
            let start = n * out_image + g * group_out * out_plane;
            // SAFETY: (image, group) `ng` writes only its own output channels' planes, inside
            // `output` (checked above).
            let out = unsafe {
                std::slice::from_raw_parts_mut(out_ptr.get().add(start), group_out * out_plane)
            };
            let image = &input[n * in_image + g * group_in * geom.in_h * geom.in_w
                ..n * in_image + (g + 1) * group_in * geom.in_h * geom.in_w];
            group.channel_major(image, g, start, out, 1);
        });
        return;
    }
    // Pixel-major groups (many channels each on a small plane: AlexNet's two towers on 13²)
    // run side by side too, one thread each, when they share the threads evenly or are many,
    // as the direct kernel's groups do: each GEMM then runs whole on its thread instead of
    // every group's tiles being split and joined in turn (AlexNet's 256→384 3×3 two-group
    // layer on 13², two threads: 384 → 367 µs, Zen 5). Each task takes its im2col and
    // transposed blocks from a scratch of its own thread.
    if layout == GemmLayout::PixelMajor && geom.group > 1 && threads > 1 {
        let tasks = geom.batch * geom.group;
        if tasks.is_multiple_of(threads) || tasks >= 4 * threads {
            assert!(output.len() >= geom.batch * out_image);
            let out_ptr = SendPtr(output.as_mut_ptr());
            let per_task = geom.im2col_len() + out_plane * group_out;
            parallel_for(threads, tasks, |ng| {
                let (n, g) = (ng / geom.group, ng % geom.group);
                let start = n * out_image + g * group_out * out_plane;
                // SAFETY: (image, group) `ng` writes only its own output channels' planes,
                // inside `output` (checked above).
                let out = unsafe {
                    std::slice::from_raw_parts_mut(out_ptr.get().add(start), group_out * out_plane)
                };
                let mut scratch = GROUP_SCRATCH.with(|cell| cell.take());
                if scratch.len() < per_task {
                    scratch.resize(per_task, 0.0);
                }
                group.pixel_major(input, n, g, out, &mut scratch[..per_task], 1);
                GROUP_SCRATCH.with(|cell| cell.replace(scratch));
            });
            return;
        }
    }
    for n in 0..geom.batch {
        for g in 0..geom.group {
            let start = n * out_image + g * group_out * out_plane;
            let out = &mut output[start..start + group_out * out_plane];
            match layout {
                GemmLayout::ChannelMajor => {
                    let image = &input[n * in_image + g * group_in * geom.in_h * geom.in_w
                        ..n * in_image + (g + 1) * group_in * geom.in_h * geom.in_w];
                    group.channel_major(image, g, start, out, threads);
                }
                GemmLayout::PixelMajor => group.pixel_major(input, n, g, out, scratch, threads),
            }
        }
    }
}

/// A one-group pointwise convolution of one NCHW image whose output is written NHWC
/// (`output[pixel · C_out + channel]`): `Yᵀ = Xᵀ·Wᵀ` straight into the output with the bias
/// per column and the activation, skipping the transpose back that the pixel-major layout
/// otherwise pays. For a depthwise convolution that reads NHWC
/// ([`depthwise::depthwise_conv2d_nhwc_input`]). `packed` comes from
/// [`PackedConvWeights::pixel_major`] with the same `config`; `None` packs on the fly.
///
/// # Panics
/// On a residual (the residual is NCHW), a geometry that is not a one-image, one-group
/// pointwise convolution, or slices shorter than the geometry.
#[allow(clippy::too_many_arguments)]
pub fn pointwise_conv2d_to_nhwc(
    config: &gemm::GemmConfig,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    packed: Option<&PackedConvWeights>,
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    threads: usize,
) {
    assert!(geom.is_pointwise() && geom.group == 1 && geom.batch == 1);
    assert!(
        epilogue.residual.is_none(),
        "an NHWC output takes no residual"
    );
    let pixels = geom.out_h * geom.out_w;
    let x = MatRef::row_major(
        &input[..geom.in_channels * pixels],
        geom.in_channels,
        pixels,
    );
    let out = &mut output[..pixels * geom.out_channels];
    let ep = Epilogue {
        bias: epilogue.bias.map_or(BiasKind::None, BiasKind::PerCol),
        residual: None,
        activation: epilogue.activation,
    };
    match packed.and_then(|p| p.groups.first()) {
        Some(PackedGroup::PixelMajor(pw)) => {
            gemm::sgemm_packed_b(&x.t(), pw, out, geom.out_channels, &ep, threads)
        }
        _ => {
            let w = MatRef::row_major(weights, geom.out_channels, geom.in_channels);
            gemm::sgemm_with(config, &x.t(), &w.t(), out, geom.out_channels, &ep, threads)
        }
    }
}

thread_local! {
    /// The im2col and transposed blocks of a pixel-major group run as one task of many
    /// (reused across calls).
    static GROUP_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What every group of one convolution call shares.
struct GroupConv<'a> {
    config: &'a gemm::GemmConfig,
    geom: &'a Conv2d,
    weights: &'a [f32],
    packed: Option<&'a PackedConvWeights>,
    epilogue: &'a ConvEpilogue<'a>,
}

impl GroupConv<'_> {
    /// Group `g` of image `n` as `Yᵀ = colsᵀ·Wᵀ` (pixels as the GEMM's rows, the bias per
    /// column) into the front of `scratch`'s transposed block, then transposed into `out` (the
    /// group's output planes) with the residual and activation. `scratch` holds the im2col block
    /// (`geom.im2col_len()`) and the transposed one (pixels × the group's channels).
    fn pixel_major(
        &self,
        input: &[f32],
        n: usize,
        g: usize,
        out: &mut [f32],
        scratch: &mut [f32],
        threads: usize,
    ) {
        let geom = self.geom;
        let epilogue = self.epilogue;
        let group_in = geom.in_channels / geom.group;
        let group_out = geom.out_channels / geom.group;
        let taps = group_in * geom.kernel_h * geom.kernel_w;
        let out_plane = geom.out_h * geom.out_w;
        let in_image = geom.in_channels * geom.in_h * geom.in_w;
        let out_image = geom.out_channels * out_plane;
        let image = &input[n * in_image + g * group_in * geom.in_h * geom.in_w
            ..n * in_image + (g + 1) * group_in * geom.in_h * geom.in_w];
        let (cols, transposed) = scratch.split_at_mut(geom.im2col_len());
        let w = MatRef::row_major(
            &self.weights[g * group_out * taps..(g + 1) * group_out * taps],
            group_out,
            taps,
        );
        let start = n * out_image + g * group_out * out_plane;
        let bias = epilogue
            .bias
            .map(|b| &b[g * group_out..(g + 1) * group_out]);
        let residual = epilogue
            .residual
            .map(|r| &r[start..start + group_out * out_plane]);
        let b_data: &[f32] = if geom.is_pointwise() {
            image
        } else {
            im2col_threaded(geom, group_in, image, cols, threads);
            cols
        };
        let x = MatRef::row_major(b_data, taps, out_plane);
        // Yᵀ = colsᵀ·Wᵀ with the bias per column; the residual is added (and the
        // activation applied after it) in the transpose.
        let yt = &mut transposed[..out_plane * group_out];
        let ep = Epilogue {
            bias: bias.map_or(BiasKind::None, BiasKind::PerCol),
            residual: None,
            activation: if residual.is_some() {
                Activation::None
            } else {
                epilogue.activation
            },
        };
        match self.packed.map(|p| &p.groups[g]) {
            Some(PackedGroup::PixelMajor(pw)) => {
                gemm::sgemm_packed_b(&x.t(), pw, yt, group_out, &ep, threads)
            }
            _ => gemm::sgemm_with(self.config, &x.t(), &w.t(), yt, group_out, &ep, threads),
        }
        let activation = if residual.is_some() {
            epilogue.activation
        } else {
            Activation::None
        };
        transpose_epilogue(yt, out_plane, group_out, out, residual, activation, threads);
    }

    /// Group `g` of one image as `Y = W·cols` straight into `out` (the group's output planes,
    /// at `start` in the whole output), with the epilogue.
    fn channel_major(
        &self,
        image: &[f32],
        g: usize,
        start: usize,
        out: &mut [f32],
        threads: usize,
    ) {
        let geom = self.geom;
        let group_out = geom.out_channels / geom.group;
        let taps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
        let out_plane = geom.out_h * geom.out_w;
        let bias = self
            .epilogue
            .bias
            .map(|b| &b[g * group_out..(g + 1) * group_out]);
        let ep = Epilogue {
            bias: bias.map_or(BiasKind::None, BiasKind::PerRow),
            residual: self
                .epilogue
                .residual
                .map(|r| &r[start..start + group_out * out_plane]),
            activation: self.epilogue.activation,
        };
        let owned;
        let pw = match self.packed.map(|p| &p.groups[g]) {
            Some(PackedGroup::ChannelMajor(pw)) => pw,
            _ => {
                let w = MatRef::row_major(
                    &self.weights[g * group_out * taps..(g + 1) * group_out * taps],
                    group_out,
                    taps,
                );
                owned = gemm::PackedA::with_config(&w, self.config);
                &owned
            }
        };
        if geom.is_pointwise() {
            let x = MatRef::row_major(image, taps, out_plane);
            gemm::sgemm_packed_a(pw, &x, out, out_plane, &ep, threads);
        } else {
            let cols = Im2colSource { geom, image };
            gemm::sgemm_packed_a_source(pw, &cols, out, out_plane, &ep, threads);
        }
    }
}

#[cfg(test)]
mod tests;
