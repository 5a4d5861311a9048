//! Reference Einsum.

use super::*;
use crate::kernels::gemm::{sgemm, Epilogue, MatRef};
use crate::kernels::movement;

/// Einsum over any equation: explicit or implicit output, repeated indices (diagonals) and
/// `...` broadcasting. Every combination of the distinct indices is visited once; the product
/// of the operands' elements there is added into the output element the output indices name.
pub(super) fn einsum(equation: &str, operands: &[&RtTensor]) -> Result<RtTensor> {
    let text: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match text.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (text.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != operands.len() {
        return Err(format!(
            "`{equation}` names {} operands, {} given",
            terms.len(),
            operands.len()
        ));
    }
    // `...` becomes as many fresh labels as the broadcast dims it stands for, aligned right
    // (an operand with fewer broadcast dims takes the last ones).
    let letters = |t: &str| t.replace("...", "").chars().count();
    let broadcast_dims = |t: &str, o: &RtTensor| -> Result<usize> {
        o.shape
            .len()
            .checked_sub(letters(t))
            .ok_or_else(|| format!("term `{t}` has more letters than its operand has dims"))
    };
    let mut ellipsis_rank = 0;
    for (term, operand) in terms.iter().zip(operands) {
        if term.contains("...") {
            ellipsis_rank = ellipsis_rank.max(broadcast_dims(term, operand)?);
        }
    }
    // Labels past ASCII, so they never meet the equation's own letters.
    let ellipsis: Vec<char> = (0..ellipsis_rank)
        .filter_map(|n| char::from_u32(0x100 + n as u32))
        .collect();
    let mut labels_of: Vec<Vec<char>> = Vec::new();
    for (term, operand) in terms.iter().zip(operands) {
        let own = if term.contains("...") {
            broadcast_dims(term, operand)?
        } else {
            0
        };
        let tail: String = ellipsis[ellipsis_rank - own..].iter().collect();
        let expanded = term.replace("...", &tail);
        let labels: Vec<char> = expanded.chars().collect();
        if labels.len() != operand.shape.len() {
            return Err(format!(
                "term `{term}` does not match an operand of rank {}",
                operand.shape.len()
            ));
        }
        labels_of.push(labels);
    }
    let mut extent: std::collections::BTreeMap<char, usize> = Default::default();
    for (labels, operand) in labels_of.iter().zip(operands) {
        for (&label, &dim) in labels.iter().zip(&operand.shape) {
            let known = extent.entry(label).or_insert(dim);
            if *known == 1 {
                *known = dim;
            } else if dim != 1 && dim != *known {
                return Err(format!("index `{label}` is {known} and {dim}"));
            }
        }
    }
    let output: Vec<char> = match rhs {
        Some(r) => r
            .replace("...", &ellipsis.iter().collect::<String>())
            .chars()
            .collect(),
        None => {
            let mut counts: std::collections::BTreeMap<char, usize> = Default::default();
            for labels in &labels_of {
                for &l in labels {
                    *counts.entry(l).or_default() += 1;
                }
            }
            let mut out: Vec<char> = ellipsis.clone();
            out.extend(
                counts
                    .into_iter()
                    .filter(|&(l, n)| n == 1 && l.is_ascii_alphabetic())
                    .map(|(l, _)| l),
            );
            out
        }
    };
    for (k, label) in output.iter().enumerate() {
        if !extent.contains_key(label) || output[..k].contains(label) {
            return Err(format!(
                "output index `{label}` is not an input index or repeats"
            ));
        }
    }
    if let Some(product) = as_batched_matmul(&labels_of, operands, &output, &extent) {
        return Ok(product);
    }
    let all: Vec<char> = extent.keys().copied().collect();
    let sizes: Vec<usize> = all.iter().map(|l| extent[l]).collect();
    let position = |l: char| all.iter().position(|&a| a == l).unwrap_or(0);
    let out_shape: Vec<usize> = output
        .iter()
        .map(|l| extent.get(l).copied().unwrap_or(1))
        .collect();
    let out_strides = strides(&out_shape);
    let values: Vec<Vec<f64>> = operands
        .iter()
        .map(|o| match &o.data {
            RtData::F32(v) => v.iter().map(|&e| f64::from(e)).collect(),
            RtData::I64(v) => v.iter().map(|&e| e as f64).collect(),
        })
        .collect();
    let operand_strides: Vec<Vec<(usize, usize)>> = labels_of
        .iter()
        .zip(operands)
        .map(|(labels, o)| {
            let own = strides(&o.shape);
            labels
                .iter()
                .enumerate()
                .filter(|&(d, _)| o.shape[d] != 1)
                .map(|(d, &l)| (position(l), own[d]))
                .collect()
        })
        .collect();
    let output_strides: Vec<(usize, usize)> = output
        .iter()
        .enumerate()
        .map(|(d, &l)| (position(l), out_strides[d]))
        .collect();
    let total: usize = sizes.iter().product();
    let mut out = vec![0.0f64; out_shape.iter().product()];
    let mut index = vec![0usize; all.len()];
    for _ in 0..total {
        let mut product = 1.0;
        for (v, st) in values.iter().zip(&operand_strides) {
            product *= v[st.iter().map(|&(p, s)| index[p] * s).sum::<usize>()];
        }
        out[output_strides
            .iter()
            .map(|&(p, s)| index[p] * s)
            .sum::<usize>()] += product;
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < sizes[d] {
                break;
            }
            index[d] = 0;
        }
    }
    let data = match operands.first().map(|o| &o.data) {
        Some(RtData::I64(_)) => RtData::I64(out.iter().map(|&v| v as i64).collect()),
        _ => RtData::F32(out.iter().map(|&v| v as f32).collect()),
    };
    Ok(RtTensor {
        shape: out_shape,
        data,
    })
}

/// Two float operands whose every index is a batch (in both and the output), a contraction (in
/// both, not the output) or a free index of one of them (in it and the output), without
/// diagonals or size-1 broadcasting: the contraction as batched GEMMs between two transposes,
/// `A → [batch, left, k]`, `B → [batch, k, right]`, the product `[batch, left, right]` to the
/// output's order. Attention written as Einsum (`bhqd,bhkd->bhqk`) took 111 ms through the
/// element-by-element loop above and takes what its two GEMMs take. None where the equation is
/// not of that form.
fn as_batched_matmul(
    labels_of: &[Vec<char>],
    operands: &[&RtTensor],
    output: &[char],
    extent: &std::collections::BTreeMap<char, usize>,
) -> Option<RtTensor> {
    let ([a_labels, b_labels], [a, b]) = (labels_of, operands) else {
        return None;
    };
    let (RtData::F32(a_values), RtData::F32(b_values)) = (&a.data, &b.data) else {
        return None;
    };
    let distinct = |labels: &[char]| {
        labels
            .iter()
            .enumerate()
            .all(|(k, l)| !labels[..k].contains(l))
    };
    let full = |labels: &[char], shape: &[usize]| {
        labels.iter().zip(shape).all(|(l, &dim)| extent[l] == dim)
    };
    if !distinct(a_labels)
        || !distinct(b_labels)
        || !full(a_labels, &a.shape)
        || !full(b_labels, &b.shape)
    {
        return None;
    }
    let (in_a, in_b, in_out) = (
        |l: &char| a_labels.contains(l),
        |l: &char| b_labels.contains(l),
        |l: &char| output.contains(l),
    );
    // An index only one operand has and the output drops is a sum over it: not a GEMM.
    if a_labels
        .iter()
        .chain(b_labels)
        .any(|l| !(in_out(l) || in_a(l) && in_b(l)))
    {
        return None;
    }
    let batch: Vec<char> = output
        .iter()
        .copied()
        .filter(|l| in_a(l) && in_b(l))
        .collect();
    let left: Vec<char> = output
        .iter()
        .copied()
        .filter(|l| in_a(l) && !in_b(l))
        .collect();
    let right: Vec<char> = output
        .iter()
        .copied()
        .filter(|l| in_b(l) && !in_a(l))
        .collect();
    let contracted: Vec<char> = a_labels
        .iter()
        .copied()
        .filter(|l| in_b(l) && !in_out(l))
        .collect();
    let size = |labels: &[char]| labels.iter().map(|l| extent[l]).product::<usize>();
    let (batches, m, n, k) = (size(&batch), size(&left), size(&right), size(&contracted));
    let arrange = |values: &[f32], labels: &[char], shape: &[usize], order: &[&[char]]| {
        let perm: Vec<usize> = order
            .iter()
            .flat_map(|part| part.iter())
            .map(|l| labels.iter().position(|x| x == l).unwrap_or(0))
            .collect();
        let mut arranged = vec![0f32; values.len()];
        movement::transpose(values, shape, &perm, &mut arranged);
        arranged
    };
    let a_arranged = arrange(a_values, a_labels, &a.shape, &[&batch, &left, &contracted]);
    let b_arranged = arrange(b_values, b_labels, &b.shape, &[&batch, &contracted, &right]);
    let mut product = vec![0f32; batches * m * n];
    if k > 0 {
        for (index, c) in product.chunks_mut((m * n).max(1)).enumerate().take(batches) {
            let a_block = MatRef::row_major(&a_arranged[index * m * k..(index + 1) * m * k], m, k);
            let b_block = MatRef::row_major(&b_arranged[index * k * n..(index + 1) * k * n], k, n);
            sgemm(&a_block, &b_block, c, n, &Epilogue::NONE, 1);
        }
    }
    // [batch, left, right] to the output's order.
    let produced: Vec<char> = batch.iter().chain(&left).chain(&right).copied().collect();
    let produced_shape: Vec<usize> = produced.iter().map(|l| extent[l]).collect();
    let perm: Vec<usize> = output
        .iter()
        .map(|l| produced.iter().position(|x| x == l).unwrap_or(0))
        .collect();
    let mut out = vec![0f32; product.len()];
    movement::transpose(&product, &produced_shape, &perm, &mut out);
    Some(RtTensor {
        shape: output.iter().map(|l| extent[l]).collect(),
        data: RtData::F32(out),
    })
}
