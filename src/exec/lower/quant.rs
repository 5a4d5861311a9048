//! Quantized ops: the lowering and run of `QConv`, `QMatMul`, `HalfConv`, `HalfMatMul`,
//! `FakeQuant` (domain `roofline`) and of standalone ONNX `QuantizeLinear` /
//! `DequantizeLinear`. The QDQ form that onnxruntime's quantizer writes is rewritten into these
//! ops before planning by a graph pass, `advisor::qdq::LowerQdq`. Unlike the other families,
//! the lowering here already packs the int8/bf16 weights for this CPU's ISA: the description
//! and its CPU preparation are not separated yet.

use std::sync::Arc;

use super::conv::conv_geometry;
use super::{activation_attr, Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::graph::Node;
use crate::analysis::ops::fused::quant::slot;
use crate::analysis::tensor::{DType, TensorFact};
use crate::exec::cpu::{input, InRef, Io};
use crate::exec::{ExecError, RtData, RtTensor};
use crate::kernels::conv::{self, Conv2d, ConvEpilogue};
use crate::kernels::gemm::{self, Activation, BiasKind, Epilogue, MatRef};
use crate::kernels::qgemm::{
    self, ActSrc, BConv2d, ChannelCoeffs, PackedBWeights, PackedQWeights, QConv2d, QIsa, QOut,
    Requant,
};

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Tool, "QConv" | "QMatMul" | "HalfConv" | "HalfMatMul" | "FakeQuant")
        | (Domain::Onnx, "QuantizeLinear" | "DequantizeLinear") => Lowering::integers(lower),
        _ => None,
    }
}

fn lower(cx: &Cx) -> Result<Lowered, ExecError> {
    let out_facts: Vec<&TensorFact> = cx
        .node
        .outputs
        .iter()
        .map(|&v| &cx.graph.values[v].fact)
        .collect();
    let konst = |i: usize| cx.const_f32(i);
    let (q, flops) = prepare(cx.node, cx.facts, &out_facts, &konst).map_err(|e| cx.error(e))?;
    Ok(Lowered::new(Kernel::Quant(Arc::new(q))).with_flops(flops))
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

/// A prepared quantized / half-precision / (de)quantize step.
pub(crate) struct QuantStep {
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
type ConstFn<'a> = dyn Fn(usize) -> Option<Arc<Vec<f32>>> + 'a;

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
fn prepare(
    node: &Node,
    facts: &[Option<&TensorFact>],
    out_facts: &[&TensorFact],
    konst: &ConstFn,
) -> Result<(QuantStep, u64), String> {
    let op = node.op_type.as_str();
    let attrs = &node.attrs;
    let out_shape = dims(out_facts.first().copied()).ok_or("output shape unknown")?;
    let activation = activation_attr(attrs)?;
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

impl QuantStep {
    /// Runs the step: f32 outputs into `outs`, integer outputs (QuantizeLinear) pushed to
    /// `dynamic_out`.
    pub(crate) fn run(&self, io: &mut Io) -> Result<(), String> {
        let (ins, threads) = (io.ins, io.threads);
        let (outs, dynamic_out) = (&mut *io.outs, &mut *io.dynamic_out);
        let x = |i: usize| input(ins, i).and_then(InRef::f32);
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
                    InRef::I64(v) => {
                        for (i, (o, &q)) in out.iter_mut().zip(v).enumerate() {
                            let (s, z) = a.at(i);
                            *o = (q - z) as f32 * s;
                        }
                    }
                    InRef::F32(v) => {
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
