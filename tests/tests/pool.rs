//! A pool of hosts on one label: three services on one machine (each its own data directory,
//! host name and runner root) against one fake GitHub and one real PostgreSQL serve jobs queued
//! in bursts (200 jobs) over three targets with just the pool's label in `runs-on`, some onto an idle pool,
//! some onto busy hosts. Afterwards runners started − jobs served = 0 (no surplus), every job
//! ran once and succeeded, every host took part and none ever ran more than its capacity (or a
//! target's limit) at once, and every host's status showed who ran what across the pool. The
//! same three hosts not joined to a pool start a runner each for
//! the first burst's jobs (6 runners for 2 jobs): what keeps the count exact is the pool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rm_e2e::pool::{join, logs, pool_status, until_all_alive, until_idle, TIMEOUTS};
use rm_e2e::postgres::Cluster;
use rm_e2e::{fake_github_repos, until, Daemon};
use rm_testkit::{Conclusion, FakeConfig, FakeGitHub, JobSpec, JobStatus};

/// The label jobs ask for to run on any host of the pool.
const LABEL: &str = "rm-pool-test-x64";
const REPOS: [&str; 3] = ["octo/hello", "octo/world", "octo/tools"];
const HOSTS: [&str; 3] = ["h1", "h2", "h3"];
/// Each host's capacity: below what its targets may ask for together (3 × [`MAX_RUNNERS`]),
/// so the capacity is what binds, and a burst is more than one host can take.
const CAPACITY: usize = 3;
/// Each target's limit on each host.
const MAX_RUNNERS: usize = 2;

/// How a burst lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lands {
    /// On an idle pool: every job before it done and every runner gone (a surplus runner
    /// idles out first).
    Idle,
    /// As soon as every job of the burst before was taken: on hosts still busy with it.
    Busy,
}

/// The bursts, in order: how many jobs (in turn over the targets) and how each lands.
/// A burst smaller than the pool's free room is where hosts each acting on their own start
/// surplus runners (each sees every job queued); a burst queued right after would hand those
/// runners jobs and hide the surplus, so each small one is followed by an idle pool (or the
/// end), where a surplus runner idles out and stays counted.
const BURSTS: [(usize, Lands); 8] = [
    (2, Lands::Idle),
    (40, Lands::Idle),
    (3, Lands::Busy),
    (60, Lands::Busy),
    (4, Lands::Idle),
    (50, Lands::Busy),
    (38, Lands::Busy),
    (3, Lands::Idle),
];
const JOBS: usize = {
    let (mut n, mut i) = (0, 0);
    while i < BURSTS.len() {
        n += BURSTS[i].0;
        i += 1;
    }
    n
};
const JOB_TIME: Duration = Duration::from_secs(2);

/// One host: signed in, capacity set, joined to the pool, every target pooled.
async fn host(gh: &FakeGitHub, pg: &Cluster, name: &str) -> Daemon {
    let d = Daemon::start_with(gh, &TIMEOUTS).await;
    d.sign_in(gh, "octo").await;
    d.ok(&["host", "set-capacity", &CAPACITY.to_string()]).await;
    let joined = join(&d, pg, LABEL, name).await;
    eprintln!("{name}: {}", joined.trim());
    for repo in REPOS {
        // `--pool`: the label of the pool the host joined, and the `runs-on` line names it
        // (not this host's own label, which would pin the jobs to this host).
        let added = d
            .ok(&[
                "repo",
                "add",
                repo,
                "--max-runners",
                &MAX_RUNNERS.to_string(),
                "--pool",
            ])
            .await;
        assert!(
            added.contains(&format!("runs-on: {LABEL}\n"))
                && added.contains("any host of the pool"),
            "{added}"
        );
    }
    d
}

/// The hosts `pool status --json` shows alive, by name.
fn alive_hosts(status: &serde_json::Value) -> BTreeSet<String> {
    status["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["alive"] == true)
        .filter_map(|h| h["host_id"].as_str().map(str::to_owned))
        .collect()
}

/// What one host's `status` showed over the run.
#[derive(Debug, Default)]
struct Watched {
    /// Every runner it showed.
    runners: BTreeSet<String>,
    /// Most runners holding a slot at once.
    most: usize,
    /// Most runners of one target holding a slot at once.
    most_per_target: usize,
    /// Who runs what, as this host's status showed the pool: (host, runner, job) of every
    /// runner some host reported running a job.
    pool_runs: BTreeSet<(String, String, u64)>,
}

/// Reads every host's status until `stop`: which runners each started, and how many at once.
/// A runner is listed from its launch until it is cleaned, seconds here (each job takes
/// [`JOB_TIME`]), far longer than one round of reads.
async fn watch(sockets: Vec<PathBuf>, stop: Arc<AtomicBool>) -> Vec<Watched> {
    let mut clients = Vec::new();
    for s in &sockets {
        clients.push(rm_proto::Client::connect(s).await.unwrap());
    }
    let mut seen: Vec<Watched> = sockets.iter().map(|_| Watched::default()).collect();
    while !stop.load(Ordering::SeqCst) {
        for (client, w) in clients.iter().zip(&mut seen) {
            let Ok(status) = client.status().await else {
                continue;
            };
            // A runner holds a slot until it concluded (its process gone); one that finished
            // stays listed, without a slot, until its directory is scrubbed.
            use rm_proto::RunnerState as S;
            let live = status.runners.iter().filter(|r| {
                matches!(
                    r.state,
                    S::Allocated | S::JitReceived | S::Starting | S::Idle | S::Busy
                )
            });
            let mut per_target: BTreeMap<&str, usize> = BTreeMap::new();
            for r in live {
                *per_target.entry(r.target.as_str()).or_default() += 1;
            }
            w.most = w.most.max(per_target.values().sum());
            for r in &status.runners {
                w.runners.insert(r.runner_name.clone());
            }
            w.most_per_target = w
                .most_per_target
                .max(per_target.values().copied().max().unwrap_or(0));
            for h in status.pool.iter().flat_map(|p| &p.hosts) {
                for r in &h.running {
                    if let Some(job) = r.job_id {
                        w.pool_runs
                            .insert((h.host_id.clone(), r.runner.clone(), job));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hosts_serve_one_pool_label_with_no_surplus_runner() {
    let gh = fake_github_repos(
        FakeConfig {
            device_interval: Duration::from_secs(1),
            ..FakeConfig::default()
        },
        &REPOS,
    )
    .await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let mut hosts = Vec::new();
    for name in HOSTS {
        hosts.push(host(&gh, &pg, name).await);
    }
    let named: Vec<(&str, &Daemon)> = HOSTS.iter().copied().zip(&hosts).collect();
    // Every host sees the other two alive before the first job is queued.
    until_all_alive(&named).await;

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch(
        hosts.iter().map(|d| d.socket.clone()).collect(),
        stop.clone(),
    ));

    let mut job_ids = Vec::new();
    for (burst, (size, lands)) in BURSTS.into_iter().enumerate() {
        if lands == Lands::Idle {
            until_idle(&gh, &named, &format!("an idle pool before burst {burst}")).await;
        }
        let mut this_burst = Vec::new();
        for i in 0..size {
            let repo = REPOS[i % REPOS.len()];
            let run = gh
                .queue_run(
                    repo,
                    vec![JobSpec::new(&format!("b{burst}-{i}"), &[LABEL]).duration(JOB_TIME)],
                )
                .unwrap();
            let job = gh
                .runs()
                .into_iter()
                .find(|r| r.id == run)
                .and_then(|r| r.job_ids.first().copied())
                .expect("the queued job");
            this_burst.push(job);
        }
        until(
            Duration::from_secs(120),
            &format!("every job of burst {burst} taken"),
            || async {
                this_burst
                    .iter()
                    .all(|j| gh.job(*j).is_some_and(|j| j.status != JobStatus::Queued))
                    .then_some(())
            },
        )
        .await;
        job_ids.extend(this_burst);
    }

    until_idle(&gh, &named, "every job done").await;
    stop.store(true, Ordering::SeqCst);
    let watched = watcher.await.unwrap();

    let counters = gh.counters();
    let jit = counters.endpoint("repo_jitconfig");
    let registered = jit.requests - jit.errors;
    let jobs = gh.jobs();
    eprintln!(
        "{JOBS} jobs; {registered} runners registered; {} GitHub requests from the three \
         hosts together (the fake cannot tell hosts apart: one user, one user agent)",
        counters.total.requests
    );
    for (name, c) in &counters.endpoints {
        eprintln!("  {name}: {c:?}");
    }
    for (name, w) in HOSTS.iter().zip(&watched) {
        eprintln!(
            "{name}: {} runners, at most {} at once ({} of one target)",
            w.runners.len(),
            w.most,
            w.most_per_target
        );
    }

    // Every job ran once, to success, on a runner of its own.
    let queued: BTreeSet<u64> = job_ids.iter().copied().collect();
    assert_eq!(queued.len(), JOBS);
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<BTreeSet<_>>(),
        queued,
        "{jobs:?}"
    );
    let failed: Vec<_> = jobs
        .iter()
        .filter(|j| j.conclusion != Some(Conclusion::Success))
        .map(|j| (j.id, &j.name, j.conclusion))
        .collect();
    assert!(failed.is_empty(), "jobs not successful: {failed:?}");
    let ran_on: BTreeSet<&str> = jobs
        .iter()
        .map(|j| j.runner_name.as_deref().expect("a completed job's runner"))
        .collect();
    assert_eq!(
        ran_on.len(),
        JOBS,
        "a runner ran more than one job: {jobs:?}"
    );

    // No surplus: one runner started per job served.
    assert_eq!(
        registered as i64 - JOBS as i64,
        0,
        "runners started − jobs served ≠ 0: {registered} registered for {JOBS} jobs\n{}",
        logs(&named)
    );

    // Every job's runner was started by exactly one host; every host took part; none ran more
    // than its capacity, or a target's limit, at once.
    for name in &ran_on {
        let by: Vec<&str> = HOSTS
            .iter()
            .zip(&watched)
            .filter(|(_, w)| w.runners.contains(*name))
            .map(|(h, _)| *h)
            .collect();
        assert_eq!(by.len(), 1, "runner {name} shown by hosts {by:?}");
    }
    for (name, w) in HOSTS.iter().zip(&watched) {
        assert!(
            !w.runners.is_empty(),
            "{name} started no runner: {watched:?}"
        );
        assert!(
            w.most <= CAPACITY,
            "{name} ran {} runners at once, capacity {CAPACITY}",
            w.most
        );
        assert!(
            w.most_per_target <= MAX_RUNNERS,
            "{name} ran {} runners of one target at once, limit {MAX_RUNNERS}",
            w.most_per_target
        );
    }
    for (name, d) in HOSTS.iter().zip(&hosts) {
        let log = d.log();
        assert!(
            !log.contains("exited_idle_without_work"),
            "a runner of {name} idled out unused:\n{log}"
        );
    }

    // Who runs what, as every host showed the pool: each runner shown running a job ran that
    // job and belongs to the host it was shown under, and every host's runners were shown
    // with their jobs, also on the hosts that do not read GitHub's listings themselves.
    let runner_of: BTreeMap<u64, &str> = jobs
        .iter()
        .filter_map(|j| Some((j.id, j.runner_name.as_deref()?)))
        .collect();
    for (seen_by, w) in HOSTS.iter().zip(&watched) {
        for (host, runner, job) in &w.pool_runs {
            assert_eq!(
                runner_of.get(job).copied(),
                Some(runner.as_str()),
                "{seen_by} showed {host} running job {job} on {runner}"
            );
            let owner = HOSTS.iter().position(|h| h == host).expect("a pool host");
            assert!(
                watched[owner].runners.contains(runner),
                "{seen_by} showed {runner} under {host}, which never listed it"
            );
        }
        for host in HOSTS {
            assert!(
                w.pool_runs.iter().any(|(h, _, _)| h == host),
                "{seen_by} never showed {host} running a job: {:?}",
                w.pool_runs
            );
        }
    }

    // The pool, as one host sees it: all three hosts alive, and no claim left once every job
    // is done.
    let status = until(
        Duration::from_secs(30),
        "the pool with no claim left",
        || async {
            let s = pool_status(&hosts[0]).await;
            s["claims"]
                .as_array()
                .is_some_and(|c| c.is_empty())
                .then_some(s)
        },
    )
    .await;
    assert_eq!(status["label"], LABEL, "{status}");
    assert_eq!(status["host_id"], HOSTS[0], "{status}");
    assert_eq!(status["state"], "connected", "{status}");
    assert_eq!(
        alive_hosts(&status),
        HOSTS.iter().map(|h| (*h).to_owned()).collect(),
        "{status}"
    );

    for d in hosts {
        d.stop().await.unwrap();
    }
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// News between hosts.

/// The news test's pool label.
const NEWS_LABEL: &str = "rm-pool-news-x64";
/// How long the job filling the reader runs: past the second host's start and the job it
/// hears of, on a busy machine too (checked before that job is queued).
const HOLD: Duration = Duration::from_secs(90);

/// A host signed in, of `capacity`, polling every `poll_ms`, joined as `name` with `octo/hello`
/// pooled (one runner at most of it on the host when `capacity` is 1).
async fn news_host(
    gh: &FakeGitHub,
    pg: &Cluster,
    name: &str,
    capacity: &str,
    poll_ms: &str,
) -> Daemon {
    let mut args = TIMEOUTS.to_vec();
    args.extend(["--poll-ms", poll_ms]);
    let d = Daemon::start_with(gh, &args).await;
    d.sign_in(gh, "octo").await;
    d.ok(&["host", "set-capacity", capacity]).await;
    join(&d, pg, NEWS_LABEL, name).await;
    d.ok(&[
        "repo",
        "add",
        "octo/hello",
        "--max-runners",
        capacity,
        "--pool",
    ])
    .await;
    d
}

/// The job's state at the fake.
fn status_of(gh: &FakeGitHub, job: u64) -> Option<JobStatus> {
    gh.job(job).map(|j| j.status)
}

/// A host that is not the target's reader hears of a job the reader has no room for from the
/// reader's publish (PostgreSQL `NOTIFY`), not at its own poll: its poll here is ten minutes,
/// so only the news can have it start the runner within the minute the test allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_room_starts_a_runner_when_the_reader_has_none_without_waiting_for_its_poll() {
    let gh = fake_github_repos(
        FakeConfig {
            device_interval: Duration::from_secs(1),
            ..FakeConfig::default()
        },
        &["octo/hello"],
    )
    .await;
    let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();

    // h1 alone first: it reads the queue every half second (so it is the reader) and its one
    // slot is held by a long job.
    let h1 = news_host(&gh, &pg, "h1", "1", "500").await;
    let hold = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("hold", &[NEWS_LABEL]).duration(HOLD),
        )
        .unwrap();
    until(Duration::from_secs(60), "h1 runs the hold job", || async {
        (status_of(&gh, hold) == Some(JobStatus::InProgress)).then_some(())
    })
    .await;

    // h2: room, a poll of ten minutes, and its first pass done (nothing queued then).
    let h2 = news_host(&gh, &pg, "h2", "2", "600000").await;
    let named = [("h1", &h1), ("h2", &h2)];
    until_all_alive(&named).await;
    until(Duration::from_secs(60), "h2's first pass", || async {
        let why: serde_json::Value = serde_json::from_str(&h2.ok(&["why", "--json"]).await).ok()?;
        why["targets"]
            .as_array()?
            .iter()
            .any(|t| t["target"] == "octo/hello" && !t["checked_at"].is_null())
            .then_some(())
    })
    .await;

    assert_eq!(
        status_of(&gh, hold),
        Some(JobStatus::InProgress),
        "h2 took longer to start than the hold job runs ({HOLD:?}): h1 has room again"
    );
    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("news", &[NEWS_LABEL]).duration(Duration::from_secs(1)),
        )
        .unwrap();
    until(
        Duration::from_secs(60),
        "h2 ran the job h1 had no room for",
        || async { (status_of(&gh, job) == Some(JobStatus::Completed)).then_some(()) },
    )
    .await;
    let ran = gh.job(job).unwrap();
    assert_eq!(ran.conclusion, Some(Conclusion::Success), "{ran:?}");
    assert_ne!(
        ran.runner_name,
        gh.job(hold).unwrap().runner_name,
        "the job ran on h1's runner"
    );

    // The hold job ends; nothing is left behind.
    until_idle(&gh, &named, "the pool idle after the news test").await;
}
