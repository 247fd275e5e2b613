//! The authenticated REST client: current token, one renewal on 401, conditional GETs and
//! pagination. A 5xx or a request without an answer is not retried here: it closes the
//! host-wide outage gate (`outage`), and the caller's next pass, after the gate's next try,
//! is the retry.

use crate::auth::{AuthState, Session};
use crate::budget::{BudgetMeter, BudgetSnapshot, Planner};
use crate::config::ClientConfig;
use crate::credential::{Credential, CredentialStore};
use crate::error::GitHubError;
use crate::etag::EtagCache;
use crate::models::Paged;
use crate::oauth::json_error_kind;
use crate::transport::{next_link, Body, Request, Transport};
use http::{HeaderMap, Method};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The GitHub adapter the service uses. Cheap to clone; clones share the
/// session, the budget meter and the caches.
#[derive(Clone)]
pub struct GitHubClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) transport: Transport,
    pub(crate) session: Session,
    pub(crate) etags: EtagCache,
    /// Whether `If-None-Match` may offer several remembered versions (cleared for good when
    /// the server shows it compares only one, see `etag`).
    pub(crate) etag_lists: AtomicBool,
    pub(crate) org_repos: Mutex<OrgRepoCache>,
    pub(crate) settled_runs: Mutex<HashMap<u64, crate::demand::RunMemo>>,
    pub(crate) runner_jobs: crate::assignments::RunnerJobs,
    pub(crate) local_runs: crate::local_runs::LocalRuns,
}

/// Organization (lower-cased) → when read, its repositories.
pub(crate) type OrgRepoCache = HashMap<String, (Instant, Arc<Vec<crate::models::Repository>>)>;

/// One answer, with how it counted.
pub(crate) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Arc<str>,
    /// Requests made (retries included) and how many were charged.
    pub cost: Cost,
    /// The ETag to remember if the body parses.
    etag: Option<(String, u64)>,
}

/// Requests a call made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Requests sent.
    pub requests: u64,
    /// Of those, answered 2xx (charged against the primary limit).
    pub charged: u64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.requests += o.requests;
        self.charged += o.charged;
    }
}

/// Items of a paginated list, and whether the page cap cut it short.
pub(crate) struct Listing<T> {
    pub items: Vec<T>,
    pub truncated: bool,
    pub cost: Cost,
}

impl GitHubClient {
    /// A client for `config`, taking its credential from `store`.
    pub fn new(config: ClientConfig, store: Arc<dyn CredentialStore>) -> Result<Self, GitHubError> {
        let session = Session::new(store, config.client_id.clone(), config.renew_margin)?;
        let etags = EtagCache::new(config.etag_capacity, config.etag_versions);
        let transport =
            Transport::with_outage_gate(Arc::new(config), Arc::new(BudgetMeter::default()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                transport,
                session,
                etags,
                etag_lists: AtomicBool::new(true),
                org_repos: Mutex::new(HashMap::new()),
                settled_runs: Mutex::new(HashMap::new()),
                runner_jobs: crate::assignments::RunnerJobs::default(),
                local_runs: crate::local_runs::LocalRuns::default(),
            }),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.transport.config
    }

    /// Sign-in state for `status` and the tray.
    pub fn auth_state(&self) -> AuthState {
        self.inner.session.state()
    }

    /// Installs a credential from sign-in: saved to the store, then used.
    pub fn set_credential(&self, credential: Credential) -> Result<(), GitHubError> {
        self.inner.session.set_credential(credential)
    }

    /// Re-reads the credential store (a new credential arrived).
    pub fn reload_credential(&self) -> Result<AuthState, GitHubError> {
        self.inner.session.reload()
    }

    /// Forgets the credential in memory; the caller purges its stores.
    pub fn sign_out(&self) {
        self.inner.session.sign_out();
    }

    /// `GET /user`: the login the current credential belongs to (one request per sign-in;
    /// conditional, so asking again with the same token is free).
    pub async fn current_login(&self) -> Result<String, GitHubError> {
        let url = self.api_url("/user");
        let (account, _) = self
            .get_json::<crate::models::Account>(&url, "user", "the signed-in user")
            .await?;
        if account.login.is_empty() {
            return Err(GitHubError::Invalid {
                status: 200,
                message: "GET /user answered without a login".into(),
            });
        }
        Ok(account.login)
    }

    /// How many token refreshes this client has sent.
    pub fn refresh_count(&self) -> u64 {
        self.inner.session.refreshes()
    }

    /// Budget figures for `status`.
    pub fn budget(&self) -> BudgetSnapshot {
        self.inner.transport.meter.snapshot()
    }

    /// A poll planner fed with this client's measurements.
    pub fn planner(&self) -> Planner {
        Planner::from_snapshot(&self.budget())
    }

    /// Records that a demand poll saw queued jobs (opens a fast-poll window, see `Planner`).
    pub(crate) fn record_demand_seen(&self) {
        self.inner
            .transport
            .meter
            .record_demand_at(chrono::Utc::now());
    }

    /// Records a finished demand poll of `target` in the budget meter.
    pub(crate) fn record_poll(&self, target: &rm_core::Target, cost: Cost) {
        self.inner
            .transport
            .meter
            .record_poll(&target.to_string(), cost.charged, cost.requests);
    }

    pub(crate) fn api_url(&self, path: &str) -> String {
        self.config().endpoints.api_url(path)
    }

    /// Sends a REST request: renews the token once on 401 and (when `conditional`) sends
    /// `If-None-Match` and turns a 304 into the remembered answer. Transient failures are
    /// returned at once (see the module doc).
    pub(crate) async fn call(
        &self,
        method: Method,
        url: &str,
        endpoint: &'static str,
        body: Option<&serde_json::Value>,
        conditional: bool,
    ) -> Result<Answer, GitHubError> {
        let inner = &*self.inner;
        let body_text = body.map(serde_json::Value::to_string);
        let mut renewed = false;
        let mut cost = Cost::default();
        let mut access = inner.session.access(&inner.transport).await?;
        loop {
            let mut offered = if conditional {
                inner.etags.get(url, access.generation)
            } else {
                Vec::new()
            };
            if !inner.etag_lists.load(Ordering::Relaxed) {
                offered.truncate(1);
            }
            let mut req = Request::rest(method.clone(), url.to_string(), endpoint, &access.token);
            if !offered.is_empty() {
                let tags: Vec<&str> = offered.iter().map(|v| v.etag.as_str()).collect();
                req.if_none_match = Some(tags.join(", "));
            }
            if let Some(b) = &body_text {
                req.body = Body::Json(b.clone());
            }
            let sent = inner.transport.send(req).await;
            cost.requests += 1;
            let listed = offered.len() > 1;
            return match sent {
                Ok(r) if r.status == 401 => {
                    if renewed {
                        return Err(inner.session.refused_after_renewal());
                    }
                    renewed = true;
                    access = inner
                        .session
                        .unauthorized(&inner.transport, access.generation)
                        .await?;
                    continue;
                }
                Ok(r) if r.status == 304 => {
                    let named = r
                        .headers
                        .get(http::header::ETAG)
                        .and_then(|v| v.to_str().ok());
                    let body = match (named, offered.as_slice()) {
                        (Some(tag), _) => inner.etags.current(url, access.generation, tag),
                        (None, [only]) => Some(only.body.clone()),
                        (None, _) => None,
                    };
                    match body {
                        Some(body) => Ok(Answer {
                            status: 200,
                            headers: r.headers,
                            body,
                            cost,
                            etag: None,
                        }),
                        // Several tags offered and the 304 does not say which one is current:
                        // ask again with the newest alone, and from now on always.
                        None if listed => {
                            self.stop_etag_lists(endpoint, "a 304 without an ETag");
                            continue;
                        }
                        None => Err(GitHubError::transient(
                            format!("{endpoint}: 304 for a request that was not conditional"),
                            Some(304),
                        )),
                    }
                }
                Ok(r) if r.status >= 500 => Err(GitHubError::transient(
                    format!("{endpoint}: HTTP {}", r.status),
                    Some(r.status),
                )),
                // A server refusing a list of tags (none of GitHub's documented answers, but it
                // must not stop polling): ask again with one.
                Ok(r) if r.status == 400 && listed => {
                    self.stop_etag_lists(endpoint, "HTTP 400");
                    continue;
                }
                Ok(r) => {
                    let ok = (200..300).contains(&r.status);
                    if ok {
                        cost.charged += 1;
                    }
                    let etag = if conditional && ok {
                        r.headers
                            .get(http::header::ETAG)
                            .and_then(|v| v.to_str().ok())
                            .map(|e| (e.to_string(), access.generation))
                    } else {
                        None
                    };
                    // A full answer for a version we offered: the server compared only one
                    // tag (or none). Offer one from now on, so nothing is paid twice.
                    if listed {
                        if let Some((tag, _)) = &etag {
                            if offered.iter().any(|v| crate::etag::same_tag(&v.etag, tag)) {
                                self.stop_etag_lists(endpoint, "a 200 for an offered ETag");
                            }
                        }
                    }
                    Ok(Answer {
                        status: r.status,
                        headers: r.headers,
                        body: Arc::from(r.body),
                        cost,
                        etag,
                    })
                }
                Err(e) => Err(e),
            };
        }
    }

    /// The server does not honour a list of entity tags in `If-None-Match`: offer only the
    /// newest from now on (logged once).
    fn stop_etag_lists(&self, endpoint: &'static str, why: &str) {
        if self.inner.etag_lists.swap(false, Ordering::Relaxed) {
            tracing::info!(
                endpoint,
                why,
                "GitHub does not match a list of ETags; offering the newest only"
            );
        }
    }

    /// GET and parse a JSON answer, conditionally.
    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        endpoint: &'static str,
        what: &str,
    ) -> Result<(T, Answer), GitHubError> {
        let answer = self.call(Method::GET, url, endpoint, None, true).await?;
        let answer = expect_success(answer, what)?;
        let value = self.parse(&answer, endpoint)?;
        self.remember(url, &answer);
        Ok((value, answer))
    }

    /// Parses an answer's body; remembers its ETag only once it parsed.
    pub(crate) fn parse<T: serde::de::DeserializeOwned>(
        &self,
        answer: &Answer,
        endpoint: &'static str,
    ) -> Result<T, GitHubError> {
        let value = serde_json::from_str::<T>(&answer.body).map_err(|e| {
            GitHubError::transient(
                format!(
                    "{endpoint}: malformed answer ({} at line {} column {})",
                    json_error_kind(&e),
                    e.line(),
                    e.column()
                ),
                Some(answer.status),
            )
        })?;
        Ok(value)
    }

    /// GET every page of a list (up to `max_pages`), conditionally per page.
    pub(crate) async fn list<P: Paged>(
        &self,
        first_url: String,
        endpoint: &'static str,
        what: &str,
        max_pages: u32,
    ) -> Result<Listing<P::Item>, GitHubError> {
        let mut items = Vec::new();
        let mut cost = Cost::default();
        let mut url = first_url;
        let mut pages = 0u32;
        let mut total: Option<u64> = None;
        loop {
            let answer = self.call(Method::GET, &url, endpoint, None, true).await?;
            cost += answer.cost;
            let answer = expect_success(answer, what)?;
            let page: P = self.parse(&answer, endpoint)?;
            self.remember(&url, &answer);
            let (mut page_items, page_total) = page.into_items();
            total = total.or(page_total);
            let empty = page_items.is_empty();
            items.append(&mut page_items);
            pages += 1;
            match next_link(&answer.headers) {
                Some(next) if !empty => {
                    // The credential goes with every page: follow links within our API base
                    // only, never to wherever an answer points.
                    if !self.config().endpoints.is_api_url(&next) {
                        return Err(GitHubError::transient(
                            format!("{endpoint}: the next-page link leaves the API base; not following it"),
                            Some(answer.status),
                        ));
                    }
                    if pages >= max_pages.max(1) {
                        return Ok(Listing {
                            items,
                            truncated: true,
                            cost,
                        });
                    }
                    url = next;
                }
                _ => break,
            }
        }
        let truncated = total.map(|t| (items.len() as u64) < t).unwrap_or(false);
        Ok(Listing {
            items,
            truncated,
            cost,
        })
    }

    /// Stores a parsed-good answer's ETag for `url`.
    pub(crate) fn remember(&self, url: &str, answer: &Answer) {
        if let Some((etag, generation)) = &answer.etag {
            self.inner
                .etags
                .put(url, *generation, etag, answer.body.clone());
        }
    }
}

/// Maps non-2xx statuses (other than those `call` handles) to typed errors.
pub(crate) fn expect_success(answer: Answer, what: &str) -> Result<Answer, GitHubError> {
    match answer.status {
        200..=299 => Ok(answer),
        s => Err(status_error(s, &answer, what)),
    }
}

pub(crate) fn status_error(status: u16, answer: &Answer, what: &str) -> GitHubError {
    let message = crate::transport::Response {
        status,
        headers: HeaderMap::new(),
        body: answer.body.to_string(),
    }
    .message();
    match status {
        401 => GitHubError::Unauthorized,
        403 => GitHubError::Forbidden { message },
        404 => GitHubError::NotFound {
            what: what.to_string(),
        },
        409 => GitHubError::Conflict { message },
        _ => GitHubError::Invalid { status, message },
    }
}
