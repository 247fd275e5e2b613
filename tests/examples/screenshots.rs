//! Regenerates `docs/screenshots/*.png` (run by `scripts/screenshots.sh`): the tray menu as the
//! desktop's tray host reads it over D-Bus (drawn as an image: a headless session has no panel
//! to capture), the sign-in window and the dashboard in their main states, light and dark, and
//! the dashboard of a host in a pool of two.
//! Real service, fake GitHub, the tray under Xvfb.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rm_e2e::pool::{join, pool_status};
use rm_e2e::postgres::Cluster;
use rm_e2e::tray::{Menu, Session, SessionOptions};
use rm_e2e::{fake_github, routing_label, Daemon};
use rm_testkit::{Behaviour, Conclusion, EndpointMatch, Fault, FaultRule, JobSpec, JobStatus};

/// The label of the pool in the pool screenshot.
const POOL_LABEL: &str = "rm-pool-linux-x64";

/// Draws a menu like a panel's popup (ImageMagick's `label:`).
fn draw_menu(menu: &Menu, title: &str, dark: bool, out: &Path) {
    let text = format!(
        "{title}\n\n{}",
        menu.render().replace("  (not clickable)", "")
    );
    let (bg, fg) = if dark {
        ("#1e1e1e", "#e6edf3")
    } else {
        ("#ffffff", "#1f2328")
    };
    let status = std::process::Command::new("/usr/bin/convert")
        .args([
            "-background",
            bg,
            "-fill",
            fg,
            "-font",
            "DejaVu-Sans",
            "-pointsize",
            "15",
        ])
        .arg(format!("label:{text}"))
        .args(["-bordercolor", bg, "-border", "18x14"])
        .args(["-bordercolor", "#8c959f", "-border", "1"])
        .arg(out)
        .status()
        .expect("ImageMagick's convert");
    assert!(status.success(), "convert failed for {}", out.display());
}

async fn settle() {
    // Let the webview paint the last model before the capture.
    tokio::time::sleep(Duration::from_millis(1200)).await;
}

async fn until<F: Fn() -> bool>(what: &str, check: F) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("docs/screenshots"));
    std::fs::create_dir_all(&out).unwrap();
    let shot = |name: &str| out.join(format!("{name}.png"));

    for dark in [false, true] {
        let mut s = Session::start(SessionOptions::default()).await;
        let gh = fake_github().await;
        gh.create_org("acme").unwrap();
        gh.add_org_member("acme", "octo", true).unwrap();
        gh.create_repo("acme/api").unwrap();
        gh.create_installation("acme", rm_testkit::InstallationRepos::All)
            .unwrap();
        let mut d = Daemon::start(&gh).await;
        let socket = d.socket.display().to_string();
        let log = d.dir.path().join("tray.log");
        let mut cmd = s.tray(None, &["--socket", &socket], &log);
        if dark {
            cmd.env("GTK_THEME", "Adwaita:dark");
        }
        let _tray = cmd.spawn().unwrap();
        let theme = if dark { "-dark" } else { "" };

        let m = s
            .until_menu("signed out", |m| m.header() == "Signed out")
            .await;
        if !dark {
            draw_menu(
                &m,
                "Tray menu · signed out",
                dark,
                &shot("tray-menu-signed-out"),
            );
            s.click("Sign in…").await;
            let start = Instant::now();
            while !s
                .windows()
                .await
                .iter()
                .any(|w| w.starts_with("Sign in to GitHub"))
            {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no sign-in window: {:?}",
                    s.windows().await
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            settle().await;
            s.screenshot(&shot("sign-in"), Some("Sign in to GitHub - runner-manager"))
                .await;
        }

        d.sign_in(&gh, "octo").await;
        d.ok(&["host", "set-capacity", "2"]).await;
        let label = routing_label(
            &d.ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
                .await,
        );
        d.ok(&["org", "add", "acme", "--monitor-only"]).await;
        s.until_menu("idle", |m| m.header() == "Idle · 2 targets")
            .await;
        s.click("Open dashboard").await;
        settle().await;
        s.screenshot(
            &shot(&format!("dashboard-idle{theme}")),
            Some("runner-manager"),
        )
        .await;

        gh.queue_run(
            "octo/hello",
            vec![
                JobSpec::new("build", &["self-hosted", &label]).duration(Duration::from_secs(40)),
                JobSpec::new("test (linux)", &["self-hosted", &label])
                    .duration(Duration::from_secs(40)),
                // The host's 2 slots are taken: this one waits (the dashboard says why).
                JobSpec::new("docs", &["self-hosted", &label]).duration(Duration::from_secs(2)),
            ],
        )
        .unwrap();
        // A job for the monitor-only organization: watched, never started.
        let watched = gh
            .queue_run(
                "acme/api",
                vec![JobSpec::new("deploy", &["self-hosted", &label])],
            )
            .unwrap();
        let m = s
            .until_menu("busy", |m| m.header() == "Running 2 jobs")
            .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let m = s.layout().await.map(Menu).unwrap_or(m);
        draw_menu(
            &m,
            "Tray menu · running jobs",
            dark,
            &shot(&format!("tray-menu-busy{theme}")),
        );
        settle().await;
        s.screenshot(
            &shot(&format!("dashboard-busy{theme}")),
            Some("runner-manager"),
        )
        .await;
        for job in gh.jobs().iter().filter(|j| j.run_id == watched) {
            gh.finish_job(job.id, Conclusion::Cancelled).unwrap();
        }
        until("the jobs done", || {
            gh.jobs().iter().all(|j| j.status == JobStatus::Completed)
        })
        .await;

        if !dark {
            // A pool of two hosts on one label: each host's room and who runs what.
            let pg = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
            let d2 = Daemon::start(&gh).await;
            d2.sign_in(&gh, "octo").await;
            d2.ok(&["host", "set-capacity", "2"]).await;
            join(&d, &pg, POOL_LABEL, "box1").await;
            join(&d2, &pg, POOL_LABEL, "box2").await;
            d.ok(&["repo", "set", "octo/hello", "--pool"]).await;
            d2.ok(&["repo", "add", "octo/hello", "--pool"]).await;
            gh.queue_run(
                "octo/hello",
                ["build", "test (linux)", "test (macos-arm)", "lint"]
                    .iter()
                    .map(|name| {
                        JobSpec::new(name, &["self-hosted", POOL_LABEL])
                            .duration(Duration::from_secs(60))
                    })
                    .collect(),
            )
            .unwrap();
            // Both hosts shown running jobs in this host's view of the pool.
            let start = Instant::now();
            loop {
                let pool = pool_status(&d).await;
                let busy = pool["hosts"].as_array().map_or(0, |hosts| {
                    hosts
                        .iter()
                        .filter(|h| {
                            h["running"]
                                .as_array()
                                .is_some_and(|r| r.iter().any(|r| r["job_id"].is_u64()))
                        })
                        .count()
                });
                if busy == 2 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(90),
                    "both pool hosts running jobs: {pool}"
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            settle().await;
            s.screenshot(&shot("dashboard-pool"), Some("runner-manager"))
                .await;
            for job in gh
                .jobs()
                .iter()
                .filter(|j| j.status != JobStatus::Completed)
            {
                gh.finish_job(job.id, Conclusion::Cancelled).unwrap();
            }
            until("the pool's jobs done and its runners gone", || {
                gh.jobs().iter().all(|j| j.status == JobStatus::Completed)
                    && gh.runners().is_empty()
            })
            .await;
            d2.stop().await.unwrap();
            d.ok(&["pool", "leave"]).await;
            tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();

            // A failing launch: attention, with the fix.
            gh.inject_fault(FaultRule::times(
                EndpointMatch::name("repo_jitconfig"),
                Fault::Status5xx {
                    status: 502,
                    rate: 1.0,
                },
                3,
            ));
            gh.queue_run(
                "octo/hello",
                vec![JobSpec::new("lint", &["self-hosted", &label])
                    .duration(Duration::from_millis(300))],
            )
            .unwrap();
            let m = s
                .until_menu("attention", |m| m.header().starts_with("Needs attention"))
                .await;
            draw_menu(
                &m,
                "Tray menu · a runner failed",
                dark,
                &shot("tray-menu-attention"),
            );
            until("the lint job done", || {
                gh.jobs().iter().all(|j| j.status == JobStatus::Completed)
            })
            .await;
            // A runner that dies in the middle of its job: the failure says which job and how
            // the runner ended.
            gh.queue_run(
                "octo/hello",
                vec![JobSpec::new("integration", &["self-hosted", &label])
                    .behaviour(Behaviour::Crash)],
            )
            .unwrap();
            let start = Instant::now();
            loop {
                let out = d.run(&["status", "--json"]).await;
                let crashed = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                    .ok()
                    .and_then(|v| {
                        v["recent_failures"]
                            .as_array()
                            .map(|f| f.iter().any(|f| f["reason"] == "runner_crashed"))
                    })
                    .unwrap_or(false);
                if crashed {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(90),
                    "timed out: the crash"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            settle().await;
            s.screenshot(&shot("dashboard-failure"), Some("runner-manager"))
                .await;

            d.halt().await.unwrap();
            let m = s
                .until_menu("service down", |m| m.header() == "Service not running")
                .await;
            draw_menu(
                &m,
                "Tray menu · service not running",
                dark,
                &shot("tray-menu-service-down"),
            );
            settle().await;
            s.screenshot(&shot("dashboard-service-down"), Some("runner-manager"))
                .await;
            d.resume().await;
        }
        d.stop().await.unwrap();
        s.quit().await;
    }
    println!("screenshots written to {}", out.display());
}
