//! Runner lifecycle on the watch stream: each attempt launched, changing state, concluded and
//! cleaned becomes a `runner_*` event, with the runner's name (from the journal) and the job it
//! took (from GitHub's job listings, which demand reads anyway). A cleaned runner's job is
//! forgotten, so the client's memory of runner jobs stays bounded by what is live.

use super::status::job_of;
use super::watchers::Watchers;
use crate::wire::via;
use rm_adapters::JournalAdapter;
use rm_agent::{AgentEvent, EventKind};
use rm_core::{AttemptId, Outcome};
use rm_github::GitHubClient;
use rm_proto::{Event, RunnerOutcome, UnixMillis};

/// What turns agent events into runner events.
pub struct RunnerEvents<'a> {
    pub journal: &'a JournalAdapter,
    pub client: &'a GitHubClient,
    pub watchers: &'a Watchers,
}

fn outcome(o: &Outcome) -> RunnerOutcome {
    match o {
        Outcome::CompletedJob => RunnerOutcome::CompletedJob,
        Outcome::ExitedIdleWithoutWork => RunnerOutcome::ExitedIdleWithoutWork,
        Outcome::Failed(_) => RunnerOutcome::Failed,
        Outcome::Orphaned => RunnerOutcome::Orphaned,
    }
}

impl RunnerEvents<'_> {
    async fn runner_name(&self, attempt: &AttemptId) -> String {
        let id = attempt.clone();
        self.journal
            .with(move |j| j.get_attempt(&id))
            .await
            .ok()
            .flatten()
            .map(|a| a.runner_name().to_string())
            .unwrap_or_default()
    }

    /// Publishes the runner event `event` describes, if any; true when runners changed (the
    /// status is worth publishing again). Reservations, adoptions and drains change what
    /// status shows without an event of their own.
    pub async fn on_event(&self, event: &AgentEvent) -> bool {
        let at = UnixMillis(event.at.as_millis());
        let target = event.target.to_string();
        match &event.kind {
            EventKind::Launched { attempt, .. } => {
                let runner_name = self.runner_name(attempt).await;
                self.watchers.event(Event::RunnerLaunched {
                    at,
                    attempt_id: attempt.to_string(),
                    runner_name,
                    target,
                });
            }
            EventKind::StateChanged { attempt, from, to } => {
                let runner_name = self.runner_name(attempt).await;
                let job = job_of(self.client, &runner_name).map(Box::new);
                self.watchers.event(Event::RunnerStateChanged {
                    at,
                    attempt_id: attempt.to_string(),
                    runner_name,
                    target,
                    from: via(from.as_str(), rm_proto::RunnerState::Unknown),
                    to: via(to.as_str(), rm_proto::RunnerState::Unknown),
                    job,
                });
            }
            EventKind::Concluded {
                attempt,
                outcome: o,
                ..
            } => {
                let runner_name = self.runner_name(attempt).await;
                let job = job_of(self.client, &runner_name).map(Box::new);
                self.watchers.event(Event::RunnerConcluded {
                    at,
                    attempt_id: attempt.to_string(),
                    runner_name,
                    target,
                    outcome: outcome(o),
                    job,
                });
            }
            EventKind::Cleaned { attempt } => {
                let runner_name = self.runner_name(attempt).await;
                self.client.forget_runner_job(&runner_name);
                self.watchers.event(Event::RunnerCleaned {
                    at,
                    attempt_id: attempt.to_string(),
                    target,
                });
            }
            EventKind::Reserved { .. } | EventKind::Adopted { .. } | EventKind::Drained { .. } => {}
            _ => return false,
        }
        true
    }
}
