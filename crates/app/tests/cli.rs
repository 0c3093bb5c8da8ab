//! The `tenantry` binary: help text, configuration errors that name the setting, `migrate`,
//! and the operator commands on a fresh SQLite file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn tenantry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantry"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENANTRY_") {
            command.env_remove(name);
        }
    }
    command
}

#[test]
fn help_lists_every_command() {
    let out = tenantry().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for command in ["serve", "migrate", "commands", "fences", "prune"] {
        assert!(text.contains(command), "{command} missing from:\n{text}");
    }
    // `demo` and `reference-remote` are the separate `tenantry-demo` binary's (crates/demo).
    let listed = |command: &str| {
        text.lines()
            .any(|line| line.trim_start().starts_with(&format!("{command} ")))
    };
    for command in ["demo", "reference-remote"] {
        assert!(
            !listed(command),
            "{command} is `tenantry-demo`'s, not the service binary's:\n{text}"
        );
    }
    let out = tenantry()
        .args(["fences", "clear", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("--reason") && text.contains("--scope"),
        "{text}"
    );
}

#[test]
fn invalid_configuration_names_the_setting_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_WORKERS", "0")
        .args(["commands", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(
        text.contains("workers") && text.contains("TENANTRY_WORKERS"),
        "{text}"
    );

    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_LISTEN", "0.0.0.0:8080")
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(text.contains("admin_token"), "{text}");

    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "workres = 3\n").unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("workres"));
}

/// `commands list` and the bulk `commands retry|abandon` read their filter flags with one
/// parser (the operator façade's, the admin API's): the same refusal, naming the option,
/// exit code 2, before any database is opened.
#[test]
fn list_and_bulk_actions_refuse_a_bad_filter_in_the_same_words() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--status", "done"],
            "--status is invalid: \"done\" is not one of pending, processing, succeeded, superseded, failed, abandoned",
        ),
        (
            &["--status", "failed", "--operation", "explode"],
            "--operation is invalid: \"explode\" is not one of provision, delete, revoke",
        ),
        (
            &["--status", "failed", "--control-space", "cs-1"],
            "--control-space is invalid: filtering by control space requires tenant_id",
        ),
    ];
    for (flags, expected) in cases {
        for command in [
            &["commands", "list"][..],
            &["commands", "retry"],
            &["commands", "abandon", "--reason", "r"],
        ] {
            let out = tenantry()
                .current_dir(dir.path())
                .args(command)
                .args(flags)
                .output()
                .unwrap();
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command:?} {flags:?}: {stderr}"
            );
            assert!(stderr.contains(expected), "{command:?} {flags:?}: {stderr}");
        }
    }
    assert!(!dir.path().join("tenantry.db").exists());
}

#[test]
fn serve_without_a_knowledge_fs_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("knowledge_fs_url")
    );
}

#[test]
fn migrate_then_operator_commands_work_on_the_default_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("tenantry.db").exists());
    let out = tenantry()
        .current_dir(dir.path())
        .args(["commands", "list", "--status", "pending"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8(out.stdout).unwrap().contains("OPERATION"));
    let out = tenantry()
        .current_dir(dir.path())
        .args(["fences", "list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains("no fences"));
    // `--json` prints one JSON array, `[]` when there are none (not an empty output).
    let out = tenantry()
        .current_dir(dir.path())
        .args(["fences", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]));
    // Bindings and scopes that are not valid ids are usage errors, like in the admin API.
    for args in [
        vec!["fences", "list", "--binding", "inst 1"],
        vec![
            "fences",
            "clear",
            "--binding",
            "inst 1",
            "--scope",
            "s",
            "--reason",
            "r",
        ],
        vec![
            "fences",
            "clear",
            "--binding",
            "b",
            "--scope",
            "kb 7",
            "--reason",
            "r",
        ],
    ] {
        let out = tenantry()
            .current_dir(dir.path())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = tenantry()
        .current_dir(dir.path())
        .args([
            "fences",
            "clear",
            "--binding",
            "b",
            "--scope",
            "s",
            "--reason",
            "checked",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("nothing written")
    );
    let out = tenantry()
        .current_dir(dir.path())
        .args(["commands", "list", "--status", "finished"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn operator_commands_never_create_or_migrate_a_database() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["commands", "list"],
        vec!["fences", "list"],
        vec![
            "fences",
            "clear",
            "--binding",
            "b",
            "--scope",
            "s",
            "--reason",
            "checked",
        ],
    ] {
        let out = tenantry()
            .current_dir(dir.path())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot open database"),
            "{args:?}: {stderr}"
        );
        assert!(
            !dir.path().join("tenantry.db").exists(),
            "{args:?} created a database"
        );
    }
}

/// Seeds `dir/tenantry.db` (migrated) with two provisions, dead-letters the first one, and
/// returns their ids.
async fn seed_failed_command(dir: &std::path::Path) -> (String, String) {
    seed_failed_command_with(
        dir,
        tenantry_lifecycle::ErrorRecord::new("INVALID_REQUEST", "bad"),
    )
    .await
}

/// The request that creates control space `cs` of tenant `t-1`, idempotent on `k-{cs}`.
fn create(cs: &str) -> tenantry_lifecycle::intake::CreateControlSpace {
    use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
    tenantry_lifecycle::intake::CreateControlSpace::new(
        TenantId::parse("t-1").unwrap(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(format!("k-{cs}")).unwrap(),
        "N",
        "n",
    )
}

/// [`seed_failed_command`], the failed command's error being `error`.
async fn seed_failed_command_with(
    dir: &std::path::Path,
    error: tenantry_lifecycle::ErrorRecord,
) -> (String, String) {
    use std::sync::Arc;
    use tenantry_engine::lifecycle::{CommandIntake, ManualClock};
    use tenantry_kernel::LeaseOwner;
    use tenantry_lifecycle::Settlement;

    use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    let url = format!("sqlite://{}?mode=rwc", dir.join("tenantry.db").display());
    let db = tenantry_store_seaorm::connect(&url, 1).await.unwrap();
    let store = SeaOrmLifecycleStore::new(&db);
    let now = chrono::Utc::now();
    let intake = CommandIntake::new(store.clone(), Arc::new(ManualClock::new(now)));
    let mut ids = Vec::new();
    for cs in ["cs-bad", "cs-ok"] {
        let receipt = intake.create_control_space(&create(cs)).await.unwrap();
        ids.push(receipt.command_id.to_string());
    }
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w").unwrap(),
            lease_duration: std::time::Duration::from_secs(60),
            include_provision: true,
            limit: 1,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    // Both were created at the same instant; whichever was claimed is the failed one.
    if claimed[0].id().as_str() != ids[0] {
        ids.swap(0, 1);
    }
    store
        .settle(&claimed[0].lease, &Settlement::fail(now, error))
        .await
        .unwrap();
    db.conn.close().await.unwrap();
    (ids.remove(0), ids.remove(0))
}

#[tokio::test]
async fn commands_retry_and_abandon_act_on_failed_commands_and_refuse_others() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    let (failed, pending) = seed_failed_command(dir.path()).await;
    let run = |args: &[&str]| {
        let out = tenantry()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["commands", "list", "--status", "failed"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains(&failed) && stdout.contains("INVALID_REQUEST"),
        "{stdout}"
    );
    // Abandon needs a reason; a bulk action needs a pending/failed status.
    let (code, _, stderr) = run(&["commands", "abandon", &failed]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--reason"), "{stderr}");
    let (code, _, stderr) = run(&["commands", "retry", "--error-code", "INVALID_REQUEST"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("status"), "{stderr}");
    // Retry one command by id.
    let (code, stdout, stderr) = run(&["commands", "retry", &failed]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("pending"), "{stdout}");
    let (_, stdout, _) = run(&["commands", "list", "--status", "failed"]);
    assert!(!stdout.contains(&failed), "{stdout}");
    // Abandon every pending command of the tenant.
    let (code, stdout, stderr) = run(&[
        "commands",
        "abandon",
        "--status",
        "pending",
        "--tenant",
        "t-1",
        "--reason",
        "tenant offboarded",
        "--actor",
        "cli:test",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("2 command(s) abandoned, 0 refused"),
        "{stdout}"
    );
    // Abandoned commands are refused with a clear error.
    let (code, _, stderr) = run(&["commands", "retry", &pending]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("only pending or failed"), "{stderr}");
}

/// Case 010: a row written before the bounds (its code an escape sequence and 200 KB long) is
/// listed without a raw control character: the table shows a bounded, escaped code, and the
/// `--json` line keeps the code's value with the control written as a JSON escape.
#[tokio::test]
async fn case_010_commands_list_prints_no_raw_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    let code = format!("\u{1b}[2J\u{1b}]0;pwned\u{7}{}", "X".repeat(200 * 1024));
    // Built field by field: what an older version stored, without today's bounds.
    let old_row = tenantry_lifecycle::ErrorRecord {
        code: tenantry_lifecycle::ErrorCode::from(code.as_str()),
        message: "\u{1b}[31mred\u{9b}2J".to_owned(),
    };
    let (failed, _) = seed_failed_command_with(dir.path(), old_row).await;
    let list = |json: bool| {
        let mut args = vec!["commands", "list", "--status", "failed"];
        if json {
            args.push("--json");
        }
        let out = tenantry()
            .current_dir(dir.path())
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let table = list(false);
    assert!(table.contains(&failed), "{table}");
    assert!(
        !table.chars().any(|c| c.is_control() && c != '\n'),
        "raw control character in {table:?}"
    );
    assert!(table.contains("[2J"), "{table}");
    assert!(
        table.len() < 4096,
        "the code was not bounded: {} bytes",
        table.len()
    );
    let json = list(true);
    assert!(
        !json.chars().any(|c| c.is_control() && c != '\n'),
        "raw control character in the JSON lines"
    );
    let line: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(
        line["last_error"]["code"],
        code.as_str(),
        "the JSON keeps the value"
    );
}

/// `tenantry prune --dry-run` counts and removes nothing; `tenantry prune` removes the expired
/// records (an operator action 400 days old here) and keeps the young ones; a bad `[retention]`
/// setting exits 2 naming it.
#[tokio::test]
async fn prune_dry_run_counts_and_prune_removes_expired_history() {
    use std::sync::Arc;
    use tenantry_engine::lifecycle::{CommandIntake, ManualClock};

    use tenantry_ports::lifecycle::{CommandAdmin, OperatorAction, OperatorActionKind};
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("tenantry.db").display()
    );
    let db = tenantry_store_seaorm::connect(&url, 1).await.unwrap();
    let store = SeaOrmLifecycleStore::new(&db);
    let now = chrono::Utc::now();
    let intake = CommandIntake::new(store.clone(), Arc::new(ManualClock::new(now)));
    // Two pending commands abandoned by an operator: one action 400 days ago (past the
    // 180-day window of operator actions), one now.
    for (cs, at) in [
        ("cs-old", now - chrono::Duration::days(400)),
        ("cs-new", now),
    ] {
        let receipt = intake.create_control_space(&create(cs)).await.unwrap();
        // Actions are recorded at the store's time: a store whose clock reads `at`.
        store
            .clone()
            .with_clock(Arc::new(ManualClock::new(at)))
            .act_on_command(&OperatorAction {
                action_id: format!("act-{cs}"),
                command_id: receipt.command_id.clone(),
                kind: OperatorActionKind::Abandon,
                actor: "ops".into(),
                reason: "retention test".into(),
                at,
            })
            .await
            .unwrap();
    }
    db.conn.close().await.unwrap();
    let prune = |args: &[&str]| {
        let out = tenantry()
            .current_dir(dir.path())
            .arg("prune")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let kind = |json: &str, key: &str| -> u64 {
        let doc: serde_json::Value = serde_json::from_str(json).unwrap();
        doc["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == "operator_actions")
            .unwrap()[key]
            .as_u64()
            .unwrap()
    };
    let dry = prune(&["--dry-run", "--json"]);
    assert_eq!(kind(&dry, "would_remove"), 1, "{dry}");
    let table = prune(&["--dry-run"]);
    assert!(
        table.contains("WOULD REMOVE") && table.contains("nothing was removed"),
        "{table}"
    );
    assert_eq!(
        kind(&prune(&["--dry-run", "--json"]), "would_remove"),
        1,
        "dry runs remove nothing"
    );
    let done = prune(&["--json"]);
    assert_eq!(kind(&done, "removed"), 1, "{done}");
    assert_eq!(kind(&prune(&["--dry-run", "--json"]), "would_remove"), 0);

    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_RETENTION_FINISHED_COMMANDS_DAYS", "0")
        .arg("prune")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(text.contains("retention_finished_commands_days"), "{text}");
}

/// `tenantry prune | head -0`: a reader that goes away before the report is written ends the
/// command quietly (exit 0, nothing on standard error), not with a panic on the broken pipe.
#[test]
fn prune_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    for args in [
        &["prune", "--dry-run"][..],
        &["prune", "--json"],
        &["fences", "list"],
    ] {
        let mut child = tenantry()
            .current_dir(dir.path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command opened its database, let alone wrote.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A prune that finds another replica pruning (the retention lock held: PostgreSQL only) exits
/// with its own code, 75, and says so; the JSON report marks the busy kinds.
#[tokio::test]
async fn prune_refused_as_busy_exits_75() {
    use tenantry_store_seaorm::testing::{fresh_database_with_pool, hold_retention_lock};

    // One pooled connection: it holds the session lock below for the whole test.
    let test_db = fresh_database_with_pool(1).await;
    if test_db.backend() != tenantry_store_seaorm::Backend::Postgres {
        return; // SQLite has one writer per file and no retention lock.
    }
    hold_retention_lock(&test_db.db).await;
    let out = tenantry()
        .env("TENANTRY_DATABASE_URL", test_db.url())
        .args(["prune", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("another replica was pruning"), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["busy"] == true),
        "{doc}"
    );
}

/// Case 012 from the CLI: the pending delete that owns its deleting control space is not
/// abandoned (exit 1, the error names mark-deleted); `commands mark-deleted` needs an id and
/// a reason, then abandons it and records the control space deleted.
#[tokio::test]
async fn case_012_commands_mark_deleted_completes_a_deleting_control_space() {
    use std::sync::Arc;
    use tenantry_engine::lifecycle::{CommandIntake, ManualClock};
    use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
    use tenantry_lifecycle::ControlSpaceState;
    use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
    use tenantry_ports::lifecycle::ControlSpaceReader;
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("tenantry.db").display()
    );
    let tenant = TenantId::parse("t-1").unwrap();
    let cs = ControlSpaceId::parse("cs-stuck").unwrap();
    let delete = {
        let db = tenantry_store_seaorm::connect(&url, 1).await.unwrap();
        let store = SeaOrmLifecycleStore::new(&db);
        let intake = CommandIntake::new(
            store.clone(),
            Arc::new(ManualClock::new(chrono::Utc::now())),
        );
        intake
            .create_control_space(&CreateControlSpace::new(
                tenant.clone(),
                cs.clone(),
                IdempotencyKey::parse("create").unwrap(),
                "N",
                "n",
            ))
            .await
            .unwrap();
        let receipt = intake
            .request_deletion(&RequestDeletion::new(
                tenant.clone(),
                cs.clone(),
                IdempotencyKey::parse("delete").unwrap(),
            ))
            .await
            .unwrap();
        db.conn.close().await.unwrap();
        receipt.command_id.to_string()
    };
    let run = |args: &[&str]| {
        let out = tenantry()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, stderr) = run(&["commands", "abandon", &delete, "--reason", "stuck"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("mark-deleted"), "{stderr}");
    let (code, _, stderr) = run(&["commands", "mark-deleted", &delete]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--reason"), "{stderr}");
    let (code, stdout, stderr) = run(&[
        "commands",
        "mark-deleted",
        &delete,
        "--reason",
        "removed in KnowledgeFS by hand",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("abandoned"), "{stdout}");
    let db = tenantry_store_seaorm::connect(&url, 1).await.unwrap();
    let space = SeaOrmLifecycleStore::new(&db)
        .control_space(&tenant, &cs)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Deleted);
    db.conn.close().await.unwrap();
}

/// With operators configured (`TENANTRY_OPERATORS`, tokens in files), a CLI command that
/// changes something acts as a named operator (`--operator` or `TENANTRY_OPERATOR`): its name
/// is the actor recorded, a `read` operator changes nothing (exit 1), an unknown or missing
/// operator is a usage error (exit 2), and another `--actor` is refused.
#[tokio::test]
async fn the_cli_acts_as_a_named_operator_and_records_its_name() {
    use tenantry_kernel::CommandId;
    use tenantry_lifecycle::CommandStatus;
    use tenantry_ports::lifecycle::CommandAdmin;
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(out.status.success());
    let (failed, _) = seed_failed_command(dir.path()).await;
    let alice = dir.path().join("alice.token");
    let bob = dir.path().join("bob.token");
    std::fs::write(&alice, "alice-token-0123456789\n").unwrap();
    std::fs::write(&bob, "bob-token-0123456789\n").unwrap();
    let operators = format!(
        "alice:operate:{},bob:read:{}",
        alice.display(),
        bob.display()
    );
    let run = |args: &[&str], operator_env: Option<&str>| {
        let mut command = tenantry();
        command
            .current_dir(dir.path())
            .env("TENANTRY_OPERATORS", &operators)
            .args(args);
        if let Some(name) = operator_env {
            command.env("TENANTRY_OPERATOR", name);
        }
        let out = command.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let retry = ["commands", "retry", failed.as_str(), "--reason", "fixed"];
    let (code, stderr) = run(&retry, None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--operator"), "{stderr}");
    let (code, stderr) = run(&[&retry[..], &["--operator", "carol"]].concat(), None);
    assert_eq!(code, Some(2), "{stderr}");
    let (code, stderr) = run(&[&retry[..], &["--operator", "bob"]].concat(), None);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("role read"), "{stderr}");
    let (code, stderr) = run(
        &[&retry[..], &["--operator", "alice", "--actor", "mallory"]].concat(),
        None,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("mallory"), "{stderr}");
    let (code, _) = run(
        &[
            "fences",
            "clear",
            "--binding",
            "b",
            "--scope",
            "s",
            "--reason",
            "x",
        ],
        Some("bob"),
    );
    assert_eq!(code, Some(1), "a read operator clears no fence");

    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("tenantry.db").display()
    );
    let db = tenantry_store_seaorm::connect(&url, 1).await.unwrap();
    let store = SeaOrmLifecycleStore::new(&db);
    let id = CommandId::parse(failed.as_str()).unwrap();
    assert!(
        store.command_actions(&id).await.unwrap().is_empty(),
        "nothing was recorded"
    );
    assert_eq!(
        store.command_by_id(&id).await.unwrap().unwrap().status,
        CommandStatus::Failed
    );
    let (code, stderr) = run(&retry, Some("alice"));
    assert_eq!(code, Some(0), "{stderr}");
    let actions = store.command_actions(&id).await.unwrap();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].action.actor, "alice");
    db.conn.close().await.unwrap();
}
