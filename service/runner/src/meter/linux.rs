//! Reading a [`Snapshot`] from `/proc`, through the same stat parser the process host uses.

use super::tree::{ProcRecord, Snapshot};
use super::MeterError;
use crate::process::procfs::{self, Stat};
use nix::unistd::{sysconf, SysconfVar};
use std::sync::OnceLock;
use std::time::Duration;

/// The units `/proc/<pid>/stat` counts in.
#[derive(Debug, Clone, Copy)]
struct Units {
    ticks_per_second: u64,
    page_bytes: u64,
}

fn units() -> Units {
    static UNITS: OnceLock<Units> = OnceLock::new();
    *UNITS.get_or_init(|| Units {
        // Linux's USER_HZ and page size when sysconf cannot say (it always can on Linux).
        ticks_per_second: sysconf_u64(SysconfVar::CLK_TCK).unwrap_or(100),
        page_bytes: sysconf_u64(SysconfVar::PAGE_SIZE).unwrap_or(4096),
    })
}

fn sysconf_u64(var: SysconfVar) -> Option<u64> {
    let value = sysconf(var).ok().flatten()?;
    u64::try_from(value).ok().filter(|v| *v > 0)
}

pub(super) fn read_snapshot() -> Result<Snapshot, MeterError> {
    let units = units();
    let mut snapshot = Snapshot::default();
    for pid in procfs::list_pids().map_err(|source| MeterError::List { source })? {
        match procfs::read_stat(pid) {
            // 'X' (dead) is the instant before the pid disappears: gone.
            Ok(Some(stat)) if stat.state != 'X' => snapshot.insert(record(pid, &stat, units)),
            // Vanished between listing and reading.
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(pid, %error, "meter: skipping an unreadable process");
                snapshot.insert_unreadable(pid);
            }
        }
    }
    Ok(snapshot)
}

fn record(pid: u32, stat: &Stat, units: Units) -> ProcRecord {
    ProcRecord {
        pid,
        ppid: stat.ppid,
        start_time: stat.start_time,
        cpu: ticks(stat.utime.saturating_add(stat.stime), units),
        rss_bytes: stat.rss_pages.saturating_mul(units.page_bytes),
    }
}

fn ticks(n: u64, units: Units) -> Duration {
    let nanos = u128::from(n) * 1_000_000_000 / u128::from(units.ticks_per_second);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}
