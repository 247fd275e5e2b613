//! What the runner's own diagnostics say happened, read before scrub deletes them:
//! a `_diag/Worker_*.log` means a job started; only `_diag/Runner_*.log` means none did. A job
//! completed only when the listener said so on its console ("<time>: Job <name> completed with
//! result: <result>", which the service keeps in `<runtime>/_listener.log`): a runner killed
//! mid-job leaves a worker log and no such line.

use crate::process::LISTENER_LOG;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Never look at more than this many `_diag` entries, nor for longer than this: a job could
/// have filled the directory, and supervision must not stall on it.
pub const MAX_ENTRIES: usize = 10_000;
pub const MAX_SCAN_TIME: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvidenceKind {
    /// The listener reported its job completed.
    JobCompleted,
    /// A worker log exists but no completion was reported: a job started (and, if the runner
    /// is gone, never finished).
    JobStarted,
    /// Only listener logs: the runner never took a job.
    NoJob,
    /// No diagnostics at all (never started, or already scrubbed).
    Nothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    pub kind: EvidenceKind,
    pub worker_logs: usize,
    pub runner_logs: usize,
    /// The scan stopped at a cap before finding a worker log; `NoJob` is then less certain.
    pub truncated: bool,
}

impl From<Evidence> for rm_core::Evidence {
    /// The domain's view. A truncated scan without a worker log still counts as "runner log
    /// only": the cap exists so supervision never stalls, and GitHub's view breaks ties.
    fn from(e: Evidence) -> Self {
        match e.kind {
            EvidenceKind::JobCompleted => rm_core::Evidence::JobCompleted,
            EvidenceKind::JobStarted => rm_core::Evidence::JobStarted,
            EvidenceKind::NoJob => rm_core::Evidence::RunnerLogOnly,
            EvidenceKind::Nothing => rm_core::Evidence::None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("reading runner diagnostics in {path}: {source}")]
pub struct EvidenceError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// Reads `<runtime>/_diag`.
pub fn read_evidence(runtime: &Path) -> Result<Evidence, EvidenceError> {
    read_evidence_capped(runtime, MAX_ENTRIES, MAX_SCAN_TIME)
}

/// As [`read_evidence`] with explicit caps on entries looked at and time spent.
pub fn read_evidence_capped(
    runtime: &Path,
    max_entries: usize,
    max_time: Duration,
) -> Result<Evidence, EvidenceError> {
    let diag = runtime.join("_diag");
    let err = |source| EvidenceError {
        path: diag.clone(),
        source,
    };
    let mut evidence = Evidence {
        kind: EvidenceKind::Nothing,
        worker_logs: 0,
        runner_logs: 0,
        truncated: false,
    };
    let entries = match fs::read_dir(&diag) {
        Ok(e) => e,
        Err(e)
            if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory =>
        {
            return Ok(evidence)
        }
        Err(e) => return Err(err(e)),
    };
    let started = Instant::now();
    for (seen, entry) in entries.enumerate() {
        if seen >= max_entries || started.elapsed() >= max_time {
            evidence.truncated = true;
            break;
        }
        let entry = entry.map_err(err)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(".log") || !entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            continue;
        }
        if name.starts_with("Worker_") {
            evidence.worker_logs += 1;
            // Decisive: no need to read further.
            break;
        } else if name.starts_with("Runner_") {
            evidence.runner_logs += 1;
        }
    }
    evidence.kind = if evidence.worker_logs > 0 {
        if listener_reported_completion(runtime) {
            EvidenceKind::JobCompleted
        } else {
            EvidenceKind::JobStarted
        }
    } else if evidence.runner_logs > 0 {
        EvidenceKind::NoJob
    } else {
        EvidenceKind::Nothing
    };
    Ok(evidence)
}

/// The console line the listener prints when its job ends, whatever the result.
const COMPLETION: &[u8] = b" completed with result: ";
/// Only the end of the console is read: the line comes last, and a job may have flooded it.
const TAIL_BYTES: u64 = 64 * 1024;

/// Whether the listener's console reports its job completed. Unreadable counts as no.
fn listener_reported_completion(runtime: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = fs::File::open(runtime.join(LISTENER_LOG)) else {
        return false;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if file
        .seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
        .is_err()
    {
        return false;
    }
    let mut tail = Vec::new();
    if file.take(TAIL_BYTES).read_to_end(&mut tail).is_err() {
        return false;
    }
    tail.windows(COMPLETION.len()).any(|w| w == COMPLETION)
}

/// The console line the listener prints when it takes its job.
const RUNNING_JOB: &str = ": Running job: ";
/// The line comes right after the listener connects: only the start of the console is read.
const HEAD_BYTES: u64 = 64 * 1024;

/// The display name of the job the listener took, from the first "<time>: Running job: <name>"
/// line of its console (`None` until written, or unreadable). The first one counts: it is
/// written before the job's own code runs, so a job cannot have forged it.
pub fn running_job_name(runtime: &Path) -> Option<String> {
    use std::io::Read;
    let file = fs::File::open(runtime.join(LISTENER_LOG)).ok()?;
    let mut head = Vec::new();
    file.take(HEAD_BYTES).read_to_end(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head);
    text.lines().find_map(|line| {
        let (_, name) = line.split_once(RUNNING_JOB)?;
        let name = name.trim_end();
        (!name.is_empty()).then(|| name.to_string())
    })
}
