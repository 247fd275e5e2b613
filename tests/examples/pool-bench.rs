//! Pickup latency and database cost of a pool of hosts (#15): jobs queued one at a time →
//! runner spawned, p50/p99, on three real services joined to one pool label against one
//! service on its own, in the same run; the pool's PostgreSQL statements per job served (and
//! per idle minute per host); surplus runners (registered − jobs served) per 1,000 jobs.
//!
//! Usage (debug build, as the e2e tests):
//!   cargo build --workspace --bins && cargo run -p rm-e2e --example pool-bench --
//!       [--jobs N] [--rounds R] [--targets T] [--job-ms MS] [--gap-ms MS] [--poll-ms MS]
//!       [--capacity C] [--single-capacity C] [--latency-ms MS] [--idle-secs S] [--pool-only]
//!       [--exe PATH] [--seed S] [--raw FILE]
//! A release run: `cargo build --release --workspace --bins` and `cargo run --release ...`
//! (the services are the `runner-manager` next to this program's target directory), or
//! `--exe` naming a release `runner-manager`.
//!
//! Setup: one fake GitHub (user `octo`, `--latency-ms` added to every request, 50 by default,
//! as `pickup-bench` does; its hourly limit raised to 1,000,000, since the fixed poll below
//! does not plan against it), one throwaway PostgreSQL with `pg_stat_statements`. The single
//! host is one service, not joined, with `--targets` (2) repositories `octo/single-N` carrying
//! the label `rm-bench-single`; the pool is three services joined on `rm-bench-pool`, each with
//! the `--targets` repositories `octo/pool-N` carrying that label. Each pool host has capacity
//! `--capacity` (4), the single host `--single-capacity` (3 × that: the pool's room), and each
//! target as many runners as its host; every service polls at a fixed `--poll-ms` (1000: the
//! budget planner's floor, where it polls while jobs are queued). The services run a copy of
//! the binary (a rebuild of the target directory during the run must not look like an upgrade
//! to them) through a wrapper that adds `rm_agent=debug` to the harness's `RUST_LOG=info`, so
//! their logs time each pass (`demand seen`, `pass completed`).
//!
//! Each side gets one unmeasured warm-up burst (every host starts runners, downloads the
//! runner package, and the pool's readers publish). Then `--rounds` rounds (3) each queue
//! `--jobs`/R jobs (120 in all) on each side, both sides at once: every job is queued on the
//! single host and on the pool at the same instant (microseconds apart, which first
//! alternates), so both see the same schedule and the same machine load (other builds
//! included). A job runs `--job-ms` (200); jobs are queued one at a time, round-robin over the
//! side's targets, each `--gap-ms` (500) plus a random step below the poll interval
//! (SplitMix64, `--seed`; by default the clock) after the one before, so they land at random
//! points of the poll cycle. (A loop also passes at once when one of its runners ends, so the
//! wait for the next poll depends on the schedule around each job: measuring one side after the
//! other gave each side its own slice of the schedule and different waits, and a fixed
//! sequence of steps let the loops lock onto it.) With 200 ms jobs one or two run at once per
//! side (no host waits for room); with `--job-ms 6000` about six do, more than one pool host
//! holds, so the pool's other hosts start runners too. After each round both sides are left to
//! go idle (every job done, every runner gone).
//!
//! Measured: queued (this program's wall clock just before `queue_run`) → runner spawned (the
//! service's `runner launched` log line: the runner's process was spawned with its JIT
//! configuration and `starting` journalled; the same point as `pickup-bench`'s `Launched`
//! event), the k-th launch of a target paired with the k-th job queued for it; → the job
//! `in_progress` at the fake (polled every 5 ms). Where the time goes, from the services' logs:
//! queued → the first demand read on any host of the side that showed a job of the target (in
//! the pool the reader's, which publishes in the same pass), → the launching host's own read,
//! → `attempt reserved` (after the pool claim), and the launch's own steps. Statements:
//! `sum(calls)` of `pg_stat_statements` (statements naming `pg_stat_statements` excluded, i.e.
//! this program's own), reset after the warm-up, read before and after each round; the
//! idle rate over `--idle-secs` (60) of nothing queued at the end. Surplus: `generate-jitconfig`
//! answered (per side, by the services' tokens) − jobs served. `--pool-only` skips the single
//! host (for a long surplus run); `--raw FILE` writes each measured job's times (ms after it
//! was queued) as tab-separated lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rm_e2e::pool::{join, until_all_alive, until_idle, TIMEOUTS};
use rm_e2e::postgres::Cluster;
use rm_e2e::{bin, fake_github_repos, Daemon};
use rm_testkit::{EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, JobSpec, JobStatus};

const SINGLE_LABEL: &str = "rm-bench-single";
const POOL_LABEL: &str = "rm-bench-pool";
const POOL_HOSTS: [&str; 3] = ["h1", "h2", "h3"];

/// `--name N` (a number), else `default`.
fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} takes a number")),
        None => default,
    }
}

/// SplitMix64: the gaps' random steps (reproducible from `--seed`).
struct Steps(u64);

impl Steps {
    fn next_below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound.max(1)
    }
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Wall-clock microseconds since the epoch (the services' log lines are on the same clock).
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Single,
    Pool,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Single => "single host",
            Side::Pool => "3-host pool",
        }
    }
}

/// One measured job.
#[derive(Debug, Clone)]
struct Queued {
    side: Side,
    target: String,
    job: u64,
    at_us: i64,
}

/// One `runner launched` line of a service's log, with its `attempt reserved` line.
#[derive(Debug, Clone)]
struct Launch {
    host: String,
    target: String,
    attempt: String,
    at_us: i64,
    reserved_us: Option<i64>,
    /// The `demand seen` (debug) of the pass that reserved it: its demand read ended.
    seen_us: Option<i64>,
    /// lock_wait, materialize, register, spawn, total (ms), as logged.
    steps: [u64; 5],
}

/// A log line's leading RFC 3339 timestamp, in µs.
fn line_time(line: &str) -> Option<i64> {
    let first = line.split_whitespace().next()?;
    chrono::DateTime::parse_from_rfc3339(first)
        .ok()
        .map(|t| t.timestamp_micros())
}

/// `key=value` of a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// The launches in `log` (of service `host`) from `since_us` on.
fn launches(host: &str, log: &str, since_us: i64) -> Vec<Launch> {
    let mut reserved: BTreeMap<String, (i64, Option<i64>)> = BTreeMap::new();
    // The last `demand seen` of each target that saw a job.
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(at) = line_time(line) else { continue };
        if line.contains("demand seen") {
            if let (Some(t), Some(m)) = (field(line, "gh_target"), field(line, "matched")) {
                if m != "0" {
                    seen.insert(t.to_owned(), at);
                }
            }
        } else if line.contains("attempt reserved") {
            if let (Some(a), Some(t)) = (field(line, "attempt"), field(line, "gh_target")) {
                reserved.insert(a.to_owned(), (at, seen.get(t).copied()));
            }
        } else if line.contains("runner launched") && at >= since_us {
            let (Some(attempt), Some(target)) = (field(line, "attempt"), field(line, "gh_target"))
            else {
                continue;
            };
            let ms = |k: &str| field(line, k).and_then(|v| v.parse().ok()).unwrap_or(0);
            out.push(Launch {
                host: host.to_owned(),
                target: target.to_owned(),
                attempt: attempt.to_owned(),
                at_us: at,
                reserved_us: reserved.get(attempt).map(|r| r.0),
                seen_us: reserved.get(attempt).and_then(|r| r.1),
                steps: [
                    ms("lock_wait_ms"),
                    ms("materialize_ms"),
                    ms("register_ms"),
                    ms("spawn_ms"),
                    ms("total_ms"),
                ],
            });
        }
    }
    out
}

/// When each target's demand reads ended that showed jobs to act on (`demand seen`, debug,
/// with `matched` > 0), from `since_us` on.
fn reads_with_jobs(log: &str, since_us: i64, into: &mut BTreeMap<String, Vec<i64>>) {
    for line in log.lines() {
        if !line.contains("demand seen") {
            continue;
        }
        let (Some(at), Some(t), Some(m)) = (
            line_time(line),
            field(line, "gh_target"),
            field(line, "matched"),
        ) else {
            continue;
        };
        if at >= since_us && m != "0" {
            into.entry(t.to_owned()).or_default().push(at);
        }
    }
}

/// How long each target's passes took while idle, from `log`'s `pass completed` lines in
/// `[from_us, to_us]`: with nothing to wake a loop early, consecutive passes end the poll
/// interval plus one pass apart (ms, mean; `None` without two passes).
fn idle_pass_ms(log: &str, from_us: i64, to_us: i64, poll_ms: u64) -> BTreeMap<String, f64> {
    let mut ends: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in log.lines() {
        if !line.contains("pass completed") {
            continue;
        }
        let (Some(at), Some(t)) = (line_time(line), field(line, "gh_target")) else {
            continue;
        };
        if (from_us..=to_us).contains(&at) {
            ends.entry(t.to_owned()).or_default().push(at);
        }
    }
    ends.into_iter()
        .filter(|(_, v)| v.len() >= 2)
        .map(|(t, v)| {
            let span = (v[v.len() - 1] - v[0]) as f64 / 1000.0;
            (t, span / (v.len() - 1) as f64 - poll_ms as f64)
        })
        .collect()
}

/// Warnings and errors logged from `since_us` on, by message (timestamps and fields cut).
fn complaints(log: &str, since_us: i64) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        if !(line.contains(" WARN ") || line.contains(" ERROR ")) {
            continue;
        }
        if line_time(line).is_some_and(|t| t < since_us) {
            continue;
        }
        // `TIME  LEVEL module: message key=value…`: keep the level, module and message.
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let text: Vec<&str> = words
            .iter()
            .take_while(|w| !w.contains('=') || w.ends_with(':'))
            .copied()
            .collect();
        *out.entry(text.join(" ")).or_default() += 1;
    }
    out
}

/// Nearest-rank percentile of sorted values (as `pickup-bench`).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// One statement's counters in `pg_stat_statements`.
#[derive(Debug, Clone, Default)]
struct Stmt {
    calls: u64,
    exec_ms: f64,
    text: String,
}

/// Every statement `pg_stat_statements` holds except those naming it (this program's own):
/// their calls add up to `SELECT sum(calls) FROM pg_stat_statements WHERE query NOT ILIKE
/// '%pg_stat_statements%'`.
async fn statements(pg: &Arc<Cluster>) -> BTreeMap<i64, Stmt> {
    let pg = Arc::clone(pg);
    let rows = tokio::task::spawn_blocking(move || {
        pg.psql(
            "SELECT coalesce(queryid, 0) || chr(9) || calls || chr(9) || total_exec_time \
             || chr(9) || left(regexp_replace(query, '\\s+', ' ', 'g'), 110) \
             FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'",
        )
    })
    .await
    .expect("psql task");
    let mut out: BTreeMap<i64, Stmt> = BTreeMap::new();
    for row in rows.lines() {
        let mut cols = row.splitn(4, '\t');
        let (Some(id), Some(calls), Some(ms), Some(text)) =
            (cols.next(), cols.next(), cols.next(), cols.next())
        else {
            continue;
        };
        let e = out.entry(id.parse().unwrap_or(0)).or_default();
        e.calls += calls.parse::<u64>().unwrap_or(0);
        e.exec_ms += ms.parse::<f64>().unwrap_or(0.0);
        e.text = text.to_owned();
    }
    out
}

/// `after − before`, added into `into`.
fn add_delta(
    into: &mut BTreeMap<i64, Stmt>,
    before: &BTreeMap<i64, Stmt>,
    after: &BTreeMap<i64, Stmt>,
) {
    for (id, a) in after {
        let b = before.get(id).cloned().unwrap_or_default();
        let e = into.entry(*id).or_default();
        e.calls += a.calls.saturating_sub(b.calls);
        e.exec_ms += (a.exec_ms - b.exec_ms).max(0.0);
        e.text.clone_from(&a.text);
    }
}

fn total_calls(s: &BTreeMap<i64, Stmt>) -> u64 {
    s.values().map(|s| s.calls).sum()
}

/// One service of the bench: started with its own token, capacity set, its targets added with
/// `label` (and joined to the pool as `pool` when given).
async fn host(
    gh: &FakeGitHub,
    exe: &Path,
    pg: Option<(&Cluster, &str)>,
    targets: &[String],
    label: &str,
    capacity: u64,
    poll_ms: u64,
) -> (Daemon, String) {
    let poll = poll_ms.to_string();
    let mut extra: Vec<&str> = TIMEOUTS.to_vec();
    extra.extend(["--poll-ms", &poll]);
    let d = Daemon::start_exe(gh, exe, &extra, &[]).await;
    let token = d.sign_in_token(gh, "octo").await;
    d.ok(&["host", "set-capacity", &capacity.to_string()]).await;
    if let Some((pg, name)) = pg {
        join(&d, pg, label, name).await;
    }
    for t in targets {
        d.ok(&[
            "repo",
            "add",
            t,
            "--max-runners",
            &capacity.to_string(),
            "--label",
            label,
        ])
        .await;
    }
    (d, token)
}

/// Job ids not yet seen leave `queued`, and when they did (µs).
type Taken = Arc<Mutex<BTreeMap<u64, Option<i64>>>>;

/// Notes, every 5 ms, when each job of `taken` left `queued` at the fake.
async fn watch_taken(gh: Arc<FakeGitHub>, taken: Taken, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let open: Vec<u64> = taken
            .lock()
            .expect("taken")
            .iter()
            .filter(|(_, t)| t.is_none())
            .map(|(j, _)| *j)
            .collect();
        for job in open {
            if gh.job(job).is_some_and(|j| j.status != JobStatus::Queued) {
                taken.lock().expect("taken").insert(job, Some(now_us()));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Queues `n` jobs one at a time on each side of `sides` (side, targets, label), at the same
/// instant on every side, round-robin over each side's targets; `i` numbers the jobs over the
/// whole run. Between two, `gap_ms` and a random step below `poll_ms`.
#[allow(clippy::too_many_arguments)]
async fn round(
    gh: &FakeGitHub,
    sides: &[(Side, &[String], &str)],
    n: u64,
    i: &mut u64,
    job_ms: u64,
    gap_ms: u64,
    poll_ms: u64,
    steps: &mut Steps,
    taken: &Taken,
) -> Vec<Queued> {
    let mut out = Vec::new();
    for k in 0..n {
        // Which side is queued first alternates (they are microseconds apart).
        let mut order: Vec<&(Side, &[String], &str)> = sides.iter().collect();
        if k % 2 == 1 {
            order.reverse();
        }
        for (side, targets, label) in order {
            let target = &targets[usize::try_from(*i).unwrap_or(0) % targets.len()];
            let at_us = now_us();
            let run = gh
                .queue_run(
                    target,
                    vec![JobSpec::new(&format!("job-{i}"), &[label])
                        .duration(Duration::from_millis(job_ms))],
                )
                .expect("queue a run");
            let job = gh
                .runs()
                .into_iter()
                .find(|r| r.id == run)
                .and_then(|r| r.job_ids.first().copied())
                .expect("the queued run's job");
            taken.lock().expect("taken").insert(job, None);
            out.push(Queued {
                side: *side,
                target: target.clone(),
                job,
                at_us,
            });
        }
        *i += 1;
        if k + 1 < n {
            let step = steps.next_below(poll_ms);
            tokio::time::sleep(Duration::from_millis(gap_ms + step)).await;
        }
    }
    out
}

/// What one side measured.
#[derive(Debug, Default)]
struct Figures {
    spawned: Vec<f64>,
    in_progress: Vec<f64>,
    /// Queued → the end of the demand read of the pass that reserved it.
    seen: Vec<f64>,
    /// That read's end → reserved (allocation, headroom, the pool claim, the journal insert).
    seen_to_reserved: Vec<f64>,
    /// One line per paired job, for `--raw`.
    raw: Vec<String>,
    /// Reserve step: lock, headroom, the pool claim, the journal insert (ms).
    reserve_step: Vec<f64>,
    /// Reserve → `starting` (materialize, JIT, spawn).
    launch: Vec<f64>,
    jit: Vec<f64>,
    jobs: usize,
    launches: usize,
    registered: u64,
    charged: u64,
    unpaired: usize,
    /// Jobs that ran on the runner paired with them (the rest took another job's runner).
    own_runner: usize,
    /// Queued → spawned of the runners each host started.
    spawned_by_host: BTreeMap<String, Vec<f64>>,
    /// Queued → the first demand read on any host of the side that showed a job of its target
    /// (in the pool: the reader's read, published in the same pass).
    known: Vec<f64>,
    /// That read → runner spawned (in the pool, by a follower: the wait for its next pass
    /// after the publish, then its launch).
    known_to_spawned: Vec<f64>,
    known_to_spawned_by_host: BTreeMap<String, Vec<f64>>,
}

fn figures(
    side: Side,
    queued: &[Queued],
    launched: &[Launch],
    taken: &BTreeMap<u64, Option<i64>>,
    ran_on: &BTreeMap<u64, String>,
    reads: &BTreeMap<String, Vec<i64>>,
) -> Figures {
    let mut f = Figures::default();
    let jobs: Vec<&Queued> = queued.iter().filter(|q| q.side == side).collect();
    f.jobs = jobs.len();
    let targets: BTreeSet<&str> = jobs.iter().map(|q| q.target.as_str()).collect();
    for target in targets {
        let mut js: Vec<&&Queued> = jobs.iter().filter(|q| q.target == target).collect();
        js.sort_by_key(|q| q.at_us);
        let mut ls: Vec<&Launch> = launched.iter().filter(|l| l.target == target).collect();
        ls.sort_by_key(|l| l.at_us);
        f.launches += ls.len();
        f.unpaired += js.len().abs_diff(ls.len());
        for (q, l) in js.iter().zip(&ls) {
            f.spawned.push((l.at_us - q.at_us) as f64 / 1000.0);
            if let Some(r) = l.reserved_us {
                f.launch.push((l.at_us - r) as f64 / 1000.0);
                if let Some(d) = l.seen_us {
                    f.seen.push((d - q.at_us) as f64 / 1000.0);
                    f.seen_to_reserved.push((r - d) as f64 / 1000.0);
                }
            }
            let ms = |t: Option<i64>| {
                t.map_or("-".to_owned(), |t| {
                    format!("{:.1}", (t - q.at_us) as f64 / 1000.0)
                })
            };
            f.raw.push(format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                side.name(),
                target,
                q.job,
                l.host,
                q.at_us,
                ms(l.seen_us),
                ms(l.reserved_us),
                ms(Some(l.at_us)),
                ms(taken.get(&q.job).copied().flatten()),
            ));
            let [lock, mat, reg, spawn, total] = l.steps;
            f.reserve_step
                .push(total.saturating_sub(lock + mat + reg + spawn) as f64);
            f.jit.push(reg as f64);
            if ran_on.get(&q.job) == Some(&format!("rm-{}", l.attempt)) {
                f.own_runner += 1;
            }
            f.spawned_by_host
                .entry(l.host.clone())
                .or_default()
                .push((l.at_us - q.at_us) as f64 / 1000.0);
            let first = reads
                .get(target)
                .and_then(|r| r.iter().copied().filter(|t| *t >= q.at_us).min());
            if let Some(k) = first.filter(|k| *k <= l.at_us) {
                f.known.push((k - q.at_us) as f64 / 1000.0);
                f.known_to_spawned.push((l.at_us - k) as f64 / 1000.0);
                f.known_to_spawned_by_host
                    .entry(l.host.clone())
                    .or_default()
                    .push((l.at_us - k) as f64 / 1000.0);
            }
        }
        for q in &js {
            if let Some(Some(t)) = taken.get(&q.job) {
                f.in_progress.push((t - q.at_us) as f64 / 1000.0);
            }
        }
    }
    f.spawned = sorted(std::mem::take(&mut f.spawned));
    f.in_progress = sorted(std::mem::take(&mut f.in_progress));
    f.seen = sorted(std::mem::take(&mut f.seen));
    f.seen_to_reserved = sorted(std::mem::take(&mut f.seen_to_reserved));
    f.known = sorted(std::mem::take(&mut f.known));
    f.known_to_spawned = sorted(std::mem::take(&mut f.known_to_spawned));
    f.reserve_step = sorted(std::mem::take(&mut f.reserve_step));
    f.launch = sorted(std::mem::take(&mut f.launch));
    f.jit = sorted(std::mem::take(&mut f.jit));
    f
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Waits until each pool host is connected and sees all three alive.
async fn pool_ready(hosts: &[Daemon]) {
    let named: Vec<(&str, &Daemon)> = POOL_HOSTS.iter().copied().zip(hosts).collect();
    until_all_alive(&named).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs = arg("--jobs", 120);
    let rounds = arg("--rounds", 3).max(1);
    let n_targets = arg("--targets", 2).max(1);
    let job_ms = arg("--job-ms", 200);
    let gap_ms = arg("--gap-ms", 500);
    let poll_ms = arg("--poll-ms", 1000);
    let capacity = arg("--capacity", 4);
    let single_capacity = arg("--single-capacity", capacity * 3);
    let latency_ms = arg("--latency-ms", 50);
    let idle_secs = arg("--idle-secs", 60);
    let pool_only = flag("--pool-only");
    let seed = arg(
        "--seed",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1),
    );
    let mut steps = Steps(seed);
    let started = Instant::now();
    let load_at_start = load_average();

    let single_targets: Vec<String> = (1..=n_targets)
        .map(|i| format!("octo/single-{i}"))
        .collect();
    let pool_targets: Vec<String> = (1..=n_targets).map(|i| format!("octo/pool-{i}")).collect();
    let repos: Vec<&str> = single_targets
        .iter()
        .chain(&pool_targets)
        .map(String::as_str)
        .collect();
    let gh = Arc::new(
        fake_github_repos(
            FakeConfig {
                device_interval: Duration::from_secs(1),
                ..FakeConfig::default()
            },
            &repos,
        )
        .await,
    );
    // The services poll at a fixed interval, not planned against the hourly budget as the
    // service's planner would, and a long run serves hours' worth of jobs in minutes: the
    // fake's primary limit (5,000 an hour per user, shared by the four services) must not be
    // what a run measures.
    gh.set_rate_limit(1_000_000);
    let pg = Arc::new(
        tokio::task::spawn_blocking(|| {
            Cluster::start_with(
                &[
                    "shared_preload_libraries=pg_stat_statements",
                    "pg_stat_statements.track=all",
                ],
                |_| {},
            )
        })
        .await
        .expect("PostgreSQL starts"),
    );
    {
        let pg = Arc::clone(&pg);
        tokio::task::spawn_blocking(move || pg.psql("CREATE EXTENSION pg_stat_statements"))
            .await
            .expect("CREATE EXTENSION pg_stat_statements");
    }

    // The services run a copy: a rebuild of the shared target directory during the run must
    // not look like an upgrade to them.
    let built = match std::env::args().skip_while(|a| a != "--exe").nth(1) {
        Some(path) => PathBuf::from(path),
        None => bin("runner-manager"),
    };
    let exe_dir = tempfile::Builder::new()
        .prefix("rm-pool-bench")
        .tempdir()
        .expect("temp dir");
    std::fs::set_permissions(
        exe_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod temp dir");
    let real = exe_dir.path().join("runner-manager.bin");
    std::fs::copy(&built, &real).expect("copy runner-manager");
    // The harness sets RUST_LOG=info; the agent's `demand seen` and `pass completed` (debug)
    // time the passes.
    let exe: PathBuf = exe_dir.path().join("runner-manager");
    std::fs::write(
        &exe,
        format!(
            "#!/bin/sh\nRUST_LOG=info,rm_agent=debug exec '{}' \"$@\"\n",
            real.display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod the wrapper");

    let single = if pool_only {
        None
    } else {
        Some(
            host(
                &gh,
                &exe,
                None,
                &single_targets,
                SINGLE_LABEL,
                single_capacity,
                poll_ms,
            )
            .await,
        )
    };
    let mut pool = Vec::new();
    for name in POOL_HOSTS {
        pool.push(
            host(
                &gh,
                &exe,
                Some((&pg, name)),
                &pool_targets,
                POOL_LABEL,
                capacity,
                poll_ms,
            )
            .await,
        );
    }
    let (pool_hosts, pool_tokens): (Vec<Daemon>, Vec<String>) = pool.into_iter().unzip();
    pool_ready(&pool_hosts).await;
    let mut named: Vec<(&str, &Daemon)> = POOL_HOSTS.iter().copied().zip(&pool_hosts).collect();
    if let Some((d, _)) = &single {
        named.push(("single", d));
    }

    // From here on every request waits `--latency-ms` at the fake (REST, downloads, the
    // runners' broker calls), as `pickup-bench` does.
    if latency_ms > 0 {
        gh.inject_fault(FaultRule::always(
            EndpointMatch::Any,
            Fault::Latency(Duration::from_millis(latency_ms)),
        ));
    }

    // Warm-up, not measured: a burst per side that every pool host takes part in (each
    // downloads the runner package once), the readers' first reads and publishes.
    let warm_from = now_us();
    let mut warm = 0u64;
    let burst = |side_targets: &[String], label: &str, n: u64| {
        for k in 0..n {
            let t = &side_targets[usize::try_from(k).unwrap_or(0) % side_targets.len()];
            gh.queue_run(
                t,
                vec![JobSpec::new(&format!("warm-{k}"), &[label])
                    .duration(Duration::from_millis(2000))],
            )
            .expect("queue a warm-up run");
        }
    };
    if single.is_some() {
        burst(&single_targets, SINGLE_LABEL, capacity);
        warm += capacity;
    }
    let pool_burst = (capacity * 3).min(capacity * n_targets * 3);
    burst(&pool_targets, POOL_LABEL, pool_burst);
    warm += pool_burst;
    until_idle(&gh, &named, "the warm-up done").await;
    let mut warm_hosts = Vec::new();
    for (name, d) in &named {
        warm_hosts.push(format!(
            "{name} {}",
            launches(name, &d.log(), warm_from).len()
        ));
    }
    println!(
        "warm-up: {warm} jobs; runners started per host: {}",
        warm_hosts.join(", ")
    );
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Measured from here.
    gh.reset_counters();
    {
        let pg = Arc::clone(&pg);
        tokio::task::spawn_blocking(move || pg.psql("SELECT pg_stat_statements_reset()"))
            .await
            .expect("pg_stat_statements_reset()");
    }
    let measured_from = now_us();
    let taken: Taken = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_taken(
        Arc::clone(&gh),
        Arc::clone(&taken),
        Arc::clone(&stop),
    ));
    let mut queued = Vec::new();
    let mut pool_statements: BTreeMap<i64, Stmt> = BTreeMap::new();
    let mut pool_secs = 0.0f64;
    let mut i = 0u64;
    let mut sides_run: Vec<(Side, &[String], &str)> = Vec::new();
    if single.is_some() {
        sides_run.push((Side::Single, &single_targets, SINGLE_LABEL));
    }
    sides_run.push((Side::Pool, &pool_targets, POOL_LABEL));
    for r in 0..rounds {
        let n = jobs / rounds + u64::from(r < jobs % rounds);
        let before = statements(&pg).await;
        let t = Instant::now();
        let q = round(
            &gh, &sides_run, n, &mut i, job_ms, gap_ms, poll_ms, &mut steps, &taken,
        )
        .await;
        queued.extend(q);
        until_idle(&gh, &named, &format!("round {r}: every job done")).await;
        let secs = t.elapsed().as_secs_f64();
        pool_secs += secs;
        let after = statements(&pg).await;
        add_delta(&mut pool_statements, &before, &after);
        println!(
            "round {r}: {n} jobs per side in {secs:.1} s (load average {})",
            load_average()
        );
    }
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.await;
    let load_after_jobs = load_average();

    // The idle rate: nothing queued, every runner gone, claims settled.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_before = statements(&pg).await;
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle_after = statements(&pg).await;
    let idle_to = now_us();
    let idle_from = idle_to - i64::try_from(idle_secs).unwrap_or(0) * 1_000_000;
    let mut idle: BTreeMap<i64, Stmt> = BTreeMap::new();
    add_delta(&mut idle, &idle_before, &idle_after);
    let idle_per_min_host =
        total_calls(&idle) as f64 / (idle_secs.max(1) as f64 / 60.0) / POOL_HOSTS.len() as f64;

    // The figures.
    let by_token = gh.requests_by_token();
    let counted = |tokens: &[&String]| {
        let (mut registered, mut charged) = (0, 0);
        for t in tokens {
            if let Some(c) = by_token.get(*t) {
                let jit = c.endpoint("repo_jitconfig");
                registered += jit.requests - jit.errors;
                charged += c.total.charged;
            }
        }
        (registered, charged)
    };
    let taken = taken.lock().expect("taken").clone();
    let ran_on: BTreeMap<u64, String> = gh
        .jobs()
        .into_iter()
        .filter_map(|j| Some((j.id, j.runner_name?)))
        .collect();
    let mut sides = Vec::new();
    let mut logs_complaints: BTreeMap<String, usize> = BTreeMap::new();
    for side in [Side::Single, Side::Pool] {
        let (hosts, tokens): (Vec<(&str, &Daemon)>, Vec<&String>) = match side {
            Side::Single => match &single {
                Some((d, t)) => (vec![("single", d)], vec![t]),
                None => continue,
            },
            Side::Pool => (
                POOL_HOSTS.iter().copied().zip(&pool_hosts).collect(),
                pool_tokens.iter().collect(),
            ),
        };
        let mut launched = Vec::new();
        let mut reads = BTreeMap::new();
        for (name, d) in &hosts {
            let log = d.log();
            launched.extend(launches(name, &log, measured_from));
            reads_with_jobs(&log, measured_from, &mut reads);
            for (msg, n) in complaints(&log, measured_from) {
                *logs_complaints.entry(format!("{name}: {msg}")).or_default() += n;
            }
        }
        let mut f = figures(side, &queued, &launched, &taken, &ran_on, &reads);
        (f.registered, f.charged) = counted(&tokens);
        sides.push((side, f));
    }

    if let Some(path) = std::env::args().skip_while(|a| a != "--raw").nth(1) {
        let mut text = String::from(
            "side\ttarget\tjob\thost\tqueued_us\tread_end_ms\treserved_ms\tspawned_ms\tin_progress_ms\n",
        );
        for (_, f) in &sides {
            for line in &f.raw {
                text.push_str(line);
                text.push('\n');
            }
        }
        std::fs::write(&path, text).expect("write --raw");
    }
    println!();
    println!(
        "pool-bench: {jobs} jobs per side in {rounds} rounds, {n_targets} targets per side, jobs of {job_ms} ms queued one at a time every {gap_ms} ms + a random step of 0..{poll_ms} ms (seed {seed}), poll {poll_ms} ms, capacity (and per-target limit) {single_capacity} on the single host, {capacity} on each pool host, {latency_ms} ms per request at the fake"
    );
    println!(
        "services: {} (copied), {:.0} s in all ({pool_secs:.0} s of rounds); load average at start {load_at_start}, after the jobs {load_after_jobs}",
        built.display(),
        started.elapsed().as_secs_f64()
    );
    println!();
    let get = |side: Side| sides.iter().find(|(s, _)| *s == side).map(|(_, f)| f);
    let row = |what: &str, pick: &dyn Fn(&Figures) -> f64| {
        let s = get(Side::Single).map(pick);
        let p = get(Side::Pool).map(pick);
        let cell = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
        let diff = match (s, p) {
            (Some(s), Some(p)) => format!("{:+.0}", p - s),
            _ => "-".to_owned(),
        };
        println!("{what:<52} {:>12} {:>12} {:>10}", cell(s), cell(p), diff);
    };
    println!(
        "{:<52} {:>12} {:>12} {:>10}",
        "(ms)", "single host", "3-host pool", "pool − one"
    );
    row("queued -> runner spawned, p50", &|f| {
        percentile(&f.spawned, 50.0)
    });
    row("queued -> runner spawned, p99", &|f| {
        percentile(&f.spawned, 99.0)
    });
    {
        // The mean with its standard error: most of the spread is the wait for the next
        // poll (uniform over the cycle), the same on both sides.
        let stats = |v: &[f64]| {
            let n = v.len().max(1) as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
            (mean, var / n)
        };
        let s = get(Side::Single).map(|f| stats(&f.spawned));
        let p = get(Side::Pool).map(|f| stats(&f.spawned));
        let cell = |v: Option<(f64, f64)>| {
            v.map_or("-".to_owned(), |(m, se2)| {
                format!("{m:.0} ± {:.0}", se2.sqrt())
            })
        };
        let diff = match (s, p) {
            (Some((ms, s2)), Some((mp, p2))) => {
                format!("{:+.0} ± {:.0}", mp - ms, (s2 + p2).sqrt())
            }
            _ => "-".to_owned(),
        };
        println!(
            "{:<52} {:>12} {:>12} {:>10}",
            "queued -> runner spawned, mean ± std. error",
            cell(s),
            cell(p),
            diff
        );
    }
    row("queued -> job in_progress, p50", &|f| {
        percentile(&f.in_progress, 50.0)
    });
    row("queued -> job in_progress, p99", &|f| {
        percentile(&f.in_progress, 99.0)
    });
    println!("where it goes:");
    row("queued -> first read (any host) showing it, p50", &|f| {
        percentile(&f.known, 50.0)
    });
    row("that read -> runner spawned, p50", &|f| {
        percentile(&f.known_to_spawned, 50.0)
    });
    row("that read -> runner spawned, p99", &|f| {
        percentile(&f.known_to_spawned, 99.0)
    });
    row(
        "queued -> the launching host's read showing it, p50",
        &|f| percentile(&f.seen, 50.0),
    );
    row("that host's read -> attempt reserved, p50", &|f| {
        percentile(&f.seen_to_reserved, 50.0)
    });
    row("that host's read -> attempt reserved, p99", &|f| {
        percentile(&f.seen_to_reserved, 99.0)
    });
    row("reserve step (headroom, pool claim, journal), p50", &|f| {
        percentile(&f.reserve_step, 50.0)
    });
    row("reserve step, p99", &|f| percentile(&f.reserve_step, 99.0));
    row("attempt reserved -> runner spawned, p50", &|f| {
        percentile(&f.launch, 50.0)
    });
    row("  of which JIT registration, p50", &|f| {
        percentile(&f.jit, 50.0)
    });
    println!();
    for (side, f) in &sides {
        let surplus = f.registered as i64 - f.jobs as i64;
        println!(
            "{}: {} jobs served, {} runners launched, {} registered (JIT), surplus {surplus} = {:.1} per 1,000 jobs; {:.2} charged GitHub requests per job; {} jobs ran on the runner launched for them, {} unpaired{}",
            side.name(),
            f.jobs,
            f.launches,
            f.registered,
            surplus as f64 * 1000.0 / f.jobs.max(1) as f64,
            f.charged as f64 / f.jobs.max(1) as f64,
            f.own_runner,
            f.unpaired,
            if *side == Side::Pool {
                format!(
                    "; by the host that started the runner: {}",
                    f.spawned_by_host
                        .iter()
                        .map(|(h, v)| {
                            let v = sorted(v.clone());
                            let k = sorted(
                                f.known_to_spawned_by_host
                                    .get(h)
                                    .cloned()
                                    .unwrap_or_default(),
                            );
                            format!(
                                "{h} {} jobs, queued -> spawned p50 {:.0} ms (mean {:.0}), first read -> spawned p50 {:.0} ms (mean {:.0})",
                                v.len(),
                                percentile(&v, 50.0),
                                v.iter().sum::<f64>() / v.len().max(1) as f64,
                                percentile(&k, 50.0),
                                k.iter().sum::<f64>() / k.len().max(1) as f64
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(f) = get(Side::Pool) {
        let gross = total_calls(&pool_statements);
        let per_job = gross as f64 / f.jobs.max(1) as f64;
        let background = idle_per_min_host * POOL_HOSTS.len() as f64 * pool_secs / 60.0;
        let net = (gross as f64 - background) / f.jobs.max(1) as f64;
        println!();
        println!(
            "pool database: {gross} statements over {pool_secs:.0} s of rounds = {per_job:.1} per job served; less the idle rate over those seconds ({background:.0}): {net:.1} per job"
        );
        println!(
            "pool database, idle: {} statements over {idle_secs} s = {idle_per_min_host:.0} per minute per host ({} hosts, {n_targets} pooled targets each, poll {poll_ms} ms)",
            total_calls(&idle),
            POOL_HOSTS.len()
        );
        println!("statements of the rounds, per job served (mean execution time at the server):");
        let mut top: Vec<&Stmt> = pool_statements.values().filter(|s| s.calls > 0).collect();
        top.sort_by_key(|s| std::cmp::Reverse(s.calls));
        for s in top.iter().take(24) {
            println!(
                "  {:>7.2}  {:>7.3} ms  {}",
                s.calls as f64 / f.jobs.max(1) as f64,
                s.exec_ms / s.calls.max(1) as f64,
                s.text
            );
        }
        println!("statements while idle, per minute per host:");
        let mut top: Vec<&Stmt> = idle.values().filter(|s| s.calls > 0).collect();
        top.sort_by_key(|s| std::cmp::Reverse(s.calls));
        for s in top.iter().take(16) {
            println!(
                "  {:>7.1}  {}",
                s.calls as f64 / (idle_secs.max(1) as f64 / 60.0) / POOL_HOSTS.len() as f64,
                s.text
            );
        }
    }
    if !pool_hosts.is_empty() {
        let pg = Arc::clone(&pg);
        let readers = tokio::task::spawn_blocking(move || {
            pg.psql("SELECT string_agg(target || ' ' || reader, ', ' ORDER BY target) FROM rm_pool_targets")
        })
        .await
        .expect("psql task");
        println!("the pool's readers (target, host): {readers}");
    }
    println!();
    println!(
        "one idle pass (mean time between passes over the idle window less the poll interval):"
    );
    for (name, d) in &named {
        let passes = idle_pass_ms(&d.log(), idle_from, idle_to, poll_ms);
        println!(
            "  {name}: {}",
            passes
                .iter()
                .map(|(t, ms)| format!("{t} {ms:.0} ms"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!();
    if logs_complaints.is_empty() {
        println!("no warning or error in the services' logs during the measurement");
    } else {
        println!("warnings and errors in the services' logs during the measurement:");
        for (msg, n) in &logs_complaints {
            println!("  {n:>5} × {msg}");
        }
    }

    if let Some((d, _)) = single {
        let _ = d.stop().await;
    }
    for d in pool_hosts {
        let _ = d.stop().await;
    }
    let _ = tokio::task::spawn_blocking(move || drop(pg)).await;
}
