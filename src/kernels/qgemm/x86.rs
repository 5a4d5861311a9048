//! x86 int8 variants: AVX-512 VNNI (`vpdpbusd zmm`, masked epilogue in registers, AVX-512BW
//! packing), AVX-VNNI (`vpdpbusd ymm`, VEX encoded; the portable epilogue and packing) and AVX2
//! (the AVX-VNNI tiles with `vpdpbusd` emulated by `vpmaddwd`).
//!
//! Each ISA's entry points are `#[target_feature]` functions instantiating the `#[inline(always)]`
//! generic tile with that ISA's tile shape; they may only be called after
//! [`QIsa::is_available`](super::QIsa::is_available) said yes.

use std::arch::x86_64::*;

use super::scalar;
use super::{ActSrc, QKernels, Tile};
use crate::kernels::gemm::{self, Activation};

pub(crate) static AVX512VNNI: QKernels = QKernels {
    wx: wx_512,
    xw: xw_512,
    xw1: xw1_512,
    pack_kmajor: pack_kmajor_512,
    pack_rows: scalar::pack_rows,
};

pub(crate) static AVXVNNI: QKernels = QKernels {
    wx: wx_256,
    xw: xw_256,
    xw1: xw1_256,
    pack_kmajor: scalar::pack_kmajor,
    pack_rows: scalar::pack_rows,
};

/// The 256-bit tiles on AVX2 without VNNI: each `vpdpbusd` emulated exactly ([`dpbusd_256`]).
pub(crate) static AVX2: QKernels = QKernels {
    wx: wx_256_avx2,
    xw: xw_256_avx2,
    xw1: xw1_256_avx2,
    pack_kmajor: scalar::pack_kmajor,
    pack_rows: scalar::pack_rows,
};

// ---------------------------------------------------------------------------------------------
// AVX-512 VNNI: tiles of MR × (NV · 16)

// Edge tiles run a smaller instance (half the rows, one vector) over the same packed panels,
// instead of the full tile's dot products for a few rows or columns: a 196-pixel plane fills
// 208 columns instead of 224.
macro_rules! edge_dispatch {
    ($t:expr, $bcast_u8:literal) => {{
        let t = $t;
        match (t.m_eff > 4, t.n_eff > 16) {
            (true, true) => tile_512::<8, 2, 8, 2, $bcast_u8>(t),
            (true, false) => tile_512::<8, 1, 8, 2, $bcast_u8>(t),
            (false, true) => tile_512::<4, 2, 8, 2, $bcast_u8>(t),
            (false, false) => tile_512::<4, 1, 8, 2, $bcast_u8>(t),
        }
    }};
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn wx_512(t: &Tile) {
    edge_dispatch!(t, false)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn xw_512(t: &Tile) {
    edge_dispatch!(t, true)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn xw1_512(t: &Tile) {
    if t.n_eff > 16 {
        tile_512::<1, 2, 1, 2, true>(t)
    } else {
        tile_512::<1, 1, 1, 2, true>(t)
    }
}

/// Lanes `0..w` (w ≥ 16: all).
#[inline(always)]
pub(crate) fn lane_mask(w: usize) -> __mmask16 {
    if w >= 16 {
        0xFFFF
    } else {
        ((1u32 << w) - 1) as __mmask16
    }
}

/// One `M × NV·16` tile over panels packed `PM` rows by `PNV` vectors wide (`M ≤ PM`,
/// `NV ≤ PNV`: edge tiles compute only the rows and vectors they cover).
#[inline(always)]
unsafe fn tile_512<
    const M: usize,
    const NV: usize,
    const PM: usize,
    const PNV: usize,
    const BCAST_U8: bool,
>(
    t: &Tile,
) {
    debug_assert!(M <= PM && NV <= PNV && t.m_eff <= M && t.n_eff <= NV * 16);
    let mut acc = [[_mm512_setzero_si512(); NV]; M];
    let mut a = t.bcast;
    let mut b = t.vec;
    for _ in 0..t.quads {
        let mut bv = [_mm512_setzero_si512(); NV];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = _mm512_loadu_si512(b.add(v * 64) as *const _);
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let s = _mm512_set1_epi32((a.add(r * 4) as *const i32).read_unaligned());
            for (x, y) in row.iter_mut().zip(bv.iter()) {
                // vpdpbusd: the second operand is u8, the third s8.
                *x = if BCAST_U8 {
                    _mm512_dpbusd_epi32(*x, s, *y)
                } else {
                    _mm512_dpbusd_epi32(*x, *y, s)
                };
            }
        }
        a = a.add(PM * 4);
        b = b.add(PNV * 64);
    }
    epilogue_512::<M, NV>(acc, t, !BCAST_U8);
}

/// Whether the activation is applied in registers (else via the vectorised slice kernel).
#[inline(always)]
fn in_register(act: &Activation) -> bool {
    matches!(
        act,
        Activation::None
            | Activation::Relu
            | Activation::Clip { .. }
            | Activation::LeakyRelu { .. }
    )
}

#[inline(always)]
unsafe fn activate_512(act: &Activation, y: __m512) -> __m512 {
    match *act {
        Activation::Relu => _mm512_max_ps(y, _mm512_setzero_ps()),
        Activation::Clip { min, max } => {
            _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(min)), _mm512_set1_ps(max))
        }
        Activation::LeakyRelu { alpha } => {
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(y, _mm512_setzero_ps());
            _mm512_mask_mul_ps(y, neg, y, _mm512_set1_ps(alpha))
        }
        _ => y,
    }
}

/// `clamp(round_even(y · inv) + zp, 0, 255)` as i32 lanes.
#[inline(always)]
pub(crate) unsafe fn quantize_512(y: __m512, inv: __m512, zp: __m512i) -> __m512i {
    let big = _mm512_set1_ps(1.0e9);
    let scaled = _mm512_min_ps(
        _mm512_max_ps(
            _mm512_mul_ps(y, inv),
            _mm512_sub_ps(_mm512_setzero_ps(), big),
        ),
        big,
    );
    let q = _mm512_add_epi32(_mm512_cvtps_epi32(scaled), zp);
    _mm512_min_epi32(
        _mm512_max_epi32(q, _mm512_setzero_si512()),
        _mm512_set1_epi32(255),
    )
}

/// Requantization constants of a tile (`inv`, `scale`, `zp`; zeros when there is no output grid).
#[inline(always)]
unsafe fn requant_512(t: &Tile) -> (__m512, __m512, __m512i) {
    match t.requant {
        Some(rq) => (
            _mm512_set1_ps(1.0 / rq.scale),
            _mm512_set1_ps(rq.scale),
            _mm512_set1_epi32(rq.zero_point),
        ),
        None => (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_si512(),
        ),
    }
}

/// The tile's epilogue, one row at a time with the row index a constant: the accumulators stay
/// in registers (a loop over rows with a run-time bound spilled all of them to the stack,
/// which on short reductions, K = 16, cost a quarter of the tile).
#[inline(always)]
unsafe fn epilogue_512<const M: usize, const NV: usize>(
    acc: [[__m512i; NV]; M],
    t: &Tile,
    ch_row: bool,
) {
    let rq = requant_512(t);
    macro_rules! rows {
        ($($r:literal)*) => {
            $(
                if $r < t.m_eff {
                    if let Some(row) = acc.get($r) {
                        row_epilogue_512::<NV>(row, $r, t, ch_row, rq);
                    }
                }
            )*
        };
    }
    rows!(0 1 2 3 4 5 6 7);
    debug_assert!(M <= 8, "epilogue_512 handles up to 8 rows");
}

#[inline(always)]
unsafe fn row_epilogue_512<const NV: usize>(
    row: &[__m512i; NV],
    r: usize,
    t: &Tile,
    ch_row: bool,
    (inv, scale, zp): (__m512, __m512, __m512i),
) {
    if !t.c_i32.is_null() {
        return row_integers_512(row, r, t, ch_row);
    }
    let simple = in_register(&t.act);
    let (corr_r, mul_r, bias_r) = if ch_row {
        (
            _mm512_set1_epi32(*t.corr.add(r)),
            _mm512_set1_ps(*t.mul.add(r)),
            _mm512_set1_ps(*t.bias.add(r)),
        )
    } else {
        (
            _mm512_setzero_si512(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        )
    };
    let mut ys = [_mm512_setzero_ps(); 4];
    for (v, a) in row.iter().enumerate() {
        let j = v * 16;
        if j >= t.n_eff {
            break;
        }
        let mask = lane_mask(t.n_eff - j);
        let (corr, mul, bias) = if ch_row {
            (corr_r, mul_r, bias_r)
        } else {
            (
                _mm512_maskz_loadu_epi32(mask, t.corr.add(j)),
                _mm512_maskz_loadu_ps(mask, t.mul.add(j)),
                _mm512_maskz_loadu_ps(mask, t.bias.add(j)),
            )
        };
        let a = with_offset_term_512(*a, r, j, mask, t, ch_row);
        let mut y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, corr)), mul, bias);
        if !t.residual.is_null() {
            y = _mm512_add_ps(
                y,
                _mm512_maskz_loadu_ps(mask, t.residual.add(r * t.ldc + j)),
            );
        }
        ys[v] = activate_512(&t.act, y);
    }
    if !simple {
        let mut tmp = [0f32; 64];
        for (v, y) in ys.iter().enumerate().take(NV) {
            _mm512_storeu_ps(tmp.as_mut_ptr().add(v * 16), *y);
        }
        gemm::apply_activation(&t.act, &mut tmp[..t.n_eff.min(NV * 16)]);
        for (v, y) in ys.iter_mut().enumerate().take(NV) {
            *y = _mm512_loadu_ps(tmp.as_ptr().add(v * 16));
        }
    }
    for (v, &y) in ys.iter().enumerate().take(NV) {
        let j = v * 16;
        if j >= t.n_eff {
            break;
        }
        let mask = lane_mask(t.n_eff - j);
        let at = r * t.ldc + j;
        match t.requant {
            None => _mm512_mask_storeu_ps(t.c_f32.add(at), mask, y),
            Some(_) => {
                let q = quantize_512(y, inv, zp);
                if t.c_u8.is_null() {
                    let back = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zp)), scale);
                    _mm512_mask_storeu_ps(t.c_f32.add(at), mask, back);
                } else {
                    _mm512_mask_cvtusepi32_storeu_epi8(t.c_u8.add(at) as *mut _, mask, q);
                }
            }
        }
    }
}

/// `acc` plus the tile's [`OffsetTerm`](super::OffsetTerm) at row `r`, columns `j..j+16`:
/// channels are rows in `wx` (`ch_row`) and columns in `xw`.
#[inline(always)]
unsafe fn with_offset_term_512(
    acc: __m512i,
    r: usize,
    j: usize,
    mask: __mmask16,
    t: &Tile,
    ch_row: bool,
) -> __m512i {
    if t.term_sums.is_null() {
        return acc;
    }
    let (factor, sums) = if ch_row {
        (
            _mm512_set1_epi32(*t.term_factor.add(r)),
            _mm512_maskz_loadu_epi32(mask, t.term_sums.add(j)),
        )
    } else {
        (
            _mm512_maskz_loadu_epi32(mask, t.term_factor.add(j)),
            _mm512_set1_epi32(*t.term_sums.add(r)),
        )
    };
    _mm512_add_epi32(acc, _mm512_mullo_epi32(factor, sums))
}

/// One row of an exact integer output ([`QOut::I32`](super::QOut)): `acc + term − corr`.
#[inline(always)]
unsafe fn row_integers_512<const NV: usize>(row: &[__m512i; NV], r: usize, t: &Tile, ch_row: bool) {
    for (v, a) in row.iter().enumerate() {
        let j = v * 16;
        if j >= t.n_eff {
            break;
        }
        let mask = lane_mask(t.n_eff - j);
        let corr = if ch_row {
            _mm512_set1_epi32(*t.corr.add(r))
        } else {
            _mm512_maskz_loadu_epi32(mask, t.corr.add(j))
        };
        let a = with_offset_term_512(*a, r, j, mask, t, ch_row);
        _mm512_mask_storeu_epi32(
            t.c_i32.add(r * t.ldc + j) as *mut _,
            mask,
            _mm512_sub_epi32(a, corr),
        );
    }
}

/// Per 128-bit lane: bytes [r0 c0..c3, r1 c0..c3, r2 .., r3 ..] → [c0 r0..r3, c1 r0..r3, ...].
#[inline(always)]
unsafe fn quad_transpose_ctrl() -> __m512i {
    _mm512_set4_epi32(0x0F0B_0703, 0x0E0A_0602, 0x0D09_0501, 0x0C08_0400)
}

/// Packs columns `j0..j0+w` of a k-major source into a panel (`panel` a multiple of 16).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn pack_kmajor_512(x: &ActSrc, k: usize, j0: usize, w: usize, panel: usize, dst: *mut u8) {
    if !panel.is_multiple_of(16) {
        return scalar::pack_kmajor(x, k, j0, w, panel, dst);
    }
    let quads = k.div_ceil(4);
    let chunks = panel / 16;
    match *x {
        ActSrc::F32 {
            data,
            ld,
            inv_scale,
            zero_point,
        } => {
            let inv = _mm512_set1_ps(inv_scale);
            let zp = _mm512_set1_epi32(zero_point);
            let ctrl = quad_transpose_ctrl();
            let src = data.as_ptr();
            let big = _mm512_set1_ps(1.0e9);
            let neg_big = _mm512_set1_ps(-1.0e9);
            for c in 0..chunks {
                let valid = w.saturating_sub(c * 16);
                let mask = lane_mask(valid);
                let col = j0 + c * 16;
                for q in 0..quads {
                    let mut iv = [_mm512_setzero_si512(); 4];
                    if valid > 0 {
                        for (i, v) in iv.iter_mut().enumerate() {
                            let kk = 4 * q + i;
                            if kk < k {
                                let xv = _mm512_maskz_loadu_ps(mask, src.add(kk * ld + col));
                                let s = _mm512_min_ps(
                                    _mm512_max_ps(_mm512_mul_ps(xv, inv), neg_big),
                                    big,
                                );
                                *v = _mm512_add_epi32(_mm512_cvtps_epi32(s), zp);
                            }
                        }
                    }
                    let p01 = _mm512_packs_epi32(iv[0], iv[1]);
                    let p23 = _mm512_packs_epi32(iv[2], iv[3]);
                    let bytes = _mm512_packus_epi16(p01, p23);
                    let out = _mm512_shuffle_epi8(bytes, ctrl);
                    _mm512_storeu_si512(dst.add((q * panel + c * 16) * 4) as *mut _, out);
                }
            }
        }
        ActSrc::U8 { data, ld } => {
            let src = data.as_ptr();
            for c in 0..chunks {
                let valid = w.saturating_sub(c * 16);
                let mask = lane_mask(valid);
                let col = j0 + c * 16;
                for q in 0..quads {
                    let mut rows = [_mm_setzero_si128(); 4];
                    if valid > 0 {
                        for (i, v) in rows.iter_mut().enumerate() {
                            let kk = 4 * q + i;
                            if kk < k {
                                *v = _mm_maskz_loadu_epi8(mask, src.add(kk * ld + col) as *const _);
                            }
                        }
                    }
                    let ab_lo = _mm_unpacklo_epi8(rows[0], rows[1]);
                    let ab_hi = _mm_unpackhi_epi8(rows[0], rows[1]);
                    let cd_lo = _mm_unpacklo_epi8(rows[2], rows[3]);
                    let cd_hi = _mm_unpackhi_epi8(rows[2], rows[3]);
                    let o = dst.add((q * panel + c * 16) * 4) as *mut __m128i;
                    _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
                    _mm_storeu_si128(o.add(1), _mm_unpackhi_epi16(ab_lo, cd_lo));
                    _mm_storeu_si128(o.add(2), _mm_unpacklo_epi16(ab_hi, cd_hi));
                    _mm_storeu_si128(o.add(3), _mm_unpackhi_epi16(ab_hi, cd_hi));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AVX-VNNI: 256-bit VEX `vpdpbusd`, tiles of MR × (NV · 8); epilogue on a spilled tile.

#[target_feature(enable = "avxvnni,avx2,fma")]
unsafe fn wx_256(t: &Tile) {
    tile_256::<6, 2, false, DOT_VEX>(t)
}

#[target_feature(enable = "avxvnni,avx2,fma")]
unsafe fn xw_256(t: &Tile) {
    tile_256::<6, 2, true, DOT_VEX>(t)
}

#[target_feature(enable = "avxvnni,avx2,fma")]
unsafe fn xw1_256(t: &Tile) {
    tile_256::<1, 2, true, DOT_VEX>(t)
}

/// The AVX-VNNI tiles with `vpdpbusd ymm` in its EVEX encoding (AVX512-VNNI + VL): the same
/// 256-bit kernel, so the test suite can run it on CPUs that have AVX-512 VNNI but not AVX-VNNI
/// (AMD Zen 4/5 guests, Ice Lake).
#[cfg(test)]
pub(crate) static AVXVNNI_EVEX: QKernels = QKernels {
    wx: wx_256_evex,
    xw: xw_256_evex,
    xw1: xw1_256_evex,
    pack_kmajor: scalar::pack_kmajor,
    pack_rows: scalar::pack_rows,
};

#[cfg(test)]
#[target_feature(enable = "avx512vnni,avx512vl,avx2,fma")]
unsafe fn wx_256_evex(t: &Tile) {
    tile_256::<6, 2, false, DOT_EVEX>(t)
}

#[cfg(test)]
#[target_feature(enable = "avx512vnni,avx512vl,avx2,fma")]
unsafe fn xw_256_evex(t: &Tile) {
    tile_256::<6, 2, true, DOT_EVEX>(t)
}

#[cfg(test)]
#[target_feature(enable = "avx512vnni,avx512vl,avx2,fma")]
unsafe fn xw1_256_evex(t: &Tile) {
    tile_256::<1, 2, true, DOT_EVEX>(t)
}

/// `vpdpbusd ymm` VEX encoded (AVX-VNNI).
const DOT_VEX: u8 = 0;
/// `vpdpbusd ymm` EVEX encoded (AVX512-VNNI + VL).
const DOT_EVEX: u8 = 1;
/// AVX2 alone: see [`dpbusd_256`].
const DOT_AVX2: u8 = 2;

#[target_feature(enable = "avx2,fma")]
unsafe fn wx_256_avx2(t: &Tile) {
    tile_256::<6, 2, false, DOT_AVX2>(t)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn xw_256_avx2(t: &Tile) {
    tile_256::<6, 2, true, DOT_AVX2>(t)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn xw1_256_avx2(t: &Tile) {
    tile_256::<1, 2, true, DOT_AVX2>(t)
}

/// `acc + Σ₄ u8·s8` on 8 lanes. Without VNNI the quad splits into its even and odd bytes,
/// widened to i16 (u8 zero-extended, s8 sign-extended), and two `vpmaddwd` sum the pairs into
/// i32: exact, unlike `vpmaddubsw`, which clamps each pair sum to i16 (255·127·2 = 64 770 does
/// not fit; onnxruntime's kernels on such CPUs return the clamped sums). The operands' splits
/// are the same for every use of a broadcast or loaded vector, and are hoisted by the compiler.
#[inline(always)]
unsafe fn dpbusd_256<const DOT: u8>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    match DOT {
        DOT_EVEX => _mm256_dpbusd_epi32(acc, u, s),
        DOT_VEX => _mm256_dpbusd_avx_epi32(acc, u, s),
        _ => {
            let u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00ff));
            let u_odd = _mm256_srli_epi16::<8>(u);
            let s_even = _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(s));
            let s_odd = _mm256_srai_epi16::<8>(s);
            let pairs = _mm256_add_epi32(
                _mm256_madd_epi16(u_even, s_even),
                _mm256_madd_epi16(u_odd, s_odd),
            );
            _mm256_add_epi32(acc, pairs)
        }
    }
}

#[inline(always)]
unsafe fn tile_256<const M: usize, const NV: usize, const BCAST_U8: bool, const DOT: u8>(t: &Tile) {
    let mut acc = [[_mm256_setzero_si256(); NV]; M];
    let mut a = t.bcast;
    let mut b = t.vec;
    for _ in 0..t.quads {
        let mut bv = [_mm256_setzero_si256(); NV];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = _mm256_loadu_si256(b.add(v * 32) as *const __m256i);
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let s = _mm256_set1_epi32((a.add(r * 4) as *const i32).read_unaligned());
            for (x, y) in row.iter_mut().zip(bv.iter()) {
                *x = if BCAST_U8 {
                    dpbusd_256::<DOT>(*x, s, *y)
                } else {
                    dpbusd_256::<DOT>(*x, *y, s)
                };
            }
        }
        a = a.add(M * 4);
        b = b.add(NV * 32);
    }
    let mut tile = [[0i32; 16]; M];
    for (row, accs) in tile.iter_mut().zip(acc.iter()) {
        for (v, x) in accs.iter().enumerate() {
            _mm256_storeu_si256(row.as_mut_ptr().add(v * 8) as *mut __m256i, *x);
        }
    }
    scalar::epilogue(tile.as_ptr() as *const i32, 16, t, !BCAST_U8, true);
}

// ---------------------------------------------------------------------------------------------
// Element-wise quantization and byte im2col (AVX-512BW; VBMI for stride 2)

pub(crate) fn has_avx512bw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var("ROOFLINE_ISA").as_deref() != Ok("scalar")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
    })
}

/// `vpdpbusd ymm` in its EVEX form (the test suite's stand-in for AVX-VNNI).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn has_evex_vnni256() -> bool {
    is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
}

pub(crate) fn has_vbmi() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| has_avx512bw() && is_x86_feature_detected!("avx512vbmi"))
}

/// 16 floats → 16 quantized lanes (i32), NaN → zero point.
#[inline(always)]
unsafe fn quantize_lanes(x: __m512, inv: __m512, zp: __m512i) -> __m512i {
    let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x);
    quantize_512(_mm512_maskz_mov_ps(ordered, x), inv, zp)
}

/// `dst[i] = clamp(round_even(src[i] · inv) + zp, 0, 255)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_slice_512(src: &[f32], dst: &mut [u8], inv: f32, zp: i32) {
    let n = src.len().min(dst.len());
    let (invv, zpv) = (_mm512_set1_ps(inv), _mm512_set1_epi32(zp));
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 64 <= n {
        for u in 0..4 {
            let q = quantize_lanes(_mm512_loadu_ps(s.add(i + 16 * u)), invv, zpv);
            _mm_storeu_si128(d.add(i + 16 * u) as *mut __m128i, _mm512_cvtusepi32_epi8(q));
        }
        i += 64;
    }
    while i < n {
        let mask = lane_mask(n - i);
        let q = quantize_lanes(_mm512_maskz_loadu_ps(mask, s.add(i)), invv, zpv);
        _mm512_mask_cvtusepi32_storeu_epi8(d.add(i) as *mut _, mask, q);
        i += 16;
    }
}

/// `dst[i] = (clamp(round_even(src[i] / scale) + zp, 0, 255) − zp) · scale`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn fake_quantize_512(src: &[f32], dst: &mut [f32], scale: f32, zp: i32) {
    let n = src.len().min(dst.len());
    let (invv, scalev, zpv) = (
        _mm512_set1_ps(1.0 / scale),
        _mm512_set1_ps(scale),
        _mm512_set1_epi32(zp),
    );
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let mask = lane_mask(n - i);
        let q = quantize_lanes(_mm512_maskz_loadu_ps(mask, s.add(i)), invv, zpv);
        let back = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zpv)), scalev);
        _mm512_mask_storeu_ps(d.add(i), mask, back);
        i += 16;
    }
}

#[inline(always)]
fn byte_mask(lo: isize, hi: isize) -> u64 {
    // Lanes i with lo <= i < hi, for 0 <= i < 64.
    let lo = lo.clamp(0, 64) as u32;
    let hi = hi.clamp(0, 64) as u32;
    if hi <= lo {
        return 0;
    }
    let upper = if hi == 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

/// Byte im2col with masked 64-byte row copies (stride 1) or `vpermb` even-byte selection
/// (stride 2); taps outside the image read `pad`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
pub(crate) unsafe fn im2col_512(
    geom: &crate::kernels::conv::Conv2d,
    channels: usize,
    input: &[u8],
    out: &mut [u8],
    pad: u8,
) {
    let (ih, iw, oh, ow) = (geom.in_h, geom.in_w, geom.out_h, geom.out_w);
    let rows = channels * geom.kernel_h * geom.kernel_w;
    assert!(input.len() >= channels * ih * iw && out.len() >= rows * oh * ow);
    let stride = geom.stride_w;
    let padv = _mm512_set1_epi8(pad as i8);
    // Output byte j of a stride-2 chunk takes input byte 2j.
    let even = _mm512_set_epi8(
        126, 124, 122, 120, 118, 116, 114, 112, 110, 108, 106, 104, 102, 100, 98, 96, 94, 92, 90,
        88, 86, 84, 82, 80, 78, 76, 74, 72, 70, 68, 66, 64, 62, 60, 58, 56, 54, 52, 50, 48, 46, 44,
        42, 40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0,
    );
    let chunk = if stride == 1 { 64 } else { 32 };
    let mut row = 0;
    for c in 0..channels {
        let plane = input.as_ptr().add(c * ih * iw);
        for ky in 0..geom.kernel_h {
            for kx in 0..geom.kernel_w {
                let x_off = (kx * geom.dilation_w) as isize - geom.pad_left as isize;
                for y in 0..oh {
                    let dst = out.as_mut_ptr().add((row * oh + y) * ow);
                    let iy =
                        (y * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                    let mut x0 = 0;
                    while x0 < ow {
                        let n = (ow - x0).min(chunk);
                        let store = byte_mask(0, n as isize);
                        let v = if iy < 0 || iy >= ih as isize {
                            padv
                        } else {
                            // Input columns start + i, valid for 0 <= start + i < iw.
                            let start = (x0 * stride) as isize + x_off;
                            let load = byte_mask(-start, iw as isize - start);
                            let src = plane.wrapping_offset(iy * iw as isize + start);
                            let v = _mm512_mask_loadu_epi8(padv, load, src as *const _);
                            if stride == 1 {
                                v
                            } else {
                                _mm512_permutexvar_epi8(even, v)
                            }
                        };
                        _mm512_mask_storeu_epi8(dst.add(x0) as *mut _, store, v);
                        x0 += chunk;
                    }
                }
                row += 1;
            }
        }
    }
}

#[inline(always)]
fn half_mask(lo: isize, hi: isize) -> u32 {
    // Lanes i with lo <= i < hi, for 0 <= i < 32.
    let lo = lo.clamp(0, 32) as u32;
    let hi = hi.clamp(0, 32) as u32;
    if hi <= lo {
        return 0;
    }
    let upper = if hi == 32 { u32::MAX } else { (1u32 << hi) - 1 };
    upper & !((1u32 << lo) - 1)
}

/// [`im2col_512`] on 16-bit elements (bf16 images): 32-lane rows, `vpermw` for stride 2.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn im2col_u16_512(
    geom: &crate::kernels::conv::Conv2d,
    channels: usize,
    input: &[u16],
    out: &mut [u16],
    pad: u16,
) {
    let (ih, iw, oh, ow) = (geom.in_h, geom.in_w, geom.out_h, geom.out_w);
    let rows = channels * geom.kernel_h * geom.kernel_w;
    assert!(input.len() >= channels * ih * iw && out.len() >= rows * oh * ow);
    let stride = geom.stride_w;
    let padv = _mm512_set1_epi16(pad as i16);
    let even = _mm512_set_epi16(
        62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28, 26, 24, 22, 20, 18,
        16, 14, 12, 10, 8, 6, 4, 2, 0,
    );
    let chunk = if stride == 1 { 32 } else { 16 };
    let mut row = 0;
    for c in 0..channels {
        let plane = input.as_ptr().add(c * ih * iw);
        for ky in 0..geom.kernel_h {
            for kx in 0..geom.kernel_w {
                let x_off = (kx * geom.dilation_w) as isize - geom.pad_left as isize;
                for y in 0..oh {
                    let dst = out.as_mut_ptr().add((row * oh + y) * ow);
                    let iy =
                        (y * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                    let mut x0 = 0;
                    while x0 < ow {
                        let n = (ow - x0).min(chunk);
                        let store = half_mask(0, n as isize);
                        let v = if iy < 0 || iy >= ih as isize {
                            padv
                        } else {
                            let start = (x0 * stride) as isize + x_off;
                            let load = half_mask(-start, iw as isize - start);
                            let src = plane.wrapping_offset(iy * iw as isize + start);
                            let v = _mm512_mask_loadu_epi16(padv, load, src as *const _);
                            if stride == 1 {
                                v
                            } else {
                                _mm512_permutexvar_epi16(even, v)
                            }
                        };
                        _mm512_mask_storeu_epi16(dst.add(x0) as *mut _, store, v);
                        x0 += chunk;
                    }
                }
                row += 1;
            }
        }
    }
}

pub(crate) fn has_avx512bf16() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| has_avx512bw() && is_x86_feature_detected!("avx512bf16"))
}

/// f32 → bf16 bits with `vcvtneps2bf16` (nearest even, denormals to zero).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(crate) unsafe fn to_bf16_512(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let mask = lane_mask(n - i);
        let h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, s.add(i)));
        _mm256_mask_storeu_epi16(
            d.add(i) as *mut _,
            mask,
            std::mem::transmute::<__m256bh, __m256i>(h),
        );
        i += 16;
    }
}
