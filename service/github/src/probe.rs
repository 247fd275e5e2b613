//! `GET /rate_limit`: a question GitHub does not charge against the primary limit (GITHUB.md
//! §5), so the host doctor can ask whether GitHub answers and the credential works without
//! spending the user's budget.

use crate::budget::RateLimit;
use crate::client::{expect_success, GitHubClient};
use crate::error::GitHubError;
use http::Method;

/// The endpoint name in the budget meter; its answers are counted as free.
pub(crate) const RATE_LIMIT_ENDPOINT: &str = "rate_limit";

impl GitHubClient {
    /// Asks GitHub for the credential's rate limit. `Ok` proves GitHub answered and accepted
    /// the credential; `Unauthorized`/`SignInRequired` say the credential does not work;
    /// `Transient` that GitHub could not be reached.
    pub async fn rate_limit(&self) -> Result<Option<RateLimit>, GitHubError> {
        let url = self.api_url("/rate_limit");
        let answer = self
            .call(Method::GET, &url, RATE_LIMIT_ENDPOINT, None, false)
            .await?;
        let answer = expect_success(answer, "the rate limit")?;
        Ok(RateLimit::from_headers(&answer.headers))
    }

    /// While an outage holds every request back: sends its probe once it is due, as this free
    /// question, and answers whether GitHub answers again (the gate is then open for every
    /// target). `None`: no outage, or the probe is not due yet (or already on the wire).
    pub async fn probe_outage(&self) -> Option<bool> {
        let view = self.inner.transport.outage_view();
        if view.consecutive_failures == 0 {
            return None;
        }
        if view.next_try.is_some_and(|t| t > chrono::Utc::now()) {
            return None;
        }
        match self.rate_limit().await {
            Err(GitHubError::Unreachable { .. }) if self.outage_closed() => None,
            _ => Some(!self.outage_closed()),
        }
    }

    fn outage_closed(&self) -> bool {
        self.inner.transport.outage_view().consecutive_failures > 0
    }
}
