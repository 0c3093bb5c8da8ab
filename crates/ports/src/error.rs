//! The storage failure shared by every storage port, and keeping a foreign error (a
//! `sea_orm::DbErr`, a `reqwest::Error`, a decoder's error) as the source of a port error
//! without naming its type in the port.
//!
//! [`StoreError`] is the one shape of a storage failure that is nobody's fault in the request
//! (unavailable, contention, schema missing, corrupt row). The lifecycle port returns it
//! directly (`tenantry_ports::lifecycle::StoreError` is this type), the host-storage port wraps
//! it as `HostStorageError::Storage { operation, error }` and the directory projection port as
//! `ProjectionStoreError::Storage(error)`, beside their port-specific refusals (an invalid key,
//! a corrupt value under one key, a rule's refusal, a lost lease ...). An adapter therefore maps
//! a driver error to a `StoreError` once, with one function, for all three stores.
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

/// A storage failure that is nobody's fault in the request: the database is unreachable, lost
/// a deadlock, lacks its schema, or a stored row cannot be read back. Retrying later may help
/// (`Unavailable`, `Contention`); a missing schema needs a migration and a corrupt row an
/// operator.
///
/// The one storage error shape of the lifecycle, host-storage and directory-projection ports
/// (see the module documentation). Each variant keeps the driver's error (when there is one) as
/// its [`source`](std::error::Error::source); its message includes that error's text too.
/// Build one with [`unavailable`](Self::unavailable), [`corrupt`](Self::corrupt),
/// [`contention`](Self::contention) or [`schema_missing`](Self::schema_missing), then
/// [`with_source`](Self::with_source).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be reached or the transaction failed.
    #[error("database unavailable: {message}")]
    Unavailable {
        /// What failed (the driver's message).
        message: String,
        /// The driver's error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A stored row does not decode into a domain value.
    #[error("stored data is corrupt: {message}")]
    Corrupt {
        /// Which row or column, and what is wrong with it.
        message: String,
        /// The decoder's error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The transaction lost a deadlock or a serialization conflict with a concurrent one
    /// (PostgreSQL SQLSTATE `40P01` / `40001`); nothing was written and retrying helps. Adapters
    /// retry such transactions a few times themselves before they report this.
    #[error("database contention (deadlock or serialization failure): {message}")]
    Contention {
        /// The driver's message.
        message: String,
        /// The driver's error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A table of the mechanism's schema does not exist: the database was never migrated for
    /// that mechanism. Retrying does not help; migrate it (`Database::migrate` with the
    /// mechanism's `Mechanisms::…` constant, or `tenantry migrate`).
    #[error(
        "the {mechanism} schema is not migrated on this database ({message}); migrate it with \
         Mechanisms::{} (Database::migrate) or `tenantry migrate`",
        mechanism.to_ascii_uppercase()
    )]
    SchemaMissing {
        /// The mechanism whose table is missing, by its lower-case name (`lifecycle`,
        /// `fences`, `directory`: `tenantry_migrations::Mechanism::as_str`).
        mechanism: &'static str,
        /// The driver's message naming the missing table.
        message: String,
        /// The driver's error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
}

impl StoreError {
    /// [`StoreError::Unavailable`] with `message` and no source yet.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// [`StoreError::Corrupt`] with `message` and no source yet.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::Corrupt {
            message: message.into(),
            source: None,
        }
    }

    /// [`StoreError::Contention`] with `message` and no source yet.
    pub fn contention(message: impl Into<String>) -> Self {
        Self::Contention {
            message: message.into(),
            source: None,
        }
    }

    /// [`StoreError::SchemaMissing`] of `mechanism` (its lower-case name, e.g. `lifecycle`)
    /// with `message` and no source yet.
    pub fn schema_missing(mechanism: &'static str, message: impl Into<String>) -> Self {
        Self::SchemaMissing {
            mechanism,
            message: message.into(),
            source: None,
        }
    }

    /// The same error keeping `source` (a driver's or decoder's error) as its
    /// [`source`](std::error::Error::source).
    #[must_use]
    pub fn with_source(self, source: impl Error + Send + Sync + 'static) -> Self {
        self.with_shared_source(Some(ErrorSource::new(source)))
    }

    /// The same error keeping a source that is already shared (or none).
    #[must_use]
    pub fn with_shared_source(self, kept: Option<ErrorSource>) -> Self {
        match self {
            Self::Unavailable { message, .. } => Self::Unavailable {
                message,
                source: kept,
            },
            Self::Corrupt { message, .. } => Self::Corrupt {
                message,
                source: kept,
            },
            Self::Contention { message, .. } => Self::Contention {
                message,
                source: kept,
            },
            Self::SchemaMissing {
                mechanism, message, ..
            } => Self::SchemaMissing {
                mechanism,
                message,
                source: kept,
            },
        }
    }

    /// The same error with `context` (e.g. the operation) put before its message:
    /// `"<context>: <message>"`.
    #[must_use]
    pub fn with_context(self, context: impl fmt::Display) -> Self {
        let source = self.shared_source();
        let message = format!("{context}: {}", self.message());
        let bare = match self {
            Self::Unavailable { .. } => Self::unavailable(message),
            Self::Corrupt { .. } => Self::corrupt(message),
            Self::Contention { .. } => Self::contention(message),
            Self::SchemaMissing { mechanism, .. } => Self::schema_missing(mechanism, message),
        };
        bare.with_shared_source(source)
    }

    /// The message without the variant's prefix.
    pub fn message(&self) -> &str {
        match self {
            Self::Unavailable { message, .. }
            | Self::Corrupt { message, .. }
            | Self::Contention { message, .. }
            | Self::SchemaMissing { message, .. } => message,
        }
    }

    /// The kept source, shared (cheap to clone).
    pub fn shared_source(&self) -> Option<ErrorSource> {
        match self {
            Self::Unavailable { source, .. }
            | Self::Corrupt { source, .. }
            | Self::Contention { source, .. }
            | Self::SchemaMissing { source, .. } => source.clone(),
        }
    }

    /// Whether retrying the same call later can succeed without an operator: true for
    /// [`Unavailable`](Self::Unavailable) and [`Contention`](Self::Contention).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Contention { .. })
    }
}

/// Defines a port error that is one message plus an optional kept [`ErrorSource`]: the struct
/// (`message`, `source`; `Debug`, `Clone`, `PartialEq`, `Eq`, `#[non_exhaustive]`), its
/// `Display` (`"<prefix>: <message>"`), its `Error::source` (the kept foreign error itself),
/// `new(message)` and `with_source(error)`. The caller gives the doc comments, the prefix and
/// the doc line of the source field, so each error keeps its own text; the hooks' `HookError`
/// and the metrics sinks' `MetricsError` are built with it. (`Display`/`Error` are written out
/// rather than derived with thiserror: its `#[source]` does not expand inside `macro_rules!`.)
#[cfg(any(feature = "directory", feature = "lifecycle"))]
macro_rules! message_error {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident;
        display: $prefix:literal;
        source: $source_doc:literal
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $name {
            /// What failed.
            pub message: String,
            #[doc = $source_doc]
            pub source: Option<$crate::error::ErrorSource>,
        }

        impl $name {
            /// A failure described by `message`, with no source yet.
            pub fn new(message: impl Into<String>) -> Self {
                Self {
                    message: message.into(),
                    source: None,
                }
            }

            /// The same error keeping `error` as its [`source`](std::error::Error::source).
            #[must_use]
            pub fn with_source(
                mut self,
                error: impl std::error::Error + Send + Sync + 'static,
            ) -> Self {
                self.source = Some($crate::error::ErrorSource::new(error));
                self
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}: {}", $prefix, self.message)
            }
        }

        impl std::error::Error for $name {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.source
                    .as_ref()
                    .map(|kept| kept.get() as &(dyn std::error::Error + 'static))
            }
        }
    };
}

#[cfg(any(feature = "directory", feature = "lifecycle"))]
pub(crate) use message_error;
