//! The accuracy proxy: the fp32 original and the rewritten graph run on the same calibration
//! inputs; cosine similarity per output and sample, max absolute error, top-1 agreement.

use super::calibrate::{calibration_inputs, plan_of};
use super::qerr;
use crate::advisor::{AdvisorError, PassContext};
use crate::analysis::graph::Graph;
use crate::report::model::quant::AccuracyProxy;

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 && bb == 0.0 {
        1.0
    } else {
        ab / (aa.sqrt() * bb.sqrt()).max(1e-300)
    }
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

/// Runs the fp32 `reference` and the `rewritten` graph on the calibration inputs and compares
/// their outputs.
pub fn accuracy(
    reference: &Graph,
    rewritten: &Graph,
    ctx: &PassContext,
) -> Result<AccuracyProxy, AdvisorError> {
    let ref_plan = plan_of(reference, ctx.analyze, ctx.options.threads)?;
    let new_plan = plan_of(rewritten, ctx.analyze, ctx.options.threads)?;
    let inputs = calibration_inputs(ctx, &ref_plan)?;
    let (mut ws_a, mut ws_b) = (ref_plan.workspace(), new_plan.workspace());
    let (mut cos_min, mut cos_sum, mut cos_n) = (1.0f64, 0.0f64, 0usize);
    let (mut max_err, mut max_ref) = (0.0f64, 0.0f64);
    let (mut agree, mut rows) = (0usize, 0usize);
    for sample in &inputs {
        let a = ref_plan.run(&mut ws_a, sample, None)?;
        let b = new_plan.run(&mut ws_b, sample, None)?;
        for ((name, ta), (_, tb)) in a.iter().zip(&b) {
            let (x, y) = (ta.to_f32(), tb.to_f32());
            if x.len() != y.len() {
                return Err(qerr(format!("output `{name}` changed size")));
            }
            let c = cosine(&x, &y);
            cos_min = cos_min.min(c);
            cos_sum += c;
            cos_n += 1;
            for (&p, &q) in x.iter().zip(&y) {
                max_err = max_err.max((p - q).abs() as f64);
                max_ref = max_ref.max(p.abs() as f64);
            }
            let classes = ta.shape.last().copied().unwrap_or(1);
            if classes >= 2 && x.len() % classes == 0 {
                for (ra, rb) in x.chunks(classes).zip(y.chunks(classes)) {
                    rows += 1;
                    agree += usize::from(argmax(ra) == argmax(rb));
                }
            }
        }
    }
    Ok(AccuracyProxy {
        samples: inputs.len(),
        cosine_min: cos_min,
        cosine_mean: cos_sum / cos_n.max(1) as f64,
        max_abs_error: max_err,
        max_abs_reference: max_ref,
        top1_agreement: (rows > 0).then(|| agree as f64 / rows as f64),
    })
}
