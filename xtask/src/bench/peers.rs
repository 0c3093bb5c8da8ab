//! Part `peers`: Tenantry beside the fastest peer job queue, through `../shared/peer-bench`
//! (issue 14).
//!
//! The peer bench starts its own PostgreSQL cluster with the **default** configuration (fsync
//! and synchronous commit on, unlike the throwaway cluster of the other parts), measures
//! `pgbench -N -c 8 -j 2 -T 20`, then drains N no-op jobs with graphile_worker's local queue and
//! N revoke and N provision commands with the release `tenantry-bench` (service defaults), each
//! on a fresh database, and the `sql-floor` row (plain SQL: claim a batch of 16 due rows with a
//! lease-like mark in one commit, delete them in a second; the workload's floor, no library).
//! This part runs its `run.sh` with only those rows, reads the report it writes, then runs
//! `run.sh` once more for the floor with batches of 256 alone (the script measures one floor
//! batch size per run; that run starts a cluster of its own on the same machine with the same
//! configuration, and its row keeps that cluster's pgbench TPS), and turns both into one `peers`
//! result line. The targets (docs/benchmarks.md): revoke ≥ 1.2 × graphile_worker local-queue's
//! jobs/s, provision ≥ 3 × pgbench TPS, revoke ≥ 0.5 of the batch-256 floor (issue 33's
//! moonshot; the fraction of both floors is reported whatever it is).
//!
//! A machine without the peer bench (its folder is not part of this repository) skips the part
//! with a note; the part never fails the run for that.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The rows this part asks the peer bench for (the floor with batches of [`FLOOR_BATCH`]).
pub const ROWS: &str = "graphile-lq tenantry-revoke tenantry-provision sql-floor";

/// Rows per claim of the `sql-floor` row in the run of [`ROWS`] (the service's claim batch).
pub const FLOOR_BATCH: u32 = 16;

/// Rows per claim of the second floor run (`run.sh` with only `sql-floor`).
pub const WIDE_FLOOR_BATCH: u32 = 256;

/// One row of the peer bench's report.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerRow {
    /// `graphile_worker`, `tenantry-revoke`, ...
    pub system: String,
    /// `local-queue`, `default`, ...
    pub variant: String,
    /// Jobs (commands) drained per second; `None` when the row failed.
    pub jobs_per_second: Option<f64>,
    /// pgbench TPS of the cluster the row ran on when that is not the run's main cluster (the
    /// second floor run's); `None` for the rows of the main run.
    pub cluster_tps: Option<f64>,
}

/// What one run of the peer bench reported.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerRun {
    /// `pgbench -N` transactions per second on the peer bench's cluster.
    pub pgbench_tps: f64,
    /// The server's version and durability settings, as the report prints them.
    pub server: String,
    /// Every row, in the report's order.
    pub rows: Vec<PeerRow>,
}

/// Parses the report `run.sh` writes (`results/last-run.txt`): the `pgbench ...: X TPS` line,
/// the `PostgreSQL ...` line and the `details` lines (`key=value` pairs).
///
/// # Errors
/// A report without the pgbench line or without any row.
pub fn parse_report(text: &str) -> Result<PeerRun, String> {
    let pgbench_tps = text
        .lines()
        .find(|l| l.starts_with("pgbench -N"))
        .and_then(|l| l.rsplit(": ").next())
        .and_then(|tail| tail.trim().strip_suffix(" TPS"))
        .and_then(|tps| tps.parse::<f64>().ok())
        .ok_or("the peer bench's report has no `pgbench -N ...: X TPS` line")?;
    let server = text
        .lines()
        .find(|l| l.starts_with("PostgreSQL "))
        .unwrap_or("PostgreSQL (version not reported)")
        .to_owned();
    let rows: Vec<PeerRow> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  version="))
        .map(|details| {
            let field = |key: &str| {
                details
                    .split(' ')
                    .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or("-")
                    .to_owned()
            };
            PeerRow {
                system: field("system"),
                variant: field("variant"),
                jobs_per_second: field("jobs_per_s").parse().ok(),
                cluster_tps: None,
            }
        })
        .collect();
    if rows.is_empty() {
        return Err("the peer bench's report lists no row".into());
    }
    Ok(PeerRun {
        pgbench_tps,
        server,
        rows,
    })
}

impl PeerRun {
    /// Appends the rows of `other`, a run on a cluster of its own, each keeping that cluster's
    /// pgbench TPS ([`PeerRow::cluster_tps`]).
    pub fn append_own_cluster(&mut self, other: PeerRun) {
        self.rows.extend(other.rows.into_iter().map(|row| PeerRow {
            cluster_tps: Some(other.pgbench_tps),
            ..row
        }));
    }
}

/// The `peers` result line of `run`. Each row's `ratio_to_pgbench` divides by the TPS of the
/// cluster it ran on.
pub fn result_line(run: &PeerRun, commands: usize, concurrency: u32) -> Value {
    let rows: Vec<Value> = run
        .rows
        .iter()
        .map(|r| {
            let tps = r.cluster_tps.unwrap_or(run.pgbench_tps);
            json!({
                "system": r.system,
                "variant": r.variant,
                "jobs_per_second": r.jobs_per_second,
                "ratio_to_pgbench": r.jobs_per_second.map(|x| (x / tps * 100.0).round() / 100.0),
                "cluster_tps": r.cluster_tps,
            })
        })
        .collect();
    json!({
        "part": "peers",
        "commands": commands,
        "concurrency": concurrency,
        "pgbench_tps": run.pgbench_tps,
        "server": run.server,
        "rows": rows,
    })
}

/// Runs `peer_bench/run.sh commands concurrency` with [`ROWS`] and `tenantry_bench` as the
/// Tenantry binary, then once more with only `sql-floor` at [`WIDE_FLOOR_BATCH`]; their output
/// (the peers' release build, the reports) goes under `out`. Returns the `peers` result line, or
/// a `skipped` line when `peer_bench` has no `run.sh`.
///
/// # Errors
/// `run.sh` could not start or exited with an error, or its report could not be read.
pub fn run(
    peer_bench: &Path,
    tenantry_bench: &Path,
    out: &Path,
    commands: usize,
    concurrency: u32,
) -> Result<Value, String> {
    let script = peer_bench.join("run.sh");
    if !script.is_file() {
        eprintln!(
            "    no peer bench at {} (pass --peer-bench DIR): part skipped",
            peer_bench.display()
        );
        return Ok(json!({
            "part": "peers",
            "skipped": format!("no peer bench at {}", peer_bench.display()),
        }));
    }
    let invocation = |rows: &'static str, floor_batch: u32| Invocation {
        script: &script,
        tenantry_bench,
        out,
        commands,
        concurrency,
        rows,
        floor_batch,
    };
    let mut run = invocation(ROWS, FLOOR_BATCH).run()?;
    // The second run rewrites `last-run.txt`: the main run's report is kept beside it.
    let results = out.join("results");
    if let Err(e) = std::fs::copy(
        results.join("last-run.txt"),
        results.join("last-run-main.txt"),
    ) {
        eprintln!("    could not keep the main report as last-run-main.txt: {e}");
    }
    eprintln!("    the floor with batches of {WIDE_FLOOR_BATCH}, on a cluster of its own");
    match invocation("sql-floor", WIDE_FLOOR_BATCH).run() {
        Ok(floor) => run.append_own_cluster(floor),
        // The main run's rows and targets stand; the wide floor's row reads "failed".
        Err(e) => {
            eprintln!("    the floor run with batches of {WIDE_FLOOR_BATCH} failed: {e}");
            run.rows.push(PeerRow {
                system: "sql-floor".into(),
                variant: format!("claim{WIDE_FLOOR_BATCH}+delete"),
                jobs_per_second: None,
                cluster_tps: None,
            });
        }
    }
    Ok(result_line(&run, commands, concurrency))
}

/// One run of the peer bench's `run.sh`.
struct Invocation<'a> {
    script: &'a Path,
    tenantry_bench: &'a Path,
    out: &'a Path,
    commands: usize,
    concurrency: u32,
    /// Its `PEERS`.
    rows: &'a str,
    /// Its `FLOOR_BATCH`.
    floor_batch: u32,
}

impl Invocation<'_> {
    /// Runs the script and parses the report it wrote.
    fn run(&self) -> Result<PeerRun, String> {
        let script = self.script;
        let mut command = Command::new("bash");
        // `cargo xtask` runs this process with the xtask package's own variables set; passed on,
        // they reach the peers' build, and a build script that reads one (ring's reads
        // `CARGO_MANIFEST_DIR`) marks its crate and everything above it dirty: the whole peer
        // workspace was rebuilt on every run under xtask, although `PEER_BENCH_OUT` held a build.
        for name in package_variables(std::env::vars_os().map(|(name, _)| name)) {
            command.env_remove(name);
        }
        let mut child = command
            .arg(script)
            .args([self.commands.to_string(), self.concurrency.to_string()])
            .env("PEERS", self.rows)
            .env("FLOOR_BATCH", self.floor_batch.to_string())
            .env("TENANTRY_BENCH", self.tenantry_bench)
            .env("PEER_BENCH_OUT", self.out)
            // The report goes to standard error: this process's standard output is JSON lines.
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", script.display()))?;
        let _tracked = crate::interrupt::track_child(child.id());
        if let Some(mut stdout) = child.stdout.take() {
            let _ = std::io::copy(&mut stdout, &mut std::io::stderr());
        }
        let status = child
            .wait()
            .map_err(|e| format!("waiting for {}: {e}", script.display()))?;
        if !status.success() {
            return Err(format!("{} failed ({status})", script.display()));
        }
        let report = self.out.join("results").join("last-run.txt");
        let text = std::fs::read_to_string(&report)
            .map_err(|e| format!("read {}: {e}", report.display()))?;
        parse_report(&text)
    }
}

/// The variables among `names` that cargo sets for the package it runs (`cargo run`): the
/// manifest's path, the package's metadata and the target's names. Other `CARGO_*` variables
/// (`CARGO_HOME`, `CARGO_TARGET_DIR`, settings) are a user's, and are kept.
fn package_variables(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const EXACT: [&str; 6] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    names
        .filter(|name| {
            name.to_str()
                .is_some_and(|n| EXACT.contains(&n) || n.starts_with("CARGO_PKG_"))
        })
        .collect()
}

/// The targets of issue 14 measured by the peer bench, as (target, figure, met) rows.
pub fn targets(peers: &Value) -> Vec<(String, String, Option<bool>)> {
    let rows = peers["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let rate = |system: &str, variant: &str| {
        rows.iter()
            .find(|r| r["system"] == system && r["variant"] == variant)
            .and_then(|r| r["jobs_per_second"].as_f64())
    };
    let tps = peers["pgbench_tps"].as_f64();
    let revoke = rate("tenantry-revoke", "default");
    let graphile = rate("graphile_worker", "local-queue");
    let provision = rate("tenantry-provision", "default");
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some((a / b * 100.0).round() / 100.0),
        _ => None,
    };
    let revoke_ratio = ratio(revoke, graphile);
    let provision_ratio = ratio(provision, tps);
    let floor_row = |batch: u32| {
        rows.iter().find(|r| {
            r["system"] == "sql-floor" && r["variant"] == format!("claim{batch}+delete").as_str()
        })
    };
    let floor = |batch: u32| floor_row(batch).and_then(|r| r["jobs_per_second"].as_f64());
    let of_floor = ratio(revoke, floor(FLOOR_BATCH));
    let of_wide_floor = ratio(revoke, floor(WIDE_FLOOR_BATCH));
    // The wide floor ran on a cluster of its own: the fraction with each rate divided by its
    // own cluster's pgbench TPS is shown beside the plain one.
    let wide_tps = floor_row(WIDE_FLOOR_BATCH).and_then(|r| r["cluster_tps"].as_f64());
    let normalised = match (of_wide_floor, tps, wide_tps) {
        (Some(x), Some(main), Some(own)) if main > 0.0 => {
            Some((x * own / main * 100.0).round() / 100.0)
        }
        _ => None,
    };
    let fraction = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x}"));
    let wide_figure = match normalised {
        Some(n) => format!("{} ({n} per cluster TPS)", fraction(of_wide_floor)),
        None => fraction(of_wide_floor),
    };
    vec![
        (
            "revoke (service defaults) ≥ 1.2 × graphile_worker local-queue jobs/s (peer bench, fsync on)"
                .into(),
            revoke_ratio.map_or("–".into(), |x| format!("{x}×")),
            revoke_ratio.map(|x| x >= 1.2),
        ),
        (
            "provision (service defaults) ≥ 3 × pgbench -N tps (peer bench, fsync on)".into(),
            provision_ratio.map_or("–".into(), |x| format!("{x}×")),
            provision_ratio.map(|x| x >= 3.0),
        ),
        (
            format!(
                "revoke (service defaults) ÷ sql-floor with batches of {FLOOR_BATCH} (reported, no target)"
            ),
            fraction(of_floor),
            None,
        ),
        (
            format!(
                "revoke (service defaults) ≥ 0.5 of sql-floor with batches of {WIDE_FLOOR_BATCH} (issue 33's moonshot)"
            ),
            wide_figure,
            of_wide_floor.map(|x| x >= 0.5),
        ),
    ]
}

/// The side-by-side table of a `peers` line (empty when the part was skipped).
pub fn table(peers: &Value) -> String {
    use std::fmt::Write as _;
    let Some(rows) = peers["rows"].as_array() else {
        return String::new();
    };
    let mut md = format!(
        "\n### Side by side with the peers (`../shared/peer-bench`)\n\n{}; pgbench -N -c 8 -j 2 -T 20: {} TPS; {} jobs, concurrency {}.\n\n| system | variant | jobs/s | ÷ pgbench TPS |\n|---|---|---:|---:|\n",
        peers["server"].as_str().unwrap_or("PostgreSQL"),
        peers["pgbench_tps"]
            .as_f64()
            .map_or("–".into(), |x| format!("{x:.1}")),
        peers["commands"],
        peers["concurrency"],
    );
    let mut own_cluster = None;
    for r in rows {
        let mark = match r["cluster_tps"].as_f64() {
            Some(tps) => {
                own_cluster = Some(tps);
                " ‡"
            }
            None => "",
        };
        let _ = writeln!(
            md,
            "| {} | {}{mark} | {} | {} |",
            r["system"].as_str().unwrap_or("-"),
            r["variant"].as_str().unwrap_or("-"),
            r["jobs_per_second"]
                .as_f64()
                .map_or("failed".into(), |x| format!("{x:.1}")),
            r["ratio_to_pgbench"]
                .as_f64()
                .map_or("–".into(), |x| format!("{x}×")),
        );
    }
    if let Some(tps) = own_cluster {
        let _ = writeln!(
            md,
            "\n‡ measured by a second run of the peer bench (`run.sh` measures one floor batch size per run): a fresh cluster on the same machine with the same configuration, pgbench -N {tps:.1} TPS; its ratio divides by that."
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "
peer-bench 2026-12-01T08:19Z  host: 2 cores, 24 GiB, before start: CPU busy 100% over 2 s
rustc 1.95.0, release profile
PostgreSQL 15.18 (Debian 15.18-0+deb12u1)  (fsync=on synchronous_commit=on)
pgbench -N -c 8 -j 2 -T 20 (scale 10): 2056.02 TPS
N=20000 concurrency=8 poll_ms=100 enqueue_batch=1000 drain_cap_s=180

| system | ... |

details (completed = ...):
  version=0.14.1 system=graphile_worker variant=local-queue jobs=20000 concurrency=8 pool=20 enqueue_s=1.160 drain_s=1.713 capped=no elapsed_s=1.713 jobs_per_s=11677.8 completed=20000 handler_calls=20000 first_job_ms=41.5 note=local_queue size=100
  version=tenantry_main system=tenantry-revoke variant=default jobs=20000 concurrency=8 pool=8 enqueue_s=- drain_s=4.272 capped=no elapsed_s=4.272 jobs_per_s=4682.0 completed=20000 handler_calls=- first_job_ms=- note=-
  version=tenantry_main system=tenantry-provision variant=default jobs=20000 concurrency=8 pool=8 enqueue_s=- drain_s=FAILED capped=- elapsed_s=- jobs_per_s=- completed=- handler_calls=- first_job_ms=- note=failed

total wall time: 215 s
";

    #[test]
    fn the_xtask_packages_variables_are_not_passed_to_the_peers_build() {
        let names = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO",
            "PATH",
            "RUSTUP_TOOLCHAIN",
        ]
        .map(std::ffi::OsString::from);
        let removed = package_variables(names.into_iter());
        assert_eq!(
            removed,
            [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PKG_NAME",
                "CARGO_PKG_VERSION_MAJOR",
                "CARGO_CRATE_NAME",
            ]
            .map(std::ffi::OsString::from)
        );
    }

    #[test]
    fn the_report_gives_tps_server_and_rows() {
        let run = parse_report(REPORT).unwrap();
        assert!((run.pgbench_tps - 2056.02).abs() < 1e-9);
        assert!(run.server.contains("fsync=on"), "{}", run.server);
        assert_eq!(run.rows.len(), 3);
        assert_eq!(run.rows[0].system, "graphile_worker");
        assert_eq!(run.rows[0].variant, "local-queue");
        assert_eq!(run.rows[0].jobs_per_second, Some(11677.8));
        assert_eq!(
            run.rows[2].jobs_per_second, None,
            "a failed row has no rate"
        );
    }

    #[test]
    fn a_report_without_pgbench_or_rows_is_refused() {
        assert!(parse_report("nothing here").is_err());
        let no_rows: String = REPORT
            .lines()
            .filter(|l| !l.starts_with("  version="))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(parse_report(&no_rows).unwrap_err().contains("no row"));
    }

    #[test]
    fn targets_compare_revoke_with_graphile_and_provision_with_pgbench() {
        let line = result_line(&parse_report(REPORT).unwrap(), 20_000, 8);
        let rows = targets(&line);
        assert_eq!(rows[0].1, "0.4×");
        assert_eq!(rows[0].2, Some(false));
        assert_eq!(rows[1].1, "–", "the provision row failed");
        assert_eq!(rows[1].2, None);
        let fast = json!({"pgbench_tps": 1000.0, "rows": [
            {"system": "graphile_worker", "variant": "local-queue", "jobs_per_second": 10000.0},
            {"system": "tenantry-revoke", "variant": "default", "jobs_per_second": 12500.0},
            {"system": "tenantry-provision", "variant": "default", "jobs_per_second": 3000.0},
        ]});
        let rows = targets(&fast);
        assert_eq!((rows[0].1.as_str(), rows[0].2), ("1.25×", Some(true)));
        assert_eq!((rows[1].1.as_str(), rows[1].2), ("3×", Some(true)));
        assert!(
            targets(&json!({"part": "peers", "skipped": "x"}))[0]
                .2
                .is_none()
        );
        assert!(table(&json!({"part": "peers", "skipped": "x"})).is_empty());
        assert!(table(&line).contains("| tenantry-revoke | default | 4682.0 | 2.28× |"));
        assert!(table(&line).contains("2056.0 TPS"), "{}", table(&line));
    }

    /// The second floor run's report: `run.sh` with only `sql-floor` at batches of 256.
    const WIDE_FLOOR_REPORT: &str = "
PostgreSQL 15.18 (Debian 15.18-0+deb12u1)  (fsync=on synchronous_commit=on)
pgbench -N -c 8 -j 2 -T 20 (scale 10): 2000.00 TPS
  version=plain_SQL system=sql-floor variant=claim256+delete jobs=20000 concurrency=8 pool=8 enqueue_s=- drain_s=0.500 capped=no elapsed_s=0.500 jobs_per_s=40000.0 completed=20000 handler_calls=- first_job_ms=- note=two_commits_per_batch,_no_library
";

    #[test]
    fn revoke_is_reported_as_a_fraction_of_both_floors() {
        let floor16 = "  version=plain_SQL system=sql-floor variant=claim16+delete jobs=20000 concurrency=8 pool=8 enqueue_s=- drain_s=2.000 capped=no elapsed_s=2.000 jobs_per_s=10000.0 completed=20000 handler_calls=- first_job_ms=- note=two_commits_per_batch,_no_library\n";
        let mut run = parse_report(&format!("{REPORT}{floor16}")).unwrap();
        run.append_own_cluster(parse_report(WIDE_FLOOR_REPORT).unwrap());
        assert_eq!(run.rows.len(), 5);
        assert_eq!(
            run.rows[3].cluster_tps, None,
            "the batch-16 floor ran on the main cluster"
        );
        assert_eq!(run.rows[4].cluster_tps, Some(2000.0));
        let line = result_line(&run, 20_000, 8);
        assert_eq!(
            line["rows"][4]["ratio_to_pgbench"], 20.0,
            "the second run's row divides by its own cluster's TPS"
        );
        let rows = targets(&line);
        // revoke 4,682.0 jobs/s: 0.47 of the batch-16 floor, 0.12 of the batch-256 floor.
        assert_eq!((rows[2].1.as_str(), rows[2].2), ("0.47", None));
        // 0.12 × 2,000 ÷ 2,056.02 TPS = 0.1167: the same fraction per cluster TPS, rounded.
        assert_eq!(
            (rows[3].1.as_str(), rows[3].2),
            ("0.12 (0.12 per cluster TPS)", Some(false))
        );
        assert!(rows[3].0.contains("256"), "{}", rows[3].0);
        let md = table(&line);
        assert!(
            md.contains("| sql-floor | claim256+delete ‡ | 40000.0 | 20× |"),
            "{md}"
        );
        assert!(md.contains("pgbench -N 2000.0 TPS"), "{md}");
        assert!(
            md.contains("| sql-floor | claim16+delete | 10000.0 | 4.86× |"),
            "{md}"
        );
    }
}
