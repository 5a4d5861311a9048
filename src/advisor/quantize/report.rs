//! Report building: one `QuantDecision` per candidate (predictions, bounds, reason), which the
//! passes return to the driver, and the closing notes of the quantization section.

use super::cost::Costed;
use crate::analysis::graph::Node;
use crate::analysis::roofline::Estimate;
use crate::report::model::quant::{QuantDecision, QuantizationReport};

pub(super) fn fmt_s(s: f64) -> String {
    crate::report::units::fmt_seconds(s)
}

pub(super) fn fmt_b(b: u64) -> String {
    crate::report::units::fmt_bytes(b as f64)
}

pub(super) fn decision(
    node: &Node,
    pass: &str,
    converted: bool,
    costed: Option<&Costed>,
    reason: String,
) -> QuantDecision {
    let (fp32, lowp, ideal) = match costed {
        Some(c) => (c.fp32, c.lowp, c.ideal),
        None => (Estimate::NONE, Estimate::NONE, Estimate::NONE),
    };
    QuantDecision {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        pass: pass.into(),
        decision: if converted {
            pass.into()
        } else {
            "fp32".into()
        },
        predicted_fp32_s: fp32.predicted_s,
        predicted_lowp_s: lowp.predicted_s,
        predicted_qdq_s: (lowp.predicted_s - ideal.predicted_s).max(0.0),
        predicted_dynamic_s: costed.and_then(|c| c.dynamic),
        predicted_gain: if lowp.predicted_s > 0.0 {
            fp32.predicted_s / lowp.predicted_s
        } else {
            1.0
        },
        bound_fp32: fp32.bound,
        bound_lowp: lowp.bound,
        reason,
    }
}

/// The closing notes of the quantization section (dynamic quantization, what was left float).
pub fn summary_notes(report: &QuantizationReport) -> Vec<String> {
    let mut notes = Vec::new();
    let int8: Vec<&QuantDecision> = report
        .decisions
        .iter()
        .filter(|d| d.pass == "int8")
        .collect();
    if !int8.is_empty() {
        let converted: Vec<&&QuantDecision> =
            int8.iter().filter(|d| d.decision == "int8").collect();
        let fp32: f64 = int8.iter().map(|d| d.predicted_fp32_s).sum();
        let static_s: f64 = int8
            .iter()
            .map(|d| {
                if d.decision == "int8" {
                    d.predicted_lowp_s
                } else {
                    d.predicted_fp32_s
                }
            })
            .sum();
        let dynamic: f64 = int8
            .iter()
            .map(|d| d.predicted_dynamic_s.unwrap_or(d.predicted_fp32_s))
            .sum();
        notes.push(format!(
            "int8: {} of {} Conv/Gemm/MatMul converted; these ops predicted {} fp32 -> {} static int8 ({:.2}x); dynamic (per-inference) int8 would be {} ({:.2}x of fp32): a min/max pass over every f32 input, i32 outputs written and re-read by Cast/Mul/Add, and four extra ops per conv (onnxruntime's ConvInteger is also far from the int8 peak: 7-13x slower than fp32 measured on this machine)",
            converted.len(),
            int8.len(),
            fmt_s(fp32),
            fmt_s(static_s),
            fp32 / static_s.max(1e-15),
            fmt_s(dynamic),
            dynamic / fp32.max(1e-15)
        ));
        let qdq: f64 = converted.iter().map(|d| d.predicted_qdq_s).sum();
        if !converted.is_empty() {
            notes.push(format!(
                "int8: the f32 boundaries (quantize while packing, dequantize in the epilogue) cost {} of the converted ops' {}",
                fmt_s(qdq),
                fmt_s(converted.iter().map(|d| d.predicted_lowp_s).sum())
            ));
        }
    }
    notes
}
