//! Errors of the fake's Rust setup API (bad world setup in a test, not HTTP errors).

/// Why a world-setup call on [`crate::FakeGitHub`] was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FakeError {
    #[error("unknown account {0:?}: create it first with create_user/create_org")]
    UnknownAccount(String),
    #[error("unknown repository {0:?}: create it first with create_repo(\"owner/name\")")]
    UnknownRepo(String),
    #[error("{0:?} is not an organization: create it with create_org")]
    NotAnOrg(String),
    #[error("{0:?} already exists")]
    AlreadyExists(String),
    #[error(
        "invalid name {0:?}: use \"owner/name\" for repositories and [A-Za-z0-9-_.] characters"
    )]
    InvalidName(String),
    #[error("unknown job id {0}")]
    UnknownJob(u64),
    #[error("unknown run id {0}")]
    UnknownRun(u64),
    #[error("job {0} is not assigned to a runner, nothing to withdraw")]
    NotAssigned(u64),
    #[error("unknown or expired user code {0:?}: start the device flow first")]
    UnknownUserCode(String),
    #[error("a run needs at least one job")]
    EmptyRun,
}
