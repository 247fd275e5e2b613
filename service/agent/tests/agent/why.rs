//! The pass record behind `why`: what the loop saw and decided, explained by `rm_core::explain`.

use crate::support::*;
use rm_agent::GhError;
use rm_core::{explain, JobDemand, PassStop, PolicyState, Reason, RunsOn};

fn reasons(lp: &Loop) -> Vec<(u64, Reason)> {
    let view = lp.last_pass().expect("a pass was recorded");
    explain(&view)
        .into_iter()
        .map(|w| (w.job.job_id, w.reason))
        .collect()
}

fn add_job(h: &Harness, id: u64, labels: &[&str]) {
    h.github.state.lock().unwrap().jobs.push(JobDemand {
        job_id: id,
        run_id: 1,
        repository: String::new(),
        name: String::new(),
        queued_at_ms: None,
        labels: RunsOn::Labels(labels.iter().map(|s| s.to_string()).collect()),
        from_fork: false,
    });
}

#[tokio::test]
async fn each_job_gets_the_runner_started_for_it_or_what_held_it_back() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().capacity = 1;
    h.github.set_jobs(3);
    add_job(&h, 2000, &["self-hosted", LABEL, "gpu"]);
    let lp = h.make_loop(target());
    assert!(lp.last_pass().is_none(), "nothing recorded before a pass");
    assert_eq!(lp.pass().await.launched, 1);
    let started = h.journal.attempts()[0].id().runner_name();
    let why = reasons(&lp);
    assert_eq!(
        why[0],
        (
            1000,
            Reason::RunnerStarting {
                runner: started.clone()
            }
        )
    );
    // The host's one slot went to that runner; the policy's own maximum (2) did not decide.
    for (job, reason) in &why[1..3] {
        assert!(
            matches!(reason, Reason::HostFull { capacity: 1, runners } if *runners == [started.clone()]),
            "job {job}: {reason:?}"
        );
    }
    assert!(
        matches!(&why[3].1, Reason::LabelsMismatch { missing, .. } if *missing == ["gpu"]),
        "{:?}",
        why[3]
    );

    // The next pass: the runner is up without a job, so the oldest job is its to take.
    lp.pass().await;
    let why = reasons(&lp);
    assert_eq!(why[0].1, Reason::RunnerReady { runner: started });
    assert_eq!(why[1].1.code(), "host_full");
}

#[tokio::test]
async fn a_pass_that_cannot_read_the_queue_keeps_the_last_jobs_and_says_why() {
    let h = Harness::new();
    h.journal.state.lock().unwrap().capacity = 0;
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    lp.pass().await;
    let first = lp.last_pass().unwrap();
    assert_eq!(first.jobs_read_at, Some(t(0)));
    h.clock.advance(std::time::Duration::from_secs(30));
    h.github.state.lock().unwrap().queued_error = Some(GhError::RateLimited { until: t(600_000) });
    lp.pass().await;
    let view = lp.last_pass().unwrap();
    assert_eq!(view.jobs_read_at, Some(t(0)), "the jobs as last read");
    assert_eq!(view.at, t(30_000));
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(reasons(&lp)[0].1.code(), "rate_limited");
}

#[tokio::test]
async fn a_disabled_target_and_a_backing_off_one_say_so() {
    let h = Harness::new();
    h.github.set_jobs(1);
    h.journal.state.lock().unwrap().policies[0].set_enabled(false);
    let lp = h.make_loop(target());
    lp.pass().await;
    assert_eq!(lp.last_pass().unwrap().stop, Some(PassStop::NothingPolled));
    assert!(
        lp.last_pass().unwrap().jobs_read_at.is_none(),
        "a target disabled from the start never reads the queue"
    );
    // Enabled for one pass (nothing fits the host), then disabled: the job seen says why.
    h.journal.state.lock().unwrap().capacity = 0;
    h.journal.state.lock().unwrap().policies[0].set_enabled(true);
    lp.pass().await;
    lp.pass().await;
    assert_eq!(reasons(&lp)[0].1.code(), "host_full");
    h.journal.state.lock().unwrap().policies[0].set_enabled(false);
    lp.pass().await;
    lp.pass().await;
    assert_eq!(h.journal.policy(1).state(), PolicyState::Disabled);
    assert_eq!(lp.last_pass().unwrap().stop, Some(PassStop::NothingPolled));
    assert_eq!(reasons(&lp)[0].1, Reason::Disabled);

    // A launch that fails for a reason that counts: the next pass backs off and says why.
    let h = Harness::new();
    h.github.set_jobs(1);
    h.github
        .state
        .lock()
        .unwrap()
        .jit_script
        .push_back(GhError::Invalid {
            detail: "HTTP 200: truncated JSON".into(),
        });
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    lp.pass().await;
    let why = reasons(&lp);
    assert_eq!(why[0].1.code(), "launch_backoff", "{why:?}");
}
