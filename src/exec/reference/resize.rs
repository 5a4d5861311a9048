//! Reference Resize (opsets 10-19) and Upsample: nearest (four rounding modes), linear and cubic
//! (`cubic_coeff_a`, `exclude_outside`) interpolation under every coordinate transformation
//! (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
//! tf_crop_and_resize with its extrapolation value), sizes or scales, `axes` and
//! `keep_aspect_ratio_policy`. Interpolation is separable, so the axes are resized one after
//! another, each a 1-D pass. Antialiased downsampling is not covered.
//!
//! GridSample (16+): each output point samples the input at a grid position (normalised to
//! [-1, 1], x first), nearest, linear or cubic over 1-3 spatial dims, with zeros, border or
//! reflection padding and either corner convention.

use super::*;

struct Settings {
    mode: String,
    transform: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f32,
}

pub(super) fn resize(node: &Node, opset: i64, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let attrs = &node.attrs;
    // An empty roi, scales or sizes input means "not given"; X itself may be empty.
    let get = |i: usize| {
        inputs
            .get(i)
            .and_then(|t| *t)
            .filter(|t| i == 0 || !t.is_empty())
    };
    let x = get(0).ok_or("no input")?;
    let rank = x.shape.len();
    if attrs.int_or("antialias", 0) != 0 {
        return Err("antialiased Resize has no reference kernel".into());
    }
    // Upsample (7-9) and Resize 10 take scales only; Resize 11+ takes roi, scales, sizes.
    let (roi, scales, sizes) = if node.op_type == "Upsample" || opset < 11 {
        let scales = match attrs.floats("scales") {
            Some(s) => Some(s.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>()),
            None => get(1).map(|t| floats(t).iter().map(|&v| f64::from(v)).collect()),
        };
        (None, scales, None)
    } else {
        (
            get(1).map(floats),
            get(2).map(|t| {
                floats(t)
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect::<Vec<f64>>()
            }),
            get(3).map(ints),
        )
    };
    let axes: Vec<usize> = match attrs.ints("axes") {
        Some(a) => a
            .iter()
            .map(|&axis| axis_of(axis, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    // Per axis: the output length and the scale the coordinates use.
    let mut out_len: Vec<usize> = x.shape.clone();
    let mut scale: Vec<f64> = vec![1.0; rank];
    match (scales, sizes) {
        (_, Some(sizes)) => {
            if sizes.len() != axes.len() {
                return Err("Resize: one size per axis".into());
            }
            let ratios: Vec<f64> = axes
                .iter()
                .zip(&sizes)
                .map(|(&a, &s)| s as f64 / x.shape[a].max(1) as f64)
                .collect();
            let policy = attrs
                .string("keep_aspect_ratio_policy")
                .unwrap_or("stretch");
            let common = match policy {
                "not_larger" => Some(ratios.iter().copied().fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(ratios.iter().copied().fold(0.0, f64::max)),
                _ => None,
            };
            for (k, &a) in axes.iter().enumerate() {
                match common {
                    Some(r) => {
                        scale[a] = r;
                        out_len[a] = (r * x.shape[a] as f64 + 0.5).floor() as usize;
                    }
                    None => {
                        scale[a] = ratios[k];
                        out_len[a] = sizes[k].max(0) as usize;
                    }
                }
            }
        }
        (Some(scales), None) => {
            if scales.len() != axes.len() {
                return Err("Resize: one scale per axis".into());
            }
            for (k, &a) in axes.iter().enumerate() {
                scale[a] = scales[k];
                out_len[a] = (scales[k] * x.shape[a] as f64).floor() as usize;
            }
        }
        (None, None) => return Err("Resize: neither scales nor sizes".into()),
    }
    let settings = Settings {
        mode: attrs.string("mode").unwrap_or("nearest").to_string(),
        transform: if opset < 11 || node.op_type == "Upsample" {
            "asymmetric".to_string()
        } else {
            attrs
                .string("coordinate_transformation_mode")
                .unwrap_or("half_pixel")
                .to_string()
        },
        // Upsample and Resize 10 round down (asymmetric + floor, as the kernel does).
        nearest: attrs
            .string("nearest_mode")
            .unwrap_or(if opset < 11 || node.op_type == "Upsample" {
                "floor"
            } else {
                "round_prefer_floor"
            })
            .to_string(),
        cubic_a: f64::from(attrs.float_or("cubic_coeff_a", -0.75)),
        exclude_outside: attrs.int_or("exclude_outside", 0) != 0,
        extrapolation: attrs.float_or("extrapolation_value", 0.0),
    };
    let mut current = (x.shape.clone(), floats(x));
    for axis in (0..rank).rev() {
        // An axis kept at its size needs no pass, unless a crop box moves it.
        if out_len[axis] == current.0[axis]
            && (scale[axis] - 1.0).abs() < f64::EPSILON
            && settings.transform != "tf_crop_and_resize"
        {
            continue;
        }
        let roi_span = roi.as_ref().map(|r| {
            let half = r.len() / 2;
            // The ROI lists starts then ends for every axis (or for `axes`).
            let k = axes.iter().position(|&a| a == axis).unwrap_or(axis);
            let pick = |i: usize| f64::from(r.get(i).copied().unwrap_or(0.0));
            if r.len() == 2 * rank {
                (pick(axis), pick(rank + axis))
            } else {
                (pick(k), pick(half + k))
            }
        });
        current = resize_axis(
            current,
            axis,
            out_len[axis],
            scale[axis],
            roi_span,
            &settings,
        )?;
    }
    // Integer images stay integers (rounded to nearest).
    let data = match x.data {
        RtData::I64(_) => RtData::I64(current.1.iter().map(|&v| v.round() as i64).collect()),
        RtData::F32(_) => RtData::F32(current.1),
    };
    Ok(RtTensor {
        shape: current.0,
        data,
    })
}

/// The source coordinate of output position `i` along an axis of `input` → `output` elements.
fn source_coordinate(
    i: usize,
    input: usize,
    output: usize,
    scale: f64,
    roi: Option<(f64, f64)>,
    transform: &str,
) -> Result<f64> {
    let x = i as f64;
    Ok(match transform {
        "half_pixel" => (x + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = output as f64 / (scale * input as f64);
            let center = input as f64 / 2.0;
            center * (1.0 - adjustment) + (x + 0.5) / scale - 0.5
        }
        "pytorch_half_pixel" => {
            if output > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        "align_corners" => {
            if output == 1 {
                0.0
            } else {
                x * (input as f64 - 1.0) / (output as f64 - 1.0)
            }
        }
        "asymmetric" => x / scale,
        "tf_crop_and_resize" => {
            let (start, end) = roi.ok_or("tf_crop_and_resize needs a roi")?;
            if output > 1 {
                start * (input as f64 - 1.0)
                    + x * (end - start) * (input as f64 - 1.0) / (output as f64 - 1.0)
            } else {
                0.5 * (start + end) * (input as f64 - 1.0)
            }
        }
        other => return Err(format!("unknown coordinate_transformation_mode `{other}`")),
    })
}

fn cubic_weights(t: f64, a: f64) -> [f64; 4] {
    let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// One axis resized: (shape, values) in, (shape, values) out.
fn resize_axis(
    (shape, values): (Vec<usize>, Vec<f32>),
    axis: usize,
    output: usize,
    scale: f64,
    roi: Option<(f64, f64)>,
    s: &Settings,
) -> Result<(Vec<usize>, Vec<f32>)> {
    let (outer, input, inner) = around(&shape, axis);
    // Per output position: the taps (input index, weight), or None for the extrapolation value.
    let mut taps: Vec<Option<Vec<(usize, f64)>>> = Vec::with_capacity(output);
    for i in 0..output {
        let x = source_coordinate(i, input, output, scale, roi, &s.transform)?;
        if s.transform == "tf_crop_and_resize" && (x < 0.0 || x > input as f64 - 1.0) {
            taps.push(None);
            continue;
        }
        let last = input.saturating_sub(1) as i64;
        let clamp = |k: i64| k.clamp(0, last) as usize;
        let position: Vec<(usize, f64)> = match s.mode.as_str() {
            "nearest" => {
                let k = match s.nearest.as_str() {
                    "round_prefer_ceil" => (x + 0.5).floor(),
                    "floor" => x.floor(),
                    "ceil" => x.ceil(),
                    // round_prefer_floor: halves go down.
                    _ => {
                        if x.fract() == 0.5 {
                            x.floor()
                        } else {
                            x.round()
                        }
                    }
                };
                vec![(clamp(k as i64), 1.0)]
            }
            "linear" => {
                let base = x.floor();
                let t = x - base;
                vec![(clamp(base as i64), 1.0 - t), (clamp(base as i64 + 1), t)]
            }
            "cubic" => {
                let base = x.floor();
                let weights = cubic_weights(x - base, s.cubic_a);
                let mut list: Vec<(i64, f64)> = (0..4)
                    .map(|k| (base as i64 - 1 + k as i64, weights[k]))
                    .collect();
                if s.exclude_outside {
                    list.retain(|&(k, _)| (0..=last).contains(&k));
                    let total: f64 = list.iter().map(|&(_, w)| w).sum();
                    if total != 0.0 {
                        for tap in &mut list {
                            tap.1 /= total;
                        }
                    }
                }
                list.into_iter().map(|(k, w)| (clamp(k), w)).collect()
            }
            other => return Err(format!("unknown Resize mode `{other}`")),
        };
        taps.push(Some(position));
    }
    let mut out = vec![0.0f32; outer * output * inner];
    for o in 0..outer {
        for (i, tap) in taps.iter().enumerate() {
            for n in 0..inner {
                out[(o * output + i) * inner + n] = match tap {
                    None => s.extrapolation,
                    Some(list) => list
                        .iter()
                        .map(|&(k, w)| w * f64::from(values[(o * input + k) * inner + n]))
                        .sum::<f64>() as f32,
                };
            }
        }
    }
    let mut out_shape = shape;
    out_shape[axis] = output;
    Ok((out_shape, out))
}

/// The reflection of `x` into [low, high] (repeatedly, by the nearer border).
fn reflect(x: f64, low: f64, high: f64) -> f64 {
    let range = high - low;
    if range <= 0.0 {
        return low;
    }
    if x < low {
        let d = low - x;
        let (n, r) = ((d / range).floor(), d % range);
        if n as i64 % 2 == 0 {
            low + r
        } else {
            high - r
        }
    } else if x > high {
        let d = x - high;
        let (n, r) = ((d / range).floor(), d % range);
        if n as i64 % 2 == 0 {
            high - r
        } else {
            low + r
        }
    } else {
        x
    }
}

pub(super) fn grid_sample(node: &Node, x: &RtTensor, grid: &RtTensor) -> Result<RtTensor> {
    let attrs = &node.attrs;
    let rank = x.shape.len();
    if rank < 3 || grid.shape.len() != rank || grid.shape[rank - 1] != rank - 2 {
        return Err("GridSample: X [N, C, spatial...] and grid [N, out spatial..., dims]".into());
    }
    let dims = &x.shape[2..];
    let spatial = dims.len();
    let (n, c) = (x.shape[0], x.shape[1]);
    let out_spatial = &grid.shape[1..rank - 1];
    let out_count: usize = out_spatial.iter().product();
    let mode = match attrs.string("mode").unwrap_or("linear") {
        "bilinear" | "linear" => "linear",
        "bicubic" | "cubic" => "cubic",
        "nearest" => "nearest",
        other => return Err(format!("unknown GridSample mode `{other}`")),
    };
    let padding = attrs.string("padding_mode").unwrap_or("zeros");
    let align = attrs.int_or("align_corners", 0) != 0;
    let values = floats(x);
    let grid_values = floats(grid);
    let plane: usize = dims.iter().product();
    let plane_strides = strides(dims);
    let mut out = vec![0.0f32; n * c * out_count];
    for b in 0..n {
        for o in 0..out_count {
            // Per dim, the sampled taps: (index or None for a zero pad, weight).
            let mut taps: Vec<Vec<(Option<usize>, f64)>> = Vec::with_capacity(spatial);
            for d in 0..spatial {
                // The grid lists x (the last dim) first.
                let normalised =
                    f64::from(grid_values[(b * out_count + o) * spatial + (spatial - 1 - d)]);
                let length = dims[d] as f64;
                let (low, high) = if align {
                    (0.0, length - 1.0)
                } else {
                    (-0.5, length - 0.5)
                };
                let mut position = if align {
                    (normalised + 1.0) / 2.0 * (length - 1.0)
                } else {
                    ((normalised + 1.0) * length - 1.0) / 2.0
                };
                if mode == "nearest" {
                    position = position.round_ties_even();
                }
                if position < low || position > high {
                    position = match padding {
                        "border" => position.clamp(0.0, length - 1.0),
                        "reflection" => reflect(position, low, high),
                        _ => position,
                    };
                }
                let fetch = |i: i64| -> Option<usize> {
                    let last = dims[d] as i64 - 1;
                    match padding {
                        "border" => Some(i.clamp(0, last) as usize),
                        "reflection" => {
                            Some((reflect(i as f64, low, high) as i64).clamp(0, last) as usize)
                        }
                        _ => (0..=last).contains(&i).then_some(i as usize),
                    }
                };
                let base = position.floor();
                let t = position - base;
                let base = base as i64;
                taps.push(match mode {
                    "nearest" => vec![(fetch(position as i64), 1.0)],
                    "linear" => vec![(fetch(base), 1.0 - t), (fetch(base + 1), t)],
                    _ => {
                        let w = cubic_weights(t, -0.75);
                        (0..4).map(|k| (fetch(base - 1 + k as i64), w[k])).collect()
                    }
                });
            }
            // The tensor product of the per-dim taps.
            let combos: usize = taps.iter().map(Vec::len).product();
            for ch in 0..c {
                let source = &values[(b * c + ch) * plane..][..plane];
                let mut sum = 0.0f64;
                for combo in 0..combos {
                    let (mut rest, mut weight, mut at) = (combo, 1.0, Some(0usize));
                    for d in (0..spatial).rev() {
                        let (index, w) = taps[d][rest % taps[d].len()];
                        rest /= taps[d].len();
                        weight *= w;
                        at = match (at, index) {
                            (Some(a), Some(i)) => Some(a + i * plane_strides[d]),
                            _ => None,
                        };
                    }
                    if let Some(at) = at {
                        sum += weight * f64::from(source[at]);
                    }
                }
                out[(b * c + ch) * out_count + o] = sum as f32;
            }
        }
    }
    let mut shape = vec![n, c];
    shape.extend(out_spatial);
    Ok(RtTensor {
        shape,
        data: RtData::F32(out),
    })
}
