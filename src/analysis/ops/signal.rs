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

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, Tensor, TensorData, TensorFact};

struct Window;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => Some(&Window),
        _ => None,
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
}
