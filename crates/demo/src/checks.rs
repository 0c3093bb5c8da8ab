//! The demo's checks of the end state against the reference remote's ground truth.

use std::collections::BTreeMap;

use futures::StreamExt;
use hyper::Method;
use serde_json::Value;
use tenantry_kernel::{ControlSpaceId, GrantId, KnowledgeSpaceId, TenantId};
use tenantry_lifecycle::DeletionPhase;
use tenantry_testkit::knowledge_fs::GroundTruth;

use super::client::AdminClient;
use super::workload::{self, Driven, Fate, Plan, Planned};

/// Most problems quoted per failed check.
const QUOTED: usize = 5;

/// One check and its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// What is checked.
    pub name: &'static str,
    /// Whether it held.
    pub passed: bool,
    /// Counts, or the first problems found.
    pub detail: String,
}

/// Checks plus the command counts they were computed from.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Commands of the run per (operation, status).
    pub commands: BTreeMap<(String, String), u64>,
    /// Every check, in order.
    pub checks: Vec<CheckResult>,
}

fn check(name: &'static str, problems: &[String], ok_detail: String) -> CheckResult {
    if problems.is_empty() {
        CheckResult {
            name,
            passed: true,
            detail: ok_detail,
        }
    } else {
        let mut detail = format!("{} problem(s): ", problems.len());
        detail.push_str(
            &problems
                .iter()
                .take(QUOTED)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
        );
        CheckResult {
            name,
            passed: false,
            detail,
        }
    }
}

/// Runs every check.
pub async fn run(
    client: &AdminClient,
    plan: &Plan,
    driven: &Driven,
    open_left: Option<u64>,
    truth: &GroundTruth,
) -> Outcome {
    let mut outcome = Outcome::default();
    outcome.checks.push(check(
        "workload accepted by the admin API",
        &driven.problems,
        format!("{} commands enqueued", driven.commands),
    ));

    // Every command settled.
    let mut problems = Vec::new();
    match workload::commands_of(client, &plan.tenants, None).await {
        Ok(commands) => {
            for c in &commands {
                let op = c["operation"].as_str().unwrap_or("?").to_owned();
                let status = c["status"].as_str().unwrap_or("?").to_owned();
                if status != "succeeded" && status != "superseded" {
                    problems.push(format!(
                        "{} {} of {} is {status} (attempts {}, last error {})",
                        op, c["id"], c["control_space_id"], c["attempt_count"], c["last_error"]
                    ));
                }
                *outcome.commands.entry((op, status)).or_default() += 1;
            }
            if commands.len() as u64 != driven.commands {
                problems.push(format!(
                    "{} commands listed, {} enqueued",
                    commands.len(),
                    driven.commands
                ));
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    if open_left != Some(0) && problems.is_empty() {
        problems.push(format!("open commands at the deadline: {open_left:?}"));
    }
    outcome.checks.push(check(
        "every command settled",
        &problems,
        format!("{0}/{0} settled", driven.commands),
    ));

    // Local state of every control space.
    let states: Vec<(Planned, Result<Value, String>)> =
        futures::stream::iter(plan.spaces.iter().cloned())
            .map(|space| async move {
                let path = format!(
                    "/v1/tenants/{}/control-spaces/{}",
                    space.tenant, space.control_space
                );
                let got = client
                    .expect(200, Method::GET, &path, None, None)
                    .await
                    .map_err(|e| e.to_string());
                (space, got)
            })
            .buffer_unordered(16)
            .collect()
            .await;
    let mut state_problems = Vec::new();
    let mut remote_problems = Vec::new();
    let mut deleted_problems = Vec::new();
    let mut revoke_problems = Vec::new();
    let (mut active, mut deleted, mut grants) = (0usize, 0usize, 0usize);
    // Deleted control spaces split by what the remote saw: a remote space whose deletion
    // completed, or no remote space at all (deleted before its provision was delivered).
    let (mut deleted_remotely, mut deleted_before_provisioned) = (0usize, 0usize);
    for (space, got) in &states {
        let name = format!("{}/{}", space.tenant, space.control_space);
        let local = match got {
            Ok(v) => v,
            Err(e) => {
                state_problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        let expected = if space.fate.deleted() {
            "deleted"
        } else {
            "active"
        };
        if local["state"] != expected {
            state_problems.push(format!(
                "{name} is {} (expected {expected})",
                local["state"]
            ));
            continue;
        }
        let (Ok(tenant), Ok(cs)) = (
            TenantId::parse(space.tenant.as_str()),
            ControlSpaceId::parse(space.control_space.as_str()),
        ) else {
            state_problems.push(format!("{name}: ids do not parse"));
            continue;
        };
        let remote = truth.spaces_by_control_space(&tenant, &cs);
        if space.fate.deleted() {
            deleted += 1;
            if remote.is_empty() {
                deleted_before_provisioned += 1;
            } else {
                deleted_remotely += 1;
            }
            for s in remote
                .iter()
                .filter(|s| s.deletion_phase != Some(DeletionPhase::Completed))
            {
                deleted_problems.push(format!(
                    "{name}: remote space {} is still {:?}",
                    s.knowledge_space_id, s.deletion_phase
                ));
            }
            continue;
        }
        active += 1;
        let live: Vec<_> = remote
            .iter()
            .filter(|s| s.deletion_phase.is_none())
            .collect();
        let local_id = local["knowledge_space_id"].as_str().unwrap_or("");
        match live.as_slice() {
            [one] if one.knowledge_space_id.as_str() == local_id => {}
            [one] => remote_problems.push(format!(
                "{name}: local knowledge space {local_id:?}, remote {}",
                one.knowledge_space_id
            )),
            many => remote_problems.push(format!(
                "{name}: {} live remote spaces (expected 1)",
                many.len()
            )),
        }
        if let Fate::Revoke(n) = space.fate
            && let Ok(ks) = KnowledgeSpaceId::parse(local_id)
        {
            for g in 0..n {
                grants += 1;
                let Ok(grant) = GrantId::parse(format!("grant-{g}")) else {
                    continue;
                };
                if truth.watermark(&ks, &grant) < 1 {
                    revoke_problems.push(format!("{name}: grant-{g} was never revoked remotely"));
                }
            }
        }
    }
    outcome.checks.push(check(
        "every control space reached its final state",
        &state_problems,
        format!("{active} active, {deleted} deleted"),
    ));
    outcome.checks.push(check(
        "one remote space per active control space",
        &remote_problems,
        format!("{active} active control spaces match the remote"),
    ));
    outcome.checks.push(check(
        "no remote space left for deleted control spaces",
        &deleted_problems,
        deletion_detail(deleted_remotely, deleted_before_provisioned),
    ));
    outcome.checks.push(check(
        "every revoked grant revoked remotely",
        &revoke_problems,
        format!("{grants} grants at or above their revoke sequence"),
    ));
    let duplicates = truth.check_exactly_once().err().unwrap_or_default();
    let effects = truth.effects();
    outcome.checks.push(check(
        "no duplicate remote effects",
        &duplicates,
        format!(
            "{} spaces created once each, {} revocations applied once each",
            effects.spaces_created, effects.revocations_applied
        ),
    ));
    let planned_replays = plan.spaces.iter().filter(|s| s.replay).count() as u64;
    let replay_problems = if driven.replays_matched == planned_replays {
        Vec::new()
    } else {
        vec![format!(
            "{} of {planned_replays} replays answered with the original operation",
            driven.replays_matched
        )]
    };
    outcome.checks.push(check(
        "replayed requests returned the original operation",
        &replay_problems,
        format!("{planned_replays} replays"),
    ));
    outcome
}

/// What the remote did for the deleted control spaces, as the demo's check reports it.
pub fn deletion_detail(deleted_remotely: usize, deleted_before_provisioned: usize) -> String {
    format!(
        "{deleted_remotely} deletions completed remotely, {deleted_before_provisioned} control spaces deleted before they were provisioned"
    )
}
