//! The daemon's shared parts: the infrastructure every handler needs (journal, GitHub client,
//! credential store, launch gate, the loops' waker, pending removals) and the parts that own a
//! piece of state, each behind its own small API: the watch stream's fan-out, the failure log,
//! the demand view, the last GitHub contact, the launch problems and the host checks. The API
//! handler asks; the event pump feeds the owners; the status projection reads them.

use super::admission::Admission;
use super::contact::Contact;
use super::demand_view::DemandView;
use super::doctor::Doctor;
use super::failure_log::FailureLog;
use super::gate::Gate;
use super::launch_health::LaunchProblems;
use super::meters::Meters;
use super::removals::Removals;
use super::watchers::Watchers;
use crate::service_store::ServiceStore;
use rm_adapters::JournalAdapter;
use rm_github::GitHubClient;
use std::sync::Arc;
use tokio::sync::Notify;

pub use crate::meta;

/// What the binary builds the engine from (`Engine::start` adds the gate, the waker and the
/// pending removals).
pub struct Parts {
    pub journal: JournalAdapter,
    pub client: GitHubClient,
    pub store: Arc<dyn ServiceStore>,
    pub doctor: Doctor,
    pub admission: Arc<Admission>,
    /// The host's runner environment as stored (shared with the runner host).
    pub runner_env: rm_runner::RunnerEnv,
    /// The caches' settings as stored (shared with the runner host, which adds the caches).
    pub caches: rm_runner::CacheSettings,
    /// The targets' sandbox choices as stored (shared with the runner host).
    pub sandboxes: rm_runner::sandbox::TargetChoices,
    /// The jobs' cgroups (shared with the runner host, which sets them up).
    pub job_caps: rm_runner::sandbox::JobCaps,
    /// The pool of hosts (none joined yet: see `PoolLink::restore`).
    pub pool: super::pool_link::PoolLink,
}

pub struct Daemon {
    pub journal: JournalAdapter,
    pub client: GitHubClient,
    pub store: Arc<dyn ServiceStore>,
    /// Launching paused by the operator, or held for an upgrade.
    pub gate: Arc<Gate>,
    /// Tells the loops to re-read the journal now (after an API change).
    pub wake: Arc<Notify>,
    /// Targets being removed (their runners still finishing).
    pub removals: Arc<Removals>,
    /// The watch stream's readers.
    pub watchers: Watchers,
    /// Recent runner failures with their fixes.
    pub failures: FailureLog,
    /// Registrations GitHub would not delete yet (see `left_registrations`).
    pub left_registrations: super::left_registrations::LeftRegistrations,
    /// Queued jobs per policy, from the demand polls.
    pub demand: DemandView,
    /// The last pass that reached GitHub.
    pub contact: Contact,
    /// Why targets are not launching (back-off, repair, refusals).
    pub launch: LaunchProblems,
    /// The host checks' last results.
    pub doctor: Doctor,
    /// Live usage of the runners' process trees.
    pub meters: Meters,
    /// Whether memory lets new runners start.
    pub admission: Arc<Admission>,
    /// Launching paused by the operator (its owner: the journal's flag and the gate).
    pub paused: super::settings::Paused,
    /// The host's runner environment, given to each runner at its spawn (the runner host
    /// holds a clone of its handle: a change reaches the next runner without a restart).
    pub runner_env: super::settings::HostEnv,
    /// The caches' settings (shared with the runner host) and, once it exists, the caches.
    pub caches: rm_runner::CacheSettings,
    /// The host's own cache settings' owner (over a clone of `caches`).
    pub host_caches: super::settings::HostCaches,
    /// The targets' sandbox choices (shared with the runner host).
    pub sandboxes: rm_runner::sandbox::TargetChoices,
    /// The loops, once they run (`why` reads their last passes).
    pub fleet: std::sync::OnceLock<Arc<super::fleet::Fleet>>,
    /// The pool of hosts this host joined, if any.
    pub pool: super::pool_link::PoolLink,
}

impl Daemon {
    pub fn new(parts: Parts, gate: Arc<Gate>, removals: Arc<Removals>) -> Daemon {
        Daemon {
            demand: DemandView::new(&parts.client),
            journal: parts.journal,
            client: parts.client,
            store: parts.store,
            paused: super::settings::Paused::new(Arc::clone(&gate)),
            gate,
            wake: Arc::new(Notify::new()),
            removals,
            watchers: Watchers::default(),
            failures: FailureLog::default(),
            left_registrations: Default::default(),
            contact: Contact::default(),
            launch: LaunchProblems::default(),
            doctor: parts.doctor,
            meters: Meters::counting_cgroups(parts.job_caps),
            admission: parts.admission,
            runner_env: super::settings::HostEnv::new(parts.runner_env),
            host_caches: super::settings::HostCaches::new(parts.caches.clone()),
            caches: parts.caches,
            sandboxes: parts.sandboxes,
            fleet: std::sync::OnceLock::new(),
            pool: parts.pool,
        }
    }
}
