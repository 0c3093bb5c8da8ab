//! The demo's workload: a seeded plan of control spaces and what happens to each, driven
//! through the admin API over HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::client::{AdminClient, ClientError};

/// Control spaces at scale 1.0.
pub const CONTROL_SPACES_AT_SCALE_1: f64 = 300.0;
/// Tenants at scale 1.0.
pub const TENANTS_AT_SCALE_1: f64 = 5.0;
/// Control spaces driven at once.
const CONCURRENCY: usize = 24;
/// Interval of state polls while waiting for a control space to become active.
const POLL: Duration = Duration::from_millis(200);

/// What happens to a control space after it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Stays active.
    Keep,
    /// Deleted right after the create request (usually before it is provisioned).
    DeleteEarly,
    /// Deleted once it is active.
    DeleteLate,
    /// Once active, this many grants are revoked; it stays active.
    Revoke(u32),
}

impl Fate {
    /// Whether the control space ends deleted.
    pub fn deleted(self) -> bool {
        matches!(self, Fate::DeleteEarly | Fate::DeleteLate)
    }
}

/// One planned control space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Tenant id.
    pub tenant: String,
    /// Control space id.
    pub control_space: String,
    /// What happens to it.
    pub fate: Fate,
    /// Whether the create request is sent twice with the same idempotency key.
    pub replay: bool,
}

/// The plan of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Tenant ids.
    pub tenants: Vec<String>,
    /// Control spaces, in creation order.
    pub spaces: Vec<Planned>,
    /// Prefix of every idempotency key of this run.
    pub key_prefix: String,
}

/// A seeded plan at `scale`; `run` (a nonce) keeps ids of several runs on one database apart.
pub fn plan(seed: u64, scale: f64, run: &str) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let tenants = ((TENANTS_AT_SCALE_1 * scale).round() as usize).max(1);
    let spaces = ((CONTROL_SPACES_AT_SCALE_1 * scale).round() as usize).max(4);
    let tenants: Vec<String> = (0..tenants).map(|i| format!("t{i}-{run}")).collect();
    let spaces = (0..spaces)
        .map(|i| {
            let roll: f64 = rng.random();
            let fate = match i {
                // Small runs still meet every fate.
                0 => Fate::DeleteEarly,
                1 => Fate::DeleteLate,
                2 => Fate::Revoke(2),
                _ if roll < 0.15 => Fate::DeleteEarly,
                _ if roll < 0.35 => Fate::DeleteLate,
                _ if roll < 0.60 => Fate::Revoke(rng.random_range(1..=3)),
                _ => Fate::Keep,
            };
            Planned {
                tenant: tenants[rng.random_range(0..tenants.len())].clone(),
                control_space: format!("cs-{i:05}-{run}"),
                fate,
                replay: i == 3 || rng.random::<f64>() < 0.1,
            }
        })
        .collect();
    Plan {
        tenants,
        spaces,
        key_prefix: format!("demo-{run}"),
    }
}

/// What driving one control space did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Driven {
    /// Commands enqueued (replays not counted).
    pub commands: u64,
    /// Requests replayed with the same idempotency key and answered with the original.
    pub replays_matched: u64,
    /// What went wrong.
    pub problems: Vec<String>,
}

/// The idempotency keys of the requests the admin API answered with 202, in the order the
/// answers came; clones share one list. The chaos harness reads it before a failover and
/// checks afterwards that every key it held is in the outbox.
#[derive(Debug, Clone, Default)]
pub struct Acknowledged(Arc<std::sync::Mutex<Vec<String>>>);

impl Acknowledged {
    /// The keys acknowledged so far (a replayed request's key appears twice).
    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().map(|keys| keys.clone()).unwrap_or_default()
    }

    fn push(&self, key: &str) {
        if let Ok(mut keys) = self.0.lock() {
            keys.push(key.to_owned());
        }
    }
}

/// Drives every planned control space through the admin API; `enqueued` counts commands as
/// they are accepted (for the progress bar). Waits for a control space to be active before a
/// late deletion or a revocation, until `deadline`.
pub async fn drive(
    client: &AdminClient,
    plan: &Plan,
    enqueued: Arc<AtomicU64>,
    deadline: Instant,
) -> Driven {
    drive_recording(client, plan, enqueued, &Acknowledged::default(), deadline).await
}

/// [`drive`], adding the idempotency key of every request answered with 202 to
/// `acknowledged` as the answer arrives.
pub async fn drive_recording(
    client: &AdminClient,
    plan: &Plan,
    enqueued: Arc<AtomicU64>,
    acknowledged: &Acknowledged,
    deadline: Instant,
) -> Driven {
    let results: Vec<Driven> = futures::stream::iter(plan.spaces.iter())
        .map(|space| {
            let enqueued = enqueued.clone();
            let sink = Sink {
                client,
                acknowledged,
            };
            async move { drive_one(sink, &plan.key_prefix, space, &enqueued, deadline).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut total = Driven::default();
    for r in results {
        total.commands += r.commands;
        total.replays_matched += r.replays_matched;
        total.problems.extend(r.problems);
    }
    total
}

/// Where a driven request goes, and where its acknowledgement is written down.
#[derive(Clone, Copy)]
struct Sink<'a> {
    client: &'a AdminClient,
    acknowledged: &'a Acknowledged,
}

impl Sink<'_> {
    /// Sends one command request; `Ok` with the body when it was answered 202.
    async fn accepted(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: &str,
    ) -> Result<Value, String> {
        let answer = self
            .client
            .expect(202, method, path, body, Some(key))
            .await
            .map_err(|e: ClientError| e.to_string())?;
        self.acknowledged.push(key);
        Ok(answer)
    }
}

async fn drive_one(
    sink: Sink<'_>,
    prefix: &str,
    space: &Planned,
    enqueued: &AtomicU64,
    deadline: Instant,
) -> Driven {
    let mut driven = Driven::default();
    if let Err(problem) = drive_steps(sink, prefix, space, enqueued, deadline, &mut driven).await {
        driven.problems.push(format!(
            "{}/{}: {problem}",
            space.tenant, space.control_space
        ));
    }
    driven
}

async fn drive_steps(
    sink: Sink<'_>,
    prefix: &str,
    space: &Planned,
    enqueued: &AtomicU64,
    deadline: Instant,
    driven: &mut Driven,
) -> Result<(), String> {
    let cs = &space.control_space;
    let base = format!("/v1/tenants/{}/control-spaces", space.tenant);
    let body = json!({
        "control_space_id": cs,
        "name": format!("Space {cs}"),
        "slug": cs,
        "description": "created by tenantry demo",
    });
    let create_key = format!("{prefix}-create-{cs}");
    let client = sink.client;
    let created = sink
        .accepted(Method::POST, &base, Some(&body), &create_key)
        .await?;
    let count = |driven: &mut Driven| {
        driven.commands += 1;
        enqueued.fetch_add(1, Ordering::Relaxed);
    };
    count(driven);
    if space.replay {
        let again = sink
            .accepted(Method::POST, &base, Some(&body), &create_key)
            .await?;
        if again["operation_id"] == created["operation_id"] && again["replayed"] == json!(true) {
            driven.replays_matched += 1;
        } else {
            return Err(format!(
                "replay with the same Idempotency-Key answered {again} instead of the original {created}"
            ));
        }
    }
    let path = format!("{base}/{cs}");
    match space.fate {
        Fate::Keep => {}
        Fate::DeleteEarly | Fate::DeleteLate => {
            if matches!(space.fate, Fate::DeleteLate) {
                wait_active(client, &path, deadline).await?;
            }
            sink.accepted(
                Method::DELETE,
                &path,
                None,
                &format!("{prefix}-delete-{cs}"),
            )
            .await?;
            count(driven);
        }
        Fate::Revoke(grants) => {
            wait_active(client, &path, deadline).await?;
            for g in 0..grants {
                let revoke = format!("{path}/grants/grant-{g}/revocations");
                let body = json!({"reason_code": "demo_revocation"});
                sink.accepted(
                    Method::POST,
                    &revoke,
                    Some(&body),
                    &format!("{prefix}-revoke-{cs}-{g}"),
                )
                .await?;
                count(driven);
            }
        }
    }
    Ok(())
}

async fn wait_active(client: &AdminClient, path: &str, deadline: Instant) -> Result<(), String> {
    loop {
        let body = client
            .expect(200, Method::GET, path, None, None)
            .await
            .map_err(|e| e.to_string())?;
        if body["state"] == "active" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "still {} when the demo timed out",
                body["state"].as_str().unwrap_or("?")
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Every command of `tenants`, paging through `GET /v1/commands`.
///
/// # Errors
/// The client's error.
pub async fn commands_of(
    client: &AdminClient,
    tenants: &[String],
    status: Option<&str>,
) -> Result<Vec<Value>, ClientError> {
    let mut all = Vec::new();
    for tenant in tenants {
        let mut after: Option<String> = None;
        loop {
            let mut path = format!("/v1/commands?tenant_id={tenant}&limit=1000");
            if let Some(s) = status {
                path.push_str(&format!("&status={s}"));
            }
            if let Some(a) = &after {
                path.push_str(&format!("&after={a}"));
            }
            let page = client.expect(200, Method::GET, &path, None, None).await?;
            if let Some(items) = page["items"].as_array() {
                all.extend(items.iter().cloned());
            }
            match page["next_after"].as_str() {
                Some(next) => after = Some(next.to_owned()),
                None => break,
            }
        }
    }
    Ok(all)
}

/// How many commands of `tenants` are not settled yet (pending or processing).
///
/// # Errors
/// The client's error.
pub async fn open_commands(client: &AdminClient, tenants: &[String]) -> Result<u64, ClientError> {
    // One listing of every command, counted by status: two listings (pending, then
    // processing) could both miss a command that moved from processing back to pending
    // between them, and report "settled" too early.
    let open = commands_of(client, tenants, None)
        .await?
        .iter()
        .filter(|c| matches!(c["status"].as_str(), Some("pending" | "processing")))
        .count();
    Ok(open as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_seeded_and_meets_every_fate() {
        let a = plan(7, 0.05, "r");
        assert_eq!(a, plan(7, 0.05, "r"));
        assert_ne!(a, plan(8, 0.05, "r"));
        assert_eq!(a.spaces.len(), 15);
        for fate in [Fate::DeleteEarly, Fate::DeleteLate, Fate::Revoke(2)] {
            assert!(a.spaces.iter().any(|s| s.fate == fate), "{fate:?}");
        }
        assert!(a.spaces.iter().any(|s| s.replay));
        let full = plan(1, 1.0, "r");
        assert_eq!(full.spaces.len(), 300);
        assert_eq!(full.tenants.len(), 5);
    }
}
