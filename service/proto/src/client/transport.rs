//! The byte stream under HTTP. Unix sockets only, for now.
//!
//! Windows: the service will listen on a named pipe (`\\.\pipe\runner-manager`), authorised by
//! the pipe client's token. A `cfg(windows)` `connect` returning tokio's
//! `windows::named_pipe::NamedPipeClient` (which is `AsyncRead + AsyncWrite`, all hyper needs)
//! slots in here, with `ERROR_PIPE_BUSY` retried and `ERROR_FILE_NOT_FOUND` mapped to
//! `ServiceNotRunning`. It is not written yet because it cannot be compiled or tested here.

use super::error::{ClientError, START_SERVICE_HINT};
use std::io::ErrorKind;
use std::path::Path;
use tokio::net::UnixStream;

pub(super) async fn connect(socket: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(socket)
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
