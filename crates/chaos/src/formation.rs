//! The nodes of a pg_auto_failover formation (`--ha-monitor`), for the faults that crash
//! one: which node is the primary and which the standby (the monitor's `pgautofailover.node`
//! table), a node crash (SIGKILL of its `pg_autoctl` keeper and every process under it, the
//! postmaster and its backends included, so nothing restarts the server behind the
//! monitor's back), and the node's return (`pg_autoctl run`, as an operator restarts a
//! crashed machine). The formation's layout is the one `cargo xtask chaos --ha` creates:
//! the monitor's data folder and each node's (`node1`, `node2`) side by side, each node's
//! log `<name>.log` beside them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::pg::Postgres;

/// How long a formation may take to have one primary and one standby again, or to promote
/// the standby after the primary crashed.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// One data node as the monitor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `node1`, `node2`.
    pub name: String,
    /// Its PostgreSQL port.
    pub port: u16,
    /// The state the node reported last (`primary`, `secondary`, `wait_primary`, …).
    pub reported: String,
    /// The state the monitor assigned to it.
    pub goal: String,
}

impl Node {
    /// Whether the node takes writes and has reached that state.
    pub fn is_writable(&self) -> bool {
        matches!(self.reported.as_str(), "primary" | "wait_primary") && self.reported == self.goal
    }

    /// Whether the node is a standby that has reached that state.
    pub fn is_standby(&self) -> bool {
        self.reported == "secondary" && self.goal == "secondary"
    }
}

impl Postgres {
    /// The formation's data nodes, from the monitor.
    ///
    /// # Errors
    /// No formation, the monitor's port unknown (its `postmaster.pid` unreadable), or the
    /// monitor not answering.
    pub async fn nodes(&self) -> Result<Vec<Node>, String> {
        let monitor = self.monitor_dir()?;
        let port = postmaster_port(monitor)?;
        let url =
            format!("postgres://autoctl_node@127.0.0.1:{port}/pg_auto_failover?sslmode=disable");
        let out = self
            .psql_on(
                &url,
                "SELECT nodename || ' ' || nodeport || ' ' || reportedstate || ' ' || goalstate \
                 FROM pgautofailover.node ORDER BY nodeid",
            )
            .await?;
        out.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let parts: Vec<&str> = line.split_whitespace().collect();
                match parts.as_slice() {
                    [name, port, reported, goal] => Ok(Node {
                        name: (*name).to_owned(),
                        port: port.parse().map_err(|_| format!("node port {port}"))?,
                        reported: (*reported).to_owned(),
                        goal: (*goal).to_owned(),
                    }),
                    _ => Err(format!("unexpected monitor row {line:?}")),
                }
            })
            .collect()
    }

    /// Waits until one node is a writable primary and another a standby, both in the states
    /// the monitor assigned (a fault on a formation that is still moving would test
    /// pg_auto_failover, not Tenantry). Returns the primary and the standby.
    ///
    /// # Errors
    /// Not healthy within [`SETTLE_LIMIT`] (with the last states seen).
    pub async fn wait_healthy(&self) -> Result<(Node, Node), String> {
        self.wait_until("no primary and standby", |nodes| {
            let primary = nodes
                .iter()
                .find(|n| n.is_writable() && n.reported == "primary");
            let standby = nodes.iter().find(|n| n.is_standby());
            Some((primary?.clone(), standby?.clone()))
        })
        .await
    }

    /// Waits until a node other than `not` takes writes (the monitor promoted the standby).
    ///
    /// # Errors
    /// No promotion within [`SETTLE_LIMIT`].
    pub async fn wait_promoted(&self, not: &str) -> Result<Node, String> {
        self.wait_until(&format!("no node took over from {not}"), |nodes| {
            nodes
                .iter()
                .find(|n| n.name != not && n.is_writable())
                .cloned()
        })
        .await
    }

    /// Polls the monitor every 250 ms until `pick` finds what it looks for in the nodes'
    /// states; after [`SETTLE_LIMIT`] fails with `missing` and the last states seen.
    async fn wait_until<T>(
        &self,
        missing: &str,
        pick: impl Fn(&[Node]) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + SETTLE_LIMIT;
        loop {
            let last = match self.nodes().await {
                Ok(nodes) => match pick(&nodes) {
                    Some(found) => return Ok(found),
                    None => describe(&nodes),
                },
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{missing} after {} s ({last})",
                    SETTLE_LIMIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Crashes node `name`: SIGKILL of its `pg_autoctl` keeper and of every process under it
    /// (the postmaster and its backends). Returns how many processes were killed.
    ///
    /// # Errors
    /// No keeper process runs for the node.
    pub async fn crash_node(&self, name: &str) -> Result<usize, String> {
        let pgdata = self.node_dir(name)?;
        let table = processes();
        let keeper = table
            .iter()
            .find(|(_, p)| p.is_keeper_of(&pgdata))
            .map(|(pid, _)| *pid)
            .ok_or_else(|| format!("no pg_autoctl process runs for {}", pgdata.display()))?;
        let mut doomed = vec![keeper];
        let mut i = 0;
        while i < doomed.len() {
            let parent = doomed[i];
            doomed.extend(
                table
                    .iter()
                    .filter(|(_, p)| p.parent == parent)
                    .map(|(pid, _)| *pid),
            );
            i += 1;
        }
        let mut cmd = tokio::process::Command::new("kill");
        cmd.arg("-KILL")
            .args(doomed.iter().map(u32::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // A backend may be gone already; the keeper was there when we looked.
        let _ = cmd.status().await;
        Ok(doomed.len())
    }

    /// Starts node `name` again (`pg_autoctl run`, in the background, its output appended to
    /// its log); the keeper starts PostgreSQL and rejoins the formation as the monitor says.
    ///
    /// # Errors
    /// `pg_autoctl` cannot be started.
    pub fn restart_node(&self, name: &str) -> Result<(), String> {
        let pgdata = self.node_dir(name)?;
        let folder = pgdata
            .parent()
            .ok_or("the node's folder has no parent")?
            .to_path_buf();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(folder.join(format!("{name}.log")))
            .map_err(|e| format!("open the log of {name}: {e}"))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = self.autoctl_command();
        cmd.current_dir(&folder)
            .args(["run", "--pgdata"])
            .arg(&pgdata)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        // Not awaited: the keeper outlives the harness and is stopped with the formation.
        cmd.spawn()
            .map(drop)
            .map_err(|e| format!("cannot run pg_autoctl run for {name}: {e}"))
    }

    /// The monitor's data folder.
    pub(crate) fn monitor_dir(&self) -> Result<&Path, String> {
        self.ha_monitor
            .as_deref()
            .ok_or_else(|| "no failover formation (--ha-monitor)".to_owned())
    }

    /// Node `name`'s data folder (beside the monitor's).
    fn node_dir(&self, name: &str) -> Result<PathBuf, String> {
        let monitor = self.monitor_dir()?;
        Ok(monitor
            .parent()
            .ok_or("the monitor's folder has no parent")?
            .join(name))
    }
}

/// The nodes' states, for an error message.
fn describe(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("{} {}/{}", n.name, n.reported, n.goal))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The port in a data folder's `postmaster.pid` (its fourth line).
fn postmaster_port(data: &Path) -> Result<u16, String> {
    let text = std::fs::read_to_string(data.join("postmaster.pid"))
        .map_err(|e| format!("read {}/postmaster.pid: {e}", data.display()))?;
    text.lines()
        .nth(3)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("no port in {}/postmaster.pid", data.display()))
}

/// One process of the table [`processes`] reads.
#[derive(Debug, Clone, Default)]
struct Process {
    parent: u32,
    args: Vec<String>,
}

impl Process {
    /// A `pg_autoctl` process started for the data folder `pgdata` (`… --pgdata <pgdata>`);
    /// the keeper's services rename themselves, so only the keeper matches.
    fn is_keeper_of(&self, pgdata: &Path) -> bool {
        let wanted = pgdata.to_string_lossy();
        self.args
            .first()
            .is_some_and(|a| a.rsplit('/').next() == Some("pg_autoctl"))
            && self
                .args
                .windows(2)
                .any(|w| w[0] == "--pgdata" && w[1].trim_end_matches('/') == wanted)
    }
}

/// Every process of the machine with its parent and arguments (from `/proc`).
fn processes() -> BTreeMap<u32, Process> {
    let mut table = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Some(parent) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            continue;
        };
        let args = std::fs::read(path.join("cmdline"))
            .map(|raw| {
                raw.split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        table.insert(pid, Process { parent, args });
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_keeper_of_the_node_matches() {
        let keeper = |args: &[&str]| Process {
            parent: 1,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        let node = Path::new("/tmp/f/node1");
        assert!(
            keeper(&[
                "pg_autoctl",
                "create",
                "postgres",
                "--pgdata",
                "/tmp/f/node1"
            ])
            .is_keeper_of(node)
        );
        assert!(
            keeper(&["/usr/bin/pg_autoctl", "run", "--pgdata", "/tmp/f/node1/"]).is_keeper_of(node)
        );
        // Another node, a service that renamed itself, PostgreSQL itself.
        assert!(!keeper(&["pg_autoctl", "run", "--pgdata", "/tmp/f/node10"]).is_keeper_of(node));
        assert!(!keeper(&["pg_autoctl: node active"]).is_keeper_of(node));
        assert!(
            !keeper(&["postgres", "-D", "/tmp/f/node1", "--pgdata", "/tmp/f/node1"])
                .is_keeper_of(node)
        );
    }

    #[test]
    fn a_node_is_writable_or_a_standby_only_in_its_goal_state() {
        let node = |reported: &str, goal: &str| Node {
            name: "node1".to_owned(),
            port: 1,
            reported: reported.to_owned(),
            goal: goal.to_owned(),
        };
        assert!(node("primary", "primary").is_writable());
        assert!(node("wait_primary", "wait_primary").is_writable());
        assert!(!node("primary", "demote_timeout").is_writable());
        assert!(node("secondary", "secondary").is_standby());
        assert!(!node("catchingup", "secondary").is_standby());
    }

    #[test]
    fn the_port_is_the_fourth_line_of_postmaster_pid() {
        let dir = std::env::temp_dir().join(format!("chaos-pmpid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("postmaster.pid"),
            "4242\n/tmp/x\n1700000000\n7101\n/tmp\n*\n",
        )
        .unwrap();
        assert_eq!(postmaster_port(&dir), Ok(7101));
        std::fs::write(dir.join("postmaster.pid"), "4242\n").unwrap();
        assert!(postmaster_port(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
