//! Control flow: If, Loop and Scan run their subgraphs with the executor itself. A body is
//! imported as a graph (`import::import_subgraph`) in which the enclosing values it reads
//! (passed to the node as implicit inputs, after its own) enter as constants when they are
//! integers (the shape arithmetic a body's Reshapes need) or the enclosing graph's weights
//! (the plan marks them), and as run-time inputs when they are float activations, like its
//! formal inputs; a body whose shapes depend on such a float's values is planned with them
//! as constants, per call. A body is planned once per set of input shapes and kept in
//! a process-wide cache, so a model run again (`bench`) runs its branches' plans instead of
//! importing and planning them each time: a Silero VAD, whose whole network sits in If
//! branches, took 3.0 ms per run that way, nearly all of it planning.
//! Shapes and costs are in `analysis/ops/control.rs`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{ints, Result};
use crate::analysis::graph::{Attr, Node};
use crate::analysis::import::import_subgraph;
use crate::analysis::onnx_proto::GraphProto;
use crate::analysis::ops::control::free_names;
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::exec::eval::{CONSTANT_INPUTS_ATTR, IMPLICIT_NAMES_ATTR};
use crate::exec::plan::Workspace;
use crate::exec::{build_plan, Plan, PlanOptions, RtData, RtTensor};

/// Iterations a Loop may run before it is taken for a runaway (the spec allows unbounded loops;
/// an executor for checking models does not).
const MAX_ITERATIONS: usize = 1 << 20;

/// Plan cache key: the formal inputs' shapes, and the values of the integer ones when the body
/// is planned for its values (a Slice by the iteration number: shapes that depend on them).
type PlanKey = (Vec<Vec<usize>>, Vec<Option<Vec<i64>>>);

/// Where a body's run-time input comes from.
#[derive(Clone, Copy, Debug)]
enum Feed {
    /// The body's formal input of that index.
    Formal(usize),
    /// The enclosing float value of that index (`Outer::fed`).
    Outer(usize),
}

/// A planned body with its run-time inputs by name.
type Planned = (Plan, Vec<(String, Feed)>);

/// A body imported and inferred for one key, with its run-time inputs by name.
type InferredBody = (
    crate::analysis::Graph,
    crate::analysis::infer::Inferred,
    Vec<(String, Feed)>,
);

/// The enclosing values a body reads.
struct Outer<'a> {
    /// Weights and integer values, entered as constants (made facts only when a body is
    /// planned: a cached plan needs no copy of them).
    constants: HashMap<String, (&'a RtTensor, DType)>,
    /// The same, for the plan cache's key: (name, shape, values) of the integers, (name,
    /// shape, sampled fingerprint) of the float constants (weights).
    constant_key: Vec<(String, Vec<usize>, Vec<i64>)>,
    /// Float values, fed at run time: (name, value, element type).
    fed: Vec<(String, &'a RtTensor, DType)>,
}

/// Process-wide cache key of a body's plan: the body (its address, kept alive by the entry),
/// the opset, the formal inputs' key, the fed enclosing values' names and shapes, and the
/// constant ones.
type CacheKey = (
    usize,
    i64,
    PlanKey,
    Vec<(String, Vec<usize>)>,
    Vec<(String, Vec<usize>, Vec<i64>)>,
);

/// A float constant's fingerprint for the cache key: its length and 64 elements spread over it
/// (hashing every weight on every run would cost what the cache saves). The same body with
/// rewritten weights (an advisor pass that folded or pruned them) differs in nearly all of
/// them.
fn fingerprint(values: &[f32]) -> Vec<i64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let samples = values.len().min(64);
    for k in 0..samples {
        values[k * values.len() / samples]
            .to_bits()
            .hash(&mut hasher);
    }
    vec![values.len() as i64, hasher.finish() as i64]
}

/// A cached plan, holding the body it was planned from so its address stays its own.
struct CachedPlan {
    _body: Arc<GraphProto>,
    planned: Planned,
}

/// Entries before the cache is emptied (a process that runs many models with branches).
const CACHE_ENTRIES: usize = 256;

fn plan_cache() -> &'static Mutex<HashMap<CacheKey, Arc<CachedPlan>>> {
    static PLANS: OnceLock<Mutex<HashMap<CacheKey, Arc<CachedPlan>>>> = OnceLock::new();
    PLANS.get_or_init(Default::default)
}

/// One subgraph, planned per set of input shapes (and integer values, where needed).
struct Body<'a> {
    proto: &'a Arc<GraphProto>,
    opset: i64,
    outer: &'a Outer<'a>,
    /// Whether integer inputs are bound as constants (set once planning without them failed).
    by_value: bool,
    /// Whether the enclosing float values are constants too (set with `by_value`).
    bake_floats: bool,
    /// Plans by key of this run, where they depend on integer inputs' values.
    plans: HashMap<PlanKey, Arc<CachedPlan>>,
    /// The last call's key, plan and workspace: a loop's iterations and a scan's steps run one
    /// plan over and over, so they skip the cache's key (hashing and comparing the enclosing
    /// values' names and fingerprints) and keep their buffers. A 200-iteration loop of one
    /// 256-wide GEMV and tanh spent as much on those, a fresh workspace and a map of copied
    /// feeds per iteration as on its products.
    last: Option<(PlanKey, Arc<CachedPlan>, Workspace)>,
}

impl<'a> Body<'a> {
    fn new(proto: &'a Arc<GraphProto>, opset: i64, outer: &'a Outer<'a>) -> Body<'a> {
        Body {
            proto,
            opset,
            outer,
            by_value: false,
            bake_floats: false,
            plans: HashMap::new(),
            last: None,
        }
    }

    fn cache_key(&self, key: &PlanKey) -> CacheKey {
        (
            Arc::as_ptr(self.proto) as usize,
            self.opset,
            key.clone(),
            self.outer
                .fed
                .iter()
                .map(|(name, t, _)| (name.clone(), t.shape.clone()))
                .collect(),
            self.outer.constant_key.clone(),
        )
    }

    fn key(&self, inputs: &[RtTensor], types: &[DType]) -> PlanKey {
        (
            inputs.iter().map(|t| t.shape.clone()).collect(),
            inputs
                .iter()
                .zip(types)
                .map(|(t, d)| (self.by_value && !d.is_float()).then(|| ints(t)))
                .collect(),
        )
    }

    /// Imports, infers and plans the body for `key`.
    fn plan(&self, key: &PlanKey, inputs: &[RtTensor], types: &[DType]) -> Result<Planned> {
        let (graph, (order, states, _), names) = self.inferred(key, inputs, types)?;
        let plan = build_plan(&graph, &order, &states, &PlanOptions::default())
            .map_err(|e| format!("body `{}`: {e}", self.proto.name))?;
        Ok((plan, names))
    }

    /// The body imported and inferred for `key`, with the names of its run-time inputs.
    fn inferred(
        &self,
        key: &PlanKey,
        inputs: &[RtTensor],
        types: &[DType],
    ) -> Result<InferredBody> {
        let lookup = |name: &str| {
            let constant = self.outer.constants.get(name);
            constant
                .map(|&(value, dtype)| constant_of(value, dtype))
                .or_else(|| {
                    let (_, value, dtype) = self.outer.fed.iter().find(|(n, _, _)| n == name)?;
                    if self.bake_floats {
                        return Some(constant_of(value, *dtype));
                    }
                    let dims: Vec<u64> = value.shape.iter().map(|&d| d as u64).collect();
                    Some(TensorFact::known(*dtype, &dims))
                })
        };
        let mut graph = import_subgraph(self.proto, self.opset, &lookup)
            .map_err(|e| format!("body `{}`: {e}", self.proto.name))?;
        if graph.inputs.len() != inputs.len() {
            return Err(format!(
                "body `{}` takes {} inputs, given {}",
                self.proto.name,
                graph.inputs.len(),
                inputs.len()
            ));
        }
        let mut names = Vec::new();
        let mut kept = Vec::new();
        for (index, (((&value, shape), &dtype), (tensor, bound))) in graph
            .inputs
            .clone()
            .iter()
            .zip(&key.0)
            .zip(types)
            .zip(inputs.iter().zip(&key.1))
            .enumerate()
        {
            if bound.is_some() {
                graph.values[value].fact = constant_of(tensor, dtype);
                continue;
            }
            let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            graph.values[value].fact = TensorFact::known(dtype, &dims);
            names.push((graph.values[value].name.clone(), Feed::Formal(index)));
            kept.push(value);
        }
        // The fed enclosing values the body reads become run-time inputs too.
        let fed = if self.bake_floats {
            &[][..]
        } else {
            &self.outer.fed[..]
        };
        for (index, (name, _, _)) in fed.iter().enumerate() {
            let read = graph
                .values
                .iter()
                .position(|v| &v.name == name && v.producer.is_none() && v.fact.konst.is_none());
            if let Some(value) = read.filter(|value| !kept.contains(value)) {
                names.push((name.clone(), Feed::Outer(index)));
                kept.push(value);
            }
        }
        graph.inputs = kept;
        let inferred = crate::analysis::infer::infer_graph(&mut graph)
            .map_err(|e| format!("body `{}`: {e}", self.proto.name))?;
        Ok((graph, inferred, names))
    }

    /// The shapes of the body's outputs for `inputs`, and whether each is float, without
    /// running it (what a loop that runs zero times stacks zero of).
    fn output_shapes(
        &self,
        inputs: &[RtTensor],
        types: &[DType],
    ) -> Result<Vec<(Vec<usize>, bool)>> {
        let key = self.key(inputs, types);
        let (graph, _, _) = self.inferred(&key, inputs, types)?;
        graph
            .outputs
            .iter()
            .map(|&v| {
                let fact = &graph.values[v].fact;
                crate::exec::dims(fact)
                    .map(|shape| (shape, fact.dtype.is_float()))
                    .ok_or_else(|| {
                        format!("body `{}`: an output shape is unknown", self.proto.name)
                    })
            })
            .collect()
    }

    /// Runs the body on `inputs` (its formal inputs in order); returns its outputs in order.
    fn run(&mut self, inputs: &[RtTensor], types: &[DType]) -> Result<Vec<RtTensor>> {
        let key = self.key(inputs, types);
        if !matches!(&self.last, Some((last, _, _)) if *last == key) {
            let cached = self.planned(inputs, types)?;
            let workspace = cached.planned.0.workspace();
            // Planning may have switched to per-value keys.
            self.last = Some((self.key(inputs, types), cached, workspace));
        }
        let Some((_, cached, workspace)) = self.last.as_mut() else {
            unreachable!("set above")
        };
        let (plan, names) = &cached.planned;
        let fed = &self.outer.fed;
        let lookup = |name: &str| {
            let (_, feed) = names.iter().find(|(n, _)| n == name)?;
            Some(match *feed {
                Feed::Formal(index) => &inputs[index],
                Feed::Outer(index) => fed[index].1,
            })
        };
        let name = &self.proto.name;
        plan.stage_by(workspace, lookup, true)
            .and_then(|()| plan.run_staged(workspace, None))
            .and_then(|()| plan.read_outputs(workspace))
            .map(|outputs| outputs.into_iter().map(|(_, t)| t).collect())
            .map_err(|e| format!("body `{name}`: {e}"))
    }

    /// The plan for `inputs`: from the process-wide cache, this run's per-value plans, or
    /// planned now.
    fn planned(&mut self, inputs: &[RtTensor], types: &[DType]) -> Result<Arc<CachedPlan>> {
        let key = self.key(inputs, types);
        if self.by_value {
            return self.planned_by_value(key, inputs, types);
        }
        let cache_key = self.cache_key(&key);
        let lock = || plan_cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = lock().get(&cache_key) {
            return Ok(Arc::clone(cached));
        }
        match self.plan(&key, inputs, types) {
            Ok(planned) => {
                let cached = Arc::new(CachedPlan {
                    _body: Arc::clone(self.proto),
                    planned,
                });
                let mut cache = lock();
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
                cache.insert(cache_key, Arc::clone(&cached));
                Ok(cached)
            }
            Err(_) if types.iter().any(|d| !d.is_float()) || !self.outer.fed.is_empty() => {
                // Shapes inside depend on an integer input's value, or on an enclosing float's
                // (Resize scales computed outside): plan per value, this call only.
                self.by_value = true;
                self.bake_floats = true;
                let key = self.key(inputs, types);
                self.planned_by_value(key, inputs, types)
            }
            Err(e) => Err(e),
        }
    }

    fn planned_by_value(
        &mut self,
        key: PlanKey,
        inputs: &[RtTensor],
        types: &[DType],
    ) -> Result<Arc<CachedPlan>> {
        if let Some(cached) = self.plans.get(&key) {
            return Ok(Arc::clone(cached));
        }
        let cached = Arc::new(CachedPlan {
            _body: Arc::clone(self.proto),
            planned: self.plan(&key, inputs, types)?,
        });
        // Planned per value (an iteration number): keep only the latest plan.
        self.plans.clear();
        self.plans.insert(key, Arc::clone(&cached));
        Ok(cached)
    }
}

fn subgraph<'a>(node: &'a Node, name: &str) -> Result<&'a Arc<GraphProto>> {
    match node.attrs.get(name) {
        Some(Attr::Graph(g)) => Ok(g),
        _ => Err(format!("missing subgraph `{name}`")),
    }
}

fn constant_of(tensor: &RtTensor, dtype: DType) -> TensorFact {
    TensorFact::constant(Tensor {
        dtype,
        shape: tensor.shape.iter().map(|&d| d as u64).collect(),
        data: match &tensor.data {
            RtData::F32(v) => TensorData::F32(v.clone()),
            RtData::I64(v) => TensorData::I64(v.clone()),
        },
    })
}

/// The free names of `node`'s bodies: the plan's copy of the node carries them
/// ([`IMPLICIT_NAMES_ATTR`]); a node run outside a plan walks its bodies.
fn implicit_names(node: &Node) -> Cow<'_, [String]> {
    match node.attrs.get(IMPLICIT_NAMES_ATTR) {
        Some(Attr::Strings(names)) => Cow::Borrowed(names),
        _ => Cow::Owned(free_names(&node.attrs)),
    }
}

/// Runs an If, Loop or Scan node; `inputs` holds its own inputs then its implicit ones (the
/// values named by `free_names`, in that order), `in_types` their element types.
pub(super) fn run(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
) -> Result<Vec<RtTensor>> {
    let names = implicit_names(node);
    let own = inputs
        .len()
        .checked_sub(names.len())
        .ok_or("implicit inputs missing")?;
    let mut outer = Outer {
        constants: HashMap::new(),
        constant_key: Vec::new(),
        fed: Vec::new(),
    };
    // Inputs the plan marked constant (weights of the enclosing graph); without the mark
    // (a node evaluated once, outside a plan) float values are fed.
    let constant_inputs = node.attrs.ints(CONSTANT_INPUTS_ATTR).unwrap_or_default();
    for (k, ((name, value), dtype)) in names
        .iter()
        .zip(&inputs[own..])
        .zip(&in_types[own..])
        .enumerate()
    {
        let value = value
            .as_ref()
            .ok_or_else(|| format!("the enclosing value `{name}` is not available"))?;
        let dtype = dtype.unwrap_or(DType::F32);
        match &value.data {
            RtData::F32(values) if constant_inputs.contains(&((own + k) as i64)) => {
                outer.constants.insert(name.clone(), (value, dtype));
                outer
                    .constant_key
                    .push((name.clone(), value.shape.clone(), fingerprint(values)));
            }
            RtData::F32(_) => outer.fed.push((name.clone(), value, dtype)),
            RtData::I64(values) => {
                outer.constants.insert(name.clone(), (value, dtype));
                outer
                    .constant_key
                    .push((name.clone(), value.shape.clone(), values.clone()));
            }
        }
    }
    outer.constant_key.sort();
    let inputs = &inputs[..own];
    let in_types = &in_types[..own];
    match node.op_type.as_str() {
        "If" => run_if(node, opset, inputs, &outer),
        "Loop" => run_loop(node, opset, inputs, in_types, &outer),
        "Scan" => run_scan(node, opset, inputs, in_types, &outer),
        other => Err(format!("{other} is not a control-flow op")),
    }
}

fn run_if(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    outer: &Outer<'_>,
) -> Result<Vec<RtTensor>> {
    let cond = inputs.first().and_then(|t| *t).ok_or("cond is missing")?;
    let truth = *ints(cond).first().ok_or("cond is empty")? != 0;
    let branch = subgraph(node, if truth { "then_branch" } else { "else_branch" })?;
    Body::new(branch, opset, outer).run(&[], &[])
}

/// Stacks per-iteration pieces along a new `axis` (all pieces one shape); with no pieces, an
/// empty tensor of `empty` (the piece shape and whether it is float).
fn stack(pieces: &[RtTensor], axis: usize, empty: Option<&(Vec<usize>, bool)>) -> Result<RtTensor> {
    fn interleave<T: Copy>(parts: &[&[T]], outer: usize, inner: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(outer * inner * parts.len());
        for o in 0..outer {
            for part in parts {
                out.extend_from_slice(&part[o * inner..(o + 1) * inner]);
            }
        }
        out
    }
    let Some(first) = pieces.first() else {
        let (shape, float) = empty.ok_or("nothing to stack")?;
        let mut shape = shape.clone();
        shape.insert(axis.min(shape.len()), 0);
        let data = if *float {
            RtData::F32(Vec::new())
        } else {
            RtData::I64(Vec::new())
        };
        return Ok(RtTensor { shape, data });
    };
    let shape = &first.shape;
    if pieces.iter().any(|p| &p.shape != shape) {
        return Err("scan output pieces differ in shape between iterations".into());
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis..].iter().product();
    let mut out_shape = shape.clone();
    out_shape.insert(axis, pieces.len());
    let data = match &first.data {
        RtData::F32(_) => {
            let parts: Vec<&[f32]> = pieces
                .iter()
                .map(|p| p.as_f32().ok_or("mixed element kinds"))
                .collect::<std::result::Result<_, _>>()?;
            RtData::F32(interleave(&parts, outer, inner))
        }
        RtData::I64(_) => {
            let parts: Vec<&[i64]> = pieces
                .iter()
                .map(|p| match &p.data {
                    RtData::I64(v) => Ok(v.as_slice()),
                    RtData::F32(_) => Err("mixed element kinds"),
                })
                .collect::<std::result::Result<_, _>>()?;
            RtData::I64(interleave(&parts, outer, inner))
        }
    };
    Ok(RtTensor {
        shape: out_shape,
        data,
    })
}

/// Slice `index` of `t` along `axis`, with the axis removed.
fn take(t: &RtTensor, axis: usize, index: usize) -> RtTensor {
    let outer: usize = t.shape[..axis].iter().product();
    let length = t.shape[axis];
    let inner: usize = t.shape[axis + 1..].iter().product();
    let mut shape = t.shape.clone();
    shape.remove(axis);
    fn pick<T: Copy>(v: &[T], outer: usize, length: usize, inner: usize, index: usize) -> Vec<T> {
        (0..outer)
            .flat_map(|o| {
                v[(o * length + index) * inner..(o * length + index + 1) * inner].to_vec()
            })
            .collect()
    }
    let data = match &t.data {
        RtData::F32(v) => RtData::F32(pick(v, outer, length, inner, index)),
        RtData::I64(v) => RtData::I64(pick(v, outer, length, inner, index)),
    };
    RtTensor { shape, data }
}

fn scalar(value: i64) -> RtTensor {
    RtTensor {
        shape: Vec::new(),
        data: RtData::I64(vec![value]),
    }
}

fn run_loop(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
    outer: &Outer<'_>,
) -> Result<Vec<RtTensor>> {
    let proto = subgraph(node, "body")?;
    let trips = match inputs.first().and_then(|t| *t) {
        Some(m) => Some(*ints(m).first().ok_or("M is empty")?),
        None => None,
    };
    let mut cond = match inputs.get(1).and_then(|t| *t) {
        Some(c) => *ints(c).first().ok_or("cond is empty")? != 0,
        None => true,
    };
    let mut carried: Vec<RtTensor> = inputs
        .iter()
        .skip(2)
        .map(|t| {
            t.cloned()
                .ok_or_else(|| "a loop-carried input is missing".to_string())
        })
        .collect::<Result<_>>()?;
    let mut types = vec![DType::I64, DType::Bool];
    types.extend(in_types.iter().skip(2).map(|t| t.unwrap_or(DType::F32)));
    let mut body = Body::new(proto, opset, outer);
    let mut scans: Vec<Vec<RtTensor>> = Vec::new();
    let mut iteration = 0i64;
    while cond && trips.is_none_or(|m| iteration < m) {
        if iteration as usize >= MAX_ITERATIONS {
            return Err(format!("more than {MAX_ITERATIONS} iterations"));
        }
        let mut feeds = vec![scalar(iteration), scalar(cond as i64)];
        feeds.extend(carried.iter().cloned());
        let outs = body.run(&feeds, &types)?;
        if outs.len() < 1 + carried.len() {
            return Err("the body returns fewer values than it carries".into());
        }
        cond = *ints(&outs[0]).first().ok_or("the body's cond is empty")? != 0;
        let scan_count = outs.len() - 1 - carried.len();
        scans.resize_with(scan_count, Vec::new);
        for (i, out) in outs.into_iter().enumerate().skip(1) {
            if i <= carried.len() {
                carried[i - 1] = out;
            } else {
                scans[i - 1 - carried.len()].push(out);
            }
        }
        iteration += 1;
    }
    // A loop that never ran still has its scan outputs, with no rows.
    let shapes = if iteration == 0 {
        let mut feeds = vec![scalar(0), scalar(cond as i64)];
        feeds.extend(carried.iter().cloned());
        let shapes = body.output_shapes(&feeds, &types)?;
        scans.resize_with(shapes.len().saturating_sub(1 + carried.len()), Vec::new);
        shapes
    } else {
        Vec::new()
    };
    let carried_count = carried.len();
    let mut results = carried;
    for (k, pieces) in scans.iter().enumerate() {
        results.push(stack(pieces, 0, shapes.get(1 + carried_count + k))?);
    }
    Ok(results)
}

fn run_scan(
    node: &Node,
    opset: i64,
    inputs: &[Option<&RtTensor>],
    in_types: &[Option<DType>],
    outer: &Outer<'_>,
) -> Result<Vec<RtTensor>> {
    let proto = subgraph(node, "body")?;
    let attrs = &node.attrs;
    let batched = opset < 9;
    let skip = usize::from(batched);
    if batched && inputs.first().is_some_and(Option::is_some) {
        return Err("Scan-8 with sequence_lens is not supported".into());
    }
    let given: Vec<(&RtTensor, DType)> = inputs
        .iter()
        .zip(in_types)
        .skip(skip)
        .filter_map(|(t, d)| t.map(|t| (t, d.unwrap_or(DType::F32))))
        .collect();
    let scans = attrs.int("num_scan_inputs").unwrap_or(0).max(0) as usize;
    if scans == 0 || scans > given.len() {
        return Err("num_scan_inputs out of range".into());
    }
    let states = given.len() - scans;
    let types: Vec<DType> = given.iter().map(|(_, d)| *d).collect();
    let input_axes: Vec<usize> = (0..scans)
        .map(|j| {
            let rank = given[states + j]
                .0
                .shape
                .len()
                .checked_sub(skip + 1)
                .ok_or("a scan input has no scan axis")?
                + 1;
            let axis = if batched {
                0
            } else {
                attrs
                    .ints("scan_input_axes")
                    .and_then(|a| a.get(j).copied())
                    .unwrap_or(0)
            };
            super::axis_of(axis, rank)
        })
        .collect::<Result<_>>()?;
    // Opset 8 calls the input directions `directions`.
    let input_directions = if batched {
        "directions"
    } else {
        "scan_input_directions"
    };
    let reversed = |name: &str, j: usize| {
        attrs
            .ints(name)
            .and_then(|d| d.get(j).copied())
            .unwrap_or(0)
            == 1
    };
    let batch = if batched { given[0].0.shape[0] } else { 1 };
    if batched && given.iter().any(|(t, _)| t.shape.first() != Some(&batch)) {
        return Err("Scan-8: the states and scan inputs differ in batch".into());
    }
    // Every scan input runs the same number of steps.
    let lengths: Vec<usize> = given[states..]
        .iter()
        .zip(&input_axes)
        .map(|((t, _), &axis)| t.shape[axis + skip])
        .collect();
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!("scan inputs of different lengths {lengths:?}"));
    }
    let mut body = Body::new(proto, opset, outer);
    // Per batch row (one row from opset 9): the states and scan pieces.
    let mut final_states: Vec<Vec<RtTensor>> = Vec::new();
    let mut stacked: Vec<Vec<RtTensor>> = Vec::new();
    for b in 0..batch {
        let row = |t: &RtTensor| if batched { take(t, 0, b) } else { t.clone() };
        let mut state: Vec<RtTensor> = given[..states].iter().map(|(t, _)| row(t)).collect();
        let sequences: Vec<RtTensor> = given[states..].iter().map(|(t, _)| row(t)).collect();
        let length = lengths[0];
        let mut pieces: Vec<Vec<RtTensor>> = Vec::new();
        // A scan of no steps still has its scan outputs, with no rows.
        let empty_shapes = if length == 0 {
            let mut feeds = state.clone();
            for (seq, &axis) in sequences.iter().zip(&input_axes) {
                let mut shape = seq.shape.clone();
                shape.remove(axis);
                let count: usize = shape.iter().product();
                feeds.push(RtTensor {
                    data: match seq.data {
                        RtData::F32(_) => RtData::F32(vec![0.0; count]),
                        RtData::I64(_) => RtData::I64(vec![0; count]),
                    },
                    shape,
                });
            }
            let shapes = body.output_shapes(&feeds, &types)?;
            pieces.resize_with(shapes.len().saturating_sub(states), Vec::new);
            shapes
        } else {
            Vec::new()
        };
        for t in 0..length {
            let mut feeds = state.clone();
            for (j, seq) in sequences.iter().enumerate() {
                let at = if reversed(input_directions, j) {
                    length - 1 - t
                } else {
                    t
                };
                feeds.push(take(seq, input_axes[j], at));
            }
            let outs = body.run(&feeds, &types)?;
            if outs.len() < states {
                return Err("the body returns fewer values than the states".into());
            }
            pieces.resize_with(outs.len() - states, Vec::new);
            for (i, out) in outs.into_iter().enumerate() {
                if i < states {
                    state[i] = out;
                } else {
                    pieces[i - states].push(out);
                }
            }
        }
        let mut outputs = Vec::new();
        for (k, mut list) in pieces.into_iter().enumerate() {
            if reversed("scan_output_directions", k) {
                list.reverse();
            }
            let rank = list.first().map_or(0, |p| p.shape.len());
            let axis = if batched {
                0
            } else {
                let axis = attrs
                    .ints("scan_output_axes")
                    .and_then(|a| a.get(k).copied())
                    .unwrap_or(0);
                super::axis_of(axis, rank + 1)?
            };
            outputs.push(stack(&list, axis, empty_shapes.get(states + k))?);
        }
        final_states.push(state);
        stacked.push(outputs);
    }
    if !batched {
        let mut results = final_states.pop().unwrap_or_default();
        results.extend(stacked.pop().unwrap_or_default());
        return Ok(results);
    }
    // Opset 8: stack the rows back along the batch axis.
    let mut results = Vec::new();
    for i in 0..states {
        let rows: Vec<RtTensor> = final_states.iter().map(|s| s[i].clone()).collect();
        results.push(stack(&rows, 0, None)?);
    }
    for k in 0..stacked.first().map_or(0, Vec::len) {
        let rows: Vec<RtTensor> = stacked.iter().map(|s| s[k].clone()).collect();
        results.push(stack(&rows, 0, None)?);
    }
    Ok(results)
}

#[cfg(test)]
mod tests;
