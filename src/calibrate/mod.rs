//! `roofline calibrate`: runs the tool's own kernels over a fixed grid of one-op models per
//! kernel class (`grid.rs`), at one thread and at every thread count asked, and stores what each
//! took against its roofline bound. The analysis then predicts an op's expected time as its
//! bound × the measured ratio of the nearest grid shapes of its class
//! (`device::calibration`). The grid never contains the model being predicted.

pub mod from_profile;
pub mod grid;
pub mod handoff;
mod retime;

use std::path::Path;
use std::time::{Instant, SystemTime};

use crate::analysis::{import, AnalyzeOptions, NodeStatus};
use crate::bench::{bench_graph, BenchError, BenchOptions, EXCHANGE_MOVED};
use crate::device::calibration::{
    key_precision, Calibration, CalibrationPoint, ClassTable, KernelClass,
};
use crate::device::probe_record::{ExchangeRecord, SHARED_CORE_BELOW};
use crate::device::DeviceProfile;
use retime::{retime_slow_outliers, SlowRetiming, SLOW_OUTLIER};

#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    pub quick: bool,
    /// Thread counts to calibrate (each gets its own tables).
    pub thread_counts: Vec<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("calibration model `{shape}`: {source}")]
    Model {
        shape: String,
        #[source]
        source: BenchError,
    },
    #[error("calibration model `{shape}`: {reason}")]
    Import { shape: String, reason: String },
}

/// Progress of a calibration run, one event per grid model.
pub struct Progress<'a> {
    pub completed: usize,
    pub total: usize,
    pub threads: usize,
    pub shape: &'a str,
}

/// A calibration point, the class its analysis gave it, and its measured time in each round.
type TimedPoint = (CalibrationPoint, KernelClass, Vec<f64>);

/// (threads, grid model, node) of a timed point.
type PointKey = (usize, usize, usize);

/// The multi-thread points whose bound is under 0.7× their 1-thread twin's (the roofline
/// expects them to scale: compute-bound, or a cache level that doubles with the cores) but
/// whose median time is at least 0.95× the twin's. Session 24's first calibration (Zen 4, 2
/// vCPUs) had every 2-thread MatMul with 16 or more rows at its 1-thread time in all three
/// rounds (128×768·768×768: 1414 against 1492 µs) while the Gemm points timed between them
/// scaled, and a re-run measured 919 µs: BERT at 2 threads was then expected 59% slow.
fn stalled_points(
    points: &std::collections::BTreeMap<PointKey, TimedPoint>,
) -> std::collections::BTreeSet<PointKey> {
    let median = |times: &[f64]| {
        let mut sorted = times.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
    };
    points
        .iter()
        .filter(|((threads, model, node), (point, _, times))| {
            if *threads < 2 {
                return false;
            }
            let Some((single, _, single_times)) = points.get(&(1, *model, *node)) else {
                return false;
            };
            point.bound_s < 0.7 * single.bound_s && median(times) >= 0.95 * median(single_times)
        })
        .map(|(key, _)| *key)
        .collect()
}

/// Runs the grid on this CPU against `device` (the probed profile whose ceilings give the
/// bounds) and returns the tables with their leave-one-out errors.
pub fn calibrate(
    device: &DeviceProfile,
    options: &CalibrateOptions,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Calibration, CalibrateError> {
    let started = Instant::now();
    let models = grid::grid(options.quick);
    let runs = if options.quick { QUICK_RUNS } else { 5 };
    // The grid is timed in several rounds and each point keeps the median of its rounds: a
    // slow spell of a shared machine then lands on different points in each round instead of
    // on one class.
    let max_rounds = if options.quick { 2 } else { 3 };
    // Later rounds and the re-timing of stalled points are left out where they would not fit
    // the budget: on a slower or busier machine (an Emerald Rapids guest took 88 s for the
    // full grid) the command keeps its stated time, with fewer rounds per point.
    let budget = if options.quick {
        QUICK_BUDGET
    } else {
        FULL_BUDGET
    };
    let mut tables: Vec<ClassTable> = Vec::new();
    let repeated = models.iter().filter(|m| !m.first_round_only).count();
    let total = (models.len() + repeated * (max_rounds - 1)) * options.thread_counts.len();
    let mut completed = 0;
    // Per (threads, grid model, op): the point as the first round's analysis gives it (bound,
    // features: the same in every round) and each round's measured time.
    // The point's class is the one the analysis gave its node: a 3×3 grid convolution the
    // roofline runs as Winograd calibrates the Winograd table.
    let mut points: std::collections::BTreeMap<(usize, usize, usize), TimedPoint> =
        Default::default();
    let mut placement = PlacementWatch::default();
    // The core clock after the timed runs of every point (`BenchReport::clock`).
    let mut run_clocks: Vec<f64> = Vec::new();
    let mut run_fma: Vec<f64> = Vec::new();
    // The first round always runs whole, so on a slow machine it alone can outlast the
    // budget (Zen 1: 70 s for a 48 s budget). Once a tenth of it is done, a model whose round
    // is projected past the budget is timed with the quick mode's runs instead, and in the
    // quick mode with one (a noisy spell of the Emerald Rapids guest took its first round to
    // 13-15 s against the 10 s promised).
    let first_round_total = models.len() * options.thread_counts.len();
    let paced_runs = if options.quick {
        1
    } else {
        runs.min(QUICK_RUNS)
    };
    let mut paced_timings = 0;
    let mut rounds = 0;
    // Time the last round spent on the points every round times.
    let mut repeated_round = std::time::Duration::ZERO;
    while rounds < max_rounds {
        // One round always runs: every point needs a time.
        if rounds > 0 && started.elapsed() + repeated_round > budget {
            break;
        }
        rounds += 1;
        repeated_round = std::time::Duration::ZERO;
        for &threads in &options.thread_counts {
            placement.start_pass(threads);
            for model_index in round_order(models.len(), rounds - 1) {
                let model = &models[model_index];
                if rounds > 1 && model.first_round_only {
                    continue;
                }
                // Built on first use: outside the time a round is projected from.
                model.model();
                let model_started = Instant::now();
                let behind = rounds == 1
                    && completed * 10 >= first_round_total
                    && started.elapsed().as_secs_f64() * first_round_total as f64
                        > budget.as_secs_f64() * completed as f64;
                let model_runs = if behind && paced_runs < runs {
                    paced_timings += 1;
                    paced_runs
                } else {
                    runs
                };
                let report = bench_model(model, device, threads, model_runs)?;
                if let Some(clock) = &report.clock {
                    run_clocks.push(clock.run_hz);
                    run_fma.extend(clock.run_fma_gflops);
                }
                if !model.first_round_only {
                    repeated_round += model_started.elapsed();
                }
                placement.timed(threads, model_index, rounds - 1);
                // The one timed op of the model (its costed node).
                for op in &report.ops {
                    let node = &report.analysis.nodes[op.node_index];
                    let Some(features) = node.features else {
                        continue;
                    };
                    if node.status != NodeStatus::Costed || op.predicted_s <= 0.0 {
                        continue;
                    }
                    let key = node.calibration_op_type();
                    if !records(model, &key) {
                        continue;
                    }
                    // A multi-thread table holds ops that split: one the kernels keep on one
                    // thread is predicted from the one-thread table (`analysis`), and its
                    // one-thread time against a multi-thread bound would skew its neighbours.
                    let class = node.kernel_class.unwrap_or(model.class);
                    if crate::analysis::classify::stays_on_one_thread(class, threads, node.flops) {
                        continue;
                    }
                    let (_, _, times) = points
                        .entry((threads, model_index, op.node_index))
                        .or_insert_with(|| {
                            let point = CalibrationPoint {
                                shape: model.shape.clone(),
                                features,
                                bound_s: op.predicted_s,
                                measured_s: 0.0,
                                op_type: key,
                            };
                            (point, class, Vec::new())
                        });
                    times.push(op.measured_s);
                }
                completed += 1;
                progress(Progress {
                    completed,
                    total,
                    threads,
                    shape: &model.shape,
                });
            }
            placement.end_pass(threads);
        }
    }
    // Points that should have scaled and did not ran while the other vCPUs were taken (a
    // shared host): they are timed again, in rounds of their own after the grid, and those
    // rounds' times replace theirs; a point that still does not scale keeps what it measures.
    // Times taken while the cores exchanged data far slower than at the grid's best check (a
    // host that moved a vCPU to another core complex) describe another placement: a point
    // keeps the times of its quiet rounds, and one timed apart in every round is timed again
    // after the grid like the stalled ones.
    let apart_timings = placement.apart_timings();
    let mut apart_everywhere = std::collections::BTreeSet::new();
    let mut apart_times_dropped = 0;
    for (&(threads, model, node), (_, _, times)) in points.iter_mut() {
        let apart: Vec<bool> = (0..times.len())
            .map(|round| apart_timings.contains(&(threads, model, round)))
            .collect();
        if !apart.contains(&true) {
            continue;
        }
        let quiet: Vec<f64> = times
            .iter()
            .zip(&apart)
            .filter(|(_, &was_apart)| !was_apart)
            .map(|(&time, _)| time)
            .collect();
        if quiet.is_empty() {
            apart_everywhere.insert((threads, model, node));
        } else {
            apart_times_dropped += times.len() - quiet.len();
            *times = quiet;
        }
    }
    let mut stalled = stalled_points(&points);
    stalled.extend(apart_everywhere.iter().copied());
    // The low-precision points are not re-timed here (it would rewrite them again and take the
    // rounds' budget from the fp32 points); one far slower than its neighbours is, below.
    stalled.retain(|&(_, model, _)| !models[model].first_round_only);
    let stalled_count = stalled
        .iter()
        .filter(|key| !apart_everywhere.contains(key))
        .count();
    let apart_points = stalled.len() - stalled_count;
    let retimed_points = stalled.len();
    let mut retimed: std::collections::BTreeMap<PointKey, Vec<f64>> = Default::default();
    let stalled_models: std::collections::BTreeSet<(usize, usize)> = stalled
        .iter()
        .map(|&(threads, model, _)| (threads, model))
        .collect();
    // From the last round, which timed only the points re-timing may pick.
    let per_model = repeated_round / (repeated * options.thread_counts.len()).max(1) as u32;
    let retime_round = per_model * stalled_models.len() as u32;
    let mut retime_rounds = 0;
    let mut discarded_rounds = 0;
    while retime_rounds + discarded_rounds < rounds && started.elapsed() + retime_round <= budget {
        let mut round_times: Vec<(PointKey, f64)> = Vec::new();
        let threads_retimed: std::collections::BTreeSet<usize> =
            stalled_models.iter().map(|&(threads, _)| threads).collect();
        let before: Vec<bool> = threads_retimed
            .iter()
            .map(|&threads| placement.is_apart_now(threads))
            .collect();
        for &(threads, model_index) in &stalled_models {
            let report = bench_model(&models[model_index], device, threads, runs)?;
            for op in &report.ops {
                let key = (threads, model_index, op.node_index);
                if stalled.contains(&key) {
                    round_times.push((key, op.measured_s));
                }
            }
        }
        let after: Vec<bool> = threads_retimed
            .iter()
            .map(|&threads| placement.is_apart_now(threads))
            .collect();
        // A re-timing round run apart itself would only replace apart times with apart times.
        if before.iter().chain(&after).any(|&apart| apart) {
            discarded_rounds += 1;
            continue;
        }
        retime_rounds += 1;
        for (key, time) in round_times {
            retimed.entry(key).or_default().push(time);
        }
    }
    let apart_kept = apart_everywhere
        .iter()
        .filter(|key| !retimed.contains_key(key))
        .count();
    for (key, times) in retimed {
        if let Some((_, _, kept)) = points.get_mut(&key) {
            *kept = times;
        }
    }
    let mut warnings = Vec::new();
    if apart_kept > 0 {
        warnings.push(format!(
            "{apart_kept} multi-thread point(s) were timed only while the cores exchanged data \
             at least {EXCHANGE_MOVED}x slower than at the grid's best check (the threads on \
             cores farther apart: another core complex, a host moving vCPUs) or shared one \
             core, and no quiet re-timing fitted the time budget: their tables predict that \
             placement; run `roofline calibrate` again in a quieter spell"
        ));
    }
    let (shared_checks, all_checks) = placement.shared_core_checks();
    if shared_checks > 0 {
        warnings.push(format!(
            "{shared_checks} of {all_checks} placement checks found the threads on one \
             physical core's SMT siblings (an FMA block on both at once at under \
             {SHARED_CORE_BELOW} of its rate alone): the timings next to them were left out \
             or timed again, since the tables describe threads on separate cores"
        ));
    }
    // Each table point's key, to time it again.
    let mut table_keys: Vec<Vec<PointKey>> = Vec::new();
    let mut point_times: std::collections::BTreeMap<PointKey, Vec<f64>> = Default::default();
    for (key, (mut point, class, mut times)) in points {
        let threads = key.0;
        times.sort_by(f64::total_cmp);
        point.measured_s = lower_median(&times);
        point_times.insert(key, times);
        match tables
            .iter()
            .position(|t| t.class == class && t.threads == threads as u32)
        {
            Some(index) => {
                tables[index].points.push(point);
                table_keys[index].push(key);
            }
            None => {
                tables.push(ClassTable {
                    class,
                    threads: threads as u32,
                    points: vec![point],
                    fit_error: None,
                    fixed_s: 0.0,
                });
                table_keys.push(vec![key]);
            }
        }
    }
    let slow_retimed = retime_slow_outliers(
        &mut tables,
        &table_keys,
        &mut point_times,
        SlowRetiming {
            models: &models,
            device,
            runs,
            started,
            budget,
            per_model,
            placement: &mut placement,
        },
    )?;
    for table in &mut tables {
        table.fit_error = table.leave_one_out();
    }
    tables.sort_by_key(|t| (t.class, t.threads));
    // A few milliseconds: three two-op models at one thread and at each count. Without it the
    // tables still hold; the analysis then charges no handoff.
    let handoff_runs = if options.quick { 60 } else { 200 };
    let handoff = match handoff::measure(device, &options.thread_counts, handoff_runs) {
        Ok(rates) => rates,
        Err(error) => {
            warnings.push(format!("the cross-core handoff was not measured: {error}"));
            Vec::new()
        }
    };
    let paced = if paced_timings > 0 {
        format!(
            " ({paced_timings} of the first round's {first_round_total} timings with \
             {paced_runs}: the round ran past the budget's pace)"
        )
    } else {
        String::new()
    };
    Ok(Calibration {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        measured_at: crate::probe::rfc3339_utc(SystemTime::now()),
        mode: if options.quick { "quick" } else { "full" }.to_string(),
        wall_time_s: started.elapsed().as_secs_f64(),
        method: format!(
            "the tool's own kernels on {} one-op models per thread count (per point the lower \
             median of {rounds} rounds over the grid, the int8, bf16 and dynamic-int8 points \
             timed in the first only (and once more if a slow outlier, below), each the median of {runs} timed runs{paced} after a \
             warm-up, inputs and weights warm in cache as in repeated inference, and each \
             convolution and GEMM again with its weights cold: caches evicted before every \
             run, activations read back, weights charged at DRAM (a GEMV whose weights \
             outgrow the largest cache only so); each round in a stride through the grid, so \
             a slow spell of the host falls on a few points of every class; 3x3 stride-1 \
             shapes where the algorithm rule chooses timed as direct, F(2x2) and F(4x4)); an op's expected \
             time is its roofline bound × measured/bound of the {} nearest grid shapes of its \
             kernel class, of its op type where the class has it (a Winograd variant's own \
             points) (inverse squared distance in log2 of work, bytes, weight bytes, output \
             elements and, for convolutions, output channels (depthwise ones: output row \
             width) and window taps, averaged in log space; from a class running the same \
             packed GEMM when that has a point nearer than every point of its own class past \
             three doublings; \
             the multi-thread tables hold only ops the kernels split across threads, those \
             kept on one thread are predicted from the one-thread table; \
             {apart_times_dropped} multi-thread time(s) taken while the cores exchanged data \
             at least {EXCHANGE_MOVED}x slower than at the grid's best check with the threads \
             on separate cores, or while they shared one core (see `exchange`), left out of \
             their points' medians; {retimed_points} multi-thread point(s) ({stalled_count} whose bound expected them to scale and whose time did \
             not, {apart_points} timed apart in every round) timed again in {retime_rounds} \
             round(s) of their own ({discarded_rounds} round(s) run apart themselves \
             discarded; {apart_kept} point(s) left apart); rounds past the first are left out \
             where they would not fit {:.0} s); {slow_retimed} point(s) measured over \
             {SLOW_OUTLIER}x what the other points of their table predict for them timed once \
             more within that time (apart placements not kept), the lower middle of their \
             timings kept (of two, the faster); at each multi-thread count, the rate at \
             which one thread reads what the others just wrote (`handoff`: a depthwise \
             convolution split across the threads, then a ReLU kept on one) is charged to \
             the ops kept on one thread that write a like-sized output from a split op's data",
            models.len(),
            crate::device::calibration::NEIGHBOURS,
            budget.as_secs_f64()
        ),
        tables,
        exchange: placement.best(options.thread_counts.iter().copied().max().unwrap_or(1)),
        warnings,
        handoff,
        clock_hz: (!run_clocks.is_empty()).then(|| crate::bench::median(&mut run_clocks)),
        fma_gflops: (!run_fma.is_empty()).then(|| crate::bench::median(&mut run_fma)),
    })
}

/// The order a round times the grid in: a stride through it rather than its written order,
/// which lists each class's shapes together. A slow spell of a shared host lasts seconds, tens
/// of points: timed in written order it slowed a run of neighbouring shapes of one class
/// (session 52: a calibration's depthwise points a median 1.35× another's minutes later, the
/// other classes within 7%), which the nearest-point lookup then averages together and the
/// leave-one-out re-timing cannot tell from a slow kernel. Spread over the grid, a spell
/// leaves each class a few slow points among quiet neighbours. Each round starts elsewhere.
fn round_order(len: usize, round: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    // Near the golden section, so consecutive points land far apart in the written order.
    let mut stride = ((len as f64 * 0.618) as usize).max(1);
    while gcd(stride, len) != 1 {
        stride += 1;
    }
    let offset = round * len / 3;
    (0..len).map(|i| (offset + i * stride) % len).collect()
}

/// The lower middle of sorted round times. A shared host only ever adds time (another
/// tenant's work, a vCPU moved onto its sibling's core between two placement checks), so of
/// two rounds the faster is the kernel's: the upper middle kept a 2-thread Winograd point at
/// its SMT-sibling time (4.3 ms) when its other round had measured the separate cores' 3.0.
fn lower_median(sorted: &[f64]) -> f64 {
    sorted[(sorted.len() - 1) / 2]
}

/// Checks of the cores' data exchange (`probe::exchange_now`) every `CHECK_EVERY` of
/// multi-thread grid time, so the points timed between two checks can be judged by the
/// placement the threads had: a host that moves a vCPU to another core complex for a while
/// doubles some multi-thread times and leaves the 1-thread ones alone.
#[derive(Default)]
struct PlacementWatch {
    /// (threads, the check; `None` when a vCPU was taken away during it).
    checks: Vec<(usize, Option<ExchangeRecord>)>,
    /// (threads, check before, check after, the timings between them).
    segments: Vec<(usize, usize, usize, Timings)>,
    open: Option<(usize, usize, Timings)>,
    last_check: Option<Instant>,
}

/// (grid model, round) of the timings taken between two checks.
type Timings = Vec<(usize, usize)>;

/// A check takes about 3 ms; the host's SMT-sibling spells on the Zen 4 guest were caught by
/// one bench in fourteen run a third of a second apart, so they last well under a second.
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl PlacementWatch {
    fn check(&mut self, threads: usize) -> usize {
        self.checks
            .push((threads, crate::probe::exchange_now(threads)));
        self.last_check = Some(Instant::now());
        self.checks.len() - 1
    }

    fn start_pass(&mut self, threads: usize) {
        if threads > 1 {
            let check = self.check(threads);
            self.open = Some((threads, check, Vec::new()));
        }
    }

    fn close(&mut self, threads: usize) {
        if let Some((open_threads, before, models)) = self.open.take() {
            let after = self.check(threads);
            self.segments.push((open_threads, before, after, models));
        }
    }

    fn timed(&mut self, threads: usize, model: usize, round: usize) {
        let Some((_, _, models)) = self.open.as_mut() else {
            return;
        };
        models.push((model, round));
        if self
            .last_check
            .is_some_and(|last| last.elapsed() >= CHECK_EVERY)
        {
            self.close(threads);
            let before = self.checks.len() - 1;
            self.open = Some((threads, before, Vec::new()));
        }
    }

    fn end_pass(&mut self, threads: usize) {
        self.close(threads);
    }

    /// The fastest exchange seen at `threads` with the threads on separate cores (the
    /// placement the points are kept for). Two SMT siblings exchange fastest of all, through
    /// their shared L1 and L2, but run compute-bound work at one core's rate: their checks are
    /// the best only when no check found separate cores.
    fn best(&self, threads: usize) -> Option<ExchangeRecord> {
        let checks = || {
            self.checks
                .iter()
                .filter(move |(t, _)| *t == threads)
                .filter_map(|(_, record)| record.clone())
        };
        let fastest = |records: Vec<ExchangeRecord>| {
            records.into_iter().max_by(|a, b| {
                (a.read_gbs / a.round_trip_s).total_cmp(&(b.read_gbs / b.round_trip_s))
            })
        };
        fastest(checks().filter(|r| !r.shares_a_core()).collect())
            .or_else(|| fastest(checks().collect()))
    }

    fn is_apart(&self, threads: usize, record: &Option<ExchangeRecord>) -> bool {
        match (record, self.best(threads)) {
            // Threads on one core's siblings when the best check found separate cores.
            (Some(record), Some(best)) if record.shares_a_core() && !best.shares_a_core() => true,
            (Some(record), Some(best)) => record.slowdown_against(&best) >= EXCHANGE_MOVED,
            // A check a vCPU was taken away from: the points around it are suspect too.
            (None, Some(_)) => true,
            _ => false,
        }
    }

    /// (checks that found the threads sharing one core, checks that measured anything).
    fn shared_core_checks(&self) -> (usize, usize) {
        let measured: Vec<&ExchangeRecord> =
            self.checks.iter().filter_map(|(_, r)| r.as_ref()).collect();
        let shared = measured.iter().filter(|r| r.shares_a_core()).count();
        (shared, measured.len())
    }

    /// Checks the exchange now and says whether it is apart from the best seen.
    fn is_apart_now(&mut self, threads: usize) -> bool {
        if threads < 2 {
            return false;
        }
        let check = self.check(threads);
        let record = self.checks[check].1.clone();
        self.is_apart(threads, &record)
    }

    /// (threads, grid model, round) of every timing taken next to a check that was apart.
    fn apart_timings(&self) -> std::collections::BTreeSet<(usize, usize, usize)> {
        self.segments
            .iter()
            .filter(|(threads, before, after, _)| {
                self.is_apart(*threads, &self.checks[*before].1)
                    || self.is_apart(*threads, &self.checks[*after].1)
            })
            .flat_map(|(threads, _, _, models)| {
                models
                    .iter()
                    .map(move |&(model, round)| (*threads, model, round))
            })
            .collect()
    }
}

/// Timed runs per point in `--quick` (and for the first round's points past the full mode's
/// pace).
const QUICK_RUNS: usize = 3;
/// Time the full grid's rounds may take: under the 60 s `calibrate` promises, with room for
/// start-up and the fit.
const FULL_BUDGET: std::time::Duration = std::time::Duration::from_secs(48);
/// The same for `--quick` (under 10 s).
const QUICK_BUDGET: std::time::Duration = std::time::Duration::from_secs(7);

/// Whether an op of `model` keyed `key` becomes a calibration point: a low-precision point's
/// float ops (the Cast of a dynamic layer's int32 sums) stay out, since timed in one round
/// under an fp32 key they would predict fp32 ops.
fn records(model: &grid::GridModel, key: &str) -> bool {
    !(model.first_round_only && key_precision(key).is_empty())
}

/// The graph a grid point is timed as: imported, and rewritten by the advisor where the point
/// asks (`GridModel::rewritten`).
fn point_graph(
    model: &grid::GridModel,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
) -> Result<crate::analysis::graph::Graph, CalibrateError> {
    let import_error = |reason: String| CalibrateError::Import {
        shape: model.shape.clone(),
        reason,
    };
    let graph = import::import_model(model.model(), Path::new("."), Path::new("calibration.onnx"))
        .map_err(|e| import_error(e.to_string()))?;
    if !model.rewritten() {
        return Ok(graph);
    }
    let options = match model.precision {
        Some(precision) => crate::advisor::AdviseOptions {
            apply: vec![precision.name().to_string()],
            convert_all: true,
            calibration_samples: 2,
            ..Default::default()
        },
        None => Default::default(),
    };
    crate::advisor::advise(graph, &model.shape, device, analyze, &options)
        .map(|(_, rewritten)| rewritten)
        .map_err(|e| import_error(e.to_string()))
}

/// How a calibration model is benched: per-op times only, on `threads` threads, `runs` timed
/// runs after one warm-up, weights warm.
fn point_bench_options(threads: usize, runs: usize) -> BenchOptions {
    BenchOptions {
        runs,
        min_time_s: 0.0,
        warmup: 1,
        threads,
        seed: 0,
        tune: false,
        decode: false,
        // The point's policy names the algorithm (rule-4 shapes are timed as each), never a
        // measured table.
        measure_algorithms: false,
        per_op_only: true,
        nhwc_pairs: true,
        // The grid checks the placement itself, every quarter second (`PlacementWatch`).
        check_exchange: false,
        evict_bytes: 0,
        given_inputs: Default::default(),
    }
}

/// Benches one grid model on `threads` threads with `runs` timed runs.
fn bench_model(
    model: &grid::GridModel,
    device: &DeviceProfile,
    threads: usize,
    runs: usize,
) -> Result<crate::bench::BenchReport, CalibrateError> {
    let weights_in_dram =
        model.cold_weights || model.streams_weights_past(device.largest_cache_bytes());
    let options = BenchOptions {
        evict_bytes: if weights_in_dram {
            crate::exec::conv_timing::evict_bytes(device.largest_cache_bytes())
        } else {
            0
        },
        ..point_bench_options(threads, runs)
    };
    let analyze = AnalyzeOptions {
        conv_algorithms: model.policy,
        weights_in_dram,
        ..AnalyzeOptions::default()
    };
    // Rewritten again for each thread count rather than kept: the rewritten graphs of the
    // grid held 700 MB more at the peak, for 3 s of a full calibration.
    let graph = point_graph(model, device, &analyze)?;
    bench_graph(graph, &model.shape, device, &analyze, &options).map_err(|source| {
        CalibrateError::Model {
            shape: model.shape.clone(),
            source,
        }
    })
}

/// Classes with no table in `calibration` (for the report).
pub fn uncovered(calibration: &Calibration) -> Vec<KernelClass> {
    KernelClass::ALL
        .into_iter()
        .filter(|c| !calibration.tables.iter().any(|t| t.class == *c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::calibration::ShapeFeatures;
    use crate::device::{MemoryCeiling, MemoryLevel};

    /// Every round times every grid model once, consecutive ones far apart in the written
    /// order (where a class's shapes sit together), and the rounds in different orders.
    #[test]
    fn a_round_strides_through_the_grid() {
        for len in [1, 2, 7, 100, 613, 1226] {
            for round in 0..3 {
                let order = round_order(len, round);
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(
                    seen,
                    (0..len).collect::<Vec<_>>(),
                    "len {len} round {round}"
                );
                if len >= 100 {
                    let near = order
                        .windows(2)
                        .filter(|pair| pair[0].abs_diff(pair[1]) < len / 10)
                        .count();
                    assert_eq!(near, 0, "len {len}: consecutive points of one class");
                }
            }
        }
        assert_ne!(round_order(613, 0), round_order(613, 1));
    }

    /// A 2-thread point is re-timed when its bound says it should scale and its time did not
    /// move from its 1-thread twin's; not when it scaled, when its bound barely drops (a shared
    /// roof), or when it has no twin.
    #[test]
    fn multi_thread_points_that_should_scale_and_did_not_are_retimed() {
        let point = |bound_s: f64, times: &[f64]| -> TimedPoint {
            let point = CalibrationPoint {
                shape: "matmul".into(),
                features: ShapeFeatures::new(1 << 20, 1 << 20, 0, 1),
                bound_s,
                measured_s: 0.0,
                op_type: "MatMul".into(),
            };
            (point, KernelClass::Gemm, times.to_vec())
        };
        let points: std::collections::BTreeMap<PointKey, TimedPoint> = [
            ((1, 0, 0), point(1.0, &[1.5, 1.6, 1.5])),
            ((2, 0, 0), point(0.5, &[1.45, 1.5, 0.8])),
            ((1, 1, 0), point(1.0, &[1.5])),
            ((2, 1, 0), point(0.5, &[0.8])),
            ((1, 2, 0), point(1.0, &[1.5])),
            ((2, 2, 0), point(0.9, &[1.5])),
            ((2, 3, 0), point(0.5, &[1.5])),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            stalled_points(&points).into_iter().collect::<Vec<_>>(),
            [(2, 0, 0)]
        );
    }

    /// Models timed between two checks are apart when either check is 1.8× or more slower
    /// than the best check of their thread count, or was interrupted (`None`); the best check
    /// is the placement kept.
    #[test]
    fn models_timed_next_to_an_apart_check_are_retimed() {
        let record = ExchangeRecord::with_figures;
        let watch = PlacementWatch {
            checks: vec![
                (2, Some(record(60.0, 70.0))),
                (2, Some(record(90.0, 66.0))),
                (2, Some(record(350.0, 25.0))),
                (2, Some(record(62.0, 71.0))),
                (2, None),
                (2, Some(record(58.0, 69.0))),
            ],
            segments: vec![
                (2, 0, 1, vec![(0, 0), (1, 0)]),
                (2, 1, 2, vec![(2, 0), (3, 0)]),
                (2, 2, 3, vec![(4, 0)]),
                (2, 3, 5, vec![(5, 0), (0, 1)]),
                (2, 4, 5, vec![(6, 1)]),
            ],
            open: None,
            last_check: None,
        };
        let best = watch.best(2).expect("a best check");
        assert_eq!(best, record(58.0, 69.0));
        assert!(watch.best(4).is_none());
        assert_eq!(
            watch.apart_timings().into_iter().collect::<Vec<_>>(),
            [(2, 2, 0), (2, 3, 0), (2, 4, 0), (2, 6, 1)]
        );
    }

    #[test]
    fn the_lower_middle_round_is_kept() {
        assert_eq!(lower_median(&[3.0]), 3.0);
        assert_eq!(lower_median(&[3.0, 4.3]), 3.0);
        assert_eq!(lower_median(&[2.9, 3.0, 4.3]), 3.0);
        assert_eq!(lower_median(&[2.9, 3.0, 3.1, 4.3]), 3.0);
    }

    /// The Zen 4 guest's SMT-sibling spells (27 ns, 114 GB/s: the siblings' shared L2, one
    /// core's FMA pipes) exchange fastest but are not the best placement: a check that found
    /// separate cores is, and the timings next to a shared-core check are apart. When every
    /// check shared a core, the fastest of them is kept and nothing is apart for that alone.
    #[test]
    fn models_timed_on_smt_siblings_are_retimed() {
        let record = |ns, gbs, share| ExchangeRecord {
            compute_share: Some(share),
            ..ExchangeRecord::with_figures(ns, gbs)
        };
        let siblings = record(27.0, 114.0, 0.52);
        let cores = record(68.0, 67.0, 0.98);
        let watch = PlacementWatch {
            checks: vec![
                (2, Some(cores.clone())),
                (2, Some(siblings.clone())),
                (2, Some(record(70.0, 65.0, 0.97))),
            ],
            segments: vec![(2, 0, 2, vec![(0, 0)]), (2, 1, 2, vec![(1, 0), (2, 0)])],
            open: None,
            last_check: None,
        };
        assert_eq!(watch.best(2), Some(cores));
        assert_eq!(
            watch.apart_timings().into_iter().collect::<Vec<_>>(),
            [(2, 1, 0), (2, 2, 0)]
        );
        let all_siblings = PlacementWatch {
            checks: vec![
                (2, Some(siblings.clone())),
                (2, Some(record(29.0, 110.0, 0.55))),
            ],
            segments: vec![(2, 0, 1, vec![(0, 0)])],
            open: None,
            last_check: None,
        };
        assert_eq!(all_siblings.best(2), Some(siblings));
        assert!(all_siblings.apart_timings().is_empty());
    }

    /// A CPU-like profile with a cache hierarchy (the catalogue lists GPUs only).
    fn cpu_with_caches() -> DeviceProfile {
        let mut device = crate::device::find_device("t4")
            .expect("catalogue device")
            .to_profile();
        let level = |level, gigabytes_per_s: f64, capacity_bytes: u64| MemoryCeiling {
            level,
            bytes_per_s: gigabytes_per_s * 1e9,
            write_bytes_per_s: None,
            capacity_bytes: Some(capacity_bytes),
            threads: Some(1),
            source: "test".into(),
        };
        device.memory = vec![
            level(MemoryLevel::L1, 400.0, 48 << 10),
            level(MemoryLevel::L2, 150.0, 1 << 20),
            level(MemoryLevel::L3, 100.0, 32 << 20),
            level(MemoryLevel::Dram, 30.0, 16 << 30),
        ];
        device
    }

    /// The level numbers the analysis charged a grid point's one op at.
    fn levels(model: &grid::GridModel, device: &DeviceProfile) -> (u8, u8, f64) {
        let graph = import::import_model(model.model(), Path::new("."), Path::new("t.onnx"))
            .expect("grid model imports");
        let options = AnalyzeOptions {
            conv_algorithms: model.policy,
            weights_in_dram: model.cold_weights,
            ..AnalyzeOptions::default()
        };
        let analysis = crate::analysis::analyze_graph(graph, &model.shape, device, &options)
            .expect("grid model analyses");
        let node = analysis
            .nodes
            .iter()
            .find(|n| n.status == NodeStatus::Costed)
            .expect("one costed op");
        let features = node.features.expect("features of a costed op");
        (
            features.activation_level,
            features.weight_level,
            node.predicted_s,
        )
    }

    #[test]
    fn a_cold_twin_charges_its_weights_at_dram_and_its_activations_in_cache() {
        let device = cpu_with_caches();
        let models = grid::grid(false);
        let warm = models
            .iter()
            .find(|m| m.shape == "conv 256→64 1x1 s1 g1 56x56")
            .expect("warm point");
        let cold = models
            .iter()
            .find(|m| m.shape == "conv 256→64 1x1 s1 g1 56x56 (weights cold)")
            .expect("cold twin");
        let (warm_activations, warm_weights, warm_bound) = levels(warm, &device);
        let (cold_activations, cold_weights, cold_bound) = levels(cold, &device);
        // Run again and again, the op cycles its 64 KiB of weights and 4 MiB of input and
        // output: L3.
        assert_eq!(warm_weights, 3);
        assert_eq!(cold_weights, 4);
        assert_eq!(warm_activations, cold_activations);
        assert!(cold_bound >= warm_bound);
    }

    /// The low-precision and dynamically quantized grid points are timed as the ops they
    /// calibrate: the advisor's int8 and bf16 forms and the integer ops, each under its
    /// precision key and its float class.
    #[test]
    fn low_precision_points_run_the_ops_they_calibrate() {
        let device = cpu_with_caches();
        let models = grid::grid(false);
        let analyze = AnalyzeOptions::default();
        let keys = |shape: &str| -> Vec<(String, Option<KernelClass>)> {
            let model = models
                .iter()
                .find(|m| m.shape == shape)
                .unwrap_or_else(|| panic!("no grid point `{shape}`"));
            let graph = point_graph(model, &device, &analyze).expect("rewrites");
            let analysis =
                crate::analysis::analyze_graph(graph, shape, &device, &analyze).expect("analyses");
            analysis
                .nodes
                .iter()
                .filter(|n| n.status == NodeStatus::Costed)
                .map(|n| (n.calibration_op_type(), n.kernel_class))
                .collect()
        };
        assert_eq!(
            keys("conv 256→64 1x1 s1 g1 56x56 int8"),
            [("Conv int8".to_string(), Some(KernelClass::Pointwise))]
        );
        // A 3×3 stride-1 shape runs direct at a low precision.
        assert_eq!(
            keys("conv 64→64 3x3 s1 g1 56x56 bf16"),
            [("Conv bf16".to_string(), Some(KernelClass::Conv))]
        );
        assert_eq!(
            keys("gemm 8x2048 · (1000x2048)ᵀ + bias int8"),
            [("MatMul int8".to_string(), Some(KernelClass::Gemm))]
        );
        let dynamic = "dynamic int8 ConvInteger 1x64x56x56 · 256x64x1x1";
        assert_eq!(
            keys(dynamic),
            [
                (
                    "DynamicQuantizeLinear int8".to_string(),
                    Some(KernelClass::Elementwise)
                ),
                ("ConvInteger int8".to_string(), Some(KernelClass::Pointwise)),
                ("Cast".to_string(), Some(KernelClass::Elementwise)),
            ]
        );
        // Its Cast is timed but not recorded; the fp32 points' ops are.
        let model = |shape: &str| models.iter().find(|m| m.shape == shape).unwrap();
        let recorded: Vec<String> = keys(dynamic)
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| records(model(dynamic), key))
            .collect();
        assert_eq!(recorded, ["DynamicQuantizeLinear int8", "ConvInteger int8"]);
        assert!(records(model("conv 256→64 1x1 s1 g1 56x56"), "Conv"));
        assert_eq!(
            keys("dynamic int8 MatMulInteger 128x768 · 768x768")[1],
            ("MatMulInteger int8".to_string(), Some(KernelClass::Gemm))
        );
        // Their twins with cold weights, for the int8 and bf16 forms only.
        assert!(models
            .iter()
            .any(|m| m.shape == "conv 256→64 1x1 s1 g1 56x56 int8 (weights cold)"));
        assert!(!models
            .iter()
            .any(|m| m.shape.starts_with("dynamic int8") && m.cold_weights));
    }
}
