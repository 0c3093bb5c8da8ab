//! Directory projection repositories (owned by the directory work).
