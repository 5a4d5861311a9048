//! The register-blocked microkernel and its fused epilogue, generic over the vector type.
//!
//! One call computes an `MR × NR` tile of C (`NR = NV · V::LANES`) from a packed A micro-panel
//! (`kc × MR`, k-major) and a packed B micro-panel (`kc × NR`, k-major). The `MR · NV`
//! accumulators stay in registers for the whole k loop; each k step loads `NV` vectors of B and
//! broadcasts `MR` scalars of A (folded into the FMAs' memory operands on AVX-512).
//!
//! The epilogue is applied while the tile is in registers (whole tiles,
//! `finish_and_store_tile`) or in a stack copy of it (edge tiles, and whole tiles on their last
//! k-block under an activation other than none, ReLU or clip: `finish` per vector; both in the
//! same order per element): C is written once per k-block, and the last k-block writes the
//! final value with bias, residual and activation already applied.

use super::act::{with_loop_activation, ClampActivation, LoopActivation, NoActivation};
use super::simd::Vf32;
use super::Activation;

/// What the microkernel does with its accumulator tile.
pub(crate) struct TileEpi<'a> {
    /// Add the tile to what C holds (a later k-block); otherwise overwrite C.
    pub accumulate: bool,
    /// This is the last k-block: apply bias, residual and activation.
    pub last: bool,
    /// Per-row bias at the tile's first row (`bias_row[i]` for tile row i), or null.
    pub bias_row: *const f32,
    /// Per-column bias at the tile's first column, or null.
    pub bias_col: *const f32,
    /// Residual at the tile's origin, with C's leading dimension, or null.
    pub residual: *const f32,
    pub act: &'a Activation,
    /// Where to prefetch into L2 during the k loop, one cache line per k step (`kc · 16`
    /// floats from here), or null: part of the next A or B micro-panel of pre-packed weights,
    /// which would otherwise arrive from DRAM while the tile that first reads it waits.
    pub prefetch_b: *const f32,
}

/// Floats between the k steps' prefetches: one 64-byte line.
pub(crate) const PREFETCH_STRIDE: usize = 16;

/// Signature of the per-ISA tile store (a separate, non-inlined function so the hot k loop
/// stays compact).
pub(crate) type StoreTileFn = unsafe fn(*const f32, usize, usize, usize, *mut f32, usize, &TileEpi);

/// The generic microkernel. `a`: `kc × MR` packed panel; `b`: `kc × NR` packed panel, aligned
/// to the vector width; `c`: the tile's origin in C (leading dimension `ldc`), of which only
/// `m_eff × n_eff` is written.
///
/// Only the first `ROWS` rows and `VECS` vectors of the packed panels are computed: edge
/// tiles use a smaller instance (`m_eff <= ROWS`, `n_eff <= VECS · LANES`) instead of doing
/// the whole tile's FMAs for a few rows or columns. A 64-channel conv with 12-row tiles would
/// otherwise compute 72 rows, and a 196-pixel one 224 columns.
///
/// `EDGE = false` is the instance for whole tiles only (`m_eff == ROWS`, `n_eff == VECS ·
/// LANES`): without the edge tiles' branch in the same function, LLVM no longer stores the
/// accumulators to the stack after the k loop for the path it might take. (Its stack path is
/// the last k-block under activations other than none, ReLU and clip, decided once per call.)
///
/// `A_ROWS = true` reads A unpacked, row-major: element `(i, kk)` at `a[i·lda + kk]` (`lda`
/// is ignored otherwise). Every one of the `ROWS` rows is read, so the caller passes only
/// tiles whose rows all exist (`m_eff == ROWS`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn micro<
    V: Vf32,
    const MR: usize,
    const NV: usize,
    const ROWS: usize,
    const VECS: usize,
    const EDGE: bool,
    const A_ROWS: bool,
>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    m_eff: usize,
    n_eff: usize,
    epi: &TileEpi,
    store: StoreTileFn,
) {
    debug_assert!(ROWS <= MR && VECS <= NV && m_eff <= ROWS && n_eff <= VECS * V::LANES);
    debug_assert!(!A_ROWS || m_eff == ROWS);
    // Element `(i, kk)` of A at `a[i·a_row + kk·a_step]`.
    let (a_row, a_step) = if A_ROWS { (lda, 1) } else { (1, MR) };
    let nr = NV * V::LANES;
    let tile_nr = VECS * V::LANES;
    for i in 0..ROWS {
        if i < m_eff {
            // wrapping_add: an edge tile's row may end before `nr - 1` (a prefetch never faults).
            V::prefetch(c.wrapping_add(i * ldc));
            V::prefetch(c.wrapping_add(i * ldc + tile_nr - 1));
        }
    }
    // The first k step writes the accumulators (a product: exactly the FMA onto zero, up to
    // the sign of a zero). Starting from a zeroed array made LLVM memset a 1.5 KiB stack copy
    // on every call and load the registers from it: 15% of a K = 27 stem convolution's tile.
    let mut acc: [[V; VECS]; ROWS] = {
        let mut init = std::mem::MaybeUninit::<[[V; VECS]; ROWS]>::uninit();
        let slots = init.as_mut_ptr() as *mut V;
        for i in 0..ROWS {
            let ai = if kc > 0 {
                V::splat(*a.add(i * a_row))
            } else {
                V::zero()
            };
            for v in 0..VECS {
                let bv = if kc > 0 {
                    V::load_aligned(b.add(v * V::LANES))
                } else {
                    V::zero()
                };
                slots.add(i * VECS + v).write(V::mul(ai, bv));
            }
        }
        init.assume_init()
    };
    // wrapping: with kc = 0 the pointers are never read.
    let mut ap = a.wrapping_add(a_step);
    let mut bp = b.wrapping_add(nr);
    // One k step, written out in both loops below: a closure over `&mut acc` made LLVM keep
    // the accumulators in memory (2.6× slower end to end).
    macro_rules! step {
        () => {{
            let mut bv = [V::zero(); VECS];
            for (v, bvv) in bv.iter_mut().enumerate() {
                *bvv = V::load_aligned(bp.add(v * V::LANES));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = V::splat(*ap.add(i * a_row));
                for (accv, bvv) in row.iter_mut().zip(bv.iter()) {
                    *accv = V::fma(ai, *bvv, *accv);
                }
            }
            ap = ap.add(a_step);
            bp = bp.add(nr);
        }};
    }
    if epi.prefetch_b.is_null() {
        for _ in 1..kc {
            step!();
        }
    } else {
        // wrapping: a prefetch past the packed operand's end is harmless (it never faults).
        let mut pf = epi.prefetch_b;
        for _ in 1..kc {
            V::prefetch_l2(pf);
            step!();
            pf = pf.wrapping_add(PREFETCH_STRIDE);
        }
    }
    debug_assert!(EDGE || (m_eff == ROWS && n_eff == tile_nr));
    if (!EDGE || (m_eff == ROWS && n_eff == tile_nr)) && finishes_in_registers(epi) {
        // A full tile: finished in registers (no spill, no second pass over C).
        finish_and_store_tile(&acc, epi, c, ldc);
        return;
    }
    // Edge tile, or a whole tile under another activation (`finishes_in_registers`): spill the
    // accumulators to an uninitialised stack tile (rows of `tile_nr` floats), then the
    // general (masked) store. A zero-initialised tile, or one that took the
    // accumulators' own address, made LLVM zero a 1.5 KiB array with a memset on every call
    // and load the accumulators from it: 3-4% of SqueezeNet's run.
    let mut tile = std::mem::MaybeUninit::<[[V; VECS]; ROWS]>::uninit();
    let base = tile.as_mut_ptr() as *mut f32;
    for (i, row) in acc.iter().enumerate() {
        for (v, accv) in row.iter().enumerate() {
            V::store(base.add(i * tile_nr + v * V::LANES), *accv);
        }
    }
    store(base as *const f32, tile_nr, m_eff, n_eff, c, ldc, epi);
}

/// `p + n`, or null when `p` is null (an absent bias or residual stays absent).
#[inline(always)]
pub(crate) unsafe fn offset(p: *const f32, n: usize) -> *const f32 {
    if p.is_null() {
        p
    } else {
        p.add(n)
    }
}

/// Whether [`finish_and_store_tile`] applies this epilogue: accumulation, biases, residual and
/// the activations that take a compare or two (none, ReLU, clip). All others (sigmoid, SiLU,
/// GELU, tanh with an exponential or a polynomial and a dozen constants; leaky ReLU and the
/// hard sigmoid and swish, rarer after a GEMM) take the spilled tile's store, the activation
/// matched once per tile. With the exponential ones in the register path LLVM kept every
/// accumulator in a stack slot for all epilogues, writing each back after every step (bias,
/// residual, activation): a 12 × 32 tile of K = 64 (ResNet-50's 64 → 256 1×1 convolutions on
/// 56²) spent a fifth of its time in those stores and reloads.
#[inline(always)]
fn finishes_in_registers(epi: &TileEpi) -> bool {
    !epi.last
        || matches!(
            epi.act,
            Activation::None | Activation::Relu | Activation::Clip { .. }
        )
}

/// [`finish`] over a whole tile held in registers, then its store: each accumulator is
/// finished and stored in one go, row by row, with the tests on the epilogue (accumulate,
/// bias, residual, which activation) made once per row and the activation's constants splat
/// once per tile. Each element goes through [`finish`], as on the edge path, so both paths
/// round alike.
///
/// Two earlier shapes of this lost the registers: with the activation's `match` per vector
/// LLVM kept the tests and an indirect jump per vector and stored the accumulators to the
/// stack (on AVX2 a 6 × 16 tile of K = 16 ran at 57% of the FMA peak); and as a pass per step
/// over the whole tile (add the bias to every accumulator, then the residual, ...) it kept the
/// tile in a stack copy, reloading and storing each accumulator at every step: a 12 × 32 tile
/// of K = 64 with a bias and ReLU took 1.33× the time of the same tile with no epilogue.
#[inline(always)]
unsafe fn finish_and_store_tile<V: Vf32, const ROWS: usize, const VECS: usize>(
    acc: &[[V; VECS]; ROWS],
    epi: &TileEpi,
    c: *mut f32,
    ldc: usize,
) {
    if !epi.last {
        return finish_and_store_rows(acc, epi, c, ldc, NoActivation);
    }
    match *epi.act {
        Activation::Relu => {
            let relu = ClampActivation {
                low: V::zero(),
                high: V::splat(f32::INFINITY),
            };
            finish_and_store_rows(acc, epi, c, ldc, relu)
        }
        Activation::Clip { min, max } => {
            let clip = ClampActivation {
                low: V::splat(min),
                high: V::splat(max),
            };
            finish_and_store_rows(acc, epi, c, ldc, clip)
        }
        Activation::None => finish_and_store_rows(acc, epi, c, ldc, NoActivation),
        _ => unreachable!("finishes_in_registers admits none, ReLU and clip only"),
    }
}

/// [`finish_and_store_tile`] under one activation kind (one instance of the loop each).
#[inline(always)]
unsafe fn finish_and_store_rows<V: Vf32, const ROWS: usize, const VECS: usize>(
    acc: &[[V; VECS]; ROWS],
    epi: &TileEpi,
    c: *mut f32,
    ldc: usize,
    act: impl LoopActivation<V>,
) {
    for (i, row) in acc.iter().enumerate() {
        let crow = c.add(i * ldc);
        let bias_row = row_bias::<V>(epi, i);
        let residual = offset(epi.residual, i * ldc);
        for (v, &sum) in row.iter().enumerate() {
            let at = v * V::LANES;
            let bias_col = offset(epi.bias_col, at);
            let x = finish(
                sum,
                epi,
                act,
                crow.add(at),
                bias_row,
                bias_col,
                offset(residual, at),
                |p| V::load(p),
            );
            V::store(crow.add(at), x);
        }
    }
}

/// The per-row bias of tile row `i`, splat, on the last k-block.
#[inline(always)]
unsafe fn row_bias<V: Vf32>(epi: &TileEpi, i: usize) -> Option<V> {
    (epi.last && !epi.bias_row.is_null()).then(|| V::splat(*epi.bias_row.add(i)))
}

/// One vector of C's new value: the products `x`, plus C when accumulating; on the last k-block
/// also the row bias, column bias and residual, then the activation. `ld` loads the lanes the
/// vector covers. The epilogue of every tile, whole ([`finish_and_store_tile`]) or edge
/// ([`store_tile`]), so both round alike.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn finish<V: Vf32>(
    mut x: V,
    epi: &TileEpi,
    act: impl LoopActivation<V>,
    c: *const f32,
    bias_row: Option<V>,
    bias_col: *const f32,
    residual: *const f32,
    ld: impl Fn(*const f32) -> V,
) -> V {
    if epi.accumulate {
        x = V::add(x, ld(c));
    }
    if epi.last {
        if let Some(b) = bias_row {
            x = V::add(x, b);
        }
        if !bias_col.is_null() {
            x = V::add(x, ld(bias_col));
        }
        if !residual.is_null() {
            x = V::add(x, ld(residual));
        }
        x = act.apply(x);
    }
    x
}

/// Writes an `m_eff × n_eff` tile held at `tile` (leading dimension `tile_ld`) into C,
/// accumulating and applying the epilogue as `epi` says.
#[inline(always)]
pub(crate) unsafe fn store_tile<V: Vf32>(
    tile: *const f32,
    tile_ld: usize,
    m_eff: usize,
    n_eff: usize,
    c: *mut f32,
    ldc: usize,
    epi: &TileEpi,
) {
    // The activation matched once per tile, not per vector: under SiLU (YOLOv8) whole tiles
    // take this path.
    with_loop_activation!(epi.act, V, act => store_rows::<V>(tile, tile_ld, m_eff, n_eff, c, ldc, epi, act))
}

/// [`store_tile`] under one activation kind.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_rows<V: Vf32>(
    tile: *const f32,
    tile_ld: usize,
    m_eff: usize,
    n_eff: usize,
    c: *mut f32,
    ldc: usize,
    epi: &TileEpi,
    act: impl LoopActivation<V>,
) {
    for i in 0..m_eff {
        let t = tile.add(i * tile_ld);
        let crow = c.add(i * ldc);
        let bias_row = row_bias::<V>(epi, i);
        let residual = offset(epi.residual, i * ldc);
        let mut j = 0;
        while j < n_eff {
            let w = n_eff - j;
            let full = w >= V::LANES;
            let ld = |p: *const f32| if full { V::load(p) } else { V::load_n(p, w) };
            let v = finish(
                V::load(t.add(j)),
                epi,
                act,
                crow.add(j),
                bias_row,
                offset(epi.bias_col, j),
                offset(residual, j),
                ld,
            );
            if full {
                V::store(crow.add(j), v);
            } else {
                V::store_n(crow.add(j), v, w);
            }
            j += V::LANES;
        }
    }
}
