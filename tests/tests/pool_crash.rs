//! A pool of hosts when one of them crashes, and what the pool costs GitHub.
//!
//! 1. Three services (`h1`–`h3`, a 6 s pool lease) against one fake GitHub and one real
//!    PostgreSQL share bursts of jobs, and `h1`'s service is killed (SIGKILL) in two rounds:
//!    between its claim and its runner's start (GitHub answers registrations slowly that
//!    round), then with a runner process started (which, in its own process group, survives
//!    the service). Each time every job still completes, once, successfully (in the first
//!    round all on `h2` and `h3`, `h1`'s claimed jobs too); the others see `h1` dead once its
//!    lease lapsed and the pool keeps none of its claims; restarted on the same data directory
//!    `h1` deletes what it left registered at GitHub, lists no runner, leaves no runner
//!    process, is alive in the pool again and the pool ends with no claim.
//!    A claim left without its runner (a crash between the claim and the runner's journal
//!    entry) is dropped at its host's next heartbeat instead of holding a job for minutes.
//! 2. The same jobs served by one host alone and by three pooled hosts: the GitHub REST
//!    requests (each host signs in with its own token, so the fake counts each one's) charged
//!    against the rate limit, per endpoint and per host; three cost at most 1.2× one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rm_e2e::pool::{join, logs, pool_status, runners_of, until_idle, TIMEOUTS};
use rm_e2e::postgres::Cluster;
use rm_e2e::{fake_github_repos, until, Daemon};
use rm_proto::RunnerState;
use rm_testkit::{
    Conclusion, EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, JobSpec, JobStatus,
};

const REPO: &str = "octo/hello";

async fn fresh_github() -> FakeGitHub {
    fake_github_repos(
        FakeConfig {
            device_interval: Duration::from_secs(1),
            ..FakeConfig::default()
        },
        &[REPO],
    )
    .await
}

/// One host: signed in with a token of its own (answered), capacity set, joined to the pool
/// when `pool` names one (database, label, host name), the target added with `max_runners`.
async fn host(
    gh: &FakeGitHub,
    pool: Option<(&Cluster, &str, &str)>,
    capacity: usize,
    max_runners: usize,
    extra: &[&str],
) -> (Daemon, String) {
    let mut args: Vec<&str> = TIMEOUTS.to_vec();
    args.extend_from_slice(extra);
    let d = Daemon::start_with(gh, &args).await;
    let token = d.sign_in_token(gh, "octo").await;
    d.ok(&["host", "set-capacity", &capacity.to_string()]).await;
    let max = max_runners.to_string();
    let mut add = vec!["repo", "add", REPO, "--max-runners", &max];
    if let Some((pg, label, name)) = pool {
        join(&d, pg, label, name).await;
        add.extend(["--label", label]);
    }
    d.ok(&add).await;
    (d, token)
}

/// Whether `pool status --json` of one host shows `host` alive (`None`: not listed).
fn alive(status: &serde_json::Value, host: &str) -> Option<bool> {
    status["hosts"]
        .as_array()?
        .iter()
        .find(|h| h["host_id"] == host)
        .map(|h| h["alive"] == true)
}

/// Reads every host's `status` (connecting anew each round: a host may be down) until `stop`,
/// noting each runner name it lists under that host's index.
async fn watch(
    sockets: Vec<PathBuf>,
    seen: Arc<Mutex<Vec<BTreeSet<String>>>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        for (i, socket) in sockets.iter().enumerate() {
            if let Some(runners) = runners_of(socket).await {
                let mut seen = seen.lock().unwrap();
                seen[i].extend(runners.into_iter().map(|r| r.runner_name));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Live processes under a host's runner root (its data directory's `runners`: the runners'
/// working directories; the service's own command line names only the data directory).
fn runner_processes(d: &Daemon) -> Vec<(u32, String)> {
    rm_testkit::harness::processes_under(&d.data_dir.join("runners"))
}

/// Queues `count` jobs of `duration`, one run each, named `{prefix}-{i}`, asking for `labels`;
/// answers their ids.
fn queue(
    gh: &FakeGitHub,
    prefix: &str,
    count: usize,
    labels: &[&str],
    duration: Duration,
) -> Vec<u64> {
    (0..count)
        .map(|i| {
            let run = gh
                .queue_run(
                    REPO,
                    vec![JobSpec::new(&format!("{prefix}-{i}"), labels).duration(duration)],
                )
                .unwrap();
            gh.runs()
                .into_iter()
                .find(|r| r.id == run)
                .and_then(|r| r.job_ids.first().copied())
                .expect("the queued job")
        })
        .collect()
}

/// Every job of `queued` completed successfully, each on a runner of its own; answers job →
/// runner.
fn all_succeeded_once(gh: &FakeGitHub, queued: &[u64]) -> BTreeMap<u64, String> {
    let jobs: Vec<_> = gh
        .jobs()
        .into_iter()
        .filter(|j| queued.contains(&j.id))
        .collect();
    assert_eq!(jobs.len(), queued.len(), "{jobs:?}");
    let failed: Vec<_> = jobs
        .iter()
        .filter(|j| j.conclusion != Some(Conclusion::Success))
        .map(|j| (j.id, &j.name, j.conclusion))
        .collect();
    assert!(failed.is_empty(), "jobs not successful: {failed:?}");
    let ran_on: BTreeMap<u64, String> = jobs
        .iter()
        .map(|j| {
            (
                j.id,
                j.runner_name.clone().expect("a completed job's runner"),
            )
        })
        .collect();
    let runners: BTreeSet<&String> = ran_on.values().collect();
    assert_eq!(runners.len(), jobs.len(), "a runner ran two jobs: {jobs:?}");
    ran_on
}

// ---------------------------------------------------------------------------------------------
// 1. A host killed mid-burst.

const CRASH_LABEL: &str = "rm-pool-crash-x64";
const CRASH_HOSTS: [&str; 3] = ["h1", "h2", "h3"];
/// Per host: capacity and the target's limit (the pool takes 6 at once).
const CRASH_ROOM: usize = 2;
/// More than the pool takes at once, so jobs still wait when `h1` dies.
const CRASH_JOBS: usize = 9;
const CRASH_JOB_TIME: Duration = Duration::from_secs(4);
const LEASE_SECS: &str = "6";
/// How long GitHub takes to answer a runner registration in the round where `h1` dies between
/// its claim and its runner's start (far below the service's request timeout).
const SLOW_REGISTRATION: Duration = Duration::from_secs(2);

/// Where `h1` dies in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillAt {
    /// With a claim and its runner allocated, not registered yet (GitHub answers registrations
    /// slowly this round): no runner process of it exists.
    Claimed,
    /// With a runner process started: it survives the service.
    Started,
}

/// The pool of [`CRASH_HOSTS`] and what their `status` showed.
struct Crash {
    gh: FakeGitHub,
    pg: Cluster,
    h1: Daemon,
    others: Vec<Daemon>,
    /// Runner names each host listed, by index in [`CRASH_HOSTS`].
    seen: Arc<Mutex<Vec<BTreeSet<String>>>>,
}

impl Crash {
    fn logs(&self) -> String {
        logs(&[
            ("h1", &self.h1),
            ("h2", &self.others[0]),
            ("h3", &self.others[1]),
        ])
    }

    fn seen(&self, host: usize) -> BTreeSet<String> {
        self.seen.lock().unwrap()[host].clone()
    }

    /// Runner deletions at GitHub so far, by any host.
    fn deletions(&self) -> u64 {
        self.gh
            .requests_by_token()
            .values()
            .map(|c| c.endpoint("repo_runner_delete").requests)
            .sum()
    }

    /// Queues a burst, kills `h1` (SIGKILL) as `at` says, checks that the burst is served
    /// without it, restarts it and checks that it left nothing behind.
    async fn round(&mut self, at: KillAt) {
        let round = format!("{at:?}").to_lowercase();
        let h1_seen_before = self.seen(0);
        if at == KillAt::Claimed {
            self.gh.inject_fault(FaultRule::always(
                EndpointMatch::name("repo_jitconfig"),
                Fault::Latency(SLOW_REGISTRATION),
            ));
        }
        let queued = queue(&self.gh, &round, CRASH_JOBS, &[CRASH_LABEL], CRASH_JOB_TIME);

        // h1 lists a runner from the moment it is allocated, after its claim.
        let client = self.h1.client().await;
        let start = Instant::now();
        let at_kill = loop {
            let runners = client.status().await.unwrap().runners;
            let due = match at {
                KillAt::Claimed => !runners.is_empty(),
                KillAt::Started => runners.iter().any(|r| {
                    matches!(
                        r.state,
                        RunnerState::Starting | RunnerState::Idle | RunnerState::Busy
                    )
                }),
            };
            if due {
                break runners;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{round}: h1 started no runner within 60 s\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        self.h1.kill().await;
        drop(client);
        let log_at_kill = self.h1.log().len();
        self.gh.clear_faults();
        let claims: Vec<(u64, String)> = self
            .pg
            .psql(
                "SELECT string_agg(job_id || ' ' || runner, ',' ORDER BY job_id)
                 FROM rm_pool_claims WHERE host_id = 'h1'",
            )
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| {
                let (job, runner) = c.split_once(' ').unwrap();
                (job.parse().unwrap(), runner.to_owned())
            })
            .collect();
        let reader = self.pg.psql("SELECT reader FROM rm_pool_targets");
        let processes = runner_processes(&self.h1);
        eprintln!(
            "{round}: killed h1 listing {:?}; its claims {claims:?}; the target's reader \
             {reader}; {} runner processes of h1 alive",
            at_kill
                .iter()
                .map(|r| (&r.runner_name, r.state))
                .collect::<Vec<_>>(),
            processes.len(),
        );
        match at {
            // A runner is allocated after its claim, and no runner registered: each claim
            // stands. (Once a runner is seen with a job, the reader's next publish drops its
            // claim: in the other round they may be gone already.)
            KillAt::Claimed => {
                assert!(
                    !claims.is_empty(),
                    "{round}: h1 listed a runner but held no claim in the pool"
                );
                assert!(
                    processes.is_empty()
                        && at_kill.iter().all(|r| r.state == RunnerState::Allocated),
                    "{round}: h1 had started a runner: {at_kill:?} {processes:?}"
                );
            }
            KillAt::Started => assert!(
                !processes.is_empty(),
                "{round}: no runner process of h1 outlived its service"
            ),
        }
        // Runners h1 started before it died: those it listed and those it claimed for.
        let h1_runners: BTreeSet<String> = self
            .seen(0)
            .difference(&h1_seen_before)
            .cloned()
            .chain(at_kill.iter().map(|r| r.runner_name.clone()))
            .chain(claims.iter().map(|(_, r)| r.clone()))
            .collect();

        // The others see h1 dead once its lease lapsed, and the pool keeps none of its claims
        // while it is down.
        for (name, d) in [("h2", &self.others[0]), ("h3", &self.others[1])] {
            until(
                Duration::from_secs(60),
                &format!("{round}: {name} seeing h1's lease lapse"),
                || async { (alive(&pool_status(d).await, "h1") == Some(false)).then_some(()) },
            )
            .await;
        }
        until(
            Duration::from_secs(60),
            &format!("{round}: no claim of h1 left"),
            || async {
                (self
                    .pg
                    .psql("SELECT count(*) FROM rm_pool_claims WHERE host_id = 'h1'")
                    == "0")
                    .then_some(())
            },
        )
        .await;

        // Nothing lost: every job done, once, successfully, with h1 still down.
        until(
            Duration::from_secs(180),
            &format!("{round}: every job completed with h1 down"),
            || async {
                queued
                    .iter()
                    .all(|j| {
                        self.gh
                            .job(*j)
                            .is_some_and(|j| j.status == JobStatus::Completed)
                    })
                    .then_some(())
            },
        )
        .await;
        let ran_on = all_succeeded_once(&self.gh, &queued);
        let (h2_runners, h3_runners) = (self.seen(1), self.seen(2));
        let mut by_host: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (job, runner) in &ran_on {
            let on = if h2_runners.contains(runner) {
                "h2"
            } else if h3_runners.contains(runner) {
                "h3"
            } else {
                // Only three hosts start runners: one neither h2 nor h3 listed is h1's.
                assert!(
                    h1_runners.contains(runner),
                    "{round}: job {job} ran on {runner}, which no host started"
                );
                "h1"
            };
            by_host.entry(on).or_default().push(*job);
        }
        eprintln!("{round}: jobs by host {by_host:?}");
        for (job, runner) in &claims {
            let host = by_host
                .iter()
                .find(|(_, jobs)| jobs.contains(job))
                .map_or("?", |(h, _)| h);
            eprintln!(
                "{round}: h1 claimed job {job} for {runner}; it ran on {} ({host})",
                ran_on[job]
            );
        }
        let on_h1 = by_host.get("h1").map_or(0, Vec::len);
        match at {
            // No runner of h1 existed: everything, its claimed jobs too, ran on h2 and h3.
            KillAt::Claimed => assert_eq!(on_h1, 0, "{round}: {by_host:?}"),
            // Its surviving runners may each have run one.
            KillAt::Started => assert!(
                on_h1 <= h1_runners.len(),
                "{round}: {by_host:?}, h1's runners {h1_runners:?}"
            ),
        }

        // What h1 left at GitHub while down: registrations of its runners that took no job
        // (GitHub removes a runner that ran one).
        let left: Vec<String> = self
            .gh
            .runners()
            .into_iter()
            .map(|r| r.name)
            .filter(|n| h1_runners.contains(n))
            .collect();
        let deletions = self.deletions();
        eprintln!(
            "{round}: before h1's restart, its registrations at GitHub {left:?}, its runner \
             processes {:?}",
            runner_processes(&self.h1)
        );

        self.h1.resume().await;
        until(
            Duration::from_secs(120),
            &format!(
                "{round}: h1, restarted, listing no runner, none of its runners registered at \
                 GitHub and none of its runner processes alive"
            ),
            || async {
                let listed = runners_of(&self.h1.socket).await?;
                let registered: BTreeSet<String> =
                    self.gh.runners().into_iter().map(|r| r.name).collect();
                (listed.is_empty()
                    && registered.is_disjoint(&h1_runners)
                    && runner_processes(&self.h1).is_empty())
                .then_some(())
            },
        )
        .await;
        let deleted = self.deletions() - deletions;
        eprintln!("{round}: after h1's restart, {deleted} runner deletions at GitHub");
        assert!(
            deleted >= left.len() as u64,
            "{round}: h1's registrations {left:?} gone without being deleted"
        );
        // What the restarted service said about the runners it found.
        for line in self.h1.log()[log_at_kill..]
            .lines()
            .filter(|l| l.contains("attempt concluded") || l.contains("registration"))
        {
            eprintln!("{round}: h1 {line}");
        }

        // Back in the pool, and the pool settles: no runner, no claim.
        until(
            Duration::from_secs(60),
            &format!("{round}: h1 alive in the pool again"),
            || async {
                let s = pool_status(&self.h1).await;
                (s["state"] == "connected" && alive(&s, "h1") == Some(true)).then_some(())
            },
        )
        .await;
        until_idle(
            &self.gh,
            &[
                ("h1", &self.h1),
                ("h2", &self.others[0]),
                ("h3", &self.others[1]),
            ],
            &format!("{round}: an idle pool"),
        )
        .await;
        let logs = self.logs();
        until(
            Duration::from_secs(30),
            &format!("{round}: no claim left in the pool\n{logs}"),
            || async { (self.pg.psql("SELECT count(*) FROM rm_pool_claims") == "0").then_some(()) },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_killed_mid_burst_has_its_jobs_placed_elsewhere_and_cleans_up_when_it_restarts() {
    let gh = fresh_github().await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let mut hosts = Vec::new();
    for name in CRASH_HOSTS {
        let (d, _) = host(
            &gh,
            Some((&pg, CRASH_LABEL, name)),
            CRASH_ROOM,
            CRASH_ROOM,
            &["--pool-lease-secs", LEASE_SECS],
        )
        .await;
        hosts.push(d);
    }
    for (name, d) in CRASH_HOSTS.iter().zip(&hosts) {
        until(
            Duration::from_secs(60),
            &format!("{name} seeing all three hosts alive"),
            || async {
                let s = pool_status(d).await;
                (s["state"] == "connected"
                    && CRASH_HOSTS.iter().all(|h| alive(&s, h) == Some(true)))
                .then_some(())
            },
        )
        .await;
    }
    let seen = Arc::new(Mutex::new(vec![BTreeSet::new(); CRASH_HOSTS.len()]));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch(
        hosts.iter().map(|d| d.socket.clone()).collect(),
        seen.clone(),
        stop.clone(),
    ));
    let h1 = hosts.remove(0);
    let mut crash = Crash {
        gh,
        pg,
        h1,
        others: hosts,
        seen,
    };

    crash.round(KillAt::Claimed).await;
    crash.round(KillAt::Started).await;

    stop.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    let Crash { pg, h1, others, .. } = crash;
    h1.stop().await.unwrap();
    for d in others {
        d.stop().await.unwrap();
    }
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

/// A claim no runner is coming for: its host crashed between taking the claim and journalling
/// the runner it took it for (or lost the claim's answer with its connection) and came back
/// within its lease, so the pool still counts the claim as a runner on its way. The claim is
/// written into the database here as such a crash leaves it, a minute old (a crash within the
/// milliseconds between the two statements cannot be aimed at from outside). Its host's next
/// heartbeat, which lists the runners the host has, drops it: the job it would hold is served
/// at once, not after the 10-minute bring-up bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_left_without_its_runner_does_not_hold_a_job_until_the_bring_up_bound() {
    let gh = fresh_github().await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let (h1, _) = host(
        &gh,
        Some((&pg, CRASH_LABEL, "h1")),
        1,
        1,
        &["--pool-lease-secs", LEASE_SECS],
    )
    .await;
    // The target's name as the pool has it, once h1 (its reader) has published its queue.
    let target = until(
        Duration::from_secs(60),
        "h1 publishing the queue",
        || async {
            let t = pg.psql("SELECT target FROM rm_pool_targets");
            (!t.trim().is_empty()).then(|| t.trim().to_owned())
        },
    )
    .await;
    // Older than the grace a claim's runner has to show up (the lease), far younger than the
    // bring-up bound. Job 1 is no job of the fake's: the reader binds the claim to the next
    // queued job, as it does any claim whose job left the queue.
    pg.psql(&format!(
        "INSERT INTO rm_pool_claims (job_id, target, host_id, runner, claimed_at)
         VALUES (1, '{target}', 'h1', 'rm-never-journalled', now() - interval '1 minute')"
    ));
    let job = gh
        .queue_job(
            REPO,
            JobSpec::new("after-the-crash", &[CRASH_LABEL]).duration(Duration::from_secs(1)),
        )
        .unwrap();
    until(
        Duration::from_secs(90),
        "the job served though a claim without a runner was left on its host",
        || async {
            gh.job(job)
                .filter(|j| j.status == JobStatus::Completed)
                .map(|_| ())
        },
    )
    .await;
    assert_eq!(gh.job(job).unwrap().conclusion, Some(Conclusion::Success));
    assert_eq!(
        pg.psql("SELECT count(*) FROM rm_pool_claims WHERE runner = 'rm-never-journalled'")
            .trim(),
        "0"
    );
    until_idle(&gh, &[("h1", &h1)], "h1 idle after the job").await;
    let jit = gh.counters().endpoint("repo_jitconfig");
    assert_eq!(
        jit.requests - jit.errors,
        1,
        "one runner registered, for the one job"
    );
    h1.stop().await.unwrap();
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. What three pooled hosts cost GitHub next to one.

const BUDGET_LABEL: &str = "rm-pool-budget-x64";
/// The job set: bursts of jobs, each burst queued onto an idle pool and as large as the pool's
/// room (every host takes part). What a job costs (its runner's registration, the reads of
/// its run's jobs) is the same either way; what pooling adds or saves comes on top, so enough
/// jobs keep the ratio from hanging on a request or two of timing.
const BUDGET_BURSTS: [usize; 4] = [6, 6, 6, 6];
const BUDGET_JOB_TIME: Duration = Duration::from_secs(3);
/// Runners at once, in all: one host takes them all, three take a third each.
const BUDGET_ROOM: usize = 6;

/// What one run cost GitHub.
struct Spent {
    /// REST requests (those carrying a token: not OAuth, the runners' broker or downloads).
    requests: u64,
    /// Of them, charged against the rate limit.
    charged: u64,
    /// REST requests per endpoint, of every host together.
    endpoints: BTreeMap<String, rm_testkit::EndpointCounters>,
    /// Per host: its REST requests and charged ones.
    per_host: Vec<(String, u64, u64)>,
    /// Per host: `endpoint requests/charged` of each endpoint it called.
    per_host_endpoints: Vec<(String, Vec<String>)>,
    elapsed: Duration,
}

/// Serves [`BUDGET_BURSTS`] with `hosts` hosts (one: not pooled; more: pooled on one label),
/// counting GitHub's REST requests from just before the first job to the idle end.
async fn serve_the_job_set(hosts: usize) -> Spent {
    let gh = fresh_github().await;
    let pg = if hosts > 1 {
        Some(tokio::task::spawn_blocking(Cluster::start).await.unwrap())
    } else {
        None
    };
    let room = BUDGET_ROOM / hosts;
    let mut daemons = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..hosts {
        let name = format!("h{}", i + 1);
        let pool = pg.as_ref().map(|pg| (pg, BUDGET_LABEL, name.as_str()));
        let (d, token) = host(&gh, pool, room, room, &[]).await;
        daemons.push(d);
        tokens.push((name, token));
    }
    let named: Vec<(&str, &Daemon)> = tokens
        .iter()
        .map(|(n, _)| n.as_str())
        .zip(&daemons)
        .collect();
    // Settled: every host reached GitHub, and in a pool sees every host alive.
    for (name, d) in &named {
        until(
            Duration::from_secs(60),
            &format!("{name} settled"),
            || async {
                let s = d.client().await.status().await.ok()?;
                s.last_github_contact?;
                if pg.is_some() {
                    let p = pool_status(d).await;
                    let all = named.iter().all(|(h, _)| alive(&p, h) == Some(true));
                    (p["state"] == "connected" && all).then_some(())
                } else {
                    Some(())
                }
            },
        )
        .await;
    }

    let setup: Vec<(String, u64)> = tokens
        .iter()
        .map(|(name, token)| {
            let c = gh
                .requests_by_token()
                .get(token)
                .cloned()
                .unwrap_or_default();
            (name.clone(), c.total.charged)
        })
        .collect();
    eprintln!("{hosts} host(s): charged while setting up (not counted below): {setup:?}");
    gh.reset_counters();
    let start = Instant::now();
    // Pooled: the pool's label; alone: the target's routing label (listed first).
    let label = if pg.is_some() {
        BUDGET_LABEL.to_owned()
    } else {
        let s = daemons[0].client().await.status().await.unwrap();
        s.targets[0].labels[0].clone()
    };
    let mut queued = Vec::new();
    for (b, size) in BUDGET_BURSTS.into_iter().enumerate() {
        queued.extend(queue(
            &gh,
            &format!("b{b}"),
            size,
            &[&label],
            BUDGET_JOB_TIME,
        ));
        until_idle(&gh, &named, &format!("burst {b} served")).await;
    }
    let elapsed = start.elapsed();
    let counters = gh.counters();
    let by_token = gh.requests_by_token();
    all_succeeded_once(&gh, &queued);

    let per_host: Vec<(String, u64, u64)> = tokens
        .iter()
        .map(|(name, token)| {
            let c = by_token.get(token).cloned().unwrap_or_default();
            (name.clone(), c.total.requests, c.total.charged)
        })
        .collect();
    let per_host_endpoints: Vec<(String, Vec<String>)> = tokens
        .iter()
        .map(|(name, token)| {
            let c = by_token.get(token).cloned().unwrap_or_default();
            let calls = c
                .endpoints
                .iter()
                .map(|(e, n)| format!("{e} {}/{}", n.requests, n.charged))
                .collect();
            (name.clone(), calls)
        })
        .collect();
    // Every token the fake saw is one of the hosts'.
    let known: BTreeSet<&String> = tokens.iter().map(|(_, t)| t).collect();
    assert!(
        by_token.keys().all(|t| known.contains(t)),
        "requests with a token no host was given"
    );
    let mut endpoints: BTreeMap<String, rm_testkit::EndpointCounters> = BTreeMap::new();
    for c in by_token.values() {
        for (name, e) in &c.endpoints {
            let sum = endpoints.entry(name.clone()).or_default();
            sum.requests += e.requests;
            sum.charged += e.charged;
            sum.not_modified += e.not_modified;
            sum.errors += e.errors;
        }
    }
    let not_rest: Vec<(&String, u64)> = counters
        .endpoints
        .iter()
        .filter(|(n, _)| !endpoints.contains_key(*n))
        .map(|(n, e)| (n, e.requests))
        .collect();
    eprintln!("{hosts} host(s): also {not_rest:?} (not REST API requests, not counted)");

    for d in daemons {
        d.stop().await.unwrap();
    }
    if let Some(pg) = pg {
        tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
    }
    Spent {
        requests: per_host.iter().map(|(_, r, _)| r).sum(),
        charged: per_host.iter().map(|(_, _, c)| c).sum(),
        endpoints,
        per_host,
        per_host_endpoints,
        elapsed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_pool_hosts_cost_github_about_what_one_host_does() {
    let one = serve_the_job_set(1).await;
    let three = serve_the_job_set(3).await;
    let ratio = three.charged as f64 / one.charged.max(1) as f64;
    let jobs: usize = BUDGET_BURSTS.iter().sum();
    eprintln!(
        "{jobs} jobs in {} bursts: one host {} REST requests ({} charged) in {:.1} s; three \
         pooled hosts {} ({} charged) in {:.1} s; charged ratio {ratio:.2}",
        BUDGET_BURSTS.len(),
        one.requests,
        one.charged,
        one.elapsed.as_secs_f64(),
        three.requests,
        three.charged,
        three.elapsed.as_secs_f64(),
    );
    eprintln!(
        "  per host (requests, charged): one {:?}; three {:?}",
        one.per_host, three.per_host
    );
    for (name, calls) in one
        .per_host_endpoints
        .iter()
        .chain(&three.per_host_endpoints)
    {
        eprintln!("  {name}: {}", calls.join(", "));
    }
    let names: BTreeSet<&String> = one.endpoints.keys().chain(three.endpoints.keys()).collect();
    eprintln!(
        "  {:<24} {:>18} {:>18}",
        "endpoint", "one (req/charged)", "three (req/charged)"
    );
    for name in names {
        let a = one.endpoints.get(name).copied().unwrap_or_default();
        let b = three.endpoints.get(name).copied().unwrap_or_default();
        eprintln!(
            "  {name:<24} {:>18} {:>18}",
            format!("{}/{}", a.requests, a.charged),
            format!("{}/{}", b.requests, b.charged)
        );
    }
    assert!(one.charged > 0 && three.charged > 0);
    // Pooled, one host per target reads GitHub's queue for all (the others act on what it
    // publishes): three hosts may cost GitHub little more than one.
    assert!(
        ratio <= 1.2,
        "three pooled hosts cost GitHub {ratio:.2}× the requests charged to one host for the \
         same jobs (the bound is 1.2)"
    );
}
