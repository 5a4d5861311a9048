//! The grid's low-precision points: the advisor's int8 and bf16 forms of convolutions and
//! products, and layers as onnxruntime's dynamic quantizer writes them.

use super::{
    attr_int, attr_ints, conv, conv_out, gemm, gemm_trans_b, GraphBuilder, GridModel, KernelClass,
    Precision, WeightFill, FLOAT,
};
use crate::builtin::builder::SigDim;

/// Convolutions and products again at a lower precision: the advisor's int8 form (`QConv`,
/// `QMatMul`: activations quantized while packed, `vpdpbusd` where the CPU has VNNI) and its
/// bf16 form (`HalfConv`, `HalfMatMul`), at shapes across the fp32 points' range (stems,
/// ResNet and VGG stages, MobileNet expansions and projections, classifier GEMVs, transformer
/// projections). Without them `compress` and `advise` costed an int8 op at its bound while the
/// fp32 op it replaces took its calibrated time: ResNet-50's int8 step was expected 3.9× on
/// the converted ops where it measured 2.9×.
pub(super) fn low_precision(precision: Precision) -> Vec<GridModel> {
    let mut points = Vec::new();
    for &(cin, cout, size, kernel, stride) in &[
        (3, 64, 224, 7, 2),
        (64, 64, 56, 3, 1),
        (64, 128, 56, 3, 2),
        (128, 128, 28, 3, 1),
        (256, 256, 14, 3, 1),
        (512, 512, 7, 3, 1),
        (128, 32, 28, 3, 1),
        (32, 32, 160, 3, 1),
        (16, 16, 28, 3, 1),
        (64, 64, 112, 3, 1),
    ] {
        points.push(conv(cin, cout, size, kernel, stride, 1));
    }
    for &(cin, cout, size) in &[
        (16, 96, 112),
        (144, 24, 56),
        (64, 256, 56),
        (256, 64, 56),
        (512, 128, 28),
        (1024, 256, 14),
        (2048, 512, 7),
        (512, 2048, 7),
        (320, 1280, 7),
        (96, 32, 12),
        (16, 64, 16),
    ] {
        points.push(conv(cin, cout, size, 1, 1, 1));
    }
    for &(rows, inner, cols) in &[
        (1, 2048, 1000),
        (1, 4096, 4096),
        (16, 1024, 1024),
        (64, 256, 256),
        (128, 768, 768),
        (128, 768, 3072),
        (128, 3072, 768),
        (40, 384, 96),
    ] {
        points.push(gemm(rows, inner, cols));
    }
    for &(rows, inner, cols) in &[(1, 512, 1000), (8, 2048, 1000), (128, 768, 768)] {
        points.push(gemm_trans_b(rows, inner, cols));
    }
    for point in &mut points {
        // The 3×3 stride-1 shapes run direct at a low precision: no Winograd class.
        if point.class == KernelClass::Winograd {
            point.class = KernelClass::Conv;
        }
        point.shape = format!("{} {}", point.shape, precision.name());
        point.precision = Some(precision);
        point.first_round_only = true;
    }
    points
}

/// A layer as onnxruntime's dynamic quantizer writes it (`quantize_dynamic`: OCR and speech
/// models ship so): `DynamicQuantizeLinear` on the float activations, the integer op
/// (`ConvInteger` with `conv` = `Some((kernel, stride))`, else `MatMulInteger` on `[rows,
/// inner]`) on uint8 weights with a zero point, and the `Cast` of its int32 sums back to
/// float. The range pass and the integer op are points of their own op type, both under int8
/// keys: their kernels (the range and rounding passes, the integer GEMM with its offset
/// epilogue) are none of the float points' (ddddocr's 21 ConvIntegers took 5.8 ms where the
/// advisor's int8 convolutions' points expected 3.2). The Cast is not recorded
/// (`calibrate::records`): timed in one round under an fp32 key, it would predict fp32 casts.
fn dynamic_int8(
    class: KernelClass,
    input: &[i64],
    weights: &[i64],
    output: &[i64],
    conv: Option<(i64, i64)>,
) -> GridModel {
    let mut b = GraphBuilder::new(WeightFill::Random(7));
    let x = b.input("x", FLOAT, &SigDim::fixed_all(input));
    let (q, scale, zero) = ("x_q".to_string(), "x_scale", "x_zero_point");
    b.node_multi("DynamicQuantizeLinear", &[&x], vec![], &[&q, scale, zero]);
    let w = b.byte_weight("w", weights);
    let w_zero = b.byte_scalar("w_zero_point", 131);
    let (op, attrs) = match conv {
        Some((kernel, stride)) => (
            "ConvInteger",
            vec![
                attr_ints("kernel_shape", &[kernel, kernel]),
                attr_ints("strides", &[stride, stride]),
                attr_ints("pads", &[kernel / 2; 4]),
            ],
        ),
        None => ("MatMulInteger", vec![]),
    };
    let sums = b.node(op, &[&q, &w, zero, &w_zero], attrs);
    let y = b.node("Cast", &[&sums], vec![attr_int("to", i64::from(FLOAT))]);
    b.output(&y, FLOAT, &SigDim::fixed_all(output));
    let shape = format!(
        "dynamic int8 {} {} · {}",
        op,
        dims_words(input),
        dims_words(weights)
    );
    // No cold twin: its weights are bytes (a recogniser's fit the caches), and its range pass
    // and Cast would be timed with evicted caches under their warm points' keys.
    GridModel {
        cold_twin: false,
        first_round_only: true,
        ..GridModel::new(class, shape, b.finish("calibration"))
    }
}

fn dims_words(dims: &[i64]) -> String {
    dims.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

/// Dynamically quantized convolutions and products: text-line recogniser stages (few rows,
/// long planes), CNN stages, and a recurrent or transformer layer's projections.
pub(super) fn dynamic_int8_points() -> Vec<GridModel> {
    let mut points = Vec::new();
    for &(cin, cout, (height, width), kernel, stride) in &[
        (1, 32, (64, 256), 3, 1),
        (32, 64, (32, 128), 3, 1),
        (64, 128, (16, 64), 3, 1),
        (128, 256, (8, 32), 3, 1),
        (256, 256, (4, 32), 3, 1),
        (64, 64, (56, 56), 3, 1),
        (128, 128, (28, 28), 3, 2),
        (64, 256, (56, 56), 1, 1),
        (512, 128, (28, 28), 1, 1),
        (16, 16, (28, 28), 3, 1),
    ] {
        let (out_h, out_w) = (
            conv_out(height, kernel, stride),
            conv_out(width, kernel, stride),
        );
        let class = if kernel == 1 {
            KernelClass::Pointwise
        } else {
            KernelClass::Conv
        };
        points.push(dynamic_int8(
            class,
            &[1, cin, height, width],
            &[cout, cin, kernel, kernel],
            &[1, cout, out_h, out_w],
            Some((kernel, stride)),
        ));
    }
    for &(rows, inner, cols) in &[
        (64, 512, 1024),
        (128, 768, 768),
        (128, 768, 3072),
        (1, 1024, 1024),
        (16, 256, 1024),
    ] {
        points.push(dynamic_int8(
            KernelClass::Gemm,
            &[rows, inner],
            &[inner, cols],
            &[rows, cols],
            None,
        ));
    }
    points
}
