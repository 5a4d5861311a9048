//! What a probe run measured, kept verbatim in the device profile (`DeviceProfile::probe`). It
//! lives with the profile, not the probe, so that reading a profile never needs the probe.
//!
//! Plain serde data only: every figure names its precision or memory level and its thread
//! count, and carries its spread and flags, so a saved profile can be audited without re-running
//! the probe. Fields are added, never repurposed (see `PROFILE_SCHEMA_VERSION`).

use serde::{Deserialize, Serialize};

use crate::device::{MemoryLevel, Precision};

/// Details of a probe run (CPU description, clocks, sweeps). Plain data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Version of the tool that measured.
    pub tool_version: String,
    /// RFC 3339 date of the measurement (UTC).
    pub measured_at: String,
    /// `quick` or `full`.
    #[serde(default)]
    pub mode: String,
    /// Wall time of the whole probe, in seconds.
    #[serde(default)]
    pub wall_time_s: f64,
    /// Where the wall time went.
    #[serde(default)]
    pub phases: Vec<PhaseTime>,
    #[serde(default)]
    pub cpu: CpuDescription,
    #[serde(default)]
    pub cores: UsableCores,
    #[serde(default)]
    pub clock: ClockRecord,
    /// The per-microarchitecture throughput table entry the theoretical peaks come from.
    #[serde(default)]
    pub core_model: CoreModelRecord,
    #[serde(default)]
    pub theoretical: Vec<TheoreticalPeak>,
    #[serde(default)]
    pub compute: Vec<ComputeMeasurement>,
    /// Working-set sweeps, one per bandwidth kernel and thread count.
    #[serde(default)]
    pub sweeps: Vec<BandwidthSweep>,
    /// Bandwidth per memory level, kernel and thread count, read off the sweeps' plateaus (or,
    /// for main memory, measured over a buffer flushed from the caches; see `dram`).
    #[serde(default)]
    pub memory_levels: Vec<LevelBandwidth>,
    /// Per thread count: how main memory was told apart from cache, and which method gave the
    /// DRAM figures.
    #[serde(default)]
    pub dram: Vec<DramCheck>,
    #[serde(default)]
    pub dispatch: DispatchRecord,
    #[serde(default)]
    pub counters: CounterReport,
    #[serde(default)]
    pub gpus: GpuReport,
    /// Problems found while measuring (noisy figures, figures above theory, missing data).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Wall time of one step of the probe.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    pub phase: String,
    pub seconds: f64,
}

/// What the CPU says it is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuDescription {
    /// `x86_64`, `aarch64`, ...
    pub arch: String,
    pub vendor: String,
    pub model_name: String,
    /// Display family / model / stepping (x86), or implementer / part (aarch64).
    pub family: Option<u32>,
    pub model: Option<u32>,
    pub stepping: Option<u32>,
    /// Microarchitecture the throughput table matched (`AMD Zen 4`, ...).
    pub microarchitecture: String,
    /// Hypervisor named by CPUID, when running in a virtual machine.
    pub hypervisor: Option<String>,
    /// ISA extensions present and enabled by the OS, by their usual names.
    pub isa: Vec<String>,
    pub caches: Vec<CacheInfo>,
    /// Main memory size in bytes.
    pub memory_bytes: Option<u64>,
    /// Nominal base clock, where the CPU or the OS exposes it.
    pub base_clock_hz: Option<f64>,
    /// Time-stamp counter rate (CPUID, else measured against the monotonic clock).
    pub tsc_hz: Option<f64>,
    /// Which layers answered: `cpuid`, `sysfs`, `default` (per field in `caches`).
    pub identification: Vec<String>,
}

/// One data or unified cache level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheInfo {
    pub level: u8,
    /// `data` or `unified`.
    pub kind: String,
    /// Size of one instance, in bytes.
    pub size_bytes: u64,
    /// Logical CPUs sharing one instance.
    pub shared_by_cpus: u32,
    pub line_bytes: u32,
    /// `cpuid`, `sysfs` or `default`.
    pub source: String,
}

/// How many cores this process may use, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsableCores {
    /// Logical CPUs the OS reports online.
    pub online_cpus: usize,
    /// CPUs in this process's affinity mask.
    pub affinity_cpus: Vec<usize>,
    /// CPU quota of the cgroup (`cpu.max` or `cpu.cfs_quota_us`), in CPUs; `None` = unlimited.
    pub cgroup_quota_cpus: Option<f64>,
    /// min(affinity, ceil(quota)).
    pub usable: usize,
    /// Threads used for the all-threads figures (`--threads` or `usable`).
    pub threads_used: usize,
    /// CPUs the measuring threads were pinned to, in order.
    pub pinned_cpus: Vec<usize>,
    /// Whether pinning succeeded for every measuring thread.
    pub pinned: bool,
}

/// Sustained core clock from a chain of dependent integer adds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockRecord {
    pub method: String,
    /// One thread alone.
    pub single_thread: Option<ClockStats>,
    /// Every measuring thread at once, one entry per thread.
    pub all_threads: Vec<ClockStats>,
    pub base_clock_hz: Option<f64>,
    pub tsc_hz: Option<f64>,
}

/// Clock samples of one thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockStats {
    pub cpu: usize,
    pub min_hz: f64,
    pub median_hz: f64,
    pub max_hz: f64,
    pub samples: u32,
}

/// The throughput assumptions behind the theoretical peaks, as printed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreModelRecord {
    pub name: String,
    /// Instructions per cycle per core at 128/256/512-bit width, by operation class.
    pub fma_per_cycle: [f64; 3],
    pub fadd_per_cycle: [f64; 3],
    pub bf16_dot_per_cycle: [f64; 3],
    pub int8_dot_per_cycle: [f64; 3],
    pub fp16_fma_per_cycle: [f64; 3],
    pub fma_latency_cycles: f64,
    pub assumption: String,
    pub source: String,
    /// What heavy 256-/512-bit code is documented to do to the clock on this core (licence
    /// levels, or none), with its source: the expectation next to the measured vector clock.
    #[serde(default)]
    pub licence_frequency: String,
    /// AMX tile throughput per core (bf16 FLOP, int8 OP per cycle) where the core has AMX.
    /// Documentation only: no AMX kernel measures it and it is never a roof.
    #[serde(default)]
    pub amx_bf16_flops_per_cycle: f64,
    #[serde(default)]
    pub amx_int8_ops_per_cycle: f64,
}

/// Whether a compute figure uses FMA (or dot) instructions only, or FMAs mixed with the
/// separate FP adders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMix {
    /// FMA (or dot-product) instructions only: what GEMM and convolutions can use.
    #[default]
    Fma,
    /// FMAs on the FMA pipes plus additions on the separate adder pipes.
    FmaAdd,
}

impl ComputeMix {
    pub fn name(self) -> &'static str {
        match self {
            ComputeMix::Fma => "FMA",
            ComputeMix::FmaAdd => "FMA+ADD",
        }
    }
}

/// Theoretical peak: instructions per cycle × FLOP per instruction × clock × threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TheoreticalPeak {
    pub precision: Precision,
    pub mix: ComputeMix,
    pub threads: u32,
    /// Vector width the peak is reached at.
    pub vector_bits: u32,
    /// FLOP (OP for int8) per cycle per core.
    pub flops_per_cycle: f64,
    /// Sum over threads of each thread's sustained clock.
    pub clock_hz_sum: f64,
    pub flops_per_s: f64,
    /// How the figure was derived, in words.
    pub derivation: String,
}

/// Best of N and the scatter of the samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleStats {
    pub best: f64,
    pub median: f64,
    pub worst: f64,
    /// (best − median) / best.
    pub spread: f64,
    pub samples: u32,
    /// Extra sample rounds taken because the first round was noisy.
    pub reruns: u32,
}

/// Problems attached to a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasurementFlag {
    /// Spread stayed above the threshold after re-running.
    Noisy,
    /// Measured above its theoretical peak: a bug in the kernel's count or the model.
    AboveTheoretical,
    /// A memory level whose figure comes from the cache-size guide, not a detected plateau.
    NotDetected,
    /// The largest working set may be too small for a main-memory figure.
    SweepTooShort,
    /// Portable fallback kernel: far below the hardware's peak by construction.
    Fallback,
    /// The threads together reached less than 75% of the sum of their separate best rates:
    /// they seldom ran at full speed at the same time (other work on the cores).
    Contended,
}

/// One compute kernel at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeMeasurement {
    pub precision: Precision,
    pub mix: ComputeMix,
    pub threads: u32,
    /// Kernel id and what it executes.
    pub kernel: String,
    pub isa: String,
    pub vector_bits: u32,
    pub independent_chains: u32,
    /// FLOP/s (OP/s for int8): all threads together, best sample.
    pub flops_per_s: f64,
    pub stats: SampleStats,
    /// Each thread's best rate on its own clock, for scaling and its spread.
    pub per_thread_flops_per_s: Vec<f64>,
    /// Each thread's sustained clock, measured right before and after this kernel's samples
    /// (fastest sample); the theoretical peak below uses these clocks.
    #[serde(default)]
    pub clock_hz_per_thread: Vec<f64>,
    /// How that clock was measured (empty in profiles written before it was recorded).
    #[serde(default)]
    pub clock_method: String,
    pub theoretical_flops_per_s: Option<f64>,
    pub fraction_of_theoretical: Option<f64>,
    pub flags: Vec<MeasurementFlag>,
}

/// Bandwidth kernels; bytes counted are the explicit loads and stores (no write-allocate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BandwidthKernel {
    /// Every vector of a buffer loaded into registers (loads only).
    #[default]
    Read,
    /// Fill a buffer (stores only).
    Write,
    /// a[i] = b[i].
    Copy,
    /// a[i] = b[i] + s·c[i].
    Triad,
    /// Write with non-temporal stores.
    WriteNt,
    /// Copy with non-temporal stores.
    CopyNt,
    /// Triad with non-temporal stores.
    TriadNt,
}

impl BandwidthKernel {
    pub const ALL: [BandwidthKernel; 7] = [
        BandwidthKernel::Read,
        BandwidthKernel::Write,
        BandwidthKernel::Copy,
        BandwidthKernel::Triad,
        BandwidthKernel::WriteNt,
        BandwidthKernel::CopyNt,
        BandwidthKernel::TriadNt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BandwidthKernel::Read => "read",
            BandwidthKernel::Write => "write",
            BandwidthKernel::Copy => "copy",
            BandwidthKernel::Triad => "triad",
            BandwidthKernel::WriteNt => "write-nt",
            BandwidthKernel::CopyNt => "copy-nt",
            BandwidthKernel::TriadNt => "triad-nt",
        }
    }

    /// Arrays the kernel touches; the working set is split evenly between them.
    pub fn arrays(self) -> usize {
        match self {
            BandwidthKernel::Read | BandwidthKernel::Write | BandwidthKernel::WriteNt => 1,
            BandwidthKernel::Copy | BandwidthKernel::CopyNt => 2,
            BandwidthKernel::Triad | BandwidthKernel::TriadNt => 3,
        }
    }

    /// Non-temporal stores bypass the caches, so these kernels only mean something for DRAM.
    pub fn non_temporal(self) -> bool {
        matches!(
            self,
            BandwidthKernel::WriteNt | BandwidthKernel::CopyNt | BandwidthKernel::TriadNt
        )
    }
}

/// One point of a working-set sweep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// All threads' arrays together, in bytes.
    pub working_set_bytes: u64,
    /// Loads + stores per second, all threads, best sample.
    pub bytes_per_s: f64,
    pub spread: f64,
    pub noisy: bool,
    /// See `MeasurementFlag::Contended`.
    #[serde(default)]
    pub contended: bool,
}

/// A flat stretch of a bandwidth curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plateau {
    /// Index of the first and last sweep point in the plateau.
    pub first_point: usize,
    pub last_point: usize,
    pub working_set_lo_bytes: u64,
    pub working_set_hi_bytes: u64,
    /// Median of the plateau's points.
    pub bytes_per_s: f64,
    /// Best point of the plateau.
    pub max_bytes_per_s: f64,
    /// Level assigned with the cache sizes as a guide; `None` when it matched none.
    pub level: Option<MemoryLevel>,
}

/// A working-set sweep of one kernel at one thread count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BandwidthSweep {
    pub kernel: BandwidthKernel,
    pub threads: u32,
    pub isa: String,
    pub points: Vec<SweepPoint>,
    pub plateaus: Vec<Plateau>,
}

/// How a bandwidth figure was obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureMethod {
    /// Read off a working-set sweep: a plateau, or points where the sweep found one.
    #[default]
    Sweep,
    /// One pass over a buffer whose every line was flushed from every cache level right before
    /// it (x86 `clflushopt`/`clflush`): main memory whatever the caches' size.
    Flushed,
}

impl FigureMethod {
    pub fn name(self) -> &'static str {
        match self {
            FigureMethod::Sweep => "sweep plateau",
            FigureMethod::Flushed => "flushed buffer",
        }
    }
}

/// Bandwidth of one memory level for one kernel and thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelBandwidth {
    pub level: MemoryLevel,
    pub kernel: BandwidthKernel,
    pub threads: u32,
    pub bytes_per_s: f64,
    /// Working sets the figure was taken at (the plateau's extent, or one point).
    pub working_set_lo_bytes: u64,
    pub working_set_hi_bytes: u64,
    pub spread: f64,
    pub flags: Vec<MeasurementFlag>,
    #[serde(default)]
    pub method: FigureMethod,
}

/// How main memory was found at one thread count. The sweep's last plateau is main memory
/// only if it is no faster than reading a buffer flushed from every cache (within
/// `tolerance`): a faster one is cache the CPU does not report, however large the working set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DramCheck {
    pub threads: u32,
    /// The flush instruction (`clflushopt`, `clflush`); empty where none exists (non-x86), and
    /// the sweep alone names main memory, by the cache sizes.
    pub flush: String,
    /// All threads' flushed buffers together, in bytes.
    pub flushed_bytes: u64,
    /// Read and write (ordinary stores) kernels over the flushed buffers, best sample.
    pub flushed_read_bytes_per_s: Option<f64>,
    pub flushed_write_bytes_per_s: Option<f64>,
    /// The read sweep's last plateau and its working sets, when it has one past the caches.
    pub sweep_plateau_bytes_per_s: Option<f64>,
    pub sweep_plateau_lo_bytes: Option<u64>,
    pub sweep_plateau_hi_bytes: Option<u64>,
    /// Largest working set the read sweep reached, all threads.
    pub sweep_largest_bytes: u64,
    /// Largest plateau/flushed ratio still counted as main memory, minus one.
    pub tolerance: f64,
    /// Which method gave the DRAM figures of this thread count.
    pub method: FigureMethod,
    /// The decision in words.
    pub verdict: String,
}

/// Per-op dispatch cost on this CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DispatchRecord {
    /// Handing an empty job to the pinned worker threads and waiting for all of them, with
    /// spinning workers (a runtime's thread pool between ops), in seconds (median).
    pub spin_fork_join_s: Option<f64>,
    /// The same with sleeping workers woken by the OS (futex), in seconds (median).
    pub parked_fork_join_s: Option<f64>,
    /// One indirect call to an empty op on one thread, in seconds.
    pub call_s: f64,
    pub threads: u32,
    /// Which figure became `launch_overhead_s`, and why.
    pub chosen: String,
    /// Data exchange between the threads' cores (`probe::exchange`); absent with one thread,
    /// in profiles probed before it was measured, or when a vCPU was taken away meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangeRecord>,
}

/// How fast the cores of a multi-thread run exchange data: the slowest of the pairs measured
/// (the first CPU with the others).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExchangeRecord {
    /// A cache line written by one core and answered by the other, round trip in seconds
    /// (median).
    pub round_trip_s: f64,
    /// One core reading `buffer_bytes` the other has just written, GB/s (median, the slower
    /// direction).
    pub read_gbs: f64,
    /// The pair with the longest round trip.
    pub slowest_pair: Vec<usize>,
    pub buffer_bytes: u64,
    pub pairs: usize,
    /// Per-thread rate of an FMA block run on both CPUs at once ÷ run on each alone (the
    /// lowest over threads and pairs): about 1 on separate physical cores, about 0.5 when the
    /// two threads share one core (SMT siblings). `None` when not measured (older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_share: Option<f64>,
}

impl ExchangeRecord {
    /// A record of one pair with these figures (tests).
    #[cfg(test)]
    pub fn with_figures(round_trip_ns: f64, read_gbs: f64) -> ExchangeRecord {
        ExchangeRecord {
            round_trip_s: round_trip_ns * 1e-9,
            read_gbs,
            slowest_pair: vec![0, 1],
            buffer_bytes: 128 * 1024,
            pairs: 1,
            compute_share: None,
        }
    }

    /// Whether the threads shared one physical core's vector units during the check (SMT
    /// siblings): their compute-bound work runs at about half the rate of two cores, however
    /// fast they exchange data.
    pub fn shares_a_core(&self) -> bool {
        self.compute_share
            .is_some_and(|share| share < SHARED_CORE_BELOW)
    }

    /// How much slower this exchange is than `reference`: the geometric mean of the
    /// round-trip ratio and the read-rate ratio (1 = the same placement). A single round trip
    /// wanders by up to 1.8× between quiet checks on a shared host, the read rate by 10%; the
    /// mean of the two stays under 1.5 there and reaches 4 when the host puts the vCPUs in
    /// different core complexes (Zen 4 guest: 60 → 350 ns, 70 → 25 GB/s).
    pub fn slowdown_against(&self, reference: &ExchangeRecord) -> f64 {
        let trip = self.round_trip_s / reference.round_trip_s.max(1e-12);
        let read = reference.read_gbs / self.read_gbs.max(1e-12);
        (trip * read).sqrt()
    }
}

/// Per-thread compute share (`ExchangeRecord::compute_share`) under which two threads are said
/// to share one core: two cores measure 0.95-1.0 (a noisy host 0.85), SMT siblings 0.5-0.6.
pub const SHARED_CORE_BELOW: f64 = 0.75;

/// Hardware performance counters during the compute kernels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterReport {
    pub available: bool,
    /// Why the counters could not be used, when they could not.
    pub unavailable_reason: Option<String>,
    pub checks: Vec<CounterCheck>,
}

/// Counted events of one single-thread compute kernel run next to the expected counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterCheck {
    pub kernel: String,
    pub instructions: u64,
    pub expected_instructions: u64,
    /// Retired floating-point operations where the PMU exposes such an event.
    pub fp_ops: Option<u64>,
    pub expected_fp_ops: Option<u64>,
    /// The event used for `fp_ops`, or why none was.
    pub fp_event: String,
}

/// NVIDIA GPUs seen through NVML.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    pub driver_found: bool,
    /// One line: the driver version, or why no driver was found.
    pub message: String,
    pub devices: Vec<GpuInfo>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub sm_clock_mhz: Option<u32>,
    pub max_sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub memory_bus_width_bits: Option<u32>,
    pub memory_bytes: Option<u64>,
    /// 2 (double data rate) × memory clock × bus width / 8.
    pub theoretical_bandwidth_bytes_per_s: Option<f64>,
    /// Catalogue entry matched by name, and its datasheet peaks.
    pub catalog_id: Option<String>,
    pub catalog_peaks: Vec<CatalogPeak>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogPeak {
    pub precision: Precision,
    pub flops_per_s: f64,
}
