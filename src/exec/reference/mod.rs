//! Reference kernels: plain, unoptimised implementations over run-time tensors for the
//! ops no optimised kernel family covers (index scatter and gather, cumulative sums, TopK,
//! bitwise ops, losses...). They exist so that every model people bring runs and can be
//! checked, not to be fast: each is a direct transcription of the ONNX operator spec, walked
//! element by element, and the plan runs them like the generic evaluator (inputs lent,
//! outputs stored back). An op gets an optimised kernel in its family when a
//! real model spends time in it.

use super::{RtData, RtTensor};
use crate::analysis::graph::Node;
use crate::analysis::tensor::DType;

mod attention;
mod broadcast;
mod classic_ml;
mod contrib;
mod control;
mod dynamic;
mod einsum;
mod geometry;
mod index;
mod math;
mod norm;
mod pool;
mod quant;
mod resize;
mod rnn;
mod state;

use attention::{attention, rotary_embedding};
use einsum::einsum;
use index::reverse_sequence;
use index::*;
use norm::{layer_norm, log_softmax_axis1, lp_normalization, nll_loss};
use pool::pool;

/// Whether `op` of `domain` has a reference kernel (the standard domain, and onnxruntime's
/// `com.microsoft` for the contrib ops its optimizers write).
pub(crate) fn covers(domain: &str, op: &str) -> bool {
    match domain {
        "" | "ai.onnx" => covers_standard(op),
        crate::analysis::ops::contrib::DOMAIN => contrib::covers(op),
        crate::analysis::ops::classic_ml::DOMAIN => {
            matches!(op, "Binarizer" | "ArrayFeatureExtractor")
        }
        _ => false,
    }
}

fn covers_standard(op: &str) -> bool {
    // onnxruntime registers SimplifiedLayerNormalization in the standard domain.
    op == "SimplifiedLayerNormalization"
        || matches!(
            op,
            "Attention"
                | "MaxPool"
                | "AveragePool"
                | "LpPool"
                | "RotaryEmbedding"
                | "LSTM"
                | "GRU"
                | "RNN"
                | "CumProd"
                | "Einsum"
                | "Clip"
                | "GatherElements"
                | "Gather"
                | "ScatterElements"
                | "Scatter"
                | "ScatterND"
                | "Trilu"
                | "CumSum"
                | "Hardmax"
                | "TopK"
                | "OneHot"
                | "BitShift"
                | "BitwiseAnd"
                | "Add"
                | "Sub"
                | "Mul"
                | "BitwiseOr"
                | "BitwiseXor"
                | "BitwiseNot"
                | "CastLike"
                | "LpNormalization"
                | "LayerNormalization"
                | "RMSNormalization"
                | "SpaceToDepth"
                | "DynamicQuantizeLinear"
                | "Acos"
                | "Acosh"
                | "Asin"
                | "Asinh"
                | "Atan"
                | "Atanh"
                | "Cosh"
                | "Sinh"
                | "Tan"
                | "Celu"
                | "ThresholdedRelu"
                | "Gelu"
                | "Mod"
                | "ArgMax"
                | "ArgMin"
                | "GatherND"
                | "DepthToSpace"
                | "EyeLike"
                | "ReduceLogSum"
                | "IsInf"
                | "IsNaN"
                | "NonZero"
                | "Compress"
                | "Unique"
                | "NonMaxSuppression"
                | "Resize"
                | "Upsample"
                | "GridSample"
                | "GroupNormalization"
                | "MeanVarianceNormalization"
                | "Shrink"
                | "Swish"
                | "ReverseSequence"
                | "Pad"
                | "Tile"
                | "MatMulInteger"
                | "ConvInteger"
                | "Conv"
                | "ConvTranspose"
                | "NegativeLogLikelihoodLoss"
                | "SoftmaxCrossEntropyLoss"
                | "LinearAttention"
                | "CausalConvWithState"
                | "TensorScatter"
                | "CenterCropPad"
                | "Col2Im"
                | "AffineGrid"
                | "Det"
                | "HannWindow"
                | "HammingWindow"
                | "BlackmanWindow"
                | "BitCast"
                | "If"
                | "Loop"
                | "Scan"
                | "TfIdfVectorizer"
                | "MaxUnpool"
                | "DeformConv"
                | "SwiGLU"
        )
}

type Result<T> = std::result::Result<T, String>;

/// Runs `node` on `inputs`; `in_types` and `out_types` are the element types of its inputs
/// (`None` for an omitted one) and outputs (integers wrap to their width, bools are 0/1). The kernels check what they index, and a case they missed
/// still ends as this node's error rather than a crash of the whole tool: a reference kernel
/// is a transcription that runs what nothing faster covers, on inputs from any model.
pub(crate) fn run(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
    out_types: &[DType],
) -> Result<Vec<RtTensor>> {
    guarded(|| run_checked(node, opset, inputs, in_types, out_types))
}

thread_local! {
    /// Set while a reference kernel runs on this thread: its panics are caught, not printed.
    static IN_REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `kernel`, turning a panic into an error (the panic hook stays quiet for it; panics
/// elsewhere are reported as before).
fn guarded<T>(kernel: impl FnOnce() -> Result<T>) -> Result<T> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_REFERENCE.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    // Control-flow bodies run reference kernels inside a reference kernel: restore, not clear.
    let outer = IN_REFERENCE.with(|flag| flag.replace(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(kernel));
    IN_REFERENCE.with(|flag| flag.set(outer));
    outcome.unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("an inconsistency");
        Err(format!(
            "the reference kernel cannot run this input ({what})"
        ))
    })
}

fn run_checked(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
    out_types: &[DType],
) -> Result<Vec<RtTensor>> {
    let input = |i: usize| -> Result<&RtTensor> {
        inputs
            .get(i)
            .and_then(|t| *t)
            .ok_or_else(|| format!("input #{i} is missing"))
    };
    let attrs = &node.attrs;
    if node.domain == crate::analysis::ops::classic_ml::DOMAIN {
        return match node.op_type.as_str() {
            "Binarizer" => Ok(vec![classic_ml::binarizer(node, input(0)?)]),
            "ArrayFeatureExtractor" => Ok(vec![classic_ml::array_feature_extractor(
                input(0)?,
                input(1)?,
            )?]),
            other => Err(format!("no reference kernel for {other}")),
        };
    }
    if node.domain == crate::analysis::ops::contrib::DOMAIN
        || node.op_type == "SimplifiedLayerNormalization"
    {
        return contrib::run(node, inputs);
    }
    let outputs = match node.op_type.as_str() {
        "Attention" => attention(node, inputs)?,
        "LSTM" | "GRU" | "RNN" => rnn::run(node, inputs)?,
        "RotaryEmbedding" => vec![rotary_embedding(node, inputs)?],
        "MaxPool" | "AveragePool" | "LpPool" => pool(node, input(0)?)?,
        "Einsum" => vec![einsum(
            attrs.string("equation").ok_or("Einsum: no equation")?,
            &inputs.iter().flatten().copied().collect::<Vec<_>>(),
        )?],
        "Clip" => vec![clip(
            input(0)?,
            inputs.get(1).and_then(|t| *t),
            inputs.get(2).and_then(|t| *t),
            attrs.float("min"),
            attrs.float("max"),
        )],
        "Gather" => vec![index::gather(
            input(0)?,
            input(1)?,
            attrs.int_or("axis", 0),
        )?],
        "GatherElements" => vec![gather_elements(
            input(0)?,
            input(1)?,
            attrs.int_or("axis", 0),
        )?],
        "ScatterElements" | "Scatter" => vec![scatter_elements(
            input(0)?,
            input(1)?,
            input(2)?,
            attrs.int_or("axis", 0),
            Reduction::parse(attrs.string("reduction"))?,
        )?],
        "ScatterND" => vec![scatter_nd(
            input(0)?,
            input(1)?,
            input(2)?,
            Reduction::parse(attrs.string("reduction"))?,
        )?],
        "Trilu" => {
            let k = match inputs.get(1).and_then(|t| *t) {
                Some(k) => ints(k).first().copied().unwrap_or(0),
                None => 0,
            };
            vec![trilu(input(0)?, k, attrs.int_or("upper", 1) != 0)?]
        }
        "CumSum" | "CumProd" => {
            let axis = ints(input(1)?).first().copied().ok_or("empty axis")?;
            vec![cumulative(
                input(0)?,
                axis,
                attrs.int_or("exclusive", 0) != 0,
                attrs.int_or("reverse", 0) != 0,
                node.op_type == "CumProd",
            )?]
        }
        "Hardmax" => vec![hardmax(input(0)?, attrs.int_or("axis", -1), opset)?],
        "TopK" => {
            let k = match inputs.get(1).and_then(|t| *t) {
                Some(k) => ints(k).first().copied().ok_or("TopK: empty k")?,
                None => attrs.int("k").ok_or("TopK: no k")?,
            };
            top_k(
                input(0)?,
                k,
                attrs.int_or("axis", -1),
                attrs.int_or("largest", 1) != 0,
            )?
        }
        "OneHot" => vec![one_hot(
            input(0)?,
            input(1)?,
            input(2)?,
            attrs.int_or("axis", -1),
        )?],
        "BitShift" => {
            let left = match attrs.string("direction") {
                Some("LEFT") => true,
                Some("RIGHT") => false,
                other => return Err(format!("BitShift: direction {other:?}")),
            };
            let dtype = out_types.first().copied().unwrap_or(DType::U64);
            vec![broadcast_ints(input(0)?, input(1)?, |x, s| {
                bit_shift(x, s, dtype, left)
            })?]
        }
        "Add" | "Sub" | "Mul" => vec![arithmetic(&node.op_type, input(0)?, input(1)?)?],
        "BitwiseAnd" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a & b)?],
        "BitwiseOr" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a | b)?],
        "BitwiseXor" => vec![broadcast_ints(input(0)?, input(1)?, |a, b| a ^ b)?],
        "BitwiseNot" => {
            let x = input(0)?;
            vec![RtTensor {
                shape: x.shape.clone(),
                data: RtData::I64(ints(x).iter().map(|&v| !v).collect()),
            }]
        }
        "CastLike" => vec![cast(
            input(0)?,
            out_types.first().copied().unwrap_or(DType::F32),
        )],
        "LayerNormalization" => layer_norm(
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(|t| *t),
            attrs.int_or("axis", -1),
            attrs.float_or("epsilon", 1e-5),
            false,
        )?,
        "RMSNormalization" => layer_norm(
            input(0)?,
            input(1)?,
            None,
            attrs.int_or("axis", -1),
            attrs.float_or("epsilon", 1e-5),
            true,
        )?,
        "LpNormalization" => vec![lp_normalization(
            input(0)?,
            attrs.int_or("axis", -1),
            attrs.int_or("p", 2),
        )?],
        "DynamicQuantizeLinear" => quant::dynamic_quantize(input(0)?)?,
        "Acos" | "Acosh" | "Asin" | "Asinh" | "Atan" | "Atanh" | "Cosh" | "Sinh" | "Tan"
        | "Celu" | "ThresholdedRelu" | "Gelu" => vec![math::unary(node, input(0)?)?],
        "Mod" => vec![math::modulo(
            input(0)?,
            input(1)?,
            attrs.int_or("fmod", 0) != 0,
        )?],
        "ArgMax" | "ArgMin" => vec![math::arg_extreme(node, input(0)?)?],
        "GatherND" => vec![math::gather_nd(
            input(0)?,
            input(1)?,
            attrs.int_or("batch_dims", 0),
        )?],
        "DepthToSpace" => vec![math::depth_to_space(
            input(0)?,
            attrs.int("blocksize").unwrap_or(1),
            attrs.string("mode").unwrap_or("DCR"),
        )?],
        "EyeLike" => vec![math::eye_like(input(0)?, attrs.int_or("k", 0), out_types)?],
        "ReduceLogSum" => vec![math::reduce_log_sum(node, opset, inputs)?],
        "IsInf" | "IsNaN" => vec![math::classify(node, input(0)?)],
        "Pad" => vec![pad(node, opset, inputs)?],
        "NonZero" => vec![dynamic::non_zero(input(0)?)],
        "Compress" => vec![dynamic::compress(input(0)?, input(1)?, attrs.int("axis"))?],
        "Unique" => dynamic::unique(input(0)?, attrs.int("axis"), attrs.int_or("sorted", 1) != 0)?,
        "NonMaxSuppression" => vec![dynamic::non_max_suppression(node, inputs)?],
        "Resize" | "Upsample" => vec![resize::resize(node, opset, inputs)?],
        "GridSample" => vec![resize::grid_sample(node, input(0)?, input(1)?)?],
        "GroupNormalization" => vec![norm::group_norm(node, opset, inputs)?],
        "MeanVarianceNormalization" => vec![norm::mean_variance(node, input(0)?)?],
        "Shrink" | "Swish" => vec![math::unary(node, input(0)?)?],
        "ReverseSequence" => vec![reverse_sequence(node, input(0)?, input(1)?)?],
        "Tile" => vec![tile(input(0)?, &ints(input(1)?))?],
        "MatMulInteger" => vec![quant::matmul_integer(
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(|t| *t),
            inputs.get(3).and_then(|t| *t),
        )?],
        "Conv" => vec![geometry::conv_nd(node, inputs)?],
        "ConvTranspose" => vec![geometry::conv_transpose_nd(node, inputs)?],
        "ConvInteger" => vec![quant::conv_integer(
            node,
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(|t| *t),
            inputs.get(3).and_then(|t| *t),
        )?],
        "SpaceToDepth" => vec![space_to_depth(
            input(0)?,
            attrs.int("blocksize").unwrap_or(1),
            attrs.string("mode").unwrap_or("DCR"),
        )?],
        "NegativeLogLikelihoodLoss" => vec![nll_loss(
            input(0)?,
            input(1)?,
            inputs.get(2).and_then(|t| *t),
            attrs.int("ignore_index"),
            attrs.string("reduction").unwrap_or("mean"),
        )?],
        "SoftmaxCrossEntropyLoss" => {
            let log_prob = log_softmax_axis1(input(0)?)?;
            let loss = nll_loss(
                &log_prob,
                input(1)?,
                inputs.get(2).and_then(|t| *t),
                attrs.int("ignore_index"),
                attrs.string("reduction").unwrap_or("mean"),
            )?;
            vec![loss, log_prob]
        }
        "If" | "Loop" | "Scan" => control::run(node, opset, inputs, in_types)?,
        "TfIdfVectorizer" => vec![classic_ml::tfidf_vectorizer(node, input(0)?)?],
        "MaxUnpool" => vec![classic_ml::max_unpool(node, inputs)?],
        "DeformConv" => vec![geometry::deform_conv(node, inputs)?],
        "SwiGLU" => {
            let (gate, value) = (input(0)?, input(1)?);
            if gate.shape != value.shape {
                return Err(format!(
                    "SwiGLU: gate {:?} and value {:?} differ",
                    gate.shape, value.shape
                ));
            }
            let alpha = attrs.float_or("alpha", 1.0);
            let out = floats(gate)
                .iter()
                .zip(floats(value))
                .map(|(&a, b)| a / (1.0 + (-alpha * a).exp()) * b)
                .collect();
            vec![RtTensor {
                shape: gate.shape.clone(),
                data: RtData::F32(out),
            }]
        }
        "LinearAttention" => state::linear_attention(node, inputs)?,
        "CausalConvWithState" => state::causal_conv_with_state(node, inputs)?,
        "TensorScatter" => vec![state::tensor_scatter(node, inputs)?],
        "CenterCropPad" => vec![geometry::center_crop_pad(node, input(0)?, input(1)?)?],
        "Col2Im" => vec![geometry::col2im(node, input(0)?, input(1)?, input(2)?)?],
        "AffineGrid" => vec![geometry::affine_grid(node, input(0)?, input(1)?)?],
        "Det" => vec![geometry::det(input(0)?)?],
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            vec![geometry::window_op(node, input(0)?)?]
        }
        "BitCast" => {
            let from = in_types
                .first()
                .copied()
                .flatten()
                .ok_or("BitCast: the input's element type is not known")?;
            let to = out_types
                .first()
                .copied()
                .ok_or("BitCast: the output's element type is not known")?;
            vec![geometry::bit_cast(input(0)?, from, to)?]
        }
        other => return Err(format!("no reference kernel for {other}")),
    };
    Ok(wrapped(outputs, out_types))
}

/// Outputs wrapped to their element types (integers to their width, bools to 0/1).
fn wrapped(outputs: Vec<RtTensor>, out_types: &[DType]) -> Vec<RtTensor> {
    outputs
        .into_iter()
        .zip(
            out_types
                .iter()
                .copied()
                .chain(std::iter::repeat(DType::F32)),
        )
        .map(|(t, dtype)| wrap_to(t, dtype))
        .collect()
}

mod prepared;
pub(crate) use prepared::{prepare, run_prepared, Prepared};

fn ints(t: &RtTensor) -> Vec<i64> {
    match &t.data {
        RtData::I64(v) => v.clone(),
        RtData::F32(v) => v.iter().map(|&x| x as i64).collect(),
    }
}

/// The values as i64, borrowed when they are stored so (a large integer weight is not copied
/// on every run).
pub(super) fn int_values(t: &RtTensor) -> std::borrow::Cow<'_, [i64]> {
    match &t.data {
        RtData::I64(v) => std::borrow::Cow::Borrowed(v),
        RtData::F32(v) => std::borrow::Cow::Owned(v.iter().map(|&x| x as i64).collect()),
    }
}

/// The values as f32, borrowed when they are stored so (the generic step lends its inputs; a
/// copy per call undid that).
pub(super) fn float_values(t: &RtTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_f32() {
        Some(values) => std::borrow::Cow::Borrowed(values),
        None => std::borrow::Cow::Owned(t.to_f32()),
    }
}

fn floats(t: &RtTensor) -> Vec<f32> {
    t.to_f32()
}

use crate::kernels::movement::strides;
use broadcast::{arithmetic, broadcast_index, broadcast_ints, broadcast_shape};

fn axis_of(axis: i64, rank: usize) -> Result<usize> {
    let adjusted = if axis < 0 { axis + rank as i64 } else { axis };
    if adjusted < 0 || adjusted >= rank as i64 {
        return Err(format!("axis {axis} out of range for rank {rank}"));
    }
    Ok(adjusted as usize)
}

/// An index into a dim of size `dim`, negative counting from the end.
fn index_in(index: i64, dim: usize) -> Result<usize> {
    let adjusted = if index < 0 { index + dim as i64 } else { index };
    if adjusted < 0 || adjusted >= dim as i64 {
        return Err(format!("index {index} out of range for a dim of {dim}"));
    }
    Ok(adjusted as usize)
}

/// A tensor of the same element kind as `like`, holding `like`'s elements at `sources`.
fn select(like: &RtTensor, shape: Vec<usize>, sources: &[usize]) -> RtTensor {
    let data = match &like.data {
        RtData::F32(v) => RtData::F32(sources.iter().map(|&i| v[i]).collect()),
        RtData::I64(v) => RtData::I64(sources.iter().map(|&i| v[i]).collect()),
    };
    RtTensor { shape, data }
}

/// Outer, axis and inner extents of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// `x` shifted by `shift` bits in the integer type `dtype`: bits past the type's width are
/// dropped (a left shift wraps), a right shift of a signed type is arithmetic, and a shift by the
/// width or more gives 0 (or -1 for a negative signed value shifted right), as NumPy does.
fn bit_shift(x: i64, shift: i64, dtype: DType, left: bool) -> i64 {
    let width = type_width(dtype);
    let signed = matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64);
    if shift < 0 || shift >= i64::from(width) {
        return if !left && signed && x < 0 { -1 } else { 0 };
    }
    let shift = shift as u32;
    if left {
        // Wrapped to the width by the caller (`wrap_to`).
        ((x as u64) << shift) as i64
    } else if signed {
        x >> shift
    } else {
        ((x as u64 & width_mask(width)) >> shift) as i64
    }
}

fn type_width(dtype: DType) -> u32 {
    match dtype {
        DType::U8 | DType::I8 | DType::Bool => 8,
        DType::U16 | DType::I16 => 16,
        DType::U32 | DType::I32 => 32,
        _ => 64,
    }
}

fn width_mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Integers wrapped to their type's range (two's complement for signed types), bools 0/1.
fn wrap_to(mut t: RtTensor, dtype: DType) -> RtTensor {
    if let RtData::I64(values) = &mut t.data {
        wrap_integers(values, dtype);
    }
    t
}

crate::kernels::simd::multiversion! {
    /// In place: a copy was a second allocation and pass over every integer output (a
    /// quantized convolution's int32 bias Add wrote its 98 k elements twice). One loop per
    /// type, not one through a function pointer: the indirect call per element took 14% of a
    /// dynamically quantized model's run (ddddocr), twenty times the loop's own time; and
    /// compiled per ISA, since the baseline's SSE2 has no 64-bit sign extension (16% of a small
    /// ConvInteger's time went to wrapping its int32 sums again).
    fn wrap_integers(values: &mut [i64], dtype: DType) {
        macro_rules! wrap_all {
            ($wrap:expr) => {
                values.iter_mut().for_each(|value| *value = $wrap(*value))
            };
        }
        match dtype {
            DType::Bool => wrap_all!(|v: i64| (v != 0) as i64),
            DType::U8 => wrap_all!(|v: i64| v as u8 as i64),
            DType::I8 => wrap_all!(|v: i64| v as i8 as i64),
            DType::U16 => wrap_all!(|v: i64| v as u16 as i64),
            DType::I16 => wrap_all!(|v: i64| v as i16 as i64),
            DType::U32 => wrap_all!(|v: i64| v as u32 as i64),
            DType::I32 => wrap_all!(|v: i64| v as i32 as i64),
            _ => {}
        }
    }
}

/// A cast to `dtype`: floats to integers truncate toward zero (saturating at i64's range, as
/// Rust's cast does), integers to floats round to nearest.
fn cast(x: &RtTensor, dtype: DType) -> RtTensor {
    let data = match (&x.data, dtype.is_float()) {
        (RtData::F32(v), true) => RtData::F32(v.clone()),
        (RtData::I64(v), true) => RtData::F32(v.iter().map(|&e| e as f32).collect()),
        (RtData::F32(v), false) if dtype == DType::Bool => {
            RtData::I64(v.iter().map(|&e| (e != 0.0) as i64).collect())
        }
        (RtData::F32(v), false) => RtData::I64(v.iter().map(|&e| e as i64).collect()),
        (RtData::I64(v), false) => RtData::I64(v.clone()),
    };
    RtTensor {
        shape: x.shape.clone(),
        data,
    }
}

/// Owned test inputs lent as the kernels take them.
#[cfg(test)]
pub(super) fn lend(inputs: &[Option<RtTensor>]) -> Vec<Option<&RtTensor>> {
    inputs.iter().map(Option::as_ref).collect()
}

/// A node of `op` with `attrs`, for the reference kernels' tests.
#[cfg(test)]
pub(crate) fn test_node(op: &str, attrs: &[(&str, crate::analysis::graph::Attr)]) -> Node {
    let mut node = Node {
        name: "n".into(),
        op_type: op.into(),
        domain: String::new(),
        attrs: Default::default(),
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    for (name, value) in attrs {
        node.attrs.0.insert(name.to_string(), value.clone());
    }
    node
}

#[cfg(test)]
mod tests {
    use super::einsum::einsum;
    use super::index::{cumulative, gather_elements, scatter_elements, tile, top_k, Reduction};
    use super::*;

    pub(super) fn f(shape: &[usize], values: &[f32]) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::F32(values.to_vec()),
        }
    }

    fn i(shape: &[usize], values: &[i64]) -> RtTensor {
        RtTensor {
            shape: shape.to_vec(),
            data: RtData::I64(values.to_vec()),
        }
    }

    #[test]
    fn gather_and_scatter_elements_follow_the_spec_examples() {
        // The spec's GatherElements example: axis 1.
        let data = f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let out = gather_elements(&data, &i(&[2, 2], &[0, 0, 1, 0]), 1).unwrap();
        assert_eq!(out.to_f32(), vec![1.0, 1.0, 4.0, 3.0]);
        // ScatterElements with axis 1 and a negative index.
        let data = f(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let out = scatter_elements(
            &data,
            &i(&[1, 2], &[1, -2]),
            &f(&[1, 2], &[1.1, 2.1]),
            1,
            Reduction::None,
        )
        .unwrap();
        assert_eq!(out.to_f32(), vec![1.0, 1.1, 3.0, 2.1, 5.0]);
    }

    #[test]
    fn gather_takes_integer_rows_and_columns_with_negative_indices() {
        // A u8 table of 3 rows × 4: rows 2 and -3 (= 0) of it, as an embedding lookup.
        let table = i(&[3, 4], &(0..12).collect::<Vec<_>>());
        let rows = index::gather(&table, &i(&[1, 2], &[2, -3]), 0).unwrap();
        assert_eq!(rows.shape, [1, 2, 4]);
        assert_eq!(ints(&rows), [8, 9, 10, 11, 0, 1, 2, 3]);
        // Columns 3 and 1 along axis 1 (= -1), a scalar index dropping the axis.
        let columns = index::gather(&table, &i(&[2], &[3, 1]), -1).unwrap();
        assert_eq!(columns.shape, [3, 2]);
        assert_eq!(ints(&columns), [3, 1, 7, 5, 11, 9]);
        let one = index::gather(&table, &i(&[], &[1]), 1).unwrap();
        assert_eq!((one.shape.clone(), ints(&one)), (vec![3], vec![1, 5, 9]));
        assert!(index::gather(&table, &i(&[1], &[3]), 0).is_err());
    }

    #[test]
    fn top_k_keeps_the_lower_index_on_ties() {
        let x = f(&[1, 4], &[3.0, 5.0, 5.0, 1.0]);
        let out = top_k(&x, 2, -1, true).unwrap();
        assert_eq!(out[0].to_f32(), vec![5.0, 5.0]);
        assert_eq!(ints(&out[1]), vec![1, 2]);
        let out = top_k(&x, 2, -1, false).unwrap();
        assert_eq!(ints(&out[1]), vec![3, 0]);
    }

    /// Tile against its definition, out[i] = x[i mod shape per axis], floats and integers.
    /// ConvTranspose's N-D reference by hand: a 1-D scatter at stride 2, cropped by its pads,
    /// two groups, and the same problem as 3-D with unit depth and height.
    #[test]
    fn conv_transpose_nd_scatters_crops_and_groups() {
        use crate::analysis::graph::Attr;
        let x = f(&[1, 2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 1.0]);
        // [C_in = 2, M/g = 1, k = 2]: group 0 scatters (1, 10), group 1 (100, 1000).
        let w = f(&[2, 1, 2], &[1.0, 10.0, 100.0, 1000.0]);
        let node = test_node(
            "ConvTranspose",
            &[
                ("strides", Attr::Ints(vec![2])),
                ("pads", Attr::Ints(vec![1, 1])),
                ("group", Attr::Int(2)),
            ],
        );
        let out =
            geometry::conv_transpose_nd(&node, &lend(&[Some(x.clone()), Some(w.clone())])).unwrap();
        assert_eq!(out.shape, vec![1, 2, 4]);
        // Full scatters [1, 10, 2, 20, 3, 30] and [-100, -1000, 0, 0, 100, 1000], pads cropped.
        assert_eq!(
            out.to_f32(),
            vec![10.0, 2.0, 20.0, 3.0, -1000.0, 0.0, 0.0, 100.0]
        );
        let x3 = f(&[1, 2, 1, 1, 3], &x.to_f32());
        let w3 = f(&[2, 1, 1, 1, 2], &w.to_f32());
        let node3 = test_node(
            "ConvTranspose",
            &[
                ("strides", Attr::Ints(vec![1, 1, 2])),
                ("pads", Attr::Ints(vec![0, 0, 1, 0, 0, 1])),
                ("group", Attr::Int(2)),
            ],
        );
        let out3 = geometry::conv_transpose_nd(&node3, &lend(&[Some(x3), Some(w3)])).unwrap();
        assert_eq!(out3.shape, vec![1, 2, 1, 1, 4]);
        assert_eq!(out3.to_f32(), out.to_f32());
    }

    #[test]
    fn tile_repeats_every_axis() {
        let x = f(&[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let repeats = [2i64, 3, 2];
        let out = tile(&x, &repeats).unwrap();
        assert_eq!(out.shape, vec![4, 3, 6]);
        let got = out.to_f32();
        for (n, &v) in got.iter().enumerate() {
            let (a, c) = (n / 18 % 2, n % 6 % 3);
            assert_eq!(v, (a * 3 + c + 1) as f32, "at {n}");
        }
        let i = RtTensor {
            shape: vec![3],
            data: RtData::I64(vec![7, 8, 9]),
        };
        assert_eq!(ints(&tile(&i, &[2]).unwrap()), vec![7, 8, 9, 7, 8, 9]);
        assert_eq!(tile(&x, &[1, 0, 1]).unwrap().shape, vec![2, 0, 3]);
    }

    /// TopK's selection against a full stable sort, on rows with ties, for several k and both
    /// directions, along a middle axis.
    #[test]
    fn top_k_matches_a_full_sort() {
        // inner 1 takes the blocked path for contiguous f32 rows (blocks of 16). Its rows of
        // 48: the first block sets the kept values, the later blocks hold only values that
        // lose to them but for one NaN, −NaN, +0 after −0s (a tie: the lower index wins) or
        // infinity, which a compare that skips blocks must still see. The last two rows open
        // with a block of −NaN or +NaN, kept first and worst, which every later value beats
        // (largest and smallest asked for respectively).
        let mut rows_48: Vec<f32> = [
            (f32::NAN, 40usize),
            (-f32::NAN, 21),
            (0.0, 20),
            (f32::INFINITY, 47),
        ]
        .iter()
        .flat_map(|&(special, at)| {
            (0..48usize).map(move |a| match a {
                _ if a == at => special,
                0..=15 if special == 0.0 => -0.0,
                0..=15 => 1.0 + a as f32,
                _ if special == 0.0 => -1.0,
                _ => 0.5,
            })
        })
        .collect();
        for nan in [-f32::NAN, f32::NAN] {
            rows_48.extend((0..48usize).map(|a| if a < 16 { nan } else { a as f32 }));
        }
        for (outer, len, inner) in [(3usize, 40usize, 2usize), (3, 70, 1), (6, 48, 1)] {
            let values: Vec<f32> = if len == 48 {
                rows_48.clone()
            } else {
                (0..outer * len * inner)
                    .map(|v| ((v * 37) % 11) as f32)
                    .collect()
            };
            let x = f(&[outer, len, inner], &values);
            for k in [1usize, 2, 5, 39, 40] {
                for largest in [true, false] {
                    let out = top_k(&x, k as i64, 1, largest).unwrap();
                    let indices = ints(&out[1]);
                    for o in 0..outer {
                        for i in 0..inner {
                            let mut order: Vec<usize> = (0..len).collect();
                            let key = |a: usize| values[(o * len + a) * inner + i];
                            // Stable: equal values (−0 = +0) keep the lower index first.
                            order.sort_by(|&a, &b| {
                                let by = if key(a) == key(b) {
                                    std::cmp::Ordering::Equal
                                } else {
                                    key(a).total_cmp(&key(b))
                                };
                                if largest {
                                    by.reverse()
                                } else {
                                    by
                                }
                            });
                            let got: Vec<usize> = (0..k)
                                .map(|n| indices[(o * k + n) * inner + i] as usize)
                                .collect();
                            assert_eq!(got, order[..k], "k {k} largest {largest} line {o},{i}");
                            let got_values = out[0].to_f32();
                            for (n, &a) in order[..k].iter().enumerate() {
                                let value = got_values[(o * k + n) * inner + i];
                                assert_eq!(value.to_bits(), key(a).to_bits());
                            }
                        }
                    }
                }
            }
        }
    }

    /// CumSum along a middle axis: every line of the inner extent scans on its own.
    #[test]
    fn cumulative_scans_each_line_of_a_middle_axis() {
        let x = f(
            &[2, 3, 2],
            &[
                1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0, 5.0, 50.0, 6.0, 60.0,
            ],
        );
        let got = cumulative(&x, 1, false, false, false).unwrap().to_f32();
        assert_eq!(
            got,
            vec![1.0, 10.0, 3.0, 30.0, 6.0, 60.0, 4.0, 40.0, 9.0, 90.0, 15.0, 150.0]
        );
        let got = cumulative(&x, 1, true, true, false).unwrap().to_f32();
        assert_eq!(
            got,
            vec![5.0, 50.0, 3.0, 30.0, 0.0, 0.0, 11.0, 110.0, 6.0, 60.0, 0.0, 0.0]
        );
    }

    #[test]
    fn cumulative_sums_and_products_exclusive_and_reverse() {
        let x = f(&[4], &[1.0, 2.0, 3.0, 4.0]);
        let sum = |exclusive, reverse| {
            cumulative(&x, 0, exclusive, reverse, false)
                .unwrap()
                .to_f32()
        };
        assert_eq!(sum(false, false), vec![1.0, 3.0, 6.0, 10.0]);
        assert_eq!(sum(true, false), vec![0.0, 1.0, 3.0, 6.0]);
        assert_eq!(sum(false, true), vec![10.0, 9.0, 7.0, 4.0]);
        assert_eq!(sum(true, true), vec![9.0, 7.0, 4.0, 0.0]);
        let product = cumulative(&x, 0, true, false, true).unwrap().to_f32();
        assert_eq!(product, vec![1.0, 1.0, 2.0, 6.0]);
    }

    #[test]
    fn einsum_as_gemm_matches_the_element_loop() {
        // Float operands of a GEMM-shaped equation take the transposes and GEMMs; the same
        // small integers as int64 take the element-by-element loop: the two must agree exactly.
        let tensor = |shape: &[usize], seed: usize| {
            let count: usize = shape.iter().product();
            let values: Vec<i64> = (0..count)
                .map(|v| ((v * 7 + seed) % 9) as i64 - 4)
                .collect();
            (
                f(shape, &values.iter().map(|&v| v as f32).collect::<Vec<_>>()),
                RtTensor {
                    shape: shape.to_vec(),
                    data: RtData::I64(values),
                },
            )
        };
        for (equation, a_shape, b_shape) in [
            ("bhqd,bhkd->bhqk", &[2, 3, 5, 4][..], &[2, 3, 6, 4][..]),
            ("bhqk,bhkd->bhqd", &[2, 3, 5, 6], &[2, 3, 6, 4]),
            ("ij,kj->ki", &[3, 4], &[5, 4]),
            ("abc,cd->dba", &[2, 3, 4], &[4, 5]),
            ("i,j->ij", &[3], &[4]),
            ("ij,j->i", &[3, 4], &[4]),
            ("bij,bij->b", &[2, 3, 4], &[2, 3, 4]),
            ("nchw,kc->nkhw", &[1, 3, 2, 2], &[4, 3]),
        ] {
            let (a, a_int) = tensor(a_shape, 1);
            let (b, b_int) = tensor(b_shape, 5);
            let fast = einsum(equation, &[&a, &b]).unwrap();
            let loop_ = einsum(equation, &[&a_int, &b_int]).unwrap();
            assert_eq!(fast.shape, loop_.shape, "{equation}");
            let want: Vec<f32> = ints(&loop_).iter().map(|&v| v as f32).collect();
            assert_eq!(fast.to_f32(), want, "{equation}");
        }
    }

    #[test]
    fn einsum_contracts_transposes_and_takes_diagonals() {
        let a = f(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        let product = einsum("ij,jk->ik", &[&a, &b]).unwrap();
        assert_eq!(product.to_f32(), vec![4.0, 5.0, 10.0, 11.0]);
        let transposed = einsum("ij->ji", &[&a]).unwrap();
        assert_eq!(transposed.to_f32(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let square = f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            einsum("ii->i", &[&square]).unwrap().to_f32(),
            vec![1.0, 4.0]
        );
        assert_eq!(einsum("ii", &[&square]).unwrap().to_f32(), vec![5.0]);
        let batched = einsum("...ij,...jk", &[&a, &b]).unwrap();
        assert_eq!(batched.shape, vec![2, 2]);
        assert_eq!(batched.to_f32(), vec![4.0, 5.0, 10.0, 11.0]);
        // A batched left operand against a plain right one (broadcast dims differ by operand).
        let stacked = f(
            &[2, 2, 3],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        );
        let out = einsum("...ij,jk->...ik", &[&stacked, &b]).unwrap();
        assert_eq!(out.shape, vec![2, 2, 2]);
        assert_eq!(out.to_f32(), vec![4.0, 5.0, 10.0, 11.0, 0.0, 0.0, 2.0, 2.0]);
        assert!(einsum("ij->ik", &[&a]).is_err());
        assert!(einsum("ijkl->i", &[&a]).is_err());
    }

    #[test]
    fn integers_wrap_to_their_width() {
        let t = wrap_to(i(&[3], &[256, 255, -1]), DType::U8);
        assert_eq!(ints(&t), vec![0, 255, 255]);
        let t = wrap_to(i(&[2], &[128, -129]), DType::I8);
        assert_eq!(ints(&t), vec![-128, 127]);
    }
}
