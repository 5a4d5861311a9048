//! Hand-computed data-movement cases (`movement.rs` has no room left for them under the
//! 1,000-line limit): no arithmetic except Resize and CumSum, inputs read once, the output
//! written once, a Slice or Gather reading only what it keeps. f32 at 4 bytes, i64 at 8.

use super::kit::{
    act, dims, f32_dims, f32s, floats, ints, ints_shaped, sym, traffic, values, w32, Op,
};
use crate::analysis::tensor::{DType, Dim};

#[test]
fn concat_along_an_axis() {
    let (a, b) = (f32s(&[2, 3, 4]), f32s(&[2, 5, 4]));
    let (out, cost) = Op::new("Concat").int("axis", 1).run(&[&a, &b]);
    assert_eq!(dims(&out[0]), [2, 8, 4]);
    assert_eq!(cost.flops, 0);
    // (24 + 40)·4 = 256 read, 64·4 = 256 written.
    assert_eq!(cost.bytes, traffic(0, 256, 256));
    // A symbolic extent on the axis makes the total symbolic.
    let s = f32_dims(vec![Dim::Known(2), sym("T"), Dim::Known(4)]);
    let out = Op::new("Concat").int("axis", -2).infer(&[&a, &s]);
    assert!(matches!(out[0].shape.as_deref().unwrap()[1], Dim::Sym(_)));
}

#[test]
fn concat_folds_shape_vectors() {
    let (out, _) = Op::new("Concat")
        .int("axis", 0)
        .run(&[&ints(&[1, 2]), &ints(&[3])]);
    assert_eq!(values(&out[0]), [1.0, 2.0, 3.0]);
    // Along axis 1 of [2, 1] and [2, 2]: rows interleave.
    let (a, b) = (
        ints_shaped(&[2, 1], &[1, 2]),
        ints_shaped(&[2, 2], &[3, 4, 5, 6]),
    );
    let out = Op::new("Concat").int("axis", 1).infer(&[&a, &b]);
    assert_eq!(values(&out[0]), [1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
}

#[test]
fn inconsistent_concats_are_invalid() {
    let a = f32s(&[2, 3, 4]);
    let reason = Op::new("Concat")
        .int("axis", 1)
        .invalid(&[&a, &f32s(&[2, 3])]);
    assert!(reason.contains("rank"), "{reason}");
    let reason = Op::new("Concat")
        .int("axis", 1)
        .invalid(&[&a, &f32s(&[2, 3, 5])]);
    assert!(reason.contains("axis 2"), "{reason}");
    // No axis attribute fails.
    Op::new("Concat").fails(&[&a, &a]);
}

#[test]
fn split_sizes() {
    let x = f32s(&[5, 4]);
    let split = ints(&[2, 3]);
    let (out, cost) = Op::new("Split").outputs(2).run(&[&x, &split]);
    assert_eq!((dims(&out[0]), dims(&out[1])), (vec![2, 4], vec![3, 4]));
    // 80 bytes read (+16 of split sizes as weights), 32 + 48 written.
    assert_eq!(cost.bytes, traffic(16, 80, 80));
    // Opset 11: sizes as an attribute.
    let out = Op::new("Split")
        .opset(11)
        .ints("split", &[1, 4])
        .outputs(2)
        .infer(&[&x]);
    assert_eq!(dims(&out[1]), [4, 4]);
    // No sizes, 3 outputs of a 10-long axis (opset 18): ⌈10/3⌉ = 4, 4, then the rest, 2.
    let out = Op::new("Split").outputs(3).infer(&[&f32s(&[10])]);
    let lens: Vec<Vec<u64>> = out.iter().map(dims).collect();
    assert_eq!(lens, [vec![4], vec![4], vec![2]]);
}

#[test]
fn inconsistent_splits_are_invalid() {
    let x = f32s(&[5, 4]);
    // 2 + 4 = 6 ≠ 5.
    let reason = Op::new("Split").outputs(2).invalid(&[&x, &ints(&[2, 4])]);
    assert!(reason.contains("add up to 6"), "{reason}");
    // Two sizes for three outputs.
    Op::new("Split").outputs(3).invalid(&[&x, &ints(&[2, 3])]);
}

#[test]
fn slice_reads_only_what_it_keeps() {
    let x = f32s(&[10, 20]);
    let (starts, ends, axes, steps) = (ints(&[2]), ints(&[8]), ints(&[1]), ints(&[2]));
    let (out, cost) = Op::new("Slice").run(&[&x, &starts, &ends, &axes, &steps]);
    // Columns 2, 4, 6: ⌈(8 − 2) / 2⌉ = 3.
    assert_eq!(dims(&out[0]), [10, 3]);
    // 30 elements read and written; the parameter vectors are not counted.
    assert_eq!(cost.bytes, traffic(0, 120, 120));
    // From a constant the read is a weight read.
    let (_, cost) = Op::new("Slice").run(&[&w32(&[10, 20]), &starts, &ends, &axes, &steps]);
    assert_eq!(cost.bytes, traffic(120, 0, 120));
    // Negative step from the end: 10 − 1 down to (not including) 0 by 3: 9, 6, 3.
    let out = Op::new("Slice").infer(&[&x, &ints(&[-1]), &ints(&[0]), &ints(&[0]), &ints(&[-3])]);
    assert_eq!(dims(&out[0]), [3, 20]);
    // Opset 9: attributes, axes default to the first ones.
    let op = Op::new("Slice")
        .opset(9)
        .ints("starts", &[1, 0])
        .ints("ends", &[4, 100]);
    assert_eq!(dims(&op.infer(&[&x])[0]), [3, 20]);
}

#[test]
fn slice_folds_and_refuses_nonsense() {
    let (out, _) = Op::new("Slice").run(&[&ints(&[1, 2, 3, 4, 5]), &ints(&[1]), &ints(&[4])]);
    assert_eq!(values(&out[0]), [2.0, 3.0, 4.0]);
    let x = f32s(&[10, 20]);
    // A scalar cannot be sliced; three starts for a rank-2 input without axes.
    Op::new("Slice").invalid(&[&f32s(&[]), &ints(&[0]), &ints(&[1])]);
    Op::new("Slice").invalid(&[&x, &ints(&[0, 0, 0]), &ints(&[1, 1, 1])]);
    // A zero step fails; run-time starts are an ordinary error (value_info fallback).
    Op::new("Slice").fails(&[&x, &ints(&[0]), &ints(&[1]), &ints(&[0]), &ints(&[0])]);
    Op::new("Slice").error(&[&x, &act(DType::I64, &[1]), &ints(&[1])]);
}

#[test]
fn transpose_moves_every_element() {
    let x = f32s(&[1, 3, 4, 5]);
    let (out, cost) = Op::new("Transpose").ints("perm", &[0, 2, 3, 1]).run(&[&x]);
    assert_eq!(dims(&out[0]), [1, 4, 5, 3]);
    assert_eq!(cost.bytes, traffic(0, 240, 240));
    // Default permutation: reversed.
    assert_eq!(dims(&Op::new("Transpose").infer(&[&x])[0]), [5, 4, 3, 1]);
    Op::new("Transpose").ints("perm", &[1, 0]).fails(&[&x]);
}

#[test]
fn transpose_folds_small_integer_constants() {
    // silero-vad's pad amounts: [[0, 0], [p, p']] reshaped 2×2 and flipped before Pad.
    let pads = ints_shaped(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let out = Op::new("Transpose").ints("perm", &[1, 0]).infer(&[&pads]);
    assert_eq!(dims(&out[0]), [3, 2]);
    assert_eq!(values(&out[0]), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    // Rank 3, perm [2, 0, 1]: out[k][i][j] = in[i][j][k].
    let cube = ints_shaped(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]);
    let out = Op::new("Transpose")
        .ints("perm", &[2, 0, 1])
        .infer(&[&cube]);
    assert_eq!(values(&out[0]), [0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]);
    // A float constant (a weight) stays a run-time transpose.
    let weight = floats(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let out = Op::new("Transpose").infer(&[&weight]);
    assert!(out[0].konst.is_none());
}

#[test]
fn gather_from_an_embedding_reads_the_gathered_rows() {
    let (table, ids) = (w32(&[1000, 64]), act(DType::I64, &[2, 8]));
    let (out, cost) = Op::new("Gather").run(&[&table, &ids]);
    assert_eq!(dims(&out[0]), [2, 8, 64]);
    // 16 rows of 64: 4,096 bytes of weights read and written; 16 indices of 8 bytes read.
    assert_eq!(cost.bytes, traffic(4_096, 128, 4_096));
    // Along axis 1 of an activation: [3, 10] gathered by [4] → [3, 4].
    let out = Op::new("Gather")
        .int("axis", 1)
        .infer(&[&f32s(&[3, 10]), &act(DType::I64, &[4])]);
    assert_eq!(dims(&out[0]), [3, 4]);
}

#[test]
fn gather_folds_shape_lookups() {
    // Shape → Gather(0): the batch dim as a scalar.
    let shape = ints(&[1, 3, 224, 224]);
    let index = ints_shaped(&[], &[0]);
    let (out, _) = Op::new("Gather").run(&[&shape, &index]);
    assert_eq!(dims(&out[0]), Vec::<u64>::new());
    assert_eq!(values(&out[0]), [1.0]);
    // Negative indices count from the end.
    let out = Op::new("Gather").infer(&[&shape, &ints(&[-1, -2])]);
    assert_eq!(values(&out[0]), [224.0, 224.0]);
    Op::new("Gather").fails(&[&shape, &ints(&[4])]);
}

#[test]
fn expand_broadcasts_to_a_target() {
    let (x, target) = (f32s(&[3, 1]), ints(&[2, 3, 4]));
    let (out, cost) = Op::new("Expand").run(&[&x, &target]);
    assert_eq!(dims(&out[0]), [2, 3, 4]);
    // X 12 bytes, the [3] target 24 bytes of weights, 96 written.
    assert_eq!(cost.bytes, traffic(24, 12, 96));
    // A splat stays a splat.
    let one = super::kit::scalar(DType::F32, 1.0);
    let out = Op::new("Expand").infer(&[&one, &ints(&[4, 4])]);
    assert_eq!(values(&out[0]), [1.0; 16]);
    // 3 against 4: not broadcastable.
    Op::new("Expand").invalid(&[&x, &ints(&[4, 4])]);
}

#[test]
fn pad_grows_the_output() {
    let x = f32s(&[1, 3, 4, 4]);
    let pads = ints(&[0, 0, 1, 1, 0, 0, 1, 1]);
    let (out, cost) = Op::new("Pad").run(&[&x, &pads]);
    assert_eq!(dims(&out[0]), [1, 3, 6, 6]);
    // 48·4 read, 8 pads of 8 bytes, 108·4 written.
    assert_eq!(cost.bytes, traffic(64, 192, 432));
    // Opset 2: pads as an attribute; negative pads crop.
    let op = Op::new("Pad")
        .opset(2)
        .ints("pads", &[0, 0, -1, -1, 0, 0, 0, 0]);
    assert_eq!(dims(&op.infer(&[&x])[0]), [1, 3, 3, 3]);
    // Opset 18 axes input, pads for axes 2 and 3 only: [1, 2, 0, 1] gives 4 + 1 + 0 = 5 and
    // 4 + 2 + 1 = 7.
    let (pads, axes) = (ints(&[1, 2, 0, 1]), ints(&[2, 3]));
    let out = Op::new("Pad")
        .opset(18)
        .try_infer_opt(&[Some(&x), Some(&pads), None, Some(&axes)])
        .unwrap();
    assert_eq!(dims(&out[0]), [1, 3, 5, 7]);
    // Cropping below zero; pads of the wrong length.
    Op::new("Pad").fails(&[&x, &ints(&[0, 0, -5, 0, 0, 0, 0, 0])]);
    Op::new("Pad").fails(&[&x, &ints(&[1, 1])]);
}

#[test]
fn tile_repeats() {
    let (out, cost) = Op::new("Tile").run(&[&f32s(&[2, 3]), &ints(&[2, 2])]);
    assert_eq!(dims(&out[0]), [4, 6]);
    assert_eq!(cost.bytes, traffic(16, 24, 96));
    Op::new("Tile").fails(&[&f32s(&[2, 3]), &ints(&[2])]);
}

#[test]
fn resize_interpolation_flops() {
    let x = f32s(&[1, 3, 8, 8]);
    let roi = floats(&[0], &[]);
    let scales = floats(&[4], &[1.0, 1.0, 2.0, 2.0]);
    let linear = Op::new("Resize").string("mode", "linear");
    let (out, cost) = linear.run(&[&x, &roi, &scales]);
    assert_eq!(dims(&out[0]), [1, 3, 16, 16]);
    // 2 resized dims: 2² = 4 taps, 2 FLOPs each, per output: 768·8 = 6,144.
    assert_eq!(cost.flops, 6_144);
    // Only the data tensor and the output count: 192·4 in, 768·4 out.
    assert_eq!(cost.bytes, traffic(0, 768, 3_072));
    // Cubic: 4² = 16 taps → 768·32; nearest: no arithmetic.
    let cubic = Op::new("Resize").string("mode", "cubic");
    assert_eq!(cubic.run(&[&x, &roi, &scales]).1.flops, 768 * 32);
    assert_eq!(Op::new("Resize").run(&[&x, &roi, &scales]).1.flops, 0);
    // `sizes` instead of scales (scales empty).
    let (empty, sizes) = (floats(&[0], &[]), ints(&[1, 3, 5, 7]));
    let out = Op::new("Resize").infer(&[&x, &roi, &empty, &sizes]);
    assert_eq!(dims(&out[0]), [1, 3, 5, 7]);
    // Upsample (opset 9): scales as an input; opset 7: as an attribute.
    let out = Op::new("Upsample").opset(9).infer(&[&x, &scales]);
    assert_eq!(dims(&out[0]), [1, 3, 16, 16]);
    let up = Op::new("Upsample")
        .opset(7)
        .floats("scales", &[1.0, 1.0, 0.5, 0.5]);
    assert_eq!(dims(&up.infer(&[&x])[0]), [1, 3, 4, 4]);
    // Neither scales nor sizes.
    Op::new("Resize").fails(&[&x]);
}

#[test]
fn depth_and_space() {
    let x = f32s(&[1, 8, 3, 3]);
    let (out, cost) = Op::new("DepthToSpace").int("blocksize", 2).run(&[&x]);
    assert_eq!(dims(&out[0]), [1, 2, 6, 6]);
    assert_eq!(cost.bytes, traffic(0, 288, 288));
    let out = Op::new("SpaceToDepth")
        .int("blocksize", 2)
        .infer(&[&f32s(&[1, 2, 6, 6])]);
    assert_eq!(dims(&out[0]), [1, 8, 3, 3]);
    Op::new("DepthToSpace").fails(&[&x]);
    Op::new("DepthToSpace")
        .int("blocksize", 2)
        .fails(&[&f32s(&[8, 3, 3])]);
}

#[test]
fn same_shape_ops() {
    let x = f32s(&[4, 5]);
    // CumSum: one add per element.
    let (out, cost) = Op::new("CumSum").run(&[&x, &ints_shaped(&[], &[1])]);
    assert_eq!(dims(&out[0]), [4, 5]);
    assert_eq!(cost.flops, 20);
    assert_eq!(cost.bytes, traffic(8, 80, 80));
    // ScatterND: data, indices [2, 1], updates [2, 5]; output of the data's shape.
    let (idx, upd) = (act(DType::I64, &[2, 1]), f32s(&[2, 5]));
    let (out, cost) = Op::new("ScatterND").run(&[&x, &idx, &upd]);
    assert_eq!(dims(&out[0]), [4, 5]);
    assert_eq!(cost.flops, 0);
    assert_eq!(cost.bytes, traffic(0, 80 + 16 + 40, 80));
    // GatherElements takes the shape of its indices.
    let out = Op::new("GatherElements").infer(&[&x, &act(DType::I64, &[4, 2])]);
    assert_eq!(dims(&out[0]), [4, 2]);
}

#[test]
fn gather_nd_and_one_hot() {
    // data [2, 3, 4], indices [5, 2]: each index picks a [4] row → [5, 4].
    let (data, idx) = (f32s(&[2, 3, 4]), act(DType::I64, &[5, 2]));
    let (out, cost) = Op::new("GatherND").run(&[&data, &idx]);
    assert_eq!(dims(&out[0]), [5, 4]);
    // The gathered 20 elements (80 bytes) + 10 indices (80 bytes) read; 80 written.
    assert_eq!(cost.bytes, traffic(0, 160, 80));
    // OneHot: 3 indices, depth 10 → [3, 10] (axis −1), [10, 3] (axis 0).
    let (ids, depth, vals) = (act(DType::I64, &[3]), ints(&[10]), f32s(&[2]));
    let out = Op::new("OneHot").infer(&[&ids, &depth, &vals]);
    assert_eq!((out[0].dtype, dims(&out[0])), (DType::F32, vec![3, 10]));
    let out = Op::new("OneHot")
        .int("axis", 0)
        .infer(&[&ids, &depth, &vals]);
    assert_eq!(dims(&out[0]), [10, 3]);
    Op::new("OneHot").error(&[&ids, &act(DType::I64, &[1]), &vals]);
}
