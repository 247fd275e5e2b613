//! Live usage of each runner's process tree (the runner, its job and everything they started,
//! re-parented descendants included: `rm_runner::meter`). While any runner has a process the
//! meter samples every 2 s on a blocking thread, so a slow `/proc` never holds up a loop or
//! the API; one `/proc` read serves all of a tick's attempts. With no live runner it sleeps
//! until a runner event wakes it (nothing polls an idle service).
//!
//! `status` shows each runner's usage; the watch stream gets it at most every 10 s.

use super::state::Daemon;
use rm_core::{Attempt, AttemptId, AttemptState, Outcome, PolicyId, ProcessIdentity};
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
    id: AttemptId,
    policy: PolicyId,
    root: ProcessIdentity,
    tree: TreeState,
    meter: AttemptMeter,
    rss_now: u64,
    /// Seen busy (running a job) at some sample.
    ran_job: bool,
    /// Its runner process was seen gone while the journal still had it live (told once).
    told_gone: bool,
}

impl Entry {
    fn new(live: &Live, now: Instant) -> Entry {
        Entry {
            id: live.attempt.clone(),
            policy: live.policy,
            root: live.process,
            tree: TreeState::new(),
            meter: AttemptMeter::new(now),
            rss_now: 0,
            ran_job: false,
            told_gone: false,
        }
    }
}

/// An attempt the meter stopped following, with what it used.
#[derive(Debug, Clone)]
pub struct Ended {
    pub attempt: AttemptId,
    pub policy: PolicyId,
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
    pub attempt: AttemptId,
    pub policy: PolicyId,
    pub process: ProcessIdentity,
    pub busy: bool,
}

#[derive(Default)]
pub struct Meters {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Wakes the sampler (a runner event: a process may have started).
    wake: Notify,
    /// Each policy's typical peak (`rm_journal::Journal::typical_peak`), read at start and
    /// after each journalled attempt.
    typical: Mutex<BTreeMap<PolicyId, u64>>,
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

    /// What a runner of this policy typically peaks at (none before its first metered job).
    pub fn typical_peak(&self, policy: PolicyId) -> Option<u64> {
        self.typical
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&policy)
            .copied()
    }

    /// Records a policy's typical peak; answers the largest among all policies.
    fn set_typical(&self, policy: PolicyId, peak: Option<u64>) {
        let mut typical = self.typical.lock().unwrap_or_else(PoisonError::into_inner);
        match peak {
            Some(p) => typical.insert(policy, p),
            None => typical.remove(&policy),
        };
    }

    /// What the running runners are still expected to grow to: per runner, its target's
    /// typical peak less what it uses now (memory admission keeps that free).
    pub fn reserved(&self) -> u64 {
        let typical = self
            .typical
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.entries()
            .values()
            .map(|e| {
                typical
                    .get(&e.policy)
                    .map_or(0, |peak| peak.saturating_sub(e.rss_now))
            })
            .sum()
    }

    /// The usage shown for an attempt, once it has been sampled.
    pub fn usage(&self, attempt: &str) -> Option<RunnerUsage> {
        let entries = self.entries();
        let e = entries.get(attempt)?;
        let s = e.meter.summary();
        // A tree seen only before its first page was mapped (a process mid-exec) says nothing
        // yet: shown as not sampled rather than as 0 MiB.
        (s.samples > 0 && s.peak_rss_bytes > 0).then_some(RunnerUsage {
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
            .filter(|k| !live.iter().any(|l| l.attempt.to_string() == **k))
            .cloned()
            .collect();
        for attempt in gone {
            if let Some(e) = entries.remove(&attempt) {
                ended.push(Ended {
                    attempt: e.id,
                    policy: e.policy,
                    summary: e.meter.summary(),
                    ran_job: e.ran_job,
                });
            }
        }
        for l in live {
            let entry = entries
                .entry(l.attempt.to_string())
                .or_insert_with(|| Entry::new(l, now));
            // The same attempt with another process (a restart is not expected, but a
            // recycled identity must not mix two trees): start over.
            if entry.root != l.process {
                *entry = Entry::new(l, now);
            }
            let sample = sample_in(&snapshot, entry.root, &mut entry.tree);
            entry.meter.record(now, &sample);
            entry.rss_now = sample.rss_bytes();
            entry.ran_job |= l.busy;
            if !sample.contains(entry.root.pid) && !entry.told_gone {
                entry.told_gone = true;
                gone_process.push(l.attempt.to_string());
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
                attempt: a.id().clone(),
                policy: a.policy_id(),
                process: a.process()?,
                busy: a.state() == AttemptState::Busy,
            })
        })
        .collect()
}

/// Journals what an attempt that ran a job used (its policy's peaks drive admission); a
/// runner that failed before any job is not a job's usage.
async fn record(daemon: &Daemon, e: Ended) {
    let id = e.attempt.clone();
    let outcome = daemon
        .journal
        .with(move |j| j.get_attempt(&id))
        .await
        .ok()
        .flatten()
        .and_then(|a| a.outcome());
    let ran_job = e.ran_job || outcome == Some(Outcome::CompletedJob);
    let s = &e.summary;
    tracing::info!(
        attempt = %e.attempt,
        ran_job,
        peak_rss_bytes = s.peak_rss_bytes,
        cpu_ms = s.cpu.as_millis(),
        average_millicores = s.average_millicores,
        busiest_millicores = s.busiest_millicores,
        "runner usage"
    );
    if !ran_job || s.samples == 0 {
        return;
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let usage = rm_journal::AttemptUsage {
        attempt_id: e.attempt.clone(),
        policy_id: e.policy,
        ended_at_ms: rm_proto::UnixMillis::now().0,
        wall_ms: ms(s.wall),
        cpu_ms: ms(s.cpu),
        peak_rss_bytes: s.peak_rss_bytes,
        average_millicores: s.average_millicores,
        busiest_millicores: s.busiest_millicores,
    };
    let policy = e.policy;
    let recorded = daemon
        .journal
        .with(move |j| {
            j.record_usage(&usage)?;
            j.typical_peak(policy)
        })
        .await;
    match recorded {
        Ok(peak) => {
            daemon.meters.set_typical(policy, peak);
            daemon.admission.set_typical(policy, peak);
        }
        Err(error) => {
            tracing::warn!(%error, attempt = %e.attempt, "the runner's usage was not journalled");
        }
    }
}

/// Each policy's typical peak from the journal (at start).
async fn load_typical(daemon: &Daemon) {
    let read = daemon
        .journal
        .with(|j| {
            let mut out = Vec::new();
            for p in j.list_policies()? {
                out.push((p.id(), j.typical_peak(p.id())?));
            }
            Ok(out)
        })
        .await;
    match read {
        Ok(peaks) => {
            for (policy, peak) in peaks {
                daemon.meters.set_typical(policy, peak);
                daemon.admission.set_typical(policy, peak);
            }
        }
        Err(error) => tracing::warn!(%error, "the runners' typical peaks could not be read"),
    }
}

/// Samples while runners live; sleeps until woken otherwise. Runs until aborted.
pub async fn run(daemon: Arc<Daemon>) {
    load_typical(&daemon).await;
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
                daemon.admission.set_reserved(daemon.meters.reserved());
                if !tick.gone_process.is_empty() {
                    tracing::info!(attempts = ?tick.gone_process, "a runner process is gone: waking the loops");
                    daemon.wake.notify_one();
                }
                for e in tick.ended {
                    record(&daemon, e).await;
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
