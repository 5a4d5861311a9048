//! Element-wise ops, unary and broadcasting n-ary: Relu, LeakyRelu, PRelu, Clip, Sigmoid,
//! HardSigmoid, HardSwish, Tanh, Gelu, Erf, Softplus, Add/Sub/Mul/Div/Pow/Min/Max/Sum/Mean,
//! comparisons, logic, Where... (all opsets; Clip reads min/max from attributes before opset 11
//! and from inputs from 11 on).
//!
//! Cost: one formula for the family, `per-element cost × output elements`, where the per-element
//! cost is a (flops, transcendental) pair from the table below (e.g. Sigmoid = 1/(1+exp(-x)):
//! 2 FLOPs + 1 exp; HardSwish = x·min(max(αx+β,0),1): 5 FLOPs; Gelu = 0.5·x·(1+erf(x/√2)):
//! 4 FLOPs + 1 erf). A variadic op over n inputs costs (n−1) times the binary cost, Mean one more
//! division. Bytes: every input read once at its own (unbroadcast) size, the output written once.

use super::fold::broadcast_map;
use super::{broadcast_shapes, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{DType, TensorFact};

/// Per-element work of one op.
#[derive(Clone, Copy)]
struct ElementCost {
    flops: u64,
    transcendental: u64,
}

const fn ec(flops: u64, transcendental: u64) -> ElementCost {
    ElementCost {
        flops,
        transcendental,
    }
}

/// How an element-wise op's result type is derived.
#[derive(Clone, Copy, PartialEq)]
enum ResultType {
    SameAsInput,
    Bool,
}

struct ElementWise {
    per_element: ElementCost,
    result: ResultType,
    /// Variadic ops (Sum, Mean, Min, Max) repeat the binary cost per extra input.
    variadic: bool,
    /// Value semantics for constant folding; `None` when never needed for shapes.
    eval: Option<fn(&[f64], DType) -> f64>,
}

fn int_aware_div(args: &[f64], dtype: DType) -> f64 {
    let quotient = args[0] / args[1];
    if dtype.is_float() {
        quotient
    } else {
        quotient.trunc()
    }
}

fn b(v: bool) -> f64 {
    v as i64 as f64
}

macro_rules! ew {
    ($flops:expr, $tr:expr) => {
        ElementWise {
            per_element: ec($flops, $tr),
            result: ResultType::SameAsInput,
            variadic: false,
            eval: None,
        }
    };
    ($flops:expr, $tr:expr, $eval:expr) => {
        ElementWise {
            per_element: ec($flops, $tr),
            result: ResultType::SameAsInput,
            variadic: false,
            eval: Some($eval),
        }
    };
}

macro_rules! cmp {
    ($eval:expr) => {
        ElementWise {
            per_element: ec(1, 0),
            result: ResultType::Bool,
            variadic: false,
            eval: Some($eval),
        }
    };
}

static RELU: ElementWise = ew!(1, 0, |a, _| a[0].max(0.0));
static LEAKY_RELU: ElementWise = ew!(2, 0);
static ELU: ElementWise = ew!(3, 1);
static SELU: ElementWise = ew!(4, 1);
static CELU: ElementWise = ew!(4, 1);
static THRESHOLDED_RELU: ElementWise = ew!(1, 0);
static SIGMOID: ElementWise = ew!(2, 1);
static HARD_SIGMOID: ElementWise = ew!(4, 0);
static HARD_SWISH: ElementWise = ew!(5, 0);
static TANH: ElementWise = ew!(0, 1);
static GELU: ElementWise = ew!(4, 1);
static ERF: ElementWise = ew!(0, 1);
static SOFTPLUS: ElementWise = ew!(1, 2);
static SOFTSIGN: ElementWise = ew!(3, 0);
static MISH: ElementWise = ew!(2, 3);
static SQRT: ElementWise = ew!(0, 1, |a, _| a[0].sqrt());
static EXP: ElementWise = ew!(0, 1, |a, _| a[0].exp());
static LOG: ElementWise = ew!(0, 1, |a, _| a[0].ln());
static TRIG: ElementWise = ew!(0, 1);
static NEG: ElementWise = ew!(1, 0, |a, _| -a[0]);
static ABS: ElementWise = ew!(1, 0, |a, _| a[0].abs());
static RECIPROCAL: ElementWise = ew!(1, 0, |a, _| 1.0 / a[0]);
static FLOOR: ElementWise = ew!(1, 0, |a, _| a[0].floor());
static CEIL: ElementWise = ew!(1, 0, |a, _| a[0].ceil());
static ROUND: ElementWise = ew!(1, 0, |a, _| a[0].round_ties_even());
static SIGN: ElementWise = ew!(1, 0, |a, _| if a[0] > 0.0 {
    1.0
} else if a[0] < 0.0 {
    -1.0
} else {
    0.0
});
static CLIP: ElementWise = ew!(2, 0);
static ADD: ElementWise = ew!(1, 0, |a, _| a[0] + a[1]);
static SUB: ElementWise = ew!(1, 0, |a, _| a[0] - a[1]);
static MUL: ElementWise = ew!(1, 0, |a, _| a[0] * a[1]);
static DIV: ElementWise = ew!(1, 0, int_aware_div);
static POW: ElementWise = ew!(0, 1, |a, _| a[0].powf(a[1]));
static MOD: ElementWise = ew!(1, 0, |a, _| a[0] % a[1]);
static PRELU: ElementWise = ew!(2, 0);
static BITSHIFT: ElementWise = ew!(1, 0);
static WHERE: ElementWise = ew!(1, 0, |a, _| if a[0] != 0.0 { a[1] } else { a[2] });
static EQUAL: ElementWise = cmp!(|a, _| b(a[0] == a[1]));
static LESS: ElementWise = cmp!(|a, _| b(a[0] < a[1]));
static LESS_EQ: ElementWise = cmp!(|a, _| b(a[0] <= a[1]));
static GREATER: ElementWise = cmp!(|a, _| b(a[0] > a[1]));
static GREATER_EQ: ElementWise = cmp!(|a, _| b(a[0] >= a[1]));
static AND: ElementWise = cmp!(|a, _| b(a[0] != 0.0 && a[1] != 0.0));
static OR: ElementWise = cmp!(|a, _| b(a[0] != 0.0 || a[1] != 0.0));
static XOR: ElementWise = cmp!(|a, _| b((a[0] != 0.0) ^ (a[1] != 0.0)));
static NOT: ElementWise = cmp!(|a, _| b(a[0] == 0.0));
static IS_NAN: ElementWise = cmp!(|a, _| b(a[0].is_nan()));
static IS_INF: ElementWise = cmp!(|a, _| b(a[0].is_infinite()));
static SUM: ElementWise = ElementWise {
    per_element: ec(1, 0),
    result: ResultType::SameAsInput,
    variadic: true,
    eval: Some(|a, _| a.iter().sum()),
};
static MAX: ElementWise = ElementWise {
    per_element: ec(1, 0),
    result: ResultType::SameAsInput,
    variadic: true,
    eval: Some(|a, _| a.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
};
static MIN: ElementWise = ElementWise {
    per_element: ec(1, 0),
    result: ResultType::SameAsInput,
    variadic: true,
    eval: Some(|a, _| a.iter().copied().fold(f64::INFINITY, f64::min)),
};
static MEAN: ElementWise = ElementWise {
    per_element: ec(1, 0),
    result: ResultType::SameAsInput,
    variadic: true,
    eval: None,
};

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    let op: &'static ElementWise = match op_type {
        "Relu" => &RELU,
        "LeakyRelu" => &LEAKY_RELU,
        "Elu" => &ELU,
        "Selu" => &SELU,
        "Celu" => &CELU,
        "ThresholdedRelu" => &THRESHOLDED_RELU,
        "Sigmoid" => &SIGMOID,
        "HardSigmoid" => &HARD_SIGMOID,
        "HardSwish" => &HARD_SWISH,
        "Tanh" => &TANH,
        "Gelu" => &GELU,
        "Erf" => &ERF,
        "Softplus" => &SOFTPLUS,
        "Softsign" => &SOFTSIGN,
        "Mish" => &MISH,
        "Sqrt" => &SQRT,
        "Exp" => &EXP,
        "Log" => &LOG,
        "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh" | "Acosh"
        | "Atanh" => &TRIG,
        "Neg" => &NEG,
        "Abs" => &ABS,
        "Reciprocal" => &RECIPROCAL,
        "Floor" => &FLOOR,
        "Ceil" => &CEIL,
        "Round" => &ROUND,
        "Sign" => &SIGN,
        "Clip" => &CLIP,
        "Add" => &ADD,
        "Sub" => &SUB,
        "Mul" => &MUL,
        "Div" => &DIV,
        "Pow" => &POW,
        "Mod" => &MOD,
        "PRelu" => &PRELU,
        "BitShift" => &BITSHIFT,
        "Where" => &WHERE,
        "Equal" => &EQUAL,
        "Less" => &LESS,
        "LessOrEqual" => &LESS_EQ,
        "Greater" => &GREATER,
        "GreaterOrEqual" => &GREATER_EQ,
        "And" => &AND,
        "Or" => &OR,
        "Xor" => &XOR,
        "Not" => &NOT,
        "IsNaN" => &IS_NAN,
        "IsInf" => &IS_INF,
        "Sum" => &SUM,
        "Max" => &MAX,
        "Min" => &MIN,
        "Mean" => &MEAN,
        _ => return None,
    };
    Some(op)
}

impl OpDef for ElementWise {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let present: Vec<&TensorFact> = ctx.inputs.iter().flatten().copied().collect();
        // The evaluators index their operands: never hand them fewer than the schema requires.
        let least = crate::analysis::validate::arity(ctx.node.op_type).map_or(1, |a| a.0.max(1));
        if present.len() < least {
            return Err(format!(
                "{} operand(s) given, {least} required",
                present.len()
            ));
        }
        // Clip's optional min/max inputs are scalars: they do not shape the output.
        let shaping: Vec<&TensorFact> = if ctx.node.op_type == "Clip" {
            vec![present[0]]
        } else {
            present.clone()
        };
        // Where's data type is that of its second input (the first is the condition).
        let value_dtype = if ctx.node.op_type == "Where" && present.len() == 3 {
            present[1].dtype
        } else {
            present[0].dtype
        };
        let dtype = match self.result {
            ResultType::SameAsInput => value_dtype,
            ResultType::Bool => DType::Bool,
        };
        let shapes: Option<Vec<&[crate::analysis::tensor::Dim]>> =
            shaping.iter().map(|f| f.shape.as_deref()).collect();
        let Some(shapes) = shapes else {
            return Ok(vec![TensorFact::unknown(dtype)]);
        };
        let shape = broadcast_shapes(&shapes)?;
        if let Some(eval) = self.eval {
            let constants: Option<Vec<_>> = shaping.iter().map(|f| f.konst.as_deref()).collect();
            if let Some(constants) = constants {
                if let Some(tensor) =
                    broadcast_map(&constants, dtype, |args| eval(args, value_dtype))
                {
                    return Ok(vec![TensorFact::constant(tensor)]);
                }
            }
        }
        Ok(vec![TensorFact::new(dtype, shape)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let elements = ctx.output_elements(0)?;
        let input_count = ctx.inputs.iter().flatten().count() as u64;
        let repeats = if self.variadic {
            input_count.saturating_sub(1).max(1)
        } else {
            1
        };
        let mean_division = u64::from(ctx.node.op_type == "Mean");
        Ok(OpCost {
            flops: elements * (self.per_element.flops * repeats + mean_division),
            macs: 0,
            transcendental: elements * self.per_element.transcendental * repeats,
            bytes: ctx.default_traffic()?,
            is_view: false,
            compute_precision: None,
            vector_flops: 0,
        })
    }
}
