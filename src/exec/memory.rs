//! The buffer planner: gives every f32 activation a buffer that is free when the value is
//! defined and released after its last reader, so a plan needs the peak of live activations,
//! not their sum. Pure: it sees only which values each step reads and writes.

use std::collections::HashMap;

use crate::analysis::graph::ValueId;

/// The values one step reads and writes, as the planner sees them.
pub(crate) struct StepUse<'a> {
    pub inputs: &'a [Option<ValueId>],
    pub outputs: &'a [ValueId],
    /// The first output aliases the first input's buffer (Reshape, Flatten, Identity...).
    pub view: bool,
}

/// A value that lives in a slice of another value's buffer (`offset` elements in): a Concat's
/// input written where the Concat's output keeps it, or a Split's or Slice's output read where
/// its input holds it, so none of them copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub part: ValueId,
    pub whole: ValueId,
    pub offset: usize,
}

/// The planner's answer.
#[derive(Debug, PartialEq)]
pub(crate) struct BufferPlan {
    /// Elements of each buffer.
    pub sizes: Vec<usize>,
    /// The buffer of each value (indexed by `ValueId`; `None`: not a planned f32 value).
    pub buffer_of: Vec<Option<usize>>,
    /// Where in its buffer each value starts (elements; 0 but for placed values).
    pub offset_of: Vec<usize>,
    /// Bytes the activations would take without reuse.
    pub unplanned_bytes: u64,
}

/// Greedy static assignment: each f32 value gets a buffer free at its definition; buffers are
/// released after the last reader. Views share their source's buffer and extend its life;
/// `placements` put a value inside another's buffer at an offset (chains compose: the inputs
/// of a Concat that is itself placed land in the outermost Concat's buffer), and the buffer
/// of such a group lives from its first member's definition to its last member's last read.
/// `buffer_len[v]` is the element count of every value that lives in a planned buffer;
/// `graph_inputs` are the f32 inputs (written before the first step), `graph_outputs` are
/// read after the last one, so their buffers are never reused.
pub(crate) fn assign_buffers(
    steps: &[StepUse],
    buffer_len: &[Option<usize>],
    graph_inputs: &[(ValueId, usize)],
    graph_outputs: &[ValueId],
    placements: &[Placement],
) -> BufferPlan {
    // The value each value lives in, and where: views at offset 0 of their source, placed
    // values at their offset in the whole.
    let mut parent: HashMap<ValueId, (ValueId, usize)> = HashMap::new();
    for step in steps {
        if step.view {
            if let (Some(Some(src)), Some(&dst)) = (step.inputs.first(), step.outputs.first()) {
                parent.insert(dst, (*src, 0));
            }
        }
    }
    for placement in placements {
        parent.insert(placement.part, (placement.whole, placement.offset));
    }
    let locate = |v: ValueId| -> (ValueId, usize) {
        let (mut at, mut offset) = (v, 0);
        while let Some(&(up, more)) = parent.get(&at) {
            at = up;
            offset += more;
        }
        (at, offset)
    };
    let root_of = |v: ValueId| locate(v).0;
    let mut last_use: HashMap<ValueId, usize> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        for v in step.inputs.iter().flatten() {
            last_use.insert(root_of(*v), i);
        }
        // A group's buffer must also outlive its members' definitions: a Concat placed into
        // nothing that reads it is still written into until its last member is.
        for &v in step.outputs {
            let root = root_of(v);
            if root != v {
                let last = last_use.entry(root).or_insert(i);
                *last = (*last).max(i);
            }
        }
    }
    for v in graph_outputs {
        last_use.insert(root_of(*v), usize::MAX);
    }
    let mut sizes: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut assigned: HashMap<ValueId, usize> = HashMap::new();
    let mut unplanned = 0u64;
    let allocate = |len: usize, sizes: &mut Vec<usize>, free: &mut Vec<usize>| -> usize {
        // Smallest free buffer that fits, else grow the largest free one, else a new one.
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, &b)| sizes[b] >= len)
            .min_by_key(|(_, &b)| sizes[b])
            .map(|(i, _)| i);
        let pick = fit.or_else(|| {
            free.iter()
                .enumerate()
                .max_by_key(|(_, &b)| sizes[b])
                .map(|(i, _)| i)
        });
        match pick {
            Some(i) => {
                let b = free.swap_remove(i);
                sizes[b] = sizes[b].max(len);
                b
            }
            None => {
                sizes.push(len);
                sizes.len() - 1
            }
        }
    };
    for &(v, len) in graph_inputs {
        unplanned += len as u64 * 4;
        assigned.insert(v, allocate(len, &mut sizes, &mut free));
    }
    for (i, step) in steps.iter().enumerate() {
        for &v in step.outputs {
            if let Some(len) = buffer_len.get(v).copied().flatten() {
                let root = root_of(v);
                let placed = placements.iter().any(|p| p.part == v);
                if root != v && !placed {
                    // A view: no bytes of its own.
                    continue;
                }
                unplanned += len as u64 * 4;
                // The group's first member allocates the whole (the root's length).
                if let std::collections::hash_map::Entry::Vacant(entry) = assigned.entry(root) {
                    let whole = buffer_len.get(root).copied().flatten().unwrap_or(len);
                    entry.insert(allocate(whole.max(1), &mut sizes, &mut free));
                }
            }
        }
        // Release values whose last reader is this step (and outputs nobody reads).
        let mut released: Vec<ValueId> =
            step.inputs.iter().flatten().map(|&v| root_of(v)).collect();
        released.extend(
            step.outputs
                .iter()
                .map(|&v| root_of(v))
                .filter(|r| !last_use.contains_key(r) || last_use.get(r) == Some(&i)),
        );
        released.sort_unstable();
        released.dedup();
        for r in released {
            let done = last_use.get(&r).is_none_or(|&last| last == i);
            if done {
                if let Some(&b) = assigned.get(&r) {
                    if !free.contains(&b) {
                        free.push(b);
                    }
                }
            }
        }
    }
    let buffer_of = (0..buffer_len.len())
        .map(|v| assigned.get(&root_of(v)).copied())
        .collect();
    let offset_of = (0..buffer_len.len()).map(|v| locate(v).1).collect();
    BufferPlan {
        sizes,
        buffer_of,
        offset_of,
        unplanned_bytes: unplanned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of a hand-built graph: reads `inputs`, writes `outputs`.
    fn step<'a>(inputs: &'a [Option<ValueId>], outputs: &'a [ValueId]) -> StepUse<'a> {
        StepUse {
            inputs,
            outputs,
            view: false,
        }
    }

    #[test]
    fn a_buffer_is_reused_after_its_last_read() {
        // 0 → 1 → 2 → 3 (graph input 0, graph output 3), all of 8 elements.
        let steps = [
            step(&[Some(0)], &[1]),
            step(&[Some(1)], &[2]),
            step(&[Some(2)], &[3]),
        ];
        let plan = assign_buffers(&steps, &[Some(8); 4], &[(0, 8)], &[3], &[]);
        let b = &plan.buffer_of;
        // An output never shares the buffer of the step's own input (no in-place kernels)...
        assert_ne!(b[1], b[0]);
        assert_ne!(b[2], b[1]);
        assert_ne!(b[3], b[2]);
        // ...but takes one whose last reader has run: two buffers ping-pong.
        assert_eq!(b[2], b[0]);
        assert_eq!(b[3], b[1]);
        assert_eq!(plan.sizes, vec![8, 8]);
        assert_eq!(plan.unplanned_bytes, 4 * 8 * 4);
    }

    #[test]
    fn a_value_read_later_keeps_its_buffer() {
        // 0 → 1 → 2, then 3 = f(0, 2): the input stays live across the chain.
        let steps = [
            step(&[Some(0)], &[1]),
            step(&[Some(1)], &[2]),
            step(&[Some(0), Some(2)], &[3]),
        ];
        let plan = assign_buffers(&steps, &[Some(4); 4], &[(0, 4)], &[3], &[]);
        let b = &plan.buffer_of;
        assert_ne!(b[1], b[0]);
        assert_ne!(b[2], b[0]);
        // 3 may take 1's buffer (1 died at step 1) but never 0's or 2's.
        assert_eq!(b[3], b[1]);
        assert_eq!(plan.sizes.len(), 3);
    }

    #[test]
    fn a_view_aliases_its_source_in_place_and_extends_its_life() {
        // 1 = view(0); 2 = f(1); 3 = g(1, 2). The view has no buffer of its own, and 0's buffer
        // stays live until the view's last reader (step 2).
        let mut steps = vec![
            step(&[Some(0)], &[1]),
            step(&[Some(1)], &[2]),
            step(&[Some(1), Some(2)], &[3]),
        ];
        steps[0].view = true;
        let plan = assign_buffers(&steps, &[Some(6); 4], &[(0, 6)], &[3], &[]);
        let b = &plan.buffer_of;
        assert_eq!(b[1], b[0], "the view shares its source's buffer");
        assert_ne!(b[2], b[0]);
        assert_ne!(
            b[3], b[0],
            "the source is still read through the view at step 2"
        );
        assert_ne!(b[3], b[2]);
        assert_eq!(plan.sizes.len(), 3);
        // The view is not counted twice.
        assert_eq!(plan.unplanned_bytes, 3 * 6 * 4);
        // Views of views resolve to the first source.
        let mut chain = vec![step(&[Some(0)], &[1]), step(&[Some(1)], &[2])];
        chain[0].view = true;
        chain[1].view = true;
        let plan = assign_buffers(&chain, &[Some(6); 3], &[(0, 6)], &[2], &[]);
        assert_eq!(plan.buffer_of, vec![Some(0); 3]);
        assert_eq!(plan.sizes, vec![6]);
    }

    #[test]
    fn graph_outputs_are_never_reused() {
        // 1 = f(0) is a graph output nobody reads; 2 = g(0); 3 = h(2), also an output;
        // 4 = k(3) is read by nobody and is not an output: its buffer is free at once.
        let steps = [
            step(&[Some(0)], &[1]),
            step(&[Some(0)], &[2]),
            step(&[Some(2)], &[3]),
            step(&[Some(3)], &[4]),
            step(&[Some(3)], &[5]),
        ];
        let plan = assign_buffers(&steps, &[Some(5); 6], &[(0, 5)], &[1, 3, 5], &[]);
        let b = &plan.buffer_of;
        for v in [0, 2, 4, 5] {
            assert_ne!(b[v], b[1], "value {v} took graph output 1's buffer");
        }
        for v in [4, 5] {
            assert_ne!(b[v], b[3], "value {v} took graph output 3's buffer");
        }
        // The dead value 4 gave its buffer back before step 4.
        assert_eq!(b[5], b[4]);
    }

    #[test]
    fn sizes_take_the_smallest_fit_else_grow_the_largest_free_buffer() {
        // 0 (10) → 1 (4) → 2 (20) → 3 (3) → 4 (0 elements).
        let steps = [
            step(&[Some(0)], &[1]),
            step(&[Some(1)], &[2]),
            step(&[Some(2)], &[3]),
            step(&[Some(3)], &[4]),
        ];
        let lens = [Some(10), Some(4), Some(20), Some(3), Some(0)];
        let plan = assign_buffers(&steps, &lens, &[(0, 10)], &[4], &[]);
        // 2 fits in no free buffer: 0's grows from 10 to 20. 3 fits in 1's (4). The empty 4
        // still gets a buffer (of at least one element): the one 2 freed.
        assert_eq!(plan.buffer_of[..4], [Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(plan.buffer_of[4], Some(0));
        assert_eq!(plan.sizes, vec![20, 4]);
        assert_eq!(plan.unplanned_bytes, (10 + 4 + 20 + 3) * 4);
    }

    /// A DenseNet block: 2 = f(1), 3 = concat(1, 2), 4 = g(3), 5 = concat(3, 4), 6 = h(5),
    /// with 1 and 2 placed in 3, and 3 and 4 in 5 (4 elements each, 1 from the graph input 0).
    #[test]
    fn placed_values_share_the_whole_at_their_offsets() {
        let steps = [
            step(&[Some(0)], &[1]),
            step(&[Some(1)], &[2]),
            step(&[Some(1), Some(2)], &[3]),
            step(&[Some(3)], &[4]),
            step(&[Some(3), Some(4)], &[5]),
            step(&[Some(5)], &[6]),
        ];
        let lens = [
            Some(4),
            Some(4),
            Some(4),
            Some(8),
            Some(4),
            Some(12),
            Some(4),
        ];
        let placements = [
            Placement {
                part: 1,
                whole: 3,
                offset: 0,
            },
            Placement {
                part: 2,
                whole: 3,
                offset: 4,
            },
            Placement {
                part: 3,
                whole: 5,
                offset: 0,
            },
            Placement {
                part: 4,
                whole: 5,
                offset: 8,
            },
        ];
        let plan = assign_buffers(&steps, &lens, &[(0, 4)], &[6], &placements);
        let b = &plan.buffer_of;
        // One buffer holds the whole block, each value at its slice.
        for v in [1, 2, 3, 4] {
            assert_eq!(b[v], b[5], "value {v}");
        }
        assert_eq!(plan.offset_of[1..6], [0, 4, 0, 8, 0]);
        // It was allocated at the block's first write (step 0) at the outer whole's size, and
        // is not handed to the graph input's buffer or to the value read from it.
        assert_ne!(b[5], b[0]);
        assert_ne!(b[6], b[5]);
        assert_eq!(plan.sizes[b[5].unwrap()], 12);
    }

    #[test]
    fn values_outside_buffers_are_not_planned() {
        // Value 1 is integer (kept in the dynamic map), value 2 a constant: neither gets a
        // buffer, and reading them frees nothing.
        let steps = [step(&[Some(0), Some(2)], &[1]), step(&[Some(1)], &[3])];
        let lens = [Some(2), None, None, Some(2)];
        let plan = assign_buffers(&steps, &lens, &[(0, 2)], &[3], &[]);
        assert_eq!(plan.buffer_of, vec![Some(0), None, None, Some(0)]);
        assert_eq!(plan.sizes, vec![2]);
    }
}
