//! Control flow: If (1-21), Loop (11-21) and Scan (9-21), shapes inferred through their
//! subgraphs.
//!
//! A body is imported as a graph of its own (`import::import_subgraph`): its formal inputs take
//! the facts the op gives them, and the names it reads from the enclosing graph take that
//! graph's facts. Then the body is inferred like any graph:
//! - If: a constant condition picks its branch; otherwise both branches are inferred and
//!   their outputs merged (a dim on which they disagree becomes a symbol).
//! - Scan: N state variables and M scan inputs; the body sees one slice of each scan input (its
//!   scan axis removed); the K scan outputs gain the sequence length at their output axis.
//! - Loop: the body sees the iteration number (i64 scalar), the condition (bool scalar) and N
//!   loop-carried values; the K scan outputs gain a leading dim with the trip count, which is
//!   known when the trip count is a constant and the loop cannot stop early (no condition, or a
//!   condition the body passes through unchanged).
//!
//! Loop-carried and state values are inferred without their constant values (a value changes
//! from one iteration to the next); a dim that differs between what enters the body and what it
//! returns is a symbol.
//!
//! Cost: the body's cost (the sum of its ops' costs, by the same formulas as a graph) times
//! the iterations: the sequence length for Scan, the trip count for Loop (not costed when it
//! is unknown), the branch taken for a constant-condition If and the costlier branch otherwise
//! (a bound for either). A body with an op that is not costed leaves the control-flow op not
//! costed, with that op's reason.

use std::sync::Arc;

use super::{invalid, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::graph::{Attr, Attributes, Graph};
use crate::analysis::import::{import_subgraph, OuterScope};
use crate::analysis::infer::{infer_graph, NodeState};
use crate::analysis::onnx_proto::GraphProto;
use crate::analysis::tensor::{DType, Dim, TensorFact};
use crate::device::Precision;

struct If;
struct Loop;
struct Scan;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "If" => &If,
        "Loop" => &Loop,
        "Scan" => &Scan,
        _ => return None,
    })
}

/// The names a node's subgraphs read from the enclosing graph (their free names), sorted: a
/// name read by a body (or a body nested in it) that the body neither takes as an input nor
/// defines. The executor passes these values to the node as implicit inputs, after its own.
pub fn free_names(attrs: &Attributes) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for attr in attrs.0.values() {
        match attr {
            Attr::Graph(graph) => names.extend(graph_free_names(graph)),
            Attr::Graphs(graphs) => graphs
                .iter()
                .for_each(|g| names.extend(graph_free_names(g))),
            _ => {}
        }
    }
    names.into_iter().collect()
}

fn graph_free_names(graph: &GraphProto) -> std::collections::BTreeSet<String> {
    let mut defined: std::collections::HashSet<&str> = graph
        .input
        .iter()
        .map(|i| i.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()))
        .chain(
            graph
                .sparse_initializer
                .iter()
                .filter_map(|t| t.values.as_ref().map(|v| v.name.as_str())),
        )
        .collect();
    let mut free = std::collections::BTreeSet::new();
    for node in &graph.node {
        let mut read: Vec<String> = node
            .input
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        for attr in &node.attribute {
            for nested in attr.g.iter().chain(&attr.graphs) {
                read.extend(graph_free_names(nested));
            }
        }
        for name in read {
            if !defined.contains(name.as_str()) {
                free.insert(name);
            }
        }
        defined.extend(node.output.iter().map(String::as_str));
    }
    // Graph outputs may name an enclosing value directly.
    for output in &graph.output {
        if !defined.contains(output.name.as_str()) {
            free.insert(output.name.clone());
        }
    }
    free
}

fn body<'a>(attrs: &'a Attributes, name: &str) -> OpResult<&'a Arc<GraphProto>> {
    match attrs.get(name) {
        Some(Attr::Graph(graph)) => Ok(graph),
        _ => Err(invalid(format!("missing subgraph `{name}`"))),
    }
}

/// A fact without its constant value (what a value looks like to every iteration).
fn varying(fact: &TensorFact) -> TensorFact {
    TensorFact {
        dtype: fact.dtype,
        shape: fact.shape.clone(),
        konst: None,
    }
}

/// A body imported and inferred with `inputs` as its formal inputs' facts.
fn inferred_body(
    proto: &GraphProto,
    opset: i64,
    outer: Option<OuterScope>,
    inputs: &[TensorFact],
) -> OpResult<(Graph, crate::analysis::infer::Inferred)> {
    let no_outer = |_: &str| None;
    let outer: OuterScope = outer.unwrap_or(&no_outer);
    let mut graph = import_subgraph(proto, opset, outer).map_err(|e| e.to_string())?;
    if graph.inputs.len() != inputs.len() {
        return Err(invalid(format!(
            "the body `{}` takes {} inputs but is given {}",
            proto.name,
            graph.inputs.len(),
            inputs.len()
        )));
    }
    for (&value, fact) in graph.inputs.clone().iter().zip(inputs) {
        graph.values[value].fact = fact.clone();
    }
    let inferred = infer_graph(&mut graph).map_err(|e| e.to_string())?;
    // The first failure in the body's order, named: a nested body's message then leads to the
    // node that failed, not to whichever the state map happened to list first.
    if let Some((node, reason)) = inferred.0.iter().find_map(|id| match inferred.1.get(id) {
        Some(NodeState::Failed(reason)) => Some((&graph.dag[*id].name, reason)),
        _ => None,
    }) {
        return Err(format!(
            "the body `{}` cannot be inferred: node `{node}`: {reason}",
            proto.name
        ));
    }
    Ok((graph, inferred))
}

fn output_facts(graph: &Graph) -> Vec<TensorFact> {
    graph
        .outputs
        .iter()
        .map(|&v| graph.values[v].fact.clone())
        .collect()
}

/// The sum of a body's op costs (folded nodes cost nothing).
fn body_cost(
    graph: &Graph,
    states: &std::collections::HashMap<crate::analysis::graph::NodeId, NodeState>,
    order: &[crate::analysis::graph::NodeId],
    precision: Precision,
) -> OpResult<OpCost> {
    let mut total = OpCost::default();
    for &id in order {
        if matches!(states.get(&id), Some(NodeState::Folded)) {
            continue;
        }
        let node = &graph.dag[id];
        let cost = super::cost_node(graph, node, precision)
            .ok_or_else(|| format!("its body's op `{}` is unknown", node.op_type))?
            .map_err(|reason| format!("its body's `{}` is not costed: {reason}", node.name))?;
        total.flops += cost.flops;
        total.macs += cost.macs;
        total.transcendental += cost.transcendental;
        total.vector_flops += cost.vector_flops;
        total.bytes.add(&cost.bytes);
    }
    Ok(total)
}

fn times(cost: OpCost, count: u64) -> OpCost {
    OpCost {
        flops: cost.flops.saturating_mul(count),
        macs: cost.macs.saturating_mul(count),
        transcendental: cost.transcendental.saturating_mul(count),
        vector_flops: cost.vector_flops.saturating_mul(count),
        bytes: super::Traffic {
            weights_read: cost.bytes.weights_read.saturating_mul(count),
            act_read: cost.bytes.act_read.saturating_mul(count),
            act_written: cost.bytes.act_written.saturating_mul(count),
            input_read: 0,
        },
        ..OpCost::default()
    }
}

/// Two branches' facts for one output: equal dims kept, others symbolic.
fn merge(name: &str, index: usize, a: &TensorFact, b: &TensorFact) -> TensorFact {
    match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => TensorFact::new(
            a.dtype,
            x.iter()
                .zip(y)
                .enumerate()
                .map(|(d, (p, q))| {
                    if p == q {
                        p.clone()
                    } else {
                        Dim::Sym(format!("{name}_out{index}_dim{d}"))
                    }
                })
                .collect(),
        ),
        _ => TensorFact::unknown(a.dtype),
    }
}

/// The names of the branches an If with condition `cond` runs, in the order they are taken.
fn branch_names(cond: &TensorFact) -> &'static [&'static str] {
    match constant_truth(cond) {
        Some(true) => &["then_branch"],
        Some(false) => &["else_branch"],
        None => &["then_branch", "else_branch"],
    }
}

/// A branch's failure, saying that it was analysed only because the condition is not known
/// before the run: Silero VAD's sample-rate If reported its 8 kHz branch's "X and W must be
/// 3-D" when the `sr` input was left unbound.
fn with_unknown_condition(unknown: bool, branch: &str, reason: String) -> String {
    if unknown {
        format!(
            "the condition is not known before the run, so both branches were analysed, and \
             {branch} fails: {reason} (give the inputs the condition depends on as values, \
             e.g. -i NAME=FILE.npy)"
        )
    } else {
        reason
    }
}

/// The constant truth value of a condition fact, if it has one.
fn constant_truth(fact: &TensorFact) -> Option<bool> {
    let values = fact.konst.as_ref()?.to_i64_vec()?;
    values.first().map(|&v| v != 0)
}

impl OpDef for If {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let attrs = ctx.attrs();
        let (then_branch, else_branch) = (body(attrs, "then_branch")?, body(attrs, "else_branch")?);
        let cond = ctx.input(0)?;
        let branches: Vec<&GraphProto> = match constant_truth(cond) {
            Some(true) => vec![then_branch],
            Some(false) => vec![else_branch],
            None => vec![then_branch, else_branch],
        };
        let unknown = branches.len() > 1;
        let mut results = Vec::new();
        for (branch, name) in branches.into_iter().zip(branch_names(cond)) {
            let (graph, _) = inferred_body(branch, ctx.node.opset, ctx.outer, &[])
                .map_err(|reason| with_unknown_condition(unknown, name, reason))?;
            results.push(output_facts(&graph));
        }
        if results.len() == 1 {
            return Ok(results.pop().unwrap_or_default());
        }
        let (a, b) = (&results[0], &results[1]);
        if a.len() != b.len() {
            return Err(invalid(format!(
                "If: the branches have {} and {} outputs",
                a.len(),
                b.len()
            )));
        }
        Ok(a.iter()
            .zip(b)
            .enumerate()
            .map(|(i, (x, y))| merge(ctx.node.name, i, x, y))
            .collect())
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let attrs = ctx.attrs();
        let cond = ctx.input(0)?;
        let branches: Vec<&GraphProto> = match constant_truth(cond) {
            Some(true) => vec![body(attrs, "then_branch")?],
            Some(false) => vec![body(attrs, "else_branch")?],
            None => vec![body(attrs, "then_branch")?, body(attrs, "else_branch")?],
        };
        let unknown = branches.len() > 1;
        let mut costliest: Option<OpCost> = None;
        for (branch, name) in branches.into_iter().zip(branch_names(cond)) {
            let (graph, (order, states, _)) = inferred_body(branch, ctx.node.opset, ctx.outer, &[])
                .map_err(|reason| with_unknown_condition(unknown, name, reason))?;
            let cost = body_cost(&graph, &states, &order, ctx.precision)
                .map_err(|reason| with_unknown_condition(unknown, name, reason))?;
            let work = |c: &OpCost| c.flops + c.transcendental + c.bytes.total();
            if costliest.as_ref().is_none_or(|c| work(&cost) > work(c)) {
                costliest = Some(cost);
            }
        }
        costliest.ok_or_else(|| "If without branches".to_string())
    }
}

/// What a Scan's body sees and how its outputs stack.
struct ScanGeometry {
    states: usize,
    body_inputs: Vec<TensorFact>,
    /// Sequence length (from the first scan input).
    length: Dim,
    output_axes: Vec<i64>,
    /// Opset 8's leading batch dim (its states and scan inputs are batched, the sequence on
    /// axis 1); `None` from opset 9.
    batch: Option<Dim>,
}

fn scan_geometry(
    ctx_inputs: &[Option<&TensorFact>],
    attrs: &Attributes,
    opset: i64,
) -> OpResult<ScanGeometry> {
    // Opset 8 starts with the optional sequence_lens.
    let skip = usize::from(opset < 9);
    let inputs: Vec<&TensorFact> = ctx_inputs.iter().skip(skip).flatten().copied().collect();
    let scans = attrs
        .int("num_scan_inputs")
        .filter(|&m| m > 0 && m as usize <= inputs.len())
        .ok_or_else(|| invalid("Scan needs `num_scan_inputs` between 1 and its input count"))?
        as usize;
    let states = inputs.len() - scans;
    let batched = opset < 9;
    let input_axes = match attrs.ints("scan_input_axes") {
        Some(axes) if !batched => axes.to_vec(),
        _ => vec![if batched { 1 } else { 0 }; scans],
    };
    if input_axes.len() != scans {
        return Err(invalid("Scan: one scan_input_axes entry per scan input"));
    }
    let unbatched = |fact: &TensorFact| -> OpResult<TensorFact> {
        let shape = fact
            .shape
            .as_ref()
            .ok_or("the rank of a Scan input is unknown")?;
        Ok(TensorFact::new(
            fact.dtype,
            shape[usize::from(batched).min(shape.len())..].to_vec(),
        ))
    };
    let mut body_inputs: Vec<TensorFact> = inputs[..states]
        .iter()
        .map(|f| unbatched(&varying(f)))
        .collect::<OpResult<_>>()?;
    let mut length = None;
    let mut batch = None;
    for (fact, &axis) in inputs[states..].iter().zip(&input_axes) {
        let shape = fact
            .shape
            .as_ref()
            .ok_or("the rank of a scan input is unknown")?;
        let axis = super::normalize_axis(axis, shape.len())?;
        length.get_or_insert_with(|| shape[axis].clone());
        if batched {
            batch.get_or_insert_with(|| shape[0].clone());
        }
        let mut slice = shape.clone();
        slice.remove(axis);
        if batched {
            slice.remove(0);
        }
        body_inputs.push(TensorFact::new(fact.dtype, slice));
    }
    Ok(ScanGeometry {
        states,
        body_inputs,
        length: length.unwrap_or(Dim::Known(0)),
        output_axes: attrs
            .ints("scan_output_axes")
            .map(<[i64]>::to_vec)
            .unwrap_or_default(),
        batch,
    })
}

impl OpDef for Scan {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let geometry = scan_geometry(&ctx.inputs, ctx.attrs(), ctx.node.opset)?;
        let proto = body(ctx.attrs(), "body")?;
        let (graph, _) = inferred_body(proto, ctx.node.opset, ctx.outer, &geometry.body_inputs)?;
        let outs = output_facts(&graph);
        if outs.len() < geometry.states {
            return Err(invalid(
                "Scan: the body returns fewer values than the states",
            ));
        }
        let mut result = Vec::new();
        for (i, fact) in outs.iter().enumerate() {
            let mut shape = if i < geometry.states {
                let kept = stable(ctx.node.name, i, &geometry.body_inputs[i], fact);
                kept.shape.ok_or("the rank of a Scan state is unknown")?
            } else {
                let k = i - geometry.states;
                let mut shape = fact
                    .shape
                    .clone()
                    .ok_or("the rank of a scan output is unknown")?;
                let axis = match geometry.batch {
                    Some(_) => 0,
                    None => geometry.output_axes.get(k).copied().unwrap_or(0),
                };
                let axis = super::normalize_axis(axis, shape.len() + 1)?;
                shape.insert(axis, geometry.length.clone());
                shape
            };
            if let Some(batch) = &geometry.batch {
                shape.insert(0, batch.clone());
            }
            result.push(TensorFact::new(fact.dtype, shape));
        }
        Ok(result)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let geometry = scan_geometry(&ctx.inputs, ctx.attrs(), ctx.node.opset)?;
        let proto = body(ctx.attrs(), "body")?;
        let (graph, (order, states, _)) =
            inferred_body(proto, ctx.node.opset, ctx.outer, &geometry.body_inputs)?;
        let length = geometry
            .length
            .known()
            .ok_or("the sequence length is not known")?;
        let batch = match &geometry.batch {
            Some(b) => b.known().ok_or("the batch is not known")?,
            None => 1,
        };
        Ok(times(
            body_cost(&graph, &states, &order, ctx.precision)?,
            length * batch,
        ))
    }
}

/// A carried value's final fact: what the body returns, with dims that differ from what
/// entered it made symbolic.
fn stable(name: &str, index: usize, entering: &TensorFact, returned: &TensorFact) -> TensorFact {
    merge(name, index, &varying(returned), entering)
}

/// What a Loop's body sees: iteration number, condition, the loop-carried values.
fn loop_body_inputs(ctx_inputs: &[Option<&TensorFact>]) -> Vec<TensorFact> {
    let mut inputs = vec![
        TensorFact::known(DType::I64, &[]),
        TensorFact::known(DType::Bool, &[]),
    ];
    inputs.extend(ctx_inputs.iter().skip(2).flatten().map(|f| varying(f)));
    inputs
}

/// The iterations a Loop runs, when they are known before it runs.
fn trip_count(ctx_inputs: &[Option<&TensorFact>], graph: &Graph) -> Option<u64> {
    let trips = ctx_inputs.first().copied().flatten()?;
    let count = trips.konst.as_ref()?.to_i64_vec()?.first().copied()?;
    if let Some(cond) = ctx_inputs.get(1).copied().flatten() {
        if constant_truth(cond) != Some(true) {
            return None;
        }
    }
    // The body must return its condition unchanged (or a constant true): it cannot stop early.
    let cond_in = *graph.inputs.get(1)?;
    let mut cond_out = *graph.outputs.first()?;
    if constant_truth(&graph.values[cond_out].fact) == Some(true) {
        return Some(count.max(0) as u64);
    }
    while let Some(producer) = graph.values[cond_out].producer {
        let node = &graph.dag[producer];
        if node.op_type != "Identity" {
            return None;
        }
        cond_out = node.inputs.first().copied().flatten()?;
    }
    (cond_out == cond_in).then_some(count.max(0) as u64)
}

impl OpDef for Loop {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let proto = body(ctx.attrs(), "body")?;
        let body_inputs = loop_body_inputs(&ctx.inputs);
        let carried = body_inputs.len() - 2;
        let (graph, _) = inferred_body(proto, ctx.node.opset, ctx.outer, &body_inputs)?;
        let outs = output_facts(&graph);
        if outs.len() < 1 + carried {
            return Err(invalid(
                "Loop: the body returns fewer values than it carries",
            ));
        }
        let iterations = match trip_count(&ctx.inputs, &graph) {
            Some(n) => Dim::Known(n),
            None => Dim::Sym(format!("{}_iterations", ctx.node.name)),
        };
        let mut result = Vec::new();
        for (i, fact) in outs.iter().enumerate().skip(1) {
            if i <= carried {
                result.push(stable(ctx.node.name, i, &body_inputs[i + 1], fact));
                continue;
            }
            let shape = fact
                .shape
                .clone()
                .ok_or("the rank of a scan output is unknown")?;
            let mut stacked = vec![iterations.clone()];
            stacked.extend(shape);
            result.push(TensorFact::new(fact.dtype, stacked));
        }
        Ok(result)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let proto = body(ctx.attrs(), "body")?;
        let body_inputs = loop_body_inputs(&ctx.inputs);
        let (graph, (order, states, _)) =
            inferred_body(proto, ctx.node.opset, ctx.outer, &body_inputs)?;
        let count =
            trip_count(&ctx.inputs, &graph).ok_or("its trip count is not known before it runs")?;
        Ok(times(
            body_cost(&graph, &states, &order, ctx.precision)?,
            count,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::tests::kit::*;
    use crate::analysis::graph::Attr;
    use crate::analysis::tensor::{DType, Dim, TensorFact};
    use crate::builtin::{GraphBuilder, SigDim, WeightFill};

    const F32: i32 = 1;
    const BOOL: i32 = 9;
    const I64: i32 = 7;

    fn graph(build: impl FnOnce(&mut GraphBuilder)) -> Attr {
        let mut b = GraphBuilder::new(WeightFill::Zeros);
        build(&mut b);
        Attr::Graph(Arc::new(b.finish("body").graph.unwrap_or_default()))
    }

    /// Scan body: state s [2] and slice x [2]; returns s + x as the new state and as the scan
    /// output.
    fn running_sum() -> Attr {
        graph(|b| {
            let s = b.input("s", F32, &SigDim::fixed_all(&[2]));
            let x = b.input("x", F32, &SigDim::fixed_all(&[2]));
            let sum = b.add(&s, &x);
            let copy = b.node("Identity", &[&sum], vec![]);
            b.output(&sum, F32, &SigDim::fixed_all(&[2]));
            b.output(&copy, F32, &SigDim::fixed_all(&[2]));
        })
    }

    #[test]
    fn scan_stacks_its_outputs_and_multiplies_the_body_cost() {
        let (state, sequence) = (f32s(&[2]), f32s(&[5, 2]));
        let op = Op::new("Scan")
            .opset(11)
            .attr("body", running_sum())
            .int("num_scan_inputs", 1)
            .outputs(2);
        let (out, cost) = op.run(&[&state, &sequence]);
        assert_eq!(dims(&out[0]), [2]);
        assert_eq!(dims(&out[1]), [5, 2]);
        // Five steps of one 2-element Add (2 FLOPs; 16 bytes read, 8 written).
        assert_eq!(cost.flops, 5 * 2);
        assert_eq!(cost.bytes.total(), 5 * 24);
        // A scan output axis of 1 stacks along it.
        let op = Op::new("Scan")
            .opset(11)
            .attr("body", running_sum())
            .int("num_scan_inputs", 1)
            .ints("scan_output_axes", &[1])
            .outputs(2);
        assert_eq!(dims(&op.infer(&[&state, &sequence])[1]), [2, 5]);
        // Opset 8: batched states and inputs, the sequence on axis 1.
        let op = Op::new("Scan")
            .opset(8)
            .attr("body", running_sum())
            .int("num_scan_inputs", 1)
            .outputs(2);
        let out = op
            .try_infer_opt(&[None, Some(&f32s(&[3, 2])), Some(&f32s(&[3, 5, 2]))])
            .unwrap();
        assert_eq!(dims(&out[0]), [3, 2]);
        assert_eq!(dims(&out[1]), [3, 5, 2]);
    }

    /// Loop body: (i, cond, v [3]) → (cond, v + 1, v).
    fn counter() -> Attr {
        graph(|b| {
            b.input("i", I64, &[]);
            let cond = b.input("cond", BOOL, &[]);
            let v = b.input("v", F32, &SigDim::fixed_all(&[3]));
            let one = b.scalar_const("one", 1.0);
            let next = b.add(&v, &one);
            let keep = b.node("Identity", &[&cond], vec![]);
            let seen = b.node("Identity", &[&v], vec![]);
            b.output(&keep, BOOL, &[]);
            b.output(&next, F32, &SigDim::fixed_all(&[3]));
            b.output(&seen, F32, &SigDim::fixed_all(&[3]));
        })
    }

    #[test]
    fn loop_with_a_constant_trip_count_stacks_its_iterations() {
        let trips = ints_shaped(&[], &[4]);
        let yes = TensorFact::constant(crate::analysis::tensor::Tensor {
            dtype: DType::Bool,
            shape: vec![],
            data: crate::analysis::tensor::TensorData::I64(vec![1]),
        });
        let v = f32s(&[3]);
        let op = Op::new("Loop").opset(13).attr("body", counter()).outputs(2);
        let (out, cost) = op.run(&[&trips, &yes, &v]);
        assert_eq!(dims(&out[0]), [3]);
        assert_eq!(dims(&out[1]), [4, 3]);
        // Four iterations of a 3-element Add.
        assert_eq!(cost.flops, 4 * 3);
        // A trip count known only at run time: a symbolic iteration count, and no cost.
        let runtime = act(DType::I64, &[]);
        let out = op.infer(&[&runtime, &yes, &v]);
        assert!(matches!(out[1].shape.as_deref().unwrap()[0], Dim::Sym(_)));
        assert!(op
            .try_cost_opt(&[Some(&runtime), Some(&yes), Some(&v)], &out)
            .is_err());
    }

    fn constant_branch(values: &'static [i64]) -> Attr {
        graph(move |b| {
            let c = b.int64_const("c", values);
            let out = b.node("Identity", &[&c], vec![]);
            b.output(&out, I64, &SigDim::fixed_all(&[values.len() as i64]));
        })
    }

    #[test]
    fn if_takes_a_constant_branch_and_merges_otherwise() {
        let op = Op::new("If")
            .attr("then_branch", constant_branch(&[1, 2, 3]))
            .attr("else_branch", constant_branch(&[4, 5]));
        let yes = ints_shaped(&[], &[1]);
        let out = op.infer(&[&yes]);
        assert_eq!(values(&out[0]), [1.0, 2.0, 3.0]);
        let no = ints_shaped(&[], &[0]);
        assert_eq!(dims(&op.infer(&[&no])[0]), [2]);
        // Unknown condition: the branches disagree on the length, which becomes a symbol.
        let out = op.infer(&[&act(DType::Bool, &[])]);
        assert_eq!(out[0].rank(), Some(1));
        assert!(out[0].concrete_shape().is_none());
    }

    #[test]
    fn a_body_reads_the_enclosing_graphs_values() {
        // The branch reads `outside`, which only the enclosing graph defines.
        let branch = graph(|b| {
            let doubled = b.node("Add", &["outside", "outside"], vec![]);
            b.output(
                &doubled,
                F32,
                &[SigDim::Named("rows"), SigDim::Named("cols")],
            );
        });
        let outside = f32s(&[7, 2]);
        let outer = |name: &str| (name == "outside").then(|| outside.clone());
        let op = Op::new("If")
            .attr("then_branch", branch.clone())
            .attr("else_branch", branch);
        let out = op.infer_with_outer(&[&act(DType::Bool, &[])], &outer);
        assert_eq!(dims(&out[0]), [7, 2]);
        // Without the enclosing graph the name is undefined: an error, not a guess.
        assert!(op.try_infer(&[&act(DType::Bool, &[])]).is_err());
    }

    /// A branch that fails only because an unknown condition made the analysis take both says
    /// so, and names the branch; a known condition that picks the failing one reports its
    /// reason alone, and one that picks the other succeeds.
    #[test]
    fn a_failing_branch_under_an_unknown_condition_says_why_it_was_analysed() {
        let failing = graph(|b| {
            let doubled = b.node("Add", &["undefined", "undefined"], vec![]);
            b.output(&doubled, F32, &[SigDim::Named("rows")]);
        });
        let op = Op::new("If")
            .attr("then_branch", constant_branch(&[1, 2]))
            .attr("else_branch", failing);
        let unknown = op.try_infer(&[&act(DType::Bool, &[])]).unwrap_err();
        assert!(
            unknown.contains("condition is not known") && unknown.contains("else_branch"),
            "{unknown}"
        );
        let known = op.try_infer(&[&ints_shaped(&[], &[0])]).unwrap_err();
        assert!(!known.contains("condition is not known"), "{known}");
        assert!(op.try_infer(&[&ints_shaped(&[], &[1])]).is_ok());
    }
}
