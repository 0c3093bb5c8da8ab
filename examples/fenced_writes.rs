//! Fenced writes to a remote service of your own.
//!
//! Every mutation of the remote runs inside `ScopedWrites::run` for its (installation binding,
//! scope). A mutation whose outcome is unknown (the request went out, no answer came back)
//! fences its scope in the database: later writes to that scope fail closed until an operator
//! has reconciled with the remote and clears the fence. Other scopes keep working. A fence
//! cannot be cleared while its request may still land at the remote (until the dispatch
//! deadline plus the claim margin after it was sent); this example shortens both to half a
//! second so it does not wait the default three minutes.
//!
//! Run: `cargo run -p tenantry-examples --example fenced_writes`

use std::sync::Arc;
use std::sync::Mutex;

use std::time::Duration;

use tenantry_engine::scoped_writes::admin::{ClearTarget, FenceAdminError};
use tenantry_engine::scoped_writes::{FenceConfig, FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::ClearRefused;
use tenantry_fence::{Binding, DispatchFailure, DispatchOutcome, ScopeIdentity};
use tenantry_ports::clock::SystemClock;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;

/// Your remote client's error: says whether the request left the process and whether an
/// answer came back, which is all the fence needs to know.
#[derive(Debug, thiserror::Error)]
enum PushError {
    #[error("connection refused")]
    Refused,
    #[error("the remote answered {0}")]
    Status(u16),
    #[error("timed out after sending")]
    TimedOut,
}

impl DispatchFailure for PushError {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        match self {
            Self::Refused => DispatchOutcome::NotDispatched,
            Self::Status(status) => DispatchOutcome::answered(*status),
            Self::TimedOut => DispatchOutcome::OutcomeUnknown,
        }
    }
}

/// Stands in for your HTTP client: "pushes" a configuration to a knowledge base.
#[derive(Default)]
struct ConfigService {
    next_failure: Mutex<Option<PushError>>,
}

impl ConfigService {
    fn fail_next(&self, failure: PushError) {
        *self.next_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(failure);
    }

    async fn push(&self, knowledge_base: &str, config: &str) -> Result<(), PushError> {
        let failure = self
            .next_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(failure) = failure {
            return Err(failure);
        }
        println!("  remote: {knowledge_base} <- {config}");
        Ok(())
    }
}

/// One fenced write: the scope is the knowledge base.
async fn push_config(
    writes: &ScopedWrites<SeaOrmHostStorage>,
    remote: &Arc<ConfigService>,
    binding: &Binding,
    knowledge_base: &str,
    config: &str,
) -> Result<(), ScopedWriteError<PushError>> {
    let scope = ScopeIdentity::object(knowledge_base);
    writes
        .run(binding, &scope, FenceMode::Enforce, |ctx| {
            let remote = remote.clone();
            let (kb, config) = (knowledge_base.to_owned(), config.to_owned());
            async move {
                ctx.dispatch(
                    "push config",
                    async move { remote.push(&kb, &config).await },
                )
                .await
            }
        })
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

/// The example; also run by `cargo test` (see the test at the end).
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("host.db").display());
    let db = tenantry_store_seaorm::connect(&url, 4).await?;
    // Defaults: a 150 s dispatch deadline and a 30 s margin. Shortened here (see above).
    let writes = ScopedWrites::with_config(
        Arc::new(SeaOrmHostStorage::new(&db)),
        Arc::new(SystemClock),
        FenceConfig::with_deadline(Duration::from_millis(500))
            .with_claim_margin(Duration::from_millis(500)),
    );
    let remote = Arc::new(ConfigService::default());
    let binding = Binding::parse("installation-1")?;

    println!("1. a write with a known outcome");
    push_config(&writes, &remote, &binding, "kb-1", "v1").await?;

    println!("2. refused or answered with an error: the outcome is known, nothing is fenced");
    remote.fail_next(PushError::Refused);
    let refused = push_config(&writes, &remote, &binding, "kb-1", "v2").await;
    assert!(matches!(
        refused,
        Err(ScopedWriteError::Operation(PushError::Refused))
    ));
    remote.fail_next(PushError::Status(409));
    let answered = push_config(&writes, &remote, &binding, "kb-1", "v2").await;
    assert!(matches!(
        answered,
        Err(ScopedWriteError::Operation(PushError::Status(409)))
    ));

    println!("3. a write whose outcome is unknown fences kb-1");
    remote.fail_next(PushError::TimedOut);
    match push_config(&writes, &remote, &binding, "kb-1", "v2").await {
        Err(unknown @ ScopedWriteError::OutcomeUnknown { .. }) => println!("  {unknown}"),
        other => return Err(format!("expected an unknown outcome, got {other:?}").into()),
    }

    println!("4. kb-1 fails closed; kb-2 keeps working");
    match push_config(&writes, &remote, &binding, "kb-1", "v3").await {
        Err(fenced @ ScopedWriteError::Fenced { .. }) => println!("  kb-1: {fenced}"),
        other => return Err(format!("expected a fenced scope, got {other:?}").into()),
    }
    push_config(&writes, &remote, &binding, "kb-2", "v1").await?;

    println!("5. the fence cannot be cleared while the timed-out request may still land");
    let kb1 = ClearTarget::Scope(ScopeIdentity::object("kb-1"));
    match writes.clear(&binding, &kb1, "too early").await {
        Err(early @ FenceAdminError::Refused(ClearRefused::RequestMayLand { .. })) => {
            println!("  {early}");
        }
        other => return Err(format!("expected the clear to be refused, got {other:?}").into()),
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    println!("6. after reconciling with the remote, an operator clears the fence");
    let cleared = writes
        .clear(
            &binding,
            &ClearTarget::Scope(ScopeIdentity::object("kb-1")),
            "checked the remote: v2 landed",
        )
        .await?;
    assert!(cleared.cleared);
    push_config(&writes, &remote, &binding, "kb-1", "v3").await?;
    writes.settled().await;
    println!("done");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread")]
    async fn the_example_runs() {
        if let Err(error) = super::run().await {
            panic!("the example failed: {error}");
        }
    }
}
