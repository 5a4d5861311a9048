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
        Unary::Sin => math::sin(x),
        Unary::Cos => math::cos(x),
        Unary::MulScalar(c) => x * c,
        Unary::AddScalar(c) => x + c,
        Unary::PowScalar(c) => {
            if c == 2.0 {
                x * x
            } else if c == 3.0 {
                x * x * x
            } else if c == 4.0 {
                let square = x * x;
                square * square
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
            // The rest name their variant too: a catch-all arm calling `apply_unary(other, v)`
            // left its `match` inside the loop, a jump table per element.
            Unary::Softplus => {
                let $f = |v: f32| apply_unary(Unary::Softplus, v);
                $loop
            }
            Unary::Log => {
                let $f = |v: f32| apply_unary(Unary::Log, v);
                $loop
            }
            Unary::Floor => {
                let $f = |v: f32| apply_unary(Unary::Floor, v);
                $loop
            }
            Unary::Ceil => {
                let $f = |v: f32| apply_unary(Unary::Ceil, v);
                $loop
            }
            Unary::Round => {
                let $f = |v: f32| apply_unary(Unary::Round, v);
                $loop
            }
            Unary::Sign => {
                let $f = |v: f32| apply_unary(Unary::Sign, v);
                $loop
            }
            Unary::Mish => {
                let $f = |v: f32| apply_unary(Unary::Mish, v);
                $loop
            }
            Unary::Softsign => {
                let $f = |v: f32| apply_unary(Unary::Softsign, v);
                $loop
            }
            Unary::Sin => {
                let $f = |v: f32| apply_unary(Unary::Sin, v);
                $loop
            }
            Unary::Cos => {
                let $f = |v: f32| apply_unary(Unary::Cos, v);
                $loop
            }
            Unary::Identity => {
                let $f = |v: f32| apply_unary(Unary::Identity, v);
                $loop
            }
            Unary::Elu(alpha) => {
                let $f = move |v: f32| apply_unary(Unary::Elu(alpha), v);
                $loop
            }
            Unary::Selu(alpha, gamma) => {
                let $f = move |v: f32| apply_unary(Unary::Selu(alpha, gamma), v);
                $loop
            }
            Unary::PowScalar(c) if c == 2.0 => {
                let $f = |v: f32| v * v;
                $loop
            }
            // A tanh GELU's cube (T5, GPT-2 exports): through `powf` it ran 100× its bound.
            Unary::PowScalar(c) if c == 3.0 => {
                let $f = |v: f32| v * v * v;
                $loop
            }
            Unary::PowScalar(c) if c == 4.0 => {
                let $f = |v: f32| {
                    let square = v * v;
                    square * square
                };
                $loop
            }
            Unary::PowScalar(c) => {
                let $f = move |v: f32| apply_unary(Unary::PowScalar(c), v);
                $loop
            }
        }
    };
}

/// y[i] = op(x[i]), at the best ISA level.
pub fn unary(op: Unary, x: &[f32], y: &mut [f32]) {
    unary_at(super::simd::isa_level(), op, x, y)
}

/// y[i] = op(x[i]) at `level` or the best below it the CPU has. Sin and Cos at the scalar level
/// take libm's: their reduction and polynomials are a dozen `mul_add`s an element, each a call
/// to `fmaf` in code compiled without FMA, slower than one libm call.
pub fn unary_at(level: super::simd::IsaLevel, op: Unary, x: &[f32], y: &mut [f32]) {
    // Only x86 without FMA lacks a fused multiply-add instruction in baseline code.
    let scalar = cfg!(target_arch = "x86_64")
        && level.min(super::simd::isa_level()) == super::simd::IsaLevel::Scalar;
    match op {
        Unary::Sin if scalar => y.iter_mut().zip(x).for_each(|(o, &v)| *o = v.sin()),
        Unary::Cos if scalar => y.iter_mut().zip(x).for_each(|(o, &v)| *o = v.cos()),
        _ => unary_vectorised::at(level, op, x, y),
    }
}

multiversion! {
    /// y[i] = op(x[i]), compiled per ISA.
    pub fn unary_vectorised(op: Unary, x: &[f32], y: &mut [f32]) {
        match op {
            Unary::Sin => return trig_blocks(x, y, math::sin_in_range, f32::sin),
            Unary::Cos => return trig_blocks(x, y, math::cos_in_range, f32::cos),
            _ => {}
        }
        per_unary!(op, |f| {
            for (out, &v) in y.iter_mut().zip(x) {
                *out = f(v);
            }
        })
    }
}

/// Sin or Cos over blocks: the branch-free reduction and polynomials for the whole block (one
/// vectorised loop), then libm's for the rare elements past [`math::TRIG_LIMIT`] or NaN. A
/// libm call in the loop kept it scalar: 7 ns an element, 2.5-2.8× onnxruntime's time on a
/// 64×56×56 tensor.
#[inline(always)]
fn trig_blocks(x: &[f32], y: &mut [f32], in_range: impl Fn(f32) -> f32, libm: impl Fn(f32) -> f32) {
    const BLOCK: usize = 64;
    for (out, values) in y.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
        for (o, &v) in out.iter_mut().zip(values) {
            *o = in_range(v);
        }
        // A NaN fails the test too, and takes libm's NaN.
        let all_in_range = values
            .iter()
            .fold(true, |all, &v| all & (v.abs() < math::TRIG_LIMIT));
        if !all_in_range {
            for (o, &v) in out.iter_mut().zip(values) {
                if v.is_nan() || v.abs() >= math::TRIG_LIMIT {
                    *o = libm(v);
                }
            }
        }
    }
}

multiversion! {
    /// y[i] = x[i] as f32, for the executor's integer tensors (bools and indices are held as
    /// i64). A block whose values all fit in i32 converts through i32, which vectorises with
    /// AVX-512F/AVX2 (an i64 → f32 conversion needs AVX-512DQ, so it compiled to one scalar
    /// conversion per element: casting a 2048×257 one-hot mask took 116 µs, onnxruntime 57).
    /// Values past i32 take the exact i64 conversion.
    pub fn i64_to_f32(x: &[i64], y: &mut [f32]) {
        const BLOCK: usize = 64;
        for (out, values) in y.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
            let fits = values
                .iter()
                .fold(true, |fits, &v| fits & (v == i64::from(v as i32)));
            if fits {
                for (o, &v) in out.iter_mut().zip(values) {
                    *o = v as i32 as f32;
                }
            } else {
                for (o, &v) in out.iter_mut().zip(values) {
                    *o = v as f32;
                }
            }
        }
    }
}

multiversion! {
    /// The smallest and largest of the executor's integer values (`(i64::MAX, i64::MIN)` for
    /// none). Compiled for the baseline, the fold was two compares and branches per element
    /// (SSE2 has no 64-bit compare): the range check of a quantized activation before the int8
    /// GEMM took a quarter of a small ConvInteger's time (24→24 1×1 on 32×128: 133 µs).
    pub fn i64_range(values: &[i64]) -> (i64, i64) {
        let mut lowest = i64::MAX;
        let mut highest = i64::MIN;
        for &value in values {
            lowest = lowest.min(value);
            highest = highest.max(value);
        }
        (lowest, highest)
    }
}

multiversion! {
    /// (values[i] + shift) as u8: integer values the caller has checked lie in
    /// −shift..=255 − shift, as the int8 GEMM's unsigned operand. Collected, not written into
    /// a zeroed buffer: the zeroing was a pass of its own.
    pub fn i64_to_shifted_bytes(values: &[i64], shift: i64) -> Vec<u8> {
        values.iter().map(|&value| (value + shift) as u8).collect()
    }
}

multiversion! {
    /// The int32 sums of the integer GEMMs widened to the executor's integer storage (a sign
    /// extension SSE2 lacks), collected rather than written into a zeroed buffer.
    pub fn i32_to_i64(x: &[i32]) -> Vec<i64> {
        x.iter().map(|&value| i64::from(value)).collect()
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
            } else if b == 3.0 {
                a * a * a
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
            // A select, so the loop vectorises: through the catch-all arm below, PRelu was a
            // jump table per element (5 ns each, 50x under its memory roof).
            Binary::PRelu => {
                let $f = |a: f32, b: f32| if a >= 0.0 { a } else { a * b };
                $loop
            }
            Binary::Pow => {
                let $f = |a: f32, b: f32| apply_binary(Binary::Pow, a, b);
                $loop
            }
            Binary::Mod => {
                let $f = |a: f32, b: f32| apply_binary(Binary::Mod, a, b);
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
    pub fn binary_scalar_rhs(op: Binary, a: &[f32], b: f32, out: &mut [f32]) {
        per_binary!(op, |f| {
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, b);
            }
        })
    }
}

multiversion! {
    pub fn binary_scalar_lhs(op: Binary, a: f32, b: &[f32], out: &mut [f32]) {
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
    let layout = BroadcastLayout::new(a_shape, b_shape, out_shape);
    binary_rows(op, a, b, out, &layout, 0);
}

/// The iteration space of a broadcasting binary op, with adjacent axes merged wherever both
/// operands walk them the same way (both contiguous across them, or both broadcast), and size-1
/// axes dropped. A per-channel scale over NCHW becomes C rows of H·W against one scalar each,
/// instead of C·H rows of W elements: rows as short as a 7×7 plane's 7 floats cost more in
/// index arithmetic than in work.
#[derive(Clone, Debug, PartialEq)]
pub struct BroadcastLayout {
    /// Sizes of the outer (row) axes, outermost first.
    outer: Vec<usize>,
    /// Element strides of each operand along the outer axes (0 where it is broadcast).
    a_outer: Vec<usize>,
    b_outer: Vec<usize>,
    /// Elements per row (the merged innermost axis).
    pub(crate) inner: usize,
    /// Whether each operand advances along the row (stride 1) or repeats one element (0).
    pub(crate) a_inner_contiguous: bool,
    pub(crate) b_inner_contiguous: bool,
}

impl BroadcastLayout {
    pub fn new(a_shape: &[usize], b_shape: &[usize], out_shape: &[usize]) -> BroadcastLayout {
        let a_strides = broadcast_strides(a_shape, out_shape);
        let b_strides = broadcast_strides(b_shape, out_shape);
        // (size, a stride, b stride) from the innermost axis out, merged as we go.
        let mut merged: Vec<(usize, usize, usize)> = Vec::with_capacity(out_shape.len());
        for axis in (0..out_shape.len()).rev() {
            let (size, a_stride, b_stride) = (out_shape[axis], a_strides[axis], b_strides[axis]);
            if size == 1 {
                continue;
            }
            match merged.last_mut() {
                Some(last) if a_stride == last.1 * last.0 && b_stride == last.2 * last.0 => {
                    last.0 *= size;
                }
                _ => merged.push((size, a_stride, b_stride)),
            }
        }
        let (inner, a_inner, b_inner) = if merged.is_empty() {
            (1, 0, 0)
        } else {
            merged.remove(0)
        };
        merged.reverse();
        BroadcastLayout {
            outer: merged.iter().map(|axis| axis.0).collect(),
            a_outer: merged.iter().map(|axis| axis.1).collect(),
            b_outer: merged.iter().map(|axis| axis.2).collect(),
            inner,
            a_inner_contiguous: a_inner != 0,
            b_inner_contiguous: b_inner != 0,
        }
    }

    /// Elements per row: a share of the output given to a thread starts and ends on a row.
    pub fn row_len(&self) -> usize {
        self.inner
    }

    /// Calls `f(row, a_offset, b_offset)` for `rows` rows from `first_row` on, each operand's
    /// offset moving with the multi-index (no division per row).
    #[inline(always)]
    pub(crate) fn visit_rows(
        &self,
        first_row: usize,
        rows: usize,
        mut f: impl FnMut(usize, usize, usize),
    ) {
        let (mut index, mut a_off, mut b_off) = self.offsets(first_row);
        for row in 0..rows {
            f(row, a_off, b_off);
            for axis in (0..index.len()).rev() {
                index[axis] += 1;
                a_off += self.a_outer[axis];
                b_off += self.b_outer[axis];
                if index[axis] < self.outer[axis] {
                    break;
                }
                index[axis] = 0;
                a_off -= self.a_outer[axis] * self.outer[axis];
                b_off -= self.b_outer[axis] * self.outer[axis];
            }
        }
    }

    /// Each operand's offset at the start of row `row`.
    fn offsets(&self, row: usize) -> (Vec<usize>, usize, usize) {
        let mut index = vec![0; self.outer.len()];
        let (mut a_off, mut b_off, mut rest) = (0, 0, row);
        for axis in (0..self.outer.len()).rev() {
            index[axis] = rest % self.outer[axis];
            rest /= self.outer[axis];
            a_off += index[axis] * self.a_outer[axis];
            b_off += index[axis] * self.b_outer[axis];
        }
        (index, a_off, b_off)
    }
}

multiversion! {
    /// `out` holds whole rows of the layout, starting at row `first_row`. One ISA choice per
    /// call; each row's loop is inlined into it.
    pub fn binary_rows(
        op: Binary,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
        layout: &BroadcastLayout,
        first_row: usize,
    ) {
        let inner = layout.inner.max(1);
        let rows = out.len() / inner;
        per_binary!(op, |f| {
            layout.visit_rows(first_row, rows, |row, a_off, b_off| {
                let row = &mut out[row * inner..(row + 1) * inner];
                match (layout.a_inner_contiguous, layout.b_inner_contiguous) {
                    (true, true) => {
                        let (xs, ys) = (&a[a_off..a_off + inner], &b[b_off..b_off + inner]);
                        for ((o, &x), &y) in row.iter_mut().zip(xs).zip(ys) {
                            *o = f(x, y);
                        }
                    }
                    (true, false) => {
                        let y = b[b_off];
                        for (o, &x) in row.iter_mut().zip(&a[a_off..a_off + inner]) {
                            *o = f(x, y);
                        }
                    }
                    (false, true) => {
                        let x = a[a_off];
                        for (o, &y) in row.iter_mut().zip(&b[b_off..b_off + inner]) {
                            *o = f(x, y);
                        }
                    }
                    (false, false) => row.fill(f(a[a_off], b[b_off])),
                }
            })
        })
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
    /// x ← x·scale[channel] + shift[channel] (each a scalar when its slice has one element):
    /// a constant Mul and Add in one pass, and with the activation after it a batch norm's
    /// scale, shift and ReLU in one pass instead of three (DenseNet's pre-activation
    /// BN → Mul → Add → Relu ran at 3.7× its bound as four passes over each L1 piece).
    Affine {
        scale: Vec<f32>,
        shift: Vec<f32>,
    },
}

/// The value of a per-channel constant for `channel` (a scalar when it has one value).
#[inline(always)]
fn channel_value(values: &[f32], channel: usize) -> f32 {
    if values.len() == 1 {
        values[0]
    } else {
        values[channel]
    }
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
        // Channel blocks only matter to per-channel constants; without any, the whole range is
        // one block (cut into L1 pieces below), so no block ends in a scalar tail: magika's
        // 512×508 GELU ran 508-element blocks, 12 elements of each through scalar tanh.
        let per_channel = steps.iter().any(|step| match step {
            ChainStep::WithConstant { values, .. } => values.len() > 1,
            ChainStep::Affine { scale, shift } => scale.len() > 1 || shift.len() > 1,
            _ => false,
        });
        let block = if per_channel {
            channel_size.max(1)
        } else {
            x.len().max(1)
        };
        for (b, (xs, ys)) in x.chunks(block).zip(y.chunks_mut(block)).enumerate() {
            let channel = if channels > 0 {
                (first_block + b) % channels
            } else {
                0
            };
            // Every step passes over its piece, so a piece must stay in L1 between steps: a
            // whole 512×508 block (1 MB) made magika's nine-step GELU nine trips through L3,
            // 175 µs where one pass over L1-sized pieces takes a fraction of that.
            let mut start = 0;
            while start < xs.len() {
                let end = (start + CHAIN_PIECE).min(xs.len());
                chain_block(steps, &xs[start..end], &mut ys[start..end], channel);
                start = end;
            }
        }
    }
}

/// Elements of one piece of a chain (16 KiB in and 16 KiB out: both in any L1d).
const CHAIN_PIECE: usize = 4096;

/// One piece of a channel block of `chain`, inlined into each ISA's variant. The first step
/// reads `x` and writes `y` (no copy pass: a pass is a load and a store per vector, the whole
/// cost of a cheap step in L1); an affine step and the unary step after it are one pass,
/// wherever they are in the chain.
#[inline(always)]
fn chain_block(steps: &[ChainStep], x: &[f32], y: &mut [f32], channel: usize) {
    let rest = match steps {
        [ChainStep::Affine { scale, shift }, ChainStep::Unary(op), rest @ ..] => {
            let (s, b) = (channel_value(scale, channel), channel_value(shift, channel));
            per_unary!(*op, |f| {
                for (v, &orig) in y.iter_mut().zip(x) {
                    *v = f(orig * s + b);
                }
            });
            rest
        }
        [first, rest @ ..] => {
            step_pass(first, x, y, x, channel);
            rest
        }
        [] => {
            y.copy_from_slice(x);
            return;
        }
    };
    let mut rest = rest;
    loop {
        rest = match rest {
            [ChainStep::Affine { scale, shift }, ChainStep::Unary(op), tail @ ..] => {
                let (s, b) = (channel_value(scale, channel), channel_value(shift, channel));
                per_unary!(*op, |f| {
                    for v in y.iter_mut() {
                        *v = f(*v * s + b);
                    }
                });
                tail
            }
            [step, tail @ ..] => {
                step_in_place(step, y, x, channel);
                tail
            }
            [] => return,
        };
    }
}

/// Expands `$loop` once per kind of chain step with `$f(current, original) -> new` bound to
/// the step (`original` is the chain's input, read by `WithInput` steps only), so each loop is
/// specialised and vectorises like `per_unary!`'s.
macro_rules! per_step {
    ($step:expr, $channel:expr, |$f:ident| $loop:expr) => {
        match $step {
            ChainStep::Unary(op) => per_unary!(*op, |g| {
                let $f = |v: f32, _: f32| g(v);
                $loop
            }),
            ChainStep::WithConstant {
                op,
                values,
                swapped,
            } => {
                let c = channel_value(values, $channel);
                if *swapped {
                    per_binary!(*op, |g| {
                        let $f = |v: f32, _: f32| g(c, v);
                        $loop
                    })
                } else {
                    per_binary!(*op, |g| {
                        let $f = |v: f32, _: f32| g(v, c);
                        $loop
                    })
                }
            }
            ChainStep::WithInput { op, swapped } => {
                if *swapped {
                    per_binary!(*op, |g| {
                        let $f = |v: f32, o: f32| g(o, v);
                        $loop
                    })
                } else {
                    per_binary!(*op, |g| {
                        let $f = |v: f32, o: f32| g(v, o);
                        $loop
                    })
                }
            }
            ChainStep::Affine { scale, shift } => {
                let (s, b) = (
                    channel_value(scale, $channel),
                    channel_value(shift, $channel),
                );
                let $f = move |v: f32, _: f32| v * s + b;
                $loop
            }
        }
    };
}

/// One step from `src` into `y` (`orig` is the chain's input).
#[inline(always)]
fn step_pass(step: &ChainStep, src: &[f32], y: &mut [f32], orig: &[f32], channel: usize) {
    per_step!(step, channel, |f| {
        for ((v, &s), &o) in y.iter_mut().zip(src).zip(orig) {
            *v = f(s, o);
        }
    })
}

/// One step over `y` in place.
#[inline(always)]
fn step_in_place(step: &ChainStep, y: &mut [f32], orig: &[f32], channel: usize) {
    per_step!(step, channel, |f| {
        for (v, &o) in y.iter_mut().zip(orig) {
            *v = f(*v, o);
        }
    })
}

#[cfg(test)]
mod tests;
