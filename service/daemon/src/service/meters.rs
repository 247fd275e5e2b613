//! Live usage of each runner's process tree (the runner, its job and everything they started,
//! re-parented descendants included: `rm_runner::meter`). While any runner has a process the
//! meter samples every 2 s on a blocking thread, so a slow `/proc` never holds up a loop or
//! the API; one `/proc` read serves all of a tick's attempts. With no live runner it sleeps
//! until a runner event wakes it (nothing polls an idle service).
//!
//! `status` shows each runner's usage; the watch stream gets it at most every 10 s.

use super::state::Daemon;
use rm_core::{Attempt, AttemptState, Outcome, ProcessIdentity};
use rm_proto::RunnerUsage;
use rm_runner::meter::{sample_in, AttemptMeter, MeterError, MeterSummary, Snapshot, TreeState};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How often live runners are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Every how many samples the watch stream hears of the new figures.
const PUBLISH_EVERY_TICKS: u64 = 5;

/// One metered attempt.
struct Entry {
    root: ProcessIdentity,
    tree: TreeState,
    meter: AttemptMeter,
    rss_now: u64,
    /// Seen busy (running a job) at some sample.
    ran_job: bool,
    /// Its runner process was seen gone while the journal still had it live (told once).
    told_gone: bool,
}

/// An attempt the meter stopped following, with what it used.
#[derive(Debug, Clone)]
pub struct Ended {
    pub attempt: String,
    pub summary: MeterSummary,
    /// It ran a job (busy at a sample, or concluded with a completed job).
    pub ran_job: bool,
}

/// What a tick found.
#[derive(Debug, Default)]
pub struct Tick {
    /// Attempts no longer live: what they used.
    pub ended: Vec<Ended>,
    /// Live attempts whose runner process is gone (each told once): their loops should look
    /// now rather than at their next poll, so the slot is freed within seconds.
    pub gone_process: Vec<String>,
}

/// A live attempt as a tick sees it.
#[derive(Debug, Clone)]
pub struct Live {
    pub attempt: String,
    pub process: ProcessIdentity,
    pub busy: bool,
}

#[derive(Default)]
pub struct Meters {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Wakes the sampler (a runner event: a process may have started).
    wake: Notify,
    /// `true` once the platform cannot meter (logged once, then the sampler stops).
    unsupported: std::sync::atomic::AtomicBool,
}

impl Meters {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A runner event happened: a runner may have started.
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// The usage shown for an attempt, once it has been sampled.
    pub fn usage(&self, attempt: &str) -> Option<RunnerUsage> {
        let entries = self.entries();
        let e = entries.get(attempt)?;
        let s = e.meter.summary();
        (s.samples > 0).then_some(RunnerUsage {
            rss_bytes: e.rss_now,
            peak_rss_bytes: s.peak_rss_bytes,
            cpu_ms: u64::try_from(s.cpu.as_millis()).unwrap_or(u64::MAX),
            average_millicores: s.average_millicores,
            busiest_millicores: s.busiest_millicores,
        })
    }

    /// One sample of every live attempt from one snapshot; the attempts no longer live end.
    /// Blocking (reads `/proc`).
    pub fn tick(&self, live: &[Live], now: Instant) -> Result<Tick, MeterError> {
        let snapshot = Snapshot::read()?;
        let mut entries = self.entries();
        let mut ended = Vec::new();
        let mut gone_process = Vec::new();
        let gone: Vec<String> = entries
            .keys()
            .filter(|k| !live.iter().any(|l| &l.attempt == *k))
            .cloned()
            .collect();
        for attempt in gone {
            if let Some(e) = entries.remove(&attempt) {
                ended.push(Ended {
                    attempt,
                    summary: e.meter.summary(),
                    ran_job: e.ran_job,
                });
            }
        }
        for l in live {
            let entry = entries.entry(l.attempt.clone()).or_insert_with(|| Entry {
                root: l.process,
                tree: TreeState::new(),
                meter: AttemptMeter::new(now),
                rss_now: 0,
                ran_job: false,
                told_gone: false,
            });
            // The same attempt with another process (a restart is not expected, but a
            // recycled identity must not mix two trees): start over.
            if entry.root != l.process {
                *entry = Entry {
                    root: l.process,
                    tree: TreeState::new(),
                    meter: AttemptMeter::new(now),
                    rss_now: 0,
                    ran_job: false,
                    told_gone: false,
                };
            }
            let sample = sample_in(&snapshot, entry.root, &mut entry.tree);
            entry.meter.record(now, &sample);
            entry.rss_now = sample.rss_bytes();
            entry.ran_job |= l.busy;
            if !sample.contains(entry.root.pid) && !entry.told_gone {
                entry.told_gone = true;
                gone_process.push(l.attempt.clone());
            }
        }
        Ok(Tick {
            ended,
            gone_process,
        })
    }

    /// How many attempts are followed now.
    pub fn followed(&self) -> usize {
        self.entries().len()
    }
}

/// The attempts with a runner process now.
fn live_of(attempts: &[Attempt]) -> Vec<Live> {
    attempts
        .iter()
        .filter(|a| a.state().has_process())
        .filter_map(|a| {
            Some(Live {
                attempt: a.id().to_string(),
                process: a.process()?,
                busy: a.state() == AttemptState::Busy,
            })
        })
        .collect()
}

/// Samples while runners live; sleeps until woken otherwise. Runs until aborted.
pub async fn run(daemon: Arc<Daemon>) {
    let mut ticks: u64 = 0;
    loop {
        let attempts = match daemon.journal.with(|j| j.uncleaned_attempts()).await {
            Ok(a) => a,
            Err(error) => {
                tracing::warn!(%error, "the meter could not read the journal");
                Vec::new()
            }
        };
        let live = live_of(&attempts);
        if live.is_empty() && daemon.meters.followed() == 0 {
            daemon.meters.wake.notified().await;
            continue;
        }
        let meters = Arc::clone(&daemon);
        let sampled =
            tokio::task::spawn_blocking(move || meters.meters.tick(&live, Instant::now())).await;
        match sampled {
            Ok(Ok(tick)) => {
                if !tick.gone_process.is_empty() {
                    tracing::info!(attempts = ?tick.gone_process, "a runner process is gone: waking the loops");
                    daemon.wake.notify_one();
                }
                for e in &tick.ended {
                    let completed = attempts
                        .iter()
                        .find(|a| a.id().to_string() == e.attempt)
                        .and_then(Attempt::outcome)
                        == Some(Outcome::CompletedJob);
                    tracing::info!(
                        attempt = %e.attempt,
                        ran_job = e.ran_job || completed,
                        peak_rss_bytes = e.summary.peak_rss_bytes,
                        cpu_ms = e.summary.cpu.as_millis(),
                        average_millicores = e.summary.average_millicores,
                        busiest_millicores = e.summary.busiest_millicores,
                        "runner usage"
                    );
                }
                ticks += 1;
                if ticks % PUBLISH_EVERY_TICKS == 1 {
                    daemon.publish_status().await;
                }
            }
            Ok(Err(MeterError::Unsupported { what })) => {
                if !daemon
                    .meters
                    .unsupported
                    .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    tracing::info!(what, "runners are not metered on this system");
                }
                return;
            }
            Ok(Err(error)) => tracing::warn!(%error, "a meter sample failed"),
            Err(error) => tracing::warn!(%error, "the meter's sample did not finish"),
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}
