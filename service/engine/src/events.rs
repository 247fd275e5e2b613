//! The event pump: hands each of the agent's events to the parts that learn from it (the
//! runner events on the watch stream, the failure log, the demand view, the last GitHub
//! contact, the launch problems, the host checks) and publishes the status again when any of
//! them changed what clients see.

use super::runner_events::RunnerEvents;
use super::state::Daemon;
use rm_agent::{AgentEvent, EventKind};
use std::sync::Arc;
use tokio::sync::broadcast::{error::RecvError, Receiver};

/// Runs until the agent's channel closes.
pub async fn pump(daemon: Arc<Daemon>, mut rx: Receiver<AgentEvent>) {
    loop {
        let event = match rx.recv().await {
            Ok(e) => e,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "event pump lagged behind the agent");
                daemon.publish_status().await;
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if matches!(
            event.kind,
            EventKind::Launched { .. }
                | EventKind::StateChanged { .. }
                | EventKind::Concluded { .. }
                | EventKind::Cleaned { .. }
        ) {
            // The pool's view of this host (its runners, its free room) changed.
            daemon.pool.runners_changed();
        }
        if handle(&daemon, &event).await {
            daemon.publish_status().await;
        }
    }
}

/// Hands one event to every part; true when the status changed in a way watchers should see.
async fn handle(daemon: &Daemon, event: &AgentEvent) -> bool {
    // A runner may have started: the meter samples while any runs.
    daemon.meters.poke();
    daemon.contact.on_event(event, &daemon.journal).await;
    let runners = RunnerEvents {
        journal: &daemon.journal,
        client: &daemon.client,
        watchers: &daemon.watchers,
    };
    let mut changed = runners.on_event(event).await;
    let job = match &event.kind {
        EventKind::Concluded { attempt, .. } => daemon
            .client
            .job_of_runner(&attempt.runner_name())
            .map(|j| {
                let name = j.name.unwrap_or_else(|| format!("#{}", j.job_id));
                format!("{name} (run {} of {})", j.run_id, j.repository)
            }),
        _ => None,
    };
    changed |= daemon
        .failures
        .on_event(event, job.as_deref(), &daemon.watchers);
    changed |= daemon.left_registrations.on_event(event);
    changed |= daemon.demand.on_event(event, &daemon.client);
    changed |= daemon.launch.on_event(&daemon.journal, event).await;
    changed |= daemon.doctor.on_event(event);
    // A policy's state is shown whatever the part that cares about it said.
    changed | matches!(event.kind, EventKind::PolicyStateChanged { .. })
}
