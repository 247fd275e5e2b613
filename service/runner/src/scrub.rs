//! Removing a runtime directory completely, without ever following a link out of it, and the
//! retry schedule for trees that cannot be removed yet.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a scrub did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ScrubError {
    /// Something still holds the tree (a busy mount, a permission that a still-running
    /// process changed, a file being written): try again later.
    #[error("{path} cannot be removed yet ({source}); it will be retried")]
    Retryable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Retrying will not help (read-only filesystem, invalid path).
    #[error(
        "{path} cannot be removed ({source}); check the filesystem and the runner root setting"
    )]
    Failed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Removal reported success but the path is still there (a concurrent writer).
    #[error("{path} still exists after removal; it will be retried")]
    StillPresent { path: PathBuf },
}

impl ScrubError {
    pub fn is_retryable(&self) -> bool {
        !matches!(self, ScrubError::Failed { .. })
    }
}

/// What a successful scrub did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubReport {
    /// False when there was nothing to remove.
    pub existed: bool,
    pub elapsed: Duration,
}

fn classify(path: &Path, source: io::Error) -> ScrubError {
    use nix::errno::Errno;
    let retryable = match source.raw_os_error().map(Errno::from_raw) {
        Some(Errno::EBUSY | Errno::EACCES | Errno::EPERM | Errno::ENOTEMPTY | Errno::EINTR)
        | Some(Errno::EAGAIN | Errno::ETXTBSY | Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM) => {
            true
        }
        Some(_) => false,
        None => !matches!(source.kind(), io::ErrorKind::InvalidInput),
    };
    let path = path.to_path_buf();
    if retryable {
        ScrubError::Retryable { path, source }
    } else {
        ScrubError::Failed { path, source }
    }
}

/// Removes `path` and everything below it. A link (including `path` itself) is removed as a
/// link, never followed. Verifies that nothing is left.
pub fn scrub(path: &Path) -> Result<ScrubReport, ScrubError> {
    let started = Instant::now();
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(ScrubReport {
                existed: false,
                elapsed: started.elapsed(),
            })
        }
        Err(e) => return Err(classify(path, e)),
    };
    if meta.is_dir() {
        if !nix::unistd::geteuid().is_root() {
            // Without root, read-only directories (the cache's, or ones a job made) would stop
            // the removal. Root needs no write bits, and skipping this avoids chmod on a path
            // a still-running process could swap for a link.
            restore_owner_access(path).map_err(|e| classify(path, e))?;
        }
        // std's remove_dir_all works on directory handles (openat/unlinkat) and never follows
        // symlinks, so a link inside the tree is unlinked, not traversed.
        fs::remove_dir_all(path).map_err(|e| classify(path, e))?;
    } else {
        fs::remove_file(path).map_err(|e| classify(path, e))?;
    }
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(ScrubReport {
            existed: true,
            elapsed: started.elapsed(),
        }),
        Err(e) => Err(classify(path, e)),
        Ok(_) => Err(ScrubError::StillPresent {
            path: path.to_path_buf(),
        }),
    }
}

/// Gives the owner rwx on every directory below `root` (links are not followed).
fn restore_owner_access(root: &Path) -> io::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let meta = fs::symlink_metadata(&dir)?;
        if !meta.is_dir() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o700 != 0o700 {
            fs::set_permissions(&dir, fs::Permissions::from_mode((mode & 0o7777) | 0o700))?;
        }
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Exponential backoff for a runtime that could not be scrubbed yet. The agent owns the
/// clock: it asks for the next delay and whether this was the first failure (the only one
/// worth reporting to the user).
#[derive(Debug, Clone)]
pub struct ScrubRetry {
    base: Duration,
    max: Duration,
    failures: u32,
}

/// The decision after one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryDecision {
    /// True exactly once per runtime: report it then, stay quiet afterwards.
    pub first_failure: bool,
    /// Wait this long before the next try.
    pub delay: Duration,
}

impl Default for ScrubRetry {
    /// 2 s doubling up to 5 minutes.
    fn default() -> Self {
        Self::new(Duration::from_secs(2), Duration::from_secs(300))
    }
}

impl ScrubRetry {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            failures: 0,
        }
    }

    /// Records a failure and returns when to try again.
    pub fn record_failure(&mut self) -> RetryDecision {
        let first_failure = self.failures == 0;
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.failures = self.failures.saturating_add(1);
        let delay = self
            .base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max);
        RetryDecision {
            first_failure,
            delay,
        }
    }

    /// Failures recorded so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Runs one scrub of `path`, updating the schedule: `Ok` when the tree is gone,
    /// `Err((error, decision))` when it should be retried after `decision.delay`.
    pub fn attempt(&mut self, path: &Path) -> Result<ScrubReport, (ScrubError, RetryDecision)> {
        scrub(path).map_err(|e| {
            let d = self.record_failure();
            (e, d)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_reports_once() {
        let mut r = ScrubRetry::new(Duration::from_secs(2), Duration::from_secs(30));
        let d: Vec<_> = (0..6).map(|_| r.record_failure()).collect();
        assert!(d[0].first_failure);
        assert!(d[1..].iter().all(|x| !x.first_failure));
        let secs: Vec<u64> = d.iter().map(|x| x.delay.as_secs()).collect();
        assert_eq!(secs, vec![2, 4, 8, 16, 30, 30]);
        for _ in 0..100 {
            r.record_failure();
        }
        assert_eq!(r.record_failure().delay, Duration::from_secs(30));
    }

    #[test]
    fn missing_path_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let report = scrub(&dir.path().join("nope")).unwrap();
        assert!(!report.existed);
    }
}
