//! Data movement: `Transpose`, `Concat`, `Split`, `Slice`, `Gather`, `Expand`, `Pad` and
//! `Resize` / `Upsample` (nearest and linear over the last two axes). `Tile` with constant
//! repeats runs as an Expand; with run-time repeats through the generic evaluator. Slice
//! starts, pads and scales must be constants.

use super::{Cx, Domain, Kernel, Lowered, Lowering};
use crate::analysis::ops;
use crate::exec::cpu::{InRef, Io};
use crate::exec::ExecError;
use crate::kernels::movement::{self, CoordMode, NearestMode, PadMode};
use crate::kernels::parallel::par_pieces;

#[derive(Clone, Debug)]
pub(crate) enum MovementKernel {
    /// The transpose's merged axes (`movement::merged_axes`); threads take ranges of the
    /// outermost.
    Transpose {
        axes: Vec<(usize, usize)>,
    },
    Concat {
        axis: usize,
        shapes: Vec<Vec<usize>>,
    },
    Split {
        axis: usize,
        shape: Vec<usize>,
        sizes: Vec<usize>,
    },
    Slice {
        shape: Vec<usize>,
        starts: Vec<isize>,
        steps: Vec<isize>,
        out_shape: Vec<usize>,
    },
    Gather {
        shape: Vec<usize>,
        axis: usize,
    },
    Expand {
        shape: Vec<usize>,
        out_shape: Vec<usize>,
    },
    Pad {
        shape: Vec<usize>,
        begin: Vec<usize>,
        out_shape: Vec<usize>,
        mode: PadMode,
        value: f32,
    },
    /// Over every plane of the output (threads take whole planes).
    Resize {
        input: (usize, usize),
        output: (usize, usize),
        scales: (f32, f32),
        linear: bool,
        coord: CoordMode,
        nearest: NearestMode,
    },
}

pub(super) fn lookup(domain: Domain, op: &str) -> Option<Lowering> {
    if domain != Domain::Onnx {
        return None;
    }
    match op {
        // Integer and bool tensors too (an LSTM's token ids or masks moved to time-major): the
        // analysis evaluates only small integer constants, and the generic path nothing else.
        "Transpose" => Lowering::integers(lower_transpose),
        "Concat" => Lowering::floats(lower_concat),
        "Split" => Lowering::floats(lower_split),
        "Slice" => Lowering::floats(lower_slice),
        "Gather" => Lowering::floats(lower_gather),
        "Expand" => Lowering::floats(lower_expand),
        "Tile" => Lowering::floats(lower_tile),
        "Pad" => Lowering::floats(lower_pad),
        "Resize" | "Upsample" => Lowering::floats(lower_resize),
        _ => None,
    }
}

fn movement(kernel: MovementKernel) -> Result<Lowered, ExecError> {
    Ok(Lowered::new(Kernel::Movement(kernel)))
}

fn lower_transpose(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let perm: Vec<usize> = match cx.attrs().ints("perm") {
        Some(p) => p
            .iter()
            .map(|&v| ops::normalize_axis(v, x.len()).unwrap_or(0))
            .collect(),
        None => (0..x.len()).rev().collect(),
    };
    movement(MovementKernel::Transpose {
        axes: movement::merged_axes(&x, &perm),
    })
}

fn lower_concat(cx: &Cx) -> Result<Lowered, ExecError> {
    let shapes: Vec<Vec<usize>> = (0..cx.node.inputs.len())
        .map(|i| cx.shape_of(i))
        .collect::<Result<_, _>>()?;
    let axis = ops::normalize_axis(cx.attrs().int_or("axis", 0), shapes[0].len())
        .map_err(|e| cx.error(e))?;
    movement(MovementKernel::Concat { axis, shapes })
}

fn lower_split(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let axis =
        ops::normalize_axis(cx.attrs().int_or("axis", 0), x.len()).map_err(|e| cx.error(e))?;
    let sizes = (0..cx.node.outputs.len())
        .map(|i| cx.out_shape(i).map(|s| s[axis]))
        .collect::<Result<_, _>>()?;
    movement(MovementKernel::Split {
        axis,
        shape: x,
        sizes,
    })
}

fn lower_slice(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let y = cx.out_shape(0)?;
    let rank = x.len();
    // Before opset 10 the bounds are attributes, since then constant inputs.
    let ints = |i: usize, name: &str| -> Option<Vec<i64>> {
        if cx.opset() < 10 {
            cx.attrs().ints(name).map(<[i64]>::to_vec)
        } else {
            cx.const_i64(i)
        }
    };
    let starts = ints(1, "starts").ok_or_else(|| cx.error("starts must be constant"))?;
    let axes = ints(3, "axes");
    if axes
        .as_deref()
        .is_some_and(|axes| axes.iter().any(|&a| ops::normalize_axis(a, rank).is_err()))
    {
        return Err(cx.error("an axis is out of range"));
    }
    let (st, sp) = crate::analysis::slice_starts(&x, &starts, axes.as_deref(), ints(4, "steps"));
    movement(MovementKernel::Slice {
        shape: x,
        starts: st,
        steps: sp,
        out_shape: y,
    })
}

fn lower_gather(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let axis =
        ops::normalize_axis(cx.attrs().int_or("axis", 0), x.len()).map_err(|e| cx.error(e))?;
    movement(MovementKernel::Gather { shape: x, axis })
}

fn lower_expand(cx: &Cx) -> Result<Lowered, ExecError> {
    movement(MovementKernel::Expand {
        shape: cx.shape_of(0)?,
        out_shape: cx.out_shape(0)?,
    })
}

/// Tile with constant repeats is a broadcast: out[.., r·s_a + i, ..] = x[.., i, ..] is the
/// row-major layout of the input viewed as [1, s_0, 1, s_1, ...] expanded to
/// [r_0, s_0, r_1, s_1, ...], which Expand's kernel writes (1×64×28² tiled 2×2 through the
/// generic evaluator took 85 µs on a Zen 4 guest, onnxruntime 38; as an Expand 49 µs on a Zen 1
/// guest, onnxruntime 64). Run-time repeats take the generic evaluator.
fn lower_tile(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let out = cx.out_shape(0)?;
    match cx.const_i64(1) {
        // Negative repeats and a declared output shape that disagrees are the generic
        // evaluator's to report.
        Some(repeats)
            if repeats.len() == x.len()
                && out.len() == x.len()
                && (0..x.len())
                    .all(|a| repeats[a] >= 0 && out[a] == x[a] * repeats[a] as usize) =>
        {
            let shape = x.iter().flat_map(|&extent| [1, extent]).collect();
            let out_shape = x
                .iter()
                .zip(&repeats)
                .flat_map(|(&extent, &times)| [times as usize, extent])
                .collect();
            movement(MovementKernel::Expand { shape, out_shape })
        }
        _ => Ok(Lowered::generic()),
    }
}

fn lower_pad(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let y = cx.out_shape(0)?;
    let attrs = cx.attrs();
    let pads: Option<Vec<i64>> = if cx.opset() < 11 {
        Some(attrs.ints("pads").map(<[i64]>::to_vec).unwrap_or_default())
    } else {
        cx.const_i64(1)
    };
    let mode = match attrs.string("mode").unwrap_or("constant") {
        "edge" => Some(PadMode::Edge),
        "reflect" => Some(PadMode::Reflect),
        "constant" => Some(PadMode::Constant),
        _ => None,
    };
    let run_time_value = cx.opset() >= 11 && cx.input(2).is_some() && cx.const_scalar(2).is_none();
    // Run-time pads or value, negative pads (crops), an `axes` input, `wrap` mode: the reference.
    let (Some(pads), Some(mode)) = (pads, mode) else {
        return Ok(Lowered::generic());
    };
    if run_time_value
        || cx.input(3).is_some()
        || pads.iter().any(|&p| p < 0)
        || pads.len() != 2 * x.len()
    {
        return Ok(Lowered::generic());
    }
    let value = if cx.opset() < 11 {
        attrs.float_or("value", 0.0)
    } else {
        cx.const_scalar(2).unwrap_or(0.0)
    };
    movement(MovementKernel::Pad {
        begin: pads[..x.len()].iter().map(|&p| p as usize).collect(),
        shape: x,
        out_shape: y,
        mode,
        value,
    })
}

fn lower_resize(cx: &Cx) -> Result<Lowered, ExecError> {
    let x = cx.shape_of(0)?;
    let y = cx.out_shape(0)?;
    let (op, opset, attrs) = (cx.op(), cx.opset(), cx.attrs());
    let r = x.len();
    let mode = attrs.string("mode").unwrap_or("nearest");
    let linear = matches!(mode, "linear" | "bilinear");
    // The kernel resizes the last two axes, nearest or linear, under four coordinate modes;
    // everything else (cubic, leading axes, tf_crop_and_resize, half_pixel_symmetric, an
    // aspect-ratio policy, antialiasing) runs on the reference kernel.
    let kernel_coord = matches!(
        attrs.string("coordinate_transformation_mode"),
        None | Some("half_pixel" | "pytorch_half_pixel" | "align_corners" | "asymmetric")
    );
    if r < 2
        || x[..r - 2] != y[..r - 2]
        || (!linear && mode != "nearest")
        || !kernel_coord
        || attrs.int_or("antialias", 0) != 0
        || attrs
            .string("keep_aspect_ratio_policy")
            .is_some_and(|p| p != "stretch")
    {
        return Ok(Lowered::generic());
    }
    // Upsample and opset-10 Resize predate the coordinate and rounding attributes.
    let legacy = op == "Upsample" || opset < 11;
    let coord = match attrs
        .string("coordinate_transformation_mode")
        .unwrap_or(if legacy { "asymmetric" } else { "half_pixel" })
    {
        "half_pixel" => CoordMode::HalfPixel,
        "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
        "align_corners" => CoordMode::AlignCorners,
        "asymmetric" => CoordMode::Asymmetric,
        other => {
            return Err(cx.error(format!("coordinate mode `{other}` has no kernel")));
        }
    };
    let nearest = match attrs.string("nearest_mode").unwrap_or(if legacy {
        "floor"
    } else {
        "round_prefer_floor"
    }) {
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        _ => NearestMode::RoundPreferFloor,
    };
    // Scales from the constant input when given, else the size ratio.
    let scale_input = match (op, opset) {
        ("Upsample", _) => attrs
            .floats("scales")
            .map(|s| s.to_vec())
            .or_else(|| cx.const_f32(1).map(|v| v.to_vec())),
        (_, o) if o < 11 => cx.const_f32(1).map(|v| v.to_vec()),
        _ => cx
            .const_f32(2)
            .map(|v| v.to_vec())
            .filter(|v| !v.is_empty()),
    };
    let scales = match scale_input {
        Some(s) if s.len() == r => (s[r - 2], s[r - 1]),
        _ => (
            y[r - 2] as f32 / x[r - 2] as f32,
            y[r - 1] as f32 / x[r - 1] as f32,
        ),
    };
    movement(MovementKernel::Resize {
        input: (x[r - 2], x[r - 1]),
        output: (y[r - 2], y[r - 1]),
        scales,
        linear,
        coord,
        nearest,
    })
}

pub(crate) fn run(kernel: &MovementKernel, io: &mut Io) -> Result<(), String> {
    match kernel {
        MovementKernel::Transpose { axes } => {
            if let InRef::I64(values) = io.input(0)? {
                let mut out = io.integers(values.len());
                movement::transpose_axes(values, 0, axes, &mut out);
                io.dynamic_out.push(crate::exec::RtTensor {
                    shape: vec![out.len()],
                    data: crate::exec::RtData::I64(out),
                });
                return Ok(());
            }
            let x = io.x(0)?;
            match axes.split_first() {
                Some((&(outer, outer_stride), inner_axes)) if outer > 1 => {
                    let unit: usize = inner_axes.iter().map(|axis| axis.0).product();
                    par_pieces(io.outs[0], unit.max(1), io.threads, |off, y| {
                        let (first, count) = (off / unit.max(1), y.len() / unit.max(1));
                        let mut piece_axes = axes.clone();
                        piece_axes[0].0 = count;
                        movement::transpose_axes(x, first * outer_stride, &piece_axes, y);
                    });
                }
                _ => movement::transpose_axes(x, 0, axes, io.outs[0]),
            }
        }
        MovementKernel::Concat { axis, shapes } => {
            let parts: Vec<(&[f32], &[usize])> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Ok((io.x(i)?, s.as_slice())))
                .collect::<Result<_, String>>()?;
            movement::concat(&parts, *axis, io.outs[0]);
        }
        MovementKernel::Split { axis, shape, sizes } => {
            let data = io.x(0)?;
            let mut start = 0isize;
            for (i, &size) in sizes.iter().enumerate() {
                let mut out_shape = shape.clone();
                out_shape[*axis] = size;
                let mut starts = vec![0isize; shape.len()];
                starts[*axis] = start;
                movement::slice(
                    data,
                    shape,
                    &starts,
                    &vec![1; shape.len()],
                    &out_shape,
                    io.outs[i],
                );
                start += size as isize;
            }
        }
        MovementKernel::Slice {
            shape,
            starts,
            steps,
            out_shape,
        } => movement::slice(io.x(0)?, shape, starts, steps, out_shape, io.outs[0]),
        MovementKernel::Gather { shape, axis } => {
            let indices: Vec<i64> = match io.input(1)? {
                InRef::I64(v) => v.to_vec(),
                InRef::F32(v) => v.iter().map(|&f| f as i64).collect(),
            };
            let len = shape[*axis] as i64;
            let idx: Vec<usize> = indices
                .iter()
                .map(|&i| {
                    let j = if i < 0 { i + len } else { i };
                    if j < 0 || j >= len {
                        Err(format!("index {i} out of range for dim {len}"))
                    } else {
                        Ok(j as usize)
                    }
                })
                .collect::<Result<_, _>>()?;
            movement::gather(io.x(0)?, shape, *axis, &idx, io.outs[0]);
        }
        MovementKernel::Expand { shape, out_shape } => {
            movement::broadcast(io.x(0)?, shape, out_shape, io.outs[0])
        }
        MovementKernel::Pad {
            shape,
            begin,
            out_shape,
            mode,
            value,
        } => movement::pad(io.x(0)?, shape, begin, out_shape, *mode, *value, io.outs[0]),
        MovementKernel::Resize {
            input,
            output,
            scales,
            linear,
            coord,
            nearest,
        } => {
            // Threads take whole planes.
            let x = io.x(0)?;
            let (in_plane, out_plane) = (input.0 * input.1, (output.0 * output.1).max(1));
            par_pieces(io.outs[0], out_plane, io.threads, |off, y| {
                let first = off / out_plane;
                let count = y.len() / out_plane;
                movement::resize_2d(
                    &x[first * in_plane..(first + count) * in_plane],
                    count,
                    *input,
                    *output,
                    *scales,
                    *linear,
                    *coord,
                    *nearest,
                    y,
                );
            });
        }
    }
    Ok(())
}
