//! What a GitHub outage costs: N idle repository targets polling demand through one client (the
//! service's pacing: the planner's interval for N idle targets, or the client's next try when
//! that is later) while the fake GitHub answers every request 503 for `--storm-secs`, with the
//! client's default outage schedule (1 s doubling to 3 min). Prints the requests sent during
//! the outage, what polling on would have sent, and how long after the outage every target had
//! polled successfully again.
//!
//! Run: `cargo run -p rm-github --example outage-bench -- [--targets N] [--storm-secs S]`

use rm_github::{
    ClientConfig, Credential, Endpoints, GitHubClient, MemoryCredentialStore, SecretString,
};
use rm_testkit::{EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, InstallationRepos};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let targets = arg("--targets", 4).max(1) as usize;
    let storm = Duration::from_secs(arg("--storm-secs", 30));
    let fake = FakeGitHub::start(FakeConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    fake.create_user("bench").map_err(|e| e.to_string())?;
    let names: Vec<String> = (0..targets).map(|i| format!("bench/r{i:03}")).collect();
    for n in &names {
        fake.create_repo(n).map_err(|e| e.to_string())?;
    }
    fake.create_installation("bench", InstallationRepos::All)
        .map_err(|e| e.to_string())?;
    let token = fake.issue_token("bench").map_err(|e| e.to_string())?;
    let mut config = ClientConfig::new(
        Endpoints::custom(&fake.origin(), &fake.origin()).map_err(|e| e.to_string())?,
    );
    config.client_id = fake.client_id();
    let store = Arc::new(MemoryCredentialStore::new(Some(Credential::non_expiring(
        SecretString::from(token.access_token.clone()),
    ))));
    let client = GitHubClient::new(config, store).map_err(|e| e.to_string())?;
    // Idle targets: their polls are free 304s, so the planner's interval is the secondary
    // limit's (1 s for up to 5 targets, 20 s for 100).
    let interval = rm_github::Planner {
        charged_per_poll: 0.0,
        ..rm_github::Planner::default()
    }
    .poll_interval(targets, 5000);

    let last_ok: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; targets]));
    let (stop, rx) = tokio::sync::watch::channel(false);
    // The service's health watcher: sends the outage's free probe when due and, once GitHub
    // answers, wakes every loop for a poll at once.
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut loops = Vec::new();
    {
        let (client, wake, mut rx) = (client.clone(), Arc::clone(&wake), rx.clone());
        loops.push(tokio::spawn(async move {
            while !*rx.borrow() {
                if client.probe_outage().await == Some(true) {
                    wake.notify_waiters();
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = rx.changed() => {}
                }
            }
        }));
    }
    for (i, name) in names.iter().enumerate() {
        let t = rm_core::Target::parse(name).map_err(|e| e.to_string())?;
        let (client, last_ok, mut rx) = (client.clone(), Arc::clone(&last_ok), rx.clone());
        let wake = Arc::clone(&wake);
        loops.push(tokio::spawn(async move {
            while !*rx.borrow() {
                if client.demand(&t).await.is_ok() {
                    if let Ok(mut l) = last_ok.lock() {
                        l[i] = Some(Instant::now());
                    }
                }
                let next_try = client
                    .next_try()
                    .and_then(|at| (at - chrono::Utc::now()).to_std().ok())
                    .unwrap_or_default();
                tokio::select! {
                    () = tokio::time::sleep(interval.max(next_try)) => {}
                    () = wake.notified() => {}
                    _ = rx.changed() => {}
                }
            }
        }));
    }
    // Warm: every target polled once.
    while last_ok
        .lock()
        .map(|l| l.iter().any(Option::is_none))
        .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.reset_counters();
    fake.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    tokio::time::sleep(storm).await;
    let sent = fake.counters().total.requests;
    let health = client.health();
    fake.clear_faults();
    let cleared = Instant::now();
    loop {
        let done = last_ok
            .lock()
            .map(|l| l.iter().all(|t| t.is_some_and(|t| t > cleared)))
            .unwrap_or(false);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed = cleared.elapsed();
    let _ = stop.send(true);
    for l in loops {
        let _ = l.await;
    }
    let polls = targets as f64 * storm.as_secs_f64() / interval.as_secs_f64();
    println!(
        "outage-bench: {targets} idle targets, poll interval {:.1} s, {} s of 503s",
        interval.as_secs_f64(),
        storm.as_secs()
    );
    println!(
        "requests during the outage: {sent} ({} failed tries in a row); polling on: ~{polls:.0} polls, each the first GET of a demand poll",
        health.consecutive_failures
    );
    println!(
        "every target polled successfully {:.1} s after the outage ended",
        resumed.as_secs_f64()
    );
    Ok(())
}
