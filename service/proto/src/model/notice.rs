//! Which notifications to raise, and when to hold them back: no storms.
//!
//! - A runner failure notifies at once unless its (target, failure class) notified in the last
//!   [`NOTIFY_EVERY_MS`] or another failure notified in the last [`BURST_QUIET_MS`]; those are
//!   held and summarised in one notice (`…and 4 more failures`) [`BURST_QUIET_MS`] after the
//!   first held one, and at most one summary per [`NOTIFY_EVERY_MS`] after that. A burst of
//!   any size so gives at most two notifications.
//! - GitHub unreachable for [`super::UNREACHABLE_NOTIFY_MS`] notifies once, and once when it
//!   answers again.
//! - Sign-in needed notifies once per loss of the credential; the service stopping notifies
//!   once per connection.

use super::words::{count, reason_words};
use crate::status::{Failure, FailureReason, GitHubHealthState, JobRef, Status};
use crate::time::UnixMillis;
use crate::watch::RunnerOutcome;
use std::collections::{HashMap, VecDeque};

/// At most one notification per (target, failure class) in this long.
pub const NOTIFY_EVERY_MS: i64 = 10 * 60 * 1000;
/// Failures held back in a burst are summarised this long after the first of them.
pub const BURST_QUIET_MS: i64 = 10 * 1000;
/// How many failure identities are remembered to recognise one delivered twice (by an event
/// and again in a status).
const REMEMBERED_FAILURES: usize = 256;

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    RunnerFailed,
    /// Failures held back in a burst, summarised.
    FailureSummary,
    SignInNeeded,
    SignedIn,
    GitHubUnreachable,
    GitHubBack,
    ServiceStopped,
    JobFinished,
    /// A newer release is available (once per version).
    UpdateAvailable,
    /// The service was updated (`Updated to X`, once per version).
    UpdateFinished,
    /// An update was refused or failed (once per version and reason), with the fix.
    UpdateFailed,
}

/// What clicking the notification does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeAction {
    /// Open the dashboard, at this failure (`attempt id`, else its time) when given.
    OpenDashboard {
        failure: Option<String>,
    },
    OpenSignIn,
    /// Open the dashboard at the update.
    OpenUpdate,
    /// Open a page (a job on GitHub).
    OpenUrl(String),
}

/// One notification to raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub title: String,
    pub body: String,
    pub action: NoticeAction,
}

/// What the notification rules remember between inputs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Memory {
    notified: HashMap<(String, FailureReason), UnixMillis>,
    last_individual: Option<UnixMillis>,
    held: Vec<Failure>,
    first_held: Option<UnixMillis>,
    last_summary: Option<UnixMillis>,
    seen: VecDeque<(i64, String, Option<String>)>,
    unreachable_notified: bool,
    pub(crate) sign_in_notified: bool,
    pub(crate) service_stop_notified: bool,
}

impl Memory {
    /// Whether this failure was noted before (remembers the last few hundred).
    pub(crate) fn seen_before(&self, f: &Failure) -> bool {
        self.seen.contains(&identity(f))
    }

    pub(crate) fn failure(&mut self, f: &Failure, now: UnixMillis, out: &mut Vec<Notice>) {
        self.seen.push_back(identity(f));
        if self.seen.len() > REMEMBERED_FAILURES {
            self.seen.pop_front();
        }
        let key = (f.target.clone(), f.reason);
        let recent_for_key = self
            .notified
            .get(&key)
            .is_some_and(|t| now.0 - t.0 < NOTIFY_EVERY_MS);
        let in_burst = self
            .last_individual
            .is_some_and(|t| now.0 - t.0 < BURST_QUIET_MS);
        if recent_for_key || in_burst {
            self.held.push(f.clone());
            self.first_held.get_or_insert(now);
            return;
        }
        self.notified.insert(key, now);
        self.last_individual = Some(now);
        out.push(runner_failed(f));
    }

    /// When the held failures are summarised.
    pub(crate) fn flush_due(&self) -> Option<UnixMillis> {
        let first = self.first_held?;
        let quiet = first.0 + BURST_QUIET_MS;
        let spaced = self.last_summary.map_or(quiet, |t| t.0 + NOTIFY_EVERY_MS);
        Some(UnixMillis(quiet.max(spaced)))
    }

    pub(crate) fn flush(&mut self, now: UnixMillis, out: &mut Vec<Notice>) {
        match self.flush_due() {
            Some(due) if now >= due => {}
            _ => return,
        }
        let held = std::mem::take(&mut self.held);
        self.first_held = None;
        self.last_summary = Some(now);
        for f in &held {
            self.notified.insert((f.target.clone(), f.reason), now);
        }
        // Old entries can go: they no longer hold anything back.
        self.notified.retain(|_, t| now.0 - t.0 < NOTIFY_EVERY_MS);
        if let Some(n) = summary(&held) {
            out.push(n);
        }
    }

    pub(crate) fn sign_in_needed(&mut self, reason: &str, out: &mut Vec<Notice>) {
        if self.sign_in_notified {
            return;
        }
        self.sign_in_notified = true;
        out.push(Notice {
            kind: NoticeKind::SignInNeeded,
            title: "Sign in to GitHub again".to_owned(),
            body: format!(
                "{}. No runner starts until you sign in: click to sign in.",
                reason.trim_end_matches('.')
            ),
            action: NoticeAction::OpenSignIn,
        });
    }

    pub(crate) fn github_health(
        &mut self,
        status: &Status,
        now: UnixMillis,
        out: &mut Vec<Notice>,
    ) {
        let health = &status.github_health;
        match (health.state, health.since) {
            (GitHubHealthState::Unreachable, Some(since))
                if now.0 - since.0 >= super::UNREACHABLE_NOTIFY_MS
                    && !self.unreachable_notified =>
            {
                self.unreachable_notified = true;
                let detail = health
                    .detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                out.push(Notice {
                    kind: NoticeKind::GitHubUnreachable,
                    title: "GitHub unreachable".to_owned(),
                    body: format!(
                        "GitHub has not answered this machine for {}{detail}. Running jobs go \
                         on; no new runner starts until it answers. Check this machine's network \
                         connection.",
                        super::words::elapsed(now.0 - since.0)
                    ),
                    action: NoticeAction::OpenDashboard { failure: None },
                });
            }
            (GitHubHealthState::Ok, _) if self.unreachable_notified => {
                self.unreachable_notified = false;
                out.push(Notice {
                    kind: NoticeKind::GitHubBack,
                    title: "GitHub reachable again".to_owned(),
                    body: "GitHub answers again: runners start for queued jobs.".to_owned(),
                    action: NoticeAction::OpenDashboard { failure: None },
                });
            }
            _ => {}
        }
    }
}

fn identity(f: &Failure) -> (i64, String, Option<String>) {
    (f.at.0, f.target.clone(), f.attempt_id.clone())
}

/// The fix in a sentence: the service's "nothing: …" becomes "Nothing to do: …".
pub fn fix_sentence(fix: &str) -> String {
    let fix = fix.trim().trim_end_matches('.');
    match fix.strip_prefix("nothing") {
        Some(rest) => format!("Nothing to do{rest}."),
        None => format!("What to do: {fix}."),
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn runner_failed(f: &Failure) -> Notice {
    Notice {
        kind: NoticeKind::RunnerFailed,
        title: format!("Runner failed · {}", f.target),
        body: match &f.detail {
            Some(detail) => format!(
                "{}. {} {}",
                capitalised(reason_words(f.reason)),
                detail,
                fix_sentence(&f.fix)
            ),
            None => format!(
                "{}. {}",
                capitalised(reason_words(f.reason)),
                fix_sentence(&f.fix)
            ),
        },
        action: NoticeAction::OpenDashboard {
            failure: Some(failure_anchor(f)),
        },
    }
}

/// How the dashboard finds a failure: its attempt id, else its time.
pub fn failure_anchor(f: &Failure) -> String {
    f.attempt_id.clone().unwrap_or_else(|| f.at.0.to_string())
}

fn summary(held: &[Failure]) -> Option<Notice> {
    let latest = held.last()?;
    let mut targets: Vec<&str> = Vec::new();
    for f in held {
        if !targets.contains(&f.target.as_str()) {
            targets.push(&f.target);
        }
    }
    let title = match targets.as_slice() {
        [one] => format!("Runner failed · {one}"),
        [first, rest @ ..] => format!(
            "Runner failed · {first} and {}",
            count(rest.len(), "other target", "other targets")
        ),
        [] => return None,
    };
    Some(Notice {
        kind: NoticeKind::FailureSummary,
        title,
        body: format!(
            "…and {} (latest: {}). Open the dashboard for each reason and its fix.",
            count(held.len(), "more failure", "more failures"),
            reason_words(latest.reason)
        ),
        action: NoticeAction::OpenDashboard {
            failure: Some(failure_anchor(latest)),
        },
    })
}

pub(crate) fn service_stopped() -> Notice {
    Notice {
        kind: NoticeKind::ServiceStopped,
        title: "runner-manager service stopped".to_owned(),
        body: "No new runner starts until it runs again: start it with `runner-manager daemon \
               run` or `runner-manager service install`. The tray reconnects by itself."
            .to_owned(),
        action: NoticeAction::OpenDashboard { failure: None },
    }
}

pub(crate) fn signed_in(login: Option<&str>) -> Notice {
    Notice {
        kind: NoticeKind::SignedIn,
        title: match login {
            Some(l) => format!("Signed in as {l}"),
            None => "Signed in to GitHub".to_owned(),
        },
        body: "The service keeps the credential and renews it; runners start for your \
               targets' jobs."
            .to_owned(),
        action: NoticeAction::OpenDashboard { failure: None },
    }
}

pub(crate) fn job_finished(
    target: &str,
    outcome: RunnerOutcome,
    job: Option<&JobRef>,
) -> Option<Notice> {
    if outcome != RunnerOutcome::CompletedJob {
        return None;
    }
    let name = job.and_then(|j| j.name.clone());
    Some(Notice {
        kind: NoticeKind::JobFinished,
        title: format!("Job finished · {target}"),
        body: match &name {
            Some(n) => format!("{n} ran on this machine; its runner was removed."),
            None => "A job ran on this machine; its runner was removed.".to_owned(),
        },
        action: match job.and_then(|j| j.html_url.clone()) {
            Some(url) => NoticeAction::OpenUrl(url),
            None => NoticeAction::OpenDashboard { failure: None },
        },
    })
}
