//! The job sandbox: every runner process tree starts inside Linux namespaces, so a hostile job
//! can spend its own CPU time and reach the internet, and little else.
//!
//! The walls come from two maintained components rather than namespace code of our own:
//! **bubblewrap** (`bwrap`, what Flatpak builds its sandboxes with: mount, PID, IPC and user
//! namespaces, the filesystem view, `--die-with-parent`) and **pasta** (from `passt`: a private
//! network namespace with a user-mode TCP/IP stack for outbound traffic, so the job reaches the
//! internet but not the host's loopback services nor its abstract unix sockets, which are per
//! network namespace). Both run unprivileged, so the walls are the same whether the service
//! runs as root (the per-job uid stays a second wall) or as the developer. hakoniwa and
//! landlock were the alternatives: the first is namespace code we would then own through a
//! young crate, the second cannot give a network namespace nor hide a path's existence.
//!
//! The chain a runner starts as: `pasta … -- bwrap … -- bin/Runner.Listener run`. The service
//! tracks the outermost process (pasta: it leads the runner's session and process group and
//! reports the listener's exit code; a listener killed by a signal shows as `128 + signal`,
//! bwrap's convention). When the listener ends, bwrap's init inside the PID namespace ends and
//! the kernel kills everything left in it: no `setsid` or double-fork survivor.
//!
//! What a job sees:
//! - `/` read-only; `/home`, `/root`, `/run` (user runtime directories, the session and
//!   system buses, docker's socket, this service's socket directory) and every path the
//!   service hides (its data directory, runner root, package cache) are empty; only its own
//!   runtime directory and the caches it was given are bound back, writable where the
//!   permissions allow.
//! - private, size-capped `/tmp`, `/var/tmp` and `/dev/shm`, gone with the job; a minimal `/dev`.
//! - its own PID and IPC namespaces (`/proc` shows only its own processes), a fresh session
//!   with no controlling terminal (no `TIOCSTI`), a session keyring of its own, and no
//!   further user namespaces.
//! - a network namespace whose loopback is its own: only the ports named in
//!   [`SandboxConfig::forward_tcp`] (a GitHub on this host's loopback, in tests and GitHub
//!   Enterprise Server on localhost) reach the host's loopback; nothing listens for it outside.

mod caps;
pub mod cgroups;
mod chain;
mod probe;

pub use caps::{JobCaps, CAPS_CHECK};
pub use cgroups::{CapLimits, JobCgroup, JobCgroups};
pub use chain::wrapper_chain;
pub use probe::{probe, sandbox_check, ProbeFailure, SANDBOX_CHECK};

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Whether runners start inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Every runner starts inside the walls; a host that cannot build them runs no job.
    #[default]
    Required,
    /// The operator's explicit opt-out: runners start without the walls (status, the tray
    /// and the doctor say so on every look).
    Off,
}

/// The sandbox's settings: what the service hides and what it lets through.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Paths a job must not see at all (the service's data directory, the local API's socket
    /// directory, the runner root, the package cache). Missing ones are skipped.
    pub hidden: Vec<PathBuf>,
    /// TCP ports on the host's loopback a job may reach (the configured GitHub, when it is on
    /// this host). Everything else on the host's loopback is out of reach.
    pub forward_tcp: Vec<u16>,
    /// A directory every job may write, for the test suite to collect what its probes saw.
    /// Never set on a real host (`daemon run --sandbox-test-share`, hidden).
    pub test_share: Option<PathBuf>,
}

impl SandboxConfig {
    pub fn is_off(&self) -> bool {
        self.mode == SandboxMode::Off
    }

    /// The defaults, with the loopback ports of `urls` (GitHub's web and API bases) forwarded:
    /// a GitHub on this host (GitHub Enterprise Server on localhost, a test's fake) stays
    /// reachable, nothing else on the host's loopback does.
    pub fn reaching(urls: &[&str]) -> SandboxConfig {
        let mut forward_tcp: Vec<u16> = urls.iter().filter_map(|u| loopback_port(u)).collect();
        forward_tcp.sort_unstable();
        forward_tcp.dedup();
        SandboxConfig {
            forward_tcp,
            ..SandboxConfig::default()
        }
    }
}

/// The TCP port of `url` when its host is this machine's loopback (`localhost`, `127.x.y.z`,
/// `[::1]`); the scheme's default port when none is given.
pub fn loopback_port(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    match port {
        Some(p) => p.parse().ok(),
        None => match scheme.to_ascii_lowercase().as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        },
    }
}

/// Each target's own choices (`rm_core::TargetSandbox`), shared: the service changes them at
/// run time and every later spawn of that target reads them. A target without an entry has the
/// default (walls, no Docker).
#[derive(Debug, Clone, Default)]
pub struct TargetChoices(
    std::sync::Arc<
        std::sync::RwLock<std::collections::HashMap<rm_core::PolicyId, rm_core::TargetSandbox>>,
    >,
);

impl TargetChoices {
    pub fn for_policy(&self, policy: rm_core::PolicyId) -> rm_core::TargetSandbox {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&policy)
            .copied()
            .unwrap_or_default()
    }

    pub fn set(&self, policy: rm_core::PolicyId, choice: rm_core::TargetSandbox) {
        let mut map = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if choice.is_default() {
            map.remove(&policy);
        } else {
            map.insert(policy, choice);
        }
    }
}

/// Where the host's Docker daemon listens, the first that exists: the socket a job that may
/// use Docker gets at `/run/docker.sock` (`/var/run` is a link to `/run`).
pub fn docker_socket() -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    ["/run/docker.sock", "/var/run/docker.sock"]
        .iter()
        .map(PathBuf::from)
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket()))
}

/// The programs that build the walls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    pub bwrap: PathBuf,
    pub pasta: PathBuf,
}

/// Where to look for the sandbox's programs instead of `PATH` (directories, `:`-separated):
/// for an install outside the system directories.
pub const TOOLS_PATH_ENV: &str = "RUNNER_MANAGER_SANDBOX_PATH";

/// Where a program is: [`TOOLS_PATH_ENV`]'s directories when set; else the service's `PATH`,
/// then the system directories (a service manager's `PATH` can be minimal).
pub fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dirs: Vec<PathBuf> = match std::env::var_os(TOOLS_PATH_ENV) {
        Some(only) => std::env::split_paths(&only).collect(),
        None => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .chain(["/usr/bin", "/bin", "/usr/sbin", "/usr/local/bin"].map(PathBuf::from))
                .collect()
        }
    };
    dirs.into_iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The missing ones, for the doctor's fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} not installed", missing.join(" and "))]
pub struct MissingTools {
    /// Debian package names.
    pub missing: Vec<&'static str>,
}

impl Tools {
    pub fn find() -> Result<Tools, MissingTools> {
        let bwrap = find_program("bwrap");
        let pasta = find_program("pasta");
        match (bwrap, pasta) {
            (Some(bwrap), Some(pasta)) => Ok(Tools { bwrap, pasta }),
            (b, p) => Err(MissingTools {
                missing: [(b.is_none(), "bubblewrap"), (p.is_none(), "passt")]
                    .into_iter()
                    .filter_map(|(m, name)| m.then_some(name))
                    .collect(),
            }),
        }
    }
}

/// One runner's walls: who it runs as inside and what it may write.
#[derive(Debug, Clone)]
pub struct Walls<'a> {
    pub config: &'a SandboxConfig,
    /// The runner's own directory (writable; its working directory). `None` for the probe.
    pub runtime: Option<&'a Path>,
    /// Shared directories it was given (caches), bound at the same path; the file
    /// permissions decide what it may write there.
    pub shared: &'a [PathBuf],
    /// The ids the job sees itself as (its real ones outside).
    pub uid: u32,
    pub gid: u32,
    /// The host's Docker socket, bound at `/run/docker.sock` (the target opted in).
    pub docker: Option<&'a Path>,
    /// A resolver configuration naming [`DNS_FORWARD`], bound over the host's: given when the
    /// host's resolver is on its loopback (systemd-resolved's `127.0.0.53`), which the job's
    /// network namespace cannot reach; pasta relays what is sent to that address to it.
    pub resolv_conf: Option<&'a Path>,
    /// Cache layers the per-user service mounts inside pasta's user namespace, before bwrap
    /// ([`crate::caches::layers::LayerMounts::chain_args`]).
    pub layers: Option<&'a crate::caches::layers::LayerMounts>,
}

/// The address a job's DNS queries go to when the host's resolver is on its loopback: pasta
/// forwards them to the host's first resolver (a link-local address, routed to pasta like any
/// other).
pub const DNS_FORWARD: &str = "169.254.0.53";

/// The resolver configuration a job gets when `host_resolv` (the host's `/etc/resolv.conf`)
/// names a loopback resolver first: [`DNS_FORWARD`] instead, the host's `search` and
/// `options` kept. `None` when the host's resolver is reachable from the job's network as it is.
pub fn job_resolv_conf(host_resolv: &str) -> Option<String> {
    let first = host_resolv.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("nameserver")).then(|| words.next())?
    })?;
    let loopback = first
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    let mut out = format!("# runner-manager: the host's resolver ({first}) through the job sandbox\nnameserver {DNS_FORWARD}\n");
    for line in host_resolv.lines() {
        let word = line.split_whitespace().next();
        if matches!(word, Some("search" | "domain" | "options")) {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    Some(out)
}

/// The size cap of each private tmpfs (`/tmp`, `/var/tmp`, `/dev/shm`): a quarter of the
/// machine's memory, at least 256 MiB. A tmpfs holds memory only for what is written to it.
fn tmpfs_bytes() -> u64 {
    let total = crate::doctor::total_memory().unwrap_or(4 << 30);
    (total / 4).max(256 << 20)
}

/// Host directories replaced by an empty tmpfs whatever the service's settings: other users'
/// files, root's, and `/run` (user runtime directories with their keyrings and buses, the
/// system bus, docker's socket, the service's own socket directory).
const ALWAYS_HIDDEN: &[&str] = &["/home", "/root", "/run", "/mnt", "/media", "/srv"];

/// Under `/run`, what a job still needs: the resolver's files (where `/etc/resolv.conf`
/// points on systemd hosts).
const RUN_KEPT: &[&str] = &["/run/systemd/resolve"];

/// The program and arguments that start `program args…` inside the walls.
pub fn wrap(
    tools: &Tools,
    walls: &Walls<'_>,
    program: &Path,
    args: &[&str],
) -> (PathBuf, Vec<OsString>) {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    // pasta: a network namespace of its own with the host's addresses and routes copied in;
    // nothing forwarded into it (-t/-u none: nothing of the job listens on the host), only
    // the named loopback ports out to the host (-T), no UDP to the host's loopback (-U none),
    // and the gateway address not mapped to the host (else it reaches the host's loopback).
    for s in [
        "-f",
        "-q",
        "--config-net",
        "--no-map-gw",
        "-t",
        "none",
        "-u",
        "none",
    ] {
        push(s);
    }
    push("-T");
    if walls.config.forward_tcp.is_empty() {
        push("none");
    } else {
        let ports: Vec<String> = walls
            .config
            .forward_tcp
            .iter()
            .map(u16::to_string)
            .collect();
        push(&ports.join(","));
    }
    push("-U");
    push("none");
    if walls.resolv_conf.is_some() {
        push("--dns-forward");
        push(DNS_FORWARD);
    }
    push("--");
    if let Some(layers) = walls.layers {
        a.extend(layers.chain_args());
    }
    a.push(tools.bwrap.clone().into_os_string());
    a.extend(bwrap_args(walls));
    a.push("--".into());
    a.push(program.as_os_str().to_owned());
    a.extend(args.iter().map(OsString::from));
    (tools.pasta.clone(), a)
}

fn bwrap_args(walls: &Walls<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    let size = tmpfs_bytes().to_string();
    let (uid, gid) = (walls.uid.to_string(), walls.gid.to_string());
    for s in [
        "--unshare-user",
        "--uid",
        &uid,
        "--gid",
        &gid,
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ] {
        push(s);
    }
    for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
        for s in ["--perms", "1777", "--size", &size, "--tmpfs", dir] {
            push(s);
        }
    }
    for dir in hidden_paths(walls.config) {
        a.push("--tmpfs".into());
        a.push(dir.into_os_string());
    }
    for kept in RUN_KEPT {
        if Path::new(kept).is_dir() {
            for s in ["--ro-bind", kept, kept] {
                a.push(s.into());
            }
        }
    }
    let writable = walls
        .runtime
        .into_iter()
        .chain(walls.shared.iter().map(PathBuf::as_path))
        .chain(walls.config.test_share.as_deref());
    for dir in writable {
        a.push("--bind".into());
        a.push(dir.as_os_str().to_owned());
        a.push(dir.as_os_str().to_owned());
    }
    if let Some(socket) = walls.docker {
        a.push("--bind".into());
        a.push(socket.as_os_str().to_owned());
        a.push("/run/docker.sock".into());
    }
    if let Some(conf) = walls.resolv_conf {
        // Over the file the host's /etc/resolv.conf is (often a link into /run).
        let target = std::fs::canonicalize("/etc/resolv.conf")
            .unwrap_or_else(|_| PathBuf::from("/etc/resolv.conf"));
        a.push("--ro-bind".into());
        a.push(conf.as_os_str().to_owned());
        a.push(target.into_os_string());
    }
    a.push("--chdir".into());
    a.push(
        walls
            .runtime
            .unwrap_or(Path::new("/"))
            .as_os_str()
            .to_owned(),
    );
    a
}

/// The directories to hide, parents first, each once: a path inside one already hidden is
/// hidden with it, and a missing one needs nothing (bwrap could not mount over it anyway on a
/// read-only root).
fn hidden_paths(config: &SandboxConfig) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = ALWAYS_HIDDEN
        .iter()
        .map(PathBuf::from)
        .chain(
            config
                .hidden
                .iter()
                .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())),
        )
        .filter(|p| p.is_dir())
        .collect();
    all.sort_by_key(|p| p.components().count());
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in all {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(config: &SandboxConfig, runtime: &Path, shared: &[PathBuf]) -> Vec<String> {
        let tools = Tools {
            bwrap: "/usr/bin/bwrap".into(),
            pasta: "/usr/bin/pasta".into(),
        };
        let walls = Walls {
            config,
            runtime: Some(runtime),
            shared,
            uid: 1234,
            gid: 99,
            docker: None,
            resolv_conf: None,
            layers: None,
        };
        let (program, args) = wrap(&tools, &walls, &runtime.join("bin/x"), &["run"]);
        assert_eq!(program, Path::new("/usr/bin/pasta"));
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn follows(args: &[String], seq: &[&str]) -> bool {
        args.windows(seq.len())
            .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
    }

    #[test]
    fn hidden_paths_are_mounted_over_before_the_runtime_is_bound_back() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let runtime = data.join("runners/rt1");
        std::fs::create_dir_all(&runtime).unwrap();
        let config = SandboxConfig {
            hidden: vec![
                data.clone(),
                data.join("runners"),
                dir.path().join("missing"),
            ],
            forward_tcp: vec![8080, 9090],
            ..SandboxConfig::default()
        };
        let args = args_of(&config, &runtime, &[]);
        let data = std::fs::canonicalize(&data).unwrap();
        let data_s = data.display().to_string();
        let rt = runtime.display().to_string();
        let hide = args
            .iter()
            .position(|a| *a == data_s)
            .expect("the data dir is hidden");
        assert_eq!(args[hide - 1], "--tmpfs");
        // Inside a hidden one: hidden with it, not mounted twice; missing ones skipped.
        assert!(!args.iter().any(|a| a.ends_with("/runners")));
        assert!(!args.iter().any(|a| a.ends_with("missing")));
        let bind = args
            .iter()
            .position(|a| *a == rt)
            .expect("the runtime is bound");
        assert!(bind > hide, "bound after the tmpfs that hides its parent");
        assert!(follows(&args, &["--bind", &rt, &rt]));
        assert!(follows(
            &args,
            &["--chdir", &rt, "--", &format!("{rt}/bin/x"), "run"]
        ));
        assert!(follows(&args, &["-T", "8080,9090", "-U", "none"]));
        assert!(follows(&args, &["-t", "none", "-u", "none"]));
        assert!(follows(&args, &["--uid", "1234", "--gid", "99"]));
        for wall in [
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--disable-userns",
        ] {
            assert!(args.iter().any(|a| a == wall), "{wall}");
        }
    }

    #[test]
    fn nothing_reaches_the_hosts_loopback_unless_named() {
        let dir = tempfile::tempdir().unwrap();
        let args = args_of(&SandboxConfig::default(), dir.path(), &[]);
        assert!(follows(&args, &["-T", "none"]));
        assert!(args.iter().any(|a| a == "--no-map-gw"));
    }

    #[test]
    fn only_a_github_on_this_hosts_loopback_is_forwarded() {
        assert_eq!(loopback_port("http://127.0.0.1:38811"), Some(38811));
        assert_eq!(loopback_port("http://127.0.0.1:38811/api/v3"), Some(38811));
        assert_eq!(loopback_port("https://localhost/api/v3"), Some(443));
        assert_eq!(loopback_port("http://[::1]:9000/"), Some(9000));
        assert_eq!(loopback_port("https://api.github.com"), None);
        assert_eq!(loopback_port("https://10.0.0.5:8443"), None);
        assert_eq!(loopback_port("not a url"), None);
        let config = SandboxConfig::reaching(&["http://127.0.0.1:7", "http://127.0.0.1:7/api/v3"]);
        assert_eq!(config.forward_tcp, vec![7]);
    }

    #[test]
    fn a_loopback_resolver_is_reached_through_pasta() {
        let host = "# stub\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n";
        let conf = job_resolv_conf(host).unwrap();
        assert!(
            conf.contains(&format!("nameserver {DNS_FORWARD}\n")),
            "{conf}"
        );
        assert!(conf.contains("options edns0 trust-ad\n") && conf.contains("search lan\n"));
        assert!(!conf.contains("nameserver 127.0.0.53"));
        assert_eq!(
            job_resolv_conf("nameserver 10.0.0.1\nnameserver 127.0.0.1\n"),
            None
        );
        assert!(job_resolv_conf("nameserver ::1\n").is_some());
        assert_eq!(job_resolv_conf("# nothing\n"), None);

        let tools = Tools {
            bwrap: "/usr/bin/bwrap".into(),
            pasta: "/usr/bin/pasta".into(),
        };
        let config = SandboxConfig::default();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("resolv.conf");
        let walls = Walls {
            config: &config,
            runtime: Some(dir.path()),
            shared: &[],
            uid: 1,
            gid: 1,
            docker: None,
            resolv_conf: Some(&file),
            layers: None,
        };
        let (_, args) = wrap(&tools, &walls, Path::new("/bin/true"), &[]);
        let args: Vec<String> = args
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(follows(&args, &["--dns-forward", DNS_FORWARD, "--"]));
        let f = file.display().to_string();
        assert!(args.windows(2).any(|w| w[0] == "--ro-bind" && w[1] == f));
    }

    #[test]
    fn shared_directories_are_bound_at_their_own_path() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache/ns");
        let args = args_of(
            &SandboxConfig::default(),
            dir.path(),
            std::slice::from_ref(&cache),
        );
        let c = cache.display().to_string();
        assert!(follows(&args, &["--bind", &c, &c]));
    }
}
