//! `runner-manager why`: every queued job the service saw, with the reason no runner of this
//! host started for it and the fix — one job per reason, each from the loops' own decisions.
//! Real binary and fake GitHub; memory and power readings come from files the test writes
//! (`RUNNER_MANAGER_TEST_MEMINFO`, `RUNNER_MANAGER_TEST_POWER_SUPPLY`, debug builds only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_proto::{Client, WhyReason, WhyReport};
use rm_testkit::package::RunnerPackage;
use rm_testkit::{Conclusion, EndpointMatch, Fault, FaultRule, JobSpec, JobStatus};

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    // Renamed into place: the service never reads half a file.
    std::fs::rename(&tmp, path).unwrap();
}

fn meminfo(path: &Path, available_mib: u64) {
    write(
        path,
        &format!(
            "MemTotal: 16384000 kB\nMemFree: 100000 kB\nMemAvailable: {} kB\n",
            available_mib * 1024
        ),
    );
}

/// A fake `/sys/class/power_supply` with a battery and mains `online` (1 or 0).
fn power(dir: &Path, mains_online: bool) {
    for (name, kind) in [("BAT0", "Battery"), ("AC", "Mains")] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        write(&dir.join(name).join("type"), &format!("{kind}\n"));
    }
    let (status, online) = if mains_online {
        ("Charging", "1")
    } else {
        ("Discharging", "0")
    };
    write(&dir.join("BAT0").join("status"), &format!("{status}\n"));
    write(&dir.join("AC").join("online"), &format!("{online}\n"));
}

/// The reason of each queued job of `octo/hello`, by job id.
fn reasons(report: &WhyReport) -> BTreeMap<u64, WhyReason> {
    report
        .targets
        .iter()
        .filter(|t| t.target == "octo/hello")
        .flat_map(|t| t.jobs.iter().map(|j| (j.job_id, j.reason.clone())))
        .collect()
}

/// Waits until the reasons of `jobs` have the codes `codes`; returns them.
async fn until_codes(
    client: &Client,
    what: &str,
    want: &[(u64, &str)],
) -> BTreeMap<u64, WhyReason> {
    let mut last = BTreeMap::new();
    let found = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            if let Ok(report) = client.why().await {
                last = reasons(&report);
                if want
                    .iter()
                    .all(|(job, code)| last.get(job).is_some_and(|r| r.code == *code))
                {
                    return last.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        let got: Vec<_> = last.iter().map(|(j, r)| (j, &r.code)).collect();
        panic!("timed out waiting for {what}: want {want:?}, got {got:?}")
    })
}

fn job_of(gh: &rm_testkit::FakeGitHub, run: u64, index: usize) -> u64 {
    gh.runs().into_iter().find(|r| r.id == run).unwrap().job_ids[index]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiting_job_says_why_labels_state_capacity_pause_memory_and_battery() {
    let gh = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("meminfo");
    let supply = dir.path().join("power_supply");
    meminfo(&mem, 8192);
    power(&supply, true);
    // No UPower (nothing answers at this bus address): the kernel's supplies are read.
    let no_bus = format!("unix:path={}", dir.path().join("no-bus").display());
    let d = Daemon::start_env(
        &gh,
        &[
            "--runner-memory-mb",
            "512",
            "--memory-headroom-mb",
            "1024",
            "--on-battery",
            "wait",
        ],
        &[
            ("RUNNER_MANAGER_TEST_MEMINFO", mem.to_str().unwrap()),
            ("RUNNER_MANAGER_TEST_POWER_SUPPLY", supply.to_str().unwrap()),
            ("RUNNER_MANAGER_TEST_SYSTEM_BUS", &no_bus),
        ],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    d.ok(&["host", "set-capacity", "2"]).await;
    // Four profiles of one repository: each its own routing label and settings.
    let l = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    let wide = routing_label(
        &d.ok(&[
            "repo",
            "add",
            "octo/hello",
            "--profile",
            "wide",
            "--max-runners",
            "2",
        ])
        .await,
    );
    let mon = routing_label(
        &d.ok(&[
            "repo",
            "add",
            "octo/hello",
            "--profile",
            "mon",
            "--monitor-only",
        ])
        .await,
    );
    let off = routing_label(
        &d.ok(&[
            "repo",
            "add",
            "octo/hello",
            "--profile",
            "off",
            "--disabled",
        ])
        .await,
    );
    // A profile is addressed by name; one this host does not have is named as missing.
    let out = d
        .run(&[
            "repo",
            "set",
            "octo/hello",
            "--profile",
            "nope",
            "--max-runners",
            "2",
        ])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no profile 'nope'") && err.contains("wide"),
        "{err}"
    );
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(500);
    // One runner of each running profile takes a long job: the host's 2 slots are full.
    let busy = gh
        .queue_run(
            "octo/hello",
            vec![
                JobSpec::new("long", &[&l]).duration(long),
                JobSpec::new("long-wide", &[&wide]).duration(long),
            ],
        )
        .unwrap();
    let (j1, j3) = (job_of(&gh, busy, 0), job_of(&gh, busy, 1));
    let taken = tokio::time::timeout(Duration::from_secs(40), async {
        while ![j1, j3]
            .iter()
            .all(|j| gh.job(*j).unwrap().status != JobStatus::Queued)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if taken.is_err() {
        let why = d.ok(&["why"]).await;
        panic!("the long jobs were not taken:\n{why}\n{}", d.log());
    }
    let waiting = gh
        .queue_run(
            "octo/hello",
            vec![
                JobSpec::new("full", &[&l]).duration(short),
                JobSpec::new("host-full", &[&wide]).duration(short),
                JobSpec::new("watched", &[&mon]),
                JobSpec::new("disabled", &[&off]),
                JobSpec::new("gpu", &["self-hosted", &l, "gpu"]),
                JobSpec::new("hosted", &["ubuntu-latest"]),
                JobSpec::new("no-labels", &[]),
            ],
        )
        .unwrap();
    let j = |i| job_of(&gh, waiting, i);
    let (j2, j4, j5, j6, j7, j8, j9) = (j(0), j(1), j(2), j(3), j(4), j(5), j(6));
    let client = d.client().await;
    let r = until_codes(
        &client,
        "a reason per job",
        &[
            (j2, "target_full"),
            (j4, "host_full"),
            (j5, "monitor_only"),
            (j6, "target_disabled"),
            (j7, "labels_mismatch"),
            (j8, "github_hosted"),
            (j9, "runs_on_unresolvable"),
        ],
    )
    .await;
    // The runners holding the slots are named; the fix says what would change it.
    let runner_of = |job: u64| {
        let id = gh.job(job).unwrap().runner_id.unwrap();
        gh.runners().into_iter().find(|r| r.id == id).unwrap().name
    };
    assert_eq!(r[&j2].runners, [runner_of(j1)], "{:?}", r[&j2]);
    let mut holders = r[&j4].runners.clone();
    holders.sort();
    let mut expected = vec![runner_of(j1), runner_of(j3)];
    expected.sort();
    assert_eq!(holders, expected, "{:?}", r[&j4]);
    assert!(
        r[&j2].fix.as_ref().unwrap().contains("--max-runners"),
        "{:?}",
        r[&j2]
    );
    assert!(
        r[&j4].fix.as_ref().unwrap().contains("host set-capacity"),
        "{:?}",
        r[&j4]
    );
    assert!(
        r[&j5].fix.as_ref().unwrap().contains("--max-runners"),
        "{:?}",
        r[&j5]
    );
    assert!(
        r[&j6].fix.as_ref().unwrap().contains("--enable"),
        "{:?}",
        r[&j6]
    );
    assert!(r[&j7].message.contains("'gpu'"), "{:?}", r[&j7]);
    assert!(
        r[&j7].fix.as_ref().unwrap().contains("--label gpu"),
        "{:?}",
        r[&j7]
    );
    assert!(r.values().all(|r| !r.covered));
    // `why --json` through the CLI names the same reason for each job as the API.
    let json: serde_json::Value = serde_json::from_str(&d.ok(&["why", "--json"]).await).unwrap();
    let cli_codes: BTreeMap<u64, String> = json["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["target"] == "octo/hello")
        .flat_map(|t| t["jobs"].as_array().unwrap())
        .map(|j| {
            let code = j["reason"]["code"].as_str().unwrap();
            (j["job_id"].as_u64().unwrap(), code.to_owned())
        })
        .collect();
    let api_codes: BTreeMap<u64, String> = reasons(&client.why().await.unwrap())
        .into_iter()
        .map(|(job, r)| (job, r.code))
        .collect();
    assert_eq!(cli_codes, api_codes, "{json}");
    assert_eq!(cli_codes.len(), 7, "{json}");
    // Plain `why`: each job's line, then the reason and its fix in the service's words.
    let text = d.ok(&["why"]).await;
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(&format!("octo/hello · watched (job {j5})")))
        .unwrap_or_else(|| panic!("no line for job {j5}:\n{text}"));
    assert!(lines[at].contains("profile=mon"), "{text}");
    assert_eq!(
        lines.get(at + 1).copied(),
        Some(format!("    waits: {}", r[&j5].message).as_str()),
        "{text}"
    );
    assert!(r[&j5].message.contains("monitor-only"), "{:?}", r[&j5]);
    assert_eq!(
        lines.get(at + 2).copied(),
        Some(format!("    fix: {}", r[&j5].fix.as_ref().unwrap()).as_str()),
        "{text}"
    );
    // The text form, for one target, with the fix lines.
    let text = d.ok(&["why", "octo/hello"]).await;
    assert!(
        text.contains("octo/hello: 7 queued job(s), 7 without a runner"),
        "{text}"
    );
    assert!(
        text.contains(&format!("octo/hello · gpu (job {j7})")),
        "{text}"
    );
    // Each job names its repository, its name and its page on GitHub.
    let report = client.why().await.unwrap();
    let gpu = report.targets[0]
        .jobs
        .iter()
        .find(|j| j.job_id == j7)
        .unwrap();
    assert_eq!(
        (gpu.repository.as_str(), gpu.name.as_str()),
        ("octo/hello", "gpu")
    );
    assert_eq!(
        gpu.url.as_deref(),
        Some(format!("{}/octo/hello/actions/runs/{waiting}/job/{j7}", gh.origin()).as_str())
    );
    assert!(gpu.queued_at.is_some(), "{gpu:?}");
    assert!(text.contains("fix: "), "{text}");
    // A target this host does not serve is an error naming the fix.
    let out = d.run(&["why", "octo/other"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("runner-manager status"), "{err}");

    // Paused: the job the host had no room for now waits for the pause (the profile at its
    // maximum still says so).
    d.ok(&["service", "pause"]).await;
    let r = until_codes(&client, "paused", &[(j4, "paused"), (j2, "target_full")]).await;
    assert!(
        r[&j4].fix.as_ref().unwrap().contains("service resume"),
        "{:?}",
        r[&j4]
    );
    d.ok(&["service", "resume"]).await;

    // Room on the host, but not in memory: the numbers.
    meminfo(&mem, 1200);
    d.ok(&["host", "set-capacity", "3"]).await;
    let r = until_codes(&client, "the memory hold", &[(j4, "memory")]).await;
    assert!(
        r[&j4].message.contains("1200 MiB available"),
        "{:?}",
        r[&j4]
    );

    // Memory back, but on battery: the rule.
    power(&supply, false);
    meminfo(&mem, 8192);
    let r = until_codes(&client, "the battery rule", &[(j4, "on_battery")]).await;
    assert!(r[&j4].message.contains("battery"), "{:?}", r[&j4]);

    // Plugged in: the job starts, and every job ends well.
    power(&supply, true);
    for job in [j1, j2, j3, j4] {
        until(Duration::from_secs(120), "the jobs done", || async {
            let v = gh.job(job).unwrap();
            (v.status == JobStatus::Completed).then_some(v.conclusion)
        })
        .await
        .map(|c| assert_eq!(c, Conclusion::Success))
        .unwrap();
    }
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiting_job_says_why_package_rate_limit_and_sign_in() {
    let gh = fake_github().await;
    // A package whose checksum does not match what GitHub lists: every launch fails.
    let good = RunnerPackage::shared_for_tests().unwrap();
    let mut bad = good.clone();
    bad.sha256 = "0".repeat(64);
    gh.set_runner_package(&bad);
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let l = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    let run = gh
        .queue_run(
            "octo/hello",
            vec![JobSpec::new("build", &[&l]).duration(Duration::from_millis(300))],
        )
        .unwrap();
    let job = job_of(&gh, run, 0);
    let client = d.client().await;
    let r = until_codes(
        &client,
        "the package failing",
        &[(job, "package_unverified")],
    )
    .await;
    assert!(r[&job].message.contains("package"), "{:?}", r[&job]);
    assert!(
        r[&job].until.is_some(),
        "the next try is named: {:?}",
        r[&job]
    );

    // GitHub rate-limits the queue listing: every job says so, with when it lifts.
    gh.inject_fault(FaultRule::always(
        EndpointMatch::name("workflow_runs"),
        Fault::RateLimited {
            status: 403,
            retry_after: Some(30),
            secondary: true,
        },
    ));
    let r = until_codes(&client, "the rate limit", &[(job, "rate_limited")]).await;
    // The words name the local time it lifts (the service's clock and time zone are this
    // machine's), then how soon (the daemon's unit test checks those words).
    let lifts = r[&job].until.expect("when the limit lifts");
    let clock = chrono::DateTime::from_timestamp_millis(lifts.0)
        .unwrap()
        .with_timezone(&chrono::Local)
        .format("%H:%M")
        .to_string();
    assert!(
        r[&job]
            .message
            .contains(&format!("Rate-limited by GitHub until {clock} (")),
        "{:?}",
        r[&job]
    );
    let report = client.why().await.unwrap();
    let t = &report.targets[0];
    assert_eq!(t.summary.as_ref().unwrap().code, "rate_limited", "{t:?}");
    assert!(
        t.jobs_read_at < t.checked_at,
        "the jobs as last read: {t:?}"
    );
    d.stop().await.unwrap();

    // A fresh service whose sign-in GitHub refuses.
    gh.clear_faults();
    gh.set_runner_package(&good);
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let l = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    // Capacity 0 would be refused; a monitor-only profile reads the queue and starts nothing.
    d.ok(&["repo", "set", "octo/hello", "--monitor-only"]).await;
    let run = gh
        .queue_run("octo/hello", vec![JobSpec::new("build", &[&l])])
        .unwrap();
    let job = job_of(&gh, run, 0);
    let client = d.client().await;
    until_codes(&client, "monitor-only", &[(job, "monitor_only")]).await;
    gh.inject_fault(FaultRule::always(
        EndpointMatch::name("workflow_runs"),
        Fault::Unauthorized,
    ));
    let r = until_codes(&client, "the sign-in refused", &[(job, "sign_in_failed")]).await;
    assert!(
        r[&job].fix.as_ref().unwrap().contains("auth login"),
        "{:?}",
        r[&job]
    );
    d.stop().await.unwrap();
}
