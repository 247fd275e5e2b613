//! Process exit codes: one per failure class, so scripts can branch without parsing text.
//! The table is documented in the crate README; never renumber a code.

/// Why the CLI or the daemon stopped. The numeric values are a public contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitCode {
    /// Success.
    Ok = 0,
    /// A bug or an unexpected environment failure (I/O, corrupt journal, ...).
    Internal = 1,
    /// Bad command line or bad input (names, numbers, flags). Nothing was changed.
    Usage = 2,
    /// The command needs the running service and it is not running.
    ServiceNotRunning = 3,
    /// The caller may not do this (not root/Administrator, not an operator user).
    Unauthorised = 4,
    /// Something else holds what we need: another daemon holds the lock, the target
    /// already exists, a concurrent change won.
    Conflict = 5,
    /// The named target, policy or file does not exist.
    NotFound = 6,
    /// GitHub refused or could not be reached.
    GitHub = 7,
    /// No usable credential: sign in first.
    SignInRequired = 8,
    /// Not possible on this machine or in this build (e.g. systemd is not running,
    /// a command not wired into this build).
    Unsupported = 9,
    /// A required host check failed (`host doctor`): nothing is launched until it passes.
    HostUnfit = 10,
}

impl ExitCode {
    /// The numeric process exit status.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Every code, for the README table test.
    pub const ALL: &'static [ExitCode] = &[
        ExitCode::Ok,
        ExitCode::Internal,
        ExitCode::Usage,
        ExitCode::ServiceNotRunning,
        ExitCode::Unauthorised,
        ExitCode::Conflict,
        ExitCode::NotFound,
        ExitCode::GitHub,
        ExitCode::SignInRequired,
        ExitCode::Unsupported,
        ExitCode::HostUnfit,
    ];
}

/// A failure as the CLI reports it: the class (exit code) and a message naming the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Usage, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Internal, message)
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code.code())
    }
}

impl From<rm_engine::host_row::HostRowError> for Failure {
    fn from(e: rm_engine::host_row::HostRowError) -> Failure {
        use rm_engine::host_row::HostRowError;
        match e {
            HostRowError::Unsupported(_) => Failure::new(ExitCode::Unsupported, e.to_string()),
            HostRowError::Internal(m) => Failure::internal(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_usage_is_two() {
        let mut seen = std::collections::BTreeSet::new();
        for c in ExitCode::ALL {
            assert!(seen.insert(c.code()), "{c:?} reuses {}", c.code());
        }
        assert_eq!(
            ExitCode::Usage.code(),
            2,
            "clap and shells expect 2 for usage"
        );
        assert_eq!(ExitCode::Ok.code(), 0);
    }

    #[test]
    fn readme_documents_every_code() {
        let readme = include_str!("../README.md");
        for c in ExitCode::ALL {
            let row = format!("| {} | `{c:?}` |", c.code());
            assert!(readme.contains(&row), "README lacks the row {row}");
        }
    }
}
