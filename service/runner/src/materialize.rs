//! Filling a runtime from a cached package as fast as the filesystem allows: a reflink
//! (copy-on-write clone) per file where supported, otherwise a copy spread over a few threads.
//! Exec bits are kept, symlinks stay links (pointing inside the runtime).

use crate::package::extract::stays_inside;
use crate::runtime::Ownership;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The method asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMethod {
    /// Clone when the filesystem supports it (probed once), else a parallel copy.
    Auto,
    /// Clone every file (small ones are written: see `copy_one`); fail if the filesystem cannot.
    Clone,
    /// Plain copies on several threads.
    ParallelCopy,
    /// Plain copies on the calling thread (the baseline the benchmark compares against).
    SerialCopy,
}

/// The method that was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsedMethod {
    Clone,
    ParallelCopy,
    SerialCopy,
}

#[derive(Debug, Clone)]
pub struct MaterializeOptions {
    pub method: CopyMethod,
    /// Worker threads for copies/clones (see [`default_threads`]).
    pub threads: usize,
    /// Chown everything to this identity (the runner's), when set.
    pub owner: Option<Ownership>,
}

/// Worker threads for a materialization: one per core, between 2 and 8. With a warm package
/// each file is a few metadata syscalls that keep a core busy in the filesystem (inode
/// allocation, journal commit); more threads than cores get preempted while holding the
/// allocation-group and log locks the others then wait for (measured on xfs, 2 cores: 2
/// threads 185 ms, 4 threads 218 ms — see BENCHMARKS.md).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 8)
}

impl Default for MaterializeOptions {
    fn default() -> Self {
        Self {
            method: CopyMethod::Auto,
            threads: default_threads(),
            owner: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaterializeReport {
    pub method: UsedMethod,
    pub files: usize,
    pub dirs: usize,
    pub links: usize,
    pub bytes: u64,
    pub threads: usize,
    pub elapsed: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum MaterializeError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: this filesystem cannot clone files ({source}); use CopyMethod::Auto")]
    CloneUnsupported {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: symlink points outside the package; the cached package is not trusted")]
    LinkEscapes { path: PathBuf },
    #[error("{path}: special files (devices, sockets, fifos) are not allowed in a runner package")]
    SpecialFile { path: PathBuf },
    #[error("runtime {path} is not empty; materialize into a fresh runtime")]
    NotEmpty { path: PathBuf },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> MaterializeError + '_ {
    move |source| MaterializeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One directory of the package: where it is, its mode, and the names of its regular files.
/// Files are named relative to their directory so the copy can open them with `openat` on
/// the directory's descriptor (one path component to resolve instead of the whole path).
struct DirNode {
    /// Relative to the package root; empty for the root itself.
    rel: PathBuf,
    mode: u32,
    files: Vec<OsString>,
}

struct Tree {
    /// The root first, then parents before children.
    dirs: Vec<DirNode>,
    /// Relative link paths with their targets.
    links: Vec<(PathBuf, PathBuf)>,
}

impl Tree {
    fn file_count(&self) -> usize {
        self.dirs.iter().map(|d| d.files.len()).sum()
    }
}

/// Lists the package. Only directories are `stat`ed (for their modes): a file's type comes
/// from its directory entry and its mode and size from `fstat` on the descriptor the copy
/// opens anyway, on the worker threads.
fn scan(root: &Path) -> Result<Tree, MaterializeError> {
    let mut tree = Tree {
        dirs: vec![DirNode {
            rel: PathBuf::new(),
            mode: 0o755,
            files: Vec::new(),
        }],
        links: Vec::new(),
    };
    let mut next = 0;
    while next < tree.dirs.len() {
        let rel = tree.dirs[next].rel.clone();
        let abs = root.join(&rel);
        let mut files = Vec::new();
        for entry in fs::read_dir(&abs).map_err(io_at(&abs))? {
            let entry = entry.map_err(io_at(&abs))?;
            // The type comes from the directory entry itself (no stat unless the filesystem
            // leaves it unknown, and then `lstat`: links are never followed).
            let kind = entry.file_type().map_err(|e| io_at(&entry.path())(e))?;
            if kind.is_file() {
                files.push(entry.file_name());
            } else if kind.is_dir() {
                // `DirEntry::metadata` does not follow links: a racing swap cannot smuggle one in.
                let meta = entry.metadata().map_err(io_at(&entry.path()))?;
                if !meta.is_dir() {
                    return Err(MaterializeError::SpecialFile { path: entry.path() });
                }
                tree.dirs.push(DirNode {
                    rel: rel.join(entry.file_name()),
                    mode: meta.permissions().mode() & 0o7777,
                    files: Vec::new(),
                });
            } else if kind.is_symlink() {
                let target = fs::read_link(entry.path()).map_err(io_at(&entry.path()))?;
                tree.links.push((rel.join(entry.file_name()), target));
            } else {
                return Err(MaterializeError::SpecialFile { path: entry.path() });
            }
        }
        tree.dirs[next].files = files;
        next += 1;
    }
    Ok(tree)
}

/// Files per unit of work. A worker takes one directory's files (or a slice of a big
/// directory's) at a time, so the threads mostly create files in *different* directories:
/// creations in one directory serialize on its lock, and xfs spreads directories over
/// allocation groups.
const CHUNK: usize = 64;

/// Copies the package at `package` into the existing, empty runtime directory `runtime`.
pub fn materialize(
    package: &Path,
    runtime: &Path,
    options: &MaterializeOptions,
) -> Result<MaterializeReport, MaterializeError> {
    let started = Instant::now();
    if fs::read_dir(runtime)
        .map_err(io_at(runtime))?
        .next()
        .is_some()
    {
        return Err(MaterializeError::NotEmpty {
            path: runtime.to_path_buf(),
        });
    }
    let tree = scan(package)?;

    // Links first are checked, so a bad package fails before any copying.
    let mut links = Vec::with_capacity(tree.links.len());
    for (rel, target) in &tree.links {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let target = if target.is_absolute() {
            // An absolute link into the package is rewritten to the same place in the runtime.
            match target.strip_prefix(package) {
                Ok(inside) => runtime.join(inside),
                Err(_) => {
                    return Err(MaterializeError::LinkEscapes {
                        path: package.join(rel),
                    })
                }
            }
        } else if stays_inside(parent, target) {
            target.clone()
        } else {
            return Err(MaterializeError::LinkEscapes {
                path: package.join(rel),
            });
        };
        links.push((runtime.join(rel), target));
    }

    let umask = current_umask();
    // Directories get their final mode and owner right away (the cache's are read-only;
    // owner access is always kept so the runner can write into its own tree and scrub can
    // remove it — and so can we, while filling it).
    for dir in tree.dirs.iter().skip(1) {
        let dst = runtime.join(&dir.rel);
        let mode = (dir.mode | 0o700) & 0o755;
        fs::DirBuilder::new()
            .mode(mode)
            .create(&dst)
            .map_err(io_at(&dst))?;
        if let Some(o) = options.owner {
            std::os::unix::fs::lchown(&dst, Some(o.uid), Some(o.gid)).map_err(io_at(&dst))?;
        }
        if mode & umask != 0 {
            fs::set_permissions(&dst, fs::Permissions::from_mode(mode)).map_err(io_at(&dst))?;
        }
    }

    let files = tree.file_count();
    let method = match options.method {
        CopyMethod::SerialCopy => UsedMethod::SerialCopy,
        CopyMethod::ParallelCopy => UsedMethod::ParallelCopy,
        CopyMethod::Clone => UsedMethod::Clone,
        CopyMethod::Auto => probe_clone(package, runtime, &tree)?,
    };
    let chunks: Vec<(usize, Range<usize>)> = tree
        .dirs
        .iter()
        .enumerate()
        .flat_map(|(d, dir)| {
            (0..dir.files.len())
                .step_by(CHUNK)
                .map(move |start| (d, start..(start + CHUNK).min(dir.files.len())))
        })
        .collect();
    let threads = match method {
        UsedMethod::SerialCopy => 1,
        _ => options.threads.clamp(1, 64).min(chunks.len().max(1)),
    };

    let job = Job {
        package,
        runtime,
        tree: &tree,
        method,
        owner: options.owner,
        umask,
    };
    let bytes = AtomicU64::new(0);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<MaterializeError>> = Mutex::new(None);
    let work = || {
        let mut buf = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((d, range)) = chunks.get(i) else {
                break;
            };
            match job.copy_chunk(*d, range.clone(), &mut buf, &failed) {
                Ok(n) => {
                    bytes.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    if let Ok(mut f) = failure.lock() {
                        f.get_or_insert(e);
                    }
                    break;
                }
            }
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }

    for (dst, target) in &links {
        std::os::unix::fs::symlink(target, dst).map_err(io_at(dst))?;
        if let Some(o) = options.owner {
            std::os::unix::fs::lchown(dst, Some(o.uid), Some(o.gid)).map_err(io_at(dst))?;
        }
    }

    let report = MaterializeReport {
        method,
        files,
        dirs: tree.dirs.len() - 1,
        links: links.len(),
        bytes: bytes.into_inner(),
        threads,
        elapsed: started.elapsed(),
    };
    tracing::info!(
        runtime = %runtime.display(),
        method = ?report.method,
        files = report.files,
        bytes = report.bytes,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "runtime materialized"
    );
    Ok(report)
}

/// Clones the first file to learn whether the filesystem supports it; the file then stays.
fn probe_clone(
    package: &Path,
    runtime: &Path,
    tree: &Tree,
) -> Result<UsedMethod, MaterializeError> {
    let Some(rel) = tree
        .dirs
        .iter()
        .find_map(|d| d.files.first().map(|name| d.rel.join(name)))
    else {
        return Ok(UsedMethod::ParallelCopy);
    };
    let dst = runtime.join(&rel);
    match reflink_copy::reflink(package.join(&rel), &dst) {
        Ok(()) => {
            fs::remove_file(&dst).map_err(io_at(&dst))?;
            Ok(UsedMethod::Clone)
        }
        Err(e) => {
            tracing::debug!(error = %e, "reflink unsupported here; copying");
            // A failed clone can leave an empty destination behind.
            let _ = fs::remove_file(&dst);
            Ok(UsedMethod::ParallelCopy)
        }
    }
}

/// The process umask, read once per materialization from `/proc/self/status` (setting it to
/// read it would race other threads). Unknown: every bit, so modes are always set explicitly.
fn current_umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let value = line.strip_prefix("Umask:")?.trim();
                u32::from_str_radix(value, 8).ok()
            })
        })
        .unwrap_or(0o777)
}

/// What every worker shares.
struct Job<'a> {
    package: &'a Path,
    runtime: &'a Path,
    tree: &'a Tree,
    method: UsedMethod,
    owner: Option<Ownership>,
    umask: u32,
}

impl Job<'_> {
    /// Copies `range` of directory `d`'s files through descriptors of the source and
    /// destination directories; returns the bytes copied. Stops early once `failed` is set.
    fn copy_chunk(
        &self,
        d: usize,
        range: Range<usize>,
        buf: &mut Vec<u8>,
        failed: &AtomicBool,
    ) -> Result<u64, MaterializeError> {
        let Some(dir) = self.tree.dirs.get(d) else {
            return Ok(0);
        };
        let src_dir_path = self.package.join(&dir.rel);
        let dst_dir_path = self.runtime.join(&dir.rel);
        // Below the roots a directory is never reached through a link.
        let nofollow = !dir.rel.as_os_str().is_empty();
        let src_dir = open_dir(&src_dir_path, nofollow)?;
        let dst_dir = open_dir(&dst_dir_path, nofollow)?;
        let mut bytes = 0;
        for name in dir.files.get(range).unwrap_or_default() {
            if failed.load(Ordering::Relaxed) {
                break;
            }
            let at = Dirs {
                src: (&src_dir, &src_dir_path),
                dst: (&dst_dir, &dst_dir_path),
            };
            bytes += self.copy_one(&at, name, buf)?;
        }
        Ok(bytes)
    }

    /// One file: the source is opened relative to its directory (never through a link), its
    /// mode and size read from the descriptor; the destination is created with its final mode
    /// (set-id bits dropped — a runner has no business with them — and owner write added so
    /// the runner may change its copy), filled by a clone, a write or an in-kernel copy, then
    /// chowned — all through descriptors, so no separate chmod is needed unless the umask took
    /// bits away.
    fn copy_one(
        &self,
        at: &Dirs<'_>,
        name: &OsStr,
        buf: &mut Vec<u8>,
    ) -> Result<u64, MaterializeError> {
        let (src_dir, src_path) = at.src;
        let (dst_dir, dst_path) = at.dst;
        let src = openat(
            src_dir,
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(io::Error::from)
        .map_err(io_in(src_path, name))?;
        let mut src = fs::File::from(src);
        let meta = src.metadata().map_err(io_in(src_path, name))?;
        if !meta.is_file() {
            return Err(MaterializeError::SpecialFile {
                path: src_path.join(name),
            });
        }
        let size = meta.len();
        let perm = (meta.permissions().mode() & 0o777) | 0o200;
        let dst = openat(
            dst_dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(perm),
        )
        .map_err(io::Error::from)
        .map_err(io_in(dst_path, name))?;
        let mut dst = fs::File::from(dst);
        let filled = match self.method {
            // A clone of a small file costs a reflink transaction (shared-extent bookkeeping)
            // for less than a block or two of data; writing it into the page cache is cheaper.
            UsedMethod::Clone if size <= SMALL_FILE => {
                copy_small(&mut src, &mut dst, size, buf).map_err(io_in(dst_path, name))
            }
            UsedMethod::Clone => reflink_copy::reflink_file(&src, &dst).map_err(|source| {
                MaterializeError::CloneUnsupported {
                    path: dst_path.join(name),
                    source,
                }
            }),
            // `io::copy` between two files is `copy_file_range` (or sendfile) in the kernel.
            UsedMethod::ParallelCopy | UsedMethod::SerialCopy => io::copy(&mut src, &mut dst)
                .map(drop)
                .map_err(io_in(dst_path, name)),
        };
        if let Err(e) = filled {
            drop(dst);
            // A failed fill leaves an empty or partial destination behind; the error is what
            // matters.
            let _ = unlinkat(dst_dir, name, UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        if let Some(o) = self.owner {
            std::os::unix::fs::fchown(&dst, Some(o.uid), Some(o.gid))
                .map_err(io_in(dst_path, name))?;
        }
        // Chown clears only set-id bits, which are not set; the umask may have cleared others.
        if perm & self.umask != 0 {
            dst.set_permissions(fs::Permissions::from_mode(perm))
                .map_err(io_in(dst_path, name))?;
        }
        Ok(size)
    }
}

/// The source and destination directories of a chunk: descriptors, and paths for errors.
struct Dirs<'a> {
    src: (&'a fs::File, &'a Path),
    dst: (&'a fs::File, &'a Path),
}

fn open_dir(path: &Path, nofollow: bool) -> Result<fs::File, MaterializeError> {
    let mut flags = OFlag::O_DIRECTORY;
    if nofollow {
        flags |= OFlag::O_NOFOLLOW;
    }
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(io_at(path))
}

/// An error about `name` in `dir`; the path is only built when there is an error.
fn io_in<'a>(dir: &'a Path, name: &'a OsStr) -> impl FnOnce(io::Error) -> MaterializeError + 'a {
    move |source| MaterializeError::Io {
        path: dir.join(name),
        source,
    }
}

/// Files up to this size are written rather than cloned (see `Job::copy_one`).
const SMALL_FILE: u64 = 16 * 1024;

/// Reads a small file whole into `buf` (reused across files) and writes it out. Plain reads
/// until end of file, not `read_to_end`, which asks `fstat` and `lseek` again for a size hint;
/// the size from `fstat` is only a hint here too: a file that grew is still copied whole.
fn copy_small(
    src: &mut fs::File,
    dst: &mut fs::File,
    size: u64,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    use std::io::{Read, Write};
    let want = usize::try_from(size).unwrap_or(0) + 1;
    if buf.len() < want {
        buf.resize(want, 0);
    }
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match src.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    dst.write_all(&buf[..len])
}
