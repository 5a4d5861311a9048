//! Window generators of the signal-processing ops (opset 17): HannWindow, HammingWindow,
//! BlackmanWindow. The output is a 1-D window of `size` points in `output_datatype`; a periodic
//! window is the first `size` points of a symmetric one of `size + 1` (denominator `size`), a
//! symmetric one has denominator `size − 1`.
//!
//! The values are the generalised cosine windows w[n] = Σ_j (−1)^j · a_j · cos(2πjn/N) with
//! Hann a = (0.5, 0.5), Hamming a = (25/46, 21/46), Blackman a = (0.42, 0.5, 0.08). With a
//! constant size (the usual case: a window length fixed by the model) the window folds to a
//! constant here and costs nothing at run time.
//!
//! Cost when not folded: the output written; per point one cosine per non-constant term and
//! two FLOPs per term (scale, accumulate).
//!
//! DFT (17-20) and STFT (17): shapes as the spec gives them (a trailing dim of 2 for complex
//! values, 1 for the real output of an inverse one-sided DFT; `dft_length` and the axis as
//! constant inputs, or the axis as an attribute before opset 20; STFT frames
//! ⌊(length − frame)/step⌋ + 1 of frame/2 + 1 bins when one-sided). Cost as a runtime computes
//! them, by FFT: 5·n·⌈log2 n⌉ FLOPs per transform of n points (the classic radix-2 count), plus
//! the window's multiply per sample for STFT; the input read and the output written once.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, Tensor, TensorData, TensorFact};

struct Window;
struct Dft;
struct Stft;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => Some(&Window),
        "DFT" => Some(&Dft),
        "STFT" => Some(&Stft),
        _ => None,
    }
}

/// FLOPs of one FFT of `n` points (5·n·⌈log2 n⌉).
fn fft_flops(n: u64) -> u64 {
    5 * n * (64 - n.saturating_sub(1).leading_zeros() as u64).max(1)
}

/// A constant scalar input, if given.
fn scalar_input(ctx: &InferCtx, index: usize) -> OpResult<Option<i64>> {
    match ctx.opt_input(index) {
        Some(fact) if fact.element_count() == Some(0) => Ok(None),
        Some(_) => Ok(ctx.const_ints(index)?.and_then(|v| v.first().copied())),
        None => Ok(None),
    }
}

/// DFT's axis, transform length and output length along the axis.
fn dft_geometry(ctx: &InferCtx) -> OpResult<(usize, Dim, Dim, bool)> {
    let shape = ctx.input_shape(0)?;
    let rank = shape.len();
    if rank < 2 {
        return Err(invalid("DFT: the input is [signal dims..., 1 or 2]"));
    }
    let axis = if ctx.node.opset >= 20 {
        scalar_input(ctx, 2)?.unwrap_or(-2)
    } else {
        ctx.attrs().int_or("axis", 1)
    };
    let axis = super::normalize_axis(axis, rank)?;
    if axis == rank - 1 {
        return Err(invalid(
            "DFT: the last dim holds the complex parts, not a signal axis",
        ));
    }
    let inverse = ctx.attrs().int_or("inverse", 0) != 0;
    let onesided = ctx.attrs().int_or("onesided", 0) != 0;
    let given = scalar_input(ctx, 1)?;
    let length = match (given, &shape[axis]) {
        (Some(n), _) if n > 0 => Dim::Known(n as u64),
        (Some(n), _) => return Err(invalid(format!("DFT: a length of {n}"))),
        // An inverse one-sided transform restores the full length: 2·(bins − 1).
        (None, Dim::Known(d)) if inverse && onesided => Dim::Known(2 * d.saturating_sub(1)),
        (None, d) => d.clone(),
    };
    let out = match (&length, onesided && !inverse) {
        (Dim::Known(n), true) => Dim::Known(n / 2 + 1),
        (Dim::Sym(s), true) => Dim::Sym(format!("{s}/2+1")),
        (d, false) => d.clone(),
    };
    Ok((axis, length, out, inverse && onesided))
}

impl OpDef for Dft {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let (axis, _, along, real_out) = dft_geometry(ctx)?;
        let mut out = ctx.input_shape(0)?.to_vec();
        out[axis] = along;
        let last = out.len() - 1;
        out[last] = Dim::Known(if real_out { 1 } else { 2 });
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let shape = ctx.input_dims(0)?;
        let out = ctx.output_dims(0)?;
        // The transform axis as inference found it: the attribute before opset 20, the
        // constant input from 20 (default −2); the length is the longer of input and output.
        let axis = if ctx.node.opset >= 20 {
            ctx.inputs
                .get(2)
                .copied()
                .flatten()
                .and_then(|f| f.konst.as_ref())
                .and_then(|t| t.to_i64_vec())
                .and_then(|v| v.first().copied())
                .unwrap_or(-2)
        } else {
            ctx.attrs().int_or("axis", 1)
        };
        let axis = super::normalize_axis(axis, shape.len())?;
        let n = shape[axis].max(out[axis]).max(1);
        let transforms: u64 = shape[..shape.len() - 1].iter().product::<u64>() / shape[axis].max(1);
        Ok(OpCost {
            flops: transforms * fft_flops(n),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for Stft {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() != 3 {
            return Err(invalid("STFT: the signal is [batch, length, 1 or 2]"));
        }
        let step = scalar_input(ctx, 1)?.ok_or("STFT: the frame step is computed at run time")?;
        let window = ctx
            .opt_input(2)
            .and_then(|w| w.shape.as_ref())
            .and_then(|s| s.first())
            .and_then(Dim::known);
        let frame = match scalar_input(ctx, 3)? {
            Some(f) => Some(f.max(0) as u64),
            None => window.or(shape[1].known()),
        };
        let onesided = ctx.attrs().int_or("onesided", 1) != 0;
        let (frames, bins) = match (frame, shape[1].known()) {
            (Some(frame), Some(length)) if step > 0 && frame > 0 && frame <= length => (
                Dim::Known((length - frame) / step as u64 + 1),
                Dim::Known(if onesided { frame / 2 + 1 } else { frame }),
            ),
            (Some(_), Some(_)) => {
                return Err(invalid("STFT: the frame and step do not fit the signal"))
            }
            _ => (
                Dim::Sym(format!("{}_frames", ctx.node.name)),
                Dim::Sym(format!("{}_bins", ctx.node.name)),
            ),
        };
        Ok(vec![TensorFact::new(
            x.dtype,
            vec![shape[0].clone(), frames, bins, Dim::Known(2)],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let out = ctx.output_dims(0)?;
        let (batch, frames, bins) = (out[0], out[1], out[2]);
        let onesided = ctx.attrs().int_or("onesided", 1) != 0;
        let frame = if onesided {
            2 * bins.saturating_sub(1)
        } else {
            bins
        }
        .max(1);
        Ok(OpCost {
            flops: batch * frames * (fft_flops(frame) + frame),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// Windows longer than this are not folded into constants (the values would be computed at
/// analysis time for nothing: nobody reads them).
const MAX_FOLDED_POINTS: i64 = 1 << 20;

/// The cosine-series coefficients of a window op.
fn coefficients(op_type: &str) -> Option<&'static [f64]> {
    Some(match op_type {
        "HannWindow" => &[0.5, 0.5],
        "HammingWindow" => &[25.0 / 46.0, 21.0 / 46.0],
        "BlackmanWindow" => &[0.42, 0.5, 0.08],
        _ => return None,
    })
}

/// The `size` points of a window op (`periodic` as the op's attribute), in f64.
pub(crate) fn window(op_type: &str, size: usize, periodic: bool) -> Option<Vec<f64>> {
    let terms = coefficients(op_type)?;
    let denominator = if periodic {
        size as f64
    } else {
        size.saturating_sub(1) as f64
    };
    Some(
        (0..size)
            .map(|n| {
                if denominator == 0.0 {
                    return 1.0;
                }
                let phase = 2.0 * std::f64::consts::PI * n as f64 / denominator;
                terms
                    .iter()
                    .enumerate()
                    .map(|(j, a)| {
                        let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                        sign * a * (j as f64 * phase).cos()
                    })
                    .sum()
            })
            .collect(),
    )
}

/// The element type a window op writes (`output_datatype`, float by default).
pub(crate) fn window_dtype(attrs: &crate::analysis::graph::Attributes) -> OpResult<DType> {
    let code = attrs.int_or("output_datatype", 1);
    i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx)
        .ok_or_else(|| invalid(format!("unknown output_datatype {code}")))
}

impl OpDef for Window {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let dtype = window_dtype(ctx.attrs())?;
        let size = match ctx.input(0)?.konst.as_ref().and_then(|t| t.to_i64_vec()) {
            Some(values) => *values
                .first()
                .ok_or_else(|| invalid("the window size is empty"))?,
            None => {
                return Ok(vec![TensorFact::new(
                    dtype,
                    vec![Dim::Sym(format!("{}_size", ctx.node.name))],
                )])
            }
        };
        if size < 0 {
            return Err(invalid(format!("a window of {size} points")));
        }
        if size > MAX_FOLDED_POINTS {
            return Ok(vec![TensorFact::known(dtype, &[size as u64])]);
        }
        let periodic = ctx.attrs().int_or("periodic", 1) != 0;
        let values = window(ctx.node.op_type, size as usize, periodic)
            .ok_or_else(|| format!("{} is not a window op", ctx.node.op_type))?;
        let data = if dtype.is_float() {
            TensorData::F64(values)
        } else {
            TensorData::I64(values.iter().map(|&v| v as i64).collect())
        };
        Ok(vec![TensorFact::constant(Tensor {
            dtype,
            shape: vec![size as u64],
            data,
        })])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let points = ctx.output_elements(0)?;
        let terms = coefficients(ctx.node.op_type).map_or(2, |t| t.len() as u64);
        let mut cost = OpCost {
            flops: 2 * terms * points,
            transcendental: (terms - 1) * points,
            ..OpCost::default()
        };
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::*;
    use super::window;
    use crate::analysis::tensor::DType;

    #[test]
    fn windows_match_their_formulas() {
        // Hann, periodic, 4 points: 0.5 − 0.5·cos(2πn/4) = 0, 0.5, 1, 0.5.
        let hann = window("HannWindow", 4, true).unwrap();
        for (got, want) in hann.iter().zip([0.0, 0.5, 1.0, 0.5]) {
            assert!((got - want).abs() < 1e-12, "{hann:?}");
        }
        // Symmetric: denominator N − 1, so both ends are 0 and the window is symmetric.
        let sym = window("HannWindow", 5, false).unwrap();
        assert!(sym[0].abs() < 1e-12 && sym[4].abs() < 1e-12 && (sym[2] - 1.0).abs() < 1e-12);
        // Hamming's ends are a0 − a1 = 4/46; Blackman's 0.42 − 0.5 + 0.08 = 0.
        let hamming = window("HammingWindow", 8, true).unwrap();
        assert!((hamming[0] - 4.0 / 46.0).abs() < 1e-12);
        let blackman = window("BlackmanWindow", 8, true).unwrap();
        assert!(blackman[0].abs() < 1e-12);
        assert!((blackman[4] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_constant_size_folds_the_window() {
        let size = ints_shaped(&[], &[10]);
        let out = Op::new("HannWindow").infer(&[&size]);
        assert_eq!(dims(&out[0]), [10]);
        assert_eq!(values(&out[0]).len(), 10);
        let out = Op::new("BlackmanWindow")
            .int("output_datatype", 11)
            .infer(&[&size]);
        assert_eq!(out[0].dtype, DType::F64);
        // A size only known at run time gives a symbolic length.
        let out = Op::new("HammingWindow").infer(&[&act(DType::I64, &[])]);
        assert!(out[0].concrete_shape().is_none());
        Op::new("HannWindow").invalid(&[&ints_shaped(&[], &[-1])]);
    }

    #[test]
    fn dft_and_stft_shapes_and_fft_counts() {
        // Real signal [1, 16, 1], one-sided forward DFT along axis 1: 9 bins, complex.
        let x = f32s(&[1, 16, 1]);
        let op = Op::new("DFT").opset(17).int("onesided", 1);
        let (out, cost) = op.run(&[&x]);
        assert_eq!(dims(&out[0]), [1, 9, 2]);
        assert_eq!(cost.flops, 5 * 16 * 4);
        // A given length (opset 20, axis as input): zero-padded to 32, full spectrum.
        let op = Op::new("DFT").opset(20);
        let out = op.infer(&[
            &f32s(&[2, 16, 2]),
            &ints_shaped(&[], &[32]),
            &ints_shaped(&[], &[1]),
        ]);
        assert_eq!(dims(&out[0]), [2, 32, 2]);
        // STFT: 128 samples, frames of 16 every 8: 15 frames of 9 bins.
        let op = Op::new("STFT");
        let out = op.infer(&[&f32s(&[1, 128, 1]), &ints_shaped(&[], &[8]), &f32s(&[16])]);
        assert_eq!(dims(&out[0]), [1, 15, 9, 2]);
    }
}
