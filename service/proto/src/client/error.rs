//! What can go wrong talking to the service, each with the fix.

use crate::error::ErrorCode;
use crate::version::VersionMismatch;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

/// The fix offered when nothing answers on the socket.
pub const START_SERVICE_HINT: &str =
    "start it with `runner-manager daemon run` or `runner-manager service install`";

#[derive(Debug, Error)]
pub enum ClientError {
    /// Nothing listens on the socket (missing file or connection refused).
    #[error("the runner-manager service is not running (nothing answers on {}): {hint}", socket.display())]
    ServiceNotRunning { socket: PathBuf, hint: &'static str },
    /// The OS refused access to the socket, or the service refused this user
    /// (`unauthorized_peer`); `message` names the fix.
    #[error("permission denied on {}: {message}", socket.display())]
    PermissionDenied { socket: PathBuf, message: String },
    /// The service refused the request; `code` is stable, `message` names the fix.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
    },
    /// The two sides speak incompatible API versions; the message says which to update.
    #[error(transparent)]
    VersionMismatch(#[from] VersionMismatch),
    /// The process serving the pipe (Windows) is not the runner-manager service (it runs
    /// neither as LocalSystem nor as this user): nothing was sent to it.
    #[error("refusing to talk to {}: {detail}", socket.display())]
    UntrustedServer { socket: PathBuf, detail: String },
    /// The answer did not follow the protocol.
    #[error("unexpected answer from the service on {}: {detail}", socket.display())]
    Protocol { socket: PathBuf, detail: String },
    /// The socket could not be used.
    #[error("talking to the service on {}: {source}", socket.display())]
    Io {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No answer in time.
    #[error(
        "the service on {} did not answer within {after:?}: it may be overloaded or stuck; \
         check its logs", socket.display()
    )]
    Timeout { socket: PathBuf, after: Duration },
    /// One line of the watch stream was not a watch message; it was skipped and the stream
    /// goes on.
    #[error("the service on {} sent a watch line this client cannot read (skipped): {detail}", socket.display())]
    BadWatchLine { socket: PathBuf, detail: String },
    /// The service ended the watch stream abruptly: this reader fell behind (or the service
    /// stopped). Reconnect to get a fresh snapshot.
    #[error(
        "the service closed the watch stream on {} (this reader fell behind or the service \
         stopped): watch again to get a fresh snapshot", socket.display()
    )]
    WatchClosed { socket: PathBuf },
}
