//! Element-wise kernels: unary maps and numpy-broadcasting binary ops over f32, plus fused chains
//! of element-wise steps (one pass over memory instead of one per op).

use super::math;
use super::simd::multiversion;

/// A unary element-wise function. Also the vocabulary of fused chains.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    Relu,
    LeakyRelu(f32),
    Clip(f32, f32),
    Sigmoid,
    HardSigmoid(f32, f32),
    HardSwish,
    Tanh,
    Gelu,
    Erf,
    Softplus,
    Sqrt,
    Exp,
    Log,
    Neg,
    Abs,
    Reciprocal,
    Floor,
    Ceil,
    Round,
    Sign,
    Elu(f32),
    Selu(f32, f32),
    Mish,
    Softsign,
    Sin,
    Cos,
    /// x · c
    MulScalar(f32),
    /// x + c
    AddScalar(f32),
    /// x^c
    PowScalar(f32),
    Identity,
}

#[inline(always)]
pub fn apply_unary(op: Unary, x: f32) -> f32 {
    match op {
        Unary::Relu => x.max(0.0),
        Unary::LeakyRelu(alpha) => {
            if x >= 0.0 {
                x
            } else {
                alpha * x
            }
        }
        Unary::Clip(lo, hi) => x.max(lo).min(hi),
        Unary::Sigmoid => math::sigmoid(x),
        Unary::HardSigmoid(alpha, beta) => (alpha * x + beta).clamp(0.0, 1.0),
        Unary::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Unary::Tanh => math::tanh(x),
        Unary::Gelu => math::gelu(x),
        Unary::Erf => math::erf(x),
        Unary::Softplus => {
            if x > 20.0 {
                x
            } else {
                math::ln(1.0 + math::exp(x))
            }
        }
        Unary::Sqrt => x.sqrt(),
        Unary::Exp => math::exp(x),
        Unary::Log => math::ln(x),
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Reciprocal => 1.0 / x,
        Unary::Floor => x.floor(),
        Unary::Ceil => x.ceil(),
        Unary::Round => x.round_ties_even(),
        Unary::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Unary::Elu(alpha) => {
            if x >= 0.0 {
                x
            } else {
                alpha * (math::exp(x) - 1.0)
            }
        }
        Unary::Selu(alpha, gamma) => {
            if x > 0.0 {
                gamma * x
            } else {
                gamma * alpha * (math::exp(x) - 1.0)
            }
        }
        Unary::Mish => {
            let sp = if x > 20.0 {
                x
            } else {
                math::ln(1.0 + math::exp(x))
            };
            x * math::tanh(sp)
        }
        Unary::Softsign => x / (1.0 + x.abs()),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::MulScalar(c) => x * c,
        Unary::AddScalar(c) => x + c,
        Unary::PowScalar(c) => {
            if c == 2.0 {
                x * x
            } else if c == 0.5 {
                x.sqrt()
            } else if c == 1.0 {
                x
            } else {
                x.powf(c)
            }
        }
        Unary::Identity => x,
    }
}

/// Expands to one specialised loop per enum variant, so each loop body is branch-free and
/// vectorises (a `match` inside the loop would be re-evaluated per element).
macro_rules! per_unary {
    ($op:expr, |$f:ident| $loop:expr) => {
        match $op {
            Unary::Relu => {
                let $f = |v: f32| v.max(0.0);
                $loop
            }
            Unary::Clip(lo, hi) => {
                let $f = move |v: f32| v.max(lo).min(hi);
                $loop
            }
            Unary::Sigmoid => {
                let $f = math::sigmoid;
                $loop
            }
            Unary::HardSwish => {
                let $f = |v: f32| apply_unary(Unary::HardSwish, v);
                $loop
            }
            Unary::HardSigmoid(a, b) => {
                let $f = move |v: f32| (a * v + b).clamp(0.0, 1.0);
                $loop
            }
            Unary::Tanh => {
                let $f = math::tanh;
                $loop
            }
            Unary::Gelu => {
                let $f = math::gelu;
                $loop
            }
            Unary::Erf => {
                let $f = math::erf;
                $loop
            }
            Unary::Exp => {
                let $f = math::exp;
                $loop
            }
            Unary::LeakyRelu(alpha) => {
                let $f = move |v: f32| if v >= 0.0 { v } else { alpha * v };
                $loop
            }
            Unary::MulScalar(c) => {
                let $f = move |v: f32| v * c;
                $loop
            }
            Unary::AddScalar(c) => {
                let $f = move |v: f32| v + c;
                $loop
            }
            Unary::Sqrt => {
                let $f = |v: f32| v.sqrt();
                $loop
            }
            Unary::Neg => {
                let $f = |v: f32| -v;
                $loop
            }
            Unary::Abs => {
                let $f = |v: f32| v.abs();
                $loop
            }
            Unary::Reciprocal => {
                let $f = |v: f32| 1.0 / v;
                $loop
            }
            other => {
                let $f = move |v: f32| apply_unary(other, v);
                $loop
            }
        }
    };
}

multiversion! {
    /// y[i] = op(x[i]).
    pub fn unary(op: Unary, x: &[f32], y: &mut [f32]) {
        per_unary!(op, |f| {
            for (out, &v) in y.iter_mut().zip(x) {
                *out = f(v);
            }
        })
    }
}

multiversion! {
    /// In place: x[i] = op(x[i]).
    pub fn unary_in_place(op: Unary, x: &mut [f32]) {
        per_unary!(op, |f| {
            for v in x.iter_mut() {
                *v = f(*v);
            }
        })
    }
}

/// A binary element-wise function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    PRelu,
    Mod,
}

#[inline(always)]
pub fn apply_binary(op: Binary, a: f32, b: f32) -> f32 {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        Binary::Pow => {
            if b == 2.0 {
                a * a
            } else {
                a.powf(b)
            }
        }
        Binary::Max => a.max(b),
        Binary::Min => a.min(b),
        Binary::PRelu => {
            if a >= 0.0 {
                a
            } else {
                a * b
            }
        }
        Binary::Mod => a % b,
    }
}

macro_rules! per_binary {
    ($op:expr, |$f:ident| $loop:expr) => {
        match $op {
            Binary::Add => {
                let $f = |a: f32, b: f32| a + b;
                $loop
            }
            Binary::Sub => {
                let $f = |a: f32, b: f32| a - b;
                $loop
            }
            Binary::Mul => {
                let $f = |a: f32, b: f32| a * b;
                $loop
            }
            Binary::Div => {
                let $f = |a: f32, b: f32| a / b;
                $loop
            }
            Binary::Max => {
                let $f = |a: f32, b: f32| a.max(b);
                $loop
            }
            Binary::Min => {
                let $f = |a: f32, b: f32| a.min(b);
                $loop
            }
            other => {
                let $f = move |a: f32, b: f32| apply_binary(other, a, b);
                $loop
            }
        }
    };
}

multiversion! {
    fn binary_same(op: Binary, a: &[f32], b: &[f32], out: &mut [f32]) {
        per_binary!(op, |f| {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        })
    }
}

multiversion! {
    fn binary_scalar_rhs(op: Binary, a: &[f32], b: f32, out: &mut [f32]) {
        per_binary!(op, |f| {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, b);
            }
        })
    }
}

multiversion! {
    fn binary_scalar_lhs(op: Binary, a: f32, b: &[f32], out: &mut [f32]) {
        per_binary!(op, |f| {
            for (o, &y) in out.iter_mut().zip(b) {
                *o = f(a, y);
            }
        })
    }
}

/// Strides of `shape` broadcast to `out_shape` (0 on broadcast axes).
pub fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let offset = out_shape.len() - shape.len();
    let mut own = vec![0usize; shape.len()];
    let mut acc = 1;
    for axis in (0..shape.len()).rev() {
        own[axis] = acc;
        acc *= shape[axis];
    }
    (0..out_shape.len())
        .map(|axis| {
            if axis < offset || shape[axis - offset] == 1 {
                0
            } else {
                own[axis - offset]
            }
        })
        .collect()
}

/// out = op(a, b) with numpy broadcasting; `out_shape` is the broadcast shape.
pub fn binary(
    op: Binary,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
) {
    if a.len() == out.len() && b.len() == out.len() {
        return binary_same(op, a, b, out);
    }
    if b.len() == 1 && a.len() == out.len() {
        return binary_scalar_rhs(op, a, b[0], out);
    }
    if a.len() == 1 && b.len() == out.len() {
        return binary_scalar_lhs(op, a[0], b, out);
    }
    // General case: walk the outer dims, run the innermost contiguous row with a fast loop.
    let rank = out_shape.len();
    let a_strides = broadcast_strides(a_shape, out_shape);
    let b_strides = broadcast_strides(b_shape, out_shape);
    let inner = out_shape.last().copied().unwrap_or(1);
    let rows = out.len() / inner.max(1);
    let mut index = vec![0usize; rank.saturating_sub(1)];
    for row in 0..rows {
        let (mut a_off, mut b_off) = (0, 0);
        for (axis, &i) in index.iter().enumerate() {
            a_off += i * a_strides[axis];
            b_off += i * b_strides[axis];
        }
        let out_row = &mut out[row * inner..(row + 1) * inner];
        let (a_in, b_in) = if rank > 0 {
            (a_strides[rank - 1], b_strides[rank - 1])
        } else {
            (0, 0)
        };
        match (a_in, b_in) {
            (1, 1) => binary_same(
                op,
                &a[a_off..a_off + inner],
                &b[b_off..b_off + inner],
                out_row,
            ),
            (1, 0) => binary_scalar_rhs(op, &a[a_off..a_off + inner], b[b_off], out_row),
            (0, 1) => binary_scalar_lhs(op, a[a_off], &b[b_off..b_off + inner], out_row),
            _ => {
                let value = apply_binary(op, a[a_off], b[b_off]);
                out_row.fill(value);
            }
        }
        // Increment the multi-index over the outer dims.
        for axis in (0..index.len()).rev() {
            index[axis] += 1;
            if index[axis] < out_shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// One step of a fused element-wise chain: x ← x op operand, or x ← f(x).
#[derive(Clone, Debug, PartialEq)]
pub enum ChainStep {
    Unary(Unary),
    /// x ← op(x, c[channel]) with a per-channel constant (NCHW channel axis), or a scalar when
    /// the slice has one element.
    WithConstant {
        op: Binary,
        values: Vec<f32>,
        swapped: bool,
    },
    /// x ← op(x, original input of the chain): the `x * clip(x+3,0,6)/6` hard-swish pattern.
    WithInput {
        op: Binary,
        swapped: bool,
    },
}

multiversion! {
    /// Applies a fused chain in one pass. `channel_size` is the number of contiguous elements
    /// per channel (H·W for NCHW), used by per-channel constants; `x` starts at channel block
    /// `first_block` of the tensor (a thread's share of it). The ISA is chosen once per call,
    /// not per channel block: DenseNet's 7×7 planes made the per-block dispatch cost more than
    /// the 49 elements' work.
    pub fn chain(
        steps: &[ChainStep],
        x: &[f32],
        y: &mut [f32],
        first_block: usize,
        channels: usize,
        channel_size: usize,
    ) {
        let block = channel_size.max(1);
        for (b, (xs, ys)) in x.chunks(block).zip(y.chunks_mut(block)).enumerate() {
            let channel = if channels > 0 {
                (first_block + b) % channels
            } else {
                0
            };
            chain_block(steps, xs, ys, channel);
        }
    }
}

/// One channel block of `chain`, inlined into each ISA's variant.
#[inline(always)]
fn chain_block(steps: &[ChainStep], x: &[f32], y: &mut [f32], channel: usize) {
    {
        y.copy_from_slice(x);
        for step in steps {
            match step {
                ChainStep::Unary(op) => per_unary!(*op, |f| {
                    for v in y.iter_mut() {
                        *v = f(*v);
                    }
                }),
                ChainStep::WithConstant {
                    op,
                    values,
                    swapped,
                } => {
                    let c = if values.len() == 1 {
                        values[0]
                    } else {
                        values[channel]
                    };
                    if *swapped {
                        per_binary!(*op, |f| {
                            for v in y.iter_mut() {
                                *v = f(c, *v);
                            }
                        })
                    } else {
                        per_binary!(*op, |f| {
                            for v in y.iter_mut() {
                                *v = f(*v, c);
                            }
                        })
                    }
                }
                ChainStep::WithInput { op, swapped } => {
                    if *swapped {
                        per_binary!(*op, |f| {
                            for (v, &orig) in y.iter_mut().zip(x) {
                                *v = f(orig, *v);
                            }
                        })
                    } else {
                        per_binary!(*op, |f| {
                            for (v, &orig) in y.iter_mut().zip(x) {
                                *v = f(*v, orig);
                            }
                        })
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_channel_add() {
        // [1,2,2,2] + [2,1,1]
        let a: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let b = [10.0, 20.0];
        let mut out = vec![0.0; 8];
        binary(
            Binary::Add,
            &a,
            &[1, 2, 2, 2],
            &b,
            &[2, 1, 1],
            &mut out,
            &[1, 2, 2, 2],
        );
        assert_eq!(out, vec![10.0, 11.0, 12.0, 13.0, 24.0, 25.0, 26.0, 27.0]);
    }

    #[test]
    fn broadcast_both_sides() {
        // [3,1] * [1,4]
        let a = [1.0, 2.0, 3.0];
        let b = [1.0, 10.0, 100.0, 1000.0];
        let mut out = vec![0.0; 12];
        binary(Binary::Mul, &a, &[3, 1], &b, &[1, 4], &mut out, &[3, 4]);
        assert_eq!(out[4..8], [2.0, 20.0, 200.0, 2000.0]);
    }

    #[test]
    fn every_isa_variant_matches_the_scalar_semantics() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 37.0).collect();
        let ops = [
            Unary::Relu,
            Unary::LeakyRelu(0.1),
            Unary::Clip(-1.0, 6.0),
            Unary::Sigmoid,
            Unary::HardSigmoid(0.2, 0.5),
            Unary::HardSwish,
            Unary::Tanh,
            Unary::Gelu,
            Unary::Erf,
            Unary::Softplus,
            Unary::Exp,
            Unary::Neg,
            Unary::Abs,
            Unary::Elu(1.0),
            Unary::Mish,
        ];
        for op in ops {
            let want: Vec<f32> = x.iter().map(|&v| apply_unary(op, v)).collect();
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; x.len()];
                unary::at(level, op, &x, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{op:?} at {level:?}: {g} vs {w}"
                    );
                }
            }
        }
        let b: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 + 0.5).collect();
        for op in [
            Binary::Add,
            Binary::Sub,
            Binary::Mul,
            Binary::Div,
            Binary::Max,
            Binary::PRelu,
        ] {
            let want: Vec<f32> = x
                .iter()
                .zip(&b)
                .map(|(&p, &q)| apply_binary(op, p, q))
                .collect();
            for level in crate::kernels::simd::available_levels() {
                let mut got = vec![0.0; x.len()];
                binary_same::at(level, op, &x, &b, &mut got);
                assert_eq!(got, want, "{op:?} at {level:?}");
            }
        }
    }

    #[test]
    fn hardswish_chain_matches_formula() {
        // x * clip(x + 3, 0, 6) / 6
        let steps = vec![
            ChainStep::Unary(Unary::AddScalar(3.0)),
            ChainStep::Unary(Unary::Clip(0.0, 6.0)),
            ChainStep::WithInput {
                op: Binary::Mul,
                swapped: false,
            },
            ChainStep::Unary(Unary::MulScalar(1.0 / 6.0)),
        ];
        let x = [-4.0, -1.0, 0.0, 2.0, 5.0];
        let mut y = [0.0; 5];
        chain(&steps, &x, &mut y, 0, 0, 5);
        for (v, &xi) in y.iter().zip(&x) {
            assert!((v - apply_unary(Unary::HardSwish, xi)).abs() < 1e-6);
        }
    }
}
