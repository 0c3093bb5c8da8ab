//! Model check of the fence protocol and its planted bugs (`tenantry_verification::fence`).

use tenantry_verification::fence::{FenceBug, FenceProtocol};
use tenantry_verification::{check_holds, find_counterexample, model_checks_run_here};

#[test]
fn fence_protocol_holds_in_every_reachable_state() {
    if !model_checks_run_here() {
        return;
    }
    let report = check_holds("fence protocol", FenceProtocol::correct());
    assert!(report.unique_states > 1_000, "{report:?}");
}

#[test]
fn write_without_the_scope_lock_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        FenceProtocol::with_bug(FenceBug::WriteWithoutScopeLock),
        "writes to one scope are serialized",
    );
}

#[test]
fn dispatch_without_a_write_ahead_intent_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        FenceProtocol::with_bug(FenceBug::DispatchWithoutIntent),
        "no dispatched mutation without a durable marker",
    );
}

#[test]
fn clear_without_the_age_check_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        FenceProtocol::with_bug(FenceBug::ClearWithoutAgeCheck),
        "clearing never erases the only record of an in-flight outcome",
    );
}

#[test]
fn an_expired_intent_read_as_free_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        FenceProtocol::with_bug(FenceBug::ExpiredIntentCountsAsFree),
        "no write dispatched while an earlier unknown outcome is unresolved",
    );
}

#[test]
fn an_owner_kept_across_a_restart_is_caught() {
    if !model_checks_run_here() {
        return;
    }
    find_counterexample(
        FenceProtocol::with_bug(FenceBug::OwnerKeptAcrossRestart),
        "no write dispatched while an earlier unknown outcome is unresolved",
    );
}
