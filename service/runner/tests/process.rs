//! Spawning, inspecting and stopping real listener processes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::account::ResolvedRunAs;
use rm_runner::{
    materialize, JitConfig, MaterializeOptions, PackageCache, PackageInfo, ProcessHost,
    ProcessIdentity, ProcessState, RunnerRoot, Runtime, RuntimeName, SpawnRequest, StopOutcome,
};
use std::fs;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

struct Fixture {
    _files: tempfile::TempDir,
    work: tempfile::TempDir,
    pkg_dir: std::path::PathBuf,
    root: RunnerRoot,
}

async fn fixture(info: impl FnOnce(&Path) -> PackageInfo) -> Fixture {
    let files = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let info = info(files.path());
    let cache = PackageCache::open(work.path().join("c"), DirSource::new(files.path())).unwrap();
    let pkg_dir = cache.ensure(&info).await.unwrap().dir;
    let root = RunnerRoot::prepare(work.path().join("r"), ResolvedRunAs::ServiceUser).unwrap();
    Fixture {
        _files: files,
        work,
        pkg_dir,
        root,
    }
}

fn runtime(f: &Fixture, name: &str) -> Runtime {
    let rt = f
        .root
        .create_runtime(&RuntimeName::new(name).unwrap())
        .unwrap();
    materialize(&f.pkg_dir, &rt.path, &MaterializeOptions::default()).unwrap();
    rt
}

fn spawn_script(host: &ProcessHost, rt: &Runtime, mode: &str) -> ProcessIdentity {
    let jit = JitConfig::new("not-used-by-the-script");
    let spawned = host
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &jit,
            owner: rt.owner,
            extra_env: vec![("RM_TEST_MODE".into(), mode.into())],
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
        .unwrap();
    poll(WAIT, || rt.path.join("ready").exists().then_some(())).expect("listener got ready");
    spawned.identity
}

fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn fake_listener_stays_alive_retrying_and_the_secret_is_only_in_its_environment() {
    let f = fixture(|d| kit_package(d).unwrap_or_else(|| script_package(d, "2.336.0"))).await;
    let rt = runtime(&f, "live");
    // A closed loopback port: the listener keeps retrying to connect.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "tok3nTOKENtok3nTOKENtok3nTOKENtok3nTOKEN";
    let blob = jit_blob(&format!("http://127.0.0.1:{port}"), token);
    let jit = JitConfig::new(blob.clone());
    let host = ProcessHost::allowing_root();
    let spawned = host
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &jit,
            owner: None,
            extra_env: vec![],
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
        .unwrap();
    let id = spawned.identity;
    assert!(!format!("{spawned:?}").contains(&blob));

    // It wrote its diagnostics and is still running (retrying), not exited.
    poll(WAIT, || {
        fs::read_dir(rt.path.join("_diag"))
            .ok()?
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("Runner_"))
            .then_some(())
    })
    .expect("a Runner_ diag log");
    assert_eq!(host.inspect(id).unwrap(), ProcessState::Alive);
    if rt.path.join("bin/Runner.Worker").exists() {
        // The testkit's listener (not the script fallback) says why it is still waiting.
        poll(WAIT, || {
            fs::read_to_string(&spawned.log)
                .ok()?
                .contains("Runner connect error")
                .then_some(())
        })
        .expect("the listener reports it is retrying the connection");
        assert_eq!(host.inspect(id).unwrap(), ProcessState::Alive);
    }

    let cmdline = fs::read(format!("/proc/{}/cmdline", id.pid)).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("Runner.Listener"), "{cmdline}");
    assert!(!cmdline.contains(&blob) && !cmdline.contains(token));
    let environ = fs::read(format!("/proc/{}/environ", id.pid)).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(environ.contains(&format!("ACTIONS_RUNNER_INPUT_JITCONFIG={blob}")));
    assert!(environ.contains(&format!("TMPDIR={}", rt.path.join("_tmp").display())));
    // Nothing of the service's own environment beyond the allow-list leaks in.
    assert!(!environ.contains("CARGO_PKG_NAME="));
    // The secret is in no file of the runtime that we wrote (the listener's own config files
    // are its business); in particular not in its console log.
    let log = fs::read_to_string(&spawned.log).unwrap_or_default();
    assert!(!log.contains(&blob) && !log.contains(token));

    assert_eq!(host.stop(id, WAIT).await.unwrap(), StopOutcome::Terminated);
    assert!(!pid_alive(id.pid));
    let state = poll(WAIT, || match host.inspect(id).unwrap() {
        ProcessState::Exited { status: Some(s) } => Some(s),
        _ => None,
    })
    .expect("exit status reaped");
    assert!(state.code.is_some() || state.signal.is_some());
}

#[tokio::test]
async fn stop_terminates_the_whole_group() {
    let f = fixture(|d| script_package(d, "2.336.0")).await;
    let rt = runtime(&f, "grp");
    let host = ProcessHost::allowing_root();
    let id = spawn_script(&host, &rt, "child");
    let child: u32 = fs::read_to_string(rt.path.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(child));
    // The listener leads its own group and the child is in it.
    let pgrp = |pid: u32| -> u32 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(pgrp(id.pid), id.pid);
    assert_eq!(pgrp(child), id.pid);
    // Recovery can find the listener (only it: the child does not lead a group) by runtime.
    assert_eq!(host.find_in_runtime(&rt.path).unwrap(), vec![id]);
    assert_eq!(host.stop(id, WAIT).await.unwrap(), StopOutcome::Terminated);
    assert!(!pid_alive(id.pid));
    assert!(!pid_alive(child), "the child in the group was stopped too");
    assert_eq!(host.stop(id, WAIT).await.unwrap(), StopOutcome::AlreadyGone);
}

#[tokio::test]
async fn a_group_ignoring_sigterm_is_killed_after_the_grace_period() {
    let f = fixture(|d| script_package(d, "2.336.0")).await;
    let rt = runtime(&f, "stub");
    let host = ProcessHost::allowing_root();
    let id = spawn_script(&host, &rt, "stubborn-child");
    let child: u32 = poll(WAIT, || {
        fs::read_to_string(rt.path.join("child.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
    .expect("child pid");
    let started = std::time::Instant::now();
    let outcome = host.stop(id, Duration::from_millis(300)).await.unwrap();
    // The listener itself dies on SIGTERM; its child ignores it and needs the group SIGKILL.
    assert_eq!(outcome, StopOutcome::Killed);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!pid_alive(id.pid));
    assert!(!pid_alive(child));
}

#[tokio::test]
async fn exit_status_is_reported_and_no_zombie_is_left() {
    let f = fixture(|d| script_package(d, "2.336.0")).await;
    let rt = runtime(&f, "ex");
    let host = ProcessHost::allowing_root();
    let jit = JitConfig::new("x");
    let id = host
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &jit,
            owner: None,
            extra_env: vec![("RM_TEST_MODE".into(), "exit3".into())],
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
        .unwrap()
        .identity;
    let status = poll(WAIT, || match host.inspect(id).unwrap() {
        ProcessState::Exited { status: Some(s) } => Some(s),
        _ => None,
    })
    .expect("exited");
    assert_eq!(status.code, Some(3));
    assert!(
        fs::metadata(format!("/proc/{}", id.pid)).is_err(),
        "reaped, not a zombie"
    );
    host.forget(id);
    assert_eq!(host.inspect(id).unwrap(), ProcessState::Gone);
}

#[tokio::test]
async fn a_recycled_pid_is_gone_and_left_alone() {
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let real = fs::read_to_string(format!("/proc/{}/stat", victim.id())).unwrap();
    let start: u64 = real
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let host = ProcessHost::allowing_root();
    let genuine = ProcessIdentity {
        pid: victim.id(),
        start_time: start,
    };
    assert_eq!(host.inspect(genuine).unwrap(), ProcessState::Alive);
    let fabricated = ProcessIdentity {
        pid: victim.id(),
        start_time: start + 1,
    };
    assert_eq!(host.inspect(fabricated).unwrap(), ProcessState::Gone);
    assert_eq!(
        host.stop(fabricated, Duration::from_millis(100))
            .await
            .unwrap(),
        StopOutcome::AlreadyGone
    );
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the unrelated process was not signalled"
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
    assert_eq!(host.inspect(genuine).unwrap(), ProcessState::Gone);
}

#[tokio::test]
async fn a_root_runner_is_refused_unless_explicitly_allowed() {
    let f = fixture(|d| script_package(d, "2.336.0")).await;
    let rt = runtime(&f, "root");
    let req = SpawnRequest {
        runtime: &rt.path,
        jit_config: &JitConfig::new("x"),
        owner: Some(rm_runner::Ownership { uid: 0, gid: 0 }),
        extra_env: vec![],
        groups: None,
        sandbox: None,
        cgroup: None,
        layers: None,
    };
    let err = ProcessHost::new().spawn(&req).unwrap_err();
    assert!(
        matches!(err, rm_runner::ProcessError::WouldRunAsRoot),
        "{err:?}"
    );
    assert!(!rt.path.join("_diag").exists(), "nothing was started");
    if nix::unistd::geteuid().is_root() {
        let req = SpawnRequest { owner: None, ..req };
        assert!(matches!(
            ProcessHost::new().spawn(&req),
            Err(rm_runner::ProcessError::WouldRunAsRoot)
        ));
    }
}

#[tokio::test]
async fn spawn_refuses_a_runtime_without_a_listener() {
    let f = fixture(|d| script_package(d, "2.336.0")).await;
    let rt = f
        .root
        .create_runtime(&RuntimeName::new("empty").unwrap())
        .unwrap();
    let err = ProcessHost::allowing_root()
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &JitConfig::new("x"),
            owner: None,
            extra_env: vec![],
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
        .unwrap_err();
    assert!(
        matches!(err, rm_runner::ProcessError::NoListener { .. }),
        "{err:?}"
    );
    let _ = f.work.path();
}
