//! The `tenantry-demo` binary: its help lists `demo` and `reference-remote`, and
//! `tenantry-demo reference-remote --tls` serves HTTPS that its printed CA file verifies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use tenantry_remote_http::RemoteTls;
use tenantry_remote_http::client::client_builder;

fn tenantry_demo() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantry-demo"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENANTRY_") {
            command.env_remove(name);
        }
    }
    command
}

#[test]
fn help_lists_demo_and_reference_remote() {
    let out = tenantry_demo().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let listed = |command: &str| {
        text.lines()
            .any(|line| line.trim_start().starts_with(&format!("{command} ")))
    };
    for command in ["demo", "reference-remote"] {
        assert!(listed(command), "{command} missing from:\n{text}");
    }
    let out = tenantry_demo().args(["demo", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in ["--scale", "--faults", "--seed", "--tls", "--keep-open"] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

/// `tenantry-demo reference-remote --tls` serves HTTPS, writes its CA certificate and prints the
/// lines that trust it; a client with that CA file reaches the KnowledgeFS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_remote_tls_prints_the_ca_file_that_verifies_it() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let mut child = tenantry_demo()
        .args(["reference-remote", "--tls", "--tls-dir"])
        .arg(dir.path())
        .args([
            "--knowledge-fs-addr",
            "127.0.0.1:0",
            "--directory-addr",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let done = line.starts_with("stop with Ctrl-C");
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    })
    .await
    .unwrap();
    let value = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {prefix} in {lines:?}"))
    };
    let url = value("export TENANTRY_KNOWLEDGE_FS_URL=");
    let ca_file = value("export TENANTRY_KNOWLEDGE_FS_CA_FILE=");
    assert_eq!(value("export TENANTRY_DIRECTORY_CA_FILE="), ca_file);
    assert!(value("export TENANTRY_DIRECTORY_URL=").starts_with("https://"));
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert_eq!(
        PathBuf::from(&ca_file),
        dir.path().join("reference-remote-ca.pem")
    );
    let trusted = client_builder(&RemoteTls::new().with_ca_file(&ca_file))
        .unwrap()
        .build()
        .unwrap();
    let answer = trusted
        .get(format!("{url}/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    child.kill().unwrap();
    child.wait().unwrap();
}
