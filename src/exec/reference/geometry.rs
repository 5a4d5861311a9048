//! Image-geometry, window, bit-reinterpretation and determinant ops: CenterCropPad, Col2Im,
//! AffineGrid, Det, HannWindow/HammingWindow/BlackmanWindow and BitCast (shapes and costs in
//! `analysis/ops/geometry.rs`, `signal.rs` and `shape.rs`), DeformConv, and Conv where the
//! kernels do not take it (3-D and higher, weights computed at run time).

use super::{floats, ints, Result};
use crate::analysis::graph::Node;
use crate::analysis::ops::geometry::{col2im_axes, crop_pad_axes};
use crate::analysis::ops::signal::window;
use crate::analysis::tensor::{f16_to_f32, DType};
use crate::exec::{RtData, RtTensor};
use crate::kernels::movement::strides;

/// CenterCropPad: each listed axis cropped or zero-padded to its target length, centred.
pub(super) fn center_crop_pad(node: &Node, x: &RtTensor, target: &RtTensor) -> Result<RtTensor> {
    let rank = x.shape.len();
    let axes = crop_pad_axes(&node.attrs, rank)?;
    let lengths = ints(target);
    if lengths.len() != axes.len() || lengths.iter().any(|&l| l < 0) {
        return Err(format!("target {lengths:?} for axes {axes:?}"));
    }
    let mut out_shape = x.shape.clone();
    // Per axis: the output index where the input starts (pad) or the input index where the
    // output starts (crop), as a signed offset input = output + offset.
    let mut offset = vec![0i64; rank];
    for (&axis, &length) in axes.iter().zip(&lengths) {
        let (input, output) = (x.shape[axis] as i64, length);
        offset[axis] = if input >= output {
            (input - output) / 2
        } else {
            -((output - input) / 2)
        };
        out_shape[axis] = length as usize;
    }
    let in_strides = strides(&x.shape);
    let count: usize = out_shape.iter().product();
    let out_strides = strides(&out_shape);
    let sources: Vec<Option<usize>> = (0..count)
        .map(|linear| {
            let mut source = 0usize;
            for d in 0..rank {
                let coord = (linear / out_strides[d] % out_shape[d]) as i64 + offset[d];
                if coord < 0 || coord >= x.shape[d] as i64 {
                    return None;
                }
                source += coord as usize * in_strides[d];
            }
            Some(source)
        })
        .collect();
    let data = match &x.data {
        RtData::F32(v) => RtData::F32(sources.iter().map(|s| s.map_or(0.0, |i| v[i])).collect()),
        RtData::I64(v) => RtData::I64(sources.iter().map(|s| s.map_or(0, |i| v[i])).collect()),
    };
    Ok(RtTensor {
        shape: out_shape,
        data,
    })
}

/// Col2Im: every column of every block added back at its image position.
pub(super) fn col2im(
    node: &Node,
    x: &RtTensor,
    image: &RtTensor,
    block: &RtTensor,
) -> Result<RtTensor> {
    let (image, block) = (ints(image), ints(block));
    let axes = col2im_axes(&node.attrs, &image, &block)?;
    let [batch, rows, columns] = x.shape[..] else {
        return Err(format!("input {:?} is not 3-D", x.shape));
    };
    let block_size: usize = block.iter().product::<i64>() as usize;
    let positions: usize = axes.iter().map(|a| a.positions as usize).product();
    if rows % block_size != 0 || columns != positions {
        return Err(format!(
            "input {:?} for blocks {block:?} at {positions} positions",
            x.shape
        ));
    }
    let channels = rows / block_size;
    let image_size: usize = image.iter().product::<i64>() as usize;
    let block_dims: Vec<usize> = block.iter().map(|&b| b as usize).collect();
    let position_dims: Vec<usize> = axes.iter().map(|a| a.positions as usize).collect();
    let image_dims: Vec<usize> = image.iter().map(|&d| d as usize).collect();
    let (block_strides, position_strides, image_strides) = (
        strides(&block_dims),
        strides(&position_dims),
        strides(&image_dims),
    );
    let values = floats(x);
    let mut out = vec![0f64; batch * channels * image_size];
    for n in 0..batch {
        for c in 0..channels {
            for b in 0..block_size {
                let row = (n * rows + c * block_size + b) * columns;
                'column: for l in 0..columns {
                    let mut target = 0usize;
                    for (d, axis) in axes.iter().enumerate() {
                        let within = (b / block_strides[d] % block_dims[d]) as i64;
                        let at = (l / position_strides[d] % position_dims[d]) as i64;
                        let coord = at * axis.stride + within * axis.dilation - axis.pad_before;
                        if coord < 0 || coord >= axis.image {
                            continue 'column;
                        }
                        target += coord as usize * image_strides[d];
                    }
                    out[(n * channels + c) * image_size + target] += values[row + l] as f64;
                }
            }
        }
    }
    let mut shape = vec![batch, channels];
    shape.extend(&image_dims);
    Ok(RtTensor {
        shape,
        data: RtData::F32(out.iter().map(|&v| v as f32).collect()),
    })
}

/// The normalised positions of `count` pixels along one axis, from −1 to 1.
fn positions(count: usize, align_corners: bool) -> Vec<f64> {
    (0..count)
        .map(|i| {
            if align_corners {
                if count == 1 {
                    -1.0
                } else {
                    -1.0 + 2.0 * i as f64 / (count - 1) as f64
                }
            } else {
                (2 * i + 1) as f64 / count as f64 - 1.0
            }
        })
        .collect()
}

/// AffineGrid: theta applied to the homogeneous position (x, y[, z], 1) of every output pixel,
/// x running along the last (width) axis.
pub(super) fn affine_grid(node: &Node, theta: &RtTensor, size: &RtTensor) -> Result<RtTensor> {
    let size: Vec<usize> = ints(size)
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("size value {d}")))
        .collect::<Result<_>>()?;
    let spatial = size.len().checked_sub(2).filter(|&s| s == 2 || s == 3);
    let spatial = spatial.ok_or_else(|| format!("size {size:?} is not 4 or 5 values"))?;
    if theta.shape != [size[0], spatial, spatial + 1] {
        return Err(format!("theta {:?} for size {size:?}", theta.shape));
    }
    let align = node.attrs.int_or("align_corners", 0) != 0;
    // Axes in output order (D, H, W); coordinates in (x, y, z) order = reversed.
    let extents = &size[2..];
    let grids: Vec<Vec<f64>> = extents.iter().map(|&e| positions(e, align)).collect();
    let points: usize = extents.iter().product();
    let theta = floats(theta);
    let mut out = Vec::with_capacity(size[0] * points * spatial);
    let point_strides = strides(extents);
    for n in 0..size[0] {
        let matrix = &theta[n * spatial * (spatial + 1)..][..spatial * (spatial + 1)];
        for p in 0..points {
            // Homogeneous position: x from the last axis, y the one before, ...
            let mut position = vec![1.0f64; spatial + 1];
            for (c, slot) in position.iter_mut().take(spatial).enumerate() {
                let axis = spatial - 1 - c;
                *slot = grids[axis][p / point_strides[axis] % extents[axis]];
            }
            for r in 0..spatial {
                let row = &matrix[r * (spatial + 1)..][..spatial + 1];
                let value: f64 = row.iter().zip(&position).map(|(&t, &x)| t as f64 * x).sum();
                out.push(value as f32);
            }
        }
    }
    let mut shape = vec![size[0]];
    shape.extend(extents);
    shape.push(spatial);
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

/// Det: LU factorisation with partial pivoting, in f64, per matrix.
pub(super) fn det(x: &RtTensor) -> Result<RtTensor> {
    let rank = x.shape.len();
    if rank < 2 || x.shape[rank - 1] != x.shape[rank - 2] {
        return Err(format!("{:?} is not a batch of square matrices", x.shape));
    }
    let m = x.shape[rank - 1];
    let values = floats(x);
    let matrices: usize = x.shape[..rank - 2].iter().product();
    let mut out = Vec::with_capacity(matrices);
    for k in 0..matrices {
        let mut a: Vec<f64> = values[k * m * m..(k + 1) * m * m]
            .iter()
            .map(|&v| v as f64)
            .collect();
        let mut determinant = 1.0f64;
        for col in 0..m {
            let pivot = (col..m)
                .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
                .unwrap_or(col);
            if a[pivot * m + col] == 0.0 {
                determinant = 0.0;
                break;
            }
            if pivot != col {
                for j in 0..m {
                    a.swap(pivot * m + j, col * m + j);
                }
                determinant = -determinant;
            }
            let diagonal = a[col * m + col];
            determinant *= diagonal;
            for row in col + 1..m {
                let factor = a[row * m + col] / diagonal;
                for j in col..m {
                    a[row * m + j] -= factor * a[col * m + j];
                }
            }
        }
        out.push(determinant as f32);
    }
    Ok(RtTensor {
        shape: x.shape[..rank - 2].to_vec(),
        data: RtData::F32(out),
    })
}

/// The value of `plane` ([height × width]) at a fractional position, bilinear between the
/// four neighbours; neighbours outside the plane count as zero (and so does a position a full
/// pixel or more outside it).
fn bilinear(plane: &[f32], height: usize, width: usize, y: f64, x: f64) -> f64 {
    if y <= -1.0 || y >= height as f64 || x <= -1.0 || x >= width as f64 {
        return 0.0;
    }
    let (y0, x0) = (y.floor(), x.floor());
    let (fy, fx) = (y - y0, x - x0);
    let at = |r: f64, c: f64| -> f64 {
        if r < 0.0 || c < 0.0 || r >= height as f64 || c >= width as f64 {
            0.0
        } else {
            plane[r as usize * width + c as usize] as f64
        }
    };
    (1.0 - fy) * (1.0 - fx) * at(y0, x0)
        + (1.0 - fy) * fx * at(y0, x0 + 1.0)
        + fy * (1.0 - fx) * at(y0 + 1.0, x0)
        + fy * fx * at(y0 + 1.0, x0 + 1.0)
}

/// X and W of a windowed op (Conv, ConvTranspose) and their rank, checked to agree and to
/// have a spatial axis.
fn window_operands<'a>(
    op: &str,
    inputs: &'a [Option<&'a RtTensor>],
) -> Result<(&'a RtTensor, &'a RtTensor, usize)> {
    let input = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = input(0).ok_or("X is missing")?;
    let w = input(1).ok_or("W is missing")?;
    let rank = x.shape.len();
    if rank < 3 || w.shape.len() != rank {
        return Err(format!("{op}: X {:?} and W {:?}", x.shape, w.shape));
    }
    Ok((x, w, rank))
}

fn dims_u64(dims: &[usize]) -> Vec<u64> {
    dims.iter().map(|&d| d as u64).collect()
}

/// Conv of any spatial rank, direct loops in f64 over the window `ConvConfig` resolves (pads,
/// `auto_pad`, strides, dilations, groups): what the executor runs for the convolutions its
/// kernels do not take (3-D video and volume models, weights that are not constants).
pub(super) fn conv_nd(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    use crate::analysis::ops::spatial::ConvConfig;
    let (x, w, rank) = window_operands("Conv", inputs)?;
    let config = ConvConfig::parse(&node.attrs)?;
    let window = config.window(&dims_u64(&x.shape[2..]), &dims_u64(&w.shape[2..]))?;
    let (n, c, m, cg) = (x.shape[0], x.shape[1], w.shape[0], w.shape[1]);
    let group = config.group.max(1) as usize;
    if cg * group != c || m % group != 0 {
        return Err(format!(
            "Conv: X {:?} and W {:?} with {group} groups do not match",
            x.shape, w.shape
        ));
    }
    let spatial = rank - 2;
    let in_dims = &x.shape[2..];
    let out_dims: Vec<usize> = window.output.iter().map(|&d| d as usize).collect();
    let kernel = &w.shape[2..];
    let (in_plane, out_plane): (usize, usize) =
        (in_dims.iter().product(), out_dims.iter().product());
    let taps: usize = kernel.iter().product();
    // Per tap, its offset along each spatial axis (dilated).
    let tap_offsets: Vec<Vec<i64>> = (0..taps)
        .map(|t| {
            let mut rest = t;
            let mut coords = vec![0i64; spatial];
            for axis in (0..spatial).rev() {
                coords[axis] = (rest % kernel[axis]) as i64 * window.dilations[axis] as i64;
                rest /= kernel[axis];
            }
            coords
        })
        .collect();
    let (xs, ws) = (floats(x), floats(w));
    let bias = inputs.get(2).and_then(|t| *t).map(floats);
    let per_group = m / group;
    let mut out = vec![0f32; n * m * out_plane];
    let mut position = vec![0i64; spatial];
    for b in 0..n {
        for o in 0..m {
            let g = o / per_group;
            for p in 0..out_plane {
                // The output's position, then its window's origin in the input.
                let mut rest = p;
                for axis in (0..spatial).rev() {
                    let coord = (rest % out_dims[axis]) as i64;
                    rest /= out_dims[axis];
                    position[axis] = coord * window.strides[axis] as i64 - window.pads[axis] as i64;
                }
                let mut acc = bias.as_ref().map_or(0.0, |v| f64::from(v[o]));
                for (t, offsets) in tap_offsets.iter().enumerate() {
                    let Some(at) = flat_index_inside(&position, offsets, in_dims) else {
                        continue;
                    };
                    for ci in 0..cg {
                        let value = xs[(b * c + g * cg + ci) * in_plane + at];
                        let weight = ws[(o * cg + ci) * taps + t];
                        acc += f64::from(value) * f64::from(weight);
                    }
                }
                out[(b * m + o) * out_plane + p] = acc as f32;
            }
        }
    }
    let mut shape = vec![n, m];
    shape.extend(out_dims);
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}

/// DeformConv (2-D): every tap of the convolution reads the input at its regular position plus
/// a learned offset (bilinear), scaled by the mask when one is given; offsets [N, G·K·2, oH,
/// oW] hold (dy, dx) per offset group G and tap K, the mask [N, G·K, oH, oW].
pub(super) fn deform_conv(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let input = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = input(0).ok_or("X is missing")?;
    let w = input(1).ok_or("W is missing")?;
    let offset = input(2).ok_or("offset is missing")?;
    let [n, c, h, wd] =
        <[usize; 4]>::try_from(x.shape.as_slice()).map_err(|_| "only 2-D DeformConv runs")?;
    let [oc, cg, kh, kw] =
        <[usize; 4]>::try_from(w.shape.as_slice()).map_err(|_| "W is not 4-D")?;
    let attrs = &node.attrs;
    let pair = |name: &str, default: i64| -> [i64; 2] {
        match attrs.ints(name) {
            Some([a, b, ..]) => [*a, *b],
            _ => [default, default],
        }
    };
    let (stride, dilation) = (pair("strides", 1), pair("dilations", 1));
    let pads = attrs.ints("pads").map_or(vec![0; 4], <[i64]>::to_vec);
    let group = attrs.int_or("group", 1).max(1) as usize;
    let offset_groups = attrs.int_or("offset_group", 1).max(1) as usize;
    let [_, oc_offsets, oh, ow] =
        <[usize; 4]>::try_from(offset.shape.as_slice()).map_err(|_| "offset is not 4-D")?;
    let taps = kh * kw;
    if cg * group != c
        || oc % group != 0
        || c % offset_groups != 0
        || oc_offsets != offset_groups * taps * 2
    {
        return Err(format!(
            "X {:?}, W {:?}, offset {:?} with {group} groups and {offset_groups} offset groups",
            x.shape, w.shape, offset.shape
        ));
    }
    let (xs, ws, offsets) = (floats(x), floats(w), floats(offset));
    let mask = input(4).map(floats);
    let bias = input(3).map(floats);
    let plane = oh * ow;
    let mut out = vec![0f32; n * oc * plane];
    // Per image, input channel, tap and output pixel: the sampled value (the im2col of the
    // deformed grid), then the usual weighted sum.
    let mut columns = vec![0f64; c * taps * plane];
    for b in 0..n {
        for ch in 0..c {
            let g = ch / (c / offset_groups);
            let image = &xs[(b * c + ch) * h * wd..][..h * wd];
            for t in 0..taps {
                let (ky, kx) = ((t / kw) as i64, (t % kw) as i64);
                let dy = &offsets[((b * oc_offsets) + g * taps * 2 + 2 * t) * plane..][..plane];
                let dx = &offsets[((b * oc_offsets) + g * taps * 2 + 2 * t + 1) * plane..][..plane];
                for p in 0..plane {
                    let (py, px) = ((p / ow) as i64, (p % ow) as i64);
                    let y = (py * stride[0] - pads[0] + ky * dilation[0]) as f64 + dy[p] as f64;
                    let xq = (px * stride[1] - pads[1] + kx * dilation[1]) as f64 + dx[p] as f64;
                    let mut value = bilinear(image, h, wd, y, xq);
                    if let Some(m) = &mask {
                        value *= m[((b * offset_groups + g) * taps + t) * plane + p] as f64;
                    }
                    columns[(ch * taps + t) * plane + p] = value;
                }
            }
        }
        let per_group = oc / group;
        for o in 0..oc {
            let g = o / per_group;
            let out_plane = &mut out[(b * oc + o) * plane..][..plane];
            let mut acc = vec![bias.as_ref().map_or(0.0, |v| v[o] as f64); plane];
            for ci in 0..cg {
                let ch = g * cg + ci;
                for t in 0..taps {
                    let weight = ws[(o * cg + ci) * taps + t] as f64;
                    let column = &columns[(ch * taps + t) * plane..][..plane];
                    for (a, &v) in acc.iter_mut().zip(column) {
                        *a += weight * v;
                    }
                }
            }
            for (dst, a) in out_plane.iter_mut().zip(acc) {
                *dst = a as f32;
            }
        }
    }
    Ok(RtTensor {
        shape: vec![n, oc, oh, ow],
        data: RtData::F32(out),
    })
}

/// A window op's points for a run-time size.
pub(super) fn window_op(node: &Node, size: &RtTensor) -> Result<RtTensor> {
    let size = *ints(size).first().ok_or("empty size")?;
    let size = usize::try_from(size).map_err(|_| format!("a window of {size} points"))?;
    let periodic = node.attrs.int_or("periodic", 1) != 0;
    let values = window(&node.op_type, size, periodic).ok_or("not a window op")?;
    Ok(RtTensor {
        shape: vec![size],
        data: RtData::F32(values.iter().map(|&v| v as f32).collect()),
    })
}

/// The bit pattern of one element of `dtype`, as the tool holds it (floats as f32 values,
/// integers as i64 values).
fn bits_of(dtype: DType, float: f32, int: i64) -> Result<u64> {
    Ok(match dtype {
        DType::F32 => float.to_bits() as u64,
        DType::F64 => (float as f64).to_bits(),
        DType::F16 => crate::exec::lower::quant::f32_to_f16(float) as u64,
        DType::Bf16 => (float.to_bits() >> 16) as u64,
        DType::Bool | DType::U8 | DType::I8 => int as u8 as u64,
        DType::U16 | DType::I16 => int as u16 as u64,
        DType::U32 | DType::I32 => int as u32 as u64,
        DType::U64 | DType::I64 => int as u64,
        other => return Err(format!("BitCast from {other:?} is not supported")),
    })
}

/// BitCast: the same bits read as `to` (little endian, same width).
pub(super) fn bit_cast(x: &RtTensor, from: DType, to: DType) -> Result<RtTensor> {
    if from.size_bytes() != to.size_bytes() {
        return Err(format!("BitCast from {from:?} to {to:?} changes the width"));
    }
    let bits: Vec<u64> = match &x.data {
        RtData::F32(v) => v
            .iter()
            .map(|&f| bits_of(from, f, f as i64))
            .collect::<Result<_>>()?,
        RtData::I64(v) => v
            .iter()
            .map(|&i| bits_of(from, i as f32, i))
            .collect::<Result<_>>()?,
    };
    let data = match to {
        DType::F32 => RtData::F32(bits.iter().map(|&b| f32::from_bits(b as u32)).collect()),
        DType::F64 => RtData::F32(bits.iter().map(|&b| f64::from_bits(b) as f32).collect()),
        DType::F16 => RtData::F32(bits.iter().map(|&b| f16_to_f32(b as u16)).collect()),
        DType::Bf16 => RtData::F32(
            bits.iter()
                .map(|&b| f32::from_bits((b as u32) << 16))
                .collect(),
        ),
        DType::Bool => RtData::I64(bits.iter().map(|&b| (b as u8 != 0) as i64).collect()),
        DType::U8 => RtData::I64(bits.iter().map(|&b| b as u8 as i64).collect()),
        DType::I8 => RtData::I64(bits.iter().map(|&b| b as u8 as i8 as i64).collect()),
        DType::U16 => RtData::I64(bits.iter().map(|&b| b as u16 as i64).collect()),
        DType::I16 => RtData::I64(bits.iter().map(|&b| b as u16 as i16 as i64).collect()),
        DType::U32 => RtData::I64(bits.iter().map(|&b| b as u32 as i64).collect()),
        DType::I32 => RtData::I64(bits.iter().map(|&b| b as u32 as i32 as i64).collect()),
        DType::U64 | DType::I64 => RtData::I64(bits.iter().map(|&b| b as i64).collect()),
        other => return Err(format!("BitCast to {other:?} is not supported")),
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data,
    })
}

/// The row-major flat index of `origin + offsets` within `dims`, or None outside them: a
/// window tap's place in a convolution's input, or a scatter's in a transposed one's output.
fn flat_index_inside(origin: &[i64], offsets: &[i64], dims: &[usize]) -> Option<usize> {
    let mut at = 0usize;
    for ((&start, &offset), &dim) in origin.iter().zip(offsets).zip(dims) {
        let coord = start + offset;
        if coord < 0 || coord >= dim as i64 {
            return None;
        }
        at = at * dim + coord as usize;
    }
    Some(at)
}

/// ConvTranspose of any spatial rank (the 1-D and 2-D ones with constant weights run on the
/// kernels): every input element scattered through every tap into the output,
/// `y[o, i·stride − pad + t·dilation] += x[c, i] · w[c, o, t]`, accumulated in f64. 3-D
/// decoders (volumetric segmentation) and run-time weights land here.
pub(super) fn conv_transpose_nd(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    use crate::analysis::ops::spatial::ConvTransposeConfig;
    let (x, w, _) = window_operands("ConvTranspose", inputs)?;
    let config = ConvTransposeConfig::parse(&node.attrs)?;
    let window = config.window(&dims_u64(&x.shape[2..]), &dims_u64(&w.shape[2..]))?;
    let (n, c, per_group) = (x.shape[0], x.shape[1], w.shape[1]);
    let group = config.group.max(1) as usize;
    if w.shape[0] != c || c % group != 0 {
        return Err(format!(
            "ConvTranspose: X {:?} and W {:?} with {group} groups do not match",
            x.shape, w.shape
        ));
    }
    let (m, in_group) = (per_group * group, c / group);
    let in_dims = &x.shape[2..];
    let out_dims: Vec<usize> = window.output.iter().map(|&d| d as usize).collect();
    let kernel = &w.shape[2..];
    let (in_plane, out_plane): (usize, usize) =
        (in_dims.iter().product(), out_dims.iter().product());
    let taps: usize = kernel.iter().product();
    let coords = |mut rest: usize, dims: &[usize]| {
        let mut at = vec![0i64; dims.len()];
        for axis in (0..dims.len()).rev() {
            at[axis] = (rest % dims[axis]) as i64;
            rest /= dims[axis];
        }
        at
    };
    let tap_offsets: Vec<Vec<i64>> = (0..taps)
        .map(|t| {
            let mut at = coords(t, kernel);
            for (axis, offset) in at.iter_mut().enumerate() {
                *offset *= window.dilations[axis] as i64;
            }
            at
        })
        .collect();
    let (xs, ws) = (floats(x), floats(w));
    let mut out = vec![0f64; n * m * out_plane];
    for p in 0..in_plane {
        // Where this input position's scatter starts in the output.
        let mut origin = coords(p, in_dims);
        for (axis, start) in origin.iter_mut().enumerate() {
            *start = *start * window.strides[axis] as i64 - window.pads[axis] as i64;
        }
        for (t, offsets) in tap_offsets.iter().enumerate() {
            let Some(at) = flat_index_inside(&origin, offsets, &out_dims) else {
                continue;
            };
            for b in 0..n {
                for ci in 0..c {
                    let value = f64::from(xs[(b * c + ci) * in_plane + p]);
                    let g = ci / in_group;
                    for oc in 0..per_group {
                        let weight = f64::from(ws[(ci * per_group + oc) * taps + t]);
                        out[(b * m + g * per_group + oc) * out_plane + at] += value * weight;
                    }
                }
            }
        }
    }
    if let Some(bias) = inputs.get(2).and_then(|t| *t).map(floats) {
        for (k, v) in out.iter_mut().enumerate() {
            *v += f64::from(bias[k / out_plane % m]);
        }
    }
    let mut shape = vec![n, m];
    shape.extend(&out_dims);
    Ok(RtTensor {
        shape,
        data: RtData::F32(out.into_iter().map(|v| v as f32).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;
    use crate::exec::reference::lend;
    use crate::exec::reference::test_node as node;

    fn f(shape: &[usize], values: Vec<f32>) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::F32(values),
        }
    }

    fn i(values: &[i64]) -> RtTensor {
        RtTensor {
            shape: vec![values.len()],
            data: RtData::I64(values.to_vec()),
        }
    }

    #[test]
    fn center_crop_pad_crops_left_and_pads_right() {
        let x = f(&[5], vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        // Crop 5 → 2: start ⌊3/2⌋ = 1.
        let out = center_crop_pad(&node("CenterCropPad", &[]), &x, &i(&[2])).unwrap();
        assert_eq!(out.to_f32(), [2.0, 3.0]);
        // Pad 5 → 8: 1 before, 2 after.
        let out = center_crop_pad(&node("CenterCropPad", &[]), &x, &i(&[8])).unwrap();
        assert_eq!(out.to_f32(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]);
    }

    #[test]
    fn col2im_sums_overlapping_blocks() {
        // 1-channel 1×3 image from 1×2 blocks at stride 1: 2 positions; columns [a b], [c d]
        // land at (0,1) and (1,2).
        let x = f(&[1, 2, 2], vec![1.0, 10.0, 2.0, 20.0]);
        let out = col2im(&node("Col2Im", &[]), &x, &i(&[1, 3]), &i(&[1, 2])).unwrap();
        assert_eq!(out.shape, [1, 1, 1, 3]);
        assert_eq!(out.to_f32(), [1.0, 12.0, 20.0]);
    }

    #[test]
    fn affine_grid_identity_gives_the_base_grid() {
        let theta = f(&[1, 2, 3], vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let out = affine_grid(&node("AffineGrid", &[]), &theta, &i(&[1, 1, 1, 2])).unwrap();
        assert_eq!(out.shape, [1, 1, 2, 2]);
        // Width 2 without aligned corners: x = −0.5, 0.5; height 1: y = 0.
        assert_eq!(out.to_f32(), [-0.5, 0.0, 0.5, 0.0]);
        let aligned = node("AffineGrid", &[("align_corners", Attr::Int(1))]);
        let out = affine_grid(&aligned, &theta, &i(&[1, 1, 1, 2])).unwrap();
        assert_eq!(out.to_f32(), [-1.0, -1.0, 1.0, -1.0]);
    }

    #[test]
    fn det_of_known_matrices() {
        let x = f(&[2, 2, 2], vec![1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 1.0, 0.0]);
        assert_eq!(det(&x).unwrap().to_f32(), [-2.0, -1.0]);
        let singular = f(&[2, 2], vec![1.0, 2.0, 2.0, 4.0]);
        assert_eq!(det(&singular).unwrap().to_f32(), [0.0]);
    }

    #[test]
    fn bit_cast_keeps_the_bits() {
        let x = f(&[2], vec![1.0, -2.0]);
        let out = bit_cast(&x, DType::F32, DType::I32).unwrap();
        assert_eq!(ints(&out), [0x3f80_0000, 0xc000_0000u32 as i32 as i64]);
        let back = bit_cast(&out, DType::I32, DType::F32).unwrap();
        assert_eq!(back.to_f32(), [1.0, -2.0]);
        let bytes = bit_cast(&i(&[-1, 5]), DType::I8, DType::U8).unwrap();
        assert_eq!(ints(&bytes), [255, 5]);
        assert!(bit_cast(&x, DType::F32, DType::I64).is_err());
    }

    #[test]
    fn deform_conv_with_zero_offsets_is_a_convolution() {
        // 1×1×3×3 input, a 2×2 kernel of ones, no padding: each output sums a 2×2 window.
        let x = f(&[1, 1, 3, 3], (1..=9).map(|v| v as f32).collect());
        let w = f(&[1, 1, 2, 2], vec![1.0; 4]);
        let offset = f(&[1, 8, 2, 2], vec![0.0; 32]);
        let n = node("DeformConv", &[]);
        let out =
            deform_conv(&n, &lend(&[Some(x.clone()), Some(w.clone()), Some(offset)])).unwrap();
        assert_eq!(out.to_f32(), [12.0, 16.0, 24.0, 28.0]);
        // Every tap shifted by half a pixel right: the window's values interpolate.
        let mut shifted = vec![0.0; 32];
        for t in 0..4 {
            for p in 0..4 {
                shifted[(2 * t + 1) * 4 + p] = 0.5;
            }
        }
        let out = deform_conv(
            &n,
            &lend(&[Some(x), Some(w), Some(f(&[1, 8, 2, 2], shifted))]),
        )
        .unwrap();
        // The top-left window (1, 2, 4, 5) moves to (1.5, 2.5, 4.5, 5.5): 14.
        assert!((out.to_f32()[0] - 14.0).abs() < 1e-6);
        // The top-right one reads x = 1.5 and 2.5: (2.5, 1.5, 5.5, 3.0), half of column 2 and
        // half of the zero beyond it: 12.5.
        assert!((out.to_f32()[1] - 12.5).abs() < 1e-6);
    }
}
