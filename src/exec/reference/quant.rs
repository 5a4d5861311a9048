//! Reference kernels of the dynamic-quantization ops onnxruntime's `quantize_dynamic` writes:
//! DynamicQuantizeLinear (u8 with a scale and zero point from the tensor's own range) and
//! MatMulInteger (exact integer products, i32 results).

use super::*;

/// DynamicQuantizeLinear: scale = (max(0, max x) − min(0, min x)) / 255, zero point =
/// round(−min / scale) saturated to [0, 255], y = saturate(round(x / scale) + zero point), with
/// round-half-to-even throughout (the spec's rounding).
pub(super) fn dynamic_quantize(x: &RtTensor) -> Result<Vec<RtTensor>> {
    let values = floats(x);
    let max = values.iter().copied().fold(0.0f32, f32::max);
    let min = values.iter().copied().fold(0.0f32, f32::min);
    let scale = (max - min) / 255.0;
    let zero_point = if scale == 0.0 {
        0.0
    } else {
        (-min / scale).round_ties_even().clamp(0.0, 255.0)
    };
    let quantized = values
        .iter()
        .map(|&v| {
            let q = if scale == 0.0 {
                0.0
            } else {
                (v / scale).round_ties_even()
            };
            (q + zero_point).clamp(0.0, 255.0) as i64
        })
        .collect();
    Ok(vec![
        RtTensor {
            shape: x.shape.clone(),
            data: RtData::I64(quantized),
        },
        RtTensor {
            shape: Vec::new(),
            data: RtData::F32(vec![scale]),
        },
        RtTensor {
            shape: Vec::new(),
            data: RtData::I64(vec![zero_point as i64]),
        },
    ])
}

/// MatMulInteger: (A − a_zero_point) · (B − b_zero_point) in integers (NumPy matmul
/// broadcasting; a per-row A zero point or per-column B zero point as the spec allows).
pub(super) fn matmul_integer(
    a: &RtTensor,
    b: &RtTensor,
    a_zero: Option<&RtTensor>,
    b_zero: Option<&RtTensor>,
) -> Result<RtTensor> {
    if a.shape.len() < 2 || b.shape.len() < 2 {
        return Err("MatMulInteger: operands of rank 2 or more have a reference".into());
    }
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, k) = (a.shape[ra - 2], a.shape[ra - 1]);
    let (k2, n) = (b.shape[rb - 2], b.shape[rb - 1]);
    if k != k2 {
        return Err(format!("MatMulInteger: inner dims {k} and {k2} differ"));
    }
    let batch_a = &a.shape[..ra - 2];
    let batch_b = &b.shape[..rb - 2];
    let batch = broadcast_shape(batch_a, batch_b)?;
    let batch_strides = strides(&batch);
    let batches: usize = batch.iter().product();
    let (av, bv) = (ints(a), ints(b));
    let a_zeros = a_zero.map(ints).unwrap_or_else(|| vec![0]);
    let b_zeros = b_zero.map(ints).unwrap_or_else(|| vec![0]);
    let a_zero_at = |row: usize| {
        a_zeros[if a_zeros.len() == 1 {
            0
        } else {
            row % a_zeros.len()
        }]
    };
    let b_zero_at = |col: usize| {
        b_zeros[if b_zeros.len() == 1 {
            0
        } else {
            col % b_zeros.len()
        }]
    };
    let mut out = vec![0i64; batches * m * n];
    for p in 0..batches {
        let pa = broadcast_index(p, &batch, &batch_strides, batch_a);
        let pb = broadcast_index(p, &batch, &batch_strides, batch_b);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0i64;
                for q in 0..k {
                    acc += (av[(pa * m + i) * k + q] - a_zero_at(i))
                        * (bv[(pb * k + q) * n + j] - b_zero_at(j));
                }
                out[(p * m + i) * n + j] = acc;
            }
        }
    }
    let mut shape = batch;
    shape.extend([m, n]);
    Ok(RtTensor {
        shape,
        data: RtData::I64(out),
    })
}
