//! systemd: write the unit, `daemon-reload`, `enable --now`, and read its state back.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::exit::{ExitCode, Failure};
use crate::paths::{self, StartMode};

use super::record::{InstallRecord, PathStatus};
use super::render::{systemd_unit, ServiceParams, SERVICE_NAME};
use super::{no_systemd, write_atomically, RUNNER_ACCOUNT};

/// The systemd this process talks to. Fields are paths so tests can point them elsewhere.
#[derive(Debug, Clone)]
pub struct Systemd {
    /// Exists iff systemd is PID 1 (`sd_booted()`'s own test).
    pub booted_marker: PathBuf,
    pub systemctl: PathBuf,
    pub system_unit_dir: PathBuf,
    pub user_unit_dir: Option<PathBuf>,
    /// The program that creates the runner account (`useradd`).
    pub useradd: PathBuf,
}

impl Default for Systemd {
    fn default() -> Self {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
        Self {
            booted_marker: PathBuf::from("/run/systemd/system"),
            systemctl: PathBuf::from("systemctl"),
            system_unit_dir: PathBuf::from("/etc/systemd/system"),
            user_unit_dir: config.map(|c| c.join("systemd").join("user")),
            useradd: PathBuf::from("useradd"),
        }
    }
}

/// What `service status` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    pub record: Option<InstallRecord>,
    pub path: Option<PathStatus>,
    pub enabled: Option<String>,
    pub active: Option<String>,
    pub systemd_running: bool,
}

impl ServiceStatus {
    pub fn render(&self) -> String {
        let mut out = String::new();
        match &self.record {
            None => out.push_str(
                "service: not installed by runner-manager for this data directory (install it \
                 with `runner-manager service install`)\n",
            ),
            Some(r) => {
                out.push_str(&format!(
                    "service: installed ({} mode) at {}\nunit file: {}\nbinary: {}\n",
                    r.mode,
                    r.installed_at.format("%Y-%m-%d %H:%M:%S UTC"),
                    r.definition.display(),
                    r.binary.display()
                ));
            }
        }
        if let Some(p) = &self.path {
            out.push_str(&p.describe());
            out.push('\n');
        }
        if self.systemd_running {
            out.push_str(&format!(
                "enabled: {}\nactive: {}\n",
                self.enabled.as_deref().unwrap_or("unknown"),
                self.active.as_deref().unwrap_or("unknown")
            ));
        } else {
            out.push_str(&no_systemd().message);
            out.push('\n');
        }
        out
    }
}

impl Systemd {
    pub fn is_running(&self) -> bool {
        self.booted_marker.is_dir()
    }

    fn require_running(&self) -> Result<(), Failure> {
        if self.is_running() {
            Ok(())
        } else {
            Err(no_systemd())
        }
    }

    fn unit_file(&self, mode: StartMode) -> Result<PathBuf, Failure> {
        let file = format!("{SERVICE_NAME}.service");
        match mode {
            StartMode::Boot => Ok(self.system_unit_dir.join(file)),
            StartMode::Login => self
                .user_unit_dir
                .as_ref()
                .map(|d| d.join(&file))
                .ok_or_else(|| {
                    Failure::usage(
                        "cannot find the user's systemd directory: set HOME or XDG_CONFIG_HOME",
                    )
                }),
        }
    }

    fn systemctl(&self, mode: StartMode, args: &[&str]) -> Result<String, Failure> {
        let mut cmd = Command::new(&self.systemctl);
        if mode == StartMode::Login {
            cmd.arg("--user");
        }
        cmd.args(args);
        let line = format!("{cmd:?}");
        let out = cmd.output().map_err(|e| {
            Failure::internal(format!("cannot run {line}: {e}; is systemctl installed?"))
        })?;
        if !out.status.success() {
            return Err(Failure::internal(format!(
                "{line} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `systemctl is-enabled`/`is-active` print the state and exit non-zero for most states.
    fn query(&self, mode: StartMode, verb: &str) -> Option<String> {
        let mut cmd = Command::new(&self.systemctl);
        if mode == StartMode::Login {
            cmd.arg("--user");
        }
        let out = cmd
            .args([verb, &format!("{SERVICE_NAME}.service")])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!text.is_empty()).then_some(text)
    }

    /// Install, enable and start the service for `data_dir` in `mode`, running `binary`.
    pub fn install(
        &self,
        mode: StartMode,
        data_dir: &Path,
        binary: &Path,
    ) -> Result<String, Failure> {
        self.require_running()?;
        check_privileges(mode)?;
        let runner_root = paths::default_runner_root(data_dir);
        let params = ServiceParams {
            binary: binary.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            runner_root: runner_root.clone(),
            mode,
        };
        let unit = systemd_unit(&params).map_err(|e| Failure::usage(e.to_string()))?;
        create_dirs(mode, data_dir, &runner_root)?;
        if mode == StartMode::Boot {
            ensure_runner_account(&self.useradd)?;
        }
        let unit_file = self.unit_file(mode)?;
        write_atomically(&unit_file, unit.as_bytes(), 0o644)?;
        InstallRecord::new(binary.to_path_buf(), unit_file.clone(), mode).save(data_dir)?;
        self.systemctl(mode, &["daemon-reload"])?;
        self.systemctl(
            mode,
            &["enable", "--now", &format!("{SERVICE_NAME}.service")],
        )?;
        Ok(format!(
            "installed and started {SERVICE_NAME} ({mode} mode): unit {}, runs {}",
            unit_file.display(),
            binary.display()
        ))
    }

    pub fn status(&self, data_dir: &Path, current_exe: &Path) -> Result<ServiceStatus, Failure> {
        let record = InstallRecord::load(data_dir)?;
        let path = record
            .as_ref()
            .map(|r| PathStatus::check(&r.binary, current_exe));
        let mode = match record.as_ref().map(|r| r.mode.as_str()) {
            Some("login") => StartMode::Login,
            Some(_) => StartMode::Boot,
            None => StartMode::for_current_user(),
        };
        let running = self.is_running();
        let (enabled, active) = if running {
            (
                self.query(mode, "is-enabled"),
                self.query(mode, "is-active"),
            )
        } else {
            (None, None)
        };
        Ok(ServiceStatus {
            record,
            path,
            enabled,
            active,
            systemd_running: running,
        })
    }

    pub fn uninstall(&self, data_dir: &Path) -> Result<String, Failure> {
        self.require_running()?;
        let record = InstallRecord::load(data_dir)?;
        let mode = match record.as_ref().map(|r| r.mode.as_str()) {
            Some("login") => StartMode::Login,
            Some(_) => StartMode::Boot,
            None => StartMode::for_current_user(),
        };
        check_privileges(mode)?;
        let unit_file = match &record {
            Some(r) => r.definition.clone(),
            None => self.unit_file(mode)?,
        };
        if !unit_file.exists() && record.is_none() {
            return Err(Failure::new(
                ExitCode::NotFound,
                format!(
                    "{SERVICE_NAME} is not installed ({} does not exist); nothing to uninstall",
                    unit_file.display()
                ),
            ));
        }
        // Stopping may take up to the drain deadline; `disable --now` waits for it.
        self.systemctl(
            mode,
            &["disable", "--now", &format!("{SERVICE_NAME}.service")],
        )?;
        match std::fs::remove_file(&unit_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::internal(format!(
                    "cannot remove {}: {e}",
                    unit_file.display()
                )))
            }
        }
        self.systemctl(mode, &["daemon-reload"])?;
        InstallRecord::remove(data_dir)?;
        Ok(format!(
            "stopped and removed {SERVICE_NAME} ({mode} mode); the data directory {} and the \
             account {RUNNER_ACCOUNT} were kept",
            data_dir.display()
        ))
    }
}

fn check_privileges(mode: StartMode) -> Result<(), Failure> {
    let root = paths::is_privileged();
    match mode {
        StartMode::Boot if !root => Err(Failure::new(
            ExitCode::Unauthorised,
            "a boot service is installed by root: run `sudo runner-manager service install \
             --start-at boot`",
        )),
        StartMode::Login if root => Err(Failure::usage(
            "root has no login session to start a login service in: run `runner-manager \
             service install --start-at boot`, or run the command as your own user",
        )),
        _ => Ok(()),
    }
}

fn create_dirs(mode: StartMode, data_dir: &Path, runner_root: &Path) -> Result<(), Failure> {
    for dir in [data_dir, runner_root] {
        rm_runner::passable_dirs::create(dir)
            .map_err(|e| Failure::internal(format!("cannot create {}: {e}", dir.display())))?;
    }
    #[cfg(unix)]
    if mode == StartMode::Boot {
        use std::os::unix::fs::PermissionsExt;
        // Others may traverse (runners reach their directory under the runner root) but not list.
        for (dir, m) in [(data_dir, 0o711), (runner_root, 0o755)] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(m)).map_err(|e| {
                Failure::internal(format!("cannot set the mode of {}: {e}", dir.display()))
            })?;
        }
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(())
}

/// Create the runner account if it is missing.
fn ensure_runner_account(useradd: &Path) -> Result<(), Failure> {
    #[cfg(not(unix))]
    let _ = useradd;
    #[cfg(unix)]
    {
        if nix::unistd::User::from_name(RUNNER_ACCOUNT)
            .map_err(|e| Failure::internal(format!("cannot look up user {RUNNER_ACCOUNT}: {e}")))?
            .is_some()
        {
            return Ok(());
        }
        let out = Command::new(useradd)
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                RUNNER_ACCOUNT,
            ])
            .output()
            .map_err(|e| {
                Failure::internal(format!(
                    "cannot run useradd: {e}; create the account {RUNNER_ACCOUNT} by hand"
                ))
            })?;
        if !out.status.success() {
            return Err(Failure::internal(format!(
                "useradd {RUNNER_ACCOUNT} failed: {}; create the account by hand and run the \
                 install again",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        tracing::info!(account = RUNNER_ACCOUNT, "created the runner account");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without_systemd(dir: &Path) -> Systemd {
        Systemd {
            booted_marker: dir.join("run-systemd-system"),
            systemctl: dir.join("no-systemctl"),
            system_unit_dir: dir.join("system"),
            user_unit_dir: Some(dir.join("user")),
            useradd: dir.join("no-useradd"),
        }
    }

    #[test]
    fn without_systemd_install_says_so_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sd = without_systemd(dir.path());
        let data = dir.path().join("data");
        for mode in [StartMode::Boot, StartMode::Login] {
            let err = sd
                .install(mode, &data, Path::new("/usr/bin/runner-manager"))
                .unwrap_err();
            assert_eq!(err.code, ExitCode::Unsupported);
            assert!(
                err.message
                    .contains("systemd is not running on this machine"),
                "{err}"
            );
            assert!(err.message.contains("runner-manager daemon run"), "{err}");
        }
        assert!(!data.exists());
        assert!(!dir.path().join("system").exists());
        let err = sd.uninstall(&data).unwrap_err();
        assert_eq!(err.code, ExitCode::Unsupported);
    }

    #[test]
    fn status_without_systemd_still_reports_a_stale_path() {
        let dir = tempfile::tempdir().unwrap();
        let sd = without_systemd(dir.path());
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let status = sd.status(&data, Path::new("/bin/sh")).unwrap();
        assert!(status.record.is_none());
        assert!(status.render().contains("not installed"));
        InstallRecord::new(
            dir.path().join("gone"),
            dir.path().join("u"),
            StartMode::Boot,
        )
        .save(&data)
        .unwrap();
        let status = sd.status(&data, Path::new("/bin/sh")).unwrap();
        assert!(matches!(status.path, Some(PathStatus::Missing { .. })));
        let text = status.render();
        assert!(text.contains("STALE"), "{text}");
        assert!(text.contains("systemd is not running"), "{text}");
    }

    /// The whole boot-mode flow against a stand-in systemctl and useradd that log their
    /// arguments: what is written where, in which order the manager is told.
    #[cfg(unix)]
    #[test]
    fn boot_install_status_uninstall_with_a_stand_in_systemctl() {
        use std::os::unix::fs::PermissionsExt;
        if !paths::is_privileged() {
            eprintln!("SKIPPED: boot-mode install is for root; run the tests as root to cover it");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.log");
        let script = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(
                &p,
                format!(
                    "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}",
                    log.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let marker = dir.path().join("run-systemd-system");
        std::fs::create_dir(&marker).unwrap();
        let sd = Systemd {
            booted_marker: marker,
            systemctl: script(
                "systemctl",
                "case \"$1\" in is-enabled) echo enabled;; is-active) echo active;; esac\n",
            ),
            system_unit_dir: dir.path().join("system"),
            user_unit_dir: None,
            useradd: script("useradd", ""),
        };
        let data = dir.path().join("data");
        let binary = std::env::current_exe().unwrap();
        let done = sd.install(StartMode::Boot, &data, &binary).unwrap();
        assert!(done.contains("boot mode"), "{done}");

        let unit_file = dir.path().join("system").join("runner-manager.service");
        let unit = std::fs::read_to_string(&unit_file).unwrap();
        assert!(
            unit.contains(&format!("ExecStart=\"{}\" daemon run", binary.display())),
            "{unit}"
        );
        assert_eq!(
            std::fs::metadata(&unit_file).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(
            std::fs::metadata(&data).unwrap().permissions().mode() & 0o777,
            0o711
        );
        assert!(paths::default_runner_root(&data).is_dir());
        let record = InstallRecord::load(&data).unwrap().unwrap();
        assert_eq!(record.binary, binary);
        assert_eq!(record.definition, unit_file);

        let calls = std::fs::read_to_string(&log).unwrap();
        let calls: Vec<&str> = calls.lines().collect();
        let reload = calls
            .iter()
            .position(|c| *c == "systemctl daemon-reload")
            .unwrap();
        let enable = calls
            .iter()
            .position(|c| *c == "systemctl enable --now runner-manager.service")
            .unwrap();
        assert!(reload < enable, "{calls:?}");
        // useradd ran only if the account is missing on this machine.
        let has_account = nix::unistd::User::from_name(RUNNER_ACCOUNT)
            .unwrap()
            .is_some();
        assert_eq!(
            calls
                .iter()
                .any(|c| c.starts_with("useradd --system --no-create-home")),
            !has_account,
            "{calls:?}"
        );

        let status = sd.status(&data, &binary).unwrap();
        assert_eq!(status.path, Some(PathStatus::Current));
        assert_eq!(status.enabled.as_deref(), Some("enabled"));
        assert_eq!(status.active.as_deref(), Some("active"));
        assert!(status.render().contains("binary path: current"));

        let done = sd.uninstall(&data).unwrap();
        assert!(done.contains("removed"), "{done}");
        assert!(!unit_file.exists());
        assert_eq!(InstallRecord::load(&data).unwrap(), None);
        let calls = std::fs::read_to_string(&log).unwrap();
        assert!(
            calls.contains("systemctl disable --now runner-manager.service"),
            "{calls}"
        );
        assert!(data.is_dir(), "uninstall keeps the data directory");
        // A second uninstall has nothing to remove.
        assert_eq!(sd.uninstall(&data).unwrap_err().code, ExitCode::NotFound);
    }
}
