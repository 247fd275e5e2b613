//! Who may call what: decided from the peer's OS identity (SO_PEERCRED / getpeereid on Unix,
//! the pipe client's token on Windows), never from a secret.
//!
//! The decision ([`AccessPolicy::decide`]) takes a platform-neutral [`PeerIdentity`], so the
//! Windows rules are unit-tested on Linux too.

use crate::error::{ApiError, ErrorCode};
use crate::paths::Route;
use crate::sid::Sid;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// Membership of the operators group (Unix), asked per request so that a user added to the
/// group while the service runs may operate it from their next request, and a removed one
/// may not. The service implements it over the system's user and group databases.
pub trait GroupMembership: Send + Sync + 'static {
    /// The group's name.
    fn group(&self) -> &str;
    /// Whether `uid` belongs to the group (as its primary group or as a listed member).
    fn is_member(&self, uid: u32) -> bool;
    /// The exact fix for a refused `uid` (e.g. the `usermod` command naming its user).
    fn refusal_hint(&self, uid: u32) -> String;
}

/// An operators group on an [`AccessPolicy`].
#[derive(Clone)]
struct OperatorGroup(Arc<dyn GroupMembership>);

impl fmt::Debug for OperatorGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OperatorGroup")
            .field(&self.0.group())
            .finish()
    }
}

/// The caller, as the kernel reports it for the connection (Unix: `SO_PEERCRED` on Linux,
/// `getpeereid` on macOS).
#[cfg(unix)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// The peer's pid at connect time, where the OS reports it (Linux does).
    pub pid: Option<i32>,
}

/// The caller, read from the pipe client's process token (Windows).
#[cfg(windows)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The token's user.
    pub sid: Sid,
    /// The token holds Administrators enabled (an elevated administrator).
    pub is_admin: bool,
    /// `GetNamedPipeClientProcessId`.
    pub pid: Option<u32>,
}

impl Peer {
    /// What the access decision looks at.
    #[cfg(unix)]
    pub fn identity(&self) -> PeerIdentity {
        PeerIdentity::Unix { uid: self.uid }
    }

    /// What the access decision looks at.
    #[cfg(windows)]
    pub fn identity(&self) -> PeerIdentity {
        PeerIdentity::Windows {
            sid: self.sid,
            is_admin: self.is_admin,
        }
    }
}

impl fmt::Display for Peer {
    /// `uid 1000` or the SID, for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.identity().fmt(f)
    }
}

/// Who is calling, in the terms the access decision uses on each OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerIdentity {
    /// A Unix user; uid 0 is root.
    Unix { uid: u32 },
    /// A Windows user; LocalSystem and elevated administrators count as root.
    Windows { sid: Sid, is_admin: bool },
}

impl PeerIdentity {
    /// root, LocalSystem or an elevated administrator.
    pub fn is_superuser(&self) -> bool {
        match self {
            PeerIdentity::Unix { uid } => *uid == 0,
            PeerIdentity::Windows { sid, is_admin } => *is_admin || *sid == Sid::LOCAL_SYSTEM,
        }
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerIdentity::Unix { uid } => write!(f, "uid {uid}"),
            PeerIdentity::Windows { sid, .. } => write!(f, "{sid}"),
        }
    }
}

/// The authorisation rules of the local API.
///
/// - the superuser (root; on Windows LocalSystem or an elevated administrator) and the
///   operators (uids on Unix, SIDs on Windows) may call every endpoint;
/// - `GET /v1/version` is open to every local user: it reveals only version numbers and lets a
///   refused client tell "not allowed" apart from "wrong version";
/// - other users are refused everything else with `403 unauthorized_peer`, unless
///   [`with_read_only_for_all`](Self::with_read_only_for_all) opens the read-only endpoints
///   (status, watch, targets). Off by default: the status names the repositories served.
///
/// A service running as an ordinary user (per-user mode) adds its own uid (or SID) as an
/// operator.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    operators: BTreeSet<u32>,
    operator_sids: BTreeSet<Sid>,
    read_only_for_all: bool,
    refusal_hint: Option<String>,
    group: Option<OperatorGroup>,
}

impl AccessPolicy {
    /// Only the superuser may call (plus `GET /v1/version` for everyone).
    pub fn root_only() -> Self {
        AccessPolicy::default()
    }

    /// Adds a Unix operator.
    pub fn with_operator(mut self, uid: u32) -> Self {
        self.operators.insert(uid);
        self
    }

    pub fn with_operators(mut self, uids: impl IntoIterator<Item = u32>) -> Self {
        self.operators.extend(uids);
        self
    }

    /// Adds a Windows operator by SID (names are not matched: a SID survives renames and
    /// cannot be confused with a same-named account of another domain).
    pub fn with_operator_sid(mut self, sid: Sid) -> Self {
        self.operator_sids.insert(sid);
        self
    }

    pub fn with_operator_sids(mut self, sids: impl IntoIterator<Item = Sid>) -> Self {
        self.operator_sids.extend(sids);
        self
    }

    /// Admits the members of a Unix group as operators (checked per request); refusals name
    /// its fix.
    pub fn with_operator_group(mut self, group: Arc<dyn GroupMembership>) -> Self {
        self.group = Some(OperatorGroup(group));
        self
    }

    /// Lets every local user call the read-only endpoints.
    pub fn with_read_only_for_all(mut self, allow: bool) -> Self {
        self.read_only_for_all = allow;
        self
    }

    /// Replaces the fix named in refusals, e.g. with the exact command that adds an operator
    /// in this installation. `{uid}` (or `{user}`) in the text is replaced by the caller's uid
    /// (Unix) or SID (Windows).
    pub fn with_refusal_hint(mut self, hint: impl Into<String>) -> Self {
        self.refusal_hint = Some(hint.into());
        self
    }

    /// root or a configured operator uid.
    pub fn is_operator(&self, uid: u32) -> bool {
        self.may_change(&PeerIdentity::Unix { uid })
    }

    /// The superuser or a configured operator: may call everything.
    pub fn may_change(&self, who: &PeerIdentity) -> bool {
        who.is_superuser()
            || match who {
                PeerIdentity::Unix { uid } => {
                    self.operators.contains(uid)
                        || self.group.as_ref().is_some_and(|g| g.0.is_member(*uid))
                }
                PeerIdentity::Windows { sid, .. } => self.operator_sids.contains(sid),
            }
    }

    pub fn operators(&self) -> impl Iterator<Item = u32> + '_ {
        self.operators.iter().copied()
    }

    pub fn operator_sids(&self) -> impl Iterator<Item = Sid> + '_ {
        self.operator_sids.iter().copied()
    }

    /// Whether `peer` may call `route`; the refusal names the fix.
    pub fn check(&self, peer: &Peer, route: &Route) -> Result<(), ApiError> {
        self.decide(&peer.identity(), route)
    }

    /// [`check`](Self::check) on any platform's identity.
    pub fn decide(&self, who: &PeerIdentity, route: &Route) -> Result<(), ApiError> {
        if self.may_change(who)
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
        let user = match who {
            PeerIdentity::Unix { uid } => uid.to_string(),
            PeerIdentity::Windows { sid, .. } => sid.to_string(),
        };
        let hint = match (&self.refusal_hint, who) {
            (Some(h), _) => h.replace("{uid}", &user).replace("{user}", &user),
            (None, PeerIdentity::Unix { uid }) if self.group.is_some() => self
                .group
                .as_ref()
                .map(|g| g.0.refusal_hint(*uid))
                .unwrap_or_default(),
            (None, PeerIdentity::Unix { uid }) => format!(
                "run the command as root (e.g. with sudo), or ask an administrator to add \
                 uid {uid} to the service's operators"
            ),
            (None, PeerIdentity::Windows { sid, .. }) => format!(
                "run the command from an elevated prompt (Run as administrator), or ask an \
                 administrator to add {sid} to the service's operators"
            ),
        };
        Err(ApiError::new(
            ErrorCode::UnauthorizedPeer,
            format!("local user {who} may not {what} the runner-manager service: {hint}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn peer(uid: u32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: None,
        }
    }

    #[cfg(windows)]
    fn peer(uid: u32) -> Peer {
        Peer {
            sid: format!("S-1-5-21-9-9-9-{uid}").parse().unwrap(),
            is_admin: uid == 0,
            pid: None,
        }
    }

    fn win(rid: u32, is_admin: bool) -> PeerIdentity {
        PeerIdentity::Windows {
            sid: format!("S-1-5-21-1-2-3-{rid}").parse().unwrap(),
            is_admin,
        }
    }

    #[cfg(unix)]
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

    struct Members(Vec<u32>);
    impl GroupMembership for Members {
        fn group(&self) -> &str {
            "ops"
        }
        fn is_member(&self, uid: u32) -> bool {
            self.0.contains(&uid)
        }
        fn refusal_hint(&self, uid: u32) -> String {
            format!("run `sudo usermod -aG ops user{uid}`, then log in again")
        }
    }

    #[test]
    fn group_members_are_operators_and_refusals_name_the_usermod() {
        let p = AccessPolicy::root_only().with_operator_group(Arc::new(Members(vec![1000])));
        assert!(p
            .decide(&PeerIdentity::Unix { uid: 1000 }, &Route::Pause)
            .is_ok());
        let e = p
            .decide(&PeerIdentity::Unix { uid: 1001 }, &Route::Pause)
            .unwrap_err();
        assert!(
            e.message
                .ends_with("run `sudo usermod -aG ops user1001`, then log in again"),
            "{}",
            e.message
        );
    }

    #[test]
    fn read_only_can_be_opened_without_opening_changes() {
        let p = AccessPolicy::root_only().with_read_only_for_all(true);
        assert!(p.check(&peer(7), &Route::Status).is_ok());
        assert!(p.check(&peer(7), &Route::Watch).is_ok());
        assert!(p.check(&peer(7), &Route::Resume).is_err());
        let hinted = AccessPolicy::root_only().with_refusal_hint("run `rm op add {uid}`");
        let e = hinted
            .decide(&PeerIdentity::Unix { uid: 7 }, &Route::Pause)
            .unwrap_err();
        assert!(e.message.ends_with("run `rm op add 7`"), "{}", e.message);
    }

    #[test]
    fn windows_admins_system_and_operator_sids_may_change_others_are_refused() {
        let operator = win(1001, false);
        let PeerIdentity::Windows { sid: op_sid, .. } = operator else {
            unreachable!()
        };
        let p = AccessPolicy::root_only().with_operator_sid(op_sid);
        let system = PeerIdentity::Windows {
            sid: Sid::LOCAL_SYSTEM,
            is_admin: false,
        };
        for allowed in [system, win(500, true), operator] {
            assert!(p.decide(&allowed, &Route::Pause).is_ok(), "{allowed}");
        }
        let stranger = win(1002, false);
        let e = p.decide(&stranger, &Route::Pause).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnauthorizedPeer);
        assert_eq!(
            e.message,
            "local user S-1-5-21-1-2-3-1002 may not change the runner-manager service: run the \
             command from an elevated prompt (Run as administrator), or ask an administrator \
             to add S-1-5-21-1-2-3-1002 to the service's operators"
        );
        let e = p.decide(&stranger, &Route::Status).unwrap_err();
        assert!(
            e.message.contains("may not read the state of"),
            "{}",
            e.message
        );
        assert!(p.decide(&stranger, &Route::Version).is_ok());
        // Unix uids and Windows SIDs are separate namespaces: uid 1001 is no operator here.
        assert!(!p.is_operator(1001));
        assert!(p
            .decide(&PeerIdentity::Unix { uid: 1001 }, &Route::Pause)
            .is_err());
        let hinted = p.with_refusal_hint("ask for `rm op add {user}`");
        let e = hinted.decide(&stranger, &Route::Pause).unwrap_err();
        assert!(
            e.message
                .ends_with("ask for `rm op add S-1-5-21-1-2-3-1002`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn peers_print_as_their_identity() {
        assert_eq!(PeerIdentity::Unix { uid: 42 }.to_string(), "uid 42");
        assert_eq!(win(7, true).to_string(), "S-1-5-21-1-2-3-7");
        assert_eq!(peer(1001).to_string(), peer(1001).identity().to_string());
        assert!(peer(0).identity().is_superuser());
        assert!(!peer(1001).identity().is_superuser());
    }
}
