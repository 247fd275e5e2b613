//! What the windows get: the model, rendered for people, as one JSON object (event `model`,
//! command `model`). Nothing secret is in it: the service never sends a token or a device code.

use rm_proto::model::words::reason_words;
use rm_proto::model::{failure_anchor, fix_sentence, Connection, View};
use rm_proto::{Failure, SignInSession, Status, UnixMillis};
use rm_tray::state::Shared;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ConnectionDto {
    /// `connecting`, `connected`, `service_not_running`, `not_allowed`, `version_mismatch`,
    /// `unreadable`.
    pub state: &'static str,
    pub message: Option<String>,
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailureDto {
    #[serde(flatten)]
    pub failure: Failure,
    /// The dashboard's anchor for this failure (notifications open it).
    pub anchor: String,
    /// What happened, in words.
    pub words: String,
    /// The fix in a sentence.
    pub fix_sentence: String,
    /// Whether the user has seen it (opened the dashboard since).
    pub seen: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelDto {
    pub now: UnixMillis,
    pub connection: ConnectionDto,
    pub view: View,
    pub status: Option<Status>,
    pub sign_in: Option<SignInSession>,
    pub failures: Vec<FailureDto>,
    /// Something the stream carried that this tray could not use.
    pub stream_note: Option<String>,
    /// Why there is no tray icon, when there is none.
    pub no_tray: Option<String>,
    pub socket: Option<String>,
    /// This tray's version, and the About line (with the service's version when it differs).
    pub tray_version: &'static str,
    pub about: String,
    /// The tray notifies finished jobs (the dashboard's option shows it).
    pub notify_finished_jobs: bool,
}

pub fn model(shared: &Shared) -> ModelDto {
    let now = UnixMillis::now();
    let m = shared.model();
    let (state, problem) = match &m.connection {
        Connection::Connecting => ("connecting", None),
        Connection::Connected => ("connected", None),
        Connection::ServiceNotRunning { .. } => ("service_not_running", m.connection.problem()),
        Connection::NotAllowed { .. } => ("not_allowed", m.connection.problem()),
        Connection::VersionMismatch { .. } => ("version_mismatch", m.connection.problem()),
        Connection::Unreadable { .. } => ("unreadable", m.connection.problem()),
    };
    ModelDto {
        now,
        connection: ConnectionDto {
            state,
            message: problem.map(|p| p.0.to_owned()),
            fix: problem.map(|p| p.1.to_owned()),
        },
        view: m.view(now),
        status: m.status.clone(),
        sign_in: m.sign_in.clone(),
        failures: m
            .failures()
            .into_iter()
            .map(|(f, seen)| FailureDto {
                anchor: failure_anchor(&f),
                words: reason_words(f.reason).to_owned(),
                fix_sentence: fix_sentence(&f.fix),
                failure: f,
                seen,
            })
            .collect(),
        stream_note: m.stream_note.clone(),
        no_tray: shared.no_tray(),
        socket: shared.socket().map(|s| s.display().to_string()),
        tray_version: rm_tray::TRAY_VERSION,
        about: m.about(rm_tray::TRAY_VERSION),
        notify_finished_jobs: m.options.notify_finished_jobs,
    }
}
