//! Run-time ISA selection for the plain-Rust kernels: the same loop body is compiled three times
//! (AVX-512, AVX2+FMA, baseline) with `#[target_feature]`, so LLVM vectorises it for each ISA,
//! and the variant is chosen once per process from `is_x86_feature_detected!`.

use std::sync::OnceLock;

/// Instruction-set level of the auto-vectorised kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IsaLevel {
    Scalar,
    Avx2,
    Avx512,
}

impl IsaLevel {
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Scalar => "scalar",
            IsaLevel::Avx2 => "avx2+fma",
            IsaLevel::Avx512 => "avx512",
        }
    }
}

static DETECTED: OnceLock<IsaLevel> = OnceLock::new();

/// The best level this CPU supports, capped by `ROOFLINE_ISA=scalar|avx2|avx512` when set (to
/// compare variants end to end). Detected once per process.
pub fn isa_level() -> IsaLevel {
    *DETECTED.get_or_init(|| {
        let detected = detect();
        let cap = match std::env::var("ROOFLINE_ISA").as_deref() {
            Ok("scalar") => IsaLevel::Scalar,
            Ok("avx2") => IsaLevel::Avx2,
            _ => IsaLevel::Avx512,
        };
        detected.min(cap)
    })
}

fn detect() -> IsaLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
        {
            return IsaLevel::Avx512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return IsaLevel::Avx2;
        }
    }
    IsaLevel::Scalar
}

/// Defines `fn $name(args)` whose `$body` is compiled per ISA and dispatched on the detected
/// level, plus `$name::at(level, args)` to run one variant explicitly (the per-ISA test suites).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $name::at($crate::kernels::simd::isa_level(), $($arg),*)
        }

        #[allow(dead_code, clippy::too_many_arguments)]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            /// Runs the variant for `level`, falling back to the best one the CPU supports.
            pub fn at(level: $crate::kernels::simd::IsaLevel, $($arg: $ty),*) $(-> $ret)? {
                let level = level.min($crate::kernels::simd::isa_level());
                match level {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `level` never exceeds what the CPU reported.
                    $crate::kernels::simd::IsaLevel::Avx512 => unsafe { avx512($($arg),*) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above, AVX2 and FMA are present.
                    $crate::kernels::simd::IsaLevel::Avx2 => unsafe { avx2($($arg),*) },
                    _ => body($($arg),*),
                }
            }
        }
    };
}

pub(crate) use multiversion;

/// Every level this CPU can run, lowest first (for per-ISA test suites).
pub fn available_levels() -> Vec<IsaLevel> {
    [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512]
        .into_iter()
        .filter(|&l| l <= isa_level())
        .collect()
}

/// Lanes `i` of a 16-float load starting at column `first` that fall inside `0..width`: the
/// mask of a masked load over a row's edges (the depthwise rows kernel, the wide pools).
#[inline(always)]
pub fn lanes_inside(first: isize, width: usize) -> u16 {
    let lo = (-first).clamp(0, 16) as u32;
    let hi = (width as isize - first).clamp(0, 16) as u32;
    if hi <= lo {
        return 0;
    }
    let upto = if hi == 16 { u32::MAX } else { (1u32 << hi) - 1 };
    (upto & !((1u32 << lo) - 1)) as u16
}
