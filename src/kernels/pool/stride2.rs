//! The stride-2 pooling kernels of windows up to 3×3 (the 3×3 stride-2 max pools of ResNet,
//! SqueezeNet and Inception, 2×2 stride-2 pools): whole windows loaded straight from the plane
//! (AVX-512 and AVX2), and row kernels that de-interleave a combined row in registers.

use super::Pool2d;
use crate::kernels::simd::{isa_level, IsaLevel};

/// The combine of a stride-2 pool's fast horizontal pass (the generic path takes a closure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stride2 {
    Max,
    Add,
}

/// Identity floats kept past a row's `width` columns, so the fast stride-2 pass may load a whole
/// vector block beyond the last output it writes.
pub(super) const STRIDE2_SLACK: usize = 32;

/// `(row, out, kernel_w, op) -> outputs written`: `out[x] = op(row[2x], …, row[2x + kernel_w −
/// 1])` for `x` in `0..written`; the caller finishes the rest.
pub(super) type Stride2Rows = unsafe fn(&[f32], &mut [f32], usize, Stride2) -> usize;

/// A level's stride-2 kernels: the row kernel, and the whole-window one where the level has it.
#[derive(Clone, Copy)]
pub(super) struct Stride2Kernels {
    pub(super) rows: Stride2Rows,
    pub(super) window: Option<Stride2Window>,
}

/// The stride-2 kernels of `level` (capped by the CPU), if it has them.
pub(super) fn stride2_kernels(level: IsaLevel) -> Option<Stride2Kernels> {
    #[cfg(target_arch = "x86_64")]
    match level.min(isa_level()) {
        IsaLevel::Avx512 => {
            return Some(Stride2Kernels {
                rows: stride2_rows_avx512,
                window: Some(stride2_window_avx512),
            })
        }
        IsaLevel::Avx2 => {
            return Some(Stride2Kernels {
                rows: stride2_rows_avx2,
                window: Some(stride2_window_avx2),
            })
        }
        _ => {}
    }
    let _ = level;
    None
}

/// `(geometry, input, output, op)`: every plane of a stride-2 pool with a window of at most
/// 3×3 (positions outside the plane ignored); `input` holds `planes` planes of `in_h × in_w`
/// and `output` their `out_h × out_w` outputs. The planes loop inside, so the per-geometry
/// set-up (block starts, edge masks) is done once per call.
pub(super) type Stride2Window = unsafe fn(&Pool2d, &[f32], &mut [f32], Stride2);

/// 16 outputs per step: per window row, 32 columns from `2x − pad_left` (and 32 from two
/// further for the third tap) loaded, under a mask of the columns inside the row at the
/// edges, the rows combined, then the even and odd columns gathered with two-source permutes
/// and combined. Masked loads do not touch the lanes they leave out, so the edges need no
/// padded copy; the masks depend on the column only and are computed once per call.
///
/// # Safety
/// AVX-512F must be available; the window is at most 3×3 with stride 2 (the slices' lengths
/// are asserted against `p.planes`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stride2_window_avx512(p: &Pool2d, input: &[f32], output: &mut [f32], op: Stride2) {
    match op {
        Stride2::Max => stride2_window_avx512_with::<true>(p, input, output),
        Stride2::Add => stride2_window_avx512_with::<false>(p, input, output),
    }
}

/// [`stride2_window_avx512`] for max (`MAX`) or sum, with the combine inlined.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stride2_window_avx512_with<const MAX: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    assert!(
        input.len() >= p.planes * ih * iw
            && output.len() >= p.planes * oh * ow
            && p.kernel_h <= 3
            && p.kernel_w <= 3
    );
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let identity = if MAX {
        _mm512_set1_ps(f32::NEG_INFINITY)
    } else {
        _mm512_setzero_ps()
    };
    macro_rules! combine {
        ($a:expr, $b:expr) => {
            if MAX {
                _mm512_max_ps($a, $b)
            } else {
                _mm512_add_ps($a, $b)
            }
        };
    }
    let width = iw as isize;
    // The lanes of a 16-float load from column `c` that lie inside the row.
    let mask = |c: isize| -> __mmask16 {
        let lo = (-c).clamp(0, 16) as u32;
        let hi = (width - c).clamp(0, 16) as u32;
        if hi <= lo {
            0
        } else {
            (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16
        }
    };
    let three = p.kernel_w == 3;
    // Per block of 16 outputs: its first column, and the masks of its four loads (`None` for
    // a block whose loads all lie inside the row).
    let blocks: Vec<(isize, Option<[__mmask16; 4]>)> = (0..ow)
        .step_by(16)
        .map(|x| {
            let c = 2 * x as isize - p.pad_left as isize;
            let inside = c >= 0 && c + 34 <= width;
            (
                c,
                (!inside).then(|| [mask(c), mask(c + 16), mask(c + 2), mask(c + 18)]),
            )
        })
        .collect();
    for plane_index in 0..p.planes {
        // From `input` itself, not a sub-slice: the AVX2 kernel may read the float after a
        // plane's last row, which is the next plane's first.
        let plane = input.as_ptr().add(plane_index * ih * iw);
        let out = &mut output[plane_index * oh * ow..(plane_index + 1) * oh * ow];
        for y in 0..oh {
            let (rows, present) = window_rows(p, plane, y);
            let out_row = out.as_mut_ptr().add(y * ow);
            for (b, &(c, masks)) in blocks.iter().enumerate() {
                let (mut lo, mut hi) = (identity, identity);
                let (mut lo2, mut hi2) = (identity, identity);
                match masks {
                    None => {
                        for &row in &rows[..present] {
                            let at = row.offset(c);
                            lo = combine!(lo, _mm512_loadu_ps(at));
                            hi = combine!(hi, _mm512_loadu_ps(at.add(16)));
                            if three {
                                lo2 = combine!(lo2, _mm512_loadu_ps(at.add(2)));
                                hi2 = combine!(hi2, _mm512_loadu_ps(at.add(18)));
                            }
                        }
                    }
                    Some([m_lo, m_hi, m_lo2, m_hi2]) => {
                        // Masked-off lanes are not accessed: the addresses past the row's ends
                        // are only formed (wrapping), never read.
                        for &row in &rows[..present] {
                            let at = |offset: isize| row.wrapping_offset(c + offset);
                            lo = combine!(lo, _mm512_mask_loadu_ps(identity, m_lo, at(0)));
                            hi = combine!(hi, _mm512_mask_loadu_ps(identity, m_hi, at(16)));
                            if three {
                                lo2 = combine!(lo2, _mm512_mask_loadu_ps(identity, m_lo2, at(2)));
                                hi2 = combine!(hi2, _mm512_mask_loadu_ps(identity, m_hi2, at(18)));
                            }
                        }
                    }
                }
                let mut acc = combine!(
                    _mm512_permutex2var_ps(lo, even, hi),
                    _mm512_permutex2var_ps(lo, odd, hi)
                );
                if three {
                    acc = combine!(acc, _mm512_permutex2var_ps(lo2, even, hi2));
                }
                let x = b * 16;
                let left = ow - x;
                if left >= 16 {
                    _mm512_storeu_ps(out_row.add(x), acc);
                } else {
                    _mm512_mask_storeu_ps(out_row.add(x), ((1u32 << left) - 1) as u16, acc);
                }
            }
        }
    }
}

/// 16 outputs per step: the even and odd columns of 32 loaded floats are gathered with two
/// two-source permutes, and the third tap's even columns (offset 2) with a third.
///
/// # Safety
/// AVX-512F must be available; `row` must hold `2·out.len() + kernel_w − 1` floats (the loop
/// stops short where it holds fewer than 34 past a block's start).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stride2_rows_avx512(row: &[f32], out: &mut [f32], kernel_w: usize, op: Stride2) -> usize {
    use std::arch::x86_64::*;
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let combine = |a: __m512, b: __m512| match op {
        // `a > b ? a : b`, the scalar path's order.
        Stride2::Max => _mm512_max_ps(a, b),
        Stride2::Add => _mm512_add_ps(a, b),
    };
    let src = row.as_ptr();
    let mut x = 0;
    // Loads reach float 2x + 34 at most (the offset-2 pair), inside the caller's slack even for
    // the last, partial block, whose outputs are stored under a mask: the 27- and 55-wide rows
    // of SqueezeNet's pools would otherwise leave a third of their outputs to a scalar tail.
    while x < out.len() && 2 * x + 34 <= row.len() {
        let (lo, hi) = (
            _mm512_loadu_ps(src.add(2 * x)),
            _mm512_loadu_ps(src.add(2 * x + 16)),
        );
        let mut acc = combine(
            _mm512_permutex2var_ps(lo, even, hi),
            _mm512_permutex2var_ps(lo, odd, hi),
        );
        if kernel_w == 3 {
            let (lo2, hi2) = (
                _mm512_loadu_ps(src.add(2 * x + 2)),
                _mm512_loadu_ps(src.add(2 * x + 18)),
            );
            acc = combine(acc, _mm512_permutex2var_ps(lo2, even, hi2));
        }
        let left = out.len() - x;
        if left >= 16 {
            _mm512_storeu_ps(out.as_mut_ptr().add(x), acc);
        } else {
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(x), (1u16 << left) - 1, acc);
        }
        x += left.min(16);
    }
    x
}

/// [`stride2_rows_avx512`] on AVX2: 8 outputs per step from 16 (and 16 more at offset 2 for a
/// third tap) loaded floats, combined while still interleaved by in-lane shuffles (even and odd
/// columns of each 128-bit half), then put in order with one cross-lane permute. A row whose
/// length is not a multiple of 8 ends with one overlapping block (the outputs are pure, so
/// writing some twice is harmless). On a Zen 1 guest the row split into phase planes and
/// combined tap by tap ran SqueezeNet's 3×3 stride-2 max pools at 1.4× onnxruntime's time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn stride2_rows_avx2(row: &[f32], out: &mut [f32], kernel_w: usize, op: Stride2) -> usize {
    use std::arch::x86_64::*;
    let combine = |a: __m256, b: __m256| match op {
        // `a > b ? a : b`, the scalar path's order.
        Stride2::Max => _mm256_max_ps(a, b),
        Stride2::Add => _mm256_add_ps(a, b),
    };
    let src = row.as_ptr();
    let (dst, out_len) = (out.as_mut_ptr(), out.len());
    // Outputs x..x + 8 read floats 2x..2x + 18 (the offset-2 pair).
    let block = |x: usize| {
        let (lo, hi) = (
            _mm256_loadu_ps(src.add(2 * x)),
            _mm256_loadu_ps(src.add(2 * x + 8)),
        );
        let mut acc = combine(
            _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi),
            _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi),
        );
        if kernel_w == 3 {
            let (lo2, hi2) = (
                _mm256_loadu_ps(src.add(2 * x + 2)),
                _mm256_loadu_ps(src.add(2 * x + 10)),
            );
            acc = combine(acc, _mm256_shuffle_ps::<0b10_00_10_00>(lo2, hi2));
        }
        // 64-bit quarters (x0 x1, x4 x5, x2 x3, x6 x7) → in order.
        let ordered = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(acc));
        _mm256_storeu_ps(dst.add(x), _mm256_castpd_ps(ordered));
    };
    let fits = |x: usize| x + 8 <= out_len && 2 * x + 18 <= row.len();
    let mut x = 0;
    while fits(x) {
        block(x);
        x += 8;
    }
    if x < out_len && out_len >= 8 && fits(out_len - 8) {
        block(out_len - 8);
        x = out_len;
    }
    x
}

/// [`stride2_window_avx512`] on AVX2: 8 outputs per block, each window row's 16 columns from
/// `2x − pad_left` (and 16 from two further) loaded straight from the plane and combined
/// vertically, then the even and odd columns gathered as in [`stride2_rows_avx2`]. Blocks whose
/// used columns reach past a row's ends load the nearest columns inside it and permute them
/// into place, the identity in the lanes outside; a block whose only load past the row is the
/// float the shuffles discard reads the next row's first float (never past `input`'s end); a
/// row whose width is not a multiple of 8 ends with one overlapping block. The row path (the
/// window rows combined into a padded copy, then the row kernel) ran SqueezeNet's 3×3 stride-2
/// max pools at 4-6× onnxruntime's time on a Zen 1 guest, in per-row work.
///
/// # Safety
/// AVX2 must be available; as [`stride2_window_avx512`] otherwise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn stride2_window_avx2(p: &Pool2d, input: &[f32], output: &mut [f32], op: Stride2) {
    match op {
        Stride2::Max if p.kernel_w == 3 => stride2_window_avx2_with::<true, true>(p, input, output),
        Stride2::Max => stride2_window_avx2_with::<true, false>(p, input, output),
        Stride2::Add if p.kernel_w == 3 => {
            stride2_window_avx2_with::<false, true>(p, input, output)
        }
        Stride2::Add => stride2_window_avx2_with::<false, false>(p, input, output),
    }
}

/// [`stride2_window_avx2`] for max (`MAX`) or sum, with the combine inlined, and a third
/// window column (`THREE`) or not.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn stride2_window_avx2_with<const MAX: bool, const THREE: bool>(
    p: &Pool2d,
    input: &[f32],
    output: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    assert!(
        input.len() >= p.planes * ih * iw
            && output.len() >= p.planes * oh * ow
            && p.kernel_h <= 3
            && p.kernel_w == if THREE { 3 } else { 2 }
    );
    let identity = if MAX {
        _mm256_set1_ps(f32::NEG_INFINITY)
    } else {
        _mm256_setzero_ps()
    };
    macro_rules! combine {
        ($a:expr, $b:expr) => {
            if MAX {
                _mm256_max_ps($a, $b)
            } else {
                _mm256_add_ps($a, $b)
            }
        };
    }
    let width = iw as isize;
    if iw < 8 {
        // Rows narrower than a vector: the window loop, scalar (a few floats per row).
        for plane_index in 0..p.planes {
            stride2_window_scalar::<MAX>(
                p,
                &input[plane_index * ih * iw..(plane_index + 1) * ih * iw],
                &mut output[plane_index * oh * ow..(plane_index + 1) * oh * ow],
            );
        }
        return;
    }
    // Columns a block loads past its first (`c + 2 + 16` for the third tap), and those whose
    // values it uses: the third tap keeps the even columns of its loads only, so the last
    // float it loads is discarded and may lie outside the row.
    let (loaded, used): (isize, isize) = if THREE { (18, 17) } else { (16, 16) };
    // An edge load: 8 floats from column `c` of which some lie outside the row. It loads the
    // nearest 8 columns inside the row (from `c0`), moves each wanted column to its lane with
    // one `vpermps` and puts the identity in the lanes outside with one blend: `vmaskmovps`
    // loads (with a blend) ran these pools at 0.7 µs per 14² plane on a Zen 1 guest.
    let edge = |c: isize| -> Edge {
        let c0 = c.clamp(0, width - 8);
        let index: [i32; 8] = std::array::from_fn(|l| (c + l as isize - c0).clamp(0, 7) as i32);
        let outside: [f32; 8] = std::array::from_fn(|l| {
            let column = c + l as isize;
            if (0..width).contains(&column) {
                0.0
            } else {
                // Sign bit set: the blend takes the identity.
                -1.0
            }
        });
        (
            c0,
            _mm256_loadu_si256(index.as_ptr() as *const __m256i),
            _mm256_loadu_ps(outside.as_ptr()),
        )
    };
    type Edge = (isize, __m256i, __m256);
    // A row's blocks: a run of whole blocks of 8 whose loads stay within `reach` columns of the
    // row (the bounds are monotone along it), run straight, and the rest: the blocks at the
    // edges with their four edge loads, and the last block, pulled back to end at the row's
    // end when `ow` is not a multiple of 8 (its outputs are pure, so writing some twice is
    // harmless; a row narrower than a vector is one block stored through a copy). Looking the
    // blocks up in a table, edge or not, ran these pools at twice the time of the run.
    struct RowPlan {
        /// Whole blocks of 8 from `run.start`, every 8 columns, loads all inside the row.
        run: std::ops::Range<usize>,
        /// The block pulled back to end at the row's end, when it follows the run and its
        /// loads are inside the row: run with it.
        tail: Option<usize>,
        /// The other blocks: first output, first column and (at the edges) the four loads.
        others: Vec<(usize, isize, Option<[Edge; 4]>)>,
    }
    let row_plan = |reach: isize| -> RowPlan {
        let column = |x: usize| 2 * x as isize - p.pad_left as isize;
        let inside = |x: usize| column(x) >= 0 && column(x) + reach <= width;
        let whole = ow / 8;
        let run_start = (0..whole).find(|&b| inside(8 * b)).unwrap_or(whole);
        let run_end = (run_start..whole)
            .find(|&b| !inside(8 * b))
            .unwrap_or(whole);
        let mut starts: Vec<usize> = (0..run_start)
            .chain(run_end..whole)
            .map(|b| 8 * b)
            .collect();
        let mut tail = None;
        if ow % 8 != 0 {
            let last = ow.saturating_sub(8);
            if ow >= 8 && run_end == whole && run_end > run_start && inside(last) {
                tail = Some(last);
            } else {
                starts.push(last);
            }
        }
        let others = starts
            .into_iter()
            .map(|x| {
                let c = column(x);
                let edges = (!inside(x)).then(|| [edge(c), edge(c + 8), edge(c + 2), edge(c + 10)]);
                (x, c, edges)
            })
            .collect();
        RowPlan {
            run: 8 * run_start..8 * run_end,
            tail,
            others,
        }
    };
    // A block whose discarded last float lies past the row reads the next row's first float,
    // which is inside `input` except after the last row of the last plane: SqueezeNet's
    // unpadded 55² and 27² pools end every row with such a block, and edge loads there cost
    // more than the rest of the row.
    let plan_in_plane = row_plan(used);
    let plan_at_end = row_plan(loaded);
    let input_end = input.as_ptr().add(p.planes * ih * iw);
    let pad_left = p.pad_left as isize;
    for plane_index in 0..p.planes {
        // From `input` itself, not a sub-slice: the AVX2 kernel may read the float after a
        // plane's last row, which is the next plane's first.
        let plane = input.as_ptr().add(plane_index * ih * iw);
        let out = &mut output[plane_index * oh * ow..(plane_index + 1) * oh * ow];
        for y in 0..oh {
            let (rows, present) = window_rows(p, plane, y);
            if present == 0 {
                // A window wholly in the padding: the identity.
                let identity_value = if MAX { f32::NEG_INFINITY } else { 0.0 };
                out[y * ow..(y + 1) * ow].fill(identity_value);
                continue;
            }
            let plan = if rows[present - 1].add(iw) == input_end {
                &plan_at_end
            } else {
                &plan_in_plane
            };
            let out_row = out.as_mut_ptr().add(y * ow);
            // The horizontal pass of a block's vertically combined columns `c..c + 16` (`lo`,
            // `hi`) and `c + 2..c + 18` (`lo2`, `hi2`): even, odd and next-even columns, the
            // in-lane shuffles leaving 64-bit quarters (x0 x1, x4 x5, x2 x3, x6 x7), put in
            // order with one cross-lane permute.
            macro_rules! horizontal {
                ($lo:expr, $hi:expr, $lo2:expr, $hi2:expr) => {{
                    let (lo, hi) = ($lo, $hi);
                    let mut acc = combine!(
                        _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi),
                        _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi)
                    );
                    if THREE {
                        acc = combine!(acc, _mm256_shuffle_ps::<0b10_00_10_00>($lo2, $hi2));
                    }
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                        acc,
                    )))
                }};
            }
            // Both passes of one block with the window's rows combined in a loop, each row's
            // columns from `c + offset` (offsets 0, 8, and 2, 10 for the third tap) loaded by
            // `$load(row, offset)`: the windows cut by the padding and the edge blocks.
            macro_rules! over_rows {
                ($load:expr) => {{
                    let load = $load;
                    let (mut lo, mut hi) = (identity, identity);
                    let (mut lo2, mut hi2) = (identity, identity);
                    for &row in &rows[..present] {
                        lo = combine!(lo, load(row, 0));
                        hi = combine!(hi, load(row, 8));
                        if THREE {
                            lo2 = combine!(lo2, load(row, 2));
                            hi2 = combine!(hi2, load(row, 10));
                        }
                    }
                    horizontal!(lo, hi, lo2, hi2)
                }};
            }
            // The vertical then horizontal pass of the block of 8 outputs whose first column
            // is `c`, loads all inside the rows: straight-line when the window has three rows
            // (a loop over the rows ran twice the time).
            macro_rules! inside_block {
                ($c:expr) => {{
                    let c = $c;
                    if present == 3 {
                        let (a, b, d) = (rows[0].offset(c), rows[1].offset(c), rows[2].offset(c));
                        let column3 = |offset: usize| {
                            combine!(
                                combine!(
                                    _mm256_loadu_ps(a.add(offset)),
                                    _mm256_loadu_ps(b.add(offset))
                                ),
                                _mm256_loadu_ps(d.add(offset))
                            )
                        };
                        if THREE {
                            horizontal!(column3(0), column3(8), column3(2), column3(10))
                        } else {
                            horizontal!(column3(0), column3(8), identity, identity)
                        }
                    } else {
                        over_rows!(|row: *const f32, offset: isize| _mm256_loadu_ps(
                            row.offset(c + offset)
                        ))
                    }
                }};
            }
            let mut x = plan.run.start;
            while x < plan.run.end {
                _mm256_storeu_ps(out_row.add(x), inside_block!(2 * x as isize - pad_left));
                x += 8;
            }
            if let Some(x) = plan.tail {
                _mm256_storeu_ps(out_row.add(x), inside_block!(2 * x as isize - pad_left));
            }
            for (x, c, edges) in &plan.others {
                let (x, c) = (*x, *c);
                let ordered = match edges {
                    None => inside_block!(c),
                    Some(e) => over_rows!(|row: *const f32, offset: isize| {
                        // The edge load standing for the columns from `c + offset`.
                        let (c0, index, outside): &Edge = &e[match offset {
                            0 => 0,
                            8 => 1,
                            2 => 2,
                            _ => 3,
                        }];
                        let v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row.offset(*c0)), *index);
                        _mm256_blendv_ps(v, identity, *outside)
                    }),
                };
                if x + 8 <= ow {
                    _mm256_storeu_ps(out_row.add(x), ordered);
                } else {
                    let mut values = [0.0f32; 8];
                    _mm256_storeu_ps(values.as_mut_ptr(), ordered);
                    std::ptr::copy_nonoverlapping(values.as_ptr(), out_row.add(x), ow - x);
                }
            }
        }
    }
}

/// The input rows of output row `y`'s windows that lie inside `plane` (rows in the padding left
/// out), and how many there are: both window kernels read their windows through these. The
/// rows are consecutive, so the array is built whole from the first one: filled one pointer at
/// a time under a test, it was stored piecewise and reloaded whole, a store-forwarding stall per
/// output row (a tenth of the 3×3 stride-2 pools' time on a Zen 1 guest).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn window_rows(p: &Pool2d, plane: *const f32, y: usize) -> ([*const f32; 3], usize) {
    let top = (2 * y) as isize - p.pad_top as isize;
    let first = top.max(0) as usize;
    let end = ((top + p.kernel_h as isize).max(0) as usize).min(p.in_h);
    let present = end.saturating_sub(first);
    let base = plane.wrapping_add(first * p.in_w);
    // Pointers past `present` are formed (wrapping), never read.
    let rows = [
        base,
        base.wrapping_add(p.in_w),
        base.wrapping_add(2 * p.in_w),
    ];
    (rows, present)
}

/// One plane of a stride-2 pool (window at most 3×3) by the window loop, for rows narrower than
/// a vector: max (`MAX`) or sum of the taps inside the plane.
fn stride2_window_scalar<const MAX: bool>(p: &Pool2d, plane: &[f32], out: &mut [f32]) {
    for y in 0..p.out_h {
        for x in 0..p.out_w {
            let mut acc = if MAX { f32::NEG_INFINITY } else { 0.0 };
            for ky in 0..p.kernel_h {
                let iy = (2 * y + ky) as isize - p.pad_top as isize;
                if !(0..p.in_h as isize).contains(&iy) {
                    continue;
                }
                for kx in 0..p.kernel_w {
                    let ix = (2 * x + kx) as isize - p.pad_left as isize;
                    if (0..p.in_w as isize).contains(&ix) {
                        let v = plane[iy as usize * p.in_w + ix as usize];
                        acc = if MAX {
                            if acc > v {
                                acc
                            } else {
                                v
                            }
                        } else {
                            acc + v
                        };
                    }
                }
            }
            out[y * p.out_w + x] = acc;
        }
    }
}
