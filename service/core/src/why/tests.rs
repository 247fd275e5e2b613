use super::*;
use crate::fitness::CheckState;

fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn job(id: u64, labels: &[&str]) -> JobDemand {
    JobDemand {
        job_id: id,
        run_id: 1,
        repository: String::new(),
        name: String::new(),
        queued_at_ms: None,
        labels: RunsOn::Labels(labels.iter().map(|s| s.to_string()).collect()),
        from_fork: false,
    }
}

fn policy(id: i64, labels: &[&str]) -> PolicyPass {
    PolicyPass {
        policy_id: PolicyId::new(id),
        labels: LabelSet::parse(labels.iter().copied()).unwrap(),
        state: PolicyState::Active,
        enabled: true,
        max_capacity: Some(2),
        lagging: Vec::new(),
        ready: Vec::new(),
        busy: Vec::new(),
        grant: None,
        block: None,
        started: Vec::new(),
        hold: None,
    }
}

fn grant(id: i64, to_start: u32, limited_by: Limit) -> Option<Grant> {
    Some(Grant {
        policy_id: PolicyId::new(id),
        to_start,
        limited_by,
    })
}

fn view(jobs: Vec<JobDemand>, policies: Vec<PolicyPass>) -> PassView {
    PassView {
        at: ts(1_000),
        os: Os::Linux,
        arch: Arch::X64,
        jobs,
        jobs_read_at: Some(ts(1_000)),
        is_floor: false,
        stop: None,
        policies,
        host_capacity: Some(2),
        host_runners: Vec::new(),
    }
}

fn codes(v: &PassView) -> Vec<(u64, String)> {
    explain(v)
        .into_iter()
        .map(|w| (w.job.job_id, w.reason.code().to_owned()))
        .collect()
}

const L: &str = "rm-box-linux-x64";

#[test]
fn jobs_are_matched_with_runners_oldest_first_then_the_limit() {
    let mut p = policy(1, &[L]);
    p.lagging = vec!["rm-a".into()];
    p.ready = vec!["rm-b".into()];
    p.started = vec!["rm-c".into()];
    p.busy = vec!["rm-a".into()];
    p.grant = grant(1, 1, Limit::MaxCapacity);
    let v = view(
        vec![
            job(14, &["self-hosted", L]),
            job(11, &[L]),
            job(12, &[L]),
            job(13, &["self-hosted", "Linux", L]),
        ],
        vec![p],
    );
    let why = explain(&v);
    assert_eq!(
        why.iter().map(|w| w.job.job_id).collect::<Vec<_>>(),
        [11, 12, 13, 14],
        "oldest first"
    );
    assert_eq!(
        why[0].reason,
        Reason::BeingTaken {
            runner: "rm-a".into()
        }
    );
    assert_eq!(
        why[1].reason,
        Reason::RunnerReady {
            runner: "rm-b".into()
        }
    );
    assert_eq!(
        why[2].reason,
        Reason::RunnerStarting {
            runner: "rm-c".into()
        }
    );
    assert_eq!(
        why[3].reason,
        Reason::PolicyFull {
            max: 2,
            runners: vec!["rm-a".into(), "rm-b".into(), "rm-c".into()]
        }
    );
    assert!(why.iter().all(|w| w.policy == Some(PolicyId::new(1))));
}

#[test]
fn a_job_for_other_labels_names_the_missing_one() {
    let v = view(
        vec![
            job(1, &["self-hosted", L, "gpu"]),
            job(2, &["ubuntu-latest"]),
            job(3, &["self-hosted", "macOS", L]),
        ],
        vec![policy(1, &[L]), policy(2, &["rm-box-linux-x64-big", "big"])],
    );
    let why = explain(&v);
    assert_eq!(
        why[0].reason,
        Reason::LabelsMismatch {
            missing: vec!["gpu".into()],
            labels: vec![L.into()],
            github_hosted: false
        }
    );
    assert_eq!(why[0].policy, Some(PolicyId::new(1)), "the closest policy");
    assert_eq!(why[1].reason.code(), "github_hosted");
    // The OS is one of GitHub's default labels: a Linux host lacks `macOS`.
    match &why[2].reason {
        Reason::LabelsMismatch { missing, .. } => assert_eq!(missing, &["macOS".to_string()]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unresolvable_runs_on_is_reported_as_such() {
    let mut v = view(vec![job(1, &[])], vec![policy(1, &[L])]);
    v.jobs.push(JobDemand {
        job_id: 2,
        run_id: 1,
        repository: String::new(),
        name: String::new(),
        queued_at_ms: None,
        labels: RunsOn::Unresolvable("${{ matrix.os }}".into()),
        from_fork: false,
    });
    let why = explain(&v);
    assert_eq!(why[0].reason, Reason::Unresolvable { raw: "[]".into() });
    assert_eq!(
        why[1].reason,
        Reason::Unresolvable {
            raw: "${{ matrix.os }}".into()
        }
    );
}

#[test]
fn the_policys_own_state_comes_before_capacity() {
    let mut disabled = policy(1, &[L]);
    disabled.enabled = false;
    let mut monitor = policy(2, &["rm-box-linux-x64-mon"]);
    monitor.max_capacity = None;
    let mut signed_out = policy(3, &["rm-box-linux-x64-auth"]);
    signed_out.state = PolicyState::AuthenticationFailed;
    let mut refused = policy(4, &["rm-box-linux-x64-refused"]);
    refused.state = PolicyState::RepairRequired;
    let v = view(
        vec![
            job(1, &[L]),
            job(2, &["rm-box-linux-x64-mon"]),
            job(3, &["rm-box-linux-x64-auth"]),
            job(4, &["rm-box-linux-x64-refused"]),
        ],
        vec![disabled, monitor, signed_out, refused],
    );
    assert_eq!(
        codes(&v),
        [
            (1, "target_disabled".to_string()),
            (2, "monitor_only".into()),
            (3, "sign_in_failed".into()),
            (4, "repair_required".into())
        ]
    );
}

#[test]
fn host_capacity_names_the_hold_or_the_runners() {
    let mut p = policy(1, &[L]);
    p.grant = grant(1, 0, Limit::HostCapacity);
    let mut v = view(vec![job(1, &[L])], vec![p]);
    v.host_runners = vec!["rm-x".into(), "rm-y".into()];
    assert_eq!(
        explain(&v)[0].reason,
        Reason::HostFull {
            capacity: 2,
            runners: vec!["rm-x".into(), "rm-y".into()]
        }
    );
    let hold = CapacityHold {
        code: "memory".into(),
        message: "New runners wait for memory".into(),
        fix: "close something".into(),
    };
    v.policies[0].hold = Some(hold.clone());
    assert_eq!(explain(&v)[0].reason, Reason::Held(hold));
    assert_eq!(explain(&v)[0].reason.code(), "memory");
}

#[test]
fn a_hold_explains_every_job_past_the_runners_in_hand() {
    // Max 2, three jobs: two runners granted and held back; the third waits for the same
    // reason (the maximum is not what stops it while nothing can start).
    let mut p = policy(1, &[L]);
    p.grant = grant(1, 2, Limit::MaxCapacity);
    p.hold = Some(CapacityHold {
        code: "pool_elsewhere".into(),
        message: "held".into(),
        fix: "wait".into(),
    });
    let v = view(vec![job(1, &[L]), job(2, &[L]), job(3, &[L])], vec![p]);
    assert_eq!(
        codes(&v),
        vec![
            (1, "pool_elsewhere".into()),
            (2, "pool_elsewhere".into()),
            (3, "pool_elsewhere".into())
        ]
    );
}

#[test]
fn each_policy_is_explained_by_its_own_hold() {
    // Two targets' policies, both limited by the host: only the larger runner waits for
    // memory; the other is held by the runners that fill the host.
    let mut small = policy(1, &[L]);
    small.grant = grant(1, 0, Limit::HostCapacity);
    let mut large = policy(2, &["rm-box-linux-x64-big"]);
    large.grant = grant(2, 0, Limit::HostCapacity);
    large.hold = Some(CapacityHold {
        code: "memory".into(),
        message: "A 6 GiB runner waits for memory".into(),
        fix: "close something".into(),
    });
    let mut v = view(
        vec![job(1, &[L]), job(2, &["rm-box-linux-x64-big"])],
        vec![small, large],
    );
    v.host_runners = vec!["rm-x".into()];
    assert_eq!(
        codes(&v),
        vec![(1, "host_full".into()), (2, "memory".into())]
    );
}

#[test]
fn the_launch_gate_names_the_back_off_and_the_package() {
    let mut p = policy(1, &[L]);
    p.grant = grant(1, 1, Limit::Demand);
    p.block = Some(LaunchBlock::BackingOff {
        failures: 2,
        next_try: ts(60_000),
        cause: BlockCause::Failed {
            reason: FailureReason::PackageUnverified,
            detail: "checksum mismatch".into(),
        },
    });
    let mut q = policy(2, &["rm-box-linux-x64-b"]);
    q.grant = grant(2, 1, Limit::Demand);
    q.block = Some(LaunchBlock::BackingOff {
        failures: 1,
        next_try: ts(60_000),
        cause: BlockCause::HostUnfit {
            check: HostCheck {
                id: "disk_space".into(),
                title: "Disk space".into(),
                state: CheckState::Fail,
                required: true,
                detail: "1 MiB free".into(),
                fix: Some("free space".into()),
            },
        },
    });
    let mut r = policy(3, &["rm-box-linux-x64-c"]);
    r.state = PolicyState::RepairRequired;
    r.block = Some(LaunchBlock::GaveUp {
        failures: 5,
        cause: BlockCause::Failed {
            reason: FailureReason::ProcessStartFailed,
            detail: "exec format error".into(),
        },
    });
    let v = view(
        vec![
            job(1, &[L]),
            job(2, &["rm-box-linux-x64-b"]),
            job(3, &["rm-box-linux-x64-c"]),
        ],
        vec![p, q, r],
    );
    assert_eq!(
        codes(&v),
        [
            (1, "package_unverified".to_string()),
            (2, "host_unfit".into()),
            (3, "launch_failing".into())
        ]
    );
}

#[test]
fn a_stopped_pass_explains_every_matching_job_but_labels_still_show() {
    let mut v = view(
        vec![job(1, &[L]), job(2, &["ubuntu-22.04"])],
        vec![policy(1, &[L])],
    );
    v.stop = Some(PassStop::Demand(DemandUnread::RateLimited {
        until: ts(90_000),
    }));
    assert_eq!(
        codes(&v),
        [(1, "rate_limited".to_string()), (2, "github_hosted".into())]
    );
    v.stop = Some(PassStop::Paused);
    assert_eq!(codes(&v)[0].1, "paused");
    // A target whose policies are not polled: each policy's state says why.
    v.stop = Some(PassStop::NothingPolled);
    v.policies[0].state = PolicyState::AuthenticationFailed;
    assert_eq!(codes(&v)[0].1, "sign_in_failed");
}

#[test]
fn a_runner_in_hand_wins_over_another_profiles_obstacle() {
    // Two profiles both serve `L`; the first is full, the second has a waiting runner.
    let mut full = policy(1, &[L]);
    full.grant = grant(1, 0, Limit::MaxCapacity);
    let mut ready = policy(2, &[L, "extra"]);
    ready.ready = vec!["rm-r".into()];
    ready.grant = grant(2, 0, Limit::Satisfied);
    let why = explain(&view(vec![job(1, &[L])], vec![full, ready]));
    assert_eq!(
        why[0].reason,
        Reason::RunnerReady {
            runner: "rm-r".into()
        }
    );
    assert_eq!(why[0].policy, Some(PolicyId::new(2)));
}

#[test]
fn granted_but_not_started_says_so() {
    let mut p = policy(1, &[L]);
    p.grant = grant(1, 1, Limit::Demand);
    let v = view(vec![job(1, &[L])], vec![p]);
    assert_eq!(codes(&v)[0].1, "not_started_yet");
}
