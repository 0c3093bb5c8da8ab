//! Directory projector (owned by the directory work).
