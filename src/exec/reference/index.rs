//! Reference kernels that index and rearrange: Clip with run-time bounds, GatherElements,
//! ScatterElements/ND, Trilu, CumSum/CumProd, Hardmax, TopK, OneHot, SpaceToDepth.

use super::*;

/// Clip with bounds from inputs (opset 11+) or attributes (before); a missing bound is open.
pub(super) fn clip(
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

/// Gather along `axis`: `data.shape[..axis] ++ indices.shape ++ data.shape[axis + 1..]`,
/// negative indices counting from the end. The executor's movement kernel gathers floats; this
/// serves integer data (a dynamically quantized embedding table of u8 rows), which the
/// generic evaluator had copied whole into an analysis tensor on every run: 187 ms for BERT's
/// 30522×768 table.
pub(super) fn gather(data: &RtTensor, indices: &RtTensor, axis: i64) -> Result<RtTensor> {
    let axis = axis_of(axis, data.shape.len())?;
    let (outer, axis_len, inner) = around(&data.shape, axis);
    let rows = int_values(indices)
        .iter()
        .map(|&index| index_in(index, axis_len))
        .collect::<Result<Vec<usize>>>()?;
    let mut sources = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &row in &rows {
            let start = (o * axis_len + row) * inner;
            sources.extend(start..start + inner);
        }
    }
    let mut shape = data.shape[..axis].to_vec();
    shape.extend_from_slice(&indices.shape);
    shape.extend_from_slice(&data.shape[axis + 1..]);
    Ok(select(data, shape, &sources))
}

pub(super) fn gather_elements(data: &RtTensor, indices: &RtTensor, axis: i64) -> Result<RtTensor> {
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
pub(super) enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    pub(super) fn parse(name: Option<&str>) -> Result<Reduction> {
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
pub(super) fn scatter_into(
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

pub(super) fn scatter_elements(
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

pub(super) fn scatter_nd(
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

pub(super) fn trilu(x: &RtTensor, k: i64, upper: bool) -> Result<RtTensor> {
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

/// CumSum, or with `product` CumProd, along `axis` (exclusive: the running value before the
/// element; reverse: from the end).
pub(super) fn cumulative(
    x: &RtTensor,
    axis: i64,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> Result<RtTensor> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    let data = match &x.data {
        RtData::F32(v) => {
            let identity = if product { 1.0 } else { 0.0 };
            let combine = |a: f32, b: f32| if product { a * b } else { a + b };
            RtData::F32(cumulative_lines(
                v, identity, combine, outer, len, inner, exclusive, reverse,
            ))
        }
        RtData::I64(v) => {
            let combine = |a: i64, b: i64| {
                if product {
                    a.wrapping_mul(b)
                } else {
                    a.wrapping_add(b)
                }
            };
            RtData::I64(cumulative_lines(
                v,
                i64::from(product),
                combine,
                outer,
                len,
                inner,
                exclusive,
                reverse,
            ))
        }
    };
    Ok(RtTensor {
        shape: x.shape.clone(),
        data,
    })
}

/// The running value of every line of a `[outer, len, inner]` tensor along its middle axis:
/// the `inner` lines advance together, one step of the axis at a time over contiguous rows (a
/// visitor call per element was 12x onnxruntime).
#[allow(clippy::too_many_arguments)]
fn cumulative_lines<T: Copy>(
    v: &[T],
    identity: T,
    combine: impl Fn(T, T) -> T,
    outer: usize,
    len: usize,
    inner: usize,
    exclusive: bool,
    reverse: bool,
) -> Vec<T> {
    let mut out = vec![identity; v.len()];
    let mut running = vec![identity; inner];
    for o in 0..outer {
        running.fill(identity);
        for step in 0..len {
            let a = if reverse { len - 1 - step } else { step };
            let at = (o * len + a) * inner;
            let lines = out[at..at + inner].iter_mut().zip(running.iter_mut());
            for ((o, r), &value) in lines.zip(&v[at..at + inner]) {
                if exclusive {
                    *o = *r;
                    *r = combine(*r, value);
                } else {
                    *r = combine(*r, value);
                    *o = *r;
                }
            }
        }
    }
    out
}

pub(super) fn hardmax(x: &RtTensor, axis: i64, opset: i64) -> Result<RtTensor> {
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

/// Up to this k, TopK keeps its best in a sorted list while it scans; past it, it selects.
const SMALL_K: usize = 64;

pub(super) fn top_k(x: &RtTensor, k: i64, axis: i64, largest: bool) -> Result<Vec<RtTensor>> {
    let axis = axis_of(axis, x.shape.len())?;
    let (outer, len, inner) = around(&x.shape, axis);
    if k < 0 || k as usize > len {
        return Err(format!("TopK: k = {k} for an axis of {len}"));
    }
    let k = k as usize;
    let mut shape = x.shape.clone();
    shape[axis] = k;
    let mut sources = Vec::with_capacity(outer * k * inner);
    let mut indices = vec![0i64; outer * k * inner];
    if let (RtData::F32(values), 1) = (&x.data, inner) {
        if (1..=SMALL_K).contains(&k) && k < len {
            let mut kept: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
            for (o, row) in values.chunks_exact(len).enumerate() {
                top_k_of_row(row, k, largest, &mut kept);
                for (n, &(_, a)) in kept.iter().enumerate() {
                    indices[o * k + n] = a as i64;
                    sources.push(o * len + a);
                }
            }
            let values = select(x, shape.clone(), &sources);
            return Ok(vec![
                values,
                RtTensor {
                    shape,
                    data: RtData::I64(indices),
                },
            ]);
        }
    }
    let keys: Vec<f64> = match &x.data {
        RtData::F32(v) => v.iter().map(|&e| e as f64).collect(),
        RtData::I64(v) => v.iter().map(|&e| e as f64).collect(),
    };
    let mut order: Vec<(f64, usize)> = Vec::with_capacity(len);
    for o in 0..outer {
        for i in 0..inner {
            let at = |a: usize| (o * len + a) * inner + i;
            order.clear();
            // Ties keep the lower index first, as the spec asks: with the index in the
            // comparison the order is total, so the k selected are exactly the k first of a
            // full sort, found in linear time and only they sorted (a 1000-wide row's full
            // sort was 67 µs).
            let before = |x: &(f64, usize), y: &(f64, usize)| {
                rank_values(x.0, y.0, largest).then(x.1.cmp(&y.1))
            };
            if k <= SMALL_K && k < len {
                // A few best kept sorted: most elements lose to the worst kept in one compare.
                for a in 0..len {
                    offer(&mut order, k, (keys[at(a)], a), before);
                }
            } else {
                order.extend((0..len).map(|a| (keys[at(a)], a)));
                if k > 0 && k < len {
                    order.select_nth_unstable_by(k - 1, before);
                }
                order[..k].sort_unstable_by(before);
            }
            for (n, &(_, a)) in order.iter().take(k).enumerate() {
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

/// Offers `candidate` to `kept`, the best `k` so far sorted by `before`: scanned in index order,
/// a candidate that does not come before the worst kept (a tie included) is dropped.
fn offer<T>(
    kept: &mut Vec<(T, usize)>,
    k: usize,
    candidate: (T, usize),
    before: impl Fn(&(T, usize), &(T, usize)) -> std::cmp::Ordering,
) {
    if kept.len() >= k {
        match kept.last() {
            Some(worst) if before(&candidate, worst).is_lt() => {
                kept.pop();
            }
            _ => return,
        }
    }
    let place = kept.partition_point(|entry| before(entry, &candidate).is_lt());
    kept.insert(place, candidate);
}

/// TopK's order of two values, best first: values that compare equal (−0 and +0 included) tie,
/// so the lower index goes first as the spec asks and onnxruntime's `>` comparisons do; NaNs,
/// which no comparison places, take `total_cmp`'s places (+NaN above +∞, −NaN below −∞).
fn rank_values(x: f64, y: f64, largest: bool) -> std::cmp::Ordering {
    if x == y {
        std::cmp::Ordering::Equal
    } else if largest {
        y.total_cmp(&x)
    } else {
        x.total_cmp(&y)
    }
}

/// The `k` best of one contiguous f32 row (1 ≤ k < row length), best first, ties by lower
/// index, in [`rank_values`]' order (the general path's). Once `k` are
/// kept, blocks of 16 are skipped when none of their values reaches the worst kept (one
/// vectorised compare per element); only blocks with a candidate, a tie or a NaN take the exact
/// insertion. Over 64 rows of 1000 with k = 5 the scan through f64 keys and `total_cmp` per
/// element took 273 µs, onnxruntime 57.
fn top_k_of_row(row: &[f32], k: usize, largest: bool, kept: &mut Vec<(f32, usize)>) {
    let before = |x: &(f32, usize), y: &(f32, usize)| {
        rank_values(f64::from(x.0), f64::from(y.0), largest).then(x.1.cmp(&y.1))
    };
    kept.clear();
    const BLOCK: usize = 16;
    for (block_index, block) in row.chunks(BLOCK).enumerate() {
        if kept.len() == k && !kept[k - 1].0.is_nan() {
            let worst = kept[k - 1].0;
            // A superset of the values that can enter: ties and NaNs go to the exact path.
            // (Against a NaN worst every compare is false, and a −NaN kept while largest is
            // asked for loses to everything: no block may be skipped.)
            let any = block.iter().fold(false, |any, &v| {
                any | v.is_nan() | if largest { v >= worst } else { v <= worst }
            });
            if !any {
                continue;
            }
        }
        for (offset, &value) in block.iter().enumerate() {
            offer(kept, k, (value, block_index * BLOCK + offset), before);
        }
    }
}

pub(super) fn one_hot(
    indices: &RtTensor,
    depth: &RtTensor,
    values: &RtTensor,
    axis: i64,
) -> Result<RtTensor> {
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

pub(super) fn space_to_depth(x: &RtTensor, block: i64, mode: &str) -> Result<RtTensor> {
    let [n, c, h, w] = x.shape[..] else {
        return Err("SpaceToDepth needs a 4-D input".into());
    };
    let b = block.max(1) as usize;
    if h % b != 0 || w % b != 0 {
        return Err("SpaceToDepth: spatial dims not divisible by the block".into());
    }
    let (oh, ow) = (h / b, w / b);
    let out_c = c * b * b;
    // DCR: the block offset is the outer part of the channel; CRD: the inner part.
    let perm = if mode == "CRD" {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    Ok(super::math::permuted(
        x,
        &[n, c, oh, b, ow, b],
        &perm,
        vec![n, out_c, oh, ow],
    ))
}

/// Pad in every mode (constant, reflect, edge, wrap), pads and value as attributes (before
/// opset 11) or inputs, an `axes` input (18+), negative pads cropping.
pub(super) fn pad(node: &Node, opset: i64, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let x = get(0).ok_or("no input")?;
    let rank = x.shape.len();
    let (given_pads, value) = if opset < 11 {
        (
            node.attrs
                .ints("pads")
                .map(<[i64]>::to_vec)
                .unwrap_or_default(),
            node.attrs.float_or("value", 0.0),
        )
    } else {
        (
            get(1).map(ints).unwrap_or_default(),
            get(2)
                .and_then(|v| floats(v).first().copied())
                .unwrap_or(0.0),
        )
    };
    let axes: Vec<usize> = match get(3) {
        Some(a) => ints(a)
            .iter()
            .map(|&axis| axis_of(axis, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if given_pads.len() != 2 * axes.len() {
        return Err(format!("{} pads for {} axes", given_pads.len(), axes.len()));
    }
    let (mut begin, mut end) = (vec![0i64; rank], vec![0i64; rank]);
    for (k, &axis) in axes.iter().enumerate() {
        begin[axis] = given_pads[k];
        end[axis] = given_pads[axes.len() + k];
    }
    let out_shape: Vec<usize> = (0..rank)
        .map(|d| {
            let size = x.shape[d] as i64 + begin[d] + end[d];
            usize::try_from(size).map_err(|_| "pads crop past the input".to_string())
        })
        .collect::<Result<_>>()?;
    let mode = node.attrs.string("mode").unwrap_or("constant");
    let in_strides = strides(&x.shape);
    let out_strides = strides(&out_shape);
    let count: usize = out_shape.iter().product();
    // Per output element: its source element, or None for the constant.
    let mut sources: Vec<Option<usize>> = Vec::with_capacity(count);
    for n in 0..count {
        let mut at = Some(0usize);
        for d in 0..rank {
            let dim = x.shape[d] as i64;
            let coord = (n / out_strides[d] % out_shape[d]) as i64 - begin[d];
            let source = if (0..dim).contains(&coord) {
                Some(coord)
            } else if dim == 0 {
                None
            } else {
                match mode {
                    "edge" => Some(coord.clamp(0, dim - 1)),
                    "wrap" => Some(coord.rem_euclid(dim)),
                    "reflect" if dim == 1 => Some(0),
                    "reflect" => {
                        let period = 2 * (dim - 1);
                        let folded = coord.rem_euclid(period);
                        Some(if folded < dim {
                            folded
                        } else {
                            period - folded
                        })
                    }
                    "constant" => None,
                    other => return Err(format!("unknown pad mode `{other}`")),
                }
            };
            at = match (at, source) {
                (Some(a), Some(s)) => Some(a + s as usize * in_strides[d]),
                _ => None,
            };
        }
        sources.push(at);
    }
    let data = match &x.data {
        RtData::F32(v) => RtData::F32(sources.iter().map(|s| s.map_or(value, |i| v[i])).collect()),
        RtData::I64(v) => RtData::I64(
            sources
                .iter()
                .map(|s| s.map_or(value as i64, |i| v[i]))
                .collect(),
        ),
    };
    Ok(RtTensor {
        shape: out_shape,
        data,
    })
}

/// Tile: every dim repeated its `repeats` times.
pub(super) fn tile(x: &RtTensor, repeats: &[i64]) -> Result<RtTensor> {
    if repeats.len() != x.shape.len() || repeats.iter().any(|&r| r < 0) {
        return Err("Tile: one non-negative repeat per dim".into());
    }
    let out_shape: Vec<usize> = x
        .shape
        .iter()
        .zip(repeats)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    let data = match &x.data {
        RtData::F32(v) => RtData::F32(tile_rows(v, &x.shape, &out_shape)),
        RtData::I64(v) => RtData::I64(tile_rows(v, &x.shape, &out_shape)),
    };
    Ok(RtTensor {
        shape: out_shape,
        data,
    })
}

/// Tile's copy, row by row: each output row is its source row (the outer indices modulo the
/// input's extents) repeated along the last axis. An index computation per element with a
/// division per axis was 130x onnxruntime.
fn tile_rows<T: Copy>(v: &[T], shape: &[usize], out_shape: &[usize]) -> Vec<T> {
    let count: usize = out_shape.iter().product();
    let rank = shape.len();
    if count == 0 || rank == 0 {
        return v[..count.min(v.len())].to_vec();
    }
    let in_strides = strides(shape);
    let (row_in, row_out) = (shape[rank - 1], out_shape[rank - 1]);
    let mut out = Vec::with_capacity(count);
    let mut index = vec![0usize; rank - 1];
    for _ in 0..count / row_out {
        let base: usize = (0..rank - 1)
            .map(|d| index[d] % shape[d] * in_strides[d])
            .sum();
        let line = &v[base..base + row_in];
        for _ in 0..row_out / row_in {
            out.extend_from_slice(line);
        }
        for d in (0..rank - 1).rev() {
            index[d] += 1;
            if index[d] < out_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// ReverseSequence: along `time_axis`, the first `sequence_lens[b]` entries of every batch `b`
/// (along `batch_axis`) reversed, the rest kept.
pub(super) fn reverse_sequence(node: &Node, x: &RtTensor, lengths: &RtTensor) -> Result<RtTensor> {
    let rank = x.shape.len();
    let time = axis_of(node.attrs.int_or("time_axis", 0), rank)?;
    let batch = axis_of(node.attrs.int_or("batch_axis", 1), rank)?;
    let lengths = ints(lengths);
    let x_strides = strides(&x.shape);
    let sources: Vec<usize> = (0..x.len())
        .map(|n| {
            let t = n / x_strides[time] % x.shape[time];
            let b = n / x_strides[batch] % x.shape[batch];
            let len = lengths
                .get(b)
                .copied()
                .unwrap_or(0)
                .clamp(0, x.shape[time] as i64) as usize;
            if t < len {
                n - t * x_strides[time] + (len - 1 - t) * x_strides[time]
            } else {
                n
            }
        })
        .collect();
    Ok(select(x, x.shape.clone(), &sources))
}
