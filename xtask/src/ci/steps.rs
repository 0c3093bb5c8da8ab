//! The packaging and chaos steps of the gate, each with its cargo arguments and time budget.

use std::time::Duration;

use super::StepKind;

/// Crates that have the mechanism features `lifecycle`, `directory` and `fences`.
const MECHANISM_CRATES: &[&str] = &[
    "tenantry-ports",
    "tenantry-engine",
    "tenantry-store-seaorm",
    "tenantry-remote-http",
];

/// Workspace members that are not published (`publish = false`), left out of `cargo package`.
const UNPUBLISHED: &[&str] = &[
    "tenantry-app",
    "tenantry-bench",
    "tenantry-chaos",
    "tenantry-config",
    "tenantry-demo",
    "tenantry-examples",
    "tenantry-operator",
    "tenantry-verification",
    "xtask",
];

/// One of the packaging steps after the test runs, with its time budget.
pub(super) struct PackagingStep {
    /// Name in the banner and summary.
    pub(super) name: &'static str,
    /// What `--skip` names it by.
    pub(super) kind: StepKind,
    /// Longest acceptable duration on 2 cores, from a cold target directory (docs/operations.md
    /// has the measured cold and warm times).
    pub(super) budget: Duration,
    /// The cargo arguments.
    pub(super) args: fn() -> Vec<String>,
    /// Extra environment.
    pub(super) env: &'static [(&'static str, &'static str)],
    /// Whether to count libtest results.
    pub(super) tests: bool,
}

/// The packaging steps, in order.
pub(super) const PACKAGING_STEPS: &[PackagingStep] = &[
    PackagingStep {
        name: "check (lifecycle alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(120),
        args: || mechanism_args("check", "lifecycle"),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "check (directory alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(120),
        args: || mechanism_args("check", "directory"),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "test (fences alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(360),
        args: || mechanism_args("test", "fences"),
        env: &[],
        tests: true,
    },
    // The model-based check of the SQL store (`crates/verification/tests/store_sequences.rs`)
    // built with the store's settle missing its lease predicate: it must name the property.
    PackagingStep {
        name: "test (planted store mutation found)",
        kind: StepKind::Planted,
        budget: Duration::from_secs(240),
        args: || planted_test_args("planted-store-settle", "store_sequences"),
        env: &[],
        tests: true,
    },
    // Every planted mutation of shipped rules (`crates/verification/tests/planted.rs`), each
    // switched on alone at run time: the models, simulations and the SQL store check must each
    // name the property it breaks.
    PackagingStep {
        name: "test (planted mutations found)",
        kind: StepKind::Planted,
        budget: Duration::from_secs(300),
        args: || planted_test_args("planted-mutations", "planted"),
        env: &[],
        tests: true,
    },
    // The console in headless Chromium (`crates/app/tests/ui_browser.rs`): `#[ignore]`d in
    // the two test runs, run here once; a missing browser fails this step.
    PackagingStep {
        name: "test (browser)",
        kind: StepKind::Browser,
        budget: Duration::from_secs(240),
        args: || {
            words(&[
                "test",
                "-p",
                "tenantry-app",
                "--test",
                "ui_browser",
                "--locked",
                "--",
                "--ignored",
            ])
        },
        env: &[("TENANTRY_REQUIRE_BROWSER", "1")],
        tests: true,
    },
    PackagingStep {
        name: "doc",
        kind: StepKind::Docs,
        budget: Duration::from_secs(180),
        args: || {
            words(&[
                "doc",
                "--workspace",
                "--all-features",
                "--no-deps",
                "--locked",
            ])
        },
        env: &[("RUSTDOCFLAGS", "-D warnings")],
        tests: false,
    },
    PackagingStep {
        name: "test (outside fixture crate)",
        kind: StepKind::Embedding,
        budget: Duration::from_secs(300),
        args: || {
            words(&[
                "test",
                "--manifest-path",
                "fixtures/host-platform/Cargo.toml",
                "--target-dir",
                "target",
                "--locked",
            ])
        },
        env: &[],
        tests: true,
    },
    PackagingStep {
        name: "package",
        kind: StepKind::Package,
        budget: Duration::from_secs(600),
        args: package_args,
        env: &[],
        tests: false,
    },
];

/// The chaos steps after the packaging steps (issue 11, docs/reliability.md): the short
/// profile on a throwaway PostgreSQL cluster (3 replicas, about 1,000 commands), the SQLite
/// profile (one replica, killed and restarted), and the planted bug, which the harness must
/// catch. Debug binaries: the test steps already built the app (docs/reliability.md, "In CI").
pub(super) const CHAOS_STEPS: &[PackagingStep] = &[
    PackagingStep {
        name: "chaos (PostgreSQL, 3 replicas)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(300),
        args: || {
            chaos_args(&[
                "--",
                "--replicas",
                "3",
                "--commands",
                "1000",
                "--duration",
                "60",
            ])
        },
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (PostgreSQL HA, failover)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(300),
        args: || {
            chaos_args(&[
                "--ha",
                "--",
                "--replicas",
                "3",
                "--commands",
                "600",
                "--duration",
                "40",
            ])
        },
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (SQLite, 1 replica)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(180),
        args: || chaos_args(&["--sqlite", "--", "--commands", "400"]),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (planted bug caught)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(420),
        args: || {
            chaos_args(&[
                "--planted-bug",
                "--",
                "--replicas",
                "3",
                "--commands",
                "1000",
                "--faults",
                "pauses",
                "--duration",
                "45",
                "--timeout",
                "60",
            ])
        },
        env: &[],
        tests: false,
    },
];

/// `list` as owned strings (a command line).
pub(super) fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|word| (*word).to_owned()).collect()
}

/// `cargo test -p tenantry-verification --features <feature> --test <test> --locked`: a check
/// of the verification crate built with a planted mutation.
fn planted_test_args(feature: &str, test: &str) -> Vec<String> {
    words(&[
        "test",
        "-p",
        "tenantry-verification",
        "--features",
        feature,
        "--test",
        test,
        "--locked",
    ])
}

/// `cargo xtask chaos --debug <extra> --no-progress` (the seed is the harness's default, 1).
fn chaos_args(extra: &[&str]) -> Vec<String> {
    let mut args = words(&["xtask", "chaos", "--debug"]);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    if !extra.contains(&"--") {
        args.push("--".to_owned());
    }
    args.push("--no-progress".to_owned());
    args
}

/// Clears stale extracted sources of our crates before `cargo package` (see
/// [`crate::package_sources`]); a failure is printed and the step runs anyway, since Cargo's
/// own error then shows what is wrong.
pub(super) fn clear_stale_package_sources() {
    let Some(home) = crate::package_sources::cargo_home() else {
        return;
    };
    match crate::package_sources::clear_stale_extracted_sources(&home) {
        Ok(0) => {}
        Ok(removed) => println!(
            "package: removed {removed} stale extracted source folder(s) of our crates from {}",
            home.join("registry").join("src").display()
        ),
        Err(error) => eprintln!("package: could not clear stale extracted sources: {error}"),
    }
}

/// `cargo <command>` of the mechanism crates with only `feature`.
fn mechanism_args(command: &str, feature: &str) -> Vec<String> {
    let mut args = vec![command.to_owned(), "--locked".to_owned()];
    for package in MECHANISM_CRATES {
        args.extend(["--package".to_owned(), (*package).to_owned()]);
    }
    args.extend([
        "--no-default-features".to_owned(),
        "--features".to_owned(),
        feature.to_owned(),
    ]);
    args
}

/// `cargo package` of every published crate. `--allow-dirty`: the step checks that the
/// packages build, not that the work tree is committed.
fn package_args() -> Vec<String> {
    let mut args = words(&["package", "--workspace", "--locked", "--allow-dirty"]);
    for package in UNPUBLISHED {
        args.extend(["--exclude".to_owned(), (*package).to_owned()]);
    }
    args
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn package_step_leaves_out_exactly_the_unpublished_members() {
        let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(crate::workspace_root())
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .output()
            .expect("run cargo metadata");
        assert!(output.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
        let packages = metadata["packages"].as_array().expect("packages");
        // `publish = false` is `"publish": []` in cargo metadata; `null` means crates.io.
        let mut unpublished: Vec<&str> = packages
            .iter()
            .filter(|p| p["publish"].as_array().is_some_and(Vec::is_empty))
            .filter_map(|p| p["name"].as_str())
            .collect();
        unpublished.sort_unstable();
        let mut expected = UNPUBLISHED.to_vec();
        expected.sort_unstable();
        assert_eq!(unpublished, expected);

        let args = package_args();
        for package in UNPUBLISHED {
            assert!(
                args.windows(2)
                    .any(|w| w[0] == "--exclude" && w[1] == *package),
                "{args:?}"
            );
        }
        assert!(args.contains(&"--workspace".to_owned()));
    }

    #[test]
    fn mechanism_steps_name_every_mechanism_crate_and_one_feature() {
        let args = mechanism_args("check", "lifecycle");
        assert_eq!(args[0], "check");
        for package in MECHANISM_CRATES {
            assert!(args.iter().any(|a| a == package), "{args:?}");
        }
        assert!(
            args.ends_with(&[
                "--no-default-features".to_owned(),
                "--features".to_owned(),
                "lifecycle".to_owned()
            ]),
            "{args:?}"
        );
    }
}
