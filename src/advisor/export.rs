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
use crate::analysis::ops::fused::DOMAIN;
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

    /// Emits `out = activation(x)` with standard operators for the model's opset.
    fn activation(&mut self, node: &str, act: &str, a: f32, b: f32, x: String, out: String) {
        let opset = self.graph.opset;
        let float = |n: &str, v: f32| AttributeProto {
            name: n.into(),
            r#type: attribute_type::FLOAT,
            f: v,
            ..Default::default()
        };
        match act {
            "relu" => self.emit("Relu", node, vec![x], vec![out], vec![]),
            "sigmoid" => self.emit("Sigmoid", node, vec![x], vec![out], vec![]),
            "tanh" => self.emit("Tanh", node, vec![x], vec![out], vec![]),
            "leaky_relu" => self.emit(
                "LeakyRelu",
                node,
                vec![x],
                vec![out],
                vec![float("alpha", a)],
            ),
            "hard_sigmoid" => self.emit(
                "HardSigmoid",
                node,
                vec![x],
                vec![out],
                vec![float("alpha", a), float("beta", b)],
            ),
            "clip" if opset >= 11 => {
                let lo = self.scalar(&out, a);
                let hi = self.scalar(&out, b);
                self.emit("Clip", node, vec![x, lo, hi], vec![out], vec![]);
            }
            "clip" => self.emit(
                "Clip",
                node,
                vec![x],
                vec![out],
                vec![float("min", a), float("max", b)],
            ),
            "hard_swish" if opset >= 14 => self.emit("HardSwish", node, vec![x], vec![out], vec![]),
            "hard_swish" => {
                let gate = self.fresh(&out);
                self.emit(
                    "HardSigmoid",
                    &format!("{node}_gate"),
                    vec![x.clone()],
                    vec![gate.clone()],
                    vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)],
                );
                self.emit("Mul", node, vec![x, gate], vec![out], vec![]);
            }
            "silu" => {
                let gate = self.fresh(&out);
                self.emit(
                    "Sigmoid",
                    &format!("{node}_gate"),
                    vec![x.clone()],
                    vec![gate.clone()],
                    vec![],
                );
                self.emit("Mul", node, vec![x, gate], vec![out], vec![]);
            }
            "gelu" => {
                let (scaled, erf, shifted, half) = (
                    self.fresh(&out),
                    self.fresh(&out),
                    self.fresh(&out),
                    self.fresh(&out),
                );
                let sqrt2 = self.scalar(&out, std::f32::consts::SQRT_2);
                let one = self.scalar(&out, 1.0);
                let half_c = self.scalar(&out, 0.5);
                self.emit(
                    "Div",
                    &format!("{node}_div"),
                    vec![x.clone(), sqrt2],
                    vec![scaled.clone()],
                    vec![],
                );
                self.emit(
                    "Erf",
                    &format!("{node}_erf"),
                    vec![scaled],
                    vec![erf.clone()],
                    vec![],
                );
                self.emit(
                    "Add",
                    &format!("{node}_add"),
                    vec![erf, one],
                    vec![shifted.clone()],
                    vec![],
                );
                self.emit(
                    "Mul",
                    &format!("{node}_half"),
                    vec![x, half_c],
                    vec![half.clone()],
                    vec![],
                );
                self.emit("Mul", node, vec![half, shifted], vec![out], vec![]);
            }
            _ => self.emit("Identity", node, vec![x], vec![out], vec![]),
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
        let act = node
            .attrs
            .string("activation")
            .unwrap_or("none")
            .to_string();
        let (a, b) = (
            node.attrs.float_or("act_alpha", 0.0),
            node.attrs.float_or("act_beta", 0.0),
        );
        let out = self.name(Some(node.outputs[0]));
        let base_attrs: Vec<AttributeProto> = node
            .attrs
            .0
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "activation" | "act_alpha" | "act_beta" | "steps"
                )
            })
            .filter_map(|(k, v)| attribute(k, v))
            .collect();
        match node.op_type.as_str() {
            "FusedConv" | "FusedGemm" | "FusedMatMul" => {
                let base = match node.op_type.as_str() {
                    "FusedConv" => "Conv",
                    "FusedGemm" => "Gemm",
                    _ => "MatMul",
                };
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
                if act == "none" {
                    self.emit(
                        "Identity",
                        &format!("{}_out", node.name),
                        vec![current],
                        vec![out],
                        vec![],
                    );
                } else {
                    self.activation(&format!("{}_act", node.name), &act, a, b, current, out);
                }
            }
            "ElementwiseChain" => {
                let steps = match node.attrs.get("steps") {
                    Some(Attr::Strings(s)) => s.clone(),
                    _ => {
                        return Err(ExportError::Node {
                            node: node.name.clone(),
                            reason: "chain without steps".into(),
                        })
                    }
                };
                let chain_input = self.name(node.inputs[0]);
                let mut current = chain_input.clone();
                for (k, step) in steps.iter().enumerate() {
                    let target = if k + 1 == steps.len() {
                        out.clone()
                    } else {
                        self.fresh(&out)
                    };
                    let parts: Vec<&str> = step.split(':').collect();
                    let step_name = format!("{}_{k}", node.name);
                    match parts.as_slice() {
                        ["unary", name, a, b] => {
                            let (a, b) = (a.parse().unwrap_or(0.0), b.parse().unwrap_or(0.0));
                            let op = match *name {
                                "exp" => Some("Exp"),
                                "log" => Some("Log"),
                                "sqrt" => Some("Sqrt"),
                                "neg" => Some("Neg"),
                                "abs" => Some("Abs"),
                                "reciprocal" => Some("Reciprocal"),
                                "erf" => Some("Erf"),
                                _ => None,
                            };
                            match op {
                                Some(op) => self.emit(
                                    op,
                                    &step_name,
                                    vec![current],
                                    vec![target.clone()],
                                    vec![],
                                ),
                                None => {
                                    self.activation(&step_name, name, a, b, current, target.clone())
                                }
                            }
                        }
                        // A binary step with a constant operand (`const:OP:INDEX:SWAPPED`) or
                        // with the chain's own input (`input:OP:SWAPPED`).
                        ["const", op, _, swapped] | ["input", op, swapped] => {
                            let other = match parts.as_slice() {
                                ["const", _, index, _] => self.name(
                                    node.inputs
                                        .get(index.parse().unwrap_or(1))
                                        .copied()
                                        .flatten(),
                                ),
                                _ => chain_input.clone(),
                            };
                            let ins = if *swapped == "1" {
                                vec![other, current]
                            } else {
                                vec![current, other]
                            };
                            self.emit(
                                onnx_binary(op),
                                &step_name,
                                ins,
                                vec![target.clone()],
                                vec![],
                            );
                        }
                        _ => {
                            return Err(ExportError::Node {
                                node: node.name.clone(),
                                reason: format!("bad chain step `{step}`"),
                            })
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

/// The ONNX operator of a chain step's binary op name.
fn onnx_binary(op: &str) -> &'static str {
    match op {
        "add" => "Add",
        "sub" => "Sub",
        "mul" => "Mul",
        "div" => "Div",
        "pow" => "Pow",
        "max" => "Max",
        _ => "Min",
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
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::analysis::edit::collect_outer_reads;
    use crate::analysis::import;

    fn info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| tensor_shape_proto::Dimension {
                                value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                                denotation: String::new(),
                            })
                            .collect(),
                    }),
                })),
                denotation: String::new(),
            }),
            doc_string: String::new(),
        }
    }

    fn weight(name: &str, value: f32) -> TensorProto {
        TensorProto {
            dims: vec![1, 4],
            data_type: 1,
            name: name.into(),
            float_data: vec![value; 4],
            ..Default::default()
        }
    }

    fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            name: format!("{op}_{output}"),
            op_type: op.into(),
            attribute,
            ..Default::default()
        }
    }

    fn branch(name: &str, nodes: Vec<NodeProto>, output: &str) -> GraphProto {
        GraphProto {
            name: name.into(),
            node: nodes,
            output: vec![info(output, 1, &[1, 4])],
            ..Default::default()
        }
    }

    fn if_node(cond: &str, then: GraphProto, otherwise: GraphProto, output: &str) -> NodeProto {
        let graph_attr = |name: &str, g: GraphProto| AttributeProto {
            name: name.into(),
            r#type: attribute_type::GRAPH,
            g: Some(g),
            ..Default::default()
        };
        node(
            "If",
            &[cond],
            output,
            vec![
                graph_attr("then_branch", then),
                graph_attr("else_branch", otherwise),
            ],
        )
    }

    /// `h = x + w` (also an output); `y = If(cond) { h + a } else { If(cond) { h * c } else
    /// { h - c } * b }`: `a`, `b` and `c` are top-level initializers only the branches read.
    /// `if_first` lists the If before the node producing `h` (which it reads only by name).
    fn if_model(if_first: bool, extra_read: Option<&str>) -> ModelProto {
        let inner = if_node(
            "cond",
            branch(
                "inner_then",
                vec![node("Mul", &["h", "c"], "it", vec![])],
                "it",
            ),
            branch(
                "inner_else",
                vec![node("Sub", &["h", "c"], "ie", vec![])],
                "ie",
            ),
            "inner",
        );
        let mut then_nodes = vec![node("Add", &["h", "a"], "t", vec![])];
        if let Some(name) = extra_read {
            then_nodes.push(node("Add", &["t", name], "t2", vec![]));
        }
        let then_out = if extra_read.is_some() { "t2" } else { "t" };
        let choose = if_node(
            "cond",
            branch("then", then_nodes, then_out),
            branch(
                "else",
                vec![inner, node("Mul", &["inner", "b"], "e", vec![])],
                "e",
            ),
            "y",
        );
        let add = node("Add", &["x", "w"], "h", vec![]);
        let nodes = if if_first {
            vec![choose, add]
        } else {
            vec![add, choose]
        };
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(GraphProto {
                name: "if_model".into(),
                node: nodes,
                initializer: vec![
                    weight("w", 1.0),
                    weight("a", 2.0),
                    weight("b", 3.0),
                    weight("c", 4.0),
                ],
                input: vec![info("x", 1, &[1, 4]), info("cond", 9, &[])],
                output: vec![info("y", 1, &[1, 4]), info("h", 1, &[1, 4])],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn graph_of(model: &ModelProto) -> Graph {
        import::import_model(model, Path::new("."), Path::new("if_model.onnx")).unwrap()
    }

    fn initializer_names(model: &ModelProto) -> BTreeSet<String> {
        model
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    #[test]
    fn initializers_read_only_by_subgraphs_are_written() {
        let model = to_model(&graph_of(&if_model(false, None))).unwrap();
        let names = initializer_names(&model);
        for name in ["a", "b", "c", "w"] {
            assert!(names.contains(name), "`{name}` dropped: {names:?}");
        }
        let graph = model.graph.as_ref().unwrap();
        let a = graph.initializer.iter().find(|t| t.name == "a").unwrap();
        assert_eq!(a.dims, vec![1, 4]);
        assert_eq!(&a.raw_data[..], &2.0f32.to_le_bytes().repeat(4)[..]);
        // The branches themselves are written unchanged.
        let choose = graph.node.iter().find(|n| n.op_type == "If").unwrap();
        assert_eq!(choose.attribute.len(), 2);
    }

    #[test]
    fn export_without_rewrites_keeps_the_initializer_names() {
        let source = if_model(false, None);
        let exported = to_model(&graph_of(&source)).unwrap();
        assert_eq!(initializer_names(&exported), initializer_names(&source));
        // And a second round trip through the exported file changes nothing.
        let again = to_model(&graph_of(&exported)).unwrap();
        assert_eq!(initializer_names(&again), initializer_names(&source));
    }

    #[test]
    fn advise_keeps_the_initializers_subgraphs_read() {
        let source = if_model(false, None);
        let device = crate::device::find_device("rtx2080ti")
            .unwrap()
            .to_profile();
        let (_, rewritten) = crate::advisor::advise(
            graph_of(&source),
            "if_model",
            &device,
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        let exported = to_model(&rewritten).unwrap();
        assert_eq!(initializer_names(&exported), initializer_names(&source));
    }

    #[test]
    fn advise_keeps_the_producers_of_values_only_subgraphs_read() {
        // `h` is no graph output here: only the branches read it, by name.
        let mut source = if_model(false, None);
        source.graph.as_mut().unwrap().output.truncate(1);
        let device = crate::device::find_device("rtx2080ti")
            .unwrap()
            .to_profile();
        let (_, rewritten) = crate::advisor::advise(
            graph_of(&source),
            "if_model",
            &device,
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        let exported = to_model(&rewritten).unwrap();
        let g = exported.graph.as_ref().unwrap();
        assert!(g.node.iter().any(|n| n.output == ["h"]), "{:?}", g.node);
        assert_eq!(initializer_names(&exported), initializer_names(&source));
    }

    #[test]
    fn outer_values_are_produced_before_the_node_whose_subgraph_reads_them() {
        // The file lists the If first; its branches read `h`, which the Add produces.
        let model = to_model(&graph_of(&if_model(true, None))).unwrap();
        let ops: Vec<&str> = model
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| n.op_type.as_str())
            .collect();
        assert_eq!(ops, ["Add", "If"]);
    }

    #[test]
    fn subgraph_read_of_an_unknown_value_is_an_error() {
        let err = to_model(&graph_of(&if_model(false, Some("ghost")))).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("ghost") && text.contains("outer scope"),
            "{text}"
        );
        // A graph input read only by a branch is fine and is not made an initializer.
        let model = to_model(&graph_of(&if_model(false, Some("x")))).unwrap();
        assert!(!initializer_names(&model).contains("x"));
    }

    #[test]
    fn large_splat_constants_become_constant_of_shape() {
        let mut graph = graph_of(&if_model(false, None));
        let set = |graph: &mut Graph, name: &str, shape: Vec<u64>| {
            let id = graph.value_by_name(name).unwrap();
            graph.values[id].fact.konst = Some(Arc::new(Tensor {
                dtype: DType::F32,
                shape,
                data: TensorData::Splat(0.5),
            }));
        };
        // Past what `to_f64_vec` materialises (a folded ConstantOfShape of VGG's FC weight).
        set(&mut graph, "a", vec![5000, 1000]);
        set(&mut graph, "b", vec![2, 2]);
        let model = to_model(&graph).unwrap();
        let g = model.graph.as_ref().unwrap();
        let names: BTreeSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
        assert!(!names.contains("a") && names.contains("b"), "{names:?}");
        let gen = &g.node[0];
        assert_eq!(
            (gen.op_type.as_str(), gen.output[0].as_str()),
            ("ConstantOfShape", "a")
        );
        let shape = g
            .initializer
            .iter()
            .find(|t| t.name == gen.input[0])
            .unwrap();
        assert_eq!(
            &shape.raw_data[..],
            &[5000i64.to_le_bytes(), 1000i64.to_le_bytes()].concat()[..]
        );
        let value = gen.attribute[0].t.as_ref().unwrap();
        assert_eq!(
            (value.dims.as_slice(), &value.raw_data[..]),
            (&[1i64][..], &0.5f32.to_le_bytes()[..])
        );
        let b = g.initializer.iter().find(|t| t.name == "b").unwrap();
        assert_eq!(&b.raw_data[..], &0.5f32.to_le_bytes().repeat(4)[..]);
    }

    #[test]
    fn outer_reads_respect_the_subgraph_own_names() {
        let mut reads = BTreeSet::new();
        let g = branch(
            "g",
            vec![
                node("Add", &["local_in", "outer1"], "mid", vec![]),
                node("Mul", &["mid", "own_init"], "out", vec![]),
            ],
            "out",
        );
        let g = GraphProto {
            input: vec![info("local_in", 1, &[1])],
            initializer: vec![weight("own_init", 0.0)],
            ..g
        };
        collect_outer_reads(&g, &mut reads);
        assert_eq!(reads.into_iter().collect::<Vec<_>>(), ["outer1"]);
    }
}
