//! Root-only: runners never run as root, and one attempt cannot write into another's
//! runtime or the package cache.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod common;

use common::*;
use rm_runner::{
    ensure_runner_account, materialize, JitConfig, MaterializeOptions, PackageCache, ProcessHost,
    RunAs, RunnerRoot, RuntimeName, SpawnRequest, DEFAULT_RUNNER_ACCOUNT,
};
use std::fs;
use std::time::Duration;

fn status_field(pid: u32, field: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_string()))
        .unwrap()
}

#[tokio::test]
async fn runners_run_unprivileged_and_cannot_touch_each_other_or_the_cache() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (the service drops privileges only when it has them)");
        return;
    }
    let account = ensure_runner_account(DEFAULT_RUNNER_ACCOUNT).unwrap();
    assert_ne!(account.uid, 0);
    // Idempotent.
    assert_eq!(
        ensure_runner_account(DEFAULT_RUNNER_ACCOUNT).unwrap(),
        account
    );

    let files = tempfile::tempdir().unwrap();
    let work = open_tempdir();
    let info = script_package(files.path(), "2.336.0");
    let cache = PackageCache::open(work.path().join("c"), DirSource::new(files.path())).unwrap();
    let pkg = cache.ensure(&info).await.unwrap();

    for run_as in [
        RunAs::default_for_service(),
        RunAs::Account {
            name: DEFAULT_RUNNER_ACCOUNT.into(),
        },
    ] {
        let shared = matches!(run_as, RunAs::Account { .. });
        let resolved = run_as.resolve().unwrap();
        let root_dir = work.path().join(if shared { "rs" } else { "rp" });
        let root = RunnerRoot::prepare(&root_dir, resolved).unwrap();
        let a = root
            .create_runtime(&RuntimeName::new("a").unwrap())
            .unwrap();
        let b = root
            .create_runtime(&RuntimeName::new("b").unwrap())
            .unwrap();
        for rt in [&a, &b] {
            let opts = MaterializeOptions {
                owner: rt.owner,
                ..Default::default()
            };
            materialize(&pkg.dir, &rt.path, &opts).unwrap();
        }
        let owner = a
            .owner
            .expect("an unprivileged owner when the service is root");
        assert_ne!(owner.uid, 0);
        if shared {
            assert_eq!((owner.uid, owner.gid), (account.uid, account.gid));
        } else {
            assert_ne!(a.owner, b.owner, "per-attempt uids differ");
            assert_eq!(owner.gid, account.gid);
        }

        let host = ProcessHost::new();
        let spawned = host
            .spawn(&SpawnRequest {
                runtime: &a.path,
                jit_config: &JitConfig::new("x"),
                owner: a.owner,
                extra_env: vec![
                    ("RM_TEST_MODE".into(), "probe".into()),
                    ("RM_TEST_OTHER".into(), b.path.display().to_string()),
                    ("RM_TEST_CACHE".into(), cache.dir().display().to_string()),
                    ("RM_TEST_CACHE_PKG".into(), pkg.dir.display().to_string()),
                ],
                groups: None,
                sandbox: None,
                cgroup: None,
                layers: None,
            })
            .unwrap();
        let probe = poll(Duration::from_secs(10), || {
            fs::read_to_string(a.path.join("probe.txt")).ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "no probe result; listener log: {:?}",
                fs::read_to_string(&spawned.log)
            )
        });
        let pid = spawned.identity.pid;
        let uids = status_field(pid, "Uid:");
        let groups = status_field(pid, "Groups:");
        host.stop(spawned.identity, Duration::from_secs(5))
            .await
            .unwrap();

        let euid = uids.split_whitespace().nth(1).unwrap().to_string();
        assert_eq!(euid, owner.uid.to_string(), "effective uid of the runner");
        assert!(
            groups.is_empty(),
            "supplementary groups cleared: {groups:?}"
        );
        assert!(probe.contains(&format!("uid={}", owner.uid)), "{probe}");
        assert!(probe.contains("own=written"), "{probe}");
        assert!(probe.contains("cache=denied"), "{probe}");
        assert!(probe.contains("pkg=denied"), "{probe}");
        assert!(!cache.dir().join("intruder").exists());
        assert!(!pkg.dir.join("bin/intruder").exists());
        if shared {
            // One shared account cannot keep attempts apart: that is why per-attempt uids are
            // the default. Pin the limitation so the docs stay honest.
            assert!(probe.contains("other=written"), "{probe}");
        } else {
            assert!(probe.contains("other=denied"), "{probe}");
            assert!(!b.path.join("intruder").exists());
        }
        rm_runner::scrub(&a.path).unwrap();
        rm_runner::scrub(&b.path).unwrap();
    }
}
