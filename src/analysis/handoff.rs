//! Cross-core handoffs on several threads: the time an op spends reading the part of its input
//! that another core's caches hold.
//!
//! The calibration times each op alone, with its input where its own threads left it. In a
//! plan, an op that the kernels keep on one thread after one that split across the cores finds
//! the other cores' share of its input in their caches, and (if it writes an output of like
//! size: an element-wise op, a 1×1 convolution) runs several times its time alone. That share
//! is charged at the rate `calibrate` measured for exactly this case (`calibrate::handoff`,
//! `Calibration::handoff`), added to the op's expected time (never to its bound, which stays
//! the roofline's ceiling). Which ops split is the kernels' own rule
//! (`classify::splits_across_threads`). Not charged, because measurement showed no cost: an
//! op that writes little (a global pool reading the same split output ran in its one-thread
//! time), and an op that splits after one kept on one thread (the PP-OCR classifier's
//! depthwise convolutions after its one-thread 1×1 ones ran at their calibrated times; charged,
//! they were expected 30-100% slow). Two split ops are taken to split alike: each thread
//! first claims the tasks of its own contiguous block (`kernels::parallel`), so when every
//! thread is on time the first half of one op's output and the first half of the next op's are
//! on the same core.

use std::collections::HashMap;

use super::footprint::stored_bytes;
use super::graph::{Graph, NodeId, ValueId};
use super::model::{NodeAnalysis, NodeStatus};
use super::{classify, VIEW_OPS};

/// The least output, as a share of an input read from a split op, for which an op is charged:
/// reading the other cores' share is cheap for an op that writes little (a global average pool
/// of a split depthwise convolution's 25 k floats ran in its one-thread time, 1.07 against
/// 1.00 µs, where a ReLU of the same output took 6.8 µs against 1.9).
const MIN_OUTPUT_SHARE: f64 = 0.125;

/// The part of a `bytes` activation that the other `threads − 1` threads of a split op wrote.
pub fn other_cores_share(bytes: u64, threads: usize) -> u64 {
    let threads = threads.max(1) as u64;
    bytes.saturating_mul(threads - 1) / threads
}

/// Adds to each op's expected time what reading its input across the cores costs at
/// `threads` threads and `read_gbs` (one thread reading what the others wrote).
pub fn charge(
    graph: &Graph,
    order: &[NodeId],
    nodes: &mut [NodeAnalysis],
    threads: usize,
    read_gbs: f64,
) {
    if threads <= 1 || !(read_gbs.is_finite() && read_gbs > 0.0) {
        return;
    }
    let position: HashMap<NodeId, usize> =
        order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let splits: Vec<Option<bool>> = order
        .iter()
        .zip(nodes.iter())
        .map(|(&id, record)| split_of(graph, id, record, threads))
        .collect();
    for (index, &id) in order.iter().enumerate() {
        // Only an op kept on one thread, with an expected time to add to.
        if splits[index] != Some(false) || nodes[index].expected_s.is_none() {
            continue;
        }
        let node = &graph.dag[id];
        let output_bytes: u64 = node.outputs.iter().map(|&v| stored_bytes(graph, v)).sum();
        // Each input once: `Mul(x, x)` reads x's lines from the other core once.
        let mut inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
        inputs.sort_unstable();
        inputs.dedup();
        let handoff_bytes: u64 = inputs
            .into_iter()
            .filter(|&value| !graph.values[value].fact.is_constant())
            .filter(|&value| {
                writer(graph, &position, value).and_then(|writer| splits[writer]) == Some(true)
            })
            .map(|value| stored_bytes(graph, value))
            .filter(|&bytes| bytes > 0 && output_bytes as f64 >= MIN_OUTPUT_SHARE * bytes as f64)
            .map(|bytes| other_cores_share(bytes, threads))
            .sum();
        if handoff_bytes > 0 {
            let record = &mut nodes[index];
            let handoff_s = handoff_bytes as f64 / (read_gbs * 1e9);
            record.handoff_s = Some(handoff_s);
            if let Some(expected) = record.expected_s.as_mut() {
                *expected += handoff_s;
                record.efficiency = Some(record.predicted_s / *expected);
            }
        }
    }
}

/// Whether the op splits across `threads`; `None` for views (they write nothing) and ops no
/// kernel class covers (their threading is not known).
fn split_of(graph: &Graph, id: NodeId, record: &NodeAnalysis, threads: usize) -> Option<bool> {
    if record.status != NodeStatus::Costed {
        return None;
    }
    let class = record.kernel_class?;
    let output_shape = graph.dag[id]
        .outputs
        .first()
        .and_then(|&v| graph.values[v].fact.concrete_shape())?;
    Some(classify::splits_across_threads(
        class,
        &record.op_type,
        threads,
        record.executed_flops.unwrap_or(record.flops),
        &output_shape,
    ))
}

/// The position of the op that wrote `value`'s data: its producer, or through a chain of
/// views (Reshape, Flatten…: their first input) the op that wrote what they view. `None` for
/// graph inputs. An in-place Concat is returned as itself: a view record, whose split is
/// unknown (its parts have several writers).
fn writer(graph: &Graph, position: &HashMap<NodeId, usize>, mut value: ValueId) -> Option<usize> {
    loop {
        let producer = graph.values[value].producer?;
        let node = &graph.dag[producer];
        if !VIEW_OPS.contains(&node.op_type.as_str()) {
            return position.get(&producer).copied();
        }
        value = (*node.inputs.first()?)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::graph::Graph;
    use crate::analysis::tensor::{DType, TensorFact};
    use crate::device::calibration::KernelClass;

    /// A graph `x → dw (depthwise) → relu → reshape → mul(…, s) → out` with made-up records:
    /// the depthwise convolution splits, the ReLU and the Mul (88×3×96: 25 k floats) do not.
    fn plan() -> (Graph, Vec<NodeId>, Vec<NodeAnalysis>) {
        use crate::analysis::graph::Node;
        let mut graph = Graph::default();
        let shape = [1u64, 88, 3, 96];
        let value = |graph: &mut Graph, name: &str, fact: TensorFact| {
            graph.values.push(crate::analysis::graph::Value {
                name: name.into(),
                fact,
                producer: None,
                declared: None,
            });
            graph.values.len() - 1
        };
        let x = value(&mut graph, "x", TensorFact::known(DType::F32, &shape));
        let d = value(&mut graph, "d", TensorFact::known(DType::F32, &shape));
        let r = value(&mut graph, "r", TensorFact::known(DType::F32, &shape));
        let v = value(&mut graph, "v", TensorFact::known(DType::F32, &shape));
        let s = value(
            &mut graph,
            "s",
            TensorFact::known(DType::F32, &[1, 88, 1, 1]),
        );
        let y = value(&mut graph, "y", TensorFact::known(DType::F32, &shape));
        let ops = [
            ("dw", "Conv", vec![x], d, Some(KernelClass::Depthwise)),
            ("relu", "Relu", vec![d], r, Some(KernelClass::Elementwise)),
            ("view", "Reshape", vec![r], v, None),
            ("mul", "Mul", vec![v, s], y, Some(KernelClass::Elementwise)),
        ];
        let mut order = Vec::new();
        let mut records = Vec::new();
        for (index, (name, op_type, inputs, output, class)) in ops.into_iter().enumerate() {
            let id = graph.dag.add_node(Node {
                name: name.into(),
                op_type: op_type.into(),
                domain: String::new(),
                attrs: Default::default(),
                inputs: inputs.into_iter().map(Some).collect(),
                outputs: vec![output],
            });
            graph.values[output].producer = Some(id);
            order.push(id);
            records.push(NodeAnalysis {
                status: if class.is_some() {
                    NodeStatus::Costed
                } else {
                    NodeStatus::View
                },
                flops: 25_344 * 50,
                predicted_s: 1e-6,
                kernel_class: class,
                expected_s: class.map(|_| 2e-6),
                ..NodeAnalysis::new(index, name, op_type)
            });
        }
        (graph, order, records)
    }

    #[test]
    fn an_op_kept_on_one_thread_after_a_split_one_reads_the_other_cores_share() {
        let (graph, order, mut records) = plan();
        charge(&graph, &order, &mut records, 2, 10.0);
        let bytes = 88.0 * 3.0 * 96.0 * 4.0;
        // The ReLU reads half of the depthwise output from the other core: 50.7 kB at 10 GB/s.
        let relu = records[1].handoff_s.expect("charged");
        assert!((relu - bytes / 2.0 / 10e9).abs() < 1e-12, "{relu}");
        assert!((records[1].expected_s.unwrap() - (2e-6 + relu)).abs() < 1e-12);
        assert!((records[1].efficiency.unwrap() - 1e-6 / (2e-6 + relu)).abs() < 1e-9);
        // The Mul reads the ReLU's output through the view: both on one thread, nothing moves;
        // its per-channel scale is a graph input.
        assert_eq!(records[3].handoff_s, None);
        assert_eq!(records[3].expected_s, Some(2e-6));
        // The depthwise convolution reads a graph input; the bound is never charged.
        assert_eq!(records[0].handoff_s, None);
        assert!(records.iter().all(|r| r.predicted_s == 1e-6));
        // On one thread, or without a rate, nothing is charged.
        for (threads, gbs) in [(1, 10.0), (2, 0.0), (2, f64::NAN)] {
            let (graph, order, mut records) = plan();
            charge(&graph, &order, &mut records, threads, gbs);
            assert!(records.iter().all(|r| r.handoff_s.is_none()));
        }
    }

    #[test]
    fn ops_that_split_after_one_thread_or_write_little_are_not_charged() {
        // 101 k floats: the ReLU splits like the depthwise convolution, nothing moves.
        let big = TensorFact::known(DType::F32, &[1, 88, 12, 96]);
        let (mut graph, order, mut records) = plan();
        for value in [0, 1, 2, 3, 5] {
            graph.values[value].fact = big.clone();
        }
        charge(&graph, &order, &mut records, 4, 10.0);
        assert!(records.iter().all(|r| r.handoff_s.is_none()));
        // The ReLU kept on one thread (a class the kernels do not split at its work), the Mul
        // after it split: its other threads' parts come from the ReLU's core, not charged.
        let (mut graph, order, mut records) = plan();
        for value in [2, 3, 5] {
            graph.values[value].fact = big.clone();
        }
        records[1].kernel_class = Some(KernelClass::Pointwise);
        records[1].flops = 1000;
        charge(&graph, &order, &mut records, 4, 10.0);
        assert!(records[1].handoff_s.is_some());
        assert_eq!(records[3].handoff_s, None);
        // A global pool of the split output writes one float per channel: not charged.
        let (mut graph, order, mut records) = plan();
        graph.values[2].fact = TensorFact::known(DType::F32, &[1, 88, 1, 1]);
        records[1].op_type = "GlobalAveragePool".into();
        records[1].kernel_class = Some(KernelClass::Pool);
        // One addition per input element: too little work to split.
        records[1].flops = 88 * 3 * 96;
        charge(&graph, &order, &mut records, 2, 10.0);
        assert_eq!(records[1].handoff_s, None);
    }
}
