//! Every conformance suite of a backend in one invocation (feature `testing`).
//!
//! Each port keeps its suite beside its fake (`<port>::conformance`, run by one macro per
//! suite); [`conformance_suites!`](crate::conformance_suites) instantiates the suites a
//! backend names, each in a module of that name, so one test file runs them all:
//!
//! | suite | mechanism | constructor (see the suite's macro) |
//! |---|---|---|
//! | `lifecycle_store` | `lifecycle` | [`lifecycle_store_conformance!`](crate::lifecycle_store_conformance): `\|clock\| async { (store, guard) }` |
//! | `retention_store` | `lifecycle` | [`retention_store_conformance!`](crate::retention_store_conformance): `\|clock\| async { (lifecycle_store, retention_store, guard) }` |
//! | `host_storage` | `fences` | [`host_storage_conformance!`](crate::host_storage_conformance): `(guard, storage)` |
//! | `fence_retention` | `fences` | [`fence_retention_conformance!`](macro@crate::fence_retention_conformance): `\|clock\| async { (host_storage, retention_store, guard) }` |
//! | `directory_projection_store` | `directory` | [`directory_projection_store_conformance!`](crate::directory_projection_store_conformance): `(guard, store)` |
//!
//! A backend lists every suite of the mechanisms it implements, each behind the `cfg` of the
//! feature that builds it (a suite's attributes are put on its module); the mechanism crates
//! name their features `lifecycle`, `directory` and `fences`, as `tenantry-ports` does.

/// Instantiates the named conformance suites for one backend: `name: constructor` per suite,
/// each optionally preceded by attributes (`#[cfg(feature = "lifecycle")]`) that are put on the
/// module `name` holding its tests. The names and constructors are those of the
/// [module documentation](crate::conformance); the module imports everything of the invoking
/// module (`use super::*`).
///
/// Invoke it at module level of an integration test. The fakes' suites (the tests of
/// `tenantry-ports` itself):
/// ```
/// use std::sync::Arc;
///
/// use tenantry_ports::clock::ManualClock;
///
/// tenantry_ports::conformance_suites! {
///     #[cfg(feature = "lifecycle")]
///     lifecycle_store: |clock: ManualClock| async move {
///         let store = tenantry_ports::lifecycle::fake::InMemoryLifecycleStore::with_clock(
///             Arc::new(clock),
///         );
///         (store, ())
///     },
///     #[cfg(feature = "fences")]
///     host_storage: ((), tenantry_ports::host_storage::fake::InMemoryHostStorage::new()),
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_suites {
    ($($(#[$attr:meta])* $suite:ident: $ctor:expr),* $(,)?) => {
        $(
            $(#[$attr])*
            mod $suite {
                #[allow(unused_imports)]
                use super::*;

                $crate::conformance_suites!(@suite $suite $ctor);
            }
        )*
    };
    (@suite lifecycle_store $ctor:expr) => {
        $crate::lifecycle_store_conformance!($ctor);
    };
    (@suite retention_store $ctor:expr) => {
        $crate::retention_store_conformance!($ctor);
    };
    (@suite host_storage $ctor:expr) => {
        $crate::host_storage_conformance!($ctor);
    };
    (@suite fence_retention $ctor:expr) => {
        $crate::fence_retention_conformance!($ctor);
    };
    (@suite directory_projection_store $ctor:expr) => {
        $crate::directory_projection_store_conformance!($ctor);
    };
    (@suite $other:ident $ctor:expr) => {
        ::core::compile_error!(concat!(
            "unknown conformance suite `", stringify!($other), "`: expected lifecycle_store, ",
            "retention_store, host_storage, fence_retention or directory_projection_store"
        ));
    };
}
