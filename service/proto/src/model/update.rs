//! The service's updater as the tray presents it: folded from the update events of the watch
//! stream and from `GET /v1/update` (which the tray reads once per connection: the status
//! carries no update part), shown as one menu item and a few words for the dashboard, and
//! notified once per thing that happened.
//!
//! - An update becoming available notifies once per version (saying whether the service
//!   applies it by itself); `Updated to X` once per version after `update_finished` (or when a
//!   reconnect finds the service updated under this tray); a failed update once per (version,
//!   reason), with the service's fix. Nothing twice on a reconnect (the service announces a
//!   waiting release again after a restart).
//! - What the service reported before this tray started (the first update status it reads) is
//!   shown, not notified: a tray started at login does not repeat old news.

use super::{Notice, NoticeAction, NoticeKind};
use crate::update::{InstallKind, UpdateMode, UpdateState, UpdateStatus};
use crate::watch::Event;
use serde::Serialize;

/// The updater as this client knows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Updates {
    /// The latest known state (`None` before the first answer or event).
    pub(crate) status: Option<UpdateStatus>,
    /// Whether the service said it applies the available release by itself.
    pub(crate) automatic: Option<bool>,
    /// Whether `status` came from the service's answer (else it was pieced together from
    /// events: mode and install kind are not known).
    fetched: bool,
    /// The service versions seen through this tray's life (oldest first), to tell an update
    /// that happened under this tray from one that happened before it started.
    seen_versions: Vec<String>,
    notified_available: Option<String>,
    notified_finished: Option<String>,
    notified_failed: Option<(Option<String>, String)>,
}

/// What the menu item does when clicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateAction {
    /// Ask the service to apply the available release (`POST /v1/update {"apply": true}`).
    Apply,
    /// Open the dashboard (where the update is described in full).
    OpenDashboard,
}

/// The update, rendered for the menu and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpdateView {
    /// `available`, `downloading`, `applying`, `updated`, `failed`, … (the service's word).
    pub state: UpdateState,
    /// The version the service runs.
    pub current_version: String,
    /// The release this is about (available, downloading, applying, failed).
    pub new_version: Option<String>,
    /// `auto`, `notify`, `off`.
    pub mode: Option<UpdateMode>,
    pub install_kind: Option<InstallKind>,
    /// The menu item (`Update to 0.2.0…`, `Downloading 0.2.0 · 40 %`, `Updating to 0.2.0 —
    /// running jobs finish first`, `Update to 0.2.0 failed — try again…`); `None`: no item.
    pub menu: Option<String>,
    /// What clicking the item does; `None`: not clickable.
    pub action: Option<UpdateAction>,
    /// The state in a sentence, for the dashboard.
    pub words: String,
    /// What to do, when the user has something to do (a failure's fix, an install the
    /// updater cannot change).
    pub fix: Option<String>,
    /// Download progress in percent, when the size is known.
    pub percent: Option<u8>,
}

impl Updates {
    /// `GET /v1/update`'s answer (read once per connection).
    pub(crate) fn status(&mut self, status: UpdateStatus, out: &mut Vec<Notice>) {
        let first = self.status.is_none() && self.seen_versions.is_empty();
        let updated_under_us = status.state == UpdateState::Updated
            && status
                .previous_version
                .as_ref()
                .is_some_and(|p| self.seen_versions.contains(p))
            && !self.seen_versions.contains(&status.current_version);
        self.see_version(&status.current_version);
        self.fetched = true;
        self.automatic =
            Some(status.mode == UpdateMode::Auto && status.install_kind != InstallKind::Unmanaged);
        let version = status.available_version.clone();
        match status.state {
            UpdateState::Available => {
                if let Some(v) = &version {
                    if first {
                        self.notified_available = Some(v.clone());
                    } else {
                        let automatic = self.automatic.unwrap_or(false);
                        self.available(v, automatic, Some(status.install_kind), out);
                    }
                }
            }
            UpdateState::Updated if updated_under_us => {
                let from = status.previous_version.clone().unwrap_or_default();
                self.finished(&from, &status.current_version, out);
            }
            UpdateState::Failed => {
                let reason = status.message.clone().unwrap_or_default();
                if first {
                    self.notified_failed = Some((version.clone(), reason));
                } else {
                    let fix = status.fix.clone().unwrap_or_default();
                    self.failed(version.as_deref(), &reason, &fix, out);
                }
            }
            _ => {}
        }
        self.status = Some(status);
    }

    fn see_version(&mut self, v: &str) {
        if !v.is_empty() && !self.seen_versions.iter().any(|s| s == v) {
            self.seen_versions.push(v.to_owned());
        }
    }

    fn current(&mut self) -> &mut UpdateStatus {
        self.status.get_or_insert_with(UpdateStatus::default)
    }

    /// One update event of the watch stream.
    pub(crate) fn event(&mut self, event: Event, out: &mut Vec<Notice>) {
        match event {
            Event::UpdateAvailable {
                current_version,
                new_version,
                automatic,
                ..
            } => {
                self.see_version(&current_version);
                self.automatic = Some(automatic);
                let s = self.current();
                s.current_version = current_version;
                s.state = UpdateState::Available;
                s.available_version = Some(new_version.clone());
                s.downloaded = None;
                s.total = None;
                s.message = None;
                s.fix = None;
                let kind = self
                    .status
                    .as_ref()
                    .filter(|_| self.fetched)
                    .map(|s| s.install_kind);
                self.available(&new_version, automatic, kind, out);
            }
            Event::UpdateProgress {
                new_version,
                downloaded,
                total,
                ..
            } => {
                let s = self.current();
                if s.state == UpdateState::Applying
                    && s.available_version.as_deref() == Some(&new_version)
                {
                    // A late progress line never takes a verified update back to downloading.
                    return;
                }
                s.state = UpdateState::Downloading;
                s.available_version = Some(new_version);
                s.downloaded = Some(downloaded);
                s.total = total;
                s.message = None;
                s.fix = None;
            }
            Event::UpdateApplying { new_version, .. } | Event::UpdateReady { new_version, .. } => {
                let s = self.current();
                s.state = UpdateState::Applying;
                s.available_version = Some(new_version);
                s.message = Some("no new runners start; running jobs finish first".to_owned());
                s.fix = None;
            }
            Event::UpdateFinished {
                previous_version,
                new_version,
                ..
            } => {
                self.see_version(&previous_version);
                self.see_version(&new_version);
                let s = self.current();
                s.state = UpdateState::Updated;
                s.current_version = new_version.clone();
                s.previous_version = Some(previous_version.clone());
                s.available_version = None;
                s.downloaded = None;
                s.total = None;
                s.message = None;
                s.fix = None;
                self.finished(&previous_version, &new_version, out);
            }
            Event::UpdateFailed {
                new_version,
                reason,
                fix,
                ..
            } => {
                let s = self.current();
                s.state = UpdateState::Failed;
                if new_version.is_some() {
                    s.available_version = new_version.clone();
                }
                s.downloaded = None;
                s.total = None;
                s.message = Some(reason.clone());
                s.fix = Some(fix.clone());
                self.failed(new_version.as_deref(), &reason, &fix, out);
            }
            _ => {}
        }
    }

    fn available(
        &mut self,
        version: &str,
        automatic: bool,
        kind: Option<InstallKind>,
        out: &mut Vec<Notice>,
    ) {
        if self.notified_available.as_deref() == Some(version) {
            return;
        }
        self.notified_available = Some(version.to_owned());
        let body = if automatic {
            "The service installs it by itself: no new runners start, running jobs finish \
             first, then it restarts (a few seconds)."
                .to_owned()
        } else if kind == Some(InstallKind::Unmanaged) {
            "This copy was not installed from a package, so the service does not update it: \
             install the new release's package (see README, Install)."
                .to_owned()
        } else {
            format!(
                "Choose \"Update to {version}…\" in the tray menu (or run `runner-manager \
                 update`) to install it; running jobs finish first."
            )
        };
        out.push(Notice {
            kind: NoticeKind::UpdateAvailable,
            title: format!("runner-manager {version} is available"),
            body,
            action: NoticeAction::OpenUpdate,
        });
    }

    fn finished(&mut self, from: &str, to: &str, out: &mut Vec<Notice>) {
        if self.notified_finished.as_deref() == Some(to) {
            return;
        }
        self.notified_finished = Some(to.to_owned());
        out.push(Notice {
            kind: NoticeKind::UpdateFinished,
            title: format!("Updated to {to}"),
            body: if from.is_empty() {
                format!("The runner-manager service runs {to} now.")
            } else {
                format!("The runner-manager service runs {to} now (it ran {from}).")
            },
            action: NoticeAction::OpenUpdate,
        });
    }

    fn failed(&mut self, version: Option<&str>, reason: &str, fix: &str, out: &mut Vec<Notice>) {
        let key = (version.map(ToOwned::to_owned), reason.to_owned());
        if self.notified_failed.as_ref() == Some(&key) {
            return;
        }
        self.notified_failed = Some(key);
        let reason = reason.trim().trim_end_matches('.');
        out.push(Notice {
            kind: NoticeKind::UpdateFailed,
            title: match version {
                Some(v) => format!("Update to {v} failed"),
                None => "Update failed".to_owned(),
            },
            body: if fix.trim().is_empty() {
                format!("{reason}.")
            } else {
                format!("{reason}. {}", sentence(fix))
            },
            action: NoticeAction::OpenUpdate,
        });
    }

    /// What to show, if the service said anything about updates.
    pub(crate) fn view(&self) -> Option<UpdateView> {
        let s = self.status.as_ref()?;
        let new = s.available_version.clone();
        let v = new.as_deref().unwrap_or("a newer release");
        // Pieced together from events only (an older service): assume the updater may act;
        // the service answers an apply it cannot do with its reason.
        let managed = !self.fetched || s.install_kind != InstallKind::Unmanaged;
        let percent = match (s.downloaded, s.total) {
            (Some(d), Some(t)) if t > 0 => Some(u8::try_from((d.min(t) * 100) / t).unwrap_or(100)),
            _ => None,
        };
        let (menu, action, words, fix) = match s.state {
            UpdateState::Available if managed => (
                Some(format!("Update to {v}…")),
                Some(UpdateAction::Apply),
                if self.automatic == Some(true) {
                    format!("runner-manager {v} is available; the service installs it by itself")
                } else {
                    format!("runner-manager {v} is available; it is installed when you choose")
                },
                None,
            ),
            UpdateState::Available => (
                Some(format!(
                    "runner-manager {v} is available — install its package"
                )),
                Some(UpdateAction::OpenDashboard),
                format!("runner-manager {v} is available"),
                Some(s.fix.clone().unwrap_or_else(|| {
                    "Install the new release's package (see README, Install).".to_owned()
                })),
            ),
            UpdateState::Downloading => (
                Some(match percent {
                    Some(p) => format!("Downloading {v} · {p} %"),
                    None => format!("Downloading {v}…"),
                }),
                None,
                format!("Downloading and verifying runner-manager {v}"),
                None,
            ),
            UpdateState::Applying => (
                Some(format!("Updating to {v} — running jobs finish first")),
                None,
                format!(
                    "Updating to {v}: no new runners start; once running jobs finish, the \
                     service swaps its files and restarts"
                ),
                None,
            ),
            UpdateState::Failed => (
                Some(match &new {
                    Some(n) if managed => format!("Update to {n} failed — try again…"),
                    Some(n) => format!("Update to {n} failed"),
                    None => "Update failed".to_owned(),
                }),
                Some(if managed && new.is_some() {
                    UpdateAction::Apply
                } else {
                    UpdateAction::OpenDashboard
                }),
                format!(
                    "The update {}failed: {}",
                    new.as_deref()
                        .map(|n| format!("to {n} "))
                        .unwrap_or_default(),
                    s.message.as_deref().unwrap_or("no reason given")
                ),
                Some(sentence(
                    s.fix.as_deref().unwrap_or("see the service's log"),
                )),
            ),
            UpdateState::Updated => (
                None,
                None,
                match &s.previous_version {
                    Some(p) => format!("Updated to {} (from {p})", s.current_version),
                    None => format!("Updated to {}", s.current_version),
                },
                None,
            ),
            UpdateState::Checking => (None, None, "Checking for updates…".to_owned(), None),
            UpdateState::UpToDate => (None, None, "Up to date".to_owned(), None),
            UpdateState::Idle if s.mode == UpdateMode::Off => {
                (None, None, "Update checks are off".to_owned(), None)
            }
            UpdateState::Idle => (None, None, "Not checked yet".to_owned(), None),
            UpdateState::Unknown => (None, None, "Unknown (a newer service?)".to_owned(), None),
        };
        Some(UpdateView {
            state: s.state,
            current_version: s.current_version.clone(),
            new_version: new,
            mode: self.fetched.then_some(s.mode),
            install_kind: self.fetched.then_some(s.install_kind),
            menu,
            action,
            words,
            fix,
            percent,
        })
    }

    /// The service's version, when known.
    pub(crate) fn service_version(&self) -> Option<&str> {
        self.status
            .as_ref()
            .map(|s| s.current_version.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// The service's fix as a sentence: `nothing was changed; …` → `Nothing was changed; ….`
/// (its update fixes are whole clauses, not the runner failures' `nothing: …` form).
fn sentence(text: &str) -> String {
    let text = text.trim().trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => format!("{}.", c.to_uppercase().chain(chars).collect::<String>()),
        None => String::new(),
    }
}
