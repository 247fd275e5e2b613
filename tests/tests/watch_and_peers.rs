//! The watch stream (snapshot, then changes) and a refused local user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rm_e2e::{bin, fake_github, is_root, Daemon};
use rm_proto::WatchMessage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_a_snapshot_then_the_changes() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let client = d.client().await;
    let mut watch = client.watch().await.unwrap();
    match watch.next().await {
        Some(Ok(WatchMessage::Snapshot { status })) => {
            assert!(status.targets.is_empty(), "{status:?}")
        }
        other => panic!("first message is not a snapshot: {other:?}"),
    }
    d.ok(&["repo", "add", "octo/hello", "--disabled"]).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match watch.next().await {
                Some(Ok(WatchMessage::Changed { status }))
                    if status.targets.iter().any(|t| t.target == "octo/hello") =>
                {
                    return
                }
                Some(Ok(_)) => continue,
                other => panic!("watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("a change naming octo/hello within 10 s");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_is_refused_with_exit_code_4() {
    if !is_root() {
        eprintln!("skipped: running the CLI as another uid needs root (setpriv)");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    let o = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin("runner-manager"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("--data-dir")
        .arg(d.dir.path().join("nobody"))
        .args(["repo", "add", "octo/hello"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(err.contains("not allowed"), "{err}");
    let targets = d.client().await.targets().await.unwrap();
    assert!(
        targets.is_empty(),
        "a refused user changed something: {targets:?}"
    );
    d.stop().await.unwrap();
}
