//! Plan building: walks the topological order, lowers each node to a kernel description
//! (`lower`), has the CPU backend prepare it (`cpu::prepare`), evaluates opaque constants once,
//! and hands the step list to the buffer planner (`memory`). The plan types live here; running
//! a plan is `run.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use super::lower::conv::{ConvKernel, PairLayout};
use super::lower::{self, Cx, Kernel};
use super::{cpu, dims, eval, memory, node_error, ExecError, RtTensor};
use crate::analysis::algorithm::ConvAlgorithm;
use crate::analysis::graph::{Graph, Node, NodeId, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::tensor::{DType, TensorData, TensorFact};
use crate::kernels::gemm;

/// `exec::plan::Workspace` is where callers have always found the run-time memory.
pub use super::run::{RunTimings, Workspace};

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
    /// Let producers write Concat inputs in place (`concat_placements`); off only to compare
    /// against the copying plan.
    pub concat_in_place: bool,
    /// Let Split and Slice outputs that are contiguous runs of the input be read where they lie
    /// (`slice_placements`); off only to compare against the copying plan.
    pub slice_views: bool,
    /// How each 3×3 convolution's algorithm is chosen (direct or Winograd).
    pub conv_algorithms: ConvAlgorithms,
    /// Hold the activation between a pointwise convolution and the depthwise one that alone
    /// reads it NHWC (`nhwc_pairs`); off only to compare against the all-NCHW plan.
    pub nhwc_pairs: bool,
    /// Float graph inputs keep their buffers for the whole run (no value reuses them), so a
    /// caller can write the next run's inputs from this run's outputs in place: a decode loop
    /// sliding `present` into `past` (`Plan::output_into_input`).
    pub keep_inputs: bool,
}

/// How the planner chooses each convolution's algorithm (`analysis::algorithm`).
#[derive(Clone, Debug)]
pub enum ConvAlgorithms {
    /// The roofline rule of `analysis::algorithm::choose` on this roof (`None`: work only).
    Auto(Option<Box<crate::analysis::roofline::Roof>>),
    /// The decisions an analysis of the same graph recorded, by node index (what `bench` runs,
    /// so the bound it reports is the bound of what ran); nodes it does not name run direct.
    FromAnalysis(Arc<HashMap<usize, ConvAlgorithm>>),
    /// Every convolution direct.
    DirectOnly,
}

impl ConvAlgorithms {
    /// The decisions of an analysis (its nodes' `algorithm`).
    pub fn from_analysis(analysis: &crate::analysis::Analysis) -> ConvAlgorithms {
        let decided = analysis
            .nodes
            .iter()
            .filter_map(|n| n.algorithm.as_ref().map(|c| (n.index, c.algorithm)))
            .collect();
        ConvAlgorithms::FromAnalysis(Arc::new(decided))
    }
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
            concat_in_place: true,
            slice_views: true,
            conv_algorithms: ConvAlgorithms::Auto(None),
            nhwc_pairs: true,
            keep_inputs: false,
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

impl Plan {
    /// Pointwise → depthwise pairs whose activation between them is held NHWC (`nhwc_pairs`).
    pub fn nhwc_pairs(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| {
                matches!(
                    s.kernel,
                    Kernel::Conv(ConvKernel::Forward {
                        layout: PairLayout::NhwcOutput,
                        ..
                    })
                )
            })
            .count()
    }

    /// The algorithm each convolution step runs, by node index (direct ones included).
    pub fn conv_algorithms(&self) -> Vec<(usize, ConvAlgorithm)> {
        self.steps
            .iter()
            .filter_map(|s| s.cpu.conv_algorithm().map(|a| (s.info.node_index, a)))
            .collect()
    }
}

/// A node the generic path runs: the node (its constant inputs marked), its inputs' element
/// types (implicit inputs included) and its outputs', and what its reference kernel prepared
/// from its constant inputs at plan time (`reference::prepare`).
pub(super) type GenericNode = (
    Node,
    Vec<Option<DType>>,
    Vec<DType>,
    Option<Arc<super::reference::Prepared>>,
);

/// Where a value lives at run time.
#[derive(Clone, Debug)]
pub(crate) enum Slot {
    Const(Arc<RtTensor>),
    /// f32 activation in a planned buffer, `offset` elements in.
    Buffer {
        buffer: usize,
        offset: usize,
        shape: Vec<usize>,
    },
    /// Integer/bool run-time value, kept in a map.
    Dynamic {
        shape: Vec<usize>,
    },
    Unused,
}

/// One kernel call of the plan.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub info: StepInfo,
    /// What runs (the lowering's decision).
    pub kernel: Kernel,
    /// How it runs on the CPU (blockings, packed weights).
    pub cpu: cpu::Prepared,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
    pub node: NodeId,
    pub scratch: usize,
}

/// A compiled model: kernel calls in order, with planned buffers.
pub struct Plan {
    pub(super) steps: Vec<Step>,
    pub(super) slots: Vec<Slot>,
    pub(super) buffer_sizes: Vec<usize>,
    pub(super) scratch_len: usize,
    pub(super) inputs: Vec<(ValueId, String, Vec<usize>, bool)>,
    /// Per input, the range its random values are drawn from (`exec::index_range`).
    pub(super) integer_ranges: Vec<i64>,
    pub(super) outputs: Vec<(ValueId, String)>,
    pub(super) threads: usize,
    /// Bytes of all activation buffers (the peak: buffers are reused when lifetimes allow).
    pub peak_activation_bytes: u64,
    /// Bytes the activations would take without reuse.
    pub unplanned_activation_bytes: u64,
    /// Constants as f32, plus the GEMM-packed copies of convolution weights.
    pub weights_bytes: u64,
    pub(super) graph_names: Vec<String>,
    /// Generic steps need the graph's node attributes and their outputs' element types.
    /// Nodes run by the generic path, with their input and output element types.
    pub(super) generic_nodes: HashMap<NodeId, GenericNode>,
    pub(super) opset: i64,
}

/// Builds the plan. `states` come from `analysis::prepare_graph`; every shape must be known.
pub fn build_plan(
    graph: &Graph,
    order: &[NodeId],
    states: &HashMap<NodeId, NodeState>,
    options: &PlanOptions,
) -> Result<Plan, ExecError> {
    let missing = lower::missing_kernels(graph, order, states);
    if !missing.is_empty() {
        return Err(ExecError::MissingKernels(missing));
    }
    cpu::state_machine_caches();
    // Constant B operands packed at plan time are a second copy of those weights: at most
    // 1 GiB of them, and at most an eighth of the memory available now.
    let mut prepack_budget = (super::sysmem::available_bytes().0 / 8).min(1 << 30) as usize;
    let threads = options.threads.max(1);
    let weights_from_memory = weights_outgrow_cache(graph, order, states);
    let mut gemm_config = |m: usize, n: usize, k: usize| -> gemm::GemmConfig {
        let config = match &options.tuning {
            Some(cache) => match cache.lock() {
                Ok(mut cache) => cache.config(m, n, k, threads, options.tune),
                Err(_) => gemm::GemmConfig::default(),
            },
            None => gemm::GemmConfig::default(),
        };
        gemm::GemmConfig {
            b_from_memory: weights_from_memory,
            ..config
        }
    };
    let mut slots: Vec<Slot> = vec![Slot::Unused; graph.values.len()];
    let mut weights_bytes = 0u64;
    let mut const_cache: HashMap<ValueId, Arc<RtTensor>> = HashMap::new();
    // By the analysis's tensor: the run-time copy of each constant.
    let mut materialised: HashMap<*const crate::analysis::tensor::Tensor, Arc<RtTensor>> =
        HashMap::new();
    let mut packed_products: HashMap<super::lower::gemm::PackedBKey, cpu::Prepared> =
        HashMap::new();
    // Constants (initializers, folded values) are materialised lazily when a step reads them.
    let mut steps = Vec::new();
    let operand_views = crate::analysis::matmul_operand_views(graph, order, states);
    // A comparison that only a Cast to float reads runs in that Cast's step.
    let compare_casts = crate::analysis::compare_casts(graph, order, states);
    let fused_compares: std::collections::HashSet<NodeId> =
        compare_casts.values().copied().collect();
    for (index, &id) in order.iter().enumerate() {
        let node = &graph.dag[id];
        if node
            .outputs
            .first()
            .is_some_and(|out| operand_views.contains_key(out))
            || fused_compares.contains(&id)
        {
            // Read in place by the MatMuls that consume it, or run by the Cast that reads it:
            // no step, no buffer.
            continue;
        }
        // The node whose inputs the step reads and whose kernel it runs: the node itself, or
        // the comparison a Cast fuses.
        let fused_compare = compare_casts.get(&id).map(|&compare| &graph.dag[compare]);
        let source = fused_compare.unwrap_or(node);
        let state = states.get(&id).cloned().unwrap_or(NodeState::Inferred);
        if let NodeState::Failed(reason) = &state {
            return Err(node_error(
                node,
                format!("shape inference failed: {reason}"),
            ));
        }
        // A folded Transpose's or scaling's reader takes what it reads, through its view.
        let mut step_inputs: Vec<Option<ValueId>> = source
            .inputs
            .iter()
            .map(|slot| slot.map(|v| operand_views.get(&v).map_or(v, |view| view.source)))
            .collect();
        // A control-flow node also reads what its subgraphs read from this graph: implicit
        // inputs after its own, so that they are computed before it and kept alive for it.
        step_inputs.extend(implicit_inputs(graph, source)?.into_iter().map(Some));
        let views: Vec<Option<&crate::analysis::OperandView>> = source
            .inputs
            .iter()
            .map(|slot| slot.and_then(|v| operand_views.get(&v)))
            .collect();
        let input_facts: Vec<Option<&TensorFact>> = step_inputs
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
        let implicit = &step_inputs[source.inputs.len()..];
        for slot in source.inputs.iter().chain(implicit).flatten() {
            if let Some(konst) = &graph.values[*slot].fact.konst {
                if !const_cache.contains_key(slot) && !matches!(slots[*slot], Slot::Const(_)) {
                    // One copy per constant, however many values hold it (an Identity of a
                    // weight, a layer applied again with the same weights: the analysis
                    // passes the same tensor on).
                    let shared = materialised.get(&Arc::as_ptr(konst)).cloned();
                    let arc = match shared {
                        Some(arc) => Some(arc),
                        None => eval::materialise(konst).map(|t| {
                            weights_bytes += (t.len() * 4) as u64;
                            let arc = Arc::new(t);
                            materialised.insert(Arc::as_ptr(konst), arc.clone());
                            arc
                        }),
                    };
                    if let Some(arc) = arc {
                        const_cache.insert(*slot, arc.clone());
                        slots[*slot] = Slot::Const(arc);
                    }
                }
            }
        }
        let mut lowered = lower::lower(&Cx {
            graph,
            node: source,
            facts: &input_facts,
            slots: &slots,
            views: &views,
        })?;
        if fused_compare.is_some()
            && !lower::elementwise::compare_writes_floats(&mut lowered.kernel)
        {
            return Err(node_error(
                source,
                "a comparison lowered to no comparison kernel",
            ));
        }
        let algorithm = lower::conv::algorithm(&lowered.kernel, index, &options.conv_algorithms);
        let mut kernel = lowered.kernel;
        let packed_key = match &kernel {
            Kernel::MatMul(spec) => spec.constant_b_key(),
            _ => None,
        };
        // A product of the same constant B at the same shape reads the copy packed first.
        let packed_before = packed_key.and_then(|key| packed_products.get(&key).cloned());
        if let (Kernel::MatMul(spec), None) = (&mut kernel, &packed_before) {
            // Past the budget, B is packed per call as before (no second copy of it).
            let bytes = spec.constant_b_bytes();
            if bytes > prepack_budget {
                spec.release_constant_b();
            } else {
                prepack_budget -= bytes;
            }
        }
        let prepared = match packed_before {
            Some(prepared) => prepared,
            None => {
                let prepared = cpu::prepare(&kernel, algorithm, &mut gemm_config);
                // The packed copy lives next to the constant it was packed from.
                weights_bytes += prepared.packed_bytes() as u64;
                if let Some(key) = packed_key.filter(|_| prepared.packed_bytes() > 0) {
                    packed_products.insert(key, prepared.clone());
                }
                prepared
            }
        };
        if let Kernel::MatMul(spec) = &mut kernel {
            // Runs read the packed copy only.
            spec.release_constant_b();
        }
        let scratch = lowered.scratch.max(prepared.scratch_len());
        let step = Step {
            info: StepInfo {
                node_index: index,
                name: node.name.clone(),
                op_type: node.op_type.clone(),
                flops: lowered.flops,
            },
            kernel,
            cpu: prepared,
            inputs: step_inputs,
            outputs: node.outputs.clone(),
            node: id,
            scratch,
        };
        if folded {
            // An opaque constant (e.g. a transposed weight): run its kernel once now.
            let outputs = eval::run_once(graph, &step, &slots, options.threads, graph.opset)?;
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
            // Every float type is held and computed as f32 (f16, bf16 and f64 models run at
            // f32 precision; the advisor's low-precision ops quantize in their own kernels).
            slots[v] = if fact.dtype.is_float() {
                Slot::Buffer {
                    buffer: usize::MAX,
                    offset: 0,
                    shape,
                }
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
        slots[v] = if integer {
            Slot::Dynamic {
                shape: shape.clone(),
            }
        } else {
            Slot::Buffer {
                buffer: usize::MAX,
                offset: 0,
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
    // A graph output that folded to a constant (a Constant node, shape arithmetic) and that
    // no step reads is materialised here, or the run would have nothing to return for it.
    for &(v, _) in &outputs {
        if matches!(slots[v], Slot::Unused) {
            if let Some(t) = graph.values[v]
                .fact
                .konst
                .as_deref()
                .and_then(eval::materialise)
            {
                slots[v] = Slot::Const(Arc::new(t));
            }
        }
    }
    if options.nhwc_pairs {
        for (pointwise, depthwise) in nhwc_pairs(&steps, &outputs) {
            for (step, side) in [
                (pointwise, PairLayout::NhwcOutput),
                (depthwise, PairLayout::NhwcInput),
            ] {
                let step = &mut steps[step];
                if let Kernel::Conv(ConvKernel::Forward { layout, .. }) = &mut step.kernel {
                    *layout = side;
                }
            }
            // The pointwise weights are packed again for the pixel-major GEMM.
            let step = &mut steps[pointwise];
            weights_bytes -= step.cpu.packed_bytes() as u64;
            step.cpu = cpu::prepare(&step.kernel, ConvAlgorithm::Direct, &mut gemm_config);
            weights_bytes += step.cpu.packed_bytes() as u64;
        }
    }
    // Splits and Slices first: a Concat's part written by one that copies nothing has no
    // writer to place, and a part whose writer reads its output reads its input's buffer.
    let mut placements = if options.slice_views {
        let eligible = crate::analysis::slice_views(graph, order, states);
        let (placements, views) = slice_placements(&steps, &slots, &eligible);
        for &step in &views {
            steps[step].kernel = Kernel::SliceView;
        }
        placements
    } else {
        Vec::new()
    };
    if options.concat_in_place {
        let eligible = crate::analysis::in_place_concats(graph, order, states);
        let (concat_parts, in_place) = concat_placements(&steps, &slots, &outputs, &eligible);
        for &step in &in_place {
            steps[step].kernel = Kernel::InPlace;
        }
        placements.extend(concat_parts);
    }
    let buffers = plan_buffers(
        &steps,
        &mut slots,
        &inputs,
        &outputs,
        &placements,
        options.keep_inputs,
    );
    let peak_activation_bytes = buffers.sizes.iter().map(|&s| s as u64 * 4).sum::<u64>();
    let scratch_len = steps.iter().map(|s| s.scratch).max().unwrap_or(0);
    let generic_nodes: HashMap<NodeId, GenericNode> = steps
        .iter()
        .filter(|s| matches!(s.kernel, Kernel::Generic))
        .map(|s| {
            let node = &graph.dag[s.node];
            let (in_types, out_types) = eval::element_types(graph, &s.inputs, &node.outputs);
            let given: Vec<bool> = s.inputs.iter().map(Option::is_some).collect();
            let constants: Vec<Option<&RtTensor>> = s
                .inputs
                .iter()
                .map(|v| match v.map(|v| &slots[v]) {
                    Some(Slot::Const(t)) => Some(&**t),
                    _ => None,
                })
                .collect();
            let prepared = super::reference::prepare(node, &given, &constants).map(Arc::new);
            let node = eval::generic_node(graph, &s.inputs, node);
            (s.node, (node, in_types, out_types, prepared))
        })
        .collect();
    weights_bytes += generic_nodes
        .values()
        .filter_map(|(_, _, _, prepared)| prepared.as_ref().map(|p| p.bytes()))
        .sum::<u64>();
    let total = peak_activation_bytes + weights_bytes + scratch_len as u64 * 4;
    if total > options.memory_limit_bytes {
        return Err(ExecError::TooLarge {
            bytes: total,
            limit: options.memory_limit_bytes,
            limit_source: options.memory_limit_source.clone(),
        });
    }
    let integer_ranges = inputs
        .iter()
        .map(|&(v, _, _, integer)| {
            if integer {
                super::index_range(graph, v)
            } else {
                super::RANDOM_INTEGER_RANGE
            }
        })
        .collect();
    Ok(Plan {
        steps,
        slots,
        buffer_sizes: buffers.sizes,
        scratch_len,
        inputs,
        integer_ranges,
        outputs,
        threads: options.threads.max(1),
        peak_activation_bytes,
        unplanned_activation_bytes: buffers.unplanned_bytes,
        weights_bytes,
        graph_names: graph.values.iter().map(|v| v.name.clone()).collect(),
        generic_nodes,
        opset: graph.opset,
    })
}

/// Pointwise → depthwise pairs whose activation between them is held NHWC (`(pointwise
/// step, depthwise step)`). MobileNet-style blocks expand channels with a 1×1 convolution
/// and filter each with a 3×3 depthwise one. On small planes the 1×1 runs pixel-major (its
/// GEMM's rows are pixels) and transposes its result to NCHW, and the depthwise kernel,
/// one channel per vector lane, transposes it back: in a pair, neither transpose runs.
/// A pair is a one-group, one-image pointwise convolution with no residual whose only output
/// is read by nothing but the depthwise convolution's input (not a graph output, so no
/// caller sees the NHWC tensor), and a depthwise geometry the NHWC kernel runs
/// (`depthwise::nhwc_input_applies`: AVX-512 on planes of at most 256 outputs, AVX2 within its
/// eight-channel kernel's limits), and the 1×1's
/// pixel-major GEMM must waste no more of its tiles than the channel-major one
/// (`conv::pixel_major_fits`).
fn nhwc_pairs(steps: &[Step], outputs: &[(ValueId, String)]) -> Vec<(usize, usize)> {
    let mut readers: HashMap<ValueId, Vec<(usize, usize)>> = HashMap::new();
    for (index, step) in steps.iter().enumerate() {
        for (slot, v) in step.inputs.iter().enumerate() {
            if let Some(v) = v {
                readers.entry(*v).or_default().push((index, slot));
            }
        }
    }
    let forward = |step: &Step| match &step.kernel {
        Kernel::Conv(ConvKernel::Forward {
            geom,
            residual,
            layout: PairLayout::Nchw,
            ..
        }) => Some((*geom, *residual)),
        _ => None,
    };
    let isa = gemm::GemmConfig::default().isa;
    let mut pairs = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let Some((geom, residual)) = forward(step) else {
            continue;
        };
        if residual || !geom.is_pointwise() || geom.group != 1 || geom.batch != 1 {
            continue;
        }
        let [out] = step.outputs[..] else {
            continue;
        };
        if outputs.iter().any(|(v, _)| *v == out) {
            continue;
        }
        let Some([(reader, 0)]) = readers.get(&out).map(|r| &r[..]) else {
            continue;
        };
        let Some((dw, _)) = forward(&steps[*reader]) else {
            continue;
        };
        if crate::kernels::conv::depthwise::nhwc_input_applies(&dw)
            && crate::kernels::conv::pixel_major_fits(isa, &geom)
        {
            pairs.push((index, *reader));
        }
    }
    pairs
}

/// Runs the buffer planner over the steps and writes each f32 value's buffer into its slot.
fn plan_buffers(
    steps: &[Step],
    slots: &mut [Slot],
    inputs: &[(ValueId, String, Vec<usize>, bool)],
    outputs: &[(ValueId, String)],
    placements: &[memory::Placement],
    keep_inputs: bool,
) -> memory::BufferPlan {
    let uses: Vec<memory::StepUse> = steps
        .iter()
        .map(|s| memory::StepUse {
            inputs: &s.inputs,
            outputs: &s.outputs,
            view: matches!(s.kernel, Kernel::View),
        })
        .collect();
    let buffer_len: Vec<Option<usize>> = slots
        .iter()
        .map(|slot| match slot {
            Slot::Buffer { shape, .. } => Some(shape.iter().product()),
            _ => None,
        })
        .collect();
    let graph_inputs: Vec<(ValueId, usize)> = inputs
        .iter()
        .filter(|(_, _, _, integer)| !integer)
        .map(|(v, _, shape, _)| (*v, shape.iter().product()))
        .collect();
    let mut graph_outputs: Vec<ValueId> = outputs.iter().map(|(v, _)| *v).collect();
    if keep_inputs {
        // Held to the end like outputs: never handed to another value.
        graph_outputs.extend(graph_inputs.iter().map(|(v, _)| *v));
    }
    let plan = memory::assign_buffers(
        &uses,
        &buffer_len,
        &graph_inputs,
        &graph_outputs,
        placements,
    );
    for (v, slot) in slots.iter_mut().enumerate() {
        if let Slot::Buffer { buffer, offset, .. } = slot {
            if let Some(b) = plan.buffer_of[v] {
                *buffer = b;
                *offset = plan.offset_of[v];
            }
        }
    }
    plan
}

/// Concats that copy nothing (issue 16's zero-copy concat, as DenseNet's blocks, Inception's
/// branches and detector necks need): of the Concats `analysis::in_place_concats` names (the
/// ones the cost model counts as views), those whose every input is also, for this backend, a
/// planned f32 value written by one step of this plan (not the generic evaluator's, nor a
/// Split or Slice that copies nothing) that writes no other planned buffer; and no producer
/// may read a value of the same buffer (the runtime hands a step's output buffer out
/// mutably). Returns the placements and the Concat steps left with nothing to run.
fn concat_placements(
    steps: &[Step],
    slots: &[Slot],
    outputs: &[(ValueId, String)],
    eligible: &std::collections::HashSet<NodeId>,
) -> (Vec<memory::Placement>, Vec<usize>) {
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (index, step) in steps.iter().enumerate() {
        for &v in &step.outputs {
            producer.insert(v, index);
        }
    }
    let is_buffer = |v: ValueId| matches!(slots[v], Slot::Buffer { .. });
    let mut candidates: Vec<(usize, Vec<memory::Placement>)> = Vec::new();
    let mut placed: std::collections::HashSet<ValueId> = std::collections::HashSet::new();
    for (index, step) in steps.iter().enumerate() {
        let Kernel::Movement(lower::movement::MovementKernel::Concat { axis, .. }) = &step.kernel
        else {
            continue;
        };
        // The analysis's rule first (it costs exactly these as views), then this backend's.
        if !eligible.contains(&step.node) {
            continue;
        }
        let Some(&whole) = step.outputs.first() else {
            continue;
        };
        let Slot::Buffer { shape, .. } = &slots[whole] else {
            continue;
        };
        if shape[..*axis].iter().product::<usize>() != 1 {
            continue;
        }
        let mut parts = Vec::new();
        let mut offset = 0;
        let mut ok = true;
        for input in &step.inputs {
            let Some(v) = *input else {
                ok = false;
                break;
            };
            let Slot::Buffer { shape, .. } = &slots[v] else {
                ok = false;
                break;
            };
            let single_writer = producer.get(&v).is_some_and(|&p| {
                !matches!(
                    steps[p].kernel,
                    Kernel::View | Kernel::Generic | Kernel::InPlace | Kernel::SliceView
                ) && steps[p].outputs.iter().filter(|&&o| is_buffer(o)).count() == 1
            });
            let read_once = step.inputs.iter().filter(|&&i| i == Some(v)).count() == 1;
            let graph_output = outputs.iter().any(|(o, _)| *o == v);
            if !single_writer || !read_once || graph_output || placed.contains(&v) {
                ok = false;
                break;
            }
            parts.push(memory::Placement {
                part: v,
                whole,
                offset,
            });
            offset += shape.iter().product::<usize>();
        }
        if ok && !parts.is_empty() {
            placed.extend(parts.iter().map(|p| p.part));
            candidates.push((index, parts));
        }
    }
    // The same conflict rule as the analysis, over this backend's (fewer) candidates; a
    // Split or Slice that copies nothing views its input through each output.
    let mut views: HashMap<ValueId, ValueId> = steps
        .iter()
        .filter(|step| matches!(step.kernel, Kernel::View))
        .filter_map(|step| Some((*step.outputs.first()?, (*step.inputs.first()?)?)))
        .collect();
    for step in steps
        .iter()
        .filter(|step| matches!(step.kernel, Kernel::SliceView))
    {
        if let Some(Some(source)) = step.inputs.first() {
            views.extend(step.outputs.iter().map(|&out| (out, *source)));
        }
    }
    let mut offsets: HashMap<ValueId, usize> = HashMap::new();
    let mut keyed: Vec<(usize, Vec<ValueId>)> = candidates
        .into_iter()
        .map(|(index, parts)| {
            offsets.extend(parts.iter().map(|p| (p.part, p.offset)));
            (index, parts.into_iter().map(|p| p.part).collect())
        })
        .collect();
    crate::analysis::drop_self_reading_concats(
        &mut keyed,
        &views,
        |part| {
            steps[producer[&part]]
                .inputs
                .iter()
                .flatten()
                .copied()
                .collect()
        },
        |index| steps[index].outputs[0],
    );
    let in_place = keyed.iter().map(|(index, _)| *index).collect();
    let placements = keyed
        .into_iter()
        .flat_map(|(index, parts)| {
            let whole = steps[index].outputs[0];
            let offsets = &offsets;
            parts.into_iter().map(move |part| memory::Placement {
                part,
                whole,
                offset: offsets[&part],
            })
        })
        .collect();
    (placements, in_place)
}

/// Splits and Slices that copy nothing (issue 16's zero-copy Split and Slice): of those
/// `analysis::slice_views` names (the ones the cost model counts as views), those this plan
/// lowered to its Split or Slice kernel whose input and outputs are planned f32 values.
/// Each output is placed at its offset in the input: a Split's output k after the elements of
/// outputs 0..k (the input's dims before the axis are all 1), a Slice's where
/// `analysis::slice_offset` puts it. Returns the placements and the steps left with nothing
/// to run.
fn slice_placements(
    steps: &[Step],
    slots: &[Slot],
    eligible: &std::collections::HashSet<NodeId>,
) -> (Vec<memory::Placement>, Vec<usize>) {
    let is_buffer = |v: ValueId| matches!(slots[v], Slot::Buffer { .. });
    let mut placements = Vec::new();
    let mut views = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if !eligible.contains(&step.node) {
            continue;
        }
        let Kernel::Movement(kernel) = &step.kernel else {
            continue;
        };
        // Each output's offset in the input, in elements.
        let offsets: Vec<usize> = match kernel {
            lower::movement::MovementKernel::Split { axis, shape, sizes }
                if sizes.len() == step.outputs.len() =>
            {
                let run_len: usize = shape[axis + 1..].iter().product();
                sizes
                    .iter()
                    .scan(0, |offset, &size| {
                        let at = *offset;
                        *offset += size * run_len;
                        Some(at)
                    })
                    .collect()
            }
            lower::movement::MovementKernel::Slice {
                shape,
                starts,
                steps,
                out_shape,
            } => match crate::analysis::slice_offset(shape, starts, steps, out_shape) {
                Some(offset) => vec![offset],
                None => continue,
            },
            _ => continue,
        };
        let Some(Some(whole)) = step.inputs.first().copied() else {
            continue;
        };
        // Every float output of a step has a planned buffer, read or not.
        if !is_buffer(whole) || !step.outputs.iter().all(|&out| is_buffer(out)) {
            continue;
        }
        for (&part, &offset) in step.outputs.iter().zip(&offsets) {
            placements.push(memory::Placement {
                part,
                whole,
                offset,
            });
        }
        views.push(index);
    }
    (placements, views)
}

/// The values of `graph` that `node`'s subgraphs read (none for other nodes), in the order of
/// `control::free_names`.
pub(super) fn implicit_inputs(graph: &Graph, node: &Node) -> Result<Vec<ValueId>, ExecError> {
    if !node.attrs.has_subgraph() {
        return Ok(Vec::new());
    }
    crate::analysis::ops::control::free_names(&node.attrs)
        .into_iter()
        .map(|name| {
            graph.value_by_name(&name).ok_or_else(|| {
                node_error(
                    node,
                    format!("a subgraph reads `{name}`, which the graph does not define"),
                )
            })
        })
        .collect()
}

/// Whether the float weights the plan's ops read (`analysis::footprint::model_weight_bytes`)
/// as a set outgrow the last-level cache: each run then streams every weight matrix from
/// memory, however small (an LLM's decode step: GPT-2's 0.5 GB of 2-9 MB matrices), and the
/// GEMV forms prefetch them (`GemmConfig::b_from_memory`).
fn weights_outgrow_cache(
    graph: &Graph,
    order: &[NodeId],
    states: &HashMap<NodeId, NodeState>,
) -> bool {
    crate::analysis::footprint::model_weight_bytes(graph, order, states) > gemm::last_level_bytes()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "plan_slice_tests.rs"]
mod slice_tests;
