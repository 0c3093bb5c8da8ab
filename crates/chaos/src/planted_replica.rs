//! `tenantry-chaos-planted-replica`: the `tenantry` binary with a DELIBERATELY BROKEN settle,
//! for `cargo xtask chaos --planted-bug` only. Its `serve` runs on the usual stores with the
//! lifecycle store wrapped in [`PlantedSettle`] (a settle without the lease check,
//! `crates/verification/src/planted_settle.rs`); every other command is `tenantry`'s. The
//! harness must fail its late-settle check against replicas of this binary (docs/reliability.md).

use std::process::ExitCode;
use std::sync::Arc;

use tenantry_verification::planted_settle::PlantedSettle;

fn main() -> ExitCode {
    tenantry_app::cli::main_with(|stores| {
        let db = stores.database().clone();
        stores.map_lifecycle(move |lifecycle| Arc::new(PlantedSettle::new(lifecycle, db)))
    })
}
