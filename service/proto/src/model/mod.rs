//! The client-side model of the service, folded from the watch stream: one implementation
//! shared by the tray, its tests and `runner-manager status --watch`.
//!
//! [`Model::fold`] takes one [`Input`] (a watch message, a connection change, or a clock tick)
//! and the current time, updates the model and returns the notifications to raise. It is pure:
//! no IO, no clock of its own (time comes in as `now`), so every rule, including the
//! time-based ones, is tested with an injected clock. What to show is derived on demand by
//! [`Model::view`].

mod notice;
mod update;
mod view;
pub mod words;

pub use notice::{
    failure_anchor, fix_sentence, Notice, NoticeAction, NoticeKind, BURST_QUIET_MS, NOTIFY_EVERY_MS,
};
pub use update::{UpdateAction, UpdateView};
pub use view::{Concern, LiveRunner, TrayState, View};

use crate::signin::{SignInSession, SignInState};
use crate::status::{AuthState, Failure, Status};
use crate::time::UnixMillis;
use crate::update::UpdateStatus;
use crate::watch::{Event, WatchMessage};
use std::collections::BTreeMap;

/// Where the connection to the service stands, each non-working state with its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    /// Before the first answer, or reconnecting after the stream ended.
    Connecting,
    /// The watch stream is up.
    Connected,
    /// Nothing answers on the socket.
    ServiceNotRunning { message: String, fix: String },
    /// The service refuses this user (not root, not an operator).
    NotAllowed { message: String, fix: String },
    /// The two sides speak incompatible API versions.
    VersionMismatch { message: String, fix: String },
    /// The service answered something this client cannot read.
    Unreadable { message: String, fix: String },
}

impl Connection {
    /// The problem and its fix, for states that have one.
    pub fn problem(&self) -> Option<(&str, &str)> {
        match self {
            Connection::Connecting | Connection::Connected => None,
            Connection::ServiceNotRunning { message, fix }
            | Connection::NotAllowed { message, fix }
            | Connection::VersionMismatch { message, fix }
            | Connection::Unreadable { message, fix } => Some((message, fix)),
        }
    }
}

/// Why the connection was lost (or never made), as the client transport reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disconnect {
    /// Nothing listens on any of the sockets tried.
    NotRunning { sockets: Vec<String> },
    /// The OS or the service refused this user.
    NotAllowed { detail: String },
    /// The service speaks another API version; `detail` names the side to update.
    VersionMismatch { detail: String },
    /// The stream ended (the service stopped, restarted, or cut a slow reader off).
    Ended,
    /// A line of the stream (or an answer) could not be read.
    Unreadable { detail: String },
    /// Anything else (a timeout, an I/O error).
    Failed { detail: String },
}

/// One thing that happened, fed to [`Model::fold`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A message of the watch stream.
    Message(WatchMessage),
    /// The connection was lost or could not be made.
    Lost(Disconnect),
    /// One line of the stream could not be read; it was skipped and the stream goes on.
    BadLine { detail: String },
    /// The service's updater (`GET /v1/update`), read once per connection: the watch stream
    /// carries the changes after it as events, but not the state before them.
    Update(Box<UpdateStatus>),
    /// Time passed (rules that depend on time: GitHub unreachable for 2 or 5 minutes, held
    /// failure notifications, elapsed times).
    Tick,
}

/// Choices the user makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelOptions {
    /// Notify when a job finished (off by default: only what needs attention notifies).
    pub notify_finished_jobs: bool,
}

/// How long GitHub may be unreachable before the tray calls for attention.
pub const UNREACHABLE_ATTENTION_MS: i64 = 2 * 60 * 1000;
/// How long GitHub may be unreachable before the tray notifies (once, and once when back).
pub const UNREACHABLE_NOTIFY_MS: i64 = 5 * 60 * 1000;
/// How many failures the model keeps unacknowledged (the oldest go first).
const MAX_UNACKNOWLEDGED: usize = 50;

/// The service as this client knows it.
#[derive(Debug, Clone)]
pub struct Model {
    pub connection: Connection,
    /// The latest status (kept while reconnecting, so windows do not go blank).
    pub status: Option<Status>,
    /// The service's latest sign-in session, from `sign_in_progress` events.
    pub sign_in: Option<SignInSession>,
    /// Failures seen since the user last looked (opened the dashboard), newest last.
    pub unacknowledged: Vec<Failure>,
    /// Something the stream carried that this client could not use (a newer service, a
    /// broken line), for the dashboard; the stream goes on without it.
    pub stream_note: Option<String>,
    pub options: ModelOptions,
    /// Messages of kinds this client does not know, skipped.
    pub skipped: u64,
    pub(crate) notes: notice::Memory,
    pub(crate) updates: update::Updates,
    /// Failures older than this were seen before the tray started (or were acknowledged).
    acknowledged_until: UnixMillis,
    was_connected: bool,
}

impl Model {
    /// A model at `now`: failures before `now` count as already seen.
    pub fn new(now: UnixMillis, options: ModelOptions) -> Self {
        Model {
            connection: Connection::Connecting,
            status: None,
            sign_in: None,
            unacknowledged: Vec::new(),
            stream_note: None,
            options,
            skipped: 0,
            notes: notice::Memory::default(),
            updates: update::Updates::default(),
            acknowledged_until: now,
            was_connected: false,
        }
    }

    /// Applies one input; returns the notifications to raise now, in order.
    pub fn fold(&mut self, input: Input, now: UnixMillis) -> Vec<Notice> {
        let mut out = Vec::new();
        match input {
            Input::Message(message) => self.message(message, now, &mut out),
            Input::Lost(why) => self.lost(why, now, &mut out),
            Input::BadLine { detail } => {
                self.skipped += 1;
                self.stream_note = Some(format!(
                    "the service sent a line this tray cannot read (skipped): {detail}"
                ));
            }
            Input::Update(status) => self.updates.status(*status, &mut out),
            Input::Tick => {}
        }
        self.time_rules(now, &mut out);
        out
    }

    /// The user looked at the failures (opened the dashboard or a failure notification).
    pub fn acknowledge(&mut self, now: UnixMillis) {
        self.unacknowledged.clear();
        self.acknowledged_until = now;
    }

    /// When the model should get a [`Input::Tick`] next, if anything it shows or decides
    /// depends on time (elapsed job times, held notifications, GitHub outage thresholds).
    /// `None`: nothing changes until the service says so (no timer, no CPU).
    pub fn next_tick(&self, now: UnixMillis) -> Option<UnixMillis> {
        let mut next: Option<UnixMillis> = None;
        let mut at = |t: UnixMillis| {
            let t = t.max(UnixMillis(now.0 + 1));
            next = Some(next.map_or(t, |n| n.min(t)));
        };
        if let Some(t) = self.notes.flush_due() {
            at(t);
        }
        if self.connection == Connection::Connected {
            if let Some(status) = &self.status {
                if !view::live_runners(status, now).is_empty() {
                    // Elapsed times are shown to the second.
                    at(UnixMillis(now.0 + 1000 - now.0.rem_euclid(1000)));
                }
                if let Some(since) = view::unreachable_since(status) {
                    for threshold in [UNREACHABLE_ATTENTION_MS, UNREACHABLE_NOTIFY_MS] {
                        if now.0 < since.0 + threshold {
                            at(UnixMillis(since.0 + threshold));
                        }
                    }
                }
            }
        }
        next
    }

    fn message(&mut self, message: WatchMessage, now: UnixMillis, out: &mut Vec<Notice>) {
        match message {
            WatchMessage::Snapshot { status } => {
                // A fresh snapshot (first, or after a reconnect) replaces everything known.
                self.connected();
                self.set_status(*status, now, out);
            }
            WatchMessage::Changed { status } => {
                if self.connection != Connection::Connected {
                    // A change before any snapshot breaks the protocol; take it anyway (it
                    // is a full status) but say so.
                    self.stream_note =
                        Some("the service sent a change before its snapshot".to_owned());
                    self.connected();
                }
                self.set_status(*status, now, out);
            }
            WatchMessage::Event { event } => self.event(event, now, out),
            WatchMessage::Unknown => {
                self.skipped += 1;
                self.stream_note = Some(
                    "the service sent a message this tray does not know (a newer service?): \
                     skipped; update the tray to see everything"
                        .to_owned(),
                );
            }
        }
    }

    fn connected(&mut self) {
        self.connection = Connection::Connected;
        self.was_connected = true;
        self.notes.service_stop_notified = false;
    }

    fn set_status(&mut self, status: Status, now: UnixMillis, out: &mut Vec<Notice>) {
        let before_auth = self.status.as_ref().map(|s| s.auth.clone());
        // Failures the stream's events did not deliver (e.g. while disconnected) still count.
        for failure in &status.recent_failures {
            self.note_failure(failure, now, out);
        }
        if let AuthState::SignInRequired { reason } = &status.auth {
            if !matches!(before_auth, Some(AuthState::SignInRequired { .. })) {
                self.notes.sign_in_needed(reason, out);
            }
        } else {
            self.notes.sign_in_notified = false;
        }
        self.notes.github_health(&status, now, out);
        self.status = Some(status);
    }

    fn note_failure(&mut self, failure: &Failure, now: UnixMillis, out: &mut Vec<Notice>) {
        if failure.at < self.acknowledged_until
            || self.unacknowledged.iter().any(|f| same_failure(f, failure))
            || self.notes.seen_before(failure)
        {
            return;
        }
        self.unacknowledged.push(failure.clone());
        if self.unacknowledged.len() > MAX_UNACKNOWLEDGED {
            self.unacknowledged.remove(0);
        }
        self.notes.failure(failure, now, out);
    }

    fn event(&mut self, event: Event, now: UnixMillis, out: &mut Vec<Notice>) {
        match event {
            Event::RunnerFailed { failure } => self.note_failure(&failure, now, out),
            Event::SignInRequired { reason, .. } => {
                if let Some(status) = &mut self.status {
                    status.auth = AuthState::SignInRequired {
                        reason: reason.clone(),
                    };
                }
                self.notes.sign_in_needed(&reason, out);
            }
            Event::AuthChanged { auth, .. } => {
                if let AuthState::SignInRequired { reason } = &auth {
                    self.notes.sign_in_needed(reason, out);
                } else {
                    self.notes.sign_in_notified = false;
                }
                if let Some(status) = &mut self.status {
                    status.auth = auth;
                }
            }
            Event::SignInProgress { session } => {
                let newly_approved = session.state == SignInState::Approved
                    && self
                        .sign_in
                        .as_ref()
                        .is_none_or(|s| s.id != session.id || s.state != SignInState::Approved);
                if newly_approved {
                    out.push(notice::signed_in(session.login.as_deref()));
                }
                self.sign_in = Some(session);
            }
            Event::RunnerConcluded {
                target,
                outcome,
                job,
                ..
            } => {
                if self.options.notify_finished_jobs {
                    if let Some(n) = notice::job_finished(&target, outcome, job.as_deref()) {
                        out.push(n);
                    }
                }
            }
            Event::UpdateReady { .. }
            | Event::UpdateAvailable { .. }
            | Event::UpdateProgress { .. }
            | Event::UpdateApplying { .. }
            | Event::UpdateFinished { .. }
            | Event::UpdateFailed { .. } => self.updates.event(event, out),
            Event::RunnerLaunched { .. }
            | Event::RunnerStateChanged { .. }
            | Event::RunnerCleaned { .. } => {}
            Event::Unknown => {
                self.skipped += 1;
                self.stream_note = Some(
                    "the service sent an event this tray does not know (a newer service?): \
                     skipped; update the tray to see everything"
                        .to_owned(),
                );
            }
        }
    }

    fn lost(&mut self, why: Disconnect, now: UnixMillis, out: &mut Vec<Notice>) {
        let _ = now;
        self.connection = match why {
            Disconnect::NotRunning { sockets } => {
                if self.was_connected && !self.notes.service_stop_notified {
                    self.notes.service_stop_notified = true;
                    out.push(notice::service_stopped());
                }
                Connection::ServiceNotRunning {
                    message: format!(
                        "The runner-manager service is not running (nothing answers on {}).",
                        sockets.join(" or ")
                    ),
                    fix: "Start it with `runner-manager service install` (at boot or login) \
                          or `runner-manager daemon run`; the tray reconnects by itself."
                        .to_owned(),
                }
            }
            Disconnect::NotAllowed { detail } => Connection::NotAllowed {
                message: format!("The service refuses this user: {detail}"),
                fix: "Ask its administrator to add you with `runner-manager daemon run \
                      --operator YOUR_USER` (or install a login service of your own with \
                      `runner-manager service install --start-at login`)."
                    .to_owned(),
            },
            Disconnect::VersionMismatch { detail } => Connection::VersionMismatch {
                fix: if detail.contains("update the") {
                    "Update the runner-manager tray to the service's version.".to_owned()
                } else {
                    "Update the runner-manager service (install the same version as this tray), \
                     then restart it."
                        .to_owned()
                },
                message: detail,
            },
            Disconnect::Ended => Connection::Connecting,
            Disconnect::Unreadable { detail } => {
                self.stream_note = Some(format!("the service sent something unreadable: {detail}"));
                Connection::Unreadable {
                    message: format!("The service's answer could not be read: {detail}"),
                    fix: "The tray reconnects by itself; if this stays, install the same \
                          runner-manager version for the service and the tray."
                        .to_owned(),
                }
            }
            Disconnect::Failed { detail } => Connection::Unreadable {
                message: format!("Talking to the service failed: {detail}"),
                fix: "The tray retries by itself; if this stays, check the service's log \
                      (`journalctl -u runner-manager`)."
                    .to_owned(),
            },
        };
    }

    fn time_rules(&mut self, now: UnixMillis, out: &mut Vec<Notice>) {
        if self.connection == Connection::Connected {
            if let Some(status) = &self.status {
                self.notes.github_health(status, now, out);
            }
        }
        self.notes.flush(now, out);
    }

    /// What the service's updater last said (`None` before the first answer or event).
    pub fn update(&self) -> Option<&UpdateStatus> {
        self.updates.status.as_ref()
    }

    /// The version the service runs, when it said (through its updater).
    pub fn service_version(&self) -> Option<&str> {
        self.updates.service_version()
    }

    /// The About line: `About runner-manager 0.1.0`, and the service's version when it
    /// differs (`About runner-manager 0.1.0 · service 0.2.0`).
    pub fn about(&self, tray_version: &str) -> String {
        match self.service_version() {
            Some(v) if v != tray_version => {
                format!("About runner-manager {tray_version} · service {v}")
            }
            _ => format!("About runner-manager {tray_version}"),
        }
    }

    /// The failures of the dashboard: every recent one the service reports, newest first,
    /// each marked whether the user has seen it.
    pub fn failures(&self) -> Vec<(Failure, bool)> {
        let mut all: BTreeMap<(i64, String), (Failure, bool)> = BTreeMap::new();
        if let Some(status) = &self.status {
            for f in &status.recent_failures {
                let seen = !self.unacknowledged.iter().any(|u| same_failure(u, f));
                all.insert(key(f), (f.clone(), seen));
            }
        }
        for f in &self.unacknowledged {
            all.insert(key(f), (f.clone(), false));
        }
        all.into_values().rev().collect()
    }
}

fn key(f: &Failure) -> (i64, String) {
    (
        f.at.0,
        format!("{}/{}", f.target, f.attempt_id.as_deref().unwrap_or("")),
    )
}

fn same_failure(a: &Failure, b: &Failure) -> bool {
    a.at == b.at && a.target == b.target && a.attempt_id == b.attempt_id && a.reason == b.reason
}

#[cfg(test)]
mod tests;
