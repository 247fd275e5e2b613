//! Layers over the shared caches: what a job writes in a shared cache goes to a layer of its
//! runner's own, and reaches the cache only when GitHub's word on the job makes it trusted.
//!
//! Each shared cache directory a runner is given is covered by an overlay (the kernel's
//! overlayfs) in a mount namespace of the runner's own, mounted between fork and exec while the
//! child is still root: the cache is the lower layer, read as it is; an upper layer under the
//! service-only `<runner root>/.layers/<runtime>/<n>/` takes every write, copy-up and deletion
//! (a deletion is a whiteout there). No other process sees the overlay, and the job cannot
//! reach the upper layer but through it.
//!
//! When the runner is scrubbed, after everything of its job has ended:
//! - **trusted** (the repository's own code on a push, schedule, dispatch…): the layer is
//!   committed into the cache, entry by entry, by renames that never follow a link;
//! - **anything else**: a fork's pull request, a job whose origin could not be established,
//!   a runner that ran no job, and a same-repository pull request (written by someone with
//!   write access but not reviewed; a runner starts before GitHub tells it which job it gets,
//!   so no layer of that branch could be shown to the branch's next job, and what it wrote is
//!   never read by the default branch's jobs) — the layer is dropped with the runtime.
//!
//! Who mounts them:
//! - **as root** (the system service), the runner's child between fork and exec, before it
//!   drops to the runner's uid ([`LayerMounts::apply_to`]): every runner, walled or not;
//! - **as you** (the per-user service), inside the sandbox's chain: pasta's child is root of
//!   pasta's user namespace, so `unshare --mount` there mounts the overlays (`userxattr`) and
//!   execs bwrap ([`LayerMounts::chain_args`]). A target with the sandbox off has no such
//!   namespace, so its runners write the caches directly, under the older rule (a runner that
//!   may take a fork's job works on private copies; a namespace an untrusted job could write is
//!   removed after it). The doctor's `cache_layers` check says which applies.
//!
//! The commit changes the cache while other runners may have it as a lower layer; the kernel
//! does not promise what they then see of the changed entries (it never crashes for it). A
//! job reading a cache another job is writing had the same race before layers.

use super::{io_at, CachesError};
use rm_core::{CheckState, HostCheck};
use std::ffi::{CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The directory under the runner root (a runtime name never starts with '.').
pub const LAYERS_DIR: &str = ".layers";
/// The doctor's check id.
pub const LAYERS_CHECK: &str = "cache_layers";
/// Which cache each numbered layer covers, one absolute path per line.
const LOWERS_FILE: &str = "lowers";
/// `LOWERS_FILE`'s name once the layers are committed or dropped: the runtime had layers
/// (so a retried scrub never takes it for a runner that wrote the caches directly) until
/// [`Layers::forget`].
const FINISHED_FILE: &str = "finished";
const UPPER: &str = "upper";
const WORK: &str = "work";
/// The marker overlayfs sets on a directory that hides what the lower one held (made again
/// after a removal): `trusted.` as root, `user.` in a user namespace's mount.
const OPAQUE_XATTRS: [&[u8]; 2] = [b"trusted.overlay.opaque\0", b"user.overlay.opaque\0"];

/// One runner root's layers.
#[derive(Debug)]
pub struct Layers {
    dir: PathBuf,
    mounter: Mounter,
    /// One commit or drop at a time: two commits into one cache never interleave.
    lock: Mutex<()>,
}

/// Who mounts a runner's layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mounter {
    /// The service is root: the runner's child, before its identity switch.
    Root,
    /// The per-user service: `unshare` (util-linux) and `mount` inside the sandbox's user
    /// namespace, between pasta and bwrap.
    UserNamespace { unshare: PathBuf, mount: PathBuf },
}

/// The overlays to mount for one runner, built before the spawn (the child allocates
/// nothing).
#[derive(Debug, Clone)]
pub struct LayerMounts {
    mounter: Mounter,
    mounts: Vec<Overlay>,
}

#[derive(Debug, Clone)]
struct Overlay {
    target: CString,
    options: CString,
}

/// What finishing a runtime's layers did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Finished {
    /// Entries moved into the caches (a directory new to the cache counts once).
    pub moved: u64,
    /// Entries the job removed from the caches (its layer's whiteouts).
    pub removed: u64,
    /// Whether anything was written at all (what was dropped, when not kept).
    pub written: bool,
}

/// Mounts each `OPTIONS TARGET` pair after the `mount` program, then execs what follows `--`
/// (bwrap). A mount that fails ends the chain: the runner does not start without its layers.
const MOUNT_SCRIPT: &str = r#"m=$1; shift
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
  "$m" -t overlay -o "$1" overlay "$2" || { echo "runner-manager: a cache layer could not be mounted on $2" >&2; exit 125; }
  shift 2
done
shift
exec "$@""#;

impl LayerMounts {
    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    /// Whether they are mounted inside the sandbox's chain ([`LayerMounts::chain_args`]),
    /// not between fork and exec.
    pub fn in_chain(&self) -> bool {
        matches!(self.mounter, Mounter::UserNamespace { .. })
    }

    /// The per-user service's: the programs and arguments that mount the layers inside the
    /// sandbox's user namespace and then exec what follows them (bwrap's command line).
    pub fn chain_args(&self) -> Vec<std::ffi::OsString> {
        let Mounter::UserNamespace { unshare, mount } = &self.mounter else {
            return Vec::new();
        };
        let mut a: Vec<std::ffi::OsString> = vec![
            unshare.clone().into(),
            "--mount".into(),
            "--propagation".into(),
            "slave".into(),
            "--".into(),
            SH.into(),
            "-c".into(),
            MOUNT_SCRIPT.into(),
            "layers".into(),
            mount.clone().into(),
        ];
        for m in &self.mounts {
            a.push(OsStr::from_bytes(m.options.as_bytes()).to_owned());
            a.push(OsStr::from_bytes(m.target.as_bytes()).to_owned());
        }
        a.push("--".into());
        a
    }

    /// Mounts the overlays in `cmd`'s child between fork and exec. Register it before any
    /// identity switch: mounting needs root.
    #[allow(unsafe_code)]
    pub fn apply_to(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        if self.in_chain() {
            return;
        }
        let mounts = self.clone();
        // SAFETY: `mount_in_child` makes only the async-signal-safe syscalls unshare and
        // mount on strings built before the fork, allocating nothing.
        unsafe {
            cmd.pre_exec(move || mounts.mount_in_child());
        }
    }

    /// In the forked child, before exec and before the identity switch: a mount namespace of
    /// its own (no mount propagates back to the host's), then each overlay.
    #[allow(unsafe_code)]
    fn mount_in_child(&self) -> io::Result<()> {
        if self.mounts.is_empty() {
            return Ok(());
        }
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: unshare and mount are plain syscalls, async-signal-safe; every pointer is
        // to a NUL-terminated string built before the fork and alive for the call.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            for m in &self.mounts {
                check(libc::mount(
                    c"overlay".as_ptr(),
                    m.target.as_ptr(),
                    c"overlay".as_ptr(),
                    0,
                    m.options.as_ptr().cast(),
                ))?;
            }
        }
        Ok(())
    }
}

/// Characters the overlay's mount options cannot take in a path without escapes the kernels
/// do not all read alike: such a path gets no layer (refused, with the reason).
fn usable_in_options(path: &Path) -> bool {
    !path
        .as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | b'\n' | 0))
}

fn options(
    lower: &Path,
    upper: &Path,
    work: &Path,
    mounter: &Mounter,
) -> Result<CString, CachesError> {
    for p in [lower, upper, work] {
        if !usable_in_options(p) {
            return Err(io_at(p)(io::Error::other(
                "a cache layer cannot be mounted on a path with ',', ':' or '\\' in it; \
                 choose a runner root without them",
            )));
        }
    }
    let mut o = b"lowerdir=".to_vec();
    o.extend_from_slice(lower.as_os_str().as_bytes());
    o.extend_from_slice(b",upperdir=");
    o.extend_from_slice(upper.as_os_str().as_bytes());
    o.extend_from_slice(b",workdir=");
    o.extend_from_slice(work.as_os_str().as_bytes());
    // No redirects, metacopies or index: the upper layer then holds whole files and plain
    // directories only, which the commit moves as they are.
    o.extend_from_slice(b",redirect_dir=nofollow,metacopy=off,index=off");
    if let Mounter::UserNamespace { .. } = mounter {
        // Its markers as `user.` attributes: a user namespace may not set `trusted.` ones.
        o.extend_from_slice(b",userxattr");
    }
    CString::new(o).map_err(|_| io_at(lower)(io::Error::other("a NUL in the path")))
}

impl Layers {
    /// The layers under `runner_root`, after a probe mount shows this host can build them.
    pub fn open(runner_root: &Path) -> Result<Layers, Unavailable> {
        let mounter = if nix::unistd::geteuid().is_root() {
            Mounter::Root
        } else {
            let find = crate::sandbox::find_program;
            match (find("unshare"), find("mount")) {
                (Some(unshare), Some(mount)) => Mounter::UserNamespace { unshare, mount },
                _ => return Err(Unavailable::NoTools),
            }
        };
        let dir = runner_root.join(LAYERS_DIR);
        let layers = Layers {
            dir,
            mounter,
            lock: Mutex::new(()),
        };
        layers
            .make_dir()
            .map_err(|e| Unavailable::Setup(e.to_string()))?;
        layers.probe()?;
        Ok(layers)
    }

    fn make_dir(&self) -> Result<(), CachesError> {
        match fs::create_dir(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_at(&self.dir)(e)),
        }
        let m = fs::symlink_metadata(&self.dir).map_err(io_at(&self.dir))?;
        if !m.is_dir() {
            return Err(io_at(&self.dir)(io::Error::other(
                "expected a directory (not a link); remove it and try again",
            )));
        }
        // The service's alone: no job may reach an upper layer but through its overlay.
        if m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o7777 != 0o700 {
            std::os::unix::fs::lchown(&self.dir, Some(nix::unistd::geteuid().as_raw()), None)
                .map_err(io_at(&self.dir))?;
            fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
                .map_err(io_at(&self.dir))?;
        }
        Ok(())
    }

    /// Mounts a layer over a scratch cache in a throw-away child, as a runner's spawn does.
    fn probe(&self) -> Result<(), Unavailable> {
        const NAME: &str = ".probe";
        let lower = self.dir.join(format!("{NAME}-cache"));
        let setup = || -> Result<LayerMounts, CachesError> {
            let _ = super::fsutil::remove_any(&lower);
            fs::create_dir(&lower).map_err(io_at(&lower))?;
            fs::write(lower.join("kept"), b"x").map_err(io_at(&lower))?;
            self.prepare(NAME, std::slice::from_ref(&lower))
        };
        let mounts = setup().map_err(|e| Unavailable::Setup(e.to_string()))?;
        let target = lower.join("written");
        let writer = [SH, "-c", "echo x > \"$1\"", "sh"];
        let mut cmd = match &self.mounter {
            Mounter::Root => {
                let mut cmd = std::process::Command::new(SH);
                cmd.args(&writer[1..]);
                mounts.apply_to(&mut cmd);
                cmd
            }
            Mounter::UserNamespace { unshare, .. } => {
                // A user namespace of its own stands in for pasta's.
                let mut cmd = std::process::Command::new(unshare);
                cmd.args(["--user", "--map-root-user", "--"])
                    .args(mounts.chain_args())
                    .args(writer);
                cmd
            }
        };
        cmd.arg(&target)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let outcome = cmd.status();
        let written_below = lower.join("written").exists();
        let in_layer = self.written(NAME);
        let _ = self.finish(NAME, false).and_then(|_| self.forget(NAME));
        let _ = super::fsutil::remove_any(&lower);
        match outcome {
            Ok(s) if s.success() && !written_below && in_layer => Ok(()),
            Ok(_) if written_below => Err(Unavailable::Mount(
                "a write through the probe's layer reached the cache below it".to_owned(),
            )),
            Ok(s) => Err(Unavailable::Mount(format!("the probe ended with {s}"))),
            Err(e) => Err(Unavailable::Mount(e.to_string())),
        }
    }

    /// Whether a runner without the sandbox gets layers too (the root service's do; the
    /// per-user service mounts them inside the sandbox's user namespace).
    pub fn without_sandbox(&self) -> bool {
        self.mounter == Mounter::Root
    }

    fn base(&self, runtime: &str) -> PathBuf {
        self.dir.join(runtime)
    }

    /// Makes a layer for each of `lowers` (the shared caches `runtime` is given) and records
    /// which is which, so the scrub commits or drops them even after a restart.
    pub fn prepare(&self, runtime: &str, lowers: &[PathBuf]) -> Result<LayerMounts, CachesError> {
        let base = self.base(runtime);
        // A name is never reused; what is there was left by a spawn that failed.
        super::fsutil::remove_any(&base)?;
        private_dir(&base)?;
        let mut list = Vec::new();
        let mut mounts = Vec::new();
        for (i, lower) in lowers.iter().enumerate() {
            let meta = fs::symlink_metadata(lower).map_err(io_at(lower))?;
            if !meta.is_dir() {
                return Err(io_at(lower)(io::Error::other(
                    "a shared cache is not a directory",
                )));
            }
            let layer = base.join(i.to_string());
            let (upper, work) = (layer.join(UPPER), layer.join(WORK));
            for d in [&layer, &upper, &work] {
                private_dir(d)?;
            }
            // The overlay's top directory takes its owner and mode from the upper layer's:
            // the same as the cache's, so the job may do there what it could before.
            std::os::unix::fs::lchown(&upper, Some(meta.uid()), Some(meta.gid()))
                .map_err(io_at(&upper))?;
            fs::set_permissions(&upper, fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(io_at(&upper))?;
            mounts.push(Overlay {
                target: CString::new(lower.as_os_str().as_bytes())
                    .map_err(|_| io_at(lower)(io::Error::other("a NUL in the path")))?,
                options: options(lower, &upper, &work, &self.mounter)?,
            });
            list.extend_from_slice(lower.as_os_str().as_bytes());
            list.push(b'\n');
        }
        let file = base.join(LOWERS_FILE);
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&file)
                .map_err(io_at(&file))?;
            f.write_all(&list).map_err(io_at(&file))?;
        }
        Ok(LayerMounts {
            mounter: self.mounter.clone(),
            mounts,
        })
    }

    /// Whether `runtime` was given layers (finished or not, until [`Layers::forget`]).
    pub fn has(&self, runtime: &str) -> bool {
        let base = self.base(runtime);
        base.join(LOWERS_FILE).exists() || base.join(FINISHED_FILE).exists()
    }

    /// The caches `runtime`'s layers cover, from its record (`None`: no layers).
    fn lowers(&self, runtime: &str) -> Option<Vec<PathBuf>> {
        let text = fs::read(self.base(runtime).join(LOWERS_FILE)).ok()?;
        Some(
            text.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| PathBuf::from(OsStr::from_bytes(l)))
                .collect(),
        )
    }

    /// Whether the job wrote anything in a layer of `runtime`'s (an unreadable layer counts
    /// as written: what it holds costs a verdict).
    pub fn written(&self, runtime: &str) -> bool {
        let Some(lowers) = self.lowers(runtime) else {
            return false;
        };
        (0..lowers.len()).any(|i| {
            let upper = self.base(runtime).join(i.to_string()).join(UPPER);
            fs::read_dir(&upper).map_or(true, |mut d| d.next().is_some())
        })
    }

    /// Commits `runtime`'s layers into the caches below them when `keep`, and removes them
    /// either way; [`Layers::has`] stays true until [`Layers::forget`]. Call only once
    /// nothing of the job runs. A commit that fails part way leaves the rest of the layer to
    /// the next try (what moved stays moved). Finishing again does nothing.
    pub fn finish(&self, runtime: &str, keep: bool) -> Result<Finished, CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let base = self.base(runtime);
        let mut done = Finished::default();
        let Some(lowers) = self.lowers(runtime) else {
            // Finished already (a retried scrub), or never prepared in full (a spawn that
            // failed half way): nothing to keep.
            if !base.join(FINISHED_FILE).exists() {
                super::fsutil::remove_any(&base)?;
            }
            return Ok(done);
        };
        done.written = self.written(runtime);
        if keep {
            for (i, lower) in lowers.iter().enumerate() {
                let upper = base.join(i.to_string()).join(UPPER);
                if fs::symlink_metadata(lower).is_ok_and(|m| m.is_dir()) && upper.is_dir() {
                    merge_dir(&upper, lower, &mut done)?;
                }
            }
        }
        for i in 0..lowers.len() {
            super::fsutil::remove_any(&base.join(i.to_string()))?;
        }
        let (from, to) = (base.join(LOWERS_FILE), base.join(FINISHED_FILE));
        fs::rename(&from, &to).map_err(io_at(&to))?;
        Ok(done)
    }

    /// Removes what is left of `runtime`'s layers (the scrub's last step).
    pub fn forget(&self, runtime: &str) -> Result<(), CachesError> {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        super::fsutil::remove_any(&self.base(runtime))
    }

    /// Drops the layers of runtimes `live` does not name (left by a run of the service that
    /// ended before their scrub removed the runtime): nothing in them is trusted any more.
    pub fn sweep(&self, live: impl Fn(&str) -> bool) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if live(&name) {
                continue;
            }
            match self.finish(&name, false).and_then(|_| self.forget(&name)) {
                Ok(()) => dropped.push(name),
                Err(err) => {
                    tracing::warn!(layer = %name, error = %err, "a cache layer left by an earlier run could not be removed")
                }
            }
        }
        dropped
    }
}

/// Makes `dir` for the service alone, whatever the umask.
fn private_dir(dir: &Path) -> Result<(), CachesError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io_at(dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_at(dir))
}

/// The probe's writer.
const SH: &str = "/bin/sh";

/// Moves what `upper` holds into `lower` (a real directory), never following a link on
/// either side: a whiteout removes the cache's entry, an opaque directory replaces the
/// cache's, a directory the cache has is merged into, anything else replaces the cache's
/// entry by a rename. Fifos, sockets and devices are not cache content: they stay in the
/// layer and go with it.
fn merge_dir(upper: &Path, lower: &Path, done: &mut Finished) -> Result<(), CachesError> {
    let entries = fs::read_dir(upper).map_err(io_at(upper))?;
    for entry in entries {
        let entry = entry.map_err(io_at(upper))?;
        let name = entry.file_name();
        let (from, to) = (upper.join(&name), lower.join(&name));
        let meta = fs::symlink_metadata(&from).map_err(io_at(&from))?;
        let kind = meta.file_type();
        let below = fs::symlink_metadata(&to).ok();
        if kind.is_char_device() && meta.rdev() == 0 {
            if below.is_some() {
                super::fsutil::remove_any(&to)?;
                done.removed += 1;
            }
            continue;
        }
        if kind.is_dir() {
            if below.as_ref().is_some_and(fs::Metadata::is_dir) && !is_opaque(&from) {
                merge_dir(&from, &to, done)?;
                same_owner_and_mode(&meta, &to)?;
                continue;
            }
            if below.is_some() {
                super::fsutil::remove_any(&to)?;
                done.removed += 1;
            }
            clear_opaque(&from);
            fs::rename(&from, &to).map_err(io_at(&to))?;
            done.moved += 1;
            continue;
        }
        if kind.is_file() || kind.is_symlink() {
            if below.as_ref().is_some_and(fs::Metadata::is_dir) {
                super::fsutil::remove_any(&to)?;
            }
            if kind.is_file() && meta.mode() & 0o6000 != 0 {
                // A set-id bit planted in a cache would lend the writer's identity to the
                // next job that runs the file.
                fs::set_permissions(&from, fs::Permissions::from_mode(meta.mode() & 0o1777))
                    .map_err(io_at(&from))?;
            }
            fs::rename(&from, &to).map_err(io_at(&to))?;
            done.moved += 1;
        }
    }
    Ok(())
}

/// A directory merged into the cache keeps the owner and mode the job gave it.
fn same_owner_and_mode(upper: &fs::Metadata, lower: &Path) -> Result<(), CachesError> {
    let now = fs::symlink_metadata(lower).map_err(io_at(lower))?;
    if now.uid() != upper.uid() || now.gid() != upper.gid() {
        std::os::unix::fs::lchown(lower, Some(upper.uid()), Some(upper.gid()))
            .map_err(io_at(lower))?;
    }
    let mode = upper.mode() & 0o3777;
    if now.mode() & 0o7777 != mode {
        fs::set_permissions(lower, fs::Permissions::from_mode(mode)).map_err(io_at(lower))?;
    }
    Ok(())
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

#[allow(unsafe_code)]
fn is_opaque(dir: &Path) -> bool {
    let Some(p) = c_path(dir) else {
        return false;
    };
    OPAQUE_XATTRS.iter().any(|name| {
        let mut value = [0u8; 4];
        // SAFETY: both strings are NUL-terminated, the buffer's length is passed with it.
        let n = unsafe {
            libc::lgetxattr(
                p.as_ptr(),
                name.as_ptr().cast(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n == 1 && value[0] == b'y'
    })
}

#[allow(unsafe_code)]
fn clear_opaque(dir: &Path) {
    let Some(p) = c_path(dir) else {
        return;
    };
    for name in OPAQUE_XATTRS {
        // SAFETY: both strings are NUL-terminated. A missing attribute is fine.
        unsafe {
            libc::lremovexattr(p.as_ptr(), name.as_ptr().cast());
        }
    }
}

/// Why a host gets no layers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("`unshare` or `mount` is not installed")]
    NoTools,
    #[error("the layers' directory could not be set up: {0}")]
    Setup(String),
    #[error("a layer could not be mounted: {0}")]
    Mount(String),
}

impl Unavailable {
    pub fn fix(&self) -> String {
        match self {
            Unavailable::NoTools => "install util-linux and mount (`sudo apt install util-linux \
                                     mount`)"
                .to_owned(),
            Unavailable::Setup(_) => {
                "check that the runner root is writable by the service".to_owned()
            }
            Unavailable::Mount(_) if nix::unistd::geteuid().is_root() => {
                "load the kernel's overlay module (`sudo modprobe overlay`) and keep \
                 CAP_SYS_ADMIN in the service's unit (runner-manager's own unit has it)"
                    .to_owned()
            }
            Unavailable::Mount(_) => "load the kernel's overlay module (`sudo modprobe overlay`); \
                                      as you, an overlay needs Linux 5.11 or later and \
                                      unprivileged user namespaces (the sandbox needs them too)"
                .to_owned(),
        }
    }
}

#[derive(Debug, Default)]
enum State {
    /// Not asked for (tests, tools): shared caches are written directly.
    #[default]
    Unwanted,
    Wanted,
    On(Arc<Layers>),
    Off(Unavailable),
}

/// A runner host's cache layers: wanted or not, and what setting them up gave. Shared: the
/// doctor reads what the host set up.
#[derive(Debug, Clone, Default)]
pub struct CacheLayers(Arc<Mutex<State>>);

impl CacheLayers {
    /// Layers, set up by [`CacheLayers::set_up`] (the service's).
    pub fn wanted() -> CacheLayers {
        CacheLayers(Arc::new(Mutex::new(State::Wanted)))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the layers up under `runner_root`, once, when wanted.
    pub fn set_up(&self, runner_root: &Path) -> Option<Arc<Layers>> {
        let mut state = self.state();
        if let State::Wanted = *state {
            *state = match Layers::open(runner_root) {
                Ok(l) => {
                    tracing::info!("what a job writes in the shared caches goes to a layer of its own, kept only for a trusted job");
                    State::On(Arc::new(l))
                }
                Err(e) => {
                    tracing::warn!(reason = %e, fix = %e.fix(), "jobs write the shared caches directly (an untrusted job's writes are removed after it)");
                    State::Off(e)
                }
            };
        }
        match &*state {
            State::On(l) => Some(Arc::clone(l)),
            _ => None,
        }
    }

    /// The doctor's check.
    pub fn check(&self) -> HostCheck {
        let (state, detail, fix) = match &*self.state() {
            State::On(l) => (
                CheckState::Pass,
                format!(
                    "what a job writes in the shared caches goes to a layer of its own; only a \
                     trusted job's (the repository's own code, not a pull request) reaches the \
                     caches{}",
                    if l.without_sandbox() {
                        ""
                    } else {
                        " (targets set to run without the sandbox write them directly)"
                    }
                ),
                None,
            ),
            State::Off(e) => (
                CheckState::Warn,
                format!(
                    "{e}: jobs write the shared caches directly; a runner that may take a fork's \
                     job gets private copies, and caches an untrusted job could write are \
                     removed after it"
                ),
                Some(e.fix()),
            ),
            State::Unwanted | State::Wanted => (
                CheckState::Skipped,
                "the running service sets the layers up and checks them: run `runner-manager \
                 host doctor` while it runs"
                    .to_owned(),
                None,
            ),
        };
        HostCheck {
            id: LAYERS_CHECK.to_owned(),
            title: "Untrusted jobs cannot change the caches".to_owned(),
            state,
            required: false,
            detail,
            fix,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (upper, lower, outside) = (t.path().join("u"), t.path().join("l"), t.path().join("o"));
        for d in [&upper, &lower, &outside] {
            fs::create_dir(d).unwrap();
        }
        (t, upper, lower, outside)
    }

    // Layers made by hand (no mount): what a job could leave in its upper layer, against a
    // cache holding links an earlier job planted.
    #[test]
    fn a_commit_replaces_a_link_in_the_cache_and_never_writes_through_it() {
        let (_t, upper, lower, outside) = dirs();
        symlink(&outside, lower.join("x")).unwrap();
        fs::create_dir(upper.join("x")).unwrap();
        fs::write(upper.join("x/planted"), "p").unwrap();
        symlink(&outside, lower.join("f")).unwrap();
        fs::write(upper.join("f"), "file").unwrap();
        let mut done = Finished::default();
        merge_dir(&upper, &lower, &mut done).unwrap();
        assert!(
            fs::read_dir(&outside).unwrap().next().is_none(),
            "nothing written through a link"
        );
        assert!(fs::symlink_metadata(lower.join("x")).unwrap().is_dir());
        assert_eq!(fs::read_to_string(lower.join("x/planted")).unwrap(), "p");
        assert!(fs::symlink_metadata(lower.join("f")).unwrap().is_file());
        assert_eq!(done.moved, 2);
    }

    #[test]
    fn a_link_in_the_layer_is_moved_as_a_link_and_a_directory_it_replaces_goes() {
        let (_t, upper, lower, outside) = dirs();
        fs::create_dir(lower.join("d")).unwrap();
        fs::write(lower.join("d/old"), "o").unwrap();
        symlink(&outside, upper.join("d")).unwrap();
        let mut done = Finished::default();
        merge_dir(&upper, &lower, &mut done).unwrap();
        assert!(fs::symlink_metadata(lower.join("d")).unwrap().is_symlink());
        assert!(fs::read_dir(&outside).unwrap().next().is_none());
    }

    #[test]
    fn set_id_bits_do_not_reach_the_cache() {
        let (_t, upper, lower, _) = dirs();
        let f = upper.join("tool");
        fs::write(&f, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o6755)).unwrap();
        let mut done = Finished::default();
        merge_dir(&upper, &lower, &mut done).unwrap();
        let mode = fs::metadata(lower.join("tool")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o755, "{mode:o}");
    }

    #[test]
    fn a_directory_the_cache_has_is_merged_not_replaced() {
        let (_t, upper, lower, _) = dirs();
        fs::create_dir(lower.join("d")).unwrap();
        fs::write(lower.join("d/kept"), "k").unwrap();
        fs::create_dir(upper.join("d")).unwrap();
        fs::write(upper.join("d/new"), "n").unwrap();
        let mut done = Finished::default();
        merge_dir(&upper, &lower, &mut done).unwrap();
        assert_eq!(fs::read_to_string(lower.join("d/kept")).unwrap(), "k");
        assert_eq!(fs::read_to_string(lower.join("d/new")).unwrap(), "n");
        assert_eq!((done.moved, done.removed), (1, 0));
    }

    #[test]
    fn paths_the_mount_options_cannot_carry_are_refused() {
        let ok = Path::new("/var/lib/runner-manager/runners/.caches/deps");
        assert!(options(ok, ok, ok, &Mounter::Root).is_ok());
        for bad in ["/a,b", "/a:b", "/a\\b"] {
            let e = options(Path::new(bad), ok, ok, &Mounter::Root)
                .unwrap_err()
                .to_string();
            assert!(e.contains("runner root without them"), "{e}");
        }
    }
}
