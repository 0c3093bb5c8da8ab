//! Host-storage port (owned by the fences work).
