//! The tray's command line: `--socket PATH` (the service's socket; default: the boot
//! service's, else the login service's), `--show dashboard|sign-in`, `--autostart` (started by
//! the login entry), `--notify-finished-jobs`.

use std::ffi::OsString;
use std::path::PathBuf;

use rm_tray::args::Flags;
use rm_tray::link::Window;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub socket: Option<PathBuf>,
    /// A window to open at start.
    pub show: Option<Window>,
    pub autostart: bool,
    pub notify_finished_jobs: bool,
}

pub const USAGE: &str = "usage: runner-manager-tray [--socket PATH] [--show dashboard|sign-in] \
                         [--notify-finished-jobs] [--autostart]";

/// What the command line asks for; `Err` carries the message (with the usage).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Args>, String> {
    let mut out = Args::default();
    let mut flags = Flags::new(args, USAGE);
    while let Some(arg) = flags.next_arg() {
        match arg.to_str() {
            Some("--socket") => out.socket = Some(flags.value("--socket", "a path")?.into()),
            Some("--show") => out.show = Some(flags.window()?),
            Some("--autostart") => out.autostart = true,
            Some("--notify-finished-jobs") => out.notify_finished_jobs = true,
            // Added by WebKitWebDriver when it launches the app for automation (tests).
            Some("--automation") => {}
            Some("-h" | "--help") => return Ok(None),
            _ => return Err(flags.unknown(&arg)),
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
        assert_eq!(a.show, Some(Window::SignIn));
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
