//! Resident set size and CPU time of this process, from `/proc/self` (Linux).

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

/// CPU time this process has used so far (user + system, every thread), in seconds, from
/// `/proc/self/stat` (fields 14 and 15, in clock ticks of 1/100 s: Linux's `USER_HZ` on every
/// architecture this bench runs on), if readable.
pub fn cpu_seconds() -> Option<f64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}
