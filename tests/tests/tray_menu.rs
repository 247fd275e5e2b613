//! The tray app for real: its icon and menu read over D-Bus (dbusmenu) in each state, clicked
//! items having the effect the service then reports, and the service stopping and coming back
//! under it. Real service binary, fake GitHub, the tray under Xvfb with a fake tray host
//! (see `rm_e2e::tray`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::tray::{session_or_skip, SessionOptions};
use rm_e2e::{fake_github, routing_label, until, Daemon};
use rm_testkit::{EndpointMatch, Fault, FaultRule, JobSpec, JobStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_menu_follows_the_service_through_every_state_and_its_items_act() {
    let Some(mut s) = session_or_skip(
        "the_menu_follows_the_service_through_every_state_and_its_items_act",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    let log = d.dir.path().join("tray.log");
    let socket = d.socket.display().to_string();
    let mut tray = s.tray(None, &["--socket", &socket], &log).spawn().unwrap();

    // Signed out.
    let m = s
        .until_menu("Signed out", |m| m.header() == "Signed out")
        .await;
    assert!(m.has("Sign in…"), "{}", m.render());
    assert!(
        m.has("Quit tray (the service keeps serving jobs)"),
        "{}",
        m.render()
    );
    let item = s.item().await.expect("registered item");
    assert_eq!(item["XAyatanaLabel"], "Signed out", "{item}");
    let signed_out_icon = item["IconName"].clone();

    // Signed in, no target.
    d.sign_in(&gh, "octo").await;
    let m = s
        .until_menu("idle", |m| m.header() == "Idle · no targets yet")
        .await;
    assert!(
        m.has("Signed in as octo") && m.has("Sign out"),
        "{}",
        m.render()
    );
    let idle_icon = s.item().await.unwrap()["IconName"].clone();
    assert_ne!(idle_icon, signed_out_icon, "each state has its own icon");

    // A target.
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    let m = s
        .until_menu("one active target", |m| {
            m.header() == "Idle · 1 target" && m.checked("octo/hello — active") == Some(true)
        })
        .await;
    assert!(m.has("Add repository or organization…"));

    // Busy: the job is named.
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("build", &["self-hosted", &label]).duration(Duration::from_secs(6))],
    )
    .unwrap();
    let m = s
        .until_menu("a running job", |m| m.header() == "Running 1 job")
        .await;
    assert!(
        m.labels()
            .iter()
            .any(|l| l.starts_with("octo/hello › build (")),
        "{}",
        m.render()
    );
    assert_ne!(s.item().await.unwrap()["IconName"], idle_icon);
    // The elapsed time ticks in place: the item keeps its id (a menu held open stays usable).
    let before = m.find("octo/hello › build (").unwrap();
    let after = s
        .until_menu("the elapsed time ticking", |m| {
            m.find("octo/hello › build (")
                .is_some_and(|n| n["label"] != before["label"])
        })
        .await
        .find("octo/hello › build (")
        .unwrap();
    assert_eq!(after["id"], before["id"], "{before} then {after}");
    s.until_menu("idle again", |m| m.header() == "Idle · 1 target")
        .await;

    // A failing runner: attention, with the fix.
    gh.inject_fault(FaultRule::always(
        EndpointMatch::name("repo_jitconfig"),
        Fault::Status5xx {
            status: 502,
            rate: 1.0,
        },
    ));
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("flaky", &["self-hosted", &label]).duration(Duration::from_millis(300))],
    )
    .unwrap();
    let m = s
        .until_menu("attention", |m| {
            // The failed runner, or the target's launch back-off that follows it.
            let h = m.header();
            h.starts_with("Needs attention: ") && h.contains("octo/hello")
        })
        .await;
    assert!(
        m.labels()[1].contains("GitHub App is installed"),
        "the fix follows the header: {}",
        m.render()
    );
    gh.clear_faults();
    until(Duration::from_secs(60), "the flaky job served", || async {
        gh.jobs()
            .iter()
            .any(|j| j.name == "flaky" && j.status == JobStatus::Completed)
            .then_some(())
    })
    .await;
    // Looking at the dashboard acknowledges it.
    s.click("Open dashboard").await;
    s.until_menu("idle after the dashboard was opened", |m| {
        m.header() == "Idle · 1 target"
    })
    .await;
    // The dashboard is its own process, started by the click.
    let start = std::time::Instant::now();
    while !s.windows().await.iter().any(|w| w == "runner-manager") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no dashboard: {:?}",
            s.windows().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Pause launching: the service reports it paused.
    s.click("Pause launching").await;
    let client = d.client().await;
    until(Duration::from_secs(20), "the service paused", || async {
        client.status().await.unwrap().paused.then_some(())
    })
    .await;
    let m = s
        .until_menu("paused", |m| m.header() == "Paused · 1 target")
        .await;
    assert!(m.has("Resume launching"), "{}", m.render());
    s.click("Resume launching").await;
    until(Duration::from_secs(20), "the service resumed", || async {
        (!client.status().await.unwrap().paused).then_some(())
    })
    .await;

    // A target's check item disables it.
    s.click("octo/hello — active").await;
    until(Duration::from_secs(20), "octo/hello disabled", || async {
        let t = client.targets().await.unwrap();
        (!t[0].enabled).then_some(())
    })
    .await;
    let m = s
        .until_menu("the target disabled", |m| {
            m.checked("octo/hello — disabled") == Some(false)
        })
        .await;
    assert!(m.has("octo/hello — disabled"));

    // The service stops: the menu says so and names the command that starts it.
    d.halt().await.unwrap();
    let m = s
        .until_menu("service not running", |m| {
            m.header() == "Service not running"
        })
        .await;
    assert!(
        m.labels()[1].contains("runner-manager daemon run"),
        "{}",
        m.render()
    );
    let start = std::time::Instant::now();
    while !s
        .notifications()
        .await
        .iter()
        .any(|n| n["summary"] == "runner-manager service stopped")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no notification that the service stopped: {:?}",
            s.notifications().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And back.
    d.resume().await;
    s.until_menu("reconnected", |m| m.header() == "Idle · 1 target")
        .await;

    // Sign out: the service drops its credential.
    s.click("Sign out").await;
    let client = d.client().await;
    until(Duration::from_secs(20), "signed out", || async {
        matches!(
            client.status().await.unwrap().auth,
            rm_proto::AuthState::SignedOut
        )
        .then_some(())
    })
    .await;
    s.until_menu("signed out again", |m| m.header() == "Signed out")
        .await;

    // Quit leaves the service running.
    s.click("Quit tray").await;
    let status = tokio::time::timeout(Duration::from_secs(20), tray.wait())
        .await
        .expect("the tray quits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        d.client().await.status().await.is_ok(),
        "the service still serves"
    );
    d.stop().await.unwrap();
    s.quit().await;
}
