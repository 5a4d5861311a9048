//! Writes a (rewritten) graph back as standard ONNX: folded constants become initializers, and
//! the tool's fused ops are expanded into standard operators (ONNX has no fused conv epilogue;
//! the folded BN weights are what the file gains, the fusion itself is a kernel property).

use bytes::Bytes;

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

fn tensor_proto(name: &str, tensor: &Tensor) -> Result<TensorProto, ExportError> {
    let dims: Vec<i64> = tensor.shape.iter().map(|&d| d as i64).collect();
    let count = tensor.element_count() as usize;
    let raw: Bytes = match &tensor.data {
        TensorData::Raw(bytes) => bytes.clone(),
        TensorData::Opaque | TensorData::Strings(_) => {
            return Err(ExportError::OpaqueConstant(name.to_string()))
        }
        _ => {
            let values = tensor
                .to_f64_vec()
                .ok_or_else(|| ExportError::OpaqueConstant(name.to_string()))?;
            let mut out = Vec::with_capacity(count * tensor.dtype.size_bytes() as usize);
            for &v in values.iter() {
                match tensor.dtype {
                    DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
                    DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
                    DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
                    DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
                    DType::U64 => out.extend_from_slice(&(v as u64).to_le_bytes()),
                    DType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
                    DType::I16 | DType::U16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
                    DType::I8 => out.push(v as i8 as u8),
                    DType::U8 | DType::Bool => out.push(v as u8),
                    DType::Bf16 => out.extend_from_slice(
                        &crate::kernels::qgemm::f32_to_bf16(v as f32).to_le_bytes(),
                    ),
                    DType::F16 => out
                        .extend_from_slice(&crate::exec::quant::f32_to_f16(v as f32).to_le_bytes()),
                    other => {
                        return Err(ExportError::Node {
                            node: name.to_string(),
                            reason: format!("cannot write {other} constants"),
                        })
                    }
                }
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

/// The graph as an ONNX model (IR ≥ 4, the graph's default opset).
pub fn to_model(graph: &Graph) -> Result<ModelProto, ExportError> {
    let mut writer = Writer {
        graph,
        nodes: Vec::new(),
        extra_inits: Vec::new(),
        counter: 0,
    };
    let nodes = graph.nodes_in_order();
    let mut used: Vec<ValueId> = Vec::new();
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
    for v in used {
        let value = &graph.values[v];
        if value.producer.is_some() || graph.inputs.contains(&v) {
            continue;
        }
        if let Some(konst) = &value.fact.konst {
            initializers.push(tensor_proto(&value.name, konst)?);
        }
    }
    initializers.extend(writer.extra_inits);
    let opset = graph.opset.max(1);
    Ok(ModelProto {
        ir_version: graph.ir_version.max(4),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
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
