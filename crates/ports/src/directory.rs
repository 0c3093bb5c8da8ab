//! Directory projection ports (owned by the directory work).
