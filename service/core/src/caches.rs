//! Dependency caches and the tool cache: which tools get a cache and through which variables,
//! whose cache a runner uses (its namespace), whether it may write it, and what pruning
//! removes. Pure: the runner host lays the directories out, the daemon stores the settings.
//!
//! [`TOOLS`] is the one table of cached tools; README's "Caches" section lists the same.

use crate::target::Target;
use std::fmt;

/// Where a tool's cache variable points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Each variable points at a directory inside the tool's cache (`""`: the cache itself).
    Vars(&'static [(&'static str, &'static str)]),
    /// The variable points at a directory of the job's own whose listed subdirectories are
    /// the shared cache: everything else (cargo's `bin`, where `cargo install` writes
    /// programs) stays the job's and goes with it.
    Home {
        var: &'static str,
        shared: &'static [&'static str],
    },
    /// A directory under the job's `HOME` (Maven has no variable for its local repository).
    UnderHome(&'static str),
}

/// One cached tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTool {
    /// The name used in paths, the CLI (`--tool`) and the API.
    pub id: &'static str,
    pub layout: Layout,
    /// The tool locks or writes atomically, so jobs may write its cache at once. Otherwise one
    /// job at a time holds the writer's lease and the others get a private directory.
    pub concurrent_writers: bool,
    /// Variables pointing at a private directory of the job (poetry keeps virtualenvs, which
    /// belong to one job's checkout, beside its cache by default).
    pub private_vars: &'static [&'static str],
}

/// The cached tools.
pub const TOOLS: &[CacheTool] = &[
    tool("npm", Layout::Vars(&[("npm_config_cache", "")]), true),
    tool("pnpm", Layout::Vars(&[("npm_config_store_dir", "")]), true),
    tool("yarn", Layout::Vars(&[("YARN_CACHE_FOLDER", "")]), false),
    tool("bun", Layout::Vars(&[("BUN_INSTALL_CACHE_DIR", "")]), false),
    tool("pip", Layout::Vars(&[("PIP_CACHE_DIR", "")]), true),
    tool("uv", Layout::Vars(&[("UV_CACHE_DIR", "")]), true),
    CacheTool {
        id: "poetry",
        layout: Layout::Vars(&[("POETRY_CACHE_DIR", "")]),
        concurrent_writers: false,
        private_vars: &["POETRY_VIRTUALENVS_PATH"],
    },
    tool(
        "cargo",
        Layout::Home {
            var: "CARGO_HOME",
            shared: &["registry", "git"],
        },
        true,
    ),
    tool(
        "go",
        Layout::Vars(&[("GOMODCACHE", "mod"), ("GOCACHE", "build")]),
        true,
    ),
    tool("gradle", Layout::Vars(&[("GRADLE_USER_HOME", "")]), true),
    tool("maven", Layout::UnderHome(".m2/repository"), false),
    tool("nuget", Layout::Vars(&[("NUGET_PACKAGES", "")]), false),
    tool("ccache", Layout::Vars(&[("CCACHE_DIR", "")]), true),
    tool("sccache", Layout::Vars(&[("SCCACHE_DIR", "")]), true),
    tool(
        "playwright",
        Layout::Vars(&[("PLAYWRIGHT_BROWSERS_PATH", "")]),
        true,
    ),
];

const fn tool(id: &'static str, layout: Layout, concurrent_writers: bool) -> CacheTool {
    CacheTool {
        id,
        layout,
        concurrent_writers,
        private_vars: &[],
    }
}

/// The tool cache's variables (the runner's own and Azure's older name for it).
pub const TOOL_CACHE_VARS: &[&str] = &["RUNNER_TOOL_CACHE", "AGENT_TOOLSDIRECTORY"];

/// The id `cache show`/`cache clear` use for the host-wide tool cache.
pub const TOOL_CACHE_ID: &str = "tool-cache";

/// The default size cap of all caches of a host.
pub const DEFAULT_CAP_BYTES: u64 = 5 * GIB;

/// The smallest cap accepted (a smaller one would prune every cache after every job).
pub const MIN_CAP_BYTES: u64 = 64 * MIB;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The tool named `id`.
pub fn find_tool(id: &str) -> Option<&'static CacheTool> {
    TOOLS.iter().find(|t| t.id.eq_ignore_ascii_case(id))
}

/// Every variable a cache sets, in table order (the runner environment may not set them).
pub fn cache_vars() -> impl Iterator<Item = &'static str> {
    TOOL_CACHE_VARS
        .iter()
        .copied()
        .chain(TOOLS.iter().flat_map(|t| {
            let main: Vec<&'static str> = match t.layout {
                Layout::Vars(v) => v.iter().map(|(n, _)| *n).collect(),
                Layout::Home { var, .. } => vec![var],
                Layout::UnderHome(_) => Vec::new(),
            };
            main.into_iter().chain(t.private_vars.iter().copied())
        }))
}

/// Why a cache setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error(
        "{0:?} is not a cache namespace: use 1-64 of a-z, 0-9, '-', '_' and '.', starting with a \
         letter or digit"
    )]
    BadNamespace(String),
    #[error("{0:?} is not a cached tool: use one of {list}", list = tool_list())]
    UnknownTool(String),
    #[error(
        "{0:?} is not a size: give a number with a unit, e.g. 512MiB, 5GiB or 20G (at least 64MiB)"
    )]
    BadSize(String),
    #[error("{given} is below the smallest cache size, 64 MiB: give more")]
    TooSmall { given: String },
}

fn tool_list() -> String {
    let mut ids: Vec<&str> = TOOLS.iter().map(|t| t.id).collect();
    ids.push(TOOL_CACHE_ID);
    ids.join(", ")
}

/// Whose cache a runner uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// One repository's own (the default for a repository target).
    Repository { owner: String, repo: String },
    /// An organization target's, when turned on.
    Organization(String),
    /// A name several targets join explicitly (`repo set --cache-namespace NAME`).
    Shared(String),
}

impl Namespace {
    /// A namespace name given by an operator.
    pub fn shared(name: &str) -> Result<Namespace, CacheError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
        if ok {
            Ok(Namespace::Shared(name.to_owned()))
        } else {
            Err(CacheError::BadNamespace(name.to_owned()))
        }
    }

    /// The target's own namespace.
    pub fn of_target(target: &Target) -> Namespace {
        match target {
            Target::Repository { owner, name } => Namespace::Repository {
                owner: owner.as_str().to_ascii_lowercase(),
                repo: name.as_str().to_ascii_lowercase(),
            },
            Target::Organization { org } => {
                Namespace::Organization(org.as_str().to_ascii_lowercase())
            }
        }
    }

    /// Its directory, relative to the caches' root: one level per kind, so no two namespaces
    /// share a directory (GitHub names hold no '/').
    pub fn rel_dir(&self) -> String {
        match self {
            Namespace::Repository { owner, repo } => format!("repo/{owner}/{repo}"),
            Namespace::Organization(org) => format!("org/{org}"),
            Namespace::Shared(name) => format!("shared/{name}"),
        }
    }

    /// Reads back what [`Namespace::rel_dir`] wrote (for `cache show` of what is on disk).
    pub fn from_rel_dir(dir: &str) -> Option<Namespace> {
        let parts: Vec<&str> = dir.split('/').collect();
        match parts.as_slice() {
            ["repo", owner, repo] => Some(Namespace::Repository {
                owner: (*owner).to_owned(),
                repo: (*repo).to_owned(),
            }),
            ["org", org] => Some(Namespace::Organization((*org).to_owned())),
            ["shared", name] => Namespace::shared(name).ok(),
            _ => None,
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Namespace::Repository { owner, repo } => write!(f, "{owner}/{repo}"),
            Namespace::Organization(org) => write!(f, "{org} (organization)"),
            Namespace::Shared(name) => write!(f, "{name} (shared)"),
        }
    }
}

/// What a target sets for its caches (`None`: the default).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheSetting {
    /// On by default for repositories, off for organizations (an organization's jobs come
    /// from many repositories, which would share one cache).
    pub enabled: Option<bool>,
    pub namespace: Option<Namespace>,
}

impl CacheSetting {
    /// The namespace the target's runners use, or `None` when its caches are off.
    pub fn effective(&self, target: &Target) -> Option<Namespace> {
        let on = self
            .enabled
            .unwrap_or(matches!(target, Target::Repository { .. }));
        on.then(|| {
            self.namespace
                .clone()
                .unwrap_or_else(|| Namespace::of_target(target))
        })
    }
}

/// Whether a runner may write its target's caches. A job of a pull request from a fork runs
/// code its author wrote: writing the cache would let it plant what later trusted jobs run
/// (cache poisoning). Decided when the runner starts, from the queued jobs it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAccess {
    /// Writes go to the shared cache.
    ReadWrite,
    /// A private copy, discarded with the runner.
    ReadOnly,
}

impl CacheAccess {
    /// Read-only as soon as one job the runner may take comes from a fork.
    pub fn for_jobs(any_from_fork: bool) -> CacheAccess {
        if any_from_fork {
            CacheAccess::ReadOnly
        } else {
            CacheAccess::ReadWrite
        }
    }
}

/// Parses a size such as `5GiB`, `512MiB`, `20G`, `300M` or a plain number of bytes (units
/// are powers of 1024: caches are measured in disk blocks, not marketing gigabytes).
pub fn parse_size(text: &str) -> Result<u64, CacheError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| CacheError::BadSize(text.to_owned()))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(CacheError::BadSize(text.to_owned())),
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| CacheError::BadSize(text.to_owned()))?;
    if bytes < MIN_CAP_BYTES {
        return Err(CacheError::TooSmall {
            given: text.trim().to_owned(),
        });
    }
    Ok(bytes)
}

/// A size in words (`1.5 GiB`, `300 MiB`, `12 KiB`).
pub fn format_size(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// One cache directory as pruning sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub bytes: u64,
    /// When a runner was last given it (ms since the epoch; 0: never recorded).
    pub last_used_ms: i64,
    /// A live runner has it: never pruned.
    pub in_use: bool,
}

/// Which entries to remove so the total fits `cap`: least recently used first, never one in
/// use. May leave the total above the cap when what is in use alone exceeds it.
pub fn prune_plan(entries: &[Entry], cap: u64) -> Vec<usize> {
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| !entries[i].in_use && entries[i].bytes > 0)
        .collect();
    order.sort_by_key(|&i| (entries[i].last_used_ms, std::cmp::Reverse(entries[i].bytes)));
    let mut out = Vec::new();
    for i in order {
        if total <= cap {
            break;
        }
        total = total.saturating_sub(entries[i].bytes);
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_tool_and_variable_once() {
        let mut ids: Vec<&str> = TOOLS.iter().map(|t| t.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), TOOLS.len());
        let mut vars: Vec<&str> = cache_vars().collect();
        let n = vars.len();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), n, "a variable appears twice");
        assert!(vars.contains(&"CARGO_HOME") && vars.contains(&"RUNNER_TOOL_CACHE"));
        assert!(find_tool("NPM").is_some() && find_tool("rubygems").is_none());
        // cargo's programs stay the job's own.
        let cargo = find_tool("cargo").unwrap();
        assert!(matches!(cargo.layout, Layout::Home { shared, .. } if !shared.contains(&"bin")));
    }

    #[test]
    fn namespaces_default_per_repository_and_round_trip() {
        let repo = Target::parse("Octo/Hello").unwrap();
        let org = Target::parse("octo").unwrap();
        let off = CacheSetting::default();
        let ns = off.effective(&repo).unwrap();
        assert_eq!(ns.rel_dir(), "repo/octo/hello");
        assert_eq!(Namespace::from_rel_dir(&ns.rel_dir()), Some(ns));
        assert_eq!(off.effective(&org), None, "organizations opt in");
        let on = CacheSetting {
            enabled: Some(true),
            namespace: None,
        };
        assert_eq!(on.effective(&org).unwrap().rel_dir(), "org/octo");
        let shared = CacheSetting {
            enabled: None,
            namespace: Some(Namespace::shared("team-a").unwrap()),
        };
        assert_eq!(shared.effective(&repo).unwrap().rel_dir(), "shared/team-a");
        let disabled = CacheSetting {
            enabled: Some(false),
            ..shared
        };
        assert_eq!(disabled.effective(&repo), None);
        for bad in ["", "../x", "A", "-a", &"a".repeat(65), "a/b"] {
            assert!(Namespace::shared(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Namespace::from_rel_dir("repo/x"), None);
    }

    #[test]
    fn sizes_parse_in_binary_units_and_refuse_nonsense() {
        assert_eq!(parse_size("5GiB").unwrap(), 5 << 30);
        assert_eq!(parse_size("20G").unwrap(), 20 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("67108864").unwrap(), 64 << 20);
        assert!(matches!(parse_size("1M"), Err(CacheError::TooSmall { .. })));
        for bad in ["", "G", "5 parsecs", "-1G", "99999999999999999999T"] {
            assert!(
                matches!(parse_size(bad), Err(CacheError::BadSize(_))),
                "{bad}"
            );
        }
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(300 << 20), "300 MiB");
        assert_eq!(format_size(100), "1 KiB");
    }

    #[test]
    fn pruning_removes_least_recently_used_first_and_never_one_in_use() {
        let e = |bytes, last_used_ms, in_use| Entry {
            bytes,
            last_used_ms,
            in_use,
        };
        let entries = [
            e(40, 1, true),
            e(30, 2, false),
            e(20, 3, false),
            e(10, 4, false),
        ];
        // 100 in all; a cap of 60 removes the oldest not in use (30), then 20 → 50.
        assert_eq!(prune_plan(&entries, 60), vec![1, 2]);
        assert_eq!(prune_plan(&entries, 100), Vec::<usize>::new());
        // Everything not in use goes, and the one in use stays even above the cap.
        assert_eq!(prune_plan(&entries, 0), vec![1, 2, 3]);
    }

    #[test]
    fn a_fork_job_makes_the_runner_read_only() {
        assert_eq!(CacheAccess::for_jobs(true), CacheAccess::ReadOnly);
        assert_eq!(CacheAccess::for_jobs(false), CacheAccess::ReadWrite);
    }
}
