//! The analysis result: per-node costs and estimates, totals and diagnostics. This is the serde
//! model every report format renders (schema documented in README.md; bump
//! `ANALYSIS_SCHEMA_VERSION` when a field changes meaning or disappears).

use serde::{Deserialize, Serialize};

use super::infer::Diagnostic;
use super::roofline::{Bound, Roof};
use crate::device::calibration::{
    algorithm_op_type, arithmetic_chain_op_type, depthwise_op_type, precision_op_type, KernelClass,
    ShapeFeatures,
};
use crate::device::{DeviceKind, Precision, ProfileSource};

pub const ANALYSIS_SCHEMA: &str = "roofline-analysis";
pub const ANALYSIS_SCHEMA_VERSION: u32 = 1;

/// What happened to one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Costed and estimated.
    Costed,
    /// Relabels a buffer; no kernel runs.
    View,
    /// Evaluated ahead of time from constants (weights generators, shape arithmetic).
    Folded,
    /// Could not be costed; `reason` says why. Counted in `summary.not_costed`.
    NotCosted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeAnalysis {
    /// Position in the topological order.
    pub index: usize,
    pub name: String,
    pub op_type: String,
    pub status: NodeStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub input_shapes: Vec<String>,
    pub output_shapes: Vec<String>,
    pub flops: u64,
    pub macs: u64,
    pub transcendental: u64,
    /// Weights + activations read.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub weights_bytes: u64,
    pub activation_bytes_read: u64,
    /// FLOP per byte; `null` when the op moves no bytes.
    pub intensity: Option<f64>,
    pub bound: Bound,
    pub attainable_flops: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    /// The roofline bound: the op's time at the ceilings (never above what a kernel can
    /// reach, so a lower bound on its measured time).
    pub predicted_s: f64,
    /// Share of the model's predicted latency.
    pub time_share: f64,
    /// Which calibration table the op is predicted from (`None`: views, shape arithmetic,
    /// quantized and other ops no table covers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_class: Option<KernelClass>,
    /// Expected time: the bound × the measured/bound ratio of the nearest calibration shapes
    /// of its class on this device (`roofline calibrate`); absent without a calibration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_s: Option<f64>,
    /// bound ÷ expected: the share of its roof the op is expected to reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// Time another runtime took for this node: the median over the runs of a profile joined
    /// with `analyze --measured` (see `analysis::measured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_s: Option<f64>,
    /// bound ÷ measured: the share of its roof the op reached in that runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_efficiency: Option<f64>,
    /// For convolutions the CPU executor could run another way: the algorithm the roofline
    /// chose and both bounds (see `analysis::algorithm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<super::algorithm::AlgorithmChoice>,
    /// Work of the algorithm that runs when it differs from the op's arithmetic (`flops`):
    /// a Winograd convolution's GEMMs and transforms. The bound is computed from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_flops: Option<u64>,
    /// The precision the op's own kernel computes at when it is not fp32 (an int8 or bf16
    /// convolution of a quantized graph), whatever precision the analysis was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_precision: Option<Precision>,
    /// Time added to the expected time for reading input that another core's caches hold: on
    /// several threads, an op that splits differently from the op that wrote its input
    /// (`analysis::handoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_s: Option<f64>,
    /// The features the calibration lookup matched on (in memory only).
    #[serde(skip)]
    pub features: Option<ShapeFeatures>,
}

/// The ONNX op whose kernel a fused op runs: the tool's (and onnxruntime's) `FusedConv`,
/// `FusedGemm` and `FusedMatMul` are that op with its epilogue applied in registers. The
/// calibration grid times plain ops, so a fused op keyed by its own name matched no point of
/// its type: an optimised graph's Winograd convolutions were then predicted from both
/// variants' points (VGG-16's F(4×4) layers at 2.4× their bound where their own variant's
/// points say 2.8×, the plain graph's figure), and its depthwise ones from every kernel size.
pub fn kernel_op_type(op_type: &str) -> &str {
    match op_type {
        // The low-precision forms of a convolution or a matrix product run that op's packed
        // GEMM on other operand types; their precision joins the key
        // (`NodeAnalysis::calibration_op_type`).
        "QConv" | "HalfConv" => "Conv",
        "QMatMul" | "HalfMatMul" => "MatMul",
        _ => super::ops::fused::base_of(op_type).unwrap_or(op_type),
    }
}

impl NodeAnalysis {
    /// The record of an op before it is costed: its place and name, nothing measured.
    pub fn new(index: usize, name: &str, op_type: &str) -> NodeAnalysis {
        NodeAnalysis {
            index,
            name: name.to_string(),
            op_type: op_type.to_string(),
            status: NodeStatus::Costed,
            reason: None,
            input_shapes: Vec::new(),
            output_shapes: Vec::new(),
            flops: 0,
            macs: 0,
            transcendental: 0,
            bytes_read: 0,
            bytes_written: 0,
            weights_bytes: 0,
            activation_bytes_read: 0,
            intensity: None,
            bound: super::roofline::Bound::None,
            attainable_flops: 0.0,
            compute_s: 0.0,
            memory_s: 0.0,
            predicted_s: 0.0,
            time_share: 0.0,
            kernel_class: None,
            expected_s: None,
            efficiency: None,
            measured_s: None,
            measured_efficiency: None,
            algorithm: None,
            executed_flops: None,
            compute_precision: None,
            handoff_s: None,
            features: None,
        }
    }

    /// The algorithm a convolution runs as, when it is not the direct one.
    pub fn winograd(&self) -> Option<super::algorithm::ConvAlgorithm> {
        self.algorithm
            .as_ref()
            .map(|c| c.algorithm)
            .filter(|&a| a != super::algorithm::ConvAlgorithm::Direct)
    }

    /// The op type its calibration points are saved and looked up under: the op whose kernel
    /// it runs (a fused op's: [`kernel_op_type`]), with the Winograd variant when it runs as
    /// one (see [`algorithm_op_type`]) or a depthwise convolution's kernel size (see
    /// [`depthwise_op_type`]).
    pub fn calibration_op_type(&self) -> String {
        let base = kernel_op_type(&self.op_type);
        let keyed;
        // DynamicQuantizeLinear computes in float but belongs to the int8 kernels' points: keyed
        // so, no fp32 element-wise op without points of its own type is predicted from its
        // range pass (12-28× its bound).
        let precision = match self.compute_precision {
            Some(precision) if precision != Precision::Fp32 => Some(precision.name()),
            _ if base == "DynamicQuantizeLinear" => Some(Precision::Int8.name()),
            _ => None,
        };
        let op_type = match precision {
            Some(precision) => {
                keyed = precision_op_type(base, precision);
                keyed.as_str()
            }
            None => base,
        };
        if let Some(algorithm) = self.winograd() {
            return algorithm_op_type(op_type, algorithm.name());
        }
        if self.kernel_class == Some(KernelClass::Depthwise) {
            if let Some((kernel_h, kernel_w)) = self.kernel_size() {
                return depthwise_op_type(op_type, kernel_h, kernel_w);
            }
        }
        if op_type == "ElementwiseChain" && self.transcendental == 0 {
            return arithmetic_chain_op_type(op_type);
        }
        op_type.to_string()
    }

    /// A 2-D convolution's kernel size, from its weight shape (`[out, in/group, kh, kw]`).
    fn kernel_size(&self) -> Option<(u64, u64)> {
        let dims: Vec<u64> = self
            .input_shapes
            .get(1)?
            .split('x')
            .map(|d| d.parse().ok())
            .collect::<Option<_>>()?;
        match dims[..] {
            [_, _, kernel_h, kernel_w] => Some((kernel_h, kernel_w)),
            _ => None,
        }
    }

    /// The op as reports name it: its type, and the algorithm when it is not the direct one.
    pub fn op_label(&self) -> String {
        match self.winograd() {
            Some(super::algorithm::ConvAlgorithm::WinogradF2) => {
                format!("{} [Winograd F2]", self.op_type)
            }
            Some(_) => format!("{} [Winograd F4]", self.op_type),
            None => self.op_type.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoInfo {
    pub name: String,
    pub dtype: String,
    pub shape: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// File path or `builtin:NAME`.
    pub source: String,
    pub graph_name: String,
    pub producer: String,
    pub ir_version: i64,
    pub opset: i64,
    pub node_count: usize,
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub id: String,
    pub name: String,
    pub kind: DeviceKind,
    pub source: ProfileSource,
    pub precision: Precision,
    pub roof: Roof,
    pub ridge_point: f64,
    /// Where the compute and bandwidth figures come from.
    pub compute_source: String,
    pub bandwidth_source: String,
    pub launch_overhead_source: String,
    /// Every compute ceiling of the device (all precisions, largest thread count), for charts.
    pub compute_ceilings: Vec<crate::device::ComputeCeiling>,
    /// Every memory ceiling (DRAM always; L1-L3 for probed CPUs), for charts.
    pub memory_ceilings: Vec<crate::device::MemoryCeiling>,
}

/// One op type's aggregate, for the time breakdown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTypeShare {
    pub op_type: String,
    pub count: usize,
    pub flops: u64,
    pub bytes: u64,
    pub predicted_s: f64,
    pub time_share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub flops: u64,
    pub macs: u64,
    pub transcendental: u64,
    /// Elements of the float constants read by the ops that run (weights and biases).
    pub params: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub weights_bytes: u64,
    /// Model FLOPs / model bytes.
    pub intensity: f64,
    /// Sum of the ops' roofline bounds.
    pub predicted_latency_s: f64,
    /// Sum of the ops' expected times, where the device has a calibration; ops it does not
    /// cover count at their bound (see `expected_coverage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_latency_s: Option<f64>,
    /// Share of the bound time whose ops have an expected time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_coverage: Option<f64>,
    /// Sum of the measured times of the nodes a runtime profile was joined to: not the
    /// end-to-end latency (the runtime's time between nodes and its nodes the model does not
    /// have are not in it; see `Analysis::measured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_total_s: Option<f64>,
    /// Shares of predicted time by bound.
    pub memory_bound_share: f64,
    pub compute_bound_share: f64,
    pub overhead_bound_share: f64,
    pub costed_nodes: usize,
    pub view_nodes: usize,
    pub folded_nodes: usize,
    pub not_costed: usize,
    /// Op types that could not be costed, with counts.
    pub not_costed_ops: Vec<(String, usize)>,
    /// Indices (into `nodes`) of the ten ops with the largest predicted time.
    pub hot_spots: Vec<usize>,
    pub by_op_type: Vec<OpTypeShare>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub schema: String,
    pub schema_version: u32,
    pub tool_version: String,
    pub model: ModelInfo,
    pub device: DeviceInfo,
    pub precision: Precision,
    pub nodes: Vec<NodeAnalysis>,
    pub summary: Summary,
    pub diagnostics: Vec<Diagnostic>,
    /// The runtime profile joined to the nodes (`analyze --measured`), when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredInfo>,
    /// The phase summary of an LLM analysis (`--phase`, `--weights`, `--kv`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<super::llm::LlmSummary>,
}

/// Names listed per kind of mismatch in [`MeasuredInfo`] (the counts are complete).
pub const MEASURED_NAMES_LISTED: usize = 10;

/// What a runtime profile held and how it joined onto the model's nodes. Runtimes rewrite the
/// graph before running it (onnxruntime folds BatchNormalization into the Conv before it,
/// fuses activations, names the nodes it creates), so mismatches are listed, not errors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredInfo {
    /// The profile file as given.
    pub source: String,
    /// The runtime that wrote it (`onnxruntime`).
    pub runtime: String,
    /// Its version, when the profile states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    /// Execution providers named by the profile's node events.
    pub providers: Vec<String>,
    /// Timed runs in the profile (each node's time is its median over them).
    pub runs: u32,
    /// The runtime's end-to-end time per run in the profile (median), its time between nodes
    /// and the profiler's bookkeeping included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_median_s: Option<f64>,
    /// Nodes of the profile.
    pub profile_nodes: usize,
    /// Profile nodes joined to a model node of the same name.
    pub matched_nodes: usize,
    /// Profile nodes with no model node of that name (nodes the runtime created or renamed).
    pub unmatched_profile_nodes: usize,
    /// Their first names, in profile order.
    pub unmatched_profile_names: Vec<String>,
    /// Their summed measured time.
    pub unmatched_profile_s: f64,
    /// Model nodes that run (costed or not costed; views and folded constants aside) and have
    /// no measurement: fused into a neighbour or removed by the runtime.
    pub unmeasured_model_nodes: usize,
    /// Their first names, in topological order.
    pub unmeasured_model_names: Vec<String>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn depthwise_convolutions_are_calibrated_under_their_kernel_size() {
        let analysis = crate::builtin::analyze_on_catalog(
            "builtin:mobilenetv2",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        );
        let types = |class| {
            analysis
                .nodes
                .iter()
                .filter(|n| n.kernel_class == Some(class))
                .map(|n| n.calibration_op_type())
                .collect::<std::collections::BTreeSet<_>>()
        };
        use crate::device::calibration::KernelClass;
        assert_eq!(
            types(KernelClass::Depthwise)
                .into_iter()
                .collect::<Vec<_>>(),
            ["Conv depthwise 3x3"]
        );
        assert_eq!(
            types(KernelClass::Pointwise)
                .into_iter()
                .collect::<Vec<_>>(),
            ["Conv"]
        );
        // The advisor's fused convolutions run the same kernels as the plain ones, so their
        // points are the plain ones' (the grid times plain ops).
        for node in &analysis.nodes {
            let mut fused = node.clone();
            fused.op_type = match node.op_type.as_str() {
                "Conv" => "FusedConv",
                "Gemm" => "FusedGemm",
                "MatMul" => "FusedMatMul",
                _ => continue,
            }
            .to_string();
            assert_eq!(fused.calibration_op_type(), node.calibration_op_type());
        }
    }

    #[test]
    fn chains_without_transcendentals_have_their_own_calibration_points() {
        let analysis = crate::builtin::analyze_on_catalog(
            "builtin:tinycnn",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        );
        let mut chain = analysis.nodes[0].clone();
        chain.op_type = "ElementwiseChain".into();
        chain.kernel_class = Some(crate::device::calibration::KernelClass::Elementwise);
        chain.algorithm = None;
        chain.transcendental = 0;
        assert_eq!(chain.calibration_op_type(), "ElementwiseChain arithmetic");
        chain.transcendental = 1000;
        assert_eq!(chain.calibration_op_type(), "ElementwiseChain");
    }
}
