//! Which calibration table an op is predicted from: its kernel class (from the op type, the
//! convolution's window and groups, whether a MatMul's second operand is a constant), and the
//! convolution extents its shape features (`device::calibration::ShapeFeatures`) compare.
//! Pure: facts in, class out.

use crate::device::calibration::KernelClass;

use super::graph::Attributes;
use super::tensor::TensorFact;

/// The kernel class of an op, or `None` for ops no calibration table covers (views, shape
/// arithmetic, QuantizeLinear and DequantizeLinear, recurrent cells, control flow): their
/// expected time is not predicted.
pub fn kernel_class(
    domain: &str,
    op_type: &str,
    attrs: &Attributes,
    inputs: &[Option<&TensorFact>],
) -> Option<KernelClass> {
    let standard = domain.is_empty() || domain == "ai.onnx";
    let fused = domain == "roofline";
    if !(standard || fused) {
        return None;
    }
    let class = match op_type {
        "Conv" | "FusedConv" | "ConvTranspose" => conv_class(attrs, inputs),
        // The low-precision convolutions and products (the advisor's int8 and bf16 forms, the
        // standard integer ops) run the same packed GEMMs on other operand types: same class,
        // their precision in the key (`NodeAnalysis::calibration_op_type`).
        "QConv" | "HalfConv" if fused => conv_class(attrs, inputs),
        "ConvInteger" if standard => conv_class(attrs, inputs),
        "QMatMul" | "HalfMatMul" if fused => KernelClass::Gemm,
        "Gemm" | "FusedGemm" => KernelClass::Gemm,
        "MatMul" | "FusedMatMul" => matmul_class(inputs),
        "MatMulInteger" if standard => matmul_class(inputs),
        "MaxPool" | "AveragePool" | "GlobalAveragePool" | "GlobalMaxPool" | "LpPool"
        | "GlobalLpPool" => KernelClass::Pool,
        "BatchNormalization" => KernelClass::BatchNorm,
        "LayerNormalization"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "MeanVarianceNormalization" => KernelClass::Norm,
        "LRN" => KernelClass::Lrn,
        "Softmax" | "LogSoftmax" | "Hardmax" => KernelClass::Softmax,
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" | "ArgMax"
        | "ArgMin" => KernelClass::Reduce,
        "Transpose" | "Concat" | "Slice" | "Gather" | "GatherElements" | "GatherND" | "Pad"
        | "Resize" | "Upsample" | "Split" | "Expand" | "Tile" | "DepthToSpace" | "SpaceToDepth"
        | "ScatterND" | "ScatterElements" | "Scatter" => KernelClass::Movement,
        "Relu"
        | "LeakyRelu"
        | "PRelu"
        | "Elu"
        | "Selu"
        | "Celu"
        | "Sigmoid"
        | "HardSigmoid"
        | "HardSwish"
        | "Tanh"
        | "Softplus"
        | "Softsign"
        | "Gelu"
        | "Mish"
        | "Erf"
        | "Exp"
        | "Log"
        | "Sqrt"
        | "Reciprocal"
        | "Neg"
        | "Abs"
        | "Ceil"
        | "Floor"
        | "Round"
        | "Sign"
        | "Clip"
        | "Add"
        | "Sub"
        | "Mul"
        | "Div"
        | "Pow"
        | "Max"
        | "Min"
        | "Sum"
        | "Mean"
        | "Where"
        | "Equal"
        | "Less"
        | "Greater"
        | "LessOrEqual"
        | "GreaterOrEqual"
        | "Not"
        | "And"
        | "Or"
        | "Xor"
        | "Cast"
        | "CastLike"
        | "Mod"
        | "Sin"
        | "Cos"
        | "IsNaN"
        | "IsInf"
        | "ThresholdedRelu"
        | "Shrink"
        | "Dropout"
        | "ElementwiseChain"
        | "DynamicQuantizeLinear" => KernelClass::Elementwise,
        _ => return None,
    };
    Some(class)
}

/// A product against a constant second operand (weights) or of two computed ones.
fn matmul_class(inputs: &[Option<&TensorFact>]) -> KernelClass {
    let weights = inputs.get(1).copied().flatten();
    if weights.is_some_and(TensorFact::is_constant) {
        KernelClass::Gemm
    } else {
        KernelClass::Matmul
    }
}

fn conv_class(attrs: &Attributes, inputs: &[Option<&TensorFact>]) -> KernelClass {
    let group = attrs.int_or("group", 1).max(1) as u64;
    let weight_shape = inputs
        .get(1)
        .copied()
        .flatten()
        .and_then(TensorFact::concrete_shape);
    let input_channels = inputs
        .first()
        .copied()
        .flatten()
        .and_then(TensorFact::concrete_shape)
        .and_then(|shape| shape.get(1).copied());
    match weight_shape {
        Some(w) if group > 1 && w.get(1) == Some(&1) && input_channels == Some(group) => {
            KernelClass::Depthwise
        }
        _ if group > 1 => KernelClass::Grouped,
        Some(w) if group == 1 && w.len() > 2 && w[2..].iter().all(|&k| k == 1) => {
            let strided = attrs
                .ints("strides")
                .is_some_and(|s| s.iter().any(|&x| x != 1));
            // A strided 1×1 gathers its input like a window does.
            if strided {
                KernelClass::Conv
            } else {
                KernelClass::Pointwise
            }
        }
        _ => KernelClass::Conv,
    }
}

/// Whether the tool's kernel for an op of `class` with `flops` of work runs it on one thread
/// when the plan has `threads`: classes that split by compute work
/// (`KernelClass::splits_by_compute`) under the kernels' own rule
/// (`kernels::parallel::compute_threads`). Such an op is predicted from the one-thread table
/// (`analyze_prepared`), and `calibrate` keeps it out of its multi-thread tables.
pub fn stays_on_one_thread(class: KernelClass, threads: usize, flops: u64) -> bool {
    threads > 1
        && class.splits_by_compute()
        && crate::kernels::parallel::compute_threads(threads, flops as f64) == 1
}

/// Whether the tool's kernel for an op of `class` (ONNX type `op_type`, output `output_shape`,
/// `flops` of work) splits its output across the plan's `threads`, by the rules the kernels
/// apply (from `kernels`, so both sides read one definition): dense and 1×1 convolutions by
/// their compute work (`parallel::compute_threads`); products by their batches where those are
/// shared (`parallel::batches_shared`), else a one-row product (a GEMV) by the matrix it
/// streams (`gemm::gemv_threads`) and any other by its compute work; depthwise, grouped and
/// Winograd convolutions by channels, groups or tiles whatever their size; reductions by the
/// elements they reduce (`parallel::reduction_pieces`); pooling and LRN by their window work,
/// row normalisations by three passes per element, other element-wise kernels by their output
/// (`parallel::elementwise_pieces`); of the movement ops only Transpose and Resize split. An op
/// kept on one thread after one that split reads part of its input from another core's caches
/// (`analysis::handoff`).
pub fn splits_across_threads(
    class: KernelClass,
    op_type: &str,
    threads: usize,
    flops: u64,
    output_shape: &[u64],
) -> bool {
    use crate::kernels::gemm::gemv_threads;
    use crate::kernels::parallel::{
        batches_shared, compute_threads, elementwise_pieces, reduction_pieces,
    };
    if threads <= 1 {
        return false;
    }
    let output_elements = output_shape.iter().product::<u64>() as usize;
    let pieces = |work: usize, weight: usize| elementwise_pieces(work, weight, threads) > 1;
    match class {
        KernelClass::Conv | KernelClass::Pointwise => compute_threads(threads, flops as f64) > 1,
        KernelClass::Gemm | KernelClass::Matmul => {
            let rank = output_shape.len();
            let batch = output_shape[..rank.saturating_sub(2)]
                .iter()
                .product::<u64>();
            let rows = if rank >= 2 { output_shape[rank - 2] } else { 1 };
            if batches_shared(batch as usize, threads) {
                return true;
            }
            let product_flops = flops / batch.max(1);
            if rows == 1 {
                gemv_threads(threads, (product_flops / 2) as usize) > 1
            } else {
                compute_threads(threads, product_flops as f64) > 1
            }
        }
        KernelClass::Depthwise | KernelClass::Grouped | KernelClass::Winograd => true,
        KernelClass::Pool | KernelClass::Lrn => {
            pieces(flops.max(output_elements as u64) as usize, 1)
        }
        // A reduction's work is one operation per element it reads.
        KernelClass::Reduce => reduction_pieces(flops as usize, threads).min(output_elements) > 1,
        KernelClass::Norm => pieces(output_elements, 3),
        KernelClass::Elementwise | KernelClass::BatchNorm | KernelClass::Softmax => {
            pieces(output_elements, 1)
        }
        KernelClass::Movement => {
            matches!(op_type, "Transpose" | "Resize") && pieces(output_elements, 1)
        }
    }
}

/// The convolution extents the calibration matches on besides work and traffic
/// (`ShapeFeatures::with_output_channels`, `with_output_width`): `(output channels, 0)` for a
/// convolution, `(0, output row width)` for a depthwise 2-D one, `(0, 0)` for other ops or
/// unknown shapes.
pub fn window_extents(
    op_type: &str,
    attrs: &Attributes,
    output: Option<&TensorFact>,
) -> (u64, u64) {
    // Every op that runs a convolution's kernel, fused and low-precision forms included.
    if !matches!(
        super::model::kernel_op_type(op_type),
        "Conv" | "ConvTranspose" | "ConvInteger"
    ) {
        return (0, 0);
    }
    let Some(shape) = output.and_then(TensorFact::concrete_shape) else {
        return (0, 0);
    };
    let channels = shape.get(1).copied().unwrap_or(0);
    // A depthwise convolution's channels are its whole width, not a ratio of output to input
    // work: on the calibration grid the feature made its leave-one-out error worse (2 threads:
    // median 8% → 15%) where it helped every other convolution class. Its row width is what
    // sets its kernel's cost per output instead.
    let group = attrs.int_or("group", 1).max(1) as u64;
    if group > 1 && group == channels {
        let width = if shape.len() == 4 { shape[3] } else { 0 };
        (0, width)
    } else {
        (channels, 0)
    }
}

/// A convolution's window taps (the product of its weight's spatial dims, 1 for a 1×1), or 0
/// for other ops and weights of unknown shape: what [`ShapeFeatures::with_taps`] matches on.
///
/// [`ShapeFeatures::with_taps`]: crate::device::calibration::ShapeFeatures::with_taps
pub fn window_taps(op_type: &str, weight: Option<&TensorFact>) -> u64 {
    if !matches!(
        super::model::kernel_op_type(op_type),
        "Conv" | "ConvTranspose" | "ConvInteger"
    ) {
        return 0;
    }
    match weight.and_then(TensorFact::concrete_shape) {
        Some(shape) if shape.len() >= 3 => shape[2..].iter().product(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;
    use crate::analysis::tensor::DType;

    fn attrs(pairs: &[(&str, Attr)]) -> Attributes {
        Attributes(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn fact(shape: &[u64]) -> TensorFact {
        TensorFact::known(DType::F32, shape)
    }

    #[test]
    fn convolutions_by_window_and_groups() {
        let x = fact(&[1, 32, 56, 56]);
        let dense = fact(&[64, 32, 3, 3]);
        let point = fact(&[64, 32, 1, 1]);
        let depth = fact(&[32, 1, 3, 3]);
        let none = Attributes::default();
        let class =
            |a: &Attributes, w: &TensorFact| kernel_class("", "Conv", a, &[Some(&x), Some(w)]);
        assert_eq!(class(&none, &dense), Some(KernelClass::Conv));
        assert_eq!(class(&none, &point), Some(KernelClass::Pointwise));
        let grouped = attrs(&[("group", Attr::Int(32))]);
        assert_eq!(class(&grouped, &depth), Some(KernelClass::Depthwise));
        // Four groups of eight channels: one GEMM per group, not a depthwise kernel.
        let four = attrs(&[("group", Attr::Int(4))]);
        let per_group = fact(&[64, 8, 1, 1]);
        assert_eq!(class(&four, &per_group), Some(KernelClass::Grouped));
        let strided = attrs(&[("strides", Attr::Ints(vec![2, 2]))]);
        assert_eq!(class(&strided, &point), Some(KernelClass::Conv));
    }

    #[test]
    fn window_taps_come_from_the_weight_spatial_dims() {
        assert_eq!(window_taps("Conv", Some(&fact(&[64, 8, 3, 3]))), 9);
        assert_eq!(window_taps("Conv", Some(&fact(&[64, 8, 1, 1]))), 1);
        assert_eq!(window_taps("Conv", Some(&fact(&[64, 8, 5]))), 5);
        assert_eq!(window_taps("FusedConv", Some(&fact(&[64, 8, 7, 7]))), 49);
        // Not a convolution, or a weight of unknown shape: absent.
        assert_eq!(window_taps("MatMul", Some(&fact(&[64, 8, 3, 3]))), 0);
        assert_eq!(window_taps("Conv", None), 0);
    }

    #[test]
    fn low_precision_forms_join_their_float_class_in_their_own_domain_only() {
        let x = fact(&[1, 32, 56, 56]);
        let point = TensorFact::known(DType::I8, &[64, 32, 1, 1]);
        let none = Attributes::default();
        let inputs = [Some(&x), Some(&point)];
        let class = |domain: &str, op: &str| kernel_class(domain, op, &none, &inputs);
        assert_eq!(class("roofline", "QConv"), Some(KernelClass::Pointwise));
        assert_eq!(class("roofline", "HalfConv"), Some(KernelClass::Pointwise));
        assert_eq!(class("", "ConvInteger"), Some(KernelClass::Pointwise));
        assert_eq!(class("roofline", "QMatMul"), Some(KernelClass::Gemm));
        assert_eq!(
            class("", "DynamicQuantizeLinear"),
            Some(KernelClass::Elementwise)
        );
        // A standard-domain op of the tool's own names, or the reverse, is not guessed at.
        assert_eq!(class("", "QConv"), None);
        assert_eq!(class("roofline", "ConvInteger"), None);
        // MatMulInteger of two computed operands is an attention-like product.
        let activations = [Some(&x), Some(&x)];
        assert_eq!(
            kernel_class("", "MatMulInteger", &none, &activations),
            Some(KernelClass::Matmul)
        );
        assert_eq!(
            window_extents("QConv", &none, Some(&fact(&[1, 64, 56, 56]))),
            (64, 0)
        );
    }

    #[test]
    fn convolutions_are_matched_on_channels_depthwise_ones_on_row_width() {
        let out = fact(&[1, 64, 12, 80]);
        let none = Attributes::default();
        assert_eq!(window_extents("Conv", &none, Some(&out)), (64, 0));
        let depthwise = attrs(&[("group", Attr::Int(64))]);
        assert_eq!(window_extents("FusedConv", &depthwise, Some(&out)), (0, 80));
        // Grouped, not depthwise: matched on channels.
        let four = attrs(&[("group", Attr::Int(4))]);
        assert_eq!(window_extents("Conv", &four, Some(&out)), (64, 0));
        // A 1-D depthwise convolution has no row width to compare.
        assert_eq!(
            window_extents("Conv", &depthwise, Some(&fact(&[1, 64, 80]))),
            (0, 0)
        );
        assert_eq!(window_extents("Relu", &none, Some(&out)), (0, 0));
        assert_eq!(window_extents("Conv", &none, None), (0, 0));
    }

    #[test]
    fn matmul_against_weights_is_a_gemm_otherwise_a_batched_matmul() {
        let a = fact(&[128, 768]);
        let weights = TensorFact::constant(crate::analysis::tensor::Tensor::from_f32(
            vec![2, 2],
            vec![0.0; 4],
        ));
        let computed = fact(&[768, 64]);
        let none = Attributes::default();
        assert_eq!(
            kernel_class("", "MatMul", &none, &[Some(&a), Some(&weights)]),
            Some(KernelClass::Gemm)
        );
        assert_eq!(
            kernel_class("", "MatMul", &none, &[Some(&a), Some(&computed)]),
            Some(KernelClass::Matmul)
        );
    }

    #[test]
    fn uncovered_ops_have_no_class() {
        let none = Attributes::default();
        assert_eq!(kernel_class("", "Reshape", &none, &[]), None);
        assert_eq!(kernel_class("", "If", &none, &[]), None);
        assert_eq!(kernel_class("com.microsoft", "Attention", &none, &[]), None);
        assert_eq!(kernel_class("", "QuantizeLinear", &none, &[]), None);
        assert_eq!(kernel_class("", "DynamicQuantizeLSTM", &none, &[]), None);
        assert_eq!(
            kernel_class("", "Sigmoid", &none, &[]),
            Some(KernelClass::Elementwise)
        );
    }
}
