//! The tray's command line: `--socket PATH` (the service's socket; default: the boot
//! service's, else the login service's), `--show dashboard|sign-in`, `--autostart` (started by
//! the login entry), `--notify-finished-jobs`.

use std::ffi::OsString;
use std::path::PathBuf;

/// A window to open at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Dashboard,
    SignIn,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub socket: Option<PathBuf>,
    pub show: Option<Show>,
    pub autostart: bool,
    pub notify_finished_jobs: bool,
}

pub const USAGE: &str = "usage: runner-manager-tray [--socket PATH] [--show dashboard|sign-in] \
                         [--notify-finished-jobs] [--autostart]";

/// What the command line asks for; `Err` carries the message (with the usage).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Args>, String> {
    let mut out = Args::default();
    let mut args = args.into_iter().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--socket") => {
                let path = args
                    .next()
                    .ok_or_else(|| format!("--socket needs a path\n{USAGE}"))?;
                out.socket = Some(PathBuf::from(path));
            }
            Some("--show") => {
                out.show = Some(match args.next().as_ref().and_then(|a| a.to_str()) {
                    Some("dashboard") => Show::Dashboard,
                    Some("sign-in") => Show::SignIn,
                    other => {
                        return Err(format!(
                            "--show takes `dashboard` or `sign-in`, not {other:?}\n{USAGE}"
                        ))
                    }
                });
            }
            Some("--autostart") => out.autostart = true,
            Some("--notify-finished-jobs") => out.notify_finished_jobs = true,
            // Added by WebKitWebDriver when it launches the app for automation (tests).
            Some("--automation") => {}
            Some("-h" | "--help") => return Ok(None),
            _ => {
                return Err(format!(
                    "unknown argument {:?}\n{USAGE}",
                    arg.to_string_lossy()
                ))
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Args>, String> {
        parse(
            std::iter::once("tray")
                .chain(args.iter().copied())
                .map(OsString::from),
        )
    }

    #[test]
    fn flags_parse_and_mistakes_name_the_usage() {
        let a = p(&["--socket", "/s", "--show", "sign-in"])
            .unwrap()
            .unwrap();
        assert_eq!(a.socket, Some(PathBuf::from("/s")));
        assert_eq!(a.show, Some(Show::SignIn));
        assert_eq!(p(&["--help"]).unwrap(), None);
        let e = p(&["--show", "settings"]).unwrap_err();
        assert!(
            e.contains("`dashboard` or `sign-in`") && e.contains("usage:"),
            "{e}"
        );
        assert!(p(&["--socket"]).unwrap_err().contains("needs a path"));
        assert!(p(&["--bogus"]).unwrap_err().contains("unknown argument"));
    }
}
