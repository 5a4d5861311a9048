//! A grid point: its model (built on first use), kernel class, shape in words and how it is
//! timed.

use super::FLOAT;
use crate::analysis::algorithm::AlgorithmPolicy;
use crate::analysis::onnx_proto::ModelProto;
use crate::builtin::builder::{GraphBuilder, SigDim, WeightFill};
use crate::device::calibration::KernelClass;
use crate::device::Precision;
use std::sync::Arc;

/// A point's model, built on first use and then kept (shared by a point and its cold twin):
/// the full grid's weights come to about 1.5 GB, most of it in a few GEMV points that
/// `--quick` never runs, and building them all up front took 1.2-3.8 s of a quick calibration
/// on a guest whose fresh memory is slow to fault in.
pub(super) struct LazyModel {
    build: Option<Box<dyn Fn() -> ModelProto + Send + Sync>>,
    pub(super) built: std::sync::OnceLock<ModelProto>,
}

/// One grid point: a model with one costed op.
#[derive(Clone)]
pub struct GridModel {
    pub class: KernelClass,
    /// The shape in words.
    pub shape: String,
    pub(super) model: Arc<LazyModel>,
    /// The convolution algorithms the point is run with (`Auto` but for the 3×3 stride-1
    /// convolutions timed once per algorithm).
    pub policy: AlgorithmPolicy,
    /// Timed with the caches evicted before every run and its weights charged at DRAM (see
    /// `grid::with_cold_weights`).
    pub cold_weights: bool,
    /// Whether `grid::with_cold_weights` adds the point's cold twin.
    pub(super) cold_twin: bool,
    /// Bytes of the GEMM points' weights as built, in fp32 (a low-precision point converts
    /// them after), 0 for the other points, whose weights are at most a few MB: `--quick`
    /// leaves out those over `QUICK_MAX_WEIGHTS_BYTES` (`QUICK_MAX_REWRITTEN_WEIGHTS_BYTES`
    /// for a point the advisor converts first).
    pub(super) weights_bytes: u64,
    /// Run the advisor's rewrites first, so a chain of element-wise ops is timed as the one
    /// fused node `bench --optimize` runs (`chain`).
    pub fuse_elementwise: bool,
    /// Converted by the advisor's pass of this precision (`int8`, `bf16`) before it is timed,
    /// every candidate op whatever its predicted gain: the low-precision kernels' points
    /// (`low_precision`).
    pub precision: Option<Precision>,
    /// Timed in the grid's first round only: the low-precision and dynamic-quantization points,
    /// which predict no fp32 op, so that the rounds that steady the fp32 tables still fit the
    /// time budget (with them in every round, a full calibration here went from two rounds
    /// over the grid to one).
    pub first_round_only: bool,
}

impl GridModel {
    /// The point's model (built now if it was not yet).
    pub fn model(&self) -> &ModelProto {
        let lazy = &self.model;
        lazy.built.get_or_init(|| {
            let build = lazy
                .build
                .as_ref()
                .expect("a model is either built or buildable");
            build()
        })
    }

    /// Whether the point is a fp32 GEMV (no cold twin: it streams its weights once per run)
    /// whose weights outgrow `cache_bytes`, the largest cache. Such a point is timed and
    /// charged as a cold twin is, weights at DRAM. Charged warm instead, at the probe's read
    /// curve at its own working set (64 MiB, twice this Zen 4's L3), its bound had read 34.7
    /// GB/s where the kernel streamed at 26.6, the DRAM rate, and a model past the caches (VGG,
    /// 528 MB of weights, charged at DRAM) was expected 31% over on its classifier GEMVs.
    pub fn streams_weights_past(&self, cache_bytes: Option<u64>) -> bool {
        let Some(cache_bytes) = cache_bytes else {
            return false;
        };
        !self.cold_twin && self.precision.is_none() && self.weights_bytes > cache_bytes
    }

    /// Whether the point runs through the advisor before it is timed.
    pub fn rewritten(&self) -> bool {
        self.fuse_elementwise || self.precision.is_some()
    }
}

pub(super) fn one_op(
    class: KernelClass,
    shape: String,
    inputs: &[&[i64]],
    output: &[i64],
    build: impl Fn(&mut GraphBuilder, &[String]) -> String + Send + Sync + 'static,
) -> GridModel {
    let inputs: Vec<Vec<i64>> = inputs.iter().map(|dims| dims.to_vec()).collect();
    let output = output.to_vec();
    GridModel::lazy(class, shape, move || {
        let mut b = GraphBuilder::new(WeightFill::Random(7));
        let names: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(i, dims)| b.input(&format!("x{i}"), FLOAT, &SigDim::fixed_all(dims)))
            .collect();
        let y = build(&mut b, &names);
        b.output(&y, FLOAT, &SigDim::fixed_all(&output));
        b.finish("calibration")
    })
}

impl GridModel {
    /// A point of `class` run as the planner chooses, weights warm, with a cold twin where its
    /// class reads weights, unfused: its model built already.
    pub(super) fn new(class: KernelClass, shape: String, model: ModelProto) -> GridModel {
        let lazy = LazyModel {
            build: None,
            built: std::sync::OnceLock::from(model),
        };
        GridModel::with_model(class, shape, lazy)
    }

    /// [`GridModel::new`] with the model built by `build` when first asked for.
    pub(super) fn lazy(
        class: KernelClass,
        shape: String,
        build: impl Fn() -> ModelProto + Send + Sync + 'static,
    ) -> GridModel {
        let lazy = LazyModel {
            build: Some(Box::new(build)),
            built: std::sync::OnceLock::new(),
        };
        GridModel::with_model(class, shape, lazy)
    }

    fn with_model(class: KernelClass, shape: String, model: LazyModel) -> GridModel {
        GridModel {
            class,
            shape,
            model: Arc::new(model),
            policy: AlgorithmPolicy::Auto,
            cold_weights: false,
            cold_twin: true,
            weights_bytes: 0,
            fuse_elementwise: false,
            precision: None,
            first_round_only: false,
        }
    }
}
