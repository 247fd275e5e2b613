//! The JIT config (and the per-runner secret inside it) never appears in the listener's argv,
//! the journal's bytes, files the service leaves in the data directory (the listener's own
//! config files aside), or any line `lifecycle-host` logs at debug level. And the listener does
//! not run as root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken fixtures

mod support;

use base64::Engine;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

/// The listener's own config files (the real runner writes them too).
const LISTENER_FILES: &[&str] = &[".runner", ".credentials", ".credentials_rsaparams"];

fn listener_pid(root: &Path) -> Option<u32> {
    processes_under(root)
        .into_iter()
        .find(|(_, cmd)| is_listener(cmd))
        .map(|(pid, _)| pid)
}

fn env_of(pid: u32, key: &str) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    bytes.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{key}=")).map(str::to_string)
    })
}

/// The per-runner token inside the blob (FAKE_PROTOCOL.md: base64 JSON of base64 files).
fn runner_token(blob: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let outer: serde_json::Value = serde_json::from_slice(&b64.decode(blob).unwrap()).unwrap();
    let creds = b64.decode(outer[".credentials"].as_str().unwrap()).unwrap();
    let creds: serde_json::Value = serde_json::from_slice(&creds).unwrap();
    creds["Data"]["token"].as_str().unwrap().to_string()
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if meta.is_dir() {
            files_under(&e.path(), out);
        } else if meta.is_file() {
            out.push(e.path());
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jit_config_stays_in_the_listener_environment_only() {
    let w = World::start().await;
    w.queue(REPO, 1, Duration::from_millis(1500));
    let mut host = w.spawn_host(&[REPO], &["--max", "1", "--host-capacity", "1"], None);

    // The listener is running and connected (its runner is online at the fake).
    eventually(Duration::from_secs(15), "a connected listener", || {
        listener_pid(&w.runner_root()).is_some()
            && w.gh.runners().iter().any(|r| r.status == "online")
    })
    .await;
    let pid = listener_pid(&w.runner_root()).unwrap();
    let blob =
        env_of(pid, "ACTIONS_RUNNER_INPUT_JITCONFIG").expect("JIT config in the environment");
    let token = runner_token(&blob);
    assert!(blob.len() > 100 && token.len() >= 20);
    let secrets = [blob.as_str(), token.as_str()];

    // argv: exactly `<runtime>/bin/Runner.Listener run`.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(argv.len(), 2, "{argv:?}");
    assert!(
        argv[0].ends_with("bin/Runner.Listener") && argv[1] == "run",
        "{argv:?}"
    );
    for s in secrets {
        assert!(!contains(&cmdline, s));
    }

    // Never as root: a per-attempt unprivileged uid.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let uids: Vec<u32> = uid_line
        .split_whitespace()
        .skip(1)
        .map(|u| u.parse().unwrap())
        .collect();
    assert!(
        uids.iter().all(|u| *u != 0),
        "listener runs as root: {uid_line}"
    );

    // Files the service left (journal + WAL, cache, sidecars, runtime) while the runner runs.
    let mut files = Vec::new();
    files_under(&w.data_dir(), &mut files);
    assert!(files.iter().any(|f| f.ends_with("journal.sqlite")));
    let mut checked = 0;
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if LISTENER_FILES.contains(&name.as_str()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(f) else {
            continue;
        };
        checked += 1;
        for s in secrets {
            assert!(!contains(&bytes, s), "a secret is in {}", f.display());
        }
    }
    assert!(checked > 3, "{files:?}");

    eventually(Duration::from_secs(15), "job done", || {
        w.all_jobs_done_by_us()
    })
    .await;
    eventually(Duration::from_secs(10), "clean", || w.clean_state().is_ok()).await;
    // The journal after the whole lifecycle.
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", w.journal_path().display());
        if let Ok(bytes) = std::fs::read(&path) {
            for s in secrets {
                assert!(!contains(&bytes, s), "a secret is in {path}");
            }
        }
    }
    let status = host.terminate(Duration::from_secs(15));
    assert!(status.success());
    let log = host.log_text();
    assert!(log.contains("DEBUG"), "debug logging was on");
    assert!(log.contains("runner listener started"), "{log}");
    for s in secrets {
        assert!(!log.contains(s), "a secret is in lifecycle-host's log");
    }
}
