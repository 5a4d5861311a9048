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
            &model.model,
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
