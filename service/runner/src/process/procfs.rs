//! Linux `/proc` reading: a process's start time (so a recycled pid is never mistaken for the
//! runner), the live members of a process group, and the figures the meter sums (parent,
//! CPU time, resident memory).

use std::fs;
use std::io;

/// The fields of `/proc/<pid>/stat` this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    pub pgrp: i32,
    /// Fields 14 and 15: CPU time of the whole thread group in user and kernel mode, in clock
    /// ticks (its own; reaped children's time is in fields 16 and 17, not read).
    pub utime: u64,
    pub stime: u64,
    /// Field 22: start time after boot in clock ticks.
    pub start_time: u64,
    /// Field 24: resident pages, the same counter as `statm`'s second field and `VmRSS`.
    pub rss_pages: u64,
}

/// Parses a stat line. The command name (field 2) is in parentheses and may itself contain
/// spaces and ')' so fields are counted from the last ')'.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // The first field after ')' is field 3; `nth(k)` skips k fields.
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let utime = fields.nth(8)?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    let start_time = fields.nth(6)?.parse().ok()?;
    let rss_pages = fields.nth(1)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        utime,
        stime,
        start_time,
        rss_pages,
    })
}

/// The pids listed in `/proc` (processes, not their other threads). An entry that cannot be
/// read is left out.
pub(crate) fn list_pids() -> io::Result<impl Iterator<Item = u32>> {
    Ok(fs::read_dir("/proc")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok()))
}

/// `Ok(None)` when there is no such process.
pub(crate) fn read_stat(pid: u32) -> io::Result<Option<Stat>> {
    // Bytes, not a String: the command name is whatever the process chose (exec'd file name,
    // prctl) and need not be UTF-8; only the fields after it are parsed.
    match fs::read(format!("/proc/{pid}/stat")) {
        Ok(bytes) => parse_stat(&String::from_utf8_lossy(&bytes))
            .map(Some)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unparsable /proc/{pid}/stat"),
                )
            }),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Pids of the group's members that are still running (zombies excluded: they hold no
/// resources and wait only for their parent to reap them).
pub(crate) fn live_group_members(pgid: i32) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for pid in list_pids()? {
        // A process can vanish between listing and reading; that is just "not a member".
        if let Ok(Some(stat)) = read_stat(pid) {
            if stat.pgrp == pgid && stat.state != 'Z' && stat.state != 'X' {
                out.push(pid);
            }
        }
    }
    Ok(out)
}

/// The real, effective, saved and filesystem uids of `/proc/<pid>/status`; `None` when the
/// process is gone (or its status has no `Uid:` line, which Linux always writes).
fn read_uids(pid: u32) -> Option<[u32; 4]> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|v| v.parse::<u32>().ok());
    Some([ids.next()??, ids.next()??, ids.next()??, ids.next()??])
}

/// Running processes (zombies excluded) any of whose uids `wanted` picks, as (pid, that uid).
/// A process that vanishes while being read is left out.
pub(crate) fn live_processes_of_uids(wanted: impl Fn(u32) -> bool) -> io::Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for pid in list_pids()? {
        let Some(uid) = read_uids(pid).and_then(|ids| ids.into_iter().find(|u| wanted(*u))) else {
            continue;
        };
        if let Ok(Some(stat)) = read_stat(pid) {
            if stat.state != 'Z' && stat.state != 'X' {
                out.push((pid, uid));
            }
        }
    }
    Ok(out)
}

/// Group leaders whose working directory is `dir` (the listener runs with cwd = its runtime
/// and leads its own group), for recovering a runner whose spawn was not journalled.
pub(crate) fn group_leaders_in(dir: &std::path::Path) -> io::Result<Vec<(u32, Stat)>> {
    let mut out = Vec::new();
    for pid in list_pids()? {
        let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) else {
            continue;
        };
        if cwd != dir {
            continue;
        }
        if let Ok(Some(stat)) = read_stat(pid) {
            if u32::try_from(stat.pgrp).ok() == Some(pid) && stat.state != 'Z' {
                out.push((pid, stat));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line =
            "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.pgrp, 1234);
        assert_eq!((s.utime, s.stime), (1, 2));
        assert_eq!(s.start_time, 987654);
        assert_eq!(s.rss_pages, 200);
        assert!(parse_stat("garbage").is_none());
        // Cut short, or a number that is not one: unparsable, not a panic.
        assert!(parse_stat(&line[..line.len() - 4]).is_none());
        assert!(parse_stat(&line.replace(" 987654 ", " 98x654 ")).is_none());
        assert!(parse_stat(&line.replace(" 1000 200", " 1000 -200")).is_none());
    }

    #[test]
    fn reads_own_stat() {
        let s = read_stat(std::process::id()).unwrap().unwrap();
        assert!(s.start_time > 0);
        assert!(s.rss_pages > 0);
        assert!(list_pids().unwrap().any(|pid| pid == std::process::id()));
        assert!(read_stat(u32::MAX - 1).unwrap().is_none());
    }
}
