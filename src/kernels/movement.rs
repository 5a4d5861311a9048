//! Data movement and reductions over dense row-major tensors: transpose, concat, slice, gather,
//! pad, resize, broadcast (Expand/Tile), reduce. Element type is generic where the executor moves
//! integer tensors too. Child: `resize` (Resize's kernels, re-exported here).

mod resize;
pub use resize::{resize_2d, CoordMode, NearestMode};

/// Row-major strides.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut out = vec![1usize; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        out[axis] = out[axis + 1] * shape[axis + 1];
    }
    out
}

/// The (extent, source stride) of each output axis, outermost first, with size-1 axes dropped and
/// adjacent axes merged where the source walks them as one (consecutive broadcast axes
/// included), so a copy of [1, 512, 508, 1] moves one row of 260k elements, not 260k rows of one.
fn merged_row_axes(out_shape: &[usize], src_strides: &[usize]) -> Vec<(usize, usize)> {
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(out_shape.len());
    for (&size, &stride) in out_shape.iter().zip(src_strides).rev() {
        if size == 1 {
            continue;
        }
        match merged.last_mut() {
            Some(last) if stride == last.1 * last.0 => last.0 *= size,
            _ => merged.push((size, stride)),
        }
    }
    merged.reverse();
    merged
}

/// Visits every output position in row-major order; `f(out_index_of_row_start, src_offset,
/// src_inner_stride, row_len)` handles one innermost row. `src_strides` maps output axes to
/// source strides.
fn for_each_row(
    out_shape: &[usize],
    src_strides: &[usize],
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let merged = merged_row_axes(out_shape, src_strides);
    if merged.is_empty() {
        // Every axis has size 1 (or there are none): one element.
        if out_shape.iter().all(|&size| size == 1) {
            f(0, 0, 1, 1);
        }
        return;
    }
    let out_shape: Vec<usize> = merged.iter().map(|axis| axis.0).collect();
    let src_strides: Vec<usize> = merged.iter().map(|axis| axis.1).collect();
    let (out_shape, src_strides) = (&out_shape[..], &src_strides[..]);
    let rank = out_shape.len();
    let inner = out_shape[rank - 1];
    let rows: usize = out_shape[..rank - 1].iter().product();
    let mut index = vec![0usize; rank - 1];
    for row in 0..rows {
        let offset: usize = index.iter().zip(src_strides).map(|(i, s)| i * s).sum();
        f(row * inner, offset, src_strides[rank - 1], inner);
        for axis in (0..rank - 1).rev() {
            index[axis] += 1;
            if index[axis] < out_shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// General strided copy: out[i] = src[offset(i)].
pub fn strided_copy<T: Copy>(
    src: &[T],
    base: usize,
    src_strides: &[usize],
    out_shape: &[usize],
    out: &mut [T],
) {
    for_each_row(out_shape, src_strides, |start, offset, stride, len| {
        let row = &mut out[start..start + len];
        if stride == 1 {
            copy_row(row, &src[base + offset..base + offset + len]);
        } else {
            for (k, o) in row.iter_mut().enumerate() {
                *o = src[base + offset + k * stride];
            }
        }
    });
}

/// `dst.copy_from_slice(src)`, with rows of 8 to 63 elements copied in blocks of 8 (the last
/// block overlapping the one before) rather than through a `memcpy` call: an Expand whose
/// output rows are 28 floats spent most of its time in those calls.
#[inline(always)]
fn copy_row<T: Copy>(dst: &mut [T], src: &[T]) {
    const BLOCK: usize = 8;
    let len = dst.len();
    if !(BLOCK..64).contains(&len) {
        dst.copy_from_slice(src);
        return;
    }
    let src = &src[..len];
    let mut at = 0;
    while at + BLOCK <= len {
        let block: [T; BLOCK] = src[at..at + BLOCK].try_into().expect("a block of 8");
        dst[at..at + BLOCK].copy_from_slice(&block);
        at += BLOCK;
    }
    if at < len {
        let last = len - BLOCK;
        let block: [T; BLOCK] = src[last..].try_into().expect("a block of 8");
        dst[last..].copy_from_slice(&block);
    }
}

/// Side of the square tiles of a blocked transpose: 16 rows of 16 elements touch 16 source
/// cache lines that stay in L1 while the tile is written row by row.
const TILE: usize = 16;

/// Transpose with `perm` (output axis i = input axis perm[i]).
///
/// Size-1 axes are dropped and runs of output axes that are contiguous in the input merged, so
/// e.g. a head split `[1,128,12,64] → [1,12,128,64]` copies rows of 64. When the output's
/// innermost axis is strided in the input (`[.., 64, 128] ← [.., 128, 64]`, a channel shuffle,
/// NCHW ↔ NHWC), the two axes are transposed in tiles instead of one strided element at a time:
/// f32 in 8×8 AVX2 register blocks inside 32×32 tiles, other types (and machines without AVX2)
/// element by element in 16×16 tiles.
pub fn transpose<T: Copy + 'static>(input: &[T], shape: &[usize], perm: &[usize], out: &mut [T]) {
    transpose_axes(input, 0, &merged_axes(shape, perm), out);
}

/// `(extent, source stride)` of each output axis of a transpose, size-1 axes dropped and runs
/// of output axes that are contiguous in the input merged.
pub fn merged_axes(shape: &[usize], perm: &[usize]) -> Vec<(usize, usize)> {
    let in_strides = strides(shape);
    let mut axes: Vec<(usize, usize)> = Vec::new();
    for &p in perm {
        let (extent, stride) = (shape[p], in_strides[p]);
        if extent == 1 {
            continue;
        }
        match axes.last_mut() {
            Some(last) if last.1 == stride * extent => {
                last.0 *= extent;
                last.1 = stride;
            }
            _ => axes.push((extent, stride)),
        }
    }
    axes
}

/// The transpose of [`merged_axes`] `axes`, reading `input` from `src_offset`: the output is
/// dense in the order of `axes`. A thread's share of a larger transpose is a range of the
/// outermost axis (`src_offset` moved by its start, its extent shortened).
pub fn transpose_axes<T: Copy + 'static>(
    input: &[T],
    src_offset: usize,
    axes: &[(usize, usize)],
    out: &mut [T],
) {
    let (out_shape, src_strides): (Vec<usize>, Vec<usize>) = axes.iter().copied().unzip();
    let rank = axes.len();
    let inner_axis = src_strides.iter().position(|&s| s == 1);
    let (Some(j), true) = (inner_axis, rank >= 2 && src_strides.last() != Some(&1)) else {
        strided_copy(input, src_offset, &src_strides, &out_shape, out);
        return;
    };
    let out_strides = strides(&out_shape);
    let (rows, cols) = (out_shape[j], out_shape[rank - 1]);
    let (row_out_stride, col_src_stride) = (out_strides[j], src_strides[rank - 1]);
    // Every position of the other axes: one 2-D transpose each.
    let others: Vec<usize> = (0..rank - 1).filter(|&a| a != j).collect();
    let count: usize = others.iter().map(|&a| out_shape[a]).product();
    let mut index = vec![0usize; others.len()];
    for _ in 0..count {
        let (mut src_base, mut out_base) = (src_offset, 0);
        for (k, &a) in others.iter().enumerate() {
            src_base += index[k] * src_strides[a];
            out_base += index[k] * out_strides[a];
        }
        let plane = Plane {
            src_base,
            out_base,
            rows,
            cols,
            col_src_stride,
            row_out_stride,
        };
        if !transpose_plane_simd(input, &plane, out) && !transpose_plane_narrow(input, &plane, out)
        {
            for r0 in (0..rows).step_by(TILE) {
                for c0 in (0..cols).step_by(TILE) {
                    for r in r0..(r0 + TILE).min(rows) {
                        let row = &mut out[out_base + r * row_out_stride..][..cols];
                        for c in c0..(c0 + TILE).min(cols) {
                            row[c] = input[src_base + r + c * col_src_stride];
                        }
                    }
                }
            }
        }
        for k in (0..others.len()).rev() {
            index[k] += 1;
            if index[k] < out_shape[others[k]] {
                break;
            }
            index[k] = 0;
        }
    }
}

/// One 2-D transpose inside a larger one: `out[out_base + r·row_out_stride + c] =
/// input[src_base + r + c·col_src_stride]` for `r < rows`, `c < cols`.
struct Plane {
    src_base: usize,
    out_base: usize,
    rows: usize,
    cols: usize,
    col_src_stride: usize,
    row_out_stride: usize,
}

/// A plane with 2-4 rows interleaved in the source (NHWC → NCHW of an RGB image) or 2-4
/// columns interleaved in the output (a 2- or 4-channel score map back to NHWC), copied with
/// the interleave factor as a constant so the compiler turns the stride into vector shuffles;
/// the scalar tiles took 0.6 ns per element on an image's channel split. Returns false for
/// other planes.
fn transpose_plane_narrow<T: Copy>(input: &[T], plane: &Plane, out: &mut [T]) -> bool {
    let (rows, cols) = (plane.rows, plane.cols);
    if rows <= 4 && plane.col_src_stride == rows {
        let Some(src) = input.get(plane.src_base..plane.src_base + rows * cols) else {
            return false;
        };
        let fits = |r: usize| plane.out_base + r * plane.row_out_stride + cols <= out.len();
        if !fits(rows - 1) {
            return false;
        }
        match rows {
            2 => deinterleave::<T, 2>(src, out, plane),
            3 => deinterleave::<T, 3>(src, out, plane),
            4 => deinterleave::<T, 4>(src, out, plane),
            _ => return false,
        }
        return true;
    }
    if cols <= 4 && plane.row_out_stride == cols {
        let last_src = plane.src_base + (cols - 1) * plane.col_src_stride + rows;
        let Some(dst) = out.get_mut(plane.out_base..plane.out_base + rows * cols) else {
            return false;
        };
        if last_src > input.len() {
            return false;
        }
        match cols {
            2 => interleave::<T, 2>(input, dst, plane),
            3 => interleave::<T, 3>(input, dst, plane),
            4 => interleave::<T, 4>(input, dst, plane),
            _ => return false,
        }
        return true;
    }
    false
}

/// Output row r of the plane is element r of each group of R in `src`.
#[inline(always)]
fn deinterleave<T: Copy, const R: usize>(src: &[T], out: &mut [T], plane: &Plane) {
    for r in 0..R {
        let line = &mut out[plane.out_base + r * plane.row_out_stride..][..plane.cols];
        for (o, group) in line.iter_mut().zip(src.chunks_exact(R)) {
            *o = group[r];
        }
    }
}

/// Element c of each group of C in `dst` is source line c.
#[inline(always)]
fn interleave<T: Copy, const C: usize>(input: &[T], dst: &mut [T], plane: &Plane) {
    for c in 0..C {
        let line = &input[plane.src_base + c * plane.col_src_stride..][..plane.rows];
        for (group, &v) in dst.chunks_exact_mut(C).zip(line) {
            group[c] = v;
        }
    }
}

/// The f32 plane in 8×8 register transposes (AVX2), edges element by element. Returns false
/// (nothing written) for other element types, without AVX2, or when the plane does not lie
/// inside both slices; the caller then takes the scalar tiles.
fn transpose_plane_simd<T: Copy + 'static>(input: &[T], plane: &Plane, out: &mut [T]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::TypeId;
        if TypeId::of::<T>() != TypeId::of::<f32>()
            || super::simd::isa_level() < super::simd::IsaLevel::Avx2
            || plane.rows < 8
            || plane.cols < 8
        {
            return false;
        }
        let last_src = plane.src_base + (plane.rows - 1) + (plane.cols - 1) * plane.col_src_stride;
        let last_out = plane.out_base + (plane.rows - 1) * plane.row_out_stride + plane.cols - 1;
        if last_src >= input.len() || last_out >= out.len() {
            return false;
        }
        // SAFETY: T is f32 (checked above), so the casts keep lengths and layouts; every index
        // the plane touches is at most `last_src` / `last_out`, both in bounds; AVX2 was
        // detected.
        unsafe {
            let input = std::slice::from_raw_parts(input.as_ptr().cast::<f32>(), input.len());
            let out = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len());
            transpose_plane_avx2(input, plane, out);
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (input, plane, out);
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_plane_avx2(input: &[f32], plane: &Plane, out: &mut [f32]) {
    let (rows, cols) = (plane.rows, plane.cols);
    let (src, dst) = (input.as_ptr(), out.as_mut_ptr());
    let full_rows = rows / 8 * 8;
    let full_cols = cols / 8 * 8;
    // 32×32 tiles of 8×8 blocks: 32 source lines and 32 output lines stay in L1.
    for r1 in (0..full_rows).step_by(32) {
        for c1 in (0..full_cols).step_by(32) {
            for r0 in (r1..(r1 + 32).min(full_rows)).step_by(8) {
                for c0 in (c1..(c1 + 32).min(full_cols)).step_by(8) {
                    transpose_8x8(
                        src.add(plane.src_base + r0 + c0 * plane.col_src_stride),
                        plane.col_src_stride,
                        dst.add(plane.out_base + r0 * plane.row_out_stride + c0),
                        plane.row_out_stride,
                    );
                }
            }
        }
    }
    // Edges: the last rows (all columns) and the last columns (full rows only).
    for r in 0..rows {
        let first_col = if r < full_rows { full_cols } else { 0 };
        for c in first_col..cols {
            *dst.add(plane.out_base + r * plane.row_out_stride + c) =
                *src.add(plane.src_base + r + c * plane.col_src_stride);
        }
    }
}

/// `dst[i·dst_stride + j] = src[j·src_stride + i]` for an 8×8 block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_8x8(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
    use std::arch::x86_64::*;
    let row = |i: usize| _mm256_loadu_ps(src.add(i * src_stride));
    let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
    let (r4, r5, r6, r7) = (row(4), row(5), row(6), row(7));
    let t0 = _mm256_unpacklo_ps(r0, r1);
    let t1 = _mm256_unpackhi_ps(r0, r1);
    let t2 = _mm256_unpacklo_ps(r2, r3);
    let t3 = _mm256_unpackhi_ps(r2, r3);
    let t4 = _mm256_unpacklo_ps(r4, r5);
    let t5 = _mm256_unpackhi_ps(r4, r5);
    let t6 = _mm256_unpacklo_ps(r6, r7);
    let t7 = _mm256_unpackhi_ps(r6, r7);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    let out = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    for (i, v) in out.into_iter().enumerate() {
        _mm256_storeu_ps(dst.add(i * dst_stride), v);
    }
}

/// Broadcast `input` (shape `shape`) to `out_shape` (Expand).
pub fn broadcast<T: Copy>(input: &[T], shape: &[usize], out_shape: &[usize], out: &mut [T]) {
    debug_assert_eq!(out.len(), out_shape.iter().product::<usize>());
    if out_shape.contains(&0) {
        return;
    }
    let src_strides = super::elementwise::broadcast_strides(shape, out_shape);
    let axes = merged_row_axes(out_shape, &src_strides);
    if axes.is_empty() {
        out[0] = input[0];
        return;
    }
    broadcast_axes(input, 0, &axes, out);
}

/// Writes `out` (the product of `axes`' extents) from `src` at `offset`, axis by axis: a
/// repeated axis (source stride 0) writes its first block and copies it to the others, one
/// large copy each, instead of rebuilding every repeat from the source row by row (Tile 2×2
/// of 1×64×28² as 7168 rows of 28 floats written one at a time took 102 µs on a Zen 4 guest,
/// onnxruntime 31).
fn broadcast_axes<T: Copy>(src: &[T], offset: usize, axes: &[(usize, usize)], out: &mut [T]) {
    let (extent, stride) = axes[0];
    if axes.len() == 1 {
        match stride {
            0 => out.fill(src[offset]),
            1 => copy_row(out, &src[offset..offset + extent]),
            _ => {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = src[offset + k * stride];
                }
            }
        }
        return;
    }
    let block = out.len() / extent;
    if stride == 0 {
        let (first, rest) = out.split_at_mut(block);
        broadcast_axes(src, offset, &axes[1..], first);
        for copy in rest.chunks_exact_mut(block) {
            copy_row(copy, first);
        }
    } else {
        for (k, part) in out.chunks_exact_mut(block).enumerate() {
            broadcast_axes(src, offset + k * stride, &axes[1..], part);
        }
    }
}

/// Concatenation along `axis`; `parts` are (data, shape).
pub fn concat<T: Copy>(parts: &[(&[T], &[usize])], axis: usize, out: &mut [T]) {
    let outer: usize = parts[0].1[..axis].iter().product();
    let chunks: Vec<usize> = parts
        .iter()
        .map(|(_, shape)| shape[axis..].iter().product())
        .collect();
    let row: usize = chunks.iter().sum();
    if row == 0 {
        return;
    }
    // Parts of a few elements per row, part by part: one element per row (three [.., 1]
    // tensors joined on the last axis) is a strided store loop; as a copy call per row (the
    // compiler makes a short copy loop a `memcpy` call too) it ran 47× the memory bound.
    let mut starts = Vec::with_capacity(parts.len());
    let mut at = 0;
    for ((data, _), &chunk) in parts.iter().zip(&chunks) {
        starts.push(at);
        if chunk == 1 {
            for (out_row, &value) in out.chunks_exact_mut(row).zip(&data[..outer]) {
                out_row[at] = value;
            }
        } else if chunk > 1 && chunk <= SHORT_CHUNK {
            for (out_row, source) in out.chunks_exact_mut(row).zip(data.chunks_exact(chunk)) {
                out_row[at..at + chunk].copy_from_slice(source);
            }
        }
        at += chunk;
    }
    // Longer parts row by row, so each output line is written once.
    if chunks.iter().all(|&chunk| chunk <= SHORT_CHUNK) {
        return;
    }
    for (o, out_row) in out.chunks_exact_mut(row).take(outer).enumerate() {
        for (((data, _), &chunk), &start) in parts.iter().zip(&chunks).zip(&starts) {
            if chunk > SHORT_CHUNK {
                out_row[start..start + chunk].copy_from_slice(&data[o * chunk..(o + 1) * chunk]);
            }
        }
    }
}

/// Parts of up to this many elements per row are concatenated part by part, and reductions
/// over innermost axes of up to this many elements fold each row in one loop.
const SHORT_CHUNK: usize = 16;

/// Slice: per axis (start, step) with the output shape already computed.
pub fn slice<T: Copy>(
    input: &[T],
    shape: &[usize],
    starts: &[isize],
    steps: &[isize],
    out_shape: &[usize],
    out: &mut [T],
) {
    let in_strides = strides(shape);
    let base: isize = starts
        .iter()
        .zip(&in_strides)
        .map(|(&s, &st)| s * st as isize)
        .sum();
    // Negative steps: walk with a signed stride through a reversed view.
    if steps.iter().all(|&s| s > 0) {
        let src_strides: Vec<usize> = steps
            .iter()
            .zip(&in_strides)
            .map(|(&s, &st)| s as usize * st)
            .collect();
        strided_copy(input, base as usize, &src_strides, out_shape, out);
        return;
    }
    let signed: Vec<isize> = steps
        .iter()
        .zip(&in_strides)
        .map(|(&s, &st)| s * st as isize)
        .collect();
    signed_strided_copy(input, base, &signed, out_shape, out);
}

/// `out[i₀, …, iₙ] = input[base + Σ iₐ·strides[a]]` with signed strides, row by row along the
/// last axis (a reversed row is one backward pass, a forward one a copy): per-element index
/// arithmetic (three divisions an element) made a reversing Slice 260× slower than its bound.
fn signed_strided_copy<T: Copy>(
    input: &[T],
    base: isize,
    strides: &[isize],
    shape: &[usize],
    out: &mut [T],
) {
    let Some((&inner, outer_shape)) = shape.split_last() else {
        if let Some(first) = out.first_mut() {
            *first = input[base as usize];
        }
        return;
    };
    if out.is_empty() || inner == 0 {
        return;
    }
    let inner_stride = strides[outer_shape.len()];
    let mut coord = vec![0usize; outer_shape.len()];
    let mut row_start = base;
    for row in out.chunks_exact_mut(inner) {
        let first = row_start as usize;
        match inner_stride {
            1 => row.copy_from_slice(&input[first..first + inner]),
            -1 => {
                let source = &input[first + 1 - inner..=first];
                for (o, &x) in row.iter_mut().zip(source.iter().rev()) {
                    *o = x;
                }
            }
            stride => {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = input[(row_start + j as isize * stride) as usize];
                }
            }
        }
        for axis in (0..outer_shape.len()).rev() {
            coord[axis] += 1;
            row_start += strides[axis];
            if coord[axis] < outer_shape[axis] {
                break;
            }
            row_start -= strides[axis] * outer_shape[axis] as isize;
            coord[axis] = 0;
        }
    }
}

/// Gather along `axis` with (already normalised, in-range) indices.
pub fn gather<T: Copy>(
    input: &[T],
    shape: &[usize],
    axis: usize,
    indices: &[usize],
    out: &mut [T],
) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let axis_len = shape[axis];
    let mut offset = 0;
    for o in 0..outer {
        for &i in indices {
            let src = (o * axis_len + i) * inner;
            out[offset..offset + inner].copy_from_slice(&input[src..src + inner]);
            offset += inner;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Edge,
    Reflect,
}

/// Pads with `begin`/`end` per axis (non-negative).
pub fn pad(
    input: &[f32],
    shape: &[usize],
    begin: &[usize],
    out_shape: &[usize],
    mode: PadMode,
    value: f32,
    out: &mut [f32],
) {
    let rank = shape.len();
    if rank == 0 || input.is_empty() {
        // A scalar copies through; an empty input has nothing to reflect or repeat.
        let fill = input.first().copied().unwrap_or(value);
        out.fill(fill);
        return;
    }
    let in_strides = strides(shape);
    let (row_in, row_out, lead) = (shape[rank - 1], out_shape[rank - 1], begin[rank - 1]);
    if row_out == 0 {
        return;
    }
    // Row by row: the outer axes map each output row to a source row (or to none: a constant
    // pad's border rows), then the row is its leading pad, one copy, its trailing pad. Per
    // element, the division per axis of the old loop cost 14 ns an element.
    let copy_end = (lead + row_in).min(row_out);
    let mut index = vec![0usize; rank - 1];
    for row in out.chunks_exact_mut(row_out) {
        let mut source = Some(0usize);
        for (axis, &at) in index.iter().enumerate() {
            source = source.and_then(|base| {
                pad_source(at, begin[axis], shape[axis], mode).map(|c| base + c * in_strides[axis])
            });
        }
        match source {
            None => row.fill(value),
            Some(base) => {
                let line = &input[base..base + row_in];
                let pick = |k: usize| pad_source(k, lead, row_in, mode).map_or(value, |c| line[c]);
                for (k, o) in row[..lead.min(row_out)].iter_mut().enumerate() {
                    *o = pick(k);
                }
                if copy_end > lead {
                    row[lead..copy_end].copy_from_slice(&line[..copy_end - lead]);
                }
                for (k, o) in row.iter_mut().enumerate().skip(copy_end.max(lead)) {
                    *o = pick(k);
                }
            }
        }
        for axis in (0..rank - 1).rev() {
            index[axis] += 1;
            if index[axis] < out_shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// The source coordinate of output coordinate `at` along an axis of `len` padded by `lead` in
/// front: inside, clamped (edge), mirrored without repeating the border (reflect), or none (a
/// constant pad's border).
#[inline(always)]
fn pad_source(at: usize, lead: usize, len: usize, mode: PadMode) -> Option<usize> {
    let c = at as isize - lead as isize;
    let n = len as isize;
    if (0..n).contains(&c) {
        return Some(c as usize);
    }
    match mode {
        PadMode::Constant => None,
        PadMode::Edge => Some(c.clamp(0, n - 1) as usize),
        PadMode::Reflect => {
            let period = 2 * (n - 1).max(1);
            let m = c.rem_euclid(period);
            Some((if m < n { m } else { period - m }).min(n - 1) as usize)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSumExp,
}

super::simd::multiversion! {
/// Reduces over `axes` (sorted) of `shape`; output has the kept axes in order. Compiled per
/// ISA: the baseline build folded rows in SSE2 vectors, and a max over 128 rows of 768 took
/// 21.7 µs against onnxruntime's 11.7.
pub fn reduce(input: &[f32], shape: &[usize], axes: &[usize], kind: Reduction, out: &mut [f32]) {
    let init = match kind {
        Reduction::Max | Reduction::LogSumExp => f32::NEG_INFINITY,
        Reduction::Min => f32::INFINITY,
        Reduction::Prod => 1.0,
        _ => 0.0,
    };
    out.fill(init);
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&a| shape[a]).collect();
    let kept_strides = strides(&kept_shape);
    // Output stride of every input axis (0 on reduced axes).
    let mut out_stride_of = vec![0usize; shape.len()];
    for (k, &a) in kept.iter().enumerate() {
        out_stride_of[a] = kept_strides[k];
    }
    let reduced_count: usize = axes.iter().map(|&a| shape[a]).product::<usize>().max(1);
    let mut maxima = Vec::new();
    if kind == Reduction::LogSumExp {
        reduce(input, shape, axes, Reduction::Max, out);
        maxima = out.to_vec();
        out.fill(0.0);
    }
    let combine = |o: f32, v: f32, max: f32| match kind {
        Reduction::Sum | Reduction::Mean => o + v,
        Reduction::Max => max_ignoring_nan(o, v),
        Reduction::Min => min_ignoring_nan(o, v),
        Reduction::Prod => o * v,
        Reduction::SumSquare | Reduction::L2 => o + v * v,
        Reduction::L1 => o + v.abs(),
        Reduction::LogSumExp => o + (v - max).exp(),
    };
    // Short rows of innermost reduced axes (a max over the last axis of [.., 3]): one loop
    // over the output, each row folded in place; through the per-row walk below the call
    // and fold set-up per 3-element row ran 72× the memory bound.
    let trailing = axes
        .iter()
        .enumerate()
        .all(|(i, &axis)| axis == shape.len() - axes.len() + i);
    if trailing && reduced_count <= SHORT_CHUNK && kind != Reduction::LogSumExp {
        for (o, row) in out.iter_mut().zip(input.chunks_exact(reduced_count)) {
            *o = row.iter().fold(*o, |acc, &v| combine(acc, v, 0.0));
        }
    } else {
        for_each_row(shape, &out_stride_of, |start, offset, stride, len| {
            let row = &input[start..start + len];
            if stride == 0 {
                // The row runs along a reduced axis: fold it in registers. Accumulating straight
                // into `out[offset]` chained every element through a store and a load (about 3 ns
                // per element, 60× under the memory roof on a row-wise ReduceMean).
                let max = maxima.get(offset).copied().unwrap_or(0.0);
                out[offset] = fold_row(kind, row, out[offset], max);
            } else if stride == 1 {
                // The row runs along a kept axis (a sum over channels of [C, H·W]): fold it into a
                // contiguous output row, one vectorised pass per kind.
                let acc = &mut out[offset..offset + len];
                let pairs = acc.iter_mut().zip(row);
                match kind {
                    Reduction::Sum | Reduction::Mean => pairs.for_each(|(o, &v)| *o += v),
                    Reduction::Max => pairs.for_each(|(o, &v)| *o = max_ignoring_nan(*o, v)),
                    Reduction::Min => pairs.for_each(|(o, &v)| *o = min_ignoring_nan(*o, v)),
                    Reduction::Prod => pairs.for_each(|(o, &v)| *o *= v),
                    Reduction::SumSquare | Reduction::L2 => pairs.for_each(|(o, &v)| *o += v * v),
                    Reduction::L1 => pairs.for_each(|(o, &v)| *o += v.abs()),
                    Reduction::LogSumExp => {
                        let maxima = &maxima[offset..offset + len];
                        for ((o, &v), &max) in pairs.zip(maxima) {
                            *o += (v - max).exp();
                        }
                    }
                }
            } else {
                for (k, &v) in row.iter().enumerate() {
                    let at = offset + k * stride;
                    let max = maxima.get(at).copied().unwrap_or(0.0);
                    out[at] = combine(out[at], v, max);
                }
            }
        });
    }
    match kind {
        Reduction::Mean => out.iter_mut().for_each(|o| *o /= reduced_count as f32),
        Reduction::L2 => out.iter_mut().for_each(|o| *o = o.sqrt()),
        Reduction::LogSumExp => out
            .iter_mut()
            .zip(&maxima)
            .for_each(|(o, m)| *o = o.ln() + m),
        _ => {}
    }
}
}

/// `f32::max` for an accumulator that is never NaN (it starts at −∞ and keeps itself against
/// a NaN element): one compare and select, which vectorises to `vmaxps`, where `f32::max`
/// adds a NaN fix-up to every vector. NaN elements are skipped, as `f32::max` skips them.
#[inline(always)]
fn max_ignoring_nan(acc: f32, value: f32) -> f32 {
    if value > acc {
        value
    } else {
        acc
    }
}

/// The minimum counterpart of [`max_ignoring_nan`].
#[inline(always)]
fn min_ignoring_nan(acc: f32, value: f32) -> f32 {
    if value < acc {
        value
    } else {
        acc
    }
}

/// `kind` folded over `row` onto `init`, in eight independent lanes the compiler vectorises
/// (summation order differs from a sequential fold by rounding only).
#[inline(always)]
pub(crate) fn fold_row(kind: Reduction, row: &[f32], init: f32, max: f32) -> f32 {
    const LANES: usize = 8;
    fn lanes(row: &[f32], identity: f32, step: impl Fn(f32, f32) -> f32) -> [f32; LANES] {
        let mut acc = [identity; LANES];
        let chunks = row.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for (a, &v) in acc.iter_mut().zip(chunk) {
                *a = step(*a, v);
            }
        }
        for (a, &v) in acc.iter_mut().zip(tail) {
            *a = step(*a, v);
        }
        acc
    }
    let sum = |acc: [f32; LANES]| acc.iter().sum::<f32>();
    match kind {
        Reduction::Sum | Reduction::Mean => init + sum(lanes(row, 0.0, |a, v| a + v)),
        Reduction::SumSquare | Reduction::L2 => init + sum(lanes(row, 0.0, |a, v| a + v * v)),
        Reduction::L1 => init + sum(lanes(row, 0.0, |a, v| a + v.abs())),
        Reduction::Max => lanes(row, f32::NEG_INFINITY, max_ignoring_nan)
            .into_iter()
            .fold(init, f32::max),
        Reduction::Min => lanes(row, f32::INFINITY, min_ignoring_nan)
            .into_iter()
            .fold(init, f32::min),
        Reduction::Prod => lanes(row, 1.0, |a, v| a * v)
            .into_iter()
            .fold(init, |a, v| a * v),
        Reduction::LogSumExp => init + row.iter().map(|&v| (v - max).exp()).sum::<f32>(),
    }
}

#[cfg(test)]
mod tests;
