//! The QOperator expansion: rewrites the quantized operators of the QOperator form (what
//! onnxruntime's quantizer writes with `QuantFormat.QOperator`: QLinearConv, QLinearMatMul and
//! its contrib QLinearAdd, QLinearMul, QGemm, QLinearGlobalAveragePool, QLinearSigmoid,
//! QLinearLeakyRelu) into the equivalent QDQ form, `DequantizeLinear → float op →
//! QuantizeLinear`. The spec defines each of these ops by exactly that composition (integer
//! inputs mapped to reals by their scale and zero point, the op on reals, the result requantized
//! with round-half-to-even and saturation), so the rewrite keeps the numbers; the QDQ lowering
//! that runs next (`qdq::lower_qdq`) then puts the convolutions and matrix products on the int8
//! kernels, and every other op runs as its float kernel between a dequantize and a quantize.

use crate::analysis::graph::{Attr, Attributes, Graph, Node, ValueId};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};

const CONTRIB: &str = crate::analysis::ops::contrib::DOMAIN;

/// A new value with nothing known yet (inference fills it in).
fn fresh(graph: &mut Graph, name: String, dtype: DType) -> ValueId {
    graph.add_value(
        name,
        TensorFact {
            dtype,
            shape: None,
            konst: None,
        },
    )
}

fn node(name: String, op: &str, inputs: Vec<Option<ValueId>>, outputs: Vec<ValueId>) -> Node {
    Node {
        name,
        op_type: op.to_string(),
        domain: String::new(),
        attrs: Attributes::default(),
        inputs,
        outputs,
    }
}

/// Expands the node's integer input `(x, scale, zero point)` into a float value.
fn dequantize(
    graph: &mut Graph,
    out: &mut Vec<Node>,
    base: &str,
    [x, scale, zero]: [Option<ValueId>; 3],
    axis: Option<i64>,
) -> Option<ValueId> {
    let x = x?;
    let real = fresh(graph, format!("{base}_real"), DType::F32);
    let mut dq = node(
        format!("{base}_dequantize"),
        "DequantizeLinear",
        vec![Some(x), scale, zero],
        vec![real],
    );
    if let Some(axis) = axis {
        dq.attrs.0.insert("axis".into(), Attr::Int(axis));
    }
    out.push(dq);
    Some(real)
}

/// Quantizes `real` into the node's original output `y` with `(scale, zero point)`.
fn quantize(
    out: &mut Vec<Node>,
    base: &str,
    real: ValueId,
    scale: Option<ValueId>,
    zero: Option<ValueId>,
    y: ValueId,
) {
    out.push(node(
        format!("{base}_quantize"),
        "QuantizeLinear",
        vec![Some(real), scale, zero],
        vec![y],
    ));
}

/// The per-channel scale of an int32 bias: x_scale · w_scale, when both are constants.
fn bias_scale(
    graph: &mut Graph,
    name: String,
    x_scale: Option<ValueId>,
    w_scale: Option<ValueId>,
    factor: f32,
) -> Option<ValueId> {
    let read = |v: Option<ValueId>| -> Option<Vec<f32>> {
        graph.values[v?].fact.konst.as_ref()?.to_f32_vec()
    };
    let (xs, ws) = (read(x_scale)?, read(w_scale)?);
    let x = *xs.first()?;
    let values: Vec<f32> = ws.iter().map(|w| factor * x * w).collect();
    let shape = if values.len() == 1 {
        Vec::new()
    } else {
        vec![values.len() as u64]
    };
    Some(graph.add_value(
        name,
        TensorFact::constant(Tensor {
            dtype: DType::F32,
            shape,
            data: TensorData::F32(values),
        }),
    ))
}

/// The float form of the node's quantized operand `(x, scale, zero point)` at inputs
/// `first..first + 3`, named after the node and `part`.
fn dequantize_input(
    graph: &mut Graph,
    out: &mut Vec<Node>,
    n: &Node,
    first: usize,
    part: &str,
    axis: Option<i64>,
) -> Option<ValueId> {
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    let operand = [input(first), input(first + 1), input(first + 2)];
    dequantize(graph, out, &format!("{}_{part}", n.name), operand, axis)
}

/// The float forms of the node's two quantized operands `(a, a_scale, a_zero)` at inputs 0-2 and
/// `(b, b_scale, b_zero)` at 3-5 (B's scale along `b_axis`).
fn dequantize_operands(
    graph: &mut Graph,
    out: &mut Vec<Node>,
    n: &Node,
    b_axis: Option<i64>,
) -> Option<(ValueId, ValueId)> {
    // A per-row A scale (QLinearMatMul allows one) runs along A's second-to-last axis.
    let a_scale = n.inputs.get(1).copied().flatten();
    let per_row = a_scale.is_some_and(|s| graph.values[s].fact.element_count().unwrap_or(1) > 1);
    let a = dequantize_input(graph, out, n, 0, "a", per_row.then_some(-2))?;
    let b = dequantize_input(graph, out, n, 3, "b", b_axis)?;
    Some((a, b))
}

/// The float form of an int32 bias whose scale is factor · x_scale · w_scale (QGemm's C carries
/// its α): `Ok(None)` without a bias,
/// `Err(())` when the scales are not constants (the node is then left as it is).
fn dequantize_bias(
    graph: &mut Graph,
    out: &mut Vec<Node>,
    base: &str,
    bias: Option<ValueId>,
    x_scale: Option<ValueId>,
    w_scale: Option<ValueId>,
    factor: f32,
) -> Result<Option<ValueId>, ()> {
    let Some(bias) = bias else {
        return Ok(None);
    };
    let scale = bias_scale(graph, format!("{base}_scale"), x_scale, w_scale, factor).ok_or(())?;
    Ok(dequantize(
        graph,
        out,
        base,
        [Some(bias), Some(scale), None],
        Some(0),
    ))
}

/// Rewrites every QOperator node of `graph`; returns how many it rewrote.
pub fn expand_qoperator(graph: &mut Graph) -> usize {
    let nodes = graph.nodes_in_order();
    let mut out = Vec::with_capacity(nodes.len());
    let mut expanded = 0;
    for original in nodes {
        let before = out.len();
        if !expand_one(graph, &original, &mut out) {
            out.truncate(before);
            out.push(original);
        } else {
            expanded += 1;
        }
    }
    if expanded > 0 {
        graph.rebuild(out);
    }
    expanded
}

fn expand_one(graph: &mut Graph, n: &Node, out: &mut Vec<Node>) -> bool {
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    let standard = n.domain.is_empty() || n.domain == "ai.onnx";
    let contrib = n.domain == CONTRIB;
    let base = n.name.clone();
    let Some(&y) = n.outputs.first() else {
        return false;
    };
    // The float op in the middle: same attributes as the quantized one, minus its own.
    let float_op = |op: &str, inputs: Vec<Option<ValueId>>, real: ValueId| -> Node {
        let mut attrs = n.attrs.clone();
        attrs.0.remove("channels_last");
        Node {
            name: base.clone(),
            op_type: op.to_string(),
            domain: String::new(),
            attrs,
            inputs,
            outputs: vec![real],
        }
    };
    match (standard, contrib, n.op_type.as_str()) {
        (true, _, "QLinearConv") => {
            let Some(x) = dequantize_input(graph, out, n, 0, "x", None) else {
                return false;
            };
            let Some(w) = dequantize_input(graph, out, n, 3, "w", Some(0)) else {
                return false;
            };
            let Ok(bias) = dequantize_bias(
                graph,
                out,
                &format!("{base}_b"),
                input(8),
                input(1),
                input(4),
                1.0,
            ) else {
                return false;
            };
            let real = fresh(graph, format!("{base}_y_real"), DType::F32);
            let mut inputs = vec![Some(x), Some(w)];
            if bias.is_some() {
                inputs.push(bias);
            }
            out.push(float_op("Conv", inputs, real));
            quantize(out, &base, real, input(6), input(7), y);
            true
        }
        (true, _, "QLinearMatMul") => {
            // A per-column B scale is along B's last axis.
            let Some((a, b)) = dequantize_operands(graph, out, n, Some(-1)) else {
                return false;
            };
            let real = fresh(graph, format!("{base}_y_real"), DType::F32);
            out.push(float_op("MatMul", vec![Some(a), Some(b)], real));
            quantize(out, &base, real, input(6), input(7), y);
            true
        }
        (_, true, "QLinearAdd" | "QLinearMul") => {
            let Some((a, b)) = dequantize_operands(graph, out, n, None) else {
                return false;
            };
            let real = fresh(graph, format!("{base}_y_real"), DType::F32);
            let op = if n.op_type == "QLinearAdd" {
                "Add"
            } else {
                "Mul"
            };
            out.push(float_op(op, vec![Some(a), Some(b)], real));
            quantize(out, &base, real, input(6), input(7), y);
            true
        }
        (_, true, "QLinearGlobalAveragePool" | "QLinearSigmoid" | "QLinearLeakyRelu") => {
            if n.attrs.int_or("channels_last", 0) != 0 {
                return false;
            }
            let Some(x) = dequantize_input(graph, out, n, 0, "x", None) else {
                return false;
            };
            let real = fresh(graph, format!("{base}_y_real"), DType::F32);
            let op = &n.op_type["QLinear".len()..];
            out.push(float_op(op, vec![Some(x)], real));
            quantize(out, &base, real, input(3), input(4), y);
            true
        }
        (_, true, "QGemm") => {
            // B's per-column scale runs along N: axis 0 of a transposed B, else axis 1.
            let b_axis = if n.attrs.int_or("transB", 0) != 0 {
                0
            } else {
                1
            };
            let Some((a, b)) = dequantize_operands(graph, out, n, Some(b_axis)) else {
                return false;
            };
            let Ok(c) = dequantize_bias(
                graph,
                out,
                &format!("{base}_c"),
                input(6),
                input(1),
                input(4),
                n.attrs.float_or("alpha", 1.0),
            ) else {
                return false;
            };
            // With an output scale the result is requantized; without, QGemm writes floats.
            match input(7) {
                Some(y_scale) => {
                    let real = fresh(graph, format!("{base}_y_real"), DType::F32);
                    out.push(float_op("Gemm", vec![Some(a), Some(b), c], real));
                    quantize(out, &base, real, Some(y_scale), input(8), y);
                }
                None => out.push(float_op("Gemm", vec![Some(a), Some(b), c], y)),
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Attr;

    #[test]
    fn qlinear_conv_becomes_dequantize_conv_quantize() {
        let mut graph = Graph::default();
        let value = |g: &mut Graph, name: &str, dtype: DType| fresh(g, name.into(), dtype);
        let x = value(&mut graph, "x", DType::U8);
        let names = ["xs", "xz", "w", "ws", "wz", "ys", "yz"];
        let params: Vec<ValueId> = names
            .iter()
            .map(|n| {
                graph.add_value(
                    *n,
                    TensorFact::constant(Tensor {
                        dtype: DType::F32,
                        shape: Vec::new(),
                        data: TensorData::F32(vec![0.5]),
                    }),
                )
            })
            .collect();
        let y = value(&mut graph, "y", DType::U8);
        let mut conv = node(
            "conv".into(),
            "QLinearConv",
            std::iter::once(Some(x))
                .chain(params.iter().map(|&p| Some(p)))
                .collect(),
            vec![y],
        );
        conv.attrs
            .0
            .insert("strides".into(), Attr::Ints(vec![2, 2]));
        graph.rebuild(vec![conv]);
        assert_eq!(expand_qoperator(&mut graph), 1);
        let ops: Vec<String> = graph
            .nodes_in_order()
            .iter()
            .map(|n| n.op_type.clone())
            .collect();
        assert_eq!(
            ops,
            [
                "DequantizeLinear",
                "DequantizeLinear",
                "Conv",
                "QuantizeLinear"
            ]
        );
        let float_conv = graph
            .nodes_in_order()
            .into_iter()
            .find(|n| n.op_type == "Conv")
            .unwrap();
        assert_eq!(float_conv.attrs.ints("strides"), Some(&[2, 2][..]));
        // The original output is still produced, now by the QuantizeLinear.
        let last = graph.nodes_in_order().pop().unwrap();
        assert_eq!(last.outputs, vec![y]);
    }
}
