//! The sandbox's own processes above a runner's listener, found from `/proc`, so a graceful
//! stop can spare them: signalled, pasta or bwrap would end at once and take the whole
//! namespace with them before the listener could finish its job's cancellation.

use std::io;

/// The names the sandbox's programs show in `/proc/<pid>/comm` (pasta runs as
/// `passt.avx2` where the CPU allows it).
const WRAPPERS: &[&str] = &["pasta", "pasta.avx2", "passt", "passt.avx2", "bwrap"];

/// `top` and the chain of single children below it that are the sandbox's own programs:
/// empty when `top` is not a sandbox (a runner started without one).
pub fn wrapper_chain(top: u32) -> io::Result<Vec<u32>> {
    let mut chain = Vec::new();
    let mut pid = top;
    while let Some(comm) = comm(pid)? {
        if !WRAPPERS.contains(&comm.as_str()) {
            break;
        }
        chain.push(pid);
        match children(pid)?.as_slice() {
            [only] => pid = *only,
            _ => break,
        }
    }
    Ok(chain)
}

fn comm(pid: u32) -> io::Result<Option<String>> {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(s) => Ok(Some(s.trim_end().to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The children of `pid`, from every thread's `children` list.
fn children(pid: u32) -> io::Result<Vec<u32>> {
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        found.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_process_has_no_wrappers() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let chain = wrapper_chain(child.id()).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(chain.is_empty(), "{chain:?}");
    }

    #[test]
    fn a_gone_process_has_no_wrappers() {
        assert!(wrapper_chain(u32::MAX - 1).unwrap().is_empty());
    }
}
