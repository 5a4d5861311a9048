//! Finding the channel spaces of a graph (see the module doc of `prune`): one walk in
//! topological order that opens, follows, merges and freezes spaces.

use std::collections::{HashMap, HashSet};

use super::importance::{importance, measured_importance, ActivationStats};
use super::{ChannelSpace, Consumer, Cut, Fixup};
use crate::analysis::edit::Editor;
use crate::analysis::graph::{Graph, Node, ValueId};
use crate::analysis::tensor::{DType, Tensor, TensorData};

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

/// Spatial ops that keep channel `c` in channel `c` (rank-4 activations only): pooling and
/// resizing (LRN and InstanceNormalization mix or carry per-channel state and freeze).
const CHANNEL_WISE_SPATIAL: &[&str] = &[
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "LpPool",
    "GlobalLpPool",
    "Resize",
    "Upsample",
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

pub(super) fn f32_const<'t>(ed: &'t Editor, value: Option<ValueId>) -> Option<&'t Tensor> {
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
            ..ChannelSpace::default()
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
        let moved = std::mem::take(&mut self.spaces[rb]);
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
        let node = self.ed.node(index).clone();
        if !node.domain.is_empty() && node.domain != "ai.onnx" {
            self.freeze_inputs(&node, "read by an op of another domain");
            return;
        }
        let op = node.op_type.as_str();
        // An activation with channels read as a parameter (a Gemm's C, a Resize's scales, a
        // Reshape's shape) is not modelled: only broadcasting ops read several activations.
        if !BROADCAST_BINARY.contains(&op) && !matches!(op, "Shape" | "Size") {
            let extra: Vec<usize> = node.inputs[1.min(node.inputs.len())..]
                .iter()
                .flatten()
                .filter_map(|v| self.value_space.get(v).map(|&(space, _)| space))
                .collect();
            for space in extra {
                self.freeze(
                    space,
                    format!("read as a parameter by {op} `{}`", node.name),
                );
            }
        }
        // Resize to constant `sizes` states the channel count: not modelled.
        if matches!(op, "Resize") && node.inputs.get(3).copied().flatten().is_some() {
            self.freeze_inputs(&node, "resized to explicit sizes");
            return;
        }
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
                            "BatchNormalization `{}` on a flattened input or with non-constant parameters",
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
                let in_shape = node.inputs[0].and_then(|v| self.ed.fact(v).concrete_shape());
                let keeps = match (in_shape, self.ed.fact(out).concrete_shape()) {
                    (Some(i), Some(o)) => {
                        i.len() >= 2 && i[2..].iter().all(|&d| d == 1) && o == i[..2]
                    }
                    _ => false,
                };
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
                .filter(|&c| self.ed.node(c).op_type == "BatchNormalization");
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
                let Some(shape) = self.ed.fact(c).concrete_shape() else {
                    self.freeze(
                        space,
                        format!("Gemm `{}` has a bias of unknown shape", node.name),
                    );
                    self.assign(out, space, 1);
                    return;
                };
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
        // Every activation with channels must be aligned with the output (same rank), or its
        // channel axis would land elsewhere after broadcasting.
        let misaligned =
            node.inputs.iter().flatten().any(|v| {
                self.value_space.contains_key(v) && self.rank_of(*v) != Some(out_shape.len())
            });
        if misaligned || spaced.iter().any(|&(_, b)| b != block) || out_shape.len() < 2 {
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

/// The channel spaces without importance (empty): for callers that need only their structure
/// (keys, channel counts, sources, frozen reasons, the activations consumers read).
pub fn channel_structure(graph: &mut Graph) -> Vec<ChannelSpace> {
    spaces_of(&Editor::new(graph))
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

pub(super) fn spaces_of(ed: &Editor) -> Vec<ChannelSpace> {
    let mut builder = Builder {
        ed,
        parent: Vec::new(),
        spaces: Vec::new(),
        value_space: HashMap::new(),
    };
    for index in 0..ed.len() {
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
