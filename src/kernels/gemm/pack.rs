//! Packing: copies a block of A or B into the k-major micro-panels the microkernel streams.
//!
//! Both operands use one layout. An operand is seen as a `len × k` array (A: rows × k;
//! B: columns × k) with element `(w, kk)` at `ptr[w·ws + kk·ks]`. A k-block `[k0, k0+klen)` is
//! packed as `ceil(len / W)` panels; panel `p` holds `klen × W` floats with element `(w, kk)`
//! at `kk·W + (w - p·W)`; the rows past `len` in the last panel are zero, so the microkernel
//! never needs a ragged k loop. A whole pre-packed operand ([`PackedView`]) stores the k-blocks
//! one after the other: block `k0` starts at `k0 · round_up(len, W)`.

use super::simd::Vf32;

/// A whole operand packed for a kernel whose panel width is `w`, k-blocked by `kc`.
#[derive(Clone, Copy)]
pub(crate) struct PackedView<'a> {
    pub data: &'a [f32],
    /// Rows of A or columns of B.
    pub len: usize,
    pub k: usize,
    pub kc: usize,
    /// Panel width (MR for A, NR for B).
    pub w: usize,
}

impl PackedView<'_> {
    #[inline]
    pub fn padded(&self) -> usize {
        self.len.div_ceil(self.w) * self.w
    }

    /// Floats the whole packed operand occupies.
    pub fn size(len: usize, k: usize, w: usize) -> usize {
        len.div_ceil(w) * w * k
    }

    /// First float of panel `p` in the k-block that starts at `k0` and has `klen` rows.
    #[inline]
    pub fn panel(&self, k0: usize, klen: usize, p: usize) -> *const f32 {
        debug_assert!(k0.is_multiple_of(self.kc) && p * self.w < self.padded().max(1));
        let off = k0 * self.padded() + p * klen * self.w;
        debug_assert!(off + klen * self.w <= self.data.len());
        // SAFETY: `off` is inside `data` (checked above in debug builds; the layout guarantees it).
        unsafe { self.data.as_ptr().add(off) }
    }
}

/// Packs the `wlen × klen` block at `src` (element `(w, kk)` at `src[w·ws + kk·ks]`) into
/// `ceil(wlen / W)` panels of `klen × W` floats at `dst`, zero-padding the last panel.
///
/// # Safety
/// `src` must be valid for every element of the block and `dst` for
/// `ceil(wlen / W) · W · klen` floats.
#[inline(always)]
pub(crate) unsafe fn pack<V: Vf32, const W: usize>(
    src: *const f32,
    ws: usize,
    ks: usize,
    wlen: usize,
    klen: usize,
    dst: *mut f32,
) {
    let panels = wlen.div_ceil(W);
    let mut first = 0;
    if ws == 1 {
        // Contiguous along the panel width (B row-major, A column-major): walk the block row
        // by row across all full panels, so the source is read as one sequential stream per
        // row (DRAM and the prefetchers like that) and each panel receives W floats per row.
        let full = wlen / W;
        for kk in 0..klen {
            let sr = src.add(kk * ks);
            // The next row starts a new stream: touch its first lines early.
            // (wrapping: past the last row this points outside the slice; prefetches never fault.)
            let next = sr.wrapping_add(ks);
            for x in 0..4 {
                V::prefetch(next.wrapping_add(16 * x));
            }
            for p in 0..full {
                copy_row::<V, W>(sr.add(p * W), dst.add(p * klen * W + kk * W));
            }
        }
        first = full;
    }
    for p in first..panels {
        let w0 = p * W;
        let wn = (wlen - w0).min(W);
        let d = dst.add(p * klen * W);
        let s = src.add(w0 * ws);
        if ws == 1 {
            // Contiguous along the panel width (B row-major, A column-major): copy rows.
            if wn == W {
                for kk in 0..klen {
                    copy_row::<V, W>(s.add(kk * ks), d.add(kk * W));
                }
            } else {
                for kk in 0..klen {
                    let sr = s.add(kk * ks);
                    let dr = d.add(kk * W);
                    for x in 0..W {
                        *dr.add(x) = if x < wn { *sr.add(x) } else { 0.0 };
                    }
                }
            }
        } else if ks == 1 && wn == W {
            // Contiguous along k (A row-major, B transposed): a W-wide transpose, k-blocked so
            // the W source rows are read in short sequential bursts.
            const KB: usize = 8;
            let mut kk = 0;
            while kk + KB <= klen {
                for x in 0..W {
                    let sr = s.add(x * ws + kk);
                    for q in 0..KB {
                        *d.add((kk + q) * W + x) = *sr.add(q);
                    }
                }
                kk += KB;
            }
            while kk < klen {
                for x in 0..W {
                    *d.add(kk * W + x) = *s.add(x * ws + kk);
                }
                kk += 1;
            }
        } else {
            for kk in 0..klen {
                let dr = d.add(kk * W);
                for x in 0..W {
                    *dr.add(x) = if x < wn {
                        *s.add(x * ws + kk * ks)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn copy_row<V: Vf32, const W: usize>(s: *const f32, d: *mut f32) {
    let mut x = 0;
    while x + V::LANES <= W {
        V::store(d.add(x), V::load(s.add(x)));
        x += V::LANES;
    }
    while x < W {
        *d.add(x) = *s.add(x);
        x += 1;
    }
}
