//! `pgbench -N` on the benchmark server: the database's own commit limit at a given number of
//! connections, the reference of the lifecycle throughput ratio.
//!
//! Each series creates a fresh database `tenantry_bench_pgbench` (through the bench binary's
//! `scratch-database` subcommand, so the one throwaway-database helper of
//! `tenantry_store_seaorm::throwaway` makes it), initializes it at scale 1
//! (`pgbench -i`), then runs the simple-update script (`-N`: no branch or teller updates, so
//! no artificial row contention) for a fixed time at each connection count, with as many
//! client threads as connections.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Name of the scratch database.
const DATABASE: &str = "tenantry_bench_pgbench";

/// Transactions per second of `pgbench -N` at each of `connections`, `seconds` each;
/// `bench_binary` (the built `tenantry-bench`) creates and drops the scratch database.
pub fn run_all(
    bench_binary: &Path,
    server_url: &str,
    connections: &[u32],
    seconds: u32,
) -> Result<Vec<f64>, String> {
    let url = scratch_database(bench_binary, server_url, "create")?;
    let url = url.trim();
    if url.is_empty() {
        return Err("tenantry-bench scratch-database create printed no URL".to_owned());
    }
    run(
        tool("pgbench").args(["-i", "-q", "-s", "1"]).arg(url),
        "pgbench -i",
    )?;
    let mut results = Vec::with_capacity(connections.len());
    for &c in connections {
        let c = c.max(1).to_string();
        let out = run(
            tool("pgbench")
                .args(["-N", "-n", "-c", &c, "-j", &c, "-T"])
                .arg(seconds.to_string())
                .arg(url),
            "pgbench -N",
        )?;
        let tps = parse_tps(&out).ok_or_else(|| format!("no tps in pgbench output:\n{out}"))?;
        eprintln!("    pgbench -N -c {c}: {tps:.0} tps");
        results.push(tps);
    }
    scratch_database(bench_binary, server_url, "drop")?;
    Ok(results)
}

/// The `tps = N (without initial connection time)` figure of pgbench's report.
pub fn parse_tps(output: &str) -> Option<f64> {
    let tps_lines: Vec<&str> = output
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("tps = "))
        .collect();
    // PostgreSQL 14+: one line "(without initial connection time)"; older versions print
    // "including" and "excluding connections establishing": take the latter.
    let line = tps_lines
        .iter()
        .find(|l| l.contains("without initial connection time") || l.contains("excluding"))
        .or_else(|| tps_lines.first())?;
    line.strip_prefix("tps = ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `tenantry-bench scratch-database <action> tenantry_bench_pgbench` on `server_url`;
/// returns its standard output (the URL, for `create`).
fn scratch_database(bench_binary: &Path, server_url: &str, action: &str) -> Result<String, String> {
    let out = Command::new(bench_binary)
        .args(["--backend", "postgres", "--database-url", server_url])
        .args(["scratch-database", action, DATABASE])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {}: {e}", bench_binary.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "tenantry-bench scratch-database {action} {DATABASE} failed ({})",
            out.status
        ))
    }
}

/// A client tool from the server's bindir when found, else from `PATH`.
fn tool(name: &str) -> Command {
    let path = crate::pg::find_server_bindir()
        .map(|bin| bin.join(name))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name));
    Command::new(path)
}

fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {what}: {e}"))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{what} failed ({}):\n{text}", out.status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tps_is_read_from_the_report() {
        let pg15 = "number of transactions actually processed: 23301\n\
                    latency average = 3.431 ms\n\
                    initial connection time = 12.345 ms\n\
                    tps = 2330.123456 (without initial connection time)\n";
        assert_eq!(parse_tps(pg15), Some(2330.123456));
        let old = "tps = 100.5 (including connections establishing)\n\
                   tps = 101.5 (excluding connections establishing)\n";
        assert_eq!(parse_tps(old), Some(101.5));
        assert_eq!(parse_tps("nothing"), None);
    }
}
