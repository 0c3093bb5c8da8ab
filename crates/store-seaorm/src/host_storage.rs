//! Host-storage adapter (owned by the fences work).
