//! The graph IR: a petgraph `StableDiGraph` of ops whose edges carry the value they pass,
//! plus a value table holding a `TensorFact` per value. Import from ONNX lives in `import.rs`;
//! this module only knows the IR itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};

use super::onnx_proto::GraphProto;
use super::tensor::{Tensor, TensorFact};

pub type NodeId = NodeIndex<u32>;
pub type ValueId = usize;

/// An attribute value, decoded from `AttributeProto`.
#[derive(Clone, Debug)]
pub enum Attr {
    Float(f32),
    Int(i64),
    String(String),
    Tensor(Arc<Tensor>),
    Graph(Arc<GraphProto>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Tensors(usize),
    Graphs(Vec<Arc<GraphProto>>),
}

/// Attributes of a node by name, with typed getters that apply the spec defaults.
#[derive(Clone, Debug, Default)]
pub struct Attributes(pub BTreeMap<String, Attr>);

impl Attributes {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.get(name)
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.0.get(name)? {
            Attr::Int(value) => Some(*value),
            Attr::Float(value) => Some(*value as i64),
            _ => None,
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> i64 {
        self.int(name).unwrap_or(default)
    }

    pub fn float(&self, name: &str) -> Option<f32> {
        match self.0.get(name)? {
            Attr::Float(value) => Some(*value),
            Attr::Int(value) => Some(*value as f32),
            _ => None,
        }
    }

    pub fn float_or(&self, name: &str, default: f32) -> f32 {
        self.float(name).unwrap_or(default)
    }

    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.0.get(name)? {
            Attr::Ints(values) => Some(values),
            _ => None,
        }
    }

    pub fn floats(&self, name: &str) -> Option<&[f32]> {
        match self.0.get(name)? {
            Attr::Floats(values) => Some(values),
            _ => None,
        }
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        match self.0.get(name)? {
            Attr::String(value) => Some(value),
            _ => None,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&Arc<Tensor>> {
        match self.0.get(name)? {
            Attr::Tensor(value) => Some(value),
            _ => None,
        }
    }

    pub fn has_subgraph(&self) -> bool {
        self.0
            .values()
            .any(|a| matches!(a, Attr::Graph(_) | Attr::Graphs(_)))
    }
}

/// One operator instance.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub attrs: Attributes,
    /// `None` for an omitted optional input (an empty name in ONNX).
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

/// One value (an ONNX tensor name).
#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub fact: TensorFact,
    pub producer: Option<NodeId>,
    /// Shape declared in the model's `value_info`/outputs, used when inference cannot derive one.
    pub declared: Option<TensorFact>,
}

/// The model as an op graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub dag: StableDiGraph<Node, ValueId>,
    pub values: Vec<Value>,
    /// Graph inputs the user feeds (initializers excluded).
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Version of the default ("ai.onnx") opset.
    pub opset: i64,
    pub ir_version: i64,
    pub producer: String,
    /// External-data files the model's tensors were read from (resolved paths): inputs that no
    /// output of the tool may replace.
    pub external_files: Vec<std::path::PathBuf>,
    /// Symbolic dims bound so far, by name (`infer::bind_inputs`).
    pub bound_dims: std::collections::BTreeMap<String, u64>,
}

impl Graph {
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name)
    }

    /// `base`, or `base_1`, `base_2`... the first that no value of the graph has.
    pub fn unique_value_name(&self, base: &str) -> String {
        if self.value_by_name(base).is_none() {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| self.value_by_name(n).is_none())
            .expect("an unused name")
    }

    pub fn add_value(&mut self, name: impl Into<String>, fact: TensorFact) -> ValueId {
        self.values.push(Value {
            name: name.into(),
            fact,
            producer: None,
            declared: None,
        });
        self.values.len() - 1
    }

    /// Adds a node and the edges from the producers of its inputs.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let outputs = node.outputs.clone();
        let inputs = node.inputs.clone();
        let id = self.dag.add_node(node);
        for value in outputs {
            self.values[value].producer = Some(id);
        }
        for value in inputs.into_iter().flatten() {
            if let Some(producer) = self.values[value].producer {
                self.dag.add_edge(producer, id, value);
            }
        }
        id
    }

    /// Nodes in a topological order (ties broken by insertion order, so runs are repeatable).
    pub fn topo_order(&self) -> Result<Vec<NodeId>, NodeId> {
        let mut indegree: BTreeMap<NodeId, usize> = BTreeMap::new();
        for id in self.dag.node_indices() {
            indegree.insert(id, 0);
        }
        for edge in self.dag.edge_references() {
            *indegree.entry(edge.target()).or_default() += 1;
        }
        let mut ready: std::collections::BTreeSet<NodeId> = indegree
            .iter()
            .filter(|(_, &d)| d == 0)
            .map(|(&id, _)| id)
            .collect();
        let mut order = Vec::with_capacity(indegree.len());
        while let Some(id) = ready.pop_first() {
            order.push(id);
            for edge in self.dag.edges(id) {
                let target = edge.target();
                if let Some(d) = indegree.get_mut(&target) {
                    *d -= 1;
                    if *d == 0 {
                        ready.insert(target);
                    }
                }
            }
        }
        if order.len() != indegree.len() {
            let stuck = indegree
                .iter()
                .find(|(id, d)| **d > 0 && !order.contains(id))
                .map(|(&id, _)| id)
                .unwrap_or_default();
            return Err(stuck);
        }
        Ok(order)
    }

    /// Nodes that read a value.
    pub fn consumers(&self, value: ValueId) -> Vec<NodeId> {
        self.dag
            .node_indices()
            .filter(|&id| self.dag[id].inputs.contains(&Some(value)))
            .collect()
    }

    /// Number of operator nodes.
    pub fn node_count(&self) -> usize {
        self.dag.node_count()
    }
}

impl Graph {
    /// Rebuilds the petgraph from a list of nodes (rewrites edit nodes as plain data, then call
    /// this). Producers are re-derived from node outputs; values keep their facts.
    pub fn rebuild(&mut self, nodes: Vec<Node>) {
        self.dag = StableDiGraph::default();
        for value in &mut self.values {
            value.producer = None;
        }
        let mut ids = Vec::with_capacity(nodes.len());
        for node in nodes {
            let outputs = node.outputs.clone();
            let id = self.dag.add_node(node);
            for value in outputs {
                self.values[value].producer = Some(id);
            }
            ids.push(id);
        }
        for &id in &ids {
            let inputs = self.dag[id].inputs.clone();
            for value in inputs.into_iter().flatten() {
                if let Some(producer) = self.values[value].producer {
                    self.dag.add_edge(producer, id, value);
                }
            }
        }
    }

    /// The nodes in topological order, cloned (the editable form used by rewrites).
    pub fn nodes_in_order(&self) -> Vec<Node> {
        match self.topo_order() {
            Ok(order) => order.into_iter().map(|id| self.dag[id].clone()).collect(),
            Err(_) => self.dag.node_weights().cloned().collect(),
        }
    }

    /// Checks structural integrity: every node input is a graph input, a constant or produced by
    /// a node; every graph output is produced or constant; no cycle.
    pub fn validate(&self) -> Result<(), String> {
        for id in self.dag.node_indices() {
            let node = &self.dag[id];
            for &value in node.inputs.iter().flatten() {
                let v = &self.values[value];
                if v.producer.is_none() && v.fact.konst.is_none() && !self.inputs.contains(&value) {
                    return Err(format!(
                        "node `{}` reads `{}`, which nothing produces",
                        node.name, v.name
                    ));
                }
            }
        }
        for &value in &self.outputs {
            let v = &self.values[value];
            if v.producer.is_none() && v.fact.konst.is_none() && !self.inputs.contains(&value) {
                return Err(format!("graph output `{}` is produced by no node", v.name));
            }
        }
        self.topo_order()
            .map(|_| ())
            .map_err(|id| format!("cycle through `{}`", self.dag[id].name))
    }
}
