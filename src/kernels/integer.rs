//! Integer multiply-accumulate rows for the exact integer ops (MatMulInteger): 8-bit operands
//! less their zero points fit i16, so two products are summed per i32 lane by `vpmaddwd`
//! (AVX-512BW or AVX2), exactly, with the i32 accumulation wrapping as the spec's output type.

use super::simd::{isa_level, IsaLevel};

/// `out[j] += Σ_t a[t] · row_t[j]` in wrapping i32 over four rows of i16 held as two
/// interleaved pairs: `pairs[p][2j + s]` is row `2p + s` at column `j`.
pub fn add_pair_rows(out: &mut [i32], pairs: [&[i16]; 2], a: [i16; 4]) {
    let width = out.len();
    assert!(
        pairs.iter().all(|p| p.len() >= 2 * width),
        "pair rows too short"
    );
    match isa_level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level says AVX-512F/BW are present; the lengths were checked above.
        IsaLevel::Avx512 => unsafe { x86::add_pair_rows_avx512(out, pairs, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above for AVX2.
        IsaLevel::Avx2 => unsafe { x86::add_pair_rows_avx2(out, pairs, a) },
        _ => add_pair_rows_scalar(out, pairs, a, 0),
    }
}

/// The scalar form, from column `from` on (the vector forms' tails).
fn add_pair_rows_scalar(out: &mut [i32], pairs: [&[i16]; 2], a: [i16; 4], from: usize) {
    let [a0, a1, a2, a3] = a.map(i32::from);
    let (p01, p23) = (pairs[0], pairs[1]);
    for (j, value) in out.iter_mut().enumerate().skip(from) {
        let low = i32::from(p01[2 * j]) * a0 + i32::from(p01[2 * j + 1]) * a1;
        let high = i32::from(p23[2 * j]) * a2 + i32::from(p23[2 * j + 1]) * a3;
        *value = value.wrapping_add(low.wrapping_add(high));
    }
}

/// Two 16-bit values as the one 32-bit lane `vpmaddwd` pairs them in (low half first).
fn pair_lane(low: i16, high: i16) -> i32 {
    ((u32::from(high as u16) << 16) | u32::from(low as u16)) as i32
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{add_pair_rows_scalar, pair_lane};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn add_pair_rows_avx512(out: &mut [i32], pairs: [&[i16]; 2], a: [i16; 4]) {
        let width = out.len();
        let a01 = _mm512_set1_epi32(pair_lane(a[0], a[1]));
        let a23 = _mm512_set1_epi32(pair_lane(a[2], a[3]));
        let (p01, p23) = (pairs[0].as_ptr(), pairs[1].as_ptr());
        let o = out.as_mut_ptr();
        let mut j = 0;
        while j + 16 <= width {
            let b01 = _mm512_loadu_si512(p01.add(2 * j).cast());
            let b23 = _mm512_loadu_si512(p23.add(2 * j).cast());
            let sum = _mm512_add_epi32(_mm512_madd_epi16(b01, a01), _mm512_madd_epi16(b23, a23));
            let acc = _mm512_loadu_si512(o.add(j).cast());
            _mm512_storeu_si512(o.add(j).cast(), _mm512_add_epi32(acc, sum));
            j += 16;
        }
        add_pair_rows_scalar(out, pairs, a, j);
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn add_pair_rows_avx2(out: &mut [i32], pairs: [&[i16]; 2], a: [i16; 4]) {
        let width = out.len();
        let a01 = _mm256_set1_epi32(pair_lane(a[0], a[1]));
        let a23 = _mm256_set1_epi32(pair_lane(a[2], a[3]));
        let (p01, p23) = (pairs[0].as_ptr(), pairs[1].as_ptr());
        let o = out.as_mut_ptr();
        let mut j = 0;
        while j + 8 <= width {
            let b01 = _mm256_loadu_si256(p01.add(2 * j).cast());
            let b23 = _mm256_loadu_si256(p23.add(2 * j).cast());
            let sum = _mm256_add_epi32(_mm256_madd_epi16(b01, a01), _mm256_madd_epi16(b23, a23));
            let acc = _mm256_loadu_si256(o.add(j).cast());
            _mm256_storeu_si256(o.add(j).cast(), _mm256_add_epi32(acc, sum));
            j += 8;
        }
        add_pair_rows_scalar(out, pairs, a, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ISA's form against the formula, at widths with and without a vector tail and
    /// with values at the ends of the centred 8-bit range (±255).
    #[test]
    fn pair_rows_match_the_formula() {
        for width in [1usize, 7, 8, 16, 33, 100] {
            let rows: Vec<Vec<i16>> = (0..4)
                .map(|t| {
                    (0..width)
                        .map(|j| (((j * 37 + t * 101) % 511) as i16) - 255)
                        .collect()
                })
                .collect();
            let interleave = |r0: &[i16], r1: &[i16]| -> Vec<i16> {
                r0.iter().zip(r1).flat_map(|(&x, &y)| [x, y]).collect()
            };
            let (p01, p23) = (
                interleave(&rows[0], &rows[1]),
                interleave(&rows[2], &rows[3]),
            );
            let a = [255i16, -255, 7, -128];
            let start: Vec<i32> = (0..width as i32).map(|j| j * 1000 - 7).collect();
            let expected: Vec<i32> = (0..width)
                .map(|j| {
                    start[j]
                        + (0..4)
                            .map(|t| i32::from(a[t]) * i32::from(rows[t][j]))
                            .sum::<i32>()
                })
                .collect();
            let mut scalar = start.clone();
            add_pair_rows_scalar(&mut scalar, [&p01, &p23], a, 0);
            assert_eq!(scalar, expected, "scalar, width {width}");
            let mut dispatched = start.clone();
            add_pair_rows(&mut dispatched, [&p01, &p23], a);
            assert_eq!(dispatched, expected, "{:?}, width {width}", isa_level());
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") {
                let mut avx2 = start.clone();
                // SAFETY: AVX2 was detected; the rows hold 2·width values.
                unsafe { x86::add_pair_rows_avx2(&mut avx2, [&p01, &p23], a) };
                assert_eq!(avx2, expected, "avx2, width {width}");
            }
        }
    }
}
