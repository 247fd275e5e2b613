//! Where runner packages come from: GitHub's `actions/runners/downloads` metadata (through the
//! signed-in client) and a plain, unauthenticated GET of the archive. The access token never
//! goes to the download host: the archive is fetched with a separate client that carries none.

use http_body_util::BodyExt;
use rm_core::Target;
use rm_github::GitHubClient;
use rm_runner::{DownloadSink, PackageInfo, PackageSource, Platform, SourceError};

/// A [`PackageSource`] over GitHub's runner downloads for one target (any target the
/// credential administers will do: the list is the same).
pub struct GitHubPackageSource {
    client: GitHubClient,
    target: Target,
    download: octocrab::Octocrab,
}

impl std::fmt::Debug for GitHubPackageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHubPackageSource")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl GitHubPackageSource {
    pub fn new(client: GitHubClient, target: Target) -> Result<Self, SourceError> {
        let download = rm_github::anonymous_http_client()
            .map_err(|e| SourceError::permanent(format!("download client: {e}")))?;
        Ok(GitHubPackageSource {
            client,
            target,
            download,
        })
    }
}

/// How long the download may go without progress (no answer, or no data) before it is given
/// up and retried: a stalled connection must not hold a launch forever.
const DOWNLOAD_STALL: std::time::Duration = std::time::Duration::from_secs(60);

fn stalled(what: &str) -> SourceError {
    SourceError::retryable(format!(
        "downloading the runner package: no progress for {} s while {what}; it is tried again",
        DOWNLOAD_STALL.as_secs()
    ))
}

/// `actions-runner-linux-x64-2.336.0.tar.gz` → `2.336.0`.
pub fn version_from_filename(filename: &str, platform: Platform) -> Option<String> {
    let prefix = format!(
        "actions-runner-{}-{}-",
        platform.os.as_str(),
        platform.arch.as_str()
    );
    let version = filename
        .strip_prefix(&prefix)?
        .strip_suffix(".tar.gz")
        .or_else(|| filename.strip_prefix(&prefix)?.strip_suffix(".zip"))?;
    (!version.is_empty()).then(|| version.to_string())
}

impl PackageSource for GitHubPackageSource {
    async fn latest(&self, platform: Platform) -> Result<PackageInfo, SourceError> {
        let pkg = self
            .client
            .runner_package_for(&self.target, platform.os.as_str(), platform.arch.as_str())
            .await
            .map_err(|e| SourceError {
                retryable: e.is_retryable(),
                message: e.to_string(),
            })?;
        let version = version_from_filename(&pkg.filename, platform).ok_or_else(|| {
            SourceError::permanent(format!(
                "the runner package name {} does not carry a version",
                pkg.filename
            ))
        })?;
        Ok(PackageInfo {
            version,
            platform,
            download_url: pkg.url,
            filename: pkg.filename,
            sha256: Some(pkg.sha256),
        })
    }

    async fn download(&self, url: &str, sink: &mut DownloadSink) -> Result<(), SourceError> {
        let mut headers = http::HeaderMap::new();
        if let Ok(agent) = http::HeaderValue::from_str(&rm_github::default_user_agent()) {
            headers.insert(http::header::USER_AGENT, agent);
        }
        let response = tokio::time::timeout(
            DOWNLOAD_STALL,
            self.download._get_with_headers(url, Some(headers)),
        )
        .await
        .map_err(|_| stalled("waiting for the answer"))?
        .map_err(|e| SourceError::retryable(format!("downloading the runner package: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let message = format!("downloading the runner package: HTTP {status}");
            return Err(if status.is_server_error() {
                SourceError::retryable(message)
            } else {
                SourceError::permanent(message)
            });
        }
        if let Some(len) = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
        {
            sink.set_total(len);
        }
        let mut body = response.into_body();
        while let Some(frame) = tokio::time::timeout(DOWNLOAD_STALL, body.frame())
            .await
            .map_err(|_| stalled("reading the archive"))?
        {
            let frame = frame
                .map_err(|e| SourceError::retryable(format!("reading the runner package: {e}")))?;
            if let Ok(data) = frame.into_data() {
                sink.write(&data).await.map_err(|e| {
                    SourceError::retryable(format!("writing the runner package: {e}"))
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rm_runner::{Arch, Os};

    #[test]
    fn versions_come_from_the_file_name() {
        let p = Platform::new(Os::Linux, Arch::X64);
        assert_eq!(
            version_from_filename("actions-runner-linux-x64-2.336.0.tar.gz", p).as_deref(),
            Some("2.336.0")
        );
        assert_eq!(
            version_from_filename("actions-runner-osx-x64-2.3.tar.gz", p),
            None
        );
        assert_eq!(
            version_from_filename("actions-runner-linux-x64-.tar.gz", p),
            None
        );
    }
}
