//! Conv (opsets 1-22) and ConvTranspose (opsets 1-22), with groups, dilations, strides, explicit
//! pads and `auto_pad`.
//!
//! Conv: X[N,C,H,W] * W[M,C/g,kh,kw] -> Y[N,M,Ho,Wo].
//!   MACs  = N · M · Ho · Wo · (C/g) · kh · kw   (one per weight tap per output element)
//!   FLOPs = 2 · MACs + N · M · Ho · Wo if a bias B is given (one add per output element)
//! ConvTranspose: X[N,C,H,W], W[C,M/g,kh,kw] -> Y[N,M,Ho,Wo]; every input element scatters
//! through the kernel, so MACs = N · C · H · W · (M/g) · kh · kw; bias as above.
//! Bytes: input, weights and bias read once, output written once.

use super::spatial::forward_window;
use super::{CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct Conv;
struct ConvTranspose;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    match op_type {
        "Conv" => Some(&Conv),
        "ConvTranspose" => Some(&ConvTranspose),
        _ => None,
    }
}

/// Kernel spatial dims from the attribute or the weight shape.
fn kernel_dims(ctx_kernel: Option<&[i64]>, weight: &[Dim]) -> OpResult<Vec<u64>> {
    if let Some(kernel) = ctx_kernel {
        return Ok(kernel.iter().map(|&k| k.max(1) as u64).collect());
    }
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

impl OpDef for Conv {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        let w = ctx.input_shape(1)?;
        if x.len() < 3 || w.len() != x.len() {
            return Err(format!(
                "input rank {} and weight rank {} do not form a convolution",
                x.len(),
                w.len()
            ));
        }
        let group = ctx.attrs().int_or("group", 1).max(1) as u64;
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
        let kernel = kernel_dims(ctx.attrs().ints("kernel_shape"), w)?;
        let window = forward_window(ctx.attrs(), &spatial_input(x)?, &kernel, false)?;
        let mut shape = vec![x[0].clone(), w[0].clone()];
        shape.extend(window.output.iter().map(|&d| Dim::Known(d)));
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let w = ctx.input_dims(1)?;
        let y = ctx.output_dims(0)?;
        let taps: u64 = w[1..].iter().product();
        let outputs: u64 = y.iter().product();
        let macs = outputs.saturating_mul(taps);
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

impl OpDef for ConvTranspose {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input_shape(0)?;
        let w = ctx.input_shape(1)?;
        if x.len() < 3 || w.len() != x.len() {
            return Err("input and weight ranks do not form a transposed convolution".into());
        }
        let attrs = ctx.attrs();
        let group = attrs.int_or("group", 1).max(1) as u64;
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
        let input = spatial_input(x)?;
        let count = input.len();
        let kernel = kernel_dims(attrs.ints("kernel_shape"), w)?;
        let strides: Vec<u64> = attrs
            .ints("strides")
            .map(|s| s.iter().map(|&v| v.max(1) as u64).collect())
            .unwrap_or(vec![1; count]);
        let dilations: Vec<u64> = attrs
            .ints("dilations")
            .map(|s| s.iter().map(|&v| v.max(1) as u64).collect())
            .unwrap_or(vec![1; count]);
        let output_padding: Vec<u64> = attrs
            .ints("output_padding")
            .map(|s| s.iter().map(|&v| v.max(0) as u64).collect())
            .unwrap_or(vec![0; count]);
        let pads: Vec<u64> = attrs
            .ints("pads")
            .map(|s| s.iter().map(|&v| v.max(0) as u64).collect())
            .unwrap_or(vec![0; 2 * count]);
        if strides.len() != count || dilations.len() != count || pads.len() != 2 * count {
            return Err("strides/dilations/pads do not match the spatial rank".into());
        }
        let auto_pad = attrs.string("auto_pad").unwrap_or("NOTSET");
        let mut spatial = Vec::with_capacity(count);
        if let Some(output_shape) = attrs.ints("output_shape") {
            let tail = &output_shape[output_shape.len().saturating_sub(count)..];
            spatial.extend(tail.iter().map(|&v| v.max(0) as u64));
        } else {
            for axis in 0..count {
                let full = strides[axis] * (input[axis].max(1) - 1)
                    + output_padding[axis]
                    + (kernel[axis] - 1) * dilations[axis]
                    + 1;
                let out = if auto_pad.starts_with("SAME") {
                    input[axis] * strides[axis]
                } else {
                    full.checked_sub(pads[axis] + pads[axis + count])
                        .ok_or_else(|| {
                            format!("pads exceed the output size on spatial axis {axis}")
                        })?
                };
                spatial.push(out);
            }
        }
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
