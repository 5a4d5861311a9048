//! Bandwidth kernels (read, write, copy, triad; non-temporal variants for DRAM) and the
//! working-set sweep.
//!
//! The x86 kernels are inline assembly: every pass walks every array once, with one vector
//! load or store per 64 (or 32) bytes written out in the loop body, so the bytes counted are
//! the bytes the instructions move. A compiler cannot merge two passes into one, which is a
//! known way C roofline kernels built with -O3 report twice the real bandwidth. Bytes counted
//! are explicit loads plus stores; write-allocate traffic is not counted (as STREAM and
//! likwid-bench count). The portable fallback is plain Rust with `black_box` between passes.
//!
//! Main memory is also measured without a sweep: every line of a buffer is flushed from every
//! cache level (`CacheFlush`) before one timed pass, so the pass reads (or writes) DRAM however
//! large the caches are, or are reported to be.

use std::sync::Mutex;

use super::buffer::AlignedBuffer;
use super::cpu::IsaFlags;
use super::record::BandwidthKernel;

/// Gap between arrays in a buffer. Without it, arrays whose size is a multiple of 4 KiB would
/// put a load and an older store at the same address bits and suffer 4K-aliasing stalls.
const ARRAY_GAP: usize = 1024;
/// Arrays are a multiple of one unrolled loop body (8 × 64 bytes).
pub const ARRAY_GRANULE: usize = 512;
/// The triad's scalar and the value written by the write kernels.
static TRIAD_SCALAR: f64 = 0.5;

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! Register use: rdi = a (destination), rsi = b, rdx = c, rcx = bytes per array (the read
    //! and write kernels: rdi, rsi, rdx, rax = the array's quarters, rcx = bytes per quarter),
    //! r8 = passes, r9 = offset, r10 = &scalar. Vector registers 0-7 carry data, 15 the scalar.

    macro_rules! write_lines {
        ($store:literal, $w:literal; $($o:literal),*) => {
            concat!($($store, " [rdi + r9 + ", $o, "], ", $w, "15\n"),*)
        };
    }
    macro_rules! copy_lines {
        ($load:literal, $store:literal, $w:literal; $($r:literal $o:literal),*) => {
            concat!($(
                $load, " ", $w, $r, ", [rsi + r9 + ", $o, "]\n",
                $store, " [rdi + r9 + ", $o, "], ", $w, $r, "\n"
            ),*)
        };
    }
    macro_rules! triad_lines {
        ($load:literal, $store:literal, $w:literal; $($r:literal $o:literal),*) => {
            concat!($(
                $load, " ", $w, $r, ", [rsi + r9 + ", $o, "]\n",
                "vfmadd231pd ", $w, $r, ", ", $w, "15, [rdx + r9 + ", $o, "]\n",
                $store, " [rdi + r9 + ", $o, "], ", $w, $r, "\n"
            ),*)
        };
    }

    /// The read and write kernels' set-up: rdi, rsi, rdx and rax point at the array's four
    /// quarters and rcx holds a quarter's bytes, so the body walks four sequential streams,
    /// `$step` bytes of each per iteration (two lines on zmm, one on ymm). A single stream leaves the
    /// core's prefetchers one line sequence to run ahead on, too few misses in flight to reach
    /// the rate of the shared cache and main memory. On Zen 1 (1 thread) the one-stream kernels
    /// gave L3 reads 53 GB/s, DRAM reads 15.7 and DRAM writes 8.5, these 62, 22.4 and 13.6,
    /// and GEMVs over 2-8 MiB of weights (several rows at once) had beaten bounds drawn from
    /// the one-stream figures by 9-27%. The quarters are multiples of 128 bytes (arrays are
    /// multiples of 512).
    macro_rules! quarters {
        () => {
            "shr rcx, 2\nlea rsi, [rdi + rcx]\nlea rdx, [rsi + rcx]\nlea rax, [rdx + rcx]\n"
        };
    }
    /// Plain loads into registers, no arithmetic on them. With a `vpaddq` folding each load
    /// into an accumulator (the adds take the 512-bit ALU ports two per cycle, as many as the
    /// loads, and any stall costs a load slot), an Emerald Rapids core read its L1 at
    /// 275-284 GB/s and with plain loads at 355-373 (a C loop of this body over 16-40 KiB;
    /// likwid-bench `load_avx512` 337-343); L2 137 and 145, DRAM 16.0 and 16.3 (session 45).
    /// The probe's L1 read roof went from 285 to 377 GB/s. The core performs every load
    /// whether or not its value is used, and the assembly cannot be removed by a compiler.
    macro_rules! read_streams {
        ($w:literal; $($r:literal $base:literal $o:literal),*) => {
            concat!($("vmovapd ", $w, $r, ", [", $base, " + r9 + ", $o, "]\n"),*)
        };
    }
    macro_rules! write_streams {
        ($w:literal; $($base:literal $o:literal),*) => {
            concat!($("vmovapd [", $base, " + r9 + ", $o, "], ", $w, "15\n"),*)
        };
    }

    /// One pass loop around `$body`, which handles `$step` bytes of each array (of each
    /// quarter after the [`quarters`] set-up).
    macro_rules! bw_kernel {
        ($name:ident, $feature:literal, $w:literal, $step:literal, $setup:expr, $tail:literal,
         $body:expr) => {
            #[target_feature(enable = $feature)]
            pub(super) unsafe fn $name(
                a: *mut u8,
                b: *const u8,
                c: *const u8,
                bytes: usize,
                passes: u64,
            ) {
                // SAFETY (for the caller): needs `$feature`; `a`, `b`, `c` valid for `bytes`
                // bytes (those the kernel uses), 64-byte aligned, `bytes` a non-zero multiple
                // of 512; the general registers written are outputs, the vector ones clobbered
                // through the C ABI.
                unsafe {
                    std::arch::asm!(
                        concat!("vbroadcastsd ", $w, "15, qword ptr [r10]"),
                        $setup,
                        "2:",
                        "xor r9d, r9d",
                        "3:",
                        $body,
                        concat!("add r9, ", $step),
                        "cmp r9, rcx",
                        "jb 3b",
                        "dec r8",
                        "jnz 2b",
                        $tail,
                        // The quarters' set-up moves rsi, rdx and rcx and writes rax, so
                        // they are outputs here: `clobber_abi` alone would not cover rsi (nor
                        // rdi) where the C ABI saves them for the caller (Win64).
                        inout("rdi") a => _,
                        inout("rsi") b => _,
                        inout("rdx") c => _,
                        inout("rcx") bytes => _,
                        out("rax") _,
                        inout("r8") passes.max(1) => _,
                        out("r9") _,
                        in("r10") &super::TRIAD_SCALAR,
                        clobber_abi("C"),
                        options(nostack),
                    );
                }
            }
        };
    }

    bw_kernel!(
        read_zmm,
        "avx512f",
        "zmm",
        "128",
        quarters!(),
        "",
        read_streams!("zmm"; "0" "rdi" "0", "1" "rdi" "64", "2" "rsi" "0", "3" "rsi" "64",
                             "4" "rdx" "0", "5" "rdx" "64", "6" "rax" "0", "7" "rax" "64")
    );
    bw_kernel!(
        write_zmm,
        "avx512f",
        "zmm",
        "128",
        quarters!(),
        "",
        write_streams!("zmm"; "rdi" "0", "rdi" "64", "rsi" "0", "rsi" "64",
                              "rdx" "0", "rdx" "64", "rax" "0", "rax" "64")
    );
    bw_kernel!(
        write_nt_zmm,
        "avx512f",
        "zmm",
        "512",
        "",
        "sfence",
        write_lines!("vmovntpd", "zmm"; "0", "64", "128", "192", "256", "320", "384", "448")
    );
    bw_kernel!(
        copy_zmm,
        "avx512f",
        "zmm",
        "512",
        "",
        "",
        copy_lines!("vmovapd", "vmovapd", "zmm"; "0" "0", "1" "64", "2" "128", "3" "192",
                                                 "4" "256", "5" "320", "6" "384", "7" "448")
    );
    bw_kernel!(
        copy_nt_zmm,
        "avx512f",
        "zmm",
        "512",
        "",
        "sfence",
        copy_lines!("vmovapd", "vmovntpd", "zmm"; "0" "0", "1" "64", "2" "128", "3" "192",
                                                  "4" "256", "5" "320", "6" "384", "7" "448")
    );
    bw_kernel!(
        triad_zmm,
        "avx512f",
        "zmm",
        "512",
        "",
        "",
        triad_lines!("vmovapd", "vmovapd", "zmm"; "0" "0", "1" "64", "2" "128", "3" "192",
                                                  "4" "256", "5" "320", "6" "384", "7" "448")
    );
    bw_kernel!(
        triad_nt_zmm,
        "avx512f",
        "zmm",
        "512",
        "",
        "sfence",
        triad_lines!("vmovapd", "vmovntpd", "zmm"; "0" "0", "1" "64", "2" "128", "3" "192",
                                                   "4" "256", "5" "320", "6" "384", "7" "448")
    );

    bw_kernel!(
        read_ymm,
        "avx2",
        "ymm",
        "64",
        quarters!(),
        "",
        read_streams!("ymm"; "0" "rdi" "0", "1" "rdi" "32", "2" "rsi" "0", "3" "rsi" "32",
                             "4" "rdx" "0", "5" "rdx" "32", "6" "rax" "0", "7" "rax" "32")
    );
    bw_kernel!(
        write_ymm,
        "avx2",
        "ymm",
        "64",
        quarters!(),
        "",
        write_streams!("ymm"; "rdi" "0", "rdi" "32", "rsi" "0", "rsi" "32",
                              "rdx" "0", "rdx" "32", "rax" "0", "rax" "32")
    );
    bw_kernel!(
        write_nt_ymm,
        "avx2",
        "ymm",
        "256",
        "",
        "sfence",
        write_lines!("vmovntpd", "ymm"; "0", "32", "64", "96", "128", "160", "192", "224")
    );
    bw_kernel!(
        copy_ymm,
        "avx2",
        "ymm",
        "256",
        "",
        "",
        copy_lines!("vmovapd", "vmovapd", "ymm"; "0" "0", "1" "32", "2" "64", "3" "96",
                                                 "4" "128", "5" "160", "6" "192", "7" "224")
    );
    bw_kernel!(
        copy_nt_ymm,
        "avx2",
        "ymm",
        "256",
        "",
        "sfence",
        copy_lines!("vmovapd", "vmovntpd", "ymm"; "0" "0", "1" "32", "2" "64", "3" "96",
                                                  "4" "128", "5" "160", "6" "192", "7" "224")
    );
    bw_kernel!(
        triad_ymm,
        "avx2,fma",
        "ymm",
        "256",
        "",
        "",
        triad_lines!("vmovapd", "vmovapd", "ymm"; "0" "0", "1" "32", "2" "64", "3" "96",
                                                  "4" "128", "5" "160", "6" "192", "7" "224")
    );
    bw_kernel!(
        triad_nt_ymm,
        "avx2,fma",
        "ymm",
        "256",
        "",
        "sfence",
        triad_lines!("vmovapd", "vmovntpd", "ymm"; "0" "0", "1" "32", "2" "64", "3" "96",
                                                   "4" "128", "5" "160", "6" "192", "7" "224")
    );
}

type NativeKernel = unsafe fn(*mut u8, *const u8, *const u8, usize, u64);

/// Bytes evicted by one flush instruction: the x86 cache line.
const FLUSH_LINE: usize = 64;

/// An instruction that writes a line back and evicts it from every cache level of the
/// coherence domain, shared caches and other cores' included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheFlush {
    /// `clflushopt`: flushes of different lines overlap.
    ClflushOpt,
    /// `clflush` (every x86-64 CPU): ordered, slower; the flush itself is not timed.
    Clflush,
}

impl CacheFlush {
    /// The flush this CPU has; `None` off x86, where only the sweep finds main memory.
    pub fn detect() -> Option<CacheFlush> {
        #[cfg(target_arch = "x86_64")]
        {
            let optimised = raw_cpuid::CpuId::new()
                .get_extended_feature_info()
                .is_some_and(|ext| ext.has_clflushopt());
            Some(if optimised {
                CacheFlush::ClflushOpt
            } else {
                CacheFlush::Clflush
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheFlush::ClflushOpt => "clflushopt",
            CacheFlush::Clflush => "clflush",
        }
    }

    /// Flushes every line of `bytes` bytes from `ptr`, then fences, so no line is in any cache
    /// and every dirty line has reached memory when it returns.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` must be mapped memory of this process.
    unsafe fn flush(self, ptr: *const u8, bytes: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_clflush, _mm_mfence};
            for offset in (0..bytes).step_by(FLUSH_LINE) {
                // SAFETY: inside the range the caller vouches for; both instructions only
                // touch the cache state of the line.
                unsafe {
                    let line = ptr.add(offset);
                    match self {
                        CacheFlush::ClflushOpt => std::arch::asm!(
                            "clflushopt [{line}]",
                            line = in(reg) line,
                            options(nostack, preserves_flags)
                        ),
                        CacheFlush::Clflush => _mm_clflush(line),
                    }
                }
            }
            // clflushopt is ordered only by a fence; mfence also waits for the write-backs.
            // SAFETY: a fence has no memory operands.
            unsafe { _mm_mfence() };
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (ptr, bytes);
        }
    }
}

/// The bandwidth kernels this CPU runs, chosen once.
#[derive(Clone, Copy, Debug)]
pub struct BandwidthKernels {
    pub isa: &'static str,
    native: Option<[NativeKernel; 7]>,
    /// How to empty the caches before a flushed pass; `None` where the CPU cannot.
    pub flush: Option<CacheFlush>,
}

impl BandwidthKernels {
    pub fn select(isa: &IsaFlags) -> BandwidthKernels {
        #[cfg(target_arch = "x86_64")]
        {
            if isa.avx512f {
                return BandwidthKernels {
                    flush: CacheFlush::detect(),
                    isa: "AVX-512F",
                    native: Some([
                        x86::read_zmm,
                        x86::write_zmm,
                        x86::copy_zmm,
                        x86::triad_zmm,
                        x86::write_nt_zmm,
                        x86::copy_nt_zmm,
                        x86::triad_nt_zmm,
                    ]),
                };
            }
            if isa.avx2 && isa.fma {
                return BandwidthKernels {
                    flush: CacheFlush::detect(),
                    isa: "AVX2",
                    native: Some([
                        x86::read_ymm,
                        x86::write_ymm,
                        x86::copy_ymm,
                        x86::triad_ymm,
                        x86::write_nt_ymm,
                        x86::copy_nt_ymm,
                        x86::triad_nt_ymm,
                    ]),
                };
            }
        }
        let _ = isa;
        BandwidthKernels {
            isa: "portable",
            native: None,
            flush: CacheFlush::detect(),
        }
    }

    /// Whether `kernel` exists here (the portable fallback has no non-temporal stores).
    pub fn has(&self, kernel: BandwidthKernel) -> bool {
        self.native.is_some() || !kernel.non_temporal()
    }

    /// Runs `passes` passes of `kernel` over arrays of `bytes_per_array` bytes laid out in
    /// `buffer`. Returns false if the buffer is too small or the kernel is not available.
    pub fn run(
        &self,
        kernel: BandwidthKernel,
        buffer: &mut AlignedBuffer,
        bytes_per_array: usize,
        passes: u64,
    ) -> bool {
        if bytes_per_array == 0
            || !bytes_per_array.is_multiple_of(ARRAY_GRANULE)
            || buffer_bytes_needed(kernel, bytes_per_array) > buffer.faulted()
            || !self.has(kernel)
        {
            return false;
        }
        let base = buffer.as_mut_ptr();
        let stride = bytes_per_array + ARRAY_GAP;
        // SAFETY: the arrays lie inside the buffer (checked above) and start at multiples of
        // 64 bytes from a page-aligned base (stride is a multiple of 64).
        let (a, b, c) = unsafe { (base, base.add(stride), base.add(2 * stride)) };
        match self.native {
            Some(table) => {
                let index = BandwidthKernel::ALL
                    .iter()
                    .position(|k| *k == kernel)
                    .unwrap_or(0);
                // SAFETY: `native` is only set after the ISA was detected; arrays valid and
                // aligned as checked; bytes a non-zero multiple of 512.
                unsafe { table[index](a, b, c, bytes_per_array, passes) };
            }
            None => {
                // SAFETY: as above; the three ranges do not overlap (gaps between arrays).
                unsafe { portable(kernel, a, b, c, bytes_per_array, passes) }
            }
        }
        true
    }
}

impl BandwidthKernels {
    /// Evicts the arrays `kernel` uses (as `run` lays them out) from every cache level.
    /// Returns false where there is no flush instruction or the buffer is too small.
    pub fn flush_arrays(
        &self,
        kernel: BandwidthKernel,
        buffer: &mut AlignedBuffer,
        bytes_per_array: usize,
    ) -> bool {
        let Some(flush) = self.flush else {
            return false;
        };
        let bytes = buffer_bytes_needed(kernel, bytes_per_array);
        if bytes > buffer.faulted() {
            return false;
        }
        // SAFETY: the range lies inside the buffer's pre-faulted prefix.
        unsafe { flush.flush(buffer.as_mut_ptr(), bytes) };
        true
    }
}

/// Buffer bytes a kernel needs for arrays of `bytes_per_array`.
pub fn buffer_bytes_needed(kernel: BandwidthKernel, bytes_per_array: usize) -> usize {
    kernel.arrays() * (bytes_per_array + ARRAY_GAP)
}

/// Per-array bytes for a per-thread working set: split evenly, rounded down to the granule.
pub fn bytes_per_array(kernel: BandwidthKernel, working_set_per_thread: usize) -> usize {
    let per_array = working_set_per_thread / kernel.arrays();
    (per_array / ARRAY_GRANULE * ARRAY_GRANULE).max(ARRAY_GRANULE)
}

/// Portable versions. `black_box` on the arrays between passes stops the compiler from fusing
/// passes or dropping stores nobody reads.
///
/// # Safety
/// `a`, `b`, `c` must be valid, 8-byte aligned and non-overlapping for `bytes` bytes each
/// (those the kernel uses).
unsafe fn portable(
    kernel: BandwidthKernel,
    a: *mut u8,
    b: *const u8,
    c: *const u8,
    bytes: usize,
    passes: u64,
) {
    let words = bytes / 8;
    // SAFETY: guaranteed by the caller.
    let (a, b, c) = unsafe {
        (
            std::slice::from_raw_parts_mut(a.cast::<f64>(), words),
            std::slice::from_raw_parts(b.cast::<f64>(), words),
            std::slice::from_raw_parts(c.cast::<f64>(), words),
        )
    };
    for _ in 0..passes {
        match kernel {
            BandwidthKernel::Read => {
                let a = std::hint::black_box(&*a);
                let sum = a.iter().fold(0u64, |acc, x| acc.wrapping_add(x.to_bits()));
                std::hint::black_box(sum);
            }
            BandwidthKernel::Write | BandwidthKernel::WriteNt => {
                a.fill(std::hint::black_box(TRIAD_SCALAR));
                std::hint::black_box(&mut *a);
            }
            BandwidthKernel::Copy | BandwidthKernel::CopyNt => {
                a.copy_from_slice(std::hint::black_box(b));
                std::hint::black_box(&mut *a);
            }
            BandwidthKernel::Triad | BandwidthKernel::TriadNt => {
                let scalar = std::hint::black_box(TRIAD_SCALAR);
                for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
                    *x = y + scalar * z;
                }
                std::hint::black_box(&mut *a);
            }
        }
    }
}

/// One buffer per measuring thread, each locked only by its own thread.
pub struct ThreadBuffers {
    pub buffers: Vec<Mutex<AlignedBuffer>>,
}

impl ThreadBuffers {
    pub fn new(threads: usize, bytes_each: usize) -> Result<ThreadBuffers, super::ProbeError> {
        let buffers = (0..threads)
            .map(|_| AlignedBuffer::new(bytes_each).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ThreadBuffers { buffers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kernel moves the data it claims: after a copy the destination equals the source,
    /// after a triad a = b + 0.5·c, after a write every element is the scalar.
    #[test]
    fn kernels_compute_what_they_count() {
        let isa = IsaFlags::detect();
        let kernels = BandwidthKernels::select(&isa);
        // One loop iteration per quarter (the smallest array) and several.
        for bytes in [ARRAY_GRANULE, 4 * ARRAY_GRANULE] {
            let total = buffer_bytes_needed(BandwidthKernel::Triad, bytes);
            let mut buffer = AlignedBuffer::new(total).expect("allocates");
            buffer.prefault();
            let stride = bytes + ARRAY_GAP;
            let words = bytes / 8;
            let word = |buffer: &mut AlignedBuffer, byte: usize| -> f64 {
                // SAFETY: inside the buffer, aligned.
                unsafe { *buffer.as_mut_ptr().add(byte).cast::<f64>() }
            };
            for kernel in BandwidthKernel::ALL {
                if !kernels.has(kernel) {
                    continue;
                }
                // Arrays 0, 1, 2 hold 0 + i, 10 + i, 100 + i; the gaps hold -1.
                for byte in (0..total).step_by(8) {
                    let (array, offset) = (byte / stride, byte % stride);
                    let value = if offset < bytes {
                        [0.0, 10.0, 100.0][array] + (offset / 8) as f64
                    } else {
                        -1.0
                    };
                    // SAFETY: inside the buffer, aligned.
                    unsafe { *buffer.as_mut_ptr().add(byte).cast::<f64>() = value };
                }
                assert!(kernels.run(kernel, &mut buffer, bytes, 2));
                // Every element: the read and write kernels split the array into four streams.
                for i in 0..words {
                    let a = word(&mut buffer, 8 * i);
                    let expected = match kernel {
                        BandwidthKernel::Read => i as f64,
                        BandwidthKernel::Write | BandwidthKernel::WriteNt => TRIAD_SCALAR,
                        BandwidthKernel::Copy | BandwidthKernel::CopyNt => 10.0 + i as f64,
                        BandwidthKernel::Triad | BandwidthKernel::TriadNt => {
                            10.0 + i as f64 + TRIAD_SCALAR * (100.0 + i as f64)
                        }
                    };
                    assert_eq!(a, expected, "{} element {i} of {bytes} B", kernel.name());
                }
                // Nothing past the destination array is written: gaps and sources intact.
                for byte in (bytes..total).step_by(8) {
                    let (array, offset) = (byte / stride, byte % stride);
                    let expected = if offset < bytes {
                        [0.0, 10.0, 100.0][array] + (offset / 8) as f64
                    } else {
                        -1.0
                    };
                    assert_eq!(
                        word(&mut buffer, byte),
                        expected,
                        "{} wrote byte {byte} of a {bytes}-byte array's buffer",
                        kernel.name()
                    );
                }
            }
        }
        let mut buffer = AlignedBuffer::new(buffer_bytes_needed(BandwidthKernel::Triad, 4096))
            .expect("allocates");
        buffer.prefault();
        // Misuse is refused, not executed.
        assert!(!kernels.run(BandwidthKernel::Read, &mut buffer, 100, 1));
        assert!(!kernels.run(BandwidthKernel::Triad, &mut buffer, 1 << 20, 1));
    }

    /// A flush leaves the data as it was (it only evicts), and a flushed pass still computes.
    #[test]
    fn flushing_keeps_the_data() {
        let kernels = BandwidthKernels::select(&IsaFlags::detect());
        let bytes = 64 * ARRAY_GRANULE;
        let mut buffer = AlignedBuffer::new(buffer_bytes_needed(BandwidthKernel::Copy, bytes))
            .expect("allocates");
        buffer.prefault();
        assert!(kernels.run(BandwidthKernel::Write, &mut buffer, bytes, 1));
        let flushed = kernels.flush_arrays(BandwidthKernel::Copy, &mut buffer, bytes);
        assert_eq!(flushed, kernels.flush.is_some());
        // SAFETY: inside the buffer, aligned.
        let first = unsafe { *buffer.as_mut_ptr().cast::<f64>() };
        assert_eq!(first, TRIAD_SCALAR);
        assert!(kernels.run(BandwidthKernel::Read, &mut buffer, bytes, 1));
        // Refused when the arrays are larger than the buffer.
        assert!(!kernels.flush_arrays(BandwidthKernel::Triad, &mut buffer, bytes));
    }

    #[test]
    fn arrays_split_the_working_set() {
        assert_eq!(
            bytes_per_array(BandwidthKernel::Triad, 48 * 1024),
            16 * 1024
        );
        assert_eq!(bytes_per_array(BandwidthKernel::Copy, 1000), ARRAY_GRANULE);
        assert_eq!(bytes_per_array(BandwidthKernel::Read, 4096), 4096);
    }
}
