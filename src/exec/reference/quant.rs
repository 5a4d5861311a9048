//! Reference kernels of the dynamic-quantization ops onnxruntime's `quantize_dynamic` writes:
//! DynamicQuantizeLinear (u8 with a scale and zero point from the tensor's own range),
//! MatMulInteger and ConvInteger (exact integer products, i32 results).

use super::*;
use crate::analysis::ops::spatial::ConvConfig;
use crate::kernels::conv::{conv2d, ConvEpilogue};
use crate::kernels::gemm::Activation;
use crate::kernels::integer;

/// DynamicQuantizeLinear: scale = (max(0, max x) − min(0, min x)) / 255, zero point =
/// round(−min / scale) saturated to [0, 255], y = saturate(round(x / scale) + zero point), with
/// round-half-to-even throughout (the spec's rounding).
pub(super) fn dynamic_quantize(x: &RtTensor) -> Result<Vec<RtTensor>> {
    let copied;
    let values: &[f32] = match &x.data {
        RtData::F32(v) => v,
        RtData::I64(_) => {
            copied = floats(x);
            &copied
        }
    };
    // Sixteen running minima and maxima (they vectorise; one running value per bound was a
    // dependent chain), then the range always including zero as the spec asks.
    let (mut lows, mut highs) = ([0f32; 16], [0f32; 16]);
    let chunks = values.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for ((low, high), &v) in lows.iter_mut().zip(highs.iter_mut()).zip(chunk) {
            *low = low.min(v);
            *high = high.max(v);
        }
    }
    let min = lows.iter().chain(tail).copied().fold(0.0f32, f32::min);
    let max = highs.iter().chain(tail).copied().fold(0.0f32, f32::max);
    let scale = (max - min) / 255.0;
    let zero_point = if scale == 0.0 {
        0.0
    } else {
        (-min / scale).round_ties_even().clamp(0.0, 255.0)
    };
    // round(x / scale) by adding and removing 1.5·2^23 (ties to even, exact in the clamped
    // range), not `round_ties_even`, a `rintf` call per element without SSE4.1: with the
    // running bounds it made the op 18 ns an element (600 ms on IS-Net's largest tensor).
    const ROUND: f32 = 12_582_912.0;
    let divisor = if scale == 0.0 { f32::INFINITY } else { scale };
    let quantized = values
        .iter()
        .map(|&v| {
            let q = ((v / divisor).clamp(-512.0, 512.0) + ROUND) - ROUND;
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
    let (av, bv) = (ints(a), int_values(b));
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
    // Register-tiled products of i16 operands (`kernels::integer`): both sides less their zero
    // points, A's rows with K padded to even, B packed into strips of columns by one streaming
    // pass over its rows (a quarter of B's i64 size; for ddddocr about 5 ms of packing, most
    // of it reading the i64 constant, and 3.5 ms of products). Earlier forms: a dot product striding down B's columns in i64
    // (600 ms for ddddocr's 32×1024×8210 product), row updates over blocks of columns
    // (122 ms, 67 with the vectorized loop, 18 once the generic path lent B instead of
    // copying it per run).
    let k_even = k + k % 2;
    let b_matrices: usize = batch_b.iter().product();
    let column_zeros: Vec<i64> = (0..n).map(b_zero_at).collect();
    let a_matrices: usize = batch_a.iter().product();
    let mut a_centred = vec![0i16; a_matrices * m * k_even];
    for (row, centred) in a_centred.chunks_exact_mut(k_even).enumerate() {
        let zero = a_zero_at(row % m);
        for (value, &q) in centred.iter_mut().zip(&av[row * k..][..k]) {
            *value = (q - zero) as i16;
        }
    }
    let mut out = vec![0i32; batches * m * n];
    let strip_count = n.div_ceil(integer::STRIP);
    let mut strips = vec![0i16; strip_count * k_even * integer::STRIP];
    // One B for every batch of A (a weight): A's batches are rows of one product, so B is
    // streamed once, not once per batch (ddddocr multiplies 32 batches of one row each).
    let shared_b = b_matrices == 1 && a_matrices == batches;
    let (groups, rows) = if shared_b {
        (1, batches * m)
    } else {
        (batches, m)
    };
    for p in 0..groups {
        let (pa, pb) = if shared_b {
            (0, 0)
        } else {
            (
                broadcast_index(p, &batch, &batch_strides, batch_a),
                broadcast_index(p, &batch, &batch_strides, batch_b),
            )
        };
        let a_group = &a_centred[pa * rows * k_even..][..rows * k_even];
        let b_matrix = &bv[pb * k * n..][..k * n];
        let out_matrix = &mut out[p * rows * n..][..rows * n];
        pack_strips(&mut strips, b_matrix, k, n, &column_zeros);
        for (index, strip) in strips.chunks_exact(k_even * integer::STRIP).enumerate() {
            let start = index * integer::STRIP;
            let width = integer::STRIP.min(n - start);
            integer::strip_product(
                a_group,
                rows,
                k_even,
                strip,
                width,
                &mut out_matrix[start..],
                n,
            );
        }
    }
    let out: Vec<i64> = out.into_iter().map(i64::from).collect();
    let mut shape = batch;
    shape.extend([m, n]);
    Ok(RtTensor {
        shape,
        data: RtData::I64(out),
    })
}

/// All of B (`k × n`, less its column zero points) as `integer::strip_product`'s strips,
/// one after the other: B's rows are read in order, two at a time (a pair of rows makes each
/// strip's next 2·STRIP values), so the read streams; reading each strip's columns down all
/// of B instead cost twice the products' time.
fn pack_strips(strips: &mut [i16], b: &[i64], k: usize, n: usize, zeros: &[i64]) {
    let k_even = k + k % 2;
    for kp in 0..k_even / 2 {
        let even = &b[2 * kp * n..][..n];
        let odd = (2 * kp + 1 < k).then(|| &b[(2 * kp + 1) * n..][..n]);
        interleave_pair(strips, k_even * integer::STRIP, kp, even, odd, &zeros[..n]);
    }
}

crate::kernels::simd::multiversion! {
    /// Rows `2kp` (`even`) and `2kp + 1` (`odd`, zeros without one) of B less their zero
    /// points into every strip (`strip_len` values each): column `c` of the pair goes to strip
    /// `c / STRIP` at `kp · 2·STRIP + 2·(c % STRIP)` (+ 1 for the odd row).
    fn interleave_pair(
        strips: &mut [i16],
        strip_len: usize,
        kp: usize,
        even: &[i64],
        odd: Option<&[i64]>,
        zeros: &[i64],
    ) {
        const STRIP: usize = integer::STRIP;
        let n = even.len();
        for (index, strip) in strips.chunks_exact_mut(strip_len).enumerate() {
            let start = index * STRIP;
            let width = STRIP.min(n - start);
            let target = &mut strip[kp * 2 * STRIP..][..2 * STRIP];
            let (even, zeros) = (&even[start..start + width], &zeros[start..start + width]);
            match odd {
                Some(odd) => {
                    let odd = &odd[start..start + width];
                    for c in 0..width {
                        target[2 * c] = (even[c] - zeros[c]) as i16;
                        target[2 * c + 1] = (odd[c] - zeros[c]) as i16;
                    }
                }
                None => {
                    for c in 0..width {
                        target[2 * c] = (even[c] - zeros[c]) as i16;
                        target[2 * c + 1] = 0;
                    }
                }
            }
            target[2 * width..].fill(0);
        }
    }
}

/// ConvInteger (1-D or 2-D): (x − x_zero_point) ⊛ (w − w_zero_point) in integers over the
/// window Conv's attributes resolve to (`ConvConfig`: pads, `auto_pad`, strides, dilations,
/// groups); the weight zero point is a scalar or one per output channel.
pub(super) fn conv_integer(
    node: &Node,
    x: &RtTensor,
    w: &RtTensor,
    x_zero: Option<&RtTensor>,
    w_zero: Option<&RtTensor>,
) -> Result<RtTensor> {
    // 1-D as 2-D with one row.
    let lift = |shape: &[usize]| -> Result<[usize; 4]> {
        match *shape {
            [a, b, h, w] => Ok([a, b, h, w]),
            [a, b, w] => Ok([a, b, 1, w]),
            _ => Err(format!(
                "ConvInteger: only 1-D and 2-D convolutions run (shape {shape:?})"
            )),
        }
    };
    let spatial = x.shape.len().saturating_sub(2);
    let [n, c, _, _] = lift(&x.shape)?;
    let [m, cg, kh, kw] = lift(&w.shape)?;
    // The window as Conv resolves it (pads, `auto_pad`, strides, dilations), 1-D as one row.
    let config = ConvConfig::parse(&node.attrs)?;
    let group = config.group.max(1) as usize;
    if cg * group != c || m % group != 0 || w.shape.len() != x.shape.len() {
        return Err(format!(
            "ConvInteger: X {:?} and W {:?} with {group} groups do not match",
            x.shape, w.shape
        ));
    }
    let to_u64 = |dims: &[usize]| dims.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let full_window = config.window(&to_u64(&x.shape[2..]), &to_u64(&w.shape[2..]))?;
    let window = full_window
        .to_2d()
        .ok_or("ConvInteger: only 1-D and 2-D convolutions run")?;
    let [oh, ow] = window.output;
    let x_zero = x_zero
        .map(ints)
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    let w_zeros = w_zero.map(ints).unwrap_or_else(|| vec![0]);
    if w_zeros.len() != 1 && w_zeros.len() != m {
        return Err(format!(
            "ConvInteger: {} weight zero points for {m} output channels",
            w_zeros.len()
        ));
    }
    // The zero-point-shifted operands as floats through the f32 convolution kernel: every
    // product is an integer of at most 2^16 and every partial sum stays exact while it is
    // below 2^24 (past that, the f32 rounding is the one the Cast after a ConvInteger applies
    // anyway). A loop in i32 took over five minutes on IS-Net's 119 dynamic-quantized
    // convolutions at 1024x1024; this is the float model's time.
    let xs: Vec<f32> = int_values(x).iter().map(|&v| (v - x_zero) as f32).collect();
    let per_out = cg * kh * kw;
    let ws: Vec<f32> = int_values(w)
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let zero = w_zeros[if w_zeros.len() == 1 { 0 } else { k / per_out }];
            (v - zero) as f32
        })
        .collect();
    let mut shape = vec![n, m];
    if spatial == 2 {
        shape.push(oh);
    }
    shape.push(ow);
    // The same geometry a Conv of these shapes lowers to (1-D as one row).
    let geom = crate::exec::lower::conv::conv2d(&x.shape, &shape, &full_window, group as u64)?;
    let mut sums = vec![0f32; n * m * oh * ow];
    let mut scratch = vec![0f32; geom.scratch_len()];
    let epilogue = ConvEpilogue {
        bias: None,
        residual: None,
        activation: Activation::None,
    };
    conv2d(&geom, &xs, &ws, &epilogue, &mut sums, &mut scratch, 1);
    // Rounded to the i32 the spec's output holds, stored as the reference's int64.
    let out: Vec<i64> = sums.iter().map(|&v| i64::from(v.round() as i32)).collect();
    Ok(RtTensor {
        shape,
        data: RtData::I64(out),
    })
}

#[cfg(test)]
mod tests {
    //! Hand-computed ConvInteger cases; MatMulInteger against the spec's formula.

    use super::*;
    use crate::analysis::graph::{Attr, Attributes, Node};

    fn tensor(shape: &[usize], values: &[i64]) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::I64(values.to_vec()),
        }
    }

    /// The blocked product against `Σ_q (a[i,q] − za[i]) · (b[q,j] − zb[j])` element by
    /// element: a depth that is no multiple of the 4 rows taken at a time, per-row and
    /// per-column zero points, one B shared by A's batches, and a B with batches of its own.
    #[test]
    fn matmul_integer_matches_the_formula() {
        // Odd K, a partial strip of columns, and several strips with an odd K past 64.
        for (m, k, n) in [(3, 5, 7), (5, 67, 70)] {
            check_matmul_integer(m, k, n);
        }
    }

    fn check_matmul_integer(m: usize, k: usize, n: usize) {
        let value = |index: usize, modulus: usize| ((index * 37 + 11) % modulus) as i64;
        let a_values: Vec<i64> = (0..2 * m * k).map(|i| value(i, 256)).collect();
        let a_zero: Vec<i64> = (0..m).map(|i| [3, 128, 250][i % 3]).collect();
        let b_zero: Vec<i64> = (0..n).map(|j| value(j + 5, 256)).collect();
        let expected = |a: &[i64], b: &[i64], batch: usize, b_batch: usize| -> Vec<i64> {
            let mut out = Vec::new();
            for p in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let sum: i64 = (0..k)
                            .map(|q| {
                                (a[(p * m + i) * k + q] - a_zero[i])
                                    * (b[(p % b_batch * k + q) * n + j] - b_zero[j])
                            })
                            .sum();
                        out.push(sum);
                    }
                }
            }
            out
        };
        let a = tensor(&[2, m, k], &a_values);
        let (a_zeros, b_zeros) = (tensor(&[m], &a_zero), tensor(&[n], &b_zero));
        for b_batch in [1, 2] {
            let b_values: Vec<i64> = (0..b_batch * k * n).map(|i| value(i + 3, 256)).collect();
            let b_shape: Vec<usize> = if b_batch == 1 {
                vec![k, n]
            } else {
                vec![b_batch, k, n]
            };
            let b = tensor(&b_shape, &b_values);
            let out = matmul_integer(&a, &b, Some(&a_zeros), Some(&b_zeros)).unwrap();
            assert_eq!(out.shape, [2, m, n]);
            let RtData::I64(values) = &out.data else {
                panic!("integers expected")
            };
            assert_eq!(
                values,
                &expected(&a_values, &b_values, 2, b_batch),
                "B batches {b_batch}"
            );
        }
    }

    fn conv(attrs: &[(&str, Attr)]) -> Node {
        let mut attributes = Attributes::default();
        for (name, value) in attrs {
            attributes.0.insert(name.to_string(), value.clone());
        }
        Node {
            name: "conv".into(),
            op_type: "ConvInteger".into(),
            domain: String::new(),
            attrs: attributes,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn values(t: &RtTensor) -> Vec<i64> {
        ints(t)
    }

    #[test]
    fn conv_integer_subtracts_both_zero_points() {
        // x 3×3 = 1..9 with zero point 1 → 0..8; w 2×2 = [[2, 3], [4, 5]] with zero point 2 →
        // [[0, 1], [2, 3]]. Output (0,0) = 0·0 + 1·1 + 3·2 + 4·3 = 19; (0,1) = 1·0 + 2·1 + 4·2
        // + 5·3 = 25; (1,0) = 3·0 + 4·1 + 6·2 + 7·3 = 37; (1,1) = 43.
        let x = tensor(&[1, 1, 3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let w = tensor(&[1, 1, 2, 2], &[2, 3, 4, 5]);
        let out = conv_integer(
            &conv(&[]),
            &x,
            &w,
            Some(&tensor(&[], &[1])),
            Some(&tensor(&[], &[2])),
        )
        .unwrap();
        assert_eq!(out.shape, [1, 1, 2, 2]);
        assert_eq!(values(&out), [19, 25, 37, 43]);
    }

    #[test]
    fn conv_integer_pads_strides_and_per_channel_zero_points() {
        // x 3×3 = 1..9 (no zero point), two 3×3 filters of ones with zero points 0 and 1 (the
        // second all zeros), pads 1, stride 2: output 2×2 per channel, each a 3×3 window sum
        // around (0,0), (0,2), (2,0), (2,2): 1+2+4+5 = 12, 2+3+5+6 = 16, 4+5+7+8 = 24, 28.
        let x = tensor(&[1, 1, 3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let w = tensor(&[2, 1, 3, 3], &[1; 18]);
        let node = conv(&[
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("strides", Attr::Ints(vec![2, 2])),
        ]);
        let out = conv_integer(&node, &x, &w, None, Some(&tensor(&[2], &[0, 1]))).unwrap();
        assert_eq!(out.shape, [1, 2, 2, 2]);
        assert_eq!(values(&out), [12, 16, 24, 28, 0, 0, 0, 0]);
        // SAME_UPPER at stride 1 keeps the size: the centre is the whole 3×3 sum, 45.
        let same = conv(&[("auto_pad", Attr::String("SAME_UPPER".into()))]);
        let out = conv_integer(&same, &x, &tensor(&[1, 1, 3, 3], &[1; 9]), None, None).unwrap();
        assert_eq!(out.shape, [1, 1, 3, 3]);
        assert_eq!(values(&out)[4], 45);
        assert_eq!(values(&out)[0], 12);
    }

    #[test]
    fn conv_integer_in_one_dimension_with_groups() {
        // Two channels [1, 2, 3, 4] and [10, 20, 30, 40], two groups, kernel [1, -1] each:
        // differences of neighbours, per channel.
        let x = tensor(&[1, 2, 4], &[1, 2, 3, 4, 10, 20, 30, 40]);
        let w = tensor(&[2, 1, 2], &[1, -1, 1, -1]);
        let node = conv(&[("group", Attr::Int(2))]);
        let out = conv_integer(&node, &x, &w, None, None).unwrap();
        assert_eq!(out.shape, [1, 2, 3]);
        assert_eq!(values(&out), [-1, -1, -1, -10, -10, -10]);
        // Mismatched channels are an error, not a panic.
        let bad = tensor(&[2, 3, 2], &[0; 12]);
        assert!(conv_integer(&node, &x, &bad, None, None).is_err());
    }
}
