//! The CLI's way to the running service: the local API (rm-proto) over its Unix socket.
//!
//! The CLI is synchronous; each command builds a small current-thread runtime and blocks on
//! the client's calls. Every [`ClientError`] becomes a [`Failure`] with the exit code of its
//! class and a message naming the command that fixes it.

use std::future::Future;
use std::path::{Path, PathBuf};

use rm_proto::{
    Client, ClientError, ClientOptions, CredentialPut, DoctorReport, ErrorCode, HostStatus, Status,
    TargetAdd, TargetRef, TargetStatus, TargetUpdate,
};

use crate::exit::{ExitCode, Failure};
use crate::paths;

/// The socket's file name inside its directory.
pub const SOCKET_FILE: &str = rm_proto::sockets::SOCKET_FILE;

/// Where the service listens unless `--socket` says otherwise: root →
/// `/run/runner-manager/api.sock`; a user → `$XDG_RUNTIME_DIR/runner-manager/api.sock`, or
/// `<data-dir>/api.sock` when no runtime directory is set.
pub fn default_socket_path(data_dir: &Path) -> PathBuf {
    if paths::is_privileged() {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    rm_proto::sockets::login_socket(runtime.as_deref(), data_dir)
}

/// The machine service's socket (a boot service run by root).
pub const SYSTEM_SOCKET: &str = rm_proto::sockets::BOOT_SOCKET;

/// The sockets a client command tries, as the tray does (`rm_proto::sockets`): its user's own
/// service (a login service, of `data_dir`), then the machine's boot service, which admits the
/// operators group's members.
pub fn client_sockets(data_dir: &Path) -> Vec<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let login = rm_proto::sockets::login_socket(runtime.as_deref(), data_dir);
    rm_proto::sockets::in_order(login)
}

/// Where the CLI finds the service unless `--socket` says otherwise: the first of
/// [`client_sockets`] that exists, else this user's default (so the error names it).
pub fn client_socket_path(data_dir: &Path) -> PathBuf {
    let candidates = client_sockets(data_dir);
    rm_proto::sockets::first_existing(&candidates)
        .cloned()
        .unwrap_or_else(|| default_socket_path(data_dir))
}

/// A connected client and the runtime that drives it.
pub struct ApiBackend {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl std::fmt::Debug for ApiBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiBackend")
            .field("socket", &self.client.socket_path())
            .finish_non_exhaustive()
    }
}

impl ApiBackend {
    /// Connects and checks that both sides speak a compatible API version.
    pub fn connect(socket: &Path) -> Result<Self, Failure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
        let client = runtime
            .block_on(Client::connect_with(
                socket,
                ClientOptions::named("runner-manager CLI"),
            ))
            .map_err(client_failure)?;
        Ok(Self { runtime, client })
    }

    /// Runs a future on this backend's runtime (the device flow uses it too).
    pub fn block_on<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// Enters the runtime's context: clients that spawn tasks on construction need it.
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.runtime.enter()
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn status(&self) -> Result<Status, Failure> {
        self.block_on(self.client.status()).map_err(client_failure)
    }

    pub fn targets(&self) -> Result<Vec<TargetStatus>, Failure> {
        self.block_on(self.client.targets()).map_err(client_failure)
    }

    pub fn add_target(&self, request: &TargetAdd) -> Result<TargetStatus, Failure> {
        self.block_on(self.client.add_target(request))
            .map_err(client_failure)
    }

    /// Reads the target's revision and applies `change` with it; a lost compare-and-set is
    /// retried a few times with a fresh revision (the change itself is absolute).
    pub fn update_target(
        &self,
        target: &TargetRef,
        change: &TargetUpdate,
    ) -> Result<TargetStatus, Failure> {
        let mut attempts = 0;
        loop {
            let current = self.find(target)?;
            let request = TargetUpdate {
                revision: current.revision,
                ..change.clone()
            };
            match self.block_on(self.client.update_target(target, &request)) {
                Err(ClientError::Api {
                    code: ErrorCode::Conflict,
                    ..
                }) if attempts < 3 => attempts += 1,
                other => return other.map_err(client_failure),
            }
        }
    }

    pub fn remove_target(&self, target: &TargetRef) -> Result<(), Failure> {
        self.block_on(self.client.remove_target(target))
            .map_err(client_failure)
    }

    pub fn set_host_capacity(&self, capacity: u32) -> Result<HostStatus, Failure> {
        self.block_on(self.client.set_host_capacity(capacity))
            .map_err(client_failure)
    }

    /// Changes memory admission or the workstation rules in the running service (at once).
    pub fn set_host_admission(
        &self,
        change: &rm_proto::HostAdmissionChange,
    ) -> Result<rm_proto::HostAdmission, Failure> {
        self.block_on(self.client.set_host_admission(change))
            .map_err(client_failure)
    }

    /// The runner environment (values only when this user is an operator).
    pub fn host_env(&self) -> Result<rm_proto::HostEnv, Failure> {
        self.block_on(self.client.host_env())
            .map_err(client_failure)
    }

    /// Changes the runner environment in the running service (for runners started after it).
    pub fn change_host_env(
        &self,
        change: &rm_proto::HostEnvChange,
    ) -> Result<rm_proto::HostEnv, Failure> {
        self.block_on(self.client.change_host_env(change))
            .map_err(client_failure)
    }

    /// Runs the host checks in the service, now.
    pub fn host_doctor(&self) -> Result<DoctorReport, Failure> {
        self.block_on(self.client.host_doctor())
            .map_err(client_failure)
    }

    pub fn put_credential(&self, credential: &CredentialPut) -> Result<(), Failure> {
        self.block_on(self.client.put_credential(credential))
            .map_err(client_failure)
    }

    pub fn delete_credential(&self) -> Result<(), Failure> {
        self.block_on(self.client.delete_credential())
            .map_err(client_failure)
    }

    /// The target (and profile) as the service reports it.
    pub fn target(&self, target: &TargetRef) -> Result<TargetStatus, Failure> {
        self.find(target)
    }

    fn find(&self, target: &TargetRef) -> Result<TargetStatus, Failure> {
        let noun = target.kind.as_str();
        let all = self.targets()?;
        if let Some(found) = all.iter().find(|t| target.matches(t)) {
            return Ok(found.clone());
        }
        let profiles: Vec<&str> = all
            .iter()
            .filter(|t| t.kind == target.kind && t.target.eq_ignore_ascii_case(&target.name))
            .map(|t| t.profile.as_str())
            .collect();
        let profile = target.profile.as_deref().unwrap_or("default");
        Err(Failure::new(
            ExitCode::NotFound,
            if profiles.is_empty() {
                format!(
                    "{target} is not served by this host: add it with `runner-manager {noun} \
                     add {target}` (see `runner-manager {noun} list`)"
                )
            } else {
                format!(
                    "{target} has no profile '{profile}' on this host (its profiles: {}): name \
                     one with --profile, or add it with `runner-manager {noun} add {target} \
                     --profile {profile}`",
                    profiles.join(", ")
                )
            },
        ))
    }
}

/// The exit code and message for a failed call; every message names the fix.
pub fn client_failure(error: ClientError) -> Failure {
    match error {
        ClientError::ServiceNotRunning { socket, .. } => Failure::new(
            ExitCode::ServiceNotRunning,
            format!(
                "the runner-manager service is not running (nothing answers on {}): start it \
                 with `runner-manager daemon run` (foreground) or `runner-manager service \
                 install`; if it listens elsewhere, pass `--socket PATH`",
                socket.display()
            ),
        ),
        ClientError::PermissionDenied { socket, message } => Failure::new(
            ExitCode::Unauthorised,
            format!(
                "not allowed: the service on {} refused this user: {message} (run the command \
                 as root, e.g. `sudo runner-manager …`, or as a configured operator)",
                socket.display()
            ),
        ),
        ClientError::Api { code, message, .. } => {
            let (exit, fix) = match code {
                ErrorCode::UnauthorizedPeer | ErrorCode::ForbiddenOrigin => {
                    (ExitCode::Unauthorised, "")
                }
                ErrorCode::Conflict => (ExitCode::Conflict, ""),
                ErrorCode::NotFound => (ExitCode::NotFound, ""),
                ErrorCode::SignInRequired => (
                    ExitCode::SignInRequired,
                    " (sign in with `runner-manager auth login`)",
                ),
                ErrorCode::BadRequest | ErrorCode::PayloadTooLarge => (ExitCode::Usage, ""),
                ErrorCode::UnsupportedVersion | ErrorCode::MethodNotAllowed => (
                    ExitCode::Unsupported,
                    " (this CLI and the running service differ in version: restart the \
                     service after an upgrade)",
                ),
                ErrorCode::ServiceUnavailable => (
                    ExitCode::ServiceNotRunning,
                    " (retry in a moment; `runner-manager status` shows when it is ready)",
                ),
                ErrorCode::Internal | ErrorCode::Unknown => (
                    ExitCode::Internal,
                    " (see the service's log: `journalctl -u runner-manager` or its terminal)",
                ),
            };
            let fix = if message.contains("runner-manager ") {
                ""
            } else {
                fix
            };
            Failure::new(exit, format!("{message}{fix}"))
        }
        ClientError::VersionMismatch(e) => Failure::new(ExitCode::Unsupported, e.to_string()),
        e @ ClientError::Timeout { .. } => Failure::new(ExitCode::ServiceNotRunning, e.to_string()),
        e => Failure::internal(format!(
            "{e} (check that the service is running with `runner-manager status`)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: ErrorCode, message: &str) -> ClientError {
        ClientError::Api {
            status: code.http_status(),
            code,
            message: message.into(),
        }
    }

    #[test]
    fn error_classes_map_to_their_exit_codes_and_name_a_fix() {
        let not_running = client_failure(ClientError::ServiceNotRunning {
            socket: "/tmp/x.sock".into(),
            hint: "start it",
        });
        assert_eq!(not_running.code, ExitCode::ServiceNotRunning);
        assert!(not_running.message.contains("runner-manager daemon run"));
        assert!(not_running.message.contains("/tmp/x.sock"));
        let denied = client_failure(ClientError::PermissionDenied {
            socket: "/s".into(),
            message: "uid 65534 may not change this service".into(),
        });
        assert_eq!(denied.code, ExitCode::Unauthorised);
        assert!(denied.message.contains("uid 65534"));
        for (code, exit) in [
            (ErrorCode::Conflict, ExitCode::Conflict),
            (ErrorCode::NotFound, ExitCode::NotFound),
            (ErrorCode::SignInRequired, ExitCode::SignInRequired),
            (ErrorCode::BadRequest, ExitCode::Usage),
            (ErrorCode::UnauthorizedPeer, ExitCode::Unauthorised),
            (ErrorCode::Internal, ExitCode::Internal),
        ] {
            assert_eq!(client_failure(api(code, "m")).code, exit, "{code}");
        }
        let sign_in = client_failure(api(ErrorCode::SignInRequired, "no credential"));
        assert!(sign_in.message.contains("runner-manager auth login"));
    }

    #[test]
    fn the_user_socket_lives_in_the_runtime_dir() {
        if paths::is_privileged() {
            assert_eq!(
                default_socket_path(Path::new("/d")),
                Path::new("/run/runner-manager/api.sock")
            );
        } else if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            assert_eq!(
                default_socket_path(Path::new("/d")),
                Path::new("/d/api.sock")
            );
        }
    }
}
