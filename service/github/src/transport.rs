//! One HTTP exchange through octocrab, with our headers, a whole-request
//! deadline, metering, the rate-limit gate and (for the service's client) the host-wide outage
//! gate. No retries happen below this point (the octocrab stack we assemble has no retry
//! layer), so every request GitHub sees is counted exactly once.

use crate::backoff::{rate_limit_until, Pause, RateGate};
use crate::budget::{BudgetMeter, Charge};
use crate::config::ClientConfig;
use crate::error::{redact, GitHubError};
use crate::outage::{OutageGate, OutageView};
use chrono::Utc;
use http::header::{
    HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, IF_NONE_MATCH, USER_AGENT,
};
use http::Method;
use octocrab::{OctoBody, Octocrab, OctocrabBuilder};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

pub(crate) const JSON_API: &str = "application/vnd.github+json";
pub(crate) const API_VERSION: &str = "2022-11-28";

/// A request body.
pub(crate) enum Body {
    None,
    Json(String),
    Form(String),
}

/// One request.
pub(crate) struct Request<'a> {
    pub method: Method,
    pub url: String,
    /// Short name for metering and logs (`runs.list`, `jit`…).
    pub endpoint: &'static str,
    pub token: Option<&'a SecretString>,
    pub accept: &'static str,
    pub if_none_match: Option<String>,
    pub body: Body,
    /// REST requests count against the budget and obey the rate gate;
    /// OAuth (`/login/...`) requests do not.
    pub rest: bool,
}

impl<'a> Request<'a> {
    pub(crate) fn rest(
        method: Method,
        url: String,
        endpoint: &'static str,
        token: &'a SecretString,
    ) -> Self {
        Self {
            method,
            url,
            endpoint,
            token: Some(token),
            accept: JSON_API,
            if_none_match: None,
            body: Body::None,
            rest: true,
        }
    }
}

/// A complete answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Response {
    /// GitHub's `message` field, redacted, or the start of the body.
    pub(crate) fn message(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Msg {
            message: Option<String>,
        }
        let text = serde_json::from_str::<Msg>(&self.body)
            .ok()
            .and_then(|m| m.message)
            .unwrap_or_else(|| self.body.chars().take(200).collect());
        redact(&text)
    }
}

pub(crate) struct Transport {
    crab: Octocrab,
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) meter: Arc<BudgetMeter>,
    gate: RateGate,
    /// `None` for a transport that is not the service's (the device flow's own).
    outage: Option<OutageGate>,
    /// Bumped when the health may have changed (see [`crate::GitHubClient::health_changes`]).
    pub(crate) health_signal: Arc<tokio::sync::watch::Sender<u64>>,
    slots: Semaphore,
}

/// octocrab on an HTTP stack we assemble: rustls (ring, the OS roots) over hyper, plus
/// redirect following — and nothing else.
///
/// Why not `Octocrab::builder().build()`: its default stack puts `user-agent: octocrab` in an
/// extra-headers layer that *appends* to every request, so GitHub would get two User-Agent
/// lines (ours, then octocrab's), and no builder option drops it. Left out as well: octocrab's
/// retry layer (we retry knowingly and count each request, so no retry may happen below us),
/// its timeout connector (`send` bounds the whole exchange), auth (we attach the current token
/// per request: it rotates) and the base-URI layer (every URL we send is absolute).
pub(crate) fn octocrab_on_our_stack() -> Result<Octocrab, GitHubError> {
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| GitHubError::Config(redact(&format!("TLS roots: {e}"))))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, OctoBody>(https);
    let stack = tower_http::follow_redirect::FollowRedirect::new(client);
    match OctocrabBuilder::new_empty()
        .with_service(stack)
        .with_auth(octocrab::AuthState::None)
        .build()
    {
        Ok(crab) => Ok(crab),
        Err(never) => match never {},
    }
}

impl Transport {
    pub(crate) fn new(
        config: Arc<ClientConfig>,
        meter: Arc<BudgetMeter>,
    ) -> Result<Self, GitHubError> {
        let crab = octocrab_on_our_stack()?;
        let (health_signal, _) = tokio::sync::watch::channel(0u64);
        Ok(Self {
            crab,
            slots: Semaphore::new(config.max_concurrent.max(1)),
            config,
            meter,
            gate: RateGate::default(),
            outage: None,
            health_signal: Arc::new(health_signal),
        })
    }

    /// The same, with the host-wide outage gate on every request (REST and token renewal),
    /// backing off on `config.backoff`.
    pub(crate) fn with_outage_gate(
        config: Arc<ClientConfig>,
        meter: Arc<BudgetMeter>,
    ) -> Result<Self, GitHubError> {
        let mut t = Self::new(config, meter)?;
        let signal = Arc::clone(&t.health_signal);
        t.outage = Some(OutageGate::new(
            t.config.backoff.clone(),
            Box::new(move || signal.send_modify(|n| *n = n.wrapping_add(1))),
        ));
        Ok(t)
    }

    pub(crate) fn outage_view(&self) -> OutageView {
        match &self.outage {
            Some(g) => g.view(),
            None => OutageView {
                consecutive_failures: 0,
                since: None,
                next_try: None,
                detail: None,
            },
        }
    }

    pub(crate) fn rate_pause(&self, now: chrono::DateTime<Utc>) -> Option<Pause> {
        self.gate.pause(now)
    }

    /// Sends one request. Transport failures and timeouts are `Transient` (and close the
    /// outage gate, as a 5xx does); while that gate is closed the request is not sent and the
    /// answer is `Unreachable`. Rate limits are `RateLimited` (and close the rate gate); every
    /// other status is returned for the caller to interpret.
    pub(crate) async fn send(&self, req: Request<'_>) -> Result<Response, GitHubError> {
        if req.rest {
            self.gate.check(Utc::now())?;
        }
        let ticket = match &self.outage {
            Some(g) if req.endpoint == crate::probe::RATE_LIMIT_ENDPOINT => {
                Some(g.admit(Utc::now())?)
            }
            Some(g) => Some(g.admit_charged(Utc::now())?),
            None => None,
        };
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| GitHubError::transient("client shut down", None))?;
        let started = Instant::now();
        let method = req.method.clone();
        let endpoint = req.endpoint;
        let rest = req.rest;
        let result = tokio::time::timeout(self.config.request_timeout, self.exchange(req)).await;
        let elapsed = started.elapsed();
        let response = match result {
            Err(_) => {
                if rest {
                    self.meter.record(endpoint, &method, Charge::Error, None);
                }
                tracing::warn!(endpoint, method = %method, timeout_ms = elapsed.as_millis() as u64, "GitHub request timed out");
                let detail = format!(
                    "{endpoint}: no answer within {:?}",
                    self.config.request_timeout
                );
                if let (Some(g), Some(t)) = (&self.outage, ticket) {
                    g.failed(t, &detail, Utc::now());
                }
                return Err(GitHubError::transient(detail, None));
            }
            Ok(Err(e)) => {
                if rest {
                    self.meter.record(endpoint, &method, Charge::Error, None);
                }
                tracing::warn!(endpoint, method = %method, error = %e, "GitHub request failed");
                // Only a failed exchange is an outage; a request we could not even build
                // (bad configuration, an unusable token) says nothing about GitHub.
                if let (Some(g), Some(t), GitHubError::Transient { detail, .. }) =
                    (&self.outage, ticket, &e)
                {
                    g.failed(t, detail, Utc::now());
                }
                return Err(e);
            }
            Ok(Ok(r)) => r,
        };
        if let (Some(g), Some(t)) = (&self.outage, ticket) {
            if response.status >= 500 {
                g.failed(
                    t,
                    &format!("{endpoint}: HTTP {}", response.status),
                    Utc::now(),
                );
            } else {
                g.answered(t);
            }
        }
        let charge = match response.status {
            304 => Charge::Free,
            // GitHub does not charge asking for the rate limit itself.
            200..=299 if endpoint == crate::probe::RATE_LIMIT_ENDPOINT => Charge::Free,
            200..=299 => Charge::Charged,
            _ => Charge::Error,
        };
        if rest {
            self.meter
                .record(endpoint, &method, charge, Some(&response.headers));
        }
        tracing::debug!(endpoint, method = %method, status = response.status, elapsed_ms = elapsed.as_millis() as u64, "GitHub answered");
        if rest && (response.status == 403 || response.status == 429) {
            let message = response.message();
            if let Some((until, secondary)) = rate_limit_until(
                response.status,
                &response.headers,
                &message,
                Utc::now(),
                self.gate.consecutive_secondary(),
            ) {
                if self.gate.close(until, secondary, Utc::now()) {
                    self.health_signal.send_modify(|n| *n = n.wrapping_add(1));
                }
                tracing::warn!(endpoint, status = response.status, %until, secondary, "GitHub rate limit; pausing requests");
                return Err(GitHubError::RateLimited { until, secondary });
            }
        }
        if rest && charge != Charge::Error {
            self.gate.success();
        }
        Ok(response)
    }

    async fn exchange(&self, req: Request<'_>) -> Result<Response, GitHubError> {
        let mut builder = http::Request::builder()
            .method(req.method)
            .uri(&req.url)
            .header(ACCEPT, req.accept)
            .header(USER_AGENT, &self.config.user_agent)
            .header("x-github-api-version", API_VERSION);
        if let Some(token) = req.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
                .map_err(|_| GitHubError::SignInRequired {
                    reason: "the stored token has characters HTTP cannot carry".into(),
                })?;
            value.set_sensitive(true);
            builder = builder.header(AUTHORIZATION, value);
        }
        if let Some(etag) = &req.if_none_match {
            if let Ok(v) = HeaderValue::from_str(etag) {
                builder = builder.header(IF_NONE_MATCH, v);
            }
        }
        let body = match req.body {
            Body::None => String::new(),
            Body::Json(s) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                s
            }
            Body::Form(s) => {
                builder = builder.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
                s
            }
        };
        let request = builder.body(body).map_err(|e| {
            GitHubError::Config(redact(&format!("bad request to {}: {e}", req.endpoint)))
        })?;
        let response = self.crab.execute(request).await.map_err(|e| {
            GitHubError::transient(format!("{}: {}", req.endpoint, error_chain(&e)), None)
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = self.crab.body_to_string(response).await.map_err(|e| {
            GitHubError::transient(
                format!("{}: reading the answer: {}", req.endpoint, error_chain(&e)),
                Some(status),
            )
        })?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// `e` and its sources on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    let mut depth = 0;
    while let Some(inner) = src {
        if depth > 4 {
            break;
        }
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
        depth += 1;
    }
    s
}

/// Percent-encodes a query/form value (RFC 3986 unreserved set kept).
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `k=v&k=v`, values percent-encoded.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The `rel="next"` URL of a `link` header.
pub(crate) fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let url = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        if is_next {
            Some(
                url.trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string(),
            )
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_header_next() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            "<http://x/a?page=3>; rel=\"next\", <http://x/a?page=9>; rel=\"last\""
                .parse()
                .unwrap(),
        );
        assert_eq!(next_link(&h).as_deref(), Some("http://x/a?page=3"));
        h.insert("link", "<http://x/a?page=1>; rel=\"prev\"".parse().unwrap());
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn form_encoding() {
        assert_eq!(
            form(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("a", "b c&")
            ]),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&a=b%20c%26"
        );
    }
}
