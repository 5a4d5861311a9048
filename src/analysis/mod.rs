//! Analysis: ONNX import, the graph IR, shape inference with constant folding, per-op cost and
//! the roofline estimate. Pure and fast: no timing, no I/O beyond the model file it is handed.

pub mod algorithm;
pub mod classify;
pub mod edit;
pub mod error;
pub(crate) mod footprint;
pub mod graph;
pub mod handoff;
pub mod import;
pub mod in_place;
pub mod infer;
pub mod legacy;
pub mod llm;
pub mod measured;
pub mod model;
pub mod onnx_proto;
pub mod ops;
pub mod roofline;
pub mod schema;
#[rustfmt::skip]
mod schema_data;
pub mod tensor;
pub mod validate;
pub mod views;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

pub use error::AnalysisError;
pub use graph::Graph;
pub use infer::{Bindings, Diagnostic, Severity};
pub use model::{Analysis, NodeAnalysis, NodeStatus, Summary};

pub use in_place::{
    drop_self_reading_concats, in_place_concats, slice_offset, slice_starts, slice_views,
};
pub use roofline::{estimate, Bound, Estimate, Roof};
pub use views::{compare_casts, matmul_operand_views, OperandView};

use crate::device::calibration::algorithm_op_type;
use crate::device::{DeviceKind, DeviceProfile, MemoryLevel, Precision};
use infer::NodeState;
use model::{DeviceInfo, IoInfo, ModelInfo, OpTypeShare};
use tensor::{DType, TensorFact};

/// Options of one analysis run.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub bindings: Bindings,
    pub precision: Precision,
    /// Phase and per-class storage of an LLM analysis (see [`llm`]); inactive by default.
    pub llm: llm::LlmOptions,
    /// Which convolution algorithms the CPU executor may run (see [`algorithm`]).
    pub conv_algorithms: algorithm::AlgorithmPolicy,
    /// This machine's kernels timed per convolution shape and algorithm (rule 5 of
    /// [`algorithm`]); only for an analysis of the machine they ran on.
    pub measured_algorithms: Option<std::sync::Arc<algorithm::MeasuredAlgorithms>>,
    /// Charge the weights at DRAM whatever the model's footprint: a calibration point timed
    /// with the caches evicted before every run, as a layer of a model larger than the
    /// caches meets its weights.
    pub weights_in_dram: bool,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            bindings: Bindings::default(),
            precision: Precision::Fp32,
            llm: llm::LlmOptions::default(),
            conv_algorithms: algorithm::AlgorithmPolicy::Auto,
            measured_algorithms: None,
            weights_in_dram: false,
        }
    }
}

/// An LLM analysis with its batch sweep: the step re-analysed at batch 1, 2, 4... up to the
/// largest batch that fits the device's memory (at most `max_batch`), each point's tokens/s and
/// the bound that sets it. The batch is bound through the decoder's batch dim; a model without
/// one gets no sweep.
pub fn analyze_with_batch_sweep(
    graph: Graph,
    source: &str,
    device: &DeviceProfile,
    options: &AnalyzeOptions,
    max_batch: u64,
) -> Result<Analysis, AnalysisError> {
    let mut analysis = analyze_graph(graph.clone(), source, device, options)?;
    let Some(summary) = analysis.llm.as_ref() else {
        return Ok(analysis);
    };
    let batch_dim = graph
        .inputs
        .iter()
        .filter_map(|&v| graph.values[v].fact.shape.as_ref()?.first().cloned())
        .find_map(|dim| match dim {
            tensor::Dim::Sym(name) => Some(name),
            tensor::Dim::Known(_) => None,
        });
    // An `--input` shape pins the batch: there is nothing to sweep.
    let (Some(batch_dim), true) = (batch_dim, options.bindings.inputs.is_empty()) else {
        return Ok(analysis);
    };
    let limit = summary
        .memory
        .max_batch
        .unwrap_or(max_batch)
        .clamp(1, max_batch);
    let mut points = Vec::new();
    for batch in llm::sweep_batches(limit) {
        let mut bindings = options.bindings.clone();
        bindings.batch = None;
        bindings.dims.retain(|(name, _)| *name != batch_dim);
        bindings.dims.push((batch_dim.clone(), batch));
        let swept = AnalyzeOptions {
            bindings,
            ..options.clone()
        };
        // A batch the model cannot take (a fixed dim elsewhere) ends the sweep, not the report.
        let Ok(point) = analyze_graph(graph.clone(), source, device, &swept) else {
            break;
        };
        if let Some(summary) = &point.llm {
            points.push(llm::BatchPoint::of(summary));
        }
    }
    if let Some(summary) = analysis.llm.as_mut() {
        summary.batch_sweep = points;
    }
    Ok(analysis)
}

/// Loads, infers and analyses a model file.
pub fn analyze_file(
    path: &Path,
    device: &DeviceProfile,
    options: &AnalyzeOptions,
) -> Result<Analysis, AnalysisError> {
    let graph = import::load_graph(path)?;
    analyze_graph(graph, &path.display().to_string(), device, options)
}

/// Binds inputs, infers shapes and folds constants in place; returns the per-node states.
pub fn prepare_graph(
    graph: &mut Graph,
    bindings: &Bindings,
) -> Result<infer::Inferred, AnalysisError> {
    infer::bind_inputs(graph, bindings)?;
    infer::infer_graph(graph)
}

/// A graph with its inputs bound and its facts inferred, made once and read by everything
/// downstream: the analysis (`analyze_prepared`), the planner (`exec::build_plan` takes its
/// parts) and the rewrite driver (`advisor::apply_pass` reads it and returns the next one).
/// Inference is the expensive step of a pass-and-cost cycle; before this type each pass
/// re-inferred its input, its output, then the analysis and the planner each again.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub graph: Graph,
    /// Topological order of the nodes.
    pub order: Vec<graph::NodeId>,
    /// Inference outcome of each node (folded, inferred, from declared shapes...).
    pub states: HashMap<graph::NodeId, NodeState>,
    /// What inference warned about, in order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Prepared {
    /// Binds `bindings` and infers `graph`.
    pub fn new(mut graph: Graph, bindings: &Bindings) -> Result<Prepared, AnalysisError> {
        let (order, states, diagnostics) = prepare_graph(&mut graph, bindings)?;
        Ok(Prepared {
            graph,
            order,
            states,
            diagnostics,
        })
    }

    /// The nodes' states in topological order (the order `Editor` lists the nodes in).
    pub fn states_in_order(&self) -> Vec<NodeState> {
        self.order
            .iter()
            .map(|id| self.states.get(id).cloned().unwrap_or(NodeState::Inferred))
            .collect()
    }
}

/// Analyses an imported graph against a device (binds `options.bindings` and infers first).
pub fn analyze_graph(
    graph: Graph,
    source: &str,
    device: &DeviceProfile,
    options: &AnalyzeOptions,
) -> Result<Analysis, AnalysisError> {
    let prepared = Prepared::new(graph, &options.bindings)?;
    analyze_prepared(&prepared, source, device, options)
}

/// The shapes of `prepared`'s convolutions that rule 1 and rule 2's tile count of
/// [`algorithm`] leave a Winograd variant for (the shapes worth timing for rule 5, whatever
/// their input channels), each once.
pub fn winograd_candidates(prepared: &Prepared) -> Vec<algorithm::ConvShape> {
    let mut shapes: Vec<algorithm::ConvShape> = Vec::new();
    for &id in &prepared.order {
        let node = &prepared.graph.dag[id];
        let inputs: Vec<Option<&TensorFact>> = node
            .inputs
            .iter()
            .map(|input| input.map(|v| &prepared.graph.values[v].fact))
            .collect();
        let outputs: Vec<&TensorFact> = node
            .outputs
            .iter()
            .map(|&v| &prepared.graph.values[v].fact)
            .collect();
        if let Some(shape) = conv_shape(node, &inputs, &outputs) {
            if algorithm::has_winograd_candidate(&shape) && !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
    }
    shapes
}

/// The 2-D convolution shape of a `Conv` / `FusedConv` node whose dims are all known.
fn conv_shape(
    node: &graph::Node,
    inputs: &[Option<&TensorFact>],
    outputs: &[&TensorFact],
) -> Option<algorithm::ConvShape> {
    let known = matches!(
        (node.domain.as_str(), node.op_type.as_str()),
        ("" | "ai.onnx", "Conv") | (ops::fused::DOMAIN, "FusedConv")
    );
    if !known {
        return None;
    }
    let dims = |fact: &TensorFact| -> Option<Vec<u64>> {
        (fact.dtype == DType::F32).then_some(())?;
        fact.shape.as_ref()?.iter().map(|d| d.known()).collect()
    };
    let x = dims(inputs.first().copied().flatten()?)?;
    let w = dims(inputs.get(1).copied().flatten()?)?;
    let y = dims(outputs.first()?)?;
    algorithm::ConvShape::of_node(&node.attrs, &x, &w, &y)
}

/// Analyses a graph already prepared with `options.bindings` (the bindings are not re-applied).
pub fn analyze_prepared(
    prepared: &Prepared,
    source: &str,
    device: &DeviceProfile,
    options: &AnalyzeOptions,
) -> Result<Analysis, AnalysisError> {
    let mut roof = Roof::of(device, options.precision)
        .map_err(|reason| AnalysisError::InvalidGraph { reason })?;
    let Prepared {
        graph,
        order,
        states,
        diagnostics,
    } = prepared;
    let mut diagnostics = diagnostics.clone();
    let cycled_bytes = if options.weights_in_dram {
        u64::MAX
    } else {
        footprint::cycled_bytes(graph, order, states)
    };
    roof.place_weights(cycled_bytes);
    // On several threads an op may still run on one (a runtime does not split an op too small
    // to pay for the fork-join): its bound is the lower of the two roofs' times, so a 256-float
    // Add is not bounded by a 2-thread fork-join it never pays.
    let single_thread = device.single_thread.as_deref();
    let roof_alone = single_thread.and_then(|alone| {
        let mut roof = Roof::of(alone, options.precision).ok()?;
        roof.place_weights(cycled_bytes);
        Some(roof)
    });
    // The calibration tables of the thread count whose ceilings this analysis uses.
    let calibration_threads = device
        .ceiling(options.precision)
        .and_then(|c| c.threads)
        .unwrap_or(u32::MAX);
    let read_in_place = matmul_operand_views(graph, order, states);
    let llm_costing = options.llm.is_active().then(|| {
        llm::LlmCosting::new(graph, order, &read_in_place, options.llm, options.precision)
    });
    let mut llm_totals = llm::LlmTotals::default();
    let concats_in_place = in_place_concats(graph, order, states);
    let slices_in_place = slice_views(graph, order, states);
    // A comparison that only a Cast to float reads runs in the Cast's step: a view here, its
    // work and reads charged to the Cast.
    let cast_compares = compare_casts(graph, order, states);
    let compares_in_casts: HashSet<graph::NodeId> = cast_compares.values().copied().collect();
    let mut nodes = Vec::with_capacity(order.len());
    let mut param_values: HashSet<usize> = HashSet::new();
    for (index, &id) in order.iter().enumerate() {
        let node = &graph.dag[id];
        let input_facts: Vec<Option<&TensorFact>> = node
            .inputs
            .iter()
            .map(|slot| slot.map(|v| &graph.values[v].fact))
            .collect();
        let output_facts: Vec<&TensorFact> = node
            .outputs
            .iter()
            .map(|&v| &graph.values[v].fact)
            .collect();
        let input_shapes = input_facts
            .iter()
            .map(|f| {
                f.map(TensorFact::shape_string)
                    .unwrap_or_else(|| "-".into())
            })
            .collect();
        let output_shapes = output_facts.iter().map(|f| f.shape_string()).collect();
        let state = states.get(&id).cloned().unwrap_or(NodeState::Inferred);
        let costed = match state {
            NodeState::Folded => Err((NodeStatus::Folded, None)),
            NodeState::Failed(reason) => Err((NodeStatus::NotCosted, Some(reason))),
            // Read through the MatMul's operand strides: no copy runs.
            NodeState::Inferred
                if node
                    .outputs
                    .first()
                    .is_some_and(|out| read_in_place.contains_key(out))
                    || concats_in_place.contains(&id)
                    || slices_in_place.contains(&id)
                    || compares_in_casts.contains(&id) =>
            {
                Ok(ops::OpCost::view())
            }
            NodeState::Inferred => match ops::cost_node(graph, node, options.precision) {
                None => Err((NodeStatus::NotCosted, Some("unknown op".to_string()))),
                Some(cost) => cost
                    .and_then(|cost| match cast_compares.get(&id) {
                        Some(&compare) => {
                            with_comparison(graph, &graph.dag[compare], cost, options.precision)
                        }
                        None => Ok(cost),
                    })
                    .map_err(|reason| (NodeStatus::NotCosted, Some(reason))),
            },
        };
        let mut record = NodeAnalysis {
            input_shapes,
            output_shapes,
            ..NodeAnalysis::new(index, &node.name, &node.op_type)
        };
        let costed = match (costed, &llm_costing) {
            (Ok(cost), Some(costing)) => {
                let (cost, kv_traffic) = costing.adjust(graph, node, cost);
                llm_totals.add(&kv_traffic);
                Ok(cost)
            }
            (other, _) => other,
        };
        // On a CPU, the executor runs some 3×3 convolutions as Winograd: cost what it runs.
        let mut model_arithmetic = None;
        let costed = match costed {
            Ok(direct)
                if device.kind == DeviceKind::Cpu && options.precision == Precision::Fp32 =>
            {
                match conv_shape(node, &input_facts, &output_facts) {
                    Some(shape) => {
                        // Each variant's expected time on a calibrated device, looked up
                        // as the record's below.
                        let direct_class = classify::kernel_class(
                            &node.domain,
                            &node.op_type,
                            &node.attrs,
                            &input_facts,
                        );
                        let expected_of = |cost: &ops::OpCost,
                                           algorithm: algorithm::ConvAlgorithm,
                                           bound_s: f64| {
                            let calibration = device.calibration.as_ref()?;
                            let (class, op_type) = match algorithm {
                                algorithm::ConvAlgorithm::Direct => {
                                    (direct_class?, node.op_type.clone())
                                }
                                _ => (
                                    crate::device::calibration::KernelClass::Winograd,
                                    algorithm_op_type(&node.op_type, algorithm.name()),
                                ),
                            };
                            calibration.expected_s(
                                class,
                                &op_type,
                                calibration_threads,
                                &shape_features(node, cost, &roof, &input_facts, &output_facts),
                                bound_s,
                            )
                        };
                        let measured_threads = match calibration_threads {
                            u32::MAX => 1,
                            threads => threads as usize,
                        };
                        let measured = options
                            .measured_algorithms
                            .as_ref()
                            .and_then(|table| table.get(&shape, measured_threads))
                            .map(|times| (times, measured_threads));
                        let choice = algorithm::choose_calibrated(
                            &shape,
                            &direct,
                            Some(&roof),
                            options.conv_algorithms,
                            Some(&expected_of),
                            measured,
                        );
                        let cost = algorithm::algorithm_cost(&shape, choice.algorithm, &direct);
                        if choice.algorithm != algorithm::ConvAlgorithm::Direct {
                            record.executed_flops = Some(cost.flops);
                            model_arithmetic = Some((direct.flops, direct.macs));
                        }
                        record.algorithm = Some(choice);
                        Ok(cost)
                    }
                    None => Ok(direct),
                }
            }
            other => other,
        };
        match costed {
            Ok(mut cost) => {
                cost.bytes.input_read = input_share(graph, node, &cost.bytes);
                let at_precision =
                    |roof: &Roof, device: &DeviceProfile| match cost.compute_precision {
                        Some(p) if p != options.precision => {
                            roof.at_precision(device, p).unwrap_or(*roof)
                        }
                        _ => *roof,
                    };
                let mut op_roof = at_precision(&roof, device);
                let mut est = estimate(&cost, &op_roof);
                if let (Some(alone), Some(alone_device)) = (&roof_alone, single_thread) {
                    let alone_roof = at_precision(alone, alone_device);
                    let alone_est = estimate(&cost, &alone_roof);
                    if alone_est.predicted_s < est.predicted_s {
                        (op_roof, est) = (alone_roof, alone_est);
                    }
                }
                record.status = if cost.is_view {
                    NodeStatus::View
                } else {
                    NodeStatus::Costed
                };
                // A Winograd convolution reports the model's arithmetic (what FLOP counters
                // count) and its executed work separately; the bound uses the executed work.
                (record.flops, record.macs) = model_arithmetic.unwrap_or((cost.flops, cost.macs));
                record.transcendental = cost.transcendental;
                record.compute_precision = cost.compute_precision.filter(|&p| p != Precision::Fp32);
                record.weights_bytes = cost.bytes.weights_read;
                record.activation_bytes_read = cost.bytes.act_read;
                record.bytes_read = cost.bytes.weights_read + cost.bytes.act_read;
                record.bytes_written = cost.bytes.act_written;
                record.intensity = est.intensity;
                record.bound = est.bound;
                record.attainable_flops = est.attainable_flops;
                record.compute_s = est.compute_s;
                record.memory_s = est.memory_s;
                record.predicted_s = est.predicted_s;
                if !cost.is_view {
                    let features =
                        shape_features(node, &cost, &op_roof, &input_facts, &output_facts);
                    record.kernel_class = match &record.algorithm {
                        Some(choice) if choice.algorithm != algorithm::ConvAlgorithm::Direct => {
                            Some(crate::device::calibration::KernelClass::Winograd)
                        }
                        _ => classify::kernel_class(
                            &node.domain,
                            &node.op_type,
                            &node.attrs,
                            &input_facts,
                        ),
                    };
                    record.features = Some(features);
                    if let (Some(class), Some(calibration)) =
                        (record.kernel_class, &device.calibration)
                    {
                        // An op the tool's kernels keep on one thread of several is predicted
                        // as one thread runs it: from the one-thread table, against the
                        // one-thread roof (a 0.3 MFLOP 1×1 convolution took its one-thread
                        // 11 µs at 2 threads, and the 2-thread table, whose points all split,
                        // expected 4).
                        let alone = single_thread.zip(roof_alone.as_ref()).filter(|_| {
                            calibration.of_own_kernels()
                                && calibration_threads != u32::MAX
                                && classify::stays_on_one_thread(
                                    class,
                                    calibration_threads as usize,
                                    cost.flops,
                                )
                        });
                        record.expected_s = match alone {
                            Some((alone_device, alone_roof)) => {
                                let alone_roof = at_precision(alone_roof, alone_device);
                                calibration.expected_s(
                                    class,
                                    &record.calibration_op_type(),
                                    1,
                                    &shape_features(
                                        node,
                                        &cost,
                                        &alone_roof,
                                        &input_facts,
                                        &output_facts,
                                    ),
                                    estimate(&cost, &alone_roof).predicted_s,
                                )
                            }
                            None => calibration.expected_s(
                                class,
                                &record.calibration_op_type(),
                                calibration_threads,
                                &features,
                                est.predicted_s,
                            ),
                        };
                        record.efficiency = record
                            .expected_s
                            .filter(|&e| e > 0.0)
                            .map(|e| est.predicted_s / e);
                    }
                }
                if !cost.is_view {
                    for slot in node.inputs.iter().flatten() {
                        let fact = &graph.values[*slot].fact;
                        // Quantized weights are parameters too; i64 constants are shapes.
                        let weight_type =
                            fact.dtype.is_float() || matches!(fact.dtype, DType::I8 | DType::U8);
                        if fact.is_constant() && weight_type {
                            param_values.insert(*slot);
                        }
                    }
                }
            }
            Err((status, reason)) => {
                if status == NodeStatus::NotCosted {
                    let reason_text = reason.clone().unwrap_or_default();
                    let already = diagnostics
                        .iter()
                        .any(|d| d.node.as_deref() == Some(node.name.as_str()));
                    if !already {
                        diagnostics.push(Diagnostic {
                            severity: infer::Severity::Warning,
                            node: Some(node.name.clone()),
                            op_type: Some(node.op_type.clone()),
                            message: format!("not costed: {reason_text}"),
                        });
                    }
                }
                record.status = status;
                record.reason = reason;
            }
        }
        nodes.push(record);
    }
    if let Some(read_gbs) = device
        .calibration
        .as_ref()
        .and_then(|calibration| calibration.handoff_gbs(calibration_threads))
    {
        handoff::charge(
            graph,
            order,
            &mut nodes,
            calibration_threads as usize,
            read_gbs,
        );
    }
    // Each tensor once, however many values hold it (an Identity of a weight, a layer applied
    // again with the same weights: a molecule transformer's 21 M parameters counted 161 M).
    let mut counted = std::collections::HashSet::new();
    let params = param_values
        .iter()
        .filter(|&&v| {
            graph.values[v]
                .fact
                .konst
                .as_ref()
                .is_none_or(|konst| counted.insert(std::sync::Arc::as_ptr(konst)))
        })
        .filter_map(|&v| graph.values[v].fact.element_count())
        .sum::<u64>()
        .saturating_add(footprint::subgraph_params(graph));
    let summary = summarize(&mut nodes, params);
    let llm_summary = llm_costing.as_ref().map(|costing| {
        llm::summarize(
            graph,
            order,
            &nodes,
            costing,
            llm_totals,
            device,
            &roof,
            options.precision,
        )
    });
    let info = model_info(graph, source);
    let device_info = device_info(device, options.precision, roof);
    Ok(Analysis {
        schema: model::ANALYSIS_SCHEMA.to_string(),
        schema_version: model::ANALYSIS_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        model: info,
        device: device_info,
        precision: options.precision,
        nodes,
        summary,
        diagnostics,
        measured: None,
        llm: llm_summary,
    })
}

/// Ops whose output is their input under another shape: no copy in the executor or in any
/// runtime with a memory planner.
pub const VIEW_OPS: &[&str] = &[
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Dropout",
];

/// The cost of a Cast that runs the comparison it reads (`compare_casts`): the comparison's
/// work and reads, the Cast's float writes; the booleans between them are never written.
fn with_comparison(
    graph: &Graph,
    compare: &graph::Node,
    cast: ops::OpCost,
    precision: Precision,
) -> Result<ops::OpCost, String> {
    let compared = ops::cost_node(graph, compare, precision)
        .ok_or_else(|| format!("{} is not costed", compare.op_type))??;
    Ok(ops::OpCost {
        flops: cast.flops + compared.flops,
        bytes: ops::Traffic {
            weights_read: cast.bytes.weights_read + compared.bytes.weights_read,
            act_read: compared.bytes.act_read,
            ..cast.bytes
        },
        ..cast
    })
}

/// What the calibration matches an op on: its work, bytes (weights + activations read, written)
/// and output elements, at the memory levels `roof` charges its traffic at, and a
/// convolution's output channels (a depthwise one's output row width instead) and window taps.
fn shape_features(
    node: &graph::Node,
    cost: &ops::OpCost,
    roof: &Roof,
    input_facts: &[Option<&TensorFact>],
    output_facts: &[&TensorFact],
) -> crate::device::calibration::ShapeFeatures {
    let output_elements = output_facts.iter().filter_map(|f| f.element_count()).sum();
    let (activation_level, weight_level) = roof.level_numbers(&cost.bytes);
    let (output_channels, output_width) =
        classify::window_extents(&node.op_type, &node.attrs, output_facts.first().copied());
    crate::device::calibration::ShapeFeatures::new(
        cost.flops + cost.transcendental,
        cost.bytes.weights_read + cost.bytes.act_read + cost.bytes.act_written,
        cost.bytes.weights_read,
        output_elements,
    )
    .at_levels(activation_level, weight_level)
    .with_output_channels(output_channels)
    .with_output_width(output_width)
    .with_taps(classify::window_taps(
        &node.op_type,
        input_facts.get(1).copied().flatten(),
    ))
}

/// The part of an op's activation reads that are graph inputs: its `act_read` split in
/// proportion to the stored bytes of the non-constant tensors it reads (the op's cost does
/// not say which input each byte came from; most ops read each input once).
fn input_share(graph: &Graph, node: &graph::Node, traffic: &ops::Traffic) -> u64 {
    let (mut from_inputs, mut all) = (0u64, 0u64);
    for &value in node.inputs.iter().flatten() {
        let fact = &graph.values[value].fact;
        if fact.is_constant() {
            continue;
        }
        let bytes = fact
            .element_count()
            .map_or(0, |n| n.saturating_mul(fact.dtype.size_bytes()));
        all = all.saturating_add(bytes);
        if graph.inputs.contains(&value) {
            from_inputs = from_inputs.saturating_add(bytes);
        }
    }
    if from_inputs == 0 || all == 0 {
        return 0;
    }
    (traffic.act_read as u128 * from_inputs as u128 / all as u128) as u64
}

fn summarize(nodes: &mut [NodeAnalysis], params: u64) -> Summary {
    let total_time: f64 = nodes.iter().map(|n| n.predicted_s).sum();
    for node in nodes.iter_mut() {
        node.time_share = if total_time > 0.0 {
            node.predicted_s / total_time
        } else {
            0.0
        };
    }
    let share = |bound: Bound| -> f64 {
        if total_time <= 0.0 {
            return 0.0;
        }
        // A fold from +0: `Sum` for floats starts at −0, which an empty class printed as "-0.0%".
        nodes
            .iter()
            .filter(|n| n.bound == bound)
            .map(|n| n.predicted_s)
            .fold(0.0, |total, time| total + time)
            / total_time
    };
    let count = |status: NodeStatus| nodes.iter().filter(|n| n.status == status).count();
    let mut not_costed_ops: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.status == NodeStatus::NotCosted) {
        *not_costed_ops.entry(n.op_type.clone()).or_default() += 1;
    }
    let mut ranked: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].predicted_s > 0.0)
        .collect();
    ranked.sort_by(|&a, &b| nodes[b].predicted_s.total_cmp(&nodes[a].predicted_s));
    ranked.truncate(10);
    let mut by_type: BTreeMap<String, OpTypeShare> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.status == NodeStatus::Costed) {
        let entry = by_type.entry(n.op_type.clone()).or_insert(OpTypeShare {
            op_type: n.op_type.clone(),
            count: 0,
            flops: 0,
            bytes: 0,
            predicted_s: 0.0,
            time_share: 0.0,
        });
        entry.count += 1;
        entry.flops += n.flops;
        entry.bytes += n.bytes_read + n.bytes_written;
        entry.predicted_s += n.predicted_s;
        entry.time_share += n.time_share;
    }
    let mut by_op_type: Vec<OpTypeShare> = by_type.into_values().collect();
    by_op_type.sort_by(|a, b| b.predicted_s.total_cmp(&a.predicted_s));
    let any_expected = nodes.iter().any(|n| n.expected_s.is_some());
    let flops: u64 = nodes.iter().map(|n| n.flops).sum();
    let transcendental: u64 = nodes.iter().map(|n| n.transcendental).sum();
    let bytes_read: u64 = nodes.iter().map(|n| n.bytes_read).sum();
    let bytes_written: u64 = nodes.iter().map(|n| n.bytes_written).sum();
    let total_bytes = bytes_read + bytes_written;
    Summary {
        flops,
        macs: nodes.iter().map(|n| n.macs).sum(),
        transcendental,
        params,
        bytes_read,
        bytes_written,
        weights_bytes: nodes.iter().map(|n| n.weights_bytes).sum(),
        intensity: if total_bytes > 0 {
            (flops + transcendental) as f64 / total_bytes as f64
        } else {
            0.0
        },
        predicted_latency_s: total_time,
        expected_latency_s: any_expected.then(|| {
            nodes
                .iter()
                .map(|n| n.expected_s.unwrap_or(n.predicted_s))
                .sum()
        }),
        expected_coverage: any_expected.then(|| {
            let covered: f64 = nodes
                .iter()
                .filter(|n| n.expected_s.is_some())
                .map(|n| n.predicted_s)
                .sum();
            if total_time > 0.0 {
                covered / total_time
            } else {
                1.0
            }
        }),
        measured_total_s: None,
        memory_bound_share: share(Bound::Memory),
        compute_bound_share: share(Bound::Compute),
        overhead_bound_share: share(Bound::Overhead),
        costed_nodes: count(NodeStatus::Costed),
        view_nodes: count(NodeStatus::View),
        folded_nodes: count(NodeStatus::Folded),
        not_costed: count(NodeStatus::NotCosted),
        not_costed_ops: not_costed_ops.into_iter().collect(),
        hot_spots: ranked,
        by_op_type,
    }
}

fn io_info(graph: &Graph, values: &[usize]) -> Vec<IoInfo> {
    values
        .iter()
        .map(|&v| {
            let value = &graph.values[v];
            IoInfo {
                name: value.name.clone(),
                dtype: value.fact.dtype.to_string(),
                shape: value.fact.shape_string(),
            }
        })
        .collect()
}

fn model_info(graph: &Graph, source: &str) -> ModelInfo {
    ModelInfo {
        source: source.to_string(),
        graph_name: graph.name.clone(),
        producer: graph.producer.clone(),
        ir_version: graph.ir_version,
        opset: graph.opset,
        node_count: graph.node_count(),
        inputs: io_info(graph, &graph.inputs),
        outputs: io_info(graph, &graph.outputs),
    }
}

fn device_info(device: &DeviceProfile, precision: Precision, roof: Roof) -> DeviceInfo {
    DeviceInfo {
        id: device.id.clone(),
        name: device.name.clone(),
        kind: device.kind,
        source: device.source,
        precision,
        roof,
        ridge_point: roof.ridge_point(),
        compute_source: device
            .ceiling(precision)
            .map(|c| c.source.clone())
            .unwrap_or_default(),
        bandwidth_source: device
            .memory_ceiling(MemoryLevel::Dram)
            .map(|m| m.source.clone())
            .unwrap_or_default(),
        launch_overhead_source: device.launch_overhead_source.clone(),
        compute_ceilings: crate::device::Precision::ALL
            .iter()
            .filter_map(|&p| device.ceiling(p).cloned())
            .collect(),
        memory_ceilings: [
            MemoryLevel::L1,
            MemoryLevel::L2,
            MemoryLevel::L3,
            MemoryLevel::Dram,
        ]
        .iter()
        .filter_map(|&level| device.memory_ceiling(level).cloned())
        .collect(),
    }
}
