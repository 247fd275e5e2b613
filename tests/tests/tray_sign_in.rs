//! The sign-in window, driven through WebDriver (WebKitWebDriver launches the real tray app):
//! against a service that cannot run the sign-in itself, the window says which side to update.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rm_e2e::tray::{session_or_skip, SessionOptions};
use rm_e2e::webdriver::{self, Driver};
use rm_e2e::{bin, fake_github, Daemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_window_names_the_fix_when_the_service_cannot_sign_in() {
    if !webdriver::available() {
        eprintln!("SKIPPED: WebKitWebDriver is missing (apt-get install webkit2gtk-driver)");
        return;
    }
    let Some(s) = session_or_skip(
        "the_sign_in_window_names_the_fix_when_the_service_cannot_sign_in",
        SessionOptions::default(),
    )
    .await
    else {
        return;
    };
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let socket = d.socket.display().to_string();
    let log = d.dir.path().join("webdriver.log");
    let driver = Driver::launch(
        &s,
        &bin("runner-manager-tray"),
        &["--socket", &socket, "--show", "sign-in"],
        &log,
    )
    .await;
    let status = driver
        .until_text("#status", "the service's answer", |t| {
            !t.is_empty() && !t.starts_with("Asking")
        })
        .await;
    if status.contains("older than this tray") {
        let fix = driver.text("#fix").await;
        assert!(fix.contains("Update runner-manager (the service)"), "{fix}");
        assert!(fix.contains("runner-manager auth login"), "{fix}");
        assert_eq!(driver.text("#retry").await, "Try again");
    } else {
        // A service that runs the sign-in shows the code instead.
        let code = driver.text("#user-code").await;
        assert_eq!(code.len(), 9, "a user code: {code:?} ({status})");
    }
    driver.quit().await;
    d.stop().await.unwrap();
    s.quit().await;
}
