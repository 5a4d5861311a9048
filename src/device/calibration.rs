//! Measured efficiency of the tool's own kernels, per kernel class and thread count: the data
//! `roofline calibrate` stores in a device profile and the pure lookup the analysis uses to turn
//! an op's roofline bound into an expected time.
//!
//! An op's *bound* is the roofline time (its work at the peak, its bytes at the bandwidth, plus
//! the dispatch cost). Its *expected* time is the bound × the ratio measured/bound that the
//! kernels of its class showed on calibration shapes near it. Nearness is measured on shape
//! features in log2 space (work, bytes moved, weight bytes, output elements), so a GEMM is
//! predicted from GEMMs of similar size and intensity, never from the model being predicted:
//! the calibration grid is fixed and model-independent. The ratio is interpolated by inverse
//! squared distance over the nearest points, in log space (ratios multiply).

use serde::{Deserialize, Serialize};

/// Kernel classes with their own efficiency table: ops whose kernels behave alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelClass {
    /// Dense convolution with a spatial window (im2col packed into the GEMM).
    Conv,
    /// 3×3 convolution run as Winograd (input and output transforms around α² GEMMs).
    Winograd,
    /// 1×1 convolution (a GEMM over the image, no im2col).
    Pointwise,
    /// Grouped convolution with one input channel per group.
    Depthwise,
    /// Grouped convolution with several input channels per group (ShuffleNet's 1×1 group
    /// convolutions, ResNeXt's 3×3, AlexNet's two towers): one small GEMM per group, whose
    /// efficiency a dense convolution of the same work does not predict.
    Grouped,
    /// MatMul / Gemm with a constant weight operand.
    Gemm,
    /// MatMul of two computed operands (attention scores and context).
    Matmul,
    /// Unary, binary and fused element-wise chains, activations, casts.
    Elementwise,
    /// Max/average pooling, global pooling.
    Pool,
    /// Inference BatchNormalization: a per-channel scale and shift.
    BatchNorm,
    /// Normalisations over rows: LayerNormalization, InstanceNorm, GroupNorm.
    Norm,
    /// Local response normalisation: a sum of squares over a window of neighbouring channels
    /// and a power per element. It runs nothing like a row normalisation (onnxruntime takes
    /// LRN at 1/450 of its roof and LayerNormalization near its roof), so one class for both
    /// predicted BERT's LayerNormalizations 34× too slow from AlexNet's LRNs.
    Lrn,
    /// Softmax and LogSoftmax.
    Softmax,
    /// Reductions.
    Reduce,
    /// Transpose, Concat, Slice, Gather, Pad, Resize, Split, Expand, Tile and other copies.
    Movement,
}

impl KernelClass {
    pub const ALL: [KernelClass; 15] = [
        KernelClass::Conv,
        KernelClass::Winograd,
        KernelClass::Pointwise,
        KernelClass::Depthwise,
        KernelClass::Grouped,
        KernelClass::Gemm,
        KernelClass::Matmul,
        KernelClass::Elementwise,
        KernelClass::Pool,
        KernelClass::BatchNorm,
        KernelClass::Norm,
        KernelClass::Lrn,
        KernelClass::Softmax,
        KernelClass::Reduce,
        KernelClass::Movement,
    ];

    /// Classes that run the same kernel on other operand roles: a GEMM against weights, a
    /// MatMul of two computed operands and a 1×1 convolution are all one packed GEMM (in the
    /// tool's executor and in onnxruntime's).
    pub fn siblings(self) -> &'static [KernelClass] {
        match self {
            KernelClass::Gemm => &[KernelClass::Pointwise, KernelClass::Matmul],
            KernelClass::Matmul => &[KernelClass::Gemm, KernelClass::Pointwise],
            KernelClass::Pointwise => &[KernelClass::Gemm],
            _ => &[],
        }
    }

    /// Whether the tool's kernel of this class splits across threads by its compute work
    /// (`kernels::parallel::compute_threads`): the GEMM driver (GEMMs against weights, 1×1
    /// convolutions, im2col convolutions) and the direct convolution. Depthwise, grouped and
    /// Winograd convolutions split by channels, groups or tiles whatever their size.
    pub fn splits_by_compute(self) -> bool {
        matches!(
            self,
            KernelClass::Conv | KernelClass::Pointwise | KernelClass::Gemm
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Conv => "conv",
            KernelClass::Winograd => "winograd",
            KernelClass::Pointwise => "pointwise",
            KernelClass::Depthwise => "depthwise",
            KernelClass::Grouped => "grouped",
            KernelClass::Gemm => "gemm",
            KernelClass::Matmul => "matmul",
            KernelClass::Elementwise => "elementwise",
            KernelClass::Pool => "pool",
            KernelClass::BatchNorm => "batchnorm",
            KernelClass::Norm => "norm",
            KernelClass::Lrn => "lrn",
            KernelClass::Softmax => "softmax",
            KernelClass::Reduce => "reduce",
            KernelClass::Movement => "movement",
        }
    }
}

/// Constant bytes below which an op counts as having no weights.
const MIN_WEIGHT_BYTES: u64 = 1024;

/// The shape features an op is matched on, all log2 of a count (0 for a zero count).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShapeFeatures {
    /// FLOPs + transcendental evaluations.
    pub log2_work: f64,
    /// Bytes read + written.
    pub log2_bytes: f64,
    /// Constant (weight) bytes read.
    pub log2_weight_bytes: f64,
    /// Output elements.
    pub log2_output_elements: f64,
    /// The level the bound charged the activations at (1-3 for L1-L3, 4 for DRAM) and the
    /// weights at (0 without weights): a ratio to a cache-level bound is not a ratio to a DRAM
    /// one, so points at another level are far (one level counts as `LEVEL_DISTANCE`
    /// doublings).
    #[serde(default)]
    pub activation_level: u8,
    #[serde(default)]
    pub weight_level: u8,
    /// log2 of a convolution's output channels; 0 for other ops, depthwise convolutions and
    /// points saved before the feature existed, and then not compared. With few output
    /// channels a Winograd convolution is mostly its input transform (one per input channel
    /// and tile, whatever the output count): PP-OCRv4 det's 96→24 layers at 160² ran at 3.9×
    /// their bound where 64→64 and 160→40 shapes of similar work ran at 2.5×, and had been
    /// predicted from those. Leave-one-out on one calibration (Zen 5, 1 thread), median error
    /// without → with: winograd 24% → 20%, pointwise 11% → 9%, grouped 31% → 13%, conv 11%
    /// → 11%.
    #[serde(default)]
    pub log2_output_channels: f64,
    /// log2 of a depthwise convolution's output row width; 0 for other ops and points saved
    /// before the feature existed, and then not compared. Its kernel computes whole rows per
    /// channel, so its cost per output falls as rows lengthen: text-line planes (3×3 on
    /// 24×160, 5×5 on 12×80) ran at 1.6-2.2× their bound where square planes of the same
    /// work (28² to 56²) ran at 2.4-3.2×, and were predicted from those 1.3-1.6× too slow.
    #[serde(default)]
    pub log2_output_width: f64,
    /// log2 of a convolution's window taps (a 1×1 present but near 0, 3.2 for a 3×3); 0 for
    /// other ops and points saved before the feature, and then not compared. Work, bytes and
    /// channels do not tell a grouped 1×1 layer from a grouped 3×3 one of the same size, and
    /// their kernels differ (a GEMM per group straight on the plane against an im2col first):
    /// on Zen 1, ShuffleNet's 1×1 g4 layers ran at 0.54-0.66 of their 2-thread bound, like the
    /// grid's 1×1 g3/g8 points (0.58-0.64), and were predicted from its 3×3 g32 ones
    /// (0.24-0.56) at 0.39-0.48. Leave-one-out on one calibration (Zen 1), median/p90 without
    /// → with: grouped 31/65% → 17/46% at 1 thread, 15/58% → 13/44% at 2; no class worse.
    #[serde(default)]
    pub log2_taps: f64,
}

/// log2 of an optional extent: 0 (absent, not compared) for 0, and above 0 for 1, so a
/// single channel or a one-wide row still counts as present.
fn log2_present(count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        (count as f64).log2().max(f64::MIN_POSITIVE)
    }
}

/// Doublings of a size feature that one memory level of difference counts as.
const LEVEL_DISTANCE: f64 = 3.0;

impl ShapeFeatures {
    pub fn new(work: u64, bytes: u64, weight_bytes: u64, output_elements: u64) -> ShapeFeatures {
        let log2 = |count: u64| {
            if count == 0 {
                0.0
            } else {
                (count as f64).log2()
            }
        };
        // Constants under a kilobyte (a Clip's bounds, a scalar, a bias of a few channels) do
        // not change how a kernel runs: they count as no weights, so a Clip is matched with
        // the element-wise shapes rather than ten doublings away from them.
        let weight_bytes = if weight_bytes < MIN_WEIGHT_BYTES {
            0
        } else {
            weight_bytes
        };
        ShapeFeatures {
            log2_work: log2(work),
            log2_bytes: log2(bytes),
            log2_weight_bytes: log2(weight_bytes),
            log2_output_elements: log2(output_elements),
            activation_level: 0,
            weight_level: 0,
            log2_output_channels: 0.0,
            log2_output_width: 0.0,
            log2_taps: 0.0,
        }
    }

    /// The same features with a convolution's window taps (0: not a convolution).
    pub fn with_taps(self, taps: u64) -> ShapeFeatures {
        ShapeFeatures {
            log2_taps: log2_present(taps),
            ..self
        }
    }

    /// The same features with a depthwise convolution's output row width.
    pub fn with_output_width(self, width: u64) -> ShapeFeatures {
        ShapeFeatures {
            log2_output_width: log2_present(width),
            ..self
        }
    }

    /// The same features with a convolution's output channel count.
    pub fn with_output_channels(self, channels: u64) -> ShapeFeatures {
        ShapeFeatures {
            log2_output_channels: log2_present(channels),
            ..self
        }
    }

    /// The same features with the memory levels the bound charged.
    pub fn at_levels(self, activation_level: u8, weight_level: u8) -> ShapeFeatures {
        ShapeFeatures {
            activation_level,
            // Constants too small to count as weights have no level either.
            weight_level: if self.log2_weight_bytes == 0.0 {
                0
            } else {
                weight_level
            },
            ..self
        }
    }

    fn as_array(&self) -> [f64; 4] {
        [
            self.log2_work,
            self.log2_bytes,
            self.log2_weight_bytes,
            self.log2_output_elements,
        ]
    }

    /// log2 of the work per weight byte: how many activation rows each weight is applied to
    /// (a convolution's output pixels, a MatMul's tokens, an FC layer's batch), the dimension
    /// a GEMM streams its weights over; `None` without weights. Work, bytes, weights and
    /// outputs alone put ResNet-50's 512→2048 1×1 layer on 7² (49 pixels, onnxruntime at
    /// 2.4× its bound) next to BERT's 768×768 MatMuls over 128 tokens (1.5×), which the
    /// lookup then predicted at 2.1×. Derived from the stored features, so saved calibrations
    /// carry it. Leave-one-out over two onnxruntime fits and two grids (Zen 5), median / p90
    /// without → with: onnxruntime gemm 10/22% → 9/12%, depthwise 16/48% → 14/46%; grid
    /// conv 7/41% → 6/35%, winograd 23/49% → 18/47%, gemm 5/37% → 5/31% (1 thread).
    fn log2_weight_reuse(&self) -> Option<f64> {
        (self.log2_weight_bytes > 0.0).then_some(self.log2_work - self.log2_weight_bytes)
    }

    /// Squared distance; a doubling of any feature counts 1.
    fn distance_squared(&self, other: &ShapeFeatures) -> f64 {
        let level = |a: u8, b: u8| (f64::from(a) - f64::from(b)) * LEVEL_DISTANCE;
        let sizes: f64 = self
            .as_array()
            .iter()
            .zip(other.as_array())
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        let channels = if self.log2_output_channels > 0.0 && other.log2_output_channels > 0.0 {
            (self.log2_output_channels - other.log2_output_channels).powi(2)
        } else {
            0.0
        };
        let width = if self.log2_output_width > 0.0 && other.log2_output_width > 0.0 {
            (self.log2_output_width - other.log2_output_width).powi(2)
        } else {
            0.0
        };
        let taps = if self.log2_taps > 0.0 && other.log2_taps > 0.0 {
            (self.log2_taps - other.log2_taps).powi(2)
        } else {
            0.0
        };
        let reuse = match (self.log2_weight_reuse(), other.log2_weight_reuse()) {
            (Some(a), Some(b)) => (a - b).powi(2),
            _ => 0.0,
        };
        sizes
            + channels
            + width
            + taps
            + reuse
            + level(self.activation_level, other.activation_level).powi(2)
            + level(self.weight_level, other.weight_level).powi(2)
    }
}

/// One calibration shape: what the roofline bounded and what the kernel took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    /// The shape in words (e.g. `conv 64→64 3x3 s1 56x56`).
    pub shape: String,
    pub features: ShapeFeatures,
    pub bound_s: f64,
    pub measured_s: f64,
    /// The ONNX op type measured (`Relu`, `MaxPool`...): within a class, ops of the same type
    /// are matched first.
    #[serde(default)]
    pub op_type: String,
}

impl CalibrationPoint {
    /// measured ÷ bound: 1 at the roof, 2 at half of it.
    pub fn ratio(&self) -> f64 {
        self.measured_s / self.bound_s
    }

    /// (measured − `fixed_s`) ÷ bound: the ratio of the time above a fixed per-op cost. A
    /// point quicker than the fixed cost keeps a tenth of its time, so the ratio stays
    /// positive for the log-space interpolation.
    pub fn ratio_above(&self, fixed_s: f64) -> f64 {
        (self.measured_s - fixed_s).max(0.1 * self.measured_s) / self.bound_s
    }
}

/// How well a table predicts its own points, each left out in turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitError {
    /// Median of |predicted − measured| ÷ measured.
    pub median_abs: f64,
    /// 90th percentile of the same.
    pub p90_abs: f64,
    pub points: u32,
}

/// The measured points of one kernel class at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassTable {
    pub class: KernelClass,
    pub threads: u32,
    pub points: Vec<CalibrationPoint>,
    /// Leave-one-out error; `None` with fewer than two points.
    pub fit_error: Option<FitError>,
    /// A cost every op of the runtime pays whatever its size (its dispatch), in seconds; the
    /// points' ratios are of the time above it, and an op's expected time is this plus its
    /// bound × the interpolated ratio. Without it, an op far smaller than every point takes the
    /// ratio of larger ops and keeps nothing of the fixed cost that dominates its time.
    /// 0 for the tool's own kernels (their dispatch is in the device's per-op overhead);
    /// fitted for other runtimes (`calibrate --from-profile`).
    #[serde(default)]
    pub fixed_s: f64,
}

/// The op type a convolution run by a non-direct algorithm (`algorithm_name`, e.g. `winograd
/// F(4x4,3x3)`) is calibrated and looked up under: the Winograd table holds both variants, and
/// F(2×2) and F(4×4) of one shape reach different shares of their bounds (F(4×4)'s transforms
/// and 2.25× larger transformed input weigh more when the layer has few output channels: a
/// 96→24 layer on 160² ran F(4×4) at 4-6× its bound where F(2×2) points of similar size ran
/// at 2.5-3×). Keyed by variant, the leave-one-out median error of one calibration's Winograd
/// table went from 18% to 10% on one thread, 23% to 13% on two.
pub fn algorithm_op_type(op_type: &str, algorithm_name: &str) -> String {
    format!("{op_type} {algorithm_name}")
}

/// The op type a depthwise convolution is calibrated and looked up under: its kernel size
/// joins the key, because runtimes run each size with its own code (the tool's 3×3 rows
/// kernel; onnxruntime's basic-level grouped path reached 12-21% of the roof on PP-OCR's
/// 5×5 layers and 1.5-3% on MobileNetV2's 3×3 ones), and the size features alone put a 5×5
/// layer among 3×3 layers of similar work. Keyed by size, the PP-OCR orientation classifier's
/// 5×5 layers are predicted from the 5×5 layers of the other half's models instead of
/// MobileNetV2's 3×3 ones.
pub fn depthwise_op_type(op_type: &str, kernel_h: u64, kernel_w: u64) -> String {
    format!("{op_type} depthwise {kernel_h}x{kernel_w}")
}

/// The op type an element-wise chain without transcendental steps (a batch norm's scale and
/// shift with its ReLU, a hard swish) is calibrated and looked up under: a chain with a tanh,
/// an erf or a sigmoid spends most of its time evaluating them (6-13× its bound on the tool's
/// kernels), an arithmetic one streams memory (1.2-2×), and their work and bytes per element
/// are alike.
pub fn arithmetic_chain_op_type(op_type: &str) -> String {
    format!("{op_type} arithmetic")
}

/// The op type a convolution or matrix product run at a lower precision than fp32 is calibrated
/// and looked up under: its precision joins the key (`Conv int8`, `MatMul bf16`). The int8
/// kernels (`vpdpbusd`) and the bf16 ones (`vdpbf16ps`) reach other shares of their own roofs
/// than the fp32 GEMM of its: from the fp32 points alone (or with no class at all, its bound),
/// ResNet-50's 54 int8 convolutions were expected at 18 ms and took 25.
pub fn precision_op_type(op_type: &str, precision: &str) -> String {
    format!("{op_type} {precision}")
}

/// The precision word of a calibration key ([`precision_op_type`]), `""` for fp32 keys.
pub fn key_precision(op_type: &str) -> &str {
    op_type
        .split_whitespace()
        .find(|word| matches!(*word, "int8" | "bf16" | "fp16" | "fp8" | "tf32" | "fp64"))
        .unwrap_or("")
}

/// The kernel size of a grid point's shape in words (`conv 32→32 3x3 s1 g32 112x112`).
fn kernel_of_shape(shape: &str) -> Option<(u64, u64)> {
    let mut words = shape.split_whitespace();
    if words.next()? != "conv" {
        return None;
    }
    let (h, w) = words.nth(1)?.split_once('x')?;
    Some((h.parse().ok()?, w.parse().ok()?))
}

/// Squared distance past which an op counts as far from its class's table (three doublings
/// of one feature): BERT's 768-wide GEMMs, predicted from PP-OCR's small MatMuls in the
/// onnxruntime validation (2.1× their bound against 1.4× measured), while 1×1 convolutions of
/// their size sat next to them.
const FAR_SQUARED: f64 = 9.0;

/// Neighbours interpolated per prediction.
pub const NEIGHBOURS: usize = 4;

impl ClassTable {
    /// (measured − `fixed_s`) ÷ bound expected for an op with `features`, from the nearest
    /// of the points [`ClassTable::candidates`] picks for its type.
    pub fn ratio_at(&self, op_type: &str, features: &ShapeFeatures) -> Option<f64> {
        self.ratio_skipping(op_type, features, None)
    }

    /// The points an op of `op_type` is predicted from, leaving out the point at `skip`: those
    /// of its own type where the table has one (a Sigmoid and a Relu of one size run different
    /// kernels); else those of its precision ([`key_precision`]: an fp32 op type the grid lacks
    /// is not predicted from the int8 kernels' points, nor an int8 one from the fp32 kernels');
    /// else the fp32 ones (an fp16 op, which runs as fp32 on a CPU; a calibration made before
    /// the low-precision points); else all.
    fn candidates(&self, op_type: &str, skip: Option<usize>) -> Vec<&CalibrationPoint> {
        let others = || {
            self.points
                .iter()
                .enumerate()
                .filter(move |&(index, _)| Some(index) != skip)
                .map(|(_, point)| point)
        };
        if !op_type.is_empty() && others().any(|p| p.op_type == op_type) {
            return others().filter(|p| p.op_type == op_type).collect();
        }
        for precision in [key_precision(op_type), ""] {
            let of_precision = |p: &&CalibrationPoint| key_precision(&p.op_type) == precision;
            if others().any(|p| of_precision(&p)) {
                return others().filter(of_precision).collect();
            }
        }
        others().collect()
    }

    /// Squared distance from `features` to the nearest point [`ClassTable::ratio_at`] would
    /// interpolate from.
    fn nearest_distance(&self, op_type: &str, features: &ShapeFeatures) -> Option<f64> {
        self.candidates(op_type, None)
            .iter()
            .map(|p| p.features.distance_squared(features))
            .min_by(f64::total_cmp)
    }

    /// Whether the table has points of `precision` (a [`key_precision`] word).
    fn has_precision(&self, precision: &str) -> bool {
        self.points
            .iter()
            .any(|p| key_precision(&p.op_type) == precision)
    }

    fn ratio_skipping(
        &self,
        op_type: &str,
        features: &ShapeFeatures,
        skip: Option<usize>,
    ) -> Option<f64> {
        interpolate(
            self.candidates(op_type, skip).into_iter(),
            features,
            self.fixed_s,
        )
    }

    /// Each point's time as the table's other points predict it (leave-one-out), as (index,
    /// predicted seconds), for the points that have such a prediction.
    fn left_out_predictions(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.points.iter().enumerate().filter_map(|(index, point)| {
            let ratio = self.ratio_skipping(&point.op_type, &point.features, Some(index))?;
            Some((index, self.fixed_s + point.bound_s * ratio))
        })
    }

    /// The points measured more than `factor` × what the table's other points predict for
    /// them (leave-one-out), as (index, measured ÷ predicted), the worst first.
    pub fn slow_outliers(&self, factor: f64) -> Vec<(usize, f64)> {
        if self.points.len() < 2 {
            return Vec::new();
        }
        let mut slow: Vec<(usize, f64)> = self
            .left_out_predictions()
            .filter_map(|(index, predicted)| {
                let excess = self.points[index].measured_s / predicted.max(f64::MIN_POSITIVE);
                (excess > factor).then_some((index, excess))
            })
            .collect();
        slow.sort_by(|a, b| b.1.total_cmp(&a.1));
        slow
    }

    /// Leave-one-out relative errors of the table's own points.
    pub fn leave_one_out(&self) -> Option<FitError> {
        if self.points.len() < 2 {
            return None;
        }
        let mut errors: Vec<f64> = self
            .left_out_predictions()
            .map(|(index, predicted)| {
                let measured = self.points[index].measured_s;
                (predicted - measured).abs() / measured
            })
            .collect();
        if errors.is_empty() {
            return None;
        }
        errors.sort_by(f64::total_cmp);
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
        Some(FitError {
            median_abs: at(0.5),
            p90_abs: at(0.9),
            points: errors.len() as u32,
        })
    }
}

/// Inverse-squared-distance mean of log(ratio) over the `NEIGHBOURS` nearest points; an exact
/// match returns that point's ratio.
fn interpolate<'a>(
    points: impl Iterator<Item = &'a CalibrationPoint>,
    features: &ShapeFeatures,
    fixed_s: f64,
) -> Option<f64> {
    let mut near: Vec<(f64, f64)> = points
        .filter(|p| p.bound_s > 0.0 && p.measured_s > 0.0)
        .map(|p| {
            (
                p.features.distance_squared(features),
                p.ratio_above(fixed_s).ln(),
            )
        })
        .collect();
    if near.is_empty() {
        return None;
    }
    near.sort_by(|a, b| a.0.total_cmp(&b.0));
    near.truncate(NEIGHBOURS);
    if let Some(&(distance, log_ratio)) = near.first() {
        if distance < 1e-9 {
            return Some(log_ratio.exp());
        }
    }
    let (weighted, weights) =
        near.iter()
            .fold((0.0, 0.0), |(sum, total), &(distance, log_ratio)| {
                let weight = 1.0 / distance;
                (sum + weight * log_ratio, total + weight)
            });
    Some((weighted / weights).exp())
}

/// What `roofline calibrate` measured on one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub tool_version: String,
    pub measured_at: String,
    /// `quick` or `full`.
    pub mode: String,
    pub wall_time_s: f64,
    /// How the points were measured and how they are interpolated, in words.
    pub method: String,
    pub tables: Vec<ClassTable>,
    /// Data exchange between the cores, measured right before the multi-thread points
    /// (`probe::exchange`): their times hold for that placement of the threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<crate::device::probe_record::ExchangeRecord>,
    /// What the calibration could not make right, in words (printed by `calibrate`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Per multi-thread count, how fast one thread reads what the others have just written,
    /// measured on the tool's own kernels (`calibrate::handoff`); the analysis charges it to
    /// an op that splits differently from the op that wrote its input (`analysis::handoff`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handoff: Vec<HandoffRate>,
    /// The core clock the grid's timings ran at, Hz: the median of a short dependent-add
    /// chain timed after each point's runs (`probe::chain_clock_now`). `bench` reports it next
    /// to the clock of its own runs (`RunClock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_hz: Option<f64>,
    /// The fp32 FMA rate one short FMA block reached after each point's runs, GFLOP/s (median,
    /// `probe::fma_gflops_now`): the vector throughput the grid's compute-bound points had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fma_gflops: Option<f64>,
}

/// One thread reading an activation that the other threads of the plan have just written
/// with their halves of a split op: the other cores' share of it comes from their caches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandoffRate {
    pub threads: u32,
    /// Bytes written on the other cores ÷ the time their reading added, GB/s (median over
    /// the pairs timed).
    pub read_gbs: f64,
    /// Producer → consumer pairs the rate is the median of.
    pub pairs: u32,
}

impl Calibration {
    /// Whether the tables describe the tool's own kernels (`roofline calibrate`), whose
    /// threading rule the analysis knows, rather than another runtime's profiles.
    pub fn of_own_kernels(&self) -> bool {
        matches!(self.mode.as_str(), "full" | "quick")
    }

    /// The cross-core read rate measured at `threads` (none at one thread, or in a calibration
    /// of another runtime's profiles, whose threading the analysis does not know).
    pub fn handoff_gbs(&self, threads: u32) -> Option<f64> {
        if threads <= 1 || !self.of_own_kernels() {
            return None;
        }
        self.handoff
            .iter()
            .find(|rate| rate.threads == threads)
            .map(|rate| rate.read_gbs)
            .filter(|&gbs| gbs.is_finite() && gbs > 0.0)
    }

    /// The table of `class` at the most threads not above `threads` (or the fewest measured
    /// when all are above).
    pub fn table(&self, class: KernelClass, threads: u32) -> Option<&ClassTable> {
        let of_class = || self.tables.iter().filter(move |t| t.class == class);
        of_class()
            .filter(|t| t.threads <= threads)
            .max_by_key(|t| t.threads)
            .or_else(|| of_class().min_by_key(|t| t.threads))
    }

    /// The expected time of an op whose roofline bound is `bound_s`, or `None` when its class
    /// was not calibrated.
    pub fn expected_s(
        &self,
        class: KernelClass,
        op_type: &str,
        threads: u32,
        features: &ShapeFeatures,
        bound_s: f64,
    ) -> Option<f64> {
        let table = self.table(class, threads).or_else(|| match class {
            // A calibration made before grouped convolutions had their own table.
            KernelClass::Grouped => self.table(KernelClass::Conv, threads),
            _ => None,
        })?;
        let own_distance = table.nearest_distance(op_type, features)?;
        if own_distance > FAR_SQUARED {
            // Far from every point of its own class: a nearer point of a class that runs the
            // same kernel predicts it better than an extrapolation.
            // Keyed by precision alone: a sibling's points of another op type, at the op's
            // own precision.
            let precision = key_precision(op_type);
            let sibling = class
                .siblings()
                .iter()
                .filter_map(|&other| self.table(other, threads))
                .filter(|t| t.has_precision(precision))
                .filter_map(|t| Some((t.nearest_distance(precision, features)?, t)))
                .filter(|&(distance, _)| distance < own_distance)
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((_, sibling)) = sibling {
                return Some(sibling.fixed_s + bound_s * sibling.ratio_at(precision, features)?);
            }
        }
        let ratio = table.ratio_at(op_type, features)?;
        Some(table.fixed_s + bound_s * ratio)
    }

    /// Brings a calibration written by an older version to the current classes: LRN points,
    /// once in the norm tables, move to LRN tables of their own (a LayerNormalization must
    /// not take an LRN's ratio when the norm table has no LayerNormalization point).
    /// Winograd points saved under the plain `Conv` op type take their variant's key
    /// ([`algorithm_op_type`]) from their shape's words, and depthwise grid points their
    /// kernel size's ([`depthwise_op_type`]); depthwise points of an older `--from-profile`
    /// fit name no size and stay under the plain op type (looked up with the whole class).
    pub fn upgrade(&mut self) {
        self.relabel(KernelClass::Depthwise, |point| {
            let (kernel_h, kernel_w) = kernel_of_shape(&point.shape)?;
            Some(depthwise_op_type(&point.op_type, kernel_h, kernel_w))
        });
        self.relabel(KernelClass::Winograd, |point| {
            let name = &point.shape[point.shape.find("winograd F(")?..];
            let end = name.find(')')?;
            Some(algorithm_op_type(&point.op_type, &name[..=end]))
        });
        // The grid's only arithmetic chain before the key existed: hard swish.
        self.relabel(KernelClass::Elementwise, |point| {
            (point.op_type == "ElementwiseChain" && point.shape.starts_with("hard swish chain"))
                .then(|| arithmetic_chain_op_type(&point.op_type))
        });
        let mut moved: Vec<ClassTable> = Vec::new();
        for table in self
            .tables
            .iter_mut()
            .filter(|t| t.class == KernelClass::Norm)
        {
            let (lrn, rest): (Vec<_>, Vec<_>) =
                table.points.drain(..).partition(|p| p.op_type == "LRN");
            table.points = rest;
            if !lrn.is_empty() {
                moved.push(ClassTable {
                    class: KernelClass::Lrn,
                    threads: table.threads,
                    points: lrn,
                    fit_error: None,
                    fixed_s: table.fixed_s,
                });
            }
        }
        if moved.is_empty() {
            return;
        }
        self.tables.retain(|t| !t.points.is_empty());
        for table in self.tables.iter_mut().chain(moved.iter_mut()) {
            if matches!(table.class, KernelClass::Norm | KernelClass::Lrn) {
                table.fit_error = table.leave_one_out();
            }
        }
        self.tables.extend(moved);
    }

    /// Gives the points of `class`'s tables still under a plain op type (no space in it) the
    /// key `key` derives from them, where it derives one, and refits those tables' error.
    fn relabel(&mut self, class: KernelClass, key: impl Fn(&CalibrationPoint) -> Option<String>) {
        for table in self.tables.iter_mut().filter(|t| t.class == class) {
            let mut relabelled = false;
            for point in table.points.iter_mut().filter(|p| !p.op_type.contains(' ')) {
                if let Some(op_type) = key(point) {
                    point.op_type = op_type;
                    relabelled = true;
                }
            }
            if relabelled {
                table.fit_error = table.leave_one_out();
            }
        }
    }

    /// A calibration that cannot be used: an empty table or a non-finite or non-positive
    /// figure, named.
    pub fn validate(&self) -> Result<(), String> {
        for table in &self.tables {
            // A fixed cost is under a second: anything else was not fitted by this tool.
            if !(table.fixed_s.is_finite() && (0.0..1.0).contains(&table.fixed_s)) {
                return Err(format!(
                    "calibration table {} on {} threads has an impossible fixed per-op cost \
                     ({} s)",
                    table.class.name(),
                    table.threads,
                    table.fixed_s
                ));
            }
            for point in &table.points {
                let fine = |x: f64| x.is_finite() && x > 0.0;
                if !fine(point.bound_s) || !fine(point.measured_s) {
                    return Err(format!(
                        "calibration point `{}` ({} on {} threads) has a non-positive time",
                        point.shape,
                        table.class.name(),
                        table.threads
                    ));
                }
                let features = point.features.as_array();
                if features
                    .iter()
                    .any(|f| !f.is_finite() || !(0.0..=128.0).contains(f))
                {
                    return Err(format!(
                        "calibration point `{}` has an impossible shape feature",
                        point.shape
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
