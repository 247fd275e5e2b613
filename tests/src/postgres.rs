//! A throwaway PostgreSQL cluster for tests: Debian's own server binaries, a data directory in a
//! temp dir, run as an unprivileged account (PostgreSQL refuses root) on a free loopback port,
//! password authentication (scram-sha-256) so wrong passwords can be tested. No mock: the pool's
//! SQL runs against the real engine.
//!
//! One copy for two users: the e2e tests (`rm_e2e::postgres`) and `service/pool`'s own tests,
//! which include this file by path (`service/pool/tests/support/mod.rs`) rather than depend on
//! this crate and build the fake GitHub and D-Bus pieces with them. So it uses nothing of this
//! crate, only `nix` and `tempfile` (dependencies of both).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster's superuser (it also owns the database).
pub const USER: &str = "rm_test";
pub const PASSWORD: &str = "pw-test-4f1c";
/// The database [`Cluster::start`] creates.
pub const DATABASE: &str = "pool";

/// The newest installed server's bin directory (`RM_TEST_PG_BINDIR` overrides it).
fn bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RM_TEST_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b).expect(
        "no PostgreSQL server under /usr/lib/postgresql: install Debian's `postgresql` package \
         (scripts/test.sh does), or set RM_TEST_PG_BINDIR",
    )
}

/// The account the server runs as when the tests run as root.
fn server_account() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .or_else(|| nix::unistd::User::from_name("nobody").ok().flatten())
        .expect("neither a `postgres` nor a `nobody` account to run the test server as");
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running cluster; dropped, the server is stopped and its directory removed.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
    account: Option<(u32, u32)>,
    /// Extra server settings (`name=value`, each given as `-c`), kept across restarts.
    settings: Vec<String>,
}

impl Cluster {
    /// initdb, start, and create the database [`DATABASE`].
    pub fn start() -> Cluster {
        Cluster::start_with(&[], |_| {})
    }

    /// As [`Cluster::start`], with extra server settings (`name=value`, e.g.
    /// `shared_preload_libraries=pg_stat_statements`) and `prepare` run on the cluster's
    /// directory before the server first starts (to place files the settings name, such as
    /// certificates; [`Cluster::give_to_server`] hands them to the server's account).
    pub fn start_with(settings: &[&str], prepare: impl FnOnce(&Cluster)) -> Cluster {
        let dir = tempfile::Builder::new().prefix("rm-pg").tempdir().unwrap();
        let account = server_account();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.path().join("pw"), PASSWORD).unwrap();
        if let Some((uid, gid)) = account {
            for p in [dir.path().to_path_buf(), dir.path().join("pw")] {
                std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).unwrap();
            }
        }
        let out = Self::command(account, &bindir().join("initdb"))
            .args([
                "-D",
                "data",
                "-U",
                USER,
                "--auth=scram-sha-256",
                "--pwfile=pw",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut cluster = Cluster {
            dir,
            port: free_port(),
            child: None,
            account,
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        };
        prepare(&cluster);
        cluster.resume();
        cluster.psql_in("postgres", &format!("CREATE DATABASE {DATABASE}"));
        cluster
    }

    fn command(account: Option<(u32, u32)>, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.stdin(Stdio::null()).env_remove("PGDATA");
        if let Some((uid, gid)) = account {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// `postgres://rm_test:PASSWORD@127.0.0.1:PORT/pool`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}",
            self.port
        )
    }

    /// `postgres://rm_test@127.0.0.1:PORT/pool`: the address as a user types it where the
    /// password is given separately ([`Cluster::password`]).
    pub fn url_without_password(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    pub fn password(&self) -> &'static str {
        PASSWORD
    }

    /// Runs one SQL statement as the cluster's superuser in [`DATABASE`]; answers its rows
    /// unaligned (`psql -tA`).
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in(DATABASE, sql)
    }

    fn psql_in(&self, database: &str, sql: &str) -> String {
        let out = Command::new(bindir().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                database,
                "-tAc",
                sql,
            ])
            .env("PGPASSWORD", PASSWORD)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The cluster's directory. Its `data` is the data directory, from where the server reads
    /// relative paths in file settings (`ssl_cert_file=server.crt` is `data/server.crt`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Makes `path` the server account's (it runs unprivileged when the tests run as root).
    pub fn give_to_server(&self, path: &Path) {
        if let Some((uid, gid)) = self.account {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
        }
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Starts the server (again) on the same port and waits until it accepts connections.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let child = Self::command(self.account, &bindir().join("postgres"))
            .args([
                "-D",
                "data",
                "-p",
                &self.port.to_string(),
                "-k",
                ".",
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=60",
                "-c",
                "shared_buffers=16MB",
            ])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(bindir().join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the test PostgreSQL did not start within 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server (fast shutdown: connections are cut) and waits for it to exit.
    pub fn halt(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.halt();
    }
}
