//! Linux `/proc` reading: a process's start time (so a recycled pid is never mistaken for the
//! runner) and the live members of a process group.

use std::fs;
use std::io;

/// The fields of `/proc/<pid>/stat` this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub pgrp: i32,
    /// Field 22: start time after boot in clock ticks.
    pub start_time: u64,
}

/// Parses a stat line. The command name (field 2) is in parentheses and may itself contain
/// spaces and ')' so fields are counted from the last ')'.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// `Ok(None)` when there is no such process.
pub(crate) fn read_stat(pid: u32) -> io::Result<Option<Stat>> {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(line) => parse_stat(&line).map(Some).ok_or_else(|| {
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
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process can vanish between listing and reading; that is just "not a member".
        if let Ok(Some(stat)) = read_stat(pid) {
            if stat.pgrp == pgid && stat.state != 'Z' && stat.state != 'X' {
                out.push(pid);
            }
        }
    }
    Ok(out)
}

/// Group leaders whose working directory is `dir` (the listener runs with cwd = its runtime
/// and leads its own group), for recovering a runner whose spawn was not journalled.
pub(crate) fn group_leaders_in(dir: &std::path::Path) -> io::Result<Vec<(u32, Stat)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cwd) = fs::read_link(entry.path().join("cwd")) else {
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
        assert_eq!(s.pgrp, 1234);
        assert_eq!(s.start_time, 987654);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn reads_own_stat() {
        let s = read_stat(std::process::id()).unwrap().unwrap();
        assert!(s.start_time > 0);
        assert!(read_stat(u32::MAX - 1).unwrap().is_none());
    }
}
