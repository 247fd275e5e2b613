//! The background task of one sign-in session: polls GitHub's token endpoint at the session's
//! interval until the user approves, refuses, or the code expires; stores the credential on
//! approval.
//!
//! `authorization_pending` keeps waiting; `slow_down` raises the interval for good (the
//! session shows it; nothing else changes). A network error, a 5xx or a rate limit turns the
//! session `retrying` with exponential back-off and jitter (never sooner than the interval,
//! at most [`RETRY_CAP`](super::RETRY_CAP) apart, a rate limit's own time when GitHub names
//! one), back to `waiting` at the next good answer. Every wait ends at the code's expiry at
//! the latest, so retries are bounded by the code's lifetime (15 minutes on github.com).

use super::{millis_after, secs, words, Inner};
use crate::credential::{self, AskGitHub};
use rm_github::{Backoff, DeviceCode, DeviceFlow, DeviceFlowError, PollOutcome};
use rm_proto::SignInState;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a wait ended with.
enum Woke {
    Due,
    Expired,
    Stopped,
}

/// Waits until `at`, the code's expiry, or a stop.
async fn wait(at: Instant, expiry: Instant, stop: &mut watch::Receiver<bool>) -> Woke {
    if *stop.borrow() {
        return Woke::Stopped;
    }
    tokio::select! {
        () = tokio::time::sleep_until(at.min(expiry)) => {
            if Instant::now() >= expiry { Woke::Expired } else { Woke::Due }
        }
        _ = stop.changed() => Woke::Stopped,
    }
}

pub(super) async fn run(
    inner: Arc<Inner>,
    id: String,
    flow: DeviceFlow,
    code: DeviceCode,
    mut stop: watch::Receiver<bool>,
    uid: u32,
) {
    let expiry = Instant::from_std(code.issued_at) + code.expires_in;
    let mut interval = code.interval;
    let mut failures: u32 = 0;
    let mut next = Instant::now() + interval;
    loop {
        match wait(next, expiry, &mut stop).await {
            Woke::Due => {}
            Woke::Expired => return expire(&inner, &id),
            Woke::Stopped => return,
        }
        // A poll that hangs is cut at the expiry (and by a stop).
        let answer = tokio::select! {
            a = flow.poll_once(&code) => a,
            () = tokio::time::sleep_until(expiry) => return expire(&inner, &id),
            _ = stop.changed() => return,
        };
        let now = Instant::now();
        match answer {
            Ok(PollOutcome::Pending) => {
                failures = 0;
                next = now + interval;
                if !inner.update(&id, |c| back_to_waiting(&mut c.session)) {
                    return;
                }
            }
            Ok(PollOutcome::SlowDown { interval: wanted }) => {
                failures = 0;
                interval = wanted.max(interval);
                next = now + interval;
                tracing::debug!(session = %id, interval_secs = interval.as_secs(), "sign-in: GitHub asked to poll more slowly");
                if !inner.update(&id, |c| {
                    back_to_waiting(&mut c.session);
                    c.session.interval_secs = secs(interval);
                }) {
                    return;
                }
            }
            Ok(PollOutcome::Complete(credential)) => {
                return complete(&inner, &id, credential, uid).await;
            }
            Err(DeviceFlowError::GitHub(e)) if e.is_retryable() => {
                let backoff = Backoff {
                    base: interval,
                    cap: super::RETRY_CAP.max(interval),
                };
                let delay = e
                    .wait()
                    .unwrap_or_else(|| backoff.delay(failures))
                    .max(interval);
                failures = failures.saturating_add(1);
                next = now + delay;
                tracing::warn!(session = %id, error = %e, failures, retry_in_ms = delay.as_millis() as u64, "sign-in: GitHub did not answer the poll; retrying");
                let (message, fix) = words::retrying(&e, &inner.github());
                if !inner.update(&id, |c| {
                    c.session.state = SignInState::Retrying;
                    c.session.message = Some(message);
                    c.session.fix = Some(fix);
                    c.session.next_try = Some(millis_after(
                        delay.min(expiry.saturating_duration_since(now)),
                    ));
                }) {
                    return;
                }
            }
            Err(e) => {
                let (state, message, fix) = words::refusal(&e, inner.github());
                tracing::info!(session = %id, outcome = ?state, reason = %e, "sign-in ended");
                finish(&inner, &id, state, message, fix);
                return;
            }
        }
    }
}

fn back_to_waiting(s: &mut rm_proto::SignInSession) {
    s.state = SignInState::Waiting;
    s.message = None;
    s.fix = None;
    s.next_try = None;
}

fn expire(inner: &Inner, id: &str) {
    tracing::info!(session = %id, "sign-in code expired");
    let (state, message, fix) = words::refusal(&DeviceFlowError::Expired, inner.github());
    finish(inner, id, state, message, fix);
}

/// Ends session `id` (if still current and waiting).
fn finish(inner: &Inner, id: &str, state: SignInState, message: String, fix: Option<String>) {
    let mut slot = inner.lock();
    let current = slot
        .current
        .as_ref()
        .is_some_and(|c| c.session.id == id && !c.session.state.is_final());
    if current {
        inner.end(&mut slot, state, message, fix);
    }
}

/// GitHub approved: store the credential the way `POST /v1/credential` does, then `approved`.
async fn complete(inner: &Inner, id: &str, credential: rm_github::Credential, uid: u32) {
    let claimed = inner.update(id, |c| c.storing = true);
    if !claimed {
        // Cancelled between GitHub's answer and here: the session says cancelled, so the
        // credential is dropped rather than stored behind the user's back.
        tracing::info!(session = %id, "sign-in approved after it was cancelled: credential discarded");
        return;
    }
    let stored = credential::store(&inner.daemon, credential, None, AskGitHub::Always, uid).await;
    let mut slot = inner.lock();
    let Some(c) = slot.current.as_mut().filter(|c| c.session.id == id) else {
        return;
    };
    c.storing = false;
    match stored {
        Ok(login) => {
            tracing::info!(session = %id, login = login.as_deref().unwrap_or(""), "sign-in approved");
            c.session.state = SignInState::Approved;
            c.session.message = if login.is_none() {
                Some("signed in; GitHub did not say as whom yet".to_owned())
            } else {
                None
            };
            c.session.login = login;
            c.session.fix = None;
            c.session.next_try = None;
            let _ = c.stop.send(true);
            inner.publish(&c.session);
        }
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "sign-in approved but the credential was not stored");
            let message = format!("GitHub approved the sign-in, but {}", e.message);
            inner.end(
                &mut slot,
                SignInState::Failed,
                message,
                Some(
                    "check the service's log and credential store, then start sign-in again"
                        .to_owned(),
                ),
            );
        }
    }
}
