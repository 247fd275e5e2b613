//! End to end through the kit: the fake GitHub mints a JIT config over HTTP, the fake runner
//! package is unpacked into a temp dir, and its real `bin/Runner.Listener` process connects to
//! the fake's broker, takes (or waits for) a job and exits the way the real runner does.
//!
//! Needs the listener binary: run with `cargo test --workspace` (or `cargo build --workspace`
//! first); otherwise the tests fail with a message saying so.

// Test helpers outside #[test] fns: a panic is a failed test with a line number.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rm_testkit::package::RunnerPackage;
use rm_testkit::{
    Behaviour, Conclusion, FakeConfig, FakeGitHub, InstallationRepos, JobSpec, JobStatus,
};
use serde_json::{json, Value};

const REPO: &str = "octo/hello";
const DEADLINE: Duration = Duration::from_secs(15);

struct Kit {
    gh: FakeGitHub,
    octo: octocrab::Octocrab,
    tmp: tempfile::TempDir,
}

async fn kit() -> Kit {
    let gh = FakeGitHub::start(FakeConfig {
        poll_hold: Duration::from_millis(400),
        // Long enough that a listener starved by a loaded machine keeps its session between
        // polls; the crash test waits (with a deadline) for the timeout to take it offline.
        session_timeout: Duration::from_secs(3),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    gh.create_user("octo").unwrap();
    gh.create_repo(REPO).unwrap();
    gh.create_installation("octo", InstallationRepos::All)
        .unwrap();
    let token = gh.issue_token("octo").unwrap().access_token;
    let octo = octocrab::Octocrab::builder()
        .base_uri(gh.origin())
        .unwrap()
        .user_access_token(token)
        .build()
        .unwrap();
    Kit {
        gh,
        octo,
        tmp: tempfile::tempdir().unwrap(),
    }
}

/// A JIT registration over the REST API, as the product makes it: (runner id, blob).
async fn jitconfig(kit: &Kit, name: &str, labels: &[&str]) -> (u64, String) {
    let body =
        json!({"name": name, "runner_group_id": 1, "labels": labels, "work_folder": "_work"});
    let answer: Value = kit
        .octo
        .post(
            format!("/repos/{REPO}/actions/runners/generate-jitconfig"),
            Some(&body),
        )
        .await
        .unwrap();
    let id = answer["runner"]["id"].as_u64().unwrap();
    let blob = answer["encoded_jit_config"].as_str().unwrap().to_owned();
    (id, blob)
}

async fn list_runners(kit: &Kit) -> Value {
    kit.octo
        .get(format!("/repos/{REPO}/actions/runners"), None::<&()>)
        .await
        .unwrap()
}

/// The per-runner secret inside a blob, to check it never leaks.
fn secret_of(blob: &str) -> String {
    let outer: Value = serde_json::from_slice(&STANDARD.decode(blob).unwrap()).unwrap();
    let creds = STANDARD
        .decode(outer[".credentials"].as_str().unwrap())
        .unwrap();
    let creds: Value = serde_json::from_slice(&creds).unwrap();
    creds["Data"]["token"].as_str().unwrap().to_owned()
}

/// A fresh runner directory unpacked from the shared test package.
fn runner_dir(kit: &Kit, name: &str) -> PathBuf {
    let pkg = RunnerPackage::shared_for_tests().unwrap();
    pkg.unpack_into(&kit.tmp.path().join(name)).unwrap()
}

/// Starts `bin/Runner.Listener run` with the config only in the environment; stdout/stderr go
/// to files in the runner's parent dir so the test can read them while it runs.
fn start_listener(dir: &Path, blob: &str) -> Child {
    start_listener_with_env(dir, blob, &[])
}

/// [`start_listener`] with more variables in the listener's environment.
fn start_listener_with_env(dir: &Path, blob: &str, env: &[(&str, &str)]) -> Child {
    let out = std::fs::File::create(dir.with_extension("stdout")).unwrap();
    let err = std::fs::File::create(dir.with_extension("stderr")).unwrap();
    Command::new(dir.join("bin/Runner.Listener"))
        .arg("run")
        .current_dir(dir)
        .env("ACTIONS_RUNNER_INPUT_JITCONFIG", blob)
        .env_remove("RUNNER_ROOT")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap()
}

fn stdout_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.with_extension("stdout")).unwrap()
}

fn stderr_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.with_extension("stderr")).unwrap()
}

/// `_diag` file names starting with `prefix`.
fn diag_logs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir.join("_diag")) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(prefix) && name.ends_with("-utc.log")
        })
        .collect()
}

async fn wait_exit(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("listener still running after {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn runner_view(kit: &Kit, id: u64) -> Option<rm_testkit::RunnerView> {
    kit.gh.runners().into_iter().find(|r| r.id == id)
}

/// `/proc/<pid>/cmdline`, once the exec has filled it in.
async fn cmdline_of(child: &Child) -> String {
    let path = format!("/proc/{}/cmdline", child.id());
    let mut cmdline = Vec::new();
    wait_until("the listener's cmdline", || {
        cmdline = std::fs::read(&path).unwrap_or_default();
        !cmdline.is_empty()
    })
    .await;
    String::from_utf8_lossy(&cmdline).replace('\0', " ")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_takes_its_job_completes_it_and_cleans_up() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("build", &["self-hosted", "gpu"]).duration(Duration::from_millis(500)),
        )
        .unwrap();
    let (runner_id, blob) = jitconfig(&kit, "rm-e2e-1", &["gpu"]).await;
    let dir = runner_dir(&kit, "r1");

    let mut child = start_listener(&dir, &blob);
    let cmdline = cmdline_of(&child).await;
    let status = wait_exit(&mut child).await;
    assert_eq!(status.code(), Some(0), "stderr: {}", stderr_of(&dir));

    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(job.status, JobStatus::Completed);
    assert_eq!(job.conclusion, Some(Conclusion::Success));
    assert_eq!(job.runner_id, Some(runner_id));
    // JIT: the registration is gone after the one job.
    assert_eq!(list_runners(&kit).await["total_count"], 0);
    assert!(kit.gh.runners().is_empty());

    assert_eq!(diag_logs(&dir, "Runner_").len(), 1);
    assert_eq!(diag_logs(&dir, "Worker_").len(), 1);
    for file in [".runner", ".credentials", ".credentials_rsaparams"] {
        assert!(!dir.join(file).exists(), "{file} was not deleted");
    }
    assert!(dir.join("_work/hello/hello").is_dir());

    let out = stdout_of(&dir);
    for line in [
        "√ Connected to GitHub",
        "Current runner version: '2.336.0'",
        "Z: Listening for Jobs",
        "Z: Running job: build",
        "Z: Job build completed with result: Succeeded",
        "Exiting runner...",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }

    // The config never shows on the command line, the console or in the logs.
    let secret = secret_of(&blob);
    assert!(
        !cmdline.contains(&blob) && cmdline.contains("run"),
        "{cmdline}"
    );
    let mut seen = out + &stderr_of(&dir);
    for log in diag_logs(&dir, "") {
        seen += &std::fs::read_to_string(log).unwrap();
    }
    assert!(!seen.contains(&secret) && !seen.contains(&blob));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_runner_waits_and_exits_when_its_registration_is_deleted() {
    let kit = kit().await;
    let (runner_id, blob) = jitconfig(&kit, "rm-e2e-idle", &["none"]).await;
    let dir = runner_dir(&kit, "idle");
    let mut child = start_listener(&dir, &blob);
    wait_until("the runner to come online", || {
        runner_view(&kit, runner_id).is_some_and(|r| r.status == "online" && r.os == "Linux")
    })
    .await;
    // Several long polls (400 ms each) pass without a job; the listener keeps waiting.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "listener gave up waiting"
    );
    assert_eq!(runner_view(&kit, runner_id).unwrap().status, "online");
    assert_eq!(diag_logs(&dir, "Runner_").len(), 1);
    assert!(diag_logs(&dir, "Worker_").is_empty());
    assert!(dir.join(".runner").is_file());

    let resp = kit
        .octo
        ._delete(
            format!(
                "{}/repos/{REPO}/actions/runners/{runner_id}",
                kit.gh.origin()
            ),
            None::<&()>,
        )
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let status = wait_exit(&mut child).await;
    assert_eq!(status.code(), Some(1));
    assert!(stdout_of(&dir).contains("The runner no longer exists on the server"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_idle_deletes_the_session_and_exits_0() {
    let kit = kit().await;
    let (runner_id, blob) = jitconfig(&kit, "rm-e2e-term", &["none"]).await;
    let dir = runner_dir(&kit, "term");
    let mut child = start_listener(&dir, &blob);
    wait_until("the runner to come online", || {
        runner_view(&kit, runner_id).is_some_and(|r| r.status == "online")
    })
    .await;
    signal(&child, "TERM");
    let status = wait_exit(&mut child).await;
    assert_eq!(status.code(), Some(0));
    // The session was deleted at once (well before the 1.5 s session timeout), the
    // registration stays.
    let runner = runner_view(&kit, runner_id).unwrap();
    let log = std::fs::read_to_string(&diag_logs(&dir, "Runner_")[0]).unwrap();
    assert_eq!(
        (runner.status.as_str(), runner.busy),
        ("offline", false),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_job_leaves_the_runner_busy_and_offline() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("boom", &["self-hosted"]).behaviour(Behaviour::Crash),
        )
        .unwrap();
    let (runner_id, blob) = jitconfig(&kit, "rm-e2e-crash", &["x"]).await;
    let dir = runner_dir(&kit, "crash");
    let mut child = start_listener(&dir, &blob);
    let status = wait_exit(&mut child).await;
    assert_ne!(status.code(), Some(0));
    assert!(stdout_of(&dir).contains("Running job: boom"));
    assert_eq!(diag_logs(&dir, "Worker_").len(), 1);
    // Nothing cleaned up: a crash does not get to.
    assert!(dir.join(".runner").is_file());
    wait_until("the session to time out", || {
        runner_view(&kit, runner_id).is_some_and(|r| r.status == "offline")
    })
    .await;
    assert!(runner_view(&kit, runner_id).unwrap().busy);
    assert_eq!(kit.gh.job(job_id).unwrap().status, JobStatus::InProgress);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_job_concludes_failure() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("test", &["self-hosted", "linux"]).behaviour(Behaviour::Fail),
        )
        .unwrap();
    let (_, blob) = jitconfig(&kit, "rm-e2e-fail", &["x"]).await;
    let dir = runner_dir(&kit, "fail");
    let mut child = start_listener(&dir, &blob);
    let status = wait_exit(&mut child).await;
    assert_eq!(status.code(), Some(0));
    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(
        (job.status, job.conclusion),
        (JobStatus::Completed, Some(Conclusion::Failure))
    );
    assert!(stdout_of(&dir).contains("Job test completed with result: Failed"));
    assert!(!dir.join(".credentials").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_listener_with_the_same_config_gets_a_session_conflict() {
    let kit = kit().await;
    let (runner_id, blob) = jitconfig(&kit, "rm-e2e-twice", &["none"]).await;
    let first_dir = runner_dir(&kit, "first");
    let second_dir = runner_dir(&kit, "second");
    let mut first = start_listener(&first_dir, &blob);
    wait_until("the first runner to come online", || {
        runner_view(&kit, runner_id).is_some_and(|r| r.status == "online")
    })
    .await;
    let mut second = start_listener(&second_dir, &blob);
    let status = wait_exit(&mut second).await;
    assert_eq!(status.code(), Some(5));
    assert!(stdout_of(&second_dir).contains("A session for this runner already exists."));
    signal(&first, "INT");
    assert_eq!(wait_exit(&mut first).await.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_is_not_a_jit_config_is_refused() {
    let kit = kit().await;
    let dir = runner_dir(&kit, "foreign");
    // Shaped like a classic (config.sh) runner's files, not a JIT blob from our fake.
    let foreign = STANDARD.encode(
        json!({".runner": STANDARD.encode(r#"{"AgentId":1}"#),
               ".credentials": STANDARD.encode(r#"{"Scheme":"OAuth","Data":{"clientId":"c"}}"#)})
        .to_string(),
    );
    for blob in [foreign.as_str(), "definitely not base64 !!"] {
        let mut child = start_listener(&dir, blob);
        let status = wait_exit(&mut child).await;
        assert_eq!(status.code(), Some(1));
        let err = stderr_of(&dir);
        assert!(
            err.contains("Invalid configuration provided for jitconfig"),
            "{err}"
        );
        assert!(!err.contains(blob) && !stdout_of(&dir).contains(blob));
        assert!(!dir.join(".runner").exists());
    }
    assert!(kit.gh.runners().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_refuses_root_and_maps_listener_errors_to_0() {
    let kit = kit().await;
    let dir = runner_dir(&kit, "script");
    let uid = Command::new("id").arg("-u").output().unwrap();
    let is_root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let run_sh = |allow_root: bool| {
        let mut cmd = Command::new(dir.join("run.sh"));
        cmd.current_dir(&dir)
            .env("ACTIONS_RUNNER_INPUT_JITCONFIG", "bad")
            .env_remove("RUNNER_MANUALLY_TRAP_SIG");
        if allow_root {
            cmd.env("RUNNER_ALLOW_RUNASROOT", "1");
        } else {
            cmd.env_remove("RUNNER_ALLOW_RUNASROOT");
        }
        cmd.output().unwrap()
    };
    if is_root {
        let out = run_sh(false);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Must not run with sudo"));
    }
    // The listener refuses the config (exit 1); like the real script, run.sh still exits 0.
    let out = run_sh(true);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid configuration"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_retried_until_a_signal() {
    let kit = kit().await;
    let (_, blob) = jitconfig(&kit, "rm-e2e-down", &["none"]).await;
    kit.gh.shutdown();
    let dir = runner_dir(&kit, "down");
    let mut child = start_listener(&dir, &blob);
    wait_until("two connect errors", || {
        stdout_of(&dir).matches("Runner connect error: ").count() >= 2
    })
    .await;
    assert!(stdout_of(&dir).contains("Retrying until reconnected."));
    assert!(child.try_wait().unwrap().is_none());
    signal(&child, "TERM");
    assert_eq!(wait_exit(&mut child).await.code(), Some(0));
    assert!(!stdout_of(&dir).contains("Connected to GitHub"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_hanging_job_cancels_it() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("stuck", &["self-hosted"]).behaviour(Behaviour::Hang),
        )
        .unwrap();
    let (_, blob) = jitconfig(&kit, "rm-e2e-hang", &["x"]).await;
    let dir = runner_dir(&kit, "hang");
    let mut child = start_listener(&dir, &blob);
    wait_until("the job to start", || {
        kit.gh.job(job_id).unwrap().status == JobStatus::InProgress
            && stdout_of(&dir).contains("Running job: stuck")
    })
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "a hanging job must not end"
    );
    signal(&child, "TERM");
    assert_eq!(wait_exit(&mut child).await.code(), Some(0));
    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(
        (job.status, job.conclusion),
        (JobStatus::Completed, Some(Conclusion::Cancelled))
    );
    assert!(stdout_of(&dir).contains("Job stuck completed with result: Canceled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_with_jitconfig_argument_runs_the_job() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(REPO, JobSpec::new("lint", &["self-hosted", "x64"]))
        .unwrap();
    let (_, blob) = jitconfig(&kit, "rm-e2e-script", &["x"]).await;
    let dir = runner_dir(&kit, "script-ok");
    let mut child = Command::new(dir.join("run.sh"))
        .arg("--jitconfig")
        .arg(&blob)
        .current_dir(&dir)
        .env("RUNNER_ALLOW_RUNASROOT", "1")
        .env_remove("ACTIONS_RUNNER_INPUT_JITCONFIG")
        .env_remove("RUNNER_MANUALLY_TRAP_SIG")
        .stdout(std::fs::File::create(dir.with_extension("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.with_extension("stderr")).unwrap())
        .spawn()
        .unwrap();
    assert_eq!(wait_exit(&mut child).await.code(), Some(0));
    assert_eq!(
        kit.gh.job(job_id).unwrap().conclusion,
        Some(Conclusion::Success)
    );
    assert!(stdout_of(&dir).contains("Job lint completed with result: Succeeded"));
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim().chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}

/// The one Worker log's text.
fn worker_log(dir: &Path) -> String {
    let logs = diag_logs(dir, "Worker_");
    assert_eq!(logs.len(), 1, "{logs:?}");
    std::fs::read_to_string(&logs[0]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_step_runs_with_the_listeners_environment() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("cache-warm", &["self-hosted"]).with_command(
                "echo \"$GITHUB_JOB $FOO\" > \"$OUT\"; \
                 echo \"run=$GITHUB_RUN_ID ws=$GITHUB_WORKSPACE pwd=$(pwd -P)\"; \
                 test -d \"$RUNNER_TEMP\" && echo \"temp=$RUNNER_TEMP\"; \
                 echo to-stderr >&2; env > \"$OUT.env\"",
            ),
        )
        .unwrap();
    let run = kit.gh.job(job_id).unwrap().run_id;
    assert_eq!(
        kit.gh
            .job(job_id)
            .unwrap()
            .command
            .as_deref()
            .map(|c| c.starts_with("echo")),
        Some(true)
    );
    let (_, blob) = jitconfig(&kit, "rm-e2e-step", &["x"]).await;
    let dir = runner_dir(&kit, "step");
    let out = kit.tmp.path().join("step-out");
    let mut child = start_listener_with_env(
        &dir,
        &blob,
        &[("FOO", "from-the-service"), ("OUT", out.to_str().unwrap())],
    );
    assert_eq!(
        wait_exit(&mut child).await.code(),
        Some(0),
        "{}",
        stderr_of(&dir)
    );

    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(
        (job.status, job.conclusion),
        (JobStatus::Completed, Some(Conclusion::Success))
    );
    // The variable the listener was given reached the step, next to the runner's own.
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "cache-warm from-the-service\n"
    );
    let log = worker_log(&dir);
    let root = dir.canonicalize().unwrap();
    let ws = root.join("_work/hello/hello");
    let expected = format!("[step] run={run} ws={} pwd={}", ws.display(), ws.display());
    assert!(
        log.lines().any(|l| l.ends_with(&expected)),
        "{expected:?} in:\n{log}"
    );
    let temp = format!("[step] temp={}", root.join("_work/_temp").display());
    assert!(
        log.lines().any(|l| l.ends_with(&temp)),
        "{temp:?} in:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.ends_with("[step] to-stderr")),
        "{log}"
    );
    assert!(!stdout_of(&dir).contains("from-the-service"));
    // The JIT config is not handed on to the job.
    let env = std::fs::read_to_string(out.with_extension("env")).unwrap();
    assert!(env.contains("FOO=from-the-service"), "{env}");
    assert!(!env.contains("ACTIONS_RUNNER_INPUT_JITCONFIG") && !env.contains(&blob));
    assert!(!env.contains(&secret_of(&blob)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_fails_the_job() {
    let kit = kit().await;
    let job_id = kit
        .gh
        .queue_job(
            REPO,
            JobSpec::new("restore", &["self-hosted"]).with_command("echo cache miss; exit 7"),
        )
        .unwrap();
    let run = kit.gh.job(job_id).unwrap().run_id;
    let (_, blob) = jitconfig(&kit, "rm-e2e-step-fail", &["x"]).await;
    let dir = runner_dir(&kit, "step-fail");
    let mut child = start_listener(&dir, &blob);
    assert_eq!(wait_exit(&mut child).await.code(), Some(0));
    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(
        (job.status, job.conclusion),
        (JobStatus::Completed, Some(Conclusion::Failure))
    );
    assert!(stdout_of(&dir).contains("Job restore completed with result: Failed"));
    let log = worker_log(&dir);
    assert!(
        log.lines().any(|l| l.ends_with("[step] cache miss")),
        "{log}"
    );
    let runs: Value = kit
        .octo
        .get(format!("/repos/{REPO}/actions/runs/{run}"), None::<&()>)
        .await
        .unwrap();
    assert_eq!(runs["conclusion"], "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_step_kills_it_and_cancels_the_job() {
    let kit = kit().await;
    let job_id = kit.gh.queue_job(REPO, JobSpec::new("slow", &["self-hosted"])
                .with_command("sleep 60 & echo $! > \"$RUNNER_TEMP/pids\"; echo $$ >> \"$RUNNER_TEMP/pids\"; wait")).unwrap();
    let (_, blob) = jitconfig(&kit, "rm-e2e-step-stop", &["x"]).await;
    let dir = runner_dir(&kit, "step-stop");
    let pids_file = dir.join("_work/_temp/pids");
    let mut child = start_listener(&dir, &blob);
    wait_until("the step to start", || {
        std::fs::read_to_string(&pids_file).is_ok_and(|t| t.lines().count() == 2)
    })
    .await;
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    signal(&child, "TERM");
    assert_eq!(wait_exit(&mut child).await.code(), Some(0));
    let job = kit.gh.job(job_id).unwrap();
    assert_eq!(
        (job.status, job.conclusion),
        (JobStatus::Completed, Some(Conclusion::Cancelled))
    );
    assert!(stdout_of(&dir).contains("Job slow completed with result: Canceled"));
    // The shell and what it started are gone (killed as a group, reaped by init).
    for pid in pids {
        wait_until("the step's processes to end", || !alive(pid)).await;
    }
}
