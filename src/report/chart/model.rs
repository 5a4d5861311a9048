//! The chart in data coordinates, with no SVG in it: where each op lands (intensity in FLOP/B,
//! rate in FLOP/s), the ceilings of the device (compute lines merged by peak, memory levels),
//! the ridge points, the axis ranges that fit a set of analyses and their overlays, and the
//! extent of every ceiling inside a plotted window. The drawing layers map these numbers to
//! pixels; the unit tests below check the numbers.

use crate::analysis::model::DeviceInfo;
use crate::analysis::{Analysis, NodeAnalysis, NodeStatus};
use crate::device::{MemoryLevel, Precision};
use crate::report::markup::{si3, si_unit};

use super::{ChartSeries, PointHeight};

/// Where an op lands on the chart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpPlacement {
    /// Drawn at (intensity FLOP/B, rate FLOP/s).
    Plotted { intensity: f64, flops_per_s: f64 },
    /// Costed with an intensity, but zero work (pure data movement such as Transpose) or a zero
    /// time: no position on a log axis, so it is drawn in the legend's strip.
    OffScale,
    /// Not drawn as a dot: a view or folded op, or one that moved no bytes.
    Hidden,
    /// Not costed: marked in the legend's strip with a cross.
    NotCosted,
}

/// Where `node` goes on the chart.
pub fn op_placement(node: &NodeAnalysis, height: PointHeight) -> OpPlacement {
    match node.status {
        NodeStatus::NotCosted => return OpPlacement::NotCosted,
        NodeStatus::View | NodeStatus::Folded => return OpPlacement::Hidden,
        NodeStatus::Costed => {}
    }
    let Some(intensity) = node.intensity else {
        return OpPlacement::Hidden;
    };
    let flops_per_s = match height {
        PointHeight::PredictedRate if node.predicted_s > 0.0 => {
            (node.flops + node.transcendental) as f64 / node.predicted_s
        }
        PointHeight::PredictedRate => 0.0,
        PointHeight::Attainable => node.attainable_flops,
    };
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if positive(intensity) && positive(flops_per_s) {
        OpPlacement::Plotted {
            intensity,
            flops_per_s,
        }
    } else {
        OpPlacement::OffScale
    }
}

/// A compute ceiling as drawn: precisions with the same peak share one line.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeLine {
    pub precisions: Vec<Precision>,
    pub flops_per_s: f64,
    /// The precision the analysis ran at is on this line.
    pub active: bool,
}

impl ComputeLine {
    /// `fp16/bf16`: the precisions of the line.
    pub fn name(&self) -> String {
        let names: Vec<&str> = self.precisions.iter().map(|p| p.name()).collect();
        names.join("/")
    }

    pub fn unit(&self) -> &'static str {
        // Integer ceilings count operations, not floating-point ones.
        if self.precisions.iter().all(|p| *p == Precision::Int8) {
            "OP/s"
        } else {
            "FLOP/s"
        }
    }
}

/// A memory ceiling as drawn (one per level).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryLine {
    pub level: MemoryLevel,
    pub bytes_per_s: f64,
}

/// A ridge point worth marking: where a compute ceiling meets a memory one.
#[derive(Clone, Debug, PartialEq)]
pub struct Ridge {
    /// FLOP/byte.
    pub intensity: f64,
    pub flops_per_s: f64,
    pub label: String,
}

/// A point or segment end in data coordinates: (intensity FLOP/B, FLOP/s).
pub type DataPoint = (f64, f64);

/// The plotted window: log10 of the data at the frame's edges (the drawing's own range, a
/// hair wider than the decades of [`ChartScale`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub log_x: (f64, f64),
    pub log_y: (f64, f64),
}

impl Window {
    /// Intensity at the left and right edges.
    pub fn x_range(&self) -> (f64, f64) {
        (10f64.powf(self.log_x.0), 10f64.powf(self.log_x.1))
    }

    /// FLOP/s at the bottom and top edges.
    pub fn y_range(&self) -> (f64, f64) {
        (10f64.powf(self.log_y.0), 10f64.powf(self.log_y.1))
    }

    /// The part of the memory roof `y = x × bytes_per_s` left of `x_end` inside the window.
    pub fn clip_memory_roof(&self, bytes_per_s: f64, x_end: f64) -> Option<(DataPoint, DataPoint)> {
        let (x_lo, x_hi) = self.x_range();
        let (y_lo, y_hi) = self.y_range();
        let start = x_lo.max(y_lo / bytes_per_s);
        let end = x_end.min(x_hi).min(y_hi / bytes_per_s);
        (start < end).then_some(((start, start * bytes_per_s), (end, end * bytes_per_s)))
    }
}

/// Which ceiling bounds a point, read off the roof the analysis used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ceiling {
    /// Left of the ridge: the DRAM bandwidth times the intensity.
    Memory(MemoryLevel),
    /// Right of the ridge: the compute peak of this precision.
    Compute(Precision),
}

/// Every ceiling of a device as the chart draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceilings {
    /// Compute lines, highest first.
    pub compute: Vec<ComputeLine>,
    /// Memory lines, fastest level (L1) first, DRAM last.
    pub memory: Vec<MemoryLine>,
    /// The ridge points worth marking, the analysis' own first.
    pub ridges: Vec<Ridge>,
    /// The roof the analysis used: its peak, DRAM bandwidth, ridge and precision. The line is
    /// drawn at the read rate: a device that measured writes apart charges an op's written
    /// bytes at the write rate (see `analysis::roofline`), so an op with slow writes sits
    /// below the line, at the attainable rate the analysis gave it.
    pub peak_flops: f64,
    pub dram_bandwidth: f64,
    pub ridge_point: f64,
    pub precision: Precision,
    /// The highest compute ceiling and the highest bandwidth (where lines start and end).
    pub top_compute: f64,
    pub top_bandwidth: f64,
}

impl Ceilings {
    pub fn of(device: &DeviceInfo) -> Ceilings {
        let compute = compute_lines(device);
        let memory = memory_lines(device);
        let ridges = ridge_points(device, &compute, &memory);
        let top_compute = compute
            .iter()
            .map(|c| c.flops_per_s)
            .fold(device.roof.peak_flops, f64::max);
        let top_bandwidth = memory
            .iter()
            .map(|m| m.bytes_per_s)
            .fold(device.roof.bandwidth_bytes_per_s, f64::max);
        Ceilings {
            compute,
            memory,
            ridges,
            peak_flops: device.roof.peak_flops,
            dram_bandwidth: device.roof.bandwidth_bytes_per_s,
            ridge_point: device.ridge_point,
            precision: device.precision,
            top_compute,
            top_bandwidth,
        }
    }

    /// The roof the analysis used at `intensity`: min(peak, intensity × DRAM bandwidth), and
    /// which ceiling that is (the memory one at the ridge itself).
    pub fn roof_at(&self, intensity: f64) -> (f64, Ceiling) {
        let memory = intensity * self.dram_bandwidth;
        if memory <= self.peak_flops {
            (memory, Ceiling::Memory(MemoryLevel::Dram))
        } else {
            (self.peak_flops, Ceiling::Compute(self.precision))
        }
    }

    /// Where a compute line is drawn, (from, to) in FLOP/B: from where it meets the fastest
    /// memory level, to the right edge, or for the analysis' own line to its ridge (right of it
    /// the roof takes over). `None` when nothing of it is left.
    pub fn compute_extent(&self, line: &ComputeLine, window: &Window) -> Option<(f64, f64)> {
        let x_hi = window.x_range().1;
        let x0 = line.flops_per_s / self.top_bandwidth;
        let x1 = if line.active {
            self.ridge_point.min(x_hi)
        } else {
            x_hi
        };
        if x0 >= x1 * (1.0 - 1e-9) {
            None
        } else {
            Some((x0, x1))
        }
    }

    /// Where a memory line is drawn: from the window's edge up to where it meets the highest
    /// compute ceiling.
    pub fn memory_extent(
        &self,
        line: &MemoryLine,
        window: &Window,
    ) -> Option<(DataPoint, DataPoint)> {
        window.clip_memory_roof(line.bytes_per_s, self.top_compute / line.bytes_per_s)
    }

    /// The DRAM roof above the analysis' own peak (it binds only higher precisions' peaks):
    /// from the ridge to the highest compute ceiling. `None` when no ceiling is higher.
    pub fn dram_extension(&self, window: &Window) -> Option<(DataPoint, DataPoint)> {
        let dram_bw = self.dram_bandwidth;
        if self.top_compute <= self.peak_flops * (1.0 + 1e-9) {
            return None;
        }
        let ((xa, _), (xb, yb)) = window.clip_memory_roof(dram_bw, self.top_compute / dram_bw)?;
        let xa = xa.max(self.ridge_point);
        (xa < xb).then_some(((xa, xa * dram_bw), (xb, yb)))
    }

    /// The roof the analysis used, min(peak, intensity × DRAM bandwidth): where it enters the
    /// window, its bend at the ridge (or the right edge), and its end at the right edge.
    pub fn roof_polyline(&self, window: &Window) -> Option<[DataPoint; 3]> {
        let dram_bw = self.dram_bandwidth;
        let ((xa, ya), _) = window.clip_memory_roof(dram_bw, self.ridge_point)?;
        let x_hi = window.x_range().1;
        let ridge_x = self.ridge_point.min(x_hi);
        Some([
            (xa, ya),
            (ridge_x, self.peak_flops.min(ridge_x * dram_bw)),
            (x_hi, self.peak_flops),
        ])
    }
}

fn compute_lines(device: &DeviceInfo) -> Vec<ComputeLine> {
    let mut lines: Vec<ComputeLine> = Vec::new();
    for ceiling in &device.compute_ceilings {
        if !(ceiling.flops_per_s.is_finite() && ceiling.flops_per_s > 0.0) {
            continue;
        }
        let active = ceiling.precision == device.precision;
        let same = lines.iter_mut().find(|line| {
            (line.flops_per_s - ceiling.flops_per_s).abs() <= 1e-9 * ceiling.flops_per_s
        });
        match same {
            Some(line) => {
                if !line.precisions.contains(&ceiling.precision) {
                    line.precisions.push(ceiling.precision);
                }
                line.active |= active;
            }
            None => lines.push(ComputeLine {
                precisions: vec![ceiling.precision],
                flops_per_s: ceiling.flops_per_s,
                active,
            }),
        }
    }
    lines.sort_by(|a, b| b.flops_per_s.total_cmp(&a.flops_per_s));
    lines
}

fn memory_lines(device: &DeviceInfo) -> Vec<MemoryLine> {
    let mut lines: Vec<MemoryLine> = device
        .memory_ceilings
        .iter()
        .filter(|m| m.bytes_per_s.is_finite() && m.bytes_per_s > 0.0)
        .map(|m| MemoryLine {
            level: m.level,
            bytes_per_s: m.bytes_per_s,
        })
        .collect();
    lines.sort_by_key(|m| m.level);
    lines.dedup_by_key(|m| m.level);
    lines
}

/// The ridge points worth marking: the analysis' own, every other compute line against DRAM,
/// and the analysis' peak against every cache level.
fn ridge_points(device: &DeviceInfo, compute: &[ComputeLine], memory: &[MemoryLine]) -> Vec<Ridge> {
    let mut ridges = Vec::new();
    let dram = memory.iter().find(|m| m.level == MemoryLevel::Dram);
    // The analysis' own ridge point, as it computed it (drawn even when the profile lists no
    // compute ceilings, as a hand-written one may).
    ridges.push(Ridge {
        intensity: device.ridge_point,
        flops_per_s: device.roof.peak_flops,
        label: format!("ridge {} FLOP/B", si3(device.ridge_point)),
    });
    for line in compute {
        if line.active {
            continue;
        } else if let Some(dram) = dram {
            // The other ceilings are named at their ridge: their lines are often too short
            // right of it for a second label.
            let x = line.flops_per_s / dram.bytes_per_s;
            ridges.push(Ridge {
                intensity: x,
                flops_per_s: line.flops_per_s,
                label: format!(
                    "{} {} · ridge {}",
                    line.name(),
                    si_unit(line.flops_per_s, line.unit()),
                    si3(x)
                ),
            });
        }
    }
    for cache in memory.iter().filter(|m| m.level != MemoryLevel::Dram) {
        let x = device.roof.peak_flops / cache.bytes_per_s;
        ridges.push(Ridge {
            intensity: x,
            flops_per_s: device.roof.peak_flops,
            label: format!("{} ridge {}", cache.level.name(), si3(x)),
        });
    }
    ridges.retain(|r| {
        r.intensity.is_finite()
            && r.intensity > 0.0
            && r.flops_per_s.is_finite()
            && r.flops_per_s > 0.0
    });
    ridges
}

/// Axis ranges and dot scale; share one between charts that should compare by eye.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartScale {
    /// Intensity axis range in FLOP/byte (decade-aligned).
    pub intensity: (f64, f64),
    /// Performance axis range in FLOP/s (decade-aligned).
    pub flops_per_s: (f64, f64),
    /// The time share drawn with the largest dot radius.
    pub largest_share: f64,
    /// Op types in colour order (for [`super::ColorBy::OpType`]).
    pub op_type_order: Vec<String>,
}

fn decade_floor(value: f64) -> f64 {
    10f64.powf(value.log10().floor())
}

fn decade_ceil(value: f64) -> f64 {
    10f64.powf(value.log10().ceil())
}

/// Axis ranges and dot scale that fit every analysis (its ops placed by `height`, its ridge
/// points and ceilings) and the points of `overlays`: whole decades with half a decade of room
/// around the data, at least three decades on each axis, room above the highest ceiling for
/// its label. `None` when there is nothing to place or no positive ceiling.
pub fn fit_scale(
    analyses: &[Analysis],
    height: PointHeight,
    overlays: &[ChartSeries],
) -> Option<ChartScale> {
    let mut xs: Vec<f64> = Vec::new();
    let mut ys: Vec<f64> = Vec::new();
    let mut ceiling_top: f64 = 0.0;
    let mut largest_share: f64 = 0.0;
    for analysis in analyses {
        for node in &analysis.nodes {
            if let OpPlacement::Plotted {
                intensity,
                flops_per_s,
            } = op_placement(node, height)
            {
                xs.push(intensity);
                ys.push(flops_per_s);
                largest_share = largest_share.max(node.time_share);
            }
        }
        let ceilings = Ceilings::of(&analysis.device);
        for ridge in &ceilings.ridges {
            xs.push(ridge.intensity);
            ys.push(ridge.flops_per_s);
        }
        for line in &ceilings.compute {
            ceiling_top = ceiling_top.max(line.flops_per_s);
        }
        ceiling_top = ceiling_top.max(analysis.device.roof.peak_flops);
    }
    for series in overlays {
        for p in &series.points {
            if p.intensity > 0.0 && p.flops_per_s > 0.0 && p.intensity.is_finite() {
                xs.push(p.intensity);
                ys.push(p.flops_per_s);
            }
        }
    }
    let finite_positive = |v: &&f64| v.is_finite() && **v > 0.0;
    let x_min = xs
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::min)?;
    let x_max = xs
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::max)?;
    if !(ceiling_top.is_finite() && ceiling_top > 0.0) {
        return None;
    }
    let y_min = ys
        .iter()
        .filter(finite_positive)
        .copied()
        .reduce(f64::min)
        .unwrap_or(ceiling_top / 1e3);
    // Half a decade of room around the data; the top leaves space for the ceiling labels.
    let mut x_lo = decade_floor(x_min / 2.0);
    let mut x_hi = decade_ceil(x_max * 2.0);
    if x_hi / x_lo < 1e3 {
        x_lo = x_lo.min(decade_floor(x_hi / 1e3));
    }
    if x_hi <= x_lo {
        x_hi = x_lo * 10.0;
    }
    let y_hi = decade_ceil(ceiling_top * 1.6);
    let mut y_lo = decade_floor(y_min / 2.0);
    if y_hi / y_lo < 1e3 {
        y_lo = decade_floor(y_hi / 1e3);
    }
    let mut op_type_order: Vec<String> = Vec::new();
    for analysis in analyses {
        for share in &analysis.summary.by_op_type {
            if !op_type_order.contains(&share.op_type) {
                op_type_order.push(share.op_type.clone());
            }
        }
    }
    Some(ChartScale {
        intensity: (x_lo, x_hi),
        flops_per_s: (y_lo, y_hi),
        largest_share: if largest_share > 0.0 {
            largest_share
        } else {
            1.0
        },
        op_type_order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Bound;

    fn analyse(device: &str, precision: Precision) -> Analysis {
        crate::builtin::analyze_on_catalog("builtin:tinycnn", device, precision)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    #[test]
    fn equal_peaks_share_one_line_and_int8_counts_operations() {
        // RTX 3090: fp32 = tf32 = 35.6 TFLOP/s, fp16 = bf16 = 71 TFLOP/s.
        let a = analyse("rtx3090", Precision::Fp32);
        let ceilings = Ceilings::of(&a.device);
        let names: Vec<String> = ceilings.compute.iter().map(|l| l.name()).collect();
        assert!(names.contains(&"fp32/tf32".to_string()), "{names:?}");
        assert!(names.contains(&"fp16/bf16".to_string()), "{names:?}");
        let active: Vec<&ComputeLine> = ceilings.compute.iter().filter(|l| l.active).collect();
        assert_eq!(active.len(), 1);
        assert_eq!(active[0].name(), "fp32/tf32");
        // Highest first; the top one bounds where lines end.
        assert!(ceilings
            .compute
            .windows(2)
            .all(|w| w[0].flops_per_s >= w[1].flops_per_s));
        assert_eq!(ceilings.top_compute, ceilings.compute[0].flops_per_s);
        let int8 = ceilings
            .compute
            .iter()
            .find(|l| l.precisions == [Precision::Int8])
            .unwrap();
        assert_eq!(int8.unit(), "OP/s");
        assert_eq!(active[0].unit(), "FLOP/s");
    }

    #[test]
    fn ridge_points_are_peak_over_bandwidth() {
        let a = analyse("rtx2080ti", Precision::Fp32);
        let d = &a.device;
        let ceilings = Ceilings::of(d);
        // The analysis' own ridge first, at its peak.
        let own = &ceilings.ridges[0];
        assert_eq!(own.intensity, d.ridge_point);
        assert_eq!(own.flops_per_s, d.roof.peak_flops);
        assert!(close(
            d.ridge_point,
            d.roof.peak_flops / d.roof.bandwidth_bytes_per_s
        ));
        assert!(own.label.starts_with("ridge "), "{}", own.label);
        // Every other compute line meets DRAM at flops ÷ bandwidth; no cache ridges on a GPU
        // profile with DRAM only.
        let others: Vec<&ComputeLine> = ceilings.compute.iter().filter(|l| !l.active).collect();
        assert_eq!(ceilings.ridges.len(), 1 + others.len());
        for line in others {
            let ridge = ceilings
                .ridges
                .iter()
                .find(|r| r.flops_per_s == line.flops_per_s)
                .unwrap();
            assert!(close(
                ridge.intensity,
                line.flops_per_s / d.roof.bandwidth_bytes_per_s
            ));
            assert!(ridge.label.starts_with(&line.name()), "{}", ridge.label);
        }
    }

    #[test]
    fn cache_levels_add_a_ridge_each_at_the_analysis_peak() {
        let mut a = analyse("rtx2080ti", Precision::Fp32);
        let dram = a.device.roof.bandwidth_bytes_per_s;
        for (level, factor) in [(MemoryLevel::L2, 4.0), (MemoryLevel::L1, 10.0)] {
            a.device.memory_ceilings.push(crate::device::MemoryCeiling {
                level,
                bytes_per_s: dram * factor,
                ..a.device.memory_ceilings[0].clone()
            });
        }
        let ceilings = Ceilings::of(&a.device);
        let levels: Vec<MemoryLevel> = ceilings.memory.iter().map(|m| m.level).collect();
        assert_eq!(
            levels,
            [MemoryLevel::L1, MemoryLevel::L2, MemoryLevel::Dram],
            "fastest level first"
        );
        assert_eq!(ceilings.top_bandwidth, dram * 10.0);
        let l1 = ceilings
            .ridges
            .iter()
            .find(|r| r.label.starts_with("L1 ridge"))
            .unwrap();
        assert!(close(
            l1.intensity,
            a.device.roof.peak_flops / (dram * 10.0)
        ));
        assert_eq!(l1.flops_per_s, a.device.roof.peak_flops);
        // A thin compute line starts where it meets the fastest level.
        let window = Window {
            log_x: (-2.0, 4.0),
            log_y: (9.0, 15.0),
        };
        let active = ceilings.compute.iter().find(|l| l.active).unwrap();
        let (x0, x1) = ceilings.compute_extent(active, &window).unwrap();
        assert!(close(x0, active.flops_per_s / (dram * 10.0)));
        assert_eq!(
            x1, ceilings.ridge_point,
            "the analysis' own line ends at its ridge"
        );
    }

    #[test]
    fn a_point_sits_under_the_memory_roof_left_of_the_ridge_and_the_peak_right_of_it() {
        let a = analyse("rtx2080ti", Precision::Fp32);
        let ceilings = Ceilings::of(&a.device);
        let ridge = ceilings.ridge_point;
        let (low, under) = ceilings.roof_at(ridge / 10.0);
        assert_eq!(under, Ceiling::Memory(MemoryLevel::Dram));
        assert!(close(low, ridge / 10.0 * ceilings.dram_bandwidth));
        let (high, under) = ceilings.roof_at(ridge * 10.0);
        assert_eq!(under, Ceiling::Compute(Precision::Fp32));
        assert_eq!(high, ceilings.peak_flops);
        // Every plotted op sits on or under the roof at its intensity, under the ceiling its
        // bound names (overhead-bound ops sit lower still, under either).
        let mut seen = 0;
        for node in &a.nodes {
            let OpPlacement::Plotted {
                intensity,
                flops_per_s,
            } = op_placement(node, PointHeight::PredictedRate)
            else {
                continue;
            };
            seen += 1;
            let (roof, ceiling) = ceilings.roof_at(intensity);
            assert!(flops_per_s <= roof * (1.0 + 1e-9), "{}", node.name);
            match node.bound {
                Bound::Memory => assert_eq!(ceiling, Ceiling::Memory(MemoryLevel::Dram)),
                Bound::Compute => assert_eq!(ceiling, Ceiling::Compute(Precision::Fp32)),
                _ => {}
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn attainable_height_puts_every_op_on_the_roof() {
        let a = analyse("rtx2080ti", Precision::Fp32);
        let ceilings = Ceilings::of(&a.device);
        for node in &a.nodes {
            if let OpPlacement::Plotted {
                intensity,
                flops_per_s,
            } = op_placement(node, PointHeight::Attainable)
            {
                assert!(
                    close(flops_per_s, ceilings.roof_at(intensity).0),
                    "{}",
                    node.name
                );
            }
        }
    }

    #[test]
    fn scale_is_decade_aligned_and_holds_every_point_and_ridge() {
        let a = analyse("rtx2080ti", Precision::Fp32);
        let overlay = ChartSeries {
            name: "measured".into(),
            colour: super::super::Rgb(0, 0, 0),
            marker: super::super::SeriesMarker::Diamond,
            points: vec![super::super::SeriesPoint {
                op_index: None,
                intensity: 1e-4,
                flops_per_s: 3e6,
                label: None,
            }],
            connect_to_predicted: false,
        };
        for overlays in [Vec::new(), vec![overlay]] {
            let scale = fit_scale(
                std::slice::from_ref(&a),
                PointHeight::PredictedRate,
                &overlays,
            )
            .unwrap();
            let (x_lo, x_hi) = scale.intensity;
            let (y_lo, y_hi) = scale.flops_per_s;
            for v in [x_lo, x_hi, y_lo, y_hi] {
                assert!(close(v.log10(), v.log10().round()), "{v} is not a decade");
            }
            assert!(x_hi / x_lo >= 1e3 * (1.0 - 1e-9) && y_hi / y_lo >= 1e3 * (1.0 - 1e-9));
            // Room above the highest ceiling for its label.
            let ceilings = Ceilings::of(&a.device);
            assert!(y_hi >= ceilings.top_compute * 1.6);
            let inside = |x: f64, y: f64| x >= x_lo && x <= x_hi && y >= y_lo && y <= y_hi;
            for ridge in &ceilings.ridges {
                assert!(
                    inside(ridge.intensity, ridge.flops_per_s),
                    "{}",
                    ridge.label
                );
            }
            for node in &a.nodes {
                if let OpPlacement::Plotted {
                    intensity,
                    flops_per_s,
                } = op_placement(node, PointHeight::PredictedRate)
                {
                    assert!(inside(intensity, flops_per_s), "{}", node.name);
                }
            }
            for point in overlays.iter().flat_map(|s| &s.points) {
                assert!(inside(point.intensity, point.flops_per_s));
            }
            let largest = a.nodes.iter().map(|n| n.time_share).fold(0.0, f64::max);
            assert_eq!(scale.largest_share, largest);
            assert_eq!(scale.op_type_order[0], a.summary.by_op_type[0].op_type);
        }
    }

    #[test]
    fn the_roof_and_the_memory_lines_are_clipped_to_the_window() {
        let a = analyse("rtx2080ti", Precision::Fp32);
        let ceilings = Ceilings::of(&a.device);
        let window = Window {
            log_x: (-1.0, 3.0),
            log_y: (11.0, 14.0),
        };
        let (x_range, y_range) = (window.x_range(), window.y_range());
        let [start, bend, end] = ceilings.roof_polyline(&window).unwrap();
        // Enters where x × bandwidth reaches the bottom edge (or at the left edge).
        assert!(close(
            start.0,
            x_range.0.max(y_range.0 / ceilings.dram_bandwidth)
        ));
        assert!(close(start.1, start.0 * ceilings.dram_bandwidth));
        assert_eq!(
            bend,
            (
                ceilings.ridge_point,
                ceilings
                    .peak_flops
                    .min(ceilings.ridge_point * ceilings.dram_bandwidth)
            )
        );
        assert_eq!(end, (x_range.1, ceilings.peak_flops));
        // fp16 and int8 peaks above fp32: the DRAM roof goes on above the ridge, up to the
        // highest ceiling or the top edge.
        let ((xa, ya), (xb, yb)) = ceilings.dram_extension(&window).unwrap();
        assert_eq!(xa, ceilings.ridge_point);
        assert!(close(ya, xa * ceilings.dram_bandwidth));
        assert!(yb <= y_range.1 * (1.0 + 1e-9) && close(yb, xb * ceilings.dram_bandwidth));
        // Nothing of a memory roof is left when the window is entirely above it.
        let high = Window {
            log_x: (-3.0, -2.0),
            log_y: (14.0, 15.0),
        };
        assert!(high
            .clip_memory_roof(ceilings.dram_bandwidth, 1e9)
            .is_none());
        // An analysis at the highest precision has no higher ceiling to extend the roof to.
        let int8 = analyse("rtx2080ti", Precision::Int8);
        assert!(Ceilings::of(&int8.device).dram_extension(&window).is_none());
    }
}
