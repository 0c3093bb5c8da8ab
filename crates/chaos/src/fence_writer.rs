//! `tenantry-chaos-fence-writer`: one process of the chaos harness's fenced-writes workload
//! (docs/reliability.md). It runs the `ScopedWrites` runtime on the run's database (host
//! storage, shared with the other writer process) and, in a loop, increments a counter in one
//! of a few shared scopes inside a fenced run: read the counter, wait a little, then write the
//! next value through `ctx.mutate` (a write-ahead intent first, then 20 ms before the store
//! write, as a slow remote call). Each committed value is appended to its journal (`<scope> <value> <owner>`).
//!
//! The harness SIGKILLs writers mid-run. The runtime must keep every scope's runs serial across
//! the processes (a value committed twice means two holders at once), take over a killed
//! writer's plain claim once it expired, and leave a fence only where a killed writer had
//! dispatched a write (its write-ahead intent, expired) — never lose or repeat an increment.
//! Claims are short (dispatch deadline 1 s + margin 1 s) so takeovers happen within seconds.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rand::Rng as _;
use serde_json::json;
use tenantry_engine::scoped_writes::{FenceConfig, FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{Binding, ScopeIdentity};
use tenantry_ports::host_storage::HostStorage as _;
use tenantry_store_seaorm::SeaOrmHostStorage;

/// The binding every writer writes under.
const BINDING: &str = "chaos-fence-writers";

/// Options of one writer process.
#[derive(Debug, Parser)]
#[command(name = "tenantry-chaos-fence-writer")]
struct Args {
    /// The run's database (migrated already).
    #[arg(long)]
    database: String,
    /// Journal of committed values (appended).
    #[arg(long)]
    journal: PathBuf,
    /// Scopes shared by the writers.
    #[arg(long, default_value_t = 6)]
    scopes: u32,
    /// This process's owner id in its claims (unique per process).
    #[arg(long)]
    owner: String,
}

/// The counter key of scope `k` (host storage, the writers' binding).
fn counter_key(k: u32) -> String {
    format!("chaos.counter.{k}")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let db = match tenantry_store_seaorm::connect_existing(&args.database, 4).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("fence writer: {e}");
            return ExitCode::from(2);
        }
    };
    let Ok(binding) = Binding::parse(BINDING) else {
        return ExitCode::from(2);
    };
    let storage = Arc::new(SeaOrmHostStorage::new(&db));
    let config = FenceConfig::with_deadline(Duration::from_secs(1))
        .with_claim_margin(Duration::from_secs(1))
        .with_owner(args.owner.clone());
    let writes = ScopedWrites::with_config(
        storage.clone(),
        Arc::new(tenantry_ports::clock::SystemClock),
        config,
    );
    let mut journal = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.journal)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fence writer: {}: {e}", args.journal.display());
            return ExitCode::from(2);
        }
    };
    loop {
        let k = rand::rng().random_range(0..args.scopes.max(1));
        let scope = ScopeIdentity::object(format!("chaos-scope-{k}"));
        let key = counter_key(k);
        let store = storage.clone();
        let b = binding.clone();
        let result = writes
            .run(&binding, &scope, FenceMode::Enforce, |ctx| async move {
                let current = store
                    .get(&b, &key)
                    .await
                    .map_err(ScopedWriteError::Operation)?
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0);
                // A read-modify-write: two holders at once would commit one value twice. The
                // write is dispatched under a write-ahead intent and takes a while (as a remote
                // call would), so a SIGKILL often lands after the intent: its scope is then
                // fenced (outcome unknown), while a kill before it leaves a plain claim.
                tokio::time::sleep(Duration::from_millis(10)).await;
                let set = store.clone();
                let (b, key) = (b.clone(), key.clone());
                ctx.mutate("chaos increment", async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    set.set(&b, &key, &json!(current + 1)).await
                })
                .await?;
                Ok(current + 1)
            })
            .await;
        match result {
            Ok(value) => {
                let _ = writeln!(journal, "{k} {value} {}", args.owner);
            }
            Err(ScopedWriteError::Fenced { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                eprintln!("fence writer: scope {k}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
