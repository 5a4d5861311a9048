use super::*;

/// Every permutation of ranks 1-5 with extents that exercise merging, size-1 axes and
/// partial tiles, against the definition out[i] = in[perm⁻¹(i)].
#[test]
fn transpose_matches_the_definition() {
    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut all = Vec::new();
        for p in permutations(n - 1) {
            for at in 0..=p.len() {
                let mut q = p.clone();
                q.insert(at, n - 1);
                all.push(q);
            }
        }
        all
    }
    for shape in [
        vec![7],
        vec![17, 33],
        vec![1, 18, 3, 20],
        vec![2, 3, 1, 19, 5],
        vec![4, 1, 1, 35],
        // Narrow interleaved planes (2-4 channels against a long axis), and 5 (not narrow).
        vec![2, 37, 3],
        vec![3, 2, 41],
        vec![2, 4, 19, 5],
    ] {
        let total: usize = shape.iter().product();
        let x: Vec<u32> = (0..total as u32).collect();
        for perm in permutations(shape.len()) {
            check_transpose(&x, &shape, &perm, 0);
        }
    }
}

/// `transpose` against out[i] = in[perm⁻¹(i)], element by element.
fn check_transpose<T: Copy + PartialEq + std::fmt::Debug + 'static>(
    x: &[T],
    shape: &[usize],
    perm: &[usize],
    fill: T,
) {
    let in_strides = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut got = vec![fill; x.len()];
    transpose(x, shape, perm, &mut got);
    let out_strides = strides(&out_shape);
    for (linear, &value) in got.iter().enumerate() {
        let src: usize = (0..shape.len())
            .map(|a| (linear / out_strides[a]) % out_shape[a] * in_strides[perm[a]])
            .sum();
        assert_eq!(value, x[src], "shape {shape:?} perm {perm:?} at {linear}");
    }
}

/// f32 takes the 8×8 register path (full blocks, edge rows and columns, several planes).
#[test]
fn transpose_f32_matches_the_definition() {
    for (shape, perm) in [
        (vec![17, 33], vec![1, 0]),
        (vec![8, 8], vec![1, 0]),
        (vec![2, 50, 3], vec![0, 2, 1]),
        (vec![2, 4, 50], vec![0, 2, 1]),
        (vec![1, 2, 100, 64], vec![0, 1, 3, 2]),
        (vec![3, 20, 41], vec![0, 2, 1]),
        (vec![2, 9, 8, 16], vec![0, 3, 1, 2]),
        (vec![4, 24, 5, 40], vec![2, 1, 3, 0]),
    ] {
        let total: usize = shape.iter().product();
        let x: Vec<f32> = (0..total).map(|v| v as f32).collect();
        check_transpose(&x, &shape, &perm, -1.0);
    }
}

/// Broadcasts against out[i] = x[i with every size-1 source axis at 0]: rows under 8, 8-63
/// and 64+ long (the three ways a row is copied), an innermost broadcast axis, consecutive
/// broadcast axes that merge, Tile's interleaved shapes, a zero extent, rank 0.
#[test]
fn broadcast_matches_the_definition() {
    for (shape, out_shape) in [
        (vec![1, 3, 1, 5], vec![2, 3, 4, 5]),
        (vec![4, 1], vec![4, 70]),
        (vec![1, 1, 28], vec![6, 7, 28]),
        (vec![1, 2, 1, 28], vec![3, 2, 2, 28]),
        (vec![1, 64], vec![5, 64]),
        (vec![2, 1, 9], vec![2, 3, 9]),
        (vec![3, 1, 9], vec![3, 0, 9]),
        (vec![1, 1], vec![1, 1]),
        (vec![], vec![]),
    ] {
        let x: Vec<u32> = (0..shape.iter().product::<usize>() as u32).collect();
        let total: usize = out_shape.iter().product();
        let out_strides = strides(&out_shape);
        let in_strides = strides(&shape);
        let want: Vec<u32> = (0..total)
            .map(|i| {
                let source: usize = (0..out_shape.len())
                    .filter(|&a| shape[a] != 1)
                    .map(|a| (i / out_strides[a] % out_shape[a]) * in_strides[a])
                    .sum();
                x[source]
            })
            .collect();
        let mut got = vec![u32::MAX; total];
        broadcast(&x, &shape, &out_shape, &mut got);
        assert_eq!(got, want, "{shape:?} → {out_shape:?}");
    }
}

#[test]
fn transpose_2d() {
    let x = [1, 2, 3, 4, 5, 6];
    let mut y = [0; 6];
    transpose(&x, &[2, 3], &[1, 0], &mut y);
    assert_eq!(y, [1, 4, 2, 5, 3, 6]);
}

#[test]
fn max_and_min_skip_nans_along_and_across_rows_at_every_isa() {
    // Rows of 37 with NaNs scattered (one row all NaN but one value): the folds along the
    // last axis and across rows (axis 0) must give `f32::max`/`f32::min` of the rest.
    let (rows, len) = (5usize, 37usize);
    let mut x: Vec<f32> = (0..rows * len)
        .map(|i| ((i * 7919) % 97) as f32 - 48.0)
        .collect();
    for at in [3, 40, 41, 77, 150, 184] {
        x[at] = f32::NAN;
    }
    for (k, value) in x[2 * len..3 * len].iter_mut().enumerate() {
        if k != 17 {
            *value = f32::NAN;
        }
    }
    let shape = [rows, len];
    for level in crate::kernels::simd::available_levels() {
        for (kind, fold) in [
            (Reduction::Max, f32::max as fn(f32, f32) -> f32),
            (Reduction::Min, f32::min),
        ] {
            let identity = if kind == Reduction::Max {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
            let mut along = vec![0.0; rows];
            reduce::at(level, &x, &shape, &[1], kind, &mut along);
            for r in 0..rows {
                let want = x[r * len..(r + 1) * len]
                    .iter()
                    .copied()
                    .fold(identity, fold);
                assert_eq!(along[r], want, "{kind:?} row {r} at {level:?}");
            }
            let mut across = vec![0.0; len];
            reduce::at(level, &x, &shape, &[0], kind, &mut across);
            for c in 0..len {
                let want = (0..rows).map(|r| x[r * len + c]).fold(identity, fold);
                assert_eq!(across[c], want, "{kind:?} column {c} at {level:?}");
            }
        }
    }
}

#[test]
fn reduce_middle_axis() {
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let mut out = vec![0.0; 4];
    reduce(&x, &[2, 3, 2], &[1], Reduction::Sum, &mut out);
    assert_eq!(out, vec![6.0, 9.0, 24.0, 27.0]);
}

/// Every reduction over a contiguous row (the lane-folded path, with a tail) and over an
/// outer axis (the element-wise path) against the definition in f64.
/// Every reduction kind, for the tests that walk them all.
const ALL_REDUCTIONS: [Reduction; 9] = [
    Reduction::Sum,
    Reduction::Mean,
    Reduction::Max,
    Reduction::Min,
    Reduction::Prod,
    Reduction::SumSquare,
    Reduction::L1,
    Reduction::L2,
    Reduction::LogSumExp,
];

/// A reduction of `values` by its definition, in f64.
fn reduction_definition(kind: Reduction, values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    match kind {
        Reduction::Sum => values.iter().sum(),
        Reduction::Mean => values.iter().sum::<f64>() / n,
        Reduction::Max => max,
        Reduction::Min => values.iter().cloned().fold(f64::INFINITY, f64::min),
        Reduction::Prod => values.iter().product(),
        Reduction::SumSquare => values.iter().map(|v| v * v).sum(),
        Reduction::L1 => values.iter().map(|v| v.abs()).sum(),
        Reduction::L2 => values.iter().map(|v| v * v).sum::<f64>().sqrt(),
        Reduction::LogSumExp => values.iter().map(|v| (v - max).exp()).sum::<f64>().ln() + max,
    }
}

#[test]
fn reductions_match_the_definition() {
    let shape = [3, 19];
    let x: Vec<f32> = (0..57)
        .map(|v| ((v * 37 % 23) as f32 - 11.0) / 7.0)
        .collect();
    for kind in ALL_REDUCTIONS {
        for (axis, kept) in [(1usize, 3usize), (0, 19)] {
            let mut out = vec![0.0; kept];
            reduce(&x, &shape, &[axis], kind, &mut out);
            for (k, &got) in out.iter().enumerate() {
                let values: Vec<f64> = (0..shape[axis])
                    .map(|r| {
                        let (i, j) = if axis == 1 { (k, r) } else { (r, k) };
                        f64::from(x[i * 19 + j])
                    })
                    .collect();
                let want = reduction_definition(kind, &values);
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{kind:?} over axis {axis}, output {k}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn negative_step_slice() {
    let x = [0, 1, 2, 3, 4];
    let mut y = [0; 5];
    slice(&x, &[5], &[4], &[-1], &[5], &mut y);
    assert_eq!(y, [4, 3, 2, 1, 0]);
}

/// Slices with steps of every sign and size on every axis of a 3-D tensor (reversed rows,
/// reversed outer axes, strided rows, rank 0 and empty outputs) against the per-element
/// definition `out[i] = x[start + i·step]` per axis.
#[test]
fn signed_step_slices_match_the_definition() {
    let shape = [3usize, 4, 5];
    let x: Vec<i64> = (0..60).collect();
    let axis_cases: [&[(isize, isize)]; 3] = [
        &[(0, 1), (2, -1), (2, -2), (1, 1)],
        &[(0, 1), (3, -1), (3, -3), (1, 2)],
        &[(0, 1), (4, -1), (4, -2), (1, 3), (3, -4)],
    ];
    let extent = |len: usize, start: isize, step: isize| -> usize {
        if step > 0 {
            (len as isize - start).max(0) as usize / step as usize
                + usize::from((len as isize - start) % step != 0)
        } else {
            (start + 1) as usize / (-step) as usize + usize::from((start + 1) % -step != 0)
        }
    };
    for &(s0, t0) in axis_cases[0] {
        for &(s1, t1) in axis_cases[1] {
            for &(s2, t2) in axis_cases[2] {
                let starts = [s0, s1, s2];
                let steps = [t0, t1, t2];
                let out_shape: Vec<usize> = (0..3)
                    .map(|a| extent(shape[a], starts[a], steps[a]))
                    .collect();
                let count: usize = out_shape.iter().product();
                let mut want = Vec::with_capacity(count);
                for i in 0..out_shape[0] {
                    for j in 0..out_shape[1] {
                        for k in 0..out_shape[2] {
                            let at =
                                |a: usize, c: usize| (starts[a] + c as isize * steps[a]) as usize;
                            want.push(x[(at(0, i) * 4 + at(1, j)) * 5 + at(2, k)]);
                        }
                    }
                }
                let mut got = vec![-1; count];
                slice(&x, &shape, &starts, &steps, &out_shape, &mut got);
                assert_eq!(got, want, "starts {starts:?} steps {steps:?}");
            }
        }
    }
    // An empty output and a rank-0 one.
    let mut none: [i64; 0] = [];
    slice(&x, &shape, &[2, 0, 0], &[-1, 1, 1], &[3, 0, 5], &mut none);
    let mut one = [0i64];
    slice(&[7i64], &[], &[], &[], &[], &mut one);
    assert_eq!(one, [7]);
}

/// Every mode on a 3-D tensor with leading, trailing and wider-than-the-axis pads, against
/// the per-element definition.
#[test]
fn pad_matches_the_definition() {
    let shape = [2usize, 3, 4];
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    for mode in [PadMode::Constant, PadMode::Edge, PadMode::Reflect] {
        for (begin, end) in [
            ([0, 1, 2], [1, 0, 3]),
            ([1, 2, 0], [0, 2, 1]),
            ([0, 0, 0], [0, 0, 0]),
        ] {
            let out_shape: Vec<usize> = (0..3).map(|a| shape[a] + begin[a] + end[a]).collect();
            let mut got = vec![f32::NAN; out_shape.iter().product()];
            pad(&x, &shape, &begin, &out_shape, mode, -1.0, &mut got);
            let out_strides = strides(&out_shape);
            for (linear, &value) in got.iter().enumerate() {
                let mut src = Some(0);
                for a in 0..3 {
                    let at = linear / out_strides[a] % out_shape[a];
                    let c = at as isize - begin[a] as isize;
                    let n = shape[a] as isize;
                    let c = if (0..n).contains(&c) {
                        Some(c)
                    } else {
                        match mode {
                            PadMode::Constant => None,
                            PadMode::Edge => Some(c.clamp(0, n - 1)),
                            PadMode::Reflect => Some(if c < 0 { -c } else { 2 * (n - 1) - c }),
                        }
                    };
                    src = src.zip(c).map(|(s, c)| s * shape[a] + c as usize);
                }
                let want = src.map_or(-1.0, |s| x[s]);
                assert_eq!(value, want, "{mode:?} {begin:?} {end:?} at {linear}");
            }
        }
    }
}

#[test]
fn reflect_pad() {
    let x = [1.0, 2.0, 3.0];
    let mut y = [0.0; 7];
    pad(&x, &[3], &[2], &[7], PadMode::Reflect, 0.0, &mut y);
    assert_eq!(y, [3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
}

/// A concat along the last axis of parts 1, 0, 3 and 20 wide (the strided, empty, short and
/// row-copy paths together) and along the first axis equal the definition.
#[test]
fn concat_of_short_and_long_parts_matches_the_definition() {
    let rows = 7usize;
    // A zero-width part too (an empty past KV cache joined with the new step).
    let widths = [1usize, 0, 3, 20];
    let parts: Vec<Vec<i64>> = widths
        .iter()
        .enumerate()
        .map(|(p, &w)| (0..rows * w).map(|i| (p * 1000 + i) as i64).collect())
        .collect();
    let shapes: Vec<Vec<usize>> = widths.iter().map(|&w| vec![rows, w]).collect();
    let views: Vec<(&[i64], &[usize])> = parts
        .iter()
        .zip(&shapes)
        .map(|(data, shape)| (data.as_slice(), shape.as_slice()))
        .collect();
    let total: usize = widths.iter().sum();
    let mut out = vec![-1i64; rows * total];
    concat(&views, 1, &mut out);
    for r in 0..rows {
        let mut at = 0;
        for (p, &w) in widths.iter().enumerate() {
            for j in 0..w {
                assert_eq!(
                    out[r * total + at + j],
                    parts[p][r * w + j],
                    "row {r} part {p}"
                );
            }
            at += w;
        }
    }
    // Axis 0: the parts one after another.
    let mut stacked = vec![-1i64; rows * 3 * 2];
    let a: Vec<i64> = (0..rows * 2).map(|v| v as i64).collect();
    let b: Vec<i64> = (0..rows * 2).map(|v| 100 + v as i64).collect();
    let c: Vec<i64> = (0..rows * 2).map(|v| 200 + v as i64).collect();
    let shape = [rows, 2];
    concat(&[(&a, &shape), (&b, &shape), (&c, &shape)], 0, &mut stacked);
    assert_eq!(stacked, [a, b, c].concat());
}

/// Every reduction over a short innermost axis (the one-loop path) and over the two last axes
/// equals the definition; a long innermost axis (the row walk) agrees with it too.
#[test]
fn reductions_over_short_innermost_axes_match_the_definition() {
    for (shape, axes) in [
        (vec![5usize, 4, 3], vec![2usize]),
        (vec![5, 4, 3], vec![1, 2]),
        (vec![2, 40], vec![1]),
    ] {
        let count: usize = shape.iter().product();
        let x: Vec<f32> = (0..count)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let reduced: usize = axes.iter().map(|&a| shape[a]).product();
        let outer = count / reduced;
        for kind in ALL_REDUCTIONS {
            let mut got = vec![f32::NAN; outer];
            reduce(&x, &shape, &axes, kind, &mut got);
            for (o, &value) in got.iter().enumerate() {
                let row: Vec<f64> = x[o * reduced..(o + 1) * reduced]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let want = reduction_definition(kind, &row) as f32;
                assert!(
                    (value - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{kind:?} over {axes:?} of {shape:?} at {o}: {value} vs {want}"
                );
            }
        }
    }
}
