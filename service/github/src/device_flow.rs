//! GitHub's OAuth device flow for a GitHub App (no client secret), shaped so
//! the tray and the CLI can drive it: `start`, show the user code, then
//! `poll_until` with a wait hook that also lets the user cancel.

use crate::budget::BudgetMeter;
use crate::config::ClientConfig;
use crate::credential::Credential;
use crate::error::GitHubError;
use crate::oauth::{json_error_kind, post_form, token_request, TokenAnswer};
use crate::transport::Transport;
use secrecy::{ExposeSecret, SecretString};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// What to show the user, plus the secret device code to poll with.
#[derive(Debug, Clone)]
pub struct DeviceCode {
    /// The code the user types (e.g. `WDJB-MJHT`); not a secret.
    pub user_code: String,
    /// Where the user types it (`https://github.com/login/device`).
    pub verification_uri: String,
    /// Lifetime of the codes.
    pub expires_in: Duration,
    /// Minimum wait between polls.
    pub interval: Duration,
    /// The device code; a secret (redacted in `Debug`).
    pub device_code: SecretString,
    /// When the codes were issued (local clock).
    pub issued_at: Instant,
}

impl DeviceCode {
    /// Whether the codes have run out locally.
    pub fn is_expired(&self) -> bool {
        self.issued_at.elapsed() >= self.expires_in
    }
}

/// One poll's result.
#[derive(Debug)]
pub enum PollOutcome {
    /// The user has not finished yet.
    Pending,
    /// Polled too fast: wait at least `interval` between polls from now on.
    SlowDown {
        /// The new interval GitHub sent.
        interval: Duration,
    },
    /// Signed in.
    Complete(Credential),
}

/// Why sign-in did not complete, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum DeviceFlowError {
    /// `expired_token`.
    #[error("the sign-in code expired before it was entered on GitHub; start sign-in again")]
    Expired,
    /// `access_denied`.
    #[error("sign-in was refused on GitHub (Cancel was pressed); start sign-in again and press Authorize")]
    Denied,
    /// `incorrect_device_code`.
    #[error(
        "GitHub does not accept this device code (already used or invalid); start sign-in again"
    )]
    IncorrectDeviceCode,
    /// `device_flow_disabled`.
    #[error("device flow is not enabled for this GitHub App; enable \"Device Flow\" in the App's settings (Settings → Developer settings → GitHub Apps)")]
    Disabled,
    /// `unauthorized_client` (GitHub Enterprise Server's variant of the above).
    #[error("this GitHub Enterprise Server refused device flow for the App (unauthorized_client); ask its administrator to enable device flow for the App")]
    UnauthorizedClient,
    /// `incorrect_client_credentials`.
    #[error(
        "GitHub does not know the App client id `{client_id}`; check the configured client id"
    )]
    UnknownClient {
        /// The client id used.
        client_id: String,
    },
    /// The wait hook asked to stop.
    #[error("sign-in was cancelled")]
    Cancelled,
    /// Any other `error` code.
    #[error("GitHub refused sign-in ({code}: {description})")]
    Other {
        /// `error`.
        code: String,
        /// `error_description`.
        description: String,
    },
    /// Transport, rate limit or a garbled answer.
    #[error(transparent)]
    GitHub(#[from] GitHubError),
}

/// Device flow client for one App.
pub struct DeviceFlow {
    transport: Transport,
    client_id: String,
}

impl DeviceFlow {
    /// A device flow against `config.endpoints.web()` for `config.client_id`.
    pub fn new(config: ClientConfig) -> Result<Self, GitHubError> {
        let client_id = config.client_id.clone();
        let transport = Transport::new(Arc::new(config), Arc::new(BudgetMeter::default()))?;
        Ok(Self {
            transport,
            client_id,
        })
    }

    /// `POST /login/device/code`.
    pub async fn start(&self) -> Result<DeviceCode, DeviceFlowError> {
        #[derive(serde::Deserialize)]
        struct Start {
            device_code: Option<String>,
            user_code: Option<String>,
            verification_uri: Option<String>,
            expires_in: Option<u64>,
            interval: Option<u64>,
            error: Option<String>,
            error_description: Option<String>,
        }
        let r = post_form(
            &self.transport,
            "/login/device/code",
            "oauth.device_code",
            &[("client_id", &self.client_id)],
        )
        .await?;
        if r.status == 404 {
            return Err(DeviceFlowError::UnknownClient {
                client_id: self.client_id.clone(),
            });
        }
        let body: Start = serde_json::from_str(&r.body).map_err(|e| {
            GitHubError::transient(
                format!(
                    "oauth.device_code: HTTP {} ({})",
                    r.status,
                    json_error_kind(&e)
                ),
                Some(r.status),
            )
        })?;
        if let Some(code) = body.error {
            return Err(self.refusal(&code, body.error_description.unwrap_or_default()));
        }
        match (body.device_code, body.user_code, body.verification_uri) {
            (Some(device_code), Some(user_code), Some(verification_uri)) if r.status == 200 => {
                tracing::info!(user_code = %user_code, verification_uri = %verification_uri, "device flow started");
                Ok(DeviceCode {
                    user_code,
                    verification_uri,
                    expires_in: Duration::from_secs(body.expires_in.unwrap_or(900)),
                    interval: Duration::from_secs(body.interval.unwrap_or(5).max(1)),
                    device_code: SecretString::from(device_code),
                    issued_at: Instant::now(),
                })
            }
            _ => Err(GitHubError::transient(
                format!(
                    "oauth.device_code: HTTP {} without the expected fields",
                    r.status
                ),
                Some(r.status),
            )
            .into()),
        }
    }

    /// One `POST /login/oauth/access_token` poll.
    pub async fn poll_once(&self, code: &DeviceCode) -> Result<PollOutcome, DeviceFlowError> {
        let answer = token_request(
            &self.transport,
            &[
                ("client_id", &self.client_id),
                ("device_code", code.device_code.expose_secret()),
                ("grant_type", DEVICE_GRANT),
            ],
        )
        .await?;
        match answer {
            TokenAnswer::Token(c) => {
                tracing::info!("device flow completed");
                Ok(PollOutcome::Complete(c))
            }
            TokenAnswer::Refused {
                code: e,
                description,
                interval,
            } => match e.as_str() {
                "authorization_pending" => Ok(PollOutcome::Pending),
                "slow_down" => Ok(PollOutcome::SlowDown {
                    // GitHub sends the new interval; without one, add 5 s as RFC 8628 says.
                    interval: interval
                        .map(Duration::from_secs)
                        .unwrap_or(code.interval.saturating_add(Duration::from_secs(5))),
                }),
                _ => Err(self.refusal(&e, description)),
            },
        }
    }

    /// Polls until signed in, refused, expired or cancelled. `wait(d)` must
    /// wait `d` and return `true`, or return `false` to cancel (the tray's
    /// Cancel button, the CLI's Ctrl-C). Transient failures are retried a few
    /// times at the current interval.
    pub async fn poll_until<W, F>(
        &self,
        code: &DeviceCode,
        mut wait: W,
    ) -> Result<Credential, DeviceFlowError>
    where
        W: FnMut(Duration) -> F,
        F: Future<Output = bool>,
    {
        let mut interval = code.interval;
        let mut failures = 0u32;
        loop {
            if code.is_expired() {
                return Err(DeviceFlowError::Expired);
            }
            if !wait(interval).await {
                return Err(DeviceFlowError::Cancelled);
            }
            match self.poll_once(code).await {
                Ok(PollOutcome::Pending) => failures = 0,
                Ok(PollOutcome::SlowDown { interval: next }) => {
                    tracing::debug!(interval_s = next.as_secs(), "device flow: slow_down");
                    interval = next.max(interval);
                    failures = 0;
                }
                Ok(PollOutcome::Complete(c)) => return Ok(c),
                Err(DeviceFlowError::GitHub(e)) if e.is_retryable() && failures < 5 => {
                    failures += 1;
                    tracing::warn!(error = %e, "device flow poll failed; retrying");
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn refusal(&self, code: &str, description: String) -> DeviceFlowError {
        refusal(code, description, &self.client_id)
    }
}

/// Maps an OAuth `error` code to its explained outcome.
fn refusal(code: &str, description: String, client_id: &str) -> DeviceFlowError {
    match code {
        "expired_token" | "token_expired" => DeviceFlowError::Expired,
        "access_denied" => DeviceFlowError::Denied,
        "incorrect_device_code" => DeviceFlowError::IncorrectDeviceCode,
        "device_flow_disabled" => DeviceFlowError::Disabled,
        "unauthorized_client" => DeviceFlowError::UnauthorizedClient,
        "incorrect_client_credentials" => DeviceFlowError::UnknownClient {
            client_id: client_id.to_string(),
        },
        _ => DeviceFlowError::Other {
            code: code.to_string(),
            description,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_terminal_error_is_distinct_and_explained() {
        let cases = [
            ("expired_token", "start sign-in again"),
            ("access_denied", "Authorize"),
            ("incorrect_device_code", "start sign-in again"),
            ("device_flow_disabled", "enable \"Device Flow\""),
            ("unauthorized_client", "administrator"),
            ("incorrect_client_credentials", "client id `Iv1.x`"),
            ("weird", "weird: because"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (code, hint) in cases {
            let e = refusal(code, "because".into(), "Iv1.x");
            let text = e.to_string();
            assert!(text.contains(hint), "{code}: {text}");
            assert!(
                seen.insert(std::mem::discriminant(&e)),
                "{code} not distinct"
            );
        }
    }
}
