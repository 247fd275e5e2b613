//! Where things live: the default data directory per start mode and the files inside it.
//! One data directory = one service instance (one lock, one journal, one credential).

use std::path::{Path, PathBuf};

/// The journal file inside the data directory.
pub const JOURNAL_FILE: &str = "journal.sqlite3";
/// The single-instance lock file inside the data directory.
pub const LOCK_FILE: &str = "runner-manager.lock";
/// The machine credential store file (boot mode on Linux) inside the data directory.
pub const CREDENTIAL_FILE: &str = "credential.json";
/// What `service install` recorded (binary path, unit path, mode) inside the data directory.
pub const SERVICE_RECORD_FILE: &str = "service-install.json";
/// Runner runtime directories live under this directory of the data directory by default.
pub const RUNNERS_DIR: &str = "runners";

/// How the service is started, which decides its privileges and its credential store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum StartMode {
    /// A system service started at boot, as root/SYSTEM, with a machine credential store.
    Boot,
    /// A per-user service started at login, with the user's OS keyring.
    Login,
}

impl StartMode {
    /// Boot for root, login for everyone else: what a bare `daemon run` most likely is.
    pub fn for_current_user() -> StartMode {
        if is_privileged() {
            StartMode::Boot
        } else {
            StartMode::Login
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StartMode::Boot => "boot",
            StartMode::Login => "login",
        }
    }
}

impl std::fmt::Display for StartMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether this process runs as root (Unix). On Windows the service account decides; the
/// CLI treats everyone as unprivileged there until the service runs as SYSTEM.
pub fn is_privileged() -> bool {
    #[cfg(unix)]
    {
        nix::unistd::geteuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// The default data directory: a machine directory for root, the user's data directory
/// otherwise (`$XDG_DATA_HOME/runner-manager`, falling back to `~/.local/share`).
pub fn default_data_dir() -> PathBuf {
    default_data_dir_for(
        is_privileged(),
        std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

fn default_data_dir_for(root: bool, xdg: Option<PathBuf>, home: Option<PathBuf>) -> PathBuf {
    if cfg!(windows) {
        let base = std::env::var_os("ProgramData")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData"));
        return base.join("runner-manager");
    }
    if root {
        return if cfg!(target_os = "macos") {
            PathBuf::from("/Library/Application Support/runner-manager")
        } else {
            PathBuf::from("/var/lib/runner-manager")
        };
    }
    let base = xdg
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".local").join("share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("runner-manager")
}

pub fn journal_path(data_dir: &Path) -> PathBuf {
    data_dir.join(JOURNAL_FILE)
}

pub fn default_runner_root(data_dir: &Path) -> PathBuf {
    data_dir.join(RUNNERS_DIR)
}

/// What the service creates is for its owner and the operators' group only (the journal, the
/// credential, the lock, anything a later change adds), whoever starts it and with whatever
/// umask: the system unit says `UMask=0027`, and this makes a service run by hand or by a unit
/// without it the same. What runners must reach (their runtime directories, the package cache,
/// the caches) is given its modes explicitly where it is made.
#[cfg(unix)]
pub fn restrict_umask() {
    use nix::sys::stat::{umask, Mode};
    let old = umask(Mode::from_bits_truncate(0o027));
    umask(old | Mode::from_bits_truncate(0o027));
}

#[cfg(not(unix))]
pub fn restrict_umask() {}

/// Creates the data directory if it is missing: owner only, except that others may pass
/// through it (not list it) to a runner root inside it, which per-job users must reach; so may
/// they through any ancestor created with it (a fresh `~/.local/share`). An existing one is
/// left as it is.
pub fn create_data_dir(data_dir: &Path) -> std::io::Result<()> {
    rm_runner::passable_dirs::create(data_dir)
}

/// The runner host settings of a data directory: runners under `<data>/runners` from the
/// package cache `<data>/cache`, run per attempt under their own uid when the service is root,
/// else as the service user. (`daemon run` also makes sure the runner account exists.)
pub fn runner_host_config(data_dir: &Path) -> rm_runner::RunnerHostConfig {
    let mut config =
        rm_runner::RunnerHostConfig::new(data_dir.join("cache"), default_runner_root(data_dir));
    if !is_privileged() {
        config.run_as = rm_runner::RunAs::ServiceUser;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn defaults_follow_the_start_mode() {
        assert_eq!(
            default_data_dir_for(true, None, Some("/root".into())),
            PathBuf::from("/var/lib/runner-manager")
        );
        assert_eq!(
            default_data_dir_for(false, Some("/x/data".into()), Some("/home/u".into())),
            PathBuf::from("/x/data/runner-manager")
        );
        // A relative XDG_DATA_HOME is invalid per the spec and ignored.
        assert_eq!(
            default_data_dir_for(false, Some("rel".into()), Some("/home/u".into())),
            PathBuf::from("/home/u/.local/share/runner-manager")
        );
    }
}
