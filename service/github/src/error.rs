//! Typed errors callers branch on. None of them ever carries a token: server
//! text is passed through [`redact`] before it is kept.

use chrono::{DateTime, Utc};
use std::time::Duration;

/// Everything that can go wrong talking to GitHub.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// A 5xx, a timeout, a dropped connection or a garbled answer: try again later
    /// (see [`crate::backoff`]).
    #[error("GitHub is unavailable or answered badly ({detail}); retrying with backoff")]
    Transient {
        /// What happened, without secrets.
        detail: String,
        /// HTTP status when there was one.
        status: Option<u16>,
    },
    /// GitHub has not answered (5xx or no answer) and the host-wide outage gate is closed: the
    /// request was not sent. Every target waits for `next_try` (see [`crate::outage`]).
    #[error(
        "GitHub has not answered since {} ({failures} failed tries, last: {detail}); next try at {}; check this machine's network, or https://www.githubstatus.com for an outage",
        since.format("%H:%M:%S UTC"),
        next_try.format("%H:%M:%S UTC")
    )]
    Unreachable {
        /// The first failure of this outage.
        since: DateTime<Utc>,
        /// When the next request may go out.
        next_try: DateTime<Utc>,
        /// Failed tries in a row.
        failures: u32,
        /// The last failure, in words (no secrets).
        detail: String,
    },
    /// A primary or secondary rate limit: no request should be made before `until`.
    #[error(
        "GitHub rate limit reached ({}); waiting until {until}",
        if *.secondary { "secondary limit" } else { "hourly limit" }
    )]
    RateLimited {
        /// Earliest time to try again.
        until: DateTime<Utc>,
        /// A secondary (abuse) limit rather than the hourly quota.
        secondary: bool,
    },
    /// The credential was refused (401) and could not be renewed: the user must
    /// sign in again.
    #[error("GitHub refused the credential (401 Bad credentials); sign in again (tray: Sign in, CLI: `runner-manager auth login`)")]
    Unauthorized,
    /// There is no credential yet, or the refresh token was refused.
    #[error("not signed in to GitHub ({reason}); sign in (tray: Sign in, CLI: `runner-manager auth login`)")]
    SignInRequired {
        /// Why, in words.
        reason: String,
    },
    /// 403 that is not a rate limit: the App or the user lacks a permission.
    #[error("GitHub refused the request (403: {message}); check that the GitHub App is installed with the needed permissions and that you administer this target")]
    Forbidden {
        /// GitHub's message.
        message: String,
    },
    /// 404: missing, or private and not visible to this credential.
    #[error("not found on GitHub: {what} (404; check the name, and that the GitHub App is installed on it)")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// 400/409/422 or any other refusal of the request's content.
    #[error("GitHub rejected the request ({status}: {message})")]
    Invalid {
        /// HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
    },
    /// 409: e.g. a runner with this name already exists.
    #[error("GitHub reports a conflict (409: {message}); pick another name or remove the old one")]
    Conflict {
        /// GitHub's message.
        message: String,
    },
    /// DELETE of a runner that is running a job (422).
    #[error("runner {runner_id} is still running a job; remove it after the job ends")]
    StillRunningJob {
        /// The runner.
        runner_id: u64,
    },
    /// The App is not installed where it must be.
    #[error("the GitHub App is not installed on `{account}`; install it there (GitHub → Settings → Applications → Configure) and grant it access to the repositories")]
    NotInstalled {
        /// The owner or organization.
        account: String,
    },
    /// The signed-in user does not administer the repository.
    #[error("you are not an administrator of `{repository}`; runners need admin rights: ask an owner to make you admin, or pick a repository you administer")]
    NotAdmin {
        /// `owner/name`.
        repository: String,
    },
    /// Saving a renewed credential failed; it is kept in memory and saved again
    /// before its next use.
    #[error("could not save the renewed GitHub credential ({0}); check the credential store")]
    Store(String),
    /// Bad local configuration (URLs, ids).
    #[error("invalid GitHub configuration: {0}")]
    Config(String),
}

impl GitHubError {
    /// Whether waiting and trying the same request again can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Transient { .. } | Self::RateLimited { .. } | Self::Unreachable { .. }
        )
    }

    /// Whether the user has to sign in before anything works.
    pub fn needs_sign_in(&self) -> bool {
        matches!(self, Self::Unauthorized | Self::SignInRequired { .. })
    }

    /// For rate limits and a closed outage gate: how long from now until a request may be made.
    pub fn wait(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { until, .. }
            | Self::Unreachable {
                next_try: until, ..
            } => Some((*until - Utc::now()).to_std().unwrap_or(Duration::ZERO)),
            _ => None,
        }
    }

    pub(crate) fn transient(detail: impl Into<String>, status: Option<u16>) -> Self {
        Self::Transient {
            detail: redact(&detail.into()),
            status,
        }
    }
}

/// Replaces anything shaped like a GitHub token (`gh?_…`, `github_pat_…`) with
/// `[REDACTED]`, so text from servers or libraries can be logged and shown.
pub fn redact(text: &str) -> String {
    const PREFIXES: [&str; 6] = ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for p in PREFIXES {
            if rest.starts_with(p) {
                let tail = &rest[p.len()..];
                let len = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                out.push_str("[REDACTED]");
                rest = &tail[len..];
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    if out.len() > 300 {
        let mut cut = 300;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_token_shapes() {
        let s = redact("bad ghu_abcDEF123 and ghr_x_y, github_pat_11AA_bb! ok");
        assert_eq!(s, "bad [REDACTED] and [REDACTED], [REDACTED]! ok");
    }

    #[test]
    fn truncates_long_text_on_char_boundary() {
        let s = redact(&"é".repeat(400));
        assert!(s.len() <= 304);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn classification_helpers() {
        assert!(GitHubError::transient("x", Some(502)).is_retryable());
        assert!(!GitHubError::Unauthorized.is_retryable());
        assert!(GitHubError::Unauthorized.needs_sign_in());
        let e = GitHubError::RateLimited {
            until: Utc::now() + chrono::Duration::seconds(30),
            secondary: false,
        };
        assert!(e.wait().unwrap() > Duration::from_secs(25));
        assert!(e.to_string().contains("hourly"));
    }
}
