//! Helpers shared by the op families' unit tests (`kit`), and the tests of the families whose
//! file has no room left for them under the 1,000-line limit.

pub(super) mod kit;
mod movement;

/// The shared helpers of `ops/mod.rs`: the registry, the invalid mark, axes, broadcasting and
/// the default traffic.
mod common {
    use super::kit::{f32s, traffic, w32, Op};
    use crate::analysis::ops::{
        as_invalid, broadcast_shapes, checked_volume, invalid, is_nondeterministic, known_dims,
        lookup, normalize_axis,
    };
    use crate::analysis::tensor::{DType, Dim, TensorFact};
    use crate::device::Precision;

    #[test]
    fn registry_by_domain() {
        assert!(lookup("", "Conv").is_some());
        assert!(lookup("ai.onnx", "Conv").is_some());
        assert!(lookup("com.microsoft", "Conv").is_none());
        assert!(lookup("com.microsoft", "MatMulNBits").is_some());
        assert!(lookup("", "FusedConv").is_none());
        assert!(lookup("roofline", "FusedConv").is_some());
        assert!(lookup("roofline", "QConv").is_some());
        assert!(lookup("", "NoSuchOp").is_none());
    }

    #[test]
    fn invalid_mark_round_trips() {
        let e = invalid("bias of 3 for 4 channels");
        assert_eq!(as_invalid(&e), Some("bias of 3 for 4 channels"));
        assert_eq!(as_invalid("bias of 3 for 4 channels"), None);
        assert!(is_nondeterministic("RandomNormal"));
        assert!(!is_nondeterministic("Relu"));
    }

    #[test]
    fn axes_and_volumes() {
        assert_eq!(normalize_axis(-1, 4), Ok(3));
        assert_eq!(normalize_axis(0, 0), Ok(0));
        assert!(normalize_axis(4, 4).is_err());
        assert!(normalize_axis(-5, 4).is_err());
        assert_eq!(checked_volume(&[2, 3, 4]), Some(24));
        assert_eq!(checked_volume(&[u64::MAX, 2]), None);
    }

    #[test]
    fn broadcasting_rules() {
        let k = known_dims;
        assert_eq!(
            broadcast_shapes(&[&k(&[2, 1, 4]), &k(&[3, 1])]),
            Ok(k(&[2, 3, 4]))
        );
        assert_eq!(broadcast_shapes(&[&k(&[]), &k(&[5])]), Ok(k(&[5])));
        let n = [Dim::Sym("N".into()), Dim::Known(1)];
        assert_eq!(
            broadcast_shapes(&[&n, &k(&[4])]),
            Ok(vec![Dim::Sym("N".into()), Dim::Known(4)])
        );
        let err = broadcast_shapes(&[&k(&[2]), &k(&[3])]).unwrap_err();
        assert!(as_invalid(&err).is_some(), "{err}");
    }

    #[test]
    fn default_traffic_splits_weights_and_activations() {
        // Add of an activation [8] and a constant [8]: 32 bytes each way; at fp64 64 bytes;
        // an i64 input keeps its 8 bytes at any precision.
        let (x, c) = (f32s(&[8]), w32(&[8]));
        assert_eq!(Op::new("Add").run(&[&x, &c]).1.bytes, traffic(32, 32, 32));
        let (_, wide) = Op::new("Add").precision(Precision::Fp64).run(&[&x, &c]);
        assert_eq!(wide.bytes, traffic(64, 64, 64));
        let i = TensorFact::known(DType::I64, &[8]);
        let (_, int) = Op::new("Add").precision(Precision::Int8).run(&[&i, &i]);
        assert_eq!(int.bytes, traffic(0, 128, 64));
    }

    #[test]
    fn a_value_fed_to_two_inputs_is_read_once() {
        // x·x (a LayerNorm's square) streams one buffer of 32 bytes, not two.
        let x = f32s(&[8]);
        let square = Op::new("Mul").values(&[0, 0]).run(&[&x, &x]).1;
        assert_eq!(square.bytes, traffic(0, 32, 32));
        // Two values of the same shape are two reads.
        let product = Op::new("Mul").values(&[0, 1]).run(&[&x, &x]).1;
        assert_eq!(product.bytes, traffic(0, 64, 32));
    }
}
