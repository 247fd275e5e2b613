//! `runner-manager daemon run`: the service itself.
//!
//! Startup, in order: the data directory's [`InstanceLock`], the journal (and the host row),
//! the credential store of the start mode, the GitHub client (endpoints from flags, the data
//! directory's `config.json`, or github.com), the local API socket, then the loops
//! (`rm_adapters::Lifecycle`: startup recovery of every target before any launch). A host
//! without targets builds no runner host and sends nothing to GitHub: it holds the lock and
//! waits.
//!
//! Endings: SIGTERM/SIGINT stop launching and drain with a deadline (60 s by default; what is
//! left is adopted by the next start). A newer installed binary ([`UpgradeWatcher`]) stops
//! launching and waits **without** a deadline until the journal counts no active runner, then
//! exits non-zero so the service manager starts the new build; a signal during that wait wins.

mod api;
mod credential;
pub mod doctor;
mod events;
mod fleet;
mod gate;
pub(crate) mod host_row;
mod launch_health;
mod removals;
mod sign_in;
mod state;
mod status;

pub use api::MAX_CAPACITY;
pub use events::fix_for;

use crate::exit::{ExitCode, Failure};
use crate::lock::InstanceLock;
use crate::paths::{self, StartMode};
use crate::store::{self, ServiceStore};
use crate::upgrade::{Check, UpgradeWatcher};
use gate::{Gate, GatedJournal};
use rm_adapters::JournalAdapter;
use rm_agent::AgentConfig;
use rm_github::{ClientConfig, CredentialStore, Endpoints, GitHubClient, StoreError};
use rm_proto::{AccessPolicy, ServerLimits};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Which credential store the daemon uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// By start mode: boot → the machine store, login → the user's OS keyring.
    Auto,
    /// The root-only 0600 file `<data-dir>/credential.json` (tests, CI, headless hosts).
    File,
    /// The user's OS keyring.
    Keyring,
}

/// Everything `daemon run` is told.
#[derive(Debug, Clone)]
pub struct Options {
    pub data_dir: PathBuf,
    pub mode: StartMode,
    pub credential_store: StoreKind,
    pub api_base: Option<String>,
    pub web_base: Option<String>,
    pub client_id: Option<String>,
    pub socket: PathBuf,
    /// Uids allowed to change things besides root.
    pub operators: Vec<u32>,
    pub drain_deadline: Duration,
    pub upgrade_poll: Duration,
    /// A fixed poll interval (tests); `None`: GitHub's budget planner.
    pub poll: Option<Duration>,
    /// How often ended runners and target changes are looked for.
    pub tick: Duration,
    /// Renew the access token this long before it expires (default: the client's 5 min).
    pub renew_margin: Option<Duration>,
    pub registration_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub stop_grace: Option<Duration>,
    /// The launch back-off's first and longest wait (tests; default 15 s and 10 min).
    pub launch_backoff: Option<Duration>,
    pub launch_backoff_max: Option<Duration>,
}

/// GitHub endpoints kept in `<data-dir>/config.json` (GitHub Enterprise Server).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    api_base: Option<String>,
    web_base: Option<String>,
    client_id: Option<String>,
}

/// The name of the optional endpoints file in the data directory.
pub const CONFIG_FILE: &str = "config.json";

fn config_file(data_dir: &Path) -> Result<ConfigFile, Failure> {
    let path = data_dir.join(CONFIG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!(
                "{} is not valid (line {}, column {}): expected {{\"api_base\": \"https://HOST/api/v3\", \"web_base\": \"https://HOST\"}}",
                path.display(),
                e.line(),
                e.column()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(Failure::internal(format!("cannot read {}: {e}", path.display()))),
    }
}

/// `rm_github::CredentialStore` over the daemon's store (which can also delete).
struct StorePort(Arc<dyn ServiceStore>);

impl CredentialStore for StorePort {
    fn load(&self) -> Result<Option<rm_github::Credential>, StoreError> {
        self.0.load()
    }
    fn save(&self, credential: &rm_github::Credential) -> Result<(), StoreError> {
        self.0.save(credential)
    }
}

fn open_store(options: &Options) -> Result<Arc<dyn ServiceStore>, Failure> {
    let opened: Result<Box<dyn ServiceStore>, StoreError> = match options.credential_store {
        StoreKind::Auto => store::open_for_mode(options.mode, &options.data_dir),
        StoreKind::File => Ok(Box::new(store::FileStore::new(
            options.data_dir.join(paths::CREDENTIAL_FILE),
        ))),
        StoreKind::Keyring => store::open_for_mode(StartMode::Login, &options.data_dir),
    };
    opened.map(Arc::from).map_err(|e| {
        Failure::internal(format!(
            "the credential store cannot be used: {e}; choose another with `--credential-store file`"
        ))
    })
}

fn build_client(options: &Options, store: Arc<dyn ServiceStore>) -> Result<GitHubClient, Failure> {
    let file = config_file(&options.data_dir)?;
    let api = options.api_base.clone().or(file.api_base);
    let web = options.web_base.clone().or(file.web_base);
    let endpoints = match (web, api) {
        (None, None) => Endpoints::github_com(),
        (Some(w), Some(a)) => Endpoints::custom(&w, &a)
            .map_err(|e| Failure::usage(format!("{e}: fix `--web-base`/`--api-base`")))?,
        _ => {
            return Err(Failure::usage(
                "give both `--api-base` and `--web-base` (or both in config.json), or neither for github.com",
            ))
        }
    };
    let mut config = ClientConfig::new(endpoints);
    if let Some(id) = options.client_id.clone().or(file.client_id) {
        config.client_id = id;
    }
    if let Some(m) = options.renew_margin {
        config.renew_margin = m;
    }
    GitHubClient::new(config, Arc::new(StorePort(store))).map_err(|e| {
        Failure::internal(format!(
            "the GitHub client could not be built: {e}; if the stored credential is damaged, sign in again with `runner-manager auth login`"
        ))
    })
}

fn host_config(data_dir: &Path) -> Result<rm_runner::RunnerHostConfig, Failure> {
    if paths::is_privileged() {
        // Runners never run as root: a per-attempt uid in the runner account's group.
        rm_runner::ensure_runner_account(rm_runner::DEFAULT_RUNNER_ACCOUNT).map_err(|e| {
            Failure::internal(format!(
                "the runner account could not be prepared: {e}; create `{}` by hand or run `runner-manager service install`",
                rm_runner::DEFAULT_RUNNER_ACCOUNT
            ))
        })?;
    }
    Ok(doctor::host_settings(data_dir))
}

/// How the daemon ended.
enum Ending {
    Stopped,
    HandOver(String),
}

/// Runs the service until a stop signal or an upgrade hand-over.
pub fn run(options: Options) -> Result<(), Failure> {
    // Baseline the installed binary first: a replacement during startup is still noticed.
    let watcher = match UpgradeWatcher::for_current_exe() {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "upgrade detection disabled");
            None
        }
    };
    std::fs::create_dir_all(&options.data_dir).map_err(|e| {
        Failure::internal(format!(
            "cannot create the data directory {}: {e}; choose another with `--data-dir`",
            options.data_dir.display()
        ))
    })?;
    // Before anything else: a stop requested during startup must end in a clean exit.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Failure::internal(format!("cannot install a signal handler: {e}")))?;
    }
    let lock = InstanceLock::acquire(&options.data_dir)
        .map_err(|e| Failure::new(e.exit_code(), e.to_string()))?;
    tracing::info!(data_dir = %options.data_dir.display(), mode = %options.mode, pid = lock.holder().pid, "runner-manager started");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
    let ending = runtime.block_on(serve(options, watcher, stop));
    // Runner processes are not children we wait for; do not block on stray blocking tasks.
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    match ending? {
        Ending::Stopped => Ok(()),
        // Non-zero so `Restart=on-failure` starts the new binary.
        Ending::HandOver(version) => Err(Failure::new(
            ExitCode::Internal,
            format!("exiting to hand over to runner-manager {version}"),
        )),
    }
}

async fn serve(
    options: Options,
    mut watcher: Option<UpgradeWatcher>,
    stop: Arc<AtomicBool>,
) -> Result<Ending, Failure> {
    let mut journal = rm_journal::Journal::open(paths::journal_path(&options.data_dir))
        .map_err(|e| Failure::internal(format!("the journal cannot be opened: {e}")))?;
    let host = host_row::ensure_host(&mut journal).map_err(|e| Failure {
        message: format!("the host row cannot be written: {}", e.message),
        ..e
    })?;
    let paused = journal
        .meta_get(state::meta::PAUSED)
        .ok()
        .flatten()
        .is_some_and(|v| v == "1");
    let journal = JournalAdapter::new(journal);
    let store = open_store(&options)?;
    let client = build_client(&options, Arc::clone(&store))?;
    tracing::info!(store = %store.describe(), auth = ?client.auth_state(), api = %client.config().endpoints.api(), "GitHub client ready");

    let gate = Arc::new(Gate::default());
    gate.set_paused(paused);
    let wake = Arc::new(Notify::new());
    let removals = Arc::new(removals::Removals::load(&journal).await);
    let host_config = host_config(&options.data_dir)?;
    let daemon = Arc::new(state::Daemon::new(
        journal.clone(),
        client.clone(),
        Arc::clone(&store),
        Arc::clone(&gate),
        Arc::clone(&wake),
        Arc::clone(&removals),
        doctor::Doctor::new(host_config.clone()),
    ));
    daemon.launch.restore(&journal).await;
    // The host checks at start: `status` names an unfit host before anything is launched.
    let start_checks = tokio::spawn(doctor::run_at_start(Arc::clone(&daemon)));
    // Auth changes inside the client (a renewal GitHub refused) reach watchers within this;
    // `status` reads the client directly, so only the watch stream waits for it.
    let auth_watch = tokio::spawn(events::watch_auth(
        Arc::clone(&daemon),
        Duration::from_secs(5),
    ));

    // The local API.
    if let Some(parent) = options.socket.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            Failure::internal(format!(
                "cannot create the socket directory {}: {e}; choose another with `--socket`",
                parent.display()
            ))
        })?;
    }
    let listener = rm_proto::bind_socket(&options.socket, 0o666).map_err(|e| {
        Failure::internal(format!(
            "cannot listen on {}: {e}; choose another with `--socket`",
            options.socket.display()
        ))
    })?;
    let mut access = AccessPolicy::root_only().with_operators(options.operators.iter().copied());
    if !paths::is_privileged() {
        // A login service serves its own user.
        access = access.with_operator(nix::unistd::getuid().as_raw());
    }
    let sign_in = Arc::new(sign_in::SignIns::new(
        Arc::clone(&daemon),
        options.data_dir.join(CONFIG_FILE),
    ));
    let (api_stop_tx, mut api_stop_rx) = watch::channel(false);
    let api = tokio::spawn(rm_proto::serve_until(
        listener,
        api::Api {
            daemon: Arc::clone(&daemon),
            sign_in: Arc::clone(&sign_in),
        },
        access,
        ServerLimits::default(),
        async move {
            let _ = api_stop_rx.wait_for(|s| *s).await;
        },
    ));
    tracing::info!(socket = %options.socket.display(), host = %host.label, "local API listening");

    // The loops.
    let mut agent = AgentConfig {
        drain_deadline: Some(options.drain_deadline),
        drain_poll: Duration::from_millis(500),
        // GitHub's default runner labels (OS, arch) follow the host row, not this build.
        os: host.os,
        arch: host.arch,
        ..AgentConfig::default()
    };
    if let Some(t) = options.registration_timeout {
        agent.timeouts.registration = t;
    }
    if let Some(t) = options.idle_timeout {
        agent.timeouts.idle = t;
    }
    if let Some(t) = options.stop_grace {
        agent.stop_grace = t;
    }
    if let Some(first) = options.launch_backoff {
        agent.launch_backoff.first_delay = first;
    }
    if let Some(max) = options.launch_backoff_max {
        agent.launch_backoff.max_delay = max;
    }
    let (fleet_stop_tx, fleet_stop_rx) = watch::channel(false);
    let parts = fleet::FleetParts {
        journal: journal.clone(),
        gated: GatedJournal {
            inner: journal.clone(),
            gate: Arc::clone(&gate),
        },
        client: client.clone(),
        host_config,
        agent,
        poll: options.poll,
        tick: options.tick,
        wake,
        removals,
    };
    let fleet = Arc::new(fleet::build(parts));
    // Subscribed before the loops run: no event is missed.
    let pump = tokio::spawn(events::pump(
        Arc::clone(&daemon),
        fleet.shared().subscribe(),
    ));
    let fleet = tokio::spawn(async move { fleet.run(fleet_stop_rx).await });

    let ending = wait_for_ending(&options, &daemon, &gate, &mut watcher, &stop).await?;
    // No sign-in outlives the service (nor starts while it drains).
    sign_in.shutdown();
    if matches!(ending, Ending::Stopped) {
        tracing::info!(
            deadline_secs = options.drain_deadline.as_secs(),
            "stop requested: no new runners; draining"
        );
    }
    let _ = fleet_stop_tx.send(true);
    match fleet.await {
        Ok(reports) => {
            for (target, report) in reports {
                tracing::info!(gh_target = %target, remaining = report.remaining, timed_out = report.timed_out, "loop drained");
            }
        }
        Err(e) => tracing::error!(error = %e, "the loops failed"),
    }
    let _ = api_stop_tx.send(true);
    let _ = api.await;
    pump.abort();
    start_checks.abort();
    events::save_last_contact(&daemon).await;
    auth_watch.abort();
    let _ = std::fs::remove_file(&options.socket);
    tracing::info!("runner-manager stopped");
    Ok(ending)
}

/// Resolves once SIGTERM/SIGINT was received. The flag set by the handler installed before
/// the lock was taken covers a signal during startup; the streams, registered before the flag
/// is read, cover every later one without a timer waking the idle service.
async fn stop_signal(stop: Arc<AtomicBool>) -> Result<(), Failure> {
    use tokio::signal::unix::{signal, SignalKind};
    let stream = |kind| {
        signal(kind).map_err(|e| Failure::internal(format!("cannot install a signal handler: {e}")))
    };
    let mut term = stream(SignalKind::terminate())?;
    let mut int = stream(SignalKind::interrupt())?;
    if stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Waits for a stop signal or an upgrade; an upgrade drains here (no deadline, counting from
/// the journal) unless a signal arrives first.
async fn wait_for_ending(
    options: &Options,
    daemon: &Arc<state::Daemon>,
    gate: &Arc<Gate>,
    watcher: &mut Option<UpgradeWatcher>,
    stop: &Arc<AtomicBool>,
) -> Result<Ending, Failure> {
    let signal = stop_signal(Arc::clone(stop));
    tokio::pin!(signal);
    let version = loop {
        tokio::select! {
            r = &mut signal => { r?; return Ok(Ending::Stopped); }
            () = tokio::time::sleep(options.upgrade_poll) => {}
        }
        // One `stat` inline; only a changed file is run (`--version`) on a blocking thread, so
        // an idle service does not wake the blocking pool every poll.
        if !watcher.as_ref().is_some_and(UpgradeWatcher::looks_changed) {
            continue;
        }
        let Some(mut w) = watcher.take() else {
            continue;
        };
        let (w, check) = match tokio::task::spawn_blocking(move || {
            let c = w.poll();
            (w, c)
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "upgrade check failed; upgrade detection disabled");
                continue;
            }
        };
        *watcher = Some(w);
        match check {
            Check::Ready { version } => break version.to_string(),
            Check::NotRunnable { reason } => {
                tracing::debug!(%reason, "installed binary not runnable yet")
            }
            Check::SameVersion => {
                tracing::info!("binary rewritten with the same version: not an upgrade")
            }
            Check::Older { .. } | Check::Unchanged => {}
        }
    };
    tracing::info!(%version, "a newer runner-manager is installed: no new runners; waiting for the active ones (no deadline)");
    gate.set_upgrading();
    daemon.publish(rm_proto::WatchMessage::Event {
        event: rm_proto::Event::UpdateReady {
            at: rm_proto::UnixMillis(chrono::Utc::now().timestamp_millis()),
            current_version: crate::VERSION.to_string(),
            new_version: version.clone(),
        },
    });
    daemon.wake.notify_one();
    loop {
        let active = daemon.journal.with(|j| j.active_total()).await;
        match active {
            Ok(0) => break,
            Ok(n) => tracing::debug!(active = n, "upgrade waits for active runners"),
            Err(e) => tracing::warn!(error = %e, "active runners unreadable; waiting"),
        }
        tokio::select! {
            r = &mut signal => {
                r?;
                tracing::info!("stop requested during the upgrade drain: stopping with the deadline");
                return Ok(Ending::Stopped);
            }
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    tracing::info!(%version, "handing over to the newer runner-manager");
    Ok(Ending::HandOver(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(data_dir: &Path) -> Options {
        Options {
            data_dir: data_dir.to_path_buf(),
            mode: StartMode::Boot,
            credential_store: StoreKind::File,
            api_base: None,
            web_base: None,
            client_id: None,
            socket: data_dir.join("api.sock"),
            operators: Vec::new(),
            drain_deadline: Duration::from_secs(60),
            upgrade_poll: Duration::from_secs(5),
            poll: None,
            tick: Duration::from_secs(1),
            renew_margin: None,
            registration_timeout: None,
            idle_timeout: None,
            stop_grace: None,
            launch_backoff: None,
            launch_backoff_max: None,
        }
    }

    fn store(dir: &Path) -> Arc<dyn ServiceStore> {
        Arc::new(store::FileStore::new(dir.join(paths::CREDENTIAL_FILE)))
    }

    #[tokio::test]
    async fn endpoints_come_from_flags_then_config_json_then_github_com() {
        let dir = tempfile::tempdir().unwrap();
        let o = options(dir.path());
        let c = build_client(&o, store(dir.path())).unwrap();
        assert_eq!(c.config().endpoints, Endpoints::github_com());

        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"{"api_base": "https://ghe.example/api/v3", "web_base": "https://ghe.example", "client_id": "Iv1.ghes"}"#,
        )
        .unwrap();
        let c = build_client(&o, store(dir.path())).unwrap();
        assert_eq!(c.config().endpoints.api(), "https://ghe.example/api/v3");
        assert_eq!(c.config().client_id, "Iv1.ghes");

        let mut flags = options(dir.path());
        flags.api_base = Some("http://127.0.0.1:9/api".into());
        flags.web_base = Some("http://127.0.0.1:9".into());
        let c = build_client(&flags, store(dir.path())).unwrap();
        assert_eq!(c.config().endpoints.api(), "http://127.0.0.1:9/api");

        let mut half = options(dir.path());
        half.api_base = Some("http://127.0.0.1:9/api".into());
        std::fs::remove_file(dir.path().join(CONFIG_FILE)).unwrap();
        let e = build_client(&half, store(dir.path())).err().unwrap();
        assert_eq!(e.code, ExitCode::Usage);

        std::fs::write(dir.path().join(CONFIG_FILE), "{\"api_bse\": 1}").unwrap();
        let e = build_client(&o, store(dir.path())).err().unwrap();
        assert!(e.message.contains("config.json"), "{}", e.message);
    }
}
