//! The caches runners share: the host-wide tool cache (`RUNNER_TOOL_CACHE`, where the
//! `setup-*` actions install toolchains) and each namespace's dependency caches (npm, cargo,
//! Go…, the table in [`rm_core::caches::TOOLS`]), all under `<runner root>/.caches`, on the
//! runtimes' filesystem and out of any scrub's way (a runtime name never starts with '.').
//!
//! Who can touch what, when the service is root and runners get a uid each
//! ([`crate::ResolvedRunAs::Pool`]):
//! - A namespace's directory belongs to a group of its own (a numeric gid from the pool's range,
//!   recorded by the directory's own gid, as per-attempt uids are recorded by runtimes'
//!   owners): the namespace's directory is root's, 0750, so no job can put a link where the
//!   service looks; each tool's directory in it is 2770. A runner allowed to write its target's caches runs with that group as
//!   its primary group and umask 007, so what one job writes the next can read and replace;
//!   other targets' runners, jobs from forks and every other account cannot even list it.
//! - A runner that may take a job from a fork gets private copies instead, dropped with its
//!   runtime: it reads the cache and never writes it.
//! - The tool cache has one writer at a time (the lease): the holder gets the tool cache's
//!   writer group; the others see the finished tools through links from a private directory
//!   and install anything else privately. When the lease is handed on, every finished tool is
//!   sealed (root-owned, read-only to runners, in sticky directories so nobody can swap it),
//!   and a tool without its `.complete` marker — half-written by a job that died — is removed.
//!
//! When the service runs as its own user, every runner runs as that user too: the layout is
//! the same but nothing separates one job from another (README says so).

mod fsutil;
pub mod layers;
mod record;
mod stats;

#[cfg(test)]
mod tests;

use crate::runtime::{Ownership, Runtime};
use rm_core::caches::{
    CacheAccess, CacheSetting, Layout, Namespace, TOOLS, TOOL_CACHE_ID, TOOL_CACHE_VARS,
};
use rm_core::PolicyId;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use fsutil::{dir_size, ensure_dir, DirMode};
use record::Record;

/// The directory under the runner root.
pub const CACHES_DIR: &str = ".caches";

#[derive(Debug, thiserror::Error)]
pub enum CachesError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "all {count} cache group ids from {first} are in use; clear unused caches with \
         `runner-manager cache clear`"
    )]
    NoFreeGid { first: u32, count: u32 },
    #[error("copying the cache into {path}: {detail}")]
    Copy { path: PathBuf, detail: String },
}

pub(crate) fn io_at(path: &Path) -> impl FnOnce(io::Error) -> CachesError + '_ {
    move |source| CachesError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Who owns cache directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOwners {
    /// Runners run as the service's own user (or one fixed account, `runner`): directories
    /// belong to it, 0700.
    Single { runner: Option<Ownership> },
    /// Runners get a uid each and share `runner_gid`; namespaces get a gid each from
    /// `first_gid + 1 ..= first_gid + count - 1`, and `first_gid` is the tool cache's writers'.
    Groups {
        runner_gid: u32,
        first_gid: u32,
        count: u32,
    },
}

/// Process groups a runner runs with (with [`CacheOwners::Groups`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerGroups {
    pub primary: u32,
    pub supplementary: Vec<u32>,
}

/// What one runner gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePlan {
    /// `None`: its target's dependency caches are off.
    pub namespace: Option<Namespace>,
    pub access: CacheAccess,
    /// The tool cache (off only if the operator turned it off).
    pub tool_cache: bool,
    /// Whose tool cache it shares: its repository's (or the namespace its target's caches
    /// are shared under). `None`: one of its own, shared with no one (an organization's
    /// runner, whose job may come from any of its repositories).
    pub tool_namespace: Option<Namespace>,
}

/// What a runner is started with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PreparedCaches {
    pub env: Vec<(String, String)>,
    /// `None`: the runtime owner's group alone (as before caches).
    pub groups: Option<RunnerGroups>,
    /// The shared directories outside the runtime it was pointed at (the tool cache, its
    /// namespace's directory): the only ones of the caches its sandbox shows it.
    pub shared: Vec<PathBuf>,
}

/// Settings the daemon changes at run time (shared: clones see one set).
#[derive(Debug, Clone)]
pub struct CacheSettings(Arc<RwLock<CacheSettingsInner>>);

#[derive(Debug)]
struct CacheSettingsInner {
    cap_bytes: u64,
    tool_cache: bool,
    by_policy: HashMap<PolicyId, CacheSetting>,
    /// The caches, once the runner host has set them up.
    caches: Option<Arc<Caches>>,
    /// The persistent workspaces, likewise (reset from the API, used by the host).
    workspaces: Option<Arc<crate::workspaces::Workspaces>>,
    /// Setting up the caches, or a workspace, for a runner: consecutive failures.
    caches_streak: Streak,
    workspace_streak: Streak,
}

/// Consecutive failures of one kind of setup, and the newest one's words.
#[derive(Debug, Default, Clone)]
struct Streak {
    failures: u32,
    last: String,
}

/// Runners kept starting without what they should have had: a visible problem once it
/// repeats (a runner still runs without them: slower, not wrong).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupProblem {
    /// `caches` or `workspace`.
    pub what: &'static str,
    pub failures: u32,
    pub detail: String,
}

/// Failures in a row before a setup problem is shown (one can be a passing hiccup).
pub const SETUP_PROBLEM_AFTER: u32 = 2;

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings(Arc::new(RwLock::new(CacheSettingsInner {
            cap_bytes: rm_core::caches::DEFAULT_CAP_BYTES,
            tool_cache: true,
            by_policy: HashMap::new(),
            caches: None,
            workspaces: None,
            caches_streak: Streak::default(),
            workspace_streak: Streak::default(),
        })))
    }
}

fn note(streak: &mut Streak, result: Result<(), String>) {
    match result {
        Ok(()) => *streak = Streak::default(),
        Err(e) => {
            streak.failures = streak.failures.saturating_add(1);
            streak.last = e;
        }
    }
}

impl CacheSettings {
    /// The caches, once a runner host set them up (none before the first target).
    pub fn caches(&self) -> Option<Arc<Caches>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .caches
            .clone()
    }
    pub(crate) fn set_caches(&self, caches: Arc<Caches>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .caches = Some(caches);
    }
    /// Records how setting up a runner's caches went.
    pub(crate) fn note_caches_setup(&self, result: Result<(), String>) {
        let mut inner = self.0.write().unwrap_or_else(PoisonError::into_inner);
        note(&mut inner.caches_streak, result);
    }
    /// Records how claiming a runner's persistent workspace went.
    pub(crate) fn note_workspace_setup(&self, result: Result<(), String>) {
        let mut inner = self.0.write().unwrap_or_else(PoisonError::into_inner);
        note(&mut inner.workspace_streak, result);
    }
    /// Runners keep starting without their caches or workspace.
    pub fn setup_problem(&self) -> Option<SetupProblem> {
        let inner = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let pick = |what: &'static str, s: &Streak| {
            (s.failures >= SETUP_PROBLEM_AFTER).then(|| SetupProblem {
                what,
                failures: s.failures,
                detail: s.last.clone(),
            })
        };
        pick("caches", &inner.caches_streak).or_else(|| pick("workspace", &inner.workspace_streak))
    }
    /// The persistent workspaces, once a runner host set them up.
    pub fn workspaces(&self) -> Option<Arc<crate::workspaces::Workspaces>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .workspaces
            .clone()
    }
    pub(crate) fn set_workspaces(&self, workspaces: Arc<crate::workspaces::Workspaces>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .workspaces = Some(workspaces);
    }
    /// What a policy's target sets (the default when nothing).
    pub fn for_policy(&self, policy: PolicyId) -> CacheSetting {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_policy
            .get(&policy)
            .cloned()
            .unwrap_or_default()
    }
    /// Sets one policy's settings (the default removes them).
    pub fn set_policy(&self, policy: PolicyId, setting: CacheSetting) {
        let mut inner = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if setting == CacheSetting::default() {
            inner.by_policy.remove(&policy);
        } else {
            inner.by_policy.insert(policy, setting);
        }
    }
    /// Replaces every policy's settings.
    pub fn set_policies(&self, settings: impl IntoIterator<Item = (PolicyId, CacheSetting)>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .by_policy = settings.into_iter().collect();
    }
    pub fn cap_bytes(&self) -> u64 {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cap_bytes
    }
    pub fn set_cap_bytes(&self, bytes: u64) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .cap_bytes = bytes;
    }
    pub fn tool_cache(&self) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .tool_cache
    }
    pub fn set_tool_cache(&self, on: bool) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .tool_cache = on;
    }
}

/// One cache directory, as `cache show` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    /// `None`: not made any more (older versions' host-wide tool cache); every cache,
    /// tool caches included, belongs to a namespace.
    pub namespace: Option<Namespace>,
    /// A tool id of [`TOOLS`], or [`TOOL_CACHE_ID`] with the tool's own name after a '/'
    /// (`tool-cache/node`).
    pub tool: String,
    pub bytes: u64,
    /// Jobs that found it non-empty.
    pub hits: u64,
    pub last_used_ms: i64,
    pub in_use: bool,
    pub path: PathBuf,
}

/// What `clear` or `prune` did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removal {
    pub removed: Vec<EntryInfo>,
    /// Matching entries a live runner has: left alone.
    pub in_use: Vec<EntryInfo>,
}

/// Which entries `clear` removes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClearFilter {
    /// Only this namespace's (its tool cache included).
    pub namespace: Option<Namespace>,
    /// Only this tool's ([`TOOL_CACHE_ID`]: the tool cache's finished tools).
    pub tool: Option<String>,
}

/// The caches of one runner root.
#[derive(Debug)]
pub struct Caches {
    root: PathBuf,
    ids: PathBuf,
    runner_root: PathBuf,
    owners: CacheOwners,
    /// `linux-x64`: tools are per OS and architecture.
    platform: String,
    /// One change at a time: leases, gid allocation, the stats file.
    lock: Mutex<()>,
    /// Sizes of dependency caches measured since a runner last wrote them. Only a runner of
    /// the namespace that shared the cache (its record says so) writes it, so the size holds
    /// until such a runner is released; the prune after every runner's end then walks only
    /// what that runner wrote, not every cache on the machine. In memory: a restart measures
    /// again.
    sizes: Mutex<HashMap<PathBuf, u64>>,
}

/// Whether [`Caches::entries_locked`] may use remembered sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sizes {
    /// Walk every tree (what a person asked to see or remove is shown as it is now).
    Measured,
    /// Walk only trees written since they were last measured (the prune between jobs).
    Remembered,
}

/// The tool caches, per platform and namespace, under the caches' root.
const TOOLS_DIR: &str = "tools-by-namespace";
/// Where older versions kept one tool cache for the whole host.
const LEGACY_TOOLS_DIR: &str = "tools";

/// The private directory a runner's caches live in when not shared.
const PRIVATE_DIR: &str = "_cache";
/// The runner's own tool cache when it does not hold the lease (the runner's default place).
const PRIVATE_TOOLS: &str = "_tool";

impl Caches {
    /// The caches under `runner_root` (the runtimes' parent), made if missing; `platform`
    /// names the tool cache (`linux-x64`).
    pub fn open(
        runner_root: &Path,
        owners: CacheOwners,
        platform: &str,
    ) -> Result<Caches, CachesError> {
        let root = runner_root.join(CACHES_DIR);
        let caches = Caches {
            ids: runner_root.join(".ids"),
            runner_root: runner_root.to_path_buf(),
            root,
            owners,
            platform: platform.to_owned(),
            lock: Mutex::new(()),
            sizes: Mutex::new(HashMap::new()),
        };
        caches.ensure_layout()?;
        Ok(caches)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The tool caches of this host's platform, one per namespace below it.
    fn tools_root(&self) -> PathBuf {
        self.root.join(TOOLS_DIR).join(&self.platform)
    }

    /// The tool cache `namespace`'s runners share: nothing one repository's job installs is
    /// found by another repository's.
    pub fn tool_cache_dir(&self, namespace: &Namespace) -> PathBuf {
        self.tools_root().join(namespace.rel_dir())
    }

    /// Every namespace's tool cache on disk.
    fn tool_cache_dirs(&self) -> Result<Vec<(Namespace, PathBuf)>, CachesError> {
        let root = self.tools_root();
        let mut out = Vec::new();
        for (kind, depth) in [("repo", 2), ("org", 1), ("shared", 1)] {
            for path in fsutil::dirs_at_depth(&root.join(kind), depth)? {
                let Ok(rel) = path.strip_prefix(&root) else {
                    continue;
                };
                if let Some(ns) = Namespace::from_rel_dir(&rel.to_string_lossy()) {
                    out.push((ns, path));
                }
            }
        }
        Ok(out)
    }

    /// Makes `namespace`'s tool cache (its parents pass-through only).
    fn ensure_tool_cache(&self, namespace: &Namespace) -> Result<PathBuf, CachesError> {
        let dir = self.tool_cache_dir(namespace);
        let root = self.tools_root();
        let mut parent = root.clone();
        if let Ok(rel) = dir.strip_prefix(&root) {
            let parts: Vec<_> = rel.components().collect();
            for part in &parts[..parts.len().saturating_sub(1)] {
                parent = parent.join(part);
                ensure_dir(&parent, self.dir_mode_traverse())?;
            }
        }
        ensure_dir(&dir, self.tool_parent_mode())?;
        Ok(dir)
    }

    fn deps_dir(&self) -> PathBuf {
        self.root.join("deps")
    }

    fn ensure_layout(&self) -> Result<(), CachesError> {
        let inner = self.dir_mode_private();
        ensure_dir(&self.root, self.dir_mode_traverse())?;
        ensure_dir(&self.deps_dir(), self.dir_mode_traverse())?;
        // The host-wide tool cache of older versions: any repository's job could have planted
        // a tool there for every other's. Not trusted, so not kept.
        let legacy = self.root.join(LEGACY_TOOLS_DIR);
        if legacy.exists() {
            tracing::info!(dir = %legacy.display(), "removing the host-wide tool cache of an older version (tool caches are per repository now)");
            fsutil::remove_any(&legacy)?;
        }
        ensure_dir(&self.root.join(TOOLS_DIR), self.dir_mode_traverse())?;
        ensure_dir(&self.tools_root(), self.dir_mode_traverse())?;
        ensure_dir(&self.ids, inner)?;
        Ok(())
    }

    /// Runners may pass through, nobody else.
    fn dir_mode_traverse(&self) -> DirMode {
        match self.owners {
            CacheOwners::Single { runner } => DirMode::owned(runner, 0o700),
            // Pass through only: no runner lists which targets have caches.
            CacheOwners::Groups { runner_gid, .. } => DirMode::root_group(runner_gid, 0o710),
        }
    }

    fn dir_mode_private(&self) -> DirMode {
        DirMode::owned(None, 0o700)
    }

    /// The tool cache's directories above a finished tool: its writer may add, nobody may
    /// remove or rename what is not theirs (sticky), runners may read.
    fn tool_parent_mode(&self) -> DirMode {
        match self.owners {
            CacheOwners::Single { runner } => DirMode::owned(runner, 0o700),
            // Other runners are "other" here; `.caches` (0710, the runners' group) keeps
            // everyone else out.
            CacheOwners::Groups { first_gid, .. } => DirMode::root_group(first_gid, 0o3775),
        }
    }

    /// Sets up `runtime`'s caches for `plan` and records what it holds (in the service-only
    /// `.ids/<name>.caches`).
    pub fn prepare(
        &self,
        runtime: &Runtime,
        plan: &CachePlan,
    ) -> Result<PreparedCaches, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let live = self.live_records()?;
        let runner = runtime.owner;
        let mut record = Record::default();
        let mut env = Vec::new();
        let mut supplementary = BTreeSet::new();
        let mut primary = None;
        let mut shared_dirs = Vec::new();
        let private = runtime.path.join(PRIVATE_DIR);
        ensure_dir(&private, DirMode::owned(runner, 0o700))?;

        // The tool cache: its namespace's, or one of its own.
        if plan.tool_cache {
            let own = || -> Result<PathBuf, CachesError> {
                let own = runtime.path.join(PRIVATE_TOOLS);
                ensure_dir(&own, DirMode::owned(runner, 0o700))?;
                Ok(own)
            };
            let dir = match &plan.tool_namespace {
                None => own()?,
                Some(ns) => {
                    let shared = self.ensure_tool_cache(ns)?;
                    // A reader's links point into it too.
                    shared_dirs.push(shared.clone());
                    let rel = ns.rel_dir();
                    let lease_free = !live
                        .iter()
                        .any(|r| r.tool_lease.as_deref() == Some(rel.as_str()));
                    if plan.access == CacheAccess::ReadWrite && lease_free {
                        self.seal_tools(ns)?;
                        record.tool_lease = Some(rel);
                        if let CacheOwners::Groups { first_gid, .. } = self.owners {
                            supplementary.insert(first_gid);
                        }
                        shared
                    } else {
                        let own = own()?;
                        self.link_finished_tools(ns, &own, runner)?;
                        own
                    }
                }
            };
            for var in TOOL_CACHE_VARS {
                env.push(((*var).to_owned(), dir.display().to_string()));
            }
        }

        // The dependency caches.
        if let Some(ns) = &plan.namespace {
            let ns_dir = self.deps_dir().join(ns.rel_dir());
            let writable = plan.access == CacheAccess::ReadWrite;
            let ns_gid = self.ensure_namespace(&ns_dir)?;
            if writable {
                // A reader works on private copies inside its runtime.
                shared_dirs.push(ns_dir.clone());
            }
            if writable {
                primary = ns_gid;
            }
            record.namespace = Some(ns.rel_dir());
            let mut stats = stats::Stats::load(&self.root);
            let now = now_ms();
            for tool in TOOLS {
                let shared = ns_dir.join(tool.id);
                let found = fsutil::non_empty(&shared);
                let leased_elsewhere = live.iter().any(|r| {
                    r.namespace.as_deref() == Some(&ns.rel_dir()) && r.leases.contains(tool.id)
                });
                let dir = if writable && (tool.concurrent_writers || !leased_elsewhere) {
                    if ensure_dir(&shared, self.ns_tool_mode(ns_gid))? {
                        // Made now, before any job could reach it: its layout's directories
                        // too (later, a job may have replaced one with anything).
                        for sub in tool_subdirs(tool) {
                            ensure_dir(&shared.join(sub), self.ns_tool_mode(ns_gid))?;
                        }
                    }
                    if !tool.concurrent_writers {
                        record.leases.insert(tool.id.to_owned());
                    }
                    record.shared.insert(tool.id.to_owned());
                    shared
                } else {
                    let own = private.join(tool.id);
                    ensure_dir(&own, DirMode::owned(runner, 0o700))?;
                    if !writable && found {
                        // Read, never write: a copy of its own, dropped with the runtime.
                        self.copy_into(&shared, &own, runner, ns_gid)?;
                    }
                    own
                };
                if found {
                    stats.hit(&ns.rel_dir(), tool.id, now);
                } else {
                    stats.used(&ns.rel_dir(), tool.id, now);
                }
                self.point_tool(tool, &dir, runtime, &private, &mut env)?;
            }
            if let Err(e) = stats.save(&self.root) {
                tracing::warn!(error = %e, "cache statistics not saved");
            }
        }
        self.write_record(runtime, &record)?;
        let groups = match self.owners {
            CacheOwners::Groups { runner_gid, .. } if runner.is_some() => {
                let primary = primary.unwrap_or(runner_gid);
                supplementary.insert(runner_gid);
                supplementary.remove(&primary);
                Some(RunnerGroups {
                    primary,
                    supplementary: supplementary.into_iter().collect(),
                })
            }
            _ => None,
        };
        Ok(PreparedCaches {
            env,
            groups,
            shared: shared_dirs,
        })
    }

    /// Sets the tool's variables to `dir` (and links where the tool has no variable).
    fn point_tool(
        &self,
        tool: &rm_core::caches::CacheTool,
        dir: &Path,
        runtime: &Runtime,
        private: &Path,
        env: &mut Vec<(String, String)>,
    ) -> Result<(), CachesError> {
        let runner = runtime.owner;
        let own = DirMode::owned(runner, 0o700);
        match tool.layout {
            Layout::Vars(vars) => {
                for (var, sub) in vars {
                    let path = if sub.is_empty() {
                        dir.to_path_buf()
                    } else {
                        dir.join(sub)
                    };
                    // A missing one is the tool's to create (never the service's, in a
                    // directory jobs write).
                    env.push(((*var).to_owned(), path.display().to_string()));
                }
            }
            Layout::Home { var, shared } => {
                let home = private.join(format!("{}-home", tool.id));
                ensure_dir(&home, own)?;
                for sub in shared {
                    let target = dir.join(sub);
                    // A link to a directory that is gone would break the tool: then it
                    // keeps this one in its own directory.
                    if fsutil::is_real_dir(&target) {
                        fsutil::symlink(&target, &home.join(sub), runner)?;
                    }
                }
                env.push((var.to_owned(), home.display().to_string()));
            }
            Layout::UnderHome(rel) => {
                let home = runtime.path.join(crate::process::HOME_DIR);
                ensure_dir(&home, own)?;
                let link = home.join(rel);
                let mut parent = home.clone();
                if let Some(parents) = Path::new(rel).parent() {
                    for part in parents.components() {
                        parent = parent.join(part);
                        ensure_dir(&parent, own)?;
                    }
                }
                fsutil::symlink(dir, &link, runner)?;
            }
        }
        for var in tool.private_vars {
            let path = private.join(format!("{}-{}", tool.id, var.to_ascii_lowercase()));
            ensure_dir(&path, own)?;
            env.push(((*var).to_owned(), path.display().to_string()));
        }
        Ok(())
    }

    fn ns_tool_mode(&self, ns_gid: Option<u32>) -> DirMode {
        match (self.owners, ns_gid) {
            (CacheOwners::Groups { .. }, Some(gid)) => DirMode::root_group(gid, 0o2770),
            (CacheOwners::Single { runner }, _) => DirMode::owned(runner, 0o700),
            (CacheOwners::Groups { runner_gid, .. }, None) => {
                DirMode::root_group(runner_gid, 0o2770)
            }
        }
    }

    /// Creates the namespace's directory (and its parents) and answers its group.
    fn ensure_namespace(&self, ns_dir: &Path) -> Result<Option<u32>, CachesError> {
        let deps = self.deps_dir();
        let mut parent = deps.clone();
        if let Ok(rel) = ns_dir.strip_prefix(&deps) {
            let parts: Vec<_> = rel.components().collect();
            for part in &parts[..parts.len().saturating_sub(1)] {
                parent = parent.join(part);
                ensure_dir(&parent, self.dir_mode_traverse())?;
            }
        }
        match self.owners {
            CacheOwners::Single { runner } => {
                ensure_dir(ns_dir, DirMode::owned(runner, 0o700))?;
                Ok(None)
            }
            CacheOwners::Groups {
                first_gid, count, ..
            } => {
                if let Some(gid) = fsutil::gid_of(ns_dir)? {
                    return Ok(Some(gid));
                }
                // Not writable by its group: jobs write inside the tools' directories only,
                // so none can put a link where the service will look.
                let used = self.namespace_gids()?;
                let gid = (1..count.max(2))
                    .filter_map(|i| first_gid.checked_add(i))
                    .find(|g| !used.contains(g))
                    .ok_or(CachesError::NoFreeGid {
                        first: first_gid,
                        count,
                    })?;
                ensure_dir(ns_dir, DirMode::root_group(gid, 0o750))?;
                Ok(Some(gid))
            }
        }
    }

    fn namespace_gids(&self) -> Result<BTreeSet<u32>, CachesError> {
        Ok(self
            .namespace_dirs()?
            .into_iter()
            .filter_map(|(_, p)| fsutil::gid_of(&p).ok().flatten())
            .collect())
    }

    /// Every namespace directory on disk.
    fn namespace_dirs(&self) -> Result<Vec<(Namespace, PathBuf)>, CachesError> {
        let mut out = Vec::new();
        let deps = self.deps_dir();
        for (kind, depth) in [("repo", 2), ("org", 1), ("shared", 1)] {
            let base = deps.join(kind);
            for path in fsutil::dirs_at_depth(&base, depth)? {
                let Ok(rel) = path.strip_prefix(&deps) else {
                    continue;
                };
                if let Some(ns) = Namespace::from_rel_dir(&rel.to_string_lossy()) {
                    out.push((ns, path));
                }
            }
        }
        Ok(out)
    }

    /// Copies a shared cache into a runner's own directory. The copy runs as the runner (with
    /// the namespace's group to read it), never as root: jobs write the shared tree, and a
    /// root copy could be led by a link swapped in mid-walk to files no runner may read.
    fn copy_into(
        &self,
        from: &Path,
        to: &Path,
        runner: Option<Ownership>,
        ns_gid: Option<u32>,
    ) -> Result<(), CachesError> {
        let mut cmd = std::process::Command::new("cp");
        cmd.args([
            "-R",
            "--no-dereference",
            "--preserve=mode,timestamps,links",
            "--reflink=auto",
            "-T",
            "--",
        ])
        .arg(from)
        .arg(to)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
        if let Some(o) = runner {
            // The namespace's group to read the cache, the runners' to pass through `.caches`.
            let groups = RunnerGroups {
                primary: ns_gid.unwrap_or(o.gid),
                supplementary: vec![o.gid],
            };
            crate::process::drop_to(&mut cmd, o.uid, groups);
        }
        let out = cmd.output().map_err(|e| CachesError::Copy {
            path: to.to_path_buf(),
            detail: format!("cp could not start: {e}"),
        })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(CachesError::Copy {
                path: to.to_path_buf(),
                detail: err.lines().take(3).collect::<Vec<_>>().join("; "),
            });
        }
        Ok(())
    }

    /// Links every finished (and, with per-runner uids, sealed) tool into a runner's own
    /// tool cache: `<tool>/<version>/<arch>` and its `.complete` marker.
    fn link_finished_tools(
        &self,
        ns: &Namespace,
        own: &Path,
        runner: Option<Ownership>,
    ) -> Result<(), CachesError> {
        for (tool, version, arch) in self.finished_tools(ns)? {
            let src = self.tool_cache_dir(ns).join(&tool).join(&version);
            let sealed_only = matches!(self.owners, CacheOwners::Groups { .. });
            if sealed_only && !fsutil::is_root_owned_dir(&src.join(&arch)) {
                continue;
            }
            let dst = own.join(&tool).join(&version);
            ensure_dir(&own.join(&tool), DirMode::owned(runner, 0o700))?;
            ensure_dir(&dst, DirMode::owned(runner, 0o700))?;
            fsutil::symlink(&src.join(&arch), &dst.join(&arch), runner)?;
            let marker = format!("{arch}.complete");
            fsutil::symlink(&src.join(&marker), &dst.join(&marker), runner)?;
        }
        Ok(())
    }

    /// `(tool, version, arch)` of every tool with its `.complete` marker.
    fn finished_tools(&self, ns: &Namespace) -> Result<Vec<(String, String, String)>, CachesError> {
        let mut out = Vec::new();
        let tc = self.tool_cache_dir(ns);
        for tool in fsutil::child_names(&tc)? {
            for version in fsutil::child_names(&tc.join(&tool))? {
                let vdir = tc.join(&tool).join(&version);
                for name in fsutil::child_names(&vdir)? {
                    if let Some(arch) = name.strip_suffix(".complete") {
                        if vdir.join(arch).is_dir() {
                            out.push((tool.clone(), version.clone(), arch.to_owned()));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Called with no lease holder alive: seals every finished tool and removes what a
    /// writer left half-done.
    fn seal_tools(&self, ns: &Namespace) -> Result<(), CachesError> {
        let tc = self.tool_cache_dir(ns);
        let parent_mode = self.tool_parent_mode();
        for tool in fsutil::child_names(&tc)? {
            let tdir = tc.join(&tool);
            if !fsutil::is_real_dir(&tdir) {
                fsutil::remove_any(&tdir)?;
                continue;
            }
            ensure_dir(&tdir, parent_mode)?;
            for version in fsutil::child_names(&tdir)? {
                let vdir = tdir.join(&version);
                if !fsutil::is_real_dir(&vdir) {
                    fsutil::remove_any(&vdir)?;
                    continue;
                }
                ensure_dir(&vdir, parent_mode)?;
                let names = fsutil::child_names(&vdir)?;
                for name in &names {
                    let path = vdir.join(name);
                    if let Some(arch) = name.strip_suffix(".complete") {
                        if !vdir.join(arch).is_dir() {
                            fsutil::remove_any(&path)?;
                        } else {
                            self.seal(&path)?;
                        }
                    } else if names.contains(&format!("{name}.complete"))
                        && fsutil::is_real_dir(&path)
                    {
                        self.seal(&path)?;
                    } else {
                        tracing::info!(tool = %path.display(), "removing a tool left unfinished in the tool cache");
                        fsutil::remove_any(&path)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn seal(&self, path: &Path) -> Result<(), CachesError> {
        let owner = match self.owners {
            CacheOwners::Groups { runner_gid, .. } => Some(Ownership {
                uid: 0,
                gid: runner_gid,
            }),
            CacheOwners::Single { .. } => None,
        };
        fsutil::seal_tree(path, owner)
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.ids.join(format!("{name}.caches"))
    }

    fn write_record(&self, runtime: &Runtime, record: &Record) -> Result<(), CachesError> {
        let path = self.record_path(runtime.name.as_str());
        record::write(&path, record)
    }

    /// The records of runtimes that still exist (their runners may be alive).
    fn live_records(&self) -> Result<Vec<Record>, CachesError> {
        let mut out = Vec::new();
        for name in fsutil::child_names(&self.ids)? {
            let Some(runtime) = name.strip_suffix(".caches") else {
                continue;
            };
            if !self.runner_root.join(runtime).exists() {
                continue;
            }
            if let Some(r) = record::read(&self.ids.join(&name)) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Called when the runtime is gone: its leases end; a tool cache lease hands the tool
    /// cache over sealed.
    pub fn release(&self, runtime_name: &str) -> Result<(), CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.record_path(runtime_name);
        let record = record::read(&path);
        fsutil::remove_any(&path)?;
        if let Some(ns) = record.as_ref().and_then(|r| r.namespace.as_deref()) {
            let ns_dir = self.deps_dir().join(ns);
            let mut sizes = self.sizes.lock().unwrap_or_else(PoisonError::into_inner);
            for tool in record.iter().flat_map(|r| &r.shared) {
                sizes.remove(&ns_dir.join(tool));
            }
        }
        if let Some(rel) = record.and_then(|r| r.tool_lease) {
            let still_held = self
                .live_records()?
                .iter()
                .any(|r| r.tool_lease.as_deref() == Some(rel.as_str()));
            if let (false, Some(ns)) = (still_held, Namespace::from_rel_dir(&rel)) {
                self.seal_tools(&ns)?;
            }
        }
        Ok(())
    }

    /// Every cache directory with its size (walks the trees: call off the async threads).
    pub fn entries(&self) -> Result<Vec<EntryInfo>, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.entries_locked(|_| true, true, Sizes::Measured)
    }

    /// The caches of the namespaces `namespaces` picks, and the tool cache's tools when
    /// `tool_cache`: only those trees are walked for their size (the tool cache is often the
    /// largest, and a prune or purge never removes from it).
    fn entries_locked(
        &self,
        namespaces: impl Fn(&Namespace) -> bool,
        tool_cache: bool,
        sizes: Sizes,
    ) -> Result<Vec<EntryInfo>, CachesError> {
        let live = self.live_records()?;
        let mut known = self.sizes.lock().unwrap_or_else(PoisonError::into_inner);
        let stats = stats::Stats::load(&self.root);
        let mut out = Vec::new();
        for (ns, dir) in self.namespace_dirs()? {
            if !namespaces(&ns) {
                continue;
            }
            let rel = ns.rel_dir();
            for tool in fsutil::child_names(&dir)? {
                let path = dir.join(&tool);
                let (hits, last_used_ms) = stats.get(&rel, &tool);
                out.push(EntryInfo {
                    in_use: live.iter().any(|r| {
                        r.namespace.as_deref() == Some(rel.as_str()) && r.shared.contains(&tool)
                    }),
                    bytes: match (sizes, known.get(&path)) {
                        (Sizes::Remembered, Some(bytes)) => *bytes,
                        _ => {
                            let bytes = dir_size(&path);
                            known.insert(path.clone(), bytes);
                            bytes
                        }
                    },
                    namespace: Some(ns.clone()),
                    tool,
                    hits,
                    last_used_ms,
                    path,
                });
            }
        }
        if !tool_cache {
            return Ok(out);
        }
        for (ns, dir) in self.tool_cache_dirs()? {
            if !namespaces(&ns) {
                continue;
            }
            let rel = ns.rel_dir();
            // A running job of the namespace may have any of its tools on its PATH.
            let in_use = live.iter().any(|r| {
                r.tool_lease.as_deref() == Some(rel.as_str())
                    || r.namespace.as_deref() == Some(rel.as_str())
            });
            for tool in fsutil::child_names(&dir)? {
                let path = dir.join(&tool);
                out.push(EntryInfo {
                    namespace: Some(ns.clone()),
                    tool: format!("{TOOL_CACHE_ID}/{tool}"),
                    bytes: dir_size(&path),
                    hits: 0,
                    last_used_ms: fsutil::mtime_ms(&path),
                    in_use,
                    path,
                });
            }
        }
        Ok(out)
    }

    /// Removes dependency caches, least recently used first, until they fit `cap` bytes;
    /// never one a live runner has. The tool cache is not pruned (it holds one copy per tool
    /// version; `cache clear --tool tool-cache` empties it).
    pub fn prune(&self, cap: u64) -> Result<Removal, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let entries: Vec<EntryInfo> = self.entries_locked(|_| true, false, Sizes::Remembered)?;
        let plan: Vec<rm_core::caches::Entry> = entries
            .iter()
            .map(|e| rm_core::caches::Entry {
                bytes: e.bytes,
                last_used_ms: e.last_used_ms,
                in_use: e.in_use,
            })
            .collect();
        let mut out = Removal::default();
        for i in rm_core::caches::prune_plan(&plan, cap) {
            let e = entries[i].clone();
            self.remove_entry(&e.path)?;
            tracing::info!(cache = %e.path.display(), bytes = e.bytes, "pruned a cache (least recently used)");
            out.removed.push(e);
        }
        if !out.removed.is_empty() {
            let mut stats = stats::Stats::load(&self.root);
            for e in &out.removed {
                if let Some(ns) = &e.namespace {
                    stats.forget(&ns.rel_dir(), &e.tool);
                }
            }
            if let Err(e) = stats.save(&self.root) {
                tracing::warn!(error = %e, "cache statistics not saved");
            }
        }
        Ok(out)
    }

    /// Removes a cache and forgets its size.
    fn remove_entry(&self, path: &Path) -> Result<(), CachesError> {
        self.sizes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
        fsutil::remove_any(path)
    }

    /// Whether anything in the shared caches `runtime` could write changed since its caches
    /// were prepared (its record was written then): an entry's status-change time (`ctime`),
    /// which the kernel sets on every write, rename, link or mode change and no job can set
    /// back. True when it cannot be told (no record time, an unreadable tree): a change is
    /// what costs a verdict, so doubt counts as one. Another runner's writes at the same time
    /// count too.
    pub fn changed_since_prepare(&self, runtime: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        let path = self.record_path(runtime);
        let Some(record) = record::read(&path) else {
            return false;
        };
        let Ok(since) = std::fs::symlink_metadata(&path).map(|m| (m.mtime(), m.mtime_nsec()))
        else {
            return true;
        };
        let mut roots = Vec::new();
        if let Some(ns) = record.namespace.as_deref() {
            let ns_dir = self.deps_dir().join(ns);
            roots.extend(record.shared.iter().map(|tool| ns_dir.join(tool)));
        }
        if let Some(ns) = record
            .tool_lease
            .as_deref()
            .and_then(Namespace::from_rel_dir)
        {
            roots.push(self.tool_cache_dir(&ns));
        }
        roots
            .iter()
            .any(|root| fsutil::changed_since(root, since).unwrap_or(true))
    }

    /// The namespaces `runtime` could write, as its record says: its dependency caches when
    /// they were shared with it, the tool cache whose lease it held. Read before
    /// [`Caches::release`] removes the record.
    pub fn written_by(&self, runtime: &str) -> Vec<Namespace> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(r) = record::read(&self.record_path(runtime)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if !r.shared.is_empty() {
            out.extend(r.namespace.as_deref().and_then(Namespace::from_rel_dir));
        }
        if let Some(ns) = r.tool_lease.as_deref().and_then(Namespace::from_rel_dir) {
            if !out.contains(&ns) {
                out.push(ns);
            }
        }
        out
    }

    /// Removes every cache of `namespace`, in use or not: what is in it can no longer be
    /// trusted (a fork's job wrote there). A job using it meanwhile may fail; that is the
    /// lesser harm.
    pub fn purge(&self, namespace: &Namespace) -> Result<Removal, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Removal::default();
        // Its tool cache too: the writer whose job was a fork's may have held its lease.
        for e in self.entries_locked(|ns| ns == namespace, true, Sizes::Remembered)? {
            self.remove_entry(&e.path)?;
            out.removed.push(e);
        }
        let mut stats = stats::Stats::load(&self.root);
        for e in &out.removed {
            stats.forget(&namespace.rel_dir(), &e.tool);
        }
        if let Err(e) = stats.save(&self.root) {
            tracing::warn!(error = %e, "cache statistics not saved");
        }
        Ok(out)
    }

    /// Removes the caches `filter` names that no live runner has.
    pub fn clear(&self, filter: &ClearFilter) -> Result<Removal, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Removal::default();
        let wants_tool_cache = filter.tool.as_deref().is_none_or(|t| t == TOOL_CACHE_ID);
        let namespaces = |ns: &Namespace| filter.namespace.as_ref().is_none_or(|f| f == ns);
        for e in self.entries_locked(namespaces, wants_tool_cache, Sizes::Measured)? {
            let is_tool_cache = e.tool.starts_with(&format!("{TOOL_CACHE_ID}/"));
            let matches = if is_tool_cache {
                wants_tool_cache
            } else {
                filter.tool.as_deref().is_none_or(|t| t == e.tool)
            };
            if !matches {
                continue;
            }
            if e.in_use {
                out.in_use.push(e);
                continue;
            }
            self.remove_entry(&e.path)?;
            out.removed.push(e);
        }
        let mut stats = stats::Stats::load(&self.root);
        for e in &out.removed {
            if let Some(ns) = &e.namespace {
                stats.forget(&ns.rel_dir(), &e.tool);
            }
        }
        if let Err(e) = stats.save(&self.root) {
            tracing::warn!(error = %e, "cache statistics not saved");
        }
        Ok(out)
    }
}

/// The directories a tool's layout names inside its cache.
fn tool_subdirs(tool: &rm_core::caches::CacheTool) -> Vec<&'static str> {
    match tool.layout {
        Layout::Vars(vars) => vars
            .iter()
            .map(|(_, s)| *s)
            .filter(|s| !s.is_empty())
            .collect(),
        Layout::Home { shared, .. } => shared.to_vec(),
        Layout::UnderHome(_) => Vec::new(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
