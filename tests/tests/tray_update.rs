//! The tray presents the service's updater. Real service installed the way the portable
//! archive installs it (so its updater may apply), in `notify` mode, against the fake GitHub's
//! release feed serving a signed release; the tray under Xvfb with the fake tray host and the
//! fake notification server.
//!
//! A newer release on the feed gives the menu item `Update to 9.0.0…` and exactly one
//! notification (not again after the service restarts and announces it again); nothing is
//! downloaded until asked. Clicking the item makes the service download, verify and start
//! applying: the menu says `Updating to 9.0.0 — running jobs finish first` while a job runs,
//! and the service's update status says `applying`. The test stops the service before the
//! job ends, so nothing is swapped (the swap, restart and rollback are the service's tests:
//! `service/daemon/tests/service_update.rs`).
//!
//! The release's binary is a shell script answering `--version` like ours, packed and signed
//! as `scripts/release.sh` does with a throwaway key (`minisign -G`) that the service trusts
//! through the debug-only `--update-trust-key`. Skipped, loudly, without minisign or the
//! desktop pieces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rm_e2e::tray::{session_or_skip, Session, SessionOptions};
use rm_e2e::{bin, fake_github, routing_label, until, Daemon};
use rm_proto::UpdateState;
use rm_testkit::{JobSpec, JobStatus};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const FEED_REPO: &str = "runner-manager/runner-manager";
const CURRENT: &str = env!("CARGO_PKG_VERSION");

fn have_minisign() -> bool {
    let ok = Command::new("minisign").arg("-v").output().is_ok();
    if !ok {
        eprintln!(
            "SKIPPED: minisign is not installed (apt-get install minisign; scripts/test.sh does)"
        );
    }
    ok
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// A throwaway key pair: (public, secret).
fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    let (public, secret) = (dir.join("release.pub"), dir.join("release.key"));
    run(Command::new("minisign")
        .args(["-G", "-W", "-f", "-p"])
        .arg(&public)
        .arg("-s")
        .arg(&secret));
    (public, secret)
}

/// A signed release like `release.sh` makes whose binary is `script`; its assets.
fn script_release(dir: &Path, secret: &Path, version: &str) -> Vec<(String, PathBuf)> {
    let out = dir.join(format!("release-{version}"));
    let name = format!("runner-manager-{version}-linux-{}", std::env::consts::ARCH);
    let root = out.join("stage").join(&name);
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::create_dir_all(root.join("share/runner-manager")).unwrap();
    let bin = root.join("bin/runner-manager");
    fs::write(
        &bin,
        format!("#!/bin/sh\necho \"runner-manager {version}\"\n"),
    )
    .unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        root.join("share/runner-manager/portable.json"),
        format!(
            r#"{{"kind":"portable","version":"{version}","files":["bin/runner-manager","share/runner-manager/portable.json"]}}"#
        ),
    )
    .unwrap();
    let tarball = format!("{name}.tar.gz");
    run(Command::new("tar")
        .arg("-C")
        .arg(out.join("stage"))
        .arg("-czf")
        .arg(out.join(&tarball))
        .arg(&name));
    let sums = Command::new("sha256sum")
        .arg(&tarball)
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(sums.status.success());
    fs::write(out.join("SHA256SUMS"), sums.stdout).unwrap();
    for file in ["SHA256SUMS", tarball.as_str()] {
        run(Command::new("minisign")
            .arg("-S")
            .arg("-s")
            .arg(secret)
            .arg("-m")
            .arg(out.join(file))
            .arg("-t")
            .arg(format!("runner-manager {version} {file}"))
            .stdin(std::process::Stdio::null()));
    }
    fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect()
}

/// This build installed as the portable archive installs it: `<prefix>/bin/runner-manager`
/// and the marker listing it.
fn portable_install(prefix: &Path) -> PathBuf {
    fs::create_dir_all(prefix.join("bin")).unwrap();
    fs::create_dir_all(prefix.join("share/runner-manager")).unwrap();
    let exe = prefix.join("bin/runner-manager");
    fs::copy(bin("runner-manager"), &exe).unwrap();
    fs::write(
        prefix.join("share/runner-manager/portable.json"),
        format!(
            r#"{{"kind":"portable","version":"{CURRENT}","files":["bin/runner-manager","share/runner-manager/portable.json"]}}"#
        ),
    )
    .unwrap();
    exe
}

async fn update_notices(s: &mut Session) -> Vec<Value> {
    s.notifications()
        .await
        .into_iter()
        .filter(|n| {
            n["summary"]
                .as_str()
                .is_some_and(|t| t.contains("is available") || t.starts_with("Update"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_release_shows_in_the_menu_notifies_once_and_the_item_applies_it() {
    let Some(mut s) = session_or_skip(
        "a_newer_release_shows_in_the_menu_notifies_once_and_the_item_applies_it",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    if !have_minisign() {
        s.quit().await;
        return;
    }
    let work = tempfile::Builder::new()
        .prefix("rm-tray-update")
        .tempdir()
        .unwrap();
    let (public, secret) = keygen(work.path());
    let exe = portable_install(&work.path().join("prefix"));
    let before = fs::read(&exe).unwrap();
    let gh = fake_github().await;
    let key = public.display().to_string();
    let origin = gh.origin();
    let mut d = Daemon::start_exe(
        &gh,
        &exe,
        &[
            "--update",
            "notify",
            "--update-api-base",
            &origin,
            "--update-repo",
            FEED_REPO,
            "--update-check-secs",
            "1",
            "--update-trust-key",
            &key,
            // A stop at the end of the test does not wait for the job.
            "--drain-deadline",
            "1",
        ],
        &[],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let label = routing_label(
        &d.ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await,
    );
    let log = d.dir.path().join("tray.log");
    let socket = d.socket.display().to_string();
    let _tray = s.tray(None, &["--socket", &socket], &log).spawn().unwrap();
    let m = s
        .until_menu("idle, up to date", |m| m.header() == "Idle · 1 target")
        .await;
    assert!(
        m.has(&format!("About runner-manager {CURRENT}")),
        "{}",
        m.render()
    );
    assert!(!m.has("Update to"), "no release yet: {}", m.render());

    // A newer release: the menu offers it, one notification says it waits for the user.
    let assets = script_release(work.path(), &secret, "9.0.0");
    gh.publish_release(FEED_REPO, "v9.0.0", &assets);
    let m = s
        .until_menu("the update item", |m| m.has("Update to 9.0.0…"))
        .await;
    assert_eq!(
        m.find("Update to 9.0.0…").unwrap()["enabled"].as_bool(),
        Some(true),
        "{}",
        m.render()
    );
    let start = std::time::Instant::now();
    let notices = loop {
        let n = update_notices(&mut s).await;
        if !n.is_empty() {
            break n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no update notification: {:#?}",
            s.notifications().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert_eq!(notices[0]["summary"], "runner-manager 9.0.0 is available");
    let body = notices[0]["body"].as_str().unwrap();
    assert!(
        body.contains("Update to 9.0.0…") && body.contains("running jobs finish first"),
        "says it waits for the user: {body}"
    );
    let client = d.client().await;
    let u = client.update_status().await.unwrap();
    assert_eq!(u.state, UpdateState::Available, "{u:?}");
    assert_eq!(
        gh.counters().endpoint("release_asset").requests,
        0,
        "notify mode: nothing downloaded"
    );

    // The service restarts and announces it again; the tray reconnects: not notified twice.
    d.restart().await;
    gh.reset_counters();
    until(
        Duration::from_secs(30),
        "the restarted service's checks",
        || async { (gh.counters().endpoint("release_latest").requests >= 3).then_some(()) },
    )
    .await;
    s.until_menu("the update item after the restart", |m| {
        m.has("Update to 9.0.0…") && m.header() == "Idle · 1 target"
    })
    .await;
    let notices = update_notices(&mut s).await;
    assert_eq!(notices.len(), 1, "nothing twice: {notices:#?}");

    // `status --watch` shows it too, though the service announced it before the watch
    // connected: read from GET /v1/update at connect, as the tray does.
    let mut watch = d
        .cli()
        .args(["status", "--watch"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let shown = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("update: Update to 9.0.0") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(shown, Ok(true)),
        "status --watch never showed the update"
    );
    watch.kill().await.unwrap();

    // A job runs; clicking the item applies the update: verified, then waiting for the job.
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("build", &["self-hosted", &label]).duration(Duration::from_secs(300))],
    )
    .unwrap();
    s.until_menu("the running job", |m| m.header() == "Running 1 job")
        .await;
    s.click("Update to 9.0.0…").await;
    let m = s
        .until_menu("applying", |m| {
            m.has("Updating to 9.0.0 — running jobs finish first")
        })
        .await;
    assert!(!m.has("Update to 9.0.0…"), "{}", m.render());
    let client = d.client().await;
    let u = client.update_status().await.unwrap();
    assert_eq!(u.state, UpdateState::Applying, "{u:?}");
    assert_eq!(u.available_version.as_deref(), Some("9.0.0"));
    assert!(gh.counters().endpoint("release_asset").requests > 0);
    assert!(
        gh.jobs()
            .iter()
            .any(|j| j.name == "build" && j.status == JobStatus::InProgress),
        "the job still runs while the update waits"
    );
    assert!(
        !update_notices(&mut s)
            .await
            .iter()
            .any(|n| n["summary"].as_str().unwrap_or("").contains("failed")),
        "no failure"
    );

    // Stopped before the job ends: a stop during the wait wins, nothing is swapped.
    d.halt().await.unwrap();
    assert_eq!(fs::read(&exe).unwrap(), before, "the binary is unchanged");
    for (pid, _) in rm_testkit::harness::processes_under(d.dir.path()) {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    s.quit().await;
}
