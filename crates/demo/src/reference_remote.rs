//! `tenantry reference-remote`: the test kit's reference KnowledgeFS and reference directory on
//! loopback ports, for trying `tenantry serve` by hand. Prints the `TENANTRY_*` settings that
//! point a service at them. This is the one front door to the standalone reference remotes
//! (the test kit has no binary of its own).

use std::process::ExitCode;

use tenantry_directory::InstanceUuid;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::FaultProfile;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};

use crate::args::{Faults, RemoteArgs};

/// The test kit's fault profile for a CLI choice.
pub fn profile(faults: Faults) -> FaultProfile {
    match faults {
        Faults::None => FaultProfile::None,
        Faults::Default => FaultProfile::Default,
        Faults::Heavy => FaultProfile::Heavy,
    }
}

/// Runs both reference servers until `stop` completes (the app passes its Ctrl-C / SIGTERM
/// wait). Exit code 1 when a server cannot bind, 2 for a bad `--instance`.
pub async fn main(args: &RemoteArgs, stop: impl Future<Output = ()>) -> ExitCode {
    let config = RemoteConfig {
        seed: args.seed,
        ..RemoteConfig::with_profile(profile(args.faults))
    };
    let (url, remote) = match ReferenceRemote::start_on(args.knowledge_fs_addr, config).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!(
                "tenantry: cannot start the reference KnowledgeFS on {}: {e}",
                args.knowledge_fs_addr
            );
            return ExitCode::FAILURE;
        }
    };
    let instance = match InstanceUuid::parse(args.instance.as_str()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tenantry: --instance: {e}");
            return ExitCode::from(2);
        }
    };
    let mut directory_config = DirectoryServerConfig::new(instance.clone());
    directory_config.profile = profile(args.faults);
    directory_config.seed = args.seed;
    directory_config.key_seed = args.seed;
    let (directory_url, directory) =
        match ReferenceDirectory::start_on(args.directory_addr, directory_config).await {
            Ok(started) => started,
            Err(e) => {
                eprintln!(
                    "tenantry: cannot start the reference directory on {}: {e}",
                    args.directory_addr
                );
                return ExitCode::FAILURE;
            }
        };
    let keys: Vec<String> = directory
        .trusted_public_keys()
        .into_iter()
        .map(|(id, key)| format!("{id}={}", hex::encode(key)))
        .collect();
    println!(
        "reference KnowledgeFS on {url}, reference directory on {directory_url} (faults: {:?})",
        args.faults
    );
    println!("point `tenantry serve` at them with:");
    println!("  export TENANTRY_KNOWLEDGE_FS_URL={url}");
    println!(
        "  export TENANTRY_KNOWLEDGE_FS_TOKEN={}",
        remote.bearer_token()
    );
    println!("  export TENANTRY_DIRECTORY_URL={directory_url}");
    println!("  export TENANTRY_DIRECTORY_INSTANCE={instance}");
    println!(
        "  export TENANTRY_DIRECTORY_TRUSTED_KEYS={}",
        keys.join(",")
    );
    println!("stop with Ctrl-C");
    stop.await;
    println!("KnowledgeFS effects: {:?}", remote.truth().effects());
    remote.shutdown().await;
    directory.shutdown().await;
    ExitCode::SUCCESS
}
