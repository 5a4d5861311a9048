//! Structured channel pruning on ONNX graphs: finds the channel *spaces* of a graph (sets of
//! activations whose channels are coupled, so that removing channel `c` from one removes it
//! from all), scores each space's channels, and removes channels from a space as one edit.
//!
//! # Spaces
//! A convolution (group 1), a Gemm or a 2-D MatMul against constant weights *opens* a space:
//! its output channels are its filters. The space follows the activation through ops that keep
//! channel `c` in channel `c`: BatchNormalization, activations, pooling, Resize, depthwise
//! convolutions (whose filters are cut with the channels), element-wise ops with per-channel
//! constants (the constants are cut), and Flatten/Reshape into a Gemm (the Gemm's input
//! features are cut in blocks of H·W). Element-wise ops between two activations (the residual
//! Add of a ResNet, the Mul of a squeeze-excitation block) *merge* their spaces: their channels
//! must go together. A space ends at the convolutions, Gemms and MatMuls that read it, whose
//! input channels are cut.
//!
//! A space is *frozen* (never pruned, with the reason kept for the report) when it reaches
//! anything whose channel meaning this module does not model: a graph output, a Concat, a
//! grouped (non-depthwise) convolution, a Transpose or Softmax, a non-float or non-constant
//! weight, a consumer in another domain. Freezing is conservative by design: a pruned graph
//! must re-infer, validate and compute the same function minus the removed channels.
//!
//! # Importance
//! With activation statistics from calibration runs ([`ActivationStats`]), a channel is worth
//! what its consumers would lose: per consumer (convolution or Gemm reading the channel),
//! √(Σ_f ‖W[:, f]‖² · var(x_f)) over the channel's features, normalised per consumer and
//! summed; the channel's *mean* is not lost, because pruning folds it into the consumers'
//! biases (`prune_with`): a channel that is constant after a folded BatchNormalization (tiny
//! filter, large bias) is then free to remove, where filter norms would keep it and remove
//! channels that matter. On the PP-OCRv4 recogniser, removing 10% of a space keeps the output
//! cosine at 0.989-1.000 this way against 0.50-1.00 by filter norm without the fold.
//!
//! Without statistics: the L2 norm of each channel's filter divided by the mean norm of that
//! source's filters, times |γ|/√(σ²+ε) (also normalised) when a BatchNormalization reads the
//! source directly (filter magnitude and BN scale, as in Li et al. 2017 and Liu et al. 2017).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::analysis::edit::{set_attr, Editor};
use crate::analysis::graph::{Attr, Graph, Node, ValueId};
use crate::analysis::tensor::{DType, Tensor, TensorData, TensorFact};

/// Cut `node.inputs[slot]` (a constant) along `axis`, `block` consecutive entries per channel.
#[derive(Clone, Debug, PartialEq)]
struct Cut {
    node: usize,
    slot: usize,
    axis: usize,
    block: usize,
}

/// A node that reads the space's channels through its weights (a convolution's input
/// channels, a Gemm's or MatMul's input features): the cut that removes them, and the
/// activation it reads (for statistics and mean compensation).
#[derive(Clone, Debug, PartialEq)]
struct Consumer {
    cut: Cut,
    reads: ValueId,
    /// Input slot of the bias the removed channels' mean is folded into (`None`: no bias
    /// input, as for MatMul).
    bias_slot: Option<usize>,
}

/// Edits besides constant cuts that keep a pruned node consistent.
#[derive(Clone, Debug, PartialEq)]
enum Fixup {
    /// A depthwise convolution's `group` follows its channel count.
    DepthwiseGroup(usize),
    /// A Reshape into `[N, features]` whose constant shape states the feature count.
    ReshapeFeatures { node: usize, block: usize },
}

/// A channel space with everything an edit must touch.
#[derive(Clone, Debug)]
pub struct ChannelSpace {
    /// Name of the first node that opens it: stable across rewrites, so plans can refer to it.
    pub key: String,
    pub channels: usize,
    /// Nodes whose filters are the channels (their names).
    pub sources: Vec<String>,
    /// Op types of every node whose constants or attributes an edit changes (for the report).
    pub touched: Vec<String>,
    /// Why the space cannot be pruned (`None`: prunable).
    pub frozen: Option<String>,
    /// Per-channel importance (see the module doc), one entry per channel.
    pub importance: Vec<f64>,
    cuts: Vec<Cut>,
    fixups: Vec<Fixup>,
    values: Vec<ValueId>,
    /// Source weight cuts, for importance: (cut, BN node index reading the source directly).
    source_cuts: Vec<(Cut, Option<usize>)>,
    consumers: Vec<Consumer>,
}

/// The channels kept in one space, as indices into the space's channels *before* this edit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpaceCut {
    pub space: String,
    pub keep: Vec<usize>,
}

/// Per-feature moments along axis 1 of the activations the spaces' consumers read, from
/// calibration runs, by value name (names survive pruning; value ids need not).
#[derive(Clone, Debug, Default)]
pub struct ActivationStats {
    moments: HashMap<String, Moments>,
}

#[derive(Clone, Debug, Default)]
struct Moments {
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
    count: f64,
}

impl ActivationStats {
    /// Adds one tensor of `value` (shape `[N, C, ...]` or `[N, F]`).
    pub fn observe(&mut self, value: &str, shape: &[usize], data: &[f32]) {
        if shape.len() < 2 {
            return;
        }
        let features = shape[1];
        let inner: usize = shape[2..].iter().product();
        let m = self.moments.entry(value.to_string()).or_default();
        if m.sum.len() != features {
            *m = Moments {
                sum: vec![0.0; features],
                sum_sq: vec![0.0; features],
                count: 0.0,
            };
        }
        for (i, chunk) in data.chunks(inner.max(1)).enumerate() {
            let f = i % features;
            for &x in chunk {
                m.sum[f] += x as f64;
                m.sum_sq[f] += (x as f64) * (x as f64);
            }
        }
        m.count += (data.len() / features.max(1)) as f64;
    }

    /// Per-feature mean and variance of `value`.
    fn mean_var(&self, value: &str) -> Option<(Vec<f64>, Vec<f64>)> {
        let m = self.moments.get(value).filter(|m| m.count > 0.0)?;
        let mean: Vec<f64> = m.sum.iter().map(|s| s / m.count).collect();
        let var = m
            .sum_sq
            .iter()
            .zip(&mean)
            .map(|(sq, mu)| (sq / m.count - mu * mu).max(0.0))
            .collect();
        Some((mean, var))
    }
}

/// The activations the consumers of the prunable spaces read: what [`ActivationStats`]
/// should observe.
pub fn observed_values(spaces: &[ChannelSpace]) -> Vec<ValueId> {
    let mut values: Vec<ValueId> = spaces
        .iter()
        .filter(|s| s.frozen.is_none())
        .flat_map(|s| s.consumers.iter().map(|c| c.reads))
        .collect();
    values.sort_unstable();
    values.dedup();
    values
}

#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error("no channel space `{0}` in this graph")]
    UnknownSpace(String),
    #[error("channel space `{space}` cannot be pruned: {reason}")]
    Frozen { space: String, reason: String },
    #[error("channel space `{space}`: {reason}")]
    BadKeep { space: String, reason: String },
}

/// Op types that keep channel `c` in channel `c` and read one activation.
const CHANNEL_WISE_UNARY: &[&str] = &[
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Elu",
    "Selu",
    "Celu",
    "Softplus",
    "Softsign",
    "Mish",
    "Gelu",
    "Erf",
    "Identity",
    "Dropout",
    "Neg",
    "Abs",
    "Sqrt",
    "Exp",
    "Log",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "ThresholdedRelu",
    "Swish",
];

/// Spatial ops that keep channels (rank-4 activations only).
const CHANNEL_WISE_SPATIAL: &[&str] = &[
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "LpPool",
    "GlobalLpPool",
    "Resize",
    "Upsample",
    "LRN",
    "InstanceNormalization",
];

/// Element-wise ops that broadcast their inputs (the ones that merge spaces).
const BROADCAST_BINARY: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow", "PRelu",
];

struct Builder<'a, 'g> {
    ed: &'a Editor<'g>,
    parent: Vec<usize>,
    spaces: Vec<ChannelSpace>,
    /// Activation → (space, features per channel).
    value_space: HashMap<ValueId, (usize, usize)>,
}

fn f32_const<'t>(ed: &'t Editor, value: Option<ValueId>) -> Option<&'t Tensor> {
    let tensor = ed.graph.values[value?].fact.konst.as_ref()?;
    let dense = matches!(tensor.data, TensorData::Raw(_) | TensorData::F32(_));
    (tensor.dtype == DType::F32 && dense).then_some(tensor)
}

impl Builder<'_, '_> {
    fn root(&mut self, mut space: usize) -> usize {
        while self.parent[space] != space {
            self.parent[space] = self.parent[self.parent[space]];
            space = self.parent[space];
        }
        space
    }

    fn open(&mut self, node: &Node, channels: usize) -> usize {
        let id = self.spaces.len();
        self.parent.push(id);
        self.spaces.push(ChannelSpace {
            key: node.name.clone(),
            channels,
            sources: vec![node.name.clone()],
            touched: vec![node.op_type.clone()],
            frozen: None,
            importance: Vec::new(),
            cuts: Vec::new(),
            fixups: Vec::new(),
            values: Vec::new(),
            source_cuts: Vec::new(),
            consumers: Vec::new(),
        });
        id
    }

    fn freeze(&mut self, space: usize, reason: String) {
        let root = self.root(space);
        if self.spaces[root].frozen.is_none() {
            self.spaces[root].frozen = Some(reason);
        }
    }

    fn freeze_inputs(&mut self, node: &Node, reason: &str) {
        for value in node.inputs.iter().flatten() {
            if let Some(&(space, _)) = self.value_space.get(value) {
                self.freeze(
                    space,
                    format!("{reason} ({} `{}`)", node.op_type, node.name),
                );
            }
        }
    }

    fn merge(&mut self, a: usize, b: usize) -> usize {
        let (ra, rb) = (self.root(a), self.root(b));
        // The earlier space stays the root: a merged space is named after its first source.
        let (ra, rb) = (ra.min(rb), ra.max(rb));
        if ra == rb {
            return ra;
        }
        let moved = std::mem::replace(
            &mut self.spaces[rb],
            ChannelSpace {
                key: String::new(),
                channels: 0,
                sources: Vec::new(),
                touched: Vec::new(),
                frozen: None,
                importance: Vec::new(),
                cuts: Vec::new(),
                fixups: Vec::new(),
                values: Vec::new(),
                source_cuts: Vec::new(),
                consumers: Vec::new(),
            },
        );
        let target = &mut self.spaces[ra];
        if target.channels != moved.channels && target.frozen.is_none() {
            target.frozen = Some(format!(
                "merges spaces of {} and {} channels",
                target.channels, moved.channels
            ));
        }
        target.sources.extend(moved.sources);
        target.touched.extend(moved.touched);
        target.cuts.extend(moved.cuts);
        target.fixups.extend(moved.fixups);
        target.values.extend(moved.values);
        target.source_cuts.extend(moved.source_cuts);
        target.consumers.extend(moved.consumers);
        if target.frozen.is_none() {
            target.frozen = moved.frozen;
        }
        self.parent[rb] = ra;
        ra
    }

    fn assign(&mut self, value: ValueId, space: usize, block: usize) {
        let root = self.root(space);
        self.value_space.insert(value, (root, block));
        self.spaces[root].values.push(value);
    }

    fn cut(&mut self, space: usize, cut: Cut, op_type: &str) {
        let root = self.root(space);
        self.spaces[root].cuts.push(cut);
        self.spaces[root].touched.push(op_type.to_string());
    }

    fn consume(&mut self, space: usize, cut: Cut, node: &Node, bias_slot: Option<usize>) {
        let Some(reads) = node.inputs[0] else { return };
        self.cut(space, cut.clone(), &node.op_type);
        let root = self.root(space);
        self.spaces[root].consumers.push(Consumer {
            cut,
            reads,
            bias_slot,
        });
    }

    fn rank_of(&self, value: ValueId) -> Option<usize> {
        self.ed.fact(value).rank()
    }

    /// The input's space and block, when it carries one.
    fn space_of(&self, slot: Option<&Option<ValueId>>) -> Option<(usize, usize)> {
        let value = (*slot?)?;
        self.value_space.get(&value).copied()
    }

    fn visit(&mut self, index: usize) {
        let node = self.ed.nodes[index].clone();
        if !node.domain.is_empty() && node.domain != "ai.onnx" {
            self.freeze_inputs(&node, "read by an op of another domain");
            return;
        }
        let op = node.op_type.as_str();
        let x = self.space_of(node.inputs.first());
        let out = node.outputs.first().copied();
        match op {
            "Conv" => self.conv(index, &node, x),
            "BatchNormalization" => {
                let Some((space, block)) = x else { return };
                let params: Vec<usize> = (1..=4).collect();
                if block != 1
                    || params.iter().any(|&s| {
                        f32_const(self.ed, node.inputs.get(s).copied().flatten()).is_none()
                    })
                {
                    self.freeze(
                        space,
                        format!(
                            "BatchNormalization `{}` with non-constant parameters",
                            node.name
                        ),
                    );
                    return;
                }
                for slot in params {
                    self.cut(
                        space,
                        Cut {
                            node: index,
                            slot,
                            axis: 0,
                            block: 1,
                        },
                        op,
                    );
                }
                if let Some(out) = out {
                    self.assign(out, space, 1);
                }
            }
            "Gemm" | "MatMul" => self.dense(index, &node, x),
            "Flatten" | "Reshape" => {
                let Some((space, block)) = x else { return };
                let Some(out) = out else { return };
                let in_shape = node.inputs[0].and_then(|v| self.ed.fact(v).concrete_shape());
                let out_shape = self.ed.fact(out).concrete_shape();
                let flattens = match (&in_shape, &out_shape) {
                    (Some(i), Some(o)) => {
                        block == 1
                            && i.len() >= 2
                            && o.len() == 2
                            && o[0] == i[0]
                            && o[1] == i[1..].iter().product::<u64>()
                            && (op == "Reshape" || node.attrs.int_or("axis", 1) == 1)
                    }
                    _ => false,
                };
                if !flattens {
                    self.freeze(
                        space,
                        format!(
                            "reshaped by {op} `{}` other than into [N, C·H·W]",
                            node.name
                        ),
                    );
                    return;
                }
                let spatial = in_shape.unwrap()[2..].iter().product::<u64>() as usize;
                if op == "Reshape" {
                    let root = self.root(space);
                    self.spaces[root].fixups.push(Fixup::ReshapeFeatures {
                        node: index,
                        block: spatial,
                    });
                }
                self.assign(out, space, spatial);
            }
            "Squeeze" => {
                let Some((space, block)) = x else { return };
                let Some(out) = out else { return };
                // [N, C, 1, 1] → [N, C] keeps the channel axis at 1.
                let keeps = self.rank_of(out) == Some(2)
                    && node.inputs[0]
                        .and_then(|v| self.ed.fact(v).concrete_shape())
                        .is_some_and(|s| s.len() >= 2 && s[2..].iter().all(|&d| d == 1));
                if !keeps || block != 1 {
                    self.freeze(
                        space,
                        format!("squeezed by `{}` across its channel axis", node.name),
                    );
                    return;
                }
                self.assign(out, space, 1);
            }
            "Shape" | "Size" => {}
            _ if CHANNEL_WISE_UNARY.contains(&op) => {
                let (Some((space, block)), Some(out)) = (x, out) else {
                    return;
                };
                self.assign(out, space, block);
            }
            _ if CHANNEL_WISE_SPATIAL.contains(&op) => {
                let (Some((space, block)), Some(out)) = (x, out) else {
                    return;
                };
                let rank4 = self.rank_of(out) == Some(4);
                if block != 1 || !rank4 || node.outputs.len() > 1 {
                    self.freeze(space, format!("{op} `{}` on a non-image tensor", node.name));
                    return;
                }
                self.assign(out, space, 1);
            }
            _ if BROADCAST_BINARY.contains(&op) => self.broadcast(index, &node),
            _ => self.freeze_inputs(&node, "read by an op whose channels are not modelled"),
        }
    }

    fn conv(&mut self, index: usize, node: &Node, x: Option<(usize, usize)>) {
        let Some(out) = node.outputs.first().copied() else {
            return;
        };
        let weights = f32_const(self.ed, node.inputs.get(1).copied().flatten());
        let bias_ok = node.inputs.get(2).copied().flatten().is_none()
            || f32_const(self.ed, node.inputs.get(2).copied().flatten()).is_some();
        let Some(w) = weights.filter(|w| w.shape.len() >= 3 && bias_ok) else {
            self.freeze_inputs(
                node,
                "read by a convolution with non-constant or non-f32 weights",
            );
            return;
        };
        let (c_out, c_in_per_group) = (w.shape[0] as usize, w.shape[1] as usize);
        let group = node.attrs.int_or("group", 1).max(1) as usize;
        let has_bias = node.inputs.get(2).copied().flatten().is_some();
        if group == 1 {
            if let Some((space, block)) = x {
                if block != 1 {
                    self.freeze(space, format!("flattened into convolution `{}`", node.name));
                } else {
                    let cut = Cut {
                        node: index,
                        slot: 1,
                        axis: 1,
                        block: 1,
                    };
                    self.consume(space, cut, node, Some(2));
                }
            }
            let space = self.open(node, c_out);
            let cut = Cut {
                node: index,
                slot: 1,
                axis: 0,
                block: 1,
            };
            self.spaces[space].cuts.push(cut.clone());
            let bn = self
                .ed
                .sole_consumer(out)
                .filter(|&c| self.ed.nodes[c].op_type == "BatchNormalization");
            self.spaces[space].source_cuts.push((cut, bn));
            if has_bias {
                self.spaces[space].cuts.push(Cut {
                    node: index,
                    slot: 2,
                    axis: 0,
                    block: 1,
                });
            }
            self.assign(out, space, 1);
            return;
        }
        let depthwise = c_in_per_group == 1 && c_out == group && x.is_some();
        match x {
            Some((space, 1)) if depthwise => {
                self.cut(
                    space,
                    Cut {
                        node: index,
                        slot: 1,
                        axis: 0,
                        block: 1,
                    },
                    "Conv (depthwise)",
                );
                if has_bias {
                    self.cut(
                        space,
                        Cut {
                            node: index,
                            slot: 2,
                            axis: 0,
                            block: 1,
                        },
                        "Conv (depthwise)",
                    );
                }
                let root = self.root(space);
                self.spaces[root].fixups.push(Fixup::DepthwiseGroup(index));
                self.assign(out, space, 1);
            }
            _ => {
                self.freeze_inputs(node, "read by a grouped convolution");
                let space = self.open(node, c_out);
                self.freeze(
                    space,
                    format!("produced by grouped convolution `{}`", node.name),
                );
                self.assign(out, space, 1);
            }
        }
    }

    /// Gemm and MatMul against constant weights, on 2-D activations.
    fn dense(&mut self, index: usize, node: &Node, x: Option<(usize, usize)>) {
        let Some(out) = node.outputs.first().copied() else {
            return;
        };
        let is_gemm = node.op_type == "Gemm";
        let weights = f32_const(self.ed, node.inputs.get(1).copied().flatten());
        let rank2 = node.inputs[0].and_then(|v| self.rank_of(v)) == Some(2);
        let trans_a = is_gemm && node.attrs.int_or("transA", 0) != 0;
        let trans_b = is_gemm && node.attrs.int_or("transB", 0) != 0;
        let Some(w) = weights.filter(|w| w.shape.len() == 2 && rank2 && !trans_a) else {
            self.freeze_inputs(node, "read by a matrix product this pruner does not model");
            return;
        };
        let (in_axis, out_axis) = if trans_b { (1, 0) } else { (0, 1) };
        let features = w.shape[out_axis] as usize;
        if let Some((space, block)) = x {
            let cut = Cut {
                node: index,
                slot: 1,
                axis: in_axis,
                block,
            };
            self.consume(space, cut, node, is_gemm.then_some(2));
        }
        let space = self.open(node, features);
        let cut = Cut {
            node: index,
            slot: 1,
            axis: out_axis,
            block: 1,
        };
        self.spaces[space].cuts.push(cut.clone());
        self.spaces[space].source_cuts.push((cut, None));
        if is_gemm {
            if let Some(c) = node.inputs.get(2).copied().flatten() {
                let fact = self.ed.fact(c);
                let shape = fact.concrete_shape().unwrap_or_default();
                let per_feature = shape.last().copied() == Some(features as u64)
                    && shape.iter().rev().skip(1).all(|&d| d == 1);
                if f32_const(self.ed, Some(c)).is_some() && per_feature {
                    let axis = shape.len() - 1;
                    self.spaces[space].cuts.push(Cut {
                        node: index,
                        slot: 2,
                        axis,
                        block: 1,
                    });
                } else if shape.iter().product::<u64>() != 1 {
                    self.freeze(
                        space,
                        format!("Gemm `{}` has a bias that is not per feature", node.name),
                    );
                }
            }
        }
        self.assign(out, space, 1);
    }

    /// Element-wise ops with broadcasting: activations merge their spaces; per-channel
    /// constants are cut with the channels; anything else freezes.
    fn broadcast(&mut self, index: usize, node: &Node) {
        let Some(out) = node.outputs.first().copied() else {
            return;
        };
        let Some(out_shape) = self.ed.fact(out).concrete_shape() else {
            self.freeze_inputs(node, "read by an element-wise op of unknown shape");
            return;
        };
        let spaced: Vec<(usize, usize)> = node
            .inputs
            .iter()
            .filter_map(|s| self.space_of(Some(s)))
            .collect();
        let Some(&(first, block)) = spaced.first() else {
            return;
        };
        if spaced.iter().any(|&(_, b)| b != block) || out_shape.len() < 2 {
            self.freeze_inputs(node, "read by an element-wise op mixing layouts");
            return;
        }
        let mut space = first;
        for &(other, _) in &spaced[1..] {
            space = self.merge(space, other);
        }
        let channels = out_shape[1];
        for (slot, input) in node.inputs.iter().enumerate() {
            let Some(value) = *input else { continue };
            if self.value_space.contains_key(&value) {
                continue;
            }
            let fact = self.ed.fact(value);
            let Some(shape) = fact.concrete_shape() else {
                self.freeze(
                    space,
                    format!(
                        "{} `{}` reads an operand of unknown shape",
                        node.op_type, node.name
                    ),
                );
                return;
            };
            // Align the operand's dims to the output's from the right (numpy broadcasting).
            let offset = out_shape.len() as isize - shape.len() as isize;
            let channel_axis = 1 - offset;
            let channel_dim = if channel_axis >= 0 {
                shape[channel_axis as usize]
            } else {
                1
            };
            if channel_dim == 1 || channels == 1 {
                continue;
            }
            let per_channel = shape
                .iter()
                .enumerate()
                .all(|(a, &d)| a as isize == channel_axis || d == 1);
            if per_channel && block == 1 && f32_const(self.ed, Some(value)).is_some() {
                self.cut(
                    space,
                    Cut {
                        node: index,
                        slot,
                        axis: channel_axis as usize,
                        block: 1,
                    },
                    &node.op_type,
                );
            } else {
                self.freeze(
                    space,
                    format!(
                        "{} `{}` mixes its channels with a full-size operand",
                        node.op_type, node.name
                    ),
                );
                return;
            }
        }
        self.assign(out, space, block);
    }
}

/// Every channel space of `graph` (which must have been inferred: shapes are read from its
/// facts), prunable or frozen, with per-channel importance for the prunable ones.
pub fn channel_spaces(graph: &mut Graph) -> Vec<ChannelSpace> {
    channel_spaces_with(graph, None)
}

/// [`channel_spaces`], with importance from activation statistics where `stats` has them (see
/// the module doc).
pub fn channel_spaces_with(
    graph: &mut Graph,
    stats: Option<&ActivationStats>,
) -> Vec<ChannelSpace> {
    let ed = Editor::new(graph);
    let mut spaces = spaces_of(&ed);
    for space in spaces.iter_mut().filter(|s| s.frozen.is_none()) {
        space.importance = stats
            .and_then(|stats| measured_importance(&ed, space, stats))
            .unwrap_or_else(|| importance(&ed, space));
    }
    spaces
}

fn spaces_of(ed: &Editor) -> Vec<ChannelSpace> {
    let mut builder = Builder {
        ed,
        parent: Vec::new(),
        spaces: Vec::new(),
        value_space: HashMap::new(),
    };
    for index in 0..ed.nodes.len() {
        builder.visit(index);
    }
    let outputs: Vec<ValueId> = ed
        .graph
        .outputs
        .iter()
        .chain(&ed.subgraph_reads)
        .copied()
        .collect();
    for value in outputs {
        if let Some(&(space, _)) = builder.value_space.get(&value) {
            let name = ed.graph.values[value].name.clone();
            builder.freeze(space, format!("reaches graph output `{name}`"));
        }
    }
    let roots: Vec<usize> = (0..builder.spaces.len())
        .filter(|&s| builder.parent[s] == s)
        .collect();
    let mut spaces: Vec<ChannelSpace> = roots
        .into_iter()
        .map(|r| builder.spaces[r].clone())
        .collect();
    for space in &mut spaces {
        if space.channels < 2 && space.frozen.is_none() {
            space.frozen = Some("a single channel".into());
        }
        let mut seen = HashSet::new();
        space.touched.retain(|t| seen.insert(t.clone()));
    }
    spaces
}

/// Per-channel L2 norms of a constant along `axis` (`block` entries per channel).
fn channel_norms(tensor: &Tensor, axis: usize, block: usize) -> Option<Vec<f64>> {
    let values = tensor.to_f32_vec()?;
    let shape: Vec<usize> = tensor.shape.iter().map(|&d| d as usize).collect();
    let dim = *shape.get(axis)?;
    let inner: usize = shape[axis + 1..].iter().product();
    let channels = dim / block.max(1);
    let mut norms = vec![0f64; channels];
    for (i, &v) in values.iter().enumerate() {
        let along = (i / inner) % dim;
        norms[along / block.max(1)] += (v as f64) * (v as f64);
    }
    Some(norms.into_iter().map(f64::sqrt).collect())
}

fn normalised(values: Vec<f64>) -> Vec<f64> {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    values
        .into_iter()
        .map(|v| if mean > 0.0 { v / mean } else { 1.0 })
        .collect()
}

fn importance(ed: &Editor, space: &ChannelSpace) -> Vec<f64> {
    let mut total = vec![0f64; space.channels];
    for (cut, bn) in &space.source_cuts {
        let node = &ed.nodes[cut.node];
        let Some(w) = f32_const(ed, node.inputs[cut.slot]) else {
            continue;
        };
        let Some(mut norms) = channel_norms(w, cut.axis, cut.block).map(normalised) else {
            continue;
        };
        if let Some(bn) = bn.map(|b| &ed.nodes[b]) {
            let gamma = ed.const_f32(bn.inputs.get(1).copied().flatten());
            let var = ed.const_f32(bn.inputs.get(4).copied().flatten());
            if let (Some(gamma), Some(var)) = (gamma, var) {
                let eps = bn.attrs.float_or("epsilon", 1e-5) as f64;
                let scale = normalised(
                    gamma
                        .iter()
                        .zip(&var)
                        .map(|(&g, &v)| (g as f64).abs() / (v as f64 + eps).sqrt())
                        .collect(),
                );
                norms.iter_mut().zip(&scale).for_each(|(n, s)| *n *= s);
            }
        }
        if norms.len() == total.len() {
            total.iter_mut().zip(&norms).for_each(|(t, n)| *t += n);
        }
    }
    total
}

/// Index along `in_axis` and along the output axis of every element of a consumer weight.
fn weight_axes(shape: &[u64], in_axis: usize) -> (usize, usize, usize, usize) {
    let out_axis = if shape.len() == 2 { 1 - in_axis } else { 0 };
    let stride = |axis: usize| shape[axis + 1..].iter().product::<u64>() as usize;
    (
        stride(in_axis),
        shape[in_axis] as usize,
        stride(out_axis),
        shape[out_axis] as usize,
    )
}

/// Importance from what the consumers would lose: per channel, √(Σ_f ‖W[:, f]‖² · var(x_f))
/// over the channel's features, normalised per consumer and summed. The mean of a removed
/// channel is folded into the consumer's bias ([`prune_with`]), so only its variation is lost.
fn measured_importance(
    ed: &Editor,
    space: &ChannelSpace,
    stats: &ActivationStats,
) -> Option<Vec<f64>> {
    let mut total = vec![0f64; space.channels];
    let mut used = 0;
    for consumer in &space.consumers {
        let name = &ed.graph.values[consumer.reads].name;
        let Some((_, var)) = stats.mean_var(name) else {
            continue;
        };
        let node = &ed.nodes[consumer.cut.node];
        let Some(w) = f32_const(ed, node.inputs[consumer.cut.slot]) else {
            continue;
        };
        let Some(values) = w.to_f32_vec() else {
            continue;
        };
        let (in_stride, in_dim, _, _) = weight_axes(&w.shape, consumer.cut.axis);
        if in_dim != var.len() || in_dim != space.channels * consumer.cut.block {
            continue;
        }
        let mut column_sq = vec![0f64; in_dim];
        for (i, &v) in values.iter().enumerate() {
            column_sq[(i / in_stride) % in_dim] += (v as f64) * (v as f64);
        }
        let per_channel: Vec<f64> = (0..space.channels)
            .map(|c| {
                let block = consumer.cut.block;
                (c * block..(c + 1) * block)
                    .map(|f| column_sq[f] * var[f])
                    .sum::<f64>()
                    .sqrt()
            })
            .collect();
        total
            .iter_mut()
            .zip(normalised(per_channel))
            .for_each(|(t, n)| *t += n);
        used += 1;
    }
    (used > 0).then_some(total)
}

/// Folds the mean of the removed features into each consumer's bias: the consumer's output
/// keeps what those channels contributed on average (exact for a constant channel; at
/// zero-padded borders of a convolution the fold slightly over-compensates).
fn compensate(ed: &mut Editor, space: &ChannelSpace, keep: &[usize], stats: &ActivationStats) {
    let kept: HashSet<usize> = keep.iter().copied().collect();
    for consumer in &space.consumers {
        let Some(bias_slot) = consumer.bias_slot else {
            continue;
        };
        let name = ed.graph.values[consumer.reads].name.clone();
        let Some((mean, _)) = stats.mean_var(&name) else {
            continue;
        };
        let node = consumer.cut.node;
        let Some(w) = f32_const(ed, ed.nodes[node].inputs[consumer.cut.slot]) else {
            continue;
        };
        let Some(values) = w.to_f32_vec() else {
            continue;
        };
        let (in_stride, in_dim, out_stride, out_dim) = weight_axes(&w.shape, consumer.cut.axis);
        if in_dim != mean.len() {
            continue;
        }
        let block = consumer.cut.block.max(1);
        let mut delta = vec![0f64; out_dim];
        for (i, &v) in values.iter().enumerate() {
            let f = (i / in_stride) % in_dim;
            if !kept.contains(&(f / block)) {
                delta[(i / out_stride) % out_dim] += v as f64 * mean[f];
            }
        }
        let bias_value = ed.nodes[node].inputs.get(bias_slot).copied().flatten();
        let mut bias: Vec<f32> = match bias_value {
            None => vec![0.0; out_dim],
            Some(b) => match ed.const_f32(Some(b)) {
                Some(values) if values.len() == out_dim => values,
                Some(values) if values.len() == 1 => vec![values[0]; out_dim],
                // A bias of another shape (per row of a Gemm): leave it alone.
                _ => continue,
            },
        };
        bias.iter_mut()
            .zip(&delta)
            .for_each(|(b, d)| *b += *d as f32);
        let base = format!("{}_bias_compensated", ed.nodes[node].name);
        let id = ed.add_const(unique_name(ed.graph, &base), vec![out_dim as u64], bias);
        let inputs = &mut ed.nodes[node].inputs;
        if inputs.len() <= bias_slot {
            inputs.resize(bias_slot + 1, None);
        }
        inputs[bias_slot] = Some(id);
    }
}

/// The `count` most important channels of `space`, in channel order.
pub fn keep_most_important(space: &ChannelSpace, count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..space.channels).collect();
    order.sort_by(|&a, &b| {
        space.importance[b]
            .total_cmp(&space.importance[a])
            .then(a.cmp(&b))
    });
    let mut keep: Vec<usize> = order
        .into_iter()
        .take(count.clamp(1, space.channels))
        .collect();
    keep.sort_unstable();
    keep
}

fn slice_axis(values: &[f32], shape: &[u64], axis: usize, keep: &[usize]) -> Vec<f32> {
    let dim = shape[axis] as usize;
    let inner: usize = shape[axis + 1..].iter().product::<u64>() as usize;
    let outer: usize = shape[..axis].iter().product::<u64>() as usize;
    let mut out = Vec::with_capacity(outer * keep.len() * inner);
    for o in 0..outer {
        for &k in keep {
            let start = (o * dim + k) * inner;
            out.extend_from_slice(&values[start..start + inner]);
        }
    }
    out
}

fn unique_name(graph: &Graph, base: &str) -> String {
    if graph.value_by_name(base).is_none() {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| graph.value_by_name(n).is_none())
        .expect("an unused name")
}

/// Removes channels: each entry of `plan` keeps `keep` (indices into the space's current
/// channels) of the space it names. The graph must have been inferred; the caller re-infers it
/// (the pruned shapes flow from the cut weights) and validates.
pub fn prune(graph: &mut Graph, plan: &[SpaceCut]) -> Result<(), PruneError> {
    prune_with(graph, plan, None)
}

/// [`prune`], folding the mean of every removed channel into its consumers' biases where
/// `stats` observed the activation they read.
pub fn prune_with(
    graph: &mut Graph,
    plan: &[SpaceCut],
    stats: Option<&ActivationStats>,
) -> Result<(), PruneError> {
    for step in plan {
        // Structure only: the kept channels are given, so no importance is needed.
        let spaces = spaces_of(&Editor::new(graph));
        let space = spaces
            .iter()
            .find(|s| s.key == step.space)
            .ok_or_else(|| PruneError::UnknownSpace(step.space.clone()))?;
        if let Some(reason) = &space.frozen {
            return Err(PruneError::Frozen {
                space: space.key.clone(),
                reason: reason.clone(),
            });
        }
        let bad = |reason: String| PruneError::BadKeep {
            space: space.key.clone(),
            reason,
        };
        if step.keep.is_empty() || step.keep.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(
                "kept channels must be non-empty and strictly increasing".into(),
            ));
        }
        if step.keep.last().is_some_and(|&k| k >= space.channels) {
            return Err(bad(format!(
                "keeps channel {} of {}",
                step.keep.last().unwrap(),
                space.channels
            )));
        }
        apply(graph, space, &step.keep, stats);
        crate::analysis::prepare_graph(graph, &Default::default())
            .map_err(|e| bad(format!("pruned graph does not re-infer: {e}")))?;
    }
    Ok(())
}

fn apply(graph: &mut Graph, space: &ChannelSpace, keep: &[usize], stats: Option<&ActivationStats>) {
    let mut ed = Editor::new(graph);
    // Before the cuts: the fold reads the consumers' full weights.
    if let Some(stats) = stats {
        compensate(&mut ed, space, keep, stats);
    }
    for cut in &space.cuts {
        let Some(value) = ed.nodes[cut.node].inputs[cut.slot] else {
            continue;
        };
        let fact = ed.fact(value).clone();
        let Some(tensor) = fact.konst.as_ref() else {
            continue;
        };
        let Some(values) = tensor.to_f32_vec() else {
            continue;
        };
        let expanded: Vec<usize> = keep
            .iter()
            .flat_map(|&c| c * cut.block..(c + 1) * cut.block)
            .collect();
        let sliced = slice_axis(&values, &tensor.shape, cut.axis, &expanded);
        let mut shape = tensor.shape.clone();
        shape[cut.axis] = expanded.len() as u64;
        let name = unique_name(ed.graph, &format!("{}_pruned", ed.graph.values[value].name));
        let id = ed.add_const(name, shape, sliced);
        ed.nodes[cut.node].inputs[cut.slot] = Some(id);
    }
    for fixup in &space.fixups {
        match *fixup {
            Fixup::DepthwiseGroup(node) => {
                set_attr(&mut ed.nodes[node], "group", Attr::Int(keep.len() as i64));
            }
            Fixup::ReshapeFeatures { node, block } => {
                let Some(shape_value) = ed.nodes[node].inputs.get(1).copied().flatten() else {
                    continue;
                };
                let Some(mut target) = ed
                    .fact(shape_value)
                    .konst
                    .as_ref()
                    .and_then(|t| t.to_i64_vec())
                else {
                    continue;
                };
                if target.len() == 2 && target[1] > 0 {
                    target[1] = (keep.len() * block) as i64;
                    let name = unique_name(
                        ed.graph,
                        &format!("{}_pruned", ed.graph.values[shape_value].name),
                    );
                    let tensor = Tensor::from_i64(vec![2], target);
                    let id = ed.graph.add_value(name, TensorFact::constant(tensor));
                    ed.nodes[node].inputs[1] = Some(id);
                }
            }
        }
    }
    // Shapes the model declared for these activations no longer hold.
    for &value in &space.values {
        ed.graph.values[value].declared = None;
    }
    ed.finish();
}

#[cfg(test)]
mod tests;
