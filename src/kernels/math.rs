//! Vectorisable f32 approximations of exp, erf, tanh and friends: branch-free arithmetic that
//! LLVM turns into SIMD inside the multiversioned kernels (libm calls would stay scalar).
//! Accuracy: exp ≈ 2 ulp over [-87, 88]; erf max abs error 1.5e-7 (Abramowitz & Stegun 7.1.26
//! refined by one exp); tanh and sigmoid inherit exp's relative accuracy; sin and cos
//! |error| ≤ 2e-7 for |x| below [`TRIG_LIMIT`] (libm's past it).

/// e^x for f32, Cody-Waite range reduction and a degree-6 polynomial.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // x = n·ln2 + r, |r| ≤ ln2/2. Adding 1.5·2^23 rounds x·log2(e) to the nearest integer (ties
    // to even) and leaves it in the low mantissa bits: no float→int conversion, which Rust's
    // saturating `as` would scalarise (NaN propagates through r and p instead).
    const ROUND: f32 = 12_582_912.0;
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = n.mul_add(-0.693_145_75, x);
    let r = n.mul_add(-1.428_606_8e-6, r);
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r * r, r) + 1.0;
    // Scale by 2^n through the exponent bits: t's bits are 0x4B40_0000 + n.
    let bits = t.to_bits().wrapping_sub(0x4B40_0000).wrapping_add(127) << 23;
    p * f32::from_bits(bits)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let x = x.clamp(-9.0, 9.0);
    let e = exp(2.0 * x);
    (e - 1.0) / (e + 1.0)
}

/// erf via A&S 7.1.26 (|error| ≤ 1.5e-7).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let mut poly = 1.061_405_4f32;
    poly = poly.mul_add(t, -1.453_152_1);
    poly = poly.mul_add(t, 1.421_413_8);
    poly = poly.mul_add(t, -0.284_496_74);
    poly = poly.mul_add(t, 0.254_829_6);
    let y = 1.0 - poly * t * exp(-a * a);
    sign * y
}

#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// ln(x) for positive finite x: exponent split and an atanh-series on the mantissa.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let exponent = ((bits >> 23) & 0xff) as i32 - 127;
    let mantissa = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000); // [1, 2)
                                                                       // ln(m) = 2·atanh((m-1)/(m+1)).
    let s = (mantissa - 1.0) / (mantissa + 1.0);
    let s2 = s * s;
    let mut p = 0.111_111_11f32;
    p = p.mul_add(s2, 0.142_857_15);
    p = p.mul_add(s2, 0.2);
    p = p.mul_add(s2, 0.333_333_34);
    p = p.mul_add(s2, 1.0);
    let result = 2.0 * s * p + exponent as f32 * std::f32::consts::LN_2;
    if x <= 0.0 {
        if x == 0.0 {
            f32::NEG_INFINITY
        } else {
            f32::NAN
        }
    } else {
        result
    }
}

/// |x| below which [`sin_in_range`] and [`cos_in_range`] hold: x·2/π must stay under 2^22 for
/// the rounding trick that finds the quadrant. Rotary embeddings reach about 10^6 (positions ×
/// the highest frequency).
pub const TRIG_LIMIT: f32 = 6.5e6;

/// x = n·π/2 + r with |r| ≤ π/4 (plus rounding), and n mod 4. π/2 is split into three
/// f32 parts (the nearest f32 to π/2, then the nearest to each remainder): with a fused
/// multiply-add the first product is exact and x − n·C1 is exact too (it is small and its bits
/// lie within one f32), so r's error is one rounding of a number below 1, about 3e-8, for
/// every n up to 2^22.
#[inline(always)]
fn reduce_quadrant(x: f32) -> (f32, u32) {
    const ROUND: f32 = 12_582_912.0;
    const PIO2_HI: f32 = f32::from_bits(0x3fc9_0fdb);
    const PIO2_MID: f32 = f32::from_bits(0xb33b_bd2e);
    const PIO2_LO: f32 = f32::from_bits(0xa6f7_2ced);
    let t = x.mul_add(std::f32::consts::FRAC_2_PI, ROUND);
    let n = t - ROUND;
    let r = n.mul_add(-PIO2_HI, x);
    let r = n.mul_add(-PIO2_MID, r);
    let r = n.mul_add(-PIO2_LO, r);
    // t's bits are 0x4B40_0000 + n, and 0x4B40_0000 is a multiple of 4.
    (r, t.to_bits() & 3)
}

/// sin(r) on [-π/4, π/4]: Taylor through r⁹ (the next term is under 2e-9 there).
#[inline(always)]
fn sin_poly(r: f32) -> f32 {
    let r2 = r * r;
    let mut p = 1.0 / 362_880.0f32;
    p = p.mul_add(r2, -1.0 / 5040.0);
    p = p.mul_add(r2, 1.0 / 120.0);
    p = p.mul_add(r2, -1.0 / 6.0);
    (p * r2).mul_add(r, r)
}

/// cos(r) on [-π/4, π/4]: Taylor through r¹⁰ (the next term is under 2e-10 there).
#[inline(always)]
fn cos_poly(r: f32) -> f32 {
    let r2 = r * r;
    let mut p = -1.0 / 3_628_800.0f32;
    p = p.mul_add(r2, 1.0 / 40320.0);
    p = p.mul_add(r2, -1.0 / 720.0);
    p = p.mul_add(r2, 1.0 / 24.0);
    p = p.mul_add(r2, -0.5);
    p.mul_add(r2, 1.0)
}

/// sin or cos of the quadrant `q` (0-3) of r: both polynomials, one kept and its sign flipped
/// in quadrants 2 and 3, branch-free so that the loops around it vectorise.
#[inline(always)]
fn quadrant_value(r: f32, q: u32) -> f32 {
    let (s, c) = (sin_poly(r), cos_poly(r));
    let value = if q & 1 == 0 { s } else { c };
    f32::from_bits(value.to_bits() ^ ((q & 2) << 30))
}

/// sin(x) for |x| < [`TRIG_LIMIT`] (branch-free; other x give garbage, NaN gives NaN).
#[inline(always)]
pub fn sin_in_range(x: f32) -> f32 {
    let (r, q) = reduce_quadrant(x);
    // sin(−0) is −0 (the polynomial's +0 term would make it +0): a select, not a branch.
    if x == 0.0 {
        x
    } else {
        quadrant_value(r, q)
    }
}

/// cos(x) for |x| < [`TRIG_LIMIT`]: sin(x + π/2), one quadrant on.
#[inline(always)]
pub fn cos_in_range(x: f32) -> f32 {
    let (r, q) = reduce_quadrant(x);
    quadrant_value(r, (q + 1) & 3)
}

/// sin(x) for every x: [`sin_in_range`] where it holds, libm's past [`TRIG_LIMIT`] (the branch
/// keeps a loop around it scalar: vector kernels test a block and patch it instead).
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    if x.abs() < TRIG_LIMIT {
        sin_in_range(x)
    } else {
        x.sin()
    }
}

/// cos(x) for every x, as [`sin`].
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    if x.abs() < TRIG_LIMIT {
        cos_in_range(x)
    } else {
        x.cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approximations_are_accurate() {
        let mut x = -20.0f32;
        while x < 20.0 {
            let e = exp(x) as f64;
            let want = (x as f64).exp();
            assert!(((e - want) / want).abs() < 3e-7, "exp({x})");
            assert!(
                (erf(x) as f64 - libm_erf(x as f64)).abs() < 3e-7,
                "erf({x})"
            );
            assert!((tanh(x) - x.tanh()).abs() < 2e-6, "tanh({x})");
            if x > 0.0 {
                assert!(
                    (ln(x) - x.ln()).abs() < 2e-6 * x.ln().abs().max(1.0),
                    "ln({x})"
                );
            }
            x += 0.037;
        }
    }

    #[test]
    fn sin_and_cos_match_f64_over_the_reduced_range_and_fall_back_past_it() {
        let mut worst: f64 = 0.0;
        let mut check = |x: f32| {
            let (want_sin, want_cos) = ((x as f64).sin(), (x as f64).cos());
            let (got_sin, got_cos) = (sin(x) as f64, cos(x) as f64);
            let error = (got_sin - want_sin).abs().max((got_cos - want_cos).abs());
            assert!(
                error < 2e-7,
                "x = {x}: sin {got_sin} vs {want_sin}, cos {got_cos} vs {want_cos}"
            );
            worst = worst.max(error);
        };
        // Dense over the range models use (angles, positions × frequencies), both signs.
        let mut x = -200.0f32;
        while x < 200.0 {
            check(x);
            x += 0.0013;
        }
        // Multiples of π/2 (where r is smallest and the quadrant flips), and large arguments
        // up to the limit and past it (libm).
        for k in -4000..4000 {
            let near = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
            check(near);
            check(f32::from_bits(near.to_bits() + 1));
        }
        let mut x = 200.0f32;
        while x < 3.0e7 {
            check(x);
            check(-x);
            x *= 1.0007;
        }
        assert!(worst > 0.0);
        assert_eq!(sin(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(sin(f32::NAN).is_nan() && cos(f32::INFINITY).is_nan());
        assert!(sin_in_range(f32::NAN).is_nan());
    }

    /// erf by its Taylor/continued-fraction definition in f64, as the test reference.
    fn libm_erf(x: f64) -> f64 {
        // Series for |x| < 3, continued fraction beyond.
        if x.abs() < 3.0 {
            let mut term = x;
            let mut sum = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            x.signum()
                * (1.0
                    - (-x * x).exp() / (x.abs() * std::f64::consts::PI.sqrt())
                        * (1.0 - 1.0 / (2.0 * x * x)))
        }
    }
}
