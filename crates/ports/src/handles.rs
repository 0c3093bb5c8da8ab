//! One handle convention for every port: a port trait is implemented for `Arc<T>`, `Box<T>`
//! and `&T` whenever `T` implements it (`T` may be unsized, so `Arc<dyn KnowledgeFs>` works
//! too).
//!
//! So a host passes whatever handle it already has where the engine expects `S: Port`: the
//! store by value, an `Arc` shared with the rest of the platform, a `Box<dyn Port>`, or a plain
//! borrow in a test or a short-lived use case. Every forwarding impl calls the same method of
//! the inner value, including methods with a default body (`settle_many`, `control_spaces`,
//! `record_lease_renewal`), so an adapter's override is never bypassed by wrapping it.
//!
//! Composite traits (`LifecycleStore`, `DirectoryProjectionStore`) follow from their parts.
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::clock::{Clock, Sleep};

/// Implements an async port trait for `Arc<T>`, `Box<T>` and `&T`; the body forwards every
/// method to `(**self)`.
#[allow(unused_macros)]
macro_rules! async_handles {
    ($port:ident { $($body:tt)* }) => {
        #[::async_trait::async_trait]
        impl<T: $port + ?Sized> $port for Arc<T> {
            $($body)*
        }
        #[::async_trait::async_trait]
        impl<T: $port + ?Sized> $port for Box<T> {
            $($body)*
        }
        #[::async_trait::async_trait]
        impl<T: $port + ?Sized> $port for &T {
            $($body)*
        }
    };
}

/// The same for a synchronous port trait.
macro_rules! sync_handles {
    ($port:ident { $($body:tt)* }) => {
        impl<T: $port + ?Sized> $port for Arc<T> {
            $($body)*
        }
        impl<T: $port + ?Sized> $port for Box<T> {
            $($body)*
        }
        impl<T: $port + ?Sized> $port for &T {
            $($body)*
        }
    };
}

sync_handles!(Clock {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
    fn monotonic(&self) -> Instant {
        (**self).monotonic()
    }
    fn sleep_until(&self, deadline: Instant) -> Sleep {
        (**self).sleep_until(deadline)
    }
    fn sleep(&self, duration: Duration) -> Sleep {
        (**self).sleep(duration)
    }
});

#[cfg(feature = "directory")]
mod directory;
#[cfg(feature = "fences")]
mod host_storage;
#[cfg(feature = "lifecycle")]
mod lifecycle;
mod retention;
