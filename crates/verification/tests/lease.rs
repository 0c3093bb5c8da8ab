//! Model check of the lease protocol and its planted bugs (`tenantry_verification::lease`).

use tenantry_verification::lease::{LeaseBug, LeaseProtocol};
use tenantry_verification::{check_holds, find_counterexample, model_checks_run_here};

#[test]
fn lease_protocol_holds_in_every_reachable_state() {
    if !model_checks_run_here() {
        return;
    }
    let report = check_holds("lease protocol", LeaseProtocol::correct());
    assert!(report.unique_states > 100_000, "{report:?}");
}

#[test]
fn settle_without_the_epoch_check_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        LeaseProtocol::with_bug(LeaseBug::SettleWithoutEpochCheck),
        "no settle accepted from a stale epoch",
    );
}

#[test]
fn claim_without_the_expiry_check_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        LeaseProtocol::with_bug(LeaseBug::ClaimWithoutExpiryCheck),
        "at most one live lease per command",
    );
}

#[test]
fn lease_judged_on_a_skewed_wall_clock_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        LeaseProtocol::with_bug(LeaseBug::LeaseCheckOnWallClock),
        "at most one live lease per command",
    );
}

/// A finding of the model (docs/verification.md, "Finding: slow lookups"): when time passes
/// between a lookup's answer and the decision on it, absence observed before a late provision
/// landed completes the deletion. The default model keeps the decision at the answer's time;
/// this test pins the finding so a fix shows up here.
#[test]
fn a_slow_lookup_can_complete_a_deletion_before_a_late_provision_lands() {
    if !model_checks_run_here() {
        return;
    }
    let model = LeaseProtocol {
        slow_lookups: true,
        ..LeaseProtocol::correct()
    };
    find_counterexample(model, "a deleted control space has no remote space");
}
