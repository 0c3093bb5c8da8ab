//! Unit tests of the configuration: defaults, layering, validation messages.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn defaults_are_valid_and_documented() {
    let config = Config::defaults();
    assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
    assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
    assert_eq!(config.workers, 4);
    assert_eq!(config.admin_token, None);
    assert_eq!(config.log_format, LogFormat::Human);
    assert_eq!(config.lease, Duration::from_secs(30));
    assert!(config.lease_renewal);
    assert!(config.group_commit);
    assert_eq!(config.claim_batch, 16);
    assert_eq!(config.deletion_absence_grace, Duration::from_secs(600));
    assert_eq!(config.max_attempts, 50);
    assert_eq!(config.fence_dispatch_deadline, Duration::from_secs(150));
}

/// The fence runtime has its own dispatch deadline, read from its own setting and not from
/// `knowledge_fs_deadline_ms`.
#[test]
fn fence_dispatch_deadline_is_its_own_setting() {
    let config = merge_env_and_validate(RawConfig::default(), "test", |name| {
        (name == "TENANTRY_FENCE_DISPATCH_DEADLINE_MS").then(|| "2500".to_owned())
    })
    .unwrap();
    assert_eq!(config.fence_dispatch_deadline, Duration::from_millis(2500));
    assert_eq!(config.knowledge_fs_deadline, Duration::from_secs(150));
    let refused = merge_env_and_validate(RawConfig::default(), "test", |name| {
        (name == "TENANTRY_FENCE_DISPATCH_DEADLINE_MS").then(|| "0".to_owned())
    })
    .unwrap_err();
    assert!(
        refused.to_string().contains("fence_dispatch_deadline_ms"),
        "{refused}"
    );
}

/// The per-tenant bound on remote calls is off unless set; set, it is 1..=1024, from the file
/// or the environment, and a refusal names the setting and where it came from.
#[test]
fn the_per_tenant_call_limit_is_off_by_default_and_validated() {
    assert_eq!(
        Config::defaults().knowledge_fs_max_concurrent_calls_per_tenant,
        None
    );
    let raw = RawConfig::from_toml(
        "knowledge_fs_max_concurrent_calls_per_tenant = 3\n",
        "t.toml",
    )
    .unwrap();
    let config = merge_env_and_validate(raw, "t.toml", |_| None).unwrap();
    assert_eq!(config.knowledge_fs_max_concurrent_calls_per_tenant, Some(3));
    let config = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_KNOWLEDGE_FS_MAX_CONCURRENT_CALLS_PER_TENANT", "2")]),
    )
    .unwrap();
    assert_eq!(config.knowledge_fs_max_concurrent_calls_per_tenant, Some(2));
    for bad in ["0", "1025"] {
        let err = merge_env_and_validate(
            RawConfig::default(),
            "defaults",
            env_of(&[("TENANTRY_KNOWLEDGE_FS_MAX_CONCURRENT_CALLS_PER_TENANT", bad)]),
        )
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid {
                setting: "knowledge_fs_max_concurrent_calls_per_tenant", origin, ..
            } if origin == "TENANTRY_KNOWLEDGE_FS_MAX_CONCURRENT_CALLS_PER_TENANT"),
            "{bad}: {err}"
        );
    }
    // Without lease renewal a dispatch must not wait: the bound is refused, not ignored.
    let err = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[
            ("TENANTRY_KNOWLEDGE_FS_MAX_CONCURRENT_CALLS_PER_TENANT", "2"),
            ("TENANTRY_LEASE_RENEWAL", "false"),
            ("TENANTRY_LEASE_SECONDS", "600"),
        ]),
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            ConfigError::Invalid {
                setting: "knowledge_fs_max_concurrent_calls_per_tenant",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("lease_renewal"), "{err}");
}

/// One source of truth: the service's lifecycle defaults are the engine's `Default`s, which
/// `cargo xtask bench` measures with.
#[test]
fn lifecycle_defaults_are_the_engines() {
    let config = Config::defaults();
    let worker = tenantry_engine::lifecycle::WorkerConfig::default();
    let dispatcher = tenantry_engine::lifecycle::DispatcherConfig::default();
    assert_eq!(config.claim_batch, worker.claim_batch);
    assert_eq!(config.idle_poll, worker.idle_poll);
    assert_eq!(config.lease, dispatcher.lease_duration);
    assert!(
        config.group_commit,
        "settles through GroupCommitConfig::default()"
    );
}

#[test]
fn environment_wins_over_the_file() {
    let raw = RawConfig::from_toml("workers = 2\nlisten = \"127.0.0.1:9000\"\n", "t.toml").unwrap();
    let config = merge_env_and_validate(
        raw,
        "t.toml",
        env_of(&[
            ("TENANTRY_WORKERS", "7"),
            ("TENANTRY_DATABASE_MAX_CONNECTIONS", "11"),
            ("TENANTRY_LOG_FORMAT", "json"),
        ]),
    )
    .unwrap();
    assert_eq!(config.workers, 7);
    assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(config.log_format, LogFormat::Json);
}

#[test]
fn errors_name_the_setting_and_its_source() {
    let raw = RawConfig::from_toml("workers = 0\n", "t.toml").unwrap();
    let err = merge_env_and_validate(raw, "t.toml", |_| None).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { setting: "workers", origin, .. } if origin == "t.toml"),
        "{err}"
    );
    let err = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_WORKERS", "many")]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { setting: "workers", origin, .. } if origin == "TENANTRY_WORKERS"),
        "{err}"
    );
    assert!(err.to_string().contains("TENANTRY_WORKERS"), "{err}");
}

#[test]
fn unknown_file_keys_are_refused() {
    let err = RawConfig::from_toml("wrokers = 3\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("wrokers"), "{err}");
}

#[test]
fn non_loopback_listen_requires_a_token() {
    let env = env_of(&[("TENANTRY_LISTEN", "0.0.0.0:8080")]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                setting: "listen",
                ..
            }
        ),
        "{err}"
    );
    let env = env_of(&[
        ("TENANTRY_LISTEN", "0.0.0.0:8080"),
        ("TENANTRY_ADMIN_TOKEN", "0123456789abcdef0123"),
    ]);
    let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
    assert!(config.has_operators());
}

#[test]
fn short_admin_token_is_refused() {
    let env = env_of(&[("TENANTRY_ADMIN_TOKEN", "short")]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            setting: "admin_token",
            ..
        }
    ));
}

#[test]
fn lease_shorter_than_the_remote_deadline_needs_renewal() {
    let env = env_of(&[
        ("TENANTRY_LEASE_SECONDS", "10"),
        ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", "150000"),
    ]);
    let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
    assert!(config.lease_renewal, "renewal is on by default");
    assert_eq!(config.lease, Duration::from_secs(10));
    let env = env_of(&[
        ("TENANTRY_LEASE_SECONDS", "10"),
        ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", "10000"),
        ("TENANTRY_LEASE_RENEWAL", "false"),
    ]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            setting: "lease_seconds",
            ..
        }
    ));
}

/// Issue 29: a provision request can be applied up to a whole call deadline after its attempt
/// window closed, so the deletion's absence grace must cover the deadline plus the margin.
#[test]
fn deletion_absence_grace_must_cover_the_call_deadline_plus_a_margin() {
    let table = [
        // (grace seconds, deadline ms, accepted)
        ("600", "150000", true),
        ("151", "150000", true),
        ("150", "150000", false),
        ("0", "150000", false),
        ("3", "1500", true),
        ("2", "1500", false),
        ("2", "1000", true),
        ("7", "3000", true), // the chaos harness's settings
    ];
    for (grace, deadline, accepted) in table {
        let env = env_of(&[
            ("TENANTRY_DELETION_ABSENCE_GRACE_SECONDS", grace),
            ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", deadline),
        ]);
        let result = merge_env_and_validate(RawConfig::default(), "defaults", env);
        assert_eq!(
            result.is_ok(),
            accepted,
            "grace {grace} s, deadline {deadline} ms"
        );
    }
    let env = env_of(&[
        ("TENANTRY_DELETION_ABSENCE_GRACE_SECONDS", "30"),
        ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", "150000"),
    ]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                setting: "deletion_absence_grace_seconds",
                ..
            }
        ),
        "{message}"
    );
    for needle in ["knowledge_fs_deadline_ms", "at least 151"] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    }
    assert_eq!(
        smallest_deletion_absence_grace(Duration::from_millis(150_000)),
        Duration::from_secs(151)
    );
    assert!(
        Config::defaults().deletion_absence_grace
            >= smallest_deletion_absence_grace(Config::defaults().knowledge_fs_deadline)
    );
}

#[test]
fn database_url_scheme_is_checked() {
    let env = env_of(&[("TENANTRY_DATABASE_URL", "mysql://x")]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            setting: "database_url",
            ..
        }
    ));
}

/// Issue 30: a PostgreSQL host list or `target_session_attrs` that cannot work is a
/// configuration error naming `database_url` (exit 2), found before anything opens.
#[test]
fn database_url_host_lists_are_checked_with_the_settings() {
    for (url, expected) in [
        (
            "postgres://u@h1,h2/db?target_session_attrs=standby",
            "target_session_attrs=\"standby\" is not supported",
        ),
        ("postgres://u@h1,h2/db?port=1,2,3", "3 ports for 2 hosts"),
        ("postgres://u@h1,,h2/db", "an empty host"),
        ("postgres://u@h1:99999/db", "is not a port number"),
    ] {
        let env = env_of(&[("TENANTRY_DATABASE_URL", url)]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(
            matches!(
                &err,
                ConfigError::Invalid {
                    setting: "database_url",
                    ..
                }
            ),
            "{url}: {err:?}"
        );
        assert!(err.to_string().contains(expected), "{url}: {err}");
    }
    let env = env_of(&[(
        "TENANTRY_DATABASE_URL",
        "postgres://u@h1:6001,h2:6002/db?target_session_attrs=read-write",
    )]);
    merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
}

#[test]
fn serve_requires_a_knowledge_fs() {
    let err = Config::defaults().knowledge_fs().unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Missing {
            setting: "knowledge_fs_url",
            ..
        }
    ));
}

#[test]
fn settings_list_is_what_the_environment_overlay_reads() {
    let asked = std::cell::RefCell::new(Vec::new());
    merge_env_and_validate(RawConfig::default(), "defaults", |name| {
        asked.borrow_mut().push(name.to_owned());
        None
    })
    .unwrap();
    let expected: Vec<String> = SETTINGS
        .iter()
        .map(|s| format!("TENANTRY_{}", s.to_uppercase()))
        .collect();
    assert_eq!(asked.into_inner(), expected);
}

#[test]
fn unknown_tenantry_variables_are_named_with_a_suggestion() {
    let names = [
        "TENANTRY_WROKERS",
        "TENANTRY_WORKERS",
        "TENANTRY_CONFIG",
        "TENANTRY_TEST_PG_URL",
        "TENANTRY_SOMETHING_ELSE",
        "PATH",
        "TENANTRY_KNOWLEDGEFS_URL",
    ]
    .map(str::to_owned);
    let unknown = unknown_variables(names);
    assert_eq!(
        unknown,
        vec![
            UnknownVariable {
                name: "TENANTRY_KNOWLEDGEFS_URL".into(),
                suggestion: Some("TENANTRY_KNOWLEDGE_FS_URL".into()),
            },
            UnknownVariable {
                name: "TENANTRY_SOMETHING_ELSE".into(),
                suggestion: None,
            },
            UnknownVariable {
                name: "TENANTRY_WROKERS".into(),
                suggestion: Some("TENANTRY_WORKERS".into()),
            },
        ]
    );
    let text = unknown[2].to_string();
    assert!(
        text.contains("TENANTRY_WROKERS") && text.contains("did you mean TENANTRY_WORKERS"),
        "{text}"
    );
}

#[test]
fn pool_smaller_than_workers_plus_four_is_refused() {
    let env = env_of(&[
        ("TENANTRY_WORKERS", "8"),
        ("TENANTRY_DATABASE_MAX_CONNECTIONS", "11"),
    ]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { setting: "database_max_connections", origin, .. } if origin == "TENANTRY_DATABASE_MAX_CONNECTIONS"),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("at least 12"), "{text}");
    let env = env_of(&[
        ("TENANTRY_WORKERS", "8"),
        ("TENANTRY_DATABASE_MAX_CONNECTIONS", "12"),
    ]);
    assert!(merge_env_and_validate(RawConfig::default(), "defaults", env).is_ok());
}

#[test]
fn redact_url_hides_passwords_only() {
    let cases = [
        ("postgres://u:secret@h:5/db", "postgres://u:***@h:5/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("sqlite://x.db?mode=rwc", "sqlite://x.db?mode=rwc"),
        // libpq query parameters: TLS files stay readable, passwords do not.
        (
            "postgres://u:secret@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
            "postgres://u:***@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        ),
        (
            "postgres://u@h/db?password=secret&sslmode=require",
            "postgres://u@h/db?password=***&sslmode=require",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(redact_url(input), expected);
    }
}

#[test]
fn retention_table_defaults_file_and_environment() {
    const DAY: Duration = Duration::from_secs(86_400);
    let defaults = Config::defaults().retention;
    assert!(defaults.enabled);
    assert_eq!(defaults.interval, Duration::from_secs(300));
    assert_eq!(defaults.policy.finished_commands, 30 * DAY);
    assert_eq!(defaults.policy.operator_actions, 180 * DAY);
    assert_eq!(defaults.policy.inbox_receipts, 7 * DAY);
    assert_eq!(defaults.policy.batch_size, 500);

    let raw = RawConfig::from_toml(
        "[retention]\nfinished_commands_days = 2\ninterval_seconds = 60\nenabled = false\n",
        "t.toml",
    )
    .unwrap();
    let config = merge_env_and_validate(
        raw,
        "t.toml",
        env_of(&[
            ("TENANTRY_RETENTION_FINISHED_COMMANDS_DAYS", "3"),
            ("TENANTRY_RETENTION_BATCH_SIZE", "50"),
        ]),
    )
    .unwrap()
    .retention;
    assert!(!config.enabled);
    assert_eq!(config.interval, Duration::from_secs(60));
    assert_eq!(config.policy.finished_commands, 3 * DAY, "environment wins");
    assert_eq!(config.policy.batch_size, 50);
    assert_eq!(config.policy.inbox_receipts, 7 * DAY);
    assert_eq!(defaults.policy.cleared_fences, 7 * DAY);
    let raw = RawConfig::from_toml("[retention]\ncleared_fences_days = 2\n", "t.toml").unwrap();
    let config = merge_env_and_validate(
        raw,
        "t.toml",
        env_of(&[("TENANTRY_RETENTION_CLEARED_FENCES_DAYS", "0")]),
    )
    .unwrap_err();
    assert!(
        matches!(&config, ConfigError::Invalid { setting: "retention_cleared_fences_days", origin, .. } if origin == "TENANTRY_RETENTION_CLEARED_FENCES_DAYS"),
        "{config}"
    );
    let raw = RawConfig::from_toml("[retention]\ncleared_fences_days = 2\n", "t.toml").unwrap();
    let config = merge_env_and_validate(raw, "t.toml", |_| None).unwrap();
    assert_eq!(config.retention.policy.cleared_fences, 2 * DAY);
}

#[test]
fn retention_errors_name_the_setting_and_its_source() {
    let raw = RawConfig::from_toml("[retention]\ninbox_receipts_days = 0\n", "t.toml").unwrap();
    let err = merge_env_and_validate(raw, "t.toml", |_| None).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { setting: "retention_inbox_receipts_days", origin, .. } if origin == "t.toml"),
        "{err}"
    );
    let err = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_RETENTION_BATCH_SIZE", "0")]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Invalid { setting: "retention_batch_size", origin, .. } if origin == "TENANTRY_RETENTION_BATCH_SIZE"),
        "{err}"
    );
    let err = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_RETENTION_ENABLED", "sometimes")]),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("TENANTRY_RETENTION_ENABLED"),
        "{err}"
    );
    let err = RawConfig::from_toml("[retention]\nwindow_days = 3\n", "t.toml").unwrap_err();
    assert!(err.to_string().contains("window_days"), "{err}");
    // Found by a trial: `retention = 5` named the internal type `RawRetention`.
    let err = RawConfig::from_toml("retention = 5\n", "t.toml").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("a [retention] table") && !message.contains("RawRetention"),
        "{message}"
    );
}

/// TLS settings (docs/operations.md, "TLS"): every file is checked at start, and what cannot
/// work is refused naming the setting.
mod tls {
    use std::path::Path;

    use super::*;
    use tenantry_testkit::tls::{LOOPBACK_NAMES, TestCa};

    /// A CA file, a client certificate and key, and a server certificate and key, as PEM files.
    struct Files {
        dir: tempfile::TempDir,
        ca: String,
        cert: String,
        key: String,
    }

    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("config-ca").unwrap();
        let ca_file = ca.write_pem(&dir.path().join("ca.pem")).unwrap();
        let (cert, key) = ca
            .server_cert(LOOPBACK_NAMES)
            .unwrap()
            .write_pem(dir.path(), "leaf")
            .unwrap();
        let text = |p: &Path| p.display().to_string();
        Files {
            ca: text(&ca_file),
            cert: text(&cert),
            key: text(&key),
            dir,
        }
    }

    fn validate(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        merge_env_and_validate(RawConfig::default(), "defaults", env_of(pairs))
    }

    fn refused_setting(pairs: &[(&str, &str)]) -> (&'static str, String) {
        match validate(pairs).unwrap_err() {
            ConfigError::Invalid {
                setting, reason, ..
            } => (setting, reason),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    const KEYS: &str = "k1=abababababababababababababababababababababababababababababababab";

    #[test]
    fn remote_tls_files_are_read_into_the_settings() {
        let f = files();
        let config = validate(&[
            ("TENANTRY_KNOWLEDGE_FS_URL", "https://kfs.internal:9443"),
            ("TENANTRY_KNOWLEDGE_FS_CA_FILE", &f.ca),
            ("TENANTRY_KNOWLEDGE_FS_CLIENT_CERT_FILE", &f.cert),
            ("TENANTRY_KNOWLEDGE_FS_CLIENT_KEY_FILE", &f.key),
            ("TENANTRY_DIRECTORY_URL", "https://directory.internal"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
            ("TENANTRY_DIRECTORY_TRUSTED_KEYS", KEYS),
            ("TENANTRY_DIRECTORY_CA_FILE", &f.ca),
        ])
        .unwrap();
        assert_eq!(
            config.knowledge_fs_tls.ca_file.as_deref(),
            Some(Path::new(&f.ca))
        );
        assert_eq!(
            config.knowledge_fs_tls.client_key_file.as_deref(),
            Some(Path::new(&f.key))
        );
        let directory = config.directory.unwrap();
        assert_eq!(directory.tls.ca_file.as_deref(), Some(Path::new(&f.ca)));
        assert_eq!(directory.tls.client_cert_file, None);
        assert!(!config.allow_plain_http);
        assert_eq!(config.admin_tls, None);
    }

    #[test]
    fn missing_unreadable_or_non_pem_ca_file_is_refused_naming_the_setting() {
        let f = files();
        let missing = f.dir.path().join("absent.pem").display().to_string();
        let (setting, reason) = refused_setting(&[("TENANTRY_KNOWLEDGE_FS_CA_FILE", &missing)]);
        assert_eq!(setting, "knowledge_fs_ca_file");
        assert!(
            reason.contains("absent.pem") && reason.contains("cannot read"),
            "{reason}"
        );
        // A folder is not readable as a file.
        let folder = f.dir.path().display().to_string();
        let (setting, _) = refused_setting(&[("TENANTRY_KNOWLEDGE_FS_CA_FILE", &folder)]);
        assert_eq!(setting, "knowledge_fs_ca_file");
        // A file that holds no certificate (a key) is not a CA bundle.
        let (setting, reason) = refused_setting(&[("TENANTRY_KNOWLEDGE_FS_CA_FILE", &f.key)]);
        assert_eq!(setting, "knowledge_fs_ca_file");
        assert!(reason.contains("not usable PEM"), "{reason}");
    }

    #[test]
    fn a_client_key_without_its_certificate_and_the_reverse_are_refused() {
        let f = files();
        let (setting, reason) =
            refused_setting(&[("TENANTRY_KNOWLEDGE_FS_CLIENT_KEY_FILE", &f.key)]);
        assert_eq!(setting, "knowledge_fs_client_key_file");
        assert!(reason.contains("without a client certificate"), "{reason}");
        let (setting, _) = refused_setting(&[("TENANTRY_KNOWLEDGE_FS_CLIENT_CERT_FILE", &f.cert)]);
        assert_eq!(setting, "knowledge_fs_client_cert_file");
        let (setting, _) = refused_setting(&[
            ("TENANTRY_DIRECTORY_URL", "https://directory.internal"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
            ("TENANTRY_DIRECTORY_TRUSTED_KEYS", KEYS),
            ("TENANTRY_DIRECTORY_CLIENT_KEY_FILE", &f.key),
        ]);
        assert_eq!(setting, "directory_client_key_file");
        // A key that is not PEM is named as the key file.
        let (setting, _) = refused_setting(&[
            ("TENANTRY_KNOWLEDGE_FS_CLIENT_CERT_FILE", &f.cert),
            ("TENANTRY_KNOWLEDGE_FS_CLIENT_KEY_FILE", &f.ca),
        ]);
        assert_eq!(setting, "knowledge_fs_client_key_file");
    }

    #[test]
    fn directory_tls_files_without_a_directory_url_are_refused() {
        let f = files();
        let (setting, _) = refused_setting(&[("TENANTRY_DIRECTORY_CA_FILE", &f.ca)]);
        assert_eq!(setting, "directory_ca_file");
    }

    #[test]
    fn plain_http_to_a_non_loopback_remote_is_refused_unless_allowed() {
        let (setting, reason) =
            refused_setting(&[("TENANTRY_KNOWLEDGE_FS_URL", "http://kfs.internal:8080")]);
        assert_eq!(setting, "knowledge_fs_url");
        assert!(
            reason.contains("clear text") && reason.contains("allow_plain_http"),
            "{reason}"
        );
        let (setting, _) = refused_setting(&[
            ("TENANTRY_DIRECTORY_URL", "http://10.0.0.7/dir"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
            ("TENANTRY_DIRECTORY_TRUSTED_KEYS", KEYS),
        ]);
        assert_eq!(setting, "directory_url");
        // Loopback needs no TLS.
        for url in [
            "http://127.0.0.1:8701",
            "http://localhost:8701/kfs",
            "http://[::1]:8701",
            "http://127.9.9.9",
        ] {
            validate(&[("TENANTRY_KNOWLEDGE_FS_URL", url)]).unwrap();
        }
        // Allowed on purpose: accepted, with a warning at every start.
        let config = validate(&[
            ("TENANTRY_KNOWLEDGE_FS_URL", "http://kfs.internal:8080"),
            ("TENANTRY_ALLOW_PLAIN_HTTP", "true"),
        ])
        .unwrap();
        assert!(config.allow_plain_http);
        let warnings = config.start_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("knowledge_fs_url"), "{warnings:?}");
        assert!(Config::defaults().start_warnings().is_empty());
    }

    #[test]
    fn plain_http_detection_reads_the_host() {
        for (url, off_loopback) in [
            ("http://kfs.internal", true),
            ("HTTP://kfs.internal", true),
            ("http://user:pw@127.0.0.1:1/x", false),
            ("http://127.0.0.1.example.com", true),
            ("http://[::1]:80", false),
            ("http://[2001:db8::1]:80", true),
            ("https://kfs.internal", false),
            ("http://", false),
        ] {
            assert_eq!(is_plain_http_off_loopback(url), off_loopback, "{url}");
        }
    }

    #[test]
    fn admin_listener_tls_needs_both_files_and_usable_pem() {
        let f = files();
        let config = validate(&[
            ("TENANTRY_TLS_CERT_FILE", &f.cert),
            ("TENANTRY_TLS_KEY_FILE", &f.key),
        ])
        .unwrap();
        assert_eq!(
            config.admin_tls,
            Some(AdminTls {
                cert_file: f.cert.clone().into(),
                key_file: f.key.clone().into(),
            })
        );
        let (setting, _) = refused_setting(&[("TENANTRY_TLS_CERT_FILE", &f.cert)]);
        assert_eq!(setting, "tls_cert_file");
        let (setting, _) = refused_setting(&[("TENANTRY_TLS_KEY_FILE", &f.key)]);
        assert_eq!(setting, "tls_key_file");
        let (setting, reason) = refused_setting(&[
            ("TENANTRY_TLS_CERT_FILE", &f.key),
            ("TENANTRY_TLS_KEY_FILE", &f.key),
        ]);
        assert_eq!(setting, "tls_cert_file");
        assert!(reason.contains("no PEM certificate"), "{reason}");
        let missing = f.dir.path().join("gone.key").display().to_string();
        let (setting, reason) = refused_setting(&[
            ("TENANTRY_TLS_CERT_FILE", &f.cert),
            ("TENANTRY_TLS_KEY_FILE", &missing),
        ]);
        assert_eq!(setting, "tls_key_file");
        assert!(reason.contains("gone.key"), "{reason}");
    }

    #[test]
    fn a_non_loopback_listener_without_tls_warns_at_start() {
        let token = "0123456789abcdef0123";
        let config = validate(&[
            ("TENANTRY_LISTEN", "0.0.0.0:8080"),
            ("TENANTRY_ADMIN_TOKEN", token),
        ])
        .unwrap();
        let warnings = config.start_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("clear text"), "{warnings:?}");
        let f = files();
        let config = validate(&[
            ("TENANTRY_LISTEN", "0.0.0.0:8080"),
            ("TENANTRY_ADMIN_TOKEN", token),
            ("TENANTRY_TLS_CERT_FILE", &f.cert),
            ("TENANTRY_TLS_KEY_FILE", &f.key),
        ])
        .unwrap();
        assert!(config.start_warnings().is_empty());
    }
}

mod directory;

mod secrets;

/// `otlp_endpoint` (docs/operations.md, "Tracing"): unset by default, read from the file or
/// `TENANTRY_OTLP_ENDPOINT` (which wins), kept without a trailing slash; anything but an
/// `http(s)://` URL with a host is refused naming the setting; empty means unset.
#[test]
fn otlp_endpoint_is_an_optional_http_url() {
    assert_eq!(Config::defaults().otlp_endpoint, None);
    let raw =
        RawConfig::from_toml("otlp_endpoint = \"http://collector:4318/\"\n", "t.toml").unwrap();
    let config = merge_env_and_validate(raw, "t.toml", |_| None).unwrap();
    assert_eq!(
        config.otlp_endpoint.as_deref(),
        Some("http://collector:4318")
    );
    let raw =
        RawConfig::from_toml("otlp_endpoint = \"http://collector:4318\"\n", "t.toml").unwrap();
    let config = merge_env_and_validate(
        raw,
        "t.toml",
        env_of(&[("TENANTRY_OTLP_ENDPOINT", "https://otel.internal")]),
    )
    .unwrap();
    assert_eq!(
        config.otlp_endpoint.as_deref(),
        Some("https://otel.internal")
    );
    let config = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_OTLP_ENDPOINT", "")]),
    )
    .unwrap();
    assert_eq!(config.otlp_endpoint, None);
    for bad in [
        "collector:4318",
        "grpc://collector:4317",
        "http://",
        "http:///v1",
    ] {
        let err = merge_env_and_validate(
            RawConfig::default(),
            "defaults",
            env_of(&[("TENANTRY_OTLP_ENDPOINT", bad)]),
        )
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { setting: "otlp_endpoint", origin, .. } if origin == "TENANTRY_OTLP_ENDPOINT"),
            "{bad}: {err}"
        );
    }
}
