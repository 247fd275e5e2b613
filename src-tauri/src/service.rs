//! The tray's and the windows' calls to the service: each connects through `rm-proto`'s client and turns a
//! failure into a coded error `{code, message, fix}` the windows show as they are.

use crate::state::Shared;
use rm_proto::{
    Client, ClientError, ClientOptions, ErrorCode, TargetRef, TargetStatus, TargetUpdate,
};
use serde::Serialize;

/// A failed call, for people: what went wrong and what to do.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CommandError {
    /// Stable: `service_not_running`, `not_allowed`, `version_mismatch`, `sign_in_unsupported`,
    /// the service's error codes (`bad_request`, `not_found`, `conflict`…), `failed`.
    pub code: String,
    pub message: String,
    pub fix: String,
}

impl CommandError {
    pub fn new(code: &str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        CommandError {
            code: code.to_owned(),
            message: message.into(),
            fix: fix.into(),
        }
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.message, self.fix)
    }
}

const START_FIX: &str =
    "Start it with `runner-manager service install` (or `runner-manager daemon run`).";

impl From<ClientError> for CommandError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::ServiceNotRunning { socket, .. } => CommandError::new(
                "service_not_running",
                format!(
                    "The runner-manager service is not running (nothing answers on {}).",
                    socket.display()
                ),
                START_FIX,
            ),
            ClientError::PermissionDenied { message, .. } => CommandError::new(
                "not_allowed",
                format!("The service refuses this user: {message}"),
                "Ask its administrator to add you as an operator (`runner-manager daemon run \
                 --operator YOUR_USER`).",
            ),
            ClientError::VersionMismatch(m) => CommandError::new(
                "version_mismatch",
                m.to_string(),
                "Install the same runner-manager version for the service and the tray.",
            ),
            ClientError::Api { code, message, .. } => {
                let fix = match code {
                    ErrorCode::SignInRequired => "Sign in first (Sign in… in the tray menu).",
                    ErrorCode::Conflict => "Look at the current state and try again.",
                    ErrorCode::ServiceUnavailable => "Try again in a moment.",
                    ErrorCode::Internal | ErrorCode::Unknown => {
                        "See the service's log (`journalctl -u runner-manager`)."
                    }
                    // The service's message names the fix for bad input.
                    _ => "",
                };
                CommandError::new(code.as_str(), message, fix)
            }
            other => CommandError::new(
                "failed",
                other.to_string(),
                "Check that the service runs: `runner-manager status`.",
            ),
        }
    }
}

/// A client of the service the tray follows (or the first socket, before any connection).
pub async fn client(shared: &Shared) -> Result<Client, CommandError> {
    client_with(shared, ClientOptions::named("runner-manager tray")).await
}

/// How long an asked-for update may take to download and verify before the service answers
/// (it goes on without the answer; the stream shows its progress).
const APPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Asks the service to apply the available release now (`POST /v1/update {"apply": true}`),
/// whatever its mode; answers once it is verified and being applied, or refused.
pub async fn apply_update(shared: &Shared) -> Result<rm_proto::UpdateStatus, CommandError> {
    let options = ClientOptions {
        request_timeout: APPLY_TIMEOUT,
        ..ClientOptions::named("runner-manager tray")
    };
    let client = client_with(shared, options).await?;
    client
        .update(&rm_proto::UpdateRequest { apply: true })
        .await
        .map_err(|e| match e {
            ClientError::Api {
                code: ErrorCode::NotFound | ErrorCode::MethodNotAllowed,
                ..
            } => CommandError::new(
                "update_unsupported",
                "This service cannot update itself (it is older than this tray).",
                "Install the new release's package (see README, Install).",
            ),
            other => other.into(),
        })
}

async fn client_with(shared: &Shared, options: ClientOptions) -> Result<Client, CommandError> {
    let mut candidates = Vec::new();
    if let Some(s) = shared.socket() {
        candidates.push(s);
    }
    candidates.extend(shared.sockets.iter().cloned());
    let mut last = None;
    for socket in candidates {
        match Client::connect_with(&socket, options.clone()).await {
            Ok(c) => return Ok(c),
            Err(e @ ClientError::ServiceNotRunning { .. }) => {
                last.get_or_insert(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map(CommandError::from).unwrap_or_else(|| {
        CommandError::new("service_not_running", "No socket to try.", START_FIX)
    }))
}

/// Changes a target with its current revision; a lost compare-and-set is retried a few times
/// with a fresh one (the change itself is absolute).
pub async fn update_target(
    client: &Client,
    target: &TargetRef,
    change: TargetUpdate,
) -> Result<TargetStatus, CommandError> {
    for _ in 0..3 {
        let current = client
            .targets()
            .await?
            .into_iter()
            .find(|t| target.matches(t))
            .ok_or_else(|| {
                CommandError::new(
                    "not_found",
                    format!("{target} is not served by this host any more."),
                    "Add it again from the dashboard.",
                )
            })?;
        let request = TargetUpdate {
            revision: current.revision,
            ..change.clone()
        };
        match client.update_target(target, &request).await {
            Err(ClientError::Api {
                code: ErrorCode::Conflict,
                ..
            }) => continue,
            other => return other.map_err(CommandError::from),
        }
    }
    Err(CommandError::new(
        "conflict",
        format!("{target} kept changing while the tray changed it."),
        "Try again.",
    ))
}

/// The sign-in endpoints answer 404 on a service older than them: say to update it.
pub fn sign_in_error(e: ClientError) -> CommandError {
    match e {
        ClientError::Api {
            code: ErrorCode::NotFound | ErrorCode::MethodNotAllowed,
            ..
        } => CommandError::new(
            "sign_in_unsupported",
            "This service cannot run the sign-in itself (it is older than this tray).",
            "Update runner-manager (the service), or sign in with `runner-manager auth login` \
             in a terminal.",
        ),
        other => other.into(),
    }
}
