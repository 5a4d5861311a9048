//! The per-ISA kernel tables. Each ISA instantiates the generic microkernel, packing, GEMV and
//! activation code inside `#[target_feature]` functions (the generic code is all
//! `#[inline(always)]`, so it compiles with that ISA's instructions), and exposes them as one
//! [`Kernel`] of function pointers. Selection happens once, at run time (see `mod.rs`).
//!
//! | ISA | vector | microkernel MR × NR | accumulators |
//! |---|---|---|---|
//! | `avx512` | `__m512` | 12 × 32 | 24 zmm (+2 B, +1 broadcast) |
//! | `avx2+fma` | `__m256` | 6 × 16 | 12 ymm (+2 B, +1 broadcast) |
//! | `scalar` | `f32` | 4 × 4 | 16 scalars |

use super::micro::TileEpi;
use super::pack::PackedView;
use super::{Activation, Blocking, Isa};

pub(crate) type MicroFn =
    unsafe fn(usize, *const f32, *const f32, *mut f32, usize, usize, usize, &TileEpi);
/// `(kc, a, lda, b, c, ldc, n_eff, epi)`: a tile of all MR rows of a row-major A, unpacked.
pub(crate) type MicroRowsFn =
    unsafe fn(usize, *const f32, usize, *const f32, *mut f32, usize, usize, &TileEpi);
/// `(src, ws, ks, wlen, klen, dst)`, see [`super::pack::pack`].
pub(crate) type PackFn = unsafe fn(*const f32, usize, usize, usize, usize, *mut f32);
/// `(m, stride, rows, k, x, y)`.
pub(crate) type GemvFn = unsafe fn(*const f32, usize, usize, usize, *const f32, *mut f32);
/// `(m, stride, len, k, x, xs, rows, y, ys)`, see [`super::gemv::gemv_axpy_rows`] and
/// [`super::gemv::gemv_dot_rows`]; `rows` 2-4.
pub(crate) type GemvRowsFn =
    unsafe fn(*const f32, usize, usize, usize, *const f32, usize, usize, *mut f32, usize);
pub(crate) type PanelGemvFn = unsafe fn(&PackedView, usize, usize, *const f32, *mut f32);
pub(crate) type EpiVecFn =
    unsafe fn(*const f32, usize, *mut f32, usize, f32, *const f32, *const f32, &Activation);
pub(crate) type SliceFn = unsafe fn(&Activation, &mut [f32]);
pub(crate) type ErfFn = unsafe fn(&mut [f32]);

/// One ISA's kernels. All function pointers may only be called when `isa.is_available()`.
pub(crate) struct Kernel {
    pub isa: Isa,
    pub mr: usize,
    pub nr: usize,
    /// Floats per vector: an edge tile of at most this many columns runs a one-vector instance.
    pub lanes: usize,
    pub blocking: Blocking,
    pub micro: MicroFn,
    pub micro_rows: MicroRowsFn,
    pub pack_a: PackFn,
    pub pack_b: PackFn,
    pub gemv_dot: GemvFn,
    pub gemv_axpy: GemvFn,
    /// `gemv_axpy` prefetching rows ahead, for a matrix that streams from memory.
    pub gemv_axpy_stream: GemvFn,
    pub gemv_axpy_rows: GemvRowsFn,
    pub gemv_axpy_rows_stream: GemvRowsFn,
    pub gemv_dot_rows: GemvRowsFn,
    pub panel_gemv_a: PanelGemvFn,
    pub panel_gemv_b: PanelGemvFn,
    pub epilogue_vec: EpiVecFn,
    pub act_slice: SliceFn,
    pub erf_slice: ErfFn,
}

/// The row counts of the smaller microkernel instances edge tiles run (a third and two thirds
/// of `mr`; an edge tile with more rows runs the full instance).
pub(crate) const fn edge_rows(mr: usize) -> (usize, usize) {
    if mr >= 3 {
        (mr / 3, 2 * (mr / 3))
    } else {
        (mr, mr)
    }
}

impl Kernel {
    /// Rows and columns the microkernels compute for an `m × n` C, edge tiles included.
    pub fn computed_extent(&self, m: usize, n: usize) -> (usize, usize) {
        let (r1, r2) = edge_rows(self.mr);
        let rows = m / self.mr * self.mr
            + match m % self.mr {
                0 => 0,
                r if r <= r1 => r1,
                r if r <= r2 => r2,
                _ => self.mr,
            };
        let cols = n / self.nr * self.nr
            + match n % self.nr {
                0 => 0,
                r if r <= self.lanes => self.lanes,
                _ => self.nr,
            };
        (rows, cols)
    }
}

macro_rules! isa_kernels {
    ($name:ident, $(#[$attr:meta])*; $V:ty, $mr:literal, $nv:literal) => {
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::super::{act, gemv, micro, pack, simd::Vf32};
            use super::super::micro::TileEpi;
            use super::super::pack::PackedView;
            use super::super::Activation;
            #[cfg(target_arch = "x86_64")]
            #[allow(unused_imports)]
            use std::arch::x86_64::*;

            pub const MR: usize = $mr;
            pub const LANES: usize = <$V as Vf32>::LANES;
            pub const NR: usize = $nv * LANES;

            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn micro(
                kc: usize,
                a: *const f32,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                m_eff: usize,
                n_eff: usize,
                epi: &TileEpi,
            ) {
                // Edge tiles run a smaller instance: a third, two thirds or all of the rows,
                // one vector or all of them.
                const R1: usize = super::edge_rows(MR).0;
                const R2: usize = super::edge_rows(MR).1;
                macro_rules! run {
                    ($rows:expr, $vecs:expr) => {
                        micro::micro::<$V, MR, $nv, { $rows }, { $vecs }, true, false>(
                            kc, a, 0, b, c, ldc, m_eff, n_eff, epi, store_tile,
                        )
                    };
                }
                if m_eff == MR && n_eff == NR {
                    // Whole tiles, nearly all of them, run the instance without an edge path.
                    return micro::micro::<$V, MR, $nv, MR, $nv, false, false>(
                        kc, a, 0, b, c, ldc, m_eff, n_eff, epi, store_tile,
                    );
                }
                match (m_eff > R2, m_eff > R1, n_eff > LANES) {
                    (true, _, true) => run!(MR, $nv),
                    (true, _, false) => run!(MR, 1),
                    (false, true, true) => run!(R2, $nv),
                    (false, true, false) => run!(R2, 1),
                    (false, false, true) => run!(R1, $nv),
                    (false, false, false) => run!(R1, 1),
                }
            }

            /// [`micro`] over a tile of all `MR` rows read from a row-major A (`a` the tile's
            /// first row, `lda` floats between rows), unpacked.
            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn micro_rows(
                kc: usize,
                a: *const f32,
                lda: usize,
                b: *const f32,
                c: *mut f32,
                ldc: usize,
                n_eff: usize,
                epi: &TileEpi,
            ) {
                if n_eff == NR {
                    micro::micro::<$V, MR, $nv, MR, $nv, false, true>(
                        kc, a, lda, b, c, ldc, MR, n_eff, epi, store_tile,
                    )
                } else if n_eff > LANES {
                    micro::micro::<$V, MR, $nv, MR, $nv, true, true>(
                        kc, a, lda, b, c, ldc, MR, n_eff, epi, store_tile,
                    )
                } else {
                    micro::micro::<$V, MR, $nv, MR, 1, true, true>(
                        kc, a, lda, b, c, ldc, MR, n_eff, epi, store_tile,
                    )
                }
            }

            $(#[$attr])*
            #[inline(never)]
            unsafe fn store_tile(
                tile: *const f32,
                tile_ld: usize,
                m_eff: usize,
                n_eff: usize,
                c: *mut f32,
                ldc: usize,
                epi: &TileEpi,
            ) {
                micro::store_tile::<$V>(tile, tile_ld, m_eff, n_eff, c, ldc, epi)
            }

            $(#[$attr])*
            pub unsafe fn pack_a(
                src: *const f32,
                ws: usize,
                ks: usize,
                wlen: usize,
                klen: usize,
                dst: *mut f32,
            ) {
                pack::pack::<$V, MR>(src, ws, ks, wlen, klen, dst)
            }

            $(#[$attr])*
            pub unsafe fn pack_b(
                src: *const f32,
                ws: usize,
                ks: usize,
                wlen: usize,
                klen: usize,
                dst: *mut f32,
            ) {
                pack::pack::<$V, NR>(src, ws, ks, wlen, klen, dst)
            }

            $(#[$attr])*
            pub unsafe fn gemv_dot(
                m: *const f32,
                rs: usize,
                rows: usize,
                k: usize,
                x: *const f32,
                y: *mut f32,
            ) {
                gemv::gemv_dot::<$V>(m, rs, rows, k, x, y)
            }

            $(#[$attr])*
            pub unsafe fn gemv_axpy(
                m: *const f32,
                cs: usize,
                rows: usize,
                k: usize,
                x: *const f32,
                y: *mut f32,
            ) {
                gemv::gemv_axpy::<$V, false>(m, cs, rows, k, x, y)
            }

            $(#[$attr])*
            pub unsafe fn gemv_axpy_stream(
                m: *const f32,
                cs: usize,
                rows: usize,
                k: usize,
                x: *const f32,
                y: *mut f32,
            ) {
                gemv::gemv_axpy::<$V, true>(m, cs, rows, k, x, y)
            }

            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn gemv_axpy_rows(
                m: *const f32,
                cs: usize,
                len: usize,
                k: usize,
                x: *const f32,
                xs: usize,
                rows: usize,
                y: *mut f32,
                ys: usize,
            ) {
                gemv::gemv_axpy_some_rows::<$V, false>(m, cs, len, k, x, xs, rows, y, ys)
            }

            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn gemv_axpy_rows_stream(
                m: *const f32,
                cs: usize,
                len: usize,
                k: usize,
                x: *const f32,
                xs: usize,
                rows: usize,
                y: *mut f32,
                ys: usize,
            ) {
                gemv::gemv_axpy_some_rows::<$V, true>(m, cs, len, k, x, xs, rows, y, ys)
            }

            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn gemv_dot_rows(
                m: *const f32,
                rs: usize,
                len: usize,
                k: usize,
                x: *const f32,
                xs: usize,
                rows: usize,
                y: *mut f32,
                ys: usize,
            ) {
                match rows {
                    2 => gemv::gemv_dot_rows::<$V, 2>(m, rs, len, k, x, xs, y, ys),
                    3 => gemv::gemv_dot_rows::<$V, 3>(m, rs, len, k, x, xs, y, ys),
                    _ => gemv::gemv_dot_rows::<$V, 4>(m, rs, len, k, x, xs, y, ys),
                }
            }

            $(#[$attr])*
            pub unsafe fn panel_gemv_a(
                view: &PackedView,
                p0: usize,
                p1: usize,
                x: *const f32,
                y: *mut f32,
            ) {
                gemv::panel_gemv::<$V, MR>(view, p0, p1, x, y)
            }

            $(#[$attr])*
            pub unsafe fn panel_gemv_b(
                view: &PackedView,
                p0: usize,
                p1: usize,
                x: *const f32,
                y: *mut f32,
            ) {
                gemv::panel_gemv::<$V, NR>(view, p0, p1, x, y)
            }

            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn epilogue_vec(
                y: *const f32,
                len: usize,
                out: *mut f32,
                os: usize,
                bias_s: f32,
                bias_v: *const f32,
                res: *const f32,
                act: &Activation,
            ) {
                gemv::epilogue_vec::<$V>(y, len, out, os, bias_s, bias_v, res, act)
            }

            $(#[$attr])*
            pub unsafe fn act_slice(act: &Activation, data: &mut [f32]) {
                act::activate_slice::<$V>(act, data)
            }

            $(#[$attr])*
            pub unsafe fn erf_slice(data: &mut [f32]) {
                act::erf_slice::<$V>(data)
            }
        }
    };
}

isa_kernels!(scalar, ; f32, 4, 4);
#[cfg(target_arch = "x86_64")]
isa_kernels!(avx2, #[target_feature(enable = "avx2,fma")]; __m256, 6, 2);
#[cfg(target_arch = "x86_64")]
isa_kernels!(avx512, #[target_feature(enable = "avx512f")]; __m512, 12, 2);

macro_rules! kernel_table {
    ($m:ident, $isa:expr, $blocking:expr) => {
        Kernel {
            isa: $isa,
            mr: $m::MR,
            nr: $m::NR,
            lanes: $m::LANES,
            blocking: $blocking,
            micro: $m::micro,
            micro_rows: $m::micro_rows,
            pack_a: $m::pack_a,
            pack_b: $m::pack_b,
            gemv_dot: $m::gemv_dot,
            gemv_axpy: $m::gemv_axpy,
            gemv_axpy_stream: $m::gemv_axpy_stream,
            gemv_axpy_rows: $m::gemv_axpy_rows,
            gemv_axpy_rows_stream: $m::gemv_axpy_rows_stream,
            gemv_dot_rows: $m::gemv_dot_rows,
            panel_gemv_a: $m::panel_gemv_a,
            panel_gemv_b: $m::panel_gemv_b,
            epilogue_vec: $m::epilogue_vec,
            act_slice: $m::act_slice,
            erf_slice: $m::erf_slice,
        }
    };
}

pub(crate) static SCALAR: Kernel = kernel_table!(
    scalar,
    Isa::Scalar,
    Blocking {
        mc: 64,
        kc: 256,
        nc: 1024,
        nc_short: 128
    }
);

#[cfg(target_arch = "x86_64")]
pub(crate) static AVX2: Kernel = kernel_table!(
    avx2,
    Isa::Avx2Fma,
    Blocking {
        mc: 144,
        kc: 256,
        nc: 4096,
        nc_short: 256
    }
);

/// The 480 KiB A block (mc × kc) stays in L2 (1 MiB on Zen 4 and Zen 5), the kc × nc B block
/// (8 MiB) in L3; short problems use 256-column B blocks that stay in L2. kc = 512 makes the
/// B micro-panel 64 KiB, more than L1, but L2 feeds the ~15 B/cycle the kernel needs and C is
/// updated half as often: on the development guest (EPYC Zen 4, family 25 model 17) kc 512
/// vs 256 measured 90% vs 87% of the FMA peak on 1024³ and 89% vs 86% on 2048³.
/// These are the tuned points; `blocking::for_caches` re-sizes mc, nc and nc_short for the
/// caches of the machine the kernels run on.
#[cfg(target_arch = "x86_64")]
pub(crate) static AVX512: Kernel = kernel_table!(
    avx512,
    Isa::Avx512,
    Blocking {
        mc: 240,
        kc: 512,
        nc: 4096,
        nc_short: 256
    }
);

/// The kernel table of `isa` (whether or not this CPU can run it).
pub(crate) fn table(isa: Isa) -> &'static Kernel {
    match isa {
        Isa::Scalar => &SCALAR,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => &AVX2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => &AVX512,
        #[cfg(not(target_arch = "x86_64"))]
        _ => &SCALAR,
    }
}
