//! Model check of directory revisions and their planted bugs
//! (`tenantry_verification::revisions`).

use tenantry_verification::revisions::{RevisionBug, RevisionProtocol};
use tenantry_verification::{check_holds, find_counterexample, model_checks_run_here};

#[test]
fn directory_revisions_hold_in_every_reachable_state() {
    if !model_checks_run_here() {
        return;
    }
    let report = check_holds("directory revisions", RevisionProtocol::correct());
    assert!(report.unique_states > 10, "{report:?}");
}

#[test]
fn apply_without_the_state_row_lock_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        RevisionProtocol::with_bug(RevisionBug::ApplyWithoutLock),
        "revisions never go back",
    );
}
