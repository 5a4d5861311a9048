//! Activation functions, written once over [`Vf32`] so that the scalar reference
//! ([`activation_scalar`](super::activation_scalar)), the GEMM epilogue and the slice kernels
//! share one algorithm per function.
//!
//! Accuracy (measured by the tests against f64 references over [-30, 30], f32 inputs):
//! - `exp`: Cody-Waite reduction `x = n·ln2 + r`, |r| ≤ ln2/2, then a degree-6 minimax
//!   polynomial (fit error 1.9e-9); about 2 ulp. Inputs are clamped to [-87.34, 88.37], so the
//!   result stays a normal number (no inf, no subnormal): exp(89) gives 2.4e38.
//! - `erf`: |x| < 1: `x·P(x²)`, P of degree 5 (fit error 4e-8 relative); 1 ≤ |x| < 4:
//!   `erfc(x) = exp(-x²)·t·Q(t)`, t = 1/(1 + x/2), Q of degree 6 (fit error 6e-9 relative);
//!   |x| ≥ 4: erf = ±1 (erfc(4) = 1.5e-8 is below f32 resolution of 1). Max abs error ≤ 3e-7.
//!   x² is split into hi + lo with an FMA so exp(-x²) keeps its relative accuracy.
//! - GELU (erf form) is `x·Φ(x)` with Φ(x) = 0.5·(1 + erf(x/√2)) evaluated as 0.5·erfc(|z|)
//!   for x < 0, so the negative tail keeps relative accuracy instead of cancelling.
//! - `tanh`: |x| < 0.625: `x + x³·P(x²)` (degree 4, odd); else `1 - 2/(exp(2|x|) + 1)` with the
//!   sign restored; |x| ≥ 9 gives ±1 exactly. Max abs error ≤ 3e-7, relative ≤ 1e-6.
//! - `sigmoid(x) = 1/(1 + exp(-x))`, `silu(x) = x·sigmoid(x)`: abs error ≤ 2e-7.
//!
//! The coefficients were fitted for this module (iteratively reweighted least squares on
//! Chebyshev nodes towards the minimax solution, against 30-digit mpmath references).
//! Relu, LeakyRelu, Clip, HardSigmoid and HardSwish follow the ONNX definitions; a NaN input
//! to Relu/Clip/HardSigmoid yields the lower bound (the `maxps` rule), the others propagate it.

// The fitted coefficients are written with the digits the fit printed; the compiler rounds
// them to the nearest f32, which is what the fit's error figures assume.
#![allow(clippy::excessive_precision)]

use super::simd::Vf32;
use super::Activation;

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split into a part with 8 trailing zero bits (exact `n·LN2_HI` for |n| ≤ 128) and the rest.
const LN2_HI: f32 = 0.693_359_375;
const LN2_LO: f32 = -2.121_944_4e-4;
/// exp(r) ≈ Σ c_i r^i on [-ln2/2, ln2/2]; c_0 = c_1 = 1.
const EXP_C: [f32; 5] = [
    4.999_999_106e-1,
    1.666_641_980e-1,
    4.166_822_508e-2,
    8.374_815_807e-3,
    1.383_682_946e-3,
];
/// erf(x)/x ≈ Σ c_i x^(2i) on [0, 1].
const ERF_SMALL: [f32; 6] = [
    1.128_379_107,
    -3.761_232_793e-1,
    1.128_018_424e-1,
    -2.671_140_432e-2,
    4.917_643_964e-3,
    -5.631_756_503e-4,
];
/// erfc(x)·exp(x²)·(1 + x/2) ≈ Σ c_i t^i, t = 1/(1 + x/2), on x ∈ [1, 4].
const ERFC_T: [f32; 7] = [
    2.825_931_013e-1,
    2.744_939_923e-1,
    2.958_108_187e-1,
    4.852_351_733e-3,
    4.288_268_983e-1,
    -3.795_104_921e-1,
    9.280_162_305e-2,
];
/// (tanh(x) - x)/x³ ≈ Σ c_i x^(2i) on [0, 0.625].
const TANH_SMALL: [f32; 5] = [
    -3.333_332_837e-1,
    1.333_279_610e-1,
    -5.385_417_864e-2,
    2.101_046_033e-2,
    -6.113_626_529e-3,
];
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

/// Horner evaluation of `c[0] + c[1] x + ...`.
#[inline(always)]
unsafe fn poly<V: Vf32, const N: usize>(x: V, c: &[f32; N]) -> V {
    let mut p = V::splat(c[N - 1]);
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        p = V::fma(p, x, V::splat(c[i]));
    }
    p
}

#[inline(always)]
pub(crate) unsafe fn exp<V: Vf32>(x: V) -> V {
    let x = V::min(V::max(x, V::splat(-87.336_55)), V::splat(88.37));
    let n = V::round(V::mul(x, V::splat(LOG2_E)));
    let r = V::fma(n, V::splat(-LN2_HI), x);
    let r = V::fma(n, V::splat(-LN2_LO), r);
    // 1 + r + r²·(c2 + c3 r + ...)
    let p = poly(r, &EXP_C);
    let r2 = V::mul(r, r);
    let p = V::fma(p, r2, V::add(r, V::splat(1.0)));
    V::mul(p, V::pow2i(n))
}

/// erfc(z) for z ≥ 1 (the caller masks z ≥ 4 to zero and z < 1 to the other branch).
#[inline(always)]
unsafe fn erfc_mid<V: Vf32>(z: V) -> V {
    let t = V::div(V::splat(1.0), V::fma(z, V::splat(0.5), V::splat(1.0)));
    let q = V::mul(poly(t, &ERFC_T), t);
    let zz = V::mul(z, z);
    // zz_lo = z·z - zz exactly with an FMA (zero on the unfused scalar path).
    let zz_lo = V::fma(z, z, V::sub(V::zero(), zz));
    let e = V::mul(exp(V::sub(V::zero(), zz)), V::sub(V::splat(1.0), zz_lo));
    V::mul(e, q)
}

/// Returns (erf(|z|) for |z| < 1 branch, erfc(|z|) for the large branch, is-small mask).
#[inline(always)]
unsafe fn erf_parts<V: Vf32>(az: V) -> (V, V, V::Mask) {
    let small = V::lt(az, V::splat(1.0));
    let zs = V::min(az, V::splat(1.0));
    let erf_small = V::mul(zs, poly(V::mul(zs, zs), &ERF_SMALL));
    let zl = V::min(V::max(az, V::splat(1.0)), V::splat(4.0));
    let ec = erfc_mid(zl);
    let ec = V::select(V::lt(az, V::splat(4.0)), ec, V::zero());
    (erf_small, ec, small)
}

#[inline(always)]
pub(crate) unsafe fn erf<V: Vf32>(x: V) -> V {
    let (es, ec, small) = erf_parts(V::abs(x));
    let mag = V::select(small, es, V::sub(V::splat(1.0), ec));
    V::with_sign_of(mag, x)
}

/// Φ(x) = 0.5·(1 + erf(x/√2)), the standard normal CDF.
#[inline(always)]
unsafe fn phi<V: Vf32>(x: V) -> V {
    let az = V::mul(V::abs(x), V::splat(FRAC_1_SQRT_2));
    let (es, ec, small) = erf_parts(az);
    let half = V::splat(0.5);
    let neg = V::lt(x, V::zero());
    // small: 0.5 ± 0.5·erf; large: x ≥ 0 → 1 - 0.5·erfc, x < 0 → 0.5·erfc.
    let small_v = V::select(neg, V::sub(half, V::mul(half, es)), V::fma(half, es, half));
    let hec = V::mul(half, ec);
    let large_v = V::select(neg, hec, V::sub(V::splat(1.0), hec));
    V::select(small, small_v, large_v)
}

#[inline(always)]
pub(crate) unsafe fn tanh<V: Vf32>(x: V) -> V {
    let ax = V::abs(x);
    let x2 = V::mul(x, x);
    let small = V::fma(V::mul(x2, x), poly(x2, &TANH_SMALL), x);
    let e = exp(V::mul(V::min(ax, V::splat(9.0)), V::splat(2.0)));
    let large = V::sub(
        V::splat(1.0),
        V::div(V::splat(2.0), V::add(e, V::splat(1.0))),
    );
    let large = V::select(V::lt(ax, V::splat(9.0)), large, V::splat(1.0));
    V::select(V::lt(ax, V::splat(0.625)), small, V::with_sign_of(large, x))
}

#[inline(always)]
pub(crate) unsafe fn sigmoid<V: Vf32>(x: V) -> V {
    let e = exp(V::sub(V::zero(), x));
    V::div(V::splat(1.0), V::add(V::splat(1.0), e))
}

/// Applies `act` to every lane of `x`.
#[inline(always)]
pub(crate) unsafe fn activate<V: Vf32>(act: &Activation, x: V) -> V {
    match *act {
        Activation::None => x,
        Activation::Relu => V::max(x, V::zero()),
        Activation::Clip { min, max } => V::min(V::max(x, V::splat(min)), V::splat(max)),
        Activation::LeakyRelu { alpha } => {
            V::select(V::lt(x, V::zero()), V::mul(x, V::splat(alpha)), x)
        }
        Activation::HardSigmoid { alpha, beta } => {
            let y = V::fma(x, V::splat(alpha), V::splat(beta));
            V::min(V::max(y, V::zero()), V::splat(1.0))
        }
        Activation::HardSwish => {
            let y = V::fma(x, V::splat(1.0 / 6.0), V::splat(0.5));
            V::mul(x, V::min(V::max(y, V::zero()), V::splat(1.0)))
        }
        Activation::Sigmoid => sigmoid(x),
        Activation::Silu => V::mul(x, sigmoid(x)),
        Activation::Gelu => V::mul(x, phi(x)),
        Activation::Tanh => tanh(x),
    }
}

/// An activation matched once before a vector loop instead of per vector: [`activate`]'s
/// match compiles to a jump table per call when the loop around it is not unswitched, and in
/// the AVX2 depthwise kernels on Zen 1 that dispatch cost 12-17% of the kernel's time. Bind
/// one with [`with_loop_activation!`].
pub(crate) trait LoopActivation<V: Vf32>: Copy {
    unsafe fn apply(self, x: V) -> V;
}

/// No activation.
#[derive(Clone, Copy)]
pub(crate) struct NoActivation;

impl<V: Vf32> LoopActivation<V> for NoActivation {
    #[inline(always)]
    unsafe fn apply(self, x: V) -> V {
        x
    }
}

/// Clip, and Relu as a clip to `[0, +∞)`: the same `max` then `min` as [`activate`] (a NaN
/// gives the lower bound).
#[derive(Clone, Copy)]
pub(crate) struct ClampActivation<V> {
    pub(crate) low: V,
    pub(crate) high: V,
}

impl<V: Vf32> LoopActivation<V> for ClampActivation<V> {
    #[inline(always)]
    unsafe fn apply(self, x: V) -> V {
        V::min(V::max(x, self.low), self.high)
    }
}

/// Any other activation, through [`activate`]'s match per vector (the rarer kinds after
/// these kernels; their own cost is mostly larger than the dispatch).
#[derive(Clone, Copy)]
pub(crate) struct AnyActivation<'a>(pub(crate) &'a Activation);

impl<V: Vf32> LoopActivation<V> for AnyActivation<'_> {
    #[inline(always)]
    unsafe fn apply(self, x: V) -> V {
        activate(self.0, x)
    }
}

/// `with_loop_activation!(activation, V, act => body)`: evaluates `body` with `act` bound to
/// `activation` (an `&Activation`) as a [`LoopActivation<V>`], one instance of `body` per kind.
/// A macro rather than a closure: `body` must inherit the calling function's target features.
macro_rules! with_loop_activation {
    ($activation:expr, $vector:ty, $act:ident => $body:expr) => {{
        use $crate::kernels::gemm::act::{AnyActivation, ClampActivation, NoActivation};
        #[allow(unused_imports)]
        use $crate::kernels::gemm::simd::Vf32 as _;
        match *$activation {
            $crate::kernels::gemm::Activation::None => {
                let $act = NoActivation;
                $body
            }
            $crate::kernels::gemm::Activation::Relu => {
                let $act = ClampActivation::<$vector> {
                    low: <$vector>::zero(),
                    high: <$vector>::splat(f32::INFINITY),
                };
                $body
            }
            $crate::kernels::gemm::Activation::Clip { min, max } => {
                let $act = ClampActivation::<$vector> {
                    low: <$vector>::splat(min),
                    high: <$vector>::splat(max),
                };
                $body
            }
            ref other => {
                let $act = AnyActivation(other);
                $body
            }
        }
    }};
}
pub(crate) use with_loop_activation;

/// In-place activation over a slice, `V::LANES` at a time.
#[inline(always)]
pub(crate) unsafe fn activate_slice<V: Vf32>(act: &Activation, data: &mut [f32]) {
    if matches!(act, Activation::None) {
        return;
    }
    let n = data.len();
    let p = data.as_mut_ptr();
    let mut i = 0;
    while i + V::LANES <= n {
        V::store(p.add(i), activate(act, V::load(p.add(i))));
        i += V::LANES;
    }
    if i < n {
        let r = n - i;
        V::store_n(p.add(i), activate(act, V::load_n(p.add(i), r)), r);
    }
}

/// In-place erf over a slice (for the Erf operator).
#[inline(always)]
pub(crate) unsafe fn erf_slice<V: Vf32>(data: &mut [f32]) {
    let n = data.len();
    let p = data.as_mut_ptr();
    let mut i = 0;
    while i + V::LANES <= n {
        V::store(p.add(i), erf(V::load(p.add(i))));
        i += V::LANES;
    }
    if i < n {
        let r = n - i;
        V::store_n(p.add(i), erf(V::load_n(p.add(i), r)), r);
    }
}
