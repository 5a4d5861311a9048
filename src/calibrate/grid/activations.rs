//! Activations as exporters write them, several element-wise ops each: the grid's chain points
//! (`chain`) time them as the one fused node the advisor makes of them.

use super::GraphBuilder;

/// GELU, tanh form (GPT-2, magika), as exporters write it, each op reading the one before
/// and x or a constant: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), nine ops.
pub(super) fn gelu_tanh(b: &mut GraphBuilder, x: &str) -> String {
    let c = b.scalar_const("gelu_c", 0.044715);
    let cx = b.node("Mul", &[x, &c], vec![]);
    let cx2 = b.node("Mul", &[x, &cx], vec![]);
    let cx3 = b.node("Mul", &[x, &cx2], vec![]);
    let inner = b.node("Add", &[x, &cx3], vec![]);
    let k = b.scalar_const("gelu_k", 0.797_884_6);
    let scaled = b.node("Mul", &[&k, &inner], vec![]);
    let t = b.node("Tanh", &[&scaled], vec![]);
    let one = b.scalar_const("one", 1.0);
    let t1 = b.node("Add", &[&one, &t], vec![]);
    let half = b.scalar_const("half", 0.5);
    let h = b.node("Mul", &[&half, &t1], vec![]);
    b.node("Mul", &[&h, x], vec![])
}

/// GELU, erf form (BERT exports): x·0.5·(1 + erf(x/√2)), five ops.
pub(super) fn gelu_erf(b: &mut GraphBuilder, x: &str) -> String {
    let k = b.scalar_const("inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2);
    let scaled = b.node("Mul", &[x, &k], vec![]);
    let e = b.node("Erf", &[&scaled], vec![]);
    let one = b.scalar_const("one", 1.0);
    let e1 = b.node("Add", &[&e, &one], vec![]);
    let half = b.scalar_const("half", 0.5);
    let h = b.node("Mul", &[&e1, &half], vec![]);
    b.node("Mul", &[x, &h], vec![])
}

/// SiLU / swish (YOLOv5-v8, EfficientNet): x·sigmoid(x).
pub(super) fn silu(b: &mut GraphBuilder, x: &str) -> String {
    let s = b.node("Sigmoid", &[x], vec![]);
    b.node("Mul", &[x, &s], vec![])
}

/// Hard swish as older exports write it (MobileNetV3): x·clip(x + 3, 0, 6)/6.
pub(super) fn hard_swish(b: &mut GraphBuilder, x: &str) -> String {
    let three = b.scalar_const("three", 3.0);
    let shifted = b.node("Add", &[x, &three], vec![]);
    let clipped = b.relu6(&shifted);
    let gated = b.node("Mul", &[x, &clipped], vec![]);
    let six = b.scalar_const("six", 6.0);
    b.node("Div", &[&gated, &six], vec![])
}
