//! `roofline calibrate --from-profile`: the efficiency tables fitted to another runtime's
//! measured node times instead of the tool's own kernels, so `analyze` predicts that runtime on
//! other models. The input is each profiled model's analysis with its profile joined
//! (`analysis::measured::join`); nothing runs here. Every joined op that a kernel class covers
//! is a point of that class: its features from the analysis, its bound the roofline time on the
//! device, its measured time the profile's median. The tables, their leave-one-out error and
//! the lookup are those of the grid calibration (`device::calibration`).
//!
//! A runtime's node time covers what it fused into that node: a profile of the original graph
//! charges a Conv with the BatchNormalization and Relu the runtime folded into it, while the
//! analysis bounds the Conv alone. Profiling and analysing the graph the runtime saved after
//! its rewrites (`scripts/ort_profile.py --optimized-model`) keeps the two one for one.

use std::time::SystemTime;

use crate::analysis::{Analysis, NodeStatus};
use crate::device::calibration::{
    Calibration, CalibrationPoint, ClassTable, KernelClass, NEIGHBOURS,
};

/// One profiled model: its name for the points' labels and its joined analysis.
pub struct ProfiledModel<'a> {
    pub model: &'a str,
    pub analysis: &'a Analysis,
}

#[derive(Debug, thiserror::Error)]
pub enum FromProfileError {
    #[error("no profile given")]
    NoProfiles,
    #[error(
        "{model}: no node of the profile `{profile}` matched a costed op of the model by name \
         ({profile_nodes} profile nodes, e.g. `{example}`); profile the graph the runtime ran \
         (scripts/ort_profile.py --optimized-model) and calibrate on that graph"
    )]
    NothingMatched {
        model: String,
        profile: String,
        profile_nodes: usize,
        example: String,
    },
    #[error("{0}: no runtime profile was joined to its analysis")]
    NotJoined(String),
}

/// The measured points of one analysis: joined, costed ops of a kernel class with a positive
/// bound and a positive measured time (a runtime states whole microseconds, so the quickest
/// ops read 0 and say nothing about their efficiency).
fn points(model: &str, analysis: &Analysis) -> Vec<(KernelClass, CalibrationPoint)> {
    analysis
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Costed && n.predicted_s > 0.0)
        .filter_map(|n| {
            let measured_s = n.measured_s.filter(|&m| m > 0.0)?;
            let class = n.kernel_class?;
            let features = n.features?;
            Some((
                class,
                CalibrationPoint {
                    shape: format!("{model}: {} ({})", n.name, n.op_type),
                    features,
                    bound_s: n.predicted_s,
                    measured_s,
                    op_type: n.calibration_op_type(),
                },
            ))
        })
        .collect()
}

/// Points of one class and op type with identical features (the repeated blocks of a network)
/// become one point at their median measured time: the lookup takes an exact match's ratio as
/// it is, so twins would otherwise answer for one another in the leave-one-out error.
fn merge_twins(mut points: Vec<CalibrationPoint>) -> Vec<CalibrationPoint> {
    // Every feature, whatever the features are, and the op type: a Relu and a Sigmoid of one
    // size are not twins.
    let key = |p: &CalibrationPoint| {
        (
            p.op_type.clone(),
            serde_json::to_string(&p.features).unwrap_or_default(),
            p.bound_s.to_bits(),
        )
    };
    points.sort_by_key(key);
    let mut merged: Vec<CalibrationPoint> = Vec::new();
    let mut group: Vec<CalibrationPoint> = Vec::new();
    let mut flush = |group: &mut Vec<CalibrationPoint>| {
        if group.is_empty() {
            return;
        }
        let mut times: Vec<f64> = group.iter().map(|p| p.measured_s).collect();
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let median = if n % 2 == 1 {
            times[n / 2]
        } else {
            (times[n / 2 - 1] + times[n / 2]) / 2.0
        };
        let mut point = group[0].clone();
        if n > 1 {
            point.shape = format!("{} (+{} of the same shape)", point.shape, n - 1);
        }
        point.measured_s = median;
        merged.push(point);
        group.clear();
    };
    for point in points {
        if group.last().is_some_and(|last| key(last) != key(&point)) {
            flush(&mut group);
        }
        group.push(point);
    }
    flush(&mut group);
    merged
}

/// Bound under which an op counts as having nothing to do: its measured time is the runtime's
/// fixed per-op cost.
const IDLE_BOUND_S: f64 = 1e-6;

/// Ops with an idle bound needed before a fixed cost is fitted.
const MIN_IDLE_OPS: usize = 5;

/// The runtime's fixed per-op cost: the 10th percentile of the measured times of the ops whose
/// bound is under [`IDLE_BOUND_S`] (an element-wise op of a few hundred elements, a tiny
/// pool), 0 with fewer than [`MIN_IDLE_OPS`] of them. onnxruntime 1.32 on one thread: 2-3 µs
/// (its quickest nodes read 2 µs, half of those ops 3-4 µs). A low percentile rather than the
/// minimum, which one lucky node would set. Without it the PP-OCR orientation classifier (179
/// nodes, most of them a few µs) was predicted at twice its measured time from the ratios of
/// the larger ops of the other half.
fn fixed_cost_s<'a>(points: impl Iterator<Item = &'a CalibrationPoint>) -> f64 {
    let mut idle: Vec<f64> = points
        .filter(|p| p.bound_s < IDLE_BOUND_S)
        .map(|p| p.measured_s)
        .collect();
    if idle.len() < MIN_IDLE_OPS {
        return 0.0;
    }
    idle.sort_by(f64::total_cmp);
    idle[(idle.len() - 1) / 10]
}

/// Fits the tables of `threads` (the runtime's intra-op thread count) to the joined profiles.
/// `wall_time_s` is what loading and analysing took, for the record.
pub fn fit(
    models: &[ProfiledModel<'_>],
    threads: u32,
    wall_time_s: f64,
) -> Result<Calibration, FromProfileError> {
    let first = models.first().ok_or(FromProfileError::NoProfiles)?;
    let first_info = first
        .analysis
        .measured
        .as_ref()
        .ok_or_else(|| FromProfileError::NotJoined(first.model.to_string()))?;
    let mut by_class: Vec<(KernelClass, Vec<CalibrationPoint>)> = Vec::new();
    let mut sources = Vec::new();
    for profiled in models {
        let info = profiled
            .analysis
            .measured
            .as_ref()
            .ok_or_else(|| FromProfileError::NotJoined(profiled.model.to_string()))?;
        let found = points(profiled.model, profiled.analysis);
        if found.is_empty() {
            return Err(FromProfileError::NothingMatched {
                model: profiled.model.to_string(),
                profile: info.source.clone(),
                profile_nodes: info.profile_nodes,
                example: info
                    .unmatched_profile_names
                    .first()
                    .cloned()
                    .unwrap_or_default(),
            });
        }
        sources.push(format!(
            "{} ({}: {} of {} profile nodes matched, {} ops timed)",
            info.source,
            profiled.model,
            info.matched_nodes,
            info.profile_nodes,
            found.len()
        ));
        for (class, point) in found {
            match by_class.iter_mut().find(|(c, _)| *c == class) {
                Some((_, list)) => list.push(point),
                None => by_class.push((class, vec![point])),
            }
        }
    }
    let fixed_s = fixed_cost_s(by_class.iter().flat_map(|(_, points)| points));
    let mut tables: Vec<ClassTable> = by_class
        .into_iter()
        .map(|(class, points)| {
            let mut table = ClassTable {
                class,
                threads,
                points: merge_twins(points),
                fit_error: None,
                fixed_s,
            };
            table.fit_error = table.leave_one_out();
            table
        })
        .collect();
    tables.sort_by_key(|t| (t.class, t.threads));
    let runtime = match &first_info.runtime_version {
        Some(version) => format!("{} {version}", first_info.runtime),
        None => first_info.runtime.clone(),
    };
    Ok(Calibration {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        measured_at: crate::probe::rfc3339_utc(SystemTime::now()),
        mode: first_info.runtime.clone(),
        wall_time_s,
        method: format!(
            "{runtime} node times on {threads} intra-op thread(s), each the median over the \
             profile's runs, from {} profile(s): {}; ops of one class with the same shape \
             merged at their median; an op's expected time is the runtime's fixed per-op \
             cost ({:.2} µs: the 10th percentile of the ops whose bound is under 1 µs) + its \
             roofline bound × (measured − fixed cost)/bound of the {NEIGHBOURS} nearest \
             profiled ops of its kernel class, and of its op type where the class has some \
             (depthwise convolutions by kernel size; inverse squared distance in log2 of \
             work, bytes, weight bytes and output elements, averaged in log space)",
            models.len(),
            sources.join("; "),
            fixed_s * 1e6
        ),
        tables,
        // The profiles come from elsewhere: their threads' placement is unknown.
        exchange: None,
        warnings: Vec::new(),
        handoff: Vec::new(),
        clock_hz: None,
        fma_gflops: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::measured::{join, parse_ort_profile};

    fn tinycnn() -> Analysis {
        crate::builtin::analyze_on_catalog(
            "builtin:tinycnn",
            "rtx2080ti",
            crate::device::Precision::Fp32,
        )
    }

    /// One run of tinycnn's nodes at `us` microseconds each, plus a node it does not have.
    fn profile(times: &[(&str, u32)]) -> String {
        let mut events =
            vec![r#"{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100000}"#.to_string()];
        for (i, (name, us)) in times.iter().enumerate() {
            events.push(format!(
                r#"{{"cat": "Node", "name": "{name}_kernel_time", "ts": {}, "dur": {us}}}"#,
                i * 10
            ));
        }
        format!("[{}]", events.join(","))
    }

    #[test]
    fn joined_ops_land_in_their_class_tables() {
        let mut analysis = tinycnn();
        let text = profile(&[
            ("Conv_0", 50),
            ("Relu_1", 4),
            ("MaxPool_2", 6),
            ("Conv_3", 80),
            ("Gemm_8", 9),
            // Timed 0 µs: no point. Not in the model: no point.
            ("GlobalAveragePool_6", 0),
            ("reorder_nchwc", 30),
        ]);
        join(&mut analysis, &parse_ort_profile(&text).unwrap(), "p.json");
        let calibration = fit(
            &[ProfiledModel {
                model: "builtin:tinycnn",
                analysis: &analysis,
            }],
            1,
            0.5,
        )
        .unwrap();
        assert_eq!(calibration.mode, "onnxruntime");
        assert!(
            calibration.method.contains("p.json"),
            "{}",
            calibration.method
        );
        let classes: Vec<(KernelClass, usize)> = calibration
            .tables
            .iter()
            .map(|t| (t.class, t.points.len()))
            .collect();
        assert_eq!(
            classes,
            [
                (KernelClass::Conv, 2),
                (KernelClass::Gemm, 1),
                (KernelClass::Elementwise, 1),
                (KernelClass::Pool, 1),
            ]
        );
        assert!(calibration.tables.iter().all(|t| t.threads == 1));
        let conv = &calibration.tables[0];
        assert!(
            conv.fit_error.is_some(),
            "two points: a leave-one-out error"
        );
        let conv0 = analysis.nodes.iter().find(|n| n.name == "Conv_0").unwrap();
        let point = conv
            .points
            .iter()
            .find(|p| p.shape.contains("Conv_0"))
            .unwrap();
        assert_eq!(point.bound_s, conv0.predicted_s);
        assert!((point.measured_s - 50e-6).abs() < 1e-15);
        calibration.validate().unwrap();
    }

    #[test]
    fn a_profile_of_another_graph_is_refused_by_name() {
        let mut analysis = tinycnn();
        let text = profile(&[("r2_nchwc", 50), ("r3_nchwc", 5)]);
        join(&mut analysis, &parse_ort_profile(&text).unwrap(), "p.json");
        let error = fit(
            &[ProfiledModel {
                model: "m.onnx",
                analysis: &analysis,
            }],
            1,
            0.0,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("r2_nchwc") && error.contains("m.onnx"),
            "{error}"
        );
    }

    #[test]
    fn the_fixed_cost_is_a_low_percentile_of_the_idle_ops() {
        let at = |bound_s: f64, measured_s: f64| CalibrationPoint {
            shape: "p".into(),
            features: crate::device::calibration::ShapeFeatures::new(1, 1, 0, 1),
            bound_s,
            measured_s,
            op_type: "Relu".into(),
        };
        // Ten idle ops (2-11 µs) and a large one: the 10th percentile of the idle ones.
        let mut points: Vec<CalibrationPoint> =
            (2..12).map(|us| at(1e-7, us as f64 * 1e-6)).collect();
        points.push(at(1e-3, 1e-6));
        assert_eq!(fixed_cost_s(points.iter()), 2e-6);
        points.reverse();
        assert_eq!(fixed_cost_s(points.iter()), 2e-6);
        // Too few idle ops to tell a fixed cost from noise.
        assert_eq!(fixed_cost_s(points[..4].iter()), 0.0);
    }

    #[test]
    fn twins_merge_at_their_median() {
        let base = CalibrationPoint {
            shape: "a".into(),
            features: crate::device::calibration::ShapeFeatures::new(1 << 20, 1 << 16, 0, 64),
            bound_s: 1e-3,
            measured_s: 2e-3,
            op_type: "Conv".into(),
        };
        let mut other = base.clone();
        other.measured_s = 4e-3;
        let mut third = base.clone();
        third.measured_s = 3e-3;
        let mut distinct = base.clone();
        distinct.bound_s = 2e-3;
        let mut other_type = base.clone();
        other_type.op_type = "ConvTranspose".into();
        let merged = merge_twins(vec![base, other, distinct, third, other_type]);
        assert_eq!(merged.len(), 3);
        let twin = merged.iter().find(|p| p.bound_s == 1e-3).unwrap();
        assert_eq!(twin.measured_s, 3e-3);
        assert!(twin.shape.contains("+2"), "{}", twin.shape);
    }
}
