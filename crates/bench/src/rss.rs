//! Resident set size of this process, from `/proc/self/status` (Linux).

use std::fs;

/// Current resident set (`VmRSS`) in KiB, if readable.
pub fn current_kib() -> Option<u64> {
    status_field("VmRSS:")
}

/// Peak resident set (`VmHWM`) in KiB since start or the last [`reset_peak`], if readable.
pub fn peak_kib() -> Option<u64> {
    status_field("VmHWM:")
}

/// Resets the peak to the current resident set (writes `5` to `/proc/self/clear_refs`);
/// false when the kernel refused.
pub fn reset_peak() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_field(name: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}
