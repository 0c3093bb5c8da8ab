//! Databases per run and the command fixtures the lifecycle benchmarks drain.
//!
//! Rows are planned with the pure intake functions of `tenantry_lifecycle` (so a command is
//! exactly what intake would enqueue) and bulk loaded in multi-row statements.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use tenantry_kernel::{
    CommandId, ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, OperationId, TenantId,
};
use tenantry_lifecycle::intake::{CreateControlSpace, NewCommand, NewIds, RequestRevocation};
use tenantry_lifecycle::{ControlSpace, ControlSpaceState};
use tenantry_store_seaorm::{Database, bench as store_bench, connect, throwaway};

use crate::BenchResult;

/// Where the benchmark databases live.
#[derive(Debug, Clone)]
pub enum Target {
    /// A PostgreSQL server; each run creates (and drops) its own database on it.
    Postgres {
        /// URL of a database on the server with the right to create databases.
        server_url: String,
    },
    /// SQLite files in a temporary folder.
    Sqlite,
}

impl Target {
    /// `postgres` or `sqlite`.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Postgres { .. } => "postgres",
            Self::Sqlite => "sqlite",
        }
    }

    /// A fresh migrated database named after `name`, with a pool of `pool` connections.
    pub async fn fresh(&self, name: &str, pool: u32) -> BenchResult<BenchDb> {
        match self {
            Self::Postgres { server_url } => {
                let database = format!("tenantry_bench_{name}");
                let url = throwaway::create_postgres_database(server_url, &database).await?;
                let db = connect(&url, pool).await?;
                Ok(BenchDb {
                    db,
                    cleanup: Cleanup::Postgres {
                        server_url: server_url.clone(),
                        database,
                    },
                })
            }
            Self::Sqlite => {
                let dir = tempfile::tempdir()?;
                let path: PathBuf = dir.path().join(format!("{name}.db"));
                let db = connect(&format!("sqlite://{}?mode=rwc", path.display()), pool).await?;
                Ok(BenchDb {
                    db,
                    cleanup: Cleanup::Sqlite(dir),
                })
            }
        }
    }
}

/// A database of one run; [`BenchDb::drop_database`] removes it.
#[derive(Debug)]
pub struct BenchDb {
    /// The migrated database.
    pub db: Database,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    Postgres {
        server_url: String,
        database: String,
    },
    Sqlite(tempfile::TempDir),
}

impl BenchDb {
    /// Closes the pool and removes the database (PostgreSQL) or its folder (SQLite).
    pub async fn drop_database(self) -> BenchResult<()> {
        self.db.conn.close().await?;
        match self.cleanup {
            Cleanup::Postgres {
                server_url,
                database,
            } => throwaway::drop_postgres_database(&server_url, &database).await?,
            Cleanup::Sqlite(dir) => dir.close()?,
        }
        Ok(())
    }
}

/// What the fixture commands do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Revoke a grant of an active control space: claim, call, ack (the closest to a no-op job).
    Revoke,
    /// Provision a new control space: claim, read, call, read, compare-and-set to active, ack.
    Provision,
}

impl Workload {
    /// `revoke` or `provision`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Revoke => "revoke",
            Self::Provision => "provision",
        }
    }
}

/// Tenants the fixture control spaces are spread over.
const TENANTS: usize = 64;

/// Plans commands `first..first + count` of `workload`, enqueued at `now`, with the control
/// spaces they need, spread over 64 tenants.
pub fn plan(
    workload: Workload,
    first: usize,
    count: usize,
    now: DateTime<Utc>,
) -> BenchResult<(Vec<ControlSpace>, Vec<NewCommand>)> {
    plan_for(workload, first, count, now, TENANTS)
}

/// [`plan`] over `tenants` tenants (`tenant-0` ..; command `i` is tenant `i % tenants`'s).
pub fn plan_for(
    workload: Workload,
    first: usize,
    count: usize,
    now: DateTime<Utc>,
    tenants: usize,
) -> BenchResult<(Vec<ControlSpace>, Vec<NewCommand>)> {
    let mut spaces = Vec::with_capacity(count);
    let mut commands = Vec::with_capacity(count);
    for i in first..first + count {
        let tenant_id = TenantId::parse(format!("tenant-{}", i % tenants.max(1)))?;
        let control_space_id = ControlSpaceId::parse(format!("cs-{i}"))?;
        let create = CreateControlSpace {
            tenant_id: tenant_id.clone(),
            control_space_id: control_space_id.clone(),
            idempotency_key: IdempotencyKey::parse(format!("create-{i}"))?,
            name: format!("Space {i}"),
            slug: format!("space-{i}"),
            icon: String::new(),
            description: "benchmark fixture".into(),
            model_intent: None,
            profile_intent: None,
        }
        .plan(ids("p", i)?, now)?;
        let tenantry_lifecycle::intake::ControlSpaceWrite::Insert(mut space) = create.control_space
        else {
            return Err("create plan without an insert".into());
        };
        match workload {
            Workload::Provision => {
                spaces.push(space);
                commands.push(create.command);
            }
            Workload::Revoke => {
                // The provision has completed: active with a knowledge space.
                space.state = ControlSpaceState::Active;
                space.knowledge_space_id = Some(KnowledgeSpaceId::parse(format!(
                    "ks-{}",
                    space.provisioning_key.as_str()
                ))?);
                space.knowledge_space_revision = 1;
                space.resource_version = 2;
                let revoke = RequestRevocation {
                    tenant_id,
                    control_space_id,
                    grant_id: GrantId::parse(format!("grant-{i}"))?,
                    reason_code: "benchmark".into(),
                    idempotency_key: IdempotencyKey::parse(format!("revoke-{i}"))?,
                }
                .plan(Some(&space), ids("r", i)?, now)?;
                space.last_revoke_sequence += 1;
                spaces.push(space);
                commands.push(revoke.command);
            }
        }
    }
    Ok((spaces, commands))
}

/// The request of intake for control space `<prefix>-<i>` of `tenant` (key `<prefix>-<i>`), as
/// the latency and fairness parts enqueue them one at a time.
pub fn create_request(tenant: &str, prefix: &str, i: usize) -> BenchResult<CreateControlSpace> {
    Ok(CreateControlSpace {
        tenant_id: TenantId::parse(tenant)?,
        control_space_id: ControlSpaceId::parse(format!("{prefix}-{i}"))?,
        idempotency_key: IdempotencyKey::parse(format!("{prefix}-{i}"))?,
        name: format!("Space {prefix} {i}"),
        slug: format!("{prefix}-{i}"),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    })
}

fn ids(prefix: &str, i: usize) -> BenchResult<NewIds> {
    Ok(NewIds {
        command_id: CommandId::parse(format!("cmd-{prefix}-{i}"))?,
        operation_id: OperationId::parse(format!("op-{prefix}-{i}"))?,
    })
}

/// Plans and bulk loads `count` commands of `workload` in chunks of `chunk`, so memory stays
/// bounded however many are loaded.
pub async fn load(
    db: &Database,
    workload: Workload,
    count: usize,
    chunk: usize,
    now: DateTime<Utc>,
) -> BenchResult<()> {
    load_for(db, workload, count, chunk, now, TENANTS).await
}

/// [`load`] over `tenants` tenants (see [`plan_for`]).
pub async fn load_for(
    db: &Database,
    workload: Workload,
    count: usize,
    chunk: usize,
    now: DateTime<Utc>,
    tenants: usize,
) -> BenchResult<()> {
    let mut first = 0;
    while first < count {
        let n = chunk.min(count - first);
        let (spaces, commands) = plan_for(workload, first, n, now, tenants)?;
        store_bench::bulk_load_lifecycle(db, &spaces, &commands).await?;
        first += n;
    }
    store_bench::analyze(db).await?;
    Ok(())
}
