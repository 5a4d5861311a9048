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
            match (extents.get(&c), dim) {
                (Some(Dim::Known(1)) | None, _) => {
                    extents.insert(c, dim.clone());
                }
                // A size-1 extent broadcasts; two different sizes of one index cannot contract.
                (Some(Dim::Known(a)), Dim::Known(b)) if *b != 1 && a != b => {
                    return Err(super::invalid(format!(
                        "index `{c}` has extent {a} in one operand and {b} in another"
                    )));
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

#[cfg(test)]
mod cost_tests {
    //! Hand-computed Einsum cases: MACs = Π of the distinct index extents (× the broadcast `...`
    //! volume) for two operands, one FLOP per point of the index space for one operand.

    use super::super::tests::kit::{dims, f32s, traffic, Op};

    fn einsum(equation: &str) -> Op {
        Op::new("Einsum").string("equation", equation)
    }

    #[test]
    fn attention_scores() {
        let q = f32s(&[2, 12, 128, 64]);
        let (out, cost) = einsum("bhqd,bhkd->bhqk").run(&[&q, &q]);
        assert_eq!(dims(&out[0]), [2, 12, 128, 128]);
        // MACs = b·h·q·k·d = 2·12·128·128·64 = 25,165,824.
        assert_eq!(cost.macs, 25_165_824);
        assert_eq!(cost.flops, 2 * 25_165_824);
        // Two inputs of 196,608 elements read; 393,216 written (4 bytes each).
        assert_eq!(cost.bytes, traffic(0, 1_572_864, 1_572_864));
    }

    #[test]
    fn matmul_forms() {
        let (a, b) = (f32s(&[4, 8]), f32s(&[8, 5]));
        // MACs = i·j·k = 4·8·5 = 160.
        let (out, cost) = einsum("ij,jk->ik").run(&[&a, &b]);
        assert_eq!(dims(&out[0]), [4, 5]);
        assert_eq!(cost.macs, 160);
        // Implicit output: the indices seen once, alphabetically: `ik`.
        let (out, cost) = einsum("ij,jk").run(&[&a, &b]);
        assert_eq!(dims(&out[0]), [4, 5]);
        assert_eq!(cost.macs, 160);
        // Leading `...` broadcast: volume 3 × 4·8·5 = 480.
        let (out, cost) = einsum("...ij,...jk->...ik").run(&[&f32s(&[3, 4, 8]), &f32s(&[3, 8, 5])]);
        assert_eq!(dims(&out[0]), [3, 4, 5]);
        assert_eq!(cost.macs, 480);
    }

    #[test]
    fn single_operand_costs_one_flop_per_point() {
        let x = f32s(&[4, 8]);
        // Transpose: 4·8 = 32 points, no MACs.
        let (out, cost) = einsum("ij->ji").run(&[&x]);
        assert_eq!(dims(&out[0]), [8, 4]);
        assert_eq!((cost.flops, cost.macs), (32, 0));
        // Full sum to a scalar: 32 adds.
        let (out, cost) = einsum("ij->").run(&[&x]);
        assert_eq!(dims(&out[0]), Vec::<u64>::new());
        assert_eq!(cost.flops, 32);
    }

    #[test]
    fn trace_costs_the_index_space_not_the_input() {
        // The header says "one FLOP per input element" (25 here); the code charges one FLOP per
        // point of the distinct-index space, i = 5, which is the real work of a trace
        // (reported: the header should say so).
        let (_, cost) = einsum("ii->").run(&[&f32s(&[5, 5])]);
        assert_eq!(cost.flops, 5);
    }

    #[test]
    fn three_operand_chain() {
        // Distinct indices i, j, k, l: volume 2·3·4·5 = 120 points. The header says
        // MACs = 120; the code charges (operands − 1) = 2 multiply-adds per point, 240
        // (reported: the code is the better count of a one-loop-nest contraction).
        let (a, b, c) = (f32s(&[2, 3]), f32s(&[3, 4]), f32s(&[4, 5]));
        let (out, cost) = einsum("ij,jk,kl->il").run(&[&a, &b, &c]);
        assert_eq!(dims(&out[0]), [2, 5]);
        assert_eq!(cost.macs, 240);
        assert_eq!(cost.flops, 480);
    }

    #[test]
    fn equation_errors() {
        let (a, b) = (f32s(&[4, 8]), f32s(&[8, 5]));
        // Two terms for one operand, no equation, a digit in a term, an output index no input
        // has, an operand of rank 3 with two indices and no ellipsis.
        einsum("ij,jk->ik").fails(&[&a]);
        Op::new("Einsum").fails(&[&a, &b]);
        einsum("i1,jk->ik").fails(&[&a, &b]);
        einsum("ij->iz").fails(&[&a]);
        einsum("ij->ij").fails(&[&f32s(&[2, 4, 8])]);
    }

    #[test]
    fn mismatched_index_extents_are_invalid() {
        // j is 8 in the first operand and 7 in the second: no contraction exists.
        einsum("ij,jk->ik").invalid(&[&f32s(&[4, 8]), &f32s(&[7, 5])]);
    }
}
