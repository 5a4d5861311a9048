//! Human-readable numbers with SI prefixes (1 GB = 1e9 B, as bandwidth datasheets count), and
//! binary ones for cache sizes (1 KiB = 1024 B).

fn scaled(value: f64) -> (f64, &'static str) {
    let magnitude = value.abs();
    for (factor, prefix) in [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if magnitude >= factor {
            return (value / factor, prefix);
        }
    }
    (value, "")
}

/// `1.23 G`
pub fn fmt_count(value: f64) -> String {
    let (v, p) = scaled(value);
    if p.is_empty() {
        format!("{v:.0}")
    } else {
        format!("{v:.2} {p}")
    }
}

/// `12.3 MB`
pub fn fmt_bytes(value: f64) -> String {
    let (v, p) = scaled(value);
    if p.is_empty() {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {p}B")
    }
}

/// A memory level's rates: `12.3 GB/s`, or `12.3 GB/s read, 9.8 GB/s write` when the device
/// measured writes apart (`write` 0 = the read rate).
pub fn fmt_memory_rates(read: f64, write: f64) -> String {
    if write > 0.0 && write != read {
        format!("{}/s read, {}/s write", fmt_bytes(read), fmt_bytes(write))
    } else {
        format!("{}/s", fmt_bytes(read))
    }
}

/// `48 KiB`, `1.5 MiB`: binary prefixes, as cache and working-set sizes are given.
pub fn fmt_bytes_binary(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", units[unit])
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// `13.4 TFLOP/s`
pub fn fmt_rate(value: f64, unit: &str) -> String {
    let (v, p) = scaled(value);
    format!("{v:.1} {p}{unit}")
}

/// `1.23 ms`, `45.6 µs`
pub fn fmt_seconds(value: f64) -> String {
    if value == 0.0 {
        "0".to_string()
    } else if value >= 1.0 {
        format!("{value:.3} s")
    } else if value >= 1e-3 {
        format!("{:.3} ms", value * 1e3)
    } else if value >= 1e-6 {
        format!("{:.2} µs", value * 1e6)
    } else {
        format!("{:.0} ns", value * 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(fmt_count(4.1e9), "4.10 G");
        assert_eq!(fmt_bytes(616e9), "616.0 GB");
        assert_eq!(fmt_seconds(0.0015), "1.500 ms");
        assert_eq!(fmt_seconds(2.5e-6), "2.50 µs");
        assert_eq!(fmt_bytes_binary(48 * 1024), "48 KiB");
        assert_eq!(fmt_bytes_binary(1536 * 1024), "1.5 MiB");
        assert_eq!(fmt_bytes_binary(512), "512 B");
    }
}
