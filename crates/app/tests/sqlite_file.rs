//! The `tenantry` binary on a SQLite file: a `migrate` killed at any step is completed by the
//! next one (case 008); a second `serve` or `migrate` on a file one already uses is refused
//! while the operator commands keep working; a missing folder is refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use tenantry_migrations::Mechanism;

fn tenantry(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantry"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENANTRY_") {
            command.env_remove(name);
        }
    }
    // The default log filter (info) logs each migration as it starts. The remote's settings
    // let `serve` start (nothing is sent: there are no commands).
    command
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("TENANTRY_KNOWLEDGE_FS_URL", "http://127.0.0.1:9")
        .env("TENANTRY_KNOWLEDGE_FS_TOKEN", "case-008-token")
        .env("TENANTRY_LISTEN", "127.0.0.1:0");
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_success(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// Starts `args` with stderr piped and reads it until a line contains `marker`; returns the
/// running child (its stderr read no further).
fn start_until(dir: &Path, args: &[&str], marker: &str) -> Child {
    let mut child = tenantry(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                if line.contains(marker) {
                    break;
                }
                seen.push_str(&line);
                seen.push('\n');
            }
            _ => panic!("{args:?} ended before {marker:?}:\n{seen}"),
        }
    }
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

/// Case 008 with real interruptions: `tenantry migrate` on a fresh SQLite file is killed with
/// SIGKILL as soon as it starts each migration (its log line), and the next `migrate` completes
/// the database, which the operator commands then accept as current.
#[test]
fn case_008_a_migrate_killed_at_any_step_is_completed_by_the_next_one() {
    let names: Vec<String> = Mechanism::ALL
        .iter()
        .flat_map(|m| m.migrations())
        .map(|m| m.name().to_owned())
        .collect();
    for name in &names {
        let dir = tempfile::tempdir().unwrap();
        let mut child = start_until(
            dir.path(),
            &["migrate"],
            &format!("Applying migration '{name}'"),
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let out = tenantry(dir.path()).arg("migrate").output().unwrap();
        assert_success(&out);
        let out = tenantry(dir.path())
            .args(["commands", "list"])
            .output()
            .unwrap();
        assert!(out.status.success(), "killed at {name}: {}", stderr(&out));
    }
}

/// Ctrl-C (SIGINT) during `tenantry migrate` ends it with 130 and a line saying that what was
/// applied stays and that `migrate` finishes the rest; the next one does. A migrate can finish
/// before the signal lands (it takes a fraction of a second), so the test tries fresh databases
/// until one is interrupted, checks every outcome on the way, and fails when none was.
#[test]
fn an_interrupted_migrate_says_what_is_left_and_the_next_one_finishes() {
    for _attempt in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = tenantry(dir.path())
            .arg("migrate")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("Applying migration") => break,
                Some(Ok(_)) => {}
                _ => panic!("migrate ended before applying anything"),
            }
        }
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let exit = child.wait().unwrap();
        let text = rest.join("\n");
        if exit.success() {
            // Finished before the signal arrived: nothing to say about an interruption.
            assert!(!text.contains("interrupted"), "{text}");
            continue;
        }
        assert_eq!(exit.code(), Some(130), "{text}");
        assert!(text.contains("migrate interrupted"), "{text}");
        assert!(text.contains("run `tenantry migrate` again"), "{text}");
        assert_success(&tenantry(dir.path()).arg("migrate").output().unwrap());
        assert_success(
            &tenantry(dir.path())
                .args(["commands", "list"])
                .output()
                .unwrap(),
        );
        return;
    }
    panic!("no migrate out of 20 was interrupted by SIGINT: each finished first");
}

/// A second `serve` or `migrate` on the SQLite file a running `serve` uses exits 75 naming the
/// database and its lock; `commands list` and `fences list` work beside it; once the first is
/// killed (SIGKILL: no clean-up ran), the lock is free again.
#[test]
fn a_second_serve_or_migrate_on_one_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start_until(dir.path(), &["serve"], "admin API on");
    for command in ["serve", "migrate"] {
        let out = tenantry(dir.path()).arg(command).output().unwrap();
        assert_eq!(out.status.code(), Some(75), "{command}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.contains("the SQLite database tenantry.db is in use by another `tenantry serve`"),
            "{command}: {text}"
        );
        assert!(text.contains("tenantry.db-tenantry.lock"), "{text}");
    }
    for args in [["commands", "list"], ["fences", "list"]] {
        let out = tenantry(dir.path()).args(args).output().unwrap();
        assert_success(&out);
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert_success(&tenantry(dir.path()).arg("migrate").output().unwrap());
}

/// A database file in a folder that does not exist is refused naming the folder, and nothing
/// is created; a SQLite open error carries no warning about the URL's `mode=rwc` (the URL was
/// parsed as a PostgreSQL one to name a server).
#[test]
fn a_missing_sqlite_folder_is_named_without_a_mode_warning() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("missing");
    let url = format!("sqlite://{}?mode=rwc", folder.join("t.db").display());
    for command in ["migrate", "serve"] {
        let out = tenantry(dir.path())
            .arg(command)
            .env("TENANTRY_DATABASE_URL", &url)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{command}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.contains(&format!(
                "the folder {} of the SQLite database",
                folder.display()
            )),
            "{command}: {text}"
        );
        assert!(text.contains("does not exist"), "{text}");
        assert!(!folder.exists());
    }
    // A "database file" that is a folder: SQLite cannot open it, and says only that.
    std::fs::create_dir(dir.path().join("a-folder.db")).unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("a-folder.db").display()
    );
    let out = tenantry(dir.path())
        .arg("commands")
        .arg("list")
        .env("TENANTRY_DATABASE_URL", &url)
        .output()
        .unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cannot open database"), "{text}");
    assert!(!text.contains("unrecognized connect parameter"), "{text}");
}

/// A folder this user cannot create files in is refused naming it. Skipped when the test runs
/// as a user that permissions do not stop (root); the error kind's mapping is covered by
/// `tenantry-store-seaorm`'s unit tests.
#[cfg(unix)]
#[test]
fn a_read_only_sqlite_folder_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("ro");
    std::fs::create_dir(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(folder.join("probe"), b"").is_ok() {
        eprintln!("skipped: permissions do not stop this user");
        return;
    }
    let url = format!("sqlite://{}?mode=rwc", folder.join("t.db").display());
    let out = tenantry(dir.path())
        .arg("migrate")
        .env("TENANTRY_DATABASE_URL", &url)
        .output()
        .unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "cannot create files in the folder {}",
            folder.display()
        )),
        "{text}"
    );
}
