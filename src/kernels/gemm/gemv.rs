//! Matrix-vector kernels for `m == 1` or `n == 1` (dense layers at batch 1): memory-bound, so
//! they stream the matrix once with enough independent accumulators to keep the loads going,
//! and never pack.
//!
//! The matrix `M` (`rows × k`) is the weight operand seen from the output: for `m == 1`,
//! `M = Bᵀ`; for `n == 1`, `M = A`. Two raw layouts are handled, plus the packed panels:
//! - dot form, unit stride along k: `y[r] = Σ M[r, kk]·x[kk]`, four rows at a time;
//! - axpy form, unit stride along r: `y += x[kk]·M[:, kk]`, with 8 vectors of y in registers;
//! - panel form: a pre-packed operand, panel by panel, four k steps in flight.

use super::act::activate;
use super::pack::PackedView;
use super::simd::Vf32;
use super::Activation;

/// Dot form: `M[r, kk]` at `m[r·rs + kk]`; writes `y[0..rows]`.
#[inline(always)]
pub(crate) unsafe fn gemv_dot<V: Vf32>(
    m: *const f32,
    rs: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
) {
    let l = V::LANES;
    let mut r = 0;
    while r + 4 <= rows {
        let p = [
            m.add(r * rs),
            m.add((r + 1) * rs),
            m.add((r + 2) * rs),
            m.add((r + 3) * rs),
        ];
        let mut acc = [[V::zero(); 2]; 4];
        // The next four rows, one group ahead, into L2: rows of a few KiB are streams too short
        // for the hardware prefetchers to ramp up on, and a dense layer's weights at batch 1
        // come from DRAM (MobileNetV2's 1280→1000 layer read them at 19 GB/s of 31 without).
        let ahead = 4 * rs;
        let mut kk = 0;
        while kk + 2 * l <= k {
            if r + 8 <= rows {
                // One prefetch per 64-byte line this step covers.
                let mut line = kk.next_multiple_of(16);
                while line < kk + 2 * l {
                    for q in &p {
                        V::prefetch_l2(q.wrapping_add(ahead + line));
                    }
                    line += 16;
                }
            }
            let x0 = V::load(x.add(kk));
            let x1 = V::load(x.add(kk + l));
            for q in 0..4 {
                acc[q][0] = V::fma(V::load(p[q].add(kk)), x0, acc[q][0]);
                acc[q][1] = V::fma(V::load(p[q].add(kk + l)), x1, acc[q][1]);
            }
            kk += 2 * l;
        }
        while kk < k {
            let w = (k - kk).min(l);
            let x0 = V::load_n(x.add(kk), w);
            for q in 0..4 {
                acc[q][0] = V::fma(V::load_n(p[q].add(kk), w), x0, acc[q][0]);
            }
            kk += l;
        }
        for (q, a) in acc.iter().enumerate() {
            *y.add(r + q) = V::hsum(V::add(a[0], a[1]));
        }
        r += 4;
    }
    while r < rows {
        let p = m.add(r * rs);
        let mut acc = [V::zero(); 4];
        let mut kk = 0;
        while kk + 4 * l <= k {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = V::fma(V::load(p.add(kk + u * l)), V::load(x.add(kk + u * l)), *a);
            }
            kk += 4 * l;
        }
        while kk < k {
            let w = (k - kk).min(l);
            acc[0] = V::fma(V::load_n(p.add(kk), w), V::load_n(x.add(kk), w), acc[0]);
            kk += l;
        }
        *y.add(r) = V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3])));
        r += 1;
    }
}

/// `y[0..len] = 0`, whole vectors and one masked tail.
#[inline(always)]
unsafe fn zero<V: Vf32>(y: *mut f32, len: usize) {
    let l = V::LANES;
    let full = len / l * l;
    let mut o = 0;
    while o < full {
        V::store(y.add(o), V::zero());
        o += l;
    }
    if len > full {
        V::store_n(y.add(full), V::zero(), len - full);
    }
}

/// Axpy form: `M[r, kk]` at `m[r + kk·cs]`; writes `y[0..rows]`.
///
/// The matrix is streamed row by row (four rows at a time), each row's `rows` outputs one
/// contiguous segment, with `y` kept in L1 between rows. Register-blocked column strips would
/// touch every row in 512-byte pieces a row stride apart, a pattern the hardware prefetchers
/// stream poorly: a 4096×4096 MatMul GEMV from DRAM reached 24-31% of the read roof that way,
/// against 81-89% for the contiguous dot-product form.
#[inline(always)]
pub(crate) unsafe fn gemv_axpy<V: Vf32, const STREAM: bool>(
    m: *const f32,
    cs: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
) {
    let l = V::LANES;
    let full = rows / l * l;
    let tail = rows - full;
    zero::<V>(y, rows);
    let mut kk = 0;
    while kk + 4 <= k {
        let xs = [
            V::splat(*x.add(kk)),
            V::splat(*x.add(kk + 1)),
            V::splat(*x.add(kk + 2)),
            V::splat(*x.add(kk + 3)),
        ];
        let rows_at = [
            m.add(kk * cs),
            m.add((kk + 1) * cs),
            m.add((kk + 2) * cs),
            m.add((kk + 3) * cs),
        ];
        // The next four rows' strips, into L2 while these stream, when the matrix comes from
        // memory (`STREAM`, see `Job::gemv_matrix_from_memory`): a strip is a few KiB of a row
        // (the chunk's outputs) and the next one a row stride away, past the page the hardware
        // prefetchers stay in, so each strip started cold. MatMul 1×4096 · 4096×4096 (64 MiB)
        // on one thread ran at 21 GB/s against the transposed (dot) form's 28-31, and takes
        // 2.0-2.5 ms instead of 3.0-3.4 with it (4096×11008: 8.9 → 7.1 ms). From the last-level
        // cache the prefetches only cost issue slots (768×3072, 9 MiB: 120 → 139 µs).
        let ahead = (STREAM && kk + 8 <= k).then_some(4 * cs);
        let mut r = 0;
        while r < full {
            if let Some(ahead) = ahead {
                if r % 16 == 0 {
                    for row in &rows_at {
                        V::prefetch_l2(row.add(ahead + r));
                    }
                }
            }
            let mut acc = V::load(y.add(r));
            for (row, xv) in rows_at.iter().zip(xs.iter()) {
                acc = V::fma(V::load(row.add(r)), *xv, acc);
            }
            V::store(y.add(r), acc);
            r += l;
        }
        if tail > 0 {
            let mut acc = V::load_n(y.add(full), tail);
            for (row, xv) in rows_at.iter().zip(xs.iter()) {
                acc = V::fma(V::load_n(row.add(full), tail), *xv, acc);
            }
            V::store_n(y.add(full), acc, tail);
        }
        kk += 4;
    }
    while kk < k {
        let xv = V::splat(*x.add(kk));
        let row = m.add(kk * cs);
        let mut r = 0;
        while r < full {
            V::store(y.add(r), V::fma(V::load(row.add(r)), xv, V::load(y.add(r))));
            r += l;
        }
        if tail > 0 {
            let acc = V::fma(
                V::load_n(row.add(full), tail),
                xv,
                V::load_n(y.add(full), tail),
            );
            V::store_n(y.add(full), acc, tail);
        }
        kk += 1;
    }
}

/// [`gemv_axpy_rows`] for `rows` rows of A (2-4; more are taken as 4).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemv_axpy_some_rows<V: Vf32, const STREAM: bool>(
    m: *const f32,
    cs: usize,
    len: usize,
    k: usize,
    x: *const f32,
    xs: usize,
    rows: usize,
    y: *mut f32,
    ys: usize,
) {
    match rows {
        2 => gemv_axpy_rows::<V, 2, STREAM>(m, cs, len, k, x, xs, y, ys),
        3 => gemv_axpy_rows::<V, 3, STREAM>(m, cs, len, k, x, xs, y, ys),
        _ => gemv_axpy_rows::<V, 4, STREAM>(m, cs, len, k, x, xs, y, ys),
    }
}

/// Axpy form for `R` rows of x at once (`R` ≤ 4): `y_r += x_r[kk]·M[:, kk]` for each row `r`,
/// with `x_r` at `x + r·xs` and `y_r` at `y + r·ys` (`len` outputs each). Each matrix row is
/// loaded once for all `R` outputs rows, where `R` separate GEMVs would stream it `R` times:
/// attention in a decode step multiplies 2-4 grouped query rows by a key or value cache that
/// changes every call, so it cannot be packed ahead and is read from L2 at best.
#[inline(always)]
// Register arrays indexed in step with one another read clearest as index loops.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub(crate) unsafe fn gemv_axpy_rows<V: Vf32, const R: usize, const STREAM: bool>(
    m: *const f32,
    cs: usize,
    len: usize,
    k: usize,
    x: *const f32,
    xs: usize,
    y: *mut f32,
    ys: usize,
) {
    let l = V::LANES;
    if len <= 4 * l {
        // Rows short enough for registers (a value cache's head dimension): y never leaves
        // them, where the loop below would store and reload it once per matrix row.
        let vectors = len.div_ceil(l);
        let width = |v: usize| (len - v * l).min(l);
        let mut acc = [[V::zero(); 4]; R];
        for kk in 0..k {
            let row = m.add(kk * cs);
            let xv: [V; R] = std::array::from_fn(|r| V::splat(*x.add(r * xs + kk)));
            for v in 0..vectors {
                let w = width(v);
                let mv = if w == l {
                    V::load(row.add(v * l))
                } else {
                    V::load_n(row.add(v * l), w)
                };
                for r in 0..R {
                    acc[r][v] = V::fma(mv, xv[r], acc[r][v]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, a) in row.iter().enumerate().take(vectors) {
                V::store_n(y.add(r * ys + v * l), *a, width(v));
            }
        }
        return;
    }
    let full = len / l * l;
    let tail = len - full;
    for r in 0..R {
        zero::<V>(y.add(r * ys), len);
    }
    // The strips two passes ahead into L2 when the matrix comes from memory (as in
    // `gemv_axpy`).
    // Two matrix rows per pass halve the loads and stores of y.
    let mut kk = 0;
    while kk + 2 <= k {
        let x0: [V; R] = std::array::from_fn(|r| V::splat(*x.add(r * xs + kk)));
        let x1: [V; R] = std::array::from_fn(|r| V::splat(*x.add(r * xs + kk + 1)));
        let (m0, m1) = (m.add(kk * cs), m.add((kk + 1) * cs));
        let ahead = (STREAM && kk + 6 <= k).then_some(4 * cs);
        let mut o = 0;
        while o < full {
            if let Some(ahead) = ahead {
                if o % 16 == 0 {
                    V::prefetch_l2(m0.add(ahead + o));
                    V::prefetch_l2(m1.add(ahead + o));
                }
            }
            let (v0, v1) = (V::load(m0.add(o)), V::load(m1.add(o)));
            for r in 0..R {
                let p = y.add(r * ys + o);
                V::store(p, V::fma(v1, x1[r], V::fma(v0, x0[r], V::load(p))));
            }
            o += l;
        }
        if tail > 0 {
            let (v0, v1) = (V::load_n(m0.add(full), tail), V::load_n(m1.add(full), tail));
            for r in 0..R {
                let p = y.add(r * ys + full);
                let acc = V::fma(v1, x1[r], V::fma(v0, x0[r], V::load_n(p, tail)));
                V::store_n(p, acc, tail);
            }
        }
        kk += 2;
    }
    if kk < k {
        let x0: [V; R] = std::array::from_fn(|r| V::splat(*x.add(r * xs + kk)));
        let m0 = m.add(kk * cs);
        let mut o = 0;
        while o < full {
            let v0 = V::load(m0.add(o));
            for r in 0..R {
                let p = y.add(r * ys + o);
                V::store(p, V::fma(v0, x0[r], V::load(p)));
            }
            o += l;
        }
        if tail > 0 {
            let v0 = V::load_n(m0.add(full), tail);
            for r in 0..R {
                let p = y.add(r * ys + full);
                V::store_n(p, V::fma(v0, x0[r], V::load_n(p, tail)), tail);
            }
        }
    }
}

/// Dot form for `R` rows of x at once (`R` ≤ 4): `y_r[o] = Σ_kk M[o, kk]·x_r[kk]` with
/// `M[o, kk]` at `m[o·rs + kk]`, `x_r` at `x + r·xs`, `y_r` at `y + r·ys`. Each matrix row is
/// loaded once for all `R` rows of x: a decode step's grouped queries against a key cache read
/// through a transposed view (`q·Kᵀ`, rows of K contiguous along the head dimension).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemv_dot_rows<V: Vf32, const R: usize>(
    m: *const f32,
    rs: usize,
    len: usize,
    k: usize,
    x: *const f32,
    xs: usize,
    y: *mut f32,
    ys: usize,
) {
    let l = V::LANES;
    let mut o = 0;
    while o < len {
        // Four matrix rows at a time (fewer at the end).
        let rows = (len - o).min(4);
        let p: [*const f32; 4] = std::array::from_fn(|q| m.add((o + q.min(rows - 1)) * rs));
        let mut acc = [[V::zero(); R]; 4];
        let mut kk = 0;
        while kk < k {
            let w = (k - kk).min(l);
            let xv: [V; R] = std::array::from_fn(|r| {
                if w == l {
                    V::load(x.add(r * xs + kk))
                } else {
                    V::load_n(x.add(r * xs + kk), w)
                }
            });
            for q in 0..4 {
                let mv = if w == l {
                    V::load(p[q].add(kk))
                } else {
                    V::load_n(p[q].add(kk), w)
                };
                for r in 0..R {
                    acc[q][r] = V::fma(mv, xv[r], acc[q][r]);
                }
            }
            kk += l;
        }
        for (q, row) in acc.iter().enumerate().take(rows) {
            for (r, a) in row.iter().enumerate() {
                *y.add(r * ys + o + q) = V::hsum(*a);
            }
        }
        o += rows;
    }
}

/// How far ahead the streaming GEMV forms prefetch (floats): 2 KiB, a few hundred cycles of
/// streaming, past what the in-flight loads cover.
const PREFETCH_FLOATS: usize = 512;

/// Panel form over a packed operand of panel width `W`: for panels `p0..p1`, writes
/// `y[(p - p0)·W + w] = Σ_kk panel_p[kk][w]·x[kk]` (including the zero padding lanes).
#[inline(always)]
pub(crate) unsafe fn panel_gemv<V: Vf32, const W: usize>(
    view: &PackedView,
    p0: usize,
    p1: usize,
    x: *const f32,
    y: *mut f32,
) {
    const U: usize = 4;
    const MAXV: usize = 4;
    let l = V::LANES;
    let nvec = W.div_ceil(l);
    debug_assert!(nvec <= MAXV);
    let last_w = W - (nvec - 1) * l;
    let ld = |p: *const f32, v: usize| {
        if v + 1 == nvec && last_w < l {
            V::load_n(p.add(v * l), last_w)
        } else {
            V::load(p.add(v * l))
        }
    };
    for p in p0..p1 {
        let mut acc = [[V::zero(); MAXV]; U];
        let mut k0 = 0;
        while k0 < view.k {
            let klen = (view.k - k0).min(view.kc);
            let base = view.panel(k0, klen, p);
            let xb = x.add(k0);
            let mut kk = 0;
            while kk + U <= klen {
                // The panel streams from DRAM or L3 when the weights are not cache-resident
                // (LLM decode): ask for the lines PREFETCH_FLOATS ahead, one per 64 bytes.
                let ahead = base.wrapping_add(kk * W + PREFETCH_FLOATS);
                let mut line = 0;
                while line < U * W {
                    V::prefetch(ahead.wrapping_add(line));
                    line += 16;
                }
                for (u, au) in acc.iter_mut().enumerate() {
                    let xv = V::splat(*xb.add(kk + u));
                    let row = base.add((kk + u) * W);
                    for (v, a) in au.iter_mut().enumerate().take(nvec) {
                        *a = V::fma(ld(row, v), xv, *a);
                    }
                }
                kk += U;
            }
            while kk < klen {
                let xv = V::splat(*xb.add(kk));
                let row = base.add(kk * W);
                for (v, a) in acc[0].iter_mut().enumerate().take(nvec) {
                    *a = V::fma(ld(row, v), xv, *a);
                }
                kk += 1;
            }
            k0 += klen;
        }
        let out = y.add((p - p0) * W);
        #[allow(clippy::needless_range_loop)]
        for v in 0..nvec {
            let s = V::add(V::add(acc[0][v], acc[1][v]), V::add(acc[2][v], acc[3][v]));
            if v + 1 == nvec && last_w < l {
                V::store_n(out.add(v * l), s, last_w);
            } else {
                V::store(out.add(v * l), s);
            }
        }
    }
}

/// GEMV epilogue: `out[o·os] = act(y[o] + bias_s + bias_v[o] + res[o·os])` for `o < len`;
/// `bias_v` and `res` may be null.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn epilogue_vec<V: Vf32>(
    y: *const f32,
    len: usize,
    out: *mut f32,
    os: usize,
    bias_s: f32,
    bias_v: *const f32,
    res: *const f32,
    act: &Activation,
) {
    if os == 1 {
        let l = V::LANES;
        let bs = V::splat(bias_s);
        let mut o = 0;
        while o < len {
            let w = (len - o).min(l);
            let ld = |p: *const f32| if w == l { V::load(p) } else { V::load_n(p, w) };
            let mut v = V::add(ld(y.add(o)), bs);
            if !bias_v.is_null() {
                v = V::add(v, ld(bias_v.add(o)));
            }
            if !res.is_null() {
                v = V::add(v, ld(res.add(o)));
            }
            v = activate(act, v);
            if w == l {
                V::store(out.add(o), v);
            } else {
                V::store_n(out.add(o), v, w);
            }
            o += l;
        }
    } else {
        for o in 0..len {
            let mut v = *y.add(o) + bias_s;
            if !bias_v.is_null() {
                v += *bias_v.add(o);
            }
            if !res.is_null() {
                v += *res.add(o * os);
            }
            *out.add(o * os) = activate::<f32>(act, v);
        }
    }
}
