//! Editing helpers for rewrites: the graph as a plain node list plus the value table, with the
//! queries passes need (consumers, constants) and the mutations they make. Every rewrite uses it:
//! the advisor's passes and the QDQ lowering alike; the driver that runs them re-infers and
//! validates the graph after each.

use std::collections::{BTreeSet, HashSet};

use super::graph::{Attr, Graph, Node, ValueId};
use super::onnx_proto::GraphProto;
use super::tensor::{DType, Tensor, TensorData, TensorFact};

pub struct Editor<'g> {
    pub graph: &'g mut Graph,
    pub nodes: Vec<Node>,
    pub removed: HashSet<usize>,
    /// Values an `If`/`Loop`/`Scan` subgraph reads by name from the outer scope: they appear in
    /// no node's inputs, so passes treat them like graph outputs (kept, never renamed or fused).
    pub subgraph_reads: HashSet<ValueId>,
}

impl<'g> Editor<'g> {
    pub fn new(graph: &'g mut Graph) -> Editor<'g> {
        let nodes = graph.nodes_in_order();
        let subgraph_reads = nodes
            .iter()
            .filter(|n| n.attrs.has_subgraph())
            .flat_map(subgraph_reads)
            .filter_map(|name| graph.value_by_name(&name))
            .collect();
        Editor {
            graph,
            nodes,
            removed: HashSet::new(),
            subgraph_reads,
        }
    }

    /// Live node indices that read `value`.
    pub fn consumers(&self, value: ValueId) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| !self.removed.contains(i) && self.nodes[*i].inputs.contains(&Some(value)))
            .collect()
    }

    pub fn is_graph_output(&self, value: ValueId) -> bool {
        self.graph.outputs.contains(&value) || self.subgraph_reads.contains(&value)
    }

    /// The only live consumer of `value`, if it has exactly one and is not a graph output.
    pub fn sole_consumer(&self, value: ValueId) -> Option<usize> {
        if self.is_graph_output(value) {
            return None;
        }
        match self.consumers(value).as_slice() {
            [only] => Some(*only),
            _ => None,
        }
    }

    pub fn fact(&self, value: ValueId) -> &TensorFact {
        &self.graph.values[value].fact
    }

    /// Values of a constant as f32 (materialising raw or splat payloads).
    pub fn const_f32(&self, value: Option<ValueId>) -> Option<Vec<f32>> {
        let tensor = self.graph.values[value?].fact.konst.as_ref()?;
        match tensor.data {
            TensorData::Splat(v) => Some(vec![v as f32; tensor.element_count() as usize]),
            TensorData::Opaque | TensorData::Strings(_) => None,
            _ => tensor.to_f32_vec(),
        }
    }

    /// A scalar constant (any single-element constant).
    pub fn const_scalar(&self, value: Option<ValueId>) -> Option<f32> {
        let values = self.const_f32(value)?;
        (values.len() == 1).then(|| values[0])
    }

    /// Adds a new f32 constant value.
    pub fn add_const(&mut self, name: String, shape: Vec<u64>, values: Vec<f32>) -> ValueId {
        let tensor = Tensor::from_f32(shape, values);
        self.graph.add_value(name, TensorFact::constant(tensor))
    }

    pub fn remove(&mut self, index: usize) {
        self.removed.insert(index);
    }

    /// Makes every live reader of `from` read `to` instead (and the graph outputs).
    pub fn rewire(&mut self, from: ValueId, to: ValueId) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if self.removed.contains(&i) {
                continue;
            }
            for slot in node.inputs.iter_mut() {
                if *slot == Some(from) {
                    *slot = Some(to);
                }
            }
        }
    }

    pub fn producer_of(&self, value: ValueId) -> Option<usize> {
        (0..self.nodes.len())
            .find(|i| !self.removed.contains(i) && self.nodes[*i].outputs.contains(&value))
    }

    pub fn is_float(&self, value: ValueId) -> bool {
        self.graph.values[value].fact.dtype == DType::F32
    }

    /// Writes the edited node list back into the graph.
    pub fn finish(self) {
        let nodes: Vec<Node> = self
            .nodes
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !self.removed.contains(i))
            .map(|(_, n)| n)
            .collect();
        self.graph.rebuild(nodes);
    }
}

pub fn set_attr(node: &mut Node, name: &str, value: Attr) {
    node.attrs.0.insert(name.to_string(), value);
}

pub fn str_attr(value: &str) -> Attr {
    Attr::String(value.to_string())
}

/// Names a subgraph reads from its enclosing scopes: node inputs (at any depth) and outputs it
/// does not define itself (as a graph input, an initializer or a node output). ONNX subgraphs
/// (`If` branches, `Loop`/`Scan` bodies) refer to outer values by name only, so these reads appear
/// in no node's input list.
pub fn collect_outer_reads(graph: &GraphProto, out: &mut BTreeSet<String>) {
    let mut defined: HashSet<&str> = HashSet::new();
    defined.extend(graph.input.iter().map(|v| v.name.as_str()));
    defined.extend(graph.initializer.iter().map(|t| t.name.as_str()));
    defined.extend(
        graph
            .sparse_initializer
            .iter()
            .filter_map(|s| s.values.as_ref())
            .map(|t| t.name.as_str()),
    );
    defined.extend(
        graph
            .node
            .iter()
            .flat_map(|n| n.output.iter())
            .map(String::as_str),
    );
    let mut reads = BTreeSet::new();
    for node in &graph.node {
        reads.extend(node.input.iter().filter(|n| !n.is_empty()).cloned());
        for attr in &node.attribute {
            if let Some(g) = &attr.g {
                collect_outer_reads(g, &mut reads);
            }
            for g in &attr.graphs {
                collect_outer_reads(g, &mut reads);
            }
        }
    }
    reads.extend(graph.output.iter().map(|v| v.name.clone()));
    out.extend(reads.into_iter().filter(|n| !defined.contains(n.as_str())));
}

/// The outer-scope names the subgraph attributes of `node` read.
pub fn subgraph_reads(node: &Node) -> BTreeSet<String> {
    let mut reads = BTreeSet::new();
    for attr in node.attrs.0.values() {
        match attr {
            Attr::Graph(g) => collect_outer_reads(g, &mut reads),
            Attr::Graphs(gs) => gs.iter().for_each(|g| collect_outer_reads(g, &mut reads)),
            _ => {}
        }
    }
    reads
}
