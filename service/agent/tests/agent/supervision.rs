//! Supervision rules, one scenario each.

use crate::support::*;
use rm_agent::{DeleteOutcome, EventKind, RunnerStatus, ScrubError};
use rm_core::{AttemptState, Evidence, FailureReason, Outcome, PolicyState, TerminateReason};
use std::time::Duration;

const FIVE_MIN: Duration = Duration::from_secs(300);

fn concluded(events: &[EventKind]) -> Vec<(Outcome, bool, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Concluded {
                outcome,
                deregistered,
                replace,
                ..
            } => Some((*outcome, *deregistered, *replace)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn registration_timeout_terminates_then_concludes_and_replaces() {
    let mut h = Harness::new();
    let (a, p) = h.seed("regtimeout1", AttemptState::Starting);
    let p = p.unwrap();
    // JIT registrations show offline until the listener connects; this one never does.
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Offline);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    lp.recover().await;

    h.clock.advance(FIVE_MIN - Duration::from_secs(1));
    lp.pass().await;
    assert!(h.host.stops().is_empty(), "not yet due");
    assert_eq!(h.journal.attempt(a.id()).state(), AttemptState::Starting);

    h.clock.advance(Duration::from_secs(1));
    h.clear_calls();
    h.events();
    lp.pass().await;
    assert_eq!(h.host.stops(), vec![p]);
    let stored = h.journal.attempt(a.id());
    assert_eq!(
        stored.outcome(),
        Some(Outcome::Failed(
            FailureReason::TerminatedAfterRegistrationTimeout
        ))
    );
    assert_eq!(
        stored.terminate_intent(),
        Some(TerminateReason::RegistrationTimeout)
    );
    assert!(stored.is_cleaned());
    assert_eq!(h.github.deletes(), vec![55]);
    // Intent journalled before the stop; deregistered before the outcome is journalled.
    let calls = h.calls();
    let pos = |c: &str| calls.iter().position(|x| x == c).unwrap();
    assert!(
        pos("journal.update(starting)") < pos("host.stop"),
        "{calls:?}"
    );
    assert!(pos("host.stop") < pos("github.delete"), "{calls:?}");
    assert!(
        pos("github.delete") < pos("journal.update(failed)"),
        "{calls:?}"
    );
    let events = h.events();
    assert_eq!(
        concluded(&events),
        vec![(
            Outcome::Failed(FailureReason::TerminatedAfterRegistrationTimeout),
            true,
            true
        )]
    );
    // The demand remains: a replacement was launched in the same pass.
    assert!(events
        .iter()
        .any(|e| matches!(e, EventKind::Launched { .. })));
    assert_eq!(h.journal.attempts().len(), 2);
}

#[tokio::test]
async fn an_idle_runner_past_the_idle_timeout_is_a_surplus_and_not_replaced() {
    let mut h = Harness::new();
    let (a, p) = h.seed("idlesurplus", AttemptState::Idle);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.recover().await;
    h.clock.advance(FIVE_MIN);
    lp.pass().await;
    assert_eq!(h.host.stops(), vec![p.unwrap()]);
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::ExitedIdleWithoutWork));
    assert!(stored.is_cleaned());
    assert_eq!(h.github.deletes(), vec![55]);
    assert_eq!(
        concluded(&h.events()),
        vec![(Outcome::ExitedIdleWithoutWork, true, false)]
    );
    assert_eq!(h.journal.attempts().len(), 1, "no replacement");
}

#[tokio::test]
async fn a_job_too_short_to_be_seen_busy_is_completed_from_the_worker_log() {
    let h = Harness::new();
    let (a, p) = h.seed("shortjob01", AttemptState::Idle);
    h.host.kill(p.unwrap());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    let lp = h.make_loop(target());
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert!(h.github.deletes().is_empty(), "not listed: no DELETE");
}

#[tokio::test]
async fn a_crash_mid_job_is_orphaned_deregistered_and_replaced() {
    let mut h = Harness::new();
    let (a, p) = h.seed("crashjob01", AttemptState::Busy);
    h.host.kill(p.unwrap());
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::Orphaned));
    assert!(stored.is_cleaned());
    assert_eq!(h.github.deletes(), vec![55]);
    assert_eq!(
        concluded(&h.events()),
        vec![(Outcome::Orphaned, true, true)]
    );
}

#[tokio::test]
async fn a_runner_that_finishes_after_the_inventory_read_is_completed_not_orphaned() {
    let mut h = Harness::new();
    let (a, p) = h.seed("raceexit01", AttemptState::Busy);
    // The inventory of this pass still says busy; the runner then finishes its job, exits and
    // GitHub removes its (ephemeral) registration before the process is inspected.
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github
        .state
        .lock()
        .unwrap()
        .vanish_after_inventory
        .push(a.runner_name().to_owned());
    h.host.kill(p.unwrap());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    let lp = h.make_loop(target());
    h.clear_calls();
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert!(
        h.github.deletes().is_empty(),
        "no DELETE for a runner GitHub dropped"
    );
    assert!(
        h.calls().iter().any(|c| c == "github.runner_by_name"),
        "the runner is re-read before concluding: {:?}",
        h.calls()
    );
    assert_eq!(
        concluded(&h.events()),
        vec![(Outcome::CompletedJob, false, false)]
    );
}

#[tokio::test]
async fn a_dead_runner_github_still_shows_busy_on_a_fresh_read_is_orphaned_unless_its_job_completed(
) {
    let h = Harness::new();
    let (a, p) = h.seed("racebusy01", AttemptState::Busy);
    let (done, dp) = h.seed("racebusy02", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 56, true, RunnerStatus::Online);
    h.github
        .list(done.runner_name(), 57, true, RunnerStatus::Online);
    h.host.kill(p.unwrap());
    h.host.kill(dp.unwrap());
    h.host.set_evidence(a.id(), Evidence::JobStarted);
    h.host.set_evidence(done.id(), Evidence::JobCompleted);
    let lp = h.make_loop(target());
    lp.pass().await;
    // rm-core's rules: a job that started and never completed, the exit unknown → orphaned
    // (R23); the listener's own completion line wins over GitHub's lagging view (R21).
    assert_eq!(h.journal.attempt(a.id()).outcome(), Some(Outcome::Orphaned));
    assert_eq!(
        h.journal.attempt(done.id()).outcome(),
        Some(Outcome::CompletedJob)
    );
    let mut deletes = h.github.deletes();
    deletes.sort_unstable();
    assert_eq!(deletes, vec![56, 57]);
}

#[tokio::test]
async fn a_withdrawn_assignment_goes_back_to_idle() {
    let h = Harness::new();
    let (a, _) = h.seed("withdrawn1", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(h.journal.attempt(a.id()).state(), AttemptState::Idle);
    assert!(h.host.stops().is_empty());
    assert!(h.github.deletes().is_empty());
}

#[tokio::test]
async fn a_busy_live_runner_is_never_interrupted() {
    let h = Harness::new();
    let (a, p) = h.seed("busylong01", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github.set_jobs(5);
    let lp = h.make_loop(target());
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(3600));
        lp.pass().await;
    }
    // Queued jobs want more runners than the policy allows; the busy one is never the one
    // stopped to make room.
    assert!(h.host.is_alive(p.unwrap()));
    assert!(!h.host.stops().contains(&p.unwrap()));
    assert_eq!(h.journal.attempt(a.id()).state(), AttemptState::Busy);
}

#[tokio::test]
async fn a_runner_killed_mid_job_is_a_crash_and_its_refused_removal_backs_off_then_gives_up() {
    let mut h = Harness::new();
    let (a, p) = h.seed("crashed001", AttemptState::Busy);
    h.host.set_evidence(a.id(), Evidence::JobStarted);
    h.host.end(
        p.unwrap(),
        rm_core::ProcessExit {
            code: Some(137),
            signal: None,
        },
    );
    // GitHub keeps counting the runner busy (for ~10 minutes on github.com) and refuses
    // every DELETE meanwhile.
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github.state.lock().unwrap().delete_script.extend([
        DeleteOutcome::StillRunningJob,
        DeleteOutcome::StillRunningJob,
        DeleteOutcome::StillRunningJob,
        DeleteOutcome::StillRunningJob,
    ]);
    let lp = h.make_loop(target());
    h.clear_calls();
    lp.pass().await;
    // Concluded and cleaned at once: a crash, never a success.
    let stored = h.journal.attempt(a.id());
    assert_eq!(
        stored.outcome(),
        Some(Outcome::Failed(FailureReason::RunnerCrashed))
    );
    assert!(stored.is_cleaned());
    let events = h.events();
    let exit = events.iter().find_map(|e| match e {
        EventKind::Concluded { exit, .. } => Some(*exit),
        _ => None,
    });
    assert_eq!(
        exit.flatten().map(|e| e.describe()).as_deref(),
        Some("was killed by signal 9 (SIGKILL)")
    );
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::DeregisterRefused {
            retry_in: Some(_),
            refusals: 1,
            ..
        }
    )));
    // Passes every 2 s for 15 minutes: the DELETE goes out at 0, 1, 4 and 11 minutes only.
    let mut delete_times = vec![0u64];
    for tick in 1..=450u64 {
        h.clock.advance(Duration::from_secs(2));
        let before = h.github.deletes().len();
        lp.pass().await;
        if h.github.deletes().len() > before {
            delete_times.push(tick * 2);
        }
    }
    assert_eq!(delete_times, vec![0, 60, 240, 660], "backed off");
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::DeregisterRefused {
            retry_in: None,
            refusals: 4,
            ..
        }
    )));
    // What the crash cost at GitHub: one inventory listing (the process had ended) and four
    // DELETEs; no second look at a runner the service saw die.
    let calls = h.calls();
    let count = |name: &str| calls.iter().filter(|c| c.as_str() == name).count();
    assert_eq!(count("github.runner_by_name"), 0);
    assert_eq!(count("github.delete"), 4);
    assert_eq!(h.github.inventory_calls(), 1);
}

#[tokio::test]
async fn a_late_success_ends_the_retries() {
    let mut h = Harness::new();
    let (a, p) = h.seed("refused001", AttemptState::Busy);
    h.host.kill(p.unwrap());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    h.github
        .state
        .lock()
        .unwrap()
        .delete_script
        .push_back(DeleteOutcome::StillRunningJob);
    let lp = h.make_loop(target());
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned(), "concluded without waiting for GitHub");
    h.clock.advance(Duration::from_secs(61));
    lp.pass().await;
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::DeregisteredLate { .. })));
    h.clock.advance(Duration::from_secs(600));
    lp.pass().await;
    assert_eq!(
        h.github.deletes(),
        vec![55, 55],
        "nothing after the success"
    );
}

#[tokio::test]
async fn github_unreachable_means_nothing_destructive() {
    let h = Harness::new();
    let (idle, idle_p) = h.seed("blindidle1", AttemptState::Idle);
    let (dead, dead_p) = h.seed("blinddead1", AttemptState::Busy);
    let (_starting, _) = h.seed("blindstart", AttemptState::Starting);
    h.host.kill(dead_p.unwrap());
    h.github
        .list(idle.runner_name(), 55, false, RunnerStatus::Online);
    h.github
        .list(dead.runner_name(), 56, true, RunnerStatus::Online);
    h.github.set_jobs(3);
    h.github.set_unreachable(true);
    let lp = h.make_loop(target());
    h.clock.advance(Duration::from_secs(3600));
    let report = lp.pass().await;
    assert!(!report.reached_github);
    assert!(h.host.stops().is_empty());
    assert!(h.github.deletes().is_empty());
    assert!(h.host.scrubbed().is_empty());
    assert_eq!(h.journal.updates(), 0);
    assert!(h.host.is_alive(idle_p.unwrap()));

    // Reachable again: now the due decisions are carried out.
    h.github.set_unreachable(false);
    lp.pass().await;
    assert_eq!(
        h.journal.attempt(dead.id()).outcome(),
        Some(Outcome::Orphaned)
    );
    assert_eq!(
        h.journal.attempt(idle.id()).outcome(),
        Some(Outcome::ExitedIdleWithoutWork)
    );
}

#[tokio::test]
async fn deregistration_happens_only_when_github_still_lists_the_runner() {
    let h = Harness::new();
    let (listed, lp_) = h.seed("listed0001", AttemptState::Idle);
    let (gone, gp) = h.seed("unlisted01", AttemptState::Idle);
    h.host.kill(lp_.unwrap());
    h.host.kill(gp.unwrap());
    h.host.set_evidence(listed.id(), Evidence::RunnerLogOnly);
    h.host.set_evidence(gone.id(), Evidence::RunnerLogOnly);
    h.github
        .list(listed.runner_name(), 71, false, RunnerStatus::Offline);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(
        h.github.deletes(),
        vec![71],
        "one DELETE, for the listed runner only"
    );
    for a in [&listed, &gone] {
        let stored = h.journal.attempt(a.id());
        assert_eq!(stored.outcome(), Some(Outcome::ExitedIdleWithoutWork));
        assert!(stored.is_cleaned());
    }
}

#[tokio::test]
async fn a_lost_jit_secret_is_jit_expired_and_deregistered() {
    let h = Harness::new();
    let (a, _) = h.seed("jitlost001", AttemptState::JitReceived);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Offline);
    let lp = h.make_loop(target());
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(
        stored.outcome(),
        Some(Outcome::Failed(FailureReason::JitExpired))
    );
    assert_eq!(h.github.deletes(), vec![55]);
}

#[tokio::test]
async fn a_cleanup_that_fails_is_retried_with_backoff_reported_once_and_blocks_nothing() {
    let mut h = Harness::new();
    let (a, p) = h.seed("stuckdir01", AttemptState::Idle);
    h.host.kill(p.unwrap());
    h.host.set_evidence(a.id(), Evidence::RunnerLogOnly);
    for _ in 0..3 {
        h.host
            .state
            .lock()
            .unwrap()
            .scrub_script
            .push_back(ScrubError {
                retryable: true,
                detail: "directory busy".into(),
            });
    }
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    let first = lp.pass().await;
    assert_eq!(first.launched, 1, "a stuck directory blocks no launch");
    let deferred = |events: &[EventKind]| {
        events
            .iter()
            .filter(|e| matches!(e, EventKind::CleanupDeferred { .. }))
            .count()
    };
    assert_eq!(deferred(&h.events()), 1);
    let scrub_calls = |h: &Harness| h.calls().iter().filter(|c| *c == "host.scrub").count();
    assert_eq!(scrub_calls(&h), 1);

    lp.pass().await; // not due yet
    assert_eq!(scrub_calls(&h), 1);

    let mut all = Vec::new();
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(60));
        lp.pass().await;
        all.extend(h.events());
    }
    assert_eq!(deferred(&all), 0, "reported once");
    assert!(all.iter().any(|e| matches!(e, EventKind::Cleaned { .. })));
    assert!(h.journal.attempt(a.id()).is_cleaned());
    assert_eq!(scrub_calls(&h), 4);
}

#[tokio::test]
async fn a_draining_policy_is_still_supervised_then_disabled() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().policies.clear();
    h.journal
        .add_policy(1, &target(), Some(2), PolicyState::Draining);
    let (a, p) = h.seed("draining01", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github.set_jobs(3);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(
        h.journal.policy(1).state(),
        PolicyState::Draining,
        "a runner is still busy"
    );
    h.host.kill(p.unwrap());
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), Evidence::JobCompleted);
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert_eq!(h.journal.attempts().len(), 1, "draining starts nothing");
    // The next pass sees it owns nothing any more.
    lp.pass().await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::Disabled);
}

#[tokio::test]
async fn a_starting_runner_github_shows_busy_becomes_busy() {
    let h = Harness::new();
    let (a, _) = h.seed("startbusy1", AttemptState::Starting);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(h.journal.attempt(a.id()).state(), AttemptState::Busy);
}

#[tokio::test]
async fn without_diagnostics_githubs_last_sample_decides_and_never_assumes_success() {
    let h = Harness::new();
    let (busy, bp) = h.seed("lastbusy01", AttemptState::Busy);
    let (start, sp) = h.seed("laststart1", AttemptState::Starting);
    h.host.kill(bp.unwrap());
    h.host.kill(sp.unwrap());
    let lp = h.make_loop(target());
    lp.pass().await;
    // A job's success is never assumed: seen busy, no diagnostics, how it ended unknown.
    assert_eq!(
        h.journal.attempt(busy.id()).outcome(),
        Some(Outcome::Orphaned)
    );
    assert_eq!(
        h.journal.attempt(start.id()).outcome(),
        Some(Outcome::Failed(FailureReason::ProcessExitedUnexpectedly))
    );
}

#[tokio::test]
async fn a_dead_runner_github_still_shows_idle_is_orphaned() {
    let h = Harness::new();
    let (a, p) = h.seed("deadlisted", AttemptState::Idle);
    h.host.kill(p.unwrap());
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(h.journal.attempt(a.id()).outcome(), Some(Outcome::Orphaned));
    assert_eq!(h.github.deletes(), vec![55]);
}

#[tokio::test]
async fn cleaning_kills_what_is_left_before_scrubbing() {
    let h = Harness::new();
    // Concluded (a crash between journalling the outcome and stopping) with the process alive.
    let (mut a, p) = h.seed("leftover01", AttemptState::Busy);
    a.conclude(Outcome::Orphaned, t(5)).unwrap();
    h.journal.put(a.clone());
    let lp = h.make_loop(target());
    h.clear_calls();
    lp.pass().await;
    assert_eq!(h.host.stops(), vec![p.unwrap()]);
    let calls = h.calls();
    let pos = |c: &str| calls.iter().position(|x| x == c).unwrap();
    assert!(pos("host.stop") < pos("host.scrub"), "{calls:?}");
    assert!(
        pos("host.scrub") < pos("journal.update(cleaned)"),
        "{calls:?}"
    );
    assert!(h.journal.attempt(a.id()).is_cleaned());
}

#[tokio::test]
async fn a_concluded_attempt_with_a_live_process_is_not_killed_while_github_is_unreachable() {
    let h = Harness::new();
    let (mut a, p) = h.seed("blindleft1", AttemptState::Busy);
    a.conclude(Outcome::Orphaned, t(5)).unwrap();
    h.journal.put(a.clone());
    h.github.set_unreachable(true);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert!(h.host.is_alive(p.unwrap()));
    assert!(!h.journal.attempt(a.id()).is_cleaned());
}

#[tokio::test]
async fn a_refused_removal_of_a_runner_whose_process_was_never_seen_keeps_the_attempt() {
    // The service stopped between spawning the runner and journalling it; the process is not
    // found, but GitHub says the runner runs a job: its job must not be ended by a clean.
    let h = Harness::new();
    let (a, _) = h.seed("unseen0001", AttemptState::JitReceived);
    h.github
        .list(a.runner_name(), 58, true, RunnerStatus::Online);
    h.github
        .state
        .lock()
        .unwrap()
        .delete_script
        .push_back(DeleteOutcome::StillRunningJob);
    let lp = h.make_loop(target());
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.state(), AttemptState::JitReceived, "kept");
    assert!(h.host.scrubbed().is_empty(), "nothing cleaned");
    // Once GitHub lets go (the job ended), it concludes as before.
    lp.pass().await;
    assert!(h.journal.attempt(a.id()).is_cleaned());
}
