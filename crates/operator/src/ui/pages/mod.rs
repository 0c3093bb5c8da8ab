//! The console's pages: one module per page, each with its full page, its live fragment (the
//! same handler answers an htmx request with the fragment only) and its actions.

pub mod commands;
pub mod directory;
pub mod fences;
pub mod overview;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::layout;
use crate::admin::AdminApiError;

/// An admin-API error shown as a page with its status (what was wrong and what to do).
pub(crate) fn error_page(error: &AdminApiError) -> Response {
    (
        error.status,
        layout::message_page(error.code, &error.message),
    )
        .into_response()
}

/// The answer to an action while `ui_read_only = true`: 403, nothing done.
pub(crate) fn read_only_refused() -> Response {
    (
        StatusCode::FORBIDDEN,
        layout::message_page(
            "Read-only console",
            "This console is read-only (ui_read_only = true): no action was taken. Use the admin API or the CLI, or turn ui_read_only off.",
        ),
    )
        .into_response()
}
