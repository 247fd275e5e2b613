//! The package cache proper: single-flight `ensure`, the 6-hour check schedule, and GC that
//! keeps the current and previous versions plus whatever attempts still use.

use super::extract::{extract_tar_gz, make_read_only, ExtractError};
use super::source::{DownloadSink, PackageSource, ProgressFn, SourceError};
use super::version::compare_versions;
use super::{version_is_safe, PackageId, PackageInfo};
use crate::platform::Platform;
use crate::scrub::{scrub, ScrubError};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How often to ask the source for a newer version (the agent drives the clock).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(6 * 60 * 60);

/// Prefixes of the cache's own work files; anything with them is left over from a crash.
const TMP_PREFIX: &str = ".tmp-";
const DOWNLOAD_PREFIX: &str = ".download-";

/// Everything that can go wrong while caching a package. Each names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{file}: the source published no sha256 checksum, so it cannot be verified; refusing to install it")]
    MissingChecksum { file: String },
    #[error("{file}: the published checksum {checksum:?} is not a hex sha256")]
    InvalidChecksum { file: String, checksum: String },
    #[error(
        "{file}: sha256 mismatch (expected {expected}, downloaded {actual}); nothing was installed"
    )]
    ChecksumMismatch {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("{file}: only .tar.gz runner packages are supported here")]
    UnsupportedArchive { file: String },
    #[error("version {version:?} cannot be used in a cache path")]
    UnsafeVersion { version: String },
    #[error("{file}: {source}")]
    Source {
        file: String,
        #[source]
        source: SourceError,
    },
    #[error("{file}: {source}")]
    Extract {
        file: String,
        #[source]
        source: ExtractError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("removing {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: ScrubError,
    },
    #[error("extraction task failed: {0}")]
    Task(String),
}

impl CacheError {
    fn io(path: &Path, source: io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether trying again later can help.
    pub fn is_retryable(&self) -> bool {
        match self {
            CacheError::Source { source, .. } => source.retryable,
            // A corrupted transfer can be retried; a wrong published checksum cannot be told apart.
            CacheError::ChecksumMismatch { .. } | CacheError::Io { .. } => true,
            CacheError::Remove { source, .. } => source.is_retryable(),
            _ => false,
        }
    }
}

/// A package ready to materialize from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledPackage {
    pub id: PackageId,
    pub dir: PathBuf,
    /// True when this call downloaded it; false when it was already cached.
    pub downloaded: bool,
}

/// The cache. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct PackageCache<S> {
    dir: PathBuf,
    source: S,
    locks: Mutex<HashMap<PackageId, Arc<tokio::sync::Mutex<()>>>>,
    on_progress: Option<ProgressFn>,
    last_check: Mutex<Option<SystemTime>>,
    check_interval: Duration,
}

static NONCE: AtomicU64 = AtomicU64::new(0);

fn nonce() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NONCE.fetch_add(1, Ordering::Relaxed)
    )
}

impl<S: PackageSource> PackageCache<S> {
    /// Opens (creating, mode 0755) the cache directory and removes work files a crash left.
    pub fn open(dir: impl Into<PathBuf>, source: S) -> Result<Self, CacheError> {
        let dir = dir.into();
        crate::passable_dirs::create(&dir).map_err(|e| CacheError::io(&dir, e))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(|e| CacheError::io(&dir, e))?;
        for entry in fs::read_dir(&dir).map_err(|e| CacheError::io(&dir, e))? {
            let entry = entry.map_err(|e| CacheError::io(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TMP_PREFIX) || name.starts_with(DOWNLOAD_PREFIX) {
                let path = entry.path();
                tracing::info!(path = %path.display(), "removing leftover cache work file");
                scrub(&path).map_err(|source| CacheError::Remove { path, source })?;
            }
        }
        Ok(Self {
            dir,
            source,
            locks: Mutex::new(HashMap::new()),
            on_progress: None,
            last_check: Mutex::new(None),
            check_interval: CHECK_INTERVAL,
        })
    }

    /// Reports download progress to `f` (bytes done / total).
    pub fn with_progress(mut self, f: ProgressFn) -> Self {
        self.on_progress = Some(f);
        self
    }

    /// Overrides [`CHECK_INTERVAL`].
    pub fn with_check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// True when no check has happened yet or the last one is `check_interval` old.
    pub fn should_check(&self, now: SystemTime) -> bool {
        match *self.last_check.lock().unwrap_or_else(|p| p.into_inner()) {
            None => true,
            Some(last) => now
                .duration_since(last)
                .map(|age| age >= self.check_interval)
                .unwrap_or(false),
        }
    }

    /// Asks the source for the newest package and ensures it is cached. Records `now` as the
    /// last check only when the source answered, so a failed check is retried next pass.
    pub async fn refresh(
        &self,
        platform: Platform,
        now: SystemTime,
    ) -> Result<InstalledPackage, CacheError> {
        let info = self
            .source
            .latest(platform)
            .await
            .map_err(|source| CacheError::Source {
                file: format!("latest {platform} runner"),
                source,
            })?;
        *self.last_check.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        self.ensure(&info).await
    }

    /// Makes sure `info`'s package is installed, downloading and verifying it if not.
    /// Concurrent calls for one version share a single download.
    pub async fn ensure(&self, info: &PackageInfo) -> Result<InstalledPackage, CacheError> {
        let id = info.id();
        if !version_is_safe(&id.version) {
            return Err(CacheError::UnsafeVersion {
                version: id.version,
            });
        }
        let target = self.dir.join(id.dir_name());
        if target.is_dir() {
            return Ok(InstalledPackage {
                id,
                dir: target,
                downloaded: false,
            });
        }
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(id.clone()).or_default().clone()
        };
        let _guard = lock.lock().await;
        if target.is_dir() {
            return Ok(InstalledPackage {
                id,
                dir: target,
                downloaded: false,
            });
        }
        self.install(info, &id, &target).await?;
        Ok(InstalledPackage {
            id,
            dir: target,
            downloaded: true,
        })
    }

    async fn install(
        &self,
        info: &PackageInfo,
        id: &PackageId,
        target: &Path,
    ) -> Result<(), CacheError> {
        let file = info.filename.clone();
        let expected = match &info.sha256 {
            None => return Err(CacheError::MissingChecksum { file }),
            Some(s) => s.trim().to_ascii_lowercase(),
        };
        if expected.len() != 64 || !expected.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(CacheError::InvalidChecksum {
                file,
                checksum: expected,
            });
        }
        if !(file.ends_with(".tar.gz") || file.ends_with(".tgz")) {
            return Err(CacheError::UnsupportedArchive { file });
        }

        let download = self
            .dir
            .join(format!("{DOWNLOAD_PREFIX}{}-{}", id.dir_name(), nonce()));
        let result = self
            .download_and_install(info, id, target, &download, &expected)
            .await;
        if download.exists() {
            if let Err(e) = fs::remove_file(&download) {
                tracing::warn!(path = %download.display(), error = %e, "could not remove download file");
            }
        }
        result
    }

    async fn download_and_install(
        &self,
        info: &PackageInfo,
        id: &PackageId,
        target: &Path,
        download: &Path,
        expected: &str,
    ) -> Result<(), CacheError> {
        let file = info.filename.clone();
        let handle = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(download)
            .await
            .map_err(|e| CacheError::io(download, e))?;
        let mut sink = DownloadSink::new(handle, id.clone(), self.on_progress.clone());
        tracing::info!(package = %id, url = %info.download_url, "downloading runner package");
        self.source
            .download(&info.download_url, &mut sink)
            .await
            .map_err(|source| CacheError::Source {
                file: file.clone(),
                source,
            })?;
        let (actual, bytes) = sink
            .finish()
            .await
            .map_err(|e| CacheError::io(download, e))?;
        if actual != expected {
            tracing::warn!(package = %id, file = %file, "runner package checksum mismatch; refused");
            return Err(CacheError::ChecksumMismatch {
                file,
                expected: expected.to_string(),
                actual,
            });
        }
        tracing::info!(package = %id, bytes, "runner package verified");

        let tmp = self
            .dir
            .join(format!("{TMP_PREFIX}{}-{}", id.dir_name(), nonce()));
        let (download, target_owned) = (download.to_path_buf(), target.to_path_buf());
        let tmp_clone = tmp.clone();
        let outcome = tokio::task::spawn_blocking(move || -> Result<(), CacheError> {
            fs::create_dir(&tmp_clone).map_err(|e| CacheError::io(&tmp_clone, e))?;
            fs::set_permissions(&tmp_clone, fs::Permissions::from_mode(0o755))
                .map_err(|e| CacheError::io(&tmp_clone, e))?;
            extract_tar_gz(&download, &tmp_clone).map_err(|source| CacheError::Extract {
                file: file.clone(),
                source,
            })?;
            make_read_only(&tmp_clone).map_err(|e| CacheError::io(&tmp_clone, e))?;
            if let Err(e) = fs::rename(&tmp_clone, &target_owned) {
                // Another installer (another process) got there first: theirs is as good.
                if target_owned.is_dir() {
                    scrub(&tmp_clone).map_err(|source| CacheError::Remove {
                        path: tmp_clone.clone(),
                        source,
                    })?;
                    return Ok(());
                }
                return Err(CacheError::io(&target_owned, e));
            }
            fs::set_permissions(&target_owned, fs::Permissions::from_mode(0o555))
                .map_err(|e| CacheError::io(&target_owned, e))?;
            Ok(())
        })
        .await
        .map_err(|e| CacheError::Task(e.to_string()));
        let outcome = outcome.and_then(|r| r);
        if outcome.is_err() && tmp.exists() {
            if let Err(e) = scrub(&tmp) {
                tracing::warn!(path = %tmp.display(), error = %e, "could not remove extraction dir");
            }
        }
        if outcome.is_ok() {
            tracing::info!(package = %id, dir = %target.display(), "runner package installed");
        }
        outcome
    }

    /// Installed packages, any platform, in no particular order.
    pub fn installed(&self) -> Result<Vec<InstalledPackage>, CacheError> {
        installed_in(&self.dir)
    }

    /// The newest installed package for a platform.
    pub fn current(&self, platform: Platform) -> Result<Option<InstalledPackage>, CacheError> {
        current_in(&self.dir, platform)
    }

    /// Removes every installed package except, per platform, the newest two (current and
    /// previous) and any in `in_use`. Returns what was removed.
    pub fn gc(&self, in_use: &HashSet<PackageId>) -> Result<Vec<PackageId>, CacheError> {
        let mut by_platform: HashMap<Platform, Vec<InstalledPackage>> = HashMap::new();
        for p in self.installed()? {
            by_platform.entry(p.id.platform).or_default().push(p);
        }
        let mut removed = Vec::new();
        for (_, mut packages) in by_platform {
            packages.sort_by(|a, b| compare_versions(&b.id.version, &a.id.version));
            for p in packages.into_iter().skip(2) {
                if in_use.contains(&p.id) {
                    continue;
                }
                // Never remove a version while an ensure for it holds its lock.
                let lock = self
                    .locks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&p.id)
                    .cloned();
                let _guard = match &lock {
                    Some(l) => match l.try_lock() {
                        Ok(g) => Some(g),
                        Err(_) => continue,
                    },
                    None => None,
                };
                scrub(&p.dir).map_err(|source| CacheError::Remove {
                    path: p.dir.clone(),
                    source,
                })?;
                tracing::info!(package = %p.id, "removed old runner package");
                removed.push(p.id);
            }
        }
        Ok(removed)
    }
}

/// The packages installed in the cache directory `dir`, any platform, in no particular order.
/// Reads only: the host doctor looks without opening (and so tidying) the cache.
pub fn installed_in(dir: &Path) -> Result<Vec<InstalledPackage>, CacheError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| CacheError::io(dir, e))? {
        let entry = entry.map_err(|e| CacheError::io(dir, e))?;
        let Some(id) = PackageId::from_dir_name(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(InstalledPackage {
                id,
                dir: entry.path(),
                downloaded: false,
            });
        }
    }
    Ok(out)
}

/// The newest package installed in `dir` for a platform.
pub fn current_in(dir: &Path, platform: Platform) -> Result<Option<InstalledPackage>, CacheError> {
    let mut all: Vec<_> = installed_in(dir)?
        .into_iter()
        .filter(|p| p.id.platform == platform)
        .collect();
    all.sort_by(|a, b| compare_versions(&a.id.version, &b.id.version));
    Ok(all.pop())
}
