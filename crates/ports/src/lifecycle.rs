//! Lifecycle saga ports.
