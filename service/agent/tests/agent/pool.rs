//! Placement through a pool of hosts: a pooled policy reads its demand through the pool, starts
//! a runner only with a claim, and gives the claim back when the runner ends.

use crate::support::*;
use rm_agent::RunnerStatus;
use rm_core::{explain, AttemptState, Evidence, Outcome, Reason};

const FIVE_MIN: std::time::Duration = std::time::Duration::from_secs(301);

fn join_pool(h: &Harness) -> Vec<u64> {
    h.github.state.lock().unwrap().pool = Some(FakePool::default());
    h.github.set_jobs(3);
    h.github
        .state
        .lock()
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.job_id)
        .collect()
}

fn reasons(lp: &Loop) -> Vec<(u64, Reason)> {
    let view = lp.last_pass().expect("a pass was recorded");
    explain(&view)
        .into_iter()
        .map(|w| (w.job.job_id, w.reason))
        .collect()
}

#[tokio::test]
async fn a_pooled_policy_starts_runners_only_for_jobs_no_other_host_holds() {
    let h = Harness::new();
    let jobs = join_pool(&h);
    // Another host's runners are coming for the two oldest jobs.
    h.github
        .state
        .lock()
        .unwrap()
        .pool
        .as_mut()
        .unwrap()
        .held_elsewhere = jobs[..2].iter().copied().collect();
    let lp = h.make_loop(target());
    let report = lp.pass().await;
    assert_eq!(report.launched, 1, "one runner, for the one job left");
    let st = h.github.state.lock().unwrap();
    let pool = st.pool.as_ref().unwrap();
    assert_eq!(pool.pooled_reads, 1, "the demand came through the pool");
    assert_eq!(st.queued_calls, 0, "not read from GitHub directly");
    let claims: Vec<u64> = pool.claims.values().copied().collect();
    assert_eq!(claims, vec![jobs[2]]);
    let attempt = &h.journal.attempts()[0];
    assert!(
        pool.claims.contains_key(attempt.runner_name()),
        "claimed under the runner's own name: {:?}",
        pool.claims
    );
    // The claim came before the attempt was journalled (nothing to undo at GitHub).
    let calls = h.calls();
    let claim_at = calls.iter().position(|c| c == "pool.claim").unwrap();
    let insert_at = calls
        .iter()
        .position(|c| c == "journal.insert(allocated)")
        .unwrap();
    assert!(claim_at < insert_at, "{calls:?}");
}

#[tokio::test]
async fn when_the_pool_says_every_job_is_held_nothing_starts_and_why_says_so() {
    let h = Harness::new();
    let jobs = join_pool(&h);
    {
        // The listing this host read still shows all three; the claims say they are taken
        // (another host claimed them since).
        let mut st = h.github.state.lock().unwrap();
        let pool = st.pool.as_mut().unwrap();
        for (i, j) in jobs.iter().enumerate() {
            pool.claims.insert(format!("rm-other-{i}"), *j);
        }
    }
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0);
    assert!(h.journal.attempts().is_empty());
    let why = reasons(&lp);
    let codes: Vec<&str> = why.iter().map(|(_, r)| r.code()).collect();
    assert_eq!(
        codes,
        vec!["pool_elsewhere", "pool_elsewhere", "pool_elsewhere"],
        "{why:?}"
    );
}

#[tokio::test]
async fn an_unreachable_pool_database_starts_nothing_and_says_so() {
    let h = Harness::new();
    join_pool(&h);
    h.github
        .state
        .lock()
        .unwrap()
        .pool
        .as_mut()
        .unwrap()
        .unavailable = true;
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 0, "no standalone guess");
    assert!(h.journal.attempts().is_empty());
    let why = reasons(&lp);
    let (_, first) = &why[0];
    match first {
        Reason::Held(hold) => {
            assert_eq!(hold.code, "pool_unreachable");
            assert!(hold.message.contains("connection refused"), "{hold:?}");
            assert!(hold.fix.contains("runner-manager pool status"), "{hold:?}");
        }
        other => panic!("{other:?}"),
    }

    // It answers again: the next pass starts runners by itself.
    h.github
        .state
        .lock()
        .unwrap()
        .pool
        .as_mut()
        .unwrap()
        .unavailable = false;
    assert_eq!(lp.pass().await.launched, 2, "the policy's maximum");
}

#[tokio::test]
async fn a_policy_without_the_pool_label_is_placed_as_before() {
    let h = Harness::new();
    h.github.set_jobs(1);
    let lp = h.make_loop(target());
    assert_eq!(lp.pass().await.launched, 1);
    assert!(!h.calls().iter().any(|c| c == "pool.claim"));
    assert_eq!(h.github.state.lock().unwrap().queued_calls, 1);
}

#[tokio::test]
async fn a_runner_that_ends_gives_its_claim_back_saying_whether_it_may_have_run_a_job() {
    let h = Harness::new();
    h.github.state.lock().unwrap().pool = Some(FakePool::default());
    // One surplus runner past the idle timeout, one that ran a job.
    let (idle, idle_p) = h.seed("idleinpool", AttemptState::Idle);
    h.github
        .list(idle.runner_name(), 55, false, RunnerStatus::Online);
    let (done, done_p) = h.seed("doneinpool", AttemptState::Idle);
    h.host.kill(done_p.unwrap());
    h.host.set_evidence(done.id(), Evidence::JobCompleted);
    let lp = h.make_loop(target());
    lp.recover().await;
    h.clock.advance(FIVE_MIN);
    lp.pass().await;
    assert!(h.host.stops().contains(&idle_p.unwrap()));
    assert_eq!(
        h.journal.attempt(idle.id()).outcome(),
        Some(Outcome::ExitedIdleWithoutWork)
    );
    assert_eq!(
        h.journal.attempt(done.id()).outcome(),
        Some(Outcome::CompletedJob)
    );
    let finished = h
        .github
        .state
        .lock()
        .unwrap()
        .pool
        .as_ref()
        .unwrap()
        .finished
        .clone();
    assert!(
        finished.contains(&(idle.runner_name().to_owned(), false)),
        "{finished:?}"
    );
    assert!(
        finished.contains(&(done.runner_name().to_owned(), true)),
        "{finished:?}"
    );
}
