//! Who runners run as. A service running as root never runs a job as root: runners get an
//! unprivileged identity, by default a uid of their own per attempt (so one attempt cannot
//! touch another's runtime) with the primary group of the `runner-manager-runner` account.

use crate::runtime::Ownership;
use std::process::Command;

/// The system account created at install time for runners.
pub const DEFAULT_RUNNER_ACCOUNT: &str = "runner-manager-runner";

/// First uid of the default per-attempt range: far above login users, systemd's dynamic users
/// (61184–65519) and the usual subordinate-uid ranges of rootless containers (100000+, 65536
/// per user).
pub const DEFAULT_FIRST_UID: u32 = 1_500_000_000;

/// Size of the default per-attempt uid range.
pub const DEFAULT_UID_COUNT: u32 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("runner account {name:?} does not exist; create it with `useradd --system --no-create-home --shell /usr/sbin/nologin {name}` (the service installer does this)")]
    Missing { name: String },
    #[error("runner account name {name:?} is not a valid user name")]
    InvalidName { name: String },
    #[error("looking up account {name:?}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: nix::Error,
    },
    #[error("creating account {name:?} needs root; run the service installer with sudo")]
    NotRoot { name: String },
    #[error("running useradd for {name:?}: {message}")]
    Useradd { name: String, message: String },
    #[error("runner account {name:?} is uid 0; refusing to run jobs as root")]
    IsRoot { name: String },
}

/// A resolved account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerAccount {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// Runners run as the service's own user. Refused when the service is root.
    ServiceUser,
    /// Every runner runs as this one account. Protects the host from jobs, but attempts
    /// share a uid and so can reach each other's runtimes.
    Account { name: String },
    /// Each attempt gets a free uid from `first_uid..first_uid + count` (no passwd entry, as
    /// systemd's DynamicUser does) and the primary group of `group_account`.
    PerAttemptUid {
        group_account: String,
        first_uid: u32,
        count: u32,
    },
}

impl RunAs {
    /// The default: per-attempt uids with the `runner-manager-runner` group when the service
    /// runs as root, otherwise the service's own user.
    pub fn default_for_service() -> Self {
        if nix::unistd::geteuid().is_root() {
            RunAs::PerAttemptUid {
                group_account: DEFAULT_RUNNER_ACCOUNT.to_string(),
                first_uid: DEFAULT_FIRST_UID,
                count: DEFAULT_UID_COUNT,
            }
        } else {
            RunAs::ServiceUser
        }
    }

    /// Looks the accounts up once, at startup.
    pub fn resolve(&self) -> Result<ResolvedRunAs, AccountError> {
        match self {
            RunAs::ServiceUser if nix::unistd::geteuid().is_root() => Err(AccountError::IsRoot {
                name: "the service's own user".to_string(),
            }),
            RunAs::ServiceUser => Ok(ResolvedRunAs::ServiceUser),
            RunAs::Account { name } => {
                let account = lookup_account(name)?
                    .ok_or_else(|| AccountError::Missing { name: name.clone() })?;
                if account.uid == 0 {
                    return Err(AccountError::IsRoot { name: name.clone() });
                }
                Ok(ResolvedRunAs::Fixed(Ownership {
                    uid: account.uid,
                    gid: account.gid,
                }))
            }
            RunAs::PerAttemptUid {
                group_account,
                first_uid,
                count,
            } => {
                let account =
                    lookup_account(group_account)?.ok_or_else(|| AccountError::Missing {
                        name: group_account.clone(),
                    })?;
                if account.gid == 0 || *first_uid == 0 {
                    return Err(AccountError::IsRoot {
                        name: group_account.clone(),
                    });
                }
                Ok(ResolvedRunAs::Pool {
                    gid: account.gid,
                    first_uid: *first_uid,
                    count: (*count).max(1),
                })
            }
        }
    }
}

/// [`RunAs`] with names turned into ids; what the runner root allocates from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedRunAs {
    ServiceUser,
    Fixed(Ownership),
    Pool {
        gid: u32,
        first_uid: u32,
        count: u32,
    },
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
}

/// Looks an account up in the system user database.
pub fn lookup_account(name: &str) -> Result<Option<RunnerAccount>, AccountError> {
    if !valid_name(name) {
        return Err(AccountError::InvalidName {
            name: name.to_string(),
        });
    }
    let user = nix::unistd::User::from_name(name).map_err(|source| AccountError::Lookup {
        name: name.to_string(),
        source,
    })?;
    Ok(user.map(|u| RunnerAccount {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    }))
}

/// Creates the system account for runners if it does not exist yet (used by the service
/// installer): no home directory, no login shell.
pub fn ensure_runner_account(name: &str) -> Result<RunnerAccount, AccountError> {
    if let Some(account) = lookup_account(name)? {
        return Ok(account);
    }
    if !nix::unistd::geteuid().is_root() {
        return Err(AccountError::NotRoot {
            name: name.to_string(),
        });
    }
    tracing::info!(account = name, "creating runner system account");
    let output = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--",
            name,
        ])
        .output()
        .map_err(|e| AccountError::Useradd {
            name: name.to_string(),
            message: format!("{e}; is the `passwd` package (useradd) installed?"),
        })?;
    // Exit code 9 means "already exists": another installer won the race.
    if !output.status.success() && output.status.code() != Some(9) {
        return Err(AccountError::Useradd {
            name: name.to_string(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    lookup_account(name)?.ok_or_else(|| AccountError::Missing {
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names_and_finds_root() {
        assert!(matches!(
            lookup_account("../x"),
            Err(AccountError::InvalidName { .. })
        ));
        let root = lookup_account("root").unwrap().unwrap();
        assert_eq!(root.uid, 0);
        assert!(lookup_account("no-such-user-rm-test").unwrap().is_none());
        assert!(matches!(
            RunAs::Account {
                name: "root".into()
            }
            .resolve(),
            Err(AccountError::IsRoot { .. })
        ));
    }
}
