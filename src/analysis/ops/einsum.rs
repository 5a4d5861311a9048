//! Einsum (opset 12+): any equation with explicit or implicit output, with `...` broadcasting.
//!
//! Cost: a contraction loops once over every distinct index, so for two or more operands
//! MACs = Π over all distinct indices of their extent (× broadcast `...` volume), FLOPs = 2·MACs.
//! A single-operand equation (transpose, trace, sum) costs one FLOP per input element.

use std::collections::BTreeMap;

use super::{broadcast_shapes, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct Einsum;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    (op_type == "Einsum").then_some(&Einsum as &dyn OpDef)
}

struct Equation {
    inputs: Vec<(Vec<char>, bool)>,
    output: (Vec<char>, bool),
}

fn parse(equation: &str, operand_count: usize) -> OpResult<Equation> {
    let text: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match text.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (text.clone(), None),
    };
    let term = |s: &str| -> OpResult<(Vec<char>, bool)> {
        let ellipsis = s.contains("...");
        let letters: Vec<char> = s.replace("...", "").chars().collect();
        if letters.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(format!("bad einsum term `{s}`"));
        }
        Ok((letters, ellipsis))
    };
    let inputs = lhs.split(',').map(term).collect::<OpResult<Vec<_>>>()?;
    if inputs.len() != operand_count {
        return Err(format!(
            "equation `{equation}` names {} operands but the node has {operand_count}",
            inputs.len()
        ));
    }
    let output = match rhs {
        Some(r) => term(&r)?,
        None => {
            // Implicit output: indices that appear once, in alphabetical order.
            let mut counts: BTreeMap<char, usize> = BTreeMap::new();
            for (letters, _) in &inputs {
                for &c in letters {
                    *counts.entry(c).or_default() += 1;
                }
            }
            let letters = counts
                .into_iter()
                .filter(|&(_, n)| n == 1)
                .map(|(c, _)| c)
                .collect();
            (letters, inputs.iter().any(|(_, e)| *e))
        }
    };
    Ok(Equation { inputs, output })
}

/// Extent of every index letter and the broadcast `...` dims.
fn bind(eq: &Equation, shapes: &[&[Dim]]) -> OpResult<(BTreeMap<char, Dim>, Vec<Dim>)> {
    let mut extents: BTreeMap<char, Dim> = BTreeMap::new();
    let mut ellipsis_shapes: Vec<Vec<Dim>> = Vec::new();
    for ((letters, has_ellipsis), shape) in eq.inputs.iter().zip(shapes) {
        let extra = shape.len().checked_sub(letters.len()).ok_or_else(|| {
            format!(
                "operand of rank {} has {} indices",
                shape.len(),
                letters.len()
            )
        })?;
        if extra > 0 && !has_ellipsis {
            return Err(format!(
                "operand rank {} but {} indices",
                shape.len(),
                letters.len()
            ));
        }
        // The ellipsis sits where `...` is written; supported here at the front, the common case.
        ellipsis_shapes.push(shape[..extra].to_vec());
        for (&c, dim) in letters.iter().zip(&shape[extra..]) {
            match extents.get(&c) {
                Some(Dim::Known(1)) | None => {
                    extents.insert(c, dim.clone());
                }
                _ => {}
            }
        }
    }
    let refs: Vec<&[Dim]> = ellipsis_shapes.iter().map(Vec::as_slice).collect();
    Ok((extents, broadcast_shapes(&refs)?))
}

impl OpDef for Einsum {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let equation = ctx
            .attrs()
            .string("equation")
            .ok_or("missing `equation` attribute")?;
        let shapes: Vec<&[Dim]> = (0..ctx.inputs.len())
            .map(|i| ctx.input_shape(i))
            .collect::<OpResult<_>>()?;
        let eq = parse(equation, shapes.len())?;
        let (extents, ellipsis) = bind(&eq, &shapes)?;
        let mut shape = if eq.output.1 { ellipsis } else { Vec::new() };
        for c in &eq.output.0 {
            shape.push(
                extents
                    .get(c)
                    .cloned()
                    .ok_or_else(|| format!("output index `{c}` appears in no input"))?,
            );
        }
        Ok(vec![TensorFact::new(ctx.input(0)?.dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let equation = ctx.attrs().string("equation").unwrap_or_default();
        let facts: Vec<_> = ctx.inputs.iter().flatten().collect();
        let shapes: Vec<&[Dim]> = facts
            .iter()
            .map(|f| f.shape.as_deref().ok_or("unknown rank".to_string()))
            .collect::<OpResult<_>>()?;
        let eq = parse(equation, shapes.len())?;
        let (extents, ellipsis) = bind(&eq, &shapes)?;
        let known = |d: &Dim| d.known().ok_or_else(|| format!("dim {d} is not known"));
        let mut volume: u64 = 1;
        for d in extents.values().chain(ellipsis.iter()) {
            volume = volume.saturating_mul(known(d)?);
        }
        let (flops, macs) = if shapes.len() >= 2 {
            let macs = volume.saturating_mul(shapes.len() as u64 - 1);
            (2 * macs, macs)
        } else {
            (volume, 0)
        };
        Ok(OpCost {
            flops,
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
    use super::*;

    #[test]
    fn attention_scores_equation() {
        let eq = parse("bhqd,bhkd->bhqk", 2).unwrap();
        let q: Vec<Dim> = [2, 12, 128, 64].iter().map(|&d| Dim::Known(d)).collect();
        let k = q.clone();
        let (extents, _) = bind(&eq, &[&q, &k]).unwrap();
        let volume: u64 = extents.values().map(|d| d.known().unwrap()).product();
        assert_eq!(volume, 2 * 12 * 128 * 128 * 64);
    }

    #[test]
    fn implicit_output_is_alphabetical_singletons() {
        let eq = parse("ij,jk", 2).unwrap();
        assert_eq!(eq.output.0, vec!['i', 'k']);
    }
}
