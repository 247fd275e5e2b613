//! The host's runner environment: variables given to every runner the host starts (proxy
//! settings, PATH additions). The rules for a name and a value live here, in one place, for
//! the CLI, the local API and the journal alike.
//!
//! Errors name the variable and what to do, never its value: a value may be a proxy URL with
//! a password in it, and errors reach logs and terminals.

use std::collections::BTreeMap;

/// The longest name accepted.
pub const MAX_NAME_LEN: usize = 128;
/// The longest value accepted, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;
/// The most variables a host may set (catches a script gone wrong; the env block has limits).
pub const MAX_VARIABLES: usize = 128;

/// Words that mark a name as carrying a secret (compared case-insensitively). A secret in the
/// runner's environment is readable by every job of every target served here, and GitHub
/// masks it nowhere: it belongs in GitHub's secrets. Listed in README ("Runner environment").
pub const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "API_KEY",
    "ACCESS_KEY",
];

/// The fix given for a secret-like name.
pub const SECRETS_FIX: &str =
    "secrets belong in GitHub's secrets (Settings → Secrets and variables → Actions)";

/// Names the runner or the service sets for each runner, with why they cannot be changed.
/// Compared case-insensitively (Windows' environment is).
const RESERVED_NAMES: &[(&str, &str)] = &[
    (
        "RUNNER_TOOL_CACHE",
        "the runner's tool cache is chosen by the service",
    ),
    (
        "AGENT_TOOLSDIRECTORY",
        "the runner's tool cache is chosen by the service",
    ),
    (
        "RUNNER_TEMP",
        "the runner sets it for each job inside its own runtime",
    ),
    (
        "RUNNER_WORKSPACE",
        "the runner sets it for each job inside its own runtime",
    ),
    (
        "HOME",
        "each runner gets its own inside its runtime, removed after the job",
    ),
    (
        "TMPDIR",
        "each runner gets its own inside its runtime, removed after the job",
    ),
    (
        "TMP",
        "each runner gets its own inside its runtime, removed after the job",
    ),
    (
        "TEMP",
        "each runner gets its own inside its runtime, removed after the job",
    ),
];

/// Prefixes of names the runner owns, with why.
const RESERVED_PREFIXES: &[(&str, &str)] = &[
    (
        "ACTIONS_RUNNER_",
        "the runner reads its own configuration (and its one-job credential) from these",
    ),
    (
        "GITHUB_",
        "the runner sets these for each job from GitHub's context",
    ),
];

/// Why a variable is refused. Displays the name and the fix, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvVarError {
    #[error(
        "{0} is not an environment variable name: use letters, digits and '_', not starting \
         with a digit, at most {MAX_NAME_LEN} characters"
    )]
    BadName(String),
    #[error("{name} looks like it carries a secret (it contains '{word}'): {SECRETS_FIX}")]
    Secret { name: String, word: &'static str },
    #[error("{name} cannot be set for runners: {why}")]
    Reserved { name: String, why: &'static str },
    #[error("the value of {name} is {len} bytes: give at most {MAX_VALUE_BYTES}")]
    ValueTooLong { name: String, len: usize },
    #[error("the value of {name} contains a NUL byte, which no environment can hold: remove it")]
    ValueHasNul { name: String },
    #[error("{name} is both set and unset in one change: give it once")]
    SetAndUnset { name: String },
    #[error(
        "{count} variables would be set: at most {MAX_VARIABLES} are allowed, unset some first"
    )]
    TooMany { count: usize },
}

/// A name as shown in an error: quoted with escapes, cut short, so that a pasted value or a
/// control character cannot spill whole into a terminal or a log.
fn shown(name: &str) -> String {
    const SHOWN: usize = 64;
    let mut cut: String = name.chars().take(SHOWN).collect();
    if cut.len() < name.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// Checks a name: syntax, then secret words, then the names the runner owns.
pub fn check_name(name: &str) -> Result<(), EnvVarError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok
        || name.len() > MAX_NAME_LEN
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(EnvVarError::BadName(shown(name)));
    }
    let upper = name.to_ascii_uppercase();
    if let Some(word) = SECRET_WORDS.iter().find(|w| upper.contains(*w)) {
        return Err(EnvVarError::Secret {
            name: name.to_owned(),
            word,
        });
    }
    let reserved = RESERVED_NAMES
        .iter()
        .find(|(n, _)| upper == *n)
        .or_else(|| RESERVED_PREFIXES.iter().find(|(p, _)| upper.starts_with(p)));
    if let Some((_, why)) = reserved {
        return Err(EnvVarError::Reserved {
            name: name.to_owned(),
            why,
        });
    }
    if crate::caches::cache_vars().any(|v| v.eq_ignore_ascii_case(name)) {
        return Err(EnvVarError::Reserved {
            name: name.to_owned(),
            why: "the service points it at the target's dependency cache; turn a target's \
                  caches off with `runner-manager repo set OWNER/REPO --cache off`",
        });
    }
    Ok(())
}

/// Checks a variable: its name, then its value's size and bytes.
pub fn check_var(name: &str, value: &str) -> Result<(), EnvVarError> {
    check_name(name)?;
    if value.len() > MAX_VALUE_BYTES {
        return Err(EnvVarError::ValueTooLong {
            name: name.to_owned(),
            len: value.len(),
        });
    }
    if value.contains('\0') {
        return Err(EnvVarError::ValueHasNul {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a change (`set` these, `unset` those) against the variables now set, and answers
/// the variables after it. Every rule is checked before anything is applied, so a refused
/// change leaves `current` as it was. Unsetting a name that is not set is not an error (the
/// caller may say so): the end state is what was asked.
pub fn apply_change(
    current: &BTreeMap<String, String>,
    set: &BTreeMap<String, String>,
    unset: &[String],
) -> Result<BTreeMap<String, String>, EnvVarError> {
    for (name, value) in set {
        check_var(name, value)?;
    }
    for name in unset {
        // A stored name passed the rules; an unset of a malformed one is a typo to report.
        check_name_syntax(name)?;
        if set.contains_key(name) {
            return Err(EnvVarError::SetAndUnset { name: name.clone() });
        }
    }
    let mut next = current.clone();
    for name in unset {
        next.remove(name);
    }
    next.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    if next.len() > MAX_VARIABLES {
        return Err(EnvVarError::TooMany { count: next.len() });
    }
    Ok(next)
}

/// Only the syntax of a name (an unset may name a reserved or secret-like name: removing one
/// that got in by hand is fine).
fn check_name_syntax(name: &str) -> Result<(), EnvVarError> {
    match check_name(name) {
        Err(e @ EnvVarError::BadName(_)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_environment_syntax() {
        for ok in [
            "HTTPS_PROXY",
            "no_proxy",
            "_X",
            "A1",
            &"A".repeat(MAX_NAME_LEN),
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "1A",
            "A-B",
            "A B",
            "A=B",
            "É",
            &"A".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(
                matches!(check_name(bad), Err(EnvVarError::BadName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn secret_like_names_are_refused_with_the_reason() {
        for name in [
            "NPM_TOKEN",
            "my_secret_x",
            "DB_PASSWORD",
            "PASSWD",
            "AWS_CREDENTIALS",
            "SSH_PRIVATE_KEY",
            "openai_api_key",
            "AWS_ACCESS_KEY_ID",
            "GITHUB_TOKEN",
        ] {
            let e = check_name(name).unwrap_err();
            assert!(matches!(e, EnvVarError::Secret { .. }), "{name}: {e}");
            assert!(e.to_string().contains(SECRETS_FIX), "{e}");
        }
    }

    #[test]
    fn names_the_runner_owns_are_refused_with_the_reason() {
        for name in [
            "ACTIONS_RUNNER_INPUT_JITCONFIG",
            "ACTIONS_RUNNER_DEBUG",
            "RUNNER_TOOL_CACHE",
            "AGENT_TOOLSDIRECTORY",
            "HOME",
            "home",
            "TMPDIR",
            "TMP",
            "TEMP",
            "GITHUB_WORKSPACE",
            "npm_config_cache",
            "CARGO_HOME",
            "GOCACHE",
        ] {
            let e = check_name(name).unwrap_err();
            assert!(matches!(e, EnvVarError::Reserved { .. }), "{name}: {e}");
        }
    }

    #[test]
    fn errors_never_carry_the_value() {
        let value = "http://user:hunter2@proxy:3128";
        let long = format!("{value}{}", "x".repeat(MAX_VALUE_BYTES));
        let e = check_var("HTTPS_PROXY", &long).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = check_var("HTTPS_PROXY", &format!("{value}\0")).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert_eq!(check_var("HTTPS_PROXY", value), Ok(()));
    }

    #[test]
    fn a_change_applies_whole_or_not_at_all() {
        let current: BTreeMap<String, String> = [("A".to_owned(), "1".to_owned())].into();
        let set: BTreeMap<String, String> = [
            ("B".to_owned(), "2".to_owned()),
            ("NPM_TOKEN".to_owned(), "x".to_owned()),
        ]
        .into();
        assert!(apply_change(&current, &set, &[]).is_err());
        let set: BTreeMap<String, String> = [("B".to_owned(), "2".to_owned())].into();
        let next = apply_change(&current, &set, &["A".to_owned(), "C".to_owned()]).unwrap();
        assert_eq!(next, [("B".to_owned(), "2".to_owned())].into());
        assert!(matches!(
            apply_change(&current, &set, &["B".to_owned()]),
            Err(EnvVarError::SetAndUnset { .. })
        ));
        let many: BTreeMap<String, String> = (0..=MAX_VARIABLES)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(matches!(
            apply_change(&current, &many, &[]),
            Err(EnvVarError::TooMany { .. })
        ));
    }
}
