//! Binding symbolic input dims and inferring every value's fact in topological order. Constant
//! folding happens here too: ops evaluate on constant inputs (shape arithmetic), and any
//! deterministic op whose inputs are all constant yields a constant (an opaque one when the
//! value is too large or not computable), so weight generators never count as run-time work.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::AnalysisError;
use super::graph::{Graph, NodeId};
use super::ops::{self, InferCtx, OpNode};
use super::tensor::{shape_to_string, DType, Dim, Tensor, TensorData, TensorFact};

/// Largest element count accepted for one tensor (2^48: 1 PiB of bytes); beyond that a shape is
/// treated as absurd input rather than a model.
pub const MAX_ELEMENTS: u64 = 1 << 48;

/// User bindings for symbolic input dims.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// `--input NAME=1x3x224x224`; an empty name binds the model's only input.
    pub inputs: Vec<(String, Vec<u64>)>,
    /// `--batch N`: binds a symbolic leading dim of every input.
    pub batch: Option<u64>,
    /// `--dim NAME=VALUE`: binds the symbolic dim `NAME` wherever it appears.
    pub dims: Vec<(String, u64)>,
}

impl Bindings {
    /// Parses `NAME=1x3x224x224` (or `1x3x224x224` for a single-input model; `,` also separates).
    pub fn parse_input(spec: &str) -> Result<(String, Vec<u64>), AnalysisError> {
        let (name, dims) = match spec.rsplit_once('=') {
            Some((name, dims)) => (name.to_string(), dims),
            None => (String::new(), spec),
        };
        let bad = |reason: &str| AnalysisError::BadInputSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        if dims.trim().is_empty() {
            return Err(bad("no dims after `=` (expected e.g. 1x3x224x224)"));
        }
        let parsed = dims
            .split(['x', 'X', ',', '*'])
            .map(|d| d.trim().parse::<u64>())
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|_| bad("dims must be positive integers separated by `x`"))?;
        if parsed.contains(&0) {
            return Err(bad("a dim of 0 makes an empty tensor"));
        }
        Ok((name, parsed))
    }

    /// Parses `NAME=VALUE` (`--dim sequence_length=128`).
    pub fn parse_dim(spec: &str) -> Result<(String, u64), AnalysisError> {
        let bad = |reason: &str| AnalysisError::BadDimSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (name, value) = spec
            .rsplit_once('=')
            .ok_or_else(|| bad("expected NAME=VALUE, e.g. sequence_length=128"))?;
        if name.trim().is_empty() {
            return Err(bad("no dim name before `=`"));
        }
        let value: u64 = value
            .trim()
            .parse()
            .map_err(|_| bad("the value must be a positive integer"))?;
        if value == 0 {
            return Err(bad("a dim of 0 makes an empty tensor"));
        }
        Ok((name.trim().to_string(), value))
    }
}

/// A non-fatal finding, shown to the user and counted by `--strict`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op_type: Option<String>,
    pub message: String,
}

impl Diagnostic {
    /// Whether this records an op the tool does not know (its node is not costed).
    pub fn is_unknown_op(&self) -> bool {
        self.message.starts_with("unknown op")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    /// Bad input that still lets the rest of the model be analysed: the report is produced and
    /// the command exits with status 2. (An op the tool does not know is a warning, not this.)
    Error,
}

/// Binds the symbolic dims of the graph inputs; every input must end up fully known.
pub fn bind_inputs(graph: &mut Graph, bindings: &Bindings) -> Result<(), AnalysisError> {
    let mut symbols: HashMap<String, u64> = HashMap::new();
    // Named dims first: they bind a symbol wherever it appears, inputs and value_info alike.
    let used: BTreeSet<String> = graph
        .inputs
        .iter()
        .flat_map(|&v| graph.values[v].fact.shape.iter().flatten())
        .filter_map(|d| match d {
            Dim::Sym(symbol) => Some(symbol.clone()),
            Dim::Known(_) => None,
        })
        .collect();
    for (name, value) in &bindings.dims {
        // A graph bound before (the advisor re-prepares the graph it rewrites) keeps the dims
        // it was bound with: binding one again to the same value is no error.
        match graph.bound_dims.get(name) {
            Some(bound) if bound == value => continue,
            Some(bound) => {
                return Err(AnalysisError::BadDimSpec {
                    spec: format!("{name}={value}"),
                    reason: format!("`{name}` is already bound to {bound}"),
                })
            }
            None => {}
        }
        if !used.contains(name) {
            return Err(AnalysisError::BadDimSpec {
                spec: format!("{name}={value}"),
                reason: if used.is_empty() {
                    "the model's inputs have no symbolic dims".into()
                } else {
                    format!(
                        "no input has a dim named `{name}` (symbolic dims: {})",
                        used.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                },
            });
        }
        if let Some(previous) = symbols.insert(name.clone(), *value) {
            if previous != *value {
                return Err(AnalysisError::BadDimSpec {
                    spec: format!("{name}={value}"),
                    reason: format!("`{name}` is also given as {previous}"),
                });
            }
        }
    }
    let input_names: Vec<String> = graph
        .inputs
        .iter()
        .map(|&v| graph.values[v].name.clone())
        .collect();
    for (name, dims) in &bindings.inputs {
        let value = if name.is_empty() {
            if graph.inputs.len() != 1 {
                return Err(AnalysisError::BadInputSpec {
                    spec: shape_to_string(&dims.iter().map(|&d| Dim::Known(d)).collect::<Vec<_>>()),
                    reason: format!(
                        "the model has {} inputs ({}); name the one to bind as NAME=DIMS",
                        graph.inputs.len(),
                        input_names.join(", ")
                    ),
                });
            }
            graph.inputs[0]
        } else {
            *graph
                .inputs
                .iter()
                .find(|&&v| graph.values[v].name == *name)
                .ok_or_else(|| AnalysisError::BadInputSpec {
                    spec: name.clone(),
                    reason: format!(
                        "no input named `{name}` (inputs: {})",
                        input_names.join(", ")
                    ),
                })?
        };
        let fact = &mut graph.values[value].fact;
        if let Some(shape) = &fact.shape {
            if shape.len() != dims.len() {
                return Err(AnalysisError::BadInputSpec {
                    spec: name.clone(),
                    reason: format!(
                        "the model declares rank {} ({}) but {} dims were given",
                        shape.len(),
                        shape_to_string(shape),
                        dims.len()
                    ),
                });
            }
            for (declared, &given) in shape.iter().zip(dims) {
                match declared {
                    Dim::Known(d) if *d != given => {
                        return Err(AnalysisError::BadInputSpec {
                            spec: name.clone(),
                            reason: format!(
                                "the model fixes this input to {}; {} contradicts it",
                                shape_to_string(shape),
                                given
                            ),
                        })
                    }
                    Dim::Sym(symbol) => {
                        let named = bindings
                            .dims
                            .iter()
                            .find(|(n, _)| n == symbol)
                            .map(|d| &d.1);
                        if let Some(&named) = named {
                            if named != given {
                                return Err(AnalysisError::BadInputSpec {
                                    spec: name.clone(),
                                    reason: format!(
                                        "binds `{symbol}` to {given} but --dim gives {named}"
                                    ),
                                });
                            }
                        }
                        symbols.insert(symbol.clone(), given);
                    }
                    _ => {}
                }
            }
        }
        fact.shape = Some(dims.iter().map(|&d| Dim::Known(d)).collect());
    }
    if let Some(batch) = bindings.batch {
        if batch == 0 {
            return Err(AnalysisError::BadBatch {
                batch,
                reason: "the batch must be at least 1".into(),
            });
        }
        let mut applied = false;
        let mut contradicted = None;
        for &value in &graph.inputs {
            match graph.values[value].fact.shape.as_ref().map(|s| s.first()) {
                Some(Some(Dim::Sym(symbol))) => {
                    let bound = *symbols.entry(symbol.clone()).or_insert(batch);
                    if bound != batch && bindings.dims.iter().any(|(n, _)| n == symbol) {
                        return Err(AnalysisError::BadBatch {
                            batch,
                            reason: format!("--dim gives `{symbol}` as {bound}"),
                        });
                    }
                    applied = true;
                }
                Some(Some(Dim::Known(fixed))) if *fixed != batch => {
                    contradicted.get_or_insert((value, *fixed));
                }
                _ => {}
            }
        }
        // A batch that binds nothing and disagrees with a fixed one would be silently ignored:
        // the user would read a batch-1 report as a batch-8 one.
        if let (false, Some((value, fixed))) = (applied, contradicted) {
            let v = &graph.values[value];
            return Err(AnalysisError::BadBatch {
                batch,
                reason: format!(
                    "the model fixes the batch of input `{}` to {fixed} (shape {}) and has no symbolic batch dim to bind",
                    v.name,
                    shape_to_string(v.fact.shape.as_deref().unwrap_or(&[]))
                ),
            });
        }
    }
    // Substitute bound symbols everywhere they appear (other inputs, declared value_info).
    let substitute = |fact: &mut TensorFact| {
        if let Some(shape) = &mut fact.shape {
            for dim in shape.iter_mut() {
                if let Dim::Sym(symbol) = dim {
                    if let Some(&v) = symbols.get(symbol.as_str()) {
                        *dim = Dim::Known(v);
                    }
                }
            }
        }
    };
    for value in &mut graph.values {
        substitute(&mut value.fact);
        if let Some(declared) = &mut value.declared {
            substitute(declared);
        }
    }
    graph.bound_dims.extend(symbols);
    let mut unbound: Vec<(String, Vec<String>)> = Vec::new();
    for &value in &graph.inputs {
        let v = &graph.values[value];
        let shape = v
            .fact
            .shape
            .as_ref()
            .ok_or_else(|| AnalysisError::BadInputSpec {
                spec: v.name.clone(),
                reason: "the model does not declare this input's rank; bind it with --input".into(),
            })?;
        for dim in shape {
            if let Dim::Sym(symbol) = dim {
                match unbound.iter_mut().find(|(s, _)| s == symbol) {
                    Some((_, inputs)) => {
                        if !inputs.contains(&v.name) {
                            inputs.push(v.name.clone())
                        }
                    }
                    None => unbound.push((symbol.clone(), vec![v.name.clone()])),
                }
            }
        }
    }
    if let Some((first, inputs)) = unbound.first() {
        let input = inputs[0].clone();
        let value = graph
            .inputs
            .iter()
            .find(|&&v| graph.values[v].name == input);
        let shape = value
            .and_then(|&v| graph.values[v].fact.shape.as_deref())
            .map(shape_to_string)
            .unwrap_or_default();
        let listed: Vec<String> = unbound
            .iter()
            .map(|(symbol, inputs)| {
                let shown: Vec<&str> = inputs.iter().take(3).map(String::as_str).collect();
                let more = match inputs.len() {
                    n if n > 3 => format!(" and {} more", n - 3),
                    _ => String::new(),
                };
                format!("`{symbol}` ({}{more})", shown.join(", "))
            })
            .collect();
        return Err(AnalysisError::UnboundDim {
            input,
            dim: first.clone(),
            shape,
            all: listed.join(", "),
        });
    }
    for &value in &graph.inputs {
        let v = &graph.values[value];
        check_size(&v.name, &v.fact)?;
    }
    Ok(())
}

fn check_size(what: &str, fact: &TensorFact) -> Result<(), AnalysisError> {
    if let Some(dims) = fact.concrete_shape() {
        let volume = ops::checked_volume(&dims);
        if volume.is_none_or(|v| v > MAX_ELEMENTS) {
            return Err(AnalysisError::AbsurdShape {
                what: what.to_string(),
                shape: shape_to_string(fact.shape.as_deref().unwrap_or(&[])),
            });
        }
    }
    Ok(())
}

/// Outcome of inference for one node.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeState {
    /// Shapes inferred; the node runs.
    Inferred,
    /// Every output is a constant: the node is evaluated ahead of time and costs nothing.
    Folded,
    /// The op is unknown or inference failed; shapes may come from the model's declarations.
    Failed(String),
}

/// What inference returns: the topological order, each node's state, and diagnostics.
pub type Inferred = (Vec<NodeId>, HashMap<NodeId, NodeState>, Vec<Diagnostic>);

/// Infers all facts in place. Returns the per-node state (indexed like the topological order)
/// and diagnostics.
pub fn infer_graph(graph: &mut Graph) -> Result<Inferred, AnalysisError> {
    let order = graph
        .topo_order()
        .map_err(|stuck| AnalysisError::InvalidGraph {
            reason: format!(
                "the graph has a cycle through node `{}`",
                graph.dag[stuck].name
            ),
        })?;
    let mut states = HashMap::new();
    let mut diagnostics = Vec::new();
    for &id in &order {
        let node = &graph.dag[id];
        let input_facts: Vec<Option<TensorFact>> = node
            .inputs
            .iter()
            .map(|slot| slot.map(|v| graph.values[v].fact.clone()))
            .collect();
        let refs: Vec<Option<&TensorFact>> = input_facts.iter().map(Option::as_ref).collect();
        // Element types against the schema, for inputs whose type is known for sure: read from
        // the file (graph inputs, initializers) or produced by an op whose inference succeeded.
        let trusted: Vec<Option<DType>> = node
            .inputs
            .iter()
            .map(|slot| {
                let value = &graph.values[(*slot)?];
                let sure = match value.producer {
                    None => true,
                    Some(p) => matches!(
                        states.get(&p),
                        Some(NodeState::Inferred | NodeState::Folded)
                    ),
                };
                sure.then_some(value.fact.dtype)
            })
            .collect();
        if let Err(reason) = super::validate::check_input_types(node, graph.opset, &trusted) {
            return Err(AnalysisError::Node {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                reason,
            });
        }
        let result = match ops::lookup(&node.domain, &node.op_type) {
            None => Err(if node.domain.is_empty() || node.domain == "ai.onnx" {
                format!("unknown op `{}`", node.op_type)
            } else {
                format!("unknown op `{}` of domain `{}`", node.op_type, node.domain)
            }),
            Some(op) => {
                let outer = |name: &str| {
                    graph
                        .value_by_name(name)
                        .map(|v| graph.values[v].fact.clone())
                };
                let ctx = InferCtx {
                    node: OpNode {
                        name: &node.name,
                        op_type: &node.op_type,
                        attrs: &node.attrs,
                        opset: graph.opset,
                    },
                    inputs: refs.clone(),
                    output_count: node.outputs.len(),
                    outer: Some(&outer),
                };
                op.infer(&ctx).and_then(|facts| {
                    if facts.len() < node.outputs.len() {
                        Err(format!(
                            "inferred {} outputs but the node has {}",
                            facts.len(),
                            node.outputs.len()
                        ))
                    } else {
                        Ok(facts)
                    }
                })
            }
        };
        let outputs = node.outputs.clone();
        let (name, op_type) = (node.name.clone(), node.op_type.clone());
        match result {
            Ok(mut facts) => {
                // A control-flow node also reads what its subgraphs read from this graph.
                let all_inputs_constant = refs.iter().flatten().all(|f| f.is_constant())
                    && (!graph.dag[id].attrs.has_subgraph()
                        || ops::control::free_names(&graph.dag[id].attrs)
                            .iter()
                            .all(|name| {
                                graph
                                    .value_by_name(name)
                                    .is_some_and(|v| graph.values[v].fact.is_constant())
                            }));
                if all_inputs_constant && !ops::is_nondeterministic(&op_type) {
                    for fact in &mut facts {
                        if fact.konst.is_none() {
                            if let Some(dims) = fact.concrete_shape() {
                                fact.konst = Some(Arc::new(Tensor {
                                    dtype: fact.dtype,
                                    shape: dims,
                                    data: TensorData::Opaque,
                                }));
                            }
                        }
                    }
                }
                let folded = facts
                    .iter()
                    .take(outputs.len())
                    .all(TensorFact::is_constant);
                for (&value, fact) in outputs.iter().zip(facts) {
                    check_size(
                        &format!("output `{}` of node `{name}`", graph.values[value].name),
                        &fact,
                    )?;
                    // A declared shape that contradicts the inferred one (both concrete) is
                    // an inconsistent model: onnx's checker refuses it, and a kernel sized by
                    // one of them would overrun the other's buffer.
                    if let (Some(declared), Some(inferred)) = (
                        graph.values[value]
                            .declared
                            .as_ref()
                            .and_then(TensorFact::concrete_shape),
                        fact.concrete_shape(),
                    ) {
                        if declared != inferred {
                            return Err(AnalysisError::Node {
                                node: name,
                                op_type,
                                reason: format!(
                                    "output `{}` is declared {declared:?} in the model but its inputs make it {inferred:?}",
                                    graph.values[value].name
                                ),
                            });
                        }
                    }
                    // Keep a declared shape when inference could only produce symbols.
                    let fact = match (&graph.values[value].declared, fact.concrete_shape()) {
                        (Some(declared), None)
                            if declared.concrete_shape().is_some()
                                && declared.rank() == fact.rank().or(declared.rank()) =>
                        {
                            TensorFact {
                                dtype: fact.dtype,
                                shape: declared.shape.clone(),
                                konst: fact.konst,
                            }
                        }
                        _ => fact,
                    };
                    graph.values[value].fact = fact;
                }
                states.insert(
                    id,
                    if folded {
                        NodeState::Folded
                    } else {
                        NodeState::Inferred
                    },
                );
            }
            Err(reason) if ops::as_invalid(&reason).is_some() => {
                return Err(AnalysisError::Node {
                    node: name,
                    op_type,
                    reason: ops::as_invalid(&reason).unwrap_or_default().to_string(),
                });
            }
            Err(reason) => {
                let mut recovered = true;
                for &value in &outputs {
                    match graph.values[value].declared.clone() {
                        Some(declared) => graph.values[value].fact = declared,
                        None => recovered = false,
                    }
                }
                // An op the tool does not know, in a model that is otherwise well formed, is a
                // warning: the report lists it as not costed (a runtime may well know it).
                diagnostics.push(Diagnostic {
                    severity: Severity::Warning,
                    node: Some(name),
                    op_type: Some(op_type),
                    message: if recovered {
                        format!("{reason}; output shapes taken from the model's value_info")
                    } else {
                        format!("{reason}; downstream shapes may be unknown")
                    },
                });
                states.insert(id, NodeState::Failed(reason));
            }
        }
    }
    Ok((order, states, diagnostics))
}
