//! Plan-time preparation of reference kernels: what a kernel derives from its node's constant
//! inputs (packed, centred or dequantized weights) is computed once per plan, and the prepared
//! run uses it.

use super::*;

/// What a reference kernel derives from its node's constant inputs once per plan (packed or
/// dequantized weights) instead of on every run: for a quantized model these were most of its
/// reference ops' time (ddddocr: 5 ms packing MatMulInteger's B, 4 ms dequantizing the LSTM's
/// weights, per run).
#[derive(Debug)]
pub(crate) enum Prepared {
    /// MatMulInteger with a constant B (and B zero point, when it has one).
    MatMulInteger(quant::PackedIntegerB),
    /// DynamicQuantizeLSTM's W and R dequantized (and in 8 bits for the int8 products, where
    /// the CPU has VNNI).
    QuantizedLstm {
        w: RtTensor,
        r: RtTensor,
        int8: Option<rnn::Int8Lstm>,
    },
    /// ConvInteger's constant weights minus their zero points (int8-packed and as floats).
    ConvInteger(quant::CenteredConvWeights),
}

impl Prepared {
    /// Bytes the preparation holds (a plan's weights count them).
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Prepared::MatMulInteger(packed) => packed.bytes(),
            Prepared::QuantizedLstm { w, r, int8 } => {
                ((w.len() + r.len()) * 4) as u64 + int8.as_ref().map_or(0, rnn::Int8Lstm::bytes)
            }
            Prepared::ConvInteger(weights) => weights.bytes(),
        }
    }
}

/// The preparation of `node` from its inputs, when its kernel has one and every input it
/// derives from is a constant: `constants[i]` is input i's value when constant, `given[i]`
/// whether the node has input i at all (a given but not constant input rules it out).
pub(crate) fn prepare(
    node: &Node,
    given: &[bool],
    constants: &[Option<&RtTensor>],
) -> Option<Prepared> {
    // A constant the preparation cannot take leaves the node to its per-run kernel, which
    // reports it; a panic on one becomes that too (`guarded`).
    guarded(|| Ok(prepare_unguarded(node, given, constants)))
        .ok()
        .flatten()
}

fn prepare_unguarded(
    node: &Node,
    given: &[bool],
    constants: &[Option<&RtTensor>],
) -> Option<Prepared> {
    let constant = |i: usize| constants.get(i).copied().flatten();
    let is_given = |i: usize| given.get(i).copied().unwrap_or(false);
    // Every listed input is a constant, or absent where optional.
    let all_constant = |required: &[usize], optional: &[usize]| {
        required.iter().all(|&i| constant(i).is_some())
            && optional
                .iter()
                .all(|&i| !is_given(i) || constant(i).is_some())
    };
    match (node.domain.as_str(), node.op_type.as_str()) {
        ("", "MatMulInteger") if all_constant(&[1], &[3]) => {
            quant::pack_integer_b(constant(1)?, constant(3), true)
                .ok()
                .map(Prepared::MatMulInteger)
        }
        ("", "ConvInteger") if all_constant(&[1], &[3]) => {
            quant::center_conv_weights(node, constant(1)?, constant(3))
                .ok()
                .map(Prepared::ConvInteger)
        }
        (crate::analysis::ops::contrib::DOMAIN, "DynamicQuantizeLSTM")
            if all_constant(&[1, 2, 8, 10], &[9, 11]) =>
        {
            let (w, r) = contrib::dequantized_lstm_weights(&constant).ok()?;
            let int8 = contrib::int8_lstm_weights(&constant);
            Some(Prepared::QuantizedLstm { w, r, int8 })
        }
        _ => None,
    }
}

/// Runs `node` with its plan-time preparation (see [`prepare`]) on up to `threads` threads
/// (the convolution and the integer products split; the others run on one); otherwise as [`run`].
pub(crate) fn run_prepared(
    node: &Node,
    prepared: &Prepared,
    inputs: &[Option<&RtTensor>],
    out_types: &[DType],
    threads: usize,
) -> Result<Vec<RtTensor>> {
    guarded(|| {
        let get = |i: usize| inputs.get(i).and_then(|t| *t);
        let outputs = match prepared {
            Prepared::MatMulInteger(packed) => vec![quant::matmul_integer_packed(
                get(0).ok_or("input #0 is missing")?,
                get(2),
                packed,
                threads,
            )?],
            Prepared::QuantizedLstm { w, r, int8 } => {
                contrib::dynamic_quantize_lstm_with(node, inputs, w, r, int8.as_ref())?
            }
            Prepared::ConvInteger(weights) => vec![quant::conv_integer_centered(
                node,
                get(0).ok_or("input #0 is missing")?,
                get(2),
                weights,
                threads,
            )?],
        };
        Ok(wrapped(outputs, out_types))
    })
}
