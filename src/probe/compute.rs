//! Compute kernels: peak FLOP/s per precision, dispatched at run time per ISA.
//!
//! Each x86 kernel is an inline-assembly loop of independent accumulator chains, so the
//! instruction stream is exactly what is counted, whatever the optimisation level (tests run
//! unoptimised builds) and whatever the compiler would like to fold. Chains per kernel cover
//! latency × pipes with margin: FMA latency is 4-5 cycles on two pipes (≥ 10 chains needed;
//! 16 used at 512 bits, 12 at 256), `vdpbf16ps` about 6 (≥ 12; 24 used, which measured better
//! than 12 on Zen 5). Functions are compiled with `#[target_feature]` and only called after
//! `is_x86_feature_detected!` said yes; a portable scalar loop covers every other CPU.

use crate::device::Precision;

use super::cpu::IsaFlags;
use super::microarch::{flops_per_instruction, CoreModel, OpClass};
use super::record::ComputeMix;

/// The operand the kernels multiply by: small enough that accumulators never overflow and large
/// enough that nothing becomes subnormal (subnormals take microcode assists on some cores).
const FP64_OPERAND: f64 = 1e-3;
const FP32_OPERAND: f32 = 1e-3;
/// Two bf16 values of about 0.001 (0x3a83) in one dword.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const BF16_PAIR: u32 = 0x3a83_3a83;
/// Four int8 ones.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const INT8_QUAD: u32 = 0x0101_0101;
/// Two fp16 values of about 0.01 (0x211f) in one dword.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const FP16_PAIR: u32 = 0x211f_211f;

/// A native kernel: iterations, and a pointer to its 8-byte operand.
type NativeFn = unsafe fn(u64, *const u64);

#[derive(Clone, Copy)]
enum KernelFn {
    /// Needs the ISA named by the kernel; only built after detection said it is present.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Native(NativeFn),
    Portable(fn(u64)),
}

/// Chained adds per 16 vector instructions in the paced twins, for cores issuing the
/// instruction 2, 1 and ½ times per cycle: 12.5% more cycles than the vector work needs.
const PACED_ADDS: [u64; 3] = [9, 18, 36];
/// Vector instructions per paced iteration.
const PACED_VECTOR: u64 = 16;

/// A kernel's instructions interleaved with a chain of dependent register adds long enough
/// to bound the loop: the adds retire one per cycle, so adds per second is the clock the core
/// runs at *while* it issues the kernel's instructions at close to their peak rate (8/9 of it).
/// A chain timed after the kernel cannot see that clock: an Emerald Rapids guest ran a
/// dependent-add chain at the scalar clock right after 512-bit FMA blocks, while the same
/// chain interleaved with them ran about 8% slower, as did the FMAs themselves.
#[derive(Clone, Copy)]
pub struct PacedLoop {
    function: NativeFn,
    pub adds_per_iteration: u64,
    pub vector_per_iteration: u64,
}

/// One compute microbenchmark.
#[derive(Clone)]
pub struct ComputeKernel {
    pub id: &'static str,
    pub precision: Precision,
    pub mix: ComputeMix,
    pub isa: &'static str,
    pub vector_bits: u32,
    pub chains: u32,
    /// What one loop iteration executes.
    pub description: &'static str,
    pub flops_per_iteration: f64,
    /// (class, instructions per iteration): what the theoretical rate of this loop is
    /// derived from ([`super::microarch::CoreModel::body_flops_per_cycle`]).
    pub body: &'static [(OpClass, u64)],
    /// Retired instructions per iteration, the loop's `dec`/`jnz` included.
    pub instructions_per_iteration: u64,
    pub fallback: bool,
    /// The paced twin measuring the clock under this kernel's instructions, where one exists
    /// for the rate the core model gives them.
    pub paced: Option<PacedLoop>,
    operand_bits: u64,
    function: KernelFn,
}

impl std::fmt::Debug for ComputeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeKernel")
            .field("id", &self.id)
            .finish()
    }
}

impl ComputeKernel {
    /// Runs `iterations` loop iterations.
    pub fn run(&self, iterations: u64) {
        match self.function {
            // SAFETY: `Native` kernels are only constructed by `select_kernels` after the ISA
            // they need was detected at run time; the pointer is to a live u64.
            KernelFn::Native(function) => unsafe { function(iterations, &self.operand_bits) },
            KernelFn::Portable(function) => function(iterations),
        }
    }

    /// Runs `iterations` iterations of the paced twin; false where there is none.
    pub fn run_paced(&self, iterations: u64) -> bool {
        let Some(paced) = self.paced else {
            return false;
        };
        // SAFETY: as for `run`: a twin needs the same ISA as its kernel, and only kernels
        // built after detection get one.
        unsafe { (paced.function)(iterations, &self.operand_bits) };
        true
    }
}

/// Accumulating instructions `op acc, src, src` on registers `acc` (FMA 231 form and dot
/// products read and write their first operand).
#[cfg(target_arch = "x86_64")]
macro_rules! accumulate {
    ($op:literal, $w:literal, $src:literal; $($r:literal)*) => {
        concat!($($op, " ", $w, $r, ", ", $w, $src, ", ", $w, $src, "\n"),*)
    };
}

/// Adds `op acc, acc, src`.
#[cfg(target_arch = "x86_64")]
macro_rules! add_into {
    ($op:literal, $w:literal, $src:literal; $($r:literal)*) => {
        concat!($($op, " ", $w, $r, ", ", $w, $r, ", ", $w, $src, "\n"),*)
    };
}

/// A loop `iterations` times over the body; the operand is loaded from `constant` first.
#[cfg(target_arch = "x86_64")]
macro_rules! asm_kernel {
    ($name:ident, $feature:literal, $setup:expr, $($body:expr),+ $(,)?) => {
        #[target_feature(enable = $feature)]
        pub(super) unsafe fn $name(iterations: u64, constant: *const u64) {
            // SAFETY (for the caller): needs `$feature`; reads 8 bytes at `constant`; every
            // vector register it writes is declared clobbered through the C ABI, and the paced
            // twins' chain registers (rdx, rsi) are outputs: Win64 saves rsi for the caller,
            // so `clobber_abi` alone would not cover it.
            unsafe {
                std::arch::asm!(
                    $setup,
                    "2:",
                    $($body,)+
                    "dec rcx",
                    "jnz 2b",
                    inout("rcx") iterations.max(1) => _,
                    in("rax") constant,
                    out("rdx") _,
                    out("rsi") _,
                    clobber_abi("C"),
                    options(nostack, readonly),
                );
            }
        }
    };
}

/// One add of a paced loop's clock chain: `rdx += rsi` (rsi = 1, set by the loop's setup).
/// A register operand, not an immediate, for the reason given in `clock.rs`.
#[cfg(target_arch = "x86_64")]
macro_rules! chain_add {
    () => {
        "add rdx, rsi\n"
    };
}

/// The body of a paced twin ([`PacedLoop`]): 16 `op acc, src, src` on the listed accumulators
/// with 9 (`two`), 18 (`one`) or 36 (`half`) chained adds, so the chain bounds the loop on cores
/// that issue `op` 2, 1 or ½ times per cycle. Adds follow the vector instructions they pace (one
/// per pair, one per instruction, two per instruction) so both stay spread over the loop.
#[cfg(target_arch = "x86_64")]
macro_rules! paced_body {
    (two: $op:literal, $w:literal, $src:literal; $($a:literal $b:literal)*) => {
        concat!($($op, " ", $w, $a, ", ", $w, $src, ", ", $w, $src, "\n",
                  $op, " ", $w, $b, ", ", $w, $src, ", ", $w, $src, "\n",
                  chain_add!()),*, chain_add!())
    };
    (one: $op:literal, $w:literal, $src:literal; $($a:literal $b:literal)*) => {
        concat!($($op, " ", $w, $a, ", ", $w, $src, ", ", $w, $src, "\n", chain_add!(),
                  $op, " ", $w, $b, ", ", $w, $src, ", ", $w, $src, "\n", chain_add!()),*,
                chain_add!(), chain_add!())
    };
    (half: $op:literal, $w:literal, $src:literal; $($a:literal $b:literal)*) => {
        concat!($($op, " ", $w, $a, ", ", $w, $src, ", ", $w, $src, "\n",
                  chain_add!(), chain_add!(),
                  $op, " ", $w, $b, ", ", $w, $src, ", ", $w, $src, "\n",
                  chain_add!(), chain_add!()),*,
                chain_add!(), chain_add!(), chain_add!(), chain_add!())
    };
}

/// The three paced twins of a kernel, for 2, 1 and ½ instructions per cycle, and their bodies
/// as text (`$bodies`, checked by the tests against [`PACED_ADDS`]).
#[cfg(target_arch = "x86_64")]
macro_rules! paced_kernels {
    ($two:ident, $one:ident, $half:ident, $bodies:ident, $feature:literal, $setup:literal,
     $op:literal, $w:literal, $src:literal; $($r:literal)*) => {
        asm_kernel!($two, $feature, concat!("mov esi, 1\n", $setup),
            paced_body!(two: $op, $w, $src; $($r)*));
        asm_kernel!($one, $feature, concat!("mov esi, 1\n", $setup),
            paced_body!(one: $op, $w, $src; $($r)*));
        asm_kernel!($half, $feature, concat!("mov esi, 1\n", $setup),
            paced_body!(half: $op, $w, $src; $($r)*));
        #[cfg(test)]
        pub(super) const $bodies: (&str, [&str; 3]) = ($op, [
            paced_body!(two: $op, $w, $src; $($r)*),
            paced_body!(one: $op, $w, $src; $($r)*),
            paced_body!(half: $op, $w, $src; $($r)*),
        ]);
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    asm_kernel!(
        fp64_fma_zmm,
        "avx512f",
        "vbroadcastsd zmm31, qword ptr [rax]",
        accumulate!("vfmadd231pd", "zmm", "31";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15")
    );
    asm_kernel!(
        fp32_fma_zmm,
        "avx512f",
        "vbroadcastss zmm31, dword ptr [rax]",
        accumulate!("vfmadd231ps", "zmm", "31";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15")
    );
    // FMA and add chains interleaved in pairs so both pipe groups always have ready work.
    asm_kernel!(
        fp64_fma_add_zmm,
        "avx512f",
        "vbroadcastsd zmm31, qword ptr [rax]",
        accumulate!("vfmadd231pd", "zmm", "31"; "0" "1"),
        add_into!("vaddpd", "zmm", "31"; "12" "13"),
        accumulate!("vfmadd231pd", "zmm", "31"; "2" "3"),
        add_into!("vaddpd", "zmm", "31"; "14" "15"),
        accumulate!("vfmadd231pd", "zmm", "31"; "4" "5"),
        add_into!("vaddpd", "zmm", "31"; "16" "17"),
        accumulate!("vfmadd231pd", "zmm", "31"; "6" "7"),
        add_into!("vaddpd", "zmm", "31"; "18" "19"),
        accumulate!("vfmadd231pd", "zmm", "31"; "8" "9"),
        add_into!("vaddpd", "zmm", "31"; "20" "21"),
        accumulate!("vfmadd231pd", "zmm", "31"; "10" "11"),
        add_into!("vaddpd", "zmm", "31"; "22" "23")
    );
    asm_kernel!(
        fp32_fma_add_zmm,
        "avx512f",
        "vbroadcastss zmm31, dword ptr [rax]",
        accumulate!("vfmadd231ps", "zmm", "31"; "0" "1"),
        add_into!("vaddps", "zmm", "31"; "12" "13"),
        accumulate!("vfmadd231ps", "zmm", "31"; "2" "3"),
        add_into!("vaddps", "zmm", "31"; "14" "15"),
        accumulate!("vfmadd231ps", "zmm", "31"; "4" "5"),
        add_into!("vaddps", "zmm", "31"; "16" "17"),
        accumulate!("vfmadd231ps", "zmm", "31"; "6" "7"),
        add_into!("vaddps", "zmm", "31"; "18" "19"),
        accumulate!("vfmadd231ps", "zmm", "31"; "8" "9"),
        add_into!("vaddps", "zmm", "31"; "20" "21"),
        accumulate!("vfmadd231ps", "zmm", "31"; "10" "11"),
        add_into!("vaddps", "zmm", "31"; "22" "23")
    );
    asm_kernel!(
        fp64_fma_ymm,
        "avx2,fma",
        "vbroadcastsd ymm15, qword ptr [rax]",
        accumulate!("vfmadd231pd", "ymm", "15"; "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11")
    );
    asm_kernel!(
        fp32_fma_ymm,
        "avx2,fma",
        "vbroadcastss ymm15, dword ptr [rax]",
        accumulate!("vfmadd231ps", "ymm", "15"; "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11")
    );
    // Only 16 ymm registers: 8 FMA chains, 7 add chains and the operand.
    asm_kernel!(
        fp64_fma_add_ymm,
        "avx2,fma",
        "vbroadcastsd ymm15, qword ptr [rax]",
        accumulate!("vfmadd231pd", "ymm", "15"; "0" "1"),
        add_into!("vaddpd", "ymm", "15"; "8" "9"),
        accumulate!("vfmadd231pd", "ymm", "15"; "2" "3"),
        add_into!("vaddpd", "ymm", "15"; "10" "11"),
        accumulate!("vfmadd231pd", "ymm", "15"; "4" "5"),
        add_into!("vaddpd", "ymm", "15"; "12" "13"),
        accumulate!("vfmadd231pd", "ymm", "15"; "6" "7"),
        add_into!("vaddpd", "ymm", "15"; "14")
    );
    asm_kernel!(
        fp32_fma_add_ymm,
        "avx2,fma",
        "vbroadcastss ymm15, dword ptr [rax]",
        accumulate!("vfmadd231ps", "ymm", "15"; "0" "1"),
        add_into!("vaddps", "ymm", "15"; "8" "9"),
        accumulate!("vfmadd231ps", "ymm", "15"; "2" "3"),
        add_into!("vaddps", "ymm", "15"; "10" "11"),
        accumulate!("vfmadd231ps", "ymm", "15"; "4" "5"),
        add_into!("vaddps", "ymm", "15"; "12" "13"),
        accumulate!("vfmadd231ps", "ymm", "15"; "6" "7"),
        add_into!("vaddps", "ymm", "15"; "14")
    );
    asm_kernel!(
        bf16_dot_zmm,
        "avx512f",
        "vpbroadcastd zmm31, dword ptr [rax]",
        accumulate!("vdpbf16ps", "zmm", "31";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11"
            "12" "13" "14" "15" "16" "17" "18" "19" "20" "21" "22" "23")
    );
    asm_kernel!(
        int8_dot_zmm,
        "avx512f",
        "vpbroadcastd zmm31, dword ptr [rax]",
        accumulate!("vpdpbusd", "zmm", "31";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11"
            "12" "13" "14" "15" "16" "17" "18" "19" "20" "21" "22" "23")
    );
    // AVX-VNNI: the VEX encoding of vpdpbusd, 256 bits, registers 0-15 only.
    asm_kernel!(
        int8_dot_ymm_vex,
        "avx2",
        "vpbroadcastd ymm15, dword ptr [rax]",
        accumulate!("{{vex}} vpdpbusd", "ymm", "15";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13")
    );
    asm_kernel!(
        fp16_fma_zmm,
        "avx512f",
        "vpbroadcastd zmm31, dword ptr [rax]",
        accumulate!("vfmadd231ph", "zmm", "31";
            "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15")
    );

    // Paced twins (`PacedLoop`). The ymm ones have 14 accumulators (the operand is ymm15), so
    // two of them take two instructions per iteration: still far more chains than the paced
    // rate needs.
    paced_kernels!(fp64_fma_zmm_paced_2, fp64_fma_zmm_paced_1, fp64_fma_zmm_paced_half,
        FP64_FMA_ZMM_PACED,
        "avx512f", "vbroadcastsd zmm31, qword ptr [rax]", "vfmadd231pd", "zmm", "31";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15");
    paced_kernels!(fp32_fma_zmm_paced_2, fp32_fma_zmm_paced_1, fp32_fma_zmm_paced_half,
        FP32_FMA_ZMM_PACED,
        "avx512f", "vbroadcastss zmm31, dword ptr [rax]", "vfmadd231ps", "zmm", "31";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15");
    paced_kernels!(fp64_fma_ymm_paced_2, fp64_fma_ymm_paced_1, fp64_fma_ymm_paced_half,
        FP64_FMA_YMM_PACED,
        "avx2,fma", "vbroadcastsd ymm15, qword ptr [rax]", "vfmadd231pd", "ymm", "15";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "0" "1");
    paced_kernels!(fp32_fma_ymm_paced_2, fp32_fma_ymm_paced_1, fp32_fma_ymm_paced_half,
        FP32_FMA_YMM_PACED,
        "avx2,fma", "vbroadcastss ymm15, dword ptr [rax]", "vfmadd231ps", "ymm", "15";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "0" "1");
    paced_kernels!(bf16_dot_zmm_paced_2, bf16_dot_zmm_paced_1, bf16_dot_zmm_paced_half,
        BF16_DOT_ZMM_PACED,
        "avx512f", "vpbroadcastd zmm31, dword ptr [rax]", "vdpbf16ps", "zmm", "31";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15");
    paced_kernels!(int8_dot_zmm_paced_2, int8_dot_zmm_paced_1, int8_dot_zmm_paced_half,
        INT8_DOT_ZMM_PACED,
        "avx512f", "vpbroadcastd zmm31, dword ptr [rax]", "vpdpbusd", "zmm", "31";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15");
    paced_kernels!(int8_dot_ymm_vex_paced_2, int8_dot_ymm_vex_paced_1,
        int8_dot_ymm_vex_paced_half, INT8_DOT_YMM_VEX_PACED,
        "avx2", "vpbroadcastd ymm15, dword ptr [rax]", "{{vex}} vpdpbusd", "ymm", "15";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "0" "1");
    paced_kernels!(fp16_fma_zmm_paced_2, fp16_fma_zmm_paced_1, fp16_fma_zmm_paced_half,
        FP16_FMA_ZMM_PACED,
        "avx512f", "vpbroadcastd zmm31, dword ptr [rax]", "vfmadd231ph", "zmm", "31";
        "0" "1" "2" "3" "4" "5" "6" "7" "8" "9" "10" "11" "12" "13" "14" "15");

    /// Every paced twin's body as text, for the tests.
    #[cfg(test)]
    pub(super) const PACED_BODIES: [(&str, [&str; 3]); 8] = [
        FP64_FMA_ZMM_PACED,
        FP32_FMA_ZMM_PACED,
        FP64_FMA_YMM_PACED,
        FP32_FMA_YMM_PACED,
        BF16_DOT_ZMM_PACED,
        INT8_DOT_ZMM_PACED,
        INT8_DOT_YMM_VEX_PACED,
        FP16_FMA_ZMM_PACED,
    ];
}

/// Portable fallback: 8 independent multiply-add chains in plain Rust (2 FLOP per element).
/// `black_box` on the operands keeps the compiler from precomputing the chains.
fn portable_fp64(iterations: u64) {
    let multiplier = std::hint::black_box(1.0 - FP64_OPERAND);
    let addend = std::hint::black_box(FP64_OPERAND);
    let mut acc = [1.0f64; 8];
    for _ in 0..iterations {
        for value in acc.iter_mut() {
            *value = *value * multiplier + addend;
        }
    }
    std::hint::black_box(acc);
}

fn portable_fp32(iterations: u64) {
    let multiplier = std::hint::black_box(1.0 - FP32_OPERAND);
    let addend = std::hint::black_box(FP32_OPERAND);
    let mut acc = [1.0f32; 8];
    for _ in 0..iterations {
        for value in acc.iter_mut() {
            *value = *value * multiplier + addend;
        }
    }
    std::hint::black_box(acc);
}

struct Spec {
    id: &'static str,
    precision: Precision,
    mix: ComputeMix,
    isa: &'static str,
    vector_bits: u32,
    description: &'static str,
    /// (class, instructions per iteration)
    body: &'static [(OpClass, u64)],
    operand_bits: u64,
    function: KernelFn,
    /// Paced twins for 2, 1 and ½ instructions per cycle (`paced_kernels!`).
    paced: Option<[NativeFn; 3]>,
}

/// The paced twin whose chain outlasts the vector work at the rate `model` gives the
/// kernel's main instruction (by 12.5%, the smallest margin of the three), if any does.
fn choose_paced(spec: &Spec, model: &CoreModel) -> Option<PacedLoop> {
    let twins = spec.paced?;
    let (class, _) = spec.body.iter().find(|(class, _)| *class != OpClass::Add)?;
    let per_cycle = model.per_cycle(*class).at(spec.vector_bits);
    if per_cycle <= 0.0 {
        return None;
    }
    let vector_cycles = PACED_VECTOR as f64 / per_cycle;
    PACED_ADDS
        .iter()
        .zip(twins)
        .find(|(&adds, _)| adds as f64 >= 1.1 * vector_cycles)
        .map(|(&adds, function)| PacedLoop {
            function,
            adds_per_iteration: adds,
            vector_per_iteration: PACED_VECTOR,
        })
}

fn build(spec: Spec, model: &CoreModel) -> ComputeKernel {
    let mut flops = 0.0;
    let mut fma_type = 0;
    let mut adds = 0;
    for &(class, count) in spec.body {
        flops += count as f64 * flops_per_instruction(class, spec.precision, spec.vector_bits);
        if class == OpClass::Add {
            adds += count;
        } else {
            fma_type += count;
        }
    }
    ComputeKernel {
        id: spec.id,
        precision: spec.precision,
        mix: spec.mix,
        isa: spec.isa,
        vector_bits: spec.vector_bits,
        chains: (fma_type + adds) as u32,
        description: spec.description,
        flops_per_iteration: flops,
        body: spec.body,
        instructions_per_iteration: fma_type + adds + 2,
        fallback: matches!(spec.function, KernelFn::Portable(_)),
        paced: choose_paced(&spec, model),
        operand_bits: spec.operand_bits,
        function: spec.function,
    }
}

/// The kernel of the shared-core check (`exchange`) among `kernels` ([`select_kernels`]):
/// the widest fp32 FMA kernel, the one that keeps a core's FMA pipes busiest.
pub fn shared_core_kernel(kernels: &[ComputeKernel]) -> Option<&ComputeKernel> {
    kernels
        .iter()
        .filter(|k| k.precision == Precision::Fp32 && k.mix == ComputeMix::Fma)
        .max_by_key(|k| k.vector_bits)
}

/// The best kernel per precision and mix this CPU can run. FMA+ADD kernels are only chosen
/// where the core has adders separate from the FMA pipes (otherwise the mix is slower than
/// FMAs alone and says nothing new).
pub fn select_kernels(isa: &IsaFlags, model: &CoreModel) -> Vec<ComputeKernel> {
    let mut kernels = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let fp64 = FP64_OPERAND.to_bits();
        let fp32 = u64::from(FP32_OPERAND.to_bits());
        if isa.avx512f {
            kernels.push(build(
                Spec {
                    id: "fp64-fma-zmm",
                    precision: Precision::Fp64,
                    mix: ComputeMix::Fma,
                    isa: "AVX-512F",
                    vector_bits: 512,
                    description: "16 independent vfmadd231pd zmm chains",
                    body: &[(OpClass::Fma, 16)],
                    operand_bits: fp64,
                    function: KernelFn::Native(x86::fp64_fma_zmm),
                    paced: Some([
                        x86::fp64_fma_zmm_paced_2,
                        x86::fp64_fma_zmm_paced_1,
                        x86::fp64_fma_zmm_paced_half,
                    ]),
                },
                model,
            ));
            kernels.push(build(
                Spec {
                    id: "fp32-fma-zmm",
                    precision: Precision::Fp32,
                    mix: ComputeMix::Fma,
                    isa: "AVX-512F",
                    vector_bits: 512,
                    description: "16 independent vfmadd231ps zmm chains",
                    body: &[(OpClass::Fma, 16)],
                    operand_bits: fp32,
                    function: KernelFn::Native(x86::fp32_fma_zmm),
                    paced: Some([
                        x86::fp32_fma_zmm_paced_2,
                        x86::fp32_fma_zmm_paced_1,
                        x86::fp32_fma_zmm_paced_half,
                    ]),
                },
                model,
            ));
            if model.fadd.at(512) > 0.0 {
                kernels.push(build(
                    Spec {
                        id: "fp64-fma+add-zmm",
                        precision: Precision::Fp64,
                        mix: ComputeMix::FmaAdd,
                        isa: "AVX-512F",
                        vector_bits: 512,
                        description: "12 vfmadd231pd + 12 vaddpd zmm chains, interleaved",
                        body: &[(OpClass::Fma, 12), (OpClass::Add, 12)],
                        operand_bits: fp64,
                        function: KernelFn::Native(x86::fp64_fma_add_zmm),
                        // No twin of its own: the FMA-only twin would time a clock without
                        // the adds running, and judge this mix against it.
                        paced: None,
                    },
                    model,
                ));
                kernels.push(build(
                    Spec {
                        id: "fp32-fma+add-zmm",
                        precision: Precision::Fp32,
                        mix: ComputeMix::FmaAdd,
                        isa: "AVX-512F",
                        vector_bits: 512,
                        description: "12 vfmadd231ps + 12 vaddps zmm chains, interleaved",
                        body: &[(OpClass::Fma, 12), (OpClass::Add, 12)],
                        operand_bits: fp32,
                        function: KernelFn::Native(x86::fp32_fma_add_zmm),
                        // No twin of its own: the FMA-only twin would time a clock without
                        // the adds running, and judge this mix against it.
                        paced: None,
                    },
                    model,
                ));
            }
        } else if isa.avx2 && isa.fma {
            kernels.push(build(
                Spec {
                    id: "fp64-fma-ymm",
                    precision: Precision::Fp64,
                    mix: ComputeMix::Fma,
                    isa: "AVX2+FMA",
                    vector_bits: 256,
                    description: "12 independent vfmadd231pd ymm chains",
                    body: &[(OpClass::Fma, 12)],
                    operand_bits: fp64,
                    function: KernelFn::Native(x86::fp64_fma_ymm),
                    paced: Some([
                        x86::fp64_fma_ymm_paced_2,
                        x86::fp64_fma_ymm_paced_1,
                        x86::fp64_fma_ymm_paced_half,
                    ]),
                },
                model,
            ));
            kernels.push(build(
                Spec {
                    id: "fp32-fma-ymm",
                    precision: Precision::Fp32,
                    mix: ComputeMix::Fma,
                    isa: "AVX2+FMA",
                    vector_bits: 256,
                    description: "12 independent vfmadd231ps ymm chains",
                    body: &[(OpClass::Fma, 12)],
                    operand_bits: fp32,
                    function: KernelFn::Native(x86::fp32_fma_ymm),
                    paced: Some([
                        x86::fp32_fma_ymm_paced_2,
                        x86::fp32_fma_ymm_paced_1,
                        x86::fp32_fma_ymm_paced_half,
                    ]),
                },
                model,
            ));
            if model.fadd.at(256) > 0.0 {
                kernels.push(build(
                    Spec {
                        id: "fp64-fma+add-ymm",
                        precision: Precision::Fp64,
                        mix: ComputeMix::FmaAdd,
                        isa: "AVX2+FMA",
                        vector_bits: 256,
                        description: "8 vfmadd231pd + 7 vaddpd ymm chains, interleaved",
                        body: &[(OpClass::Fma, 8), (OpClass::Add, 7)],
                        operand_bits: fp64,
                        function: KernelFn::Native(x86::fp64_fma_add_ymm),
                        // No twin of its own: the FMA-only twin would time a clock without
                        // the adds running, and judge this mix against it.
                        paced: None,
                    },
                    model,
                ));
                kernels.push(build(
                    Spec {
                        id: "fp32-fma+add-ymm",
                        precision: Precision::Fp32,
                        mix: ComputeMix::FmaAdd,
                        isa: "AVX2+FMA",
                        vector_bits: 256,
                        description: "8 vfmadd231ps + 7 vaddps ymm chains, interleaved",
                        body: &[(OpClass::Fma, 8), (OpClass::Add, 7)],
                        operand_bits: fp32,
                        function: KernelFn::Native(x86::fp32_fma_add_ymm),
                        // No twin of its own: the FMA-only twin would time a clock without
                        // the adds running, and judge this mix against it.
                        paced: None,
                    },
                    model,
                ));
            }
        }
        if isa.avx512f && isa.avx512bf16 {
            kernels.push(build(
                Spec {
                    id: "bf16-dot-zmm",
                    precision: Precision::Bf16,
                    mix: ComputeMix::Fma,
                    isa: "AVX-512 BF16",
                    vector_bits: 512,
                    description: "24 independent vdpbf16ps zmm chains (fp32 accumulate)",
                    body: &[(OpClass::Bf16Dot, 24)],
                    operand_bits: u64::from(BF16_PAIR),
                    function: KernelFn::Native(x86::bf16_dot_zmm),
                    paced: Some([
                        x86::bf16_dot_zmm_paced_2,
                        x86::bf16_dot_zmm_paced_1,
                        x86::bf16_dot_zmm_paced_half,
                    ]),
                },
                model,
            ));
        }
        if isa.avx512f && isa.avx512vnni {
            kernels.push(build(
                Spec {
                    id: "int8-dot-zmm",
                    precision: Precision::Int8,
                    mix: ComputeMix::Fma,
                    isa: "AVX-512 VNNI",
                    vector_bits: 512,
                    description: "24 independent vpdpbusd zmm chains (u8×s8, i32 accumulate)",
                    body: &[(OpClass::Int8Dot, 24)],
                    operand_bits: u64::from(INT8_QUAD),
                    function: KernelFn::Native(x86::int8_dot_zmm),
                    paced: Some([
                        x86::int8_dot_zmm_paced_2,
                        x86::int8_dot_zmm_paced_1,
                        x86::int8_dot_zmm_paced_half,
                    ]),
                },
                model,
            ));
        } else if isa.avxvnni && isa.avx2 {
            kernels.push(build(
                Spec {
                    id: "int8-dot-ymm",
                    precision: Precision::Int8,
                    mix: ComputeMix::Fma,
                    isa: "AVX-VNNI",
                    vector_bits: 256,
                    description: "14 independent {vex} vpdpbusd ymm chains (u8×s8, i32 accumulate)",
                    body: &[(OpClass::Int8Dot, 14)],
                    operand_bits: u64::from(INT8_QUAD),
                    function: KernelFn::Native(x86::int8_dot_ymm_vex),
                    paced: Some([
                        x86::int8_dot_ymm_vex_paced_2,
                        x86::int8_dot_ymm_vex_paced_1,
                        x86::int8_dot_ymm_vex_paced_half,
                    ]),
                },
                model,
            ));
        }
        if isa.avx512f && isa.avx512fp16 {
            kernels.push(build(
                Spec {
                    id: "fp16-fma-zmm",
                    precision: Precision::Fp16,
                    mix: ComputeMix::Fma,
                    isa: "AVX-512 FP16",
                    vector_bits: 512,
                    description: "16 independent vfmadd231ph zmm chains",
                    body: &[(OpClass::Fp16Fma, 16)],
                    operand_bits: u64::from(FP16_PAIR),
                    function: KernelFn::Native(x86::fp16_fma_zmm),
                    paced: Some([
                        x86::fp16_fma_zmm_paced_2,
                        x86::fp16_fma_zmm_paced_1,
                        x86::fp16_fma_zmm_paced_half,
                    ]),
                },
                model,
            ));
        }
    }
    let _ = (isa, model);
    if !kernels.iter().any(|k| k.precision == Precision::Fp64) {
        kernels.push(portable(Precision::Fp64));
    }
    if !kernels.iter().any(|k| k.precision == Precision::Fp32) {
        kernels.push(portable(Precision::Fp32));
    }
    kernels
}

fn portable(precision: Precision) -> ComputeKernel {
    let (id, function): (&'static str, fn(u64)) = match precision {
        Precision::Fp64 => ("fp64-portable", portable_fp64),
        _ => ("fp32-portable", portable_fp32),
    };
    let element = super::microarch::element_bits(precision);
    let mut kernel = build(
        Spec {
            id,
            precision,
            mix: ComputeMix::Fma,
            isa: "portable",
            vector_bits: element,
            description: "8 multiply-add chains in portable Rust (no FMA assumed)",
            body: &[(OpClass::Fma, 8)],
            operand_bits: 0,
            function: KernelFn::Portable(function),
            paced: None,
        },
        &super::microarch::unknown_core_model(),
    );
    // The compiler decides the instructions here; only the FLOP count is exact.
    kernel.instructions_per_iteration = 0;
    kernel
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the machine running the tests can execute runs and counts sensible FLOPs.
    #[test]
    fn every_selected_kernel_runs() {
        let info = super::super::cpu::identify();
        let kernels = select_kernels(&info.isa, &info.core_model);
        assert!(kernels.iter().any(|k| k.precision == Precision::Fp64));
        assert!(kernels.iter().any(|k| k.precision == Precision::Fp32));
        for kernel in &kernels {
            kernel.run(1000);
            assert!(kernel.flops_per_iteration > 0.0, "{}", kernel.id);
            if kernel.paced.is_some() {
                assert!(kernel.run_paced(1000), "{}", kernel.id);
            }
        }
    }

    /// The paced twin chosen for a core outlasts the vector work at the core's rate, by the
    /// smallest margin available: 16 FMAs at 2 per cycle (Emerald Rapids) take 8 cycles and
    /// get 9 adds; Zen 4's double-pumped zmm FMAs (1 per cycle) 18; Emerald Rapids'
    /// `vdpbf16ps` (½ per cycle) 36.
    #[test]
    fn paced_twins_outlast_the_vector_work_they_pace() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let isa = IsaFlags {
            avx2: true,
            fma: true,
            avx512f: true,
            avx512bf16: true,
            avx512vnni: true,
            avx512fp16: true,
            ..IsaFlags::default()
        };
        let emerald = super::super::microarch::x86_core_model("GenuineIntel", 6, 0xcf, Some(2));
        let zen4 = super::super::microarch::x86_core_model("AuthenticAMD", 0x19, 0x11, Some(1));
        let adds = |model: &CoreModel, id: &str| {
            select_kernels(&isa, model)
                .into_iter()
                .find(|k| k.id == id)
                .and_then(|k| k.paced)
                .map(|paced| paced.adds_per_iteration)
        };
        assert_eq!(adds(&emerald, "fp32-fma-zmm"), Some(9));
        assert_eq!(adds(&emerald, "bf16-dot-zmm"), Some(36));
        assert_eq!(adds(&zen4, "fp32-fma-zmm"), Some(18));
        for model in [&emerald, &zen4] {
            for kernel in select_kernels(&isa, model) {
                let Some(paced) = kernel.paced else { continue };
                let (class, _) = kernel
                    .body
                    .iter()
                    .find(|(c, _)| *c != OpClass::Add)
                    .unwrap();
                let rate = model.per_cycle(*class).at(kernel.vector_bits);
                let vector_cycles = paced.vector_per_iteration as f64 / rate;
                assert!(
                    paced.adds_per_iteration as f64 >= 1.1 * vector_cycles,
                    "{} on {}: {} adds for {vector_cycles} cycles",
                    kernel.id,
                    model.name,
                    paced.adds_per_iteration
                );
            }
        }
        // The assembly holds what PACED_ADDS and PACED_VECTOR state, for every twin.
        for (op, bodies) in x86::PACED_BODIES {
            for (body, adds) in bodies.iter().zip(PACED_ADDS) {
                assert_eq!(body.matches("add rdx, rsi").count() as u64, adds, "{op}");
                let vector = body.lines().filter(|line| line.contains(op)).count() as u64;
                assert_eq!(vector, PACED_VECTOR, "{op}");
            }
        }
        // A rate too slow for the longest twin gets none rather than a loop the vector
        // instructions bound.
        let mut slow = emerald;
        slow.fma.x512 = 0.25;
        assert_eq!(adds(&slow, "fp32-fma-zmm"), None);
    }

    #[test]
    fn flop_counts_of_the_kernels() {
        let zen4 = super::super::microarch::x86_core_model("AuthenticAMD", 0x19, 0x11, Some(1));
        let isa = IsaFlags {
            avx512f: true,
            avx512bf16: true,
            avx512vnni: true,
            ..IsaFlags::default()
        };
        let kernels = select_kernels(&isa, &zen4);
        let flops = |id: &str| {
            kernels
                .iter()
                .find(|k| k.id == id)
                .map(|k| k.flops_per_iteration)
        };
        if cfg!(target_arch = "x86_64") {
            assert_eq!(flops("fp64-fma-zmm"), Some(16.0 * 16.0));
            assert_eq!(flops("fp32-fma+add-zmm"), Some(12.0 * 32.0 + 12.0 * 16.0));
            assert_eq!(flops("bf16-dot-zmm"), Some(24.0 * 64.0));
            assert_eq!(flops("int8-dot-zmm"), Some(24.0 * 128.0));
        }
    }
}
