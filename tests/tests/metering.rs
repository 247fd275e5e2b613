//! Every runner's process tree is metered: while a job holds memory in child processes of the
//! runner, `status` (the API and the CLI) shows the tree's resident memory and its peak, within
//! 10 % of what the job allocated; when the job is done, its usage is journalled and the
//! target's typical peak shows (kept across a restart). Real binary, fake GitHub, fake runners whose job allocates
//! and touches the memory in two children (`JobSpec::memory`). A runner that fails before it
//! takes a job is metered too, but what it used is no job's usage: nothing is journalled and
//! its target gets no typical peak.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{EndpointMatch, Fault, FaultRule, JobSpec, JobStatus};

const MIB: u64 = 1 << 20;

/// Resident memory of the sandbox's own processes (pasta, bwrap) of the runners under
/// `data_dir` (their command lines name the runtime).
fn sandbox_rss(data_dir: &std::path::Path) -> u64 {
    let needle = data_dir.to_string_lossy().into_owned();
    let mut total = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !["pasta", "passt", "bwrap"]
            .iter()
            .any(|w| comm.trim_end().starts_with(w))
        {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(&needle) {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        total += kib * 1024;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_memory_in_child_processes_shows_in_status_within_ten_percent() {
    if !cfg!(target_os = "linux") {
        eprintln!("SKIPPED: metering reads /proc (Linux)");
        return;
    }
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let allocated: u64 = 200;
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("heavy", &[&label])
            .duration(Duration::from_secs(25))
            .memory(u32::try_from(allocated).unwrap(), 2)],
    )
    .unwrap();
    let client = d.client().await;
    // Sampled every 2 s: wait until a sample saw the whole allocation.
    let usage = until(
        Duration::from_secs(60),
        "the job's memory in status",
        || {
            let client = &client;
            async move {
                let status = client.status().await.ok()?;
                let usage = status.runners.first()?.usage?;
                (usage.peak_rss_bytes >= allocated * MIB).then_some(usage)
            }
        },
    )
    .await;
    // The runner itself and its two children add a few MiB of their own: within 10 %. The
    // sandbox's own processes (pasta's packet buffers, bwrap) are the runner's cost too and are
    // metered with it: they come on top, as read from /proc now.
    let sandbox = sandbox_rss(&d.data_dir);
    assert!(
        usage.peak_rss_bytes <= allocated * MIB * 11 / 10 + sandbox,
        "peak {} MiB for {allocated} MiB allocated and {} MiB of the sandbox's own",
        usage.peak_rss_bytes / MIB,
        sandbox / MIB
    );
    assert!(usage.rss_bytes >= allocated * MIB, "{usage:?}");
    let text = d.ok(&["status"]).await;
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("uses ") && l.contains("MiB now (peak ")),
        "{text}"
    );
    // The job ends; its runner goes and so does its usage.
    let job = gh
        .jobs()
        .into_iter()
        .find(|j| j.name == "heavy")
        .unwrap()
        .id;
    until(Duration::from_secs(90), "the runner gone", || {
        let client = &client;
        let gh = &gh;
        async move {
            let done = gh
                .job(job)
                .is_some_and(|j| j.status == JobStatus::Completed);
            let status = client.status().await.ok()?;
            (done && status.runners.is_empty()).then_some(())
        }
    })
    .await;
    // What it used is journalled: the target's typical peak, kept across a restart.
    let peak_of = |status: &rm_proto::Status| status.targets.first()?.typical_peak_rss_bytes;
    let typical = until(Duration::from_secs(30), "the target's typical peak", || {
        let client = &client;
        async move { peak_of(&client.status().await.ok()?) }
    })
    .await;
    assert!(
        (allocated * MIB..=allocated * MIB * 11 / 10 + sandbox).contains(&typical),
        "typical peak {} MiB ({} MiB of it the sandbox's own)",
        typical / MIB,
        sandbox / MIB
    );
    d.restart().await;
    let status = d.client().await.status().await.unwrap();
    assert_eq!(peak_of(&status), Some(typical), "kept across a restart");
    let text = d.ok(&["status"]).await;
    assert!(text.contains("its runners typically peak at "), "{text}");
    d.stop().await.unwrap();
}

/// The peak of the first `runner usage` line of the daemon's log for a runner that ran no job.
fn jobless_usage_peak(log: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains("runner usage") && l.contains("ran_job=false"))
        .find_map(|l| {
            let (_, rest) = l.split_once("peak_rss_bytes=")?;
            rest.split_whitespace().next()?.parse().ok()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_fails_before_any_job_leaves_no_usage_and_no_typical_peak() {
    if !cfg!(target_os = "linux") {
        eprintln!("SKIPPED: metering reads /proc (Linux)");
        return;
    }
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    // The runner's listener cannot open its session for a few seconds (it retries every
    // second, so the meter samples it), then is told its registration is gone and exits
    // without a job; so does every later try.
    let sessions = || EndpointMatch::route("POST", "/_broker/sessions");
    gh.inject_fault(FaultRule::times(
        sessions(),
        Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
        4,
    ));
    gh.inject_fault(FaultRule::always(
        sessions(),
        Fault::Refuse {
            status: 404,
            message: "The runner no longer exists on the server".into(),
        },
    ));
    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("never-taken", &[&label]).memory(32, 1),
        )
        .unwrap();
    // The meter saw the runner (a peak above 0) and knows it ran no job.
    let peak = until(
        Duration::from_secs(60),
        "the jobless runner's usage",
        || {
            let log = d.log();
            async move { jobless_usage_peak(&log) }
        },
    )
    .await;
    assert!(peak > 0, "{}", d.log());
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);
    let client = d.client().await;
    let peak_of = |status: &rm_proto::Status| status.targets.first()?.typical_peak_rss_bytes;
    // A few meter ticks later still no typical peak...
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = client.status().await.unwrap();
        assert_eq!(peak_of(&status), None, "{status:?}");
    }
    // ...and none read back from the journal either: no usage row was written.
    d.restart().await;
    let status = d.client().await.status().await.unwrap();
    assert_eq!(peak_of(&status), None, "{status:?}");
    gh.clear_faults();
    d.stop().await.unwrap();
}
