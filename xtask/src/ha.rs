//! A throwaway pg_auto_failover formation on loopback for `cargo xtask chaos --ha`: a monitor
//! and two data nodes (Debian packages `pg-auto-failover-cli` and
//! `postgresql-<version>-auto-failover`), each a `pg_autoctl create … --run` process in one
//! temporary folder, run as the `postgres` user through `runuser` when we are root (as the
//! throwaway cluster of [`crate::pg`]). With two nodes the monitor keeps the standby
//! synchronous while it is healthy. Dropping the formation stops every node and removes the
//! folder.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pg;

/// How long the formation may take to reach "one primary, one secondary".
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A running formation: monitor and two nodes.
#[derive(Debug)]
pub struct Formation {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    monitor_port: u16,
    node_ports: [u16; 2],
    children: Vec<Child>,
}

impl Formation {
    /// Starts the monitor, then node 1 (the first primary), then node 2 (its standby), and
    /// waits until the monitor reports one primary and one secondary.
    ///
    /// # Errors
    /// Missing server binaries or `pg_autoctl` (naming the Debian packages), no `postgres`
    /// user as root, a node that fails to start (with the tail of its log), or no healthy
    /// formation within 3 minutes. Whatever was started is stopped and removed.
    pub fn start() -> Result<Formation, String> {
        let bin = pg::find_server_bindir()
            .ok_or("no PostgreSQL server binaries (Debian: apt-get install postgresql)")?;
        if !bin.join("pg_autoctl").is_file() && which("pg_autoctl").is_none() {
            return Err("no pg_autoctl (Debian: apt-get install pg-auto-failover-cli postgresql-15-auto-failover, the extension matching the server's version)".to_owned());
        }
        let as_postgres = pg::effective_uid_is_root();
        if as_postgres && !pg::postgres_user_exists() {
            return Err(
                "running as root, and there is no postgres user to run the formation as".to_owned(),
            );
        }
        let dir = pg::create_temp_dir(as_postgres).map_err(|e| e.to_string())?;
        let ports = [
            pg::free_port().map_err(|e| e.to_string())?,
            pg::free_port().map_err(|e| e.to_string())?,
            pg::free_port().map_err(|e| e.to_string())?,
        ];
        let mut formation = Formation {
            dir,
            bin,
            as_postgres,
            monitor_port: ports[0],
            node_ports: [ports[1], ports[2]],
            children: Vec::new(),
        };
        if as_postgres {
            let status = Command::new("chown")
                .arg("postgres")
                .arg(&formation.dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "chown postgres {}: {status}",
                    formation.dir.display()
                ));
            }
        }
        let monitor_port = formation.monitor_port.to_string();
        formation.spawn(
            "monitor",
            &[
                "create",
                "monitor",
                "--pgport",
                &monitor_port,
                "--hostname",
                "127.0.0.1",
                "--auth",
                "trust",
                "--no-ssl",
                "--run",
            ],
        )?;
        formation.wait_for("the monitor", |f| f.monitor_answers())?;
        formation.shorten_monitor_timeouts()?;
        for (i, name) in ["node1", "node2"].into_iter().enumerate() {
            let port = formation.node_ports[i].to_string();
            let monitor = format!(
                "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
                formation.monitor_port
            );
            formation.spawn(
                name,
                &[
                    "create",
                    "postgres",
                    "--pgport",
                    &port,
                    "--hostname",
                    "127.0.0.1",
                    "--name",
                    name,
                    "--monitor",
                    &monitor,
                    "--auth",
                    "trust",
                    "--no-ssl",
                    "--run",
                ],
            )?;
            let wanted = if i == 0 { "single" } else { "secondary" };
            formation.wait_for(name, |f| f.node_state(name).as_deref() == Some(wanted))?;
        }
        Ok(formation)
    }

    /// The formation's multi-host URL (database `postgres`, superuser `postgres`, trust), in
    /// node order; libpq and Tenantry pick the writable node.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
            self.node_ports[0], self.node_ports[1]
        )
    }

    /// The monitor's data folder (`pg_autoctl perform failover --pgdata` takes it).
    pub fn monitor_dir(&self) -> PathBuf {
        self.dir.join("monitor")
    }

    /// The formation's folder (logs of each `pg_autoctl`: `<name>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the server binaries (`psql`).
    pub fn bindir(&self) -> &Path {
        &self.bin
    }

    /// Whether the nodes run as the `postgres` user.
    pub fn runs_as_postgres(&self) -> bool {
        self.as_postgres
    }

    /// `PATH` with the server binaries first (`pg_autoctl` runs `pg_ctl`, `pg_basebackup`).
    fn path(&self) -> String {
        format!(
            "PATH={}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// `pg_autoctl` with `args`, as `postgres` when we are root, in the formation's folder.
    fn autoctl(&self, args: &[&str]) -> Command {
        let mut cmd = if self.as_postgres {
            let mut cmd = Command::new(pg::runuser_program());
            cmd.args(["-u", "postgres", "--", "/usr/bin/env"]);
            cmd
        } else {
            Command::new("/usr/bin/env")
        };
        cmd.arg(self.path()).arg("pg_autoctl").args(args);
        cmd.current_dir(&self.dir);
        cmd
    }

    /// Starts `pg_autoctl <args> --pgdata <dir>/<name>` in the background, its output in
    /// `<dir>/<name>.log`.
    fn spawn(&mut self, name: &str, args: &[&str]) -> Result<(), String> {
        let log = fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("create the log of {name}: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let pgdata = self.dir.join(name).display().to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--pgdata", &pgdata]);
        let child = self
            .autoctl(&all)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot run pg_autoctl for {name}: {e}"))?;
        self.children.push(child);
        Ok(())
    }

    /// Polls `ready` every 500 ms until it holds, or fails naming `what` with the logs' tails.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&Self) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if ready(self) {
                return Ok(());
            }
            for child in &mut self.children {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "a pg_autoctl process exited ({status}) while waiting for {what}; logs in {}:\n{}",
                        self.dir.display(),
                        self.log_tails()
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!(
            "{what} not ready within {} s; logs:\n{}",
            READY_TIMEOUT.as_secs(),
            self.log_tails()
        ))
    }

    /// The last lines of every `pg_autoctl` log.
    fn log_tails(&self) -> String {
        ["monitor", "node1", "node2"]
            .iter()
            .filter_map(|name| {
                let text = fs::read_to_string(self.dir.join(format!("{name}.log"))).ok()?;
                Some(format!("--- {name}.log\n{}", pg::tail(&text, 15)))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `psql` on the monitor's database; `None` when it does not answer.
    fn monitor_query(&self, sql: &str) -> Option<String> {
        crate::stdout_of(
            Command::new(self.bin.join("psql"))
                .args(["-X", "-A", "-t", "-q", "-d"])
                .arg(format!(
                    "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable&connect_timeout=3",
                    self.monitor_port
                ))
                .args(["-c", sql]),
        )
    }

    /// The monitor's health checks and timeouts shortened (every second; a node unhealthy
    /// after 5 s; a primary that does not answer considered demoted after 10 s), so that a
    /// crash of the primary is failed over in about 15 s instead of about 50 s with
    /// pg_auto_failover's defaults (5 s, 20 s, 30 s). Set with `ALTER SYSTEM` and a reload.
    fn shorten_monitor_timeouts(&self) -> Result<(), String> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(format!(
                "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable&connect_timeout=5",
                self.monitor_port
            ));
        for (name, value) in [
            ("health_check_period", "1s"),
            ("node_considered_unhealthy_timeout", "5s"),
            ("primary_demote_timeout", "10s"),
        ] {
            cmd.args([
                "-c",
                &format!("ALTER SYSTEM SET pgautofailover.{name} = '{value}'"),
            ]);
        }
        let out = cmd
            .args(["-c", "SELECT pg_reload_conf()"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("psql on the monitor: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "shortening the monitor's timeouts failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn monitor_answers(&self) -> bool {
        self.monitor_query("SELECT 1").as_deref() == Some("1")
    }

    /// The state node `name` reported, once it has reached its goal state.
    fn node_state(&self, name: &str) -> Option<String> {
        self.monitor_query(&format!(
            "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '{name}' AND reportedstate = goalstate"
        ))
        .filter(|s| !s.is_empty())
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        // Nodes first (a monitor stopped first would leave them waiting for it).
        for name in ["node2", "node1", "monitor"] {
            let pgdata = self.dir.join(name).display().to_string();
            let _ = self
                .autoctl(&["stop", "--pgdata", &pgdata])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for child in &mut self.children {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // A postmaster left behind (pg_autoctl killed before it stopped it).
        for name in ["node2", "node1", "monitor"] {
            let pid_file = self.dir.join(name).join("postmaster.pid");
            if let Some(pid) = fs::read_to_string(pid_file)
                .ok()
                .and_then(|t| t.lines().next().map(str::to_owned))
            {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `program` on `PATH`, if any.
fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}
