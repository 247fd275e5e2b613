//! Live usage of each runner's process tree (the runner, its job and everything they started,
//! re-parented descendants included: `rm_runner::meter`). While any runner has a process the
//! meter samples every 2 s on a blocking thread, so a slow `/proc` never holds up a loop or
//! the API; one `/proc` read serves all of a tick's attempts. With no live runner it sleeps
//! until a runner event wakes it (nothing polls an idle service).
//!
//! `status` shows each runner's usage; the watch stream gets it at most every 10 s.

use rm_core::{Attempt, AttemptId, AttemptState, PolicyId, ProcessIdentity};
use rm_proto::RunnerUsage;
use rm_runner::meter::{sample_in, AttemptMeter, MeterError, MeterSummary, Snapshot, TreeState};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How often live runners are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Every how many samples the watch stream hears of the new figures.
pub(crate) const PUBLISH_EVERY_TICKS: u64 = 5;

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
    /// Attempts sampled for the first time: their usage is published at once, not at the
    /// next periodic publication (a short job would otherwise end unseen).
    pub first_sampled: usize,
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
    /// `true` once the platform cannot meter (logged once, then the sampler stops).
    unsupported: std::sync::atomic::AtomicBool,
    /// Where jobs run in cgroups of their own, each attempt's cgroup counts too.
    cgroups: rm_runner::sandbox::JobCaps,
}

impl Meters {
    /// Meters that also read each attempt's cgroup, where `cgroups` set them up.
    pub fn counting_cgroups(cgroups: rm_runner::sandbox::JobCaps) -> Meters {
        Meters {
            cgroups,
            ..Meters::default()
        }
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A runner event happened: a runner may have started.
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// What the attempts holding a slot are still expected to grow to: per attempt, the peak
    /// a new runner of its target would be expected to reach (`expected`: admission's own rule,
    /// so both sides agree) less what it uses now. An attempt without a sample yet (no process
    /// yet, or one started since the last tick) uses nothing so far: its whole expectation
    /// counts, else a burst of starts would each see the memory as still free.
    pub fn reserved(&self, holding: &[Holder], expected: impl Fn(PolicyId) -> u64) -> u64 {
        let now: Vec<(PolicyId, u64)> = {
            let entries = self.entries();
            holding
                .iter()
                .map(|h| {
                    let rss = entries.get(h.attempt.as_str()).map_or(0, |e| e.rss_now);
                    (h.policy, rss)
                })
                .collect()
        };
        now.into_iter()
            .map(|(policy, rss)| expected(policy).saturating_sub(rss))
            .fold(0, u64::saturating_add)
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
        let cgroups = self.cgroups.cgroups();
        let mut entries = self.entries();
        let mut ended = Vec::new();
        let mut gone_process = Vec::new();
        let mut first_sampled = 0;
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
            if !entries.contains_key(&l.attempt.to_string()) {
                first_sampled += 1;
            }
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
            if let Some(used) = cgroups
                .as_ref()
                .and_then(|c| c.usage(rm_runner::RuntimeName::for_attempt(&l.attempt).as_str()))
            {
                entry.meter.record_cgroup(used.cpu, used.peak_memory);
            }
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
            first_sampled,
        })
    }

    /// How many attempts are followed now.
    /// Waits for `poke` (the sampler sleeps while no runner lives).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Notes that this platform cannot meter; true the first time (to log it once).
    pub(crate) fn mark_unsupported(&self) -> bool {
        !self
            .unsupported
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    pub fn followed(&self) -> usize {
        self.entries().len()
    }
}

/// An attempt holding a runner slot (not concluded), as `Meters::reserved` counts it.
#[derive(Debug, Clone)]
pub struct Holder {
    pub attempt: AttemptId,
    pub policy: PolicyId,
}

/// The attempts that hold a runner slot now, process or not.
pub(crate) fn holders_of(attempts: &[Attempt]) -> Vec<Holder> {
    attempts
        .iter()
        .filter(|a| a.counts_against_capacity())
        .map(|a| Holder {
            attempt: a.id().clone(),
            policy: a.policy_id(),
        })
        .collect()
}

/// The attempts with a runner process now.
pub(crate) fn live_of(attempts: &[Attempt]) -> Vec<Live> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rm_core::Outcome;

    const MIB: u64 = 1 << 20;

    fn holder(id: &str, policy: i64) -> Holder {
        Holder {
            attempt: AttemptId::new(id).expect("a valid test id"),
            policy: PolicyId::new(policy),
        }
    }

    /// Follows `h` as if a tick had sampled it using `rss` bytes.
    fn sampled(meters: &Meters, h: &Holder, rss: u64) {
        let live = Live {
            attempt: h.attempt.clone(),
            policy: h.policy,
            process: ProcessIdentity {
                pid: 4242,
                start_time: 1,
            },
            busy: true,
        };
        let mut entry = Entry::new(&live, Instant::now());
        entry.rss_now = rss;
        meters.entries().insert(h.attempt.to_string(), entry);
    }

    #[test]
    fn reserved_counts_what_each_holder_may_still_grow_to() {
        let meters = Meters::default();
        let with_history = holder("aaaaaaaa", 1);
        let without = holder("bbbbbbbb", 2);
        let over = holder("cccccccc", 1);
        sampled(&meters, &with_history, 300 * MIB);
        sampled(&meters, &without, 100 * MIB);
        sampled(&meters, &over, 5000 * MIB);
        // Policy 1 has a typical peak of 1000 MiB; policy 2 none, so the default's 2048 MiB.
        let expected = |p: PolicyId| if p.get() == 1 { 1000 * MIB } else { 2048 * MIB };
        assert_eq!(
            meters.reserved(std::slice::from_ref(&with_history), expected),
            700 * MIB
        );
        assert_eq!(
            meters.reserved(std::slice::from_ref(&without), expected),
            1948 * MIB,
            "no history: the default less what it uses, not 0"
        );
        assert_eq!(
            meters.reserved(std::slice::from_ref(&over), expected),
            0,
            "past its expectation: nothing more, no underflow"
        );
        assert_eq!(
            meters.reserved(&[with_history, without, over], expected),
            2648 * MIB
        );
    }

    #[test]
    fn a_holder_not_sampled_yet_reserves_its_whole_expectation() {
        let meters = Meters::default();
        let sampled_one = holder("aaaaaaaa", 1);
        sampled(&meters, &sampled_one, 400 * MIB);
        let registering = holder("dddddddd", 1);
        let expected = |_: PolicyId| 1000 * MIB;
        assert_eq!(
            meters.reserved(std::slice::from_ref(&registering), expected),
            1000 * MIB
        );
        assert_eq!(
            meters.reserved(&[sampled_one, registering], expected),
            1600 * MIB
        );
        assert_eq!(
            meters.reserved(&[], expected),
            0,
            "a followed attempt no longer holding a slot counts nothing"
        );
    }

    #[test]
    fn every_attempt_not_concluded_holds_a_slot_process_or_not() {
        let now = rm_core::Timestamp::from_millis(1_000);
        let id = |s: &str| AttemptId::new(s).expect("a valid test id");
        let allocated = Attempt::allocate(id("aaaaaaaa"), PolicyId::new(7), now);
        let mut failed = Attempt::allocate(id("bbbbbbbb"), PolicyId::new(7), now);
        failed
            .conclude(
                Outcome::Failed(rm_core::FailureReason::JitRequestFailed),
                now,
            )
            .expect("legal from allocated");
        let holding = holders_of(&[allocated, failed]);
        assert_eq!(holding.len(), 1, "{holding:?}");
        assert_eq!(holding[0].attempt.as_str(), "aaaaaaaa");
        assert_eq!(holding[0].policy, PolicyId::new(7));
        assert!(
            live_of(&[Attempt::allocate(id("cccccccc"), PolicyId::new(7), now)]).is_empty(),
            "no process yet: not sampled, so only `holders_of` sees it"
        );
    }

    /// A real process's identity as the meter reads it (`/proc/<pid>/stat`'s start time).
    #[cfg(target_os = "linux")]
    fn identity_of(pid: u32) -> ProcessIdentity {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat readable");
        let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let start_time = after_name
            .split_whitespace()
            .nth(19)
            .and_then(|f| f.parse().ok())
            .expect("field 22: starttime");
        ProcessIdentity { pid, start_time }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_runner_process_seen_gone_is_told_once_while_its_attempt_is_live() {
        let meters = Meters::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let live = [Live {
            attempt: AttemptId::new("dddddddd").expect("a valid test id"),
            policy: PolicyId::new(3),
            process: identity_of(child.id()),
            busy: false,
        }];
        let tick = meters.tick(&live, Instant::now()).expect("a sample");
        assert!(
            tick.gone_process.is_empty(),
            "alive: {:?}",
            tick.gone_process
        );
        assert_eq!(meters.followed(), 1);
        assert_eq!(
            tick.first_sampled, 1,
            "a new runner's usage is published at once"
        );

        child.kill().expect("killed");
        child.wait().expect("reaped");
        // The journal still says live (the loop has not concluded it): the meter tells.
        let tick = meters.tick(&live, Instant::now()).expect("a sample");
        assert_eq!(tick.gone_process, vec!["dddddddd".to_owned()]);
        assert_eq!(tick.first_sampled, 0);
        let tick = meters.tick(&live, Instant::now()).expect("a sample");
        assert!(
            tick.gone_process.is_empty(),
            "told once: {:?}",
            tick.gone_process
        );

        // Concluded by its loop: the attempt ends, with what it used.
        let tick = meters.tick(&[], Instant::now()).expect("a sample");
        assert_eq!(tick.ended.len(), 1);
        assert_eq!(tick.ended[0].attempt.as_str(), "dddddddd");
        assert_eq!(meters.followed(), 0);
    }
}
