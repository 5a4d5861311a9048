//! Reference kernels: plain, unoptimised implementations over owned run-time tensors for the
//! ops no optimised kernel family covers (index scatter and gather, cumulative sums, TopK,
//! bitwise ops, losses...). They exist so that every model people bring runs and can be
//! checked, not to be fast: each is a direct transcription of the ONNX operator spec, walked
//! element by element, and the plan runs them like the generic evaluator (inputs read into
//! owned tensors, outputs stored back). An op gets an optimised kernel in its family when a
//! real model spends time in it.

use super::{RtData, RtTensor};
use crate::analysis::graph::Node;
use crate::analysis::tensor::DType;

/// The ops with a reference kernel (standard ONNX domain).
pub(crate) fn covers(op: &str) -> bool {
    matches!(
        op,
        "Attention"
            | "Clip"
            | "GatherElements"
            | "ScatterElements"
            | "Scatter"
            | "ScatterND"
            | "Trilu"
            | "CumSum"
            | "Hardmax"
            | "TopK"
            | "OneHot"
            | "BitShift"
            | "BitwiseAnd"
            | "BitwiseOr"
            | "BitwiseXor"
            | "BitwiseNot"
            | "CastLike"
            | "LpNormalization"
            | "LayerNormalization"
            | "RMSNormalization"
            | "SpaceToDepth"
            | "NegativeLogLikelihoodLoss"
            | "SoftmaxCrossEntropyLoss"
    )
}

type Result<T> = std::result::Result<T, String>;

/// Runs `node` on `inputs`; `out_types` are the element types of its outputs (integers wrap to
/// their width, bools are 0/1).
pub(crate) fn run(
    node: &Node,
    opset: i64,
    inputs: &[Option<RtTensor>],
    out_types: &[DType],
) -> Result<Vec<RtTensor>> {
    let input = |i: usize| -> Result<&RtTensor> {
        inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("input #{i} is missing"))
    };
    let attrs = &node.attrs;
    let outputs = match node.op_type.as_str() {
        "Attention" => attention(node, inputs)?,
        "Clip" => vec![clip(
            input(0)?,
            inputs.get(1).and_then(Option::as_ref),
            inputs.get(2).and_then(Option::as_ref),
            attrs.float("min"),
            attrs.float("max"),
        )],
        "GatherElements" => vec![gather_elements(
            input(0)?,
            input(1)?,
            attrs.int_or("axis", 0),
        )?],
        "ScatterElements" | "Scatter" => vec![scatter_elements(
            input(0)?,
            input(1)?,
            input(2)?,
            attrs.int_or("axis", 0),
            Reduction::parse(attrs.string("reduction"))?,
        )?],
        "ScatterND" => vec![scatter_nd(
            input(0)?,
            input(1)?,
            input(2)?,
            Reduction::parse(attrs.string("reduction"))?,
        )?],
        "Trilu" => {
            let k = match inputs.get(1).and_then(Option::as_ref) {
                Some(k) => ints(k).first().copied().unwrap_or(0),
                None => 0,
            };
            vec![trilu(input(0)?, k, attrs.int_or("upper", 1) != 0)?]
        }
        "CumSum" => {
            let axis = ints(input(1)?)
                .first()
                .copied()
                .ok_or("CumSum: empty axis")?;
            vec![cumsum(
                input(0)?,
                axis,
                attrs.int_or("exclusive", 0) != 0,
                attrs.int_or("reverse", 0) != 0,
            )?]
        }
        "Hardmax" => vec![hardmax(input(0)?, attrs.int_or("axis", -1), opset)?],
        "TopK" => {
            let k = match inputs.get(1).and_then(Option::as_ref) {
                Some(k) => ints(k).first().copied().ok_or("TopK: empty k")?,
                None => attrs.int("k").ok_or("TopK: no k")?,
            };
            top_k(
                input(0)?,
                k,
                attrs.int_or("axis", -1),
                attrs.int_or("largest", 1) != 0,
            )?
        }
        "OneHot" => vec![one_hot(
            input(0)?,
            input(1)?,
            input(2)?,
            attrs.int_or("axis", -1),
        )?],
        "BitShift" => {
            let left = match attrs.string("direction") {
                Some("LEFT") => true,
                Some("RIGHT") => false,
                other => return Err(format!("BitShift: direction {other:?}")),
            };
            let dtype = out_types.first().copied().unwrap_or(DType::U64);
            vec![broadcast_ints(input(0)?, input(1)?, |x, s| {
                bit_shift(x, s, dtype, left)
            })?]
        }
        "BitwiseAnd" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a & b)?],
        "BitwiseOr" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a | b)?],
        "BitwiseXor" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a ^ b)?],
        "BitwiseNot" => {
            let x = input(0)?;
            vec![RtTensor {
                shape: x.shape.clone(),
                data: RtData::I64(ints(x).iter().map(|&v| !v).collect()),
            }]
        }
        "CastLike" => vec![cast(
            input(0)?,
            out_types.first().copied().unwrap_or(DType::F32),
        )],
        "LayerNormalization" => layer_norm(
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(Option::as_ref),
            attrs.int_or("axis", -1),
            attrs.float_or("epsilon", 1e-5),
            false,
        )?,
        "RMSNormalization" => layer_norm(
            input(0)?,
            input(1)?,
            None,
            attrs.int_or("axis", -1),
            attrs.float_or("epsilon", 1e-5),
            true,
        )?,
        "LpNormalization" => vec![lp_normalization(
            input(0)?,
            attrs.int_or("axis", -1),
            attrs.int_or("p", 2),
        )?],
        "SpaceToDepth" => vec![space_to_depth(
            input(0)?,
            attrs.int("blocksize").unwrap_or(1),
        )?],
        "NegativeLogLikelihoodLoss" => vec![nll_loss(
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(Option::as_ref),
            attrs.int("ignore_index"),
            attrs.string("reduction").unwrap_or("mean"),
        )?],
        "SoftmaxCrossEntropyLoss" => {
            let log_prob = log_softmax_axis1(input(0)?)?;
            let loss = nll_loss(
                &log_prob,
                input(1)?,
                inputs.get(2).and_then(Option::as_ref),
                attrs.int("ignore_index"),
                attrs.string("reduction").unwrap_or("mean"),
            )?;
            vec![loss, log_prob]
        }
        other => return Err(format!("no reference kernel for {other}")),
    };
    Ok(outputs
        .into_iter()
        .zip(
            out_types
                .iter()
                .copied()
                .chain(std::iter::repeat(DType::F32)),
        )
        .map(|(t, dtype)| wrap_to(t, dtype))
        .collect())
}

fn ints(t: &RtTensor) -> Vec<i64> {
    match &t.data {
        RtData::I64(v) => v.clone(),
        RtData::F32(v) => v.iter().map(|&x| x as i64).collect(),
    }
}

fn floats(t: &RtTensor) -> Vec<f32> {
    t.to_f32()
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * shape[axis + 1];
    }
    strides
}

fn axis_of(axis: i64, rank: usize) -> Result<usize> {
    let adjusted = if axis < 0 { axis + rank as i64 } else { axis };
    if adjusted < 0 || adjusted >= rank.max(1) as i64 {
        return Err(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(adjusted as usize)
}

/// An index into a dim of size `dim`, negative counting from the end.
fn index_in(index: i64, dim: usize) -> Result<usize> {
    let adjusted = if index < 0 { index + dim as i64 } else { index };
    if adjusted < 0 || adjusted >= dim as i64 {
        return Err(format!("index {index} out of range for a dim of {dim}"));
    }
    Ok(adjusted as usize)
}

/// A tensor of the same element kind as `like`, holding `like`'s elements at `sources`.
fn select(like: &RtTensor, shape: Vec<usize>, sources: &[usize]) -> RtTensor {
    let data = match &like.data {
        RtData::F32(v) => RtData::F32(sources.iter().map(|&i| v[i]).collect()),
        RtData::I64(v) => RtData::I64(sources.iter().map(|&i| v[i]).collect()),
    };
    RtTensor { shape, data }
}

/// Clip with bounds from inputs (opset 11+) or attributes (before); a missing bound is open.
fn clip(
    x: &RtTensor,
    min: Option<&RtTensor>,
    max: Option<&RtTensor>,
    min_attr: Option<f32>,
    max_attr: Option<f32>,
) -> RtTensor {
    let data = match &x.data {
        RtData::F32(v) => {
            let lo = min.and_then(|t| t.to_f32().first().copied()).or(min_attr);
            let hi = max.and_then(|t| t.to_f32().first().copied()).or(max_attr);
            RtData::F32(
                v.iter()
                    .map(|&e| {
                        let e = lo.map_or(e, |lo| if e < lo { lo } else { e });
                        hi.map_or(e, |hi| if e > hi { hi } else { e })
                    })
                    .collect(),
            )
        }
        RtData::I64(v) => {
            let lo = min.and_then(|t| ints(t).first().copied());
            let hi = max.and_then(|t| ints(t).first().copied());
            RtData::I64(
                v.iter()
                    .map(|&e| {
                        let e = lo.map_or(e, |lo| e.max(lo));
                        hi.map_or(e, |hi| e.min(hi))
                    })
                    .collect(),
            )
        }
    };
    RtTensor {
        shape: x.shape.clone(),
        data,
    }
}

fn gather_elements(data: &RtTensor, indices: &RtTensor, axis: i64) -> Result<RtTensor> {
    let rank = data.shape.len();
    let axis = axis_of(axis, rank)?;
    if indices.shape.len() != rank {
        return Err("GatherElements: indices and data ranks differ".into());
    }
    let data_strides = strides(&data.shape);
    let index_strides = strides(&indices.shape);
    let index_values = ints(indices);
    let mut sources = Vec::with_capacity(index_values.len());
    for (linear, &index) in index_values.iter().enumerate() {
        let mut source = 0;
        for d in 0..rank {
            let coord = linear / index_strides[d] % indices.shape[d];
            let coord = if d == axis {
                index_in(index, data.shape[d])?
            } else {
                if coord >= data.shape[d] {
                    return Err("GatherElements: indices larger than data".into());
                }
                coord
            };
            source += coord * data_strides[d];
        }
        sources.push(source);
    }
    Ok(select(data, indices.shape.clone(), &sources))
}

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    fn parse(name: Option<&str>) -> Result<Reduction> {
        Ok(match name.unwrap_or("none") {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            other => return Err(format!("unknown reduction `{other}`")),
        })
    }

    fn apply_f32(self, old: f32, new: f32) -> f32 {
        match self {
            Reduction::None => new,
            Reduction::Add => old + new,
            Reduction::Mul => old * new,
            Reduction::Max => old.max(new),
            Reduction::Min => old.min(new),
        }
    }

    fn apply_i64(self, old: i64, new: i64) -> i64 {
        match self {
            Reduction::None => new,
            Reduction::Add => old.wrapping_add(new),
            Reduction::Mul => old.wrapping_mul(new),
            Reduction::Max => old.max(new),
            Reduction::Min => old.min(new),
        }
    }
}

/// Writes `updates` element `u` into `out` at `targets[u]`, combined by `reduction`.
fn scatter_into(
    data: &RtTensor,
    updates: &RtTensor,
    targets: &[usize],
    reduction: Reduction,
) -> RtTensor {
    let data_out = match (&data.data, &updates.data) {
        (RtData::F32(d), _) => {
            let mut out = d.clone();
            for (&target, value) in targets.iter().zip(updates.to_f32()) {
                out[target] = reduction.apply_f32(out[target], value);
            }
            RtData::F32(out)
        }
        (RtData::I64(d), _) => {
            let mut out = d.clone();
            for (&target, value) in targets.iter().zip(ints(updates)) {
                out[target] = reduction.apply_i64(out[target], value);
            }
            RtData::I64(out)
        }
    };
    RtTensor {
        shape: data.shape.clone(),
        data: data_out,
    }
}

fn scatter_elements(
    data: &RtTensor,
    indices: &RtTensor,
    updates: &RtTensor,
    axis: i64,
    reduction: Reduction,
) -> Result<RtTensor> {
    let rank = data.shape.len();
    let axis = axis_of(axis, rank)?;
    if indices.shape != updates.shape || indices.shape.len() != rank {
        return Err(
            "ScatterElements: indices and updates must share data's rank and a shape".into(),
        );
    }
    let data_strides = strides(&data.shape);
    let index_strides = strides(&indices.shape);
    let mut targets = Vec::new();
    for (linear, &index) in ints(indices).iter().enumerate() {
        let mut target = 0;
        for d in 0..rank {
            let coord = linear / index_strides[d] % indices.shape[d];
            let coord = if d == axis {
                index_in(index, data.shape[d])?
            } else {
                coord
            };
            if coord >= data.shape[d] {
                return Err("ScatterElements: indices larger than data".into());
            }
            target += coord * data_strides[d];
        }
        targets.push(target);
    }
    Ok(scatter_into(data, updates, &targets, reduction))
}

fn scatter_nd(
    data: &RtTensor,
    indices: &RtTensor,
    updates: &RtTensor,
    reduction: Reduction,
) -> Result<RtTensor> {
    let depth = *indices.shape.last().ok_or("ScatterND: scalar indices")?;
    if depth > data.shape.len() {
        return Err("ScatterND: index tuples longer than data's rank".into());
    }
    let data_strides = strides(&data.shape);
    let slice: usize = data.shape[depth..].iter().product();
    let tuples = ints(indices);
    let mut targets = Vec::new();
    for tuple in tuples
        .chunks(depth.max(1))
        .take(indices.shape[..indices.shape.len() - 1].iter().product())
    {
        let mut base = 0;
        for (d, &index) in tuple.iter().enumerate().take(depth) {
            base += index_in(index, data.shape[d])? * data_strides[d];
        }
        targets.extend(base..base + slice);
    }
    if targets.len() != updates.len() {
        return Err("ScatterND: updates do not match the indexed slices".into());
    }
    Ok(scatter_into(data, updates, &targets, reduction))
}

fn trilu(x: &RtTensor, k: i64, upper: bool) -> Result<RtTensor> {
    let rank = x.shape.len();
    if rank < 2 {
        return Err("Trilu needs rank 2 or more".into());
    }
    let (rows, cols) = (x.shape[rank - 2], x.shape[rank - 1]);
    let keep = |linear: usize| {
        let (i, j) = ((linear / cols) % rows.max(1), linear % cols.max(1));
        let diagonal = j as i64 - i as i64;
        if upper {
            diagonal >= k
        } else {
            diagonal <= k
        }
    };
    let data = match &x.data {
        RtData::F32(v) => RtData::F32(
            v.iter()
                .enumerate()
                .map(|(n, &e)| if keep(n) { e } else { 0.0 })
                .collect(),
        ),
        RtData::I64(v) => RtData::I64(
            v.iter()
                .enumerate()
                .map(|(n, &e)| if keep(n) { e } else { 0 })
                .collect(),
        ),
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data,
    })
}

/// Outer, axis and inner extents of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

fn cumsum(x: &RtTensor, axis: i64, exclusive: bool, reverse: bool) -> Result<RtTensor> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    let run = |values: &mut dyn FnMut(usize, bool)| {
        for o in 0..outer {
            for i in 0..inner {
                let order: Vec<usize> = if reverse {
                    (0..len).rev().collect()
                } else {
                    (0..len).collect()
                };
                for (n, a) in order.into_iter().enumerate() {
                    values((o * len + a) * inner + i, n == 0);
                }
            }
        }
    };
    let data = match &x.data {
        RtData::F32(v) => {
            let mut out = vec![0.0f32; v.len()];
            let mut acc = 0.0f32;
            run(&mut |at, first| {
                if first {
                    acc = 0.0;
                }
                if exclusive {
                    out[at] = acc;
                    acc += v[at];
                } else {
                    acc += v[at];
                    out[at] = acc;
                }
            });
            RtData::F32(out)
        }
        RtData::I64(v) => {
            let mut out = vec![0i64; v.len()];
            let mut acc = 0i64;
            run(&mut |at, first| {
                if first {
                    acc = 0;
                }
                if exclusive {
                    out[at] = acc;
                    acc = acc.wrapping_add(v[at]);
                } else {
                    acc = acc.wrapping_add(v[at]);
                    out[at] = acc;
                }
            });
            RtData::I64(out)
        }
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data,
    })
}

fn hardmax(x: &RtTensor, axis: i64, opset: i64) -> Result<RtTensor> {
    let axis = axis_of(axis, x.shape.len())?;
    let values = floats(x);
    // Before opset 13 the input is coerced to 2-D at `axis`: the max is over all later dims.
    let (outer, len, inner) = if opset < 13 {
        (
            x.shape[..axis].iter().product(),
            x.shape[axis..].iter().product(),
            1,
        )
    } else {
        around(&x.shape, axis)
    };
    let mut out = vec![0.0f32; values.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let best = (0..len).fold(0, |best, a| {
                if values[at(a)] > values[at(best)] {
                    a
                } else {
                    best
                }
            });
            if len > 0 {
                out[at(best)] = 1.0;
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(out),
    })
}

fn top_k(x: &RtTensor, k: i64, axis: i64, largest: bool) -> Result<Vec<RtTensor>> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    if k < 0 || k as usize > len {
        return Err(format!("TopK: k = {k} for an axis of {len}"));
    }
    let k = k as usize;
    let keys: Vec<f64> = match &x.data {
        RtData::F32(v) => v.iter().map(|&e| e as f64).collect(),
        RtData::I64(v) => v.iter().map(|&e| e as f64).collect(),
    };
    let mut shape = x.shape.clone();
    shape[axis] = k;
    let mut sources = Vec::with_capacity(outer * k * inner);
    let mut indices = vec![0i64; outer * k * inner];
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let mut order: Vec<usize> = (0..len).collect();
            // Ties keep the lower index first, as the spec asks.
            order.sort_by(|&a, &b| {
                let (ka, kb) = (keys[at(a)], keys[at(b)]);
                let by_value = if largest {
                    kb.partial_cmp(&ka)
                } else {
                    ka.partial_cmp(&kb)
                };
                by_value
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.cmp(&b))
            });
            for (n, &a) in order.iter().take(k).enumerate() {
                indices[(o * k + n) * inner + i] = a as i64;
            }
        }
    }
    for o in 0..outer {
        for n in 0..k {
            for i in 0..inner {
                let a = indices[(o * k + n) * inner + i] as usize;
                sources.push((o * len + a) * inner + i);
            }
        }
    }
    let values = select(x, shape.clone(), &sources);
    Ok(vec![
        values,
        RtTensor {
            shape,
            data: RtData::I64(indices),
        },
    ])
}

fn one_hot(indices: &RtTensor, depth: &RtTensor, values: &RtTensor, axis: i64) -> Result<RtTensor> {
    let depth = floats(depth)
        .first()
        .copied()
        .ok_or("OneHot: empty depth")? as i64;
    if depth < 0 {
        return Err("OneHot: negative depth".into());
    }
    let depth = depth as usize;
    let rank = indices.shape.len() + 1;
    let axis = axis_of(axis, rank)?;
    let mut shape = indices.shape.clone();
    shape.insert(axis, depth);
    let (outer, inner): (usize, usize) = (
        indices.shape[..axis].iter().product(),
        indices.shape[axis..].iter().product(),
    );
    let index_values = floats(indices);
    let mut hot = vec![false; outer * depth * inner];
    for o in 0..outer {
        for i in 0..inner {
            let index = index_values[o * inner + i] as i64;
            let index = if index < 0 {
                index + depth as i64
            } else {
                index
            };
            if (0..depth as i64).contains(&index) {
                hot[(o * depth + index as usize) * inner + i] = true;
            }
        }
    }
    let data = match &values.data {
        RtData::F32(v) if v.len() >= 2 => {
            RtData::F32(hot.iter().map(|&h| if h { v[1] } else { v[0] }).collect())
        }
        RtData::I64(v) if v.len() >= 2 => {
            RtData::I64(hot.iter().map(|&h| if h { v[1] } else { v[0] }).collect())
        }
        _ => return Err("OneHot: values must hold [off, on]".into()),
    };
    Ok(RtTensor { shape, data })
}

fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|d| {
            let da = if d + a.len() >= rank {
                a[d + a.len() - rank]
            } else {
                1
            };
            let db = if d + b.len() >= rank {
                b[d + b.len() - rank]
            } else {
                1
            };
            match (da, db) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(format!("shapes {a:?} and {b:?} do not broadcast")),
            }
        })
        .collect()
}

/// The element of a broadcast operand of shape `shape` at output coordinate `linear`.
fn broadcast_index(linear: usize, out: &[usize], out_strides: &[usize], shape: &[usize]) -> usize {
    let offset = out.len() - shape.len();
    let own = strides(shape);
    let mut index = 0;
    for (d, &dim) in shape.iter().enumerate() {
        let coord = linear / out_strides[d + offset] % out[d + offset];
        if dim != 1 {
            index += coord * own[d];
        }
    }
    index
}

fn broadcast_ints(a: &RtTensor, b: &RtTensor, f: impl Fn(i64, i64) -> i64) -> Result<RtTensor> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let out_strides = strides(&shape);
    let (va, vb) = (ints(a), ints(b));
    let count: usize = shape.iter().product();
    let data = (0..count)
        .map(|n| {
            f(
                va[broadcast_index(n, &shape, &out_strides, &a.shape)],
                vb[broadcast_index(n, &shape, &out_strides, &b.shape)],
            )
        })
        .collect();
    Ok(RtTensor {
        shape,
        data: RtData::I64(data),
    })
}

/// `x` shifted by `shift` bits in the integer type `dtype`: bits past the type's width are
/// dropped (a left shift wraps), a right shift of a signed type is arithmetic, and a shift by the
/// width or more gives 0 (or -1 for a negative signed value shifted right), as NumPy does.
fn bit_shift(x: i64, shift: i64, dtype: DType, left: bool) -> i64 {
    let width = type_width(dtype);
    let signed = matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64);
    if shift < 0 || shift >= i64::from(width) {
        return if !left && signed && x < 0 { -1 } else { 0 };
    }
    let shift = shift as u32;
    if left {
        // Wrapped to the width by the caller (`wrap_to`).
        ((x as u64) << shift) as i64
    } else if signed {
        x >> shift
    } else {
        ((x as u64 & width_mask(width)) >> shift) as i64
    }
}

fn type_width(dtype: DType) -> u32 {
    match dtype {
        DType::U8 | DType::I8 | DType::Bool => 8,
        DType::U16 | DType::I16 => 16,
        DType::U32 | DType::I32 => 32,
        _ => 64,
    }
}

fn width_mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Integers wrapped to their type's range (two's complement for signed types), bools 0/1.
fn wrap_to(t: RtTensor, dtype: DType) -> RtTensor {
    let RtData::I64(values) = &t.data else {
        return t;
    };
    let wrap: fn(i64) -> i64 = match dtype {
        DType::Bool => |v| (v != 0) as i64,
        DType::U8 => |v| v as u8 as i64,
        DType::I8 => |v| v as i8 as i64,
        DType::U16 => |v| v as u16 as i64,
        DType::I16 => |v| v as i16 as i64,
        DType::U32 => |v| v as u32 as i64,
        DType::I32 => |v| v as i32 as i64,
        _ => return t,
    };
    RtTensor {
        shape: t.shape.clone(),
        data: RtData::I64(values.iter().map(|&v| wrap(v)).collect()),
    }
}

/// A cast to `dtype`: floats to integers truncate toward zero (saturating at i64's range, as
/// Rust's cast does), integers to floats round to nearest.
fn cast(x: &RtTensor, dtype: DType) -> RtTensor {
    let data = match (&x.data, dtype.is_float()) {
        (RtData::F32(v), true) => RtData::F32(v.clone()),
        (RtData::I64(v), true) => RtData::F32(v.iter().map(|&e| e as f32).collect()),
        (RtData::F32(v), false) if dtype == DType::Bool => {
            RtData::I64(v.iter().map(|&e| (e != 0.0) as i64).collect())
        }
        (RtData::F32(v), false) => RtData::I64(v.iter().map(|&e| e as i64).collect()),
        (RtData::I64(v), false) => RtData::I64(v.clone()),
    };
    RtTensor {
        shape: x.shape.clone(),
        data,
    }
}

fn lp_normalization(x: &RtTensor, axis: i64, p: i64) -> Result<RtTensor> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    let mut values = floats(x);
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let norm: f32 = match p {
                1 => (0..len).map(|a| values[at(a)].abs()).sum(),
                2 => (0..len)
                    .map(|a| values[at(a)] * values[at(a)])
                    .sum::<f32>()
                    .sqrt(),
                _ => return Err(format!("LpNormalization: p = {p} (1 or 2)")),
            };
            if norm != 0.0 {
                for a in 0..len {
                    values[at(a)] /= norm;
                }
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(values),
    })
}

/// LayerNormalization (outputs Y, Mean, InvStdDev) or, with `rms`, RMSNormalization (Y only)
/// over the dims from `axis` on; `scale` and `bias` broadcast against those dims.
fn layer_norm(
    x: &RtTensor,
    scale: &RtTensor,
    bias: Option<&RtTensor>,
    axis: i64,
    epsilon: f32,
    rms: bool,
) -> Result<Vec<RtTensor>> {
    let rank = x.shape.len();
    let axis = axis_of(axis, rank)?;
    let row_shape = &x.shape[axis..];
    let row: usize = row_shape.iter().product();
    let rows: usize = x.shape[..axis].iter().product();
    let row_strides = strides(row_shape);
    let parameter = |p: &RtTensor| -> Result<Vec<f32>> {
        if p.shape.len() > row_shape.len() {
            return Err("a parameter has a higher rank than the normalised dims".into());
        }
        broadcast_shape(row_shape, &p.shape)
            .ok()
            .filter(|s| s == row_shape)
            .ok_or("a parameter does not broadcast to the normalised dims")?;
        let values = floats(p);
        Ok((0..row)
            .map(|n| values[broadcast_index(n, row_shape, &row_strides, &p.shape)])
            .collect())
    };
    let gamma = parameter(scale)?;
    let beta = bias.map(parameter).transpose()?;
    let values = floats(x);
    let mut y = vec![0.0f32; values.len()];
    let (mut means, mut inv_stds) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    for r in 0..rows {
        let xs = &values[r * row..(r + 1) * row];
        let mean = if rms {
            0.0
        } else {
            xs.iter().map(|&v| f64::from(v)).sum::<f64>() / row.max(1) as f64
        };
        let var = xs
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / row.max(1) as f64;
        let inv_std = 1.0 / (var + f64::from(epsilon)).sqrt();
        for (n, &v) in xs.iter().enumerate() {
            let normalised = ((f64::from(v) - mean) * inv_std) as f32 * gamma[n];
            y[r * row + n] = normalised + beta.as_ref().map_or(0.0, |b| b[n]);
        }
        means[r] = mean as f32;
        inv_stds[r] = inv_std as f32;
    }
    let mut stats_shape = x.shape[..axis].to_vec();
    stats_shape.extend(std::iter::repeat_n(1, rank - axis));
    let mut outputs = vec![RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(y),
    }];
    if !rms {
        outputs.push(RtTensor {
            shape: stats_shape.clone(),
            data: RtData::F32(means),
        });
        outputs.push(RtTensor {
            shape: stats_shape,
            data: RtData::F32(inv_stds),
        });
    }
    Ok(outputs)
}

fn space_to_depth(x: &RtTensor, block: i64) -> Result<RtTensor> {
    let [n, c, h, w] = x.shape[..] else {
        return Err("SpaceToDepth needs a 4-D input".into());
    };
    let b = block.max(1) as usize;
    if h % b != 0 || w % b != 0 {
        return Err("SpaceToDepth: spatial dims not divisible by the block".into());
    }
    let (oh, ow) = (h / b, w / b);
    let shape = vec![n, c * b * b, oh, ow];
    let mut sources = Vec::with_capacity(x.len());
    for ni in 0..n {
        for by in 0..b {
            for bx in 0..b {
                for ci in 0..c {
                    for y in 0..oh {
                        for xo in 0..ow {
                            sources.push(((ni * c + ci) * h + y * b + by) * w + xo * b + bx);
                        }
                    }
                }
            }
        }
    }
    Ok(select(x, shape, &sources))
}

/// log-softmax over axis 1 (the class axis of the losses).
fn log_softmax_axis1(x: &RtTensor) -> Result<RtTensor> {
    if x.shape.len() < 2 {
        return Err("the scores need a class axis (rank 2 or more)".into());
    }
    let (outer, len, inner) = around(&x.shape, 1);
    let mut values = floats(x);
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            let max = (0..len)
                .map(|a| values[at(a)])
                .fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = (0..len).map(|a| (values[at(a)] - max).exp()).sum();
            let log_sum = sum.ln() + max;
            for a in 0..len {
                values[at(a)] -= log_sum;
            }
        }
    }
    Ok(RtTensor {
        shape: x.shape.clone(),
        data: RtData::F32(values),
    })
}

/// NegativeLogLikelihoodLoss: `input` [N, C, d...] (log-probabilities), `target` [N, d...].
fn nll_loss(
    input: &RtTensor,
    target: &RtTensor,
    weight: Option<&RtTensor>,
    ignore_index: Option<i64>,
    reduction: &str,
) -> Result<RtTensor> {
    if input.shape.len() < 2 {
        return Err("the input needs a class axis".into());
    }
    let (n, classes, inner) = around(&input.shape, 1);
    let values = floats(input);
    let targets = ints(target);
    if targets.len() != n * inner {
        return Err("target shape does not match the input's".into());
    }
    let weights = weight.map(floats);
    let mut losses = vec![0.0f32; n * inner];
    let mut weight_sum = 0.0f32;
    for b in 0..n {
        for i in 0..inner {
            let class = targets[b * inner + i];
            if Some(class) == ignore_index {
                continue;
            }
            let c = index_in(class, classes)?;
            let w = weights.as_ref().map_or(1.0, |w| w[c]);
            losses[b * inner + i] = -values[(b * classes + c) * inner + i] * w;
            weight_sum += w;
        }
    }
    let mut shape = target.shape.clone();
    let data = match reduction {
        "none" => losses,
        "sum" => {
            shape.clear();
            vec![losses.iter().sum()]
        }
        "mean" => {
            shape.clear();
            let total: f32 = losses.iter().sum();
            vec![if weight_sum == 0.0 {
                0.0
            } else {
                total / weight_sum
            }]
        }
        other => return Err(format!("unknown reduction `{other}`")),
    };
    Ok(RtTensor {
        shape,
        data: RtData::F32(data),
    })
}

/// A [batch, heads, sequence, head] view of a 3-D [batch, sequence, heads · head] tensor.
fn split_heads(t: &RtTensor, heads: usize) -> Result<(Vec<f32>, [usize; 4])> {
    let [b, s, width] = t.shape[..] else {
        return Err("expected a 3-D tensor".into());
    };
    if heads == 0 || width % heads != 0 {
        return Err(format!(
            "a width of {width} does not split into {heads} heads"
        ));
    }
    let d = width / heads;
    let values = floats(t);
    let mut out = vec![0.0f32; values.len()];
    for bi in 0..b {
        for si in 0..s {
            for h in 0..heads {
                for di in 0..d {
                    out[((bi * heads + h) * s + si) * d + di] =
                        values[(bi * s + si) * width + h * d + di];
                }
            }
        }
    }
    Ok((out, [b, heads, s, d]))
}

fn as_4d(t: &RtTensor) -> Result<(Vec<f32>, [usize; 4])> {
    match t.shape[..] {
        [b, h, s, d] => Ok((floats(t), [b, h, s, d])),
        _ => Err("expected a 4-D tensor".into()),
    }
}

/// Concatenates two [b, h, s, d] tensors along s.
fn concat_seq(
    past: &(Vec<f32>, [usize; 4]),
    new: &(Vec<f32>, [usize; 4]),
) -> Result<(Vec<f32>, [usize; 4])> {
    let ([b, h, p, d], [b2, h2, n, d2]) = (past.1, new.1);
    if (b, h, d) != (b2, h2, d2) {
        return Err("the cache and the new keys or values disagree in shape".into());
    }
    let mut out = Vec::with_capacity(b * h * (p + n) * d);
    for row in 0..b * h {
        out.extend_from_slice(&past.0[row * p * d..(row + 1) * p * d]);
        out.extend_from_slice(&new.0[row * n * d..(row + 1) * n * d]);
    }
    Ok((out, [b, h, p + n, d]))
}

/// ONNX Attention (opset 23+): softmax(Q·Kᵀ·scale (softcapped) + bias)·V, the bias made of the
/// mask (bool: false = masked; float: added; padded with masked positions when shorter than the
/// keys), the causal mask aligned to the bottom right (a query attends keys up to its own
/// position after the cache), the sliding window of opset 25 and the non-pad KV lengths; rows
/// with every key masked give 0.
fn attention(node: &Node, inputs: &[Option<RtTensor>]) -> Result<Vec<RtTensor>> {
    let attrs = &node.attrs;
    let get = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let (q_in, k_in, v_in) = (
        get(0).ok_or("Attention: no Q")?,
        get(1).ok_or("Attention: no K")?,
        get(2).ok_or("Attention: no V")?,
    );
    let three_d = q_in.shape.len() == 3;
    let (q, k, v) = if three_d {
        let q_heads = attrs
            .int("q_num_heads")
            .ok_or("Attention: no q_num_heads")? as usize;
        let kv_heads = attrs
            .int("kv_num_heads")
            .ok_or("Attention: no kv_num_heads")? as usize;
        (
            split_heads(q_in, q_heads)?,
            split_heads(k_in, kv_heads)?,
            split_heads(v_in, kv_heads)?,
        )
    } else {
        (as_4d(q_in)?, as_4d(k_in)?, as_4d(v_in)?)
    };
    let past_len = get(4).map_or(0, |p| p.shape.get(2).copied().unwrap_or(0));
    let k = match get(4) {
        Some(p) => concat_seq(&as_4d(p)?, &k)?,
        None => k,
    };
    let v = match get(5) {
        Some(p) => concat_seq(&as_4d(p)?, &v)?,
        None => v,
    };
    let [batch, q_heads, q_len, head] = q.1;
    let [_, kv_heads, total, key_head] = k.1;
    let value_head = v.1[3];
    if key_head != head || kv_heads == 0 || q_heads % kv_heads != 0 || v.1[2] != total {
        return Err("Attention: Q, K and V do not fit together".into());
    }
    let group = q_heads / kv_heads;
    let scale = attrs
        .float("scale")
        .map_or(1.0 / (head as f64).sqrt(), f64::from);
    let softcap = f64::from(attrs.float_or("softcap", 0.0));
    let causal = attrs.int_or("is_causal", 0) != 0;
    let mode = attrs.int_or("qk_matmul_output_mode", 0);
    let (left, right) = (
        attrs.int_or("left_window_size", -1),
        attrs.int_or("right_window_size", -1),
    );
    let nonpad: Option<Vec<i64>> = get(6).map(ints);
    // The mask, broadcast to [batch, q_heads, q_len, total] (right-aligned), padded at the end.
    let mask = get(3);
    let mask_bias = |b: usize, h: usize, i: usize, j: usize| -> f64 {
        let Some(m) = mask else { return 0.0 };
        let rank = m.shape.len();
        let last = m.shape.last().copied().unwrap_or(1);
        if j >= last && last != 1 {
            return f64::NEG_INFINITY;
        }
        let coords = [b, h, i, j];
        let mut index = 0;
        let mut stride = 1;
        for d in 0..rank {
            let axis = rank - 1 - d;
            let dim = m.shape[axis];
            let coord = if dim == 1 { 0 } else { coords[3 - d] };
            index += coord * stride;
            stride *= dim;
        }
        match &m.data {
            RtData::I64(values) => {
                if values[index] != 0 {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            }
            RtData::F32(values) => f64::from(values[index]),
        }
    };
    let mut y = vec![0.0f32; batch * q_heads * q_len * value_head];
    let mut qk_out = vec![0.0f32; batch * q_heads * q_len * total];
    let mut scores = vec![0.0f64; total];
    let mut raw = vec![0.0f64; total];
    for b in 0..batch {
        let offset = match &nonpad {
            Some(lengths) if past_len == 0 => {
                lengths.get(b).copied().unwrap_or(total as i64) - q_len as i64
            }
            _ => past_len as i64,
        };
        for h in 0..q_heads {
            let kv_h = h / group;
            for i in 0..q_len {
                let q_row = &q.0[((b * q_heads + h) * q_len + i) * head..][..head];
                let mut bias_max = f64::NEG_INFINITY;
                for j in 0..total {
                    let k_row = &k.0[((b * kv_heads + kv_h) * total + j) * head..][..head];
                    let dot: f64 = q_row
                        .iter()
                        .zip(k_row)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum();
                    let mut s = dot * scale;
                    if softcap > 0.0 {
                        s = softcap * (s / softcap).tanh();
                    }
                    raw[j] = s;
                    let mut bias = mask_bias(b, h, i, j);
                    let position = i as i64 + offset;
                    if causal && j as i64 > position {
                        bias = f64::NEG_INFINITY;
                    }
                    // Sliding window (opset 25): keys within `left` before and `right` after.
                    if (left >= 0 && position - j as i64 > left)
                        || (right >= 0 && j as i64 - position > right)
                    {
                        bias = f64::NEG_INFINITY;
                    }
                    if let Some(lengths) = &nonpad {
                        if j as i64 >= lengths.get(b).copied().unwrap_or(total as i64) {
                            bias = f64::NEG_INFINITY;
                        }
                    }
                    bias_max = bias_max.max(bias);
                    scores[j] = s + bias;
                }
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let all_masked = bias_max == f64::NEG_INFINITY;
                let shift = if max == f64::NEG_INFINITY { 0.0 } else { max };
                let exps: Vec<f64> = scores.iter().map(|&s| (s - shift).exp()).collect();
                let total_exp: f64 = exps.iter().sum();
                let denominator = if total_exp == 0.0 { 1.0 } else { total_exp };
                let row = ((b * q_heads + h) * q_len + i) * total;
                for j in 0..total {
                    let p = if all_masked {
                        0.0
                    } else {
                        exps[j] / denominator
                    };
                    qk_out[row + j] = match mode {
                        2 => scores[j],
                        3 => p,
                        _ => raw[j],
                    } as f32;
                    exps_weight(
                        &mut y,
                        &v.0,
                        p,
                        ((b * q_heads + h) * q_len + i) * value_head,
                        ((b * kv_heads + kv_h) * total + j) * value_head,
                        value_head,
                    );
                }
            }
        }
    }
    let y = if three_d {
        let mut out = vec![0.0f32; y.len()];
        for b in 0..batch {
            for h in 0..q_heads {
                for i in 0..q_len {
                    for d in 0..value_head {
                        out[((b * q_len + i) * q_heads + h) * value_head + d] =
                            y[((b * q_heads + h) * q_len + i) * value_head + d];
                    }
                }
            }
        }
        RtTensor {
            shape: vec![batch, q_len, q_heads * value_head],
            data: RtData::F32(out),
        }
    } else {
        RtTensor {
            shape: vec![batch, q_heads, q_len, value_head],
            data: RtData::F32(y),
        }
    };
    Ok(vec![
        y,
        RtTensor {
            shape: k.1.to_vec(),
            data: RtData::F32(k.0),
        },
        RtTensor {
            shape: v.1.to_vec(),
            data: RtData::F32(v.0),
        },
        RtTensor {
            shape: vec![batch, q_heads, q_len, total],
            data: RtData::F32(qk_out),
        },
    ])
}

/// `y[at..at + len] += p · v[from..from + len]`.
fn exps_weight(y: &mut [f32], v: &[f32], p: f64, at: usize, from: usize, len: usize) {
    for d in 0..len {
        y[at + d] += (p * f64::from(v[from + d])) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], values: &[f32]) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::F32(values.to_vec()),
        }
    }

    fn i(shape: &[usize], values: &[i64]) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::I64(values.to_vec()),
        }
    }

    #[test]
    fn gather_and_scatter_elements_follow_the_spec_examples() {
        // The spec's GatherElements example: axis 1.
        let data = f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let out = gather_elements(&data, &i(&[2, 2], &[0, 0, 1, 0]), 1).unwrap();
        assert_eq!(out.to_f32(), vec![1.0, 1.0, 4.0, 3.0]);
        // ScatterElements with axis 1 and a negative index.
        let data = f(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let out = scatter_elements(
            &data,
            &i(&[1, 2], &[1, -2]),
            &f(&[1, 2], &[1.1, 2.1]),
            1,
            Reduction::None,
        )
        .unwrap();
        assert_eq!(out.to_f32(), vec![1.0, 1.1, 3.0, 2.1, 5.0]);
    }

    #[test]
    fn top_k_keeps_the_lower_index_on_ties() {
        let x = f(&[1, 4], &[3.0, 5.0, 5.0, 1.0]);
        let out = top_k(&x, 2, -1, true).unwrap();
        assert_eq!(out[0].to_f32(), vec![5.0, 5.0]);
        assert_eq!(ints(&out[1]), vec![1, 2]);
        let out = top_k(&x, 2, -1, false).unwrap();
        assert_eq!(ints(&out[1]), vec![3, 0]);
    }

    #[test]
    fn cumsum_exclusive_and_reverse() {
        let x = f(&[4], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            cumsum(&x, 0, false, false).unwrap().to_f32(),
            vec![1.0, 3.0, 6.0, 10.0]
        );
        assert_eq!(
            cumsum(&x, 0, true, false).unwrap().to_f32(),
            vec![0.0, 1.0, 3.0, 6.0]
        );
        assert_eq!(
            cumsum(&x, 0, false, true).unwrap().to_f32(),
            vec![10.0, 9.0, 7.0, 4.0]
        );
    }

    #[test]
    fn integers_wrap_to_their_width() {
        let t = wrap_to(i(&[3], &[256, 255, -1]), DType::U8);
        assert_eq!(ints(&t), vec![0, 255, 255]);
        let t = wrap_to(i(&[2], &[128, -129]), DType::I8);
        assert_eq!(ints(&t), vec![-128, 127]);
    }
}
