//! Memory admission and the workstation rules changed while the service runs (`host
//! set-rules`, `host set-admission` through `PATCH /v1/host/admission`): a rule turned on holds
//! a queued job with the rule in status, turned off lets it start, with no restart; the
//! settings show in `host show --json` and `status --json`; bad values are refused with the fix
//! and change nothing; a restart keeps what was set, and a `daemon run` flag given again
//! replaces only its own setting. Real binary and fake GitHub.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{JobSpec, JobStatus};

/// Quiet hours that hold now: from an hour ago to an hour from now, local time (the service
/// reads the clock in the same time zone).
fn quiet_hours_around_now() -> String {
    use chrono::Timelike;
    let now = chrono::Local::now();
    let minute = i64::from(now.hour() * 60 + now.minute());
    let at = |m: i64| {
        let m = m.rem_euclid(24 * 60);
        format!("{:02}:{:02}", m / 60, m % 60)
    };
    format!("{}-{}", at(minute - 60), at(minute + 60))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_changed_at_run_time_takes_effect_without_a_restart_and_is_kept() {
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);

    let quiet = quiet_hours_around_now();
    let out = d.ok(&["host", "set-rules", "--quiet-hours", &quiet]).await;
    assert!(out.contains(&format!("quiet hours {quiet}")), "{out}");
    let host = json(&d.ok(&["host", "show", "--json"]).await);
    assert_eq!(host["admission"]["quiet_hours"], quiet.as_str(), "{host}");
    assert_eq!(
        host["admission"]["runner_memory_mb"], 64,
        "the harness's flag"
    );

    let job = gh
        .queue_job(
            "octo/hello",
            JobSpec::new("build", &[&label]).duration(Duration::from_secs(2)),
        )
        .unwrap();
    let client = d.client().await;
    let hold = until(Duration::from_secs(30), "the quiet-hours hold", || {
        let client = &client;
        async move { client.status().await.ok()?.workstation }
    })
    .await;
    assert_eq!(hold.rule, "quiet_hours", "{hold:?}");
    assert!(
        hold.fix
            .contains("runner-manager host set-rules --quiet-hours"),
        "{}",
        hold.fix
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(gh.job(job).unwrap().status, JobStatus::Queued);

    // Bad input: refused with the fix, nothing changes (in the service or its journal).
    for (args, said) in [
        (
            &["host", "set-rules", "--max-load", "-1"][..],
            "give a number above 0",
        ),
        (
            &["host", "set-rules", "--quiet-hours", "25:00-01:00"][..],
            "HH:MM-HH:MM",
        ),
        (
            &["host", "set-admission", "--runner-memory-mb", "0"][..],
            "1..=1048576",
        ),
        (&["host", "set-admission"][..], "nothing to change"),
    ] {
        let o = d.run(args).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let status = json(&d.ok(&["status", "--json"]).await);
    assert_eq!(status["host"]["admission"]["quiet_hours"], quiet.as_str());
    assert_eq!(
        status["host"]["admission"]["max_load"],
        serde_json::Value::Null
    );

    // Off again: the held job starts, no restart.
    d.ok(&["host", "set-rules", "--quiet-hours", "off"]).await;
    until(Duration::from_secs(30), "the job taken", || async {
        (gh.job(job).unwrap().status != JobStatus::Queued).then_some(())
    })
    .await;
    until(Duration::from_secs(30), "the hold gone from status", || {
        let client = &client;
        async move {
            let s = client.status().await.ok()?;
            s.workstation.is_none().then_some(())
        }
    })
    .await;

    // Memory admission's numbers too; the API answers the settings in force.
    let change = rm_proto::HostAdmissionChange {
        memory_headroom_mb: Some(512),
        max_load: Some(Some(rm_proto::LoadAverage(32.0))),
        ..Default::default()
    };
    let now = client.set_host_admission(&change).await.unwrap();
    assert_eq!((now.memory_headroom_mb, now.runner_memory_mb), (512, 64));
    assert_eq!(now.max_load, Some(rm_proto::LoadAverage(32.0)));
    let bad = rm_proto::HostAdmissionChange {
        runner_memory_mb: Some(0),
        ..Default::default()
    };
    let e = client.set_host_admission(&bad).await.unwrap_err();
    assert!(e.to_string().contains("runner_memory_mb 0"), "{e}");

    // A restart keeps what was set; the harness's `--runner-memory-mb 64` replaces only its own.
    d.restart().await;
    let host = json(&d.ok(&["host", "show", "--json"]).await);
    let a = &host["admission"];
    assert_eq!(a["memory_headroom_mb"], 512, "{host}");
    assert_eq!(a["max_load"], 32.0, "{host}");
    assert_eq!(a["quiet_hours"], serde_json::Value::Null, "{host}");
    assert_eq!(a["runner_memory_mb"], 64, "{host}");
    let text = d.ok(&["host", "show"]).await;
    assert!(text.contains("max load 32"), "{text}");
    d.stop().await.unwrap();
}
