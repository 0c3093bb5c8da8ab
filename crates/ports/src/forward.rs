//! Forwarding: decorators that write only the methods they change, and the handles every port
//! accepts.
//!
//! For each port `tenantry_ports::<mechanism>::Port` this module has a trait of the same name,
//! `forward::Port`, whose methods have the port's signatures and default to calling the same
//! method of the wrapped value. A type that implements [`Decorator`] (what it wraps) and
//! `forward::Port` implements the port itself: it writes the methods it changes, and every
//! other call reaches the inner value unchanged, including the methods the port gives a
//! default body (`settle_many`, `next_due_in`, `control_spaces`, `submit_many`, `get_now`,
//! `records_with_key_prefix`, `record_lease_renewal`), so an adapter's override of those is
//! never bypassed by wrapping it.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//!
//! use async_trait::async_trait;
//! use chrono::{DateTime, Utc};
//! use tenantry_ports::forward::{self, Decorator};
//! use tenantry_ports::{PruneBatch, RetentionKind, RetentionStore, StoreError};
//!
//! /// Counts the records the prunes removed; every other call reaches `inner` unchanged.
//! struct CountedPrunes<S> {
//!     inner: S,
//!     removed: AtomicU64,
//! }
//!
//! impl<S> Decorator for CountedPrunes<S> {
//!     type Inner = S;
//!     fn inner(&self) -> &S {
//!         &self.inner
//!     }
//! }
//!
//! #[async_trait]
//! impl<S: RetentionStore> forward::RetentionStore for CountedPrunes<S> {
//!     async fn prune_batch(
//!         &self,
//!         kind: RetentionKind,
//!         now: DateTime<Utc>,
//!         window: Duration,
//!         limit: u32,
//!     ) -> Result<PruneBatch, StoreError> {
//!         let batch = self.inner.prune_batch(kind, now, window, limit).await?;
//!         self.removed.fetch_add(batch.removed(), Ordering::Relaxed);
//!         Ok(batch)
//!     }
//! }
//!
//! // `count_expired`, `now` and `oldest` are forwarded: the decorator is a `RetentionStore`.
//! fn prunes_with<R: RetentionStore>(store: R) -> R {
//!     store
//! }
//! fn counted<S: RetentionStore>(inner: S) -> CountedPrunes<S> {
//!     prunes_with(CountedPrunes { inner, removed: AtomicU64::new(0) })
//! }
//! ```
//!
//! Name the forwarding traits by their path (`forward::RetentionStore`) rather than importing
//! them: a decorator implements both the port and its forwarding trait, so with both in scope
//! a method call on it would be ambiguous. For the same reason make `Inner` the value the
//! calls reach (`S`, `dyn KnowledgeFs`), not the handle that holds it: inside an impl of
//! `forward::Port` (where that trait is in scope) a call on an `Arc`, `Box` or `&` handle is
//! ambiguous, while a call on `self.inner()` (`&S`) is not.
//!
//! # Handles
//! `Arc<T>`, `Box<T>` and `&T` are decorators of `T` that change nothing, so every port is
//! implemented for them whenever `T` implements it (`T` may be unsized: `Arc<dyn KnowledgeFs>`
//! works too). A host passes whatever handle it already has where the engine expects
//! `S: Port`: the store by value, an `Arc` shared with the rest of the platform, a
//! `Box<dyn Port>`, or a plain borrow in a test or a short-lived use case.
//!
//! Composite traits (`LifecycleStore`, `DirectoryProjectionStore`) follow from their parts.
//!
//! # Why a trait per port
//! A blanket `impl<D: forward::Port> Port for D` is what lets a decorator skip the methods it
//! does not change. The handles are decorators too (rather than impls of the port for
//! `Box<T>` and `&T`, which would overlap with that blanket impl: `Box` and `&` are
//! fundamental types). So a type implements a port either directly (an adapter, a fake) or
//! through its forwarding trait (a decorator), never both.
//!
//! Each port's method list is written once, in this module's `forwarding!` invocations; the
//! forwarding trait, the blanket impl and the handles are generated from it.
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::clock::Sleep;

/// What a decorator wraps: the value its forwarded calls reach.
///
/// Implemented by `Arc<T>`, `Box<T>` and `&T` (their inner value is `T`) and by every
/// decorator that forwards a port (see the [module documentation](self)).
pub trait Decorator {
    /// The wrapped value's type.
    type Inner: ?Sized;

    /// The wrapped value.
    fn inner(&self) -> &Self::Inner;
}

impl<T: ?Sized> Decorator for Arc<T> {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

impl<T: ?Sized> Decorator for Box<T> {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

impl<T: ?Sized> Decorator for &T {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

/// From one port's method list (`crate::<module>::<Port>`), generates `forward::<Port>` (each
/// method defaulting to the inner value's), the blanket impl of the port for its implementors,
/// and the handles (`Arc<T>`, `Box<T>`, `&T`). Methods are `async fn` or `fn`, taking `&self`
/// and named arguments.
macro_rules! forwarding {
    ($module:ident :: $port:ident { $($methods:tt)* }) => {
        forwarding!(@parse [$module $port] [] $($methods)*);
    };
    (@parse $names:tt [$($done:tt)*]
        async fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
        $($rest:tt)*
    ) => {
        forwarding!(@parse $names
            [$($done)* [[async] [.await] $name ($($arg: $ty),*) -> $ret;]] $($rest)*);
    };
    (@parse $names:tt [$($done:tt)*]
        fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty;
        $($rest:tt)*
    ) => {
        forwarding!(@parse $names [$($done)* [[] [] $name ($($arg: $ty),*) -> $ret;]] $($rest)*);
    };
    (@parse [$module:ident $port:ident]
        [$([[$($kw:tt)*] [$($aw:tt)*] $name:ident ($($arg:ident: $ty:ty),*) -> $ret:ty;])*]
    ) => {
        #[doc = concat!(
            "Forwarding of [`", stringify!($port), "`](crate::", stringify!($module), "::",
            stringify!($port), "): each method calls the inner value's unless the decorator ",
            "writes it; implementors implement the port. See the [module documentation](crate::forward)."
        )]
        #[::async_trait::async_trait]
        pub trait $port:
            $crate::forward::Decorator<Inner: crate::$module::$port> + Send + Sync
        {
            $(
                #[doc = concat!(
                    "[`", stringify!($port), "::", stringify!($name), "`](crate::",
                    stringify!($module), "::", stringify!($port), "::", stringify!($name),
                    "); the default forwards to the inner value."
                )]
                $($kw)* fn $name(&self, $($arg: $ty),*) -> $ret {
                    <Self::Inner as crate::$module::$port>::$name(self.inner(), $($arg),*)
                        $($aw)*
                }
            )*
        }

        #[::async_trait::async_trait]
        impl<D: $port> crate::$module::$port for D {
            $(
                $($kw)* fn $name(&self, $($arg: $ty),*) -> $ret {
                    <D as $port>::$name(self, $($arg),*) $($aw)*
                }
            )*
        }

        impl<T: crate::$module::$port + ?Sized> $port for ::std::sync::Arc<T> {}
        impl<T: crate::$module::$port + ?Sized> $port for ::std::boxed::Box<T> {}
        impl<T: crate::$module::$port + ?Sized> $port for &T {}
    };
}

forwarding!(clock::Clock {
    fn now(&self) -> DateTime<Utc>;
    fn monotonic(&self) -> Instant;
    fn sleep_until(&self, deadline: Instant) -> Sleep;
    fn sleep(&self, duration: Duration) -> Sleep;
});

#[cfg(feature = "directory")]
mod directory;
#[cfg(feature = "fences")]
mod host_storage;
#[cfg(feature = "lifecycle")]
mod lifecycle;
mod retention;

#[cfg(feature = "directory")]
pub use directory::{
    DeltaApplier, DirectoryProvider, EntitlementReconciler, EventBatchApplier, FreshnessToucher,
    ProjectionStateReader, RuntimeExecutionPublisher, SnapshotApplier,
};
#[cfg(feature = "fences")]
pub use host_storage::{HostStorage, HostStorageBindings};
#[cfg(feature = "lifecycle")]
pub use lifecycle::{
    CommandAdmin, CommandQueue, ControlSpaceReader, IntakeStore, KnowledgeFs, LifecycleMetrics,
};
pub use retention::RetentionStore;
