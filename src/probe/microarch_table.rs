//! The rows of the per-microarchitecture throughput table: one `CoreModel` per core design,
//! each with the source of its figures and of its frequency behaviour under heavy vector code.
//!
//! Figures are instructions per cycle per core at 128/256/512 bits. Where a figure could not be
//! checked against a public document or a measurement, its text says "assumed, not confirmed";
//! the measurements cited as `shared/reference/machines.md` were taken on this project's
//! development machines with third-party tools and the probe side by side.

use super::{CoreModel, PerWidth};

// Frequency behaviour shared by several rows.

const LICENCE_ZEN_POWER_LIMITED: &str =
    "no per-ISA licence levels: the clock is set by power, current and thermal limits \
     (Precision Boost), so heavy vector code lowers it only through those limits (assumed \
     for this generation, not confirmed by an AMD document)";

const LICENCE_SKYLAKE_SP: &str =
    "three licence levels per SKU and active-core count: L0 (non-AVX turbo), L1 (heavy \
     256-bit or light 512-bit code) and L2 (heavy 512-bit code), L1 and L2 well below L0 \
     (Xeon Gold 5120 with 13-14 active cores: 85% and 62% of L0); per-SKU tables in Intel's \
     Xeon Scalable specification update (336065). Sources: Travis Downs, Stack Overflow \
     'SIMD instructions lowering CPU frequency' (questions/56852812); John McCalpin on the \
     Intel community forum ('Calculate the Max Flops on Skylake')";

const LICENCE_ICE_LAKE: &str =
    "licence levels remain but the reductions are much smaller than on Skylake-SP: Travis \
     Downs, 'Ice Lake AVX-512 Downclocking' (2020, Ice Lake and Rocket Lake client parts); \
     the size of the AVX-512 reduction on Ice Lake-SP servers is assumed similar, not \
     confirmed";

const LICENCE_GOLDEN_COVE_SERVER: &str =
    "no fixed per-ISA frequency offsets after Skylake-X (Chips and Cheese, 'Zen 5's AVX-512 \
     frequency behavior'); measured on an Emerald Rapids guest (shared/reference/machines.md): \
     512-bit FP FMA code sustained about 93% of the 2.99 GHz scalar clock (fp32 178.8 of \
     191 GFLOP/s), while vpdpbusd and vfmadd231ph zmm code ran at the scalar clock. The drop \
     follows the density of 512-bit FMAs, not a licence held afterwards: a dependent-add chain \
     interleaved with 16 zmm FMAs ran at 2.67-2.78 GHz with 12 adds (1.33 FMA per cycle) and \
     2.88-2.92 with 32 (0.5 per cycle), and at the scalar clock when timed right after them \
     (session 45); the probe measures each kernel's clock with such a chain";

const LICENCE_INTEL_CLIENT: &str =
    "client cores: no documented per-ISA licence table; firmware may apply an 'AVX ratio \
     offset' that lowers the clock for 256-bit code (assumed, not confirmed); Xeon E5/E7 \
     v3-v4 server parts specify a lower AVX frequency (assumed, not confirmed here)";

const LICENCE_ARM: &str = "no per-ISA licence levels known for these cores; the clock is set by \
                           power and thermal limits (assumed, not confirmed)";

pub(super) const AMD_ZEN5_FULL: CoreModel = CoreModel {
    name: "AMD Zen 5 (512-bit datapath)",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::new(2.0, 2.0, 2.0),
    bf16_dot: PerWidth::new(2.0, 2.0, 2.0),
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA + 2 FADD pipes, full 512-bit wide; vdpbf16ps and vpdpbusd 2 per cycle",
    source: "AMD Software Optimization Guide for the Zen 5 microarchitecture (pub. 58455), \
             floating-point unit: four 512-bit pipes, two FMA/FMUL and two FADD; dot-product \
             rates and the 4-cycle FMA latency measured with likwid-bench and hand-written \
             kernels (shared/reference/machines.md, Zen 5 family 26 model 2)",
    licence_frequency: "no per-ISA frequency offset: AMD's Zen 5 ISSCC paper states full \
                        AVX-512 performance at peak core frequency through di/dt-based \
                        adaptive clocking (quoted by Chips and Cheese, 'Zen 5's AVX-512 \
                        frequency behavior'); no AVX-512 clock drop was seen on the Zen 5 \
                        machine here (shared/reference/machines.md)",
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const AMD_ZEN5_HALF: CoreModel = CoreModel {
    name: "AMD Zen 5 (256-bit datapath, mobile)",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    fadd: PerWidth::new(2.0, 2.0, 1.0),
    bf16_dot: PerWidth::new(2.0, 2.0, 1.0),
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    assumption: "2 FMA + 2 FADD pipes of 256 bits; a 512-bit op takes both halves (1 per cycle)",
    source: "AMD Zen 5 mobile parts (Strix Point, Krackan) keep a 256-bit FP datapath: AMD \
             Hot Chips 2024 Zen 5 presentation, 'configurable' AVX-512 datapath",
    ..AMD_ZEN5_FULL
};

pub(super) const AMD_ZEN4: CoreModel = CoreModel {
    name: "AMD Zen 4",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    fadd: PerWidth::new(2.0, 2.0, 1.0),
    bf16_dot: PerWidth::new(2.0, 2.0, 1.0),
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA + 2 FADD pipes of 256 bits; 512-bit ops run as two 256-bit halves \
                 (1 zmm FMA, 1 zmm FADD, 1 vdpbf16ps, 1 vpdpbusd per cycle)",
    source: "AMD Software Optimization Guide for AMD Family 19h Processors (pub. 56665), \
             section 2.11: four 256-bit FP pipes (FP0/FP1 FMA, FP2/FP3 FADD); AVX-512 \
             instructions are executed on the 256-bit units in two halves",
    licence_frequency: "no per-ISA licence levels: the clock is set by power, current and \
                        thermal limits (assumed, not confirmed by an AMD document); the Zen 4 \
                        machine here sustained 3.68 GHz with 512-bit FMA code \
                        (shared/reference/machines.md)",
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const AMD_ZEN3: CoreModel = CoreModel {
    name: "AMD Zen 3",
    fma: PerWidth::new(2.0, 2.0, 0.0),
    fadd: PerWidth::new(2.0, 2.0, 0.0),
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::NONE,
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA + 2 FADD pipes of 256 bits; FMA latency 4 cycles",
    source: "AMD Software Optimization Guide for AMD Family 19h Processors (pub. 56665): four \
             256-bit FP pipes, two FMA and two FADD; FMA latency 4 on the FMul0/1 pipes in \
             LLVM's llvm-exegesis-derived model (llvm/lib/Target/X86/X86ScheduleZnver3.td, \
             WriteFMA)",
    licence_frequency: LICENCE_ZEN_POWER_LIMITED,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const AMD_ZEN2: CoreModel = CoreModel {
    name: "AMD Zen 2",
    fma_latency_cycles: 5.0,
    assumption: "2 FMA + 2 FADD pipes of 256 bits; FMA latency 5 cycles",
    source: "AMD Software Optimization Guide for AMD Family 17h Models 30h and Greater \
             (pub. 56305): four 256-bit FP pipes, two FMA and two FADD, FMA latency 5",
    ..AMD_ZEN3
};

pub(super) const AMD_ZEN1: CoreModel = CoreModel {
    name: "AMD Zen / Zen+",
    fma: PerWidth::new(2.0, 1.0, 0.0),
    // The FADD pipes are there, but a loop of 8 vfmadd231ps + 7 vaddps ymm ran at 12.5 FLOP per
    // cycle on a Zen 1 EPYC guest (2026-12-06), about the rate of the two issued one after the
    // other (184 FLOP in 15 cycles, 12.3), far from beside each other (24 per cycle): adds are
    // modelled in the FMA pipes' slots.
    fadd: PerWidth::NONE,
    fma_latency_cycles: 5.0,
    assumption: "2 FMA pipes of 128 bits; 256-bit ops run as two halves; adds do not issue \
                 beside FMAs (measured), so they add no throughput to an FMA loop",
    source: "AMD Software Optimization Guide for Family 17h (pub. 55723): four 128-bit FP \
             pipes, FMA on FP0/FP1; the FMA+ADD rate measured by this probe on an EPYC \
             (family 17h model 1) guest, 2026-12-06",
    ..AMD_ZEN3
};

pub(super) const INTEL_SKYLAKE_SP: CoreModel = CoreModel {
    name: "Intel Skylake-SP",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::NONE,
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports (p0+p1 fused and p5) at 512 bits, 2 at 256 bits (p0, p1); adds \
                 share the FMA ports. Bronze, Silver and Gold 51xx (except 5122) have one \
                 512-bit unit: chosen from the brand string where it names the SKU",
    source: "Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), Skylake \
             server chapter: two FMA units on Gold 6xxx/Platinum; one unit on Gold 5xxx except \
             5122 (John McCalpin, Intel community forum); 'up to two AVX-512 FMA units per \
             core, depends upon SKU' (Microway, Skylake-SP specifications)",
    licence_frequency: LICENCE_SKYLAKE_SP,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const INTEL_SKYLAKE_SP_ONE_UNIT: CoreModel = CoreModel {
    name: "Intel Skylake-SP (one 512-bit FMA unit)",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    assumption: "Bronze, Silver or Gold 51xx SKU: the fused p0+p1 512-bit unit only, so a zmm \
                 FMA per cycle (the same FLOP/cycle as two ymm FMAs); adds share the FMA ports",
    ..INTEL_SKYLAKE_SP
};

pub(super) const INTEL_CASCADE_LAKE: CoreModel = CoreModel {
    name: "Intel Cascade Lake",
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    assumption: "Skylake-SP execution core plus AVX-512 VNNI: 2 FMA ports at 512 bits; \
                 vpdpbusd on the same two ports, 2 per cycle (assumed, not confirmed by a \
                 public table here; the rate measured on Emerald Rapids). Bronze, Silver and \
                 Gold 52xx (except 5222) have one 512-bit unit",
    source: "Intel Optimization Reference Manual (248966): Cascade Lake keeps the Skylake-SP \
             core and adds AVX-512 VNNI (family 6 model 0x55, steppings 5-7); the vpdpbusd \
             rate is an assumption",
    ..INTEL_SKYLAKE_SP
};

pub(super) const INTEL_CASCADE_LAKE_ONE_UNIT: CoreModel = CoreModel {
    name: "Intel Cascade Lake (one 512-bit FMA unit)",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    assumption: "Bronze, Silver or Gold 52xx SKU: the fused p0+p1 512-bit unit only (one zmm \
                 FMA or vpdpbusd per cycle, assumed for vpdpbusd)",
    ..INTEL_CASCADE_LAKE
};

pub(super) const INTEL_COOPER_LAKE: CoreModel = CoreModel {
    name: "Intel Cooper Lake",
    bf16_dot: PerWidth::new(0.5, 0.5, 0.5),
    assumption: "Cascade Lake core plus AVX512_BF16; vdpbf16ps 0.5 per cycle at every width \
                 (assumed equal to the rate measured on Emerald Rapids, not confirmed for \
                 Cooper Lake)",
    source: "Intel Architecture Instruction Set Extensions Programming Reference: AVX512_BF16 \
             first on Cooper Lake-SP, not Ice Lake-SP (AnandTech, 'Intel Manual Updates: \
             bfloat16 for Cooper Lake Xeon Scalable Only'); family 6 model 0x55 steppings \
             10-11; the bf16 rate is an assumption",
    ..INTEL_CASCADE_LAKE
};

pub(super) const INTEL_ICE_LAKE_SP: CoreModel = CoreModel {
    name: "Intel Ice Lake-SP",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports (p0+p1 fused and p5) at 512 bits on every SKU (assumed, not \
                 confirmed per SKU); adds share the FMA ports; vpdpbusd 2 per cycle (assumed, \
                 the rate measured on Emerald Rapids); no BF16, no FP16",
    source: "Intel Optimization Reference Manual (248966), Ice Lake server: a second 512-bit \
             FMA unit on port 5 besides the fused port 0+1; AVX-512 VNNI without BF16 (Intel \
             ISA extensions reference, as summarised by AnandTech, 'Intel Manual Updates: \
             bfloat16 for Cooper Lake Xeon Scalable Only')",
    licence_frequency: LICENCE_ICE_LAKE,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

/// Sapphire Rapids, Emerald Rapids and Granite Rapids share the Golden Cove FP execution core
/// (Raptor Cove and Redwood Cove keep it), so one row carries the figures.
pub(super) const INTEL_SAPPHIRE_RAPIDS: CoreModel = CoreModel {
    name: "Intel Sapphire Rapids",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(0.5, 0.5, 0.5),
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    fp16_fma: PerWidth::new(2.0, 2.0, 2.0),
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports (p0+p1 fused and p5) at 512 bits; adds share them; vdpbf16ps 0.5 \
                 per cycle (narrower widths assumed the same), vpdpbusd and vfmadd231ph 2 per \
                 cycle. AMX rates are documentation only: no AMX kernel measures them",
    source: "measured on Emerald Rapids (family 6 model 0xcf, one thread, scalar clock \
             2.99 GHz; shared/reference/machines.md): fp32 FMA 178.8 GFLOP/s, fp64 89.4, \
             vdpbf16ps zmm 89.4 (24 chains), vpdpbusd zmm 766 GOP/s, vfmadd231ph zmm 382; \
             vdpbf16ps zmm is 4 uops on p0 and p5 with latency 8 in LLVM's model \
             (X86SchedSapphireRapids.td), i.e. 0.5 per cycle. AMX: 1024 bf16 FLOP and 2048 \
             int8 OP per cycle per core (a 16x16x32 bf16 tile product, 2x16x16x32 FLOP, in 16 \
             cycles; Intel, 'Accelerate Artificial Intelligence (AI) Workloads with Intel \
             Advanced Matrix Extensions', as cited by Wikipedia's Advanced Matrix Extensions \
             article)",
    licence_frequency: LICENCE_GOLDEN_COVE_SERVER,
    amx_bf16_flops_per_cycle: 1024.0,
    amx_int8_ops_per_cycle: 2048.0,
};

pub(super) const INTEL_EMERALD_RAPIDS: CoreModel = CoreModel {
    name: "Intel Emerald Rapids",
    ..INTEL_SAPPHIRE_RAPIDS
};

pub(super) const INTEL_GRANITE_RAPIDS: CoreModel = CoreModel {
    name: "Intel Granite Rapids",
    assumption: "assumed to be the Sapphire/Emerald Rapids execution core (not measured): \
                 2 FMA ports at 512 bits, vdpbf16ps 0.5, vpdpbusd and vfmadd231ph 2 per \
                 cycle. AMX (with AMX-FP16, rate not recorded) is documentation only",
    ..INTEL_SAPPHIRE_RAPIDS
};

pub(super) const INTEL_CLIENT_AVX512: CoreModel = CoreModel {
    name: "Intel client core with one 512-bit FMA unit",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports at 256 bits, fused into one 512-bit unit for zmm; adds share them",
    source: "Intel Optimization Reference Manual (248966): Cannon Lake, Ice Lake, Tiger Lake \
             and Rocket Lake client cores execute 512-bit FMAs on the fused port 0+1 only",
    licence_frequency: LICENCE_ICE_LAKE,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const INTEL_HASWELL: CoreModel = CoreModel {
    name: "Intel Haswell / Broadwell",
    fma: PerWidth::new(2.0, 2.0, 0.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::NONE,
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 5.0,
    assumption: "2 FMA ports of 256 bits (p0, p1); adds share them; FMA latency 5 cycles",
    source: "Intel Optimization Reference Manual (248966), Haswell microarchitecture: FMA on \
             ports 0 and 1, latency 5",
    licence_frequency: LICENCE_INTEL_CLIENT,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

pub(super) const INTEL_SKYLAKE_CLIENT: CoreModel = CoreModel {
    name: "Intel Skylake client (through Comet Lake)",
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports of 256 bits (p0, p1); adds share them; FMA latency 4 cycles; no \
                 VNNI",
    source: "Intel Optimization Reference Manual (248966), Skylake client microarchitecture: \
             FMA, FADD and FMUL on ports 0 and 1, latency 4",
    ..INTEL_HASWELL
};

pub(super) const INTEL_ALDER_LAKE_P: CoreModel = CoreModel {
    name: "Intel client P-core with AVX-VNNI (Alder Lake and later)",
    int8_dot: PerWidth::new(2.0, 2.0, 0.0),
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports of 256 bits; adds share them (the separate adders of newer cores \
                 not modelled); AVX-VNNI vpdpbusd ymm 2 per cycle (assumed, not confirmed). On \
                 hybrid parts the E-cores have narrower FP units (assumed half the 256-bit \
                 rate, not confirmed), so threads placed there reach less",
    source: "Intel Optimization Reference Manual (248966), Golden Cove: FMA on ports 0 and 1 \
             at 256 bits; AVX-VNNI from Alder Lake on (Intel ISA extensions reference)",
    ..INTEL_SKYLAKE_CLIENT
};

pub(super) const INTEL_AVX2: CoreModel = CoreModel {
    name: "Intel core with two 256-bit FMA units (model not in the table)",
    int8_dot: PerWidth::new(2.0, 2.0, 0.0),
    fma_latency_cycles: 4.0,
    assumption: "model not in the table: 2 FMA ports of 256 bits assumed (Haswell and later \
                 P-cores); adds share them; E-core-only parts reach less",
    source: "Intel Optimization Reference Manual (248966): Haswell through Golden Cove issue \
             FMAs on ports 0 and 1",
    ..INTEL_HASWELL
};

#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // Arm and other targets.
pub(super) const ARM_2X128: CoreModel = CoreModel {
    name: "Arm core with two 128-bit FP pipes",
    fma: PerWidth::new(2.0, 0.0, 0.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(2.0, 0.0, 0.0),
    int8_dot: PerWidth::new(2.0, 0.0, 0.0),
    fp16_fma: PerWidth::new(2.0, 0.0, 0.0),
    fma_latency_cycles: 4.0,
    assumption: "2 NEON FMA pipes of 128 bits (Neoverse N1/N2, Cortex-A7x)",
    source: "Arm Neoverse N1 / N2 Software Optimization Guides: two FP/ASIMD pipes (V0, V1)",
    licence_frequency: LICENCE_ARM,
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // Arm and other targets.
pub(super) const ARM_4X128: CoreModel = CoreModel {
    name: "Arm core with four 128-bit FP pipes",
    fma: PerWidth::new(4.0, 0.0, 0.0),
    bf16_dot: PerWidth::new(4.0, 0.0, 0.0),
    int8_dot: PerWidth::new(4.0, 0.0, 0.0),
    fp16_fma: PerWidth::new(4.0, 0.0, 0.0),
    assumption: "4 NEON FMA pipes of 128 bits (Neoverse V1/V2, Apple M-series)",
    source: "Arm Neoverse V1 / V2 Software Optimization Guides (four ASIMD pipes V0-V3); \
             Apple M1 measurements in the metal-benchmarks/Firestorm literature",
    ..ARM_2X128
};

pub(super) const UNKNOWN_X86: CoreModel = CoreModel {
    name: "unknown x86-64 core (stated default)",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(2.0, 2.0, 2.0),
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    fp16_fma: PerWidth::new(2.0, 2.0, 2.0),
    fma_latency_cycles: 4.0,
    assumption: "not in the table: assumes 2 FMA pipes at the widest vector width the ISA \
                 has, an upper bound (a core with narrower units reaches half)",
    source: "stated default of this tool",
    licence_frequency: "unknown core: no expectation (the probe's measured vector clock is \
                        what counts)",
    amx_bf16_flops_per_cycle: 0.0,
    amx_int8_ops_per_cycle: 0.0,
};

/// Every row, for the table-wide tests.
#[cfg(test)]
pub(super) const ALL: &[CoreModel] = &[
    AMD_ZEN5_FULL,
    AMD_ZEN5_HALF,
    AMD_ZEN4,
    AMD_ZEN3,
    AMD_ZEN2,
    AMD_ZEN1,
    INTEL_SKYLAKE_SP,
    INTEL_SKYLAKE_SP_ONE_UNIT,
    INTEL_CASCADE_LAKE,
    INTEL_CASCADE_LAKE_ONE_UNIT,
    INTEL_COOPER_LAKE,
    INTEL_ICE_LAKE_SP,
    INTEL_SAPPHIRE_RAPIDS,
    INTEL_EMERALD_RAPIDS,
    INTEL_GRANITE_RAPIDS,
    INTEL_CLIENT_AVX512,
    INTEL_HASWELL,
    INTEL_SKYLAKE_CLIENT,
    INTEL_ALDER_LAKE_P,
    INTEL_AVX2,
    ARM_2X128,
    ARM_4X128,
    UNKNOWN_X86,
];
