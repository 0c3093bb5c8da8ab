//! The harness's own end checks, beside the demo's (terminal states, remote ground truth,
//! replays, directory): late settles of paused owners refused, wall-clock steps in effect and
//! undone, no leased row without a live owner, no `idle in transaction` session, `/readyz` of
//! every replica, no replica that exited by itself.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tenantry_demo::CheckResult;

use crate::logs::LeaseLog;

/// Most problems quoted per failed check.
const QUOTED: usize = 5;

/// A check from its problems: passed when there are none.
pub fn check(name: &'static str, problems: &[String], ok_detail: String) -> CheckResult {
    if problems.is_empty() {
        return CheckResult {
            name,
            passed: true,
            detail: ok_detail,
        };
    }
    let quoted: Vec<String> = problems.iter().take(QUOTED).cloned().collect();
    CheckResult {
        name,
        passed: false,
        detail: format!("{} problem(s): {}", problems.len(), quoted.join("; ")),
    }
}

/// A pause of one replica and what the other replicas took over meanwhile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseRecord {
    /// Replica index.
    pub replica: usize,
    /// Its log file during the pause (index into the replica's generations).
    pub generation: u32,
    /// Commands it held (processing under its lease) when it was stopped.
    pub held: usize,
    /// Of those, the ones another worker claimed while it was stopped: (command id, the paused
    /// replica's epoch, its attempt count).
    pub taken_over: Vec<(String, i64, i64)>,
}

/// A wall-clock step of one replica (libfaketime) and what a process with that replica's
/// environment read during it and after it was stepped back, as offsets from the harness's
/// clock in seconds (`None`: not read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClockStepRecord {
    /// Replica index.
    pub replica: usize,
    /// The step, in seconds (±600).
    pub step: i64,
    /// Offset read while stepped.
    pub observed: Option<i64>,
    /// Offset read after the step back.
    pub observed_back: Option<i64>,
}

/// Seconds an observed offset may differ from the one written (whole seconds on both sides).
const CLOCK_TOLERANCE: i64 = 2;

/// Every wall-clock step must have taken effect, and been undone: otherwise the run did not
/// test what the schedule says (libfaketime not loaded, the file not re-read).
pub fn clock_steps_took_effect(steps: &[ClockStepRecord]) -> CheckResult {
    let mut problems = Vec::new();
    for s in steps {
        let close = |seen: Option<i64>, want: i64| {
            seen.is_some_and(|seen| (seen - want).abs() <= CLOCK_TOLERANCE)
        };
        if !close(s.observed, s.step) {
            problems.push(format!(
                "replica {}: stepped {:+} s, read {:?}",
                s.replica, s.step, s.observed
            ));
        }
        if !close(s.observed_back, 0) {
            problems.push(format!(
                "replica {}: stepped back to 0 s, read {:?}",
                s.replica, s.observed_back
            ));
        }
    }
    let forward = steps.iter().filter(|s| s.step > 0).count();
    check(
        "every wall-clock step took effect and was undone",
        &problems,
        if steps.is_empty() {
            "NOT EXERCISED: no wall-clock step (no libfaketime, SQLite, `--faults pauses` or `none`, or a short run)".to_owned()
        } else {
            format!(
                "{} steps ({forward} forward, {} back), each read by the replica's libfaketime environment",
                steps.len(),
                steps.len() - forward
            )
        },
    )
}

/// A failover of the formation (`pg_autoctl perform failover`, or the monitor's promotion
/// after the primary crashed): the primary's port before and after, or why it failed; and
/// what the outbox held afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverRecord {
    /// What moved the primary (`pg_failover`, `pg_primary_kill`).
    pub cause: &'static str,
    /// `Ok((before, after))` ports of the primary, or the failure.
    pub outcome: Result<(String, String), String>,
    /// How many distinct commands the admin API had acknowledged (202) when the fault began.
    pub acknowledged: usize,
    /// Of those, the idempotency keys the new primary's outbox lacks, or why it could not be
    /// read.
    pub missing: Result<Vec<String>, String>,
}

/// Every failover must have moved the primary, and a run on a formation must have had one:
/// otherwise the run did not test what the schedule says.
pub fn failovers_moved_the_primary(failovers: &[FailoverRecord]) -> CheckResult {
    let mut problems = Vec::new();
    if failovers.is_empty() {
        problems.push(
            "no failover happened on the formation (the run ended first: give it a longer --duration)"
                .to_owned(),
        );
    }
    for (i, failover) in failovers.iter().enumerate() {
        match &failover.outcome {
            Ok((before, after)) if before != after => {}
            Ok((before, _)) => problems.push(format!(
                "failover {}: the primary stayed on port {before}",
                i + 1
            )),
            Err(error) => {
                problems.push(format!("failover {} ({}): {error}", i + 1, failover.cause))
            }
        }
    }
    check(
        "every failover moved the primary",
        &problems,
        if failovers.is_empty() {
            String::new()
        } else {
            let crashes = failovers
                .iter()
                .filter(|f| f.cause != "pg_failover")
                .count();
            format!(
                "{} failover(s), {crashes} of them after a crash of the primary; the replicas followed each (see \"every command settled\")",
                failovers.len()
            )
        },
    )
}

/// Every command the admin API acknowledged with 202 before a failover began is in the new
/// primary's outbox after it (issue 30): with synchronous replication an acknowledged intake
/// survives the loss of the server that took it.
pub fn acknowledged_survived_failovers(failovers: &[FailoverRecord]) -> CheckResult {
    let mut problems = Vec::new();
    let mut checked = 0usize;
    for (i, failover) in failovers.iter().enumerate() {
        if failover.outcome.is_err() {
            continue;
        }
        match &failover.missing {
            Ok(missing) if missing.is_empty() => checked += failover.acknowledged,
            Ok(missing) => problems.push(format!(
                "failover {} ({}): {} of {} acknowledged commands are not in the outbox, e.g. {}",
                i + 1,
                failover.cause,
                missing.len(),
                failover.acknowledged,
                missing
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Err(e) => problems.push(format!(
                "failover {} ({}): the outbox could not be read: {e}",
                i + 1,
                failover.cause
            )),
        }
    }
    check(
        "every command acknowledged with 202 is in the outbox after every failover",
        &problems,
        if checked == 0 {
            "NOT EXERCISED: no command had been acknowledged when a failover began".to_owned()
        } else {
            format!(
                "{checked} acknowledgements checked over {} failover(s)",
                failovers.len()
            )
        },
    )
}

/// Every takeover of a paused replica's command must show in that replica's log as a dropped
/// attempt of the same command and epoch (`LEASE_LOST`): its late settle was refused. An attempt
/// that had already ended on a storage error before the pause (logged as such, same attempt
/// count) had nothing left to settle and is excused. `logs` holds the log of each (replica,
/// generation).
pub fn late_settles_refused(
    pauses: &[PauseRecord],
    logs: &BTreeMap<(usize, u32), LeaseLog>,
) -> CheckResult {
    let mut problems = Vec::new();
    let mut takeovers = 0usize;
    let mut excused = 0usize;
    for pause in pauses {
        let log = logs.get(&(pause.replica, pause.generation));
        for (id, epoch, attempt) in &pause.taken_over {
            takeovers += 1;
            if log.is_some_and(|l| l.unsettled.contains(&(id.clone(), *attempt))) {
                excused += 1;
                continue;
            }
            if !log.is_some_and(|l| l.dropped.contains(&(id.clone(), *epoch))) {
                problems.push(format!(
                    "replica {} (generation {}) was paused holding {id} at epoch {epoch}, another worker took it over, and its log shows no LEASE_LOST for that attempt: its late settle was not refused",
                    pause.replica, pause.generation
                ));
            }
        }
    }
    let dropped: usize = logs.values().map(|l| l.dropped.len()).sum();
    let renewals: u64 = logs.values().map(|l| l.renewals_refused).sum();
    check(
        "every late settle of a paused owner was refused (LEASE_LOST)",
        &problems,
        if takeovers == 0 {
            format!(
                "NOT EXERCISED: no command of a paused replica was taken over, so no late settle was tested (run a longer --duration, or --faults pauses); {dropped} attempts dropped with LEASE_LOST in all logs, {renewals} renewals refused"
            )
        } else {
            format!(
                "{takeovers} takeovers of paused replicas, each refused ({excused} of attempts that had already ended on a storage error); {dropped} attempts dropped with LEASE_LOST in all logs, {renewals} renewals refused"
            )
        },
    )
}

/// The process id inside a lease owner `<prefix>-<pid>-<uuid>`.
pub fn owner_pid(owner: &str) -> Option<u32> {
    let mut parts = owner.rsplitn(3, '-');
    parts.next()?;
    parts.next()?.parse().ok()
}

/// Commands still leased (an owner set) whose owner is not a running replica, and commands
/// still processing.
pub fn no_orphan_leases(commands: &[Value], live_pids: &BTreeSet<u32>) -> CheckResult {
    let mut problems = Vec::new();
    let mut leased = 0usize;
    for c in commands {
        let status = c["status"].as_str().unwrap_or("?");
        if let Some(owner) = c["lease_owner"].as_str() {
            leased += 1;
            if !owner_pid(owner).is_some_and(|pid| live_pids.contains(&pid)) {
                problems.push(format!(
                    "{} ({status}) is leased by {owner}, which is no running replica",
                    c["id"]
                ));
            }
        } else if status == "processing" {
            problems.push(format!("{} is processing without an owner", c["id"]));
        }
    }
    check(
        "no leased outbox row without a live owner",
        &problems,
        format!(
            "{} commands, {leased} leased by a running replica",
            commands.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clock_steps_must_take_effect_and_be_undone() {
        let ok = ClockStepRecord {
            replica: 1,
            step: -600,
            observed: Some(-599),
            observed_back: Some(0),
        };
        assert!(clock_steps_took_effect(std::slice::from_ref(&ok)).passed);
        let ignored = ClockStepRecord {
            observed: Some(0),
            ..ok.clone()
        };
        assert!(!clock_steps_took_effect(&[ok.clone(), ignored]).passed);
        let stuck = ClockStepRecord {
            observed_back: None,
            ..ok
        };
        assert!(!clock_steps_took_effect(&[stuck]).passed);
        let none = clock_steps_took_effect(&[]);
        assert!(none.passed && none.detail.starts_with("NOT EXERCISED"));
    }

    #[test]
    fn owner_pid_is_the_second_last_part() {
        assert_eq!(owner_pid("tenantry-worker-3-4242-0123abcd"), Some(4242));
        assert_eq!(owner_pid("w-17-x"), Some(17));
        assert_eq!(owner_pid("nopid"), None);
    }

    #[test]
    fn a_takeover_without_lease_lost_in_the_paused_log_fails() {
        let pause = PauseRecord {
            replica: 1,
            generation: 2,
            held: 2,
            taken_over: vec![("c1".to_owned(), 3, 1), ("c2".to_owned(), 5, 4)],
        };
        let mut log = LeaseLog::default();
        log.dropped.insert(("c1".to_owned(), 3));
        let mut logs = BTreeMap::from([((1, 2), log.clone())]);
        let result = late_settles_refused(std::slice::from_ref(&pause), &logs);
        assert!(!result.passed);
        assert!(result.detail.contains("c2"), "{}", result.detail);
        // The same refusal in another generation's log does not count.
        logs.insert((1, 1), {
            let mut other = LeaseLog::default();
            other.dropped.insert(("c2".to_owned(), 5));
            other
        });
        assert!(!late_settles_refused(std::slice::from_ref(&pause), &logs).passed);
        // An attempt that ended on a storage error before the pause is excused.
        let mut ended = log.clone();
        ended.unsettled.insert(("c2".to_owned(), 4));
        logs.insert((1, 2), ended);
        assert!(late_settles_refused(std::slice::from_ref(&pause), &logs).passed);
        log.dropped.insert(("c2".to_owned(), 5));
        logs.insert((1, 2), log);
        assert!(late_settles_refused(&[pause], &logs).passed);
        let none = late_settles_refused(&[], &logs);
        assert!(
            none.passed && none.detail.starts_with("NOT EXERCISED"),
            "{}",
            none.detail
        );
    }

    #[test]
    fn leases_of_dead_owners_fail() {
        let commands = vec![
            json!({"id": "a", "status": "succeeded", "lease_owner": null}),
            json!({"id": "b", "status": "processing", "lease_owner": "w-10-u"}),
        ];
        assert!(no_orphan_leases(&commands, &BTreeSet::from([10])).passed);
        assert!(!no_orphan_leases(&commands, &BTreeSet::from([11])).passed);
        let ownerless = vec![json!({"id": "c", "status": "processing", "lease_owner": null})];
        assert!(!no_orphan_leases(&ownerless, &BTreeSet::new()).passed);
    }

    #[test]
    fn a_failover_that_did_not_move_the_primary_or_none_at_all_fails() {
        let moved = |a: &str, b: &str| FailoverRecord {
            cause: "pg_failover",
            acknowledged: 0,
            missing: Ok(Vec::new()),
            outcome: Ok((a.to_owned(), b.to_owned())),
        };
        assert!(
            failovers_moved_the_primary(&[moved("7001", "7002"), moved("7002", "7001")]).passed
        );
        let stayed = failovers_moved_the_primary(&[moved("7001", "7002"), moved("7002", "7002")]);
        assert!(!stayed.passed);
        assert!(
            stayed
                .detail
                .contains("failover 2: the primary stayed on port 7002"),
            "{}",
            stayed.detail
        );
        let failed = failovers_moved_the_primary(&[FailoverRecord {
            cause: "pg_primary_kill",
            acknowledged: 0,
            missing: Ok(Vec::new()),
            outcome: Err("pg_autoctl perform failover failed".to_owned()),
        }]);
        assert!(!failed.passed);
        assert!(
            !failovers_moved_the_primary(&[]).passed,
            "a formation run without a failover"
        );
    }

    #[test]
    fn an_acknowledged_command_missing_after_a_failover_fails_the_run() {
        let record = |acknowledged: usize, missing: Result<Vec<String>, String>| FailoverRecord {
            cause: "pg_primary_kill",
            outcome: Ok(("7001".to_owned(), "7002".to_owned())),
            acknowledged,
            missing,
        };
        let kept = acknowledged_survived_failovers(&[record(40, Ok(Vec::new()))]);
        assert!(kept.passed);
        assert!(
            kept.detail.starts_with("40 acknowledgements"),
            "{}",
            kept.detail
        );
        let lost = acknowledged_survived_failovers(&[
            record(40, Ok(Vec::new())),
            record(90, Ok(vec!["demo-x-create-cs-7".to_owned()])),
        ]);
        assert!(!lost.passed);
        assert!(
            lost.detail
                .contains("failover 2 (pg_primary_kill): 1 of 90")
                && lost.detail.contains("demo-x-create-cs-7"),
            "{}",
            lost.detail
        );
        let unread = acknowledged_survived_failovers(&[record(5, Err("psql failed".to_owned()))]);
        assert!(!unread.passed);
        let idle = acknowledged_survived_failovers(&[record(0, Ok(Vec::new()))]);
        assert!(idle.passed && idle.detail.starts_with("NOT EXERCISED"));
    }
}
