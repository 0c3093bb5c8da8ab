//! Keeping a foreign error (a `sea_orm::DbErr`, a `reqwest::Error`, a decoder's error) as the
//! source of a port error without naming its type in the port.
//!
//! Port errors are `Clone`, `PartialEq` and `Eq`, and driver errors are not all of these, so
//! the foreign error is held behind an [`Arc`] in an [`ErrorSource`]. The port error's
//! `std::error::Error::source` returns the foreign error itself (not a wrapper), so a caller who
//! knows the adapter can downcast it:
//!
//! ```
//! # use std::error::Error as _;
//! use tenantry_ports::lifecycle::StoreError;
//!
//! let io = std::io::Error::other("socket closed");
//! let error = StoreError::unavailable(io.to_string()).with_source(io);
//! let source = error.source().and_then(|s| s.downcast_ref::<std::io::Error>());
//! assert_eq!(source.map(ToString::to_string).as_deref(), Some("socket closed"));
//! ```
//!
//! The port error's message still includes the source's text (what users and logs read), so
//! nothing is lost for a caller that only prints the error.

use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A foreign error kept as the source of a port error. Cheap to clone (shared). Two sources are
/// equal when their messages are equal (the foreign types need not be comparable).
///
/// It derefs to the foreign error (`dyn Error + Send + Sync`), which is what the port errors'
/// `source()` return. It deliberately does not implement `Error` itself, so it never shows up
/// as an extra link of the chain.
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Keeps `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// Keeps an error that is already shared.
    pub fn from_arc(error: Arc<dyn Error + Send + Sync + 'static>) -> Self {
        Self(error)
    }

    /// The foreign error.
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl Deref for ErrorSource {
    type Target = dyn Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq for ErrorSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ErrorSource {}
