//! The tray restarts itself when its own binary was replaced on disk (a package upgrade or the
//! portable archive's swap put a newer tray in place while this one runs).
//!
//! At start the tray notes which file its executable is ([`Exe::at_start`]: path, device,
//! inode, size, modification time). When the service reports an update (its status read at a
//! (re)connect, or `update_finished`), the follower asks [`Exe::replaced`]: one `stat`, no
//! timer. If the file at that path is another one now, the tray starts the same path with the
//! same arguments and exits. The new process waits for the old one to be gone before it
//! starts (single instance: the old one holds the instance lock until it exits): it gets one
//! end of a socket pair as its stdin and reads it until end-of-file, which comes when the old
//! process, holding the other end, has exited.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Set in a restarted tray's environment: wait for the predecessor (stdin closes) first.
const AFTER_EXIT_ENV: &str = "RUNNER_MANAGER_TRAY_RESTARTED";
/// How long a restarted tray waits for its predecessor at most.
const WAIT_FOR_PREDECESSOR: Duration = Duration::from_secs(30);

/// Which file a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn file_id(path: &Path) -> Option<FileId> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (dev, ino) = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    #[cfg(not(unix))]
    let (dev, ino) = (0, 0);
    Some(FileId {
        dev,
        ino,
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// The tray's executable as it was when the tray started.
#[derive(Debug, Clone)]
pub struct Exe {
    path: PathBuf,
    started: Option<FileId>,
}

impl Exe {
    /// This process's executable, noted now (call at start, before anything can swap it).
    pub fn at_start() -> Option<Exe> {
        let path = std::env::current_exe().ok()?;
        Some(Exe::of(path))
    }

    /// The file at `path`, noted now.
    pub fn of(path: PathBuf) -> Exe {
        let started = file_id(&path);
        Exe { path, started }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether another file is at the path now (renamed over it, or rewritten). A missing
    /// file is not a replacement (mid-swap, or uninstalled): nothing to start.
    pub fn replaced(&self) -> bool {
        match (&self.started, file_id(&self.path)) {
            (Some(then), Some(now)) => *then != now,
            _ => false,
        }
    }
}

/// Starts `exe` with this process's arguments, told to wait until this process is gone.
/// The caller exits right after (`app.exit(0)`).
pub fn spawn_successor(exe: &Exe) -> std::io::Result<()> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (_child, held) = spawn_waiting(exe.path(), &args)?;
    // Held until this process exits: then the successor reads end-of-file.
    std::mem::forget(held);
    Ok(())
}

/// Starts `path args` with the end-of-file wait armed; returns the end whose closing lets it
/// go on.
#[cfg(unix)]
fn spawn_waiting(
    path: &Path,
    args: &[OsString],
) -> std::io::Result<(std::process::Child, std::os::unix::net::UnixStream)> {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    // Both ends close on exec; the child's end becomes its stdin (dup2 keeps it open there).
    let (ours, theirs) = UnixStream::pair()?;
    let child = std::process::Command::new(path)
        .args(args)
        .env(AFTER_EXIT_ENV, "1")
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .spawn()?;
    Ok((child, ours))
}

#[cfg(not(unix))]
fn spawn_waiting(
    path: &Path,
    args: &[OsString],
) -> std::io::Result<(std::process::Child, std::process::ChildStdin)> {
    let mut child = std::process::Command::new(path)
        .args(args)
        .env(AFTER_EXIT_ENV, "1")
        .stdin(std::process::Stdio::piped())
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    Ok((child, stdin))
}

/// In a restarted tray: waits (at most 30 s) until the tray that started it has exited, so
/// its single-instance lock is free. Does nothing in a tray started otherwise.
pub fn wait_for_predecessor() {
    if std::env::var_os(AFTER_EXIT_ENV).is_none() {
        return;
    }
    std::env::remove_var(AFTER_EXIT_ENV);
    let (done, gone) = std::sync::mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("predecessor".to_owned())
        .spawn(move || {
            let _ = wait_for_eof(std::io::stdin().lock());
            let _ = done.send(());
        });
    match reader {
        Ok(_) => {
            if gone.recv_timeout(WAIT_FOR_PREDECESSOR).is_err() {
                tracing::warn!("the previous tray did not exit within 30 s; starting anyway");
            }
        }
        Err(error) => tracing::warn!(%error, "cannot wait for the previous tray"),
    }
}

/// Reads until end-of-file (the other end closed).
fn wait_for_eof(mut r: impl std::io::Read) -> std::io::Result<()> {
    let mut buf = [0u8; 64];
    while r.read(&mut buf)? > 0 {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_renamed_over_the_path_is_a_replacement_a_missing_one_is_not() {
        let dir = tempfile_dir();
        let path = dir.join("runner-manager-tray");
        std::fs::write(&path, b"old tray").unwrap();
        let exe = Exe::of(path.clone());
        assert!(!exe.replaced(), "the same file");
        // Read again, touched by nothing: still the same.
        assert!(!Exe::of(path.clone()).replaced());

        // A package upgrade or the portable swap: a new file renamed over the path.
        let staged = dir.join("runner-manager-tray.new");
        std::fs::write(&staged, b"new tray").unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert!(exe.replaced(), "another file at the path");

        // Removed (mid-swap, uninstalled): nothing to start.
        let gone = Exe::of(dir.join("absent"));
        assert!(!gone.replaced());
        std::fs::remove_file(&path).unwrap();
        assert!(!exe.replaced());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_successor_waits_until_the_other_end_is_gone() {
        use std::os::unix::net::UnixStream;
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = wait_for_eof(theirs);
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "still waiting while the predecessor lives"
        );
        drop(ours);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("end-of-file once the predecessor is gone");
    }

    #[cfg(unix)]
    #[test]
    fn a_restarted_process_gets_the_arguments_and_starts_once_its_predecessor_is_gone() {
        // A real process in the successor's place: a shell that waits as the tray does (reads
        // its stdin to the end), then records its arguments and the marker variable.
        let dir = tempfile_dir();
        let out = dir.join("out");
        let script = dir.join("successor.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ncat >/dev/null\necho \"$* $RUNNER_MANAGER_TRAY_RESTARTED\" > {}\n",
                out.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let args = [OsString::from("--socket"), OsString::from("/s p")];
        let (mut child, held) = spawn_waiting(&script, &args).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            child.try_wait().unwrap().is_none() && !out.exists(),
            "the successor waits while the predecessor lives"
        );
        // The predecessor exits (its end closes).
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the successor never went on"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success());
        assert_eq!(
            std::fs::read_to_string(&out).unwrap().trim(),
            "--socket /s p 1"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rm-tray-relaunch-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
