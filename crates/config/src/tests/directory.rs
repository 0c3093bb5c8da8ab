//! The directory settings: validated together, and the capacity limits and the response cap
//! as settings with their bounds.

use super::*;

#[test]
fn directory_settings_are_validated_together() {
    let key = "ab".repeat(32);
    let env = env_of(&[
        ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
        ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
    ]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Missing {
            setting: "directory_trusted_keys",
            ..
        }
    ));
    let keys = format!("k1={key}, k2={key}");
    let env = env_of(&[
        ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
        ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
        ("TENANTRY_DIRECTORY_TRUSTED_KEYS", keys.as_str()),
    ]);
    let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
    let directory = config.directory.unwrap();
    assert_eq!(directory.trusted_keys.len(), 2);
    assert_eq!(directory.max_staleness, Duration::from_secs(300));
    let env = env_of(&[
        ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
        ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
        ("TENANTRY_DIRECTORY_TRUSTED_KEYS", "k1=xyz"),
    ]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            setting: "directory_trusted_keys",
            ..
        }
    ));
    let env = env_of(&[("TENANTRY_DIRECTORY_INSTANCE", "inst-1")]);
    let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            setting: "directory_instance",
            ..
        }
    ));
    assert_eq!(Config::defaults().directory, None);
}

/// The capacity limits and the response cap are settings: defaults are the engine's and the
/// client's, the file and the environment set them, and a value out of range is refused
/// naming the setting and its bounds.
#[test]
fn directory_capacity_limits_are_settings() {
    let key = "ab".repeat(32);
    let keys = format!("k1={key}");
    let base = [
        ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
        ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
        ("TENANTRY_DIRECTORY_TRUSTED_KEYS", keys.as_str()),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut pairs: Vec<(&str, &str)> = base.to_vec();
        pairs.extend_from_slice(extra);
        merge_env_and_validate(RawConfig::default(), "defaults", env_of(&pairs))
    };
    let capacity = with(&[]).unwrap().directory_capacity;
    assert_eq!(
        capacity.limits,
        tenantry_directory::ProjectionLimits::default()
    );
    assert_eq!(
        capacity.max_response_bytes,
        tenantry_remote_http::directory::DEFAULT_MAX_RESPONSE_BYTES
    );
    assert_eq!(Config::defaults().directory_capacity, capacity);

    let capacity = with(&[
        ("TENANTRY_DIRECTORY_MAX_SNAPSHOT_WORKSPACES", "20000"),
        ("TENANTRY_DIRECTORY_MAX_SNAPSHOT_MEMBERSHIPS", "1000000"),
        ("TENANTRY_DIRECTORY_MAX_ACTIVE_WORKSPACES", "15000"),
        ("TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES", "536870912"),
        ("TENANTRY_DIRECTORY_SNAPSHOT_PAGE_SIZE", "0"),
    ])
    .unwrap()
    .directory_capacity;
    assert_eq!(capacity.limits.max_snapshot_workspaces, 20_000);
    assert_eq!(capacity.limits.max_snapshot_memberships, 1_000_000);
    assert_eq!(capacity.limits.max_active_workspaces, 15_000);
    assert_eq!(capacity.max_response_bytes, 512 * 1024 * 1024);
    assert_eq!(
        capacity.snapshot_page_size, 0,
        "0 asks for the whole snapshot"
    );

    let raw = RawConfig::from_toml(
        &format!(
            "directory_url = \"http://127.0.0.1:9\"\ndirectory_instance = \"inst-1\"\ndirectory_trusted_keys = \"{keys}\"\ndirectory_max_snapshot_memberships = 250000\n"
        ),
        "tenantry.toml",
    )
    .unwrap();
    let config = merge_env_and_validate(raw, "tenantry.toml", env_of(&[])).unwrap();
    assert_eq!(
        config.directory_capacity.limits.max_snapshot_memberships,
        250_000
    );

    let refused = [
        (
            "TENANTRY_DIRECTORY_MAX_SNAPSHOT_WORKSPACES",
            "0",
            "directory_max_snapshot_workspaces",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_SNAPSHOT_WORKSPACES",
            "1000001",
            "directory_max_snapshot_workspaces",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_SNAPSHOT_MEMBERSHIPS",
            "0",
            "directory_max_snapshot_memberships",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_SNAPSHOT_MEMBERSHIPS",
            "10000001",
            "directory_max_snapshot_memberships",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_ACTIVE_WORKSPACES",
            "0",
            "directory_max_active_workspaces",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES",
            "1000",
            "directory_max_response_bytes",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES",
            "4294967297",
            "directory_max_response_bytes",
        ),
        (
            "TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES",
            "-1",
            "directory_max_response_bytes",
        ),
        (
            "TENANTRY_DIRECTORY_SNAPSHOT_PAGE_SIZE",
            "10000001",
            "directory_snapshot_page_size",
        ),
    ];
    for (variable, value, expected) in refused {
        let error = with(&[(variable, value)]).unwrap_err();
        let ConfigError::Invalid {
            setting, origin, ..
        } = &error
        else {
            panic!("{variable}={value}: {error:?}");
        };
        assert_eq!(*setting, expected, "{variable}={value}");
        assert_eq!(origin, variable);
        assert!(error.to_string().contains(expected), "{error}");
    }

    // Without a directory they are stray settings, refused like the other directory_* ones.
    let error = merge_env_and_validate(
        RawConfig::default(),
        "defaults",
        env_of(&[("TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES", "2000000")]),
    )
    .unwrap_err();
    assert!(matches!(
        error,
        ConfigError::Invalid {
            setting: "directory_max_response_bytes",
            ..
        }
    ));
}
