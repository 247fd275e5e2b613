//! The runner host facade: prepare → spawn → inspect → stop → evidence → scrub.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::{
    EvidenceKind, HostError, JitConfig, ProcessState, RunAs, RunnerHost, RunnerHostConfig,
    RuntimeError, RuntimeName, StopOutcome,
};
use std::time::Duration;

#[tokio::test]
async fn one_attempt_end_to_end() {
    let files = tempfile::tempdir().unwrap();
    let work = open_tempdir();
    let info = script_package(files.path(), "2.336.0");
    let mut config = RunnerHostConfig::new(work.path().join("cache"), work.path().join("r"));
    if !nix::unistd::geteuid().is_root() {
        config.run_as = RunAs::ServiceUser;
    } else {
        rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT).unwrap();
    }
    let host = RunnerHost::open(config, DirSource::new(files.path())).unwrap();
    let package = host.cache().ensure(&info).await.unwrap();
    let id = rm_core::AttemptId::new("01jattempt0000000000000001").unwrap();
    let name = RuntimeName::for_attempt(&id);

    let prepared = host.prepare(&name, &package).await.unwrap();
    assert_eq!(
        prepared.runtime.path,
        work.path().join("r").join(id.as_str())
    );
    assert_eq!(prepared.report.files, 3);
    assert!(matches!(
        host.prepare(&name, &package).await,
        Err(HostError::Runtime(RuntimeError::AlreadyExists { .. }))
    ));
    assert_eq!(
        host.evidence(&name).await.unwrap().kind,
        EvidenceKind::Nothing
    );
    host.root().write_sidecar(&name, 77).unwrap();
    assert_eq!(host.root().read_sidecar(&name).unwrap(), Some(77));

    let spawned = host
        .spawn(
            &prepared.runtime,
            &JitConfig::new("x"),
            None,
            rm_core::TargetSandbox::default(),
        )
        .unwrap();
    poll(Duration::from_secs(10), || {
        prepared.runtime.path.join("ready").exists().then_some(())
    })
    .expect("listener ready");
    assert_eq!(host.inspect(spawned.identity).unwrap(), ProcessState::Alive);
    let evidence = host.evidence(&name).await.unwrap();
    assert_eq!(evidence.kind, EvidenceKind::NoJob);
    assert_eq!(
        rm_core::Evidence::from(evidence),
        rm_core::Evidence::RunnerLogOnly
    );

    assert_eq!(
        host.stop(spawned.identity, Duration::from_secs(5))
            .await
            .unwrap(),
        StopOutcome::Terminated
    );
    assert!(host.scrub(&name, false, None).await.unwrap().existed);
    assert!(!prepared.runtime.path.exists());
    assert_eq!(
        host.root().read_sidecar(&name).unwrap(),
        None,
        "sidecar removed too"
    );
    assert!(
        package.dir.join("bin/Runner.Listener").exists(),
        "the cache is untouched"
    );
}
