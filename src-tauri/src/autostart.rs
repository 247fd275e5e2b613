//! Start at login, through the autostart plugin (auto-launch). On Linux auto-launch writes
//! `Exec=<path> <args>` unquoted into `$HOME/.config/autostart/<name>.desktop`, so an install path
//! with a space would not start: after enabling, the entry's `Exec=` is rewritten with the
//! quoting the Desktop Entry specification asks for.

use crate::service::CommandError;
use tauri::AppHandle;
use tauri_plugin_autostart::ManagerExt;

/// The entry's name (`runner-manager-tray.desktop` on Linux).
pub const APP_NAME: &str = "runner-manager-tray";
/// The argument the entry starts the tray with.
pub const ARG: &str = "--autostart";

pub fn is_enabled(app: &AppHandle) -> bool {
    app.autolaunch().is_enabled().unwrap_or(false)
}

pub fn set(app: &AppHandle, on: bool) -> Result<(), CommandError> {
    let fail = |e: String| {
        CommandError::new(
            "autostart_failed",
            format!("The login entry could not be changed: {e}"),
            "Check that your autostart folder (~/.config/autostart) is writable.",
        )
    };
    if on {
        app.autolaunch().enable().map_err(|e| fail(e.to_string()))?;
        #[cfg(target_os = "linux")]
        quote_exec_line().map_err(|e| fail(e.to_string()))?;
    } else {
        app.autolaunch()
            .disable()
            .map_err(|e| fail(e.to_string()))?;
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
fn quote_exec_line() -> std::io::Result<()> {
    let path = desktop_file().ok_or_else(|| std::io::Error::other("no HOME"))?;
    let exe = std::env::current_exe()?;
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
