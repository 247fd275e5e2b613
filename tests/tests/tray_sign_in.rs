//! The sign-in window end to end, driven through WebDriver (WebKitWebDriver launches the real
//! tray app): the service runs the device flow; the window shows the code, the fake GitHub
//! approves (or denies) it, the window says where it stands. Afterwards the credential is in
//! the Secret Service (a login service's store) and in none of the tray's files, logs or
//! webview storage, and no device code is anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rm_e2e::tray::{session_or_skip, Session, SessionOptions};
use rm_e2e::webdriver::{self, Driver};
use rm_e2e::{bin, fake_github, fake_github_with, Daemon};
use rm_testkit::{FakeConfig, FakeGitHub};

fn webdriver_or_skip() -> bool {
    if !webdriver::available() {
        eprintln!("SKIPPED: WebKitWebDriver is missing (apt-get install webkit2gtk-driver)");
        return false;
    }
    true
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str, skip: &Path) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                if let Ok(bytes) = std::fs::read(&p) {
                    if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                        hits.push(p.display().to_string());
                    }
                }
            }
        }
    }
    hits
}

async fn open_window(s: &Session, d: &Daemon) -> Driver {
    let socket = d.socket.display().to_string();
    Driver::launch(
        s,
        &bin("runner-manager-window"),
        &["--socket", &socket, "--show", "sign-in"],
        &s.home.path().join("tray.log"),
    )
    .await
}

async fn user_code(driver: &Driver) -> String {
    driver
        .until_text("#user-code", "a user code", |t| {
            t.len() == 9 && t.contains('-')
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_through_the_window_leaves_the_credential_in_the_secret_service_only() {
    if !webdriver_or_skip() {
        return;
    }
    let Some(mut s) = session_or_skip(
        "signing_in_through_the_window_leaves_the_credential_in_the_secret_service_only",
        SessionOptions {
            keyring: true,
            ..SessionOptions::default()
        },
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    // A login service: its store is the user's keyring (the Secret Service of the session).
    let d = Daemon::start_env(
        &gh,
        &["--credential-store", "keyring"],
        &[("DBUS_SESSION_BUS_ADDRESS", &s.bus)],
    )
    .await;
    // The tray (icon process) raises the notifications; the window is its own process.
    let socket = d.socket.display().to_string();
    let _tray = s
        .tray(
            None,
            &["--socket", &socket],
            &s.home.path().join("icon.log"),
        )
        .spawn()
        .unwrap();
    s.until_menu("the tray connected", |m| m.header() == "Signed out")
        .await;
    let driver = open_window(&s, &d).await;
    let code = user_code(&driver).await;
    let open = driver.text("#open").await;
    let origin = gh.origin();
    let host = origin.trim_start_matches("http://");
    assert_eq!(
        open,
        format!("Open {host}/login/device"),
        "the service's GitHub"
    );
    assert!(driver
        .text("#time-left")
        .await
        .starts_with("The code is valid for 1"));

    gh.approve_device(&code, "octo").unwrap();
    let status = driver
        .until_text("#status", "signed in", |t| t.starts_with("Signed in as"))
        .await;
    assert_eq!(status, "Signed in as octo.");
    let auth = d.client().await.status().await.unwrap().auth;
    assert!(
        matches!(&auth, rm_proto::AuthState::SignedIn { login, .. } if login == "octo"),
        "{auth:?}"
    );
    // The notification.
    let start = std::time::Instant::now();
    while !s
        .notifications()
        .await
        .iter()
        .any(|n| n["summary"] == "Signed in as octo")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no sign-in notification"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The credential is in the Secret Service.
    let secret = std::process::Command::new("secret-tool")
        .args(["search", "--all", "--unlock", "service", "runner-manager"])
        .env("DBUS_SESSION_BUS_ADDRESS", &s.bus)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&secret.stdout).to_string()
        + &String::from_utf8_lossy(&secret.stderr);
    let tokens: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("ghu_") || w.starts_with("ghr_"))
        .map(str::to_owned)
        .collect();
    assert!(
        tokens.iter().any(|t| t.starts_with("ghu_"))
            && tokens.iter().any(|t| t.starts_with("ghr_")),
        "the Secret Service holds the pair: {text}"
    );
    // And nowhere in the tray's HOME, XDG directories (webview storage included) or its log.
    driver.quit().await;
    let keyring = s.home.path().join("keyring");
    let mut secrets = tokens.clone();
    secrets.extend(gh.issued_device_codes());
    for secret in &secrets {
        let hits = files_containing(s.home.path(), secret, &keyring);
        assert!(hits.is_empty(), "a secret reached {hits:?}");
    }
    assert!(
        !files_containing(s.home.path(), "device_code", &keyring)
            .iter()
            .any(|f| f.ends_with("tray.log")),
        "the tray's log never mentions a device code"
    );
    d.stop().await.unwrap();
    s.quit().await;
}

async fn restart_offered(driver: &Driver, gh: &FakeGitHub, status_says: &str, button: &str) {
    let status = driver
        .until_text("#status", status_says, |t| t.contains(status_says))
        .await;
    assert!(!status.is_empty());
    assert_eq!(driver.text("#retry").await, button);
    let old = driver.text("#user-code").await;
    driver.click("#retry").await;
    let new = driver
        .until_text("#user-code", "a new code", |t| t.len() == 9 && t != old)
        .await;
    assert_ne!(new, old);
    assert!(gh.issued_device_codes().len() >= 2, "a new device flow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_sign_in_says_it_was_cancelled_in_the_browser_and_offers_to_retry() {
    if !webdriver_or_skip() {
        return;
    }
    let Some(s) = session_or_skip(
        "a_denied_sign_in_says_it_was_cancelled_in_the_browser_and_offers_to_retry",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let driver = open_window(&s, &d).await;
    let code = user_code(&driver).await;
    gh.deny_device(&code).unwrap();
    restart_offered(&driver, &gh, "cancelled in the browser", "Try again").await;
    driver.quit().await;
    d.stop().await.unwrap();
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_code_offers_a_new_one() {
    if !webdriver_or_skip() {
        return;
    }
    let Some(s) = session_or_skip(
        "an_expired_code_offers_a_new_one",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github_with(FakeConfig {
        device_interval: Duration::from_secs(1),
        device_expires_in: Duration::from_secs(4),
        ..FakeConfig::default()
    })
    .await;
    let d = Daemon::start(&gh).await;
    let driver = open_window(&s, &d).await;
    user_code(&driver).await;
    restart_offered(&driver, &gh, "ran out", "Get a new code").await;
    driver.quit().await;
    d.stop().await.unwrap();
    s.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_flow_disabled_for_the_app_names_the_fix() {
    if !webdriver_or_skip() {
        return;
    }
    let Some(s) = session_or_skip(
        "device_flow_disabled_for_the_app_names_the_fix",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    gh.set_device_flow_enabled(false);
    let d = Daemon::start(&gh).await;
    let driver = open_window(&s, &d).await;
    let status = driver
        .until_text("#status", "the refusal", |t| {
            t.contains("device flow is not enabled")
        })
        .await;
    assert!(!status.is_empty());
    let fix = driver.text("#fix").await;
    assert!(fix.contains("Enable Device Flow"), "{fix}");
    assert_eq!(driver.text("#retry").await, "Try again");
    assert_eq!(driver.text("#user-code").await, "", "no code to show");
    driver.quit().await;
    d.stop().await.unwrap();
    s.quit().await;
}
