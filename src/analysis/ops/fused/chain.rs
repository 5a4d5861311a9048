//! The steps of an `ElementwiseChain` (attribute `steps`, one string per step), and the one
//! vocabulary every layer uses for them:
//!
//! - `unary:NAME:A:B`: an activation of [`Activation`] other than `none` with its parameters
//!   `A`, `B` (0 where unused), or one of `exp`, `log`, `sqrt`, `neg`, `abs`, `reciprocal`,
//!   `erf` (written with `0:0`);
//! - `const:OP:INDEX:SWAPPED`: `x ← OP(x, input INDEX)` with a constant operand (a scalar or one
//!   value per channel), `OP(input INDEX, x)` when `SWAPPED` is 1;
//! - `input:OP:SWAPPED`: the same with the chain's own input X as the operand;
//!
//! with `OP` one of `add`, `sub`, `mul`, `div`, `pow`, `max`, `min`. [`ChainStep::parse`] and
//! `Display` read and write the strings, [`ChainStep::cost`] is the per-element cost, the
//! `onnx_op`s name the standard operators export writes and the advisor recognises. The kernels'
//! steps are the executor's mapping (`exec/lower/elementwise.rs`). A step that does not parse
//! is an error everywhere.

use super::activation::Activation;
use crate::analysis::graph::{Attr, Attributes};

/// The attribute holding the steps.
pub const ATTR: &str = "steps";

/// One step of a chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChainStep {
    Unary(UnaryStep),
    /// `x ← op(x, c)` with the constant input `index` (≥ 1) of the node; `op(c, x)` if `swapped`.
    Const {
        op: BinaryOp,
        index: usize,
        swapped: bool,
    },
    /// `x ← op(x, X)` with the chain's input X; `op(X, x)` if `swapped`.
    Input {
        op: BinaryOp,
        swapped: bool,
    },
}

/// A one-input step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryStep {
    /// Any activation but `none`.
    Activation(Activation),
    Math(MathOp),
}

/// The element-wise math a chain runs besides activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathOp {
    Exp,
    Log,
    Sqrt,
    Neg,
    Abs,
    Reciprocal,
    Erf,
}

/// The binary op of a `const` or `input` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
}

const MATH: [MathOp; 7] = [
    MathOp::Exp,
    MathOp::Log,
    MathOp::Sqrt,
    MathOp::Neg,
    MathOp::Abs,
    MathOp::Reciprocal,
    MathOp::Erf,
];

const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Max,
    BinaryOp::Min,
];

impl MathOp {
    pub fn name(self) -> &'static str {
        match self {
            MathOp::Exp => "exp",
            MathOp::Log => "log",
            MathOp::Sqrt => "sqrt",
            MathOp::Neg => "neg",
            MathOp::Abs => "abs",
            MathOp::Reciprocal => "reciprocal",
            MathOp::Erf => "erf",
        }
    }

    /// The standard ONNX operator.
    pub fn onnx_op(self) -> &'static str {
        match self {
            MathOp::Exp => "Exp",
            MathOp::Log => "Log",
            MathOp::Sqrt => "Sqrt",
            MathOp::Neg => "Neg",
            MathOp::Abs => "Abs",
            MathOp::Reciprocal => "Reciprocal",
            MathOp::Erf => "Erf",
        }
    }

    /// The math op of a standard ONNX operator.
    pub fn of_onnx(op_type: &str) -> Option<MathOp> {
        MATH.into_iter().find(|m| m.onnx_op() == op_type)
    }

    /// (FLOPs, transcendental) per element.
    pub fn cost(self) -> (u64, u64) {
        match self {
            MathOp::Neg | MathOp::Abs | MathOp::Reciprocal => (1, 0),
            MathOp::Exp | MathOp::Log | MathOp::Sqrt | MathOp::Erf => (0, 1),
        }
    }
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
        }
    }

    /// The standard ONNX operator.
    pub fn onnx_op(self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
        }
    }

    /// The binary op of a standard ONNX operator.
    pub fn of_onnx(op_type: &str) -> Option<BinaryOp> {
        BINARY.into_iter().find(|b| b.onnx_op() == op_type)
    }

    fn from_name(name: &str) -> Result<BinaryOp, String> {
        BINARY
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| format!("unknown binary op `{name}`"))
    }

    /// (FLOPs, transcendental) per element.
    pub fn cost(self) -> (u64, u64) {
        match self {
            BinaryOp::Pow => (0, 1),
            _ => (1, 0),
        }
    }
}

impl UnaryStep {
    fn name(self) -> &'static str {
        match self {
            UnaryStep::Activation(a) => a.name(),
            UnaryStep::Math(m) => m.name(),
        }
    }

    fn params(self) -> (f32, f32) {
        match self {
            UnaryStep::Activation(a) => a.params(),
            UnaryStep::Math(_) => (0.0, 0.0),
        }
    }
}

impl ChainStep {
    /// Decodes one step string.
    pub fn parse(step: &str) -> Result<ChainStep, String> {
        let bad = |why: String| format!("bad chain step `{step}`: {why}");
        let float = |s: &str| {
            s.parse::<f32>()
                .map_err(|_| bad(format!("`{s}` is not a number")))
        };
        let swapped = |s: &str| match s {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(bad(format!("`{s}` is not 0 or 1"))),
        };
        let binary = |s: &str| BinaryOp::from_name(s).map_err(bad);
        let parts: Vec<&str> = step.split(':').collect();
        Ok(match parts.as_slice() {
            ["unary", name, a, b] => {
                let (a, b) = (float(a)?, float(b)?);
                let unary = match MATH.into_iter().find(|m| m.name() == *name) {
                    Some(m) => UnaryStep::Math(m),
                    None => match Activation::from_name(name, a, b).map_err(bad)? {
                        Activation::None => return Err(bad("`none` is not a step".into())),
                        act => UnaryStep::Activation(act),
                    },
                };
                ChainStep::Unary(unary)
            }
            ["const", op, index, s] => {
                let index = match index.parse::<usize>() {
                    Ok(i) if i >= 1 => i,
                    _ => return Err(bad(format!("operand `{index}` is not an input index ≥ 1"))),
                };
                ChainStep::Const {
                    op: binary(op)?,
                    index,
                    swapped: swapped(s)?,
                }
            }
            ["input", op, s] => ChainStep::Input {
                op: binary(op)?,
                swapped: swapped(s)?,
            },
            _ => {
                return Err(bad(
                    "expected unary:NAME:A:B, const:OP:INDEX:SWAPPED or input:OP:SWAPPED".into(),
                ))
            }
        })
    }

    /// The steps of a node's attributes, checked against its `inputs` count (every `const`
    /// operand must be one of them). A chain without steps is an error.
    pub fn from_attrs(attrs: &Attributes, inputs: usize) -> Result<Vec<ChainStep>, String> {
        let strings = match attrs.get(ATTR) {
            Some(Attr::Strings(s)) if !s.is_empty() => s,
            Some(Attr::Strings(_)) => return Err(format!("`{ATTR}` is empty")),
            Some(_) => return Err(format!("`{ATTR}` must be a list of strings")),
            None => return Err(format!("missing `{ATTR}`")),
        };
        strings
            .iter()
            .map(|s| {
                let step = ChainStep::parse(s)?;
                match step {
                    ChainStep::Const { index, .. } if index >= inputs => Err(format!(
                        "chain step `{s}` reads input {index}, the node has {inputs}"
                    )),
                    _ => Ok(step),
                }
            })
            .collect()
    }

    /// The `steps` attribute of `steps`.
    pub fn to_attr(steps: &[ChainStep]) -> Attr {
        Attr::Strings(steps.iter().map(|s| s.to_string()).collect())
    }

    /// (FLOPs, transcendental) per element.
    pub fn cost(&self) -> (u64, u64) {
        match self {
            ChainStep::Unary(UnaryStep::Activation(a)) => a.cost(),
            ChainStep::Unary(UnaryStep::Math(m)) => m.cost(),
            ChainStep::Const { op, .. } | ChainStep::Input { op, .. } => op.cost(),
        }
    }
}

impl std::fmt::Display for ChainStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ChainStep::Unary(u) => {
                let (a, b) = u.params();
                write!(f, "unary:{}:{a}:{b}", u.name())
            }
            ChainStep::Const { op, index, swapped } => {
                write!(f, "const:{}:{index}:{}", op.name(), u8::from(swapped))
            }
            ChainStep::Input { op, swapped } => {
                write!(f, "input:{}:{}", op.name(), u8::from(swapped))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_their_strings() {
        for s in [
            "unary:relu:0:0",
            "unary:clip:0:6",
            "unary:clip:-inf:6",
            "unary:leaky_relu:0.2:0",
            "unary:hard_sigmoid:0.2:0.5",
            "unary:silu:0:0",
            "unary:exp:0:0",
            "unary:reciprocal:0:0",
            "const:mul:1:0",
            "const:pow:2:1",
            "input:add:0",
            "input:div:1",
        ] {
            assert_eq!(ChainStep::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            ChainStep::parse("const:sub:3:1"),
            Ok(ChainStep::Const {
                op: BinaryOp::Sub,
                index: 3,
                swapped: true
            })
        );
        for op in BINARY {
            assert_eq!(BinaryOp::of_onnx(op.onnx_op()), Some(op));
        }
        for m in MATH {
            assert_eq!(MathOp::of_onnx(m.onnx_op()), Some(m));
        }
    }

    #[test]
    fn unknown_or_malformed_steps_are_errors() {
        for s in [
            "unary:swish:0:0",
            "unary:none:0:0",
            "unary:relu:x:0",
            "unary:relu",
            "const:mod:1:0",
            "const:add:0:0",
            "const:add:one:0",
            "const:add:1:2",
            "input:add",
            "input:xor:0",
            "binary:add:0",
            "",
        ] {
            assert!(ChainStep::parse(s).is_err(), "{s}");
        }
        let attrs = |steps: &[&str]| {
            let mut a = Attributes::default();
            a.0.insert(
                ATTR.into(),
                Attr::Strings(steps.iter().map(|s| s.to_string()).collect()),
            );
            a
        };
        assert!(ChainStep::from_attrs(&Attributes::default(), 1).is_err());
        assert!(ChainStep::from_attrs(&attrs(&[]), 1).is_err());
        // Operand 2 of a node with inputs X and one constant.
        let err = ChainStep::from_attrs(&attrs(&["unary:relu:0:0", "const:mul:2:0"]), 2);
        assert!(err.unwrap_err().contains("reads input 2"));
        assert_eq!(
            ChainStep::from_attrs(&attrs(&["const:mul:1:0"]), 2).map(|s| s.len()),
            Ok(1)
        );
    }
}
