//! Hardware performance counters (perf_event_open through perf-event2) to confirm the compute
//! kernels' instruction and FLOP counts. Many virtual machines expose no PMU: then the probe
//! says so once and carries on. Other operating systems than Linux have no perf_event: the
//! stubs at the end say so.

#[cfg(target_os = "linux")]
pub use linux::{availability, check_kernel};
#[cfg(not(target_os = "linux"))]
pub use other::{availability, check_kernel};

#[cfg(not(target_os = "linux"))]
mod other {
    use super::super::compute::ComputeKernel;
    use super::super::record::CounterCheck;

    pub fn availability() -> Result<(), String> {
        Err("hardware counters are only read on Linux (perf_event_open)".into())
    }

    pub fn check_kernel(
        _kernel: &ComputeKernel,
        _iterations: u64,
        _vendor: &str,
        _family: u32,
    ) -> Result<CounterCheck, String> {
        availability().map(|_| CounterCheck::default())
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use perf_event::events::{Hardware, Raw};
    use perf_event::{Builder, Counter};

    use super::super::compute::ComputeKernel;
    use super::super::record::CounterCheck;

    /// Tries to open and read an instruction counter on the calling thread.
    pub fn availability() -> Result<(), String> {
        let mut counter = open(Hardware::INSTRUCTIONS)?;
        counter
            .enable()
            .and_then(|_| counter.disable())
            .and_then(|_| counter.read())
            .map(|_| ())
            .map_err(|error| describe("reading the instruction counter", &error))
    }

    fn open<E: perf_event::events::Event>(event: E) -> Result<Counter, String> {
        Builder::new(event)
            .build()
            .map_err(|error| describe("perf_event_open", &error))
    }

    fn describe(what: &str, error: &std::io::Error) -> String {
        let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .map(|v| format!(", perf_event_paranoid = {}", v.trim()))
            .unwrap_or_default();
        format!("{what}: {error}{paranoid}")
    }

    /// A retired-FP-operations event for this CPU, and the factor turning its count into FLOP.
    struct FpEvent {
        raw: Raw,
        name: String,
        flops_per_count: f64,
    }

    fn fp_event(vendor: &str, family: u32, kernel: &ComputeKernel) -> Result<FpEvent, String> {
        use crate::device::Precision;
        if !matches!(kernel.precision, Precision::Fp64 | Precision::Fp32) || kernel.fallback {
            return Err("no FP event checked for this kernel".into());
        }
        match (vendor, family) {
            // AMD Family 17h-1Ah PPRs: PMCx003 "Retired SSE/AVX FLOPs", unit mask bits
            // add/sub, multiply, divide/sqrt, multiply-accumulate (an FMA lane counts 2).
            ("AuthenticAMD", 0x17..=0x1a) => Ok(FpEvent {
                raw: Raw::new(0x03 | (0x0f << 8)),
                name: "AMD PMCx003 retired SSE/AVX FLOPs (umask 0x0f)".into(),
                flops_per_count: 1.0,
            }),
            // Intel SDM vol. 3B: FP_ARITH_INST_RETIRED (event 0xC7) counts instructions by width
            // and precision; an FMA counts twice. Unit mask picks the width of this kernel.
            ("GenuineIntel", 6) => {
                let double = kernel.precision == Precision::Fp64;
                let umask: u64 = match (kernel.vector_bits, double) {
                    (512, true) => 0x40,
                    (512, false) => 0x80,
                    (256, true) => 0x10,
                    (256, false) => 0x20,
                    (128, true) => 0x04,
                    _ => 0x08,
                };
                let lanes = f64::from(kernel.vector_bits / if double { 64 } else { 32 });
                Ok(FpEvent {
                    raw: Raw::new(0xc7 | (umask << 8)),
                    name: format!(
                        "Intel FP_ARITH_INST_RETIRED (umask 0x{umask:02x}) × {lanes} lanes"
                    ),
                    flops_per_count: lanes,
                })
            }
            _ => Err(format!(
                "no retired-FLOP event known for {vendor} family {family:#x}"
            )),
        }
    }

    /// Counts instructions (and FP operations where known) over `iterations` of `kernel` on the
    /// calling thread.
    pub fn check_kernel(
        kernel: &ComputeKernel,
        iterations: u64,
        vendor: &str,
        family: u32,
    ) -> Result<CounterCheck, String> {
        let mut instructions = open(Hardware::INSTRUCTIONS)?;
        let mut fp = fp_event(vendor, family, kernel)
            .and_then(|event| open(event.raw).map(|counter| (counter, event)));
        let mut run = || -> std::io::Result<(u64, Option<u64>)> {
            instructions.reset()?;
            if let Ok((counter, _)) = fp.as_mut() {
                counter.reset()?;
                counter.enable()?;
            }
            instructions.enable()?;
            kernel.run(iterations);
            instructions.disable()?;
            let fp_count = match fp.as_mut() {
                Ok((counter, _)) => {
                    counter.disable()?;
                    Some(counter.read()?)
                }
                Err(_) => None,
            };
            Ok((instructions.read()?, fp_count))
        };
        let (counted_instructions, fp_count) =
            run().map_err(|error| describe("reading counters", &error))?;
        let (fp_ops, expected_fp_ops, fp_event) = match (&fp, fp_count) {
            (Ok((_, event)), Some(count)) => (
                Some((count as f64 * event.flops_per_count) as u64),
                Some((kernel.flops_per_iteration * iterations as f64) as u64),
                event.name.clone(),
            ),
            (Err(reason), _) => (None, None, reason.clone()),
            (Ok((_, event)), None) => (None, None, event.name.clone()),
        };
        Ok(CounterCheck {
            kernel: kernel.id.to_string(),
            instructions: counted_instructions,
            expected_instructions: kernel.instructions_per_iteration * iterations,
            fp_ops,
            expected_fp_ops,
            fp_event,
        })
    }
}
