//! The meter's task: samples the runners' process trees while any lives, tells admission what
//! they may still grow to, and journals what a finished job used. The sampling itself is
//! `meters`' (`Meters::tick`); this is the part that reaches the rest of the service.

use crate::meters::{holders_of, live_of, Ended, Holder, PUBLISH_EVERY_TICKS, SAMPLE_EVERY};
use crate::state::Daemon;
use rm_core::Outcome;
use rm_runner::meter::MeterError;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tells admission what the attempts holding a slot are still expected to grow to.
fn publish_reserved(daemon: &Daemon, holding: &[Holder]) {
    let reserved = daemon
        .meters
        .reserved(holding, |policy| daemon.admission.expected(Some(policy)));
    daemon.admission.set_reserved(reserved);
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
            daemon.admission.set_typical(policy, peak);
            // The new figure is news for the watchers (the dashboard shows it per target).
            daemon.publish_status().await;
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
        let holding = holders_of(&attempts);
        if live.is_empty() && daemon.meters.followed() == 0 {
            // Attempts still registering hold memory-to-be: admission must see them while the
            // sampler sleeps (a runner event wakes it, and this is recomputed).
            publish_reserved(&daemon, &holding);
            daemon.meters.woken().await;
            continue;
        }
        let meters = Arc::clone(&daemon);
        let sampled =
            tokio::task::spawn_blocking(move || meters.meters.tick(&live, Instant::now())).await;
        match sampled {
            Ok(Ok(tick)) => {
                publish_reserved(&daemon, &holding);
                if !tick.gone_process.is_empty() {
                    tracing::info!(attempts = ?tick.gone_process, "a runner process is gone: waking the loops");
                    daemon.wake.notify_one();
                }
                for e in tick.ended {
                    record(&daemon, e).await;
                }
                ticks += 1;
                if ticks % PUBLISH_EVERY_TICKS == 1 || tick.first_sampled > 0 {
                    daemon.publish_status().await;
                }
            }
            Ok(Err(MeterError::Unsupported { what })) => {
                if daemon.meters.mark_unsupported() {
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
