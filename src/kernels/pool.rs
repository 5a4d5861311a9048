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
    pub fn max_pool(p: &Pool2d, input: &[f32], output: &mut [f32]) {
        let (ih, iw, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
        for plane in 0..p.planes {
            let src = &input[plane * ih * iw..(plane + 1) * ih * iw];
            let dst = &mut output[plane * oh * ow..(plane + 1) * oh * ow];
            dst.fill(f32::NEG_INFINITY);
            for ky in 0..p.kernel_h {
                for y in 0..oh {
                    let iy = (y * p.stride_h + ky * p.dilation_h) as isize - p.pad_top as isize;
                    if iy < 0 || iy >= ih as isize {
                        continue;
                    }
                    let row = &src[iy as usize * iw..(iy as usize + 1) * iw];
                    let out_row = &mut dst[y * ow..(y + 1) * ow];
                    for kx in 0..p.kernel_w {
                        let offset = (kx * p.dilation_w) as isize - p.pad_left as isize;
                        for (x, o) in out_row.iter_mut().enumerate() {
                            let ix = (x * p.stride_w) as isize + offset;
                            if ix >= 0 && ix < iw as isize {
                                *o = o.max(row[ix as usize]);
                            }
                        }
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
