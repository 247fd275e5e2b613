//! The host checks agree with the kernel: where the doctor says a runner cannot start, a real
//! spawn fails, and where it passes, the spawn works.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_core::CheckState;
use rm_runner::doctor::{disk_check, package_check, runner_checks, runner_root_check};
use rm_runner::{
    ensure_runner_account, materialize, JitConfig, MaterializeOptions, PackageCache, Platform,
    ProcessHost, RunAs, RunnerRoot, RuntimeName, SpawnRequest, DEFAULT_RUNNER_ACCOUNT,
};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn a_parent_left_0700_is_named_and_really_stops_the_runner() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (runners get their own uid only under a root service)");
        return;
    }
    ensure_runner_account(DEFAULT_RUNNER_ACCOUNT).unwrap();
    let files = tempfile::tempdir().unwrap();
    let work = open_tempdir();
    let info = script_package(files.path(), "2.336.0");
    let cache = PackageCache::open(work.path().join("c"), DirSource::new(files.path())).unwrap();
    let pkg = cache.ensure(&info).await.unwrap();

    let data = work.path().join("data");
    fs::create_dir(&data).unwrap();
    let root_dir = data.join("runners");
    let run_as = RunAs::default_for_service();
    let root = RunnerRoot::prepare(&root_dir, run_as.resolve().unwrap()).unwrap();
    let rt = root
        .create_runtime(&RuntimeName::new("a").unwrap())
        .unwrap();
    let opts = MaterializeOptions {
        owner: rt.owner,
        ..Default::default()
    };
    materialize(&pkg.dir, &rt.path, &opts).unwrap();
    let spawn = |host: &ProcessHost| {
        host.spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &JitConfig::new("x"),
            owner: rt.owner,
            extra_env: Vec::new(),
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
    };

    assert_eq!(
        runner_root_check(&root_dir, &run_as).state,
        CheckState::Pass
    );
    chmod(&data, 0o700);
    let check = runner_root_check(&root_dir, &run_as);
    assert_eq!(check.state, CheckState::Fail, "{check:?}");
    assert!(check.required);
    let shown = data.display().to_string();
    assert!(
        check.detail.contains(&shown) && check.detail.contains("0700"),
        "names the directory and its mode: {}",
        check.detail
    );
    assert_eq!(
        check.fix.as_deref(),
        Some(
            format!(
                "`chmod o+x {shown}` (or `chmod 755 {shown}`), then retry the targets that stopped"
            )
            .as_str()
        )
    );
    // The kernel agrees: the listener cannot be executed through that directory.
    let host = ProcessHost::new();
    let err = spawn(&host).unwrap_err();
    assert!(
        format!("{err}").contains("Permission denied"),
        "spawn failed as the doctor said: {err}"
    );

    chmod(&data, 0o755);
    assert_eq!(
        runner_root_check(&root_dir, &run_as).state,
        CheckState::Pass
    );
    let started = spawn(&host).unwrap();
    let ready = poll(Duration::from_secs(10), || {
        rt.path.join("ready").exists().then_some(())
    });
    host.stop(started.identity, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        ready.is_some(),
        "the runner started once the mode was fixed"
    );
    rm_runner::scrub(&rt.path).unwrap();
}

#[tokio::test]
async fn a_listener_that_is_not_executable_is_named() {
    let files = tempfile::tempdir().unwrap();
    let work = open_tempdir();
    let platform = Platform::current();
    let cache_dir = work.path().join("c");
    assert_eq!(
        package_check(&cache_dir, platform).state,
        CheckState::Skipped,
        "no package yet: the first launch downloads it"
    );
    let info = script_package(files.path(), "2.336.0");
    let cache = PackageCache::open(&cache_dir, DirSource::new(files.path())).unwrap();
    let pkg = cache.ensure(&info).await.unwrap();
    let ok = package_check(&cache_dir, platform);
    assert_eq!(ok.state, CheckState::Pass, "{ok:?}");

    let listener = pkg.dir.join("bin/Runner.Listener");
    chmod(&listener, 0o444);
    let bad = package_check(&cache_dir, platform);
    assert_eq!(bad.state, CheckState::Fail, "{bad:?}");
    assert!(
        bad.detail.contains(&listener.display().to_string()) && bad.detail.contains("0444"),
        "{}",
        bad.detail
    );
    assert!(bad.fix.unwrap().contains("chmod 755"));
    // The kernel agrees: a runtime made from it cannot start its listener.
    let root =
        RunnerRoot::prepare(work.path().join("r"), rm_runner::ResolvedRunAs::ServiceUser).unwrap();
    let rt = root
        .create_runtime(&RuntimeName::new("b").unwrap())
        .unwrap();
    materialize(&pkg.dir, &rt.path, &MaterializeOptions::default()).unwrap();
    let err = ProcessHost::allowing_root()
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &JitConfig::new("x"),
            owner: None,
            extra_env: Vec::new(),
            groups: None,
            sandbox: None,
            cgroup: None,
            layers: None,
        })
        .unwrap_err();
    assert!(format!("{err}").contains("no executable"), "{err}");
    rm_runner::scrub(&rt.path).unwrap();
}

#[test]
fn disk_space_and_the_account_are_reported() {
    let work = open_tempdir();
    let disk = disk_check(&work.path().join("not-yet/runners"));
    assert_ne!(disk.state, CheckState::Fail, "{disk:?}");
    assert!(
        disk.detail.contains("free on the filesystem of"),
        "{disk:?}"
    );

    let missing = RunAs::Account {
        name: "rm-no-such-runner".into(),
    };
    let check = runner_root_check(work.path(), &missing);
    assert_eq!(check.state, CheckState::Fail);
    assert!(check.detail.contains("useradd"), "{}", check.detail);

    let checks = runner_checks(&rm_runner::doctor::DoctorSubject {
        runner_root: &work.path().join("runners"),
        cache_dir: &work.path().join("cache"),
        run_as: &RunAs::default_for_service(),
        platform: Platform::current(),
        sandbox: &rm_runner::sandbox::SandboxConfig::default(),
        caps: &rm_runner::sandbox::JobCaps::default(),
        layers: &rm_runner::caches::layers::CacheLayers::default(),
    });
    let ids: Vec<&str> = checks.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "runner_root_reachable",
            "runner_package",
            "disk_space",
            "job_sandbox",
            "job_resource_caps",
            "cache_layers"
        ]
    );
    assert!(checks[..4].iter().all(|c| c.required));
    assert!(!checks[4].required && !checks[5].required);
    // Without a service that set them up, the layers' check says who checks them.
    assert_eq!(checks[5].state, CheckState::Skipped);
    assert!(
        checks[5].detail.contains("host doctor"),
        "{}",
        checks[5].detail
    );
    if nix::unistd::geteuid().is_root() {
        // Runners never run as root: the service user is no option for a root service.
        let as_root = runner_root_check(work.path(), &RunAs::ServiceUser);
        assert_eq!(as_root.state, CheckState::Fail);
        assert!(as_root.detail.contains("as root"), "{}", as_root.detail);
    }
}
