//! Plan building: walks the topological order, lowers each node to a kernel description
//! (`lower`), has the CPU backend prepare it (`cpu::prepare`), evaluates opaque constants once,
//! and hands the step list to the buffer planner (`memory`). The plan types live here; running
//! a plan is `run.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use super::lower::{self, Cx, Kernel};
use super::{cpu, dims, eval, memory, node_error, ExecError, RtTensor};
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

/// Where a value lives at run time.
#[derive(Clone, Debug)]
pub(crate) enum Slot {
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
    /// Generic steps need the graph's node attributes.
    pub(super) generic_nodes: HashMap<NodeId, Node>,
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
    let folded_transposes = crate::analysis::foldable_transposes(graph, order, states);
    for (index, &id) in order.iter().enumerate() {
        let node = &graph.dag[id];
        if node
            .outputs
            .first()
            .is_some_and(|out| folded_transposes.contains_key(out))
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
        // A folded Transpose's reader takes its input, through its permutation.
        let step_inputs: Vec<Option<ValueId>> = node
            .inputs
            .iter()
            .map(|slot| slot.map(|v| folded_transposes.get(&v).map_or(v, |(source, _)| *source)))
            .collect();
        let views: Vec<Option<Vec<usize>>> = node
            .inputs
            .iter()
            .map(|slot| slot.and_then(|v| folded_transposes.get(&v).map(|(_, perm)| perm.clone())))
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
        for slot in node.inputs.iter().flatten() {
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
        let prepared = cpu::prepare(&lowered.kernel, &mut gemm_config);
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
            scratch: lowered.scratch,
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
    let buffers = plan_buffers(&steps, &mut slots, &inputs, &outputs);
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
        .map(|s| (s.node, graph.dag[s.node].clone()))
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

/// Runs the buffer planner over the steps and writes each f32 value's buffer into its slot.
fn plan_buffers(
    steps: &[Step],
    slots: &mut [Slot],
    inputs: &[(ValueId, String, Vec<usize>, bool)],
    outputs: &[(ValueId, String)],
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
    let graph_outputs: Vec<ValueId> = outputs.iter().map(|(v, _)| *v).collect();
    let plan = memory::assign_buffers(&uses, &buffer_len, &graph_inputs, &graph_outputs);
    for (v, slot) in slots.iter_mut().enumerate() {
        if let Slot::Buffer { buffer, .. } = slot {
            if let Some(b) = plan.buffer_of[v] {
                *buffer = b;
            }
        }
    }
    plan
}
