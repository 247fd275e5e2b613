//! The event pump: hands each of the agent's events to the parts that learn from it (the
//! runner events on the watch stream, the failure log, the demand view, the last GitHub
//! contact, the launch problems, the host checks) and publishes the status again when any of
//! them changed what clients see.

use super::runner_events::RunnerEvents;
use super::state::Daemon;
use rm_agent::{AgentEvent, EventKind};
use rm_core::AttemptId;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::broadcast::{error::RecvError, Receiver};

/// Runs until the agent's channel closes.
pub async fn pump(daemon: Arc<Daemon>, mut rx: Receiver<AgentEvent>) {
    // Runners started for a queue holding a fork's job (no workspace, no cache writes), until
    // cleaned: the fork guard has nothing to undo for them.
    let mut fork_spawns = HashSet::new();
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
        if handle(&daemon, &event, &mut fork_spawns).await {
            daemon.publish_status().await;
        }
    }
}

/// A runner allowed to write its target's caches (no queued job it could take came from a fork
/// when it started) that GitHub then gave a fork's job: what that job wrote cannot be trusted,
/// so the namespace's caches are removed, in use or not. Known only when a demand listing saw
/// the runner's job (a job shorter than a poll may go unseen).
async fn fork_guard(daemon: &Daemon, event: &AgentEvent, fork_spawns: &mut HashSet<AttemptId>) {
    let attempt = match &event.kind {
        EventKind::Launched {
            attempt,
            fork_jobs: true,
            ..
        } => {
            fork_spawns.insert(attempt.clone());
            return;
        }
        EventKind::Cleaned { attempt } => {
            fork_spawns.remove(attempt);
            return;
        }
        EventKind::Concluded { attempt, .. } if !fork_spawns.contains(attempt) => attempt,
        _ => return,
    };
    let Some(job) = daemon
        .client
        .job_of_runner(&attempt.runner_name())
        .filter(|j| j.from_fork)
    else {
        return;
    };
    if let Some(slots) = daemon.caches.workspaces() {
        // The runner may be cleaned (its slot kept) before or after this: a reset deletes an
        // idle slot at once and a slot in use when it is given back, so both orders end with
        // nothing kept.
        let id = attempt.clone();
        if let Ok(Some(a)) = daemon.journal.with(move |j| j.get_attempt(&id)).await {
            let policy = a.policy_id();
            match tokio::task::spawn_blocking(move || slots.reset_policy(policy)).await {
                Ok(Ok(false)) => {}
                Ok(Ok(true)) => tracing::warn!(
                    gh_target = %event.target,
                    attempt = %attempt,
                    job = job.job_id,
                    "a job from a fork ran on a runner of a target with persistent workspaces (GitHub gave it a job queued after the runner started); the target's kept workspaces are deleted"
                ),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "the workspaces a fork's job may have used could not be deleted: run `runner-manager repo set TARGET --workspace ephemeral`")
                }
                Err(e) => {
                    tracing::error!(error = %e, "the workspaces a fork's job may have used could not be deleted: run `runner-manager repo set TARGET --workspace ephemeral`")
                }
            }
        }
    }
    let Some(caches) = daemon.caches.caches() else {
        return;
    };
    let Some(namespace) = caches.writer_of(attempt.as_str()) else {
        return;
    };
    tracing::warn!(
        gh_target = %event.target,
        attempt = %attempt,
        job = job.job_id,
        namespace = %namespace,
        "a job from a fork ran on a runner that could write the caches (GitHub gave it a job queued after it started); removing that namespace's caches so no later job uses what it wrote"
    );
    let purged = tokio::task::spawn_blocking(move || caches.purge(&namespace)).await;
    match purged {
        Ok(Ok(r)) => tracing::info!(
            removed = r.removed.len(),
            "caches written by a fork's job removed"
        ),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the caches a fork's job wrote could not be removed: clear them with `runner-manager cache clear`")
        }
        Err(e) => {
            tracing::error!(error = %e, "the caches a fork's job wrote could not be removed: clear them with `runner-manager cache clear`")
        }
    }
}

/// Hands one event to every part; true when the status changed in a way watchers should see.
async fn handle(daemon: &Daemon, event: &AgentEvent, fork_spawns: &mut HashSet<AttemptId>) -> bool {
    // A runner may have started: the meter samples while any runs.
    daemon.meters.poke();
    daemon.contact.on_event(event, &daemon.journal).await;
    let runners = RunnerEvents {
        journal: &daemon.journal,
        client: &daemon.client,
        watchers: &daemon.watchers,
    };
    fork_guard(daemon, event, fork_spawns).await;
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
