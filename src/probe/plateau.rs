//! Plateau detection on a bandwidth-versus-working-set curve, and labelling of the plateaus
//! with memory levels.
//!
//! Detection looks only at the data: a plateau is a run of consecutive sweep points whose
//! bandwidths stay inside a relative band. The cache sizes from CPU identification are used
//! afterwards, as a guide to *name* each plateau (L1, L2, L3, DRAM); they never create one.
//!
//! The read sweep's plateaus are named first; the other kernels' (write, copy, triad) take the
//! level of the read plateau they overlap most (`label_plateaus_like`).
//!
//! Main memory is named by bandwidth where the probe could measure it apart from the sweep
//! (`label_plateaus_flushed`: reading a buffer flushed from every cache): the curve's last
//! plateau is DRAM when it is no faster than that figure (within `DRAM_TOLERANCE`), wherever
//! it starts, and never when it is faster, however far past the reported last-level cache it
//! lies. Reported cache sizes are wrong in both directions in virtual machines (a guest that
//! reports the whole socket's 260 MiB L3; vCPUs that reach several dies' L3). Without that
//! figure (no flush instruction), a plateau is named DRAM only when it lies beyond the
//! last-level cache, so a sweep that stops too early reports no DRAM plateau instead of
//! calling the L3 plateau "DRAM".

use crate::device::MemoryLevel;

use super::record::Plateau;

/// One measured point: working set (all threads) and bandwidth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    pub working_set_bytes: u64,
    pub bytes_per_s: f64,
}

/// How flat "flat" is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlateauSettings {
    /// Largest max/min ratio inside a plateau, minus one (0.2 = points within ±10%).
    pub band: f64,
    /// Fewest points a plateau may have.
    pub min_points: usize,
    /// Fewest points of a plateau that ends the curve: the sweep stopped there (at its size or
    /// time limit), and two flat points at the end are the best evidence there is.
    pub min_points_at_end: usize,
}

impl Default for PlateauSettings {
    fn default() -> Self {
        // ±10%: transitions between cache levels are steps of 1.5× or more, while the noise
        // of a best-of-N figure on a shared machine stays within a few percent.
        PlateauSettings {
            band: 0.2,
            min_points: 3,
            min_points_at_end: 2,
        }
    }
}

/// Finds the flat runs of `points` (sorted by working set). A single point that leaves the
/// band while the next one comes back is treated as an outlier: it stays inside the run's
/// extent but not in its statistics, so one noisy sample cannot split a plateau.
pub fn detect_plateaus(points: &[CurvePoint], settings: &PlateauSettings) -> Vec<Plateau> {
    let valid = |p: &CurvePoint| p.bytes_per_s.is_finite() && p.bytes_per_s > 0.0;
    let mut plateaus = Vec::new();
    let mut start = 0;
    while start < points.len() {
        if !valid(&points[start]) {
            start += 1;
            continue;
        }
        let mut members = vec![start];
        let (mut low, mut high) = (points[start].bytes_per_s, points[start].bytes_per_s);
        let mut end = start;
        let mut next = start + 1;
        while next < points.len() {
            let value = points[next].bytes_per_s;
            if valid(&points[next]) && fits(low, high, value, settings.band) {
                members.push(next);
                low = low.min(value);
                high = high.max(value);
                end = next;
                next += 1;
                continue;
            }
            // Outlier tolerance: skip one point if the following one is back inside the band.
            let after = next + 1;
            if after < points.len()
                && valid(&points[after])
                && fits(low, high, points[after].bytes_per_s, settings.band)
                && members.len() >= 2
            {
                next = after;
                continue;
            }
            break;
        }
        let at_end = end + 1 == points.len();
        if members.len() >= settings.min_points
            || (at_end && members.len() >= settings.min_points_at_end.max(1))
        {
            plateaus.push(summarise(points, &members, start, end));
            start = end + 1;
        } else {
            start += 1;
        }
    }
    plateaus
}

fn fits(low: f64, high: f64, value: f64, band: f64) -> bool {
    let new_low = low.min(value);
    let new_high = high.max(value);
    new_high <= new_low * (1.0 + band)
}

fn summarise(points: &[CurvePoint], members: &[usize], first: usize, last: usize) -> Plateau {
    let mut values: Vec<f64> = members.iter().map(|&i| points[i].bytes_per_s).collect();
    values.sort_by(f64::total_cmp);
    Plateau {
        first_point: first,
        last_point: last,
        working_set_lo_bytes: points[first].working_set_bytes,
        working_set_hi_bytes: points[last].working_set_bytes,
        bytes_per_s: median_sorted(&values),
        max_bytes_per_s: values.last().copied().unwrap_or(0.0),
        level: None,
    }
}

pub(crate) fn median_sorted(values: &[f64]) -> f64 {
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => 0.5 * (values[n / 2 - 1] + values[n / 2]),
    }
}

/// Cache capacities reachable by the measuring threads together (per-core levels multiplied
/// by the thread count, shared levels counted once), innermost first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheGuide {
    pub capacities: Vec<(MemoryLevel, u64)>,
}

/// Names each plateau after the cache level its geometric centre fits in; where two plateaus
/// claim one cache level, the one with more points keeps it. Main memory is the outermost
/// level, so DRAM is the *last* plateau lying wholly past the last-level cache: a plateau
/// between that cache and DRAM (cache the CPU does not report, as in virtual machines whose
/// vCPUs sit on different dies) stays unnamed. Without cache sizes the plateaus are named in
/// order (first L1, last DRAM).
pub fn label_plateaus(plateaus: &mut [Plateau], guide: &CacheGuide) {
    label(plateaus, guide, None);
}

/// How much faster than the flushed-read figure a plateau may be and still be main memory,
/// as a fraction: a sweep plateau is the median of many best-of-N points in steady state, the
/// flushed figure one cold pass per sample, and the two differ by a few percent to ~10% on
/// the machines tried; a cache level is faster than memory by 1.5× or more.
pub const DRAM_TOLERANCE: f64 = 0.2;

/// Labels the plateaus knowing main memory's read bandwidth, `flushed_read` (a buffer flushed
/// from every cache before each pass). The last plateau is DRAM when it is at most
/// `1 + DRAM_TOLERANCE` times that figure, starts past the second-to-last cache level and
/// follows a faster plateau; no other plateau is DRAM. Cache levels are named as
/// `label_plateaus` names them, among the other plateaus. Returns the DRAM plateau's index.
pub fn label_plateaus_flushed(
    plateaus: &mut [Plateau],
    guide: &CacheGuide,
    flushed_read: f64,
) -> Option<usize> {
    let limit = flushed_read * (1.0 + DRAM_TOLERANCE);
    // Memory lies past L2 at least: an inner level's capacity is not in doubt the way a
    // VM's shared L3 is.
    let inner = guide
        .capacities
        .iter()
        .rev()
        .nth(1)
        .map(|&(_, bytes)| bytes)
        .unwrap_or(0);
    let dram = plateaus.len().checked_sub(1).filter(|&last| {
        let plateau = &plateaus[last];
        plateau.bytes_per_s <= limit
            && plateau.working_set_lo_bytes > inner
            && plateaus[..last].iter().any(|p| p.bytes_per_s > limit)
    });
    label(plateaus, guide, Some(dram));
    dram
}

/// Labels another kernel's plateaus after the read sweep's labelled `read` plateaus: each
/// plateau takes the level of the read plateau its working sets overlap most (on a log scale),
/// and where several claim one level the largest overlap keeps it. The read sweep is the
/// only one judged against flushed memory, so it alone decides which working sets are main
/// memory and which are cache the CPU does not report; naming the other kernels' plateaus by
/// the reported cache sizes instead called a write plateau at 45-724 MiB "L3" on a guest
/// that reports the socket's 300 MiB L3 while its read sweep found memory from 64 MiB.
/// A plateau overlapping an unnamed read plateau (such unreported cache) or none stays
/// unnamed.
pub fn label_plateaus_like(plateaus: &mut [Plateau], read: &[Plateau]) {
    // Ranges widened by a quarter octave each side, so one-point plateaus have an extent.
    let log_range = |p: &Plateau| {
        let lo = (p.working_set_lo_bytes.max(1) as f64).log2() - 0.25;
        let hi = (p.working_set_hi_bytes.max(1) as f64).log2() + 0.25;
        (lo, hi)
    };
    let overlap = |a: (f64, f64), b: (f64, f64)| (a.1.min(b.1) - a.0.max(b.0)).max(0.0);
    let mut claims: Vec<(Option<MemoryLevel>, f64)> = plateaus
        .iter()
        .map(|plateau| {
            let range = log_range(plateau);
            read.iter()
                .map(|r| (r.level, overlap(range, log_range(r))))
                .filter(|&(_, shared)| shared > 0.0)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((None, 0.0))
        })
        .collect();
    for index in 0..claims.len() {
        let (Some(level), shared) = claims[index] else {
            continue;
        };
        let beaten = claims.iter().enumerate().any(|(other, &(l, s))| {
            other != index && l == Some(level) && (s > shared || (s == shared && other < index))
        });
        if beaten {
            claims[index].0 = None;
        }
    }
    for (plateau, (level, _)) in plateaus.iter_mut().zip(claims) {
        plateau.level = level;
    }
}

/// `known_dram`: `None` = name DRAM by the cache sizes; `Some(d)` = main memory is plateau `d`
/// (or none of them), decided elsewhere.
fn label(plateaus: &mut [Plateau], guide: &CacheGuide, known_dram: Option<Option<usize>>) {
    for plateau in plateaus.iter_mut() {
        plateau.level = None;
    }
    if let Some(dram) = known_dram {
        if guide.capacities.is_empty() {
            let inner = [MemoryLevel::L1, MemoryLevel::L2, MemoryLevel::L3];
            let caches = plateaus.len() - usize::from(dram.is_some());
            for (plateau, level) in plateaus.iter_mut().take(caches).zip(inner) {
                plateau.level = Some(level);
            }
        } else {
            // Name the caches among the other plateaus, then mark memory.
            let mut others: Vec<Plateau> = plateaus
                .iter()
                .enumerate()
                .filter(|&(i, _)| Some(i) != dram)
                .map(|(_, p)| p.clone())
                .collect();
            label(&mut others, guide, None);
            let mut named = others.into_iter();
            for (index, plateau) in plateaus.iter_mut().enumerate() {
                if Some(index) == dram {
                    continue;
                }
                if let Some(other) = named.next() {
                    plateau.level = other.level.filter(|&l| l != MemoryLevel::Dram);
                }
            }
        }
        if let Some(index) = dram {
            plateaus[index].level = Some(MemoryLevel::Dram);
        }
        return;
    }
    if guide.capacities.is_empty() {
        label_by_order(plateaus);
        return;
    }
    let last_cache = guide
        .capacities
        .last()
        .map(|&(_, bytes)| bytes)
        .unwrap_or(0);
    let mut claims: Vec<(MemoryLevel, usize)> = Vec::new();
    for (index, plateau) in plateaus.iter().enumerate() {
        let centre =
            ((plateau.working_set_lo_bytes as f64) * (plateau.working_set_hi_bytes as f64)).sqrt();
        let level = guide
            .capacities
            .iter()
            .find(|&&(_, capacity)| centre <= capacity as f64)
            .map(|&(level, _)| level)
            .or_else(|| {
                // A plateau straddling the last-level cache is a mix of both.
                (plateau.working_set_lo_bytes >= last_cache).then_some(MemoryLevel::Dram)
            });
        if let Some(level) = level {
            claims.push((level, index));
        }
    }
    let points = |i: usize| plateaus[i].last_point - plateaus[i].first_point;
    let mut winners: Vec<(MemoryLevel, usize)> = Vec::new();
    for &(level, _) in &claims {
        if winners.iter().any(|&(l, _)| l == level) {
            continue;
        }
        let candidates = claims.iter().filter(|(l, _)| *l == level).map(|&(_, i)| i);
        let winner = if level == MemoryLevel::Dram {
            candidates.max()
        } else {
            candidates.max_by_key(|&i| (points(i), std::cmp::Reverse(i)))
        };
        if let Some(index) = winner {
            winners.push((level, index));
        }
    }
    for (level, index) in winners {
        plateaus[index].level = Some(level);
    }
}

/// Whether the curve ends on its DRAM plateau: the outermost level has been reached and the
/// sweep may stop growing.
pub fn ends_on_dram_plateau(plateaus: &[Plateau], points: usize) -> bool {
    plateaus
        .iter()
        .any(|p| p.level == Some(MemoryLevel::Dram) && p.last_point + 1 == points)
}

/// Plateaus past the last-level cache that are not main memory: cache the threads reach
/// beyond what the CPU reports. Where no plateau is main memory (the flushed-read figure
/// showed the last one to be cache), every unnamed plateau past that cache is such cache.
pub fn unreported_cache_plateaus<'a>(
    plateaus: &'a [Plateau],
    guide: &CacheGuide,
) -> Vec<&'a Plateau> {
    let last_cache = guide
        .capacities
        .last()
        .map(|&(_, bytes)| bytes)
        .unwrap_or(u64::MAX);
    let dram_start = plateaus
        .iter()
        .find(|p| p.level == Some(MemoryLevel::Dram))
        .map(|p| p.first_point);
    plateaus
        .iter()
        .filter(|p| {
            p.level.is_none()
                && p.working_set_lo_bytes >= last_cache
                && dram_start.is_none_or(|start| p.last_point < start)
        })
        .collect()
}

fn label_by_order(plateaus: &mut [Plateau]) {
    let count = plateaus.len();
    let inner = [MemoryLevel::L1, MemoryLevel::L2, MemoryLevel::L3];
    for (index, plateau) in plateaus.iter_mut().enumerate() {
        plateau.level = if count >= 2 && index == count - 1 {
            Some(MemoryLevel::Dram)
        } else {
            inner.get(index).copied()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;

    /// Working sets from 4 KiB, `per_octave` points per doubling, up to `max`.
    fn sizes(per_octave: u32, max: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut step = 0;
        loop {
            let bytes = (4.0 * KIB as f64 * 2f64.powf(step as f64 / per_octave as f64)) as u64;
            if bytes > max {
                return out;
            }
            out.push(bytes);
            step += 1;
        }
    }

    /// A four-level staircase with smooth (logistic in log size) transitions at the capacities.
    fn staircase(ws: u64, capacities: &[(u64, f64)], dram: f64) -> f64 {
        let mut value = dram;
        for &(capacity, level) in capacities.iter().rev() {
            // Fraction of the working set that still fits the level.
            let x = (ws as f64 / capacity as f64).log2();
            let inside = 1.0 / (1.0 + (4.0 * x).exp());
            value = inside * level + (1.0 - inside) * value;
        }
        value
    }

    fn zen4_like(max: u64, noise: f64) -> Vec<CurvePoint> {
        let capacities = [(32 * KIB, 200e9), (MIB, 100e9), (32 * MIB, 60e9)];
        sizes(3, max)
            .into_iter()
            .enumerate()
            .map(|(i, ws)| {
                // Deterministic ±noise so the test is repeatable.
                let wobble = 1.0 + noise * (((i * 7919) % 13) as f64 / 6.0 - 1.0);
                CurvePoint {
                    working_set_bytes: ws,
                    bytes_per_s: staircase(ws, &capacities, 20e9) * wobble,
                }
            })
            .collect()
    }

    fn guide() -> CacheGuide {
        CacheGuide {
            capacities: vec![
                (MemoryLevel::L1, 32 * KIB),
                (MemoryLevel::L2, MIB),
                (MemoryLevel::L3, 32 * MIB),
            ],
        }
    }

    fn level_figure(plateaus: &[Plateau], level: MemoryLevel) -> Option<f64> {
        plateaus
            .iter()
            .find(|p| p.level == Some(level))
            .map(|p| p.bytes_per_s)
    }

    fn assert_near(actual: Option<f64>, expected: f64) {
        let value = actual.expect("level missing");
        assert!(
            (value / expected - 1.0).abs() < 0.06,
            "{value:e} vs {expected:e}"
        );
    }

    #[test]
    fn clean_staircase_gives_four_levels() {
        let curve = zen4_like(512 * MIB, 0.0);
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut plateaus, &guide());
        assert_near(level_figure(&plateaus, MemoryLevel::L1), 200e9);
        assert_near(level_figure(&plateaus, MemoryLevel::L2), 100e9);
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 20e9);
    }

    #[test]
    fn noise_and_one_outlier_do_not_split_plateaus() {
        let mut curve = zen4_like(512 * MIB, 0.03);
        // A sample hit by another process: 40% low in the middle of the L2 plateau.
        let l2_middle = curve
            .iter()
            .position(|p| p.working_set_bytes >= 256 * KIB)
            .expect("sweep reaches L2");
        curve[l2_middle].bytes_per_s *= 0.6;
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut plateaus, &guide());
        let labelled: Vec<_> = plateaus.iter().filter_map(|p| p.level).collect();
        assert_eq!(
            labelled,
            vec![
                MemoryLevel::L1,
                MemoryLevel::L2,
                MemoryLevel::L3,
                MemoryLevel::Dram
            ]
        );
        assert_near(level_figure(&plateaus, MemoryLevel::L2), 100e9);
    }

    #[test]
    fn short_sweep_does_not_call_l3_dram() {
        // Stops at 1.5× the last-level cache: no plateau lies wholly past it.
        let curve = zen4_like(48 * MIB, 0.0);
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut plateaus, &guide());
        assert!(level_figure(&plateaus, MemoryLevel::Dram).is_none());
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
    }

    #[test]
    fn unreported_cache_is_not_called_dram() {
        // The guide says 32 MiB of L3, but the threads also reach another die's cache: a
        // 35 GB/s plateau up to 128 MiB before DRAM at 15 GB/s.
        let capacities = [
            (32 * KIB, 200e9),
            (MIB, 100e9),
            (32 * MIB, 60e9),
            (128 * MIB, 35e9),
        ];
        let curve: Vec<CurvePoint> = sizes(3, 1024 * MIB)
            .into_iter()
            .map(|ws| CurvePoint {
                working_set_bytes: ws,
                bytes_per_s: staircase(ws, &capacities, 15e9),
            })
            .collect();
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut plateaus, &guide());
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 15e9);
        assert!(ends_on_dram_plateau(&plateaus, curve.len()));
        let hidden = unreported_cache_plateaus(&plateaus, &guide());
        assert_eq!(hidden.len(), 1);
        assert!((hidden[0].bytes_per_s / 35e9 - 1.0).abs() < 0.1);
    }

    fn plateau(lo: u64, hi: u64, bytes_per_s: f64, level: Option<MemoryLevel>) -> Plateau {
        Plateau {
            first_point: 0,
            last_point: 3,
            working_set_lo_bytes: lo,
            working_set_hi_bytes: hi,
            bytes_per_s,
            max_bytes_per_s: bytes_per_s,
            level,
        }
    }

    /// The Emerald Rapids guest (reports the socket's 300 MiB L3): the read sweep found L3 at
    /// 6.3-32 MiB and memory from 64 MiB; a write-allocating kernel's plateaus at 2.8-22.6 MiB
    /// and 45.3-724 MiB are its L3 and its memory, not two L3 candidates of which the larger
    /// (in points) won. At 2 threads the read sweep's last plateau was cache (faster than
    /// flushed memory): another kernel's plateau over the same working sets is not named.
    #[test]
    fn other_kernels_follow_the_read_sweep() {
        use MemoryLevel::*;
        let read = [
            plateau(5 * KIB, 40 * KIB, 167e9, Some(L1)),
            plateau(51 * KIB, 1600 * KIB, 98e9, Some(L2)),
            plateau(6 * MIB, 32 * MIB, 21e9, Some(L3)),
            plateau(64 * MIB, 645 * MIB, 9e9, Some(Dram)),
        ];
        let mut copy = [
            plateau(6 * KIB, 45 * KIB, 315e9, None),
            plateau(64 * KIB, 1400 * KIB, 59e9, None),
            plateau(2800 * KIB, 22 * MIB, 22e9, None),
            plateau(45 * MIB, 724 * MIB, 8e9, None),
        ];
        label_plateaus_like(&mut copy, &read);
        let levels: Vec<_> = copy.iter().map(|p| p.level).collect();
        assert_eq!(levels, [Some(L1), Some(L2), Some(L3), Some(Dram)]);

        // Two plateaus over one read level: the one sharing more of it keeps the name.
        let mut split = [
            plateau(6 * MIB, 10 * MIB, 30e9, None),
            plateau(12 * MIB, 32 * MIB, 20e9, None),
        ];
        label_plateaus_like(&mut split, &read);
        assert_eq!(split[0].level, None);
        assert_eq!(split[1].level, Some(L3));

        let read_two_threads = [
            plateau(4 * MIB, 32 * MIB, 27e9, Some(L3)),
            plateau(80 * MIB, 645 * MIB, 17e9, None),
        ];
        let mut write = [plateau(90 * MIB, 724 * MIB, 9.5e9, None)];
        label_plateaus_like(&mut write, &read_two_threads);
        assert_eq!(write[0].level, None);
    }

    #[test]
    fn flushed_memory_confirms_the_dram_plateau() {
        // Flushed reads at 19 GB/s: the 20 GB/s plateau past the L3 is main memory.
        let curve = zen4_like(512 * MIB, 0.0);
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        let dram = label_plateaus_flushed(&mut plateaus, &guide(), 19e9);
        assert_eq!(dram, Some(plateaus.len() - 1));
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 20e9);
        assert!(unreported_cache_plateaus(&plateaus, &guide()).is_empty());
    }

    #[test]
    fn a_plateau_faster_than_flushed_memory_is_cache() {
        // Another die's cache up to 128 MiB at 35 GB/s, and the sweep stops at 96 MiB: by the
        // cache sizes alone its last plateau (past the 32 MiB L3) would be DRAM.
        let capacities = [
            (32 * KIB, 200e9),
            (MIB, 100e9),
            (32 * MIB, 60e9),
            (256 * MIB, 35e9),
        ];
        let curve: Vec<CurvePoint> = sizes(3, 96 * MIB)
            .into_iter()
            .map(|ws| CurvePoint {
                working_set_bytes: ws,
                bytes_per_s: staircase(ws, &capacities, 15e9),
            })
            .collect();
        let mut by_size = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut by_size, &guide());
        assert_near(level_figure(&by_size, MemoryLevel::Dram), 35e9);
        // Flushed reads run at 15 GB/s: 35 GB/s is cache, and there is no DRAM plateau.
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        assert_eq!(label_plateaus_flushed(&mut plateaus, &guide(), 15e9), None);
        assert!(level_figure(&plateaus, MemoryLevel::Dram).is_none());
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        let hidden = unreported_cache_plateaus(&plateaus, &guide());
        assert_eq!(hidden.len(), 1);
        assert_near(Some(hidden[0].bytes_per_s), 35e9);
    }

    #[test]
    fn flushed_memory_names_dram_inside_an_oversized_reported_cache() {
        // The guest reports a 256 MiB L3, but the threads reach 32 MiB of it: the plateau from
        // 64 MiB on is main memory, though its working sets fit the reported L3.
        let reported = CacheGuide {
            capacities: vec![
                (MemoryLevel::L1, 32 * KIB),
                (MemoryLevel::L2, MIB),
                (MemoryLevel::L3, 256 * MIB),
            ],
        };
        let curve = zen4_like(192 * MIB, 0.0);
        let mut by_size = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut by_size, &reported);
        assert!(level_figure(&by_size, MemoryLevel::Dram).is_none());
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        let dram = label_plateaus_flushed(&mut plateaus, &reported, 20e9);
        assert!(dram.is_some());
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 20e9);
        // The L3 is the 60 GB/s plateau, not memory.
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        assert_near(level_figure(&plateaus, MemoryLevel::L1), 200e9);
    }

    #[test]
    fn a_short_sweep_with_flushed_memory_still_has_no_dram_plateau() {
        let curve = zen4_like(48 * MIB, 0.0);
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        assert_eq!(label_plateaus_flushed(&mut plateaus, &guide(), 20e9), None);
        assert_near(level_figure(&plateaus, MemoryLevel::L3), 60e9);
        assert!(level_figure(&plateaus, MemoryLevel::Dram).is_none());
    }

    #[test]
    fn without_cache_sizes_plateaus_are_named_in_order() {
        let curve = zen4_like(512 * MIB, 0.0);
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        label_plateaus(&mut plateaus, &CacheGuide::default());
        assert_near(level_figure(&plateaus, MemoryLevel::L1), 200e9);
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 20e9);
    }

    #[test]
    fn steady_slope_is_not_a_plateau() {
        // Falls 30% per point: no three points within ±10%.
        let curve: Vec<CurvePoint> = (0..12)
            .map(|i| CurvePoint {
                working_set_bytes: 4096 << i,
                bytes_per_s: 100e9 * 0.7f64.powi(i),
            })
            .collect();
        assert!(detect_plateaus(&curve, &PlateauSettings::default()).is_empty());
    }

    #[test]
    fn two_flat_points_end_a_curve_with_a_plateau() {
        let curve: Vec<CurvePoint> = [60e9, 61e9, 59e9, 60e9, 20e9, 20.5e9]
            .iter()
            .enumerate()
            .map(|(i, &bw)| CurvePoint {
                working_set_bytes: (64 * MIB) << i,
                bytes_per_s: bw,
            })
            .collect();
        let mut plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        assert_eq!(plateaus.len(), 2);
        label_plateaus(&mut plateaus, &guide());
        // The last plateau is main memory; the 60 GB/s one before it is unreported cache.
        assert_near(level_figure(&plateaus, MemoryLevel::Dram), 20.25e9);
        assert_eq!(unreported_cache_plateaus(&plateaus, &guide()).len(), 1);
    }

    #[test]
    fn invalid_points_break_runs_and_are_never_members() {
        let curve: Vec<CurvePoint> = [50e9, 50e9, f64::NAN, 0.0, 10e9, 10e9, 10e9]
            .iter()
            .enumerate()
            .map(|(i, &bw)| CurvePoint {
                working_set_bytes: 4096 << i,
                bytes_per_s: bw,
            })
            .collect();
        let plateaus = detect_plateaus(&curve, &PlateauSettings::default());
        assert_eq!(plateaus.len(), 1);
        assert_eq!(plateaus[0].first_point, 4);
        assert_eq!(plateaus[0].bytes_per_s, 10e9);
    }
}
