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
            outer: None,
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
            input_values: positions
                .iter()
                .map(|&i| ctx.input_values.get(i).copied().flatten())
                .collect(),
            outputs: ctx.outputs.clone(),
            precision: ctx.precision,
            outer: None,
        };
        let op = super::lookup("", float_op).ok_or("internal: float op missing")?;
        let mut cost = op.cost(&inner)?;
        // 8-bit products: the int8 roof; the requantization of a QLinear op's outputs runs at
        // the fp32 vector rate.
        cost.compute_precision = Some(crate::device::Precision::Int8);
        if ctx.node.op_type != "ConvInteger" {
            let requantize = 3 * ctx.output_elements(0)?;
            cost.flops += requantize;
            cost.vector_flops += requantize;
        }
        cost.bytes = ctx.default_traffic()?;
        Ok(cost)
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed quantization ops: integer tensors at their own width, f32 at 4 bytes.

    use super::super::tests::kit::{act, dims, f32s, scalar, traffic, weight, Op};
    use crate::analysis::tensor::DType;
    use crate::device::Precision;

    #[test]
    fn quantize_linear() {
        let x = f32s(&[1, 3, 8, 8]);
        let (s, zp) = (scalar(DType::F32, 0.1), scalar(DType::U8, 128.0));
        let (out, cost) = Op::new("QuantizeLinear").run(&[&x, &s, &zp]);
        assert_eq!((out[0].dtype, dims(&out[0])), (DType::U8, vec![1, 3, 8, 8]));
        // 192 elements × (divide, round, add zero point) = 576.
        assert_eq!(cost.flops, 576);
        // X 768 bytes; scale 4 + zero point 1 (weights); 192 u8 written.
        assert_eq!(cost.bytes, traffic(5, 768, 192));
        // The output type: the zero point's, else `output_dtype` (opset 21), else u8.
        let i8_zp = scalar(DType::I8, 0.0);
        let out = Op::new("QuantizeLinear").infer(&[&x, &s, &i8_zp]);
        assert_eq!(out[0].dtype, DType::I8);
        let out = Op::new("QuantizeLinear")
            .opset(21)
            .int("output_dtype", 3)
            .infer(&[&x, &s]);
        assert_eq!(out[0].dtype, DType::I8);
        assert_eq!(
            Op::new("QuantizeLinear").infer(&[&x, &s])[0].dtype,
            DType::U8
        );
    }

    #[test]
    fn dequantize_linear() {
        let x = act(DType::U8, &[192]);
        let (s, zp) = (scalar(DType::F32, 0.1), scalar(DType::U8, 128.0));
        let (out, cost) = Op::new("DequantizeLinear").run(&[&x, &s, &zp]);
        assert_eq!(out[0].dtype, DType::F32);
        // (x − zp)·scale: 2 FLOPs per element.
        assert_eq!(cost.flops, 384);
        assert_eq!(cost.bytes, traffic(5, 192, 768));
        // At fp16 the float output halves; the u8 input does not.
        let (_, half) = Op::new("DequantizeLinear")
            .precision(Precision::Fp16)
            .run(&[&x, &s, &zp]);
        assert_eq!(half.bytes, traffic(3, 192, 384));
    }

    #[test]
    fn dynamic_quantize_linear() {
        let x = f32s(&[192]);
        let (out, cost) = Op::new("DynamicQuantizeLinear").outputs(3).run(&[&x]);
        assert_eq!(out[0].dtype, DType::U8);
        assert_eq!((out[1].dtype, out[2].dtype), (DType::F32, DType::U8));
        // Min/max (2) + quantize (3) per element.
        assert_eq!(cost.flops, 960);
        // 192 u8 + f32 scale + u8 zero point written.
        assert_eq!(cost.bytes, traffic(0, 768, 192 + 4 + 1));
    }

    /// x u8 [1, 3, 8, 8] with its scale and zero point, w i8 [4, 3, 3, 3] with its, the output
    /// grid, then an i32 bias of 4.
    fn qlinear_conv_inputs() -> Vec<crate::analysis::tensor::TensorFact> {
        vec![
            act(DType::U8, &[1, 3, 8, 8]),
            scalar(DType::F32, 0.02),
            scalar(DType::U8, 128.0),
            weight(DType::I8, &[4, 3, 3, 3]),
            scalar(DType::F32, 0.01),
            scalar(DType::I8, 0.0),
            scalar(DType::F32, 0.05),
            scalar(DType::U8, 128.0),
            weight(DType::I32, &[4]),
        ]
    }

    #[test]
    fn qlinear_conv_is_a_conv_plus_requantization() {
        let inputs = qlinear_conv_inputs();
        let refs: Vec<_> = inputs.iter().collect();
        let (out, cost) = Op::new("QLinearConv").run(&refs);
        // No pads: 8 − 3 + 1 = 6; the output takes y_zero_point's type.
        assert_eq!((out[0].dtype, dims(&out[0])), (DType::U8, vec![1, 4, 6, 6]));
        // MACs = 4·6·6 · 3·3·3 = 144·27 = 3,888.
        assert_eq!(cost.macs, 3_888);
        // FLOPs = 2·MACs + 144 bias adds + 3·144 requantization = 7,776 + 144 + 432.
        assert_eq!(cost.flops, 8_352);
        // The requantization (3·144) at the fp32 vector rate.
        assert_eq!(cost.vector_flops, 432);
        assert_eq!(cost.compute_precision, Some(Precision::Int8));
        // x 192 (u8); weights: scales 3·4, zero points 3·1, w 108, bias 4·4 = 139; y 144 (u8).
        assert_eq!(cost.bytes, traffic(139, 192, 144));
        // A bias of the wrong length is still an inconsistent convolution.
        let mut bad = qlinear_conv_inputs();
        bad[8] = weight(DType::I32, &[3]);
        let refs: Vec<_> = bad.iter().collect();
        Op::new("QLinearConv").invalid(&refs);
    }

    #[test]
    fn conv_integer_has_no_requantization() {
        let (x, w) = (
            act(DType::U8, &[1, 3, 8, 8]),
            weight(DType::I8, &[4, 3, 3, 3]),
        );
        let (xz, wz) = (scalar(DType::U8, 128.0), scalar(DType::I8, 0.0));
        let (out, cost) = Op::new("ConvInteger").run(&[&x, &w, &xz, &wz]);
        assert_eq!(out[0].dtype, DType::I32);
        assert_eq!(cost.macs, 3_888);
        assert_eq!(cost.flops, 7_776);
        // i32 output: 144·4 = 576 bytes; weights 108 + 1 + 1.
        assert_eq!(cost.bytes, traffic(110, 192, 576));
        // 8-bit products on the int8 roof, no fp32-rate requantization.
        assert_eq!(cost.compute_precision, Some(Precision::Int8));
        assert_eq!(cost.vector_flops, 0);
    }

    #[test]
    fn qlinear_matmul() {
        let inputs = [
            act(DType::U8, &[4, 8]),
            scalar(DType::F32, 0.02),
            scalar(DType::U8, 128.0),
            weight(DType::I8, &[8, 16]),
            scalar(DType::F32, 0.01),
            scalar(DType::I8, 0.0),
            scalar(DType::F32, 0.05),
            scalar(DType::U8, 128.0),
        ];
        let refs: Vec<_> = inputs.iter().collect();
        let (out, cost) = Op::new("QLinearMatMul").run(&refs);
        assert_eq!((out[0].dtype, dims(&out[0])), (DType::U8, vec![4, 16]));
        // MACs = 4·8·16 = 512; FLOPs = 1,024 + 3·64.
        assert_eq!(cost.macs, 512);
        assert_eq!(cost.flops, 1_216);
        // a 32; weights: b 128 + scales 12 + zero points 3 = 143; y 64.
        assert_eq!(cost.bytes, traffic(143, 32, 64));
        // Inner dims 8 against 7 fail.
        let mut bad = inputs.clone();
        bad[3] = weight(DType::I8, &[7, 16]);
        let refs: Vec<_> = bad.iter().collect();
        Op::new("QLinearMatMul").fails(&refs);
    }
}
