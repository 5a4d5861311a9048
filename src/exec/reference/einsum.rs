//! Reference Einsum.

use super::*;

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
    // `...` becomes as many fresh upper-case labels as the broadcast dims it stands for.
    let ellipsis_rank = terms
        .iter()
        .zip(operands)
        .filter(|(t, _)| t.contains("..."))
        .map(|(t, o)| o.shape.len() + 3 - t.len())
        .max()
        .unwrap_or(0);
    // Labels past ASCII, so they never meet the equation's own letters.
    let ellipsis: String = (0..ellipsis_rank)
        .filter_map(|n| char::from_u32(0x100 + n as u32))
        .collect();
    let mut labels_of: Vec<Vec<char>> = Vec::new();
    for (term, operand) in terms.iter().zip(operands) {
        let own = if term.contains("...") {
            operand.shape.len() + 3 - term.len()
        } else {
            0
        };
        let expanded = term.replace("...", &ellipsis[ellipsis_rank - own..]);
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
        Some(r) => r.replace("...", &ellipsis).chars().collect(),
        None => {
            let mut counts: std::collections::BTreeMap<char, usize> = Default::default();
            for labels in &labels_of {
                for &l in labels {
                    *counts.entry(l).or_default() += 1;
                }
            }
            let mut out: Vec<char> = ellipsis.chars().collect();
            out.extend(
                counts
                    .into_iter()
                    .filter(|&(l, n)| n == 1 && l.is_ascii_alphabetic())
                    .map(|(l, _)| l),
            );
            out
        }
    };
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
