//! The portable archive's first-run step. A tray unpacked from the archive (under `~/.local`)
//! sits beside the service binary and the archive's marker; while no service answers, its menu
//! offers `Install the service for this user`, which runs that binary's
//! `service install --start-at login` (the command README gives for the archive). The tray
//! reconnects by itself once the service answers.

use rm_tray::service::CommandError;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The service binary of the portable install this tray belongs to, if it is one.
pub fn portable_service() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    portable_service_beside(&exe)
}

/// `exe` is `PREFIX/bin/runner-manager-tray`: a portable install has `PREFIX/bin/runner-manager`
/// and the archive's marker `PREFIX/share/runner-manager/portable.json`.
fn portable_service_beside(exe: &Path) -> Option<PathBuf> {
    let bin_dir = exe.parent()?;
    let prefix = bin_dir.parent()?;
    let marker = prefix.join("share/runner-manager/portable.json");
    let service = bin_dir.join("runner-manager");
    (marker.is_file() && service.is_file()).then_some(service)
}

/// Runs `SERVICE service install --start-at login`; its first output line on success.
pub async fn install(service: &Path) -> Result<String, CommandError> {
    tracing::info!(service = %service.display(), "installing the service for this user");
    let out = tokio::process::Command::new(service)
        .args(["service", "install", "--start-at", "login"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            CommandError::new(
                "failed",
                format!("{} could not be started: {e}", service.display()),
                "Reinstall the portable archive (README, Install).",
            )
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if out.status.success() {
        tracing::info!(output = %stdout, "service installed for this user");
        return Ok(stdout);
    }
    tracing::warn!(status = %out.status, error = %stderr, "service install failed");
    Err(CommandError::new(
        "failed",
        format!(
            "The service was not installed: {}",
            first_line(&stderr, &stdout)
        ),
        format!(
            "Run `{} service install --start-at login` in a terminal to see the whole message.",
            service.display()
        ),
    ))
}

fn first_line<'a>(a: &'a str, b: &'a str) -> &'a str {
    let s = if a.is_empty() { b } else { a };
    s.lines().next().unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::portable_service_beside;
    use std::fs;

    #[test]
    fn only_a_tray_beside_the_service_and_the_archive_marker_is_portable() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path();
        let tray = prefix.join("bin/runner-manager-tray");
        fs::create_dir_all(prefix.join("bin")).unwrap();
        fs::write(&tray, "").unwrap();
        assert_eq!(
            portable_service_beside(&tray),
            None,
            "no service, no marker"
        );
        fs::write(prefix.join("bin/runner-manager"), "").unwrap();
        assert_eq!(portable_service_beside(&tray), None, "no marker");
        fs::create_dir_all(prefix.join("share/runner-manager")).unwrap();
        fs::write(prefix.join("share/runner-manager/portable.json"), "{}").unwrap();
        assert_eq!(
            portable_service_beside(&tray),
            Some(prefix.join("bin/runner-manager"))
        );
    }
}
