//! NumPy broadcasting for the reference kernels: the broadcast shape, the element of an
//! operand at an output coordinate, and element-wise maps over two broadcast operands
//! (integer Add/Sub/Mul, the bitwise ops).

use super::{float_values, int_values, strides, Result};
use crate::exec::{RtData, RtTensor};
use crate::kernels::elementwise::broadcast_strides;

pub(super) fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
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
pub(super) fn broadcast_index(
    linear: usize,
    out: &[usize],
    out_strides: &[usize],
    shape: &[usize],
) -> usize {
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

pub(super) fn broadcast_ints(
    a: &RtTensor,
    b: &RtTensor,
    f: impl Fn(i64, i64) -> i64,
) -> Result<RtTensor> {
    let (va, vb) = (int_values(a), int_values(b));
    let (shape, data) = broadcast_map(&va, &a.shape, &vb, &b.shape, f)?;
    Ok(RtTensor {
        shape,
        data: RtData::I64(data),
    })
}

/// `f` over two operands broadcast numpy-style, with their broadcast shape. The output is
/// walked row by row along its last axis, each operand's row start found by carrying an
/// odometer over the outer axes (a division per axis per element had made a 98 k-element
/// integer bias Add of a quantized convolution take 1.5 ms).
pub(super) fn broadcast_map<T: Copy, U>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    f: impl Fn(T, T) -> U,
) -> Result<(Vec<usize>, Vec<U>)> {
    let shape = broadcast_shape(a_shape, b_shape)?;
    let count: usize = shape.iter().product();
    if a.len() != a_shape.iter().product::<usize>() || b.len() != b_shape.iter().product::<usize>()
    {
        return Err("an operand's length disagrees with its shape".into());
    }
    let mut out = Vec::with_capacity(count);
    if count == 0 {
        return Ok((shape, out));
    }
    // Each operand's stride along every output axis, 0 where it is broadcast.
    let (sa, sb) = (
        broadcast_strides(a_shape, &shape),
        broadcast_strides(b_shape, &shape),
    );
    let rank = shape.len();
    let (row, step_a, step_b) = match rank {
        0 => (1, 0, 0),
        _ => (shape[rank - 1], sa[rank - 1], sb[rank - 1]),
    };
    let outer = rank.saturating_sub(1);
    let mut coords = vec![0usize; outer];
    let (mut base_a, mut base_b) = (0usize, 0usize);
    for _ in 0..count / row {
        match (step_a, step_b) {
            (1, 1) => out.extend(
                a[base_a..base_a + row]
                    .iter()
                    .zip(&b[base_b..base_b + row])
                    .map(|(&x, &y)| f(x, y)),
            ),
            (1, 0) => {
                let y = b[base_b];
                out.extend(a[base_a..base_a + row].iter().map(|&x| f(x, y)));
            }
            (0, 1) => {
                let x = a[base_a];
                out.extend(b[base_b..base_b + row].iter().map(|&y| f(x, y)));
            }
            _ => out.extend((0..row).map(|i| f(a[base_a + i * step_a], b[base_b + i * step_b]))),
        }
        // Carry the odometer over the outer axes.
        for d in (0..outer).rev() {
            coords[d] += 1;
            base_a += sa[d];
            base_b += sb[d];
            if coords[d] < shape[d] {
                break;
            }
            base_a -= sa[d] * shape[d];
            base_b -= sb[d] * shape[d];
            coords[d] = 0;
        }
    }
    Ok((shape, out))
}

/// Add, Sub or Mul of two tensors of one kind: integers wrap (to i64 here, to their own width
/// by the caller), floats in f32 as the planned kernels compute them. Quantized models add
/// int32 biases to ConvInteger and MatMulInteger outputs this way.
pub(super) fn arithmetic(op: &str, a: &RtTensor, b: &RtTensor) -> Result<RtTensor> {
    // One monomorphised loop per op: through a `fn` pointer every element was an indirect
    // call that nothing inlines or vectorises (a quantized convolution's int32 bias Add over
    // 98 k elements took 0.3 ms, 3.5 ns an element).
    if let (RtData::I64(_), RtData::I64(_)) = (&a.data, &b.data) {
        return match op {
            "Add" => broadcast_ints(a, b, i64::wrapping_add),
            "Sub" => broadcast_ints(a, b, i64::wrapping_sub),
            _ => broadcast_ints(a, b, i64::wrapping_mul),
        };
    }
    let (x, y) = (float_values(a), float_values(b));
    let (x_shape, y_shape) = (&a.shape, &b.shape);
    let (shape, values) = match op {
        "Add" => broadcast_map(&x, x_shape, &y, y_shape, |p, q| p + q)?,
        "Sub" => broadcast_map(&x, x_shape, &y, y_shape, |p, q| p - q)?,
        _ => broadcast_map(&x, x_shape, &y, y_shape, |p, q| p * q)?,
    };
    Ok(RtTensor {
        shape,
        data: RtData::F32(values),
    })
}
