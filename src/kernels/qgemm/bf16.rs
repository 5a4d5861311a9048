//! BF16 GEMM: operands rounded to bfloat16 (nearest even), products accumulated in f32 by
//! `vdpbf16ps` (two bf16 products per f32 lane per instruction, twice the FMA rate), with the
//! float epilogue (per-channel bias, residual, activation).
//!
//! Same structure as the int8 GEMM: k-pair panels (`P` rows × 2 bf16 per pair of k, K padded
//! to even with zeros), a broadcast operand (MR rows) and a vector operand (NR rows); `wx`
//! broadcasts the weights (convolutions, NCHW), `xw` the activations (dense layers). f32
//! activations are converted while packed.
//!
//! Without AVX-512 BF16 (AMD before Zen 4, Intel client cores and Xeons before Cooper Lake)
//! the AVX2 variant widens each k-pair in registers (the even bf16 shifted up 16 bits, the
//! odd one masked: both exact f32) and runs two FMAs per pair: the fp32 rate, with half the
//! weight bytes, which is what a memory-bound layer gains from bf16 on such CPUs.

use super::{with_panel, AlignedBytes};
use crate::kernels::gemm::{self, Activation};
use crate::kernels::parallel::{parallel_for, SendPtr};

/// Instruction-set variant of the bf16 kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BIsa {
    Scalar,
    /// AVX2 + FMA: each bf16 pair widened to two f32 in registers, two FMAs per pair.
    Avx2,
    Avx512Bf16,
}

impl BIsa {
    pub const ALL: [BIsa; 3] = [BIsa::Scalar, BIsa::Avx2, BIsa::Avx512Bf16];

    pub fn name(self) -> &'static str {
        match self {
            BIsa::Scalar => "scalar",
            BIsa::Avx2 => "avx2",
            BIsa::Avx512Bf16 => "avx512-bf16",
        }
    }

    pub fn is_available(self) -> bool {
        match self {
            BIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            BIsa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            BIsa::Avx512Bf16 => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512bf16")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best available variant, detected once (`ROOFLINE_ISA=scalar` forces the portable one).
    pub fn detect() -> BIsa {
        static BEST: std::sync::OnceLock<BIsa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            if std::env::var("ROOFLINE_ISA").as_deref() == Ok("scalar") {
                return BIsa::Scalar;
            }
            BIsa::ALL
                .iter()
                .rev()
                .copied()
                .find(|i| i.is_available())
                .unwrap_or(BIsa::Scalar)
        })
    }

    /// `(MR, NR)`.
    pub fn tile(self) -> (usize, usize) {
        match self {
            BIsa::Scalar => (4, 8),
            // 8 accumulators, the pair's two widened vectors per column block, the two
            // widened broadcasts and the mask: 15 of the 16 ymm registers.
            BIsa::Avx2 => (4, 16),
            BIsa::Avx512Bf16 => (8, 32),
        }
    }
}

/// f32 → bf16, round to nearest even; denormal inputs flush to signed zero and NaN stays NaN
/// (what `vcvtne2ps2bf16` does).
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    if b & 0x7F80_0000 == 0 {
        return ((b >> 16) & 0x8000) as u16;
    }
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

#[inline(always)]
fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Which operand of the microkernel the weights are (see [`super::WeightRole`]).
pub use super::WeightRole;

/// Weights (`channels × k`) rounded to bf16 and packed once.
#[derive(Clone)]
pub struct PackedBWeights {
    isa: BIsa,
    role: WeightRole,
    channels: usize,
    k: usize,
    panel: usize,
    data: AlignedBytes,
}

impl PackedBWeights {
    /// Packs `w` (channel c, depth k at `w[c * ch_stride + k * k_stride]`), already bf16 bits.
    pub fn new(
        isa: BIsa,
        role: WeightRole,
        w: &[u16],
        channels: usize,
        k: usize,
        ch_stride: usize,
        k_stride: usize,
    ) -> PackedBWeights {
        assert!(
            isa.is_available(),
            "bf16 variant {} unavailable",
            isa.name()
        );
        if channels > 0 && k > 0 {
            assert!((channels - 1) * ch_stride + (k - 1) * k_stride < w.len());
        }
        let (mr, nr) = isa.tile();
        let panel = match role {
            WeightRole::Broadcast => mr,
            WeightRole::Vector => nr,
        };
        let pairs = k.div_ceil(2);
        let panels = channels.div_ceil(panel);
        let mut data = AlignedBytes::zeroed(panels * pairs * panel * 4);
        let bytes = data.as_mut_slice();
        for c in 0..channels {
            let (p, r) = (c / panel, c % panel);
            for kk in 0..k {
                let v = w[c * ch_stride + kk * k_stride].to_le_bytes();
                let at = ((p * pairs + kk / 2) * panel + r) * 4 + (kk % 2) * 2;
                bytes[at..at + 2].copy_from_slice(&v);
            }
        }
        PackedBWeights {
            isa,
            role,
            channels,
            k,
            panel,
            data,
        }
    }

    /// Convolution weights `[channels, k]` (bf16 bits), for [`bgemm_wx`].
    pub fn for_conv(isa: BIsa, w: &[u16], channels: usize, k: usize) -> PackedBWeights {
        PackedBWeights::new(isa, WeightRole::Broadcast, w, channels, k, k, 1)
    }

    /// Dense weights `[k, n]` (bf16 bits), for [`bgemm_xw`].
    pub fn for_dense(isa: BIsa, w: &[u16], k: usize, n: usize) -> PackedBWeights {
        PackedBWeights::new(isa, WeightRole::Vector, w, n, k, 1, n)
    }

    pub fn channels(&self) -> usize {
        self.channels
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn isa(&self) -> BIsa {
        self.isa
    }

    fn pairs(&self) -> usize {
        self.k.div_ceil(2)
    }

    fn panel_ptr(&self, p: usize) -> *const u8 {
        self.data
            .as_ptr()
            .wrapping_add(p * self.pairs() * self.panel * 4)
    }
}

/// A bf16 GEMM activation operand: f32 (rounded while packing) or bf16 bits.
#[derive(Clone, Copy, Debug)]
pub enum BActSrc<'a> {
    F32 { data: &'a [f32], ld: usize },
    Bf16 { data: &'a [u16], ld: usize },
}

/// Epilogue of a bf16 GEMM: `y = acc + bias[c] (+ residual)`, then the activation.
#[derive(Clone, Copy, Debug)]
pub struct BEpilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

pub(crate) struct BTile {
    pub pairs: usize,
    pub bcast: *const u8,
    pub vec: *const u8,
    pub m_eff: usize,
    pub n_eff: usize,
    pub c: *mut f32,
    pub ldc: usize,
    pub residual: *const f32,
    /// Bias at the tile's first channel, or null.
    pub bias: *const f32,
    pub act: Activation,
}

type BTileFn = unsafe fn(&BTile);

struct BKernels {
    wx: BTileFn,
    xw: BTileFn,
    xw1: BTileFn,
    pack_kmajor: unsafe fn(&BActSrc, usize, usize, usize, usize, *mut u8),
}

static SCALAR: BKernels = BKernels {
    wx: |t| unsafe { tile_scalar::<4, 8>(t, true) },
    xw: |t| unsafe { tile_scalar::<4, 8>(t, false) },
    xw1: |t| unsafe { tile_scalar::<1, 8>(t, false) },
    pack_kmajor: pack_kmajor_scalar,
};

fn kernels(isa: BIsa) -> &'static BKernels {
    assert!(
        isa.is_available(),
        "bf16 variant {} is not supported by this CPU",
        isa.name()
    );
    match isa {
        BIsa::Scalar => &SCALAR,
        #[cfg(target_arch = "x86_64")]
        BIsa::Avx2 => &x86::AVX2,
        #[cfg(target_arch = "x86_64")]
        BIsa::Avx512Bf16 => &x86::AVX512BF16,
        #[cfg(not(target_arch = "x86_64"))]
        _ => &SCALAR,
    }
}

#[inline(always)]
unsafe fn tile_scalar<const M: usize, const N: usize>(t: &BTile, ch_row: bool) {
    let mut acc = [[0f32; N]; M];
    for p in 0..t.pairs {
        let a = t.bcast.add(p * M * 4) as *const u16;
        let b = t.vec.add(p * N * 4) as *const u16;
        for (r, row) in acc.iter_mut().enumerate() {
            let (a0, a1) = (
                bf16_to_f32(a.add(2 * r).read_unaligned()),
                bf16_to_f32(a.add(2 * r + 1).read_unaligned()),
            );
            for (l, cell) in row.iter_mut().enumerate() {
                let (b0, b1) = (
                    bf16_to_f32(b.add(2 * l).read_unaligned()),
                    bf16_to_f32(b.add(2 * l + 1).read_unaligned()),
                );
                *cell += a0 * b0 + a1 * b1;
            }
        }
    }
    epilogue(acc.as_ptr() as *const f32, N, t, ch_row, false);
}

/// Bias, residual, activation and store of an f32 tile at `acc` (leading dimension `acc_ld`).
#[inline(always)]
unsafe fn epilogue(acc: *const f32, acc_ld: usize, t: &BTile, ch_row: bool, vector_act: bool) {
    for r in 0..t.m_eff {
        let c = t.c.add(r * t.ldc);
        for l in 0..t.n_eff {
            let mut v = *acc.add(r * acc_ld + l);
            if !t.bias.is_null() {
                v += *t.bias.add(if ch_row { r } else { l });
            }
            if !t.residual.is_null() {
                v += *t.residual.add(r * t.ldc + l);
            }
            *c.add(l) = v;
        }
        let row = std::slice::from_raw_parts_mut(c, t.n_eff);
        match t.act {
            Activation::None => {}
            act if vector_act => gemm::apply_activation(&act, row),
            act => row
                .iter_mut()
                .for_each(|v| *v = gemm::activation_scalar(&act, *v)),
        }
    }
}

unsafe fn pack_kmajor_scalar(
    x: &BActSrc,
    k: usize,
    j0: usize,
    w: usize,
    panel: usize,
    dst: *mut u8,
) {
    let pairs = k.div_ceil(2);
    let dst = dst as *mut u16;
    for p in 0..pairs {
        for l in 0..panel {
            for i in 0..2 {
                let kk = 2 * p + i;
                let v = if kk < k && l < w {
                    match *x {
                        BActSrc::F32 { data, ld } => {
                            f32_to_bf16(*data.get_unchecked(kk * ld + j0 + l))
                        }
                        BActSrc::Bf16 { data, ld } => *data.get_unchecked(kk * ld + j0 + l),
                    }
                } else {
                    0
                };
                dst.add((p * panel + l) * 2 + i).write_unaligned(v);
            }
        }
    }
}

/// Packs activation rows (k contiguous) into a broadcast panel.
unsafe fn pack_rows(x: &BActSrc, k: usize, r0: usize, rows: usize, panel: usize, dst: *mut u8) {
    let pairs = k.div_ceil(2);
    let dst = dst as *mut u16;
    for p in 0..pairs {
        for r in 0..panel {
            for i in 0..2 {
                let kk = 2 * p + i;
                let v = if kk < k && r < rows {
                    match *x {
                        BActSrc::F32 { data, ld } => {
                            f32_to_bf16(*data.get_unchecked((r0 + r) * ld + kk))
                        }
                        BActSrc::Bf16 { data, ld } => *data.get_unchecked((r0 + r) * ld + kk),
                    }
                } else {
                    0
                };
                dst.add((p * panel + r) * 2 + i).write_unaligned(v);
            }
        }
    }
}

fn src_len(x: &BActSrc) -> (usize, usize) {
    match x {
        BActSrc::F32 { data, ld } => (data.len(), *ld),
        BActSrc::Bf16 { data, ld } => (data.len(), *ld),
    }
}

const MIN_MACS_PER_TASK: usize = 1 << 21;

/// Convolution orientation: `C[M×N] = epi(W[M×K] · X[K×N])`, X k-major, C row-major (`ldc`).
pub fn bgemm_wx(
    w: &PackedBWeights,
    x: &BActSrc,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    epi: &BEpilogue,
    threads: usize,
) {
    bgemm_wx_with(w.isa, w, x, n, c, ldc, epi, threads)
}

/// [`bgemm_wx`] on an explicit variant.
#[allow(clippy::too_many_arguments)]
pub fn bgemm_wx_with(
    isa: BIsa,
    w: &PackedBWeights,
    x: &BActSrc,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    epi: &BEpilogue,
    threads: usize,
) {
    assert_eq!(w.isa, isa, "weights packed for {}", w.isa.name());
    assert_eq!(w.role, WeightRole::Broadcast);
    let kern = kernels(isa);
    let (m, k) = (w.channels, w.k);
    if m == 0 || n == 0 {
        return;
    }
    let c_len = (m - 1) * ldc + n;
    assert!(ldc >= n && c.len() >= c_len, "bgemm: C too short");
    let (len, ld) = src_len(x);
    assert!(k == 0 || len >= (k - 1) * ld + n, "bgemm: X too short");
    if let Some(b) = epi.bias {
        assert!(b.len() >= m);
    }
    if let Some(r) = epi.residual {
        assert!(r.len() >= c_len);
    }
    let (mr, nr) = isa.tile();
    let pairs = w.pairs();
    let n_panels = n.div_ceil(nr);
    let m_panels = m.div_ceil(mr);
    let wanted = if threads > 1 {
        (m * n * k / MIN_MACS_PER_TASK).clamp(1, 4 * threads)
    } else {
        1
    };
    let n_tasks = wanted.min(n_panels);
    let m_tasks = (wanted / n_tasks).clamp(1, m_panels);
    let (n_per, m_per) = (n_panels.div_ceil(n_tasks), m_panels.div_ceil(m_tasks));
    let cp = SendPtr(c.as_mut_ptr());
    parallel_for(threads, n_tasks * m_tasks, |task| {
        let (tn, tm) = (task % n_tasks, task / n_tasks);
        with_panel(pairs * nr * 4, |buf| {
            for p in tn * n_per..((tn + 1) * n_per).min(n_panels) {
                let j0 = p * nr;
                let n_eff = nr.min(n - j0);
                // SAFETY: the buffer holds the panel; the view was checked.
                unsafe { (kern.pack_kmajor)(x, k, j0, n_eff, nr, buf.as_mut_ptr()) };
                for mp in tm * m_per..((tm + 1) * m_per).min(m_panels) {
                    let c0 = mp * mr;
                    let off = c0 * ldc + j0;
                    let tile = BTile {
                        pairs,
                        bcast: w.panel_ptr(mp),
                        vec: buf.as_ptr(),
                        m_eff: mr.min(m - c0),
                        n_eff,
                        c: cp.get().wrapping_add(off),
                        ldc,
                        residual: epi
                            .residual
                            .map_or(std::ptr::null(), |r| r.as_ptr().wrapping_add(off)),
                        bias: epi
                            .bias
                            .map_or(std::ptr::null(), |b| b.as_ptr().wrapping_add(c0)),
                        act: epi.activation,
                    };
                    // SAFETY: the tile lies inside C.
                    unsafe { (kern.wx)(&tile) };
                }
            }
        });
    });
}

/// Dense orientation: `C[M×N] = epi(X[M×K] · W[K×N])`, X row-major (leading dimension `ld`).
pub fn bgemm_xw(
    x: &BActSrc,
    m: usize,
    w: &PackedBWeights,
    c: &mut [f32],
    ldc: usize,
    epi: &BEpilogue,
    threads: usize,
) {
    bgemm_xw_with(w.isa, x, m, w, c, ldc, epi, threads)
}

/// [`bgemm_xw`] on an explicit variant.
#[allow(clippy::too_many_arguments)]
pub fn bgemm_xw_with(
    isa: BIsa,
    x: &BActSrc,
    m: usize,
    w: &PackedBWeights,
    c: &mut [f32],
    ldc: usize,
    epi: &BEpilogue,
    threads: usize,
) {
    assert_eq!(w.isa, isa, "weights packed for {}", w.isa.name());
    assert_eq!(w.role, WeightRole::Vector);
    let kern = kernels(isa);
    let (n, k) = (w.channels, w.k);
    if m == 0 || n == 0 {
        return;
    }
    let c_len = (m - 1) * ldc + n;
    assert!(ldc >= n && c.len() >= c_len, "bgemm: C too short");
    let (len, ld) = src_len(x);
    assert!(k == 0 || len >= (m - 1) * ld + k, "bgemm: X too short");
    if let Some(b) = epi.bias {
        assert!(b.len() >= n);
    }
    if let Some(r) = epi.residual {
        assert!(r.len() >= c_len);
    }
    let (mr0, nr) = isa.tile();
    let (mr, tile_fn) = if m < 4 { (1, kern.xw1) } else { (mr0, kern.xw) };
    let pairs = w.pairs();
    let n_panels = n.div_ceil(nr);
    let m_panels = m.div_ceil(mr);
    let wanted = if threads > 1 {
        (m * n * k / MIN_MACS_PER_TASK).clamp(1, 4 * threads)
    } else {
        1
    };
    let m_tasks = wanted.min(m_panels);
    let n_tasks = (wanted / m_tasks).clamp(1, n_panels);
    let (m_per, n_per) = (m_panels.div_ceil(m_tasks), n_panels.div_ceil(n_tasks));
    let cp = SendPtr(c.as_mut_ptr());
    parallel_for(threads, n_tasks * m_tasks, |task| {
        let (tm, tn) = (task % m_tasks, task / m_tasks);
        with_panel(pairs * mr * 4, |buf| {
            for mp in tm * m_per..((tm + 1) * m_per).min(m_panels) {
                let r0 = mp * mr;
                let m_eff = mr.min(m - r0);
                // SAFETY: the buffer holds the panel; the view was checked.
                unsafe { pack_rows(x, k, r0, m_eff, mr, buf.as_mut_ptr()) };
                for p in tn * n_per..((tn + 1) * n_per).min(n_panels) {
                    let c0 = p * nr;
                    let off = r0 * ldc + c0;
                    let tile = BTile {
                        pairs,
                        bcast: buf.as_ptr(),
                        vec: w.panel_ptr(p),
                        m_eff,
                        n_eff: nr.min(n - c0),
                        c: cp.get().wrapping_add(off),
                        ldc,
                        residual: epi
                            .residual
                            .map_or(std::ptr::null(), |r| r.as_ptr().wrapping_add(off)),
                        bias: epi
                            .bias
                            .map_or(std::ptr::null(), |b| b.as_ptr().wrapping_add(c0)),
                        act: epi.activation,
                    };
                    // SAFETY: the tile lies inside C.
                    unsafe { tile_fn(&tile) };
                }
            }
        });
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::super::x86::lane_mask;
    use super::{epilogue, BActSrc, BKernels, BTile};
    use crate::kernels::gemm::Activation;

    pub(super) static AVX512BF16: BKernels = BKernels {
        wx: wx_512,
        xw: xw_512,
        xw1: xw1_512,
        pack_kmajor: pack_kmajor_512,
    };

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    unsafe fn wx_512(t: &BTile) {
        tile_512::<8, 2>(t, true)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    unsafe fn xw_512(t: &BTile) {
        tile_512::<8, 2>(t, false)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    unsafe fn xw1_512(t: &BTile) {
        tile_512::<1, 2>(t, false)
    }

    #[inline(always)]
    unsafe fn tile_512<const M: usize, const NV: usize>(t: &BTile, ch_row: bool) {
        let mut acc = [[_mm512_setzero_ps(); NV]; M];
        let mut a = t.bcast;
        let mut b = t.vec;
        for _ in 0..t.pairs {
            let mut bv: [__m512bh; NV] =
                [std::mem::transmute::<__m512i, __m512bh>(_mm512_setzero_si512()); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    b.add(v * 64) as *const _
                ));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let s = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    (a.add(r * 4) as *const i32).read_unaligned(),
                ));
                for (x, y) in row.iter_mut().zip(bv.iter()) {
                    *x = _mm512_dpbf16_ps(*x, s, *y);
                }
            }
            a = a.add(M * 4);
            b = b.add(NV * 64);
        }
        let simple = matches!(
            t.act,
            Activation::None | Activation::Relu | Activation::Clip { .. }
        );
        if !simple {
            let mut tile = [[0f32; 32]; M];
            for (row, accs) in tile.iter_mut().zip(acc.iter()) {
                for (v, x) in accs.iter().enumerate() {
                    _mm512_storeu_ps(row.as_mut_ptr().add(v * 16), *x);
                }
            }
            return epilogue(tile.as_ptr() as *const f32, 32, t, ch_row, true);
        }
        for (r, row) in acc.iter().enumerate() {
            if r >= t.m_eff {
                break;
            }
            let bias_r = if ch_row && !t.bias.is_null() {
                _mm512_set1_ps(*t.bias.add(r))
            } else {
                _mm512_setzero_ps()
            };
            for (v, x) in row.iter().enumerate() {
                let j = v * 16;
                if j >= t.n_eff {
                    break;
                }
                let mask = lane_mask(t.n_eff - j);
                let mut y = _mm512_add_ps(*x, bias_r);
                if !ch_row && !t.bias.is_null() {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, t.bias.add(j)));
                }
                if !t.residual.is_null() {
                    y = _mm512_add_ps(
                        y,
                        _mm512_maskz_loadu_ps(mask, t.residual.add(r * t.ldc + j)),
                    );
                }
                y = match t.act {
                    Activation::Relu => _mm512_max_ps(y, _mm512_setzero_ps()),
                    Activation::Clip { min, max } => {
                        _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(min)), _mm512_set1_ps(max))
                    }
                    _ => y,
                };
                _mm512_mask_storeu_ps(t.c.add(r * t.ldc + j), mask, y);
            }
        }
    }

    /// Packs columns `j0..j0+w` of a k-major source (panel a multiple of 16) as bf16 pairs.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2")]
    unsafe fn pack_kmajor_512(
        x: &BActSrc,
        k: usize,
        j0: usize,
        w: usize,
        panel: usize,
        dst: *mut u8,
    ) {
        if !panel.is_multiple_of(16) {
            return super::pack_kmajor_scalar(x, k, j0, w, panel, dst);
        }
        let pairs = k.div_ceil(2);
        let chunks = panel / 16;
        match *x {
            BActSrc::F32 { data, ld } => {
                let src = data.as_ptr();
                let idx = _mm512_set_epi16(
                    31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                    5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0,
                );
                for c in 0..chunks {
                    let valid = w.saturating_sub(c * 16);
                    let mask = lane_mask(valid);
                    let col = j0 + c * 16;
                    for p in 0..pairs {
                        let (k0, k1) = (2 * p, 2 * p + 1);
                        let r0 = if valid > 0 {
                            _mm512_maskz_loadu_ps(mask, src.add(k0 * ld + col))
                        } else {
                            _mm512_setzero_ps()
                        };
                        let r1 = if valid > 0 && k1 < k {
                            _mm512_maskz_loadu_ps(mask, src.add(k1 * ld + col))
                        } else {
                            _mm512_setzero_ps()
                        };
                        let h =
                            std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(r1, r0));
                        let out = _mm512_permutexvar_epi16(idx, h);
                        _mm512_storeu_si512(dst.add((p * panel + c * 16) * 4) as *mut _, out);
                    }
                }
            }
            BActSrc::Bf16 { data, ld } => {
                let src = data.as_ptr();
                for c in 0..chunks {
                    let valid = w.saturating_sub(c * 16);
                    let mask = lane_mask(valid);
                    let col = j0 + c * 16;
                    for p in 0..pairs {
                        let (k0, k1) = (2 * p, 2 * p + 1);
                        let r0 = if valid > 0 {
                            _mm256_maskz_loadu_epi16(mask, src.add(k0 * ld + col) as *const _)
                        } else {
                            _mm256_setzero_si256()
                        };
                        let r1 = if valid > 0 && k1 < k {
                            _mm256_maskz_loadu_epi16(mask, src.add(k1 * ld + col) as *const _)
                        } else {
                            _mm256_setzero_si256()
                        };
                        // In-lane interleave, then put the 128-bit halves in column order.
                        let lo = _mm256_unpacklo_epi16(r0, r1);
                        let hi = _mm256_unpackhi_epi16(r0, r1);
                        let o = dst.add((p * panel + c * 16) * 4) as *mut __m256i;
                        _mm256_storeu_si256(o, _mm256_permute2x128_si256::<0x20>(lo, hi));
                        _mm256_storeu_si256(o.add(1), _mm256_permute2x128_si256::<0x31>(lo, hi));
                    }
                }
            }
        }
    }

    pub(super) static AVX2: BKernels = BKernels {
        wx: wx_256,
        xw: xw_256,
        xw1: xw1_256,
        pack_kmajor: pack_kmajor_256,
    };

    #[target_feature(enable = "avx2,fma")]
    unsafe fn wx_256(t: &BTile) {
        tile_256::<4>(t, true)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn xw_256(t: &BTile) {
        tile_256::<4>(t, false)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn xw1_256(t: &BTile) {
        row_256(t)
    }

    /// The even (low) bf16 of each 32-bit lane as f32: shifted into the high half.
    #[inline(always)]
    unsafe fn even_f32(pairs: __m256i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(pairs))
    }

    /// The odd (high) bf16 of each 32-bit lane as f32: the low half cleared.
    #[inline(always)]
    unsafe fn odd_f32(pairs: __m256i, high: __m256i) -> __m256 {
        _mm256_castsi256_ps(_mm256_and_si256(pairs, high))
    }

    /// `M` broadcast rows × 16 columns. One accumulator per row and column block takes both
    /// products of a pair (two dependent FMAs): 8 independent chains, which cover the FMA
    /// latency on cores issuing one 256-bit FMA a cycle (Zen 1) and nearly on those issuing two.
    #[inline(always)]
    unsafe fn tile_256<const M: usize>(t: &BTile, ch_row: bool) {
        let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        let mut a = t.bcast;
        let mut b = t.vec;
        for _ in 0..t.pairs {
            let b0 = _mm256_loadu_si256(b as *const __m256i);
            let b1 = _mm256_loadu_si256(b.add(32) as *const __m256i);
            let even = [even_f32(b0), even_f32(b1)];
            let odd = [odd_f32(b0, high), odd_f32(b1, high)];
            for (r, row) in acc.iter_mut().enumerate() {
                let pair = _mm256_set1_epi32((a.add(r * 4) as *const i32).read_unaligned());
                let (s0, s1) = (even_f32(pair), odd_f32(pair, high));
                for v in 0..2 {
                    row[v] = _mm256_fmadd_ps(s0, even[v], row[v]);
                    row[v] = _mm256_fmadd_ps(s1, odd[v], row[v]);
                }
            }
            a = a.add(M * 4);
            b = b.add(64);
        }
        store_256(&acc, t, ch_row);
    }

    /// One broadcast row × 16 columns (batch-1 dense layers): four independent chains (the
    /// even and odd products of alternate pairs) so the FMA latency does not bound a row.
    #[inline(always)]
    unsafe fn row_256(t: &BTile) {
        let high = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
        let mut even_acc = [[_mm256_setzero_ps(); 2]; 2];
        let mut odd_acc = [[_mm256_setzero_ps(); 2]; 2];
        let mut a = t.bcast;
        let mut b = t.vec;
        for p in 0..t.pairs {
            let set = p & 1;
            let pair = _mm256_set1_epi32((a as *const i32).read_unaligned());
            let (s0, s1) = (even_f32(pair), odd_f32(pair, high));
            for v in 0..2 {
                let bv = _mm256_loadu_si256(b.add(v * 32) as *const __m256i);
                even_acc[set][v] = _mm256_fmadd_ps(s0, even_f32(bv), even_acc[set][v]);
                odd_acc[set][v] = _mm256_fmadd_ps(s1, odd_f32(bv, high), odd_acc[set][v]);
            }
            a = a.add(4);
            b = b.add(64);
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; 1];
        for v in 0..2 {
            acc[0][v] = _mm256_add_ps(
                _mm256_add_ps(even_acc[0][v], odd_acc[0][v]),
                _mm256_add_ps(even_acc[1][v], odd_acc[1][v]),
            );
        }
        store_256(&acc, t, false);
    }

    /// The epilogue of an `M × 16` tile: bias, residual and ReLU/Clip in registers for whole
    /// 16-column rows; partial tiles and other activations through the shared epilogue.
    #[inline(always)]
    unsafe fn store_256<const M: usize>(acc: &[[__m256; 2]; M], t: &BTile, ch_row: bool) {
        let simple = matches!(
            t.act,
            Activation::None | Activation::Relu | Activation::Clip { .. }
        );
        if !simple || t.n_eff < 16 {
            let mut tile = [[0f32; 16]; M];
            for (row, accs) in tile.iter_mut().zip(acc.iter()) {
                for (v, x) in accs.iter().enumerate() {
                    _mm256_storeu_ps(row.as_mut_ptr().add(v * 8), *x);
                }
            }
            return epilogue(tile.as_ptr() as *const f32, 16, t, ch_row, true);
        }
        for (r, row) in acc.iter().enumerate().take(t.m_eff) {
            let bias_r = if ch_row && !t.bias.is_null() {
                _mm256_set1_ps(*t.bias.add(r))
            } else {
                _mm256_setzero_ps()
            };
            for (v, x) in row.iter().enumerate() {
                let j = v * 8;
                let mut y = _mm256_add_ps(*x, bias_r);
                if !ch_row && !t.bias.is_null() {
                    y = _mm256_add_ps(y, _mm256_loadu_ps(t.bias.add(j)));
                }
                if !t.residual.is_null() {
                    y = _mm256_add_ps(y, _mm256_loadu_ps(t.residual.add(r * t.ldc + j)));
                }
                y = match t.act {
                    Activation::Relu => _mm256_max_ps(y, _mm256_setzero_ps()),
                    Activation::Clip { min, max } => {
                        _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(min)), _mm256_set1_ps(max))
                    }
                    _ => y,
                };
                _mm256_storeu_ps(t.c.add(r * t.ldc + j), y);
            }
        }
    }

    /// f32 → bf16 in the low half of each lane, as [`super::f32_to_bf16`]: nearest even,
    /// denormals to signed zero, NaN kept quiet.
    #[inline(always)]
    unsafe fn bf16_lanes(x: __m256) -> __m256i {
        let bits = _mm256_castps_si256(x);
        let upper = _mm256_srli_epi32::<16>(bits);
        let lsb = _mm256_and_si256(upper, _mm256_set1_epi32(1));
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(
            bits,
            _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)),
        ));
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
        let quiet = _mm256_or_si256(upper, _mm256_set1_epi32(0x40));
        let no_exponent = _mm256_cmpeq_epi32(
            _mm256_and_si256(bits, _mm256_set1_epi32(0x7F80_0000)),
            _mm256_setzero_si256(),
        );
        let signed_zero = _mm256_and_si256(upper, _mm256_set1_epi32(0x8000));
        let finite = _mm256_blendv_epi8(rounded, signed_zero, no_exponent);
        _mm256_blendv_epi8(finite, quiet, nan)
    }

    /// 8 bf16 values zero-extended into 32-bit lanes.
    #[inline(always)]
    unsafe fn widen_u16(src: *const u16) -> __m256i {
        _mm256_cvtepu16_epi32(_mm_loadu_si128(src as *const __m128i))
    }

    /// Packs columns `j0..j0+w` of a k-major source as bf16 pairs (one 32-bit lane per
    /// column: k even low, k odd high), 8 columns per vector; a panel cut by the matrix's
    /// edge (the last of a row) is packed by the portable code.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pack_kmajor_256(
        x: &BActSrc,
        k: usize,
        j0: usize,
        w: usize,
        panel: usize,
        dst: *mut u8,
    ) {
        if w < panel || !panel.is_multiple_of(8) {
            return super::pack_kmajor_scalar(x, k, j0, w, panel, dst);
        }
        let pairs = k.div_ceil(2);
        for p in 0..pairs {
            let (k0, k1) = (2 * p, 2 * p + 1);
            for chunk in 0..panel / 8 {
                let col = j0 + chunk * 8;
                let (even, odd) = match *x {
                    BActSrc::F32 { data, ld } => {
                        let src = data.as_ptr();
                        let even = bf16_lanes(_mm256_loadu_ps(src.add(k0 * ld + col)));
                        let odd = if k1 < k {
                            bf16_lanes(_mm256_loadu_ps(src.add(k1 * ld + col)))
                        } else {
                            _mm256_setzero_si256()
                        };
                        (even, odd)
                    }
                    BActSrc::Bf16 { data, ld } => {
                        let src = data.as_ptr();
                        let even = widen_u16(src.add(k0 * ld + col));
                        let odd = if k1 < k {
                            widen_u16(src.add(k1 * ld + col))
                        } else {
                            _mm256_setzero_si256()
                        };
                        (even, odd)
                    }
                };
                let out = _mm256_or_si256(even, _mm256_slli_epi32::<16>(odd));
                _mm256_storeu_si256(dst.add((p * panel + chunk * 8) * 4) as *mut __m256i, out);
            }
        }
    }

    /// The vector conversion equals the scalar one lane for lane: ties to even, values that
    /// round up to infinity, denormals to signed zero, infinities and quiet NaN.
    #[test]
    fn bf16_lanes_match_the_scalar_conversion() {
        if !super::BIsa::Avx2.is_available() {
            return;
        }
        let values = [
            1.0f32,
            f32::from_bits(0x3F80_8000),
            f32::from_bits(0x3F81_8000),
            f32::MAX,
            -f32::MAX,
            f32::from_bits(0x0000_0001),
            f32::from_bits(0x8040_0000),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
            1.234_567e-20,
            -7.5e30,
            0.1,
        ];
        for chunk in values.chunks(8) {
            let mut lanes = [0f32; 8];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let mut got = [0u32; 8];
            // SAFETY: AVX2 checked above.
            unsafe {
                let converted = bf16_lanes(_mm256_loadu_ps(lanes.as_ptr()));
                _mm256_storeu_si256(got.as_mut_ptr() as *mut __m256i, converted);
            }
            for (&value, &bits) in chunk.iter().zip(&got) {
                assert_eq!(bits, super::f32_to_bf16(value) as u32, "{value:e}");
            }
        }
    }
}
