//! HTTP client for the fake broker (`/_broker/...` on the fake GitHub origin, FAKE_PROTOCOL.md).
//! Plain blocking HTTP: the listener does one thing at a time, like the real one.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use ureq::http::Response;
use ureq::Agent;

use crate::config::Secret;

/// What can go wrong talking to the broker; callers branch on it.
#[derive(Debug)]
pub enum BrokerError {
    /// No HTTP answer (refused, reset, timed out): retry until reconnected.
    Connect(String),
    /// 401: the secret is not (or no longer) accepted.
    Unauthorized,
    /// 404 "The runner no longer exists on the server".
    RunnerGone,
    /// 404 on a session path for another reason: the session was dropped; create a new one.
    SessionLost,
    /// 409 "A session for this runner already exists."
    SessionConflict,
    /// Any other answer.
    Unexpected { status: u16, message: String },
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "{e}"),
            Self::Unauthorized => f.write_str("The runner credentials were rejected (401)"),
            Self::RunnerGone => f.write_str("The runner no longer exists on the server"),
            Self::SessionLost => f.write_str("The session no longer exists on the server"),
            Self::SessionConflict => f.write_str("A session for this runner already exists."),
            Self::Unexpected { status, message } => {
                write!(f, "Unexpected answer from the server: {status} {message}")
            }
        }
    }
}

/// What a job message asks the listener to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Succeed,
    Fail,
    Hang,
    Crash,
}

/// A job handed to this runner by a message poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub job_id: u64,
    pub run_id: u64,
    pub name: String,
    pub display_name: String,
    pub behaviour: Behaviour,
    pub duration_ms: u64,
    /// MiB to hold while working, in `memory_children` children (≥ 1 when non-zero).
    pub memory_mb: u32,
    pub memory_children: u32,
    /// The job's step: a shell command run in the job's workspace (`step.rs`), if any.
    pub command: Option<String>,
}

#[derive(Deserialize)]
struct JobWire {
    job_id: u64,
    #[serde(default)]
    run_id: u64,
    name: String,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    behaviour: Option<String>,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    memory_mb: u32,
    #[serde(default)]
    memory_children: u32,
    #[serde(default)]
    command: Option<String>,
}

#[derive(Deserialize)]
struct MessageWire {
    job: JobWire,
}

#[derive(Deserialize)]
struct SessionWire {
    session_id: String,
}

#[derive(Deserialize, Default)]
struct ErrorWire {
    #[serde(default)]
    message: String,
}

/// How a finished job ended, as sent to `/complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobResult {
    Succeeded,
    Failed,
    Cancelled,
}

impl JobResult {
    fn wire(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// The word the real runner prints in "Job X completed with result: ...".
    pub fn console(self) -> &'static str {
        match self {
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Canceled",
        }
    }
}

pub struct Broker {
    agent: Agent,
    base: String,
    auth: Secret,
}

impl Broker {
    /// `server_url` is `.runner`'s ServerUrl (`<origin>/_broker/`).
    pub fn new(server_url: &str, token: &Secret) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            // The server holds polls for seconds; this only bounds a server that never answers,
            // after which the poll is simply repeated (no local job timeout).
            .timeout_global(Some(Duration::from_secs(120)))
            .build();
        Self {
            agent: config.new_agent(),
            base: server_url.trim_end_matches('/').to_owned(),
            auth: Secret::new(format!("Bearer {}", token.expose())),
        }
    }

    pub fn create_session(&self, runner_id: u64, os: &str) -> Result<String, BrokerError> {
        let resp = self
            .agent
            .post(format!("{}/sessions", self.base))
            .header("Authorization", self.auth.expose())
            .send_json(json!({"runner_id": runner_id, "os": os}))
            .map_err(connect)?;
        match resp.status().as_u16() {
            200 | 201 => resp
                .into_body()
                .read_json::<SessionWire>()
                .map(|s| s.session_id)
                .map_err(|e| unexpected(200, &e.to_string())),
            409 => Err(BrokerError::SessionConflict),
            _ => Err(status_error(resp)),
        }
    }

    /// One long poll: `Ok(None)` when the server had nothing for us this time.
    pub fn poll(&self, session_id: &str) -> Result<Option<Job>, BrokerError> {
        let resp = self
            .agent
            .get(format!("{}/sessions/{session_id}/message", self.base))
            .header("Authorization", self.auth.expose())
            .call()
            .map_err(connect)?;
        match resp.status().as_u16() {
            204 => Ok(None),
            200 => {
                let wire: MessageWire = resp
                    .into_body()
                    .read_json()
                    .map_err(|e| unexpected(200, &format!("bad job message: {e}")))?;
                Ok(Some(job_from_wire(wire.job)))
            }
            404 => match status_error(resp) {
                BrokerError::RunnerGone => Err(BrokerError::RunnerGone),
                _ => Err(BrokerError::SessionLost),
            },
            _ => Err(status_error(resp)),
        }
    }

    pub fn complete(&self, job_id: u64, result: JobResult) -> Result<(), BrokerError> {
        let resp = self
            .agent
            .post(format!("{}/jobs/{job_id}/complete", self.base))
            .header("Authorization", self.auth.expose())
            .send_json(json!({"result": result.wire()}))
            .map_err(connect)?;
        match resp.status().as_u16() {
            200..=299 => Ok(()),
            _ => Err(status_error(resp)),
        }
    }

    pub fn delete_session(&self, session_id: &str) -> Result<(), BrokerError> {
        let resp = self
            .agent
            .delete(format!("{}/sessions/{session_id}", self.base))
            .header("Authorization", self.auth.expose())
            .call()
            .map_err(connect)?;
        match resp.status().as_u16() {
            200..=299 | 404 => Ok(()),
            _ => Err(status_error(resp)),
        }
    }
}

fn job_from_wire(w: JobWire) -> Job {
    let behaviour = match w.behaviour.as_deref() {
        None | Some("succeed") => Behaviour::Succeed,
        Some("hang") => Behaviour::Hang,
        Some("crash") => Behaviour::Crash,
        // "fail" and anything this listener does not understand: a failed job is the honest
        // outcome of an instruction it could not follow.
        Some(_) => Behaviour::Fail,
    };
    Job {
        job_id: w.job_id,
        run_id: w.run_id,
        display_name: w.display_name.unwrap_or_else(|| w.name.clone()),
        name: w.name,
        behaviour,
        duration_ms: w.duration_ms,
        memory_mb: w.memory_mb,
        memory_children: w.memory_children,
        // An empty command is no step at all.
        command: w.command.filter(|c| !c.trim().is_empty()),
    }
}

fn connect(e: ureq::Error) -> BrokerError {
    BrokerError::Connect(e.to_string())
}

fn unexpected(status: u16, message: &str) -> BrokerError {
    BrokerError::Unexpected {
        status,
        message: message.chars().take(200).collect(),
    }
}

fn status_error(resp: Response<ureq::Body>) -> BrokerError {
    let status = resp.status().as_u16();
    let message = resp
        .into_body()
        .read_json::<ErrorWire>()
        .unwrap_or_default()
        .message;
    match status {
        401 => BrokerError::Unauthorized,
        404 if message.contains("no longer exists") => BrokerError::RunnerGone,
        404 => BrokerError::SessionLost,
        409 => BrokerError::SessionConflict,
        _ => unexpected(status, &message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_message_decodes_with_defaults() {
        let wire: MessageWire = serde_json::from_str(
            r#"{"job":{"job_id":7,"run_id":3,"name":"build","behaviour":"crash","duration_ms":5}}"#,
        )
        .unwrap();
        let job = job_from_wire(wire.job);
        assert_eq!(job.display_name, "build");
        assert_eq!(job.behaviour, Behaviour::Crash);
        let wire: MessageWire =
            serde_json::from_str(r#"{"job":{"job_id":7,"name":"b","behaviour":"weird"}}"#).unwrap();
        assert_eq!(job_from_wire(wire.job).behaviour, Behaviour::Fail);
    }

    #[test]
    fn job_message_carries_its_command() {
        let job = |text: &str| {
            let wire: MessageWire = serde_json::from_str(text).unwrap();
            job_from_wire(wire.job)
        };
        assert_eq!(
            job(r#"{"job":{"job_id":7,"name":"b","command":"echo \"$GITHUB_JOB\" > out"}}"#)
                .command
                .as_deref(),
            Some(r#"echo "$GITHUB_JOB" > out"#)
        );
        // Absent, null or blank: no step.
        for text in [
            r#"{"job":{"job_id":7,"name":"b"}}"#,
            r#"{"job":{"job_id":7,"name":"b","command":null}}"#,
            r#"{"job":{"job_id":7,"name":"b","command":"  "}}"#,
        ] {
            assert_eq!(job(text).command, None, "{text}");
        }
        // Not a string: the message is refused rather than half understood.
        assert!(serde_json::from_str::<MessageWire>(
            r#"{"job":{"job_id":7,"name":"b","command":5}}"#
        )
        .is_err());
    }

    #[test]
    fn connect_errors_are_reported_as_such() {
        // Port 9 (discard) on loopback is closed here; nothing listens.
        let broker = Broker::new("http://127.0.0.1:9/_broker/", &Secret::new("t"));
        assert!(matches!(
            broker.create_session(1, "Linux"),
            Err(BrokerError::Connect(_))
        ));
    }
}
