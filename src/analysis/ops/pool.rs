//! Pooling: MaxPool (opsets 1-22, optional Indices output), AveragePool, LpPool,
//! GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
//!
//! Windowed pools: one FLOP (compare or add) per window tap per output element; AveragePool and
//! LpPool add one division per output element (LpPool also 1 pow per tap and 1 root per output).
//! Global pools: one FLOP per input element (+1 division per output for the average).
//! Bytes: input read once, output written once.

use super::spatial::PoolConfig;
use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, Dim, TensorFact};

struct WindowPool;
struct GlobalPool;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "MaxPool" | "AveragePool" | "LpPool" => Some(&WindowPool),
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => Some(&GlobalPool),
        _ => None,
    }
}

impl OpDef for WindowPool {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        if x.len() < 3 {
            return Err(super::invalid(format!(
                "pooling needs rank >= 3, got {}",
                x.len()
            )));
        }
        let config = PoolConfig::parse(ctx.attrs())?;
        let spatial: Vec<u64> = x[2..]
            .iter()
            .map(|d| {
                d.known()
                    .ok_or_else(|| format!("spatial dim `{d}` is not bound"))
            })
            .collect::<OpResult<_>>()?;
        let window = config.window(&spatial)?;
        let mut shape = x[..2].to_vec();
        shape.extend(window.output.iter().map(|&d| Dim::Known(d)));
        let mut outputs = vec![TensorFact::new(ctx.input(0)?.dtype, shape.clone())];
        if ctx.output_count > 1 {
            outputs.push(TensorFact::new(DType::I64, shape));
        }
        Ok(outputs)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let kernel = PoolConfig::parse(ctx.attrs())?.taps();
        let outputs = ctx.output_elements(0)?;
        let (extra, transcendental) = match ctx.node.op_type {
            "AveragePool" => (outputs, 0),
            "LpPool" => (outputs, outputs * (kernel + 1)),
            _ => (0, 0),
        };
        Ok(OpCost {
            flops: outputs * kernel + extra,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for GlobalPool {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        if x.len() < 3 {
            return Err(super::invalid(format!(
                "global pooling needs rank >= 3, got {}",
                x.len()
            )));
        }
        let mut shape = x[..2].to_vec();
        shape.extend(std::iter::repeat_n(Dim::Known(1), x.len() - 2));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let inputs: u64 = ctx.input_dims(0)?.iter().product();
        let outputs = ctx.output_elements(0)?;
        let division = if ctx.node.op_type == "GlobalMaxPool" {
            0
        } else {
            outputs
        };
        let transcendental = if ctx.node.op_type == "GlobalLpPool" {
            inputs + outputs
        } else {
            0
        };
        Ok(OpCost {
            flops: inputs + division,
            macs: 0,
            transcendental,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed pooling cases (f32, 4 bytes an element).

    use super::super::tests::kit::{dims, f32_dims, f32s, sym, traffic, Op};
    use crate::analysis::tensor::{DType, Dim};

    fn pool(op: &str, k: i64, s: i64) -> Op {
        Op::new(op)
            .ints("kernel_shape", &[k, k])
            .ints("strides", &[s, s])
    }

    #[test]
    fn resnet_max_pool() {
        let x = f32s(&[1, 64, 112, 112]);
        let op = pool("MaxPool", 3, 2).ints("pads", &[1, 1, 1, 1]);
        let (out, cost) = op.run(&[&x]);
        // (112 + 1 + 1 − 3) / 2 + 1 = 56.
        assert_eq!(dims(&out[0]), [1, 64, 56, 56]);
        // One compare per tap: 200,704 outputs × 9 = 1,806,336.
        assert_eq!(cost.flops, 1_806_336);
        assert_eq!(cost.transcendental, 0);
        // X 802,816·4 = 3,211,264; Y 200,704·4 = 802,816.
        assert_eq!(cost.bytes, traffic(0, 3_211_264, 802_816));
        // With the Indices output: i64, 8 bytes per output more written.
        let (out, cost) = op.outputs(2).run(&[&x]);
        assert_eq!(out[1].dtype, DType::I64);
        assert_eq!(dims(&out[1]), [1, 64, 56, 56]);
        assert_eq!(cost.bytes, traffic(0, 3_211_264, 802_816 + 1_605_632));
    }

    #[test]
    fn average_and_lp_pools_divide_once_per_output() {
        let x = f32s(&[1, 4, 8, 8]);
        // 2×2 stride 2: 4·4·4 = 64 outputs; 4 adds per output + 1 division.
        let (out, cost) = pool("AveragePool", 2, 2).run(&[&x]);
        assert_eq!(dims(&out[0]), [1, 4, 4, 4]);
        assert_eq!((cost.flops, cost.transcendental), (64 * 4 + 64, 0));
        // LpPool: same FLOPs, plus a pow per tap and a root per output: 64·(4 + 1).
        let (_, cost) = pool("LpPool", 2, 2).run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (320, 320));
    }

    #[test]
    fn ceil_mode_and_dilation() {
        let x = f32s(&[1, 1, 112, 112]);
        // floor((112 − 3) / 2) + 1 = 55; ceil mode: ceil(109 / 2) + 1 = 56.
        assert_eq!(dims(&pool("MaxPool", 3, 2).infer(&[&x])[0]), [1, 1, 55, 55]);
        let ceil = pool("MaxPool", 3, 2).int("ceil_mode", 1);
        assert_eq!(dims(&ceil.infer(&[&x])[0]), [1, 1, 56, 56]);
        // Dilation 2 widens a 3-tap window to 5: 10 − 5 + 1 = 6, still 9 compares an output.
        let dilated = pool("MaxPool", 3, 1).ints("dilations", &[2, 2]);
        let (out, cost) = dilated.run(&[&f32s(&[1, 1, 10, 10])]);
        assert_eq!(dims(&out[0]), [1, 1, 6, 6]);
        assert_eq!(cost.flops, 36 * 9);
        // 1-D: 10 − 3 + 1 = 8.
        let op = Op::new("MaxPool").ints("kernel_shape", &[3]);
        assert_eq!(dims(&op.infer(&[&f32s(&[1, 2, 10])])[0]), [1, 2, 8]);
    }

    #[test]
    fn global_pools() {
        let x = f32s(&[1, 512, 7, 7]);
        // 512·49 = 25,088 inputs, 512 outputs.
        let (out, cost) = Op::new("GlobalAveragePool").run(&[&x]);
        assert_eq!(dims(&out[0]), [1, 512, 1, 1]);
        assert_eq!(cost.flops, 25_088 + 512);
        assert_eq!(cost.bytes, traffic(0, 100_352, 2_048));
        let (_, cost) = Op::new("GlobalMaxPool").run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (25_088, 0));
        // GlobalLpPool: a pow per input, a root per output.
        let (_, cost) = Op::new("GlobalLpPool").run(&[&x]);
        assert_eq!((cost.flops, cost.transcendental), (25_600, 25_600));
    }

    #[test]
    fn pooling_errors() {
        let x = f32s(&[1, 4, 8, 8]);
        let err = Op::new("MaxPool").fails(&[&x]);
        assert!(err.contains("kernel_shape"), "{err}");
        pool("MaxPool", 3, 1).fails(&[&f32s(&[4, 8])]);
        let xs = f32_dims(vec![Dim::Known(1), Dim::Known(4), sym("H"), Dim::Known(8)]);
        pool("MaxPool", 3, 1).error(&[&xs]);
        // A 9×9 window on an unpadded 8×8 input.
        pool("AveragePool", 9, 1).fails(&[&x]);
        Op::new("GlobalAveragePool").fails(&[&f32s(&[4, 8])]);
    }
}
