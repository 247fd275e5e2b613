//! The dashboard, driven through WebDriver against the real service: the host's routing label,
//! adding targets with the service's validation errors shown inline, enabling, capacity,
//! monitor-only, kept work folders, a runner's live usage and the target's typical peak,
//! removal with confirmation, pausing; each change is what the service then reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::tray::{session_or_skip, SessionOptions};
use rm_e2e::webdriver::{self, Driver};
use rm_e2e::{bin, fake_github, until};

const ROW: &str = "[id=\"target-octo/hello\"]";

/// Memory now and peak in MiB from a runner's "Uses" cell, `52 MiB (peak 60 MiB) · 0.1 cores`.
fn usage_mib(cell: &str) -> (u64, u64) {
    let parsed = (|| {
        let (now, rest) = cell.trim().split_once(" MiB (peak ")?;
        let (peak, rest) = rest.split_once(" MiB) · ")?;
        rest.strip_suffix(" cores")?.parse::<f64>().ok()?;
        Some((now.parse().ok()?, peak.parse().ok()?))
    })();
    parsed.unwrap_or_else(|| panic!("not a usage in MiB: {cell:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_changes_targets_and_shows_the_services_errors_inline() {
    if !webdriver::available() {
        eprintln!("SKIPPED: WebKitWebDriver is missing (apt-get install webkit2gtk-driver)");
        return;
    }
    let Some(s) = session_or_skip(
        "the_dashboard_changes_targets_and_shows_the_services_errors_inline",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = rm_e2e::Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let client = d.client().await;
    let socket = d.socket.display().to_string();
    let driver = Driver::launch(
        &s,
        &bin("runner-manager-window"),
        &[
            "--socket",
            &socket,
            "--show",
            "dashboard",
            "--notify-finished-jobs",
        ],
        &s.home.path().join("tray.log"),
    )
    .await;
    driver
        .until_text("#summary", "idle", |t| {
            t.starts_with("Idle · no targets yet")
        })
        .await;
    // The updater in words: this build, not checked yet (the first check is minutes after
    // start), an install the updater only tells about.
    let version = env!("CARGO_PKG_VERSION");
    driver
        .until_text("#update-body", "the update section", |t| {
            t.contains("Not checked yet")
        })
        .await;
    assert_eq!(
        driver.text("#about").await,
        format!("About runner-manager {version}")
    );
    assert_eq!(driver.text("#update-current").await, version);
    // Every part says something in words: no `null`/`undefined` leaks into the page.
    for part in [
        "#host-body",
        "#runners-body",
        "#queued-body",
        "#targets-body",
        "#update-body",
    ] {
        let text = driver.text(part).await;
        assert!(
            !text.contains("null") && !text.contains("undefined"),
            "{part}: {text}"
        );
    }
    let words = driver.text("#update-body").await;
    assert!(
        words.contains("installs new releases by itself") && words.contains("not from a package"),
        "{words}"
    );
    // The tray notifies finished jobs (it started the window saying so): the option shows it.
    assert_eq!(
        driver
            .exec("return document.querySelector('#opt-finished').checked")
            .await,
        serde_json::Value::Bool(true)
    );
    let host = client.status().await.unwrap().host;
    assert_eq!(driver.text("#routing-label").await, host.routing_label);
    assert!(driver
        .text("#host-body")
        .await
        .contains(&format!("runs-on: [self-hosted, {}]", host.routing_label)));

    // Bad input is refused inline, naming the fix; nothing changes.
    let add = |target: &'static str, max: &'static str| {
        let driver = &driver;
        async move {
            driver.fill("#add-target", target).await;
            driver.fill("#add-max", max).await;
            driver.click("#add button[type=submit]").await;
        }
    };
    add("octo/hello/extra", "").await;
    let e = driver
        .until_text("#add-error", "a refusal", |t| !t.is_empty())
        .await;
    assert!(
        e.contains("wrong number of '/'") && e.contains("owner/repo"),
        "{e}"
    );
    add("octo/hello", "999").await;
    let e = driver
        .until_text("#add-error", "out of range", |t| t.contains("out of range"))
        .await;
    assert!(e.contains("max_capacity 999"), "{e}");
    assert!(client.targets().await.unwrap().is_empty());

    // Added.
    add("octo/hello", "2").await;
    driver
        .until_text(ROW, "the new row", |t| t.contains("octo/hello"))
        .await;
    assert_eq!(driver.text("#add-error").await, "");
    let t = client.targets().await.unwrap();
    assert_eq!(
        (t.len(), t[0].max_capacity, t[0].enabled),
        (1, Some(2), true)
    );
    add("octo/hello", "").await;
    driver
        .until_text("#add-error", "already served", |t| {
            t.contains("already served")
        })
        .await;

    // Disable, capacity, monitor only: what the service then reports.
    driver
        .click(&format!("{ROW} input[aria-label=\"serve octo/hello\"]"))
        .await;
    until(Duration::from_secs(20), "disabled", || async {
        (!client.targets().await.unwrap()[0].enabled).then_some(())
    })
    .await;
    driver
        .until_text(ROW, "the disabled state", |t| t.contains("disabled"))
        .await;
    driver.fill(&format!("{ROW} input[type=number]"), "1").await;
    until(Duration::from_secs(20), "capacity 1", || async {
        (client.targets().await.unwrap()[0].max_capacity == Some(1)).then_some(())
    })
    .await;
    driver
        .click(&format!(
            "{ROW} input[aria-label=\"octo/hello monitor only\"]"
        ))
        .await;
    until(Duration::from_secs(20), "monitor only", || async {
        client.targets().await.unwrap()[0]
            .max_capacity
            .is_none()
            .then_some(())
    })
    .await;

    // Work folders kept between jobs, then not: what the service then reports, in words.
    let keep = format!("{ROW} input[aria-label=\"octo/hello keeps work folders between jobs\"]");
    driver.click(&keep).await;
    until(Duration::from_secs(20), "persistent workspaces", || async {
        (client.targets().await.unwrap()[0].workspace == rm_proto::Workspace::Persistent)
            .then_some(())
    })
    .await;
    driver
        .until_text(ROW, "the kept work folders", |t| {
            t.contains("keeps work folders (0 saved)")
        })
        .await;
    driver.click(&keep).await;
    until(Duration::from_secs(20), "ephemeral workspaces", || async {
        (client.targets().await.unwrap()[0].workspace == rm_proto::Workspace::Ephemeral)
            .then_some(())
    })
    .await;

    // Enabled again, monitor-only: a queued job says why no runner takes it, with the fix.
    driver
        .click(&format!("{ROW} input[aria-label=\"serve octo/hello\"]"))
        .await;
    until(Duration::from_secs(20), "enabled", || async {
        client.targets().await.unwrap()[0].enabled.then_some(())
    })
    .await;
    // The job holds memory while it runs (a few seconds: metered every 2 s).
    let held_mib: u64 = 48;
    let job = gh
        .queue_job(
            "octo/hello",
            rm_testkit::JobSpec::new("build", &[&host.routing_label])
                .duration(Duration::from_secs(6))
                .memory(u32::try_from(held_mib).unwrap(), 1),
        )
        .unwrap();
    let queued = driver
        .until_text("#queued-body", "the waiting job's reason", |t| {
            t.contains("monitor-only")
        })
        .await;
    assert!(queued.contains("--max-runners N"), "{queued}");
    assert!(queued.contains(&host.routing_label), "{queued}");

    // Starting runners again: the runner that takes the job shows what it uses now, its peak
    // and its CPU in its row.
    driver
        .click(&format!(
            "{ROW} input[aria-label=\"octo/hello monitor only\"]"
        ))
        .await;
    let uses = driver
        .until_text(
            "#runners-body tbody tr td:last-child",
            "the runner's usage",
            |t| t.contains("(peak "),
        )
        .await;
    let (now_mib, peak_mib) = usage_mib(&uses);
    assert!(now_mib > 0 && peak_mib >= now_mib, "{uses}");
    // Once the job is done, what it used is the target's typical peak, shown in its row as
    // the service reports it.
    until(Duration::from_secs(60), "the job done", || async {
        (gh.job(job).unwrap().status == rm_testkit::JobStatus::Completed).then_some(())
    })
    .await;
    let typical = until(Duration::from_secs(30), "the typical peak", || async {
        client
            .status()
            .await
            .ok()?
            .targets
            .first()?
            .typical_peak_rss_bytes
    })
    .await;
    assert!(typical >= held_mib << 20, "typical peak {typical} bytes");
    // The service publishes the new figure itself: nothing else changes meanwhile.
    let typical_mib = (typical as f64 / 1_048_576.0).round();
    driver
        .until_text(ROW, "the typical peak", |t| {
            t.contains(&format!("typically peaks at {typical_mib} MiB"))
        })
        .await;

    // Removal asks first.
    driver.click(&format!("{ROW} button.danger")).await;
    let confirm = driver
        .until_text(ROW, "the confirmation", |t| {
            t.contains("finish their job first")
        })
        .await;
    assert!(confirm.contains("Remove octo/hello"), "{confirm}");
    assert_eq!(client.targets().await.unwrap().len(), 1, "not removed yet");
    driver.click(&format!("{ROW} button.danger")).await;
    until(Duration::from_secs(20), "removed", || async {
        client.targets().await.unwrap().is_empty().then_some(())
    })
    .await;

    // Pause.
    driver.click("#pause-toggle").await;
    until(Duration::from_secs(20), "paused", || async {
        client.status().await.unwrap().paused.then_some(())
    })
    .await;
    driver
        .until_text("#pause-toggle", "resume offered", |t| {
            t == "Resume launching"
        })
        .await;
    driver.quit().await;
    d.stop().await.unwrap();
    s.quit().await;
}
