//! Budget benchmark against the fake GitHub with 50 ms added latency.
//!
//! Measures, with the real client over loopback HTTP:
//! 1. charged requests per target per idle hour (goal 0),
//! 2. charged requests per job served (goal ≤ 5), with simulated JIT runners
//!    that take their job through the fake's broker (queued → in_progress →
//!    completed, registration removed by "GitHub"),
//! 3. how many targets one host can watch within half a 5,000/h token at the
//!    planned interval (goal ≥ 100).
//!
//! Time is compressed: each "poll round" stands for one planned interval; the
//! per-round cost is extrapolated to an hour at the planned interval.
//!
//! Run: `cargo run -p rm-github --example github-bench [-- TARGETS]`

use base64::Engine;
use rm_github::{
    Backoff, ClientConfig, Credential, Endpoints, ExposeSecret, GitHubClient, JitRequest,
    MemoryCredentialStore, Planner, SecretString,
};
use rm_testkit::{
    EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, InstallationRepos, JobSpec,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LABEL: &str = "rm-bench-linux-x64";

#[tokio::main]
async fn main() -> anyhow_like::Result<()> {
    let targets: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let fake = FakeGitHub::start(FakeConfig {
        poll_hold: Duration::from_millis(200),
        ..FakeConfig::default()
    })
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
    fake.inject_fault(FaultRule::always(
        EndpointMatch::Any,
        Fault::Latency(Duration::from_millis(50)),
    ));

    let mut config = ClientConfig::new(
        Endpoints::custom(&fake.origin(), &fake.origin()).map_err(|e| e.to_string())?,
    );
    config.client_id = fake.client_id();
    config.backoff = Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_secs(1),
    };
    let store = Arc::new(MemoryCredentialStore::new(Some(Credential {
        access_token: SecretString::from(token.access_token.clone()),
        expires_at: Some(token.expires_at),
        refresh_token: token.refresh_token.clone().map(SecretString::from),
        refresh_expires_at: token.refresh_expires_at,
    })));
    let client = GitHubClient::new(config, store).map_err(|e| e.to_string())?;
    let all: Vec<rm_core::Target> = names
        .iter()
        .map(|n| rm_core::Target::parse(n))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;

    println!("github-bench: {targets} repository targets, fake GitHub with 50 ms latency on every request");

    // ---- idle -------------------------------------------------------------
    let warm = round(&client, &all).await?;
    println!(
        "warm-up round (first poll of each target, charged): {} charged, {} requests, {:.2} s",
        warm.0,
        warm.1,
        warm.2.as_secs_f64()
    );
    let idle_rounds = 5;
    let before = fake.counters().total;
    let mut slowest = Duration::ZERO;
    for _ in 0..idle_rounds {
        let (_, _, took) = round(&client, &all).await?;
        slowest = slowest.max(took);
    }
    let after = fake.counters().total;
    let idle_charged = after.charged - before.charged;
    let idle_requests = after.requests - before.requests;
    let idle_cpp = idle_charged as f64 / (targets * idle_rounds) as f64;
    let rpp = idle_requests as f64 / (targets * idle_rounds) as f64;
    let idle_plan = Planner {
        charged_per_poll: idle_cpp,
        requests_per_poll: rpp.max(2.0),
        ..Planner::default()
    }
    .plan(targets, 5000);
    let polls_per_hour = 3600.0 / idle_plan.interval.as_secs_f64();
    println!("\n[idle] {idle_rounds} rounds × {targets} targets: {idle_charged} charged / {idle_requests} requests ({} answered 304)", after.not_modified - before.not_modified);
    println!("[idle] planned interval for {targets} idle targets: {:.1} s (bound: secondary limit, {:.0} points/min planned)", idle_plan.interval.as_secs_f64(), idle_plan.points_per_minute);
    println!("[idle] scaling: {idle_rounds} rounds stand for {idle_rounds} intervals; 1 h = {polls_per_hour:.0} polls per target");
    println!(
        "[idle] RESULT charged requests per target per idle hour: {:.2}",
        idle_cpp * polls_per_hour
    );
    println!(
        "[idle] slowest round wall time {:.2} s (must fit in the interval)",
        slowest.as_secs_f64()
    );

    // ---- jobs -------------------------------------------------------------
    let busy: Vec<rm_core::Target> = all.iter().take(10.min(targets)).cloned().collect();
    let single: Vec<Vec<JobSpec>> = (0..busy.len())
        .map(|_| vec![JobSpec::new("build", &[LABEL]).duration(Duration::from_millis(2000))])
        .collect();
    let matrix: Vec<Vec<JobSpec>> = (0..busy.len())
        .map(|_| {
            (0..4)
                .map(|k| {
                    JobSpec::new(&format!("matrix-{k}"), &[LABEL])
                        .duration(Duration::from_millis(1500 + 300 * k))
                })
                .collect()
        })
        .collect();
    let mut charged = 0u64;
    let mut jobs_total = 0usize;
    for (label, runs) in [("single-job runs", single), ("4-job matrix runs", matrix)] {
        let (c, j) = serve(&fake, &client, &busy, runs, label).await?;
        charged += c;
        jobs_total += j;
    }
    println!(
        "[jobs] RESULT charged requests per job served, both kinds together: {:.2}",
        charged as f64 / jobs_total as f64
    );

    // ---- capacity ---------------------------------------------------------
    let per_job = charged as f64 / jobs_total as f64;
    let snapshot = client.budget();
    let idle_planner = Planner {
        charged_per_poll: idle_cpp,
        requests_per_poll: rpp.max(2.0),
        ..Planner::default()
    };
    let max_targets = |planner: &Planner, max_interval: Duration| {
        let mut n = 1usize;
        while n < 100_000 && {
            let p = planner.plan(n + 1, 5000);
            p.within_budget && p.interval <= max_interval
        } {
            n += 1;
        }
        n
    };
    println!("\n[budget] half of a 5,000/h token = 2,500 charged/h; secondary limit planned at 600 of 900 points/min");
    for limit_s in [20u64, 60] {
        let n = max_targets(&idle_planner, Duration::from_secs(limit_s));
        let p = idle_planner.plan(n, 5000);
        println!(
            "[budget] RESULT idle targets watchable with a poll interval <= {limit_s} s: {n} (interval {:.1} s, {:.0} charged/h, {:.0} points/min)",
            p.interval.as_secs_f64(), p.charged_per_hour, p.points_per_minute
        );
    }
    println!(
        "[budget] with 100 idle targets polling is free, so the 2,500/h left serve ~{:.0} jobs/h at {per_job:.2} charged per job",
        2500.0 / per_job
    );
    // The planner as the service would use it, fed by this run's measurements
    // (warm-up round + busy phase included: a pessimistic mix).
    let measured = Planner::from_snapshot(&snapshot);
    let p100 = measured.plan(100, 5000);
    println!(
        "[budget] planner on this run's measured mix ({:.3} charged/poll over {} polls): 100 targets -> interval {:.1} s, {:.0} charged/h, within budget: {}",
        snapshot.charged_per_poll, snapshot.polls, p100.interval.as_secs_f64(), p100.charged_per_hour, p100.within_budget
    );
    fake.shutdown();
    Ok(())
}

/// Serves one batch of runs (one run per busy target) the way the service
/// would, and returns (charged requests, jobs served).
async fn serve(
    fake: &FakeGitHub,
    client: &GitHubClient,
    busy: &[rm_core::Target],
    runs: Vec<Vec<JobSpec>>,
    label: &str,
) -> anyhow_like::Result<(u64, usize)> {
    let mut jobs_total = 0usize;
    for (t, jobs) in busy.iter().zip(runs) {
        jobs_total += jobs.len();
        fake.queue_run(&t.to_string(), jobs)
            .map_err(|e| e.to_string())?;
    }
    let before = fake.counters();
    let started = Instant::now();
    let mut launched: HashSet<u64> = HashSet::new();
    let mut runners = tokio::task::JoinSet::new();
    let mut pending_checks: Vec<(rm_core::Target, u64)> = Vec::new();
    let mut rounds = 0;
    // Rounds are a compressed planned interval: every job lasts several rounds,
    // as a real job lasts several 20 s intervals, so each transition
    // (queued → in_progress → completed) is seen by its own poll. Idle targets
    // are left out here: their polls are free (shown above).
    loop {
        rounds += 1;
        let mut queued = 0;
        for (t, d) in busy.iter().zip(poll(client, busy).await?) {
            queued += d.jobs.len();
            for job in d.jobs {
                if !launched.insert(job.job_id) {
                    continue;
                }
                let cfg = client
                    .generate_jit_config(
                        t,
                        &JitRequest {
                            name: format!("rm-bench-{}", job.job_id),
                            runner_group_id: 1,
                            labels: vec![LABEL.into()],
                            work_folder: None,
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let origin = fake.origin();
                let (target, id) = (t.clone(), cfg.runner.id);
                runners.spawn(async move {
                    fake_runner(&origin, cfg.encoded_jit_config)
                        .await
                        .map(|_| (target, id))
                });
            }
        }
        // Supervision: an attempt whose runner exited is confirmed gone once.
        while let Some(done) = runners.try_join_next() {
            pending_checks.push(done.map_err(|e| e.to_string())??);
        }
        for (t, id) in pending_checks.drain(..) {
            if client
                .get_runner(&t, id)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                client
                    .delete_runner(&t, id)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        if queued == 0 && launched.len() == jobs_total && runners.is_empty() {
            break;
        }
        if rounds > 400 {
            return Err("jobs did not finish".to_string().into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One more round: the completed runs' last change.
    poll(client, busy).await?;
    let after = fake.counters();
    let charged = after.total.charged - before.total.charged;
    println!(
        "\n[jobs] {label}: {jobs_total} jobs in {rounds} rounds over {} busy targets, {:.1} s",
        busy.len(),
        started.elapsed().as_secs_f64()
    );
    for ep in [
        "workflow_runs",
        "run_jobs",
        "repo_jitconfig",
        "repo_runner_get",
        "repo_runner_delete",
    ] {
        let (a, b) = (after.endpoint(ep), before.endpoint(ep));
        println!(
            "[jobs]   {ep:<20} charged {:>4}  304 {:>4}",
            a.charged - b.charged,
            a.not_modified - b.not_modified
        );
    }
    println!(
        "[jobs] {label}: RESULT charged requests per job served: {:.2}",
        charged as f64 / jobs_total as f64
    );
    Ok((charged, jobs_total))
}

/// Polls every target once, 8 at a time (the client's concurrency cap).
async fn round(
    client: &GitHubClient,
    targets: &[rm_core::Target],
) -> anyhow_like::Result<(u64, u64, Duration)> {
    let started = Instant::now();
    let (mut charged, mut requests) = (0, 0);
    for d in poll(client, targets).await? {
        charged += d.charged;
        requests += d.requests;
    }
    Ok((charged, requests, started.elapsed()))
}

/// Demand of every target, polled concurrently, in target order.
async fn poll(
    client: &GitHubClient,
    targets: &[rm_core::Target],
) -> anyhow_like::Result<Vec<rm_github::Demand>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, t) in targets.iter().enumerate() {
        let c = client.clone();
        let t = t.clone();
        set.spawn(async move { (i, c.demand(&t).await) });
    }
    let mut out: Vec<Option<rm_github::Demand>> = vec![None; targets.len()];
    while let Some(r) = set.join_next().await {
        let (i, d) = r.map_err(|e| e.to_string())?;
        out[i] = Some(d.map_err(|e| e.to_string())?);
    }
    Ok(out.into_iter().flatten().collect())
}

/// A minimal JIT runner: decodes its config, opens a broker session, takes
/// one job, works on it, reports success (FAKE_PROTOCOL.md).
async fn fake_runner(origin: &str, blob: SecretString) -> anyhow_like::Result<()> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let outer: serde_json::Value = serde_json::from_slice(
        &b64.decode(blob.expose_secret())
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let file = |k: &str| -> anyhow_like::Result<serde_json::Value> {
        let text = outer
            .get(k)
            .and_then(|v| v.as_str())
            .ok_or("missing file")?;
        Ok(
            serde_json::from_slice(&b64.decode(text).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?,
        )
    };
    let runner_id = file(".runner")?
        .get("AgentId")
        .and_then(|v| v.as_u64())
        .ok_or("no AgentId")?;
    let secret = file(".credentials")?
        .pointer("/Data/token")
        .and_then(|v| v.as_str())
        .ok_or("no token")?
        .to_string();
    let http = octocrab::Octocrab::builder()
        .build()
        .map_err(|e| e.to_string())?;
    let send = |method: http::Method, path: String, body: Option<serde_json::Value>| {
        let http = &http;
        let secret = &secret;
        async move {
            let req = http::Request::builder()
                .method(method)
                .uri(format!("{origin}{path}"))
                .header("authorization", format!("Bearer {secret}"))
                .header("content-type", "application/json")
                .body(body.map(|b| b.to_string()).unwrap_or_default())
                .map_err(|e| e.to_string())?;
            let resp = http.execute(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let text = http.body_to_string(resp).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, text))
        }
    };
    let (_, s) = send(
        http::Method::POST,
        "/_broker/sessions".into(),
        Some(serde_json::json!({"runner_id": runner_id, "os": "Linux"})),
    )
    .await?;
    let session: serde_json::Value = serde_json::from_str(&s).map_err(|e| e.to_string())?;
    let sid = session
        .get("session_id")
        .and_then(|v| v.as_str())
        .ok_or("no session")?
        .to_string();
    loop {
        let (status, body) = send(
            http::Method::GET,
            format!("/_broker/sessions/{sid}/message"),
            None,
        )
        .await?;
        if status == 200 {
            let m: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let job_id = m
                .pointer("/job/job_id")
                .and_then(|v| v.as_u64())
                .ok_or("no job id")?;
            let ms = m
                .pointer("/job/duration_ms")
                .and_then(|v| v.as_u64())
                .unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            send(
                http::Method::POST,
                format!("/_broker/jobs/{job_id}/complete"),
                Some(serde_json::json!({"result": "succeeded"})),
            )
            .await?;
            return Ok(());
        }
        if status != 204 {
            return Err(format!("broker answered {status}").into());
        }
    }
}

/// Tiny boxed-error result so the example needs no extra crate.
mod anyhow_like {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}
