//! Which runner uids processes still run as, and ending them. A job can start a process that
//! leaves its runner's process group (`setsid`, a daemon that detaches), so stopping the group
//! at the runner's end does not end it. Were its uid handed to a later runner, that process
//! would run as the later job: able to read its files and its processes' environment (the
//! job's token). So a per-attempt uid is handed out only while nothing runs as it, and the
//! processes of a uid this service holds (see [`crate::uid_claims`]) are ended when its
//! runtime is scrubbed. A uid this service does not hold is never ended here: another
//! runner-manager service on this machine may be running a runner under it.

use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

/// The uids `wanted` picks that a running process (zombies aside) has as its real,
/// effective, saved or filesystem uid, each with those processes' pids.
#[cfg(target_os = "linux")]
pub(crate) fn running_as(wanted: impl Fn(u32) -> bool) -> io::Result<BTreeMap<u32, Vec<u32>>> {
    let mut out: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (pid, uid) in super::procfs::live_processes_of_uids(wanted)? {
        out.entry(uid).or_default().push(pid);
    }
    Ok(out)
}

/// Elsewhere runners do not get per-attempt uids (see `RunAs`): nothing runs as one.
#[cfg(not(target_os = "linux"))]
pub(crate) fn running_as(_wanted: impl Fn(u32) -> bool) -> io::Result<BTreeMap<u32, Vec<u32>>> {
    Ok(BTreeMap::new())
}

/// What [`end_all_as`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndedProcesses {
    /// Processes sent SIGKILL.
    pub ended: Vec<u32>,
    /// Processes still running as the uid when the bound ran out (one stuck in the kernel:
    /// SIGKILL takes effect only when it returns).
    pub remaining: Vec<u32>,
}

/// How long [`end_all_as`] keeps at it: processes that fork while being ended need a few
/// rounds; one stuck in uninterruptible sleep would need forever.
const END_BOUND: Duration = Duration::from_secs(5);

/// SIGKILLs every process running as `uid`, in rounds until none is left (a process that
/// forked between a listing and its kill is caught in the next round) or [`END_BOUND`] passed.
/// The caller must hold the uid (see [`crate::uid_claims`]).
pub(crate) fn end_all_as(uid: u32) -> io::Result<EndedProcesses> {
    let mut out = EndedProcesses::default();
    let start = Instant::now();
    loop {
        let live = running_as(|u| u == uid)?.remove(&uid).unwrap_or_default();
        if live.is_empty() {
            return Ok(out);
        }
        if start.elapsed() >= END_BOUND {
            out.remaining = live;
            return Ok(out);
        }
        for pid in live {
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            // Gone since the listing (ESRCH) is the outcome wanted.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(raw),
                nix::sys::signal::Signal::SIGKILL,
            );
            if !out.ended.contains(&pid) {
                out.ended.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
