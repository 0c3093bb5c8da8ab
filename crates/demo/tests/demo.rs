//! `tenantry-demo demo` end to end at small scale, on SQLite or (with `TENANTRY_TEST_PG_URL`)
//! PostgreSQL: the workload goes through the admin API over HTTP and every ground-truth check
//! passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tenantry_demo::{DemoOptions, Faults, run};
use tenantry_store_seaorm::testing::fresh_database;

fn options(faults: Faults, seed: u64) -> DemoOptions {
    DemoOptions {
        database_url: None,
        seed,
        scale: 0.05,
        faults,
        timeout: Duration::from_secs(90),
        workers: 4,
        progress: false,
        keep_open: false,
        tls: false,
    }
}

/// `tenantry-demo demo --tls`: both reference remotes serve HTTPS with a certificate of a CA made
/// for the run, the service trusts that CA through `knowledge_fs_ca_file` and
/// `directory_ca_file`, and every check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_at_small_scale_passes_over_https() {
    let db = fresh_database().await;
    let options = DemoOptions {
        tls: true,
        ..options(Faults::Default, 5)
    };
    let report = run(&options, Some(db.db.clone())).await.unwrap();
    let rendered = report.render();
    assert!(report.passed(), "{rendered}");
    assert_eq!(report.remote_scheme, "https");
    assert!(rendered.contains("remotes over https"), "{rendered}");
    assert!(report.directory.memberships > 0, "{rendered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_at_small_scale_passes_with_default_faults() {
    let db = fresh_database().await;
    let report = run(&options(Faults::Default, 7), Some(db.db.clone()))
        .await
        .unwrap();
    let rendered = report.render();
    assert!(report.passed(), "{rendered}");
    assert_eq!(report.control_spaces, 15);
    assert!(report.command_total() >= 15, "{rendered}");
    assert!(rendered.contains("Result: PASS"), "{rendered}");
    let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
    assert!(
        names.contains(&"local directory tables equal the provider's final snapshot"),
        "{names:?}"
    );
    assert!(report.directory.memberships > 0, "{rendered}");
    assert!(report.churn.total() > 0, "{rendered}");
    // The deletion check says what the remote did, split in two numbers that add up to the
    // deleted control spaces.
    let detail = |name: &str| {
        report
            .checks
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.detail.clone())
            .unwrap()
    };
    let numbers = |text: &str| -> Vec<usize> {
        text.split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    let deletions = detail("no remote space left for deleted control spaces");
    assert!(
        deletions.contains("deletions completed remotely")
            && deletions.contains("control spaces deleted before they were provisioned"),
        "{deletions}"
    );
    let states = numbers(&detail("every control space reached its final state"));
    let split = numbers(&deletions);
    assert_eq!(split.len(), 2, "{deletions}");
    assert_eq!(split[0] + split[1], states[1], "{deletions} vs {states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_at_small_scale_passes_with_heavy_faults() {
    let db = fresh_database().await;
    let report = run(&options(Faults::Heavy, 3), Some(db.db.clone()))
        .await
        .unwrap();
    assert!(report.passed(), "{}", report.render());
    assert!(
        report.faults_injected.values().sum::<u64>() > 0,
        "heavy profile injected no fault: {}",
        report.render()
    );
}

#[tokio::test]
async fn demo_refuses_bad_options() {
    let mut bad = options(Faults::None, 1);
    bad.scale = 0.0;
    assert!(run(&bad, None).await.is_err());
    let mut bad = options(Faults::None, 1);
    bad.workers = 0;
    assert!(run(&bad, None).await.is_err());
}
