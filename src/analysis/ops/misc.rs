//! Ops with their own structure: recurrent layers LSTM / GRU / RNN (opsets 7-22, both layouts),
//! RoiAlign, and the ops the tool deliberately does not cost: control flow with subgraphs
//! (If, Loop, Scan) and data-dependent detection post-processing (NonMaxSuppression).
//!
//! LSTM/GRU/RNN with G gates (4, 3, 1), hidden size H, input size I, D directions:
//!   MACs = seq · batch · D · G·H · (I + H)   (input and recurrent projections per step)
//!   FLOPs = 2·MACs + seq · batch · D · H · e, e = 8 (LSTM), 6 (GRU), 2 (RNN) for bias adds and
//!   gate arithmetic; transcendental = seq · batch · D · H · t, t = 5 (LSTM: 3σ + 2 tanh),
//!   3 (GRU), 1 (RNN).
//! RoiAlign: per output element sampling_ratio² samples (2×2 when adaptive), each a bilinear
//! interpolation of 4 taps (8 FLOPs), plus one average.

use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

struct Recurrent;
struct RoiAlign;
struct NotCosted;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "LSTM" | "GRU" | "RNN" => &Recurrent,
        "RoiAlign" => &RoiAlign,
        "If" | "Loop" | "Scan" | "NonMaxSuppression" => &NotCosted,
        _ => return None,
    })
}

fn gates(op_type: &str) -> (u64, u64, u64) {
    match op_type {
        "LSTM" => (4, 8, 5),
        "GRU" => (3, 6, 3),
        _ => (1, 2, 1),
    }
}

impl OpDef for Recurrent {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let xs = ctx.input_shape(0)?;
        let w = ctx.input_shape(1)?;
        if xs.len() != 3 || w.len() != 3 {
            return Err("X and W must be 3-D".into());
        }
        let batch_first = ctx.attrs().int_or("layout", 0) != 0;
        let (seq, batch) = if batch_first {
            (xs[1].clone(), xs[0].clone())
        } else {
            (xs[0].clone(), xs[1].clone())
        };
        let dirs = w[0].clone();
        let hidden = match ctx.attrs().int("hidden_size") {
            Some(h) => Dim::Known(h.max(0) as u64),
            None => {
                let (g, _, _) = gates(ctx.node.op_type);
                Dim::Known(w[1].known().ok_or("W dim 1 unknown")? / g)
            }
        };
        let y = if batch_first {
            vec![batch.clone(), seq, dirs.clone(), hidden.clone()]
        } else {
            vec![seq, dirs.clone(), batch.clone(), hidden.clone()]
        };
        let state = if batch_first {
            vec![batch, dirs, hidden]
        } else {
            vec![dirs, batch, hidden]
        };
        let mut outputs = vec![TensorFact::new(x.dtype, y)];
        for _ in 1..ctx.output_count {
            outputs.push(TensorFact::new(x.dtype, state.clone()));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let w = ctx.input_dims(1)?;
        let batch_first = ctx.attrs().int_or("layout", 0) != 0;
        let (seq, batch) = if batch_first {
            (x[1], x[0])
        } else {
            (x[0], x[1])
        };
        let (g, elementwise, transcendental) = gates(ctx.node.op_type);
        let dirs = w[0];
        let hidden = w[1] / g;
        let input = w[2];
        let steps = seq * batch * dirs;
        let macs = steps * g * hidden * (input + hidden);
        Ok(OpCost {
            flops: 2 * macs + steps * hidden * elementwise,
            macs,
            transcendental: steps * hidden * transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for RoiAlign {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        let rois = ctx.input_shape(1)?;
        let oh = ctx.attrs().int_or("output_height", 1).max(1) as u64;
        let ow = ctx.attrs().int_or("output_width", 1).max(1) as u64;
        Ok(vec![TensorFact::new(
            ctx.input(0)?.dtype,
            vec![
                rois[0].clone(),
                x[1].clone(),
                Dim::Known(oh),
                Dim::Known(ow),
            ],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let ratio = ctx.attrs().int_or("sampling_ratio", 0);
        let samples = if ratio > 0 { (ratio * ratio) as u64 } else { 4 };
        let outputs = ctx.output_elements(0)?;
        let mut cost = OpCost {
            flops: outputs * (samples * 8 + 1),
            ..OpCost::default()
        };
        // Each sample reads 4 input values; bound by the input size.
        let x_bytes = ctx.bytes_of(ctx.input(0)?)?;
        let sample_bytes = outputs * samples * 4 * ctx.element_bytes(ctx.input(0)?.dtype);
        cost.bytes.act_read = x_bytes.min(sample_bytes) + ctx.bytes_of(ctx.input(1)?)?;
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

impl OpDef for NotCosted {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        if ctx.node.op_type == "NonMaxSuppression" {
            return Ok(vec![TensorFact::new(
                DType::I64,
                vec![
                    Dim::Sym(format!("{}_selected", ctx.node.name)),
                    Dim::Known(3),
                ],
            )]);
        }
        Err(format!(
            "{} runs subgraphs; its output shapes come from the model's value_info if present",
            ctx.node.op_type
        ))
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Err(match ctx.node.op_type {
            "NonMaxSuppression" => "its work depends on the data (number of boxes kept)".into(),
            other => format!("{other} executes subgraphs, which the tool does not cost"),
        })
    }
}
