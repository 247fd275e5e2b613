//! The runner-manager domain: policies, labels, the attempt state machine, the allocator,
//! demand matching and the recovery decision.
//!
//! Pure by design: no IO, no async, no clock reads (callers pass `now`), no randomness (callers
//! pass ids), no wire format. Everything that decides lives here so it can be tested
//! exhaustively; adapters only carry out the decisions.

mod text;

pub mod allocator;
pub mod attempt;
pub mod caches;
pub mod demand;
pub mod fitness;
pub mod host;
pub mod ids;
pub mod labels;
pub mod launch_backoff;
pub mod policy;
pub mod recovery;
pub mod runner_env;
pub mod sandbox;
pub mod target;
pub mod time;
pub mod trust;
pub mod why;
pub mod workspace;

pub use allocator::{allocate, headroom, Allocation, AllocationInput, Grant, Limit, PolicyDemand};
pub use attempt::{
    Attempt, AttemptParts, AttemptRecordError, AttemptState, FailureReason, Observed, Outcome,
    OutcomeError, OutcomeKind, ProcessExit, ProcessIdentity, RecordProblem, TerminateReason,
    TransitionError,
};
pub use demand::{
    job_matches, job_matches_runner, match_demand, match_demand_for_runner, DemandCount, JobDemand,
    RunsOn, UnresolvableJob,
};
pub use fitness::{first_blocking, first_blocking_for, CheckState, HostCheck, JOB_SANDBOX_CHECK};
pub use host::Host;
pub use ids::{AttemptId, HostId, IdError, PolicyId, RUNNER_NAME_PREFIX};
pub use labels::{
    default_runner_labels, routing_label, Arch, HostLabel, Label, LabelError, LabelSet, Os,
    ProfileName, RoutingPrefix, SlugProblem,
};
pub use launch_backoff::{LaunchBackoff, LaunchHealth, LaunchVerdict};
pub use policy::{Policy, PolicyError, PolicyParts, PolicySpec, PolicyState, WorkspaceMode};
pub use recovery::{decide, Conclusion, Decision, Evidence, GitHubView, Observation, Timeouts};
pub use sandbox::TargetSandbox;
pub use target::{AccountName, AccountRole, RepoName, Target, TargetError};
pub use text::ParseEnumError;
pub use time::Timestamp;
pub use trust::{judge_run, JobTrust, TrustVerdict};
pub use why::{
    explain, BlockCause, CapacityHold, DemandUnread, JobWhy, LaunchBlock, PassStop, PassView,
    PolicyPass, Reason,
};
