//! Who may call what: decided from the peer's OS identity (SO_PEERCRED), never from a secret.

use crate::error::{ApiError, ErrorCode};
use crate::paths::Route;
use std::collections::BTreeSet;

/// The caller, as the kernel reports it for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// The peer's pid at connect time, where the OS reports it (Linux does).
    pub pid: Option<i32>,
}

/// The authorisation rules of the local API.
///
/// - root (uid 0) and the operator uids may call every endpoint;
/// - `GET /v1/version` is open to every local user: it reveals only version numbers and lets a
///   refused client tell "not allowed" apart from "wrong version";
/// - other users are refused everything else with `403 unauthorized_peer`, unless
///   [`with_read_only_for_all`](Self::with_read_only_for_all) opens the read-only endpoints
///   (status, watch, targets). Off by default: the status names the repositories served.
///
/// A service running as an ordinary user (per-user mode) adds its own uid as an operator.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    operators: BTreeSet<u32>,
    read_only_for_all: bool,
    refusal_hint: Option<String>,
}

impl AccessPolicy {
    /// Only root may call (plus `GET /v1/version` for everyone).
    pub fn root_only() -> Self {
        AccessPolicy::default()
    }

    pub fn with_operator(mut self, uid: u32) -> Self {
        self.operators.insert(uid);
        self
    }

    pub fn with_operators(mut self, uids: impl IntoIterator<Item = u32>) -> Self {
        self.operators.extend(uids);
        self
    }

    /// Lets every local user call the read-only endpoints.
    pub fn with_read_only_for_all(mut self, allow: bool) -> Self {
        self.read_only_for_all = allow;
        self
    }

    /// Replaces the fix named in refusals, e.g. with the exact command that adds an operator
    /// in this installation. `{uid}` in the text is replaced by the caller's uid.
    pub fn with_refusal_hint(mut self, hint: impl Into<String>) -> Self {
        self.refusal_hint = Some(hint.into());
        self
    }

    /// root or a configured operator.
    pub fn is_operator(&self, uid: u32) -> bool {
        uid == 0 || self.operators.contains(&uid)
    }

    pub fn operators(&self) -> impl Iterator<Item = u32> + '_ {
        self.operators.iter().copied()
    }

    /// Whether `peer` may call `route`; the refusal names the fix.
    pub fn check(&self, peer: &Peer, route: &Route) -> Result<(), ApiError> {
        if self.is_operator(peer.uid)
            || matches!(route, Route::Version)
            || (self.read_only_for_all && route.is_read_only())
        {
            return Ok(());
        }
        let what = if route.is_read_only() {
            "read the state of"
        } else {
            "change"
        };
        let hint = match &self.refusal_hint {
            Some(h) => h.replace("{uid}", &peer.uid.to_string()),
            None => format!(
                "run the command as root (e.g. with sudo), or ask an administrator to add \
                 uid {} to the service's operators",
                peer.uid
            ),
        };
        Err(ApiError::new(
            ErrorCode::UnauthorizedPeer,
            format!(
                "local user uid {} may not {what} the runner-manager service: {hint}",
                peer.uid
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: None,
        }
    }

    #[test]
    fn root_and_operators_may_do_everything_others_nothing_but_version() {
        let p = AccessPolicy::root_only().with_operator(1000);
        assert!(p.check(&peer(0), &Route::Pause).is_ok());
        assert!(p.check(&peer(1000), &Route::Pause).is_ok());
        let e = p.check(&peer(1001), &Route::Status).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnauthorizedPeer);
        assert!(e.message.contains("uid 1001"), "{}", e.message);
        assert!(p.check(&peer(1001), &Route::Version).is_ok());
    }

    #[test]
    fn read_only_can_be_opened_without_opening_changes() {
        let p = AccessPolicy::root_only().with_read_only_for_all(true);
        assert!(p.check(&peer(7), &Route::Status).is_ok());
        assert!(p.check(&peer(7), &Route::Watch).is_ok());
        assert!(p.check(&peer(7), &Route::Resume).is_err());
        let hinted = AccessPolicy::root_only().with_refusal_hint("run `rm op add {uid}`");
        let e = hinted.check(&peer(7), &Route::Pause).unwrap_err();
        assert!(e.message.ends_with("run `rm op add 7`"), "{}", e.message);
    }
}
