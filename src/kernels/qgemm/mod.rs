//! Low-precision GEMMs: int8 (`u8` activations × `s8` weights, `i32` accumulate, `vpdpbusd`) and
//! bf16 (`vdpbf16ps`, f32 accumulate), with packing, register-blocked microkernels per ISA, a
//! fused dequantize/requantize epilogue, and the convolutions built on them (`conv.rs`).
//!
//! # Int8 arithmetic
//! Activations are affine per tensor: `x ≈ sx·(q − zx)` with `q ∈ [0, 255]`; weights are
//! symmetric per output channel: `w ≈ sw[c]·wq`, `wq ∈ [−128, 127]`. One output is
//! `y[c] = sx·sw[c]·(Σ_k wq[c,k]·q[k] − zx·Σ_k wq[c,k]) + bias[c]`: the integer dot product runs
//! on `vpdpbusd` (4 u8×s8 products summed into each i32 lane, exact: |4·255·128| ≪ 2³¹, and
//! K ≤ 16 000 keeps the sum in range), the zero-point correction `zx·Σ_k wq[c,k]` (the channel's
//! weight sum, computed once when the weights are packed) is subtracted in integers, then one
//! FMA per element dequantizes and adds the bias. The epilogue continues in f32 (residual,
//! activation) and writes f32, f32 rounded to an output quantization grid ("fake quant", what a
//! QuantizeLinear → DequantizeLinear pair computes), or u8 with an output scale/zero point.
//! Rounding is to nearest even, as ONNX QuantizeLinear specifies.
//!
//! # Layout
//! Both operands are packed into k-quad panels: a panel of `P` rows holds, for each group of 4
//! consecutive k, `P × 4` bytes (row-major over the panel's rows, the 4 k contiguous), K padded
//! to a multiple of 4 with zero weights. The microkernel broadcasts 4 bytes of one operand
//! (`MR` rows per panel) and loads `NV` vectors of the other (`NR` rows) per k-quad, into
//! `MR × NV` i32 accumulators. Two orientations share the kernels:
//! - `wx` (convolutions, NCHW): C[M×N] = W[M×K] · X[K×N]: the weights are broadcast (an `s8`
//!   memory operand of `vpdpbusd`), the activations are the `u8` vector operand, so each
//!   accumulator vector holds 16 consecutive pixels of one output channel and stores straight
//!   into NCHW.
//! - `xw` (dense layers): C[M×N] = X[M×K] · W[K×N]: the activations are broadcast (a `u8`
//!   register), the weights are the `s8` vectors, lanes run along output features. `M < 4`
//!   (batch-1 dense layers) uses a one-row kernel.
//!
//! Activations are quantized while they are packed (f32 → u8 with the calibrated scale and zero
//! point), so a pointwise convolution never writes a u8 copy of its input; other convolutions
//! quantize the image once and run im2col on bytes.
//!
//! # ISA variants ([`QIsa`], [`BIsa`])
//! | variant | instruction | tile `wx` MR × NR | `xw` |
//! |---|---|---|---|
//! | `avx512-vnni` | `vpdpbusd zmm` (+ AVX-512BW packing) | 8 × 32 | 8 × 32, 1 × 32 |
//! | `avx-vnni` | `vpdpbusd ymm` (VEX) | 6 × 16 | 6 × 16, 1 × 16 |
//! | `avx2` | 2 `vpmaddwd` on even / odd bytes widened to i16 (exact) | 6 × 16 | 6 × 16, 1 × 16 |
//! | `scalar` | widening i32 multiply-add | 4 × 8 | 4 × 8, 1 × 8 |
//! | `avx512-bf16` | `vdpbf16ps zmm`, k-pairs | 8 × 32 | 8 × 32, 1 × 32 |
//! | `avx2` (bf16) | pairs widened in registers (shift, mask), 2 FMAs per pair | 4 × 16 | 4 × 16, 1 × 16 |
//! | `scalar` (bf16) | f32 multiply-add of bf16 values | 4 × 8 | 4 × 8, 1 × 8 |
//!
//! The best variant is detected once (`is_x86_feature_detected!`) and cached; every entry point
//! has a `_with` form taking the variant, which the per-ISA test suite uses. `ROOFLINE_ISA=scalar`
//! caps the choice like the other kernels.
//!
//! # Panics
//! Entry points panic on inconsistent shapes (slices too short, packed weights of another
//! variant): programming errors of the caller, which validated the model.

mod bf16;
mod conv;
mod conv_integer;
mod pack;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

pub use bf16::{
    bgemm_wx, bgemm_wx_with, bgemm_xw, bgemm_xw_with, f32_to_bf16, BActSrc, BEpilogue, BIsa,
    PackedBWeights,
};
pub use conv::{BConv2d, QConv2d};
pub use conv_integer::{s8_offset, IntegerConvWeights, IntegerDenseWeights, MAX_TAPS};
pub use pack::{dequantize_u8, fake_quantize, fake_quantize_copy, quantize_u8};

use super::gemm::Activation;

/// Instruction-set variant of the int8 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QIsa {
    Scalar,
    /// AVX2 without VNNI: `vpdpbusd` emulated exactly with `vpmaddwd` on widened bytes.
    Avx2,
    AvxVnni,
    Avx512Vnni,
}

impl QIsa {
    /// Every variant, slowest first.
    pub const ALL: [QIsa; 4] = [QIsa::Scalar, QIsa::Avx2, QIsa::AvxVnni, QIsa::Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            QIsa::Scalar => "scalar",
            QIsa::Avx2 => "avx2",
            QIsa::AvxVnni => "avx-vnni",
            QIsa::Avx512Vnni => "avx512-vnni",
        }
    }

    /// Whether this CPU (and this build's target) can run the variant.
    pub fn is_available(self) -> bool {
        match self {
            QIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            QIsa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            QIsa::AvxVnni => {
                (is_x86_feature_detected!("avxvnni") || cfg!(test) && x86::has_evex_vnni256())
                    && is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            QIsa::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best available variant, detected once (capped by `ROOFLINE_ISA=scalar|avx2`: `avx2`
    /// runs the emulated dot product even where AVX-VNNI is present, as on an AVX2-only CPU).
    pub fn detect() -> QIsa {
        static BEST: OnceLock<QIsa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let cap = match std::env::var("ROOFLINE_ISA").as_deref() {
                Ok("scalar") => QIsa::Scalar,
                Ok("avx2") => QIsa::Avx2,
                _ => QIsa::Avx512Vnni,
            };
            QIsa::ALL
                .iter()
                .rev()
                .copied()
                .filter(|&i| i <= cap)
                .find(|i| i.is_available())
                .unwrap_or(QIsa::Scalar)
        })
    }

    /// `(MR, NR)`: rows broadcast and rows in vectors per microkernel tile.
    pub fn tile(self) -> (usize, usize) {
        match self {
            QIsa::Scalar => (scalar::MR, scalar::NR),
            QIsa::Avx2 | QIsa::AvxVnni => (6, 16),
            QIsa::Avx512Vnni => (8, 32),
        }
    }
}

/// Output quantization: `q = clamp(round(y / scale) + zero_point, 0, 255)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Requant {
    pub scale: f32,
    pub zero_point: i32,
}

/// Where an int8 GEMM writes (row-major, leading dimension `ldc`).
pub enum QOut<'a> {
    /// f32 values; with `requant`, rounded to that grid (QuantizeLinear → DequantizeLinear).
    F32 {
        data: &'a mut [f32],
        requant: Option<Requant>,
    },
    /// u8 values quantized with `requant`.
    U8 {
        data: &'a mut [u8],
        requant: Requant,
    },
    /// The exact integer sums `acc − corr` (+ the offset term): no scale, bias, residual or
    /// activation (MatMulInteger's and ConvInteger's i32 outputs).
    I32 { data: &'a mut [i32] },
}

impl QOut<'_> {
    fn len(&self) -> usize {
        match self {
            QOut::F32 { data, .. } => data.len(),
            QOut::U8 { data, .. } => data.len(),
            QOut::I32 { data } => data.len(),
        }
    }
}

/// Per-channel dequantization, bias and epilogue of an int8 GEMM:
/// `y = (acc − corr[c]) · mul[c] + bias[c]`, then `+ residual`, then the activation.
#[derive(Clone, Copy, Debug)]
pub struct QEpilogue<'a> {
    /// Zero-point correction `zx · Σ_k wq[c, k]` per channel.
    pub corr: &'a [i32],
    /// `sx · sw[c]` per channel.
    pub mul: &'a [f32],
    /// Bias per channel (zeros when the op has none).
    pub bias: &'a [f32],
    /// f32 tensor added after the bias, with C's layout.
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
    /// An integer term added to each accumulator before the correction ([`OffsetTerm`]).
    pub offset_term: Option<OffsetTerm<'a>>,
}

/// An integer term of an int8 GEMM: `acc += factor[channel] · sums[activation vector]`, the
/// activation vector being a column of C in `wx` (a pixel) and a row in `xw`. It carries the
/// part of an asymmetric weight that `s8` cannot hold: ConvInteger's and MatMulInteger's
/// `w − w_zero_point` spans up to 255 values, stored as `s8` plus a per-channel offset
/// `factor`, whose product with the activations is that offset times each activation vector's
/// sum of centred values.
#[derive(Clone, Copy, Debug)]
pub struct OffsetTerm<'a> {
    /// Per channel.
    pub factor: &'a [i32],
    /// Per activation vector.
    pub sums: &'a [i32],
}

/// Precomputed per-channel epilogue coefficients (owned form of [`QEpilogue`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelCoeffs {
    pub corr: Vec<i32>,
    pub mul: Vec<f32>,
    pub bias: Vec<f32>,
}

impl ChannelCoeffs {
    /// Coefficients for weights with per-channel `w_scale` (length 1 = per tensor) and `w_sums`
    /// (from [`PackedQWeights::sums`]), activations quantized with `x_scale` / `x_zero_point`.
    pub fn new(
        w_scale: &[f32],
        w_sums: &[i32],
        x_scale: f32,
        x_zero_point: i32,
        bias: Option<&[f32]>,
    ) -> ChannelCoeffs {
        let channels = w_sums.len();
        ChannelCoeffs {
            corr: w_sums.iter().map(|&s| s * x_zero_point).collect(),
            mul: (0..channels)
                .map(|c| w_scale[if w_scale.len() == 1 { 0 } else { c }] * x_scale)
                .collect(),
            bias: match bias {
                Some(b) => (0..channels)
                    .map(|c| b[if b.len() == 1 { 0 } else { c }])
                    .collect(),
                None => vec![0.0; channels],
            },
        }
    }

    pub fn epilogue<'a>(
        &'a self,
        residual: Option<&'a [f32]>,
        activation: Activation,
    ) -> QEpilogue<'a> {
        QEpilogue {
            corr: &self.corr,
            mul: &self.mul,
            bias: &self.bias,
            residual,
            activation,
            offset_term: None,
        }
    }

    /// The coefficients of channels `c0..c1` (one convolution group).
    pub fn slice(&self, c0: usize, c1: usize) -> ChannelCoeffs {
        ChannelCoeffs {
            corr: self.corr[c0..c1].to_vec(),
            mul: self.mul[c0..c1].to_vec(),
            bias: self.bias[c0..c1].to_vec(),
        }
    }
}

/// 64-byte aligned byte storage for packed panels.
#[derive(Clone, Default)]
pub(crate) struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl AlignedBytes {
    pub fn zeroed(len: usize) -> AlignedBytes {
        AlignedBytes {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    /// Grows to at least `len` bytes (contents undefined after growth).
    pub fn reserve(&mut self, len: usize) {
        if self.lines.len() * 64 < len {
            *self = AlignedBytes::zeroed(len);
        }
        self.len = self.len.max(len);
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr() as *const u8
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `Line` is `repr(C)` over `[u8; 64]`: the lines are contiguous bytes.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.lines.len() * 64) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let n = self.lines.len() * 64;
        // SAFETY: as above; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), n) }
    }
}

/// Which operand of the microkernel the weights are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightRole {
    /// Broadcast (`wx`, convolutions): panels of MR channels.
    Broadcast,
    /// Vector operand (`xw`, dense layers): panels of NR channels.
    Vector,
}

/// Int8 weights (`channels × k`, symmetric) packed once for one variant and orientation, with
/// their per-channel sums for the zero-point correction.
#[derive(Clone)]
pub struct PackedQWeights {
    isa: QIsa,
    role: WeightRole,
    channels: usize,
    k: usize,
    panel: usize,
    data: AlignedBytes,
    sums: Vec<i32>,
}

impl PackedQWeights {
    /// Packs `w` where channel `c`, depth `k` is at `w[c * ch_stride + k * k_stride]`.
    pub fn new(
        isa: QIsa,
        role: WeightRole,
        w: &[i8],
        channels: usize,
        k: usize,
        ch_stride: usize,
        k_stride: usize,
    ) -> PackedQWeights {
        assert!(
            isa.is_available(),
            "int8 variant {} unavailable",
            isa.name()
        );
        if channels > 0 && k > 0 {
            assert!(
                (channels - 1) * ch_stride + (k - 1) * k_stride < w.len(),
                "weights view reaches past its data"
            );
        }
        let (mr, nr) = isa.tile();
        let panel = match role {
            WeightRole::Broadcast => mr,
            WeightRole::Vector => nr,
        };
        let quads = k.div_ceil(4);
        let panels = channels.div_ceil(panel);
        let mut data = AlignedBytes::zeroed(panels * quads * panel * 4);
        let bytes = data.as_mut_slice();
        let mut sums = vec![0i32; channels];
        for c in 0..channels {
            let (p, r) = (c / panel, c % panel);
            for kk in 0..k {
                let v = w[c * ch_stride + kk * k_stride];
                sums[c] += v as i32;
                let (q, t) = (kk / 4, kk % 4);
                bytes[((p * quads + q) * panel + r) * 4 + t] = v as u8;
            }
        }
        PackedQWeights {
            isa,
            role,
            channels,
            k,
            panel,
            data,
            sums,
        }
    }

    /// Convolution weights `[channels, k]` row-major, for [`qgemm_wx`].
    pub fn for_conv(isa: QIsa, w: &[i8], channels: usize, k: usize) -> PackedQWeights {
        PackedQWeights::new(isa, WeightRole::Broadcast, w, channels, k, k, 1)
    }

    /// Dense weights `[k, n]` row-major (ONNX MatMul's B), for [`qgemm_xw`].
    pub fn for_dense(isa: QIsa, w: &[i8], k: usize, n: usize) -> PackedQWeights {
        PackedQWeights::new(isa, WeightRole::Vector, w, n, k, 1, n)
    }

    pub fn channels(&self) -> usize {
        self.channels
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn isa(&self) -> QIsa {
        self.isa
    }
    /// Σ_k w[c, k] per channel.
    pub fn sums(&self) -> &[i32] {
        &self.sums
    }

    fn quads(&self) -> usize {
        self.k.div_ceil(4)
    }

    fn panel_ptr(&self, p: usize) -> *const u8 {
        // SAFETY (of the callers' arithmetic): panels are contiguous, quads × panel × 4 bytes.
        self.data
            .as_ptr()
            .wrapping_add(p * self.quads() * self.panel * 4)
    }
}

/// An int8 activation operand.
#[derive(Clone, Copy, Debug)]
pub enum ActSrc<'a> {
    /// f32 values quantized while packing: `q = clamp(round(x · inv_scale) + zero_point)`.
    F32 {
        data: &'a [f32],
        ld: usize,
        inv_scale: f32,
        zero_point: i32,
    },
    /// Already quantized values.
    U8 { data: &'a [u8], ld: usize },
}

/// Arguments of one microkernel call + epilogue (raw pointers: shared across threads).
pub(crate) struct Tile {
    pub quads: usize,
    /// Broadcast panel (MR rows × 4 bytes per quad) and vector panel (NR rows × 4 per quad).
    pub bcast: *const u8,
    pub vec: *const u8,
    pub m_eff: usize,
    pub n_eff: usize,
    /// Tile origin in C (element offset applied by the kernel) and its leading dimension.
    pub c_f32: *mut f32,
    pub c_u8: *mut u8,
    /// Exact integer output ([`QOut::I32`]); null otherwise.
    pub c_i32: *mut i32,
    pub ldc: usize,
    pub residual: *const f32,
    pub requant: Option<Requant>,
    /// Per-channel coefficients at the tile's first channel (row in `wx`, column in `xw`).
    pub corr: *const i32,
    pub mul: *const f32,
    pub bias: *const f32,
    pub act: Activation,
    /// [`OffsetTerm`] at the tile's first channel and first activation vector (null: none).
    pub term_factor: *const i32,
    pub term_sums: *const i32,
}

pub(crate) type TileFn = unsafe fn(&Tile);

/// One variant's entry points.
pub(crate) struct QKernels {
    pub wx: TileFn,
    pub xw: TileFn,
    pub xw1: TileFn,
    /// Packs `w` columns of a k-major activation panel (`panel` wide) with quantization.
    pub pack_kmajor: unsafe fn(&ActSrc, usize, usize, usize, usize, *mut u8),
    /// Packs `rows` activation rows (k contiguous) into a broadcast panel.
    pub pack_rows: unsafe fn(&ActSrc, usize, usize, usize, usize, *mut u8),
}

fn kernels(isa: QIsa) -> &'static QKernels {
    assert!(
        isa.is_available(),
        "int8 variant {} is not supported by this CPU",
        isa.name()
    );
    match isa {
        QIsa::Scalar => &scalar::KERNELS,
        #[cfg(all(target_arch = "x86_64", test))]
        QIsa::AvxVnni if !is_x86_feature_detected!("avxvnni") => &x86::AVXVNNI_EVEX,
        #[cfg(target_arch = "x86_64")]
        QIsa::Avx2 => &x86::AVX2,
        #[cfg(target_arch = "x86_64")]
        QIsa::AvxVnni => &x86::AVXVNNI,
        #[cfg(target_arch = "x86_64")]
        QIsa::Avx512Vnni => &x86::AVX512VNNI,
        #[cfg(not(target_arch = "x86_64"))]
        _ => &scalar::KERNELS,
    }
}

// One pool of workers for every kernel.
use crate::kernels::parallel::{parallel_for, SendPtr};

thread_local! {
    static PANEL: std::cell::Cell<Option<AlignedBytes>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with at least `len` bytes of this thread's panel scratch.
pub(crate) fn with_panel<R>(len: usize, f: impl FnOnce(&mut AlignedBytes) -> R) -> R {
    let mut buf = PANEL.with(|c| c.take()).unwrap_or_default();
    buf.reserve(len);
    let r = f(&mut buf);
    PANEL.with(|c| {
        let keep = match c.take() {
            Some(p) if p.as_slice().len() >= buf.as_slice().len() => p,
            _ => buf,
        };
        c.set(Some(keep));
    });
    r
}

/// Packed activation panels per chunk of `qgemm_wx` (stays in L1).
const CHUNK_BYTES: usize = 32 << 10;

/// Minimum multiply-adds per task before another thread is worth waking.
const MIN_MACS_PER_TASK: usize = 1 << 21;

fn check_out(out: &QOut, rows: usize, cols: usize, ldc: usize) {
    if rows > 0 && cols > 0 {
        assert!(ldc >= cols, "qgemm: ldc {ldc} < n {cols}");
        let need = (rows - 1) * ldc + cols;
        assert!(out.len() >= need, "qgemm: C has {} < {need}", out.len());
    }
}

fn check_epi(epi: &QEpilogue, channels: usize, c_len: usize) {
    assert!(
        epi.corr.len() >= channels && epi.mul.len() >= channels && epi.bias.len() >= channels,
        "qgemm: epilogue coefficients shorter than the {channels} channels"
    );
    if let Some(r) = epi.residual {
        assert!(r.len() >= c_len, "qgemm: residual too short");
    }
    if let Some(term) = epi.offset_term {
        assert!(
            term.factor.len() >= channels,
            "qgemm: offset-term factors shorter than the {channels} channels"
        );
    }
}

/// Where the tiles of one GEMM call write, and what all its tiles share.
#[derive(Clone, Copy)]
struct TileTarget {
    c_f32: SendPtr<f32>,
    c_u8: SendPtr<u8>,
    c_i32: SendPtr<i32>,
    requant: Option<Requant>,
    ldc: usize,
    quads: usize,
}

impl TileTarget {
    fn new(out: &mut QOut, ldc: usize, quads: usize) -> TileTarget {
        fn null<T>() -> SendPtr<T> {
            SendPtr(std::ptr::null_mut())
        }
        let (c_f32, c_u8, c_i32, requant) = match out {
            QOut::F32 { data, requant } => (SendPtr(data.as_mut_ptr()), null(), null(), *requant),
            QOut::U8 { data, requant } => {
                (null(), SendPtr(data.as_mut_ptr()), null(), Some(*requant))
            }
            QOut::I32 { data } => (null(), null(), SendPtr(data.as_mut_ptr()), None),
        };
        TileTarget {
            c_f32,
            c_u8,
            c_i32,
            requant,
            ldc,
            quads,
        }
    }

    /// The tile of `m_eff × n_eff` outputs at element `off` of C whose first channel (row in
    /// `wx`, column in `xw`) is `ch0` and first activation vector (column in `wx`, row in `xw`)
    /// `act0`, from the given broadcast and vector panels.
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &self,
        epi: &QEpilogue,
        bcast: *const u8,
        vec: *const u8,
        m_eff: usize,
        n_eff: usize,
        off: usize,
        ch0: usize,
        act0: usize,
    ) -> Tile {
        let (term_factor, term_sums) = match epi.offset_term {
            Some(term) => (
                term.factor.as_ptr().wrapping_add(ch0),
                term.sums.as_ptr().wrapping_add(act0),
            ),
            None => (std::ptr::null(), std::ptr::null()),
        };
        Tile {
            quads: self.quads,
            bcast,
            vec,
            m_eff,
            n_eff,
            c_f32: offset(self.c_f32.get(), off),
            c_u8: offset(self.c_u8.get(), off),
            c_i32: offset(self.c_i32.get(), off),
            ldc: self.ldc,
            residual: epi
                .residual
                .map_or(std::ptr::null(), |r| r.as_ptr().wrapping_add(off)),
            requant: self.requant,
            corr: epi.corr.as_ptr().wrapping_add(ch0),
            mul: epi.mul.as_ptr().wrapping_add(ch0),
            bias: epi.bias.as_ptr().wrapping_add(ch0),
            act: epi.activation,
            term_factor,
            term_sums,
        }
    }
}

/// Convolution orientation: `C[M×N] = epi(W[M×K] · (X[K×N] − zx))` with `X` k-major (element
/// (k, j) at `data[k·ld + j]`), `M = w.channels()`. C is row-major with leading dimension `ldc`.
pub fn qgemm_wx(
    w: &PackedQWeights,
    x: &ActSrc,
    n: usize,
    out: QOut,
    ldc: usize,
    epi: &QEpilogue,
    threads: usize,
) {
    qgemm_wx_with(w.isa, w, x, n, out, ldc, epi, threads)
}

/// [`qgemm_wx`] on an explicit variant (must be the one `w` was packed for).
#[allow(clippy::too_many_arguments)]
pub fn qgemm_wx_with(
    isa: QIsa,
    w: &PackedQWeights,
    x: &ActSrc,
    n: usize,
    mut out: QOut,
    ldc: usize,
    epi: &QEpilogue,
    threads: usize,
) {
    assert_eq!(w.isa, isa, "weights packed for {}", w.isa.name());
    assert_eq!(w.role, WeightRole::Broadcast, "weights packed for qgemm_xw");
    let kern = kernels(isa);
    let (m, k) = (w.channels, w.k);
    check_out(&out, m, n, ldc);
    check_epi(epi, m, if m > 0 { (m - 1) * ldc + n } else { 0 });
    check_act(x, k, n, true);
    if let Some(term) = epi.offset_term {
        assert!(
            term.sums.len() >= n,
            "qgemm: offset-term sums shorter than the {n} columns"
        );
    }
    if m == 0 || n == 0 {
        return;
    }
    let (mr, nr) = isa.tile();
    let quads = w.quads();
    let n_panels = n.div_ceil(nr);
    let m_panels = m.div_ceil(mr);
    let target = TileTarget::new(&mut out, ldc, quads);
    // Split pixels first; split channels too when there are too few pixel panels.
    let macs = m * n * k;
    let wanted = if threads > 1 {
        (macs / MIN_MACS_PER_TASK).clamp(1, 4 * threads)
    } else {
        1
    };
    let n_tasks = wanted.min(n_panels);
    let m_tasks = (wanted / n_tasks).clamp(1, m_panels);
    let n_per = n_panels.div_ceil(n_tasks);
    let m_per = m_panels.div_ceil(m_tasks);
    parallel_for(threads, n_tasks * m_tasks, |task| {
        let (tn, tm) = (task % n_tasks, task / n_tasks);
        // Rounded-up shares can leave the last tasks past the end (5 panels over 4 tasks of
        // 2): their ranges start clamped, so they are empty rather than reversed.
        let (p0, p1) = ((tn * n_per).min(n_panels), ((tn + 1) * n_per).min(n_panels));
        let (q0, q1) = ((tm * m_per).min(m_panels), ((tm + 1) * m_per).min(m_panels));
        // Pixel panels are packed a chunk at a time (as many as fit in 32 KiB), then every
        // channel panel runs over the whole chunk: with a short K, writing C dominates, and
        // this writes each output row in long runs instead of one tile-width per channel panel.
        let panel_bytes = quads * nr * 4;
        let chunk = (CHUNK_BYTES / panel_bytes).clamp(1, (p1 - p0).max(1));
        with_panel(chunk * panel_bytes, |buf| {
            let mut pc = p0;
            while pc < p1 {
                let pe = (pc + chunk).min(p1);
                for p in pc..pe {
                    let j0 = p * nr;
                    // SAFETY: the buffer holds `chunk` panels; the source view was checked.
                    unsafe {
                        let dst = buf.as_mut_ptr().add((p - pc) * panel_bytes);
                        (kern.pack_kmajor)(x, k, j0, nr.min(n - j0), nr, dst)
                    };
                }
                for mp in q0..q1 {
                    for p in pc..pe {
                        let j0 = p * nr;
                        let n_eff = nr.min(n - j0);
                        let c0 = mp * mr;
                        // SAFETY: panel p of the chunk lies inside the buffer.
                        let vec = unsafe { buf.as_ptr().add((p - pc) * panel_bytes) };
                        let tile = target.tile(
                            epi,
                            w.panel_ptr(mp),
                            vec,
                            mr.min(m - c0),
                            n_eff,
                            c0 * ldc + j0,
                            c0,
                            j0,
                        );
                        // SAFETY: the tile lies inside C (checked), the panels are fully packed.
                        unsafe { (kern.wx)(&tile) };
                    }
                }
                pc = pe;
            }
        });
    });
}

/// `p + off`, keeping a null pointer null (the output kind not in use).
fn offset<T>(p: *mut T, off: usize) -> *mut T {
    if p.is_null() {
        p
    } else {
        p.wrapping_add(off)
    }
}

fn check_act(x: &ActSrc, k: usize, cols: usize, k_major: bool) {
    if k == 0 || cols == 0 {
        return;
    }
    let (len, ld) = match x {
        ActSrc::F32 { data, ld, .. } => (data.len(), *ld),
        ActSrc::U8 { data, ld } => (data.len(), *ld),
    };
    let need = if k_major {
        (k - 1) * ld + cols
    } else {
        (cols - 1) * ld + k
    };
    assert!(
        len >= need,
        "qgemm: activation view needs {need} elements, has {len}"
    );
}

/// Dense orientation: `C[M×N] = epi((X[M×K] − zx) · W[K×N])` with `X` row-major (leading
/// dimension `ld` of the source), `N = w.channels()`.
pub fn qgemm_xw(
    x: &ActSrc,
    m: usize,
    w: &PackedQWeights,
    out: QOut,
    ldc: usize,
    epi: &QEpilogue,
    threads: usize,
) {
    qgemm_xw_with(w.isa, x, m, w, out, ldc, epi, threads)
}

/// [`qgemm_xw`] on an explicit variant.
#[allow(clippy::too_many_arguments)]
pub fn qgemm_xw_with(
    isa: QIsa,
    x: &ActSrc,
    m: usize,
    w: &PackedQWeights,
    mut out: QOut,
    ldc: usize,
    epi: &QEpilogue,
    threads: usize,
) {
    assert_eq!(w.isa, isa, "weights packed for {}", w.isa.name());
    assert_eq!(w.role, WeightRole::Vector, "weights packed for qgemm_wx");
    let kern = kernels(isa);
    let (n, k) = (w.channels, w.k);
    check_out(&out, m, n, ldc);
    check_epi(epi, n, if m > 0 { (m - 1) * ldc + n } else { 0 });
    check_act(x, k, m, false);
    if let Some(term) = epi.offset_term {
        assert!(
            term.sums.len() >= m,
            "qgemm: offset-term sums shorter than the {m} rows"
        );
    }
    if m == 0 || n == 0 {
        return;
    }
    let (mr0, nr) = isa.tile();
    // A few rows (batch-1 dense layers): the one-row kernel, no wasted broadcast rows.
    let (mr, tile_fn) = if m < 4 { (1, kern.xw1) } else { (mr0, kern.xw) };
    let quads = w.quads();
    let n_panels = n.div_ceil(nr);
    let m_panels = m.div_ceil(mr);
    let target = TileTarget::new(&mut out, ldc, quads);
    let macs = m * n * k;
    let wanted = if threads > 1 {
        (macs / MIN_MACS_PER_TASK).clamp(1, 4 * threads)
    } else {
        1
    };
    let m_tasks = wanted.min(m_panels);
    let n_tasks = (wanted / m_tasks).clamp(1, n_panels);
    let m_per = m_panels.div_ceil(m_tasks);
    let n_per = n_panels.div_ceil(n_tasks);
    parallel_for(threads, n_tasks * m_tasks, |task| {
        let (tm, tn) = (task % m_tasks, task / m_tasks);
        let (q0, q1) = (tm * m_per, ((tm + 1) * m_per).min(m_panels));
        let (p0, p1) = (tn * n_per, ((tn + 1) * n_per).min(n_panels));
        with_panel(quads * mr * 4, |buf| {
            for mp in q0..q1 {
                let r0 = mp * mr;
                let m_eff = mr.min(m - r0);
                // SAFETY: the panel holds quads × mr × 4 bytes; the source view was checked.
                unsafe { (kern.pack_rows)(x, k, r0, m_eff, mr, buf.as_mut_ptr()) };
                for p in p0..p1 {
                    let c0 = p * nr;
                    let tile = target.tile(
                        epi,
                        buf.as_ptr(),
                        w.panel_ptr(p),
                        m_eff,
                        nr.min(n - c0),
                        r0 * ldc + c0,
                        c0,
                        r0,
                    );
                    // SAFETY: as in `qgemm_wx_with`.
                    unsafe { tile_fn(&tile) };
                }
            }
        });
    });
}

/// Whether the int8 variant this CPU runs has a byte dot-product instruction (VNNI). The
/// integer ops with their own kernels (MatMulInteger's and ConvInteger's `kernels::integer`,
/// the float LSTM) keep those where it does not: the AVX2 emulation was measured only for the
/// QDQ convolutions and GEMMs (smart-turn-int8 on a Zen 1 guest, 1092 → 291 ms against the
/// scalar int8 kernel), not against those paths.
pub fn multiplies_bytes_natively() -> bool {
    QIsa::detect() >= QIsa::AvxVnni
}

/// Which int8 variant this CPU runs ("avx512-vnni", "avx-vnni", "avx2" or "scalar").
pub fn isa_name() -> &'static str {
    QIsa::detect().name()
}
