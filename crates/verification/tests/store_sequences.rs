//! The store rules checked where they live: the real SeaORM store (SQLite, or PostgreSQL when the
//! test kit is pointed at a server: `tenantry_store_seaorm::testing`) driven with seeded sequences of claims, renewals, settles,
//! intakes and steps of the database clock, every answer and every row compared with the
//! in-memory store, the executable model whose rules (`is_due`, `holds_lease`,
//! `supersede_allowed`) the lease model calls (`tenantry_ports::lifecycle::conformance::
//! compare_sequence`; docs/verification.md, section 1).
//!
//! With the feature `planted-store-settle` the SQL store runs behind the planted settle
//! ([`tenantry_verification::planted_settle`], the chaos harness's planted bug: each settle
//! first hands the command back to its lease, so the lease check never refuses), and the check
//! must name the property it breaks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tenantry_ports::clock::ManualClock;
use tenantry_ports::lifecycle::conformance::{Coverage, Divergence, compare_sequence, t};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

/// Seeds and steps per seed: about a second on SQLite in a debug build.
const SEEDS: u64 = 12;
const STEPS: usize = 200;

/// Runs the sequence of `seed` on a fresh database.
async fn run(seed: u64) -> Result<Coverage, Divergence> {
    let test_db = fresh_database().await;
    let clock = ManualClock::new(t(0));
    let store = SeaOrmLifecycleStore::new(&test_db.db).with_clock(Arc::new(clock.clone()));
    #[cfg(feature = "planted-store-settle")]
    let store =
        tenantry_verification::planted_settle::PlantedSettle::new(store, test_db.db.clone());
    compare_sequence(&store, &clock, seed, STEPS).await
}

#[cfg(not(feature = "planted-store-settle"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_store_answers_every_sequence_as_the_model() {
    let mut total = Coverage::default();
    for seed in 0..SEEDS {
        let coverage = run(seed).await.unwrap_or_else(|d| panic!("{d}"));
        total.claimed += coverage.claimed;
        total.takeovers += coverage.takeovers;
        total.renewed += coverage.renewed;
        total.renewals_refused += coverage.renewals_refused;
        total.settled += coverage.settled;
        total.stale_settles_refused += coverage.stale_settles_refused;
        total.control_space_conflicts += coverage.control_space_conflicts;
        total.supersedes_refused += coverage.supersedes_refused;
    }
    println!("{SEEDS} sequences of {STEPS} steps: {total:?}");
    // Every rule the check compares was reached, more than once.
    assert!(total.takeovers > 5, "{total:?}");
    assert!(total.renewals_refused > 5, "{total:?}");
    assert!(total.stale_settles_refused > 5, "{total:?}");
    assert!(total.control_space_conflicts > 5, "{total:?}");
    assert!(total.supersedes_refused > 0, "{total:?}");
    assert!(total.settled > 50, "{total:?}");
}

#[cfg(feature = "planted-store-settle")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_settle_without_its_lease_predicate_is_found() {
    let mut found = None;
    for seed in 0..SEEDS {
        if let Err(divergence) = run(seed).await {
            found = Some(divergence);
            break;
        }
    }
    let divergence = found.expect("the planted settle was not found in any sequence");
    println!("{divergence}");
    assert_eq!(
        divergence.property, "no settle accepted from a stale epoch",
        "{divergence}"
    );
}
