//! The default cache blocking of each ISA, sized for this machine's caches. Each ISA table's
//! blocking (`isa.rs`) was measured best on one machine ([`TUNED_FOR`]); on another machine the
//! blocks that live in a cache level are scaled by the ratio of that level's size to the tuned
//! machine's, so they fill the same share of it (the BLIS analytical model's rule: each block is
//! a fixed fraction of the level it is kept in). An Intel core with 2 MiB of L2 gets twice the
//! A block of a 1 MiB Zen core; a client core with 8 MiB of L3 a quarter of the B block.

use std::sync::OnceLock;

use super::Blocking;

/// The cache sizes a blocking is derived for, in bytes: one core's L2 and one L3 instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizes {
    pub l2_bytes: u64,
    pub l3_bytes: Option<u64>,
}

/// The machine the ISA tables' blockings were measured on: EPYC Zen 4 (family 25 model 17),
/// 1 MiB L2 per core, 32 MiB L3.
pub const TUNED_FOR: CacheSizes = CacheSizes {
    l2_bytes: 1 << 20,
    l3_bytes: Some(32 << 20),
};

/// How far a derived block may move from the tuned one (either way): past this the tuned
/// point says little about the machine, and the autotuner (`--tune`) is the better judge.
const MAX_SCALE: f64 = 2.0;

/// `tuned` (an ISA table's blocking) re-sized for `caches`, rounded to the `(mr, nr)` tile.
///
/// - `mc` (the A block, `mc × kc`, kept in L2) and `nc_short` (the B block of problems whose
///   rows fit one A block, packed and consumed while in L2) scale with the L2 size;
/// - `nc` (the `kc × nc` B block shared through L3) shrinks with a smaller L3 but never grows:
///   virtual machines report the whole socket's L3 (260 MiB on one Xeon guest), of which a
///   core gets a fraction;
/// - `kc` stays: it sets how long one micro-panel of B streams through L1 and L2 per C update,
///   a trade-off measured per microkernel, not a capacity.
pub fn for_caches(tuned: Blocking, (mr, nr): (usize, usize), caches: CacheSizes) -> Blocking {
    let scale = |value: usize, ratio: f64, multiple: usize| -> usize {
        let ratio = ratio.clamp(1.0 / MAX_SCALE, MAX_SCALE);
        let scaled = (value as f64 * ratio / multiple as f64).round() as usize * multiple;
        scaled.max(multiple)
    };
    let l2_ratio = caches.l2_bytes as f64 / TUNED_FOR.l2_bytes as f64;
    let l3_ratio = match (caches.l3_bytes, TUNED_FOR.l3_bytes) {
        (Some(have), Some(tuned)) => (have as f64 / tuned as f64).min(1.0),
        _ => 1.0,
    };
    Blocking {
        mc: scale(tuned.mc, l2_ratio, mr),
        kc: tuned.kc,
        nc: scale(tuned.nc, l3_ratio, nr),
        nc_short: scale(tuned.nc_short, l2_ratio, nr),
    }
}

/// The caches the default blocking is sized for, once stated ([`use_caches`]).
static CACHES: OnceLock<Option<CacheSizes>> = OnceLock::new();

/// States this machine's per-core L2 and L3 instance sizes (`None`: unknown, keep the tuned
/// blockings). The kernels identify nothing themselves: the executor passes what the CPU
/// identification found before it plans (`exec::plan`). The first call wins; blockings taken
/// before it are the tuned ones.
pub fn use_caches(caches: Option<CacheSizes>) {
    let _ = CACHES.set(caches);
}

/// The caches stated with [`use_caches`], if any.
pub fn stated_caches() -> Option<CacheSizes> {
    CACHES.get().copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVX512_TUNED: Blocking = Blocking {
        mc: 240,
        kc: 512,
        nc: 4096,
        nc_short: 256,
    };

    fn sized(l2_kib: u64, l3_mib: Option<u64>) -> Blocking {
        let caches = CacheSizes {
            l2_bytes: l2_kib << 10,
            l3_bytes: l3_mib.map(|mib| mib << 20),
        };
        for_caches(AVX512_TUNED, (12, 32), caches)
    }

    /// Hand-derived: the tuned machine keeps its blocking; 2 MiB of L2 (Sapphire Rapids)
    /// doubles the L2 blocks (A block 480 × 512 × 4 B = 960 KiB, 47% of L2 as on Zen 4); a
    /// 260 MiB L3 (a VM's socket figure) leaves nc alone; 1.25 MiB (Ice Lake-SP) gives
    /// 240 × 1.25 = 300 rows (25 tiles of 12) and 320 columns; 512 KiB (Zen 3) halves them;
    /// 256 KiB (Skylake client) is held at half; a 16 MiB L3 halves nc to 2048 columns.
    #[test]
    fn blocks_scale_with_the_level_they_live_in() {
        assert_eq!(sized(1024, Some(32)), AVX512_TUNED);
        let sapphire = sized(2048, Some(260));
        assert_eq!((sapphire.mc, sapphire.nc_short), (480, 512));
        assert_eq!((sapphire.kc, sapphire.nc), (512, 4096));
        let ice = sized(1280, Some(48));
        assert_eq!((ice.mc, ice.nc_short, ice.nc), (300, 320, 4096));
        let zen3 = sized(512, Some(32));
        assert_eq!((zen3.mc, zen3.nc_short), (120, 128));
        let client = sized(256, Some(16));
        assert_eq!((client.mc, client.nc_short, client.nc), (120, 128, 2048));
        assert_eq!(sized(1024, None), AVX512_TUNED);
    }

    /// Every derived block is a whole number of tiles and at least one.
    #[test]
    fn derived_blocks_are_whole_tiles() {
        for l2_kib in [64, 256, 384, 1000, 1280, 2048, 3072, 8192] {
            for l3_mib in [None, Some(2), Some(6), Some(30), Some(260)] {
                let blocking = sized(l2_kib, l3_mib);
                assert_eq!(blocking.mc % 12, 0);
                assert!(blocking.mc >= 12);
                assert_eq!(blocking.nc % 32, 0);
                assert_eq!(blocking.nc_short % 32, 0);
                assert!(blocking.nc <= AVX512_TUNED.nc);
            }
        }
    }
}
