//! `lifecycle-host`: runs the runner lifecycle of one host over the real adapters, for tests,
//! benchmarks and crash injection. TEST-ONLY: it reads the GitHub access token from the
//! environment (`RM_TEST_TOKEN`); the real service takes it from its credential store.
//!
//! It records the host and one policy per `--target` in the journal (if missing), prints the
//! routing label jobs must ask for (`routing-label: …`), runs startup recovery and the loops
//! until SIGTERM/SIGINT, then drains (60 s deadline by default).
//!
//! With `RM_FAILPOINT=<name>` (see `rm_agent::failpoint::FAILPOINTS`) the process aborts at that
//! boundary of a launch or a conclusion, as if SIGKILLed there.

use anyhow::{bail, Context};
use clap::Parser;
use rm_adapters::{
    spawn_target_loops, GitHubAdapter, GitHubPackageSource, HostAdapter, JournalAdapter,
    LifecycleConfig, PollPlan,
};
use rm_core::{
    Arch, Host, HostId, HostLabel, LabelSet, Os, PolicySpec, ProfileName, RoutingPrefix, Target,
};
use rm_github::{
    ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_journal::Journal;
use rm_runner::{Platform, RunAs, RunnerHost, RunnerHostConfig};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    about = "Hosts the runner lifecycle for tests and crash injection (token from RM_TEST_TOKEN)"
)]
struct Args {
    /// Journal, package cache and runner root live here.
    #[arg(long)]
    data_dir: PathBuf,
    /// REST base, e.g. http://127.0.0.1:PORT
    #[arg(long)]
    api_base: String,
    /// Web base (OAuth origin), e.g. http://127.0.0.1:PORT
    #[arg(long)]
    web_base: String,
    /// `owner/repo` or `org`; repeat for several targets.
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Policy max capacity per target.
    #[arg(long, default_value_t = 2)]
    max: u32,
    /// Host capacity over all policies.
    #[arg(long, default_value_t = 2)]
    host_capacity: u32,
    /// Host label (the routing label is `rm-<label>-<os>-<arch>`).
    #[arg(long, default_value = "test")]
    host_label: String,
    /// Fixed poll interval in ms (default: the budget planner).
    #[arg(long)]
    poll_ms: Option<u64>,
    /// How often the exit watcher inspects runner processes (while runners are live).
    #[arg(long, default_value_t = 1000)]
    exit_poll_ms: u64,
    /// How often the journal's targets are re-read (nothing wakes this host when they change).
    #[arg(long, default_value_t = 30_000)]
    target_sync_ms: u64,
    #[arg(long, default_value_t = 300)]
    registration_timeout_secs: u64,
    #[arg(long, default_value_t = 300)]
    idle_timeout_secs: u64,
    #[arg(long, default_value_t = 10_000)]
    stop_grace_ms: u64,
    #[arg(long, default_value_t = 60)]
    drain_deadline_secs: u64,
    /// Run runners as the service's own user (refused when root).
    #[arg(long)]
    service_user: bool,
}

fn host_row(args: &Args) -> anyhow::Result<Host> {
    Ok(Host {
        id: HostId::new(format!("host-{}", args.host_label)).context("host id")?,
        os: Os::from_std(std::env::consts::OS).context("unsupported OS")?,
        arch: Arch::from_std(std::env::consts::ARCH).context("unsupported architecture")?,
        label: HostLabel::from_machine_name(&args.host_label),
        capacity: args.host_capacity,
    })
}

/// Records the host and a policy per target (max capacity as given), idempotently.
fn seed_journal(journal: &mut Journal, args: &Args, targets: &[Target]) -> anyhow::Result<String> {
    let host = host_row(args)?;
    let runner_root = args.data_dir.join("runners");
    journal.put_host(&host, Some(&runner_root))?;
    let label = host.routing_label(&RoutingPrefix::default(), &ProfileName::default());
    let existing = journal.list_policies()?;
    for target in targets {
        match existing.iter().find(|p| p.target() == target) {
            Some(p) if p.max_capacity() == Some(args.max) => {}
            Some(p) => {
                let mut p = p.clone();
                p.set_capacity(Some(args.max), 0)?;
                journal.update_policy(&p)?;
            }
            None => {
                let mut spec = PolicySpec::new(target.clone(), LabelSet::new([label.clone()])?);
                spec.max_capacity = Some(args.max);
                journal.insert_policy(&spec)?;
            }
        }
    }
    Ok(label.as_str().to_string())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let token = std::env::var("RM_TEST_TOKEN")
        .context("set RM_TEST_TOKEN to the GitHub access token (test-only binary)")?;
    let targets = args
        .targets
        .iter()
        .map(|t| Target::parse(t).with_context(|| format!("--target {t}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;

    let mut journal = Journal::open(args.data_dir.join("journal.sqlite"))?;
    let label = seed_journal(&mut journal, &args, &targets)?;
    println!("routing-label: {label}");

    let endpoints = Endpoints::custom(&args.web_base, &args.api_base)?;
    let store =
        MemoryCredentialStore::new(Some(Credential::non_expiring(SecretString::from(token))));
    let client = GitHubClient::new(ClientConfig::new(endpoints), Arc::new(store))?;

    let run_as = if args.service_user {
        RunAs::ServiceUser
    } else {
        if nix::unistd::geteuid().is_root() {
            rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT)?;
        }
        RunAs::default_for_service()
    };
    let mut host_config =
        RunnerHostConfig::new(args.data_dir.join("cache"), args.data_dir.join("runners"));
    host_config.run_as = run_as;
    host_config.sandbox =
        rm_runner::sandbox::SandboxConfig::reaching(&[&args.web_base, &args.api_base]);
    let Some(first) = targets.first() else {
        bail!("give at least one --target");
    };
    let source = GitHubPackageSource::new(client.clone(), first.clone())?;
    let platform = Platform::current().context("no runner package exists for this platform")?;
    let host = Arc::new(HostAdapter::new(
        RunnerHost::open(host_config, source)?,
        platform,
    ));
    if let Err(e) = host.package().await {
        tracing::warn!(error = %e, "runner package not cached yet; launches will try again");
    }

    let poll = match args.poll_ms {
        Some(ms) => PollPlan::Fixed(Arc::new(Duration::from_millis(ms))),
        None => PollPlan::budget(client.clone()),
    };
    let mut config = LifecycleConfig::planned(poll);
    config.exit_poll = Duration::from_millis(args.exit_poll_ms);
    config.target_sync = Duration::from_millis(args.target_sync_ms);
    config.agent.timeouts.registration = Duration::from_secs(args.registration_timeout_secs);
    config.agent.timeouts.idle = Duration::from_secs(args.idle_timeout_secs);
    config.agent.stop_grace = Duration::from_millis(args.stop_grace_ms);
    config.agent.drain_deadline = Some(Duration::from_secs(args.drain_deadline_secs));

    let lifecycle = spawn_target_loops(
        JournalAdapter::new(journal),
        GitHubAdapter::new(client),
        host,
        config,
    )
    .await?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if let Err(e) = shutdown_signal().await {
            tracing::error!(error = %e, "signal handler failed");
        }
        tracing::info!("shutting down: draining");
        let _ = tx.send(true);
    });
    for (target, report) in lifecycle.run(rx).await {
        tracing::info!(gh_target = %target, remaining = report.remaining, timed_out = report.timed_out, "loop drained");
    }
    Ok(())
}
