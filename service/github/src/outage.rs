//! The outage gate: one per client, so one per host. A 5xx or a request that got no answer
//! closes it for a jittered, doubling delay (1, 2, 4 … s, capped at a few seconds); while it is
//! closed every request fails fast here, without touching the network. When it reopens one
//! request (the probe) goes out and the others keep failing fast until it answers; any answer
//! that is not a 5xx opens it for everyone. So an outage costs one probe per back-off step,
//! however many targets the host serves.
//!
//! The probe is a free request (`GET /rate_limit`, which the service sends when a probe is due,
//! [`crate::GitHubClient::probe_outage`]): the cap can be short, so the first job after an
//! outage waits seconds, not minutes, without spending the rate limit. An ordinary request
//! probes only when no free probe came for [`PROBE_GRACE`] past its time (nothing sent one).
//!
//! Requests already on the wire when the gate closes may fail too: a failure counts only for
//! the round it was admitted in (`epoch`), so N targets failing together escalate the delay
//! once, not N times.

use crate::backoff::Backoff;
use crate::error::GitHubError;
use chrono::{DateTime, Utc};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The default schedule: 1 s doubling to 6 s, each delay drawn from `[d/2, d]`. Short because
/// the probes are free; a job queued during an outage starts within seconds of its end.
pub const OUTAGE_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    cap: Duration::from_secs(6),
};

/// How long past its time a probe waits for a free request before an ordinary one may be it.
pub const PROBE_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct State {
    /// Failed rounds in a row (0: open).
    failures: u32,
    /// The first failure of this outage.
    since: Option<DateTime<Utc>>,
    /// No request before this (while `failures > 0`).
    until: Option<DateTime<Utc>>,
    /// A probe is on the wire.
    probing: bool,
    /// Bumped at every close and every reopening: a failure admitted in an older round is
    /// not counted again.
    epoch: u64,
    /// The last failure, in words (no secrets: already redacted by the transport).
    detail: Option<String>,
}

/// What the gate looks like now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutageView {
    /// Failed rounds in a row; 0 when GitHub answers.
    pub consecutive_failures: u32,
    pub since: Option<DateTime<Utc>>,
    /// When the next probe may go out.
    pub next_try: Option<DateTime<Utc>>,
    pub detail: Option<String>,
}

/// The outage gate (see the module doc).
pub(crate) struct OutageGate {
    schedule: Backoff,
    state: Mutex<State>,
    /// Called after every change of state an observer may show (closed, escalated, reopened).
    on_change: Box<dyn Fn() + Send + Sync>,
}

/// Leave to send one request. Dropped without [`OutageGate::answered`] or
/// [`OutageGate::failed`] (the caller gave up on it), a probe frees the probe slot.
pub(crate) struct Ticket<'a> {
    gate: &'a OutageGate,
    epoch: u64,
    probe: bool,
    settled: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.probe && !self.settled {
            let mut s = self.gate.lock();
            if s.epoch == self.epoch {
                s.probing = false;
            }
        }
    }
}

impl OutageGate {
    pub(crate) fn new(schedule: Backoff, on_change: Box<dyn Fn() + Send + Sync>) -> Self {
        OutageGate {
            schedule,
            state: Mutex::new(State::default()),
            on_change,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Leave to send a free request (one that may probe) now, or the error that says when to
    /// try again.
    pub(crate) fn admit(&self, now: DateTime<Utc>) -> Result<Ticket<'_>, GitHubError> {
        self.admit_after(now, Duration::ZERO)
    }

    /// Leave to send a charged request now: while the gate is closed it probes only once a
    /// free probe is [`PROBE_GRACE`] overdue.
    pub(crate) fn admit_charged(&self, now: DateTime<Utc>) -> Result<Ticket<'_>, GitHubError> {
        self.admit_after(now, PROBE_GRACE)
    }

    fn admit_after(&self, now: DateTime<Utc>, grace: Duration) -> Result<Ticket<'_>, GitHubError> {
        let mut s = self.lock();
        if s.failures == 0 {
            return Ok(Ticket {
                gate: self,
                epoch: s.epoch,
                probe: false,
                settled: false,
            });
        }
        let until = s.until.unwrap_or(now);
        let grace = chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::zero());
        if until + grace <= now && !s.probing {
            s.probing = true;
            return Ok(Ticket {
                gate: self,
                epoch: s.epoch,
                probe: true,
                settled: false,
            });
        }
        Err(GitHubError::Unreachable {
            since: s.since.unwrap_or(now),
            next_try: until.max(now),
            failures: s.failures,
            detail: s.detail.clone().unwrap_or_default(),
        })
    }

    /// GitHub answered (any status but a 5xx): the outage, if any, is over for everyone.
    pub(crate) fn answered(&self, mut ticket: Ticket<'_>) {
        ticket.settled = true;
        let changed = {
            let mut s = self.lock();
            let was_closed = s.failures > 0;
            if was_closed {
                *s = State {
                    epoch: s.epoch + 1,
                    ..State::default()
                };
            }
            was_closed
        };
        if changed {
            tracing::info!("GitHub answers again; requests flow for every target");
            (self.on_change)();
        }
    }

    /// The request got a 5xx or no answer: closes (or keeps closing) the gate for the next
    /// step of the schedule, unless a request of a later round already did.
    pub(crate) fn failed(&self, mut ticket: Ticket<'_>, detail: &str, now: DateTime<Utc>) {
        ticket.settled = true;
        let (failures, delay) = {
            let mut s = self.lock();
            if s.epoch != ticket.epoch {
                return;
            }
            let delay = self.schedule.delay(s.failures);
            s.failures = s.failures.saturating_add(1);
            s.since.get_or_insert(now);
            s.until = Some(
                now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::seconds(1)),
            );
            s.probing = false;
            s.epoch += 1;
            s.detail = Some(detail.to_string());
            (s.failures, delay)
        };
        tracing::warn!(
            failures,
            delay_ms = delay.as_millis() as u64,
            detail,
            "GitHub unreachable; every target waits for the next try"
        );
        (self.on_change)();
    }

    pub(crate) fn view(&self) -> OutageView {
        let s = self.lock();
        OutageView {
            consecutive_failures: s.failures,
            since: s.since,
            next_try: s.until.filter(|_| s.failures > 0),
            detail: s.detail.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn gate(base_ms: u64, cap_ms: u64) -> (OutageGate, Arc<AtomicU32>) {
        let changes = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&changes);
        let g = OutageGate::new(
            Backoff {
                base: Duration::from_millis(base_ms),
                cap: Duration::from_millis(cap_ms),
            },
            Box::new(move || {
                seen.fetch_add(1, Ordering::SeqCst);
            }),
        );
        (g, changes)
    }

    fn ms(n: i64) -> chrono::Duration {
        chrono::Duration::milliseconds(n)
    }

    /// Fails one probe at `now` and returns the delay the gate chose.
    fn fail_round(g: &OutageGate, now: DateTime<Utc>) -> chrono::Duration {
        let t = g.admit(now).unwrap();
        g.failed(t, "HTTP 503", now);
        g.view().next_try.unwrap() - now
    }

    #[test]
    fn delays_double_within_their_jitter_and_stop_at_the_cap() {
        let (g, changes) = gate(1000, 180_000);
        let mut now = Utc::now();
        let (mut previous, mut previous_full) = (ms(0), ms(0));
        for step in 0..12u32 {
            let d = fail_round(&g, now);
            let full = ms(1000 * (1i64 << step.min(30))).min(ms(180_000));
            assert!(
                d >= full / 2 && d <= full,
                "step {step}: {d} not in [{}, {full}]",
                full / 2
            );
            // Equal jitter with a factor of two: below the cap a step is never shorter than
            // the one before.
            if full == previous_full * 2 {
                assert!(d >= previous, "step {step}: {d} < {previous}");
            }
            (previous, previous_full) = (d, full);
            now += d;
        }
        assert_eq!(g.view().consecutive_failures, 12);
        assert!(previous <= ms(180_000));
        assert_eq!(
            changes.load(Ordering::SeqCst),
            12,
            "every escalation is news"
        );
        // Jitter: the same step does not always get the same delay.
        let draws: std::collections::HashSet<i64> = (0..20)
            .map(|_| {
                let (g, _) = gate(1000, 180_000);
                fail_round(&g, now).num_milliseconds()
            })
            .collect();
        assert!(draws.len() > 1, "{draws:?}");
    }

    #[test]
    fn a_closed_gate_fails_fast_with_the_next_try_and_lets_one_probe_out() {
        let (g, _) = gate(1000, 60_000);
        let now = Utc::now();
        let first = g.admit(now).unwrap();
        let second = g.admit(now).unwrap();
        g.failed(first, "HTTP 502", now);
        let next = g.view().next_try.unwrap();
        match g.admit(now) {
            Err(GitHubError::Unreachable {
                next_try,
                failures,
                since,
                detail,
            }) => {
                assert_eq!((next_try, failures, since), (next, 1, now));
                assert_eq!(detail, "HTTP 502");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        // A request of the same round failing too does not escalate again.
        g.failed(second, "HTTP 502", now);
        assert_eq!(g.view().consecutive_failures, 1);
        assert_eq!(g.view().next_try, Some(next));
        // Reopened: exactly one probe; the rest fail fast until it answers.
        let probe = g.admit(next).unwrap();
        assert!(g.admit(next).is_err());
        assert!(g.admit(next + ms(5000)).is_err());
        g.failed(probe, "connection refused", next);
        assert_eq!(g.view().consecutive_failures, 2);
        let later = g.view().next_try.unwrap();
        assert!(later - next >= ms(1000) && later - next <= ms(2000));
        assert!(g.admit(later - ms(1)).is_err());
        assert!(g.admit(later).is_ok());
    }

    #[test]
    fn the_first_answer_reopens_the_gate_for_everyone() {
        let (g, changes) = gate(1000, 60_000);
        let now = Utc::now();
        let stale = g.admit(now).unwrap();
        fail_round(&g, now);
        fail_round(&g, now + ms(5000));
        let probe = g.admit(now + ms(60_000)).unwrap();
        g.answered(probe);
        let v = g.view();
        assert_eq!(
            (v.consecutive_failures, v.next_try, v.since),
            (0, None, None)
        );
        assert_eq!(changes.load(Ordering::SeqCst), 3);
        // Everyone gets through, no probe needed.
        let a = g.admit(now).unwrap();
        let b = g.admit(now).unwrap();
        // A failure from before the reopening does not close it again.
        g.failed(stale, "HTTP 503", now + ms(60_001));
        assert_eq!(g.view().consecutive_failures, 0);
        g.answered(a);
        g.answered(b);
        assert_eq!(
            changes.load(Ordering::SeqCst),
            3,
            "answers while open are not news"
        );
        // A new outage starts over at the first step.
        let d = fail_round(&g, now + ms(70_000));
        assert!(d <= ms(1000), "{d}");
    }

    #[test]
    fn a_probe_given_up_frees_the_slot() {
        let (g, _) = gate(100, 1000);
        let now = Utc::now();
        fail_round(&g, now);
        let at = g.view().next_try.unwrap();
        let probe = g.admit(at).unwrap();
        assert!(g.admit(at).is_err());
        drop(probe); // e.g. the caller's deadline passed
        assert!(g.admit(at).is_ok(), "another request may probe");
        assert_eq!(g.view().consecutive_failures, 1);
    }

    #[test]
    fn a_charged_request_probes_only_when_no_free_probe_came() {
        let (g, _) = gate(1000, 1000);
        let now = Utc::now();
        let t = g.admit_charged(now).unwrap();
        g.failed(t, "503", now);
        let due = g.view().next_try.unwrap();
        assert!(g.admit_charged(due).is_err(), "the free probe's turn");
        let grace = chrono::Duration::from_std(PROBE_GRACE).unwrap();
        assert!(g.admit_charged(due + grace - ms(1)).is_err());
        let probe = g.admit_charged(due + grace).unwrap();
        g.answered(probe);
        assert!(g.admit_charged(due + grace).is_ok(), "open for everyone");
    }
}
