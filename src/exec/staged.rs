//! Running a model whose shapes depend on the data (NonZero, NonMaxSuppression, Unique,
//! Compress and whatever reads their outputs) for one set of input values, in stages: with every
//! input a constant, everything up to the first node whose output shape inference cannot know is
//! evaluated, that node runs on its reference kernel, its outputs become constants, and the
//! graph is planned again, until the whole graph plans. Each stage re-plans the model, so this is
//! for `roofline run` (one answer, checked against another runtime), not for timing.
//!
//! The same stages give `analyze` the sizes it cannot infer: `observe_data_dependent_shapes`
//! stops once every shape is known and returns the shapes the data-dependent nodes produced, so
//! the analysis can cost the model for the values a user gave.

use std::collections::HashMap;

use super::{
    build_plan, dims, eval, node_error, random_input, specialise_on_values, ExecError, PlanOptions,
    RtTensor, Specialise,
};
use crate::analysis::graph::{Graph, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::analysis::{prepare_graph, Bindings, Diagnostic};

/// Data-dependent stages allowed before giving up (a detection model has a handful).
const MAX_STAGES: usize = 64;

/// The outputs of a staged run, by output name, and the last stage's diagnostics.
pub type StagedOutputs = (Vec<(String, RtTensor)>, Vec<Diagnostic>);

/// One output of a data-dependent node as a run produced it: value name, element type, shape.
pub type ObservedShape = (String, DType, Vec<usize>);

/// The outputs of one run of `graph` on `given` (inputs not given get the seeded random values
/// `roofline run` uses), by output name, and the diagnostics of the last stage's inference.
pub fn run_staged(
    graph: &Graph,
    bindings: &Bindings,
    given: &HashMap<String, RtTensor>,
    options: &PlanOptions,
    seed: u64,
) -> Result<StagedOutputs, ExecError> {
    let mut observed = Vec::new();
    staged(graph, bindings, given, options, seed, &mut observed, true)
        .map(|outputs| outputs.unwrap_or_default())
}

/// The shapes the data-dependent nodes of `graph` (those whose output sizes inference cannot
/// know) produce on `given`, in the order they ran: evaluated stage by stage as `run_staged`
/// does, stopping as soon as every remaining shape is known (the rest of the model does not
/// run). Inputs not given get seeded random values.
pub fn observe_data_dependent_shapes(
    graph: &Graph,
    bindings: &Bindings,
    given: &HashMap<String, RtTensor>,
    options: &PlanOptions,
    seed: u64,
) -> Result<Vec<ObservedShape>, ExecError> {
    let mut observed = Vec::new();
    staged(graph, bindings, given, options, seed, &mut observed, false)?;
    Ok(observed)
}

/// The staged evaluation behind `run_staged` and `observe_data_dependent_shapes`: records every
/// data-dependent node's output shapes in `observed`; runs the final plan (and returns its
/// outputs) only when `run_final`.
fn staged(
    graph: &Graph,
    bindings: &Bindings,
    given: &HashMap<String, RtTensor>,
    options: &PlanOptions,
    seed: u64,
    observed: &mut Vec<ObservedShape>,
    run_final: bool,
) -> Result<Option<StagedOutputs>, ExecError> {
    let analysis_error = |e: crate::analysis::AnalysisError| ExecError::Input {
        name: "model".into(),
        reason: e.to_string(),
    };
    // Bind the shapes, then every input's value: given ones, else seeded random values.
    let mut graph = graph.clone();
    prepare_graph(&mut graph, bindings).map_err(analysis_error)?;
    let mut values = given.clone();
    for (i, &input) in graph.inputs.iter().enumerate() {
        let value = &graph.values[input];
        if values.contains_key(&value.name) {
            continue;
        }
        let shape = dims(&value.fact).ok_or_else(|| ExecError::Input {
            name: value.name.clone(),
            reason: "shape not bound".into(),
        })?;
        let integer = !value.fact.dtype.is_float();
        let bytes = shape.iter().product::<usize>() as u64 * 8;
        if bytes > options.memory_limit_bytes {
            return Err(ExecError::TooLarge {
                bytes,
                limit: options.memory_limit_bytes,
                limit_source: options.memory_limit_source.clone(),
            });
        }
        values.insert(
            value.name.clone(),
            random_input(
                &shape,
                integer,
                seed.wrapping_add(i as u64),
                super::index_range(&graph, input),
            ),
        );
    }
    specialise_on_values(&mut graph, &values, Specialise::All);
    let unbound = Bindings::default();
    for _ in 0..MAX_STAGES {
        let (order, states, diagnostics) =
            prepare_graph(&mut graph, &unbound).map_err(analysis_error)?;
        // The first node inference could not size: its inputs are known by now.
        let pending = order.iter().copied().find(|id| {
            !matches!(states.get(id), Some(NodeState::Folded))
                && graph.dag[*id]
                    .outputs
                    .iter()
                    .any(|&v| graph.values[v].fact.concrete_shape().is_none())
        });
        let Some(pending) = pending else {
            if !run_final {
                return Ok(None);
            }
            let plan = build_plan(&graph, &order, &states, options)?;
            let outputs = plan.run(&mut plan.workspace(), &HashMap::new(), None)?;
            return Ok(Some((outputs, diagnostics)));
        };
        let node = graph.dag[pending].clone();
        if !super::reference::covers(&node.domain, &node.op_type) {
            let why = match states.get(&pending) {
                Some(NodeState::Failed(reason)) => format!("shape inference failed: {reason}"),
                _ => "its output shape depends on the data and it has no reference kernel".into(),
            };
            return Err(node_error(&node, why));
        }
        // Evaluate the node's inputs (its subgraphs' implicit ones after its own): a graph whose
        // outputs they are, pruned to their ancestors.
        let mut slots = node.inputs.clone();
        slots.extend(
            super::plan::implicit_inputs(&graph, &node)?
                .into_iter()
                .map(Some),
        );
        let needed: Vec<ValueId> = slots.iter().flatten().copied().collect();
        let inputs = evaluate(&graph, &needed, options)?;
        let ins: Vec<Option<&RtTensor>> = slots
            .iter()
            .map(|slot| slot.and_then(|v| inputs.get(&v)))
            .collect();
        let (in_types, out_types) = eval::element_types(&graph, &slots, &node.outputs);
        let results = eval::generic_eval(&node, graph.opset, &ins, &in_types, &out_types)?;
        // Its outputs become constants; the node leaves the graph.
        for ((&value, tensor), &dtype) in node.outputs.iter().zip(results).zip(&out_types) {
            observed.push((
                graph.values[value].name.clone(),
                dtype,
                tensor.shape.clone(),
            ));
            graph.values[value].fact = TensorFact::constant(to_constant(&tensor, dtype));
        }
        let remaining: Vec<_> = graph
            .nodes_in_order()
            .into_iter()
            .filter(|n| n.name != node.name || n.outputs != node.outputs)
            .collect();
        graph.rebuild(remaining);
    }
    Err(ExecError::Input {
        name: "model".into(),
        reason: format!("more than {MAX_STAGES} data-dependent stages"),
    })
}

fn to_constant(tensor: &RtTensor, dtype: DType) -> Tensor {
    Tensor {
        dtype,
        shape: tensor.shape.iter().map(|&d| d as u64).collect(),
        data: match &tensor.data {
            super::RtData::F32(v) => TensorData::F32(v.clone()),
            super::RtData::I64(v) => TensorData::I64(v.clone()),
        },
    }
}

/// The values `wanted` of a graph whose inputs are all constants: the graph cut down to what
/// they depend on, planned (which evaluates constants) and run.
fn evaluate(
    graph: &Graph,
    wanted: &[ValueId],
    options: &PlanOptions,
) -> Result<HashMap<ValueId, RtTensor>, ExecError> {
    let mut out = HashMap::new();
    let mut computed = Vec::new();
    for &v in wanted {
        match graph.values[v]
            .fact
            .konst
            .as_deref()
            .and_then(eval::materialise)
        {
            Some(t) => {
                out.insert(v, t);
            }
            None => computed.push(v),
        }
    }
    if computed.is_empty() {
        return Ok(out);
    }
    let mut prefix = graph.clone();
    // Keep the nodes the wanted values depend on.
    let nodes = prefix.nodes_in_order();
    let mut needed: std::collections::HashSet<ValueId> = computed.iter().copied().collect();
    let mut kept = Vec::new();
    for node in nodes.into_iter().rev() {
        if node.outputs.iter().any(|o| needed.contains(o)) {
            needed.extend(node.inputs.iter().flatten().copied());
            // What its subgraphs read is needed too.
            needed.extend(super::plan::implicit_inputs(graph, &node)?);
            kept.push(node);
        }
    }
    kept.reverse();
    prefix.rebuild(kept);
    prefix.outputs = computed.clone();
    let (order, states, _) =
        prepare_graph(&mut prefix, &Bindings::default()).map_err(|e| ExecError::Input {
            name: "model".into(),
            reason: e.to_string(),
        })?;
    let plan = build_plan(&prefix, &order, &states, options)?;
    let results = plan.run(&mut plan.workspace(), &HashMap::new(), None)?;
    for ((_, tensor), &v) in results.into_iter().zip(&computed) {
        out.insert(v, tensor);
    }
    Ok(out)
}
