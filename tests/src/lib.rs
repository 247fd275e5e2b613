//! Support for the end-to-end tests: the built binaries, a fake GitHub with the fake runner
//! package, and a real `runner-manager daemon run` on a socket in a temp directory.
//!
//! The binaries are the ones `cargo test --workspace` (or `cargo build --workspace --bins`)
//! built next to the test executable; a missing one is an error naming that command.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a broken fixture may panic

pub mod bus;
pub mod jobs;
pub mod pool;
pub mod postgres;
pub mod tray;
pub mod webdriver;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rm_testkit::package::RunnerPackage;
use rm_testkit::{FakeConfig, FakeGitHub, InstallationRepos};
use tokio::process::{Child, Command};

/// A built workspace binary, e.g. `runner-manager`.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("exe dir");
    let candidates = [
        deps.join(name),
        deps.parent().expect("target dir").join(name),
    ];
    for c in &candidates {
        if c.is_file() {
            return c.clone();
        }
    }
    panic!(
        "{name} is not built ({} missing): run `cargo build --workspace --bins` first",
        candidates[1].display()
    );
}

/// Polls `check` until it returns `Some`, or fails after `deadline` with `what`.
pub async fn until<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fake GitHub seeded like the demo: user `octo`, repo `octo/hello` installed, the fake
/// runner package served. Device-flow polls are allowed every second.
pub async fn fake_github() -> FakeGitHub {
    fake_github_with(FakeConfig {
        device_interval: Duration::from_secs(1),
        ..FakeConfig::default()
    })
    .await
}

/// [`fake_github`] with another configuration (e.g. short-lived device codes).
pub async fn fake_github_with(config: FakeConfig) -> FakeGitHub {
    fake_github_repos(config, &["octo/hello"]).await
}

/// [`fake_github_with`] where user `octo` owns (and the installation covers) every repository
/// of `repos` (each `octo/<name>`).
pub async fn fake_github_repos(config: FakeConfig, repos: &[&str]) -> FakeGitHub {
    let gh = FakeGitHub::start(config).await.expect("fake GitHub starts");
    gh.create_user("octo").unwrap();
    for repo in repos {
        gh.create_repo(repo).unwrap();
    }
    gh.create_installation(
        "octo",
        InstallationRepos::Selected(repos.iter().map(|r| (*r).to_owned()).collect()),
    )
    .unwrap();
    gh.set_runner_package(&RunnerPackage::shared_for_tests().expect("fake runner package"));
    gh
}

/// A running `runner-manager daemon run` with its own data directory and socket.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub socket: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    /// The binary (the built `runner-manager` unless [`Daemon::start_exe`] names a copy).
    exe: PathBuf,
    /// The whole `daemon run` command line after the binary (for a restart).
    args: Vec<std::ffi::OsString>,
    envs: Vec<(String, String)>,
    /// Run as this ordinary user (the per-user service) instead of as the test's own user.
    user: Option<DevUser>,
    /// Run in a session keyring of its own holding this `user` key (name, value), as a service
    /// started from a login session may hold its session's keys.
    keyring: Option<(String, String)>,
    /// Run in a mount namespace of its own where this file is `/etc/resolv.conf` (a host whose
    /// resolver is on its loopback, as systemd-resolved's is). Needs root.
    resolv_conf: Option<PathBuf>,
    /// The cgroup it runs in, delegated to it as systemd's `Delegate=yes` does (where the
    /// tests run as root): its jobs get cgroups of their own under it. Last, so that it is
    /// removed after the service is killed.
    cgroup: Option<rm_testkit::cgroup::TestCgroup>,
}

/// An ordinary login user made for the tests (as root): the developer whose workstation the
/// per-user service serves.
#[derive(Debug, Clone)]
pub struct DevUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The tests' developer account `rm-e2e-dev` (made once per machine; needs root).
pub fn dev_user() -> DevUser {
    const NAME: &str = "rm-e2e-dev";
    let id = |flag: &str| -> Option<u32> {
        let out = std::process::Command::new("id")
            .args([flag, NAME])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        // Another test binary may be making it at the same moment: whoever loses finds it.
        let _ = std::process::Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/bash", NAME])
            .status();
    }
    let (uid, gid) = (
        id("-u").expect("the test user exists"),
        id("-g").expect("the test user has a group"),
    );
    DevUser {
        name: NAME.to_owned(),
        uid,
        gid,
        home: PathBuf::from("/home").join(NAME),
    }
}

impl Daemon {
    /// [`Daemon::start`] as the per-user service of `user` (an ordinary account): runners run
    /// as that user, inside the sandbox. The test, as root, is an operator of it anyway.
    pub async fn start_as(gh: &FakeGitHub, user: &DevUser) -> Daemon {
        Daemon::start_in_keyring(gh, Some(user), None).await
    }

    /// [`Daemon::start`] (as `user`, when given) on a host whose `/etc/resolv.conf` is
    /// `resolv_conf` (in a mount namespace of the service's own: the test's host is left as it
    /// is). Needs root.
    pub async fn start_with_resolver(
        gh: &FakeGitHub,
        user: Option<&DevUser>,
        resolv_conf: &Path,
    ) -> Daemon {
        let mut d = Daemon::prepare(gh, &bin("runner-manager"), &[], &[]);
        d.resolv_conf = Some(resolv_conf.to_owned());
        if let Some(user) = user {
            d.user = Some(user.clone());
            d.give_dirs_to(user);
        }
        d.spawn().await;
        d
    }

    /// The service's directories, made and given to `user` (the per-user service's own).
    fn give_dirs_to(&self, user: &DevUser) {
        for dir in [self.dir.path().to_path_buf(), self.data_dir.clone()]
            .into_iter()
            .chain(self.socket.parent().map(Path::to_path_buf))
        {
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
        }
    }

    /// [`Daemon::start`] (as `user`, when given) in a new session keyring that holds the
    /// `user` key `key` = (name, value): the service possesses it, as it would a login
    /// session's keys.
    pub async fn start_in_keyring(
        gh: &FakeGitHub,
        user: Option<&DevUser>,
        key: Option<(&str, &str)>,
    ) -> Daemon {
        let mut d = Daemon::prepare(gh, &bin("runner-manager"), &[], &[]);
        d.keyring = key.map(|(k, v)| (k.to_owned(), v.to_owned()));
        let Some(user) = user else {
            d.spawn().await;
            return d;
        };
        d.user = Some(user.clone());
        d.give_dirs_to(user);
        d.spawn().await;
        d
    }

    /// Starts the service against `gh` and waits until its socket answers.
    pub async fn start(gh: &FakeGitHub) -> Daemon {
        Daemon::start_with(gh, &[]).await
    }

    /// [`Daemon::start`] with more `daemon run` arguments.
    pub async fn start_with(gh: &FakeGitHub, extra: &[&str]) -> Daemon {
        Daemon::start_env(gh, extra, &[]).await
    }

    /// [`Daemon::start_with`] with more environment (e.g. another D-Bus session).
    pub async fn start_env(gh: &FakeGitHub, extra: &[&str], envs: &[(&str, &str)]) -> Daemon {
        Daemon::start_exe(gh, &bin("runner-manager"), extra, envs).await
    }

    /// [`Daemon::start_env`] running the binary `exe` (e.g. a copy installed the way the
    /// portable archive installs it, so the updater may replace it).
    pub async fn start_exe(
        gh: &FakeGitHub,
        exe: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Daemon {
        let mut daemon = Daemon::prepare(gh, exe, extra, envs);
        daemon.spawn().await;
        daemon
    }

    /// [`Daemon::start`] with its data directory and socket at paths none of whose
    /// directories exist yet below the test's own (as a fresh `~/.local/share` would be).
    pub async fn start_in_new_dirs(gh: &FakeGitHub, extra: &[&str]) -> Daemon {
        let mut d = Daemon::prepare(gh, &bin("runner-manager"), extra, &[]);
        let data_dir = d.dir.path().join("home/.local/share/runner-manager");
        let socket = d.dir.path().join("sockets/rm/api.sock");
        for (flag, value) in [("--data-dir", &data_dir), ("--socket", &socket)] {
            let at = d
                .args
                .iter()
                .position(|a| a == flag)
                .expect("prepare passes the flag");
            d.args[at + 1] = value.clone().into();
        }
        d.data_dir = data_dir;
        d.socket = socket;
        d.spawn().await;
        d
    }

    /// The command line and directories of a service, not started yet.
    fn prepare(gh: &FakeGitHub, exe: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("rm-e2e")
            .tempdir()
            .expect("temp dir");
        // Reachable by other uids (the unauthorised-user test connects as nobody).
        set_mode(dir.path(), 0o755);
        let data_dir = dir.path().join("data");
        let socket = dir.path().join("run").join("api.sock");
        let log = dir.path().join("daemon.log");
        let mut args: Vec<std::ffi::OsString> = vec!["daemon".into(), "run".into()];
        args.push("--data-dir".into());
        args.push(data_dir.clone().into());
        args.push("--socket".into());
        args.push(socket.clone().into());
        for a in ["--api-base", &gh.origin(), "--web-base", &gh.origin()] {
            args.push(a.into());
        }
        args.push("--client-id".into());
        args.push(gh.client_id().into());
        // Fast passes so a test sees a job picked up in well under a second (unless the test
        // sets its own poll interval).
        if !extra.contains(&"--poll-ms") {
            args.push("--poll-ms".into());
            args.push("200".into());
        }
        for a in ["--tick-ms", "200"] {
            args.push(a.into());
        }
        // The file store unless the caller picks another.
        if !extra.contains(&"--credential-store") {
            args.push("--credential-store".into());
            args.push("file".into());
        }
        // Memory admission stays on, expecting what a fake runner really needs (a few MiB; 64
        // to spare), so a busy test machine's memory never decides a test; the admission
        // tests set their own numbers.
        if !extra.contains(&"--runner-memory-mb") {
            args.push("--runner-memory-mb".into());
            args.push("64".into());
        }
        // The one directory jobs may write outside their sandbox, where the tests' jobs report
        // what they saw (`jobs::out_dir`).
        args.push("--sandbox-test-share".into());
        args.push(jobs::share_dir().into());
        args.extend(extra.iter().map(std::ffi::OsString::from));
        Daemon {
            dir,
            data_dir,
            socket,
            child: None,
            log,
            exe: exe.to_owned(),
            args,
            envs: envs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            user: None,
            keyring: None,
            resolv_conf: None,
            cgroup: {
                static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rm_testkit::cgroup::TestCgroup::new(&format!("daemon{n}"))
            },
        }
    }

    /// [`Daemon::start_as`] (as `user`, when given) in the cgroup it was started from, as a
    /// service started outside systemd is: its jobs get no cgroup of their own.
    pub async fn start_without_cgroup(gh: &FakeGitHub, user: Option<&DevUser>) -> Daemon {
        let mut d = Daemon::prepare(gh, &bin("runner-manager"), &[], &[]);
        d.cgroup = None;
        if let Some(user) = user {
            d.user = Some(user.clone());
            d.give_dirs_to(user);
        }
        d.spawn().await;
        d
    }

    /// The cgroup the service runs in (`None`: the tests do not run as root).
    pub fn cgroup(&self) -> Option<&rm_testkit::cgroup::TestCgroup> {
        self.cgroup.as_ref()
    }

    async fn spawn(&mut self) {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        use std::ffi::OsString;
        let as_user = |u: &DevUser| -> Vec<OsString> {
            vec![
                "setpriv".into(),
                format!("--reuid={}", u.uid).into(),
                format!("--regid={}", u.gid).into(),
                "--clear-groups".into(),
                "--".into(),
            ]
        };
        let mut line: Vec<OsString> = Vec::new();
        let mut envs: Vec<(&str, &str)> = Vec::new();
        // Into its cgroup first, as root (the user may not move a process out of the root
        // cgroup), then everything else.
        if let Some(cg) = &self.cgroup {
            if let Some(u) = &self.user {
                cg.delegate_to(u.uid, u.gid)
                    .expect("the test cgroup is delegated");
            }
            line.extend([
                "sh".into(),
                "-c".into(),
                r#"echo $$ > "$0" && exec "$@""#.into(),
            ]);
            line.push(cg.entry().join("cgroup.procs").into());
        }
        // The identity switch: by the spawn where nothing runs before the service, else by
        // setpriv (in the resolver's namespace, after its mount).
        let switch_by_spawn = self.cgroup.is_none() && self.resolv_conf.is_none();
        if let (Some(u), false, None) = (&self.user, switch_by_spawn, &self.resolv_conf) {
            line.extend(as_user(u));
        }
        if let Some((name, value)) = &self.keyring {
            line.extend(
                [
                    "keyctl",
                    "session",
                    "-",
                    "sh",
                    "-c",
                    "keyctl add user \"$RM_KEY_NAME\" \"$RM_KEY_VALUE\" @s >/dev/null && exec \"$0\" \"$@\"",
                ]
                .map(OsString::from),
            );
            envs.push(("RM_KEY_NAME", name));
            envs.push(("RM_KEY_VALUE", value));
        } else if let Some(conf) = &self.resolv_conf {
            // A mount namespace of its own (as root), the file bound over the host's, then
            // the service as its user.
            line.extend(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                ]
                .map(OsString::from),
            );
            line.push(
                r#"conf=$1; shift; mount --bind "$conf" /etc/resolv.conf && exec "$@""#.into(),
            );
            line.push("sh".into());
            line.push(conf.clone().into());
            if let Some(u) = &self.user {
                line.extend(as_user(u));
            }
        }
        line.push(self.exe.clone().into());
        let mut cmd = Command::new(&line[0]);
        cmd.args(&line[1..]).envs(envs);
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .kill_on_drop(true);
        if let Some(u) = &self.user {
            if switch_by_spawn {
                cmd.uid(u.uid).gid(u.gid);
            }
            cmd.env("HOME", &u.home)
                .env("USER", &u.name)
                .env("LOGNAME", &u.name)
                .env_remove("XDG_RUNTIME_DIR")
                .current_dir(&u.home);
        }
        let child = cmd.spawn().expect("runner-manager daemon run starts");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if rm_proto::Client::connect(&self.socket).await.is_ok() {
                break;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the daemon exited early ({status}):\n{}", self.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the daemon's socket did not answer within 15 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(parent) = self.socket.parent() {
            set_mode(parent, 0o755);
        }
    }

    /// Stops the service (SIGTERM, clean exit) and starts it again on the same data directory
    /// and socket.
    pub async fn restart(&mut self) {
        self.halt().await.expect("the daemon stops cleanly");
        self.spawn().await;
    }

    /// SIGTERM, then wait for a clean exit; [`Daemon::resume`] starts it again.
    pub async fn halt(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("already stopped")?;
        if let Some(pid) = child.id() {
            let status = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
            if !status.success() {
                bail!("kill -TERM {pid} failed");
            }
        }
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .context("the daemon did not stop within 20 s of SIGTERM")??;
        if !status.success() {
            bail!("the daemon exited with {status}:\n{}", self.log());
        }
        Ok(())
    }

    /// SIGKILL, as a crash: no drain, no clean-up, nothing told to GitHub or the pool. Only the
    /// service's own process is signalled (its runners, each in its own process group, are
    /// not). [`Daemon::resume`] starts it again on the same data directory.
    pub async fn kill(&mut self) {
        let mut child = self.child.take().expect("the daemon is running");
        child.kill().await.expect("SIGKILL the daemon");
    }

    /// Starts a halted service again (same data directory and socket).
    pub async fn resume(&mut self) {
        self.spawn().await;
    }

    /// The daemon's combined output so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A connected API client.
    pub async fn client(&self) -> rm_proto::Client {
        rm_proto::Client::connect(&self.socket)
            .await
            .expect("client connects")
    }

    /// Hands a fresh token pair for `login` straight to the service (tests that are not about
    /// sign-in skip the device flow).
    pub async fn sign_in(&self, gh: &FakeGitHub, login: &str) {
        self.sign_in_token(gh, login).await;
    }

    /// [`Daemon::sign_in`], answering the access token handed over (the service's own: each
    /// service signed in so is told apart by `FakeGitHub::requests_by_token`).
    pub async fn sign_in_token(&self, gh: &FakeGitHub, login: &str) -> String {
        let t = gh.issue_token(login).unwrap();
        let token = t.access_token.clone();
        let put = rm_proto::CredentialPut {
            access_token: rm_proto::SecretString::new(t.access_token),
            expires_at: rm_proto::UnixMillis::from_millis(t.expires_at.timestamp_millis()),
            refresh_token: rm_proto::SecretString::new(t.refresh_token.expect("refresh token")),
            refresh_expires_at: rm_proto::UnixMillis::from_millis(
                t.refresh_expires_at
                    .expect("refresh expiry")
                    .timestamp_millis(),
            ),
            login: Some(login.to_owned()),
        };
        self.client().await.put_credential(&put).await.unwrap();
        token
    }

    /// The CLI with this daemon's socket and data directory.
    pub fn cli(&self) -> Command {
        let mut c = Command::new(bin("runner-manager"));
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Runs the CLI to completion.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.cli().args(args).output().await.expect("CLI runs")
    }

    /// Runs the CLI and requires success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(
            o.status.success(),
            "{args:?} failed ({:?}): {}{}\ndaemon log:\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            self.log()
        );
        String::from_utf8(o.stdout).expect("utf-8")
    }

    /// Runs the CLI with `input` on its stdin (e.g. a password for `--password-stdin`) and
    /// requires success; returns stdout.
    pub async fn ok_stdin(&self, args: &[&str], input: &str) -> String {
        use tokio::io::AsyncWriteExt as _;
        let mut child = self
            .cli()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("CLI runs");
        let mut stdin = child.stdin.take().expect("stdin piped");
        // A CLI that exits without reading is reported below by its status and output.
        let _ = stdin.write_all(input.as_bytes()).await;
        drop(stdin);
        let o = child.wait_with_output().await.expect("CLI runs");
        assert!(
            o.status.success(),
            "{args:?} failed ({:?}): {}{}\ndaemon log:\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            self.log()
        );
        String::from_utf8(o.stdout).expect("utf-8")
    }

    /// SIGTERM, then wait for a clean exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.halt().await
    }
}

/// The routing label `repo add` printed (`runs-on: <label>`).
pub fn routing_label(add_output: &str) -> String {
    add_output
        .lines()
        .find_map(|l| l.trim().strip_prefix("runs-on: "))
        .unwrap_or_else(|| panic!("no `runs-on:` line in {add_output:?}"))
        .trim()
        .to_owned()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// Whether this process runs as root (the other-uid test needs it).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
