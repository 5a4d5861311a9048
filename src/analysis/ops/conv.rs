//! Conv (opsets 1-22) and ConvTranspose (opsets 1-22), with groups, dilations, strides, explicit
//! pads and `auto_pad`.
//!
//! Conv: X[N,C,H,W] * W[M,C/g,kh,kw] -> Y[N,M,Ho,Wo].
//!   MACs  = N · M · Ho · Wo · (C/g) · kh · kw   (one per weight tap per output element)
//!   FLOPs = 2 · MACs + N · M · Ho · Wo if a bias B is given (one add per output element)
//! ConvTranspose: X[N,C,H,W], W[C,M/g,kh,kw] -> Y[N,M,Ho,Wo]; every input element scatters
//! through the kernel, so MACs = N · C · H · W · (M/g) · kh · kw; bias as above.
//! DeformConv (19+): the Conv geometry, each tap read at a learned fractional offset: per
//! output pixel, input channel and tap one bilinear sample (4 taps, 8 FLOPs) and, with a mask,
//! one multiply; then the Conv MACs. The offset and mask are read once like any input.
//! Bytes: input, weights and bias read once, output written once.

use super::spatial::{ConvConfig, ConvTransposeConfig};
use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct Conv;
struct ConvTranspose;
struct DeformConv;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "Conv" => Some(&Conv),
        "ConvTranspose" => Some(&ConvTranspose),
        "DeformConv" => Some(&DeformConv),
        _ => None,
    }
}

/// The weight's spatial dims (the kernel when `kernel_shape` is absent).
fn weight_spatial(weight: &[Dim]) -> OpResult<Vec<u64>> {
    weight[2..]
        .iter()
        .map(|d| {
            d.known()
                .ok_or_else(|| format!("weight dim {d} is not known"))
        })
        .collect()
}

fn spatial_input(x: &[Dim]) -> OpResult<Vec<u64>> {
    x[2..]
        .iter()
        .map(|d| {
            d.known()
                .ok_or_else(|| format!("spatial dim `{d}` of the input is not bound"))
        })
        .collect()
}

/// Output elements and MACs of a convolution: one MAC per weight tap (W[1..]) per output.
fn conv_macs(ctx: &CostCtx) -> OpResult<(u64, u64)> {
    let w = ctx.input_dims(1)?;
    let outputs: u64 = ctx.output_dims(0)?.iter().product();
    let taps: u64 = w[1..].iter().product();
    Ok((outputs, outputs.saturating_mul(taps)))
}

impl OpDef for Conv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        let w = ctx.input_shape(1)?;
        if x.len() < 3 || w.len() != x.len() {
            return Err(super::invalid(format!(
                "input rank {} and weight rank {} do not form a convolution",
                x.len(),
                w.len()
            )));
        }
        let config = ConvConfig::parse(ctx.attrs())?;
        let group = config.group;
        if let (Some(c), Some(wc)) = (x[1].known(), w[1].known()) {
            if wc.checked_mul(group) != Some(c) {
                return Err(super::invalid(format!(
                    "input has {c} channels but weight expects {wc} x {group} groups"
                )));
            }
        }
        if let Some(m) = w[0].known() {
            if m % group != 0 {
                return Err(super::invalid(format!(
                    "{m} output channels do not divide into {group} groups"
                )));
            }
            if let Some(bias) = ctx.opt_input(2).and_then(|b| b.shape.as_deref()) {
                if bias.len() != 1 || bias[0].known().is_some_and(|len| len != m) {
                    return Err(super::invalid(format!(
                        "bias has shape {} but the weight has {m} output channels",
                        crate::analysis::tensor::shape_to_string(bias)
                    )));
                }
            }
        }
        let input = spatial_input(x)?;
        let window = match weight_spatial(w) {
            Ok(weight) => config.window(&input, &weight)?,
            // A symbolic weight dim: `kernel_shape` alone says the window.
            Err(unknown) => {
                let kernel = config.window.kernel_or(|| Err(unknown))?;
                config.window.forward(&input, &kernel, false)?
            }
        };
        let mut shape = vec![x[0].clone(), w[0].clone()];
        shape.extend(window.output.iter().map(|&d| Dim::Known(d)));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let (outputs, macs) = conv_macs(ctx)?;
        let has_bias = ctx.inputs.get(2).copied().flatten().is_some();
        Ok(OpCost {
            flops: 2 * macs + if has_bias { outputs } else { 0 },
            macs,
            transcendental: 0,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

impl OpDef for DeformConv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        // X, W and the bias (input #3 here, #2 for Conv) have Conv's geometry.
        let as_conv = InferCtx {
            node: super::OpNode { ..ctx.node },
            inputs: vec![ctx.opt_input(0), ctx.opt_input(1), ctx.opt_input(3)],
            output_count: 1,
            outer: None,
        };
        let out = Conv.infer(&as_conv)?;
        let offset = ctx.input_shape(2)?;
        if offset.len() != ctx.input_shape(0)?.len() {
            return Err(super::invalid(
                "DeformConv: the offset has the input's rank",
            ));
        }
        Ok(out)
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let w = ctx.input_dims(1)?;
        let y = ctx.output_dims(0)?;
        let (outputs, macs) = conv_macs(ctx)?;
        // Samples: per output pixel (all output channels share them), input channel and tap.
        let group = ctx.attrs().int_or("group", 1).max(1) as u64;
        let pixels = outputs / y[1].max(1);
        let samples = pixels * w[1] * group * w[2..].iter().product::<u64>();
        let has_mask = ctx.inputs.get(4).copied().flatten().is_some();
        let has_bias = ctx.inputs.get(3).copied().flatten().is_some();
        Ok(OpCost {
            flops: 2 * macs
                + samples * if has_mask { 9 } else { 8 }
                + if has_bias { outputs } else { 0 },
            macs,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for ConvTranspose {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        let w = ctx.input_shape(1)?;
        if x.len() < 3 || w.len() != x.len() {
            return Err(super::invalid(
                "input and weight ranks do not form a transposed convolution",
            ));
        }
        let config = ConvTransposeConfig::parse(ctx.attrs())?;
        let group = config.group;
        let out_channels = match w[1].known() {
            Some(m) => Dim::Known(
                m.checked_mul(group)
                    .ok_or_else(|| super::invalid("output channels × group overflows"))?,
            ),
            None => return Err("weight output-channel dim is not known".into()),
        };
        if let (Some(c), Some(wc)) = (x[1].known(), w[0].known()) {
            if c != wc || c % group != 0 {
                return Err(super::invalid(format!(
                    "input has {c} channels but the weight has {wc} input channels in {group} groups"
                )));
            }
        }
        if let (Some(bias), Some(m)) = (
            ctx.opt_input(2).and_then(|b| b.shape.as_deref()),
            out_channels.known(),
        ) {
            if bias.len() != 1 || bias[0].known().is_some_and(|len| len != m) {
                return Err(super::invalid(format!(
                    "bias has shape {} but the op has {m} output channels",
                    crate::analysis::tensor::shape_to_string(bias)
                )));
            }
        }
        let kernel = config.window.kernel_or(|| weight_spatial(w))?;
        let window = config.window(&spatial_input(x)?, &kernel)?;
        let spatial = window.output;
        let mut shape = vec![x[0].clone(), out_channels];
        shape.extend(spatial.into_iter().map(Dim::Known));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let x = ctx.input_dims(0)?;
        let w = ctx.input_dims(1)?;
        let inputs: u64 = x.iter().product();
        let taps: u64 = w[1..].iter().product();
        let macs = inputs.saturating_mul(taps);
        let outputs = ctx.output_elements(0)?;
        let has_bias = ctx.inputs.get(2).copied().flatten().is_some();
        Ok(OpCost {
            flops: 2 * macs + if has_bias { outputs } else { 0 },
            macs,
            transcendental: 0,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Hand-computed Conv / ConvTranspose cases: geometry, MACs and FLOPs per the header, bytes
    //! at 4 bytes per f32 element unless a precision is named.

    use super::super::tests::kit::{dims, f32_dims, f32s, sym, traffic, w32, Op};
    use crate::analysis::tensor::Dim;
    use crate::device::Precision;

    #[test]
    fn deform_conv_adds_one_bilinear_sample_per_tap() {
        // X [1,2,4,4], W [3,2,3,3], pads 1: Y [1,3,4,4]; offsets [1, 2·9, 4, 4].
        let (x, w, offset) = (
            f32s(&[1, 2, 4, 4]),
            w32(&[3, 2, 3, 3]),
            f32s(&[1, 18, 4, 4]),
        );
        let op = Op::new("DeformConv").ints("pads", &[1, 1, 1, 1]);
        let (out, cost) = op.run(&[&x, &w, &offset]);
        assert_eq!(dims(&out[0]), [1, 3, 4, 4]);
        let macs = 48 * 18;
        assert_eq!(cost.macs, macs);
        // 16 pixels · 2 channels · 9 taps samples, 8 FLOPs each.
        assert_eq!(cost.flops, 2 * macs + 16 * 2 * 9 * 8);
        Op::new("DeformConv").fails(&[&x, &w, &f32s(&[1, 18])]);
    }

    fn stem() -> Op {
        Op::new("Conv")
            .ints("kernel_shape", &[7, 7])
            .ints("strides", &[2, 2])
            .ints("pads", &[3, 3, 3, 3])
    }

    #[test]
    fn resnet_stem_with_bias() {
        let (x, w, b) = (f32s(&[1, 3, 224, 224]), w32(&[64, 3, 7, 7]), w32(&[64]));
        let (out, cost) = stem().run(&[&x, &w, &b]);
        // (224 + 3 + 3 − 7) / 2 + 1 = 112.
        assert_eq!(dims(&out[0]), [1, 64, 112, 112]);
        // outputs = 64·112·112 = 802,816; MACs = 802,816 · 3·7·7 = 118,013,952.
        assert_eq!(cost.macs, 118_013_952);
        // FLOPs = 2·MACs + one bias add per output = 236,027,904 + 802,816.
        assert_eq!(cost.flops, 236_830_720);
        assert_eq!(cost.transcendental, 0);
        assert!(!cost.is_view);
        // X: 150,528·4 = 602,112; W + B: (9,408 + 64)·4 = 37,888; Y: 802,816·4 = 3,211,264.
        assert_eq!(cost.bytes, traffic(37_888, 602_112, 3_211_264));
    }

    #[test]
    fn resnet_stem_without_bias_and_at_fp16() {
        let (x, w) = (f32s(&[1, 3, 224, 224]), w32(&[64, 3, 7, 7]));
        let (_, cost) = stem().run(&[&x, &w]);
        // No bias: FLOPs = 2·MACs exactly; weights 9,408·4 = 37,632.
        assert_eq!(cost.flops, 2 * 118_013_952);
        assert_eq!(cost.bytes, traffic(37_632, 602_112, 3_211_264));
        // At fp16 every float tensor is 2 bytes an element: all byte counts halve.
        let (_, half) = stem().precision(Precision::Fp16).run(&[&x, &w]);
        assert_eq!(half.macs, 118_013_952);
        assert_eq!(half.bytes, traffic(18_816, 301_056, 1_605_632));
    }

    #[test]
    fn omitted_bias_slot_is_not_a_bias() {
        let (x, w) = (f32s(&[1, 3, 224, 224]), w32(&[64, 3, 7, 7]));
        let (_, cost) = stem().run_opt(&[Some(&x), Some(&w), None]);
        assert_eq!(cost.flops, 2 * 118_013_952);
    }

    #[test]
    fn depthwise_counts_one_input_channel_per_output() {
        let op = Op::new("Conv").int("group", 32).ints("pads", &[1, 1, 1, 1]);
        let (x, w) = (f32s(&[1, 32, 56, 56]), w32(&[32, 1, 3, 3]));
        let (out, cost) = op.run(&[&x, &w]);
        assert_eq!(dims(&out[0]), [1, 32, 56, 56]);
        // outputs = 32·56·56 = 100,352; C/g = 1: MACs = 100,352·1·3·3 = 903,168.
        assert_eq!(cost.macs, 903_168);
        assert_eq!(cost.flops, 1_806_336);
        // X and Y 100,352·4 = 401,408 each; W 288·4 = 1,152.
        assert_eq!(cost.bytes, traffic(1_152, 401_408, 401_408));
    }

    #[test]
    fn grouped_conv_divides_the_reduction() {
        let op = Op::new("Conv").int("group", 2);
        let (x, w) = (f32s(&[1, 8, 10, 10]), w32(&[16, 4, 3, 3]));
        let (out, cost) = op.run(&[&x, &w]);
        // No pads: 10 − 3 + 1 = 8.
        assert_eq!(dims(&out[0]), [1, 16, 8, 8]);
        // MACs = 16·8·8 · (8/2)·3·3 = 1,024·36 = 36,864.
        assert_eq!(cost.macs, 36_864);
    }

    #[test]
    fn dilation_and_strides() {
        let (x, w) = (f32s(&[1, 1, 10, 10]), w32(&[1, 1, 3, 3]));
        // Dilation 2: the 3-tap window spans 2·(3 − 1) + 1 = 5: 10 − 5 + 1 = 6.
        let (out, cost) = Op::new("Conv").ints("dilations", &[2, 2]).run(&[&x, &w]);
        assert_eq!(dims(&out[0]), [1, 1, 6, 6]);
        // Dilation does not change the taps: MACs = 36·9 = 324.
        assert_eq!(cost.macs, 324);
        // With stride 2 as well: (10 − 5) / 2 + 1 = 3.
        let op = Op::new("Conv")
            .ints("dilations", &[2, 2])
            .ints("strides", &[2, 2]);
        assert_eq!(dims(&op.infer(&[&x, &w])[0]), [1, 1, 3, 3]);
    }

    #[test]
    fn auto_pad_modes() {
        let (x, w) = (f32s(&[1, 1, 7, 7]), w32(&[1, 1, 3, 3]));
        for mode in ["SAME_UPPER", "SAME_LOWER"] {
            let op = Op::new("Conv")
                .string("auto_pad", mode)
                .ints("strides", &[2, 2]);
            // SAME: ceil(7 / 2) = 4.
            let (out, cost) = op.run(&[&x, &w]);
            assert_eq!(dims(&out[0]), [1, 1, 4, 4], "{mode}");
            assert_eq!(cost.macs, 16 * 9, "{mode}");
        }
        // VALID: (7 − 3) / 2 + 1 = 3, explicit pads ignored.
        let op = Op::new("Conv")
            .string("auto_pad", "VALID")
            .ints("strides", &[2, 2]);
        assert_eq!(dims(&op.infer(&[&x, &w])[0]), [1, 1, 3, 3]);
    }

    #[test]
    fn one_dimensional_conv() {
        let op = Op::new("Conv").ints("strides", &[3]).ints("pads", &[2, 2]);
        let (x, w) = (f32s(&[2, 4, 20]), w32(&[8, 4, 5]));
        let (out, cost) = op.run(&[&x, &w]);
        // (20 + 2 + 2 − 5) / 3 + 1 = 19 / 3 + 1 = 7.
        assert_eq!(dims(&out[0]), [2, 8, 7]);
        // MACs = 2·8·7 · 4·5 = 112·20 = 2,240.
        assert_eq!(cost.macs, 2_240);
        assert_eq!(cost.flops, 4_480);
    }

    #[test]
    fn symbolic_batch_infers_but_does_not_cost() {
        let x = f32_dims(vec![sym("N"), Dim::Known(3), Dim::Known(8), Dim::Known(8)]);
        let w = w32(&[4, 3, 3, 3]);
        let op = Op::new("Conv");
        let out = op.infer(&[&x, &w]);
        assert_eq!(
            out[0].shape.as_deref().unwrap(),
            [sym("N"), Dim::Known(4), Dim::Known(6), Dim::Known(6)]
        );
        let err = op
            .try_cost_opt(&[Some(&x), Some(&w)], &out)
            .expect_err("a symbolic output cannot be costed");
        assert!(err.contains("not fully known"), "{err}");
    }

    #[test]
    fn inconsistent_convs_are_invalid() {
        let x = f32s(&[1, 3, 224, 224]);
        let w = w32(&[64, 3, 7, 7]);
        // Bias of 32 for 64 output channels.
        let reason = stem().invalid(&[&x, &w, &w32(&[32])]);
        assert!(reason.contains("bias"), "{reason}");
        // Bias of rank 2.
        stem().invalid(&[&x, &w, &w32(&[64, 1])]);
        // 4 input channels, the weight expects 3 × 1 group.
        let reason = stem().invalid(&[&f32s(&[1, 4, 224, 224]), &w]);
        assert!(reason.contains("4 channels"), "{reason}");
        // 10 output channels do not split into 4 groups (8 = 2 × 4 input channels is fine).
        let reason = Op::new("Conv")
            .int("group", 4)
            .invalid(&[&f32s(&[1, 8, 9, 9]), &w32(&[10, 2, 3, 3])]);
        assert!(reason.contains("groups"), "{reason}");
    }

    #[test]
    fn conv_inference_errors() {
        let x = f32s(&[1, 3, 8, 8]);
        // Malformed nodes fail (as bad input or not: the op's call). Weight rank 3 against
        // input rank 4.
        Op::new("Conv").fails(&[&x, &w32(&[4, 3, 3])]);
        // A symbolic spatial dim: not the model's fault, an ordinary error (value_info fallback).
        let xs = f32_dims(vec![Dim::Known(1), Dim::Known(3), sym("H"), Dim::Known(8)]);
        let err = Op::new("Conv").error(&[&xs, &w32(&[4, 3, 3, 3])]);
        assert!(err.contains("not bound"), "{err}");
        // A 9×9 window on an unpadded 8×8 input.
        Op::new("Conv").fails(&[&x, &w32(&[4, 3, 9, 9])]);
        // Strides of the wrong length, an unknown auto_pad.
        Op::new("Conv")
            .ints("strides", &[2])
            .fails(&[&x, &w32(&[4, 3, 3, 3])]);
        Op::new("Conv")
            .string("auto_pad", "SAME_MIDDLE")
            .fails(&[&x, &w32(&[4, 3, 3, 3])]);
    }

    fn deconv() -> Op {
        Op::new("ConvTranspose")
            .ints("strides", &[2, 2])
            .ints("pads", &[1, 1, 1, 1])
    }

    #[test]
    fn conv_transpose_scatters_every_input() {
        let (x, w, b) = (f32s(&[1, 16, 7, 7]), w32(&[16, 8, 4, 4]), w32(&[8]));
        let (out, cost) = deconv().run(&[&x, &w, &b]);
        // 2·(7 − 1) + (4 − 1) + 1 − 1 − 1 = 14.
        assert_eq!(dims(&out[0]), [1, 8, 14, 14]);
        // MACs = N·C·H·W · (M/g)·kh·kw = 16·49 · 8·16 = 784·128 = 100,352.
        assert_eq!(cost.macs, 100_352);
        // FLOPs = 2·MACs + 8·14·14 = 200,704 + 1,568.
        assert_eq!(cost.flops, 202_272);
        // X 784·4 = 3,136; W 2,048·4 + B 8·4 = 8,224; Y 1,568·4 = 6,272.
        assert_eq!(cost.bytes, traffic(8_224, 3_136, 6_272));
        // Without the bias: 2·MACs.
        assert_eq!(deconv().run(&[&x, &w]).1.flops, 200_704);
    }

    #[test]
    fn conv_transpose_geometry() {
        let x = f32s(&[1, 16, 7, 7]);
        let w3 = w32(&[16, 8, 3, 3]);
        // output_padding: 2·6 + 1 + 2 + 1 − 2 = 14.
        let op = deconv().ints("output_padding", &[1, 1]);
        assert_eq!(dims(&op.infer(&[&x, &w3])[0]), [1, 8, 14, 14]);
        // output_shape wins over the formula.
        let op = deconv().ints("output_shape", &[1, 8, 13, 15]);
        assert_eq!(dims(&op.infer(&[&x, &w3])[0]), [1, 8, 13, 15]);
        // SAME: input × stride.
        let op = Op::new("ConvTranspose")
            .ints("strides", &[2, 2])
            .string("auto_pad", "SAME_UPPER");
        assert_eq!(dims(&op.infer(&[&x, &w3])[0]), [1, 8, 14, 14]);
        // Dilation 2, stride 1 on 5: 4 + 2·2 + 1 = 9.
        let op = Op::new("ConvTranspose").ints("dilations", &[2, 2]);
        let out = op.infer(&[&f32s(&[1, 16, 5, 5]), &w3]);
        assert_eq!(dims(&out[0]), [1, 8, 9, 9]);
    }

    #[test]
    fn grouped_conv_transpose() {
        let op = Op::new("ConvTranspose").int("group", 2);
        let (x, w) = (f32s(&[1, 4, 5, 5]), w32(&[4, 3, 3, 3]));
        let (out, cost) = op.run(&[&x, &w]);
        // M = 3 per group × 2 groups = 6; 5 − 1 + 3 = 7.
        assert_eq!(dims(&out[0]), [1, 6, 7, 7]);
        // MACs = 4·5·5 · (6/2)·3·3 = 100·27 = 2,700.
        assert_eq!(cost.macs, 2_700);
    }

    #[test]
    fn inconsistent_conv_transposes_are_invalid() {
        let (x, w) = (f32s(&[1, 16, 7, 7]), w32(&[16, 8, 4, 4]));
        let reason = deconv().invalid(&[&x, &w, &w32(&[4])]);
        assert!(reason.contains("bias"), "{reason}");
        deconv().invalid(&[&f32s(&[1, 5, 7, 7]), &w]);
        // 16 input channels do not split into 3 groups.
        deconv().int("group", 3).invalid(&[&x, &w]);
        // Pads larger than the output fail; an unknown output-channel dim is an ordinary error.
        let one = f32s(&[1, 1, 1, 1]);
        Op::new("ConvTranspose")
            .ints("pads", &[1, 1, 1, 1])
            .fails(&[&one, &w32(&[1, 1, 1, 1])]);
        let ws = f32_dims(vec![Dim::Known(16), sym("M"), Dim::Known(4), Dim::Known(4)]);
        Op::new("ConvTranspose").error(&[&x, &ws]);
    }
}
