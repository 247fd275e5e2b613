//! The runner inventory's economy: GitHub's list is read only when a decision needs it or the
//! journalled view of a live runner is stale (`AgentConfig::inventory_refresh`).

use crate::support::*;
use rm_agent::{AgentConfig, EventKind, RunnerStatus};
use rm_core::{AttemptState, Outcome};
use std::time::Duration;

/// A loop with the service's default inventory refresh (30 s; timeouts 300 s).
fn default_loop(h: &Harness) -> Loop {
    h.make_loop_with(target(), AgentConfig::default())
}

#[tokio::test]
async fn a_live_runner_within_its_timeouts_is_not_listed_until_its_view_is_stale() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = default_loop(&h);
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(a.state(), AttemptState::Starting);
    // It took the job: GitHub lists it busy and the job no longer queued.
    h.github
        .list(a.runner_name(), 100, true, RunnerStatus::Online);
    h.github.set_jobs(0);
    let before = h.github.inventory_calls();
    for _ in 0..29 {
        h.clock.advance(Duration::from_secs(1));
        lp.pass().await;
    }
    assert_eq!(
        h.github.inventory_calls(),
        before,
        "no listing while the runner is alive and within its timeouts"
    );
    assert_eq!(only_attempt(&h).state(), AttemptState::Starting);
    // 30 s after it started: the journalled view is refreshed.
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
    assert_eq!(only_attempt(&h).state(), AttemptState::Busy);
    // And not again for another 30 s.
    h.clock.advance(Duration::from_secs(10));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
}

#[tokio::test]
async fn a_short_job_costs_one_inventory_listing() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = default_loop(&h);
    lp.pass().await;
    let a = only_attempt(&h);
    let before = h.github.inventory_calls();
    h.clock.advance(Duration::from_secs(2));
    lp.pass().await;
    // The job ran and the ephemeral runner left GitHub; its process exited.
    h.github.set_jobs(0);
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.kill(a.process().unwrap());
    h.clock.advance(Duration::from_secs(2));
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert_eq!(
        h.github.inventory_calls() - before,
        1,
        "one listing, on the pass that saw the process dead"
    );
    assert!(h.github.deletes().is_empty());
}

/// A launched runner that took its job, said it completed and exited 0, as the host saw it.
async fn finish_cleanly(h: &Harness, lp: &Loop) -> rm_core::Attempt {
    h.github.set_jobs(1);
    lp.pass().await;
    let a = only_attempt(h);
    h.github.set_jobs(0);
    h.host.set_evidence(a.id(), rm_core::Evidence::JobStarted);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert_eq!(only_attempt(h).state(), AttemptState::Busy);
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.end(
        a.process().unwrap(),
        rm_core::ProcessExit {
            code: Some(0),
            signal: None,
        },
    );
    a
}

#[tokio::test]
async fn a_runner_that_reported_its_job_completed_and_exited_0_is_concluded_without_a_listing() {
    let mut h = Harness::new();
    let lp = default_loop(&h);
    let before = h.github.inventory_calls();
    let a = finish_cleanly(&h, &lp).await;
    // GitHub removed the ephemeral registration itself.
    h.github.unlist(a.runner_name());
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert_eq!(
        h.github.inventory_calls(),
        before,
        "concluded on the listener's word: no listing"
    );
    // The removal is confirmed by one read, once it has waited `removal_confirm` (5 min).
    h.clock.advance(Duration::from_secs(299));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
    for _ in 0..10 {
        h.clock.advance(Duration::from_secs(60));
        lp.pass().await;
    }
    assert_eq!(h.github.inventory_calls(), before + 1, "confirmed once");
    assert!(h.github.deletes().is_empty());
    assert!(!h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::DeregisteredLate { .. })));
}

#[tokio::test]
async fn a_finished_runner_still_registered_when_confirmed_is_deleted() {
    let mut h = Harness::new();
    let lp = default_loop(&h);
    let a = finish_cleanly(&h, &lp).await;
    // GitHub still lists it (offline): it did not remove the registration.
    h.github
        .list(a.runner_name(), 100, false, RunnerStatus::Offline);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert!(h.journal.attempt(a.id()).is_cleaned());
    assert!(h.github.deletes().is_empty(), "not looked at yet");
    h.clock.advance(Duration::from_secs(300));
    lp.pass().await;
    assert_eq!(h.github.deletes(), vec![100]);
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::DeregisteredLate { attempt } if attempt == a.id())));
}

#[tokio::test]
async fn a_listing_made_for_another_runner_confirms_a_finished_ones_removal() {
    let h = Harness::new();
    let lp = default_loop(&h);
    let a = finish_cleanly(&h, &lp).await;
    h.github
        .list(a.runner_name(), 100, false, RunnerStatus::Offline);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert!(h.github.deletes().is_empty());
    // Another job: the new runner's launch needs a look (its registration state) 30 s on.
    h.github.set_jobs(1);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    h.github.set_jobs(0);
    let before = h.github.inventory_calls();
    h.clock.advance(Duration::from_secs(31));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
    assert_eq!(
        h.github.deletes(),
        vec![100],
        "that read confirmed (and removed) it"
    );
}

#[tokio::test]
async fn a_busy_runners_job_is_reported_by_its_console_name_and_confirmed_before_its_conclusion() {
    let mut h = Harness::new();
    let lp = default_loop(&h);
    h.github.set_jobs(1);
    lp.pass().await;
    let a = only_attempt(&h);
    h.github.set_jobs(0);
    h.host.set_evidence(a.id(), rm_core::Evidence::JobStarted);
    // Busy before the console line is written: reported without a name, tried again.
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert_eq!(only_attempt(&h).state(), AttemptState::Busy);
    h.host.set_job_name(a.id(), "build");
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(1));
        lp.pass().await;
    }
    let took = h.github.state.lock().unwrap().took.clone();
    let named: Vec<_> = took.iter().filter(|t| t.1.is_some()).collect();
    assert_eq!(named.len(), 1, "reported once with its name: {took:?}");
    assert_eq!(named[0].0, a.runner_name());
    assert_eq!(named[0].1.as_deref(), Some("build"));
    assert_eq!(named[0].2, vec![LABEL.to_string()], "the policy's labels");
    // Its job ends: GitHub is asked which job it ran before the conclusion is journalled.
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.end(
        a.process().unwrap(),
        rm_core::ProcessExit {
            code: Some(0),
            signal: None,
        },
    );
    h.clear_calls();
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    let calls = h.calls();
    let over = calls
        .iter()
        .position(|c| c == &format!("github.job_over {}", a.runner_name()))
        .expect("job_over called");
    let concluded = calls
        .iter()
        .position(|c| c == "journal.update(finished)")
        .expect("journalled");
    assert!(over < concluded, "{calls:?}");
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::Concluded { .. })));
}

#[tokio::test]
async fn a_runner_the_job_listings_show_running_is_busy_without_a_listing_however_long_its_job() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = default_loop(&h);
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(a.state(), AttemptState::Starting);
    let before = h.github.inventory_calls();
    // The demand poll's jobs listing names our runner on the job it took (no longer queued).
    h.github.set_jobs(0);
    h.github.set_running(a.runner_name(), true);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    assert_eq!(only_attempt(&h).state(), AttemptState::Busy);
    assert_eq!(
        h.github.inventory_calls(),
        before,
        "GitHub's word, no listing"
    );
    // A job of an hour: no refresh, no registration timeout, nothing stopped.
    for _ in 0..120 {
        h.clock.advance(Duration::from_secs(30));
        lp.pass().await;
    }
    assert_eq!(h.github.inventory_calls(), before);
    assert_eq!(only_attempt(&h).state(), AttemptState::Busy);
    assert!(h.host.stops().is_empty());
    // The job ends and the ephemeral runner leaves GitHub and exits: one look concludes it.
    h.github.set_running(a.runner_name(), false);
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.kill(a.process().unwrap());
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    let stored = h.journal.attempt(a.id());
    assert_eq!(stored.outcome(), Some(Outcome::CompletedJob));
    assert!(stored.is_cleaned());
    assert_eq!(h.github.inventory_calls(), before + 1);
}

#[tokio::test]
async fn a_runner_still_alive_after_its_job_ended_is_looked_at_again() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = default_loop(&h);
    lp.pass().await;
    let a = only_attempt(&h);
    h.github.set_jobs(0);
    h.github.set_running(a.runner_name(), true);
    h.clock.advance(Duration::from_secs(1));
    lp.pass().await;
    let before = h.github.inventory_calls();
    // The listings say the job is over, but the process lives on: the usual refresh applies.
    h.github.set_running(a.runner_name(), false);
    h.github
        .list(a.runner_name(), 100, false, RunnerStatus::Online);
    h.clock.advance(Duration::from_secs(31));
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
    assert_eq!(only_attempt(&h).state(), AttemptState::Idle);
}

#[tokio::test]
async fn a_due_registration_timeout_reads_github_before_terminating() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let config = AgentConfig {
        // Even with no periodic refresh at all, a due timeout looks first.
        inventory_refresh: Duration::from_secs(3600),
        ..AgentConfig::default()
    };
    let timeouts = config.timeouts;
    let lp = h.make_loop_with(target(), config);
    lp.pass().await;
    let a = only_attempt(&h);
    // The runner took its job without being seen registered: GitHub shows it busy (and the
    // job no longer queued).
    h.github
        .list(a.runner_name(), 100, true, RunnerStatus::Online);
    h.github.set_jobs(0);
    h.clock.advance(timeouts.registration);
    let before = h.github.inventory_calls();
    lp.pass().await;
    assert_eq!(h.github.inventory_calls(), before + 1);
    assert_eq!(only_attempt(&h).state(), AttemptState::Busy);
    assert!(h.host.stops().is_empty(), "a busy runner is never stopped");
}

#[tokio::test]
async fn the_refresh_is_capped_by_the_timeouts() {
    let mut config = AgentConfig::default();
    assert_eq!(
        config.effective_inventory_refresh(),
        Duration::from_secs(30)
    );
    config.timeouts.idle = Duration::from_secs(10);
    assert_eq!(
        config.effective_inventory_refresh(),
        Duration::from_millis(2500)
    );
}
