//! 2-D convolution (NCHW): 1×1 stride-1 convolutions are plain GEMMs on the input, depthwise
//! convolutions run the direct kernel of `depthwise.rs`, everything else goes through explicit im2col + GEMM per
//! group. The GEMM epilogue carries bias, residual and activation.

use super::depthwise;
use super::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use super::parallel::{parallel_for, SendPtr};
use super::simd::multiversion;

/// Geometry of one 2-D convolution (1-D convolutions use `h = kh = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub group: usize,
}

impl Conv2d {
    pub fn is_depthwise(&self) -> bool {
        self.group == self.in_channels && self.group == self.out_channels && self.group > 1
    }

    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1
            && self.kernel_w == 1
            && self.stride_h == 1
            && self.stride_w == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.out_h == self.in_h
            && self.out_w == self.in_w
    }

    /// Scratch floats the GEMM path needs: the im2col columns (none for pointwise) and, when
    /// some GEMM variant computes this convolution pixel-major, the transposed output of one
    /// group. 0 for depthwise.
    pub fn scratch_len(&self) -> usize {
        if self.is_depthwise() {
            return 0;
        }
        self.im2col_len()
            + if self.any_pixel_major() {
                self.transposed_len()
            } else {
                0
            }
    }

    /// `(m, n, k)` of the GEMM one image and group runs as on `isa` (pixel-major convolutions
    /// run `pixels × channels`): the shape to tune the blocking for.
    pub fn gemm_shape(&self, isa: gemm::Isa) -> (usize, usize, usize) {
        let channels = self.out_channels / self.group;
        let pixels = self.out_h * self.out_w;
        let taps = self.in_channels / self.group * self.kernel_h * self.kernel_w;
        match gemm_layout(isa, self) {
            GemmLayout::ChannelMajor => (channels, pixels, taps),
            GemmLayout::PixelMajor => (pixels, channels, taps),
        }
    }

    /// Whether some GEMM variant runs this convolution pixel-major.
    fn any_pixel_major(&self) -> bool {
        gemm::Isa::ALL
            .iter()
            .any(|&isa| gemm_layout(isa, self) == GemmLayout::PixelMajor)
    }

    /// Floats of explicit im2col: only the pixel-major path writes the matrix out (the
    /// channel-major GEMM packs it block by block straight from the image).
    fn im2col_len(&self) -> usize {
        if self.is_pointwise() || !self.any_pixel_major() {
            0
        } else {
            (self.in_channels / self.group)
                * self.kernel_h
                * self.kernel_w
                * self.out_h
                * self.out_w
        }
    }

    fn transposed_len(&self) -> usize {
        self.out_channels / self.group * self.out_h * self.out_w
    }

    pub fn flops(&self) -> u64 {
        2 * (self.batch
            * self.out_channels
            * self.out_h
            * self.out_w
            * (self.in_channels / self.group)
            * self.kernel_h
            * self.kernel_w) as u64
    }
}

/// Epilogue of a convolution in NCHW terms.
#[derive(Clone, Copy, Debug)]
pub struct ConvEpilogue<'a> {
    pub bias: Option<&'a [f32]>,
    /// Tensor added after the bias, same shape as the output.
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

/// How a convolution is put as a GEMM (per image and group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GemmLayout {
    /// `Y[out_ch × pixels] = W · cols`: written straight into the NCHW output.
    ChannelMajor,
    /// `Yᵀ[pixels × out_ch] = colsᵀ · Wᵀ`, then transposed into the output with the residual and
    /// activation. For small planes: 49 pixels fill 64 columns of 32-wide tiles (77%) but 52 rows
    /// of 12-row tiles (94%).
    PixelMajor,
}

/// The layout whose microkernel tiles waste less; pixel-major needs a clear saving (10%)
/// to pay for its transpose pass over the output.
fn gemm_layout(isa: gemm::Isa, geom: &Conv2d) -> GemmLayout {
    let channels = geom.out_channels / geom.group;
    let pixels = geom.out_h * geom.out_w;
    let direct = isa.computed_work(channels, pixels);
    let transposed = isa.computed_work(pixels, channels);
    if transposed * 10 < direct * 9 {
        GemmLayout::PixelMajor
    } else {
        GemmLayout::ChannelMajor
    }
}

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

multiversion! {
    fn im2col(geom: &Conv2d, input: &[f32], out: &mut [f32]) {
        let (oh, ow) = (geom.out_h, geom.out_w);
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
        im2col(&sub, &image[c0 * in_plane..c1 * in_plane], dst);
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
    /// `None` for geometries that do not take the GEMM path (depthwise).
    pub fn new(
        config: &gemm::GemmConfig,
        geom: &Conv2d,
        weights: &[f32],
    ) -> Option<PackedConvWeights> {
        if geom.is_depthwise() {
            return None;
        }
        let group_out = geom.out_channels / geom.group;
        let taps = geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w;
        let layout = gemm_layout(config.isa, geom);
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
        Some(PackedConvWeights { groups })
    }

    /// Bytes held by the packed panels.
    pub fn bytes(&self) -> usize {
        self.groups.iter().map(PackedGroup::bytes).sum()
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
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let taps = group_in * geom.kernel_h * geom.kernel_w;
    let layout = match packed.and_then(|p| p.groups.first()) {
        Some(PackedGroup::ChannelMajor(_)) => GemmLayout::ChannelMajor,
        Some(PackedGroup::PixelMajor(_)) => GemmLayout::PixelMajor,
        None => gemm_layout(config.isa, geom),
    };
    let (cols, transposed) = scratch.split_at_mut(geom.im2col_len());
    for n in 0..geom.batch {
        for g in 0..geom.group {
            let image = &input[n * in_image + g * group_in * geom.in_h * geom.in_w
                ..n * in_image + (g + 1) * group_in * geom.in_h * geom.in_w];
            let w = MatRef::row_major(
                &weights[g * group_out * taps..(g + 1) * group_out * taps],
                group_out,
                taps,
            );
            let start = n * out_image + g * group_out * out_plane;
            let end = start + group_out * out_plane;
            let bias = epilogue
                .bias
                .map(|b| &b[g * group_out..(g + 1) * group_out]);
            let residual = epilogue.residual.map(|r| &r[start..end]);
            let out = &mut output[start..end];
            match layout {
                GemmLayout::ChannelMajor => {
                    let ep = Epilogue {
                        bias: bias.map_or(BiasKind::None, BiasKind::PerRow),
                        residual,
                        activation: epilogue.activation,
                    };
                    let owned;
                    let pw = match packed.map(|p| &p.groups[g]) {
                        Some(PackedGroup::ChannelMajor(pw)) => pw,
                        _ => {
                            owned = gemm::PackedA::with_config(&w, config);
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
                GemmLayout::PixelMajor => {
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
                    match packed.map(|p| &p.groups[g]) {
                        Some(PackedGroup::PixelMajor(pw)) => {
                            gemm::sgemm_packed_b(&x.t(), pw, yt, group_out, &ep, threads)
                        }
                        _ => gemm::sgemm_with(config, &x.t(), &w.t(), yt, group_out, &ep, threads),
                    }
                    let activation = if residual.is_some() {
                        epilogue.activation
                    } else {
                        Activation::None
                    };
                    transpose_epilogue(
                        yt, out_plane, group_out, out, residual, activation, threads,
                    );
                }
            }
        }
    }
}

/// Transposed 2-D convolution (NCHW): per group, cols = Wᵀ·X ([M/g·kh·kw, H·W]) by GEMM, then a
/// col2im scatter-add into the output. `geom` describes the *forward* direction from the output
/// back to the input: `in_*` are the ConvTranspose input dims, `out_*` its output dims.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    output: &mut [f32],
    scratch: &mut Vec<f32>,
    threads: usize,
) {
    let group_in = geom.in_channels / geom.group;
    let group_out = geom.out_channels / geom.group;
    let taps = group_out * geom.kernel_h * geom.kernel_w;
    let in_plane = geom.in_h * geom.in_w;
    let out_plane = geom.out_h * geom.out_w;
    if scratch.len() < taps * in_plane {
        scratch.resize(taps * in_plane, 0.0);
    }
    let scratch = &mut scratch[..taps * in_plane];
    for n in 0..geom.batch {
        for g in 0..geom.group {
            // Weights are [C_in, M/g, kh, kw]: the group's slice, viewed transposed.
            let w = &weights[g * group_in * taps..(g + 1) * group_in * taps];
            let a = MatRef {
                data: w,
                rows: taps,
                cols: group_in,
                row_stride: 1,
                col_stride: taps,
            };
            let x_start = (n * geom.in_channels + g * group_in) * in_plane;
            let b = MatRef {
                data: &input[x_start..x_start + group_in * in_plane],
                rows: group_in,
                cols: in_plane,
                row_stride: in_plane,
                col_stride: 1,
            };
            let ep = Epilogue {
                bias: BiasKind::None,
                residual: None,
                activation: Activation::None,
            };
            gemm::sgemm(&a, &b, scratch, in_plane, &ep, threads);
            let out_start = (n * geom.out_channels + g * group_out) * out_plane;
            let out = &mut output[out_start..out_start + group_out * out_plane];
            for (m, plane) in out.chunks_mut(out_plane).enumerate() {
                plane.fill(bias.map_or(0.0, |b| b[g * group_out + m]));
            }
            for m in 0..group_out {
                for ky in 0..geom.kernel_h {
                    for kx in 0..geom.kernel_w {
                        let row = (m * geom.kernel_h + ky) * geom.kernel_w + kx;
                        let cols = &scratch[row * in_plane..(row + 1) * in_plane];
                        for iy in 0..geom.in_h {
                            let oy = (iy * geom.stride_h + ky * geom.dilation_h) as isize
                                - geom.pad_top as isize;
                            if oy < 0 || oy >= geom.out_h as isize {
                                continue;
                            }
                            for ix in 0..geom.in_w {
                                let ox = (ix * geom.stride_w + kx * geom.dilation_w) as isize
                                    - geom.pad_left as isize;
                                if ox >= 0 && ox < geom.out_w as isize {
                                    out[m * out_plane + oy as usize * geom.out_w + ox as usize] +=
                                        cols[iy * geom.in_w + ix];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Direct loop over every output, tap and input channel in f64 (grouped, strided, dilated,
/// padded), then the epilogue: the reference the convolution kernels are tested against.
#[cfg(test)]
pub(crate) fn reference_conv(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
) -> Vec<f32> {
    let g = geom;
    let (gi, go) = (g.in_channels / g.group, g.out_channels / g.group);
    let mut out = vec![0.0; g.batch * g.out_channels * g.out_h * g.out_w];
    for n in 0..g.batch {
        for m in 0..g.out_channels {
            let group = m / go;
            for y in 0..g.out_h {
                for x in 0..g.out_w {
                    let mut acc = epilogue.bias.map_or(0.0, |b| b[m]) as f64;
                    for c in 0..gi {
                        for ky in 0..g.kernel_h {
                            for kx in 0..g.kernel_w {
                                let iy = (y * g.stride_h + ky * g.dilation_h) as isize
                                    - g.pad_top as isize;
                                let ix = (x * g.stride_w + kx * g.dilation_w) as isize
                                    - g.pad_left as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= g.in_h as isize
                                    || ix >= g.in_w as isize
                                {
                                    continue;
                                }
                                let iv = input[((n * g.in_channels + group * gi + c) * g.in_h
                                    + iy as usize)
                                    * g.in_w
                                    + ix as usize];
                                let wv =
                                    weights[((m * gi + c) * g.kernel_h + ky) * g.kernel_w + kx];
                                acc += iv as f64 * wv as f64;
                            }
                        }
                    }
                    let at = ((n * g.out_channels + m) * g.out_h + y) * g.out_w + x;
                    let mut v = acc as f32;
                    if let Some(r) = epilogue.residual {
                        v += r[at];
                    }
                    out[at] = gemm::activation_scalar(&epilogue.activation, v);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::simd::{available_levels, IsaLevel};

    fn check(geom: Conv2d) {
        let input: Vec<f32> = (0..geom.batch * geom.in_channels * geom.in_h * geom.in_w)
            .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let weights: Vec<f32> =
            (0..geom.out_channels * geom.in_channels / geom.group * geom.kernel_h * geom.kernel_w)
                .map(|i| ((i * 104729) % 17) as f32 / 8.0 - 1.0)
                .collect();
        let bias: Vec<f32> = (0..geom.out_channels).map(|i| i as f32 * 0.1).collect();
        let out_len = geom.batch * geom.out_channels * geom.out_h * geom.out_w;
        let residual: Vec<f32> = (0..out_len).map(|i| (i % 7) as f32 * 0.25 - 0.8).collect();
        let plain = ConvEpilogue {
            bias: Some(&bias),
            residual: None,
            activation: Activation::None,
        };
        let fused = ConvEpilogue {
            bias: Some(&bias),
            residual: Some(&residual),
            activation: Activation::Relu,
        };
        check_with(geom, &input, &weights, &plain);
        check_with(geom, &input, &weights, &fused);
    }

    fn check_with(geom: Conv2d, input: &[f32], weights: &[f32], ep: &ConvEpilogue) {
        let (input, weights) = (input.to_vec(), weights.to_vec());
        let ep = *ep;
        let want = reference_conv(&geom, &input, &weights, &ep);
        let mut got = vec![0.0; want.len()];
        let mut scratch = vec![0.0; geom.scratch_len()];
        conv2d(&geom, &input, &weights, &ep, &mut got, &mut scratch, 1);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                "{geom:?} at {i}: {g} vs {w}"
            );
        }
        // The plan's path: weights packed once per GEMM variant, one and two threads.
        for isa in gemm::Isa::ALL {
            let Some(config) = gemm::GemmConfig::for_isa(isa) else {
                continue;
            };
            let packed = PackedConvWeights::new(&config, &geom, &weights);
            assert_eq!(packed.is_none(), geom.is_depthwise());
            for threads in [1, 2] {
                let mut got = vec![f32::NAN; want.len()];
                let mut scratch = vec![f32::NAN; geom.scratch_len()];
                conv2d_prepacked(
                    &config,
                    &geom,
                    &input,
                    &weights,
                    packed.as_ref(),
                    &ep,
                    &mut got,
                    &mut scratch,
                    threads,
                );
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                        "{isa:?} prepacked, {threads} threads, {geom:?} at {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn geom(
        c: usize,
        m: usize,
        hw: usize,
        k: usize,
        stride: usize,
        pad: usize,
        group: usize,
        dil: usize,
    ) -> Conv2d {
        let out = (hw + 2 * pad - dil * (k - 1) - 1) / stride + 1;
        Conv2d {
            batch: 2,
            in_channels: c,
            in_h: hw,
            in_w: hw + 1,
            out_channels: m,
            kernel_h: k,
            kernel_w: k,
            stride_h: stride,
            stride_w: stride,
            dilation_h: dil,
            dilation_w: dil,
            pad_top: pad,
            pad_left: pad,
            out_h: out,
            out_w: (hw + 1 + 2 * pad - dil * (k - 1) - 1) / stride + 1,
            group,
        }
    }

    #[test]
    fn im2col_agrees_across_isa_variants() {
        // Every variant of the multiversioned loop produces the same bits as the scalar one.
        let input: Vec<f32> = (0..2 * 6 * 9 * 10).map(|i| (i % 13) as f32 - 6.0).collect();
        let image = &input[..6 * 9 * 10];
        let dense = geom(3, 4, 9, 3, 2, 1, 1, 1);
        let len = 6 * 9 * dense.out_h * dense.out_w;
        let mut cols_ref = vec![0.0; len];
        im2col::at(IsaLevel::Scalar, &dense, image, &mut cols_ref);
        for level in available_levels() {
            let mut cols = vec![0.0; len];
            im2col::at(level, &dense, image, &mut cols);
            assert_eq!(cols, cols_ref, "im2col at {level:?}");
        }
    }

    #[test]
    fn packed_im2col_blocks_match_the_explicit_matrix() {
        // Blocks of the self-packing operand equal the explicit im2col matrix laid out in
        // panels, for strides 1, 2 and 3, padding, dilation, and blocks that start mid-row and
        // end mid-panel.
        for g in [
            geom(3, 4, 9, 3, 1, 1, 1, 1),
            geom(2, 4, 11, 3, 2, 1, 1, 1),
            geom(2, 4, 12, 3, 3, 2, 1, 2),
            geom(3, 4, 12, 7, 2, 3, 1, 1),
        ] {
            let channels = g.in_channels;
            let image: Vec<f32> = (0..channels * g.in_h * g.in_w)
                .map(|i| i as f32 + 1.0)
                .collect();
            let (k, n) = (channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w);
            let mut cols = vec![0.0; k * n];
            im2col(&g, &image, &mut cols);
            for (k0, klen, j0, wlen, w) in [
                (0, k, 0, n, 16),
                (2, 5, 7, n - 7, 8),
                (1, 3, 13, (n - 13).min(30), 32),
            ] {
                let panels = wlen.div_ceil(w);
                for level in available_levels() {
                    let mut packed = vec![f32::NAN; panels * klen * w];
                    let block = PackBlock {
                        k0,
                        klen,
                        j0,
                        wlen,
                        w,
                    };
                    pack_im2col::at(level, &g, &image, block, &mut packed);
                    for p in 0..panels {
                        for kk in 0..klen {
                            for lane in 0..w {
                                let j = p * w + lane;
                                let want = if j < wlen {
                                    cols[(k0 + kk) * n + j0 + j]
                                } else {
                                    0.0
                                };
                                let got = packed[p * klen * w + kk * w + lane];
                                assert_eq!(got, want, "{g:?} {level:?} block ({k0},{klen},{j0},{wlen},{w}) panel {p} row {kk} lane {lane}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn conv_paths_match_the_direct_loop() {
        check(geom(3, 8, 9, 3, 1, 1, 1, 1)); // im2col
        check(geom(4, 6, 8, 3, 2, 1, 2, 1)); // grouped, strided
        check(geom(5, 7, 6, 1, 1, 0, 1, 1)); // pointwise
        check(geom(6, 6, 9, 3, 1, 1, 6, 1)); // depthwise
        check(geom(6, 6, 9, 5, 2, 2, 6, 1)); // depthwise 5x5 stride 2
        check(geom(3, 4, 11, 3, 1, 2, 1, 2)); // dilated
        check(geom(8, 8, 7, 3, 2, 0, 8, 1)); // depthwise, no padding
        check(geom(4, 4, 40, 3, 2, 1, 4, 1)); // depthwise rows, stride 2
        check(geom(4, 4, 40, 5, 1, 2, 4, 1)); // depthwise rows, 5x5
        check(geom(4, 4, 37, 3, 2, 1, 4, 2)); // depthwise rows, dilated, stride 2
        check(geom(3, 5, 12, 7, 2, 3, 1, 1)); // 7x7 stride 2 stem
        check(geom(8, 6, 9, 1, 2, 0, 1, 1)); // 1x1 stride 2 (im2col, not pointwise)
        check(geom(70, 13, 6, 3, 1, 1, 1, 1)); // K = 630 taps: several k-blocks
    }

    #[test]
    fn small_planes_run_pixel_major_and_match() {
        // Few pixels, many channels: the GEMM computes Yᵀ and transposes it (with the residual
        // and activation) into the output.
        let cases = [
            geom(16, 64, 7, 3, 1, 1, 1, 1), // 7×8 pixels, 3×3
            geom(20, 64, 4, 1, 1, 0, 1, 1), // 4×5 pixels, pointwise
            geom(16, 64, 4, 3, 1, 1, 2, 1), // two groups of 32 channels
        ];
        for g in cases {
            assert_eq!(
                gemm_layout(gemm::Isa::detect(), &g),
                GemmLayout::PixelMajor,
                "{g:?} should take the pixel-major path"
            );
            check(g);
        }
        // The ResNet-50 stage-4 shape is pixel-major on the 12×32 AVX-512 tiles.
        let stage4 = Conv2d {
            batch: 1,
            in_h: 7,
            in_w: 7,
            out_h: 7,
            out_w: 7,
            ..geom(512, 512, 7, 3, 1, 1, 1, 1)
        };
        assert_eq!(
            gemm_layout(gemm::Isa::Avx512, &stage4),
            GemmLayout::PixelMajor
        );
        // The autotuner is asked for the shape that runs: pixels × channels × taps.
        assert_eq!(stage4.gemm_shape(gemm::Isa::Avx512), (49, 512, 4608));
        assert_eq!(
            gemm_layout(gemm::Isa::Avx512, &geom(64, 64, 56, 3, 1, 1, 1, 1)),
            GemmLayout::ChannelMajor
        );
    }
}
