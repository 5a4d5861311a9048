//! Image-geometry and small linear-algebra ops: CenterCropPad (18), Col2Im (18), AffineGrid (20)
//! and Det (11).
//!
//! - CenterCropPad: each listed axis becomes the requested length, centred: a crop starts at
//!   ⌊(in − out)/2⌋, a pad puts ⌊(out − in)/2⌋ zeros before (the odd one after). Pure movement.
//! - Col2Im: [N, C·∏block, L] column blocks summed back into [N, C, image...]: one add per
//!   input element.
//! - AffineGrid: theta [N, 2, 3] (or [N, 3, 4]) applied to the normalised positions of a
//!   [N, C, H, W] (or [N, C, D, H, W]) image: grid [N, H, W, 2] (or [N, D, H, W, 3]); each
//!   output coordinate is a d-term dot product plus the translation (d MACs and 1 add).
//! - Det: [*, M, M] → [*] by LU factorisation with partial pivoting: M³/3 MACs per matrix.
//!
//! Bytes follow the module conventions (inputs read once, outputs written once).

use super::{invalid, normalize_axis, CostCtx, InferCtx, OpCost, OpDef, OpResult};
use crate::analysis::tensor::{Dim, TensorFact};

struct CenterCropPad;
struct Col2Im;
struct AffineGrid;
struct Det;

pub(super) fn lookup(op_type: &str) -> Option<&'static dyn OpDef> {
    Some(match op_type {
        "CenterCropPad" => &CenterCropPad,
        "Col2Im" => &Col2Im,
        "AffineGrid" => &AffineGrid,
        "Det" => &Det,
        _ => return None,
    })
}

/// The axes CenterCropPad resizes (its `axes`, every axis by default), normalised.
pub(crate) fn crop_pad_axes(
    attrs: &crate::analysis::graph::Attributes,
    rank: usize,
) -> OpResult<Vec<usize>> {
    match attrs.ints("axes") {
        Some(axes) => axes.iter().map(|&a| normalize_axis(a, rank)).collect(),
        None => Ok((0..rank).collect()),
    }
}

impl OpDef for CenterCropPad {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        let axes = crop_pad_axes(ctx.attrs(), shape.len())?;
        let target = ctx.const_ints(1)?.ok_or("missing input #1 (shape)")?;
        if target.len() != axes.len() {
            return Err(invalid(format!(
                "CenterCropPad: {} target lengths for {} axes",
                target.len(),
                axes.len()
            )));
        }
        let mut out = shape.to_vec();
        for (&axis, &length) in axes.iter().zip(&target) {
            if length < 0 {
                return Err(invalid(format!("CenterCropPad: a length of {length}")));
            }
            out[axis] = Dim::Known(length as u64);
        }
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

/// Col2Im's geometry along one spatial axis: image length, stride, dilation, pad before, and
/// the number of block positions.
pub(crate) struct Col2ImAxis {
    pub image: i64,
    pub stride: i64,
    pub dilation: i64,
    pub pad_before: i64,
    pub positions: i64,
}

pub(crate) fn col2im_axes(
    attrs: &crate::analysis::graph::Attributes,
    image: &[i64],
    block: &[i64],
) -> OpResult<Vec<Col2ImAxis>> {
    let d = image.len();
    if block.len() != d || d == 0 {
        return Err(invalid(format!(
            "Col2Im: image_shape has {d} dims but block_shape {}",
            block.len()
        )));
    }
    let or_ones = |name: &str, len: usize| -> OpResult<Vec<i64>> {
        match attrs.ints(name) {
            Some(v) if v.len() == len => Ok(v.to_vec()),
            Some(v) => Err(invalid(format!(
                "Col2Im: `{name}` has {} values, expected {len}",
                v.len()
            ))),
            None => Ok(vec![if name == "pads" { 0 } else { 1 }; len]),
        }
    };
    let strides = or_ones("strides", d)?;
    let dilations = or_ones("dilations", d)?;
    let pads = or_ones("pads", 2 * d)?;
    (0..d)
        .map(|i| {
            if image[i] <= 0 || block[i] <= 0 || strides[i] <= 0 || dilations[i] <= 0 {
                return Err(invalid("Col2Im: sizes, strides and dilations are positive"));
            }
            if pads[i] < 0 || pads[i + d] < 0 {
                return Err(invalid("Col2Im: negative pads"));
            }
            let too_large = || invalid("Col2Im: the geometry overflows");
            let span = dilations[i]
                .checked_mul(block[i] - 1)
                .and_then(|s| s.checked_add(1))
                .ok_or_else(too_large)?;
            let padded = image[i]
                .checked_add(pads[i])
                .and_then(|p| p.checked_add(pads[i + d]))
                .ok_or_else(too_large)?;
            if padded < span {
                return Err(invalid(format!(
                    "Col2Im: a block spanning {span} does not fit an axis of {padded}"
                )));
            }
            Ok(Col2ImAxis {
                image: image[i],
                stride: strides[i],
                dilation: dilations[i],
                pad_before: pads[i],
                positions: (padded - span) / strides[i] + 1,
            })
        })
        .collect()
}

impl OpDef for Col2Im {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() != 3 {
            return Err(invalid("Col2Im: the input is [N, C·∏block, L]"));
        }
        let image = ctx.const_ints(1)?.ok_or("missing image_shape")?;
        let block = ctx.const_ints(2)?.ok_or("missing block_shape")?;
        let axes = col2im_axes(ctx.attrs(), &image, &block)?;
        let block_size: i64 = block.iter().product();
        let channels = match &shape[1] {
            Dim::Known(c) if *c as i64 % block_size == 0 => Dim::Known(*c / block_size as u64),
            Dim::Known(c) => {
                return Err(invalid(format!(
                    "Col2Im: {c} rows do not split into blocks of {block_size}"
                )))
            }
            Dim::Sym(s) => Dim::Sym(format!("{s}/{block_size}")),
        };
        if let Some(columns) = shape[2].known() {
            let positions: i64 = axes.iter().map(|a| a.positions).product();
            if columns as i64 != positions {
                return Err(invalid(format!(
                    "Col2Im: {columns} columns but the geometry gives {positions} block positions"
                )));
            }
        }
        let mut out = vec![shape[0].clone(), channels];
        out.extend(image.iter().map(|&d| Dim::Known(d as u64)));
        Ok(vec![TensorFact::new(x.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        Ok(OpCost {
            flops: ctx.input_dims(0)?.iter().product(),
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for AffineGrid {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let theta = ctx.input(0)?;
        let theta_shape = ctx.input_shape(0)?;
        let size = ctx.const_ints(1)?.ok_or("missing size")?;
        let spatial = match size.len() {
            4 => 2,
            5 => 3,
            n => {
                return Err(invalid(format!(
                    "AffineGrid: size has {n} values; [N, C, H, W] or [N, C, D, H, W]"
                )))
            }
        };
        let want = [Some(spatial as u64), Some(spatial as u64 + 1)];
        if theta_shape.len() != 3 || [theta_shape[1].known(), theta_shape[2].known()] != want {
            return Err(invalid(format!(
                "AffineGrid: theta is [N, {spatial}, {}] for a {spatial}-D grid",
                spatial + 1
            )));
        }
        if size.iter().any(|&d| d <= 0) {
            return Err(invalid(format!("AffineGrid: size {size:?}")));
        }
        let mut out = vec![Dim::Known(size[0] as u64)];
        out.extend(size[2..].iter().map(|&d| Dim::Known(d as u64)));
        out.push(Dim::Known(spatial as u64));
        Ok(vec![TensorFact::new(theta.dtype, out)])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let out = ctx.output_dims(0)?;
        let coordinates: u64 = out.iter().product();
        let spatial = *out.last().unwrap_or(&2);
        let macs = coordinates * spatial;
        Ok(OpCost {
            flops: 2 * macs + coordinates,
            macs,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

impl OpDef for Det {
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorFact>> {
        let x = ctx.input(0)?;
        let shape = ctx.input_shape(0)?;
        if shape.len() < 2 {
            return Err(invalid("Det: the input is [*, M, M]"));
        }
        let (m, n) = (&shape[shape.len() - 2], &shape[shape.len() - 1]);
        if let (Some(m), Some(n)) = (m.known(), n.known()) {
            if m != n {
                return Err(invalid(format!("Det: {m}×{n} matrices are not square")));
            }
        }
        if !x.dtype.is_float() {
            return Err(invalid(format!("Det of {:?} values", x.dtype)));
        }
        Ok(vec![TensorFact::new(
            x.dtype,
            shape[..shape.len() - 2].to_vec(),
        )])
    }

    fn cost(&self, ctx: &CostCtx) -> OpResult<OpCost> {
        let dims = ctx.input_dims(0)?;
        let m = dims[dims.len() - 1];
        let matrices: u64 = dims[..dims.len() - 2].iter().product();
        let macs = matrices * m * m * m / 3;
        Ok(OpCost {
            // The MACs of the elimination, one division per eliminated row and the diagonal
            // product.
            flops: 2 * macs + matrices * (m * m / 2 + m),
            macs,
            bytes: ctx.default_traffic()?,
            ..OpCost::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::kit::*;

    #[test]
    fn center_crop_pad_sets_the_listed_axes() {
        let x = f32s(&[20, 10, 3]);
        let out = Op::new("CenterCropPad").infer(&[&x, &ints(&[10, 20, 3])]);
        assert_eq!(dims(&out[0]), [10, 20, 3]);
        let out = Op::new("CenterCropPad")
            .ints("axes", &[0, -2])
            .infer(&[&x, &ints(&[12, 7])]);
        assert_eq!(dims(&out[0]), [12, 7, 3]);
        Op::new("CenterCropPad").invalid(&[&x, &ints(&[1, 2])]);
    }

    #[test]
    fn col2im_recovers_the_image_and_counts_one_add_per_element() {
        // 5×5 image, 1×5 blocks, stride 1: 5 positions; 1 channel ⇒ rows 5.
        let x = f32s(&[1, 5, 5]);
        let (out, cost) = Op::new("Col2Im").run(&[&x, &ints(&[5, 5]), &ints(&[1, 5])]);
        assert_eq!(dims(&out[0]), [1, 1, 5, 5]);
        assert_eq!(cost.flops, 25);
        // Strided 2×2 blocks over 5×5 with stride 2: 2×2 positions.
        let x = f32s(&[1, 8, 4]);
        let out =
            Op::new("Col2Im")
                .ints("strides", &[2, 2])
                .infer(&[&x, &ints(&[5, 5]), &ints(&[2, 2])]);
        assert_eq!(dims(&out[0]), [1, 2, 5, 5]);
        // Column count that disagrees with the geometry.
        Op::new("Col2Im").invalid(&[&f32s(&[1, 8, 5]), &ints(&[5, 5]), &ints(&[2, 2])]);
    }

    #[test]
    fn affine_grid_shapes_and_work() {
        let theta = f32s(&[2, 2, 3]);
        let (out, cost) = Op::new("AffineGrid").run(&[&theta, &ints(&[2, 3, 5, 6])]);
        assert_eq!(dims(&out[0]), [2, 5, 6, 2]);
        assert_eq!(cost.macs, 2 * 5 * 6 * 2 * 2);
        let out = Op::new("AffineGrid").infer(&[&f32s(&[1, 3, 4]), &ints(&[1, 1, 2, 3, 4])]);
        assert_eq!(dims(&out[0]), [1, 2, 3, 4, 3]);
        Op::new("AffineGrid").invalid(&[&theta, &ints(&[2, 3, 5, 6, 7])]);
    }

    #[test]
    fn det_drops_the_matrix_dims() {
        let (out, cost) = Op::new("Det").run(&[&f32s(&[4, 3, 3])]);
        assert_eq!(dims(&out[0]), [4]);
        assert_eq!(cost.macs, 4 * 9);
        let out = Op::new("Det").infer(&[&f32s(&[3, 3])]);
        assert_eq!(dims(&out[0]), Vec::<u64>::new());
        Op::new("Det").invalid(&[&f32s(&[3, 4])]);
    }
}
