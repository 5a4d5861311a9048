//! The calibration grid: one-op ONNX models per kernel class, at shapes typical of CNNs and
//! transformers (channel counts, planes, sequence lengths and widths of the common
//! architectures), fixed in code so it never depends on the model being predicted.

use crate::analysis::algorithm::{
    AlgorithmPolicy, ConvAlgorithm, ConvShape, MIN_INPUT_CHANNELS, MIN_TILES,
};
use crate::builtin::builder::{
    attr_int, attr_ints, attr_string, ConvSpec, GraphBuilder, SigDim, WeightFill,
};
use crate::device::calibration::KernelClass;
use crate::device::Precision;
use point::one_op;
pub use point::GridModel;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

fn conv_out(size: i64, kernel: i64, stride: i64) -> i64 {
    (size + 2 * (kernel / 2) - kernel) / stride + 1
}

fn conv(cin: i64, cout: i64, size: i64, kernel: i64, stride: i64, group: i64) -> GridModel {
    // 3×3 stride-1 convolutions on planes of 12² and more are the shapes a CPU runs as
    // Winograd where the roofline favours it (`analysis::algorithm`); each point is filed
    // under the class its analysis gives it, this one only groups them for `--quick`.
    let class = if group > 1 && group == cin {
        KernelClass::Depthwise
    } else if group > 1 {
        KernelClass::Grouped
    } else if kernel == 1 {
        KernelClass::Pointwise
    } else if kernel == 3 && stride == 1 && size >= 12 {
        KernelClass::Winograd
    } else {
        KernelClass::Conv
    };
    let out = conv_out(size, kernel, stride);
    let shape = format!("conv {cin}→{cout} {kernel}x{kernel} s{stride} g{group} {size}x{size}");
    one_op(
        class,
        shape,
        &[&[1, cin, size, size]],
        &[1, cout, out, out],
        move |b, x| {
            let spec = ConvSpec {
                group,
                bias: true,
                ..ConvSpec::new(cout, kernel, stride)
            };
            b.conv(&x[0], cin, spec)
        },
    )
}

/// A 3×3 stride-1 convolution where rule 4 of `analysis::algorithm` chooses between direct
/// and Winograd: timed once per algorithm (direct into the conv table, each Winograd variant
/// with enough tiles into the Winograd table), so both tables hold the shapes the rule
/// compares, few output channels and large planes included. A point run only as the rule
/// chose it leaves the other algorithm's table to extrapolate from other shapes: F(4×4) was
/// expected 1.35× faster than direct on 96→24 channels at 40² and 80², and measured 0.6-0.7×.
fn three_by_three_variants(cin: i64, cout: i64, size: i64) -> Vec<GridModel> {
    let geometry =
        ConvShape::three_by_three(1, cin as usize, cout as usize, size as usize, size as usize);
    if !geometry.winograd_candidate() || (cin as usize) < MIN_INPUT_CHANNELS {
        return vec![conv(cin, cout, size, 3, 1, 1)];
    }
    [
        ConvAlgorithm::Direct,
        ConvAlgorithm::WinogradF2,
        ConvAlgorithm::WinogradF4,
    ]
    .into_iter()
    .filter(|a| {
        a.output_tile()
            .is_none_or(|t| geometry.tiles(t) >= MIN_TILES)
    })
    .map(|algorithm| {
        let mut point = conv(cin, cout, size, 3, 1, 1);
        point.class = if algorithm == ConvAlgorithm::Direct {
            KernelClass::Conv
        } else {
            KernelClass::Winograd
        };
        point.shape = format!("{} ({})", point.shape, algorithm.name());
        point.policy = AlgorithmPolicy::Only(algorithm);
        point
    })
    .collect()
}

fn gemm(rows: i64, inner: i64, cols: i64) -> GridModel {
    let point = one_op(
        KernelClass::Gemm,
        format!("matmul {rows}x{inner} · {inner}x{cols} (weights)"),
        &[&[rows, inner]],
        &[rows, cols],
        move |b, x| {
            let w = b.weight("w", &[inner, cols], inner);
            b.node("MatMul", &[&x[0], &w], vec![])
        },
    );
    with_weights_bytes(without_cold_twin_for_gemv(point, rows), inner, cols)
}

/// A GEMV streams its weights once per run at any cache level, and the grid's largest ones
/// are already charged at DRAM: no cold twin (see [`with_cold_weights`]).
fn without_cold_twin_for_gemv(mut point: GridModel, rows: i64) -> GridModel {
    point.cold_twin = rows > 1;
    point
}

/// `point` with the bytes of its `inner × cols` fp32 weights recorded.
fn with_weights_bytes(mut point: GridModel, inner: i64, cols: i64) -> GridModel {
    point.weights_bytes = (inner * cols * 4) as u64;
    point
}

/// Largest weights a `--quick` point may have (64 MiB kept): the 205 MB VGG classifier point alone took
/// 3.2 s of a 9-11 s quick calibration (built, imported, planned and run at each thread count,
/// on a guest whose fresh memory is slow to fault in), while the 64 MB ones already stream
/// their weights from past the private caches. A point the advisor converts to a low precision
/// first pays that rewrite too (a bf16 GEMV of 64 MB: 1.2-2.1 s), so those stop at 16 MB.
const QUICK_MAX_WEIGHTS_BYTES: u64 = 64 << 20;
const QUICK_MAX_REWRITTEN_WEIGHTS_BYTES: u64 = 16 << 20;

/// Gemm with transB = 1 (the PyTorch export of a linear layer): weights stored [out, in],
/// so each output is a dot product over contiguous weights, another kernel than MatMul's.
fn gemm_trans_b(rows: i64, inner: i64, cols: i64) -> GridModel {
    let point = one_op(
        KernelClass::Gemm,
        format!("gemm {rows}x{inner} · ({cols}x{inner})ᵀ + bias"),
        &[&[rows, inner]],
        &[rows, cols],
        move |b, x| b.gemm(&x[0], inner, cols),
    );
    with_weights_bytes(without_cold_twin_for_gemv(point, rows), inner, cols)
}

fn batched_matmul(batch: i64, rows: i64, inner: i64, cols: i64) -> GridModel {
    one_op(
        KernelClass::Matmul,
        format!("matmul {batch}×({rows}x{inner} · {inner}x{cols})"),
        &[&[batch, rows, inner], &[batch, inner, cols]],
        &[batch, rows, cols],
        move |b, x| b.node("MatMul", &[&x[0], &x[1]], vec![]),
    )
}

fn elementwise(op: &str, elements: i64, binary: bool) -> GridModel {
    let dims = [1, elements / 64, 64];
    let inputs: Vec<&[i64]> = if binary {
        vec![&dims, &dims]
    } else {
        vec![&dims]
    };
    let op_name = op.to_string();
    one_op(
        KernelClass::Elementwise,
        format!("{op} {elements}"),
        &inputs,
        &dims,
        move |b, x| {
            let refs: Vec<&str> = x.iter().map(String::as_str).collect();
            b.node(&op_name, &refs, vec![])
        },
    )
}

/// An activation written as several element-wise ops, fused into one chain node by the
/// advisor (`bench --optimize` runs models so). Single-op points predicted magika's 9-op
/// tanh GELU over 260k elements at 22 µs; it took 175 (every step is a pass of the chain's
/// vector loop over an L1 piece, a load and a store per vector, and the tanh a division).
fn chain(name: &str, elements: i64, build: fn(&mut GraphBuilder, &str) -> String) -> GridModel {
    let dims = [1, elements / 64, 64];
    let mut point = one_op(
        KernelClass::Elementwise,
        format!("{name} chain {elements}"),
        &[&dims],
        &dims,
        move |b, x| build(b, &x[0]),
    );
    point.fuse_elementwise = true;
    point
}

/// A per-channel multiply or add broadcast over the plane (squeeze-excitation gates, scales,
/// unfused batch-norm halves, biases).
fn channel_binary(op: &str, channels: i64, size: i64) -> GridModel {
    let dims = [1, channels, size, size];
    let op_name = op.to_string();
    one_op(
        KernelClass::Elementwise,
        format!(
            "{} {channels}x{size}x{size} by {channels}x1x1",
            op.to_lowercase()
        ),
        &[&dims, &[1, channels, 1, 1]],
        &dims,
        move |b, x| b.node(&op_name, &[&x[0], &x[1]], vec![]),
    )
}

/// A transposed convolution (decoder and FPN upsampling), weights [in, out, k, k].
/// A depthwise convolution on a `height × width` plane with strides `(stride_h, stride_w)`:
/// text-line models (OCR recognisers, orientation classifiers, keyword spotting on
/// spectrograms) keep planes a few rows high and a hundred or more wide, and stride only the
/// rows. On such a plane the flat kernel's rows are long and its per-channel fixed cost is
/// spread over a few hundred outputs: square planes of the same work are 7-14 wide (the
/// sixteen-channel small-plane path) or 28+ wide, and predicted a 5×5 depthwise on 3×96 at
/// 1.5× its measured time.
fn depthwise_plane(
    channels: i64,
    (height, width): (i64, i64),
    kernel: i64,
    (stride_h, stride_w): (i64, i64),
) -> GridModel {
    let (out_h, out_w) = (
        conv_out(height, kernel, stride_h),
        conv_out(width, kernel, stride_w),
    );
    let pad = kernel / 2;
    one_op(
        KernelClass::Depthwise,
        format!(
            "conv {channels}→{channels} {kernel}x{kernel} s{stride_h}x{stride_w} g{channels} \
             {height}x{width}"
        ),
        &[&[1, channels, height, width]],
        &[1, channels, out_h, out_w],
        move |b, x| {
            let w = b.weight("conv_w", &[channels, 1, kernel, kernel], kernel * kernel);
            let bias = b.jitter("conv_b", &[channels], 0.0, 0.05);
            b.node(
                "Conv",
                &[&x[0], &w, &bias],
                vec![
                    attr_ints("kernel_shape", &[kernel, kernel]),
                    attr_ints("strides", &[stride_h, stride_w]),
                    attr_ints("pads", &[pad, pad, pad, pad]),
                    attr_ints("dilations", &[1, 1]),
                    attr_int("group", channels),
                ],
            )
        },
    )
}

fn conv_transpose(cin: i64, cout: i64, size: i64, kernel: i64, stride: i64) -> GridModel {
    let out = (size - 1) * stride + kernel;
    one_op(
        KernelClass::Conv,
        format!("convtranspose {cin}→{cout} {kernel}x{kernel} s{stride} {size}x{size}"),
        &[&[1, cin, size, size]],
        &[1, cout, out, out],
        move |b, x| {
            let w = b.weight(
                "deconv_w",
                &[cin, cout, kernel, kernel],
                cin * kernel * kernel,
            );
            b.node(
                "ConvTranspose",
                &[&x[0], &w],
                vec![
                    attr_ints("kernel_shape", &[kernel, kernel]),
                    attr_ints("strides", &[stride, stride]),
                ],
            )
        },
    )
}

fn average_pool(channels: i64, size: i64, kernel: i64, stride: i64) -> GridModel {
    let pad = if stride == 1 { kernel / 2 } else { 0 };
    let out = (size + 2 * pad - kernel) / stride + 1;
    one_op(
        KernelClass::Pool,
        format!("averagepool {kernel}x{kernel} s{stride} {channels}x{size}x{size}"),
        &[&[1, channels, size, size]],
        &[1, channels, out, out],
        move |b, x| {
            b.node(
                "AveragePool",
                &[&x[0]],
                vec![
                    attr_ints("kernel_shape", &[kernel, kernel]),
                    attr_ints("strides", &[stride, stride]),
                    attr_ints("pads", &[pad, pad, pad, pad]),
                ],
            )
        },
    )
}

fn lrn(channels: i64, size: i64) -> GridModel {
    let dims = [1, channels, size, size];
    one_op(
        KernelClass::Lrn,
        format!("lrn size 5 {channels}x{size}x{size}"),
        &[&dims],
        &dims,
        move |b, x| b.node("LRN", &[&x[0]], vec![attr_int("size", 5)]),
    )
}

/// ShuffleNet's channel shuffle: planes regrouped by a 5-D transpose.
fn channel_shuffle(channels: i64, size: i64) -> GridModel {
    one_op(
        KernelClass::Movement,
        format!("transpose 2x{channels}x{size}x{size} → {channels}x2 (channel shuffle)"),
        &[&[1, 2, channels, size, size]],
        &[1, channels, 2, size, size],
        move |b, x| b.transpose(&x[0], &[0, 2, 1, 3, 4]),
    )
}

/// NCHW → NHWC, as detection heads do before their reshapes.
fn to_channels_last(channels: i64, size: i64) -> GridModel {
    one_op(
        KernelClass::Movement,
        format!("transpose {channels}x{size}x{size} → channels last"),
        &[&[1, channels, size, size]],
        &[1, size, size, channels],
        move |b, x| b.transpose(&x[0], &[0, 2, 3, 1]),
    )
}

/// A one-hot encoding as exporters write it (JAX's `one_hot`, TensorFlow's through tf2onnx):
/// integer ids `[1, rows, 1]` compared with the classes `0..depth` (`Equal`, broadcast to a
/// boolean `[1, rows, depth]`), then cast to float. The executor runs the pair as one step,
/// the Cast's (`analysis::compare_casts`), reading 64-bit ids and writing floats; from float
/// points alone a byte classifier's one-hot of 2048 × 257 had been expected at 15 + 29 µs
/// where it took 120 + 112 (as two steps over 64-bit booleans, on the machine of the session
/// that added this point; 455 + 345 on session 46's noisier Emerald Rapids guest).
fn one_hot(rows: i64, depth: i64) -> GridModel {
    let mut b = GraphBuilder::new(WeightFill::Random(7));
    let ids = b.input("ids", INT64, &SigDim::fixed_all(&[1, rows, 1]));
    let classes: Vec<i64> = (0..depth).collect();
    let classes = b.int64_const("classes", &classes);
    let hot = b.node("Equal", &[&ids, &classes], vec![]);
    let y = b.node("Cast", &[&hot], vec![attr_int("to", i64::from(FLOAT))]);
    b.output(&y, FLOAT, &SigDim::fixed_all(&[1, rows, depth]));
    GridModel::new(
        KernelClass::Elementwise,
        format!("one-hot {rows}x{depth} (Equal, Cast)"),
        b.finish("calibration"),
    )
}

/// Clip to [0, 6] (MobileNet's activation), with its two scalar bounds.
fn relu6(channels: i64, size: i64) -> GridModel {
    let dims = [1, channels, size, size];
    one_op(
        KernelClass::Elementwise,
        format!("clip 0..6 {channels}x{size}x{size}"),
        &[&dims],
        &dims,
        move |b, x| b.relu6(&x[0]),
    )
}

/// A 2× upsampling (feature-pyramid necks, segmentation heads), nearest or bilinear.
fn resize(channels: i64, size: i64, mode: &str) -> GridModel {
    let mode_name = mode.to_string();
    one_op(
        KernelClass::Movement,
        format!("resize {mode} ×2 {channels}x{size}x{size}"),
        &[&[1, channels, size, size]],
        &[1, channels, 2 * size, 2 * size],
        move |b, x| {
            let scales = b.float_const("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
            b.node(
                "Resize",
                &[&x[0], "", &scales],
                vec![attr_string("mode", &mode_name)],
            )
        },
    )
}

/// A max pool that keeps the plane (stride 1, same padding): Inception's pool branches,
/// the SPP blocks of YOLO necks.
fn max_pool_same(channels: i64, size: i64, kernel: i64) -> GridModel {
    one_op(
        KernelClass::Pool,
        format!("maxpool {kernel}x{kernel} s1 {channels}x{size}x{size}"),
        &[&[1, channels, size, size]],
        &[1, channels, size, size],
        move |b, x| b.max_pool(&x[0], kernel, 1, kernel / 2),
    )
}

/// A downsampling max pool: 3×3 stride 2 padded by one (ResNet's stem, Inception's
/// reductions) or 2×2 stride 2 unpadded (VGG, AlexNet-era and small CNNs). Read off the 3×3
/// points, tinycnn's 2×2 pool (four taps per output against nine) was expected at 2.3× its
/// time; VGG-16's, whose first reads 12.8 MB, at 0.4× (868 µs at 2 threads against 363).
fn max_pool(channels: i64, size: i64, kernel: i64) -> GridModel {
    // Odd windows are padded to keep the plane's centre; the 2×2 pools of those models are not.
    let pad = if kernel % 2 == 1 { kernel / 2 } else { 0 };
    let out = (size + 2 * pad - kernel) / 2 + 1;
    one_op(
        KernelClass::Pool,
        format!("maxpool {kernel}x{kernel} s2 {channels}x{size}x{size}"),
        &[&[1, channels, size, size]],
        &[1, channels, out, out],
        move |b, x| b.max_pool(&x[0], kernel, 2, pad),
    )
}

fn global_pool(channels: i64, size: i64) -> GridModel {
    one_op(
        KernelClass::Pool,
        format!("global average pool {channels}x{size}x{size}"),
        &[&[1, channels, size, size]],
        &[1, channels, 1, 1],
        move |b, x| b.global_avg_pool(&x[0]),
    )
}

fn batch_norm(channels: i64, size: i64) -> GridModel {
    let dims = [1, channels, size, size];
    one_op(
        KernelClass::BatchNorm,
        format!("batchnorm {channels}x{size}x{size}"),
        &[&dims],
        &dims,
        move |b, x| b.batch_norm(&x[0], channels),
    )
}

/// A batch norm and the ReLU after it where no convolution precedes them to fold into
/// (pre-activation ResNets, DenseNet's BN → ReLU → Conv on every concatenation): the advisor
/// makes them one chain, x·scale + shift then the ReLU in one pass. Predicted from the
/// transcendental chains (GELU, SiLU: 6-13× their bound), DenseNet's 62 of them were expected
/// at 7× their bound against 1.4× measured.
fn batch_norm_relu(channels: i64, size: i64) -> GridModel {
    let dims = [1, channels, size, size];
    let mut point = one_op(
        KernelClass::Elementwise,
        format!("batchnorm relu chain {channels}x{size}x{size}"),
        &[&dims],
        &dims,
        move |b, x| {
            let normalised = b.batch_norm(&x[0], channels);
            b.node("Relu", &[&normalised], vec![])
        },
    );
    point.fuse_elementwise = true;
    point
}

fn layer_norm(rows: i64, features: i64) -> GridModel {
    let dims = [1, rows, features];
    one_op(
        KernelClass::Norm,
        format!("layernorm {rows}x{features}"),
        &[&dims],
        &dims,
        move |b, x| b.layer_norm(&x[0], features),
    )
}

fn softmax(rows: i64, cols: i64) -> GridModel {
    let dims = [1, rows, cols];
    one_op(
        KernelClass::Softmax,
        format!("softmax {rows}x{cols}"),
        &[&dims],
        &dims,
        move |b, x| b.softmax(&x[0], -1),
    )
}

fn reduce_mean(rows: i64, cols: i64) -> GridModel {
    one_op(
        KernelClass::Reduce,
        format!("reducemean {rows}x{cols} over the last axis"),
        &[&[1, rows, cols]],
        &[1, rows, 1],
        move |b, x| {
            b.node(
                "ReduceMean",
                &[&x[0]],
                vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
            )
        },
    )
}

fn transpose(seq: i64, heads: i64, width: i64) -> GridModel {
    one_op(
        KernelClass::Movement,
        format!("transpose {seq}x{heads}x{width} → heads first"),
        &[&[1, seq, heads, width]],
        &[1, heads, seq, width],
        move |b, x| b.transpose(&x[0], &[0, 2, 1, 3]),
    )
}

fn concat(channels: i64, size: i64) -> GridModel {
    let part = [1, channels, size, size];
    one_op(
        KernelClass::Movement,
        format!("concat 2×{channels}x{size}x{size} on channels"),
        &[&part, &part],
        &[1, 2 * channels, size, size],
        move |b, x| b.node("Concat", &[&x[0], &x[1]], vec![attr_int("axis", 1)]),
    )
}

/// Each point of the classes that read weights, again with its weights cold.
///
/// A one-op model run again and again keeps its weights in cache; a layer of a model larger
/// than the caches finds them in DRAM (every other layer's weights went through the caches
/// since its last run), which the analysis's cache-aware roof charges (`Roof::place_weights`).
/// Timed only warm, a table extrapolates a DRAM-weight layer from cache-weight points: the
/// Winograd variants, whose transformed weights are 1.8-4× the direct ones, measured
/// 0.6-0.96× as fast as direct inside ResNet-50 and Inception-v2 where the warm points
/// expected them 1.2-1.6× faster. The cold twin (caches evicted before each run, the input
/// staged after, weights charged at DRAM) gives such layers neighbours at their own level.
fn with_cold_weights(models: Vec<GridModel>) -> Vec<GridModel> {
    let mut all = Vec::with_capacity(models.len() * 2);
    for model in models {
        let reads_weights = matches!(
            model.class,
            KernelClass::Conv
                | KernelClass::Winograd
                | KernelClass::Pointwise
                | KernelClass::Grouped
                | KernelClass::Gemm
        );
        if reads_weights && model.cold_twin {
            let mut cold = model.clone();
            cold.shape = format!("{} (weights cold)", cold.shape);
            cold.cold_weights = true;
            all.push(model);
            all.push(cold);
        } else {
            all.push(model);
        }
    }
    all
}

/// The grid; `quick` keeps about a third of the points (every class still covered).
pub fn grid(quick: bool) -> Vec<GridModel> {
    let mut models: Vec<GridModel> = Vec::new();
    // Dense convolutions with a window: stems, ResNet/VGG stages, strided downsampling.
    for &(cin, cout, size, kernel, stride) in &[
        (3, 32, 224, 3, 2),
        (3, 64, 224, 7, 2),
        (16, 16, 112, 3, 1),
        (32, 64, 112, 3, 2),
        (64, 64, 56, 3, 1),
        (64, 128, 56, 3, 2),
        (128, 128, 28, 3, 1),
        (96, 96, 40, 3, 1),
        (256, 256, 14, 3, 1),
        (256, 512, 14, 3, 2),
        (512, 512, 7, 3, 1),
        (64, 64, 28, 5, 1),
        (32, 32, 160, 3, 1),
        (24, 24, 80, 3, 1),
        // Few output channels from many (DenseNet growth layers, detection heads).
        (128, 32, 56, 3, 1),
        (128, 32, 28, 3, 1),
        (128, 32, 14, 3, 1),
        (128, 32, 7, 3, 1),
        (256, 24, 20, 3, 1),
        (96, 256, 27, 5, 1),
        (3, 96, 227, 11, 4),
        // Large planes (VGG-style stages, detection backbones at high resolution).
        (64, 64, 112, 3, 1),
        (128, 128, 56, 3, 1),
        (256, 256, 28, 3, 1),
        (512, 512, 14, 3, 1),
        // 2 GFLOP and more: the large 3×3 layers of VGG-style backbones run their Winograd
        // GEMMs nearer the roof (1.5-1.7× the bound) than every smaller point (1.7-2.5×),
        // and were expected 10-20% slow from those.
        (192, 192, 56, 3, 1),
        (384, 384, 28, 3, 1),
        (48, 48, 160, 3, 1),
        (256, 384, 13, 3, 1),
        // Small planes and few channels (tiny classifiers, keyword spotting, early exits),
        // where the fixed cost per call is a large part of the time.
        (8, 16, 14, 3, 1),
        (32, 32, 8, 3, 1),
        (16, 16, 28, 3, 1),
        (32, 64, 12, 3, 1),
        // Few output channels on large planes (segmentation and detection necks).
        (64, 16, 160, 3, 1),
        (128, 32, 112, 3, 1),
        (160, 40, 40, 3, 1),
        // More output channels than input (expand layers, stem-to-stage widenings): the
        // output transform of a Winograd layer is per output channel, so these run further
        // below their bound than square layers of the same work.
        (80, 240, 56, 3, 1),
        (64, 256, 28, 3, 1),
        // Mid-width layers on 7² planes, between the 128→32 and 512→512 points: at 2 threads
        // the direct convolution's GEMM (49 columns) scales 1.4× there, 1.8× at 512.
        (256, 256, 7, 3, 1),
    ] {
        if kernel == 3 && stride == 1 {
            models.extend(three_by_three_variants(cin, cout, size));
        } else {
            models.push(conv(cin, cout, size, kernel, stride, 1));
        }
    }
    for &(cin, cout, size, kernel, stride) in &[
        (64, 16, 80, 2, 2),
        (24, 24, 160, 2, 2),
        (128, 64, 40, 2, 2),
        (256, 128, 20, 4, 2),
    ] {
        models.push(conv_transpose(cin, cout, size, kernel, stride));
    }
    // Pointwise: MobileNet expansions and projections, ResNet bottlenecks.
    for &(cin, cout, size, stride) in &[
        (16, 96, 112, 1),
        (24, 144, 56, 1),
        (144, 24, 56, 1),
        (32, 192, 28, 1),
        (64, 384, 14, 1),
        (384, 64, 14, 1),
        (160, 960, 7, 1),
        (320, 1280, 7, 1),
        (64, 256, 56, 1),
        (256, 64, 56, 1),
        (256, 512, 56, 2),
        (512, 128, 28, 1),
        (1024, 256, 14, 1),
        (2048, 512, 7, 1),
        (512, 2048, 7, 1),
        (8, 32, 160, 1),
        (384, 128, 28, 1),
        (640, 128, 14, 1),
        (1024, 128, 7, 1),
        (58, 58, 28, 1),
        (232, 232, 7, 1),
        // Small ones (tiny classifiers, early stages on small inputs): 0.1-2 MFLOP, where the
        // fixed cost per call and the split across threads weigh most.
        (16, 64, 16, 1),
        (48, 16, 20, 1),
        (64, 128, 10, 1),
        (96, 32, 12, 1),
        (128, 256, 6, 1),
        (32, 96, 24, 1),
    ] {
        models.push(conv(cin, cout, size, 1, stride, 1));
    }
    // Depthwise 3x3 and 5x5, stride 1 and 2.
    for &(channels, size, kernel, stride) in &[
        (32, 112, 3, 1),
        (96, 112, 3, 2),
        (144, 56, 3, 1),
        (144, 56, 3, 2),
        (192, 28, 3, 1),
        (384, 14, 3, 1),
        (576, 14, 3, 2),
        (960, 7, 3, 1),
        (240, 28, 5, 1),
        (672, 14, 5, 1),
        (1152, 7, 5, 1),
        (64, 160, 3, 1),
        (16, 160, 3, 2),
        (32, 56, 3, 1),
        (64, 28, 3, 2),
        (128, 28, 3, 1),
        (256, 14, 3, 1),
        (512, 7, 3, 1),
        (120, 28, 5, 1),
        (480, 14, 5, 2),
        (72, 56, 5, 2),
        (240, 14, 3, 1),
        (32, 320, 3, 2),
        (960, 14, 3, 2),
    ] {
        models.push(conv(channels, channels, size, kernel, stride, channels));
    }
    // Depthwise on text-line planes (a few rows, long rows; rows-only strides).
    for &(channels, plane, kernel, strides) in &[
        (64, (4, 80), 5, (1, 1)),
        (160, (2, 64), 5, (1, 1)),
        (128, (6, 128), 5, (2, 1)),
        (48, (8, 160), 3, (2, 1)),
        (96, (4, 200), 3, (1, 1)),
        (256, (2, 40), 3, (1, 1)),
        (32, (12, 256), 3, (1, 1)),
        (320, (5, 50), 5, (1, 1)),
    ] {
        models.push(depthwise_plane(channels, plane, kernel, strides));
    }
    // Grouped convolutions with several channels per group: ShuffleNet's 1×1 group
    // convolutions (3, 4 and 8 groups), ResNeXt's 3×3 with 32 groups, two-tower 3×3 and 5×5.
    for &(cin, cout, size, kernel, stride, group) in &[
        (240, 240, 28, 1, 1, 3),
        (480, 480, 14, 1, 1, 3),
        (960, 960, 7, 1, 1, 3),
        (60, 240, 28, 1, 1, 3),
        (384, 384, 28, 1, 1, 8),
        (768, 192, 14, 1, 1, 8),
        // Four groups of 32-128 channels: on a Zen 4 guest one-op models of these ran at
        // 1.35-2.0× their bound where the 3- and 8-group points above (20-320 input channels
        // per group) ran at 1.14-1.44×, and ShuffleNet's group-4 layers, predicted from those
        // at 1.2×, ran at 1.9× in the model. Why group 4 runs slower is not pinned down.
        (128, 128, 28, 1, 1, 4),
        (256, 256, 14, 1, 1, 4),
        (512, 512, 7, 1, 1, 4),
        (128, 128, 56, 3, 1, 32),
        (256, 256, 28, 3, 1, 32),
        (512, 512, 14, 3, 1, 32),
        (1024, 1024, 7, 3, 1, 32),
        (256, 256, 56, 3, 2, 32),
        (128, 256, 24, 5, 1, 2),
        (64, 192, 28, 5, 1, 2),
        (256, 256, 14, 3, 1, 2),
        (384, 256, 14, 3, 1, 2),
        (192, 192, 14, 3, 1, 2),
    ] {
        models.push(conv(cin, cout, size, kernel, stride, group));
    }
    // GEMMs against weights: classifier heads (GEMV), transformer projections and MLPs.
    for &(rows, inner, cols) in &[
        (1, 512, 1000),
        (1, 1280, 1000),
        (1, 2048, 1000),
        (1, 4096, 4096),
        (1, 12544, 4096),
        (1, 8192, 2048),
        (1, 2048, 8192),
        (1, 16384, 1024),
        (1, 1024, 16384),
        (16, 1024, 1024),
        (64, 256, 256),
        (128, 768, 768),
        (128, 768, 3072),
        (128, 3072, 768),
        (197, 768, 2304),
        (256, 512, 512),
        (40, 384, 96),
        (512, 96, 384),
    ] {
        models.push(gemm(rows, inner, cols));
    }
    for &(rows, inner, cols) in &[
        (1, 512, 1000),
        (1, 1280, 1000),
        (1, 2048, 1000),
        (1, 4096, 4096),
        (1, 8192, 4096),
        (1, 16384, 2048),
        (1, 12544, 4096),
        (8, 2048, 1000),
        (128, 768, 768),
        (64, 1024, 4096),
    ] {
        models.push(gemm_trans_b(rows, inner, cols));
    }
    // Attention: scores and context.
    for &(batch, rows, inner, cols) in &[
        (12, 128, 64, 128),
        (12, 128, 128, 64),
        (12, 197, 64, 197),
        (12, 197, 197, 64),
        (6, 128, 64, 128),
        (8, 256, 32, 256),
        (4, 64, 64, 64),
    ] {
        models.push(batched_matmul(batch, rows, inner, cols));
    }
    // From a decoder step's hidden vector (256 floats, where the fixed cost per op is most of
    // the time) to tensors past the caches.
    for &elements in &[
        1 << 8,
        1 << 11,
        1 << 12,
        1 << 15,
        1 << 17,
        1 << 18,
        1 << 20,
        1 << 22,
    ] {
        models.push(elementwise("Relu", elements, false));
        models.push(elementwise("Add", elements, true));
        models.push(elementwise("Sigmoid", elements, false));
        models.push(elementwise("Mul", elements, true));
    }
    for &elements in &[1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22] {
        models.push(chain("gelu tanh", elements, activations::gelu_tanh));
        models.push(chain("gelu erf", elements, activations::gelu_erf));
        models.push(chain("silu", elements, activations::silu));
        models.push(chain("hard swish", elements, activations::hard_swish));
    }
    for &(channels, size) in &[(32, 112), (96, 56), (256, 28), (672, 14), (1280, 7)] {
        models.push(channel_binary("Mul", channels, size));
        models.push(channel_binary("Add", channels, size));
    }
    for &(channels, size) in &[(32, 112), (144, 56), (192, 28), (576, 14), (960, 7)] {
        models.push(relu6(channels, size));
    }
    for &(rows, depth) in &[(128, 64), (1024, 256), (4096, 100), (512, 1000)] {
        models.push(one_hot(rows, depth));
    }
    for &(channels, size) in &[
        (64, 112),
        (128, 56),
        (32, 160),
        (256, 28),
        (96, 55),
        (16, 28),
        (32, 14),
    ] {
        models.push(max_pool(channels, size, 3));
    }
    // Sizes between the ones VGG and small CNNs pool, none of theirs, and one past VGG's
    // first: it reads 16 MiB, past what a shared L3 kept for a single stream here (VGG-16's
    // first pool, 12.8 MB after the convolution that wrote it, ran at DRAM speed: 1.21 ms at 1
    // thread, 0.60 alone, where the 7 MB point ran at 1.3× its bound).
    for &(channels, size) in &[
        (48, 192),
        (128, 96),
        (256, 48),
        (512, 24),
        (24, 40),
        (64, 256),
    ] {
        models.push(max_pool(channels, size, 2));
    }
    for &(channels, size, kernel) in &[(256, 28, 3), (512, 14, 3), (128, 20, 5), (96, 56, 3)] {
        models.push(max_pool_same(channels, size, kernel));
    }
    for &(channels, size, kernel, stride) in &[
        (128, 56, 2, 2),
        (256, 28, 2, 2),
        (24, 56, 3, 2),
        (240, 14, 3, 1),
        (192, 28, 3, 1),
    ] {
        models.push(average_pool(channels, size, kernel, stride));
    }
    for &(channels, size) in &[(96, 55), (256, 27), (64, 56), (192, 28)] {
        models.push(lrn(channels, size));
    }
    for &(channels, size) in &[(2048, 7), (1280, 7), (256, 56), (64, 112), (512, 14)] {
        models.push(global_pool(channels, size));
    }
    for &(channels, size) in &[
        (64, 112),
        (256, 56),
        (512, 28),
        (1024, 14),
        (32, 56),
        (96, 28),
    ] {
        models.push(batch_norm(channels, size));
    }
    for &(channels, size) in &[
        (64, 56),
        (256, 56),
        (128, 28),
        (512, 28),
        (256, 14),
        (1024, 14),
        (512, 7),
    ] {
        models.push(batch_norm_relu(channels, size));
    }
    for &(rows, features) in &[(128, 768), (197, 768), (50, 512), (1024, 256), (128, 384)] {
        models.push(layer_norm(rows, features));
    }
    for &(rows, cols) in &[
        (1536, 128),
        (2364, 197),
        (1, 1000),
        (64, 4096),
        (768, 128),
        (384, 64),
        (256, 256),
        (12, 3000),
        (4, 1024),
    ] {
        models.push(softmax(rows, cols));
    }
    for &(rows, cols) in &[(128, 768), (2048, 49), (197, 768), (1, 100_000), (1, 256)] {
        models.push(reduce_mean(rows, cols));
    }
    for &(seq, heads, width) in &[
        (128, 12, 64),
        (197, 12, 64),
        (128, 6, 64),
        (1024, 4, 32),
        (1, 4, 64),
    ] {
        models.push(transpose(seq, heads, width));
    }
    for &(channels, size) in &[(64, 56), (128, 28), (32, 112), (256, 14)] {
        models.push(concat(channels, size));
    }
    for &(channels, size) in &[(58, 28), (116, 14), (232, 7), (24, 56)] {
        models.push(channel_shuffle(channels, size));
    }
    for &(channels, size) in &[(255, 20), (64, 80), (18, 40)] {
        models.push(to_channels_last(channels, size));
    }
    for &(channels, size, mode) in &[
        (256, 20, "nearest"),
        (128, 40, "nearest"),
        (64, 80, "nearest"),
        (64, 40, "linear"),
        (32, 80, "linear"),
    ] {
        models.push(resize(channels, size, mode));
    }
    models.extend(low_precision::low_precision(Precision::Int8));
    models.extend(low_precision::low_precision(Precision::Bf16));
    models.extend(low_precision::dynamic_int8_points());
    models = with_cold_weights(models);
    if quick {
        // The low-precision points warm only: their cold twins (an eviction before every
        // run) and the advisor's rewrite took a quick run from 5 to 9 s.
        models.retain(|m| m.precision.is_none() || !m.cold_weights);
        // Every third point of each class (the first kept, before the weights cap below).
        let mut seen: std::collections::HashMap<KernelClass, usize> = Default::default();
        models.retain(|m| {
            let count = seen.entry(m.class).or_insert(0);
            *count += 1;
            (*count - 1).is_multiple_of(3)
        });
        // After the sampling, so the quick grid is the same third as before less these.
        models.retain(|m| {
            m.weights_bytes
                <= if m.rewritten() {
                    QUICK_MAX_REWRITTEN_WEIGHTS_BYTES
                } else {
                    QUICK_MAX_WEIGHTS_BYTES
                }
        });
    }
    models
}

mod activations;
mod low_precision;
mod point;
#[cfg(test)]
mod tests;
