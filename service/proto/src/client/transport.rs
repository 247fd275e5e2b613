//! The byte stream under HTTP: a Unix socket, or on Windows the service's named pipe.
//!
//! Windows: the pipe is opened with read/write-data access only, `ERROR_PIPE_BUSY` (every
//! instance taken) is retried for [`PIPE_BUSY_WAIT`], and before anything is sent the server
//! end is checked to be the real service ([`crate::pipe::verify_server`]), so a program that
//! took the pipe's name cannot receive a credential.

use super::error::{ClientError, START_SERVICE_HINT};
use crate::pipe;
use std::io;
use std::path::Path;
use std::time::Duration;

/// How long a client waits for a free pipe instance before giving up.
pub const PIPE_BUSY_WAIT: Duration = Duration::from_secs(2);

#[cfg(unix)]
pub(super) async fn connect(socket: &Path) -> Result<tokio::net::UnixStream, ClientError> {
    use std::io::ErrorKind;
    tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| match source.kind() {
            ErrorKind::NotFound | ErrorKind::ConnectionRefused => ClientError::ServiceNotRunning {
                socket: socket.to_owned(),
                hint: START_SERVICE_HINT,
            },
            ErrorKind::PermissionDenied => ClientError::PermissionDenied {
                socket: socket.to_owned(),
                message: "the socket's permissions do not let this user connect: run as root \
                      (e.g. with sudo) or as a user the service's socket mode admits"
                    .to_owned(),
            },
            _ => ClientError::Io {
                socket: socket.to_owned(),
                source,
            },
        })
}

#[cfg(windows)]
pub(super) async fn connect(
    pipe_name: &Path,
) -> Result<tokio::net::windows::named_pipe::NamedPipeClient, ClientError> {
    use crate::win32;
    let deadline = tokio::time::Instant::now() + PIPE_BUSY_WAIT;
    let client = loop {
        match win32::open_pipe_client(pipe_name.as_os_str()) {
            Ok(client) => break client,
            Err(e)
                if e.raw_os_error() == Some(pipe::ERROR_PIPE_BUSY)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(pipe_open_error(pipe_name, e)),
        }
    };
    let io_err = |source| ClientError::Io {
        socket: pipe_name.to_owned(),
        source,
    };
    let me = win32::current_user().map_err(io_err)?;
    let evidence = win32::pipe_server_evidence(&client).map_err(io_err)?;
    pipe::verify_server(&evidence, &me).map_err(|e| ClientError::UntrustedServer {
        socket: pipe_name.to_owned(),
        detail: e.to_string(),
    })?;
    Ok(client)
}

/// The client error for a failed open of the pipe (Win32 error codes; pure so it is tested
/// on every platform).
#[cfg_attr(not(windows), allow(dead_code))]
pub(super) fn pipe_open_error(pipe_name: &Path, source: io::Error) -> ClientError {
    match source.raw_os_error() {
        Some(pipe::ERROR_FILE_NOT_FOUND) => ClientError::ServiceNotRunning {
            socket: pipe_name.to_owned(),
            hint: START_SERVICE_HINT,
        },
        Some(pipe::ERROR_ACCESS_DENIED) => ClientError::PermissionDenied {
            socket: pipe_name.to_owned(),
            message: "the pipe's security descriptor does not let this account connect (it \
                      admits authenticated local users; network logons are refused): run the \
                      command as a local user, or from an elevated prompt"
                .to_owned(),
        },
        Some(pipe::ERROR_PIPE_BUSY) => ClientError::Timeout {
            socket: pipe_name.to_owned(),
            after: PIPE_BUSY_WAIT,
        },
        _ => ClientError::Io {
            socket: pipe_name.to_owned(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_open_errors_map_to_the_client_errors_that_name_the_fix() {
        let name = Path::new(r"\\.\pipe\runner-manager-0123456789abcdef");
        let err = |code| pipe_open_error(name, io::Error::from_raw_os_error(code));
        let missing = err(pipe::ERROR_FILE_NOT_FOUND);
        assert!(matches!(missing, ClientError::ServiceNotRunning { .. }));
        let text = missing.to_string();
        assert!(text.contains("runner-manager-0123456789abcdef"), "{text}");
        assert!(text.contains("runner-manager daemon run"), "{text}");
        let denied = err(pipe::ERROR_ACCESS_DENIED);
        assert!(matches!(denied, ClientError::PermissionDenied { .. }));
        assert!(denied.to_string().contains("elevated prompt"), "{denied}");
        let busy = err(pipe::ERROR_PIPE_BUSY);
        assert!(
            matches!(busy, ClientError::Timeout { after, .. } if after == PIPE_BUSY_WAIT),
            "{busy:?}"
        );
        assert!(matches!(err(87), ClientError::Io { .. }));
    }
}
