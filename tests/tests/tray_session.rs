//! The tray in a desktop session: start at login (the autostart entry, from an install path
//! with a space, started the way a desktop starts it), a single instance (a second launch
//! exits and the first shows its dashboard), and a desktop without a tray host (the dashboard
//! opens instead of an invisible icon).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rm_e2e::bin;
use rm_e2e::tray::{session_or_skip, Session, SessionOptions};
use serde_json::json;

/// A socket where nothing listens: these tests are about the session, not the service.
fn nowhere(s: &Session) -> String {
    s.home.path().join("no-service.sock").display().to_string()
}

async fn until_windows(s: &mut Session, what: &str, check: impl Fn(&[String]) -> bool) {
    let start = Instant::now();
    loop {
        let w = s.windows().await;
        if check(&w) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}; windows: {w:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The tray binary at a path with a space (a hard link when it can be, else a copy).
fn installed_with_a_space(root: &Path) -> PathBuf {
    let dir = root.join("Runner Manager");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("runner-manager-tray");
    if std::fs::hard_link(bin("runner-manager-tray"), &exe).is_err() {
        std::fs::copy(bin("runner-manager-tray"), &exe).unwrap();
    }
    exe
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_login_writes_an_entry_that_starts_the_tray_from_a_path_with_a_space() {
    let Some(mut s) = session_or_skip(
        "start_at_login_writes_an_entry_that_starts_the_tray_from_a_path_with_a_space",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let exe = installed_with_a_space(s.home.path());
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut tray = s
        .tray(Some(&exe), &["--socket", &sock], &log)
        .spawn()
        .unwrap();
    let m = s
        .until_menu("service not running", |m| {
            m.header() == "Service not running"
        })
        .await;
    assert_eq!(m.checked("Start at login"), Some(false), "{}", m.render());

    s.click("Start at login").await;
    let entry = s
        .home
        .path()
        .join(".config/autostart/runner-manager-tray.desktop");
    s.until_menu("start at login checked", |m| {
        m.checked("Start at login") == Some(true)
    })
    .await;
    let text = std::fs::read_to_string(&entry).unwrap();
    let exec = text.lines().find(|l| l.starts_with("Exec=")).unwrap();
    assert_eq!(
        exec,
        format!("Exec=\"{}\" --autostart", exe.display()),
        "quoted as the Desktop Entry spec asks:\n{text}"
    );

    // Quit, then start it as the desktop does at login.
    s.click("Quit tray").await;
    let status = tokio::time::timeout(Duration::from_secs(20), tray.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let before = s.cmd(json!({"cmd": "items"})).await["items"]
        .as_array()
        .unwrap()
        .len();
    let launched = tokio::process::Command::new("gio")
        .arg("launch")
        .arg(&entry)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(s.env())
        // The tray it starts keeps what it inherits open: no pipes to wait on.
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(launched.success(), "gio launch: {launched:?}");
    let start = Instant::now();
    loop {
        let items = s.cmd(json!({"cmd": "items"})).await["items"]
            .as_array()
            .unwrap()
            .len();
        if items > before {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the autostart entry did not start the tray ({exec})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The instance started at login turns it off again: the entry goes.
    let m = s
        .until_menu("the login instance's menu", |m| {
            m.header() == "Service not running"
        })
        .await;
    assert_eq!(m.checked("Start at login"), Some(true));
    s.click("Start at login").await;
    s.until_menu("start at login unchecked", |m| {
        m.checked("Start at login") == Some(false)
    })
    .await;
    assert!(!entry.exists(), "the entry is removed");
    s.click("Quit tray").await;
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_launch_exits_and_the_first_shows_its_dashboard() {
    let Some(mut s) = session_or_skip(
        "a_second_launch_exits_and_the_first_shows_its_dashboard",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut first = s.tray(None, &["--socket", &sock], &log).spawn().unwrap();
    s.until_menu("the first instance", |m| {
        m.header() == "Service not running"
    })
    .await;
    assert!(!s.windows().await.iter().any(|w| w == "runner-manager"));
    let log2 = s.home.path().join("tray2.log");
    let second = s
        .tray(None, &["--socket", &sock], &log2)
        .spawn()
        .unwrap()
        .wait_with_output();
    let status = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("the second launch exits")
        .unwrap()
        .status;
    assert!(
        status.success(),
        "{status:?}: {}",
        std::fs::read_to_string(&log2).unwrap()
    );
    until_windows(&mut s, "the first instance's dashboard", |w| {
        w.iter().any(|n| n == "runner-manager")
    })
    .await;
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first instance runs on"
    );
    let items = s.cmd(json!({"cmd": "items"})).await;
    assert_eq!(items["items"].as_array().unwrap().len(), 1, "{items}");
    s.click("Quit tray").await;
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tray_host_the_dashboard_opens_and_says_why() {
    let Some(mut s) = session_or_skip(
        "without_a_tray_host_the_dashboard_opens_and_says_why",
        SessionOptions {
            no_watcher: true,
            ..SessionOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let log = s.home.path().join("tray.log");
    let sock = nowhere(&s);
    let mut tray = s.tray(None, &["--socket", &sock], &log).spawn().unwrap();
    until_windows(&mut s, "the dashboard", |w| {
        w.iter().any(|n| n == "runner-manager")
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("StatusNotifierWatcher"), "{text}");
    assert!(tray.try_wait().unwrap().is_none(), "it runs in its window");
    s.quit().await;
}
