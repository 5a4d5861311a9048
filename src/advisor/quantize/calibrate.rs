//! Calibration: the calibration inputs (random, or the .npy files of `--calibration DIR`), the
//! instrumented fp32 runs that observe every quantized op's input, and the activation ranges
//! (min/max or percentiles, widened to contain 0) with their affine u8 parameters.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::qerr;
use crate::advisor::{AdvisorError, PassContext};
use crate::analysis::graph::{Graph, ValueId};
use crate::analysis::{self, AnalyzeOptions};
use crate::exec::{self, PlanOptions, RtData, RtTensor};

/// Values kept per observed tensor and sample for the percentile method.
const SAMPLE_CAP: usize = 1 << 16;
/// The percentile method's range: [0.01 %, 99.99 %].
const PERCENTILE: f64 = 0.9999;

/// How activation ranges are derived from the calibration runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CalibrationMethod {
    #[default]
    MinMax,
    Percentile,
}

impl std::str::FromStr for CalibrationMethod {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "minmax" | "min-max" => Ok(CalibrationMethod::MinMax),
            "percentile" => Ok(CalibrationMethod::Percentile),
            _ => Err(format!(
                "unknown calibration method `{text}` (minmax or percentile)"
            )),
        }
    }
}

impl CalibrationMethod {
    pub fn name(self) -> &'static str {
        match self {
            CalibrationMethod::MinMax => "min-max",
            CalibrationMethod::Percentile => "percentile 99.99%",
        }
    }
}

/// Per-tensor statistics over the calibration runs.
#[derive(Clone, Debug, Default)]
pub(super) struct Stats {
    min: f32,
    max: f32,
    seen: bool,
    samples: Vec<f32>,
}

impl Stats {
    fn observe(&mut self, data: &[f32], keep: bool) {
        for &v in data {
            if v.is_finite() {
                if !self.seen {
                    self.min = v;
                    self.max = v;
                    self.seen = true;
                }
                self.min = self.min.min(v);
                self.max = self.max.max(v);
            }
        }
        if keep {
            let step = data.len().div_ceil(SAMPLE_CAP).max(1);
            self.samples
                .extend(data.iter().step_by(step).copied().filter(|v| v.is_finite()));
        }
    }

    /// (lo, hi) containing 0.
    pub(super) fn range(&mut self, method: CalibrationMethod) -> (f32, f32) {
        let (mut lo, mut hi) = (self.min, self.max);
        if method == CalibrationMethod::Percentile && self.samples.len() > 100 {
            let n = self.samples.len();
            let at = |s: &mut Vec<f32>, q: f64| -> f32 {
                let i = ((n - 1) as f64 * q).round() as usize;
                *s.select_nth_unstable_by(i, f32::total_cmp).1
            };
            lo = at(&mut self.samples, 1.0 - PERCENTILE);
            hi = at(&mut self.samples, PERCENTILE);
        }
        (lo.min(0.0), hi.max(0.0))
    }
}

/// Affine u8 parameters of a range containing 0: (scale, zero point).
pub fn affine_params(lo: f32, hi: f32) -> (f32, i32) {
    let span = (hi - lo).max(1e-8);
    let scale = span / 255.0;
    let zp = (-lo / scale).round().clamp(0.0, 255.0) as i32;
    (scale, zp)
}

/// Loads the calibration samples of `dir` for a plan's inputs.
fn load_dir(
    dir: &Path,
    inputs: &[(String, Vec<usize>, bool)],
) -> Result<Vec<HashMap<String, RtTensor>>, AdvisorError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| qerr(format!("--calibration {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let check = |name: &str, t: RtTensor, shape: &[usize], integer: bool, path: &Path| {
        if t.shape != shape {
            return Err(qerr(format!(
                "{}: shape {:?} given, input `{name}` has {:?}",
                path.display(),
                t.shape,
                shape
            )));
        }
        Ok(match (integer, t.data) {
            (false, RtData::I64(v)) => RtTensor {
                shape: t.shape,
                data: RtData::F32(v.iter().map(|&x| x as f32).collect()),
            },
            (true, RtData::F32(v)) => RtTensor {
                shape: t.shape,
                data: RtData::I64(v.iter().map(|&x| x as i64).collect()),
            },
            (_, data) => RtTensor {
                shape: t.shape,
                data,
            },
        })
    };
    let mut samples = Vec::new();
    if inputs.len() == 1 {
        let (name, shape, integer) = &inputs[0];
        for path in entries
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        {
            let t = exec::npy::read_npy(path).map_err(qerr)?;
            let t = check(name, t, shape, *integer, path)?;
            samples.push(HashMap::from([(name.clone(), t)]));
        }
    } else {
        for sub in entries.iter().filter(|p| p.is_dir()) {
            let mut sample = HashMap::new();
            for (name, shape, integer) in inputs {
                let safe: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "._-".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let path = sub.join(format!("{safe}.npy"));
                let t = exec::npy::read_npy(&path).map_err(qerr)?;
                sample.insert(name.clone(), check(name, t, shape, *integer, &path)?);
            }
            samples.push(sample);
        }
    }
    if samples.is_empty() {
        return Err(qerr(format!(
            "--calibration {}: no samples (expected .npy files, or one directory per sample with <input>.npy)",
            dir.display()
        )));
    }
    Ok(samples)
}

/// The calibration inputs of this advise call (loaded or generated once).
pub fn calibration_inputs(
    ctx: &PassContext,
    plan: &exec::Plan,
) -> Result<Vec<HashMap<String, RtTensor>>, AdvisorError> {
    if let Some(inputs) = &ctx.calibration.borrow().inputs {
        return Ok(inputs.clone());
    }
    let inputs = match &ctx.options.calibration_dir {
        Some(dir) => load_dir(dir, &plan.inputs())?,
        None => (0..ctx.options.calibration_samples.max(1))
            .map(|s| crate::bench::random_inputs(plan, 1000 + s as u64))
            .collect(),
    };
    let mut q = ctx.calibration.borrow_mut();
    q.description = match &ctx.options.calibration_dir {
        Some(d) => format!("{} input(s) from {}", inputs.len(), d.display()),
        None => format!("{} random input(s)", inputs.len()),
    };
    // The activation ranges only matter to int8; the inputs also serve the accuracy proxy.
    if ctx.options.apply.iter().any(|p| p == "int8") {
        q.description += &format!(", {}", ctx.options.calibration_method.name());
    }
    q.inputs = Some(inputs.clone());
    Ok(inputs)
}

/// Plans `graph` on the executor (inferred again first) with `threads` threads.
pub fn plan_of(
    graph: &Graph,
    analyze: &AnalyzeOptions,
    threads: usize,
) -> Result<exec::Plan, AdvisorError> {
    let mut graph = graph.clone();
    let (order, states, _) = analysis::prepare_graph(&mut graph, &analyze.bindings)?;
    Ok(exec::build_plan(
        &graph,
        &order,
        &states,
        &PlanOptions {
            threads: threads.max(1),
            ..PlanOptions::default()
        },
    )?)
}

/// Runs `graph` with `values` as extra outputs on the calibration inputs; statistics per value.
pub(super) fn calibrate(
    graph: &Graph,
    values: &[ValueId],
    ctx: &PassContext,
) -> Result<HashMap<ValueId, Stats>, AdvisorError> {
    let mut g = graph.clone();
    for &v in values {
        if !g.outputs.contains(&v) {
            g.outputs.push(v);
        }
    }
    let plan = plan_of(&g, ctx.analyze, ctx.options.threads)?;
    let inputs = calibration_inputs(ctx, &plan)?;
    let keep = ctx.options.calibration_method == CalibrationMethod::Percentile;
    let names: HashMap<String, ValueId> = values
        .iter()
        .map(|&v| (g.values[v].name.clone(), v))
        .collect();
    let mut stats: HashMap<ValueId, Stats> = HashMap::new();
    let mut ws = plan.workspace();
    for sample in &inputs {
        for (name, tensor) in plan.run(&mut ws, sample, None)? {
            if let (Some(&v), Some(data)) = (names.get(&name), tensor.as_f32()) {
                stats.entry(v).or_default().observe(data, keep);
            }
        }
    }
    Ok(stats)
}
