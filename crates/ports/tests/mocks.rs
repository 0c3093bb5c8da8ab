//! The `mocks` feature: every port trait has a mockall mock, the composite mocks play every
//! role, and an `Option<&T>` argument can be matched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tenantry_directory::{InstanceUuid, WorkspaceUuid};
use tenantry_kernel::{ControlSpaceId, TenantId};
use tenantry_ports::directory::RuntimeExecutionPublisher;
use tenantry_ports::lifecycle::{ControlSpaceReader, LifecycleStore};
use tenantry_ports::mocks::{MockLifecycleStore, MockRuntimeExecutionPublisher};

/// Composite traits (implemented for anything implementing their parts), test-only fixture
/// traits, the forwarding facility's `Decorator`, and `SnapshotSource` (a snapshot's pages as
/// data, not a port with effects: a `DirectorySnapshot` is one, so a test builds the pages it
/// wants), which get no mock of their own.
const NOT_PORTS: &[&str] = &[
    "Decorator",
    "SnapshotSource",
    "LifecycleStore",
    "DirectoryProjectionStore",
    "DirectoryFixtureStore",
    "SuiteStore",
];

#[test]
fn every_port_trait_has_a_mock_in_the_mocks_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mocks = std::fs::read_to_string(src.join("mocks.rs")).unwrap();
    let mut files = Vec::new();
    collect(&src, &mut files);
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("pub trait ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if NOT_PORTS.contains(&name.as_str()) {
                continue;
            }
            seen += 1;
            let mock = format!("Mock{name}");
            let exported = mocks.contains(&format!("{mock},"))
                || mocks.contains(&format!("{mock};"))
                || mocks.contains(&format!("{mock}}}"))
                || mocks.contains(&format!("pub {name} {{"));
            if !exported {
                missing.push(format!("{name} ({})", file.display()));
            }
        }
    }
    assert!(
        seen >= 15,
        "found only {seen} port traits; is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "port traits without a mock: {missing:?}. Add \
         `#[cfg_attr(feature = \"mocks\", mockall::automock)]` above the trait (before \
         `#[async_trait]`) and re-export `MockX` from src/mocks.rs, or write it with \
         `mockall::mock!` there"
    );
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_lifecycle_store(_: &impl LifecycleStore) {}

#[tokio::test]
async fn the_lifecycle_store_mock_plays_every_role_of_the_composite_store() {
    let mut store = MockLifecycleStore::new();
    store
        .expect_control_space()
        .times(1)
        .returning(|_, _| Ok(None));
    is_lifecycle_store(&store);
    let found = store
        .control_space(
            &TenantId::parse("tenant-1").unwrap(),
            &ControlSpaceId::parse("cs1").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(found, None);
}

#[tokio::test]
async fn the_execution_publisher_mock_matches_the_optional_affected_set() {
    let affected = BTreeSet::from([WorkspaceUuid::parse("ws-1").unwrap()]);
    let expected = affected.clone();
    let mut publisher = MockRuntimeExecutionPublisher::new();
    publisher
        .expect_publish_execution_projection()
        .withf(move |_, _, seen| *seen == Some(&expected))
        .times(1)
        .returning(|_, _, _| Ok(()));
    publisher
        .publish_execution_projection(
            &InstanceUuid::parse("inst-1").unwrap(),
            &BTreeMap::new(),
            Some(&affected),
        )
        .await
        .unwrap();
}
