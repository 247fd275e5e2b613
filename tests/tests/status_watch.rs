//! `runner-manager status --watch`: a line per change from the shared model, and it follows
//! the service through a stop and a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use rm_e2e::{fake_github, Daemon};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;

/// Reads lines until one contains `needle`; returns every line read.
async fn until_line(lines: &mut Lines<BufReader<ChildStdout>>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let hit = line.contains(needle);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no line with {needle:?} within 20 s; got {seen:#?}"
    );
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_prints_changes_and_follows_a_restart() {
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    let mut child = d
        .cli()
        .args(["status", "--watch"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    until_line(&mut lines, "Signed out").await;
    d.sign_in(&gh, "octo").await;
    until_line(&mut lines, "Idle · no targets yet").await;
    d.ok(&["repo", "add", "octo/hello", "--disabled"]).await;
    until_line(&mut lines, "Idle · 1 target").await;

    d.halt().await.unwrap();
    let seen = until_line(&mut lines, "Service not running").await;
    let stopped = until_line(&mut lines, "notify: runner-manager service stopped").await;
    assert!(
        stopped
            .iter()
            .chain(&seen)
            .any(|l| l.contains("runner-manager daemon run")),
        "the line names the command that starts it: {seen:#?} {stopped:#?}"
    );
    d.resume().await;
    until_line(&mut lines, "Idle · 1 target").await;
    child.kill().await.unwrap();
    d.stop().await.unwrap();
}
