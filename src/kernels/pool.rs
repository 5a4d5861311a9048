//! Pooling over NCHW: max and average windows (padding, strides, dilation for max,
//! `count_include_pad` for average) and global pools.

use super::simd::multiversion;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    /// N·C planes.
    pub planes: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
}

multiversion! {
    /// Separable max pooling: a horizontal pass takes, for every input row, the maximum over
    /// each output column's kernel window (once per row, not once per output row that reads
    /// it), then a vertical pass takes the maximum of `kernel_h` of those rows, contiguously.
    /// The horizontal pass splits the −∞-padded row into `stride_w` phases (columns ≡ p mod
    /// stride), so each kernel tap is one contiguous, vectorised max over the output row.
    pub fn max_pool(p: &Pool2d, input: &[f32], output: &mut [f32]) {
        let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
        if ow == 0 || oh == 0 {
            return;
        }
        let (sw, dw) = (p.stride_w, p.dilation_w);
        let width = (ow - 1) * sw + (p.kernel_w - 1) * dw + 1;
        let phase_len = width.div_ceil(sw);
        let mut padded = vec![f32::NEG_INFINITY; phase_len * sw];
        let mut phases = vec![f32::NEG_INFINITY; phase_len * sw];
        let pad_left = p.pad_left.min(padded.len());
        let copied = iw.min(padded.len() - pad_left);
        let mut hmax = vec![f32::NEG_INFINITY; ih * ow];
        for plane in 0..p.planes {
            let src = &input[plane * ih * iw..(plane + 1) * ih * iw];
            for (row, h) in src.chunks(iw).zip(hmax.chunks_mut(ow)) {
                // Borders stay −∞ from the allocation; only the interior is rewritten.
                padded[pad_left..pad_left + copied].copy_from_slice(&row[..copied]);
                let phased: &[f32] = match sw {
                    1 => &padded,
                    2 => {
                        let (even, odd) = phases.split_at_mut(phase_len);
                        for ((pair, e), o) in padded.chunks_exact(2).zip(even).zip(odd) {
                            *e = pair[0];
                            *o = pair[1];
                        }
                        &phases
                    }
                    _ => {
                        for (j, &v) in padded.iter().enumerate() {
                            phases[(j % sw) * phase_len + j / sw] = v;
                        }
                        &phases
                    }
                };
                h.fill(f32::NEG_INFINITY);
                for kx in 0..p.kernel_w {
                    let offset = kx * dw;
                    let start = (offset % sw) * phase_len + offset / sw;
                    for (o, &v) in h.iter_mut().zip(&phased[start..start + ow]) {
                        *o = o.max(v);
                    }
                }
            }
            let dst = &mut output[plane * oh * ow..(plane + 1) * oh * ow];
            for (y, out_row) in dst.chunks_mut(ow).enumerate() {
                out_row.fill(f32::NEG_INFINITY);
                for ky in 0..p.kernel_h {
                    let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                    if iy < 0 || iy >= ih as isize {
                        continue;
                    }
                    let h = &hmax[iy as usize * ow..(iy as usize + 1) * ow];
                    for (o, &v) in out_row.iter_mut().zip(h) {
                        *o = o.max(v);
                    }
                }
            }
        }
    }
}

multiversion! {
    pub fn avg_pool(p: &Pool2d, count_include_pad: bool, pad_bottom: usize, pad_right: usize, input: &[f32], output: &mut [f32]) {
        let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
        for plane in 0..p.planes {
            let src = &input[plane * ih * iw..(plane + 1) * ih * iw];
            let dst = &mut output[plane * oh * ow..(plane + 1) * oh * ow];
            for y in 0..oh {
                let y0 = (y * p.stride_h) as isize - p.pad_top as isize;
                let y1 = y0 + p.kernel_h as isize;
                for x in 0..ow {
                    let x0 = (x * p.stride_w) as isize - p.pad_left as isize;
                    let x1 = x0 + p.kernel_w as isize;
                    let mut sum = 0.0f32;
                    let mut count = 0usize;
                    for iy in y0.max(0)..y1.min(ih as isize) {
                        for ix in x0.max(0)..x1.min(iw as isize) {
                            sum += src[iy as usize * iw + ix as usize];
                            count += 1;
                        }
                    }
                    let divisor = if count_include_pad {
                        // Window clipped to the padded extent, as ONNX defines it.
                        let hy = (y1.min((ih + pad_bottom) as isize) - y0.max(-(p.pad_top as isize))) as usize;
                        let wx = (x1.min((iw + pad_right) as isize) - x0.max(-(p.pad_left as isize))) as usize;
                        hy * wx
                    } else {
                        count
                    };
                    dst[y * ow + x] = if divisor > 0 { sum / divisor as f32 } else { 0.0 };
                }
            }
        }
    }
}

multiversion! {
    /// Mean (or max) of each plane of `plane_size` elements.
    pub fn global_pool(input: &[f32], plane_size: usize, max: bool, output: &mut [f32]) {
        for (o, plane) in output.iter_mut().zip(input.chunks(plane_size.max(1))) {
            *o = if max {
                plane.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            } else {
                plane.iter().sum::<f32>() / plane_size as f32
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_max(p: &Pool2d, input: &[f32]) -> Vec<f32> {
        let mut out = vec![f32::NEG_INFINITY; p.planes * p.out_h * p.out_w];
        for plane in 0..p.planes {
            for y in 0..p.out_h {
                for x in 0..p.out_w {
                    for ky in 0..p.kernel_h {
                        for kx in 0..p.kernel_w {
                            let iy =
                                (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                            let ix =
                                (x * p.stride_w + kx * p.dilation_w) as isize - p.pad_left as isize;
                            if iy >= 0
                                && ix >= 0
                                && (iy as usize) < p.in_h
                                && (ix as usize) < p.in_w
                            {
                                let v =
                                    input[(plane * p.in_h + iy as usize) * p.in_w + ix as usize];
                                let o = &mut out[(plane * p.out_h + y) * p.out_w + x];
                                *o = o.max(v);
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn separable_max_pool_matches_the_window_loop_on_every_isa() {
        for (k, s, pad, d, hw) in [
            (3, 2, 1, 1, 112),
            (2, 2, 0, 1, 9),
            (3, 1, 1, 2, 10),
            (3, 2, 0, 1, 7),
            (3, 3, 1, 1, 11),
            (5, 2, 2, 1, 13),
            (1, 2, 0, 1, 6),
        ] {
            let out = (hw + 2 * pad - d * (k - 1) - 1) / s + 1;
            let p = Pool2d {
                planes: 3,
                in_h: hw,
                in_w: hw + 1,
                kernel_h: k,
                kernel_w: k,
                stride_h: s,
                stride_w: s,
                dilation_h: d,
                dilation_w: d,
                pad_top: pad,
                pad_left: pad,
                out_h: out,
                out_w: (hw + 1 + 2 * pad - d * (k - 1) - 1) / s + 1,
            };
            let input: Vec<f32> = (0..3 * hw * (hw + 1))
                .map(|i| ((i * 7919) % 101) as f32 - 50.0)
                .collect();
            let want = naive_max(&p, &input);
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; want.len()];
                max_pool::at(level, &p, &input, &mut got);
                assert_eq!(got, want, "{p:?} at {level:?}");
            }
        }
    }
}
