//! What the engine's parts share to speak the local API's language: the journal's errors and
//! a refused change as API errors, and the domain's names read as the wire's. A leaf: it
//! imports nothing of the engine.

use rm_proto::ApiError;
use serde::de::DeserializeOwned;

/// The domain's snake_case names are the wire's: read one through the proto type's serde
/// (an unknown name reads as the type's `unknown`).
pub fn via<T: DeserializeOwned>(text: &str, fallback: T) -> T {
    serde_json::from_value(serde_json::Value::String(text.to_string())).unwrap_or(fallback)
}

/// A journal error as the local API answers it, with what to do.
pub fn journal_error(e: rm_agent::JournalError) -> ApiError {
    match e {
        rm_agent::JournalError::Conflict { .. } => ApiError::conflict(format!(
            "{e}: it changed meanwhile; read it again (`runner-manager status`) and retry"
        )),
        rm_agent::JournalError::NotFound { .. } => ApiError::not_found(e.to_string()),
        rm_agent::JournalError::Unavailable { .. } => ApiError::service_unavailable(format!(
            "{e}: see the service's log (`journalctl -u runner-manager`)"
        )),
    }
}

/// Why a change was not made. Nothing was written either way.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The change itself is wrong; the message names the fix.
    #[error("{0}")]
    Invalid(String),
    /// The journal could not be written.
    #[error(transparent)]
    Journal(#[from] rm_agent::JournalError),
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Invalid(why) => ApiError::bad_request(why),
            Refusal::Journal(e) => journal_error(e),
        }
    }
}
