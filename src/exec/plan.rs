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
    /// The algorithm each convolution step runs, by node index (direct ones included).
    pub fn conv_algorithms(&self) -> Vec<(usize, ConvAlgorithm)> {
        self.steps
            .iter()
            .filter_map(|s| s.cpu.conv_algorithm().map(|a| (s.info.node_index, a)))
            .collect()
    }
}

/// A node the generic path runs: the node, its inputs' element types (implicit inputs
/// included) and its outputs'.
pub(super) type GenericNode = (Node, Vec<Option<DType>>, Vec<DType>);

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
    let operand_views = crate::analysis::matmul_operand_views(graph, order, states);
    for (index, &id) in order.iter().enumerate() {
        let node = &graph.dag[id];
        if node
            .outputs
            .first()
            .is_some_and(|out| operand_views.contains_key(out))
        {
            // Read in place by the MatMuls that consume it: no step, no buffer.
            continue;
        }
        let state = states.get(&id).cloned().unwrap_or(NodeState::Inferred);
        if let NodeState::Failed(reason) = &state {
            return Err(node_error(
                node,
                format!("shape inference failed: {reason}"),
            ));
        }
        // A folded Transpose's or scaling's reader takes what it reads, through its view.
        let mut step_inputs: Vec<Option<ValueId>> = node
            .inputs
            .iter()
            .map(|slot| slot.map(|v| operand_views.get(&v).map_or(v, |view| view.source)))
            .collect();
        // A control-flow node also reads what its subgraphs read from this graph: implicit
        // inputs after its own, so that they are computed before it and kept alive for it.
        step_inputs.extend(implicit_inputs(graph, node)?.into_iter().map(Some));
        let views: Vec<Option<&crate::analysis::OperandView>> = node
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
        let implicit = &step_inputs[node.inputs.len()..];
        for slot in node.inputs.iter().chain(implicit).flatten() {
            if let Some(konst) = &graph.values[*slot].fact.konst {
                if !const_cache.contains_key(slot) && !matches!(slots[*slot], Slot::Const(_)) {
                    if let Some(t) = eval::materialise(konst) {
                        weights_bytes += (t.len() * 4) as u64;
                        let arc = Arc::new(t);
                        const_cache.insert(*slot, arc.clone());
                        slots[*slot] = Slot::Const(arc);
                    }
                }
            }
        }
        let lowered = lower::lower(&Cx {
            graph,
            node,
            facts: &input_facts,
            slots: &slots,
            views: &views,
        })?;
        let algorithm = lower::conv::algorithm(&lowered.kernel, index, &options.conv_algorithms);
        let prepared = cpu::prepare(&lowered.kernel, algorithm, &mut gemm_config);
        let scratch = lowered.scratch.max(prepared.scratch_len());
        // The packed copy lives next to the constant it was packed from.
        weights_bytes += prepared.packed_bytes() as u64;
        let step = Step {
            info: StepInfo {
                node_index: index,
                name: node.name.clone(),
                op_type: node.op_type.clone(),
                flops: lowered.flops,
            },
            kernel: lowered.kernel,
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
    let (placements, in_place) = if options.concat_in_place {
        let eligible = crate::analysis::in_place_concats(graph, order, states);
        concat_placements(&steps, &slots, &outputs, &eligible)
    } else {
        (Vec::new(), Vec::new())
    };
    for &step in &in_place {
        steps[step].kernel = Kernel::InPlace;
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
        .map(|s| {
            let node = &graph.dag[s.node];
            let (in_types, out_types) = eval::element_types(graph, &s.inputs, &node.outputs);
            (s.node, (node.clone(), in_types, out_types))
        })
        .collect();
    Ok(Plan {
        steps,
        slots,
        buffer_sizes: buffers.sizes,
        scratch_len,
        inputs,
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
/// sixteen channels per vector, transposes it back: in a pair, neither transpose runs.
/// A pair is a one-group, one-image pointwise convolution with no residual whose only output
/// is read by nothing but the depthwise convolution's input (not a graph output, so no
/// caller sees the NHWC tensor), and a depthwise geometry the NHWC kernel runs
/// (`depthwise::nhwc_input_applies`: AVX-512, planes of at most 256 outputs).
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
        if crate::kernels::conv::depthwise::nhwc_input_applies(&dw) {
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
/// planned f32 value written by one step of this plan (not the generic evaluator's) that
/// writes no other planned buffer; and no producer may read a value of the same buffer (the
/// runtime hands a step's output buffer out mutably). Returns the placements and the Concat
/// steps left with nothing to run.
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
                    Kernel::View | Kernel::Generic | Kernel::InPlace
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
    // The same conflict rule as the analysis, over this backend's (fewer) candidates.
    let views: HashMap<ValueId, ValueId> = steps
        .iter()
        .filter(|step| matches!(step.kernel, Kernel::View))
        .filter_map(|step| Some((*step.outputs.first()?, (*step.inputs.first()?)?)))
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Bindings, Prepared};
    use crate::builtin::builder::{ConvSpec, GraphBuilder, SigDim};
    use crate::builtin::WeightFill;

    /// A DenseNet-like block: `x → conv a`, `x → conv b`, `c = concat(a, b)` (channels),
    /// `d = concat(c, conv(relu(c)))`, `y = relu(d)`: both Concats are placed (the inner one
    /// inside the outer), so they run nothing, the block lives in one buffer, and the output
    /// is what copying gives, bit for bit. (A producer reading its own group, `conv(c)` here
    /// without the relu, would keep its Concat copying: the runtime lends a step's output
    /// buffer mutably.)
    #[test]
    fn nested_concats_are_written_in_place() {
        check_block(true);
    }

    /// The same block with `conv(c)` reading the inner Concat directly: the outer Concat
    /// copies (its producer would read the buffer it writes), the inner one is still placed,
    /// and the output is unchanged.
    #[test]
    fn a_producer_reading_its_own_buffer_keeps_the_concat_copying() {
        check_block(false);
    }

    /// The built graph, imported and prepared, and its plan with the default options.
    fn default_plan(builder: GraphBuilder, name: &str) -> (Prepared, Plan) {
        let proto = builder.finish(name);
        let graph = crate::analysis::import::import_model(
            &proto,
            std::path::Path::new("."),
            std::path::Path::new(&format!("{name}.onnx")),
        )
        .unwrap();
        let prepared = Prepared::new(graph, &Bindings::default()).unwrap();
        let plan = build_plan(
            &prepared.graph,
            &prepared.order,
            &prepared.states,
            &PlanOptions::default(),
        )
        .unwrap();
        (prepared, plan)
    }

    fn check_block(relu_between: bool) {
        let mut b = GraphBuilder::new(WeightFill::Random(3));
        let x = b.input(
            "x",
            1,
            &[
                SigDim::Fixed(1),
                SigDim::Fixed(4),
                SigDim::Fixed(6),
                SigDim::Fixed(6),
            ],
        );
        let a = b.conv(&x, 4, ConvSpec::new(3, 3, 1));
        let bb = b.conv(&x, 4, ConvSpec::new(5, 1, 1));
        let c = b.node(
            "Concat",
            &[&a, &bb],
            vec![crate::builtin::builder::attr_int("axis", 1)],
        );
        let r = if relu_between { b.relu(&c) } else { c.clone() };
        let e = b.conv(&r, 8, ConvSpec::new(2, 3, 1));
        let d = b.node(
            "Concat",
            &[&c, &e],
            vec![crate::builtin::builder::attr_int("axis", 1)],
        );
        let y = b.relu(&d);
        b.output(
            &y,
            1,
            &[
                SigDim::Fixed(1),
                SigDim::Fixed(10),
                SigDim::Fixed(6),
                SigDim::Fixed(6),
            ],
        );
        let (prepared, plan) = default_plan(b, "concats");
        let concats: Vec<&Step> = plan
            .steps
            .iter()
            .filter(|s| s.info.op_type == "Concat")
            .collect();
        assert_eq!(concats.len(), 2);
        let in_place: Vec<bool> = concats
            .iter()
            .map(|s| matches!(s.kernel, Kernel::InPlace))
            .collect();
        assert_eq!(in_place, [true, relu_between]);
        let slot = |v: ValueId| match &plan.slots[v] {
            Slot::Buffer { buffer, offset, .. } => (*buffer, *offset),
            other => panic!("{other:?}"),
        };
        let value = |name: &str| prepared.graph.value_by_name(name).unwrap();
        // a and b at their offsets of the inner Concat's buffer (0 and 3 planes of 36); with
        // the outer one placed too, that buffer is d's and e sits 8 planes in.
        let (inner, inner_offset) = slot(value(&c));
        assert_eq!(slot(value(&a)), (inner, inner_offset));
        assert_eq!(slot(value(&bb)), (inner, inner_offset + 3 * 36));
        if relu_between {
            let (whole, _) = slot(value(&d));
            assert_eq!((inner, inner_offset), (whole, 0));
            assert_eq!(slot(value(&e)), (whole, 8 * 36));
        } else {
            assert_ne!(slot(value(&c)).0, slot(value(&d)).0);
        }
        // The same values, bit for bit, as the plan whose Concats copy; and less memory.
        let copying = build_plan(
            &prepared.graph,
            &prepared.order,
            &prepared.states,
            &PlanOptions {
                concat_in_place: false,
                ..PlanOptions::default()
            },
        )
        .unwrap();
        assert!(copying
            .steps
            .iter()
            .all(|s| !matches!(s.kernel, Kernel::InPlace)));
        assert!(
            plan.peak_activation_bytes < copying.peak_activation_bytes || !relu_between,
            "{} vs {}",
            plan.peak_activation_bytes,
            copying.peak_activation_bytes
        );
        let input: Vec<f32> = (0..4 * 36)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let inputs: HashMap<String, RtTensor> = [(
            "x".to_string(),
            RtTensor {
                shape: vec![1, 4, 6, 6],
                data: super::super::RtData::F32(input),
            },
        )]
        .into_iter()
        .collect();
        let run = |plan: &Plan| {
            let mut ws = plan.workspace();
            // Twice on one workspace: a stale slice must not survive into the second run.
            plan.run(&mut ws, &inputs, None).unwrap();
            plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32()
        };
        let got = run(&plan);
        assert_eq!(got, run(&copying));
        assert_eq!(got.len(), 10 * 36);
    }

    /// A MobileNet-style pair, 1×1 convolution (8 → 40 channels) then a 3×3 depthwise one
    /// (stride 1 and 2, 14² planes), both with bias: on AVX-512 the activation between them is
    /// held NHWC (the pointwise side writes it, the depthwise side reads it) and the output is
    /// the all-NCHW plan's; when the pointwise output is also a graph output, or the CPU has
    /// no AVX-512, no pair is made.
    #[test]
    fn pointwise_depthwise_pairs_hold_their_activation_nhwc() {
        for (stride, pointwise_is_output) in [(1, false), (2, false), (1, true)] {
            let mut b = GraphBuilder::new(WeightFill::Random(11));
            let dims = |d: &[i64]| d.iter().map(|&n| SigDim::Fixed(n)).collect::<Vec<_>>();
            let x = b.input("x", 1, &dims(&[1, 8, 14, 14]));
            let pw = b.conv(
                &x,
                8,
                ConvSpec {
                    bias: true,
                    ..ConvSpec::new(40, 1, 1)
                },
            );
            let dw = b.conv(
                &pw,
                40,
                ConvSpec {
                    bias: true,
                    group: 40,
                    ..ConvSpec::new(40, 3, stride)
                },
            );
            let side = 14 / stride;
            b.output(&dw, 1, &dims(&[1, 40, side, side]));
            if pointwise_is_output {
                b.output(&pw, 1, &dims(&[1, 40, 14, 14]));
            }
            let (prepared, plan) = default_plan(b, "pair");
            let layouts: Vec<PairLayout> = plan
                .steps
                .iter()
                .map(|s| match &s.kernel {
                    Kernel::Conv(ConvKernel::Forward { layout, .. }) => *layout,
                    other => panic!("{other:?}"),
                })
                .collect();
            let paired = !pointwise_is_output && gemm::Isa::detect() == gemm::Isa::Avx512;
            if paired {
                assert_eq!(layouts, [PairLayout::NhwcOutput, PairLayout::NhwcInput]);
            } else {
                assert_eq!(layouts, [PairLayout::Nchw, PairLayout::Nchw]);
            }
            let nchw = build_plan(
                &prepared.graph,
                &prepared.order,
                &prepared.states,
                &PlanOptions {
                    nhwc_pairs: false,
                    ..PlanOptions::default()
                },
            )
            .unwrap();
            let input: Vec<f32> = (0..8 * 196)
                .map(|i| ((i * 29 % 23) as f32 - 11.0) / 7.0)
                .collect();
            let inputs: HashMap<String, RtTensor> = [(
                "x".to_string(),
                RtTensor {
                    shape: vec![1, 8, 14, 14],
                    data: super::super::RtData::F32(input),
                },
            )]
            .into_iter()
            .collect();
            let run = |plan: &Plan| {
                let mut ws = plan.workspace();
                plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32()
            };
            let (got, want) = (run(&plan), run(&nchw));
            assert_eq!(got.len() as i64, 40 * side * side);
            for (at, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{at}: {g} vs {w}");
            }
        }
    }

    /// Scaled attention as exporters write it, `MatMul(s·Q, Transpose(K)·t)`: the Transpose
    /// and both scalar Muls fold into the MatMul's read (strides and alpha), so only the MatMul
    /// runs, and its output is the definition's. A second reader that is not a MatMul keeps
    /// the K branch's steps.
    #[test]
    fn scaled_transposed_operands_fold_into_the_matmul() {
        for other_reader in [false, true] {
            let mut b = GraphBuilder::new(WeightFill::Random(5));
            let dims = |d: &[u64]| {
                d.iter()
                    .map(|&n| SigDim::Fixed(n as i64))
                    .collect::<Vec<_>>()
            };
            let q = b.input("q", 1, &dims(&[1, 2, 3, 4]));
            let k = b.input("k", 1, &dims(&[1, 2, 5, 4]));
            let q_scale = b.scalar_const("q_scale", 0.25);
            let k_scale = b.scalar_const("k_scale", 0.5);
            let qs = b.node("Mul", &[&q_scale, &q], vec![]);
            let kt = b.transpose(&k, &[0, 1, 3, 2]);
            let kts = b.node("Mul", &[&kt, &k_scale], vec![]);
            let scores = b.node("MatMul", &[&qs, &kts], vec![]);
            b.output(&scores, 1, &dims(&[1, 2, 3, 5]));
            if other_reader {
                let relu = b.relu(&kts);
                b.output(&relu, 1, &dims(&[1, 2, 4, 5]));
            }
            let (_, plan) = default_plan(b, "attention");
            let ops: Vec<&str> = plan.steps.iter().map(|s| s.info.op_type.as_str()).collect();
            if other_reader {
                assert_eq!(ops, ["Transpose", "Mul", "MatMul", "Relu"]);
            } else {
                assert_eq!(ops, ["MatMul"]);
            }
            let values = |n: usize, seed: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * 7 + seed) % 11) as f32 / 4.0 - 1.2)
                    .collect()
            };
            let (q_data, k_data) = (values(24, 1), values(40, 3));
            let inputs: HashMap<String, RtTensor> = [
                ("q", vec![1, 2, 3, 4], q_data.clone()),
                ("k", vec![1, 2, 5, 4], k_data.clone()),
            ]
            .into_iter()
            .map(|(name, shape, data)| {
                let data = super::super::RtData::F32(data);
                (name.to_string(), RtTensor { shape, data })
            })
            .collect();
            let mut ws = plan.workspace();
            let got = plan.run(&mut ws, &inputs, None).unwrap()[0].1.to_f32();
            for head in 0..2 {
                for row in 0..3 {
                    for col in 0..5 {
                        let dot: f32 = (0..4)
                            .map(|d| {
                                q_data[head * 12 + row * 4 + d] * k_data[head * 20 + col * 4 + d]
                            })
                            .sum();
                        let at = head * 15 + row * 5 + col;
                        assert!(
                            (got[at] - 0.125 * dot).abs() < 1e-5,
                            "{at}: {} vs {}",
                            got[at],
                            0.125 * dot
                        );
                    }
                }
            }
        }
    }

    /// A window covering the whole unpadded plane (`AveragePool` 5×4 over 5×4 planes, as older
    /// exports end ResNets with a 7×7 one) runs as a global pool, with the window's values.
    #[test]
    fn a_whole_plane_window_runs_as_a_global_pool() {
        let mut b = GraphBuilder::new(WeightFill::Random(7));
        let dims = [1, 3, 5, 4].map(SigDim::Fixed);
        let x = b.input("x", 1, &dims);
        let window = || vec![crate::builtin::builder::attr_ints("kernel_shape", &[5, 4])];
        let avg = b.node("AveragePool", &[&x], window());
        let max = b.node("MaxPool", &[&x], window());
        let out = [1, 3, 1, 1].map(SigDim::Fixed);
        b.output(&avg, 1, &out);
        b.output(&max, 1, &out);
        let (_, plan) = default_plan(b, "whole_plane");
        let globals = plan
            .steps
            .iter()
            .filter(|s| {
                matches!(
                    s.kernel,
                    Kernel::Pool(super::super::lower::pool::PoolKernel::Global { plane: 20, .. })
                )
            })
            .count();
        assert_eq!(globals, 2);
        let input: Vec<f32> = (0..60).map(|i| ((i * 7 % 11) as f32) - 5.0).collect();
        let inputs: HashMap<String, RtTensor> = [(
            "x".to_string(),
            RtTensor {
                shape: vec![1, 3, 5, 4],
                data: super::super::RtData::F32(input.clone()),
            },
        )]
        .into_iter()
        .collect();
        let mut ws = plan.workspace();
        let outputs = plan.run(&mut ws, &inputs, None).unwrap();
        let planes: Vec<&[f32]> = input.chunks(20).collect();
        let mean: Vec<f32> = planes
            .iter()
            .map(|p| p.iter().sum::<f32>() / 20.0)
            .collect();
        let most: Vec<f32> = planes
            .iter()
            .map(|p| p.iter().copied().fold(f32::MIN, f32::max))
            .collect();
        let got_mean = outputs[0].1.to_f32();
        for (g, w) in got_mean.iter().zip(&mean) {
            assert!((g - w).abs() < 1e-5, "{got_mean:?} vs {mean:?}");
        }
        assert_eq!(outputs[1].1.to_f32(), most);
    }
}
