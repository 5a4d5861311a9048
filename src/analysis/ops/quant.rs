//! Quantization ops: QuantizeLinear / DequantizeLinear (opsets 10-21), DynamicQuantizeLinear,
//! QLinearConv, QLinearMatMul, ConvInteger.
//!
//! (De)QuantizeLinear: y = saturate(round(x/scale) + zp) or y = (x − zp)·scale: 2 FLOPs per
//! element (3 with rounding for quantize). DynamicQuantizeLinear also finds min and max: 2 more
//! per element. QLinearConv / ConvInteger: the Conv formula (MACs = N·M·Ho·Wo·C/g·kh·kw) plus
//! requantization (3 FLOPs per output for QLinearConv). QLinearMatMul: the MatMul formula plus
//! 3 FLOPs per output. Integer tensors are counted at their own width.

use super::{CostCtx, InferCtx, OpCost, OpDef, OpNode, OpResult};
use crate::analysis::tensor::{DType, TensorFact};

struct Quantize;
struct Dequantize;
struct DynamicQuantize;
/// QLinearConv, ConvInteger, QLinearMatMul: reuse the float op on the data inputs.
struct QLinear;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "QuantizeLinear" => &Quantize,
        "DequantizeLinear" => &Dequantize,
        "DynamicQuantizeLinear" => &DynamicQuantize,
        "QLinearConv" | "ConvInteger" | "QLinearMatMul" => &QLinear,
        _ => return None,
    })
}

impl OpDef for Quantize {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let dtype = match (ctx.opt_input(2), ctx.attrs().int("output_dtype")) {
            (Some(zp), _) => zp.dtype,
            (None, Some(code)) if code != 0 => DType::from_onnx(code as i32).unwrap_or(DType::U8),
            _ => DType::U8,
        };
        Ok(vec![TensorFact {
            dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: 3 * ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for Dequantize {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let dtype = ctx.input(1).map(|s| s.dtype).unwrap_or(DType::F32);
        Ok(vec![TensorFact {
            dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: 2 * ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for DynamicQuantize {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        Ok(vec![
            TensorFact {
                dtype: DType::U8,
                shape: x.shape.clone(),
                konst: None,
            },
            TensorFact::known(DType::F32, &[]),
            TensorFact::known(DType::U8, &[]),
        ])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: 5 * ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// Positions of the data inputs (x, w, bias) of a quantized op, and the float op it mirrors.
fn data_inputs(op_type: &str) -> (&'static str, &'static [usize]) {
    match op_type {
        "QLinearConv" => ("Conv", &[0, 3, 8]),
        "ConvInteger" => ("Conv", &[0, 1]),
        _ => ("MatMul", &[0, 3]),
    }
}

impl OpDef for QLinear {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let (float_op, positions) = data_inputs(ctx.node.op_type);
        let inner = InferCtx {
            node: OpNode {
                name: ctx.node.name,
                op_type: float_op,
                attrs: ctx.node.attrs,
                opset: ctx.node.opset,
            },
            inputs: positions.iter().map(|&i| ctx.opt_input(i)).collect(),
            output_count: 1,
        };
        let op = super::lookup("", float_op).ok_or("internal: float op missing")?;
        let mut outputs = op.infer(&inner)?;
        let dtype = match ctx.node.op_type {
            "ConvInteger" => DType::I32,
            "QLinearConv" => ctx.opt_input(7).map(|zp| zp.dtype).unwrap_or(DType::U8),
            _ => ctx.opt_input(7).map(|zp| zp.dtype).unwrap_or(DType::U8),
        };
        for fact in &mut outputs {
            fact.dtype = dtype;
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let (float_op, positions) = data_inputs(ctx.node.op_type);
        let inner = CostCtx {
            node: OpNode {
                name: ctx.node.name,
                op_type: float_op,
                attrs: ctx.node.attrs,
                opset: ctx.node.opset,
            },
            inputs: positions
                .iter()
                .map(|&i| ctx.inputs.get(i).copied().flatten())
                .collect(),
            outputs: ctx.outputs.clone(),
            precision: ctx.precision,
        };
        let op = super::lookup("", float_op).ok_or("internal: float op missing")?;
        let mut cost = op.cost(&inner)?;
        if ctx.node.op_type != "ConvInteger" {
            cost.flops += 3 * ctx.output_elements(0)?;
        }
        cost.bytes = ctx.default_traffic()?;
        Ok(cost)
    }
}
