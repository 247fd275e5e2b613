//! What `service install` recorded in the data directory, and whether it went stale: the
//! service manager keeps starting the binary path it was given, so moving or replacing the
//! binary elsewhere silently leaves the service on the old one (or on nothing).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::exit::Failure;
use crate::paths::{StartMode, SERVICE_RECORD_FILE};

/// The recorded install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallRecord {
    /// The binary the service manager runs.
    pub binary: PathBuf,
    /// The unit/plist file written.
    pub definition: PathBuf,
    /// boot or login.
    pub mode: String,
    pub installed_at: DateTime<Utc>,
}

impl InstallRecord {
    pub fn new(binary: PathBuf, definition: PathBuf, mode: StartMode) -> Self {
        Self {
            binary,
            definition,
            mode: mode.as_str().to_owned(),
            installed_at: Utc::now(),
        }
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(SERVICE_RECORD_FILE)
    }

    pub fn load(data_dir: &Path) -> Result<Option<InstallRecord>, Failure> {
        let path = Self::path(data_dir);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Failure::internal(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Failure::internal(format!(
                "install record {} is corrupt ({e}): run `runner-manager service install` again",
                path.display()
            ))
        })
    }

    pub fn save(&self, data_dir: &Path) -> Result<(), Failure> {
        let path = Self::path(data_dir);
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Failure::internal(format!("cannot encode the install record: {e}")))?;
        super::write_atomically(&path, text.as_bytes(), 0o644)
    }

    pub fn remove(data_dir: &Path) -> Result<(), Failure> {
        let path = Self::path(data_dir);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Failure::internal(format!(
                "cannot remove {}: {e}",
                path.display()
            ))),
        }
    }
}

/// Whether the recorded binary is the one running now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStatus {
    /// The recorded binary exists and is the current executable.
    Current,
    /// The recorded binary no longer exists: the service cannot start.
    Missing { recorded: PathBuf },
    /// The recorded binary exists but is another file than the one running this command.
    Differs { recorded: PathBuf, current: PathBuf },
}

impl PathStatus {
    pub fn check(recorded: &Path, current_exe: &Path) -> PathStatus {
        let Ok(rec) = fs::canonicalize(recorded) else {
            return PathStatus::Missing {
                recorded: recorded.to_path_buf(),
            };
        };
        let cur = fs::canonicalize(current_exe).unwrap_or_else(|_| current_exe.to_path_buf());
        if rec == cur {
            PathStatus::Current
        } else {
            PathStatus::Differs {
                recorded: recorded.to_path_buf(),
                current: cur,
            }
        }
    }

    /// A line for `service status`, naming the fix when stale.
    pub fn describe(&self) -> String {
        match self {
            PathStatus::Current => "binary path: current".to_owned(),
            PathStatus::Missing { recorded } => format!(
                "binary path: STALE: the service runs {} which no longer exists; run \
                 `runner-manager service install` again from the binary you want it to run",
                recorded.display()
            ),
            PathStatus::Differs { recorded, current } => format!(
                "binary path: STALE: the service runs {} but this command is {}; run \
                 `{} service install` to switch the service to it",
                recorded.display(),
                current.display(),
                current.display()
            ),
        }
    }

    pub fn is_stale(&self) -> bool {
        !matches!(self, PathStatus::Current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_paths_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        fs::write(&a, "x").unwrap();
        fs::write(&b, "y").unwrap();
        assert_eq!(PathStatus::check(&a, &a), PathStatus::Current);
        // The same file through another spelling is still current.
        assert_eq!(
            PathStatus::check(&dir.path().join(".").join("a"), &a),
            PathStatus::Current
        );
        let differs = PathStatus::check(&a, &b);
        assert!(matches!(differs, PathStatus::Differs { .. }), "{differs:?}");
        assert!(differs.describe().contains("service install"));
        fs::remove_file(&a).unwrap();
        let missing = PathStatus::check(&a, &b);
        assert!(matches!(missing, PathStatus::Missing { .. }));
        assert!(missing.is_stale());
        assert!(missing.describe().contains("no longer exists"));
    }

    #[test]
    fn record_round_trips_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(InstallRecord::load(dir.path()).unwrap(), None);
        let r = InstallRecord::new(
            "/usr/bin/runner-manager".into(),
            "/etc/x.service".into(),
            StartMode::Boot,
        );
        r.save(dir.path()).unwrap();
        assert_eq!(InstallRecord::load(dir.path()).unwrap(), Some(r));
        InstallRecord::remove(dir.path()).unwrap();
        assert_eq!(InstallRecord::load(dir.path()).unwrap(), None);
    }
}
