//! Lifecycle outbox and control-space repositories.
