//! Depthwise 2-D convolution (NCHW, one filter per channel) as a direct kernel.
//!
//! Each channel plane is copied once into `stride_h × stride_w` zero-padded *phase planes*:
//! phase `(q, p)` holds the padded input rows `≡ q (mod stride_h)` and columns
//! `≡ p (mod stride_w)`, every phase plane `phase_cols` wide. In that layout the input element
//! that output `(y, x)` needs for tap `(ky, kx)` sits at the output's flattened grid index
//! `y · phase_cols + x` plus a constant per-tap offset, so each tap is one contiguous,
//! branch-free multiply-add over the whole output grid whatever the stride, dilation or
//! padding: a stride-2 convolution costs no more per output than a stride-1 one, and a 7×7
//! plane vectorises like a 112×112 one. The grid is `phase_cols ≥ out_w` wide; the extra
//! columns are computed and dropped when rows are written out.
//!
//! Every block of four vectors sums all taps in registers (bias folded into the initial
//! value) and is stored once; the epilogue (residual, activation) is applied while the grid
//! rows, still in L1, are copied to the output. Channels are split across `threads` workers.
//!
//! 3×3 convolutions on larger planes skip the phase planes where a rows kernel reads the NCHW
//! rows directly (even and odd columns split in registers at stride 2): stride 2 on AVX-512
//! (`rows_3x3_avx512`), strides 1 and 2 on AVX2 (`rows_avx2`).
//!
//! Small planes (7×7, 14×14: at most 256 outputs) spend most of that per-channel work on fixed
//! costs, so on AVX-512 they run sixteen channels at a time instead, one per lane: blocks of
//! sixteen pixels of sixteen planes are transposed in registers into pixel vectors, each tap is
//! one FMA for sixteen channels (the taps of every output pixel listed once per call, borders
//! included), and the results are transposed back with the epilogue.

use std::cell::RefCell;
use std::ops::Range;

use super::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::act::activate;
use crate::kernels::gemm::simd::Vf32;
use crate::kernels::gemm::{Activation, Isa};
use crate::kernels::parallel::{parallel_for, SendPtr};

mod rows;
#[cfg(target_arch = "x86_64")]
mod rows_avx2;
mod small;
use rows::rows_3x3_applies;
#[cfg(target_arch = "x86_64")]
use rows::rows_3x3_avx512;
#[cfg(test)]
use rows::{column_mask, rows_3x3_kernel_fits};
use small::SmallPlaneTaps;
#[cfg(target_arch = "x86_64")]
use small::{small_planes, SmallPlaneInput};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// Output-grid floats computed per block before the rows are written out (stays in L1).
const GRID_BLOCK_FLOATS: usize = 2048;

/// Where each tap of one convolution reads inside the phase planes.
#[derive(Debug)]
pub(super) struct PhaseLayout {
    phase_rows: usize,
    pub(super) phase_cols: usize,
    /// Floats per phase plane: rows × cols plus slack for the extra columns of the last row.
    phase_len: usize,
    /// Per tap (row-major over the kernel): offset of its read for grid index 0.
    pub(super) tap_offsets: Vec<usize>,
    /// Per column phase p: the phase columns `first..last` whose source column
    /// `j·stride_w + p − pad_left` lies inside the input row (the rest are padding zeros).
    /// Computed once: two divisions per row and phase cost as much as a 56-wide row copy.
    column_spans: Vec<(usize, usize)>,
    shape: KernelShape,
}

/// Which accumulation loop a convolution takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelShape {
    /// 3×3, dilation 1, stride 1 in both directions, output rows at least 16 wide.
    K3S1,
    /// As `K3S1` with stride 2.
    K3S2,
    /// Anything else: the flat loop over the whole grid (also best for narrow planes).
    Any,
}

impl PhaseLayout {
    /// `(phase_rows, phase_cols, phase_len)` of `g`'s phase planes, without the tap lists (what
    /// a scratch size needs on every call).
    pub(super) fn extent(g: &Conv2d) -> (usize, usize, usize) {
        let reach_rows = (g.kernel_h - 1) * g.dilation_h / g.stride_h;
        let reach_cols = (g.kernel_w - 1) * g.dilation_w / g.stride_w;
        let phase_rows = g.out_h + reach_rows;
        let phase_cols = g.out_w + reach_cols;
        (phase_rows, phase_cols, phase_rows * phase_cols + reach_cols)
    }

    /// [`PhaseLayout::extent`] of the layout whose rows share their padding zeros
    /// ([`PhaseLayout::compact`]).
    pub(super) fn compact_extent(g: &Conv2d) -> (usize, usize, usize) {
        let extent = Self::extent(g);
        if g.stride_w != 1 {
            return extent;
        }
        let (phase_rows, phase_cols, _) = extent;
        let reach_cols = (g.kernel_w - 1) * g.dilation_w;
        let pad_right = (g.out_w + reach_cols).saturating_sub(g.in_w + g.pad_left);
        let phase_cols = phase_cols - g.pad_left.min(pad_right);
        (phase_rows, phase_cols, phase_rows * phase_cols + reach_cols)
    }

    pub(super) fn new(g: &Conv2d) -> PhaseLayout {
        Self::with_extent(g, Self::extent(g))
    }

    /// A stride-1 layout whose rows share their padding zeros: a row's right padding is the
    /// next row's left padding, so a row holds `pad_left` zeros, the input row and
    /// `max(pad_left, pad_right) − pad_left` zeros (a 3×3 with padding 1 on a 13-wide plane:
    /// 14 columns instead of 15). A tap reaching past a row's end reads the next row's leading
    /// zeros. The dense direct kernel computes every grid column, so on 13² planes the
    /// dropped columns fall from 13% of its work to 7%. Other strides: [`PhaseLayout::new`].
    pub(super) fn compact(g: &Conv2d) -> PhaseLayout {
        let mut layout = Self::with_extent(g, Self::compact_extent(g));
        // The depthwise row kernels assume the full layout.
        layout.shape = KernelShape::Any;
        layout
    }

    fn with_extent(g: &Conv2d, extent: (usize, usize, usize)) -> PhaseLayout {
        let (phase_rows, phase_cols, phase_len) = extent;
        let mut tap_offsets = Vec::with_capacity(g.kernel_h * g.kernel_w);
        for ky in 0..g.kernel_h {
            for kx in 0..g.kernel_w {
                let (row, col) = (ky * g.dilation_h, kx * g.dilation_w);
                let phase = (row % g.stride_h) * g.stride_w + col % g.stride_w;
                tap_offsets
                    .push(phase * phase_len + (row / g.stride_h) * phase_cols + col / g.stride_w);
            }
        }
        let column_spans = (0..g.stride_w)
            .map(|p| {
                let sw = g.stride_w;
                let first = g.pad_left.saturating_sub(p).div_ceil(sw).min(phase_cols);
                let last = (g.in_w + g.pad_left)
                    .saturating_sub(p)
                    .div_ceil(sw)
                    .min(phase_cols)
                    .max(first);
                (first, last)
            })
            .collect();
        let three = g.is_dense_3x3();
        let shape = match (three && g.out_w >= 16, g.stride_h, g.stride_w) {
            (true, 1, 1) => KernelShape::K3S1,
            (true, 2, 2) => KernelShape::K3S2,
            _ => KernelShape::Any,
        };
        PhaseLayout {
            phase_rows,
            phase_cols,
            phase_len,
            tap_offsets,
            column_spans,
            shape,
        }
    }

    pub(super) fn phases_len(&self, g: &Conv2d) -> usize {
        g.stride_h * g.stride_w * self.phase_len
    }

    /// Grid rows per block.
    fn block_rows(&self, g: &Conv2d) -> usize {
        match self.shape {
            // No grid: the whole plane in one block.
            KernelShape::K3S1 | KernelShape::K3S2 => g.out_h,
            KernelShape::Any => (GRID_BLOCK_FLOATS / self.phase_cols).clamp(1, g.out_h),
        }
    }

    /// Floats of grid scratch.
    fn grid_len(&self, g: &Conv2d) -> usize {
        match self.shape {
            KernelShape::K3S1 | KernelShape::K3S2 => 0,
            KernelShape::Any => self.block_rows(g) * self.phase_cols,
        }
    }
}

/// Everything the workers share.
struct Job<'a> {
    geom: &'a Conv2d,
    layout: PhaseLayout,
    input: &'a [f32],
    weights: &'a [f32],
    epilogue: &'a ConvEpilogue<'a>,
    /// Each worker writes only the planes of its own channels.
    output: SendPtr<f32>,
}

thread_local! {
    /// Phase planes and grid block of the current worker, reused across calls.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Depthwise convolution with the best kernels this CPU has. `weights` are
/// `[channels, 1, kh, kw]`; `output` is `[batch, channels, out_h, out_w]`.
pub fn depthwise_conv2d(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    threads: usize,
) {
    depthwise_conv2d_with(
        Isa::detect(),
        geom,
        input,
        weights,
        epilogue,
        output,
        threads,
    );
}

/// Whether [`depthwise_conv2d_nhwc_input`] runs `geom` on this CPU: one image, AVX-512 or
/// AVX2, and planes small enough for the channel-per-lane kernel.
pub fn nhwc_input_applies(geom: &Conv2d) -> bool {
    cfg!(target_arch = "x86_64")
        && geom.is_depthwise()
        && geom.batch == 1
        && match Isa::detect() {
            Isa::Avx512 => SmallPlaneTaps::applies(geom),
            Isa::Avx2Fma => SmallPlaneTaps::applies_avx2(geom),
            Isa::Scalar => false,
        }
}

/// [`depthwise_conv2d`] of an input held NHWC (`input[pixel · C + channel]`, one image), the
/// output NCHW as usual. The channel-per-lane kernel reads each pixel's channel vector with one
/// load where the NCHW input needs a 16×16 (AVX2: 8×8) transpose per vector of pixels and channels: a
/// pointwise convolution run pixel-major writes its output so (no transpose back) for the
/// depthwise convolution that reads it (`exec::plan`'s NHWC pairs).
///
/// # Panics
/// When [`nhwc_input_applies`] is false for `geom`, or a slice is shorter than it says.
pub fn depthwise_conv2d_nhwc_input(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    threads: usize,
) {
    assert!(
        nhwc_input_applies(geom),
        "no NHWC depthwise kernel for this geometry"
    );
    let out_len = geom.in_channels * geom.out_h * geom.out_w;
    assert!(input.len() >= geom.in_channels * geom.in_h * geom.in_w);
    assert!(weights.len() >= geom.in_channels * geom.kernel_h * geom.kernel_w);
    assert!(output.len() >= out_len);
    assert!(epilogue.bias.is_none_or(|b| b.len() >= geom.in_channels));
    assert!(epilogue.residual.is_none_or(|r| r.len() >= out_len));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the detected ISA has the kernel (`nhwc_input_applies`); slices were checked above.
    unsafe {
        small_planes(
            Isa::detect(),
            geom,
            input,
            SmallPlaneInput::Nhwc,
            weights,
            epilogue,
            output,
            threads,
        )
    };
}

/// As [`depthwise_conv2d`] with a chosen ISA variant (falls back to scalar when the CPU lacks it).
///
/// # Panics
/// When a slice is shorter than the geometry says (a caller bug: shapes are validated first).
pub fn depthwise_conv2d_with(
    isa: Isa,
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    threads: usize,
) {
    assert!(geom.is_depthwise() || geom.in_channels == geom.out_channels);
    let channels = geom.batch * geom.in_channels;
    let taps = geom.kernel_h * geom.kernel_w;
    let out_len = channels * geom.out_h * geom.out_w;
    assert!(
        input.len() >= channels * geom.in_h * geom.in_w,
        "depthwise input too short"
    );
    assert!(
        weights.len() >= geom.in_channels * taps,
        "depthwise weights too short"
    );
    assert!(output.len() >= out_len, "depthwise output too short");
    assert!(epilogue.bias.is_none_or(|b| b.len() >= geom.in_channels));
    assert!(epilogue.residual.is_none_or(|r| r.len() >= out_len));
    if out_len == 0 {
        return;
    }
    let isa = if isa.is_available() { isa } else { Isa::Scalar };
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && rows_3x3_applies(geom) {
        let out = SendPtr(output.as_mut_ptr());
        for_plane_ranges(threads, channels, |range| {
            // SAFETY: AVX-512F is available; slices were checked against the geometry, and
            // each task writes only the planes of its own channels.
            unsafe { rows_3x3_avx512(geom, input, weights, epilogue, out, range) }
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2Fma
        && rows_avx2::rows_3x3_avx2_fits(geom)
        && !SmallPlaneTaps::applies_avx2(geom)
    {
        let out = SendPtr(output.as_mut_ptr());
        for_plane_ranges(threads, channels, |range| {
            // SAFETY: AVX2 and FMA are available; slices were checked against the geometry,
            // and each task writes only the planes of its own channels.
            unsafe { rows_avx2::rows_3x3_avx2(geom, input, weights, epilogue, out, range) }
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if (isa == Isa::Avx512 && SmallPlaneTaps::applies(geom))
        || (isa == Isa::Avx2Fma && SmallPlaneTaps::applies_avx2(geom))
    {
        // SAFETY: `isa` is available; slices were checked against the geometry.
        unsafe {
            small_planes(
                isa,
                geom,
                input,
                SmallPlaneInput::Nchw,
                weights,
                epilogue,
                output,
                threads,
            )
        };
        return;
    }
    let job = Job {
        geom,
        layout: PhaseLayout::new(geom),
        input,
        weights,
        epilogue,
        output: SendPtr(output.as_mut_ptr()),
    };
    for_plane_ranges(threads, channels, |range| {
        // SAFETY: `isa` is available (checked above); slices were checked against the geometry.
        unsafe {
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run_avx512(&job, range),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2Fma => run_avx2(&job, range),
                _ => run::<f32>(&job, range),
            }
        }
    });
}

/// Runs `work` over the planes `0..planes` split into ranges of whole planes, about four per
/// thread (one range when single-threaded), one task each.
fn for_plane_ranges(threads: usize, planes: usize, work: impl Fn(Range<usize>) + Sync + Send) {
    let tasks = if threads <= 1 {
        1
    } else {
        (threads * 4).min(planes)
    };
    let per_task = planes.div_ceil(tasks.max(1));
    parallel_for(threads, planes.div_ceil(per_task), |task| {
        work(task * per_task..((task + 1) * per_task).min(planes))
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(job: &Job, channels: Range<usize>) {
    run::<__m512>(job, channels)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(job: &Job, channels: Range<usize>) {
    run::<__m256>(job, channels)
}

/// Convolves the channel planes `channels` (indices over batch × channels).
#[inline(always)]
unsafe fn run<V: Vf32>(job: &Job, channels: Range<usize>) {
    let g = job.geom;
    let lay = &job.layout;
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    let taps = g.kernel_h * g.kernel_w;
    let phases_len = lay.phases_len(g);
    let grid_len = lay.grid_len(g);
    // Taken out of the thread-local rather than used inside `with`: a closure would not
    // inherit this function's target features, and the vector code must run here.
    let mut scratch = SCRATCH.with(|cell| cell.take());
    if scratch.len() < phases_len + grid_len {
        scratch.resize(phases_len + grid_len, 0.0);
    }
    let (phases, rest) = scratch.split_at_mut(phases_len);
    // Padding (and the slack after each plane) is zeroed once per call; the channels then only
    // rewrite the interior (see `fill_phases`).
    phases.fill(0.0);
    let grid = &mut rest[..grid_len];
    let last_plane = channels.end;
    for plane_index in channels {
        let channel = plane_index % g.in_channels;
        let plane = &job.input[plane_index * in_plane..(plane_index + 1) * in_plane];
        let next_plane = if plane_index + 1 < last_plane {
            job.input[(plane_index + 1) * in_plane..].as_ptr()
        } else {
            std::ptr::null()
        };
        fill_phases::<V>(g, lay, plane, phases);
        let kernel = &job.weights[channel * taps..(channel + 1) * taps];
        let bias = job.epilogue.bias.map_or(0.0, |b| b[channel]);
        let out = job.output.0.add(plane_index * out_plane);
        let residual = job
            .epilogue
            .residual
            .map(|r| r[plane_index * out_plane..].as_ptr());
        let block_rows = lay.block_rows(g);
        let mut y0 = 0;
        while y0 < g.out_h {
            let rows = block_rows.min(g.out_h - y0);
            let block = GridBlock {
                phases: phases.as_ptr(),
                phase_len: lay.phase_len,
                cols: lay.phase_cols,
                first_row: y0,
                rows,
                out_w: g.out_w,
                out,
                residual,
                activation: &job.epilogue.activation,
                next_plane,
                next_len: in_plane,
            };
            match lay.shape {
                // These write the output rows themselves, epilogue applied in registers.
                KernelShape::K3S1 => accumulate_3x3::<V, 1>(&block, kernel, bias),
                KernelShape::K3S2 => accumulate_3x3::<V, 2>(&block, kernel, bias),
                KernelShape::Any => {
                    accumulate::<V>(
                        phases.as_ptr(),
                        &lay.tap_offsets,
                        kernel,
                        bias,
                        y0 * lay.phase_cols,
                        rows * lay.phase_cols,
                        grid.as_mut_ptr(),
                    );
                    for r in 0..rows {
                        let y = y0 + r;
                        write_row::<V>(
                            grid.as_ptr().add(r * lay.phase_cols),
                            out.add(y * g.out_w),
                            g.out_w,
                            residual.map(|p| p.add(y * g.out_w)),
                            &job.epilogue.activation,
                        );
                    }
                }
            }
            y0 += rows;
        }
    }
    SCRATCH.with(|cell| cell.replace(scratch));
}

/// Copies one channel plane into the interior of its phase planes. Only positions that hold an
/// input element are written, and they are the same for every channel, so the padding zeroed
/// once per call stays zero: no per-row fills (the rows are short, 7 to 114 floats, and the
/// per-row bookkeeping cost more than the copies).
#[inline(always)]
pub(super) unsafe fn fill_phases<V: Vf32>(
    g: &Conv2d,
    lay: &PhaseLayout,
    plane: &[f32],
    phases: &mut [f32],
) {
    let (sh, sw) = (g.stride_h, g.stride_w);
    let cols = lay.phase_cols;
    let (pt, pl) = (g.pad_top, g.pad_left);
    // Input rows that land inside the phase planes (the bottom ones may be beyond any window).
    let rows = g.in_h.min((lay.phase_rows * sh).saturating_sub(pt));
    let base = phases.as_mut_ptr();
    let (mut i, mut q) = (pt / sh, pt % sh);
    for iy in 0..rows {
        let src = plane.as_ptr().add(iy * g.in_w);
        let row = |p: usize| base.add((q * sw + p) * lay.phase_len + i * cols);
        match sw {
            1 => {
                let n = g.in_w.min(cols.saturating_sub(pl));
                copy_raw::<V>(src, row(0).add(pl), n);
            }
            2 => {
                // Source column c goes to phase (c + pl) % 2 at index (c + pl) / 2: even columns
                // to phase pl % 2 from index pl / 2, odd ones to the other from (pl + 1) / 2.
                let (even_at, odd_at) = (pl / 2, pl.div_ceil(2));
                let even_n = g.in_w.div_ceil(2).min(cols.saturating_sub(even_at));
                let odd_n = (g.in_w / 2).min(cols.saturating_sub(odd_at));
                deinterleave_raw::<V>(
                    src,
                    g.in_w,
                    row(pl % 2).wrapping_add(even_at),
                    even_n,
                    row((pl + 1) % 2).wrapping_add(odd_at),
                    odd_n,
                );
            }
            _ => {
                for (p, &(first, last)) in lay.column_spans.iter().enumerate() {
                    let dst = row(p);
                    for j in first..last {
                        *dst.add(j) = *src.add(j * sw + p - pl);
                    }
                }
            }
        }
        q += 1;
        if q == sh {
            q = 0;
            i += 1;
        }
    }
}

/// `dst[j] = src[j]` for `j < n`, full registers unmasked, the tail masked.
#[inline(always)]
unsafe fn copy_raw<V: Vf32>(src: *const f32, dst: *mut f32, n: usize) {
    let mut j = 0;
    while j + V::LANES <= n {
        V::store(dst.add(j), V::load(src.add(j)));
        j += V::LANES;
    }
    if j < n {
        V::store_n(dst.add(j), V::load_n(src.add(j), n - j), n - j);
    }
}

/// Splits the `len` floats at `src` into `even[k] = src[2k]` (`k < even_n`) and
/// `odd[k] = src[2k + 1]` (`k < odd_n`) in one pass.
#[inline(always)]
unsafe fn deinterleave_raw<V: Vf32>(
    src: *const f32,
    len: usize,
    even: *mut f32,
    even_n: usize,
    odd: *mut f32,
    odd_n: usize,
) {
    let l = V::LANES;
    let n = even_n.max(odd_n);
    let mut k = 0;
    while k + l <= n && 2 * k + 2 * l <= len {
        let (e, o) = V::deinterleave2(V::load(src.add(2 * k)), V::load(src.add(2 * k + l)));
        if k + l <= even_n {
            V::store(even.add(k), e);
        } else {
            V::store_n(even.wrapping_add(k), e, even_n.saturating_sub(k));
        }
        if k + l <= odd_n {
            V::store(odd.add(k), o);
        } else {
            V::store_n(odd.wrapping_add(k), o, odd_n.saturating_sub(k));
        }
        k += l;
    }
    while k < n {
        let avail = len.saturating_sub(2 * k);
        let (e, o) = V::deinterleave2(
            V::load_n(src.wrapping_add(2 * k), avail.min(l)),
            V::load_n(src.wrapping_add(2 * k + l), avail.saturating_sub(l).min(l)),
        );
        V::store_n(even.wrapping_add(k), e, even_n.saturating_sub(k).min(l));
        V::store_n(odd.wrapping_add(k), o, odd_n.saturating_sub(k).min(l));
        k += l;
    }
}

/// `grid[i] = bias + Σ_t w_t · phases[tap_t + start + i]` for `i < len`.
#[inline(always)]
unsafe fn accumulate<V: Vf32>(
    phases: *const f32,
    tap_offsets: &[usize],
    kernel: &[f32],
    bias: f32,
    start: usize,
    len: usize,
    grid: *mut f32,
) {
    let l = V::LANES;
    let mut x = 0;
    // Four independent accumulators hide the FMA latency.
    while x + 4 * l <= len {
        let mut acc = [V::splat(bias); 4];
        for (&offset, &w) in tap_offsets.iter().zip(kernel) {
            let src = phases.add(offset + start + x);
            let w = V::splat(w);
            for (v, a) in acc.iter_mut().enumerate() {
                *a = V::fma(V::load(src.add(v * l)), w, *a);
            }
        }
        for (v, a) in acc.iter().enumerate() {
            V::store(grid.add(x + v * l), *a);
        }
        x += 4 * l;
    }
    if x < len {
        // The last partial block: up to four vectors, the later ones masked.
        let lanes = |v: usize| (len - x).saturating_sub(v * l).min(l);
        let mut acc = [V::splat(bias); 4];
        for (&offset, &w) in tap_offsets.iter().zip(kernel) {
            let src = phases.add(offset + start + x);
            let w = V::splat(w);
            for (v, a) in acc.iter_mut().enumerate() {
                *a = V::fma(V::load_n(src.wrapping_add(v * l), lanes(v)), w, *a);
            }
        }
        for (v, a) in acc.iter().enumerate() {
            V::store_n(grid.wrapping_add(x + v * l), *a, lanes(v));
        }
    }
}

/// Output rows `first_row..first_row + rows` of one channel, computed from its phase planes.
struct GridBlock<'a> {
    phases: *const f32,
    phase_len: usize,
    /// Phase plane width (the grid's row stride).
    cols: usize,
    first_row: usize,
    rows: usize,
    out_w: usize,
    /// The channel's output plane (row stride `out_w`) and residual, if any.
    out: *mut f32,
    residual: Option<*const f32>,
    activation: &'a Activation,
    /// The next channel's input plane (`next_len` floats), fetched while this one computes.
    next_plane: *const f32,
    next_len: usize,
}

/// 3×3 taps, dilation 1, stride `S` in both directions: four output rows by two vectors (one
/// on AVX2) at a time, stored straight to the output with the epilogue (no grid round trip). The loops are
/// over constants, so they unroll completely and the loads of the same
/// input vector for different (output row, tap row) pairs (rows `y + j + ky / S` coincide)
/// become one: about half a load per FMA instead of one, which is what limits the flat loop.
#[inline(always)]
unsafe fn accumulate_3x3<V: Vf32, const S: usize>(block: &GridBlock, kernel: &[f32], bias: f32) {
    // Prefetch the next plane in step with the row blocks: its fill then finds it in cache
    // instead of waiting on L3 or DRAM with nothing else to do.
    // Two vectors per row on AVX-512 (8 accumulators + 9 weights of 32 registers); one
    // otherwise (AVX2 takes its own rows kernel for these shapes, `rows_avx2`).
    if V::LANES >= 16 {
        rows_3x3_blocks::<V, S, 2, 4>(block, kernel, bias);
    } else {
        rows_3x3_blocks::<V, S, 1, 4>(block, kernel, bias);
    }
}

/// The row blocks of [`accumulate_3x3`], `C` vectors per output row.
#[inline(always)]
unsafe fn rows_3x3_blocks<V: Vf32, const S: usize, const C: usize, const R: usize>(
    block: &GridBlock,
    kernel: &[f32],
    bias: f32,
) {
    // Floats of the next plane prefetched per block of R rows.
    let per_block = (block.next_len * R)
        .div_ceil(block.rows.max(1))
        .next_multiple_of(16);
    let mut r = 0;
    while r + R <= block.rows {
        if !block.next_plane.is_null() {
            let from = (r / R) * per_block;
            let mut at = from;
            while at < (from + per_block).min(block.next_len) {
                V::prefetch(block.next_plane.wrapping_add(at));
                at += 16;
            }
        }
        rows_3x3::<V, S, R, C>(block, r, kernel, bias);
        r += R;
    }
    match block.rows - r {
        5 => rows_3x3::<V, S, 5, C>(block, r, kernel, bias),
        4 => rows_3x3::<V, S, 4, C>(block, r, kernel, bias),
        3 => rows_3x3::<V, S, 3, C>(block, r, kernel, bias),
        2 => rows_3x3::<V, S, 2, C>(block, r, kernel, bias),
        1 => rows_3x3::<V, S, 1, C>(block, r, kernel, bias),
        _ => {}
    }
}

/// `R` output rows of `C` vectors from block row `r` (see [`accumulate_3x3`]), written with
/// the epilogue.
#[inline(always)]
unsafe fn rows_3x3<V: Vf32, const S: usize, const R: usize, const C: usize>(
    block: &GridBlock,
    r: usize,
    kernel: &[f32],
    bias: f32,
) {
    let l = V::LANES;
    let w: [V; 9] = std::array::from_fn(|t| V::splat(kernel[t]));
    let cols = block.cols;
    let first = block.first_row + r;
    let mut x = 0;
    while x < block.out_w {
        let lanes = |v: usize| (block.out_w - x).saturating_sub(v * l).min(l);
        let full = block.out_w - x >= C * l;
        let mut acc = [[V::splat(bias); C]; R];
        for ky in 0..3 {
            for kx in 0..3 {
                let phase = ((ky % S) * S + kx % S) * block.phase_len;
                for (j, row_acc) in acc.iter_mut().enumerate() {
                    let src = block
                        .phases
                        .add(phase + (first + j + ky / S) * cols + kx / S + x);
                    for (v, a) in row_acc.iter_mut().enumerate() {
                        let input = if full {
                            V::load(src.add(v * l))
                        } else {
                            V::load_n(src.wrapping_add(v * l), lanes(v))
                        };
                        *a = V::fma(input, w[ky * 3 + kx], *a);
                    }
                }
            }
        }
        for (j, row_acc) in acc.iter().enumerate() {
            let at = (first + j) * block.out_w + x;
            let dst = block.out.add(at);
            for (v, a) in row_acc.iter().enumerate() {
                let n = lanes(v);
                let mut value = *a;
                if let Some(res) = block.residual {
                    let res = res.wrapping_add(at + v * l);
                    value = V::add(
                        value,
                        if full {
                            V::load(res)
                        } else {
                            V::load_n(res, n)
                        },
                    );
                }
                let value = activate(block.activation, value);
                if full {
                    V::store(dst.add(v * l), value);
                } else {
                    V::store_n(dst.wrapping_add(v * l), value, n);
                }
            }
        }
        x += C * l;
    }
}

/// `dst[x] = act(src[x] + residual[x])` for `x < n`.
#[inline(always)]
pub(super) unsafe fn write_row<V: Vf32>(
    src: *const f32,
    dst: *mut f32,
    n: usize,
    residual: Option<*const f32>,
    activation: &Activation,
) {
    let l = V::LANES;
    let mut x = 0;
    while x + l <= n {
        let mut v = V::load(src.add(x));
        if let Some(r) = residual {
            v = V::add(v, V::load(r.add(x)));
        }
        V::store(dst.add(x), activate(activation, v));
        x += l;
    }
    if x < n {
        let lanes = n - x;
        let mut v = V::load_n(src.add(x), lanes);
        if let Some(r) = residual {
            v = V::add(v, V::load_n(r.add(x), lanes));
        }
        V::store_n(dst.add(x), activate(activation, v), lanes);
    }
}

#[cfg(test)]
mod tests;
