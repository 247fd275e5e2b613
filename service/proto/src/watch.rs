//! `GET /v1/watch`: newline-delimited JSON, one [`WatchMessage`] per line.
//!
//! The first line is always a `snapshot`; after it come `changed` (the full status again,
//! replacing the last one) and `event` (something worth a notification) in the order the
//! service published them. A reader too slow to keep up is disconnected rather than waited for:
//! it reconnects and gets a fresh snapshot, so it never shows a state with gaps.

use crate::status::{AuthState, Failure, JobRef, RunnerState, Status};
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// One line of the watch stream, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchMessage {
    /// The full status; always the first line.
    Snapshot { status: Box<Status> },
    /// The full status after a change; replaces the previous one.
    Changed { status: Box<Status> },
    /// Something happened that a client may notify about.
    Event { event: Event },
    /// A message type this client does not know (sent by a newer service): skip it.
    #[serde(other)]
    Unknown,
}

/// How a runner attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerOutcome {
    CompletedJob,
    /// A surplus runner that never took a job: not a failure.
    ExitedIdleWithoutWork,
    Failed,
    /// The process died while GitHub still listed the runner.
    Orphaned,
    #[serde(other)]
    Unknown,
}

/// What happened, tagged by `kind`. The service publishes state and intent; the tray decides
/// whether to notify (the service never raises a notification itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A runner attempt was allocated for a target.
    RunnerLaunched {
        at: UnixMillis,
        attempt_id: String,
        runner_name: String,
        target: String,
    },
    /// A runner attempt moved from one state to another.
    RunnerStateChanged {
        at: UnixMillis,
        attempt_id: String,
        runner_name: String,
        target: String,
        from: RunnerState,
        to: RunnerState,
        /// Boxed to keep every event small; on the wire it is the plain object.
        job: Option<Box<JobRef>>,
    },
    /// A runner attempt ended (before its directory is scrubbed).
    RunnerConcluded {
        at: UnixMillis,
        attempt_id: String,
        runner_name: String,
        target: String,
        outcome: RunnerOutcome,
        job: Option<Box<JobRef>>,
    },
    /// A runner's directory was scrubbed and its registration removed: nothing is left.
    RunnerCleaned {
        at: UnixMillis,
        attempt_id: String,
        target: String,
    },
    /// A runner attempt failed; `failure.fix` says what to do.
    RunnerFailed { failure: Failure },
    /// The credential state changed (signed in, signed out, renewed).
    AuthChanged { at: UnixMillis, auth: AuthState },
    /// The credential stopped working: the tray should offer to sign in.
    SignInRequired { at: UnixMillis, reason: String },
    /// A device-flow sign-in run by the service changed state (see [`crate::signin`]).
    SignInProgress {
        session: crate::signin::SignInSession,
    },
    /// A newer runner-manager binary was installed over the running one (a package manager,
    /// or the updater's swap): the service drains and hands over to it.
    UpdateReady {
        at: UnixMillis,
        current_version: String,
        new_version: String,
    },
    /// The release feed has a newer release. In `auto` mode it is applied next; in `notify`
    /// mode (or for an install the updater cannot change) it waits for `POST /v1/update`.
    UpdateAvailable {
        at: UnixMillis,
        current_version: String,
        new_version: String,
        /// Whether the service will apply it by itself.
        automatic: bool,
    },
    /// Download progress of the new release's assets (at most a few per second).
    UpdateProgress {
        at: UnixMillis,
        new_version: String,
        downloaded: u64,
        /// `null` when the feed did not say.
        total: Option<u64>,
    },
    /// Verified; the service stopped starting runners, waits for running jobs, then swaps its
    /// files and restarts.
    UpdateApplying { at: UnixMillis, new_version: String },
    /// This service now runs `new_version` (published by the new service once it answers).
    UpdateFinished {
        at: UnixMillis,
        previous_version: String,
        new_version: String,
    },
    /// An update was refused or failed; nothing was changed, or the previous version was
    /// restored. `fix` says what to do.
    UpdateFailed {
        at: UnixMillis,
        new_version: Option<String>,
        reason: String,
        fix: String,
    },
    /// An event kind this client does not know (sent by a newer service): skip it.
    #[serde(other)]
    Unknown,
}

impl WatchMessage {
    /// One NDJSON line (with its trailing newline).
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::FailureReason;

    #[test]
    fn messages_are_tagged_by_type_and_events_by_kind() {
        let m = WatchMessage::Event {
            event: Event::RunnerFailed {
                failure: Failure {
                    at: UnixMillis(1),
                    target: "o/r".into(),
                    attempt_id: Some("01ABCDEFGH".into()),
                    reason: FailureReason::JitExpired,
                    detail: None,
                    fix: "nothing: it is replaced".into(),
                },
            },
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["type"], "event");
        assert_eq!(v["event"]["kind"], "runner_failed");
        assert_eq!(v["event"]["failure"]["reason"], "jit_expired");
        let line = m.to_line().unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
    }

    #[test]
    fn unknown_types_and_kinds_are_skippable() {
        let m: WatchMessage = serde_json::from_str(r#"{"type":"heartbeat","n":1}"#).unwrap();
        assert_eq!(m, WatchMessage::Unknown);
        let m: WatchMessage =
            serde_json::from_str(r#"{"type":"event","event":{"kind":"moon_landing"}}"#).unwrap();
        assert_eq!(
            m,
            WatchMessage::Event {
                event: Event::Unknown
            }
        );
    }
}
