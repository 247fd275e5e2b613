//! `<data-dir>/update-state.json`: where an update is, written (atomically, fsynced) before
//! each step that changes installed files, so a crash at any point is finished or undone by
//! whichever process looks next (the watchdog, or the next start).
//!
//! Phases: `swapping` (files are being replaced; a start that finds this restores the backups),
//! `trial` (the new build runs; the watchdog waits for it to answer its version), `done`,
//! `rolled_back` (the previous files are back; that version is not applied again by itself).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE: &str = "update-state.json";
/// Backups of the replaced files, and the staged downloads, live under this directory.
pub const UPDATES_DIR: &str = "updates";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Swapping,
    Trial,
    Done,
    RolledBack,
}

/// One installed file and where its previous content is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapFile {
    pub installed: PathBuf,
    /// `None`: the file did not exist before (restoring removes it).
    pub backup: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRecord {
    pub phase: Phase,
    pub from: String,
    pub to: String,
    /// `portable` or `deb`.
    pub kind: String,
    pub files: Vec<SwapFile>,
    /// The service binary to start after a restore.
    pub exe: PathBuf,
    /// The service's arguments (never secrets: those never reach argv).
    pub args: Vec<String>,
    pub socket: PathBuf,
    pub at_ms: i64,
    #[serde(default)]
    pub watchdog_pid: Option<u32>,
    #[serde(default)]
    pub message: Option<String>,
}

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

pub fn read(data_dir: &Path) -> Result<Option<UpdateRecord>, String> {
    let p = path(data_dir);
    match std::fs::read_to_string(&p) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is damaged ({e}): remove it", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", p.display())),
    }
}

pub fn write(data_dir: &Path, record: &UpdateRecord) -> Result<(), String> {
    let p = path(data_dir);
    let tmp = p.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| format!("cannot write {}: {e}", p.display());
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&text).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &p).map_err(io)?;
    if let Ok(dir) = std::fs::File::open(data_dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
