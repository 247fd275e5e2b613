use super::*;
use crate::signin::SignInSession;
use crate::status::{
    Arch, Demand, FailureReason, GitHubHealth, GitHubHealthState, HostStatus, JobRef, Os,
    ProblemCode, RunnerState, RunnerStatus, TargetKind, TargetProblem, TargetState, TargetStatus,
    Workspace,
};
use crate::watch::RunnerOutcome;

const MIN: i64 = 60 * 1000;

fn t(ms: i64) -> UnixMillis {
    UnixMillis(ms)
}

fn status() -> Status {
    Status {
        host: HostStatus {
            id: "h".into(),
            label: "box".into(),
            os: Os::Linux,
            arch: Arch::X64,
            capacity: 2,
            routing_label: "rm-box-linux-x64".into(),
            capacity_note: None,
            admission: None,
            runner_env: vec![],
        },
        paused: false,
        auth: AuthState::SignedIn {
            login: "octocat".into(),
            expires_at: None,
        },
        targets: vec![target("octo/app"), target("octo/lib"), target("acme")],
        runners: vec![],
        last_github_contact: None,
        budget: None,
        recent_failures: vec![],
        github: None,
        github_health: GitHubHealth::default(),
        host_checks: vec![],
        admission: None,
        workstation: None,
        caches_problem: None,
        left_registrations: Vec::new(),
        pool: None,
    }
}

fn target(name: &str) -> TargetStatus {
    TargetStatus {
        target: name.into(),
        kind: if name.contains('/') {
            TargetKind::Repo
        } else {
            TargetKind::Org
        },
        profile: "default".into(),
        enabled: true,
        state: TargetState::Active,
        max_capacity: Some(2),
        min_capacity: 0,
        labels: vec!["rm-box-linux-x64".into()],
        revision: 1,
        demand: Demand::default(),
        active_runners: 0,
        problem: None,
        typical_peak_rss_bytes: None,
        admission: None,
        cache: None,
        workspace: Workspace::Ephemeral,
        saved_workspaces: 0,
        sandbox: Default::default(),
        pool_label: None,
        capacity_note: None,
    }
}

fn busy(target: &str, job: &str, since: i64) -> RunnerStatus {
    RunnerStatus {
        attempt_id: format!("a-{job}"),
        runner_name: format!("rm-{job}"),
        target: target.into(),
        state: RunnerState::Busy,
        job: Some(JobRef {
            id: Some(1),
            name: Some(job.into()),
            html_url: Some(format!("https://github.com/{target}/actions/runs/1/job/1")),
            ..JobRef::default()
        }),
        since: t(since),
        usage: None,
    }
}

fn failure(target: &str, at: i64, reason: FailureReason) -> Failure {
    Failure {
        at: t(at),
        target: target.into(),
        attempt_id: Some(format!("att-{at}")),
        reason,
        detail: None,
        fix: "the runner exited unexpectedly: its diagnostics are in the service's log".into(),
    }
}

fn snapshot(s: Status) -> Input {
    Input::Message(WatchMessage::Snapshot {
        status: Box::new(s),
    })
}

fn changed(s: Status) -> Input {
    Input::Message(WatchMessage::Changed {
        status: Box::new(s),
    })
}

fn failed(f: Failure) -> Input {
    Input::Message(WatchMessage::Event {
        event: Event::RunnerFailed { failure: f },
    })
}

/// A model that saw a snapshot at time 1000.
fn connected(s: Status) -> Model {
    let mut m = Model::new(t(0), ModelOptions::default());
    assert!(m.fold(snapshot(s), t(1000)).is_empty());
    m
}

#[test]
fn a_new_model_is_connecting_and_says_so() {
    let m = Model::new(t(0), ModelOptions::default());
    let v = m.view(t(0));
    assert_eq!(v.state, TrayState::Connecting);
    assert_eq!(v.header, "Connecting to the service…");
    assert_eq!(m.next_tick(t(0)), None);
}

#[test]
fn idle_busy_paused_and_signed_out_headers() {
    let mut s = status();
    let m = connected(s.clone());
    let v = m.view(t(2000));
    assert_eq!(v.state, TrayState::Idle);
    assert_eq!(v.header, "Idle · 3 targets");
    assert_eq!(v.signed_in_as.as_deref(), Some("octocat"));
    assert_eq!(m.next_tick(t(2000)), None, "idle needs no timer");

    s.runners = vec![
        busy("octo/app", "build", 0),
        busy("octo/lib", "test", 75_000),
    ];
    let mut m = connected(s.clone());
    let v = m.view(t(80_000));
    assert_eq!(v.state, TrayState::Busy);
    assert_eq!(v.header, "Running 2 jobs");
    assert_eq!(v.runners[0].line, "octo/app › build (1m 20s)");
    assert!(
        v.summary.contains("octo/app › build (1m 20s)"),
        "{}",
        v.summary
    );
    assert!(v.summary.contains("octo/lib › test (5s)"), "{}", v.summary);
    assert_eq!(
        m.next_tick(t(80_400)),
        Some(t(81_000)),
        "elapsed times tick"
    );

    s.paused = true;
    m.fold(changed(s.clone()), t(81_000));
    let v = m.view(t(81_000));
    assert_eq!(v.state, TrayState::Paused);
    assert_eq!(v.header, "Paused · 2 runners finishing");

    s.runners.clear();
    s.auth = AuthState::SignedOut;
    s.paused = false;
    m.fold(changed(s), t(82_000));
    let v = m.view(t(82_000));
    assert_eq!(v.state, TrayState::SignedOut);
    assert_eq!(v.header, "Signed out");
}

#[test]
fn a_job_held_back_for_memory_is_said_without_calling_for_attention() {
    let mut s = status();
    s.admission = Some(crate::status::AdmissionHold {
        message: "New runners wait for memory: 900 MiB available …".into(),
        fix: "They start by themselves once memory frees up.".into(),
        available_bytes: 900 << 20,
        reserved_bytes: 0,
        headroom_bytes: 1 << 30,
        expected_bytes: 2 << 30,
    });
    // Nothing queued: a hold is not news.
    let v = connected(s.clone()).view(t(2000));
    assert_eq!(v.header, "Idle · 3 targets");
    s.targets[0].demand.queued = 1;
    let v = connected(s.clone()).view(t(2000));
    assert_eq!(v.state, TrayState::Idle, "not a failure");
    assert_eq!(v.header, "Waiting for memory · 3 targets");
    assert!(
        v.summary.contains("900 MiB available") && v.summary.contains("by themselves"),
        "{}",
        v.summary
    );
    assert!(v.concerns.is_empty());
    s.runners = vec![busy("octo/app", "build", 0)];
    let v = connected(s.clone()).view(t(2000));
    assert_eq!(v.header, "Running 1 job");
    assert!(
        v.summary.ends_with("queued jobs wait (memory)"),
        "{}",
        v.summary
    );
    // A workstation rule says which.
    s.runners.clear();
    s.workstation = Some(crate::status::WorkstationHold {
        rule: "on_battery".into(),
        short: "on battery".into(),
        message: "New runners wait: this machine runs on battery.".into(),
        fix: "They start once it is plugged in.".into(),
    });
    let v = connected(s).view(t(2000));
    assert_eq!(v.header, "Waiting · on battery · 3 targets");
    assert_eq!(v.state, TrayState::Idle);
}

#[test]
fn a_pool_database_that_stays_unreachable_calls_for_attention_a_blip_does_not() {
    let mut s = status();
    s.pool = Some(crate::status::PoolStatus {
        label: "rm-pool-linux-x64".into(),
        address: "db:5432/pool".into(),
        host_id: "box1".into(),
        state: "unreachable".into(),
        message: Some("connection refused".into()),
        since: Some(t(1000)),
        hosts: Vec::new(),
        claims: Vec::new(),
    });
    let v = connected(s.clone()).view(t(1000 + 5_000));
    assert!(v.concerns.is_empty(), "a few seconds: {:?}", v.concerns);
    let v = connected(s.clone()).view(t(1000 + UNREACHABLE_ATTENTION_MS));
    assert_eq!(v.state, TrayState::Attention);
    assert!(
        v.header
            .starts_with("Needs attention: Pool database unreachable for"),
        "{}",
        v.header
    );
    assert!(
        v.summary.contains("runner-manager pool status"),
        "{}",
        v.summary
    );
    s.pool.as_mut().unwrap().state = "connected".into();
    let v = connected(s).view(t(1000 + UNREACHABLE_ATTENTION_MS));
    assert!(v.concerns.is_empty());
}

#[test]
fn a_pool_database_that_refuses_this_host_calls_for_attention_at_once_with_its_fix() {
    let mut s = status();
    s.pool = Some(crate::status::PoolStatus {
        label: "rm-pool-linux-x64".into(),
        address: "db:5432".into(),
        host_id: "box1".into(),
        state: "refused".into(),
        message: Some(
            "PostgreSQL at db:5432 refused the password of 'rm': give the right one".into(),
        ),
        since: Some(t(1000)),
        hosts: Vec::new(),
        claims: Vec::new(),
    });
    let v = connected(s).view(t(1000));
    assert_eq!(v.state, TrayState::Attention);
    assert_eq!(v.concerns.len(), 1, "{:?}", v.concerns);
    let c = &v.concerns[0];
    assert_eq!(c.code, "pool_refused");
    assert!(
        c.fix.contains("refused the password") && c.fix.contains("rm-pool-linux-x64"),
        "{}",
        c.fix
    );
}

#[test]
fn a_runner_failure_notifies_once_names_the_target_and_the_fix_and_calls_for_attention() {
    let mut m = connected(status());
    let notes = m.fold(
        failed(failure(
            "octo/app",
            5000,
            FailureReason::ProcessExitedUnexpectedly,
        )),
        t(5000),
    );
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].title, "Runner failed · octo/app");
    assert!(
        notes[0]
            .body
            .starts_with("The runner exited unexpectedly. What to do: the runner"),
        "{}",
        notes[0].body
    );
    assert_eq!(
        notes[0].action,
        NoticeAction::OpenDashboard {
            failure: Some("att-5000".into())
        }
    );
    // The same failure arriving again in the status is not a second failure.
    let mut s = status();
    s.recent_failures = vec![failure(
        "octo/app",
        5000,
        FailureReason::ProcessExitedUnexpectedly,
    )];
    assert!(m.fold(changed(s), t(5100)).is_empty());
    assert_eq!(m.unacknowledged.len(), 1);
    let v = m.view(t(5100));
    assert_eq!(v.state, TrayState::Attention);
    assert!(
        v.header.contains("Runner failed · octo/app"),
        "{}",
        v.header
    );
    // Looking at it clears the attention.
    m.acknowledge(t(6000));
    assert_eq!(m.view(t(6000)).state, TrayState::Idle);
    assert_eq!(m.failures().len(), 1, "the dashboard still lists it");
    assert!(m.failures()[0].1, "marked seen");
}

#[test]
fn a_crashed_runner_notifies_with_its_job_and_how_it_ended() {
    let mut m = connected(status());
    let mut f = failure("octo/app", 5000, FailureReason::RunnerCrashed);
    f.detail = Some(
        "The runner was killed by signal 9 (SIGKILL) while running job build (run 7 of octo/app)."
            .into(),
    );
    f.fix = "re-run the job from its page on GitHub".into();
    let notes = m.fold(failed(f), t(5000));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        notes[0].body,
        "A runner died in the middle of its job. The runner was killed by signal 9 (SIGKILL) \
         while running job build (run 7 of octo/app). What to do: re-run the job from its page \
         on GitHub."
    );
    // The attention line (tray menu, dashboard) says it too.
    let v = m.view(t(5100));
    let concern = v
        .concerns
        .iter()
        .find(|c| c.code == "runner_failed")
        .unwrap();
    assert!(
        concern
            .fix
            .starts_with("The runner was killed by signal 9 (SIGKILL) while running job build"),
        "{}",
        concern.fix
    );
}

#[test]
fn nothing_to_do_fixes_say_so() {
    let mut m = connected(status());
    let mut f = failure("octo/app", 5000, FailureReason::JitExpired);
    f.fix = "nothing: the runner was replaced".into();
    let notes = m.fold(failed(f), t(5000));
    assert!(
        notes[0]
            .body
            .ends_with("Nothing to do: the runner was replaced."),
        "{}",
        notes[0].body
    );
}

#[test]
fn failures_from_before_the_tray_started_do_not_notify() {
    let mut s = status();
    s.recent_failures = vec![failure("octo/app", 500, FailureReason::JitRequestFailed)];
    let mut m = Model::new(t(1000), ModelOptions::default());
    assert!(m.fold(snapshot(s), t(1000)).is_empty());
    assert_eq!(m.view(t(1000)).state, TrayState::Idle);
    assert_eq!(m.failures().len(), 1);
}

#[test]
fn a_burst_of_twenty_failures_gives_at_most_two_notifications() {
    let mut m = connected(status());
    let mut all = Vec::new();
    for i in 0..20 {
        let target = if i % 3 == 0 { "acme" } else { "octo/app" };
        let at = 10_000 + i * 100;
        all.extend(m.fold(
            failed(failure(
                target,
                at,
                FailureReason::ProcessExitedUnexpectedly,
            )),
            t(at),
        ));
    }
    assert_eq!(all.len(), 1, "{all:?}");
    // The held ones are summarised once the burst is over.
    let due = m.next_tick(t(12_000)).unwrap();
    assert_eq!(due, t(10_100 + BURST_QUIET_MS));
    assert!(m.fold(Input::Tick, t(due.0 - 1)).is_empty());
    let summary = m.fold(Input::Tick, due);
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary[0].kind, NoticeKind::FailureSummary);
    assert!(
        summary[0].body.starts_with("…and 19 more failures"),
        "{}",
        summary[0].body
    );
    assert!(
        summary[0].title.contains("octo/app"),
        "{}",
        summary[0].title
    );
    all.extend(summary);
    // Nothing else for the next ten minutes, whatever the clock does.
    for minute in 1..10 {
        all.extend(m.fold(Input::Tick, t(due.0 + minute * MIN)));
    }
    assert_eq!(all.len(), 2);
    assert_eq!(m.unacknowledged.len(), 20);
}

#[test]
fn one_notification_per_target_and_class_per_ten_minutes() {
    let mut m = connected(status());
    let reason = FailureReason::TerminatedAfterRegistrationTimeout;
    assert_eq!(
        m.fold(failed(failure("octo/app", 0, reason)), t(0)).len(),
        1
    );
    // A minute later, same target and class: held, summarised after the quiet time.
    assert!(m
        .fold(failed(failure("octo/app", MIN, reason)), t(MIN))
        .is_empty());
    assert_eq!(m.next_tick(t(MIN)), Some(t(MIN + BURST_QUIET_MS)));
    let summaries = m.fold(Input::Tick, t(MIN + BURST_QUIET_MS));
    assert_eq!(summaries.len(), 1);
    assert!(
        summaries[0].body.starts_with("…and 1 more failure "),
        "{}",
        summaries[0].body
    );
    // Another class on the same target is not held by the first (only by the burst rule).
    let other = m.fold(
        failed(failure(
            "octo/app",
            2 * MIN,
            FailureReason::JitRequestFailed,
        )),
        t(2 * MIN),
    );
    assert_eq!(other.len(), 1, "{other:?}");
    // Eleven minutes after the first: a new failure of that class notifies again.
    assert_eq!(
        m.fold(failed(failure("octo/app", 13 * MIN, reason)), t(13 * MIN))
            .len(),
        1
    );
}

#[test]
fn summaries_are_spaced_by_ten_minutes_in_a_storm() {
    let mut m = connected(status());
    let reason = FailureReason::ProcessStartFailed;
    let mut notes = Vec::new();
    // A failure every 30 s for 25 minutes.
    for i in 0..50 {
        let at = i * 30_000;
        notes.extend(m.fold(failed(failure("octo/app", at, reason)), t(at)));
        notes.extend(m.fold(Input::Tick, t(at + 15_000)));
    }
    // One at once, a first summary after the quiet time, then one per ten minutes.
    assert!(notes.len() <= 4, "{}: {notes:#?}", notes.len());
    assert!(notes.len() >= 3, "{notes:#?}");
}

#[test]
fn github_unreachable_calls_for_attention_after_two_minutes_and_notifies_once_after_five() {
    let mut s = status();
    s.github_health = GitHubHealth {
        state: GitHubHealthState::Unreachable,
        since: Some(t(0)),
        next_try: Some(t(30_000)),
        detail: Some("connection refused".into()),
        consecutive_failures: 3,
    };
    let mut m = connected(s.clone());
    assert_eq!(
        m.view(t(MIN)).state,
        TrayState::Idle,
        "a short outage is not news"
    );
    assert_eq!(m.next_tick(t(MIN)), Some(t(2 * MIN)));
    let v = m.view(t(2 * MIN));
    assert_eq!(v.state, TrayState::Attention);
    assert!(
        v.header.contains("GitHub unreachable for 2m 0s"),
        "{}",
        v.header
    );
    assert!(v.header.contains("connection refused"), "{}", v.header);
    assert!(m.fold(Input::Tick, t(2 * MIN)).is_empty());
    assert_eq!(m.next_tick(t(2 * MIN)), Some(t(5 * MIN)));
    let notes = m.fold(Input::Tick, t(5 * MIN));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].kind, NoticeKind::GitHubUnreachable);
    assert!(notes[0].body.contains("5m 0s"), "{}", notes[0].body);
    // Once only.
    assert!(m.fold(Input::Tick, t(6 * MIN)).is_empty());
    assert!(m.fold(changed(s.clone()), t(7 * MIN)).is_empty());
    // And once when it is back.
    s.github_health = GitHubHealth::default();
    let back = m.fold(changed(s.clone()), t(8 * MIN));
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].kind, NoticeKind::GitHubBack);
    assert!(m.fold(changed(s), t(9 * MIN)).is_empty());
}

#[test]
fn rate_limited_target_problems_and_failed_host_checks_call_for_attention_with_the_fix() {
    let mut s = status();
    s.github_health = GitHubHealth {
        state: GitHubHealthState::RateLimited,
        since: Some(t(0)),
        next_try: Some(t(10 * MIN)),
        detail: None,
        consecutive_failures: 1,
    };
    s.targets[0].problem = Some(TargetProblem {
        code: ProblemCode::GitHubRefused,
        message: "GitHub answers 403: the App is not installed".into(),
        fix: "Install the GitHub App on octo/app".into(),
        since: t(0),
        consecutive_failures: 0,
        next_try: None,
    });
    s.host_checks = vec![crate::status::HostCheck {
        id: "runner_root_writable".into(),
        title: "Runner directory".into(),
        state: crate::status::CheckState::Fail,
        required: true,
        detail: "/var/lib/runner-manager/runners is read-only".into(),
        fix: Some("remount it read-write".into()),
        checked_at: None,
    }];
    // The doctor's view of the credential is not shown twice (auth says it, and is current).
    s.host_checks.push(crate::status::HostCheck {
        id: "github_credential".into(),
        title: "GitHub accepts the service's credential".into(),
        state: crate::status::CheckState::Fail,
        required: true,
        detail: "the service holds no GitHub credential".into(),
        fix: None,
        checked_at: None,
    });
    let m = connected(s);
    let v = m.view(t(MIN));
    assert_eq!(v.state, TrayState::Attention);
    let codes: Vec<&str> = v.concerns.iter().map(|c| c.code.as_str()).collect();
    assert_eq!(
        codes,
        [
            "rate_limited",
            "host_check_runner_root_writable",
            "github_refused"
        ]
    );
    assert!(
        v.concerns[0].message.contains("for 9m 0s"),
        "{:?}",
        v.concerns[0]
    );
    assert_eq!(v.concerns[2].fix, "Install the GitHub App on octo/app");
}

#[test]
fn the_sandbox_turned_off_stays_in_sight_with_the_fix() {
    let mut s = status();
    let off = crate::status::HostCheck {
        id: "job_sandbox".into(),
        title: "Jobs run inside the sandbox".into(),
        state: crate::status::CheckState::Warn,
        required: false,
        detail: "the sandbox is turned off (`--sandbox off`): jobs run without it".into(),
        fix: Some("start the service without `--sandbox off`".into()),
        checked_at: None,
    };
    // Another warning is only the doctor's business.
    let other = crate::status::HostCheck {
        id: "capacity".into(),
        state: crate::status::CheckState::Warn,
        ..off.clone()
    };
    s.host_checks = vec![off, other];
    let v = connected(s).view(t(MIN));
    assert_eq!(v.state, TrayState::Attention);
    let codes: Vec<&str> = v.concerns.iter().map(|c| c.code.as_str()).collect();
    assert_eq!(codes, ["host_check_job_sandbox"]);
    assert!(v.concerns[0].message.contains("turned off"));
    assert!(v.concerns[0].fix.contains("--sandbox off"));
}

#[test]
fn a_target_without_the_sandbox_or_with_docker_stays_in_sight() {
    let mut s = status();
    s.targets[0].sandbox = crate::status::TargetSandbox {
        walls: false,
        docker: false,
        memory_max_mb: None,
        warning: Some("its jobs run without the sandbox".into()),
    };
    let v = connected(s.clone()).view(t(MIN));
    assert_eq!(v.state, TrayState::Attention);
    let c = v
        .concerns
        .iter()
        .find(|c| c.code == "target_sandbox")
        .expect("a concern");
    assert!(c.message.starts_with(&s.targets[0].target), "{c:?}");
    assert!(c.fix.contains("--sandbox on"), "{c:?}");
    // The default says nothing.
    s.targets[0].sandbox = Default::default();
    let v = connected(s).view(t(MIN));
    assert!(v.concerns.iter().all(|c| c.code != "target_sandbox"));
}

#[test]
fn sign_in_revoked_notifies_once_and_clicking_opens_sign_in() {
    let mut m = connected(status());
    let ev = |reason: &str| {
        Input::Message(WatchMessage::Event {
            event: Event::SignInRequired {
                at: t(1),
                reason: reason.into(),
            },
        })
    };
    let notes = m.fold(ev("the credential was revoked"), t(2000));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].action, NoticeAction::OpenSignIn);
    assert!(
        notes[0].body.starts_with("The credential was revoked")
            || notes[0].body.starts_with("the credential was revoked")
    );
    // The status that follows says the same: no second notification.
    let mut s = status();
    s.auth = AuthState::SignInRequired {
        reason: "the credential was revoked".into(),
    };
    assert!(m.fold(changed(s.clone()), t(3000)).is_empty());
    assert!(m.fold(ev("again"), t(3100)).is_empty());
    let v = m.view(t(3000));
    assert_eq!(v.state, TrayState::Attention);
    assert_eq!(v.concerns[0].code, "sign_in_required");
    // Signed in again, then revoked again: a new notification.
    s.auth = AuthState::SignedIn {
        login: "octocat".into(),
        expires_at: None,
    };
    m.fold(changed(s.clone()), t(4000));
    s.auth = AuthState::SignInRequired {
        reason: "expired".into(),
    };
    assert_eq!(m.fold(changed(s), t(5000)).len(), 1);
}

#[test]
fn an_approved_sign_in_notifies_once() {
    let mut m = connected(status());
    let mut session = SignInSession {
        id: "s1".into(),
        user_code: "ABCD-EFGH".into(),
        verification_uri: "https://github.com/login/device".into(),
        expires_at: t(900_000),
        interval_secs: 5,
        state: SignInState::Waiting,
        login: None,
        message: None,
        fix: None,
        next_try: None,
    };
    let progress = |s: &SignInSession| {
        Input::Message(WatchMessage::Event {
            event: Event::SignInProgress { session: s.clone() },
        })
    };
    assert!(m.fold(progress(&session), t(1)).is_empty());
    session.state = SignInState::Approved;
    session.login = Some("octocat".into());
    let notes = m.fold(progress(&session), t(2));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].title, "Signed in as octocat");
    assert!(m.fold(progress(&session), t(3)).is_empty());
    assert_eq!(
        m.sign_in.as_ref().map(|s| s.state),
        Some(SignInState::Approved)
    );
}

#[test]
fn a_failed_sign_in_is_a_concern_with_the_service_fix_until_signed_in() {
    let mut s = status();
    s.auth = AuthState::SignedOut;
    let mut m = connected(s);
    let session = SignInSession {
        id: "s1".into(),
        user_code: "ABCD-EFGH".into(),
        verification_uri: "https://github.com/login/device".into(),
        expires_at: t(900_000),
        interval_secs: 5,
        state: SignInState::Failed,
        login: None,
        message: Some("device flow is disabled for this GitHub App".into()),
        fix: Some("enable Device Flow in the App's settings".into()),
        next_try: None,
    };
    m.fold(
        Input::Message(WatchMessage::Event {
            event: Event::SignInProgress { session },
        }),
        t(2),
    );
    let v = m.view(t(3));
    assert_eq!(v.state, TrayState::Attention);
    assert_eq!(
        v.concerns[0].fix,
        "enable Device Flow in the App's settings"
    );
}

#[test]
fn finished_jobs_notify_only_when_asked() {
    let concluded = Input::Message(WatchMessage::Event {
        event: Event::RunnerConcluded {
            at: t(1),
            attempt_id: "a".into(),
            runner_name: "rm-a".into(),
            target: "octo/app".into(),
            outcome: RunnerOutcome::CompletedJob,
            job: Some(Box::new(JobRef {
                name: Some("build".into()),
                html_url: Some("https://github.com/octo/app/actions/runs/1/job/2".into()),
                ..JobRef::default()
            })),
        },
    });
    let mut m = connected(status());
    assert!(m.fold(concluded.clone(), t(2)).is_empty());
    m.options.notify_finished_jobs = true;
    let notes = m.fold(concluded, t(3));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].title, "Job finished · octo/app");
    assert_eq!(
        notes[0].action,
        NoticeAction::OpenUrl("https://github.com/octo/app/actions/runs/1/job/2".into())
    );
}

#[test]
fn service_down_names_the_command_and_notifies_only_when_it_stopped_under_the_tray() {
    let mut m = Model::new(t(0), ModelOptions::default());
    let down = Input::Lost(Disconnect::NotRunning {
        sockets: vec!["/run/runner-manager/api.sock".into()],
    });
    // Never connected: no notification, but the state says what to run.
    assert!(m.fold(down.clone(), t(1)).is_empty());
    let v = m.view(t(1));
    assert_eq!(v.state, TrayState::ServiceDown);
    assert_eq!(v.header, "Service not running");
    assert!(
        v.summary.contains("runner-manager daemon run"),
        "{}",
        v.summary
    );
    assert!(v.concerns[0]
        .message
        .contains("/run/runner-manager/api.sock"));
    // Connected, then the stream ends and nothing answers any more: one notification.
    m.fold(snapshot(status()), t(2));
    assert!(m.fold(Input::Lost(Disconnect::Ended), t(3)).is_empty());
    assert_eq!(m.view(t(3)).state, TrayState::Connecting);
    let notes = m.fold(down.clone(), t(4));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].kind, NoticeKind::ServiceStopped);
    assert!(m.fold(down.clone(), t(5)).is_empty(), "once per stop");
    // Back: a fresh snapshot replaces the old status.
    let mut s = status();
    s.targets.truncate(1);
    assert!(m.fold(snapshot(s), t(6)).is_empty());
    assert_eq!(m.view(t(6)).header, "Idle · 1 target");
    assert_eq!(m.fold(down, t(7)).len(), 1, "a later stop notifies again");
}

#[test]
fn not_allowed_and_version_mismatch_say_what_to_do() {
    let mut m = Model::new(t(0), ModelOptions::default());
    m.fold(
        Input::Lost(Disconnect::NotAllowed {
            detail: "uid 1000 may not use this service".into(),
        }),
        t(1),
    );
    let v = m.view(t(1));
    assert_eq!(v.state, TrayState::NotAllowed);
    assert!(v.concerns[0].fix.contains("--operator"), "{:?}", v.concerns);
    m.fold(
        Input::Lost(Disconnect::VersionMismatch {
            detail: "the service speaks API 1 but this tray needs 2: update runner-manager (the service, now 0.1.0)".into(),
        }),
        t(2),
    );
    let v = m.view(t(2));
    assert_eq!(v.header, "Update needed");
    assert!(v.concerns[0]
        .fix
        .contains("Update the runner-manager service"));
    m.fold(
        Input::Lost(Disconnect::VersionMismatch {
            detail: "… speaks 1: update the tray".into(),
        }),
        t(3),
    );
    assert!(m.view(t(3)).concerns[0]
        .fix
        .contains("Update the runner-manager tray"));
}

#[test]
fn unknown_kinds_are_skipped_and_noted_garbage_marks_the_connection() {
    let mut m = connected(status());
    let unknown: WatchMessage =
        serde_json::from_str(r#"{"type":"event","event":{"kind":"moon_landing","at":1}}"#).unwrap();
    assert!(m.fold(Input::Message(unknown), t(2)).is_empty());
    let unknown: WatchMessage = serde_json::from_str(r#"{"type":"heartbeat"}"#).unwrap();
    m.fold(Input::Message(unknown), t(3));
    assert_eq!(m.skipped, 2);
    assert!(m
        .stream_note
        .as_deref()
        .unwrap_or("")
        .contains("newer service"));
    assert_eq!(
        m.view(t(3)).state,
        TrayState::Idle,
        "still shows the status"
    );
    m.fold(
        Input::Lost(Disconnect::Unreadable {
            detail: "a watch line is not a watch message: expected value".into(),
        }),
        t(4),
    );
    let v = m.view(t(4));
    assert_eq!(v.state, TrayState::ServiceDown);
    assert_eq!(v.header, "Service not reachable");
    assert!(
        m.status.is_some(),
        "the last status is kept for the windows"
    );
    // The reconnect's snapshot puts everything right.
    m.fold(snapshot(status()), t(5));
    assert_eq!(m.view(t(5)).state, TrayState::Idle);
}

#[test]
fn a_failure_missed_while_disconnected_arrives_with_the_next_snapshot() {
    let mut m = connected(status());
    m.fold(Input::Lost(Disconnect::Ended), t(2000));
    let mut s = status();
    s.recent_failures = vec![failure("acme", 2500, FailureReason::JitRequestFailed)];
    let notes = m.fold(snapshot(s), t(3000));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].title, "Runner failed · acme");
}

#[test]
fn a_real_stream_folds_line_by_line() {
    // Lines as the service writes them (serde of the wire types), fed in order.
    let mut s = status();
    let mut lines = vec![WatchMessage::Snapshot {
        status: Box::new(s.clone()),
    }];
    s.runners = vec![busy("octo/app", "build", 1000)];
    lines.push(WatchMessage::Changed {
        status: Box::new(s.clone()),
    });
    lines.push(WatchMessage::Event {
        event: Event::RunnerFailed {
            failure: failure("octo/app", 3000, FailureReason::ProcessExitedUnexpectedly),
        },
    });
    let mut m = Model::new(t(0), ModelOptions::default());
    let mut notes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let text = String::from_utf8(line.to_line().unwrap()).unwrap();
        let back: WatchMessage = serde_json::from_str(text.trim_end()).unwrap();
        notes.extend(m.fold(Input::Message(back), t(2000 + i as i64 * 1000)));
        if i == 1 {
            assert_eq!(m.view(t(3000)).header, "Running 1 job");
        }
    }
    assert_eq!(notes.len(), 1);
    assert_eq!(m.view(t(5000)).state, TrayState::Attention);
}

// Updates: the service's updater as the tray presents it.

use crate::update::{InstallKind, UpdateMode, UpdateState, UpdateStatus};

fn update_status(state: UpdateState, mode: UpdateMode, kind: InstallKind) -> Input {
    Input::Update(Box::new(UpdateStatus {
        current_version: "0.1.0".into(),
        mode,
        install_kind: kind,
        state,
        feed: "http://feed/repos/r/r/releases/latest".into(),
        ..UpdateStatus::default()
    }))
}

fn event(e: Event) -> Input {
    Input::Message(WatchMessage::Event { event: e })
}

fn available(version: &str, automatic: bool) -> Input {
    event(Event::UpdateAvailable {
        at: t(1),
        current_version: "0.1.0".into(),
        new_version: version.into(),
        automatic,
    })
}

/// Connected to a portable install in `mode`, up to date.
fn with_updater(mode: UpdateMode) -> Model {
    let mut m = connected(status());
    let n = m.fold(
        update_status(UpdateState::UpToDate, mode, InstallKind::Portable),
        t(1500),
    );
    assert!(n.is_empty(), "{n:?}");
    m
}

#[test]
fn no_update_item_until_the_service_tells_of_one() {
    let m = connected(status());
    assert_eq!(
        m.view(t(2000)).update,
        None,
        "an older service says nothing"
    );
    let m = with_updater(UpdateMode::Notify);
    let u = m.view(t(2000)).update.unwrap();
    assert_eq!(u.menu, None);
    assert_eq!(u.words, "Up to date");
    assert_eq!(u.current_version, "0.1.0");
    assert_eq!(m.about("0.1.0"), "About runner-manager 0.1.0");
    assert_eq!(
        m.about("0.0.9"),
        "About runner-manager 0.0.9 · service 0.1.0",
        "the service's version when it differs"
    );
}

#[test]
fn an_available_update_notifies_once_saying_it_waits_and_offers_the_menu_item() {
    let mut m = with_updater(UpdateMode::Notify);
    let n = m.fold(available("0.2.0", false), t(2000));
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].kind, NoticeKind::UpdateAvailable);
    assert_eq!(n[0].title, "runner-manager 0.2.0 is available");
    assert!(n[0].body.contains("Update to 0.2.0…"), "{}", n[0].body);
    assert!(
        n[0].body.contains("running jobs finish first"),
        "{}",
        n[0].body
    );
    assert_eq!(n[0].action, NoticeAction::OpenUpdate);
    let v = m.view(t(2000));
    let u = v.update.unwrap();
    assert_eq!(u.menu.as_deref(), Some("Update to 0.2.0…"));
    assert_eq!(u.action, Some(UpdateAction::Apply));
    assert_eq!(u.state, UpdateState::Available);
    assert_eq!(u.mode, Some(UpdateMode::Notify));
    assert!(u.words.contains("when you choose"), "{}", u.words);
    assert_eq!(v.state, TrayState::Idle, "an update is no alarm");

    // The periodic checks and a reconnect (the restarted service announces it again, the
    // tray reads the status again): nothing twice.
    assert!(m.fold(available("0.2.0", false), t(3000)).is_empty());
    m.fold(Input::Lost(Disconnect::Ended), t(4000));
    m.fold(snapshot(status()), t(5000));
    let mut again = UpdateStatus {
        current_version: "0.1.0".into(),
        mode: UpdateMode::Notify,
        install_kind: InstallKind::Portable,
        state: UpdateState::Available,
        available_version: Some("0.2.0".into()),
        ..UpdateStatus::default()
    };
    assert!(m
        .fold(Input::Update(Box::new(again.clone())), t(5100))
        .is_empty());
    assert!(m.fold(available("0.2.0", false), t(5200)).is_empty());
    // A newer one notifies again.
    again.available_version = Some("0.3.0".into());
    let n = m.fold(Input::Update(Box::new(again)), t(6000));
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].title, "runner-manager 0.3.0 is available");
}

#[test]
fn an_automatic_update_says_it_applies_by_itself() {
    let mut m = with_updater(UpdateMode::Auto);
    let n = m.fold(available("0.2.0", true), t(2000));
    assert_eq!(n.len(), 1);
    assert!(n[0].body.contains("installs it by itself"), "{}", n[0].body);
    assert!(m.view(t(2000)).update.unwrap().words.contains("by itself"));
}

#[test]
fn an_unmanaged_install_is_told_to_install_the_package() {
    let mut m = connected(status());
    m.fold(
        update_status(
            UpdateState::UpToDate,
            UpdateMode::Auto,
            InstallKind::Unmanaged,
        ),
        t(1500),
    );
    let n = m.fold(available("0.2.0", false), t(2000));
    assert!(
        n[0].body.contains("install the new release's package"),
        "{}",
        n[0].body
    );
    let u = m.view(t(2000)).update.unwrap();
    assert_eq!(
        u.menu.as_deref(),
        Some("runner-manager 0.2.0 is available — install its package")
    );
    assert_eq!(
        u.action,
        Some(UpdateAction::OpenDashboard),
        "nothing to apply"
    );
}

#[test]
fn downloading_shows_progress_and_applying_says_jobs_finish_first() {
    let mut m = with_updater(UpdateMode::Notify);
    m.fold(available("0.2.0", false), t(2000));
    let progress = |downloaded, total| {
        event(Event::UpdateProgress {
            at: t(2),
            new_version: "0.2.0".into(),
            downloaded,
            total,
        })
    };
    assert!(m.fold(progress(400, Some(1000)), t(2100)).is_empty());
    let u = m.view(t(2100)).update.unwrap();
    assert_eq!(u.menu.as_deref(), Some("Downloading 0.2.0 · 40 %"));
    assert_eq!(u.percent, Some(40));
    assert_eq!(u.action, None, "nothing to click while it downloads");
    m.fold(progress(400, None), t(2200));
    assert_eq!(
        m.view(t(2200)).update.unwrap().menu.as_deref(),
        Some("Downloading 0.2.0…")
    );
    let n = m.fold(
        event(Event::UpdateApplying {
            at: t(3),
            new_version: "0.2.0".into(),
        }),
        t(2300),
    );
    assert!(n.is_empty(), "the user asked for it or was told: {n:?}");
    let u = m.view(t(2300)).update.unwrap();
    assert_eq!(
        u.menu.as_deref(),
        Some("Updating to 0.2.0 — running jobs finish first")
    );
    assert_eq!(u.action, None);
    // A progress line that arrives late does not take it back.
    m.fold(progress(1000, Some(1000)), t(2400));
    assert_eq!(m.view(t(2400)).update.unwrap().state, UpdateState::Applying);
}

#[test]
fn updated_to_x_notifies_once_after_update_finished() {
    let mut m = with_updater(UpdateMode::Auto);
    m.fold(available("0.2.0", true), t(2000));
    m.fold(
        event(Event::UpdateApplying {
            at: t(3),
            new_version: "0.2.0".into(),
        }),
        t(2100),
    );
    // The service restarts: the stream ends, the new service answers.
    m.fold(Input::Lost(Disconnect::Ended), t(3000));
    m.fold(snapshot(status()), t(4000));
    let updated = UpdateStatus {
        current_version: "0.2.0".into(),
        mode: UpdateMode::Auto,
        install_kind: InstallKind::Portable,
        state: UpdateState::Updated,
        previous_version: Some("0.1.0".into()),
        ..UpdateStatus::default()
    };
    let n = m.fold(Input::Update(Box::new(updated.clone())), t(4100));
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].kind, NoticeKind::UpdateFinished);
    assert_eq!(n[0].title, "Updated to 0.2.0");
    assert!(n[0].body.contains("it ran 0.1.0"), "{}", n[0].body);
    let finished = event(Event::UpdateFinished {
        at: t(5),
        previous_version: "0.1.0".into(),
        new_version: "0.2.0".into(),
    });
    assert!(m.fold(finished.clone(), t(4200)).is_empty(), "once");
    m.fold(Input::Lost(Disconnect::Ended), t(5000));
    m.fold(snapshot(status()), t(6000));
    assert!(m.fold(Input::Update(Box::new(updated)), t(6100)).is_empty());
    let u = m.view(t(6100)).update.unwrap();
    assert_eq!(u.menu, None);
    assert_eq!(u.words, "Updated to 0.2.0 (from 0.1.0)");
    assert_eq!(m.about("0.2.0"), "About runner-manager 0.2.0");

    // The event alone (the first watcher after the restart) notifies too.
    let mut m = with_updater(UpdateMode::Auto);
    let n = m.fold(finished, t(2000));
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].title, "Updated to 0.2.0");
    assert_eq!(m.service_version(), Some("0.2.0"));
}

#[test]
fn an_update_from_before_the_tray_started_is_shown_not_notified() {
    let mut m = connected(status());
    let old = UpdateStatus {
        current_version: "0.2.0".into(),
        mode: UpdateMode::Auto,
        install_kind: InstallKind::Deb,
        state: UpdateState::Updated,
        previous_version: Some("0.1.0".into()),
        ..UpdateStatus::default()
    };
    assert!(m.fold(Input::Update(Box::new(old)), t(1500)).is_empty());
    let mut m = connected(status());
    let waiting = UpdateStatus {
        current_version: "0.1.0".into(),
        mode: UpdateMode::Notify,
        install_kind: InstallKind::Deb,
        state: UpdateState::Available,
        available_version: Some("0.2.0".into()),
        ..UpdateStatus::default()
    };
    assert!(m.fold(Input::Update(Box::new(waiting)), t(1500)).is_empty());
    assert_eq!(
        m.view(t(1500)).update.unwrap().menu.as_deref(),
        Some("Update to 0.2.0…"),
        "but the menu offers it"
    );
}

#[test]
fn a_failed_update_notifies_once_with_the_service_fix_and_offers_a_retry() {
    let mut m = with_updater(UpdateMode::Notify);
    m.fold(available("0.2.0", false), t(2000));
    let failed = event(Event::UpdateFailed {
        at: t(3),
        new_version: Some("0.2.0".into()),
        reason: "runner-manager-0.2.0-linux-x86_64.tar.gz: the signature does not verify".into(),
        fix: "nothing was changed; the release is not tried again by itself: check the release, \
              then retry with `runner-manager update`"
            .into(),
    });
    let n = m.fold(failed.clone(), t(2100));
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].kind, NoticeKind::UpdateFailed);
    assert_eq!(n[0].title, "Update to 0.2.0 failed");
    assert!(
        n[0].body.starts_with(
            "runner-manager-0.2.0-linux-x86_64.tar.gz: the signature does not verify. \
             Nothing was changed; the release is not tried again by itself"
        ),
        "{}",
        n[0].body
    );
    let u = m.view(t(2100)).update.unwrap();
    assert_eq!(
        u.menu.as_deref(),
        Some("Update to 0.2.0 failed — try again…")
    );
    assert_eq!(u.action, Some(UpdateAction::Apply));
    assert!(u
        .fix
        .unwrap()
        .ends_with("retry with `runner-manager update`."));
    assert!(u.words.contains("signature does not verify"), "{}", u.words);
    assert!(m.fold(failed, t(2200)).is_empty(), "once");
    // A reconnect reads the same failure from the status: not again.
    m.fold(Input::Lost(Disconnect::Ended), t(3000));
    m.fold(snapshot(status()), t(4000));
    let same = UpdateStatus {
        current_version: "0.1.0".into(),
        mode: UpdateMode::Notify,
        install_kind: InstallKind::Portable,
        state: UpdateState::Failed,
        available_version: Some("0.2.0".into()),
        message: Some(
            "runner-manager-0.2.0-linux-x86_64.tar.gz: the signature does not verify".into(),
        ),
        fix: Some("it is not applied again by itself".into()),
        ..UpdateStatus::default()
    };
    assert!(m.fold(Input::Update(Box::new(same)), t(4100)).is_empty());

    // A rollback across the restart (no event: the service that failed is gone) notifies.
    let mut m = with_updater(UpdateMode::Auto);
    m.fold(available("0.2.0", true), t(2000));
    m.fold(Input::Lost(Disconnect::Ended), t(3000));
    m.fold(snapshot(status()), t(4000));
    let rolled_back = UpdateStatus {
        current_version: "0.1.0".into(),
        mode: UpdateMode::Auto,
        install_kind: InstallKind::Portable,
        state: UpdateState::Failed,
        available_version: Some("0.2.0".into()),
        message: Some("runner-manager 0.2.0 did not answer its version within 30 s".into()),
        fix: Some("retry with `runner-manager update`".into()),
        ..UpdateStatus::default()
    };
    let n = m.fold(Input::Update(Box::new(rolled_back)), t(4100));
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].body.contains("did not answer"), "{}", n[0].body);
}

#[test]
fn update_events_without_the_status_still_show() {
    // An older service without `GET /v1/update`, or events before its answer.
    let mut m = connected(status());
    let n = m.fold(available("0.2.0", false), t(2000));
    assert_eq!(n.len(), 1);
    let u = m.view(t(2000)).update.unwrap();
    assert_eq!(u.menu.as_deref(), Some("Update to 0.2.0…"));
    assert_eq!(u.mode, None, "not known without the status");
}
