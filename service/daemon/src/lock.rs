//! The single-instance lock: one daemon per data directory.
//!
//! An exclusive `flock` on `<data-dir>/runner-manager.lock`, held for the daemon's lifetime
//! and released by the OS when the process dies (no stale-lock cleanup needed). The holder
//! writes its pid and start time into the file so a refused second daemon can name it.
//!
//! A refusal is retried for [`RETRY_FOR`] before it is believed: between `fork` and `exec`
//! a child process briefly shares the parent's open file description and so its lock, which
//! can make a restarting daemon see its own predecessor's child as a holder.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

use crate::exit::ExitCode;
use crate::paths::LOCK_FILE;

/// How long a refused lock is retried before it is believed.
pub const RETRY_FOR: Duration = Duration::from_millis(250);
const RETRY_EVERY: Duration = Duration::from_millis(25);

/// Who holds the lock, as written by the holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub since: DateTime<Utc>,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another runner-manager ({}) already runs with data directory {}: stop it first \
         (`systemctl stop runner-manager`, or end that process), or give this one another \
         `--data-dir`",
        describe_holder(.holder),
        .data_dir.display()
    )]
    Held {
        data_dir: PathBuf,
        holder: Option<Holder>,
    },
    #[error(
        "cannot use the lock file {}: {source}; check that the data directory exists and is \
         writable by the service",
        .path.display()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl LockError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            LockError::Held { .. } => ExitCode::Conflict,
            LockError::Io { .. } => ExitCode::Internal,
        }
    }
}

fn describe_holder(holder: &Option<Holder>) -> String {
    match holder {
        Some(h) => format!(
            "pid {}, running since {}",
            h.pid,
            h.since.to_rfc3339_opts(SecondsFormat::Secs, true)
        ),
        None => "a process that has not written its pid yet".to_owned(),
    }
}

/// The held lock. Dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    path: PathBuf,
    holder: Holder,
}

impl InstanceLock {
    /// Take the lock of `data_dir` (which must exist), retrying a refusal for [`RETRY_FOR`].
    pub fn acquire(data_dir: &Path) -> Result<InstanceLock, LockError> {
        Self::acquire_with_retry(data_dir, RETRY_FOR)
    }

    /// [`InstanceLock::acquire`] with an explicit retry window.
    pub fn acquire_with_retry(
        data_dir: &Path,
        retry_for: Duration,
    ) -> Result<InstanceLock, LockError> {
        let path = data_dir.join(LOCK_FILE);
        let io_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        let deadline = Instant::now() + retry_for;
        loop {
            if fs4::fs_std::FileExt::try_lock_exclusive(&file).map_err(io_err)? {
                break;
            }
            if Instant::now() >= deadline {
                return Err(LockError::Held {
                    data_dir: data_dir.to_path_buf(),
                    holder: read_holder(&mut file),
                });
            }
            std::thread::sleep(RETRY_EVERY);
        }
        let holder = Holder {
            pid: std::process::id(),
            since: Utc::now(),
        };
        file.set_len(0).map_err(io_err)?;
        file.rewind().map_err(io_err)?;
        write!(
            file,
            "pid={}\nsince={}\n",
            holder.pid,
            holder.since.to_rfc3339_opts(SecondsFormat::Secs, true)
        )
        .map_err(io_err)?;
        file.sync_all().map_err(io_err)?;
        Ok(InstanceLock {
            _file: file,
            path,
            holder,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// The holder's record, if it is complete (it may be mid-write).
fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    parse_holder(&text)
}

fn parse_holder(text: &str) -> Option<Holder> {
    let mut pid = None;
    let mut since = None;
    for line in text.lines() {
        match line.split_once('=') {
            Some(("pid", v)) => pid = v.trim().parse().ok(),
            Some(("since", v)) => since = DateTime::parse_from_rfc3339(v.trim()).ok(),
            _ => {}
        }
    }
    Some(Holder {
        pid: pid?,
        since: since?.with_timezone(&Utc),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_record_round_trips_and_partial_records_are_unknown() {
        let h = parse_holder("pid=42\nsince=2026-12-02T11:00:00Z\n").unwrap();
        assert_eq!(h.pid, 42);
        assert_eq!(
            h.since.to_rfc3339_opts(SecondsFormat::Secs, true),
            "2026-12-02T11:00:00Z"
        );
        assert_eq!(parse_holder("pid=42\n"), None);
        assert_eq!(parse_holder(""), None);
    }

    #[test]
    fn a_second_lock_in_one_process_is_refused_naming_the_holder() {
        // flock locks belong to the open file description, so a second open in the same
        // process conflicts just like another process would.
        let dir = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(dir.path()).unwrap();
        let started = Instant::now();
        let err = InstanceLock::acquire(dir.path()).unwrap_err();
        assert!(started.elapsed() >= RETRY_FOR, "refusal believed too early");
        assert_eq!(err.exit_code(), ExitCode::Conflict);
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("--data-dir"), "{text}");
        drop(first);
        InstanceLock::acquire(dir.path()).unwrap();
    }
}
