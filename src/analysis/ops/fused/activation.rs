//! The epilogue activation of the tool's fused and quantized ops (`FusedConv`, `FusedGemm`,
//! `FusedMatMul`, `QConv`, `QMatMul`, `HalfConv`, `HalfMatMul`), and the one vocabulary every
//! layer uses for it:
//!
//! - the node attributes: `activation` (a name below; absent means none) with its parameters
//!   `act_alpha` / `act_beta` (Clip's bounds, LeakyRelu's alpha, HardSigmoid's alpha and beta),
//!   read by [`Activation::from_attrs`] and written by [`Activation::write_attrs`];
//! - the standard ONNX op an activation comes from ([`Activation::of_onnx`], the advisor's
//!   fusion patterns) and the standard nodes export writes for it ([`Activation::expand`]);
//! - its per-element cost ([`Activation::cost`]), equal to the standalone element-wise op's
//!   (`analysis/ops/elementwise.rs`; SiLU = Sigmoid then Mul).
//!
//! The mapping to the kernels' epilogue (`kernels::gemm::Activation`) is the executor's, one
//! exhaustive match in `exec/lower/mod.rs` (`analysis` does not import `kernels`). An unknown
//! name or a parameter of the wrong type is an error everywhere: inference marks it invalid,
//! lowering and export refuse the node.

use crate::analysis::graph::{Attr, Attributes};

/// Attribute holding the activation's name.
pub const ATTR: &str = "activation";
/// Attribute holding the first parameter (Clip's min, LeakyRelu's and HardSigmoid's alpha).
pub const ALPHA: &str = "act_alpha";
/// Attribute holding the second parameter (Clip's max, HardSigmoid's beta).
pub const BETA: &str = "act_beta";

/// An epilogue activation, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    None,
    Relu,
    Clip {
        min: f32,
        max: f32,
    },
    LeakyRelu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x · clamp(x/6 + 1/2, 0, 1)`.
    HardSwish,
    Sigmoid,
    /// `x · sigmoid(x)`.
    Silu,
    /// Exact (erf) form: `x · Φ(x)`.
    Gelu,
    Tanh,
}

/// Every name, for error messages.
const NAMES: &str =
    "none, relu, clip, leaky_relu, hard_sigmoid, hard_swish, sigmoid, silu, gelu, tanh";

impl Activation {
    /// The activation called `name`, with parameters `a` and `b` where it takes them.
    pub fn from_name(name: &str, a: f32, b: f32) -> Result<Activation, String> {
        Ok(match name {
            "none" => Activation::None,
            "relu" => Activation::Relu,
            "clip" => Activation::Clip { min: a, max: b },
            "leaky_relu" => Activation::LeakyRelu { alpha: a },
            "hard_sigmoid" => Activation::HardSigmoid { alpha: a, beta: b },
            "hard_swish" => Activation::HardSwish,
            "sigmoid" => Activation::Sigmoid,
            "silu" => Activation::Silu,
            "gelu" => Activation::Gelu,
            "tanh" => Activation::Tanh,
            other => return Err(format!("unknown activation `{other}` (known: {NAMES})")),
        })
    }

    /// The name written in the `activation` attribute.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::Clip { .. } => "clip",
            Activation::LeakyRelu { .. } => "leaky_relu",
            Activation::HardSigmoid { .. } => "hard_sigmoid",
            Activation::HardSwish => "hard_swish",
            Activation::Sigmoid => "sigmoid",
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
            Activation::Tanh => "tanh",
        }
    }

    /// The two parameters as written (`act_alpha`, `act_beta`); 0 where unused.
    pub fn params(&self) -> (f32, f32) {
        match *self {
            Activation::Clip { min, max } => (min, max),
            Activation::LeakyRelu { alpha } => (alpha, 0.0),
            Activation::HardSigmoid { alpha, beta } => (alpha, beta),
            _ => (0.0, 0.0),
        }
    }

    /// The activation of a node's attributes; `None` when it has no `activation` attribute.
    pub fn from_attrs(attrs: &Attributes) -> Result<Activation, String> {
        let param = |key: &str| match attrs.get(key) {
            None => Ok(0.0),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f32),
            Some(_) => Err(format!("`{key}` must be a float")),
        };
        match attrs.get(ATTR) {
            None => Ok(Activation::None),
            Some(Attr::String(name)) => Activation::from_name(name, param(ALPHA)?, param(BETA)?),
            Some(_) => Err(format!("`{ATTR}` must be a string")),
        }
    }

    /// Whether the attributes hold an epilogue activation; one that does not parse counts, so
    /// a rewrite leaves that node alone.
    pub fn present(attrs: &Attributes) -> bool {
        Activation::from_attrs(attrs) != Ok(Activation::None)
    }

    /// Writes the three attributes (the parameters always, 0 where unused).
    pub fn write_attrs(&self, attrs: &mut Attributes) {
        let (a, b) = self.params();
        attrs
            .0
            .insert(ATTR.into(), Attr::String(self.name().into()));
        attrs.0.insert(ALPHA.into(), Attr::Float(a));
        attrs.0.insert(BETA.into(), Attr::Float(b));
    }

    /// Whether `key` is one of the attributes this vocabulary owns.
    pub fn is_attr(key: &str) -> bool {
        matches!(key, ATTR | ALPHA | BETA)
    }

    /// (FLOPs, transcendental) per element, as the standalone element-wise op counts them.
    pub fn cost(&self) -> (u64, u64) {
        match self {
            Activation::None => (0, 0),
            Activation::Relu => (1, 0),
            Activation::Clip { .. } => (2, 0),
            Activation::LeakyRelu { .. } => (2, 0),
            Activation::HardSigmoid { .. } => (4, 0),
            Activation::HardSwish => (5, 0),
            Activation::Sigmoid => (2, 1),
            Activation::Silu => (3, 1),
            Activation::Gelu => (4, 1),
            Activation::Tanh => (0, 1),
        }
    }

    /// The activation a standard single-input ONNX node (`op_type`, default domain) applies,
    /// when an epilogue can run it. `clip_bounds` resolves Clip's bounds (attributes before
    /// opset 11, constant inputs after) and answers `None` when they are not known constants.
    pub fn of_onnx(
        op_type: &str,
        attrs: &Attributes,
        clip_bounds: impl FnOnce() -> Option<(f32, f32)>,
    ) -> Option<Activation> {
        Some(match op_type {
            "Relu" => Activation::Relu,
            "Clip" => {
                let (min, max) = clip_bounds()?;
                Activation::Clip { min, max }
            }
            "LeakyRelu" => Activation::LeakyRelu {
                alpha: attrs.float_or("alpha", 0.01),
            },
            "HardSigmoid" => Activation::HardSigmoid {
                alpha: attrs.float_or("alpha", 0.2),
                beta: attrs.float_or("beta", 0.5),
            },
            "HardSwish" => Activation::HardSwish,
            "Sigmoid" => Activation::Sigmoid,
            "Tanh" => Activation::Tanh,
            "Gelu" if attrs.string("approximate").unwrap_or("none") == "none" => Activation::Gelu,
            _ => return None,
        })
    }

    /// The standard ONNX nodes computing `out = activation(x)` in a model of default-domain
    /// `opset`, in order; the last one writes `out`. Empty for `None`.
    pub fn expand(&self, opset: i64) -> Vec<StdNode> {
        use Operand::{Prev, Scalar, X};
        let one = |op: &'static str, attrs: Vec<(&'static str, f32)>| {
            vec![StdNode::new(op, None, vec![X], attrs)]
        };
        match *self {
            Activation::None => vec![],
            Activation::Relu => one("Relu", vec![]),
            Activation::Sigmoid => one("Sigmoid", vec![]),
            Activation::Tanh => one("Tanh", vec![]),
            Activation::LeakyRelu { alpha } => one("LeakyRelu", vec![("alpha", alpha)]),
            Activation::HardSigmoid { alpha, beta } => {
                one("HardSigmoid", vec![("alpha", alpha), ("beta", beta)])
            }
            // Bounds became inputs at opset 11.
            Activation::Clip { min, max } if opset >= 11 => vec![StdNode::new(
                "Clip",
                None,
                vec![X, Scalar(min), Scalar(max)],
                vec![],
            )],
            Activation::Clip { min, max } => one("Clip", vec![("min", min), ("max", max)]),
            Activation::HardSwish if opset >= 14 => one("HardSwish", vec![]),
            Activation::HardSwish => vec![
                StdNode::new(
                    "HardSigmoid",
                    Some("gate"),
                    vec![X],
                    vec![("alpha", 1.0 / 6.0), ("beta", 0.5)],
                ),
                StdNode::new("Mul", None, vec![X, Prev(0)], vec![]),
            ],
            Activation::Silu => vec![
                StdNode::new("Sigmoid", Some("gate"), vec![X], vec![]),
                StdNode::new("Mul", None, vec![X, Prev(0)], vec![]),
            ],
            // 0.5·x · (1 + erf(x/√2)).
            Activation::Gelu => vec![
                StdNode::new(
                    "Div",
                    Some("div"),
                    vec![X, Scalar(std::f32::consts::SQRT_2)],
                    vec![],
                ),
                StdNode::new("Erf", Some("erf"), vec![Prev(0)], vec![]),
                StdNode::new("Add", Some("add"), vec![Prev(1), Scalar(1.0)], vec![]),
                StdNode::new("Mul", Some("half"), vec![X, Scalar(0.5)], vec![]),
                StdNode::new("Mul", None, vec![Prev(3), Prev(2)], vec![]),
            ],
        }
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One standard ONNX node of an expansion (see [`Activation::expand`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StdNode {
    pub op: &'static str,
    /// The node is named `{name}_{suffix}` after the expanded one; `None` for the last node,
    /// which takes the name itself.
    pub suffix: Option<&'static str>,
    pub inputs: Vec<Operand>,
    /// Float attributes.
    pub attrs: Vec<(&'static str, f32)>,
}

impl StdNode {
    pub fn new(
        op: &'static str,
        suffix: Option<&'static str>,
        inputs: Vec<Operand>,
        attrs: Vec<(&'static str, f32)>,
    ) -> StdNode {
        StdNode {
            op,
            suffix,
            inputs,
            attrs,
        }
    }
}

/// An input of an expanded node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// The expansion's input.
    X,
    /// The output of the expansion's node `k` (an earlier one).
    Prev(usize),
    /// A scalar f32 constant.
    Scalar(f32),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, Attr)]) -> Attributes {
        Attributes(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn every_activation_round_trips_through_its_attributes() {
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: f32::NEG_INFINITY,
                max: 6.0,
            },
            Activation::LeakyRelu { alpha: 0.2 },
            Activation::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            Activation::HardSwish,
            Activation::Sigmoid,
            Activation::Silu,
            Activation::Gelu,
            Activation::Tanh,
        ] {
            let mut written = Attributes::default();
            act.write_attrs(&mut written);
            assert_eq!(written.string(ATTR), Some(act.name()));
            assert_eq!(Activation::from_attrs(&written), Ok(act), "{act}");
            let (a, b) = act.params();
            assert_eq!(Activation::from_name(act.name(), a, b), Ok(act));
            assert_eq!(act.expand(13).is_empty(), act == Activation::None);
        }
        assert_eq!(
            Activation::from_attrs(&Attributes::default()),
            Ok(Activation::None)
        );
        assert!(!Activation::present(&Attributes::default()));
        let unknown = attrs(&[(ATTR, Attr::String("swish".into()))]);
        assert!(Activation::present(&unknown));
    }

    #[test]
    fn unknown_names_and_mistyped_parameters_are_errors() {
        let err = Activation::from_attrs(&attrs(&[(ATTR, Attr::String("swish".into()))]));
        assert!(err.unwrap_err().contains("unknown activation `swish`"));
        assert!(Activation::from_name("", 0.0, 0.0).is_err());
        assert!(Activation::from_attrs(&attrs(&[(ATTR, Attr::Int(1))])).is_err());
        let clip = attrs(&[
            (ATTR, Attr::String("clip".into())),
            (ALPHA, Attr::String("0".into())),
        ]);
        assert!(Activation::from_attrs(&clip).unwrap_err().contains(ALPHA));
    }

    #[test]
    fn expansions_follow_the_opset() {
        let clip = Activation::Clip { min: 0.0, max: 6.0 };
        let ops =
            |a: Activation, opset| -> Vec<&str> { a.expand(opset).iter().map(|n| n.op).collect() };
        assert_eq!(clip.expand(11)[0].inputs.len(), 3);
        assert_eq!(clip.expand(10)[0].attrs, [("min", 0.0), ("max", 6.0)]);
        assert_eq!(ops(Activation::HardSwish, 14), ["HardSwish"]);
        assert_eq!(ops(Activation::HardSwish, 13), ["HardSigmoid", "Mul"]);
        assert_eq!(
            ops(Activation::Gelu, 20),
            ["Div", "Erf", "Add", "Mul", "Mul"]
        );
        for act in [Activation::HardSwish, Activation::Silu, Activation::Gelu] {
            let nodes = act.expand(13);
            // Only the last node is unnamed (it takes the expanded node's name), and every
            // `Prev` points back.
            for (k, node) in nodes.iter().enumerate() {
                assert_eq!(node.suffix.is_none(), k + 1 == nodes.len(), "{act}");
                for input in &node.inputs {
                    if let Operand::Prev(j) = input {
                        assert!(*j < k, "{act}");
                    }
                }
            }
        }
    }

    #[test]
    fn onnx_ops_map_to_their_activation() {
        let none = Attributes::default();
        let of = |op: &str| Activation::of_onnx(op, &none, || Some((0.0, 6.0)));
        assert_eq!(of("Relu"), Some(Activation::Relu));
        assert_eq!(of("Clip"), Some(Activation::Clip { min: 0.0, max: 6.0 }));
        assert_eq!(of("LeakyRelu"), Some(Activation::LeakyRelu { alpha: 0.01 }));
        assert_eq!(of("Exp"), None);
        assert_eq!(Activation::of_onnx("Clip", &none, || None), None);
        let tanh_gelu = attrs(&[("approximate", Attr::String("tanh".into()))]);
        assert_eq!(Activation::of_onnx("Gelu", &tanh_gelu, || None), None);
    }
}
