//! Start at login, through auto-launch (what Tauri's autostart plugin wraps; used directly
//! because the icon process is not a Tauri app, and the dashboard, in the windows' process,
//! changes the same entry). The entry always starts the icon process. On Linux auto-launch
//! writes `Exec=<path> <args>` unquoted into `$HOME/.config/autostart/<name>.desktop`, so an
//! install path with a space would not start: after enabling, the entry's `Exec=` is rewritten
//! with the quoting the Desktop Entry specification asks for.

use crate::service::CommandError;
use auto_launch::{AutoLaunch, AutoLaunchBuilder};
use std::path::{Path, PathBuf};

/// The entry's name (`runner-manager-tray.desktop` on Linux).
pub const APP_NAME: &str = "runner-manager-tray";
/// The argument the entry starts the tray with.
pub const ARG: &str = "--autostart";

/// The icon process's binary, whichever of the two binaries asks.
fn tray_exe() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if exe.file_name() == Some(crate::exe_name(crate::TRAY_BIN).as_ref()) {
        return Ok(exe);
    }
    crate::sibling(crate::TRAY_BIN)
}

fn entry(tray: &Path) -> Result<AutoLaunch, String> {
    let mut builder = AutoLaunchBuilder::new();
    builder
        .set_app_name(APP_NAME)
        .set_app_path(&tray.display().to_string())
        .set_args(&[ARG]);
    #[cfg(target_os = "macos")]
    builder.set_macos_launch_mode(auto_launch::MacOSLaunchMode::LaunchAgent);
    builder.build().map_err(|e| e.to_string())
}

pub fn is_enabled() -> bool {
    tray_exe()
        .ok()
        .and_then(|t| entry(&t).ok())
        .and_then(|e| e.is_enabled().ok())
        .unwrap_or(false)
}

pub fn set(on: bool) -> Result<(), CommandError> {
    let fail = |e: String| {
        CommandError::new(
            "autostart_failed",
            format!("The login entry could not be changed: {e}"),
            "Check that your autostart folder (~/.config/autostart) is writable.",
        )
    };
    let tray = tray_exe().map_err(|e| fail(e.to_string()))?;
    let entry = entry(&tray).map_err(fail)?;
    if on {
        entry.enable().map_err(|e| fail(e.to_string()))?;
        #[cfg(target_os = "linux")]
        quote_exec_line(&tray).map_err(|e| fail(e.to_string()))?;
    } else {
        entry.disable().map_err(|e| fail(e.to_string()))?;
    }
    tracing::info!(on, "start at login changed");
    Ok(())
}

/// Where auto-launch writes the entry: `$HOME/.config/autostart/<name>.desktop` (its own rule;
/// it does not read `XDG_CONFIG_HOME`).
#[cfg(target_os = "linux")]
pub fn desktop_file() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from)?;
    Some(
        home.join(".config")
            .join("autostart")
            .join(format!("{APP_NAME}.desktop")),
    )
}

#[cfg(target_os = "linux")]
fn quote_exec_line(exe: &Path) -> std::io::Result<()> {
    let path = desktop_file().ok_or_else(|| std::io::Error::other("no HOME"))?;
    let text = std::fs::read_to_string(&path)?;
    let exec = format!("Exec={} {ARG}", exec_arg(&exe.to_string_lossy()));
    let fixed: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("Exec=") {
                exec.clone()
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&path, fixed.join("\n") + "\n")
}

/// One argument of an `Exec=` key (Desktop Entry spec, "The Exec key"): quoted when it holds
/// a reserved character, with `"`, `` ` ``, `$` and `\` escaped inside the quotes; then the
/// string-value escaping of the file (`\` doubled) and `%` doubled (field codes).
pub fn exec_arg(arg: &str) -> String {
    const RESERVED: &[char] = &[
        ' ', '\t', '\n', '"', '\'', '\\', '>', '<', '~', '|', '&', ';', '$', '*', '?', '#', '(',
        ')', '`',
    ];
    let arg = arg.replace('%', "%%");
    if !arg.contains(RESERVED) {
        return arg;
    }
    let mut quoted = String::from("\"");
    for c in arg.chars() {
        if matches!(c, '"' | '`' | '$' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    // The file's own string escaping: each backslash is written twice.
    quoted.replace('\\', "\\\\")
}

#[cfg(test)]
mod tests {
    use super::exec_arg;

    #[test]
    fn exec_arguments_are_quoted_as_the_desktop_entry_spec_says() {
        assert_eq!(
            exec_arg("/usr/bin/runner-manager-tray"),
            "/usr/bin/runner-manager-tray"
        );
        assert_eq!(
            exec_arg("/opt/Runner Manager/tray"),
            "\"/opt/Runner Manager/tray\""
        );
        assert_eq!(exec_arg("/opt/a$b"), "\"/opt/a\\\\$b\"");
        assert_eq!(exec_arg("/opt/100%"), "/opt/100%%");
    }
}
