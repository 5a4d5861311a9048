//! Reference pooling over any number of spatial dims (MaxPool with Indices, AveragePool, LpPool).

use super::*;

/// MaxPool (with its Indices output), AveragePool and LpPool over any number of spatial dims.
pub(super) fn pool(node: &Node, x: &RtTensor) -> Result<Vec<RtTensor>> {
    use crate::analysis::ops::spatial::PoolConfig;
    if x.shape.len() < 3 {
        return Err("pooling needs [N, C, spatial...]".into());
    }
    let plain = |e: String| {
        crate::analysis::ops::as_invalid(&e)
            .unwrap_or(&e)
            .to_string()
    };
    let config = PoolConfig::parse(&node.attrs).map_err(plain)?;
    let spatial: Vec<u64> = x.shape[2..].iter().map(|&d| d as u64).collect();
    let window = config.window(&spatial).map_err(plain)?;
    let rank = spatial.len();
    let (n, c) = (x.shape[0], x.shape[1]);
    let output: Vec<usize> = window.output.iter().map(|&d| d as usize).collect();
    let in_dims: Vec<usize> = x.shape[2..].to_vec();
    let in_plane: usize = in_dims.iter().product();
    let out_plane: usize = output.iter().product();
    let kernel: Vec<usize> = window.kernel.iter().map(|&k| k as usize).collect();
    let taps: usize = kernel.iter().product();
    let op = node.op_type.as_str();
    let p = node.attrs.int_or("p", 2) as i32;
    let values = floats(x);
    let mut out = vec![0.0f32; n * c * out_plane];
    let mut indices = vec![0i64; n * c * out_plane];
    let mut coord = vec![0usize; rank];
    for nc in 0..n * c {
        for o in 0..out_plane {
            let mut rest = o;
            for d in (0..rank).rev() {
                coord[d] = rest % output[d];
                rest /= output[d];
            }
            let (mut best, mut best_at) = (f32::NEG_INFINITY, 0usize);
            let (mut sum, mut inside, mut padded) = (0.0f64, 0usize, 0usize);
            for t in 0..taps {
                let mut rest_t = t;
                let (mut at, mut place) = (0usize, 1usize);
                let mut in_input = true;
                let mut in_padding = true;
                for d in (0..rank).rev() {
                    let k = rest_t % kernel[d];
                    rest_t /= kernel[d];
                    let pos = (coord[d] * window.strides[d] as usize
                        + k * window.dilations[d] as usize) as i64
                        - window.pads[d] as i64;
                    let end_pad = window.pads[rank + d] as i64;
                    if pos < 0 || pos >= in_dims[d] as i64 {
                        in_input = false;
                    }
                    if pos >= in_dims[d] as i64 + end_pad {
                        in_padding = false;
                    }
                    // Dims are visited last first: each adds its coordinate at its place value.
                    at += place * pos.clamp(0, in_dims[d] as i64 - 1) as usize;
                    place *= in_dims[d];
                }
                if in_padding {
                    padded += 1;
                }
                if !in_input {
                    continue;
                }
                inside += 1;
                let v = values[nc * in_plane + at];
                match op {
                    "MaxPool" => {
                        if v > best {
                            best = v;
                            best_at = at;
                        }
                    }
                    "LpPool" => sum += f64::from(v.abs()).powi(p),
                    _ => sum += f64::from(v),
                }
            }
            let at = nc * out_plane + o;
            out[at] = match op {
                "MaxPool" => best,
                "LpPool" => sum.powf(1.0 / f64::from(p)) as f32,
                _ => {
                    let divisor = if config.count_include_pad {
                        padded
                    } else {
                        inside
                    };
                    (sum / divisor.max(1) as f64) as f32
                }
            };
            indices[at] = (nc * in_plane + best_at) as i64;
        }
    }
    let mut shape = vec![n, c];
    shape.extend(&output);
    let mut outputs = vec![RtTensor {
        shape: shape.clone(),
        data: RtData::F32(out),
    }];
    if op == "MaxPool" {
        if node.attrs.int_or("storage_order", 0) != 0 {
            return Err("MaxPool indices in column-major storage order have no reference".into());
        }
        outputs.push(RtTensor {
            shape,
            data: RtData::I64(indices),
        });
    }
    Ok(outputs)
}
