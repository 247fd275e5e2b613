//! The windows' command line: `--show dashboard|sign-in` (default: the dashboard),
//! `--anchor SECTION`, `--socket PATH`, `--notify-finished-jobs`; and from the icon process
//! that starts it, `--from-tray` (tell it what it must know on standard output) and
//! `--no-tray REASON` (there is no tray icon: the dashboard says why).

use rm_tray::args::Flags;
use rm_tray::link::Window;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub socket: Option<PathBuf>,
    pub show: Window,
    pub anchor: Option<String>,
    pub from_tray: bool,
    pub no_tray: Option<String>,
    pub notify_finished_jobs: bool,
}

pub const USAGE: &str = "usage: runner-manager-window [--show dashboard|sign-in] \
                         [--anchor SECTION] [--socket PATH] [--notify-finished-jobs]";

/// What the command line asks for; `Err` carries the message (with the usage).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Args>, String> {
    let mut out = Args {
        socket: None,
        show: Window::Dashboard,
        anchor: None,
        from_tray: false,
        no_tray: None,
        notify_finished_jobs: false,
    };
    let mut flags = Flags::new(args, USAGE);
    let text = |v: OsString| v.to_string_lossy().into_owned();
    while let Some(arg) = flags.next_arg() {
        match arg.to_str() {
            Some("--socket") => out.socket = Some(flags.value("--socket", "a path")?.into()),
            Some("--show") => out.show = flags.window()?,
            Some("--anchor") => out.anchor = Some(text(flags.value("--anchor", "a section")?)),
            Some("--no-tray") => out.no_tray = Some(text(flags.value("--no-tray", "a reason")?)),
            Some("--from-tray") => out.from_tray = true,
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
    use rm_tray::link::Open;

    fn p(args: &[&str]) -> Result<Option<Args>, String> {
        parse(
            std::iter::once("window")
                .chain(args.iter().copied())
                .map(OsString::from),
        )
    }

    #[test]
    fn flags_parse_and_mistakes_name_the_usage() {
        let a = p(&[]).unwrap().unwrap();
        assert_eq!(a.show, Window::Dashboard);
        assert!(!a.from_tray);
        assert_eq!(p(&["--help"]).unwrap(), None);
        let e = p(&["--show", "settings"]).unwrap_err();
        assert!(
            e.contains("`dashboard` or `sign-in`") && e.contains("usage:"),
            "{e}"
        );
        assert!(p(&["--socket"]).unwrap_err().contains("needs a path"));
        assert!(p(&["--bogus"]).unwrap_err().contains("unknown argument"));
    }

    #[test]
    fn what_the_tray_asks_for_is_what_the_window_reads() {
        let open = Open {
            window: Window::Dashboard,
            anchor: Some("failure-a1".to_owned()),
            socket: Some(PathBuf::from("/run/x.sock")),
            notify_finished_jobs: true,
            no_tray: Some("no tray host".to_owned()),
        };
        let argv = std::iter::once(OsString::from("window")).chain(open.args());
        let a = parse(argv).unwrap().unwrap();
        assert_eq!(
            a,
            Args {
                socket: open.socket.clone(),
                show: Window::Dashboard,
                anchor: open.anchor.clone(),
                from_tray: true,
                no_tray: open.no_tray.clone(),
                notify_finished_jobs: true,
            }
        );
    }
}
