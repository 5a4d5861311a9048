//! A YOLOv8n-class detector in the form its ONNX export takes: batch norms folded into biased
//! convolutions, SiLU written as `x · Sigmoid(x)`, C2f blocks that `Split` a tensor and `Concat`
//! the branches, an SPPF block of three chained 5×5 max pools, nearest `Resize` ×2 in the
//! neck, and the decoupled head decoded in the graph: distribution focal loss (Reshape,
//! Transpose, Softmax, a 1×1 convolution with weights 0..15) and distances to boxes against
//! constant anchor points and strides.
//!
//! Architecture from the YOLOv8 configuration at scale n (depth 0.33, width 0.25, max channels
//! 1024): backbone channels 16-32-64-128-256 with C2f repeats 1, 2, 2, 1; neck C2f at 128, 64,
//! 128, 256; head with reg_max 16 and 80 classes; 640×640 input, strides 8, 16, 32, hence
//! 80² + 40² + 20² = 8400 anchor points and an output [1, 84, 8400] (4 box coordinates in
//! pixels, centre and size, then 80 class probabilities). Weights are seeded random values.

use super::builder::{attr_int, attr_ints, ConvSpec, GraphBuilder, SigDim, WeightFill};
use crate::analysis::onnx_proto::ModelProto;

const FLOAT: i32 = 1;
const INPUT_SIZE: i64 = 640;
const CLASSES: i64 = 80;
const REG_MAX: i64 = 16;
const STRIDES: [i64; 3] = [8, 16, 32];

/// Convolution (BN folded: biased) followed by SiLU as the exporter writes it.
fn conv_silu(
    b: &mut GraphBuilder,
    x: &str,
    cin: i64,
    cout: i64,
    kernel: i64,
    stride: i64,
) -> String {
    let y = b.conv(
        x,
        cin,
        ConvSpec {
            bias: true,
            ..ConvSpec::new(cout, kernel, stride)
        },
    );
    let gate = b.node("Sigmoid", &[&y], vec![]);
    b.node("Mul", &[&y, &gate], vec![])
}

/// C2f: a 1×1 conv to 2c, split in two, `n` bottlenecks chained on the second half (each
/// output kept), all halves concatenated and mixed by a 1×1 conv.
fn c2f(b: &mut GraphBuilder, x: &str, cin: i64, cout: i64, n: usize, shortcut: bool) -> String {
    let hidden = cout / 2;
    let y = conv_silu(b, x, cin, 2 * hidden, 1, 1);
    let sizes = b.int64_const("split", &[hidden, hidden]);
    let (first, second) = (b.fresh_name("c2f_a"), b.fresh_name("c2f_b"));
    b.node_multi(
        "Split",
        &[&y, &sizes],
        vec![attr_int("axis", 1)],
        &[&first, &second],
    );
    let mut branches = vec![first, second];
    for _ in 0..n {
        let last = branches.last().expect("two halves").clone();
        let h = conv_silu(b, &last, hidden, hidden, 3, 1);
        let h = conv_silu(b, &h, hidden, hidden, 3, 1);
        branches.push(if shortcut { b.add(&last, &h) } else { h });
    }
    let refs: Vec<&str> = branches.iter().map(String::as_str).collect();
    let joined = b.node("Concat", &refs, vec![attr_int("axis", 1)]);
    conv_silu(b, &joined, (2 + n as i64) * hidden, cout, 1, 1)
}

/// SPPF: a 1×1 conv to half width, three chained 5×5 stride-1 max pools, the four concatenated
/// and mixed by a 1×1 conv.
fn sppf(b: &mut GraphBuilder, x: &str, channels: i64) -> String {
    let hidden = channels / 2;
    let y = conv_silu(b, x, channels, hidden, 1, 1);
    let p1 = b.max_pool(&y, 5, 1, 2);
    let p2 = b.max_pool(&p1, 5, 1, 2);
    let p3 = b.max_pool(&p2, 5, 1, 2);
    let joined = b.node("Concat", &[&y, &p1, &p2, &p3], vec![attr_int("axis", 1)]);
    conv_silu(b, &joined, 4 * hidden, channels, 1, 1)
}

fn upsample(b: &mut GraphBuilder, x: &str) -> String {
    let scales = b.float_const("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
    b.node(
        "Resize",
        &[x, "", &scales],
        vec![super::builder::attr_string("mode", "nearest")],
    )
}

/// The anchor points of every level, [1, 2, 8400] (x then y, at pixel centres in grid units),
/// and the stride of each, [1, 8400].
fn anchors_and_strides() -> (Vec<f32>, Vec<f32>) {
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    let mut strides = Vec::new();
    for stride in STRIDES {
        let side = INPUT_SIZE / stride;
        for y in 0..side {
            for x in 0..side {
                xs.push(x as f32 + 0.5);
                ys.push(y as f32 + 0.5);
                strides.push(stride as f32);
            }
        }
    }
    xs.extend(ys);
    (xs, strides)
}

fn anchor_count() -> i64 {
    STRIDES.iter().map(|s| (INPUT_SIZE / s).pow(2)).sum()
}

pub(super) fn yolov8n(fill: WeightFill) -> ModelProto {
    let mut b = GraphBuilder::new(fill);
    let x = b.input(
        "images",
        FLOAT,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(3),
            SigDim::Fixed(INPUT_SIZE),
            SigDim::Fixed(INPUT_SIZE),
        ],
    );
    // Backbone.
    let y = conv_silu(&mut b, &x, 3, 16, 3, 2);
    let y = conv_silu(&mut b, &y, 16, 32, 3, 2);
    let y = c2f(&mut b, &y, 32, 32, 1, true);
    let y = conv_silu(&mut b, &y, 32, 64, 3, 2);
    let p3 = c2f(&mut b, &y, 64, 64, 2, true);
    let y = conv_silu(&mut b, &p3, 64, 128, 3, 2);
    let p4 = c2f(&mut b, &y, 128, 128, 2, true);
    let y = conv_silu(&mut b, &p4, 128, 256, 3, 2);
    let y = c2f(&mut b, &y, 256, 256, 1, true);
    let p5 = sppf(&mut b, &y, 256);
    // Neck: top-down then bottom-up.
    let up = upsample(&mut b, &p5);
    let cat = b.node("Concat", &[&up, &p4], vec![attr_int("axis", 1)]);
    let n4 = c2f(&mut b, &cat, 384, 128, 1, false);
    let up = upsample(&mut b, &n4);
    let cat = b.node("Concat", &[&up, &p3], vec![attr_int("axis", 1)]);
    let out3 = c2f(&mut b, &cat, 192, 64, 1, false);
    let down = conv_silu(&mut b, &out3, 64, 64, 3, 2);
    let cat = b.node("Concat", &[&down, &n4], vec![attr_int("axis", 1)]);
    let out4 = c2f(&mut b, &cat, 192, 128, 1, false);
    let down = conv_silu(&mut b, &out4, 128, 128, 3, 2);
    let cat = b.node("Concat", &[&down, &p5], vec![attr_int("axis", 1)]);
    let out5 = c2f(&mut b, &cat, 384, 256, 1, false);
    // Head: per level a box branch (4·reg_max) and a class branch, flattened and joined. Their
    // widths come from the first level's channels (64): max(16, 64/4, 4·reg_max) and
    // max(64, min(classes, 100)).
    let first_level = 64;
    let box_width = (first_level / 4).max(16).max(4 * REG_MAX);
    let class_hidden = CLASSES.min(100).max(first_level);
    let mut levels = Vec::new();
    for (feature, channels) in [(&out3, 64), (&out4, 128), (&out5, 256)] {
        let boxes = conv_silu(&mut b, feature, channels, box_width, 3, 1);
        let boxes = conv_silu(&mut b, &boxes, box_width, box_width, 3, 1);
        let boxes = b.conv(
            &boxes,
            box_width,
            ConvSpec {
                bias: true,
                ..ConvSpec::new(4 * REG_MAX, 1, 1)
            },
        );
        let classes = conv_silu(&mut b, feature, channels, class_hidden, 3, 1);
        let classes = conv_silu(&mut b, &classes, class_hidden, class_hidden, 3, 1);
        let classes = b.conv(
            &classes,
            class_hidden,
            ConvSpec {
                bias: true,
                ..ConvSpec::new(CLASSES, 1, 1)
            },
        );
        let joined = b.node("Concat", &[&boxes, &classes], vec![attr_int("axis", 1)]);
        levels.push(b.reshape(&joined, &[1, 4 * REG_MAX + CLASSES, -1]));
    }
    let refs: Vec<&str> = levels.iter().map(String::as_str).collect();
    let all = b.node("Concat", &refs, vec![attr_int("axis", 2)]);
    let sizes = b.int64_const("split", &[4 * REG_MAX, CLASSES]);
    let (box_logits, class_logits) = (b.fresh_name("box"), b.fresh_name("cls"));
    b.node_multi(
        "Split",
        &[&all, &sizes],
        vec![attr_int("axis", 1)],
        &[&box_logits, &class_logits],
    );
    // Distribution focal loss: the expected bin of a softmax over 16 bins per side.
    let anchors = anchor_count();
    let bins = b.reshape(&box_logits, &[1, 4, REG_MAX, anchors]);
    let bins = b.transpose(&bins, &[0, 2, 1, 3]);
    let bins = b.softmax(&bins, 1);
    let projection = b.float_const(
        "dfl",
        &[1, REG_MAX, 1, 1],
        &(0..REG_MAX).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let distances = b.node(
        "Conv",
        &[&bins, &projection],
        vec![attr_ints("kernel_shape", &[1, 1])],
    );
    let distances = b.reshape(&distances, &[1, 4, anchors]);
    // Distances to boxes: centre and size, in pixels.
    let sizes = b.int64_const("split", &[2, 2]);
    let (near, far) = (b.fresh_name("lt"), b.fresh_name("rb"));
    b.node_multi(
        "Split",
        &[&distances, &sizes],
        vec![attr_int("axis", 1)],
        &[&near, &far],
    );
    let (points, strides) = anchors_and_strides();
    let points = b.float_const("anchors", &[1, 2, anchors], &points);
    let strides = b.float_const("strides", &[1, anchors], &strides);
    let top_left = b.node("Sub", &[&points, &near], vec![]);
    let bottom_right = b.node("Add", &[&points, &far], vec![]);
    let corners = b.node("Add", &[&top_left, &bottom_right], vec![]);
    let two = b.scalar_const("two", 2.0);
    let centre = b.node("Div", &[&corners, &two], vec![]);
    let size = b.node("Sub", &[&bottom_right, &top_left], vec![]);
    let boxes = b.node("Concat", &[&centre, &size], vec![attr_int("axis", 1)]);
    let boxes = b.node("Mul", &[&boxes, &strides], vec![]);
    let scores = b.node("Sigmoid", &[&class_logits], vec![]);
    let output = b.node("Concat", &[&boxes, &scores], vec![attr_int("axis", 1)]);
    b.output(
        &output,
        FLOAT,
        &[
            SigDim::Fixed(1),
            SigDim::Fixed(4 + CLASSES),
            SigDim::Fixed(anchors),
        ],
    );
    b.finish("yolov8n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn anchors_cover_three_levels() {
        assert_eq!(super::anchor_count(), 8400);
        let (points, strides) = super::anchors_and_strides();
        assert_eq!(points.len(), 2 * 8400);
        assert_eq!((points[0], points[8400]), (0.5, 0.5));
        // The last point is the bottom-right cell of the 20×20 level.
        assert_eq!((points[8399], points[2 * 8400 - 1]), (19.5, 19.5));
        assert_eq!(
            (strides[0], strides[6400], strides[8399]),
            (8.0, 16.0, 32.0)
        );
    }
}
