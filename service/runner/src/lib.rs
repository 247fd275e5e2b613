//! The runner host: everything the service does on this machine for one ephemeral runner,
//! below the lifecycle decisions the agent makes.
//!
//! - [`package`]: a verified, versioned cache of runner packages (download once, check sha256
//!   before extracting, install by atomic rename, keep current + previous).
//! - [`runtime`] and [`materialize`]: one short, private directory per attempt, filled from the
//!   cache by reflink where the filesystem can, else by a parallel copy.
//! - [`account`]: who runners run as (never root when the service is root).
//! - [`process`]: spawn the listener with the JIT config only in its environment, identify it by
//!   pid + start time, inspect and stop its whole process group.
//! - [`meter`]: resident memory and CPU of an attempt's whole process tree, descendants that
//!   were re-parented away included.
//! - [`evidence`]: what the runner's own diagnostics say happened.
//! - [`scrub`]: remove a runtime without following links out of it, with a retry schedule.
//! - [`doctor`]: the host fitness checks (`runner-manager host doctor`).
//! - [`runner_env`]: the host's runner environment, read at each spawn.
//! - [`caches`]: the tool cache and the dependency caches runners share, who may write them.
//! - [`workspaces`]: persistent workspaces, a slot per concurrent runner kept between jobs.
//! - [`sandbox`]: the walls every runner starts inside (bubblewrap and pasta) and the
//!   doctor's check that they can be built.
//! - [`uid_claims`]: which per-attempt uids this service holds on the machine.
//! - [`host`]: all of the above behind one handle, in the order a launch uses them.

pub mod account;
pub mod caches;
pub mod doctor;
pub mod evidence;
pub mod host;
pub mod materialize;
pub mod meter;
pub mod package;
pub mod passable_dirs;
pub mod platform;
pub mod process;
pub mod runner_env;
pub mod runtime;
pub mod sandbox;
pub mod scrub;
pub mod secret;
pub mod uid_claims;
pub mod workspaces;

pub use account::{
    ensure_runner_account, lookup_account, AccountError, ResolvedRunAs, RunAs, RunnerAccount,
    DEFAULT_RUNNER_ACCOUNT,
};
pub use caches::{
    CacheOwners, CachePlan, CacheSettings, Caches, CachesError, ClearFilter, EntryInfo,
    PreparedCaches, Removal, RunnerGroups, SetupProblem,
};
pub use evidence::{
    read_evidence, read_evidence_capped, running_job_name, Evidence, EvidenceError, EvidenceKind,
};
pub use host::{HostError, PreparedRuntime, RunnerHost, RunnerHostConfig};
pub use materialize::{
    materialize, CopyMethod, MaterializeError, MaterializeOptions, MaterializeReport, UsedMethod,
};
pub use meter::{
    sample_in, sample_tree, AttemptMeter, MeterError, MeterSummary, ProcessSample, Snapshot,
    TreeSample, TreeState,
};
pub use package::{
    CacheError, DownloadProgress, DownloadSink, InstalledPackage, PackageCache, PackageId,
    PackageInfo, PackageSource, ProgressFn, SourceError,
};
pub use platform::{Arch, Os, Platform};
pub use process::{
    ExitInfo, ProcessError, ProcessHost, ProcessIdentity, ProcessState, SpawnRequest,
    SpawnedRunner, StopOutcome,
};
pub use runner_env::RunnerEnv;
pub use runtime::{Ownership, RunnerRoot, Runtime, RuntimeError, RuntimeName};
pub use scrub::{scrub, RetryDecision, ScrubError, ScrubReport, ScrubRetry};
pub use secret::JitConfig;
pub use workspaces::{ClaimedSlot, GivenBack, WorkspaceError, Workspaces};
