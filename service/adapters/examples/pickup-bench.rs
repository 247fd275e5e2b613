//! Pickup latency over the real adapters: a job queued at the fake GitHub (50 ms added to every
//! request) → the runner process spawned, and → the job taken (`in_progress`), p50/p99 over
//! `--jobs` jobs (default 50) one after another, with a warm package cache.
//!
//! `cargo run --release -p rm-adapters --example pickup-bench -- [--jobs N] [--poll-ms MS | --planner]`
//! (the loop's poll interval dominates the spawn figure: on average half of it is waiting).
//! `--planner` polls at the budget planner's interval for one target (`BudgetPoll`), as the
//! service does.
//!
//! `--pattern isolated|spaced|overlapping|long|burst` (default `isolated`, the one-at-a-time
//! stream above) runs jobs that overlap, on a host of `--capacity` (default 4) slots and a policy
//! of as many: `spaced` queues rounds of three `--job-ms` jobs (default 5 s) 1.5 s apart (the
//! reported case); `overlapping` queues rounds of three `--job-ms` jobs (default 8 s) at 0, 1/5 and 1/2 of
//! their length (the issue's 40 s jobs at 0, 8, 20 s, scaled); `long` queues a job longer than
//! every refresh interval (default 35 s) every third of its length, so about three run at once;
//! `burst` queues `--capacity` jobs at once per round. Each prints queued → spawned (launches
//! paired with jobs in queueing order), queued → `in_progress`, and the surplus (runners
//! started − jobs served), which must be 0.
//!
//! It also prints what the whole service charged against GitHub's primary rate limit per job
//! served (the fake's counters, from the cleanup of a first, unmeasured job to `--settle-ms`,
//! default 62 s, after the last job's cleanup, so that what the service still reads about the
//! jobs served is counted: the confirmation that the last runners left GitHub, the
//! `in_progress` backstop; the start is printed apart, for every pattern: that first job and
//! the first confirmation that runners left GitHub, the first read of an empty inventory).
//! `--log-charged` lists every charged request of that window (when, endpoint, status, path),
//! `--log-requests` every request.
//! `--job-ms MS` sets each job's duration (default 50); `--inventory-refresh-ms MS` overrides
//! the agent's `inventory_refresh` (0: list the runner inventory on every pass with a live
//! runner, the rule before that setting existed); `--etag-versions N` how many versions per
//! URL the client offers in `If-None-Match` (1: the newest only, what a server that compares a
//! single tag amounts to).

use rm_adapters::{
    spawn_target_loops, BudgetPoll, GitHubAdapter, GitHubPackageSource, HostAdapter,
    JournalAdapter, LifecycleConfig,
};
use rm_agent::EventKind;
use rm_core::{
    Arch, Host, HostId, HostLabel, LabelSet, Os, PolicySpec, ProfileName, RoutingPrefix, Target,
};
use rm_github::{
    ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_journal::Journal;
use rm_runner::{Platform, RunAs, RunnerHost, RunnerHostConfig};
use rm_testkit::package::RunnerPackage;
use rm_testkit::{
    EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, InstallationRepos, JobSpec, JobStatus,
};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> anyhow::Result<u64> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args
            .get(i + 1)
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(default)),
        None => Ok(default),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(what: &str, mut xs: Vec<Duration>) {
    xs.sort();
    println!(
        "{what:<28} n={:<3} p50={:>6} ms  p99={:>6} ms  min={:>6} ms  max={:>6} ms",
        xs.len(),
        percentile(&xs, 50.0).as_millis(),
        percentile(&xs, 99.0).as_millis(),
        xs.first().copied().unwrap_or_default().as_millis(),
        xs.last().copied().unwrap_or_default().as_millis(),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let pattern = Pattern::from_args()?;
    let jobs = arg("--jobs", 50)?;
    let poll_ms = arg("--poll-ms", 1000)?;
    let use_planner = std::env::args().any(|a| a == "--planner");
    let job_ms = arg("--job-ms", pattern.default_job_ms())?;
    let capacity = match pattern {
        Pattern::Isolated => u32::try_from(arg("--capacity", 2)?)?,
        _ => u32::try_from(arg("--capacity", 4)?)?,
    };
    let inventory_refresh_ms = arg("--inventory-refresh-ms", u64::MAX)?;
    let etag_versions = arg("--etag-versions", 0)?;
    let gh = FakeGitHub::start(FakeConfig {
        poll_hold: Duration::from_millis(500),
        session_timeout: Duration::from_secs(3),
        ..FakeConfig::default()
    })
    .await?;
    gh.create_user("octo")?;
    gh.create_repo("octo/bench")?;
    gh.create_installation("octo", InstallationRepos::All)?;
    gh.set_runner_package(&RunnerPackage::shared_for_tests()?);
    let token = gh.issue_token("octo")?.access_token;

    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let mut journal = Journal::open(data.join("journal.sqlite"))?;
    let host_row = Host {
        id: HostId::new("bench")?,
        os: Os::from_std(std::env::consts::OS).ok_or_else(|| anyhow::anyhow!("os"))?,
        arch: Arch::from_std(std::env::consts::ARCH).ok_or_else(|| anyhow::anyhow!("arch"))?,
        label: HostLabel::from_machine_name("bench"),
        capacity,
    };
    journal.put_host(&host_row, Some(&data.join("runners")))?;
    let label = host_row.routing_label(&RoutingPrefix::default(), &ProfileName::default());
    let target = Target::parse("octo/bench")?;
    let mut spec = PolicySpec::new(target.clone(), LabelSet::new([label.clone()])?);
    spec.max_capacity = Some(capacity);
    journal.insert_policy(&spec)?;

    let store =
        MemoryCredentialStore::new(Some(Credential::non_expiring(SecretString::from(token))));
    let mut client_config = ClientConfig::new(Endpoints::custom(&gh.origin(), &gh.origin())?);
    if etag_versions > 0 {
        client_config.etag_versions = usize::try_from(etag_versions)?;
    }
    let client = GitHubClient::new(client_config, Arc::new(store))?;
    if nix::unistd::geteuid().is_root() {
        rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT)?;
    }
    let mut host_config = RunnerHostConfig::new(data.join("cache"), data.join("runners"));
    host_config.run_as = RunAs::default_for_service();
    host_config.sandbox = rm_runner::sandbox::SandboxConfig::reaching(&[&gh.origin()]);
    let source = GitHubPackageSource::new(client.clone(), target.clone())?;
    let platform = Platform::current().ok_or_else(|| anyhow::anyhow!("platform"))?;
    let host = Arc::new(HostAdapter::new(
        RunnerHost::open(host_config, source)?,
        platform,
    ));
    host.package().await?; // warm cache

    // 50 ms on every request from here on (REST, downloads and the listener's broker calls).
    gh.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Latency(Duration::from_millis(50)),
    ));

    let poll: Arc<dyn rm_agent::PollInterval> = if use_planner {
        Arc::new(BudgetPoll::new(client.clone(), 1))
    } else {
        Arc::new(Duration::from_millis(poll_ms))
    };
    let planner_poll = use_planner.then(|| BudgetPoll::new(client.clone(), 1));
    let mut config = LifecycleConfig::new(poll);
    config.exit_poll = Duration::from_millis(200);
    // Confirms finished runners gone after 1 minute (the service: 5), so that the settling
    // time below counts those reads (more of them than the service makes).
    config.agent.removal_confirm = Duration::from_secs(60);
    if inventory_refresh_ms != u64::MAX {
        config.agent.inventory_refresh = Duration::from_millis(inventory_refresh_ms);
    }
    // Only what the service charges from here on (not the cache warm-up above).
    gh.reset_counters();
    let lifecycle = spawn_target_loops(
        JournalAdapter::new(journal),
        GitHubAdapter::new(client),
        host,
        config,
    )
    .await?;
    let mut events = lifecycle.shared().subscribe();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let lifecycle = Arc::new(lifecycle);
    let runner = {
        let lc = Arc::clone(&lifecycle);
        tokio::spawn(async move { lc.run(rx).await })
    };

    if pattern != Pattern::Isolated {
        // As below: one unmeasured job first, so that the start's reads are reported apart.
        serve_one(&gh, label.as_str(), &data).await?;
        first_confirmation(&gh).await?;
        while events.try_recv().is_ok() {}
        let at_start = gh.counters();
        let measured_from = Instant::now();
        let schedule = pattern.schedule(jobs, job_ms, capacity);
        let result = run_schedule(&gh, &label, &schedule, &mut events, &data).await;
        settle().await;
        let _ = tx.send(true);
        let _ = runner.await;
        let (to_spawn, to_taken, surplus) = result?;
        println!(
            "pickup latency, pattern {pattern:?}: {} jobs of {} ms, host capacity {capacity}, 50 ms per request at the fake, poll {}",
            schedule.len(),
            job_ms,
            if use_planner { "by the budget planner".to_string() } else { format!("{poll_ms} ms") }
        );
        report("queued -> runner spawned", to_spawn);
        report("queued -> job in_progress", to_taken);
        println!("surplus runners (started - jobs served): {surplus}");
        print_charges(&gh, schedule.len() as u64, job_ms, Some(&at_start));
        log_charged(&gh, measured_from);
        return Ok(());
    }

    // One unmeasured job first: the service's start reads everything once (the run lists,
    // the runner inventory after the first runner) and opens its first fast-poll window; the
    // figures below are for jobs on a running service. The start is reported apart.
    let mut at_start = None;
    let mut measured_from = None;
    let (mut to_spawn, mut to_taken, mut launch_total) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=jobs {
        // Start each job from a quiet host: the previous runner is gone.
        while events.try_recv().is_ok() {}
        let queued = Instant::now();
        let run = gh.queue_run(
            "octo/bench",
            vec![JobSpec::new(&format!("job-{i}"), &[label.as_str()])
                .duration(Duration::from_millis(job_ms))],
        )?;
        let job_id = gh
            .runs()
            .into_iter()
            .find(|r| r.id == run)
            .and_then(|r| r.job_ids.first().copied())
            .ok_or_else(|| anyhow::anyhow!("job of run {run}"))?;
        let mut spawned = None;
        let mut taken = None;
        let deadline = queued + Duration::from_secs(30);
        while taken.is_none() || spawned.is_none() {
            anyhow::ensure!(Instant::now() < deadline, "job {i} not picked up in 30 s");
            while let Ok(ev) = events.try_recv() {
                if let EventKind::Launched { timings, .. } = ev.kind {
                    if spawned.is_none() {
                        spawned = Some(queued.elapsed());
                        if i > 0 {
                            launch_total.push(timings.total);
                        }
                    }
                }
            }
            if taken.is_none()
                && gh
                    .job(job_id)
                    .is_some_and(|j| j.status != JobStatus::Queued)
            {
                taken = Some(queued.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if i > 0 {
            to_spawn.extend(spawned);
            to_taken.extend(taken);
        }
        // Wait for the job to finish and its runner to be cleaned before the next one.
        let deadline = Instant::now() + Duration::from_secs(30) + Duration::from_millis(job_ms);
        loop {
            let done = gh
                .job(job_id)
                .is_some_and(|j| j.status == JobStatus::Completed);
            let cleaned = std::fs::read_dir(data.join("runners"))?
                .filter_map(Result::ok)
                .all(|e| e.file_name().to_string_lossy().starts_with('.'));
            if done && cleaned {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "job {i} not finished and cleaned in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if i == 0 {
            first_confirmation(&gh).await?;
            at_start = Some(gh.counters());
            measured_from = Some(Instant::now());
        }
        // Queue the next job at a spread-out point of the poll cycle, not right after a pass.
        let cycle = match &planner_poll {
            Some(p) => {
                use rm_agent::PollInterval;
                p.next_interval().as_millis() as u64
            }
            None => poll_ms,
        };
        tokio::time::sleep(Duration::from_millis((i * 7919 + 131) % cycle.max(1))).await;
    }
    settle().await;
    let _ = tx.send(true);
    let _ = runner.await;

    let interval = match &planner_poll {
        Some(p) => {
            use rm_agent::PollInterval;
            format!(
                "the budget planner's for 1 target (now {} ms)",
                p.next_interval().as_millis()
            )
        }
        None => format!("{poll_ms} ms"),
    };
    println!("pickup latency, {jobs} jobs, 50 ms per request at the fake, poll interval {interval}, warm cache");
    report("queued -> runner spawned", to_spawn);
    report("queued -> job in_progress", to_taken);
    report("launch (reserve -> starting)", launch_total);
    print_charges(&gh, jobs, job_ms, Some(&at_start.unwrap_or_default()));
    log_charged(&gh, measured_from.unwrap_or_else(Instant::now));
    Ok(())
}

/// Queues one short job and waits until it ran and its runner was cleaned.
async fn serve_one(gh: &FakeGitHub, label: &str, data: &std::path::Path) -> anyhow::Result<()> {
    let run = gh.queue_run(
        "octo/bench",
        vec![JobSpec::new("warm-up", &[label]).duration(Duration::from_millis(50))],
    )?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = gh
            .runs()
            .into_iter()
            .find(|r| r.id == run)
            .and_then(|r| r.job_ids.first().copied())
            .and_then(|id| gh.job(id))
            .is_some_and(|j| j.status == JobStatus::Completed);
        let cleaned = std::fs::read_dir(data.join("runners"))?
            .filter_map(Result::ok)
            .all(|e| e.file_name().to_string_lossy().starts_with('.'));
        if done && cleaned {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the warm-up job not served in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the service's first confirmation that finished runners left GitHub (a read of the
/// runner inventory `removal_confirm` after the first one ended): its first look at an empty
/// inventory, charged once per start; later ones find the same listing (a free `304`).
async fn first_confirmation(gh: &FakeGitHub) -> anyhow::Result<()> {
    let before = gh.counters().endpoint("repo_runners_list").requests;
    let deadline = Instant::now() + Duration::from_secs(150);
    while gh.counters().endpoint("repo_runners_list").requests == before {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no confirmation read of the runner inventory in 150 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// With `--log-charged`: every charged request since `from`, in order (seconds since `from`,
/// endpoint, status, path and query), to see where each one goes.
fn log_charged(gh: &FakeGitHub, from: Instant) {
    let all = std::env::args().any(|a| a == "--log-requests");
    if !all && !std::env::args().any(|a| a == "--log-charged") {
        return;
    }
    for r in gh.request_log() {
        if (all || r.charged) && r.at >= from {
            println!(
                "    {:>7.2} s  {:<20} {} {}",
                r.at.duration_since(from).as_secs_f64(),
                r.endpoint,
                r.status,
                r.target
            );
        }
    }
}

/// Lets the service run on after the last job for `--settle-ms` (default 62 s), so what it
/// still reads about the jobs served (the confirmation that the last runners left GitHub, at
/// most `removal_confirm` = 60 s on; the `in_progress` backstop) is counted too.
async fn settle() {
    let ms = arg("--settle-ms", 62_000).unwrap_or(62_000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// What the service charged per job: since `at_start` (the counters after the unmeasured first
/// job; `None`: since the lifecycle started, the start included).
fn print_charges(gh: &FakeGitHub, jobs: u64, job_ms: u64, at_start: Option<&rm_testkit::Counters>) {
    let counters = gh.counters();
    let at_start = at_start.cloned().unwrap_or_default();
    let per_job = counters.total.charged - at_start.total.charged;
    println!(
        "charged requests per job served: {:.2} ({per_job} charged of {} requests, {jobs} jobs of {job_ms} ms)",
        per_job as f64 / jobs.max(1) as f64,
        counters.total.requests - at_start.total.requests,
    );
    if at_start.total.charged > 0 {
        println!(
            "the service's start with its first (unmeasured) job charged {}: {:.2} per job with it",
            at_start.total.charged,
            counters.total.charged as f64 / (jobs + 1) as f64
        );
    }
    for (name, c) in counters.endpoints.iter() {
        let before = at_start.endpoint(name);
        if c.charged == before.charged {
            continue;
        }
        println!(
            "  {name}: {:.2} per job ({} charged, {} requests)",
            (c.charged - before.charged) as f64 / jobs.max(1) as f64,
            c.charged - before.charged,
            c.requests - before.requests
        );
    }
}

/// How jobs arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// One job at a time, each after the previous runner is gone.
    Isolated,
    /// Rounds of three jobs at 0, 1/5 and 1/2 of their length.
    Overlapping,
    /// Rounds of three jobs queued 1.5 s apart (the reported case: three 5 s jobs).
    Spaced,
    /// Jobs longer than every refresh interval, one every third of their length.
    Long,
    /// `capacity` jobs at once per round.
    Burst,
}

impl Pattern {
    fn from_args() -> anyhow::Result<Pattern> {
        let args: Vec<String> = std::env::args().collect();
        let Some(i) = args.iter().position(|a| a == "--pattern") else {
            return Ok(Pattern::Isolated);
        };
        match args.get(i + 1).map(String::as_str) {
            Some("isolated") => Ok(Pattern::Isolated),
            Some("overlapping") => Ok(Pattern::Overlapping),
            Some("spaced") => Ok(Pattern::Spaced),
            Some("long") => Ok(Pattern::Long),
            Some("burst") => Ok(Pattern::Burst),
            other => anyhow::bail!(
                "--pattern {other:?}: use isolated, spaced, overlapping, long or burst"
            ),
        }
    }

    fn default_job_ms(self) -> u64 {
        match self {
            Pattern::Isolated => 50,
            Pattern::Overlapping => 8_000,
            Pattern::Spaced => 5_000,
            // Longer than the 30 s inventory refresh and every poll interval.
            Pattern::Long => 35_000,
            Pattern::Burst => 3_000,
        }
    }

    /// (offset from the start, job length) of every job, in queueing order.
    fn schedule(self, jobs: u64, job_ms: u64, capacity: u32) -> Vec<(Duration, Duration)> {
        let len = Duration::from_millis(job_ms);
        let mut out = Vec::new();
        let mut round_start = Duration::ZERO;
        while (out.len() as u64) < jobs {
            match self {
                // Not scheduled: the isolated stream waits for each job (see `main`).
                Pattern::Isolated => out.push((round_start, len)),
                Pattern::Overlapping => {
                    for offset in [Duration::ZERO, len / 5, len / 2] {
                        out.push((round_start + offset, len));
                    }
                    // The next round once this one has drained.
                    round_start += len / 2 + len + Duration::from_secs(3);
                }
                Pattern::Spaced => {
                    for i in 0..3u32 {
                        out.push((round_start + Duration::from_millis(1_500) * i, len));
                    }
                    round_start += Duration::from_millis(3_000) + len + Duration::from_secs(3);
                }
                Pattern::Long => {
                    out.push((round_start, len));
                    round_start += len / 3;
                }
                Pattern::Burst => {
                    for _ in 0..capacity {
                        out.push((round_start, len));
                    }
                    round_start += len + Duration::from_secs(3);
                }
            }
        }
        out.truncate(usize::try_from(jobs).unwrap_or(usize::MAX));
        out
    }
}

/// Queues every job of `schedule` at its offset, pairs launches with jobs in queueing order,
/// and waits until every job completed and every runtime is gone. Returns queued → spawned,
/// queued → `in_progress`, and the surplus (launches − jobs served).
async fn run_schedule(
    gh: &FakeGitHub,
    label: &rm_core::Label,
    schedule: &[(Duration, Duration)],
    events: &mut tokio::sync::broadcast::Receiver<rm_agent::AgentEvent>,
    data: &std::path::Path,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, i64)> {
    let start = Instant::now();
    let mut queued: Vec<(Instant, u64)> = Vec::new();
    let mut launches: Vec<Instant> = Vec::new();
    let mut taken: std::collections::HashMap<u64, Duration> = std::collections::HashMap::new();
    let longest = schedule
        .iter()
        .map(|(o, l)| *o + *l)
        .max()
        .unwrap_or_default();
    let deadline = start + longest + Duration::from_secs(120);
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the schedule did not finish in time"
        );
        // Queue what is due.
        while let Some((offset, len)) = schedule.get(queued.len()) {
            if start.elapsed() < *offset {
                break;
            }
            let i = queued.len();
            let run = gh.queue_run(
                "octo/bench",
                vec![JobSpec::new(&format!("job-{i}"), &[label.as_str()]).duration(*len)],
            )?;
            let job = gh
                .runs()
                .into_iter()
                .find(|r| r.id == run)
                .and_then(|r| r.job_ids.first().copied())
                .ok_or_else(|| anyhow::anyhow!("job of run {run}"))?;
            queued.push((Instant::now(), job));
        }
        loop {
            match events.try_recv() {
                Ok(ev) => {
                    if let EventKind::Launched { .. } = ev.kind {
                        launches.push(Instant::now());
                    }
                }
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {
                    anyhow::bail!("the event channel lagged: launches were missed")
                }
                Err(_) => break,
            }
        }
        for (at, job) in &queued {
            if !taken.contains_key(job)
                && gh.job(*job).is_some_and(|j| j.status != JobStatus::Queued)
            {
                taken.insert(*job, at.elapsed());
            }
        }
        let all_queued = queued.len() == schedule.len();
        let all_done = all_queued
            && queued.iter().all(|(_, job)| {
                gh.job(*job)
                    .is_some_and(|j| j.status == JobStatus::Completed)
            });
        if all_done {
            let cleaned = std::fs::read_dir(data.join("runners"))?
                .filter_map(Result::ok)
                .all(|e| e.file_name().to_string_lossy().starts_with('.'));
            if cleaned {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let to_spawn = queued
        .iter()
        .zip(&launches)
        .map(|((q, _), l)| l.saturating_duration_since(*q))
        .collect();
    let to_taken = queued
        .iter()
        .filter_map(|(_, job)| taken.get(job).copied())
        .collect();
    let served = queued
        .iter()
        .filter(|(_, job)| gh.job(*job).is_some_and(|j| j.runner_name.is_some()))
        .count();
    Ok((to_spawn, to_taken, launches.len() as i64 - served as i64))
}
