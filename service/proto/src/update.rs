//! `GET/POST /v1/update`: the service's own updater (it checks the release feed, verifies,
//! drains, swaps and restarts itself; the tray only presents it).
//!
//! The watch stream carries the matching events ([`crate::Event::UpdateAvailable`],
//! `UpdateProgress`, `UpdateApplying`, `UpdateFinished`, `UpdateFailed`); a client that
//! connects after a restart reads the outcome (`updated`, `failed`) from [`UpdateStatus`].

use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// What the updater does when a newer release appears (`config.json` `update`, or
/// `daemon run --update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateMode {
    /// Check, then download, verify and apply it (running jobs finish first).
    #[default]
    Auto,
    /// Check and tell; apply only when asked (`runner-manager update`, the tray).
    Notify,
    /// Never check.
    Off,
    #[serde(other)]
    Unknown,
}

impl UpdateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateMode::Auto => "auto",
            UpdateMode::Notify => "notify",
            UpdateMode::Off => "off",
            UpdateMode::Unknown => "unknown",
        }
    }
}

/// How this copy of runner-manager was installed, which decides how it is updated. Detected,
/// never guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallKind {
    /// dpkg's database owns the binary: the new signed `.deb` is installed with dpkg.
    Deb,
    /// The portable archive's marker file sits beside the binary: its files are swapped.
    Portable,
    /// Anything else (`cargo install`, a copied binary): updates are only announced.
    #[default]
    Unmanaged,
    #[serde(other)]
    Unknown,
}

impl InstallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallKind::Deb => "deb",
            InstallKind::Portable => "portable",
            InstallKind::Unmanaged => "unmanaged",
            InstallKind::Unknown => "unknown",
        }
    }
}

/// Where the updater is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateState {
    /// Not checked yet (or `off`).
    #[default]
    Idle,
    /// Asking the release feed.
    Checking,
    /// The feed's latest release is not newer than this one.
    UpToDate,
    /// A newer release exists (`available_version`); `notify` mode or an unmanaged install
    /// waits here.
    Available,
    /// Downloading and verifying (`downloaded`/`total` bytes).
    Downloading,
    /// Verified; no new runners start, running jobs finish, then the files are swapped and the
    /// service restarts.
    Applying,
    /// This service was updated (`previous_version` → `current_version`).
    Updated,
    /// The last attempt failed (`message`, `fix`); nothing was changed, or the previous
    /// version was restored.
    Failed,
    #[serde(other)]
    Unknown,
}

/// `GET /v1/update`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UpdateStatus {
    /// This service's version.
    pub current_version: String,
    pub mode: UpdateMode,
    pub install_kind: InstallKind,
    pub state: UpdateState,
    /// The newer release seen on the feed.
    #[serde(default)]
    pub available_version: Option<String>,
    /// After an update: the version that ran before.
    #[serde(default)]
    pub previous_version: Option<String>,
    /// Download progress, in bytes.
    #[serde(default)]
    pub downloaded: Option<u64>,
    #[serde(default)]
    pub total: Option<u64>,
    /// When the feed was last asked (answered or not).
    #[serde(default)]
    pub last_check: Option<UnixMillis>,
    #[serde(default)]
    pub next_check: Option<UnixMillis>,
    /// What happened, in words (a failure's reason, why an update waits).
    #[serde(default)]
    pub message: Option<String>,
    /// What to do about it.
    #[serde(default)]
    pub fix: Option<String>,
    /// The release feed asked: `<api base>/repos/<owner>/<repo>/releases/latest`.
    #[serde(default)]
    pub feed: String,
}

/// `POST /v1/update`: check now; with `apply`, also apply a newer release (whatever the mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    #[serde(default)]
    pub apply: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_from_a_newer_service_are_tolerated() {
        let s: UpdateStatus = serde_json::from_str(
            r#"{"current_version":"1.0.0","mode":"sometimes","install_kind":"snap","state":"teleporting","extra":1}"#,
        )
        .unwrap();
        assert_eq!(s.mode, UpdateMode::Unknown);
        assert_eq!(s.install_kind, InstallKind::Unknown);
        assert_eq!(s.state, UpdateState::Unknown);
        let r: Result<UpdateRequest, _> = serde_json::from_str(r#"{"aply":true}"#);
        assert!(r.is_err(), "a typo in a request is refused");
    }
}
