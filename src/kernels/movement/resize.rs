//! Resize over the last two axes: nearest (four rounding modes, integer-factor runs and
//! repeated rows copied) and bilinear (separable), under four coordinate modes.

/// How Resize maps output to input coordinates (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordMode {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

fn source_coord(mode: CoordMode, out: usize, scale: f32, in_len: usize, out_len: usize) -> f32 {
    let x = out as f32;
    match mode {
        CoordMode::HalfPixel => (x + 0.5) / scale - 0.5,
        CoordMode::PytorchHalfPixel => {
            if out_len > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        CoordMode::AlignCorners => {
            if out_len > 1 {
                x * (in_len as f32 - 1.0) / (out_len as f32 - 1.0)
            } else {
                0.0
            }
        }
        CoordMode::Asymmetric => x / scale,
    }
}

/// Resizes the last two axes of an N-d tensor (outer axes must be unchanged).
#[allow(clippy::too_many_arguments)]
pub fn resize_2d(
    input: &[f32],
    planes: usize,
    (in_h, in_w): (usize, usize),
    (out_h, out_w): (usize, usize),
    (scale_h, scale_w): (f32, f32),
    linear: bool,
    coord: CoordMode,
    nearest: NearestMode,
    out: &mut [f32],
) {
    let pick = |v: f32, len: usize| -> usize {
        let r = match nearest {
            NearestMode::Floor => v.floor(),
            NearestMode::Ceil => v.ceil(),
            NearestMode::RoundPreferFloor => {
                if v.fract() == 0.5 {
                    v.floor()
                } else {
                    v.round()
                }
            }
            NearestMode::RoundPreferCeil => v.round(),
        };
        (r.max(0.0) as usize).min(len - 1)
    };
    let ys: Vec<f32> = (0..out_h)
        .map(|y| source_coord(coord, y, scale_h, in_h, out_h))
        .collect();
    let xs: Vec<f32> = (0..out_w)
        .map(|x| source_coord(coord, x, scale_w, in_w, out_w))
        .collect();
    if linear {
        resize_linear(input, planes, (in_h, in_w), (out_h, out_w), &ys, &xs, out);
        return;
    }
    // Nearest source column of every output column, computed once.
    let nearest_x: Vec<usize> = xs.iter().map(|&sx| pick(sx, in_w)).collect();
    let nearest_y: Vec<usize> = ys.iter().map(|&sy| pick(sy, in_h)).collect();
    // An integer upsampling factor (every source column repeated `factor` times in order, the
    // FPN and U-Net ×2/×4): rows are written as runs instead of one gather per element.
    let factor = out_w / in_w.max(1);
    let repeats_columns = factor >= 2
        && out_w == factor * in_w
        && nearest_x
            .iter()
            .enumerate()
            .all(|(x, &source)| source == x / factor);
    for p in 0..planes {
        let src = &input[p * in_h * in_w..(p + 1) * in_h * in_w];
        let dst = &mut out[p * out_h * out_w..(p + 1) * out_h * out_w];
        for y in 0..out_h {
            if y > 0 && nearest_y[y] == nearest_y[y - 1] {
                // The same source row as the output row above: copy that row.
                dst.copy_within((y - 1) * out_w..y * out_w, y * out_w);
                continue;
            }
            let row = &src[nearest_y[y] * in_w..][..in_w];
            let out_row = &mut dst[y * out_w..(y + 1) * out_w];
            if repeats_columns && factor == 2 {
                // Fixed-size pairs vectorise (interleaving shuffles); a run of a length known
                // only at run time was a `memset` call per element.
                for (pair, &value) in out_row.chunks_exact_mut(2).zip(row) {
                    pair[0] = value;
                    pair[1] = value;
                }
            } else if repeats_columns {
                for (run, &value) in out_row.chunks_exact_mut(factor).zip(row) {
                    run.fill(value);
                }
            } else {
                for (d, &ix) in out_row.iter_mut().zip(&nearest_x) {
                    *d = row[ix];
                }
            }
        }
    }
}

/// The two source positions and the weight of the second, for each output position of one
/// axis of a linear resize (`coords` are the source coordinates, clamped to the axis).
fn linear_taps(coords: &[f32], len: usize) -> Vec<(usize, usize, f32)> {
    coords
        .iter()
        .map(|&c| {
            let c = c.clamp(0.0, (len - 1) as f32);
            let first = c.floor() as usize;
            (first, (first + 1).min(len - 1), c - first as f32)
        })
        .collect()
}

/// Bilinear resize, separably: each input row a plane's outputs need is interpolated along x
/// once into a buffer (kept while consecutive output rows read it, as upsampling's do), and
/// each output row is one vectorised blend of two buffers. Per element the arithmetic is the
/// definition's (`top·(1−fy) + bottom·fy` of the two x-interpolated rows), so results are
/// unchanged; computing both taps of every output element, coordinates included, took 5.5 ns
/// an element (64×40² ×2: 2.3 ms).
fn resize_linear(
    input: &[f32],
    planes: usize,
    (in_h, in_w): (usize, usize),
    (out_h, out_w): (usize, usize),
    ys: &[f32],
    xs: &[f32],
    out: &mut [f32],
) {
    let columns = linear_taps(xs, in_w);
    let rows = linear_taps(ys, in_h);
    let interpolate = |row: &[f32], into: &mut [f32]| {
        for (value, &(x0, x1, fx)) in into.iter_mut().zip(&columns) {
            *value = row[x0] * (1.0 - fx) + row[x1] * fx;
        }
    };
    let (mut upper, mut lower) = (vec![0.0f32; out_w], vec![0.0f32; out_w]);
    for p in 0..planes {
        let src = &input[p * in_h * in_w..(p + 1) * in_h * in_w];
        let dst = &mut out[p * out_h * out_w..(p + 1) * out_h * out_w];
        // Source rows now held by `upper` and `lower` (none at a plane's start).
        let (mut upper_row, mut lower_row) = (usize::MAX, usize::MAX);
        for (out_row, &(y0, y1, fy)) in dst.chunks_exact_mut(out_w.max(1)).zip(&rows) {
            if upper_row != y0 {
                if lower_row == y0 {
                    std::mem::swap(&mut upper, &mut lower);
                    std::mem::swap(&mut upper_row, &mut lower_row);
                } else {
                    interpolate(&src[y0 * in_w..(y0 + 1) * in_w], &mut upper);
                    upper_row = y0;
                }
            }
            if lower_row != y1 {
                interpolate(&src[y1 * in_w..(y1 + 1) * in_w], &mut lower);
                lower_row = y1;
            }
            for ((o, &top), &bottom) in out_row.iter_mut().zip(&upper).zip(&lower) {
                *o = top * (1.0 - fy) + bottom * fy;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `resize_2d` at the scales the sizes imply, into a fresh output (NaN where unwritten);
    /// returns the scales with it.
    fn resized(
        input: &[f32],
        planes: usize,
        (in_h, in_w): (usize, usize),
        (out_h, out_w): (usize, usize),
        linear: bool,
        coord: CoordMode,
        nearest: NearestMode,
    ) -> ((f32, f32), Vec<f32>) {
        let scales = (out_h as f32 / in_h as f32, out_w as f32 / in_w as f32);
        let mut out = vec![f32::NAN; planes * out_h * out_w];
        resize_2d(
            input,
            planes,
            (in_h, in_w),
            (out_h, out_w),
            scales,
            linear,
            coord,
            nearest,
            &mut out,
        );
        (scales, out)
    }

    /// The separable bilinear resize against the definition per element (both x taps of both
    /// rows, then the y blend, in the same f32 operations): equal bit for bit, for up- and
    /// downsampling, non-integer factors, every coordinate mode and a one-row output.
    #[test]
    fn separable_linear_resize_is_the_per_element_definition() {
        let (planes, in_h, in_w) = (2, 5, 7);
        let input: Vec<f32> = (0..planes * in_h * in_w)
            .map(|v| ((v * 37 % 23) as f32 - 11.0) / 3.0)
            .collect();
        for (out_h, out_w) in [(10, 14), (13, 9), (3, 4), (1, 7), (5, 7)] {
            for coord in [
                CoordMode::HalfPixel,
                CoordMode::PytorchHalfPixel,
                CoordMode::AlignCorners,
                CoordMode::Asymmetric,
            ] {
                let (scales, out) = resized(
                    &input,
                    planes,
                    (in_h, in_w),
                    (out_h, out_w),
                    true,
                    coord,
                    NearestMode::Floor,
                );
                let tap = |c: f32, len: usize| {
                    let c = c.clamp(0.0, (len - 1) as f32);
                    let first = c.floor() as usize;
                    (first, (first + 1).min(len - 1), c - first as f32)
                };
                for p in 0..planes {
                    let src = &input[p * in_h * in_w..];
                    for y in 0..out_h {
                        let (y0, y1, fy) = tap(source_coord(coord, y, scales.0, in_h, out_h), in_h);
                        for x in 0..out_w {
                            let (x0, x1, fx) =
                                tap(source_coord(coord, x, scales.1, in_w, out_w), in_w);
                            let top = src[y0 * in_w + x0] * (1.0 - fx) + src[y0 * in_w + x1] * fx;
                            let bottom =
                                src[y1 * in_w + x0] * (1.0 - fx) + src[y1 * in_w + x1] * fx;
                            let want = top * (1.0 - fy) + bottom * fy;
                            let got = out[(p * out_h + y) * out_w + x];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{out_h}x{out_w} {coord:?} at {p},{y},{x}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nearest_resize_runs_and_row_copies_match_a_gather_per_element() {
        let (planes, in_h, in_w) = (3, 5, 7);
        let input: Vec<f32> = (0..planes * in_h * in_w).map(|v| v as f32).collect();
        // ×2 and ×4 (runs and copied rows), ×1.5 (copied rows only), 0.5 (neither).
        for (out_h, out_w) in [(10, 14), (20, 28), (7, 10), (3, 4)] {
            for (coord, nearest) in [
                (CoordMode::Asymmetric, NearestMode::Floor),
                (CoordMode::HalfPixel, NearestMode::RoundPreferFloor),
            ] {
                let (scales, out) = resized(
                    &input,
                    planes,
                    (in_h, in_w),
                    (out_h, out_w),
                    false,
                    coord,
                    nearest,
                );
                let pick = |v: f32, len: usize| {
                    let r = match nearest {
                        NearestMode::Floor => v.floor(),
                        _ if v.fract() == 0.5 => v.floor(),
                        _ => v.round(),
                    };
                    (r.max(0.0) as usize).min(len - 1)
                };
                for p in 0..planes {
                    for y in 0..out_h {
                        for x in 0..out_w {
                            let sy = pick(source_coord(coord, y, scales.0, in_h, out_h), in_h);
                            let sx = pick(source_coord(coord, x, scales.1, in_w, out_w), in_w);
                            assert_eq!(
                                out[(p * out_h + y) * out_w + x],
                                input[(p * in_h + sy) * in_w + sx],
                                "{out_h}x{out_w} {coord:?} at {p},{y},{x}"
                            );
                        }
                    }
                }
            }
        }
    }
}
