//! The reference 2-D convolution the convolution kernels are tested against (test builds only):
//! a direct f64 loop over the geometry of `Conv2d` and the epilogue of `ConvEpilogue`.

use super::geometry::{Conv2d, ConvEpilogue};
use crate::kernels::gemm;

/// Direct loop over every output, tap and input channel in f64 (grouped, strided, dilated,
/// padded), then the epilogue: the reference the convolution kernels are tested against.
pub(crate) fn reference_conv(
    geom: &Conv2d,
    input: &[f32],
    weights: &[f32],
    epilogue: &ConvEpilogue,
) -> Vec<f32> {
    let g = geom;
    let (gi, go) = (g.in_channels / g.group, g.out_channels / g.group);
    let mut out = vec![0.0; g.batch * g.out_channels * g.out_h * g.out_w];
    for n in 0..g.batch {
        for m in 0..g.out_channels {
            let group = m / go;
            for y in 0..g.out_h {
                for x in 0..g.out_w {
                    let mut acc = epilogue.bias.map_or(0.0, |b| b[m]) as f64;
                    for c in 0..gi {
                        for ky in 0..g.kernel_h {
                            for kx in 0..g.kernel_w {
                                let iy = (y * g.stride_h + ky * g.dilation_h) as isize
                                    - g.pad_top as isize;
                                let ix = (x * g.stride_w + kx * g.dilation_w) as isize
                                    - g.pad_left as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= g.in_h as isize
                                    || ix >= g.in_w as isize
                                {
                                    continue;
                                }
                                let iv = input[((n * g.in_channels + group * gi + c) * g.in_h
                                    + iy as usize)
                                    * g.in_w
                                    + ix as usize];
                                let wv =
                                    weights[((m * gi + c) * g.kernel_h + ky) * g.kernel_w + kx];
                                acc += iv as f64 * wv as f64;
                            }
                        }
                    }
                    let at = ((n * g.out_channels + m) * g.out_h + y) * g.out_w + x;
                    let mut v = acc as f32;
                    if let Some(r) = epilogue.residual {
                        v += r[at];
                    }
                    out[at] = gemm::activation_scalar(&epilogue.activation, v);
                }
            }
        }
    }
    out
}
