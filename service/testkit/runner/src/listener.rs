//! The listener's life after configuration: connect (session), long-poll for the one job,
//! run it with the requested behaviour, complete it and clean up — or leave on a signal or
//! when the registration disappears. Returns the process exit code (GITHUB.md §6.3).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::broker::{Behaviour, Broker, BrokerError, Job, JobResult};
use crate::config::{self, RunnerConfig};
use crate::diag::{console_time, say, DiagLog};
use crate::step::{self, StepContext, StepOutcome};

pub const EXIT_OK: i32 = 0;
pub const EXIT_TERMINATED: i32 = 1;
pub const EXIT_SESSION_CONFLICT: i32 = 5;

const RETRY_EVERY: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(50);
/// How long a stopping listener waits for its in-flight long poll (the server holds it for
/// `poll_hold`, 2 s by default).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What the polling thread tells the main thread.
enum Event {
    Job(Job),
    ConnectError(String),
    Reconnected,
    Finished(BrokerError),
    /// The poller saw the stop flag and sends no more polls.
    Stopped,
}

pub struct Listener {
    pub root: PathBuf,
    pub config: RunnerConfig,
    pub version: String,
    pub log: DiagLog,
    /// Set by SIGTERM/SIGINT.
    pub stop: Arc<AtomicBool>,
}

impl Listener {
    pub fn run(mut self) -> i32 {
        let broker = Arc::new(Broker::new(
            &self.config.settings.server_url,
            &self.config.token,
        ));
        let session = match self.connect(&broker) {
            Ok(Some(session)) => session,
            Ok(None) => return EXIT_OK,
            Err(code) => return code,
        };
        say("");
        say("√ Connected to GitHub");
        say("");
        say(&format!("Current runner version: '{}'", self.version));
        say(&format!("{}: Listening for Jobs", console_time()));
        self.log.info("Listening for jobs");

        let session = Arc::new(Mutex::new(session));
        let (tx, rx) = mpsc::channel();
        {
            let broker = Arc::clone(&broker);
            let session = Arc::clone(&session);
            let runner_id = self.config.settings.agent_id;
            let stop = Arc::clone(&self.stop);
            std::thread::spawn(move || poll_until_job(&broker, &session, runner_id, &stop, &tx));
        }
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return self.stop_idle(&broker, &session, &rx);
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Job(job)) => return self.run_job(&broker, &job),
                Ok(Event::ConnectError(e)) => {
                    self.log.error(&format!("Runner connect error: {e}"));
                    say(&format!(
                        "{}: Runner connect error: {e}. Retrying until reconnected.",
                        console_time()
                    ));
                }
                Ok(Event::Reconnected) => {
                    self.log.info("Runner reconnected");
                    say(&format!("{}: Runner reconnected.", console_time()));
                }
                Ok(Event::Finished(e)) => return self.fatal(&e),
                Ok(Event::Stopped) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return EXIT_TERMINATED,
            }
        }
    }

    /// Signal while idle: let the in-flight long poll end (the server would otherwise re-attach
    /// the session it holds), then delete the session and exit 0. A job handed over in that
    /// window is completed as cancelled, as the real runner cancels a job on Ctrl-C.
    fn stop_idle(
        &mut self,
        broker: &Broker,
        session: &Mutex<String>,
        rx: &mpsc::Receiver<Event>,
    ) -> i32 {
        self.log
            .info("Signal received while idle: ending the poll and deleting the session");
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Event::Job(job)) => return self.run_job(broker, &job),
                Ok(Event::ConnectError(_) | Event::Reconnected) => continue,
                Ok(Event::Stopped | Event::Finished(_)) | Err(_) => break,
            }
        }
        let id = session.lock().map(|s| s.clone()).unwrap_or_default();
        if let Err(e) = broker.delete_session(&id) {
            self.log.error(&format!("Deleting the session failed: {e}"));
        }
        say("Exiting runner...");
        EXIT_OK
    }

    /// Creates the broker session, retrying while the server is unreachable.
    /// `Ok(None)`: stopped by a signal before connecting.
    fn connect(&mut self, broker: &Broker) -> Result<Option<String>, i32> {
        let settings = &self.config.settings;
        self.log.info(&format!(
            "Connecting: runner_id={} name={} pool_id={} server={}",
            settings.agent_id, settings.agent_name, settings.pool_id, settings.server_url
        ));
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            match broker.create_session(settings.agent_id, os_name()) {
                Ok(session) => {
                    self.log.info(&format!("Session created: {session}"));
                    return Ok(Some(session));
                }
                Err(e @ (BrokerError::Connect(_) | BrokerError::Unexpected { .. })) => {
                    self.log.error(&format!("Runner connect error: {e}"));
                    say(&format!(
                        "{}: Runner connect error: {e}. Retrying until reconnected.",
                        console_time()
                    ));
                    self.sleep_unless_stopped(Some(RETRY_EVERY));
                }
                Err(e) => return Err(self.fatal(&e)),
            }
        }
    }

    /// Prints the server's reason and picks the exit code for a non-retryable broker answer.
    fn fatal(&mut self, e: &BrokerError) -> i32 {
        self.log.error(&e.to_string());
        match e {
            BrokerError::SessionConflict => {
                say("A session for this runner already exists.");
                EXIT_SESSION_CONFLICT
            }
            BrokerError::RunnerGone => {
                say(&format!(
                    "{}: The runner no longer exists on the server. Please reconfigure the runner.",
                    console_time()
                ));
                EXIT_TERMINATED
            }
            other => {
                say(&format!("{}: {other}", console_time()));
                EXIT_TERMINATED
            }
        }
    }

    fn run_job(&mut self, broker: &Broker, job: &Job) -> i32 {
        let mut worker = match DiagLog::open(&self.root, "Worker", "Worker") {
            Ok(w) => Some(w),
            Err(e) => {
                self.log.error(&format!("Cannot open the worker log: {e}"));
                None
            }
        };
        if let Some(w) = &worker {
            self.log
                .info(&format!("Worker log: {}", w.path().display()));
        }
        let mut wlog = |msg: &str| {
            if let Some(w) = worker.as_mut() {
                w.info(msg);
            }
        };
        wlog(&format!(
            "Job message received: job_id={} run_id={} name={} behaviour={:?} duration_ms={} step={}",
            job.job_id,
            job.run_id,
            job.name,
            job.behaviour,
            job.duration_ms,
            job.command.is_some()
        ));
        self.log
            .info(&format!("Running job: {} (id {})", job.name, job.job_id));
        say(&format!(
            "{}: Running job: {}",
            console_time(),
            job.display_name
        ));
        let work_dir = self.work_dir();
        if let Err(e) = std::fs::create_dir_all(&work_dir) {
            wlog(&format!("Cannot create {}: {e}", work_dir.display()));
        }

        // The job's memory, held by child processes while it works (a tree to meter).
        let holders = match crate::memory::Holders::start(job.memory_mb, job.memory_children) {
            Ok(h) => {
                if h.count() > 0 {
                    wlog(&format!(
                        "Holding {} MiB in {} child process(es)",
                        job.memory_mb,
                        h.count()
                    ));
                }
                Some(h)
            }
            Err(e) => {
                wlog(&format!("Cannot start the memory holders: {e}"));
                None
            }
        };
        // The job's step runs first, then the behaviour's duration.
        let step = job.command.as_deref().map(|command| {
            let temp = self.work_base().join("_temp");
            if let Err(e) = std::fs::create_dir_all(&temp) {
                wlog(&format!("Cannot create {}: {e}", temp.display()));
            }
            let ctx = StepContext {
                job_name: job.name.clone(),
                run_id: job.run_id,
                workspace: work_dir.clone(),
                temp,
            };
            let outcome = step::run(command, &ctx, &self.stop, &mut wlog);
            wlog(&format!("Step result: {outcome:?}"));
            outcome
        });
        let result = match job.behaviour {
            _ if step == Some(StepOutcome::Cancelled) => Some(JobResult::Cancelled),
            Behaviour::Crash => {
                wlog("Simulated crash: exiting without completing the job");
                self.log.error("Simulated crash mid-job");
                std::process::exit(EXIT_TERMINATED);
            }
            Behaviour::Hang => self.sleep_unless_stopped(None),
            Behaviour::Succeed => self
                .sleep_unless_stopped(Some(Duration::from_millis(job.duration_ms)))
                .or(Some(JobResult::Succeeded)),
            Behaviour::Fail => self
                .sleep_unless_stopped(Some(Duration::from_millis(job.duration_ms)))
                .or(Some(JobResult::Failed)),
        }
        .unwrap_or(JobResult::Cancelled);
        // A failed step fails the job, whatever the behaviour said (a stop still cancels it).
        let result = match (step, result) {
            (Some(StepOutcome::Failed), JobResult::Succeeded) => JobResult::Failed,
            _ => result,
        };
        drop(holders);

        let completed = self.complete(broker, job.job_id, result);
        wlog(&format!("Job completed with result: {}", result.console()));
        say(&format!(
            "{}: Job {} completed with result: {}",
            console_time(),
            job.name,
            result.console()
        ));
        let removed = config::remove_files(&self.root);
        for name in [".credentials", ".runner"] {
            if removed.contains(&name) {
                say(&format!("√ Removed {name}"));
            }
        }
        self.log
            .info(&format!("Removed local configuration files: {removed:?}"));
        say("Exiting runner...");
        if completed {
            EXIT_OK
        } else {
            EXIT_TERMINATED
        }
    }

    /// Reports the result, retrying while the server is unreachable (bounded: ~30 s).
    fn complete(&mut self, broker: &Broker, job_id: u64, result: JobResult) -> bool {
        for _ in 0..30 {
            match broker.complete(job_id, result) {
                Ok(()) => return true,
                Err(BrokerError::Connect(e)) => {
                    self.log
                        .error(&format!("Completing the job: {e}; retrying"));
                    std::thread::sleep(RETRY_EVERY);
                }
                Err(e) => {
                    self.log.error(&format!("Completing the job failed: {e}"));
                    return false;
                }
            }
        }
        false
    }

    /// Sleeps for `duration` (forever if `None`); returns `Some(Cancelled)` if a signal came first.
    fn sleep_unless_stopped(&self, duration: Option<Duration>) -> Option<JobResult> {
        let deadline = duration.map(|d| Instant::now() + d);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return Some(JobResult::Cancelled);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return None,
                },
                None => TICK,
            };
            std::thread::sleep(left.min(TICK));
        }
    }

    /// `<root>/<WorkFolder>` (or the WorkFolder itself when absolute).
    fn work_base(&self) -> PathBuf {
        let settings = &self.config.settings;
        if Path::new(&settings.work_folder).is_absolute() {
            PathBuf::from(&settings.work_folder)
        } else {
            self.root.join(&settings.work_folder)
        }
    }

    /// `<root>/<WorkFolder>/<repo>/<repo>`, as the real runner lays out a checkout.
    fn work_dir(&self) -> PathBuf {
        let settings = &self.config.settings;
        let base = self.work_base();
        let repo = settings
            .github_url
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|s| !s.is_empty() && *s != ".." && *s != ".")
            .unwrap_or("work")
            .to_owned();
        base.join(&repo).join(&repo)
    }
}

/// Long-polls until a job or a final answer arrives; re-creates a dropped session unless the
/// listener is stopping (then the session was deleted on purpose).
fn poll_until_job(
    broker: &Broker,
    session: &Mutex<String>,
    runner_id: u64,
    stop: &AtomicBool,
    tx: &mpsc::Sender<Event>,
) {
    let mut failing = false;
    loop {
        if stop.load(Ordering::SeqCst) {
            let _ = tx.send(Event::Stopped);
            return;
        }
        let id = match session.lock() {
            Ok(s) => s.clone(),
            Err(_) => return,
        };
        let outcome = match broker.poll(&id) {
            Err(BrokerError::SessionLost) => match broker.create_session(runner_id, os_name()) {
                Ok(new_id) => {
                    if let Ok(mut s) = session.lock() {
                        *s = new_id;
                    }
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            other => other,
        };
        match outcome {
            Ok(None) => {
                if failing {
                    failing = false;
                    if tx.send(Event::Reconnected).is_err() {
                        return;
                    }
                }
            }
            Ok(Some(job)) => {
                let _ = tx.send(Event::Job(job));
                return;
            }
            Err(e @ (BrokerError::Connect(_) | BrokerError::Unexpected { .. })) => {
                failing = true;
                if tx.send(Event::ConnectError(e.to_string())).is_err() {
                    return;
                }
                std::thread::sleep(RETRY_EVERY);
            }
            Err(e) => {
                let _ = tx.send(Event::Finished(e));
                return;
            }
        }
    }
}

/// The `os` the runner reports when connecting, in GitHub's spelling.
fn os_name() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "macOS",
        "windows" => "Windows",
        other => other,
    }
}
