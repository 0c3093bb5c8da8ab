//! Model checks of the three protocols (`tenantry_verification::{lease, fence, revisions}`):
//! each holds in every reachable state, and for each planted bug the checker finds a
//! counterexample to the property that bug breaks (a check that cannot fail is a defect).

use tenantry_verification::fence::{FenceBug, FenceProtocol};
use tenantry_verification::lease::{LeaseBug, LeaseProtocol};
use tenantry_verification::revisions::{RevisionBug, RevisionProtocol};
use tenantry_verification::{check_holds, find_counterexample, model_checks_run_here};

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
];

/// Each planted directory-revision bug and the property the checker must find broken.
const REVISION_BUGS: &[(RevisionBug, &str)] =
    &[(RevisionBug::ApplyWithoutLock, "revisions never go back")];

#[test]
fn lease_protocol_holds_in_every_reachable_state() {
    if model_checks_run_here() {
        let report = check_holds("lease protocol", LeaseProtocol::correct());
        assert!(report.unique_states > 100_000, "{report:?}");
    }
}

#[test]
fn fence_protocol_holds_in_every_reachable_state() {
    if model_checks_run_here() {
        let report = check_holds("fence protocol", FenceProtocol::correct());
        assert!(report.unique_states > 1_000, "{report:?}");
    }
}

#[test]
fn directory_revisions_hold_in_every_reachable_state() {
    if model_checks_run_here() {
        let report = check_holds("directory revisions", RevisionProtocol::correct());
        assert!(report.unique_states > 10, "{report:?}");
    }
}

#[test]
fn every_planted_lease_bug_is_caught() {
    for &(bug, property) in LEASE_BUGS.iter().filter(|_| model_checks_run_here()) {
        println!("planted lease bug {bug:?}");
        find_counterexample(LeaseProtocol::with_bug(bug), property);
    }
}

#[test]
fn every_planted_fence_bug_is_caught() {
    for &(bug, property) in FENCE_BUGS.iter().filter(|_| model_checks_run_here()) {
        println!("planted fence bug {bug:?}");
        find_counterexample(FenceProtocol::with_bug(bug), property);
    }
}

#[test]
fn every_planted_revision_bug_is_caught() {
    for &(bug, property) in REVISION_BUGS.iter().filter(|_| model_checks_run_here()) {
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
    if model_checks_run_here() {
        let model = LeaseProtocol {
            slow_lookups: true,
            ..LeaseProtocol::correct()
        };
        let report = check_holds("lease protocol with slow lookups", model);
        assert!(report.unique_states > 100_000, "{report:?}");
    }
}
