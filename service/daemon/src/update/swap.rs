//! The swap, the restart, and what makes both undoable.
//!
//! Called after the service drained and stopped serving (no runner active, the lock and the
//! socket released). Order:
//!
//! 1. copy every file about to change into `<data-dir>/updates/rollback/`;
//! 2. record `swapping` (with that list);
//! 3. replace the files, each by an atomic rename of a copy written beside it — the service
//!    binary last, so an interrupted swap still starts the previous service, which restores
//!    the rest; a `.deb` is installed by `dpkg -i` instead;
//! 4. record `trial`, start the watchdog (the *previous* binary, from its backup), and `exec`
//!    the new binary in place of this process (same pid, so a service manager keeps tracking
//!    it);
//! 5. the watchdog asks the new service for its version over the local API for
//!    [`TRIAL`]; on the right answer it records `done`, else it restores the backups, records
//!    `rolled_back`, kills the new process and (outside a service manager, which restarts it
//!    by itself) starts the previous service again.
//!
//! A start that finds `swapping` restores the backups first ([`on_start`]).

use super::install::{Installed, PORTABLE_BINARY};
use super::record::{self, Phase, SwapFile, UpdateRecord, UPDATES_DIR};
use super::stage::Staged;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the new service has to answer its version.
pub const TRIAL: Duration = Duration::from_secs(30);
/// Set in dpkg's environment when the updater installs a package, so the package's postinst
/// leaves the restart to the updater (which execs the new binary itself).
pub const UPDATER_ENV: &str = "RUNNER_MANAGER_UPDATER";

/// Everything the hand-over needs after the service stopped serving.
#[derive(Debug, Clone)]
pub struct Handover {
    pub staged: Staged,
    pub installed: Installed,
    pub data_dir: PathBuf,
    pub socket: PathBuf,
    /// The service's own arguments, to start the new build with.
    pub args: Vec<String>,
}

fn rollback_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(UPDATES_DIR).join("rollback")
}

/// Writes `src`'s bytes (and mode) to `dest` atomically: a sibling temp file renamed over it.
fn replace_file(src: &Path, dest: &Path) -> Result<(), String> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dest.with_file_name(format!(".{name}.rm-new"));
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::copy(src, &tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot replace {}: {e}", dest.display())
    })
}

/// A command run where it may write system files. The packaged system unit runs with
/// `ProtectSystem=strict` (its children inherit that): under systemd, as root, the command runs
/// as a transient unit of its own (`systemd-run --wait`); elsewhere (a user unit, no service
/// manager) it runs directly.
fn outside_sandbox(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Command {
    let sandboxed = std::env::var_os("INVOCATION_ID").is_some()
        && crate::paths::is_privileged()
        && Path::new("/run/systemd/system").exists();
    if sandboxed {
        let mut c = Command::new("systemd-run");
        c.args(["--wait", "--collect", "--quiet", "--pipe"]);
        for (k, v) in env {
            c.arg(format!("--setenv={k}={v}"));
        }
        c.arg("--").args(args);
        c
    } else {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }
}

/// Puts `backup` back at `installed` (`None`: removes it): directly, or for a package's
/// system files under the packaged unit's sandbox, with `install`/`rm` outside it.
fn put_back(backup: Option<&Path>, installed: &Path, kind: &str) -> Result<(), String> {
    let direct = match backup {
        Some(b) => replace_file(b, installed),
        None => match std::fs::remove_file(installed) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", installed.display()))
            }
            _ => Ok(()),
        },
    };
    if direct.is_ok() || kind != "deb" {
        return direct;
    }
    let mut cmd = match backup {
        Some(b) => outside_sandbox(
            &[
                "install".as_ref(),
                "-m".as_ref(),
                "0755".as_ref(),
                "-T".as_ref(),
                b.as_os_str(),
                installed.as_os_str(),
            ],
            &[],
        ),
        None => outside_sandbox(&["rm".as_ref(), "-f".as_ref(), installed.as_os_str()], &[]),
    };
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "cannot restore {}: {}",
            installed.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot restore {}: {e}", installed.display())),
    }
}

/// Puts every recorded file back as it was.
pub fn restore(record: &UpdateRecord) -> Result<(), String> {
    let mut errors = Vec::new();
    for f in &record.files {
        let r = put_back(f.backup.as_deref(), &f.installed, &record.kind);
        if let Err(e) = r {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Backs up `installed` (when it exists) under the rollback directory as `rel`.
fn backup(data_dir: &Path, installed: &Path, rel: &str) -> Result<SwapFile, String> {
    if !installed.exists() {
        return Ok(SwapFile {
            installed: installed.to_path_buf(),
            backup: None,
        });
    }
    let b = rollback_dir(data_dir).join(rel);
    if let Some(parent) = b.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::copy(installed, &b)
        .and_then(|_| std::fs::File::open(&b).and_then(|f| f.sync_all()))
        .map_err(|e| format!("cannot back up {}: {e}", installed.display()))?;
    Ok(SwapFile {
        installed: installed.to_path_buf(),
        backup: Some(b),
    })
}

/// Swaps, records `trial`, starts the watchdog and execs the new binary. Returns only when
/// that failed: then the previous files are back (recorded `rolled_back`), and the caller
/// starts the previous service again with [`exec_service`].
pub fn swap_and_exec(h: &Handover) -> String {
    match swap(h) {
        Ok(record) => {
            let watchdog = start_watchdog(h, &record);
            if let Err(e) = watchdog {
                // Without a watchdog nobody could undo a new build that does not start: undo now.
                return fail(
                    h,
                    record,
                    format!("the update watchdog could not start: {e}"),
                );
            }
            tracing::info!(version = %record.to, exe = %record.exe.display(), "files swapped: starting the new runner-manager");
            let e = exec_service(&record.exe, &h.args);
            fail(
                h,
                record,
                format!("the new binary could not be started: {e}"),
            )
        }
        Err(e) => e,
    }
}

fn fail(h: &Handover, mut record: UpdateRecord, why: String) -> String {
    let restored = restore(&record);
    record.phase = Phase::RolledBack;
    record.message = Some(match &restored {
        Ok(()) => format!("{why}; runner-manager {} was restored", record.from),
        Err(e) => format!("{why}; restoring {} failed too: {e}", record.from),
    });
    let _ = record::write(&h.data_dir, &record);
    record.message.unwrap_or(why)
}

/// Steps 1–3: returns the `trial` record, or (after undoing what was done) why it failed.
fn swap(h: &Handover) -> Result<UpdateRecord, String> {
    let from = crate::VERSION.to_owned();
    let to = h.staged.version().to_string();
    let _ = std::fs::remove_dir_all(rollback_dir(&h.data_dir));
    let mut record = UpdateRecord {
        phase: Phase::Swapping,
        from,
        to,
        kind: h.installed.kind().as_str().to_owned(),
        files: Vec::new(),
        exe: h.installed.exe(),
        args: h.args.clone(),
        socket: h.socket.clone(),
        at_ms: record::now_ms(),
        watchdog_pid: None,
        message: None,
    };
    match (&h.staged, &h.installed) {
        (Staged::Portable { root, files, .. }, Installed::Portable { prefix, .. }) => {
            // The service binary last: until it is replaced, a start runs the previous
            // service, which finds `swapping` and restores the rest.
            let mut order: Vec<&String> = files.iter().filter(|f| *f != PORTABLE_BINARY).collect();
            order.push(
                files
                    .iter()
                    .find(|f| *f == PORTABLE_BINARY)
                    .ok_or("the new archive has no bin/runner-manager")?,
            );
            for rel in &order {
                record
                    .files
                    .push(backup(&h.data_dir, &prefix.join(rel), rel)?);
            }
            record::write(&h.data_dir, &record)?;
            for rel in &order {
                if let Err(e) = replace_file(&root.join(rel), &prefix.join(rel)) {
                    return Err(undo(h, record, e));
                }
            }
        }
        (Staged::Deb { deb, .. }, Installed::Deb { exe }) => {
            record
                .files
                .push(backup(&h.data_dir, exe, "runner-manager")?);
            let tray = exe.with_file_name("runner-manager-tray");
            record
                .files
                .push(backup(&h.data_dir, &tray, "runner-manager-tray")?);
            record::write(&h.data_dir, &record)?;
            let out = outside_sandbox(
                &["dpkg".as_ref(), "--install".as_ref(), deb.as_os_str()],
                &[(UPDATER_ENV, "1"), ("DEBIAN_FRONTEND", "noninteractive")],
            )
            .stdin(Stdio::null())
            .output();
            match out {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    let why = format!(
                        "dpkg --install failed ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                    return Err(undo(h, record, why));
                }
                Err(e) => return Err(undo(h, record, format!("cannot run dpkg: {e}"))),
            }
        }
        _ => {
            return Err("the staged release does not match how runner-manager is installed".into())
        }
    }
    record.phase = Phase::Trial;
    record.at_ms = record::now_ms();
    record::write(&h.data_dir, &record)?;
    Ok(record)
}

fn undo(h: &Handover, record: UpdateRecord, why: String) -> String {
    tracing::error!(error = %why, "the update's swap failed: restoring the previous files");
    fail(h, record, why)
}

/// The previous binary, from its backup, runs `update-watchdog`.
fn start_watchdog(h: &Handover, record: &UpdateRecord) -> Result<(), String> {
    let previous = record
        .files
        .iter()
        .find(|f| f.installed == record.exe)
        .and_then(|f| f.backup.clone())
        .ok_or("the previous binary was not backed up")?;
    let child = Command::new(&previous)
        .arg("--data-dir")
        .arg(&h.data_dir)
        .arg("update-watchdog")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", previous.display()))?;
    let mut record = record.clone();
    record.watchdog_pid = Some(child.id());
    record::write(&h.data_dir, &record)?;
    // Not waited for: it outlives this process image (the exec keeps the pid, so it stays
    // our child, and a service manager reaps it with us).
    std::mem::forget(child);
    Ok(())
}

/// Replaces this process with `exe args…` (returns only on failure).
pub fn exec_service(exe: &Path, args: &[String]) -> String {
    use std::os::unix::process::CommandExt;
    let e = Command::new(exe).args(args).exec();
    format!("cannot exec {}: {e}", exe.display())
}

/// What the service should know at start about an earlier update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartNote {
    None,
    /// This build is on trial: the watchdog confirms it (or, when the watchdog is gone, this
    /// service confirms itself once it answers).
    Trial(UpdateRecord),
    Updated {
        from: String,
    },
    RolledBack {
        version: String,
        message: String,
    },
}

/// Looks at the update record before the service starts. An interrupted swap is undone here
/// (and the previous service started in this process's place when this binary is not it).
pub fn on_start(data_dir: &Path) -> StartNote {
    let record = match record::read(data_dir) {
        Ok(Some(r)) => r,
        Ok(None) => return StartNote::None,
        Err(e) => {
            tracing::warn!(error = %e, "the update record is unreadable; ignoring it");
            return StartNote::None;
        }
    };
    let me = crate::VERSION;
    match record.phase {
        Phase::Swapping => {
            tracing::warn!(from = %record.from, to = %record.to, "an update was interrupted while swapping files: restoring the previous ones");
            let mut r = record.clone();
            let restored = restore(&record);
            r.phase = Phase::RolledBack;
            r.message = Some(match restored {
                Ok(()) => format!(
                    "the update to {} was interrupted while swapping files; {} was restored",
                    record.to, record.from
                ),
                Err(e) => format!(
                    "the update to {} was interrupted and restoring failed: {e}",
                    record.to
                ),
            });
            let _ = record::write(data_dir, &r);
            if me != record.from {
                let args: Vec<String> = std::env::args().skip(1).collect();
                let e = exec_service(&record.exe, &args);
                tracing::error!(error = %e, "the restored runner-manager could not be started");
            }
            rolled_back(r)
        }
        Phase::Trial if me == record.to => StartNote::Trial(record),
        Phase::Trial => {
            // The previous build runs although the record says the new one is on trial: the
            // watchdog restored it and was stopped before it could write so.
            let mut r = record;
            r.phase = Phase::RolledBack;
            r.message = Some(format!(
                "runner-manager {} did not start; {} runs again",
                r.to, r.from
            ));
            let _ = record::write(data_dir, &r);
            rolled_back(r)
        }
        Phase::Done if me == record.to => StartNote::Updated { from: record.from },
        Phase::Done => StartNote::None,
        Phase::RolledBack => rolled_back(record),
    }
}

fn rolled_back(r: UpdateRecord) -> StartNote {
    StartNote::RolledBack {
        version: r.to,
        message: r.message.unwrap_or_else(|| "the update was undone".into()),
    }
}

/// Marks a trial as passed and drops the backups.
pub fn confirm(data_dir: &Path) -> Result<bool, String> {
    let Some(mut r) = record::read(data_dir)? else {
        return Ok(false);
    };
    if r.phase != Phase::Trial {
        return Ok(false);
    }
    r.phase = Phase::Done;
    r.at_ms = record::now_ms();
    record::write(data_dir, &r)?;
    // The backups and the staged download are no longer needed.
    let _ = std::fs::remove_dir_all(data_dir.join(UPDATES_DIR));
    Ok(true)
}

/// `runner-manager update-watchdog --pid PID`: see the module doc, step 5.
pub fn watchdog(data_dir: &Path, pid: u32) -> Result<(), String> {
    let deadline = Instant::now() + TRIAL;
    let Some(record) = record::read(data_dir)? else {
        return Ok(());
    };
    if record.phase != Phase::Trial {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let answered = rt.block_on(async {
        while Instant::now() < deadline {
            let asked = tokio::time::timeout(Duration::from_secs(2), async {
                let c = rm_proto::Client::connect(&record.socket).await.ok()?;
                c.version().await.ok()
            })
            .await
            .ok()
            .flatten();
            if asked.is_some_and(|v| v.service_version == record.to) {
                return true;
            }
            // Someone else decided meanwhile (the new service confirmed itself, or a start
            // rolled back).
            if record::read(data_dir).ok().flatten().map(|r| r.phase) != Some(Phase::Trial) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        false
    });
    if answered {
        confirm(data_dir)?;
        tracing::info!(version = %record.to, "the new runner-manager answers: update confirmed");
        return Ok(());
    }
    let why = format!(
        "runner-manager {} did not answer its version within {} s",
        record.to,
        TRIAL.as_secs()
    );
    tracing::error!(reason = %why, "restoring the previous runner-manager");
    let restored = restore(&record);
    let mut r = record.clone();
    r.phase = Phase::RolledBack;
    r.message = Some(match &restored {
        Ok(()) => format!("{why}; {} was restored", r.from),
        Err(e) => format!("{why}; restoring {} failed: {e}", r.from),
    });
    record::write(data_dir, &r)?;
    // SIGKILL, not SIGTERM: a service manager restarts a unit whose process was killed (and
    // not one that was asked to stop), which brings back the restored build.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    if std::env::var_os("INVOCATION_ID").is_none() {
        // No service manager will restart it: become the restored service.
        wait_gone(pid);
        return Err(exec_service(&r.exe, &r.args));
    }
    Ok(())
}

/// Waits (bounded) until `pid` exited; a zombie has exited (its files, the instance lock
/// among them, are closed) even before its parent reaps it.
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
            .unwrap_or(false)
    };
    while Instant::now() < deadline && alive() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the watchdog of `record` still runs.
pub fn watchdog_alive(record: &UpdateRecord) -> bool {
    record
        .watchdog_pid
        .is_some_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), None).is_ok())
}
