//! `runner-manager service install|status|uninstall`: register the daemon with the OS
//! service manager. Only this module knows service managers (DESIGN.md invariant).
//!
//! Linux/systemd is implemented; the launchd plist and Windows `sc.exe` definitions are
//! rendered and unit tested ([`render`]) but installing them is not wired yet: on those
//! systems `service install` says so and exits with [`ExitCode::Unsupported`].

pub mod record;
pub mod render;
pub mod systemd;

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::exit::{ExitCode, Failure};

pub use record::{InstallRecord, PathStatus};
pub use render::{ServiceParams, SERVICE_NAME};
pub use systemd::Systemd;

/// The unprivileged account runners run as in boot mode.
pub const RUNNER_ACCOUNT: &str = "runner-manager-runner";

/// The message (and exit code) when no service manager we support is running.
pub fn no_systemd() -> Failure {
    Failure::new(
        ExitCode::Unsupported,
        "systemd is not running on this machine: run `runner-manager daemon run` under your own \
         supervisor",
    )
}

/// Write `bytes` to `path` atomically (temporary file in the same directory, fsync, rename,
/// fsync of the directory) with the given mode.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Failure> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let fail =
        |e: std::io::Error| Failure::internal(format!("cannot write {}: {e}", path.display()));
    fs::create_dir_all(dir).map_err(fail)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".runner-manager.")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(fail)?;
    tmp.write_all(bytes).map_err(fail)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(mode)).map_err(fail)?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    tmp.as_file().sync_all().map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail)?;
    Ok(())
}
