//! Part `intake`: how fast commands enter the outbox through `CommandIntake` (issue 14,
//! docs/benchmarks.md "Bulk intake").
//!
//! On a fresh database, `--commands` provision requests (new control spaces) go in two ways:
//! `submit_many` in batches of `--batch` (the store writes each batch with multi-row inserts
//! in one transaction), and `submit` one request at a time (one transaction each) for
//! `--single` of them. Sequential calls from one task, as the peers' bulk enqueue in
//! `../shared/peer-bench` (1,000 jobs per call): commands per second of each.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tenantry_engine::lifecycle::{CommandIntake, IntakeRequest, SystemClock};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

use crate::fixtures::Target;
use crate::lifecycle::round1;
use crate::{BenchResult, emit};

/// A provision request of control space `n` (`prefix` keeps runs apart).
fn request(prefix: &str, n: usize) -> BenchResult<IntakeRequest> {
    Ok(CreateControlSpace {
        tenant_id: TenantId::parse(format!("tenant-{}", n % 100))?,
        control_space_id: ControlSpaceId::parse(format!("{prefix}-{n}"))?,
        idempotency_key: IdempotencyKey::parse(format!("{prefix}-key-{n}"))?,
        name: format!("Space {n}"),
        slug: format!("space-{n}"),
        icon: String::new(),
        description: "bench".into(),
        model_intent: None,
        profile_intent: None,
    }
    .into())
}

/// Runs the part.
pub async fn run(target: &Target, commands: usize, batch: usize, single: usize) -> BenchResult<()> {
    let batch = batch.max(1);
    let bench = target.fresh("intake", 2).await?;
    let store = SeaOrmLifecycleStore::new(&bench.db);
    let intake = CommandIntake::new(store, Arc::new(SystemClock));

    let requests = (0..commands)
        .map(|n| request("bulk", n))
        .collect::<BenchResult<Vec<_>>>()?;
    let started = Instant::now();
    let mut created = 0usize;
    for chunk in requests.chunks(batch) {
        for answer in intake.submit_many(chunk.to_vec()).await {
            if answer?.replayed {
                return Err("a bulk request was replayed on a fresh database".into());
            }
            created += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    emit(&json!({
        "part": "intake",
        "backend": target.backend_name(),
        "mode": format!("submit_many, {batch} per call"),
        "commands": created,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "commands_per_second": round1(created as f64 / seconds),
    }));

    let started = Instant::now();
    for n in 0..single {
        intake.submit(request("single", n)?).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    if single > 0 {
        emit(&json!({
            "part": "intake",
            "backend": target.backend_name(),
            "mode": "submit, one per call",
            "commands": single,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "commands_per_second": round1(single as f64 / seconds),
        }));
    }
    bench.drop_database().await
}
