//! CPU identification in layers (CPUID through raw-cpuid, then sysfs and procfs, then stated
//! defaults), ISA detection for kernel dispatch (with whether the OS has enabled the AMX tile
//! state, which CPUID alone does not say), the cores this process may use (affinity mask and
//! cgroup CPU quota) and thread pinning.

use std::path::Path;

use crate::device::Precision;

use super::microarch::{self, CoreModel};
use super::record::{CacheInfo, CpuDescription, UsableCores};

/// ISA extensions that decide which kernels can run. Detected at run time, never from
/// `cfg(target_feature)`: the probe measures the machine it runs on, not the one it was built
/// for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IsaFlags {
    pub sse42: bool,
    pub avx: bool,
    pub avx2: bool,
    pub fma: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512vnni: bool,
    pub avx512bf16: bool,
    pub avx512fp16: bool,
    pub avxvnni: bool,
    pub amx_tile: bool,
    pub amx_bf16: bool,
    pub amx_int8: bool,
    /// Whether the OS lets processes use the AMX tiles (CPUID only says the hardware has them).
    pub amx_os: AmxOsSupport,
    pub neon: bool,
    pub arm_dotprod: bool,
    pub arm_bf16: bool,
    pub arm_fp16: bool,
    pub sve: bool,
}

impl IsaFlags {
    pub fn detect() -> IsaFlags {
        #[allow(unused_mut)]
        let mut flags = IsaFlags::default();
        #[cfg(target_arch = "x86_64")]
        {
            flags.sse42 = std::arch::is_x86_feature_detected!("sse4.2");
            flags.avx = std::arch::is_x86_feature_detected!("avx");
            flags.avx2 = std::arch::is_x86_feature_detected!("avx2");
            flags.fma = std::arch::is_x86_feature_detected!("fma");
            flags.avx512f = std::arch::is_x86_feature_detected!("avx512f");
            flags.avx512bw = std::arch::is_x86_feature_detected!("avx512bw");
            flags.avx512vl = std::arch::is_x86_feature_detected!("avx512vl");
            flags.avx512vnni = std::arch::is_x86_feature_detected!("avx512vnni");
            flags.avx512bf16 = std::arch::is_x86_feature_detected!("avx512bf16");
            flags.avx512fp16 = std::arch::is_x86_feature_detected!("avx512fp16");
            flags.avxvnni = std::arch::is_x86_feature_detected!("avxvnni");
            if let Some(ext) = raw_cpuid::CpuId::new().get_extended_feature_info() {
                // AMX also needs the OS to grant the tile state (arch_prctl); this only says
                // the hardware has it.
                flags.amx_tile = ext.has_amx_tile();
                flags.amx_bf16 = ext.has_amx_bf16();
                flags.amx_int8 = ext.has_amx_int8();
            }
            if flags.amx_tile {
                flags.amx_os = AmxOsSupport::detect();
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            flags.neon = std::arch::is_aarch64_feature_detected!("neon");
            flags.arm_dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
            flags.arm_bf16 = std::arch::is_aarch64_feature_detected!("bf16");
            flags.arm_fp16 = std::arch::is_aarch64_feature_detected!("fp16");
            flags.sve = std::arch::is_aarch64_feature_detected!("sve");
        }
        flags
    }

    pub fn names(&self) -> Vec<String> {
        let table = [
            (self.sse42, "SSE4.2"),
            (self.avx, "AVX"),
            (self.avx2, "AVX2"),
            (self.fma, "FMA"),
            (self.avx512f, "AVX-512F"),
            (self.avx512bw, "AVX-512BW"),
            (self.avx512vl, "AVX-512VL"),
            (self.avx512vnni, "AVX-512 VNNI"),
            (self.avx512bf16, "AVX-512 BF16"),
            (self.avx512fp16, "AVX-512 FP16"),
            (self.avxvnni, "AVX-VNNI"),
            (self.amx_tile, "AMX-TILE"),
            (self.amx_bf16, "AMX-BF16"),
            (self.amx_int8, "AMX-INT8"),
            (self.neon, "NEON"),
            (self.arm_dotprod, "dotprod"),
            (self.arm_bf16, "BF16"),
            (self.arm_fp16, "FP16"),
            (self.sve, "SVE"),
        ];
        table
            .iter()
            .filter(|(present, _)| *present)
            .map(|&(_, name)| match name {
                "AMX-TILE" => format!("{name} ({})", self.amx_os.label()),
                _ => name.to_string(),
            })
            .collect()
    }

    /// Vector widths at which the CPU can do `precision`'s FMA-type work, in bits.
    pub fn widths_for(&self, precision: Precision) -> Vec<u32> {
        let with_vl = |present: bool| -> Vec<u32> {
            match (present, self.avx512vl) {
                (false, _) => vec![],
                (true, true) => vec![128, 256, 512],
                (true, false) => vec![512],
            }
        };
        if cfg!(target_arch = "aarch64") {
            let present = match precision {
                Precision::Fp64 | Precision::Fp32 => self.neon,
                Precision::Bf16 => self.arm_bf16,
                Precision::Int8 => self.arm_dotprod,
                Precision::Fp16 => self.arm_fp16,
                Precision::Tf32 | Precision::Fp8 => false,
            };
            return if present { vec![128] } else { vec![] };
        }
        match precision {
            Precision::Fp64 | Precision::Fp32 => {
                let mut widths = Vec::new();
                if self.fma || self.avx512f {
                    widths.extend([128, 256]);
                }
                if self.avx512f {
                    widths.push(512);
                }
                widths
            }
            Precision::Bf16 => with_vl(self.avx512bf16),
            Precision::Fp16 => with_vl(self.avx512fp16),
            Precision::Int8 => {
                let mut widths = with_vl(self.avx512vnni);
                if self.avxvnni && widths.is_empty() {
                    widths = vec![128, 256];
                }
                widths
            }
            Precision::Tf32 | Precision::Fp8 => vec![],
        }
    }
}

/// XSAVE state components 17 (XTILECFG) and 18 (XTILEDATA): the AMX tile configuration and
/// the tile registers.
const XTILECFG: u64 = 1 << 17;
const XTILEDATA: u64 = 1 << 18;

/// Whether the OS lets a process use the AMX tiles. The CPUID flags only say the hardware has
/// them: the OS must also enable the tile state in XCR0, and Linux (5.16 and later) hands the
/// large tile-data state to a process only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), so
/// it reports which dynamic components it supports and which this process already holds. The
/// probe asks but never requests: it runs no AMX code. See the kernel's
/// Documentation/arch/x86/xstate.rst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmxOsSupport {
    /// XCR0 has both tile components set (read with `xgetbv` when CPUID says OSXSAVE).
    pub xcr0_tile_state: bool,
    /// XTILEDATA is among the kernel's supported dynamic components
    /// (`ARCH_GET_XCOMP_SUPP`); `None` off Linux or on kernels without the call.
    pub kernel_offers_tile_data: Option<bool>,
    /// This process already holds the tile-data permission (`ARCH_GET_XCOMP_PERM`).
    pub process_permitted: Option<bool>,
}

impl AmxOsSupport {
    /// Interprets the raw register and arch_prctl answers (`None` where one was unavailable).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Only x86 asks.
    pub fn from_raw(xcr0: Option<u64>, supported: Option<u64>, permitted: Option<u64>) -> Self {
        let tile_bits = XTILECFG | XTILEDATA;
        AmxOsSupport {
            xcr0_tile_state: xcr0.is_some_and(|x| x & tile_bits == tile_bits),
            kernel_offers_tile_data: supported.map(|mask| mask & XTILEDATA != 0),
            process_permitted: permitted.map(|mask| mask & XTILEDATA != 0),
        }
    }

    /// The tiles can be used once the process asks for them.
    pub fn enabled(&self) -> bool {
        self.xcr0_tile_state && self.kernel_offers_tile_data != Some(false)
    }

    /// Short label for the ISA list.
    pub fn label(&self) -> &'static str {
        if self.enabled() {
            "OS: enabled"
        } else {
            "OS: not enabled"
        }
    }

    /// One identification line saying what was asked and what it answered.
    pub fn describe(&self) -> String {
        let kernel = match self.kernel_offers_tile_data {
            Some(true) => "tile data offered by the kernel",
            Some(false) => "tile data not offered by the kernel",
            None => "kernel not asked",
        };
        let process = match self.process_permitted {
            Some(true) => "already permitted to this process",
            Some(false) => "not yet requested by this process",
            None => "process permission unknown",
        };
        format!(
            "AMX OS support: XCR0 tile state {} (xgetbv); {kernel} \
             (arch_prctl ARCH_GET_XCOMP_SUPP); {process} (ARCH_GET_XCOMP_PERM)",
            if self.xcr0_tile_state { "on" } else { "off" }
        )
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> AmxOsSupport {
        let (supported, permitted) = linux_xcomp_masks();
        AmxOsSupport::from_raw(read_xcr0(), supported, permitted)
    }
}

/// XCR0, where the OS has enabled `xgetbv` (CPUID OSXSAVE).
#[cfg(target_arch = "x86_64")]
fn read_xcr0() -> Option<u64> {
    #[target_feature(enable = "xsave")]
    unsafe fn xgetbv0() -> u64 {
        std::arch::x86_64::_xgetbv(0)
    }
    let osxsave = raw_cpuid::CpuId::new()
        .get_feature_info()
        .is_some_and(|info| info.has_oxsave());
    // SAFETY: OSXSAVE means the CPU has XSAVE and the OS set CR4.OSXSAVE, so xgetbv with
    // ECX = 0 does not fault.
    osxsave.then(|| unsafe { xgetbv0() })
}

/// The kernel's supported and this process's permitted dynamic XSAVE components.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn linux_xcomp_masks() -> (Option<u64>, Option<u64>) {
    // From arch/x86/include/uapi/asm/prctl.h.
    const ARCH_GET_XCOMP_SUPP: libc::c_long = 0x1021;
    const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
    let ask = |code: libc::c_long| {
        let mut mask: u64 = 0;
        // SAFETY: both codes only write one u64 through the pointer, which outlives the call;
        // older kernels fail with EINVAL and write nothing.
        let rc = unsafe { libc::syscall(libc::SYS_arch_prctl, code, &mut mask as *mut u64) };
        (rc == 0).then_some(mask)
    };
    (ask(ARCH_GET_XCOMP_SUPP), ask(ARCH_GET_XCOMP_PERM))
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn linux_xcomp_masks() -> (Option<u64>, Option<u64>) {
    (None, None)
}

/// Everything identification found out, for the record and for the rest of the probe.
#[derive(Clone, Debug)]
pub struct CpuInfo {
    pub description: CpuDescription,
    pub isa: IsaFlags,
    pub core_model: CoreModel,
}

/// Identifies the CPU. Never fails: what no layer can answer gets a stated default.
pub fn identify() -> CpuInfo {
    let isa = IsaFlags::detect();
    let mut description = CpuDescription {
        arch: std::env::consts::ARCH.to_string(),
        isa: isa.names(),
        ..CpuDescription::default()
    };
    #[cfg(target_arch = "x86_64")]
    let core_model = identify_x86(&mut description);
    #[cfg(target_arch = "aarch64")]
    let core_model = identify_arm(&mut description);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let core_model = microarch::unknown_core_model();
    if isa.amx_tile {
        description.identification.push(isa.amx_os.describe());
    }

    if description.model_name.is_empty() {
        if let Some(name) = proc_cpuinfo_field("model name") {
            description.model_name = name;
            description
                .identification
                .push("model name: /proc/cpuinfo".into());
        } else {
            description.model_name = "unknown CPU".into();
        }
    }
    fill_caches_from_sysfs(&mut description);
    fill_default_caches(&mut description);
    if description.base_clock_hz.is_none() {
        description.base_clock_hz = sysfs_base_clock_hz();
        if description.base_clock_hz.is_some() {
            description
                .identification
                .push("base clock: sysfs cpufreq".into());
        }
    }
    description.memory_bytes = physical_memory_bytes();

    description.microarchitecture = core_model.name.to_string();
    CpuInfo {
        description,
        isa,
        core_model,
    }
}

#[cfg(target_arch = "x86_64")]
fn identify_x86(description: &mut CpuDescription) -> CoreModel {
    use raw_cpuid::{CacheType, CpuId};

    let cpuid = CpuId::new();
    if let Some(vendor) = cpuid.get_vendor_info() {
        description.vendor = vendor.as_str().to_string();
    }
    if let Some(brand) = cpuid.get_processor_brand_string() {
        description.model_name = brand.as_str().trim().to_string();
    }
    if let Some(info) = cpuid.get_feature_info() {
        description.family = Some(u32::from(info.family_id()));
        description.model = Some(u32::from(info.model_id()));
        description.stepping = Some(u32::from(info.stepping_id()));
    }
    description
        .identification
        .push("vendor, model, family, ISA: cpuid".into());
    if let Some(hypervisor) = cpuid.get_hypervisor_info() {
        description.hypervisor = Some(format!("{:?}", hypervisor.identify()));
        if let Some(khz) = hypervisor.tsc_frequency().filter(|&khz| khz > 0) {
            description.tsc_hz = Some(f64::from(khz) * 1e3);
            description
                .identification
                .push("TSC rate: cpuid hypervisor leaf 0x40000010".into());
        }
    }
    if description.tsc_hz.is_none() {
        if let Some(hz) = cpuid
            .get_tsc_info()
            .and_then(|tsc| tsc.tsc_frequency())
            .filter(|&hz| hz > 0)
        {
            description.tsc_hz = Some(hz as f64);
            description
                .identification
                .push("TSC rate: cpuid leaf 0x15".into());
        }
    }
    if let Some(mhz) = cpuid
        .get_processor_frequency_info()
        .map(|f| f.processor_base_frequency())
        .filter(|&mhz| mhz > 0)
    {
        description.base_clock_hz = Some(f64::from(mhz) * 1e6);
        description
            .identification
            .push("base clock: cpuid leaf 0x16".into());
    }
    if let Some(caches) = cpuid.get_cache_parameters() {
        for cache in caches {
            let kind = match cache.cache_type() {
                CacheType::Data => "data",
                CacheType::Unified => "unified",
                _ => continue,
            };
            let size = cache.associativity()
                * cache.physical_line_partitions()
                * cache.coherency_line_size()
                * cache.sets();
            if size == 0 {
                continue;
            }
            description.caches.push(CacheInfo {
                level: cache.level(),
                kind: kind.to_string(),
                size_bytes: size as u64,
                shared_by_cpus: cache.max_cores_for_cache() as u32,
                line_bytes: cache.coherency_line_size() as u32,
                source: "cpuid".into(),
            });
        }
    }
    let row = microarch::x86_core_model(
        &description.vendor,
        description.family.unwrap_or(0),
        description.model.unwrap_or(0),
        description.stepping,
    );
    // Some Xeon SKUs of one model have one 512-bit FMA unit instead of two; only the brand
    // string tells them apart.
    microarch::refine_for_brand(row, &description.model_name)
}

#[cfg(target_arch = "aarch64")]
fn identify_arm(description: &mut CpuDescription) -> CoreModel {
    let parse_hex = |field: &str| {
        proc_cpuinfo_field(field)
            .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
    };
    let implementer = parse_hex("CPU implementer");
    let part = parse_hex("CPU part");
    description.family = implementer;
    description.model = part;
    description.vendor = match implementer {
        Some(0x41) => "Arm".into(),
        Some(0x61) => "Apple".into(),
        Some(other) => format!("implementer 0x{other:x}"),
        None => "unknown".into(),
    };
    description
        .identification
        .push("implementer, part: /proc/cpuinfo; ISA: HWCAP".into());
    microarch::arm_core_model(implementer.unwrap_or(0), part.unwrap_or(0))
}

fn proc_cpuinfo_field(field: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == field).then(|| value.trim().to_string())
    })
}

/// Second layer: sysfs fills cache levels CPUID did not describe, and gives the sharing counts
/// the OS sees (CPUID's sharing field is the largest number of IDs that *could* share, not the
/// CPUs that do, which differs in virtual machines).
fn fill_caches_from_sysfs(description: &mut CpuDescription) {
    let base = Path::new("/sys/devices/system/cpu/cpu0/cache");
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let mut sysfs_caches = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let kind = match read("type").as_deref().map(str::trim) {
            Some("Data") => "data",
            Some("Unified") => "unified",
            _ => continue,
        };
        let Some(level) = read("level").and_then(|v| v.trim().parse::<u8>().ok()) else {
            continue;
        };
        let Some(size) = read("size").and_then(|v| parse_sysfs_size(v.trim())) else {
            continue;
        };
        let shared = read("shared_cpu_list")
            .map(|v| parse_cpu_list(v.trim()).len() as u32)
            .filter(|&n| n > 0)
            .unwrap_or(1);
        let line = read("coherency_line_size")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(64);
        sysfs_caches.push(CacheInfo {
            level,
            kind: kind.to_string(),
            size_bytes: size,
            shared_by_cpus: shared,
            line_bytes: line,
            source: "sysfs".into(),
        });
    }
    for found in sysfs_caches {
        match description
            .caches
            .iter_mut()
            .find(|c| c.level == found.level && c.kind == found.kind)
        {
            Some(existing) => existing.shared_by_cpus = found.shared_by_cpus,
            None => description.caches.push(found),
        }
    }
    description.caches.sort_by_key(|c| c.level);
}

/// Third layer: levels neither CPUID nor sysfs described.
fn fill_default_caches(description: &mut CpuDescription) {
    // Typical of current server and desktop cores; said to be defaults in the output.
    let defaults = [
        (1u8, "data", 32 * 1024u64, 1u32),
        (2, "unified", 1024 * 1024, 1),
        (3, "unified", 8 * 1024 * 1024, u32::MAX),
    ];
    for (level, kind, size, shared) in defaults {
        if description.caches.iter().all(|c| c.level != level) {
            description.caches.push(CacheInfo {
                level,
                kind: kind.to_string(),
                size_bytes: size,
                shared_by_cpus: shared,
                line_bytes: 64,
                source: "default".into(),
            });
        }
    }
    description.caches.sort_by_key(|c| c.level);
}

fn parse_sysfs_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(split) => text.split_at(split),
        None => (text, ""),
    };
    let value: u64 = digits.parse().ok()?;
    let multiplier = match unit.trim() {
        "" => 1,
        "K" | "KiB" | "KB" => 1024,
        "M" | "MiB" | "MB" => 1024 * 1024,
        "G" | "GiB" | "GB" => 1024 * 1024 * 1024,
        _ => return None,
    };
    Some(value * multiplier)
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                if let (Ok(lo), Ok(hi)) = (lo.parse::<usize>(), hi.parse::<usize>()) {
                    cpus.extend(lo..=hi);
                }
            }
            None => {
                if let Ok(cpu) = part.parse() {
                    cpus.push(cpu);
                }
            }
        }
    }
    cpus
}

fn sysfs_base_clock_hz() -> Option<f64> {
    let base = Path::new("/sys/devices/system/cpu/cpu0/cpufreq");
    ["base_frequency", "cpuinfo_max_freq"]
        .iter()
        .find_map(|name| std::fs::read_to_string(base.join(name)).ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|khz| khz * 1e3)
}

fn physical_memory_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads system configuration values.
        let (pages, page_size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page_size > 0 {
            return Some(pages as u64 * page_size as u64);
        }
    }
    None
}

/// Cores this process may use: the affinity mask, cut down to the cgroup CPU quota.
pub fn usable_cores() -> UsableCores {
    let online = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|text| parse_cpu_list(text.trim()).len())
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(online);
    let affinity = affinity_cpus().unwrap_or_else(|| (0..online).collect());
    let quota = cgroup_cpu_quota();
    let mut usable = affinity.len().max(1);
    if let Some(cpus) = quota {
        usable = usable.min((cpus.ceil() as usize).max(1));
    }
    UsableCores {
        online_cpus: online,
        affinity_cpus: affinity,
        cgroup_quota_cpus: quota,
        usable,
        ..UsableCores::default()
    }
}

#[cfg(target_os = "linux")]
fn affinity_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect();
        (!cpus.is_empty()).then_some(cpus)
    }
}

#[cfg(not(target_os = "linux"))]
fn affinity_cpus() -> Option<Vec<usize>> {
    None
}

/// Pins the calling thread to one CPU. Returns whether it worked.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: cpu_set_t is plain data; `cpu` is below CPU_SETSIZE; pid 0 = calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpu: usize) -> bool {
    false
}

/// The CPU quota of this process's cgroup in CPUs (quota / period), if one is set. Looks at
/// cgroup v2 `cpu.max` and v1 `cpu.cfs_quota_us`, along the process's cgroup path and its
/// ancestors (a limit on any ancestor applies).
fn cgroup_cpu_quota() -> Option<f64> {
    let memberships = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut limits = Vec::new();
    for line in memberships.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            for dir in ancestors("/sys/fs/cgroup", path) {
                if let Some(cpus) = read_cpu_max(&dir.join("cpu.max")) {
                    limits.push(cpus);
                }
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            for mount in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
                for dir in ancestors(mount, path) {
                    if let Some(cpus) = read_cfs_quota(&dir) {
                        limits.push(cpus);
                    }
                }
            }
        }
    }
    limits.into_iter().reduce(f64::min)
}

fn ancestors(mount: &str, path: &str) -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    let mut current = Path::new(mount).join(path.trim_start_matches('/'));
    loop {
        dirs.push(current.clone());
        if current == Path::new(mount) || !current.pop() {
            break;
        }
    }
    dirs
}

fn read_cpu_max(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_cpu_max(&text)
}

/// `cpu.max` holds `max 100000` (no limit) or `200000 100000` (quota and period, in µs).
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period: f64 = fields.next()?.parse().ok()?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then_some(quota / period)
}

fn read_cfs_quota(dir: &Path) -> Option<f64> {
    let quota: f64 = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let period: f64 = std::fs::read_to_string(dir.join("cpu.cfs_period_us"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (quota > 0.0 && period > 0.0).then_some(quota / period)
}

/// Cache capacity the `threads` measuring threads reach together at each level: a per-core
/// cache counts once per thread, a shared one once per group of CPUs sharing it.
pub fn cache_guide(description: &CpuDescription, threads: usize) -> super::plateau::CacheGuide {
    use crate::device::MemoryLevel;
    let mut capacities = Vec::new();
    for cache in &description.caches {
        let level = match cache.level {
            1 => MemoryLevel::L1,
            2 => MemoryLevel::L2,
            3 => MemoryLevel::L3,
            _ => continue,
        };
        let shared = cache.shared_by_cpus.max(1) as usize;
        let instances = threads.div_ceil(shared).max(1);
        capacities.push((level, cache.size_bytes * instances as u64));
    }
    super::plateau::CacheGuide { capacities }
}

/// How many distinct physical cores the given CPUs sit on, from the kernel's topology
/// (`physical_package_id` and `core_id` in sysfs). SMT siblings share one core's FMA pipes, so
/// a team's compute roof scales with this count, not with the CPU count. A CPU whose topology
/// cannot be read counts as its own core (what a guest's vCPUs look like).
pub fn distinct_cores(cpus: &[usize]) -> usize {
    let read = |cpu: usize, field: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{field}"))
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
    };
    let mut cores: Vec<(i64, i64)> = Vec::with_capacity(cpus.len());
    let mut unknown = 0;
    for &cpu in cpus {
        match (read(cpu, "physical_package_id"), read(cpu, "core_id")) {
            (Some(package), Some(core)) => {
                if !cores.contains(&(package, core)) {
                    cores.push((package, core));
                }
            }
            _ => unknown += 1,
        }
    }
    cores.len() + unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smt_siblings_count_as_one_core() {
        assert_eq!(distinct_cores(&[]), 0);
        // A CPU the kernel does not describe counts as a core of its own.
        assert_eq!(distinct_cores(&[1 << 20, (1 << 20) + 1]), 2);
        // The same CPU twice is one core; never more cores than CPUs.
        assert_eq!(distinct_cores(&[0, 0]), 1);
        let online: Vec<usize> =
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        assert!((1..=online.len()).contains(&distinct_cores(&online)));
    }

    #[test]
    fn cpu_lists_and_sizes_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
        assert_eq!(parse_sysfs_size("32K"), Some(32 * 1024));
        assert_eq!(parse_sysfs_size("32768K"), Some(32 * 1024 * 1024));
        assert_eq!(parse_sysfs_size("1M"), Some(1024 * 1024));
        assert_eq!(parse_sysfs_size("lots"), None);
    }

    #[test]
    fn cgroup_quota_parses() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("garbage"), None);
    }

    #[test]
    fn amx_os_support_reads_xcr0_and_the_kernel_masks() {
        let tiles = XTILECFG | XTILEDATA;
        // AVX-512 state on (bits 0-2, 5-7) but no tile state: not enabled whatever the kernel.
        let no_tiles = AmxOsSupport::from_raw(Some(0xe7), Some(tiles), Some(0));
        assert!(!no_tiles.enabled());
        assert_eq!(no_tiles.label(), "OS: not enabled");
        // Tile state on, kernel offers tile data, not yet requested: usable on request.
        let on = AmxOsSupport::from_raw(Some(0xe7 | tiles), Some(tiles), Some(XTILECFG));
        assert!(on.enabled());
        assert_eq!(on.process_permitted, Some(false));
        assert!(on.describe().contains("XCR0 tile state on"));
        // A kernel that masks tile data out.
        let masked = AmxOsSupport::from_raw(Some(0xe7 | tiles), Some(XTILECFG), None);
        assert!(!masked.enabled());
        // Off Linux only XCR0 answers; without OSXSAVE nothing does.
        assert!(AmxOsSupport::from_raw(Some(tiles), None, None).enabled());
        assert!(!AmxOsSupport::from_raw(None, None, None).enabled());
        // Only XTILECFG is not enough.
        assert!(!AmxOsSupport::from_raw(Some(XTILECFG), Some(tiles), None).enabled());
    }

    #[test]
    fn the_isa_list_says_whether_the_os_enabled_amx() {
        let flags = IsaFlags {
            amx_tile: true,
            amx_bf16: true,
            amx_os: AmxOsSupport::from_raw(Some(XTILECFG | XTILEDATA), None, None),
            ..IsaFlags::default()
        };
        let names = flags.names();
        assert!(
            names.contains(&"AMX-TILE (OS: enabled)".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"AMX-BF16".to_string()));
        let hidden = IsaFlags {
            amx_tile: true,
            ..IsaFlags::default()
        };
        assert_eq!(
            hidden.names(),
            vec!["AMX-TILE (OS: not enabled)".to_string()]
        );
    }

    #[test]
    fn identification_never_fails_and_fills_three_cache_levels() {
        let info = identify();
        assert!(!info.description.model_name.is_empty());
        for level in 1..=3 {
            assert!(info.description.caches.iter().any(|c| c.level == level));
        }
        let cores = usable_cores();
        assert!(cores.usable >= 1);
    }
}
