//! Quantized and half-precision ops written by the advisor's `int8`, `bf16` and `fp16` passes
//! and by `advisor::qdq::lower_qdq`, in the tool's domain `roofline`.
//!
//! - `QConv` / `QMatMul`: inputs `X` (f32), `W` (int8 constant: Conv `[M, C/g, kh, kw]`, MatMul
//!   `[K, N]`), `B?` (f32 bias per output channel), `R?` (f32 residual, QConv only),
//!   `w_scale` (f32 per output channel, or one), `x_scale`, `x_zero_point` (the activation
//!   quantization, u8 grid), `y_scale?`, `y_zero_point?` (the output is rounded to that grid:
//!   a QuantizeLinear → DequantizeLinear pair folded in). Attributes: Conv's, and the epilogue's
//!   `activation` / `act_alpha` / `act_beta`. X is quantized while the kernel packs it and the
//!   output is dequantized in its epilogue, so both stay f32 tensors in memory.
//! - `HalfConv` / `HalfMatMul`: inputs `X` (f32), `W` (bf16 or fp16 constant), `B?`, `R?`;
//!   attribute `dtype` (`bf16` | `fp16`) and the epilogue's.
//! - `FakeQuant`: `DequantizeLinear(QuantizeLinear(X, scale, zp), scale, zp)` on the u8 grid,
//!   inputs `X`, `scale`, `zero_point`.
//!
//! Cost: the base op's MACs, FLOPs and epilogue at the op's own compute precision
//! (`compute_precision` Int8 / Bf16 / Fp16), plus the quantize (3 FLOPs per input element:
//! multiply, round, add zero point) and dequantize (2 per output; 5 more with an output grid)
//! arithmetic, counted as work at the fp32 vector rate (`OpCost::vector_flops`: an int8 unit
//! does not run it). Traffic is what the kernel moves: f32
//! activations in and out (quantization happens in registers), weights at 1 byte (int8) or 2
//! bytes (bf16/fp16), scales and bias as f32.

use super::super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use super::{checked_activation, inner_ctx, Activation};
use crate::analysis::tensor::{DType, TensorFact};
use crate::device::Precision;

struct QConv;
struct QMatMul;
struct HalfConv;
struct HalfMatMul;
struct FakeQuant;

/// Input positions shared by QConv and QMatMul.
pub mod slot {
    pub const X: usize = 0;
    pub const W: usize = 1;
    pub const BIAS: usize = 2;
    pub const RESIDUAL: usize = 3;
    pub const W_SCALE: usize = 4;
    pub const X_SCALE: usize = 5;
    pub const X_ZERO_POINT: usize = 6;
    pub const Y_SCALE: usize = 7;
    pub const Y_ZERO_POINT: usize = 8;
}

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "QConv" => &QConv,
        "QMatMul" => &QMatMul,
        "HalfConv" => &HalfConv,
        "HalfMatMul" => &HalfMatMul,
        "FakeQuant" => &FakeQuant,
        _ => return None,
    })
}

/// Precision of a `Half*` op from its `dtype` attribute.
pub fn half_precision(dtype: &str) -> Option<Precision> {
    match dtype {
        "bf16" => Some(Precision::Bf16),
        "fp16" => Some(Precision::Fp16),
        _ => None,
    }
}

use super::base_cost;

/// Epilogue FLOPs per output element: activation, residual add, bias add (MatMul only: Conv's
/// formula counts its bias already).
fn epilogue_flops(ctx: &CostCtx, cost: &mut OpCost, matmul_bias: bool) -> OpResult<()> {
    let outputs = ctx.output_elements(0)?;
    let (flops, transcendental) = Activation::from_attrs(ctx.attrs())?.cost();
    let residual = ctx.inputs.get(slot::RESIDUAL).copied().flatten().is_some();
    let bias = matmul_bias && ctx.inputs.get(slot::BIAS).copied().flatten().is_some();
    cost.flops += outputs * (flops + u64::from(residual) + u64::from(bias));
    cost.transcendental += outputs * transcendental;
    Ok(())
}

fn quantized_cost(ctx: &CostCtx, base: &str) -> OpResult<OpCost> {
    let mut cost = base_cost(ctx, base, if base == "Conv" { 3 } else { 2 })?;
    let before_epilogue = cost.flops;
    epilogue_flops(ctx, &mut cost, base == "MatMul")?;
    let inputs = ctx
        .input(slot::X)?
        .element_count()
        .ok_or("input shape is not fully known")?;
    let outputs = ctx.output_elements(0)?;
    let requant = ctx.inputs.get(slot::Y_SCALE).copied().flatten().is_some();
    cost.flops += 3 * inputs + 2 * outputs + if requant { 5 * outputs } else { 0 };
    // Epilogue and (de)quantization run as f32 vector code, not on the int8 dot products.
    cost.vector_flops = cost.flops - before_epilogue + cost.transcendental;
    cost.bytes = ctx.default_traffic()?;
    cost.compute_precision = Some(Precision::Int8);
    Ok(cost)
}

fn half_cost(ctx: &CostCtx, base: &str) -> OpResult<OpCost> {
    let precision = half_precision(ctx.attrs().string("dtype").unwrap_or(""))
        .ok_or("`dtype` must be bf16 or fp16")?;
    let mut cost = base_cost(ctx, base, if base == "Conv" { 3 } else { 2 })?;
    let before_epilogue = cost.flops;
    epilogue_flops(ctx, &mut cost, base == "MatMul")?;
    cost.vector_flops = cost.flops - before_epilogue + cost.transcendental;
    let mut traffic = ctx.default_traffic()?;
    // The weights are stored at half width whatever the analysis precision.
    let w = ctx.input(slot::W)?;
    let w_elements = w.element_count().ok_or("weight shape is not fully known")?;
    traffic.weights_read = traffic.weights_read - ctx.bytes_of(w)? + 2 * w_elements;
    cost.bytes = traffic;
    cost.compute_precision = Some(precision);
    Ok(cost)
}

fn float_output(mut facts: Vec<TensorFact>) -> Vec<TensorFact> {
    for f in &mut facts {
        f.dtype = DType::F32;
        f.konst = None;
    }
    facts
}

impl OpDef for QConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        checked_activation(ctx)?;
        let op = super::super::lookup("", "Conv").ok_or("internal: Conv missing")?;
        op.infer(&inner_ctx(ctx, "Conv", 3)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        quantized_cost(ctx, "Conv")
    }
}

impl OpDef for QMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        checked_activation(ctx)?;
        let op = super::super::lookup("", "MatMul").ok_or("internal: MatMul missing")?;
        op.infer(&inner_ctx(ctx, "MatMul", 2)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        quantized_cost(ctx, "MatMul")
    }
}

impl OpDef for HalfConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        checked_activation(ctx)?;
        let op = super::super::lookup("", "Conv").ok_or("internal: Conv missing")?;
        op.infer(&inner_ctx(ctx, "Conv", 3)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        half_cost(ctx, "Conv")
    }
}

impl OpDef for HalfMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        checked_activation(ctx)?;
        let op = super::super::lookup("", "MatMul").ok_or("internal: MatMul missing")?;
        op.infer(&inner_ctx(ctx, "MatMul", 2)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        half_cost(ctx, "MatMul")
    }
}

impl OpDef for FakeQuant {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        Ok(vec![TensorFact {
            dtype: x.dtype,
            shape: x.shape.clone(),
            konst: None,
        }])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: 5 * ctx.output_elements(0)?,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed quantized and half-precision ops (analysis precision fp32 unless stated).

    use super::super::super::tests::kit::{dims, f32s, scalar, traffic, w32, weight, Op};
    use crate::analysis::tensor::{DType, TensorFact};
    use crate::device::Precision;

    /// QConv inputs: X f32 [1, 16, 8, 8], W i8 [32, 16, 3, 3], B [32], no residual, per-channel
    /// weight scales, the activation scale and zero point.
    fn qconv_inputs() -> Vec<Option<TensorFact>> {
        vec![
            Some(f32s(&[1, 16, 8, 8])),
            Some(weight(DType::I8, &[32, 16, 3, 3])),
            Some(w32(&[32])),
            None,
            Some(w32(&[32])),
            Some(scalar(DType::F32, 0.02)),
            Some(scalar(DType::U8, 128.0)),
        ]
    }

    fn refs(facts: &[Option<TensorFact>]) -> Vec<Option<&TensorFact>> {
        facts.iter().map(Option::as_ref).collect()
    }

    #[test]
    fn qconv() {
        let inputs = qconv_inputs();
        let op = Op::fused("QConv").ints("pads", &[1, 1, 1, 1]);
        let (out, cost) = op.run_opt(&refs(&inputs));
        // An f32 output, never a constant.
        assert_eq!(
            (out[0].dtype, dims(&out[0])),
            (DType::F32, vec![1, 32, 8, 8])
        );
        // 2,048 outputs; MACs = 2,048 · 16·9 = 294,912.
        assert_eq!(cost.macs, 294_912);
        // Conv: 2·MACs + 2,048 bias adds = 591,872; quantize 3 × 1,024 inputs, dequantize
        // 2 × 2,048 outputs: + 7,168.
        assert_eq!(cost.flops, 599_040);
        // Only the quantize/dequantize work runs at the fp32 vector rate.
        assert_eq!(cost.vector_flops, 7_168);
        assert_eq!(cost.compute_precision, Some(Precision::Int8));
        // X 4,096 bytes; W 4,608 (1 byte each) + B 128 + w_scale 128 + x_scale 4 + zero point 1;
        // Y 8,192.
        assert_eq!(cost.bytes, traffic(4_869, 4_096, 8_192));
    }

    #[test]
    fn qconv_with_residual_activation_and_output_grid() {
        let mut inputs = qconv_inputs();
        inputs[3] = Some(f32s(&[1, 32, 8, 8]));
        inputs.push(Some(scalar(DType::F32, 0.05)));
        inputs.push(Some(scalar(DType::U8, 0.0)));
        let op = Op::fused("QConv")
            .ints("pads", &[1, 1, 1, 1])
            .string("activation", "relu");
        let (_, cost) = op.run_opt(&refs(&inputs));
        // 591,872 + (relu 1 + residual 1)·2,048 + 7,168 + requantize 5·2,048 = 613,376.
        assert_eq!(cost.flops, 613_376);
        // Everything past the conv formula: 4,096 + 7,168 + 10,240.
        assert_eq!(cost.vector_flops, 21_504);
        // R adds 8,192 read; y_scale and y_zero_point 5 bytes of weights.
        assert_eq!(cost.bytes, traffic(4_874, 12_288, 8_192));
    }

    #[test]
    fn unknown_epilogue_activation_is_invalid() {
        let inputs = qconv_inputs();
        let op = Op::fused("QConv")
            .ints("pads", &[1, 1, 1, 1])
            .string("activation", "mish");
        assert!(op
            .invalid_opt(&refs(&inputs))
            .contains("unknown activation `mish`"));
    }

    #[test]
    fn qmatmul() {
        let inputs = vec![
            Some(f32s(&[4, 64])),
            Some(weight(DType::I8, &[64, 32])),
            Some(w32(&[32])),
            None,
            Some(w32(&[32])),
            Some(scalar(DType::F32, 0.02)),
            Some(scalar(DType::U8, 128.0)),
        ];
        let (out, cost) = Op::fused("QMatMul").run_opt(&refs(&inputs));
        assert_eq!((out[0].dtype, dims(&out[0])), (DType::F32, vec![4, 32]));
        // MACs = 128 · 64 = 8,192; 16,384 + bias 128 + quantize 3·256 + dequantize 2·128.
        assert_eq!(cost.macs, 8_192);
        assert_eq!(cost.flops, 17_536);
        // The bias add is epilogue work here (MatMul's formula has none).
        assert_eq!(cost.vector_flops, 128 + 1_024);
        // X 1,024; W 2,048 + B 128 + w_scale 128 + 5; Y 512.
        assert_eq!(cost.bytes, traffic(2_309, 1_024, 512));
    }

    #[test]
    fn half_conv_stores_weights_at_two_bytes() {
        let (x, w, b) = (
            f32s(&[1, 16, 8, 8]),
            weight(DType::Bf16, &[32, 16, 3, 3]),
            w32(&[32]),
        );
        let op = Op::fused("HalfConv")
            .ints("pads", &[1, 1, 1, 1])
            .string("dtype", "bf16");
        let (out, cost) = op.run(&[&x, &w, &b]);
        assert_eq!(out[0].dtype, DType::F32);
        // The conv formula, nothing at the vector rate (no epilogue).
        assert_eq!(cost.flops, 591_872);
        assert_eq!(cost.vector_flops, 0);
        assert_eq!(cost.compute_precision, Some(Precision::Bf16));
        // W 4,608·2 whatever the analysis precision, B 32·4; X 4,096; Y 8,192.
        assert_eq!(cost.bytes, traffic(9_344, 4_096, 8_192));
        // Analysed at fp16: the f32 tensors at 2 bytes, W still 2.
        let (_, half) = op.precision(Precision::Fp16).run(&[&x, &w, &b]);
        assert_eq!(half.bytes, traffic(9_216 + 64, 2_048, 4_096));
        // An unknown dtype cannot be costed.
        let bad = Op::fused("HalfConv").ints("pads", &[1, 1, 1, 1]);
        let out = bad.infer(&[&x, &w, &b]);
        assert!(bad
            .try_cost_opt(&[Some(&x), Some(&w), Some(&b)], &out)
            .is_err());
    }

    #[test]
    fn half_matmul_epilogue_runs_at_the_vector_rate() {
        let (x, w) = (f32s(&[4, 64]), weight(DType::F16, &[64, 32]));
        let op = Op::fused("HalfMatMul")
            .string("dtype", "fp16")
            .string("activation", "gelu");
        let (_, cost) = op.run(&[&x, &w]);
        // 16,384 + GELU 4·128 FLOPs and 128 erf.
        assert_eq!((cost.flops, cost.transcendental), (16_896, 128));
        assert_eq!(cost.vector_flops, 512 + 128);
        assert_eq!(cost.compute_precision, Some(Precision::Fp16));
        assert_eq!(cost.bytes, traffic(4_096, 1_024, 512));
    }

    #[test]
    fn fake_quant_and_inconsistent_inputs() {
        let x = f32s(&[1, 3, 8, 8]);
        let (s, zp) = (scalar(DType::F32, 0.1), scalar(DType::U8, 128.0));
        let (_, cost) = Op::fused("FakeQuant").run(&[&x, &s, &zp]);
        // Quantize 3 + dequantize 2 per element.
        assert_eq!(cost.flops, 5 * 192);
        assert_eq!(cost.bytes, traffic(5, 768, 768));
        // A QConv bias of the wrong length is an inconsistent conv.
        let mut inputs = qconv_inputs();
        inputs[2] = Some(w32(&[16]));
        Op::fused("QConv")
            .ints("pads", &[1, 1, 1, 1])
            .invalid_opt(&refs(&inputs));
    }
}
