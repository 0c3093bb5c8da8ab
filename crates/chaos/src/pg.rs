//! The PostgreSQL side of the harness, through the server's own tools (`psql`, `pg_ctl`):
//! terminating service connections, restarting the server, and the end checks on
//! `pg_stat_activity` (the run's database is created and dropped by
//! `tenantry_store_seaorm::throwaway`). The harness holds no pool of its own during the run, so every
//! connection it terminates belongs to a replica.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

/// The server the replicas use.
#[derive(Debug, Clone)]
pub struct Postgres {
    /// Folder of `psql` and `pg_ctl`.
    pub bindir: PathBuf,
    /// Data folder (restart only).
    pub data: Option<PathBuf>,
    /// Server log (restart only).
    pub log: Option<PathBuf>,
    /// Run `pg_ctl` through `runuser -u postgres`.
    pub as_postgres: bool,
    /// URL of the run's database.
    pub url: String,
    /// The monitor's data folder of a pg_auto_failover formation (`--ha-monitor`): failovers
    /// go through `pg_autoctl perform failover` on it.
    pub ha_monitor: Option<PathBuf>,
}

impl Postgres {
    /// Runs `sql` with `psql` on `url`; returns the unaligned, tuples-only output. The
    /// statement goes through `psql`'s standard input, so its length is not bounded by what one
    /// command-line argument may hold (ten thousand idempotency keys are more).
    pub async fn psql_on(&self, url: &str, sql: &str) -> Result<String, String> {
        let mut child = Command::new(self.bindir.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                "-",
                "-d",
                url,
            ])
            .env("PGAPPNAME", "tenantry-chaos")
            .env("PGCONNECT_TIMEOUT", "10")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt as _;
            stdin
                .write_all(format!("{sql};\n").as_bytes())
                .await
                .map_err(|e| format!("write to psql: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(format!(
                "psql failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// [`Postgres::psql_on`] on the run's database.
    pub async fn psql(&self, sql: &str) -> Result<String, String> {
        self.psql_on(&self.url, sql).await
    }

    /// Terminates up to `count` randomly chosen connections of the replicas to the run's
    /// database; returns how many were terminated.
    pub async fn terminate_connections(&self, count: u32) -> Result<u32, String> {
        let out = self
            .psql(&format!(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM \
                 (SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                  AND pid <> pg_backend_pid() AND backend_type = 'client backend' \
                  AND application_name <> 'tenantry-chaos' ORDER BY random() LIMIT {count}) s"
            ))
            .await?;
        Ok(out.parse().unwrap_or(0))
    }

    /// `pg_ctl restart -m fast`, waiting until the server is back.
    pub async fn restart(&self) -> Result<(), String> {
        let (Some(data), Some(log)) = (&self.data, &self.log) else {
            return Err("the data folder and log of the server are not known".to_owned());
        };
        let mut cmd = self.server_tool(self.bindir.join("pg_ctl"));
        if let Some(parent) = data.parent() {
            // The postgres user may not enter the harness's working folder.
            cmd.current_dir(parent);
        }
        let out = cmd
            .arg("-D")
            .arg(data)
            .arg("-l")
            .arg(log)
            .args(["-m", "fast", "-w", "-t", "60", "restart"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl restart failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// `tool` as a command, run as the `postgres` user through `runuser` when the harness
    /// runs as root (`--pg-as-postgres`).
    fn server_tool(&self, tool: PathBuf) -> Command {
        if self.as_postgres {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .unwrap_or_else(|| PathBuf::from("runuser"));
            let mut cmd = Command::new(runuser);
            cmd.args(["-u", "postgres", "--"]).arg(tool);
            cmd
        } else {
            Command::new(tool)
        }
    }

    /// The port of the server that takes writes now (`inet_server_port()` through the
    /// multi-host URL with `target_session_attrs=read-write`, as libpq picks it).
    pub async fn primary_port(&self) -> Result<String, String> {
        self.psql_on(&self.primary_url(), "SELECT inet_server_port()")
            .await
    }

    /// The run's URL with `target_session_attrs=read-write`: the server that takes writes.
    fn primary_url(&self) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{separator}target_session_attrs=read-write", self.url)
    }

    /// Of the idempotency keys `keys`, those that no row of the outbox carries (read on the
    /// primary).
    pub async fn missing_from_outbox(&self, keys: &[String]) -> Result<Vec<String>, String> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let list = keys
            .iter()
            .map(|k| format!("'{}'", k.replace('\'', "''")))
            .collect::<Vec<_>>()
            .join(",");
        let out = self
            .psql_on(
                &self.primary_url(),
                &format!(
                    "SELECT k FROM unnest(ARRAY[{list}]::text[]) AS k WHERE NOT EXISTS \
                     (SELECT 1 FROM tenantry_lifecycle_outbox o WHERE o.idempotency_key = k)"
                ),
            )
            .await?;
        Ok(nonempty_lines(&out))
    }

    /// `pg_autoctl perform failover` on the formation's monitor: waits until the standby
    /// was promoted (at most 120 s). Returns the primary's port before and after.
    pub async fn failover(&self) -> Result<(String, String), String> {
        let Some(monitor) = &self.ha_monitor else {
            return Err("no failover formation (--ha-monitor)".to_owned());
        };
        let before = self.primary_port().await?;
        let mut cmd = self.autoctl_command();
        if let Some(parent) = monitor.parent() {
            cmd.current_dir(parent);
        }
        cmd.args(["perform", "failover", "--wait", "120", "--pgdata"])
            .arg(monitor)
            .stdin(Stdio::null());
        let out = cmd
            .output()
            .await
            .map_err(|e| format!("cannot run pg_autoctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_autoctl perform failover failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let after = self.primary_port().await?;
        Ok((before, after))
    }

    /// `pg_autoctl`, as the `postgres` user when the harness runs as root, through `env`:
    /// `runuser` resets `PATH`, and pg_autoctl finds `pg_ctl` on it.
    pub(crate) fn autoctl_command(&self) -> Command {
        let mut cmd = self.server_tool(PathBuf::from("/usr/bin/env"));
        let mut path = std::ffi::OsString::from("PATH=");
        path.push(path_with(&self.bindir));
        cmd.arg(path).arg("pg_autoctl");
        cmd
    }

    /// Sessions of the run's database `idle in transaction` for more than 5 s (pid,
    /// application, for how long), the harness's own excluded: a transaction between two of
    /// its statements is idle for a moment; one left open stays so.
    pub async fn idle_in_transaction(&self) -> Result<Vec<String>, String> {
        let out = self
            .psql(
                "SELECT pid || ' ' || application_name || ' for ' || (now() - state_change) \
                 FROM pg_stat_activity WHERE datname = current_database() \
                 AND state LIKE 'idle in transaction%' AND application_name <> 'tenantry-chaos' \
                 AND now() - state_change > interval '5 seconds'",
            )
            .await?;
        Ok(nonempty_lines(&out))
    }
}

/// The lines of `out` that are not blank.
fn nonempty_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// `PATH` with the server's `bindir` first (`pg_autoctl` runs `pg_ctl` and reads `pg_config`).
fn path_with(bindir: &std::path::Path) -> std::ffi::OsString {
    let mut paths = vec![bindir.to_path_buf()];
    if let Some(path) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(paths).unwrap_or_default()
}
