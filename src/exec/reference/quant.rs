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
    let (min, max) = range_with_zero(values);
    let scale = (max - min) / 255.0;
    let zero_point = if scale == 0.0 {
        0.0
    } else {
        (-min / scale).round_ties_even().clamp(0.0, 255.0)
    };
    let divisor = if scale == 0.0 { f32::INFINITY } else { scale };
    let mut quantized = vec![0i64; values.len()];
    quantize_dynamic(values, divisor, zero_point, &mut quantized);
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

crate::kernels::simd::multiversion! {
    /// The smallest and largest value of `values` and 0 (DynamicQuantizeLinear's range).
    fn range_with_zero(values: &[f32]) -> (f32, f32) {
        // Sixteen running minima and maxima (they vectorise; one running value per bound was a
        // dependent chain).
        let (mut lows, mut highs) = ([0f32; 16], [0f32; 16]);
        let chunks = values.chunks_exact(16);
        let tail = chunks.remainder();
        // Comparisons rather than `f32::min`/`max`, whose NaN rule kept the loop scalar (a NaN
        // compares false either way, so it is skipped as `min` would skip it).
        for chunk in chunks {
            for ((low, high), &v) in lows.iter_mut().zip(highs.iter_mut()).zip(chunk) {
                *low = if v < *low { v } else { *low };
                *high = if v > *high { v } else { *high };
            }
        }
        let min = lows.iter().chain(tail).copied().fold(0.0f32, f32::min);
        let max = highs.iter().chain(tail).copied().fold(0.0f32, f32::max);
        (min, max)
    }
}

crate::kernels::simd::multiversion! {
    /// `out[i] = saturate(round(values[i] / divisor) + zero_point)` to 0..=255.
    fn quantize_dynamic(values: &[f32], divisor: f32, zero_point: f32, out: &mut [i64]) {
        // round(x / scale) by adding and removing 1.5·2^23 (ties to even, exact in the clamped
        // range), not `round_ties_even`, a `rintf` call per element without SSE4.1: with the
        // running bounds it made the op 18 ns an element (600 ms on IS-Net's largest tensor).
        // The integer is read from the bits of `y + 2^23` (exact for 0 ≤ y ≤ 255): a float
        // cast saturates and maps NaN to 0 element by element, which kept the loop scalar.
        const ROUND: f32 = 12_582_912.0;
        const TWO_POW_23: f32 = 8_388_608.0;
        for (q, &v) in out.iter_mut().zip(values) {
            let scaled = v / divisor;
            // NaN compares false and lands on 0, as the cast put it.
            let scaled = if scaled >= -512.0 { scaled.min(512.0) } else { -512.0 };
            let y = ((scaled + ROUND) - ROUND) + zero_point;
            let y = if y > 0.0 { y } else { 0.0 };
            let y = if y < 255.0 { y } else { 255.0 };
            *q = i64::from((y + TWO_POW_23).to_bits() as i32 - TWO_POW_23.to_bits() as i32);
        }
    }
}

/// MatMulInteger: (A − a_zero_point) · (B − b_zero_point) in integers (NumPy matmul
/// broadcasting; a per-row A zero point or per-column B zero point as the spec allows).
pub(super) fn matmul_integer(
    a: &RtTensor,
    b: &RtTensor,
    a_zero: Option<&RtTensor>,
    b_zero: Option<&RtTensor>,
) -> Result<RtTensor> {
    matmul_integer_packed(a, a_zero, &pack_integer_b(b, b_zero, false)?, 1)
}

/// MatMulInteger's B less its zero points, packed for `kernels::integer::strip_product`:
/// once per call, or once per plan when B and its zero point are constants (a weight).
#[derive(Debug)]
pub(crate) struct PackedIntegerB {
    k: usize,
    n: usize,
    /// B's batch dims (empty for a weight).
    batch: Vec<usize>,
    /// Per B matrix, its strips one after the other.
    strips: Vec<i16>,
    /// A single B (a weight) packed for the int8 GEMM too, where the CPU has VNNI.
    int8: Option<crate::kernels::qgemm::IntegerDenseWeights>,
}

impl PackedIntegerB {
    /// Bytes the packed form holds.
    pub(crate) fn bytes(&self) -> u64 {
        (self.strips.len() * std::mem::size_of::<i16>()) as u64
            + self.int8.as_ref().map_or(0, |w| w.bytes())
    }

    fn matrix_len(&self) -> usize {
        self.n.div_ceil(integer::STRIP) * (self.k + self.k % 2) * integer::STRIP
    }
}

/// Whether every value is an 8-bit integer (u8 or i8): the operands' types, and the range in
/// which differences of two fit i16 and sums of two of their products fit i32 exactly.
fn eight_bit(values: &[i64]) -> bool {
    range_in_eight_bits(crate::kernels::elementwise::i64_range(values))
}

/// Whether values spanning `(lowest, highest)` (as `i64_range` gives them: none span
/// `(i64::MAX, i64::MIN)`) all lie in −128..=255.
fn range_in_eight_bits((lowest, highest): (i64, i64)) -> bool {
    lowest >= -128 && highest <= 255
}

/// A zero point's value for element `index` of a dimension of `len` inside `matrices`
/// matrices: a scalar, one per element (`[len]`), or one per element of every matrix
/// (`[D…, len, 1]` for A's rows, `[D…, 1, len]` for B's columns), as the spec allows;
/// anything else is refused.
fn zero_points(zeros: &[i64], len: usize, matrices: usize, what: &str) -> Result<Vec<i64>> {
    match zeros.len() {
        1 => Ok(vec![zeros[0]; matrices * len]),
        l if l == len => Ok((0..matrices * len).map(|i| zeros[i % len]).collect()),
        l if l == matrices * len => Ok(zeros.to_vec()),
        l => Err(format!(
            "MatMulInteger: {l} {what} zero points for {matrices} matrices of {len}"
        )),
    }
}

/// B (rank 2 or more) packed into strips, each matrix less its per-column (or scalar) zero
/// point: B's rows read once, in order (see `pack_strips`). `for_plan`: packed once for every
/// run (a weight), so a single B is packed for the int8 GEMM too; a B packed per call is not
/// packed twice.
pub(super) fn pack_integer_b(
    b: &RtTensor,
    b_zero: Option<&RtTensor>,
    for_plan: bool,
) -> Result<PackedIntegerB> {
    let rb = b.shape.len();
    if rb < 2 {
        return Err("MatMulInteger: operands of rank 2 or more have a reference".into());
    }
    let (k, n) = (b.shape[rb - 2], b.shape[rb - 1]);
    let b_zeros = b_zero.map(ints).unwrap_or_else(|| vec![0]);
    let bv = int_values(b);
    if !eight_bit(&bv) || !eight_bit(&b_zeros) {
        return Err("MatMulInteger: B or its zero point is outside the 8-bit range".into());
    }
    let mut packed = PackedIntegerB {
        k,
        n,
        batch: b.shape[..rb - 2].to_vec(),
        strips: Vec::new(),
        int8: None,
    };
    let matrices: usize = packed.batch.iter().product();
    if bv.len() != matrices * k * n {
        return Err(format!(
            "MatMulInteger: B's data disagrees with its shape {:?}",
            b.shape
        ));
    }
    let column_zeros = zero_points(&b_zeros, n, matrices, "B column")?;
    let matrix_len = packed.matrix_len();
    packed.strips = vec![0i16; matrices * matrix_len];
    if k * n > 0 {
        for (index, (matrix, strips)) in bv
            .chunks_exact(k * n)
            .zip(packed.strips.chunks_exact_mut(matrix_len.max(1)))
            .enumerate()
        {
            pack_strips(strips, matrix, k, n, &column_zeros[index * n..][..n]);
        }
    }
    if matrices == 1 && for_plan {
        let centred: Vec<i64> = bv
            .iter()
            .enumerate()
            .map(|(i, &v)| v - column_zeros[i % n])
            .collect();
        packed.int8 = crate::kernels::qgemm::IntegerDenseWeights::new(&centred, k, n);
    }
    Ok(packed)
}

/// MatMulInteger of A (less its zero point) by a packed B. Register-tiled products of i16
/// operands (`kernels::integer`): both sides less their zero points, A's rows with K padded to
/// even. Earlier forms: a dot product striding down B's columns in i64 (600 ms for ddddocr's
/// 32×1024×8210 product), row updates over blocks of columns (122 ms, 67 vectorized, 18 once
/// the generic path lent B instead of copying it per run); this kernel 3.5 ms of products,
/// plus about 5 ms of packing (most of it reading the i64 constant) unless the plan packed B.
/// A weight B with a per-tensor A zero point runs on the int8 GEMM where the CPU has VNNI
/// (`qgemm::IntegerDenseWeights`, on `threads` threads): 1.6 ms for that product.
pub(super) fn matmul_integer_packed(
    a: &RtTensor,
    a_zero: Option<&RtTensor>,
    packed: &PackedIntegerB,
    threads: usize,
) -> Result<RtTensor> {
    let ra = a.shape.len();
    if ra < 2 {
        return Err("MatMulInteger: operands of rank 2 or more have a reference".into());
    }
    let (m, k) = (a.shape[ra - 2], a.shape[ra - 1]);
    let n = packed.n;
    if k != packed.k {
        return Err(format!(
            "MatMulInteger: inner dims {k} and {} differ",
            packed.k
        ));
    }
    let batch_a = &a.shape[..ra - 2];
    let batch_b = &packed.batch[..];
    let batch = broadcast_shape(batch_a, batch_b)?;
    let batch_strides = strides(&batch);
    let batches: usize = batch.iter().product();
    let av = int_values(a);
    let a_zeros = a_zero.map(ints).unwrap_or_else(|| vec![0]);
    // A's range once: for the check here and for the int8 path's shift below.
    let a_range = crate::kernels::elementwise::i64_range(&av);
    if !range_in_eight_bits(a_range) || !eight_bit(&a_zeros) {
        return Err("MatMulInteger: A or its zero point is outside the 8-bit range".into());
    }
    let k_even = k + k % 2;
    let b_matrices: usize = batch_b.iter().product();
    let a_matrices: usize = batch_a.iter().product();
    if av.len() != a_matrices * m * k {
        return Err(format!(
            "MatMulInteger: A's data disagrees with its shape {:?}",
            a.shape
        ));
    }
    let row_zeros = zero_points(&a_zeros, m, a_matrices, "A row")?;
    let shared_b = b_matrices == 1 && a_matrices == batches;
    let uniform_a_zero = row_zeros.windows(2).all(|pair| pair[0] == pair[1]);
    if let (Some(int8), true, true) = (&packed.int8, shared_b, uniform_a_zero) {
        let zero = row_zeros.first().copied().unwrap_or(0);
        if let Some((bytes, zero)) = as_shifted_bytes(&av, a_range, zero) {
            let rows = batches * m;
            let mut out = vec![0i32; rows * n];
            if k > 0 && rows > 0 {
                let unused = vec![0f32; n];
                int8.product(
                    &bytes,
                    zero,
                    rows,
                    crate::kernels::qgemm::QOut::I32 { data: &mut out },
                    &unused,
                    &unused,
                    threads,
                );
            }
            let mut shape = batch;
            shape.extend([m, n]);
            return Ok(RtTensor {
                shape,
                data: RtData::I64(widened(&out)),
            });
        }
    }
    let mut a_centred = vec![0i16; a_matrices * m * k_even];
    if k > 0 {
        for (row, centred) in a_centred.chunks_exact_mut(k_even).enumerate() {
            let zero = row_zeros[row];
            for (value, &q) in centred.iter_mut().zip(&av[row * k..][..k]) {
                *value = (q - zero) as i16;
            }
        }
    }
    let mut out = vec![0i32; batches * m * n];
    // One B for every batch of A (a weight): A's batches are rows of one product, so B is
    // streamed once, not once per batch (ddddocr multiplies 32 batches of one row each).
    let (groups, rows) = if shared_b {
        (1, batches * m)
    } else {
        (batches, m)
    };
    let matrix_len = packed.matrix_len();
    // With K = 0 every product is the empty sum; with no rows there is nothing to write.
    for p in (0..groups).filter(|_| k_even > 0 && rows > 0) {
        let (pa, pb) = if shared_b {
            (0, 0)
        } else {
            (
                broadcast_index(p, &batch, &batch_strides, batch_a),
                broadcast_index(p, &batch, &batch_strides, batch_b),
            )
        };
        let a_group = &a_centred[pa * rows * k_even..][..rows * k_even];
        let strips = &packed.strips[pb * matrix_len..][..matrix_len];
        let out_matrix = &mut out[p * rows * n..][..rows * n];
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
    let out: Vec<i64> = widened(&out);
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

/// ConvInteger's weights minus their zero points (a scalar or one per output channel): packed
/// for the int8 GEMM where the CPU has VNNI (`kernels::qgemm::IntegerConvWeights`), and as
/// floats for the f32 convolution otherwise (exact: every value is an integer of at most ±255).
/// Derived once per plan when the weights are constant ([`super::prepare`]); per call otherwise.
pub(crate) struct CenteredConvWeights {
    shape: Vec<usize>,
    values: Vec<f32>,
    int8: Option<crate::kernels::qgemm::IntegerConvWeights>,
}

impl std::fmt::Debug for CenteredConvWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CenteredConvWeights")
            .field("shape", &self.shape)
            .field("int8", &self.int8.as_ref().map(|w| w.isa().name()))
            .finish()
    }
}

impl CenteredConvWeights {
    pub(crate) fn bytes(&self) -> u64 {
        (self.values.len() * 4) as u64 + self.int8.as_ref().map_or(0, |w| w.bytes())
    }
}

pub(super) fn center_conv_weights(
    node: &Node,
    w: &RtTensor,
    w_zero: Option<&RtTensor>,
) -> Result<CenteredConvWeights> {
    let m = w.shape.first().copied().unwrap_or(0);
    let w_zeros = w_zero.map(ints).unwrap_or_else(|| vec![0]);
    if w_zeros.len() != 1 && w_zeros.len() != m {
        return Err(format!(
            "ConvInteger: {} weight zero points for {m} output channels",
            w_zeros.len()
        ));
    }
    let per_out = w.shape.iter().skip(1).product::<usize>().max(1);
    let centred: Vec<i64> = int_values(w)
        .iter()
        .enumerate()
        .map(|(k, &v)| v - w_zeros[if w_zeros.len() == 1 { 0 } else { k / per_out }])
        .collect();
    let group = ConvConfig::parse(&node.attrs)?.group.max(1) as usize;
    // The int8 GEMM where the CPU multiplies bytes natively; the f32 convolution is as quick
    // as the portable int8 kernel.
    let int8 = crate::kernels::qgemm::multiplies_bytes_natively()
        .then(|| {
            let narrow: Vec<i32> = centred
                .iter()
                .map(|&v| i32::try_from(v).ok())
                .collect::<Option<_>>()?;
            crate::kernels::qgemm::IntegerConvWeights::new(&narrow, m, per_out, group)
        })
        .flatten();
    Ok(CenteredConvWeights {
        shape: w.shape.clone(),
        values: centred.iter().map(|&v| v as f32).collect(),
        int8,
    })
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
    conv_integer_centered(node, x, x_zero, &center_conv_weights(node, w, w_zero)?, 1)
}

/// Int32 sums as the executor's integer storage.
fn widened(sums: &[i32]) -> Vec<i64> {
    crate::kernels::elementwise::i32_to_i64(sums)
}

/// `values` (spanning `(lowest, highest)`, from `i64_range`) as bytes shifted by 0 or 128 (u8
/// or i8 data) with the zero point shifted alike, when both fit one of the two; None otherwise.
fn as_shifted_bytes(
    values: &[i64],
    (lowest, highest): (i64, i64),
    zero: i64,
) -> Option<(Vec<u8>, u8)> {
    let (lo, hi) = (lowest.min(zero), highest.max(zero));
    let shift = if lo >= 0 && hi <= 255 {
        0
    } else if lo >= -128 && hi <= 127 {
        128
    } else {
        return None;
    };
    let bytes = crate::kernels::elementwise::i64_to_shifted_bytes(values, shift);
    Some((bytes, (zero + shift) as u8))
}

/// [`conv_integer`] with the weights centred already, on `threads` threads.
pub(super) fn conv_integer_centered(
    node: &Node,
    x: &RtTensor,
    x_zero: Option<&RtTensor>,
    w: &CenteredConvWeights,
    threads: usize,
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
    let [m, cg, _, _] = lift(&w.shape)?;
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
    let mut shape = vec![n, m];
    if spatial == 2 {
        shape.push(oh);
    }
    shape.push(ow);
    // The same geometry a Conv of these shapes lowers to (1-D as one row).
    let geom = crate::exec::lower::conv::conv2d(&x.shape, &shape, &full_window, group as u64)?;
    let x_values = int_values(x);
    let int8 = w.int8.as_ref().filter(|int8| int8.fits(&geom));
    let shifted = int8.and_then(|_| {
        let range = crate::kernels::elementwise::i64_range(&x_values);
        as_shifted_bytes(&x_values, range, x_zero)
    });
    let out: Vec<i64> = match (int8, shifted) {
        (Some(int8), Some((bytes, zero))) => {
            let mut sums = vec![0i32; n * m * oh * ow];
            int8.run(&geom, &bytes, zero, &mut sums, threads);
            widened(&sums)
        }
        _ => {
            // The zero-point-shifted operands as floats through the f32 convolution kernel:
            // every product is an integer of at most 2^16 and every partial sum stays exact
            // while it is below 2^24 (past that, the f32 rounding is the one the Cast after a
            // ConvInteger applies anyway). A loop in i32 took over five minutes on IS-Net's 119
            // dynamic-quantized convolutions at 1024x1024; this is the float model's time.
            let xs: Vec<f32> = x_values.iter().map(|&v| (v - x_zero) as f32).collect();
            let mut sums = vec![0f32; n * m * oh * ow];
            let mut scratch = vec![0f32; geom.scratch_len()];
            let epilogue = ConvEpilogue {
                bias: None,
                residual: None,
                activation: Activation::None,
            };
            conv2d(
                &geom,
                &xs,
                &w.values,
                &epilogue,
                &mut sums,
                &mut scratch,
                threads,
            );
            // The i32 the spec's output holds, stored as the reference's int64. Every sum is
            // an integer-valued float (exact below 2^24, a multiple of a power of two above),
            // so the cast needs no rounding: `round` is a libm call per element without SSE4.1,
            // and it was a third of the op's time.
            sums.iter().map(|&v| i64::from(v as i32)).collect()
        }
    };
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

    /// A constant B (and B zero point) is packed at plan time and the prepared run gives what
    /// the per-call run gives; a B zero point that is given but not constant leaves the node
    /// unprepared (it would be packed with the wrong zero point).
    /// DynamicQuantizeLinear by the spec's formula, one element at a time.
    fn dynamic_quantize_by_definition(x: &[f32]) -> (Vec<i64>, f32, i64) {
        let min = x.iter().copied().fold(0.0f32, f32::min);
        let max = x.iter().copied().fold(0.0f32, f32::max);
        let scale = (max - min) / 255.0;
        let zero = (-min / scale).round_ties_even().clamp(0.0, 255.0);
        let y = x
            .iter()
            .map(|&v| ((v / scale).round_ties_even() + zero).clamp(0.0, 255.0) as i64)
            .collect();
        (y, scale, zero as i64)
    }

    #[test]
    fn dynamic_quantize_linear_follows_the_spec_formula() {
        let check = |x: Vec<f32>| {
            let out = dynamic_quantize(&RtTensor {
                shape: vec![x.len()],
                data: RtData::F32(x.clone()),
            })
            .unwrap();
            let (y, scale, zero) = dynamic_quantize_by_definition(&x);
            assert_eq!(values(&out[0]), y, "{x:?}");
            assert_eq!(out[1].data, RtData::F32(vec![scale]));
            assert_eq!(values(&out[2]), [zero]);
        };
        // The spec's example: scale 5/255, zero point 153, y = [153, 255, 0, 26, 221, 179].
        check(vec![0.0, 2.0, -3.0, -2.5, 1.34, 0.5]);
        let spec = dynamic_quantize(&RtTensor {
            shape: vec![6],
            data: RtData::F32(vec![0.0, 2.0, -3.0, -2.5, 1.34, 0.5]),
        })
        .unwrap();
        assert_eq!(values(&spec[0]), [153, 255, 0, 26, 221, 179]);
        // Long enough for the vector loops, with ties at x / scale = k + 0.5 (scale 1 here:
        // the range is -100..=155) and the extremes.
        let mut x: Vec<f32> = (0..301).map(|i| (i as f32 - 100.0) * 0.5).collect();
        x.push(155.0);
        x.push(-100.0);
        check(x);
        // All positive (zero point 0), all negative (zero point 255).
        check((0..40).map(|i| i as f32 * 0.37).collect());
        check((0..40).map(|i| -(i as f32) * 1.7 - 0.1).collect());
    }

    #[test]
    fn matmul_integer_prepared_from_constants_matches_the_per_call_run() {
        let node = crate::exec::reference::test_node("MatMulInteger", &[]);
        let a = tensor(
            &[2, 3, 5],
            &(0..30).map(|i| (i * 7 % 256) as i64).collect::<Vec<_>>(),
        );
        let b = tensor(
            &[5, 40],
            &(0..200).map(|i| (i * 13 % 256) as i64).collect::<Vec<_>>(),
        );
        let (a_zero, b_zero) = (tensor(&[], &[9]), tensor(&[], &[128]));
        let inputs = [Some(&a), Some(&b), Some(&a_zero), Some(&b_zero)];
        let per_call = super::super::run(&node, 13, &inputs, &[], &[DType::I32]).unwrap();
        let given = [true; 4];
        let constants = [None, Some(&b), None, Some(&b_zero)];
        let prepared = super::super::prepare(&node, &given, &constants).expect("B is constant");
        let from_plan =
            super::super::run_prepared(&node, &prepared, &inputs, &[DType::I32], 1).unwrap();
        assert_eq!(from_plan, per_call);
        let zero_at_run_time = [None, Some(&b), None, None];
        assert!(super::super::prepare(&node, &given, &zero_at_run_time).is_none());
        let no_zero = [true, true, true, false];
        assert!(super::super::prepare(&node, &no_zero, &zero_at_run_time).is_some());
    }

    /// The strip product against `Σ_q (a[i,q] − za[i]) · (b[q,j] − zb[j])` element by element:
    /// odd depths, partial and several strips, per-row and per-column zero points, one B shared
    /// by A's batches, and a B with batches of its own.
    #[test]
    fn matmul_integer_matches_the_formula() {
        // Odd K, a partial strip of columns, and several strips with an odd K past 64.
        for (m, k, n) in [(3, 5, 7), (5, 67, 70)] {
            check_matmul_integer(m, k, n);
        }
    }

    /// Zero points per matrix (`[D, M, 1]` for A, `[D, 1, N]` for B) apply to their own
    /// matrix; values outside the 8-bit range and zero points of another length are refused.
    #[test]
    fn matmul_integer_zero_points_per_matrix_and_range() {
        let (d, m, k, n) = (2usize, 2usize, 3usize, 4usize);
        let a_values: Vec<i64> = (0..d * m * k).map(|i| (i * 29 % 256) as i64).collect();
        let b_values: Vec<i64> = (0..d * k * n)
            .map(|i| (i * 41 % 256) as i64 - 128)
            .collect();
        let a_zero: Vec<i64> = vec![1, 2, 3, 4];
        let b_zero: Vec<i64> = vec![-5, 0, 5, 10, 20, 30, 40, 50];
        let a = tensor(&[d, m, k], &a_values);
        let b = tensor(&[d, k, n], &b_values);
        let out = matmul_integer(
            &a,
            &b,
            Some(&tensor(&[d, m, 1], &a_zero)),
            Some(&tensor(&[d, 1, n], &b_zero)),
        )
        .unwrap();
        let RtData::I64(values) = &out.data else {
            panic!("integers expected")
        };
        for p in 0..d {
            for i in 0..m {
                for j in 0..n {
                    let want: i64 = (0..k)
                        .map(|q| {
                            (a_values[(p * m + i) * k + q] - a_zero[p * m + i])
                                * (b_values[(p * k + q) * n + j] - b_zero[p * n + j])
                        })
                        .sum();
                    assert_eq!(values[(p * m + i) * n + j], want, "{p} {i} {j}");
                }
            }
        }
        let wide = tensor(&[2, 2], &[0, 300, 1, 2]);
        assert!(matmul_integer(&wide, &tensor(&[2, 1], &[1, 1]), None, None).is_err());
        let three = tensor(&[3], &[0, 0, 0]);
        assert!(matmul_integer(&a, &b, Some(&three), None).is_err());
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

    /// Constant weights (and weight zero points) are centred at plan time; the prepared run on
    /// one or two threads gives what the per-call run gives, on a layer large enough for the
    /// convolution to split; a weight zero point given but not constant leaves it unprepared.
    /// (The sums stay far below 2^24, where f32 is exact in any order: the hand-computed cases
    /// above check the values themselves.)
    #[test]
    fn conv_integer_prepared_from_constants_matches_the_per_call_run() {
        let node = conv(&[("pads", Attr::Ints(vec![1, 1, 1, 1]))]);
        let x = tensor(
            &[1, 8, 12, 12],
            &(0..8 * 144)
                .map(|i| (i * 37 % 256) as i64)
                .collect::<Vec<_>>(),
        );
        let w = tensor(
            &[24, 8, 3, 3],
            &(0..24 * 72)
                .map(|i| (i * 11 % 256) as i64)
                .collect::<Vec<_>>(),
        );
        let x_zero = tensor(&[], &[131]);
        let w_zero = tensor(&[24], &(0..24).map(|i| 90 + 3 * i).collect::<Vec<_>>());
        let inputs = [Some(&x), Some(&w), Some(&x_zero), Some(&w_zero)];
        let per_call = super::super::run(&node, 13, &inputs, &[], &[DType::I32]).unwrap();
        let given = [true; 4];
        let constants = [None, Some(&w), None, Some(&w_zero)];
        let prepared = super::super::prepare(&node, &given, &constants).expect("W is constant");
        // The f32 weights, and where the CPU has VNNI the int8 panels: 24 channels of 72
        // taps in quads, and one offset per channel.
        let int8_bytes = if !crate::kernels::qgemm::multiplies_bytes_natively() {
            0
        } else {
            24 * 72 + 24 * 4
        };
        assert_eq!(prepared.bytes(), 24 * 72 * 4 + int8_bytes);
        // The weights span 0..=255 less zero points of 90..=159: per-channel offsets.
        let centred = center_conv_weights(&node, &w, Some(&w_zero)).unwrap();
        let float_only = CenteredConvWeights {
            shape: centred.shape.clone(),
            values: centred.values.clone(),
            int8: None,
        };
        for threads in [1, 2] {
            let int8 = conv_integer_centered(&node, &x, Some(&x_zero), &centred, threads).unwrap();
            let float = conv_integer_centered(&node, &x, Some(&x_zero), &float_only, threads);
            assert_eq!(int8, float.unwrap(), "{threads} thread(s)");
        }
        for threads in [1, 2] {
            let from_plan =
                super::super::run_prepared(&node, &prepared, &inputs, &[DType::I32], threads)
                    .unwrap();
            assert_eq!(from_plan, per_call, "{threads} thread(s)");
        }
        assert!(super::super::prepare(&node, &given, &[None, Some(&w), None, None]).is_none());
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
