//! The adapters one by one, over real files and a real (loopback) fake GitHub.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_adapters::{BudgetPoll, GitHubAdapter, GitHubPackageSource, HostAdapter, JournalAdapter};
use rm_agent::{
    DeleteOutcome, GhError, GitHubPort, JournalError, JournalPort, PollInterval, RunnerHostPort,
    RunnerStatus,
};
use rm_core::{
    Arch, Attempt, AttemptId, Host, HostId, HostLabel, LabelSet, Os, PolicyId, PolicySpec, Target,
    Timestamp,
};
use rm_github::{
    ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_journal::Journal;
use rm_runner::{Platform, RunAs, RunnerHost, RunnerHostConfig};
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn client(w: &World, token: Option<&str>) -> GitHubClient {
    let store = MemoryCredentialStore::new(
        token.map(|t| Credential::non_expiring(SecretString::from(t.to_string()))),
    );
    GitHubClient::new(
        ClientConfig::new(Endpoints::custom(&w.gh.origin(), &w.gh.origin()).unwrap()),
        Arc::new(store),
    )
    .unwrap()
}

fn host_row(capacity: u32) -> Host {
    Host {
        id: HostId::new("h1").unwrap(),
        os: Os::Linux,
        arch: Arch::X64,
        label: HostLabel::from_machine_name("test"),
        capacity,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_adapter_filters_counts_and_guards_updates() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = Journal::open(dir.path().join("j.sqlite")).unwrap();
    let labels = LabelSet::parse([LABEL]).unwrap();
    let repo = Target::parse(REPO).unwrap();
    let org = Target::parse(ORG).unwrap();
    let p1 = j
        .insert_policy(&PolicySpec::new(repo.clone(), labels.clone()))
        .unwrap();
    j.insert_policy(&PolicySpec::new(org.clone(), labels))
        .unwrap();
    let journal = JournalAdapter::new(j);

    // No host row yet: a clear NotFound, not a zero capacity.
    assert!(matches!(
        journal.host_capacity().await,
        Err(JournalError::NotFound { .. })
    ));
    journal
        .with(|j| j.put_host(&host_row(3), None))
        .await
        .unwrap();
    assert_eq!(journal.host_capacity().await.unwrap(), 3);

    let mine = journal.policies(&repo).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id(), p1.id());

    let now = Timestamp::from_millis(1_000);
    let a = Attempt::allocate(AttemptId::new("attempt0001").unwrap(), p1.id(), now);
    journal.insert_attempt(&a).await.unwrap();
    // An attempt of a policy the journal does not know still holds a slot.
    let ghost = Attempt::allocate(
        AttemptId::new("attempt0002").unwrap(),
        PolicyId::new(999),
        now,
    );
    journal.insert_attempt(&ghost).await.unwrap();
    let counts = journal.active_counts().await.unwrap();
    assert_eq!(counts.of(p1.id()), 1);
    assert_eq!(counts.total, 2);

    let mut next = a.clone();
    next.record_jit(42, now).unwrap();
    journal.update_attempt(&a, &next).await.unwrap();
    // A stale `previous` is a Conflict and writes nothing.
    let mut other = a.clone();
    other.record_jit(43, now).unwrap();
    assert!(matches!(
        journal.update_attempt(&a, &other).await,
        Err(JournalError::Conflict { .. })
    ));
    let stored = journal.uncleaned_attempts().await.unwrap();
    assert_eq!(
        stored
            .iter()
            .find(|x| x.id() == a.id())
            .unwrap()
            .runner_id(),
        Some(42)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_github_adapter_registers_lists_and_deletes_runners() {
    let w = World::start().await;
    let gh = GitHubAdapter::new(client(&w, Some(&w.token)));
    let repo = Target::parse(REPO).unwrap();
    let labels = LabelSet::parse([LABEL]).unwrap();

    let jit = gh
        .generate_jit(&repo, "rm-attempt0001", &labels, None)
        .await
        .unwrap();
    assert!(!format!("{jit:?}").contains(jit.config.expose()));
    let view = gh
        .runner_by_name(&repo, "rm-attempt0001")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.id, jit.runner_id);
    assert_eq!(
        view.status,
        RunnerStatus::Offline,
        "a JIT runner is offline until it connects"
    );
    assert!(
        gh.runner_by_name(&repo, "rm-attempt")
            .await
            .unwrap()
            .is_none(),
        "exact names only"
    );
    assert_eq!(gh.runners(&repo).await.unwrap().len(), 1);

    // The same name again: a Conflict the agent resolves by removing its stale registration.
    let again = gh
        .generate_jit(&repo, "rm-attempt0001", &labels, None)
        .await
        .unwrap_err();
    assert!(matches!(again, GhError::Conflict { .. }), "{again:?}");

    assert_eq!(
        gh.delete_runner(&repo, jit.runner_id).await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        gh.delete_runner(&repo, jit.runner_id).await.unwrap(),
        DeleteOutcome::Gone
    );

    w.queue(REPO, 2, Duration::from_millis(100));
    let demand = gh.queued_jobs(&repo).await.unwrap();
    assert_eq!(demand.jobs.len(), 2);
    assert!(!demand.is_floor);

    // A revoked credential is Unauthorized (the policy goes to authentication_failed).
    w.gh.revoke_token(&w.token);
    let err = gh.queued_jobs(&repo).await.unwrap_err();
    assert_eq!(err, GhError::Unauthorized);
    // Nothing listening: Unreachable (retried, never destructive).
    let dead = GitHubClient::new(
        ClientConfig::new(Endpoints::custom("http://127.0.0.1:9", "http://127.0.0.1:9").unwrap()),
        Arc::new(MemoryCredentialStore::new(Some(Credential::non_expiring(
            SecretString::from("t".to_string()),
        )))),
    )
    .unwrap();
    let err = GitHubAdapter::new(dead).runners(&repo).await.unwrap_err();
    assert!(matches!(err, GhError::Unreachable { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_adapter_materializes_from_one_verified_download_and_keeps_the_sidecar_outside() {
    let w = World::start().await;
    let c = client(&w, Some(&w.token));
    if nix::unistd::geteuid().is_root() {
        rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT).unwrap();
    }
    let mut cfg = RunnerHostConfig::new(w.data_dir().join("cache"), w.runner_root());
    cfg.run_as = RunAs::default_for_service();
    cfg.sandbox = rm_runner::sandbox::SandboxConfig::reaching(&[&w.gh.origin()]);
    let source = GitHubPackageSource::new(c, Target::parse(REPO).unwrap()).unwrap();
    let host = HostAdapter::new(
        RunnerHost::open(cfg, source).unwrap(),
        Platform::current().unwrap(),
    );

    let a1 = AttemptId::new("attempt0001").unwrap();
    let a2 = AttemptId::new("attempt0002").unwrap();
    let rt1 = host.materialize(&a1).await.unwrap();
    let rt2 = host.materialize(&a2).await.unwrap();
    assert_eq!(rt1, host.runtime_dir(&a1));
    assert!(rt1.join("bin/Runner.Listener").is_file() && rt2.join("bin/Runner.Listener").is_file());
    assert_eq!(
        w.gh.counters().endpoint("package_download").requests,
        1,
        "one download, two runtimes"
    );
    // The download host sees our User-Agent, once (not octocrab's appended after it).
    assert_eq!(
        w.gh.counters()
            .download_user_agents
            .into_iter()
            .collect::<Vec<_>>(),
        vec![(rm_github::default_user_agent(), 1)]
    );

    host.write_sidecar(&a1, 77).await.unwrap();
    assert_eq!(host.read_sidecar(&a1).await.unwrap(), Some(77));
    assert_eq!(host.read_sidecar(&a2).await.unwrap(), None);
    let mut inside = Vec::new();
    for e in std::fs::read_dir(&rt1).unwrap() {
        inside.push(e.unwrap().file_name().to_string_lossy().to_string());
    }
    assert!(!inside
        .iter()
        .any(|n| n.contains("77") || n.contains("sidecar") || n == ".ids"));

    // No process runs from a runtime nobody started, nor from one that does not exist.
    assert_eq!(host.find_process(&rt1).await.unwrap(), None);
    let missing = host.runtime_dir(&AttemptId::new("attempt0003").unwrap());
    assert_eq!(host.find_process(&missing).await.unwrap(), None);
    assert_eq!(host.evidence(&rt1).await, rm_core::Evidence::None);

    // Scrub removes the runtime and then its sidecar; a missing runtime scrubs fine.
    host.scrub(&rt1, false, None).await.unwrap();
    assert!(!rt1.exists());
    assert_eq!(host.read_sidecar(&a1).await.unwrap(), None);
    host.scrub(&missing, false, None).await.unwrap();
    host.scrub(&rt2, false, None).await.unwrap();
    assert!(w.runtime_dirs().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poll_interval_comes_from_the_budget_planner() {
    let w = World::start().await;
    let c = client(&w, Some(&w.token));
    let planner = c.planner();
    let one = BudgetPoll::new(c.clone(), 1);
    assert_eq!(
        one.next_interval(),
        planner.poll_interval(1, rm_adapters::DEFAULT_HOURLY_LIMIT)
    );
    assert!(one.next_interval() >= planner.floor);
    // Many targets share the hourly budget: each is polled less often.
    let many = BudgetPoll::new(c.clone(), 2000);
    assert!(many.next_interval() > one.next_interval());
    // The floor override binds when it is above what the budget asks for.
    let slow = BudgetPoll::new(c, 1).with_floor(Duration::from_secs(10));
    assert!(one.next_interval() < Duration::from_secs(10));
    assert_eq!(slow.next_interval(), Duration::from_secs(10));
}
