//! Secrets from files, named operators and the database password file.

use super::*;
use tenantry_operator::identity::Role;

/// `*_file` settings: the secret comes from the file (without its final newline), every
/// secret's `Debug` prints nothing of it, and the operators' tokens come from their files.
#[test]
fn secrets_come_from_files_and_never_print() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let admin = file("admin", "admin-secret-0123456789abcdef\n");
    let kfs = file("kfs", "kfs-secret-0123456789\n");
    let key = file("key", "session-secret-0123456789abcdef0123456789\n");
    let alice = file("alice", "alice-secret-0123456789\n");
    let password = file("password", "p@ss word/secret\n");
    let toml = format!(
        "admin_token_file = {admin:?}\nknowledge_fs_token_file = {kfs:?}\nui_session_key_file = {key:?}\n\
         database_url = \"postgres://tenantry@db.internal:5432/tenantry\"\ndatabase_password_file = {password:?}\n\
         [[operators]]\nname = \"alice\"\nrole = \"read\"\ntoken_file = {alice:?}\n"
    );
    let raw = RawConfig::from_toml(&toml, "t.toml").unwrap();
    let config = merge_env_and_validate(raw, "t.toml", |_| None).unwrap();
    assert_eq!(
        config.admin_token.as_ref().unwrap().expose(),
        "admin-secret-0123456789abcdef"
    );
    assert_eq!(
        config.knowledge_fs_token.as_ref().unwrap().expose(),
        "kfs-secret-0123456789"
    );
    assert_eq!(
        config.database_url,
        "postgres://tenantry:p%40ss%20word%2Fsecret@db.internal:5432/tenantry"
    );
    let operators = config.all_operators();
    let names: Vec<(&str, Role)> = operators
        .iter()
        .map(|o| (o.name.as_str(), o.role))
        .collect();
    assert_eq!(names, [("admin", Role::Operate), ("alice", Role::Read)]);
    assert_eq!(
        operators
            .authenticate("alice-secret-0123456789")
            .map(|o| o.name.as_str()),
        Some("alice")
    );
    let shown = format!("{config:?}");
    for secret in [
        "admin-secret",
        "kfs-secret",
        "session-secret",
        "alice-secret",
        "p@ss",
        "p%40ss",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    // The environment's operators replace the file's.
    let bob = file("bob", "bob-secret-0123456789\n");
    let raw = RawConfig::from_toml(&toml, "t.toml").unwrap();
    let config = merge_env_and_validate(
        raw,
        "t.toml",
        env_of(&[("TENANTRY_OPERATORS", &format!("bob:operate:{bob}"))]),
    )
    .unwrap();
    assert_eq!(config.operators.len(), 1);
    assert_eq!(config.operators[0].name, "bob");
    assert_eq!(config.operators[0].role, Role::Operate);
}

/// A missing, empty or doubly given secret is refused naming the setting and the path.
#[test]
fn a_bad_secret_file_is_refused_naming_the_setting_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing").display().to_string();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.display().to_string();
    let refused = |toml: String| {
        let raw = RawConfig::from_toml(&toml, "t.toml").unwrap();
        merge_env_and_validate(raw, "t.toml", |_| None)
            .unwrap_err()
            .to_string()
    };
    for setting in [
        "admin_token_file",
        "knowledge_fs_token_file",
        "ui_session_key_file",
        "database_url_file",
    ] {
        for path in [&missing, &empty] {
            let error = refused(format!("{setting} = {path:?}\n"));
            assert!(
                error.contains(setting) && error.contains(path.as_str()),
                "{setting}: {error}"
            );
        }
    }
    let error = refused(format!(
        "[[operators]]\nname = \"alice\"\nrole = \"operate\"\ntoken_file = {missing:?}\n"
    ));
    assert!(
        error.contains("operators") && error.contains("alice") && error.contains(&missing),
        "{error}"
    );
    let error = refused(format!(
        "admin_token = \"0123456789abcdef0123\"\nadmin_token_file = {empty:?}\n"
    ));
    assert!(
        error.contains("admin_token_file") && error.contains("set one"),
        "{error}"
    );
    let error = refused(
        "[[operators]]\nname = \"alice\"\nrole = \"admin\"\ntoken = \"0123456789abcdef0123\"\n"
            .to_owned(),
    );
    assert!(error.contains("not a role"), "{error}");
    let error = refused(
        "[[operators]]\nname = \"a\"\nrole = \"read\"\ntoken = \"0123456789abcdef0123\"\n\
         [[operators]]\nname = \"b\"\nrole = \"read\"\ntoken = \"0123456789abcdef0123\"\n"
            .to_owned(),
    );
    assert!(error.contains("its own token"), "{error}");
    let error = refused("ui_session_key = \"short\"\n".to_owned());
    assert!(
        error.contains("ui_session_key") && error.contains("32"),
        "{error}"
    );
    // Named operators alone guard a non-loopback listener.
    let raw = RawConfig::from_toml(
        "listen = \"0.0.0.0:8080\"\n[[operators]]\nname = \"a\"\nrole = \"read\"\ntoken = \"0123456789abcdef0123\"\n",
        "t.toml",
    )
    .unwrap();
    assert!(merge_env_and_validate(raw, "t.toml", |_| None).is_ok());
}

#[test]
fn a_password_file_goes_into_the_user_info_of_a_postgres_url() {
    use crate::secrets::with_password;
    let cases = [
        ("postgres://u@h/db", Ok("postgres://u:pw@h/db")),
        (
            "postgresql://u@h1:5432,h2:5433/db?sslmode=require",
            Ok("postgresql://u:pw@h1:5432,h2:5433/db?sslmode=require"),
        ),
        ("postgres://h/db", Err("names no user")),
        ("postgres://u:old@h/db", Err("already holds a password")),
        ("sqlite://x.db", Err("only PostgreSQL")),
    ];
    for (url, expected) in cases {
        match (with_password(url, "pw"), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{url}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{url}: {got}"),
            (got, want) => panic!("{url}: {got:?} vs {want:?}"),
        }
    }
}

/// The settings as read (before validation) print no secret either.
#[test]
fn raw_settings_print_no_secret() {
    let raw = RawConfig::from_toml(
        "admin_token = \"inline-admin-0123456789\"\nknowledge_fs_token = \"inline-kfs-0123456789\"\n\
         database_url = \"postgres://u:inline-pw@h/db\"\n\
         [[operators]]\nname = \"a\"\nrole = \"read\"\ntoken = \"inline-op-0123456789\"\n",
        "t.toml",
    )
    .unwrap();
    let shown = format!("{raw:?}");
    for secret in ["inline-admin", "inline-kfs", "inline-pw", "inline-op"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    let config = merge_env_and_validate(raw, "t.toml", |_| None).unwrap();
    assert_eq!(config.database_url, "postgres://u:inline-pw@h/db");
    assert!(!format!("{config:?}").contains("inline"));
}

/// Found by trying the product: an empty `TENANTRY_OPERATORS` (or one with empty entries) was
/// read as "no operators" and switched authentication off; a secret file without end
/// (`/dev/zero`) filled memory; a syntax error in the file quoted a token. Each is refused now,
/// and the syntax error names its position without the line's text.
#[test]
fn empty_operator_lists_endless_secret_files_and_quoted_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice");
    std::fs::write(&alice, "alice-secret-0123456789\n").unwrap();
    let alice = alice.display().to_string();
    let toml =
        format!("[[operators]]\nname = \"alice\"\nrole = \"read\"\ntoken_file = {alice:?}\n");
    for value in [
        "",
        " ",
        ",",
        format!("alice:operate:{alice},").as_str(),
        "a:read:/x,,b:read:/y",
    ] {
        let raw = RawConfig::from_toml(&toml, "t.toml").unwrap();
        let err = merge_env_and_validate(raw, "t.toml", env_of(&[("TENANTRY_OPERATORS", value)]))
            .unwrap_err();
        assert!(
            matches!(
                &err,
                ConfigError::Invalid {
                    setting: "operators",
                    ..
                }
            ),
            "{value:?}: {err}"
        );
    }
    let endless = "[[operators]]\nname = \"zed\"\nrole = \"read\"\ntoken_file = \"/dev/zero\"\n";
    let raw = RawConfig::from_toml(endless, "t.toml").unwrap();
    let err = merge_env_and_validate(raw, "t.toml", |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/dev/zero") && err.contains("larger than"),
        "{err}"
    );

    let broken =
        "[[operators]]\nname = \"x\"\nrole = \"read\"\ntoken = \"TopSecretTokenValue9876\n";
    let err = RawConfig::from_toml(broken, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(!err.contains("TopSecret"), "{err}");
    assert!(err.contains("line 4"), "{err}");
}
