//! Upgrade detection: notice a newer, runnable binary replacing the installed one.
//!
//! The installed path is polled (metadata every few seconds: cheap, portable, no inotify).
//! When the file changed, it is *run* with `--version` under a timeout — file size or mtime
//! say nothing about whether a package manager finished writing it — and its version is
//! compared with ours:
//!
//! - newer and runnable → [`Check::Ready`]: the daemon drains and exits for the new one;
//! - same version → ignored (a same-version reinstall is not an upgrade);
//! - older → ignored, logged (a downgrade is the operator's call: restart the service);
//! - not runnable / unparsable / too slow → ignored and retried at the next poll (the file is
//!   probably still being written).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use semver::Version;

/// How often the daemon polls the installed binary.
pub const POLL_EVERY: Duration = Duration::from_secs(5);
/// How long `<new binary> --version` may take.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What one poll found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// The file did not change since the last poll.
    Unchanged,
    /// A newer, runnable build is installed: drain and hand over.
    Ready { version: Version },
    /// Rewritten with our own version: not an upgrade.
    SameVersion,
    /// Replaced by an older version: ignored.
    Older { version: Version },
    /// Changed but not (yet) usable; retried at the next poll.
    NotRunnable { reason: String },
}

/// The file's identity as far as polling can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        modified: m.modified().ok(),
        #[cfg(unix)]
        inode: std::os::unix::fs::MetadataExt::ino(&m),
    })
}

/// Polls one installed binary path against the running version.
#[derive(Debug)]
pub struct UpgradeWatcher {
    path: PathBuf,
    current: Version,
    seen: Option<Stamp>,
    timeout: Duration,
}

impl UpgradeWatcher {
    /// Watch `path`, taking its present state as the running build.
    pub fn new(path: impl Into<PathBuf>, current: Version) -> Self {
        let path = path.into();
        let seen = stamp(&path);
        Self {
            path,
            current,
            seen,
            timeout: VERSION_TIMEOUT,
        }
    }

    /// Watch the running executable against this build's version.
    pub fn for_current_exe() -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the running executable: {e}"))?;
        let current = Version::parse(crate::VERSION)
            .map_err(|e| format!("this build's version {} is not semver: {e}", crate::VERSION))?;
        Ok(Self::new(exe, current))
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file differs from the build last judged: one `stat`, no process, so an
    /// async caller may ask it inline every poll and hand only a change to [`Self::poll`]
    /// (which runs the new binary and may block) on a blocking thread.
    pub fn looks_changed(&self) -> bool {
        stamp(&self.path) != self.seen
    }

    /// Look at the file once. A change is remembered only once it was judged (runnable), so a
    /// half-written file is looked at again next time.
    pub fn poll(&mut self) -> Check {
        let now = stamp(&self.path);
        if now == self.seen {
            return Check::Unchanged;
        }
        if now.is_none() {
            // Removed (mid-replace, or uninstalled): nothing to run; wait for it to reappear.
            return Check::NotRunnable {
                reason: format!("{} is missing", self.path.display()),
            };
        }
        let check = match installed_version(&self.path, self.timeout) {
            Err(reason) => return Check::NotRunnable { reason },
            Ok(v) if v > self.current => Check::Ready { version: v },
            Ok(v) if v == self.current => Check::SameVersion,
            Ok(v) => Check::Older { version: v },
        };
        // Judge the file by its state before running it: if it changed meanwhile, the next
        // poll sees a new stamp and runs it again.
        self.seen = now;
        match &check {
            Check::Ready { version } => {
                tracing::info!(path = %self.path.display(), %version, "newer runner-manager installed")
            }
            Check::Older { version } => {
                tracing::warn!(path = %self.path.display(), %version, current = %self.current, "an older runner-manager was installed; ignoring it: restart the service to run it")
            }
            Check::SameVersion => {
                tracing::debug!(path = %self.path.display(), "binary rewritten with the same version; not an upgrade")
            }
            _ => {}
        }
        check
    }
}

/// Run `path --version` and parse `runner-manager X.Y.Z`.
pub fn installed_version(path: &Path, timeout: Duration) -> Result<Version, String> {
    let mut child = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let stdout = child.stdout.take();
    // Read on a thread so a chatty or stuck child cannot block the timeout.
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout {
            let _ = s.take(4096).read_to_end(&mut out);
        }
        out
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} --version did not answer within {timeout:?}",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {}: {e}", path.display())),
        }
    };
    if !status.success() {
        return Err(format!("{} --version failed ({status})", path.display()));
    }
    let out = reader
        .join()
        .map_err(|_| format!("reading the output of {} --version failed", path.display()))?;
    parse_version_line(&String::from_utf8_lossy(&out)).ok_or_else(|| {
        format!(
            "{} --version did not print `runner-manager <version>`",
            path.display()
        )
    })
}

fn parse_version_line(text: &str) -> Option<Version> {
    let line = text.lines().next()?.trim();
    let v = line.strip_prefix(crate::BINARY_NAME)?.trim();
    Version::parse(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_tells_a_replaced_file_from_an_untouched_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runner-manager");
        std::fs::write(&path, "old build").unwrap();
        let mut w = UpgradeWatcher::new(&path, Version::new(0, 1, 0));
        assert!(!w.looks_changed());
        assert_eq!(w.poll(), Check::Unchanged);

        std::fs::write(&path, "a longer, newer build").unwrap();
        assert!(w.looks_changed());
        // Not runnable: judged again at the next poll, so it still looks changed.
        assert!(matches!(w.poll(), Check::NotRunnable { .. }));
        assert!(w.looks_changed());

        std::fs::remove_file(&path).unwrap();
        assert!(w.looks_changed(), "a removed binary is a change to look at");
    }

    #[test]
    fn version_lines_parse_strictly() {
        assert_eq!(
            parse_version_line("runner-manager 0.2.0\n"),
            Some(Version::new(0, 2, 0))
        );
        assert_eq!(
            parse_version_line("runner-manager 1.0.0-rc.1"),
            Some(Version::parse("1.0.0-rc.1").unwrap())
        );
        assert_eq!(parse_version_line("something-else 0.2.0"), None);
        assert_eq!(parse_version_line("runner-manager"), None);
        assert_eq!(parse_version_line(""), None);
        assert!(Version::parse("0.10.0").unwrap() > Version::parse("0.9.9").unwrap());
    }
}
