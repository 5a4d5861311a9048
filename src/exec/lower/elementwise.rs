//! Element-wise ops: unary activations and math (`Relu` … `Clip`), broadcasting binary ops
//! (`Add` … `Mod`, `PRelu`), variadic `Sum` / `Mean` / `Max` / `Min`, `Where`, and the tool's
//! `ElementwiseChain` (a fused run of them), comparisons (booleans, held as i64, or floats
//! straight into the Cast that alone reads them); logic ops go to the generic evaluator.
//! Large flat steps are split over the plan's threads.

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::graph::Attributes;
use crate::analysis::ops::fused::chain::{BinaryOp, MathOp, UnaryStep};
use crate::analysis::ops::fused::{Activation, ChainStep};
use crate::analysis::tensor::DType;
use crate::exec::cpu::{InRef, Io};
use crate::exec::{ExecError, RtData, RtTensor};
use crate::kernels::compare::{self, CompareOut, Comparison, SelectLayout};
use crate::kernels::elementwise::{self, Binary, BroadcastLayout, Unary};
use crate::kernels::movement;
use crate::kernels::parallel::{par_pieces, VECTOR_ALIGN};

#[derive(Clone, Debug)]
pub(crate) enum ElementwiseKernel {
    /// A fused element-wise chain; per-channel constants index axis 1.
    Chain {
        steps: Vec<elementwise::ChainStep>,
        channels: usize,
        channel_size: usize,
    },
    Unary(Unary),
    Binary {
        op: Binary,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
        out_shape: Vec<usize>,
        /// The broadcast's row layout, derived once when the plan is built.
        layout: BroadcastLayout,
    },
    Variadic {
        op: Binary,
        mean: bool,
        shapes: Vec<Vec<usize>>,
        out_shape: Vec<usize>,
    },
    Where {
        /// The operands' strides along the output, derived once when the plan is built.
        layout: SelectLayout,
    },
    /// A comparison of two floats or two integers, written as booleans (integers), or as
    /// 0.0 / 1.0 into the float output of the `Cast` it feeds alone (`analysis::compare_casts`).
    Compare {
        op: Comparison,
        layout: BroadcastLayout,
        out_shape: Vec<usize>,
        to_float: bool,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    match (domain, op) {
        (Domain::Tool, "ElementwiseChain") => Lowering::floats(lower_chain),
        (Domain::Onnx, "Where") => Lowering::floats(lower_where),
        (Domain::Onnx, _) if binary_of(op).is_some() => Lowering::floats(lower_binary),
        (Domain::Onnx, _) if unary_of(op, &Attributes::default(), &[]).is_some() => {
            Lowering::floats(lower_unary)
        }
        (Domain::Onnx, _) if comparison_of(op).is_some() => Lowering::integers(lower_compare),
        (Domain::Onnx, "And" | "Or" | "Not" | "Xor") => {
            Lowering::floats(|_| Ok(Lowered::generic()))
        }
        _ => None,
    }
}

fn unary_of(op_type: &str, attrs: &Attributes, consts: &[Option<f32>]) -> Option<Unary> {
    Some(match op_type {
        "Relu" => Unary::Relu,
        "LeakyRelu" => Unary::LeakyRelu(attrs.float_or("alpha", 0.01)),
        "Sigmoid" => Unary::Sigmoid,
        "HardSigmoid" => {
            Unary::HardSigmoid(attrs.float_or("alpha", 0.2), attrs.float_or("beta", 0.5))
        }
        "HardSwish" => Unary::HardSwish,
        "Tanh" => Unary::Tanh,
        "Gelu" => Unary::Gelu,
        "Erf" => Unary::Erf,
        "Softplus" => Unary::Softplus,
        "Softsign" => Unary::Softsign,
        "Sqrt" => Unary::Sqrt,
        "Exp" => Unary::Exp,
        "Log" => Unary::Log,
        "Neg" => Unary::Neg,
        "Abs" => Unary::Abs,
        "Reciprocal" => Unary::Reciprocal,
        "Floor" => Unary::Floor,
        "Ceil" => Unary::Ceil,
        "Round" => Unary::Round,
        "Sign" => Unary::Sign,
        "Elu" => Unary::Elu(attrs.float_or("alpha", 1.0)),
        "Selu" => Unary::Selu(
            attrs.float_or("alpha", 1.673_263_2),
            attrs.float_or("gamma", 1.050_701),
        ),
        "Mish" => Unary::Mish,
        "Sin" => Unary::Sin,
        "Cos" => Unary::Cos,
        "Clip" => {
            let lo = attrs
                .float("min")
                .or(consts.get(1).copied().flatten())
                .unwrap_or(f32::NEG_INFINITY);
            let hi = attrs
                .float("max")
                .or(consts.get(2).copied().flatten())
                .unwrap_or(f32::INFINITY);
            Unary::Clip(lo, hi)
        }
        _ => return None,
    })
}

fn binary_of(op_type: &str) -> Option<Binary> {
    Some(match op_type {
        "Add" | "Sum" => Binary::Add,
        "Sub" => Binary::Sub,
        "Mul" => Binary::Mul,
        "Div" => Binary::Div,
        "Pow" => Binary::Pow,
        "Max" => Binary::Max,
        "Min" => Binary::Min,
        "PRelu" => Binary::PRelu,
        "Mod" => Binary::Mod,
        "Mean" => Binary::Add,
        _ => return None,
    })
}

fn lower_unary(cx: &Cx) -> Result<Lowered, ExecError> {
    let consts: Vec<Option<f32>> = (0..cx.node.inputs.len())
        .map(|i| cx.const_scalar(i))
        .collect();
    // Clip bounds given at run time: the kernel bakes its bounds in, the reference reads them.
    if cx.op() == "Clip" && (1..=2).any(|i| cx.input(i).is_some() && consts[i].is_none()) {
        return Ok(Lowered::new(Kernel::Generic));
    }
    // Gelu's tanh approximation (opset 20) is the reference kernel's.
    if cx.op() == "Gelu"
        && cx
            .attrs()
            .string("approximate")
            .is_some_and(|a| a != "none")
    {
        return Ok(Lowered::new(Kernel::Generic));
    }
    Ok(Lowered::new(match unary_of(cx.op(), cx.attrs(), &consts) {
        Some(u) => Kernel::Elementwise(ElementwiseKernel::Unary(u)),
        None => Kernel::Generic,
    }))
}

fn lower_binary(cx: &Cx) -> Result<Lowered, ExecError> {
    let op = cx.op();
    // Mod's two semantics (floored for integers, C fmod with `fmod = 1`) are the reference's.
    if op == "Mod" {
        return Ok(Lowered::new(Kernel::Generic));
    }
    let b = binary_of(op).ok_or_else(|| cx.error("not a binary op"))?;
    if matches!(op, "Sum" | "Mean" | "Max" | "Min") && cx.node.inputs.len() != 2 {
        let shapes = (0..cx.node.inputs.len())
            .map(|i| cx.shape_of(i))
            .collect::<Result<_, _>>()?;
        return Ok(Lowered::new(Kernel::Elementwise(
            ElementwiseKernel::Variadic {
                op: b,
                mean: op == "Mean",
                shapes,
                out_shape: cx.out_shape(0)?,
            },
        )));
    }
    let (a_shape, b_shape, o) = (cx.shape_of(0)?, cx.shape_of(1)?, cx.out_shape(0)?);
    let flops = o.iter().product::<usize>() as u64;
    // `x ^ c` with a constant scalar c: the unary power (x³ by multiplies, not `powf`).
    if op == "Pow" && a_shape == o {
        if let Some(&[exponent]) = cx.const_f32(1).as_deref().map(Vec::as_slice) {
            return Ok(Lowered::new(Kernel::Elementwise(ElementwiseKernel::Unary(
                Unary::PowScalar(exponent),
            )))
            .with_flops(flops));
        }
    }
    let kernel = if op == "Mean" {
        ElementwiseKernel::Variadic {
            op: b,
            mean: true,
            shapes: vec![a_shape, b_shape],
            out_shape: o,
        }
    } else {
        ElementwiseKernel::Binary {
            op: b,
            layout: BroadcastLayout::new(&a_shape, &b_shape, &o),
            a_shape,
            b_shape,
            out_shape: o,
        }
    };
    Ok(Lowered::new(Kernel::Elementwise(kernel)).with_flops(flops))
}

fn lower_where(cx: &Cx) -> Result<Lowered, ExecError> {
    Ok(Lowered::new(Kernel::Elementwise(
        ElementwiseKernel::Where {
            layout: SelectLayout::new(
                [&cx.shape_of(0)?, &cx.shape_of(1)?, &cx.shape_of(2)?],
                &cx.out_shape(0)?,
            ),
        },
    )))
}

fn comparison_of(op_type: &str) -> Option<Comparison> {
    Some(match op_type {
        "Equal" => Comparison::Equal,
        "Less" => Comparison::Less,
        "Greater" => Comparison::Greater,
        "LessOrEqual" => Comparison::LessOrEqual,
        "GreaterOrEqual" => Comparison::GreaterOrEqual,
        _ => return None,
    })
}

fn lower_compare(cx: &Cx) -> Result<Lowered, ExecError> {
    let op = comparison_of(cx.op()).ok_or_else(|| cx.error("not a comparison"))?;
    // Strings compare through the reference evaluator.
    if cx
        .facts
        .iter()
        .flatten()
        .any(|fact| fact.dtype == DType::String)
    {
        return Ok(Lowered::generic());
    }
    let (a_shape, b_shape, out_shape) = (cx.shape_of(0)?, cx.shape_of(1)?, cx.out_shape(0)?);
    let flops = out_shape.iter().product::<usize>() as u64;
    Ok(
        Lowered::new(Kernel::Elementwise(ElementwiseKernel::Compare {
            op,
            layout: BroadcastLayout::new(&a_shape, &b_shape, &out_shape),
            out_shape,
            to_float: false,
        }))
        .with_flops(flops),
    )
}

/// Makes a comparison write floats (the step of an `analysis::compare_casts` pair); false
/// when `kernel` is not a comparison.
pub(crate) fn compare_writes_floats(kernel: &mut Kernel) -> bool {
    match kernel {
        Kernel::Elementwise(ElementwiseKernel::Compare { to_float, .. }) => {
            *to_float = true;
            true
        }
        _ => false,
    }
}

fn lower_chain(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.out_shape(0)?;
    let steps = ChainStep::from_attrs(cx.attrs(), cx.node.inputs.len()).map_err(|e| cx.error(e))?;
    let mut lowered = Vec::with_capacity(steps.len());
    for step in &steps {
        lowered.push(kernel_step(step, cx).map_err(|e| cx.error(e))?);
    }
    let channels = if x.len() >= 2 { x[1] } else { 1 };
    Ok(Lowered::new(Kernel::Elementwise(
        ElementwiseKernel::Chain {
            steps: with_affine_pairs(lowered),
            channels,
            channel_size: x.iter().skip(2).product(),
        },
    )))
}

/// The steps with each constant Mul followed by a constant Add (or Sub of a constant) made one
/// affine step, which the kernel runs in one pass (with an activation right after it, if any).
/// Other pairs (an Add before a Mul, a Div) stay two steps; the `eltwise` pass composes runs of
/// three or more.
fn with_affine_pairs(steps: Vec<elementwise::ChainStep>) -> Vec<elementwise::ChainStep> {
    use elementwise::ChainStep::{Affine, WithConstant};
    let mut out: Vec<elementwise::ChainStep> = Vec::with_capacity(steps.len());
    for step in steps {
        let shift = match &step {
            WithConstant {
                op: Binary::Add,
                values,
                ..
            } => Some(values.clone()),
            WithConstant {
                op: Binary::Sub,
                values,
                swapped: false,
            } => Some(values.iter().map(|&c| -c).collect()),
            _ => None,
        };
        if let (
            Some(shift),
            Some(WithConstant {
                op: Binary::Mul,
                values: scale,
                ..
            }),
        ) = (shift, out.last())
        {
            let scale = scale.clone();
            *out.last_mut().expect("checked above") = Affine { scale, shift };
            continue;
        }
        out.push(step);
    }
    out
}

/// The kernel's form of one chain step (the vocabulary is `analysis::ops::fused::chain`).
fn kernel_step(step: &ChainStep, cx: &Cx) -> Result<elementwise::ChainStep, String> {
    Ok(match *step {
        ChainStep::Unary(unary) => elementwise::ChainStep::Unary(kernel_unary(unary)?),
        ChainStep::Const { op, index, swapped } => {
            let values = cx
                .const_f32(index)
                .ok_or("chain operand must be constant")?;
            match (op, swapped, values.as_slice()) {
                // A constant scalar exponent: the unary power, with its multiply-only paths.
                (BinaryOp::Pow, false, &[exponent]) => {
                    elementwise::ChainStep::Unary(Unary::PowScalar(exponent))
                }
                _ => elementwise::ChainStep::WithConstant {
                    op: kernel_binary(op),
                    values: values.to_vec(),
                    swapped,
                },
            }
        }
        ChainStep::Input { op, swapped } => elementwise::ChainStep::WithInput {
            op: kernel_binary(op),
            swapped,
        },
    })
}

/// The element-wise kernel of a unary chain step; SiLU (`x·σ(x)` of the step's own input) has
/// none.
fn kernel_unary(step: UnaryStep) -> Result<Unary, String> {
    Ok(match step {
        UnaryStep::Activation(a) => match a {
            Activation::Relu => Unary::Relu,
            Activation::Clip { min, max } => Unary::Clip(min, max),
            Activation::LeakyRelu { alpha } => Unary::LeakyRelu(alpha),
            Activation::HardSigmoid { alpha, beta } => Unary::HardSigmoid(alpha, beta),
            Activation::HardSwish => Unary::HardSwish,
            Activation::Sigmoid => Unary::Sigmoid,
            Activation::Tanh => Unary::Tanh,
            Activation::Gelu => Unary::Gelu,
            Activation::None | Activation::Silu => {
                return Err(format!("no element-wise kernel for the chain step `{a}`"))
            }
        },
        UnaryStep::Math(m) => match m {
            MathOp::Exp => Unary::Exp,
            MathOp::Log => Unary::Log,
            MathOp::Sqrt => Unary::Sqrt,
            MathOp::Neg => Unary::Neg,
            MathOp::Abs => Unary::Abs,
            MathOp::Reciprocal => Unary::Reciprocal,
            MathOp::Erf => Unary::Erf,
        },
    })
}

fn kernel_binary(op: BinaryOp) -> Binary {
    match op {
        BinaryOp::Add => Binary::Add,
        BinaryOp::Sub => Binary::Sub,
        BinaryOp::Mul => Binary::Mul,
        BinaryOp::Div => Binary::Div,
        BinaryOp::Pow => Binary::Pow,
        BinaryOp::Max => Binary::Max,
        BinaryOp::Min => Binary::Min,
    }
}

pub(crate) fn run(kernel: &ElementwiseKernel, io: &mut Io) -> Result<(), String> {
    let threads = io.threads;
    match kernel {
        ElementwiseKernel::Chain {
            steps,
            channels,
            channel_size,
        } => {
            let (x, block) = (io.x(0)?, (*channel_size).max(1));
            par_pieces(io.outs[0], block, threads, |off, y| {
                let xs = &x[off..off + y.len()];
                elementwise::chain(steps, xs, y, off / block, *channels, *channel_size)
            });
        }
        ElementwiseKernel::Unary(op) => {
            let x = io.x(0)?;
            par_pieces(io.outs[0], VECTOR_ALIGN, threads, |off, y| {
                elementwise::unary(*op, &x[off..off + y.len()], y)
            });
        }
        ElementwiseKernel::Binary {
            op,
            a_shape,
            b_shape,
            out_shape,
            layout,
        } => {
            let (a, b) = (io.x(0)?, io.x(1)?);
            if a_shape == out_shape && b_shape == out_shape {
                // Same shapes (a residual Add): split flat.
                par_pieces(io.outs[0], VECTOR_ALIGN, threads, |off, y| {
                    let n = y.len();
                    let piece = [n];
                    let (a, b) = (&a[off..off + n], &b[off..off + n]);
                    elementwise::binary(*op, a, &piece, b, &piece, y, &piece);
                });
            } else if b.len() == 1 && a.len() == io.outs[0].len() {
                par_pieces(io.outs[0], VECTOR_ALIGN, threads, |off, y| {
                    elementwise::binary_scalar_rhs(*op, &a[off..off + y.len()], b[0], y)
                });
            } else if a.len() == 1 && b.len() == io.outs[0].len() {
                par_pieces(io.outs[0], VECTOR_ALIGN, threads, |off, y| {
                    elementwise::binary_scalar_lhs(*op, a[0], &b[off..off + y.len()], y)
                });
            } else {
                // Broadcast (a per-channel scale, a bias row): threads take whole rows.
                let row = layout.row_len().max(1);
                par_pieces(io.outs[0], row, threads, |off, y| {
                    elementwise::binary_rows(*op, a, b, y, layout, off / row)
                });
            }
        }
        ElementwiseKernel::Variadic {
            op,
            mean,
            shapes,
            out_shape,
        } => {
            let count = shapes.len();
            movement::broadcast(io.x(0)?, &shapes[0], out_shape, io.outs[0]);
            let mut tmp = vec![0.0; io.outs[0].len()];
            for (i, shape) in shapes.iter().enumerate().skip(1) {
                let xi = io.x(i)?;
                elementwise::binary(*op, io.outs[0], out_shape, xi, shape, &mut tmp, out_shape);
                io.outs[0].copy_from_slice(&tmp);
            }
            if *mean {
                io.outs[0].iter_mut().for_each(|v| *v /= count as f32);
            }
        }
        ElementwiseKernel::Where { layout } => {
            let (a, b) = (io.x(1)?, io.x(2)?);
            let row = layout.row_len().max(1);
            match io.input(0)? {
                InRef::I64(cond) => par_pieces(io.outs[0], row, threads, |off, y| {
                    compare::select(cond, a, b, layout, y, off / row)
                }),
                InRef::F32(cond) => par_pieces(io.outs[0], row, threads, |off, y| {
                    compare::select(cond, a, b, layout, y, off / row)
                }),
            }
        }
        ElementwiseKernel::Compare {
            op,
            layout,
            out_shape,
            to_float,
        } => {
            let (a, b) = (io.input(0)?, io.input(1)?);
            let compare_into = |out: CompareOut| -> Result<(), String> {
                match (a, b) {
                    (InRef::I64(a), InRef::I64(b)) => compare::compare(*op, a, b, layout, out),
                    (InRef::F32(a), InRef::F32(b)) => compare::compare(*op, a, b, layout, out),
                    _ => return Err("comparison of a float with an integer tensor".into()),
                }
                Ok(())
            };
            if *to_float {
                compare_into(CompareOut::Floats(&mut *io.outs[0]))?;
            } else {
                let mut result = io.integers(out_shape.iter().product());
                compare_into(CompareOut::Ints(&mut result))?;
                io.dynamic_out.push(RtTensor {
                    shape: out_shape.clone(),
                    data: RtData::I64(result),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_steps_map_to_kernels_or_fail() {
        let unary = |s: &str| match ChainStep::parse(s).unwrap() {
            ChainStep::Unary(u) => kernel_unary(u),
            other => panic!("{other} is not unary"),
        };
        assert!(
            matches!(unary("unary:clip:0:6"), Ok(Unary::Clip(lo, hi)) if lo == 0.0 && hi == 6.0)
        );
        assert!(matches!(
            unary("unary:reciprocal:0:0"),
            Ok(Unary::Reciprocal)
        ));
        // SiLU is a valid step (analysis costs it, export expands it) with no kernel: an error,
        // not a silent identity.
        let err = unary("unary:silu:0:0").unwrap_err();
        assert!(err.contains("no element-wise kernel"), "{err}");
    }

    #[test]
    fn a_constant_mul_then_add_or_sub_becomes_one_affine_step() {
        use elementwise::ChainStep::{Affine, WithConstant};
        let konst = |op, values: &[f32], swapped| WithConstant {
            op,
            values: values.to_vec(),
            swapped,
        };
        let relu = elementwise::ChainStep::Unary(Unary::Relu);
        let composed = with_affine_pairs(vec![
            konst(Binary::Mul, &[2.0, 3.0], true),
            konst(Binary::Add, &[1.0], false),
            relu.clone(),
            konst(Binary::Mul, &[4.0], false),
            konst(Binary::Sub, &[0.5, 1.5], false),
        ]);
        assert_eq!(
            composed,
            [
                Affine {
                    scale: vec![2.0, 3.0],
                    shift: vec![1.0]
                },
                relu.clone(),
                Affine {
                    scale: vec![4.0],
                    shift: vec![-0.5, -1.5]
                },
            ]
        );
        // c − x, Add before Mul and a Div are not x·s + b with these constants: kept.
        let kept = vec![
            konst(Binary::Mul, &[2.0], false),
            konst(Binary::Sub, &[1.0], true),
            konst(Binary::Add, &[1.0], false),
            konst(Binary::Mul, &[2.0], false),
            konst(Binary::Div, &[2.0], false),
        ];
        assert_eq!(with_affine_pairs(kept.clone()), kept);
    }
}
