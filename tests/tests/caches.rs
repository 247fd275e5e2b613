//! The caches runners share, end to end: real binary, fake GitHub, fake runner listeners whose
//! job runs a shell command with the runner's environment (as a real job's steps do).
//!
//! - A second job finds what the first wrote in its repository's cache and the tool the first
//!   installed in the tool cache, and cannot change that tool; a job from a fork reads the
//!   cache but what it writes never reaches the next job; another repository's runner cannot
//!   read this one's cache; nothing in the caches is readable by an account outside the
//!   runners (root: runners get a uid each).
//! - Two jobs installing one tool at once both succeed, and the tool is whole afterwards.
//! - The size cap: a cache above it is removed between jobs, never while a job uses it;
//!   `cache clear` names what it left; `cache show` counts hits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use rm_e2e::jobs::{find_named, out_dir, read, run};
use rm_e2e::{fake_github, is_root, routing_label, until, Daemon};
use rm_testkit::package::RunnerPackage;
use rm_testkit::{
    Conclusion, EndpointMatch, FakeConfig, FakeGitHub, Fault, FaultRule, InstallationRepos, JobSpec,
};

/// The fake GitHub with `octo/hello` and `octo/other`, both installed.
async fn two_repos() -> FakeGitHub {
    let gh = FakeGitHub::start(FakeConfig {
        device_interval: Duration::from_secs(1),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    gh.create_user("octo").unwrap();
    gh.create_repo("octo/hello").unwrap();
    gh.create_repo("octo/other").unwrap();
    gh.create_installation(
        "octo",
        InstallationRepos::Selected(vec!["octo/hello".into(), "octo/other".into()]),
    )
    .unwrap();
    gh.set_runner_package(&RunnerPackage::shared_for_tests().unwrap());
    gh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_job_finds_the_cache_and_tool_the_first_left_and_a_fork_job_only_reads() {
    let gh = two_repos().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let out = out_dir();
    let o = out.path().display();

    let first = format!(
        r#"set -e
echo "$npm_config_cache" > {o}/first.npm
echo "$CARGO_HOME $GOMODCACHE $PIP_CACHE_DIR" > {o}/first.vars
echo cached-by-first > "$npm_config_cache/marker"
d="$RUNNER_TOOL_CACHE/mytool/1.0.0"
mkdir -p "$d/x64"; echo v1 > "$d/x64/tool"; touch "$d/x64.complete""#
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("first", &[&label]).with_command(&first)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    let npm = PathBuf::from(read(out.path(), "first.npm"));
    let data = d.data_dir.canonicalize().unwrap();
    assert!(
        npm.starts_with(data.join("runners/.caches/deps/repo/octo/hello")),
        "{}",
        npm.display()
    );
    let vars = read(out.path(), "first.vars");
    assert!(
        !vars.contains("  ") && vars.split(' ').count() == 3,
        "cargo, Go and pip caches are set: {vars}"
    );

    let second = format!(
        r#"cat "$npm_config_cache/marker" > {o}/second.marker
cat "$RUNNER_TOOL_CACHE/mytool/1.0.0/x64/tool" > {o}/second.tool
if (echo evil > "$RUNNER_TOOL_CACHE/mytool/1.0.0/x64/tool") 2>/dev/null; then echo changed; else echo refused; fi > {o}/second.tamper
if rm -rf "$RUNNER_TOOL_CACHE/mytool/1.0.0/x64" 2>/dev/null; then echo removed; else echo refused; fi > {o}/second.remove
true"#
    );
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("second", &[&label]).with_command(&second)],
    )
    .await;
    assert_eq!(read(out.path(), "second.marker"), "cached-by-first");
    assert_eq!(
        read(out.path(), "second.tool"),
        "v1",
        "the finished tool is reused"
    );
    assert_eq!(
        read(out.path(), "second.tamper"),
        "refused",
        "a finished tool is read-only to jobs"
    );
    let tool = data
        .join("runners/.caches/tools-by-namespace/linux-x64/repo/octo/hello/mytool/1.0.0/x64/tool");
    assert_eq!(std::fs::read_to_string(&tool).unwrap().trim(), "v1");
    if is_root() {
        // Runners get a uid each: a sealed tool is root's, in a sticky directory.
        assert_eq!(read(out.path(), "second.remove"), "refused");
        assert_eq!(std::fs::metadata(&tool).unwrap().uid(), 0);
    }

    // A job from a fork reads the cache, and what it writes stays its own.
    let fork = format!(
        r#"cat "$npm_config_cache/marker" > {o}/fork.marker
echo "$npm_config_cache" > {o}/fork.npm
echo poisoned > "$npm_config_cache/marker"
echo poisoned > "$npm_config_cache/planted"
true"#
    );
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("fork", &[&label])
            .with_command(&fork)
            .from_fork()],
    )
    .await;
    assert_eq!(
        read(out.path(), "fork.marker"),
        "cached-by-first",
        "a fork job reads the cache"
    );
    let fork_npm = PathBuf::from(read(out.path(), "fork.npm"));
    if is_root() {
        // The system service layers every runner's caches: the shared one, under a layer of
        // the job's own that goes with it.
        assert_eq!(fork_npm, npm);
        assert!(
            d.log().contains("the job's cache writes were dropped"),
            "{}",
            d.log()
        );
    } else {
        assert_ne!(fork_npm, npm, "but not the shared one");
    }
    let after = format!(
        r#"cat "$npm_config_cache/marker" > {o}/after.marker; ls "$npm_config_cache" > {o}/after.ls"#
    );
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("after", &[&label]).with_command(&after)],
    )
    .await;
    assert_eq!(
        read(out.path(), "after.marker"),
        "cached-by-first",
        "the fork's write never reached the cache"
    );
    assert!(!read(out.path(), "after.ls").contains("planted"));

    // `cache show` lists it with its hits.
    let shown = d.ok(&["cache", "show", "octo/hello"]).await;
    assert!(
        shown.contains("octo/hello") && shown.contains("npm"),
        "{shown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&d.ok(&["cache", "show", "--json"]).await).unwrap();
    let npm_entry = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tool"] == "npm" && e["namespace"] == "octo/hello")
        .cloned()
        .unwrap();
    assert!(npm_entry["hits"].as_u64().unwrap() >= 3, "{npm_entry}");

    if is_root() {
        // Nothing outside the runners can read the caches, and another repository's runners
        // cannot read this one's.
        let ns = data.join("runners/.caches/deps/repo/octo/hello");
        for p in [&ns, &ns.join("npm"), &data.join("runners/.caches")] {
            let mode = std::fs::metadata(p).unwrap().mode();
            assert_eq!(mode & 0o007, 0, "{} is {mode:o}", p.display());
        }
        let probe = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "ls"])
            .arg(ns.join("npm"))
            .output()
            .unwrap();
        assert!(!probe.status.success(), "nobody listed the cache");
        let other = d
            .ok(&["repo", "add", "octo/other", "--max-runners", "1"])
            .await;
        let other_label = routing_label(&other);
        let peek = format!(
            r#"if ls {ns}/npm >/dev/null 2>&1; then echo read; else echo refused; fi > {o}/other.peek; echo "$npm_config_cache" > {o}/other.npm
if test -e "$RUNNER_TOOL_CACHE/mytool" || test -e {tool}; then echo found; else echo absent; fi > {o}/other.tool"#,
            ns = ns.display(),
            tool = tool.display()
        );
        run(
            &d,
            &gh,
            "octo/other",
            vec![JobSpec::new("other", &[&other_label]).with_command(&peek)],
        )
        .await;
        assert_eq!(read(out.path(), "other.peek"), "refused");
        // The tool octo/hello's job installed is not offered to octo/other's jobs.
        assert_eq!(read(out.path(), "other.tool"), "absent");
        assert!(read(out.path(), "other.npm").contains("repo/octo/other"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_installing_one_tool_at_once_both_succeed_and_the_tool_is_whole() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    d.ok(&["host", "set-capacity", "2"]).await;
    let out = out_dir();
    let o = out.path().display();
    // What `actions/tool-cache` does: look for the marker, else (re)create the directory,
    // fill it, write the marker.
    let install = format!(
        r#"d="$RUNNER_TOOL_CACHE/racetool/2.0.0"
if [ ! -f "$d/x64.complete" ]; then
  rm -rf "$d/x64"; mkdir -p "$d/x64"
  i=0; while [ $i -lt 40 ]; do echo $i > "$d/x64/f$i"; i=$((i+1)); sleep 0.02; done
  touch "$d/x64.complete"
fi
n=$(ls "$d/x64" | wc -l)
echo "$n" > {o}/$GITHUB_JOB.count
[ "$n" = 40 ]"#
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![
            JobSpec::new("one", &[&label]).with_command(&install),
            JobSpec::new("two", &[&label]).with_command(&install),
        ],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success, Conclusion::Success]);
    assert_eq!(read(out.path(), "one.count"), "40");
    assert_eq!(read(out.path(), "two.count"), "40");
    // The next job finds it whole, installed once.
    let check = format!(
        r#"ls "$RUNNER_TOOL_CACHE/racetool/2.0.0/x64" | wc -l > {o}/three.count; test -f "$RUNNER_TOOL_CACHE/racetool/2.0.0/x64.complete""#
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("three", &[&label]).with_command(&check)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    assert_eq!(read(out.path(), "three.count"), "40");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_cap_removes_caches_between_jobs_never_one_in_use() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let said = d.ok(&["host", "set-cache-size", "64MiB"]).await;
    assert!(said.contains("64 MiB"), "{said}");
    let refused = d.run(&["host", "set-cache-size", "1MiB"]).await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("64 MiB"));

    // A job fills its npm cache above the cap and holds on while we look.
    let out = out_dir();
    let o = out.path().display();
    let fill = format!(
        r#"head -c 80000000 /dev/zero > "$npm_config_cache/big"; echo filled > {o}/filled; sleep 6"#
    );
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("fill", &[&label]).with_command(&fill)],
    )
    .unwrap();
    until(Duration::from_secs(60), "the cache filled", || async {
        out.path().join("filled").exists().then_some(())
    })
    .await;
    // In use: neither clear nor the cap removes it.
    let cleared = d
        .ok(&["cache", "clear", "octo/hello", "--tool", "npm"])
        .await;
    assert!(
        cleared.contains("Removed 0 cache(s)") && cleared.contains("in use"),
        "{cleared}"
    );
    let npm = d
        .data_dir
        .canonicalize()
        .unwrap()
        .join("runners/.caches/deps/repo/octo/hello/npm/big");
    if is_root() {
        // The system service's jobs write through layers: the cache gets it when the job ends.
        assert!(!npm.exists(), "a running job's write is in its layer");
    } else {
        assert!(npm.exists(), "a cache in use is never removed");
    }
    // Once the job is done, the next clean brings the caches under the cap.
    until(
        Duration::from_secs(90),
        "the cache over the cap removed after the job",
        || async {
            (d.log().contains("pruned a cache (least recently used)") && !npm.exists())
                .then_some(())
        },
    )
    .await;
    let shown = d.ok(&["cache", "show"]).await;
    assert!(shown.contains("of 64 MiB"), "{shown}");
    let bad = d.run(&["cache", "clear", "--tool", "rubygems"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("npm, pnpm"),
        "{bad:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_joins_a_shared_namespace_or_turns_its_caches_off() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let out = out_dir();
    let o = out.path().display();
    let bad = d
        .run(&["repo", "set", "octo/hello", "--cache-namespace", "../x"])
        .await;
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a cache namespace"));

    d.ok(&["repo", "set", "octo/hello", "--cache-namespace", "team-a"])
        .await;
    let listed = d.ok(&["repo", "list"]).await;
    assert!(listed.contains("cache: shared team-a"), "{listed}");
    let print = |tag: &str| format!(r#"echo "npm=$npm_config_cache" > {o}/{tag}"#);
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("shared", &[&label]).with_command(&print("shared"))],
    )
    .await;
    assert!(
        read(out.path(), "shared").contains("/deps/shared/team-a/npm"),
        "{}",
        read(out.path(), "shared")
    );

    d.ok(&["repo", "set", "octo/hello", "--cache", "off"]).await;
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("off", &[&label]).with_command(&print("off"))],
    )
    .await;
    assert_eq!(
        read(out.path(), "off"),
        "npm=",
        "no dependency cache when off"
    );
    // Settings survive a restart (the journal keeps them).
    let mut d = d;
    d.restart().await;
    let listed = d.ok(&["repo", "list"]).await;
    assert!(listed.contains("cache: off"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forks_job_on_a_runner_that_could_write_the_caches_writes_only_its_own_layer() {
    if let Some((gh, d)) = started(Service::System).await {
        forks_job_on_a_writer(&gh, &d, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_per_user_service_too_a_forks_job_writes_only_its_own_layer() {
    if let Some((gh, d)) = started(Service::PerUser).await {
        forks_job_on_a_writer(&gh, &d, true).await;
    }
}

/// Outside the wall: the per-user service mounts layers inside the sandbox, so a target
/// without it has none: the same job's write reaches the shared cache while it runs (what
/// the layered tests assert cannot happen), and the namespace is removed after it instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_layers_a_forks_job_reaches_the_cache_and_the_namespace_is_removed_after() {
    if let Some((gh, d)) = started(Service::PerUser).await {
        forks_job_on_a_writer(&gh, &d, false).await;
    }
}

/// Where a cache-trust test runs.
enum Service {
    System,
    PerUser,
}

/// A fake GitHub and the service `which` names; `None` (the test skipped) unless root, which
/// the system service and making the per-user service's developer account both need.
async fn started(which: Service) -> Option<(FakeGitHub, Daemon)> {
    if !is_root() {
        eprintln!("skipped: the system service and the per-user service's account need root");
        return None;
    }
    let gh = fake_github().await;
    let d = match which {
        Service::System => Daemon::start(&gh).await,
        Service::PerUser => Daemon::start_as(&gh, &rm_e2e::dev_user()).await,
    };
    Some((gh, d))
}

/// Signs in and adds `octo/hello`; a target of the per-user service without layers runs
/// without the sandbox. The doctor says layers are on either way (for walled targets).
async fn hello_target(gh: &FakeGitHub, d: &Daemon, layered: bool) -> String {
    d.sign_in(gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    if !layered {
        d.ok(&["repo", "set", "octo/hello", "--sandbox", "off"])
            .await;
    }
    let out = d.run(&["host", "doctor", "--json"]).await;
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "cache_layers")
        .cloned()
        .expect("a cache_layers check");
    assert_eq!(check["state"], "pass", "{check}");
    routing_label(&added)
}

async fn forks_job_on_a_writer(gh: &FakeGitHub, d: &Daemon, layered: bool) {
    let label = hello_target(gh, d, layered).await;
    // The target also keeps its workspaces: those the fork's job could have touched go too.
    d.ok(&["repo", "set", "octo/hello", "--workspace", "persistent"])
        .await;
    let out = out_dir();
    let o = out.path().display();
    let seed = r#"echo trusted > "$npm_config_cache/marker"; echo trusted > ws-marker"#;
    run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("seed", &[&label]).with_command(seed)],
    )
    .await;
    let npm = d
        .data_dir
        .canonicalize()
        .unwrap()
        .join("runners/.caches/deps/repo/octo/hello/npm");
    assert_eq!(
        std::fs::read_to_string(npm.join("marker")).unwrap().trim(),
        "trusted",
        "a trusted job's write reached the cache"
    );

    // The race GitHub allows: a runner is started for a trusted job (so it may write the
    // cache), the trusted job goes away before the runner asks for work (its first poll is
    // held here), and a fork's job queued meanwhile is the one it gets.
    gh.inject_fault(FaultRule::times(
        EndpointMatch::route("GET", "/_broker/sessions/*/message"),
        Fault::Latency(Duration::from_secs(4)),
        1,
    ));
    gh.queue_run("octo/hello", vec![JobSpec::new("trusted", &[&label])])
        .unwrap();
    until(Duration::from_secs(60), "the runner connected", || async {
        gh.runners()
            .iter()
            .any(|r| r.status == "online")
            .then_some(())
    })
    .await;
    let trusted = gh.jobs().into_iter().find(|j| j.name == "trusted").unwrap();
    gh.finish_job(trusted.id, Conclusion::Cancelled).unwrap();
    // The fork's job poisons the cache, then holds on until the test has looked at the
    // host's copy.
    let poison = format!(
        r#"echo poisoned > "$npm_config_cache/marker"; echo "$npm_config_cache" > {o}/fork.npm; cat ws-marker > {o}/fork.ws; echo poisoned > ws-marker
echo wrote > {o}/fork.wrote
for i in $(seq 300); do [ -e {o}/looked ] && break; sleep 0.1; done"#
    );
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new("fork", &[&label])
            .with_command(&poison)
            .from_fork()],
    )
    .unwrap();
    until(Duration::from_secs(60), "the fork's job wrote", || async {
        out.path().join("fork.wrote").exists().then_some(())
    })
    .await;
    let seen = std::fs::read_to_string(npm.join("marker")).unwrap_or_default();
    std::fs::write(out.path().join("looked"), "").unwrap();
    assert_eq!(
        seen.trim(),
        if layered { "trusted" } else { "poisoned" },
        "while the fork's job runs, the host's cache holds what it did"
    );
    until(
        Duration::from_secs(60),
        "the fork's runner gone",
        || async {
            let jobs = gh.jobs();
            let done = jobs
                .iter()
                .any(|j| j.name == "fork" && j.status == rm_testkit::JobStatus::Completed);
            let idle = d
                .client()
                .await
                .status()
                .await
                .is_ok_and(|s| s.runners.is_empty());
            (done && idle).then_some(())
        },
    )
    .await;
    assert_eq!(
        PathBuf::from(read(out.path(), "fork.npm")),
        npm,
        "the fork's job ran with the shared cache: the race happened"
    );
    let log = d.log();
    if layered {
        assert!(
            log.contains("the job's cache writes were dropped") && log.contains("trust=untrusted"),
            "the service says it dropped the fork's layer:\n{log}"
        );
        assert_eq!(
            std::fs::read_to_string(npm.join("marker")).unwrap().trim(),
            "trusted",
            "nothing was removed: the fork's write never reached the cache"
        );
        assert!(!log.contains("removing that namespace's caches"));
        let layers = d.data_dir.join("runners/.layers");
        let left: Vec<_> = std::fs::read_dir(&layers)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.is_empty(),
            "the scrubbed runners' layers are gone: {left:?}"
        );
    } else {
        until(
            Duration::from_secs(30),
            "the namespace's caches removed",
            || async { (!npm.join("marker").exists()).then_some(()) },
        )
        .await;
        assert!(
            d.log().contains("a job that is not trusted (or whose origin could not be established) ran on a runner that could write the caches, and they changed"),
            "the service says why it removed them"
        );
    }
    // The verdict rests on the job's own run, by GitHub's word.
    assert!(
        d.log().lines().any(|l| l.contains("the job's trust")
            && l.contains("trust=untrusted")
            && l.contains("job fork (run")
            && l.contains("comes from a fork")),
        "the service says how it judged the fork's job:\n{log}"
    );
    assert_eq!(
        read(out.path(), "fork.ws"),
        "trusted",
        "the fork's job ran in the kept workspace: the race happened"
    );
    let slots = d.data_dir.join("runners/.workspaces");
    until(
        Duration::from_secs(30),
        "the kept workspaces deleted",
        || async { find_named(&slots, "ws-marker").is_empty().then_some(()) },
    )
    .await;
    assert!(
        d.log().contains("persistent workspace reset"),
        "the service says it did not keep it"
    );
    let after = format!(
        r#"cat "$npm_config_cache/marker" > {o}/after 2>/dev/null || echo none > {o}/after
cat ws-marker > {o}/after.ws 2>/dev/null || echo none > {o}/after.ws"#
    );
    run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("after", &[&label]).with_command(&after)],
    )
    .await;
    assert_eq!(
        read(out.path(), "after"),
        if layered { "trusted" } else { "none" },
        "nothing the fork wrote is used"
    );
    assert_eq!(read(out.path(), "after.ws"), "none", "nor its workspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_requests_cache_writes_never_reach_the_default_branchs_jobs() {
    if let Some((gh, d)) = started(Service::System).await {
        pull_request_writes(&gh, &d, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_per_user_service_too_a_pull_requests_cache_writes_are_dropped() {
    if let Some((gh, d)) = started(Service::PerUser).await {
        pull_request_writes(&gh, &d, true).await;
    }
}

/// Outside the wall: without layers (a target of the per-user service without the sandbox),
/// a same-repository pull request's writes land in the cache the default branch's jobs read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_layers_a_pull_requests_cache_writes_reach_the_next_job() {
    if let Some((gh, d)) = started(Service::PerUser).await {
        pull_request_writes(&gh, &d, false).await;
    }
}

async fn pull_request_writes(gh: &FakeGitHub, d: &Daemon, layered: bool) {
    let label = hello_target(gh, d, layered).await;
    let out = out_dir();
    let o = out.path().display();
    let write = |who: &str| {
        format!(r#"echo {who} > "$npm_config_cache/marker"; mkdir -p "$npm_config_cache/by-{who}""#)
    };
    run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("push", &[&label]).with_command(&write("push"))],
    )
    .await;
    run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("pr", &[&label])
            .with_command(&write("pr"))
            .pull_request()],
    )
    .await;
    let read_back =
        format!(r#"cat "$npm_config_cache/marker" > {o}/marker; ls "$npm_config_cache" > {o}/ls"#);
    run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new("main", &[&label]).with_command(&read_back)],
    )
    .await;
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("the job's trust") && l.contains("trust=pull_request")),
        "the pull request's job was judged as one:\n{log}"
    );
    if layered {
        assert_eq!(read(out.path(), "marker"), "push");
        assert!(!read(out.path(), "ls").contains("by-pr"));
        assert!(
            log.contains("the trusted job's cache writes were kept"),
            "{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("the job's cache writes were dropped")
                    && l.contains("trust=pull_request")),
            "{log}"
        );
    } else {
        assert_eq!(read(out.path(), "marker"), "pr");
        assert!(read(out.path(), "ls").contains("by-pr"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_that_keep_starting_without_caches_show_a_problem_until_they_start_with_them() {
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let out = out_dir();
    let o = out.path().display();
    // Something that is not a directory where the repository's cache belongs: setting up the
    // caches fails, and the job still runs (without them).
    let data = d.data_dir.canonicalize().unwrap();
    let ns = data.join("runners/.caches/deps/repo/octo/hello");
    std::fs::create_dir_all(ns.parent().unwrap()).unwrap();
    std::fs::write(&ns, "not a directory").unwrap();
    let step = |tag: &str| format!(r#"echo "${{npm_config_cache:-none}}" > {o}/{tag}"#);
    for tag in ["one", "two"] {
        let c = run(
            &d,
            &gh,
            "octo/hello",
            vec![JobSpec::new(tag, &[&label]).with_command(&step(tag))],
        )
        .await;
        assert_eq!(c, vec![Conclusion::Success], "the job runs without caches");
        assert_eq!(read(out.path(), tag), "none");
    }
    let status = d.client().await.status().await.unwrap();
    let problem = status.caches_problem.expect("a problem once it repeats");
    assert_eq!((problem.what.as_str(), problem.failures), ("caches", 2));
    assert!(
        problem.message.contains("without their caches"),
        "{problem:?}"
    );
    assert!(problem.fix.contains("cache clear"), "{problem:?}");
    let text = d.ok(&["status"]).await;
    assert!(text.contains("started without their caches"), "{text}");

    // Fixed: the next runner gets its caches and the problem is gone.
    std::fs::remove_file(&ns).unwrap();
    run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("three", &[&label]).with_command(&step("three"))],
    )
    .await;
    assert_ne!(read(out.path(), "three"), "none");
    let status = d.client().await.status().await.unwrap();
    assert_eq!(status.caches_problem, None);
}
