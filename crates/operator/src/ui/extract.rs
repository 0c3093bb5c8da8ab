//! The console's form and query extractors: axum's [`Form`](axum::Form) and
//! [`Query`](axum::extract::Query) with the rejection rendered as a console page.
//!
//! axum answers a malformed form or query (a missing field, a body that is not
//! `application/x-www-form-urlencoded`, an empty `POST`) with a plain-text 400, 415 or 422. An
//! operator who reaches one from a stale tab or a hand-made request gets a console page instead:
//! status 400, what was wrong, and what to do (reload and try again). Nothing is done: the
//! handler never runs.

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::layout;

/// A form body (`POST`) or query string (`GET`) the console could not read.
#[derive(Debug)]
pub struct Unreadable {
    /// What axum's extractor said was wrong.
    detail: String,
}

impl IntoResponse for Unreadable {
    fn into_response(self) -> Response {
        tracing::debug!(detail = %self.detail, "console request refused: unreadable form or query");
        let message = format!(
            "This request's form could not be read, so nothing was done ({}). Reload the page and try again.",
            self.detail
        );
        (
            StatusCode::BAD_REQUEST,
            layout::message_page("Bad request", &message),
        )
            .into_response()
    }
}

impl From<FormRejection> for Unreadable {
    fn from(rejection: FormRejection) -> Self {
        Self {
            detail: rejection.body_text(),
        }
    }
}

impl From<QueryRejection> for Unreadable {
    fn from(rejection: QueryRejection) -> Self {
        Self {
            detail: rejection.body_text(),
        }
    }
}

/// A URL-encoded form body of type `T`; an unreadable body is answered with [`Unreadable`].
#[derive(Debug)]
pub struct Form<T>(pub T);

impl<T, S> FromRequest<S> for Form<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Unreadable;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Form(value) = axum::Form::<T>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// A query string of type `T`; an unreadable one is answered with [`Unreadable`].
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Unreadable;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}
