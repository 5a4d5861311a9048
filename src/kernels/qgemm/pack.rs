//! Element-wise quantization helpers (vectorised per ISA through `multiversion!`): f32 → u8,
//! u8 → f32, the f32 → grid → f32 round trip, and the byte/half-word im2col used by the int8
//! and bf16 convolutions.

use super::scalar::quant;
use crate::kernels::conv::Conv2d;
use crate::kernels::simd::multiversion;

/// `dst[i] = clamp(round_even(src[i] / scale) + zero_point, 0, 255)` (ONNX QuantizeLinear,
/// with the division done as a multiplication by `1/scale`; NaN quantizes to the zero point).
pub fn quantize_u8(src: &[f32], dst: &mut [u8], scale: f32, zero_point: i32) {
    quantize_u8_inverse(src, dst, 1.0 / scale, zero_point)
}

/// [`quantize_u8`] given `1/scale` (the GEMMs' activation packing holds the inverse).
pub(crate) fn quantize_u8_inverse(src: &[f32], dst: &mut [u8], inv_scale: f32, zero_point: i32) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx512bw() {
        let n = src.len().min(dst.len());
        // SAFETY: AVX-512BW was detected; both slices hold `n` elements.
        return unsafe {
            super::x86::quantize_slice_512(&src[..n], &mut dst[..n], inv_scale, zero_point)
        };
    }
    quantize_u8_generic(src, dst, inv_scale, zero_point)
}

multiversion! {
    /// The portable [`quantize_u8_inverse`].
    pub fn quantize_u8_generic(src: &[f32], dst: &mut [u8], inv_scale: f32, zero_point: i32) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = quant(s, inv_scale, zero_point);
        }
    }
}

multiversion! {
    /// `dst[i] = (src[i] − zero_point) · scale` (ONNX DequantizeLinear).
    pub fn dequantize_u8(src: &[u8], dst: &mut [f32], scale: f32, zero_point: i32) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = (s as i32 - zero_point) as f32 * scale;
        }
    }
}

/// `x ← DequantizeLinear(QuantizeLinear(x))` in place, on the u8 grid (s8 data shifted by
/// 128 is the same grid).
pub fn fake_quantize(data: &mut [f32], scale: f32, zero_point: i32) {
    let inv = 1.0 / scale;
    for v in data.iter_mut() {
        let q = quant(*v, inv, zero_point) as i32;
        *v = (q - zero_point) as f32 * scale;
    }
}

/// `dst = DequantizeLinear(QuantizeLinear(src))` in one pass (AVX-512 where available).
pub fn fake_quantize_copy(src: &[f32], dst: &mut [f32], scale: f32, zero_point: i32) {
    let n = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx512bw() {
        // SAFETY: AVX-512BW was detected; both slices hold `n` elements.
        return unsafe {
            super::x86::fake_quantize_512(&src[..n], &mut dst[..n], scale, zero_point)
        };
    }
    dst[..n].copy_from_slice(&src[..n]);
    fake_quantize(&mut dst[..n], scale, zero_point)
}

/// Byte im2col (see [`im2col`]), with AVX-512 row copies where available.
pub(crate) fn im2col_u8(geom: &Conv2d, channels: usize, input: &[u8], out: &mut [u8], pad: u8) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx512bw()
        && (geom.stride_w == 1 || (geom.stride_w == 2 && super::x86::has_vbmi()))
    {
        // SAFETY: the features were detected; `im2col_512` checks its slice bounds.
        return unsafe { super::x86::im2col_512(geom, channels, input, out, pad) };
    }
    im2col(geom, channels, input, out, pad)
}

/// Half-word im2col (bf16 images), with AVX-512 row copies where available.
pub(crate) fn im2col_u16(geom: &Conv2d, channels: usize, input: &[u16], out: &mut [u16], pad: u16) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx512bw() && geom.stride_w <= 2 {
        // SAFETY: AVX-512BW was detected; `im2col_u16_512` checks its slice bounds.
        return unsafe { super::x86::im2col_u16_512(geom, channels, input, out, pad) };
    }
    im2col(geom, channels, input, out, pad)
}

/// f32 → bf16 bits (nearest even), vectorised where `vcvtneps2bf16` exists.
pub(crate) fn to_bf16(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::has_avx512bf16() {
        // SAFETY: AVX-512 BF16 was detected.
        return unsafe { super::x86::to_bf16_512(src, dst) };
    }
    for (h, &v) in dst.iter_mut().zip(src) {
        *h = super::bf16::f32_to_bf16(v);
    }
}

/// im2col for one image (group) of a convolution on any element type: rows are
/// `(c, ky, kx)`, columns the output pixels; taps outside the image read `pad`.
pub(crate) fn im2col<T: Copy>(geom: &Conv2d, channels: usize, input: &[T], out: &mut [T], pad: T) {
    let (oh, ow) = (geom.out_h, geom.out_w);
    let plane_len = geom.in_h * geom.in_w;
    let mut row = 0;
    for c in 0..channels {
        let plane = &input[c * plane_len..(c + 1) * plane_len];
        for ky in 0..geom.kernel_h {
            for kx in 0..geom.kernel_w {
                let dst = &mut out[row * oh * ow..(row + 1) * oh * ow];
                for y in 0..oh {
                    let iy =
                        (y * geom.stride_h + ky * geom.dilation_h) as isize - geom.pad_top as isize;
                    let dst_row = &mut dst[y * ow..(y + 1) * ow];
                    if iy < 0 || iy >= geom.in_h as isize {
                        dst_row.fill(pad);
                        continue;
                    }
                    let src = &plane[iy as usize * geom.in_w..(iy as usize + 1) * geom.in_w];
                    let x_offset = (kx * geom.dilation_w) as isize - geom.pad_left as isize;
                    if geom.stride_w == 1 {
                        let first = (-x_offset).max(0) as usize;
                        let last =
                            ((geom.in_w as isize - x_offset).min(ow as isize)).max(0) as usize;
                        dst_row[..first.min(ow)].fill(pad);
                        if last > first {
                            let s = (first as isize + x_offset) as usize;
                            dst_row[first..last].copy_from_slice(&src[s..s + last - first]);
                        }
                        dst_row[last.max(first).min(ow)..].fill(pad);
                    } else {
                        for (x, d) in dst_row.iter_mut().enumerate() {
                            let ix = (x * geom.stride_w) as isize + x_offset;
                            *d = if ix >= 0 && ix < geom.in_w as isize {
                                src[ix as usize]
                            } else {
                                pad
                            };
                        }
                    }
                }
                row += 1;
            }
        }
    }
}
