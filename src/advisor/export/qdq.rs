//! Standard-ONNX forms of the quantized ops (the QDQ form onnxruntime's quantizer writes, and
//! that `advisor::qdq::lower_qdq` reads back):
//! - `QConv` / `QMatMul`: `x → QuantizeLinear(x_scale, x_zero_point) → DequantizeLinear →
//!   Conv | MatMul` with weights `DequantizeLinear(int8 W, w_scale, axis = output channels)`, then
//!   the bias (MatMul: Add), residual Add and activation; an output grid becomes a final
//!   QuantizeLinear → DequantizeLinear pair.
//! - `HalfConv` / `HalfMatMul`: the half-width weights `Cast` to float, the input rounded through
//!   `Cast(to = bf16 | fp16) → Cast(to = float)`, then the float op and its epilogue.
//! - `FakeQuant`: QuantizeLinear → DequantizeLinear.
//!
//! Per-axis DequantizeLinear and Cast to bfloat16 need opset 13: int8 and bf16 ops of an older
//! graph are an error.

use super::{attribute, AttributeProto, ExportError, Writer};
use crate::analysis::graph::Node;
use crate::analysis::onnx_proto::attribute_type;
use crate::analysis::ops::fused::quant::slot;
use crate::analysis::ops::fused::Activation;

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

/// ONNX TensorProto element types.
const FLOAT: i64 = 1;
const FLOAT16: i64 = 10;
const BFLOAT16: i64 = 16;

impl Writer<'_> {
    fn input_name(&self, node: &Node, i: usize) -> Option<String> {
        node.inputs
            .get(i)
            .copied()
            .flatten()
            .map(|v| self.name(Some(v)))
    }

    /// A scale as a scalar when it is one value (a 1-element 1-D scale is per-axis in ONNX).
    fn scale_name(&mut self, node: &Node, i: usize, base: &str) -> Result<String, ExportError> {
        let v = node
            .inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| ExportError::Node {
                node: node.name.clone(),
                reason: format!("input #{i} missing"),
            })?;
        let fact = &self.graph.values[v].fact;
        let values = fact.konst.as_ref().and_then(|t| t.to_f32_vec());
        match values {
            Some(vals) if vals.len() == 1 && fact.shape.as_ref().is_some_and(|s| !s.is_empty()) => {
                Ok(self.scalar(base, vals[0]))
            }
            _ => Ok(self.name(Some(v))),
        }
    }

    /// Epilogue after the base op's output `current`: residual, activation, output grid; the
    /// last value is named `out`.
    fn epilogue(
        &mut self,
        node: &Node,
        mut current: String,
        out: String,
    ) -> Result<(), ExportError> {
        if let Some(r) = self.input_name(node, slot::RESIDUAL) {
            let next = self.fresh(&out);
            self.emit(
                "Add",
                &format!("{}_residual", node.name),
                vec![current, r],
                vec![next.clone()],
                vec![],
            );
            current = next;
        }
        let act = Activation::from_attrs(&node.attrs).map_err(|reason| ExportError::Node {
            node: node.name.clone(),
            reason,
        })?;
        let requant =
            node.op_type.starts_with('Q') && self.input_name(node, slot::Y_SCALE).is_some();
        let act_out = if requant {
            self.fresh(&out)
        } else {
            out.clone()
        };
        if act == Activation::None {
            self.emit(
                "Identity",
                &format!("{}_out", node.name),
                vec![current],
                vec![act_out.clone()],
                vec![],
            );
        } else {
            self.activation(&format!("{}_act", node.name), act, current, act_out.clone());
        }
        if requant {
            let ys = self.scale_name(node, slot::Y_SCALE, &out)?;
            let yz = self
                .input_name(node, slot::Y_ZERO_POINT)
                .unwrap_or_default();
            let q = self.fresh(&out);
            self.emit(
                "QuantizeLinear",
                &format!("{}_yq", node.name),
                vec![act_out, ys.clone(), yz.clone()],
                vec![q.clone()],
                vec![],
            );
            self.emit(
                "DequantizeLinear",
                &format!("{}_ydq", node.name),
                vec![q, ys, yz],
                vec![out],
                vec![],
            );
        }
        Ok(())
    }

    /// Writes a quantized / half-precision op in standard operators.
    pub(super) fn quantized(&mut self, node: &Node) -> Result<(), ExportError> {
        let out = self.name(Some(node.outputs[0]));
        let x = self.input_name(node, slot::X).unwrap_or_default();
        let base_attrs: Vec<AttributeProto> = node
            .attrs
            .0
            .iter()
            .filter(|(k, _)| !Activation::is_attr(k) && k.as_str() != "dtype")
            .filter_map(|(k, v)| attribute(k, v))
            .collect();
        let conv = node.op_type.ends_with("Conv");
        match node.op_type.as_str() {
            "FakeQuant" => {
                let s = self.scale_name(node, 1, &out)?;
                let z = self.input_name(node, 2).unwrap_or_default();
                let q = self.fresh(&out);
                self.emit(
                    "QuantizeLinear",
                    &format!("{}_q", node.name),
                    vec![x, s.clone(), z.clone()],
                    vec![q.clone()],
                    vec![],
                );
                self.emit(
                    "DequantizeLinear",
                    &node.name,
                    vec![q, s, z],
                    vec![out],
                    vec![],
                );
                Ok(())
            }
            "QConv" | "QMatMul" if self.graph.opset < 13 => Err(ExportError::Node {
                node: node.name.clone(),
                reason: format!(
                    "per-channel DequantizeLinear needs opset 13; the model imports opset {}",
                    self.graph.opset
                ),
            }),
            "HalfConv" | "HalfMatMul"
                if self.graph.opset < 13 && node.attrs.string("dtype") == Some("bf16") =>
            {
                Err(ExportError::Node {
                    node: node.name.clone(),
                    reason: format!(
                        "Cast to and from bfloat16 needs opset 13; the model imports opset {}",
                        self.graph.opset
                    ),
                })
            }
            "QConv" | "QMatMul" => {
                let xs = self.scale_name(node, slot::X_SCALE, &out)?;
                let xz = self
                    .input_name(node, slot::X_ZERO_POINT)
                    .unwrap_or_default();
                let (xq, xd, wd) = (self.fresh(&out), self.fresh(&out), self.fresh(&out));
                self.emit(
                    "QuantizeLinear",
                    &format!("{}_xq", node.name),
                    vec![x, xs.clone(), xz.clone()],
                    vec![xq.clone()],
                    vec![],
                );
                self.emit(
                    "DequantizeLinear",
                    &format!("{}_xdq", node.name),
                    vec![xq, xs, xz],
                    vec![xd.clone()],
                    vec![],
                );
                let w = self.input_name(node, slot::W).unwrap_or_default();
                let ws = self.scale_name(node, slot::W_SCALE, &out)?;
                let axis = if conv { 0 } else { 1 };
                self.emit(
                    "DequantizeLinear",
                    &format!("{}_wdq", node.name),
                    vec![w, ws],
                    vec![wd.clone()],
                    vec![int_attr("axis", axis)],
                );
                self.base_op(node, conv, xd, wd, base_attrs, out)
            }
            "HalfConv" | "HalfMatMul" => {
                let to = if node.attrs.string("dtype") == Some("bf16") {
                    BFLOAT16
                } else {
                    FLOAT16
                };
                let (xh, xf, wf) = (self.fresh(&out), self.fresh(&out), self.fresh(&out));
                self.emit(
                    "Cast",
                    &format!("{}_xh", node.name),
                    vec![x],
                    vec![xh.clone()],
                    vec![int_attr("to", to)],
                );
                self.emit(
                    "Cast",
                    &format!("{}_xf", node.name),
                    vec![xh],
                    vec![xf.clone()],
                    vec![int_attr("to", FLOAT)],
                );
                let w = self.input_name(node, slot::W).unwrap_or_default();
                self.emit(
                    "Cast",
                    &format!("{}_wf", node.name),
                    vec![w],
                    vec![wf.clone()],
                    vec![int_attr("to", FLOAT)],
                );
                self.base_op(node, conv, xf, wf, base_attrs, out)
            }
            other => Err(ExportError::Node {
                node: node.name.clone(),
                reason: format!("no standard form for {other}"),
            }),
        }
    }

    fn base_op(
        &mut self,
        node: &Node,
        conv: bool,
        x: String,
        w: String,
        attrs: Vec<AttributeProto>,
        out: String,
    ) -> Result<(), ExportError> {
        let bias = self.input_name(node, slot::BIAS);
        let y = self.fresh(&out);
        if conv {
            let mut inputs = vec![x, w];
            inputs.extend(bias);
            self.emit("Conv", &node.name, inputs, vec![y.clone()], attrs);
            self.epilogue(node, y, out)
        } else {
            self.emit("MatMul", &node.name, vec![x, w], vec![y.clone()], vec![]);
            let current = match bias {
                Some(b) => {
                    let next = self.fresh(&out);
                    self.emit(
                        "Add",
                        &format!("{}_bias", node.name),
                        vec![y, b],
                        vec![next.clone()],
                        vec![],
                    );
                    next
                }
                None => y,
            };
            self.epilogue(node, current, out)
        }
    }
}
