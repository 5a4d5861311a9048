//! Quantized ops in the executor: the plan-time preparation and run of `QConv`, `QMatMul`,
//! `HalfConv`, `HalfMatMul`, `FakeQuant` (domain `roofline`) and of standalone ONNX
//! `QuantizeLinear` / `DequantizeLinear`; and [`lower_qdq`], which rewrites the standard QDQ
//! form (as onnxruntime's static quantizer and `roofline advise -o` write it) into those ops so
//! that any QDQ model runs on the int8 kernels.
//!
//! # What `lower_qdq` recognises
//! - `DequantizeLinear(x_q) → Conv | Gemm | MatMul` whose weights are
//!   `DequantizeLinear(constant int8, per-channel or per-tensor scale, zero point 0)` and whose
//!   bias (if any) is a float constant or `DequantizeLinear(constant int32)`: becomes `QConv` /
//!   `QMatMul`. When `x_q` comes from `QuantizeLinear(x)` with the same scale and zero point,
//!   the op reads `x` (f32) and quantizes it while packing; otherwise it reads the standalone
//!   DequantizeLinear's output and re-quantizes exactly. Int8 (s8) activations are shifted by
//!   128 onto the u8 grid, which represents the same values.
//! - An output `→ [Relu | Clip] → QuantizeLinear → DequantizeLinear` chain (every reader of the
//!   QuantizeLinear being a DequantizeLinear with the same parameters) is folded into the op:
//!   activation in the epilogue, output rounded to the grid (`y_scale`, `y_zero_point`).
//! - Depthwise convolutions and asymmetric (non-zero zero point) weights stay float: their
//!   weight DequantizeLinear is evaluated once into an f32 constant.
//! - Remaining `QuantizeLinear → DequantizeLinear` pairs with equal per-tensor parameters
//!   become `FakeQuant` (f32 → f32, the same numbers without an integer tensor in memory);
//!   remaining DequantizeLinear of constants are evaluated once. Any other QuantizeLinear /
//!   DequantizeLinear runs with its own kernel.

use std::sync::Arc;

use super::{RtData, RtTensor};
use crate::advisor::edit::Editor;
use crate::analysis::graph::{Attr, Graph, Node, ValueId};
use crate::analysis::ops::fused::quant::slot;
use crate::analysis::ops::fused::DOMAIN;
use crate::analysis::ops::spatial;
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::kernels::conv::{self, Conv2d, ConvEpilogue};
use crate::kernels::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use crate::kernels::qgemm::{
    self, ActSrc, BConv2d, ChannelCoeffs, PackedBWeights, PackedQWeights, QConv2d, QIsa, QOut,
    Requant,
};

/// Whether this module runs the op.
pub fn handles(domain: &str, op_type: &str) -> bool {
    if domain == DOMAIN {
        matches!(
            op_type,
            "QConv" | "QMatMul" | "HalfConv" | "HalfMatMul" | "FakeQuant"
        )
    } else {
        (domain.is_empty() || domain == "ai.onnx")
            && matches!(op_type, "QuantizeLinear" | "DequantizeLinear")
    }
}

/// An input of a quantized step at run time.
#[derive(Clone, Copy)]
pub enum QIn<'a> {
    F32(&'a [f32]),
    I64(&'a [i64]),
}

impl<'a> QIn<'a> {
    fn f32(self) -> Result<&'a [f32], String> {
        match self {
            QIn::F32(v) => Ok(v),
            QIn::I64(_) => Err("expected a float input".into()),
        }
    }
}

/// f32 → IEEE binary16 bits, round to nearest even (overflow to infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32;
    let man = b & 0x7F_FFFF;
    if exp == 0xFF {
        return sign | 0x7C00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7C00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the full mantissa (with the implicit bit), round to nearest even.
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut v = m >> shift;
        if rest > half || (rest == half && v & 1 == 1) {
            v += 1;
        }
        return sign | v as u16;
    }
    let mut v = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1FFF;
    if rest > 0x1000 || (rest == 0x1000 && v & 1 == 1) {
        v += 1;
    }
    sign | v as u16
}

/// Rounds to the nearest fp16 value (as f32).
pub fn round_f16(x: f32) -> f32 {
    crate::analysis::tensor::f16_to_f32(f32_to_f16(x))
}

/// Rounds to the nearest bf16 value (as f32).
pub fn round_bf16(x: f32) -> f32 {
    f32::from_bits((qgemm::f32_to_bf16(x) as u32) << 16)
}

/// The epilogue activation of a fused or quantized node.
pub fn activation_attr(attrs: &crate::analysis::graph::Attributes) -> Activation {
    let (a, b) = (
        attrs.float_or("act_alpha", 0.0),
        attrs.float_or("act_beta", 0.0),
    );
    match attrs.string("activation").unwrap_or("none") {
        "relu" => Activation::Relu,
        "clip" => Activation::Clip { min: a, max: b },
        "leaky_relu" => Activation::LeakyRelu { alpha: a },
        "hard_sigmoid" => Activation::HardSigmoid { alpha: a, beta: b },
        "hard_swish" => Activation::HardSwish,
        "sigmoid" => Activation::Sigmoid,
        "silu" => Activation::Silu,
        "gelu" => Activation::Gelu,
        "tanh" => Activation::Tanh,
        _ => Activation::None,
    }
}

/// Convolution geometry from a node's attributes and its input/output shapes.
pub fn conv_geometry(
    attrs: &crate::analysis::graph::Attributes,
    x: &[usize],
    w: &[usize],
    y: &[usize],
) -> Result<Conv2d, String> {
    if !(x.len() == 4 || x.len() == 3) || w.len() != x.len() || y.len() != x.len() {
        return Err("only 1-D and 2-D convolutions have kernels".into());
    }
    let kernel: Vec<u64> = w[2..].iter().map(|&d| d as u64).collect();
    let spatial_in: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let window = spatial::forward_window(attrs, &spatial_in, &kernel, false)?;
    let two_d = x.len() == 4;
    let count = spatial_in.len();
    Ok(Conv2d {
        batch: x[0],
        in_channels: x[1],
        in_h: if two_d { x[2] } else { 1 },
        in_w: *x.last().unwrap_or(&1),
        out_channels: y[1],
        kernel_h: if two_d { w[2] } else { 1 },
        kernel_w: *w.last().unwrap_or(&1),
        stride_h: if two_d { window.strides[0] as usize } else { 1 },
        stride_w: *window.strides.last().unwrap_or(&1) as usize,
        dilation_h: if two_d {
            window.dilations[0] as usize
        } else {
            1
        },
        dilation_w: *window.dilations.last().unwrap_or(&1) as usize,
        pad_top: if two_d { window.pads[0] as usize } else { 0 },
        pad_left: window.pads[count - 1] as usize,
        out_h: if two_d { y[2] } else { 1 },
        out_w: *y.last().unwrap_or(&1),
        group: attrs.int_or("group", 1).max(1) as usize,
    })
}

/// A prepared quantized / half-precision / (de)quantize step.
pub struct QuantStep {
    kind: Kind,
    /// Shape of output 0 (for the integer output of QuantizeLinear).
    out_shape: Vec<usize>,
}

impl std::fmt::Debug for QuantStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match &self.kind {
            Kind::Conv { .. } => "QConv",
            Kind::MatMul { .. } => "QMatMul",
            Kind::BConv { .. } => "HalfConv(bf16)",
            Kind::BMatMul { .. } => "HalfMatMul(bf16)",
            Kind::EmulatedConv { .. } => "HalfConv(fp16, emulated)",
            Kind::EmulatedMatMul { .. } => "HalfMatMul(fp16, emulated)",
            Kind::FakeQuant { .. } => "FakeQuant",
            Kind::Quantize(_) => "QuantizeLinear",
            Kind::Dequantize(_) => "DequantizeLinear",
        };
        write!(f, "QuantStep({name})")
    }
}

/// Per-axis (or per-tensor) affine parameters of a standalone QuantizeLinear/DequantizeLinear.
#[derive(Clone, Debug)]
struct Affine {
    scale: Vec<f32>,
    zero_point: Vec<i64>,
    /// Elements per step of the axis (product of the dims after it) and the axis length.
    inner: usize,
    axis_len: usize,
    lo: i64,
    hi: i64,
}

impl Affine {
    fn at(&self, i: usize) -> (f32, i64) {
        let c = if self.scale.len() == 1 {
            0
        } else {
            (i / self.inner) % self.axis_len
        };
        (
            self.scale[c],
            self.zero_point[if self.zero_point.len() == 1 { 0 } else { c }],
        )
    }
}

enum Kind {
    Conv {
        conv: QConv2d,
        activation: Activation,
        residual: bool,
        requant: Option<Requant>,
    },
    MatMul {
        weights: PackedQWeights,
        coeffs: ChannelCoeffs,
        m: usize,
        k: usize,
        inv_scale: f32,
        zero_point: i32,
        activation: Activation,
        requant: Option<Requant>,
    },
    BConv {
        conv: BConv2d,
        activation: Activation,
        residual: bool,
    },
    BMatMul {
        weights: PackedBWeights,
        bias: Option<Vec<f32>>,
        m: usize,
        activation: Activation,
    },
    /// fp16 has no kernel on this CPU: fp32 kernels on fp16-rounded operands (same numbers,
    /// fp32 speed).
    EmulatedConv {
        geom: Conv2d,
        weights: Vec<f32>,
        bias: Option<Vec<f32>>,
        activation: Activation,
        residual: bool,
    },
    EmulatedMatMul {
        weights: Vec<f32>,
        bias: Option<Vec<f32>>,
        m: usize,
        k: usize,
        n: usize,
        activation: Activation,
    },
    FakeQuant {
        scale: f32,
        zero_point: i32,
    },
    Quantize(Affine),
    Dequantize(Affine),
}

/// Constants of a node's inputs at plan time.
pub type ConstFn<'a> = dyn Fn(usize) -> Option<Arc<Vec<f32>>> + 'a;

fn dims(fact: Option<&TensorFact>) -> Option<Vec<usize>> {
    fact?
        .concrete_shape()
        .map(|d| d.iter().map(|&v| v as usize).collect())
}

fn scalar(konst: &ConstFn, i: usize, what: &str) -> Result<f32, String> {
    match konst(i) {
        Some(v) if v.len() == 1 => Ok(v[0]),
        Some(_) => Err(format!("{what} must be a single value")),
        None => Err(format!("{what} must be constant")),
    }
}

fn requant_of(konst: &ConstFn, node: &Node) -> Result<Option<Requant>, String> {
    match node.inputs.get(slot::Y_SCALE).copied().flatten() {
        None => Ok(None),
        Some(_) => Ok(Some(Requant {
            scale: scalar(konst, slot::Y_SCALE, "y_scale")?,
            zero_point: if node
                .inputs
                .get(slot::Y_ZERO_POINT)
                .copied()
                .flatten()
                .is_some()
            {
                scalar(konst, slot::Y_ZERO_POINT, "y_zero_point")? as i32
            } else {
                0
            },
        })),
    }
}

fn opt_const(
    konst: &ConstFn,
    node: &Node,
    i: usize,
    what: &str,
) -> Result<Option<Vec<f32>>, String> {
    match node.inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(_) => konst(i)
            .map(|v| Some(v.to_vec()))
            .ok_or_else(|| format!("{what} must be constant")),
    }
}

fn affine(
    node: &Node,
    facts: &[Option<&TensorFact>],
    konst: &ConstFn,
    int_dtype: DType,
) -> Result<Affine, String> {
    let shape = dims(facts.first().copied().flatten()).ok_or("input shape unknown")?;
    let scale = konst(1).ok_or("scale must be constant")?.to_vec();
    let zero_point: Vec<i64> = match node.inputs.get(2).copied().flatten() {
        Some(_) => konst(2)
            .ok_or("zero point must be constant")?
            .iter()
            .map(|&v| v as i64)
            .collect(),
        None => vec![0],
    };
    let rank = shape.len();
    let axis = node.attrs.int_or("axis", 1);
    let axis =
        if axis < 0 { axis + rank as i64 } else { axis }.clamp(0, rank.max(1) as i64 - 1) as usize;
    let (inner, axis_len) = if scale.len() > 1 && rank > 0 {
        (shape[axis + 1..].iter().product(), shape[axis])
    } else {
        (1, 1)
    };
    if scale.len() > 1 && scale.len() != axis_len {
        return Err(format!("{} scales for an axis of {axis_len}", scale.len()));
    }
    let (lo, hi) = match int_dtype {
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        _ => (0, 255),
    };
    Ok(Affine {
        scale,
        zero_point,
        inner,
        axis_len,
        lo,
        hi,
    })
}

/// Prepares a step at plan time. `konst(i)` gives input `i` when it is a constant. Returns the
/// step and its FLOPs (for GFLOP/s reports).
pub fn prepare(
    node: &Node,
    facts: &[Option<&TensorFact>],
    out_facts: &[&TensorFact],
    konst: &ConstFn,
) -> Result<(QuantStep, u64), String> {
    let op = node.op_type.as_str();
    let attrs = &node.attrs;
    let out_shape = dims(out_facts.first().copied()).ok_or("output shape unknown")?;
    let activation = activation_attr(attrs);
    let residual = node.inputs.get(slot::RESIDUAL).copied().flatten().is_some();
    let (kind, flops) = match op {
        "QConv" | "HalfConv" => {
            let x = dims(facts.first().copied().flatten()).ok_or("input shape unknown")?;
            let w = dims(facts.get(1).copied().flatten()).ok_or("weight shape unknown")?;
            let geom = conv_geometry(attrs, &x, &w, &out_shape)?;
            let weights = konst(slot::W).ok_or("weights must be constant")?;
            let bias = opt_const(konst, node, slot::BIAS, "bias")?;
            let flops = geom.flops();
            let kind = if op == "QConv" {
                let wq: Vec<i8> = weights.iter().map(|&v| v as i8).collect();
                let w_scale = konst(slot::W_SCALE).ok_or("w_scale must be constant")?;
                let conv = QConv2d::new(
                    geom,
                    &wq,
                    &w_scale,
                    bias.as_deref(),
                    scalar(konst, slot::X_SCALE, "x_scale")?,
                    scalar(konst, slot::X_ZERO_POINT, "x_zero_point")? as i32,
                );
                Kind::Conv {
                    conv,
                    activation,
                    residual,
                    requant: requant_of(konst, node)?,
                }
            } else if attrs.string("dtype") == Some("bf16") {
                let wb: Vec<u16> = weights.iter().map(|&v| qgemm::f32_to_bf16(v)).collect();
                Kind::BConv {
                    conv: BConv2d::new(geom, &wb, bias.as_deref()),
                    activation,
                    residual,
                }
            } else {
                Kind::EmulatedConv {
                    geom,
                    weights: weights.iter().map(|&v| round_f16(v)).collect(),
                    bias,
                    activation,
                    residual,
                }
            };
            (kind, flops)
        }
        "QMatMul" | "HalfMatMul" => {
            let x = dims(facts.first().copied().flatten()).ok_or("input shape unknown")?;
            let w = dims(facts.get(1).copied().flatten()).ok_or("weight shape unknown")?;
            if w.len() != 2 || x.is_empty() {
                return Err("the weights must be a 2-D [K, N] constant".into());
            }
            let (k, n) = (w[0], w[1]);
            if *x.last().unwrap_or(&0) != k {
                return Err("input and weights disagree on K".into());
            }
            let m: usize = x[..x.len() - 1].iter().product();
            let weights = konst(slot::W).ok_or("weights must be constant")?;
            let bias = opt_const(konst, node, slot::BIAS, "bias")?;
            let flops = 2 * (m * n * k) as u64;
            let kind = if op == "QMatMul" {
                let wq: Vec<i8> = weights.iter().map(|&v| v as i8).collect();
                let packed = PackedQWeights::for_dense(QIsa::detect(), &wq, k, n);
                let w_scale = konst(slot::W_SCALE).ok_or("w_scale must be constant")?;
                let x_scale = scalar(konst, slot::X_SCALE, "x_scale")?;
                let zero_point = scalar(konst, slot::X_ZERO_POINT, "x_zero_point")? as i32;
                let coeffs = ChannelCoeffs::new(
                    &w_scale,
                    packed.sums(),
                    x_scale,
                    zero_point,
                    bias.as_deref(),
                );
                Kind::MatMul {
                    weights: packed,
                    coeffs,
                    m,
                    k,
                    inv_scale: 1.0 / x_scale,
                    zero_point,
                    activation,
                    requant: requant_of(konst, node)?,
                }
            } else if attrs.string("dtype") == Some("bf16") {
                let wb: Vec<u16> = weights.iter().map(|&v| qgemm::f32_to_bf16(v)).collect();
                Kind::BMatMul {
                    weights: PackedBWeights::for_dense(qgemm::BIsa::detect(), &wb, k, n),
                    bias,
                    m,
                    activation,
                }
            } else {
                Kind::EmulatedMatMul {
                    weights: weights.iter().map(|&v| round_f16(v)).collect(),
                    bias,
                    m,
                    k,
                    n,
                    activation,
                }
            };
            (kind, flops)
        }
        "FakeQuant" => (
            Kind::FakeQuant {
                scale: scalar(konst, 1, "scale")?,
                zero_point: scalar(konst, 2, "zero point")? as i32,
            },
            5 * out_shape.iter().product::<usize>() as u64,
        ),
        "QuantizeLinear" => {
            let dtype = out_facts.first().map(|f| f.dtype).unwrap_or(DType::U8);
            (
                Kind::Quantize(affine(node, facts, konst, dtype)?),
                3 * out_shape.iter().product::<usize>() as u64,
            )
        }
        "DequantizeLinear" => {
            let dtype = facts
                .first()
                .copied()
                .flatten()
                .map_or(DType::U8, |f| f.dtype);
            (
                Kind::Dequantize(affine(node, facts, konst, dtype)?),
                2 * out_shape.iter().product::<usize>() as u64,
            )
        }
        other => return Err(format!("no quantized kernel for {other}")),
    };
    Ok((QuantStep { kind, out_shape }, flops))
}

fn input<'a>(ins: &[Option<QIn<'a>>], i: usize) -> Result<QIn<'a>, String> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("missing input #{i}"))
}

impl QuantStep {
    /// Runs the step: f32 outputs into `outs`, integer outputs (QuantizeLinear) pushed to
    /// `dynamic_out`.
    pub fn run(
        &self,
        ins: &[Option<QIn>],
        outs: &mut [&mut [f32]],
        dynamic_out: &mut Vec<RtTensor>,
        threads: usize,
    ) -> Result<(), String> {
        let x = |i: usize| input(ins, i).and_then(QIn::f32);
        match &self.kind {
            Kind::Conv {
                conv,
                activation,
                residual,
                requant,
            } => {
                let res = if *residual {
                    Some(x(slot::RESIDUAL)?)
                } else {
                    None
                };
                conv.run(x(0)?, res, *activation, *requant, outs[0], threads);
            }
            Kind::MatMul {
                weights,
                coeffs,
                m,
                k,
                inv_scale,
                zero_point,
                activation,
                requant,
            } => {
                let src = ActSrc::F32 {
                    data: x(0)?,
                    ld: *k,
                    inv_scale: *inv_scale,
                    zero_point: *zero_point,
                };
                let n = weights.channels();
                qgemm::qgemm_xw(
                    &src,
                    *m,
                    weights,
                    QOut::F32 {
                        data: outs[0],
                        requant: *requant,
                    },
                    n,
                    &coeffs.epilogue(None, *activation),
                    threads,
                );
            }
            Kind::BConv {
                conv,
                activation,
                residual,
            } => {
                let res = if *residual {
                    Some(x(slot::RESIDUAL)?)
                } else {
                    None
                };
                conv.run(x(0)?, res, *activation, outs[0], threads);
            }
            Kind::BMatMul {
                weights,
                bias,
                m,
                activation,
            } => {
                let k = weights.k();
                let n = weights.channels();
                let epi = qgemm::BEpilogue {
                    bias: bias.as_deref(),
                    residual: None,
                    activation: *activation,
                };
                qgemm::bgemm_xw(
                    &qgemm::BActSrc::F32 { data: x(0)?, ld: k },
                    *m,
                    weights,
                    outs[0],
                    n,
                    &epi,
                    threads,
                );
            }
            Kind::EmulatedConv {
                geom,
                weights,
                bias,
                activation,
                residual,
            } => {
                let rounded: Vec<f32> = x(0)?.iter().map(|&v| round_f16(v)).collect();
                let res = if *residual {
                    Some(x(slot::RESIDUAL)?)
                } else {
                    None
                };
                let mut scratch = vec![0.0; geom.scratch_len()];
                let ep = ConvEpilogue {
                    bias: bias.as_deref(),
                    residual: res,
                    activation: *activation,
                };
                conv::conv2d(geom, &rounded, weights, &ep, outs[0], &mut scratch, threads);
            }
            Kind::EmulatedMatMul {
                weights,
                bias,
                m,
                k,
                n,
                activation,
            } => {
                let rounded: Vec<f32> = x(0)?.iter().map(|&v| round_f16(v)).collect();
                let a = MatRef::row_major(&rounded, *m, *k);
                let b = MatRef::row_major(weights, *k, *n);
                let ep = Epilogue {
                    bias: bias.as_deref().map_or(BiasKind::None, BiasKind::PerCol),
                    residual: None,
                    activation: *activation,
                };
                gemm::sgemm(&a, &b, outs[0], *n, &ep, threads);
            }
            Kind::FakeQuant { scale, zero_point } => {
                qgemm::fake_quantize_copy(x(0)?, outs[0], *scale, *zero_point);
            }
            Kind::Quantize(a) => {
                let src = x(0)?;
                let values: Vec<i64> = src
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let (s, z) = a.at(i);
                        (((v / s).round_ties_even() as i64).saturating_add(z)).clamp(a.lo, a.hi)
                    })
                    .collect();
                dynamic_out.push(RtTensor {
                    shape: self.out_shape.clone(),
                    data: RtData::I64(values),
                });
            }
            Kind::Dequantize(a) => {
                let out = &mut *outs[0];
                match input(ins, 0)? {
                    QIn::I64(v) => {
                        for (i, (o, &q)) in out.iter_mut().zip(v).enumerate() {
                            let (s, z) = a.at(i);
                            *o = (q - z) as f32 * s;
                        }
                    }
                    QIn::F32(v) => {
                        for (i, (o, &q)) in out.iter_mut().zip(v).enumerate() {
                            let (s, z) = a.at(i);
                            *o = (q as i64 - z) as f32 * s;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// lower_qdq

/// What [`lower_qdq`] rewrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LowerReport {
    pub qconv: usize,
    pub qmatmul: usize,
    /// Ops whose inputs were quantized but that stay float (depthwise, asymmetric weights).
    pub float_fallback: usize,
    pub fake_quant: usize,
    pub folded_dequantize: usize,
}

impl LowerReport {
    pub fn is_empty(&self) -> bool {
        *self == LowerReport::default()
    }
}

/// Per-tensor parameters of a (De)QuantizeLinear: (scale, zero point, integer dtype).
fn per_tensor(ed: &Editor, node: &Node) -> Option<(f32, i64, DType)> {
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    if scale.len() != 1 {
        return None;
    }
    let (zp, dtype) = match node.inputs.get(2).copied().flatten() {
        Some(z) => {
            let v = ed.const_f32(Some(z))?;
            if v.len() != 1 {
                return None;
            }
            (v[0] as i64, ed.fact(z).dtype)
        }
        None => (0, DType::U8),
    };
    Some((scale[0], zp, dtype))
}

/// The zero point on the u8 grid (s8 data shifted by 128), if the dtype is 8-bit.
fn u8_zero_point(zp: i64, dtype: DType) -> Option<i32> {
    match dtype {
        DType::U8 => Some(zp as i32),
        DType::I8 => Some(zp as i32 + 128),
        _ => None,
    }
}

fn is_op(node: &Node, op: &str) -> bool {
    node.op_type == op && (node.domain.is_empty() || node.domain == "ai.onnx")
}

/// Evaluates DequantizeLinear of a constant (per tensor or per axis) into f32 values.
fn eval_dequantize(ed: &Editor, node: &Node) -> Option<(Vec<f32>, Vec<u64>)> {
    let x = node.inputs.first().copied().flatten()?;
    let fact = ed.fact(x);
    fact.konst.as_ref()?;
    let shape = fact.concrete_shape()?;
    let values = ed.const_f32(Some(x))?;
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    let zp = match node.inputs.get(2).copied().flatten() {
        Some(z) => ed.const_f32(Some(z))?,
        None => vec![0.0],
    };
    let rank = shape.len();
    let axis = node.attrs.int_or("axis", 1);
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    let (inner, axis_len) = if scale.len() > 1 {
        let a = usize::try_from(axis).ok().filter(|&a| a < rank)?;
        (
            shape[a + 1..].iter().product::<u64>() as usize,
            shape[a] as usize,
        )
    } else {
        (1, 1)
    };
    if scale.len() > 1 && scale.len() != axis_len {
        return None;
    }
    let out = values
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let c = if scale.len() == 1 {
                0
            } else {
                (i / inner) % axis_len
            };
            let z = zp[if zp.len() == 1 { 0 } else { c }];
            (q - z) * scale[c]
        })
        .collect();
    Some((out, shape))
}

/// Symmetric int8 weights of a weight DequantizeLinear: (values, scales, axis of the scales).
fn int8_weights(ed: &Editor, node: &Node) -> Option<(Vec<f32>, Vec<f32>, i64)> {
    let x = node.inputs.first().copied().flatten()?;
    let fact = ed.fact(x);
    if fact.dtype != DType::I8 || fact.konst.is_none() {
        return None;
    }
    let values = ed.const_f32(Some(x))?;
    let scale = ed.const_f32(node.inputs.get(1).copied().flatten())?;
    if let Some(z) = node.inputs.get(2).copied().flatten() {
        if ed.const_f32(Some(z))?.iter().any(|&v| v != 0.0) {
            return None;
        }
    }
    let rank = fact.rank()? as i64;
    let axis = node.attrs.int_or("axis", 1);
    Some((values, scale, if axis < 0 { axis + rank } else { axis }))
}

fn int8_const(ed: &mut Editor, name: String, shape: Vec<u64>, values: &[f32]) -> ValueId {
    let tensor = Tensor {
        dtype: DType::I8,
        shape,
        data: TensorData::I64(values.iter().map(|&v| v as i64).collect()),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn u8_scalar(ed: &mut Editor, name: String, value: i32) -> ValueId {
    let tensor = Tensor {
        dtype: DType::U8,
        shape: vec![],
        data: TensorData::I64(vec![value as i64]),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

/// The producer of `value` if it is a live node of type `op`.
fn producer_op(ed: &Editor, value: ValueId, op: &str) -> Option<usize> {
    ed.producer_of(value).filter(|&p| is_op(&ed.nodes[p], op))
}

/// An output chain `value → [Relu | Clip] → Q → DQ…` foldable into an epilogue.
struct OutputChain {
    activation: Option<usize>,
    quantize: usize,
    dequantize: Vec<usize>,
    /// Output grid: (scale, zero point on the u8 grid).
    grid: (f32, i32),
}

fn output_chain(ed: &Editor, value: ValueId) -> Option<OutputChain> {
    let mut v = value;
    let mut act = None;
    if let Some(a) = ed.sole_consumer(v) {
        if activation_node(ed, &ed.nodes[a]).is_some() {
            act = Some(a);
            v = ed.nodes[a].outputs[0];
        }
    }
    let q = ed
        .sole_consumer(v)
        .filter(|&q| is_op(&ed.nodes[q], "QuantizeLinear"))?;
    let (scale, zp, dtype) = per_tensor(ed, &ed.nodes[q])?;
    let zp = u8_zero_point(zp, dtype)?;
    let q_out = ed.nodes[q].outputs[0];
    if ed.is_graph_output(q_out) {
        return None;
    }
    let dqs = ed.consumers(q_out);
    if dqs.is_empty() {
        return None;
    }
    for &d in &dqs {
        let node = &ed.nodes[d];
        if !is_op(node, "DequantizeLinear") || node.inputs.first().copied().flatten() != Some(q_out)
        {
            return None;
        }
        let (s2, z2, t2) = per_tensor(ed, node)?;
        if s2 != scale || u8_zero_point(z2, t2) != Some(zp) {
            return None;
        }
    }
    Some(OutputChain {
        activation: act,
        quantize: q,
        dequantize: dqs,
        grid: (scale, zp),
    })
}

/// `QConv → Add(r)` with `r` an f32 tensor of the output's shape computed earlier: `r` becomes
/// the QConv's residual input (added in its epilogue).
fn absorb_residual(ed: &mut Editor, i: usize) {
    absorb_bias(ed, i);
    let node = &ed.nodes[i];
    if node.op_type != "QConv"
        || node.inputs.get(slot::RESIDUAL).copied().flatten().is_some()
        || node.attrs.string("activation").is_some_and(|s| s != "none")
        || node.inputs.get(slot::Y_SCALE).copied().flatten().is_some()
    {
        return;
    }
    let out = node.outputs[0];
    let Some(a) = ed.sole_consumer(out) else {
        return;
    };
    let add = ed.nodes[a].clone();
    if !is_op(&add, "Add") || add.inputs.len() != 2 {
        return;
    }
    let other = match (add.inputs[0], add.inputs[1]) {
        (Some(x), Some(y)) if x == out && y != out => y,
        (Some(x), Some(y)) if y == out && x != out => x,
        _ => return,
    };
    let same = ed.fact(other).concrete_shape().is_some()
        && ed.fact(other).concrete_shape() == ed.fact(out).concrete_shape();
    if !same || !ed.is_float(other) || ed.producer_of(other).is_some_and(|p| p > i) {
        return;
    }
    let q = &mut ed.nodes[i];
    q.inputs.resize(slot::X_ZERO_POINT + 1, None);
    q.inputs[slot::RESIDUAL] = Some(other);
    q.outputs = add.outputs.clone();
    ed.remove(a);
}

/// `QMatMul → Add(constant [N])` (MatMul + bias, the standard form of a dense layer): the
/// constant becomes the QMatMul's bias.
fn absorb_bias(ed: &mut Editor, i: usize) {
    let node = &ed.nodes[i];
    if node.op_type != "QMatMul" || node.inputs.get(slot::BIAS).copied().flatten().is_some() {
        return;
    }
    let out = node.outputs[0];
    let n = ed
        .fact(node.inputs[slot::W].unwrap_or_default())
        .concrete_shape()
        .and_then(|s| s.last().copied());
    let Some(a) = ed.sole_consumer(out) else {
        return;
    };
    let add = ed.nodes[a].clone();
    if !is_op(&add, "Add") || add.inputs.len() != 2 {
        return;
    }
    let other = match (add.inputs[0], add.inputs[1]) {
        (Some(x), Some(y)) if x == out => y,
        (Some(x), Some(y)) if y == out => x,
        _ => return,
    };
    let shape = ed.fact(other).concrete_shape();
    let per_col = ed.fact(other).konst.is_some()
        && ed.is_float(other)
        && n.is_some()
        && shape
            .as_ref()
            .is_some_and(|s| s.iter().product::<u64>() == n.unwrap_or(0) && s.last() == n.as_ref());
    if !per_col {
        return;
    }
    let q = &mut ed.nodes[i];
    q.inputs[slot::BIAS] = Some(other);
    q.outputs = add.outputs.clone();
    ed.remove(a);
}

/// A Relu, or a Clip with constant bounds (attributes before opset 11, inputs after): the
/// epilogue activation it is.
fn activation_node(ed: &Editor, node: &Node) -> Option<(&'static str, f32, f32)> {
    if is_op(node, "Relu") {
        return Some(("relu", 0.0, 0.0));
    }
    if !is_op(node, "Clip") {
        return None;
    }
    let bound = |i: usize, attr: &str, default: f32| -> Option<f32> {
        match node.inputs.get(i).copied().flatten() {
            Some(v) => ed.const_scalar(Some(v)),
            None => Some(node.attrs.float_or(attr, default)),
        }
    };
    Some((
        "clip",
        bound(1, "min", f32::NEG_INFINITY)?,
        bound(2, "max", f32::INFINITY)?,
    ))
}

/// Moves the Relu / Clip node `a` (sole reader of node `i`'s output) into `i`'s epilogue.
fn absorb_activation(ed: &mut Editor, i: usize, a: usize) {
    let an = ed.nodes[a].clone();
    if ed.nodes[i]
        .attrs
        .string("activation")
        .is_some_and(|s| s != "none")
    {
        return;
    }
    let Some((name, lo, hi)) = activation_node(ed, &an) else {
        return;
    };
    let q = &mut ed.nodes[i];
    q.attrs
        .0
        .insert("activation".into(), Attr::String(name.into()));
    q.attrs.0.insert("act_alpha".into(), Attr::Float(lo));
    q.attrs.0.insert("act_beta".into(), Attr::Float(hi));
    q.outputs = an.outputs.clone();
    ed.remove(a);
}

/// Rewrites the QDQ form into the int8 ops (see the module docs). Constants must be known
/// (initializers, or foldable); shapes need not be bound.
pub fn lower_qdq(graph: &mut Graph) -> LowerReport {
    let mut report = LowerReport::default();
    let has_qdq = graph
        .dag
        .node_weights()
        .any(|n| is_op(n, "DequantizeLinear"));
    if !has_qdq {
        return report;
    }
    // Constant facts for Constant nodes and folded values (best effort).
    let _ = crate::analysis::infer::infer_graph(graph);
    let mut ed = Editor::new(graph);
    let mut lowered = Vec::new();
    for i in 0..ed.nodes.len() {
        if ed.removed.contains(&i) {
            continue;
        }
        let node = ed.nodes[i].clone();
        let is_conv = is_op(&node, "Conv");
        let is_gemm = is_op(&node, "Gemm");
        let is_matmul = is_op(&node, "MatMul");
        if !(is_conv || is_gemm || is_matmul) {
            continue;
        }
        let (Some(x_in), Some(w_in)) = (
            node.inputs.first().copied().flatten(),
            node.inputs.get(1).copied().flatten(),
        ) else {
            continue;
        };
        let (Some(dx), Some(dw)) = (
            producer_op(&ed, x_in, "DequantizeLinear"),
            producer_op(&ed, w_in, "DequantizeLinear"),
        ) else {
            continue;
        };
        let Some((x_scale, x_zp, x_dtype)) = per_tensor(&ed, &ed.nodes[dx]) else {
            continue;
        };
        let Some(x_zp) = u8_zero_point(x_zp, x_dtype) else {
            continue;
        };
        let Some((w_vals, w_scale, w_axis)) = int8_weights(&ed, &ed.nodes[dw]) else {
            continue;
        };
        let Some(w_shape) = ed.fact(w_in).concrete_shape().or_else(|| {
            ed.nodes[dw]
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|v| ed.fact(v).concrete_shape())
        }) else {
            continue;
        };
        // Output-channel axis of the weights, and whether this op can run on the int8 kernels.
        let group = node.attrs.int_or("group", 1);
        let (channel_axis, supported) = if is_conv {
            let depthwise = group > 1 && w_shape.get(1) == Some(&1);
            (0, !depthwise)
        } else if is_gemm {
            let trans_b = node.attrs.int_or("transB", 0) != 0;
            let plain = node.attrs.int_or("transA", 0) == 0
                && node.attrs.float_or("alpha", 1.0) == 1.0
                && node.attrs.float_or("beta", 1.0) == 1.0;
            (if trans_b { 0 } else { 1 }, plain && w_shape.len() == 2)
        } else {
            (1, w_shape.len() == 2)
        };
        let per_channel_ok = w_scale.len() == 1
            || (w_axis == channel_axis && w_scale.len() as u64 == w_shape[channel_axis as usize]);
        // Bias: a float constant or DequantizeLinear of a constant.
        let bias_in = node.inputs.get(2).copied().flatten();
        let bias: Option<Vec<f32>> = match bias_in {
            None => None,
            Some(b) => match producer_op(&ed, b, "DequantizeLinear") {
                Some(db) => match eval_dequantize(&ed, &ed.nodes[db]) {
                    Some((v, _)) => Some(v),
                    None => continue,
                },
                None if ed.fact(b).konst.is_some() => match ed.const_f32(Some(b)) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => continue,
            },
        };
        if !supported || !per_channel_ok {
            continue;
        }
        // Weights in the layout of the int8 op: Conv [M, ...]; MatMul/Gemm [K, N].
        let (w_q, w_q_shape, channels) = if is_conv {
            (w_vals, w_shape.clone(), w_shape[0] as usize)
        } else if is_gemm && channel_axis == 0 {
            let (n, k) = (w_shape[0] as usize, w_shape[1] as usize);
            let mut t = vec![0.0; n * k];
            for r in 0..n {
                for c in 0..k {
                    t[c * n + r] = w_vals[r * k + c];
                }
            }
            (t, vec![k as u64, n as u64], n)
        } else {
            (w_vals, w_shape.clone(), w_shape[1] as usize)
        };
        if let Some(b) = &bias {
            if b.len() != channels && b.len() != 1 {
                continue;
            }
        }
        // The activation source: Q's f32 input when DQ(Q(x)) with the same parameters.
        let dx_in = ed.nodes[dx].inputs[0];
        let x_source = match dx_in.and_then(|v| producer_op(&ed, v, "QuantizeLinear")) {
            Some(q) => match per_tensor(&ed, &ed.nodes[q]) {
                Some((s, z, t)) if s == x_scale && u8_zero_point(z, t) == Some(x_zp) => {
                    ed.nodes[q].inputs[0].unwrap_or(x_in)
                }
                _ => x_in,
            },
            None => x_in,
        };
        let name = node.name.clone();
        let w_id = int8_const(&mut ed, format!("{name}_wq"), w_q_shape, &w_q);
        let ws_id = ed.add_const(
            format!("{name}_wscale"),
            vec![w_scale.len() as u64],
            w_scale,
        );
        let xs_id = ed.add_const(format!("{name}_xscale"), vec![], vec![x_scale]);
        let xz_id = u8_scalar(&mut ed, format!("{name}_xzp"), x_zp);
        let b_id = bias.map(|b| {
            let len = b.len() as u64;
            ed.add_const(format!("{name}_bias"), vec![len], b)
        });
        let mut q = Node {
            name: name.clone(),
            op_type: if is_conv { "QConv" } else { "QMatMul" }.into(),
            domain: DOMAIN.into(),
            attrs: node.attrs.clone(),
            inputs: vec![
                Some(x_source),
                Some(w_id),
                b_id,
                None,
                Some(ws_id),
                Some(xs_id),
                Some(xz_id),
            ],
            outputs: node.outputs.clone(),
        };
        for key in ["transA", "transB", "alpha", "beta"] {
            q.attrs.0.remove(key);
        }
        ed.nodes[i] = q;
        lowered.push(i);
        if is_conv {
            report.qconv += 1;
        } else {
            report.qmatmul += 1;
        }
    }
    // Output side, once every op reads its producer's f32 value directly: a following
    // Relu/Clip joins the epilogue, and a Q → DQ pair that only float ops read becomes the
    // op's output grid.
    for &i in &lowered {
        absorb_residual(&mut ed, i);
        let out = ed.nodes[i].outputs[0];
        if let Some(OutputChain {
            activation: act,
            quantize: qn,
            dequantize: dqs,
            grid: (ys, yz),
        }) = output_chain(&ed, out)
        {
            if let Some(a) = act {
                absorb_activation(&mut ed, i, a);
            }
            let name = ed.nodes[i].name.clone();
            let ys_id = ed.add_const(format!("{name}_yscale"), vec![], vec![ys]);
            let yz_id = u8_scalar(&mut ed, format!("{name}_yzp"), yz);
            let target = ed.nodes[dqs[0]].outputs[0];
            for &d in &dqs[1..] {
                let other = ed.nodes[d].outputs[0];
                ed.rewire(other, target);
            }
            ed.remove(qn);
            for &d in &dqs {
                ed.remove(d);
            }
            let q = &mut ed.nodes[i];
            q.inputs.push(Some(ys_id));
            q.inputs.push(Some(yz_id));
            q.outputs = vec![target];
        } else if let Some(a) = ed.sole_consumer(out) {
            if activation_node(&ed, &ed.nodes[a]).is_some() {
                absorb_activation(&mut ed, i, a);
            }
        }
    }
    // Remaining Q → DQ pairs with equal parameters: FakeQuant.
    for i in 0..ed.nodes.len() {
        if ed.removed.contains(&i) || !is_op(&ed.nodes[i], "DequantizeLinear") {
            continue;
        }
        let dq = ed.nodes[i].clone();
        if ed.consumers(dq.outputs[0]).is_empty() && !ed.is_graph_output(dq.outputs[0]) {
            continue;
        }
        let Some(src) = dq.inputs.first().copied().flatten() else {
            continue;
        };
        let Some(qi) = producer_op(&ed, src, "QuantizeLinear") else {
            continue;
        };
        let (Some((s1, z1, t1)), Some((s2, z2, t2))) =
            (per_tensor(&ed, &ed.nodes[qi]), per_tensor(&ed, &dq))
        else {
            continue;
        };
        let (Some(z1), Some(z2)) = (u8_zero_point(z1, t1), u8_zero_point(z2, t2)) else {
            continue;
        };
        if s1 != s2 || z1 != z2 {
            continue;
        }
        let Some(x) = ed.nodes[qi].inputs.first().copied().flatten() else {
            continue;
        };
        let s_id = ed.add_const(format!("{}_fq_scale", dq.name), vec![], vec![s1]);
        let z_id = u8_scalar(&mut ed, format!("{}_fq_zp", dq.name), z1);
        ed.nodes[i] = Node {
            name: dq.name.clone(),
            op_type: "FakeQuant".into(),
            domain: DOMAIN.into(),
            attrs: Default::default(),
            inputs: vec![Some(x), Some(s_id), Some(z_id)],
            outputs: dq.outputs.clone(),
        };
        report.fake_quant += 1;
    }
    // DequantizeLinear of constants (float-fallback weights, biases): evaluated once.
    for i in 0..ed.nodes.len() {
        if ed.removed.contains(&i) || !is_op(&ed.nodes[i], "DequantizeLinear") {
            continue;
        }
        let dq = ed.nodes[i].clone();
        let out = dq.outputs[0];
        if ed.is_graph_output(out) || ed.consumers(out).is_empty() {
            continue;
        }
        let Some((values, shape)) = eval_dequantize(&ed, &dq) else {
            continue;
        };
        let consumers_quantized = ed
            .consumers(out)
            .iter()
            .all(|&c| matches!(ed.nodes[c].op_type.as_str(), "Conv" | "Gemm" | "MatMul"));
        let id = ed.add_const(format!("{}_value", dq.name), shape, values);
        ed.rewire(out, id);
        ed.remove(i);
        report.folded_dequantize += 1;
        if consumers_quantized {
            report.float_fallback += 1;
        }
    }
    // Q / DQ nodes nobody reads any more.
    loop {
        let dead: Vec<usize> = (0..ed.nodes.len())
            .filter(|i| !ed.removed.contains(i))
            .filter(|&i| {
                is_op(&ed.nodes[i], "QuantizeLinear") || is_op(&ed.nodes[i], "DequantizeLinear")
            })
            .filter(|&i| {
                ed.nodes[i]
                    .outputs
                    .iter()
                    .all(|&v| ed.consumers(v).is_empty() && !ed.is_graph_output(v))
            })
            .collect();
        if dead.is_empty() {
            break;
        }
        for i in dead {
            ed.remove(i);
        }
    }
    ed.finish();
    report
}
