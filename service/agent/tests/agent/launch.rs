//! Demand, allocation and the journal-first launch.

use crate::support::*;
use rm_agent::{EventKind, GhError, HostError, HostShared, LaunchFailure, RunnerStatus};
use rm_core::{AttemptState, FailureReason, Outcome, PolicyState, Target};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_launch_writes_the_journal_before_every_effect() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    let report = lp.pass().await;
    assert_eq!(report.launched, 1);
    assert_eq!(
        h.calls(),
        vec![
            // The host checks run before the first launch (and after a failure only).
            "host.check_fitness",
            "journal.insert(allocated)",
            "host.materialize",
            "github.generate_jit",
            "host.write_sidecar",
            "journal.update(jit_received)",
            "host.spawn",
            "journal.update(starting)",
        ]
    );
    let a = only_attempt(&h);
    assert_eq!(a.state(), AttemptState::Starting);
    assert_eq!(a.runner_id(), Some(100));
    assert!(report.reached_github);
    // Registered under the attempt's own runner name.
    assert_eq!(h.github.listed(a.runner_name()).unwrap().id, 100);
    assert_eq!(h.host.state.lock().unwrap().sidecars[a.id()], 100);
    // The secret reached the spawn, and nothing else.
    assert_eq!(h.host.state.lock().unwrap().secrets, vec!["jit-secret-100"]);
    let events = h.events();
    assert!(
        events
            .iter()
            .all(|e| !format!("{e:?}").contains("jit-secret")),
        "a secret leaked into an event"
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, EventKind::Launched { runner_id: 100, .. })));
    assert!(events.iter().any(|e| matches!(
        e,
        EventKind::DemandSeen {
            matched: 1,
            is_floor: false,
            ..
        }
    )));
}

#[tokio::test]
async fn transient_jit_failures_are_retried_with_a_doubling_backoff() {
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    {
        let mut st = h.github.state.lock().unwrap();
        st.jit_script.push_back(GhError::Transient {
            detail: "502".into(),
        });
        st.jit_script.push_back(GhError::Unreachable {
            detail: "timeout".into(),
        });
    }
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.github.jit_calls(), 3);
    assert_eq!(
        h.clock.slept(),
        vec![Duration::from_secs(2), Duration::from_secs(4)]
    );
    let events = h.events();
    let retries = events
        .iter()
        .filter(|e| matches!(e, EventKind::LaunchRetry { .. }))
        .count();
    assert_eq!(retries, 2);
    let timings = events
        .iter()
        .find_map(|e| match e {
            EventKind::Launched { timings, .. } => Some(*timings),
            _ => None,
        })
        .unwrap();
    assert!(timings.register >= Duration::from_secs(6), "{timings:?}");
    assert!(timings.total >= timings.register);
}

#[tokio::test]
async fn retries_are_bounded_and_the_attempt_fails_and_is_cleaned() {
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    for _ in 0..5 {
        h.github
            .state
            .lock()
            .unwrap()
            .jit_script
            .push_back(GhError::Unreachable {
                detail: "down".into(),
            });
    }
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(h.github.jit_calls(), 3);
    assert_eq!(
        h.clock.slept(),
        vec![Duration::from_secs(2), Duration::from_secs(4)]
    );
    let a = only_attempt(&h);
    assert_eq!(
        a.outcome(),
        Some(Outcome::Failed(FailureReason::JitRequestFailed))
    );
    assert!(a.is_cleaned());
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::LaunchFailed {
            reason: FailureReason::JitRequestFailed,
            failure: LaunchFailure::RetriesExhausted { tries: 3, .. },
            ..
        }
    )));
}

#[tokio::test]
async fn retries_stop_as_soon_as_the_demand_is_gone() {
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    {
        let mut st = h.github.state.lock().unwrap();
        st.jobs_vanish_on_jit_error = true;
        for _ in 0..3 {
            st.jit_script.push_back(GhError::Transient {
                detail: "503".into(),
            });
        }
    }
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(h.github.jit_calls(), 1, "no retry once the job is gone");
    let a = only_attempt(&h);
    assert_eq!(
        a.outcome(),
        Some(Outcome::Failed(FailureReason::LaunchInterrupted))
    );
    assert!(a.is_cleaned());
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::LaunchFailed {
            failure: LaunchFailure::DemandGone { tries: 1 },
            ..
        }
    )));
}

#[tokio::test]
async fn a_403_is_never_retried_and_the_policy_needs_repair() {
    let mut h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    h.github
        .state
        .lock()
        .unwrap()
        .jit_script
        .push_back(GhError::Forbidden {
            detail: "runner group".into(),
        });
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(h.github.jit_calls(), 1);
    assert!(h.clock.slept().is_empty());
    assert_eq!(h.journal.policy(1).state(), PolicyState::RepairRequired);
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::LaunchFailed {
            failure: LaunchFailure::Refused { .. },
            ..
        }
    )));
    // The broken policy starts nothing on later passes.
    lp.pass().await;
    assert_eq!(h.github.jit_calls(), 1);
}

#[tokio::test]
async fn a_401_on_demand_marks_the_policy_authentication_failed() {
    let h = Harness::new();
    h.github.set_jobs(1);
    h.github.state.lock().unwrap().queued_error = Some(GhError::Unauthorized);
    let lp = h.make_loop(target());
    let report = lp.pass().await;
    assert_eq!(report.launched, 0);
    assert!(!report.reached_github);
    assert_eq!(
        h.journal.policy(1).state(),
        PolicyState::AuthenticationFailed
    );
}

#[tokio::test]
async fn a_name_conflict_removes_our_stale_registration_and_registers_again() {
    let h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    h.github
        .state
        .lock()
        .unwrap()
        .jit_script
        .push_back(GhError::Conflict {
            detail: "name taken".into(),
        });
    // The fake keeps a registration (id 999) under the attempt's name with the conflict.
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.github.jit_calls(), 2);
    assert_eq!(h.github.deletes(), vec![999]);
    assert_eq!(only_attempt(&h).runner_id(), Some(100));
}

#[tokio::test]
async fn a_spawn_failure_deregisters_then_concludes_process_start_failed() {
    let h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().spawn_error = Some(HostError::SpawnFailed {
        detail: "ENOEXEC".into(),
    });
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    let a = only_attempt(&h);
    assert_eq!(
        a.outcome(),
        Some(Outcome::Failed(FailureReason::ProcessStartFailed))
    );
    assert!(a.is_cleaned());
    assert_eq!(h.github.deletes(), vec![100]);
    assert!(h.github.listed(a.runner_name()).is_none());
    let calls = h.calls();
    let delete = calls.iter().position(|c| c == "github.delete").unwrap();
    let failed = calls
        .iter()
        .position(|c| c == "journal.update(failed)")
        .unwrap();
    assert!(delete < failed, "{calls:?}");
}

#[tokio::test]
async fn a_materialize_failure_concludes_package_unverified_without_registering() {
    let h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().materialize_error = Some(HostError::PackageUnverified {
        detail: "checksum".into(),
    });
    let lp = h.make_loop(target());
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(
        a.outcome(),
        Some(Outcome::Failed(FailureReason::PackageUnverified))
    );
    assert_eq!(h.github.jit_calls(), 0);
}

#[tokio::test]
async fn preparations_are_bounded_by_the_host_semaphore() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().policies.clear();
    h.journal
        .add_policy(1, &target(), Some(4), PolicyState::Active);
    h.github.set_jobs(4);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 4);
    assert_eq!(h.host.state.lock().unwrap().max_preparing, 2);
}

#[tokio::test]
async fn allocation_respects_policy_and_host_capacity() {
    let h = Harness::new();
    h.github.set_jobs(5);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 2, "policy max 2");
    assert_eq!(lp.pass().await.launched, 0, "already at max");
    assert_eq!(h.journal.active(), 2);
}

#[tokio::test]
async fn monitor_only_and_inactive_policies_start_nothing() {
    for (max, state) in [
        (None, PolicyState::Active),
        (Some(2), PolicyState::Draining),
        (Some(2), PolicyState::Disabled),
        (Some(2), PolicyState::RepairRequired),
    ] {
        let h = Harness::new();
        h.journal.state.lock().unwrap().policies.clear();
        h.journal.add_policy(1, &target(), max, state);
        h.github.set_jobs(3);
        let lp = h.make_loop(target());
        assert_eq!(lp.pass().await.launched, 0, "{max:?} {state}");
        assert!(h.journal.attempts().is_empty());
    }
}

#[tokio::test]
async fn a_pending_policy_becomes_active_once_github_answers() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().policies.clear();
    h.journal
        .add_policy(1, &target(), Some(2), PolicyState::Pending);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.journal.policy(1).state(), PolicyState::Active);
}

#[tokio::test]
async fn a_failed_policy_read_keeps_the_last_copy() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    h.journal.state.lock().unwrap().fail_policies = true;
    h.github.set_jobs(2);
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(lp.policies().len(), 1);
}

/// Two loops (two targets) race for the last host slots; the journal samples the live count on
/// every reservation and it never exceeds the host capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_loops_racing_for_the_last_slots_never_overshoot() {
    for capacity in [1u32, 2, 3] {
        for _round in 0..10 {
            let h = Harness::new();
            h.journal.state.lock().unwrap().capacity = capacity;
            h.journal.state.lock().unwrap().policies.clear();
            let other = Target::parse("me/other").unwrap();
            h.journal
                .add_policy(1, &target(), Some(5), PolicyState::Active);
            h.journal
                .add_policy(2, &other, Some(5), PolicyState::Active);
            h.github.set_jobs(5);
            let a = Arc::new(h.make_loop(target()));
            let b = Arc::new(h.make_loop(other));
            let (ra, rb) = {
                let (a2, b2) = (a.clone(), b.clone());
                let ta = tokio::spawn(async move { a2.pass().await });
                let tb = tokio::spawn(async move { b2.pass().await });
                (ta.await.unwrap(), tb.await.unwrap())
            };
            let high = h.journal.state.lock().unwrap().high_water;
            assert!(high <= capacity, "{high} > {capacity}");
            assert_eq!(ra.launched + rb.launched, capacity);
            assert_eq!(h.journal.active(), capacity);
        }
    }
}

#[tokio::test]
async fn without_the_shared_lock_the_same_race_would_be_visible() {
    // Guard for the test above: separate locks (two hosts' worth) do overshoot one journal,
    // which shows the fake really interleaves the reservations.
    let mut overshoot = false;
    for _ in 0..10 {
        let h = Harness::new();
        h.journal.state.lock().unwrap().capacity = 1;
        h.journal.state.lock().unwrap().policies.clear();
        let other = Target::parse("me/other").unwrap();
        h.journal
            .add_policy(1, &target(), Some(5), PolicyState::Active);
        h.journal
            .add_policy(2, &other, Some(5), PolicyState::Active);
        h.github.set_jobs(5);
        let a = h.make_loop(target());
        let mut h2 = Harness::new();
        h2.journal = h.journal.clone();
        h2.github = h.github.clone();
        h2.host = h.host.clone();
        h2.shared = HostShared::default();
        let b = h2.make_loop(other);
        tokio::join!(a.pass(), b.pass());
        overshoot |= h.journal.state.lock().unwrap().high_water > 1;
    }
    assert!(overshoot);
}

#[tokio::test]
async fn a_fresh_jit_runner_listed_offline_is_not_taken_for_registered() {
    // Right after a launch GitHub lists the runner offline; the next pass must keep the
    // attempt `starting` (waiting for registration), not call it idle.
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(
        h.github.listed(a.runner_name()).unwrap().status,
        RunnerStatus::Offline
    );
    lp.pass().await;
    assert_eq!(only_attempt(&h).state(), AttemptState::Starting);
    h.github
        .list(a.runner_name(), 100, false, RunnerStatus::Online);
    lp.pass().await;
    assert_eq!(only_attempt(&h).state(), AttemptState::Idle);
}

#[tokio::test]
async fn a_launch_slower_than_a_minute_is_flagged() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    h.host.state.lock().unwrap().materialize_takes =
        Some((h.clock.clone(), Duration::from_secs(61)));
    let lp = h.make_loop(target());
    lp.pass().await;
    let (timings, slow) = h
        .events()
        .into_iter()
        .find_map(|e| match e {
            EventKind::Launched { timings, slow, .. } => Some((timings, slow)),
            _ => None,
        })
        .unwrap();
    assert!(slow);
    assert_eq!(timings.materialize, Duration::from_secs(61));
    assert_eq!(timings.total, Duration::from_secs(61));
}

#[tokio::test]
async fn demand_counts_matching_jobs_reports_unresolvable_ones_and_passes_the_floor_on() {
    use rm_core::{JobDemand, RunsOn};
    let mut h = Harness::new();
    {
        let mut st = h.github.state.lock().unwrap();
        let job = |id, labels: RunsOn| JobDemand {
            job_id: id,
            run_id: 1,
            repository: String::new(),
            name: String::new(),
            queued_at_ms: None,
            labels,
            from_fork: false,
        };
        st.jobs = vec![
            job(1, RunsOn::Labels(vec![LABEL.into()])),
            job(2, RunsOn::Labels(vec!["ubuntu-latest".into()])),
            job(3, RunsOn::Unresolvable("${{ matrix.os }}".into())),
        ];
        st.is_floor = true;
    }
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::DemandSeen {
            matched: 1,
            unresolvable: 1,
            is_floor: true,
            ..
        }
    )));
}

#[tokio::test]
async fn host_capacity_caps_every_policy() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().capacity = 1;
    h.github.set_jobs(2);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.journal.active(), 1);
}

#[tokio::test]
async fn a_policy_disabled_by_the_operator_starts_nothing_drains_then_is_disabled() {
    let h = Harness::new();
    {
        let mut st = h.journal.state.lock().unwrap();
        st.policies[0].set_enabled(false);
    }
    h.github.set_jobs(2);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(h.journal.policy(1).state(), PolicyState::Draining);
    lp.pass().await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::Disabled);
    assert!(h.journal.attempts().is_empty());
}

#[tokio::test]
async fn a_rate_limit_waits_until_it_lifts_within_the_backoff_budget() {
    let h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    h.github
        .state
        .lock()
        .unwrap()
        .jit_script
        .push_back(GhError::RateLimited { until: t(10_000) });
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(h.clock.slept(), vec![Duration::from_secs(10)]);

    // A limit lifting beyond the longest backoff is not waited for.
    let h = Harness::new();
    h.clock.set_auto_advance(true);
    h.github.set_jobs(1);
    h.github
        .state
        .lock()
        .unwrap()
        .jit_script
        .push_back(GhError::RateLimited {
            until: t(3_600_000),
        });
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert!(h.clock.slept().is_empty());
    assert_eq!(
        only_attempt(&h).outcome(),
        Some(Outcome::Failed(FailureReason::JitRequestFailed))
    );
}

#[tokio::test]
async fn nothing_is_spawned_when_jit_received_cannot_be_journalled() {
    let h = Harness::new();
    h.github.set_jobs(1);
    h.journal.state.lock().unwrap().fail_update_to = Some(AttemptState::JitReceived);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert!(
        !h.calls().iter().any(|c| c == "host.spawn"),
        "{:?}",
        h.calls()
    );
    assert_eq!(h.github.deletes(), vec![100], "the registration is removed");
    assert_eq!(only_attempt(&h).state(), AttemptState::Allocated);

    // The next pass closes the gap from the sidecar and concludes the attempt.
    h.github.set_jobs(0);
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(a.runner_id(), Some(100));
    assert_eq!(
        a.outcome(),
        Some(Outcome::Failed(FailureReason::JitExpired))
    );
    assert!(a.is_cleaned());
}

#[tokio::test]
async fn a_spawned_runner_whose_start_was_not_journalled_is_adopted_next_pass() {
    let mut h = Harness::new();
    h.github.set_jobs(1);
    h.journal.state.lock().unwrap().fail_update_to = Some(AttemptState::Starting);
    let lp = h.make_loop(target());
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(a.state(), AttemptState::JitReceived);
    h.events();
    lp.pass().await;
    let a = only_attempt(&h);
    assert_eq!(a.state(), AttemptState::Starting);
    assert!(a.process().is_some());
    assert!(h.host.stops().is_empty());
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::Recovered {
            from: rm_agent::RecoveredFrom::ProcessFound,
            ..
        }
    )));
    assert_eq!(h.journal.attempts().len(), 1, "not launched twice");
}

#[tokio::test]
async fn a_job_asking_for_self_hosted_and_the_routing_label_launches() {
    use rm_core::{Arch, JobDemand, Os, RunsOn};
    let mut h = Harness::new();
    {
        let mut st = h.github.state.lock().unwrap();
        let job = |id, labels: &[&str]| JobDemand {
            job_id: id,
            run_id: 1,
            repository: String::new(),
            name: String::new(),
            queued_at_ms: None,
            labels: RunsOn::Labels(labels.iter().map(|l| l.to_string()).collect()),
            from_fork: false,
        };
        st.jobs = vec![
            // GitHub's default labels of a Linux x64 runner, in any case.
            job(1, &["self-hosted", LABEL]),
            job(2, &["Self-Hosted", "Linux", "X64", LABEL]),
            // Another architecture: not ours.
            job(3, &["self-hosted", "ARM64", LABEL]),
        ];
    }
    let config = rm_agent::AgentConfig {
        os: Os::Linux,
        arch: Arch::X64,
        ..rm_agent::AgentConfig::default()
    };
    let lp = h.make_loop_with(target(), config);
    assert_eq!(lp.pass().await.launched, 2);
    assert!(h.events().iter().any(|e| matches!(
        e,
        EventKind::DemandSeen {
            matched: 2,
            unresolvable: 0,
            ..
        }
    )));
}

// ------------------------------------------------------------------ supply: busy vs unassigned

/// How many attempts the pass added (beyond the seeded ones).
fn launched_beyond(h: &Harness, seeded: usize) -> usize {
    h.journal.attempts().len() - seeded
}

#[tokio::test]
async fn a_busy_runner_does_not_hold_back_a_job_queued_after_it() {
    // Policy max 2, host capacity 4: one runner busy on the first job, a second job queued.
    let h = Harness::new();
    let (a, _) = h.seed("busyrunner1", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    // GitHub's job listings show its job running (and only the second one queued).
    took_a_job(&h, a.runner_name());
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    let report = lp.pass().await;
    assert_eq!(report.launched, 1, "the queued job gets its own runner");
    assert_eq!(launched_beyond(&h, 1), 1);
    // The ceiling still counts the busy runner: a third job waits for a slot.
    h.github.set_jobs(2);
    assert_eq!(lp.pass().await.launched, 0);
    assert_eq!(h.journal.active(), 2);
}

#[tokio::test]
async fn a_runner_that_has_not_taken_a_job_is_supply_for_a_queued_one() {
    let h = Harness::new();
    let (a, _) = h.seed("comingup01", AttemptState::Starting);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0, "the idle runner takes the job");
    assert_eq!(launched_beyond(&h, 1), 0);
}

#[tokio::test]
async fn github_job_listings_tell_busy_before_the_journal_does() {
    // The runner took a job (the jobs listing names it) but the inventory has not shown it
    // busy yet, so the journal still says `idle`: it is not supply.
    let h = Harness::new();
    let (a, _) = h.seed("listedbusy", AttemptState::Idle);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    h.github
        .state
        .lock()
        .unwrap()
        .runners_with_jobs
        .insert(a.runner_name().to_owned());
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert_eq!(
        h.journal.attempt(a.id()).state(),
        AttemptState::Idle,
        "the journal had not caught up: the listing alone decided"
    );
}

fn took_a_job(h: &Harness, runner_name: &str) {
    h.github
        .state
        .lock()
        .unwrap()
        .runners_with_jobs
        .insert(runner_name.to_owned());
}

#[tokio::test]
async fn a_job_the_listings_have_not_seen_taken_is_not_served_twice() {
    // The inventory already said busy (journal `busy`), but the job listings read this pass
    // still show its job queued: that job is being run, so no runner is started for it.
    let h = Harness::new();
    let (a, _) = h.seed("busyaheadx", AttemptState::Busy);
    h.github
        .list(a.runner_name(), 55, true, RunnerStatus::Online);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(
        lp.pass().await.launched,
        0,
        "a surplus runner for a running job"
    );
    // A second queued job is another matter.
    h.github.set_jobs(2);
    assert_eq!(lp.pass().await.launched, 1);
}

#[tokio::test]
async fn the_runners_own_diagnostics_tell_busy_too() {
    // Started its job (Worker log) before GitHub's listings show it: neither free supply
    // nor a queued job. With a warm minimum of one, a fresh runner is wanted.
    let h = Harness::new();
    {
        let mut st = h.journal.state.lock().unwrap();
        let p = st
            .policies
            .iter_mut()
            .find(|p| p.id() == rm_core::PolicyId::new(1))
            .unwrap();
        let mut parts = p.to_parts();
        parts.min_capacity = 1;
        *p = rm_core::Policy::from_parts(parts).unwrap();
    }
    let (a, _) = h.seed("diagbusy01", AttemptState::Starting);
    h.github
        .list(a.runner_name(), 55, false, RunnerStatus::Online);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(
        lp.pass().await.launched,
        0,
        "the runner without a job covers the queued one"
    );
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    assert_eq!(
        lp.pass().await.launched,
        1,
        "its job is taken: the warm minimum wants a runner without one"
    );
    assert_eq!(lp.pass().await.launched, 0);
}

#[tokio::test]
async fn a_runner_that_may_take_a_forks_job_is_started_to_read_the_caches_only() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    // A second queued job, from a fork's pull request: the runner started for it (it may take
    // either job) must not write the caches.
    h.github.set_jobs(2);
    h.github.state.lock().unwrap().jobs[1].from_fork = true;
    assert_eq!(lp.pass().await.launched, 1);
    let spawned = h.host.state.lock().unwrap().spawned_for.clone();
    assert_eq!(spawned.len(), 2, "{spawned:?}");
    assert!(!spawned[0].fork_jobs, "only trusted jobs were queued");
    assert!(spawned[1].fork_jobs, "a fork's job was queued");
    assert_eq!(spawned[1].target, target());
}

#[tokio::test]
async fn a_persistent_targets_runner_is_registered_with_its_slot_and_keeps_it_only_after_a_clean_end(
) {
    let h = Harness::new();
    make_persistent(&h);
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    let a = only_attempt(&h);
    // The slot is claimed after the runtime is made and before the runner is registered,
    // which names the slot's work folder.
    let calls = h.log.lock().unwrap().clone();
    let pos = |c: &str| calls.iter().position(|x| x == c).unwrap();
    assert!(pos("host.materialize") < pos("host.claim_workspace"));
    assert!(pos("host.claim_workspace") < pos("github.generate_jit"));
    assert_eq!(
        h.host.state.lock().unwrap().claims,
        vec![(a.id().clone(), rm_core::PolicyId::new(1))]
    );
    assert_eq!(
        h.github.state.lock().unwrap().work_folders,
        vec![Some(std::path::PathBuf::from("/ws/1/0/work"))]
    );
    // The job ran (a push's, by GitHub's word) and the runner left GitHub and exited: its
    // workspace is kept.
    h.github.state.lock().unwrap().verdicts.insert(
        a.runner_name().to_owned(),
        rm_core::TrustVerdict {
            trust: rm_core::JobTrust::Trusted,
            job_id: Some(1),
            run_id: Some(1),
            reason: "a push run".into(),
        },
    );
    h.github.set_jobs(0);
    h.github.unlist(a.runner_name());
    h.host.set_evidence(a.id(), rm_core::Evidence::JobCompleted);
    h.host.kill(a.process().unwrap());
    h.clock.advance(Duration::from_secs(2));
    lp.pass().await;
    assert_eq!(
        h.journal.attempt(a.id()).outcome(),
        Some(Outcome::CompletedJob)
    );
    assert_eq!(h.host.kept_workspace(), vec![true]);

    // A runner that dies without a trace once running resets its slot.
    h.github.set_jobs(1);
    h.clock.advance(Duration::from_secs(2));
    assert_eq!(lp.pass().await.launched, 1);
    let b = h
        .journal
        .attempts()
        .into_iter()
        .find(|x| x.id() != a.id())
        .unwrap();
    h.github.unlist(b.runner_name());
    h.host.kill(b.process().unwrap());
    h.clock.advance(Duration::from_secs(2));
    lp.pass().await;
    let outcome = h.journal.attempt(b.id()).outcome();
    assert!(
        matches!(outcome, Some(Outcome::Failed(_) | Outcome::Orphaned)),
        "{outcome:?}"
    );
    assert_eq!(h.host.kept_workspace(), vec![true, false]);
}

#[tokio::test]
async fn a_runner_that_may_take_a_forks_job_or_an_ephemeral_targets_gets_no_slot() {
    let h = Harness::new();
    make_persistent(&h);
    h.github.set_jobs(1);
    h.github.state.lock().unwrap().jobs[0].from_fork = true;
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert!(h.host.state.lock().unwrap().claims.is_empty());
    assert_eq!(h.github.state.lock().unwrap().work_folders, vec![None]);

    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert!(h.host.state.lock().unwrap().claims.is_empty());
    assert_eq!(h.github.state.lock().unwrap().work_folders, vec![None]);
}
