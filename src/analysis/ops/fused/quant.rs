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
use super::{activation_cost, inner_ctx};
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
    let (flops, transcendental) = activation_cost(ctx.attrs().string("activation").unwrap_or(""));
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
        let op = super::super::lookup("", "Conv").ok_or("internal: Conv missing")?;
        op.infer(&inner_ctx(ctx, "Conv", 3)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        quantized_cost(ctx, "Conv")
    }
}

impl OpDef for QMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let op = super::super::lookup("", "MatMul").ok_or("internal: MatMul missing")?;
        op.infer(&inner_ctx(ctx, "MatMul", 2)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        quantized_cost(ctx, "MatMul")
    }
}

impl OpDef for HalfConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let op = super::super::lookup("", "Conv").ok_or("internal: Conv missing")?;
        op.infer(&inner_ctx(ctx, "Conv", 3)).map(float_output)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        half_cost(ctx, "Conv")
    }
}

impl OpDef for HalfMatMul {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
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
