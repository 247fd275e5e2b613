//! The release feed: GitHub's releases API (`GET {api}/repos/{owner}/{repo}/releases/latest`,
//! GITHUB.md §6.2) on github.com, a GitHub Enterprise Server or the test kit's fake.
//!
//! Every check is a conditional request (`If-None-Match` with the last `ETag`): an unchanged
//! feed answers `304`, which GitHub does not count against the rate limit. Requests carry no
//! credential: the releases are public, and the user's GitHub token must never travel to a
//! feed that may live on another host. Blocking (ureq); the updater calls it on a blocking
//! thread.

use semver::Version;
use serde::Deserialize;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;
use thiserror::Error;

/// github.com's REST base.
pub const GITHUB_API: &str = "https://api.github.com";
/// Where runner-manager's releases are published.
pub const DEFAULT_REPO: &str = "runner-manager/runner-manager";
/// No asset of ours comes near this; a larger answer is refused rather than stored.
const MAX_ASSET_BYTES: u64 = 512 * 1024 * 1024;
const MAX_FEED_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FeedError {
    /// No answer (network down, DNS, timeout): quiet, retried at the next check.
    #[error("the release feed {url} did not answer: {detail}")]
    Offline { url: String, detail: String },
    /// An HTTP error (rate limit, 5xx, 404 of an asset).
    #[error("the release feed {url} answered {status}: {detail}")]
    Refused {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("the release feed's answer is not a release: {0}")]
    Malformed(String),
    #[error("{0}")]
    Io(String),
}

impl FeedError {
    pub fn is_offline(&self) -> bool {
        matches!(self, FeedError::Offline { .. })
            || matches!(self, FeedError::Refused { status, .. } if *status >= 500)
    }
}

/// One asset of a release.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Asset {
    pub name: String,
    pub browser_download_url: String,
    #[serde(default)]
    pub size: Option<u64>,
}

/// The parts of a release the updater reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub tag: String,
    pub version: Version,
    pub assets: Vec<Asset>,
}

#[derive(Deserialize)]
struct RawRelease {
    tag_name: String,
    #[serde(default)]
    draft: bool,
    #[serde(default)]
    prerelease: bool,
    #[serde(default)]
    assets: Vec<Asset>,
}

impl Release {
    pub fn asset(&self, name: &str) -> Option<&Asset> {
        self.assets.iter().find(|a| a.name == name)
    }

    fn parse(body: &str) -> Result<Option<Release>, FeedError> {
        let raw: RawRelease =
            serde_json::from_str(body).map_err(|e| FeedError::Malformed(e.to_string()))?;
        if raw.draft || raw.prerelease {
            return Ok(None);
        }
        let v = raw.tag_name.trim_start_matches('v');
        let version = Version::parse(v).map_err(|e| {
            FeedError::Malformed(format!("tag {:?} is not a version: {e}", raw.tag_name))
        })?;
        Ok(Some(Release {
            tag: raw.tag_name,
            version,
            assets: raw.assets,
        }))
    }
}

/// What one check learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedAnswer {
    /// `304`: nothing changed since the `ETag` given.
    Unchanged,
    /// The latest release, with the `ETag` to send next time.
    Latest {
        release: Option<Release>,
        etag: Option<String>,
    },
}

/// The feed of one repository on one API base.
#[derive(Debug, Clone)]
pub struct Feed {
    api_base: String,
    repo: String,
    /// The release metadata: small, so a short overall limit.
    agent: ureq::Agent,
    /// Asset downloads: tens of MB on a slow line.
    downloads: ureq::Agent,
}

impl Feed {
    pub fn new(api_base: &str, repo: &str) -> Feed {
        let agent = |overall: Duration| -> ureq::Agent {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(Duration::from_secs(15)))
                .timeout_global(Some(overall))
                .user_agent(format!("runner-manager/{}", crate::VERSION))
                .build()
                .into()
        };
        Feed {
            api_base: api_base.trim_end_matches('/').to_owned(),
            repo: repo.to_owned(),
            agent: agent(Duration::from_secs(60)),
            downloads: agent(Duration::from_secs(30 * 60)),
        }
    }

    /// `<api>/repos/<owner>/<repo>/releases/latest`.
    pub fn url(&self) -> String {
        format!("{}/repos/{}/releases/latest", self.api_base, self.repo)
    }

    /// Asks for the latest release; `etag` makes it conditional.
    pub fn latest(&self, etag: Option<&str>) -> Result<FeedAnswer, FeedError> {
        let url = self.url();
        let mut req = self
            .agent
            .get(&url)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28");
        if let Some(e) = etag {
            req = req.header("if-none-match", e);
        }
        let resp = req.call().map_err(|e| FeedError::Offline {
            url: url.clone(),
            detail: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        if status == 304 {
            return Ok(FeedAnswer::Unchanged);
        }
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .into_body()
            .into_with_config()
            .limit(MAX_FEED_BYTES)
            .read_to_string()
            .map_err(|e| FeedError::Offline {
                url: url.clone(),
                detail: e.to_string(),
            })?;
        match status {
            200 => Ok(FeedAnswer::Latest {
                release: Release::parse(&body)?,
                etag,
            }),
            // No release published yet.
            404 => Ok(FeedAnswer::Latest {
                release: None,
                etag: None,
            }),
            _ => Err(FeedError::Refused {
                url,
                status,
                detail: message_of(&body),
            }),
        }
    }

    /// Downloads `asset` to `dest`, calling `progress(bytes so far, total)` as it goes.
    pub fn download(
        &self,
        asset: &Asset,
        dest: &Path,
        progress: &mut dyn FnMut(u64, Option<u64>),
    ) -> Result<u64, FeedError> {
        let url = &asset.browser_download_url;
        let resp = self
            .downloads
            .get(url)
            .header("accept", "application/octet-stream")
            .call()
            .map_err(|e| FeedError::Offline {
                url: url.clone(),
                detail: e.to_string(),
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(FeedError::Refused {
                url: url.clone(),
                status,
                detail: format!("downloading {}", asset.name),
            });
        }
        let total = asset.size.filter(|s| *s > 0);
        let mut reader = resp
            .into_body()
            .into_with_config()
            .limit(MAX_ASSET_BYTES)
            .reader();
        let io = |e: std::io::Error| FeedError::Io(format!("writing {}: {e}", dest.display()));
        let mut out = std::fs::File::create(dest).map_err(io)?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut done = 0u64;
        loop {
            let n = reader.read(&mut buf).map_err(|e| FeedError::Offline {
                url: url.clone(),
                detail: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(io)?;
            done += n as u64;
            progress(done, total);
        }
        out.sync_all().map_err(io)?;
        Ok(done)
    }
}

fn message_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_and_drafts_are_skipped() {
        let r = Release::parse(r#"{"tag_name":"v1.2.3","assets":[{"name":"a","browser_download_url":"http://x/a","size":3}]}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.version, Version::new(1, 2, 3));
        assert_eq!(r.asset("a").unwrap().size, Some(3));
        assert!(Release::parse(r#"{"tag_name":"v9.0.0","prerelease":true}"#)
            .unwrap()
            .is_none());
        assert!(Release::parse(r#"{"tag_name":"nightly"}"#).is_err());
    }
}
