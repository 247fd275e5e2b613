//! The loop: exit notifications, shutdown and the drain deadline.

use crate::support::*;
use rm_agent::{AgentEvent, Clock, DrainReport, EventKind, RunnerStatus, ScrubError};
use rm_core::{AttemptState, Evidence, Outcome};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

async fn wait_for(
    rx: &mut broadcast::Receiver<AgentEvent>,
    pred: impl Fn(&EventKind) -> bool,
) -> EventKind {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let e = rx.recv().await.unwrap();
            if pred(&e.kind) {
                return e.kind;
            }
        }
    })
    .await
    .expect("event within 5 s")
}

#[tokio::test]
async fn a_runner_exit_triggers_an_immediate_pass() {
    let mut h = Harness::new();
    let (a, p) = h.seed("exitnotify", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let lp = Arc::new(h.make_loop(target()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let runner = {
        let lp = lp.clone();
        tokio::spawn(async move { lp.run(stop_rx).await })
    };
    wait_for(&mut h.events, |e| {
        matches!(e, EventKind::PassCompleted { .. })
    })
    .await;

    // The job ends and the runner exits; the poll interval is an hour on a clock that does
    // not move, so only the notification can start the pass.
    h.host.kill(p.unwrap());
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    lp.exit_notifier().notify_one();
    let e = wait_for(&mut h.events, |e| matches!(e, EventKind::Concluded { .. })).await;
    assert!(matches!(
        e,
        EventKind::Concluded {
            outcome: Outcome::CompletedJob,
            ..
        }
    ));
    assert_eq!(h.clock.now(), t(0));

    stop_tx.send(true).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        drained,
        DrainReport {
            remaining: 0,
            timed_out: false
        }
    );
}

#[tokio::test]
async fn a_drain_stops_starting_and_gives_up_at_its_deadline() {
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    let (a, p) = h.seed("drainbusy1", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github.set_jobs(3);
    let lp = h.make_loop(target());
    let report = lp.run_until_drained(Some(Duration::from_secs(60))).await;
    assert_eq!(
        report,
        DrainReport {
            remaining: 1,
            timed_out: true
        }
    );
    let elapsed = h.clock.now().duration_since(t(0));
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(70),
        "{elapsed:?}"
    );
    assert_eq!(
        h.journal.attempts().len(),
        1,
        "nothing started while draining"
    );
    assert!(h.host.is_alive(p.unwrap()), "the job was not interrupted");
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::Drained {
            remaining: 1,
            timed_out: true
        }
    )));
}

#[tokio::test]
async fn a_drain_ends_when_the_last_runner_ends() {
    let h = Harness::new();
    h.clock.set_auto_advance(true);
    let (a, p) = h.seed("drainends1", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.host
        .state
        .lock()
        .unwrap()
        .dies_after
        .insert(p.unwrap().pid, 3);
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    let lp = h.make_loop(target());
    let report = lp.run_until_drained(None).await;
    assert_eq!(
        report,
        DrainReport {
            remaining: 0,
            timed_out: false
        }
    );
    assert!(h.journal.attempt(a.id()).outcome().is_some());
}

#[tokio::test]
async fn shutdown_with_a_runner_left_hands_it_to_the_next_start() {
    // The deadline passes with a runner still busy; a new loop (the next start) adopts it.
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    let (a, _) = h.seed("handover01", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let first = h.make_loop(target());
    first.run_until_drained(Some(Duration::from_secs(10))).await;
    h.events();
    let next = h.make_loop(target());
    next.recover().await;
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::Adopted { .. })));
    assert_eq!(h.journal.attempt(a.id()).state(), AttemptState::Busy);
}

#[tokio::test]
async fn a_retired_target_starts_nothing_and_ends_once_its_runner_is_cleaned() {
    let mut h = Harness::new();
    let (a, p) = h.seed("retirebusy", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let lp = Arc::new(h.make_loop(target()));
    let (_stop_tx, stop_rx) = watch::channel(false);
    let runner = {
        let lp = lp.clone();
        tokio::spawn(async move { lp.run(stop_rx).await })
    };
    wait_for(&mut h.events, |e| {
        matches!(e, EventKind::PassCompleted { .. })
    })
    .await;

    // The target is removed (its policy deleted) while its runner runs a job; demand appears.
    h.journal.state.lock().unwrap().policies.clear();
    lp.retire();
    h.github.set_jobs(3);
    lp.wake();
    wait_for(&mut h.events, |e| {
        matches!(
            e,
            EventKind::PassCompleted {
                active_owned: 1,
                ..
            }
        )
    })
    .await;
    lp.wake();
    wait_for(&mut h.events, |e| {
        matches!(
            e,
            EventKind::PassCompleted {
                active_owned: 1,
                ..
            }
        )
    })
    .await;
    assert_eq!(h.github.jit_calls(), 0, "a retired target starts nothing");
    assert!(
        h.host.stops().is_empty(),
        "its running job is not interrupted"
    );
    assert!(!runner.is_finished());

    // The job ends: the runner is concluded and cleaned under the deleted policy, and the
    // loop ends by itself (no shutdown).
    h.host.kill(p.unwrap());
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    lp.wake();
    let drained = tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        drained,
        DrainReport {
            remaining: 0,
            timed_out: false
        }
    );
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert_eq!(h.github.jit_calls(), 0);
}

#[tokio::test]
async fn a_retired_target_whose_directory_is_not_removed_yet_ends_only_once_it_is_cleaned() {
    let mut h = Harness::new();
    let (a, p) = h.seed("retirestuck", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    // The first removal of its directory fails (a file still held open, say).
    h.host
        .state
        .lock()
        .unwrap()
        .scrub_script
        .push_back(ScrubError {
            retryable: true,
            detail: "directory busy".into(),
        });
    let lp = Arc::new(h.make_loop(target()));
    let (_stop_tx, stop_rx) = watch::channel(false);
    let runner = {
        let lp = lp.clone();
        tokio::spawn(async move { lp.run(stop_rx).await })
    };
    wait_for(&mut h.events, |e| {
        matches!(e, EventKind::PassCompleted { .. })
    })
    .await;
    h.journal.state.lock().unwrap().policies.clear();
    lp.retire();

    // The job ends: the runner is concluded (nothing active any more) but its directory
    // stays; the retired loop keeps it, and does not end.
    h.host.kill(p.unwrap());
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    lp.wake();
    wait_for(&mut h.events, |e| {
        matches!(e, EventKind::CleanupDeferred { .. })
    })
    .await;
    for _ in 0..2 {
        lp.wake();
        wait_for(&mut h.events, |e| {
            matches!(
                e,
                EventKind::PassCompleted {
                    active_owned: 0,
                    ..
                }
            )
        })
        .await;
    }
    assert!(
        !runner.is_finished(),
        "the loop ended with its runner's directory left to nobody"
    );
    assert!(!h.journal.attempt(a.id()).is_cleaned());

    // The retry is due: the directory goes, then the loop ends by itself.
    h.clock.advance(Duration::from_secs(60));
    lp.wake();
    let drained = tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .expect("the loop ends once its runner is cleaned")
        .unwrap();
    assert_eq!(drained.remaining, 0);
    assert!(h.journal.attempt(a.id()).is_cleaned());
}

/// (uncleaned-attempt reads, host-capacity reads) so far.
fn reads(h: &Harness) -> (u32, u32) {
    let st = h.journal.state.lock().unwrap();
    (st.uncleaned_reads, st.capacity_reads)
}

fn counts_reads(h: &Harness) -> u32 {
    h.journal.state.lock().unwrap().counts_reads
}

#[tokio::test]
async fn an_idle_pass_skips_the_journal_reads_it_cannot_need() {
    let h = Harness::new();
    let lp = h.make_loop(target());
    // Startup reads the attempts; no demand, so the capacity is never needed.
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(reads(&h), (1, 0));
    // The journal said "none" and only this loop reserves attempts of its policies: so
    // they hold no slot either, and an idle pass reads neither.
    let counted = counts_reads(&h);
    lp.pass().await;
    lp.pass().await;
    assert_eq!(reads(&h), (1, 0));
    assert_eq!(counts_reads(&h), counted);
    // ...but that memory is trusted for a few minutes only.
    h.clock.advance(Duration::from_secs(301));
    lp.pass().await;
    assert_eq!(reads(&h), (2, 0));

    // Demand: the host-wide counts and the capacity are read (for the allocation, then again
    // under the allocation lock) and a runner starts; the next pass supervises it.
    h.github.set_jobs(1);
    let counted = counts_reads(&h);
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(reads(&h), (2, 2));
    assert_eq!(counts_reads(&h), counted + 2);
    h.github.set_jobs(0);
    lp.pass().await;
    assert_eq!(reads(&h).0, 3, "an attempt reserved since: read again");
    lp.pass().await;
    assert_eq!(reads(&h).0, 4, "a live attempt: read every pass");
}

#[tokio::test]
async fn a_changed_policy_set_reads_the_attempts_again() {
    let h = Harness::new();
    let lp = h.make_loop(target());
    lp.pass().await;
    lp.pass().await;
    assert_eq!(reads(&h).0, 1);
    // A policy added to the target (its attempts are unknown to this loop's memory).
    h.journal
        .add_policy(2, &target(), Some(1), rm_core::PolicyState::Active);
    h.seed_for("otherpolicy1", 2, AttemptState::Busy);
    lp.pass().await;
    assert_eq!(reads(&h).0, 2);
}
