//! Re-timing of the calibration points a slow spell of the host caught: a point measured far
//! slower than the other points of its table predict for it is timed once more.

use std::time::Instant;

use super::{bench_model, grid, lower_median, CalibrateError, PlacementWatch, PointKey};
use crate::device::calibration::ClassTable;
use crate::device::DeviceProfile;

/// A point measured this many times slower than its table's other points predict for it is
/// timed once more. A slow spell of a shared host lasts tenths of a second to seconds, longer
/// than a point's runs, and the full grid fits one round on a slow machine: one int8 stem
/// timed in such a spell (1.7× its time a minute later) had carried ResNet-50's int8
/// prediction 15% off, and the spells of a Zen 4 guest slowed whole models by 1.3× (an L3
/// read by 1.3×, the FMA rate and the clock unchanged), under the 1.4× this was at first.
pub(super) const SLOW_OUTLIER: f64 = 1.25;

/// At most this share of the grid is timed again as slow outliers: a class whose points all
/// scatter is a fit problem, not a host's spell. A tenth had been taken whole (124 of 1240
/// points, with 12 s of the budget left).
const MOST_RETIMED: f64 = 0.25;

/// What re-timing a point needs.
pub(super) struct SlowRetiming<'a> {
    pub(super) models: &'a [grid::GridModel],
    pub(super) device: &'a DeviceProfile,
    pub(super) runs: usize,
    pub(super) started: Instant,
    pub(super) budget: std::time::Duration,
    /// What one point's timing is expected to take (the grid's last round's average), until
    /// a re-timing has measured it.
    pub(super) per_model: std::time::Duration,
    pub(super) placement: &'a mut PlacementWatch,
}

/// Times the slow outliers of every table ([`SLOW_OUTLIER`]) once more, the worst first, while
/// the budget lasts, and keeps the lower middle of all their timings (of two, the faster: a
/// spell only slows a kernel). A multi-thread re-timing with the cores placed apart before
/// or after it is not kept (it would describe another placement). Returns how many were
/// timed again.
pub(super) fn retime_slow_outliers(
    tables: &mut [ClassTable],
    table_keys: &[Vec<PointKey>],
    point_times: &mut std::collections::BTreeMap<PointKey, Vec<f64>>,
    retiming: SlowRetiming<'_>,
) -> Result<usize, CalibrateError> {
    let mut suspects: Vec<(f64, usize, usize)> = Vec::new();
    for (table_index, table) in tables.iter().enumerate() {
        for (point_index, excess) in table.slow_outliers(SLOW_OUTLIER) {
            suspects.push((excess, table_index, point_index));
        }
    }
    suspects.sort_by(|a, b| b.0.total_cmp(&a.0));
    let most = (point_times.len() as f64 * MOST_RETIMED).ceil() as usize;
    let mut retimed = 0;
    let mut longest = retiming.per_model;
    for (_, table_index, point_index) in suspects.into_iter().take(most) {
        if retiming.started.elapsed() + longest > retiming.budget {
            break;
        }
        let key = table_keys[table_index][point_index];
        let (threads, model_index, node_index) = key;
        let timed = Instant::now();
        let apart_before = retiming.placement.is_apart_now(threads);
        let report = bench_model(
            &retiming.models[model_index],
            retiming.device,
            threads,
            retiming.runs,
        )?;
        let apart_after = retiming.placement.is_apart_now(threads);
        longest = longest.max(timed.elapsed());
        if apart_before || apart_after {
            continue;
        }
        let Some(op) = report.ops.iter().find(|op| op.node_index == node_index) else {
            continue;
        };
        let times = point_times.entry(key).or_default();
        times.push(op.measured_s);
        times.sort_by(f64::total_cmp);
        tables[table_index].points[point_index].measured_s = lower_median(times);
        retimed += 1;
    }
    Ok(retimed)
}
