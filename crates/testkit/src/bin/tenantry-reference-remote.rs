//! `tenantry-reference-remote`: runs the reference KnowledgeFS and the reference directory as
//! standalone servers (for demos and manual tests) until Ctrl-C.
//!
//! Prints one JSON line with both base URLs, the KnowledgeFS bearer token, the directory
//! instance and the directory's trusted public keys (hex), which is what a `tenantry serve`
//! configuration needs.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use tenantry_directory::InstanceUuid;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::FaultProfile;
use tenantry_testkit::knowledge_fs::{DEFAULT_TOKEN, ReferenceRemote, RemoteConfig};

/// Reference remotes of Tenantry with fault injection.
#[derive(Debug, Parser)]
#[command(name = "tenantry-reference-remote")]
struct Args {
    /// Address of the reference KnowledgeFS.
    #[arg(long, default_value = "127.0.0.1:8701")]
    knowledge_fs_addr: SocketAddr,
    /// Address of the reference directory.
    #[arg(long, default_value = "127.0.0.1:8702")]
    directory_addr: SocketAddr,
    /// Bearer token the KnowledgeFS requires.
    #[arg(long, default_value = DEFAULT_TOKEN)]
    token: String,
    /// Fault profile of both servers: none, default or heavy.
    #[arg(long, default_value = "none")]
    profile: FaultProfile,
    /// Seed of the fault draws and of the directory signing keys.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory instance served.
    #[arg(long, default_value = "instance-1")]
    instance: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tenantry-reference-remote: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let instance = InstanceUuid::parse(args.instance).map_err(|e| e.to_string())?;
    let remote_config = RemoteConfig {
        bearer_token: args.token.clone(),
        profile: args.profile,
        seed: args.seed,
        ..RemoteConfig::default()
    };
    let (kfs_url, remote) = ReferenceRemote::start_on(args.knowledge_fs_addr, remote_config)
        .await
        .map_err(|e| format!("cannot bind {}: {e}", args.knowledge_fs_addr))?;
    let directory_config = DirectoryServerConfig {
        profile: args.profile,
        seed: args.seed,
        key_seed: args.seed,
        ..DirectoryServerConfig::new(instance.clone())
    };
    let (dir_url, directory) = ReferenceDirectory::start_on(args.directory_addr, directory_config)
        .await
        .map_err(|e| format!("cannot bind {}: {e}", args.directory_addr))?;
    let keys: serde_json::Map<String, serde_json::Value> = directory
        .trusted_public_keys()
        .into_iter()
        .map(|(id, key)| (id, serde_json::Value::from(hex::encode(key))))
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "knowledge_fs_url": kfs_url,
            "knowledge_fs_token": args.token,
            "directory_url": dir_url,
            "directory_instance": instance,
            "directory_trusted_keys": keys,
        })
    );
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?;
    let truth = remote.truth();
    eprintln!(
        "effects {:?}; exactly once: {:?}",
        truth.effects(),
        truth.check_exactly_once()
    );
    remote.shutdown().await;
    directory.shutdown().await;
    Ok(())
}
