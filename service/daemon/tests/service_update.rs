//! The updater end to end: the real `runner-manager daemon run`, installed the way the portable
//! archive installs it (binary + marker under a prefix), against the fake GitHub's release feed
//! serving signed releases from loopback.
//!
//! - a real newer build (the same code built with a higher version by `scripts/release.sh
//!   VERSION --profile dev`, which `scripts/test.sh` runs first and names in
//!   `RM_TEST_RELEASE_DIR`) is applied while a runner is busy: the job finishes before the
//!   swap, the new build answers in the same process, nothing is left registered;
//! - a tampered asset, a release signed with another key and an older release are refused and
//!   change nothing;
//! - a signed build that does not start is rolled back by the watchdog, and that version is
//!   not applied again by itself;
//! - an offline feed is quiet; an unchanged feed is a free 304.
//!
//! Releases other than the real newer build are made here: a shell script standing in for the
//! binary (it answers `--version` like ours), packed and signed exactly as `release.sh` does,
//! with a throwaway key made by `minisign -G` (the daemon trusts it through the debug-only
//! `--update-trust-key`). Tests that need `minisign` or the newer build skip, loudly, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod service_support;

use rm_proto::{Event, UpdateRequest, UpdateState, WatchMessage};
use rm_testkit::{Behaviour, JobStatus};
use service_support::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FEED_REPO: &str = "runner-manager/runner-manager";
const CURRENT: &str = env!("CARGO_PKG_VERSION");

fn have_minisign() -> bool {
    let ok = Command::new("minisign").arg("-v").output().is_ok();
    if !ok {
        eprintln!(
            "SKIPPED: minisign is not installed (apt-get install minisign; scripts/test.sh does)"
        );
    }
    ok
}

/// A throwaway signing key.
struct Keys {
    public: PathBuf,
    secret: PathBuf,
}

fn keygen(dir: &Path, name: &str) -> Keys {
    let k = Keys {
        public: dir.join(format!("{name}.pub")),
        secret: dir.join(format!("{name}.key")),
    };
    let st = Command::new("minisign")
        .args(["-G", "-W", "-f", "-p"])
        .arg(&k.public)
        .arg("-s")
        .arg(&k.secret)
        .output()
        .unwrap();
    assert!(st.status.success(), "minisign -G: {st:?}");
    k
}

fn sign(keys: &Keys, file: &Path, comment: &str) {
    let st = Command::new("minisign")
        .arg("-S")
        .arg("-s")
        .arg(&keys.secret)
        .arg("-m")
        .arg(file)
        .arg("-t")
        .arg(comment)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(st.status.success(), "minisign -S: {st:?}");
}

fn arch() -> &'static str {
    std::env::consts::ARCH
}

/// A release like `release.sh` makes, whose binary is `script`: returns the assets to publish.
fn script_release(dir: &Path, keys: &Keys, version: &str, script: &str) -> Vec<(String, PathBuf)> {
    let out = dir.join(format!("release-{version}"));
    let name = format!("runner-manager-{version}-linux-{}", arch());
    let root = out.join("stage").join(&name);
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::create_dir_all(root.join("share/runner-manager")).unwrap();
    let bin = root.join("bin/runner-manager");
    fs::write(&bin, script).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        root.join("share/runner-manager/portable.json"),
        format!(
            r#"{{"kind":"portable","version":"{version}","files":["bin/runner-manager","share/runner-manager/portable.json"]}}"#
        ),
    )
    .unwrap();
    let tarball = format!("{name}.tar.gz");
    let st = Command::new("tar")
        .arg("-C")
        .arg(out.join("stage"))
        .args(["-czf"])
        .arg(out.join(&tarball))
        .arg(&name)
        .status()
        .unwrap();
    assert!(st.success());
    seal(&out, keys, version, &[tarball])
}

/// SHA256SUMS over `assets` in `out`, and every signature.
fn seal(out: &Path, keys: &Keys, version: &str, assets: &[String]) -> Vec<(String, PathBuf)> {
    let mut sums = String::new();
    for a in assets {
        let bytes = fs::read(out.join(a)).unwrap();
        use sha2::Digest;
        sums.push_str(&format!(
            "{}  {a}\n",
            hex::encode(sha2::Sha256::digest(&bytes))
        ));
    }
    fs::write(out.join("SHA256SUMS"), sums).unwrap();
    sign(
        keys,
        &out.join("SHA256SUMS"),
        &format!("runner-manager {version} SHA256SUMS"),
    );
    for a in assets {
        sign(keys, &out.join(a), &format!("runner-manager {version} {a}"));
    }
    listing(out)
}

/// Every file of a release directory, as (asset name, path).
fn listing(dir: &Path) -> Vec<(String, PathBuf)> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect()
}

/// A portable install of this build under `<tmp>/prefix`, as extracting the archive makes it.
fn portable_install(w: &World) -> PathBuf {
    let prefix = w.dir.path().join("prefix");
    fs::create_dir_all(prefix.join("bin")).unwrap();
    fs::create_dir_all(prefix.join("share/runner-manager")).unwrap();
    let bin = prefix.join("bin/runner-manager");
    fs::copy(env!("CARGO_BIN_EXE_runner-manager"), &bin).unwrap();
    fs::write(
        prefix.join("share/runner-manager/portable.json"),
        format!(
            r#"{{"kind":"portable","version":"{CURRENT}","files":["bin/runner-manager","share/runner-manager/portable.json"]}}"#
        ),
    )
    .unwrap();
    bin
}

fn spawn_updating(w: &World, bin: &Path, key: &Path, mode: &str, feed: &str) -> Daemon {
    spawn_updating_with(w, bin, key, mode, feed, &[])
}

fn spawn_updating_with(
    w: &World,
    bin: &Path,
    key: &Path,
    mode: &str,
    feed: &str,
    extra: &[&str],
) -> Daemon {
    let key = key.to_string_lossy().into_owned();
    let mut args = vec![
        "--update",
        mode,
        "--update-api-base",
        feed,
        "--update-repo",
        FEED_REPO,
        "--update-check-secs",
        "1",
        "--update-trust-key",
        &key,
    ];
    args.extend_from_slice(extra);
    w.spawn_daemon_bin(bin, &args)
}

async fn version_of(socket: &Path) -> Option<String> {
    let c = rm_proto::Client::connect(socket).await.ok()?;
    c.version().await.ok().map(|v| v.service_version)
}

async fn wait_version(socket: &Path, want: &str, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if version_of(socket).await.as_deref() == Some(want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runner-manager {want} never answered on {}",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_foreign_signed_and_older_releases_are_refused_and_change_nothing() {
    if !have_minisign() {
        return;
    }
    let w = World::start().await;
    let keys = keygen(w.dir.path(), "trusted");
    let bin = portable_install(&w);
    let before = fs::read(&bin).unwrap();
    let mut d = spawn_updating(&w, &bin, &keys.public, "notify", &w.gh.origin());
    let client = d.client().await;
    let script = "#!/bin/sh\necho \"runner-manager 9.0.0\"\n";

    // Tampered: one byte of the signed archive changed after signing.
    let assets = script_release(w.dir.path(), &keys, "9.0.0", script);
    let tarball = &assets
        .iter()
        .find(|(n, _)| n.ends_with(".tar.gz"))
        .unwrap()
        .1;
    let mut bytes = fs::read(tarball).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    fs::write(tarball, bytes).unwrap();
    w.gh.publish_release(FEED_REPO, "v9.0.0", &assets);
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    let m = s.message.clone().unwrap();
    assert!(m.contains("does not verify"), "{m}");
    assert!(s.fix.unwrap().contains("nothing was changed"));

    // Signed correctly, but by a key the service does not trust.
    let other = keygen(w.dir.path(), "other");
    let assets = script_release(&w.dir.path().join("o"), &other, "9.0.1", script);
    w.gh.publish_release(FEED_REPO, "v9.0.1", &assets);
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    assert!(s
        .message
        .unwrap()
        .contains("SHA256SUMS: the signature does not verify"));

    // Altered after signing and re-signed asset by asset, but not in SHA256SUMS: the sum
    // catches it.
    let assets = script_release(&w.dir.path().join("s"), &keys, "9.0.2", script);
    let (name, tarball) = assets.iter().find(|(n, _)| n.ends_with(".tar.gz")).unwrap();
    let mut bytes = fs::read(tarball).unwrap();
    bytes.extend_from_slice(b"junk");
    fs::write(tarball, bytes).unwrap();
    sign(&keys, tarball, &format!("runner-manager 9.0.2 {name}"));
    w.gh.publish_release(FEED_REPO, "v9.0.2", &assets);
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert!(s.message.unwrap().contains("SHA-256"), "checksum refusal");

    // Older than this build: refused before anything is downloaded.
    w.gh.reset_counters();
    let assets = script_release(&w.dir.path().join("old"), &keys, "0.0.1", script);
    w.gh.publish_release(FEED_REPO, "v0.0.1", &assets);
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::UpToDate, "{s:?}");
    assert_eq!(w.gh.counters().endpoint("release_asset").requests, 0);

    // Nothing changed: same binary, same running version, no update record, nothing kept.
    assert!(!w.data_dir().join("updates").join("9.0.2").exists());
    assert_eq!(fs::read(&bin).unwrap(), before);
    assert_eq!(version_of(&w.socket()).await.as_deref(), Some(CURRENT));
    assert!(!w.data_dir().join("update-state.json").exists());
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "the service kept running"
    );
    d.terminate(Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_fails_on_the_way_is_tried_again_and_never_recorded_as_refused() {
    if !have_minisign() {
        return;
    }
    let w = World::start().await;
    let keys = keygen(w.dir.path(), "trusted");
    let bin = portable_install(&w);
    let mut d = spawn_updating(&w, &bin, &keys.public, "notify", &w.gh.origin());
    let client = d.client().await;
    // Signed by a key the service does not trust: once downloaded, it is refused for that.
    let other = keygen(w.dir.path(), "other");
    let script = "#!/bin/sh\necho \"runner-manager 9.0.0\"\n";
    let assets = script_release(w.dir.path(), &other, "9.0.0", script);
    w.gh.publish_release(FEED_REPO, "v9.0.0", &assets);
    // The download host answers 503 to every asset.
    w.gh.inject_fault(rm_testkit::FaultRule::always(
        rm_testkit::EndpointMatch::name("release_asset"),
        rm_testkit::Fault::Status5xx {
            status: 503,
            rate: 1.0,
        },
    ));
    w.gh.reset_counters();
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    // Tried again (three times in all), then left for the next check: not refused.
    assert_eq!(s.state, UpdateState::Available, "{s:?}");
    let m = s.message.clone().unwrap();
    assert!(
        m.contains("could not be downloaded") && m.contains("503"),
        "{m}"
    );
    assert!(s.fix.unwrap().contains("network and free disk space"));
    assert_eq!(w.gh.counters().endpoint("release_asset").requests, 3);
    // The way is clear: the next try downloads it, and only now is it judged (and refused,
    // for its key: it was never marked refused before).
    w.gh.clear_faults();
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    assert!(
        s.message.unwrap().contains("signature does not verify"),
        "refused for what it is"
    );
    assert_eq!(version_of(&w.socket()).await.as_deref(), Some(CURRENT));
    d.terminate(Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_signed_with_a_new_key_endorsed_by_the_trusted_one_is_accepted_and_the_key_kept()
{
    if !have_minisign() {
        return;
    }
    let w = World::start().await;
    let keys = keygen(w.dir.path(), "trusted");
    let next = keygen(w.dir.path(), "next");
    let bin = portable_install(&w);
    let mut d = spawn_updating(&w, &bin, &keys.public, "notify", &w.gh.origin());
    let client = d.client().await;
    // The binary reports another version: refused after the signatures, so nothing is swapped
    // and what refused it says how far verification went.
    let script = "#!/bin/sh\necho \"runner-manager 9.0.1\"\n";
    let endorse = |dir: &Path, by: &Keys| {
        let key = dir.join("release-key.pub");
        fs::copy(&next.public, &key).unwrap();
        sign(by, &key, "runner-manager release key");
    };

    // Endorsed by a key the service does not trust: refused on the signature.
    let stranger = keygen(w.dir.path(), "stranger");
    let assets = script_release(&w.dir.path().join("a"), &next, "9.0.0", script);
    endorse(&w.dir.path().join("a/release-9.0.0"), &stranger);
    w.gh.publish_release(
        FEED_REPO,
        "v9.0.0",
        &listing(&w.dir.path().join("a/release-9.0.0")),
    );
    drop(assets);
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    assert!(s.message.unwrap().contains("signature does not verify"));
    assert!(!w.data_dir().join("release-key.learnt.pub").exists());

    // Endorsed by the trusted key: the signatures pass, the new key is kept.
    script_release(&w.dir.path().join("b"), &next, "9.0.2", script);
    endorse(&w.dir.path().join("b/release-9.0.2"), &keys);
    w.gh.publish_release(
        FEED_REPO,
        "v9.0.2",
        &listing(&w.dir.path().join("b/release-9.0.2")),
    );
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    let m = s.message.unwrap();
    assert!(
        m.contains("binary reports 9.0.1"),
        "past the signatures: {m}"
    );
    assert_eq!(
        fs::read_to_string(w.data_dir().join("release-key.learnt.pub")).unwrap(),
        fs::read_to_string(&next.public).unwrap()
    );

    // The next release, signed with the new key alone (no endorsement), is trusted too.
    script_release(&w.dir.path().join("c"), &next, "9.0.3", script);
    w.gh.publish_release(
        FEED_REPO,
        "v9.0.3",
        &listing(&w.dir.path().join("c/release-9.0.3")),
    );
    let s = client.update(&UpdateRequest { apply: true }).await.unwrap();
    let m = s.message.unwrap();
    assert!(m.contains("binary reports 9.0.1"), "{m}");
    assert_eq!(version_of(&w.socket()).await.as_deref(), Some(CURRENT));
    d.terminate(Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_does_not_start_is_rolled_back_and_not_retried() {
    if !have_minisign() {
        return;
    }
    let w = World::start().await;
    let keys = keygen(w.dir.path(), "trusted");
    let bin = portable_install(&w);
    let before = fs::read(&bin).unwrap();
    let mut d = spawn_updating(&w, &bin, &keys.public, "auto", &w.gh.origin());
    let _ = d.client().await;
    // Signed and verified, answers `--version`, but cannot run the service.
    let assets = script_release(
        w.dir.path(),
        &keys,
        "9.0.0",
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo \"runner-manager 9.0.0\"; exit 0; fi\necho broken build >&2\nexit 1\n",
    );
    w.gh.publish_release(FEED_REPO, "v9.0.0", &assets);
    // The broken build runs in the daemon's process and exits at once.
    let status = d.wait_exit(Duration::from_secs(30));
    assert!(!status.success());
    assert!(d.log_text().contains("files swapped"), "{}", d.log_text());
    // The watchdog gives it 30 s, restores the previous binary and starts it again.
    wait_version(&w.socket(), CURRENT, Duration::from_secs(60)).await;
    assert_eq!(
        fs::read(&bin).unwrap(),
        before,
        "the previous binary is back"
    );
    let client = rm_proto::Client::connect(&w.socket()).await.unwrap();
    let s = client.update_status().await.unwrap();
    assert_eq!(s.state, UpdateState::Failed, "{s:?}");
    let m = s.message.unwrap();
    assert!(m.contains("did not answer its version within 30 s"), "{m}");
    // Not applied again by itself: the checks go on, the state stays failed, nothing swapped.
    w.gh.reset_counters();
    eventually(Duration::from_secs(10), "two more checks", || {
        w.gh.counters().endpoint("release_latest").requests >= 2
    })
    .await;
    assert_eq!(w.gh.counters().endpoint("release_asset").requests, 0);
    assert_eq!(version_of(&w.socket()).await.as_deref(), Some(CURRENT));
    kill_processes_under(w.dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_feed_is_quiet_and_an_unchanged_feed_costs_nothing() {
    if !have_minisign() {
        return;
    }
    let w = World::start().await;
    let keys = keygen(w.dir.path(), "trusted");
    let bin = portable_install(&w);

    // Offline: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let offline = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut d = spawn_updating(&w, &bin, &keys.public, "auto", &offline);
    let client = d.client().await;
    let mut watch = client.watch().await.unwrap();
    let s = status_until_update(&client, |s| s.last_check.is_some()).await;
    assert_ne!(
        s.state,
        UpdateState::Failed,
        "offline is not a failure: {s:?}"
    );
    // A few more checks, and not one update event meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_millis(200), watch.next()).await
    {
        if let WatchMessage::Event { event } = m {
            assert!(
                !matches!(
                    event,
                    Event::UpdateFailed { .. } | Event::UpdateAvailable { .. }
                ),
                "an offline feed raised {event:?}"
            );
        }
    }
    assert!(
        !d.log_text().contains("WARN rm_daemon::update"),
        "{}",
        d.log_text()
    );
    d.terminate(Duration::from_secs(20));

    // Unchanged: the first check is charged, every later one is a 304.
    let assets = script_release(
        w.dir.path(),
        &keys,
        "9.0.0",
        "#!/bin/sh\necho runner-manager 9.0.0\n",
    );
    w.gh.publish_release(FEED_REPO, "v9.0.0", &assets);
    w.gh.reset_counters();
    let mut d = spawn_updating(&w, &bin, &keys.public, "notify", &w.gh.origin());
    eventually(Duration::from_secs(20), "four checks", || {
        w.gh.counters().endpoint("release_latest").requests >= 4
    })
    .await;
    let c = w.gh.counters().endpoint("release_latest");
    assert_eq!(c.charged, 1, "{c:?}");
    assert!(c.not_modified >= 3, "{c:?}");
    // notify: announced, not applied.
    let client = d.client().await;
    let s = client.update_status().await.unwrap();
    assert_eq!(s.state, UpdateState::Available, "{s:?}");
    assert_eq!(s.available_version.as_deref(), Some("9.0.0"));
    assert_eq!(w.gh.counters().endpoint("release_asset").requests, 0);
    d.terminate(Duration::from_secs(20));
}

async fn status_until_update(
    client: &rm_proto::Client,
    check: impl Fn(&rm_proto::UpdateStatus) -> bool,
) -> rm_proto::UpdateStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = client.update_status().await.unwrap();
        if check(&s) {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "last: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newer build `scripts/test.sh` made, with its version and signing key.
fn newer_build() -> Option<(PathBuf, String, Keys)> {
    let dir = std::env::var_os("RM_TEST_RELEASE_DIR").map(PathBuf::from);
    let Some(dir) = dir.filter(|d| d.join("SHA256SUMS").exists()) else {
        eprintln!(
            "SKIPPED: no newer build to update to: run scripts/test.sh (it builds one with \
             scripts/release.sh and sets RM_TEST_RELEASE_DIR)"
        );
        return None;
    };
    let version = std::env::var("RM_TEST_RELEASE_VERSION").unwrap();
    let keys = Keys {
        public: PathBuf::from(std::env::var_os("RM_TEST_RELEASE_PUBKEY").unwrap()),
        secret: PathBuf::new(),
    };
    Some((dir, version, keys))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_newer_build_is_applied_after_the_busy_runner_finished() {
    let Some((release, next, keys)) = newer_build() else {
        return;
    };
    let w = World::start().await;
    let bin = portable_install(&w);
    // A 1 s stop deadline: only the update's own drain (no deadline) lets the 20 s job finish.
    let mut d = spawn_updating_with(
        &w,
        &bin,
        &keys.public,
        "auto",
        &w.gh.origin(),
        &["--drain-deadline", "1"],
    );
    let (client, label) = serving_repo(&w, &mut d, 2).await;
    let mut watch = client.watch().await.unwrap();
    // Longer than the check, download and verification take on a loaded machine.
    let job = w.queue_with(&label, 1, Duration::from_secs(20), Behaviour::Succeed)[0];
    eventually(Duration::from_secs(20), "the job taken", || {
        w.job_status(job) == Some(JobStatus::InProgress)
    })
    .await;
    let pid = d.pid();
    w.gh.publish_release(FEED_REPO, &format!("v{next}"), &listing(&release));

    // Announced, downloaded with progress, verified, then applying while the job runs.
    let mut seen = Vec::new();
    while !seen.iter().any(|k: &String| k == "applying") {
        let m = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("update events")
            .unwrap()
            .unwrap();
        if let WatchMessage::Event { event } = m {
            match event {
                Event::UpdateAvailable {
                    new_version,
                    automatic,
                    ..
                } => {
                    assert_eq!(new_version, next);
                    assert!(automatic);
                    seen.push("available".into());
                }
                Event::UpdateProgress { .. } => seen.push("progress".into()),
                Event::UpdateApplying { .. } => seen.push("applying".into()),
                Event::UpdateFailed { reason, .. } => panic!("update failed: {reason}"),
                _ => {}
            }
        }
    }
    assert_eq!(seen.first().map(String::as_str), Some("available"));
    assert!(seen.iter().any(|k| k == "progress"), "{seen:?}");
    assert_eq!(
        w.job_status(job),
        Some(JobStatus::InProgress),
        "the job still runs while the update waits"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while version_of(&w.socket()).await.as_deref() != Some(next.as_str()) {
        if std::time::Instant::now() > deadline {
            let log = d.log_text();
            let tail: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
            panic!(
                "runner-manager {next} never answered; job {:?}; log:\n{}",
                w.gh.job(job),
                tail[tail.len().saturating_sub(40)..].join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(w.completed_by_us(job), "the job finished before the swap");
    assert_eq!(
        w.gh.job(job).and_then(|j| j.conclusion),
        Some(rm_testkit::Conclusion::Success),
        "the job ran to its end"
    );
    assert_eq!(d.pid(), pid);
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "same process, new build"
    );
    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("runner-manager {next}")
    );
    let client = rm_proto::Client::connect(&w.socket()).await.unwrap();
    let s = client.update_status().await.unwrap();
    assert_eq!(s.state, UpdateState::Updated, "{s:?}");
    assert_eq!(s.previous_version.as_deref(), Some(CURRENT));
    // A watcher that reconnects after the restart hears "updated to X".
    let mut watch = client.watch().await.unwrap();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("update_finished after the restart")
            .unwrap()
            .unwrap();
        if let WatchMessage::Event {
            event:
                Event::UpdateFinished {
                    previous_version,
                    new_version,
                    ..
                },
        } = m
        {
            assert_eq!(
                (previous_version.as_str(), new_version.as_str()),
                (CURRENT, next.as_str())
            );
            break;
        }
    }
    // The watchdog confirms the trial.
    eventually(Duration::from_secs(40), "the update confirmed", || {
        fs::read_to_string(w.data_dir().join("update-state.json"))
            .is_ok_and(|t| t.contains("\"done\""))
    })
    .await;
    assert!(w.gh.runners().is_empty(), "no registration left");
    assert!(
        !w.data_dir().join("updates").exists(),
        "backups and the download are removed once confirmed"
    );
    // The new build keeps serving: a job queued now is taken by it.
    let later = w.queue(&label, 1, Duration::from_millis(200))[0];
    eventually(Duration::from_secs(30), "the new build serves", || {
        w.completed_by_us(later)
    })
    .await;
    d.terminate(Duration::from_secs(30));
    kill_processes_under(w.dir.path());
}
