//! The operator console's safety rules over plain HTTP against a running service: every page
//! redirects to the login without a session, the login sets an HttpOnly SameSite=Strict
//! cookie, every action needs the session's CSRF token, `ui_read_only` hides and refuses
//! actions (and every page says so), `ui = false` serves no console, the bulk confirmation names
//! the commands it acts on, the table pages both ways, static files are cached. Runs on
//! SQLite, or on PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod access;
mod actions;
mod pages;
mod remote_errors;

use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(20);
