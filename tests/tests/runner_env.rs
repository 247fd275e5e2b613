//! The host's runner environment (`host env set`) reaches the runners started after the change,
//! without a restart, while a runner started before keeps what it had; the values never reach
//! the service's log, and another local user can neither read nor change them. Real binary,
//! fake GitHub, fake runner listeners (real processes: their environment is read from /proc).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rm_e2e::{bin, fake_github, is_root, routing_label, until, Daemon};
use rm_testkit::{FakeGitHub, JobSpec, JobStatus};

/// A value that must never be logged (a proxy URL with a password, as people have).
const PROXY: &str = "http://user:pw-e2e-7f3a@proxy.invalid:3128";
const RUNNER_PATH: &str = "/opt/rm-e2e/bin:/usr/local/bin:/usr/bin:/bin";

/// The environment of the running listener started from a runtime under `data_dir`, read
/// from `/proc/<pid>/environ` (the service's runners run `<runtime>/bin/Runner.Listener`).
fn listener_environ(data_dir: &Path) -> Option<BTreeMap<String, String>> {
    let data_dir = data_dir.canonicalize().ok()?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            continue;
        }
        let Ok(exe) = std::fs::read_link(entry.path().join("exe")) else {
            continue;
        };
        if !(exe.starts_with(&data_dir) && exe.ends_with("bin/Runner.Listener")) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: BTreeMap<String, String> = raw
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                let (k, v) = kv.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect();
        // Mid-`execve` the kernel already shows the new `exe` but not yet the new environment
        // (it reads as empty): that is "not started yet", not "started with nothing".
        if vars.is_empty() {
            continue;
        }
        return Some(vars);
    }
    None
}

/// Queues a job that runs for a while and answers its listener's environment as it runs;
/// then waits for the job to finish and its runner to be gone.
async fn environ_of_next_runner(
    d: &Daemon,
    gh: &FakeGitHub,
    label: &str,
    name: &str,
) -> BTreeMap<String, String> {
    gh.queue_run(
        "octo/hello",
        vec![JobSpec::new(name, &[label]).duration(Duration::from_secs(6))],
    )
    .unwrap();
    let job = gh.jobs().into_iter().find(|j| j.name == name).unwrap().id;
    // Read once the listener runs the job: by then it is long past its own exec.
    let env = until(
        Duration::from_secs(60),
        "the runner's listener running the job",
        || async {
            let running = gh
                .job(job)
                .is_some_and(|j| j.status == JobStatus::InProgress);
            running.then(|| listener_environ(&d.data_dir)).flatten()
        },
    )
    .await;
    let client = d.client().await;
    until(
        Duration::from_secs(90),
        "the job done, the runner gone",
        || {
            let client = &client;
            async move {
                let done = gh
                    .job(job)
                    .is_some_and(|j| j.status == JobStatus::Completed);
                let status = client.status().await.ok()?;
                (done && status.runners.is_empty() && listener_environ(&d.data_dir).is_none())
                    .then_some(())
            }
        },
    )
    .await;
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_set_at_run_time_reaches_the_next_runner_and_never_the_log() {
    if !cfg!(target_os = "linux") {
        eprintln!("SKIPPED: reads the runner's environment from /proc (Linux)");
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start(&gh).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);

    // Before any change: the runner gets the service's own environment only.
    let before = environ_of_next_runner(&d, &gh, &label, "before").await;
    assert!(!before.contains_key("HTTPS_PROXY"), "{:?}", before.keys());
    assert!(!before.contains_key("RM_E2E_MARK"));
    assert!(before.contains_key("ACTIONS_RUNNER_INPUT_JITCONFIG"));

    // Changed while the service runs: no restart. The listener obeys the proxy (as real ones
    // do), so the fake GitHub on loopback must be NO_PROXY, as a real setup's local hosts are.
    let out = d
        .ok(&[
            "host",
            "env",
            "set",
            &format!("HTTPS_PROXY={PROXY}"),
            "RM_E2E_MARK=present",
            "NO_PROXY=127.0.0.1,localhost",
            &format!("PATH={RUNNER_PATH}"),
        ])
        .await;
    assert!(out.contains("runners started from now on get it"), "{out}");
    assert!(!out.contains("pw-e2e-7f3a"), "{out}");
    // A refused change names the reason and stores nothing.
    let refused = d.run(&["host", "env", "set", "NPM_TOKEN=tok-e2e-91"]).await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("secrets belong in GitHub's secrets"), "{err}");
    // The same through the API (the CLI checks first): refused by the service itself.
    let e = d
        .client()
        .await
        .change_host_env(&rm_proto::HostEnvChange {
            set: [("GITHUB_TOKEN".to_owned(), "tok-e2e-92".to_owned())].into(),
            unset: vec![],
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("GitHub's secrets") && !e.contains("tok-e2e-92"),
        "{e}"
    );

    let shown = d.ok(&["host", "env", "show"]).await;
    assert_eq!(
        shown,
        format!(
            "HTTPS_PROXY={PROXY}\nNO_PROXY=127.0.0.1,localhost\nPATH={RUNNER_PATH}\n\
             RM_E2E_MARK=present\n"
        )
    );
    let host = d.ok(&["host", "show"]).await;
    assert!(
        host.contains(
            "4 variable(s) given to every runner: HTTPS_PROXY, NO_PROXY, PATH, RM_E2E_MARK"
        ),
        "{host}"
    );

    let after = environ_of_next_runner(&d, &gh, &label, "after").await;
    assert_eq!(after.get("HTTPS_PROXY").map(String::as_str), Some(PROXY));
    assert_eq!(
        after.get("RM_E2E_MARK").map(String::as_str),
        Some("present")
    );
    assert_eq!(
        after.get("PATH").map(String::as_str),
        Some(RUNNER_PATH),
        "a PATH value replaces the runner's PATH"
    );
    // What the service owns is still its own.
    assert!(after.contains_key("ACTIONS_RUNNER_INPUT_JITCONFIG"));
    let runners = d.data_dir.canonicalize().unwrap().join("runners");
    assert!(
        Path::new(&after["HOME"]).starts_with(&runners),
        "HOME stays the runtime's own: {}",
        after["HOME"]
    );
    assert!(!after.contains_key("NPM_TOKEN") && !after.contains_key("GITHUB_TOKEN"));

    // Unset: the next runner is without it.
    d.ok(&["host", "env", "unset", "RM_E2E_MARK"]).await;
    let unset = environ_of_next_runner(&d, &gh, &label, "unset").await;
    assert!(!unset.contains_key("RM_E2E_MARK"));
    assert_eq!(unset.get("HTTPS_PROXY").map(String::as_str), Some(PROXY));

    // Another local user may neither read nor change it (a raw request: no CLI check).
    if is_root() {
        for (method, body) in [
            ("GET", None),
            ("PATCH", Some(r#"{"set":{"RM_E2E_MARK":"x"}}"#)),
        ] {
            let mut probe = tokio::process::Command::new("setpriv");
            probe
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(bin("proto-probe"))
                .arg(&d.socket)
                .args([method, "/v1/host/env"]);
            if let Some(b) = body {
                probe.arg(b);
            }
            let o = probe.output().await.unwrap();
            let text = String::from_utf8_lossy(&o.stdout);
            assert_eq!(text.lines().next(), Some("403"), "{method}: {o:?}");
            assert!(!text.contains("pw-e2e-7f3a"), "{method}: {text}");
        }
    } else {
        eprintln!("skipped the other-user part: running a client as another uid needs root");
    }

    // Names are logged, values never.
    let log = d.log();
    assert!(log.contains("runner environment changed"), "{log}");
    assert!(log.contains("RM_E2E_MARK"), "names are logged");
    for value in ["pw-e2e-7f3a", "tok-e2e-91", "tok-e2e-92", "/opt/rm-e2e/bin"] {
        assert!(
            !log.contains(value),
            "the log holds the value {value}:\n{log}"
        );
    }
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_environment_survives_a_restart_and_offline_edits_apply_at_start() {
    let gh = fake_github().await;
    let mut d = Daemon::start(&gh).await;
    d.ok(&["host", "env", "set", "NO_PROXY=localhost"]).await;
    d.halt().await.unwrap();
    let o = d
        .run(&[
            "--offline",
            "host",
            "env",
            "set",
            "HTTP_PROXY=http://proxy:3128",
        ])
        .await;
    assert!(o.status.success(), "{o:?}");
    d.resume().await;
    assert_eq!(
        d.ok(&["host", "env", "show"]).await,
        "HTTP_PROXY=http://proxy:3128\nNO_PROXY=localhost\n"
    );
    let env = d.client().await.host_env().await.unwrap();
    assert!(env.values_shown, "an operator sees values");
    let status = d.client().await.status().await.unwrap();
    assert_eq!(status.host.runner_env, vec!["HTTP_PROXY", "NO_PROXY"]);
    d.stop().await.unwrap();
}
