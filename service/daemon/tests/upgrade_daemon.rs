//! The real daemon notices an upgraded binary: a copy of `runner-manager` runs from a temp
//! dir, its file is replaced the way a package manager does it, and the daemon ignores a
//! same-version rewrite but exits to hand over to a newer build.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures
#![cfg(unix)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn install(path: &Path, body: &str) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, body).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// Wait for a stderr line containing `needle`; panics (after killing the daemon) on timeout.
fn wait_for(rx: &mpsc::Receiver<String>, daemon: &mut Child, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return,
            Ok(_) => {}
            Err(_) => {
                let _ = daemon.kill();
                let _ = daemon.wait();
                panic!("the daemon never logged {needle:?}");
            }
        }
    }
}

#[test]
fn same_version_rewrite_is_ignored_and_a_newer_build_is_handed_over_to() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("runner-manager");
    fs::copy(env!("CARGO_BIN_EXE_runner-manager"), &bin).unwrap();
    let data = dir.path().join("data");
    let mut daemon = Command::new(&bin)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "daemon",
            "run",
            "--start-at",
            "boot",
            "--upgrade-poll-ms",
            "50",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = daemon.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    wait_for(&rx, &mut daemon, "runner-manager started");

    install(
        &bin,
        &format!(
            "#!/bin/sh\necho \"runner-manager {}\"\n",
            rm_daemon::VERSION
        ),
    );
    wait_for(&rx, &mut daemon, "same version");
    assert!(
        daemon.try_wait().unwrap().is_none(),
        "a same-version rewrite stopped the daemon"
    );

    install(&bin, "#!/bin/sh\necho \"runner-manager 99.0.0\"\n");
    wait_for(&rx, &mut daemon, "hand over to runner-manager 99.0.0");
    let status = rm_testkit::harness::wait_exit_within(&mut daemon, Duration::from_secs(10))
        .unwrap()
        .expect("the daemon did not exit after announcing the hand-over");
    // Non-zero so that `Restart=on-failure` starts the new build.
    assert_eq!(
        status.code(),
        Some(i32::from(rm_daemon::ExitCode::Internal.code()))
    );
}
