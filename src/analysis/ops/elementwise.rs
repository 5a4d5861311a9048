//! Element-wise ops, unary and broadcasting n-ary: Relu, LeakyRelu, PRelu, Clip, Sigmoid,
//! HardSigmoid, HardSwish, Tanh, Gelu, Erf, Softplus, Add/Sub/Mul/Div/Pow/Min/Max/Sum/Mean,
//! comparisons, logic, bitwise (BitShift, BitwiseAnd/Or/Xor/Not: 1 op per element), Where... (all opsets; Clip reads min/max from attributes before opset 11
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
static BITWISE: ElementWise = ew!(1, 0);
static SHRINK: ElementWise = ew!(2, 0);
static SWISH: ElementWise = ew!(3, 1);
// SwiGLU (28): Swish of the gate times the value, one element of each.
static SWIGLU: ElementWise = ew!(4, 1);
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
// IsInf's detect_positive/detect_negative attributes are not visible to a folding closure: it
// is not folded, and runs on the executor's reference kernel.
static IS_INF: ElementWise = ElementWise {
    per_element: ec(1, 0),
    result: ResultType::Bool,
    variadic: false,
    eval: None,
};
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
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => &BITWISE,
        "Shrink" => &SHRINK,
        "Swish" => &SWISH,
        "SwiGLU" => &SWIGLU,
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

#[cfg(test)]
mod tests {
    //! Hand-computed element-wise cases: per-element (FLOPs, transcendental) × output elements;
    //! every input read once at its own size, the output written once.

    use super::super::tests::kit::{
        act, dims, f32_dims, f32s, ints, scalar, sym, traffic, values, w32, Op,
    };
    use crate::analysis::tensor::{DType, Dim, Tensor, TensorFact};
    use crate::device::Precision;

    #[test]
    fn relu_on_a_feature_map() {
        let x = f32s(&[1, 64, 56, 56]);
        let (out, cost) = Op::new("Relu").run(&[&x]);
        assert_eq!(dims(&out[0]), [1, 64, 56, 56]);
        // 64·56·56 = 200,704 elements, 1 FLOP each; 802,816 bytes in and out.
        assert_eq!(cost.flops, 200_704);
        assert_eq!((cost.macs, cost.transcendental), (0, 0));
        assert_eq!(cost.bytes, traffic(0, 802_816, 802_816));
    }

    #[test]
    fn per_element_table_matches_the_header() {
        let x = f32s(&[10]);
        // (FLOPs, transcendental) per element, from the header's examples and the table.
        for (op, flops, tr) in [
            ("Sigmoid", 2, 1), // 1/(1+exp(−x)): an add and a division, one exp
            ("HardSwish", 5, 0),
            ("Gelu", 4, 1),
            ("Tanh", 0, 1),
            ("Erf", 0, 1),
            ("Exp", 0, 1),
            ("Sqrt", 0, 1),
            ("Neg", 1, 0),
            ("LeakyRelu", 2, 0),
            ("HardSigmoid", 4, 0),
            ("Softplus", 1, 2),
            ("Mish", 2, 3),
            ("Cos", 0, 1),
        ] {
            let (_, cost) = Op::new(op).run(&[&x]);
            assert_eq!(
                (cost.flops, cost.transcendental),
                (10 * flops, 10 * tr),
                "{op}"
            );
            assert_eq!(cost.bytes, traffic(0, 40, 40), "{op}");
        }
    }

    #[test]
    fn pow_is_one_transcendental() {
        let (x, e) = (f32s(&[10]), scalar(DType::F32, 2.0));
        let (_, cost) = Op::new("Pow").run(&[&x, &e]);
        assert_eq!((cost.flops, cost.transcendental), (0, 10));
        // The constant exponent is a 4-byte weight.
        assert_eq!(cost.bytes, traffic(4, 40, 40));
    }

    #[test]
    fn binary_broadcast_reads_each_input_at_its_own_size() {
        let (x, b) = (f32s(&[2, 3, 4]), w32(&[4]));
        let (out, cost) = Op::new("Add").run(&[&x, &b]);
        assert_eq!(dims(&out[0]), [2, 3, 4]);
        // 24 outputs, 1 FLOP each; X 96 bytes, the [4] constant 16 bytes, Y 96 bytes.
        assert_eq!(cost.flops, 24);
        assert_eq!(cost.bytes, traffic(16, 96, 96));
        // Both sides broadcast: [2, 1] + [3] → [2, 3].
        let (out, cost) = Op::new("Mul").run(&[&f32s(&[2, 1]), &f32s(&[3])]);
        assert_eq!(dims(&out[0]), [2, 3]);
        assert_eq!(cost.bytes, traffic(0, 20, 24));
    }

    #[test]
    fn broadcast_with_symbols() {
        let n = f32_dims(vec![sym("N"), Dim::Known(4)]);
        let out = Op::new("Add").infer(&[&n, &f32s(&[1, 4])]);
        assert_eq!(out[0].shape.as_deref().unwrap(), [sym("N"), Dim::Known(4)]);
        // A symbol against a number > 1 is that number.
        let out = Op::new("Add").infer(&[&f32_dims(vec![sym("N")]), &f32s(&[3])]);
        assert_eq!(out[0].shape.as_deref().unwrap(), [Dim::Known(3)]);
    }

    #[test]
    fn broadcast_mismatch_is_invalid() {
        let reason = Op::new("Add").invalid(&[&f32s(&[2, 3]), &f32s(&[4])]);
        assert!(reason.contains("3 and 4"), "{reason}");
        Op::new("Where").invalid(&[&act(DType::Bool, &[2]), &f32s(&[3]), &f32s(&[3])]);
    }

    #[test]
    fn variadic_ops_repeat_the_binary_cost() {
        let x = f32s(&[8]);
        // Sum of 3: (3 − 1)·1 FLOP per element = 16; three 32-byte inputs.
        let (out, cost) = Op::new("Sum").run(&[&x, &x, &x]);
        assert_eq!(dims(&out[0]), [8]);
        assert_eq!(cost.flops, 16);
        assert_eq!(cost.bytes, traffic(0, 96, 32));
        // Mean of 3: 2 adds + 1 division per element = 24.
        assert_eq!(Op::new("Mean").run(&[&x, &x, &x]).1.flops, 24);
        // Max of 4 broadcasting inputs [4,1], [1,5], [5], scalar → [4, 5]: 3·20 = 60.
        let (out, cost) =
            Op::new("Max").run(&[&f32s(&[4, 1]), &f32s(&[1, 5]), &f32s(&[5]), &f32s(&[])]);
        assert_eq!(dims(&out[0]), [4, 5]);
        assert_eq!(cost.flops, 60);
        // A single input: the header's (n − 1) would be 0; the code charges one pass (8), the
        // copy a runtime makes (reported as a header imprecision).
        assert_eq!(Op::new("Sum").run(&[&x]).1.flops, 8);
    }

    #[test]
    fn comparisons_write_booleans() {
        let x = f32s(&[10]);
        let (out, cost) = Op::new("Equal").run(&[&x, &x]);
        assert_eq!(out[0].dtype, DType::Bool);
        // Two f32 inputs of 40 bytes; a 1-byte-per-element output.
        assert_eq!(cost.flops, 10);
        assert_eq!(cost.bytes, traffic(0, 80, 10));
        // At bf16 the floats halve, the booleans do not.
        let (_, half) = Op::new("Less").precision(Precision::Bf16).run(&[&x, &x]);
        assert_eq!(half.bytes, traffic(0, 40, 10));
        let b = act(DType::Bool, &[5]);
        let (out, cost) = Op::new("Not").run(&[&b]);
        assert_eq!(out[0].dtype, DType::Bool);
        assert_eq!(cost.bytes, traffic(0, 5, 5));
    }

    #[test]
    fn where_takes_the_type_of_its_values() {
        let cond = act(DType::Bool, &[2, 1]);
        let (x, y) = (f32s(&[1, 3]), scalar(DType::F32, 0.0));
        let (out, cost) = Op::new("Where").run(&[&cond, &x, &y]);
        assert_eq!(out[0].dtype, DType::F32);
        assert_eq!(dims(&out[0]), [2, 3]);
        assert_eq!(cost.flops, 6);
        // cond 2·1 + X 3·4 = 14 read; Y a 4-byte constant; out 6·4 = 24.
        assert_eq!(cost.bytes, traffic(4, 14, 24));
    }

    #[test]
    fn clip_bounds_do_not_shape_the_output() {
        let x = f32s(&[4, 4]);
        let (lo, hi) = (scalar(DType::F32, 0.0), scalar(DType::F32, 6.0));
        let (out, cost) = Op::new("Clip").run(&[&x, &lo, &hi]);
        assert_eq!(dims(&out[0]), [4, 4]);
        // 2 FLOPs (max, min) per element; the two scalar bounds are 4-byte weights.
        assert_eq!(cost.flops, 32);
        assert_eq!(cost.bytes, traffic(8, 64, 64));
        // Omitted min: only the max is read.
        let (_, cost) = Op::new("Clip").run_opt(&[Some(&x), None, Some(&hi)]);
        assert_eq!(cost.bytes, traffic(4, 64, 64));
        // Opset 6: bounds as attributes.
        let op = Op::new("Clip").opset(6).float("min", 0.0).float("max", 6.0);
        assert_eq!(op.run(&[&x]).1.bytes, traffic(0, 64, 64));
    }

    #[test]
    fn constants_fold() {
        // Shape arithmetic: [1, 2] + [10] = [11, 12].
        let (out, _) = Op::new("Add").run(&[&ints(&[1, 2]), &ints(&[10])]);
        assert_eq!(values(&out[0]), [11.0, 12.0]);
        assert_eq!(out[0].dtype, DType::I64);
        // Integer division truncates toward zero: [7, −7] / 2 = [3, −3].
        let (out, _) = Op::new("Div").run(&[&ints(&[7, -7]), &ints(&[2])]);
        assert_eq!(values(&out[0]), [3.0, -3.0]);
        // Float division does not: 7 / 2 = 3.5.
        let seven = TensorFact::constant(Tensor::from_f32(vec![1], vec![7.0]));
        let (out, _) = Op::new("Div").run(&[&seven, &scalar(DType::F32, 2.0)]);
        assert_eq!(values(&out[0]), [3.5]);
        // Comparisons fold to booleans.
        let (out, _) = Op::new("Equal").run(&[&ints(&[1, 2, 3]), &ints(&[2])]);
        assert_eq!(out[0].dtype, DType::Bool);
        assert_eq!(values(&out[0]), [0.0, 1.0, 0.0]);
        // Ops without an evaluator (Mean) give a plain fact even on constants.
        let (out, _) = Op::new("Mean").run(&[&ints(&[1, 2]), &ints(&[3, 4])]);
        assert!(out[0].konst.is_none());
    }

    #[test]
    fn missing_operands_and_unknown_ranks() {
        let err = Op::new("Add").fails(&[&f32s(&[4])]);
        assert!(err.contains("required"), "{err}");
        // An input of unknown rank gives an output of unknown rank (and no cost).
        let unknown = TensorFact::unknown(DType::F32);
        let out = Op::new("Relu").infer(&[&unknown]);
        assert!(out[0].shape.is_none());
        assert!(Op::new("Relu")
            .try_cost_opt(&[Some(&unknown)], &out)
            .is_err());
    }
}
