//! `pgbench -N` on the benchmark server: the database's own commit limit at a given number of
//! connections, the reference of the lifecycle throughput ratio.
//!
//! Each series creates a fresh database `tenantry_bench_pgbench`, initializes it at scale 1
//! (`pgbench -i`), then runs the simple-update script (`-N`: no branch or teller updates, so
//! no artificial row contention) for a fixed time at each connection count, with as many
//! client threads as connections.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Name of the scratch database.
const DATABASE: &str = "tenantry_bench_pgbench";

/// Transactions per second of `pgbench -N` at each of `connections`, `seconds` each.
pub fn run_all(server_url: &str, connections: &[u32], seconds: u32) -> Result<Vec<f64>, String> {
    let url = with_database(server_url, DATABASE);
    psql(
        server_url,
        &[
            &format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
            &format!("CREATE DATABASE {DATABASE}"),
        ],
    )?;
    run(
        tool("pgbench").args(["-i", "-q", "-s", "1"]).arg(&url),
        "pgbench -i",
    )?;
    let mut results = Vec::with_capacity(connections.len());
    for &c in connections {
        let c = c.max(1).to_string();
        let out = run(
            tool("pgbench")
                .args(["-N", "-n", "-c", &c, "-j", &c, "-T"])
                .arg(seconds.to_string())
                .arg(&url),
            "pgbench -N",
        )?;
        let tps = parse_tps(&out).ok_or_else(|| format!("no tps in pgbench output:\n{out}"))?;
        eprintln!("    pgbench -N -c {c}: {tps:.0} tps");
        results.push(tps);
    }
    psql(
        server_url,
        &[&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")],
    )?;
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

fn psql(url: &str, statements: &[&str]) -> Result<String, String> {
    let mut cmd = tool("psql");
    cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url]);
    for statement in statements {
        cmd.args(["-c", statement]);
    }
    run(&mut cmd, "psql")
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

/// `url` with its database (the path) replaced by `database`, query string kept.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..authority_end], database);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
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

    #[test]
    fn database_is_replaced_in_the_url() {
        assert_eq!(
            with_database("postgres://p@127.0.0.1:5/postgres", "x"),
            "postgres://p@127.0.0.1:5/x"
        );
        assert_eq!(with_database("postgres://h?a=b", "x"), "postgres://h/x?a=b");
    }
}
