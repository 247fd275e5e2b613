//! The host row: created on first use from the machine's name, OS, architecture and CPUs. The
//! service creates it on its first start; the CLI's direct-journal backend uses the same code.

use crate::MAX_CAPACITY;
use rm_core::{Arch, Host, HostId, HostLabel, Os};
use rm_journal::Journal;

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// Half the CPUs (at least one): leaves the machine usable while runners work.
pub fn default_capacity() -> u32 {
    capacity_for(cpus())
}

fn capacity_for(cpus: usize) -> u32 {
    u32::try_from(cpus / 2).unwrap_or(1).clamp(1, MAX_CAPACITY)
}

/// How `capacity` came about and how to change it, for `host show` and the tray: a capacity
/// equal to this machine's default is described as the default.
pub fn capacity_note(capacity: u32) -> String {
    capacity_note_for(capacity, cpus())
}

fn capacity_note_for(capacity: u32, cpus: usize) -> String {
    let default = capacity_for(cpus);
    let rule = format!("half of this machine's {cpus} CPUs, at least 1");
    if capacity == default {
        format!(
            "the default ({rule}); change it with `runner-manager host set-capacity N` \
             (each target's --max-runners still applies)"
        )
    } else {
        format!(
            "set with `runner-manager host set-capacity`; the default here would be {default} \
             ({rule})"
        )
    }
}

pub(crate) fn machine_name() -> String {
    #[cfg(unix)]
    {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default()
    }
    #[cfg(not(unix))]
    {
        std::env::var("COMPUTERNAME").unwrap_or_default()
    }
}

/// A stable id: the OS machine id where there is one, else the label and the creation time.
fn machine_host_id(label: &HostLabel) -> Result<HostId, HostRowError> {
    let from_machine_id = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .and_then(|s| HostId::new(s.trim()).ok());
    if let Some(id) = from_machine_id {
        return Ok(id);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    HostId::new(format!("{label}-{nanos:x}")).map_err(|e| HostRowError::Internal(e.to_string()))
}

/// Why the host row could not be had. The CLI maps these to its exit codes.
#[derive(Debug, thiserror::Error)]
pub enum HostRowError {
    /// GitHub's runner does not run on this machine's OS or architecture.
    #[error("GitHub's runner does not support {0}")]
    Unsupported(String),
    /// The journal could not be read or written, or the id could not be made.
    #[error("{0}")]
    Internal(String),
}

fn unsupported(what: &str) -> HostRowError {
    HostRowError::Unsupported(what.to_owned())
}

/// This machine as a new host row.
pub fn machine_host() -> Result<Host, HostRowError> {
    let os = Os::from_std(std::env::consts::OS).ok_or_else(|| unsupported(std::env::consts::OS))?;
    let arch = Arch::from_std(std::env::consts::ARCH)
        .ok_or_else(|| unsupported(std::env::consts::ARCH))?;
    let label = HostLabel::from_machine_name(&machine_name());
    Ok(Host {
        id: machine_host_id(&label)?,
        os,
        arch,
        label,
        capacity: default_capacity(),
    })
}

/// The stored host row, created first if missing.
pub fn ensure_host(journal: &mut Journal) -> Result<Host, HostRowError> {
    let stored = journal
        .get_host()
        .map_err(|e| HostRowError::Internal(e.to_string()))?;
    if let Some(rec) = stored {
        return Ok(rec.host);
    }
    let host = machine_host()?;
    journal
        .put_host(&host, None)
        .map_err(|e| HostRowError::Internal(e.to_string()))?;
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_note_says_how_the_number_was_chosen_and_how_to_change_it() {
        let note = capacity_note_for(1, 2);
        assert!(
            note.starts_with("the default (half of this machine's 2 CPUs"),
            "{note}"
        );
        assert!(note.contains("host set-capacity N"), "{note}");
        let note = capacity_note_for(4, 2);
        assert!(
            note.starts_with("set with `runner-manager host set-capacity`"),
            "{note}"
        );
        assert!(note.contains("would be 1"), "{note}");
        assert_eq!(capacity_for(16), 8);
        assert_eq!(capacity_for(1), 1);
    }
}
