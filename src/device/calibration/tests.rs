//! Tests of the calibration lookup: interpolation, siblings, levels, upgrades, validation.
use super::*;

fn point(work: u64, bytes: u64, bound_s: f64, measured_s: f64) -> CalibrationPoint {
    CalibrationPoint {
        shape: format!("{work}/{bytes}"),
        features: ShapeFeatures::new(work, bytes, 0, 1),
        bound_s,
        measured_s,
        op_type: String::new(),
    }
}

/// A full-mode calibration of `tables`, its other fields blank.
fn calibration_of(tables: Vec<ClassTable>) -> Calibration {
    Calibration {
        tool_version: String::new(),
        measured_at: String::new(),
        mode: "full".into(),
        wall_time_s: 1.0,
        method: String::new(),
        tables,
        exchange: None,
        warnings: Vec::new(),
        handoff: Vec::new(),
        clock_hz: None,
        fma_gflops: None,
    }
}

fn table(points: Vec<CalibrationPoint>) -> ClassTable {
    ClassTable {
        class: KernelClass::Gemm,
        threads: 1,
        points,
        fit_error: None,
        fixed_s: 0.0,
    }
}

#[test]
fn an_op_far_from_its_class_is_predicted_from_a_nearer_sibling_class() {
    let at = |class: KernelClass, work: u64, ratio: f64| ClassTable {
        class,
        threads: 1,
        points: vec![point(work, 1 << 20, 1.0, ratio)],
        fit_error: None,
        fixed_s: 0.0,
    };
    let calibration = calibration_of;
    let query = ShapeFeatures::new(1 << 28, 1 << 20, 0, 1);
    let expected = |c: &Calibration| c.expected_s(KernelClass::Gemm, "MatMul", 1, &query, 1.0);
    // Its own table's only point is 8 doublings of work away; a 1×1 convolution of its
    // size ran at 1.4× its bound.
    let far = calibration(vec![
        at(KernelClass::Gemm, 1 << 20, 2.1),
        at(KernelClass::Pointwise, 1 << 28, 1.4),
    ]);
    assert!((expected(&far).unwrap() - 1.4).abs() < 1e-9);
    // Within three doublings its own class decides, whatever a sibling holds.
    let near = calibration(vec![
        at(KernelClass::Gemm, 1 << 26, 2.1),
        at(KernelClass::Pointwise, 1 << 28, 1.4),
    ]);
    assert!((expected(&near).unwrap() - 2.1).abs() < 1e-9);
    // Classes that are not one kernel never borrow.
    let unrelated = calibration(vec![
        at(KernelClass::Softmax, 1 << 20, 3.0),
        at(KernelClass::Elementwise, 1 << 28, 1.1),
    ]);
    let softmax = unrelated.expected_s(KernelClass::Softmax, "Softmax", 1, &query, 1.0);
    assert!((softmax.unwrap() - 3.0).abs() < 1e-9);
}

#[test]
fn output_channels_count_only_where_both_sides_have_them() {
    let base = ShapeFeatures::new(1 << 20, 1 << 16, 1 << 12, 1 << 10);
    let few = base.with_output_channels(16);
    let many = base.with_output_channels(256);
    assert!((few.distance_squared(&many) - 16.0).abs() < 1e-9);
    // A point saved without the feature (or an op that is not a convolution) is compared
    // on the other features alone.
    assert_eq!(few.distance_squared(&base), 0.0);
    assert_eq!(base.with_output_channels(0), base);
    // The nearer channel count wins between points of equal size.
    let with_channels = |channels: u64, ratio: f64| CalibrationPoint {
        features: base.with_output_channels(channels),
        ..point(1 << 20, 1 << 16, 1.0, ratio)
    };
    let t = table(vec![with_channels(16, 4.0), with_channels(256, 2.0)]);
    let ratio = t.ratio_at("", &base.with_output_channels(24)).unwrap();
    assert!(ratio > 3.5, "{ratio}");
}

#[test]
fn window_taps_tell_a_1x1_layer_from_a_3x3_one_of_the_same_size() {
    let base = ShapeFeatures::new(1 << 23, 1 << 20, 1 << 14, 1 << 17).with_output_channels(136);
    let (one, nine) = (base.with_taps(1), base.with_taps(9));
    // A 1×1 window is present (not "absent"); 1×1 against 3×3 is log2(9) doublings apart.
    assert!(one.log2_taps > 0.0);
    assert!((one.distance_squared(&nine) - 9f64.log2().powi(2)).abs() < 1e-9);
    assert_eq!(one.distance_squared(&base), 0.0);
    assert_eq!(base.with_taps(0), base);
    // Grouped points of equal work: 1×1 at 1.6× the bound, 3×3 at 3×; a 1×1 query a little
    // larger than both takes the 1×1 ratio.
    let with_taps = |taps: u64, ratio: f64| CalibrationPoint {
        features: base.with_taps(taps),
        ..point(1 << 23, 1 << 20, 1.0, ratio)
    };
    let t = table(vec![
        with_taps(1, 1.6),
        with_taps(9, 3.0),
        with_taps(9, 3.1),
    ]);
    let query = ShapeFeatures::new(1 << 24, 1 << 20, 1 << 14, 1 << 17)
        .with_output_channels(136)
        .with_taps(1);
    let ratio = t.ratio_at("", &query).unwrap();
    assert!(ratio < 2.0, "{ratio}");
    // Without the feature the three points are equally near: their geometric mean, 2.5.
    let blind = t.ratio_at("", &query.with_taps(0)).unwrap();
    assert!(blind > 2.3, "{blind}");
}

#[test]
fn a_depthwise_row_width_picks_points_of_its_plane_shape() {
    // Square planes (28 wide) at 3× the bound and a text-line plane (160 wide) at 1.7×, of
    // equal work and traffic: an op on 128-wide rows takes the long-row ratio.
    let base = ShapeFeatures::new(1 << 22, 1 << 20, 1 << 10, 1 << 17);
    let with_width = |width: u64, ratio: f64| CalibrationPoint {
        features: base.with_output_width(width),
        ..point(1 << 22, 1 << 20, 1.0, ratio)
    };
    let t = table(vec![with_width(28, 3.0), with_width(160, 1.7)]);
    let ratio = t.ratio_at("", &base.with_output_width(128)).unwrap();
    assert!(ratio < 1.9, "{ratio}");
    // Doublings count like the other features'; without the feature on one side (a point saved
    // before it existed, an op that is not depthwise) only the other features are compared.
    let narrow = base.with_output_width(16);
    assert!((narrow.distance_squared(&base.with_output_width(64)) - 4.0).abs() < 1e-9);
    assert_eq!(narrow.distance_squared(&base), 0.0);
    assert_eq!(base.with_output_width(0), base);
}

#[test]
fn a_fixed_cost_is_added_once_not_scaled_with_the_bound() {
    // A runtime whose ops cost 3 µs plus twice their bound: the ratio of the time above
    // the fixed cost is 2 everywhere, and an op a thousand times smaller than every point
    // is predicted at the fixed cost plus twice its bound, not at the larger ops'
    // measured ÷ bound times its bound.
    let fixed = 3e-6;
    let at = |work: u64, bound_s: f64| point(work, work, bound_s, fixed + 2.0 * bound_s);
    let mut t = table(vec![
        at(1 << 24, 1e-4),
        at(1 << 25, 2e-4),
        at(1 << 26, 4e-4),
    ]);
    t.fixed_s = fixed;
    let calibration = calibration_of(vec![t]);
    let tiny = ShapeFeatures::new(1 << 14, 1 << 14, 0, 1);
    let expected = calibration
        .expected_s(KernelClass::Gemm, "", 1, &tiny, 1e-7)
        .unwrap();
    assert!((expected - (fixed + 2e-7)).abs() < 1e-12, "{expected}");
    assert!(calibration.tables[0].leave_one_out().unwrap().median_abs < 1e-9);
    // Without it, the tiny op takes the nearest point's 2.03× and misses the fixed cost.
    let mut plain = calibration.clone();
    plain.tables[0].fixed_s = 0.0;
    let scaled = plain
        .expected_s(KernelClass::Gemm, "", 1, &tiny, 1e-7)
        .unwrap();
    assert!(scaled < 1e-6, "{scaled}");
    // A point quicker than the fixed cost keeps a positive ratio.
    assert!((point(1, 1, 1e-6, 2e-6).ratio_above(3e-6) - 0.2).abs() < 1e-12);
}

#[test]
fn depthwise_grid_points_take_their_kernel_size_key_on_upgrade() {
    let shaped = |shape: &str, ratio: f64| CalibrationPoint {
        shape: shape.to_string(),
        op_type: "Conv".to_string(),
        ..point(1 << 20, 1 << 20, 1.0, ratio)
    };
    let mut calibration = calibration_of(vec![ClassTable {
        class: KernelClass::Depthwise,
        threads: 1,
        points: vec![
            shaped("conv 144→144 3x3 s1 g144 56x56", 20.0),
            shaped("conv 240→240 5x5 s1 g240 28x28", 8.0),
            // A from-profile point names no size: it keeps the plain type.
            shaped("m.onnx: Conv_3 (Conv)", 5.0),
        ],
        fit_error: None,
        fixed_s: 0.0,
    }]);
    calibration.upgrade();
    let types: Vec<&str> = calibration.tables[0]
        .points
        .iter()
        .map(|p| p.op_type.as_str())
        .collect();
    assert_eq!(types, ["Conv depthwise 3x3", "Conv depthwise 5x5", "Conv"]);
    let features = ShapeFeatures::new(1 << 20, 1 << 20, 0, 1);
    let five = depthwise_op_type("Conv", 5, 5);
    let expected = calibration
        .expected_s(KernelClass::Depthwise, &five, 1, &features, 1.0)
        .unwrap();
    assert!((expected - 8.0).abs() < 1e-9, "{expected}");
    // A size no point has is predicted from the whole class.
    let seven = depthwise_op_type("Conv", 7, 7);
    let expected = calibration
        .expected_s(KernelClass::Depthwise, &seven, 1, &features, 1.0)
        .unwrap();
    assert!(expected > 5.0 && expected < 20.0, "{expected}");
}

#[test]
fn saved_hard_swish_chain_points_take_the_arithmetic_key_on_upgrade() {
    let shaped = |shape: &str| CalibrationPoint {
        shape: shape.to_string(),
        op_type: "ElementwiseChain".to_string(),
        ..point(1 << 20, 1 << 20, 1.0, 4.0)
    };
    let mut calibration = calibration_of(vec![ClassTable {
        class: KernelClass::Elementwise,
        threads: 1,
        points: vec![
            shaped("hard swish chain 4096"),
            shaped("gelu tanh chain 4096"),
        ],
        fit_error: None,
        fixed_s: 0.0,
    }]);
    calibration.upgrade();
    let types: Vec<&str> = calibration.tables[0]
        .points
        .iter()
        .map(|p| p.op_type.as_str())
        .collect();
    assert_eq!(types, ["ElementwiseChain arithmetic", "ElementwiseChain"]);
}

#[test]
fn upgrade_moves_lrn_points_out_of_the_norm_table() {
    let typed = |op: &str, work: u64, ratio: f64| CalibrationPoint {
        op_type: op.to_string(),
        ..point(work, 1 << 20, 1.0, ratio)
    };
    let mut calibration = calibration_of(vec![ClassTable {
        class: KernelClass::Norm,
        threads: 1,
        points: vec![typed("LRN", 1 << 20, 400.0), typed("LRN", 1 << 22, 450.0)],
        fit_error: None,
        fixed_s: 0.0,
    }]);
    let layer_norm = ShapeFeatures::new(1 << 21, 1 << 20, 0, 1);
    // Before: the only norm points are LRNs, and a LayerNormalization took their ratio.
    let before =
        calibration.expected_s(KernelClass::Norm, "LayerNormalization", 1, &layer_norm, 1.0);
    assert!(before.unwrap() > 100.0);
    calibration.upgrade();
    let norm = calibration.expected_s(KernelClass::Norm, "LayerNormalization", 1, &layer_norm, 1.0);
    assert_eq!(norm, None, "no norm point is left to predict from");
    let lrn = calibration.expected_s(KernelClass::Lrn, "LRN", 1, &layer_norm, 1.0);
    assert!((lrn.unwrap() - 424.26).abs() < 0.1, "{lrn:?}");
    assert_eq!(calibration.tables.len(), 1);
    assert!(calibration.tables[0].fit_error.is_some());
}

#[test]
fn winograd_variants_are_looked_up_apart_after_an_upgrade() {
    // A saved calibration with both variants under `Conv`: the F(2×2) points sit nearer
    // to the query than the F(4×4) one.
    let variant = |name: &str, work: u64, ratio: f64| CalibrationPoint {
        shape: format!("conv 96→24 3x3 s1 g1 160x160 ({name})"),
        op_type: "Conv".into(),
        ..point(work, 1 << 20, 1.0, ratio)
    };
    let mut calibration = calibration_of(vec![ClassTable {
        class: KernelClass::Winograd,
        threads: 1,
        points: vec![
            variant("winograd F(2x2,3x3)", 1 << 28, 2.5),
            variant("winograd F(2x2,3x3)", 1 << 29, 2.5),
            variant("winograd F(4x4,3x3)", 1 << 26, 5.0),
        ],
        fit_error: None,
        fixed_s: 0.0,
    }]);
    let f4 = algorithm_op_type("Conv", "winograd F(4x4,3x3)");
    assert_eq!(f4, "Conv winograd F(4x4,3x3)");
    let query = ShapeFeatures::new(1 << 28, 1 << 20, 0, 1);
    let expected = |c: &Calibration| c.expected_s(KernelClass::Winograd, &f4, 1, &query, 1.0);
    assert!(expected(&calibration).unwrap() < 3.0, "mixed with F(2×2)");
    calibration.upgrade();
    assert!((expected(&calibration).unwrap() - 5.0).abs() < 1e-9);
    let points = &calibration.tables[0].points;
    assert_eq!(points[0].op_type, "Conv winograd F(2x2,3x3)");
    assert!(calibration.tables[0].fit_error.is_some());
}

#[test]
fn an_exact_shape_returns_its_own_ratio() {
    let t = table(vec![
        point(1 << 20, 1 << 16, 1.0, 2.0),
        point(1 << 30, 1 << 20, 1.0, 1.25),
    ]);
    let features = ShapeFeatures::new(1 << 20, 1 << 16, 0, 1);
    assert!((t.ratio_at("", &features).unwrap() - 2.0).abs() < 1e-12);
}

#[test]
fn halfway_between_two_shapes_is_the_geometric_mean() {
    // Equal distances in log2 space: ratios 2 and 8 → exp(mean(ln 2, ln 8)) = 4.
    let t = table(vec![
        point(1 << 10, 1 << 10, 1.0, 2.0),
        point(1 << 14, 1 << 10, 1.0, 8.0),
    ]);
    let features = ShapeFeatures::new(1 << 12, 1 << 10, 0, 1);
    assert!((t.ratio_at("", &features).unwrap() - 4.0).abs() < 1e-9);
}

#[test]
fn the_nearer_shape_weighs_more() {
    let t = table(vec![
        point(1 << 10, 1 << 10, 1.0, 2.0),
        point(1 << 20, 1 << 10, 1.0, 8.0),
    ]);
    let near_small = ShapeFeatures::new(1 << 11, 1 << 10, 0, 1);
    let ratio = t.ratio_at("", &near_small).unwrap();
    assert!(ratio > 2.0 && ratio < 2.2, "{ratio}");
}

#[test]
fn a_point_at_the_same_memory_level_wins_over_a_same_size_one_at_another() {
    // A GEMV whose weights the bound charged at DRAM must not take the ratio of one whose
    // weights sat in L3, even at a size one doubling closer.
    let gemv = |size: u64, level: u8| ShapeFeatures::new(size, size, size, 1).at_levels(2, level);
    let mut in_l3 = point(1 << 24, 1 << 24, 1.0, 3.0);
    in_l3.features = gemv(1 << 24, 3);
    let mut in_dram = point(1 << 26, 1 << 26, 1.0, 1.2);
    in_dram.features = gemv(1 << 26, 4);
    let t = table(vec![in_l3, in_dram]);
    let query = gemv(1 << 25, 4);
    let ratio = t.ratio_at("", &query).unwrap();
    assert!(ratio < 1.5, "{ratio}");
}

#[test]
fn points_of_the_same_op_type_come_first() {
    let typed = |op: &str, work: u64, ratio: f64| CalibrationPoint {
        op_type: op.to_string(),
        ..point(work, 1 << 20, 1.0, ratio)
    };
    let t = table(vec![
        typed("Relu", 1 << 20, 1.1),
        typed("Relu", 1 << 22, 1.1),
        typed("Sigmoid", 1 << 21, 20.0),
        typed("Sigmoid", 1 << 23, 20.0),
    ]);
    let features = ShapeFeatures::new(1 << 21, 1 << 20, 0, 1);
    assert!((t.ratio_at("Relu", &features).unwrap() - 1.1).abs() < 1e-9);
    assert!((t.ratio_at("Sigmoid", &features).unwrap() - 20.0).abs() < 1e-9);
    // An op type the grid lacks takes the whole class.
    let mixed = t.ratio_at("Tanh", &features).unwrap();
    assert!(mixed > 1.1 && mixed < 20.0, "{mixed}");
    // Left out in turn, each point is predicted from its own type: exact here.
    let fit = t.leave_one_out().unwrap();
    assert!(fit.p90_abs < 1e-9, "{fit:?}");
}

#[test]
fn a_point_far_slower_than_its_neighbours_predict_is_a_slow_outlier() {
    // Six shapes at 1.5× their bound, one of them timed at twice that (a slow spell).
    let mut points: Vec<CalibrationPoint> = (10..16)
        .map(|k| point(1 << (2 * k), 1 << k, 1e-3, 1.5e-3))
        .collect();
    points[3].measured_s = 3e-3;
    let t = table(points);
    let slow = t.slow_outliers(1.4);
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0].0, 3);
    assert!((slow[0].1 - 2.0).abs() < 0.05, "{slow:?}");
    // A faster one is not: a spell only slows a kernel.
    let mut points: Vec<CalibrationPoint> = (10..16)
        .map(|k| point(1 << (2 * k), 1 << k, 1e-3, 1.5e-3))
        .collect();
    points[2].measured_s = 0.75e-3;
    assert!(table(points).slow_outliers(1.4).is_empty());
    // One point alone has no neighbours to be judged by.
    assert!(table(vec![point(1 << 20, 1 << 10, 1e-3, 9e-3)])
        .slow_outliers(1.4)
        .is_empty());
}

#[test]
fn leave_one_out_on_a_constant_ratio_is_exact() {
    let t = table(
        (10..16)
            .map(|k| point(1 << (2 * k), 1 << k, 1e-3, 1.5e-3))
            .collect(),
    );
    let fit = t.leave_one_out().unwrap();
    assert_eq!(fit.points, 6);
    assert!(fit.median_abs < 1e-12 && fit.p90_abs < 1e-12);
}

#[test]
fn the_table_of_the_thread_count_in_use_is_chosen() {
    let mut one = table(vec![point(1 << 20, 1 << 16, 1.0, 2.0)]);
    let mut two = one.clone();
    two.threads = 2;
    two.points[0].measured_s = 3.0;
    one.threads = 1;
    let calibration = Calibration {
        tool_version: "test".into(),
        measured_at: "now".into(),
        mode: "quick".into(),
        wall_time_s: 1.0,
        method: "test".into(),
        tables: vec![one, two],
        exchange: None,
        warnings: Vec::new(),
        handoff: Vec::new(),
        clock_hz: None,
        fma_gflops: None,
    };
    let features = ShapeFeatures::new(1 << 20, 1 << 16, 0, 1);
    let expected = |threads| {
        calibration
            .expected_s(KernelClass::Gemm, "", threads, &features, 1.0)
            .map(|e| (e * 1e9).round() / 1e9)
    };
    assert_eq!(expected(1), Some(2.0));
    assert_eq!(expected(2), Some(3.0));
    // More threads than calibrated: the largest table not above.
    assert_eq!(expected(8), Some(3.0));
    assert_eq!(
        calibration.expected_s(KernelClass::Pool, "", 1, &features, 1.0),
        None
    );
}

#[test]
fn an_impossible_fixed_cost_is_refused() {
    for fixed_s in [-1e-6, f64::NAN, f64::INFINITY, 5.0] {
        let mut t = table(vec![point(1 << 20, 1 << 20, 1e-3, 2e-3)]);
        t.fixed_s = fixed_s;
        let error = calibration_of(vec![t]).validate().unwrap_err();
        assert!(error.contains("fixed per-op cost"), "{error}");
    }
    let mut t = table(vec![point(1 << 20, 1 << 20, 1e-3, 2e-3)]);
    t.fixed_s = 3e-6;
    calibration_of(vec![t]).validate().unwrap();
}

#[test]
fn impossible_points_are_refused() {
    let mut c = Calibration {
        tool_version: "t".into(),
        measured_at: "n".into(),
        mode: "quick".into(),
        wall_time_s: 0.0,
        method: "m".into(),
        tables: vec![table(vec![point(4, 4, 1.0, 0.0)])],
        exchange: None,
        warnings: Vec::new(),
        handoff: Vec::new(),
        clock_hz: None,
        fma_gflops: None,
    };
    assert!(c.validate().is_err());
    c.tables[0].points[0].measured_s = 1.0;
    assert!(c.validate().is_ok());
}

#[test]
fn weight_reuse_separates_gemms_that_work_and_sizes_put_together() {
    // Same bytes and outputs: a GEMM whose weights each serve 2^6 rows (tokens), one with four
    // times the weights serving 2^4 rows (pixels of a small plane), and one with twice the
    // weights and four times the work serving 2^7.
    let weighted = |work: u64, weights: u64, ratio: f64| CalibrationPoint {
        shape: format!("{work}/{weights}"),
        features: ShapeFeatures::new(work, 1 << 22, weights, 1 << 16),
        bound_s: 1.0,
        measured_s: ratio,
        op_type: String::new(),
    };
    let query = ShapeFeatures::new(1 << 27, 1 << 22, 1 << 21, 1 << 16);
    assert_eq!(query.log2_weight_reuse(), Some(6.0));
    let few_rows = weighted(1 << 27, 1 << 23, 2.4);
    let many_rows = weighted(1 << 29, 1 << 22, 1.5);
    // On sizes alone the few-rows GEMM is the nearer (4 doublings² against 5); the reuse
    // term adds 4 to it and 1 to the other.
    assert!((query.distance_squared(&few_rows.features) - 8.0).abs() < 1e-9);
    assert!((query.distance_squared(&many_rows.features) - 6.0).abs() < 1e-9);
    let ratio = table(vec![few_rows, many_rows])
        .ratio_at("", &query)
        .unwrap();
    assert!(ratio < (2.4f64 * 1.5).sqrt(), "{ratio}");
    // Ops without weights are matched on their sizes alone.
    let plain = ShapeFeatures::new(1 << 27, 1 << 22, 0, 1 << 16);
    assert_eq!(plain.log2_weight_reuse(), None);
    assert!((plain.distance_squared(&query) - 21.0 * 21.0).abs() < 1e-9);
}

#[test]
fn precisions_are_predicted_from_their_own_points() {
    let typed = |op_type: &str, work: u64, ratio: f64| CalibrationPoint {
        op_type: op_type.into(),
        ..point(work, 1 << 20, 1.0, ratio)
    };
    // The int8 points lie nearer the query than the fp32 one, so an fp32 lookup that let
    // them in would be pulled toward them.
    let conv = ClassTable {
        class: KernelClass::Conv,
        ..table(vec![
            typed("Conv", 1 << 20, 1.25),
            typed("Conv int8", 1 << 24, 1.5),
            typed("ConvInteger int8", 1 << 26, 3.0),
        ])
    };
    let query = ShapeFeatures::new(1 << 24, 1 << 20, 0, 1);
    let ratio = |op_type: &str| conv.ratio_at(op_type, &query).unwrap();
    assert!((ratio("Conv") - 1.25).abs() < 1e-9);
    assert!((ratio("Conv int8") - 1.5).abs() < 1e-9);
    assert!((ratio("ConvInteger int8") - 3.0).abs() < 1e-9);
    // An fp32 op type the grid lacks takes the fp32 points only, never the int8 kernels'.
    assert!((ratio("ConvTranspose") - 1.25).abs() < 1e-9);
    // An int8 op type without points of its own takes the int8 points (the nearest: exact).
    assert!((ratio("QLinearConv int8") - 1.5).abs() < 1e-9);
    // A precision the table has no point of (fp16, run as fp32 on a CPU) takes the fp32 ones.
    assert!((ratio("Conv fp16") - 1.25).abs() < 1e-9);
    // Left out in turn, the only point of a precision still gets a prediction (from the fp32
    // points): no point drops out of the fit error.
    let lone = ClassTable {
        class: KernelClass::Conv,
        ..table(vec![
            typed("Conv", 1 << 20, 1.25),
            typed("Conv int8", 1 << 24, 1.5),
        ])
    };
    assert_eq!(lone.leave_one_out().unwrap().points, 2);
    assert_eq!(key_precision("MatMul bf16"), "bf16");
    assert_eq!(key_precision("Conv depthwise 3x3"), "");
    assert_eq!(precision_op_type("MatMul", "int8"), "MatMul int8");
}

#[test]
fn a_sibling_lends_only_points_of_the_ops_precision() {
    let typed = |op_type: &str, work: u64, ratio: f64| CalibrationPoint {
        op_type: op_type.into(),
        ..point(work, 1 << 20, 1.0, ratio)
    };
    let calibration = calibration_of(vec![
        table(vec![
            typed("MatMul", 1 << 16, 2.0),
            typed("MatMul int8", 1 << 16, 4.0),
        ]),
        // The sibling's fp32 point sits exactly on the query, its int8 one a doubling away.
        ClassTable {
            class: KernelClass::Pointwise,
            ..table(vec![
                typed("Conv", 1 << 28, 1.1),
                typed("Conv int8", 1 << 27, 1.6),
            ])
        },
    ]);
    // Twelve doublings from its own points: the sibling is nearer.
    let query = ShapeFeatures::new(1 << 28, 1 << 20, 0, 1);
    let expected = |op_type: &str| {
        calibration
            .expected_s(KernelClass::Gemm, op_type, 1, &query, 1.0)
            .unwrap()
    };
    assert!((expected("MatMul int8") - 1.6).abs() < 1e-9);
    assert!((expected("MatMul") - 1.1).abs() < 1e-9);
    // A sibling without points of the op's precision lends nothing: its own table decides.
    let fp32_sibling = calibration_of(vec![
        table(vec![typed("MatMul int8", 1 << 16, 4.0)]),
        ClassTable {
            class: KernelClass::Pointwise,
            ..table(vec![typed("Conv", 1 << 28, 1.1)])
        },
    ]);
    let int8 = fp32_sibling.expected_s(KernelClass::Gemm, "MatMul int8", 1, &query, 1.0);
    assert!((int8.unwrap() - 4.0).abs() < 1e-9);
}

#[test]
fn the_handoff_rate_is_used_at_its_own_thread_count_for_own_kernels_only() {
    let mut calibration = calibration_of(Vec::new());
    calibration.handoff = vec![
        HandoffRate {
            threads: 2,
            read_gbs: 12.5,
            pairs: 3,
        },
        HandoffRate {
            threads: 4,
            read_gbs: f64::NAN,
            pairs: 1,
        },
    ];
    assert_eq!(calibration.handoff_gbs(2), Some(12.5));
    // One thread hands nothing over; an unmeasured count and a broken figure give nothing.
    assert_eq!(calibration.handoff_gbs(1), None);
    assert_eq!(calibration.handoff_gbs(8), None);
    assert_eq!(calibration.handoff_gbs(4), None);
    // Another runtime's profiles: its threading is not the tool's.
    calibration.mode = "onnxruntime 1.32".into();
    assert_eq!(calibration.handoff_gbs(2), None);
    // Saved, it keeps its rates; saved before the rate existed, the field defaults to none.
    calibration.handoff.truncate(1);
    let mut json = serde_json::to_value(&calibration).unwrap();
    let loaded: Calibration = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(loaded.handoff[0].read_gbs, 12.5);
    assert!(json.as_object_mut().unwrap().remove("handoff").is_some());
    let loaded: Calibration = serde_json::from_value(json).unwrap();
    assert!(loaded.handoff.is_empty());
}
