//! Sign-in through the service: `POST /v1/sign-in` starts GitHub's device flow **inside the
//! service**, which polls GitHub and stores the credential itself. The device code never leaves
//! the service; clients (the CLI's `auth login`, the tray's sign-in window) only see the user
//! code to type at the verification page, and follow the session's state (watch events
//! `sign_in_progress`, or `GET /v1/sign-in`). One implementation serves every client.
//!
//! One session at a time per service: starting while a session is `waiting` (or `retrying`)
//! answers that same session unless `restart` is set, so two windows show the same code.

use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// `POST /v1/sign-in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInStart {
    /// Start a new flow (a new code) even if one is still waiting.
    #[serde(default)]
    pub restart: bool,
}

/// Where a sign-in session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignInState {
    /// Waiting for the user to enter the code at `verification_uri` and approve.
    Waiting,
    /// GitHub could not be reached (or answered 5xx); the service retries with back-off until
    /// `next_try`. The code stays valid until `expires_at`.
    Retrying,
    /// Approved: the service holds the credential for `login`.
    Approved,
    /// The request was cancelled in the browser (`access_denied`): start again to retry.
    Denied,
    /// The code ran out (`expired_token`): start again for a new code.
    Expired,
    /// A failure waiting cannot fix (device flow disabled for the App, a wrong client id, the
    /// credential could not be stored): `message` and `fix` say what to do.
    Failed,
    /// Cancelled by a client (`DELETE /v1/sign-in`), replaced by a restart, or ended by the
    /// service stopping (`message` says which).
    Cancelled,
    /// A state this client does not know (a newer service).
    #[serde(other)]
    Unknown,
}

impl SignInState {
    /// Whether the session has ended (nothing more will change).
    pub fn is_final(self) -> bool {
        !matches!(self, SignInState::Waiting | SignInState::Retrying)
    }
}

/// One device-flow sign-in as the service runs it. Nothing here is secret: the user code is
/// meant to be shown, and the device code stays in the service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignInSession {
    /// Opaque, new for each flow.
    pub id: String,
    /// What the user types at `verification_uri`, e.g. `WDJB-MJHT`. Empty (as is
    /// `verification_uri`) when GitHub refused to start the flow: the session is then `failed`
    /// from the start, with `message` and `fix`.
    pub user_code: String,
    /// The verification page of the GitHub the service uses (e.g. `https://github.com/login/device`).
    pub verification_uri: String,
    /// When the code stops working.
    pub expires_at: UnixMillis,
    /// How often the service polls GitHub now (raised by `slow_down`).
    pub interval_secs: u32,
    pub state: SignInState,
    /// `approved`: who signed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// `retrying`, `failed`, `denied`, `expired`: what happened, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `failed` (and `retrying`): what the user can do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// `retrying`: when the service asks GitHub again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try: Option<UnixMillis>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_round_trip_and_tolerate_newer_states() {
        let s = SignInSession {
            id: "s1".into(),
            user_code: "WDJB-MJHT".into(),
            verification_uri: "https://github.com/login/device".into(),
            expires_at: UnixMillis(900_000),
            interval_secs: 5,
            state: SignInState::Waiting,
            login: None,
            message: None,
            fix: None,
            next_try: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["state"], "waiting");
        assert!(v.get("login").is_none());
        let back: SignInSession = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        let later: SignInState = serde_json::from_str("\"needs_2fa\"").unwrap();
        assert_eq!(later, SignInState::Unknown);
        assert!(later.is_final());
        assert!(!SignInState::Retrying.is_final());
        let start: SignInStart = serde_json::from_str("{}").unwrap();
        assert!(!start.restart);
        assert!(serde_json::from_str::<SignInStart>(r#"{"restrat":true}"#).is_err());
    }
}
