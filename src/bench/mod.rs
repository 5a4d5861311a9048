//! `roofline bench`: runs a model with the project's own kernels on this CPU, times every op, and
//! joins the measurements onto the analysis's predictions (same node indices), so each op shows
//! measured against predicted time and the fraction of its roofline bound it reaches.

use crate::analysis::algorithm::AlgorithmPolicy;
use crate::analysis::{self, AnalysisError, AnalyzeOptions, Graph, NodeStatus};
use crate::device::DeviceKind;
use crate::device::DeviceProfile;
use crate::exec::{self, build_plan, ExecError};

pub mod decode;

pub use crate::report::model::bench::{
    BenchReport, DecodeInfo, ErrorSummary, ExchangeCheck, Latency, OpMeasurement, RunClock,
    BENCH_SCHEMA, BENCH_SCHEMA_VERSION,
};

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub runs: usize,
    /// Seconds of wall time the end-to-end series lasts at least: past `runs`, runs go on (up
    /// to `MAX_RUNS`) until this much time has passed since its first run, and the per-op
    /// series takes as many runs. On a shared host a slow spell lasts tenths of a second, so
    /// ten runs of a 0.5 ms model measure one spell (the PP-OCR classifier read 0.54 or 0.73 ms
    /// from one 10-run process to the next, 0.539-0.560 in 7 of 8 processes of 0.5 s). 0:
    /// exactly `runs` runs. Without an end-to-end series (`per_op_only`) the per-op series
    /// stays at `runs`.
    pub min_time_s: f64,
    pub warmup: usize,
    pub threads: usize,
    pub seed: u64,
    /// Autotune GEMM blockings for this model's shapes (cached per device profile).
    pub tune: bool,
    /// Run the timed runs as a decode loop (`decode.rs`): each run one token, fed back.
    pub decode: bool,
    /// Time the model's Winograd-candidate convolutions as each algorithm where the device
    /// profile's latency table lacks them (`exec::conv_timing`), and let the measurements
    /// choose (rule 5 of `analysis::algorithm`): only when `device` is this machine.
    pub measure_algorithms: bool,
    /// Bytes written before every timed run (the workspace then read and the inputs staged),
    /// so the run finds its weights in DRAM and its activations in cache, as a layer deep in
    /// a large model does; 0 runs warm (repeated inference of the same small model).
    pub evict_bytes: usize,
    /// Only the per-op series: the end-to-end latency is then the sum of each run's op times
    /// (the calibration grid reads per-op times only, and this halves its time).
    pub per_op_only: bool,
    /// Hold the activation between a 1×1 convolution and the depthwise one that alone reads
    /// it NHWC (`exec::PlanOptions::nhwc_pairs`); off to measure what the pairs buy.
    pub nhwc_pairs: bool,
    /// Measure the cores' data exchange before and after a multi-thread run and compare it
    /// with the device's (`BenchReport::core_exchange`); about 4 ms.
    pub check_exchange: bool,
    /// Input values by name (`--input NAME=FILE.npy`); inputs not given get seeded random
    /// values.
    pub given_inputs: std::collections::HashMap<String, crate::exec::RtTensor>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            runs: 10,
            min_time_s: 0.0,
            warmup: 2,
            threads: 1,
            seed: 0,
            tune: false,
            decode: false,
            measure_algorithms: false,
            evict_bytes: 0,
            per_op_only: false,
            nhwc_pairs: true,
            check_exchange: true,
            given_inputs: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("--decode: {0}")]
    Decode(String),
}

/// Most timed runs of one series, whatever `min_time_s` asks: every run keeps one time per op.
pub const MAX_RUNS: usize = 100_000;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The median (the upper one of an even count) of `values`, sorted in place; 0 when empty.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(values, 0.5)
}

/// Kept for callers outside `cli` and `tests` that still name it here.
pub use crate::exec::random_inputs;

/// `random` with the inputs of `given` put in their place (names the plan does not have are
/// left out: a rewritten graph keeps its original's inputs).
pub fn with_given(
    mut random: std::collections::HashMap<String, crate::exec::RtTensor>,
    given: &std::collections::HashMap<String, crate::exec::RtTensor>,
) -> std::collections::HashMap<String, crate::exec::RtTensor> {
    for (name, tensor) in given {
        if let Some(slot) = random.get_mut(name) {
            *slot = tensor.clone();
        }
    }
    random
}

/// Analyses, plans, runs and times `graph`.
pub fn bench_graph(
    graph: Graph,
    source: &str,
    device: &DeviceProfile,
    analyze: &AnalyzeOptions,
    options: &BenchOptions,
) -> Result<BenchReport, BenchError> {
    // Predict with the ceilings measured at the thread count the run uses.
    let device = &device.for_threads(options.threads.max(1) as u32);
    let prepared = analysis::Prepared::new(graph, &analyze.bindings)?;
    let measured;
    let analyze = if options.measure_algorithms
        && device.kind == DeviceKind::Cpu
        && analyze.conv_algorithms == AlgorithmPolicy::Auto
    {
        let shapes = analysis::winograd_candidates(&prepared);
        let table = exec::conv_timing::ensure(
            &device.id,
            &shapes,
            options.threads.max(1),
            exec::conv_timing::evict_bytes(device.largest_cache_bytes()),
        );
        measured = AnalyzeOptions {
            measured_algorithms: Some(std::sync::Arc::new(table)),
            ..analyze.clone()
        };
        &measured
    } else {
        analyze
    };
    let analysis = analysis::analyze_prepared(&prepared, source, device, analyze)?;
    let mut plan_options = exec::tune::plan_options(options.threads, &device.id, options.tune);
    // Run the algorithms the analysis costed, so the bound is the bound of what runs (a device
    // that is not a CPU decides nothing: the plan then chooses on its own).
    // A decode loop slides each step's caches into the next step's inputs in place.
    plan_options.keep_inputs = options.decode;
    plan_options.nhwc_pairs = options.nhwc_pairs;
    plan_options.conv_algorithms = match analyze.conv_algorithms {
        AlgorithmPolicy::DirectOnly => exec::ConvAlgorithms::DirectOnly,
        AlgorithmPolicy::Auto | AlgorithmPolicy::Only(_) if device.kind == DeviceKind::Cpu => {
            exec::ConvAlgorithms::from_analysis(&analysis)
        }
        AlgorithmPolicy::Auto | AlgorithmPolicy::Only(_) => exec::ConvAlgorithms::Auto(None),
    };
    let plan = build_plan(
        &prepared.graph,
        &prepared.order,
        &prepared.states,
        &plan_options,
    )?;
    if options.tune {
        exec::tune::save(&plan_options, &device.id);
    }
    let mut inputs = with_given(random_inputs(&plan, options.seed), &options.given_inputs);
    let decode = options
        .decode
        .then(|| decode::DecodeLoop::new(&plan))
        .transpose()
        .map_err(BenchError::Decode)?;
    let cache_length = decode.as_ref().map(decode::DecodeLoop::cache_length);
    let mut workspace = plan.workspace();
    // A decode step's outputs become the next step's inputs, outside the timed region and
    // inside the workspace, as a runtime with an in-place cache keeps them: the caches slide
    // from their `present` slots into their `past` slots (then staged), only the token is
    // staged with each run.
    let feed = |workspace: &mut exec::plan::Workspace,
                inputs: &mut std::collections::HashMap<String, exec::RtTensor>|
     -> Result<(), BenchError> {
        if let Some(decode) = &decode {
            decode
                .feed(&plan, workspace, inputs)
                .map_err(BenchError::Decode)?;
        }
        Ok(())
    };
    for _ in 0..options.warmup.max(1) {
        plan.stage_given_inputs(&mut workspace, &inputs)?;
        plan.run_staged(&mut workspace, None)?;
        feed(&mut workspace, &mut inputs)?;
    }
    let exchange_before = (options.check_exchange && options.threads > 1)
        .then(|| crate::probe::exchange_now(options.threads));
    // End-to-end latency with per-op timing off, then a second series with it on.
    let mut runs = options.runs.max(1);
    let mut latencies = Vec::with_capacity(runs);
    // One buffer for every bench of the process (calibration runs hundreds): mapping it anew
    // each time cost more system time than the runs.
    static EVICT: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    let mut evict = EVICT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if evict.len() < options.evict_bytes {
        evict.resize(options.evict_bytes, 0);
    }
    let evict = &mut evict[..options.evict_bytes];
    let cold_weights = !evict.is_empty();
    let end_to_end_runs = if options.per_op_only { 0 } else { runs };
    // The core clock after each run that gives the latency, outside its timed region.
    let mut clock_samples: Vec<f64> = Vec::with_capacity(runs);
    let mut fma_samples: Vec<f64> = Vec::with_capacity(1);
    // Inputs are staged before the clock starts (see `Plan::run_staged`).
    let series_started = std::time::Instant::now();
    let mut end_to_end_done = 0;
    while end_to_end_done < end_to_end_runs
        || (end_to_end_runs > 0
            && end_to_end_done < MAX_RUNS
            && series_started.elapsed().as_secs_f64() < options.min_time_s)
    {
        end_to_end_done += 1;
        if cold_weights {
            exec::conv_timing::evict_caches(evict, options.threads);
            workspace.warm();
        }
        plan.stage_given_inputs(&mut workspace, &inputs)?;
        let start = std::time::Instant::now();
        plan.run_staged(&mut workspace, None)?;
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
        clock_samples.extend(crate::probe::chain_clock_now());
        feed(&mut workspace, &mut inputs)?;
    }
    // The per-op series as long as the end-to-end one went.
    runs = runs.max(end_to_end_done);
    let steps = plan.steps();
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); steps.len()];
    let mut timings = exec::RunTimings::default();
    for _ in 0..runs {
        if cold_weights {
            exec::conv_timing::evict_caches(evict, options.threads);
            workspace.warm();
        }
        plan.stage_given_inputs(&mut workspace, &inputs)?;
        plan.run_staged(&mut workspace, Some(&mut timings))?;
        for (i, &t) in timings.step_seconds.iter().enumerate() {
            per_step[i].push(t);
        }
        if options.per_op_only {
            latencies.push(timings.step_seconds.iter().sum::<f64>() * 1e3);
        }
        feed(&mut workspace, &mut inputs)?;
    }
    if clock_samples.is_empty() {
        // Per-op timings only (a calibration point: one chain, not one per run, in a budget
        // of a minute for about 1200 points).
        clock_samples.extend(crate::probe::chain_clock_now());
    }
    // One FMA block, after the last run: on a core that lowers its clock for a while after
    // 512-bit FMAs, a block between runs would slow the next run.
    fma_samples.extend(crate::probe::fma_gflops_now());
    let core_exchange =
        exchange_before.map(|before| exchange_check(device, before, options.threads));
    let mut ops = Vec::with_capacity(steps.len());
    for (step, mut samples) in steps.into_iter().zip(per_step) {
        let node = &analysis.nodes[step.node_index];
        if node.status != NodeStatus::Costed {
            continue;
        }
        let measured_s = median(&mut samples).max(1e-9);
        let bytes = node.bytes_read + node.bytes_written;
        ops.push(OpMeasurement {
            node_index: step.node_index,
            name: step.name,
            op_type: step.op_type,
            measured_s,
            predicted_s: node.predicted_s,
            flops: node.flops,
            bytes,
            measured_gflops: node.flops as f64 / measured_s / 1e9,
            measured_gbs: bytes as f64 / measured_s / 1e9,
            roofline_fraction: node.predicted_s / measured_s,
            prediction_error: (node.predicted_s - measured_s) / measured_s,
            expected_s: node.expected_s,
            expected_error: node.expected_s.map(|e| (e - measured_s) / measured_s),
        });
    }
    let mut abs_errors: Vec<f64> = ops.iter().map(|o| o.prediction_error.abs()).collect();
    abs_errors.sort_by(f64::total_cmp);
    let mut expected_abs_errors: Vec<f64> = ops
        .iter()
        .filter_map(|o| o.expected_error.map(f64::abs))
        .collect();
    expected_abs_errors.sort_by(f64::total_cmp);
    let expected_ms = analysis.summary.expected_latency_s.map(|s| s * 1e3);
    let mut sorted_latency = latencies.clone();
    sorted_latency.sort_by(f64::total_cmp);
    let median_ms = percentile(&sorted_latency, 0.5);
    let predicted_ms = analysis.summary.predicted_latency_s * 1e3;
    let clock = run_clock(device, &mut clock_samples, &mut fma_samples);
    Ok(BenchReport {
        schema: BENCH_SCHEMA.to_string(),
        schema_version: BENCH_SCHEMA_VERSION,
        threads: options.threads,
        runs,
        latency_ms: Latency {
            median: median_ms,
            min: sorted_latency[0],
            max: sorted_latency[sorted_latency.len() - 1],
        },
        predicted_latency_ms: predicted_ms,
        errors: ErrorSummary {
            median_abs_error: percentile(&abs_errors, 0.5),
            p90_abs_error: percentile(&abs_errors, 0.9),
            end_to_end_error: (predicted_ms - median_ms) / median_ms,
            expected_median_abs_error: (!expected_abs_errors.is_empty())
                .then(|| percentile(&expected_abs_errors, 0.5)),
            expected_p90_abs_error: (!expected_abs_errors.is_empty())
                .then(|| percentile(&expected_abs_errors, 0.9)),
            expected_end_to_end_error: expected_ms.map(|e| (e - median_ms) / median_ms),
        },
        expected_latency_ms: expected_ms,
        decode: cache_length
            .zip(decode.as_ref())
            .map(|(cache_length, decode)| {
                let batch = decode.batch;
                DecodeInfo {
                    steps: 2 * runs + options.warmup.max(1),
                    cache_length,
                    batch,
                    time_per_token_ms: median_ms,
                    tokens_per_s: batch as f64 / (median_ms / 1e3),
                }
            }),
        ops,
        peak_activation_bytes: plan.peak_activation_bytes,
        unplanned_activation_bytes: plan.unplanned_activation_bytes,
        weights_bytes: plan.weights_bytes,
        nhwc_pairs: plan.nhwc_pairs(),
        kernel_isa: {
            let gemm = crate::kernels::gemm::GemmConfig::default();
            let b = gemm.blocking;
            format!(
                "gemm {} (blocking mc {} kc {} nc {} nc_short {}), vector kernels {}",
                gemm.isa.name(),
                b.mc,
                b.kc,
                b.nc,
                b.nc_short,
                crate::kernels::simd::isa_level().name()
            )
        },
        core_exchange,
        clock,
        analysis,
    })
}

/// The runs' clock and FMA rate (medians of the samples; `None` when no chain could be timed)
/// next to the calibration's.
fn run_clock(
    device: &DeviceProfile,
    samples: &mut [f64],
    fma_samples: &mut [f64],
) -> Option<RunClock> {
    if samples.is_empty() {
        return None;
    }
    let calibration = device.calibration.as_ref();
    Some(RunClock {
        run_hz: median(samples),
        calibration_hz: calibration.and_then(|c| c.clock_hz),
        run_fma_gflops: (!fma_samples.is_empty()).then(|| median(fma_samples)),
        calibration_fma_gflops: calibration.and_then(|c| c.fma_gflops),
    })
}

/// Measures the exchange again after the runs and judges both against the figure the device's
/// multi-thread predictions were measured in.
fn exchange_check(
    device: &DeviceProfile,
    before: Option<crate::probe::ExchangeRecord>,
    threads: usize,
) -> ExchangeCheck {
    let after = crate::probe::exchange_now(threads);
    judge_exchange(device, before, after)
}

/// The check from its two measurements (pure, for the tests).
fn judge_exchange(
    device: &DeviceProfile,
    before: Option<crate::probe::ExchangeRecord>,
    after: Option<crate::probe::ExchangeRecord>,
) -> ExchangeCheck {
    let calibrated = device.calibration.as_ref().and_then(|c| c.exchange.clone());
    let probed = device
        .probe
        .as_ref()
        .and_then(|p| p.dispatch.exchange.clone());
    let (reference, reference_source) = match (calibrated, probed) {
        (Some(c), _) => (Some(c), Some("calibration".to_string())),
        (None, Some(p)) => (Some(p), Some("probe".to_string())),
        (None, None) => (None, None),
    };
    let slowdown = reference.as_ref().and_then(|reference| {
        [&before, &after]
            .into_iter()
            .flatten()
            .map(|now| now.slowdown_against(reference))
            .reduce(f64::max)
    });
    let shared_now = [&before, &after]
        .into_iter()
        .flatten()
        .filter(|now| now.shares_a_core())
        .filter_map(|now| now.compute_share)
        .reduce(f64::min);
    let shared_then = reference.as_ref().filter(|r| r.shares_a_core());
    let warning = match (&reference, slowdown) {
        (Some(reference), _) if shared_now.is_some() && !reference.shares_a_core() => {
            Some(format!(
                "the two threads shared one physical core during this run (SMT siblings: an FMA \
                 block on both at once ran at {:.2} of its rate alone), while the {} figures \
                 were measured on separate cores: compute-bound multi-thread ops took up to \
                 twice their predicted time",
                shared_now.unwrap_or(1.0),
                reference_source.as_deref().unwrap_or("device"),
            ))
        }
        (Some(_), _) if shared_then.is_some() && shared_now.is_none() => Some(format!(
            "the {} figures were measured with the two threads sharing one physical core (SMT \
             siblings), and this run had separate cores: multi-thread predictions are slow for \
             this placement; measure them again",
            reference_source.as_deref().unwrap_or("device"),
        )),
        (Some(reference), Some(slowdown)) if slowdown >= EXCHANGE_MOVED => {
            let now = [&before, &after]
                .into_iter()
                .flatten()
                .max_by(|a, b| a.round_trip_s.total_cmp(&b.round_trip_s));
            now.map(|now| {
                format!(
                    "the cores exchanged data {slowdown:.1}x slower during this run than when the \
                     {} figures were measured ({:.0} ns round trip and {:.0} GB/s against {:.0} ns \
                     and {:.0} GB/s): the threads ran on cores farther apart (another core \
                     complex or socket; a host moving vCPUs), so multi-thread times are longer \
                     than predicted for the placement measured",
                    reference_source.as_deref().unwrap_or("device"),
                    now.round_trip_s * 1e9,
                    now.read_gbs,
                    reference.round_trip_s * 1e9,
                    reference.read_gbs
                )
            })
        }
        (Some(reference), Some(slowdown)) if slowdown <= 1.0 / EXCHANGE_MOVED => Some(format!(
            "the cores exchanged data {:.1}x faster during this run than when the {} figures \
                 were measured ({:.0} ns and {:.0} GB/s then): those were measured with the \
                 threads on cores farther apart (a host moving vCPUs), so multi-thread \
                 predictions are slow for this placement; measure them again",
            1.0 / slowdown,
            reference_source.as_deref().unwrap_or("device"),
            reference.round_trip_s * 1e9,
            reference.read_gbs
        )),
        _ => None,
    };
    ExchangeCheck {
        before,
        after,
        reference,
        reference_source,
        slowdown,
        warning,
    }
}

/// Slowdown of the core exchange (`ExchangeRecord::slowdown_against`) from which a run is said
/// to have had another placement of its threads than the prediction's.
pub const EXCHANGE_MOVED: f64 = 1.8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::calibration::Calibration;
    use crate::probe::ExchangeRecord;

    fn record(ns: f64, gbs: f64) -> ExchangeRecord {
        ExchangeRecord::with_figures(ns, gbs)
    }

    /// A full calibration with no tables and no measured figures.
    fn empty_calibration() -> Calibration {
        Calibration {
            tool_version: String::new(),
            measured_at: String::new(),
            mode: "full".into(),
            wall_time_s: 0.0,
            method: String::new(),
            tables: Vec::new(),
            exchange: None,
            warnings: Vec::new(),
            handoff: Vec::new(),
            clock_hz: None,
            fma_gflops: None,
        }
    }

    /// `min_time_s` lengthens both series past `runs` until that long has been timed, and 0
    /// leaves them at `runs`.
    #[test]
    fn a_minimum_time_runs_past_the_run_count() {
        let model = crate::builtin::find("builtin:tinycnn").expect("built-in model");
        let analyze = AnalyzeOptions {
            bindings: (model.default_bindings)(),
            ..AnalyzeOptions::default()
        };
        let device = crate::device::catalog()[0].to_profile();
        let bench = |min_time_s: f64, per_op_only: bool| {
            let graph = model
                .graph(crate::builtin::WeightFill::Random(0))
                .expect("built-in imports");
            let options = BenchOptions {
                runs: 2,
                min_time_s,
                per_op_only,
                check_exchange: false,
                ..BenchOptions::default()
            };
            bench_graph(graph, "tinycnn", &device, &analyze, &options).expect("bench runs")
        };
        assert_eq!(bench(0.0, false).runs, 2);
        // A run of this model (and its clock sample) takes well under 0.1 s on any CPU that
        // runs the tests, so 0.2 s holds more than two.
        assert!(bench(0.2, false).runs > 2);
        // Without an end-to-end series the per-op series keeps its count (the calibration's).
        assert_eq!(bench(0.2, true).runs, 2);
    }

    /// The medians of the samples, next to the calibration's figures where it has them; no
    /// samples, no figure.
    #[test]
    fn the_runs_clock_is_reported_next_to_the_calibrations() {
        let mut device = crate::device::catalog()[0].to_profile();
        let mut samples = vec![2.9e9, 3.1e9, 2.7e9];
        let mut fma = vec![40.0, 36.0, 38.0];
        let alone = run_clock(&device, &mut samples, &mut fma).unwrap();
        assert_eq!((alone.run_hz, alone.run_fma_gflops), (2.9e9, Some(38.0)));
        assert!(alone.calibration_hz.is_none() && alone.calibration_fma_gflops.is_none());
        device.calibration = Some(Calibration {
            clock_hz: Some(2.5e9),
            fma_gflops: Some(34.2),
            ..empty_calibration()
        });
        let both = run_clock(&device, &mut samples, &mut []).unwrap();
        assert_eq!(both.calibration_hz, Some(2.5e9));
        assert_eq!(both.calibration_fma_gflops, Some(34.2));
        assert!(both.run_fma_gflops.is_none());
        assert!(run_clock(&device, &mut [], &mut fma).is_none());
    }

    /// The calibration's exchange is the reference when it has one; a run whose check after
    /// the runs is 4× slower is flagged with both figures, one within the quiet spread is not,
    /// and without any reference nothing is judged.
    #[test]
    fn a_run_with_the_cores_placed_apart_is_flagged() {
        let mut device = crate::device::catalog()[0].to_profile();
        let quiet = judge_exchange(&device, Some(record(60.0, 70.0)), Some(record(65.0, 68.0)));
        assert!(quiet.reference.is_none() && quiet.slowdown.is_none());
        assert!(quiet.warning.is_none());
        device.calibration = Some(Calibration {
            exchange: Some(record(60.0, 70.0)),
            ..empty_calibration()
        });
        let apart = judge_exchange(&device, Some(record(62.0, 69.0)), Some(record(350.0, 25.0)));
        assert_eq!(apart.reference_source.as_deref(), Some("calibration"));
        assert!((apart.slowdown.unwrap() - 4.041).abs() < 1e-3);
        let warning = apart.warning.expect("flagged");
        assert!(
            warning.contains("350 ns") && warning.contains("60 ns"),
            "{warning}"
        );
        let near = judge_exchange(&device, Some(record(99.0, 66.0)), None);
        assert!(near.slowdown.unwrap() < EXCHANGE_MOVED && near.warning.is_none());
        // A calibration timed apart, judged from a quiet run: said the other way round.
        device.calibration.as_mut().unwrap().exchange = Some(record(350.0, 25.0));
        let quiet = judge_exchange(&device, Some(record(60.0, 70.0)), Some(record(62.0, 69.0)));
        let warning = quiet.warning.expect("flagged");
        assert!(
            warning.contains("faster") && warning.contains("350 ns"),
            "{warning}"
        );
        // SMT siblings: flagged against a calibration on separate cores however fast their
        // exchange, and the other way round.
        let sharing = |ns, gbs, share| ExchangeRecord {
            compute_share: Some(share),
            ..record(ns, gbs)
        };
        device.calibration.as_mut().unwrap().exchange = Some(sharing(68.0, 67.0, 0.98));
        let siblings = judge_exchange(&device, Some(sharing(27.0, 114.0, 0.51)), None);
        let warning = siblings.warning.expect("flagged");
        assert!(
            warning.contains("0.51") && warning.contains("SMT"),
            "{warning}"
        );
        let separate = judge_exchange(&device, Some(sharing(66.0, 69.0, 0.97)), None);
        assert!(separate.warning.is_none(), "{:?}", separate.warning);
        device.calibration.as_mut().unwrap().exchange = Some(sharing(27.0, 114.0, 0.51));
        let warning = judge_exchange(&device, Some(sharing(66.0, 69.0, 0.97)), None)
            .warning
            .expect("flagged");
        assert!(
            warning.contains("measured with the two threads sharing"),
            "{warning}"
        );
    }
}
