//! Async use cases of Tenantry over the port traits.
//!
//! The engine owns loops, concurrency, backoff and cancellation safety; it is generic over
//! the ports and knows no database or HTTP library.
//!
//! - [`lifecycle`]: the saga dispatcher (`dispatch_one`), the worker loop and command intake;
//! - [`scoped_writes`]: the `ScopedWrites` runtime (per-scope serialization and durable fences);
//! - [`directory`]: the `DirectoryProjector`.

pub mod directory;
pub mod lifecycle;
pub mod scoped_writes;
