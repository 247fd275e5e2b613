//! [`Engine`]: the running service, one method per use case (`use_cases`), and [`Tasks`]: its
//! own tasks, started together and stopped together. The binary composes them: it starts the
//! engine, binds the local API over it, starts the loops, waits for an ending, then drains the
//! loops and stops the tasks.

use crate::admission;
use crate::fleet::{self, FleetParts};
use crate::gate::{Gate, GatedJournal};
use crate::removals::Removals;
use crate::sign_in::SignIns;
use crate::state::{Daemon, Parts};
use rm_agent::AgentConfig;
use rm_core::PolicyId;
use rm_journal::PolicyAdmission;
use rm_runner::RunnerHostConfig;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// What the engine starts from besides its parts: what was read from the journal at start.
pub struct Start {
    pub parts: Parts,
    /// Launching paused by the operator (as stored).
    pub paused: bool,
    /// The targets' own admission settings.
    pub own_admission: Vec<(PolicyId, PolicyAdmission)>,
    /// The data directory's `config.json`, where a finished sign-in may record the client id.
    pub config_file: PathBuf,
    /// How often auth changes inside the GitHub client are looked for (for the watchers).
    pub auth_every: Duration,
}

/// How the loops run: the runner host's settings, the agent's, the poll and tick.
pub struct Loops {
    pub host_config: RunnerHostConfig,
    pub agent: AgentConfig,
    /// A fixed poll interval (tests); `None`: GitHub's budget planner.
    pub poll: Option<Duration>,
    pub tick: Duration,
}

/// The loops while they run: the event pump that feeds the state's owners and the lifecycle.
struct Running {
    stop: watch::Sender<bool>,
    lifecycle: JoinHandle<Vec<(rm_core::Target, rm_agent::DrainReport)>>,
    pump: JoinHandle<()>,
}

/// The running service, as the local API's handler reaches it (cheap to clone).
#[derive(Clone)]
pub struct Engine {
    pub(crate) daemon: Arc<Daemon>,
    pub(crate) sign_in: Arc<SignIns>,
}

/// The engine's tasks: its own (host checks at start, which end once run; auth and health
/// watch, meter, admission recheck, pool heartbeat and news, which run until
/// [`Tasks::stop`] aborts them all) and, once started, the loops.
pub struct Tasks {
    engine: Engine,
    tasks: JoinSet<()>,
    loops: Option<Running>,
}

impl Engine {
    /// Builds the state from `start`, restores what the journal kept (the pool link, the
    /// launch problems) and starts the engine's own tasks. The loops start with
    /// [`Tasks::run_loops`].
    pub async fn start(start: Start) -> (Engine, Tasks) {
        let gate = Arc::new(Gate::default());
        gate.set_paused(start.paused);
        let removals = Arc::new(Removals::load(&start.parts.journal).await);
        let daemon = Arc::new(Daemon::new(start.parts, gate, removals));
        daemon.pool.restore(&daemon.journal).await;
        for (policy, own) in start.own_admission {
            daemon.admission.set_own(policy, own);
        }
        daemon.launch.restore(&daemon.journal).await;
        let engine = Engine {
            sign_in: Arc::new(SignIns::new(Arc::clone(&daemon), start.config_file)),
            daemon,
        };
        let mut tasks = Tasks {
            engine: engine.clone(),
            tasks: JoinSet::new(),
            loops: None,
        };
        let d = || Arc::clone(&engine.daemon);
        // The host checks at start: `status` names an unfit host before anything is launched.
        let start_checks = doctor_at_start(d());
        // Auth changes inside the client (a renewal GitHub refused) reach watchers within
        // this; `status` reads the client directly, so only the watch stream waits for it.
        let auth = crate::auth_watch::watch_auth(d(), start.auth_every);
        // GitHub's health reaches watchers as it changes (the client signals it).
        let health = crate::health_watch::watch_health(d());
        // Live usage of the runners' process trees, sampled while any runs.
        let meter = crate::meter_task::run(d());
        // A start held back for memory is looked at again every 2 s until it fits.
        let recheck = admission_recheck(d());
        // This host's lease in its pool, and its news, while it is in one.
        let heartbeat = crate::pool_tasks::heartbeat(d());
        let news = crate::pool_tasks::news(d());
        tasks.spawn(start_checks);
        tasks.spawn(auth);
        tasks.spawn(health);
        tasks.spawn(meter);
        tasks.spawn(recheck);
        tasks.spawn(heartbeat);
        tasks.spawn(news);
        (engine, tasks)
    }

    /// Where the binary's own news go (the updater's): the watch stream.
    pub fn news(&self) -> tokio::sync::broadcast::Sender<rm_proto::WatchMessage> {
        self.daemon.watchers.sender()
    }

    /// Whether anyone watches (the tray).
    pub fn watched(&self) -> bool {
        self.daemon.watchers.any()
    }

    /// Tells the watchers of an event.
    pub fn tell(&self, event: rm_proto::Event) {
        self.daemon.watchers.event(event);
    }

    /// Stops launching for an upgrade (for good: the service ends once no runner is active)
    /// and lets the loops see it now.
    pub fn hold_for_upgrade(&self) {
        self.daemon.gate.set_upgrading();
        self.daemon.wake.notify_one();
    }

    /// How many runners the journal counts as active.
    pub async fn active_runners(&self) -> Result<u32, rm_agent::JournalError> {
        self.daemon.journal.with(|j| j.active_total()).await
    }
}

impl Tasks {
    fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Starts the loops: the lifecycle over the gated journal, and the event pump, subscribed
    /// before the loops run so that no event is missed.
    pub fn run_loops(&mut self, loops: Loops) {
        let d = &self.engine.daemon;
        let lifecycle = Arc::new(fleet::build(FleetParts {
            journal: d.journal.clone(),
            gated: GatedJournal::new(
                d.journal.clone(),
                Arc::clone(&d.gate),
                Arc::clone(&d.admission),
            ),
            client: d.client.clone(),
            host_config: loops.host_config,
            agent: loops.agent,
            poll: loops.poll,
            tick: loops.tick,
            wake: Arc::clone(&d.wake),
            removals: Arc::clone(&d.removals),
            pool: d.pool.slot.clone(),
        }));
        let _ = d.fleet.set(Arc::clone(&lifecycle));
        let pump = tokio::spawn(crate::events::pump(
            Arc::clone(d),
            lifecycle.shared().subscribe(),
        ));
        let (stop, stop_rx) = watch::channel(false);
        let lifecycle = tokio::spawn(async move { lifecycle.run(stop_rx).await });
        self.loops = Some(Running {
            stop,
            lifecycle,
            pump,
        });
    }

    /// Ends every sign-in (none outlives the service, nor starts while it drains), then
    /// drains the loops with the agent's deadline and logs each target's drain. The local API
    /// still answers meanwhile.
    pub async fn drain(&mut self) {
        self.engine.sign_in.shutdown();
        let Some(running) = self.loops.as_mut() else {
            return;
        };
        let _ = running.stop.send(true);
        match (&mut running.lifecycle).await {
            Ok(reports) => {
                for (target, report) in reports {
                    tracing::info!(gh_target = %target, remaining = report.remaining, timed_out = report.timed_out, "loop drained");
                }
            }
            Err(e) => tracing::error!(error = %e, "the loops failed"),
        }
    }

    /// Stops the event pump and every task of the engine together, then keeps the last
    /// contact with GitHub in the journal for the next start.
    pub async fn stop(mut self) {
        if let Some(running) = self.loops.take() {
            running.lifecycle.abort();
            running.pump.abort();
        }
        self.tasks.shutdown().await;
        let d = &self.engine.daemon;
        d.contact.save(&d.journal).await;
    }
}

/// While memory admission holds a start back, looks every 2 s whether a runner fits now and,
/// when it does, wakes the loops (they start it in that pass) and tells the watchers.
async fn admission_recheck(daemon: Arc<Daemon>) {
    loop {
        if !daemon.admission.holding() {
            daemon.admission.recheck.notified().await;
            // The hold is news for the watchers.
            daemon.publish_status().await;
        }
        tokio::time::sleep(admission::RECHECK_EVERY).await;
        if daemon.admission.fits_now().await {
            daemon.admission.released();
            daemon.wake.notify_one();
            daemon.publish_status().await;
        }
    }
}

/// The doctor at start: results for `status` before the first launch, a warning in the log
/// for each failed required check.
async fn doctor_at_start(daemon: Arc<Daemon>) {
    let report = daemon.doctor.run(&daemon.client, &daemon.journal).await;
    for c in report
        .checks
        .iter()
        .filter(|c| c.required && c.state == rm_proto::CheckState::Fail)
    {
        tracing::warn!(check = %c.id, detail = %c.detail, fix = ?c.fix, "host check failed");
    }
    daemon.publish_status().await;
}
