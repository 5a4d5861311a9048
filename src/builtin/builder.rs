//! A small ONNX graph builder: layers in, `ModelProto` out, with seeded random weights
//! (He-uniform, so activations stay finite through deep stacks) or zero-page weights that cost no
//! memory until touched (for analysis, where values never matter).

use bytes::Bytes;

use crate::analysis::onnx_proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// Opset the built-in models are written in.
pub const BUILTIN_OPSET: i64 = 17;

/// How weights are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFill {
    /// Seeded He-uniform values (for export and execution).
    Random(u64),
    /// Zeros, allocated lazily by the OS (for analysis only).
    Zeros,
    /// No values at all: weights are declared by type and shape only and import as opaque
    /// constants (analysis only; a 70B decoder costs no memory). Small parameters (norm scales,
    /// biases) and shape constants still carry values.
    Symbolic,
}

/// A value dimension in a built-in model's signature.
#[derive(Clone, Debug)]
pub enum SigDim {
    Fixed(i64),
    Named(&'static str),
}

impl SigDim {
    /// A signature of fixed dims.
    pub fn fixed_all(dims: &[i64]) -> Vec<SigDim> {
        dims.iter().map(|&d| SigDim::Fixed(d)).collect()
    }
}

pub struct GraphBuilder {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    fill: WeightFill,
    rng_state: u64,
    counter: usize,
    /// Prefix of the names of the nodes added now (a decoder layer's `h.3/`), so that reports
    /// can sum by block as they do for exporters' scoped names.
    scope: String,
}

pub fn attr_int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: value,
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: values.to_vec(),
        ..Default::default()
    }
}

pub fn attr_float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::FLOAT,
        f: value,
        ..Default::default()
    }
}

pub fn attr_string(name: &str, value: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::STRING,
        s: value.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn value_info(name: &str, elem_type: i32, dims: &[SigDim]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| tensor_shape_proto::Dimension {
                            value: Some(match d {
                                SigDim::Fixed(v) => {
                                    tensor_shape_proto::dimension::Value::DimValue(*v)
                                }
                                SigDim::Named(n) => {
                                    tensor_shape_proto::dimension::Value::DimParam(n.to_string())
                                }
                            }),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}

/// Attributes of a convolution layer.
#[derive(Clone, Copy, Debug)]
pub struct ConvSpec {
    pub out_channels: i64,
    pub kernel: i64,
    pub stride: i64,
    pub pad: i64,
    pub group: i64,
    pub bias: bool,
}

impl ConvSpec {
    pub fn new(out_channels: i64, kernel: i64, stride: i64) -> ConvSpec {
        ConvSpec {
            out_channels,
            kernel,
            stride,
            pad: kernel / 2,
            group: 1,
            bias: false,
        }
    }
}

impl GraphBuilder {
    pub fn new(fill: WeightFill) -> GraphBuilder {
        let seed = match fill {
            WeightFill::Random(seed) => seed,
            WeightFill::Zeros | WeightFill::Symbolic => 0,
        };
        GraphBuilder {
            nodes: Vec::new(),
            initializers: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            fill,
            rng_state: seed ^ 0x9E37_79B9_7F4A_7C15,
            counter: 0,
            scope: String::new(),
        }
    }

    /// Names the nodes added from now on `{scope}/{op}_{n}` (empty: `{op}_{n}`).
    pub fn set_scope(&mut self, scope: &str) {
        self.scope = if scope.is_empty() {
            String::new()
        } else {
            format!("{scope}/")
        };
    }

    pub fn input(&mut self, name: &str, elem_type: i32, dims: &[SigDim]) -> String {
        self.inputs.push(value_info(name, elem_type, dims));
        name.to_string()
    }

    pub fn output(&mut self, value: &str, elem_type: i32, dims: &[SigDim]) {
        self.outputs.push(value_info(value, elem_type, dims));
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}_{}", self.counter)
    }

    /// A new value name (for the outputs of a multi-output node).
    pub fn fresh_name(&mut self, prefix: &str) -> String {
        self.fresh(prefix)
    }

    /// splitmix64: a tiny, well-distributed generator; reproducible across platforms.
    fn next_uniform(&mut self) -> f32 {
        self.rng_state = self.rng_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 24 random bits to [-1, 1).
        ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }

    fn float_tensor(&mut self, name: &str, dims: &[i64], values: Bytes) -> String {
        self.initializers.push(TensorProto {
            dims: dims.to_vec(),
            data_type: 1,
            name: name.into(),
            raw_data: values,
            ..Default::default()
        });
        name.to_string()
    }

    /// A weight with He-uniform values for `fan_in`.
    pub fn weight(&mut self, prefix: &str, dims: &[i64], fan_in: i64) -> String {
        let name = self.fresh(prefix);
        let count: i64 = dims.iter().product();
        let bytes = match self.fill {
            WeightFill::Symbolic => Bytes::new(),
            WeightFill::Zeros => Bytes::from(vec![0u8; count as usize * 4]),
            WeightFill::Random(_) => {
                let bound = (6.0 / fan_in.max(1) as f32).sqrt();
                let mut out = Vec::with_capacity(count as usize * 4);
                for _ in 0..count {
                    out.extend_from_slice(&(self.next_uniform() * bound).to_le_bytes());
                }
                Bytes::from(out)
            }
        };
        self.float_tensor(&name, dims, bytes)
    }

    /// A constant with given values (a rotary table); declared by shape only when symbolic.
    pub fn table(
        &mut self,
        prefix: &str,
        dims: &[i64],
        values: impl FnOnce() -> Vec<f32>,
    ) -> String {
        let name = self.fresh(prefix);
        let bytes = match self.fill {
            WeightFill::Symbolic => Bytes::new(),
            _ => Bytes::from(
                values()
                    .into_iter()
                    .flat_map(f32::to_le_bytes)
                    .collect::<Vec<u8>>(),
            ),
        };
        self.float_tensor(&name, dims, bytes)
    }

    /// A float constant whose values always travel with it, whatever the fill (anchor tables,
    /// Resize scales: values the model's shapes or outputs are defined by).
    pub fn float_const(&mut self, prefix: &str, dims: &[i64], values: &[f32]) -> String {
        let name = self.fresh(prefix);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.float_tensor(&name, dims, Bytes::from(bytes))
    }

    /// A constant filled with one value (BN scale = 1, variance = 1...).
    pub fn filled(&mut self, prefix: &str, dims: &[i64], value: f32) -> String {
        let name = self.fresh(prefix);
        let count: i64 = dims.iter().product();
        let bytes: Vec<u8> = (0..count).flat_map(|_| value.to_le_bytes()).collect();
        self.float_tensor(&name, dims, Bytes::from(bytes))
    }

    /// Small random values around a centre (biases, BN statistics).
    pub fn jitter(&mut self, prefix: &str, dims: &[i64], centre: f32, spread: f32) -> String {
        let name = self.fresh(prefix);
        let count: i64 = dims.iter().product();
        let mut out = Vec::with_capacity(count as usize * 4);
        for _ in 0..count {
            let value = match self.fill {
                WeightFill::Zeros | WeightFill::Symbolic => centre,
                WeightFill::Random(_) => centre + spread * self.next_uniform(),
            };
            out.extend_from_slice(&value.to_le_bytes());
        }
        self.float_tensor(&name, dims, Bytes::from(out))
    }

    /// An 8-bit unsigned constant (`uint8`, a dynamically quantized model's weights) with
    /// values spread over the whole byte; zeros when the fill is not random.
    pub fn byte_weight(&mut self, prefix: &str, dims: &[i64]) -> String {
        let count: i64 = dims.iter().product();
        let bytes: Vec<u8> = (0..count)
            .map(|_| match self.fill {
                WeightFill::Random(_) => ((self.next_uniform() + 1.0) * 127.5) as u8,
                _ => 0,
            })
            .collect();
        self.byte_tensor(prefix, dims, bytes)
    }

    /// A scalar `uint8` constant (a zero point).
    pub fn byte_scalar(&mut self, prefix: &str, value: u8) -> String {
        self.byte_tensor(prefix, &[], vec![value])
    }

    fn byte_tensor(&mut self, prefix: &str, dims: &[i64], bytes: Vec<u8>) -> String {
        let name = self.fresh(prefix);
        self.initializers.push(TensorProto {
            dims: dims.to_vec(),
            data_type: 2,
            name: name.clone(),
            raw_data: Bytes::from(bytes),
            ..Default::default()
        });
        name
    }

    pub fn int64_const(&mut self, prefix: &str, values: &[i64]) -> String {
        self.int64_tensor(prefix, vec![values.len() as i64], values.to_vec())
    }

    /// A scalar int64 constant (Range bounds).
    pub fn int64_scalar(&mut self, prefix: &str, value: i64) -> String {
        self.int64_tensor(prefix, vec![], vec![value])
    }

    fn int64_tensor(&mut self, prefix: &str, dims: Vec<i64>, values: Vec<i64>) -> String {
        let name = self.fresh(prefix);
        self.initializers.push(TensorProto {
            dims,
            data_type: 7,
            name: name.clone(),
            int64_data: values,
            ..Default::default()
        });
        name
    }

    pub fn scalar_const(&mut self, prefix: &str, value: f32) -> String {
        let name = self.fresh(prefix);
        self.initializers.push(TensorProto {
            dims: vec![],
            data_type: 1,
            name: name.clone(),
            float_data: vec![value],
            ..Default::default()
        });
        name
    }

    /// Adds a node with one output and returns the output's name.
    pub fn node(&mut self, op_type: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(&op_type.to_lowercase());
        self.node_multi(op_type, inputs, attrs, &[&out]);
        out
    }

    pub fn node_multi(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        attribute: Vec<AttributeProto>,
        outputs: &[&str],
    ) {
        let name = format!("{}{}_{}", self.scope, op_type, self.nodes.len());
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name,
            op_type: op_type.into(),
            attribute,
            ..Default::default()
        });
    }

    pub fn conv(&mut self, x: &str, in_channels: i64, spec: ConvSpec) -> String {
        let fan_in = in_channels / spec.group * spec.kernel * spec.kernel;
        let w = self.weight(
            "conv_w",
            &[
                spec.out_channels,
                in_channels / spec.group,
                spec.kernel,
                spec.kernel,
            ],
            fan_in,
        );
        let mut inputs = vec![x.to_string(), w];
        if spec.bias {
            inputs.push(self.jitter("conv_b", &[spec.out_channels], 0.0, 0.05));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.node(
            "Conv",
            &refs,
            vec![
                attr_ints("kernel_shape", &[spec.kernel, spec.kernel]),
                attr_ints("strides", &[spec.stride, spec.stride]),
                attr_ints("pads", &[spec.pad, spec.pad, spec.pad, spec.pad]),
                attr_ints("dilations", &[1, 1]),
                attr_int("group", spec.group),
            ],
        )
    }

    pub fn batch_norm(&mut self, x: &str, channels: i64) -> String {
        let scale = self.jitter("bn_scale", &[channels], 1.0, 0.1);
        let bias = self.jitter("bn_bias", &[channels], 0.0, 0.1);
        let mean = self.jitter("bn_mean", &[channels], 0.0, 0.1);
        let var = self.jitter("bn_var", &[channels], 1.0, 0.1);
        self.node(
            "BatchNormalization",
            &[x, &scale, &bias, &mean, &var],
            vec![attr_float("epsilon", 1e-5)],
        )
    }

    pub fn relu(&mut self, x: &str) -> String {
        self.node("Relu", &[x], vec![])
    }

    pub fn relu6(&mut self, x: &str) -> String {
        let lo = self.scalar_const("clip_min", 0.0);
        let hi = self.scalar_const("clip_max", 6.0);
        self.node("Clip", &[x, &lo, &hi], vec![])
    }

    pub fn add(&mut self, a: &str, b: &str) -> String {
        self.node("Add", &[a, b], vec![])
    }

    pub fn max_pool(&mut self, x: &str, kernel: i64, stride: i64, pad: i64) -> String {
        self.node(
            "MaxPool",
            &[x],
            vec![
                attr_ints("kernel_shape", &[kernel, kernel]),
                attr_ints("strides", &[stride, stride]),
                attr_ints("pads", &[pad, pad, pad, pad]),
            ],
        )
    }

    pub fn global_avg_pool(&mut self, x: &str) -> String {
        self.node("GlobalAveragePool", &[x], vec![])
    }

    pub fn flatten(&mut self, x: &str) -> String {
        self.node("Flatten", &[x], vec![attr_int("axis", 1)])
    }

    /// Fully connected layer as Gemm with transB = 1 (the PyTorch export layout).
    pub fn gemm(&mut self, x: &str, in_features: i64, out_features: i64) -> String {
        let w = self.weight("fc_w", &[out_features, in_features], in_features);
        let b = self.jitter("fc_b", &[out_features], 0.0, 0.05);
        self.node("Gemm", &[x, &w, &b], vec![attr_int("transB", 1)])
    }

    /// x[..., in] · W[in, out] + b, as MatMul + Add (the transformer export layout).
    pub fn linear(&mut self, x: &str, in_features: i64, out_features: i64) -> String {
        let w = self.weight("linear_w", &[in_features, out_features], in_features);
        let b = self.jitter("linear_b", &[out_features], 0.0, 0.02);
        let y = self.node("MatMul", &[x, &w], vec![]);
        self.add(&y, &b)
    }

    pub fn layer_norm(&mut self, x: &str, features: i64) -> String {
        self.layer_norm_eps(x, features, 1e-12)
    }

    pub fn layer_norm_eps(&mut self, x: &str, features: i64, epsilon: f32) -> String {
        let scale = self.jitter("ln_scale", &[features], 1.0, 0.05);
        let bias = self.jitter("ln_bias", &[features], 0.0, 0.05);
        self.node(
            "LayerNormalization",
            &[x, &scale, &bias],
            vec![attr_int("axis", -1), attr_float("epsilon", epsilon)],
        )
    }

    pub fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        let target = self.int64_const("shape", shape);
        self.node("Reshape", &[x, &target], vec![])
    }

    pub fn transpose(&mut self, x: &str, perm: &[i64]) -> String {
        self.node("Transpose", &[x], vec![attr_ints("perm", perm)])
    }

    pub fn softmax(&mut self, x: &str, axis: i64) -> String {
        self.node("Softmax", &[x], vec![attr_int("axis", axis)])
    }

    pub fn finish(self, graph_name: &str) -> ModelProto {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: BUILTIN_OPSET,
            }],
            producer_name: "roofline".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(GraphProto {
                node: self.nodes,
                name: graph_name.into(),
                initializer: self.initializers,
                input: self.inputs,
                output: self.outputs,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}
