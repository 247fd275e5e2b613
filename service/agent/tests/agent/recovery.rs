//! Startup recovery: the same code as supervision, with the crash gaps closed.

use crate::support::*;
use rm_agent::{EventKind, RecoveredFrom, RunnerStatus};
use rm_core::{AttemptState, Evidence, FailureReason, Outcome};

#[tokio::test]
async fn registration_done_but_sidecar_missing_recovers_the_runner_id_from_the_inventory() {
    let mut h = Harness::new();
    let (a, _) = h.seed("gapinvent1", AttemptState::Allocated);
    h.github
        .list(a.runner_name(), 77, false, RunnerStatus::Offline);
    let lp = h.make_loop(target());
    lp.recover().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.runner_id(), Some(77), "the id is journalled");
    assert_eq!(
        stored.outcome(),
        Some(Outcome::Failed(FailureReason::JitExpired))
    );
    assert!(stored.is_cleaned());
    assert_eq!(h.github.deletes(), vec![77]);
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::Recovered {
            from: RecoveredFrom::Inventory,
            ..
        }
    )));
}

#[tokio::test]
async fn a_sidecar_written_before_the_crash_supplies_the_runner_id() {
    let mut h = Harness::new();
    let (a, _) = h.seed("gapsidecar", AttemptState::Allocated);
    h.host
        .state
        .lock()
        .unwrap()
        .sidecars
        .insert(a.id().clone(), 88);
    h.github
        .list(a.runner_name(), 88, false, RunnerStatus::Offline);
    let lp = h.make_loop(target());
    lp.recover().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.runner_id(), Some(88));
    assert_eq!(
        stored.outcome(),
        Some(Outcome::Failed(FailureReason::JitExpired))
    );
    assert_eq!(h.github.deletes(), vec![88]);
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::Recovered {
            from: RecoveredFrom::Sidecar,
            ..
        }
    )));
}

#[tokio::test]
async fn a_process_spawned_before_starting_was_journalled_is_found_and_adopted() {
    let mut h = Harness::new();
    let (a, _) = h.seed("gapprocess", AttemptState::JitReceived);
    let p = h.host.run_process(a.id());
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.recover().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.process(), Some(p), "the pid is journalled");
    assert_eq!(stored.state(), AttemptState::Idle);
    assert!(h.host.stops().is_empty());
    let events = h.events();
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::Recovered {
            from: RecoveredFrom::ProcessFound,
            ..
        }
    )));
    assert!(events
        .iter()
        .any(|e| matches!(e, EventKind::Adopted { .. })));
}

#[tokio::test]
async fn live_runners_are_adopted_untouched() {
    let mut h = Harness::new();
    let (a, p) = h.seed("adoptbusy1", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    let lp = h.make_loop(target());
    lp.recover().await;
    assert_eq!(h.journal.attempt(a.id()), a);
    assert!(h.host.is_alive(p.unwrap()));
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::Adopted {
            state: AttemptState::Busy,
            ..
        }
    )));
}

#[tokio::test]
async fn dead_runners_are_concluded_and_interrupted_cleanups_finished() {
    let h = Harness::new();
    let (dead, p) = h.seed("deadidle01", AttemptState::Idle);
    h.host.kill(p.unwrap());
    h.host.set_evidence(dead.id(), Evidence::RunnerLogOnly);
    let (mut done, p2) = h.seed("cleanlater", AttemptState::Busy);
    h.host.kill(p2.unwrap());
    let before = done.clone();
    done.conclude(Outcome::CompletedJob, t(10)).unwrap();
    h.journal.put(done.clone());
    assert_ne!(before, done);
    let (never, _) = h.seed("neverreg01", AttemptState::Allocated);
    let lp = h.make_loop(target());
    lp.recover().await;
    assert_eq!(
        h.journal.attempt(dead.id()).outcome(),
        Some(Outcome::ExitedIdleWithoutWork)
    );
    assert_eq!(
        h.journal.attempt(never.id()).outcome(),
        Some(Outcome::Failed(FailureReason::LaunchInterrupted))
    );
    for a in [&dead, &done, &never] {
        assert!(h.journal.attempt(a.id()).is_cleaned(), "{}", a.id());
    }
    assert!(h.github.deletes().is_empty());
}

#[tokio::test]
async fn recovery_runs_before_the_first_launch() {
    let h = Harness::new();
    let (a, p) = h.seed("beforelnch", AttemptState::Idle);
    h.host.kill(p.unwrap());
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Offline);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    lp.pass().await; // the first pass recovers first by itself
    let calls = h.calls();
    let pos = |c: &str| calls.iter().position(|x| x == c).unwrap();
    assert!(
        pos("host.scrub") < pos("journal.insert(allocated)"),
        "{calls:?}"
    );
    assert!(h.journal.attempt(a.id()).is_cleaned());
}

#[tokio::test]
async fn attempts_of_unknown_policies_are_untouched_but_counted() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().capacity = 2;
    h.journal.state.lock().unwrap().policies.clear();
    h.journal
        .add_policy(1, &target(), Some(5), rm_core::PolicyState::Active);
    // Policy 99 is in no journal row: no ownership proof. Its runner looks dead and unlisted,
    // which would conclude it if it were ours.
    let (foreign, fp) = h.seed_for("unknown001", 99, AttemptState::Busy);
    h.host.kill(fp.unwrap());
    h.github.set_jobs(5);
    let lp = h.make_loop(target());
    let report = lp.pass().await;
    assert_eq!(h.journal.attempt(foreign.id()), foreign, "untouched");
    assert!(h.host.scrubbed().is_empty());
    assert_eq!(report.launched, 1, "capacity 2 minus the unknown attempt");
    assert_eq!(h.journal.active(), 2);
}
