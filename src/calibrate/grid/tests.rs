use super::*;

#[test]
fn every_class_is_in_the_grid_quick_or_full() {
    for quick in [false, true] {
        let models = grid(quick);
        for class in KernelClass::ALL {
            assert!(
                models.iter().any(|m| m.class == class),
                "{} missing (quick {quick})",
                class.name()
            );
        }
    }
    assert!(grid(true).len() * 2 < grid(false).len());
}

/// Every chain point becomes one fused node once advised, so it is timed as the chain
/// `bench --optimize` runs and not as its separate ops.
#[test]
fn chain_points_fuse_into_one_node() {
    let device = crate::device::catalog()[0].to_profile();
    let chains: Vec<GridModel> = grid(false)
        .into_iter()
        .filter(|m| {
            m.fuse_elementwise
                && (m.shape.ends_with(" 4096") || m.shape.starts_with("batchnorm relu chain"))
        })
        .collect();
    // The four activation chains at one size and every batch norm + ReLU point.
    assert_eq!(chains.len(), 4 + 7);
    for model in chains {
        let graph = crate::analysis::import::import_model(
            model.model(),
            std::path::Path::new("."),
            std::path::Path::new("calibration.onnx"),
        )
        .expect("imports");
        let (_, fused) = crate::advisor::advise(
            graph,
            &model.shape,
            &device,
            &Default::default(),
            &Default::default(),
        )
        .expect("advises");
        let ops: Vec<String> = fused
            .nodes_in_order()
            .into_iter()
            .map(|n| n.op_type)
            .collect();
        assert_eq!(ops.len(), 1, "{}: {ops:?}", model.shape);
    }
}

#[test]
fn rule_four_shapes_are_timed_per_algorithm() {
    let models = grid(false);
    let variants = |shape: &str| -> Vec<AlgorithmPolicy> {
        models
            .iter()
            .filter(|m| m.shape.starts_with(shape) && !m.cold_weights && m.precision.is_none())
            .map(|m| m.policy)
            .collect()
    };
    // 64 channels at 56²: enough tiles for both Winograd variants.
    assert_eq!(
        variants("conv 64→64 3x3 s1 g1 56x56"),
        [
            AlgorithmPolicy::Only(ConvAlgorithm::Direct),
            AlgorithmPolicy::Only(ConvAlgorithm::WinogradF2),
            AlgorithmPolicy::Only(ConvAlgorithm::WinogradF4),
        ]
    );
    // 7×7 planes: 16 F(2×2) tiles, fewer than rule 2 asks for; direct only.
    assert_eq!(
        variants("conv 512→512 3x3 s1 g1 7x7"),
        [AlgorithmPolicy::Only(ConvAlgorithm::Direct)]
    );
    // Under 64 input channels the unmeasured rule never considers Winograd (and the grid
    // has no latency table): the point runs as chosen.
    assert_eq!(
        variants("conv 16→16 3x3 s1 g1 112x112"),
        [AlgorithmPolicy::Auto]
    );
    for m in &models {
        if let AlgorithmPolicy::Only(algorithm) = m.policy {
            let winograd = algorithm != ConvAlgorithm::Direct;
            assert_eq!(m.class == KernelClass::Winograd, winograd, "{}", m.shape);
        }
    }
}

#[test]
fn weighted_classes_get_a_cold_twin_and_gemvs_do_not() {
    let models = grid(false);
    let twin = |shape: &str| {
        let cold = format!("{shape} (weights cold)");
        models.iter().any(|m| m.cold_weights && m.shape == cold)
    };
    assert!(twin("conv 3→64 7x7 s2 g1 224x224"));
    assert!(twin("conv 256→64 1x1 s1 g1 56x56"));
    assert!(twin("conv 64→64 3x3 s1 g1 56x56 (winograd F(4x4,3x3))"));
    assert!(twin("matmul 128x768 · 768x768 (weights)"));
    assert!(!twin("matmul 1x4096 · 4096x4096 (weights)"));
    // Classes without weights run warm only.
    assert!(models.iter().filter(|m| m.cold_weights).all(|m| matches!(
        m.class,
        KernelClass::Conv
            | KernelClass::Winograd
            | KernelClass::Pointwise
            | KernelClass::Grouped
            | KernelClass::Gemm
    )));
    assert!(models
        .iter()
        .any(|m| m.class == KernelClass::Depthwise && !m.cold_weights));
}

#[test]
fn quick_leaves_out_the_heaviest_gemm_points_and_builds_models_on_demand() {
    let full = grid(false);
    let quick = grid(true);
    // The full grid keeps its GEMVs past 64 MB (VGG's classifier, 205 MB); --quick none.
    assert!(full
        .iter()
        .any(|m| m.weights_bytes > super::QUICK_MAX_WEIGHTS_BYTES));
    for m in &quick {
        let cap = if m.rewritten() {
            super::QUICK_MAX_REWRITTEN_WEIGHTS_BYTES
        } else {
            super::QUICK_MAX_WEIGHTS_BYTES
        };
        assert!(m.weights_bytes <= cap, "{} in --quick", m.shape);
    }
    // The recorded weights are the model's: 1 × 4096 · 4096 × 4096 holds 64 MiB of them.
    let gemv = full
        .iter()
        .find(|m| m.shape == "matmul 1x4096 · 4096x4096 (weights)")
        .expect("the 4096² GEMV point");
    assert_eq!(gemv.weights_bytes, 64 << 20);
    // Points are built when first asked for (all but a few small ones made whole), and a
    // point and its cold twin share one model.
    let unbuilt = full
        .iter()
        .filter(|m| m.model.built.get().is_none())
        .count();
    assert!(unbuilt * 10 > full.len() * 9, "{unbuilt} of {}", full.len());
    assert!(full
        .iter()
        .filter(|m| m.weights_bytes > 0)
        .all(|m| m.model.built.get().is_none()));
    let warm = full
        .iter()
        .find(|m| m.shape == "conv 64→64 3x3 s1 g1 56x56 (direct)")
        .expect("a point with a cold twin");
    let cold = full
        .iter()
        .find(|m| m.shape == format!("{} (weights cold)", warm.shape))
        .expect("its cold twin");
    let initializers = warm.model().graph.as_ref().map(|g| g.initializer.len());
    assert!(initializers.unwrap_or(0) > 0);
    assert!(std::ptr::eq(warm.model(), cold.model()));
}

/// The fp32 GEMVs whose weights outgrow the largest cache are timed and charged with their
/// weights at DRAM; smaller ones, GEMMs of several rows (which have cold twins), the
/// low-precision forms and a device without caches keep their warm timing.
#[test]
fn gemvs_past_the_largest_cache_stream_from_dram() {
    let full = grid(false);
    let point = |shape: &str| {
        full.iter()
            .find(|m| m.shape == shape)
            .unwrap_or_else(|| panic!("{shape} in the grid"))
    };
    let l3 = Some(32u64 << 20);
    assert!(point("matmul 1x4096 · 4096x4096 (weights)").streams_weights_past(l3));
    assert!(point("gemm 1x12544 · (4096x12544)ᵀ + bias").streams_weights_past(l3));
    assert!(!point("matmul 1x1280 · 1280x1000 (weights)").streams_weights_past(l3));
    assert!(!point("matmul 128x768 · 768x3072 (weights)").streams_weights_past(Some(1 << 20)));
    assert!(!point("matmul 1x4096 · 4096x4096 (weights) int8").streams_weights_past(l3));
    assert!(!point("matmul 1x4096 · 4096x4096 (weights)").streams_weights_past(None));
}
