//! Scoped writes runtime (owned by the fences work).
