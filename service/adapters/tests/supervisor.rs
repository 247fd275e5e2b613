//! The lifecycle as the daemon runs it, in process, against the fake GitHub: the runner host
//! built only when the first target appears (no GitHub request before), every target recovered
//! before any launch, the poll interval planned again when the number of targets changes, the
//! owner's hook, and an idle exit watcher that does not read the journal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use rm_adapters::{
    GitHubAdapter, GitHubPackageSource, HookReport, HostAdapter, HostProvider, HostUnavailable,
    JournalAdapter, Lifecycle, LifecycleConfig, LifecycleParts, PollPlan, TargetHook,
};
use rm_agent::{ActiveCounts, DrainReport, JournalError, JournalPort, PollInterval};
use rm_core::{
    Arch, Attempt, Host, HostId, HostLabel, LabelSet, Os, Policy, PolicyId, PolicySpec, Target,
};
use rm_github::{
    ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_journal::Journal;
use rm_runner::{Platform, RunAs, RunnerHost, RunnerHostConfig};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

fn client(w: &World) -> GitHubClient {
    let store = MemoryCredentialStore::new(Some(Credential::non_expiring(SecretString::from(
        w.token.clone(),
    ))));
    GitHubClient::new(
        ClientConfig::new(Endpoints::custom(&w.gh.origin(), &w.gh.origin()).unwrap()),
        Arc::new(store),
    )
    .unwrap()
}

/// The journal with this host's row (capacity 2) and a policy (max 1) per target.
fn journal(w: &World, targets: &[&str]) -> JournalAdapter {
    std::fs::create_dir_all(w.data_dir()).unwrap();
    let mut j = Journal::open(w.journal_path()).unwrap();
    let host = Host {
        id: HostId::new("host-test").unwrap(),
        os: Os::from_std(std::env::consts::OS).unwrap(),
        arch: Arch::from_std(std::env::consts::ARCH).unwrap(),
        label: HostLabel::from_machine_name("test"),
        capacity: 2,
    };
    j.put_host(&host, Some(&w.runner_root())).unwrap();
    for t in targets {
        add_policy(&mut j, t);
    }
    JournalAdapter::new(j)
}

fn add_policy(j: &mut Journal, target: &str) -> PolicyId {
    let mut spec = PolicySpec::new(
        Target::parse(target).unwrap(),
        LabelSet::parse([LABEL]).unwrap(),
    );
    spec.max_capacity = Some(1);
    j.insert_policy(&spec).unwrap().id()
}

fn policy_of(w: &World, target: &str) -> PolicyId {
    w.journal()
        .list_policies()
        .unwrap()
        .into_iter()
        .find(|p| p.target().to_string() == target)
        .unwrap()
        .id()
}

/// Where the runner host keeps its cache and runtimes (the factory outlives the world's borrow).
struct HostPaths {
    data: std::path::PathBuf,
    root: std::path::PathBuf,
}

impl HostPaths {
    fn of(w: &World) -> Self {
        HostPaths {
            data: w.data_dir(),
            root: w.runner_root(),
        }
    }

    /// The runner host over the fake GitHub (never asked to spawn here).
    fn build(
        &self,
        client: &GitHubClient,
        target: &Target,
    ) -> Result<Arc<HostAdapter<GitHubPackageSource>>, HostUnavailable> {
        let mut config = RunnerHostConfig::new(self.data.join("cache"), self.root.clone());
        config.run_as = if nix::unistd::geteuid().is_root() {
            rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT)
                .map_err(|e| HostUnavailable(e.to_string()))?;
            RunAs::default_for_service()
        } else {
            RunAs::ServiceUser
        };
        // The fake GitHub is on loopback: the runners' sandbox lets them reach it.
        let endpoints = &client.config().endpoints;
        config.sandbox =
            rm_runner::sandbox::SandboxConfig::reaching(&[endpoints.web(), endpoints.api()]);
        let source = GitHubPackageSource::new(client.clone(), target.clone())
            .map_err(|e| HostUnavailable(e.to_string()))?;
        let host = RunnerHost::open(config, source).map_err(|e| HostUnavailable(e.to_string()))?;
        Ok(Arc::new(HostAdapter::new(
            host,
            Platform::current().unwrap(),
        )))
    }
}

/// A host factory that counts how often it built the host.
fn counting_factory(
    w: &World,
    client: &GitHubClient,
    built: &Arc<AtomicUsize>,
) -> HostProvider<GitHubPackageSource> {
    let (paths, client, built) = (HostPaths::of(w), client.clone(), Arc::clone(built));
    HostProvider::OnFirstTarget(Box::new(move |target: &Target| {
        built.fetch_add(1, Ordering::SeqCst);
        paths.build(&client, target)
    }))
}

fn config(poll: PollPlan) -> LifecycleConfig {
    let mut c = LifecycleConfig::planned(poll);
    c.exit_poll = Duration::from_millis(50);
    c.hook_poll = Duration::from_millis(50);
    // Only wakes re-read the targets in these tests.
    c.target_sync = Duration::from_secs(600);
    c.agent.drain_deadline = Some(Duration::from_secs(5));
    c.agent.drain_poll = Duration::from_millis(100);
    c
}

fn fixed(ms: u64) -> PollPlan {
    PollPlan::Fixed(Arc::new(Duration::from_millis(ms)))
}

type Running = (watch::Sender<bool>, JoinHandle<Vec<(Target, DrainReport)>>);

fn start<J: JournalPort + Clone>(lc: &Arc<Lifecycle<GitHubPackageSource, J>>) -> Running {
    let (tx, rx) = watch::channel(false);
    let lc = Arc::clone(lc);
    (tx, tokio::spawn(async move { lc.run(rx).await }))
}

async fn stop((tx, task): Running) -> Vec<(Target, DrainReport)> {
    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("the lifecycle drains in time")
        .unwrap()
}

/// Counts hook calls; `pending` while fewer than `pending_until` calls were made; deletes the
/// policy put in `remove` (and says the targets changed).
struct CountingHook {
    calls: AtomicUsize,
    pending_until: usize,
    remove: Mutex<Option<PolicyId>>,
    journal: JournalAdapter,
}

impl TargetHook for CountingHook {
    fn settle(&self) -> Pin<Box<dyn Future<Output = HookReport> + Send + '_>> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let remove = self.remove.lock().unwrap().take();
            let mut changed = false;
            if let Some(id) = remove {
                self.journal
                    .with(move |j| j.delete_policy(id))
                    .await
                    .unwrap();
                changed = true;
            }
            HookReport {
                changed,
                pending: n < self.pending_until,
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_runner_host_and_no_github_request_until_the_first_target_appears() {
    let w = World::start().await;
    let journal = journal(&w, &[]);
    let client = client(&w);
    let built = Arc::new(AtomicUsize::new(0));
    let hook = Arc::new(CountingHook {
        calls: AtomicUsize::new(0),
        pending_until: 0,
        remove: Mutex::new(None),
        journal: journal.clone(),
    });
    let wake = Arc::new(Notify::new());
    let lc = Arc::new(Lifecycle::with_parts(LifecycleParts {
        journal: journal.clone(),
        loop_journal: journal.clone(),
        github: GitHubAdapter::new(client.clone()),
        host: counting_factory(&w, &client, &built),
        config: config(fixed(100)),
        hook: Some(hook.clone()),
        wake: Arc::clone(&wake),
    }));
    let requests_before = w.gh.counters().total.requests;
    let running = start(&lc);

    // Woken twice with no target: the targets are re-read (the hook runs first each time) and
    // nothing is built or asked.
    for round in 1..=2 {
        wake.notify_one();
        eventually(Duration::from_secs(5), "the wake handled", || {
            hook.calls.load(Ordering::SeqCst) > round
        })
        .await;
    }
    assert_eq!(lc.sync_targets().await.unwrap(), Default::default());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        built.load(Ordering::SeqCst),
        0,
        "no runner host without a target"
    );
    assert!(lc.host().is_none());
    assert!(lc.loops().is_empty());
    assert_eq!(
        w.gh.counters().total.requests,
        requests_before,
        "no GitHub request without a target: {:?}",
        w.gh.counters()
    );

    // The first target appears: the host is built once, from it, and its loop asks GitHub.
    add_policy(&mut w.journal(), REPO);
    wake.notify_one();
    eventually(
        Duration::from_secs(5),
        "the loop of the first target",
        || lc.targets() == vec![Target::parse(REPO).unwrap()],
    )
    .await;
    assert_eq!(built.load(Ordering::SeqCst), 1);
    assert!(lc.host().is_some());
    eventually(Duration::from_secs(5), "GitHub asked", || {
        w.gh.counters().total.requests > requests_before
    })
    .await;
    // A second target reuses the host.
    add_policy(&mut w.journal(), ORG);
    wake.notify_one();
    eventually(
        Duration::from_secs(5),
        "the loop of the second target",
        || lc.targets().len() == 2,
    )
    .await;
    assert_eq!(
        built.load(Ordering::SeqCst),
        1,
        "one runner host for all targets"
    );

    // Both loops drain with nothing left. (Whether a drain hit its 5 s deadline is not asserted:
    // with no runner it only says how long a pass in flight took on a loaded machine.)
    let reports = stop(running).await;
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(reports.iter().all(|(_, r)| r.remaining == 0), "{reports:?}");
}

/// The journal, recording what the loops do: the first read of `slow`'s attempts (its startup
/// recovery) takes 600 ms; every reservation is recorded and refused (nothing is launched for
/// real); whole-host reads of the uncleaned attempts (the exit watcher's) are counted.
#[derive(Clone)]
struct Recording {
    inner: JournalAdapter,
    log: Arc<Mutex<Vec<String>>>,
    slow: Arc<Mutex<Option<PolicyId>>>,
    whole_reads: Arc<AtomicUsize>,
}

impl Recording {
    fn new(inner: JournalAdapter) -> Self {
        Recording {
            inner,
            log: Arc::default(),
            slow: Arc::default(),
            whole_reads: Arc::default(),
        }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl JournalPort for Recording {
    async fn policies(&self, target: &Target) -> Result<Vec<Policy>, JournalError> {
        self.inner.policies(target).await
    }
    async fn update_policy(&self, policy: &Policy) -> Result<Policy, JournalError> {
        self.inner.update_policy(policy).await
    }
    async fn insert_attempt(&self, attempt: &Attempt) -> Result<(), JournalError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("reserve {}", attempt.policy_id().get()));
        Err(JournalError::Unavailable {
            detail: "refused by the test".into(),
        })
    }
    async fn update_attempt(&self, previous: &Attempt, next: &Attempt) -> Result<(), JournalError> {
        self.inner.update_attempt(previous, next).await
    }
    async fn uncleaned_attempts(&self) -> Result<Vec<Attempt>, JournalError> {
        self.whole_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.uncleaned_attempts().await
    }
    async fn uncleaned_attempts_of(
        &self,
        policies: &[PolicyId],
    ) -> Result<Vec<Attempt>, JournalError> {
        let slow = {
            let mut s = self.slow.lock().unwrap();
            match *s {
                Some(id) if policies.contains(&id) => s.take(),
                _ => None,
            }
        };
        let read = self.inner.uncleaned_attempts_of(policies).await;
        if let Some(id) = slow {
            tokio::time::sleep(Duration::from_millis(600)).await;
            self.log
                .lock()
                .unwrap()
                .push(format!("recovered {}", id.get()));
        }
        read
    }
    async fn active_counts(&self) -> Result<ActiveCounts, JournalError> {
        self.inner.active_counts().await
    }
    async fn host_capacity(&self) -> Result<u32, JournalError> {
        self.inner.host_capacity().await
    }
    async fn put_trust(
        &self,
        attempt: &rm_core::AttemptId,
        verdict: &rm_core::TrustVerdict,
    ) -> Result<(), JournalError> {
        self.inner.put_trust(attempt, verdict).await
    }
    async fn trust_of(
        &self,
        attempt: &rm_core::AttemptId,
    ) -> Result<Option<rm_core::TrustVerdict>, JournalError> {
        self.inner.trust_of(attempt).await
    }
}

fn with_host(
    w: &World,
    client: &GitHubClient,
    journal: &JournalAdapter,
    loop_journal: Recording,
    config: LifecycleConfig,
) -> Arc<Lifecycle<GitHubPackageSource, Recording>> {
    let host = HostPaths::of(w)
        .build(client, &Target::parse(REPO).unwrap())
        .unwrap();
    Arc::new(Lifecycle::with_parts(LifecycleParts {
        journal: journal.clone(),
        loop_journal,
        github: GitHubAdapter::new(client.clone()),
        host: HostProvider::Ready(host),
        config,
        hook: None,
        wake: Arc::new(Notify::new()),
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_is_recovered_before_any_target_launches() {
    let w = World::start().await;
    // Demand for the repository from the start; the organization recovers slowly.
    w.queue(REPO, 1, Duration::from_millis(300));
    let journal = journal(&w, &[REPO, ORG]);
    let (repo, org) = (policy_of(&w, REPO), policy_of(&w, ORG));
    let recording = Recording::new(journal.clone());
    *recording.slow.lock().unwrap() = Some(org);
    let client = client(&w);
    let lc = with_host(&w, &client, &journal, recording.clone(), config(fixed(100)));
    let running = start(&lc);
    eventually(Duration::from_secs(10), "a launch was tried", || {
        recording.log().iter().any(|l| l.starts_with("reserve"))
    })
    .await;
    let log = recording.log();
    let recovered = log
        .iter()
        .position(|l| *l == format!("recovered {}", org.get()));
    let first_launch = log.iter().position(|l| l.starts_with("reserve")).unwrap();
    assert_eq!(
        log[first_launch],
        format!("reserve {}", repo.get()),
        "{log:?}"
    );
    assert!(
        recovered.is_some_and(|r| r < first_launch),
        "the organization's recovery ended before the repository's first launch: {log:?}"
    );
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poll_interval_is_planned_again_when_the_number_of_targets_changes() {
    let w = World::start().await;
    let journal = journal(&w, &[REPO]);
    let planned: Arc<Mutex<Vec<usize>>> = Arc::default();
    let plan = {
        let planned = Arc::clone(&planned);
        PollPlan::PerTargets(Arc::new(move |n| {
            planned.lock().unwrap().push(n);
            Arc::new(Duration::from_millis(200)) as Arc<dyn PollInterval>
        }))
    };
    let client = client(&w);
    let lc = with_host(
        &w,
        &client,
        &journal,
        Recording::new(journal.clone()),
        config(plan),
    );
    let wake = lc.waker();
    let running = start(&lc);
    eventually(Duration::from_secs(5), "the repository's loop", || {
        lc.loops().len() == 1
    })
    .await;
    assert_eq!(*planned.lock().unwrap(), vec![1]);
    assert_eq!(lc.poll_planned_for(), 1);

    let org = {
        let mut j = w.journal();
        add_policy(&mut j, ORG)
    };
    wake.notify_one();
    eventually(Duration::from_secs(5), "planned for two targets", || {
        lc.poll_planned_for() == 2
    })
    .await;
    assert_eq!(lc.targets().len(), 2);

    w.journal().delete_policy(org).unwrap();
    wake.notify_one();
    eventually(
        Duration::from_secs(5),
        "planned for one target again",
        || lc.poll_planned_for() == 1,
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "the removed target's loop ended",
        || lc.loops().len() == 1,
    )
    .await;
    assert_eq!(*planned.lock().unwrap(), vec![1, 2, 1]);
    let reports = stop(running).await;
    assert_eq!(
        reports.len(),
        2,
        "the retired loop's report too: {reports:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_runs_while_pending_and_a_removal_it_settles_retires_the_loop() {
    let w = World::start().await;
    let journal = journal(&w, &[REPO, ORG]);
    let org = policy_of(&w, ORG);
    let client = client(&w);
    let hook = Arc::new(CountingHook {
        calls: AtomicUsize::new(0),
        pending_until: 4,
        remove: Mutex::new(None),
        journal: journal.clone(),
    });
    let host = HostPaths::of(&w)
        .build(&client, &Target::parse(REPO).unwrap())
        .unwrap();
    let wake = Arc::new(Notify::new());
    let lc = Arc::new(Lifecycle::with_parts(LifecycleParts {
        journal: journal.clone(),
        loop_journal: journal.clone(),
        github: GitHubAdapter::new(client.clone()),
        host: HostProvider::Ready(host),
        config: config(fixed(200)),
        hook: Some(hook.clone()),
        wake: Arc::clone(&wake),
    }));
    let running = start(&lc);
    // At startup, then every 50 ms while it says work is pending, then no more.
    eventually(
        Duration::from_secs(5),
        "the hook called until settled",
        || hook.calls.load(Ordering::SeqCst) >= 4,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hook.calls.load(Ordering::SeqCst),
        4,
        "not called again once nothing is pending"
    );
    assert_eq!(lc.targets().len(), 2);

    // Woken after a change: the hook deletes the organization's policy; its loop ends.
    *hook.remove.lock().unwrap() = Some(org);
    wake.notify_one();
    eventually(
        Duration::from_secs(5),
        "the removed target's loop ended",
        || lc.loops().len() == 1,
    )
    .await;
    assert_eq!(lc.targets(), vec![Target::parse(REPO).unwrap()]);
    assert_eq!(hook.calls.load(Ordering::SeqCst), 5);
    let reports = stop(running).await;
    assert_eq!(reports.len(), 2, "{reports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_host_does_not_read_the_journal_for_ended_runners() {
    let w = World::start().await;
    let journal = journal(&w, &[REPO]);
    let recording = Recording::new(journal.clone());
    let client = client(&w);
    let lc = with_host(&w, &client, &journal, recording.clone(), config(fixed(100)));
    let running = start(&lc);
    eventually(Duration::from_secs(5), "the first look", || {
        recording.whole_reads.load(Ordering::SeqCst) >= 1
    })
    .await;
    // Twenty exit-poll periods (and a few passes) later: still that one look.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(recording.whole_reads.load(Ordering::SeqCst), 1);
    stop(running).await;
}

/// Holds the lifecycle inside its hook until released, so that a shutdown can be sent while the
/// lifecycle is busy and every loop ends before the lifecycle looks at its events again.
struct HoldingHook {
    hold: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    entered: Arc<Notify>,
}

impl TargetHook for HoldingHook {
    fn settle(&self) -> Pin<Box<dyn Future<Output = HookReport> + Send + '_>> {
        Box::pin(async move {
            let hold = self.hold.lock().unwrap().take();
            if let Some(gate) = hold {
                self.entered.notify_one();
                let _ = gate.acquire().await;
            }
            HookReport::default()
        })
    }
}

/// A loop that ended because shutdown began must not be taken for a retired target that needs
/// its loop started again, even when the lifecycle sees the loop's end before it sees the
/// shutdown signal (both are ready when it next looks; `select!` picks either). Repeated, so a
/// lifecycle that reads only its cached "stopping" flag restarts some loop in some round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loops_ended_by_a_shutdown_are_never_started_again() {
    const TARGETS: [&str; 4] = ["octo/a", "octo/b", "octo/c", "octo/d"];
    for round in 0..8 {
        let w = World::start().await;
        let journal = journal(&w, &TARGETS);
        let client = client(&w);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let entered = Arc::new(Notify::new());
        let hook = Arc::new(HoldingHook {
            hold: Mutex::new(None),
            entered: Arc::clone(&entered),
        });
        let wake = Arc::new(Notify::new());
        let built = Arc::new(AtomicUsize::new(0));
        let lc = Arc::new(Lifecycle::with_parts(LifecycleParts {
            journal: journal.clone(),
            loop_journal: journal.clone(),
            github: GitHubAdapter::new(client.clone()),
            host: counting_factory(&w, &client, &built),
            config: config(fixed(100)),
            hook: Some(hook.clone()),
            wake: Arc::clone(&wake),
        }));
        let (tx, task) = start(&lc);
        eventually(Duration::from_secs(10), "every loop running", || {
            lc.targets().len() == TARGETS.len()
        })
        .await;
        // Park the lifecycle in its hook, then shut down: every loop drains (nothing runs) and
        // ends while the lifecycle is parked.
        *hook.hold.lock().unwrap() = Some(Arc::clone(&gate));
        let mut events = lc.shared().subscribe();
        let parked = entered.notified();
        wake.notify_one();
        parked.await;
        tx.send(true).unwrap();
        let mut drained = 0;
        while drained < TARGETS.len() {
            let event = tokio::time::timeout(Duration::from_secs(15), events.recv())
                .await
                .expect("every loop drains while the lifecycle is parked")
                .unwrap();
            if matches!(event.kind, rm_agent::EventKind::Drained { .. }) {
                drained += 1;
            }
        }
        gate.add_permits(1);
        let reports = tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("the lifecycle drains in time")
            .unwrap();
        let mut ended: Vec<String> = reports.iter().map(|(t, _)| t.to_string()).collect();
        ended.sort();
        assert_eq!(
            ended,
            TARGETS.to_vec(),
            "round {round}: each loop ends exactly once: {reports:?}"
        );
    }
}
