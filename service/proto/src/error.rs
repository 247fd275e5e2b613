//! Errors on the wire: a stable code the client branches on and a message for people.

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// A stable, snake_case error code. Clients branch on it; the text is part of the API and is
/// never renamed. A code added by a newer service reads as [`ErrorCode::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed JSON, an unknown field, a bad value or a bad path parameter.
    BadRequest,
    /// The caller's OS user may not do this (see the access policy).
    UnauthorizedPeer,
    /// The request came from a browser (`Origin` or `Referer` present).
    ForbiddenOrigin,
    /// No such path, or no such target.
    NotFound,
    /// The path exists but not with this method.
    MethodNotAllowed,
    /// A compare-and-set lost (stale `revision`) or the target already exists.
    Conflict,
    /// The request body is larger than the server accepts.
    PayloadTooLarge,
    /// The client speaks an API version the service does not serve.
    UnsupportedVersion,
    /// The service is starting, stopping or cannot reach what it needs right now.
    ServiceUnavailable,
    /// The service has no usable GitHub credential: sign in first.
    SignInRequired,
    /// A bug or an unexpected failure inside the service.
    Internal,
    /// A code this client does not know (sent by a newer service).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status a server answers with for this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest | ErrorCode::UnsupportedVersion => 400,
            ErrorCode::UnauthorizedPeer | ErrorCode::ForbiddenOrigin => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict | ErrorCode::SignInRequired => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::ServiceUnavailable => 503,
            ErrorCode::Internal | ErrorCode::Unknown => 500,
        }
    }

    /// The wire text, e.g. `unauthorized_peer`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnauthorizedPeer => "unauthorized_peer",
            ErrorCode::ForbiddenOrigin => "forbidden_origin",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::ServiceUnavailable => "service_unavailable",
            ErrorCode::SignInRequired => "sign_in_required",
            ErrorCode::Internal => "internal",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    /// What went wrong and, where there is one, the fix.
    pub message: String,
}

/// What a `server::Handler` returns when it refuses a request. The message
/// goes to the caller verbatim, so it must name the fix and never contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    pub fn sign_in_required(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::SignInRequired, message)
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ServiceUnavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }
}

impl From<ApiError> for ErrorBody {
    fn from(e: ApiError) -> Self {
        ErrorBody {
            code: e.code,
            message: e.message,
        }
    }
}

impl From<ErrorBody> for ApiError {
    fn from(b: ErrorBody) -> Self {
        ApiError {
            code: b.code,
            message: b.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_snake_case_and_unknown_codes_are_tolerated() {
        assert_eq!(
            serde_json::to_string(&ErrorCode::UnauthorizedPeer).unwrap(),
            "\"unauthorized_peer\""
        );
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::PayloadTooLarge,
            ErrorCode::SignInRequired,
            ErrorCode::MethodNotAllowed,
        ] {
            let text = serde_json::to_string(&code).unwrap();
            assert_eq!(text, format!("\"{}\"", code.as_str()));
        }
        let later: ErrorCode = serde_json::from_str("\"quota_exceeded\"").unwrap();
        assert_eq!(later, ErrorCode::Unknown);
        assert_eq!(ErrorCode::PayloadTooLarge.http_status(), 413);
    }
}
