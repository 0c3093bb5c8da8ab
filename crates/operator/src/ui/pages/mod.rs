//! The console's pages: one module per page, each with its full page, its live fragment (the
//! same handler answers an htmx request with the fragment only) and its actions.

pub mod commands;
pub mod directory;
pub mod fences;
pub mod overview;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::layout;
use crate::refusal::OperatorRefusal;

impl OperatorRefusal {
    /// The console's mapping of a refusal: a page with its status, titled with its code, saying
    /// what was wrong and what to do.
    pub fn page(&self) -> Response {
        (self.status, layout::message_page(self.code, &self.message)).into_response()
    }
}

/// A refusal shown as the console's page ([`OperatorRefusal::page`]).
pub(crate) fn error_page(error: &OperatorRefusal) -> Response {
    error.page()
}

/// The answer to an action while `ui_read_only = true`: 403, nothing done.
pub(crate) fn read_only_refused() -> Response {
    (
        StatusCode::FORBIDDEN,
        layout::message_page(
            "Read-only console",
            "This console session is read-only (a read operator, or ui_read_only = true): no action was taken. Sign in as an operator with role operate, or turn ui_read_only off.",
        ),
    )
        .into_response()
}
