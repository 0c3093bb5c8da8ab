//! `tenantry-demo reference-remote`: the test kit's reference KnowledgeFS and reference directory on
//! loopback ports, for trying `tenantry serve` by hand. Prints the `TENANTRY_*` settings that
//! point a service at them. This is the one front door to the standalone reference remotes
//! (the test kit has no binary of its own).
//!
//! With `--tls` both servers serve HTTPS with a certificate of a CA made at start
//! ([`RemoteCertificates`]); the CA certificate is written to a file whose path is printed with
//! the `TENANTRY_KNOWLEDGE_FS_CA_FILE` / `TENANTRY_DIRECTORY_CA_FILE` lines that trust it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tenantry_directory::InstanceUuid;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::FaultProfile;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tenantry_testkit::tls::{LOOPBACK_NAMES, TestCa, server_config};

use crate::args::{Faults, RemoteArgs};

/// The test kit's fault profile for a CLI choice.
pub fn profile(faults: Faults) -> FaultProfile {
    match faults {
        Faults::None => FaultProfile::None,
        Faults::Default => FaultProfile::Default,
        Faults::Heavy => FaultProfile::Heavy,
    }
}

/// Name of the CA certificate file written with `--tls`.
pub const CA_FILE_NAME: &str = "reference-remote-ca.pem";

/// The reference remotes' HTTPS: a CA made at start, the rustls configuration presenting a
/// certificate it issued for `127.0.0.1`, `::1` and `localhost`, and the CA's PEM file.
#[derive(Debug, Clone)]
pub struct RemoteCertificates {
    /// What both servers present.
    pub server_config: Arc<rustls::ServerConfig>,
    /// The CA certificate (PEM) a client trusts.
    pub ca_file: PathBuf,
    /// The temporary folder holding `ca_file` when no folder was given (removed on drop).
    _dir: Option<Arc<tempfile::TempDir>>,
}

impl RemoteCertificates {
    /// Makes the CA and the server certificate; writes the CA to `dir`/[`CA_FILE_NAME`], or to
    /// a new temporary folder (kept while this value lives) when `dir` is `None`.
    ///
    /// # Errors
    /// A message when a certificate cannot be made or the file cannot be written.
    pub fn make(dir: Option<&Path>) -> Result<Self, String> {
        let ca = TestCa::new("tenantry reference-remote CA").map_err(|e| e.to_string())?;
        let cert = ca.server_cert(LOOPBACK_NAMES).map_err(|e| e.to_string())?;
        let server_config = server_config(&cert, None).map_err(|e| e.to_string())?;
        let (folder, temp) = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create the folder {}: {e}", dir.display()))?;
                (dir.to_path_buf(), None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("tenantry-tls-")
                    .tempdir()
                    .map_err(|e| format!("temporary folder: {e}"))?;
                (temp.path().to_path_buf(), Some(Arc::new(temp)))
            }
        };
        let ca_file = ca
            .write_pem(&folder.join(CA_FILE_NAME))
            .map_err(|e| format!("cannot write {}: {e}", folder.join(CA_FILE_NAME).display()))?;
        Ok(Self {
            server_config,
            ca_file,
            _dir: temp,
        })
    }
}

/// Runs both reference servers until `stop` completes (the binary passes the service's Ctrl-C /
/// SIGTERM wait). Exit code 1 when a server cannot bind, 2 for a bad `--instance`.
pub async fn main(args: &RemoteArgs, stop: impl Future<Output = ()>) -> ExitCode {
    let config = RemoteConfig {
        seed: args.seed,
        ..RemoteConfig::with_profile(profile(args.faults))
    };
    let certificates = if args.tls {
        match RemoteCertificates::make(args.tls_dir.as_deref()) {
            Ok(certificates) => Some(certificates),
            Err(e) => {
                eprintln!("tenantry-demo: --tls: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let tls = certificates.as_ref().map(|c| c.server_config.clone());
    let (url, remote) = match ReferenceRemote::start_tls_on(
        args.knowledge_fs_addr,
        config,
        tls.clone(),
    )
    .await
    {
        Ok(started) => started,
        Err(e) => {
            eprintln!(
                "tenantry-demo: cannot start the reference KnowledgeFS on {}: {e}; choose another address with --knowledge-fs-addr",
                args.knowledge_fs_addr
            );
            return ExitCode::FAILURE;
        }
    };
    let instance = match InstanceUuid::parse(args.instance.as_str()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tenantry-demo: --instance: {e}");
            return ExitCode::from(2);
        }
    };
    let mut directory_config = DirectoryServerConfig::new(instance.clone());
    directory_config.profile = profile(args.faults);
    directory_config.seed = args.seed;
    directory_config.key_seed = args.seed;
    let (directory_url, directory) = match ReferenceDirectory::start_tls_on(
        args.directory_addr,
        directory_config,
        tls,
    )
    .await
    {
        Ok(started) => started,
        Err(e) => {
            eprintln!(
                "tenantry-demo: cannot start the reference directory on {}: {e}; choose another address with --directory-addr",
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
        "reference KnowledgeFS on {url}, reference directory on {directory_url} (faults: {})",
        args.faults.name()
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
    if let Some(certificates) = &certificates {
        let ca = certificates.ca_file.display();
        println!("  export TENANTRY_KNOWLEDGE_FS_CA_FILE={ca}");
        println!("  export TENANTRY_DIRECTORY_CA_FILE={ca}");
        println!(
            "(both serve HTTPS with a certificate of a CA made for this run; its certificate is {ca})"
        );
    }
    println!("stop with Ctrl-C");
    stop.await;
    println!("KnowledgeFS effects: {:?}", remote.truth().effects());
    remote.shutdown().await;
    directory.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `--tls-dir` names a folder that need not exist yet: it is created.
    #[test]
    fn the_tls_folder_is_created_when_missing() {
        let base = tempfile::tempdir().unwrap();
        let folder = base.path().join("new").join("tls");
        let certificates = RemoteCertificates::make(Some(&folder)).unwrap();
        assert!(folder.join(CA_FILE_NAME).is_file());
        drop(certificates);
    }

    /// The banner names the fault profile as the command line spells it.
    #[test]
    fn fault_profiles_are_named_as_on_the_command_line() {
        use clap::ValueEnum as _;
        for faults in Faults::value_variants() {
            let value = faults.to_possible_value().unwrap();
            assert_eq!(faults.name(), value.get_name());
        }
    }
}
