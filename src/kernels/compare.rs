//! The kernels that produce or consume booleans: ONNX comparisons (written as 0/1 in the
//! runtime's integer type) and `Where`, each on an operand layout derived once per plan.

use super::elementwise::{broadcast_strides, BroadcastLayout};
use super::simd::multiversion;

/// An ONNX comparison (Equal, Less, Greater, LessOrEqual, GreaterOrEqual).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Comparison {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

impl Comparison {
    #[inline(always)]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Comparison::Equal => a == b,
            Comparison::Less => a < b,
            Comparison::Greater => a > b,
            Comparison::LessOrEqual => a <= b,
            Comparison::GreaterOrEqual => a >= b,
        }
    }
}

/// Where a comparison writes: booleans as the executor holds them (0 / 1 in i64), or 0.0 /
/// 1.0 (a comparison cast to float, run as one step).
pub enum CompareOut<'o> {
    Ints(&'o mut [i64]),
    Floats(&'o mut [f32]),
}

/// The element types a comparison runs on, each with its loop compiled per ISA.
pub trait Compared: Copy + PartialOrd {
    fn compare_rows(
        op: Comparison,
        a: &[Self],
        b: &[Self],
        layout: &BroadcastLayout,
        out: CompareOut,
    );
}

impl Compared for i64 {
    fn compare_rows(
        op: Comparison,
        a: &[i64],
        b: &[i64],
        layout: &BroadcastLayout,
        out: CompareOut,
    ) {
        compare_i64(op, a, b, layout, out)
    }
}

impl Compared for f32 {
    fn compare_rows(
        op: Comparison,
        a: &[f32],
        b: &[f32],
        layout: &BroadcastLayout,
        out: CompareOut,
    ) {
        compare_f32(op, a, b, layout, out)
    }
}

/// out = (a ⋈ b) as 0/1 with numpy broadcasting, over floats or integers (a one-hot's
/// `Equal(ids[.., 1], range[1, n])`).
pub fn compare<T: Compared>(
    op: Comparison,
    a: &[T],
    b: &[T],
    layout: &BroadcastLayout,
    out: CompareOut,
) {
    T::compare_rows(op, a, b, layout, out)
}

// Compiled per ISA, as the other element-wise loops (at the baseline a 64-bit comparison is
// four SSE2 instructions per pair of elements). Measured in magika's one-hot, this alone
// changed nothing: its 64-bit boolean stores were the cost (see `analysis::compare_casts`).
multiversion! {
    fn compare_i64(op: Comparison, a: &[i64], b: &[i64], layout: &BroadcastLayout, out: CompareOut) {
        compare_any(op, a, b, layout, out)
    }
}

multiversion! {
    fn compare_f32(op: Comparison, a: &[f32], b: &[f32], layout: &BroadcastLayout, out: CompareOut) {
        compare_any(op, a, b, layout, out)
    }
}

/// The value a holding (or failing) comparison writes.
trait Truth: Copy {
    fn of(holds: bool) -> Self;
}

impl Truth for i64 {
    #[inline(always)]
    fn of(holds: bool) -> i64 {
        i64::from(holds)
    }
}

impl Truth for f32 {
    #[inline(always)]
    fn of(holds: bool) -> f32 {
        if holds {
            1.0
        } else {
            0.0
        }
    }
}

#[inline(always)]
fn compare_any<T: Copy + PartialOrd>(
    op: Comparison,
    a: &[T],
    b: &[T],
    layout: &BroadcastLayout,
    out: CompareOut,
) {
    match out {
        CompareOut::Ints(out) => compare_into(op, a, b, layout, out),
        CompareOut::Floats(out) => compare_into(op, a, b, layout, out),
    }
}

#[inline(always)]
fn compare_into<T: Copy + PartialOrd, O: Truth>(
    op: Comparison,
    a: &[T],
    b: &[T],
    layout: &BroadcastLayout,
    out: &mut [O],
) {
    // One monomorphic loop per comparison: a `match` per element kept the loop scalar.
    match op {
        Comparison::Equal => compare_with(a, b, layout, out, |x, y| x == y),
        Comparison::Less => compare_with(a, b, layout, out, |x, y| x < y),
        Comparison::Greater => compare_with(a, b, layout, out, |x, y| x > y),
        Comparison::LessOrEqual => compare_with(a, b, layout, out, |x, y| x <= y),
        Comparison::GreaterOrEqual => compare_with(a, b, layout, out, |x, y| x >= y),
    }
}

#[inline(always)]
fn compare_with<T: Copy, O: Truth>(
    a: &[T],
    b: &[T],
    layout: &BroadcastLayout,
    out: &mut [O],
    holds: impl Fn(T, T) -> bool,
) {
    let inner = layout.inner.max(1);
    layout.visit_rows(
        0,
        out.len() / inner,
        #[inline(always)]
        |row, a_off, b_off| {
            let row = &mut out[row * inner..(row + 1) * inner];
            // Each operand advances one element per output along the row, or repeats its first:
            // four loops, so the common ones (a scalar against a row) are plain slices.
            match (layout.a_inner_contiguous, layout.b_inner_contiguous) {
                (true, true) => {
                    let (a, b) = (&a[a_off..a_off + inner], &b[b_off..b_off + inner]);
                    for ((o, &x), &y) in row.iter_mut().zip(a).zip(b) {
                        *o = O::of(holds(x, y));
                    }
                }
                (false, true) => {
                    let (x, b) = (a[a_off], &b[b_off..b_off + inner]);
                    for (o, &y) in row.iter_mut().zip(b) {
                        *o = O::of(holds(x, y));
                    }
                }
                (true, false) => {
                    let (a, y) = (&a[a_off..a_off + inner], b[b_off]);
                    for (o, &x) in row.iter_mut().zip(a) {
                        *o = O::of(holds(x, y));
                    }
                }
                (false, false) => row.fill(O::of(holds(a[a_off], b[b_off]))),
            }
        },
    );
}

/// `Where`'s operand layout, derived once from the shapes: each operand's strides seen from the
/// output (0 along broadcast axes), for a walk over the output's rows (its last axis).
#[derive(Clone, Debug, PartialEq)]
pub struct SelectLayout {
    /// Condition, then the value taken where it holds, then the other.
    strides: [Vec<usize>; 3],
    out_shape: Vec<usize>,
}

impl SelectLayout {
    pub fn new(shapes: [&[usize]; 3], out_shape: &[usize]) -> SelectLayout {
        SelectLayout {
            strides: shapes.map(|shape| broadcast_strides(shape, out_shape)),
            out_shape: out_shape.to_vec(),
        }
    }

    /// Elements per row: the output's last axis (1 for a scalar output).
    pub fn row_len(&self) -> usize {
        self.out_shape.last().copied().unwrap_or(1)
    }
}

/// `out = where(cond, a, b)` over the rows `first_row..` that `out` covers. Each operand steps
/// along a row by its own stride (1, or 0 when it repeats one value), and the common cases (the
/// attention mask: a contiguous condition and scores against a scalar fill) run as plain zips
/// the compiler vectorises.
pub fn select<C: Copy + Default + PartialEq>(
    cond: &[C],
    a: &[f32],
    b: &[f32],
    layout: &SelectLayout,
    out: &mut [f32],
    first_row: usize,
) {
    let inner = layout.row_len().max(1);
    let outer = &layout.out_shape[..layout.out_shape.len().saturating_sub(1)];
    let last = |strides: &Vec<usize>| strides.last().copied().unwrap_or(0);
    let steps = [
        last(&layout.strides[0]),
        last(&layout.strides[1]),
        last(&layout.strides[2]),
    ];
    let zero = C::default();
    // The odometer over the outer axes, started at `first_row`.
    let mut index = vec![0usize; outer.len()];
    let mut rest = first_row;
    for axis in (0..outer.len()).rev() {
        index[axis] = rest % outer[axis].max(1);
        rest /= outer[axis].max(1);
    }
    let offset = |strides: &Vec<usize>, index: &[usize]| -> usize {
        index.iter().zip(strides).map(|(i, s)| i * s).sum()
    };
    for row in out.chunks_mut(inner) {
        let n = row.len();
        let (c0, a0, b0) = (
            offset(&layout.strides[0], &index),
            offset(&layout.strides[1], &index),
            offset(&layout.strides[2], &index),
        );
        match steps {
            [1, 1, 1] => {
                let (c, a, b) = (&cond[c0..c0 + n], &a[a0..a0 + n], &b[b0..b0 + n]);
                for (o, ((&cv, &av), &bv)) in row.iter_mut().zip(c.iter().zip(a).zip(b)) {
                    *o = if cv != zero { av } else { bv };
                }
            }
            [1, 1, 0] => {
                let (c, a, bv) = (&cond[c0..c0 + n], &a[a0..a0 + n], b[b0]);
                for (o, (&cv, &av)) in row.iter_mut().zip(c.iter().zip(a)) {
                    *o = if cv != zero { av } else { bv };
                }
            }
            [1, 0, 1] => {
                let (c, av, b) = (&cond[c0..c0 + n], a[a0], &b[b0..b0 + n]);
                for (o, (&cv, &bv)) in row.iter_mut().zip(c.iter().zip(b)) {
                    *o = if cv != zero { av } else { bv };
                }
            }
            [0, _, _] => {
                // One condition for the whole row: copy the row it picks.
                let (src, start, step) = if cond[c0] != zero {
                    (a, a0, steps[1])
                } else {
                    (b, b0, steps[2])
                };
                if step == 1 {
                    row.copy_from_slice(&src[start..start + n]);
                } else {
                    row.fill(src[start]);
                }
            }
            [cs, as_, bs] => {
                for (k, o) in row.iter_mut().enumerate() {
                    *o = if cond[c0 + k * cs] != zero {
                        a[a0 + k * as_]
                    } else {
                        b[b0 + k * bs]
                    };
                }
            }
        }
        // Next row.
        for axis in (0..index.len()).rev() {
            index[axis] += 1;
            if index[axis] < outer[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `where(c, a, b)` by its definition: every output index mapped back to each operand.
    fn naive_select(
        shapes: [&[usize]; 3],
        cond: &[i64],
        a: &[f32],
        b: &[f32],
        out_shape: &[usize],
    ) -> Vec<f32> {
        let strides = shapes.map(|shape| broadcast_strides(shape, out_shape));
        let n: usize = out_shape.iter().product();
        (0..n)
            .map(|flat| {
                let mut rest = flat;
                let mut at = [0usize; 3];
                for axis in (0..out_shape.len()).rev() {
                    let i = rest % out_shape[axis];
                    rest /= out_shape[axis];
                    for (o, s) in at.iter_mut().zip(&strides) {
                        *o += i * s[axis];
                    }
                }
                if cond[at[0]] != 0 {
                    a[at[1]]
                } else {
                    b[at[2]]
                }
            })
            .collect()
    }

    #[test]
    fn select_matches_the_definition_from_any_first_row() {
        // The decode mask (contiguous condition, scalar fill), full shapes, a row-wide
        // condition, a scalar value row, and strided broadcasts on every operand.
        let cases: [([&[usize]; 3], &[usize]); 6] = [
            ([&[1, 1, 1, 9], &[1, 2, 2, 9], &[]], &[1, 2, 2, 9]),
            ([&[2, 3, 5], &[2, 3, 5], &[2, 3, 5]], &[2, 3, 5]),
            ([&[2, 3, 1], &[2, 3, 5], &[5]], &[2, 3, 5]),
            ([&[3, 5], &[1], &[3, 5]], &[3, 5]),
            ([&[4, 1, 6], &[1, 3, 1], &[3, 6]], &[4, 3, 6]),
            ([&[], &[7], &[]], &[7]),
        ];
        for (shapes, out_shape) in cases {
            let len = |shape: &[usize]| shape.iter().product::<usize>();
            let cond: Vec<i64> = (0..len(shapes[0])).map(|i| (i % 3 == 1) as i64).collect();
            let a: Vec<f32> = (0..len(shapes[1])).map(|i| i as f32 + 0.5).collect();
            let b: Vec<f32> = (0..len(shapes[2])).map(|i| -(i as f32) - 1.0).collect();
            let expected = naive_select(shapes, &cond, &a, &b, out_shape);
            let layout = SelectLayout::new(shapes, out_shape);
            let row = layout.row_len().max(1);
            let rows = expected.len() / row;
            for first in [0, rows / 2] {
                let mut out = vec![0.0; (rows - first) * row];
                select(&cond, &a, &b, &layout, &mut out, first);
                assert_eq!(out, expected[first * row..], "{shapes:?} from row {first}");
            }
        }
    }
}
