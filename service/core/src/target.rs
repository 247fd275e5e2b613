//! What a host serves: one repository (`owner/repo`) or one organization (`org`), validated by
//! GitHub's naming rules so a typo is caught when it is typed, not at the first API call.

use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Longest GitHub user or organization login.
pub const ACCOUNT_NAME_MAX_LEN: usize = 39;
/// Longest GitHub repository name.
pub const REPO_NAME_MAX_LEN: usize = 100;

/// Which part of a target an account-name error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountRole {
    Owner,
    Organization,
}

impl fmt::Display for AccountRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccountRole::Owner => "owner",
            AccountRole::Organization => "organization",
        })
    }
}

/// What is wrong with an owner or organization name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AccountNameProblem {
    #[error("is empty")]
    Empty,
    #[error("is {len} characters long: GitHub allows at most {ACCOUNT_NAME_MAX_LEN}")]
    TooLong { len: usize },
    #[error("contains {ch:?}: GitHub allows only ASCII letters, digits and single hyphens")]
    InvalidChar { ch: char },
    #[error("starts with a hyphen: GitHub does not allow that")]
    LeadingHyphen,
    #[error("ends with a hyphen: GitHub does not allow that")]
    TrailingHyphen,
    #[error("has two hyphens in a row: GitHub allows single hyphens only")]
    DoubleHyphen,
}

/// What is wrong with a repository name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RepoNameProblem {
    #[error("is empty")]
    Empty,
    #[error("is {len} characters long: GitHub allows at most {REPO_NAME_MAX_LEN}")]
    TooLong { len: usize },
    #[error("contains {ch:?}: GitHub allows only ASCII letters, digits, '.', '_' and '-'")]
    InvalidChar { ch: char },
    #[error("is reserved: GitHub does not allow '.' or '..' as a repository name")]
    Reserved,
}

/// Why a target text was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    #[error("target is empty: give 'owner/repo' for a repository or 'org' for an organization")]
    Empty,
    #[error("target '{text}' has more than one '/': give 'owner/repo' for a repository or 'org' for an organization")]
    TooManySlashes { text: String },
    #[error("{role} name '{name}' {problem}")]
    InvalidAccount {
        role: AccountRole,
        name: String,
        problem: AccountNameProblem,
    },
    #[error("repository name '{name}' {problem}")]
    InvalidRepo {
        name: String,
        problem: RepoNameProblem,
    },
}

/// A GitHub user or organization login (case preserved as typed; GitHub compares it
/// case-insensitively).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountName(String);

impl AccountName {
    /// Validates `name` as an account name in the given role (the role only shapes the error).
    pub fn new(name: &str, role: AccountRole) -> Result<Self, TargetError> {
        check_account(name).map_err(|problem| TargetError::InvalidAccount {
            role,
            name: name.to_owned(),
            problem,
        })?;
        Ok(AccountName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_account(name: &str) -> Result<(), AccountNameProblem> {
    if name.is_empty() {
        return Err(AccountNameProblem::Empty);
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(AccountNameProblem::InvalidChar { ch });
    }
    if name.len() > ACCOUNT_NAME_MAX_LEN {
        return Err(AccountNameProblem::TooLong { len: name.len() });
    }
    if name.starts_with('-') {
        return Err(AccountNameProblem::LeadingHyphen);
    }
    if name.ends_with('-') {
        return Err(AccountNameProblem::TrailingHyphen);
    }
    if name.contains("--") {
        return Err(AccountNameProblem::DoubleHyphen);
    }
    Ok(())
}

/// A GitHub repository name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoName(String);

impl RepoName {
    pub fn new(name: &str) -> Result<Self, TargetError> {
        check_repo(name).map_err(|problem| TargetError::InvalidRepo {
            name: name.to_owned(),
            problem,
        })?;
        Ok(RepoName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_repo(name: &str) -> Result<(), RepoNameProblem> {
    if name.is_empty() {
        return Err(RepoNameProblem::Empty);
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(RepoNameProblem::InvalidChar { ch });
    }
    if name.len() > REPO_NAME_MAX_LEN {
        return Err(RepoNameProblem::TooLong { len: name.len() });
    }
    if name == "." || name == ".." {
        return Err(RepoNameProblem::Reserved);
    }
    Ok(())
}

/// One repository or one organization served by this host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    Repository { owner: AccountName, name: RepoName },
    Organization { org: AccountName },
}

impl Target {
    /// Parses `owner/repo` or `org`.
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        if text.is_empty() {
            return Err(TargetError::Empty);
        }
        let mut parts = text.split('/');
        let first = parts.next().unwrap_or_default();
        match (parts.next(), parts.next()) {
            (None, _) => Ok(Target::Organization {
                org: AccountName::new(first, AccountRole::Organization)?,
            }),
            (Some(repo), None) => Ok(Target::Repository {
                owner: AccountName::new(first, AccountRole::Owner)?,
                name: RepoName::new(repo)?,
            }),
            (Some(_), Some(_)) => Err(TargetError::TooManySlashes {
                text: text.to_owned(),
            }),
        }
    }

    /// The account that owns the target (the repository owner or the organization).
    pub fn account(&self) -> &AccountName {
        match self {
            Target::Repository { owner, .. } => owner,
            Target::Organization { org } => org,
        }
    }

    pub fn is_organization(&self) -> bool {
        matches!(self, Target::Organization { .. })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Repository { owner, name } => write!(f, "{owner}/{name}"),
            Target::Organization { org } => write!(f, "{org}"),
        }
    }
}

impl FromStr for Target {
    type Err = TargetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_displays_both_kinds() {
        for text in ["octo-org/hello.world_2", "octo-org", "a/b", "A1/-x-"] {
            let target: Target = text.parse().unwrap();
            assert_eq!(target.to_string(), text);
        }
        assert!(Target::parse("octo").unwrap().is_organization());
        let repo = Target::parse("me/app").unwrap();
        assert_eq!(repo.account().as_str(), "me");
        assert!(!repo.is_organization());
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let cases = [
            ("", "target is empty: give 'owner/repo' for a repository or 'org' for an organization"),
            ("x--y", "organization name 'x--y' has two hyphens in a row: GitHub allows single hyphens only"),
            ("-x/r", "owner name '-x' starts with a hyphen: GitHub does not allow that"),
            ("x-/r", "owner name 'x-' ends with a hyphen: GitHub does not allow that"),
            ("x_y", "organization name 'x_y' contains '_': GitHub allows only ASCII letters, digits and single hyphens"),
            ("o/..", "repository name '..' is reserved: GitHub does not allow '.' or '..' as a repository name"),
            ("o/", "repository name '' is empty"),
            ("/r", "owner name '' is empty"),
            ("o/r/x", "target 'o/r/x' has more than one '/': give 'owner/repo' for a repository or 'org' for an organization"),
            ("o/r x", "repository name 'r x' contains ' ': GitHub allows only ASCII letters, digits, '.', '_' and '-'"),
        ];
        for (text, message) in cases {
            assert_eq!(
                Target::parse(text).unwrap_err().to_string(),
                message,
                "{text}"
            );
        }
    }

    #[test]
    fn length_limits_follow_github() {
        assert!(Target::parse(&"a".repeat(39)).is_ok());
        assert!(matches!(
            Target::parse(&"a".repeat(40)),
            Err(TargetError::InvalidAccount {
                problem: AccountNameProblem::TooLong { len: 40 },
                ..
            })
        ));
        assert!(Target::parse(&format!("o/{}", "r".repeat(100))).is_ok());
        assert!(matches!(
            Target::parse(&format!("o/{}", "r".repeat(101))),
            Err(TargetError::InvalidRepo {
                problem: RepoNameProblem::TooLong { len: 101 },
                ..
            })
        ));
        assert!(Target::parse("o/.x").is_ok());
    }
}
