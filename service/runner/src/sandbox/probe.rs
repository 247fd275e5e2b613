//! Whether this host can build the walls: the doctor's `job_sandbox` check. It starts the real
//! chain (`pasta … bwrap … true`) as the identity runners run as, so what passes here is what a
//! runner gets, and each way it can fail is named with its fix.

use super::{wrap, SandboxConfig, Tools, Walls};
use rm_core::{CheckState, HostCheck};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The check's stable id.
pub const SANDBOX_CHECK: &str = rm_core::JOB_SANDBOX_CHECK;
const TITLE: &str = "Jobs run inside the sandbox";
const TUN: &str = "/dev/net/tun";
/// A probe that takes longer is reported as failed (it normally takes milliseconds).
const PROBE_LIMIT: Duration = Duration::from_secs(10);

/// Why the walls cannot be built, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFailure {
    pub detail: String,
    pub fix: String,
}

fn failure(detail: impl Into<String>, fix: impl Into<String>) -> ProbeFailure {
    ProbeFailure {
        detail: detail.into(),
        fix: fix.into(),
    }
}

/// Builds the walls once around `true` as `uid`/`gid` (`None`: this process's own identity)
/// and answers how long it took.
pub fn probe(
    config: &SandboxConfig,
    identity: Option<(u32, u32)>,
) -> Result<Duration, ProbeFailure> {
    let tools = Tools::find().map_err(|m| {
        failure(
            format!("{m}: the sandbox is built with bubblewrap and passt"),
            format!("sudo apt install {}", m.missing.join(" ")),
        )
    })?;
    let (uid, gid) = identity.unwrap_or_else(|| {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    });
    tun_usable(Path::new(TUN), uid, gid)?;
    let walls = Walls {
        config,
        runtime: None,
        shared: &[],
        uid,
        gid,
        docker: None,
        resolv_conf: None,
        layers: None,
    };
    let (program, args) = wrap(&tools, &walls, Path::new("/bin/true"), &[]);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some((uid, gid)) = identity {
        cmd.uid(uid).gid(gid);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| {
        failure(
            format!("{} could not be started: {e}", tools.pasta.display()),
            "reinstall it: sudo apt install --reinstall passt",
        )
    })?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > PROBE_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failure(
                    format!("building the sandbox took over {PROBE_LIMIT:?}"),
                    "check the machine's load, then run `runner-manager host doctor` again",
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                return Err(failure(
                    format!("waiting for the sandbox probe: {e}"),
                    "run `runner-manager host doctor` again",
                ))
            }
        }
    };
    let took = started.elapsed();
    if status.success() {
        return Ok(took);
    }
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    Err(classify(&stderr, status.code()))
}

/// What the tools said, turned into the cause and its fix.
fn classify(stderr: &str, code: Option<i32>) -> ProbeFailure {
    // pasta's harmless syslog complaints are no cause.
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("syslog") && !l.trim().is_empty())
        .collect();
    let said = if said.is_empty() {
        format!("exit code {code:?}")
    } else {
        said.join("; ")
    };
    let lower = said.to_ascii_lowercase();
    if lower.contains("unknown option") {
        return failure(
            format!("the installed bubblewrap or pasta is too old: {said}"),
            "install bubblewrap 0.8 or newer and a passt from 2023 or newer (Debian 12, Ubuntu \
             24.04 and later ship them)",
        );
    }
    if lower.contains("tun") {
        return failure(
            format!("the network wall cannot be built: {said}"),
            tun_fix(),
        );
    }
    if lower.contains("namespace")
        || lower.contains("uid map")
        || lower.contains("uid_map")
        || lower.contains("operation not permitted")
        || lower.contains("permission denied")
    {
        return failure(
            format!("unprivileged user namespaces are not available: {said}"),
            "allow them: `sudo sysctl -w user.max_user_namespaces=15000` (and in \
             /etc/sysctl.d/ to keep it); on Ubuntu 24.04 and later also \
             make sure the AppArmor profiles Ubuntu ships for bwrap and pasta are loaded \
             (`sudo systemctl reload apparmor`), or lift the restriction with \
             `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
        );
    }
    failure(
        format!("the sandbox could not be built: {said}"),
        "run `runner-manager host doctor` again; if it persists, reinstall bubblewrap and passt",
    )
}

fn tun_fix() -> String {
    "let unprivileged users open it, as desktop distributions do: `sudo chmod 0666 /dev/net/tun`, \
     and to keep that after a reboot `echo 'KERNEL==\"tun\", MODE=\"0666\"' | sudo tee \
     /etc/udev/rules.d/60-runner-manager-tun.rules`"
        .to_owned()
}

/// pasta opens `/dev/net/tun` from inside the job's user namespace, so it must be readable and
/// writable by the runner's own uid (Debian and Ubuntu desktops make it 0666; some servers and
/// containers leave it 0600).
fn tun_usable(path: &Path, uid: u32, gid: u32) -> Result<(), ProbeFailure> {
    let meta = std::fs::metadata(path).map_err(|e| {
        failure(
            format!(
                "{}: {e}: the network wall needs the tun device",
                path.display()
            ),
            "load the tun module: `sudo modprobe tun` (and add `tun` to /etc/modules)",
        )
    })?;
    if !meta.file_type().is_char_device() {
        return Err(failure(
            format!("{} is not a character device", path.display()),
            "load the tun module: `sudo modprobe tun`",
        ));
    }
    let mode = meta.mode();
    let bits = if meta.uid() == uid {
        (mode >> 6) & 0o7
    } else if meta.gid() == gid {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    if bits & 0o6 != 0o6 {
        return Err(failure(
            format!(
                "{} is mode {:04o}: runners (uid {uid}) cannot open it, so the network wall cannot be built",
                path.display(),
                mode & 0o7777
            ),
            tun_fix(),
        ));
    }
    Ok(())
}

/// The doctor's check: required while the sandbox is on (a host that fails it runs no job);
/// a warning in plain words while the operator has turned it off.
pub fn sandbox_check(config: &SandboxConfig, identity: Option<(u32, u32)>) -> HostCheck {
    let (state, required, detail, fix) = if config.is_off() {
        (
            CheckState::Warn,
            false,
            "the sandbox is turned off (`--sandbox off`): jobs run without it and can read \
             your files, other processes' environments and the services on this machine's \
             loopback"
                .to_owned(),
            Some("start the service without `--sandbox off`".to_owned()),
        )
    } else {
        match probe(config, identity) {
            Ok(took) => (
                CheckState::Pass,
                true,
                format!(
                    "private filesystem view, PID, IPC and network namespaces built in {} ms",
                    took.as_millis()
                ),
                None,
            ),
            Err(f) => (
                CheckState::Fail,
                true,
                format!(
                    "{}; no job runs until it is fixed, except on targets set to run without \
                     the sandbox",
                    f.detail
                ),
                Some(format!(
                    "{} (or, accepting that their jobs can read your files, set a target to run \
                     without it with `runner-manager repo set TARGET --sandbox off`, or the \
                     whole service with `--sandbox off`)",
                    f.fix
                )),
            ),
        }
    };
    HostCheck {
        id: SANDBOX_CHECK.to_owned(),
        title: TITLE.to_owned(),
        state,
        required,
        detail,
        fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tun_device_names_the_module() {
        let f = tun_usable(Path::new("/nonexistent/tun"), 1000, 1000).unwrap_err();
        assert!(f.fix.contains("modprobe tun"), "{f:?}");
    }

    #[test]
    fn a_plain_file_is_no_tun_device() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tun");
        std::fs::write(&p, "").unwrap();
        assert!(tun_usable(&p, 1000, 1000).is_err());
    }

    #[test]
    fn tool_messages_are_turned_into_their_fix() {
        let f = classify(
            "Failed to open tun socket in namespace: Permission denied",
            Some(1),
        );
        assert!(f.fix.contains("chmod 0666 /dev/net/tun"), "{f:?}");
        let f = classify("bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.", Some(1));
        assert!(f.fix.contains("user.max_user_namespaces"), "{f:?}");
        let f = classify("bwrap: Unknown option --disable-userns", Some(1));
        assert!(f.fix.contains("bubblewrap 0.8"), "{f:?}");
        let f = classify("Failed to send 12 bytes to syslog\n", Some(3));
        assert!(f.detail.contains("exit code Some(3)"), "{f:?}");
    }

    #[test]
    fn turned_off_is_a_warning_that_says_what_it_means() {
        let config = SandboxConfig {
            mode: super::super::SandboxMode::Off,
            ..SandboxConfig::default()
        };
        let c = sandbox_check(&config, None);
        assert_eq!(c.state, CheckState::Warn);
        assert!(!c.required);
        assert!(c.detail.contains("can read your files"));
    }
}
