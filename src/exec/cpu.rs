//! The CPU backend: how a lowered kernel description runs on this machine. `prepare` does the
//! plan-time work (GEMM blockings from the tuning cache, convolution weights packed for them);
//! `run` calls the family's CPU arm with the step's inputs, outputs, scratch and threads. The
//! lowering (`lower/`) never sees anything from here.

use std::sync::Arc;

use super::lower::{conv, elementwise, gemm, movement, norm, pool, reduce, shape, Kernel};
use super::plan::Step;
use super::{RtData, RtTensor};
use crate::analysis::algorithm::ConvAlgorithm;
use crate::kernels::conv::winograd::{self, WinogradWeights};
use crate::kernels::conv::PackedConvWeights;
use crate::kernels::gemm::{blocking, GemmConfig, PackedB};

/// The blocking of a GEMM of shape (m, n, k) (autotuned, or the defaults).
pub(crate) type GemmConfigFn<'a> = dyn FnMut(usize, usize, usize) -> GemmConfig + 'a;

/// What the CPU prepared for a step at plan time.
#[derive(Clone, Debug)]
pub(crate) enum Prepared {
    None,
    /// A matrix product's blocking, and its constant B packed for it once (see
    /// `lower::gemm::MatMulSpec::constant_b`).
    Gemm {
        config: GemmConfig,
        packed_b: Option<Arc<PackedB>>,
    },
    /// Convolution weights are packed for the blocking once, not per run (`None`: depthwise,
    /// which reads them directly).
    Conv {
        config: GemmConfig,
        packed: Option<Arc<PackedConvWeights>>,
    },
    /// A 3×3 convolution run as Winograd: the filter transformed and packed once.
    Winograd {
        weights: Arc<WinogradWeights>,
        scratch: usize,
    },
}

impl Prepared {
    /// Bytes of weights packed at plan time (they count towards the plan's weight memory).
    pub fn packed_bytes(&self) -> usize {
        match self {
            Prepared::Conv {
                packed: Some(packed),
                ..
            } => packed.bytes(),
            Prepared::Winograd { weights, .. } => weights.bytes(),
            Prepared::Gemm {
                packed_b: Some(packed),
                ..
            } => packed.bytes(),
            _ => 0,
        }
    }

    /// Scratch floats the prepared kernel needs beyond what the lowering planned.
    pub fn scratch_len(&self) -> usize {
        match self {
            Prepared::Winograd { scratch, .. } => *scratch,
            _ => 0,
        }
    }

    /// The algorithm a convolution step runs (`None` for other steps).
    pub fn conv_algorithm(&self) -> Option<ConvAlgorithm> {
        match self {
            Prepared::Conv { .. } => Some(ConvAlgorithm::Direct),
            Prepared::Winograd { weights, .. } => Some(match weights.tile() {
                winograd::WinogradTile::F2 => ConvAlgorithm::WinogradF2,
                winograd::WinogradTile::F4 => ConvAlgorithm::WinogradF4,
            }),
            _ => None,
        }
    }
}

/// Tells the GEMM kernels this machine's cache sizes (from the CPU identification: CPUID or
/// sysfs, never its stated defaults), once per process, before the first plan takes a blocking.
/// `ROOFLINE_GEMM_BLOCKING=tuned` keeps the ISA tables' blockings as tuned, for A/B runs of the
/// cache-sized blocking on machines unlike the tuned one.
pub fn state_machine_caches() {
    static STATED: std::sync::Once = std::sync::Once::new();
    STATED.call_once(|| {
        if std::env::var_os("ROOFLINE_GEMM_BLOCKING").is_some_and(|choice| choice == "tuned") {
            blocking::use_caches(None);
            return;
        }
        let description = crate::probe::identify_cpu();
        let known = |level: u8| {
            description
                .caches
                .iter()
                .find(|cache| cache.level == level && cache.source != "default")
                .map(|cache| cache.size_bytes)
        };
        let caches = known(2).map(|l2_bytes| blocking::CacheSizes {
            l2_bytes,
            l3_bytes: known(3),
        });
        blocking::use_caches(caches);
    });
}

/// Plan-time preparation of a lowered kernel for the CPU, running a convolution as `algorithm`.
pub(crate) fn prepare(
    kernel: &Kernel,
    algorithm: ConvAlgorithm,
    gemm_config: &mut GemmConfigFn,
) -> Prepared {
    match kernel {
        Kernel::Conv(k) => conv::prepare(k, algorithm, gemm_config),
        Kernel::MatMul(spec) => gemm::prepare(spec, gemm_config),
        _ => Prepared::None,
    }
}

/// A borrowed input.
#[derive(Clone, Copy)]
pub(crate) enum InRef<'a> {
    F32(&'a [f32]),
    I64(&'a [i64]),
}

impl<'a> InRef<'a> {
    pub fn from_tensor(t: &'a RtTensor) -> InRef<'a> {
        match &t.data {
            RtData::F32(v) => InRef::F32(v),
            RtData::I64(v) => InRef::I64(v),
        }
    }

    pub fn f32(self) -> Result<&'a [f32], String> {
        match self {
            InRef::F32(v) => Ok(v),
            InRef::I64(_) => Err("expected a float input".into()),
        }
    }
}

/// The operands of one kernel call: inputs, f32 outputs (planned buffers), integer outputs
/// (pushed to `dynamic_out`), the shared scratch and the thread count.
pub(crate) struct Io<'r, 'i, 'o> {
    pub ins: &'r [Option<InRef<'i>>],
    pub outs: &'r mut [&'o mut [f32]],
    pub dynamic_out: &'r mut Vec<RtTensor>,
    pub scratch: &'r mut Vec<f32>,
    /// The previous run's integer outputs of this step, whose allocations a kernel may reuse
    /// ([`Io::integers`]).
    pub spare_integers: &'r mut Vec<Vec<i64>>,
    pub threads: usize,
}

/// Input `i` of `ins`, which must be present.
pub(crate) fn input<'i>(ins: &[Option<InRef<'i>>], i: usize) -> Result<InRef<'i>, String> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("missing input #{i}"))
}

impl<'i> Io<'_, 'i, '_> {
    /// `len` integers to write a dynamic output into: the previous run's buffer of that length
    /// when there is one (contents stale), else a fresh one. A 2048×257 comparison (4.2 MB of
    /// i64 booleans) spent most of its millisecond faulting in a fresh allocation every run.
    pub fn integers(&mut self, len: usize) -> Vec<i64> {
        match self.spare_integers.iter().position(|v| v.len() == len) {
            Some(at) => self.spare_integers.swap_remove(at),
            None => vec![0; len],
        }
    }

    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<InRef<'i>, String> {
        input(self.ins, i)
    }

    /// Input `i` as f32.
    pub fn x(&self, i: usize) -> Result<&'i [f32], String> {
        self.input(i).and_then(InRef::f32)
    }
}

/// Runs a non-generic step. Integer outputs (ArgMax, Cast to int) go to `io.dynamic_out`.
pub(crate) fn run(step: &Step, io: &mut Io) -> Result<(), String> {
    match &step.kernel {
        Kernel::Conv(k) => conv::run(k, &step.cpu, io),
        Kernel::MatMul(spec) => gemm::run(spec, &step.cpu, io),
        Kernel::Elementwise(k) => elementwise::run(k, io),
        Kernel::Norm(k) => norm::run(k, io),
        Kernel::Pool(k) => pool::run(k, io),
        Kernel::Movement(k) => movement::run(k, io),
        Kernel::Reduce(k) => reduce::run(k, io),
        Kernel::Cast { to_float } => shape::run_cast(*to_float, io),
        Kernel::View => shape::run_view(io),
        Kernel::InPlace | Kernel::SliceView => Ok(()),
        Kernel::Quant(q) => q.run(io),
        Kernel::Generic => Err("internal: generic kernels run through the evaluator".into()),
    }
}
