//! Which algorithm a convolution runs on the tool's CPU executor: direct (the direct kernels or
//! im2col + GEMM, whichever `kernels::conv` picks for the shape) or
//! Winograd F(2×2,3×3) / F(4×4,3×3) (Lavin & Gray 2016), decided per layer from the roofline of
//! each variant on the device. The analysis records the decision and costs the chosen variant;
//! the executor's planner asks the same function, so the bound and the kernel that runs agree.
//!
//! Winograd cuts the GEMM multiplies (16 instead of 36 per 2×2 output tile, 36 instead of 144
//! per 4×4 tile) but reads α²/9 times the weight bytes (the transformed filter), adds the input
//! and output transforms, and writes and reads back the transformed input `V` and the GEMM
//! outputs `M` (α² planes of C and K channels per tile). The rule:
//!
//! 1. Only 3×3, stride-1, undilated, ungrouped convolutions at fp32 are candidates.
//! 2. A variant whose GEMMs get fewer than [`MIN_TILES`] columns (tiles per image) is not
//!    considered: the CPU GEMM's microkernels are 16-32 columns wide, so at 16 tiles half of
//!    each is padding. Measured on Zen 4, 1 thread: 256×14² F(4×4) (16 tiles) ran 1.1-1.3×
//!    faster than direct where its multiply count promised 4×. Nor is one with fewer than
//!    [`MIN_INPUT_CHANNELS`] input channels: the transforms cost per tile in proportion to
//!    C + K channels, the multiplies saved in proportion to C × K, and the GEMMs' depth is C.
//!    Measured on Zen 5, 1 thread (`cargo bench --bench winograd`), against the direct kernel:
//!    SqueezeNet's 16→64 55², 32→128 27², 48→192 13² and 64→256 13² ran 0.48-0.78× as fast as
//!    F(2×2) and 0.47-0.67× as F(4×4), where ResNet's 64→64 56² ran 1.27× faster as F(4×4). The
//!    calibrated comparison (rule 4) had picked F(4×4) for the first two: the calibration grid's
//!    Winograd points have as many input channels as output ones. The threshold is a default
//!    for rules 3 and 4 only: where the shape was timed here (rule 5), the measurement decides.
//!    On an AVX2 Zen 1 guest, 1 thread, the same four shapes ran 1.21-1.54× faster as the
//!    better Winograd variant than direct (its direct kernels are the AVX2 ones).
//! 3. Each remaining variant's time is the roofline of its work and traffic ([`estimate`]); the
//!    fastest wins if it beats direct by [`MARGIN`] (the transforms run well below the vector
//!    peak the bound charges them at).
//! 4. On a calibrated device the comparison is made on the expected times instead (each
//!    variant's bound times its class's measured efficiency: the `conv` class for direct, the
//!    `winograd` class for both tile sizes), when both sides have one. The bounds alone promise
//!    Winograd about twice the gain it measures: SqueezeNet's 48- and 64-channel 13×13 layers
//!    on Zen 5 were bound 1.75-1.80× faster as F(2×2) and ran 0.77-0.85× as fast; their
//!    expected gains were 0.91-1.04×.
//! 5. Where this machine's kernels were timed on the exact shape ([`MeasuredAlgorithms`], a
//!    latency table per device profile that `roofline bench` on the local device fills: each
//!    variant called in turn, medians), the measurement decides over rules 3 and 4: the
//!    fastest Winograd variant runs if it beat direct by [`MEASURED_MARGIN`]. The direct
//!    kernel of `kernels::conv::direct` runs the 3×3 layers of 28×28 and 14×14 planes at
//!    75-85% of the FMA peak, which the calibrated model (one efficiency curve per class over
//!    intensity and size) does not resolve: on Zen 5, 1 thread, in-model per layer
//!    (`scripts/winograd_gain.py`), the calibrated rule's Winograd layers ran 0.87-0.96× as
//!    fast as direct in ResNet-50 and 0.62-1.01× in Inception-v2 (but for its 64→192 56²
//!    layer); the table (each variant timed with the weights cold, see `exec::conv_timing`)
//!    keeps those direct and picks F(4×4) for that layer (1.18× in-model) and F(2×2) for
//!    ResNet's 128→128 28² (1.11-1.22×).

use serde::{Deserialize, Serialize};

use super::ops::{OpCost, Traffic};
use super::roofline::{estimate, Roof};

/// The algorithm a convolution runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvAlgorithm {
    /// Direct convolution: im2col + GEMM, the dense direct kernel or the depthwise kernel.
    Direct,
    /// Winograd F(2×2, 3×3).
    WinogradF2,
    /// Winograd F(4×4, 3×3).
    WinogradF4,
}

impl ConvAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgorithm::Direct => "direct",
            ConvAlgorithm::WinogradF2 => "winograd F(2x2,3x3)",
            ConvAlgorithm::WinogradF4 => "winograd F(4x4,3x3)",
        }
    }

    /// Output tile side m (Winograd only).
    pub fn output_tile(self) -> Option<usize> {
        match self {
            ConvAlgorithm::Direct => None,
            ConvAlgorithm::WinogradF2 => Some(2),
            ConvAlgorithm::WinogradF4 => Some(4),
        }
    }
}

/// Which algorithms a plan or an analysis may choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmPolicy {
    /// The roofline chooses per layer.
    #[default]
    Auto,
    /// Direct only (to measure what the choice buys).
    DirectOnly,
    /// This algorithm for every 3×3 stride-1 convolution (direct for the others): the
    /// calibration grid times direct, F(2×2) and F(4×4) at the same shapes, so the tables
    /// that rule 4 compares hold each algorithm where the rule has to choose.
    Only(ConvAlgorithm),
}

/// Fewest tiles per image for a Winograd variant to be considered (rule 2).
pub const MIN_TILES: usize = 32;
/// Fewest input channels for a Winograd variant to be considered by rules 3 and 4 (rule 2);
/// a shape in the latency table (rule 5) is decided by its measurement whatever its channels.
pub const MIN_INPUT_CHANNELS: usize = 64;
/// How much faster than direct a Winograd variant's bound must be (rule 3).
pub const MARGIN: f64 = 1.15;
/// How much faster than direct a Winograd variant must have measured (rule 5): on a shared
/// host the medians of a shape's interleaved calls moved between timings (Inception-v2's
/// 96→96 28² layer measured its best Winograd variant at 0.90× and 1.07× of direct an hour
/// apart), and a layer alone misses some of what a model adds around it.
pub const MEASURED_MARGIN: f64 = 1.10;

/// This machine's kernels timed on one convolution shape as each algorithm (rule 5): medians
/// of calls made in turn, so a noisy spell slows every variant alike.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredVariants {
    pub direct_s: f64,
    pub winograd_f2_s: f64,
    pub winograd_f4_s: f64,
    /// Calls of each variant the medians are over.
    pub rounds: usize,
}

impl MeasuredVariants {
    fn of(&self, algorithm: ConvAlgorithm) -> f64 {
        match algorithm {
            ConvAlgorithm::Direct => self.direct_s,
            ConvAlgorithm::WinogradF2 => self.winograd_f2_s,
            ConvAlgorithm::WinogradF4 => self.winograd_f4_s,
        }
    }
}

/// A latency table of convolution algorithms for one device profile and kernel ISA, by shape
/// and thread count (rule 5). Filled by the executor's measurements (`exec::conv_timing`),
/// read by the analysis.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasuredAlgorithms {
    /// Id of the device profile the kernels ran on.
    pub device: String,
    /// The kernels' ISA (`avx512`, `avx2`, `scalar`).
    pub isa: String,
    /// The convolution kernels' revision the times were measured under (0: before revisions
    /// were recorded).
    #[serde(default)]
    pub kernels_revision: u32,
    pub entries: std::collections::BTreeMap<String, MeasuredVariants>,
}

impl MeasuredAlgorithms {
    pub fn key(shape: &ConvShape, threads: usize) -> String {
        format!(
            "b{}/c{}/k{}/{}x{}/t{threads}",
            shape.batch, shape.in_channels, shape.out_channels, shape.out_h, shape.out_w
        )
    }

    pub fn get(&self, shape: &ConvShape, threads: usize) -> Option<&MeasuredVariants> {
        self.entries.get(&Self::key(shape, threads))
    }
}

/// Whether rule 1 and rule 2's tile count leave a Winograd variant to consider for `shape`:
/// the shapes worth timing for rule 5 (whatever their input channels: the channel threshold is
/// a default for machines that have not timed the shape).
pub fn has_winograd_candidate(shape: &ConvShape) -> bool {
    shape.winograd_candidate()
        && [ConvAlgorithm::WinogradF2, ConvAlgorithm::WinogradF4]
            .into_iter()
            .any(|algorithm| shape.tiles(algorithm.output_tile().unwrap_or(1)) >= MIN_TILES)
}

/// Geometry of one 2-D convolution, as the decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel: (usize, usize),
    pub strides: (usize, usize),
    pub dilations: (usize, usize),
    pub group: usize,
}

impl ConvShape {
    /// A 3×3, stride-1, undilated, ungrouped convolution of `out_h × out_w` outputs per image.
    pub fn three_by_three(
        batch: usize,
        in_channels: usize,
        out_channels: usize,
        out_h: usize,
        out_w: usize,
    ) -> ConvShape {
        ConvShape {
            batch,
            in_channels,
            out_channels,
            out_h,
            out_w,
            kernel: (3, 3),
            strides: (1, 1),
            dilations: (1, 1),
            group: 1,
        }
    }

    /// Rule 1: a 3×3, stride-1, undilated, ungrouped convolution with outputs (the shapes a
    /// Winograd kernel can run at all).
    pub fn winograd_candidate(&self) -> bool {
        self.kernel == (3, 3)
            && self.strides == (1, 1)
            && self.dilations == (1, 1)
            && self.group == 1
            && self.out_h > 0
            && self.out_w > 0
    }

    /// Output tiles of `m × m` per image.
    pub fn tiles(&self, m: usize) -> usize {
        self.out_h.div_ceil(m) * self.out_w.div_ceil(m)
    }

    /// Multiply-adds of the direct algorithm.
    pub fn direct_macs(&self) -> u64 {
        (self.batch
            * self.out_channels
            * self.out_h
            * self.out_w
            * (self.in_channels / self.group.max(1))
            * self.kernel.0
            * self.kernel.1) as u64
    }

    /// f32 weight bytes of the direct algorithm.
    fn direct_weight_bytes(&self) -> u64 {
        4 * (self.out_channels
            * (self.in_channels / self.group.max(1))
            * self.kernel.0
            * self.kernel.1) as u64
    }
}

impl ConvShape {
    /// The shape of a 2-D `Conv` (or the tool's `FusedConv`) from its attributes and known
    /// input, weight and output dims; `None` for other ranks or unreadable attributes.
    pub fn of_node(
        attrs: &super::graph::Attributes,
        x: &[u64],
        w: &[u64],
        y: &[u64],
    ) -> Option<ConvShape> {
        if x.len() != 4 || w.len() != 4 || y.len() != 4 {
            return None;
        }
        let config = super::ops::spatial::ConvConfig::parse(attrs).ok()?;
        let window = config.window(&x[2..], &w[2..]).ok()?.to_2d()?;
        let size = |v: u64| usize::try_from(v).ok();
        Some(ConvShape {
            batch: size(x[0])?,
            in_channels: size(x[1])?,
            out_channels: size(y[1])?,
            out_h: size(y[2])?,
            out_w: size(y[3])?,
            kernel: (window.kernel[0], window.kernel[1]),
            strides: (window.strides[0], window.strides[1]),
            dilations: (window.dilations[0], window.dilations[1]),
            group: size(config.group)?,
        })
    }
}

/// The decision for one convolution: the chosen algorithm, its cost, and the bound of each
/// side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmChoice {
    pub algorithm: ConvAlgorithm,
    /// Roofline bound of the direct algorithm.
    pub direct_s: f64,
    /// Roofline bound of the chosen algorithm (equal to `direct_s` when direct is chosen).
    pub chosen_s: f64,
    /// Why, in a phrase (shown in reports).
    pub reason: String,
}

/// Cost of running `shape` as `algorithm`, from the op's direct cost (which carries its
/// epilogue flops and the bytes of its bias and residual).
pub fn algorithm_cost(shape: &ConvShape, algorithm: ConvAlgorithm, direct: &OpCost) -> OpCost {
    let Some(m) = algorithm.output_tile() else {
        return *direct;
    };
    let alpha = m + 2;
    let a2 = (alpha * alpha) as u64;
    let tiles = shape.tiles(m) as u64;
    let (c, k, n) = (
        shape.in_channels as u64,
        shape.out_channels as u64,
        shape.batch as u64,
    );
    let macs = a2 * k * c * tiles * n;
    // About 2α adds per 1-D transform of α values: α columns then α rows of each input patch,
    // α columns then m rows of each output tile.
    let (alpha, m) = (alpha as u64, m as u64);
    let transform_flops =
        tiles * n * (c * 4 * alpha * alpha * alpha + k * 2 * alpha * (alpha * m + m * m));
    // V and M, written once and read back once.
    let scratch = 4 * a2 * (c + k) * tiles * n;
    let epilogue_flops = direct.flops.saturating_sub(2 * direct.macs);
    OpCost {
        flops: 2 * macs + transform_flops + epilogue_flops,
        macs,
        transcendental: direct.transcendental,
        bytes: Traffic {
            weights_read: direct.bytes.weights_read
                - shape.direct_weight_bytes().min(direct.bytes.weights_read)
                + 4 * a2 * k * c,
            act_read: direct.bytes.act_read + scratch,
            act_written: direct.bytes.act_written + scratch,
            input_read: 0,
        },
        is_view: false,
        compute_precision: direct.compute_precision,
        vector_flops: direct.vector_flops + transform_flops,
    }
}

/// The algorithm `shape` runs as on a device with `roof` (`None`: compare work only, as on a
/// machine whose bandwidth is not known), under `policy`. `direct` is the op's direct cost.
pub fn choose(
    shape: &ConvShape,
    direct: &OpCost,
    roof: Option<&Roof>,
    policy: AlgorithmPolicy,
) -> AlgorithmChoice {
    choose_calibrated(shape, direct, roof, policy, None, None)
}

/// The expected time of a convolution's cost when run as an algorithm, given its roofline
/// bound, on a calibrated device (`None` where its class has no calibration).
pub type ExpectedTime<'a> = &'a dyn Fn(&OpCost, ConvAlgorithm, f64) -> Option<f64>;

/// [`choose`], deciding by this machine's measured times where `measured` has the shape
/// (rule 5), else comparing the variants' expected times where `expected` gives one for direct
/// and for the best Winograd variant (rule 4), their bounds otherwise. `measured` is the entry
/// at the thread count the analysis runs at (see [`MeasuredAlgorithms::get`]).
pub fn choose_calibrated(
    shape: &ConvShape,
    direct: &OpCost,
    roof: Option<&Roof>,
    policy: AlgorithmPolicy,
    expected: Option<ExpectedTime>,
    measured: Option<(&MeasuredVariants, usize)>,
) -> AlgorithmChoice {
    let time = |cost: &OpCost| match roof {
        Some(roof) => estimate(cost, roof).predicted_s,
        None => (cost.flops + cost.transcendental) as f64 * 1e-12,
    };
    let direct_s = time(direct);
    let direct_choice = |reason: String| AlgorithmChoice {
        algorithm: ConvAlgorithm::Direct,
        direct_s,
        chosen_s: direct_s,
        reason,
    };
    if !shape.winograd_candidate() {
        return direct_choice("not a 3x3 stride-1 convolution".into());
    }
    match policy {
        AlgorithmPolicy::DirectOnly | AlgorithmPolicy::Only(ConvAlgorithm::Direct) => {
            return direct_choice("Winograd turned off".into());
        }
        AlgorithmPolicy::Only(forced) => {
            return AlgorithmChoice {
                algorithm: forced,
                direct_s,
                chosen_s: time(&algorithm_cost(shape, forced, direct)),
                reason: format!("{} asked for", forced.name()),
            };
        }
        AlgorithmPolicy::Auto => {}
    }
    debug_assert_eq!(direct.macs, shape.direct_macs());
    if let Some((measured, threads)) = measured.filter(|_| has_winograd_candidate(shape)) {
        let fastest = [ConvAlgorithm::WinogradF2, ConvAlgorithm::WinogradF4]
            .into_iter()
            .min_by(|x, y| measured.of(*x).total_cmp(&measured.of(*y)))
            .unwrap_or(ConvAlgorithm::WinogradF2);
        let ms = |algorithm: ConvAlgorithm| measured.of(algorithm) * 1e3;
        let timings = format!(
            "measured here on {threads} thread(s): direct {:.3} ms, F(2x2) {:.3} ms, F(4x4) {:.3} ms",
            ms(ConvAlgorithm::Direct),
            ms(ConvAlgorithm::WinogradF2),
            ms(ConvAlgorithm::WinogradF4)
        );
        return if measured.of(fastest) * MEASURED_MARGIN <= measured.direct_s {
            AlgorithmChoice {
                algorithm: fastest,
                direct_s,
                chosen_s: time(&algorithm_cost(shape, fastest, direct)),
                reason: timings,
            }
        } else {
            direct_choice(timings)
        };
    }
    if shape.in_channels < MIN_INPUT_CHANNELS {
        return direct_choice(format!(
            "fewer than {MIN_INPUT_CHANNELS} input channels: the transforms outweigh the \
             multiplies saved (not timed on this machine)"
        ));
    }
    // (algorithm, cost, bound) of each variant with enough tiles.
    let candidates: Vec<(ConvAlgorithm, OpCost, f64)> =
        [ConvAlgorithm::WinogradF2, ConvAlgorithm::WinogradF4]
            .into_iter()
            .filter(|algorithm| shape.tiles(algorithm.output_tile().unwrap_or(1)) >= MIN_TILES)
            .map(|algorithm| {
                let cost = algorithm_cost(shape, algorithm, direct);
                let bound_s = time(&cost);
                (algorithm, cost, bound_s)
            })
            .collect();
    // Rule 4: expected times decide when direct and every candidate have one.
    let direct_expected = expected.and_then(|expected| {
        let direct_expected = expected(direct, ConvAlgorithm::Direct, direct_s)?;
        let expected_candidates: Option<Vec<(ConvAlgorithm, f64, f64)>> = candidates
            .iter()
            .map(|(a, cost, bound_s)| Some((*a, *bound_s, expected(cost, *a, *bound_s)?)))
            .collect();
        Some((direct_expected, expected_candidates?))
    });
    if let Some((direct_expected, expected_candidates)) = direct_expected {
        if let Some(&(algorithm, bound_s, expected_s)) = expected_candidates
            .iter()
            .min_by(|x, y| x.2.total_cmp(&y.2))
        {
            return if expected_s * MARGIN <= direct_expected {
                AlgorithmChoice {
                    algorithm,
                    direct_s,
                    chosen_s: bound_s,
                    reason: format!(
                        "expected {:.2}x faster than direct (calibrated; bound {:.2}x)",
                        direct_expected / expected_s,
                        direct_s / bound_s
                    ),
                }
            } else {
                direct_choice(format!(
                    "{} expected only {:.2}x faster than direct (calibrated; bound {:.2}x)",
                    algorithm.name(),
                    direct_expected / expected_s,
                    direct_s / bound_s
                ))
            };
        }
    }
    let best = candidates
        .iter()
        .map(|&(a, _, b)| (a, b))
        .min_by(|x, y| x.1.total_cmp(&y.1));
    match best {
        None => direct_choice(format!(
            "plane too small for Winograd (fewer than {MIN_TILES} tiles)"
        )),
        Some((algorithm, seconds)) if seconds * MARGIN <= direct_s => AlgorithmChoice {
            algorithm,
            direct_s,
            chosen_s: seconds,
            reason: format!("bound {:.2}x below direct", direct_s / seconds),
        },
        Some((algorithm, seconds)) => direct_choice(format!(
            "{} bound only {:.2}x below direct",
            algorithm.name(),
            direct_s / seconds
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(channels: usize, side: usize) -> ConvShape {
        ConvShape::three_by_three(1, channels, channels, side, side)
    }

    fn direct(s: &ConvShape) -> OpCost {
        let macs = s.direct_macs();
        let act = 4 * (s.batch * s.in_channels * s.out_h * s.out_w) as u64;
        OpCost {
            flops: 2 * macs,
            macs,
            bytes: Traffic {
                weights_read: s.direct_weight_bytes(),
                act_read: act,
                act_written: act,
                input_read: 0,
            },
            ..OpCost::default()
        }
    }

    /// With expected times, they decide: a Winograd class measured at a third of the
    /// efficiency of the direct class turns a 2.3× bound gain into a loss, and an equal
    /// efficiency keeps the bound's choice. Without a Winograd figure, the bounds decide.
    #[test]
    fn calibrated_efficiencies_decide_over_the_bounds() {
        let s = shape(64, 56);
        let r = roof();
        let by_bounds = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto);
        assert_ne!(by_bounds.algorithm, ConvAlgorithm::Direct);
        let efficiency = |winograd: f64| {
            move |_: &OpCost, algorithm: ConvAlgorithm, bound: f64| {
                Some(match algorithm {
                    ConvAlgorithm::Direct => bound / 0.6,
                    _ => bound / winograd,
                })
            }
        };
        let decide = |expected: ExpectedTime| {
            choose_calibrated(
                &s,
                &direct(&s),
                Some(&r),
                AlgorithmPolicy::Auto,
                Some(expected),
                None,
            )
        };
        let c = decide(&efficiency(0.2));
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        assert!(c.reason.contains("calibrated"), "{}", c.reason);
        let c = decide(&efficiency(0.6));
        assert_eq!(c.algorithm, by_bounds.algorithm);
        assert_eq!(c.chosen_s, by_bounds.chosen_s);
        let no_winograd = |_: &OpCost, algorithm: ConvAlgorithm, bound: f64| {
            (algorithm == ConvAlgorithm::Direct).then_some(bound * 10.0)
        };
        let c = decide(&no_winograd);
        assert_eq!(c, by_bounds);
    }

    /// Measured times decide over the bounds and the calibration (rule 5): a Winograd variant
    /// the bound favours 2× loses to a faster measured direct; one measured 20% faster wins
    /// with its own bound as `chosen_s`; 9% is inside the margin; a plane too small for
    /// Winograd ignores the table; a layer with few input channels, direct by default, takes
    /// what was measured.
    #[test]
    fn measured_times_decide_over_bounds_and_calibration() {
        let s = shape(64, 56);
        let r = roof();
        let by_bounds = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto);
        assert_ne!(by_bounds.algorithm, ConvAlgorithm::Direct);
        let calibrated_for_winograd = |_: &OpCost, algorithm: ConvAlgorithm, bound: f64| {
            Some(match algorithm {
                ConvAlgorithm::Direct => bound / 0.3,
                _ => bound / 0.9,
            })
        };
        let times = |direct_s: f64, winograd_f2_s: f64, winograd_f4_s: f64| MeasuredVariants {
            direct_s,
            winograd_f2_s,
            winograd_f4_s,
            rounds: 9,
        };
        let decide = |shape: &ConvShape, measured: MeasuredVariants| {
            choose_calibrated(
                shape,
                &direct(shape),
                Some(&r),
                AlgorithmPolicy::Auto,
                Some(&calibrated_for_winograd),
                Some((&measured, 1)),
            )
        };
        let c = decide(&s, times(1.3e-3, 1.8e-3, 1.5e-3));
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        assert!(c.reason.contains("direct 1.300 ms"), "{}", c.reason);
        assert_eq!(c.chosen_s, c.direct_s);
        let c = decide(&s, times(1.3e-3, 1.08e-3, 1.2e-3));
        assert_eq!(c.algorithm, ConvAlgorithm::WinogradF2);
        let f2_cost = algorithm_cost(&s, ConvAlgorithm::WinogradF2, &direct(&s));
        assert_eq!(c.chosen_s, estimate(&f2_cost, &r).predicted_s);
        let c = decide(&s, times(1.3e-3, 1.4e-3, 1.19e-3));
        assert_eq!(c.algorithm, ConvAlgorithm::Direct, "{}", c.reason);
        let small = shape(512, 7);
        let c = decide(&small, times(1.0, 0.1, 0.1));
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        assert!(c.reason.contains("plane too small"), "{}", c.reason);
        // Few input channels: direct by default, the measurement decides where there is one.
        let squeeze = ConvShape::three_by_three(1, 16, 64, 55, 55);
        let unmeasured = choose(&squeeze, &direct(&squeeze), Some(&r), AlgorithmPolicy::Auto);
        assert_eq!(unmeasured.algorithm, ConvAlgorithm::Direct);
        assert!(
            unmeasured.reason.contains("input channels"),
            "{}",
            unmeasured.reason
        );
        assert!(has_winograd_candidate(&squeeze));
        let c = decide(&squeeze, times(1.55e-3, 1.38e-3, 1.17e-3));
        assert_eq!(c.algorithm, ConvAlgorithm::WinogradF4, "{}", c.reason);
        let c = decide(&squeeze, times(1.0e-3, 1.4e-3, 1.2e-3));
        assert_eq!(c.algorithm, ConvAlgorithm::Direct, "{}", c.reason);
        assert!(c.reason.starts_with("measured here"), "{}", c.reason);
        let mut table = MeasuredAlgorithms::default();
        table
            .entries
            .insert(MeasuredAlgorithms::key(&s, 2), times(1.0, 2.0, 3.0));
        assert!(table.get(&s, 2).is_some());
        assert!(table.get(&s, 1).is_none());
        assert!(table.get(&shape(64, 28), 2).is_none());
    }

    /// A CPU core: 100 GFLOP/s, 20 GB/s.
    fn roof() -> Roof {
        Roof {
            peak_flops: 100e9,
            bandwidth_bytes_per_s: 20e9,
            launch_overhead_s: 0.0,
            vector_peak_flops: 100e9,
            write_bandwidth_bytes_per_s: 0.0,
            caches: [None; 3],
            weights_level: None,
            cycled_bytes: 0,
            curves: None,
        }
    }

    #[test]
    fn f4_cost_by_hand() {
        // 64 channels at 56²: 14² = 196 tiles of 4×4; GEMM MACs 36·64·64·196 = 28,901,376
        // (direct: 9·56²·64·64 = 115,605,504, 4× more).
        let s = shape(64, 56);
        let d = direct(&s);
        let w = algorithm_cost(&s, ConvAlgorithm::WinogradF4, &d);
        assert_eq!(w.macs, 28_901_376);
        assert_eq!(d.macs / w.macs, 4);
        // Weights: 36·64·64·4 = 589,824 bytes (direct 9·64·64·4 = 147,456).
        assert_eq!(w.bytes.weights_read, 589_824);
        // V + M: 36·(64 + 64)·196·4 = 3,612,672 bytes, written and read.
        assert_eq!(w.bytes.act_read - d.bytes.act_read, 3_612_672);
        assert_eq!(w.bytes.act_written - d.bytes.act_written, 3_612_672);
        // Transforms: 196·(64·4·216 + 64·2·6·(24 + 16)) = 196·(55,296 + 30,720).
        assert_eq!(w.vector_flops, 196 * (55_296 + 30_720));
        assert_eq!(w.flops, 2 * w.macs + w.vector_flops);
    }

    #[test]
    fn large_planes_take_f4_small_ones_f2_or_direct() {
        let r = roof();
        let choice = |c, side| {
            let s = shape(c, side);
            choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto).algorithm
        };
        assert_eq!(choice(64, 56), ConvAlgorithm::WinogradF4);
        assert_eq!(choice(128, 28), ConvAlgorithm::WinogradF4);
        // 14²: F(4×4) has 16 tiles (rule 2), F(2×2) 49.
        assert_eq!(choice(256, 14), ConvAlgorithm::WinogradF2);
        // 7²: 16 and 4 tiles.
        assert_eq!(choice(512, 7), ConvAlgorithm::Direct);
        // SqueezeNet's expands: the bound promises 2-3x, the transforms take it back.
        let mut s = shape(16, 55);
        s.out_channels = 64;
        let c = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto);
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        assert!(c.reason.contains("input channels"), "{}", c.reason);
        assert_eq!(choice(48, 56), ConvAlgorithm::Direct);
    }

    #[test]
    fn other_geometries_and_policy_stay_direct() {
        let r = roof();
        let mut s = shape(64, 56);
        s.strides = (2, 2);
        let c = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto);
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        assert_eq!(c.chosen_s, c.direct_s);
        let s = shape(64, 56);
        let c = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::DirectOnly);
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
    }

    #[test]
    fn a_forced_algorithm_runs_where_the_shape_takes_it() {
        let r = roof();
        // 16 input channels: rule 2 would keep it direct; the calibration grid forces F(4×4).
        let s = ConvShape::three_by_three(1, 16, 16, 56, 56);
        let forced = AlgorithmPolicy::Only(ConvAlgorithm::WinogradF4);
        let c = choose(&s, &direct(&s), Some(&r), forced);
        assert_eq!(c.algorithm, ConvAlgorithm::WinogradF4);
        assert!(c.chosen_s < c.direct_s, "{c:?}");
        let c = choose(
            &shape(64, 56),
            &direct(&shape(64, 56)),
            Some(&r),
            AlgorithmPolicy::Only(ConvAlgorithm::Direct),
        );
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
        // Not a 3×3 stride-1 convolution: direct whatever is forced.
        let mut strided = shape(64, 56);
        strided.strides = (2, 2);
        let c = choose(&strided, &direct(&strided), Some(&r), forced);
        assert_eq!(c.algorithm, ConvAlgorithm::Direct);
    }

    #[test]
    fn memory_bound_device_keeps_direct() {
        // At 1 GB/s the transformed weights and V/M traffic cost more than the multiplies save.
        let mut r = roof();
        r.bandwidth_bytes_per_s = 1e9;
        let s = shape(256, 14);
        let c = choose(&s, &direct(&s), Some(&r), AlgorithmPolicy::Auto);
        assert_eq!(c.algorithm, ConvAlgorithm::Direct, "{c:?}");
    }
}
