//! Writes a (rewritten) graph back as standard ONNX: folded constants become initializers, and
//! the tool's fused ops are expanded into standard operators (ONNX has no fused conv epilogue;
//! the folded BN weights are what the file gains, the fusion itself is a kernel property).

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;

use crate::analysis::edit::subgraph_reads;
use crate::analysis::graph::{Attr, Graph, Node, ValueId};
use crate::analysis::onnx_proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::analysis::ops::fused::activation::{Operand, StdNode};
use crate::analysis::ops::fused::chain::{self, UnaryStep};
use crate::analysis::ops::fused::{self, Activation, ChainStep, DOMAIN};
use crate::analysis::tensor::{DType, Dim, Tensor, TensorData};

/// QDQ and Cast forms of the quantized and half-precision ops.
mod qdq;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("constant `{0}` was never evaluated (its producer was removed); cannot export it")]
    OpaqueConstant(String),
    #[error("node `{node}`: {reason}")]
    Node { node: String, reason: String },
}

/// Appends `v` to `out` in `dtype`'s little-endian encoding; `Err` for a type it cannot write.
fn encode_value(dtype: DType, v: f64, out: &mut Vec<u8>) -> Result<(), DType> {
    match dtype {
        DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        DType::U64 => out.extend_from_slice(&(v as u64).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
        DType::I16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        DType::U16 => out.extend_from_slice(&(v as u16).to_le_bytes()),
        DType::I8 => out.push(v as i8 as u8),
        DType::U8 | DType::Bool => out.push(v as u8),
        DType::Bf16 => {
            out.extend_from_slice(&crate::kernels::qgemm::f32_to_bf16(v as f32).to_le_bytes())
        }
        DType::F16 => {
            out.extend_from_slice(&crate::exec::quant::f32_to_f16(v as f32).to_le_bytes())
        }
        other => return Err(other),
    }
    Ok(())
}

fn tensor_proto(name: &str, tensor: &Tensor) -> Result<TensorProto, ExportError> {
    let dims: Vec<i64> = tensor.shape.iter().map(|&d| d as i64).collect();
    let count = tensor.element_count() as usize;
    let cannot_write = |other: DType| ExportError::Node {
        node: name.to_string(),
        reason: format!("cannot write {other} constants"),
    };
    let raw: Bytes = match &tensor.data {
        TensorData::Raw(bytes) => bytes.clone(),
        TensorData::Opaque | TensorData::Strings(_) => {
            return Err(ExportError::OpaqueConstant(name.to_string()))
        }
        // One value repeated: encoded once, whatever the size (a folded ConstantOfShape can be
        // larger than what `to_f64_vec` materialises).
        TensorData::Splat(v) => {
            let mut one = Vec::new();
            encode_value(tensor.dtype, *v, &mut one).map_err(cannot_write)?;
            Bytes::from(one.repeat(count))
        }
        _ => {
            let values = tensor
                .to_f64_vec()
                .ok_or_else(|| ExportError::OpaqueConstant(name.to_string()))?;
            let mut out = Vec::with_capacity(count * tensor.dtype.size_bytes() as usize);
            for &v in values.iter() {
                encode_value(tensor.dtype, v, &mut out).map_err(cannot_write)?;
            }
            Bytes::from(out)
        }
    };
    Ok(TensorProto {
        dims,
        data_type: tensor.dtype.onnx_code(),
        name: name.to_string(),
        raw_data: raw,
        ..Default::default()
    })
}

/// Splat constants larger than this are written as a `ConstantOfShape` node (opset 9+) rather
/// than as an initializer holding every copy of the value: the light corpus models generate
/// their weights that way, and VGG's first FC weight alone would be 411 MB.
const SPLAT_AS_NODE_ELEMENTS: u64 = 1024;

/// `name = ConstantOfShape(shape)` for a large splat constant, when the opset and the type allow.
fn splat_node(writer: &mut Writer, name: &str, tensor: &Tensor) -> Option<Vec<NodeProto>> {
    let TensorData::Splat(v) = tensor.data else {
        return None;
    };
    let opset = writer.graph.opset;
    let typed = match tensor.dtype {
        DType::Bf16 => opset >= 20,
        DType::F32 | DType::F64 | DType::F16 | DType::Bool => true,
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => true,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => true,
        _ => false,
    };
    if opset < 9 || !typed || tensor.element_count() <= SPLAT_AS_NODE_ELEMENTS {
        return None;
    }
    let value = Tensor {
        dtype: tensor.dtype,
        shape: vec![1],
        data: TensorData::Splat(v),
    };
    let value = tensor_proto("", &value).ok()?;
    let shape_name = writer.fresh(&format!("{name}_shape"));
    let mut shape_raw = Vec::with_capacity(tensor.shape.len() * 8);
    for &d in &tensor.shape {
        shape_raw.extend_from_slice(&(d as i64).to_le_bytes());
    }
    writer.extra_inits.push(TensorProto {
        dims: vec![tensor.shape.len() as i64],
        data_type: DType::I64.onnx_code(),
        name: shape_name.clone(),
        raw_data: Bytes::from(shape_raw),
        ..Default::default()
    });
    Some(vec![NodeProto {
        input: vec![shape_name],
        output: vec![name.to_string()],
        name: format!("{name}_splat"),
        op_type: "ConstantOfShape".into(),
        attribute: vec![AttributeProto {
            name: "value".into(),
            r#type: attribute_type::TENSOR,
            t: Some(value),
            ..Default::default()
        }],
        ..Default::default()
    }])
}

fn value_info(graph: &Graph, value: ValueId) -> ValueInfoProto {
    let v = &graph.values[value];
    let shape = v.fact.shape.as_ref().map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| tensor_shape_proto::Dimension {
                value: Some(match d {
                    Dim::Known(k) => tensor_shape_proto::dimension::Value::DimValue(*k as i64),
                    Dim::Sym(s) => tensor_shape_proto::dimension::Value::DimParam(s.clone()),
                }),
                denotation: String::new(),
            })
            .collect(),
    });
    ValueInfoProto {
        name: v.name.clone(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: v.fact.dtype.onnx_code(),
                shape,
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}

fn attribute(name: &str, attr: &Attr) -> Option<AttributeProto> {
    let mut a = AttributeProto {
        name: name.to_string(),
        ..Default::default()
    };
    match attr {
        Attr::Float(v) => {
            a.r#type = attribute_type::FLOAT;
            a.f = *v;
        }
        Attr::Int(v) => {
            a.r#type = attribute_type::INT;
            a.i = *v;
        }
        Attr::String(v) => {
            a.r#type = attribute_type::STRING;
            a.s = Bytes::from(v.clone().into_bytes());
        }
        Attr::Tensor(t) => {
            a.r#type = attribute_type::TENSOR;
            a.t = Some(tensor_proto("", t).ok()?);
        }
        Attr::Graph(g) => {
            a.r#type = attribute_type::GRAPH;
            a.g = Some((**g).clone());
        }
        Attr::Floats(v) => {
            a.r#type = attribute_type::FLOATS;
            a.floats = v.clone();
        }
        Attr::Ints(v) => {
            a.r#type = attribute_type::INTS;
            a.ints = v.clone();
        }
        Attr::Strings(v) => {
            a.r#type = attribute_type::STRINGS;
            a.strings = v
                .iter()
                .map(|s| Bytes::from(s.clone().into_bytes()))
                .collect();
        }
        Attr::Graphs(v) => {
            a.r#type = attribute_type::GRAPHS;
            a.graphs = v.iter().map(|g| (**g).clone()).collect();
        }
        Attr::Tensors(_) => return None,
    }
    Some(a)
}

/// Accumulates standard nodes and the extra constants the expansion needs.
struct Writer<'g> {
    graph: &'g Graph,
    nodes: Vec<NodeProto>,
    extra_inits: Vec<TensorProto>,
    counter: usize,
}

impl Writer<'_> {
    fn name(&self, v: Option<ValueId>) -> String {
        v.map(|v| self.graph.values[v].name.clone())
            .unwrap_or_default()
    }

    fn fresh(&mut self, base: &str) -> String {
        self.counter += 1;
        format!("{base}__rf{}", self.counter)
    }

    fn scalar(&mut self, base: &str, value: f32) -> String {
        let name = self.fresh(base);
        self.extra_inits.push(TensorProto {
            dims: vec![],
            data_type: 1,
            name: name.clone(),
            raw_data: Bytes::from(value.to_le_bytes().to_vec()),
            ..Default::default()
        });
        name
    }

    fn emit(
        &mut self,
        op: &str,
        name: &str,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attrs: Vec<AttributeProto>,
    ) {
        self.nodes.push(NodeProto {
            input: inputs,
            output: outputs,
            name: name.to_string(),
            op_type: op.to_string(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Emits `out = activation(x)` with the standard operators the vocabulary gives for the
    /// model's opset (`Activation::expand`).
    fn activation(&mut self, node: &str, act: Activation, x: String, out: String) {
        match act {
            Activation::None => self.emit("Identity", node, vec![x], vec![out], vec![]),
            _ => self.expansion(node, &act.expand(self.graph.opset), x, out),
        }
    }

    /// Emits an expansion: the intermediate values are named first, then its scalars, in node
    /// order; the last node writes `out` and takes the name `node`.
    fn expansion(&mut self, node: &str, nodes: &[StdNode], x: String, out: String) {
        let float = |n: &str, v: f32| AttributeProto {
            name: n.into(),
            r#type: attribute_type::FLOAT,
            f: v,
            ..Default::default()
        };
        let last = nodes.len().saturating_sub(1);
        let outputs: Vec<String> = (0..nodes.len())
            .map(|k| {
                if k == last {
                    out.clone()
                } else {
                    self.fresh(&out)
                }
            })
            .collect();
        let inputs: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| {
                n.inputs
                    .iter()
                    .map(|operand| match *operand {
                        Operand::X => x.clone(),
                        Operand::Prev(k) => outputs[k].clone(),
                        Operand::Scalar(v) => self.scalar(&out, v),
                    })
                    .collect()
            })
            .collect();
        for ((n, inputs), output) in nodes.iter().zip(inputs).zip(outputs) {
            let name = match n.suffix {
                Some(suffix) => format!("{node}_{suffix}"),
                None => node.to_string(),
            };
            let attrs = n.attrs.iter().map(|&(k, v)| float(k, v)).collect();
            self.emit(n.op, &name, inputs, vec![output], attrs);
        }
    }

    fn plain(&mut self, node: &Node) {
        let attrs = node
            .attrs
            .0
            .iter()
            .filter_map(|(k, v)| attribute(k, v))
            .collect();
        let inputs = node.inputs.iter().map(|&v| self.name(v)).collect();
        let outputs = node.outputs.iter().map(|&v| self.name(Some(v))).collect();
        self.nodes.push(NodeProto {
            input: inputs,
            output: outputs,
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            domain: node.domain.clone(),
            attribute: attrs,
            ..Default::default()
        });
    }

    fn fused(&mut self, node: &Node) -> Result<(), ExportError> {
        let refuse = |reason: String| ExportError::Node {
            node: node.name.clone(),
            reason,
        };
        let out = self.name(Some(node.outputs[0]));
        let base_attrs: Vec<AttributeProto> = node
            .attrs
            .0
            .iter()
            .filter(|(k, _)| !Activation::is_attr(k) && k.as_str() != chain::ATTR)
            .filter_map(|(k, v)| attribute(k, v))
            .collect();
        match node.op_type.as_str() {
            "FusedConv" | "FusedGemm" | "FusedMatMul" => {
                let act = Activation::from_attrs(&node.attrs).map_err(refuse)?;
                let base = fused::base_of(&node.op_type).unwrap_or("MatMul");
                let data_inputs = if base == "MatMul" { 2 } else { 3 };
                let inputs: Vec<String> = node
                    .inputs
                    .iter()
                    .take(data_inputs)
                    .map(|&v| self.name(v))
                    .collect::<Vec<_>>();
                let inputs: Vec<String> = {
                    let mut i = inputs;
                    while i.last().is_some_and(|s| s.is_empty()) {
                        i.pop();
                    }
                    i
                };
                let mut current = self.fresh(&out);
                self.emit(
                    base,
                    &node.name,
                    inputs,
                    vec![current.clone()],
                    if base == "MatMul" { vec![] } else { base_attrs },
                );
                if base == "MatMul" {
                    if let Some(bias) = node.inputs.get(2).copied().flatten() {
                        let next = self.fresh(&out);
                        let bias_name = self.name(Some(bias));
                        self.emit(
                            "Add",
                            &format!("{}_bias", node.name),
                            vec![current, bias_name],
                            vec![next.clone()],
                            vec![],
                        );
                        current = next;
                    }
                }
                if let Some(residual) = node.inputs.get(3).copied().flatten() {
                    let next = self.fresh(&out);
                    let r = self.name(Some(residual));
                    self.emit(
                        "Add",
                        &format!("{}_residual", node.name),
                        vec![current, r],
                        vec![next.clone()],
                        vec![],
                    );
                    current = next;
                }
                if act == Activation::None {
                    self.emit(
                        "Identity",
                        &format!("{}_out", node.name),
                        vec![current],
                        vec![out],
                        vec![],
                    );
                } else {
                    self.activation(&format!("{}_act", node.name), act, current, out);
                }
            }
            "ElementwiseChain" => {
                let steps =
                    ChainStep::from_attrs(&node.attrs, node.inputs.len()).map_err(refuse)?;
                let chain_input = self.name(node.inputs[0]);
                let mut current = chain_input.clone();
                for (k, step) in steps.iter().enumerate() {
                    let target = if k + 1 == steps.len() {
                        out.clone()
                    } else {
                        self.fresh(&out)
                    };
                    let step_name = format!("{}_{k}", node.name);
                    match *step {
                        ChainStep::Unary(UnaryStep::Math(m)) => self.emit(
                            m.onnx_op(),
                            &step_name,
                            vec![current],
                            vec![target.clone()],
                            vec![],
                        ),
                        ChainStep::Unary(UnaryStep::Activation(act)) => {
                            self.activation(&step_name, act, current, target.clone())
                        }
                        // A binary step with a constant operand or with the chain's own input.
                        ChainStep::Const { op, swapped, .. } | ChainStep::Input { op, swapped } => {
                            let other = match *step {
                                ChainStep::Const { index, .. } => {
                                    let operand = node.inputs.get(index).copied().flatten();
                                    if operand.is_none() {
                                        return Err(refuse(format!(
                                            "step `{step}`: no input {index}"
                                        )));
                                    }
                                    self.name(operand)
                                }
                                _ => chain_input.clone(),
                            };
                            let ins = if swapped {
                                vec![other, current]
                            } else {
                                vec![current, other]
                            };
                            self.emit(op.onnx_op(), &step_name, ins, vec![target.clone()], vec![]);
                        }
                    }
                    current = target;
                }
            }
            "QConv" | "QMatMul" | "HalfConv" | "HalfMatMul" | "FakeQuant" => {
                self.quantized(node)?
            }
            other => {
                return Err(ExportError::Node {
                    node: node.name.clone(),
                    reason: format!("no standard form for {other}"),
                })
            }
        }
        Ok(())
    }
}

/// Domains (other than the default) used by `nodes` and by the nodes of their subgraphs.
fn collect_domains<'a>(nodes: impl Iterator<Item = &'a NodeProto>, out: &mut BTreeSet<String>) {
    for node in nodes {
        if !node.domain.is_empty() && node.domain != "ai.onnx" {
            out.insert(node.domain.clone());
        }
        for attr in &node.attribute {
            for g in attr.g.iter().chain(&attr.graphs) {
                collect_domains(g.node.iter(), out);
            }
        }
    }
}

/// A topological order of `nodes` that also counts the values subgraphs read from the outer
/// scope: ONNX requires them to be produced before the node that owns the subgraph, and the IR's
/// edges only follow explicit inputs. Ties keep the given order; on a cycle the order is kept.
fn order_with_subgraph_reads(nodes: Vec<Node>, extra: &[Vec<ValueId>]) -> Vec<Node> {
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for &v in &node.outputs {
            producer.insert(v, i);
        }
    }
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut indegree = vec![0usize; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let mut deps: BTreeSet<usize> = node
            .inputs
            .iter()
            .flatten()
            .chain(extra[i].iter())
            .filter_map(|v| producer.get(v).copied())
            .collect();
        deps.remove(&i);
        indegree[i] = deps.len();
        for d in deps {
            users[d].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != nodes.len() {
        return nodes;
    }
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// The graph as an ONNX model (IR ≥ 4, the graph's default opset).
///
/// Initializers are the constants some node reads, some graph output is, or some subgraph (at
/// any depth) reads by name from the outer scope; an outer-scope name that is neither produced,
/// a graph input nor a constant is an error rather than a file onnxruntime would reject.
pub fn to_model(graph: &Graph) -> Result<ModelProto, ExportError> {
    let mut writer = Writer {
        graph,
        nodes: Vec::new(),
        extra_inits: Vec::new(),
        counter: 0,
    };
    let nodes = graph.nodes_in_order();
    // The value each name stands for: the one a live node produces, else a graph input, else a
    // constant (a removed node's output keeps its value-table entry and name).
    let mut by_name: HashMap<&str, (u8, ValueId)> = HashMap::new();
    for (id, value) in graph.values.iter().enumerate() {
        let rank = if value.producer.is_some() {
            0
        } else if graph.inputs.contains(&id) {
            1
        } else if value.fact.konst.is_some() {
            2
        } else {
            continue;
        };
        let entry = by_name.entry(value.name.as_str()).or_insert((rank, id));
        if rank < entry.0 {
            *entry = (rank, id);
        }
    }
    let mut used: Vec<ValueId> = Vec::new();
    let mut outer_reads: Vec<Vec<ValueId>> = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let mut reads = Vec::new();
        for name in subgraph_reads(node) {
            match by_name.get(name.as_str()) {
                Some(&(_, v)) => reads.push(v),
                None => {
                    return Err(ExportError::Node {
                        node: node.name.clone(),
                        reason: format!(
                            "a subgraph reads `{name}` from the outer scope, but the graph \
                             neither produces it nor holds it as an input or a constant"
                        ),
                    })
                }
            }
        }
        used.extend(reads.iter().copied());
        outer_reads.push(reads);
    }
    let nodes = order_with_subgraph_reads(nodes, &outer_reads);
    for node in &nodes {
        used.extend(node.inputs.iter().flatten().copied());
        if node.domain == DOMAIN {
            writer.fused(node)?;
        } else {
            writer.plain(node);
        }
    }
    used.extend(graph.outputs.iter().copied());
    used.sort_unstable();
    used.dedup();
    let mut initializers = Vec::new();
    // Nodes that generate constants; they read only initializers, so they go first.
    let mut generators = Vec::new();
    for v in used {
        let value = &graph.values[v];
        if value.producer.is_some() || graph.inputs.contains(&v) {
            continue;
        }
        if let Some(konst) = &value.fact.konst {
            match splat_node(&mut writer, &value.name, konst) {
                Some(nodes) => generators.extend(nodes),
                None => initializers.push(tensor_proto(&value.name, konst)?),
            }
        }
    }
    initializers.extend(writer.extra_inits);
    generators.append(&mut writer.nodes);
    writer.nodes = generators;
    let opset = graph.opset.max(1);
    let mut opset_import = vec![OperatorSetIdProto {
        domain: String::new(),
        version: opset,
    }];
    // The IR keeps only the default opset's version: other domains a plain node (or a subgraph)
    // still uses get version 1 (com.microsoft's only version), without which checkers reject
    // the file outright.
    let mut domains = BTreeSet::new();
    collect_domains(writer.nodes.iter(), &mut domains);
    opset_import.extend(
        domains
            .into_iter()
            .map(|domain| OperatorSetIdProto { domain, version: 1 }),
    );
    Ok(ModelProto {
        ir_version: graph.ir_version.max(4),
        opset_import,
        producer_name: "roofline advise".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(GraphProto {
            node: writer.nodes,
            name: graph.name.clone(),
            initializer: initializers,
            input: graph.inputs.iter().map(|&v| value_info(graph, v)).collect(),
            output: graph
                .outputs
                .iter()
                .map(|&v| value_info(graph, v))
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;
