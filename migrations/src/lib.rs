//! Schema migrations.
