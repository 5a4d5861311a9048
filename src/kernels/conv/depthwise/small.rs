//! The channel-per-lane kernel for small planes: sixteen channels per vector on AVX-512 (at
//! most 256 outputs), eight on AVX2 (at most 1024 outputs, 4096 inputs); each tap one FMA for
//! a vector of channels. An NCHW input is brought in by 16×16 (8×8) register transposes; an
//! NHWC one (the plan's pointwise → depthwise pairs) is loaded a pixel at a time. Results go
//! back to NCHW by the same transposes, with the epilogue.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::kernels::conv::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm::act::activate;
#[cfg(target_arch = "x86_64")]
use crate::kernels::gemm::act::{with_loop_activation, LoopActivation};
use crate::kernels::gemm::simd::Vf32;
#[cfg(target_arch = "x86_64")]
use crate::kernels::gemm::Isa;
use crate::kernels::parallel::{parallel_for, SendPtr};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m512};

/// The small-plane kernel over all planes, blocks of one vector's channels (sixteen on
/// AVX-512, eight on AVX2) split across `threads`. `isa` must be AVX-512 or AVX2 and available.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn small_planes(
    isa: Isa,
    geom: &Conv2d,
    input: &[f32],
    layout: SmallPlaneInput,
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: &mut [f32],
    threads: usize,
) {
    let lanes = if isa == Isa::Avx512 { 16 } else { 8 };
    let channels = geom.batch * geom.in_channels;
    let small = SmallPlaneTaps::cached(geom);
    let blocks = channels.div_ceil(lanes);
    let tasks = if threads <= 1 {
        1
    } else {
        (threads * 4).min(blocks)
    };
    let per_task = blocks.div_ceil(tasks.max(1)) * lanes;
    let out = SendPtr(output.as_mut_ptr());
    parallel_for(threads, channels.div_ceil(per_task), |task| {
        let range = task * per_task..((task + 1) * per_task).min(channels);
        // SAFETY: the caller checked the ISA and the slices; each task writes only the planes
        // of its own channels.
        unsafe {
            if isa == Isa::Avx512 {
                small_planes_avx512(geom, &small, input, layout, weights, epilogue, out, range)
            } else {
                small_planes_avx2(geom, &small, input, layout, weights, epilogue, out, range)
            }
        }
    });
}

/// `c mod channels` for a `c` a few multiples past it at most (a lane of a block of planes
/// whose batch runs on past C): subtractions, not a division per lane.
#[inline(always)]
fn wrap_channel(mut c: usize, channels: usize) -> usize {
    while c >= channels {
        c -= channels;
    }
    c
}

/// How the small-plane kernel's input is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SmallPlaneInput {
    Nchw,
    /// One image, channels innermost.
    Nhwc,
}

/// Small planes, sixteen channels at a time, one per AVX-512 lane: each input pixel of sixteen
/// planes is gathered into one vector, every tap is then one FMA for sixteen channels with no
/// masking or padding logic, and each output vector is scattered back to the sixteen planes.
/// At 7×7 and 14×14 the per-channel kernel spends most of its time on fixed costs (copying the
/// plane, short masked rows); here those are shared by sixteen channels.
///
/// The pixel vectors sit in a zero-bordered grid (`pitch` wide), so every output pixel reads
/// its taps at the same offsets from its own base, borders included: eight pixels of a row are
/// eight independent FMA chains over one list of offsets (a per-pixel list of in-bounds taps
/// kept the border pixels, half of a 14×14 plane's groups, on loads of tap indices).
pub(super) struct SmallPlaneTaps {
    /// Grid index of each input pixel (row-major over the input plane).
    grid_at: Vec<u32>,
    /// Vectors in the grid, with slack for the unstored pixels of each row's last block.
    grid_len: usize,
    /// Grid columns per row.
    pitch: usize,
    /// Grid offset of each tap (row-major over the kernel) from its output pixel's base.
    tap_offsets: Vec<u32>,
}

/// Largest output and input planes of the AVX2 small-plane kernel.
const AVX2_MAX_OUT: usize = 1024;
const AVX2_MAX_IN: usize = 4096;

/// Output pixels of one row computed together (independent FMA chains).
const SMALL_PLANE_PIXELS: usize = 8;

impl SmallPlaneTaps {
    /// Output and input planes small enough for the gathered input (`in_plane` vectors) to
    /// stay in L1/L2.
    pub(super) fn applies(g: &Conv2d) -> bool {
        g.out_h * g.out_w <= 256 && g.in_h * g.in_w <= 1024
    }

    /// Whether the eight-channel AVX2 kernel takes `g`: its pixel vectors are half the
    /// size, so planes up to twice as large keep the grid in L1/L2.
    pub(super) fn applies_avx2(g: &Conv2d) -> bool {
        g.out_h * g.out_w <= AVX2_MAX_OUT && g.in_h * g.in_w <= AVX2_MAX_IN
    }

    /// The grid of `g`'s plane geometry, built once per geometry and process.
    fn cached(g: &Conv2d) -> Arc<SmallPlaneTaps> {
        /// Geometries kept (a model has a handful of small-plane depthwise shapes).
        const KEEP: usize = 64;
        static CACHE: Mutex<Vec<(Conv2d, Arc<SmallPlaneTaps>)>> = Mutex::new(Vec::new());
        // Channels and batch do not change the grid.
        let key = Conv2d {
            batch: 0,
            in_channels: 0,
            out_channels: 0,
            group: 0,
            ..*g
        };
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, taps)) = cache.iter().find(|(k, _)| *k == key) {
            return taps.clone();
        }
        let taps = Arc::new(SmallPlaneTaps::new(g));
        if cache.len() == KEEP {
            cache.remove(0);
        }
        cache.push((key, taps.clone()));
        taps
    }

    fn new(g: &Conv2d) -> SmallPlaneTaps {
        // A valid output pixel's reads must stay inside its own grid row, so the pitch covers
        // the last valid pixel's widest tap as well as the padded input row.
        let reach_w = (g.out_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1;
        let pitch = (g.pad_left + g.in_w).max(reach_w);
        let reach_h = (g.out_h - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
        let rows = (g.pad_top + g.in_h).max(reach_h);
        // The last block of a row computes up to SMALL_PLANE_PIXELS pixels, stored or not.
        let last_base = (g.out_h - 1) * g.stride_h * pitch
            + (g.out_w.next_multiple_of(SMALL_PLANE_PIXELS) - 1) * g.stride_w;
        let widest_tap = (g.kernel_h - 1) * g.dilation_h * pitch + (g.kernel_w - 1) * g.dilation_w;
        let grid_len = (rows * pitch).max(last_base + widest_tap + 1);
        let grid_at = (0..g.in_h * g.in_w)
            .map(|q| ((q / g.in_w + g.pad_top) * pitch + q % g.in_w + g.pad_left) as u32)
            .collect();
        let tap_offsets = (0..g.kernel_h * g.kernel_w)
            .map(|t| {
                let (ky, kx) = (t / g.kernel_w, t % g.kernel_w);
                (ky * g.dilation_h * pitch + kx * g.dilation_w) as u32
            })
            .collect();
        SmallPlaneTaps {
            grid_at,
            grid_len,
            pitch,
            tap_offsets,
        }
    }
}

/// Writes the transpose of the 16×16 block `r` (row `i` = 16 floats) to `rows`: 64 shuffles
/// in four rounds (pairs of rows, pairs of pairs by 64-bit halves, then 128-bit lanes twice).
/// The source is read in place: copying a block out of memory first is a call to memmove.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose16(r: &[__m512; 16], rows: &mut [__m512; 16]) {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4i + k]: column k (and k + 4, k + 8, k + 12 in the upper 128-bit lanes) of rows
    // 4i..4i + 4.
    let mut u = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        let pd = |v: __m512| _mm512_castps_pd(v);
        let (a, b) = (pd(t[4 * i]), pd(t[4 * i + 2]));
        let (c, d) = (pd(t[4 * i + 1]), pd(t[4 * i + 3]));
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for k in 0..4 {
        let v_lo = _mm512_shuffle_f32x4::<0x88>(u[k], u[4 + k]);
        let w_lo = _mm512_shuffle_f32x4::<0xDD>(u[k], u[4 + k]);
        let v_hi = _mm512_shuffle_f32x4::<0x88>(u[8 + k], u[12 + k]);
        let w_hi = _mm512_shuffle_f32x4::<0xDD>(u[8 + k], u[12 + k]);
        rows[k] = _mm512_shuffle_f32x4::<0x88>(v_lo, v_hi);
        rows[k + 8] = _mm512_shuffle_f32x4::<0xDD>(v_lo, v_hi);
        rows[k + 4] = _mm512_shuffle_f32x4::<0x88>(w_lo, w_hi);
        rows[k + 12] = _mm512_shuffle_f32x4::<0xDD>(w_lo, w_hi);
    }
}

/// The planes `planes` (indices over batch × channels) with [`SmallPlaneTaps`]. Sixteen
/// planes are brought into pixel-major vectors (lane = plane) by 16×16 transposes of
/// 16-pixel blocks, and the results go back the same way.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn small_planes_avx512(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    input: &[f32],
    layout: SmallPlaneInput,
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
) {
    use std::arch::x86_64::*;
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    let taps = g.kernel_h * g.kernel_w;
    let zero = _mm512_setzero_ps();
    // Border cells are never written: they stay zero for every block of planes.
    let mut grid = vec![zero; small.grid_len];
    let mut pixels_out = vec![zero; out_plane.next_multiple_of(16)];
    let mut kernel = vec![zero; taps];
    let mut block = [zero; 16];
    let pixel_mask = |q0: usize, len: usize| -> __mmask16 {
        let m = (len - q0).min(16);
        ((1u32 << m) - 1) as __mmask16
    };
    let mut p0 = planes.start;
    while p0 < planes.end {
        let n = (planes.end - p0).min(16);
        // Lane l: plane p0 + l, channel (p0 + l) mod C (one division per block: the lanes'
        // channels are consecutive, wrapping at C, several times when C is under sixteen and
        // the batch runs on); lanes past n get index 0 and compute zeros.
        let c0 = p0 % g.in_channels;
        let channels: [i32; 16] = std::array::from_fn(|l| {
            if l < n {
                wrap_channel(c0 + l, g.in_channels) as i32
            } else {
                0
            }
        });
        let channels = _mm512_loadu_si512(channels.as_ptr() as *const _);
        let lane_mask = ((1u32 << n) - 1) as __mmask16;
        let first_tap = _mm512_mullo_epi32(channels, _mm512_set1_epi32(taps as i32));
        for (t, k) in kernel.iter_mut().enumerate() {
            let index = _mm512_add_epi32(first_tap, _mm512_set1_epi32(t as i32));
            *k =
                _mm512_mask_i32gather_ps::<4>(zero, lane_mask, index, weights.as_ptr() as *const _);
        }
        let bias = match epilogue.bias {
            Some(b) => {
                _mm512_mask_i32gather_ps::<4>(zero, lane_mask, channels, b.as_ptr() as *const _)
            }
            None => zero,
        };
        match layout {
            SmallPlaneInput::Nhwc => {
                // One image: plane p0 + l is channel p0 + l, and each pixel's sixteen
                // channels are one (masked) load.
                let base = input.as_ptr().add(p0);
                for q in 0..in_plane {
                    let pixel = _mm512_maskz_loadu_ps(lane_mask, base.add(q * g.in_channels));
                    *grid.get_unchecked_mut(*small.grid_at.get_unchecked(q) as usize) = pixel;
                }
            }
            SmallPlaneInput::Nchw => {
                let base = input.as_ptr().add(p0 * in_plane);
                for q0 in (0..in_plane).step_by(16) {
                    let m = pixel_mask(q0, in_plane);
                    for (l, row) in block.iter_mut().enumerate() {
                        *row = if l < n {
                            _mm512_maskz_loadu_ps(m, base.add(l * in_plane + q0))
                        } else {
                            zero
                        };
                    }
                    let loaded = block;
                    transpose16(&loaded, &mut block);
                    for (j, pixel) in block.iter().enumerate().take(in_plane - q0) {
                        let at = *small.grid_at.get_unchecked(q0 + j) as usize;
                        *grid.get_unchecked_mut(at) = *pixel;
                    }
                }
            }
        }
        small_planes_grid_avx512(g, small, &grid, &kernel, bias, &mut pixels_out);
        let out = output.get().add(p0 * out_plane);
        let residual = epilogue.residual.map(|r| r.as_ptr().add(p0 * out_plane));
        for q0 in (0..out_plane).step_by(16) {
            let m = pixel_mask(q0, out_plane);
            transpose16(
                &*(pixels_out.as_ptr().add(q0) as *const [__m512; 16]),
                &mut block,
            );
            for (l, row) in block.iter().enumerate().take(n) {
                let at = l * out_plane + q0;
                let mut v = *row;
                if let Some(r) = residual {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r.add(at)));
                }
                _mm512_mask_storeu_ps(out.add(at), m, activate(&epilogue.activation, v));
            }
        }
        p0 += n;
    }
}

/// The output pixels of one vector of planes (lane = plane) from their gathered `grid`, bias
/// first. `STRIDE` is the column stride when it is 1 or 2 (each FMA's address is then the
/// tap's offset plus a constant: one instruction per FMA instead of four), 0 for any other.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn small_planes_grid<V: Vf32, const STRIDE: usize>(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    grid: &[V],
    kernel: &[V],
    bias: V,
    pixels_out: &mut [V],
) {
    const P: usize = SMALL_PLANE_PIXELS;
    let stride_w = if STRIDE == 0 { g.stride_w } else { STRIDE };
    let grid = grid.as_ptr();
    let out = pixels_out.as_mut_ptr();
    for y in 0..g.out_h {
        let row = y * g.stride_h * small.pitch;
        for x0 in (0..g.out_w).step_by(P) {
            let base = grid.add(row + x0 * stride_w);
            let mut acc = [bias; P];
            for (k, &off) in kernel.iter().zip(&small.tap_offsets) {
                let at = base.add(off as usize);
                for (i, a) in acc.iter_mut().enumerate() {
                    // In bounds: `grid_len` covers every block's last pixel's widest tap.
                    *a = V::fma(*k, *at.add(i * stride_w), *a);
                }
            }
            let valid = (g.out_w - x0).min(P);
            let first = out.add(y * g.out_w + x0);
            // Element stores, not `copy_from_slice` (a call to memmove per block).
            for (i, a) in acc.iter().enumerate() {
                if i < valid {
                    *first.add(i) = *a;
                }
            }
        }
    }
}

/// [`small_planes_grid`] for AVX-512 vectors, dispatched on the column stride.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn small_planes_grid_avx512(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    grid: &[__m512],
    kernel: &[__m512],
    bias: __m512,
    pixels_out: &mut [__m512],
) {
    match g.stride_w {
        1 => small_planes_grid::<__m512, 1>(g, small, grid, kernel, bias, pixels_out),
        2 => small_planes_grid::<__m512, 2>(g, small, grid, kernel, bias, pixels_out),
        _ => small_planes_grid::<__m512, 0>(g, small, grid, kernel, bias, pixels_out),
    }
}

/// [`small_planes_grid`] for AVX2 vectors, dispatched on the column stride.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn small_planes_grid_avx2(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    grid: &[__m256],
    kernel: &[__m256],
    bias: __m256,
    pixels_out: &mut [__m256],
) {
    match g.stride_w {
        1 => small_planes_grid::<__m256, 1>(g, small, grid, kernel, bias, pixels_out),
        2 => small_planes_grid::<__m256, 2>(g, small, grid, kernel, bias, pixels_out),
        _ => small_planes_grid::<__m256, 0>(g, small, grid, kernel, bias, pixels_out),
    }
}

/// The 8×8 transpose of the rows at `rows[i]` (eight readable floats each): element `j` of
/// the result `i` is `rows[j][i]`. Each 128-bit half is loaded on its own (rows `k` and
/// `k + 4` share a register), so only in-lane shuffles remain: 16 for 64 floats. Zen 1 runs
/// a lane-crossing `vperm2f128` as eight micro-ops, an `vinsertf128` from memory as two.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose8(rows: [*const f32; 8]) -> [__m256; 8] {
    use std::arch::x86_64::*;
    let half = |row: usize, col: usize| {
        _mm256_insertf128_ps::<1>(
            _mm256_castps128_ps256(_mm_loadu_ps(rows[row].add(col))),
            _mm_loadu_ps(rows[row + 4].add(col)),
        )
    };
    let mut out = [_mm256_setzero_ps(); 8];
    for col in [0, 4] {
        let t: [__m256; 4] = std::array::from_fn(|k| half(k, col));
        let (a, b) = (
            _mm256_unpacklo_ps(t[0], t[1]),
            _mm256_unpackhi_ps(t[0], t[1]),
        );
        let (c, d) = (
            _mm256_unpacklo_ps(t[2], t[3]),
            _mm256_unpackhi_ps(t[2], t[3]),
        );
        out[col] = _mm256_shuffle_ps::<0x44>(a, c);
        out[col + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
        out[col + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        out[col + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
    }
    out
}

/// [`small_planes_avx512`] with eight planes per vector: the same grid and taps, 8×8
/// transposes ([`transpose8`]) in and out, and partial blocks (the last pixels of a plane, the
/// last planes of the range) staged through a zeroed 8×8 tile instead of masked loads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn small_planes_avx2(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    input: &[f32],
    layout: SmallPlaneInput,
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
) {
    // The activation matched once here, not per output vector (12-17% of this kernel's time
    // on Zen 1 with Clip).
    with_loop_activation!(&epilogue.activation, __m256, act => {
        small_planes_avx2_with(g, small, input, layout, weights, epilogue, output, planes, act)
    })
}

/// [`small_planes_avx2`] with its activation bound.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn small_planes_avx2_with<A: LoopActivation<__m256>>(
    g: &Conv2d,
    small: &SmallPlaneTaps,
    input: &[f32],
    layout: SmallPlaneInput,
    weights: &[f32],
    epilogue: &ConvEpilogue,
    output: SendPtr<f32>,
    planes: Range<usize>,
    act: A,
) {
    use std::arch::x86_64::*;
    const L: usize = 8;
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    let taps = g.kernel_h * g.kernel_w;
    let zero = _mm256_setzero_ps();
    // Border cells are never written: they stay zero for every block of planes.
    let mut grid = vec![zero; small.grid_len];
    let mut pixels_out = vec![zero; out_plane.next_multiple_of(L)];
    let mut kernel = vec![zero; taps];
    let mut tile = [[0.0f32; L]; L];
    let mut p0 = planes.start;
    while p0 < planes.end {
        let n = (planes.end - p0).min(L);
        // Lane l: plane p0 + l, its channel wrapping at C (one division per block); lanes
        // past n compute zeros.
        let c0 = p0 % g.in_channels;
        let channel: [usize; L] = std::array::from_fn(|l| wrap_channel(c0 + l, g.in_channels));
        for (t, k) in kernel.iter_mut().enumerate() {
            let lane = |l: usize| {
                if l < n {
                    *weights.get_unchecked(channel[l] * taps + t)
                } else {
                    0.0
                }
            };
            *k = _mm256_loadu_ps(std::array::from_fn::<f32, L, _>(lane).as_ptr());
        }
        let bias = match epilogue.bias {
            Some(b) => {
                let lane = |l: usize| if l < n { b[channel[l]] } else { 0.0 };
                _mm256_loadu_ps(std::array::from_fn::<f32, L, _>(lane).as_ptr())
            }
            None => zero,
        };
        match layout {
            SmallPlaneInput::Nhwc => {
                let base = input.as_ptr().add(p0);
                // Plain loads for whole vectors: a masked `vmaskmovps` costs more on Zen 1.
                for q in 0..in_plane {
                    let at = base.add(q * g.in_channels);
                    let pixel = if n == L {
                        _mm256_loadu_ps(at)
                    } else {
                        <__m256 as Vf32>::load_n(at, n)
                    };
                    *grid.get_unchecked_mut(*small.grid_at.get_unchecked(q) as usize) = pixel;
                }
            }
            SmallPlaneInput::Nchw => {
                let base = input.as_ptr().add(p0 * in_plane);
                for q0 in (0..in_plane).step_by(L) {
                    let valid = (in_plane - q0).min(L);
                    let rows: [*const f32; L] = if valid == L && n == L {
                        std::array::from_fn(|l| base.add(l * in_plane + q0))
                    } else {
                        for (l, row) in tile.iter_mut().enumerate() {
                            row.fill(0.0);
                            if l < n {
                                let src = base.add(l * in_plane + q0);
                                row[..valid]
                                    .copy_from_slice(std::slice::from_raw_parts(src, valid));
                            }
                        }
                        std::array::from_fn(|l| tile[l].as_ptr())
                    };
                    let pixels = transpose8(rows);
                    for (j, pixel) in pixels.iter().enumerate().take(valid) {
                        let at = *small.grid_at.get_unchecked(q0 + j) as usize;
                        *grid.get_unchecked_mut(at) = *pixel;
                    }
                }
            }
        }
        small_planes_grid_avx2(g, small, &grid, &kernel, bias, &mut pixels_out);
        let out = output.get().add(p0 * out_plane);
        let residual = epilogue.residual.map(|r| r.as_ptr().add(p0 * out_plane));
        for q0 in (0..out_plane).step_by(L) {
            let valid = (out_plane - q0).min(L);
            let rows = transpose8(std::array::from_fn(|j| {
                pixels_out.as_ptr().add(q0 + j) as *const f32
            }));
            for (l, row) in rows.iter().enumerate().take(n) {
                let at = l * out_plane + q0;
                let mut v = *row;
                if valid == L {
                    if let Some(r) = residual {
                        v = _mm256_add_ps(v, _mm256_loadu_ps(r.add(at)));
                    }
                    _mm256_storeu_ps(out.add(at), act.apply(v));
                } else {
                    if let Some(r) = residual {
                        let mut res = [0.0f32; L];
                        res[..valid].copy_from_slice(std::slice::from_raw_parts(r.add(at), valid));
                        v = _mm256_add_ps(v, _mm256_loadu_ps(res.as_ptr()));
                    }
                    let mut values = [0.0f32; L];
                    _mm256_storeu_ps(values.as_mut_ptr(), act.apply(v));
                    std::ptr::copy_nonoverlapping(values.as_ptr(), out.add(at), valid);
                }
            }
        }
        p0 += n;
    }
}
