//! Which runner uids processes still run as. A job can start a process that leaves its
//! runner's process group (`setsid`, a daemon that detaches), so stopping the group at the
//! runner's end does not end it. Were its uid handed to a later runner, that process would
//! run as the later job: able to read its files and its processes' environment (the job's
//! token). So a per-attempt uid is handed out only while nothing runs as it. Such processes
//! are not killed here: another runner-manager service on this machine (each keeps its own
//! runner root) may be running a runner under the same uid, and only its own runtimes tell a
//! service which uids are its.

use std::collections::BTreeMap;
use std::io;

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
