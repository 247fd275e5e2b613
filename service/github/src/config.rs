//! Tunables of the GitHub client, with production defaults.

use crate::backoff::Backoff;
use crate::endpoints::Endpoints;
use std::time::Duration;

/// The GitHub App's OAuth client id, built in; override it with
/// [`ClientConfig::client_id`] (e.g. for GHES or a private App).
pub const DEFAULT_CLIENT_ID: &str = "Iv23liRunnerManager0";

/// `User-Agent` sent on every request.
pub fn default_user_agent() -> String {
    format!("runner-manager/{}", env!("CARGO_PKG_VERSION"))
}

/// Everything the client can be told.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Where GitHub is.
    pub endpoints: Endpoints,
    /// OAuth client id of the GitHub App (device flow and refresh).
    pub client_id: String,
    /// `User-Agent` header.
    pub user_agent: String,
    /// Whole-request deadline (connect, headers and body): a stalled server
    /// becomes a transient error.
    pub request_timeout: Duration,
    /// The host-wide outage gate's schedule: after a 5xx or a request without an answer,
    /// no request goes out for a jittered delay that doubles per failed try (default 1 s
    /// doubling to 3 min, [`crate::OUTAGE_BACKOFF`]).
    pub backoff: Backoff,
    /// Requests in flight at once (GitHub's secondary limit starts at 100).
    pub max_concurrent: usize,
    /// Renew the access token this long before it expires.
    pub renew_margin: Duration,
    /// Pages of runs listed per status per repository; beyond it demand is a floor.
    pub max_run_pages: u32,
    /// Pages of jobs listed per run.
    pub max_job_pages: u32,
    /// Pages for other lists (runners, installations, repositories).
    pub max_list_pages: u32,
    /// Items per page (GitHub's maximum is 100).
    pub per_page: u32,
    /// How long an organization's repository list is reused.
    pub repo_cache_ttl: Duration,
    /// Conditional-request cache entries kept (oldest dropped beyond it).
    pub etag_capacity: usize,
    /// Versions remembered per URL and offered together in `If-None-Match`, so a list that
    /// returns to an earlier state is a free 304 (1: the newest only).
    pub etag_versions: usize,
}

impl ClientConfig {
    /// Defaults for `endpoints`.
    pub fn new(endpoints: Endpoints) -> Self {
        Self {
            endpoints,
            client_id: DEFAULT_CLIENT_ID.to_string(),
            user_agent: default_user_agent(),
            request_timeout: Duration::from_secs(30),
            backoff: crate::outage::OUTAGE_BACKOFF,
            max_concurrent: 8,
            renew_margin: Duration::from_secs(300),
            max_run_pages: 3,
            max_job_pages: 3,
            max_list_pages: 50,
            per_page: 100,
            repo_cache_ttl: Duration::from_secs(600),
            etag_capacity: 4096,
            etag_versions: 3,
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self::new(Endpoints::github_com())
    }
}
