//! Model checks of the three protocols (`tenantry_verification::{lease, fence, revisions}`):
//! each holds in every reachable state, and for each planted bug the checker finds a
//! counterexample to the property that bug breaks (a check that cannot fail is a defect).

use tenantry_verification::fence::{FenceBug, FenceProtocol};
use tenantry_verification::lease::{LeaseBug, LeaseProtocol};
use tenantry_verification::revisions::{RevisionBug, RevisionProtocol};
use tenantry_verification::{check_holds, find_counterexample};

/// Each planted lease bug and the property the checker must find broken.
const LEASE_BUGS: &[(LeaseBug, &str)] = &[
    (
        LeaseBug::SettleWithoutEpochCheck,
        "no settle accepted from a stale epoch",
    ),
    (
        LeaseBug::ClaimWithoutExpiryCheck,
        "at most one live lease per command",
    ),
    (
        LeaseBug::LeaseCheckOnWallClock,
        "at most one live lease per command",
    ),
    (
        LeaseBug::AbsenceJudgedAtAnswer,
        "a deleted control space has no remote space",
    ),
    (
        LeaseBug::NonIdempotentRemote,
        "at most one remote space per provisioning key",
    ),
];

/// Each planted fence bug and the property the checker must find broken.
const FENCE_BUGS: &[(FenceBug, &str)] = &[
    (
        FenceBug::WriteWithoutScopeLock,
        "writes to one scope are serialized",
    ),
    (
        FenceBug::DispatchWithoutIntent,
        "no dispatched mutation without a durable marker",
    ),
    (
        FenceBug::ClearWithoutAgeCheck,
        "clearing never erases the only record of an in-flight outcome",
    ),
    (
        FenceBug::ExpiredIntentCountsAsFree,
        "no write dispatched while an earlier unknown outcome is unresolved",
    ),
    (
        FenceBug::OwnerKeptAcrossRestart,
        "no write dispatched while an earlier unknown outcome is unresolved",
    ),
    (
        FenceBug::FenceForgetsItsRequest,
        "clearing never erases the only record of an in-flight outcome",
    ),
    (
        FenceBug::JudgedOnProcessClock,
        "clearing never erases the only record of an in-flight outcome",
    ),
];

/// Each planted directory-revision bug and the property the checker must find broken.
const REVISION_BUGS: &[(RevisionBug, &str)] =
    &[(RevisionBug::ApplyWithoutLock, "revisions never go back")];

#[test]
fn lease_protocol_holds_in_every_reachable_state() {
    let report = check_holds("lease protocol", LeaseProtocol::correct());
    assert!(report.unique_states > 100_000, "{report:?}");
}

#[test]
fn fence_protocol_holds_in_every_reachable_state() {
    let report = check_holds("fence protocol", FenceProtocol::correct());
    assert!(report.unique_states > 1_000, "{report:?}");
}

#[test]
fn directory_revisions_hold_in_every_reachable_state() {
    let report = check_holds("directory revisions", RevisionProtocol::correct());
    assert!(report.unique_states > 10, "{report:?}");
}

#[test]
fn every_planted_lease_bug_is_caught() {
    for &(bug, property) in LEASE_BUGS {
        println!("planted lease bug {bug:?}");
        find_counterexample(LeaseProtocol::with_bug(bug), property);
    }
}

#[test]
fn every_planted_fence_bug_is_caught() {
    for &(bug, property) in FENCE_BUGS {
        println!("planted fence bug {bug:?}");
        find_counterexample(FenceProtocol::with_bug(bug), property);
    }
}

#[test]
fn every_planted_revision_bug_is_caught() {
    for &(bug, property) in REVISION_BUGS {
        println!("planted revision bug {bug:?}");
        find_counterexample(RevisionProtocol::with_bug(bug), property);
    }
}

/// The fix of a finding of the model (docs/verification.md, "Finding: slow lookups"): with time
/// passing between a lookup's answer and the decision on it, the absence rule judged at the
/// lookup's sending never completes a deletion before a late provision lands (judged at the
/// answer, it did: the planted bug `LeaseBug::AbsenceJudgedAtAnswer`).
#[test]
fn slow_lookups_hold() {
    let model = LeaseProtocol {
        slow_lookups: true,
        ..LeaseProtocol::correct()
    };
    let report = check_holds("lease protocol with slow lookups", model);
    assert!(report.unique_states > 100_000, "{report:?}");
}

/// A PostgreSQL-only run still runs every model and simulation (issue 31): no source of this
/// crate reads the PostgreSQL URL (they used to return early when it was set, so a run on
/// PostgreSQL alone checked nothing). The models and simulations touch no database, except the
/// workers simulation over the SQL store, which runs on the database the store crate's test
/// module picks (SQLite, or that PostgreSQL server): it runs in either run.
#[test]
fn no_model_or_simulation_depends_on_the_postgresql_url() {
    let variable = concat!("TENANTRY_TEST_", "PG_URL");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pending = vec![root.join("src"), root.join("tests")];
    let mut read = 0;
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                read += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    !text.contains(variable),
                    "{} reads {variable}: the models and simulations must run on every database",
                    path.display()
                );
            }
        }
    }
    assert!(
        read > 10,
        "only {read} source files found under {}",
        root.display()
    );
}

/// "No settle accepted from a stale epoch" is observed from the store (the epoch of the settle
/// it last accepted for a row against the epoch of the row's lease), not from a flag a planted
/// bug sets: in the correct model, a store that holds a settle of epoch 1 on a row leased at
/// epoch 2 breaks it, and the store's own record of a current-epoch settle does not.
#[test]
fn the_stale_settle_property_is_read_from_the_store() {
    use stateright::Model;
    let model = LeaseProtocol::correct();
    let property = model
        .properties()
        .into_iter()
        .find(|p| p.name == "no settle accepted from a stale epoch")
        .expect("the lease model checks stale settles");
    let mut state = model.init_states().remove(0);
    state.rows[0].epoch = 2;
    state.rows[0].settled_epoch = Some(2);
    assert!((property.condition)(&model, &state));
    state.rows[0].settled_epoch = Some(1);
    assert!(!(property.condition)(&model, &state));
}
