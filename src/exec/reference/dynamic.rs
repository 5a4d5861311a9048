//! Reference kernels of the ops whose output shape depends on the data: NonZero, Compress,
//! Unique and NonMaxSuppression. The planner cannot size their outputs ahead of time; `roofline
//! run` plans a model holding them in stages (`exec::run_staged`): everything before such a
//! node runs, the node runs here on the values, and its outputs become constants of the rest.

use super::*;

/// NonZero: the [rank, count] coordinates of the non-zero elements, in row-major order.
pub(super) fn non_zero(x: &RtTensor) -> RtTensor {
    let rank = x.shape.len();
    let x_strides = strides(&x.shape);
    let hits: Vec<usize> = match &x.data {
        RtData::F32(v) => (0..v.len()).filter(|&n| v[n] != 0.0).collect(),
        RtData::I64(v) => (0..v.len()).filter(|&n| v[n] != 0).collect(),
    };
    let mut out = vec![0i64; rank * hits.len()];
    for (k, &n) in hits.iter().enumerate() {
        for d in 0..rank {
            out[d * hits.len() + k] = (n / x_strides[d] % x.shape[d]) as i64;
        }
    }
    RtTensor {
        shape: vec![rank, hits.len()],
        data: RtData::I64(out),
    }
}

/// Compress: the slices along `axis` (the flattened input without one) whose condition is true.
pub(super) fn compress(x: &RtTensor, condition: &RtTensor, axis: Option<i64>) -> Result<RtTensor> {
    let keep = ints(condition);
    let (shape, outer, len, inner) = match axis {
        Some(axis) => {
            let axis = axis_of(axis, x.shape.len())?;
            let (outer, len, inner) = around(&x.shape, axis);
            (x.shape.clone(), outer, len, inner)
        }
        None => (vec![x.len()], 1, x.len(), 1),
    };
    if keep.len() > len {
        return Err("Compress: the condition is longer than the axis".into());
    }
    let kept: Vec<usize> = (0..keep.len()).filter(|&a| keep[a] != 0).collect();
    let mut sources = Vec::with_capacity(outer * kept.len() * inner);
    for o in 0..outer {
        for &a in &kept {
            sources.extend((0..inner).map(|i| (o * len + a) * inner + i));
        }
    }
    let mut out_shape = shape;
    match axis {
        Some(axis) => out_shape[axis_of(axis, x.shape.len())?] = kept.len(),
        None => out_shape = vec![kept.len()],
    }
    Ok(select(x, out_shape, &sources))
}

/// Unique: the distinct elements (or slices along `axis`), sorted ascending or in order of first
/// occurrence, with the index of each one's first occurrence, each input's position in the
/// result, and the counts.
pub(super) fn unique(x: &RtTensor, axis: Option<i64>, sorted: bool) -> Result<Vec<RtTensor>> {
    let keys: Vec<f64> = match &x.data {
        RtData::F32(v) => v.iter().map(|&e| f64::from(e)).collect(),
        RtData::I64(v) => v.iter().map(|&e| e as f64).collect(),
    };
    let (outer, len, inner, axis) = match axis {
        Some(axis) => {
            let axis = axis_of(axis, x.shape.len())?;
            let (outer, len, inner) = around(&x.shape, axis);
            (outer, len, inner, Some(axis))
        }
        None => (1, x.len(), 1, None),
    };
    // Slice `a` along the axis, as a key.
    let slice = |a: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o * len + a) * inner + i))
            .map(|n| keys[n])
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..len).map(slice).collect();
    let mut firsts: Vec<usize> = Vec::new();
    for a in 0..len {
        if !firsts.iter().any(|&f| slices[f] == slices[a]) {
            firsts.push(a);
        }
    }
    if sorted {
        firsts.sort_by(|&p, &q| {
            slices[p]
                .iter()
                .zip(&slices[q])
                .map(|(x, y)| x.total_cmp(y))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    let inverse: Vec<i64> = (0..len)
        .map(|a| {
            firsts
                .iter()
                .position(|&f| slices[f] == slices[a])
                .unwrap_or(0) as i64
        })
        .collect();
    let counts: Vec<i64> = (0..firsts.len())
        .map(|u| inverse.iter().filter(|&&i| i as usize == u).count() as i64)
        .collect();
    let mut sources = Vec::with_capacity(outer * firsts.len() * inner);
    for o in 0..outer {
        for &a in &firsts {
            sources.extend((0..inner).map(|i| (o * len + a) * inner + i));
        }
    }
    let y_shape = match axis {
        Some(axis) => {
            let mut s = x.shape.clone();
            s[axis] = firsts.len();
            s
        }
        None => vec![firsts.len()],
    };
    let index_tensor = |values: Vec<i64>| RtTensor {
        shape: vec![values.len()],
        data: RtData::I64(values),
    };
    Ok(vec![
        select(x, y_shape, &sources),
        index_tensor(firsts.iter().map(|&f| f as i64).collect()),
        index_tensor(inverse),
        index_tensor(counts),
    ])
}

/// The corners (min y, min x, max y, max x) of a box in either of NonMaxSuppression's formats.
fn corners(b: &[f32], center_point_box: bool) -> [f32; 4] {
    if center_point_box {
        let (xc, yc, w, h) = (b[0], b[1], b[2], b[3]);
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

/// Whether two boxes overlap by more than `threshold` (intersection over union).
fn overlaps(a: [f32; 4], b: [f32; 4], threshold: f32) -> bool {
    let height = a[2].min(b[2]) - a[0].max(b[0]);
    let width = a[3].min(b[3]) - a[1].max(b[1]);
    if height <= 0.0 || width <= 0.0 {
        return false;
    }
    let intersection = height * width;
    let area = |c: [f32; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let union = area(a) + area(b) - intersection;
    if area(a) <= 0.0 || area(b) <= 0.0 || union <= 0.0 {
        return false;
    }
    intersection / union > threshold
}

/// NonMaxSuppression: per batch and class, boxes scoring above `score_threshold` taken in
/// descending score (ties: lower index first), each kept unless it overlaps a kept one by more
/// than `iou_threshold`, at most `max_output_boxes_per_class`; [selected, 3] (batch, class, box).
pub(super) fn non_max_suppression(node: &Node, inputs: &[Option<&RtTensor>]) -> Result<RtTensor> {
    let get = |i: usize| inputs.get(i).and_then(|t| *t);
    let (boxes, scores) = (get(0).ok_or("no boxes")?, get(1).ok_or("no scores")?);
    let [batches, count, 4] = boxes.shape[..] else {
        return Err("boxes must be [batch, boxes, 4]".into());
    };
    let [score_batches, classes, score_count] = scores.shape[..] else {
        return Err("scores must be [batch, classes, boxes]".into());
    };
    if score_batches != batches || score_count != count {
        return Err("boxes and scores disagree".into());
    }
    let max_per_class = get(2)
        .and_then(|t| ints(t).first().copied())
        .unwrap_or(0)
        .max(0) as usize;
    let iou = get(3)
        .and_then(|t| floats(t).first().copied())
        .unwrap_or(0.0);
    let score_threshold = get(4).and_then(|t| floats(t).first().copied());
    let center = node.attrs.int_or("center_point_box", 0) != 0;
    let (box_values, score_values) = (floats(boxes), floats(scores));
    let mut selected: Vec<i64> = Vec::new();
    for b in 0..batches {
        let box_corners: Vec<[f32; 4]> = (0..count)
            .map(|i| corners(&box_values[(b * count + i) * 4..][..4], center))
            .collect();
        for c in 0..classes {
            let class_scores = &score_values[(b * classes + c) * count..][..count];
            let mut candidates: Vec<usize> = (0..count)
                .filter(|&i| score_threshold.is_none_or(|t| class_scores[i] > t))
                .collect();
            candidates
                .sort_by(|&p, &q| class_scores[q].total_cmp(&class_scores[p]).then(p.cmp(&q)));
            let mut kept: Vec<usize> = Vec::new();
            for i in candidates {
                if kept.len() >= max_per_class {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| !overlaps(box_corners[i], box_corners[k], iou))
                {
                    kept.push(i);
                    selected.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    Ok(RtTensor {
        shape: vec![selected.len() / 3, 3],
        data: RtData::I64(selected),
    })
}
