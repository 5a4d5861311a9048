//! Vectorisable f32 approximations of exp, erf, tanh and friends: branch-free arithmetic that
//! LLVM turns into SIMD inside the multiversioned kernels (libm calls would stay scalar).
//! Accuracy: exp ≈ 2 ulp over [-87, 88]; erf max abs error 1.5e-7 (Abramowitz & Stegun 7.1.26
//! refined by one exp); tanh and sigmoid inherit exp's relative accuracy.

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
