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

use rm_engine::{
    admission, doctor, host_row, operators, pool_link, sandbox, state, watchers, workstation,
    Engine, Loops, Stored,
};

pub use rm_engine::{fix_for, AdmissionConfig, QuietHours, Rules, MAX_CAPACITY};

use crate::exit::{ExitCode, Failure};
use crate::lock::InstanceLock;
use crate::paths::{self, StartMode};
use crate::store::{self, ServiceStore};
use crate::update::{self, stage::Staged, swap, UpdaterOptions};
use crate::upgrade::{Check, UpgradeWatcher};
use rm_adapters::JournalAdapter;
use rm_agent::AgentConfig;
use rm_github::{ClientConfig, CredentialStore, Endpoints, GitHubClient, StoreError};
use rm_proto::{AccessPolicy, ServerLimits, UpdateMode};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

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
    /// Members of this group may too ([`operators::OPERATORS_GROUP`] by default).
    pub operator_group: String,
    pub drain_deadline: Duration,
    pub upgrade_poll: Duration,
    /// A fixed poll interval (tests); `None`: GitHub's budget planner.
    pub poll: Option<Duration>,
    /// How often ended runners and target changes are looked for.
    pub tick: Duration,
    /// How long this host's heartbeat keeps its pool claims (a silent host's are placed
    /// elsewhere after it).
    pub pool_lease: Duration,
    /// Renew the access token this long before it expires (default: the client's 5 min).
    pub renew_margin: Option<Duration>,
    pub registration_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub stop_grace: Option<Duration>,
    /// The waits between DELETEs GitHub refuses for an ended runner (tests shorten them).
    pub removal_retry: Option<Vec<Duration>>,
    /// The updater: mode and feed (flags; else `config.json`; else auto, github.com).
    pub update_mode: Option<UpdateMode>,
    pub update_api_base: Option<String>,
    pub update_repo: Option<String>,
    /// A short check interval (tests and the update benchmark); also checks right at start.
    pub update_check_every: Option<Duration>,
    /// A test-only trusted key (refused by release builds).
    pub update_trust_key: Option<PathBuf>,
    /// The launch back-off's first and longest wait (tests; default 15 s and 10 min).
    pub launch_backoff: Option<Duration>,
    pub launch_backoff_max: Option<Duration>,
    /// Admission settings given as flags (`--memory-admission`, `--runner-memory-mb`,
    /// `--memory-headroom-mb`, `--on-battery`, `--max-load`, `--quiet-hours`, `--idle-only`):
    /// stored over the journal's at start. The rest stay as stored (else the defaults).
    pub admission: rm_proto::HostAdmissionChange,
    /// `--sandbox off`: the operator's explicit opt-out of the job sandbox (else config.json's
    /// `sandbox`, else on).
    pub sandbox_off: Option<bool>,
    /// A directory every job may write (the test suite's probes report through it).
    pub sandbox_test_share: Option<PathBuf>,
}

/// GitHub endpoints kept in `<data-dir>/config.json` (GitHub Enterprise Server).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    api_base: Option<String>,
    web_base: Option<String>,
    client_id: Option<String>,
    /// `auto` (default), `notify` or `off`.
    update: Option<UpdateMode>,
    /// The release feed's REST base (github.com's by default; a GHES mirror's `/api/v3`).
    update_api_base: Option<String>,
    /// The repository whose releases are runner-manager's (`owner/name`).
    update_repo: Option<String>,
    /// `"off"`: jobs run without the sandbox (the operator's explicit opt-out).
    sandbox: Option<String>,
}

/// The name of the optional endpoints file in the data directory.
pub const CONFIG_FILE: &str = "config.json";

fn config_file(data_dir: &Path) -> Result<ConfigFile, Failure> {
    let path = data_dir.join(CONFIG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!(
                "{} is not valid (line {}, column {}): expected {{\"api_base\": \"https://HOST/api/v3\", \"web_base\": \"https://HOST\", \"update\": \"auto|notify|off\"}}",
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

/// Where the pool's password is kept: beside the GitHub credential, in its own entry.
fn open_pool_secret(options: &Options) -> Result<Box<dyn rm_credstore::SecretStore>, Failure> {
    let file = options.data_dir.join(pool_link::SECRET_FILE);
    let login = matches!(options.credential_store, StoreKind::Keyring)
        || (matches!(options.credential_store, StoreKind::Auto)
            && matches!(options.mode, StartMode::Login));
    let opened: Result<Box<dyn rm_credstore::SecretStore>, rm_credstore::StoreError> = if login {
        rm_credstore::KeyringStore::user(pool_link::SECRET_ACCOUNT)
            .map(|s| Box::new(s) as Box<dyn rm_credstore::SecretStore>)
    } else if matches!(options.credential_store, StoreKind::File) {
        Ok(Box::new(rm_credstore::FileStore::new(file)))
    } else {
        rm_credstore::open_machine(&file)
    };
    opened.map_err(|e| {
        Failure::internal(format!(
            "the credential store cannot keep the pool's password: {e}; choose another with `--credential-store file`"
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
    Ok(paths::runner_host_config(data_dir))
}

/// How the daemon ended.
enum Ending {
    Stopped,
    HandOver(String),
    /// The updater's verified release: swap it in and restart in place.
    Update(Box<swap::Handover>),
}

/// The updater's settings: flags, else `config.json`, else the defaults.
fn updater_options(options: &Options) -> Result<UpdaterOptions, Failure> {
    let file = config_file(&options.data_dir)?;
    let mode = options.update_mode.or(file.update).unwrap_or_default();
    if mode == UpdateMode::Unknown {
        return Err(Failure::usage("`update` must be auto, notify or off"));
    }
    let api = options
        .update_api_base
        .clone()
        .or(file.update_api_base)
        .unwrap_or_else(|| update::feed::GITHUB_API.to_owned());
    let repo = options
        .update_repo
        .clone()
        .or(file.update_repo)
        .unwrap_or_else(|| update::feed::DEFAULT_REPO.to_owned());
    if repo.split('/').count() != 2 || repo.split('/').any(str::is_empty) {
        return Err(Failure::usage(format!(
            "the update repository {repo:?} is not `owner/name`: fix `--update-repo` or `update_repo` in config.json"
        )));
    }
    let mut o = UpdaterOptions::schedule(mode, api, repo);
    if let Some(every) = options.update_check_every {
        o.check_every = every;
        o.first_check = Duration::from_millis(100);
    }
    o.trust_key = options.update_trust_key.clone();
    Ok(o)
}

/// Runs the service until a stop signal or an upgrade hand-over.
pub fn run(options: Options) -> Result<(), Failure> {
    crate::paths::restrict_umask();
    // First of all, while it surely is the file this process runs (the updater's install
    // detection; a package manager may replace it any time later).
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| tracing::warn!(error = %e, "this program's own path is unreadable: updates only announced"))
        .ok();
    // Baseline the installed binary first: a replacement during startup is still noticed.
    let watcher = match UpgradeWatcher::for_current_exe() {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "upgrade detection disabled");
            None
        }
    };
    crate::paths::create_data_dir(&options.data_dir).map_err(|e| {
        Failure::internal(format!(
            "cannot create the data directory {}: {e}; choose another with `--data-dir`",
            options.data_dir.display()
        ))
    })?;
    // An earlier update: an interrupted swap is undone here (before anything else runs).
    let note = swap::on_start(&options.data_dir);
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
    let ending = runtime.block_on(serve(options, watcher, stop, note, exe));
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
        Ending::Update(h) => {
            // Returns only when the swap or the exec failed: the previous files are back, so
            // start the previous service in this process's place.
            let why = swap::swap_and_exec(&h);
            tracing::error!(reason = %why, "the update failed; starting runner-manager again");
            let e = swap::exec_service(&h.installed.exe(), &h.args);
            Err(Failure::internal(format!("{why}; {e}")))
        }
    }
}

async fn serve(
    options: Options,
    mut watcher: Option<UpgradeWatcher>,
    stop: Arc<AtomicBool>,
    note: swap::StartNote,
    exe: Option<PathBuf>,
) -> Result<Ending, Failure> {
    let update_options = updater_options(&options)?;
    let mut journal = rm_journal::Journal::open(paths::journal_path(&options.data_dir))
        .map_err(|e| Failure::internal(format!("the journal cannot be opened: {e}")))?;
    let host = host_row::ensure_host(&mut journal).map_err(|e| {
        let e = Failure::from(e);
        Failure {
            message: format!("the host row cannot be written: {}", e.message),
            ..e
        }
    })?;
    let stored = Stored::load(&mut journal);
    let admission_config = admission_settings(&mut journal, &options.admission)?;
    let journal = JournalAdapter::new(journal);
    let store = open_store(&options)?;
    let client = build_client(&options, Arc::clone(&store))?;
    tracing::info!(store = %store.describe(), auth = ?client.auth_state(), api = %client.config().endpoints.api(), "GitHub client ready");

    let mut host_config = host_config(&options.data_dir)?;
    host_config.env = stored.runner_env.clone();
    host_config.caches = stored.caches.clone();
    host_config.sandbox_choices = stored.sandboxes.clone();
    // Each job in a capped cgroup of its own where systemd delegated the service's; set up
    // now, so the doctor tells from the start.
    host_config.job_caps =
        rm_runner::sandbox::JobCaps::wanted(rm_runner::sandbox::CapLimits::for_this_host());
    host_config.job_caps.set_up();
    // Jobs' cache writes through layers of their own (set up with the runner host).
    host_config.cache_layers = rm_runner::caches::layers::CacheLayers::wanted();
    host_config.sandbox = {
        let file = config_file(&options.data_dir)?;
        let off = match (options.sandbox_off, file.sandbox.as_deref()) {
            (Some(off), _) => off,
            (None, None | Some("on")) => false,
            (None, Some("off")) => true,
            (None, Some(other)) => {
                return Err(Failure::usage(format!(
                    "`sandbox` in config.json is {other:?}: it must be \"on\" or \"off\""
                )))
            }
        };
        let endpoints = &client.config().endpoints;
        sandbox::sandbox_config(&sandbox::SandboxInputs {
            off,
            data_dir: &options.data_dir,
            socket: &options.socket,
            runner_root: &host_config.runner_root,
            cache_dir: &host_config.cache_dir,
            github: &[endpoints.web(), endpoints.api()],
            test_share: options.sandbox_test_share.clone(),
        })
    };
    if host_config.sandbox.is_off() {
        tracing::warn!("the job sandbox is turned off (--sandbox off): jobs can read this machine's files, processes and loopback services");
    }
    let (engine, mut tasks) = Engine::start(rm_engine::engine::Start {
        parts: state::Parts {
            journal: journal.clone(),
            client: client.clone(),
            store: Arc::clone(&store),
            doctor: doctor::Doctor::new(host_config.clone()),
            admission: Arc::new(admission::Admission::new(
                admission_config,
                admission::MemorySource::system(),
                workstation::Sources::system(),
            )),
            runner_env: stored.runner_env,
            caches: stored.caches,
            sandboxes: stored.sandboxes,
            job_caps: host_config.job_caps.clone(),
            pool: pool_link::PoolLink::new(open_pool_secret(&options)?, options.pool_lease),
        },
        paused: stored.paused,
        own_admission: stored.own_admission,
        config_file: options.data_dir.join(CONFIG_FILE),
        auth_every: Duration::from_secs(5),
    })
    .await;

    // The local API.
    // Operators (other users) must reach the socket: directories made for it are passable.
    if let Some(parent) = options.socket.parent() {
        rm_runner::passable_dirs::create(parent).map_err(|e| {
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
    if paths::is_privileged() {
        // Members of the operators group may operate a root service (read per request).
        let name = options.operator_group.clone();
        tracing::info!(group = %name, gid = ?operators::gid(&name).map(|g| g.as_raw()), "operators group");
        access = access.with_operator_group(Arc::new(operators::UnixGroup { name }));
    }
    if !paths::is_privileged() {
        // A login service serves its own user.
        access = access.with_operator(nix::unistd::getuid().as_raw());
    }
    // The updater (its checks start after the API is up). Its install is judged by the
    // binary's path as it was at start (the file may be replaced while the service runs).
    let installed = match exe {
        Some(exe) => tokio::task::spawn_blocking(move || update::install::detect(&exe))
            .await
            .map_err(|e| Failure::internal(format!("install detection failed: {e}")))?,
        None => update::install::Installed::Unmanaged {
            exe: PathBuf::new(),
            why: "this program's own path could not be read at start".into(),
        },
    };
    tracing::info!(
        install = installed.kind().as_str(),
        mode = update_options.mode.as_str(),
        "updater ready"
    );
    let (apply_tx, mut apply_rx) = mpsc::channel::<Staged>(1);
    let updater = Arc::new(update::Updater::new(
        update_options,
        options.data_dir.clone(),
        installed,
        &note,
        engine.news(),
        apply_tx,
    ));
    let (api_stop_tx, mut api_stop_rx) = watch::channel(false);
    let api = tokio::spawn(rm_proto::serve_until(
        listener,
        crate::api::Api {
            access: access.clone(),
            engine: engine.clone(),
            updater: Arc::clone(&updater),
        },
        access,
        ServerLimits::default(),
        async move {
            let _ = api_stop_rx.wait_for(|s| *s).await;
        },
    ));
    tracing::info!(socket = %options.socket.display(), host = %host.label, "local API listening");
    if let swap::StartNote::Trial(record) = &note {
        // The watchdog confirms the trial by asking our version; if it is gone (a reboot
        // during the trial), answering here is the proof.
        if !swap::watchdog_alive(record) {
            match swap::confirm(&options.data_dir) {
                Ok(_) => tracing::info!(from = %record.from, "update confirmed"),
                Err(e) => tracing::warn!(error = %e, "the update could not be confirmed"),
            }
        }
    }
    let update_task = tokio::spawn(Arc::clone(&updater).run());
    if let Some(previous) = match &note {
        swap::StartNote::Trial(r) => Some(r.from.clone()),
        swap::StartNote::Updated { from } => Some(from.clone()),
        _ => None,
    } {
        // "Updated to X" for the tray, which reconnects after the restart: sent once the
        // first watcher is there (within a minute), after its snapshot.
        let e = engine.clone();
        tokio::spawn(async move {
            for _ in 0..600 {
                if e.watched() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    e.tell(rm_proto::Event::UpdateFinished {
                        at: watchers::now(),
                        previous_version: previous,
                        new_version: crate::VERSION.to_owned(),
                    });
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

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
    if let Some(waits) = options.removal_retry.clone() {
        agent.removal_retry = waits;
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
    tasks.run_loops(Loops {
        host_config,
        agent,
        poll: options.poll,
        tick: options.tick,
    });

    let ending = wait_for_ending(&options, &engine, &mut watcher, &stop, &mut apply_rx).await?;
    update_task.abort();
    if matches!(ending, Ending::Stopped) {
        tracing::info!(
            deadline_secs = options.drain_deadline.as_secs(),
            "stop requested: no new runners; draining"
        );
    }
    tasks.drain().await;
    let _ = api_stop_tx.send(true);
    let _ = api.await;
    tasks.stop().await;
    let _ = std::fs::remove_file(&options.socket);
    tracing::info!("runner-manager stopped");
    Ok(match ending {
        Ending::Update(mut h) => {
            h.installed = updater.installed().clone();
            h.data_dir = options.data_dir.clone();
            h.socket = options.socket.clone();
            Ending::Update(h)
        }
        other => other,
    })
}

/// The admission settings in force at start: the journal's (the defaults before any were
/// stored), with the flags given on the command line applied and stored over them.
fn admission_settings(
    journal: &mut rm_journal::Journal,
    flags: &rm_proto::HostAdmissionChange,
) -> Result<admission::AdmissionConfig, Failure> {
    let stored = match journal.host_settings() {
        Ok(Some(s)) => admission::AdmissionConfig::from_stored(&s).map_err(|e| e.to_string()),
        Ok(None) => Ok(admission::AdmissionConfig::default()),
        Err(e) => Err(e.to_string()),
    };
    let current = stored.unwrap_or_else(|error| {
        // A damaged row must not keep the service from starting: the next change rewrites it.
        tracing::warn!(%error, "the stored admission settings are unreadable: using the defaults until `runner-manager host set-admission`/`set-rules` stores new ones");
        admission::AdmissionConfig::default()
    });
    if flags.is_empty() {
        return Ok(current);
    }
    let next = current
        .apply(flags)
        .map_err(|e| Failure::usage(format!("{e}: fix the `daemon run` flag")))?;
    journal
        .put_host_settings(&next.to_stored())
        .map_err(|e| Failure::internal(format!("the admission settings cannot be stored: {e}")))?;
    tracing::info!(settings = ?next.to_wire(), "admission settings from the command line stored");
    Ok(next)
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
    engine: &Engine,
    watcher: &mut Option<UpgradeWatcher>,
    stop: &Arc<AtomicBool>,
    apply: &mut mpsc::Receiver<Staged>,
) -> Result<Ending, Failure> {
    let signal = stop_signal(Arc::clone(stop));
    tokio::pin!(signal);
    let trigger = loop {
        tokio::select! {
            r = &mut signal => { r?; return Ok(Ending::Stopped); }
            Some(staged) = apply.recv() => break Err(staged),
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
            Check::Ready { version } => break Ok(version.to_string()),
            Check::NotRunnable { reason } => {
                tracing::debug!(%reason, "installed binary not runnable yet")
            }
            Check::SameVersion => {
                tracing::info!("binary rewritten with the same version: not an upgrade")
            }
            Check::Older { .. } | Check::Unchanged => {}
        }
    };
    let version = match &trigger {
        Ok(version) => {
            tracing::info!(%version, "a newer runner-manager is installed: no new runners; waiting for the active ones (no deadline)");
            engine.tell(rm_proto::Event::UpdateReady {
                at: watchers::now(),
                current_version: crate::VERSION.to_string(),
                new_version: version.clone(),
            });
            version.clone()
        }
        Err(staged) => {
            let version = staged.version().to_string();
            tracing::info!(%version, "applying the verified update: no new runners; waiting for the active ones (no deadline)");
            version
        }
    };
    engine.hold_for_upgrade();
    loop {
        let active = engine.active_runners().await;
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
    Ok(match trigger {
        Ok(version) => Ending::HandOver(version),
        Err(staged) => Ending::Update(Box::new(swap::Handover {
            staged,
            // Filled in by `serve`, which knows them.
            installed: update::install::Installed::Unmanaged {
                exe: PathBuf::new(),
                why: String::new(),
            },
            data_dir: PathBuf::new(),
            socket: PathBuf::new(),
            args: std::env::args().skip(1).collect(),
        })),
    })
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
            operator_group: operators::OPERATORS_GROUP.into(),
            drain_deadline: Duration::from_secs(60),
            upgrade_poll: Duration::from_secs(5),
            poll: None,
            tick: Duration::from_secs(1),
            pool_lease: Duration::from_secs(30),
            renew_margin: None,
            registration_timeout: None,
            idle_timeout: None,
            stop_grace: None,
            removal_retry: None,
            update_mode: None,
            update_api_base: None,
            update_repo: None,
            update_check_every: None,
            update_trust_key: None,
            launch_backoff: None,
            launch_backoff_max: None,
            admission: rm_proto::HostAdmissionChange::default(),
            sandbox_off: None,
            sandbox_test_share: None,
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
