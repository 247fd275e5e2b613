//! The service's own device-flow sign-in (`/v1/sign-in`): [`SignIns`] is the one owner of the
//! session. It starts GitHub's device flow against the service's GitHub and App, polls in a
//! background task ([`poll`]) and stores the credential through the same path as
//! `POST /v1/credential`. Clients (the CLI, the tray) see only the user code and the session's
//! state; the device code never leaves this module's task.
//!
//! One session at a time. Starting while one waits joins it (unless `restart`, which cancels it
//! first). A session ends when it reaches a final state, at its code's expiry at the latest,
//! whether or not any client still follows it; stopping the service cancels it.

mod poll;
mod words;

use super::state::Daemon;
use rm_github::{DeviceCode, DeviceFlow, DeviceFlowError};
use rm_proto::{ApiError, Event, SignInSession, SignInState, UnixMillis};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// Attempts at `POST /login/device/code` when GitHub cannot be reached; there is no code to
/// keep polling with yet, so a few quick tries, then `failed`.
const START_ATTEMPTS: u32 = 3;

/// Bound on one attempt at starting the flow (the request, not the session).
const START_DEADLINE: Duration = Duration::from_secs(20);

/// The longest wait between polls while GitHub keeps failing.
const RETRY_CAP: Duration = Duration::from_secs(60);

/// The owner of the sign-in session.
pub struct SignIns {
    inner: Arc<Inner>,
}

struct Inner {
    daemon: Arc<Daemon>,
    /// `<data-dir>/config.json`, named in fixes that point the service at another App.
    config_file: PathBuf,
    slot: Mutex<Slot>,
    /// Serialises starts: two clients starting together get one flow.
    starting: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Slot {
    current: Option<Current>,
    /// The service is stopping: no new session.
    closed: bool,
}

struct Current {
    session: SignInSession,
    /// Tells the poll task to stop (cancel, restart, shutdown).
    stop: watch::Sender<bool>,
    /// GitHub approved and the credential is being stored: too late to cancel.
    storing: bool,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn millis_after(d: Duration) -> UnixMillis {
    UnixMillis(now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

impl SignIns {
    pub fn new(daemon: Arc<Daemon>, config_file: PathBuf) -> SignIns {
        SignIns {
            inner: Arc::new(Inner {
                daemon,
                config_file,
                slot: Mutex::new(Slot::default()),
                starting: tokio::sync::Mutex::new(()),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// Starts a device flow, or answers the one still waiting unless `restart`.
    pub async fn start(&self, restart: bool, uid: u32) -> Result<SignInSession, ApiError> {
        let inner = &self.inner;
        let _one_at_a_time = inner.starting.lock().await;
        {
            let mut slot = inner.lock();
            if slot.closed {
                return Err(stopping());
            }
            if let Some(c) = slot.current.as_mut() {
                // Mid-store the approval is already won: answer it rather than cancel it.
                if !c.session.state.is_final() && (!restart || c.storing) {
                    return Ok(c.session.clone());
                }
                if !c.session.state.is_final() {
                    inner.end(
                        &mut slot,
                        SignInState::Cancelled,
                        "replaced by a new sign-in".to_owned(),
                        None,
                    );
                }
            }
        }
        let id = format!(
            "{:x}-{}",
            now_ms(),
            inner.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let config = inner.daemon.client.config().clone();
        let started = match DeviceFlow::new(config) {
            Ok(flow) => self.begin(&flow).await.map(|code| (flow, code)),
            Err(e) => Err(DeviceFlowError::GitHub(e)),
        };
        let mut slot = inner.lock();
        if slot.closed {
            return Err(stopping());
        }
        let session = match started {
            Ok((flow, code)) => {
                let session = SignInSession {
                    id,
                    user_code: code.user_code.clone(),
                    verification_uri: code.verification_uri.clone(),
                    expires_at: millis_after(code.expires_in),
                    interval_secs: secs(code.interval),
                    state: SignInState::Waiting,
                    login: None,
                    message: None,
                    fix: None,
                    next_try: None,
                };
                let (stop, stopped) = watch::channel(false);
                slot.current = Some(Current {
                    session: session.clone(),
                    stop,
                    storing: false,
                });
                tracing::info!(uid, session = %session.id, user_code = %session.user_code, expires_in_secs = code.expires_in.as_secs(), "sign-in started");
                tokio::spawn(poll::run(
                    Arc::clone(inner),
                    session.id.clone(),
                    flow,
                    code,
                    stopped,
                    uid,
                ));
                session
            }
            Err(e) => {
                let (state, message, fix) = words::refusal(&e, inner.github());
                tracing::warn!(uid, session = %id, error = %e, "sign-in could not start");
                let session = SignInSession {
                    id,
                    user_code: String::new(),
                    verification_uri: String::new(),
                    expires_at: UnixMillis(now_ms()),
                    interval_secs: 0,
                    state,
                    login: None,
                    message: Some(message),
                    fix,
                    next_try: None,
                };
                // A final session: nothing polls; the stop signal has no listener.
                slot.current = Some(Current {
                    session: session.clone(),
                    stop: watch::channel(true).0,
                    storing: false,
                });
                session
            }
        };
        inner.publish(&session);
        Ok(session)
    }

    /// `POST /login/device/code`, tried a few times with back-off while GitHub cannot be
    /// reached.
    async fn begin(&self, flow: &DeviceFlow) -> Result<DeviceCode, DeviceFlowError> {
        let backoff = rm_github::Backoff::default();
        let mut attempt = 0;
        loop {
            let result = match tokio::time::timeout(START_DEADLINE, flow.start()).await {
                Ok(r) => r,
                Err(_) => Err(DeviceFlowError::GitHub(rm_github::GitHubError::Transient {
                    detail: format!("no answer within {} s", START_DEADLINE.as_secs()),
                    status: None,
                })),
            };
            match result {
                Err(DeviceFlowError::GitHub(e))
                    if e.is_retryable() && attempt + 1 < START_ATTEMPTS =>
                {
                    let wait = e.wait().unwrap_or_else(|| backoff.delay(attempt));
                    if wait > RETRY_CAP {
                        return Err(DeviceFlowError::GitHub(e));
                    }
                    tracing::warn!(error = %e, attempt, wait_ms = wait.as_millis() as u64, "starting sign-in failed; trying again");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The current or last session.
    pub fn current(&self) -> Option<SignInSession> {
        self.inner
            .lock()
            .current
            .as_ref()
            .map(|c| c.session.clone())
    }

    /// Cancels the waiting session; answers it as it ends (a final one unchanged; a
    /// session whose approval is being stored as it is).
    pub fn cancel(&self, uid: u32) -> Option<SignInSession> {
        let inner = &self.inner;
        let mut slot = inner.lock();
        let waiting = slot
            .current
            .as_ref()
            .is_some_and(|c| !c.session.state.is_final() && !c.storing);
        if waiting {
            tracing::info!(uid, "sign-in cancelled");
            inner.end(
                &mut slot,
                SignInState::Cancelled,
                "sign-in was cancelled: start it again to sign in".to_owned(),
                None,
            );
        }
        slot.current.as_ref().map(|c| c.session.clone())
    }

    /// The service is stopping: cancels a waiting session and refuses new ones.
    pub fn shutdown(&self) {
        let inner = &self.inner;
        let mut slot = inner.lock();
        slot.closed = true;
        let waiting = slot
            .current
            .as_ref()
            .is_some_and(|c| !c.session.state.is_final());
        if waiting {
            tracing::info!("sign-in cancelled: the service is stopping");
            inner.end(
                &mut slot,
                SignInState::Cancelled,
                "the service stopped: start sign-in again once it runs".to_owned(),
                None,
            );
        }
    }
}

fn stopping() -> ApiError {
    ApiError::service_unavailable(
        "the service is stopping: start sign-in again once it runs (`runner-manager status`)",
    )
}

/// Where the service signs in, for messages.
pub(super) struct GitHubSide<'a> {
    pub web: &'a str,
    pub client_id: &'a str,
    pub config_file: &'a std::path::Path,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn github(&self) -> GitHubSide<'_> {
        let config = self.daemon.client.config();
        GitHubSide {
            web: config.endpoints.web(),
            client_id: &config.client_id,
            config_file: &self.config_file,
        }
    }

    /// Tells watchers (published under the slot's lock, so they see changes in order).
    fn publish(&self, session: &SignInSession) {
        self.daemon.watchers.event(Event::SignInProgress {
            session: session.clone(),
        });
    }

    /// Ends the current session in `state` and stops its task.
    fn end(&self, slot: &mut Slot, state: SignInState, message: String, fix: Option<String>) {
        let Some(c) = slot.current.as_mut() else {
            return;
        };
        c.session.state = state;
        c.session.message = Some(message);
        c.session.fix = fix;
        c.session.next_try = None;
        let _ = c.stop.send(true);
        self.publish(&c.session);
    }

    /// Applies `change` to session `id` if it is still current and not final; publishes it when
    /// it changed. False when the session is gone (cancelled or replaced): its task stops.
    fn update(&self, id: &str, change: impl FnOnce(&mut Current)) -> bool {
        let mut slot = self.lock();
        let Some(c) = slot.current.as_mut() else {
            return false;
        };
        if c.session.id != id || c.session.state.is_final() {
            return false;
        }
        let before = c.session.clone();
        change(c);
        if c.session != before {
            self.publish(&c.session);
        }
        true
    }
}
