//! Classical-ML and featurisation ops: the `ai.onnx.ml` domain's Binarizer,
//! ArrayFeatureExtractor and TreeEnsemble (ml opset 5), and the default domain's
//! TfIdfVectorizer (9), MelWeightMatrix (17) and MaxUnpool (9-22), which scikit-learn, audio
//! front-end and segmentation exports carry next to the network.
//!
//! Cost:
//! - Binarizer: one comparison per element.
//! - ArrayFeatureExtractor: a gather along the last axis (no arithmetic; the gathered elements
//!   are read and written).
//! - TreeEnsemble: one comparison per interior node per sample (every split node of every tree
//!   visited: an upper estimate, as a sample walks one root-to-leaf path per tree), plus one add
//!   per tree per sample for the leaf it reaches.
//! - TfIdfVectorizer: per input row, every start position tries each n-gram length for each
//!   skip: C · (max_skip_count + 1) · max_gram_length lookups counted as one operation each.
//! - MelWeightMatrix: the output written (a filter bank computed from five scalars).
//! - MaxUnpool: the output written once (zeros), the input and indices read once.

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

/// The domain of the classical-ML operators.
pub const DOMAIN: &str = "ai.onnx.ml";

struct Binarizer;
struct ArrayFeatureExtractor;
struct TreeEnsemble;
struct TfIdfVectorizer;
struct MelWeightMatrix;
struct MaxUnpool;

/// The `ai.onnx.ml` ops the tool knows.
pub(super) fn lookup_ml(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "Binarizer" => &Binarizer,
        "ArrayFeatureExtractor" => &ArrayFeatureExtractor,
        "TreeEnsemble" => &TreeEnsemble,
        _ => return None,
    })
}

/// The default-domain ops of this file.
pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "TfIdfVectorizer" => &TfIdfVectorizer,
        "MelWeightMatrix" => &MelWeightMatrix,
        "MaxUnpool" => &MaxUnpool,
        _ => return None,
    })
}

impl OpDef for Binarizer {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorFact::new(x.dtype, ctx.input_shape(0)?.to_vec())])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for ArrayFeatureExtractor {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let indices = ctx.input(1)?;
        let picked = match indices.element_count() {
            Some(n) => Dim::Known(n),
            None => Dim::Sym(format!("{}_picked", ctx.node.name)),
        };
        let out = match shape.len() {
            0 => return Err(invalid("ArrayFeatureExtractor on a scalar")),
            // A vector is one row of features.
            1 => vec![Dim::Known(1), picked],
            n => {
                let mut out = shape[..n - 1].to_vec();
                out.push(picked);
                out
            }
        };
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = OpCost::default();
        let written = ctx.bytes_of(ctx.outputs[0])?;
        cost.bytes.act_read = written + ctx.bytes_of(ctx.input(1)?)?;
        cost.bytes.act_written = written;
        Ok(cost)
    }
}

impl OpDef for TreeEnsemble {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() != 2 {
            return Err(invalid("TreeEnsemble: X is [N, features]"));
        }
        let targets = ctx
            .attrs()
            .int("n_targets")
            .filter(|&t| t > 0)
            .ok_or_else(|| invalid("TreeEnsemble needs a positive `n_targets`"))?;
        Ok(vec![TensorFact::new(
            x.dtype,
            vec![shape[0].clone(), Dim::Known(targets as u64)],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let samples = ctx.input_dims(0)?[0];
        let splits = ctx
            .attrs()
            .ints("nodes_featureids")
            .map_or(0, |n| n.len() as u64);
        let trees = ctx.attrs().ints("tree_roots").map_or(1, |r| r.len() as u64);
        Ok(OpCost {
            flops: samples * (splits + trees),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for TfIdfVectorizer {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let shape = ctx.input_shape(0)?;
        let indexes = ctx
            .attrs()
            .ints("ngram_indexes")
            .ok_or_else(|| invalid("TfIdfVectorizer needs `ngram_indexes`"))?;
        let width = indexes.iter().copied().max().map_or(0, |m| m + 1);
        if width < 0 || indexes.iter().any(|&i| i < 0) {
            return Err(invalid("TfIdfVectorizer: negative n-gram indexes"));
        }
        let out = match shape.len() {
            1 => vec![Dim::Known(width as u64)],
            2 => vec![shape[0].clone(), Dim::Known(width as u64)],
            n => return Err(invalid(format!("TfIdfVectorizer on a {n}-D input"))),
        };
        Ok(vec![TensorFact::new(DType::F32, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements: u64 = ctx.input_dims(0)?.iter().product();
        let skips = ctx.attrs().int_or("max_skip_count", 0).max(0) as u64 + 1;
        let grams = ctx.attrs().int_or("max_gram_length", 1).max(1) as u64;
        Ok(OpCost {
            flops: elements * skips * grams,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for MelWeightMatrix {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let dtype = super::signal::window_dtype(ctx.attrs())?;
        let scalar = |index: usize| -> OpResult<Option<i64>> {
            Ok(ctx
                .const_ints(index)
                .ok()
                .flatten()
                .and_then(|v| v.first().copied()))
        };
        let (bins, dft) = (scalar(0)?, scalar(1)?);
        let dim = |value: Option<i64>, what: &str| -> OpResult<Dim> {
            match value {
                Some(v) if v >= 0 => Ok(Dim::Known(v as u64)),
                Some(v) => Err(invalid(format!("MelWeightMatrix: {what} of {v}"))),
                None => Ok(Dim::Sym(format!("{}_{what}", ctx.node.name))),
            }
        };
        Ok(vec![TensorFact::new(
            dtype,
            vec![
                dim(dft.map(|d| d / 2 + 1), "spectrum_bins")?,
                dim(bins, "mel_bins")?,
            ],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = OpCost::default();
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

/// MaxUnpool's spatial output dims without `output_shape`: (in − 1)·stride − pads + kernel per
/// axis (`None` for an axis whose input dim is not known).
pub(crate) fn max_unpool_dims(
    attrs: &crate::analysis::graph::Attributes,
    spatial_in: &[Option<u64>],
) -> OpResult<Vec<Option<u64>>> {
    let spatial = spatial_in.len();
    let kernel = attrs
        .ints("kernel_shape")
        .filter(|k| k.len() == spatial)
        .ok_or_else(|| invalid("MaxUnpool needs a `kernel_shape` per spatial axis"))?;
    let strides = attrs.ints("strides");
    let pads = attrs.ints("pads");
    spatial_in
        .iter()
        .enumerate()
        .map(|(axis, dim)| {
            let Some(d) = dim else { return Ok(None) };
            let stride = strides.and_then(|s| s.get(axis).copied()).unwrap_or(1);
            let pad = pads.map_or(0, |p| {
                p.get(axis).copied().unwrap_or(0) + p.get(axis + spatial).copied().unwrap_or(0)
            });
            let size = (*d as i64 - 1)
                .checked_mul(stride)
                .and_then(|s| s.checked_sub(pad))
                .and_then(|s| s.checked_add(kernel[axis]))
                .filter(|&s| s >= 0)
                .ok_or_else(|| invalid("MaxUnpool: the output size is negative or overflows"))?;
            Ok(Some(size as u64))
        })
        .collect()
}

impl OpDef for MaxUnpool {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() < 3 {
            return Err(invalid("MaxUnpool: X is [N, C, spatial...]"));
        }
        if let Some(Some(target)) = ctx.opt_input(2).map(|_| ctx.const_ints(2)).transpose()? {
            if target.len() != shape.len() || target.iter().any(|&d| d < 0) {
                return Err(invalid(format!("MaxUnpool: output_shape {target:?}")));
            }
            return Ok(vec![TensorFact::known(
                x.dtype,
                &target.iter().map(|&d| d as u64).collect::<Vec<_>>(),
            )]);
        }
        let known: Vec<Option<u64>> = shape[2..].iter().map(Dim::known).collect();
        let mut out = shape[..2].to_vec();
        for (axis, size) in max_unpool_dims(ctx.attrs(), &known)?
            .into_iter()
            .enumerate()
        {
            out.push(match size {
                Some(size) => Dim::Known(size),
                None => Dim::Sym(format!("{}_unpooled{axis}", ctx.node.name)),
            });
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = OpCost::default();
        cost.bytes.act_read = ctx.bytes_of(ctx.input(0)?)? + ctx.bytes_of(ctx.input(1)?)?;
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::*;
    use crate::analysis::tensor::DType;

    #[test]
    fn tfidf_width_is_the_largest_index() {
        let x = act(DType::I32, &[2, 12]);
        let (out, cost) = Op::new("TfIdfVectorizer")
            .ints("ngram_indexes", &[0, 1, 2, 3, 4, 5, 6])
            .int("max_skip_count", 5)
            .int("max_gram_length", 2)
            .run(&[&x]);
        assert_eq!(dims(&out[0]), [2, 7]);
        assert_eq!(out[0].dtype, DType::F32);
        assert_eq!(cost.flops, 24 * 6 * 2);
    }

    #[test]
    fn max_unpool_inverts_the_pool_geometry() {
        let x = f32s(&[1, 1, 2, 2]);
        let i = act(DType::I64, &[1, 1, 2, 2]);
        let op = Op::new("MaxUnpool")
            .ints("kernel_shape", &[2, 2])
            .ints("strides", &[2, 2]);
        let (out, cost) = op.run(&[&x, &i]);
        assert_eq!(dims(&out[0]), [1, 1, 4, 4]);
        assert_eq!(cost.bytes, traffic(0, 16 + 32, 64));
        let out = op.try_infer_opt(&[Some(&x), Some(&i), Some(&ints(&[1, 1, 5, 5]))]);
        assert_eq!(dims(&out.unwrap()[0]), [1, 1, 5, 5]);
    }

    #[test]
    fn mel_weight_matrix_is_spectrum_bins_by_mel_bins() {
        let s = |v: i64| ints_shaped(&[], &[v]);
        let hz = scalar(DType::F32, 0.0);
        let out = Op::new("MelWeightMatrix").infer(&[&s(8), &s(16), &s(8192), &hz, &hz]);
        assert_eq!(dims(&out[0]), [9, 8]);
    }

    #[test]
    fn ml_ops_shapes() {
        let x = f32s(&[3, 4, 5]);
        let out = Op::ml("ArrayFeatureExtractor").infer(&[&x, &ints(&[0, 2])]);
        assert_eq!(dims(&out[0]), [3, 4, 2]);
        let (out, cost) = Op::ml("Binarizer").run(&[&x]);
        assert_eq!(dims(&out[0]), [3, 4, 5]);
        assert_eq!(cost.flops, 60);
        let out = Op::ml("TreeEnsemble")
            .int("n_targets", 2)
            .infer(&[&f32s(&[6, 3])]);
        assert_eq!(dims(&out[0]), [6, 2]);
    }
}
