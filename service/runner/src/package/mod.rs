//! The runner package cache and the port it downloads through.
//!
//! Packages are downloaded once per version, verified against their sha256 before a single
//! byte is extracted, and installed into an immutable `<cache>/<version>-<os>-<arch>`
//! directory by an atomic rename, so a half-installed package is never visible.

mod cache;
pub(crate) mod extract;
mod source;
mod version;

pub use cache::{
    current_in, installed_in, CacheError, InstalledPackage, PackageCache, CHECK_INTERVAL,
};
pub use extract::ExtractError;
pub use source::{DownloadProgress, DownloadSink, PackageSource, ProgressFn, SourceError};
pub use version::compare_versions;

use crate::platform::{Arch, Os, Platform};
use std::fmt;

/// Identifies one installed package: its directory name is `<version>-<os>-<arch>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PackageId {
    pub version: String,
    pub platform: Platform,
}

impl PackageId {
    pub fn new(version: impl Into<String>, platform: Platform) -> Self {
        Self {
            version: version.into(),
            platform,
        }
    }

    /// The cache directory name, `<version>-<os>-<arch>`.
    pub fn dir_name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.version,
            self.platform.os.as_str(),
            self.platform.arch.as_str()
        )
    }

    /// Parses a cache directory name back; `None` for anything else (temp dirs, strays).
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let mut parts = name.rsplitn(3, '-');
        let arch = Arch::parse(parts.next()?)?;
        let os = Os::parse(parts.next()?)?;
        let version = parts.next()?;
        if !version_is_safe(version)
            || Self::new(version, Platform::new(os, arch)).dir_name() != name
        {
            return None;
        }
        Some(Self::new(version, Platform::new(os, arch)))
    }
}

impl fmt::Display for PackageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dir_name())
    }
}

/// A version string is used in a path, so only a conservative alphabet is accepted.
pub(crate) fn version_is_safe(version: &str) -> bool {
    !version.is_empty()
        && version.len() <= 64
        && !version.starts_with('.')
        && !version.contains("..")
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
}

/// What the source says about one downloadable package (GITHUB.md §3.7 / §6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageInfo {
    pub version: String,
    pub platform: Platform,
    pub download_url: String,
    /// The asset's file name, e.g. `actions-runner-linux-x64-2.336.0.tar.gz`.
    pub filename: String,
    /// Lower- or upper-case hex sha256. `None` is refused: the cache never installs
    /// an unverified package.
    pub sha256: Option<String>,
}

impl PackageInfo {
    pub fn id(&self) -> PackageId {
        PackageId::new(self.version.clone(), self.platform)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_and_reject_strays() {
        let id = PackageId::new("2.336.0", Platform::new(Os::Linux, Arch::Arm64));
        assert_eq!(id.dir_name(), "2.336.0-linux-arm64");
        assert_eq!(PackageId::from_dir_name("2.336.0-linux-arm64"), Some(id));
        assert_eq!(PackageId::from_dir_name(".tmp-2.336.0-linux-x64"), None);
        assert_eq!(PackageId::from_dir_name("2.336.0-linux-x86_64"), None);
        assert_eq!(PackageId::from_dir_name("linux-x64"), None);
        assert!(!version_is_safe("../etc"));
        assert!(!version_is_safe("a/b"));
        assert!(version_is_safe("2.336.0-rc.1"));
    }
}
