//! Data-movement ops: Concat, Split (split as attribute before 13, input from 13, num_outputs
//! from 18), Slice (attributes before 10, inputs from 10), Transpose, Gather, GatherElements,
//! GatherND, Expand, Pad (pads as attribute before 11), Tile, Resize (10-19) and Upsample (7-9),
//! DepthToSpace, SpaceToDepth, ScatterND, ScatterElements, CumSum, CumProd, Trilu, OneHot,
//! GridSample (16+: output [N, C, grid's spatial dims]; 2 FLOPs per tap, 2^d linear or 4^d
//! cubic taps, 1 nearest, per output element).
//!
//! Cost: no arithmetic (Resize interpolation excepted: linear 2 FLOPs per tap with 2^d taps,
//! cubic 4^d taps, for the d resized dims; CumSum and CumProd one add or multiply per element); bytes: inputs read once,
//! output written once. Gather from a constant table (an embedding) reads only the gathered rows.

use super::fold::{broadcast_map, gather, tensor_from_f64};
use super::{broadcast_shapes, normalize_axis, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, Tensor, TensorData, TensorFact};

/// Largest constant Split folds into its parts.
const MAX_FOLDED_SPLIT: u64 = 1 << 16;
/// Largest integer constant `Transpose` evaluates at analysis time (shape and index
/// arithmetic; float constants, weights, stay a run-time op the executor's kernel moves).
const MAX_TRANSPOSED_CONSTANT: u64 = 1 << 12;

struct Concat;
struct Split;
struct Slice;
struct Transpose;
struct Gather;
struct Expand;
struct Pad;
struct Tile;
struct Resize;
struct DepthSpace;
/// Ops whose output has the shape of their first input (scatter, cumsum, trilu, gather elements
/// is special-cased to its indices).
struct SameShape;
struct GatherNd;
struct OneHot;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "Concat" => &Concat,
        "Split" => &Split,
        "Slice" => &Slice,
        "Transpose" => &Transpose,
        "Gather" => &Gather,
        "Expand" => &Expand,
        "Pad" => &Pad,
        "Tile" => &Tile,
        "Resize" | "Upsample" => &Resize,
        "GridSample" => &GridSample,
        "DepthToSpace" | "SpaceToDepth" => &DepthSpace,
        "ScatterND" | "ScatterElements" | "Scatter" | "CumSum" | "CumProd" | "Trilu"
        | "GatherElements" | "ReverseSequence" => &SameShape,
        "GatherND" => &GatherNd,
        "OneHot" => &OneHot,
        _ => return None,
    })
}

fn movement_cost(ctx: &CostCtx) -> OpResult<OpCost> {
    Ok(OpCost {
        bytes: ctx.default_traffic()?,
        ..OpCost::default()
    })
}

fn known(dim: &Dim) -> OpResult<u64> {
    dim.known()
        .ok_or_else(|| format!("dim `{dim}` is not known"))
}

impl OpDef for Concat {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let facts: Vec<&TensorFact> = ctx.inputs.iter().flatten().copied().collect();
        let first = facts.first().ok_or("no inputs")?;
        let rank = first.rank().ok_or("rank of input #0 is unknown")?;
        let axis = normalize_axis(ctx.attrs().int("axis").ok_or("missing `axis`")?, rank)?;
        let mut shape = first.shape.clone().unwrap_or_default();
        let mut total: Option<u64> = Some(0);
        let mut sym_total: Option<Dim> = None;
        for fact in &facts {
            let s = fact.shape.as_ref().ok_or("an input rank is unknown")?;
            if s.len() != rank {
                return Err(super::invalid(format!(
                    "inputs of rank {rank} and {} cannot concatenate",
                    s.len()
                )));
            }
            match s[axis].known() {
                Some(d) => total = total.map(|t| t + d),
                None => {
                    total = None;
                    sym_total = Some(s[axis].clone());
                }
            }
            for (i, d) in s.iter().enumerate() {
                if i == axis {
                    continue;
                }
                match (shape[i].known(), d.known()) {
                    (None, Some(_)) => shape[i] = d.clone(),
                    (Some(a), Some(b)) if a != b => {
                        return Err(super::invalid(format!(
                            "inputs differ on axis {i} ({a} and {b}), which is not the concat axis {axis}"
                        )))
                    }
                    _ => {}
                }
            }
        }
        shape[axis] = match total {
            Some(t) => Dim::Known(t),
            None => Dim::Sym(format!(
                "{}_concat_{}",
                ctx.node.name,
                sym_total.map(|d| d.to_string()).unwrap_or_default()
            )),
        };
        // Fold constant concatenation (shape vectors).
        let constants: Option<Vec<&Tensor>> = facts.iter().map(|f| f.konst.as_deref()).collect();
        if let Some(constants) = constants {
            let dims: Option<Vec<u64>> = shape.iter().map(Dim::known).collect();
            let values: Option<Vec<_>> = constants.iter().map(|t| t.to_f64_vec()).collect();
            if let (Some(dims), Some(values)) = (dims, values) {
                let outer: u64 = dims[..axis].iter().product();
                let mut out = Vec::new();
                for o in 0..outer as usize {
                    for (t, v) in constants.iter().zip(&values) {
                        let chunk: u64 = t.shape[axis..].iter().product();
                        out.extend_from_slice(&v[o * chunk as usize..(o + 1) * chunk as usize]);
                    }
                }
                return Ok(vec![TensorFact::constant(tensor_from_f64(
                    first.dtype,
                    dims,
                    out,
                ))]);
            }
        }
        Ok(vec![TensorFact::new(first.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

impl OpDef for Split {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", 0), shape.len())?;
        let count = ctx.output_count.max(1);
        let sizes: Vec<Dim> = match ctx
            .const_ints(1)?
            .or_else(|| ctx.attrs().ints("split").map(<[i64]>::to_vec))
        {
            Some(split) => split.iter().map(|&s| Dim::Known(s.max(0) as u64)).collect(),
            None => match shape[axis].known() {
                Some(len) => {
                    // Equal parts; the last one smaller when it does not divide (opset 18).
                    let part = len.div_ceil(count as u64);
                    (0..count as u64)
                        .map(|i| Dim::Known(part.min(len.saturating_sub(i * part))))
                        .collect()
                }
                None => (0..count)
                    .map(|i| Dim::Sym(format!("{}_split{i}", ctx.node.name)))
                    .collect(),
            },
        };
        if sizes.len() != count {
            return Err(super::invalid(format!(
                "{} split sizes for {count} outputs",
                sizes.len()
            )));
        }
        let known_sizes: Option<u64> = sizes.iter().map(Dim::known).sum();
        if let (Some(total), Some(len)) = (known_sizes, shape[axis].known()) {
            if total != len {
                return Err(super::invalid(format!(
                    "split sizes add up to {total} but axis {axis} has {len} elements"
                )));
            }
        }
        // Fold a constant split (a shape vector cut into its dims); large constants (weights)
        // stay unfolded: their values are never needed for shapes.
        let dims: Option<Vec<u64>> = shape
            .iter()
            .map(Dim::known)
            .collect::<Option<Vec<u64>>>()
            .filter(|d| d.iter().product::<u64>() <= MAX_FOLDED_SPLIT);
        let parts: Option<Vec<u64>> = sizes.iter().map(Dim::known).collect();
        if let (Some(dims), Some(parts), Some(values)) =
            (dims, parts, x.konst.as_ref().and_then(|t| t.to_f64_vec()))
        {
            let outer: u64 = dims[..axis].iter().product();
            let inner: u64 = dims[axis + 1..].iter().product();
            let mut offset = 0u64;
            let mut folded = Vec::with_capacity(parts.len());
            for &part in &parts {
                let mut out = Vec::with_capacity((outer * part * inner) as usize);
                for o in 0..outer {
                    let start = ((o * dims[axis] + offset) * inner) as usize;
                    out.extend_from_slice(&values[start..start + (part * inner) as usize]);
                }
                let mut part_dims = dims.clone();
                part_dims[axis] = part;
                folded.push(TensorFact::constant(tensor_from_f64(
                    x.dtype, part_dims, out,
                )));
                offset += part;
            }
            return Ok(folded);
        }
        Ok(sizes
            .into_iter()
            .map(|size| {
                let mut s = shape.to_vec();
                s[axis] = size;
                TensorFact::new(x.dtype, s)
            })
            .collect())
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

/// Clamped begin/end/step of one sliced axis, and the resulting length.
fn slice_axis(dim: u64, start: i64, end: i64, step: i64) -> (i64, i64, u64) {
    let d = dim as i64;
    let norm = |v: i64| if v < 0 { v + d } else { v };
    let (start, end) = (norm(start), norm(end));
    if step > 0 {
        let s = start.clamp(0, d);
        let e = end.clamp(0, d);
        let len = if e > s { (e - s + step - 1) / step } else { 0 };
        (s, e, len as u64)
    } else {
        let s = start.clamp(-1, d - 1);
        let e = end.clamp(-1, d - 1);
        let len = if s > e {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        (s, e, len as u64)
    }
}

impl OpDef for Slice {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let rank = shape.len();
        if rank == 0 {
            return Err(super::invalid("a scalar cannot be sliced"));
        }
        let (starts, ends, axes, steps) = if ctx.node.opset < 10 {
            let a = ctx.attrs();
            (
                a.ints("starts").ok_or("missing `starts`")?.to_vec(),
                a.ints("ends").ok_or("missing `ends`")?.to_vec(),
                a.ints("axes").map(<[i64]>::to_vec),
                None,
            )
        } else {
            (
                ctx.const_ints(1)?.ok_or("missing starts")?,
                ctx.const_ints(2)?.ok_or("missing ends")?,
                ctx.const_ints(3)?,
                ctx.const_ints(4)?,
            )
        };
        let axes: Vec<usize> = match axes {
            Some(axes) => axes
                .iter()
                .map(|&a| normalize_axis(a, rank))
                .collect::<OpResult<_>>()?,
            None if starts.len() > rank => {
                return Err(super::invalid(format!(
                    "{} starts for an input of rank {rank}",
                    starts.len()
                )))
            }
            None => (0..starts.len()).collect(),
        };
        let steps = steps.unwrap_or(vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(super::invalid("starts/ends/axes/steps lengths differ"));
        }
        let mut out = shape.to_vec();
        let mut plan: Vec<(usize, i64, u64, i64)> = Vec::new();
        for i in 0..starts.len() {
            if steps[i] == 0 {
                return Err("slice step is zero".into());
            }
            let axis = axes[i];
            match shape[axis].known() {
                Some(dim) => {
                    let (s, _, len) = slice_axis(dim, starts[i], ends[i], steps[i]);
                    out[axis] = Dim::Known(len);
                    plan.push((axis, s, len, steps[i]));
                }
                None => {
                    // Symbolic dim: only the common whole-axis and fixed-window cases are exact.
                    out[axis] = if starts[i] == 0 && ends[i] >= i32::MAX as i64 && steps[i] == 1 {
                        shape[axis].clone()
                    } else if starts[i] >= 0
                        && ends[i] >= 0
                        && ends[i] < i32::MAX as i64
                        && steps[i] == 1
                    {
                        Dim::Known((ends[i] - starts[i]).max(0) as u64)
                    } else {
                        Dim::Sym(format!("{}_slice{axis}", ctx.node.name))
                    };
                }
            }
        }
        if let (Some(konst), Some(dims)) = (&x.konst, x.concrete_shape()) {
            if let (Some(values), Some(out_dims)) = (
                konst.to_f64_vec(),
                out.iter().map(Dim::known).collect::<Option<Vec<u64>>>(),
            ) {
                let in_strides = super::fold::strides(&dims);
                let out_strides = super::fold::strides(&out_dims);
                let count: u64 = out_dims.iter().product();
                let mut result = Vec::with_capacity(count as usize);
                for linear in 0..count {
                    let mut src = 0i64;
                    for axis in 0..rank {
                        let coord = ((linear / out_strides[axis]) % out_dims[axis].max(1)) as i64;
                        let (start, step) = plan
                            .iter()
                            .find(|p| p.0 == axis)
                            .map(|p| (p.1, p.3))
                            .unwrap_or((0, 1));
                        src += (start + coord * step) * in_strides[axis] as i64;
                    }
                    result.push(values[src as usize]);
                }
                return Ok(vec![TensorFact::constant(tensor_from_f64(
                    x.dtype, out_dims, result,
                ))]);
            }
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        // Only the sliced part of the input is read.
        let mut cost = OpCost::default();
        let out_bytes = ctx.bytes_of(ctx.outputs[0])?;
        if ctx.input(0)?.is_constant() {
            cost.bytes.weights_read = out_bytes;
        } else {
            cost.bytes.act_read = out_bytes;
        }
        cost.bytes.act_written = out_bytes;
        Ok(cost)
    }
}

impl OpDef for Transpose {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let perm: Vec<usize> = match ctx.attrs().ints("perm") {
            Some(perm) => perm
                .iter()
                .map(|&p| normalize_axis(p, shape.len()))
                .collect::<OpResult<_>>()?,
            None => (0..shape.len()).rev().collect(),
        };
        let mut seen = vec![false; shape.len()];
        if perm.len() != shape.len() || perm.iter().any(|&p| std::mem::replace(&mut seen[p], true))
        {
            return Err(super::invalid(format!(
                "perm {perm:?} is not a permutation of the {} axes",
                shape.len()
            )));
        }
        let out: Vec<Dim> = perm.iter().map(|&p| shape[p].clone()).collect();
        if let (Some(konst), Some(dims)) = (&x.konst, x.concrete_shape()) {
            let out_dims: Vec<u64> = perm.iter().map(|&p| dims[p]).collect();
            if let TensorData::Splat(v) = konst.data {
                return Ok(vec![TensorFact::constant(Tensor {
                    dtype: x.dtype,
                    shape: out_dims,
                    data: TensorData::Splat(v),
                })]);
            }
            // Small integer constants (pad amounts an exporter flips: silero-vad's
            // `[[a, b], [c, d]]ᵀ` before Pad) are evaluated, so the ops reading them see
            // values; the executor has no integer transpose kernel to fall back on.
            if !x.dtype.is_float() && konst.element_count() <= MAX_TRANSPOSED_CONSTANT {
                if let Some(values) = konst.to_f64_vec() {
                    let in_strides = super::fold::strides(&dims);
                    let out_strides = super::fold::strides(&out_dims);
                    let count: u64 = out_dims.iter().product();
                    let transposed: Vec<f64> = (0..count)
                        .map(|linear| {
                            let src: u64 = perm
                                .iter()
                                .enumerate()
                                .map(|(axis, &from)| {
                                    let coord = (linear / out_strides[axis]) % out_dims[axis];
                                    coord * in_strides[from]
                                })
                                .sum();
                            values[src as usize]
                        })
                        .collect();
                    return Ok(vec![TensorFact::constant(tensor_from_f64(
                        x.dtype, out_dims, transposed,
                    ))]);
                }
            }
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

impl OpDef for Gather {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let data = ctx.input(0)?;
        let indices = ctx.input(1)?;
        let shape = ctx.input_shape(0)?;
        let index_shape = ctx.input_shape(1)?;
        let axis = normalize_axis(ctx.attrs().int_or("axis", 0), shape.len())?;
        if let (Some(d), Some(i)) = (&data.konst, &indices.konst) {
            if let Some(tensor) = gather(d, i, axis)? {
                return Ok(vec![TensorFact::constant(tensor)]);
            }
        }
        let mut out = shape[..axis].to_vec();
        out.extend_from_slice(index_shape);
        out.extend_from_slice(&shape[axis + 1..]);
        Ok(vec![TensorFact::new(data.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let data = ctx.input(0)?;
        let gathered = ctx.bytes_of(ctx.outputs[0])?;
        let mut cost = OpCost::default();
        let index_bytes = ctx.bytes_of(ctx.input(1)?)?;
        if data.is_constant() {
            cost.bytes.weights_read = gathered;
        } else {
            cost.bytes.act_read = gathered;
        }
        cost.bytes.act_read += index_bytes;
        cost.bytes.act_written = gathered;
        Ok(cost)
    }
}

impl OpDef for Expand {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let target = ctx.const_ints(1)?.ok_or("missing shape")?;
        let target: Vec<Dim> = target
            .iter()
            .map(|&d| Dim::Known(d.max(0) as u64))
            .collect();
        let out = broadcast_shapes(&[shape, &target])?;
        if let (Some(konst), Some(dims)) = (
            &x.konst,
            out.iter().map(Dim::known).collect::<Option<Vec<u64>>>(),
        ) {
            if let TensorData::Splat(v) = konst.data {
                return Ok(vec![TensorFact::constant(Tensor {
                    dtype: x.dtype,
                    shape: dims,
                    data: TensorData::Splat(v),
                })]);
            }
            let zeros = Tensor {
                dtype: x.dtype,
                shape: dims,
                data: TensorData::Splat(0.0),
            };
            if let Some(t) = broadcast_map(&[konst, &zeros], x.dtype, |a| a[0]) {
                return Ok(vec![TensorFact::constant(t)]);
            }
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

impl OpDef for Pad {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let rank = shape.len();
        let pads = if ctx.node.opset < 11 {
            ctx.attrs()
                .ints("pads")
                .or(ctx.attrs().ints("paddings"))
                .ok_or("missing `pads`")?
                .to_vec()
        } else {
            ctx.const_ints(1)?.ok_or("missing pads")?
        };
        let axes: Vec<usize> = match ctx.const_ints(3)? {
            Some(axes) => axes
                .iter()
                .map(|&a| normalize_axis(a, rank))
                .collect::<OpResult<_>>()?,
            None => (0..rank).collect(),
        };
        let n = axes.len();
        if pads.len() != 2 * n {
            return Err(format!("{} pads for {n} axes", pads.len()));
        }
        let mut out = shape.to_vec();
        for (i, &axis) in axes.iter().enumerate() {
            if let Dim::Known(d) = out[axis] {
                let padded = d as i64 + pads[i] + pads[i + n];
                if padded < 0 {
                    return Err(format!("negative size after padding axis {axis}"));
                }
                out[axis] = Dim::Known(padded as u64);
            } else if pads[i] != 0 || pads[i + n] != 0 {
                out[axis] = Dim::Sym(format!("{}_pad{axis}", ctx.node.name));
            }
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

impl OpDef for Tile {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let repeats = ctx.const_ints(1)?.ok_or("missing repeats")?;
        if repeats.len() != shape.len() {
            return Err("repeats length differs from rank".into());
        }
        let out = shape
            .iter()
            .zip(&repeats)
            .map(|(d, &r)| match d {
                Dim::Known(v) => Dim::Known(v * r.max(0) as u64),
                other if r == 1 => other.clone(),
                _ => Dim::Sym(format!("{}_tile", ctx.node.name)),
            })
            .collect();
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

fn float_values(fact: Option<&TensorFact>) -> Option<Vec<f64>> {
    let konst = fact?.konst.as_ref()?;
    let values = konst.to_f64_vec()?;
    (!values.is_empty()).then(|| values.into_owned())
}

struct GridSample;

impl OpDef for GridSample {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let grid = ctx.input_shape(1)?;
        if shape.len() < 3 || grid.len() != shape.len() {
            return Err(super::invalid(
                "GridSample: X [N, C, spatial...] and a grid of the same rank",
            ));
        }
        let mut out = shape[..2].to_vec();
        out.extend_from_slice(&grid[1..grid.len() - 1]);
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = movement_cost(ctx)?;
        let spatial = ctx.input_dims(0)?.len().saturating_sub(2) as u32;
        let taps = match ctx.attrs().string("mode").unwrap_or("linear") {
            "nearest" => 1,
            "cubic" | "bicubic" => 4u64.pow(spatial),
            _ => 2u64.pow(spatial),
        };
        cost.flops = 2 * taps * ctx.output_elements(0)?;
        Ok(cost)
    }
}

impl OpDef for Resize {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let rank = shape.len();
        let (scales, sizes) = if ctx.node.op_type == "Upsample" {
            let scales = match ctx.attrs().floats("scales") {
                Some(s) => Some(s.iter().map(|&v| v as f64).collect()),
                None => float_values(ctx.opt_input(1)),
            };
            (scales, None)
        } else if ctx.node.opset < 11 {
            (float_values(ctx.opt_input(1)), None)
        } else {
            let sizes_fact = ctx.opt_input(3);
            let sizes = match sizes_fact {
                Some(f) if f.element_count() != Some(0) => Some(
                    f.konst
                        .as_ref()
                        .and_then(|t| t.to_i64_vec())
                        .ok_or("`sizes` is computed at run time")?,
                ),
                _ => None,
            };
            let scales = float_values(ctx.opt_input(2)).filter(|s| !s.is_empty());
            if scales.is_some() && sizes.is_some() {
                return Err(super::invalid(
                    "both `scales` and `sizes` are given; the spec allows one",
                ));
            }
            (scales, sizes)
        };
        let axes: Vec<usize> = match ctx.attrs().ints("axes") {
            Some(axes) => axes
                .iter()
                .map(|&a| normalize_axis(a, rank))
                .collect::<OpResult<_>>()?,
            None => (0..rank).collect(),
        };
        let mut out = shape.to_vec();
        if let Some(sizes) = sizes {
            if sizes.len() != axes.len() {
                return Err("`sizes` length differs from the resized axes".into());
            }
            // keep_aspect_ratio_policy (18+): one scale for every resized axis, the smallest
            // (not_larger) or largest (not_smaller) of sizes / input, output = round(scale · in).
            let policy = ctx
                .attrs()
                .string("keep_aspect_ratio_policy")
                .unwrap_or("stretch");
            let inputs: Option<Vec<u64>> = axes.iter().map(|&a| shape[a].known()).collect();
            let common = match (policy, &inputs) {
                ("not_larger" | "not_smaller", Some(inputs)) => {
                    let ratios = sizes
                        .iter()
                        .zip(inputs)
                        .map(|(&s, &d)| s as f64 / d.max(1) as f64);
                    Some(if policy == "not_larger" {
                        ratios.fold(f64::INFINITY, f64::min)
                    } else {
                        ratios.fold(0.0, f64::max)
                    })
                }
                _ => None,
            };
            for (k, (&axis, &size)) in axes.iter().zip(&sizes).enumerate() {
                out[axis] = match (common, &inputs) {
                    (Some(scale), Some(inputs)) => {
                        Dim::Known((scale * inputs[k] as f64 + 0.5).floor() as u64)
                    }
                    _ => Dim::Known(size.max(0) as u64),
                };
            }
        } else if let Some(scales) = scales {
            if scales.len() != axes.len() {
                return Err("`scales` length differs from the resized axes".into());
            }
            for (&axis, &scale) in axes.iter().zip(&scales) {
                out[axis] = match &shape[axis] {
                    Dim::Known(d) => Dim::Known((*d as f64 * scale).floor() as u64),
                    other if scale == 1.0 => other.clone(),
                    _ => Dim::Sym(format!("{}_resized{axis}", ctx.node.name)),
                };
            }
        } else {
            return Err("neither constant `scales` nor `sizes` is given".into());
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let y = ctx.output_dims(0)?;
        let resized = x.iter().zip(&y).filter(|(a, b)| a != b).count() as u32;
        let mode = ctx.attrs().string("mode").unwrap_or("nearest");
        let taps: u64 = match mode {
            "linear" | "bilinear" | "trilinear" => 2u64.pow(resized),
            "cubic" | "bicubic" => 4u64.pow(resized),
            _ => 0,
        };
        let outputs: u64 = y.iter().product();
        let mut cost = OpCost {
            flops: outputs * taps * 2,
            ..OpCost::default()
        };
        // Scales/sizes/roi are tiny parameters: count only the data tensor.
        cost.bytes.act_read = ctx.bytes_of(ctx.input(0)?)?;
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

impl OpDef for DepthSpace {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let s = ctx.input_shape(0)?;
        if s.len() != 4 {
            return Err("expects a 4-D input".into());
        }
        let block = ctx
            .attrs()
            .int("blocksize")
            .ok_or("missing `blocksize`")?
            .max(1) as u64;
        let (c, h, w) = (known(&s[1])?, known(&s[2])?, known(&s[3])?);
        let out = if ctx.node.op_type == "DepthToSpace" {
            [c / (block * block), h * block, w * block]
        } else {
            [c * block * block, h / block, w / block]
        };
        let mut shape = vec![s[0].clone()];
        shape.extend(out.iter().map(|&d| Dim::Known(d)));
        Ok(vec![TensorFact::new(x.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

impl OpDef for SameShape {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = if ctx.node.op_type == "GatherElements" {
            ctx.input(1)?.shape.clone()
        } else {
            x.shape.clone()
        };
        Ok(vec![TensorFact {
            dtype: x.dtype,
            shape,
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = movement_cost(ctx)?;
        if matches!(ctx.node.op_type, "CumSum" | "CumProd") {
            cost.flops = ctx.output_elements(0)?;
        }
        Ok(cost)
    }
}

impl OpDef for GatherNd {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let data = ctx.input_shape(0)?;
        let indices = ctx.input_shape(1)?;
        let batch = ctx.attrs().int_or("batch_dims", 0).max(0) as usize;
        let last = indices
            .last()
            .and_then(Dim::known)
            .ok_or("last dim of indices must be known")? as usize;
        let mut out = indices[..indices.len() - 1].to_vec();
        out.extend_from_slice(data.get(batch + last..).unwrap_or(&[]));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = OpCost::default();
        let out = ctx.bytes_of(ctx.outputs[0])?;
        cost.bytes.act_read = out + ctx.bytes_of(ctx.input(1)?)?;
        cost.bytes.act_written = out;
        Ok(cost)
    }
}

impl OpDef for OneHot {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let indices = ctx.input_shape(0)?;
        let depth = ctx
            .const_ints(1)?
            .and_then(|d| d.first().copied())
            .ok_or("depth is not constant")?;
        let values = ctx.input(2)?;
        let rank = indices.len() + 1;
        let axis = normalize_axis(ctx.attrs().int_or("axis", -1), rank)?;
        let mut out = indices.to_vec();
        out.insert(axis, Dim::Known(depth.max(0) as u64));
        Ok(vec![TensorFact::new(values.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        movement_cost(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::slice_axis;

    #[test]
    fn slice_clamps_like_numpy() {
        assert_eq!(slice_axis(10, 2, 100, 1).2, 8);
        assert_eq!(slice_axis(10, -3, i64::MAX, 1).2, 3);
        assert_eq!(slice_axis(10, -1, i64::MIN, -1).2, 10);
        assert_eq!(slice_axis(10, 0, 10, 3).2, 4);
    }
}
