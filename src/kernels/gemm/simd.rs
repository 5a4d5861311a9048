//! A minimal SIMD vocabulary for the GEMM module: one trait, [`Vf32`], implemented for plain
//! `f32` (the portable path), `__m256` (AVX2+FMA) and `__m512` (AVX-512F). The microkernel,
//! the packing loops, the GEMV kernels and the activation math are written once, generically,
//! as `#[inline(always)]` functions; each ISA instantiates them inside a
//! `#[target_feature(enable = ...)]` root so the intrinsics inline with that ISA's encoding.
//!
//! Every method is `unsafe`: the x86 implementations may only run on a CPU that has the
//! features (the dispatcher checks once), and the pointer methods read or write raw memory.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// A vector of `LANES` f32 values.
pub(crate) trait Vf32: Copy {
    const LANES: usize;
    /// Result of a lane-wise comparison.
    type Mask: Copy;

    unsafe fn splat(x: f32) -> Self;
    unsafe fn zero() -> Self;
    /// Unaligned load of `LANES` values.
    unsafe fn load(p: *const f32) -> Self;
    /// Load from a `LANES * 4`-byte aligned address.
    unsafe fn load_aligned(p: *const f32) -> Self;
    unsafe fn store(p: *mut f32, v: Self);
    /// Loads the first `n < LANES` values; the other lanes are zero and their memory is not read.
    unsafe fn load_n(p: *const f32, n: usize) -> Self;
    /// Stores the first `n < LANES` lanes; the memory past them is not touched.
    unsafe fn store_n(p: *mut f32, v: Self, n: usize);
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn div(a: Self, b: Self) -> Self;
    /// `a * b + c` (fused on the SIMD paths).
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// `a > b ? a : b` (the `maxps` rule: NaN in `a` gives `b`).
    unsafe fn max(a: Self, b: Self) -> Self;
    /// `a < b ? a : b`.
    unsafe fn min(a: Self, b: Self) -> Self;
    unsafe fn abs(a: Self) -> Self;
    unsafe fn lt(a: Self, b: Self) -> Self::Mask;
    /// `m ? a : b` per lane.
    unsafe fn select(m: Self::Mask, a: Self, b: Self) -> Self;
    /// Round to nearest, ties to even (inputs are bounded well below 2^22 where it is used).
    unsafe fn round(a: Self) -> Self;
    /// `2^n` for integral `n` in [-126, 127].
    unsafe fn pow2i(n: Self) -> Self;
    /// `mag` (non-negative) with the sign bit of `from`.
    unsafe fn with_sign_of(mag: Self, from: Self) -> Self;
    unsafe fn hsum(a: Self) -> f32;
    /// Splits the `2 * LANES` values `a ‖ b` into their even- and odd-indexed halves (the
    /// stride-2 deinterleave of a row, used to build phase planes for strided convolutions).
    unsafe fn deinterleave2(a: Self, b: Self) -> (Self, Self);
    /// Prefetch hint for the cache line holding `p` (no-op where there is none).
    #[inline(always)]
    unsafe fn prefetch(_p: *const f32) {}
    /// Prefetch the line at `p` into L2 only (`prefetcht1`): data needed after the current
    /// micro-panel, which must not evict it from L1.
    #[inline(always)]
    unsafe fn prefetch_l2(_p: *const f32) {}
}

impl Vf32 for f32 {
    const LANES: usize = 1;
    type Mask = bool;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        x
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        0.0
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        *p
    }
    #[inline(always)]
    unsafe fn load_aligned(p: *const f32) -> Self {
        *p
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        *p = v
    }
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> Self {
        if n > 0 {
            *p
        } else {
            0.0
        }
    }
    #[inline(always)]
    unsafe fn store_n(p: *mut f32, v: Self, n: usize) {
        if n > 0 {
            *p = v
        }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        a + b
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        a - b
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        a * b
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        a / b
    }
    /// Unfused on purpose: `f32::mul_add` is a libm call on CPUs without FMA.
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        a * b + c
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        if a > b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        if a < b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn abs(a: Self) -> Self {
        f32::from_bits(a.to_bits() & 0x7fff_ffff)
    }
    #[inline(always)]
    unsafe fn lt(a: Self, b: Self) -> bool {
        a < b
    }
    #[inline(always)]
    unsafe fn select(m: bool, a: Self, b: Self) -> Self {
        if m {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        // 1.5 * 2^23: adding it pushes the fraction out under round-to-nearest-even.
        const MAGIC: f32 = 12_582_912.0;
        (a + MAGIC) - MAGIC
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self) -> Self {
        f32::from_bits(((n as i32 + 127) as u32) << 23)
    }
    #[inline(always)]
    unsafe fn with_sign_of(mag: Self, from: Self) -> Self {
        f32::from_bits(mag.to_bits() | (from.to_bits() & 0x8000_0000))
    }
    #[inline(always)]
    unsafe fn hsum(a: Self) -> f32 {
        a
    }
    #[inline(always)]
    unsafe fn deinterleave2(a: Self, b: Self) -> (Self, Self) {
        (a, b)
    }
}

#[cfg(target_arch = "x86_64")]
impl Vf32 for __m256 {
    const LANES: usize = 8;
    type Mask = __m256;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_aligned(p: *const f32) -> Self {
        _mm256_load_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> Self {
        _mm256_maskload_ps(p, lane_mask8(n))
    }
    #[inline(always)]
    unsafe fn store_n(p: *mut f32, v: Self, n: usize) {
        _mm256_maskstore_ps(p, lane_mask8(n), v)
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        _mm256_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        _mm256_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn abs(a: Self) -> Self {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), a)
    }
    #[inline(always)]
    unsafe fn lt(a: Self, b: Self) -> __m256 {
        _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn select(m: __m256, a: Self, b: Self) -> Self {
        _mm256_blendv_ps(b, a, m)
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self) -> Self {
        let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
    }
    #[inline(always)]
    unsafe fn with_sign_of(mag: Self, from: Self) -> Self {
        _mm256_or_ps(mag, _mm256_and_ps(from, _mm256_set1_ps(-0.0)))
    }
    #[inline(always)]
    unsafe fn hsum(a: Self) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }
    #[inline(always)]
    unsafe fn deinterleave2(a: Self, b: Self) -> (Self, Self) {
        // Within each 128-bit lane: [a0 a2 b0 b2 | a4 a6 b4 b6]; then 64-bit blocks 0,2,1,3.
        let even = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
        let odd = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
        let fix = |v: __m256| {
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
        };
        (fix(even), fix(odd))
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }

    #[inline(always)]
    unsafe fn prefetch_l2(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8)
    }
}

/// Lanes `0..n` set (all ones), the rest clear, as `maskload`/`maskstore` want.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lane_mask8(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

#[cfg(target_arch = "x86_64")]
impl Vf32 for __m512 {
    const LANES: usize = 16;
    type Mask = __mmask16;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_aligned(p: *const f32) -> Self {
        _mm512_load_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> Self {
        _mm512_maskz_loadu_ps(((1u32 << n) - 1) as __mmask16, p)
    }
    #[inline(always)]
    unsafe fn store_n(p: *mut f32, v: Self, n: usize) {
        _mm512_mask_storeu_ps(p, ((1u32 << n) - 1) as __mmask16, v)
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        _mm512_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        _mm512_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn abs(a: Self) -> Self {
        _mm512_abs_ps(a)
    }
    #[inline(always)]
    unsafe fn lt(a: Self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn select(m: __mmask16, a: Self, b: Self) -> Self {
        _mm512_mask_blend_ps(m, b, a)
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self) -> Self {
        let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
    }
    #[inline(always)]
    unsafe fn with_sign_of(mag: Self, from: Self) -> Self {
        let sign = _mm512_and_si512(_mm512_castps_si512(from), _mm512_set1_epi32(i32::MIN));
        _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign))
    }
    #[inline(always)]
    unsafe fn hsum(a: Self) -> f32 {
        _mm512_reduce_add_ps(a)
    }
    #[inline(always)]
    unsafe fn deinterleave2(a: Self, b: Self) -> (Self, Self) {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        (
            _mm512_permutex2var_ps(a, even, b),
            _mm512_permutex2var_ps(a, odd, b),
        )
    }
    #[inline(always)]
    unsafe fn prefetch(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8)
    }

    #[inline(always)]
    unsafe fn prefetch_l2(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8)
    }
}
