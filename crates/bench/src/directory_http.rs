//! Part `directory-http`: a snapshot through the real HTTP path, as a new replica of `serve`
//! projects it (issue 34). The test kit's reference directory serves a signed snapshot of
//! `workspaces` × `members` memberships from a child process (this binary's hidden
//! `directory-source` subcommand, so its memory is not counted here); this process runs the
//! engine's `DirectoryProjector` over the HTTP client (`HttpDirectoryProvider`: the body read
//! whole, its signature verified, then parsed) and the SQL projection store, and times its
//! `initialize` (fetch, verify, parse, apply: the time to ready). Memory is this process's
//! resident set: before (idle, nothing fetched), its peak during `initialize` (`VmHWM`, reset
//! first) and after it (the snapshot dropped).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tenantry_directory::{InstanceUuid, ProjectionLimits, ProjectorConfig};
use tenantry_engine::directory::DirectoryProjector;
use tenantry_ports::directory::DirectoryProjectionStore;
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};

use crate::directory::large_snapshot;
use crate::fixtures::Target;
use crate::lifecycle::round3;
use crate::{BenchResult, SnapshotSize, emit, rss};

/// The instance the reference directory serves.
const INSTANCE: &str = "inst-bench";

/// Largest answer the bench's client reads (the service's setting caps it at 1 GiB).
const MAX_BODY: u64 = 1024 * 1024 * 1024;

/// The hidden subcommand: serves the snapshot of `size` until stdin closes. Prints one JSON line on
/// stdout first: `{"url": …, "keys": [[id, hex], …], "body_bytes": …}`.
///
/// # Errors
/// When the server cannot start or stdout cannot be written.
pub async fn serve(size: SnapshotSize) -> BenchResult<()> {
    let instance = InstanceUuid::parse(INSTANCE)?;
    let (url, directory) = ReferenceDirectory::start(DirectoryServerConfig::new(instance)).await?;
    let snapshot = large_snapshot(size);
    directory.change(|model| {
        for workspace in snapshot.workspaces {
            model.upsert_workspace(workspace);
        }
    });
    let keys: Vec<(String, String)> = directory
        .trusted_public_keys()
        .into_iter()
        .map(|(id, key)| (id, key.iter().map(|b| format!("{b:02x}")).collect()))
        .collect();
    let mut out = std::io::stdout();
    writeln!(out, "{}", json!({ "url": url, "keys": keys }))?;
    out.flush()?;
    // Serve until the bench closes our stdin (or dies).
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    })
    .await?;
    directory.shutdown().await;
    Ok(())
}

/// Runs the part: one snapshot of `size` through HTTP into a fresh database of `target`.
///
/// # Errors
/// When the source cannot start, the database cannot be created or the projection fails.
pub async fn run(target: &Target, size: SnapshotSize) -> BenchResult<()> {
    let (workspaces, members) = (size.workspaces, size.members);
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "directory-source",
            "--workspaces",
            &workspaces.to_string(),
            "--members",
            &members.to_string(),
            "--accounts",
            &size.accounts.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("the source has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let source: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| format!("the directory source did not start ({e}): {line:?}"))?;
    let url = source["url"]
        .as_str()
        .ok_or("the source named no URL")?
        .to_owned();
    let mut keys = TrustedKeys::new();
    for pair in source["keys"]
        .as_array()
        .ok_or("the source named no keys")?
    {
        let (Some(id), Some(hex)) = (pair[0].as_str(), pair[1].as_str()) else {
            return Err("a key of the source is not [id, hex]".into());
        };
        keys.insert_hex(id, hex)?;
    }
    let client = DirectoryClientConfig::new(url, keys).with_max_response_bytes(MAX_BODY);
    let provider = HttpDirectoryProvider::new(&client)?;
    let memberships = workspaces * members;
    let config = ProjectorConfig::new(
        INSTANCE,
        Duration::from_secs(5),
        Duration::from_secs(300),
        100,
        ProjectionLimits {
            max_snapshot_workspaces: workspaces.max(1),
            max_snapshot_memberships: memberships.max(1),
            max_active_workspaces: workspaces.max(1),
        },
    )?;
    let bench = target.fresh("directory_http", 4).await?;
    // Held as the service holds it (`Arc<dyn …>`): the apply goes through the handles'
    // forwarding, as in `tenantry serve`.
    let store: Arc<dyn DirectoryProjectionStore> = Arc::new(SeaOrmDirectoryStore::new(&bench.db));
    let projector = DirectoryProjector::new(config, provider, store);

    let idle = rss::current_kib();
    let reset = rss::reset_peak();
    let started = Instant::now();
    let result = projector.initialize().await;
    let ready = started.elapsed().as_secs_f64();
    let peak = if reset { rss::peak_kib() } else { None };
    let after = rss::current_kib();
    drop(child.stdin.take());
    let _ = child.wait();
    result?;
    drop(projector);
    bench.drop_database().await?;

    emit(&json!({
        "part": "directory_http",
        "backend": target.backend_name(),
        "workspaces": workspaces,
        "memberships": memberships,
        "ready_seconds": round3(ready),
        "rss_idle_mib": idle.map(|k| k / 1024),
        "peak_rss_mib": peak.map(|k| k / 1024),
        "rss_after_mib": after.map(|k| k / 1024),
    }));
    Ok(())
}
