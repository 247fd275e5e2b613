//! How the icon process and a windows process it started talk. The icon process starts
//! `runner-manager-window` with what to show (argv) and reads its standard output; the windows
//! process writes one line per thing the icon process must know, because the icon process
//! owns the notifications and the menu: the user looked at the failures (acknowledge), changed
//! whether finished jobs notify, or changed start at login.

use std::ffi::OsString;

/// A line a windows process writes for the icon process that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToTray {
    /// The failures shown until now were seen.
    Acknowledge,
    /// Notify (or not) when a job finishes.
    NotifyFinishedJobs(bool),
    /// The login entry changed: the menu's check follows it.
    AutostartChanged,
}

impl ToTray {
    pub fn line(self) -> &'static str {
        match self {
            ToTray::Acknowledge => "acknowledge",
            ToTray::NotifyFinishedJobs(true) => "notify-finished-jobs on",
            ToTray::NotifyFinishedJobs(false) => "notify-finished-jobs off",
            ToTray::AutostartChanged => "autostart-changed",
        }
    }

    /// `None` for anything else (a line of another version, or noise): ignored.
    pub fn parse(line: &str) -> Option<ToTray> {
        Some(match line.trim() {
            "acknowledge" => ToTray::Acknowledge,
            "notify-finished-jobs on" => ToTray::NotifyFinishedJobs(true),
            "notify-finished-jobs off" => ToTray::NotifyFinishedJobs(false),
            "autostart-changed" => ToTray::AutostartChanged,
            _ => return None,
        })
    }
}

/// A window to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Dashboard,
    SignIn,
}

impl Window {
    pub fn label(self) -> &'static str {
        match self {
            Window::Dashboard => "dashboard",
            Window::SignIn => "sign-in",
        }
    }

    pub fn parse(s: &str) -> Option<Window> {
        match s {
            "dashboard" => Some(Window::Dashboard),
            "sign-in" => Some(Window::SignIn),
            _ => None,
        }
    }
}

/// What the icon process asks a windows process to show, as its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    pub window: Window,
    /// A dashboard section or failure to scroll to.
    pub anchor: Option<String>,
    pub socket: Option<std::path::PathBuf>,
    pub notify_finished_jobs: bool,
    /// Why there is no tray icon (the dashboard says it, and closing it quits the tray).
    pub no_tray: Option<String>,
}

impl Open {
    pub fn args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec!["--from-tray".into(), "--show".into()];
        out.push(self.window.label().into());
        if let Some(a) = &self.anchor {
            out.extend(["--anchor".into(), a.into()]);
        }
        if let Some(s) = &self.socket {
            out.extend(["--socket".into(), s.into()]);
        }
        if self.notify_finished_jobs {
            out.push("--notify-finished-jobs".into());
        }
        if let Some(why) = &self.no_tray {
            out.extend(["--no-tray".into(), why.into()]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_reads_back_and_noise_is_ignored() {
        for m in [
            ToTray::Acknowledge,
            ToTray::NotifyFinishedJobs(true),
            ToTray::NotifyFinishedJobs(false),
            ToTray::AutostartChanged,
        ] {
            assert_eq!(ToTray::parse(m.line()), Some(m));
        }
        assert_eq!(ToTray::parse("acknowledge\n"), Some(ToTray::Acknowledge));
        assert_eq!(
            ToTray::parse("2026-12-03T10:00:00Z INFO window opened"),
            None
        );
        assert_eq!(ToTray::parse(""), None);
    }
}
