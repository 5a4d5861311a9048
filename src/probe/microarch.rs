//! Per-microarchitecture throughput table and the theoretical-peak arithmetic.
//!
//! A peak is `instructions per cycle × FLOP per instruction × clock × cores`. The clock is the
//! sustained clock measured by `clock.rs` (never the TSC or the base clock: on the development
//! machine those are 1.4-1.6× lower than the cores really run). The instructions per cycle come
//! from the table in `microarch_table.rs`, one row per core design, each with the source it was
//! taken from, the frequency behaviour documented for heavy vector code on that core, and (for
//! the AMX cores) the tile throughput as documentation. The FMA-only peak (what GEMM can use)
//! and the FMA+ADD peak (FMAs plus the separate FP adders) are distinct ceilings, both reported
//! where the core has separate adders; where adds share the FMAs' issue (Intel, Zen 1) the
//! FMA+ADD peak would equal the FMA one and is not listed. A measured kernel is judged against
//! the rate of its own instruction mix ([`CoreModel::body_flops_per_cycle`]).

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
    /// What heavy 256-/512-bit code is documented to do to the clock on this core, with its
    /// source: the expectation printed next to the vector clock the probe measures, so that a
    /// gap between the scalar and the vector clock can be told from a measuring error.
    pub licence_frequency: &'static str,
    /// AMX tile throughput per core. Documentation only: no AMX kernel exists, so these never
    /// become a roof.
    pub amx_bf16_flops_per_cycle: f64,
    pub amx_int8_ops_per_cycle: f64,
}

// The rows live in their own file so that this one keeps the arithmetic readable; declared
// here so that the table stays private to it.
#[path = "microarch_table.rs"]
mod table;

use table::*;

/// Chooses the table row for an x86 CPU from its vendor string and display family, model and
/// stepping. The stepping only matters where one model number covers several designs (family 6
/// model 0x55: Skylake-SP, Cascade Lake, Cooper Lake); without it the oldest is assumed.
pub fn x86_core_model(vendor: &str, family: u32, model: u32, stepping: Option<u32>) -> CoreModel {
    match (vendor, family) {
        ("AuthenticAMD", 0x1a) => match model {
            // Strix Point (0x20-0x2f) and Krackan Point (0x60-0x6f) are the mobile parts.
            0x20..=0x2f | 0x60..=0x6f => AMD_ZEN5_HALF,
            _ => AMD_ZEN5_FULL,
        },
        ("AuthenticAMD", 0x19) => match model {
            // Genoa/Storm Peak (0x10-0x1f), Raphael (0x60-0x6f), Phoenix (0x70-0x7f),
            // Bergamo/Siena (0xa0-0xaf); the rest of family 19h is Zen 3.
            0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf => AMD_ZEN4,
            _ => AMD_ZEN3,
        },
        ("AuthenticAMD" | "HygonGenuine", 0x17) if model >= 0x30 => AMD_ZEN2,
        // Hygon Dhyana is a Zen 1 derivative that reports family 0x18.
        ("AuthenticAMD" | "HygonGenuine", 0x17) | ("HygonGenuine", 0x18) => AMD_ZEN1,
        ("GenuineIntel", 6) => intel_family6(model, stepping),
        _ => UNKNOWN_X86,
    }
}

fn intel_family6(model: u32, stepping: Option<u32>) -> CoreModel {
    match model {
        0x55 => match stepping {
            None | Some(0..=4) => INTEL_SKYLAKE_SP,
            Some(10 | 11) => INTEL_COOPER_LAKE,
            Some(_) => INTEL_CASCADE_LAKE,
        },
        // Ice Lake-SP and Ice Lake-D.
        0x6a | 0x6c => INTEL_ICE_LAKE_SP,
        0x8f => INTEL_SAPPHIRE_RAPIDS,
        0xcf => INTEL_EMERALD_RAPIDS,
        // Granite Rapids-SP/AP and -D.
        0xad | 0xae => INTEL_GRANITE_RAPIDS,
        // Cannon Lake, Ice Lake client, Tiger Lake, Rocket Lake.
        0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 => INTEL_CLIENT_AVX512,
        // Haswell, Broadwell.
        0x3c | 0x3f | 0x45 | 0x46 | 0x3d | 0x47 | 0x4f | 0x56 => INTEL_HASWELL,
        // Skylake, Kaby/Coffee/Whiskey/Amber Lake, Comet Lake.
        0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6 => INTEL_SKYLAKE_CLIENT,
        // Alder Lake, Raptor Lake, Meteor Lake, Arrow Lake, Lunar Lake, Panther Lake.
        0x97 | 0x9a | 0xb7 | 0xba | 0xbf | 0xaa | 0xac | 0xb5 | 0xc5 | 0xc6 | 0xbd | 0xcc => {
            INTEL_ALDER_LAKE_P
        }
        _ => INTEL_AVX2,
    }
}

/// Narrows a Skylake-SP or Cascade Lake row to the one-FMA-unit variant when the brand string
/// names a SKU with a single 512-bit unit (Bronze, Silver, Gold 5xxx except the 5122 and 5222):
/// CPUID does not tell the two apart, and assuming two units would double those SKUs' AVX-512
/// peak. Other rows, and brand strings that name no such SKU, are returned unchanged.
pub fn refine_for_brand(row: CoreModel, brand: &str) -> CoreModel {
    if !has_one_avx512_fma_unit(brand) {
        return row;
    }
    if row.name == INTEL_SKYLAKE_SP.name {
        INTEL_SKYLAKE_SP_ONE_UNIT
    } else if row.name == INTEL_CASCADE_LAKE.name {
        INTEL_CASCADE_LAKE_ONE_UNIT
    } else {
        row
    }
}

fn has_one_avx512_fma_unit(brand: &str) -> bool {
    if brand.contains("Xeon(R) Bronze") || brand.contains("Xeon(R) Silver") {
        return true;
    }
    let Some((_, rest)) = brand.split_once("Xeon(R) Gold ") else {
        return false;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    // The 5122 (Skylake-SP) and 5222 (Cascade Lake, assumed the same) are the four-core
    // high-clock Gold 5 parts with both units.
    digits.starts_with('5') && digits != "5122" && digits != "5222"
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

    /// Whether adds have pipes of their own at some width (else they take FMA issue slots).
    pub fn has_separate_adders(&self) -> bool {
        self.fadd
            .as_array()
            .iter()
            .any(|&per_cycle| per_cycle > 0.0)
    }

    /// FLOP per cycle per core of a loop whose iteration issues `body` ((class, instructions))
    /// at `vector_bits`: its FLOPs over the cycles its busiest group of pipes needs. Adds issue
    /// on their own pipes where the core has them (`fadd`), else in the FMA pipes' slots (Intel's
    /// shared ports, Zen 1's FADD pipes that do not issue beside an FMA), so an FMA+ADD mix
    /// there runs below the FMA-only rate. For a body of one class this is
    /// [`Self::flops_per_cycle`] at that width. `None` when a class has no rate at the width.
    pub fn body_flops_per_cycle(
        &self,
        precision: Precision,
        body: &[(OpClass, u64)],
        vector_bits: u32,
    ) -> Option<f64> {
        let separate_adders = self.fadd.at(vector_bits) > 0.0;
        let mut flops = 0.0;
        // Cycles per pipe group: each class on its own pipes, adds with the FMAs when shared.
        let mut cycles: Vec<(OpClass, f64)> = Vec::new();
        for &(class, count) in body {
            flops += count as f64 * flops_per_instruction(class, precision, vector_bits);
            let group = if class == OpClass::Add && !separate_adders {
                OpClass::Fma
            } else {
                class
            };
            let rate = self.per_cycle(group).at(vector_bits);
            if rate <= 0.0 {
                return None;
            }
            match cycles.iter_mut().find(|(pipes, _)| *pipes == group) {
                Some((_, busy)) => *busy += count as f64 / rate,
                None => cycles.push((group, count as f64 / rate)),
            }
        }
        let busiest = cycles.iter().map(|&(_, busy)| busy).fold(0.0, f64::max);
        (busiest > 0.0).then(|| flops / busiest)
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
            licence_frequency: self.licence_frequency.to_string(),
            amx_bf16_flops_per_cycle: self.amx_bf16_flops_per_cycle,
            amx_int8_ops_per_cycle: self.amx_int8_ops_per_cycle,
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
        // shared/reference/machines.md (Zen 5): fp64 FMA 131, FMA+FADD 197, fp32 262, bf16 525,
        // int8 1050 GOP/s at 4.1 GHz.
        let zen5 = x86_core_model("AuthenticAMD", 0x1a, 0x02, Some(0));
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
        let zen4 = x86_core_model("AuthenticAMD", 0x19, 0x11, Some(1));
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
        let icx = x86_core_model("GenuineIntel", 6, 0x6a, Some(6));
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
        let hsw = x86_core_model("GenuineIntel", 6, 0x3f, Some(2));
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

    /// One entry per row: (vendor, family, model, stepping) → the row it must select.
    const SELECTION: &[(&str, u32, u32, Option<u32>, &str)] = &[
        (
            "AuthenticAMD",
            0x1a,
            0x02,
            Some(0),
            "AMD Zen 5 (512-bit datapath)",
        ),
        (
            "AuthenticAMD",
            0x1a,
            0x44,
            Some(0),
            "AMD Zen 5 (512-bit datapath)",
        ),
        (
            "AuthenticAMD",
            0x1a,
            0x24,
            Some(0),
            "AMD Zen 5 (256-bit datapath, mobile)",
        ),
        ("AuthenticAMD", 0x19, 0x11, Some(1), "AMD Zen 4"),
        ("AuthenticAMD", 0x19, 0x61, Some(2), "AMD Zen 4"),
        ("AuthenticAMD", 0x19, 0x01, Some(1), "AMD Zen 3"),
        ("AuthenticAMD", 0x19, 0x21, Some(0), "AMD Zen 3"),
        ("AuthenticAMD", 0x17, 0x31, Some(0), "AMD Zen 2"),
        ("AuthenticAMD", 0x17, 0x71, Some(0), "AMD Zen 2"),
        ("AuthenticAMD", 0x17, 0x01, Some(1), "AMD Zen / Zen+"),
        ("AuthenticAMD", 0x17, 0x08, Some(2), "AMD Zen / Zen+"),
        ("HygonGenuine", 0x18, 0x00, Some(1), "AMD Zen / Zen+"),
        ("GenuineIntel", 6, 0x55, Some(4), "Intel Skylake-SP"),
        ("GenuineIntel", 6, 0x55, None, "Intel Skylake-SP"),
        ("GenuineIntel", 6, 0x55, Some(7), "Intel Cascade Lake"),
        ("GenuineIntel", 6, 0x55, Some(5), "Intel Cascade Lake"),
        ("GenuineIntel", 6, 0x55, Some(11), "Intel Cooper Lake"),
        ("GenuineIntel", 6, 0x6a, Some(6), "Intel Ice Lake-SP"),
        ("GenuineIntel", 6, 0x6c, Some(1), "Intel Ice Lake-SP"),
        ("GenuineIntel", 6, 0x8f, Some(8), "Intel Sapphire Rapids"),
        ("GenuineIntel", 6, 0xcf, Some(2), "Intel Emerald Rapids"),
        ("GenuineIntel", 6, 0xad, Some(1), "Intel Granite Rapids"),
        ("GenuineIntel", 6, 0xae, Some(1), "Intel Granite Rapids"),
        (
            "GenuineIntel",
            6,
            0x7e,
            Some(5),
            "Intel client core with one 512-bit FMA unit",
        ),
        (
            "GenuineIntel",
            6,
            0xa7,
            Some(1),
            "Intel client core with one 512-bit FMA unit",
        ),
        (
            "GenuineIntel",
            6,
            0x3f,
            Some(2),
            "Intel Haswell / Broadwell",
        ),
        (
            "GenuineIntel",
            6,
            0x4f,
            Some(1),
            "Intel Haswell / Broadwell",
        ),
        (
            "GenuineIntel",
            6,
            0x9e,
            Some(10),
            "Intel Skylake client (through Comet Lake)",
        ),
        (
            "GenuineIntel",
            6,
            0xa5,
            Some(5),
            "Intel Skylake client (through Comet Lake)",
        ),
        (
            "GenuineIntel",
            6,
            0x97,
            Some(2),
            "Intel client P-core with AVX-VNNI (Alder Lake and later)",
        ),
        (
            "GenuineIntel",
            6,
            0xc6,
            Some(2),
            "Intel client P-core with AVX-VNNI (Alder Lake and later)",
        ),
        (
            "GenuineIntel",
            6,
            0xaf,
            Some(3),
            "Intel core with two 256-bit FMA units (model not in the table)",
        ),
        (
            "GenuineIntel",
            0x13,
            0x01,
            Some(0),
            "unknown x86-64 core (stated default)",
        ),
        (
            "CentaurHauls",
            6,
            0x0f,
            Some(0),
            "unknown x86-64 core (stated default)",
        ),
    ];

    #[test]
    fn each_row_is_selected_by_family_model_and_stepping() {
        for &(vendor, family, model, stepping, name) in SELECTION {
            let row = x86_core_model(vendor, family, model, stepping);
            assert_eq!(
                row.name, name,
                "{vendor} family {family:#x} model {model:#x} stepping {stepping:?}"
            );
        }
        // Every x86 row except the one-unit variants (chosen by brand) is reachable.
        for row in table::ALL {
            let x86 = !row.name.starts_with("Arm");
            if x86 && !row.name.contains("one 512-bit FMA unit)") {
                assert!(
                    SELECTION.iter().any(|entry| entry.4 == row.name),
                    "no selection test for {}",
                    row.name
                );
            }
        }
    }

    #[test]
    fn every_row_is_sourced_and_consistent() {
        let mut names = std::collections::BTreeSet::new();
        for row in table::ALL {
            assert!(names.insert(row.name), "duplicate row name {}", row.name);
            assert!(!row.source.trim().is_empty(), "{}: no source", row.name);
            assert!(
                !row.assumption.trim().is_empty(),
                "{}: no assumption",
                row.name
            );
            assert!(
                !row.licence_frequency.trim().is_empty(),
                "{}: no licence-frequency text",
                row.name
            );
            assert!(row.fma_latency_cycles >= 3.0 && row.fma_latency_cycles <= 6.0);
            assert!(row.amx_bf16_flops_per_cycle >= 0.0 && row.amx_int8_ops_per_cycle >= 0.0);
            let classes = [
                OpClass::Fma,
                OpClass::Add,
                OpClass::Bf16Dot,
                OpClass::Int8Dot,
                OpClass::Fp16Fma,
            ];
            for class in classes {
                let [x128, x256, x512] = row.per_cycle(class).as_array();
                for rate in [x128, x256, x512] {
                    assert!(rate.is_finite() && rate >= 0.0, "{} {class:?}", row.name);
                }
                // A core that issues 512-bit instructions also issues 256-bit ones.
                assert!(
                    x512 == 0.0 || x256 > 0.0,
                    "{} {class:?}: x512 without x256",
                    row.name
                );
            }
            // Only cores with FMA pipes have FMA-derived rates.
            assert!(row.fma.x128 > 0.0, "{}: no FMA", row.name);
        }
    }

    #[test]
    fn amx_rates_are_documented_only_on_the_amx_xeons() {
        for row in table::ALL {
            let amx = row.name.contains("Rapids");
            assert_eq!(row.amx_bf16_flops_per_cycle > 0.0, amx, "{}", row.name);
            if amx {
                // 16x16x32 bf16 tile product (2 FLOP each) in 16 cycles; int8 is twice that.
                assert_eq!(
                    row.amx_bf16_flops_per_cycle,
                    2.0 * 16.0 * 16.0 * 32.0 / 16.0
                );
                assert_eq!(
                    row.amx_int8_ops_per_cycle,
                    2.0 * row.amx_bf16_flops_per_cycle
                );
            }
        }
        let record = x86_core_model("GenuineIntel", 6, 0xcf, Some(2)).record();
        assert_eq!(record.amx_bf16_flops_per_cycle, 1024.0);
        assert_eq!(record.amx_int8_ops_per_cycle, 2048.0);
        assert!(record.licence_frequency.contains("93%"));
    }

    /// Hand-derived rates of the probe's mixed loops (8 FMA + 7 ADD ymm, 12 + 12 zmm): with
    /// separate adders the busier pipe group sets the cycles, with shared issue the sum does.
    #[test]
    fn an_fma_add_loop_is_judged_by_the_pipes_it_issues_on() {
        use OpClass::{Add, Fma};
        let ymm_mix: &[(OpClass, u64)] = &[(Fma, 8), (Add, 7)];
        // Zen 3: FMAs 8 / 2 = 4 cycles, adds 7 / 2 = 3.5 beside them: 184 FLOP (fp32) in 4.
        let zen3 = x86_core_model("AuthenticAMD", 0x19, 0x01, Some(1));
        let rate = zen3.body_flops_per_cycle(Precision::Fp32, ymm_mix, 256);
        assert_close(rate.unwrap(), 46.0);
        // Zen 1: a ymm FMA or add is one per cycle and they do not overlap: 184 FLOP in 15.
        let zen1 = x86_core_model("AuthenticAMD", 0x17, 0x01, Some(2));
        assert_eq!(zen1.name, "AMD Zen / Zen+");
        let rate = zen1.body_flops_per_cycle(Precision::Fp32, ymm_mix, 256);
        assert_close(rate.unwrap(), 184.0 / 15.0);
        // ... which the kernel-independent FMA+ADD peak does not exceed: FMA alone, 16.
        let (peak, _) = zen1
            .flops_per_cycle(Precision::Fp32, ComputeMix::FmaAdd, &AVX2)
            .unwrap();
        assert_close(peak, 16.0);
        // Ice Lake-SP, adds on the two FMA ports: 24 zmm instructions in 12 cycles, 576 FLOP
        // (fp32), below the FMA-only 64 per cycle.
        let icx = x86_core_model("GenuineIntel", 6, 0x6a, Some(6));
        let zmm_mix: &[(OpClass, u64)] = &[(Fma, 12), (Add, 12)];
        assert_close(
            icx.body_flops_per_cycle(Precision::Fp32, zmm_mix, 512)
                .unwrap(),
            48.0,
        );
        // One class: the per-width peak. No ADD at a width without FMA rate: none.
        let fma_only: &[(OpClass, u64)] = &[(Fma, 12)];
        assert_close(
            zen3.body_flops_per_cycle(Precision::Fp64, fma_only, 256)
                .unwrap(),
            16.0,
        );
        assert!(zen3
            .body_flops_per_cycle(Precision::Fp32, zmm_mix, 512)
            .is_none());
    }

    #[test]
    fn epyc_7763_zen3_fp64_peak() {
        // 64 cores × 2.45 GHz × (2 FMA × 4 fp64 lanes × 2) = 2508.8 GFLOP/s.
        let zen3 = x86_core_model("AuthenticAMD", 0x19, 0x01, Some(1));
        let fp64 = peak_gflops(&zen3, Precision::Fp64, ComputeMix::Fma, &AVX2, 2.45, 64);
        assert_close(fp64, 2508.8);
        // The separate adders add 2 × 4 more per cycle: 64 × 2.45 × 24 = 3763.2.
        let mixed = peak_gflops(&zen3, Precision::Fp64, ComputeMix::FmaAdd, &AVX2, 2.45, 64);
        assert_close(mixed, 3763.2);
        assert_eq!(zen3.fma_latency_cycles, 4.0);
        let zen2 = x86_core_model("AuthenticAMD", 0x17, 0x31, Some(0));
        assert_eq!(zen2.fma_latency_cycles, 5.0);
        assert_eq!(zen2.fma, zen3.fma);
    }

    #[test]
    fn emerald_rapids_rates_match_the_one_thread_measurement() {
        // shared/reference/machines.md, one thread, scalar clock 2.99 GHz: fp32 FMA 178.8,
        // vdpbf16ps 89.4, vpdpbusd 766 GOP/s, vfmadd231ph 382.
        let emr = x86_core_model("GenuineIntel", 6, 0xcf, Some(2));
        let per_cycle = |p| {
            emr.flops_per_cycle(p, ComputeMix::Fma, &AVX512)
                .expect("supported")
        };
        // bf16: 0.5 vdpbf16ps × 64 FLOP = 32 FLOP/cycle per core at 512 bits.
        assert_eq!(per_cycle(Precision::Bf16), (32.0, 512));
        assert_eq!(per_cycle(Precision::Int8), (256.0, 512));
        assert_eq!(per_cycle(Precision::Fp16), (128.0, 512));
        assert_eq!(per_cycle(Precision::Fp32), (64.0, 512));
        let g = |p| peak_gflops(&emr, p, ComputeMix::Fma, &AVX512, 2.99, 1);
        assert_close(g(Precision::Int8), 765.4);
        assert_close(g(Precision::Fp16), 382.7);
        // The FP FMA and bf16 figures were measured at about 93% of the scalar clock (the
        // licence text says so); the table is the per-cycle rate, so theory sits above them.
        assert_close(g(Precision::Fp32), 191.4);
        assert_close(g(Precision::Bf16), 95.7);
        assert!(g(Precision::Fp32) * 0.93 < 178.8 + 0.5);
        assert!(g(Precision::Bf16) * 0.93 < 89.4 + 0.5);
        // Sapphire and Granite Rapids share the execution core.
        for model in [0x8f, 0xad] {
            let row = x86_core_model("GenuineIntel", 6, model, Some(1));
            assert_eq!(
                (row.fma, row.bf16_dot, row.int8_dot),
                (emr.fma, emr.bf16_dot, emr.int8_dot)
            );
            assert_eq!(row.fp16_fma, emr.fp16_fma);
        }
    }

    #[test]
    fn skylake_sp_steppings_and_single_unit_skus() {
        // Xeon Platinum 8180 (Skylake-SP, stepping 4): 28 cores × 2.5 GHz × 32 fp64 FLOP/cycle.
        let skx = x86_core_model("GenuineIntel", 6, 0x55, Some(4));
        let platinum = refine_for_brand(skx, "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz");
        assert_eq!(platinum.name, "Intel Skylake-SP");
        let fp64 = peak_gflops(
            &platinum,
            Precision::Fp64,
            ComputeMix::Fma,
            &AVX512,
            2.5,
            28,
        );
        assert_close(fp64, 2240.0);
        assert!(platinum
            .flops_per_cycle(Precision::Int8, ComputeMix::Fma, &AVX512)
            .is_none());
        // Xeon Silver 4114 has one 512-bit unit: 16 fp64 FLOP/cycle, the same as AVX2.
        let silver = refine_for_brand(skx, "Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz");
        assert_eq!(silver.name, "Intel Skylake-SP (one 512-bit FMA unit)");
        let per_cycle = |row: &CoreModel, widths: &[u32]| {
            row.flops_per_cycle(Precision::Fp64, ComputeMix::Fma, widths)
                .expect("fp64")
                .0
        };
        assert_eq!(per_cycle(&silver, &AVX512), 16.0);
        assert_eq!(per_cycle(&silver, &AVX2), 16.0);
        assert_eq!(
            refine_for_brand(skx, "Intel(R) Xeon(R) Gold 5120 CPU @ 2.20GHz").name,
            silver.name
        );
        assert_eq!(
            refine_for_brand(skx, "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz").name,
            skx.name
        );
        assert_eq!(
            refine_for_brand(skx, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz").name,
            skx.name
        );
        // Cascade Lake (stepping 7) adds VNNI: Platinum 8280, 28 cores × 2.7 GHz × 256 OP/cycle.
        let clx = x86_core_model("GenuineIntel", 6, 0x55, Some(7));
        let int8 = peak_gflops(&clx, Precision::Int8, ComputeMix::Fma, &AVX512, 2.7, 28);
        assert_close(int8, 19353.6);
        let clx_gold5 = refine_for_brand(clx, "Intel(R) Xeon(R) Gold 5218R CPU @ 2.10GHz");
        assert_eq!(clx_gold5.name, "Intel Cascade Lake (one 512-bit FMA unit)");
        assert_eq!(clx_gold5.int8_dot.x512, 1.0);
        // Cooper Lake (stepping 11) adds bf16; other rows ignore the brand string.
        let cpx = x86_core_model("GenuineIntel", 6, 0x55, Some(11));
        assert!(cpx.bf16_dot.x512 > 0.0);
        let icx = x86_core_model("GenuineIntel", 6, 0x6a, Some(6));
        assert_eq!(
            refine_for_brand(icx, "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz"),
            icx
        );
    }

    #[test]
    fn client_rows_differ_in_latency_and_vnni() {
        let hsw = x86_core_model("GenuineIntel", 6, 0x3c, Some(3));
        let skl = x86_core_model("GenuineIntel", 6, 0x5e, Some(3));
        let adl = x86_core_model("GenuineIntel", 6, 0x97, Some(2));
        assert_eq!(hsw.fma_latency_cycles, 5.0);
        assert_eq!(skl.fma_latency_cycles, 4.0);
        assert_eq!(hsw.int8_dot, PerWidth::NONE);
        // Core i9-12900K P-core at 4.9 GHz with AVX-VNNI: 2 × 32 × 2 = 128 OP/cycle.
        let int8 = peak_gflops(&adl, Precision::Int8, ComputeMix::Fma, &AVX2, 4.9, 1);
        assert_close(int8, 627.2);
    }

    #[test]
    fn the_record_carries_the_licence_text() {
        let record = x86_core_model("GenuineIntel", 6, 0x55, Some(4)).record();
        assert!(record.licence_frequency.contains("L2"));
        assert_eq!(record.amx_bf16_flops_per_cycle, 0.0);
        let zen5 = x86_core_model("AuthenticAMD", 0x1a, 0x02, Some(0)).record();
        assert!(zen5
            .licence_frequency
            .contains("no per-ISA frequency offset"));
    }
}
