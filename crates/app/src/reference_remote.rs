//! `tenantry reference-remote`: the reference KnowledgeFS from the test kit on a loopback port,
//! for trying `tenantry serve` by hand.

use std::process::ExitCode;

use tenantry_testkit::fault::FaultProfile;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};

use crate::cli::{Faults, RemoteArgs};

/// The test kit's fault profile for a CLI choice.
pub fn profile(faults: Faults) -> FaultProfile {
    match faults {
        Faults::None => FaultProfile::None,
        Faults::Default => FaultProfile::Default,
        Faults::Heavy => FaultProfile::Heavy,
    }
}

/// Runs the reference remote until Ctrl-C / SIGTERM.
pub async fn main(args: &RemoteArgs) -> ExitCode {
    let config = RemoteConfig {
        seed: args.seed,
        ..RemoteConfig::with_profile(profile(args.faults))
    };
    let (url, remote) = match ReferenceRemote::start(config).await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("tenantry: cannot start the reference remote: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "reference KnowledgeFS listening on {url} (faults: {:?})",
        args.faults
    );
    println!("configure the service with:");
    println!("  TENANTRY_KNOWLEDGE_FS_URL={url}");
    println!("  TENANTRY_KNOWLEDGE_FS_TOKEN={}", remote.bearer_token());
    println!("stop with Ctrl-C");
    crate::service::shutdown_signal().await;
    let truth = remote.truth();
    println!("effects: {:?}", truth.effects());
    remote.shutdown().await;
    ExitCode::SUCCESS
}
