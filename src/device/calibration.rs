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
        }
    }

    /// The same features with a convolution's output channel count.
    pub fn with_output_channels(self, channels: u64) -> ShapeFeatures {
        ShapeFeatures {
            log2_output_channels: if channels == 0 {
                0.0
            } else {
                (channels as f64).log2().max(f64::MIN_POSITIVE)
            },
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
        sizes
            + channels
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
    /// points: of the same op type where the table has one (a Sigmoid and a Relu of one size
    /// run different kernels), else of the whole class.
    pub fn ratio_at(&self, op_type: &str, features: &ShapeFeatures) -> Option<f64> {
        self.ratio_skipping(op_type, features, None)
    }

    /// Squared distance from `features` to the nearest point [`ClassTable::ratio_at`] would
    /// interpolate from (the same op type's points where the table has one).
    fn nearest_distance(&self, op_type: &str, features: &ShapeFeatures) -> Option<f64> {
        let same_type = |p: &CalibrationPoint| !op_type.is_empty() && p.op_type == op_type;
        let typed = self.points.iter().any(same_type);
        self.points
            .iter()
            .filter(|p| !typed || same_type(p))
            .map(|p| p.features.distance_squared(features))
            .min_by(f64::total_cmp)
    }

    fn ratio_skipping(
        &self,
        op_type: &str,
        features: &ShapeFeatures,
        skip: Option<usize>,
    ) -> Option<f64> {
        let same_type = |index: usize, p: &CalibrationPoint| {
            Some(index) != skip && !op_type.is_empty() && p.op_type == op_type
        };
        let typed = self
            .points
            .iter()
            .enumerate()
            .filter(|&(i, p)| same_type(i, p))
            .count();
        if typed >= 1 {
            let points = self
                .points
                .iter()
                .enumerate()
                .filter(|&(i, p)| same_type(i, p) || Some(i) == skip)
                .map(|(_, p)| p);
            // `skip` indexes the full list: map it into the filtered one.
            let skip_in_typed = skip.map(|s| {
                self.points[..s]
                    .iter()
                    .enumerate()
                    .filter(|&(i, p)| same_type(i, p) || Some(i) == skip)
                    .count()
            });
            return interpolate(points, features, skip_in_typed, self.fixed_s);
        }
        interpolate(self.points.iter(), features, skip, self.fixed_s)
    }

    /// Leave-one-out relative errors of the table's own points.
    pub fn leave_one_out(&self) -> Option<FitError> {
        if self.points.len() < 2 {
            return None;
        }
        let mut errors: Vec<f64> = self
            .points
            .iter()
            .enumerate()
            .filter_map(|(left_out, point)| {
                let ratio = self.ratio_skipping(&point.op_type, &point.features, Some(left_out))?;
                let predicted = self.fixed_s + point.bound_s * ratio;
                Some((predicted - point.measured_s).abs() / point.measured_s)
            })
            .collect();
        errors.sort_by(f64::total_cmp);
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
        Some(FitError {
            median_abs: at(0.5),
            p90_abs: at(0.9),
            points: errors.len() as u32,
        })
    }
}

/// Inverse-squared-distance mean of log(ratio) over the `NEIGHBOURS` nearest points (skipping
/// `skip`); an exact match returns that point's ratio.
fn interpolate<'a>(
    points: impl Iterator<Item = &'a CalibrationPoint>,
    features: &ShapeFeatures,
    skip: Option<usize>,
    fixed_s: f64,
) -> Option<f64> {
    let mut near: Vec<(f64, f64)> = points
        .enumerate()
        .filter(|(index, p)| Some(*index) != skip && p.bound_s > 0.0 && p.measured_s > 0.0)
        .map(|(_, p)| {
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
}

impl Calibration {
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
            let sibling = class
                .siblings()
                .iter()
                .filter_map(|&other| self.table(other, threads))
                .filter_map(|t| Some((t.nearest_distance("", features)?, t)))
                .filter(|&(distance, _)| distance < own_distance)
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((_, sibling)) = sibling {
                return Some(sibling.fixed_s + bound_s * sibling.ratio_at("", features)?);
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
mod tests {
    use super::*;

    fn point(work: u64, bytes: u64, bound_s: f64, measured_s: f64) -> CalibrationPoint {
        CalibrationPoint {
            shape: format!("{work}/{bytes}"),
            features: ShapeFeatures::new(work, bytes, 0, 1),
            bound_s,
            measured_s,
            op_type: String::new(),
        }
    }

    /// A full-mode calibration of `tables`, its other fields blank.
    fn calibration_of(tables: Vec<ClassTable>) -> Calibration {
        Calibration {
            tool_version: String::new(),
            measured_at: String::new(),
            mode: "full".into(),
            wall_time_s: 1.0,
            method: String::new(),
            tables,
        }
    }

    fn table(points: Vec<CalibrationPoint>) -> ClassTable {
        ClassTable {
            class: KernelClass::Gemm,
            threads: 1,
            points,
            fit_error: None,
            fixed_s: 0.0,
        }
    }

    #[test]
    fn an_op_far_from_its_class_is_predicted_from_a_nearer_sibling_class() {
        let at = |class: KernelClass, work: u64, ratio: f64| ClassTable {
            class,
            threads: 1,
            points: vec![point(work, 1 << 20, 1.0, ratio)],
            fit_error: None,
            fixed_s: 0.0,
        };
        let calibration = calibration_of;
        let query = ShapeFeatures::new(1 << 28, 1 << 20, 0, 1);
        let expected = |c: &Calibration| c.expected_s(KernelClass::Gemm, "MatMul", 1, &query, 1.0);
        // Its own table's only point is 8 doublings of work away; a 1×1 convolution of its
        // size ran at 1.4× its bound.
        let far = calibration(vec![
            at(KernelClass::Gemm, 1 << 20, 2.1),
            at(KernelClass::Pointwise, 1 << 28, 1.4),
        ]);
        assert!((expected(&far).unwrap() - 1.4).abs() < 1e-9);
        // Within three doublings its own class decides, whatever a sibling holds.
        let near = calibration(vec![
            at(KernelClass::Gemm, 1 << 26, 2.1),
            at(KernelClass::Pointwise, 1 << 28, 1.4),
        ]);
        assert!((expected(&near).unwrap() - 2.1).abs() < 1e-9);
        // Classes that are not one kernel never borrow.
        let unrelated = calibration(vec![
            at(KernelClass::Softmax, 1 << 20, 3.0),
            at(KernelClass::Elementwise, 1 << 28, 1.1),
        ]);
        let softmax = unrelated.expected_s(KernelClass::Softmax, "Softmax", 1, &query, 1.0);
        assert!((softmax.unwrap() - 3.0).abs() < 1e-9);
    }

    #[test]
    fn output_channels_count_only_where_both_sides_have_them() {
        let base = ShapeFeatures::new(1 << 20, 1 << 16, 1 << 12, 1 << 10);
        let few = base.with_output_channels(16);
        let many = base.with_output_channels(256);
        assert!((few.distance_squared(&many) - 16.0).abs() < 1e-9);
        // A point saved without the feature (or an op that is not a convolution) is compared
        // on the other features alone.
        assert_eq!(few.distance_squared(&base), 0.0);
        assert_eq!(base.with_output_channels(0), base);
        // The nearer channel count wins between points of equal size.
        let with_channels = |channels: u64, ratio: f64| CalibrationPoint {
            features: base.with_output_channels(channels),
            ..point(1 << 20, 1 << 16, 1.0, ratio)
        };
        let t = table(vec![with_channels(16, 4.0), with_channels(256, 2.0)]);
        let ratio = t.ratio_at("", &base.with_output_channels(24)).unwrap();
        assert!(ratio > 3.5, "{ratio}");
    }

    #[test]
    fn a_fixed_cost_is_added_once_not_scaled_with_the_bound() {
        // A runtime whose ops cost 3 µs plus twice their bound: the ratio of the time above
        // the fixed cost is 2 everywhere, and an op a thousand times smaller than every point
        // is predicted at the fixed cost plus twice its bound, not at the larger ops'
        // measured ÷ bound times its bound.
        let fixed = 3e-6;
        let at = |work: u64, bound_s: f64| point(work, work, bound_s, fixed + 2.0 * bound_s);
        let mut t = table(vec![
            at(1 << 24, 1e-4),
            at(1 << 25, 2e-4),
            at(1 << 26, 4e-4),
        ]);
        t.fixed_s = fixed;
        let calibration = calibration_of(vec![t]);
        let tiny = ShapeFeatures::new(1 << 14, 1 << 14, 0, 1);
        let expected = calibration
            .expected_s(KernelClass::Gemm, "", 1, &tiny, 1e-7)
            .unwrap();
        assert!((expected - (fixed + 2e-7)).abs() < 1e-12, "{expected}");
        assert!(calibration.tables[0].leave_one_out().unwrap().median_abs < 1e-9);
        // Without it, the tiny op takes the nearest point's 2.03× and misses the fixed cost.
        let mut plain = calibration.clone();
        plain.tables[0].fixed_s = 0.0;
        let scaled = plain
            .expected_s(KernelClass::Gemm, "", 1, &tiny, 1e-7)
            .unwrap();
        assert!(scaled < 1e-6, "{scaled}");
        // A point quicker than the fixed cost keeps a positive ratio.
        assert!((point(1, 1, 1e-6, 2e-6).ratio_above(3e-6) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn depthwise_grid_points_take_their_kernel_size_key_on_upgrade() {
        let shaped = |shape: &str, ratio: f64| CalibrationPoint {
            shape: shape.to_string(),
            op_type: "Conv".to_string(),
            ..point(1 << 20, 1 << 20, 1.0, ratio)
        };
        let mut calibration = calibration_of(vec![ClassTable {
            class: KernelClass::Depthwise,
            threads: 1,
            points: vec![
                shaped("conv 144→144 3x3 s1 g144 56x56", 20.0),
                shaped("conv 240→240 5x5 s1 g240 28x28", 8.0),
                // A from-profile point names no size: it keeps the plain type.
                shaped("m.onnx: Conv_3 (Conv)", 5.0),
            ],
            fit_error: None,
            fixed_s: 0.0,
        }]);
        calibration.upgrade();
        let types: Vec<&str> = calibration.tables[0]
            .points
            .iter()
            .map(|p| p.op_type.as_str())
            .collect();
        assert_eq!(types, ["Conv depthwise 3x3", "Conv depthwise 5x5", "Conv"]);
        let features = ShapeFeatures::new(1 << 20, 1 << 20, 0, 1);
        let five = depthwise_op_type("Conv", 5, 5);
        let expected = calibration
            .expected_s(KernelClass::Depthwise, &five, 1, &features, 1.0)
            .unwrap();
        assert!((expected - 8.0).abs() < 1e-9, "{expected}");
        // A size no point has is predicted from the whole class.
        let seven = depthwise_op_type("Conv", 7, 7);
        let expected = calibration
            .expected_s(KernelClass::Depthwise, &seven, 1, &features, 1.0)
            .unwrap();
        assert!(expected > 5.0 && expected < 20.0, "{expected}");
    }

    #[test]
    fn upgrade_moves_lrn_points_out_of_the_norm_table() {
        let typed = |op: &str, work: u64, ratio: f64| CalibrationPoint {
            op_type: op.to_string(),
            ..point(work, 1 << 20, 1.0, ratio)
        };
        let mut calibration = calibration_of(vec![ClassTable {
            class: KernelClass::Norm,
            threads: 1,
            points: vec![typed("LRN", 1 << 20, 400.0), typed("LRN", 1 << 22, 450.0)],
            fit_error: None,
            fixed_s: 0.0,
        }]);
        let layer_norm = ShapeFeatures::new(1 << 21, 1 << 20, 0, 1);
        // Before: the only norm points are LRNs, and a LayerNormalization took their ratio.
        let before =
            calibration.expected_s(KernelClass::Norm, "LayerNormalization", 1, &layer_norm, 1.0);
        assert!(before.unwrap() > 100.0);
        calibration.upgrade();
        let norm =
            calibration.expected_s(KernelClass::Norm, "LayerNormalization", 1, &layer_norm, 1.0);
        assert_eq!(norm, None, "no norm point is left to predict from");
        let lrn = calibration.expected_s(KernelClass::Lrn, "LRN", 1, &layer_norm, 1.0);
        assert!((lrn.unwrap() - 424.26).abs() < 0.1, "{lrn:?}");
        assert_eq!(calibration.tables.len(), 1);
        assert!(calibration.tables[0].fit_error.is_some());
    }

    #[test]
    fn winograd_variants_are_looked_up_apart_after_an_upgrade() {
        // A saved calibration with both variants under `Conv`: the F(2×2) points sit nearer
        // to the query than the F(4×4) one.
        let variant = |name: &str, work: u64, ratio: f64| CalibrationPoint {
            shape: format!("conv 96→24 3x3 s1 g1 160x160 ({name})"),
            op_type: "Conv".into(),
            ..point(work, 1 << 20, 1.0, ratio)
        };
        let mut calibration = calibration_of(vec![ClassTable {
            class: KernelClass::Winograd,
            threads: 1,
            points: vec![
                variant("winograd F(2x2,3x3)", 1 << 28, 2.5),
                variant("winograd F(2x2,3x3)", 1 << 29, 2.5),
                variant("winograd F(4x4,3x3)", 1 << 26, 5.0),
            ],
            fit_error: None,
            fixed_s: 0.0,
        }]);
        let f4 = algorithm_op_type("Conv", "winograd F(4x4,3x3)");
        assert_eq!(f4, "Conv winograd F(4x4,3x3)");
        let query = ShapeFeatures::new(1 << 28, 1 << 20, 0, 1);
        let expected = |c: &Calibration| c.expected_s(KernelClass::Winograd, &f4, 1, &query, 1.0);
        assert!(expected(&calibration).unwrap() < 3.0, "mixed with F(2×2)");
        calibration.upgrade();
        assert!((expected(&calibration).unwrap() - 5.0).abs() < 1e-9);
        let points = &calibration.tables[0].points;
        assert_eq!(points[0].op_type, "Conv winograd F(2x2,3x3)");
        assert!(calibration.tables[0].fit_error.is_some());
    }

    #[test]
    fn an_exact_shape_returns_its_own_ratio() {
        let t = table(vec![
            point(1 << 20, 1 << 16, 1.0, 2.0),
            point(1 << 30, 1 << 20, 1.0, 1.25),
        ]);
        let features = ShapeFeatures::new(1 << 20, 1 << 16, 0, 1);
        assert!((t.ratio_at("", &features).unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn halfway_between_two_shapes_is_the_geometric_mean() {
        // Equal distances in log2 space: ratios 2 and 8 → exp(mean(ln 2, ln 8)) = 4.
        let t = table(vec![
            point(1 << 10, 1 << 10, 1.0, 2.0),
            point(1 << 14, 1 << 10, 1.0, 8.0),
        ]);
        let features = ShapeFeatures::new(1 << 12, 1 << 10, 0, 1);
        assert!((t.ratio_at("", &features).unwrap() - 4.0).abs() < 1e-9);
    }

    #[test]
    fn the_nearer_shape_weighs_more() {
        let t = table(vec![
            point(1 << 10, 1 << 10, 1.0, 2.0),
            point(1 << 20, 1 << 10, 1.0, 8.0),
        ]);
        let near_small = ShapeFeatures::new(1 << 11, 1 << 10, 0, 1);
        let ratio = t.ratio_at("", &near_small).unwrap();
        assert!(ratio > 2.0 && ratio < 2.2, "{ratio}");
    }

    #[test]
    fn a_point_at_the_same_memory_level_wins_over_a_same_size_one_at_another() {
        // A GEMV whose weights the bound charged at DRAM must not take the ratio of one whose
        // weights sat in L3, even at a size one doubling closer.
        let gemv =
            |size: u64, level: u8| ShapeFeatures::new(size, size, size, 1).at_levels(2, level);
        let mut in_l3 = point(1 << 24, 1 << 24, 1.0, 3.0);
        in_l3.features = gemv(1 << 24, 3);
        let mut in_dram = point(1 << 26, 1 << 26, 1.0, 1.2);
        in_dram.features = gemv(1 << 26, 4);
        let t = table(vec![in_l3, in_dram]);
        let query = gemv(1 << 25, 4);
        let ratio = t.ratio_at("", &query).unwrap();
        assert!(ratio < 1.5, "{ratio}");
    }

    #[test]
    fn points_of_the_same_op_type_come_first() {
        let typed = |op: &str, work: u64, ratio: f64| CalibrationPoint {
            op_type: op.to_string(),
            ..point(work, 1 << 20, 1.0, ratio)
        };
        let t = table(vec![
            typed("Relu", 1 << 20, 1.1),
            typed("Relu", 1 << 22, 1.1),
            typed("Sigmoid", 1 << 21, 20.0),
            typed("Sigmoid", 1 << 23, 20.0),
        ]);
        let features = ShapeFeatures::new(1 << 21, 1 << 20, 0, 1);
        assert!((t.ratio_at("Relu", &features).unwrap() - 1.1).abs() < 1e-9);
        assert!((t.ratio_at("Sigmoid", &features).unwrap() - 20.0).abs() < 1e-9);
        // An op type the grid lacks takes the whole class.
        let mixed = t.ratio_at("Tanh", &features).unwrap();
        assert!(mixed > 1.1 && mixed < 20.0, "{mixed}");
        // Left out in turn, each point is predicted from its own type: exact here.
        let fit = t.leave_one_out().unwrap();
        assert!(fit.p90_abs < 1e-9, "{fit:?}");
    }

    #[test]
    fn leave_one_out_on_a_constant_ratio_is_exact() {
        let t = table(
            (10..16)
                .map(|k| point(1 << (2 * k), 1 << k, 1e-3, 1.5e-3))
                .collect(),
        );
        let fit = t.leave_one_out().unwrap();
        assert_eq!(fit.points, 6);
        assert!(fit.median_abs < 1e-12 && fit.p90_abs < 1e-12);
    }

    #[test]
    fn the_table_of_the_thread_count_in_use_is_chosen() {
        let mut one = table(vec![point(1 << 20, 1 << 16, 1.0, 2.0)]);
        let mut two = one.clone();
        two.threads = 2;
        two.points[0].measured_s = 3.0;
        one.threads = 1;
        let calibration = Calibration {
            tool_version: "test".into(),
            measured_at: "now".into(),
            mode: "quick".into(),
            wall_time_s: 1.0,
            method: "test".into(),
            tables: vec![one, two],
        };
        let features = ShapeFeatures::new(1 << 20, 1 << 16, 0, 1);
        let expected = |threads| {
            calibration
                .expected_s(KernelClass::Gemm, "", threads, &features, 1.0)
                .map(|e| (e * 1e9).round() / 1e9)
        };
        assert_eq!(expected(1), Some(2.0));
        assert_eq!(expected(2), Some(3.0));
        // More threads than calibrated: the largest table not above.
        assert_eq!(expected(8), Some(3.0));
        assert_eq!(
            calibration.expected_s(KernelClass::Pool, "", 1, &features, 1.0),
            None
        );
    }

    #[test]
    fn an_impossible_fixed_cost_is_refused() {
        for fixed_s in [-1e-6, f64::NAN, f64::INFINITY, 5.0] {
            let mut t = table(vec![point(1 << 20, 1 << 20, 1e-3, 2e-3)]);
            t.fixed_s = fixed_s;
            let error = calibration_of(vec![t]).validate().unwrap_err();
            assert!(error.contains("fixed per-op cost"), "{error}");
        }
        let mut t = table(vec![point(1 << 20, 1 << 20, 1e-3, 2e-3)]);
        t.fixed_s = 3e-6;
        calibration_of(vec![t]).validate().unwrap();
    }

    #[test]
    fn impossible_points_are_refused() {
        let mut c = Calibration {
            tool_version: "t".into(),
            measured_at: "n".into(),
            mode: "quick".into(),
            wall_time_s: 0.0,
            method: "m".into(),
            tables: vec![table(vec![point(4, 4, 1.0, 0.0)])],
        };
        assert!(c.validate().is_err());
        c.tables[0].points[0].measured_s = 1.0;
        assert!(c.validate().is_ok());
    }
}
