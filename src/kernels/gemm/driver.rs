//! The cache-blocked loop nest, the GEMV path and the threading.
//!
//! Loop nest for one region of C (one thread's share), BLIS order:
//! `jc` over n by `nc` → `pc` over k by `kc` (pack the `kc × nc` B block, L3) → `ic` over m by
//! `mc` (pack the `mc × kc` A block, L2) → `jr` over NR micro-panels (the `kc × NR` B
//! micro-panel stays in L1) → `ir` over MR micro-panels → microkernel. The first k-block
//! overwrites C, later ones accumulate, and the last one applies the epilogue in the store.
//!
//! Threading: the output is split along one dimension into tasks run by the cached pool of
//! exactly `threads` workers (`kernels::parallel`; `threads == 1` runs inline and spawns
//! nothing). The operand that every task needs whole is packed once, up front and in parallel
//! (or is already pre-packed); each task packs its own slice of the other operand block by
//! block. So no packing is duplicated, tasks need no barriers, and there are a few tasks per
//! thread so work-stealing evens out a noisy core. Split along n when n offers at least as
//! many tiles (conv shapes: m = channels, n = pixels) or A is pre-packed; along m otherwise.

use super::buf::{with_scratch, AlignedBuf, SCRATCH_A, SCRATCH_B, SCRATCH_WHOLE};
use super::isa::Kernel;
use super::micro::{offset, TileEpi, PREFETCH_STRIDE};
use super::pack::PackedView;
use super::{BiasKind, Epilogue, MatRef};
use crate::kernels::parallel::{parallel_for, threads_for_flops, SendPtr};

/// Floats of a packed B block (k-block × columns) small enough to stay in L1 (16 KiB) while
/// every row panel of A runs over it.
const SMALL_B_BLOCK: usize = 4096;
/// A block of C is computed row panel by row panel (see `macro_kernel`) when its k-block is
/// at most this deep and it has at least [`ROW_ORDER_MIN_C`] elements, and B is not a
/// pre-packed operand. Writing C is then a large share of the work and, out of L2, each row
/// panel's C rows stream in order. Alternated calls on an Emerald Rapids core (1 thread,
/// packed A, bias and ReLU): 256 × 3136 × 64 (ResNet-50's 64 → 256 1×1 convolutions on 56²)
/// 849 → 782 µs, with the skip connection added 1010 → 908; 128 × 3136 × 32 231 → 221 (both
/// orders with this session's epilogue). Deeper k-blocks gained 1-3% alone (512 × 3136 × 128,
/// 1024 × 784 × 256) but lost in ResNet-50, where the weights arrive from DRAM (its 512 × 784
/// × 128 downsampling convolution 716 → 782 µs); so did C blocks under 64 Ki elements (the
/// Winograd products of 64 × 196 × 64: 3×3 layers 4-6% slower), hence [`ROW_ORDER_MIN_C`].
const ROW_ORDER_MAX_K: usize = 64;
/// Elements of a C block (A block rows × B block columns, 256 KiB) from which row-panel order
/// pays: a smaller block stays in L2 whichever order writes it.
const ROW_ORDER_MIN_C: usize = 1 << 16;
/// Minimum matrix elements per thread for the memory-bound GEMV.
const MIN_GEMV_ELEMS_PER_THREAD: usize = 1 << 16;
/// Outputs per GEMV chunk (before rounding to the panel width).
const GEMV_CHUNK: usize = 256;
const GEMV_CHUNK_MAX: usize = GEMV_CHUNK + 64;
/// Outputs per chunk of the axpy form (row-streamed): long row segments stream well, and the
/// outputs (8 KiB) stay in L1.
const AXPY_CHUNK: usize = 2048;

/// `gemm::gemv_threads`: the GEMV's split as the kernels apply it outside the unit tests.
pub(crate) fn gemv_threads(threads: usize, matrix_elements: usize) -> usize {
    threads
        .min(matrix_elements / MIN_GEMV_ELEMS_PER_THREAD)
        .max(1)
}

/// The unit tests thread even tiny GEMVs, so the threaded paths are covered cheaply.
fn min_gemv_elems_per_thread() -> usize {
    if cfg!(test) {
        1
    } else {
        MIN_GEMV_ELEMS_PER_THREAD
    }
}

/// A raw operand seen as `len × k`: element `(w, kk)` at `ptr[w·ws + kk·ks]`.
#[derive(Clone, Copy)]
pub(crate) struct Src {
    pub ptr: *const f32,
    pub ws: usize,
    pub ks: usize,
    pub len: usize,
}

// SAFETY: a `Src` is a read-only view of a slice the caller keeps borrowed for the whole call.
unsafe impl Send for Src {}
unsafe impl Sync for Src {}

impl Src {
    pub fn of_a(a: &MatRef) -> Src {
        Src {
            ptr: a.data.as_ptr(),
            ws: a.row_stride,
            ks: a.col_stride,
            len: a.rows,
        }
    }

    pub fn of_b(b: &MatRef) -> Src {
        Src {
            ptr: b.data.as_ptr(),
            ws: b.col_stride,
            ks: b.row_stride,
            len: b.cols,
        }
    }

    #[inline]
    unsafe fn at(&self, w: usize, kk: usize) -> *const f32 {
        self.ptr.add(w * self.ws + kk * self.ks)
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Opnd<'a> {
    Raw(Src),
    Packed(PackedView<'a>),
    /// A B operand that is never written out whole: it packs its own blocks (a convolution's
    /// im2col matrix, built straight into the packed panels).
    Source(&'a dyn PackSource),
}

/// A `k × n` B operand that packs itself.
pub(crate) trait PackSource: Sync {
    /// Columns (`n`).
    fn cols(&self) -> usize;
    /// Packs rows `k0..k0 + klen` of columns `j0..j0 + wlen` into `w`-wide panels at `dst`:
    /// panel `p` at `dst + p·klen·w`, element `(kk, lane)` at `kk·w + lane`, lanes past `wlen`
    /// of the last panel zero (the layout of `pack.rs`).
    ///
    /// # Safety
    /// `dst` must hold `wlen.div_ceil(w) · klen · w` floats; the ranges lie inside the operand.
    unsafe fn pack(&self, k0: usize, klen: usize, j0: usize, wlen: usize, w: usize, dst: *mut f32);
}

/// One GEMM call, validated.
pub(crate) struct Job<'a> {
    pub kern: &'static Kernel,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Opnd<'a>,
    pub b: Opnd<'a>,
    pub c: *mut f32,
    pub ldc: usize,
    pub epi: &'a Epilogue<'a>,
    pub mc: usize,
    pub kc: usize,
    pub nc: usize,
    pub nc_short: usize,
    /// The matrix a GEMV streams (B, or A for a one-column product) comes from memory, not
    /// from a cache, at this call: it is larger than the last-level cache, or B is one of a set
    /// of weights that is (`GemmConfig::b_from_memory`). The axpy forms then prefetch the rows
    /// ahead.
    pub gemv_matrix_from_memory: bool,
}

// SAFETY: operands are read-only; tasks write disjoint regions of `c` (see `drive`).
unsafe impl Sync for Job<'_> {}

/// Packs panels `p0..p1` of a whole operand (all k-blocks) into the whole-operand layout.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_panels(
    kern: &Kernel,
    is_a: bool,
    src: Src,
    k: usize,
    kc: usize,
    p0: usize,
    p1: usize,
    dst: *mut f32,
) {
    let (w, f) = if is_a {
        (kern.mr, kern.pack_a)
    } else {
        (kern.nr, kern.pack_b)
    };
    let padded = src.len.div_ceil(w) * w;
    let wlen = (p1 * w).min(src.len) - p0 * w;
    let mut k0 = 0;
    while k0 < k {
        let klen = (k - k0).min(kc);
        f(
            src.at(p0 * w, k0),
            src.ws,
            src.ks,
            wlen,
            klen,
            dst.add(k0 * padded + p0 * klen * w),
        );
        k0 += klen;
    }
}

/// Packs a whole operand into `dst` (`PackedView::size` floats), with `threads` workers.
pub(crate) fn pack_whole(
    kern: &Kernel,
    is_a: bool,
    src: Src,
    k: usize,
    kc: usize,
    dst: &mut [f32],
    threads: usize,
) {
    let w = if is_a { kern.mr } else { kern.nr };
    pack_panel_ranges(src.len, k, w, dst, threads, |p0, p1, out| {
        // SAFETY: `out` holds the whole layout; this range's panels are written only here.
        unsafe { pack_panels(kern, is_a, src, k, kc, p0, p1, out) }
    });
}

/// [`pack_whole`] for a self-packing operand.
fn pack_whole_source(
    src: &dyn PackSource,
    k: usize,
    kc: usize,
    w: usize,
    dst: &mut [f32],
    threads: usize,
) {
    let len = src.cols();
    let padded = len.div_ceil(w) * w;
    pack_panel_ranges(len, k, w, dst, threads, |p0, p1, out| {
        let wlen = (p1 * w).min(len) - p0 * w;
        let mut k0 = 0;
        while k0 < k {
            let klen = (k - k0).min(kc);
            // SAFETY: panels p0..p1 of k-block k0 lie inside `out`, which holds the layout.
            unsafe {
                src.pack(
                    k0,
                    klen,
                    p0 * w,
                    wlen,
                    w,
                    out.add(k0 * padded + p0 * klen * w),
                )
            };
            k0 += klen;
        }
    });
}

/// Splits the `len.div_ceil(w)` panels of a whole packed operand into up to two ranges per
/// thread and runs `pack(p0, p1, dst)` for each range on `threads` workers; ranges write
/// disjoint panels of `dst`.
fn pack_panel_ranges(
    len: usize,
    k: usize,
    w: usize,
    dst: &mut [f32],
    threads: usize,
    pack: impl Fn(usize, usize, *mut f32) + Sync + Send,
) {
    let panels = len.div_ceil(w);
    assert!(dst.len() >= PackedView::size(len, k, w));
    let tasks = panels.min(threads.max(1) * 2).max(1);
    let per = panels.div_ceil(tasks);
    let out = SendPtr(dst.as_mut_ptr());
    parallel_for(threads, panels.div_ceil(per), |t| {
        let (p0, p1) = (t * per, ((t + 1) * per).min(panels));
        pack(p0, p1, out.get());
    });
}

/// The tile epilogue for the tile at `(i, j)` of a k-block.
#[inline]
fn tile_epi<'e>(job: &'e Job, i: usize, j: usize, first: bool, last: bool) -> TileEpi<'e> {
    let (bias_row, bias_col) = match job.epi.bias {
        BiasKind::PerRow(b) if last => (b[i..].as_ptr(), std::ptr::null()),
        BiasKind::PerCol(b) if last => (std::ptr::null(), b[j..].as_ptr()),
        _ => (std::ptr::null(), std::ptr::null()),
    };
    let residual = match job.epi.residual {
        Some(r) if last => r[i * job.ldc + j..].as_ptr(),
        _ => std::ptr::null(),
    };
    TileEpi {
        accumulate: !first,
        last,
        bias_row,
        bias_col,
        residual,
        act: &job.epi.activation,
        prefetch_b: std::ptr::null(),
    }
}

/// One k-block of an A block as the microkernels read it.
#[derive(Clone, Copy)]
enum ABlock {
    /// Packed micro-panels of `kl × MR` floats, one after the other.
    Packed(*const f32),
    /// A row-major A read where it lies: `rows` at the block's first row and k-block start,
    /// `lda` floats between rows. A last micro-panel of fewer than MR rows is packed at `tail`
    /// (the unpacked microkernel reads all MR rows).
    Rows {
        rows: *const f32,
        lda: usize,
        tail: *const f32,
    },
}

/// The `jr`/`ir` loops over one A block (`mcl` rows from `ic`) and one packed B block
/// (`ncl` columns from `jc`) of k-block length `kl`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn macro_kernel(
    job: &Job,
    a: ABlock,
    bp: *const f32,
    ic: usize,
    mcl: usize,
    jc: usize,
    ncl: usize,
    kl: usize,
    first: bool,
    last: bool,
) {
    let (mr, nr) = (job.kern.mr, job.kern.nr);
    // The tile of micro-panel row `ir` and column `jr`, with B's micro-panel at `bpanel`.
    let tile = |ir: usize, jr: usize, bpanel: *const f32, te: &TileEpi| {
        let m_eff = (mcl - ir).min(mr);
        let n_eff = (ncl - jr).min(nr);
        let c = job.c.add((ic + ir) * job.ldc + jc + jr);
        match a {
            ABlock::Packed(ap) => {
                (job.kern.micro)(kl, ap.add(ir * kl), bpanel, c, job.ldc, m_eff, n_eff, te)
            }
            ABlock::Rows { rows, lda, .. } if m_eff == mr => {
                (job.kern.micro_rows)(kl, rows.add(ir * lda), lda, bpanel, c, job.ldc, n_eff, te)
            }
            ABlock::Rows { tail, .. } => {
                (job.kern.micro)(kl, tail, bpanel, c, job.ldc, m_eff, n_eff, te)
            }
        }
    };
    // A pre-packed operand (a layer's weights) is read from DRAM by the first call that uses
    // each micro-panel, so the calls before prefetch it into L2, one line per k step, and the
    // stream overlaps their products: ResNet-50's 7×7 layers ran 13-22% faster per op, its
    // 14×14 1×1 layers 16-19%.
    let prefetch_next = matches!(job.b, Opnd::Packed(_));
    let prefetch_next_a = matches!(job.a, Opnd::Packed(_));
    if kl * ncl <= SMALL_B_BLOCK
        || (!prefetch_next && kl <= ROW_ORDER_MAX_K && mcl * ncl >= ROW_ORDER_MIN_C)
    {
        // Row-panel order: MR rows of C written at a time in long contiguous runs, which the
        // hardware prefetchers follow, where column-panel order touches every row of the C
        // block per NR columns. The B block stays in L2 (in L1 when small) while each A
        // micro-panel runs over it from L1. Packed weights as A: the first tile of each row
        // panel prefetches the next A micro-panel.
        let mut ir = 0;
        while ir < mcl {
            let mut jr = 0;
            while jr < ncl {
                let mut te = tile_epi(job, ic + ir, jc + jr, first, last);
                // (Not for the small B blocks, whose row panels are a tile or two long: they
                // took no prefetch before the large blocks joined this order.)
                let large = kl * ncl > SMALL_B_BLOCK;
                if let (true, true, 0, ABlock::Packed(ap)) = (large, prefetch_next_a, jr, a) {
                    te.prefetch_b = ap.wrapping_add((ir + mr) * kl);
                }
                tile(ir, jr, bp.add(jr * kl), &te);
                jr += nr;
            }
            ir += mr;
        }
        return;
    }
    // Column-panel order. With packed B (pixel-major convolutions, dense layers) the first two
    // row panels over a B micro-panel prefetch the next one; with packed A the calls of the
    // first column panel prefetch the next A micro-panel.
    let mut jr = 0;
    while jr < ncl {
        let bpanel = bp.add(jr * kl);
        let next_panel = bpanel.wrapping_add(kl * nr);
        let mut ir = 0;
        while ir < mcl {
            let mut te = tile_epi(job, ic + ir, jc + jr, first, last);
            let covered = (ir / mr) * kl * PREFETCH_STRIDE;
            if prefetch_next && covered < kl * nr {
                te.prefetch_b = next_panel.wrapping_add(covered);
            } else if let (true, 0, ABlock::Packed(ap)) = (prefetch_next_a, jr, a) {
                te.prefetch_b = ap.wrapping_add((ir + mr) * kl);
            }
            tile(ir, jr, bpanel, &te);
            ir += mr;
        }
        jr += nr;
    }
}

/// Computes the region `[i0, i1) × [j0, j1)` of C on the current thread. `i0` is a multiple of
/// MR and `j0` of NR.
///
/// Two loop orders. Tall regions (more rows than `mc`) use the BLIS order above, where a
/// `kc × nc` B block in L3 is shared by every A block. Short regions (one A block: conv
/// layers with few output channels, dense layers with a small batch) run `pc` outermost: the
/// A block is packed once per k-block, and B is packed `nc_short` columns at a time into a
/// buffer that stays in L2 between its packing and its use. (With the BLIS order, a short A
/// block makes each B element do only m/MR microkernel uses after a trip through L3.)
unsafe fn run_region(job: &Job, i0: usize, i1: usize, j0: usize, j1: usize) {
    let kern = job.kern;
    let (mr, nr) = (kern.mr, kern.nr);
    let short = i1 - i0 <= job.mc;
    let nc = if short { job.nc_short } else { job.nc };
    let a_unpacked = reads_a_unpacked(kern, job.a, j1 - j0);
    let a_len = match job.a {
        // Read in place, A needs room for one packed tail panel only.
        Opnd::Raw(_) if a_unpacked => mr * job.kc.min(job.k),
        Opnd::Raw(_) => job.mc.min((i1 - i0).div_ceil(mr) * mr) * job.kc.min(job.k),
        Opnd::Packed(_) => 0,
        Opnd::Source(_) => unreachable!("only B operands pack themselves"),
    };
    let b_len = match job.b {
        Opnd::Raw(_) | Opnd::Source(_) => nc.min((j1 - j0).div_ceil(nr) * nr) * job.kc,
        Opnd::Packed(_) => 0,
    };
    with_scratch(&SCRATCH_A, a_len, |abuf: &mut AlignedBuf| {
        with_scratch(&SCRATCH_B, b_len, |bbuf: &mut AlignedBuf| {
            let abuf = abuf.as_mut_slice().as_mut_ptr();
            let bbuf = bbuf.as_mut_slice().as_mut_ptr();
            let a_block = |k0: usize, kl: usize, ic: usize, mcl: usize| match job.a {
                Opnd::Packed(v) => ABlock::Packed(v.panel(k0, kl, ic / mr)),
                Opnd::Raw(s) if a_unpacked => {
                    let full = mcl / mr * mr;
                    if full < mcl {
                        (kern.pack_a)(s.at(ic + full, k0), s.ws, s.ks, mcl - full, kl, abuf);
                    }
                    ABlock::Rows {
                        rows: s.at(ic, k0),
                        lda: s.ws,
                        tail: abuf,
                    }
                }
                Opnd::Raw(s) => {
                    (kern.pack_a)(s.at(ic, k0), s.ws, s.ks, mcl, kl, abuf);
                    ABlock::Packed(abuf)
                }
                Opnd::Source(_) => unreachable!("only B operands pack themselves"),
            };
            let b_block = |k0: usize, kl: usize, jc: usize, ncl: usize| match job.b {
                Opnd::Packed(v) => v.panel(k0, kl, jc / nr),
                Opnd::Raw(s) => {
                    (kern.pack_b)(s.at(jc, k0), s.ws, s.ks, ncl, kl, bbuf);
                    bbuf as *const f32
                }
                Opnd::Source(src) => {
                    src.pack(k0, kl, jc, ncl, nr, bbuf);
                    bbuf as *const f32
                }
            };
            if short {
                let mcl = i1 - i0;
                let mut k0 = 0;
                while k0 < job.k {
                    let kl = (job.k - k0).min(job.kc);
                    let (first, last) = (k0 == 0, k0 + kl == job.k);
                    let ap = a_block(k0, kl, i0, mcl);
                    let mut jc = j0;
                    while jc < j1 {
                        let ncl = (j1 - jc).min(nc);
                        let bp = b_block(k0, kl, jc, ncl);
                        macro_kernel(job, ap, bp, i0, mcl, jc, ncl, kl, first, last);
                        jc += ncl;
                    }
                    k0 += kl;
                }
                return;
            }
            let mut jc = j0;
            while jc < j1 {
                let ncl = (j1 - jc).min(nc);
                let mut k0 = 0;
                while k0 < job.k {
                    let kl = (job.k - k0).min(job.kc);
                    let (first, last) = (k0 == 0, k0 + kl == job.k);
                    let bp = b_block(k0, kl, jc, ncl);
                    let mut ic = i0;
                    while ic < i1 {
                        let mcl = (i1 - ic).min(job.mc);
                        let ap = a_block(k0, kl, ic, mcl);
                        macro_kernel(job, ap, bp, ic, mcl, jc, ncl, kl, first, last);
                        ic += mcl;
                    }
                    k0 += kl;
                }
                jc += ncl;
            }
        })
    });
}

/// Column panels of a region up to which a row-major A is read in place rather than packed.
/// Packing transposes A into MR-row panels (about a cycle per float) for the microkernels to
/// read it once per column panel; with few panels that is a third of the product (2048 × 64 ×
/// 257, magika's one-hot embedding: 106 GFLOP/s packing A, 158 unpacked, 165 with A packed
/// ahead, on an Emerald Rapids core). Read in place, A's MR rows are MR short streams (from
/// L1 across the column panels of a short k; from L2 per column panel of a deeper one, as a
/// packed panel would be). Alternated calls on that core (`sgemm_packed_b`, 1 thread):
/// unpacked as fast or faster from 64 to 4096 columns (2048 × 256 × 256: 159 against 144
/// GFLOP/s; 197 × 768 × 768: 163 against 157; 2048 × 4096 × 512: 143 either way). The limit
/// keeps the wide products, where packing costs a few per cent, on the path measured on
/// every machine so far.
pub(crate) const UNPACKED_A_MAX_PANELS: usize = 32;

/// Whether `a` is read unpacked for a region of `cols` columns: a row-major A (contiguous
/// along k) under at most [`UNPACKED_A_MAX_PANELS`] column panels, whose rows are not a
/// multiple of 4 KiB apart. The last is a precaution, not a measurement: MR = 12 rows 4 KiB
/// apart share one L1 set, which holds 8 lines on a Zen 4 (Emerald Rapids' 12-way L1 ran
/// such shapes unpacked as fast or faster: 512 × 256 × 1024 at 165 against 148 GFLOP/s).
pub(crate) fn reads_a_unpacked(kern: &Kernel, a: Opnd, cols: usize) -> bool {
    match a {
        Opnd::Raw(s) => {
            s.ks == 1
                && s.len >= kern.mr
                && cols.div_ceil(kern.nr) <= UNPACKED_A_MAX_PANELS
                && !(s.ws * std::mem::size_of::<f32>()).is_multiple_of(4096)
        }
        _ => false,
    }
}

/// Runs a validated job with up to `threads` threads.
pub(crate) fn drive(job: &Job, threads: usize) {
    let (m, n, k) = (job.m, job.n, job.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // SAFETY: the job was validated: C, bias and residual cover m × n.
        unsafe { epilogue_only(job) };
        return;
    }
    let self_packing = matches!(job.b, Opnd::Source(_));
    if (m == 1 || n == 1) && !self_packing && gemv(job, threads) {
        return;
    }
    if (2..=FEW_ROWS).contains(&m) && !self_packing && gemv_rows(job, threads) {
        return;
    }
    let kern = job.kern;
    let (mr, nr) = (kern.mr, kern.nr);
    let m_tiles = m.div_ceil(mr);
    let n_tiles = n.div_ceil(nr);
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let t = threads_for_flops(threads, flops).min(m_tiles.max(n_tiles));
    if t == 1 {
        // SAFETY: the job was validated; one region covers C.
        unsafe { run_region(job, 0, m, 0, n) };
        return;
    }
    // Prefer splitting along the pre-packed operand's other dimension (nothing to pack up
    // front) when that gives every thread four tiles or more: with fewer, one tile more or less
    // per thread unbalances them (5 tiles on 2 threads: 3 + 2).
    let split_n = match (job.a, job.b) {
        (Opnd::Packed(_), _) if n_tiles >= 4 * t => true,
        (_, Opnd::Packed(_)) if m_tiles >= 4 * t => false,
        _ => n_tiles * nr >= m_tiles * mr,
    };
    // The operand every task reads whole: pack it once, in parallel, unless it already is.
    let (whole, is_a) = if split_n {
        (job.a, true)
    } else {
        (job.b, false)
    };
    let run = |job: &Job| {
        let tiles = if split_n { n_tiles } else { m_tiles };
        let inner_tiles = if split_n { m_tiles } else { n_tiles };
        if tiles < 4 * t && !tiles.is_multiple_of(t) && inner_tiles > 1 {
            // Few tiles that the threads cannot share evenly (7 column panels on 2 threads:
            // 4 + 3): each thread takes an equal run of (tile, inner tile) pairs instead. The
            // GEMM of a 224→224 3×3 layer on 7² (49 × 224 × 2016) on two threads: 208 µs split
            // 4 + 3, 189 in runs of pairs (320 on one thread).
            let units = tiles * inner_tiles;
            parallel_for(t, t, |ti| {
                let (u0, u1) = (ti * units / t, (ti + 1) * units / t);
                for_tile_rects(u0, u1, inner_tiles, |outer, inner| {
                    let (i, j) = if split_n {
                        (inner, outer)
                    } else {
                        (outer, inner)
                    };
                    // SAFETY: the runs of pairs are disjoint, so are their rectangles of C.
                    unsafe {
                        run_region(
                            job,
                            i.start * mr,
                            (i.end * mr).min(m),
                            j.start * nr,
                            (j.end * nr).min(n),
                        )
                    }
                });
            });
            return;
        }
        let per = tiles.div_ceil((4 * t).min(tiles));
        let tasks = tiles.div_ceil(per);
        parallel_for(t, tasks, |ti| {
            let (t0, t1) = (ti * per, ((ti + 1) * per).min(tiles));
            // SAFETY: tasks cover disjoint column (or row) ranges of C.
            unsafe {
                if split_n {
                    run_region(job, 0, m, t0 * nr, (t1 * nr).min(n))
                } else {
                    run_region(job, t0 * mr, (t1 * mr).min(m), 0, n)
                }
            }
        });
    };
    match whole {
        Opnd::Packed(_) => run(job),
        Opnd::Source(src) => {
            let size = PackedView::size(src.cols(), k, nr);
            with_scratch(&SCRATCH_WHOLE, size, |buf| {
                let data = &mut buf.as_mut_slice()[..size];
                pack_whole_source(src, k, job.kc, nr, data, t);
                let view = Opnd::Packed(PackedView {
                    data,
                    len: src.cols(),
                    k,
                    kc: job.kc,
                    w: nr,
                });
                run(&Job { b: view, ..*job });
            });
        }
        Opnd::Raw(src) => {
            let w = if is_a { mr } else { nr };
            let size = PackedView::size(src.len, k, w);
            with_scratch(&SCRATCH_WHOLE, size, |buf| {
                let data = &mut buf.as_mut_slice()[..size];
                pack_whole(kern, is_a, src, k, job.kc, data, t);
                let view = Opnd::Packed(PackedView {
                    data,
                    len: src.len,
                    k,
                    kc: job.kc,
                    w,
                });
                let job2 = Job {
                    a: if is_a { view } else { job.a },
                    b: if is_a { job.b } else { view },
                    ..*job
                };
                run(&job2);
            });
        }
    }
}

/// The pairs `u0..u1` of (outer tile, inner tile), numbered outer-major with `inner_tiles`
/// inner tiles per outer one, as at most three rectangles `(outer range, inner range)`: a
/// partial outer tile at each end and the whole outer tiles between.
pub(super) fn for_tile_rects(
    u0: usize,
    u1: usize,
    inner_tiles: usize,
    mut rect: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>),
) {
    let mut u = u0;
    while u < u1 {
        let (outer, inner) = (u / inner_tiles, u % inner_tiles);
        if inner > 0 || u1 - u < inner_tiles {
            // A partial outer tile: up to its end or to u1.
            let end = inner_tiles.min(inner + (u1 - u));
            rect(outer..outer + 1, inner..end);
            u += end - inner;
        } else {
            let whole = (u1 - u) / inner_tiles;
            rect(outer..outer + whole, 0..inner_tiles);
            u += whole * inner_tiles;
        }
    }
}

/// `k == 0`: C = act(0 + bias + residual).
unsafe fn epilogue_only(job: &Job) {
    let zeros = vec![0.0f32; job.n];
    for i in 0..job.m {
        let (bias_s, bias_v) = match job.epi.bias {
            BiasKind::PerRow(b) => (b[i], std::ptr::null()),
            BiasKind::PerCol(b) => (0.0, b.as_ptr()),
            BiasKind::None => (0.0, std::ptr::null()),
        };
        let res = job
            .epi
            .residual
            .map_or(std::ptr::null(), |r| r[i * job.ldc..].as_ptr());
        (job.kern.epilogue_vec)(
            zeros.as_ptr(),
            job.n,
            job.c.add(i * job.ldc),
            1,
            bias_s,
            bias_v,
            res,
            &job.epi.activation,
        );
    }
}

enum GemvMat<'a> {
    Dot { ptr: *const f32, rs: usize },
    Axpy { ptr: *const f32, cs: usize },
    Panel { view: PackedView<'a>, is_a: bool },
}

// SAFETY: read-only views of slices borrowed for the whole call.
unsafe impl Send for GemvMat<'_> {}
unsafe impl Sync for GemvMat<'_> {}

/// The k-vector of a `m == 1` A or `n == 1` B as a contiguous slice (copied when strided).
fn vector_of<'v>(op: &Opnd<'v>, k: usize, tmp: &'v mut Vec<f32>) -> &'v [f32] {
    match *op {
        Opnd::Raw(s) if s.ks == 1 => {
            // SAFETY: validated: the k elements of lane 0 are in the slice.
            unsafe { std::slice::from_raw_parts(s.ptr, k) }
        }
        Opnd::Raw(s) => {
            // SAFETY: as above, with stride `ks`.
            tmp.extend((0..k).map(|kk| unsafe { *s.at(0, kk) }));
            tmp
        }
        Opnd::Packed(v) => {
            let mut k0 = 0;
            while k0 < k {
                let klen = (k - k0).min(v.kc);
                let p = v.panel(k0, klen, 0);
                // SAFETY: lane 0 of panel 0, rows `0..klen` of this k-block.
                tmp.extend((0..klen).map(|kk| unsafe { *p.add(kk * v.w) }));
                k0 += klen;
            }
            tmp
        }
        Opnd::Source(_) => unreachable!("self-packing operands take the blocked path"),
    }
}

/// Up to this many rows of A run on the GEMV kernels instead of the blocked path: attention
/// against a KV cache multiplies 1-4 query rows (a decode step, grouped queries) by a B that
/// changes every call, where packing B for the blocked path costs more than streaming it.
pub(crate) const FEW_ROWS: usize = 4;

/// Rows `0..m` (2-4) of a small-`m` job over an unpacked B, in one pass over B. Returns false
/// (nothing done) when B is packed or has no unit stride for the GEMV kernels to stream.
fn gemv_rows(job: &Job, threads: usize) -> bool {
    let (Opnd::Raw(a), Opnd::Raw(b)) = (job.a, job.b) else {
        return false;
    };
    if b.ks != 1 && b.ws != 1 {
        return false;
    }
    few_rows(job, a, b, threads);
    true
}

/// Outputs per chunk of the multi-row forms: four rows of y (8 KiB) stay in L1.
const AXPY_ROWS_CHUNK: usize = 512;
/// Floats between rows of y in the multi-row forms: a chunk plus 64 bytes, so that y's rows do
/// not sit a multiple of 4 KiB from one another (or from the matrix rows they are read with).
const AXPY_ROWS_STRIDE: usize = AXPY_ROWS_CHUNK + 16;

/// Rows `0..m` (2-4) of a job whose B has a unit stride along n (axpy form) or along k (dot
/// form), all rows at once: each element of B is loaded once for every row of A (see
/// [`super::gemv::gemv_axpy_rows`] and [`super::gemv::gemv_dot_rows`]).
fn few_rows(job: &Job, a: Src, b: Src, threads: usize) {
    let (m, n, k) = (job.m, job.n, job.k);
    debug_assert!((2..=FEW_ROWS).contains(&m) && (b.ws == 1 || b.ks == 1));
    // The axpy form where B's rows are contiguous, else the dot form over B's columns.
    let (kernel, stride) = if b.ws == 1 {
        let rows_kernel = if job.gemv_matrix_from_memory {
            job.kern.gemv_axpy_rows_stream
        } else {
            job.kern.gemv_axpy_rows
        };
        (rows_kernel, b.ks)
    } else {
        (job.kern.gemv_dot_rows, b.ws)
    };
    // The rows of A as contiguous k-vectors (copied when A is strided along k).
    let mut copied = Vec::new();
    let (x, xs) = if a.ks == 1 {
        (a.ptr, a.ws)
    } else {
        copied.reserve(m * k);
        for row in 0..m {
            // SAFETY: validated: rows 0..m and k columns of A are in the slice.
            copied.extend((0..k).map(|kk| unsafe { *a.at(row, kk) }));
        }
        (copied.as_ptr(), k)
    };
    let chunk = n
        .div_ceil(threads.max(1))
        .clamp(GEMV_CHUNK, AXPY_ROWS_CHUNK)
        .div_ceil(16)
        * 16;
    let chunks = n.div_ceil(chunk);
    let t = threads
        .min(m * n * k / min_gemv_elems_per_thread())
        .min(chunks)
        .max(1);
    let kern = job.kern;
    let (c, xp, bp) = (SendPtr(job.c), SyncPtr(x), SyncPtr(b.ptr));
    let res = SyncPtr(job.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr()));
    parallel_for(t, chunks, |ci| {
        let o0 = ci * chunk;
        let len = (n - o0).min(chunk);
        let mut y = [0.0f32; FEW_ROWS * AXPY_ROWS_STRIDE];
        // SAFETY: the job was validated; chunk `ci` covers columns `o0..o0 + len` of every row.
        unsafe {
            kernel(
                bp.get().add(o0 * b.ws),
                stride,
                len,
                k,
                xp.get(),
                xs,
                m,
                y.as_mut_ptr(),
                AXPY_ROWS_STRIDE,
            );
            for row in 0..m {
                let (bias_s, bias_v) = match job.epi.bias {
                    BiasKind::None => (0.0, std::ptr::null()),
                    BiasKind::PerRow(values) => (values[row], std::ptr::null()),
                    BiasKind::PerCol(values) => (0.0, values.as_ptr().add(o0)),
                };
                let at = row * job.ldc + o0;
                (kern.epilogue_vec)(
                    y.as_ptr().add(row * AXPY_ROWS_STRIDE),
                    len,
                    c.get().add(at),
                    1,
                    bias_s,
                    bias_v,
                    offset(res.get(), at),
                    &job.epi.activation,
                );
            }
        }
    });
}

/// The `m == 1` / `n == 1` path. Returns false (nothing done) for layouts it does not stream
/// (a raw weight operand with no unit stride); the blocked path handles those.
fn gemv(job: &Job, threads: usize) -> bool {
    let kern = job.kern;
    let k = job.k;
    let rows_mode = job.m == 1; // outputs run along n
    let (vec_op, mat_op) = if rows_mode {
        (&job.a, &job.b)
    } else {
        (&job.b, &job.a)
    };
    let mat = match *mat_op {
        Opnd::Packed(view) => GemvMat::Panel {
            view,
            is_a: !rows_mode,
        },
        Opnd::Raw(s) if s.ks == 1 => GemvMat::Dot {
            ptr: s.ptr,
            rs: s.ws,
        },
        Opnd::Raw(s) if s.ws == 1 => GemvMat::Axpy {
            ptr: s.ptr,
            cs: s.ks,
        },
        Opnd::Raw(_) | Opnd::Source(_) => return false,
    };
    let mut tmp = Vec::new();
    let x = vector_of(vec_op, k, &mut tmp);
    let outputs = if rows_mode { job.n } else { job.m };
    let os = if rows_mode { 1 } else { job.ldc };
    let (bias_s, bias_v) = match job.epi.bias {
        BiasKind::None => (0.0, std::ptr::null()),
        BiasKind::PerRow(b) if rows_mode => (b[0], std::ptr::null()),
        BiasKind::PerCol(b) if !rows_mode => (b[0], std::ptr::null()),
        BiasKind::PerRow(b) | BiasKind::PerCol(b) => (0.0, b.as_ptr()),
    };
    let bias_v = SyncPtr(bias_v);
    let res = SyncPtr(job.epi.residual.map_or(std::ptr::null(), |r| r.as_ptr()));
    let width = match mat {
        GemvMat::Panel { is_a: true, .. } => kern.mr,
        GemvMat::Panel { is_a: false, .. } => kern.nr,
        _ => 1,
    };
    let chunk = match mat {
        // Split the outputs over the threads, in chunks as long as L1 allows.
        GemvMat::Axpy { .. } => {
            outputs
                .div_ceil(threads.max(1))
                .clamp(GEMV_CHUNK, AXPY_CHUNK)
                .div_ceil(16)
                * 16
        }
        _ => GEMV_CHUNK.div_ceil(width) * width,
    };
    debug_assert!(chunk <= AXPY_CHUNK.max(GEMV_CHUNK_MAX));
    let chunks = outputs.div_ceil(chunk);
    let t = threads
        .min(outputs * k / min_gemv_elems_per_thread())
        .min(chunks)
        .max(1);
    let c = SendPtr(job.c);
    let xp = SyncPtr(x.as_ptr());
    parallel_for(t, chunks, |ci| {
        let o0 = ci * chunk;
        let len = (outputs - o0).min(chunk);
        let mut y = [0.0f32; if AXPY_CHUNK > GEMV_CHUNK_MAX {
            AXPY_CHUNK
        } else {
            GEMV_CHUNK_MAX
        }];
        // SAFETY: the job was validated; chunk `ci` covers outputs `o0..o0 + len` only.
        unsafe {
            match &mat {
                GemvMat::Dot { ptr, rs } => {
                    (kern.gemv_dot)(ptr.add(o0 * rs), *rs, len, k, xp.get(), y.as_mut_ptr())
                }
                GemvMat::Axpy { ptr, cs } => {
                    let axpy = if job.gemv_matrix_from_memory {
                        kern.gemv_axpy_stream
                    } else {
                        kern.gemv_axpy
                    };
                    axpy(ptr.add(o0), *cs, len, k, xp.get(), y.as_mut_ptr())
                }
                GemvMat::Panel { view, is_a } => {
                    let p0 = o0 / width;
                    let p1 = (o0 + len).div_ceil(width);
                    let f = if *is_a {
                        kern.panel_gemv_a
                    } else {
                        kern.panel_gemv_b
                    };
                    f(view, p0, p1, xp.get(), y.as_mut_ptr());
                }
            }
            (kern.epilogue_vec)(
                y.as_ptr(),
                len,
                c.get().add(o0 * os),
                os,
                bias_s,
                offset(bias_v.get(), o0),
                offset(res.get(), o0 * os),
                &job.epi.activation,
            );
        }
    });
    true
}

/// Read-only counterpart of [`SendPtr`].
#[derive(Clone, Copy)]
struct SyncPtr(*const f32);
// SAFETY: read-only pointers into slices borrowed for the whole call.
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    fn get(&self) -> *const f32 {
        self.0
    }
}
