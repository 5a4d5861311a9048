//! Pooling over NCHW: max and average windows (padding, strides, dilation for max,
//! `count_include_pad` for average) and global pools. Children: `flat` (the AVX-512 kernel for
//! stride-1 "same" pools on planes of a few vectors, computed on the flattened plane),
//! `narrow` (AVX-512, planes whose output rows fit one vector) and `wide` (AVX-512 stride-1
//! windows on wider planes).

use super::movement::{fold_row, Reduction};
use super::simd::{isa_level, multiversion, IsaLevel};

mod flat;
mod narrow;
mod stride2;
mod wide;
#[cfg(target_arch = "x86_64")]
use flat::{flat_applies, flat_pool_avx512};
#[cfg(target_arch = "x86_64")]
use narrow::{narrow_planes_apply, narrow_planes_avx512};
use stride2::{stride2_kernels, Stride2, Stride2Kernels, STRIDE2_SLACK};
#[cfg(target_arch = "x86_64")]
use wide::{wide_applies, wide_pool_avx512};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    /// N·C planes.
    pub planes: usize,
    pub in_h: usize,
    pub in_w: usize,
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
}

/// Separable max pooling (see `separable_pool`) on the best variant `ROOFLINE_ISA` allows.
pub fn max_pool(p: &Pool2d, input: &[f32], output: &mut [f32]) {
    max_pool_at(isa_level(), p, input, output)
}

/// [`max_pool`] on the variant of `level` (capped by the CPU), with that level's stride-2 row
/// kernel where it has one.
pub fn max_pool_at(level: IsaLevel, p: &Pool2d, input: &[f32], output: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if own_kernel::<true>(level, p, input, output, || None) {
        return;
    }
    max_pool_with::at(level, p, input, output, stride2_kernels(level))
}

/// Runs `p` on the AVX-512 kernel that takes its geometry, if one does: the flattened-plane
/// kernel, else the narrow-plane one, else the wide stride-1 one; max (`MAX`) or sum scaled by
/// `inverse()` (the average's divisors, computed only when a kernel runs). False when none
/// applies.
#[cfg(target_arch = "x86_64")]
fn own_kernel<const MAX: bool>(
    level: IsaLevel,
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    inverse: impl FnOnce() -> Option<Vec<f32>>,
) -> bool {
    let flat = flat_applies(level, p);
    let narrow = !flat && narrow_planes_apply(level, p);
    if !flat && !narrow && !wide_applies(level, p) {
        return false;
    }
    assert!(input.len() >= p.planes * p.in_h * p.in_w);
    assert!(output.len() >= p.planes * p.out_h * p.out_w);
    let inverse = inverse();
    // SAFETY: AVX-512F is available (checked with the geometry); the slices were checked.
    unsafe {
        if flat {
            flat_pool_avx512::<MAX>(p, input, output, inverse.as_deref());
        } else if narrow {
            narrow_planes_avx512::<MAX>(p, input, output, inverse.as_deref());
        } else {
            wide_pool_avx512::<MAX>(p, input, output, inverse.as_deref());
        }
    }
    true
}

/// [`max_pool_at`] or [`avg_pool_at`] (without padding counted) through the separable path even
/// where the narrow-plane kernel applies: the benchmark's reference for it.
#[doc(hidden)]
pub fn pool_separable_at(
    level: IsaLevel,
    max: bool,
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
) {
    if max {
        max_pool_with::at(level, p, input, output, stride2_kernels(level))
    } else {
        avg_pool_with::at(level, p, false, 0, 0, input, output, stride2_kernels(level))
    }
}

multiversion! {
    // Called through `::at` only, with the level's stride-2 row kernel.
    #[allow(dead_code)]
    fn max_pool_with(p: &Pool2d, input: &[f32], output: &mut [f32], rows: Option<Stride2Kernels>) {
        // `vmaxps` semantics (one instruction; `f32::max` adds a NaN fix-up to every vector,
        // tripling the work of the taps), as onnxruntime's pooling has.
        separable_pool(p, input, output, f32::NEG_INFINITY, |a, b| if a > b { a } else { b }, (rows, Stride2::Max), None);
    }
}

/// Separable pooling, vertical pass first: per output row, the `kernel_h` input rows of its
/// window are combined at full width into the interior of an `identity`-padded row (the first
/// copied, the rest combined in place), which is split into `stride_w` phases (columns ≡ p mod
/// stride) so that each horizontal tap is one contiguous, vectorised combine over the output
/// row; `finish` then sees the row (the average's divisors). Vertical first touches each input
/// row `kernel_h / stride_h` times instead of copying and phasing every input row, and leaves
/// one phasing per output row: for the common 3×3 stride-2 pools about half the work.
#[inline(always)]
fn separable_pool(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    identity: f32,
    combine: impl Fn(f32, f32) -> f32 + Copy,
    (stride2_kernel, stride2): (Option<Stride2Kernels>, Stride2),
    inverse: Option<&[f32]>,
) {
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    if ow == 0 || oh == 0 {
        return;
    }
    let finish = |y: usize, out_row: &mut [f32]| {
        if let Some(inverse) = inverse {
            combine_into(out_row, &inverse[y * ow..(y + 1) * ow], |a, b| a * b);
        }
    };
    // Stride 1 goes a plane at a time, unless the window is so large (a 7×7 average) that
    // its taps over the whole grid cost more than the separable row and column passes.
    if p.stride_h == 1 && p.stride_w == 1 {
        return grid_pool(p, input, output, identity, combine, inverse);
    }
    // 2×2 and 3×3 stride-2 windows whole in registers where the level has the kernel: each
    // block of 16 outputs (8 on AVX2) loads its window rows straight from the plane (masked,
    // or on AVX2 permuted, at the edges), combines them vertically, then de-interleaves once.
    if let Some(window) = stride2_kernel.and_then(|kernels| kernels.window) {
        let fits = p.stride_h == 2
            && p.stride_w == 2
            && p.dilation_h == 1
            && p.dilation_w == 1
            && (2..=3).contains(&p.kernel_w)
            && (1..=3).contains(&p.kernel_h);
        if fits {
            // SAFETY: the kernel was returned for this CPU; `input` holds `planes` planes of
            // `ih × iw` and `output` their `oh × ow` outputs (asserted by the kernel).
            unsafe { window(p, input, output, stride2) };
            // Only the average has a finishing pass (a call per output row otherwise: 7% of
            // a 3×3 stride-2 max pool's time).
            if inverse.is_some() {
                for dst in output.chunks_mut(oh * ow).take(p.planes) {
                    for (y, out_row) in dst.chunks_mut(ow).enumerate() {
                        finish(y, out_row);
                    }
                }
            }
            return;
        }
    }
    let (sw, dw) = (p.stride_w, p.dilation_w);
    let width = (ow - 1) * sw + (p.kernel_w - 1) * dw + 1;
    let phase_len = width.div_ceil(sw);
    // The common 2×2 and 3×3 stride-2 windows take their columns straight from the row with
    // in-register de-interleaves where the level has them, instead of phasing the row first.
    let deinterleave = stride2_kernel
        .map(|kernels| kernels.rows)
        .filter(|_| sw == 2 && dw == 1 && (2..=3).contains(&p.kernel_w));
    let mut padded = vec![identity; phase_len * sw + STRIDE2_SLACK];
    let mut phases = if deinterleave.is_some() || sw > 2 {
        Vec::new()
    } else {
        vec![identity; phase_len * sw]
    };
    let row_len = phase_len * sw;
    let pad_left = p.pad_left.min(row_len);
    let copied = iw.min(row_len - pad_left);
    for plane in 0..p.planes {
        let src = &input[plane * ih * iw..(plane + 1) * ih * iw];
        let dst = &mut output[plane * oh * ow..(plane + 1) * oh * ow];
        for (y, out_row) in dst.chunks_mut(ow).enumerate() {
            // Borders stay `identity` from the allocation; only the interior is rewritten.
            let interior = &mut padded[pad_left..pad_left + copied];
            let mut rows = 0;
            for ky in 0..p.kernel_h {
                let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                if iy < 0 || iy >= ih as isize {
                    continue;
                }
                let row = &src[iy as usize * iw..iy as usize * iw + copied];
                if rows == 0 {
                    interior.copy_from_slice(row);
                } else {
                    combine_into(interior, row, combine);
                }
                rows += 1;
            }
            if rows == 0 {
                interior.fill(identity);
            }
            if let Some(rows) = deinterleave {
                // SAFETY: the kernel was returned for this CPU; `padded` holds the row's
                // `width` columns plus `STRIDE2_SLACK` floats of identity past them.
                let done = unsafe { rows(&padded, out_row, p.kernel_w, stride2) };
                for (x, out) in out_row.iter_mut().enumerate().skip(done) {
                    let taps = &padded[2 * x..2 * x + p.kernel_w];
                    *out = taps[1..].iter().fold(taps[0], |acc, &v| combine(acc, v));
                }
                finish(y, out_row);
                continue;
            }
            let phased: &[f32] = match sw {
                1 => &padded,
                2 => {
                    let (even, odd) = phases.split_at_mut(phase_len);
                    for ((pair, e), o) in padded[..row_len].chunks_exact(2).zip(even).zip(odd) {
                        *e = pair[0];
                        *o = pair[1];
                    }
                    &phases
                }
                _ => {
                    // Stride 3 or more: each output folds its taps straight from the padded
                    // row. Phasing the row first took a division per element: a 1×3 stride-3
                    // max pool over 78-wide rows (madmom's beat tracker) ran 72× its bound.
                    for (x, out) in out_row.iter_mut().enumerate() {
                        let first = x * sw;
                        *out = (1..p.kernel_w).fold(padded[first], |acc, kx| {
                            combine(acc, padded[first + kx * dw])
                        });
                    }
                    finish(y, out_row);
                    continue;
                }
            };
            let tap = |kx: usize| {
                let offset = kx * dw;
                let start = (offset % sw) * phase_len + offset / sw;
                &phased[start..start + ow]
            };
            out_row.copy_from_slice(tap(0));
            for kx in 1..p.kernel_w {
                combine_into(out_row, tap(kx), combine);
            }
            finish(y, out_row);
        }
    }
}

/// Stride-1 pooling a plane at a time: the plane is copied once into an `identity`-padded
/// buffer `width` columns wide, in which the input of output `(y, x)` for tap `(ky, kx)` sits
/// at `y · width + x` plus a fixed offset per tap. Each output row is computed in blocks of
/// `GRID_BLOCK` columns, all taps combined in registers, scaled by `inverse` (the average's
/// divisors) and stored straight into the output at full width: a block that runs past the
/// row's end writes into the next row's first columns, which that row then overwrites (rows
/// and planes go in order), so only the very last block of the output is stored from a copy.
/// A pass over a padded grid per tap, then a copy out per row, ran Inception's 3×3 average
/// pools at 3 cycles per output, 2-3× onnxruntime; this takes 1.7.
///
/// Windows of more than nine taps (YOLO's 5×5 SPPF pools, 7×7 averages) go separably on the
/// same grid: each padded row is first combined along x over the whole row (`kernel_w` slice
/// passes), then each block combines `kernel_h` of those rows: `kh + kw` taps an output instead
/// of `kh · kw`. The row-at-a-time separable path these windows took ran a 5×5 max pool on
/// 128×20² at 4× onnxruntime's time, in per-row bookkeeping.
#[inline(always)]
fn grid_pool(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
    identity: f32,
    combine: impl Fn(f32, f32) -> f32 + Copy,
    inverse: Option<&[f32]>,
) {
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (reach_h, reach_w) = (
        (p.kernel_h - 1) * p.dilation_h,
        (p.kernel_w - 1) * p.dilation_w,
    );
    let blocks_per_row = ow.div_ceil(GRID_BLOCK);
    let (width, height) = (blocks_per_row * GRID_BLOCK + reach_w, oh + reach_h);
    let offsets: Vec<usize> = (0..p.kernel_h)
        .flat_map(|ky| (0..p.kernel_w).map(move |kx| (ky, kx)))
        .map(|(ky, kx)| ky * p.dilation_h * width + kx * p.dilation_w)
        .collect();
    // The common windows with their taps unrolled at compile time (no offset table, one
    // bounds check per block): 5-10% faster than the loop over run-time offsets.
    let fixed = (p.dilation_h == 1 && p.dilation_w == 1).then_some((p.kernel_h, p.kernel_w));
    // Rows and columns outside the input keep `identity` from the allocation: only the
    // interior is rewritten per plane.
    let mut padded = vec![identity; height * width];
    // The divisors with a block of slack, so the last block of a row scales at full width.
    let scale: Option<Vec<f32>> = inverse.map(|inverse| {
        let mut padded_inverse = inverse[..oh * ow].to_vec();
        padded_inverse.resize(oh * ow + GRID_BLOCK, 0.0);
        padded_inverse
    });
    let left = p.pad_left.min(width);
    let copied = iw.min(width - left);
    let separable = p.kernel_h * p.kernel_w > 9;
    // Per padded row, its `kernel_w` taps combined (valid for the columns the blocks read).
    let mut across = if separable {
        vec![identity; height * width]
    } else {
        Vec::new()
    };
    let columns_read = blocks_per_row * GRID_BLOCK;
    let vertical: Vec<usize> = (0..p.kernel_h)
        .map(|ky| ky * p.dilation_h * width)
        .collect();
    let horizontal: Vec<usize> = (0..p.kernel_w).map(|kx| kx * p.dilation_w).collect();
    for plane in 0..p.planes {
        let src = &input[plane * ih * iw..(plane + 1) * ih * iw];
        for row in 0..height {
            let Some(iy) = row.checked_sub(p.pad_top).filter(|&iy| iy < ih) else {
                continue;
            };
            let interior = &mut padded[row * width + left..row * width + left + copied];
            copy_short(interior, &src[iy * iw..iy * iw + copied]);
        }
        if separable {
            // Block by block with every tap in registers: combining whole-row slices in place,
            // one pass per tap, reloaded each pass what the last had just stored (masked, so
            // never forwarded): 56% of the kernel's time on one compare.
            for (row, combined) in across.chunks_exact_mut(width).enumerate() {
                let taps = &padded[row * width..(row + 1) * width];
                for x in (0..columns_read).step_by(GRID_BLOCK) {
                    let acc = any_window(taps, x, &horizontal, combine);
                    combined[x..x + GRID_BLOCK].copy_from_slice(&acc);
                }
            }
        }
        for y in 0..oh {
            // Every tap of the row's blocks lies inside `padded`: the last block's furthest
            // tap ends at `(y + reach_h)·width + width`, the end of a padded row.
            let row_taps = &padded[y * width..(y + reach_h + 1) * width];
            let row_across = if separable {
                &across[y * width..(y + reach_h + 1) * width]
            } else {
                &[][..]
            };
            for block in 0..blocks_per_row {
                let x = block * GRID_BLOCK;
                let mut acc = match fixed {
                    _ if separable => any_window(row_across, x, &vertical, combine),
                    Some((3, 3)) => fixed_window::<3, 3>(row_taps, x, width, combine),
                    Some((2, 2)) => fixed_window::<2, 2>(row_taps, x, width, combine),
                    _ => any_window(row_taps, x, &offsets, combine),
                };
                let at = y * ow + x;
                if let Some(scale) = &scale {
                    let scale = &scale[at..at + GRID_BLOCK];
                    for lane in 0..GRID_BLOCK {
                        acc[lane] *= scale[lane];
                    }
                }
                let start = plane * oh * ow + at;
                if start + GRID_BLOCK <= output.len() {
                    output[start..start + GRID_BLOCK].copy_from_slice(&acc);
                } else {
                    // Indexing `acc` by a run-time length would keep it in memory for the
                    // whole tap loop: the last block is stored from a copy.
                    let last = acc;
                    let len = output.len() - start;
                    output[start..].copy_from_slice(&last[..len]);
                }
            }
        }
    }
}

/// `GRID_BLOCK` floats of `row_taps` from `at`.
///
/// # Safety
/// `at + GRID_BLOCK ≤ row_taps.len()`.
#[inline(always)]
unsafe fn tap_block(row_taps: &[f32], at: usize) -> [f32; GRID_BLOCK] {
    debug_assert!(at + GRID_BLOCK <= row_taps.len());
    unsafe { *(row_taps.as_ptr().add(at) as *const [f32; GRID_BLOCK]) }
}

#[inline(always)]
fn combine_block(
    acc: &mut [f32; GRID_BLOCK],
    taps: &[f32; GRID_BLOCK],
    combine: impl Fn(f32, f32) -> f32,
) {
    for lane in 0..GRID_BLOCK {
        acc[lane] = combine(acc[lane], taps[lane]);
    }
}

/// The `KH×KW` window (dilation 1) of the block of outputs at column `x` of a padded row of
/// `width` columns; `row_taps` starts at the window's top row and holds `KH` rows.
#[inline(always)]
fn fixed_window<const KH: usize, const KW: usize>(
    row_taps: &[f32],
    x: usize,
    width: usize,
    combine: impl Fn(f32, f32) -> f32 + Copy,
) -> [f32; GRID_BLOCK] {
    assert!(x + (KH - 1) * width + KW - 1 + GRID_BLOCK <= row_taps.len());
    // SAFETY: the furthest tap ends inside `row_taps` (asserted above).
    let mut acc = unsafe { tap_block(row_taps, x) };
    for ky in 0..KH {
        for kx in 0..KW {
            if ky + kx > 0 {
                let taps = unsafe { tap_block(row_taps, x + ky * width + kx) };
                combine_block(&mut acc, &taps, combine);
            }
        }
    }
    acc
}

/// Any window, its taps at `offsets` (the first is 0) from column `x` of `row_taps`.
#[inline(always)]
fn any_window(
    row_taps: &[f32],
    x: usize,
    offsets: &[usize],
    combine: impl Fn(f32, f32) -> f32 + Copy,
) -> [f32; GRID_BLOCK] {
    let reach = offsets.last().copied().unwrap_or(0);
    assert!(x + reach + GRID_BLOCK <= row_taps.len());
    // SAFETY: every offset is at most `reach` (offsets grow), asserted inside `row_taps`.
    let mut acc = unsafe { tap_block(row_taps, x) };
    for &offset in &offsets[1..] {
        let taps = unsafe { tap_block(row_taps, x + offset) };
        combine_block(&mut acc, &taps, combine);
    }
    acc
}

/// Output columns combined per register block by `grid_pool`: one 512-bit or two 256-bit
/// vectors.
const GRID_BLOCK: usize = 16;

/// `out[i] = combine(out[i], src[i])` in fixed chunks of eight: LLVM's vectorised loops only
/// start past 32-64 elements (the vector body is unrolled), so the 7-28-wide rows of late
/// pooling layers ran scalar; a fixed eight-element body is one vector operation.
#[inline(always)]
fn combine_into(out: &mut [f32], src: &[f32], combine: impl Fn(f32, f32) -> f32) {
    let src = &src[..out.len()];
    let mut outs = out.chunks_exact_mut(8);
    let mut srcs = src.chunks_exact(8);
    for (o, s) in (&mut outs).zip(&mut srcs) {
        for lane in 0..8 {
            o[lane] = combine(o[lane], s[lane]);
        }
    }
    for (o, &s) in outs.into_remainder().iter_mut().zip(srcs.remainder()) {
        *o = combine(*o, s);
    }
}

/// `out = src` for rows of 7-28 floats: the fixed-width body of `combine_into` rather than a
/// `memcpy` call per row.
#[inline(always)]
fn copy_short(out: &mut [f32], src: &[f32]) {
    combine_into(out, src, |_, v| v);
}

/// Per output position along one axis, how many of its `kernel` taps (spaced `dilation`) fall
/// inside `[lo, hi)` of the unpadded input coordinates (the divisor's factor on that axis).
fn taps_inside(
    out: usize,
    stride: usize,
    kernel: usize,
    dilation: usize,
    pad: usize,
    lo: isize,
    hi: isize,
) -> Vec<usize> {
    (0..out)
        .map(|o| {
            (0..kernel)
                .filter(|&k| {
                    let at = (o * stride + k * dilation) as isize - pad as isize;
                    at >= lo && at < hi
                })
                .count()
        })
        .collect()
}

/// Separable average pooling (see `separable_pool`): sums, then each output divided by its tap
/// count, the taps inside the input or, with `count_include_pad`, inside the padded extent
/// (ONNX's definition), a product of one count per row and one per column. On the best variant
/// `ROOFLINE_ISA` allows.
pub fn avg_pool(
    p: &Pool2d,
    count_include_pad: bool,
    pad_bottom: usize,
    pad_right: usize,
    input: &[f32],
    output: &mut [f32],
) {
    avg_pool_at(
        isa_level(),
        p,
        count_include_pad,
        pad_bottom,
        pad_right,
        input,
        output,
    )
}

/// [`avg_pool`] on the variant of `level` (capped by the CPU), with that level's stride-2 row
/// kernel where it has one.
pub fn avg_pool_at(
    level: IsaLevel,
    p: &Pool2d,
    count_include_pad: bool,
    pad_bottom: usize,
    pad_right: usize,
    input: &[f32],
    output: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if own_kernel::<false>(level, p, input, output, || {
        Some(average_inverse(p, count_include_pad, pad_bottom, pad_right))
    }) {
        return;
    }
    let rows = stride2_kernels(level);
    avg_pool_with::at(
        level,
        p,
        count_include_pad,
        pad_bottom,
        pad_right,
        input,
        output,
        rows,
    )
}

multiversion! {
    // Called through `::at` only, with the level's stride-2 row kernel.
    #[allow(dead_code)]
    fn avg_pool_with(p: &Pool2d, count_include_pad: bool, pad_bottom: usize, pad_right: usize, input: &[f32], output: &mut [f32], rows: Option<Stride2Kernels>) {
        let inverse = average_inverse(p, count_include_pad, pad_bottom, pad_right);
        separable_pool(p, input, output, 0.0, |a, b| a + b, (rows, Stride2::Add), Some(&inverse));
    }
}

/// Each output's reciprocal tap count (`out_h × out_w`): the taps inside the input or, with
/// `count_include_pad`, inside the padded extent. Computed once per call rather than per row.
fn average_inverse(
    p: &Pool2d,
    count_include_pad: bool,
    pad_bottom: usize,
    pad_right: usize,
) -> Vec<f32> {
    let (ih, iw) = (p.in_h, p.in_w);
    let (rows_lo, rows_hi, cols_lo, cols_hi) = if count_include_pad {
        (
            -(p.pad_top as isize),
            (ih + pad_bottom) as isize,
            -(p.pad_left as isize),
            (iw + pad_right) as isize,
        )
    } else {
        (0, ih as isize, 0, iw as isize)
    };
    let count_y = taps_inside(
        p.out_h,
        p.stride_h,
        p.kernel_h,
        p.dilation_h,
        p.pad_top,
        rows_lo,
        rows_hi,
    );
    let count_x = taps_inside(
        p.out_w,
        p.stride_w,
        p.kernel_w,
        p.dilation_w,
        p.pad_left,
        cols_lo,
        cols_hi,
    );
    count_y
        .iter()
        .flat_map(|&cy| count_x.iter().map(move |&cx| cy * cx))
        .map(|divisor| {
            if divisor > 0 {
                1.0 / divisor as f32
            } else {
                0.0
            }
        })
        .collect()
}

/// Mean (or max) of each plane of `plane_size` elements.
pub fn global_pool(input: &[f32], plane_size: usize, max: bool, output: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if plane_size >= 16 && isa_level() == IsaLevel::Avx512 {
        // SAFETY: AVX-512F is available.
        unsafe { global_pool_avx512(input, plane_size, max, output) };
        return;
    }
    global_pool_folded(input, plane_size, max, output);
}

/// [`global_pool`] one plane per step in sixteen-float vectors: two accumulators, the tail a
/// masked load (an overlapping one for max), one horizontal reduction per plane. The folded
/// path's eight lanes, tail loop and sequential lane sum cost about 55 cycles per 7×7 plane
/// (Zen 5: 16.6 µs for MobileNetV2's 1280 planes, onnxruntime 5-7 µs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn global_pool_avx512(input: &[f32], plane_size: usize, max: bool, output: &mut [f32]) {
    use std::arch::x86_64::*;
    const LANES: usize = 16;
    let tail = plane_size % LANES;
    let full = plane_size - tail;
    let tail_mask = ((1u32 << tail) - 1) as __mmask16;
    let scale = 1.0 / plane_size as f32;
    for (out, plane) in output.iter_mut().zip(input.chunks_exact(plane_size)) {
        let at = plane.as_ptr();
        if max {
            let mut acc = _mm512_loadu_ps(at);
            let mut i = LANES;
            while i < full {
                acc = _mm512_max_ps(acc, _mm512_loadu_ps(at.add(i)));
                i += LANES;
            }
            if tail > 0 {
                // The last sixteen elements again: a max does not mind repeats.
                acc = _mm512_max_ps(acc, _mm512_loadu_ps(at.add(plane_size - LANES)));
            }
            *out = _mm512_reduce_max_ps(acc);
        } else {
            let (mut even, mut odd) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let mut i = 0;
            while i + 2 * LANES <= full {
                even = _mm512_add_ps(even, _mm512_loadu_ps(at.add(i)));
                odd = _mm512_add_ps(odd, _mm512_loadu_ps(at.add(i + LANES)));
                i += 2 * LANES;
            }
            if i < full {
                even = _mm512_add_ps(even, _mm512_loadu_ps(at.add(i)));
            }
            if tail > 0 {
                odd = _mm512_add_ps(odd, _mm512_maskz_loadu_ps(tail_mask, at.add(full)));
            }
            *out = _mm512_reduce_add_ps(_mm512_add_ps(even, odd)) * scale;
        }
    }
}

multiversion! {
    /// [`global_pool`] folded in eight register lanes (`movement::fold_row`): a sequential
    /// `sum()` cannot be vectorised and ran at one add latency per element, 20× under the
    /// bound.
    fn global_pool_folded(input: &[f32], plane_size: usize, max: bool, output: &mut [f32]) {
        for (o, plane) in output.iter_mut().zip(input.chunks(plane_size.max(1))) {
            *o = if max {
                fold_row(Reduction::Max, plane, f32::NEG_INFINITY, 0.0)
            } else {
                fold_row(Reduction::Sum, plane, 0.0, 0.0) / plane_size as f32
            };
        }
    }
}

#[cfg(test)]
mod tests;
