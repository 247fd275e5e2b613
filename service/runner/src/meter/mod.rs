//! Metering an attempt's process tree: resident memory and CPU of the runner and everything it
//! started.
//!
//! - [`Snapshot`]: one read of every process's `/proc/<pid>/stat` (Linux; elsewhere
//!   [`MeterError::Unsupported`]). It is the whole cost of a sample, so attempts sampled at the
//!   same moment can share one ([`sample_in`]); [`sample_tree`] reads its own.
//! - [`TreeState`]: the tree's members as far as the meter knows them, per attempt. A process
//!   seen once as the root or a descendant stays a member while it lives, even after its parent
//!   exits and it is re-parented to init or a subreaper (or leaves the process group): a job's
//!   daemons and double-forked helpers are still the job's.
//! - [`TreeSample`]: what the members hold at one moment.
//! - [`AttemptMeter`]: the arithmetic over samples (peak RSS, CPU used, average and busiest
//!   rate), without `/proc`.
//!
//! Everything read from `/proc` is outside input: a process that vanishes between listing and
//! reading, a line that does not parse or a permission error skips that process.

mod attempt;
#[cfg(target_os = "linux")]
mod linux;
mod tree;

pub use attempt::{AttemptMeter, MeterSummary, MIN_INTERVAL};
pub use tree::{sample_in, Snapshot, TreeState};

use crate::process::ProcessIdentity;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    #[error("{what} is not supported on this operating system yet")]
    Unsupported { what: &'static str },
    #[error("listing processes in /proc: {source}")]
    List {
        #[source]
        source: std::io::Error,
    },
}

/// One member of the tree at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    pub id: ProcessIdentity,
    /// utime + stime of the process (all its threads) since it started.
    pub cpu: Duration,
    /// Resident memory; 0 for a zombie.
    pub rss_bytes: u64,
}

/// The tree at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeSample {
    /// The members that could be read (zombies included: their CPU time is final).
    pub processes: Vec<ProcessSample>,
    /// Members seen before that are gone now (exited, or their pid belongs to another
    /// process): the accumulator can forget them.
    pub ended: Vec<ProcessIdentity>,
}

impl TreeSample {
    /// Resident memory of the whole tree.
    pub fn rss_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.rss_bytes).sum()
    }

    /// CPU time of the members present now (not of those that ended: that is what
    /// [`AttemptMeter`] keeps).
    pub fn cpu(&self) -> Duration {
        self.processes.iter().map(|p| p.cpu).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    pub fn contains(&self, pid: u32) -> bool {
        self.processes.iter().any(|p| p.id.pid == pid)
    }
}

/// Samples the tree under `root`: reads `/proc` once, then [`sample_in`]. A root that is
/// gone (or whose pid now belongs to another process) is not an error: the sample then holds
/// only the descendants still known in `known`, or nothing.
pub fn sample_tree(root: ProcessIdentity, known: &mut TreeState) -> Result<TreeSample, MeterError> {
    Ok(sample_in(&Snapshot::read()?, root, known))
}
