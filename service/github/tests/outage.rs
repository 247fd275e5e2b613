//! GitHub outages back off host-wide: several targets polling through one client cost what
//! one target's back-off costs, the delays grow, and everyone resumes within one step of the
//! fault clearing. Each target here is a loop shaped like the service's (poll, then wait for
//! the poll interval or the client's next try, whichever is later), and a prober sends the
//! outage's free probes as the service's health watcher does.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns; a panic is a failed test

mod common;

use common::*;
use rm_github::{Backoff, GitHubClient, GitHubError, HealthState};
use rm_testkit::{EndpointMatch, FakeGitHub, Fault, FaultRule, Relay};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TARGETS: usize = 4;
const POLL: Duration = Duration::from_millis(50);
/// The test's outage schedule: 100 ms doubling to 1.6 s.
const SCHEDULE: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_millis(1600),
};

/// When each target's demand poll last succeeded.
type Successes = Arc<Mutex<Vec<Option<Instant>>>>;

struct Fleet {
    client: GitHubClient,
    successes: Successes,
    stop: tokio::sync::watch::Sender<bool>,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

/// Four repositories, one client through `origin` (the fake or a relay in front of it), one
/// polling loop per repository.
async fn fleet(fake: &FakeGitHub, origin: &str) -> Fleet {
    fake.create_user("alice").unwrap();
    fake.create_installation("alice", rm_testkit::InstallationRepos::All)
        .unwrap();
    let mut targets = Vec::new();
    for i in 0..TARGETS {
        let name = format!("alice/r{i}");
        fake.create_repo(&name).unwrap();
        targets.push(target(&name));
    }
    let token = fake.issue_token("alice").unwrap();
    let mut c = config(fake);
    c.endpoints = rm_github::Endpoints::custom(origin, origin).unwrap();
    c.backoff = SCHEDULE;
    let (client, _) = client_with(c, Some(credential(&token)));
    let successes: Successes = Arc::new(Mutex::new(vec![None; TARGETS]));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let loops = targets
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let client = client.clone();
            let successes = Arc::clone(&successes);
            let mut rx = rx.clone();
            tokio::spawn(async move {
                while !*rx.borrow() {
                    if client.demand(&t).await.is_ok() {
                        successes.lock().unwrap()[i] = Some(Instant::now());
                    }
                    let until_next_try = client
                        .next_try()
                        .and_then(|at| (at - chrono::Utc::now()).to_std().ok())
                        .unwrap_or_default();
                    tokio::select! {
                        () = tokio::time::sleep(POLL.max(until_next_try)) => {}
                        _ = rx.changed() => {}
                    }
                }
            })
        })
        .collect::<Vec<_>>();
    // The service's probe: a free question each time one is due (see `probe_outage`).
    let prober = {
        let client = client.clone();
        let mut rx = rx.clone();
        tokio::spawn(async move {
            while !*rx.borrow() {
                let _ = client.probe_outage().await;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = rx.changed() => {}
                }
            }
        })
    };
    let mut loops = loops;
    loops.push(prober);
    Fleet {
        client,
        successes,
        stop,
        loops,
    }
}

impl Fleet {
    /// Waits until every target polled successfully after `since`; returns when each did.
    async fn all_succeed_after(&self, since: Instant, deadline: Duration) -> Vec<Instant> {
        let ok = eventually(deadline, || {
            self.successes
                .lock()
                .unwrap()
                .iter()
                .all(|s| s.is_some_and(|s| s > since))
        })
        .await;
        assert!(ok, "not every target resumed: {:?}", self.successes);
        self.successes
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.unwrap())
            .collect()
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for l in self.loops {
            l.await.unwrap();
        }
    }
}

/// Most probes the schedule lets out in `storm`: the k-th step waits at least half its full
/// delay, so k probes need at least the sum of those halves.
fn most_probes(storm: Duration) -> usize {
    let mut spent = Duration::ZERO;
    let mut k = 0;
    loop {
        let full = SCHEDULE
            .base
            .saturating_mul(2u32.saturating_pow(k as u32))
            .min(SCHEDULE.cap);
        spent += full / 2;
        if spent > storm {
            return k;
        }
        k += 1;
    }
}

/// The full delay of the step after `failures` failed tries.
fn step(failures: u32) -> Duration {
    SCHEDULE
        .base
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(SCHEDULE.cap)
}

/// Samples the health at every change signal (and at the end) for `storm`.
async fn watch_health(client: &GitHubClient, storm: Duration) -> Vec<rm_github::Health> {
    let mut seen = Vec::new();
    let end = tokio::time::Instant::now() + storm;
    let mut changes = client.health_changes();
    while tokio::time::Instant::now() < end {
        let _ = tokio::time::timeout_at(end, changes.changed()).await;
        seen.push(client.health());
    }
    seen
}

/// Checks the outage that began at `began` (the fake's counters were reset then): what the
/// client showed, what it cost, how the probes spread out. Returns the failures so far.
async fn check_storm(fake: &FakeGitHub, fleet: &Fleet, began: Instant) -> u32 {
    let health = watch_health(&fleet.client, Duration::from_secs(5)).await;
    let storm = began.elapsed();
    let during = fleet.client.health();
    assert_eq!(during.state, HealthState::Unreachable, "{during:?}");
    assert!(
        during.since.is_some() && during.next_try.is_some() && during.detail.is_some(),
        "{during:?}"
    );
    // Failures only grow during an outage, and the change signal told about them.
    let failures: Vec<u32> = health.iter().map(|h| h.consecutive_failures).collect();
    assert!(failures.windows(2).all(|w| w[0] <= w[1]), "{failures:?}");
    assert!(failures.len() >= 4, "a change per step: {failures:?}");
    let f = during.consecutive_failures;
    assert!(f >= 4, "{failures:?}");
    // One failed try per step, never faster than the schedule.
    assert!(
        f as usize <= 1 + most_probes(storm),
        "{f} tries in {storm:?}"
    );

    // Requests that reached GitHub (or tried to) during the outage.
    let times: Vec<Instant> = fake
        .request_log()
        .iter()
        .filter(|r| r.status >= 500 || r.status == 0)
        .map(|r| r.at)
        .collect();
    let sent = times.len();
    // One target's back-off would send `1 + most_probes`; the first round may catch every
    // target's request in flight at once.
    let bound = TARGETS + most_probes(storm);
    let without_gate = TARGETS * (storm.as_millis() / POLL.as_millis()) as usize;
    assert!(
        sent <= bound,
        "{sent} requests in a {storm:?} outage, bound {bound} (polling on: ~{without_gate})"
    );
    println!("outage of {storm:?}: {sent} requests (bound {bound}, polling on: ~{without_gate})");
    // The probes (one per failed step after the first) came further and further apart.
    let probes = &times[sent.saturating_sub(f as usize - 1)..];
    let gaps: Vec<Duration> = probes.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 2, "{gaps:?}");
    assert!(
        *gaps.last().unwrap() >= gaps[0] * 2,
        "the delays grow: {gaps:?}"
    );
    f
}

/// After the fault cleared at `cleared` with `failures` so far: every target polls fine within
/// one step (plus a poll, plus slack for a loaded machine), and the health is `ok` again.
async fn check_recovery(fleet: Fleet, cleared: Instant, failures: u32) {
    let resumed = fleet
        .all_succeed_after(cleared, step(failures) + Duration::from_secs(10))
        .await;
    let slowest = resumed.iter().map(|t| *t - cleared).max().unwrap();
    let within = step(failures) + POLL + Duration::from_secs(1);
    assert!(
        slowest <= within,
        "resumed {slowest:?} after the fault cleared; one step is {:?}",
        step(failures)
    );
    assert_eq!(fleet.client.health(), rm_github::Health::ok());
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_storm_costs_one_back_off_whatever_the_number_of_targets() {
    let fake = fake().await;
    let fleet = fleet(&fake, &fake.origin()).await;
    fleet
        .all_succeed_after(Instant::now(), Duration::from_secs(10))
        .await;
    fake.reset_counters();
    let began = Instant::now();
    fake.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    let failures = check_storm(&fake, &fleet, began).await;
    let h = fleet.client.health();
    assert!(h.detail.unwrap().contains("503"));
    fake.clear_faults();
    check_recovery(fleet, Instant::now(), failures).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_outage_backs_off_the_same_way() {
    let fake = fake().await;
    let relay = Relay::start(fake.addr()).await.unwrap();
    let fleet = fleet(&fake, &relay.origin()).await;
    fleet
        .all_succeed_after(Instant::now(), Duration::from_secs(10))
        .await;
    // Connection refused: nothing reaches the fake, so count what the client tried.
    let before = fleet.client.budget().last_hour.errors;
    relay.cut();
    let began = Instant::now();
    let health = watch_health(&fleet.client, Duration::from_secs(5)).await;
    let storm = began.elapsed();
    let during = fleet.client.health();
    assert_eq!(during.state, HealthState::Unreachable, "{during:?}");
    let f = during.consecutive_failures;
    assert!(f >= 4, "{health:?}");
    assert!(
        f as usize <= 1 + most_probes(storm),
        "{f} tries in {storm:?}"
    );
    let sent = (fleet.client.budget().last_hour.errors - before) as usize;
    let bound = TARGETS + most_probes(storm);
    assert!(sent <= bound, "{sent} tries in {storm:?}, bound {bound}");
    assert!(sent >= f as usize);
    relay.restore().await.unwrap();
    check_recovery(fleet, Instant::now(), f).await;
}

#[tokio::test]
async fn a_rate_limit_shows_as_rate_limited_and_is_signalled() {
    let w = world().await;
    let mut changes = w.client.health_changes();
    w.fake.inject_fault(FaultRule::times(
        EndpointMatch::Any,
        Fault::RateLimited {
            status: 429,
            retry_after: Some(30),
            secondary: true,
        },
        1,
    ));
    let e = w.client.installations().await.unwrap_err();
    assert!(matches!(e, GitHubError::RateLimited { .. }), "{e:?}");
    tokio::time::timeout(Duration::from_secs(5), changes.changed())
        .await
        .unwrap()
        .unwrap();
    let h = w.client.health();
    assert_eq!(h.state, HealthState::RateLimited);
    assert!(h.next_try.unwrap() > chrono::Utc::now() + chrono::Duration::seconds(20));
    assert!(h.detail.unwrap().contains("secondary"));
    assert_eq!(w.client.next_try(), h.next_try);
}
