//! How much memory this process may use: the smaller of what the kernel says is available
//! (`MemAvailable` in /proc/meminfo) and what is left under the cgroup's limit (v2
//! `memory.max` − `memory.current`, or v1 `memory.limit_in_bytes` − `memory.usage_in_bytes`).
//! A plan larger than this would be OOM-killed part way instead of refused with a message.

use std::path::Path;

/// Fraction of the available memory a plan may take: the rest is left for the process's own
/// code, the loaded model and the page cache it streams from.
const PLAN_SHARE: f64 = 0.8;

/// Used when neither /proc nor cgroup files can be read (not Linux, a locked-down sandbox).
const FALLBACK_BYTES: u64 = 4 << 30;

/// Bytes a plan may allocate on this machine now, with where the figure came from.
pub fn plan_memory_limit() -> (u64, String) {
    let (available, source) = available_bytes();
    ((available as f64 * PLAN_SHARE) as u64, source)
}

/// A byte count in GiB, for messages.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Bytes this process can still allocate, and the source of the figure.
pub fn available_bytes() -> (u64, String) {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo_available(&text));
    let cgroup = cgroup_remaining(Path::new("/sys/fs/cgroup"));
    match (meminfo, cgroup) {
        (Some(m), Some(c)) if c < m => (c, "cgroup memory limit".into()),
        (Some(m), _) => (m, "MemAvailable".into()),
        (None, Some(c)) => (c, "cgroup memory limit".into()),
        (None, None) => (
            FALLBACK_BYTES,
            "a 4 GiB default (memory availability unreadable)".into(),
        ),
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn parse_meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Remaining bytes under the cgroup limit; `None` when unlimited or unreadable.
fn cgroup_remaining(root: &Path) -> Option<u64> {
    let read = |name: &str| std::fs::read_to_string(root.join(name)).ok();
    let (limit, usage) = match (read("memory.max"), read("memory.current")) {
        (Some(limit), Some(usage)) => (limit, usage),
        _ => (
            read("memory/memory.limit_in_bytes")?,
            read("memory/memory.usage_in_bytes")?,
        ),
    };
    remaining(&limit, &usage)
}

fn remaining(limit: &str, usage: &str) -> Option<u64> {
    let limit: u64 = limit.trim().parse().ok()?; // "max" (unlimited) does not parse
                                                 // cgroup v1 reports "unlimited" as a huge page-aligned number.
    if limit >= 1 << 60 {
        return None;
    }
    let usage: u64 = usage.trim().parse().unwrap_or(0);
    Some(limit.saturating_sub(usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_available_in_bytes() {
        let text =
            "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_meminfo_available(text), Some(20_000_000 * 1024));
        assert_eq!(parse_meminfo_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn cgroup_limits() {
        assert_eq!(remaining("max\n", "123\n"), None);
        assert_eq!(remaining("9223372036854771712\n", "5\n"), None);
        assert_eq!(remaining("1000\n", "300\n"), Some(700));
        assert_eq!(remaining("1000\n", "3000\n"), Some(0));
    }

    #[test]
    fn this_machine_has_some_memory() {
        let (bytes, source) = plan_memory_limit();
        assert!(bytes > 0, "{source}");
    }
}
