//! Workstation rules read over D-Bus: UPower's `OnBattery` (asked before the kernel's power
//! supplies) and logind's `IdleHint` (`--idle-only`). The real binary and fake GitHub; a real
//! `dbus-daemon` on a private address serves a fake UPower and logind (`rm_e2e::bus`), and the
//! service is pointed at it with `RUNNER_MANAGER_TEST_SYSTEM_BUS` (debug builds only). A queued
//! job waits while the rule holds, with the rule in status; it starts soon after the fake flips
//! (the service looks again every 2 s); a running job is never stopped when the rule comes
//! back; logind gone, the idle-only rule holds nothing and says so once in the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use rm_e2e::bus::FakeSystemBus;
use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{Conclusion, FakeGitHub, JobSpec, JobStatus};

/// The fake bus, or `None` (test skipped, saying why) when `dbus-daemon` cannot run here.
async fn bus(on_battery: bool, idle: bool) -> Option<FakeSystemBus> {
    match FakeSystemBus::start(on_battery, idle).await {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIPPED: no private D-Bus: {e:#}");
            None
        }
    }
}

/// Queues one job of `secs` for `octo/hello` and returns its id.
fn queue(gh: &FakeGitHub, label: &str, secs: u64) -> u64 {
    gh.queue_job(
        "octo/hello",
        JobSpec::new("build", &[label]).duration(Duration::from_secs(secs)),
    )
    .unwrap()
}

async fn taken(gh: &FakeGitHub, job: u64) {
    until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job).unwrap().status != JobStatus::Queued).then_some(())
    })
    .await;
}

async fn finished_successfully(gh: &FakeGitHub, job: u64) {
    let conclusion = until(Duration::from_secs(60), "the job finished", || async {
        let j = gh.job(job).unwrap();
        (j.status == JobStatus::Completed).then_some(j.conclusion)
    })
    .await;
    assert_eq!(
        conclusion,
        Some(Conclusion::Success),
        "the running job was not stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_battery_comes_from_upower_first_and_a_job_starts_once_plugged_in() {
    let Some(bus) = bus(true, true).await else {
        return;
    };
    let gh = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    // The kernel's supplies say "a desktop" (none): only UPower can say "on battery".
    let no_supplies = dir.path().join("power_supply");
    std::fs::create_dir_all(&no_supplies).unwrap();
    let d = Daemon::start_env(
        &gh,
        &["--on-battery", "wait"],
        &[
            ("RUNNER_MANAGER_TEST_SYSTEM_BUS", &bus.address),
            (
                "RUNNER_MANAGER_TEST_POWER_SUPPLY",
                no_supplies.to_str().unwrap(),
            ),
        ],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let job = queue(&gh, &routing_label(&added), 10);
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
    assert_eq!(hold.rule, "on_battery", "{hold:?}");
    assert!(
        hold.fix
            .contains("runner-manager host set-rules --on-battery run"),
        "{}",
        hold.fix
    );
    // It holds over several rechecks.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);
    assert!(client.status().await.unwrap().runners.is_empty());

    // Plugged in (UPower says so): the job starts without anything else happening.
    bus.set_on_battery(false);
    let plugged = Instant::now();
    taken(&gh, job).await;
    eprintln!("taken {:?} after UPower said plugged in", plugged.elapsed());
    until(Duration::from_secs(30), "the hold gone from status", || {
        let client = &client;
        async move {
            let s = client.status().await.ok()?;
            s.workstation.is_none().then_some(())
        }
    })
    .await;

    // Unplugged while it runs: it goes on to the end.
    bus.set_on_battery(true);
    finished_successfully(&gh, job).await;
    assert!(
        !d.log().contains("UPower unavailable"),
        "UPower was read, not the fallback:\n{}",
        d.log()
    );
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_only_waits_while_the_user_is_active_and_holds_nothing_without_logind() {
    let Some(bus) = bus(false, false).await else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start_env(
        &gh,
        &[],
        &[("RUNNER_MANAGER_TEST_SYSTEM_BUS", &bus.address)],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    // Turned on while the service runs.
    let out = d.ok(&["host", "set-rules", "--idle-only", "on"]).await;
    assert!(out.contains("idle only on"), "{out}");

    let job = queue(&gh, &label, 10);
    let client = d.client().await;
    let hold = until(Duration::from_secs(30), "the user-active hold", || {
        let client = &client;
        async move { client.status().await.ok()?.workstation }
    })
    .await;
    assert_eq!(
        (hold.rule.as_str(), hold.short.as_str()),
        ("user_active", "in use")
    );
    assert!(
        hold.fix
            .contains("runner-manager host set-rules --idle-only off"),
        "{}",
        hold.fix
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);
    let text = d.ok(&["status"]).await;
    assert!(text.contains("someone is using this machine"), "{text}");

    // The user walks away: the job starts.
    bus.set_idle(true);
    let away = Instant::now();
    taken(&gh, job).await;
    eprintln!("taken {:?} after logind said idle", away.elapsed());
    // The user is back while it runs: it goes on.
    bus.set_idle(false);
    finished_successfully(&gh, job).await;

    // logind gone: a broken reading must not stop every runner; said once in the log.
    bus.drop_logind().await.unwrap();
    let second = queue(&gh, &label, 1);
    taken(&gh, second).await;
    let log = d.log();
    assert_eq!(
        log.matches("idle hint unreadable").count(),
        1,
        "logged once:\n{log}"
    );
    finished_successfully(&gh, second).await;
    d.stop().await.unwrap();
}
