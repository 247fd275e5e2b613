//! CPU time of reconcile passes with 100 targets and 50 live runners: the real journal
//! adapter (SQLite, fsync per write) and the real agent, with in-memory GitHub and runner host
//! ports that answer at once (so only this host's own work is measured: supervision of every
//! attempt, demand matching, allocation, journal reads).
//!
//! `cargo run --release -p rm-adapters --example reconcile-bench -- [--rounds N]`

use rm_adapters::JournalAdapter;
use rm_agent::{
    AgentConfig, DeleteOutcome, DemandSnapshot, GhError, GitHubPort, HostError, HostShared, Jit,
    JitSecret, JournalPort, Ports, RunnerHostPort, RunnerStatus, RunnerView, ScrubError,
    SystemClock, TargetLoop,
};
use rm_core::{
    Arch, Attempt, AttemptId, Evidence, Host, HostId, HostLabel, LabelSet, Observed, Os,
    PolicySpec, ProcessIdentity, Target, Timestamp,
};
use rm_journal::Journal;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TARGETS: usize = 100;
const LIVE: usize = 50;

/// GitHub: no queued job; each target's inventory lists its busy runners.
struct QuietGitHub {
    inventory: HashMap<Target, Vec<RunnerView>>,
}

impl GitHubPort for QuietGitHub {
    async fn queued_jobs(&self, _: &Target) -> Result<DemandSnapshot, GhError> {
        Ok(DemandSnapshot::default())
    }
    async fn generate_jit(
        &self,
        _: &Target,
        _: &str,
        _: &LabelSet,
        _: Option<&Path>,
    ) -> Result<Jit, GhError> {
        Err(GhError::Invalid {
            detail: "the bench starts nothing".into(),
        })
    }
    async fn runner_by_name(&self, t: &Target, name: &str) -> Result<Option<RunnerView>, GhError> {
        Ok(self
            .inventory
            .get(t)
            .and_then(|v| v.iter().find(|r| r.name == name).cloned()))
    }
    async fn runners(&self, t: &Target) -> Result<Vec<RunnerView>, GhError> {
        Ok(self.inventory.get(t).cloned().unwrap_or_default())
    }
    async fn delete_runner(&self, _: &Target, _: u64) -> Result<DeleteOutcome, GhError> {
        Ok(DeleteOutcome::Deleted)
    }
}

/// The machine: every journalled runner is alive.
struct AliveHost;

impl RunnerHostPort for AliveHost {
    fn runtime_dir(&self, attempt: &AttemptId) -> PathBuf {
        PathBuf::from("/nonexistent/runners").join(attempt.as_str())
    }
    async fn materialize(&self, a: &AttemptId) -> Result<PathBuf, HostError> {
        Ok(self.runtime_dir(a))
    }
    async fn write_sidecar(&self, _: &AttemptId, _: u64) -> Result<(), HostError> {
        Ok(())
    }
    async fn read_sidecar(&self, _: &AttemptId) -> Result<Option<u64>, HostError> {
        Ok(None)
    }
    async fn spawn(
        &self,
        _: &Path,
        _: JitSecret,
        _: &rm_agent::SpawnFor,
    ) -> Result<ProcessIdentity, HostError> {
        Err(HostError::SpawnFailed {
            detail: "bench".into(),
        })
    }
    async fn inspect(&self, _: ProcessIdentity) -> Result<bool, HostError> {
        Ok(true)
    }
    async fn find_process(&self, _: &Path) -> Result<Option<ProcessIdentity>, HostError> {
        Ok(None)
    }
    async fn stop(&self, _: ProcessIdentity, _: Duration) -> Result<(), HostError> {
        Ok(())
    }
    async fn evidence(&self, _: &Path) -> Evidence {
        Evidence::None
    }
    async fn scrub(
        &self,
        _: &Path,
        _: bool,
        _: Option<rm_core::JobTrust>,
    ) -> Result<(), ScrubError> {
        Ok(())
    }
}

/// User + system CPU time of this process (all threads, the blocking pool included).
fn process_cpu() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow::anyhow!("bad /proc/self/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the state field.
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok(Duration::from_millis(ticks * 10)) // USER_HZ = 100 on Linux
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: u32 = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse())
        .transpose()?
        .unwrap_or(30);

    let dir = tempfile::tempdir()?;
    let mut journal = Journal::open(dir.path().join("journal.sqlite"))?;
    journal.put_host(
        &Host {
            id: HostId::new("bench")?,
            os: Os::Linux,
            arch: Arch::X64,
            label: HostLabel::from_machine_name("bench"),
            capacity: LIVE as u32,
        },
        None,
    )?;
    let label = LabelSet::parse(["rm-bench-linux-x64"])?;
    let now = Timestamp::from_millis(i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?);
    let mut targets = Vec::new();
    let mut inventory: HashMap<Target, Vec<RunnerView>> = HashMap::new();
    for i in 0..TARGETS {
        let target = Target::parse(&format!("octo/repo{i}"))?;
        let mut spec = PolicySpec::new(target.clone(), label.clone());
        spec.max_capacity = Some(1);
        let mut policy = journal.insert_policy(&spec)?;
        policy.transition_to(rm_core::PolicyState::Active)?;
        let policy = journal.update_policy(&policy)?;
        if i < LIVE {
            // One busy runner each for the first 50 targets.
            let mut a = Attempt::allocate(
                AttemptId::new(format!("benchattempt{i:04}"))?,
                policy.id(),
                now,
            );
            journal.insert_attempt(&a)?;
            let prev = a.clone();
            a.record_jit(1000 + i as u64, now)?;
            a.record_started(
                ProcessIdentity {
                    pid: 100_000 + i as u32,
                    start_time: 1,
                },
                now,
            )?;
            a.observe(Observed::Busy, now)?;
            journal.update_attempt(&prev, &a)?;
            inventory
                .entry(target.clone())
                .or_default()
                .push(RunnerView {
                    id: 1000 + i as u64,
                    name: a.runner_name().to_string(),
                    busy: true,
                    status: RunnerStatus::Online,
                });
        }
        targets.push(target);
    }

    let journal = JournalAdapter::new(journal);
    let github = Arc::new(QuietGitHub { inventory });
    let host = Arc::new(AliveHost);
    let shared = HostShared::new(2);
    let loops: Vec<_> = targets
        .into_iter()
        .map(|t| {
            TargetLoop::new(
                t,
                Ports {
                    journal: journal.clone(),
                    github: Arc::clone(&github),
                    host: Arc::clone(&host),
                    clock: SystemClock,
                },
                shared.clone(),
                AgentConfig::default(),
                Arc::new(Duration::from_secs(60)),
            )
        })
        .collect();
    for lp in &loops {
        lp.recover().await;
    }
    // Warm-up round, then the measured rounds (all 100 loops' passes run concurrently, as the
    // daemon's loops would when they wake together).
    futures_util::future::join_all(loops.iter().map(|lp| lp.pass())).await;
    let (cpu0, wall0) = (process_cpu()?, Instant::now());
    let mut live = 0;
    for _ in 0..rounds {
        let reports = futures_util::future::join_all(loops.iter().map(|lp| lp.pass())).await;
        live = reports.iter().map(|r| r.active_owned).sum::<u32>();
    }
    let (cpu, wall) = (process_cpu()? - cpu0, wall0.elapsed());
    anyhow::ensure!(
        live as usize == LIVE,
        "expected {LIVE} live runners, saw {live}"
    );
    println!("reconcile: {TARGETS} targets, {live} live (busy) runners, {rounds} rounds, real SQLite journal, instant fake GitHub/host ports");
    println!(
        "  CPU per round (all {TARGETS} passes): {:.1} ms   per target pass: {:.3} ms   wall per round: {:.1} ms",
        cpu.as_secs_f64() * 1000.0 / f64::from(rounds),
        cpu.as_secs_f64() * 1000.0 / f64::from(rounds) / TARGETS as f64,
        wall.as_secs_f64() * 1000.0 / f64::from(rounds),
    );
    // Where the journal part of that goes: each call once per target, as a pass makes them.
    let targets: Vec<Target> = loops.iter().map(|lp| lp.target().clone()).collect();
    let c0 = process_cpu()?;
    for _ in 0..rounds {
        for t in &targets {
            journal.policies(t).await?;
        }
    }
    let c1 = process_cpu()?;
    let own: Vec<Vec<rm_core::PolicyId>> = loops
        .iter()
        .map(|lp| lp.policies().iter().map(|p| p.id()).collect())
        .collect();
    for _ in 0..rounds {
        for ids in &own {
            journal.uncleaned_attempts_of(ids).await?;
        }
    }
    let c2 = process_cpu()?;
    for _ in 0..rounds {
        for _ in &targets {
            journal.active_counts().await?;
        }
    }
    let c3 = process_cpu()?;
    let per_round = |d: Duration| d.as_secs_f64() * 1000.0 / f64::from(rounds);
    println!(
        "  of which, per round of {TARGETS}: policies(target) {:.1} ms, uncleaned_attempts_of(its policies) {:.1} ms, active_counts {:.1} ms (read once per pass)",
        per_round(c1 - c0),
        per_round(c2 - c1),
        per_round(c3 - c2),
    );
    Ok(())
}
