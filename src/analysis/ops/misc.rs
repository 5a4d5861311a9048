//! Ops with their own structure: recurrent layers LSTM / GRU / RNN (opsets 7-22, both layouts),
//! RoiAlign, NonMaxSuppression (control flow is in `control.rs`).
//!
//! LSTM/GRU/RNN with G gates (4, 3, 1), hidden size H, input size I, D directions:
//!   MACs = seq · batch · D · G·H · (I + H)   (input and recurrent projections per step)
//!   FLOPs = 2·MACs + seq · batch · D · H · e, e = 8 (LSTM), 6 (GRU), 2 (RNN) for bias adds and
//!   gate arithmetic; transcendental = seq · batch · D · H · t, t = 5 (LSTM: 3σ + 2 tanh),
//!   3 (GRU), 1 (RNN).
//! RoiAlign: per output element sampling_ratio² samples (2×2 when adaptive), each a bilinear
//! interpolation of 4 taps (8 FLOPs), plus one average.
//! EyeLike (9+): a 2-D identity-like tensor of the input's shape; bytes: the output written.
//! NegativeLogLikelihoodLoss (13+): one gathered log-probability per target element, negated
//! and weighted (2 FLOPs), plus one add per element for a sum or mean reduction.
//! SoftmaxCrossEntropyLoss (13+): a log-softmax over the class axis of the scores (4 FLOPs and
//! 1 exp per score, 1 log per row), then the NLL loss above.
//! NonMaxSuppression (10+): boxes [B, N, 4], scores [B, C, N], output [S, 3] with S the boxes
//! kept, known only from the data (a symbol, unless a run on given values supplied it). Costed
//! only when S is known: per (batch, class) a score test per box and a sort (N·⌈log2 N⌉
//! comparisons), then every kept box tested against every candidate of its class (S·N
//! intersection-over-union tests of 15 FLOPs each: an upper estimate, since candidates drop
//! out as the loop goes).

use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

struct Recurrent;
struct RoiAlign;
struct NonMaxSuppression;
struct Loss;
struct EyeLike;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "LSTM" | "GRU" | "RNN" => &Recurrent,
        "RoiAlign" => &RoiAlign,
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => &Loss,
        "EyeLike" => &EyeLike,
        "NonMaxSuppression" => &NonMaxSuppression,
        _ => return None,
    })
}

/// The recurrent layers' definition, for onnxruntime's DynamicQuantizeLSTM (domain
/// com.microsoft: its `quantize_dynamic` output).
pub(super) fn recurrent() -> &'static dyn OpDef {
    &Recurrent
}

/// `(gates, element-wise ops, transcendentals)` per hidden unit and step.
fn gates(op_type: &str) -> (u64, u64, u64) {
    match op_type {
        "LSTM" | "DynamicQuantizeLSTM" => (4, 8, 5),
        "GRU" => (3, 6, 3),
        _ => (1, 2, 1),
    }
}

/// `(directions, gate rows, input size)` of W: `[D, gates·hidden, input]`, or for
/// DynamicQuantizeLSTM its transposed `[D, input, 4·hidden]`.
fn weight_geometry<T: Clone>(op_type: &str, w: &[T]) -> (T, T, T) {
    if op_type == "DynamicQuantizeLSTM" {
        (w[0].clone(), w[2].clone(), w[1].clone())
    } else {
        (w[0].clone(), w[1].clone(), w[2].clone())
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
        let (dirs, gate_rows, _) = weight_geometry(ctx.node.op_type, w);
        let hidden = match ctx.attrs().int("hidden_size") {
            Some(h) => Dim::Known(h.max(0) as u64),
            None => {
                let (g, _, _) = gates(ctx.node.op_type);
                Dim::Known(gate_rows.known().ok_or("W's gate dim is unknown")? / g)
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
        let (dirs, gate_rows, input) = weight_geometry(ctx.node.op_type, &w);
        let hidden = gate_rows / g;
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

impl OpDef for EyeLike {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() != 2 {
            return Err(super::invalid("EyeLike needs a 2-D input"));
        }
        let dtype = match ctx.attrs().int("dtype") {
            Some(code) => DType::from_onnx(code as i32)
                .ok_or_else(|| super::invalid(format!("unknown dtype {code}")))?,
            None => x.dtype,
        };
        Ok(vec![TensorFact::new(dtype, shape.to_vec())])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let mut cost = OpCost::default();
        cost.bytes.act_written = ctx.bytes_of(ctx.outputs[0])?;
        Ok(cost)
    }
}

impl OpDef for Loss {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let scores = ctx.input(0)?;
        let scores_shape = ctx.input_shape(0)?;
        let target = ctx.input_shape(1)?;
        if scores_shape.len() < 2 || target.len() + 1 != scores_shape.len() {
            return Err(super::invalid(
                "the scores must be [N, C, d...] and the target [N, d...]",
            ));
        }
        let loss_shape = match ctx.attrs().string("reduction").unwrap_or("mean") {
            "none" => target.to_vec(),
            "sum" | "mean" => Vec::new(),
            other => return Err(super::invalid(format!("unknown reduction `{other}`"))),
        };
        let mut outputs = vec![TensorFact::new(scores.dtype, loss_shape)];
        if ctx.output_count > 1 {
            outputs.push(TensorFact::new(scores.dtype, scores_shape.to_vec()));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let scores = ctx.input_dims(0)?;
        let score_count: u64 = scores.iter().product();
        let targets = score_count / scores.get(1).copied().unwrap_or(1).max(1);
        let (mut flops, mut transcendental) = (3 * targets, 0);
        if ctx.node.op_type == "SoftmaxCrossEntropyLoss" {
            flops += 4 * score_count;
            transcendental += score_count + targets;
        }
        Ok(OpCost {
            flops,
            transcendental,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for NonMaxSuppression {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        Ok(vec![TensorFact::new(
            DType::I64,
            vec![
                Dim::Sym(format!("{}_selected", ctx.node.name)),
                Dim::Known(3),
            ],
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let kept = ctx
            .output_dims(0)
            .map_err(|_| "its work depends on the data (number of boxes kept)".to_string())?[0];
        let scores = ctx.input_dims(1)?;
        if scores.len() != 3 {
            return Err("scores must be [batch, classes, boxes]".into());
        }
        let boxes = scores[2];
        let lists = scores[0] * scores[1];
        let sort = lists * boxes * (64 - boxes.max(1).leading_zeros() as u64);
        Ok(OpCost {
            flops: lists * boxes + sort + 15 * kept * boxes,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed recurrent layers, RoiAlign, and the ops the tool does not cost.

    use super::super::tests::kit::{act, dims, f32s, traffic, w32, weight, Op};
    use crate::analysis::tensor::{DType, Dim};

    #[test]
    fn lstm() {
        // seq 10, batch 2, input 32, hidden 16, one direction: W [1, 4·16, 32], R [1, 64, 16],
        // B [1, 8·16].
        let (x, w, r, b) = (
            f32s(&[10, 2, 32]),
            w32(&[1, 64, 32]),
            w32(&[1, 64, 16]),
            w32(&[1, 128]),
        );
        let op = Op::new("LSTM").int("hidden_size", 16).outputs(3);
        let (out, cost) = op.run(&[&x, &w, &r, &b]);
        assert_eq!(dims(&out[0]), [10, 1, 2, 16]);
        assert_eq!(dims(&out[1]), [1, 2, 16]);
        assert_eq!(dims(&out[2]), [1, 2, 16]);
        // steps = seq·batch·D = 20; MACs = 20 · 4·16 · (32 + 16) = 61,440.
        assert_eq!(cost.macs, 61_440);
        // FLOPs = 2·MACs + 20·16·8 = 122,880 + 2,560.
        assert_eq!(cost.flops, 125_440);
        // 20·16·5 (3 sigmoids + 2 tanh).
        assert_eq!(cost.transcendental, 1_600);
        // X 640·4; W, R, B (2,048 + 1,024 + 128)·4 = 12,800; Y 320·4 + Y_h, Y_c 32·4 each.
        assert_eq!(cost.bytes, traffic(12_800, 2_560, 1_536));
    }

    #[test]
    fn lstm_directions_and_layout() {
        // Bidirectional: D = 2 doubles everything.
        let (x, w, r) = (f32s(&[10, 2, 32]), w32(&[2, 64, 32]), w32(&[2, 64, 16]));
        let (out, cost) = Op::new("LSTM").int("hidden_size", 16).run(&[&x, &w, &r]);
        assert_eq!(dims(&out[0]), [10, 2, 2, 16]);
        assert_eq!(cost.macs, 2 * 61_440);
        // Batch-first layout: X [batch, seq, input] → Y [batch, seq, D, hidden].
        let xb = f32s(&[2, 10, 32]);
        let (w1, r1) = (w32(&[1, 64, 32]), w32(&[1, 64, 16]));
        let op = Op::new("LSTM")
            .int("hidden_size", 16)
            .int("layout", 1)
            .outputs(2);
        let (out, cost) = op.run(&[&xb, &w1, &r1]);
        assert_eq!(dims(&out[0]), [2, 10, 1, 16]);
        assert_eq!(dims(&out[1]), [2, 1, 16]);
        assert_eq!(cost.macs, 61_440);
        Op::new("LSTM").fails(&[&x, &w32(&[64, 32])]);
    }

    #[test]
    fn dynamic_quantize_lstm_reads_transposed_int8_weights() {
        // onnxruntime's quantize_dynamic form: W [D, input, 4·hidden] and R [D, hidden,
        // 4·hidden] in int8, B in f32, scales and zero points per direction (inputs 8-11).
        let (x, w, r, b) = (
            f32s(&[10, 2, 32]),
            weight(DType::I8, &[1, 32, 64]),
            weight(DType::I8, &[1, 16, 64]),
            w32(&[1, 128]),
        );
        let op = Op::contrib("DynamicQuantizeLSTM").outputs(3);
        let (out, cost) = op.run(&[&x, &w, &r, &b]);
        // hidden = 64 / 4 from W's last dim (no hidden_size attribute).
        assert_eq!(dims(&out[0]), [10, 1, 2, 16]);
        assert_eq!(dims(&out[2]), [1, 2, 16]);
        // The same work as the float LSTM of that shape.
        assert_eq!(cost.macs, 61_440);
        assert_eq!(cost.flops, 125_440);
        // W, R at a byte each (2,048 + 1,024) + B 128·4 = 3,584; X, Y as the float LSTM.
        assert_eq!(cost.bytes, traffic(3_584, 2_560, 1_536));
        // Not an op of the standard domain.
        assert!(super::super::lookup("", "DynamicQuantizeLSTM").is_none());
    }

    #[test]
    fn gru_and_rnn() {
        // GRU: hidden from W: 12 / 3 gates = 4; seq 5, batch 1, input 8.
        let (x, w, r) = (f32s(&[5, 1, 8]), w32(&[1, 12, 8]), w32(&[1, 12, 4]));
        let (out, cost) = Op::new("GRU").run(&[&x, &w, &r]);
        assert_eq!(dims(&out[0]), [5, 1, 1, 4]);
        // MACs = 5 · 3·4 · (8 + 4) = 720; FLOPs = 1,440 + 5·4·6; 5·4·3 transcendental.
        assert_eq!(
            (cost.macs, cost.flops, cost.transcendental),
            (720, 1_560, 60)
        );
        // RNN, bidirectional: seq 3, batch 2, input 6, hidden 5: steps 12.
        let (x, w, r) = (f32s(&[3, 2, 6]), w32(&[2, 5, 6]), w32(&[2, 5, 5]));
        let (_, cost) = Op::new("RNN").run(&[&x, &w, &r]);
        // MACs = 12 · 5 · (6 + 5) = 660; FLOPs = 1,320 + 12·5·2; 12·5 tanh.
        assert_eq!(
            (cost.macs, cost.flops, cost.transcendental),
            (660, 1_440, 60)
        );
    }

    #[test]
    fn roi_align() {
        let (x, rois, idx) = (
            f32s(&[1, 256, 14, 14]),
            f32s(&[3, 4]),
            act(DType::I64, &[3]),
        );
        let op = Op::new("RoiAlign")
            .int("output_height", 7)
            .int("output_width", 7)
            .int("sampling_ratio", 2);
        let (out, cost) = op.run(&[&x, &rois, &idx]);
        assert_eq!(dims(&out[0]), [3, 256, 7, 7]);
        // 37,632 outputs × (2² samples · 8 + 1 average) = 37,632·33.
        assert_eq!(cost.flops, 1_241_856);
        // Samples would read 37,632·4·4 values, more than X (200,704 bytes): bounded by X;
        // + rois 48 bytes. (The batch indices are not counted.)
        assert_eq!(cost.bytes, traffic(0, 200_704 + 48, 150_528));
        // Few outputs: the samples bound the read. Adaptive ratio (0): 2×2 samples.
        let (big, one_roi) = (f32s(&[1, 1, 100, 100]), f32s(&[1, 4]));
        let small = Op::new("RoiAlign")
            .int("output_height", 2)
            .int("output_width", 2);
        let (_, cost) = small.run(&[&big, &one_roi, &act(DType::I64, &[1])]);
        assert_eq!(cost.flops, 4 * 33);
        // 4 outputs · 4 samples · 4 taps · 4 bytes = 256, + 16 bytes of roi.
        assert_eq!(cost.bytes, traffic(0, 256 + 16, 16));
    }

    #[test]
    fn nms_is_costed_once_its_output_is_known() {
        let (boxes, scores) = (f32s(&[1, 10, 4]), f32s(&[1, 1, 10]));
        let out = Op::new("NonMaxSuppression").infer(&[&boxes, &scores]);
        assert_eq!(out[0].dtype, DType::I64);
        assert_eq!(out[0].shape.as_deref().unwrap()[1], Dim::Known(3));
        let err = Op::new("NonMaxSuppression")
            .try_cost_opt(&[Some(&boxes), Some(&scores)], &out)
            .unwrap_err();
        assert!(err.contains("depends on the data"), "{err}");
        // Once the kept count is known (a run on given values), the work is costed: 10 score
        // tests, 10·4 sort comparisons, 3 kept × 10 candidates × 15 FLOPs.
        let kept = [act(DType::I64, &[3, 3])];
        let cost = Op::new("NonMaxSuppression")
            .try_cost_opt(&[Some(&boxes), Some(&scores)], &kept)
            .unwrap();
        assert_eq!(cost.flops, 10 + 40 + 450);
        assert_eq!(cost.bytes, traffic(0, 160 + 40, 72));
    }
}
