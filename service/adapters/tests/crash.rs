//! Crash injection: `lifecycle-host` aborts (as if SIGKILLed) at each boundary of a launch and
//! of a conclusion (`RM_FAILPOINT`), is started again without the failpoint, and recovery ends
//! clean: the job completed by a runner of this host, no registration left at the fake GitHub,
//! no live process under the runner root, no runtime directory or sidecar, the journal all
//! `cleaned`, and capacity (1) never exceeded on the way.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_core::AttemptState;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use support::*;

async fn crash_and_recover(failpoint: &str) {
    let w = World::start().await;
    w.queue(REPO, 1, Duration::from_millis(800));
    let sampler = Sampler::start(w.runner_root(), w.journal_path());
    let args = ["--max", "1", "--host-capacity", "1"];

    let mut first = w.spawn_host(&[REPO], &args, Some(failpoint));
    let status = first.wait_exit(Duration::from_secs(15));
    let log = first.log_text();
    assert!(
        died_by_signal(&status) && status.signal() == Some(6),
        "{failpoint}: lifecycle-host should have aborted (SIGABRT), got {status:?}\n{log}"
    );
    assert!(
        log.contains(&format!("failpoint {failpoint} reached")),
        "{failpoint}: the abort came from the failpoint\n{log}"
    );
    drop(first);
    check_crash_state(&w, failpoint);

    let mut second = w.spawn_host(&[REPO], &args, None);
    eventually(
        Duration::from_secs(15),
        "the job served after recovery",
        || w.all_jobs_done_by_us(),
    )
    .await;
    let mut last = Ok(());
    eventually(Duration::from_secs(15), "recovery ends clean", || {
        last = w.clean_state();
        last.is_ok()
    })
    .await;
    let status = second.terminate(Duration::from_secs(15));
    assert!(
        status.success(),
        "{failpoint}: {status:?}\n{}",
        second.log_text()
    );
    let peaks = sampler.finish();
    assert!(peaks.processes <= 1, "{failpoint}: {peaks:?}");
    assert!(peaks.runtimes <= 1, "{failpoint}: {peaks:?}");
    assert!(peaks.active_total <= 1, "{failpoint}: {peaks:?}");
    // After the drain nothing is left either (no process outlived the host).
    w.clean_state().unwrap();
    assert!(processes_under(&w.runner_root()).is_empty());
}

/// What the crash left behind, so each test shows its gap really was open before recovery.
fn check_crash_state(w: &World, failpoint: &str) {
    let attempts = w.journal().uncleaned_attempts().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "{failpoint}: one attempt in flight: {attempts:?}"
    );
    let a = &attempts[0];
    let state = a.state();
    let registered = w.gh.runners().iter().any(|r| r.name == a.runner_name());
    let dirs = w.runtime_dirs().len();
    let ctx = format!("{failpoint}: state {state}, registered {registered}, dirs {dirs}");
    match failpoint {
        "after_reserve" => {
            assert_eq!(state, AttemptState::Allocated, "{ctx}");
            assert!(!registered && dirs == 0, "{ctx}");
        }
        "after_materialize" => {
            assert_eq!(state, AttemptState::Allocated, "{ctx}");
            assert!(!registered && dirs == 1, "{ctx}");
        }
        "after_jit" | "after_sidecar" => {
            // Registered at GitHub, the journal does not know the runner id yet.
            assert_eq!(state, AttemptState::Allocated, "{ctx}");
            assert!(registered && a.runner_id().is_none(), "{ctx}");
            assert_eq!(
                w.sidecars(),
                usize::from(failpoint == "after_sidecar"),
                "{ctx}"
            );
        }
        "after_spawn" => {
            // The listener was started; the journal has no process for it.
            assert_eq!(state, AttemptState::JitReceived, "{ctx}");
            assert!(a.process().is_none(), "{ctx}");
        }
        "after_starting_journalled" => {
            assert_eq!(state, AttemptState::Starting, "{ctx}");
            assert!(a.process().is_some(), "{ctx}");
        }
        "after_deregister" => assert!(!state.is_concluded(), "{ctx}"),
        "after_conclude" => assert!(state.is_concluded() && dirs == 1, "{ctx}"),
        "mid_scrub" => {
            assert!(state.is_concluded() && dirs == 1, "{ctx}");
            assert!(
                !w.runtime_dirs()[0].join("bin").exists(),
                "{ctx}: half scrubbed"
            );
        }
        "after_clean" => {
            assert!(
                state.is_concluded() && dirs == 0 && w.sidecars() == 0,
                "{ctx}"
            );
        }
        other => panic!("unknown failpoint {other}"),
    }
}

macro_rules! crash_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crash_and_recover(stringify!($name)).await;
            }
        )*

        #[test]
        fn every_failpoint_has_a_test() {
            let tested = [$(stringify!($name)),*];
            assert_eq!(tested.as_slice(), rm_agent::failpoint::FAILPOINTS);
        }
    };
}

crash_tests!(
    after_reserve,
    after_materialize,
    after_jit,
    after_sidecar,
    after_spawn,
    after_starting_journalled,
    after_deregister,
    after_conclude,
    mid_scrub,
    after_clean,
);
