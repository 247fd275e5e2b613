//! The local API between the runner-manager service and its clients (the CLI and the tray):
//! HTTP/1.1 with JSON bodies over a Unix socket (Linux, macOS) or a named pipe (Windows),
//! authorised by the caller's OS identity.
//!
//! This crate is the only place that knows the wire format. The types are plain serde structs
//! with snake_case string enums, independent of the domain crate, so the tray can depend on
//! this crate alone. The `client` and `server` features add the HTTP transport; the types are
//! always available.
//!
//! Compatibility rules (see `README.md`): requests refuse unknown fields (a typo must not be
//! silently ignored), while responses and watch messages accept them and read unknown enum
//! values as `unknown`, so an older client keeps working against a newer service.

pub mod caches;
pub mod error;
pub mod model;
pub mod paths;
pub mod pipe;
pub mod requests;
pub mod secret;
pub mod sid;
pub mod signin;
pub mod sockets;
pub mod status;
pub mod time;
pub mod update;
pub mod version;
pub mod watch;
pub mod why;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod server;
#[cfg(all(windows, any(feature = "client", feature = "server")))]
mod win32;

pub use caches::{
    CacheClear, CacheCleared, CacheEntry, CachesReport, HostCachesChange, TargetCache,
};
pub use error::{ApiError, ErrorBody, ErrorCode};
pub use paths::{Route, TargetRef, TargetRefError};
pub use pipe::pipe_name;
pub use requests::{
    CredentialPut, EnvVar, HostAdmissionChange, HostCapacity, HostEnv, HostEnvChange, PauseState,
    PoolJoin, TargetAdd, TargetList, TargetSandboxChange, TargetUpdate, MIN_JOB_MEMORY_MB,
};
pub use secret::SecretString;
pub use sid::{Sid, SidError};
pub use signin::{SignInSession, SignInStart, SignInState};
pub use status::{
    AdmissionHold, Arch, AuthState, Budget, CachesProblem, CheckState, Demand, DoctorReport,
    Failure, FailureReason, GitHubEndpoints, GitHubHealth, GitHubHealthState, HostAdmission,
    HostCheck, HostStatus, JobRef, LeftRegistration, LoadAverage, Os, PoolClaimStatus,
    PoolHostStatus, PoolRunnerStatus, PoolStatus, ProblemCode, RunnerState, RunnerStatus,
    RunnerUsage, Status, TargetAdmission, TargetKind, TargetProblem, TargetSandbox, TargetSpend,
    TargetState, TargetStatus, Workspace, WorkstationHold,
};
pub use time::UnixMillis;
pub use update::{InstallKind, UpdateMode, UpdateRequest, UpdateState, UpdateStatus};
pub use version::{
    check_compatibility, VersionInfo, VersionMismatch, API_HEADER, API_VERSION, MIN_CLIENT_API,
    SERVICE_VERSION_HEADER,
};
pub use watch::{Event, RunnerOutcome, WatchMessage};
pub use why::{JobWhy, TargetWhy, WhyReason, WhyReport};

#[cfg(feature = "client")]
pub use client::{Client, ClientError, ClientOptions, Follower, WatchStream};
#[cfg(all(unix, feature = "server"))]
pub use server::bind_socket;
#[cfg(all(windows, feature = "server"))]
pub use server::{bind_pipe, PipeListener};
#[cfg(feature = "server")]
pub use server::{
    serve, serve_until, AccessPolicy, BindError, GroupMembership, Handler, Listener, Peer,
    PeerIdentity, ServerLimits, WatchStart,
};
