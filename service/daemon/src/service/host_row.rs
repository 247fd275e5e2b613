//! The host row: created on first use from the machine's name, OS, architecture and CPUs. The
//! service creates it on its first start; the CLI's direct-journal backend uses the same code.

use crate::exit::{ExitCode, Failure};
use crate::service::MAX_CAPACITY;
use rm_core::{Arch, Host, HostId, HostLabel, Os};
use rm_journal::Journal;

/// Half the CPUs (at least one): leaves the machine usable while runners work.
pub fn default_capacity() -> u32 {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    u32::try_from(cpus / 2).unwrap_or(1).clamp(1, MAX_CAPACITY)
}

fn machine_name() -> String {
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
fn machine_host_id(label: &HostLabel) -> Result<HostId, Failure> {
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
    HostId::new(format!("{label}-{nanos:x}")).map_err(|e| Failure::internal(e.to_string()))
}

fn unsupported(what: &str) -> Failure {
    Failure::new(
        ExitCode::Unsupported,
        format!("GitHub's runner does not support {what}"),
    )
}

/// This machine as a new host row.
pub fn machine_host() -> Result<Host, Failure> {
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
pub fn ensure_host(journal: &mut Journal) -> Result<Host, Failure> {
    let stored = journal
        .get_host()
        .map_err(|e| Failure::internal(e.to_string()))?;
    if let Some(rec) = stored {
        return Ok(rec.host);
    }
    let host = machine_host()?;
    journal
        .put_host(&host, None)
        .map_err(|e| Failure::internal(e.to_string()))?;
    Ok(host)
}
