//! The service definitions from `installer/`, embedded at build time and rendered with the
//! binary path, data directory, runner root and start mode.
//!
//! Paths are refused rather than escaped when they hold characters a format would need to
//! escape (whitespace, quotes, backslashes, `%`, control characters in systemd; control
//! characters in plists): a mis-escaped `ExecStart=` is a silent security hole, a clear
//! refusal is one `--data-dir` away from working.

use std::path::{Path, PathBuf};

use crate::paths::StartMode;

const SYSTEMD_SYSTEM: &str = include_str!("../../../../installer/systemd/runner-manager.service");
const SYSTEMD_USER: &str =
    include_str!("../../../../installer/systemd/runner-manager-user.service");
const LAUNCHD: &str = include_str!("../../../../installer/launchd/com.runner-manager.plist");
const WINDOWS_SC: &str = include_str!("../../../../installer/windows/runner-manager.sc");

/// The name of the unit/service everywhere.
pub const SERVICE_NAME: &str = "runner-manager";
/// The launchd label.
pub const LAUNCHD_LABEL: &str = "com.runner-manager";

/// What a service definition is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceParams {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    pub runner_root: PathBuf,
    pub mode: StartMode,
}

/// A path that cannot be put into a service definition safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {what} {} cannot be written into a {format} definition ({problem}): choose a path \
     without it (for the data directory: `--data-dir`)",
    .path.display()
)]
pub struct RenderError {
    pub what: &'static str,
    pub path: PathBuf,
    pub format: &'static str,
    pub problem: String,
}

fn checked<'a>(
    what: &'static str,
    path: &'a Path,
    format: &'static str,
    bad: impl Fn(char) -> bool,
) -> Result<&'a str, RenderError> {
    let err = |problem: String| RenderError {
        what,
        path: path.to_path_buf(),
        format,
        problem,
    };
    let text = path
        .to_str()
        .ok_or_else(|| err("it is not valid UTF-8".to_owned()))?;
    if !path.is_absolute() {
        return Err(err("it is not absolute".to_owned()));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() || bad(*c)) {
        return Err(err(format!("it contains {c:?}")));
    }
    Ok(text)
}

fn systemd_bad(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '%' | '$')
}

/// The systemd unit: a system unit for boot mode, a user unit for login mode.
pub fn systemd_unit(p: &ServiceParams) -> Result<String, RenderError> {
    let f = "systemd unit";
    let binary = checked("binary path", &p.binary, f, systemd_bad)?;
    let data = checked("data directory", &p.data_dir, f, systemd_bad)?;
    let root = checked("runner root", &p.runner_root, f, systemd_bad)?;
    let template = match p.mode {
        StartMode::Boot => SYSTEMD_SYSTEM,
        StartMode::Login => SYSTEMD_USER,
    };
    Ok(fill(template, binary, data, root, p.mode))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The launchd plist (a LaunchDaemon for boot mode, a LaunchAgent for login mode: the file
/// is the same, where it is installed differs — see [`launchd_plist_path`]).
pub fn launchd_plist(p: &ServiceParams) -> Result<String, RenderError> {
    let f = "launchd plist";
    let binary = xml_escape(checked("binary path", &p.binary, f, |_| false)?);
    let data = xml_escape(checked("data directory", &p.data_dir, f, |_| false)?);
    let root = xml_escape(checked("runner root", &p.runner_root, f, |_| false)?);
    Ok(fill(LAUNCHD, &binary, &data, &root, p.mode))
}

/// Where the plist goes: `/Library/LaunchDaemons` (boot) or `~/Library/LaunchAgents` (login).
pub fn launchd_plist_path(mode: StartMode, home: &Path) -> PathBuf {
    let file = format!("{LAUNCHD_LABEL}.plist");
    match mode {
        StartMode::Boot => Path::new("/Library/LaunchDaemons").join(file),
        StartMode::Login => home.join("Library").join("LaunchAgents").join(file),
    }
}

/// The `sc.exe` invocations that register the Windows service (one argv per command, without
/// `sc.exe` itself). Windows services run as LocalSystem, so only boot mode exists there.
pub fn windows_sc_commands(p: &ServiceParams) -> Result<Vec<Vec<String>>, RenderError> {
    let f = "Windows service";
    let bad = |c: char| c == '"';
    let binary = checked_windows("binary path", &p.binary, f, bad)?;
    let data = checked_windows("data directory", &p.data_dir, f, bad)?;
    let text = fill(WINDOWS_SC, binary, data, data, StartMode::Boot);
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect())
}

/// Windows paths are checked as text: a Linux test host must be able to render them.
fn checked_windows<'a>(
    what: &'static str,
    path: &'a Path,
    format: &'static str,
    bad: impl Fn(char) -> bool,
) -> Result<&'a str, RenderError> {
    let err = |problem: String| RenderError {
        what,
        path: path.to_path_buf(),
        format,
        problem,
    };
    let text = path
        .to_str()
        .ok_or_else(|| err("it is not valid UTF-8".to_owned()))?;
    let b = text.as_bytes();
    let absolute = b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\';
    if !absolute && !cfg!(windows) && !path.is_absolute() {
        return Err(err("it is not absolute".to_owned()));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() || bad(*c)) {
        return Err(err(format!("it contains {c:?}")));
    }
    Ok(text)
}

fn fill(template: &str, binary: &str, data: &str, root: &str, mode: StartMode) -> String {
    template
        .replace("{{BINARY}}", binary)
        .replace("{{DATA_DIR}}", data)
        .replace("{{RUNNER_ROOT}}", root)
        .replace("{{MODE}}", mode.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: StartMode) -> ServiceParams {
        ServiceParams {
            binary: "/usr/local/bin/runner-manager".into(),
            data_dir: "/var/lib/runner-manager".into(),
            runner_root: "/var/lib/runner-manager/runners".into(),
            mode,
        }
    }

    fn has_line(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }

    #[test]
    fn system_unit_is_hardened_and_points_at_the_install() {
        let unit = systemd_unit(&params(StartMode::Boot)).unwrap();
        has_line(
            &unit,
            r#"ExecStart="/usr/local/bin/runner-manager" daemon run --data-dir "/var/lib/runner-manager" --start-at boot"#,
        );
        has_line(
            &unit,
            r#"ReadWritePaths="/var/lib/runner-manager" "/var/lib/runner-manager/runners" /sys/fs/cgroup"#,
        );
        for line in [
            "Restart=on-failure",
            "KillMode=mixed",
            "TimeoutStopSec=90",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "PrivateTmp=yes",
            "ProtectHome=read-only",
            "WantedBy=multi-user.target",
            // Each job in a capped cgroup of its own: the service's cgroup is delegated and
            // writable (ProtectControlGroups would make it read-only).
            "Delegate=yes",
            "CPUWeight=20",
            "IOWeight=20",
        ] {
            has_line(&unit, line);
        }
        assert!(
            !unit.lines().any(|l| l.starts_with("ProtectControlGroups=")),
            "{unit}"
        );
        // Runners are started as another user: setuid/setgid must stay in the bounding set,
        // and the daemon must not itself be an unprivileged user.
        let caps = unit
            .lines()
            .find(|l| l.starts_with("CapabilityBoundingSet="))
            .unwrap();
        assert!(
            caps.contains("CAP_SETUID") && caps.contains("CAP_SETGID"),
            "{caps}"
        );
        // The cache layers are mounted between fork and exec, before the identity switch.
        assert!(caps.contains("CAP_SYS_ADMIN"), "{caps}");
        assert!(!unit
            .lines()
            .any(|l| l.starts_with("User=") || l.starts_with("DynamicUser=")));
        assert!(!unit
            .lines()
            .any(|l| l.starts_with("MemoryDenyWriteExecute=")));
        assert!(!unit.contains("{{"), "unrendered placeholder:\n{unit}");
    }

    #[test]
    fn user_unit_runs_in_login_mode() {
        let mut p = params(StartMode::Login);
        p.data_dir = "/home/dev/.local/share/runner-manager".into();
        let unit = systemd_unit(&p).unwrap();
        has_line(
            &unit,
            r#"ExecStart="/usr/local/bin/runner-manager" daemon run --data-dir "/home/dev/.local/share/runner-manager" --start-at login"#,
        );
        has_line(&unit, "WantedBy=default.target");
        has_line(&unit, "TimeoutStopSec=90");
        has_line(&unit, "Delegate=yes");
        assert!(
            !unit.contains("ProtectSystem"),
            "user units cannot use it everywhere:\n{unit}"
        );
        assert!(!unit.contains("{{"));
    }

    #[test]
    fn unsafe_paths_are_refused_naming_the_fix() {
        let mut p = params(StartMode::Boot);
        p.data_dir = "/var/lib/my runners".into();
        let err = systemd_unit(&p).unwrap_err();
        assert_eq!(err.what, "data directory");
        assert!(err.to_string().contains("--data-dir"), "{err}");
        p.data_dir = "/var/lib/100%".into();
        assert!(systemd_unit(&p).is_err());
        p.data_dir = "relative/dir".into();
        assert!(systemd_unit(&p).unwrap_err().problem.contains("absolute"));
    }

    #[test]
    fn launchd_plist_has_the_arguments_escaped() {
        let mut p = params(StartMode::Login);
        p.data_dir = "/Users/dev/Library/Application Support/R&D runner-manager".into();
        let plist = launchd_plist(&p).unwrap();
        assert!(plist.contains("<string>com.runner-manager</string>"));
        assert!(plist.contains("<string>/usr/local/bin/runner-manager</string>\n        <string>daemon</string>\n        <string>run</string>\n        <string>--data-dir</string>\n        <string>/Users/dev/Library/Application Support/R&amp;D runner-manager</string>\n        <string>--start-at</string>\n        <string>login</string>"), "{plist}");
        assert!(plist.contains("<key>ExitTimeOut</key>\n    <integer>90</integer>"));
        assert!(!plist.contains("{{"));
        assert_eq!(
            launchd_plist_path(StartMode::Boot, Path::new("/Users/dev")),
            PathBuf::from("/Library/LaunchDaemons/com.runner-manager.plist")
        );
        assert_eq!(
            launchd_plist_path(StartMode::Login, Path::new("/Users/dev")),
            PathBuf::from("/Users/dev/Library/LaunchAgents/com.runner-manager.plist")
        );
    }

    #[test]
    fn windows_service_is_created_as_local_system_with_restart() {
        let p = ServiceParams {
            binary: r"C:\Program Files\runner-manager\runner-manager.exe".into(),
            data_dir: r"C:\ProgramData\runner-manager".into(),
            runner_root: r"C:\ProgramData\runner-manager\runners".into(),
            mode: StartMode::Boot,
        };
        let cmds = windows_sc_commands(&p).unwrap();
        assert_eq!(cmds.len(), 3, "{cmds:?}");
        assert_eq!(
            cmds[0],
            [
                "create",
                "runner-manager",
                "binPath=",
                r#""C:\Program Files\runner-manager\runner-manager.exe" daemon run --data-dir "C:\ProgramData\runner-manager" --start-at boot"#,
                "start=",
                "auto",
                "obj=",
                "LocalSystem",
                "DisplayName=",
                "runner-manager",
            ]
        );
        assert_eq!(cmds[2][0], "failure");
        assert!(cmds[2].iter().any(|a| a.starts_with("restart/")));
        let mut bad = p.clone();
        bad.data_dir = r#"C:\x"y"#.into();
        assert!(windows_sc_commands(&bad).is_err());
    }
}
