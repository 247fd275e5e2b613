//! Runner package metadata (GITHUB.md §3.7): which archive to fetch for this
//! host, and its checksum.

use crate::client::GitHubClient;
use crate::error::GitHubError;
use crate::runners::scope_path;
use rm_core::Target;
use secrecy::SecretString;

/// The runner archive for one OS/architecture.
#[derive(Clone, Debug)]
pub struct RunnerPackage {
    /// `linux`, `osx` or `win` (GitHub's spelling).
    pub os: String,
    /// `x64`, `arm64` or `arm`.
    pub arch: String,
    /// Where to download it.
    pub url: String,
    /// Archive file name, e.g. `actions-runner-linux-x64-2.336.0.tar.gz`.
    pub filename: String,
    /// Lower-case hex SHA-256 of the archive.
    pub sha256: String,
    /// Short-lived token some downloads need (a secret).
    pub temp_download_token: Option<SecretString>,
}

#[derive(serde::Deserialize)]
struct Download {
    os: String,
    architecture: String,
    download_url: String,
    filename: String,
    #[serde(default)]
    sha256_checksum: Option<String>,
    #[serde(default)]
    temp_download_token: Option<String>,
}

/// GitHub's spelling of this host's OS and architecture, if the runner supports it.
pub fn host_platform() -> Option<(&'static str, &'static str)> {
    platform(std::env::consts::OS, std::env::consts::ARCH)
}

/// GitHub's spelling of `std::env::consts::{OS, ARCH}` values.
pub fn platform(os: &str, arch: &str) -> Option<(&'static str, &'static str)> {
    let os = match os {
        "linux" => "linux",
        "macos" => "osx",
        "windows" => "win",
        _ => return None,
    };
    let arch = match arch {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        "arm" => "arm",
        _ => return None,
    };
    Some((os, arch))
}

fn pick(downloads: Vec<Download>, os: &str, arch: &str) -> Result<RunnerPackage, GitHubError> {
    let d = downloads
        .into_iter()
        .find(|d| d.os.eq_ignore_ascii_case(os) && d.architecture.eq_ignore_ascii_case(arch))
        .ok_or_else(|| GitHubError::NotFound {
            what: format!(
                "a runner package for {os}-{arch} (GitHub publishes none for this platform)"
            ),
        })?;
    let sha256 = d
        .sha256_checksum
        .filter(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| GitHubError::Invalid {
            status: 200,
            message: format!(
                "the runner package {} has no valid SHA-256 checksum; refusing to use it",
                d.filename
            ),
        })?;
    Ok(RunnerPackage {
        os: d.os,
        arch: d.architecture,
        url: d.download_url,
        filename: d.filename,
        sha256: sha256.to_ascii_lowercase(),
        temp_download_token: d.temp_download_token.map(SecretString::from),
    })
}

impl GitHubClient {
    /// `GET {scope}/actions/runners/downloads`, the entry for `os`/`arch`
    /// (GitHub's spelling, see [`platform`]).
    pub async fn runner_package_for(
        &self,
        target: &Target,
        os: &str,
        arch: &str,
    ) -> Result<RunnerPackage, GitHubError> {
        let url = self.api_url(&format!("{}/actions/runners/downloads", scope_path(target)));
        let (downloads, _) = self
            .get_json::<Vec<Download>>(
                &url,
                "runners.downloads",
                &format!("runner downloads of `{target}`"),
            )
            .await?;
        pick(downloads, os, arch)
    }

    /// The runner package for this host.
    pub async fn runner_package(&self, target: &Target) -> Result<RunnerPackage, GitHubError> {
        let (os, arch) = host_platform().ok_or_else(|| {
            GitHubError::Config(format!(
                "GitHub publishes no runner for {}-{}",
                std::env::consts::OS,
                std::env::consts::ARCH
            ))
        })?;
        self.runner_package_for(target, os, arch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(os: &str, arch: &str, sha: Option<&str>) -> Download {
        Download {
            os: os.into(),
            architecture: arch.into(),
            download_url: format!("https://x/{os}-{arch}"),
            filename: format!("actions-runner-{os}-{arch}-2.0.0.tar.gz"),
            sha256_checksum: sha.map(str::to_string),
            temp_download_token: None,
        }
    }

    #[test]
    fn maps_std_names() {
        assert_eq!(platform("linux", "x86_64"), Some(("linux", "x64")));
        assert_eq!(platform("macos", "aarch64"), Some(("osx", "arm64")));
        assert_eq!(platform("windows", "x86_64"), Some(("win", "x64")));
        assert_eq!(platform("freebsd", "x86_64"), None);
    }

    #[test]
    fn picks_matching_entry_and_requires_checksum() {
        let sha = "A".repeat(64);
        let all = || {
            vec![
                d("osx", "arm64", Some(&sha)),
                d("linux", "x64", Some(&sha)),
                d("linux", "arm", None),
            ]
        };
        let p = pick(all(), "linux", "x64").unwrap();
        assert_eq!(p.url, "https://x/linux-x64");
        assert_eq!(p.sha256, "a".repeat(64));
        assert!(matches!(
            pick(all(), "win", "x64"),
            Err(GitHubError::NotFound { .. })
        ));
        assert!(matches!(
            pick(all(), "linux", "arm"),
            Err(GitHubError::Invalid { .. })
        ));
    }
}
