//! Admission: a queued job waits while the memory available (less the headroom) does not cover
//! a new runner's expected peak, or while a workstation rule holds (on battery); status and the
//! CLI say so with the numbers or the rule, and the fix; it starts by itself soon after the
//! reason clears (looked at every 2 s), and a running job is never stopped when the reason
//! comes back. Real binary and fake GitHub; the memory and power readings come from files the
//! test writes (`RUNNER_MANAGER_TEST_MEMINFO`, `RUNNER_MANAGER_TEST_POWER_SUPPLY`, honoured by
//! debug builds only): the real `/proc/meminfo` and `/sys/class/power_supply` cannot be
//! steered from a test. The battery test points the service at a D-Bus address where nothing
//! answers, so UPower is absent and the kernel's supplies are read (UPower itself, and
//! logind's idle hint, are in `workstation_bus.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{Conclusion, JobSpec, JobStatus};

fn write_meminfo(path: &Path, available_mib: u64) {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        format!(
            "MemTotal:       16384000 kB\nMemFree:         100000 kB\nMemAvailable:   {} kB\n",
            available_mib * 1024
        ),
    )
    .unwrap();
    // Renamed into place: the service never reads half a file.
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waits_for_memory_says_why_and_starts_once_it_frees_up() {
    let gh = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let meminfo = dir.path().join("meminfo");
    // 1200 MiB available, 1024 kept free: less than the 512 MiB a runner is expected to need.
    write_meminfo(&meminfo, 1200);
    // The loops look at GitHub only every 30 s here: a start soon after memory frees up can
    // only come from the admission recheck, not from the next poll.
    let d = Daemon::start_env(
        &gh,
        &[
            "--runner-memory-mb",
            "512",
            "--memory-headroom-mb",
            "1024",
            "--poll-ms",
            "30000",
        ],
        &[("RUNNER_MANAGER_TEST_MEMINFO", meminfo.to_str().unwrap())],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("build", &[&label]).duration(Duration::from_secs(15)),
        )
        .unwrap();
    // A change through the API wakes the loop at once: it sees the job now, not in 30 s.
    d.ok(&["repo", "set", "octo/hello", "--max-runners", "3"])
        .await;
    let client = d.client().await;
    let hold = until(Duration::from_secs(30), "the memory hold in status", || {
        let client = &client;
        async move { client.status().await.ok()?.admission }
    })
    .await;
    assert_eq!(hold.available_bytes, 1200 << 20, "{hold:?}");
    assert_eq!(hold.expected_bytes, 512 << 20, "{hold:?}");
    assert!(
        hold.message.contains("1200 MiB available"),
        "{}",
        hold.message
    );
    assert!(
        hold.fix
            .contains("runner-manager host set-admission --memory off"),
        "{}",
        hold.fix
    );
    // It holds: several rechecks later the job is still queued and no runner was started.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);
    let status = client.status().await.unwrap();
    assert!(status.runners.is_empty(), "{:?}", status.runners);
    let text = d.ok(&["status"]).await;
    assert!(text.contains("New runners wait for memory"), "{text}");

    // Memory frees up: the job is taken without waiting for anything else. The recheck looks
    // every 2 s; a launch on a loaded test machine may take a few seconds more, yet it is
    // well before the next poll (30 s), which is what this pins.
    write_meminfo(&meminfo, 8192);
    let freed = std::time::Instant::now();
    until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job).unwrap().status != JobStatus::Queued).then_some(())
    })
    .await;
    let delay = freed.elapsed();
    eprintln!("taken {delay:?} after memory freed up");
    assert!(
        delay < Duration::from_secs(15),
        "started {delay:?} after memory freed up: only the next poll started it"
    );
    let status = client.status().await.unwrap();
    assert!(status.admission.is_none(), "{:?}", status.admission);

    // Memory runs low again while it runs: the running job is not stopped.
    write_meminfo(&meminfo, 100);
    until(Duration::from_secs(60), "the job finished", || async {
        let j = gh.job(job).unwrap();
        (j.status == JobStatus::Completed).then_some(j.conclusion)
    })
    .await
    .map(|c| assert_eq!(c, Conclusion::Success, "the running job was not stopped"))
    .unwrap();
    d.stop().await.unwrap();
}

/// A power supply in a fake `/sys/class/power_supply`: its type once, a value renamed in whole.
fn supply(dir: &Path, name: &str, kind: &str, field: &str, value: &str) {
    let d = dir.join(name);
    if !d.exists() {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
    }
    let tmp = d.join(format!("{field}.tmp"));
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::rename(&tmp, d.join(field)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_battery_a_job_waits_and_starts_once_plugged_in_and_a_running_one_goes_on() {
    let gh = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let power = dir.path().join("power_supply");
    supply(&power, "BAT0", "Battery", "status", "Discharging");
    supply(&power, "AC", "Mains", "online", "0");
    // No UPower (nothing answers at this bus address): the kernel's supplies are read.
    let no_bus = format!("unix:path={}", dir.path().join("no-bus").display());
    let d = Daemon::start_env(
        &gh,
        &["--on-battery", "wait"],
        &[
            ("RUNNER_MANAGER_TEST_POWER_SUPPLY", power.to_str().unwrap()),
            ("RUNNER_MANAGER_TEST_SYSTEM_BUS", &no_bus),
        ],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("build", &[&label]).duration(Duration::from_secs(15)),
        )
        .unwrap();
    let client = d.client().await;
    let hold = until(
        Duration::from_secs(30),
        "the battery hold in status",
        || {
            let client = &client;
            async move { client.status().await.ok()?.workstation }
        },
    )
    .await;
    assert_eq!(hold.rule, "on_battery");
    assert!(
        hold.fix
            .contains("runner-manager host set-rules --on-battery run"),
        "{}",
        hold.fix
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);
    let text = d.ok(&["status"]).await;
    assert!(text.contains("this machine runs on battery"), "{text}");

    // Plugged in: the job starts.
    supply(&power, "AC", "Mains", "online", "1");
    until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job).unwrap().status != JobStatus::Queued).then_some(())
    })
    .await;
    assert!(client.status().await.unwrap().workstation.is_none());

    // Unplugged while it runs: it goes on to the end.
    supply(&power, "AC", "Mains", "online", "0");
    until(Duration::from_secs(60), "the job finished", || async {
        let j = gh.job(job).unwrap();
        (j.status == JobStatus::Completed).then_some(j.conclusion)
    })
    .await
    .map(|c| assert_eq!(c, Conclusion::Success, "the running job was not stopped"))
    .unwrap();
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_own_admission_settings_decide_for_its_runners() {
    let gh = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let meminfo = dir.path().join("meminfo");
    // 1200 MiB available, 1024 kept free: 176 MiB for runners, less than the host's 512.
    write_meminfo(&meminfo, 1200);
    let d = Daemon::start_env(
        &gh,
        &["--runner-memory-mb", "512", "--memory-headroom-mb", "1024"],
        &[("RUNNER_MANAGER_TEST_MEMINFO", meminfo.to_str().unwrap())],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let free = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
            .await,
    );
    let small = routing_label(
        &d.ok(&[
            "repo",
            "add",
            "octo/hello",
            "--profile",
            "small",
            "--max-runners",
            "2",
        ])
        .await,
    );
    // Bad values are refused with the fix and change nothing.
    for bad in [
        ["--runner-memory-mb", "0"],
        ["--memory-admission", "maybe"],
        ["--memory-headroom-mb", "-1"],
    ] {
        let out = d
            .run(
                &[
                    &["repo", "set", "octo/hello", "--profile", "small"][..],
                    &bad[..],
                ]
                .concat(),
            )
            .await;
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("or host"), "{bad:?}: {err}");
    }
    let client = d.client().await;
    let targets = client.targets().await.unwrap();
    assert!(targets.iter().all(|t| t.admission.is_none()), "{targets:?}");

    // The default profile turns admission off for its runners; the small one expects 64 MiB.
    d.ok(&["repo", "set", "octo/hello", "--memory-admission", "off"])
        .await;
    let line = d
        .ok(&[
            "repo",
            "set",
            "octo/hello",
            "--profile",
            "small",
            "--runner-memory-mb",
            "64",
        ])
        .await;
    assert!(line.contains("admission: runner 64 MiB"), "{line}");
    let targets = client.targets().await.unwrap();
    let own = |profile: &str| {
        targets
            .iter()
            .find(|t| t.profile == profile)
            .unwrap()
            .admission
    };
    assert_eq!(own("default").unwrap().memory_admission, Some(false));
    assert_eq!(
        own("default").unwrap().runner_memory_mb,
        None,
        "a profile's change stays with that profile"
    );
    assert_eq!(own("small").unwrap().runner_memory_mb, Some(64));
    assert_eq!(
        own("small").unwrap().memory_admission,
        None,
        "follows the host"
    );

    // A third profile follows the host: its job waits, the other two start.
    let host = routing_label(
        &d.ok(&[
            "repo",
            "add",
            "octo/hello",
            "--profile",
            "host",
            "--max-runners",
            "1",
        ])
        .await,
    );
    let run = gh
        .queue_run(
            "octo/hello",
            vec![
                JobSpec::new("free", &[&free]).duration(Duration::from_millis(300)),
                JobSpec::new("small", &[&small]).duration(Duration::from_millis(300)),
                JobSpec::new("host", &[&host]).duration(Duration::from_millis(300)),
            ],
        )
        .unwrap();
    let jobs = gh.runs().into_iter().find(|r| r.id == run).unwrap().job_ids;
    for job in &jobs[..2] {
        until(Duration::from_secs(30), "own settings admit", || async {
            (gh.job(*job).unwrap().status == JobStatus::Completed).then_some(())
        })
        .await;
    }
    let why = until(
        Duration::from_secs(30),
        "the host-following job held",
        || {
            let client = &client;
            let job = jobs[2];
            async move {
                let report = client.why().await.ok()?;
                let reason = report.targets[0]
                    .jobs
                    .iter()
                    .find(|j| j.job_id == job)?
                    .reason
                    .clone();
                (reason.code == "memory").then_some(reason)
            }
        },
    )
    .await;
    assert!(why.message.contains("512 MiB"), "{}", why.message);
    assert_eq!(gh.job(jobs[2]).unwrap().status, JobStatus::Queued);

    // Back to the host's settings: `host` clears the target's own.
    d.ok(&["repo", "set", "octo/hello", "--memory-admission", "host"])
        .await;
    let targets = client.targets().await.unwrap();
    let default = targets.iter().find(|t| t.profile == "default").unwrap();
    assert_eq!(default.admission, None, "{default:?}");
    write_meminfo(&meminfo, 8192);
    until(Duration::from_secs(30), "the held job starts", || async {
        (gh.job(jobs[2]).unwrap().status != JobStatus::Queued).then_some(())
    })
    .await;
    d.stop().await.unwrap();
}
