//! The wire side of the client: request bodies, decoding an answer into a value or a
//! [`RemoteError`], `Retry-After`, reading a body under its size cap, and the errors of a
//! transport failure or a saturated client.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tenantry_kernel::outcome::DispatchOutcome;
use tenantry_kernel::{ControlSpaceId, OperationId, ProvisioningKey};
use tenantry_lifecycle::code::bounded_error;
use tenantry_lifecycle::{ErrorCode, RemoteSpace};
use tenantry_ports::lifecycle::RemoteError;

use super::{CODE_CLIENT_SATURATED, CODE_RESPONSE_TOO_LARGE};
use crate::outcome::{Answer, TransportError, error_chain, retry_after_header};

#[derive(Serialize)]
pub(super) struct ProvisionBody<'a> {
    pub(super) control_space_id: &'a ControlSpaceId,
    pub(super) operation_id: &'a OperationId,
    pub(super) provisioning_key: &'a ProvisioningKey,
    pub(super) name: &'a str,
    pub(super) slug: &'a str,
    pub(super) icon: &'a str,
    pub(super) description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) model_intent: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) profile_intent: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
pub(super) struct DeletionBody<'a> {
    pub(super) control_space_id: &'a ControlSpaceId,
    pub(super) operation_id: &'a OperationId,
    pub(super) provisioning_key: &'a ProvisioningKey,
    pub(super) expected_revision: i64,
}

#[derive(Serialize)]
pub(super) struct RevocationBody<'a> {
    pub(super) control_space_id: &'a ControlSpaceId,
    pub(super) operation_id: &'a OperationId,
    pub(super) event_id: &'a str,
    pub(super) reason_code: &'a str,
    pub(super) revoke_sequence: i64,
    pub(super) expected_revision: i64,
}

#[derive(Deserialize)]
pub(super) struct SpaceList {
    pub(super) items: Vec<RemoteSpace>,
}

/// The `{code, message}` error body.
#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default)]
    message: String,
}

/// Decodes a complete answer: 2xx → `T` (outcome unknown if it does not decode), any other
/// status → an answered [`RemoteError`] with the remote's code, message and `Retry-After`.
pub(super) fn decode<T: DeserializeOwned>(
    answer: &Answer,
    now: DateTime<Utc>,
) -> Result<T, RemoteError> {
    if answer.status.is_success() {
        return answer.json().map_err(transport_error);
    }
    let status = answer.status.as_u16();
    let (code, message) = match serde_json::from_slice::<ErrorBody>(&answer.body) {
        Ok(body) if !body.code.is_empty() => (body.code, body.message),
        _ => (
            format!("KFS_HTTP_{status}"),
            format!(
                "KnowledgeFS answered {} without an error body: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(256)])
            ),
        ),
    };
    // What the remote says is bounded data (case 010): a code that is not an upper-case
    // identifier becomes REMOTE_ERROR_CODE_INVALID, the message loses control characters
    // and is cut to 2,048 bytes, before it reaches logs, storage, metrics or a terminal.
    let (code, message) = bounded_error(ErrorCode::from(code), &message);
    let mut error = RemoteError::answered(status, code, message);
    if let Some(after) = answer
        .retry_after
        .as_deref()
        .and_then(|v| parse_retry_after(v, now))
    {
        error = error.with_retry_after(after);
    }
    Err(error)
}

/// `Retry-After` as delay-seconds or an HTTP date (a date in the past gives zero).
pub(super) fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// Reads the answer of a finished `send()` completely, but no more than `max` body bytes (see
/// the module docs); `mutation` says whether the request changes remote state.
pub(super) async fn read_capped(
    result: Result<reqwest::Response, reqwest::Error>,
    max: usize,
    mutation: bool,
) -> Result<Answer, RemoteError> {
    let mut response = result.map_err(|e| transport_error(TransportError::from_reqwest(e)))?;
    let status = response.status();
    let retry_after = retry_after_header(&response);
    let too_large = |size: u64| {
        let message = format!(
            "KnowledgeFS answered {status} with a body of at least {size} bytes, over the \
             {max}-byte limit; the body was not read"
        );
        if mutation && status.is_success() {
            return RemoteError::outcome_unknown(format!(
                "{message}, so what the mutation did is unknown"
            ));
        }
        let mut error = RemoteError::answered(status.as_u16(), CODE_RESPONSE_TOO_LARGE, message);
        if let Some(after) = retry_after
            .as_deref()
            .and_then(|v| parse_retry_after(v, Utc::now()))
        {
            error = error.with_retry_after(after);
        }
        error
    };
    if let Some(announced) = response.content_length()
        && announced > max as u64
    {
        return Err(too_large(announced));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let size = body.len() + chunk.len();
                if size > max {
                    return Err(too_large(size as u64));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            // A response arrived: a body that breaks off leaves the outcome unknown.
            Err(e) => {
                return Err(RemoteError::outcome_unknown(format!(
                    "KnowledgeFS answer body ({status}) could not be read: {}",
                    error_chain(&e)
                ))
                .with_source(e));
            }
        }
    }
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// The port's error for a call without a complete answer; keeps the transport's error.
fn transport_error(failure: TransportError) -> RemoteError {
    let error = match failure.outcome {
        DispatchOutcome::NotDispatched => RemoteError::not_dispatched(failure.message),
        // A failure always lacks a complete answer; treat a contradiction (or an outcome added
        // later) as unknown.
        _ => RemoteError::outcome_unknown(failure.message),
    };
    error.with_shared_source(failure.source)
}

pub(super) fn saturated(deadline: Duration) -> RemoteError {
    let mut error = RemoteError::not_dispatched(format!(
        "no KnowledgeFS call slot freed within the {}s deadline; raise \
         max_concurrent_calls or the deadline",
        deadline.as_secs_f64()
    ));
    error.code = CODE_CLIENT_SATURATED;
    error
}
