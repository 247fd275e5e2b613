//! The single-instance lock between real processes: this test binary re-executed as a lock
//! holder, and the real `runner-manager daemon run`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rm_daemon::lock::{InstanceLock, LockError, RETRY_FOR};
use rm_daemon::ExitCode;

const CHILD_ENV: &str = "RM_TEST_LOCK_HOLDER_DIR";

/// Not a test of its own: when re-executed with CHILD_ENV set, holds the lock until its
/// stdin closes. Run normally it returns at once.
#[test]
fn lock_holder_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let lock = InstanceLock::acquire(Path::new(&dir)).unwrap();
    println!("LOCKED {}", lock.holder().pid);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[allow(clippy::zombie_processes)] // returned to the caller, which waits for it
fn spawn_holder(dir: &Path) -> (Child, u32) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let status = child.wait();
            panic!("holder exited before locking: {status:?}");
        }
        // libtest prints "test lock_holder_child ... " before the test's own output.
        if let Some((_, pid)) = line.split_once("LOCKED ") {
            let pid = pid.trim().parse().unwrap();
            return (child, pid);
        }
    }
}

#[test]
fn a_second_process_is_refused_naming_the_holder_until_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, pid) = spawn_holder(dir.path());
    assert_eq!(pid, child.id());

    let started = Instant::now();
    let err = InstanceLock::acquire(dir.path()).unwrap_err();
    assert!(
        started.elapsed() >= RETRY_FOR,
        "refusal believed before the retry window"
    );
    match &err {
        LockError::Held { holder, .. } => assert_eq!(holder.as_ref().unwrap().pid, pid),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.exit_code(), ExitCode::Conflict);
    assert!(err.to_string().contains(&format!("pid {pid}")), "{err}");

    // Closing stdin ends the holder; its lock dies with it.
    drop(child.stdin.take());
    child.wait().unwrap();
    let lock = InstanceLock::acquire(dir.path()).unwrap();
    assert_eq!(lock.holder().pid, std::process::id());
}

#[test]
fn a_lock_released_within_the_retry_window_is_taken() {
    // The holder goes away ~100 ms into our retries (as a forked child's copy would).
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _) = spawn_holder(dir.path());
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(child.stdin.take());
        child.wait().unwrap();
    });
    // A generous window so a slow machine cannot make this flaky; the point is that a
    // refusal seen first does not end the attempt.
    let lock = InstanceLock::acquire_with_retry(dir.path(), Duration::from_secs(10));
    releaser.join().unwrap();
    assert!(lock.is_ok(), "{lock:?}");
}

/// Starts `runner-manager daemon run` on `data_dir` and waits until it has written its pid
/// into the lock file (it holds the lock).
fn spawn_locked_daemon(data_dir: &Path) -> Child {
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_runner-manager"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(["daemon", "run", "--start-at", "boot"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock_file = data_dir.join("runner-manager.lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&lock_file)
        .map(|t| t.contains(&format!("pid={}", daemon.id())))
        .unwrap_or(false)
    {
        if Instant::now() > deadline {
            let _ = daemon.kill();
            let _ = daemon.wait();
            panic!("the daemon never took the lock");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon
}

#[test]
fn a_second_daemon_exits_with_the_conflict_code() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_runner-manager");
    let mut first = spawn_locked_daemon(dir.path());
    let second = Command::new(bin)
        .args(["--data-dir"])
        .arg(dir.path())
        .args(["daemon", "run", "--start-at", "boot"])
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(
        second.status.code(),
        Some(i32::from(ExitCode::Conflict.code()))
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains(&format!("pid {}", first.id())), "{stderr}");
    assert!(stderr.contains("--data-dir"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_daemon_cleanly_and_frees_the_lock() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let dir = tempfile::tempdir().unwrap();
    let mut daemon = spawn_locked_daemon(dir.path());
    kill(
        Pid::from_raw(i32::try_from(daemon.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = rm_testkit::harness::wait_exit_within(&mut daemon, Duration::from_secs(10))
        .unwrap()
        .expect("daemon ignored SIGTERM");
    assert_eq!(status.code(), Some(0));
    InstanceLock::acquire(dir.path()).unwrap();
}
