//! Runner labels, the host label, and the reserved routing label
//! `<prefix>-<host-label>-<os>-<arch>[-<profile>]` that users put in `runs-on`.

use crate::text::text_enum;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Longest label we accept. GitHub documents no limit; the longest routing label we can build is
/// 96 characters, so 100 leaves room without admitting nonsense.
pub const LABEL_MAX_LEN: usize = 100;
/// GitHub accepts 1–100 labels per JIT registration.
pub const LABEL_SET_MAX: usize = 100;
/// Longest host label (keeps routing labels short enough to type).
pub const HOST_LABEL_MAX_LEN: usize = 32;
/// Longest profile name.
pub const PROFILE_MAX_LEN: usize = 32;
/// Longest routing prefix.
pub const PREFIX_MAX_LEN: usize = 16;
/// The routing prefix used unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "rm";
/// The profile name of a target's first policy; it adds no suffix to the routing label.
pub const DEFAULT_PROFILE: &str = "default";
/// Host label used when the machine name has nothing usable in it.
pub const FALLBACK_HOST_LABEL: &str = "host";

/// What is wrong with a slug (host label, profile name or routing prefix).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SlugProblem {
    #[error("is empty")]
    Empty,
    #[error("is {len} characters long: at most {max} are allowed")]
    TooLong { len: usize, max: usize },
    #[error("contains {ch:?}: only lowercase a-z, 0-9 and single hyphens are allowed")]
    InvalidChar { ch: char },
    #[error("starts or ends with a hyphen")]
    EdgeHyphen,
    #[error("has two hyphens in a row")]
    DoubleHyphen,
}

/// Why a label, label set or slug was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LabelError {
    #[error("label is empty")]
    Empty,
    #[error("label '{label}' is {len} characters long: at most {LABEL_MAX_LEN} are allowed")]
    TooLong { label: String, len: usize },
    #[error("label '{label}' contains {ch:?}: only letters, digits, '.', '_' and '-' are allowed")]
    InvalidChar { label: String, ch: char },
    #[error("label '{label}' starts with '-': start it with a letter or digit")]
    LeadingHyphen { label: String },
    #[error("a policy needs at least one label (its routing label)")]
    EmptySet,
    #[error("{count} labels given: GitHub accepts at most {LABEL_SET_MAX} per runner")]
    TooMany { count: usize },
    #[error("{what} '{value}' {problem}")]
    InvalidSlug {
        what: &'static str,
        value: String,
        problem: SlugProblem,
    },
}

/// One runner label, lower-cased on construction (GitHub matches labels case-insensitively, so
/// one spelling avoids duplicates that differ only in case).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(String);

impl Label {
    /// Lower-cases, then requires 1–100 characters of `[a-z0-9._-]` not starting with '-'.
    pub fn new(text: &str) -> Result<Self, LabelError> {
        let label = text.to_ascii_lowercase();
        if label.is_empty() {
            return Err(LabelError::Empty);
        }
        if let Some(ch) = label.chars().find(|c| {
            !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
        }) {
            return Err(LabelError::InvalidChar { label, ch });
        }
        if label.len() > LABEL_MAX_LEN {
            let len = label.len();
            return Err(LabelError::TooLong { label, len });
        }
        if label.starts_with('-') {
            return Err(LabelError::LeadingHyphen { label });
        }
        Ok(Label(label))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Label {
    type Err = LabelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Label::new(s)
    }
}

/// A policy's labels: 1–100, deduplicated, in the order first given (the routing label is
/// conventionally first).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSet(Vec<Label>);

impl LabelSet {
    pub fn new(labels: impl IntoIterator<Item = Label>) -> Result<Self, LabelError> {
        let mut out: Vec<Label> = Vec::new();
        for label in labels {
            if !out.contains(&label) {
                out.push(label);
            }
        }
        if out.is_empty() {
            return Err(LabelError::EmptySet);
        }
        if out.len() > LABEL_SET_MAX {
            return Err(LabelError::TooMany { count: out.len() });
        }
        Ok(LabelSet(out))
    }

    /// Validates each text as a [`Label`], then builds the set.
    pub fn parse<I, S>(texts: I) -> Result<Self, LabelError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let labels = texts
            .into_iter()
            .map(|t| Label::new(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        LabelSet::new(labels)
    }

    /// Case-insensitive membership.
    pub fn contains(&self, label: &str) -> bool {
        self.0.iter().any(|l| l.0.eq_ignore_ascii_case(label))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    pub fn as_slice(&self) -> &[Label] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a label set holds at least one label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as plain strings (for the JIT request and the journal).
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|l| l.0.clone()).collect()
    }
}

fn check_slug(value: &str, max: usize) -> Result<(), SlugProblem> {
    if value.is_empty() {
        return Err(SlugProblem::Empty);
    }
    if let Some(ch) = value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(SlugProblem::InvalidChar { ch });
    }
    if value.len() > max {
        return Err(SlugProblem::TooLong {
            len: value.len(),
            max,
        });
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(SlugProblem::EdgeHyphen);
    }
    if value.contains("--") {
        return Err(SlugProblem::DoubleHyphen);
    }
    Ok(())
}

fn slug(what: &'static str, value: &str, max: usize) -> Result<String, LabelError> {
    check_slug(value, max).map_err(|problem| LabelError::InvalidSlug {
        what,
        value: value.to_owned(),
        problem,
    })?;
    Ok(value.to_owned())
}

macro_rules! slug_type {
    ($(#[$meta:meta])* $name:ident, $what:literal, $max:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Strict: 1–max characters of `[a-z0-9-]`, no leading, trailing or doubled hyphen.
            pub fn new(value: &str) -> Result<Self, LabelError> {
                slug($what, value, $max).map($name)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = LabelError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }
    };
}

slug_type!(
    /// The host's part of routing labels; defaults to the normalised machine name.
    HostLabel,
    "host label",
    HOST_LABEL_MAX_LEN
);
slug_type!(
    /// A policy's profile name; every profile but `default` appends `-<profile>` to the
    /// routing label.
    ProfileName,
    "profile name",
    PROFILE_MAX_LEN
);
slug_type!(
    /// The first part of every routing label (`rm` unless configured).
    RoutingPrefix,
    "routing prefix",
    PREFIX_MAX_LEN
);

impl HostLabel {
    /// Normalises any machine name: lower-case, every run of characters other than `[a-z0-9]`
    /// becomes one '-', edges trimmed, at most 32 characters, `host` if nothing is left.
    pub fn from_machine_name(name: &str) -> HostLabel {
        let mut out = String::new();
        for c in name.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                out.push(c);
            } else if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
        }
        out.truncate(HOST_LABEL_MAX_LEN);
        let trimmed = out.trim_end_matches('-');
        if trimmed.is_empty() {
            HostLabel(FALLBACK_HOST_LABEL.to_owned())
        } else {
            HostLabel(trimmed.to_owned())
        }
    }
}

impl ProfileName {
    pub fn is_default(&self) -> bool {
        self.0 == DEFAULT_PROFILE
    }
}

impl Default for ProfileName {
    fn default() -> Self {
        ProfileName(DEFAULT_PROFILE.to_owned())
    }
}

impl Default for RoutingPrefix {
    fn default() -> Self {
        RoutingPrefix(DEFAULT_PREFIX.to_owned())
    }
}

text_enum! {
    /// The host's operating system, spelled as in routing labels.
    pub enum Os ("operating system") {
        Linux => "linux",
        Macos => "macos",
        Windows => "windows",
    }
}

text_enum! {
    /// The host's CPU architecture, spelled as in routing labels and runner package names.
    pub enum Arch ("architecture") {
        X64 => "x64",
        Arm64 => "arm64",
        Arm => "arm",
    }
}

impl Os {
    /// Maps `std::env::consts::OS`; `None` for systems the runner does not support.
    pub fn from_std(os: &str) -> Option<Os> {
        match os {
            "linux" => Some(Os::Linux),
            "macos" => Some(Os::Macos),
            "windows" => Some(Os::Windows),
            _ => None,
        }
    }
}

impl Arch {
    /// Maps `std::env::consts::ARCH`; `None` for architectures the runner does not support.
    pub fn from_std(arch: &str) -> Option<Arch> {
        match arch {
            "x86_64" => Some(Arch::X64),
            "aarch64" => Some(Arch::Arm64),
            "arm" => Some(Arch::Arm),
            _ => None,
        }
    }
}

/// The read-only labels GitHub gives every self-hosted runner besides the ones registered:
/// `self-hosted`, its OS and its architecture, spelled as GitHub spells them. Workflows almost
/// always list `self-hosted`, so demand matching must treat these as present.
pub fn default_runner_labels(os: Os, arch: Arch) -> [&'static str; 3] {
    let os = match os {
        Os::Linux => "Linux",
        Os::Macos => "macOS",
        Os::Windows => "Windows",
    };
    let arch = match arch {
        Arch::X64 => "X64",
        Arch::Arm64 => "ARM64",
        Arch::Arm => "ARM",
    };
    ["self-hosted", os, arch]
}

/// The reserved routing label `<prefix>-<host-label>-<os>-<arch>[-<profile>]`; the default
/// profile adds no suffix. Always a valid [`Label`] (at most 96 characters by construction).
pub fn routing_label(
    prefix: &RoutingPrefix,
    host: &HostLabel,
    os: Os,
    arch: Arch,
    profile: &ProfileName,
) -> Label {
    let mut text = format!("{prefix}-{host}-{os}-{arch}");
    if !profile.is_default() {
        text.push('-');
        text.push_str(profile.as_str());
    }
    // Every part is a validated lower-case slug, so this is a valid label; build it directly.
    Label(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_lower_cased_and_validated() {
        assert_eq!(Label::new("Self-Hosted").unwrap().as_str(), "self-hosted");
        assert_eq!(Label::new("X64").unwrap().as_str(), "x64");
        assert_eq!(Label::new(""), Err(LabelError::Empty));
        assert!(matches!(
            Label::new("-x"),
            Err(LabelError::LeadingHyphen { .. })
        ));
        assert!(matches!(
            Label::new("a b"),
            Err(LabelError::InvalidChar { ch: ' ', .. })
        ));
        assert!(matches!(
            Label::new("é"),
            Err(LabelError::InvalidChar { .. })
        ));
        assert!(Label::new(&"a".repeat(100)).is_ok());
        assert!(matches!(
            Label::new(&"a".repeat(101)),
            Err(LabelError::TooLong { len: 101, .. })
        ));
    }

    #[test]
    fn label_sets_dedupe_keep_order_and_match_case_insensitively() {
        let set = LabelSet::parse(["rm-home-linux-x64", "GPU", "gpu", "self-hosted"]).unwrap();
        assert_eq!(
            set.to_strings(),
            ["rm-home-linux-x64", "gpu", "self-hosted"]
        );
        assert!(set.contains("GPU"));
        assert!(!set.contains("linux"));
        assert_eq!(
            LabelSet::parse(Vec::<String>::new()),
            Err(LabelError::EmptySet)
        );
        let many: Vec<String> = (0..101).map(|i| format!("l{i}")).collect();
        assert_eq!(
            LabelSet::parse(&many),
            Err(LabelError::TooMany { count: 101 })
        );
    }

    #[test]
    fn machine_names_are_normalised() {
        let forty = "a".repeat(40);
        let cases = [
            ("Home", "home"),
            ("Jane's MacBook Pro.local", "jane-s-macbook-pro-local"),
            ("--x__y--", "x-y"),
            ("ÉCOLE-PC", "cole-pc"),
            ("", "host"),
            ("***", "host"),
            (forty.as_str(), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            (
                "abcdefghijklmnopqrstuvwxyz01234-6789",
                "abcdefghijklmnopqrstuvwxyz01234",
            ),
        ];
        for (name, want) in cases {
            let label = HostLabel::from_machine_name(name);
            assert_eq!(label.as_str(), want, "{name}");
            assert_eq!(HostLabel::new(label.as_str()), Ok(label));
        }
    }

    #[test]
    fn routing_label_follows_the_spec() {
        let host = HostLabel::new("home").unwrap();
        let prefix = RoutingPrefix::default();
        let default = ProfileName::default();
        assert_eq!(
            routing_label(&prefix, &host, Os::Linux, Arch::X64, &default).as_str(),
            "rm-home-linux-x64"
        );
        let gpu = ProfileName::new("gpu").unwrap();
        assert_eq!(
            routing_label(&prefix, &host, Os::Macos, Arch::Arm64, &gpu).as_str(),
            "rm-home-macos-arm64-gpu"
        );
        let longest = routing_label(
            &RoutingPrefix::new(&"p".repeat(16)).unwrap(),
            &HostLabel::new(&"h".repeat(32)).unwrap(),
            Os::Windows,
            Arch::Arm64,
            &ProfileName::new(&"q".repeat(32)).unwrap(),
        );
        assert_eq!(Label::new(longest.as_str()), Ok(longest));
    }

    #[test]
    fn slugs_are_strict() {
        assert_eq!(
            ProfileName::new("Gpu").unwrap_err().to_string(),
            "profile name 'Gpu' contains 'G': only lowercase a-z, 0-9 and single hyphens are allowed"
        );
        assert!(HostLabel::new("a--b").is_err());
        assert!(RoutingPrefix::new("-rm").is_err());
        assert!(ProfileName::new(&"p".repeat(33)).is_err());
    }

    #[test]
    fn os_and_arch_text_round_trips() {
        for os in Os::ALL {
            assert_eq!(os.as_str().parse::<Os>(), Ok(*os));
        }
        for arch in Arch::ALL {
            assert_eq!(arch.as_str().parse::<Arch>(), Ok(*arch));
        }
        assert_eq!(Os::from_std("macos"), Some(Os::Macos));
        assert_eq!(Arch::from_std("x86_64"), Some(Arch::X64));
        assert_eq!(Arch::from_std("riscv64"), None);
        assert!("Linux".parse::<Os>().is_err());
    }
}
