//! Per-microarchitecture throughput table and the theoretical-peak arithmetic.
//!
//! A peak is `instructions per cycle × FLOP per instruction × clock × cores`. The clock is the
//! sustained clock measured by `clock.rs` (never the TSC or the base clock: on the development
//! machine those are 1.4-1.6× lower than the cores really run). The instructions per cycle come
//! from this table, one row per core design, each with the source it was taken from. The
//! FMA-only peak (what GEMM can use) and the FMA+ADD peak (FMAs plus the separate FP adders)
//! are distinct ceilings and both are reported.

use crate::device::Precision;

use super::record::{ComputeMix, CoreModelRecord};

/// Instructions issued per cycle per core at 128-, 256- and 512-bit vector width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerWidth {
    pub x128: f64,
    pub x256: f64,
    pub x512: f64,
}

impl PerWidth {
    const fn new(x128: f64, x256: f64, x512: f64) -> PerWidth {
        PerWidth { x128, x256, x512 }
    }
    const NONE: PerWidth = PerWidth::new(0.0, 0.0, 0.0);

    pub fn at(&self, bits: u32) -> f64 {
        match bits {
            512 => self.x512,
            256 => self.x256,
            _ => self.x128,
        }
    }

    fn as_array(&self) -> [f64; 3] {
        [self.x128, self.x256, self.x512]
    }
}

/// Throughput of one core design.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoreModel {
    pub name: &'static str,
    /// fp32/fp64 FMA instructions per cycle.
    pub fma: PerWidth,
    /// FP add instructions per cycle on adders separate from the FMA pipes; zero where adds
    /// share the FMA pipes (then FMA+ADD is no faster than FMA alone).
    pub fadd: PerWidth,
    /// `vdpbf16ps` (or `bfdot`) instructions per cycle.
    pub bf16_dot: PerWidth,
    /// `vpdpbusd` (or `sdot`/`udot`) instructions per cycle.
    pub int8_dot: PerWidth,
    /// `vfmadd*ph` (or fp16 `fmla`) instructions per cycle.
    pub fp16_fma: PerWidth,
    pub fma_latency_cycles: f64,
    /// The assumption in words, printed next to the peaks.
    pub assumption: &'static str,
    pub source: &'static str,
}

const AMD_ZEN5_FULL: CoreModel = CoreModel {
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
             rates as measured with likwid-bench and hand-written kernels \
             (shared/reference/this-machine.md)",
};

const AMD_ZEN5_HALF: CoreModel = CoreModel {
    name: "AMD Zen 5 (256-bit datapath, mobile)",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    fadd: PerWidth::new(2.0, 2.0, 1.0),
    bf16_dot: PerWidth::new(2.0, 2.0, 1.0),
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA + 2 FADD pipes of 256 bits; a 512-bit op takes both halves (1 per cycle)",
    source: "AMD Zen 5 mobile parts (Strix Point, Krackan) keep a 256-bit FP datapath: AMD \
             Hot Chips 2024 Zen 5 presentation, 'configurable' AVX-512 datapath",
};

const AMD_ZEN4: CoreModel = CoreModel {
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
};

const AMD_ZEN2_ZEN3: CoreModel = CoreModel {
    name: "AMD Zen 2 / Zen 3",
    fma: PerWidth::new(2.0, 2.0, 0.0),
    fadd: PerWidth::new(2.0, 2.0, 0.0),
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::NONE,
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 5.0,
    assumption: "2 FMA + 2 FADD pipes of 256 bits",
    source: "AMD Software Optimization Guides for Family 17h models 30h+ (pub. 56305) and \
             Family 19h (pub. 56665): four 256-bit FP pipes, two FMA and two FADD",
};

const AMD_ZEN1: CoreModel = CoreModel {
    name: "AMD Zen / Zen+",
    fma: PerWidth::new(2.0, 1.0, 0.0),
    fadd: PerWidth::new(2.0, 1.0, 0.0),
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::NONE,
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 5.0,
    assumption: "2 FMA + 2 FADD pipes of 128 bits; 256-bit ops run as two halves",
    source: "AMD Software Optimization Guide for Family 17h (pub. 55723): four 128-bit FP pipes",
};

const INTEL_SERVER_AVX512: CoreModel = CoreModel {
    name: "Intel Xeon with two 512-bit FMA units",
    fma: PerWidth::new(2.0, 2.0, 2.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(1.0, 1.0, 1.0),
    int8_dot: PerWidth::new(2.0, 2.0, 2.0),
    fp16_fma: PerWidth::new(2.0, 2.0, 2.0),
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports (p0+p1 fused and p5) at 512 bits; adds share the FMA ports; \
                 Skylake-SP/Cascade Lake Bronze, Silver and Gold 5xxx have one 512-bit unit \
                 and reach half; vdpbf16ps 1 per cycle",
    source: "Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), \
             chapter on Intel AVX-512 (two FMA units on Xeon Scalable Gold 6xxx/Platinum and \
             later Xeons); vdpbf16ps/vpdpbusd port usage per uops.info",
};

const INTEL_CLIENT_AVX512: CoreModel = CoreModel {
    name: "Intel client core with one 512-bit FMA unit",
    fma: PerWidth::new(2.0, 2.0, 1.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::new(2.0, 2.0, 1.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports at 256 bits, fused into one 512-bit unit for zmm; adds share them",
    source: "Intel Optimization Reference Manual (248966): Ice Lake / Tiger Lake / Rocket Lake \
             client cores execute 512-bit FMAs on the fused port 0+1 only",
};

const INTEL_AVX2: CoreModel = CoreModel {
    name: "Intel core with two 256-bit FMA units",
    fma: PerWidth::new(2.0, 2.0, 0.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::NONE,
    int8_dot: PerWidth::new(2.0, 2.0, 0.0),
    fp16_fma: PerWidth::NONE,
    fma_latency_cycles: 4.0,
    assumption: "2 FMA ports of 256 bits (Haswell and later); adds share them",
    source: "Intel Optimization Reference Manual (248966): Haswell through Golden Cove issue \
             FMAs on ports 0 and 1",
};

#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // Arm and other targets.
const ARM_2X128: CoreModel = CoreModel {
    name: "Arm core with two 128-bit FP pipes",
    fma: PerWidth::new(2.0, 0.0, 0.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(2.0, 0.0, 0.0),
    int8_dot: PerWidth::new(2.0, 0.0, 0.0),
    fp16_fma: PerWidth::new(2.0, 0.0, 0.0),
    fma_latency_cycles: 4.0,
    assumption: "2 NEON FMA pipes of 128 bits (Neoverse N1/N2, Cortex-A7x)",
    source: "Arm Neoverse N1 / N2 Software Optimization Guides: two FP/ASIMD pipes (V0, V1)",
};

#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // Arm and other targets.
const ARM_4X128: CoreModel = CoreModel {
    name: "Arm core with four 128-bit FP pipes",
    fma: PerWidth::new(4.0, 0.0, 0.0),
    fadd: PerWidth::NONE,
    bf16_dot: PerWidth::new(4.0, 0.0, 0.0),
    int8_dot: PerWidth::new(4.0, 0.0, 0.0),
    fp16_fma: PerWidth::new(4.0, 0.0, 0.0),
    fma_latency_cycles: 4.0,
    assumption: "4 NEON FMA pipes of 128 bits (Neoverse V1/V2, Apple M-series)",
    source: "Arm Neoverse V1 / V2 Software Optimization Guides (four ASIMD pipes V0-V3); \
             Apple M1 measurements in the metal-benchmarks/Firestorm literature",
};

const UNKNOWN_X86: CoreModel = CoreModel {
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
};

/// Chooses the table row for an x86 CPU from its vendor string and display family/model.
pub fn x86_core_model(vendor: &str, family: u32, model: u32) -> CoreModel {
    match (vendor, family) {
        ("AuthenticAMD" | "HygonGenuine", 0x1a) => match model {
            // Strix Point (0x20-0x2f) and Krackan Point (0x60-0x6f) are the mobile parts.
            0x20..=0x2f | 0x60..=0x6f => AMD_ZEN5_HALF,
            _ => AMD_ZEN5_FULL,
        },
        ("AuthenticAMD", 0x19) => match model {
            // Genoa/Storm Peak (0x10-0x1f), Raphael (0x60-0x6f), Phoenix (0x70-0x7f),
            // Bergamo/Siena (0xa0-0xaf).
            0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf => AMD_ZEN4,
            _ => AMD_ZEN2_ZEN3,
        },
        ("AuthenticAMD" | "HygonGenuine", 0x17) => {
            if model >= 0x30 {
                AMD_ZEN2_ZEN3
            } else {
                AMD_ZEN1
            }
        }
        ("GenuineIntel", 6) => match model {
            // Skylake-SP/Cascade Lake/Cooper Lake, Ice Lake-SP/-D, Sapphire/Emerald Rapids,
            // Granite Rapids.
            0x55 | 0x6a | 0x6c | 0x8f | 0xcf | 0xad | 0xae => INTEL_SERVER_AVX512,
            // Ice Lake client, Tiger Lake, Rocket Lake.
            0x7d | 0x7e | 0x8c | 0x8d | 0xa7 => INTEL_CLIENT_AVX512,
            _ => INTEL_AVX2,
        },
        _ => UNKNOWN_X86,
    }
}

/// Chooses the table row for an Arm CPU from its MIDR implementer and part number.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // Arm and other targets.
pub fn arm_core_model(implementer: u32, part: u32) -> CoreModel {
    match (implementer, part) {
        // Arm Ltd: Neoverse V1 (0xd40), V2 (0xd4f), Cortex-X1..X4 (0xd44, 0xd4c, 0xd4e, 0xd82).
        (0x41, 0xd40 | 0xd4f | 0xd44 | 0xd4c | 0xd4e | 0xd82) => ARM_4X128,
        // Apple.
        (0x61, _) => ARM_4X128,
        _ => ARM_2X128,
    }
}

/// The row for an architecture without a table (stated default).
#[cfg_attr(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    allow(dead_code) // Only targets without a table use it.
)]
pub fn unknown_core_model() -> CoreModel {
    CoreModel {
        name: "unknown core (stated default)",
        assumption: "no throughput table for this architecture; 2 FMA pipes of 128 bits assumed",
        source: "stated default of this tool",
        ..ARM_2X128
    }
}

/// Operation classes a compute kernel issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    Fma,
    Add,
    Bf16Dot,
    Int8Dot,
    Fp16Fma,
}

/// Element width in bits of the operands of one lane for FLOP counting.
pub fn element_bits(precision: Precision) -> u32 {
    match precision {
        Precision::Fp64 => 64,
        Precision::Fp32 | Precision::Tf32 => 32,
        Precision::Fp16 | Precision::Bf16 => 16,
        Precision::Fp8 | Precision::Int8 => 8,
    }
}

/// FLOP (OP) per instruction: an FMA or a dot-product step is a multiply and an add per input
/// element (`vdpbf16ps zmm`: 32 products and 32 sums = 64; `vpdpbusd zmm`: 128); an add is one.
pub fn flops_per_instruction(class: OpClass, precision: Precision, vector_bits: u32) -> f64 {
    let lanes = f64::from(vector_bits / element_bits(precision));
    match class {
        OpClass::Add => lanes,
        _ => 2.0 * lanes,
    }
}

impl CoreModel {
    pub fn per_cycle(&self, class: OpClass) -> &PerWidth {
        match class {
            OpClass::Fma => &self.fma,
            OpClass::Add => &self.fadd,
            OpClass::Bf16Dot => &self.bf16_dot,
            OpClass::Int8Dot => &self.int8_dot,
            OpClass::Fp16Fma => &self.fp16_fma,
        }
    }

    /// The operation class that carries a precision's FMA-type work.
    pub fn class_for(precision: Precision) -> Option<OpClass> {
        match precision {
            Precision::Fp64 | Precision::Fp32 => Some(OpClass::Fma),
            Precision::Bf16 => Some(OpClass::Bf16Dot),
            Precision::Int8 => Some(OpClass::Int8Dot),
            Precision::Fp16 => Some(OpClass::Fp16Fma),
            Precision::Tf32 | Precision::Fp8 => None,
        }
    }

    /// FLOP per cycle per core at `precision`, at the best of the vector widths the CPU has
    /// (`widths`), with the width it is reached at. For `FmaAdd` the separate adders add their
    /// share; where there are none the figure equals the FMA-only one.
    pub fn flops_per_cycle(
        &self,
        precision: Precision,
        mix: ComputeMix,
        widths: &[u32],
    ) -> Option<(f64, u32)> {
        let class = Self::class_for(precision)?;
        widths
            .iter()
            .map(|&bits| {
                let mut per_cycle =
                    self.per_cycle(class).at(bits) * flops_per_instruction(class, precision, bits);
                if mix == ComputeMix::FmaAdd && class == OpClass::Fma {
                    per_cycle +=
                        self.fadd.at(bits) * flops_per_instruction(OpClass::Add, precision, bits);
                }
                (per_cycle, bits)
            })
            .filter(|&(per_cycle, _)| per_cycle > 0.0)
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
    }

    pub fn record(&self) -> CoreModelRecord {
        CoreModelRecord {
            name: self.name.to_string(),
            fma_per_cycle: self.fma.as_array(),
            fadd_per_cycle: self.fadd.as_array(),
            bf16_dot_per_cycle: self.bf16_dot.as_array(),
            int8_dot_per_cycle: self.int8_dot.as_array(),
            fp16_fma_per_cycle: self.fp16_fma.as_array(),
            fma_latency_cycles: self.fma_latency_cycles,
            assumption: self.assumption.to_string(),
            source: self.source.to_string(),
        }
    }
}

/// Theoretical peak in FLOP/s: per-cycle rate × the sum of the threads' clocks.
pub fn theoretical_flops(flops_per_cycle: f64, clock_hz_per_thread: &[f64]) -> f64 {
    flops_per_cycle * clock_hz_per_thread.iter().sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVX512: [u32; 3] = [128, 256, 512];
    const AVX2: [u32; 2] = [128, 256];

    fn peak_gflops(
        model: &CoreModel,
        precision: Precision,
        mix: ComputeMix,
        widths: &[u32],
        ghz: f64,
        cores: usize,
    ) -> f64 {
        let (per_cycle, _) = model
            .flops_per_cycle(precision, mix, widths)
            .expect("precision supported");
        theoretical_flops(per_cycle, &vec![ghz * 1e9; cores]) / 1e9
    }

    fn assert_close(actual: f64, expected: f64) {
        assert!((actual - expected).abs() < 0.5, "{actual} vs {expected}");
    }

    #[test]
    fn zen5_one_core_at_4_1_ghz_matches_the_reference_table() {
        // shared/reference/this-machine.md: fp64 FMA 131, FMA+FADD 197, fp32 262, bf16 525,
        // int8 1050 GOP/s at 4.1 GHz.
        let zen5 = x86_core_model("AuthenticAMD", 0x1a, 0x02);
        assert_eq!(zen5.name, AMD_ZEN5_FULL.name);
        let g = |p, m| peak_gflops(&zen5, p, m, &AVX512, 4.1, 1);
        assert_close(g(Precision::Fp64, ComputeMix::Fma), 131.2);
        assert_close(g(Precision::Fp64, ComputeMix::FmaAdd), 196.8);
        assert_close(g(Precision::Fp32, ComputeMix::Fma), 262.4);
        assert_close(g(Precision::Bf16, ComputeMix::Fma), 524.8);
        assert_close(g(Precision::Int8, ComputeMix::Fma), 1049.6);
    }

    #[test]
    fn zen4_runs_avx512_at_half_rate_of_zen5() {
        // EPYC 9654 (Genoa, family 0x19 model 0x11) at 3.7 GHz: 1 zmm FMA per cycle.
        let zen4 = x86_core_model("AuthenticAMD", 0x19, 0x11);
        assert_eq!(zen4.name, "AMD Zen 4");
        let fp64 = peak_gflops(&zen4, Precision::Fp64, ComputeMix::Fma, &AVX512, 3.7, 1);
        assert_close(fp64, 59.2);
        // The peak is reached at 256 bits already; 512 bits is not faster.
        let (_, bits) = zen4
            .flops_per_cycle(Precision::Fp64, ComputeMix::Fma, &AVX512)
            .expect("fp64");
        assert_eq!(bits, 256);
        let mixed = peak_gflops(&zen4, Precision::Fp32, ComputeMix::FmaAdd, &AVX512, 3.7, 96);
        // 96 cores × 3.7 GHz × (2×8×2 + 2×8) = 17 050 GFLOP/s.
        assert_close(mixed, 17049.6);
    }

    #[test]
    fn intel_adds_share_the_fma_ports() {
        // Xeon Platinum 8380 (Ice Lake-SP, model 0x6a), 40 cores at 2.3 GHz all-core AVX-512.
        let icx = x86_core_model("GenuineIntel", 6, 0x6a);
        let fma = peak_gflops(&icx, Precision::Fp64, ComputeMix::Fma, &AVX512, 2.3, 40);
        let mixed = peak_gflops(&icx, Precision::Fp64, ComputeMix::FmaAdd, &AVX512, 2.3, 40);
        assert_close(fma, 2944.0);
        assert_eq!(fma, mixed);
        // Without AVX-512 the same core would do half.
        let avx2 = peak_gflops(&icx, Precision::Fp64, ComputeMix::Fma, &AVX2, 2.3, 40);
        assert_close(avx2, 1472.0);
    }

    #[test]
    fn haswell_has_no_int8_dot_without_vnni_widths() {
        let hsw = x86_core_model("GenuineIntel", 6, 0x3f);
        // Xeon E5-2699 v3: 18 cores × 2.3 GHz × 16 fp64 FLOP/cycle = 662.4 GFLOP/s.
        let fp64 = peak_gflops(&hsw, Precision::Fp64, ComputeMix::Fma, &AVX2, 2.3, 18);
        assert_close(fp64, 662.4);
        assert!(hsw
            .flops_per_cycle(Precision::Bf16, ComputeMix::Fma, &AVX2)
            .is_none());
    }

    #[test]
    fn flop_counts_per_instruction() {
        assert_eq!(
            flops_per_instruction(OpClass::Fma, Precision::Fp64, 512),
            16.0
        );
        assert_eq!(
            flops_per_instruction(OpClass::Add, Precision::Fp32, 256),
            8.0
        );
        assert_eq!(
            flops_per_instruction(OpClass::Bf16Dot, Precision::Bf16, 512),
            64.0
        );
        assert_eq!(
            flops_per_instruction(OpClass::Int8Dot, Precision::Int8, 512),
            128.0
        );
    }
}
