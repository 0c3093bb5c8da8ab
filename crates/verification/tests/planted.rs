//! Planted mutations of shipped rules (feature `planted-mutations`; docs/verification.md,
//! "Properties and planted mutations"): each is switched on alone
//! (`tenantry_kernel::planted::activate`), every checker named for it runs over the mutated
//! rule, and each must report the property the mutation breaks. The mutated rules are the ones
//! that ship: the fence runtime's record rules (`tenantry_fence`), the directory planner
//! (`tenantry_directory`), the SQL store's claim (`tenantry-store-seaorm`), the in-memory
//! store's rules the lease model and the workers simulation call
//! (`tenantry_ports::lifecycle::fake`), the saga's rules (`tenantry_lifecycle`) and the
//! dispatcher (`tenantry-engine`).
#![cfg(feature = "planted-mutations")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tenantry_kernel::planted::activate;
use tenantry_ports::clock::ManualClock;
use tenantry_ports::lifecycle::conformance::{compare_sequence, t};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;
use tenantry_verification::fence::FenceProtocol;
use tenantry_verification::find_counterexample;
use tenantry_verification::lease::LeaseProtocol;
use tenantry_verification::revisions::RevisionProtocol;
use tenantry_verification::sim;

/// A checker run over the active mutation: `Err` with what it reported, `Ok` when it found
/// nothing.
type Finding = Result<(), String>;

fn model<M>(model: M, property: &'static str) -> Finding
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    // `find_counterexample` panics when the property holds everywhere.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        find_counterexample(model, property)
    })) {
        Ok(path) => Err(format!(
            "{property}: counterexample in {} steps",
            path.lines().count()
        )),
        Err(_) => Ok(()),
    }
}

fn simulation<S>(run: impl Fn(u64) -> Result<S, sim::SimFailure>, seeds: u64) -> Finding {
    match (0..seeds).find_map(|seed| run(seed).err()) {
        Some(failure) => Err(failure.to_string()),
        None => Ok(()),
    }
}

/// The workers simulation (the engine's worker pool over group commit and the in-memory
/// store) with the CI test's seeds and steps.
fn workers_simulation() -> Finding {
    simulation(|seed| sim::workers::run(seed, 2_500, None), 48)
}

/// The lifecycle simulation (one dispatcher over the in-memory store) with the CI test's seeds.
fn lifecycle_simulation() -> Finding {
    simulation(|seed| sim::run(seed, 5_000, None), 120)
}

/// The fences simulation (two processes' fence runtimes and an operator).
fn fences_simulation() -> Finding {
    simulation(|seed| sim::fences::run(seed, 2_000, None), 100)
}

/// The projector simulation (two projector replicas against a reordering directory).
fn projector_simulation() -> Finding {
    simulation(|seed| sim::projector::run(seed, 2_500, None), 40)
}

fn store_sequences() -> Finding {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for seed in 0..12 {
            let test_db = fresh_database().await;
            let clock = ManualClock::new(t(0));
            let store = SeaOrmLifecycleStore::new(&test_db.db).with_clock(Arc::new(clock.clone()));
            if let Err(divergence) = compare_sequence(&store, &clock, seed, 200).await {
                return Err(divergence.to_string());
            }
        }
        Ok(())
    })
}

/// The fence model's property that a clear never erases the only record of an outcome in
/// flight (two planted mutations break it).
const CLEARING_KEEPS_IN_FLIGHT: &str =
    "clearing never erases the only record of an in-flight outcome";

/// The fence model's property that a dispatched mutation has a durable marker while its
/// request is in flight or its outcome unresolved.
const MARKER_WHILE_NEEDED: &str = "no dispatched mutation without a durable marker";

/// One checker of one mutation: its name, how to run it, and the text its report must hold.
struct Check {
    mutation: &'static str,
    checker: &'static str,
    run: fn() -> Finding,
    expected: &'static str,
}

const CHECKS: &[Check] = &[
    Check {
        mutation: "expired-intent-counts-as-free",
        checker: "fence model",
        run: || {
            model(
                FenceProtocol::correct(),
                "no write dispatched while an earlier unknown outcome is unresolved",
            )
        },
        expected: "no write dispatched while an earlier unknown outcome is unresolved",
    },
    Check {
        mutation: "expired-intent-counts-as-free",
        checker: "fences simulation",
        run: fences_simulation,
        expected: "unknown outcome there is unresolved",
    },
    Check {
        mutation: "claim-of-another-owner-taken",
        checker: "fence model",
        run: || {
            model(
                FenceProtocol::correct(),
                "writes to one scope are serialized",
            )
        },
        expected: "writes to one scope are serialized",
    },
    Check {
        mutation: "unknown-outcome-clears-intent",
        checker: "fence model",
        run: || model(FenceProtocol::correct(), MARKER_WHILE_NEEDED),
        expected: MARKER_WHILE_NEEDED,
    },
    Check {
        mutation: "claim-of-another-owner-taken",
        checker: "fences simulation",
        run: fences_simulation,
        expected: "is in flight",
    },
    Check {
        mutation: "unknown-outcome-clears-intent",
        checker: "fences simulation",
        run: fences_simulation,
        expected: "but no marker in storage",
    },
    Check {
        mutation: "clear-without-age-check",
        checker: "fence model",
        run: || model(FenceProtocol::correct(), CLEARING_KEEPS_IN_FLIGHT),
        expected: CLEARING_KEEPS_IN_FLIGHT,
    },
    Check {
        mutation: "clear-without-age-check",
        checker: "fences simulation",
        run: fences_simulation,
        expected: "was in flight",
    },
    Check {
        mutation: "fence-forgets-its-request",
        checker: "fence model",
        run: || model(FenceProtocol::correct(), CLEARING_KEEPS_IN_FLIGHT),
        expected: CLEARING_KEEPS_IN_FLIGHT,
    },
    Check {
        mutation: "claim-takes-live-lease",
        checker: "lease model",
        run: || {
            model(
                LeaseProtocol::correct(),
                "at most one live lease per command",
            )
        },
        expected: "at most one live lease per command",
    },
    Check {
        mutation: "settle-without-lease-check",
        checker: "lease model",
        run: || {
            model(
                LeaseProtocol::correct(),
                "no settle accepted from a stale epoch",
            )
        },
        expected: "no settle accepted from a stale epoch",
    },
    Check {
        mutation: "absence-judged-at-answer",
        checker: "lease model (slow lookups)",
        run: || {
            model(
                LeaseProtocol {
                    slow_lookups: true,
                    ..LeaseProtocol::correct()
                },
                "a deleted control space has no remote space",
            )
        },
        expected: "a deleted control space has no remote space",
    },
    Check {
        mutation: "sql-claim-takes-live-lease",
        checker: "SQL store against the model",
        run: store_sequences,
        expected: "at most one live lease per command",
    },
    Check {
        mutation: "settle-without-lease-check",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "a settle from a stale lease was accepted",
    },
    Check {
        mutation: "claim-takes-live-lease",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "live leases on command",
    },
    Check {
        mutation: "call-without-lease-check",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "without the command's current lease",
    },
    Check {
        mutation: "provisioning-key-per-attempt",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "spaces created for",
    },
    Check {
        mutation: "provision-keys-per-attempt",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "which names no command",
    },
    Check {
        mutation: "renewal-of-expired-lease",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "a renewal of a stale or expired lease was accepted",
    },
    Check {
        mutation: "provision-keys-per-attempt",
        checker: "lifecycle simulation",
        run: lifecycle_simulation,
        expected: "remote spaces for",
    },
    Check {
        mutation: "deletion-keeps-state",
        checker: "lifecycle simulation",
        run: lifecycle_simulation,
        expected: ", deleted: true }",
    },
    Check {
        mutation: "found-space-read-as-absent",
        checker: "lifecycle simulation",
        run: lifecycle_simulation,
        expected: "is deleted but its remote space exists",
    },
    Check {
        mutation: "transport-failure-is-permanent",
        checker: "lifecycle simulation",
        run: lifecycle_simulation,
        expected: "ended failed",
    },
    Check {
        mutation: "absence-without-grace",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "is deleted but its remote space exists",
    },
    Check {
        mutation: "deletion-done-while-draining",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "is deleted but its remote space exists",
    },
    Check {
        mutation: "provision-activates-over-deletion",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "is active for Asked { deleted: true }",
    },
    Check {
        mutation: "lookup-outside-slot",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "remote calls open, over its",
    },
    Check {
        mutation: "overtaken-provision-fails",
        checker: "workers simulation",
        run: workers_simulation,
        expected: "ended failed",
    },
    Check {
        mutation: "older-snapshot-applied",
        checker: "projector simulation",
        run: projector_simulation,
        expected: "one revision never takes two contents",
    },
    Check {
        mutation: "older-revision-applied",
        checker: "projector simulation",
        run: projector_simulation,
        expected: sim::projector::REVISION_NEVER_GOES_BACK,
    },
    Check {
        mutation: "older-revision-applied",
        checker: "revisions model",
        run: || model(RevisionProtocol::correct(), "revisions never go back"),
        expected: "revisions never go back",
    },
    Check {
        mutation: "cursor-follows-batch",
        checker: "projector simulation",
        run: projector_simulation,
        expected: sim::projector::CURSOR_NEVER_GOES_BACK,
    },
    Check {
        mutation: "write-replaces-workspaces",
        checker: "projector simulation",
        run: projector_simulation,
        expected: sim::projector::ROW_NEVER_VANISHES,
    },
    Check {
        mutation: "revision-takes-other-content",
        checker: "revisions model",
        run: || {
            model(
                RevisionProtocol::correct(),
                "the same revision never takes different content",
            )
        },
        expected: "the same revision never takes different content",
    },
];

#[test]
fn every_planted_mutation_of_shipped_code_is_found() {
    let mut missed = Vec::new();
    for check in CHECKS {
        activate(Some(check.mutation));
        let finding = (check.run)();
        activate(None);
        match finding {
            Err(report) if report.contains(check.expected) => {
                println!(
                    "{} found by the {}:\n  {report}",
                    check.mutation, check.checker
                );
            }
            Err(report) => missed.push(format!(
                "{} / {}: reported something else: {report}",
                check.mutation, check.checker
            )),
            Ok(()) => missed.push(format!(
                "{} / {}: found nothing",
                check.mutation, check.checker
            )),
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
    // Switched off again, the SQL store check finds nothing (the switch is the only change;
    // the other checkers run switched off in their own tests).
    assert_eq!(store_sequences(), Ok(()));
}
