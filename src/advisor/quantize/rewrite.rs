//! Rewriting: the `int8` and `bf16`/`fp16` passes, which cost every candidate, convert those
//! predicted to gain (per-channel int8 or half-width weights, calibrated activation ranges) and
//! return every decision for the driver to put in the quantization report.

use super::calibrate::{affine_params, calibrate};
use super::cost::{
    candidate, decide, estimate_candidate, is_heavy, lowp_node, roofs, Candidate, Costed,
};

use super::report::{decision, fmt_s};
use super::QuantDecision;
use crate::advisor::{AdvisorError, Change, Pass, PassContext, PassOutput};
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Attr, ValueId};
use crate::analysis::infer::NodeState;
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};
use crate::device::Precision;
use crate::exec;

/// Per-channel symmetric int8: values and one scale per channel. `channel_of(i)` maps a flat
/// index to its channel.
fn quantize_weights(
    w: &[f32],
    channels: usize,
    channel_of: impl Fn(usize) -> usize,
) -> (Vec<i64>, Vec<f32>) {
    let mut max = vec![0f32; channels];
    for (i, &v) in w.iter().enumerate() {
        let c = channel_of(i);
        max[c] = max[c].max(v.abs());
    }
    let scales: Vec<f32> = max
        .iter()
        .map(|&m| if m > 0.0 { m / 127.0 } else { 1.0 })
        .collect();
    let q = w
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            (v / scales[channel_of(i)])
                .round_ties_even()
                .clamp(-127.0, 127.0) as i64
        })
        .collect();
    (q, scales)
}

fn int_const(
    ed: &mut Editor,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    values: Vec<i64>,
) -> ValueId {
    let tensor = Tensor {
        dtype,
        shape,
        data: TensorData::I64(values),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn half_const(
    ed: &mut Editor,
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    values: Vec<f32>,
) -> ValueId {
    let tensor = Tensor {
        dtype,
        shape,
        data: TensorData::F32(values),
    };
    ed.graph.add_value(name, TensorFact::constant(tensor))
}

fn live_candidates(ed: &Editor, states: &[NodeState]) -> Vec<usize> {
    (0..ed.len())
        .filter(|&i| !ed.is_removed(i))
        .filter(|&i| !matches!(states.get(i), Some(NodeState::Folded)))
        .filter(|&i| is_heavy(ed.node(i)).is_some())
        .collect()
}

/// `int8`: static INT8 with calibrated activations.
pub struct Int8;

impl Pass for Int8 {
    fn name(&self) -> &'static str {
        "int8"
    }

    fn description(&self) -> &'static str {
        "static INT8 Conv/Gemm/MatMul: per-channel symmetric weights, calibrated per-tensor u8 activations, VNNI kernels; ops the roofline predicts no gain for stay fp32"
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn run(
        &self,
        ed: &mut Editor,
        states: &[NodeState],
        ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let overhead = ctx.device.launch_overhead_s;
        let (_, _, has_peak) = roofs(ctx.device, ctx.analyze, Precision::Int8)?;
        let mut decisions = Vec::new();
        let mut chosen: Vec<(Candidate, Costed)> = Vec::new();
        for i in live_candidates(ed, states) {
            let verdict = Verdict {
                tag: "int8",
                precision: Precision::Int8,
                has_peak,
                overhead,
            };
            chosen.extend(verdict.judge(ed, i, ctx, &mut decisions));
        }
        if chosen.is_empty() {
            return Ok(PassOutput {
                decisions,
                ..PassOutput::default()
            });
        }
        let observed: Vec<ValueId> = chosen
            .iter()
            .filter_map(|(c, _)| ed.node(c.index).inputs[0])
            .collect();
        let mut stats = calibrate(ed.graph, &observed, ctx)?;
        let method = ctx.options.calibration_method;
        let mut changes = Vec::new();
        for (c, costed) in chosen {
            let node = ed.node(c.index).clone();
            let Some(x) = node.inputs[0] else { continue };
            let (lo, hi) = stats.get_mut(&x).map_or((-1.0, 1.0), |s| s.range(method));
            let (x_scale, x_zp) = affine_params(lo, hi);
            let per_channel = if c.base == "Conv" {
                c.weights.len() / c.channels.max(1)
            } else {
                1
            };
            let channels = c.channels;
            let (wq, mut w_scale) = if c.base == "Conv" {
                quantize_weights(&c.weights, channels, |i| i / per_channel)
            } else {
                quantize_weights(&c.weights, channels, |i| i % channels)
            };
            if c.alpha != 1.0 {
                w_scale.iter_mut().for_each(|s| *s *= c.alpha);
            }
            let name = node.name.clone();
            let w_id = int_const(
                ed,
                format!("{name}_int8_w"),
                DType::I8,
                c.w_shape.clone(),
                wq,
            );
            let ws_id = ed.add_const(
                format!("{name}_int8_wscale"),
                vec![channels as u64],
                w_scale,
            );
            let xs_id = ed.add_const(format!("{name}_int8_xscale"), vec![], vec![x_scale]);
            let xz_id = int_const(
                ed,
                format!("{name}_int8_xzp"),
                DType::U8,
                vec![],
                vec![x_zp as i64],
            );
            let b_id = c
                .bias
                .clone()
                .map(|b| ed.add_const(format!("{name}_int8_bias"), vec![b.len() as u64], b));
            let residual = if c.base == "Conv" {
                node.inputs.get(3).copied().flatten()
            } else {
                None
            };
            let op_type = if c.base == "Conv" { "QConv" } else { "QMatMul" };
            let mut q = lowp_node(&node, op_type);
            q.inputs = vec![
                Some(x),
                Some(w_id),
                b_id,
                residual,
                Some(ws_id),
                Some(xs_id),
                Some(xz_id),
            ];
            ed.replace(c.index, q);
            changes.push(Change::new(
                &[&node],
                &format!(
                    "int8 ({} channels, x scale {x_scale:.3e} zero point {x_zp}): predicted {} -> {} ({:.2}x)",
                    channels,
                    fmt_s(costed.fp32.predicted_s),
                    fmt_s(costed.lowp.predicted_s),
                    costed.fp32.predicted_s / costed.lowp.predicted_s.max(1e-15)
                ),
            ));
        }
        Ok(PassOutput {
            changes,
            decisions,
            notes: Vec::new(),
        })
    }
}

/// `bf16` / `fp16`: weights stored at half width, products at the half-precision peak.
pub struct Half {
    precision: Precision,
}

impl Half {
    pub fn bf16() -> Half {
        Half {
            precision: Precision::Bf16,
        }
    }

    pub fn fp16() -> Half {
        Half {
            precision: Precision::Fp16,
        }
    }

    fn tag(&self) -> &'static str {
        if self.precision == Precision::Bf16 {
            "bf16"
        } else {
            "fp16"
        }
    }
}

/// Whether this build runs fp16 products natively (it has no fp16 kernel: fp16 ops execute as
/// fp32 on fp16-rounded operands, so their speed is predicted, not measured).
pub const FP16_KERNEL: bool = false;

impl Pass for Half {
    fn name(&self) -> &'static str {
        self.tag()
    }

    fn description(&self) -> &'static str {
        if self.precision == Precision::Bf16 {
            "BF16 Conv/Gemm/MatMul: weights stored as bf16, products on vdpbf16ps with f32 accumulation"
        } else {
            "FP16 Conv/Gemm/MatMul: weights stored as fp16 (predicted only: no fp16 kernel here, executed as fp32 on fp16-rounded values)"
        }
    }

    fn default_enabled(&self) -> bool {
        false
    }

    fn measured(&self) -> bool {
        self.precision == Precision::Bf16 || FP16_KERNEL
    }

    fn run(
        &self,
        ed: &mut Editor,
        states: &[NodeState],
        ctx: &PassContext,
    ) -> Result<PassOutput, AdvisorError> {
        let tag = self.tag();
        let overhead = ctx.device.launch_overhead_s;
        let (_, _, has_peak) = roofs(ctx.device, ctx.analyze, self.precision)?;
        let (mut decisions, mut notes) = (Vec::new(), Vec::new());
        if self.precision == Precision::Fp16 {
            notes.push(
                "fp16: no fp16 kernel in this tool (the CPU has no AVX-512 FP16); its gain is predicted only and the graph runs as fp32 on fp16-rounded values".into(),
            );
        }
        if !has_peak {
            notes.push(format!(
                "{tag}: device `{}` has no {tag} compute ceiling; predictions use its {} peak (storage shrinks, arithmetic does not speed up)",
                ctx.device.id, ctx.analyze.precision
            ));
        }
        let dtype = if self.precision == Precision::Bf16 {
            DType::Bf16
        } else {
            DType::F16
        };
        let mut changes = Vec::new();
        for i in live_candidates(ed, states) {
            let node = ed.node(i).clone();
            let verdict = Verdict {
                tag,
                precision: self.precision,
                has_peak,
                overhead,
            };
            let Some((c, costed)) = verdict.judge(ed, i, ctx, &mut decisions) else {
                continue;
            };
            let round: fn(f32) -> f32 = if self.precision == Precision::Bf16 {
                exec::quant::round_bf16
            } else {
                exec::quant::round_f16
            };
            let values: Vec<f32> = c.weights.iter().map(|&v| round(v * c.alpha)).collect();
            let name = node.name.clone();
            let w_id = half_const(
                ed,
                format!("{name}_{tag}_w"),
                dtype,
                c.w_shape.clone(),
                values,
            );
            let b_id = c
                .bias
                .clone()
                .map(|b| ed.add_const(format!("{name}_{tag}_bias"), vec![b.len() as u64], b));
            let residual = if c.base == "Conv" {
                node.inputs.get(3).copied().flatten()
            } else {
                None
            };
            let op_type = if c.base == "Conv" {
                "HalfConv"
            } else {
                "HalfMatMul"
            };
            let mut h = lowp_node(&node, op_type);
            h.attrs.0.insert("dtype".into(), Attr::String(tag.into()));
            h.inputs = vec![node.inputs[0], Some(w_id), b_id, residual];
            ed.replace(i, h);
            changes.push(Change::new(
                &[&node],
                &format!(
                    "{tag}: predicted {} -> {} ({:.2}x)",
                    fmt_s(costed.fp32.predicted_s),
                    fmt_s(costed.lowp.predicted_s),
                    costed.fp32.predicted_s / costed.lowp.predicted_s.max(1e-15)
                ),
            ));
        }
        Ok(PassOutput {
            changes,
            decisions,
            notes,
        })
    }
}

/// How one pass judges its candidates: its tag in the report, the precision it lowers to, and
/// the device facts the decision needs.
struct Verdict<'a> {
    tag: &'a str,
    precision: Precision,
    has_peak: bool,
    overhead: f64,
}

impl Verdict<'_> {
    /// Judges candidate node `i`: records the decision (with its reason, whether or not the op
    /// qualifies) and returns the candidate with its costs when the roofline says convert.
    fn judge(
        &self,
        ed: &Editor,
        i: usize,
        ctx: &PassContext,
        decisions: &mut Vec<QuantDecision>,
    ) -> Option<(Candidate, Costed)> {
        let node = ed.node(i);
        let costed = candidate(ed, i).and_then(|c| {
            estimate_candidate(ed, &c, ctx.device, ctx.analyze, self.precision).map(|k| (c, k))
        });
        match costed {
            Err(reason) => {
                decisions.push(decision(node, self.tag, false, None, reason));
                None
            }
            Ok((c, costed)) => {
                let (convert, reason) = if ctx.options.convert_all {
                    (
                        true,
                        format!(
                            "{}: converted without consulting the roofline (baseline)",
                            self.tag
                        ),
                    )
                } else {
                    decide(&costed, self.tag, self.has_peak, self.overhead)
                };
                decisions.push(decision(node, self.tag, convert, Some(&costed), reason));
                convert.then_some((c, costed))
            }
        }
    }
}
