//! The fenced-writes workload: writer processes (`tenantry-chaos-fence-writer`, one binary
//! beside the harness) that increment counters in shared scopes through the `ScopedWrites`
//! runtime on the run's database, SIGKILLed and restarted by the schedule. Each generation has
//! its own owner id (`chaos-writer-<i>-gen-<g>`); all generations of a slot append to one
//! journal (`fence-writer-<i>.journal`, lines `<scope> <value> <owner>`).
//!
//! The check ([`committed_once`]): per scope, every committed value appears once across all
//! journals and none exceeds the stored counter. Two runs of one scope at once (two processes
//! both believing they hold it, or a killed writer's claim taken over while its write could
//! still land) would commit one value twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tenantry_demo::CheckResult;
use tokio::process::{Child, Command};

use crate::checks::check;

/// The binding the writers write under (`src/fence_writer.rs`).
pub const BINDING: &str = "chaos-fence-writers";
/// Scopes the writers share.
pub const SCOPES: u32 = 6;

/// One writer slot.
#[derive(Debug)]
struct Slot {
    child: Option<Child>,
    generation: u32,
}

/// The writer processes of a run.
#[derive(Debug)]
pub struct Writers {
    bin: PathBuf,
    database: String,
    dir: PathBuf,
    slots: Vec<Slot>,
    /// Owners of the generations killed so far.
    pub killed: BTreeSet<String>,
}

impl Writers {
    /// `n` writer slots running `bin` on `database`, journals and logs in `dir` (not started).
    pub fn new(n: usize, bin: &Path, database: &str, dir: &Path) -> Self {
        Self {
            bin: std::path::absolute(bin).unwrap_or_else(|_| bin.to_path_buf()),
            database: database.to_owned(),
            dir: dir.to_path_buf(),
            slots: (0..n)
                .map(|_| Slot {
                    child: None,
                    generation: 0,
                })
                .collect(),
            killed: BTreeSet::new(),
        }
    }

    /// Writer slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn owner(i: usize, generation: u32) -> String {
        format!("chaos-writer-{i}-gen-{generation}")
    }

    fn journal(&self, i: usize) -> PathBuf {
        self.dir.join(format!("fence-writer-{i}.journal"))
    }

    /// Starts the next generation of slot `i`.
    ///
    /// # Errors
    /// The log file or the process cannot be created.
    pub fn spawn(&mut self, i: usize) -> Result<(), String> {
        let journal = self.journal(i);
        let slot = &mut self.slots[i];
        slot.generation += 1;
        let log = self
            .dir
            .join(format!("fence-writer-{i}-gen-{}.log", slot.generation));
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let child = Command::new(&self.bin)
            .arg("--database")
            .arg(&self.database)
            .arg("--journal")
            .arg(journal)
            .arg("--scopes")
            .arg(SCOPES.to_string())
            .arg("--owner")
            .arg(Self::owner(i, slot.generation))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        slot.child = Some(child);
        Ok(())
    }

    /// SIGKILLs slot `i` (reaped); returns the killed owner.
    pub async fn kill(&mut self, i: usize) -> Option<String> {
        let slot = &mut self.slots[i];
        let mut child = slot.child.take()?;
        let _ = child.kill().await;
        let owner = Self::owner(i, slot.generation);
        self.killed.insert(owner.clone());
        Some(owner)
    }

    /// SIGKILLs every running writer (the end of the workload).
    pub async fn kill_all(&mut self) {
        for i in 0..self.slots.len() {
            let _ = self.kill(i).await;
        }
    }

    /// Process starts so far.
    pub fn starts(&self) -> u32 {
        self.slots.iter().map(|s| s.generation).sum()
    }

    /// Every journal's text.
    pub fn journals(&self) -> Vec<String> {
        (0..self.slots.len())
            .map(|i| std::fs::read_to_string(self.journal(i)).unwrap_or_default())
            .collect()
    }
}

/// The key of scope `k`'s counter in host storage.
pub fn counter_key(k: u32) -> String {
    format!("chaos.counter.{k}")
}

/// Per scope, every committed value appears once across `journals` and none exceeds the
/// stored counter (`counters`: scope → value; a missing one is 0). A journal line cut by a
/// SIGKILL is skipped.
pub fn committed_once(journals: &[String], counters: &BTreeMap<u32, u64>) -> CheckResult {
    let mut seen: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut lines = 0usize;
    for text in journals {
        for line in text.lines() {
            let mut parts = line.split(' ');
            let (Some(k), Some(v), Some(owner)) = (
                parts.next().and_then(|k| k.parse::<u32>().ok()),
                parts.next().and_then(|v| v.parse::<u64>().ok()),
                parts.next(),
            ) else {
                continue;
            };
            lines += 1;
            if let Some(first) = seen.insert((k, v), owner.to_owned()) {
                problems.push(format!(
                    "scope {k}: value {v} committed by {first} and again by {owner} (committed twice: two runs read the same counter)"
                ));
            }
            let stored = counters.get(&k).copied().unwrap_or(0);
            if v > stored {
                problems.push(format!(
                    "scope {k}: {owner} committed {v}, the stored counter is {stored} (a write lost)"
                ));
            }
        }
    }
    let stored: u64 = counters.values().sum();
    check(
        "fenced writes across processes: every increment committed once",
        &problems,
        format!(
            "{lines} increments journaled by the writers, counters total {stored} (a killed writer's last increment may be stored without its journal line)"
        ),
    )
}

/// One record left at a fence key of the writers' binding, as the admin listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceLeft {
    /// The scope it names.
    pub scope: String,
    /// `fence` (true) or `intent`.
    pub fence: bool,
    /// Why it is a fence (`intent_expired`: a dispatched write-ahead intent past its expiry).
    pub failure_kind: Option<String>,
    /// The process that wrote it, when recorded.
    pub owner: Option<String>,
    /// Whether its expiry has passed (an intent without expiry counts as passed).
    pub expired: bool,
}

/// With every writer dead and their claims expired, each record left on the writers' scopes
/// must be explained: a fence from a killed writer's dispatched intent (`intent_expired`) or
/// from a write whose outcome was unknown (a recorded failure, e.g. a connection the database
/// fault cut); an expired plain claim of a killed writer (free: the next run takes it over).
/// Problems: a record of an owner that was never killed, a live intent, a fence without a
/// failure.
pub fn fences_explained(left: &[FenceLeft], killed: &BTreeSet<String>) -> CheckResult {
    let mut problems = Vec::new();
    let (mut expired_intents, mut failures, mut claims) = (0usize, 0usize, 0usize);
    for f in left {
        if let Some(owner) = &f.owner
            && !killed.contains(owner)
        {
            problems.push(format!(
                "{}: record of {owner}, which was never killed",
                f.scope
            ));
            continue;
        }
        match (f.fence, f.failure_kind.as_deref()) {
            (true, Some("intent_expired")) => expired_intents += 1,
            (true, Some(_)) => failures += 1,
            (true, None) => problems.push(format!("{}: a fence without a failure", f.scope)),
            (false, _) if f.expired => claims += 1,
            (false, _) => {
                problems.push(format!("{}: a live intent with every writer dead", f.scope))
            }
        }
    }
    check(
        "fenced writes across processes: every fence left was a killed writer's dispatched write",
        &problems,
        format!(
            "{} records: {expired_intents} write-ahead intents of killed writers (outcome unknown: fenced), {failures} fences of failed writes, {claims} expired plain claims (free to take over)",
            left.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_killed_writers_leave_fences() {
        let killed = BTreeSet::from(["chaos-writer-0-gen-1".to_owned()]);
        let intent = FenceLeft {
            scope: "s0".to_owned(),
            fence: true,
            failure_kind: Some("intent_expired".to_owned()),
            owner: Some("chaos-writer-0-gen-1".to_owned()),
            expired: true,
        };
        let claim = FenceLeft {
            fence: false,
            failure_kind: None,
            ..intent.clone()
        };
        assert!(fences_explained(&[intent.clone(), claim.clone()], &killed).passed);
        let stranger = FenceLeft {
            owner: Some("chaos-writer-1-gen-1".to_owned()),
            ..intent.clone()
        };
        assert!(!fences_explained(&[stranger], &killed).passed);
        let live = FenceLeft {
            expired: false,
            ..claim
        };
        assert!(!fences_explained(&[live], &killed).passed);
        let bare = FenceLeft {
            failure_kind: None,
            ..intent
        };
        assert!(!fences_explained(&[bare], &killed).passed);
    }

    #[test]
    fn a_value_committed_twice_or_above_the_counter_fails() {
        let counters = BTreeMap::from([(0, 3), (1, 1)]);
        let ok = vec![
            "0 1 chaos-writer-0-gen-1\n0 3 chaos-writer-0-gen-2\n0 2".to_owned(),
            "0 2 chaos-writer-1-gen-1\n1 1 chaos-writer-1-gen-1\n".to_owned(),
        ];
        assert!(committed_once(&ok, &counters).passed);
        let twice = vec![
            "0 2 chaos-writer-0-gen-1\n".to_owned(),
            "0 2 chaos-writer-1-gen-1\n".to_owned(),
        ];
        assert!(!committed_once(&twice, &counters).passed);
        let lost = vec!["1 2 chaos-writer-0-gen-1\n".to_owned()];
        assert!(!committed_once(&lost, &counters).passed);
    }
}
