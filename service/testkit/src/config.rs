//! Start-up settings of the fake GitHub.

use std::time::Duration;

/// Settings for [`crate::FakeGitHub::start`]. `Default` gives GitHub's numbers where they matter
/// (8 h user tokens, 5,000 requests/hour, 5 s device-flow interval) and short broker timings so
/// tests stay fast.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// TCP port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How long the broker holds a message long-poll open before answering 204.
    pub poll_hold: Duration,
    /// A broker session that has not polled for this long is dropped (runner goes offline).
    pub session_timeout: Duration,
    /// A runner whose listener vanished mid-job stays `busy` this long after it went offline
    /// (DELETE answers 422 meanwhile); then its job fails and the JIT registration is deleted.
    /// GitHub: about ten minutes.
    pub lost_job_timeout: Duration,
    /// How long the REST answers lag behind a runner taking a job: meanwhile the job is shown
    /// `queued` without a runner and the runner not busy (the broker knows better). Zero:
    /// at once.
    pub report_delay: Duration,
    /// Device-flow minimum polling interval (`interval` in §1.1); polling sooner gives `slow_down`.
    pub device_interval: Duration,
    /// Device-flow code lifetime (`expires_in` in §1.1).
    pub device_expires_in: Duration,
    /// Lifetime of `ghu_` user access tokens (`expires_in`, GitHub: 28800 s).
    pub access_token_lifetime: Duration,
    /// Lifetime of `ghr_` refresh tokens (`refresh_token_expires_in`, GitHub: 15811200 s).
    pub refresh_token_lifetime: Duration,
    /// Primary rate limit per user per hour (`x-ratelimit-limit`).
    pub rate_limit: u64,
    /// The OAuth client id the fake app accepts; other ids get `incorrect_client_credentials`.
    pub client_id: String,
    /// `If-None-Match` naming several entity tags matches when any is current (RFC 9110
    /// §13.1.2, and the Rails behaviour GitHub's API is built on). `false` models a server that
    /// compares the header as one tag, for clients that must cope with either.
    pub if_none_match_lists: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            port: 0,
            poll_hold: Duration::from_secs(2),
            session_timeout: Duration::from_secs(5),
            lost_job_timeout: Duration::from_secs(600),
            report_delay: Duration::ZERO,
            device_interval: Duration::from_secs(5),
            device_expires_in: Duration::from_secs(900),
            access_token_lifetime: Duration::from_secs(28_800),
            refresh_token_lifetime: Duration::from_secs(15_811_200),
            rate_limit: 5_000,
            client_id: crate::DEFAULT_CLIENT_ID.to_string(),
            if_none_match_lists: true,
        }
    }
}
