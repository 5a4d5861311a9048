//! Test-only helpers for the per-family cost tests: input facts, attributes, and one call that
//! runs an op's `infer` then its `cost` the way the driver does (`infer::infer_graph`,
//! `analysis::analyze_graph`).

use std::sync::Arc;

use super::super::{as_invalid, lookup, CostCtx, InferCtx, OpCost, OpNode, Traffic};
use crate::analysis::graph::{Attr, Attributes};
use crate::analysis::tensor::{DType, Dim, Tensor, TensorData, TensorFact};
use crate::device::Precision;

/// A run-time (activation) tensor of known shape.
pub fn act(dtype: DType, shape: &[u64]) -> TensorFact {
    TensorFact::known(dtype, shape)
}

/// A run-time f32 tensor of known shape.
pub fn f32s(shape: &[u64]) -> TensorFact {
    act(DType::F32, shape)
}

/// A run-time f32 tensor whose shape may hold symbols (`Dim::Sym`).
pub fn f32_dims(shape: Vec<Dim>) -> TensorFact {
    TensorFact::new(DType::F32, shape)
}

pub fn sym(name: &str) -> Dim {
    Dim::Sym(name.to_string())
}

/// A constant whose values are never read (a weight): a splat of zeros.
pub fn weight(dtype: DType, shape: &[u64]) -> TensorFact {
    TensorFact::constant(Tensor {
        dtype,
        shape: shape.to_vec(),
        data: TensorData::Splat(0.0),
    })
}

/// A constant f32 weight (the values are never read).
pub fn w32(shape: &[u64]) -> TensorFact {
    weight(DType::F32, shape)
}

/// A constant 1-D int64 vector (shapes, axes, pads, k...).
pub fn ints(values: &[i64]) -> TensorFact {
    TensorFact::constant(Tensor::from_i64(vec![values.len() as u64], values.to_vec()))
}

/// A constant int64 tensor of any shape.
pub fn ints_shaped(shape: &[u64], values: &[i64]) -> TensorFact {
    TensorFact::constant(Tensor::from_i64(shape.to_vec(), values.to_vec()))
}

/// A constant f32 tensor with the given values.
pub fn floats(shape: &[u64], values: &[f32]) -> TensorFact {
    TensorFact::constant(Tensor::from_f32(shape.to_vec(), values.to_vec()))
}

/// A constant scalar of `dtype`.
pub fn scalar(dtype: DType, value: f64) -> TensorFact {
    TensorFact::constant(Tensor {
        dtype,
        shape: vec![],
        data: TensorData::Splat(value),
    })
}

/// The dims of a fully known fact.
pub fn dims(fact: &TensorFact) -> Vec<u64> {
    fact.concrete_shape()
        .unwrap_or_else(|| panic!("shape {} is not fully known", fact.shape_string()))
}

/// The values of a constant fact (panics when it is not a readable constant).
pub fn values(fact: &TensorFact) -> Vec<f64> {
    let konst = fact.konst.as_ref().expect("the fact is not a constant");
    konst
        .to_f64_vec()
        .expect("the constant is not readable")
        .into_owned()
}

pub fn traffic(weights_read: u64, act_read: u64, act_written: u64) -> Traffic {
    Traffic {
        weights_read,
        act_read,
        act_written,
        input_read: 0,
    }
}

/// One node of an op type, with its attributes, ready to infer and cost.
pub struct Op {
    domain: &'static str,
    op_type: String,
    attrs: Attributes,
    opset: i64,
    outputs: usize,
    precision: Precision,
    /// The graph value behind each input (`values`); empty: every input its own value.
    input_values: Vec<Option<usize>>,
}

impl Op {
    /// An op of the default domain at opset 17, one output, costed at fp32.
    pub fn new(op_type: &str) -> Op {
        Op {
            domain: "",
            op_type: op_type.to_string(),
            attrs: Attributes::default(),
            opset: 17,
            outputs: 1,
            precision: Precision::Fp32,
            input_values: Vec::new(),
        }
    }

    /// An op of the tool's own domain (`roofline`).
    pub fn fused(op_type: &str) -> Op {
        Op {
            domain: super::super::fused::DOMAIN,
            ..Op::new(op_type)
        }
    }

    /// An op of the classical-ML domain (`ai.onnx.ml`).
    pub fn ml(op_type: &str) -> Op {
        Op {
            domain: super::super::classic_ml::DOMAIN,
            ..Op::new(op_type)
        }
    }

    /// An op of onnxruntime's contrib domain (`com.microsoft`).
    pub fn contrib(op_type: &str) -> Op {
        Op {
            domain: super::super::contrib::DOMAIN,
            ..Op::new(op_type)
        }
    }

    pub fn attr(mut self, name: &str, value: Attr) -> Op {
        self.attrs.0.insert(name.to_string(), value);
        self
    }

    pub fn int(self, name: &str, value: i64) -> Op {
        self.attr(name, Attr::Int(value))
    }

    pub fn ints(self, name: &str, values: &[i64]) -> Op {
        self.attr(name, Attr::Ints(values.to_vec()))
    }

    pub fn float(self, name: &str, value: f32) -> Op {
        self.attr(name, Attr::Float(value))
    }

    pub fn floats(self, name: &str, values: &[f32]) -> Op {
        self.attr(name, Attr::Floats(values.to_vec()))
    }

    pub fn string(self, name: &str, value: &str) -> Op {
        self.attr(name, Attr::String(value.to_string()))
    }

    pub fn strings(self, name: &str, values: &[&str]) -> Op {
        self.attr(
            name,
            Attr::Strings(values.iter().map(|s| s.to_string()).collect()),
        )
    }

    pub fn tensor(self, name: &str, tensor: Tensor) -> Op {
        self.attr(name, Attr::Tensor(Arc::new(tensor)))
    }

    pub fn opset(mut self, opset: i64) -> Op {
        self.opset = opset;
        self
    }

    /// Number of outputs the node declares (`InferCtx::output_count`).
    pub fn outputs(mut self, count: usize) -> Op {
        self.outputs = count;
        self
    }

    /// The analysis precision of `cost` (float tensors are counted at its width).
    pub fn precision(mut self, precision: Precision) -> Op {
        self.precision = precision;
        self
    }

    /// Which graph value each input is (equal numbers: one value fed twice).
    pub fn values(mut self, values: &[usize]) -> Op {
        self.input_values = values.iter().map(|&v| Some(v)).collect();
        self
    }

    fn node(&self) -> OpNode<'_> {
        OpNode {
            name: "n",
            op_type: &self.op_type,
            attrs: &self.attrs,
            opset: self.opset,
        }
    }

    /// `infer` with possibly omitted optional inputs.
    pub fn try_infer_opt(&self, inputs: &[Option<&TensorFact>]) -> Result<Vec<TensorFact>, String> {
        let op = lookup(self.domain, &self.op_type)
            .unwrap_or_else(|| panic!("no op `{}` registered", self.op_type));
        op.infer(&InferCtx {
            node: self.node(),
            inputs: inputs.to_vec(),
            output_count: self.outputs,
            outer: None,
        })
    }

    /// `infer` with the enclosing graph's facts given by `outer` (control-flow bodies).
    pub fn infer_with_outer(
        &self,
        inputs: &[&TensorFact],
        outer: &dyn Fn(&str) -> Option<TensorFact>,
    ) -> Vec<TensorFact> {
        let op = lookup(self.domain, &self.op_type)
            .unwrap_or_else(|| panic!("no op `{}` registered", self.op_type));
        op.infer(&InferCtx {
            node: self.node(),
            inputs: inputs.iter().map(|&f| Some(f)).collect(),
            output_count: self.outputs,
            outer: Some(outer),
        })
        .unwrap_or_else(|e| panic!("{} infer failed: {e:?}", self.op_type))
    }

    pub fn try_infer(&self, inputs: &[&TensorFact]) -> Result<Vec<TensorFact>, String> {
        let inputs: Vec<Option<&TensorFact>> = inputs.iter().map(|&f| Some(f)).collect();
        self.try_infer_opt(&inputs)
    }

    pub fn infer(&self, inputs: &[&TensorFact]) -> Vec<TensorFact> {
        self.try_infer(inputs)
            .unwrap_or_else(|e| panic!("{} infer failed: {e:?}", self.op_type))
    }

    /// `cost` on the given input and output facts.
    pub fn try_cost_opt(
        &self,
        inputs: &[Option<&TensorFact>],
        outputs: &[TensorFact],
    ) -> Result<OpCost, String> {
        let op = lookup(self.domain, &self.op_type)
            .unwrap_or_else(|| panic!("no op `{}` registered", self.op_type));
        op.cost(&CostCtx {
            node: self.node(),
            inputs: inputs.to_vec(),
            input_values: self.input_values.clone(),
            outputs: outputs.iter().take(self.outputs).collect(),
            precision: self.precision,
            outer: None,
        })
    }

    /// `infer` then `cost`, as the driver does; panics on any error.
    pub fn run_opt(&self, inputs: &[Option<&TensorFact>]) -> (Vec<TensorFact>, OpCost) {
        let outputs = self
            .try_infer_opt(inputs)
            .unwrap_or_else(|e| panic!("{} infer failed: {e:?}", self.op_type));
        let cost = self
            .try_cost_opt(inputs, &outputs)
            .unwrap_or_else(|e| panic!("{} cost failed: {e:?}", self.op_type));
        (outputs, cost)
    }

    pub fn run(&self, inputs: &[&TensorFact]) -> (Vec<TensorFact>, OpCost) {
        let inputs: Vec<Option<&TensorFact>> = inputs.iter().map(|&f| Some(f)).collect();
        self.run_opt(&inputs)
    }

    /// `infer` must fail with an error marked `invalid` (bad input); returns its reason.
    pub fn invalid(&self, inputs: &[&TensorFact]) -> String {
        let inputs: Vec<Option<&TensorFact>> = inputs.iter().map(|&f| Some(f)).collect();
        self.invalid_opt(&inputs)
    }

    pub fn invalid_opt(&self, inputs: &[Option<&TensorFact>]) -> String {
        match self.try_infer_opt(inputs) {
            Ok(facts) => panic!(
                "{} inferred {:?}, expected an invalid-model error",
                self.op_type,
                facts.iter().map(|f| f.shape_string()).collect::<Vec<_>>()
            ),
            Err(e) => as_invalid(&e)
                .unwrap_or_else(|| panic!("`{e}` is not marked invalid"))
                .to_string(),
        }
    }

    /// `infer` must fail, as bad input or as a shape the tool cannot derive (which of the two
    /// is the op's call for a malformed node); returns the reason without the invalid mark.
    pub fn fails(&self, inputs: &[&TensorFact]) -> String {
        match self.try_infer(inputs) {
            Ok(facts) => panic!(
                "{} inferred {:?}, expected an error",
                self.op_type,
                facts.iter().map(|f| f.shape_string()).collect::<Vec<_>>()
            ),
            Err(e) => as_invalid(&e).map_or(e.clone(), str::to_string),
        }
    }

    /// `infer` must fail with an ordinary error, not bad input: the output depends on something
    /// the tool cannot know (a symbolic dim, a value computed at run time, a subgraph), so the
    /// driver warns and falls back on the model's `value_info`. Returns the error.
    pub fn error(&self, inputs: &[&TensorFact]) -> String {
        match self.try_infer(inputs) {
            Ok(facts) => panic!(
                "{} inferred {:?}, expected an error",
                self.op_type,
                facts.iter().map(|f| f.shape_string()).collect::<Vec<_>>()
            ),
            Err(e) => {
                assert!(as_invalid(&e).is_none(), "`{e:?}` is marked invalid");
                e
            }
        }
    }
}
