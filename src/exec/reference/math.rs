//! Reference kernels of the less common element-wise, index and reduction ops: inverse and
//! hyperbolic trigonometry, Celu, ThresholdedRelu, Gelu (both forms), Mod (floored and C fmod),
//! ArgMax/ArgMin (with `select_last_index`), GatherND, DepthToSpace, EyeLike, ReduceLogSum,
//! IsInf and IsNaN.

use super::*;

pub(super) fn unary(node: &Node, x: &RtTensor) -> Result<RtTensor> {
    let attrs = &node.attrs;
    let alpha = f64::from(attrs.float_or("alpha", 1.0));
    let tanh_gelu = attrs.string("approximate") == Some("tanh");
    let f: Box<dyn Fn(f64) -> f64> = match node.op_type.as_str() {
        "Acos" => Box::new(f64::acos),
        "Acosh" => Box::new(f64::acosh),
        "Asin" => Box::new(f64::asin),
        "Asinh" => Box::new(f64::asinh),
        "Atan" => Box::new(f64::atan),
        "Atanh" => Box::new(f64::atanh),
        "Cosh" => Box::new(f64::cosh),
        "Sinh" => Box::new(f64::sinh),
        "Tan" => Box::new(f64::tan),
        "Celu" => Box::new(move |v| v.max(0.0) + (alpha * ((v / alpha).exp() - 1.0)).min(0.0)),
        "ThresholdedRelu" => Box::new(move |v| if v > alpha { v } else { 0.0 }),
        "Shrink" => {
            let bias = f64::from(attrs.float_or("bias", 0.0));
            let lambd = f64::from(attrs.float_or("lambd", 0.5));
            Box::new(move |v| {
                if v < -lambd {
                    v + bias
                } else if v > lambd {
                    v - bias
                } else {
                    0.0
                }
            })
        }
        "Swish" => Box::new(move |v| v / (1.0 + (-alpha * v).exp())),
        "Gelu" if tanh_gelu => Box::new(|v| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
        }),
        "Gelu" => Box::new(|v| 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2))),
        other => return Err(format!("{other} is not a reference unary op")),
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(floats(x).iter().map(|&v| f(f64::from(v)) as f32).collect()),
    })
}

/// erf to double precision: its Maclaurin series below 2.5, the continued fraction of erfc above.
pub(super) fn erf(x: f64) -> f64 {
    let a = x.abs();
    let value = if a < 2.5 {
        let (mut term, mut sum, square) = (a, a, a * a);
        for n in 1..80 {
            term *= -square / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut fraction = a;
        for n in (1..60).rev() {
            fraction = a + (n as f64 / 2.0) / fraction;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / fraction
    };
    value.copysign(x)
}

/// Mod: integers floored (the result takes the divisor's sign) unless `fmod`; floats C fmod
/// (the dividend's sign) with `fmod`, floored without.
pub(super) fn modulo(a: &RtTensor, b: &RtTensor, fmod: bool) -> Result<RtTensor> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let out_strides = strides(&shape);
    let count: usize = shape.iter().product();
    let at = |n: usize, t: &RtTensor| broadcast_index(n, &shape, &out_strides, &t.shape);
    let data = match (&a.data, &b.data) {
        (RtData::I64(x), RtData::I64(y)) => RtData::I64(
            (0..count)
                .map(|n| {
                    let (p, q) = (x[at(n, a)], y[at(n, b)]);
                    if q == 0 {
                        return 0;
                    }
                    let r = p.wrapping_rem(q);
                    if !fmod && r != 0 && (r < 0) != (q < 0) {
                        r + q
                    } else {
                        r
                    }
                })
                .collect(),
        ),
        _ => {
            let (x, y) = (floats(a), floats(b));
            RtData::F32(
                (0..count)
                    .map(|n| {
                        let (p, q) = (x[at(n, a)], y[at(n, b)]);
                        let r = p % q;
                        if !fmod && r != 0.0 && (r < 0.0) != (q < 0.0) {
                            r + q
                        } else {
                            r
                        }
                    })
                    .collect(),
            )
        }
    };
    Ok(RtTensor { shape, data })
}

pub(super) fn arg_extreme(node: &Node, x: &RtTensor) -> Result<RtTensor> {
    let attrs = &node.attrs;
    let axis = axis_of(attrs.int_or("axis", 0), x.shape.len())?;
    let keepdims = attrs.int_or("keepdims", 1) != 0;
    let last = attrs.int_or("select_last_index", 0) != 0;
    let smallest = node.op_type == "ArgMin";
    let (outer, len, inner) = around(&x.shape, axis);
    let keys: Vec<f64> = match &x.data {
        RtData::F32(v) => v.iter().map(|&e| f64::from(e)).collect(),
        RtData::I64(v) => v.iter().map(|&e| e as f64).collect(),
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0usize;
            for a in 1..len {
                let (candidate, current) = (
                    keys[(o * len + a) * inner + i],
                    keys[(o * len + best) * inner + i],
                );
                let better = if smallest {
                    candidate < current
                } else {
                    candidate > current
                };
                if better || (last && candidate == current) {
                    best = a;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    Ok(RtTensor {
        shape,
        data: RtData::I64(out),
    })
}

pub(super) fn gather_nd(data: &RtTensor, indices: &RtTensor, batch_dims: i64) -> Result<RtTensor> {
    let b = batch_dims.max(0) as usize;
    let depth = *indices.shape.last().ok_or("GatherND: scalar indices")?;
    if b + depth > data.shape.len() || b >= indices.shape.len() {
        return Err("GatherND: indices do not fit the data".into());
    }
    let batch: usize = data.shape[..b].iter().product();
    let per_batch_tuples: usize = indices.shape[b..indices.shape.len() - 1].iter().product();
    let slice: usize = data.shape[b + depth..].iter().product();
    let data_batch: usize = data.shape[b..].iter().product();
    let inner_strides = strides(&data.shape[b..b + depth]);
    let index_values = ints(indices);
    let mut sources = Vec::with_capacity(batch * per_batch_tuples * slice);
    for batch_index in 0..batch {
        for t in 0..per_batch_tuples {
            let tuple = &index_values[(batch_index * per_batch_tuples + t) * depth..][..depth];
            let mut offset = 0;
            for (d, &index) in tuple.iter().enumerate() {
                offset += index_in(index, data.shape[b + d])? * inner_strides[d];
            }
            let base = batch_index * data_batch + offset * slice;
            sources.extend(base..base + slice);
        }
    }
    let mut shape = indices.shape[..indices.shape.len() - 1].to_vec();
    shape.extend(&data.shape[b + depth..]);
    Ok(select(data, shape, &sources))
}

pub(super) fn depth_to_space(x: &RtTensor, block: i64, mode: &str) -> Result<RtTensor> {
    let [n, c, h, w] = x.shape[..] else {
        return Err("DepthToSpace needs a 4-D input".into());
    };
    let bs = block.max(1) as usize;
    if c % (bs * bs) != 0 {
        return Err("DepthToSpace: channels not divisible by blocksize²".into());
    }
    let out_c = c / (bs * bs);
    // One transpose of the 6-D view: DCR reads the channel as (by, bx, c), CRD as (c, by, bx).
    let (view, perm): ([usize; 6], [usize; 6]) = if mode == "CRD" {
        ([n, out_c, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([n, bs, bs, out_c, h, w], [0, 3, 4, 1, 5, 2])
    };
    Ok(permuted(x, &view, &perm, vec![n, out_c, h * bs, w * bs]))
}

/// `x` viewed as `view`, transposed by `perm` (the movement kernels' tiled and interleaving
/// paths), reshaped to `shape`. DepthToSpace and SpaceToDepth are this, and as an index per
/// element they ran at 1.5-2.8x onnxruntime.
pub(super) fn permuted(
    x: &RtTensor,
    view: &[usize],
    perm: &[usize],
    shape: Vec<usize>,
) -> RtTensor {
    let data = match &x.data {
        RtData::F32(v) => {
            let mut out = vec![0f32; v.len()];
            crate::kernels::movement::transpose(v, view, perm, &mut out);
            RtData::F32(out)
        }
        RtData::I64(v) => {
            let mut out = vec![0i64; v.len()];
            crate::kernels::movement::transpose(v, view, perm, &mut out);
            RtData::I64(out)
        }
    };
    RtTensor { shape, data }
}

pub(super) fn eye_like(x: &RtTensor, k: i64, out_types: &[DType]) -> Result<RtTensor> {
    let [rows, cols] = x.shape[..] else {
        return Err("EyeLike needs a 2-D input".into());
    };
    let ones = (0..rows * cols).map(|n| ((n % cols) as i64 - (n / cols) as i64 == k) as i64);
    let float = out_types
        .first()
        .map_or(matches!(x.data, RtData::F32(_)), |t| t.is_float());
    let data = if float {
        RtData::F32(ones.map(|v| v as f32).collect())
    } else {
        RtData::I64(ones.collect())
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data,
    })
}

/// ReduceLogSum: log of the sum over `axes` (an attribute before opset 18, an input from 18;
/// none means all, or nothing with `noop_with_empty_axes`).
pub(super) fn reduce_log_sum(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
) -> Result<RtTensor> {
    let x = inputs.first().and_then(|t| *t).ok_or("no input")?;
    let rank = x.shape.len();
    let attrs = &node.attrs;
    let given: Option<Vec<i64>> = if opset >= 18 {
        inputs.get(1).and_then(|t| *t).map(ints)
    } else {
        attrs.ints("axes").map(<[i64]>::to_vec)
    };
    let axes: Vec<usize> = match given {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&axis| axis_of(axis, rank))
            .collect::<Result<_>>()?,
        _ if attrs.int_or("noop_with_empty_axes", 0) != 0 => Vec::new(),
        _ => (0..rank).collect(),
    };
    let keepdims = attrs.int_or("keepdims", 1) != 0;
    let values = floats(x);
    let in_strides = strides(&x.shape);
    let kept_shape: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(d, &dim)| if axes.contains(&d) { 1 } else { dim })
        .collect();
    let kept_strides = strides(&kept_shape);
    let mut sums = vec![0.0f64; kept_shape.iter().product()];
    for (n, &v) in values.iter().enumerate() {
        let mut at = 0;
        for d in 0..rank {
            let coord = n / in_strides[d] % x.shape[d];
            if !axes.contains(&d) {
                at += coord * kept_strides[d];
            }
        }
        sums[at] += f64::from(v);
    }
    let shape = if keepdims {
        kept_shape
    } else {
        x.shape
            .iter()
            .enumerate()
            .filter(|(d, _)| !axes.contains(d))
            .map(|(_, &dim)| dim)
            .collect()
    };
    Ok(RtTensor {
        shape,
        data: RtData::F32(sums.iter().map(|&s| s.ln() as f32).collect()),
    })
}

/// IsInf (per sign, as `detect_positive` / `detect_negative` ask) and IsNaN: a bool per lane.
pub(super) fn classify(node: &Node, x: &RtTensor) -> RtTensor {
    let attrs = &node.attrs;
    let (positive, negative) = (
        attrs.int_or("detect_positive", 1) != 0,
        attrs.int_or("detect_negative", 1) != 0,
    );
    let marked = |v: f32| match node.op_type.as_str() {
        "IsNaN" => v.is_nan(),
        _ => v == f32::INFINITY && positive || v == f32::NEG_INFINITY && negative,
    };
    RtTensor {
        shape: x.shape.clone(),
        data: RtData::I64(floats(x).iter().map(|&v| marked(v) as i64).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::f;
    use super::*;

    /// IsNaN and IsInf mark their lanes as bools (0/1), IsInf per sign as asked: `bench` had
    /// no IsNaN kernel (a molecule graph network's NaN guard) while `run` folded it.
    #[test]
    fn is_nan_and_is_inf_mark_their_lanes() {
        use crate::analysis::graph::Attr;
        let x = f(
            &[5],
            &[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0],
        );
        let bools = [DType::Bool];
        let nan = run(
            &test_node("IsNaN", &[]),
            20,
            &[Some(&x)],
            &[Some(DType::F32)],
            &bools,
        );
        assert_eq!(ints(&nan.unwrap()[0]), [0, 1, 0, 0, 0]);
        let positive = test_node("IsInf", &[("detect_negative", Attr::Int(0))]);
        let inf = run(&positive, 20, &[Some(&x)], &[Some(DType::F32)], &bools);
        assert_eq!(ints(&inf.unwrap()[0]), [0, 0, 1, 0, 0]);
    }
}
