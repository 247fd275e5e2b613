//! The ports the agent is written against. The daemon implements them over rm-journal,
//! rm-github and rm-runner; the tests implement them in memory.
//!
//! Every async method returns `impl Future + Send` so a loop generic over the ports can be
//! spawned on a multi-threaded runtime; implementations may still write `async fn`.

mod github;
mod host;
mod journal;

pub use github::{
    DeleteOutcome, DemandSnapshot, GhError, GitHubPort, Jit, PoolClaim, RunnerStatus, RunnerView,
};
pub use host::{HostError, RunnerHostPort, ScrubError, SpawnFor};
pub use journal::{ActiveCounts, JournalError, JournalPort};
