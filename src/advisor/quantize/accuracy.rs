//! The accuracy proxy: the fp32 original and the rewritten graph run on the same calibration
//! inputs; cosine similarity per output and sample, max absolute error, top-1 agreement.

use super::calibrate::{calibration_inputs, plan_of};
use super::qerr;
use crate::advisor::{AdvisorError, PassContext};
use crate::analysis::graph::Graph;
use crate::exec::RtTensor;
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
    let mut comparison = OutputComparison::default();
    for sample in &inputs {
        let a = ref_plan.run(&mut ws_a, sample, None)?;
        let b = new_plan.run(&mut ws_b, sample, None)?;
        comparison.add(&a, &b)?;
    }
    Ok(comparison.finish())
}

/// Accumulates the proxy over samples: each call adds one sample's reference and rewritten
/// outputs (same names, same order).
#[derive(Default)]
pub struct OutputComparison {
    samples: usize,
    cos_min: Option<f64>,
    cos_sum: f64,
    cos_n: usize,
    max_err: f64,
    max_ref: f64,
    agree: usize,
    rows: usize,
}

impl OutputComparison {
    pub fn add(
        &mut self,
        reference: &[(String, RtTensor)],
        rewritten: &[(String, RtTensor)],
    ) -> Result<(), AdvisorError> {
        self.samples += 1;
        for ((name, ta), (_, tb)) in reference.iter().zip(rewritten) {
            let (x, y) = (ta.to_f32(), tb.to_f32());
            if x.len() != y.len() {
                return Err(qerr(format!("output `{name}` changed size")));
            }
            let c = cosine(&x, &y);
            self.cos_min = Some(self.cos_min.map_or(c, |m| m.min(c)));
            self.cos_sum += c;
            self.cos_n += 1;
            for (&p, &q) in x.iter().zip(&y) {
                self.max_err = self.max_err.max((p - q).abs() as f64);
                self.max_ref = self.max_ref.max(p.abs() as f64);
            }
            let classes = ta.shape.last().copied().unwrap_or(1);
            if classes >= 2 && x.len() % classes == 0 {
                for (ra, rb) in x.chunks(classes).zip(y.chunks(classes)) {
                    self.rows += 1;
                    self.agree += usize::from(argmax(ra) == argmax(rb));
                }
            }
        }
        Ok(())
    }

    pub fn finish(self) -> AccuracyProxy {
        AccuracyProxy {
            samples: self.samples,
            cosine_min: self.cos_min.unwrap_or(1.0),
            cosine_mean: if self.cos_n > 0 {
                self.cos_sum / self.cos_n as f64
            } else {
                1.0
            },
            max_abs_error: self.max_err,
            max_abs_reference: self.max_ref,
            top1_agreement: (self.rows > 0).then(|| self.agree as f64 / self.rows as f64),
        }
    }
}
