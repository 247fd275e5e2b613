//! `runner-manager daemon run`, as far as this build goes: take the data directory's lock,
//! open the journal and the credential store, watch for an upgrade, and wait for a stop
//! signal. The agent loops and the local API server are wired in here next.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exit::{ExitCode, Failure};
use crate::lock::InstanceLock;
use crate::paths::{self, StartMode};
use crate::store;
use crate::upgrade::{Check, UpgradeWatcher};

const TICK: Duration = Duration::from_millis(50);

pub(super) fn run(data_dir: &Path, mode: StartMode, upgrade_poll: Duration) -> Result<(), Failure> {
    init_logging();
    // Baseline the installed binary first: a replacement during startup is still noticed.
    let mut watcher = match UpgradeWatcher::for_current_exe() {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "upgrade detection disabled");
            None
        }
    };
    std::fs::create_dir_all(data_dir).map_err(|e| {
        Failure::internal(format!(
            "cannot create the data directory {}: {e}; choose another with `--data-dir`",
            data_dir.display()
        ))
    })?;
    let lock =
        InstanceLock::acquire(data_dir).map_err(|e| Failure::new(e.exit_code(), e.to_string()))?;
    tracing::info!(data_dir = %data_dir.display(), mode = %mode, pid = lock.holder().pid, "runner-manager started");
    let journal = rm_journal::Journal::open(paths::journal_path(data_dir))
        .map_err(super::backend::journal_failure)?;

    match store::open_for_mode(mode, data_dir).and_then(|s| s.load().map(|c| (s.describe(), c))) {
        Ok((place, Some(_))) => tracing::info!(store = %place, "credential found"),
        Ok((place, None)) => {
            tracing::warn!(store = %place, "no credential: sign in with `runner-manager auth login`")
        }
        Err(e) => tracing::error!(error = %e, "credential store unusable"),
    }
    tracing::warn!(
        "agent loops and the local API are not wired into this build: no runners are started"
    );

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Failure::internal(format!("cannot install a signal handler: {e}")))?;
    }
    let mut next_poll = Instant::now() + upgrade_poll;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        if Instant::now() < next_poll {
            continue;
        }
        next_poll = Instant::now() + upgrade_poll;
        if let Some(w) = watcher.as_mut() {
            match w.poll() {
                Check::Ready { version } => {
                    tracing::info!(%version, "handing over to the newer runner-manager");
                    drop(journal);
                    drop(lock);
                    // Non-zero so `Restart=on-failure` starts the new binary.
                    return Err(Failure::new(
                        ExitCode::Internal,
                        format!("exiting to hand over to runner-manager {version}"),
                    ));
                }
                Check::NotRunnable { reason } => {
                    tracing::debug!(%reason, "installed binary not runnable yet")
                }
                Check::SameVersion => {
                    tracing::info!("binary rewritten with the same version: not an upgrade")
                }
                Check::Older { .. } | Check::Unchanged => {}
            }
        }
    }
    tracing::info!("stop signal received; exiting");
    drop(journal);
    drop(lock);
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // journald and log files get plain text; colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
