//! Failing launches back off, then stop in `repair_required`; an unfit host makes no JIT
//! request. Driven by the fake clock: ten minutes of passes take no real time.

use crate::support::*;
use rm_agent::{AgentConfig, EventKind, HostError, LaunchCause};
use rm_core::{
    CheckState, FailureReason, HostCheck, LaunchBackoff, Outcome, PolicyId, PolicyParts,
    PolicyState,
};
use std::time::Duration;

/// The default back-off without jitter, so the waits are exact.
fn exact() -> AgentConfig {
    AgentConfig {
        inventory_refresh: Duration::ZERO,
        launch_backoff: LaunchBackoff {
            jitter_permille: 0,
            ..LaunchBackoff::default()
        },
        ..AgentConfig::default()
    }
}

fn unfit_check() -> HostCheck {
    HostCheck {
        id: "runner_root_reachable".into(),
        title: "The runner account can reach and execute inside the runner root".into(),
        state: CheckState::Fail,
        required: true,
        detail: "/var/lib/runner-manager is mode 0700 (owner root, group root)".into(),
        fix: Some("`chmod o+x /var/lib/runner-manager`".into()),
    }
}

fn spawn_fails(h: &Harness) {
    h.host.state.lock().unwrap().spawn_error = Some(HostError::SpawnFailed {
        detail: "starting bin/Runner.Listener: Permission denied (os error 13)".into(),
    });
}

/// Passes every 10 s of fake time for `span`; returns the events seen.
async fn passes_for(h: &mut Harness, lp: &Loop, span: Duration) -> Vec<EventKind> {
    let mut events = Vec::new();
    let step = Duration::from_secs(10);
    let mut elapsed = Duration::ZERO;
    while elapsed < span {
        lp.pass().await;
        events.extend(h.events());
        h.clock.advance(step);
        elapsed += step;
    }
    events
}

fn backoffs(events: &[EventKind]) -> Vec<(u32, i64)> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::LaunchBackoff {
                consecutive_failures,
                next_try,
                ..
            } => Some((*consecutive_failures, next_try.as_millis() - T0)),
            _ => None,
        })
        .collect()
}

/// The operator's `--retry`: `repair_required` → `pending`, as the API writes it.
fn operator_retry(h: &Harness) {
    let mut st = h.journal.state.lock().unwrap();
    let p = st
        .policies
        .iter_mut()
        .find(|p| p.id() == PolicyId::new(1))
        .unwrap();
    let mut next = p.clone();
    next.transition_to(PolicyState::Pending).unwrap();
    let mut parts: PolicyParts = next.to_parts();
    parts.revision += 1;
    *p = rm_core::Policy::from_parts(parts).unwrap();
}

#[tokio::test]
async fn a_runner_that_cannot_start_backs_off_then_needs_repair() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    spawn_fails(&h);
    let lp = h.make_loop_with(target(), exact());
    let events = passes_for(&mut h, &lp, Duration::from_secs(600)).await;

    // Five registrations in ten minutes, each removed again, then nothing.
    assert_eq!(h.github.jit_calls(), 5);
    assert_eq!(h.github.deletes().len(), 5);
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    // 15 s doubling: tries at 0, 20, 50, 110 and 230 s (the first pass at or after each
    // `next_try` on a 10 s beat).
    assert_eq!(
        backoffs(&events),
        vec![
            (1, 15_000),
            (2, 20_000 + 30_000),
            (3, 50_000 + 60_000),
            (4, 110_000 + 120_000)
        ]
    );
    let gave_up = events.iter().find_map(|e| match e {
        EventKind::LaunchGaveUp {
            consecutive_failures,
            cause,
            ..
        } => Some((*consecutive_failures, cause.clone())),
        _ => None,
    });
    let (failures, cause) = gave_up.expect("gave up");
    assert_eq!(failures, 5);
    match cause {
        LaunchCause::Failed { reason, detail } => {
            assert_eq!(reason, FailureReason::ProcessStartFailed);
            assert!(detail.contains("Permission denied"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::PolicyStateChanged {
            to: PolicyState::RepairRequired,
            ..
        }
    )));
    // Given up: another hour of passes registers nothing.
    passes_for(&mut h, &lp, Duration::from_secs(3600)).await;
    assert_eq!(h.github.jit_calls(), 5);
}

#[tokio::test]
async fn after_a_failure_runners_start_one_at_a_time_with_the_host_checked_first() {
    let mut h = Harness::new();
    h.github.set_jobs(2);
    spawn_fails(&h);
    let lp = h.make_loop_with(target(), exact());
    lp.pass().await;
    assert_eq!(h.github.jit_calls(), 2, "healthy: both granted runners");
    assert_eq!(
        h.host.state.lock().unwrap().fitness_checks,
        1,
        "first launch"
    );
    assert_eq!(backoffs(&h.events()).len(), 2);

    // Within the back-off nothing is tried, not even the host checks.
    h.clock.advance(Duration::from_secs(20));
    lp.pass().await;
    assert_eq!(h.github.jit_calls(), 2);
    assert_eq!(h.host.state.lock().unwrap().fitness_checks, 1);
    // Two failures in a row wait 30 s; then one probe, after the host checks.
    h.clock.advance(Duration::from_secs(15));
    h.clear_calls();
    lp.pass().await;
    assert_eq!(h.github.jit_calls(), 3, "one probe, not two");
    let calls = h.calls();
    let check = calls
        .iter()
        .position(|c| c == "host.check_fitness")
        .unwrap();
    let jit = calls
        .iter()
        .position(|c| c == "github.generate_jit")
        .unwrap();
    assert!(check < jit, "{calls:?}");
}

#[tokio::test]
async fn a_failure_that_costs_github_nothing_counts_too() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().materialize_error = Some(HostError::PackageUnverified {
        detail: "sha256 mismatch".into(),
    });
    let lp = h.make_loop_with(target(), exact());
    let events = passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert_eq!(h.github.jit_calls(), 0);
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    assert_eq!(backoffs(&events).len(), 4);
    let failed = h
        .journal
        .attempts()
        .iter()
        .filter(|a| a.outcome() == Some(Outcome::Failed(FailureReason::PackageUnverified)))
        .count();
    assert_eq!(failed, 5);
}

#[tokio::test]
async fn an_unfit_host_makes_no_jit_request_and_is_checked_again_only_after_the_backoff() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().fitness = vec![unfit_check()];
    let lp = h.make_loop_with(target(), exact());
    lp.pass().await;
    assert_eq!(h.github.jit_calls(), 0, "no registration for an unfit host");
    assert!(h.journal.attempts().is_empty(), "nothing reserved either");
    let events = h.events();
    assert!(events
        .iter()
        .any(|e| matches!(e, EventKind::HostChecked { checks } if checks.len() == 1)));
    let cause = events.iter().find_map(|e| match e {
        EventKind::LaunchBackoff { cause, .. } => Some(cause.clone()),
        _ => None,
    });
    assert_eq!(
        cause,
        Some(LaunchCause::HostUnfit {
            check: unfit_check()
        })
    );

    // Passes within the back-off do not run the checks (no tight loop).
    for _ in 0..5 {
        h.clock.advance(Duration::from_secs(2));
        lp.pass().await;
    }
    assert_eq!(h.host.state.lock().unwrap().fitness_checks, 1);
    h.clock.advance(Duration::from_secs(5));
    lp.pass().await;
    assert_eq!(h.host.state.lock().unwrap().fitness_checks, 2);
    assert_eq!(h.github.jit_calls(), 0);

    // Fixed: the next try after the back-off launches.
    h.host.state.lock().unwrap().fitness.clear();
    h.clock.advance(Duration::from_secs(30));
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.github.jit_calls(), 1);
}

#[tokio::test]
async fn an_unfit_host_ends_in_repair_required_too() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().fitness = vec![unfit_check()];
    let lp = h.make_loop_with(target(), exact());
    let events = passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert_eq!(h.github.jit_calls(), 0);
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::LaunchGaveUp {
            cause: LaunchCause::HostUnfit { .. },
            ..
        }
    )));
    // One check per try (five), not one per pass (sixty).
    assert_eq!(h.host.state.lock().unwrap().fitness_checks, 5);
}

#[tokio::test]
async fn a_healthy_host_is_checked_once_not_before_every_launch() {
    let h = Harness::new();
    let lp = h.make_loop_with(target(), exact());
    for _ in 0..3 {
        h.github.set_jobs(1);
        assert_eq!(lp.pass().await.launched, 1);
        // The runner took its job and left.
        for a in h.journal.attempts() {
            if let Some(p) = a.process() {
                h.host.kill(p);
            }
            h.github.unlist(a.runner_name());
            h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
        }
        h.github.set_jobs(0);
        lp.pass().await;
        h.clock.advance(Duration::from_secs(10));
    }
    assert_eq!(h.github.jit_calls(), 3);
    assert_eq!(h.host.state.lock().unwrap().fitness_checks, 1);
}

#[tokio::test]
async fn a_runner_seen_online_resets_the_count() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    spawn_fails(&h);
    let lp = h.make_loop_with(target(), exact());
    lp.pass().await;
    assert_eq!(backoffs(&h.events()), vec![(1, 15_000)]);

    h.host.state.lock().unwrap().spawn_error = None;
    h.clock.advance(Duration::from_secs(15));
    assert_eq!(lp.pass().await.launched, 1);
    // Reaching `starting` is not yet a success: the runner may still die before coming online.
    assert!(!h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::LaunchHealthy { .. })));
    let a = h
        .journal
        .attempts()
        .into_iter()
        .find(|a| a.process().is_some())
        .unwrap();
    h.github.list(
        a.runner_name(),
        100 + 1,
        false,
        rm_agent::RunnerStatus::Online,
    );
    lp.pass().await;
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::LaunchHealthy { policy } if policy.get() == 1)));

    // The next failure counts from one again.
    spawn_fails(&h);
    h.github.set_jobs(2);
    lp.pass().await;
    assert_eq!(backoffs(&h.events())[0].0, 1);
}

#[tokio::test]
async fn a_runner_that_dies_before_coming_online_counts() {
    let mut h = Harness::new();
    let lp = h.make_loop_with(target(), exact());
    for _ in 0..5 {
        h.github.set_jobs(1);
        lp.pass().await;
        // The listener started, then exited at once without registering or writing logs.
        for a in h.journal.attempts() {
            if let Some(p) = a.process() {
                h.host.kill(p);
            }
        }
        h.github.set_jobs(0);
        lp.pass().await;
        h.clock.advance(Duration::from_secs(300));
    }
    let events = h.events();
    let failed = h
        .journal
        .attempts()
        .iter()
        .filter(|a| a.outcome() == Some(Outcome::Failed(FailureReason::ProcessExitedUnexpectedly)))
        .count();
    assert_eq!(failed, 5);
    assert_eq!(backoffs(&events).len(), 4);
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::LaunchGaveUp {
            consecutive_failures: 5,
            ..
        }
    )));
    // The give-up came from supervision; the next pass moves the policy.
    lp.pass().await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
}

#[tokio::test]
async fn retrying_a_policy_in_repair_starts_afresh() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    spawn_fails(&h);
    let lp = h.make_loop_with(target(), exact());
    passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    assert_eq!(h.github.jit_calls(), 5);

    // The operator fixed it and retried.
    h.host.state.lock().unwrap().spawn_error = None;
    operator_retry(&h);
    let checks = h.host.state.lock().unwrap().fitness_checks;
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.github.jit_calls(), 6);
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::LaunchHealthy { .. })));
    assert_eq!(
        h.host.state.lock().unwrap().fitness_checks,
        checks + 1,
        "checked again after the failures"
    );
    assert_eq!(h.journal.policy(1).state(), PolicyState::Active);
}

#[tokio::test]
async fn disabling_and_enabling_clears_the_repair_too() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    spawn_fails(&h);
    let lp = h.make_loop_with(target(), exact());
    passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);

    let set_enabled = |on: bool| {
        let mut st = h.journal.state.lock().unwrap();
        let p = st.policies.iter_mut().next().unwrap();
        let mut parts = p.to_parts();
        parts.enabled = on;
        parts.revision += 1;
        *p = rm_core::Policy::from_parts(parts).unwrap();
    };
    set_enabled(false);
    lp.pass().await;
    lp.pass().await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::Disabled);
    h.host.state.lock().unwrap().spawn_error = None;
    set_enabled(true);
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.journal.policy(1).state(), PolicyState::Active);
    assert!(h
        .events()
        .iter()
        .any(|e| matches!(e, EventKind::LaunchHealthy { .. })));
}

#[tokio::test]
async fn the_default_backoff_is_jittered_within_a_quarter() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    spawn_fails(&h);
    let config = AgentConfig {
        inventory_refresh: Duration::ZERO,
        ..AgentConfig::default()
    };
    let lp = h.make_loop_with(target(), config);
    lp.pass().await;
    let (n, next) = backoffs(&h.events())[0];
    assert_eq!(n, 1);
    assert!((11_250..=15_000).contains(&next), "{next}");
}

#[tokio::test]
async fn github_being_unavailable_does_not_count_toward_the_targets_backoff() {
    // Every registration fails because GitHub is down (retries exhausted on 503s): that is a
    // host-wide condition with its own back-off and status, not this target's fault, so a
    // long outage never leaves the target needing repair.
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    // More failures than ten minutes of launches can use up (a registration that went
    // through would start a runner that never comes online: a failure of its own).
    for _ in 0..1000 {
        h.github
            .state
            .lock()
            .unwrap()
            .jit_script
            .push_back(rm_agent::GhError::Transient {
                detail: "HTTP 503".into(),
            });
    }
    let lp = h.make_loop_with(target(), exact());
    let events = passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert!(h.github.jit_calls() >= 15, "{}", h.github.jit_calls());
    assert_eq!(h.journal.policy(1).state(), PolicyState::Active);
    assert!(
        backoffs(&events).is_empty(),
        "an outage counted as the target's failures: {:?}",
        backoffs(&events)
    );
}

#[tokio::test]
async fn a_refusal_without_a_state_of_its_own_backs_off_like_any_failure() {
    // An answer we cannot read (or a 422) is refused without a policy state to show it: it
    // must not become a loop of registrations.
    let mut h = Harness::new();
    h.github.set_jobs(1);
    for _ in 0..20 {
        h.github
            .state
            .lock()
            .unwrap()
            .jit_script
            .push_back(rm_agent::GhError::Invalid {
                detail: "HTTP 200: truncated JSON".into(),
            });
    }
    let lp = h.make_loop_with(target(), exact());
    let events = passes_for(&mut h, &lp, Duration::from_secs(600)).await;
    assert_eq!(h.github.jit_calls(), 5);
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    assert_eq!(backoffs(&events).len(), 4);
}
