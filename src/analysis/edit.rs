//! Editing helpers for rewrites: the graph as a plain node list plus the value table, with the
//! queries passes need (consumers, constants) and the mutations they make. Every rewrite uses it:
//! the advisor's passes and the QDQ lowering alike; the driver that runs them re-infers and
//! validates the graph after each.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::graph::{Attr, Graph, Node, ValueId};
use super::onnx_proto::GraphProto;
use super::tensor::{DType, Tensor, TensorData, TensorFact};

/// The node list under edit with a use-def index kept current by every mutation, so producer
/// and consumer lookups cost O(1) (plus the readers returned) instead of a scan of the graph:
/// the fusion and quantization passes ask them once per candidate, which made passes quadratic
/// on transformer-sized graphs. Nodes are read through `node`/`nodes` and changed only through
/// `replace`, `update`, `set_input` and `remove`, which is what keeps the index true.
pub struct Editor<'g> {
    pub graph: &'g mut Graph,
    nodes: Vec<Node>,
    removed: HashSet<usize>,
    /// Values an `If`/`Loop`/`Scan` subgraph reads by name from the outer scope: they appear in
    /// no node's inputs, so passes treat them like graph outputs (kept, never renamed or fused).
    pub subgraph_reads: HashSet<ValueId>,
    /// Live readers of each value, ascending node index, each node once.
    readers: HashMap<ValueId, Vec<usize>>,
    /// Live producers of each value, ascending (two only while a pass moves an output from one
    /// node to its replacement; the first one is the producer).
    producers: HashMap<ValueId, Vec<usize>>,
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
        let mut editor = Editor {
            graph,
            nodes,
            removed: HashSet::new(),
            subgraph_reads,
            readers: HashMap::new(),
            producers: HashMap::new(),
        };
        for index in 0..editor.nodes.len() {
            editor.index_node(index);
        }
        editor
    }

    /// The node at `index` (removed nodes stay readable until `finish`).
    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    /// Every node slot in topological order, removed ones included (check `is_removed`).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of node slots (removed ones included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn is_removed(&self, index: usize) -> bool {
        self.removed.contains(&index)
    }

    fn index_node(&mut self, index: usize) {
        let node = &self.nodes[index];
        for value in node.inputs.iter().flatten() {
            let readers = self.readers.entry(*value).or_default();
            if let Err(at) = readers.binary_search(&index) {
                readers.insert(at, index);
            }
        }
        for value in &node.outputs {
            let producers = self.producers.entry(*value).or_default();
            if let Err(at) = producers.binary_search(&index) {
                producers.insert(at, index);
            }
        }
    }

    fn unindex_node(&mut self, index: usize) {
        let node = &self.nodes[index];
        for value in node.inputs.iter().flatten() {
            if let Some(readers) = self.readers.get_mut(value) {
                if let Ok(at) = readers.binary_search(&index) {
                    readers.remove(at);
                }
            }
        }
        for value in &node.outputs {
            if let Some(producers) = self.producers.get_mut(value) {
                if let Ok(at) = producers.binary_search(&index) {
                    producers.remove(at);
                }
            }
        }
    }

    /// Puts `node` in slot `index` (a live slot), replacing what was there.
    pub fn replace(&mut self, index: usize, node: Node) {
        debug_assert!(!self.is_removed(index), "replacing removed node {index}");
        self.unindex_node(index);
        self.nodes[index] = node;
        self.index_node(index);
    }

    /// Edits the live node at `index` in place; the index follows whatever the edit changes.
    pub fn update<R>(&mut self, index: usize, edit: impl FnOnce(&mut Node) -> R) -> R {
        debug_assert!(!self.is_removed(index), "updating removed node {index}");
        self.unindex_node(index);
        let result = edit(&mut self.nodes[index]);
        self.index_node(index);
        result
    }

    /// Points input `slot` of node `index` at `value`.
    pub fn set_input(&mut self, index: usize, slot: usize, value: Option<ValueId>) {
        self.update(index, |node| node.inputs[slot] = value);
    }

    /// Live node indices that read `value`, ascending.
    pub fn consumers(&self, value: ValueId) -> Vec<usize> {
        self.readers.get(&value).cloned().unwrap_or_default()
    }

    pub fn is_graph_output(&self, value: ValueId) -> bool {
        self.graph.outputs.contains(&value) || self.subgraph_reads.contains(&value)
    }

    /// The only live consumer of `value`, if it has exactly one and is not a graph output.
    pub fn sole_consumer(&self, value: ValueId) -> Option<usize> {
        if self.is_graph_output(value) {
            return None;
        }
        match self.readers.get(&value).map(Vec::as_slice) {
            Some([only]) => Some(*only),
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

    /// Adds a new f32 constant value, named `name` or, when the graph has that name already,
    /// `name_1`, `name_2`... (export writes values as initializers by name: a clash would be
    /// two initializers with one name).
    pub fn add_const(&mut self, name: String, shape: Vec<u64>, values: Vec<f32>) -> ValueId {
        let tensor = Tensor::from_f32(shape, values);
        let name = self.graph.unique_value_name(&name);
        self.graph.add_value(name, TensorFact::constant(tensor))
    }

    pub fn remove(&mut self, index: usize) {
        if self.removed.insert(index) {
            self.unindex_node(index);
        }
    }

    /// Makes every live reader of `from` read `to` instead (graph outputs are left as they are).
    pub fn rewire(&mut self, from: ValueId, to: ValueId) {
        for index in self.consumers(from) {
            self.update(index, |node| {
                for slot in node.inputs.iter_mut() {
                    if *slot == Some(from) {
                        *slot = Some(to);
                    }
                }
            });
        }
    }

    pub fn producer_of(&self, value: ValueId) -> Option<usize> {
        self.producers.get(&value)?.first().copied()
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
