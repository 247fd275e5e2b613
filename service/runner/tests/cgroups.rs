//! Per-job cgroups on the real cgroup v2 hierarchy: a runner joins its job's cgroup at its
//! spawn, a process that detached from its session is still in it, and ending the cgroup ends
//! it. This machine's cgroup v2 has no controller (they are bound to v1), so the caps' files
//! are checked in `sandbox::cgroups`' unit tests; the placement, the kill and the CPU count
//! here are real.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::account::ResolvedRunAs;
use rm_runner::sandbox::cgroups::{CgroupUsage, Ended};
use rm_runner::sandbox::{CapLimits, JobCgroups};
use rm_runner::{
    materialize, JitConfig, MaterializeOptions, PackageCache, ProcessHost, RunnerRoot, RuntimeName,
    SpawnRequest, StopOutcome,
};
use rm_testkit::cgroup::TestCgroup;
use std::fs;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// This test's own cgroup; `None` (said on stderr) only where it may not make one.
fn test_cgroup(tag: &str) -> Option<TestCgroup> {
    let made = TestCgroup::new(tag);
    match (&made, nix::unistd::geteuid().is_root()) {
        (None, true) => panic!("root could not make a cgroup v2 under the unified hierarchy"),
        (None, false) => eprintln!("skipped: not root, no cgroup of the test's own"),
        _ => {}
    }
    made
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            !matches!(state, Some("Z" | "X") | None)
        })
        .unwrap_or(false)
}

fn cgroup_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .unwrap()
}

#[tokio::test]
async fn a_detached_process_of_a_job_is_in_its_cgroup_and_ends_with_it() {
    let Some(base) = test_cgroup("detached") else {
        return;
    };
    let cgroups = JobCgroups::open_at(&base.dir, CapLimits::for_memory(8 << 30)).unwrap();
    assert!(base.dir.join("service").is_dir() && base.dir.join("jobs").is_dir());

    let files = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let info = script_package(files.path(), "2.336.0");
    let cache = PackageCache::open(work.path().join("c"), DirSource::new(files.path())).unwrap();
    let pkg = cache.ensure(&info).await.unwrap();
    let root = RunnerRoot::prepare(work.path().join("r"), ResolvedRunAs::ServiceUser).unwrap();
    let name = RuntimeName::new("cg1").unwrap();
    let rt = root.create_runtime(&name).unwrap();
    materialize(&pkg.dir, &rt.path, &MaterializeOptions::default()).unwrap();

    let job = cgroups.create(name.as_str(), None).unwrap();
    let host = ProcessHost::allowing_root();
    let spawned = host
        .spawn(&SpawnRequest {
            runtime: &rt.path,
            jit_config: &JitConfig::new("x"),
            owner: None,
            extra_env: vec![("RM_TEST_MODE".into(), "detached".into())],
            groups: None,
            sandbox: None,
            cgroup: Some(job.clone()),
            layers: None,
        })
        .unwrap();
    poll(WAIT, || rt.path.join("ready").exists().then_some(())).expect("listener ready");
    let detached: u32 = fs::read_to_string(rt.path.join("detached.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let listener = spawned.identity.pid;
    let relative = cgroup_of(listener);
    assert!(
        relative.ends_with(&format!("/jobs/{name}")),
        "the listener is in {relative}"
    );
    assert_eq!(cgroup_of(detached), relative, "the detached process too");
    // This test's own process stays where it was.
    assert!(!cgroup_of(std::process::id()).contains("/jobs/"));

    // Outside the wall: stopping the runner's process group leaves the detached process
    // running (it leads a session of its own), so the test can fail.
    let stopped = host
        .stop(spawned.identity, Duration::from_secs(5))
        .await
        .unwrap();
    assert_ne!(stopped, StopOutcome::AlreadyGone);
    assert!(
        alive(detached),
        "a setsid process outlives its runner's group"
    );

    let used: CgroupUsage = cgroups
        .usage(name.as_str())
        .expect("the job's cgroup counts");
    assert!(used.cpu > Duration::ZERO, "{used:?}");

    // The detached shell, and its `sleep` of the moment.
    let ended = cgroups.end(name.as_str()).unwrap();
    assert!(
        matches!(ended, Ended::Removed { killed } if killed >= 1),
        "{ended:?}"
    );
    poll(WAIT, || (!alive(detached)).then_some(())).expect("the detached process ended");
    assert!(!job.dir.exists());
    assert_eq!(cgroups.end(name.as_str()).unwrap(), Ended::NoCgroup);
}

#[test]
fn the_service_moves_into_its_leaf_and_leftover_job_cgroups_are_swept() {
    let Some(base) = test_cgroup("sweep") else {
        return;
    };
    // A stand-in service process in the base cgroup.
    let mut service = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    fs::write(base.dir.join("cgroup.procs"), service.id().to_string()).unwrap();
    let cgroups = JobCgroups::open_at(&base.dir, CapLimits::for_memory(8 << 30)).unwrap();
    assert!(cgroup_of(service.id()).ends_with("/service"));
    assert_eq!(
        fs::read_to_string(base.dir.join("cgroup.procs")).unwrap(),
        ""
    );

    // Two jobs' cgroups, one with a process in it, left by "an earlier run".
    cgroups.create("gone", None).unwrap();
    let kept = cgroups.create("kept", None).unwrap();
    let mut left = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    fs::write(
        cgroups.dir_of("gone").join("cgroup.procs"),
        left.id().to_string(),
    )
    .unwrap();
    let swept = cgroups.sweep(|name| name == "kept");
    assert_eq!(swept, vec!["gone".to_owned()]);
    assert!(kept.dir.is_dir() && !cgroups.dir_of("gone").exists());
    assert!(left.wait().unwrap().code().is_none(), "killed, not exited");

    // Opening again (a re-executed service already in its leaf) keeps the layout.
    let again = JobCgroups::open_at(&base.dir, CapLimits::for_memory(8 << 30)).unwrap();
    assert_eq!(again.dir_of("kept"), kept.dir);
    let _ = service.kill();
    let _ = service.wait();
}
