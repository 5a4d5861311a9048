//! FP32 GEMM with a fused epilogue: `C[m×n] = act(A[m×k]·B[k×n] + bias + residual)`.
//!
//! A BLIS-style implementation: operands are packed into k-major micro-panels (MR rows of A,
//! NR columns of B) inside cache-blocked loops (`mc × kc` A blocks in L2, `kc × nc` B blocks in
//! L3, see [`Blocking`]), and a register-blocked microkernel computes each `MR × NR` tile with
//! its accumulators in registers. The epilogue (bias, residual, activation) is applied in the
//! microkernel's store of the last k-block, while the tile is in registers or L1: there is no
//! separate pass over C.
//!
//! ISA variants ([`Isa`]): AVX-512F (12 × 32 tile), AVX2+FMA (6 × 16) and a portable scalar
//! path (4 × 4), selected once at run time from `is_x86_feature_detected!` and cached; every
//! variant shares the generic code (`simd.rs`, `micro.rs`, `pack.rs`, `gemv.rs`, `act.rs`)
//! instantiated under `#[target_feature]` (`isa.rs`). Operands are strided views ([`MatRef`]),
//! so transposed GEMMs and im2col layouts need no copy beyond packing. `m == 1` and `n == 1`
//! (dense layers at batch 1) take a streaming GEMV path that never packs. Weights used
//! repeatedly can be packed once ([`PackedA`], [`PackedB`]).
//!
//! Threading: `threads` workers of the kernels' spinning pool (`kernels::parallel`; `threads == 1` runs on the caller and
//! spawns nothing); see `driver.rs` for how the work is split.
//!
//! # Panics
//! The entry points panic when the shapes are inconsistent (A's columns ≠ B's rows, C, bias or
//! residual too short, a view reaching past its slice): these are programming errors of the
//! caller, which has validated the model before running it.

pub(crate) mod act;
pub mod blocking;
mod buf;
mod driver;
mod gemv;
mod isa;
mod micro;
mod pack;
pub(crate) mod simd;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use buf::AlignedBuf;
pub(crate) use driver::PackSource;
use driver::{Job, Opnd, Src};
use isa::Kernel;
use pack::PackedView;

/// Strided read-only matrix view: element (i, j) at `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows × cols` matrix.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        MatRef {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transposed view (no copy).
    pub fn t(&self) -> MatRef<'a> {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// Whether every element of the view lies inside `data`.
    pub fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .zip((self.cols - 1).checked_mul(self.col_stride))
            .and_then(|(r, c)| r.checked_add(c));
        matches!(last, Some(l) if l < self.data.len())
    }
}

/// Element-wise activation applied by the epilogue (ONNX semantics; see `act.rs` for the
/// accuracy of the transcendental ones).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    None,
    Relu,
    Clip {
        min: f32,
        max: f32,
    },
    LeakyRelu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x · clamp(x/6 + 1/2, 0, 1)`.
    HardSwish,
    Sigmoid,
    /// `x · sigmoid(x)`.
    Silu,
    /// Exact (erf) form: `x · Φ(x)`.
    Gelu,
    Tanh,
}

/// Bias added before the activation.
#[derive(Clone, Copy, Debug)]
pub enum BiasKind<'a> {
    None,
    /// `bias[i]` for row i (length ≥ m): convolution output channels.
    PerRow(&'a [f32]),
    /// `bias[j]` for column j (length ≥ n): dense layers.
    PerCol(&'a [f32]),
}

/// Applied in this order to each output element: acc (+ bias) (+ residual) then activation.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    pub bias: BiasKind<'a>,
    /// Added element-wise; same layout as C (leading dimension `ldc`).
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

impl Epilogue<'_> {
    /// No bias, no residual, no activation.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: BiasKind::None,
        residual: None,
        activation: Activation::None,
    };
}

/// Instruction-set variant of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    Avx2Fma,
    Avx512,
}

impl Isa {
    /// Every variant, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2Fma, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2Fma => "avx2+fma",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this CPU (and this build's target) can run the variant.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best available variant (detected once, cached).
    pub fn detect() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            Isa::ALL
                .iter()
                .rev()
                .copied()
                .find(|i| i.is_available())
                .unwrap_or(Isa::Scalar)
        })
    }

    /// Multiply-adds per k step this variant's microkernels really do for an `m × n` C: edge
    /// tiles compute whole (smaller) instances, so a 49-column C costs 64 columns with 32-wide
    /// tiles. Used to choose between computing C and Cᵀ.
    pub fn computed_work(self, m: usize, n: usize) -> usize {
        let (rows, cols) = isa::table(self).computed_extent(m, n);
        rows * cols
    }

    /// Microkernel tile `(MR, NR)`.
    pub fn tile(self) -> (usize, usize) {
        let k = isa::table(self);
        (k.mr, k.nr)
    }
}

/// Cache blocking. Values are rounded up to multiples of the microkernel tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Rows of the packed A block (`mc × kc`, sized for L2).
    pub mc: usize,
    /// Depth of a k-block: C is updated once per k-block.
    pub kc: usize,
    /// Columns of the packed B block (`kc × nc`, L3) shared by all A blocks of a tall problem.
    pub nc: usize,
    /// Columns of the B block when the rows fit one A block (`m ≤ mc`): packed and consumed
    /// while in L2.
    pub nc_short: usize,
}

/// Kernel variant and blocking for a call (an autotuner's knobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmConfig {
    pub isa: Isa,
    pub blocking: Blocking,
    /// B streams from memory at every call although it may fit the last-level cache alone: set
    /// on every product of a plan whose weights as a set outgrow that cache (an LLM's decode
    /// step reads 0.5-14 GB of 2-60 MB matrices, and its attention products read the KV cache
    /// between them), so the GEMV forms prefetch it (`Job::gemv_matrix_from_memory`).
    pub b_from_memory: bool,
}

impl GemmConfig {
    /// The defaults of `isa` on this machine (its table's tuned blocking sized for the caches
    /// stated with [`blocking::use_caches`], see [`blocking::for_caches`]), or `None` when this
    /// CPU lacks it.
    pub fn for_isa(isa: Isa) -> Option<GemmConfig> {
        let caches = blocking::stated_caches();
        isa.is_available().then(|| {
            let tuned = isa::table(isa).blocking;
            GemmConfig {
                isa,
                blocking: match caches {
                    Some(caches) => blocking::for_caches(tuned, isa.tile(), caches),
                    None => tuned,
                },
                b_from_memory: false,
            }
        })
    }

    fn kernel(&self) -> &'static Kernel {
        assert!(
            self.isa.is_available(),
            "GEMM variant {} is not supported by this CPU",
            self.isa.name()
        );
        let k = isa::table(self.isa);
        debug_assert_eq!(k.isa, self.isa);
        k
    }

    /// Blocking rounded to the kernel's tile (and at least one tile).
    fn normalized(&self) -> Blocking {
        let (mr, nr) = self.isa.tile();
        Blocking {
            mc: self.blocking.mc.max(1).div_ceil(mr) * mr,
            kc: self.blocking.kc.max(1),
            nc: self.blocking.nc.max(1).div_ceil(nr) * nr,
            nc_short: self.blocking.nc_short.max(1).div_ceil(nr) * nr,
        }
    }
}

impl Default for GemmConfig {
    /// The detected ISA with its blocking for the caches stated so far (not cached: the
    /// executor states them when it first plans, see [`blocking::use_caches`]).
    fn default() -> Self {
        GemmConfig::for_isa(Isa::detect()).expect("the detected ISA is available")
    }
}

/// Which microkernel was selected for this CPU: "avx512", "avx2+fma" or "scalar".
pub fn isa_name() -> &'static str {
    Isa::detect().name()
}

/// Reference semantics of an activation for one value (the same algorithm as the vectorised
/// epilogue, without FMA contraction).
pub fn activation_scalar(act: &Activation, x: f32) -> f32 {
    // SAFETY: the f32 implementation of `Vf32` uses no ISA extension and no pointers.
    unsafe { act::activate::<f32>(act, x) }
}

/// Applies `act` in place to every element of `data`, vectorised for this CPU.
pub fn apply_activation(act: &Activation, data: &mut [f32]) {
    let k = GemmConfig::default().kernel();
    // SAFETY: the selected kernel is available on this CPU.
    unsafe { (k.act_slice)(act, data) }
}

/// `erf` in place (max abs error ≤ 3e-7), vectorised for this CPU.
pub fn erf_in_place(data: &mut [f32]) {
    let k = GemmConfig::default().kernel();
    // SAFETY: the selected kernel is available on this CPU.
    unsafe { (k.erf_slice)(data) }
}

/// `C[m×n]` (row-major, leading dimension `ldc`) = `A[m×k]·B[k×n]` then the epilogue.
/// Overwrites C (elements past column n of each row are untouched).
pub fn sgemm(
    a: &MatRef,
    b: &MatRef,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    sgemm_with(&GemmConfig::default(), a, b, c, ldc, epilogue, threads)
}

/// [`sgemm`] with an explicit kernel variant and blocking.
pub fn sgemm_with(
    cfg: &GemmConfig,
    a: &MatRef,
    b: &MatRef,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    assert!(a.in_bounds(), "sgemm: A view reaches past its data");
    assert!(b.in_bounds(), "sgemm: B view reaches past its data");
    validate(a.rows, a.cols, b.rows, b.cols, c, ldc, epilogue);
    run(
        cfg,
        (a.rows, b.cols, a.cols),
        Opnd::Raw(Src::of_a(a)),
        Opnd::Raw(Src::of_b(b)),
        c,
        ldc,
        epilogue,
        threads,
    );
}

/// The last-level cache instance the executor stated (`blocking::use_caches`), else the one
/// the default blockings were tuned for (32 MiB): a matrix larger streams from memory at every
/// call (`Job::gemv_matrix_from_memory`). The unit tests take 64 KiB, so their GEMV shapes run
/// both forms.
pub(crate) fn last_level_bytes() -> u64 {
    const TUNED_FOR_L3: u64 = 32 << 20;
    if cfg!(test) {
        return 64 << 10;
    }
    blocking::stated_caches()
        .and_then(|caches| caches.l3_bytes)
        .unwrap_or(TUNED_FOR_L3)
}

/// Drives one validated `m × n × k` GEMM with `cfg`'s kernel and blocking: the one place every
/// entry point builds its [`Job`].
#[allow(clippy::too_many_arguments)]
fn run(
    cfg: &GemmConfig,
    (m, n, k): (usize, usize, usize),
    a: Opnd,
    b: Opnd,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    let bl = cfg.normalized();
    let job = Job {
        kern: cfg.kernel(),
        m,
        n,
        k,
        a,
        b,
        c: c.as_mut_ptr(),
        ldc,
        epi: epilogue,
        mc: rows_per_a_block(bl.mc, bl.kc, k, cfg.isa.tile().0),
        kc: bl.kc,
        nc: bl.nc,
        nc_short: bl.nc_short,
        // A one-column product streams A, any other B.
        gemv_matrix_from_memory: cfg.b_from_memory
            || k.saturating_mul(if n == 1 { m } else { n })
                .saturating_mul(4) as u64
                > last_level_bytes(),
    };
    driver::drive(&job, threads);
}

/// Rows of A per A block for a product of depth `k`: the block is sized in floats (`mc × kc`,
/// what the L2 holds), so a k shorter than `kc` fits proportionally more rows, rounded down to
/// whole `mr` tiles. A pointwise convolution with 16-32 input channels then runs its
/// 96-192 output channels as one A block, on the short-problem loop order that writes C in
/// long runs (`driver::run_region`), instead of as a tall problem that writes C one NR-column
/// strip of every row at a time (Zen 1, MobileNetV2's 16 → 96 layer at 112²: 1.79 → 1.55 ms).
fn rows_per_a_block(mc: usize, kc: usize, k: usize, mr: usize) -> usize {
    let depth = k.clamp(1, kc);
    (mc * kc / depth / mr * mr).max(mc)
}

fn validate(m: usize, k: usize, kb: usize, n: usize, c: &[f32], ldc: usize, epi: &Epilogue) {
    assert_eq!(k, kb, "sgemm: A is {m}×{k} but B is {kb}×{n}");
    if m == 0 || n == 0 {
        return;
    }
    assert!(ldc >= n, "sgemm: ldc {ldc} < n {n}");
    let c_len = (m - 1) * ldc + n;
    assert!(
        c.len() >= c_len,
        "sgemm: C has {} floats, needs {c_len}",
        c.len()
    );
    match epi.bias {
        BiasKind::PerRow(b) => assert!(b.len() >= m, "sgemm: row bias has {} < m = {m}", b.len()),
        BiasKind::PerCol(b) => {
            assert!(b.len() >= n, "sgemm: column bias has {} < n = {n}", b.len())
        }
        BiasKind::None => {}
    }
    if let Some(r) = epi.residual {
        assert!(
            r.len() >= c_len,
            "sgemm: residual has {} floats, needs {c_len}",
            r.len()
        );
    }
}

/// An A operand (`m × k`) packed once into the microkernel's panel layout, for repeated calls
/// (convolution weights).
pub struct PackedA {
    buf: AlignedBuf,
    rows: usize,
    cols: usize,
    cfg: GemmConfig,
}

/// A B operand (`k × n`) packed once (dense-layer weights).
pub struct PackedB {
    buf: AlignedBuf,
    rows: usize,
    cols: usize,
    cfg: GemmConfig,
}

impl PackedA {
    /// Packs `a` for this CPU's kernel.
    pub fn new(a: &MatRef) -> PackedA {
        PackedA::with_config(a, &GemmConfig::default())
    }

    pub fn with_config(a: &MatRef, cfg: &GemmConfig) -> PackedA {
        let kern = cfg.kernel();
        assert!(a.in_bounds(), "pack_a: view reaches past its data");
        let bl = cfg.normalized();
        let mut buf = AlignedBuf::zeroed(PackedView::size(a.rows, a.cols, kern.mr));
        if a.rows > 0 && a.cols > 0 {
            driver::pack_whole(
                kern,
                true,
                Src::of_a(a),
                a.cols,
                bl.kc,
                buf.as_mut_slice(),
                1,
            );
        }
        PackedA {
            buf,
            rows: a.rows,
            cols: a.cols,
            cfg: *cfg,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn config(&self) -> &GemmConfig {
        &self.cfg
    }
    /// Bytes of the packed panels.
    pub fn bytes(&self) -> usize {
        self.buf.as_slice().len() * 4
    }

    fn view(&self) -> PackedView<'_> {
        PackedView {
            data: self.buf.as_slice(),
            len: self.rows,
            k: self.cols,
            kc: self.cfg.normalized().kc,
            w: self.cfg.isa.tile().0,
        }
    }
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedB {}x{} ({} bytes)",
            self.rows,
            self.cols,
            self.bytes()
        )
    }
}

/// The threads, of `threads`, that a one-row product over a `matrix_elements` matrix (a GEMV)
/// runs on: memory-bound, it splits by the matrix it streams, not by its compute work. The cost
/// model reads the same rule (`analysis::classify::splits_across_threads`).
pub fn gemv_threads(threads: usize, matrix_elements: usize) -> usize {
    driver::gemv_threads(threads, matrix_elements)
}

/// Whether a product with `m` rows of A reads B through packed panels. With 1-4 rows the
/// GEMV and few-rows paths stream B once, unpacked, so a B packed ahead of time would only add
/// memory.
pub fn reads_b_packed(m: usize) -> bool {
    m > driver::FEW_ROWS
}

impl PackedB {
    /// Packs `b` for this CPU's kernel.
    pub fn new(b: &MatRef) -> PackedB {
        PackedB::with_config(b, &GemmConfig::default())
    }

    pub fn with_config(b: &MatRef, cfg: &GemmConfig) -> PackedB {
        let kern = cfg.kernel();
        assert!(b.in_bounds(), "pack_b: view reaches past its data");
        let bl = cfg.normalized();
        let mut buf = AlignedBuf::zeroed(PackedView::size(b.cols, b.rows, kern.nr));
        if b.rows > 0 && b.cols > 0 {
            driver::pack_whole(
                kern,
                false,
                Src::of_b(b),
                b.rows,
                bl.kc,
                buf.as_mut_slice(),
                1,
            );
        }
        PackedB {
            buf,
            rows: b.rows,
            cols: b.cols,
            cfg: *cfg,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn config(&self) -> &GemmConfig {
        &self.cfg
    }
    /// Bytes of the packed panels.
    pub fn bytes(&self) -> usize {
        self.buf.as_slice().len() * 4
    }

    fn view(&self) -> PackedView<'_> {
        PackedView {
            data: self.buf.as_slice(),
            len: self.cols,
            k: self.rows,
            kc: self.cfg.normalized().kc,
            w: self.cfg.isa.tile().1,
        }
    }
}

/// Packs `a` (`m × k`) once for [`sgemm_packed_a`].
pub fn pack_a(a: &MatRef) -> PackedA {
    PackedA::new(a)
}

/// Packs `b` (`k × n`) once for [`sgemm_packed_b`].
pub fn pack_b(b: &MatRef) -> PackedB {
    PackedB::new(b)
}

/// [`sgemm`] with a pre-packed A (uses the variant and blocking it was packed with).
pub fn sgemm_packed_a(
    a: &PackedA,
    b: &MatRef,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    assert!(b.in_bounds(), "sgemm: B view reaches past its data");
    validate(a.rows, a.cols, b.rows, b.cols, c, ldc, epilogue);
    run(
        &a.cfg,
        (a.rows, b.cols, a.cols),
        Opnd::Packed(a.view()),
        Opnd::Raw(Src::of_b(b)),
        c,
        ldc,
        epilogue,
        threads,
    );
}

/// [`sgemm_packed_a`] with a B (`a.cols() × b.cols()`) that packs itself block by block (a
/// convolution's im2col matrix), so it is never written out whole.
pub(crate) fn sgemm_packed_a_source(
    a: &PackedA,
    b: &dyn driver::PackSource,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    validate(a.rows, a.cols, a.cols, b.cols(), c, ldc, epilogue);
    run(
        &a.cfg,
        (a.rows, b.cols(), a.cols),
        Opnd::Packed(a.view()),
        Opnd::Source(b),
        c,
        ldc,
        epilogue,
        threads,
    );
}

/// [`sgemm`] with a pre-packed B (uses the variant and blocking it was packed with).
pub fn sgemm_packed_b(
    a: &MatRef,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
    epilogue: &Epilogue,
    threads: usize,
) {
    assert!(a.in_bounds(), "sgemm: A view reaches past its data");
    validate(a.rows, a.cols, b.rows, b.cols, c, ldc, epilogue);
    run(
        &b.cfg,
        (a.rows, b.cols, a.cols),
        Opnd::Raw(Src::of_a(a)),
        Opnd::Packed(b.view()),
        c,
        ldc,
        epilogue,
        threads,
    );
}
