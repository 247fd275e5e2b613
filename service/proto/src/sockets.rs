//! Where a client finds the service: its user's own (login) service's socket first, then the
//! boot service's (the tray and the CLI look in the same places; `--socket` overrides both).

use std::path::{Path, PathBuf};

/// The socket's file name inside its directory.
pub const SOCKET_FILE: &str = "api.sock";

/// The boot (root) service's socket.
pub const BOOT_SOCKET: &str = "/run/runner-manager/api.sock";

/// A login (per-user) service's socket: `$XDG_RUNTIME_DIR/runner-manager/api.sock`, or
/// `<data-dir>/api.sock` when the user has no runtime directory.
pub fn login_socket(runtime_dir: Option<&Path>, data_dir: &Path) -> PathBuf {
    match runtime_dir {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join("runner-manager").join(SOCKET_FILE),
        _ => data_dir.join(SOCKET_FILE),
    }
}

/// A user's default data directory: `$XDG_DATA_HOME/runner-manager`, falling back to
/// `~/.local/share/runner-manager` (a relative `XDG_DATA_HOME` is invalid and ignored).
pub fn user_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("runner-manager")
}

/// The sockets to try, in order: this user's own (login) service's, then the boot service's
/// (which admits its operators). A socket that does not exist is passed over.
pub fn default_sockets() -> Vec<PathBuf> {
    if cfg!(windows) {
        // One service per machine on Windows (SYSTEM), reached by its pipe name.
        let base = std::env::var_os("ProgramData")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData"));
        return vec![PathBuf::from(crate::pipe::pipe_name(
            &base.join("runner-manager"),
        ))];
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    in_order(login_socket(runtime.as_deref(), &user_data_dir()))
}

/// A login service's socket, then the boot service's.
pub fn in_order(login: PathBuf) -> Vec<PathBuf> {
    let boot = PathBuf::from(BOOT_SOCKET);
    if login == boot {
        vec![boot]
    } else {
        vec![login, boot]
    }
}

/// The first candidate whose socket file exists, if any.
pub fn first_existing(candidates: &[PathBuf]) -> Option<&PathBuf> {
    candidates.iter().find(|p| p.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_socket_lives_in_the_runtime_dir_else_the_data_dir() {
        assert_eq!(
            login_socket(Some(Path::new("/run/user/1000")), Path::new("/d")),
            Path::new("/run/user/1000/runner-manager/api.sock")
        );
        assert_eq!(
            login_socket(None, Path::new("/d")),
            Path::new("/d/api.sock")
        );
        assert_eq!(
            login_socket(Some(Path::new("")), Path::new("/d")),
            Path::new("/d/api.sock")
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_users_own_socket_comes_first_and_the_first_existing_one_wins() {
        let sockets = default_sockets();
        assert_eq!(
            sockets.last().map(PathBuf::as_path),
            Some(Path::new(BOOT_SOCKET))
        );
        assert_eq!(
            in_order(PathBuf::from("/u/api.sock"))[0],
            Path::new("/u/api.sock")
        );
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.sock");
        let b = dir.path().join("b.sock");
        std::fs::write(&b, b"").unwrap();
        let list = [a.clone(), b.clone()];
        assert_eq!(first_existing(&list), Some(&b));
        std::fs::write(&a, b"").unwrap();
        assert_eq!(first_existing(&list), Some(&a));
    }
}
