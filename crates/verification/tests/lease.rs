//! Model check of the lease protocol and its planted bugs (`tenantry_verification::lease`).

use stateright::Checker;
use tenantry_verification::check;
use tenantry_verification::lease::{LeaseBug, LeaseProtocol};

#[test]
fn lease_protocol_holds() {
    let started = std::time::Instant::now();
    let checker = {
        use stateright::Model;
        LeaseProtocol::correct()
            .checker()
            .target_state_count(20_000_000)
            .spawn_bfs()
            .join()
    };
    println!(
        "lease protocol: {} unique states, depth {}, {:?}",
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
}
