//! Persistent workspaces: what a slot may keep between two jobs and what must go.
//!
//! A persistent slot keeps a runner's `_work` (checkouts, build outputs) for the next job of
//! the same target. Everything that could let a later job act as an earlier one is removed
//! between jobs: the runner's own credential files if a job copied them there, the job's temp
//! directory, and in every git repository's config the credentials `actions/checkout` and
//! others persist (`http.*.extraheader`, credential helpers, `includeIf` files in the temp
//! directory, tokens inside URLs). The rules live here, pure; the runner host applies them.

use crate::attempt::Outcome;

/// File names that hold a runner's or git's credentials; removed wherever they are in a slot.
pub const CREDENTIAL_FILES: &[&str] = &[
    ".runner",
    ".credentials",
    ".credentials_rsaparams",
    ".git-credentials",
];

/// The job's temp directory inside `_work` (`RUNNER_TEMP`): removed between jobs whole.
pub const TEMP_DIR: &str = "_temp";

/// Whether a slot is kept after an attempt that ended this way: after a job or an idle
/// runner's end, and after a launch that failed before any runner ran in it. A runner that
/// failed or vanished once running may have left the tree half-written: its slot is reset.
pub fn keeps_workspace(outcome: Option<Outcome>) -> bool {
    use crate::attempt::FailureReason as F;
    matches!(
        outcome,
        Some(
            Outcome::CompletedJob
                | Outcome::ExitedIdleWithoutWork
                | Outcome::Failed(
                    F::JitRequestFailed
                        | F::JitExpired
                        | F::PackageUnverified
                        | F::ProcessStartFailed
                        | F::LaunchInterrupted
                )
        )
    )
}

/// Sections dropped whole: credential helpers and usernames, and included files (checkout
/// keeps its token in one under the temp directory).
const DROPPED_SECTIONS: &[&str] = &["credential", "include", "includeif"];
/// Keys dropped in any section (git's key names are case-insensitive).
const DROPPED_KEYS: &[&str] = &["extraheader", "askpass", "cookiefile"];

/// The config of one git repository with its credentials removed, or `None` when it has
/// none (nothing to write). Comments and every other setting are kept as they were.
pub fn scrub_git_config(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    // Whether the section we are in is dropped whole.
    let mut dropping = false;
    for logical in logical_lines(text) {
        let trimmed = logical.trim_start();
        if trimmed.starts_with('[') {
            let Some((name, sub, rest)) = parse_header(trimmed) else {
                // Not a header git would accept either: keep it as it is.
                out.push_str(logical);
                continue;
            };
            let has_userinfo = sub.as_deref().is_some_and(|s| strip_userinfo(s).is_some());
            dropping = DROPPED_SECTIONS.contains(&name.as_str()) || has_userinfo;
            if dropping {
                changed = true;
                continue;
            }
            let rest_trimmed = rest.trim_start();
            if rest_trimmed.is_empty() || rest_trimmed.starts_with(['#', ';']) {
                out.push_str(logical);
            } else {
                // `[section] key = value` on one line: keep the header, judge the entry.
                let header_len = logical.len() - rest.len();
                out.push_str(&logical[..header_len]);
                out.push('\n');
                changed |= push_entry(&mut out, rest_trimmed);
            }
            continue;
        }
        if dropping && !(trimmed.is_empty() || trimmed.starts_with(['#', ';'])) {
            changed = true;
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) {
            out.push_str(logical);
            continue;
        }
        changed |= push_entry(&mut out, logical);
    }
    changed.then_some(out)
}

/// Appends one `key = value` entry unless it is a credential; a token inside a URL value is
/// cut out. True when the entry was changed or dropped.
fn push_entry(out: &mut String, entry: &str) -> bool {
    let key = entry
        .split(['=', '#', ';'])
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if DROPPED_KEYS.contains(&key.as_str()) {
        return true;
    }
    match strip_userinfo(entry) {
        Some(clean) => {
            out.push_str(&clean);
            if !clean.ends_with('\n') {
                out.push('\n');
            }
            true
        }
        None => {
            out.push_str(entry);
            if !entry.ends_with('\n') {
                out.push('\n');
            }
            false
        }
    }
}

/// `text` with every `scheme://user[:password]@` reduced to `scheme://`, or `None` when there
/// is no such userinfo.
fn strip_userinfo(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '"' || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(userinfo_end) => {
                changed = true;
                rest = &tail[userinfo_end + 1..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// Physical lines joined while one ends in an unescaped backslash (git's continuation), each
/// with its line ending.
fn logical_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    let bytes = text.as_bytes();
    while pos < bytes.len() {
        let Some(nl) = text[pos..].find('\n').map(|i| pos + i) else {
            break;
        };
        let body = text[start..nl].trim_end_matches('\r');
        let trailing = body.len() - body.trim_end_matches('\\').len();
        pos = nl + 1;
        if trailing % 2 == 0 {
            lines.push(&text[start..pos]);
            start = pos;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// `[name]`, `[name "sub"]` or the old `[name.sub]`: the lower-cased name, the subsection and
/// what follows the closing bracket.
fn parse_header(line: &str) -> Option<(String, Option<String>, &str)> {
    let inner = line.strip_prefix('[')?;
    let mut in_quotes = false;
    let mut escaped = false;
    let mut close = None;
    for (i, c) in inner.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            ']' if !in_quotes => {
                close = Some(i);
                break;
            }
            _ => {}
        }
    }
    let close = close?;
    let header = &inner[..close];
    let rest = &inner[close + 1..];
    let (name, sub) = match header.split_once(char::is_whitespace) {
        Some((name, sub)) => (name, Some(sub.trim().trim_matches('"').to_owned())),
        None => match header.split_once('.') {
            Some((name, sub)) => (name, Some(sub.to_owned())),
            None => (header, None),
        },
    };
    Some((name.trim().to_ascii_lowercase(), sub, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKOUT: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
        [remote \"origin\"]\n\turl = https://github.com/octo/hello\n\
        \tfetch = +refs/heads/*:refs/remotes/origin/*\n\
        [http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic eC10b2tlbjpnaHNfMTIz\n\
        [branch \"main\"]\n\tremote = origin\n";

    #[test]
    fn checkouts_persisted_header_is_removed_and_the_rest_kept() {
        let out = scrub_git_config(CHECKOUT).unwrap();
        assert!(!out.contains("extraheader") && !out.contains("eC10b2tlbjpnaHNfMTIz"));
        for kept in [
            "repositoryformatversion = 0",
            "url = https://github.com/octo/hello",
            "fetch = +refs/heads/*:refs/remotes/origin/*",
            "[branch \"main\"]",
            "remote = origin",
        ] {
            assert!(out.contains(kept), "{kept} lost:\n{out}");
        }
    }

    #[test]
    fn a_config_without_credentials_is_left_alone() {
        let clean = "[core]\n\tbare = false\n# a comment\n[remote \"origin\"]\n\turl = https://github.com/o/r\n";
        assert_eq!(scrub_git_config(clean), None);
        assert_eq!(scrub_git_config(""), None);
    }

    #[test]
    fn every_credential_shape_goes() {
        let cases = [
            // Section names and keys in any case, the old dotted header.
            "[HTTP \"https://github.com/\"]\n\tExtraHeader = AUTHORIZATION: basic SECRET\n",
            "[http.https://github.com/]\n\textraheader = AUTHORIZATION: basic SECRET\n",
            "[http]\n\textraheader = AUTHORIZATION: bearer SECRET\n",
            // An entry on the header's line.
            "[http] extraheader = AUTHORIZATION: basic SECRET\n",
            // A continued value.
            "[http]\n\textraheader = AUTHORIZATION: \\\n basic SECRET\n",
            // Credential helpers and usernames.
            "[credential]\n\thelper = store --file /tmp/SECRET\n",
            "[credential \"https://github.com\"]\n\tusername = x-access-token\n\thelper = !echo password=SECRET\n",
            // checkout v6 keeps the token in a file included from the temp directory.
            "[includeIf \"gitdir:/w/r/.git\"]\n\tpath = /w/_temp/git-credentials-SECRET.config\n",
            "[include]\n\tpath = /w/_temp/SECRET.config\n",
            // Tokens inside URLs, in values and in `url.<base>.insteadOf` sections.
            "[remote \"origin\"]\n\turl = https://x-access-token:SECRET@github.com/o/r\n",
            "[submodule \"lib\"]\n\turl = https://SECRET@github.com/o/lib\n",
            "[url \"https://x-access-token:SECRET@github.com/\"]\n\tinsteadOf = https://github.com/\n",
            "[core]\n\taskPass = /tmp/SECRET.sh\n",
            "[http]\n\tcookieFile = /tmp/SECRET\n",
        ];
        for case in cases {
            let out = scrub_git_config(case).unwrap_or_else(|| panic!("unchanged: {case}"));
            assert!(!out.contains("SECRET"), "{case:?} left:\n{out}");
        }
    }

    #[test]
    fn a_token_in_a_url_is_cut_and_the_url_kept() {
        let out =
            scrub_git_config("[remote \"origin\"]\n\turl = https://u:p@github.com/o/r\n").unwrap();
        assert!(out.contains("url = https://github.com/o/r"), "{out}");
    }

    #[test]
    fn what_follows_a_dropped_section_is_kept() {
        let text = "[credential]\n\thelper = store\n[core]\n\tbare = false\n";
        let out = scrub_git_config(text).unwrap();
        assert_eq!(out, "[core]\n\tbare = false\n");
        // A header line's comment is not an entry.
        let commented = "[http] # proxy settings\n\tproxy = http://proxy:3128\n";
        assert_eq!(scrub_git_config(commented), None);
    }

    #[test]
    fn only_clean_ends_keep_the_slot() {
        use crate::attempt::FailureReason;
        assert!(keeps_workspace(Some(Outcome::CompletedJob)));
        assert!(keeps_workspace(Some(Outcome::ExitedIdleWithoutWork)));
        // Nothing ran in it.
        assert!(keeps_workspace(Some(Outcome::Failed(
            FailureReason::JitRequestFailed
        ))));
        assert!(keeps_workspace(Some(Outcome::Failed(
            FailureReason::ProcessStartFailed
        ))));
        // A runner that ran and failed or vanished.
        assert!(!keeps_workspace(Some(Outcome::Orphaned)));
        for reason in [
            FailureReason::ProcessExitedUnexpectedly,
            FailureReason::TerminatedAfterRegistrationTimeout,
            FailureReason::VersionRejected,
            FailureReason::WorkspaceCleanupDeferred,
        ] {
            assert!(!keeps_workspace(Some(Outcome::Failed(reason))), "{reason}");
        }
        assert!(!keeps_workspace(None));
    }
}
