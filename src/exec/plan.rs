//! Plan building (ONNX node → kernel call, static buffer assignment) and execution.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::{ExecError, RtData, RtTensor};
use crate::analysis::graph::{Graph, NodeId, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::ops::{self, spatial, InferCtx, OpNode};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::kernels::conv::{self, Conv2d, ConvEpilogue};
use crate::kernels::elementwise::{self, Binary, Unary};
use crate::kernels::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use crate::kernels::movement::{self, CoordMode, NearestMode, PadMode, Reduction};
use crate::kernels::{norm, pool};

/// Options of plan building.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub threads: usize,
    /// Refuse plans whose buffers and materialised weights exceed this many bytes.
    pub memory_limit_bytes: u64,
    /// Where `memory_limit_bytes` comes from, for the refusal message.
    pub memory_limit_source: String,
    /// GEMM blockings per shape (autotuned choices); `None`: the defaults.
    pub tuning: Option<std::sync::Arc<std::sync::Mutex<super::tune::TuningCache>>>,
    /// Tune shapes missing from `tuning` while planning.
    pub tune: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        let (memory_limit_bytes, source) = super::sysmem::plan_memory_limit();
        PlanOptions {
            threads: 1,
            memory_limit_bytes,
            memory_limit_source: format!("80% of {source}"),
            tuning: None,
            tune: false,
        }
    }
}

/// Which analysis node a step runs (its index in the topological order matches
/// `NodeAnalysis::index`, so measured times join predicted ones).
#[derive(Clone, Debug, PartialEq)]
pub struct StepInfo {
    pub node_index: usize,
    pub name: String,
    pub op_type: String,
    /// FLOPs of the kernel call, for GFLOP/s reports.
    pub flops: u64,
}

#[derive(Clone, Debug)]
enum Slot {
    Const(Arc<RtTensor>),
    /// f32 activation in a planned buffer.
    Buffer {
        buffer: usize,
        shape: Vec<usize>,
    },
    /// Integer/bool run-time value, kept in a map.
    Dynamic {
        shape: Vec<usize>,
    },
    Unused,
}

#[derive(Clone, Debug)]
enum Kernel {
    Conv {
        geom: Conv2d,
        weights: Arc<Vec<f32>>,
        bias: Option<Arc<Vec<f32>>>,
        activation: Activation,
        residual: bool,
        config: gemm::GemmConfig,
        /// The weights packed for `config` once at plan time (not for depthwise).
        packed: Option<Arc<conv::PackedConvWeights>>,
    },
    /// A fused element-wise chain; per-channel constants index axis 1.
    Chain {
        steps: Vec<elementwise::ChainStep>,
        channels: usize,
        channel_size: usize,
    },
    ConvTranspose {
        geom: Conv2d,
        weights: Arc<Vec<f32>>,
        bias: Option<Arc<Vec<f32>>>,
    },
    /// Batched matmul: A [batch, m, k] (strides), B [batch, k, n], C = A·B (+ bias per column).
    MatMul(MatMulSpec),
    Unary(Unary),
    Binary {
        op: Binary,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
        out_shape: Vec<usize>,
    },
    Variadic {
        op: Binary,
        mean: bool,
        shapes: Vec<Vec<usize>>,
        out_shape: Vec<usize>,
    },
    Where {
        shapes: [Vec<usize>; 3],
        out_shape: Vec<usize>,
    },
    ScaleShift {
        channels: usize,
        plane: usize,
        scale: Vec<f32>,
        shift: Vec<f32>,
    },
    LayerNorm {
        row_len: usize,
        eps: f32,
    },
    InstanceNorm {
        channels: usize,
        plane: usize,
        eps: f32,
    },
    Lrn {
        batch: usize,
        channels: usize,
        plane: usize,
        size: usize,
        alpha: f32,
        beta: f32,
        bias: f32,
    },
    Softmax {
        outer: usize,
        axis_len: usize,
        inner: usize,
        log: bool,
    },
    MaxPool(pool::Pool2d),
    AvgPool {
        geom: pool::Pool2d,
        include_pad: bool,
        pad_bottom: usize,
        pad_right: usize,
    },
    GlobalPool {
        plane: usize,
        max: bool,
    },
    Transpose {
        shape: Vec<usize>,
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
        shapes: Vec<Vec<usize>>,
    },
    Split {
        axis: usize,
        shape: Vec<usize>,
        sizes: Vec<usize>,
    },
    Slice {
        shape: Vec<usize>,
        starts: Vec<isize>,
        steps: Vec<isize>,
        out_shape: Vec<usize>,
    },
    Gather {
        shape: Vec<usize>,
        axis: usize,
    },
    Expand {
        shape: Vec<usize>,
        out_shape: Vec<usize>,
    },
    Pad {
        shape: Vec<usize>,
        begin: Vec<usize>,
        out_shape: Vec<usize>,
        mode: PadMode,
        value: f32,
    },
    Resize {
        planes: usize,
        input: (usize, usize),
        output: (usize, usize),
        scales: (f32, f32),
        linear: bool,
        coord: CoordMode,
        nearest: NearestMode,
    },
    Reduce {
        shape: Vec<usize>,
        axes: Vec<usize>,
        kind: Reduction,
    },
    ArgMax {
        shape: Vec<usize>,
        axis: usize,
        min: bool,
    },
    /// Output aliases the input buffer (Reshape, Flatten, Squeeze, Unsqueeze, Identity...).
    View,
    /// f32 ↔ integer conversion, or a copy.
    Cast {
        to_float: bool,
    },
    /// Integer/bool ops evaluated through the analysis op's constant evaluator.
    Generic,
    /// Quantized / half-precision ops and (De)QuantizeLinear (`exec::quant`).
    Quant(Arc<super::quant::QuantStep>),
}

#[derive(Clone, Debug)]
struct MatMulSpec {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    /// Offsets of each batch's A and B (broadcast batches repeat offsets).
    a_offsets: Vec<usize>,
    b_offsets: Vec<usize>,
    a_row_stride: usize,
    a_col_stride: usize,
    b_row_stride: usize,
    b_col_stride: usize,
    alpha: f32,
    /// Gemm's C: per-column bias, per-row bias, or a full [m, n] tensor (input position 2).
    c: GemmC,
    beta: f32,
    activation: Activation,
    config: gemm::GemmConfig,
}

#[derive(Clone, Debug, PartialEq)]
enum GemmC {
    None,
    PerCol,
    PerRow,
    Full,
    Scalar,
}

#[derive(Clone, Debug)]
struct Step {
    info: StepInfo,
    kernel: Kernel,
    inputs: Vec<Option<ValueId>>,
    outputs: Vec<ValueId>,
    node: NodeId,
    scratch: usize,
}

/// A compiled model: kernel calls in order, with planned buffers.
pub struct Plan {
    steps: Vec<Step>,
    slots: Vec<Slot>,
    buffer_sizes: Vec<usize>,
    scratch_len: usize,
    inputs: Vec<(ValueId, String, Vec<usize>, bool)>,
    outputs: Vec<(ValueId, String)>,
    threads: usize,
    /// Bytes of all activation buffers (the peak: buffers are reused when lifetimes allow).
    pub peak_activation_bytes: u64,
    /// Bytes the activations would take without reuse.
    pub unplanned_activation_bytes: u64,
    /// Constants as f32, plus the GEMM-packed copies of convolution weights.
    pub weights_bytes: u64,
    graph_names: Vec<String>,
    /// Generic steps need the graph's node attributes.
    generic_nodes: HashMap<NodeId, crate::analysis::graph::Node>,
    opset: i64,
}

/// Reusable run-time memory for a plan.
pub struct Workspace {
    buffers: Vec<Vec<f32>>,
    dynamic: HashMap<ValueId, RtTensor>,
    scratch: Vec<f32>,
}

fn node_error(node: &crate::analysis::graph::Node, reason: impl Into<String>) -> ExecError {
    ExecError::Node {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        reason: reason.into(),
    }
}

fn dims(fact: &TensorFact) -> Option<Vec<usize>> {
    fact.concrete_shape()
        .map(|d| d.iter().map(|&v| v as usize).collect())
}

/// Converts a constant to a run-time tensor (materialising raw or splat payloads).
fn materialise(tensor: &Tensor) -> Option<RtTensor> {
    let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
    let count: usize = shape.iter().product();
    let data = if tensor.dtype.is_float() {
        match &tensor.data {
            TensorData::Splat(v) => RtData::F32(vec![*v as f32; count]),
            TensorData::Opaque => return None,
            _ => RtData::F32(tensor.to_f32_vec()?),
        }
    } else {
        match &tensor.data {
            TensorData::Splat(v) => RtData::I64(vec![*v as i64; count]),
            TensorData::Opaque => return None,
            _ => RtData::I64(tensor.to_i64_vec()?),
        }
    };
    Some(RtTensor { shape, data })
}

fn to_analysis_tensor(t: &RtTensor, dtype: DType) -> Tensor {
    let shape = t.shape.iter().map(|&d| d as u64).collect();
    match &t.data {
        RtData::F32(v) => Tensor {
            dtype,
            shape,
            data: TensorData::F64(v.iter().map(|&x| x as f64).collect()),
        },
        RtData::I64(v) => Tensor {
            dtype,
            shape,
            data: TensorData::I64(v.clone()),
        },
    }
}

/// Ops the executor knows (a model containing any other op fails before running).
pub fn supported(op_type: &str) -> bool {
    matches!(
        op_type,
        "Conv"
            | "ConvTranspose"
            | "Gemm"
            | "MatMul"
            | "BatchNormalization"
            | "LayerNormalization"
            | "InstanceNormalization"
            | "LRN"
            | "Softmax"
            | "LogSoftmax"
            | "MaxPool"
            | "AveragePool"
            | "GlobalAveragePool"
            | "GlobalMaxPool"
            | "Transpose"
            | "Concat"
            | "Split"
            | "Slice"
            | "Gather"
            | "Expand"
            | "Tile"
            | "Pad"
            | "Resize"
            | "Upsample"
            | "ReduceMean"
            | "ReduceSum"
            | "ReduceMax"
            | "ReduceMin"
            | "ReduceProd"
            | "ReduceSumSquare"
            | "ReduceL1"
            | "ReduceL2"
            | "ReduceLogSumExp"
            | "ArgMax"
            | "ArgMin"
            | "Reshape"
            | "Flatten"
            | "Squeeze"
            | "Unsqueeze"
            | "Identity"
            | "Dropout"
            | "Cast"
            | "Where"
            | "Sum"
            | "Mean"
            | "Max"
            | "Min"
            | "Add"
            | "Sub"
            | "Mul"
            | "Div"
            | "Pow"
            | "PRelu"
            | "Mod"
            | "Shape"
            | "Size"
            | "Constant"
            | "ConstantOfShape"
            | "Range"
            | "Equal"
            | "Less"
            | "Greater"
            | "LessOrEqual"
            | "GreaterOrEqual"
            | "And"
            | "Or"
            | "Not"
            | "Xor"
    ) || unary_of(op_type, &Default::default(), &[]).is_some()
        || super::quant::handles("", op_type)
}

fn unary_of(
    op_type: &str,
    attrs: &crate::analysis::graph::Attributes,
    consts: &[Option<f32>],
) -> Option<Unary> {
    Some(match op_type {
        "Relu" => Unary::Relu,
        "LeakyRelu" => Unary::LeakyRelu(attrs.float_or("alpha", 0.01)),
        "Sigmoid" => Unary::Sigmoid,
        "HardSigmoid" => {
            Unary::HardSigmoid(attrs.float_or("alpha", 0.2), attrs.float_or("beta", 0.5))
        }
        "HardSwish" => Unary::HardSwish,
        "Tanh" => Unary::Tanh,
        "Gelu" => Unary::Gelu,
        "Erf" => Unary::Erf,
        "Softplus" => Unary::Softplus,
        "Softsign" => Unary::Softsign,
        "Sqrt" => Unary::Sqrt,
        "Exp" => Unary::Exp,
        "Log" => Unary::Log,
        "Neg" => Unary::Neg,
        "Abs" => Unary::Abs,
        "Reciprocal" => Unary::Reciprocal,
        "Floor" => Unary::Floor,
        "Ceil" => Unary::Ceil,
        "Round" => Unary::Round,
        "Sign" => Unary::Sign,
        "Elu" => Unary::Elu(attrs.float_or("alpha", 1.0)),
        "Selu" => Unary::Selu(
            attrs.float_or("alpha", 1.673_263_2),
            attrs.float_or("gamma", 1.050_701),
        ),
        "Mish" => Unary::Mish,
        "Sin" => Unary::Sin,
        "Cos" => Unary::Cos,
        "Clip" => {
            let lo = attrs
                .float("min")
                .or(consts.get(1).copied().flatten())
                .unwrap_or(f32::NEG_INFINITY);
            let hi = attrs
                .float("max")
                .or(consts.get(2).copied().flatten())
                .unwrap_or(f32::INFINITY);
            Unary::Clip(lo, hi)
        }
        _ => return None,
    })
}

fn binary_of(op_type: &str) -> Option<Binary> {
    Some(match op_type {
        "Add" | "Sum" => Binary::Add,
        "Sub" => Binary::Sub,
        "Mul" => Binary::Mul,
        "Div" => Binary::Div,
        "Pow" => Binary::Pow,
        "Max" => Binary::Max,
        "Min" => Binary::Min,
        "PRelu" => Binary::PRelu,
        "Mod" => Binary::Mod,
        "Mean" => Binary::Add,
        _ => return None,
    })
}

/// Builds the plan. `states` come from `analysis::prepare_graph`; every shape must be known.
pub fn build_plan(
    graph: &Graph,
    order: &[NodeId],
    states: &HashMap<NodeId, NodeState>,
    options: &PlanOptions,
) -> Result<Plan, ExecError> {
    let missing: Vec<String> = {
        let mut names: Vec<String> = order
            .iter()
            .map(|&id| (id, &graph.dag[id]))
            .filter(|(_, n)| {
                if n.domain == crate::analysis::ops::fused::DOMAIN {
                    !matches!(
                        n.op_type.as_str(),
                        "FusedConv" | "FusedGemm" | "FusedMatMul" | "ElementwiseChain"
                    ) && !super::quant::handles(&n.domain, &n.op_type)
                } else {
                    !supported(&n.op_type) || !(n.domain.is_empty() || n.domain == "ai.onnx")
                }
            })
            .filter(|(id, _)| !matches!(states.get(id), Some(NodeState::Folded)))
            .map(|(_, n)| n.op_type.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    };
    if !missing.is_empty() {
        return Err(ExecError::MissingKernels(missing));
    }
    let threads = options.threads.max(1);
    let mut gemm_config = |m: usize, n: usize, k: usize| -> gemm::GemmConfig {
        match &options.tuning {
            Some(cache) => match cache.lock() {
                Ok(mut cache) => cache.config(m, n, k, threads, options.tune),
                Err(_) => gemm::GemmConfig::default(),
            },
            None => gemm::GemmConfig::default(),
        }
    };
    let mut slots: Vec<Slot> = vec![Slot::Unused; graph.values.len()];
    let mut weights_bytes = 0u64;
    let mut const_cache: HashMap<ValueId, Arc<RtTensor>> = HashMap::new();
    // Constants (initializers, folded values) are materialised lazily when a step reads them.
    let mut steps = Vec::new();
    for (index, &id) in order.iter().enumerate() {
        let node = &graph.dag[id];
        let state = states.get(&id).cloned().unwrap_or(NodeState::Inferred);
        if let NodeState::Failed(reason) = &state {
            return Err(node_error(
                node,
                format!("shape inference failed: {reason}"),
            ));
        }
        let input_facts: Vec<Option<&TensorFact>> = node
            .inputs
            .iter()
            .map(|s| s.map(|v| &graph.values[v].fact))
            .collect();
        let folded = matches!(state, NodeState::Folded);
        let opaque_outputs = node.outputs.iter().any(|&v| {
            matches!(
                graph.values[v].fact.konst.as_deref().map(|t| &t.data),
                Some(TensorData::Opaque)
            )
        });
        if folded && !opaque_outputs {
            continue;
        }
        for slot in node.inputs.iter().flatten() {
            if let Some(konst) = &graph.values[*slot].fact.konst {
                if !const_cache.contains_key(slot) && !matches!(slots[*slot], Slot::Const(_)) {
                    if let Some(t) = materialise(konst) {
                        weights_bytes += (t.len() * 4) as u64;
                        let arc = Arc::new(t);
                        const_cache.insert(*slot, arc.clone());
                        slots[*slot] = Slot::Const(arc);
                    }
                }
            }
        }
        let step = make_step(graph, id, index, &input_facts, &slots, &mut gemm_config)?;
        if let Kernel::Conv {
            packed: Some(packed),
            ..
        } = &step.kernel
        {
            // The packed copy lives next to the constant it was packed from.
            weights_bytes += packed.bytes() as u64;
        }
        if folded {
            // An opaque constant (e.g. a transposed weight): run its kernel once now.
            let outputs = run_once(graph, &step, &slots, options.threads, graph.opset)?;
            for (&v, t) in node.outputs.iter().zip(outputs) {
                weights_bytes += (t.len() * 4) as u64;
                slots[v] = Slot::Const(Arc::new(t));
            }
            continue;
        }
        for &v in &node.outputs {
            let fact = &graph.values[v].fact;
            let shape = dims(fact).ok_or_else(|| {
                node_error(
                    node,
                    format!("output shape {} is not known", fact.shape_string()),
                )
            })?;
            slots[v] = if fact.dtype == DType::F32 {
                Slot::Buffer {
                    buffer: usize::MAX,
                    shape,
                }
            } else if fact.dtype.is_float() {
                return Err(node_error(
                    node,
                    format!(
                        "{} tensors are not supported by the executor (fp32 only)",
                        fact.dtype
                    ),
                ));
            } else {
                Slot::Dynamic { shape }
            };
        }
        steps.push(step);
    }
    // Graph inputs.
    let mut inputs = Vec::new();
    for &v in &graph.inputs {
        let fact = &graph.values[v].fact;
        let shape = dims(fact).ok_or_else(|| ExecError::Input {
            name: graph.values[v].name.clone(),
            reason: "shape not bound".into(),
        })?;
        let integer = !fact.dtype.is_float();
        if fact.dtype.is_float() && fact.dtype != DType::F32 {
            return Err(ExecError::Input {
                name: graph.values[v].name.clone(),
                reason: format!("{} inputs are not supported (fp32 only)", fact.dtype),
            });
        }
        slots[v] = if integer {
            Slot::Dynamic {
                shape: shape.clone(),
            }
        } else {
            Slot::Buffer {
                buffer: usize::MAX,
                shape: shape.clone(),
            }
        };
        inputs.push((v, graph.values[v].name.clone(), shape, integer));
    }
    let outputs: Vec<(ValueId, String)> = graph
        .outputs
        .iter()
        .map(|&v| (v, graph.values[v].name.clone()))
        .collect();
    let (buffer_sizes, unplanned) = assign_buffers(&steps, &mut slots, &inputs, &outputs);
    let peak_activation_bytes = buffer_sizes.iter().map(|&s| s as u64 * 4).sum::<u64>();
    let scratch_len = steps.iter().map(|s| s.scratch).max().unwrap_or(0);
    let total = peak_activation_bytes + weights_bytes + scratch_len as u64 * 4;
    if total > options.memory_limit_bytes {
        return Err(ExecError::TooLarge {
            bytes: total,
            limit: options.memory_limit_bytes,
            limit_source: options.memory_limit_source.clone(),
        });
    }
    let generic_nodes = steps
        .iter()
        .filter(|s| matches!(s.kernel, Kernel::Generic))
        .map(|s| (s.node, graph.dag[s.node].clone()))
        .collect();
    Ok(Plan {
        steps,
        slots,
        buffer_sizes,
        scratch_len,
        inputs,
        outputs,
        threads: options.threads.max(1),
        peak_activation_bytes,
        unplanned_activation_bytes: unplanned,
        weights_bytes,
        graph_names: graph.values.iter().map(|v| v.name.clone()).collect(),
        generic_nodes,
        opset: graph.opset,
    })
}

/// Greedy static assignment: each f32 value gets a buffer free at its definition; buffers are
/// released after the last reader. Views share their source's buffer and extend its life.
fn assign_buffers(
    steps: &[Step],
    slots: &mut [Slot],
    inputs: &[(ValueId, String, Vec<usize>, bool)],
    outputs: &[(ValueId, String)],
) -> (Vec<usize>, u64) {
    // Root of each view chain.
    let mut root: HashMap<ValueId, ValueId> = HashMap::new();
    for step in steps {
        if matches!(step.kernel, Kernel::View) {
            if let (Some(Some(src)), Some(&dst)) = (step.inputs.first(), step.outputs.first()) {
                let r = *root.get(src).unwrap_or(src);
                root.insert(dst, r);
            }
        }
    }
    let root_of = |v: ValueId| *root.get(&v).unwrap_or(&v);
    let mut last_use: HashMap<ValueId, usize> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        for v in step.inputs.iter().flatten() {
            last_use.insert(root_of(*v), i);
        }
    }
    for (v, _) in outputs {
        last_use.insert(root_of(*v), usize::MAX);
    }
    let mut sizes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut assigned: HashMap<ValueId, usize> = HashMap::new();
    let mut unplanned = 0u64;
    let allocate = |len: usize, sizes: &mut Vec<usize>, free: &mut Vec<usize>| -> usize {
        // Smallest free buffer that fits, else grow the largest free one, else a new one.
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, &b)| sizes[b] >= len)
            .min_by_key(|(_, &b)| sizes[b])
            .map(|(i, _)| i);
        let pick = fit.or_else(|| {
            free.iter()
                .enumerate()
                .max_by_key(|(_, &b)| sizes[b])
                .map(|(i, _)| i)
        });
        match pick {
            Some(i) => {
                let b = free.swap_remove(i);
                sizes[b] = sizes[b].max(len);
                b
            }
            None => {
                sizes.push(len);
                sizes.len() - 1
            }
        }
    };
    for (v, _, shape, integer) in inputs {
        if !integer {
            let len: usize = shape.iter().product();
            unplanned += len as u64 * 4;
            assigned.insert(*v, allocate(len, &mut sizes, &mut free));
        }
    }
    for (i, step) in steps.iter().enumerate() {
        for &v in &step.outputs {
            if let Slot::Buffer { shape, .. } = &slots[v] {
                let r = root_of(v);
                if r != v {
                    continue;
                }
                let len: usize = shape.iter().product();
                unplanned += len as u64 * 4;
                let b = allocate(len.max(1), &mut sizes, &mut free);
                assigned.insert(v, b);
            }
        }
        // Release values whose last reader is this step (and outputs nobody reads).
        let mut released: Vec<ValueId> =
            step.inputs.iter().flatten().map(|&v| root_of(v)).collect();
        released.extend(
            step.outputs
                .iter()
                .map(|&v| root_of(v))
                .filter(|r| !last_use.contains_key(r)),
        );
        released.sort_unstable();
        released.dedup();
        for r in released {
            let done = last_use.get(&r).is_none_or(|&last| last == i);
            if done {
                if let Some(&b) = assigned.get(&r) {
                    if !free.contains(&b) {
                        free.push(b);
                    }
                }
            }
        }
    }
    for (v, slot) in slots.iter_mut().enumerate() {
        if let Slot::Buffer { buffer, .. } = slot {
            if let Some(&b) = assigned.get(&root_of(v)) {
                *buffer = b;
            }
        }
    }
    (sizes, unplanned)
}

fn const_f32(slots: &[Slot], v: Option<ValueId>) -> Option<Arc<Vec<f32>>> {
    match v.map(|v| &slots[v]) {
        Some(Slot::Const(t)) => match &t.data {
            RtData::F32(d) => Some(Arc::new(d.clone())),
            RtData::I64(d) => Some(Arc::new(d.iter().map(|&x| x as f32).collect())),
        },
        _ => None,
    }
}

fn const_scalar(slots: &[Slot], v: Option<ValueId>) -> Option<f32> {
    const_f32(slots, v).and_then(|d| d.first().copied())
}

fn make_step(
    graph: &Graph,
    id: NodeId,
    index: usize,
    facts: &[Option<&TensorFact>],
    slots: &[Slot],
    gemm_config: &mut dyn FnMut(usize, usize, usize) -> gemm::GemmConfig,
) -> Result<Step, ExecError> {
    let node = &graph.dag[id];
    let attrs = &node.attrs;
    let shape_of = |i: usize| -> Result<Vec<usize>, ExecError> {
        facts
            .get(i)
            .copied()
            .flatten()
            .and_then(dims)
            .ok_or_else(|| node_error(node, format!("input #{i} shape unknown")))
    };
    let out_shape = |i: usize| -> Result<Vec<usize>, ExecError> {
        node.outputs
            .get(i)
            .and_then(|&v| dims(&graph.values[v].fact))
            .ok_or_else(|| node_error(node, "output shape unknown"))
    };
    let is_float = |i: usize| {
        facts
            .get(i)
            .copied()
            .flatten()
            .is_some_and(|f| f.dtype.is_float())
    };
    let all_float_io = node.inputs.iter().enumerate().all(|(i, s)| {
        s.is_none()
            || is_float(i)
            || node.op_type == "Gather" && i == 1
            || matches!(node.op_type.as_str(), "Where") && i == 0
    }) && node
        .outputs
        .iter()
        .all(|&v| graph.values[v].fact.dtype.is_float());
    let mut flops = 0u64;
    let mut scratch = 0usize;
    let op = node.op_type.as_str();
    let kernel = match op {
        // Quantized ops and (De)QuantizeLinear: `exec::quant`.
        _ if super::quant::handles(&node.domain, op) => {
            let out_facts: Vec<&TensorFact> = node
                .outputs
                .iter()
                .map(|&v| &graph.values[v].fact)
                .collect();
            let konst = |i: usize| const_f32(slots, node.inputs.get(i).copied().flatten());
            let (q, f) = super::quant::prepare(node, facts, &out_facts, &konst)
                .map_err(|e| node_error(node, e))?;
            flops = f;
            Kernel::Quant(Arc::new(q))
        }
        _ if !all_float_io
            && !matches!(
                op,
                "Cast"
                    | "Shape"
                    | "Size"
                    | "ArgMax"
                    | "ArgMin"
                    | "Reshape"
                    | "Flatten"
                    | "Squeeze"
                    | "Unsqueeze"
                    | "Identity"
                    | "Dropout"
            ) =>
        {
            Kernel::Generic
        }
        "ElementwiseChain" => {
            let x = out_shape(0)?;
            let steps = match attrs.get("steps") {
                Some(crate::analysis::graph::Attr::Strings(steps)) => steps.clone(),
                _ => return Err(node_error(node, "chain without steps")),
            };
            let mut parsed = Vec::with_capacity(steps.len());
            for step in &steps {
                parsed.push(parse_chain_step(step, node, slots).map_err(|e| node_error(node, e))?);
            }
            let channels = if x.len() >= 2 { x[1] } else { 1 };
            Kernel::Chain {
                steps: parsed,
                channels,
                channel_size: x.iter().skip(2).product(),
            }
        }
        "Conv" | "FusedConv" => {
            let geom =
                super::quant::conv_geometry(attrs, &shape_of(0)?, &shape_of(1)?, &out_shape(0)?)
                    .map_err(|e| node_error(node, e))?;
            let weights = const_f32(slots, node.inputs[1])
                .ok_or_else(|| node_error(node, "convolution weights must be constant"))?;
            let bias = match node.inputs.get(2).copied().flatten() {
                Some(b) => Some(
                    const_f32(slots, Some(b))
                        .ok_or_else(|| node_error(node, "bias must be constant"))?,
                ),
                None => None,
            };
            flops = geom.flops();
            scratch = geom.scratch_len();
            let (m, n, k) = geom.gemm_shape(gemm::GemmConfig::default().isa);
            let config = gemm_config(m, n, k);
            let packed = conv::PackedConvWeights::new(&config, &geom, &weights).map(Arc::new);
            Kernel::Conv {
                geom,
                weights,
                bias,
                activation: activation_attr(attrs),
                residual: node.inputs.get(3).copied().flatten().is_some(),
                config,
                packed,
            }
        }
        "ConvTranspose" => {
            let x = shape_of(0)?;
            let w = shape_of(1)?;
            let y = out_shape(0)?;
            if x.len() != 4 {
                return Err(node_error(
                    node,
                    "only 2-D transposed convolutions have kernels",
                ));
            }
            let group = attrs.int_or("group", 1).max(1) as usize;
            let ints = |name: &str, default: usize, n: usize| -> Vec<usize> {
                attrs
                    .ints(name)
                    .map(|v| v.iter().map(|&x| x.max(0) as usize).collect())
                    .unwrap_or(vec![default; n])
            };
            let strides = ints("strides", 1, 2);
            let dil = ints("dilations", 1, 2);
            let pads = ints("pads", 0, 4);
            let geom = Conv2d {
                batch: x[0],
                in_channels: x[1],
                in_h: x[2],
                in_w: x[3],
                out_channels: y[1],
                kernel_h: w[2],
                kernel_w: w[3],
                stride_h: strides[0],
                stride_w: strides[1],
                dilation_h: dil[0],
                dilation_w: dil[1],
                pad_top: pads[0],
                pad_left: pads[1],
                out_h: y[2],
                out_w: y[3],
                group,
            };
            let weights = const_f32(slots, node.inputs[1])
                .ok_or_else(|| node_error(node, "weights must be constant"))?;
            let bias = node
                .inputs
                .get(2)
                .copied()
                .flatten()
                .and_then(|b| const_f32(slots, Some(b)));
            flops = 2 * (x.iter().product::<usize>() * w[1] * w[2] * w[3]) as u64;
            scratch = w[1] * w[2] * w[3] * x[2] * x[3];
            Kernel::ConvTranspose {
                geom,
                weights,
                bias,
            }
        }
        "Gemm" | "FusedGemm" => {
            let a = shape_of(0)?;
            let b = shape_of(1)?;
            let trans_a = attrs.int_or("transA", 0) != 0;
            let trans_b = attrs.int_or("transB", 0) != 0;
            let (m, k) = if trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
            let n = if trans_b { b[0] } else { b[1] };
            let c = match node.inputs.get(2).copied().flatten() {
                None => GemmC::None,
                Some(_) => {
                    let cs = shape_of(2)?;
                    let count: usize = cs.iter().product();
                    if count == 1 {
                        GemmC::Scalar
                    } else if count == m * n && m > 1 || (count == n && m == 1) {
                        if count == n {
                            GemmC::PerCol
                        } else {
                            GemmC::Full
                        }
                    } else if count == n {
                        GemmC::PerCol
                    } else if count == m {
                        GemmC::PerRow
                    } else {
                        return Err(node_error(
                            node,
                            format!("C of shape {cs:?} does not broadcast to [{m}, {n}]"),
                        ));
                    }
                }
            };
            flops = 2 * (m * n * k) as u64;
            Kernel::MatMul(MatMulSpec {
                batch: 1,
                m,
                k,
                n,
                a_offsets: vec![0],
                b_offsets: vec![0],
                a_row_stride: if trans_a { 1 } else { a[1] },
                a_col_stride: if trans_a { a[1] } else { 1 },
                b_row_stride: if trans_b { 1 } else { b[1] },
                b_col_stride: if trans_b { b[1] } else { 1 },
                alpha: attrs.float_or("alpha", 1.0),
                c,
                beta: attrs.float_or("beta", 1.0),
                activation: activation_attr(attrs),
                config: gemm_config(m, n, k),
            })
        }
        "MatMul" | "FusedMatMul" => {
            let a = shape_of(0)?;
            let b = shape_of(1)?;
            let a2 = if a.len() == 1 {
                vec![1, a[0]]
            } else {
                a.clone()
            };
            let b2 = if b.len() == 1 {
                vec![b[0], 1]
            } else {
                b.clone()
            };
            let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
            let n = b2[b2.len() - 1];
            let a_batch = &a2[..a2.len() - 2];
            let b_batch = &b2[..b2.len() - 2];
            let rank = a_batch.len().max(b_batch.len());
            let out_batch: Vec<usize> = (0..rank)
                .map(|i| {
                    let da = if i + a_batch.len() >= rank {
                        a_batch[i + a_batch.len() - rank]
                    } else {
                        1
                    };
                    let db = if i + b_batch.len() >= rank {
                        b_batch[i + b_batch.len() - rank]
                    } else {
                        1
                    };
                    da.max(db)
                })
                .collect();
            let batch: usize = out_batch.iter().product();
            let offsets = |own: &[usize], matrix: usize| -> Vec<usize> {
                let padded: Vec<usize> = std::iter::repeat_n(1, rank - own.len())
                    .chain(own.iter().copied())
                    .collect();
                let strides = elementwise::broadcast_strides(&padded, &out_batch);
                (0..batch)
                    .map(|linear| {
                        let mut rest = linear;
                        let mut off = 0;
                        for axis in (0..rank).rev() {
                            let coord = rest % out_batch[axis];
                            rest /= out_batch[axis];
                            off += coord * strides[axis];
                        }
                        off * matrix
                    })
                    .collect()
            };
            // A constant 2-D B with a batched A: fold the batch into M (one big GEMM).
            let (batch, m, a_offsets, b_offsets) =
                if b.len() == 2 && batch > 1 && a_batch.iter().product::<usize>() == batch {
                    (1, m * batch, vec![0], vec![0])
                } else {
                    (batch, m, offsets(a_batch, m * k), offsets(b_batch, k * n))
                };
            flops = 2 * (batch * m * n * k) as u64;
            Kernel::MatMul(MatMulSpec {
                batch,
                m,
                k,
                n,
                a_offsets,
                b_offsets,
                a_row_stride: k,
                a_col_stride: 1,
                b_row_stride: n,
                b_col_stride: 1,
                alpha: 1.0,
                c: if op == "FusedMatMul" && node.inputs.get(2).copied().flatten().is_some() {
                    GemmC::PerCol
                } else {
                    GemmC::None
                },
                beta: 1.0,
                activation: activation_attr(attrs),
                config: gemm_config(m, n, k),
            })
        }
        "BatchNormalization" => {
            let x = shape_of(0)?;
            let get = |i: usize| {
                const_f32(slots, node.inputs.get(i).copied().flatten())
                    .ok_or_else(|| node_error(node, "BN parameters must be constant"))
            };
            let (scale, shift) = norm::batch_norm_coefficients(
                &get(1)?,
                &get(2)?,
                &get(3)?,
                &get(4)?,
                attrs.float_or("epsilon", 1e-5),
            );
            let channels = x.get(1).copied().unwrap_or(1);
            let plane = x.iter().skip(2).product();
            flops = 2 * x.iter().product::<usize>() as u64;
            Kernel::ScaleShift {
                channels,
                plane,
                scale,
                shift,
            }
        }
        "LayerNormalization" => {
            let x = shape_of(0)?;
            let axis = ops::normalize_axis(attrs.int_or("axis", -1), x.len())
                .map_err(|e| node_error(node, e))?;
            Kernel::LayerNorm {
                row_len: x[axis..].iter().product(),
                eps: attrs.float_or("epsilon", 1e-5),
            }
        }
        "InstanceNormalization" => {
            let x = shape_of(0)?;
            Kernel::InstanceNorm {
                channels: x[1],
                plane: x[2..].iter().product(),
                eps: attrs.float_or("epsilon", 1e-5),
            }
        }
        "LRN" => {
            let x = shape_of(0)?;
            Kernel::Lrn {
                batch: x[0],
                channels: x[1],
                plane: x[2..].iter().product(),
                size: attrs.int_or("size", 1).max(1) as usize,
                alpha: attrs.float_or("alpha", 1e-4),
                beta: attrs.float_or("beta", 0.75),
                bias: attrs.float_or("bias", 1.0),
            }
        }
        "Softmax" | "LogSoftmax" => {
            let x = shape_of(0)?;
            let default_axis = if graph.opset >= 13 { -1 } else { 1 };
            let axis = ops::normalize_axis(attrs.int_or("axis", default_axis), x.len())
                .map_err(|e| node_error(node, e))?;
            let (outer, axis_len, inner) = if graph.opset >= 13 {
                (
                    x[..axis].iter().product(),
                    x[axis],
                    x[axis + 1..].iter().product(),
                )
            } else {
                (x[..axis].iter().product(), x[axis..].iter().product(), 1)
            };
            Kernel::Softmax {
                outer,
                axis_len,
                inner,
                log: op == "LogSoftmax",
            }
        }
        "MaxPool" | "AveragePool" => {
            let x = shape_of(0)?;
            let y = out_shape(0)?;
            if x.len() != 4 && x.len() != 3 {
                return Err(node_error(node, "only 1-D and 2-D pooling have kernels"));
            }
            if node.outputs.len() > 1 {
                return Err(node_error(
                    node,
                    "MaxPool with an Indices output has no kernel",
                ));
            }
            let kernel: Vec<u64> = attrs
                .ints("kernel_shape")
                .unwrap_or(&[])
                .iter()
                .map(|&k| k as u64)
                .collect();
            let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
            let ceil = attrs.int_or("ceil_mode", 0) != 0;
            let w = spatial::forward_window(attrs, &spatial_in, &kernel, ceil)
                .map_err(|e| node_error(node, e))?;
            let two_d = x.len() == 4;
            let n = spatial_in.len();
            let geom = pool::Pool2d {
                planes: x[0] * x[1],
                in_h: if two_d { x[2] } else { 1 },
                in_w: *x.last().unwrap_or(&1),
                kernel_h: if two_d { kernel[0] as usize } else { 1 },
                kernel_w: *kernel.last().unwrap_or(&1) as usize,
                stride_h: if two_d { w.strides[0] as usize } else { 1 },
                stride_w: *w.strides.last().unwrap_or(&1) as usize,
                dilation_h: if two_d { w.dilations[0] as usize } else { 1 },
                dilation_w: *w.dilations.last().unwrap_or(&1) as usize,
                pad_top: if two_d { w.pads[0] as usize } else { 0 },
                pad_left: w.pads[n - 1] as usize,
                out_h: if two_d { y[2] } else { 1 },
                out_w: *y.last().unwrap_or(&1),
            };
            if op == "MaxPool" {
                Kernel::MaxPool(geom)
            } else {
                Kernel::AvgPool {
                    geom,
                    include_pad: attrs.int_or("count_include_pad", 0) != 0,
                    pad_bottom: if two_d { w.pads[n] as usize } else { 0 },
                    pad_right: w.pads[2 * n - 1] as usize,
                }
            }
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = shape_of(0)?;
            Kernel::GlobalPool {
                plane: x[2..].iter().product(),
                max: op == "GlobalMaxPool",
            }
        }
        "Transpose" => {
            let x = shape_of(0)?;
            let perm: Vec<usize> = match attrs.ints("perm") {
                Some(p) => p
                    .iter()
                    .map(|&v| ops::normalize_axis(v, x.len()).unwrap_or(0))
                    .collect(),
                None => (0..x.len()).rev().collect(),
            };
            Kernel::Transpose { shape: x, perm }
        }
        "Concat" => {
            let shapes: Vec<Vec<usize>> = (0..node.inputs.len())
                .map(shape_of)
                .collect::<Result<_, _>>()?;
            let axis = ops::normalize_axis(attrs.int_or("axis", 0), shapes[0].len())
                .map_err(|e| node_error(node, e))?;
            Kernel::Concat { axis, shapes }
        }
        "Split" => {
            let x = shape_of(0)?;
            let axis = ops::normalize_axis(attrs.int_or("axis", 0), x.len())
                .map_err(|e| node_error(node, e))?;
            let sizes = (0..node.outputs.len())
                .map(|i| out_shape(i).map(|s| s[axis]))
                .collect::<Result<_, _>>()?;
            Kernel::Split {
                axis,
                shape: x,
                sizes,
            }
        }
        "Slice" => {
            let x = shape_of(0)?;
            let y = out_shape(0)?;
            let rank = x.len();
            let ints = |i: usize, name: &str| -> Option<Vec<i64>> {
                if graph.opset < 10 {
                    attrs.ints(name).map(<[i64]>::to_vec)
                } else {
                    node.inputs
                        .get(i)
                        .copied()
                        .flatten()
                        .and_then(|v| graph.values[v].fact.konst.as_ref()?.to_i64_vec())
                }
            };
            let starts =
                ints(1, "starts").ok_or_else(|| node_error(node, "starts must be constant"))?;
            let axes: Vec<usize> = ints(3, "axes")
                .map(|a| {
                    a.iter()
                        .map(|&v| ops::normalize_axis(v, rank).unwrap_or(0))
                        .collect()
                })
                .unwrap_or((0..starts.len()).collect());
            let steps_in = ints(4, "steps").unwrap_or(vec![1; starts.len()]);
            let mut st = vec![0isize; rank];
            let mut sp = vec![1isize; rank];
            for (j, &axis) in axes.iter().enumerate() {
                let d = x[axis] as i64;
                let step = steps_in[j];
                let s = if starts[j] < 0 {
                    starts[j] + d
                } else {
                    starts[j]
                };
                let s = if step > 0 {
                    s.clamp(0, d)
                } else {
                    s.clamp(-1, d - 1)
                };
                st[axis] = s as isize;
                sp[axis] = step as isize;
            }
            Kernel::Slice {
                shape: x,
                starts: st,
                steps: sp,
                out_shape: y,
            }
        }
        "Gather" => {
            let x = shape_of(0)?;
            let axis = ops::normalize_axis(attrs.int_or("axis", 0), x.len())
                .map_err(|e| node_error(node, e))?;
            Kernel::Gather { shape: x, axis }
        }
        "Expand" | "Tile" => {
            let x = shape_of(0)?;
            let y = out_shape(0)?;
            if op == "Tile" {
                return Ok(Step {
                    info: StepInfo {
                        node_index: index,
                        name: node.name.clone(),
                        op_type: node.op_type.clone(),
                        flops: 0,
                    },
                    kernel: Kernel::Generic,
                    inputs: node.inputs.clone(),
                    outputs: node.outputs.clone(),
                    node: id,
                    scratch: 0,
                });
            }
            Kernel::Expand {
                shape: x,
                out_shape: y,
            }
        }
        "Pad" => {
            let x = shape_of(0)?;
            let y = out_shape(0)?;
            let pads: Vec<i64> = if graph.opset < 11 {
                attrs.ints("pads").map(<[i64]>::to_vec).unwrap_or_default()
            } else {
                node.inputs
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|v| graph.values[v].fact.konst.as_ref()?.to_i64_vec())
                    .ok_or_else(|| node_error(node, "pads must be constant"))?
            };
            if pads.iter().any(|&p| p < 0) || pads.len() != 2 * x.len() {
                return Err(node_error(
                    node,
                    "negative pads or axes-restricted Pad have no kernel",
                ));
            }
            let mode = match attrs.string("mode").unwrap_or("constant") {
                "edge" => PadMode::Edge,
                "reflect" => PadMode::Reflect,
                _ => PadMode::Constant,
            };
            let value = if graph.opset < 11 {
                attrs.float_or("value", 0.0)
            } else {
                const_scalar(slots, node.inputs.get(2).copied().flatten()).unwrap_or(0.0)
            };
            Kernel::Pad {
                begin: pads[..x.len()].iter().map(|&p| p as usize).collect(),
                shape: x,
                out_shape: y,
                mode,
                value,
            }
        }
        "Resize" | "Upsample" => {
            let x = shape_of(0)?;
            let y = out_shape(0)?;
            let r = x.len();
            if r < 2 || x[..r - 2] != y[..r - 2] {
                return Err(node_error(
                    node,
                    "only resizing of the last two axes has a kernel",
                ));
            }
            let mode = attrs.string("mode").unwrap_or("nearest");
            let linear = matches!(mode, "linear" | "bilinear");
            if !linear && mode != "nearest" {
                return Err(node_error(
                    node,
                    format!("resize mode `{mode}` has no kernel"),
                ));
            }
            let coord = match attrs.string("coordinate_transformation_mode").unwrap_or(
                if op == "Upsample" || graph.opset < 11 {
                    "asymmetric"
                } else {
                    "half_pixel"
                },
            ) {
                "half_pixel" => CoordMode::HalfPixel,
                "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
                "align_corners" => CoordMode::AlignCorners,
                "asymmetric" => CoordMode::Asymmetric,
                other => {
                    return Err(node_error(
                        node,
                        format!("coordinate mode `{other}` has no kernel"),
                    ))
                }
            };
            let nearest = match attrs.string("nearest_mode").unwrap_or(
                if op == "Upsample" || graph.opset < 11 {
                    "floor"
                } else {
                    "round_prefer_floor"
                },
            ) {
                "floor" => NearestMode::Floor,
                "ceil" => NearestMode::Ceil,
                "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                _ => NearestMode::RoundPreferFloor,
            };
            // Scales from the constant input when given, else the size ratio.
            let scale_input = match (op, graph.opset) {
                ("Upsample", _) => attrs.floats("scales").map(|s| s.to_vec()).or_else(|| {
                    const_f32(slots, node.inputs.get(1).copied().flatten()).map(|v| v.to_vec())
                }),
                (_, o) if o < 11 => {
                    const_f32(slots, node.inputs.get(1).copied().flatten()).map(|v| v.to_vec())
                }
                _ => const_f32(slots, node.inputs.get(2).copied().flatten())
                    .map(|v| v.to_vec())
                    .filter(|v| !v.is_empty()),
            };
            let scales = match scale_input {
                Some(s) if s.len() == r => (s[r - 2], s[r - 1]),
                _ => (
                    y[r - 2] as f32 / x[r - 2] as f32,
                    y[r - 1] as f32 / x[r - 1] as f32,
                ),
            };
            Kernel::Resize {
                planes: x[..r - 2].iter().product(),
                input: (x[r - 2], x[r - 1]),
                output: (y[r - 2], y[r - 1]),
                scales,
                linear,
                coord,
                nearest,
            }
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSumExp" => {
            let x = shape_of(0)?;
            let from_input = node
                .inputs
                .get(1)
                .copied()
                .flatten()
                .and_then(|v| graph.values[v].fact.konst.as_ref()?.to_i64_vec());
            let raw = from_input
                .or_else(|| attrs.ints("axes").map(<[i64]>::to_vec))
                .unwrap_or_default();
            let mut axes: Vec<usize> = if raw.is_empty() {
                if attrs.int_or("noop_with_empty_axes", 0) != 0 {
                    vec![]
                } else {
                    (0..x.len()).collect()
                }
            } else {
                raw.iter()
                    .map(|&a| ops::normalize_axis(a, x.len()).unwrap_or(0))
                    .collect()
            };
            axes.sort_unstable();
            axes.dedup();
            let kind = match op {
                "ReduceMean" => Reduction::Mean,
                "ReduceSum" => Reduction::Sum,
                "ReduceMax" => Reduction::Max,
                "ReduceMin" => Reduction::Min,
                "ReduceProd" => Reduction::Prod,
                "ReduceSumSquare" => Reduction::SumSquare,
                "ReduceL1" => Reduction::L1,
                "ReduceL2" => Reduction::L2,
                _ => Reduction::LogSumExp,
            };
            Kernel::Reduce {
                shape: x,
                axes,
                kind,
            }
        }
        "ArgMax" | "ArgMin" if is_float(0) => {
            let x = shape_of(0)?;
            let axis = ops::normalize_axis(attrs.int_or("axis", 0), x.len())
                .map_err(|e| node_error(node, e))?;
            Kernel::ArgMax {
                shape: x,
                axis,
                min: op == "ArgMin",
            }
        }
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity" | "Dropout" => {
            if is_float(0) {
                Kernel::View
            } else {
                Kernel::Generic
            }
        }
        "Cast" => {
            let from_float = is_float(0);
            let to_float = graph.values[node.outputs[0]].fact.dtype.is_float();
            if !from_float && !to_float {
                Kernel::Generic
            } else {
                Kernel::Cast { to_float }
            }
        }
        "Where" => Kernel::Where {
            shapes: [shape_of(0)?, shape_of(1)?, shape_of(2)?],
            out_shape: out_shape(0)?,
        },
        "Sum" | "Mean" | "Max" | "Min" if node.inputs.len() != 2 => {
            let shapes = (0..node.inputs.len())
                .map(shape_of)
                .collect::<Result<_, _>>()?;
            Kernel::Variadic {
                op: binary_of(op).unwrap_or(Binary::Add),
                mean: op == "Mean",
                shapes,
                out_shape: out_shape(0)?,
            }
        }
        _ => {
            if let Some(b) = binary_of(op) {
                let (a_shape, b_shape, o) = (shape_of(0)?, shape_of(1)?, out_shape(0)?);
                flops = o.iter().product::<usize>() as u64;
                if op == "Mean" {
                    Kernel::Variadic {
                        op: b,
                        mean: true,
                        shapes: vec![a_shape, b_shape],
                        out_shape: o,
                    }
                } else {
                    Kernel::Binary {
                        op: b,
                        a_shape,
                        b_shape,
                        out_shape: o,
                    }
                }
            } else {
                let consts: Vec<Option<f32>> = node
                    .inputs
                    .iter()
                    .map(|s| const_scalar(slots, *s))
                    .collect();
                match unary_of(op, attrs, &consts) {
                    Some(u) => Kernel::Unary(u),
                    None => Kernel::Generic,
                }
            }
        }
    };
    Ok(Step {
        info: StepInfo {
            node_index: index,
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            flops,
        },
        kernel,
        inputs: node.inputs.clone(),
        outputs: node.outputs.clone(),
        node: id,
        scratch,
    })
}

/// Runs one step with constant inputs at plan time (for opaque constants).
fn run_once(
    graph: &Graph,
    step: &Step,
    slots: &[Slot],
    threads: usize,
    opset: i64,
) -> Result<Vec<RtTensor>, ExecError> {
    let ins: Vec<Option<RtTensor>> = step
        .inputs
        .iter()
        .map(|s| {
            s.and_then(|v| match &slots[v] {
                Slot::Const(t) => Some((**t).clone()),
                _ => None,
            })
        })
        .collect();
    let out_shapes: Vec<Vec<usize>> = step
        .outputs
        .iter()
        .map(|&v| dims(&graph.values[v].fact).unwrap_or_default())
        .collect();
    let out_float: Vec<bool> = step
        .outputs
        .iter()
        .map(|&v| graph.values[v].fact.dtype.is_float())
        .collect();
    let node = &graph.dag[step.node];
    execute_owned(step, node, opset, &ins, &out_shapes, &out_float, threads)
}

/// Executes a step on owned tensors (plan-time folding and the generic path).
fn execute_owned(
    step: &Step,
    node: &crate::analysis::graph::Node,
    opset: i64,
    ins: &[Option<RtTensor>],
    out_shapes: &[Vec<usize>],
    out_float: &[bool],
    threads: usize,
) -> Result<Vec<RtTensor>, ExecError> {
    if matches!(step.kernel, Kernel::Generic) {
        return generic_eval(node, opset, ins);
    }
    let mut outs: Vec<Vec<f32>> = out_shapes
        .iter()
        .map(|s| vec![0.0; s.iter().product()])
        .collect();
    let in_refs: Vec<Option<InRef>> = ins
        .iter()
        .map(|t| t.as_ref().map(InRef::from_tensor))
        .collect();
    let mut out_refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    let mut scratch = vec![0.0; step.scratch];
    let mut dynamic_out = Vec::new();
    run_kernel(
        step,
        &in_refs,
        &mut out_refs,
        &mut dynamic_out,
        &mut scratch,
        threads,
    )
    .map_err(|e| node_error(node, e))?;
    if !dynamic_out.is_empty() {
        return Ok(dynamic_out);
    }
    Ok(outs
        .into_iter()
        .zip(out_shapes)
        .zip(out_float)
        .map(|((v, s), &f)| RtTensor {
            shape: s.clone(),
            data: if f {
                RtData::F32(v)
            } else {
                RtData::I64(v.iter().map(|&x| x as i64).collect())
            },
        })
        .collect())
}

/// Evaluates an op through the analysis layer's constant evaluator (small integer tensors).
fn generic_eval(
    node: &crate::analysis::graph::Node,
    opset: i64,
    ins: &[Option<RtTensor>],
) -> Result<Vec<RtTensor>, ExecError> {
    let op =
        ops::lookup(&node.domain, &node.op_type).ok_or_else(|| node_error(node, "unknown op"))?;
    let facts: Vec<Option<TensorFact>> = ins
        .iter()
        .map(|t| {
            t.as_ref().map(|t| {
                let dtype = if matches!(t.data, RtData::F32(_)) {
                    DType::F32
                } else {
                    DType::I64
                };
                TensorFact::constant(to_analysis_tensor(t, dtype))
            })
        })
        .collect();
    let refs: Vec<Option<&TensorFact>> = facts.iter().map(Option::as_ref).collect();
    let ctx = InferCtx {
        node: OpNode {
            name: &node.name,
            op_type: &node.op_type,
            attrs: &node.attrs,
            opset,
        },
        inputs: refs,
        output_count: node.outputs.len(),
    };
    let outputs = op.infer(&ctx).map_err(|e| node_error(node, e))?;
    outputs
        .into_iter()
        .take(node.outputs.len())
        .map(|fact| {
            let konst = fact
                .konst
                .ok_or_else(|| node_error(node, "this op has no kernel for run-time values"))?;
            materialise(&konst)
                .ok_or_else(|| node_error(node, "result too large to evaluate generically"))
        })
        .collect()
}

/// A borrowed input.
#[derive(Clone, Copy)]
enum InRef<'a> {
    F32(&'a [f32]),
    I64(&'a [i64]),
}

impl<'a> InRef<'a> {
    fn from_tensor(t: &'a RtTensor) -> InRef<'a> {
        match &t.data {
            RtData::F32(v) => InRef::F32(v),
            RtData::I64(v) => InRef::I64(v),
        }
    }

    fn f32(self) -> Result<&'a [f32], String> {
        match self {
            InRef::F32(v) => Ok(v),
            InRef::I64(_) => Err("expected a float input".into()),
        }
    }
}

fn input<'a>(ins: &[Option<InRef<'a>>], i: usize) -> Result<InRef<'a>, String> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("missing input #{i}"))
}

/// Elements per thread below which an element-wise op stays on one thread: waking a worker
/// costs microseconds, and 64 Ki floats stream in about 10 µs.
const MIN_ELEMENTWISE_PER_THREAD: usize = 1 << 16;
/// Piece boundaries of flat element-wise ops fall on whole vectors (64 bytes).
const VECTOR_ALIGN: usize = 16;

/// Runs `f(first_element, piece)` over `out` split into up to `threads` contiguous pieces of
/// whole `unit`s (a plane, a vector), in parallel when each piece is large enough. The
/// element-wise ops use it so an unfused graph gets the same threads as the fused one.
fn par_pieces(
    out: &mut [f32],
    unit: usize,
    threads: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let units = out.len().div_ceil(unit.max(1));
    let pieces = threads
        .min(out.len() / MIN_ELEMENTWISE_PER_THREAD)
        .min(units)
        .max(1);
    if pieces == 1 {
        f(0, out);
        return;
    }
    let per_piece = units.div_ceil(pieces) * unit;
    let len = out.len();
    let base = gemm::SendPtr(out.as_mut_ptr());
    gemm::parallel_for(threads, len.div_ceil(per_piece), |piece| {
        let start = piece * per_piece;
        let end = (start + per_piece).min(len);
        // SAFETY: pieces are disjoint ranges of `out`, which outlives the parallel loop.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(start, chunk);
    });
}

/// A pooling over `geom.planes` planes split into whole planes across the plan's threads
/// ([`par_pieces`]): `pool(sub, input planes, output planes)` with `sub.planes` the piece's count.
fn par_planes(
    geom: &pool::Pool2d,
    input: &[f32],
    output: &mut [f32],
    threads: usize,
    pool: impl Fn(&pool::Pool2d, &[f32], &mut [f32]) + Sync + Send,
) {
    let (in_plane, out_plane) = (geom.in_h * geom.in_w, (geom.out_h * geom.out_w).max(1));
    par_pieces(output, out_plane, threads, |off, y| {
        let (first, planes) = (off / out_plane, y.len() / out_plane);
        let sub = pool::Pool2d { planes, ..*geom };
        pool(
            &sub,
            &input[first * in_plane..(first + planes) * in_plane],
            y,
        );
    });
}

/// Runs a non-generic kernel. Integer outputs (ArgMax, Cast to int) go to `dynamic_out`.
fn run_kernel(
    step: &Step,
    ins: &[Option<InRef>],
    outs: &mut [&mut [f32]],
    dynamic_out: &mut Vec<RtTensor>,
    scratch: &mut Vec<f32>,
    threads: usize,
) -> Result<(), String> {
    let x = |i: usize| input(ins, i).and_then(InRef::f32);
    match &step.kernel {
        Kernel::Chain {
            steps,
            channels,
            channel_size,
        } => {
            let (x, block) = (x(0)?, (*channel_size).max(1));
            par_pieces(outs[0], block, threads, |off, y| {
                let xs = &x[off..off + y.len()];
                elementwise::chain(steps, xs, y, off / block, *channels, *channel_size)
            });
        }
        Kernel::Conv {
            geom,
            weights,
            bias,
            activation,
            residual,
            config,
            packed,
        } => {
            let residual = if *residual { Some(x(3)?) } else { None };
            let ep = ConvEpilogue {
                bias: bias.as_deref().map(|b| b.as_slice()),
                residual,
                activation: *activation,
            };
            // The workspace scratch only ever grows: kernels sharing it never shrink it.
            if scratch.len() < geom.scratch_len() {
                scratch.resize(geom.scratch_len(), 0.0);
            }
            conv::conv2d_prepacked(
                config,
                geom,
                x(0)?,
                weights,
                packed.as_deref(),
                &ep,
                outs[0],
                &mut scratch[..geom.scratch_len()],
                threads,
            );
        }
        Kernel::ConvTranspose {
            geom,
            weights,
            bias,
        } => {
            conv::conv_transpose2d(
                geom,
                x(0)?,
                weights,
                bias.as_deref().map(|b| b.as_slice()),
                outs[0],
                scratch,
                threads,
            );
        }
        Kernel::MatMul(spec) => {
            let a = x(0)?;
            let b = x(1)?;
            let c_input = if spec.c != GemmC::None {
                Some(x(2)?)
            } else {
                None
            };
            let scaled_c: Option<Vec<f32>> = c_input.map(|c| {
                if spec.beta != 1.0 {
                    c.iter().map(|v| v * spec.beta).collect()
                } else {
                    c.to_vec()
                }
            });
            let scaled_a: Option<Vec<f32>> =
                (spec.alpha != 1.0).then(|| a.iter().map(|v| v * spec.alpha).collect());
            let a = scaled_a.as_deref().unwrap_or(a);
            let out = &mut *outs[0];
            for batch in 0..spec.batch {
                let am = MatRef {
                    data: &a[spec.a_offsets[batch]..],
                    rows: spec.m,
                    cols: spec.k,
                    row_stride: spec.a_row_stride,
                    col_stride: spec.a_col_stride,
                };
                let bm = MatRef {
                    data: &b[spec.b_offsets[batch]..],
                    rows: spec.k,
                    cols: spec.n,
                    row_stride: spec.b_row_stride,
                    col_stride: spec.b_col_stride,
                };
                let c_tile = &mut out[batch * spec.m * spec.n..(batch + 1) * spec.m * spec.n];
                let ep = match (&spec.c, scaled_c.as_deref()) {
                    (GemmC::PerCol, Some(c)) => Epilogue {
                        bias: BiasKind::PerCol(c),
                        residual: None,
                        activation: spec.activation,
                    },
                    (GemmC::PerRow, Some(c)) => Epilogue {
                        bias: BiasKind::PerRow(c),
                        residual: None,
                        activation: spec.activation,
                    },
                    (GemmC::Full, Some(c)) => Epilogue {
                        bias: BiasKind::None,
                        residual: Some(c),
                        activation: spec.activation,
                    },
                    (GemmC::Scalar, _) => Epilogue {
                        bias: BiasKind::None,
                        residual: None,
                        activation: Activation::None,
                    },
                    _ => Epilogue {
                        bias: BiasKind::None,
                        residual: None,
                        activation: spec.activation,
                    },
                };
                gemm::sgemm_with(&spec.config, &am, &bm, c_tile, spec.n, &ep, threads);
                if let (GemmC::Scalar, Some(c)) = (&spec.c, scaled_c.as_deref()) {
                    c_tile.iter_mut().for_each(|v| *v += c[0]);
                    gemm::apply_activation(&spec.activation, c_tile);
                }
            }
        }
        Kernel::Unary(op) => {
            let x = x(0)?;
            par_pieces(outs[0], VECTOR_ALIGN, threads, |off, y| {
                elementwise::unary(*op, &x[off..off + y.len()], y)
            });
        }
        Kernel::Binary {
            op,
            a_shape,
            b_shape,
            out_shape,
        } => {
            let (a, b) = (x(0)?, x(1)?);
            if a_shape == out_shape && b_shape == out_shape {
                // Same shapes (a residual Add): split flat.
                par_pieces(outs[0], VECTOR_ALIGN, threads, |off, y| {
                    let n = y.len();
                    let piece = [n];
                    let (a, b) = (&a[off..off + n], &b[off..off + n]);
                    elementwise::binary(*op, a, &piece, b, &piece, y, &piece);
                });
            } else {
                elementwise::binary(*op, a, a_shape, b, b_shape, outs[0], out_shape);
            }
        }
        Kernel::Variadic {
            op,
            mean,
            shapes,
            out_shape,
        } => {
            let count = shapes.len();
            movement::broadcast(x(0)?, &shapes[0], out_shape, outs[0]);
            let mut tmp = vec![0.0; outs[0].len()];
            for (i, shape) in shapes.iter().enumerate().skip(1) {
                elementwise::binary(*op, outs[0], out_shape, x(i)?, shape, &mut tmp, out_shape);
                outs[0].copy_from_slice(&tmp);
            }
            if *mean {
                outs[0].iter_mut().for_each(|v| *v /= count as f32);
            }
        }
        Kernel::Where { shapes, out_shape } => {
            let n: usize = out_shape.iter().product();
            let cond: Vec<f32> = match input(ins, 0)? {
                InRef::I64(v) => v.iter().map(|&b| b as f32).collect(),
                InRef::F32(v) => v.to_vec(),
            };
            let mut c = vec![0.0; n];
            let mut a = vec![0.0; n];
            let mut b = vec![0.0; n];
            movement::broadcast(&cond, &shapes[0], out_shape, &mut c);
            movement::broadcast(x(1)?, &shapes[1], out_shape, &mut a);
            movement::broadcast(x(2)?, &shapes[2], out_shape, &mut b);
            for (((o, &cv), &av), &bv) in outs[0].iter_mut().zip(&c).zip(&a).zip(&b) {
                *o = if cv != 0.0 { av } else { bv };
            }
        }
        Kernel::ScaleShift {
            channels,
            plane,
            scale,
            shift,
        } => {
            let (x, unit) = (x(0)?, (*plane).max(1));
            par_pieces(outs[0], unit, threads, |off, y| {
                let xs = &x[off..off + y.len()];
                norm::scale_shift(xs, off / unit, *channels, *plane, scale, shift, y)
            });
        }
        Kernel::LayerNorm { row_len, eps } => {
            let gamma = ins.get(1).copied().flatten().map(InRef::f32).transpose()?;
            let beta = ins.get(2).copied().flatten().map(InRef::f32).transpose()?;
            norm::layer_norm(x(0)?, *row_len, gamma, beta, *eps, outs[0]);
        }
        Kernel::InstanceNorm {
            channels,
            plane,
            eps,
        } => norm::instance_norm(x(0)?, *channels, *plane, x(1)?, x(2)?, *eps, outs[0]),
        Kernel::Lrn {
            batch,
            channels,
            plane,
            size,
            alpha,
            beta,
            bias,
        } => norm::lrn(
            x(0)?,
            *batch,
            *channels,
            *plane,
            *size,
            *alpha,
            *beta,
            *bias,
            outs[0],
        ),
        Kernel::Softmax {
            outer,
            axis_len,
            inner,
            log,
        } => norm::softmax(x(0)?, *outer, *axis_len, *inner, *log, outs[0]),
        Kernel::MaxPool(geom) => {
            let x = x(0)?;
            par_planes(geom, x, outs[0], threads, |sub, xs, y| {
                pool::max_pool(sub, xs, y)
            });
        }
        Kernel::AvgPool {
            geom,
            include_pad,
            pad_bottom,
            pad_right,
        } => {
            let x = x(0)?;
            par_planes(geom, x, outs[0], threads, |sub, xs, y| {
                pool::avg_pool(sub, *include_pad, *pad_bottom, *pad_right, xs, y)
            });
        }
        Kernel::GlobalPool { plane, max } => pool::global_pool(x(0)?, *plane, *max, outs[0]),
        Kernel::Transpose { shape, perm } => movement::transpose(x(0)?, shape, perm, outs[0]),
        Kernel::Concat { axis, shapes } => {
            let parts: Vec<(&[f32], &[usize])> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Ok((x(i)?, s.as_slice())))
                .collect::<Result<_, String>>()?;
            movement::concat(&parts, *axis, outs[0]);
        }
        Kernel::Split { axis, shape, sizes } => {
            let data = x(0)?;
            let mut start = 0isize;
            for (i, &size) in sizes.iter().enumerate() {
                let mut out_shape = shape.clone();
                out_shape[*axis] = size;
                let mut starts = vec![0isize; shape.len()];
                starts[*axis] = start;
                movement::slice(
                    data,
                    shape,
                    &starts,
                    &vec![1; shape.len()],
                    &out_shape,
                    outs[i],
                );
                start += size as isize;
            }
        }
        Kernel::Slice {
            shape,
            starts,
            steps,
            out_shape,
        } => movement::slice(x(0)?, shape, starts, steps, out_shape, outs[0]),
        Kernel::Gather { shape, axis } => {
            let indices: Vec<i64> = match input(ins, 1)? {
                InRef::I64(v) => v.to_vec(),
                InRef::F32(v) => v.iter().map(|&f| f as i64).collect(),
            };
            let len = shape[*axis] as i64;
            let idx: Vec<usize> = indices
                .iter()
                .map(|&i| {
                    let j = if i < 0 { i + len } else { i };
                    if j < 0 || j >= len {
                        Err(format!("index {i} out of range for dim {len}"))
                    } else {
                        Ok(j as usize)
                    }
                })
                .collect::<Result<_, _>>()?;
            movement::gather(x(0)?, shape, *axis, &idx, outs[0]);
        }
        Kernel::Expand { shape, out_shape } => {
            movement::broadcast(x(0)?, shape, out_shape, outs[0])
        }
        Kernel::Pad {
            shape,
            begin,
            out_shape,
            mode,
            value,
        } => movement::pad(x(0)?, shape, begin, out_shape, *mode, *value, outs[0]),
        Kernel::Resize {
            planes,
            input: i,
            output: o,
            scales,
            linear,
            coord,
            nearest,
        } => {
            movement::resize_2d(
                x(0)?,
                *planes,
                *i,
                *o,
                *scales,
                *linear,
                *coord,
                *nearest,
                outs[0],
            );
        }
        Kernel::Reduce { shape, axes, kind } => {
            movement::reduce(x(0)?, shape, axes, *kind, outs[0])
        }
        Kernel::ArgMax { shape, axis, min } => {
            let data = x(0)?;
            let outer: usize = shape[..*axis].iter().product();
            let inner: usize = shape[*axis + 1..].iter().product();
            let len = shape[*axis];
            let mut result = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                for i in 0..inner {
                    let mut best = 0;
                    for a in 1..len {
                        let v = data[(o * len + a) * inner + i];
                        let b = data[(o * len + best) * inner + i];
                        if (!min && v > b) || (*min && v < b) {
                            best = a;
                        }
                    }
                    result.push(best as i64);
                }
            }
            let mut out_shape = shape.clone();
            out_shape[*axis] = 1;
            dynamic_out.push(RtTensor {
                shape: out_shape,
                data: RtData::I64(result),
            });
        }
        Kernel::View => {
            if let Ok(data) = x(0) {
                if !outs.is_empty()
                    && outs[0].len() == data.len()
                    && outs[0].as_ptr() != data.as_ptr()
                {
                    outs[0].copy_from_slice(data);
                }
            }
        }
        Kernel::Cast { to_float } => match (input(ins, 0)?, to_float) {
            (InRef::F32(v), true) => outs[0].copy_from_slice(v),
            (InRef::I64(v), true) => outs[0].iter_mut().zip(v).for_each(|(o, &i)| *o = i as f32),
            (InRef::F32(v), false) => dynamic_out.push(RtTensor {
                shape: vec![v.len()],
                data: RtData::I64(v.iter().map(|&f| f as i64).collect()),
            }),
            (InRef::I64(v), false) => dynamic_out.push(RtTensor {
                shape: vec![v.len()],
                data: RtData::I64(v.to_vec()),
            }),
        },
        Kernel::Quant(q) => {
            let qins: Vec<Option<super::quant::QIn>> = ins
                .iter()
                .map(|i| {
                    i.map(|r| match r {
                        InRef::F32(v) => super::quant::QIn::F32(v),
                        InRef::I64(v) => super::quant::QIn::I64(v),
                    })
                })
                .collect();
            q.run(&qins, outs, dynamic_out, threads)?;
        }
        Kernel::Generic => return Err("internal: generic kernels run through the evaluator".into()),
    }
    Ok(())
}

/// Timing of one run.
#[derive(Clone, Debug, Default)]
pub struct RunTimings {
    /// Seconds per step, in step order.
    pub step_seconds: Vec<f64>,
}

impl Plan {
    pub fn steps(&self) -> Vec<StepInfo> {
        self.steps.iter().map(|s| s.info.clone()).collect()
    }

    pub fn inputs(&self) -> Vec<(String, Vec<usize>, bool)> {
        self.inputs
            .iter()
            .map(|(_, n, s, i)| (n.clone(), s.clone(), *i))
            .collect()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn workspace(&self) -> Workspace {
        Workspace {
            buffers: self.buffer_sizes.iter().map(|&s| vec![0.0; s]).collect(),
            dynamic: HashMap::new(),
            scratch: vec![0.0; self.scratch_len],
        }
    }

    /// Runs the plan. `inputs` by name; `timings` records per-step seconds when given (no clock
    /// is read otherwise).
    pub fn run(
        &self,
        workspace: &mut Workspace,
        inputs: &HashMap<String, RtTensor>,
        mut timings: Option<&mut RunTimings>,
    ) -> Result<Vec<(String, RtTensor)>, ExecError> {
        for (v, name, shape, integer) in &self.inputs {
            let tensor = inputs.get(name).ok_or_else(|| ExecError::Input {
                name: name.clone(),
                reason: "no value given".into(),
            })?;
            if &tensor.shape != shape {
                return Err(ExecError::Input {
                    name: name.clone(),
                    reason: format!("shape {:?} given, {:?} expected", tensor.shape, shape),
                });
            }
            match (&self.slots[*v], &tensor.data, integer) {
                (Slot::Buffer { buffer, .. }, RtData::F32(data), false) => {
                    workspace.buffers[*buffer][..data.len()].copy_from_slice(data)
                }
                (Slot::Dynamic { .. }, RtData::I64(_), true) => {
                    workspace.dynamic.insert(*v, tensor.clone());
                }
                (Slot::Dynamic { .. }, RtData::F32(data), true) => {
                    workspace.dynamic.insert(
                        *v,
                        RtTensor {
                            shape: shape.clone(),
                            data: RtData::I64(data.iter().map(|&f| f as i64).collect()),
                        },
                    );
                }
                _ => {
                    return Err(ExecError::Input {
                        name: name.clone(),
                        reason: "wrong element type".into(),
                    })
                }
            }
        }
        if let Some(t) = timings.as_deref_mut() {
            t.step_seconds.clear();
            t.step_seconds.resize(self.steps.len(), 0.0);
        }
        for (i, step) in self.steps.iter().enumerate() {
            let start = timings.is_some().then(Instant::now);
            self.run_step(step, workspace)?;
            if let (Some(t), Some(start)) = (timings.as_deref_mut(), start) {
                t.step_seconds[i] = start.elapsed().as_secs_f64();
            }
        }
        self.outputs
            .iter()
            .map(|(v, name)| {
                Ok((
                    name.clone(),
                    self.read_value(*v, workspace)
                        .ok_or_else(|| ExecError::Input {
                            name: name.clone(),
                            reason: "output was not produced".into(),
                        })?,
                ))
            })
            .collect()
    }

    fn read_value(&self, v: ValueId, ws: &Workspace) -> Option<RtTensor> {
        match &self.slots[v] {
            Slot::Const(t) => Some((**t).clone()),
            Slot::Buffer { buffer, shape } => {
                let len: usize = shape.iter().product();
                Some(RtTensor {
                    shape: shape.clone(),
                    data: RtData::F32(ws.buffers[*buffer][..len].to_vec()),
                })
            }
            Slot::Dynamic { .. } => ws.dynamic.get(&v).cloned(),
            Slot::Unused => None,
        }
    }

    fn run_step(&self, step: &Step, ws: &mut Workspace) -> Result<(), ExecError> {
        let node_err = |reason: String| ExecError::Node {
            node: step.info.name.clone(),
            op_type: step.info.op_type.clone(),
            reason,
        };
        if matches!(step.kernel, Kernel::View) {
            // The data output shares the input's buffer; a Dropout mask (inference) is all ones.
            for &v in step.outputs.iter().skip(1) {
                if let Slot::Dynamic { shape } = &self.slots[v] {
                    let ones = RtTensor {
                        shape: shape.clone(),
                        data: RtData::I64(vec![1; shape.iter().product()]),
                    };
                    ws.dynamic.insert(v, ones);
                }
            }
            return Ok(());
        }
        if matches!(step.kernel, Kernel::Generic) {
            let ins: Vec<Option<RtTensor>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|v| self.read_value(v, ws)))
                .collect();
            let node = self
                .generic_nodes
                .get(&step.node)
                .ok_or_else(|| node_err("internal: node missing".into()))?;
            let outs = generic_eval(node, self.opset, &ins)?;
            for (&v, t) in step.outputs.iter().zip(outs) {
                self.store(v, t, ws);
            }
            return Ok(());
        }
        // Take the output buffers out so inputs can be borrowed from the rest.
        let mut taken: Vec<(usize, Vec<f32>)> = Vec::new();
        for &v in &step.outputs {
            if let Slot::Buffer { buffer, .. } = &self.slots[v] {
                if !taken.iter().any(|(b, _)| b == buffer) {
                    taken.push((*buffer, std::mem::take(&mut ws.buffers[*buffer])));
                }
            }
        }
        let result = {
            let ins: Vec<Option<InRef>> = step
                .inputs
                .iter()
                .map(|s| {
                    s.and_then(|v| match &self.slots[v] {
                        Slot::Const(t) => Some(InRef::from_tensor(t)),
                        Slot::Buffer { buffer, shape } => {
                            Some(InRef::F32(&ws.buffers[*buffer][..shape.iter().product()]))
                        }
                        Slot::Dynamic { .. } => ws.dynamic.get(&v).map(InRef::from_tensor),
                        Slot::Unused => None,
                    })
                })
                .collect();

            let mut outs: Vec<&mut [f32]> = Vec::new();
            // Hand out disjoint mutable slices of the taken buffers, in output order.
            let mut pool: Vec<(usize, &mut [f32])> = taken
                .iter_mut()
                .map(|(b, v)| (*b, v.as_mut_slice()))
                .collect();
            for &v in &step.outputs {
                match &self.slots[v] {
                    Slot::Buffer { buffer, shape } => {
                        let len: usize = shape.iter().product();
                        let at = pool.iter().position(|(b, _)| b == buffer);
                        match at {
                            Some(at) => {
                                let (_, slice) = pool.swap_remove(at);
                                outs.push(&mut slice[..len]);
                            }
                            None => outs.push(&mut []),
                        }
                    }
                    _ => outs.push(&mut []),
                }
            }
            let mut dynamic_out = Vec::new();
            let r = run_kernel(
                step,
                &ins,
                &mut outs,
                &mut dynamic_out,
                &mut ws.scratch,
                self.threads,
            );
            r.map(|()| dynamic_out)
        };
        for (b, v) in taken {
            ws.buffers[b] = v;
        }
        let dynamic_out = result.map_err(node_err)?;
        for (&v, t) in step.outputs.iter().zip(dynamic_out) {
            let shape = match &self.slots[v] {
                Slot::Dynamic { shape } => shape.clone(),
                _ => t.shape.clone(),
            };
            self.store(v, RtTensor { shape, ..t }, ws);
        }
        Ok(())
    }

    fn store(&self, v: ValueId, t: RtTensor, ws: &mut Workspace) {
        match &self.slots[v] {
            Slot::Buffer { buffer, .. } => {
                let data = t.to_f32();
                ws.buffers[*buffer][..data.len()].copy_from_slice(&data);
            }
            _ => {
                ws.dynamic.insert(v, t);
            }
        }
    }

    /// Name of a value (diagnostics).
    pub fn value_name(&self, v: ValueId) -> &str {
        &self.graph_names[v]
    }
}

/// The epilogue activation of a fused node (`activation`, `act_alpha`, `act_beta` attributes).
fn activation_attr(attrs: &crate::analysis::graph::Attributes) -> Activation {
    let (a, b) = (
        attrs.float_or("act_alpha", 0.0),
        attrs.float_or("act_beta", 0.0),
    );
    match attrs.string("activation").unwrap_or("none") {
        "relu" => Activation::Relu,
        "clip" => Activation::Clip { min: a, max: b },
        "leaky_relu" => Activation::LeakyRelu { alpha: a },
        "hard_sigmoid" => Activation::HardSigmoid { alpha: a, beta: b },
        "hard_swish" => Activation::HardSwish,
        "sigmoid" => Activation::Sigmoid,
        "silu" => Activation::Silu,
        "gelu" => Activation::Gelu,
        "tanh" => Activation::Tanh,
        _ => Activation::None,
    }
}

fn unary_by_name(name: &str, a: f32, b: f32) -> Option<Unary> {
    Some(match name {
        "relu" => Unary::Relu,
        "clip" => Unary::Clip(a, b),
        "leaky_relu" => Unary::LeakyRelu(a),
        "hard_sigmoid" => Unary::HardSigmoid(a, b),
        "hard_swish" => Unary::HardSwish,
        "sigmoid" => Unary::Sigmoid,
        "tanh" => Unary::Tanh,
        "gelu" => Unary::Gelu,
        "exp" => Unary::Exp,
        "log" => Unary::Log,
        "sqrt" => Unary::Sqrt,
        "neg" => Unary::Neg,
        "abs" => Unary::Abs,
        "reciprocal" => Unary::Reciprocal,
        "erf" => Unary::Erf,
        _ => return None,
    })
}

fn binary_by_name(name: &str) -> Option<Binary> {
    Some(match name {
        "add" => Binary::Add,
        "sub" => Binary::Sub,
        "mul" => Binary::Mul,
        "div" => Binary::Div,
        "pow" => Binary::Pow,
        "max" => Binary::Max,
        "min" => Binary::Min,
        _ => return None,
    })
}

/// Decodes one `ElementwiseChain` step (see `analysis::ops::fused`).
fn parse_chain_step(
    step: &str,
    node: &crate::analysis::graph::Node,
    slots: &[Slot],
) -> Result<elementwise::ChainStep, String> {
    let parts: Vec<&str> = step.split(':').collect();
    match parts.as_slice() {
        ["unary", name, a, b] => {
            unary_by_name(name, a.parse().unwrap_or(0.0), b.parse().unwrap_or(0.0))
                .map(elementwise::ChainStep::Unary)
                .ok_or_else(|| format!("unknown chain step `{step}`"))
        }
        ["const", op, index, swapped] => {
            let i: usize = index.parse().map_err(|_| format!("bad step `{step}`"))?;
            let values = const_f32(slots, node.inputs.get(i).copied().flatten())
                .ok_or("chain operand must be constant")?;
            Ok(elementwise::ChainStep::WithConstant {
                op: binary_by_name(op).ok_or("bad op")?,
                values: values.to_vec(),
                swapped: *swapped == "1",
            })
        }
        ["input", op, swapped] => Ok(elementwise::ChainStep::WithInput {
            op: binary_by_name(op).ok_or("bad op")?,
            swapped: *swapped == "1",
        }),
        _ => Err(format!("bad chain step `{step}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_wise_pieces_cover_the_tensor_once_and_keep_channels() {
        // 3 channels of 50 000-element planes: big enough that 2 threads split it, with piece
        // boundaries inside a channel's run of planes.
        let (channels, plane, images) = (3, 50_000, 2);
        let len = channels * plane * images;
        let x: Vec<f32> = (0..len).map(|i| (i % 97) as f32 - 40.0).collect();
        let scale = [0.5, -2.0, 3.0];
        let shift = [1.0, 0.25, -7.0];
        let mut whole = vec![0.0; len];
        norm::scale_shift(&x, 0, channels, plane, &scale, &shift, &mut whole);
        let steps = vec![
            elementwise::ChainStep::WithConstant {
                op: Binary::Mul,
                values: scale.to_vec(),
                swapped: false,
            },
            elementwise::ChainStep::WithConstant {
                op: Binary::Add,
                values: shift.to_vec(),
                swapped: false,
            },
        ];
        for threads in [1, 2, 3] {
            let mut pieces = vec![f32::NAN; len];
            let starts = std::sync::Mutex::new(Vec::new());
            par_pieces(&mut pieces, plane, threads, |off, y| {
                starts.lock().unwrap().push(off);
                norm::scale_shift(
                    &x[off..off + y.len()],
                    off / plane,
                    channels,
                    plane,
                    &scale,
                    &shift,
                    y,
                )
            });
            assert_eq!(pieces, whole, "scale_shift in pieces, {threads} threads");
            let starts = starts.into_inner().unwrap();
            assert_eq!(starts.len(), threads, "one piece per thread");
            assert!(
                starts.iter().all(|s| s % plane == 0),
                "pieces start on planes"
            );
            let mut chained = vec![f32::NAN; len];
            par_pieces(&mut chained, plane, threads, |off, y| {
                let xs = &x[off..off + y.len()];
                elementwise::chain(&steps, xs, y, off / plane, channels, plane)
            });
            assert_eq!(chained, whole, "chain in pieces, {threads} threads");
        }
        // Small tensors stay on one thread.
        let mut small = vec![0.0f32; 1000];
        let calls = std::sync::atomic::AtomicUsize::new(0);
        par_pieces(&mut small, 16, 2, |_, _| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(calls.into_inner(), 1);
    }
}
