//! Binding the service's socket safely.

use super::BindError;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use tokio::net::UnixListener;

/// Binds the API socket at `path` and sets its mode to exactly `mode`.
///
/// A leftover socket from a crashed service is removed, but only if it is a socket and nobody
/// answers on it; a live service or any other kind of file is left alone.
///
/// The mode is set explicitly after bind because bind applies the umask (0o666 becomes 0o644
/// under umask 022). The mode only decides who can *connect*; every request is still authorised
/// by the peer's uid ([`AccessPolicy`](super::AccessPolicy)), which also covers the short window
/// between bind and chmod. Recommended layout: a root-owned parent directory with mode 0o755
/// (e.g. `/run/runner-manager`), not writable by others, so nobody can replace the socket, and
/// a socket mode of 0o666 so refused users get a clear `403` rather than `EACCES`.
pub fn bind_socket(path: &Path, mode: u32) -> Result<UnixListener, BindError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(BindError::NoRuntime);
    }
    let io_err = |action: &'static str| {
        move |source: io::Error| BindError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(BindError::InUse {
                        path: path.to_owned(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "removing stale socket");
                    std::fs::remove_file(path).map_err(io_err("removing stale socket"))?;
                }
                Err(e) => return Err(io_err("probing existing socket")(e)),
            }
        }
        Ok(_) => {
            return Err(BindError::NotASocket {
                path: path.to_owned(),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspecting")(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err("binding"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("setting the mode of"))?;
    Ok(listener)
}
