//! The portable int8 variant: widening i32 multiply-adds over the same packed layout as the SIMD
//! kernels, and the generic epilogue (also used by the AVX-VNNI variant, whose 256-bit vectors
//! have no masked stores).

use super::{ActSrc, QKernels, Tile};
use crate::kernels::gemm::{self, Activation};

pub const MR: usize = 4;
pub const NR: usize = 8;

pub(crate) static KERNELS: QKernels = QKernels {
    wx: tile_wx,
    xw: tile_xw,
    xw1: tile_xw1,
    pack_kmajor,
    pack_rows,
};

unsafe fn tile_wx(t: &Tile) {
    tile::<MR, NR, false>(t, true)
}

unsafe fn tile_xw(t: &Tile) {
    tile::<MR, NR, true>(t, false)
}

unsafe fn tile_xw1(t: &Tile) {
    tile::<1, NR, true>(t, false)
}

/// `acc[r][l] = Σ_k bcast[r][k] · vec[l][k]`, the u8 operand being the broadcast one when
/// `BCAST_U8` (dense orientation) and the vector one otherwise (convolutions).
#[inline(always)]
unsafe fn tile<const M: usize, const N: usize, const BCAST_U8: bool>(t: &Tile, ch_row: bool) {
    let mut acc = [[0i32; N]; M];
    for q in 0..t.quads {
        let a = t.bcast.add(q * M * 4);
        let b = t.vec.add(q * N * 4);
        for (r, row) in acc.iter_mut().enumerate() {
            for (l, cell) in row.iter_mut().enumerate() {
                let mut s = 0i32;
                for i in 0..4 {
                    let (x, y) = (*a.add(r * 4 + i), *b.add(l * 4 + i));
                    s += if BCAST_U8 {
                        x as i32 * (y as i8) as i32
                    } else {
                        y as i32 * (x as i8) as i32
                    };
                }
                *cell += s;
            }
        }
    }
    epilogue(acc.as_ptr() as *const i32, N, t, ch_row, false);
}

/// Rounds to nearest even and saturates to u8 (ONNX QuantizeLinear).
#[inline(always)]
pub(crate) fn quant(x: f32, inv_scale: f32, zero_point: i32) -> u8 {
    // Rounded to nearest-even by adding and removing 1.5·2^23 (exact below 2^22 in magnitude,
    // and the clamp keeps it there: past ±512 every zero point saturates the same way), not
    // `round_ties_even`, which without SSE4.1 is a call to `rintf` per element: it was 55% of
    // an int8 MatMul's time.
    const ROUND: f32 = 12_582_912.0;
    let scaled = (x * inv_scale).clamp(-512.0, 512.0);
    (((scaled + ROUND) - ROUND) as i32 + zero_point).clamp(0, 255) as u8
}

/// Dequantizes, adds bias and residual, applies the activation and writes one tile held as
/// i32 at `acc` (leading dimension `acc_ld`). `ch_row`: channels are the tile's rows (`wx`).
/// `vector_act`: apply transcendental activations with the vectorised slice kernel.
#[inline(always)]
pub(crate) unsafe fn epilogue(
    acc: *const i32,
    acc_ld: usize,
    t: &Tile,
    ch_row: bool,
    vector_act: bool,
) {
    let mut row = [0f32; 64];
    let n = t.n_eff;
    for r in 0..t.m_eff {
        let a = acc.add(r * acc_ld);
        for (l, y) in row.iter_mut().enumerate().take(n) {
            let ch = if ch_row { r } else { l };
            let mut acc = *a.add(l);
            if !t.term_sums.is_null() {
                // The channel's factor times the activation vector's sum (wrapping as the
                // vector lanes do).
                let act = if ch_row { l } else { r };
                acc =
                    acc.wrapping_add((*t.term_factor.add(ch)).wrapping_mul(*t.term_sums.add(act)));
            }
            if !t.c_i32.is_null() {
                *t.c_i32.add(r * t.ldc + l) = acc.wrapping_sub(*t.corr.add(ch));
                continue;
            }
            let mut v = acc.wrapping_sub(*t.corr.add(ch)) as f32 * *t.mul.add(ch) + *t.bias.add(ch);
            if !t.residual.is_null() {
                v += *t.residual.add(r * t.ldc + l);
            }
            *y = v;
        }
        if !t.c_i32.is_null() {
            continue;
        }
        let vals = &mut row[..n];
        match t.act {
            Activation::None => {}
            Activation::Relu => vals.iter_mut().for_each(|v| *v = v.max(0.0)),
            act if vector_act => gemm::apply_activation(&act, vals),
            act => vals
                .iter_mut()
                .for_each(|v| *v = gemm::activation_scalar(&act, *v)),
        }
        match t.requant {
            None => {
                let c = t.c_f32.add(r * t.ldc);
                for (l, &v) in vals.iter().enumerate() {
                    *c.add(l) = v;
                }
            }
            Some(rq) => {
                let inv = 1.0 / rq.scale;
                if t.c_u8.is_null() {
                    let c = t.c_f32.add(r * t.ldc);
                    for (l, &v) in vals.iter().enumerate() {
                        let q = quant(v, inv, rq.zero_point) as i32;
                        *c.add(l) = (q - rq.zero_point) as f32 * rq.scale;
                    }
                } else {
                    let c = t.c_u8.add(r * t.ldc);
                    for (l, &v) in vals.iter().enumerate() {
                        *c.add(l) = quant(v, inv, rq.zero_point);
                    }
                }
            }
        }
    }
}

/// Value (k, j) of a k-major source as u8.
#[inline(always)]
unsafe fn kmajor_at(x: &ActSrc, kk: usize, j: usize) -> u8 {
    match *x {
        ActSrc::F32 {
            data,
            ld,
            inv_scale,
            zero_point,
        } => quant(*data.get_unchecked(kk * ld + j), inv_scale, zero_point),
        ActSrc::U8 { data, ld } => *data.get_unchecked(kk * ld + j),
    }
}

/// Packs columns `j0..j0+w` (of a `panel`-wide panel; the rest zero) of a k-major source.
pub(crate) unsafe fn pack_kmajor(
    x: &ActSrc,
    k: usize,
    j0: usize,
    w: usize,
    panel: usize,
    dst: *mut u8,
) {
    let quads = k.div_ceil(4);
    for q in 0..quads {
        for l in 0..panel {
            for i in 0..4 {
                let kk = 4 * q + i;
                let v = if kk < k && l < w {
                    kmajor_at(x, kk, j0 + l)
                } else {
                    0
                };
                *dst.add((q * panel + l) * 4 + i) = v;
            }
        }
    }
}

/// Packs rows `r0..r0+rows` (k contiguous; the rest of the `panel` zero) into a broadcast
/// panel.
pub(crate) unsafe fn pack_rows(
    x: &ActSrc,
    k: usize,
    r0: usize,
    rows: usize,
    panel: usize,
    dst: *mut u8,
) {
    let quads = k.div_ceil(4);
    // Padding rows and the last quad's missing k are zeros.
    std::ptr::write_bytes(dst, 0, quads * panel * 4);
    // Each row quantized into a contiguous buffer (a flat loop that vectorises), then dealt
    // out four bytes at a time to its place in the quads; an element-by-element walk with the
    // source's match inside took four times the microkernel's time.
    let mut row_bytes = vec![0u8; quads * 4];
    for r in 0..rows {
        let row = r0 + r;
        match *x {
            ActSrc::F32 {
                data,
                ld,
                inv_scale,
                zero_point,
            } => {
                let src = &data[row * ld..row * ld + k];
                super::pack::quantize_u8_inverse(src, &mut row_bytes[..k], inv_scale, zero_point);
            }
            ActSrc::U8 { data, ld } => {
                row_bytes[..k].copy_from_slice(&data[row * ld..row * ld + k])
            }
        }
        for (q, group) in row_bytes.chunks_exact(4).enumerate() {
            std::ptr::copy_nonoverlapping(group.as_ptr(), dst.add((q * panel + r) * 4), 4);
        }
    }
}
