//! The cost model's choices that need a whole analysis: which roof bounds an op on several
//! threads, and which features its calibration lookup matches on.

use std::path::Path;

use roofline::analysis::{analyze_graph, import, AnalyzeOptions};
use roofline::builtin::{ConvSpec, GraphBuilder, SigDim, WeightFill};
use roofline::device::probe_record::ProbeRecord;
use roofline::device::{
    ComputeCeiling, DeviceKind, DeviceProfile, MemoryCeiling, MemoryLevel, Precision,
    ProfileSource, PROFILE_SCHEMA_VERSION,
};

/// A probed two-thread profile: the pool's fork-join costs 1 µs, one thread's call 2 ns;
/// two threads stream DRAM at twice one thread's rate.
fn two_thread_profile() -> DeviceProfile {
    let mut record = ProbeRecord::default();
    record.dispatch.threads = 2;
    record.dispatch.call_s = 2e-9;
    let compute = |threads: u32, flops: f64| ComputeCeiling {
        precision: Precision::Fp32,
        flops_per_s: flops,
        threads: Some(threads),
        theoretical_flops_per_s: None,
        source: String::new(),
    };
    let dram = |threads: u32, bytes_per_s: f64| MemoryCeiling {
        level: MemoryLevel::Dram,
        bytes_per_s,
        write_bytes_per_s: None,
        capacity_bytes: None,
        threads: Some(threads),
        source: String::new(),
    };
    DeviceProfile {
        schema_version: PROFILE_SCHEMA_VERSION,
        id: "local".into(),
        name: "test cpu".into(),
        kind: DeviceKind::Cpu,
        source: ProfileSource::Probed,
        compute: vec![compute(1, 100e9), compute(2, 200e9)],
        memory: vec![dram(1, 10e9), dram(2, 20e9)],
        launch_overhead_s: 1e-6,
        l2_bytes: None,
        launch_overhead_source: String::new(),
        sources: vec![],
        notes: String::new(),
        probe: Some(record),
        calibration: None,
        single_thread: None,
    }
}

fn add_bound(elements: i64, device: &DeviceProfile) -> f64 {
    let mut b = GraphBuilder::new(WeightFill::Zeros);
    let x = b.input("x", 1, &[SigDim::Fixed(elements)]);
    let y = b.input("y", 1, &[SigDim::Fixed(elements)]);
    let sum = b.add(&x, &y);
    b.output(&sum, 1, &[SigDim::Fixed(elements)]);
    let proto = b.finish("add");
    let graph = import::import_model(&proto, Path::new("."), Path::new("add")).unwrap();
    let analysis = analyze_graph(graph, "add", device, &AnalyzeOptions::default()).unwrap();
    let add = analysis.nodes.iter().find(|n| n.op_type == "Add").unwrap();
    add.predicted_s
}

#[test]
fn an_op_too_small_to_split_is_bounded_by_one_thread() {
    let profile = two_thread_profile();
    let two = profile.for_threads(2);
    assert!(two.single_thread.is_some());
    assert!(profile.for_threads(1).single_thread.is_none());
    // Resolved again (compress, then each advise it runs), it keeps the one-thread view.
    assert_eq!(two.for_threads(2).single_thread, two.single_thread);
    // 256 floats: 3 KiB at 10 GB/s + a 2 ns call on one thread, against 3 KiB at 20 GB/s
    // plus the 1 µs fork-join on two.
    let bytes = 3.0 * 256.0 * 4.0;
    let small = add_bound(256, &two);
    assert!((small - (bytes / 10e9 + 2e-9)).abs() < 1e-12, "{small}");
    // 4 Mi floats: the two-thread roof is the lower bound (48 MiB at 20 GB/s + 1 µs).
    let bytes = 3.0 * 4.0 * (4 << 20) as f64;
    let large = add_bound(4 << 20, &two);
    assert!((large - (bytes / 20e9 + 1e-6)).abs() < 1e-9, "{large}");
    // Without the one-thread view (a catalogue device) the fork-join stays.
    let mut catalogue_like = two.clone();
    catalogue_like.single_thread = None;
    assert!(add_bound(256, &catalogue_like) > 1e-6);
}

#[test]
fn convolutions_are_matched_on_output_channels_depthwise_ones_on_row_width_and_on_taps() {
    let mut b = GraphBuilder::new(WeightFill::Zeros);
    let x = b.input("x", 1, &[1, 8, 16, 16].map(SigDim::Fixed));
    let dense = b.conv(&x, 8, ConvSpec::new(4, 3, 1));
    let depthwise = b.conv(
        &dense,
        4,
        ConvSpec {
            group: 4,
            ..ConvSpec::new(4, 3, 1)
        },
    );
    b.output(&depthwise, 1, &[1, 4, 16, 16].map(SigDim::Fixed));
    let proto = b.finish("convs");
    let graph = import::import_model(&proto, Path::new("."), Path::new("convs")).unwrap();
    let profile = two_thread_profile().for_threads(1);
    let analysis = analyze_graph(graph, "convs", &profile, &AnalyzeOptions::default()).unwrap();
    // (channels, row width): the depthwise one is matched on its 16-wide rows instead.
    let extents: Vec<(f64, f64)> = analysis
        .nodes
        .iter()
        .filter(|n| n.op_type == "Conv")
        .map(|n| n.features.unwrap())
        .map(|f| (f.log2_output_channels, f.log2_output_width))
        .collect();
    assert_eq!(extents, [(2.0, 0.0), (0.0, 4.0)]);
    // Both are 3×3 windows.
    for node in analysis.nodes.iter().filter(|n| n.op_type == "Conv") {
        let taps = node.features.unwrap().log2_taps;
        assert!((taps - 9f64.log2()).abs() < 1e-12, "{taps}");
    }
}

/// Two 1×1 convolutions on two threads: one of 33 kFLOP, which the tool's kernels keep on one
/// thread (`kernels::parallel::compute_threads`), one of 8.4 MFLOP, which they split. The
/// pointwise tables say one thread runs at 3× its bound and two at 1.5×.
#[test]
fn an_op_the_kernels_keep_on_one_thread_is_expected_from_the_one_thread_table() {
    use roofline::device::calibration::{
        Calibration, CalibrationPoint, ClassTable, KernelClass, ShapeFeatures,
    };
    use roofline::kernels::parallel::compute_threads;
    assert_eq!(compute_threads(2, 2.0 * 8.0 * 8.0 * 256.0), 1);
    assert_eq!(compute_threads(2, 2.0 * 64.0 * 64.0 * 1024.0), 2);
    let table = |threads: u32, ratio: f64| ClassTable {
        class: KernelClass::Pointwise,
        threads,
        points: vec![CalibrationPoint {
            shape: "pointwise".into(),
            features: ShapeFeatures::new(1 << 20, 1 << 16, 1 << 12, 1 << 12),
            bound_s: 1e-6,
            measured_s: ratio * 1e-6,
            op_type: "Conv".into(),
        }],
        fit_error: None,
        fixed_s: 0.0,
    };
    let calibration = |mode: &str| Calibration {
        tool_version: String::new(),
        measured_at: String::new(),
        mode: mode.into(),
        wall_time_s: 0.0,
        method: String::new(),
        tables: vec![table(1, 3.0), table(2, 1.5)],
        exchange: None,
        warnings: vec![],
        handoff: vec![],
        clock_hz: None,
        fma_gflops: None,
    };
    let analyse = |profile: &DeviceProfile| {
        let mut b = GraphBuilder::new(WeightFill::Zeros);
        let small = b.input("small", 1, &[1, 8, 16, 16].map(SigDim::Fixed));
        let large = b.input("large", 1, &[1, 64, 32, 32].map(SigDim::Fixed));
        let small = b.conv(&small, 8, ConvSpec::new(8, 1, 1));
        let large = b.conv(&large, 64, ConvSpec::new(64, 1, 1));
        b.output(&small, 1, &[1, 8, 16, 16].map(SigDim::Fixed));
        b.output(&large, 1, &[1, 64, 32, 32].map(SigDim::Fixed));
        let proto = b.finish("two");
        let graph = import::import_model(&proto, Path::new("."), Path::new("two")).unwrap();
        let analysis = analyze_graph(graph, "two", profile, &AnalyzeOptions::default()).unwrap();
        let convs: Vec<(f64, Option<f64>)> = analysis
            .nodes
            .iter()
            .filter(|n| n.op_type == "Conv")
            .map(|n| (n.predicted_s, n.expected_s))
            .collect();
        (convs[0], convs[1])
    };
    let mut profile = two_thread_profile();
    profile.calibration = Some(calibration("full"));
    let ((small_alone, _), _) = analyse(&profile.for_threads(1));
    let ((_, small), (large_bound, large)) = analyse(&profile.for_threads(2));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(
        close(small.unwrap(), 3.0 * small_alone),
        "{small:?} {small_alone}"
    );
    assert!(
        close(large.unwrap(), 1.5 * large_bound),
        "{large:?} {large_bound}"
    );
    // Another runtime's tables (`calibrate --from-profile`) do not follow the tool's rule.
    profile.calibration = Some(calibration("onnxruntime"));
    let ((small_bound, small), _) = analyse(&profile.for_threads(2));
    assert!(
        close(small.unwrap(), 1.5 * small_bound),
        "{small:?} {small_bound}"
    );
}

/// The advisor's "left alone" reasons cite the ridge of the roofs that bound each op, not the
/// device's DRAM ridge: a convolution whose data lives in a cache with a ridge of 1 FLOP/B is
/// compute-bound at an intensity under DRAM's 10 (silero-vad's STFT convolution was reported
/// "compute-bound, intensity 1.5 above the ridge at 4.3").
#[test]
fn left_alone_reasons_cite_the_ridge_that_bounds_the_op() {
    use roofline::advisor::{advise, AdviseOptions};
    let mut profile = two_thread_profile().for_threads(1);
    // L2 of 64 MiB at 100 GB/s: every tensor below fits, ridge 100 GFLOP/s ÷ 100 GB/s = 1.
    profile.memory.push(MemoryCeiling {
        level: MemoryLevel::L2,
        bytes_per_s: 100e9,
        write_bytes_per_s: None,
        capacity_bytes: Some(64 << 20),
        threads: Some(1),
        source: String::new(),
    });
    let mut b = GraphBuilder::new(WeightFill::Random(3));
    let x = b.input("x", 1, &[1, 8, 32, 32].map(SigDim::Fixed));
    // 1×1 convolution 8 → 8: intensity about 2 FLOP/B, between the two ridges.
    let y = b.conv(&x, 8, ConvSpec::new(8, 1, 1));
    b.output(&y, 1, &[1, 8, 32, 32].map(SigDim::Fixed));
    let proto = b.finish("pointwise");
    let graph = import::import_model(&proto, Path::new("."), Path::new("pointwise")).unwrap();
    let (report, _) = advise(
        graph,
        "pointwise",
        &profile,
        &AnalyzeOptions::default(),
        &AdviseOptions::default(),
    )
    .unwrap();
    let number_after = |text: &str, key: &str| -> f64 {
        let rest = &text[text.find(key).unwrap() + key.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap();
        rest[..end].parse().unwrap()
    };
    let mut checked = 0;
    for entry in &report.left_alone {
        let intensity = number_after(&entry.reason, "intensity ");
        if entry.reason.starts_with("compute-bound") {
            let ridge = number_after(&entry.reason, "its ridge at ");
            assert!(intensity >= ridge, "{}", entry.reason);
            assert!(ridge < 10.0, "the DRAM ridge was cited: {}", entry.reason);
            checked += 1;
        } else if entry.reason.starts_with("memory-bound (") {
            let ridge = number_after(&entry.reason, "its ridge ");
            assert!(intensity <= ridge, "{}", entry.reason);
            checked += 1;
        }
    }
    assert!(checked > 0, "{:?}", report.left_alone);
}
